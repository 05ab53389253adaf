/* Correctness tests of the neural-network engine (src/nn): layers, losses, optimisers, bad input.
 *
 * Layers are checked by finite differences along random directions (KANN's kad_check_grad style): a tiny
 * model holds the layer under test (followed by a flatten when its output is not flat, so that the logits
 * ARE the layer's output); with a fixed random r, the scalar L = sum(logits * r) has dL/dlogits = r, so
 * one backward gives the analytic gradient. For a random direction d (uniform in [-1, 1]) over each
 * trainable parameter tensor in turn, and over the input, <grad, d> is compared with the central
 * difference (L(theta + eps d) - L(theta - eps d)) / (2 eps), L summed in double, eps = 1e-3.
 * Pass: |analytic - fd| <= 1e-2 * max(|analytic|, |fd|) + 1e-3 (float32 forward); max(|analytic|, |fd|)
 * must be >= 3e-3 (3x the absolute slack) so that the check tests something. Every case also checks that
 * a second backward accumulates (grad doubles), that need_input_grad = 0 gives the same parameter gradient
 * without touching the input gradient, and that the buffer part of m->grad stays zero.
 * Kinks: ReLU/ReLU6 inputs are kept >= 0.05 away from 0 and 6, max-pool inputs have no ties (gap 1e-2);
 * for FUSED activations a twin model without the activation exposes the pre-activation: output elements
 * within 0.1 of a kink get r = 0, and every perturbed evaluation checks that no other one crossed a kink.
 *
 * Also: the BLAS conv path against nn_conv2d_*_ref (max |diff| <= 1e-4 * max |ref|; several im2col chunks
 * included), batch-norm running statistics (PyTorch rule) and normalisation, losses against double
 * precision hand computations, SGD / Adam / AdamW against PyTorch's update rules, gradient clipping,
 * and the errors (status + message) of bad shapes, bad class counts and out-of-range batches.
 * Random data: Philox, purpose FH_RNG_TEST, one stream per test case (a test alone sees the same data).
 * FH_TEST_VERBOSE=1 in the environment prints every finite-difference comparison.
 *
 * Build and run all:  make build/tests/test_layers && OPENBLAS_NUM_THREADS=1 build/tests/test_layers
 * Run one test alone: make build/tests/test_layers && build/tests/test_layers test_name */
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/nn/kernels.h" /* private: the BLAS conv kernels and their naive references */
#include "fedhet/nn.h"
#include "fedhet/rng.h"

#define SEED 20240613u
#define FD_EPS 1e-3
#define FD_RTOL 1e-2
#define FD_ATOL 1e-3
#define FD_MIN_DERIV 3e-3 /* max(|analytic|, |fd|) below this would make the check vacuous */
#define KINK_MARGIN 0.1   /* pre-activations this close to a kink are excluded (r = 0) */
#define CONV_RTOL 1e-4    /* BLAS conv vs reference: max |diff| <= CONV_RTOL * max |ref| */

static int verbose;

/* ============================== helpers ============================== */

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* a stream of its own for every (label, k): running one test alone gives it the same data */
static FhRng rng_for(const char *label, uint32_t k)
{
    FhRng r;
    fh_rng_init(&r, SEED, FH_RNG_TEST, hash_str(label), k, 0);
    return r;
}

static float *falloc(int64_t n)
{
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!p) {
        printf("out of memory\n");
        abort();
    }
    return p;
}

static float *fdup(const float *src, int64_t n)
{
    float *p = falloc(n);
    memcpy(p, src, sizeof(float) * (size_t)n);
    return p;
}

static void fill_uniform(FhRng *r, float *x, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * fh_rng_uniform(r));
}

static void fill_normal(FhRng *r, float *x, int64_t n, double scale)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * fh_rng_normal(r));
}

/* max |a - b|, NaN-propagating */
static double max_diff(const float *a, const float *b, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || isnan(d)) m = d;
        if (isnan(m)) break;
    }
    return m;
}

static double max_abs(const float *a, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)a[i]) > m) m = fabs((double)a[i]);
    return m;
}

/* a matches ref: max |a - ref| <= rtol * max |ref| (+ a hair for an all-zero ref) */
static void check_close(const char *label, const char *what, const float *a, const float *ref, int64_t n,
                        double rtol)
{
    double err = max_diff(a, ref, n), scale = max_abs(ref, n), tol = rtol * scale + 1e-30;
    CHECK_MSG(err <= tol, "%s: %s: max |diff| %.3g > %.3g (max |ref| %.3g)", label, what, err, tol, scale);
}

static int msg_has(const char *needle) { return strstr(fh_error_message(), needle) != NULL; }
#define CHECK_MSG_HAS(s) CHECK_MSG(msg_has(s), "error message lacks \"%s\": \"%s\"", (s), fh_error_message())

/* ============================== gradient-check harness ============================== */

typedef enum { X_NORMAL, X_DISTINCT, X_NO_KINKS } XKind;

typedef struct GradCase {
    const char *label;
    NnShape in;
    int batch;
    int (*build)(NnModel *m, int x, const void *arg); /* adds the layers; returns the output tensor */
    const void *arg;
    int training;
    XKind x_kind;
    double x_scale;      /* X_NORMAL: x ~ x_scale * N(0, 1) */
    NnAct guard;         /* the last layer's fused activation: r is kept off its kinks via a twin model */
    int features;        /* also feed a random gradient q at the features tensor: L += sum(features * q) */
    int multi_chunk;     /* the case must drive a conv through more than one im2col chunk */
} GradCase;

static int g_strip_act;     /* 1 while building the twin: fused activations become NN_ACT_NONE */
static int g_features = -1; /* a builder may name the features tensor (default: the logits) */
static NnAct act_of(NnAct a) { return g_strip_act ? NN_ACT_NONE : a; }

static int build_case(NnModel *m, const GradCase *c)
{
    int st = nn_model_init(m, c->label, c->in, c->batch);
    if (st != FH_OK) return st;
    g_features = -1;
    int out = c->build(m, m->input, c->arg);
    if (out < 0) return m->status != FH_OK ? m->status : FH_ERR_USAGE;
    NnShape s = m->tensors[out].shape;
    int logits = (s.h == 1 && s.w == 1) ? out : nn_flatten(m, out);
    if (logits < 0) return m->status;
    return nn_model_finalize(m, logits, g_features >= 0 ? g_features : logits, (int)m->tensors[logits].size);
}

/* norm weights/biases and running statistics away from their trivial initial values */
static void randomise_norm_state(NnModel *m, FhRng *rng)
{
    for (int i = 0; i < m->n_views; i++) {
        const NnParamView *v = &m->views[i];
        float *p = m->state + v->offset;
        switch (v->role) {
        case NN_ROLE_NORM_WEIGHT: fill_uniform(rng, p, v->count, 0.5, 1.5); break;
        case NN_ROLE_NORM_BIAS: fill_uniform(rng, p, v->count, -0.5, 0.5); break;
        case NN_ROLE_RUNNING_MEAN: fill_uniform(rng, p, v->count, -0.5, 0.5); break;
        case NN_ROLE_RUNNING_VAR: fill_uniform(rng, p, v->count, 0.5, 2.0); break;
        default: break;
        }
    }
}

static void make_input(FhRng *rng, float *x, int64_t n, XKind kind, double scale)
{
    switch (kind) {
    case X_NORMAL: fill_normal(rng, x, n, scale > 0 ? scale : 1.0); break;
    case X_DISTINCT: {
        /* a permutation of equally spaced values: no two within 1e-2 (the perturbations are <= 1e-3) */
        int64_t *perm = malloc(sizeof(int64_t) * (size_t)n);
        if (!perm) abort();
        fh_rng_permutation(rng, perm, n);
        for (int64_t i = 0; i < n; i++) x[i] = (float)((double)(perm[i] - n / 2) * 1e-2);
        free(perm);
        break;
    }
    case X_NO_KINKS:
        /* spread over (-3, 9) so ReLU6 sees all three pieces, at least 0.05 from 0 and from 6 */
        for (int64_t i = 0; i < n; i++) {
            double u;
            do u = -3.0 + 12.0 * fh_rng_uniform(rng);
            while (fabs(u) < 0.05 || fabs(u - 6.0) < 0.05);
            x[i] = (float)u;
        }
        break;
    }
}

/* 0, 1, 2: below 0, between the kinks, above 6 (ReLU6) */
static int kink_side(double z, NnAct act) { return (z > 0.0) + (act == NN_ACT_RELU6 && z > 6.0); }

typedef struct {
    const GradCase *c;
    NnModel m, twin;
    int has_twin;
    int64_t nx, nz, nf;
    float *x, *r, *q, *z_twin0;
    const NnLayer *dropout;
    uint8_t *mask0;
    int64_t mask_n;
    int kink_crossed, mask_changed, forward_failed;
} GradCtx;

static double loss_at(GradCtx *g)
{
    const GradCase *c = g->c;
    if (nn_model_forward(&g->m, g->x, c->batch) != FH_OK) {
        g->forward_failed = 1;
        return NAN;
    }
    const float *z = nn_model_logits(&g->m);
    double L = 0.0;
    for (int64_t i = 0; i < g->nz; i++) L += (double)z[i] * g->r[i];
    if (g->q) {
        const float *f = nn_model_features(&g->m);
        for (int64_t i = 0; i < g->nf; i++) L += (double)f[i] * g->q[i];
    }
    if (g->dropout && memcmp(g->dropout->mask, g->mask0, (size_t)g->mask_n) != 0) g->mask_changed = 1;
    if (g->has_twin) {
        if (nn_model_forward(&g->twin, g->x, c->batch) != FH_OK) g->forward_failed = 1;
        const float *zt = nn_model_logits(&g->twin);
        for (int64_t i = 0; i < g->nz; i++)
            if (g->r[i] != 0.0f && kink_side(zt[i], c->guard) != kink_side(g->z_twin0[i], c->guard))
                g->kink_crossed = 1;
    }
    return L;
}

/* <grad, d> against the central difference, d uniform in [-1, 1] over the n floats at p (parameters or
 * input). Both sides use the perturbation actually stored in float, so rounding of theta +- eps d cancels. */
static void fd_direction(GradCtx *g, const char *what, float *p, const float *grad, int64_t n, FhRng *rng)
{
    float *save = fdup(p, n), *plus = falloc(n), *minus = falloc(n);
    double an = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = 2.0 * fh_rng_uniform(rng) - 1.0;
        plus[i] = (float)(save[i] + FD_EPS * d);
        minus[i] = (float)(save[i] - FD_EPS * d);
        an += (double)grad[i] * ((double)plus[i] - (double)minus[i]);
    }
    an /= 2.0 * FD_EPS;
    memcpy(p, plus, sizeof(float) * (size_t)n);
    double lp = loss_at(g);
    memcpy(p, minus, sizeof(float) * (size_t)n);
    double lm = loss_at(g);
    memcpy(p, save, sizeof(float) * (size_t)n);
    double fd = (lp - lm) / (2.0 * FD_EPS);
    double err = fabs(an - fd), tol = FD_ATOL + FD_RTOL * fmax(fabs(an), fabs(fd));
    if (verbose)
        printf("\n    %-24s %-22s analytic %+.7e  fd %+.7e  rel %.2e", g->c->label, what, an, fd,
               err / fmax(fabs(an), 1e-30));
    CHECK_MSG(err <= tol, "%s: %s: analytic %.7g, finite difference %.7g (|diff| %.3g > tol %.3g)", g->c->label,
              what, an, fd, err, tol);
    CHECK_MSG(fmax(fabs(an), fabs(fd)) >= FD_MIN_DERIV,
              "%s: %s: directional derivative %.3g is too small to test anything", g->c->label, what, fd);
    free(save);
    free(plus);
    free(minus);
}

