/* The oneDNN backend of the conv layers (src/nn/onednn.c, train.backend = onednn):
 *  - the kernels against the naive references nn_conv2d_*_ref on every configuration of conv_check.h
 *    (strides, padding, groups, depthwise, 1x1, ReLU / ReLU6, bias or not), each set up for its batch and
 *    run at it and then at one sample (a partial batch after a full one); y, dx, dw and db within CONV_RTOL
 *    (conv_check.h: float32 sums in another order than the reference's);
 *  - the per-layer cache of batch sizes: more sizes than it holds, each right when it comes back;
 *  - finite-difference gradients (layer_check.h) of small convs and of a residual graph built on oneDNN;
 *  - the channel-blocked layouts between layers (model.c, plan_layouts): which tensors get them, and
 *    finite-difference gradients through blocked batch norm (training and frozen), add and pooling;
 *  - batch norm and max pooling on oneDNN (training): against fedhet's kernels (full and partial batches, fused
 *    ReLU, ReLU6 as separate passes, gradients added and written), which layers of a model get them, and the
 *    running statistics (updated, frozen, evaluation);
 *  - every zoo model: the losses of 10 SGD steps (full and partial batches) agree with the blas backend's
 *    (ZOO_SPREAD, ZOO_LOSS_RTOL below), and the state layout is the same under both;
 *  - bits: two runs of a model with the same backend and thread count (1 and 2) are identical;
 *  - a warm training step, at the full and at a partial batch, allocates no buffer (malloc and friends are
 *    counted here; not in a sanitizer build, whose allocator they would replace);
 *  - a CPU without AVX-512: the reference comparison, the blocked layouts (nChw8c there) and batch norm and max
 *    pooling against fedhet's again in a child
 *    process that oneDNN limits to AVX2 (DNNL_MAX_CPU_ISA), as it would run there;
 *  - inspect's implementation names, and a bad backend name.
 * Run: make build/tests/test_onednn && build/tests/test_onednn [test_name] */
#include "test.h"

#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>

#include "conv_check.h"
#include "zoo_train.h"

/* The losses of the two backends over 10 SGD steps (lr 0.01, momentum 0.9) agree when
 *   step 0 (the initial model's forward): |L_onednn - L_blas| <= ZOO_LOSS_RTOL * |L_blas|, and at later steps
 *   |L_onednn - L_blas| <= ZOO_SPREAD * spread + ZOO_LOSS_RTOL * |L_blas(0)| + ZOO_MOVE_RTOL * move,
 * spread being the largest |L_nudged - L_blas| so far, L_nudged from blas on the data moved one float step up or
 * down (zoo_train_fixed's nudge), and move the largest |L_blas(s) - L_blas(0)| so far: how far training has
 * taken the loss. The backends compute the same function with float32 sums in other orders, and Winograd's
 * transforms (onednn.c) round more than a sum: their difference is rounding, which training carries along as
 * it carries a change of the data. For cnn, lenet, smallcnn, resnet8 and resnet18_gn that stays within about
 * 1e-5 of the loss; mobilenetv2 and resnet18 (deep BatchNorm stacks, whose gradients explode at
 * initialisation) turn it into up to 1 % of the loss's first move within a step, several times what a one-ulp
 * change of the data gives. A wrong forward shows at step 0; a wrong gradient moves the loss elsewhere by an
 * amount of the order of its own move: the conv weight gradients dropped on the partial batches used 1.7 to
 * 276 times the allowance, on every model but mobilenetv2, whose own spread hides it (the reference and
 * gradient checks above cover its convs). Over init seeds 1..7, with AVX-512 and limited to AVX2, the
 * backends' difference used at most 0.38 of the allowance (mobilenetv2; resnet18 0.10), but in one case
 * that shows what rounding can do to mobilenetv2: at seed 5 limited to AVX2 its step-0 gradients agree to
 * 5e-5 from the loss down to bn30 and differ by 1 % below it (a one-ulp change of the data moves them by
 * 4e-5), and step 1 uses 1.11 of the allowance. Its batch norms see 16 to 64 values per channel at batch 4,
 * and a near-constant channel or a ReLU6 output within rounding of its kink turns rounding into such a
 * jump: no tolerance on the loss tells that from a defect, which the reference and finite-difference checks
 * above are for. */
#define ZOO_LOSS_RTOL 1e-5
#define ZOO_MOVE_RTOL 0.02
#define ZOO_SPREAD 10.0

/* ============================== the kernels against the references ============================== */

typedef struct {
    NnOnednn *ctx;
    NnOnednnConv *conv;
    char impls[512]; /* the implementation names met, for the AVX2 child's parent */
} OnednnConv;

static void note_impl(OnednnConv *c, const char *name)
{
    if (!*name || strstr(c->impls, name)) return;
    size_t used = strlen(c->impls);
    snprintf(c->impls + used, sizeof c->impls - used, "%s%s", used ? " " : "", name);
}

static int onednn_setup(ConvKernel *k, const NnConvShape *s, int bias)
{
    OnednnConv *c = k->state;
    int st = nn_onednn_create(&c->ctx);
    if (st == FH_OK) st = nn_onednn_conv_create(&c->conv, c->ctx, s, bias, 0, 0, "test conv");
    for (int i = 0; st == FH_OK && i < 3; i++) note_impl(c, nn_onednn_conv_impl(c->conv, i));
    return st;
}

static void onednn_forward(ConvKernel *k, float *y, const float *x, const float *w, const float *b,
                           const NnConvShape *s, NnAct act)
{
    CHECK_OK(nn_onednn_conv_forward(((OnednnConv *)k->state)->conv, y, x, w, b, s->batch, act));
}

static void onednn_backward(ConvKernel *k, float *dx, float *dw, float *db, float *dy, const float *y, const float *x,
                            const float *w, const NnConvShape *s, NnAct act)
{
    nn_onednn_conv_backward(((OnednnConv *)k->state)->conv, dx, dw, db, dy, y, x, w, s->batch, act, 0, 0);
}

static void onednn_teardown(ConvKernel *k)
{
    OnednnConv *c = k->state;
    nn_onednn_conv_free(&c->conv);
    nn_onednn_free(&c->ctx);
}

static OnednnConv g_onednn_conv;
static ConvKernel g_onednn = {"onednn", &g_onednn_conv, onednn_setup, onednn_forward, onednn_backward,
                              onednn_teardown};

static void test_conv_onednn_matches_ref(void)
{
    g_onednn_conv.impls[0] = '\0';
    conv_check_specs(&g_onednn);
    printf("[impls: %s] ", g_onednn_conv.impls);
}

/* Sizes 9, 1..8, 9, 5, 1 on a conv built for 9: more sizes than the cache holds (8), so entries are replaced,
 * and sizes come back after that; every call still matches the reference. */
