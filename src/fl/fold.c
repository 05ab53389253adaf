/* The folded server step (docs/architecture.md "Aggregation"): every rank sums its clients' terms into exact
 * partial sums (nn_sum_*), which MPI_SUM adds at rank 0 a chunk at a time. The segments of a round's sums: the
 * weighted average of the states, the method's sums (AlgoServerUpdate.sums), and the clients' summed change over
 * the parameters, D = sum_i (w_i - w^t), from which rank 0 takes metrics.csv's divergence without any client's
 * model. Two ways to the same bits:
 * - early: when the coefficients follow from the round's plan alone (weights from the clients' sizes, no method
 *   coefficients), each rank folds a record into its whole-length partial sums as soon as the client has trained,
 *   and keeps only its header;
 * - held: otherwise (weights from the uploads' scalars) the records stay until rank 0 has sent the coefficients,
 *   and are folded a chunk at a time as the chunks are reduced.
 * A run takes early when its held records would need more memory than the whole-length sums. */
#include "fl_internal.h"

#include <string.h>

#include "fedhet/core.h"

static const AlgoSum state_sum = { .source = ALGO_SUM_STATE, .coef = ALGO_COEF_AVERAGE };
static const AlgoSum delta_sum = { .source = ALGO_SUM_DELTA, .coef = ALGO_COEF_ONE };

/* segment s: what it sums and its length (the method's sums over the state, D over the parameters) */
static const AlgoSum *segment_sum(const FlFold *f, const FlRun *run, int s)
{
    return s == 0 ? &state_sum : s <= f->n_sums ? &run->work.ops.update.sums[s - 1] : &delta_sum;
}
static int64_t segment_len(const FlFold *f, const FlRun *run, int s)
{
    return s <= f->n_sums ? run->n_state : run->n_params;
}

int fl_fold_init(FlFold *f, const FlRun *run, int m_max, int held_records)
{
    memset(f, 0, sizeof *f);
    const AlgoServerUpdate *up = &run->work.ops.update;
    f->n_sums = up->n_sums;
    f->n_segments = 2 + up->n_sums;
    for (int s = 0; s < f->n_segments; s++) {
        f->offset[s] = f->total;
        f->total += segment_len(f, run, s);
    }
    int plan_coefficients = run->work.ops.weights->from_plan;
    for (int k = 0; k < up->n_sums; k++) plan_coefficients &= up->sums[k].coef != ALGO_COEF_OWN;
    const double held_bytes = (double)held_records * (double)run->layout.bytes;
    const double sums_bytes = (double)NN_SUM_BINS * sizeof(double) * (double)f->total;
    const int trains = run->comm.rank != 0 || run->comm.size == 1;
    f->early = run->work.ops.folds && plan_coefficients && held_bytes > sums_bytes;
    FH_CHECK(fh_calloc(&f->coef, (size_t)(1 + up->n_sums) * m_max + 1, sizeof *f->coef, "aggregation coefficients"));
    FH_CHECK(fh_alloc_aligned(&f->chunks, (size_t)FL_FOLD_BYTES, "partial sums"));
    if (f->early && trains) {
        FH_CHECK(fh_alloc_aligned(&f->acc, (size_t)sums_bytes, "the round's partial sums"));
        /* up to half the partial sums' size in records, which then pass through memory once per batch */
        const double fit = sums_bytes / (2.0 * (double)run->layout.bytes);
        f->batch_cap = fit < 1 ? 1 : fit > FL_FOLD_BATCH_MAX ? FL_FOLD_BATCH_MAX : (int)fit;
        if (f->batch_cap > held_records) f->batch_cap = held_records > 0 ? held_records : 1;
        FH_CHECK(fh_alloc_aligned(&f->batch, (size_t)f->batch_cap * run->layout.bytes, "records being folded"));
        FH_CHECK(fh_calloc(&f->batch_slot, (size_t)f->batch_cap, sizeof *f->batch_slot, "records being folded"));
    }
    if (f->early) {
        FH_CHECK(fh_calloc(&f->plan, (size_t)m_max, sizeof *f->plan, "the plan's uploads"));
        FH_CHECK(fh_calloc(&f->plan_weights, (size_t)m_max, sizeof *f->plan_weights, "the plan's weights"));
    }
    return FH_OK;
}

