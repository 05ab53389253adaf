/* The convolution layer (src/nn): finite-difference gradients (layer_check.h) of every conv path (im2col,
 * 1x1, grouped, depthwise, several im2col chunks), the BLAS kernels against the naive references
 * nn_conv2d_*_ref (max |diff| <= 1e-4 * max |ref|; several im2col chunks included), and bad shapes.
 * Run: make build/tests/test_layers_conv && build/tests/test_layers_conv [test_name] */
#include "test.h"

#include "layer_check.h"

#define CONV_RTOL 1e-4    /* BLAS conv vs reference: max |diff| <= CONV_RTOL * max |ref| */

/* ============================== layer gradient tests ============================== */

typedef struct {
    int batch, cin, h, w, cout, k, stride, pad, groups;
} ConvSpec;
static int pick_multi_chunk(ConvSpec *cs, int extra);

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

/* ============================== main ============================== */

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    layer_tests_init();

    RUN(test_grad_conv_k3_s1_p1);
    RUN(test_grad_conv_k5_p2);
    RUN(test_grad_conv_k3_s2);
    RUN(test_grad_conv_1x1);
    RUN(test_grad_conv_groups);
    RUN(test_grad_conv_depthwise);
    RUN(test_grad_conv_multi_chunk);
    RUN(test_conv_blas_matches_ref);
    RUN(test_conv_blas_multi_chunk);
    RUN(test_bad_conv_kernel_too_big);
    RUN(test_bad_conv_groups);
    return test_summary();
}