static void grad_check(const GradCase *c)
{
    GradCtx g;
    memset(&g, 0, sizeof g);
    g.c = c;
    int st = build_case(&g.m, c);
    CHECK_OK(st);
    if (st != FH_OK) {
        printf("    (case %s)\n", c->label);
        nn_model_free(&g.m);
        return;
    }
    NnModel *m = &g.m;
    FhRng rng = rng_for(c->label, 0);
    nn_model_init_params(m, SEED);
    randomise_norm_state(m, &rng);
    nn_model_set_training(m, c->training);
    m->need_input_grad = 1;
    m->dropout_seed = SEED;
    m->dropout_ctr[0] = 3;
    m->dropout_ctr[1] = 5;
    m->dropout_ctr[2] = 7;
    if (c->multi_chunk) {
        int found = 0;
        for (int i = 0; i < m->n_layers; i++) {
            const NnLayer *l = &m->layers[i];
            if (l->type != NN_OP_CONV2D) continue;
            NnShape si = m->tensors[l->in].shape, so = m->tensors[l->out].shape;
            NnConvShape s = {c->batch, si.c, si.h, si.w, l->cout, l->k, l->stride, l->pad, l->groups, so.h, so.w};
            int chunk = nn_conv2d_chunk(&s);
            found |= chunk > 1 && chunk < c->batch;
        }
        CHECK_MSG(found, "%s: no conv runs in more than one im2col chunk", c->label);
    }

    NnShape in = c->in;
    g.nx = (int64_t)c->batch * in.c * in.h * in.w;
    g.nz = (int64_t)c->batch * m->classes;
    g.x = falloc(g.nx);
    make_input(&rng, g.x, g.nx, c->x_kind, c->x_scale);
    g.r = falloc(g.nz);
    fill_uniform(&rng, g.r, g.nz, -1.0, 1.0);
    if (c->features) {
        g.nf = (int64_t)c->batch * nn_model_features_size(m);
        g.q = falloc(g.nf);
        fill_uniform(&rng, g.q, g.nf, -1.0, 1.0);
    }

    if (c->guard != NN_ACT_NONE) {
        g_strip_act = 1;
        st = build_case(&g.twin, c);
        g_strip_act = 0;
        CHECK_OK(st);
        CHECK(g.twin.n_state == m->n_state);
        if (st == FH_OK && g.twin.n_state == m->n_state) {
            g.has_twin = 1;
            g.twin.state = m->state; /* shares the parameters, so every perturbation reaches both */
            nn_model_set_training(&g.twin, c->training);
            CHECK_OK(nn_model_forward(&g.twin, g.x, c->batch));
            g.z_twin0 = fdup(nn_model_logits(&g.twin), g.nz);
            int64_t count[3] = {0, 0, 0};
            for (int64_t i = 0; i < g.nz; i++) {
                double z = g.z_twin0[i];
                if (fabs(z) < KINK_MARGIN || (c->guard == NN_ACT_RELU6 && fabs(z - 6.0) < KINK_MARGIN))
                    g.r[i] = 0.0f;
                else
                    count[kink_side(z, c->guard)]++;
            }
            CHECK_MSG(count[0] > 0 && count[1] > 0 && (c->guard != NN_ACT_RELU6 || count[2] > 0),
                      "%s: pre-activations do not cover every piece of the activation (%lld below 0, %lld "
                      "inside, %lld above 6)",
                      c->label, (long long)count[0], (long long)count[1], (long long)count[2]);
        }
    }

    /* analytic gradient */
    nn_model_zero_grad(m);
    CHECK_OK(nn_model_forward(m, g.x, c->batch));
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].type == NN_OP_DROPOUT && c->training) {
            g.dropout = &m->layers[i];
            g.mask_n = (int64_t)c->batch * m->tensors[m->layers[i].out].size;
            g.mask0 = malloc((size_t)g.mask_n);
            if (!g.mask0) abort();
            memcpy(g.mask0, g.dropout->mask, (size_t)g.mask_n);
        }
    nn_model_backward(m, g.r, g.q);
    float *gp = fdup(m->grad, m->n_state);
    float *gx = fdup(m->tensors[m->input].grad, g.nx);
    for (int64_t i = m->n_params; i < m->n_state; i++)
        CHECK_MSG(gp[i] == 0.0f, "%s: buffer gradient [%lld] = %g", c->label, (long long)i, (double)gp[i]);

    /* a second backward accumulates into m->grad; tensor gradients (the input's) are recomputed */
    CHECK_OK(nn_model_forward(m, g.x, c->batch));
    nn_model_backward(m, g.r, g.q);
    float *gp2 = falloc(m->n_params);
    for (int64_t i = 0; i < m->n_params; i++) gp2[i] = 2.0f * gp[i];
    check_close(c->label, "second backward doubles the gradient", m->grad, gp2, m->n_params, 1e-5);
    check_close(c->label, "input gradient of a second backward", m->tensors[m->input].grad, gx, g.nx, 1e-6);

    /* need_input_grad = 0: the same parameter gradient, and the input gradient is left alone */
    nn_model_zero_grad(m);
    m->need_input_grad = 0;
    for (int64_t i = 0; i < g.nx; i++) m->tensors[m->input].grad[i] = 12345.0f;
    CHECK_OK(nn_model_forward(m, g.x, c->batch));
    nn_model_backward(m, g.r, g.q);
    check_close(c->label, "gradient without need_input_grad", m->grad, gp, m->n_params, 1e-6);
    int untouched = 1;
    for (int64_t i = 0; i < g.nx; i++) untouched &= m->tensors[m->input].grad[i] == 12345.0f;
    CHECK_MSG(untouched, "%s: backward wrote the input gradient although need_input_grad = 0", c->label);
    m->need_input_grad = 1;

    /* finite differences: each trainable tensor, then the input */
    float *buffers0 = fdup(m->state + m->n_params, m->n_buffers);
    for (int i = 0; i < m->n_views; i++) {
        const NnParamView *v = &m->views[i];
        if (!v->trainable) continue;
        fd_direction(&g, v->name, m->state + v->offset, gp + v->offset, v->count, &rng);
    }
    fd_direction(&g, "input", g.x, gx, g.nx, &rng);
    if (verbose) printf("\n  %-44s ", "");

    CHECK_MSG(!g.forward_failed, "%s: a forward failed: %s", c->label, fh_error_message());
    if (!c->training)
        CHECK_MSG(memcmp(buffers0, m->state + m->n_params, sizeof(float) * (size_t)m->n_buffers) == 0,
                  "%s: an eval-mode forward changed the running statistics", c->label);
    if (g.dropout) {
        CHECK_MSG(!g.mask_changed, "%s: the dropout mask changed between evaluations with the same counters",
                  c->label);
        int64_t kept = 0;
        for (int64_t i = 0; i < g.mask_n; i++) kept += g.mask0[i] != 0;
        CHECK_MSG(kept > 0 && kept < g.mask_n, "%s: dropout kept %lld of %lld", c->label, (long long)kept,
                  (long long)g.mask_n);
    }
    if (g.has_twin) CHECK_MSG(!g.kink_crossed, "%s: a perturbation crossed an activation kink", c->label);

    free(buffers0);
    free(gp);
    free(gp2);
    free(gx);
    free(g.x);
    free(g.r);
    free(g.q);
    free(g.z_twin0);
    free(g.mask0);
    if (g.has_twin) g.twin.state = g.twin.own_state;
    nn_model_free(&g.twin);
    nn_model_free(&g.m);
}

/* ---- one layer under test ---- */

typedef struct {
    NnOpType op;
    int cout, k, stride, pad, groups, bias;
    NnAct act;
    float p;
    int eval;       /* run in eval mode (BN running statistics, dropout off) */
    double x_scale; /* input scale (X_NORMAL); 0 means 1 */
    int batch;      /* 0 means 3 */
} LayerArg;

static int build_layer(NnModel *m, int x, const void *varg)
{
    const LayerArg *a = varg;
    switch (a->op) {
    case NN_OP_LINEAR: return nn_linear(m, x, a->cout, a->bias, act_of(a->act));
    case NN_OP_CONV2D: return nn_conv2d(m, x, a->cout, a->k, a->stride, a->pad, a->groups, a->bias, act_of(a->act));
    case NN_OP_MAXPOOL: return nn_maxpool(m, x, a->k, a->stride, a->pad);
    case NN_OP_AVGPOOL: return nn_avgpool(m, x, a->k, a->stride, a->pad);
    case NN_OP_GAP: return nn_gap(m, x);
    case NN_OP_BATCHNORM: return nn_batchnorm(m, x, act_of(a->act));
    case NN_OP_GROUPNORM: return nn_groupnorm(m, x, a->groups, act_of(a->act));
    case NN_OP_ACT: return nn_act(m, x, act_of(a->act));
    case NN_OP_DROPOUT: return nn_dropout(m, x, a->p);
    case NN_OP_ADD: return nn_add(m, x, x, act_of(a->act));
    case NN_OP_FLATTEN: return nn_flatten(m, x);
    }
    return -1;
}

static void layer_case(const char *label, NnShape in, LayerArg a)
{
    GradCase c = {.label = label,
                  .in = in,
                  .batch = a.batch ? a.batch : 3,
                  .build = build_layer,
                  .arg = &a,
                  .training = !a.eval,
                  .x_kind = a.op == NN_OP_MAXPOOL ? X_DISTINCT : a.op == NN_OP_ACT ? X_NO_KINKS : X_NORMAL,
                  .x_scale = a.x_scale,
                  .guard = a.act};
    grad_check(&c);
}

/* ---- multi-layer graphs ---- */

/* x -> conv -> h; a = h + x (x feeds two layers); b = conv1x1(a) + a (a feeds two layers) */
static int build_residual(NnModel *m, int x, const void *arg)
{
    const NnAct *act = arg;
    int c = m->tensors[x].shape.c;
    int h = nn_conv2d(m, x, c, 3, 1, 1, 1, 1, NN_ACT_NONE);
    int a = nn_add(m, h, x, NN_ACT_NONE);
    int h2 = nn_conv2d(m, a, c, 1, 1, 0, 1, 0, NN_ACT_NONE);
    return nn_add(m, h2, a, act_of(*act));
}

/* both operands of the add are the same tensor: its gradient is 2 dy */
static int build_add_same(NnModel *m, int x, const void *arg)
{
    (void)arg;
    int h = nn_conv2d(m, x, 3, 3, 1, 1, 1, 1, NN_ACT_NONE);
    return nn_add(m, h, h, NN_ACT_NONE);
}

/* conv -> flatten -> linear: the flatten is a view in the middle of the graph */
static int build_flatten_mid(NnModel *m, int x, const void *arg)
{
    (void)arg;
    int h = nn_conv2d(m, x, 2, 3, 1, 0, 1, 1, NN_ACT_NONE);
    return nn_linear(m, nn_flatten(m, h), 3, 1, NN_ACT_NONE);
}

/* flatten of the input itself -> linear */
static int build_flatten_input(NnModel *m, int x, const void *arg)
{
    (void)arg;
    return nn_linear(m, nn_flatten(m, x), 4, 1, NN_ACT_NONE);
}

/* conv -> gap = features -> linear, with an extra gradient fed at the features */
static int build_features(NnModel *m, int x, const void *arg)
{
    (void)arg;
    int h = nn_conv2d(m, x, 4, 3, 1, 1, 1, 1, NN_ACT_NONE);
    g_features = nn_gap(m, h);
    return nn_linear(m, g_features, 3, 1, NN_ACT_NONE);
}

/* a small smooth network through most layer kinds (no interior kinks or max-pool ties) */
static int build_composite(NnModel *m, int x, const void *arg)
{
    (void)arg;
    int h = nn_conv2d(m, x, 4, 3, 1, 1, 1, 0, NN_ACT_NONE);
    h = nn_batchnorm(m, h, NN_ACT_NONE);
    h = nn_conv2d(m, h, 4, 3, 2, 1, 2, 1, NN_ACT_NONE);
    h = nn_groupnorm(m, h, 2, NN_ACT_NONE);
    h = nn_conv2d(m, h, 4, 3, 1, 1, 4, 1, NN_ACT_NONE);
    h = nn_avgpool(m, h, 2, 2, 0);
    h = nn_dropout(m, nn_flatten(m, h), 0.25f);
    return nn_linear(m, h, 3, 1, NN_ACT_NONE);
}

/* ============================== layer gradient tests ============================== */

typedef struct {
    int batch, cin, h, w, cout, k, stride, pad, groups;
} ConvSpec;
static int pick_multi_chunk(ConvSpec *cs, int extra);

