/* The probe set of the flatness diagnostics, and the Hessian columns of metrics.csv (fl.hessian_every):
 * the top eigenvalue and the trace of the Hessian of the global model's loss on the probe, with the
 * probe's batches spread over every rank and their gradients summed exactly, so that the numbers do not
 * depend on the rank count. */
#include "fl_internal.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "fedhet/core.h"

struct FlHessian {
    float *w, *pert;  /* [n_state]: the global state, and the perturbed one */
    float *dlogits;   /* [max_batch * classes] */
    float *work;      /* [2 n_params]: the estimators' vectors */
    NnExact *acc;     /* [n_params] */
    int announced;    /* the BatchNorm note is in the log */
};

int fl_probe_load(FlRun *run)
{
    if (run->probe_x) return FH_OK;
    const DataPartFile *f = &run->data;
    const int64_t N = f->n_rows, n = run->s.sharpness_probe < N ? run->s.sharpness_probe : N;
    const size_t size = (size_t)f->c * f->h * f->w;
    uint8_t *scratch = NULL;
    float *lut = NULL;
    FH_CHECK(fh_alloc_aligned(&run->probe_x, (size_t)n * size * sizeof(float), "probe set"));
    FH_CHECK(fh_calloc(&run->probe_y, (size_t)n, sizeof *run->probe_y, "probe labels"));
    int status = fh_calloc(&scratch, (size_t)n, size, "probe images");
    if (status == FH_OK) status = fh_calloc(&lut, (size_t)f->c * 256, sizeof *lut, "normalisation table");
    if (status == FH_OK) data_normal_lut(lut, f);
    for (int k = 0, at = 0; status == FH_OK && k < f->n_clients; k++) {
        const int64_t take = n * f->offsets[k + 1] / N - n * f->offsets[k] / N;
        if (take > 0)
            status = data_test_read(&run->data, lut, DATA_ROWS_CLIENTS, f->offsets[k], take,
                                    run->probe_x + (size_t)at * size, run->probe_y + at, scratch);
        at += (int)take;
    }
    fh_free(&scratch);
    fh_free(&lut);
    if (status != FH_OK) {
        fh_free(&run->probe_x); /* a later call reads it again rather than use half of it */
        fh_free(&run->probe_y);
    }
    FH_CHECK(status);
    run->n_probe = n;
    return FH_OK;
}

static void add_exact(void *in, void *inout, int *len, MPI_Datatype *type)
{
    /* through memcpy: MPI's buffers need not be 16-byte aligned */
    for (int i = 0; i < *len; i++) {
        NnExact a, b;
        memcpy(&a, (char *)in + (size_t)i * sizeof a, sizeof a);
        memcpy(&b, (char *)inout + (size_t)i * sizeof b, sizeof b);
        b += a;
        memcpy((char *)inout + (size_t)i * sizeof b, &b, sizeof b);
    }
}

/* NnProbeHessian.reduce over the run's ranks: integer sums, the same in any order */
static int reduce_exact(void *ctx, int status, NnExact *acc, int64_t n)
{
    FlComm *c = ctx;
    const int agreed = fl_agree(c, status);
    if (agreed != FH_OK) {
        if (status != FH_OK) return status;
        FH_FAIL(agreed, "Hessian estimate: another rank failed (its message is above)");
    }
    if (n > INT_MAX) FH_FAIL(FH_ERR_USAGE, "Hessian estimate: %lld parameters are more than MPI counts", (long long)n);
    MPI_Datatype type;
    MPI_Op op;
    MPI_Type_contiguous((int)sizeof(NnExact), MPI_BYTE, &type);
    MPI_Type_commit(&type);
    MPI_Op_create(add_exact, 1, &op);
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, acc, (int)n, type, op, c->comm, &req);
    int done = rc == MPI_SUCCESS ? fl_wait(&req) : FH_ERR_MPI;
    MPI_Op_free(&op);
    MPI_Type_free(&type);
    if (done != FH_OK) FH_FAIL(FH_ERR_MPI, "Hessian estimate: summing the probe gradients over the ranks failed");
    return FH_OK;
}

