/* Curvature of a loss from Hessian-vector products: the top eigenvalue by power iteration, the trace by
 * Hutchinson's estimator, and the products themselves for a model on a probe set by central differences
 * of gradients with the activation pattern held (so that no kink sits between the two points), summed
 * exactly (so that the numbers do not depend on how the probe is split). */
#include <math.h>
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/nn.h"
#include "fedhet/rng.h"

static int check_finite(double x, const char *what)
{
    if (!isfinite(x)) FH_FAIL(FH_ERR_NUMERIC, "Hessian estimate: %s is not finite", what);
    return FH_OK;
}

int nn_hessian_top_eig(int64_t n, NnHvFn hv, void *ctx, int max_iters, double tol, uint64_t seed, uint32_t ctr,
                       float *work, double *eig, int *iters)
{
    float *v = work, *hv_out = work + n;
    FhRng rng;
    fh_rng_init(&rng, seed, FH_RNG_HESSIAN, ctr, 0, 0);
    for (int64_t i = 0; i < n; i++) v[i] = (float)fh_rng_normal(&rng);
    double norm = sqrt(nn_vec_dot_ordered(v, v, n)), lambda = 0.0;
    *iters = 0;
    for (int k = 0; k < max_iters; k++) {
        for (int64_t i = 0; i < n; i++) v[i] = (float)(v[i] / norm);
        FH_CHECK(hv(ctx, v, hv_out));
        *iters = k + 1;
        const double previous = lambda;
        lambda = nn_vec_dot_ordered(v, hv_out, n);
        FH_CHECK(check_finite(lambda, "the Rayleigh quotient of the power iteration"));
        norm = sqrt(nn_vec_dot_ordered(hv_out, hv_out, n));
        if (k > 0 && fabs(lambda - previous) <= tol * fabs(lambda)) break;
        if (norm == 0.0) break; /* H v = 0: v is an eigenvector of eigenvalue 0 */
        memcpy(v, hv_out, (size_t)n * sizeof *v);
    }
    *eig = lambda;
    return FH_OK;
}

int nn_hessian_trace(int64_t n, NnHvFn hv, void *ctx, int samples, uint64_t seed, uint32_t ctr, float *work,
                     double *trace, double *std_error)
{
    float *z = work, *hz = work + n;
    double sum = 0.0, sum_sq = 0.0;
    for (int s = 0; s < samples; s++) {
        FhRng rng;
        fh_rng_init(&rng, seed, FH_RNG_HESSIAN, ctr, (uint32_t)s + 1, 0);
        uint32_t bits = 0;
        for (int64_t i = 0; i < n; i++) {
            if ((i & 31) == 0) bits = fh_rng_u32(&rng);
            z[i] = (bits >> (i & 31)) & 1u ? 1.0f : -1.0f;
        }
        FH_CHECK(hv(ctx, z, hz));
        const double q = nn_vec_dot_ordered(z, hz, n);
        FH_CHECK(check_finite(q, "z.Hz of a Hutchinson sample"));
        sum += q;
        sum_sq += q * q;
    }
    *trace = samples > 0 ? sum / samples : NAN;
    if (samples > 1) {
        const double var = (sum_sq - sum * sum / samples) / (samples - 1);
        *std_error = sqrt(var > 0.0 ? var / samples : 0.0);
    } else {
        *std_error = NAN;
    }
    return FH_OK;
}

double nn_hessian_fd_eps(const float *w, const float *v, int64_t n, double step)
{
    const double wn = sqrt(nn_vec_dot_ordered(w, w, n)), vn = sqrt(nn_vec_dot_ordered(v, v, n));
    return vn > 0.0 ? step * (wn > 1.0 ? wn : 1.0) / vn : 0.0;
}

/* ---- exact sums ---- */

#define EXACT_SCALE 281474976710656.0 /* 2^48 */

int nn_exact_add(NnExact *acc, const float *x, int64_t n, int sign, const char *what)
{
    for (int64_t j = 0; j < n; j++) {
        const double scaled = (double)x[j] * EXACT_SCALE; /* exact: a float times a power of two */
        if (!(fabs(scaled) < EXACT_SCALE * EXACT_SCALE))
            FH_FAIL(FH_ERR_NUMERIC, "%s: value %d is %g (not finite, or beyond 2^48)", what, (int)j, (double)x[j]);
        const NnExact q = (NnExact)scaled; /* truncated toward zero: the same on every rank */
        acc[j] += sign > 0 ? q : -q;
    }
    return FH_OK;
}