static void test_grad_linear(void)
{
    layer_case("linear_bias", (NnShape){2, 3, 3}, (LayerArg){.op = NN_OP_LINEAR, .cout = 5, .bias = 1});
    layer_case("linear_nobias", (NnShape){7, 1, 1}, (LayerArg){.op = NN_OP_LINEAR, .cout = 4, .bias = 0});
    layer_case("linear_batch1", (NnShape){6, 1, 1}, (LayerArg){.op = NN_OP_LINEAR, .cout = 3, .bias = 1, .batch = 1});
}

static void test_grad_conv_k3_s1_p1(void)
{
    LayerArg a = {.op = NN_OP_CONV2D, .cout = 4, .k = 3, .stride = 1, .pad = 1, .groups = 1, .bias = 1};
    layer_case("conv_k3s1p1_bias", (NnShape){3, 6, 6}, a);
    a.bias = 0;
    layer_case("conv_k3s1p1_nobias", (NnShape){3, 6, 5}, a);
    a.batch = 1;
    layer_case("conv_k3s1p1_batch1", (NnShape){2, 5, 5}, a);
}

static void test_grad_conv_k5_p2(void)
{
    LayerArg a = {.op = NN_OP_CONV2D, .cout = 3, .k = 5, .stride = 1, .pad = 2, .groups = 1, .bias = 1};
    layer_case("conv_k5p2_bias", (NnShape){2, 7, 7}, a);
    a.bias = 0;
    layer_case("conv_k5p2_nobias", (NnShape){2, 6, 6}, a);
}

static void test_grad_conv_k3_s2(void)
{
    LayerArg a = {.op = NN_OP_CONV2D, .cout = 4, .k = 3, .stride = 2, .pad = 0, .groups = 1, .bias = 1};
    layer_case("conv_k3s2p0", (NnShape){3, 7, 7}, a);
    a.pad = 1;
    a.bias = 0;
    layer_case("conv_k3s2p1_nobias", (NnShape){2, 8, 8}, a);
}

static void test_grad_conv_1x1(void)
{
    LayerArg a = {.op = NN_OP_CONV2D, .cout = 3, .k = 1, .stride = 1, .pad = 0, .groups = 1, .bias = 1};
    layer_case("conv_1x1s1_bias", (NnShape){5, 4, 4}, a); /* the no-im2col path */
    a.bias = 0;
    layer_case("conv_1x1s1_nobias", (NnShape){5, 3, 4}, a);
    a.stride = 2;
    a.bias = 1;
    layer_case("conv_1x1s2_bias", (NnShape){3, 5, 5}, a);
    a.bias = 0;
    layer_case("conv_1x1s2_nobias", (NnShape){3, 6, 6}, a);
}

static void test_grad_conv_groups(void)
{
    LayerArg a = {.op = NN_OP_CONV2D, .cout = 6, .k = 3, .stride = 1, .pad = 1, .groups = 2, .bias = 1};
    layer_case("conv_groups2_bias", (NnShape){4, 5, 5}, a);
    a.bias = 0;
    a.stride = 2;
    layer_case("conv_groups2_s2_nobias", (NnShape){4, 7, 7}, a);
    /* channel multiplier 2 with groups == cin: the grouped (not the depthwise) path */
    a = (LayerArg){.op = NN_OP_CONV2D, .cout = 6, .k = 3, .stride = 1, .pad = 1, .groups = 3, .bias = 1};
    layer_case("conv_groups3_mult2", (NnShape){3, 5, 5}, a);
}

static void test_grad_conv_depthwise(void)
{
    LayerArg a = {.op = NN_OP_CONV2D, .cout = 3, .k = 3, .stride = 1, .pad = 1, .groups = 3, .bias = 1};
    layer_case("conv_depthwise_bias", (NnShape){3, 6, 6}, a);
    a.bias = 0;
    a.stride = 2;
    layer_case("conv_depthwise_s2_nobias", (NnShape){3, 7, 7}, a);
    a = (LayerArg){.op = NN_OP_CONV2D, .cout = 4, .k = 5, .stride = 1, .pad = 2, .groups = 4, .bias = 1};
    layer_case("conv_depthwise_k5", (NnShape){4, 5, 5}, a);
}

static void test_grad_conv_multi_chunk(void)
{
    /* a conv whose batch runs as two full im2col chunks and a lone last sample */
    ConvSpec cs = {0, 0, 8, 8, 4, 3, 1, 1, 1};
    int chunk = pick_multi_chunk(&cs, 1);
    CHECK_MSG(chunk > 1, "no cin gives a chunk of 2..12 samples");
    if (chunk < 2) return;
    LayerArg a = {.op = NN_OP_CONV2D, .cout = cs.cout, .k = cs.k, .stride = cs.stride, .pad = cs.pad, .groups = 1,
                  .bias = 1};
    GradCase c = {.label = "conv_multi_chunk", .in = {cs.cin, cs.h, cs.w}, .batch = cs.batch, .build = build_layer,
                  .arg = &a, .training = 1, .multi_chunk = 1};
    grad_check(&c);
    a.act = NN_ACT_RELU;
    c.label = "conv_multi_chunk_relu";
    c.guard = NN_ACT_RELU;
    grad_check(&c);
}

static void test_grad_fused_act(void)
{
    layer_case("linear_relu", (NnShape){6, 1, 1},
               (LayerArg){.op = NN_OP_LINEAR, .cout = 8, .bias = 1, .act = NN_ACT_RELU, .batch = 4});
    layer_case("linear_relu6", (NnShape){6, 1, 1},
               (LayerArg){.op = NN_OP_LINEAR, .cout = 8, .bias = 1, .act = NN_ACT_RELU6, .x_scale = 8, .batch = 4});
    layer_case("conv_relu", (NnShape){2, 5, 5},
               (LayerArg){.op = NN_OP_CONV2D, .cout = 3, .k = 3, .stride = 1, .pad = 1, .groups = 1, .bias = 1,
                          .act = NN_ACT_RELU});
    layer_case("conv_relu6", (NnShape){2, 5, 5},
               (LayerArg){.op = NN_OP_CONV2D, .cout = 3, .k = 3, .stride = 1, .pad = 1, .groups = 1, .bias = 1,
                          .act = NN_ACT_RELU6, .x_scale = 8});
    layer_case("bn_train_relu", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_BATCHNORM, .act = NN_ACT_RELU});
    layer_case("bn_eval_relu", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_BATCHNORM, .act = NN_ACT_RELU, .eval = 1});
    layer_case("conv_depthwise_relu6", (NnShape){3, 5, 5},
               (LayerArg){.op = NN_OP_CONV2D, .cout = 3, .k = 3, .stride = 1, .pad = 1, .groups = 3, .bias = 1,
                          .act = NN_ACT_RELU6, .x_scale = 12});
    layer_case("conv_1x1_relu", (NnShape){4, 3, 3},
               (LayerArg){.op = NN_OP_CONV2D, .cout = 3, .k = 1, .stride = 1, .groups = 1, .bias = 1,
                          .act = NN_ACT_RELU});
    layer_case("conv_groups2_relu6", (NnShape){4, 4, 4},
               (LayerArg){.op = NN_OP_CONV2D, .cout = 4, .k = 3, .stride = 1, .pad = 1, .groups = 2, .bias = 1,
                          .act = NN_ACT_RELU6, .x_scale = 8});
    layer_case("gn_relu", (NnShape){4, 3, 3}, (LayerArg){.op = NN_OP_GROUPNORM, .groups = 2, .act = NN_ACT_RELU});
    NnAct relu = NN_ACT_RELU;
    GradCase c = {.label = "residual_relu", .in = {2, 4, 4}, .batch = 2, .build = build_residual, .arg = &relu,
                  .training = 1, .guard = NN_ACT_RELU};
    grad_check(&c);
}

static void test_grad_act_standalone(void)
{
    layer_case("relu", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_ACT, .act = NN_ACT_RELU});
    layer_case("relu6", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_ACT, .act = NN_ACT_RELU6});
}

static void test_grad_maxpool(void)
{
    layer_case("maxpool_2x2s2", (NnShape){2, 6, 6}, (LayerArg){.op = NN_OP_MAXPOOL, .k = 2, .stride = 2});
    layer_case("maxpool_3x3s2p1", (NnShape){2, 7, 7}, (LayerArg){.op = NN_OP_MAXPOOL, .k = 3, .stride = 2, .pad = 1});
    layer_case("maxpool_3x3s1", (NnShape){2, 5, 6}, (LayerArg){.op = NN_OP_MAXPOOL, .k = 3, .stride = 1});
}

static void test_grad_avgpool(void)
{
    layer_case("avgpool_2x2s2", (NnShape){2, 6, 6}, (LayerArg){.op = NN_OP_AVGPOOL, .k = 2, .stride = 2});
    layer_case("avgpool_3x3s2p1", (NnShape){2, 7, 7}, (LayerArg){.op = NN_OP_AVGPOOL, .k = 3, .stride = 2, .pad = 1});
}

static void test_grad_gap(void) { layer_case("gap", (NnShape){3, 4, 5}, (LayerArg){.op = NN_OP_GAP}); }

static void test_grad_batchnorm(void)
{
    layer_case("bn_train", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_BATCHNORM, .x_scale = 2, .batch = 4});
    layer_case("bn_train_flat", (NnShape){5, 1, 1}, (LayerArg){.op = NN_OP_BATCHNORM, .batch = 6});
    layer_case("bn_eval", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_BATCHNORM, .eval = 1});
}

static void test_grad_groupnorm(void)
{
    layer_case("gn_groups1", (NnShape){4, 3, 3}, (LayerArg){.op = NN_OP_GROUPNORM, .groups = 1, .batch = 2});
    layer_case("gn_groups2", (NnShape){4, 3, 3}, (LayerArg){.op = NN_OP_GROUPNORM, .groups = 2, .batch = 2});
    layer_case("gn_groups_c", (NnShape){4, 3, 3}, (LayerArg){.op = NN_OP_GROUPNORM, .groups = 4, .batch = 2});
    layer_case("gn_eval", (NnShape){6, 2, 2}, (LayerArg){.op = NN_OP_GROUPNORM, .groups = 3, .eval = 1});
}

static void test_grad_dropout(void)
{
    layer_case("dropout_train", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_DROPOUT, .p = 0.3f});
    layer_case("dropout_eval", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_DROPOUT, .p = 0.3f, .eval = 1});
}

static void test_grad_residual_add(void)
{
    NnAct none = NN_ACT_NONE;
    GradCase c = {.label = "residual", .in = {3, 4, 4}, .batch = 2, .build = build_residual, .arg = &none,
                  .training = 1};
    grad_check(&c);
    c = (GradCase){.label = "add_same_operand", .in = {2, 4, 4}, .batch = 2, .build = build_add_same,
                   .training = 1};
    grad_check(&c);
    layer_case("add_input_twice", (NnShape){2, 3, 3}, (LayerArg){.op = NN_OP_ADD});
}

static void test_grad_flatten(void)
{
    GradCase c = {.label = "flatten_mid", .in = {2, 5, 5}, .batch = 3, .build = build_flatten_mid, .training = 1};
    grad_check(&c);
    c = (GradCase){.label = "flatten_input", .in = {2, 3, 3}, .batch = 3, .build = build_flatten_input,
                   .training = 1};
    grad_check(&c);
}

static void test_grad_features(void)
{
    GradCase c = {.label = "features_grad", .in = {2, 5, 5}, .batch = 3, .build = build_features, .training = 1,
                  .features = 1};
    grad_check(&c);
}

static void test_grad_composite(void)
{
    GradCase c = {.label = "composite", .in = {3, 8, 8}, .batch = 4, .build = build_composite, .training = 1};
    grad_check(&c);
    c.label = "composite_eval";
    c.training = 0;
    grad_check(&c);
}

