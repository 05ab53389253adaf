/* The Hessian estimators (src/nn/hessian.c): power iteration and Hutchinson on linear least squares, whose
 * Hessian X^T X / n is known; a tiny mlp's top eigenvalue and trace against the eigenvalues of its full
 * finite-difference Hessian; activation patterns (a replay gives a plain pass's bits; a step that crosses
 * kinks changes nothing); exact sums that do not depend on the order or on how the probe is split. */
#include "test.h"

#include <stdlib.h>

#include "fedhet/nn.h"
#include "fedhet/rng.h"

/* eigenvalues of the symmetric d x d matrix a (destroyed) into ev, by cyclic Jacobi rotations */
static void jacobi_eigenvalues(double *a, int d, double *ev)
{
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0.0;
        for (int p = 0; p < d; p++)
            for (int q = p + 1; q < d; q++) off += a[p * d + q] * a[p * d + q];
        if (off < 1e-26) break;
        for (int p = 0; p < d; p++)
            for (int q = p + 1; q < d; q++) {
                if (fabs(a[p * d + q]) < 1e-300) continue;
                const double theta = (a[q * d + q] - a[p * d + p]) / (2 * a[p * d + q]);
                const double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1));
                const double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < d; k++) { /* columns p, q */
                    const double akp = a[k * d + p], akq = a[k * d + q];
                    a[k * d + p] = c * akp - s * akq;
                    a[k * d + q] = s * akp + c * akq;
                }
                for (int k = 0; k < d; k++) { /* rows p, q */
                    const double apk = a[p * d + k], aqk = a[q * d + k];
                    a[p * d + k] = c * apk - s * aqk;
                    a[q * d + k] = s * apk + c * aqk;
                }
            }
    }
    for (int i = 0; i < d; i++) ev[i] = a[i * d + i];
}

static double largest_magnitude(const double *ev, int d)
{
    double best = ev[0];
    for (int i = 1; i < d; i++)
        if (fabs(ev[i]) > fabs(best)) best = ev[i];
    return best;
}

/* ---- linear least squares: L(w) = |Xw - y|^2 / 2n, gradient X^T (Xw - y) / n, Hessian X^T X / n ---- */

enum { LS_N = 400, LS_D = 12 };
typedef struct {
    float x[LS_N * LS_D], y[LS_N], w[LS_D];
    int products;
} LeastSquares;

static void ls_gradient(const LeastSquares *ls, const float *w, float *g)
{
    float r[LS_N];
    for (int i = 0; i < LS_N; i++) {
        float s = -ls->y[i];
        for (int j = 0; j < LS_D; j++) s += ls->x[i * LS_D + j] * w[j];
        r[i] = s;
    }
    for (int j = 0; j < LS_D; j++) {
        float s = 0.0f;
        for (int i = 0; i < LS_N; i++) s += ls->x[i * LS_D + j] * r[i];
        g[j] = s / LS_N;
    }
}

/* central differences of the float gradient, with the step the model estimator uses */
static int ls_hvp(void *ctx, const float *v, float *hv)
{
    LeastSquares *ls = ctx;
    const double eps = nn_hessian_fd_eps(ls->w, v, LS_D, 1e-3);
    float wp[LS_D], wm[LS_D], gp[LS_D], gm[LS_D];
    for (int j = 0; j < LS_D; j++) {
        wp[j] = (float)(ls->w[j] + eps * v[j]);
        wm[j] = (float)(ls->w[j] - eps * v[j]);
    }
    ls_gradient(ls, wp, gp);
    ls_gradient(ls, wm, gm);
    for (int j = 0; j < LS_D; j++) hv[j] = (float)(((double)gp[j] - gm[j]) / (2 * eps));
    ls->products++;
    return FH_OK;
}

static void ls_make(LeastSquares *ls)
{
    FhRng rng;
    fh_rng_init(&rng, 11, FH_RNG_TEST, 0, 0, 0);
    for (int i = 0; i < LS_N; i++) {
        for (int j = 0; j < LS_D; j++) ls->x[i * LS_D + j] = (float)(fh_rng_normal(&rng) * (0.5 + 0.25 * j));
        ls->y[i] = (float)fh_rng_normal(&rng);
    }
    for (int j = 0; j < LS_D; j++) ls->w[j] = (float)fh_rng_normal(&rng);
    ls->products = 0;
}

