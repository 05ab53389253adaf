/* Shared by the programs that test a conv backend against the naive references nn_conv2d_*_ref
 * (test_layers_conv: OpenBLAS; test_onednn: oneDNN): the table of conv configurations and the comparison.
 * A backend comes as a ConvKernel; conv_check_specs runs it over every configuration of conv_specs, each set
 * up for its batch, run at that batch and then at one sample (a partial batch after a full one), with and
 * without bias, with no activation, ReLU and ReLU6. Include after layer_check.h.
 *
 * Pass: max |diff| <= CONV_RTOL * max |ref| for y, dx, dw and db. The backends and the references sum the
 * same products in float32 in other orders (the forward reference in double), so they differ by rounding,
 * about sqrt(terms) * 2^-24 of the largest magnitude: under 1e-5 for these sizes, 1e-4 leaves a margin. */
#ifndef FEDHET_TEST_CONV_CHECK_H
#define FEDHET_TEST_CONV_CHECK_H

#include "layer_check.h"

#define CONV_RTOL 1e-4 /* a conv backend vs the reference: max |diff| <= CONV_RTOL * max |ref| */

typedef struct {
    int batch, cin, h, w, cout, k, stride, pad, groups;
} ConvSpec;

/* strides 1-3, padding 0-3 (wider than the kernel's reach too), kernels 1-5, groups, depthwise, a channel
 * multiplier, odd and non-square sizes, and 3x3 convs wide enough for oneDNN's Winograd (onednn.c) */
static inline const ConvSpec *conv_specs(size_t *n)
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
        {2, 16, 8, 8, 16, 3, 1, 1, 1}, {2, 16, 9, 7, 32, 3, 1, 1, 1},
    };
    *n = sizeof specs / sizeof specs[0];
    return specs;
}

static inline NnConvShape conv_spec_shape(const ConvSpec *cs, int batch)
{
    return (NnConvShape){batch, cs->cin, cs->h, cs->w, cs->cout, cs->k, cs->stride, cs->pad, cs->groups,
                         nn_conv_out_size(cs->h, cs->k, cs->stride, cs->pad),
                         nn_conv_out_size(cs->w, cs->k, cs->stride, cs->pad), .kh = 0 /* square */};
}

/* A backend under test: the contract of nn_conv2d_forward_act / nn_conv2d_backward_act (s->batch: the call's) */
typedef struct ConvKernel {
    const char *name;
    void *state;
    /* ready for shape s, whose batch is the largest it will be given; bias: b and db are given */
    int (*setup)(struct ConvKernel *k, const NnConvShape *s, int bias);
    void (*forward)(struct ConvKernel *k, float *y, const float *x, const float *w, const float *b,
                    const NnConvShape *s, NnAct act);
    void (*backward)(struct ConvKernel *k, float *dx, float *dw, float *db, float *dy, const float *y,
                     const float *x, const float *w, const NnConvShape *s, NnAct act);
    void (*teardown)(struct ConvKernel *k);
} ConvKernel;

static int g_conv_saturated; /* outputs that ReLU6 clipped at 6, over all comparisons */

/* k (set up for cs) at `batch` samples against act(reference) forward and the reference backward of
 * dy * act'(y), with act'(y) read off the kernel's own output (the documented contract). */
static inline void conv_compare(ConvKernel *k, const ConvSpec *cs, int batch, int bias, NnAct act)
{
    NnConvShape s = conv_spec_shape(cs, batch);
    char label[200];
    snprintf(label, sizeof label, "%s conv b%d %dx%dx%d -> %d k%d s%d p%d g%d%s%s", k->name, s.batch, s.cin, s.h,
             s.w, s.cout, s.k, s.stride, s.pad, s.groups, bias ? " bias" : "",
             act == NN_ACT_RELU ? " relu" : act == NN_ACT_RELU6 ? " relu6" : "");
    int64_t nx = (int64_t)s.batch * s.cin * s.h * s.w, ny = (int64_t)s.batch * s.cout * s.ho * s.wo;
    int64_t nw = (int64_t)s.cout * (s.cin / s.groups) * s.k * s.k;
    FhRng rng = rng_for(label, 0);
    float *x = falloc(nx), *w = falloc(nw), *b = falloc(s.cout), *dy = falloc(ny);
    fill_normal(&rng, x, nx, act == NN_ACT_RELU6 ? 6.0 : 1.0);
    fill_normal(&rng, w, nw, 0.3);
    fill_normal(&rng, b, s.cout, 0.5);
    fill_normal(&rng, dy, ny, 1.0);

    float *y = falloc(ny), *y_ref = falloc(ny);
    for (int64_t i = 0; i < ny; i++) y[i] = NAN; /* forward must write every output */
    k->forward(k, y, x, w, bias ? b : NULL, &s, act);
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
    k->backward(k, dx, dw, bias ? db : NULL, dy_act, y, x, w, &s, act);
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
    k->backward(k, NULL, dw2, bias ? db2 : NULL, dy_act, y, x, w, &s, act);
    check_close(label, "backward dw without dx", dw2, dw_ref, nw, CONV_RTOL);
    check_close(label, "backward db without dx", db2, db_ref, s.cout, CONV_RTOL);

    float *bufs[] = {x, w, b, dy, y, y_ref, dy_act, dy_ref, dx0, dw0, db0, dx, dw, db, dx_ref, dw_ref, db_ref, dw2, db2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

/* k set up for cs (bias or not), then compared at each of the n_batches batch sizes in turn */
static inline void conv_compare_batches(ConvKernel *k, const ConvSpec *cs, int bias, const int *batches, const NnAct *acts,
                                        int n_batches)
{
    NnConvShape s = conv_spec_shape(cs, cs->batch);
    int st = k->setup(k, &s, bias);
    CHECK_MSG(st == FH_OK, "%s: setup for %dx%dx%dx%d -> %d k%d s%d p%d g%d failed: %s", k->name, s.batch, s.cin, s.h,
              s.w, s.cout, s.k, s.stride, s.pad, s.groups, fh_error_message());
    if (st != FH_OK) return;
    for (int i = 0; i < n_batches; i++) conv_compare(k, cs, batches[i], bias, acts[i]);
    k->teardown(k);
}

/* every configuration of conv_specs, with and without bias, each at its batch and then at one sample */
static inline void conv_check_specs(ConvKernel *k)
{
    size_t n;
    const ConvSpec *specs = conv_specs(&n);
    g_conv_saturated = 0;
    for (size_t i = 0; i < n; i++) {
        /* the activations alternate between bias and no bias from one configuration to the next */
        const int batches[2] = {specs[i].batch, 1};
        const NnAct plain_then_relu6[2] = {NN_ACT_NONE, NN_ACT_RELU6}, relu_then_plain[2] = {NN_ACT_RELU, NN_ACT_NONE};
        conv_compare_batches(k, &specs[i], 1, batches, i % 2 ? relu_then_plain : plain_then_relu6, 2);
        conv_compare_batches(k, &specs[i], 0, batches, i % 2 ? plain_then_relu6 : relu_then_plain, 2);
    }
    CHECK_MSG(g_conv_saturated > 0, "%s: no output reached the ReLU6 ceiling", k->name);
}

#endif
