/* Optimisers on flat vectors (PyTorch's update rules), gradient clipping, BLAS level-1 helpers, threads. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <stdio.h>
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/nn.h"
#include "kernels.h"


/* ============================== vector helpers ============================== */

/* cblas takes int lengths: walk longer vectors in pieces */
#define VEC_PIECE ((int64_t)1 << 30)

void nn_vec_axpy(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i += VEC_PIECE)
        cblas_saxpy((int)(n - i < VEC_PIECE ? n - i : VEC_PIECE), a, x + i, 1, y + i, 1);
}

void nn_vec_scale(float *x, float a, int64_t n)
{
    for (int64_t i = 0; i < n; i += VEC_PIECE) cblas_sscal((int)(n - i < VEC_PIECE ? n - i : VEC_PIECE), a, x + i, 1);
}

/* Copies and fills of whole state vectors are memory-bound passes: on several threads each copies its own
 * pieces (bits are those of a plain copy). Overlapping ranges keep memmove's one-thread semantics. */
#define COPY_PIECE ((int64_t)1 << 14)

void nn_vec_copy(float *dst, const float *src, int64_t n)
{
    if (n <= 0 || dst == src) return;
    if (dst < src + n && src < dst + n) {
        memmove(dst, src, sizeof(float) * (size_t)n);
        return;
    }
    const int64_t pieces = (n + COPY_PIECE - 1) / COPY_PIECE;
    NN_PARALLEL_FOR(n, for (int64_t p = 0; p < pieces; p++) {
        const int64_t i = p * COPY_PIECE, len = n - i < COPY_PIECE ? n - i : COPY_PIECE;
        memcpy(dst + i, src + i, sizeof(float) * (size_t)len);
    });
}

void nn_vec_zero(float *x, int64_t n)
{
    const int64_t pieces = n > 0 ? (n + COPY_PIECE - 1) / COPY_PIECE : 0;
    NN_PARALLEL_FOR(n, for (int64_t p = 0; p < pieces; p++) {
        const int64_t i = p * COPY_PIECE, len = n - i < COPY_PIECE ? n - i : COPY_PIECE;
        memset(x + i, 0, sizeof(float) * (size_t)len);
    });
}

void nn_vec_add_scaled(float *out, const float *x, float a, const float *y, int64_t n)
{
    NN_PARALLEL_FOR(n, for (int64_t j = 0; j < n; j++) out[j] = x[j] + a * y[j];);
}

float nn_vec_dot(const float *x, const float *y, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i += VEC_PIECE)
        s += cblas_dsdot((int)(n - i < VEC_PIECE ? n - i : VEC_PIECE), x + i, 1, y + i, 1);
    return (float)s;
}

float nn_vec_norm(const float *x, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i += VEC_PIECE) {
        double part = cblas_snrm2((int)(n - i < VEC_PIECE ? n - i : VEC_PIECE), x + i, 1);
        s += part * part;
    }
    return (float)sqrt(s);
}

/* Accumulated in double, lane by lane (`omp simd` reduction: a fixed order for a given build), for the
 * method code's norms and cosines, which must not lose the small components of long vectors. */
double nn_vec_dot_f64(const float *x, const float *y, int64_t n)
{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; j++) s += (double)x[j] * (double)y[j];
    return s;
}

double nn_vec_norm_f64(const float *x, int64_t n)
{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; j++) s += (double)x[j] * (double)x[j];
    return sqrt(s);
}

double nn_vec_dist_f64(const float *x, const float *y, int64_t n)
{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; j++) {
        const double d = (double)x[j] - (double)y[j];
        s += d * d;
    }
    return sqrt(s);
}

double nn_vec_dot_ordered(const float *x, const float *y, int64_t n)
{
    double s = 0.0;
    for (int64_t j = 0; j < n; j++) s += (double)x[j] * (double)y[j];
    return s;
}

double nn_vec_dist2_ordered(const float *x, const float *y, int64_t n)
{
    double s = 0.0;
    for (int64_t j = 0; j < n; j++) {
        const double d = (double)x[j] - (double)y[j];
        s += d * d;
    }
    return s;
}

void nn_set_threads(int n_threads)
{
    openblas_set_num_threads(n_threads > 0 ? n_threads : 1);
    omp_set_num_threads(n_threads > 0 ? n_threads : 1); /* oneDNN's and the kernels' threads */
}

int nn_threads_problem(int n_threads, char *why, size_t size)
{
    *why = '\0';
    if (n_threads <= 1) return 0;
    cpu_set_t allowed;
    int cores = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : n_threads;
    if (cores < n_threads)
        snprintf(why, size, "train.threads = %d but this process may run on %d core%s (mpirun binds each rank to "
                 "one core by default: add --bind-to none, or --map-by slot:PE=%d; srun: --cpus-per-task=%d)",
                 n_threads, cores, cores == 1 ? "" : "s", n_threads, n_threads);
    else if (openblas_get_parallel() != 2)
        snprintf(why, size, "train.threads = %d with OpenBLAS's %s build: its threads and OpenMP's (oneDNN, the "
                 "kernels) take turns spinning on the same cores; link OpenBLAS's OpenMP build "
                 "(libopenblas-openmp-dev, `make deps`)", n_threads, openblas_get_parallel() == 1 ? "pthread" : "serial");
    return *why != '\0';
}