static void test_least_squares(void)
{
    static LeastSquares ls;
    ls_make(&ls);
    double h[LS_D * LS_D], ev[LS_D], trace = 0.0;
    for (int p = 0; p < LS_D; p++)
        for (int q = 0; q < LS_D; q++) {
            double s = 0.0;
            for (int i = 0; i < LS_N; i++) s += (double)ls.x[i * LS_D + p] * ls.x[i * LS_D + q];
            h[p * LS_D + q] = s / LS_N;
        }
    for (int p = 0; p < LS_D; p++) trace += h[p * LS_D + p];
    jacobi_eigenvalues(h, LS_D, ev);
    const double top = largest_magnitude(ev, LS_D);
    float work[2 * LS_D];
    double eig = 0.0, est = 0.0, se = 0.0;
    int iters = 0;
    CHECK_OK(nn_hessian_top_eig(LS_D, ls_hvp, &ls, 200, 1e-7, 5, 0, work, &eig, &iters));
    CHECK_NEAR(eig, top, 0.01 * top);
    CHECK(iters < 200); /* converged */
    CHECK(ls.products == iters);
    ls.products = 0;
    CHECK_OK(nn_hessian_trace(LS_D, ls_hvp, &ls, 400, 5, 0, work, &est, &se));
    CHECK_NEAR(est, trace, 0.01 * trace);
    CHECK(ls.products == 400);
    CHECK(se > 0 && se < 0.005 * trace); /* the 1 % above is not luck: it is several standard errors */
    /* the same seed and counter give the same numbers; another counter other vectors */
    double again = 0.0, other = 0.0, se2 = 0.0;
    CHECK_OK(nn_hessian_trace(LS_D, ls_hvp, &ls, 400, 5, 0, work, &again, &se2));
    CHECK(again == est);
    CHECK_OK(nn_hessian_trace(LS_D, ls_hvp, &ls, 400, 5, 1, work, &other, &se2));
    CHECK(other != est);
}

/* a diagonal Hessian: every Rademacher vector gives z.Hz = trace exactly; power iteration finds the
 * eigenvalue of largest magnitude, negative here */
static int diag_hvp(void *ctx, const float *v, float *hv)
{
    const float *d = ctx;
    for (int j = 0; j < 5; j++) hv[j] = d[j] * v[j];
    return FH_OK;
}

static void test_diagonal(void)
{
    float d[5] = { 1.0f, -4.0f, 2.0f, 0.5f, 3.0f }, work[10];
    double trace = 0.0, se = 0.0, eig = 0.0;
    int iters = 0;
    CHECK_OK(nn_hessian_trace(5, diag_hvp, d, 3, 9, 2, work, &trace, &se));
    CHECK_NEAR(trace, 2.5, 1e-6);
    CHECK_NEAR(se, 0.0, 1e-6);
    CHECK_OK(nn_hessian_top_eig(5, diag_hvp, d, 500, 1e-10, 9, 2, work, &eig, &iters));
    CHECK_NEAR(eig, -4.0, 1e-4);
    CHECK_OK(nn_hessian_trace(5, diag_hvp, d, 1, 9, 2, work, &trace, &se));
    CHECK(isnan(se));
}

static int nan_hvp(void *ctx, const float *v, float *hv)
{
    for (int j = 0; j < 3; j++) hv[j] = NAN;
    return FH_OK;
}

static void test_not_finite(void)
{
    float work[6];
    double eig = 0.0, trace = 0.0, se = 0.0;
    int iters = 0;
    CHECK(nn_hessian_top_eig(3, nan_hvp, NULL, 10, 1e-3, 1, 0, work, &eig, &iters) == FH_ERR_NUMERIC);
    CHECK(nn_hessian_trace(3, nan_hvp, NULL, 2, 1, 0, work, &trace, &se) == FH_ERR_NUMERIC);
    NnExact acc[2] = { 0, 0 };
    const float big[2] = { 1.0f, 1e20f };
    CHECK(nn_exact_add(acc, big, 2, 1, "test") == FH_ERR_NUMERIC);
    CHECK(strstr(fh_error_message(), "test") != NULL);
}

/* ---- exact sums ---- */