static void test_dropout_mask_counters(void)
{
    NnModel m;
    CHECK_OK(nn_model_init(&m, "dropout", (NnShape){4, 4, 4}, 2));
    int d = nn_dropout(&m, m.input, 0.5f);
    int f = nn_flatten(&m, d);
    CHECK_OK(nn_model_finalize(&m, f, f, 64));
    if (m.status != FH_OK || !m.finalized) {
        nn_model_free(&m);
        return;
    }
    float x[128];
    for (int i = 0; i < 128; i++) x[i] = 1.0f + (float)i;
    m.dropout_seed = SEED;
    m.dropout_ctr[0] = 1;
    m.dropout_ctr[1] = 2;
    m.dropout_ctr[2] = 3;
    CHECK_OK(nn_model_forward(&m, x, 2));
    float y1[128];
    memcpy(y1, nn_model_logits(&m), sizeof y1);
    int kept = 0, ok = 1;
    for (int i = 0; i < 128; i++) {
        kept += y1[i] != 0.0f;
        ok &= y1[i] == 0.0f || y1[i] == x[i] * 2.0f; /* kept values are scaled by 1 / (1 - p) */
    }
    CHECK(ok);
    CHECK_MSG(kept > 32 && kept < 96, "kept %d of 128 at p = 0.5", kept);
    CHECK_OK(nn_model_forward(&m, x, 2));
    CHECK(memcmp(y1, nn_model_logits(&m), sizeof y1) == 0); /* same counters: same mask */
    m.dropout_ctr[2] = 4;
    CHECK_OK(nn_model_forward(&m, x, 2));
    CHECK(memcmp(y1, nn_model_logits(&m), sizeof y1) != 0); /* next step: a new mask */
    nn_model_set_training(&m, 0);
    CHECK_OK(nn_model_forward(&m, x, 2));
    CHECK(memcmp(x, nn_model_logits(&m), sizeof y1) == 0); /* eval: identity */
    nn_model_free(&m);
}

/* ============================== forward values ============================== */
/* The finite-difference checks only test that backward matches forward; these pin forward itself. */

/* input -> one layer (-> flatten), finalised and initialised; NULL after a failure */
static const float *single_layer(NnModel *m, const char *label, NnShape in, int batch, LayerArg a, const float *x)
{
    GradCase c = {.label = label, .in = in, .batch = batch, .build = build_layer, .arg = &a, .training = 1};
    int st = build_case(m, &c);
    CHECK_OK(st);
    if (st != FH_OK) return NULL;
    nn_model_init_params(m, SEED);
    st = nn_model_forward(m, x, batch);
    CHECK_OK(st);
    return st == FH_OK ? nn_model_logits(m) : NULL;
}

static void test_forward_values(void)
{
    NnModel m;
    FhRng rng = rng_for("forward_values", 0);

    /* linear: y = x w^T + b; Kaiming-uniform(a = sqrt 5) init is uniform within 1/sqrt(fan_in) */
    float xl[3 * 5];
    fill_normal(&rng, xl, 15, 1.0);
    const float *y = single_layer(&m, "linear", (NnShape){5, 1, 1}, 3,
                                  (LayerArg){.op = NN_OP_LINEAR, .cout = 4, .bias = 1}, xl);
    const NnParamView *vw = nn_model_view(&m, "fc1.weight"), *vb = nn_model_view(&m, "fc1.bias");
    CHECK(vw && vb);
    if (y && vw && vb) {
        CHECK(vw->ndim == 2 && vw->dims[0] == 4 && vw->dims[1] == 5 && vb->count == 4);
        const float *w = m.state + vw->offset, *b = m.state + vb->offset;
        double bound = 1.0 / sqrt(5.0);
        CHECK(max_abs(w, 20) <= bound && max_abs(w, 20) > 0.5 * bound);
        CHECK(max_abs(b, 4) <= bound && max_abs(b, 4) > 0.0);
        for (int i = 0; i < 3; i++)
            for (int o = 0; o < 4; o++) {
                double want = b[o];
                for (int k = 0; k < 5; k++) want += (double)xl[i * 5 + k] * w[o * 5 + k];
                CHECK_NEAR(y[i * 4 + o], want, 1e-5);
            }
    }
    nn_model_free(&m);

    /* max-pool 3x3 s2 p1 on negative values: the padding never wins (it is -inf, not 0) */
    float xp[16];
    for (int i = 0; i < 16; i++) xp[i] = -(float)(i + 1);
    y = single_layer(&m, "maxpool_values", (NnShape){1, 4, 4}, 1,
                     (LayerArg){.op = NN_OP_MAXPOOL, .k = 3, .stride = 2, .pad = 1}, xp);
    if (y) CHECK(y[0] == -1.0f && y[1] == -2.0f && y[2] == -5.0f && y[3] == -6.0f);
    nn_model_free(&m);

    /* max-pool ties: the first maximum wins, as in PyTorch, and takes the whole gradient */
    float xt[16];
    for (int i = 0; i < 16; i++) xt[i] = 3.0f;
    y = single_layer(&m, "maxpool_ties", (NnShape){1, 4, 4}, 1, (LayerArg){.op = NN_OP_MAXPOOL, .k = 2, .stride = 2},
                     xt);
    if (y) {
        m.need_input_grad = 1;
        const float ones[4] = {1, 1, 1, 1};
        nn_model_zero_grad(&m);
        nn_model_backward(&m, ones, NULL);
        const float *dx = m.tensors[m.input].grad;
        for (int i = 0; i < 16; i++) {
            int top_left = (i / 4) % 2 == 0 && (i % 4) % 2 == 0;
            CHECK_MSG(dx[i] == (top_left ? 1.0f : 0.0f), "dx[%d] = %g", i, (double)dx[i]);
        }
    }
    nn_model_free(&m);

    /* the same through the general path (3x3 s2 p1): each window's first valid element wins */
    y = single_layer(&m, "maxpool_ties_3x3", (NnShape){1, 4, 4}, 1,
                     (LayerArg){.op = NN_OP_MAXPOOL, .k = 3, .stride = 2, .pad = 1}, xt);
    if (y) {
        m.need_input_grad = 1;
        const float ones[4] = {1, 1, 1, 1};
        nn_model_zero_grad(&m);
        nn_model_backward(&m, ones, NULL);
        const float *dx = m.tensors[m.input].grad;
        for (int i = 0; i < 16; i++) {
            int first = i == 0 || i == 1 || i == 4 || i == 5; /* windows start at (0,0) (0,1) (1,0) (1,1) */
            CHECK_MSG(dx[i] == (first ? 1.0f : 0.0f), "dx[%d] = %g", i, (double)dx[i]);
        }
    }
    nn_model_free(&m);

    /* avg-pool 3x3 s2 p1 counts the padding (count_include_pad): windows hold 4, 6, 6 and 9 ones */
    for (int i = 0; i < 16; i++) xt[i] = 1.0f;
    y = single_layer(&m, "avgpool_values", (NnShape){1, 4, 4}, 1,
                     (LayerArg){.op = NN_OP_AVGPOOL, .k = 3, .stride = 2, .pad = 1}, xt);
    if (y) {
        CHECK_NEAR(y[0], 4.0 / 9.0, 1e-6);
        CHECK_NEAR(y[1], 6.0 / 9.0, 1e-6);
        CHECK_NEAR(y[2], 6.0 / 9.0, 1e-6);
        CHECK_NEAR(y[3], 1.0, 1e-6);
    }
    nn_model_free(&m);

    /* global average pool: the plane means */
    y = single_layer(&m, "gap_values", (NnShape){2, 2, 4}, 1, (LayerArg){.op = NN_OP_GAP}, xp);
    if (y) {
        CHECK_NEAR(y[0], -4.5, 1e-6);
        CHECK_NEAR(y[1], -12.5, 1e-6);
    }
    nn_model_free(&m);

    /* ReLU and ReLU6 */
    const float xa[6] = {-2.0f, -0.0f, 0.5f, 5.5f, 6.0f, 7.25f};
    y = single_layer(&m, "relu_values", (NnShape){6, 1, 1}, 1, (LayerArg){.op = NN_OP_ACT, .act = NN_ACT_RELU}, xa);
    if (y) CHECK(y[0] == 0.0f && y[1] == 0.0f && y[2] == 0.5f && y[3] == 5.5f && y[4] == 6.0f && y[5] == 7.25f);
    nn_model_free(&m);
    y = single_layer(&m, "relu6_values", (NnShape){6, 1, 1}, 1, (LayerArg){.op = NN_OP_ACT, .act = NN_ACT_RELU6}, xa);
    if (y) CHECK(y[0] == 0.0f && y[1] == 0.0f && y[2] == 0.5f && y[3] == 5.5f && y[4] == 6.0f && y[5] == 6.0f);
    nn_model_free(&m);

    /* add of a tensor to itself doubles it; a flatten is the identity on the data */
    y = single_layer(&m, "add_values", (NnShape){6, 1, 1}, 1, (LayerArg){.op = NN_OP_ADD}, xa);
    if (y)
        for (int i = 0; i < 6; i++) CHECK(y[i] == 2.0f * xa[i]);
    nn_model_free(&m);
    y = single_layer(&m, "flatten_values", (NnShape){1, 2, 3}, 1, (LayerArg){.op = NN_OP_FLATTEN}, xa);
    if (y) CHECK(memcmp(y, xa, sizeof xa) == 0);
    nn_model_free(&m);
}

/* ============================== BLAS conv vs reference ============================== */

static int g_conv_saturated; /* outputs that ReLU6 clipped at 6, over all comparisons */

/* The fused kernels nn_conv2d_{forward,backward}_act against act(reference) and the reference backward of
 * dy * act'(y), with act'(y) read off the kernel's own output (the documented contract); NN_ACT_NONE goes
 * through the plain nn_conv2d_forward / nn_conv2d_backward entry points. */