void fl_fold_free(FlFold *f)
{
    fh_free(&f->coef);
    fh_free(&f->chunks);
    fh_free(&f->acc);
    fh_free(&f->batch);
    fh_free(&f->batch_slot);
    fh_free(&f->plan);
    fh_free(&f->plan_weights);
}

int fl_fold_plan(FlFold *f, FlRun *run, AlgoServerCtx *sctx, const int32_t *selected, int n_selected)
{
    if (!f->early) return FH_OK;
    for (int i = 0; i < n_selected; i++)
        f->plan[i] = (AlgoUpload){ .client = selected[i], .n_samples = run->client_sizes[selected[i]] };
    FH_CHECK(algo_ops_weights(&run->work.ops, sctx, f->plan, n_selected, f->plan_weights));
    FH_CHECK(algo_sum_coefficients(&run->work.ops.update, sctx, f->plan, n_selected, f->plan_weights, f->coef));
    if (f->acc) nn_sum_zero(f->acc, f->total);
    f->batch_n = 0;
    return FH_OK;
}

/* coefficient of selection slot i in segment s (D's: 1) */
static double slot_coef(const FlFold *f, int s, int i, int n_selected)
{
    return s <= f->n_sums ? f->coef[(size_t)s * n_selected + i] : 1.0;
}

static void add_record(const FlFold *f, const FlRun *run, double *acc, int s, const float *state, double coef,
                       int64_t lo, int64_t n)
{
    algo_sum_add(acc, segment_sum(f, run, s), coef, state, state + run->n_state, run->global, run->n_state, lo, n);
}

void *fl_fold_next_record(const FlFold *f, const FlRun *run)
{
    return f->batch + (size_t)f->batch_n * run->layout.bytes;
}

void fl_fold_record(FlFold *f, const FlRun *run, int slot, int n_selected)
{
    f->batch_slot[f->batch_n++] = slot;
    if (f->batch_n == f->batch_cap) fl_fold_flush(f, run, n_selected);
}

void fl_fold_flush(FlFold *f, const FlRun *run, int n_selected)
{
    for (int s = 0; s < f->n_segments && f->batch_n > 0; s++)
        for (int64_t lo = 0, len = segment_len(f, run, s); lo < len; lo += FL_FOLD_CACHED) {
            const int64_t n = len - lo < FL_FOLD_CACHED ? len - lo : FL_FOLD_CACHED;
            for (int r = 0; r < f->batch_n; r++) /* every record while the bins are cached */
                add_record(f, run, f->acc + NN_SUM_BINS * (f->offset[s] + lo), s,
                           fl_record_state(f->batch + (size_t)r * run->layout.bytes, &run->layout),
                           slot_coef(f, s, f->batch_slot[r], n_selected), lo, n);
        }
    f->batch_n = 0;
}

int fl_fold_coefficients(FlFold *f, FlRun *run, AlgoServerCtx *sctx, const AlgoUpload *u, int m, const double *p)
{
    for (int i = 0; i < m; i++) /* coefficients go by selection slot: the selection is in ascending id */
        if (u[i].client != sctx->selected[i])
            FH_FAIL(FH_ERR_USAGE, "round %d: upload %d is client %d, the selection's slot %d is client %d",
                    sctx->round + 1, i, u[i].client, i, (int)sctx->selected[i]);
    if (f->early) { /* the plan's: the uploads must agree with it */
        for (int i = 0; i < m; i++)
            if (u[i].n_samples != f->plan[i].n_samples)
                FH_FAIL(FH_ERR_USAGE, "round %d: client %d trained on %lld samples, its partition size is %lld: the "
                        "folded weights assumed the latter", sctx->round + 1, u[i].client, (long long)u[i].n_samples,
                        (long long)f->plan[i].n_samples);
        return FH_OK;
    }
    return algo_sum_coefficients(&run->work.ops.update, sctx, u, m, p, f->coef);
}