static int has_batchnorm(const NnModel *m)
{
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].type == NN_OP_BATCHNORM) return 1;
    return 0;
}

int fl_hessian_init(FlRun *run)
{
    NnModel *m = &run->work.model;
    FH_CHECK(fh_calloc(&run->hessian, 1, sizeof *run->hessian, "Hessian estimate"));
    FlHessian *h = run->hessian;
    FH_CHECK(fh_alloc_aligned(&h->w, (size_t)m->n_state * sizeof(float), "Hessian: global state"));
    FH_CHECK(fh_alloc_aligned(&h->pert, (size_t)m->n_state * sizeof(float), "Hessian: perturbed state"));
    FH_CHECK(fh_alloc_aligned(&h->work, (size_t)m->n_params * 2 * sizeof(float), "Hessian: vectors"));
    FH_CHECK(fh_alloc_aligned(&h->dlogits, (size_t)m->max_batch * m->classes * sizeof(float), "Hessian: logit gradients"));
    FH_CHECK(fh_alloc_aligned(&h->acc, (size_t)m->n_params * sizeof(NnExact), "Hessian: exact gradient sums"));
    FH_CHECK(nn_model_pattern_alloc(m)); /* what the Hessian-vector products would make on first use */
    FH_CHECK(fl_probe_load(run));
    return FH_OK;
}

void fl_hessian_free(FlRun *run)
{
    FlHessian *h = run->hessian;
    if (!h) return;
    fh_free(&h->w);
    fh_free(&h->pert);
    fh_free(&h->work);
    fh_free(&h->dlogits);
    fh_free(&h->acc);
    fh_free(&run->hessian);
}

int fl_hessian(FlRun *run, int round, double *row)
{
    const FlSettings *s = &run->s;
    NnModel *m = &run->work.model;
    FlHessian *h = run->hessian;
    if (run->comm.rank == 0) nn_vec_copy(h->w, run->global, m->n_state);
    FH_CHECK(fl_bcast(&run->comm, h->w, m->n_state * (int64_t)sizeof(float)));
    if (!h->announced && run->comm.rank == 0 && has_batchnorm(m))
        fh_log_info("hessian: model %s has BatchNorm: the Hessian is of the eval-mode loss (running statistics, "
                    "not batch statistics)", s->model);
    h->announced = 1;
    NnProbeHessian p = {
        .model = m, .x = run->probe_x, .y = run->probe_y, .n_rows = run->n_probe, .batch = m->max_batch,
        .first_batch = run->comm.rank, .stride = run->comm.size, .step = s->hessian_step, .w = h->w, .pert = h->pert,
        .dlogits = h->dlogits, .acc = h->acc, .reduce = reduce_exact, .reduce_ctx = &run->comm,
    };
    const double t0 = fh_time_now();
    double eig = 0.0, trace = 0.0, se = 0.0;
    int iters = 0;
    FH_CHECK(nn_hessian_top_eig(m->n_params, nn_probe_hvp, &p, s->hessian_iters, s->hessian_tol, (uint64_t)s->seed,
                                (uint32_t)round, h->work, &eig, &iters));
    const int64_t power_gradients = p.gradients;
    FH_CHECK(nn_hessian_trace(m->n_params, nn_probe_hvp, &p, s->hessian_samples, (uint64_t)s->seed, (uint32_t)round,
                              h->work, &trace, &se));
    if (run->comm.rank == 0) {
        row[FL_COL_hessian_max_eig] = eig;
        row[FL_COL_hessian_trace] = trace;
        char spread[64] = "";
        if (s->hessian_samples > 1) snprintf(spread, sizeof spread, " +- %.2g", se);
        fh_log_info("hessian round %d: max eigenvalue %.6g (%d of at most %d power iterations), trace %.6g%s "
                    "(%d Rademacher samples); %lld probe gradients (%lld power, %lld trace) of %lld rows in %.2f s",
                    round + 1, eig, iters, s->hessian_iters, trace, spread, s->hessian_samples, (long long)p.gradients,
                    (long long)power_gradients, (long long)(p.gradients - power_gradients), (long long)run->n_probe,
                    fh_time_now() - t0);
    }
    return FH_OK;
}