static void conv_compare(const ConvSpec *cs, int bias, NnAct act, int expect_chunks)
{
    NnConvShape s = {cs->batch, cs->cin, cs->h, cs->w, cs->cout, cs->k, cs->stride, cs->pad, cs->groups, 0, 0};
    s.ho = nn_conv_out_size(s.h, s.k, s.stride, s.pad);
    s.wo = nn_conv_out_size(s.w, s.k, s.stride, s.pad);
    char label[160];
    snprintf(label, sizeof label, "conv b%d %dx%dx%d -> %d k%d s%d p%d g%d%s%s", s.batch, s.cin, s.h, s.w, s.cout,
             s.k, s.stride, s.pad, s.groups, bias ? " bias" : "",
             act == NN_ACT_RELU ? " relu" : act == NN_ACT_RELU6 ? " relu6" : "");
    int chunk = nn_conv2d_chunk(&s);
    if (expect_chunks > 1) {
        int n_chunks = (s.batch + chunk - 1) / chunk;
        CHECK_MSG(chunk > 1 && n_chunks >= expect_chunks, "%s: chunk %d gives %d chunks, wanted %d", label, chunk,
                  n_chunks, expect_chunks);
    }
    int64_t nws = nn_conv2d_workspace(&s, chunk);
    int64_t nx = (int64_t)s.batch * s.cin * s.h * s.w, ny = (int64_t)s.batch * s.cout * s.ho * s.wo;
    int64_t nw = (int64_t)s.cout * (s.cin / s.groups) * s.k * s.k;
    FhRng rng = rng_for(label, 0);
    float *x = falloc(nx), *w = falloc(nw), *b = falloc(s.cout), *dy = falloc(ny), *ws = falloc(nws);
    fill_normal(&rng, x, nx, act == NN_ACT_RELU6 ? 6.0 : 1.0);
    fill_normal(&rng, w, nw, 0.3);
    fill_normal(&rng, b, s.cout, 0.5);
    fill_normal(&rng, dy, ny, 1.0);
    for (int64_t i = 0; i < nws; i++) ws[i] = NAN;

    float *y = falloc(ny), *y_ref = falloc(ny);
    for (int64_t i = 0; i < ny; i++) y[i] = NAN; /* forward must write every output */
    if (act == NN_ACT_NONE) nn_conv2d_forward(y, x, w, bias ? b : NULL, &s, ws);
    else nn_conv2d_forward_act(y, x, w, bias ? b : NULL, &s, act, ws);
    nn_conv2d_forward_ref(y_ref, x, w, bias ? b : NULL, &s);
    for (int64_t i = 0; i < ny; i++) {
        if (act != NN_ACT_NONE && y_ref[i] < 0.0f) y_ref[i] = 0.0f;
        if (act == NN_ACT_RELU6 && y_ref[i] > 6.0f) y_ref[i] = 6.0f;
        g_conv_saturated += act == NN_ACT_RELU6 && y[i] == 6.0f;
    }
    check_close(label, "forward", y, y_ref, ny, CONV_RTOL);

    /* the reference gets dy * act'(y) */
    float *dy_act = fdup(dy, ny), *dy_ref = fdup(dy, ny);
    for (int64_t i = 0; i < ny; i++)
        if ((act != NN_ACT_NONE && !(y[i] > 0.0f)) || (act == NN_ACT_RELU6 && !(y[i] < 6.0f))) dy_ref[i] = 0.0f;

    /* backward accumulates: start every gradient from the same non-zero values */
    float *dx0 = falloc(nx), *dw0 = falloc(nw), *db0 = falloc(s.cout);
    fill_normal(&rng, dx0, nx, 1.0);
    fill_normal(&rng, dw0, nw, 1.0);
    fill_normal(&rng, db0, s.cout, 1.0);
    float *dx = fdup(dx0, nx), *dw = fdup(dw0, nw), *db = fdup(db0, s.cout);
    float *dx_ref = fdup(dx0, nx), *dw_ref = fdup(dw0, nw), *db_ref = fdup(db0, s.cout);
    for (int64_t i = 0; i < nws; i++) ws[i] = NAN;
    if (act == NN_ACT_NONE) nn_conv2d_backward(dx, dw, bias ? db : NULL, dy_act, x, w, &s, ws);
    else nn_conv2d_backward_act(dx, dw, bias ? db : NULL, dy_act, y, x, w, &s, act, ws);
    nn_conv2d_backward_ref(dx_ref, dw_ref, bias ? db_ref : NULL, dy_ref, x, w, &s);
    check_close(label, "backward dx", dx, dx_ref, nx, CONV_RTOL);
    check_close(label, "backward dw", dw, dw_ref, nw, CONV_RTOL);
    check_close(label, "backward db", db, db_ref, s.cout, CONV_RTOL);
    if (act == NN_ACT_NONE) CHECK_MSG(memcmp(dy_act, dy, sizeof(float) * (size_t)ny) == 0, "%s: dy was written", label);
    else CHECK_MSG(memcmp(dy_act, dy_ref, sizeof(float) * (size_t)ny) == 0, "%s: dy is not dy * act'(y)", label);
    /* the reference's own increments must not be vacuous */
    CHECK_MSG(max_diff(dw_ref, dw0, nw) > 1e-3 && max_diff(dx_ref, dx0, nx) > 1e-3, "%s: zero gradient", label);

    /* dx = NULL (a first layer): the same dw and db */
    float *dw2 = fdup(dw0, nw), *db2 = fdup(db0, s.cout);
    memcpy(dy_act, dy, sizeof(float) * (size_t)ny);
    if (act == NN_ACT_NONE) nn_conv2d_backward(NULL, dw2, bias ? db2 : NULL, dy_act, x, w, &s, ws);
    else nn_conv2d_backward_act(NULL, dw2, bias ? db2 : NULL, dy_act, y, x, w, &s, act, ws);
    check_close(label, "backward dw without dx", dw2, dw_ref, nw, CONV_RTOL);
    check_close(label, "backward db without dx", db2, db_ref, s.cout, CONV_RTOL);

    float *bufs[] = {x, w, b, dy, ws, y, y_ref, dy_act, dy_ref, dx0,
                     dw0, db0, dx, dw, db, dx_ref, dw_ref, db_ref, dw2, db2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

static void test_conv_blas_matches_ref(void)
{
    static const ConvSpec specs[] = {
        {3, 3, 8, 8, 4, 3, 1, 1, 1},  {3, 3, 8, 8, 4, 3, 1, 0, 1},  {2, 3, 9, 7, 5, 3, 2, 1, 1},
        {3, 2, 6, 6, 3, 5, 1, 2, 1},  {2, 4, 7, 7, 4, 3, 2, 0, 1},  {2, 3, 5, 5, 2, 3, 1, 3, 1},
        {2, 2, 6, 7, 3, 2, 2, 2, 1},  {2, 2, 5, 5, 3, 3, 3, 1, 1},  {2, 5, 4, 4, 3, 1, 1, 0, 1},
        {2, 3, 5, 5, 4, 1, 2, 0, 1},  {2, 3, 4, 4, 2, 1, 1, 1, 1},  {2, 4, 6, 6, 6, 3, 1, 1, 2},
        {3, 4, 7, 7, 4, 3, 2, 1, 2},  {2, 4, 5, 5, 6, 1, 1, 0, 2},  {2, 6, 5, 5, 6, 3, 1, 2, 3},
        {2, 4, 6, 6, 4, 3, 1, 1, 4},  {2, 3, 9, 9, 3, 5, 2, 0, 3},  {2, 3, 5, 6, 3, 3, 1, 3, 3},
        {2, 3, 6, 6, 6, 3, 1, 1, 3},  {2, 8, 4, 4, 8, 3, 2, 1, 8},  {2, 1, 7, 7, 2, 3, 1, 1, 1},
        {2, 3, 20, 19, 4, 3, 1, 1, 1}, {2, 2, 33, 17, 3, 5, 1, 2, 1}, {2, 3, 18, 18, 2, 3, 1, 0, 1},
        {2, 4, 17, 21, 4, 3, 1, 1, 4}, {2, 2, 16, 16, 4, 3, 1, 1, 2}, {2, 2, 40, 3, 2, 3, 1, 3, 1},
    };
    g_conv_saturated = 0;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        ConvSpec one = specs[i];
        conv_compare(&specs[i], (int)(i % 2), NN_ACT_NONE, 0);
        conv_compare(&specs[i], (int)((i + 1) % 2), NN_ACT_RELU, 0);
        one.batch = 1;
        conv_compare(&one, 1, NN_ACT_NONE, 0);
        conv_compare(&one, 0, NN_ACT_RELU6, 0);
    }
    CHECK_MSG(g_conv_saturated > 0, "no output reached the ReLU6 ceiling");
}

/* The smallest power-of-two cin for which one im2col chunk holds at most 12 samples, whatever the chunk
 * budget of kernels_blas.c; the batch becomes 2 chunks + `extra` samples. Returns the chunk. */
static int pick_multi_chunk(ConvSpec *cs, int extra)
{
    for (int cin = 1; cin <= 4096; cin *= 2) {
        NnConvShape s = {1 << 20, cin, cs->h, cs->w, cs->cout, cs->k, cs->stride, cs->pad, 1,
                         nn_conv_out_size(cs->h, cs->k, cs->stride, cs->pad),
                         nn_conv_out_size(cs->w, cs->k, cs->stride, cs->pad)};
        int chunk = nn_conv2d_chunk(&s);
        if (chunk <= 12) {
            cs->cin = cin;
            cs->batch = 2 * chunk + extra;
            return chunk;
        }
    }
    return 0;
}

static void test_conv_blas_multi_chunk(void)
{
    /* {batch, cin} are picked: two full chunks and then a lone sample, or a partial chunk of 2..3 */
    ConvSpec t[] = {
        {0, 0, 16, 16, 8, 5, 1, 2, 1},
        {0, 0, 32, 32, 8, 3, 2, 1, 1},
        {0, 0, 32, 32, 16, 1, 2, 0, 1}, /* 1x1 stride 2 goes through im2col too */
        {0, 0, 12, 10, 6, 3, 1, 0, 1},
    };
    for (int i = 0; i < 4; i++) {
        int chunk = pick_multi_chunk(&t[i], i % 2 ? 1 : (i == 0 ? 2 : 3));
        CHECK_MSG(chunk > 1, "template %d: no cin gives a chunk of 2..12 samples", i);
        conv_compare(&t[i], i % 2, NN_ACT_NONE, 3);
        conv_compare(&t[i], 1, NN_ACT_RELU, 3);
    }
}

/* ============================== batch norm statistics ============================== */

static void test_batchnorm_running_stats(void)
{
    enum { B = 5, C = 3, HW = 16 };
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bn", (NnShape){C, 4, 4}, B));
    int bn = nn_batchnorm(&m, m.input, NN_ACT_NONE);
    int f = nn_flatten(&m, bn);
    CHECK_OK(nn_model_finalize(&m, f, f, C * HW));
    if (!m.finalized) {
        nn_model_free(&m);
        return;
    }
    nn_model_init_params(&m, SEED);
    const NnParamView *vm = nn_model_view(&m, "bn1.running_mean"), *vv = nn_model_view(&m, "bn1.running_var");
    const NnParamView *vg = nn_model_view(&m, "bn1.weight"), *vb = nn_model_view(&m, "bn1.bias");
    CHECK(vm && vv && vg && vb);
    if (!vm || !vv || !vg || !vb) {
        nn_model_free(&m);
        return;
    }
    CHECK(!vm->trainable && !vv->trainable && vm->offset >= m.n_params && vv->offset >= m.n_params);
    for (int c = 0; c < C; c++) { /* PyTorch's initial values, gamma = 1, beta = 0 */
        CHECK(m.state[vg->offset + c] == 1.0f && m.state[vb->offset + c] == 0.0f);
        CHECK(m.state[vm->offset + c] == 0.0f && m.state[vv->offset + c] == 1.0f);
    }
    float *rm = m.state + vm->offset, *rv = m.state + vv->offset;
    const float rm0[C] = {0.2f, -0.3f, 0.5f}, rv0[C] = {1.5f, 0.7f, 2.0f};
    memcpy(rm, rm0, sizeof rm0);
    memcpy(rv, rv0, sizeof rv0);

    FhRng rng = rng_for("bn_running", 0);
    float x[B * C * HW];
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < HW; i++)
                x[(b * C + c) * HW + i] = (float)(1.5 * (c + 1) * fh_rng_normal(&rng) + 2.0 * c - 1.0);
    CHECK_OK(nn_model_forward(&m, x, B));
    const float *y = nn_model_logits(&m);
    for (int c = 0; c < C; c++) {
        double s = 0.0, sy = 0.0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) {
                s += x[(b * C + c) * HW + i];
                sy += y[(b * C + c) * HW + i];
            }
        double n = B * HW, mean = s / n, ymean = sy / n, ss = 0.0, syy = 0.0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) {
                double d = x[(b * C + c) * HW + i] - mean, e = y[(b * C + c) * HW + i] - ymean;
                ss += d * d;
                syy += e * e;
            }
        double var_biased = ss / n, var_unbiased = ss / (n - 1);
        /* PyTorch: momentum 0.1, unbiased variance for the running estimate */
        CHECK_NEAR(rm[c], 0.9 * rm0[c] + 0.1 * mean, 1e-5 * (1.0 + fabs(mean)));
        CHECK_NEAR(rv[c], 0.9 * rv0[c] + 0.1 * var_unbiased, 1e-5 * (1.0 + var_unbiased));
        /* and the biased one to normalise: per-channel mean 0, variance var / (var + eps) ~ 1 */
        CHECK_NEAR(ymean, 0.0, 1e-5);
        CHECK_NEAR(syy / n, var_biased / (var_biased + 1e-5), 1e-4);
        CHECK_NEAR(syy / n, 1.0, 1e-3);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) {
                double want = (x[(b * C + c) * HW + i] - mean) / sqrt(var_biased + 1e-5);
                CHECK_NEAR(y[(b * C + c) * HW + i], want, 1e-4);
            }
    }

    /* bn_update_running = 0 (SAM's second pass): batch statistics, running stats frozen */
    float rm1[C], rv1[C];
    memcpy(rm1, rm, sizeof rm1);
    memcpy(rv1, rv, sizeof rv1);
    for (int i = 0; i < B * C * HW; i++) x[i] = 3.0f * x[i] + 0.5f;
    m.bn_update_running = 0;
    CHECK_OK(nn_model_forward(&m, x, B));
    CHECK(memcmp(rm1, rm, sizeof rm1) == 0 && memcmp(rv1, rv, sizeof rv1) == 0);
    for (int c = 0; c < C; c++) {
        double s = 0.0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) s += y[(b * C + c) * HW + i];
        CHECK_NEAR(s / (B * HW), 0.0, 1e-5);
    }
    m.bn_update_running = 1;

    /* eval: running statistics normalise, and stay put; gamma and beta apply */
    for (int c = 0; c < C; c++) {
        m.state[vg->offset + c] = 0.5f + (float)c;
        m.state[vb->offset + c] = 0.25f - (float)c;
    }
    nn_model_set_training(&m, 0);
    CHECK_OK(nn_model_forward(&m, x, 2));
    CHECK(memcmp(rm1, rm, sizeof rm1) == 0 && memcmp(rv1, rv, sizeof rv1) == 0);
    for (int b = 0; b < 2; b++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < HW; i++) {
                int j = (b * C + c) * HW + i;
                double want = (x[j] - rm[c]) / sqrt((double)rv[c] + 1e-5) * (0.5 + c) + (0.25 - c);
                CHECK_NEAR(y[j], want, 1e-4 * (1.0 + fabs(want)));
            }
    /* a second training step moves the running statistics on from where they are */
    nn_model_set_training(&m, 1);
    CHECK_OK(nn_model_forward(&m, x, B));
    for (int c = 0; c < C; c++) {
        double s = 0.0, ss = 0.0, n = B * HW;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) s += x[(b * C + c) * HW + i];
        double mean = s / n;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) ss += (x[(b * C + c) * HW + i] - mean) * (x[(b * C + c) * HW + i] - mean);
        CHECK_NEAR(rm[c], 0.9 * rm1[c] + 0.1 * mean, 1e-5 * (1.0 + fabs(mean)));
        CHECK_NEAR(rv[c], 0.9 * rv1[c] + 0.1 * ss / (n - 1), 1e-5 * (1.0 + ss / (n - 1)));
    }
    nn_model_free(&m);
}