double nn_lr_of_round(double lr, double decay, int round)
{
    for (int t = 0; t < round; t++) lr = nn_lr_next(lr, decay);
    return lr;
}

float nn_clip_grad_norm(float *grad, int64_t n, float max_norm)
{
    float norm = nn_vec_norm(grad, n);
    /* torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1 */
    float coef = max_norm / (norm + 1e-6f);
    if (coef < 1.0f) nn_vec_scale(grad, coef, n);
    return norm;
}

/* ============================== SGD ============================== */

int nn_sgd_init(NnSgd *opt, int64_t n, float momentum, float weight_decay, int nesterov)
{
    memset(opt, 0, sizeof *opt);
    if (momentum < 0.0f || weight_decay < 0.0f)
        FH_FAIL(FH_ERR_USAGE, "SGD: momentum %g and weight decay %g must be >= 0", (double)momentum,
                (double)weight_decay);
    if (nesterov && momentum <= 0.0f) FH_FAIL(FH_ERR_USAGE, "SGD: nesterov needs momentum > 0");
    opt->n = n;
    opt->momentum = momentum;
    opt->weight_decay = weight_decay;
    opt->nesterov = nesterov;
    if (momentum > 0.0f) FH_CHECK(fh_alloc_aligned(&opt->buf, sizeof(float) * (size_t)n, "SGD momentum buffer"));
    return FH_OK;
}

void nn_sgd_step(NnSgd *opt, float *params, const float *grad, float lr)
{
    const float mom = opt->momentum, wd = opt->weight_decay, damp = 1.0f - opt->dampening;
    const int64_t n = opt->n;
    float *buf = opt->buf;
    const int nesterov = opt->nesterov;
    /* one straight loop per case, so that each vectorises */
    if (!buf) {
        NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) params[i] -= lr * (grad[i] + wd * params[i]););
    } else if (opt->steps == 0) { /* PyTorch: the first step's buffer is the gradient itself */
        NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) {
            float g = grad[i] + wd * params[i];
            buf[i] = g;
            params[i] -= lr * (nesterov ? g + mom * g : g);
        });
    } else if (nesterov) {
        NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) {
            float g = grad[i] + wd * params[i];
            buf[i] = mom * buf[i] + damp * g;
            params[i] -= lr * (g + mom * buf[i]);
        });
    } else {
        NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) {
            buf[i] = mom * buf[i] + damp * (grad[i] + wd * params[i]);
            params[i] -= lr * buf[i];
        });
    }
    opt->steps++;
}

void nn_sgd_reset(NnSgd *opt)
{
    opt->steps = 0;
    if (opt->buf) memset(opt->buf, 0, sizeof(float) * (size_t)opt->n);
}

void nn_sgd_free(NnSgd *opt)
{
    fh_free(&opt->buf);
    memset(opt, 0, sizeof *opt);
}

/* ============================== Adam / AdamW ============================== */

int nn_adam_init(NnAdam *opt, int64_t n, float beta1, float beta2, float eps, float weight_decay, int decoupled)
{
    memset(opt, 0, sizeof *opt);
    if (!(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f) || eps <= 0.0f || weight_decay < 0.0f)
        FH_FAIL(FH_ERR_USAGE, "Adam: betas (%g, %g) must be in [0, 1), eps %g > 0, weight decay %g >= 0",
                (double)beta1, (double)beta2, (double)eps, (double)weight_decay);
    opt->n = n;
    opt->beta1 = beta1;
    opt->beta2 = beta2;
    opt->eps = eps;
    opt->weight_decay = weight_decay;
    opt->decoupled = decoupled;
    FH_CHECK(fh_alloc_aligned(&opt->m, sizeof(float) * (size_t)n, "Adam first moment"));
    FH_CHECK(fh_alloc_aligned(&opt->v, sizeof(float) * (size_t)n, "Adam second moment"));
    return FH_OK;
}

void nn_adam_step(NnAdam *opt, float *params, const float *grad, float lr)
{
    opt->steps++;
    const float b1 = opt->beta1, b2 = opt->beta2, wd = opt->weight_decay;
    const float bc1 = 1.0f - powf(b1, (float)opt->steps), bc2 = 1.0f - powf(b2, (float)opt->steps);
    const float step = lr / bc1, inv_sqrt_bc2 = 1.0f / sqrtf(bc2), eps = opt->eps;
    const int decoupled = opt->decoupled;
    const int64_t n = opt->n;
    float *m = opt->m, *v = opt->v;
    NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) {
        float g = grad[i];
        if (decoupled) params[i] *= 1.0f - lr * wd;
        else g += wd * params[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        params[i] -= step * m[i] / (sqrtf(v[i]) * inv_sqrt_bc2 + eps);
    });
}

void nn_adam_reset(NnAdam *opt)
{
    opt->steps = 0;
    memset(opt->m, 0, sizeof(float) * (size_t)opt->n);
    memset(opt->v, 0, sizeof(float) * (size_t)opt->n);
}

void nn_adam_free(NnAdam *opt)
{
    fh_free(&opt->m);
    fh_free(&opt->v);
    memset(opt, 0, sizeof *opt);
}