static void test_conv_onednn_batch_cache(void)
{
    const ConvSpec cs = {9, 4, 7, 7, 6, 3, 1, 1, 2};
    int batches[12] = {9};
    NnAct acts[12];
    for (int i = 1; i <= 8; i++) batches[i] = i;
    batches[9] = 9;
    batches[10] = 5;
    batches[11] = 1;
    for (int i = 0; i < 12; i++) acts[i] = i % 3 == 0 ? NN_ACT_NONE : i % 3 == 1 ? NN_ACT_RELU : NN_ACT_RELU6;
    conv_compare_batches(&g_onednn, &cs, 1, batches, acts, 12);
}

/* The reference comparison and the blocked-layout checks again in a child limited to AVX2
 * (DNNL_MAX_CPU_ISA): the code a CPU without AVX-512 runs. The child prints the implementations it got, none
 * of which may be an AVX-512 one, and the channel block its layouts used, 8 there. */
static void run_as_avx2(const char *test, char *out, size_t size)
{
    char self[4096], cmd[4400];
    out[0] = '\0';
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK_MSG(n > 0, "cannot find this program's path");
    if (n <= 0) return;
    self[n] = '\0';
    snprintf(cmd, sizeof cmd, "DNNL_MAX_CPU_ISA=AVX2 '%s' %s 2>&1", self, test);
    FILE *child = popen(cmd, "r");
    CHECK_MSG(child != NULL, "cannot run %s", cmd);
    if (!child) return;
    size_t used = fread(out, 1, size - 1, child);
    out[used] = '\0';
    int rc = pclose(child);
    CHECK_MSG(rc == 0 && strstr(out, "1 passed, 0 failed"), "the AVX2 run of %s failed (exit %d):\n%s", test, rc, out);
}

static void test_conv_onednn_without_avx512(void)
{
    char out[16384];
    run_as_avx2("test_conv_onednn_matches_ref", out, sizeof out);
    const char *impls = strstr(out, "[impls:");
    CHECK_MSG(impls && !strstr(impls, "avx512") && !strstr(impls, "wino"), "the AVX2 run used AVX-512 code: %s", out);
    if (impls) printf("%.*s ", (int)(strchr(impls, ']') ? strchr(impls, ']') - impls + 1 : 0), impls);
    run_as_avx2("test_blocked_layouts", out, sizeof out);
    CHECK_MSG(strstr(out, "[block 8]"), "the AVX2 run's layouts were not nChw8c: %s", out);
    run_as_avx2("test_norm_pool_onednn_match_fedhet", out, sizeof out);
    CHECK_MSG(strstr(out, "[bn: ") && !strstr(out, "avx512"), "the AVX2 run's batch norm and pool: %s", out);
}

/* Winograd (onednn.c, winograd_pays) for the 3x3 stride-1 convs with 16+ channels in and out and outputs of 4x4
 * and up, where the CPU has it (AVX-512); the direct algorithm for the others: a first layer's 3 channels,
 * 2x2 outputs, stride 2, groups. In the AVX2 child of test_conv_onednn_without_avx512 no conv is Winograd. */
