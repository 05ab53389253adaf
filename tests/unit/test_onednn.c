/* The oneDNN backend of the conv layers (src/nn/onednn.c, train.backend = onednn):
 *  - the kernels against the naive references nn_conv2d_*_ref on every configuration of conv_check.h
 *    (strides, padding, groups, depthwise, 1x1, ReLU / ReLU6, bias or not), each set up for its batch and
 *    run at it and then at one sample (a partial batch after a full one); y, dx, dw and db within CONV_RTOL
 *    (conv_check.h: float32 sums in another order than the reference's);
 *  - the per-layer cache of batch sizes: more sizes than it holds, each right when it comes back;
 *  - finite-difference gradients (layer_check.h) of small convs and of a residual graph built on oneDNN;
 *  - the channel-blocked layouts between layers (model.c, plan_layouts): which tensors get them, and
 *    finite-difference gradients through blocked batch norm (training and frozen), add and pooling;
 *  - every zoo model: the losses of 10 SGD steps (full and partial batches) agree with the blas backend's
 *    (ZOO_SPREAD, ZOO_LOSS_RTOL below), and the state layout is the same under both;
 *  - bits: two runs of a model with the same backend and thread count (1 and 2) are identical;
 *  - a warm training step, at the full and at a partial batch, allocates no buffer (malloc and friends are
 *    counted here; not in a sanitizer build, whose allocator they would replace);
 *  - a CPU without AVX-512: the reference comparison and the blocked layouts (nChw8c there) again in a child
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
        int convs = 0, named = 0;
        for (int l = 0; l < o.n_layers; l++) {
            char impl[256], none[256];
            nn_model_layer_impl(&o, l, impl, sizeof impl);
            nn_model_layer_impl(&b, l, none, sizeof none);
            convs += o.layers[l].type == NN_OP_CONV2D;
            named += o.layers[l].type == NN_OP_CONV2D && *impl;
            CHECK_MSG(!*none && (o.layers[l].type == NN_OP_CONV2D || !*impl), "%s layer %d: implementation '%s' / '%s'",
                      zoo_inputs[i].name, l, impl, none);
        }
        CHECK_MSG(named == convs, "%s: %d of %d conv layers name their implementation", zoo_inputs[i].name, named,
                  convs);
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
    RUN(test_weight_grad_written_once);
    RUN(test_first_writers_ignore_stale_gradients);
    RUN(test_zoo_losses_agree);
    RUN(test_zoo_layout_same);
    RUN(test_onednn_bit_identical);
#if !defined(__SANITIZE_ADDRESS__)
    RUN(test_warm_step_allocates_no_buffer);
#endif
    RUN(test_bad_backend);
    return test_summary();
}
