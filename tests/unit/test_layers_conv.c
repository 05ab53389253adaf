/* The convolution layer (src/nn): finite-difference gradients (layer_check.h) of every conv path (im2col,
 * 1x1, grouped, depthwise, several im2col chunks), the BLAS kernels against the naive references
 * nn_conv2d_*_ref (conv_check.h: max |diff| <= 1e-4 * max |ref|; several im2col chunks included), and bad shapes.
 * Run: make build/tests/test_layers_conv && build/tests/test_layers_conv [test_name] */
#include "test.h"

#include "conv_check.h"

/* ============================== layer gradient tests ============================== */

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

/* the BLAS kernels as a ConvKernel: the workspace is NaN before every call, so that reading what a call did
 * not write shows; NN_ACT_NONE goes through the plain nn_conv2d_forward / nn_conv2d_backward entry points */
typedef struct {
    float *ws;
    int64_t n_ws;
} BlasConv;

static int blas_setup(ConvKernel *k, const NnConvShape *s, int bias)
{
    BlasConv *c = k->state;
    c->n_ws = nn_conv2d_workspace(s, nn_conv2d_chunk(s));
    c->ws = falloc(c->n_ws);
    return FH_OK;
}

static void blas_poison(BlasConv *c)
{
    for (int64_t i = 0; i < c->n_ws; i++) c->ws[i] = NAN;
}

static void blas_forward(ConvKernel *k, float *y, const float *x, const float *w, const float *b, const NnConvShape *s,
                         NnAct act)
{
    blas_poison(k->state);
    float *ws = ((BlasConv *)k->state)->ws;
    if (act == NN_ACT_NONE) nn_conv2d_forward(y, x, w, b, s, ws);
    else nn_conv2d_forward_act(y, x, w, b, s, act, ws);
}

static void blas_backward(ConvKernel *k, float *dx, float *dw, float *db, float *dy, const float *y, const float *x,
                          const float *w, const NnConvShape *s, NnAct act)
{
    blas_poison(k->state);
    float *ws = ((BlasConv *)k->state)->ws;
    if (act == NN_ACT_NONE) nn_conv2d_backward(dx, dw, db, dy, x, w, s, ws);
    else nn_conv2d_backward_act(dx, dw, db, dy, y, x, w, s, act, ws);
}

static void blas_teardown(ConvKernel *k) { free(((BlasConv *)k->state)->ws); }

static BlasConv g_blas_conv;
static ConvKernel g_blas = {"blas", &g_blas_conv, blas_setup, blas_forward, blas_backward, blas_teardown};

/* one comparison at the documented batch, which must run as expect_chunks im2col chunks or more */
static void conv_compare_chunks(const ConvSpec *cs, int bias, NnAct act, int expect_chunks)
{
    NnConvShape s = conv_spec_shape(cs, cs->batch);
    int chunk = nn_conv2d_chunk(&s), n_chunks = (s.batch + chunk - 1) / chunk;
    CHECK_MSG(chunk > 1 && n_chunks >= expect_chunks, "b%d %dx%dx%d -> %d k%d: chunk %d gives %d chunks, wanted %d",
              s.batch, s.cin, s.h, s.w, s.cout, s.k, chunk, n_chunks, expect_chunks);
    conv_compare_batches(&g_blas, cs, bias, &cs->batch, &act, 1);
}

static void test_conv_blas_matches_ref(void) { conv_check_specs(&g_blas); }

/* The smallest power-of-two cin for which one im2col chunk holds at most 12 samples, whatever the chunk
 * budget of kernels_blas.c; the batch becomes 2 chunks + `extra` samples. Returns the chunk. */
static int pick_multi_chunk(ConvSpec *cs, int extra)
{
    for (int cin = 1; cin <= 4096; cin *= 2) {
        NnConvShape s = {1 << 20, cin, cs->h, cs->w, cs->cout, cs->k, cs->stride, cs->pad, 1,
                         nn_conv_out_size(cs->h, cs->k, cs->stride, cs->pad),
                         nn_conv_out_size(cs->w, cs->k, cs->stride, cs->pad), .kh = 0 /* square */};
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
        conv_compare_chunks(&t[i], i % 2, NN_ACT_NONE, 3);
        conv_compare_chunks(&t[i], 1, NN_ACT_RELU, 3);
    }
}

/* ============================== direct depthwise kernels ============================== */

/* nn_isa_dwconv_*: the depthwise passes fedhet runs itself where oneDNN would use a gemm. As a ConvKernel
 * (no activation: the model applies it), at every instruction-set level this CPU has. */
static int dw_setup(ConvKernel *k, const NnConvShape *s, int bias)
{
    const NnConvShape g = nn_conv_shape_full(s);
    return nn_isa_dwconv_fits(&g) ? FH_OK : fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "does not fit");
}