static void test_conv_onednn_winograd_where_it_pays(void)
{
    const int avx512 = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
    static const struct { ConvSpec cs; int pays; } cases[] = {
        {{4, 16, 8, 8, 16, 3, 1, 1, 1}, 1}, {{4, 64, 4, 4, 32, 3, 1, 1, 1}, 1}, {{4, 3, 8, 8, 16, 3, 1, 1, 1}, 0},
        {{4, 16, 2, 2, 16, 3, 1, 1, 1}, 0}, {{4, 16, 8, 8, 16, 3, 2, 1, 1}, 0}, {{4, 16, 8, 8, 16, 3, 1, 1, 2}, 0},
        {{4, 16, 8, 8, 16, 5, 1, 2, 1}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const NnConvShape s = conv_spec_shape(&cases[i].cs, cases[i].cs.batch);
        NnOnednn *ctx = NULL;
        NnOnednnConv *conv = NULL;
        CHECK_OK(nn_onednn_create(&ctx));
        CHECK_OK(nn_onednn_conv_create(&conv, ctx, &s, 0, 0, 0, "test conv"));
        for (int pass = 0; conv && pass < 3; pass++) {
            const int wino = strstr(nn_onednn_conv_impl(conv, pass), "wino") != NULL;
            CHECK_MSG(wino == (avx512 && cases[i].pays), "%dx%dx%d -> %d k%d s%d g%d, pass %d: %s", s.cin, s.h, s.w,
                      s.cout, s.k, s.stride, s.groups, pass, nn_onednn_conv_impl(conv, pass));
        }
        nn_onednn_conv_free(&conv);
        nn_onednn_free(&ctx);
    }
    printf("[%s] ", avx512 ? "AVX-512: Winograd where it pays" : "no AVX-512: direct only");
}

/* ============================== gradients by finite differences ============================== */

static void test_grad_conv_onednn(void)
{
    g_backend = NN_BACKEND_ONEDNN;
    LayerArg a = {.op = NN_OP_CONV2D, .cout = 4, .k = 3, .stride = 1, .pad = 1, .groups = 1, .bias = 1};
    layer_case("onednn_conv_k3s1p1_bias", (NnShape){3, 6, 6}, a);
    a.act = NN_ACT_RELU;
    layer_case("onednn_conv_k3s1p1_relu", (NnShape){3, 6, 5}, a);
    a = (LayerArg){.op = NN_OP_CONV2D, .cout = 3, .k = 5, .stride = 2, .pad = 2, .groups = 1, .bias = 0,
                   .act = NN_ACT_RELU6, .x_scale = 6.0};
    layer_case("onednn_conv_k5s2p2_relu6", (NnShape){2, 9, 9}, a);
    a = (LayerArg){.op = NN_OP_CONV2D, .cout = 3, .k = 1, .stride = 2, .pad = 0, .groups = 1, .bias = 1};
    layer_case("onednn_conv_1x1s2", (NnShape){5, 5, 5}, a);
    a = (LayerArg){.op = NN_OP_CONV2D, .cout = 6, .k = 3, .stride = 1, .pad = 1, .groups = 2, .bias = 1};
    layer_case("onednn_conv_groups2", (NnShape){4, 5, 5}, a);
    a = (LayerArg){.op = NN_OP_CONV2D, .cout = 4, .k = 3, .stride = 2, .pad = 1, .groups = 4, .bias = 0};
    layer_case("onednn_conv_depthwise_s2", (NnShape){4, 7, 7}, a);
    /* x feeds a conv and an add, and a feeds a 1x1 conv and an add: dx accumulates from two readers */
    const NnAct act = NN_ACT_RELU;
    GradCase c = {.label = "onednn_residual", .in = {3, 5, 5}, .batch = 2, .build = build_residual, .arg = &act,
                  .training = 1, .guard = NN_ACT_RELU};
    grad_check(&c);
    g_backend = NN_BACKEND_BLAS;
}

/* ============================== blocked layouts between layers ============================== */

/* 16 channels after the first conv: oneDNN's channel-blocked layout (model.c, plan_layouts) runs through
 * batch norm, the second conv, the residual add and into the global average pool; the input and the pooled
 * output are NCHW. No ReLU inside, where a finite-difference step could cross a kink unseen (the fused masks
 * of the blocked kernels are compared with NCHW's in test_layers_pool_norm). */
static int build_blocked(NnModel *m, int x, const void *arg)
{
    (void)arg;
    int h = nn_conv2d(m, x, 16, 3, 1, 1, 1, 0, NN_ACT_NONE);
    int b = nn_batchnorm(m, h, NN_ACT_NONE);
    int h2 = nn_conv2d(m, b, 16, 3, 1, 1, 1, 1, NN_ACT_NONE);
    int a = nn_add(m, h2, h, NN_ACT_NONE);
    return nn_gap(m, a);
}

/* arg: 0 for an average pool, which reads NCHW (the conv and batch norm before it stay NCHW, the conv after it
 * is blocked again); 1 for a max pool, which keeps the blocks (a 3x3 window, stride 2, padded: ResNet's stem) */
static int build_pooled(NnModel *m, int x, const void *arg)
{
    const int max_pool = *(const int *)arg;
    int h = nn_conv2d(m, x, 16, 3, 1, 1, 1, 0, NN_ACT_NONE);
    int b = nn_batchnorm(m, h, max_pool ? NN_ACT_NONE : NN_ACT_RELU);
    int p = max_pool ? nn_maxpool(m, b, 3, 2, 1) : nn_avgpool(m, b, 2, 2, 0);
    int h2 = nn_conv2d(m, p, 32, 3, 1, 1, 1, 1, max_pool ? NN_ACT_NONE : NN_ACT_RELU);
    return nn_gap(m, h2);
}

/* the layout of each layer's output, in layer order */
static void check_blocks(const GradCase *c, const int *expect, int n)
{
    NnModel m;
    int st = build_case(&m, c);
    CHECK_OK(st);
    if (st != FH_OK) return;
    CHECK(m.tensors[m.input].block == 0 && m.n_layers == n);
    for (int i = 0; i < m.n_layers && i < n; i++)
        CHECK_MSG(m.tensors[m.layers[i].out].block == expect[i], "%s: %s writes block %d, expected %d", c->label,
                  m.layers[i].name, m.tensors[m.layers[i].out].block, expect[i]);
    nn_model_free(&m);
}

static void test_blocked_layouts(void)
{
    const int B = nn_onednn_block();
    GradCase c = {.label = "onednn_blocked", .in = {3, 5, 4}, .batch = 2, .build = build_blocked, .training = 1};
    static const int avg = 0, max = 1;
    GradCase pooled = {.label = "onednn_pooled", .in = {3, 6, 6}, .batch = 2, .build = build_pooled, .arg = &avg,
                       .training = 1};
    g_backend = NN_BACKEND_ONEDNN;
    check_blocks(&c, (const int[]){B, B, B, B, 0}, 5);
    GradCase max_pooled = {.label = "onednn_max_pooled", .in = {3, 7, 6}, .batch = 2, .build = build_pooled,
                           .arg = &max, .training = 1};
    check_blocks(&pooled, (const int[]){0, 0, 0, B, 0}, 5);
    check_blocks(&max_pooled, (const int[]){B, B, B, B, 0}, 5);
    grad_check(&c);
    grad_check(&max_pooled);
    c.label = "onednn_blocked_eval";
    c.training = 0;
    grad_check(&c);
    g_backend = NN_BACKEND_BLAS;
    check_blocks(&c, (const int[]){0, 0, 0, 0, 0}, 5);
    printf("[block %d] ", B);
}

/* A depthwise 5x5 conv on blocked 1x1 planes (MobileNetV3's last stage at 32 px): oneDNN's depthwise kernels refuse
 * it and its gemm is ~100x slower, so fedhet's direct kernels take it, reading the blocked tensors as NCHW (the same
 * memory when the channels fill whole blocks). Checked: the layer runs direct on blocked tensors, its logits match
 * the blas backend's, and its gradients match finite differences. */
static int build_dw_unit_planes(NnModel *m, int x, const void *arg)
{
    (void)arg;
    int h = nn_conv2d(m, x, 32, 1, 1, 0, 1, 0, NN_ACT_NONE);
    int b = nn_batchnorm(m, h, NN_ACT_NONE);
    /* straight into the pool: a batch norm after it would cancel its bias and bn1's, leaving nothing to check */
    return nn_gap(m, nn_conv2d(m, b, 32, 5, 1, 2, 32, 1, NN_ACT_NONE));
}

static void test_depthwise_on_unit_planes(void)
{
    GradCase c = {.label = "onednn_dw_unit_planes", .in = {3, 1, 1}, .batch = 4, .build = build_dw_unit_planes,
                  .training = 1};
    NnModel o, b;
    g_backend = NN_BACKEND_ONEDNN;
    int st = build_case(&o, &c);
    g_backend = NN_BACKEND_BLAS;
    CHECK_OK(st);
    CHECK_OK(build_case(&b, &c));
    if (st == FH_OK && o.n_layers == b.n_layers) {
        const NnLayer *dw = &o.layers[2];
        CHECK_MSG(o.tensors[dw->in].block == nn_onednn_block() && o.tensors[dw->out].block == nn_onednn_block(),
                  "the depthwise conv's tensors are not blocked (%d, %d)", o.tensors[dw->in].block,
                  o.tensors[dw->out].block);
        CHECK_MSG(dw->dw_direct >= NN_DW_BACKWARD, "the depthwise conv on 1x1 planes runs on oneDNN (dw_direct %d)",
                  dw->dw_direct);
        nn_model_init_params(&o, SEED);
        nn_model_init_params(&b, SEED);
        nn_model_set_training(&o, 1);
        nn_model_set_training(&b, 1);
        FhRng rng = rng_for(c.label, 1);
        float *x = falloc(4 * 3);
        fill_normal(&rng, x, 4 * 3, 1.0);
        CHECK_OK(nn_model_forward(&o, x, 4));
        CHECK_OK(nn_model_forward(&b, x, 4));
        double worst = 0.0;
        for (int i = 0; i < 4 * o.classes; i++)
            worst = fmax(worst, fabs((double)nn_model_logits(&o)[i] - nn_model_logits(&b)[i]));
        CHECK_MSG(worst < 1e-4, "logits differ from blas's by %.3g", worst);
        free(x);
    }
    nn_model_free(&o);
    nn_model_free(&b);
    g_backend = NN_BACKEND_ONEDNN;
    grad_check(&c);
    g_backend = NN_BACKEND_BLAS;
}

/* The first backward after nn_model_zero_grad writes the convs' weight gradients instead of adding to them
 * (model.c, grad_zero): the same values as adding onto zeros; a second backward without a zero fill adds
 * again (2g), and a zero fill by hand (not through nn_model_zero_grad) keeps the adding path. */
static void test_weight_grad_written_once(void)
{
    g_backend = NN_BACKEND_ONEDNN;
    const GradCase c = {.label = "onednn_grad_once", .in = {3, 5, 4}, .batch = 2, .build = build_blocked,
                        .training = 1};
    NnModel m;
    int st = build_case(&m, &c);
    CHECK_OK(st);
    g_backend = NN_BACKEND_BLAS;
    if (st != FH_OK) return;
    nn_model_init_params(&m, SEED);
    nn_model_set_training(&m, 1);
    FhRng rng = rng_for(c.label, 0);
    const int64_t nx = (int64_t)c.batch * 3 * 5 * 4, nz = (int64_t)c.batch * m.classes, n = m.n_params;
    float *x = falloc(nx), *dz = falloc(nz), *written = falloc(n), *added = falloc(n);
    fill_normal(&rng, x, nx, 1.0);
    fill_uniform(&rng, dz, nz, -1.0, 1.0);
    nn_model_zero_grad(&m);
    CHECK(m.grad_zero == 1);
    CHECK_OK(nn_model_forward(&m, x, c.batch));
    nn_model_backward(&m, dz, NULL);
    CHECK(m.grad_zero == 0);
    memcpy(written, m.grad, sizeof(float) * (size_t)n);
    CHECK_OK(nn_model_forward(&m, x, c.batch));
    nn_model_backward(&m, dz, NULL);
    int twice = 1, same = 1, nonzero = 0;
    for (int64_t i = 0; i < n; i++) {
        twice &= m.grad[i] == 2.0f * written[i];
        nonzero += written[i] != 0.0f;
    }
    CHECK_MSG(twice, "a second backward without a zero fill did not add to the first");
    memset(m.grad, 0, sizeof(float) * (size_t)m.n_state);
    CHECK_OK(nn_model_forward(&m, x, c.batch));
    nn_model_backward(&m, dz, NULL);
    memcpy(added, m.grad, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) same &= added[i] == written[i];
    CHECK_MSG(same, "written and added weight gradients differ");
    CHECK_MSG(nonzero > n / 2, "only %lld of %lld gradients are nonzero", (long long)nonzero, (long long)n);
    free(x);
    free(dz);
    free(written);
    free(added);
    nn_model_free(&m);
}

/* ============================== batch norm and max pooling on oneDNN ============================== */

#define BN_RTOL 1e-4 /* oneDNN's batch norm vs fedhet's: the same formulas with float sums in another order */

/* The primitives against fedhet's kernels on the blocked layout: batch norm (training) with a fused ReLU, without
 * an activation, and with a ReLU6 as the caller's passes (model.c); the max pool of ResNet's stem. Each at its
 * creation's batch, then at a partial batch (another entry), then at the first again. Gradients are added onto
 * what the buffers hold, and written over NaN when the zero flags say nothing has reached them: the same values. */
static void check_bn_onednn(NnOnednn *ctx, int batch, int c, int h, int w, NnAct act)
{
    const int B = nn_onednn_block(), hw = h * w;
    char label[64];
    snprintf(label, sizeof label, "bn %dx%dx%dx%d act %d", batch, c, h, w, (int)act);
    NnOnednnLayer *bn = NULL;
    CHECK_OK(nn_onednn_bn_create(&bn, ctx, 4, c, h, w, B, 1e-5f, act, label));
    if (!bn) return;
    FhRng rng = rng_for(label, 0);
    const int64_t n = (int64_t)batch * c * hw;
    float *x = falloc(n), *gamma = falloc(c), *beta = falloc(c), *dy = falloc(n), *base = falloc(n);
    float *y_ref = falloc(n), *dy_ref = falloc(n), *dx_ref = falloc(n), *stats_ref = falloc(4 * c);
    float *y = falloc(n), *dy_in = falloc(n), *dx = falloc(n), *stats = falloc(4 * c), *dx_w = falloc(n),
          *dg_w = falloc(2 * c);
    fill_normal(&rng, x, n, 2.0);
    for (int64_t i = 0; i < n; i++) x[i] += 0.5f;
    fill_uniform(&rng, gamma, c, 0.5, 1.5);
    fill_uniform(&rng, beta, c, -0.5, 0.5);
    fill_normal(&rng, dy, n, 1.0);
    fill_normal(&rng, base, n, 1.0);
    /* fedhet: mean, 1/std, dgamma, dbeta in stats_ref */
    nn_batchnorm_forward_train_act(y_ref, stats_ref, stats_ref + c, NULL, NULL, x, gamma, beta, batch, c, hw, 1e-5f,
                                   0.1f, act, B);
    memcpy(dy_ref, dy, sizeof(float) * (size_t)n);
    memcpy(dx_ref, base, sizeof(float) * (size_t)n);
    for (int i = 0; i < 2 * c; i++) stats_ref[2 * c + i] = 0.25f;
    nn_batchnorm_backward_train_act(dx_ref, stats_ref + 2 * c, stats_ref + 3 * c, dy_ref, y_ref, x, gamma, stats_ref,
                                    stats_ref + c, batch, c, hw, act, B, 0);
    /* oneDNN: mean, variance, dgamma, dbeta in stats */
    CHECK_OK(nn_onednn_bn_forward(bn, y, stats, stats + c, x, gamma, beta, batch));
    if (act != NN_ACT_RELU) nn_act_forward(y, n, act);
    check_close(label, "y", y, y_ref, n, BN_RTOL);
    check_close(label, "mean", stats, stats_ref, c, BN_RTOL);
    float *invstd = falloc(c);
    for (int i = 0; i < c; i++) invstd[i] = 1.0f / sqrtf(stats[c + i] + 1e-5f);
    check_close(label, "1/std", invstd, stats_ref + c, c, BN_RTOL);
    /* added onto base (and 0.25), onto zeros, and written over NaN */
    float *onto[3] = {dx, falloc(n), dx_w}, *dgrad[3] = {stats + 2 * c, falloc(2 * c), dg_w};
    for (int pass = 0; pass < 3; pass++) {
        for (int64_t i = 0; i < n; i++) onto[pass][i] = pass == 0 ? base[i] : pass == 1 ? 0.0f : NAN;
        for (int i = 0; i < 2 * c; i++) dgrad[pass][i] = pass == 0 ? 0.25f : pass == 1 ? 0.0f : NAN;
        memcpy(dy_in, dy, sizeof(float) * (size_t)n);
        if (act != NN_ACT_RELU) nn_act_backward(dy_in, y, n, act);
        nn_onednn_bn_backward(bn, onto[pass], dgrad[pass], dgrad[pass] + c, dy_in, x, gamma, beta, stats, stats + c,
                              batch, pass == 2, pass == 2);
    }
    check_close(label, "dx", dx, dx_ref, n, BN_RTOL);
    check_close(label, "dgamma, dbeta", stats + 2 * c, stats_ref + 2 * c, 2 * c, BN_RTOL);
    int same = 1;
    for (int64_t i = 0; i < n; i++) same &= onto[1][i] == onto[2][i];
    for (int i = 0; i < 2 * c; i++) same &= dgrad[1][i] == dgrad[2][i];
    CHECK_MSG(same, "%s: gradients written over NaN differ from those added onto zeros", label);
    free(onto[1]);
    free(dgrad[1]);
    float *all[] = {x, gamma, beta, dy, base, y_ref, dy_ref, dx_ref, stats_ref, y, dy_in, dx, stats, dx_w, dg_w, invstd};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    nn_onednn_layer_free(&bn);
}

static void check_maxpool_onednn(NnOnednnLayer *pool, int batch, int c, int h, int w, int k, int stride, int pad)
{
    const int B = nn_onednn_block(), ho = (h + 2 * pad - k) / stride + 1, wo = (w + 2 * pad - k) / stride + 1;
    char label[64];
    snprintf(label, sizeof label, "max pool %dx%dx%dx%d k%d s%d p%d", batch, c, h, w, k, stride, pad);
    FhRng rng = rng_for(label, 0);
    const int64_t n = (int64_t)batch * c * h * w, no = (int64_t)batch * c * ho * wo;
    float *x = falloc(n), *y = falloc(no), *y_ref = falloc(no), *dy = falloc(no), *dx = falloc(n), *dx_ref = falloc(n),
          *dx_w = falloc(n);
    int32_t *argmax = calloc((size_t)no, sizeof(int32_t));
    fill_normal(&rng, x, n, 1.0); /* distinct values: no ties for the two to break differently */
    fill_normal(&rng, dy, no, 1.0);
    fill_normal(&rng, dx_ref, n, 1.0);
    memcpy(dx, dx_ref, sizeof(float) * (size_t)n);
    nn_maxpool_forward_blocked(y_ref, argmax, x, batch, c, h, w, k, stride, pad, ho, wo, B);
    nn_maxpool_backward(dx_ref, dy, argmax, batch * c / B, (int64_t)h * w * B, (int64_t)ho * wo * B);
    CHECK_OK(nn_onednn_maxpool_forward(pool, y, x, batch));
    CHECK_MSG(!memcmp(y, y_ref, sizeof(float) * (size_t)no), "%s: y differs", label);
    nn_onednn_maxpool_backward(pool, dx, dy, batch, 0);
    check_close(label, "dx", dx, dx_ref, n, 1e-6);
    for (int64_t i = 0; i < n; i++) dx_w[i] = NAN;
    nn_onednn_maxpool_backward(pool, dx_w, dy, batch, 1);
    memset(dx_ref, 0, sizeof(float) * (size_t)n);
    nn_maxpool_backward(dx_ref, dy, argmax, batch * c / B, (int64_t)h * w * B, (int64_t)ho * wo * B);
    check_close(label, "dx written", dx_w, dx_ref, n, 1e-6);
    free(x), free(y), free(y_ref), free(dy), free(dx), free(dx_ref), free(dx_w), free(argmax);
}

static void test_norm_pool_onednn_match_fedhet(void)
{
    NnOnednn *ctx = NULL;
    CHECK_OK(nn_onednn_create(&ctx));
    if (!ctx) return;
    const int B = nn_onednn_block();
    const NnAct acts[] = {NN_ACT_RELU, NN_ACT_NONE, NN_ACT_RELU6};
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++)
        for (int batch = 4; batch >= 3; batch--) check_bn_onednn(ctx, batch, 2 * B, 5, 6, acts[a]);
    NnOnednnLayer *pool = NULL;
    CHECK_OK(nn_onednn_maxpool_create(&pool, ctx, 4, B, 9, 9, B, 3, 2, 1, 5, 5, "stem pool"));
    if (pool) {
        const int batches[] = {4, 3, 4};
        for (int i = 0; i < 3; i++) check_maxpool_onednn(pool, batches[i], B, 9, 9, 3, 2, 1);
    }
    /* what the CPU runs them with: no reference loop */
    NnOnednnLayer *bn = NULL;
    CHECK_OK(nn_onednn_bn_create(&bn, ctx, 4, 2 * B, 5, 6, B, 1e-5f, NN_ACT_RELU, "bn"));
    const char *bn_impl = nn_onednn_layer_impl(bn, 0), *pool_impl = nn_onednn_layer_impl(pool, 0);
    CHECK_MSG(strstr(bn_impl, "jit") && strstr(pool_impl, "jit"), "batch norm on %s, max pool on %s", bn_impl, pool_impl);
    printf("[bn: %s, pool: %s] ", bn_impl, pool_impl);
    nn_onednn_layer_free(&bn);
    nn_onednn_layer_free(&pool);
    nn_onednn_free(&ctx);
}