double nn_exact_value(NnExact a) { return (double)a / EXACT_SCALE; }

/* ---- Hessian-vector products of a model on a probe set ---- */

/* the CE gradient summed over `count` rows at m->state into m->grad */
static int batch_gradient(NnProbeHessian *p, const float *x, const int32_t *y, int count)
{
    NnModel *m = p->model;
    nn_model_zero_grad(m);
    FH_CHECK(nn_model_forward(m, x, count));
    memset(p->dlogits, 0, (size_t)count * m->classes * sizeof(float));
    nn_softmax_xent(p->dlogits, NULL, nn_model_logits(m), y, NULL, NULL, count, m->classes);
    nn_vec_scale(p->dlogits, (float)count, (int64_t)count * m->classes); /* mean -> sum over the rows */
    nn_model_backward(m, p->dlogits, NULL);
    return FH_OK;
}

static void perturb(float *pert, const float *w, const float *v, double step, int64_t n)
{
    for (int64_t j = 0; j < n; j++) pert[j] = (float)((double)w[j] + step * v[j]);
}

/* acc = sum over this process's batches of g(w + eps v) - g(w - eps v), each batch's pair with the
 * activation pattern of w, so that no ReLU or max-pool kink lies between the two points */
static int probe_difference(NnProbeHessian *p, const float *v, double eps)
{
    NnModel *m = p->model;
    const int64_t row = m->tensors[m->input].size, n_batches = (p->n_rows + p->batch - 1) / p->batch;
    for (int64_t b = p->first_batch; b < n_batches; b += p->stride) {
        const int64_t first = b * p->batch;
        const int count = (int)(p->n_rows - first < p->batch ? p->n_rows - first : p->batch);
        const float *x = p->x + first * row;
        m->state = (float *)p->w; /* eval mode: the forward reads the state only */
        m->pattern = NN_PATTERN_RECORD;
        FH_CHECK(nn_model_forward(m, x, count));
        m->pattern = NN_PATTERN_REPLAY;
        m->state = p->pert;
        perturb(p->pert, p->w, v, eps, m->n_params);
        FH_CHECK(batch_gradient(p, x, p->y + first, count));
        FH_CHECK(nn_exact_add(p->acc, m->grad, m->n_params, +1, "probe gradient"));
        perturb(p->pert, p->w, v, -eps, m->n_params);
        FH_CHECK(batch_gradient(p, x, p->y + first, count));
        FH_CHECK(nn_exact_add(p->acc, m->grad, m->n_params, -1, "probe gradient"));
    }
    p->gradients += 2;
    return FH_OK;
}

int nn_probe_hvp(void *ctx, const float *v, float *hv)
{
    NnProbeHessian *p = ctx;
    NnModel *m = p->model;
    const int64_t n = m->n_params;
    if (p->batch < 1 || p->batch > m->max_batch)
        FH_FAIL(FH_ERR_USAGE, "Hessian probe batch %d is outside 1..%d (the model's batch)", p->batch, m->max_batch);
    if (p->n_rows < 1) FH_FAIL(FH_ERR_USAGE, "Hessian probe set is empty");
    if (!(p->step > 0.0)) FH_FAIL(FH_ERR_USAGE, "Hessian finite-difference step %g is not positive", p->step);
    FH_CHECK(nn_model_pattern_alloc(m));
    const double eps = nn_hessian_fd_eps(p->w, v, n, p->step);
    float *saved = m->state;
    const int training = m->training;
    nn_model_set_training(m, 0);
    memset(p->acc, 0, (size_t)n * sizeof *p->acc);
    nn_vec_copy(p->pert, p->w, m->n_state); /* the buffers, unperturbed */
    int status = probe_difference(p, v, eps);
    m->pattern = NN_PATTERN_OFF;
    m->state = saved;
    nn_model_set_training(m, training);
    if (p->reduce) {
        /* every process takes part, failed or not, so that none waits for ever */
        const int reduced = p->reduce(p->reduce_ctx, status, p->acc, n);
        if (status == FH_OK) status = reduced;
    }
    FH_CHECK(status);
    /* g(w +- eps v) are sums over the rows: the loss is their mean */
    const double scale = eps > 0.0 ? 1.0 / (2.0 * eps * (double)p->n_rows) : 0.0;
    for (int64_t j = 0; j < n; j++) hv[j] = (float)(nn_exact_value(p->acc[j]) * scale);
    return FH_OK;
}