int fl_fold_reduce(FlFold *f, FlRun *run, const char *records, const int *record_slot, int n_records, int n_selected,
                   float *const *out, double *delta)
{
    const int root = run->comm.rank == 0, several = run->comm.size > 1;
    MPI_Request req = MPI_REQUEST_NULL;
    double *pending = NULL;
    float *pending_out = NULL;
    double *pending_delta = NULL; /* D's segment is kept in double: one client's divergence is then exactly 0 */
    int64_t pending_n = 0;
    int which = 0;
    for (int s = 0; s < f->n_segments; s++)
        for (int64_t lo = 0, len = segment_len(f, run, s); lo < len; lo += FL_FOLD_CHUNK) {
            const int64_t n = len - lo < FL_FOLD_CHUNK ? len - lo : FL_FOLD_CHUNK;
            double *acc = f->chunks + (size_t)which * NN_SUM_BINS * FL_FOLD_CHUNK;
            const double *mine = acc; /* this rank's part of the chunk */
            if (f->acc) mine = f->acc + NN_SUM_BINS * (f->offset[s] + lo);
            else {
                nn_sum_zero(acc, n);
                for (int64_t sub = 0; sub < n; sub += FL_FOLD_CACHED) /* every record while the bins are cached */
                    for (int r = 0; r < n_records; r++)
                        add_record(f, run, acc + NN_SUM_BINS * sub, s,
                                   fl_record_state((void *)(records + (size_t)r * run->layout.bytes), &run->layout),
                                   slot_coef(f, s, record_slot[r], n_selected), lo + sub,
                                   n - sub < FL_FOLD_CACHED ? n - sub : FL_FOLD_CACHED);
            }
            if (pending) {
                FH_CHECK(fl_wait_busy(&req));
                if (root && pending_out) nn_sum_result(pending, pending_n, pending_out);
                if (root && pending_delta) nn_sum_result_f64(pending, pending_n, pending_delta);
            }
            if (several) { /* rank 0, training none, adds the zeros the branch above left in acc */
                if (MPI_Ireduce(root ? MPI_IN_PLACE : mine, root ? acc : NULL, (int)(NN_SUM_BINS * n), MPI_DOUBLE,
                                MPI_SUM, 0, run->comm.comm, &req) != MPI_SUCCESS)
                    FH_FAIL(FH_ERR_MPI, "reducing the partial sums failed");
            }
            pending = root && several ? acc : (double *)mine;
            pending_n = n;
            pending_out = root && s <= f->n_sums ? out[s] + lo : NULL;
            pending_delta = root && s > f->n_sums ? delta + lo : NULL;
            which ^= 1;
        }
    if (pending && several) FH_CHECK(fl_wait_busy(&req));
    if (pending && root && pending_out) nn_sum_result(pending, pending_n, pending_out);
    if (pending && root && pending_delta) nn_sum_result_f64(pending, pending_n, pending_delta);
    return FH_OK;
}

void fl_fold_delta_gathered(const FlRun *run, const AlgoUpload *u, int m, double *out)
{
    double acc[NN_SUM_BINS * NN_SUM_BLOCK];
    for (int64_t lo = 0; lo < run->n_params; lo += NN_SUM_BLOCK) {
        const int64_t n = run->n_params - lo < NN_SUM_BLOCK ? run->n_params - lo : NN_SUM_BLOCK;
        nn_sum_zero(acc, n);
        for (int i = 0; i < m; i++)
            algo_sum_add(acc, &delta_sum, 1.0, u[i].state, u[i].vecs, run->global, run->n_state, lo, n);
        nn_sum_result_f64(acc, n, out + lo);
    }
}

double fl_divergence_sum(const FlRun *run, double drift2_sum, int m, const double *delta_sum, const float *next)
{
    double cross = 0.0, d2 = 0.0;
    for (int64_t j = 0; j < run->n_params; j++) {
        const double d = (double)next[j] - (double)run->global[j];
        cross += delta_sum[j] * d;
        d2 += d * d;
    }
    return drift2_sum - 2.0 * cross + (double)m * d2;
}