/* a channel whose mean is large against its spread (1000 +- 0.1): no cancellation in the variance */
static void test_batchnorm_large_offset(void)
{
    enum { B = 4, C = 2, HW = 25 };
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bn_offset", (NnShape){C, 5, 5}, B));
    int f = nn_flatten(&m, nn_batchnorm(&m, m.input, NN_ACT_NONE));
    CHECK_OK(nn_model_finalize(&m, f, f, C * HW));
    if (!m.finalized) {
        nn_model_free(&m);
        return;
    }
    nn_model_init_params(&m, SEED);
    FhRng rng = rng_for("bn_offset", 0);
    float x[B * C * HW];
    for (int i = 0; i < B * C * HW; i++)
        x[i] = (float)((i / HW) % C == 0 ? 1000.0 + 0.1 * fh_rng_normal(&rng) : -3e4 + 2.0 * fh_rng_normal(&rng));
    CHECK_OK(nn_model_forward(&m, x, B));
    const float *y = nn_model_logits(&m);
    for (int c = 0; c < C; c++) {
        double s = 0.0, ss = 0.0, n = B * HW;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) s += x[(b * C + c) * HW + i];
        double mean = s / n;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) ss += (x[(b * C + c) * HW + i] - mean) * (x[(b * C + c) * HW + i] - mean);
        double inv = 1.0 / sqrt(ss / n + 1e-5);
        double err = 0.0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HW; i++) {
                int j = (b * C + c) * HW + i;
                err = fmax(err, fabs(y[j] - (x[j] - mean) * inv));
            }
        CHECK_MSG(err <= 1e-2, "channel %d: max error %.3g of the normalised output", c, err);
    }
    nn_model_free(&m);
}

static void test_groupnorm_normalises(void)
{
    enum { B = 2, C = 6, HW = 9, G = 3 };
    NnModel m;
    CHECK_OK(nn_model_init(&m, "gn", (NnShape){C, 3, 3}, B));
    int gn = nn_groupnorm(&m, m.input, G, NN_ACT_NONE);
    int f = nn_flatten(&m, gn);
    CHECK_OK(nn_model_finalize(&m, f, f, C * HW));
    if (!m.finalized) {
        nn_model_free(&m);
        return;
    }
    nn_model_init_params(&m, SEED);
    CHECK(m.n_buffers == 0);
    FhRng rng = rng_for("gn_normalises", 0);
    float x[B * C * HW];
    for (int i = 0; i < B * C * HW; i++) x[i] = (float)(3.0 * fh_rng_normal(&rng) + 1.0 + (i % 7));
    CHECK_OK(nn_model_forward(&m, x, B));
    const float *y = nn_model_logits(&m);
    int n = C / G * HW;
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++) {
            const float *xg = x + (b * C + g * (C / G)) * HW, *yg = y + (b * C + g * (C / G)) * HW;
            double s = 0.0, ss = 0.0;
            for (int i = 0; i < n; i++) s += xg[i];
            double mean = s / n;
            for (int i = 0; i < n; i++) ss += (xg[i] - mean) * (xg[i] - mean);
            double inv = 1.0 / sqrt(ss / n + 1e-5);
            for (int i = 0; i < n; i++) CHECK_NEAR(yg[i], (xg[i] - mean) * inv, 1e-4);
        }
    nn_model_free(&m);
}

/* ============================== losses ============================== */

typedef struct {
    const int32_t *labels;
    const float *weights, *adjust;
    const float *teacher;
    float temperature, weight;
    int kl;
    int batch, classes;
} LossArg;

static double loss_eval(const LossArg *a, const float *z, float *dz)
{
    if (a->kl) return nn_kl_distill(dz, z, a->teacher, a->temperature, a->weight, a->batch, a->classes);
    return nn_softmax_xent(dz, NULL, z, a->labels, a->weights, a->adjust, a->batch, a->classes);
}

/* finite differences of a loss along random directions of the logits */
static void loss_fd(const char *label, const LossArg *a, const float *z0, int n_dirs)
{
    int64_t n = (int64_t)a->batch * a->classes;
    float *z = fdup(z0, n), *dz = falloc(n), *scratch = falloc(n), *zp = falloc(n), *zm = falloc(n);
    loss_eval(a, z, dz);
    FhRng rng = rng_for(label, 1);
    for (int k = 0; k < n_dirs; k++) {
        double an = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double d = 2.0 * fh_rng_uniform(&rng) - 1.0;
            zp[i] = (float)(z[i] + FD_EPS * d);
            zm[i] = (float)(z[i] - FD_EPS * d);
            an += (double)dz[i] * ((double)zp[i] - (double)zm[i]);
        }
        an /= 2.0 * FD_EPS;
        double fd = (loss_eval(a, zp, scratch) - loss_eval(a, zm, scratch)) / (2.0 * FD_EPS);
        double err = fabs(an - fd), tol = FD_ATOL + FD_RTOL * fmax(fabs(an), fabs(fd));
        if (verbose) printf("\n    %-24s analytic %+.7e  fd %+.7e", label, an, fd);
        CHECK_MSG(err <= tol, "%s: analytic %.7g, finite difference %.7g", label, an, fd);
        CHECK_MSG(fmax(fabs(an), fabs(fd)) >= FD_MIN_DERIV, "%s: directional derivative %.3g too small", label, fd);
    }
    if (verbose) printf("\n  %-44s ", "");
    free(z);
    free(dz);
    free(scratch);
    free(zp);
    free(zm);
}

enum { LB = 4, LC = 5 };

static void loss_data(const char *label, float *z, int32_t *labels, float *w, float *adj)
{
    FhRng rng = rng_for(label, 0);
    fill_normal(&rng, z, LB * LC, 2.0);
    for (int i = 0; i < LB; i++) labels[i] = (int32_t)fh_rng_below(&rng, LC);
    if (w) fill_uniform(&rng, w, LB, 0.25, 2.0);
    if (adj) fill_uniform(&rng, adj, LC, -1.5, 1.5);
}

static void test_xent_grad_fd(void)
{
    float z[LB * LC], w[LB], adj[LC];
    int32_t labels[LB];
    loss_data("xent_fd", z, labels, w, adj);
    loss_fd("xent", &(LossArg){.labels = labels, .batch = LB, .classes = LC}, z, 4);
    loss_fd("xent_weights", &(LossArg){.labels = labels, .weights = w, .batch = LB, .classes = LC}, z, 4);
    loss_fd("xent_adjust", &(LossArg){.labels = labels, .adjust = adj, .batch = LB, .classes = LC}, z, 4);
    loss_fd("xent_both", &(LossArg){.labels = labels, .weights = w, .adjust = adj, .batch = LB, .classes = LC}, z,
            4);
}

/* softmax cross-entropy of one row, in double */
static double xent_row(const float *z, const float *adj, int y, int classes, double *p)
{
    double mx = -INFINITY;
    for (int k = 0; k < classes; k++) mx = fmax(mx, (double)z[k] + (adj ? adj[k] : 0.0));
    double s = 0.0;
    for (int k = 0; k < classes; k++) s += exp((double)z[k] + (adj ? adj[k] : 0.0) - mx);
    double lse = mx + log(s);
    if (p)
        for (int k = 0; k < classes; k++) p[k] = exp((double)z[k] + (adj ? adj[k] : 0.0) - lse);
    return lse - ((double)z[y] + (adj ? adj[y] : 0.0));
}

static void test_xent_per_sample_and_weights(void)
{
    float z[LB * LC], w[LB], ps[LB], ps_w[LB], dz[LB * LC] = {0}, dz1[LB * LC] = {0}, dzw[LB * LC] = {0};
    int32_t labels[LB];
    loss_data("xent_hand", z, labels, w, NULL);
    float loss = nn_softmax_xent(dz, ps, z, labels, NULL, NULL, LB, LC);
    double mean = 0.0, wsum = 0.0;
    for (int i = 0; i < LB; i++) {
        double p[LC];
        double l = xent_row(z + i * LC, NULL, labels[i], LC, p);
        CHECK_NEAR(ps[i], l, 1e-5 * (1.0 + l));
        mean += l / LB;
        wsum += w[i] * l;
        for (int k = 0; k < LC; k++) CHECK_NEAR(dz[i * LC + k], (p[k] - (k == labels[i])) / LB, 1e-6);
    }
    CHECK_NEAR(loss, mean, 1e-5 * (1.0 + mean));

    /* weights of 1 are the unweighted loss */
    const float ones[LB] = {1, 1, 1, 1};
    float loss1 = nn_softmax_xent(dz1, NULL, z, labels, ones, NULL, LB, LC);
    CHECK(loss1 == loss);
    CHECK(memcmp(dz1, dz, sizeof dz) == 0);

    /* weights w: sum(w_i l_i) / B (the batch, not the sum of weights); per_sample stays unweighted */
    float lossw = nn_softmax_xent(dzw, ps_w, z, labels, w, NULL, LB, LC);
    CHECK_NEAR(lossw, wsum / LB, 1e-5 * (1.0 + wsum));
    for (int i = 0; i < LB; i++) {
        CHECK_NEAR(ps_w[i], ps[i], 1e-7);
        for (int k = 0; k < LC; k++) CHECK_NEAR(dzw[i * LC + k], w[i] * dz[i * LC + k], 1e-6);
    }

    /* the gradient accumulates into dlogits */
    float dz2[LB * LC];
    memcpy(dz2, dz, sizeof dz2);
    nn_softmax_xent(dz2, NULL, z, labels, NULL, NULL, LB, LC);
    for (int i = 0; i < LB * LC; i++) CHECK_NEAR(dz2[i], 2.0f * dz[i], 1e-7);
}

static void test_xent_logit_adjust(void)
{
    float z[LB * LC], adj[LC], za[LB * LC], ps_a[LB], ps_b[LB], dz_a[LB * LC] = {0}, dz_b[LB * LC] = {0};
    int32_t labels[LB];
    loss_data("xent_adjust", z, labels, NULL, adj);
    for (int i = 0; i < LB; i++)
        for (int k = 0; k < LC; k++) za[i * LC + k] = z[i * LC + k] + adj[k];
    float la = nn_softmax_xent(dz_a, ps_a, z, labels, NULL, adj, LB, LC);
    float lb = nn_softmax_xent(dz_b, ps_b, za, labels, NULL, NULL, LB, LC);
    CHECK_NEAR(la, lb, 1e-6 * (1.0 + fabs(lb)));
    for (int i = 0; i < LB; i++) {
        CHECK_NEAR(ps_a[i], ps_b[i], 1e-6 * (1.0 + fabs(ps_b[i])));
        CHECK_NEAR(ps_a[i], xent_row(z + i * LC, adj, labels[i], LC, NULL), 1e-5);
    }
    CHECK(max_diff(dz_a, dz_b, LB * LC) <= 1e-7);
    /* and it is not a no-op */
    float plain = nn_softmax_xent(dz_b, NULL, z, labels, NULL, NULL, LB, LC);
    CHECK(fabs(plain - la) > 1e-3);
}