static void dw_forward(ConvKernel *k, float *y, const float *x, const float *w, const float *b, const NnConvShape *s,
                       NnAct act)
{
    nn_isa_dwconv_forward(y, x, w, b, s);
}

static void dw_backward(ConvKernel *k, float *dx, float *dw, float *db, float *dy, const float *y, const float *x,
                        const float *w, const NnConvShape *s, NnAct act)
{
    if (dx) nn_isa_dwconv_backward_data(dx, dy, w, s);
    nn_isa_dwconv_backward_weights(dw, db, dy, x, s);
}

static void dw_teardown(ConvKernel *k) {}

/* ConvNeXt's 7 x 7 pad 3 on its maps down to 1 x 1 (where every tap but the centre reads padding), strides,
 * rows wider and narrower than a vector, the widest filter, a block of 16 channels and a partial one, and planes
 * too large for the channel-blocked kernels (20 x 37, and 30 x 40 at stride 2) */
static void test_conv_direct_depthwise(void)
{
    const ConvSpec specs[] = {
        {2, 5, 8, 8, 5, 7, 1, 3, 5},    {3, 4, 4, 4, 4, 7, 1, 3, 4},    {2, 6, 2, 2, 6, 7, 1, 3, 6},
        {2, 3, 1, 1, 3, 7, 1, 3, 3},    {2, 4, 9, 11, 4, 3, 2, 1, 4},   {2, 3, 20, 37, 3, 7, 1, 3, 3},
        {2, 3, 17, 23, 3, 5, 2, 2, 3},  {2, 2, 6, 5, 2, 3, 3, 0, 2},    {1, 2, 18, 18, 2, 11, 1, 5, 2},
        {2, 3, 13, 40, 3, 1, 1, 0, 3},    {2, 3, 9, 36, 3, 7, 2, 3, 3},
        {2, 20, 6, 6, 20, 3, 1, 1, 20}, {1, 2, 30, 40, 2, 7, 2, 3, 2},
    };
    ConvKernel k = {"direct depthwise", NULL, dw_setup, dw_forward, dw_backward, dw_teardown};
    const size_t n = sizeof specs / sizeof specs[0];
    const int best = nn_isa_set(NN_ISA_AVX512);
    float *first[sizeof specs / sizeof specs[0]] = {0};
    for (int level = NN_ISA_BASE; level <= best; level++) {
        CHECK(nn_isa_set(level) == level);
        char name[64];
        snprintf(name, sizeof name, "direct depthwise %s", nn_isa_name(level));
        k.name = name;
        for (size_t i = 0; i < n; i++) {
            const int batches[2] = {specs[i].batch, 1};
            const NnAct none[2] = {NN_ACT_NONE, NN_ACT_NONE};
            conv_compare_batches(&k, &specs[i], (int)(i % 2), batches, none, 2);
            /* and the same bits at every level: y, dx, dw and db of one fixed input */
            const NnConvShape square = conv_spec_shape(&specs[i], specs[i].batch), s = nn_conv_shape_full(&square);
            const int64_t nx = (int64_t)s.batch * s.cin * s.h * s.w, ny = (int64_t)s.batch * s.cout * s.ho * s.wo,
                          nw = (int64_t)s.cout * s.kh * s.kw, total = ny + nx + nw + s.cout;
            float *x = falloc(nx), *w = falloc(nw), *b = falloc(s.cout), *out = calloc((size_t)total, sizeof(float));
            FhRng rng = rng_for("dw_bits", i);
            fill_normal(&rng, x, nx, 1.0);
            fill_normal(&rng, w, nw, 1.0);
            fill_normal(&rng, b, s.cout, 1.0);
            nn_isa_dwconv_forward(out, x, w, b, &s);
            nn_isa_dwconv_backward_data(out + ny, out, w, &s);
            nn_isa_dwconv_backward_weights(out + ny + nx, out + ny + nx + nw, out, x, &s);
            if (!first[i]) first[i] = out;
            else {
                CHECK_MSG(memcmp(out, first[i], sizeof(float) * (size_t)total) == 0,
                          "spec %zu: %s differs from %s", i, nn_isa_name(level), nn_isa_name(NN_ISA_BASE));
                free(out);
            }
            FREE_ALL(x, w, b);
        }
    }
    nn_isa_set(best);
    for (size_t i = 0; i < n; i++) free(first[i]);
    /* too wide a filter is refused, not run */
    NnConvShape wide = conv_spec_shape(&(ConvSpec){1, 2, 20, 20, 2, NN_DW_MAX_K + 1, 1, 0, 2}, 1);
    wide = nn_conv_shape_full(&wide);
    CHECK(!nn_isa_dwconv_fits(&wide));
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
    RUN(test_conv_direct_depthwise);
    RUN(test_bad_conv_kernel_too_big);
    RUN(test_bad_conv_groups);
    return test_summary();
}