/* conv, batch norm with the activation *arg, conv: the batch norm feeds a conv, so it runs on oneDNN */
static int build_bn_act(NnModel *m, int x, const void *arg)
{
    int h = nn_conv2d(m, x, 16, 3, 1, 1, 1, 0, NN_ACT_NONE);
    int b = nn_batchnorm(m, h, *(const NnAct *)arg);
    int h2 = nn_conv2d(m, b, 16, 3, 1, 1, 1, 1, NN_ACT_NONE);
    return nn_gap(m, h2);
}

/* One training step's gradients (parameters and input) through a batch norm with a ReLU (fused by oneDNN) and a
 * ReLU6 (fedhet's passes around the primitives) agree with the blas model's; gamma 4 puts a quarter of the ReLU6's
 * inputs above 6. */
static void test_bn_act_onednn_gradients(void)
{
    const NnAct acts[] = {NN_ACT_RELU, NN_ACT_RELU6};
    for (int a = 0; a < 2; a++) {
        GradCase c = {.label = a ? "onednn_bn_relu6" : "onednn_bn_relu", .in = {3, 6, 6}, .batch = 4,
                      .build = build_bn_act, .arg = &acts[a]};
        NnModel m[2];
        float *grads[2] = {NULL, NULL};
        const int64_t nx = 4 * 3 * 6 * 6;
        float *x = falloc(nx), *dz = NULL;
        FhRng rng = rng_for(c.label, 0);
        fill_normal(&rng, x, nx, 1.0);
        for (int k = 0; k < 2; k++) {
            g_backend = k ? NN_BACKEND_ONEDNN : NN_BACKEND_BLAS;
            int st = build_case(&m[k], &c);
            g_backend = NN_BACKEND_BLAS;
            CHECK_OK(st);
            if (st != FH_OK) return;
            nn_model_init_params(&m[k], SEED);
            const NnLayer *bn = &m[k].layers[1];
            for (int ch = 0; ch < bn->cin; ch++) m[k].state[bn->w_off + ch] = 4.0f;
            m[k].need_input_grad = 1;
            nn_model_set_training(&m[k], 1);
            if (!dz) {
                dz = falloc(4 * m[k].classes);
                fill_uniform(&rng, dz, 4 * m[k].classes, -1.0, 1.0);
            }
            nn_model_zero_grad(&m[k]);
            CHECK_OK(nn_model_forward(&m[k], x, 4));
            nn_model_backward(&m[k], dz, NULL);
            grads[k] = falloc(m[k].n_params + nx);
            memcpy(grads[k], m[k].grad, sizeof(float) * (size_t)m[k].n_params);
            memcpy(grads[k] + m[k].n_params, m[k].tensors[m[k].input].grad, sizeof(float) * (size_t)nx);
        }
        CHECK(m[1].layers[1].onednn_ran && !m[0].layers[1].onednn_ran);
        check_close(c.label, "gradients, onednn vs blas", grads[1], grads[0], m[0].n_params + nx, 1e-3);
        for (int k = 0; k < 2; k++) {
            free(grads[k]);
            nn_model_free(&m[k]);
        }
        free(x);
        free(dz);
    }
}