static void test_xent_large_logits(void)
{
    const float z[3 * 4] = {1e4f, -1e4f, 5e3f, 0.0f, /* */ 1e4f, 1e4f, 1e4f, 1e4f, /* */ -1e4f, -1e4f, -1e4f, -9999.0f};
    const int32_t labels[3] = {1, 2, 3};
    float dz[12] = {0}, ps[3];
    float loss = nn_softmax_xent(dz, ps, z, labels, NULL, NULL, 3, 4);
    CHECK(isfinite(loss));
    for (int i = 0; i < 12; i++) CHECK(isfinite(dz[i]));
    CHECK_NEAR(ps[0], 2e4, 1e-2);    /* lse = 1e4, minus z[1] = -1e4 */
    CHECK_NEAR(ps[1], log(4.0), 1e-6); /* all equal */
    double l2 = log(3.0 * exp(-1.0) + 1.0); /* lse - z[3] with z[3] one above the rest */
    CHECK_NEAR(ps[2], l2, 1e-5);
    CHECK_NEAR(loss, (2e4 + log(4.0) + l2) / 3.0, 1e-2);
    CHECK_NEAR(dz[0], 1.0 / 3.0, 1e-6); /* p = (1, 0, 0, 0), label 1 */
    CHECK_NEAR(dz[1], -1.0 / 3.0, 1e-6);
    CHECK_NEAR(dz[2], 0.0, 1e-7);
    float dk[12] = {0};
    float kl = nn_kl_distill(dk, z, z + 4, 2.0f, 1.0f, 2, 4);
    CHECK(isfinite(kl));
    for (int i = 0; i < 8; i++) CHECK(isfinite(dk[i]));
}

/* weight * T^2 * mean_i KL(softmax(t_i / T) || softmax(s_i / T)) and its gradient, in double */
static double kl_direct(double *grad, const float *s, const float *t, double T, double weight, int batch,
                        int classes)
{
    double total = 0.0;
    for (int i = 0; i < batch; i++) {
        double ps[16], pt[16], ss = 0.0, st = 0.0;
        for (int k = 0; k < classes; k++) {
            ps[k] = exp(s[i * classes + k] / T);
            pt[k] = exp(t[i * classes + k] / T);
            ss += ps[k];
            st += pt[k];
        }
        for (int k = 0; k < classes; k++) {
            ps[k] /= ss;
            pt[k] /= st;
            total += pt[k] * (log(pt[k]) - log(ps[k]));
            /* d/ds_k of T^2 KL = T (ps_k - pt_k) */
            grad[i * classes + k] = weight * T * (ps[k] - pt[k]) / batch;
        }
    }
    return weight * T * T * total / batch;
}

static void test_kl_distill(void)
{
    float s[LB * LC], t[LB * LC], dz[LB * LC];
    int32_t unused[LB];
    loss_data("kl_student", s, unused, NULL, NULL);
    loss_data("kl_teacher", t, unused, NULL, NULL);
    const float temps[3] = {1.0f, 2.0f, 4.0f};
    for (int ti = 0; ti < 3; ti++) {
        float T = temps[ti], wgt = 0.7f;
        char label[32];
        snprintf(label, sizeof label, "kl_T%g", (double)T);
        LossArg a = {.kl = 1, .teacher = t, .temperature = T, .weight = wgt, .batch = LB, .classes = LC};
        loss_fd(label, &a, s, 3);
        /* T^2 scaling against a direct double computation */
        double g[LB * LC];
        double want = kl_direct(g, s, t, T, wgt, LB, LC);
        memset(dz, 0, sizeof dz);
        float got = nn_kl_distill(dz, s, t, T, wgt, LB, LC);
        CHECK_MSG(fabs(got - want) <= 1e-5 * (1.0 + fabs(want)), "T = %g: %.8g vs %.8g", (double)T, (double)got, want);
        for (int i = 0; i < LB * LC; i++) CHECK_NEAR(dz[i], g[i], 1e-6);
    }
    /* identical logits: KL 0, gradient 0 */
    memset(dz, 0, sizeof dz);
    float same = nn_kl_distill(dz, s, s, 3.0f, 1.0f, LB, LC);
    CHECK_NEAR(same, 0.0, 1e-7);
    CHECK(max_abs(dz, LB * LC) <= 1e-7);
    /* the gradient accumulates and the weight scales both */
    float dz2[LB * LC] = {0}, dz3[LB * LC] = {0};
    float l1 = nn_kl_distill(dz2, s, t, 2.0f, 1.0f, LB, LC);
    float l3 = nn_kl_distill(dz3, s, t, 2.0f, 3.0f, LB, LC);
    CHECK_NEAR(l3, 3.0 * l1, 1e-5 * (1.0 + fabs(l3)));
    for (int i = 0; i < LB * LC; i++) CHECK_NEAR(dz3[i], 3.0 * dz2[i], 1e-6);
    nn_kl_distill(dz2, s, t, 2.0f, 1.0f, LB, LC);
    for (int i = 0; i < LB * LC; i++) CHECK_NEAR(dz2[i], dz3[i] * (2.0 / 3.0), 1e-6);
}

static void test_count_correct(void)
{
    const float z[4 * 3] = {0.1f, 0.9f, 0.0f, /* 1 */ 2.0f, -1.0f, 1.0f, /* 0 */
                            0.5f, 0.5f, 0.2f, /* tie: first, 0 */ -3.0f, -2.0f, -1.0f /* 2 */};
    const int32_t labels[4] = {1, 2, 0, 2};
    int32_t pred[4] = {-1, -1, -1, -1};
    CHECK(nn_count_correct(pred, z, labels, 4, 3) == 3);
    CHECK(pred[0] == 1 && pred[1] == 0 && pred[2] == 0 && pred[3] == 2);
    int32_t pred2[4] = {-1, -1, -1, -1};
    CHECK(nn_count_correct(pred2, z, NULL, 4, 3) == 0);
    CHECK(memcmp(pred, pred2, sizeof pred) == 0);
    CHECK(nn_count_correct(NULL, z, labels, 4, 3) == 3);
    CHECK(nn_count_correct(NULL, z, labels, 1, 3) == 1);
}

/* ============================== optimisers ============================== */

static const float opt_p0[3] = {1.0f, -2.0f, 0.5f};
static const float opt_g[3][3] = {{0.1f, -0.2f, 0.3f}, {-0.4f, 0.5f, 0.05f}, {0.2f, 0.2f, -0.6f}};

static void test_sgd_pytorch(void)
{
    const struct {
        float mom, wd;
        int nesterov;
        const char *name;
    } cfg[] = {{0.0f, 0.0f, 0, "plain"},          {0.9f, 0.0f, 0, "momentum"},     {0.9f, 0.0f, 1, "nesterov"},
               {0.0f, 0.1f, 0, "weight decay"},   {0.9f, 0.1f, 0, "momentum+wd"}, {0.9f, 0.1f, 1, "nesterov+wd"}};
    const float lr = 0.1f;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        NnSgd opt;
        CHECK_OK(nn_sgd_init(&opt, 3, cfg[c].mom, cfg[c].wd, cfg[c].nesterov));
        CHECK((opt.buf != NULL) == (cfg[c].mom > 0.0f));
        float p[3];
        double ref[3], buf[3] = {0, 0, 0};
        const double mom = cfg[c].mom, wd = cfg[c].wd;
        for (int i = 0; i < 3; i++) ref[i] = p[i] = opt_p0[i];
        for (int t = 0; t < 3; t++) {
            nn_sgd_step(&opt, p, opt_g[t], lr);
            /* torch.optim.SGD: d = g + wd p; buf = d on the first step, else mom buf + (1 - dampening) d;
             * d = nesterov ? d + mom buf : buf; p -= lr d */
            for (int i = 0; i < 3; i++) {
                double d = opt_g[t][i] + wd * ref[i];
                if (mom > 0.0) {
                    buf[i] = t == 0 ? d : mom * buf[i] + d;
                    d = cfg[c].nesterov ? d + mom * buf[i] : buf[i];
                    if (t == 0) CHECK_NEAR(opt.buf[i], opt_g[0][i] + wd * opt_p0[i], 1e-7); /* buffer = gradient */
                }
                ref[i] -= (double)lr * d;
                CHECK_MSG(fabs(p[i] - ref[i]) <= 1e-6, "SGD %s step %d [%d]: %.9g vs %.9g", cfg[c].name, t + 1, i,
                          (double)p[i], ref[i]);
            }
        }
        /* reset: the next step is a first step again */
        nn_sgd_reset(&opt);
        float p2[3] = {opt_p0[0], opt_p0[1], opt_p0[2]}, p3[3] = {opt_p0[0], opt_p0[1], opt_p0[2]};
        nn_sgd_step(&opt, p2, opt_g[0], lr);
        NnSgd fresh;
        CHECK_OK(nn_sgd_init(&fresh, 3, cfg[c].mom, cfg[c].wd, cfg[c].nesterov));
        nn_sgd_step(&fresh, p3, opt_g[0], lr);
        CHECK(memcmp(p2, p3, sizeof p2) == 0);
        nn_sgd_free(&fresh);
        nn_sgd_free(&opt);
    }
    /* by hand: p = 1, g = 1 every step, lr 0.1, momentum 0.9
     * heavy ball: buf 1, 1.9, 2.71 -> p 0.9, 0.71, 0.439
     * nesterov:   d = 1 + 0.9 buf = 1.9, 2.71, 3.439 -> p 0.81, 0.539, 0.1951 */
    const double want[2][3] = {{0.9, 0.71, 0.439}, {0.81, 0.539, 0.1951}};
    for (int nest = 0; nest < 2; nest++) {
        NnSgd opt;
        CHECK_OK(nn_sgd_init(&opt, 1, 0.9f, 0.0f, nest));
        float p = 1.0f, g = 1.0f;
        for (int t = 0; t < 3; t++) {
            nn_sgd_step(&opt, &p, &g, 0.1f);
            CHECK_NEAR(p, want[nest][t], 1e-6);
        }
        nn_sgd_free(&opt);
    }
    /* bad settings */
    NnSgd bad;
    CHECK(nn_sgd_init(&bad, 3, 0.0f, 0.0f, 1) != FH_OK);
    nn_sgd_free(&bad);
    CHECK(nn_sgd_init(&bad, 3, -0.5f, 0.0f, 0) != FH_OK);
    nn_sgd_free(&bad);
}

static void adam_reference(double *p, const float *const *grads, int steps, double lr, float b1f, float b2f,
                           float epsf, float wdf, int decoupled)
{
    double b1 = b1f, b2 = b2f, eps = epsf, wd = wdf, m[3] = {0, 0, 0}, v[3] = {0, 0, 0};
    for (int t = 1; t <= steps; t++) {
        double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
        for (int i = 0; i < 3; i++) {
            double g = grads[t - 1][i];
            if (decoupled) p[i] *= 1.0 - lr * wd; /* AdamW: decay the weights directly */
            else g += wd * p[i];                 /* Adam: L2 through the gradient */
            m[i] = b1 * m[i] + (1.0 - b1) * g;
            v[i] = b2 * v[i] + (1.0 - b2) * g * g;
            p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
        }
    }
}