static void test_exact_sums_any_order(void)
{
    enum { N = 64, PARTS = 9 };
    float x[PARTS][N];
    FhRng rng;
    fh_rng_init(&rng, 3, FH_RNG_TEST, 1, 0, 0);
    for (int p = 0; p < PARTS; p++)
        for (int j = 0; j < N; j++) x[p][j] = (float)(fh_rng_normal(&rng) * pow(10.0, (double)(j % 9) - 4));
    NnExact forward[N], backward[N], split_a[N], split_b[N];
    memset(forward, 0, sizeof forward);
    memset(backward, 0, sizeof backward);
    memset(split_a, 0, sizeof split_a);
    memset(split_b, 0, sizeof split_b);
    for (int p = 0; p < PARTS; p++) CHECK_OK(nn_exact_add(forward, x[p], N, 1, "forward"));
    for (int p = PARTS - 1; p >= 0; p--) CHECK_OK(nn_exact_add(backward, x[p], N, 1, "backward"));
    for (int p = 0; p < PARTS; p++) CHECK_OK(nn_exact_add(p % 3 ? split_a : split_b, x[p], N, 1, "split"));
    int same = 1, close = 1;
    for (int j = 0; j < N; j++) {
        same &= forward[j] == backward[j] && forward[j] == split_a[j] + split_b[j];
        double s = 0.0;
        for (int p = 0; p < PARTS; p++) s += x[p][j];
        close &= fabs(nn_exact_value(forward[j]) - s) <= 1e-12 * (1 + fabs(s));
    }
    CHECK(same);
    CHECK(close);
    /* subtracting what was added leaves zero */
    for (int p = 0; p < PARTS; p++) CHECK_OK(nn_exact_add(forward, x[p], N, -1, "minus"));
    int zero = 1;
    for (int j = 0; j < N; j++) zero &= forward[j] == 0;
    CHECK(zero);
}

/* ---- a tiny mlp on a probe set ---- */

enum { IN = 4, HIDDEN = 5, CLASSES = 3, ROWS = 37, MAX_BATCH = 8 };

static void tiny_mlp(NnModel *m)
{
    CHECK_OK(nn_model_init(m, "tiny-mlp", (NnShape){ 1, 2, 2 }, MAX_BATCH));
    int h = nn_linear(m, nn_flatten(m, m->input), HIDDEN, 1, NN_ACT_RELU);
    int out = nn_linear(m, h, CLASSES, 1, NN_ACT_NONE);
    CHECK_OK(nn_model_finalize(m, out, h, CLASSES));
    nn_model_init_params(m, 21);
}

typedef struct {
    NnModel m;
    float x[ROWS * IN], pert[64], dlogits[MAX_BATCH * CLASSES];
    int32_t y[ROWS];
    NnExact acc[64];
} Tiny;

static void tiny_make(Tiny *t)
{
    tiny_mlp(&t->m);
    FhRng rng;
    fh_rng_init(&rng, 8, FH_RNG_TEST, 2, 0, 0);
    for (int i = 0; i < ROWS * IN; i++) t->x[i] = (float)fh_rng_normal(&rng);
    for (int i = 0; i < ROWS; i++) t->y[i] = (int32_t)fh_rng_below(&rng, CLASSES);
}

static NnProbeHessian tiny_probe(Tiny *t, const float *w, int batch, int first, int stride)
{
    return (NnProbeHessian){ .model = &t->m, .x = t->x, .y = t->y, .n_rows = ROWS, .batch = batch,
                             .first_batch = first, .stride = stride, .step = 1e-3, .w = w, .pert = t->pert,
                             .dlogits = t->dlogits, .acc = t->acc };
}

/* the mean CE gradient at w (trainable part) in double, from the engine */
static void tiny_gradient(Tiny *t, const float *w, double *g)
{
    NnModel *m = &t->m;
    float *saved = m->state;
    m->state = (float *)w;
    nn_model_set_training(m, 0);
    for (int64_t j = 0; j < m->n_params; j++) g[j] = 0.0;
    for (int first = 0; first < ROWS; first += MAX_BATCH) {
        const int count = ROWS - first < MAX_BATCH ? ROWS - first : MAX_BATCH;
        nn_model_zero_grad(m);
        CHECK_OK(nn_model_forward(m, t->x + first * IN, count));
        memset(t->dlogits, 0, sizeof t->dlogits);
        nn_softmax_xent(t->dlogits, NULL, nn_model_logits(m), t->y + first, NULL, NULL, count, CLASSES);
        nn_model_backward(m, t->dlogits, NULL);
        for (int64_t j = 0; j < m->n_params; j++) g[j] += (double)m->grad[j] * count / ROWS;
    }
    m->state = saved;
    nn_model_set_training(m, 1);
}