/* In a model: which batch norms and max pools run on oneDNN in training (model.c, create_onednn_train_layers),
 * and the running statistics: updated as fedhet's kernel updates them (the blas model beside it), untouched in
 * the frozen mode of SAM's second pass and in evaluation, where fedhet's kernels run. */
static void test_norm_pool_onednn_in_model(void)
{
    static const int max = 1;
    GradCase blocked = {.label = "onednn_bn_model", .in = {3, 5, 4}, .batch = 3, .build = build_blocked};
    GradCase pooled = {.label = "onednn_pool_model", .in = {3, 7, 6}, .batch = 3, .build = build_pooled, .arg = &max};
    NnModel o, b, p;
    g_backend = NN_BACKEND_ONEDNN;
    int st = build_case(&o, &blocked) | build_case(&p, &pooled);
    g_backend = NN_BACKEND_BLAS;
    st |= build_case(&b, &blocked);
    CHECK_OK(st);
    if (st != FH_OK) return;
    /* blocked: conv, bn (feeds a conv), ...; pooled: conv, bn (feeds the pool: fedhet's), 3x3/2 pool (oneDNN's) */
    CHECK(o.layers[1].type == NN_OP_BATCHNORM && o.layers[1].onednn_train && !b.layers[1].onednn_train);
    CHECK(p.layers[1].type == NN_OP_BATCHNORM && !p.layers[1].onednn_train);
    CHECK(p.layers[2].type == NN_OP_MAXPOOL && p.layers[2].onednn_train);
    nn_model_init_params(&o, SEED);
    nn_model_init_params(&b, SEED);
    FhRng rng = rng_for(blocked.label, 0);
    const int64_t nx = 3 * 3 * 5 * 4;
    float *x = falloc(nx), *before = falloc(o.n_state);
    fill_normal(&rng, x, nx, 1.0);
    const NnLayer *l = &o.layers[1];
    const int64_t stats = o.n_state - o.n_params;
    for (int mode = 0; mode < 3; mode++) { /* training, frozen, evaluation */
        memcpy(before, o.state, sizeof(float) * (size_t)o.n_state);
        nn_model_set_training(&o, mode < 2);
        nn_model_set_training(&b, mode < 2);
        o.bn_update_running = b.bn_update_running = mode == 0;
        CHECK_OK(nn_model_forward(&o, x, 3));
        CHECK_OK(nn_model_forward(&b, x, 3));
        CHECK_MSG(o.layers[1].onednn_ran == (mode < 2), "mode %d: oneDNN ran %d", mode, o.layers[1].onednn_ran);
        if (mode == 0) {
            check_close("running mean", "onednn vs blas", o.state + l->rm_off, b.state + l->rm_off, l->cin, BN_RTOL);
            check_close("running var", "onednn vs blas", o.state + l->rv_off, b.state + l->rv_off, l->cin, BN_RTOL);
            CHECK(memcmp(before + o.n_params, o.state + o.n_params, sizeof(float) * (size_t)stats));
        } else {
            CHECK_MSG(!memcmp(before, o.state, sizeof(float) * (size_t)o.n_state), "mode %d changed the state", mode);
        }
    }
    free(x);
    free(before);
    nn_model_free(&o);
    nn_model_free(&b);
    nn_model_free(&p);
}