static void test_adam_adamw(void)
{
    const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    const float *grads[3] = {opt_g[0], opt_g[1], opt_g[2]};
    const float wds[2] = {0.0f, 0.1f};
    float final[2][2][3]; /* [wd][decoupled] */
    for (int wi = 0; wi < 2; wi++)
        for (int dec = 0; dec < 2; dec++) {
            NnAdam opt;
            CHECK_OK(nn_adam_init(&opt, 3, b1, b2, eps, wds[wi], dec));
            float p[3] = {opt_p0[0], opt_p0[1], opt_p0[2]};
            for (int t = 1; t <= 3; t++) {
                nn_adam_step(&opt, p, opt_g[t - 1], lr);
                double ref[3] = {opt_p0[0], opt_p0[1], opt_p0[2]};
                adam_reference(ref, grads, t, lr, b1, b2, eps, wds[wi], dec);
                for (int i = 0; i < 3; i++)
                    CHECK_MSG(fabs(p[i] - ref[i]) <= 2e-6, "%s wd %g step %d [%d]: %.9g vs %.9g",
                              dec ? "AdamW" : "Adam", (double)wds[wi], t, i, (double)p[i], ref[i]);
                if (t == 1 && wi == 0) /* bias-corrected first step: lr * sign(g) */
                    for (int i = 0; i < 3; i++)
                        CHECK_NEAR(p[i], opt_p0[i] - lr * (opt_g[0][i] > 0 ? 1.0 : -1.0), 1e-6);
            }
            memcpy(final[wi][dec], p, sizeof p);
            /* reset starts over */
            nn_adam_reset(&opt);
            float q[3] = {opt_p0[0], opt_p0[1], opt_p0[2]};
            nn_adam_step(&opt, q, opt_g[0], lr);
            double ref1[3] = {opt_p0[0], opt_p0[1], opt_p0[2]};
            adam_reference(ref1, grads, 1, lr, b1, b2, eps, wds[wi], dec);
            for (int i = 0; i < 3; i++) CHECK_NEAR(q[i], ref1[i], 2e-6);
            nn_adam_free(&opt);
        }
    /* no weight decay: the two agree exactly; with it they differ */
    CHECK(memcmp(final[0][0], final[0][1], sizeof final[0][0]) == 0);
    CHECK(max_diff(final[1][0], final[1][1], 3) > 1e-5);
    NnAdam bad;
    CHECK(nn_adam_init(&bad, 3, 1.0f, 0.999f, 1e-8f, 0.0f, 0) != FH_OK);
    nn_adam_free(&bad);
}

static void test_clip_grad_norm(void)
{
    float g[3] = {3.0f, 4.0f, 0.0f};
    float n = nn_clip_grad_norm(g, 3, 1.0f);
    CHECK_NEAR(n, 5.0, 1e-6);
    CHECK_NEAR(sqrt((double)g[0] * g[0] + (double)g[1] * g[1] + (double)g[2] * g[2]), 1.0, 1e-5);
    CHECK_NEAR(g[0], 0.6, 1e-5);
    CHECK_NEAR(g[1], 0.8, 1e-5);
    CHECK(g[2] == 0.0f);
    /* below the limit: returned norm, no change */
    float h[2] = {0.3f, 0.4f};
    n = nn_clip_grad_norm(h, 2, 1.0f);
    CHECK_NEAR(n, 0.5, 1e-7);
    CHECK(h[0] == 0.3f && h[1] == 0.4f);
    /* a long vector against a double norm */
    enum { N = 10000 };
    static float v[N], v0[N];
    FhRng rng = rng_for("clip", 0);
    fill_normal(&rng, v, N, 2.0);
    memcpy(v0, v, sizeof v);
    double s = 0.0;
    for (int i = 0; i < N; i++) s += (double)v[i] * v[i];
    double norm = sqrt(s);
    n = nn_clip_grad_norm(v, N, 7.5f);
    CHECK_NEAR(n, norm, 1e-5 * norm);
    s = 0.0;
    for (int i = 0; i < N; i++) s += (double)v[i] * v[i];
    CHECK_NEAR(sqrt(s), 7.5, 7.5e-5);
    for (int i = 0; i < N; i++) CHECK_NEAR(v[i], v0[i] * (7.5 / norm), 1e-5);
}

/* ============================== bad input ============================== */

static void test_bad_conv_kernel_too_big(void)
{
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 3, 3}, 2));
    CHECK(nn_conv2d(&m, m.input, 4, 5, 1, 0, 1, 1, NN_ACT_NONE) < 0);
    CHECK(m.status == FH_ERR_USAGE);
    CHECK_MSG_HAS("conv1");
    CHECK_MSG_HAS("2x3x3");
    CHECK_MSG_HAS("5x5");
    /* sticky: later layers do nothing, finalize returns the first error, whose message stays */
    CHECK(nn_linear(&m, m.input, 3, 1, NN_ACT_NONE) < 0);
    CHECK(nn_model_finalize(&m, 0, 0, 3) == FH_ERR_USAGE);
    CHECK_MSG_HAS("conv1");
    CHECK(nn_model_forward(&m, NULL, 1) != FH_OK); /* never finalised */
    nn_model_free(&m);
    /* the same kernel with enough padding is fine */
    CHECK_OK(nn_model_init(&m, "ok", (NnShape){2, 3, 3}, 2));
    int t = nn_conv2d(&m, m.input, 4, 5, 1, 1, 1, 1, NN_ACT_NONE);
    CHECK(t >= 0 && m.status == FH_OK);
    if (t >= 0) CHECK(m.tensors[t].shape.h == 1 && m.tensors[t].shape.w == 1);
    nn_model_free(&m);
}

static void test_bad_conv_groups(void)
{
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){3, 4, 4}, 2));
    CHECK(nn_conv2d(&m, m.input, 4, 3, 1, 1, 2, 1, NN_ACT_NONE) < 0);
    CHECK(m.status == FH_ERR_USAGE);
    CHECK_MSG_HAS("conv1");
    CHECK_MSG_HAS("2 groups");
    nn_model_free(&m);
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){4, 4, 4}, 2));
    CHECK(nn_conv2d(&m, m.input, 8, 3, 1, 1, 1, 1, NN_ACT_NONE) >= 0);
    CHECK(nn_conv2d(&m, 1, 3, 3, 1, 1, 2, 1, NN_ACT_NONE) < 0); /* 3 outputs in 2 groups */
    CHECK_MSG_HAS("conv2");
    CHECK_MSG_HAS("3 output");
    nn_model_free(&m);
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){3, 4, 4}, 2));
    CHECK(nn_groupnorm(&m, m.input, 2, NN_ACT_NONE) < 0);
    CHECK_MSG_HAS("gn1");
    CHECK_MSG_HAS("3 channels");
    nn_model_free(&m);
}

static void test_bad_pool(void)
{
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 3, 3}, 2));
    CHECK(nn_maxpool(&m, m.input, 5, 1, 0) < 0);
    CHECK(m.status == FH_ERR_USAGE);
    CHECK_MSG_HAS("maxpool1");
    CHECK_MSG_HAS("2x3x3");
    nn_model_free(&m);
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 3, 3}, 2));
    CHECK(nn_avgpool(&m, m.input, 4, 2, 0) < 0);
    CHECK_MSG_HAS("avgpool1");
    CHECK_MSG_HAS("2x3x3");
    nn_model_free(&m);
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 8, 8}, 2));
    CHECK(nn_maxpool(&m, m.input, 3, 2, 2) < 0); /* pad above half the kernel */
    CHECK_MSG_HAS("maxpool1");
    CHECK_MSG_HAS("pad 2");
    nn_model_free(&m);
}

static void test_bad_add_shapes(void)
{
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 4, 4}, 2));
    int c = nn_conv2d(&m, m.input, 3, 1, 1, 0, 1, 1, NN_ACT_NONE);
    CHECK(c >= 0);
    CHECK(nn_add(&m, c, m.input, NN_ACT_NONE) < 0);
    CHECK(m.status == FH_ERR_USAGE);
    CHECK_MSG_HAS("add1");
    CHECK_MSG_HAS("3x4x4");
    CHECK_MSG_HAS("2x4x4");
    CHECK(nn_model_finalize(&m, c, c, 48) == FH_ERR_USAGE);
    nn_model_free(&m);
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 4, 4}, 2));
    CHECK(nn_add(&m, m.input, 7, NN_ACT_NONE) < 0); /* no such tensor */
    CHECK_MSG_HAS("add1");
    nn_model_free(&m);
}

static void test_bad_finalize_and_batch(void)
{
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){4, 1, 1}, 4));
    int l = nn_linear(&m, m.input, 1, 1, NN_ACT_NONE);
    CHECK(l >= 0);
    CHECK(nn_model_finalize(&m, l, l, 1) == FH_ERR_USAGE);
    CHECK_MSG_HAS("class count 1");
    nn_model_free(&m);

    CHECK_OK(nn_model_init(&m, "bad", (NnShape){4, 1, 1}, 4));
    l = nn_linear(&m, m.input, 3, 1, NN_ACT_NONE);
    CHECK(nn_model_finalize(&m, l, l, 4) == FH_ERR_USAGE); /* 3 outputs, 4 classes */
    CHECK_MSG_HAS("3 values");
    nn_model_free(&m);

    CHECK_OK(nn_model_init(&m, "small", (NnShape){4, 1, 1}, 4));
    l = nn_linear(&m, m.input, 3, 1, NN_ACT_NONE);
    CHECK_OK(nn_model_finalize(&m, l, l, 3));
    CHECK(nn_linear(&m, l, 3, 1, NN_ACT_NONE) < 0); /* no layers after finalize */
    CHECK_MSG_HAS("after nn_model_finalize");
    nn_model_init_params(&m, SEED);
    float x[5 * 4] = {0};
    fh_error_clear();
    CHECK(nn_model_forward(&m, x, 5) == FH_ERR_USAGE);
    CHECK_MSG_HAS("small");
    CHECK_MSG_HAS("batch of 5");
    CHECK_MSG_HAS("1..4");
    CHECK(nn_model_forward(&m, x, 0) == FH_ERR_USAGE);
    CHECK_OK(nn_model_forward(&m, x, 4));
    nn_model_free(&m);

    /* bad model-level arguments */
    CHECK(nn_model_init(&m, "bad", (NnShape){0, 4, 4}, 4) == FH_ERR_USAGE);
    CHECK_MSG_HAS("0x4x4");
    nn_model_free(&m);
    CHECK(nn_model_init(&m, "bad", (NnShape){1, 4, 4}, 0) == FH_ERR_USAGE);
    nn_model_free(&m);
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){1, 4, 4}, 2));
    CHECK(nn_dropout(&m, m.input, 1.0f) < 0);
    CHECK_MSG_HAS("dropout1");
    nn_model_free(&m);
}

/* ============================== main ============================== */

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    const char *v = getenv("FH_TEST_VERBOSE");
    verbose = v && *v && strcmp(v, "0") != 0;
    nn_set_threads(1);

    RUN(test_grad_linear);
    RUN(test_grad_conv_k3_s1_p1);
    RUN(test_grad_conv_k5_p2);
    RUN(test_grad_conv_k3_s2);
    RUN(test_grad_conv_1x1);
    RUN(test_grad_conv_groups);
    RUN(test_grad_conv_depthwise);
    RUN(test_grad_conv_multi_chunk);
    RUN(test_grad_fused_act);
    RUN(test_grad_act_standalone);
    RUN(test_grad_maxpool);
    RUN(test_grad_avgpool);
    RUN(test_grad_gap);
    RUN(test_grad_batchnorm);
    RUN(test_grad_groupnorm);
    RUN(test_grad_dropout);
    RUN(test_grad_residual_add);
    RUN(test_grad_flatten);
    RUN(test_grad_features);
    RUN(test_grad_composite);
    RUN(test_dropout_mask_counters);
    RUN(test_forward_values);
    RUN(test_conv_blas_matches_ref);
    RUN(test_conv_blas_multi_chunk);
    RUN(test_batchnorm_running_stats);
    RUN(test_batchnorm_large_offset);
    RUN(test_groupnorm_normalises);
    RUN(test_xent_grad_fd);
    RUN(test_xent_per_sample_and_weights);
    RUN(test_xent_logit_adjust);
    RUN(test_xent_large_logits);
    RUN(test_kl_distill);
    RUN(test_count_correct);
    RUN(test_sgd_pytorch);
    RUN(test_adam_adamw);
    RUN(test_clip_grad_norm);
    RUN(test_bad_conv_kernel_too_big);
    RUN(test_bad_conv_groups);
    RUN(test_bad_pool);
    RUN(test_bad_add_shapes);
    RUN(test_bad_finalize_and_batch);
    return test_summary();
}