static void test_tiny_mlp_full_hessian(void)
{
    static Tiny t;
    tiny_make(&t);
    NnModel *m = &t.m;
    const int P = (int)m->n_params;
    CHECK(P == IN * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES);
    float w[64];
    memcpy(w, m->state, (size_t)m->n_state * sizeof(float));
    /* the full Hessian, column j from the central difference along coordinate j with a step of its own */
    static double h[64 * 64], gp[64], gm[64], ev[64];
    float wp[64];
    for (int j = 0; j < P; j++) {
        const double step = 1e-3 * (fabs(w[j]) > 0.1 ? fabs(w[j]) : 0.1);
        memcpy(wp, w, sizeof wp);
        wp[j] = (float)(w[j] + step);
        const double up = (double)wp[j] - w[j];
        tiny_gradient(&t, wp, gp);
        wp[j] = (float)(w[j] - step);
        const double down = (double)w[j] - wp[j];
        tiny_gradient(&t, wp, gm);
        for (int i = 0; i < P; i++) h[i * P + j] = (gp[i] - gm[i]) / (up + down);
    }
    double trace = 0.0, asym = 0.0, scale = 0.0;
    for (int i = 0; i < P; i++) {
        trace += h[i * P + i];
        for (int j = 0; j < i; j++) {
            asym = fmax(asym, fabs(h[i * P + j] - h[j * P + i]));
            scale = fmax(scale, fabs(h[i * P + j]));
            h[i * P + j] = h[j * P + i] = 0.5 * (h[i * P + j] + h[j * P + i]);
        }
    }
    CHECK_MSG(asym <= 1e-3 * scale, "the finite-difference Hessian is not symmetric: %g of %g", asym, scale);
    double off = 0.0; /* Hutchinson's variance per sample: 2 sum_{i != j} H_ij^2 */
    for (int i = 0; i < P; i++)
        for (int j = 0; j < P; j++)
            if (i != j) off += 2 * h[i * P + j] * h[i * P + j];
    jacobi_eigenvalues(h, P, ev);
    const double top = largest_magnitude(ev, P);

    NnProbeHessian p = tiny_probe(&t, w, 5, 0, 1);
    m->training = 1;
    float work[128];
    double eig = 0.0, est = 0.0, se = 0.0;
    int iters = 0;
    CHECK_OK(nn_hessian_top_eig(P, nn_probe_hvp, &p, 500, 1e-6, 4, 7, work, &eig, &iters));
    CHECK_MSG(fabs(eig - top) <= 0.01 * fabs(top), "power iteration %.6g, full Hessian %.6g after %d iterations", eig,
              top, iters);
    CHECK(p.gradients == 2 * iters);
    CHECK(m->state == m->own_state && m->training == 1); /* left as it was */
    CHECK(memcmp(m->state, w, (size_t)m->n_state * sizeof(float)) == 0);
    const int samples = 2000;
    CHECK_OK(nn_hessian_trace(P, nn_probe_hvp, &p, samples, 4, 7, work, &est, &se));
    const double sd = sqrt(off / samples);
    CHECK_MSG(fabs(est - trace) <= 4 * sd + 1e-3 * fabs(trace), "Hutchinson %.6g +- %.3g, full Hessian trace %.6g", est,
              sd, trace);
    CHECK(fabs(se - sd) <= 0.2 * sd); /* the reported standard error is the estimator's */
    nn_model_free(m);
}

/* a step large enough to cross kinks of the tiny mlp's ReLUs: with the pattern held the products are still
 * those of the Hessian (within the step's truncation error) */