/* ============================== the zoo under both backends ============================== */

typedef struct {
    const char *name;
    NnShape in;
} ZooInput;

/* every zoo model on a small input */
static const ZooInput zoo_inputs[] = {
    {"mlp", {1, 8, 8}},          {"cnn", {1, 12, 12}},       {"lenet", {1, 20, 20}},
    {"smallcnn", {1, 16, 16}},   {"resnet8", {3, 16, 16}},   {"resnet18", {3, 16, 16}},
    {"resnet18_gn", {3, 16, 16}}, {"mobilenetv2", {3, 32, 32}},
};

enum { ZOO_STEPS = 10 };
static const int zoo_batches[2] = {4, 3}; /* steps alternate a full batch and a client's last partial batch */

static float *zoo_run(const ZooInput *z, const char *backend, int nudge, float *losses, int64_t *n_state)
{
    NnZooOptions opt = {.backend = backend};
    return zoo_train_fixed(z->name, z->in, &opt, zoo_batches, 2, ZOO_STEPS, 0.01f, nudge, 7, losses, n_state);
}

static void test_zoo_losses_agree(void)
{
    for (size_t i = 0; i < sizeof zoo_inputs / sizeof zoo_inputs[0]; i++) {
        const ZooInput *z = &zoo_inputs[i];
        float lb[ZOO_STEPS], lo[ZOO_STEPS], lu[ZOO_STEPS], ld[ZOO_STEPS];
        int64_t nb = 0, no = 0, nn = 0;
        float *b = zoo_run(z, "blas", 0, lb, &nb), *o = zoo_run(z, "onednn", 0, lo, &no);
        float *up = zoo_run(z, "blas", 1, lu, &nn), *down = zoo_run(z, "blas", -1, ld, &nn);
        CHECK_MSG(b && o && up && down && nb == no, "%s: training failed", z->name);
        if (b && o && up && down && nb == no) {
            double spread = 0.0, move = 0.0, worst = 0.0; /* worst: the largest share of its allowance a step used */
            for (int s = 0; s < ZOO_STEPS; s++) {
                spread = fmax(spread, fmax(fabs((double)lu[s] - lb[s]), fabs((double)ld[s] - lb[s])));
                move = fmax(move, fabs((double)lb[s] - lb[0]));
                const double diff = fabs((double)lo[s] - lb[s]),
                             allowed = s == 0 ? ZOO_LOSS_RTOL * fabs(lb[0])
                                              : ZOO_SPREAD * spread + ZOO_LOSS_RTOL * fabs(lb[0]) + ZOO_MOVE_RTOL * move;
                worst = fmax(worst, diff / allowed);
                CHECK_MSG(diff <= allowed, "%s step %d: loss %.7g (onednn) vs %.7g (blas), difference %.3g > %.3g",
                          z->name, s, (double)lo[s], (double)lb[s], diff, allowed);
            }
            printf("\n    %-12s loss %.4f -> %.4f, differences up to %.2f of what is allowed", z->name, (double)lb[0],
                   (double)lb[ZOO_STEPS - 1], worst);
        }
        free(b);
        free(o);
        free(up);
        free(down);
    }
    printf("\n  %-44s ", "");
}

