/* Shared by the test_layers_* programs (the neural-network engine, src/nn): random data, float
 * comparisons, and the finite-difference gradient check of a layer or a small graph. Include after test.h.
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
 * Random data: Philox, purpose FH_RNG_TEST, one stream per test case (a test alone sees the same data).
 * FH_TEST_VERBOSE=1 in the environment prints every finite-difference comparison. */
#ifndef FEDHET_TEST_LAYER_CHECK_H
#define FEDHET_TEST_LAYER_CHECK_H

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

static int verbose;

/* every program's main calls this first: FH_TEST_VERBOSE, and one BLAS thread (the checks assume it) */
static inline void layer_tests_init(void)
{
    const char *v = getenv("FH_TEST_VERBOSE");
    verbose = v && *v && strcmp(v, "0") != 0;
    nn_set_threads(1);
}

/* ============================== helpers ============================== */

static inline uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* a stream of its own for every (label, k): running one test alone gives it the same data */
static inline FhRng rng_for(const char *label, uint32_t k)
{
    FhRng r;
    fh_rng_init(&r, SEED, FH_RNG_TEST, hash_str(label), k, 0);
    return r;
}

static inline float *falloc(int64_t n)
{
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!p) {
        printf("out of memory\n");
        abort();
    }
    return p;
}

static inline float *fdup(const float *src, int64_t n)
{
    float *p = falloc(n);
    memcpy(p, src, sizeof(float) * (size_t)n);
    return p;
}

static inline void fill_uniform(FhRng *r, float *x, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * fh_rng_uniform(r));
}

static inline void fill_normal(FhRng *r, float *x, int64_t n, double scale)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * fh_rng_normal(r));
}

/* max |a - b|, NaN-propagating */
static inline double max_diff(const float *a, const float *b, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || isnan(d)) m = d;
        if (isnan(m)) break;
    }
    return m;
}

static inline double max_abs(const float *a, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)a[i]) > m) m = fabs((double)a[i]);
    return m;
}

/* a matches ref: max |a - ref| <= rtol * max |ref| (+ a hair for an all-zero ref) */
static inline void check_close(const char *label, const char *what, const float *a, const float *ref, int64_t n,
                        double rtol)
{
    double err = max_diff(a, ref, n), scale = max_abs(ref, n), tol = rtol * scale + 1e-30;
    CHECK_MSG(err <= tol, "%s: %s: max |diff| %.3g > %.3g (max |ref| %.3g)", label, what, err, tol, scale);
}

static inline int msg_has(const char *needle) { return strstr(fh_error_message(), needle) != NULL; }
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
static NnBackend g_backend; /* the backend every case's model is built with (test_onednn: oneDNN) */
static inline NnAct act_of(NnAct a) { return g_strip_act ? NN_ACT_NONE : a; }

static inline int build_case(NnModel *m, const GradCase *c)
{
    int st = nn_model_init(m, c->label, c->in, c->batch);
    if (st != FH_OK) return st;
    m->backend = g_backend;
    g_features = -1;
    int out = c->build(m, m->input, c->arg);
    if (out < 0) return m->status != FH_OK ? m->status : FH_ERR_USAGE;
    NnShape s = m->tensors[out].shape;
    int logits = (s.h == 1 && s.w == 1) ? out : nn_flatten(m, out);
    if (logits < 0) return m->status;
    return nn_model_finalize(m, logits, g_features >= 0 ? g_features : logits, (int)m->tensors[logits].size);
}

/* norm weights/biases and running statistics away from their trivial initial values */
static inline void randomise_norm_state(NnModel *m, FhRng *rng)
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

static inline void make_input(FhRng *rng, float *x, int64_t n, XKind kind, double scale)
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
static inline int kink_side(double z, NnAct act) { return (z > 0.0) + (act == NN_ACT_RELU6 && z > 6.0); }

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

static inline double loss_at(GradCtx *g)
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
static inline void fd_direction(GradCtx *g, const char *what, float *p, const float *grad, int64_t n, FhRng *rng)
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

static inline void grad_check(const GradCase *c)
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
            NnConvShape s = {c->batch, si.c, si.h, si.w, l->cout, l->k, l->stride, l->pad, l->groups, so.h, so.w,
                             .kh = l->kh, .kw = l->kw, .stride_h = l->stride_h, .stride_w = l->stride_w,
                             .pad_t = l->pad_t, .pad_l = l->pad_l, .pad_b = l->pad_b, .pad_r = l->pad_r,
                             .dil_h = l->dil_h, .dil_w = l->dil_w};
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

static inline int build_layer(NnModel *m, int x, const void *varg)
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
    default: return -1; /* the channel ops: their own builders (test_layers_channels.c) */
    }
}

static inline void layer_case(const char *label, NnShape in, LayerArg a)
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

/* ---- a graph that more than one program checks ---- */

/* x -> conv -> h; a = h + x (x feeds two layers); b = conv1x1(a) + a (a feeds two layers) */
static inline int build_residual(NnModel *m, int x, const void *arg)
{
    const NnAct *act = arg;
    int c = m->tensors[x].shape.c;
    int h = nn_conv2d(m, x, c, 3, 1, 1, 1, 1, NN_ACT_NONE);
    int a = nn_add(m, h, x, NN_ACT_NONE);
    int h2 = nn_conv2d(m, a, c, 1, 1, 0, 1, 0, NN_ACT_NONE);
    return nn_add(m, h2, a, act_of(*act));
}

#endif