static void test_large_step_no_kinks(void)
{
    static Tiny t;
    tiny_make(&t);
    NnModel *m = &t.m;
    const int P = (int)m->n_params;
    float w[64], work[128];
    memcpy(w, m->state, (size_t)m->n_state * sizeof(float));
    NnProbeHessian small = tiny_probe(&t, w, 8, 0, 1), large = small;
    large.step = 5e-2;
    double eig_small = 0.0, eig_large = 0.0, tr_small = 0.0, tr_large = 0.0, se = 0.0;
    int iters = 0;
    CHECK_OK(nn_hessian_top_eig(P, nn_probe_hvp, &small, 500, 1e-7, 4, 1, work, &eig_small, &iters));
    CHECK_OK(nn_hessian_top_eig(P, nn_probe_hvp, &large, 500, 1e-7, 4, 1, work, &eig_large, &iters));
    CHECK_OK(nn_hessian_trace(P, nn_probe_hvp, &small, 50, 4, 1, work, &tr_small, &se));
    CHECK_OK(nn_hessian_trace(P, nn_probe_hvp, &large, 50, 4, 1, work, &tr_large, &se));
    CHECK_MSG(fabs(eig_large - eig_small) <= 0.01 * fabs(eig_small), "step 5e-2: %.6g, 1e-3: %.6g", eig_large, eig_small);
    CHECK_MSG(fabs(tr_large - tr_small) <= 0.01 * fabs(tr_small), "step 5e-2: %.6g, 1e-3: %.6g", tr_large, tr_small);
    /* without the pattern the same step crosses kinks: the gradient difference is another one */
    float v[64], pert[64];
    double *gp = calloc((size_t)P, sizeof *gp), *gm = calloc((size_t)P, sizeof *gm);
    float hv[64];
    FhRng rng;
    fh_rng_init(&rng, 5, FH_RNG_TEST, 9, 0, 0);
    for (int j = 0; j < P; j++) v[j] = fh_rng_uniform_f(&rng) < 0.5f ? -1.0f : 1.0f;
    CHECK_OK(nn_probe_hvp(&large, v, hv));
    const double eps = nn_hessian_fd_eps(w, v, P, 5e-2);
    memcpy(pert, w, sizeof pert);
    for (int j = 0; j < P; j++) pert[j] = (float)(w[j] + eps * v[j]);
    tiny_gradient(&t, pert, gp);
    for (int j = 0; j < P; j++) pert[j] = (float)(w[j] - eps * v[j]);
    tiny_gradient(&t, pert, gm);
    double differ = 0.0, size = 0.0;
    for (int j = 0; j < P; j++) {
        differ = fmax(differ, fabs((gp[j] - gm[j]) / (2 * eps) - hv[j]));
        size = fmax(size, fabs(hv[j]));
    }
    CHECK_MSG(differ > 0.05 * size, "no kink crossed: the test shows nothing (%g of %g)", differ, size);
    free(gp);
    free(gm);
    nn_model_free(m);
}

/* replaying the pattern at the weights it was recorded at gives the plain forward's and backward's bits,
 * for every activation and pooling kind of the zoo (conv + BatchNorm + ReLU + max-pool, ReLU6) */