/* same layout, names and offsets under both backends: methods cannot tell them apart */
static void test_zoo_layout_same(void)
{
    for (size_t i = 0; i < sizeof zoo_inputs / sizeof zoo_inputs[0]; i++) {
        NnModel b, o;
        NnZooOptions ob = {.backend = "blas"}, oo = {.backend = "onednn"};
        CHECK_OK(nn_zoo_build(&b, zoo_inputs[i].name, zoo_inputs[i].in, 10, 2, &ob));
        CHECK_OK(nn_zoo_build(&o, zoo_inputs[i].name, zoo_inputs[i].in, 10, 2, &oo));
        CHECK(b.backend == NN_BACKEND_BLAS && o.backend == NN_BACKEND_ONEDNN);
        CHECK(b.n_params == o.n_params && b.n_state == o.n_state && b.n_views == o.n_views);
        for (int v = 0; v < b.n_views && v < o.n_views; v++)
            CHECK_MSG(!strcmp(b.views[v].name, o.views[v].name) && b.views[v].offset == o.views[v].offset &&
                          b.views[v].count == o.views[v].count,
                      "%s: view %d differs", zoo_inputs[i].name, v);
        int on_onednn = 0, named = 0, convs = 0;
        for (int l = 0; l < o.n_layers; l++) {
            char impl[256], none[256];
            nn_model_layer_impl(&o, l, impl, sizeof impl);
            nn_model_layer_impl(&b, l, none, sizeof none);
            const NnOpType t = o.layers[l].type;
            /* batch norms and max pools where oneDNN's pay (test_norm_pool_onednn_in_model) */
            const int onednn = t == NN_OP_CONV2D || o.layers[l].onednn_train;
            convs += t == NN_OP_CONV2D;
            on_onednn += onednn;
            named += onednn && *impl;
            CHECK_MSG(!*none && (onednn || !*impl), "%s layer %d: implementation '%s' / '%s'", zoo_inputs[i].name, l,
                      impl, none);
        }
        CHECK_MSG(named == on_onednn, "%s: %d of %d layers on oneDNN name their implementation",
                  zoo_inputs[i].name, named, on_onednn);
        CHECK(nn_model_backend_bytes(&b) == 0 && (convs == 0 || nn_model_backend_bytes(&o) > 0));
        nn_model_free(&b);
        nn_model_free(&o);
    }
}

/* Layers that are the first to reach their input's gradient write it without a zero fill before (oneDNN's
 * convs, batch and group norm, max pools whose windows tile a blocked input): gradient buffers poisoned with
 * NaN between two identical steps change no bit of the parameters' or the input's gradient, on every zoo
 * model under both backends. */
static void test_first_writers_ignore_stale_gradients(void)
{
    for (size_t i = 0; i < 2 * sizeof zoo_inputs / sizeof zoo_inputs[0]; i++) {
        const ZooInput *z = &zoo_inputs[i / 2];
        NnModel m;
        NnZooOptions opt = {.backend = i % 2 ? "onednn" : "blas"};
        const int batch = 3;
        CHECK_OK(nn_zoo_build(&m, z->name, z->in, 10, batch, &opt));
        m.need_input_grad = 1;
        nn_model_init_params(&m, SEED);
        nn_model_set_training(&m, 1);
        FhRng rng = rng_for(z->name, 1);
        const int64_t nx = (int64_t)batch * z->in.c * z->in.h * z->in.w, nz = (int64_t)batch * m.classes;
        float *x = falloc(nx), *dz = falloc(nz), *clean = falloc(m.n_params), *clean_dx = falloc(nx);
        fill_normal(&rng, x, nx, 1.0);
        fill_uniform(&rng, dz, nz, -1.0, 1.0);
        for (int pass = 0; pass < 2; pass++) {
            if (pass) { /* every activation gradient buffer, the input's too */
                for (int64_t k = 0; k < (int64_t)m.max_batch * (m.grad_pool_floats + 1); k++) m.grad_pool[k] = NAN;
                for (int64_t k = 0; k < nx; k++) m.tensors[m.input].grad[k] = NAN;
            }
            nn_model_zero_grad(&m);
            CHECK_OK(nn_model_forward(&m, x, batch));
            nn_model_backward(&m, dz, NULL);
            const float *dx = m.tensors[m.input].grad;
            if (!pass) {
                memcpy(clean, m.grad, sizeof(float) * (size_t)m.n_params);
                memcpy(clean_dx, dx, sizeof(float) * (size_t)nx);
            } else {
                CHECK_MSG(!memcmp(clean, m.grad, sizeof(float) * (size_t)m.n_params) &&
                              !memcmp(clean_dx, dx, sizeof(float) * (size_t)nx),
                          "%s (%s): stale gradient buffers changed the gradients", z->name, opt.backend);
            }
        }
        free(x);
        free(dz);
        free(clean);
        free(clean_dx);
        nn_model_free(&m);
    }
}

/* ============================== bits ============================== */