static void test_pattern_replay_same_bits(void)
{
    const char *names[] = { "smallcnn", "mobilenetv2", "resnet8" };
    for (int k = 0; k < 3; k++) {
        NnModel m;
        memset(&m, 0, sizeof m);
        CHECK_OK(nn_zoo_build(&m, names[k], (NnShape){ 3, 8, 8 }, 4, 3, NULL));
        nn_model_init_params(&m, 2);
        enum { B = 3 };
        static float x[B * 3 * 8 * 8], logits[B * 4], dlogits[B * 4];
        FhRng rng;
        fh_rng_init(&rng, 6, FH_RNG_TEST, (uint32_t)k, 0, 0);
        for (int i = 0; i < B * 192; i++) x[i] = (float)fh_rng_normal(&rng) * 2.0f;
        for (int i = 0; i < B * 4; i++) dlogits[i] = (float)fh_rng_normal(&rng);
        /* running statistics away from 0 / 1, so that eval mode is not the identity */
        for (int v = 0; v < m.n_views; v++)
            if (m.views[v].role == NN_ROLE_RUNNING_VAR)
                for (int64_t j = 0; j < m.views[v].count; j++) m.state[m.views[v].offset + j] = 0.5f + 0.1f * (j % 7);
        nn_model_set_training(&m, 0);
        float *grad = calloc((size_t)m.n_state, sizeof *grad);
        CHECK_OK(nn_model_forward(&m, x, B));
        memcpy(logits, nn_model_logits(&m), sizeof logits);
        nn_model_zero_grad(&m);
        nn_model_backward(&m, dlogits, NULL);
        memcpy(grad, m.grad, (size_t)m.n_state * sizeof *grad);
        CHECK(m.pattern == NN_PATTERN_OFF);
        m.pattern = NN_PATTERN_RECORD;
        CHECK(nn_model_forward(&m, x, B) == FH_ERR_USAGE); /* buffers first */
        CHECK_OK(nn_model_pattern_alloc(&m));
        CHECK_OK(nn_model_forward(&m, x, B));
        m.pattern = NN_PATTERN_REPLAY;
        CHECK_OK(nn_model_forward(&m, x, B));
        CHECK_MSG(memcmp(logits, nn_model_logits(&m), sizeof logits) == 0, "%s: replayed logits differ", names[k]);
        nn_model_zero_grad(&m);
        nn_model_backward(&m, dlogits, NULL);
        CHECK_MSG(memcmp(grad, m.grad, (size_t)m.n_state * sizeof *grad) == 0, "%s: replayed gradient differs", names[k]);
        nn_model_set_training(&m, 1);
        CHECK(nn_model_forward(&m, x, B) == FH_ERR_USAGE); /* eval mode only */
        free(grad);
        nn_model_free(&m);
    }
}

/* Hv products do not depend on the batches each process computes: two halves whose exact sums are
 * added give the bits of one process doing all */
typedef struct {
    const NnExact *other;
    int64_t n;
} AddOther;

static int add_other(void *ctx, int status, NnExact *acc, int64_t n)
{
    const AddOther *a = ctx;
    if (status != FH_OK) return status;
    for (int64_t j = 0; j < n; j++) acc[j] += a->other[j];
    return FH_OK;
}

static void test_split_probe_same_bits(void)
{
    static Tiny t;
    tiny_make(&t);
    NnModel *m = &t.m;
    const int P = (int)m->n_params;
    float w[64], v[64], hv_all[64], hv_split[64], hv_other[64];
    memcpy(w, m->state, (size_t)m->n_state * sizeof(float));
    FhRng rng;
    fh_rng_init(&rng, 2, FH_RNG_TEST, 3, 0, 0);
    for (int j = 0; j < P; j++) v[j] = (float)fh_rng_normal(&rng);
    NnProbeHessian all = tiny_probe(&t, w, 6, 0, 1);
    CHECK_OK(nn_probe_hvp(&all, v, hv_all));
    /* 3 "ranks": batches 0,3,6 / 1,4 / 2,5 */
    static NnExact sum[64];
    memset(sum, 0, sizeof sum);
    for (int r = 1; r < 3; r++) {
        NnProbeHessian part = tiny_probe(&t, w, 6, r, 3);
        CHECK_OK(nn_probe_hvp(&part, v, hv_other));
        for (int j = 0; j < P; j++) sum[j] += t.acc[j];
    }
    AddOther other = { sum, P };
    NnProbeHessian mine = tiny_probe(&t, w, 6, 0, 3);
    mine.reduce = add_other;
    mine.reduce_ctx = &other;
    CHECK_OK(nn_probe_hvp(&mine, v, hv_split));
    CHECK(memcmp(hv_all, hv_split, (size_t)P * sizeof(float)) == 0);
    double norm = 0.0;
    for (int j = 0; j < P; j++) norm += (double)hv_all[j] * hv_all[j];
    CHECK(norm > 0.0);
    /* a batch larger than the model's is refused */
    NnProbeHessian too_big = tiny_probe(&t, w, MAX_BATCH + 1, 0, 1);
    CHECK(nn_probe_hvp(&too_big, v, hv_other) == FH_ERR_USAGE);
    nn_model_free(m);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_least_squares);
    RUN(test_diagonal);
    RUN(test_not_finite);
    RUN(test_exact_sums_any_order);
    RUN(test_tiny_mlp_full_hessian);
    RUN(test_large_step_no_kinks);
    RUN(test_pattern_replay_same_bits);
    RUN(test_split_probe_same_bits);
    return test_summary();
}