static void check_bit_identical(const ZooInput *z, int threads)
{
    nn_set_threads(threads); /* before building: oneDNN's primitives keep the thread count they were made with */
    float la[ZOO_STEPS], lb[ZOO_STEPS];
    int64_t na = 0, nb = 0;
    float *a = zoo_run(z, "onednn", 0, la, &na), *b = zoo_run(z, "onednn", 0, lb, &nb);
    nn_set_threads(1);
    CHECK_MSG(a && b && na == nb, "%s: training failed", z->name);
    if (a && b && na == nb)
        CHECK_MSG(!memcmp(la, lb, sizeof la) && !memcmp(a, b, sizeof(float) * (size_t)na),
                  "%s with %d thread(s): two runs differ", z->name, threads);
    free(a);
    free(b);
}

static void test_onednn_bit_identical(void)
{
    const ZooInput cases[] = {{"cnn", {1, 12, 12}}, {"resnet8", {3, 16, 16}}, {"mobilenetv2", {3, 16, 16}}};
    for (int t = 1; t <= 2; t++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_bit_identical(&cases[i], t);
}

/* ============================== allocations of a warm step ============================== */

#if !defined(__SANITIZE_ADDRESS__) /* ASan replaces the allocator itself */
/* Every allocation goes through these (glibc's own functions underneath), counted while g_counting is set. */
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
static int g_counting;
static long g_allocs, g_buffers; /* all allocations; those of BUFFER_BYTES and more */
#define BUFFER_BYTES 4096
static void count_alloc(size_t n)
{
    if (!g_counting) return;
    g_allocs++;
    g_buffers += n >= BUFFER_BYTES;
}
void *malloc(size_t n)
{
    count_alloc(n);
    return __libc_malloc(n);
}
void *calloc(size_t count, size_t size)
{
    count_alloc(count * size);
    return __libc_calloc(count, size);
}
void *realloc(void *p, size_t n)
{
    count_alloc(n);
    return __libc_realloc(p, n);
}
void *aligned_alloc(size_t align, size_t n)
{
    count_alloc(n);
    return __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n)
{
    count_alloc(n);
    return __libc_memalign(align, n);
}
int posix_memalign(void **p, size_t align, size_t n)
{
    count_alloc(n);
    *p = __libc_memalign(align, n);
    return *p ? 0 : 12 /* ENOMEM */;
}

/* After a warm-up at the full and a partial batch, training steps of `model` at both allocate no buffer.
 * oneDNN's dnnl_primitive_execute does build its small argument map on the heap, and libgomp its team (about
 * 1.5 KiB) for each parallel region a Winograd kernel opens, even on one thread: under BUFFER_BYTES each and
 * freed within the call, counted and printed, not refused. */
static void check_warm_step_allocates_no_buffer(const char *model)
{
    enum { B = 6 };
    const NnShape in = {3, 16, 16};
    NnModel m;
    NnZooOptions opt = {.backend = "onednn"};
    CHECK_OK(nn_zoo_build(&m, model, in, 10, B, &opt));
    if (m.status != FH_OK) return;
    nn_model_init_params(&m, 1);
    FhRng rng = rng_for("warm step", 0);
    float *x = falloc((int64_t)B * in.c * in.h * in.w), *dl = falloc(B * 10);
    fill_normal(&rng, x, (int64_t)B * in.c * in.h * in.w, 1.0);
    int32_t y[B] = {0};
    long allocs = 0;
    for (int pass = 0; pass < 3; pass++)
        for (int batch = B; batch >= B - 2; batch -= 2) {
            g_counting = pass == 2; /* passes 0 and 1 warm up */
            g_allocs = g_buffers = 0;
            nn_model_zero_grad(&m);
            CHECK_OK(nn_model_forward(&m, x, batch));
            memset(dl, 0, sizeof(float) * B * 10);
            nn_softmax_xent(dl, NULL, nn_model_logits(&m), y, NULL, NULL, batch, 10);
            nn_model_backward(&m, dl, NULL);
            g_counting = 0;
            CHECK_MSG(pass < 2 || g_buffers == 0, "%s: a warm step at batch %d allocated %ld buffers", model, batch,
                      g_buffers);
            allocs = pass == 2 && g_allocs > allocs ? g_allocs : allocs;
        }
    int convs = 0;
    for (int i = 0; i < m.n_layers; i++) convs += m.layers[i].type == NN_OP_CONV2D;
    printf("[%s: %ld small allocations a step, %d conv layers] ", model, allocs, convs);
    free(x);
    free(dl);
    nn_model_free(&m);
}

/* mobilenetv2: grouped, depthwise and 1x1 convs; resnet8: Winograd convs */
static void test_warm_step_allocates_no_buffer(void)
{
    check_warm_step_allocates_no_buffer("mobilenetv2");
    check_warm_step_allocates_no_buffer("resnet8");
}
#endif

/* ============================== bad input ============================== */

static void test_bad_backend(void)
{
    NnModel m;
    NnZooOptions opt = {.backend = "mkl"};
    CHECK(nn_zoo_build(&m, "cnn", (NnShape){1, 12, 12}, 10, 2, &opt) == FH_ERR_USAGE);
    CHECK_MSG_HAS("backend 'mkl'");
    CHECK_MSG_HAS("blas, onednn or auto");
    NnBackend b = NN_BACKEND_ONEDNN;
    CHECK_OK(nn_backend_parse(NULL, &b));
    CHECK(b == NN_BACKEND_BLAS && !strcmp(nn_backend_name(b), "blas"));
    CHECK_OK(nn_backend_parse("onednn", &b));
    CHECK(b == NN_BACKEND_ONEDNN && !strcmp(nn_backend_name(b), "onednn"));
    CHECK_OK(nn_backend_parse("auto", &b));
    CHECK(b == NN_BACKEND_AUTO && !strcmp(nn_backend_name(b), "auto"));
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    layer_tests_init();

    RUN(test_conv_onednn_matches_ref);
    RUN(test_conv_onednn_batch_cache);
    RUN(test_conv_onednn_without_avx512);
    RUN(test_conv_onednn_winograd_where_it_pays);
    RUN(test_grad_conv_onednn);
    RUN(test_blocked_layouts);
    RUN(test_depthwise_on_unit_planes);
    RUN(test_weight_grad_written_once);
    RUN(test_first_writers_ignore_stale_gradients);
    RUN(test_norm_pool_onednn_match_fedhet);
    RUN(test_norm_pool_onednn_in_model);
    RUN(test_bn_act_onednn_gradients);
    RUN(test_zoo_losses_agree);
    RUN(test_zoo_layout_same);
    RUN(test_onednn_bit_identical);
#if !defined(__SANITIZE_ADDRESS__)
    RUN(test_warm_step_allocates_no_buffer);
#endif
    RUN(test_bad_backend);
    return test_summary();
}
