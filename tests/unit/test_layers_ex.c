/* The general forms of the engine's layers (src/nn): convs with rectangular kernels, separate strides, asymmetric
 * pads, dilations and groups (blas and oneDNN against the naive reference, and by finite differences), pooling
 * with ceil_mode, count_include_pad, asymmetric pads and rectangular windows (against the reference and against
 * values PyTorch 1.13 printed), and the standalone activations (LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish,
 * SiLU, Tanh: against their definitions in double, by finite differences, and their branch patterns).
 * Run: make build/tests/test_layers_ex && build/tests/test_layers_ex [test_name] */
#include "test.h"

#include "layer_check.h"

/* ============================== convolutions ============================== */

typedef struct {
    int batch, cin, h, w, cout;
    NnConvSpec c;
} ConvExCase;

/* rectangular kernels, separate strides, every pad side alone, dilations, groups, depthwise (with a channel
 * multiplier too), and the square case spelled out */
static const ConvExCase conv_cases[] = {
    {2, 3, 7, 9, 4, {3, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1}},
    {2, 3, 8, 7, 4, {1, 5, 2, 1, 0, 2, 0, 2, 1, 1, 1, 0}},
    {2, 4, 9, 9, 4, {3, 3, 2, 2, 0, 0, 1, 1, 1, 1, 1, 1}}, /* TF "same" padding: only bottom and right */
    {2, 4, 9, 8, 6, {3, 3, 1, 2, 2, 1, 0, 3, 1, 1, 2, 1}},
    {2, 3, 11, 10, 5, {3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1, 1}}, /* dilation 2 */
    {2, 2, 12, 9, 3, {3, 2, 2, 1, 3, 1, 1, 0, 3, 2, 1, 0}},
    {2, 4, 9, 9, 4, {3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 4, 1}}, /* depthwise, dilated */
    {2, 4, 8, 9, 4, {5, 3, 2, 1, 2, 0, 1, 2, 1, 1, 4, 0}}, /* depthwise, asymmetric */
    {2, 3, 7, 7, 6, {3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3, 1}}, /* depthwise with a channel multiplier */
    {2, 1, 6, 6, 2, {1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1}}, /* 1x1 with a bottom/right pad: not the plain gemm */
    {2, 2, 3, 2, 3, {1, 7, 1, 1, 0, 6, 0, 0, 1, 1, 1, 1}},   /* a left pad wider than the output row */
    {2, 2, 4, 3, 3, {2, 4, 1, 1, 1, 7, 0, 1, 1, 3, 1, 0}},   /* the same, dilated */
    {3, 16, 9, 9, 16, {3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}, /* the square case through the general fields */
};

static NnConvShape conv_ex_shape(const ConvExCase *k, int batch)
{
    const NnConvSpec *c = &k->c;
    const int ho = (k->h + c->pad_t + c->pad_b - c->dil_h * (c->kh - 1) - 1) / c->stride_h + 1;
    const int wo = (k->w + c->pad_l + c->pad_r - c->dil_w * (c->kw - 1) - 1) / c->stride_w + 1;
    return (NnConvShape){batch, k->cin, k->h, k->w, k->cout, c->kh, c->stride_h, c->pad_t, c->groups, ho, wo,
                         .kh = c->kh, .kw = c->kw, .stride_h = c->stride_h, .stride_w = c->stride_w,
                         .pad_t = c->pad_t, .pad_l = c->pad_l, .pad_b = c->pad_b, .pad_r = c->pad_r,
                         .dil_h = c->dil_h, .dil_w = c->dil_w};
}

/* one backend (onednn: 0 blas, 1 oneDNN) on one case against the reference, forward and backward */
static void conv_ex_compare(const ConvExCase *k, int onednn, NnAct act)
{
    NnConvShape s = conv_ex_shape(k, k->batch);
    char label[160];
    snprintf(label, sizeof label, "%s conv %dx%dx%d->%d k%dx%d s%dx%d p%d%d%d%d d%dx%d g%d%s%s",
             onednn ? "onednn" : "blas", s.cin, s.h, s.w, s.cout, s.kh, s.kw, s.stride_h, s.stride_w, s.pad_t,
             s.pad_l, s.pad_b, s.pad_r, s.dil_h, s.dil_w, s.groups, k->c.bias ? " bias" : "",
             act == NN_ACT_RELU ? " relu" : "");
    const int64_t nx = (int64_t)s.batch * s.cin * s.h * s.w, ny = (int64_t)s.batch * s.cout * s.ho * s.wo;
    const int64_t nw = (int64_t)s.cout * (s.cin / s.groups) * s.kh * s.kw;
    FhRng rng = rng_for(label, 0);
    float *x = falloc(nx), *w = falloc(nw), *b = falloc(s.cout), *dy = falloc(ny), *y = falloc(ny), *yr = falloc(ny);
    fill_normal(&rng, x, nx, 1.0);
    fill_normal(&rng, w, nw, 0.3);
    fill_normal(&rng, b, s.cout, 0.5);
    fill_normal(&rng, dy, ny, 1.0);
    const float *bias = k->c.bias ? b : NULL;
    float *ws = falloc(nn_conv2d_workspace(&s, nn_conv2d_chunk(&s)));
    NnOnednn *ctx = NULL;
    NnOnednnConv *conv = NULL;
    if (onednn) {
        CHECK_OK(nn_onednn_create(&ctx));
        int st = nn_onednn_conv_create(&conv, ctx, &s, k->c.bias, 0, 0, label);
        CHECK_MSG(st == FH_OK, "%s: oneDNN refused it: %s", label, fh_error_message());
        if (st != FH_OK) goto out;
    }
    for (int64_t i = 0; i < ny; i++) y[i] = NAN;
    if (onednn) CHECK_OK(nn_onednn_conv_forward(conv, y, x, w, bias, s.batch, act));
    else nn_conv2d_forward_act(y, x, w, bias, &s, act, ws);
    nn_conv2d_forward_ref(yr, x, w, bias, &s);
    for (int64_t i = 0; i < ny; i++)
        if (act == NN_ACT_RELU && yr[i] < 0.0f) yr[i] = 0.0f;
    check_close(label, "forward", y, yr, ny, 1e-4);
    float *dyr = fdup(dy, ny);
    for (int64_t i = 0; i < ny; i++)
        if (act == NN_ACT_RELU && !(y[i] > 0.0f)) dyr[i] = 0.0f;
    float *dx = falloc(nx), *dw = falloc(nw), *db = falloc(s.cout);
    float *dxr = falloc(nx), *dwr = falloc(nw), *dbr = falloc(s.cout);
    if (onednn) nn_onednn_conv_backward(conv, dx, dw, k->c.bias ? db : NULL, dy, y, x, w, s.batch, act, 0, 0);
    else nn_conv2d_backward_act(dx, dw, k->c.bias ? db : NULL, dy, y, x, w, &s, act, ws);
    nn_conv2d_backward_ref(dxr, dwr, k->c.bias ? dbr : NULL, dyr, x, w, &s);
    check_close(label, "backward dx", dx, dxr, nx, 1e-4);
    check_close(label, "backward dw", dw, dwr, nw, 1e-4);
    check_close(label, "backward db", db, dbr, s.cout, 1e-4);
    CHECK_MSG(max_abs(dxr, nx) > 1e-3 && max_abs(dwr, nw) > 1e-3, "%s: zero gradient", label);
    FREE_ALL(dyr, dx, dw, db, dxr, dwr, dbr);
out:
    nn_onednn_conv_free(&conv);
    nn_onednn_free(&ctx);
    FREE_ALL(x, w, b, dy, y, yr, ws);
}

static void test_conv_ex_blas_matches_ref(void)
{
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
        conv_ex_compare(&conv_cases[i], 0, NN_ACT_NONE);
        conv_ex_compare(&conv_cases[i], 0, NN_ACT_RELU);
    }
}

static void test_conv_ex_onednn_matches_ref(void)
{
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
        conv_ex_compare(&conv_cases[i], 1, NN_ACT_NONE);
        conv_ex_compare(&conv_cases[i], 1, NN_ACT_RELU);
    }
}

/* the square case given through the general fields runs the very loops of the square call: the same bits */
static void test_conv_ex_square_same_bits(void)
{
    const ConvExCase *k = &conv_cases[sizeof conv_cases / sizeof conv_cases[0] - 1];
    NnConvShape g = conv_ex_shape(k, k->batch), sq = g;
    sq.kh = sq.kw = sq.stride_h = sq.stride_w = sq.pad_t = sq.pad_l = sq.pad_b = sq.pad_r = sq.dil_h = sq.dil_w = 0;
    const int64_t nx = (int64_t)g.batch * g.cin * g.h * g.w, ny = (int64_t)g.batch * g.cout * g.ho * g.wo;
    const int64_t nw = (int64_t)g.cout * g.cin * 9;
    FhRng rng = rng_for("square_same_bits", 0);
    float *x = falloc(nx), *w = falloc(nw), *y1 = falloc(ny), *y2 = falloc(ny), *ws = falloc(nn_conv2d_workspace(&g, 1) + nn_conv2d_workspace(&g, nn_conv2d_chunk(&g)));
    fill_normal(&rng, x, nx, 1.0);
    fill_normal(&rng, w, nw, 0.3);
    nn_conv2d_forward_act(y1, x, w, NULL, &g, NN_ACT_NONE, ws);
    nn_conv2d_forward_act(y2, x, w, NULL, &sq, NN_ACT_NONE, ws);
    CHECK(memcmp(y1, y2, sizeof(float) * (size_t)ny) == 0);
    CHECK(nn_conv2d_chunk(&g) == nn_conv2d_chunk(&sq) && nn_conv2d_workspace(&g, 2) == nn_conv2d_workspace(&sq, 2));
    FREE_ALL(x, w, y1, y2, ws);
}

static int build_conv_ex(NnModel *m, int x, const void *arg)
{
    const ConvExCase *k = arg;
    return nn_conv2d_ex(m, x, k->cout, &k->c, NN_ACT_NONE);
}

/* the layer in a model, by finite differences, under blas and oneDNN */
static void test_grad_conv_ex(void)
{
    for (int backend = 0; backend < 2; backend++) {
        g_backend = backend ? NN_BACKEND_ONEDNN : NN_BACKEND_BLAS;
        for (size_t i = 0; i + 1 < sizeof conv_cases / sizeof conv_cases[0]; i++) {
            const ConvExCase *k = &conv_cases[i];
            char label[64];
            snprintf(label, sizeof label, "%s_conv_ex_%zu", backend ? "onednn" : "blas", i);
            GradCase c = {.label = label, .in = {k->cin, k->h, k->w}, .batch = 2, .build = build_conv_ex, .arg = k,
                          .training = 1};
            grad_check(&c);
        }
    }
    g_backend = NN_BACKEND_BLAS;
}

/* building a conv of spec on a 2x8x8 input fails with a message naming `what` */
static void expect_conv_error(const NnConvSpec *spec, NnAct act, const char *what)
{
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 8, 8}, 1));
    CHECK(nn_conv2d_ex(&m, m.input, 4, spec, act) < 0);
    CHECK_MSG_HAS(what);
    nn_model_free(&m);
    fh_error_clear();
}

static void test_bad_conv_ex(void)
{
    const NnConvSpec too_big = {5, 3, 1, 1, 0, 0, 0, 0, 2, 1, 1, 1}; /* a dilated 5-tap kernel spans 9 rows */
    expect_conv_error(&too_big, NN_ACT_NONE, "too small");
    expect_conv_error(&too_big, NN_ACT_NONE, "2x8x8");
    const NnConvSpec zero_dil = {3, 3, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1};
    expect_conv_error(&zero_dil, NN_ACT_NONE, "dilation");
    const NnConvSpec ok = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    expect_conv_error(&ok, NN_ACT_SIGMOID, "activation layer");
}

/* ============================== pooling ============================== */

typedef struct {
    int h, w;
    NnPoolSpec p;
} PoolExCase;

static const PoolExCase pool_cases[] = {
    {5, 6, {3, 2, 2, 2, 1, 1, 1, 1, 1, 1}}, {5, 6, {3, 2, 2, 2, 1, 1, 1, 1, 1, 0}},
    {7, 7, {3, 3, 2, 2, 0, 0, 0, 0, 1, 1}}, {8, 9, {2, 3, 2, 3, 1, 0, 0, 2, 0, 0}},
    {9, 9, {3, 3, 2, 2, 2, 2, 2, 2, 1, 0}}, {6, 5, {2, 2, 1, 1, 0, 1, 1, 0, 0, 1}},
    {10, 7, {3, 3, 3, 2, 1, 1, 1, 1, 1, 1}},
};

static NnPoolShape pool_ex_shape(const PoolExCase *k, int planes)
{
    const NnPoolSpec *p = &k->p;
    return (NnPoolShape){planes, k->h, k->w, p->kh, p->kw, p->stride_h, p->stride_w, p->pad_t, p->pad_l, p->pad_b,
                         p->pad_r, nn_pool_out_size(k->h, p->kh, p->stride_h, p->pad_t, p->pad_b, p->ceil_mode),
                         nn_pool_out_size(k->w, p->kw, p->stride_w, p->pad_l, p->pad_r, p->ceil_mode),
                         p->count_include_pad};
}

/* F.avg_pool2d / F.max_pool2d of x = 1..30 as 5x6, kernel (3, 2), stride 2, padding 1, ceil_mode = True, printed by
 * PyTorch 1.13: count_include_pad True, then False, then the max; then kernel 3, stride 2, no padding, ceil */
static void test_pool_ex_pytorch_values(void)
{
    static const float inc[12] = {4.0f / 3, 11.0f / 3, 5, 3, 6.5f, 14.5f, 16.5f, 9, 22.0f / 3, 47.0f / 3, 17, 9};
    static const float exc[12] = {4, 5.5f, 7.5f, 9, 13, 14.5f, 16.5f, 18, 22, 23.5f, 25.5f, 27};
    static const float max[12] = {7, 9, 11, 12, 19, 21, 23, 24, 25, 27, 29, 30};
    static const float k3[6] = {8, 10, 11.5f, 20, 22, 23.5f};
    float x[30], y[12];
    int32_t arg[12];
    for (int i = 0; i < 30; i++) x[i] = (float)(i + 1);
    NnPoolShape s = pool_ex_shape(&pool_cases[0], 1);
    CHECK(s.ho == 3 && s.wo == 4);
    nn_avgpool_ex_forward(y, x, &s);
    check_close("avg ceil count_include_pad", "values", y, inc, 12, 1e-6);
    s.count_include_pad = 0;
    nn_avgpool_ex_forward(y, x, &s);
    check_close("avg ceil exclude pad", "values", y, exc, 12, 1e-6);
    nn_maxpool_ex_forward(y, arg, x, &s);
    check_close("max ceil", "values", y, max, 12, 0);
    const PoolExCase k = {5, 6, {3, 3, 2, 2, 0, 0, 0, 0, 1, 1}};
    s = pool_ex_shape(&k, 1);
    CHECK(s.ho == 2 && s.wo == 3);
    nn_avgpool_ex_forward(y, x, &s);
    check_close("avg k3 ceil", "values", y, k3, 6, 1e-6);
    /* ceil_mode's rule: 5 rows, window 2, stride 2, pad 1: a third window would start in the bottom padding */
    CHECK(nn_pool_out_size(5, 2, 2, 1, 1, 1) == 3 && nn_pool_out_size(4, 2, 2, 1, 1, 1) == 3 &&
          nn_pool_out_size(4, 2, 2, 0, 0, 1) == 2 && nn_pool_out_size(5, 2, 2, 0, 0, 1) == 3);
}

static void test_pool_ex_matches_ref(void)
{
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++) {
        const PoolExCase *k = &pool_cases[i];
        const NnPoolShape s = pool_ex_shape(k, 6);
        char label[64];
        snprintf(label, sizeof label, "pool_ex_%zu", i);
        const int64_t nx = (int64_t)s.planes * s.h * s.w, ny = (int64_t)s.planes * s.ho * s.wo;
        FhRng rng = rng_for(label, 0);
        float *x = falloc(nx), *y = falloc(ny), *yr = falloc(ny), *dy = falloc(ny), *dx = falloc(nx),
              *dxr = falloc(nx);
        int32_t *a = calloc((size_t)ny, sizeof *a), *ar = calloc((size_t)ny, sizeof *ar);
        fill_normal(&rng, x, nx, 1.0);
        fill_normal(&rng, dy, ny, 1.0);
        nn_maxpool_ex_forward(y, a, x, &s);
        nn_maxpool_ex_forward_ref(yr, ar, x, &s);
        CHECK_MSG(memcmp(y, yr, sizeof(float) * (size_t)ny) == 0 && memcmp(a, ar, sizeof(int32_t) * (size_t)ny) == 0,
                  "%s: max pool differs from the reference", label);
        nn_avgpool_ex_forward(y, x, &s);
        nn_avgpool_ex_forward_ref(yr, x, &s);
        check_close(label, "avg forward", y, yr, ny, 1e-6);
        nn_avgpool_ex_backward(dx, dy, &s);
        nn_avgpool_ex_backward_ref(dxr, dy, &s);
        check_close(label, "avg backward", dx, dxr, nx, 1e-6);
        FREE_ALL(x, y, yr, dy, dx, dxr, a, ar);
    }
}

static int build_pool_ex(NnModel *m, int x, const void *arg)
{
    const PoolExCase *k = arg;
    return (k->h & 1) ? nn_maxpool_ex(m, x, &k->p) : nn_avgpool_ex(m, x, &k->p);
}

static void test_grad_pool_ex(void)
{
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++) {
        for (int max = 0; max < 2; max++) {
            PoolExCase k = pool_cases[i];
            k.h += (k.h & 1) != max; /* odd heights build a max pool */
            char label[64];
            snprintf(label, sizeof label, "%s_pool_ex_%zu", max ? "max" : "avg", i);
            GradCase c = {.label = label, .in = {2, k.h, k.w}, .batch = 2, .build = build_pool_ex, .arg = &k,
                          .training = 1, .x_kind = max ? X_DISTINCT : X_NORMAL};
            grad_check(&c);
        }
    }
}

/* the square calls through the general builder: the same layer fields as before, so the square kernels run */
static void test_pool_square_unchanged(void)
{
    NnModel m;
    CHECK_OK(nn_model_init(&m, "square", (NnShape){2, 9, 9}, 1));
    int p = nn_maxpool(&m, m.input, 3, 2, 1);
    CHECK(p > 0 && m.layers[0].k == 3 && m.layers[0].stride == 2 && m.layers[0].pad == 1 &&
          m.tensors[p].shape.h == 5 && m.layers[0].count_include_pad && !m.layers[0].ceil_mode);
    CHECK(nn_maxpool(&m, p, 2, 2, 2) < 0); /* the square call's own rule: pad at most half the kernel */
    CHECK_MSG_HAS("at most half");
    nn_model_free(&m);
    fh_error_clear();
    const NnPoolSpec wide = {3, 3, 1, 1, 3, 0, 0, 0, 0, 1}; /* a window of padding alone */
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 9, 9}, 1));
    CHECK(nn_avgpool_ex(&m, m.input, &wide) < 0);
    CHECK_MSG_HAS("smaller than the window");
    nn_model_free(&m);
    fh_error_clear();
}

/* ============================== activations ============================== */

static const NnActSpec act_specs[] = {
    {NN_ACT_LEAKY_RELU, 0.01f, 0}, {NN_ACT_LEAKY_RELU, 0.2f, 0},   {NN_ACT_CLIP, -0.5f, 1.0f},
    {NN_ACT_CLIP, 0.0f, 6.0f},     {NN_ACT_CLIP, -INFINITY, 0.5f}, {NN_ACT_SIGMOID, 0, 0},
    {NN_ACT_HARDSIGMOID, 0.2f, 0.5f}, {NN_ACT_HARDSIGMOID, 1.0f / 6, 0.5f}, {NN_ACT_HARDSWISH, 0, 0},
    {NN_ACT_SILU, 0, 0},           {NN_ACT_TANH, 0, 0},
};
#define N_ACT_SPECS (sizeof act_specs / sizeof act_specs[0])

/* the kinks of an activation, for keeping finite differences off them */
static int act_kinks(NnActSpec s, double *k)
{
    switch (s.act) {
    case NN_ACT_LEAKY_RELU: k[0] = 0; return 1;
    case NN_ACT_CLIP: k[0] = s.a; k[1] = s.b; return 2;
    case NN_ACT_HARDSIGMOID: k[0] = -s.b / s.a; k[1] = (1 - s.b) / s.a; return 2;
    case NN_ACT_HARDSWISH: k[0] = -3; k[1] = 3; return 2;
    default: return 0;
    }
}

/* the kernels against the definitions in double, and element by element against central differences */
static void test_act_ex_matches_ref(void)
{
    enum { N = 4096 };
    float *x = falloc(N), *y = falloc(N), *yr = falloc(N), *dy = falloc(N), *dx = falloc(N), *dxr = falloc(N);
    for (size_t i = 0; i < N_ACT_SPECS; i++) {
        const NnActSpec s = act_specs[i];
        char label[48];
        snprintf(label, sizeof label, "act %d (%g, %g)", (int)s.act, (double)s.a, (double)s.b);
        FhRng rng = rng_for(label, 0);
        fill_uniform(&rng, x, N, -8.0, 8.0);
        fill_normal(&rng, dy, N, 1.0);
        nn_act_ex_forward(y, NULL, x, N, s, NULL);
        nn_act_ex_forward_ref(yr, x, N, s);
        check_close(label, "forward", y, yr, N, 2e-6);
        memset(dx, 0, sizeof(float) * N);
        memset(dxr, 0, sizeof(float) * N);
        nn_act_ex_backward(dx, dy, x, N, s, NULL);
        nn_act_ex_backward_ref(dxr, dy, x, N, s);
        check_close(label, "backward", dx, dxr, N, 2e-6);
        double kinks[2];
        const int n_kinks = act_kinks(s, kinks);
        int tested = 0;
        for (int j = 0; j < N; j++) {
            int near = 0;
            for (int q = 0; q < n_kinks; q++) near |= fabs(x[j] - kinks[q]) < 1e-2;
            if (near) continue;
            const float h = 1e-3f, xp = x[j] + h, xm = x[j] - h;
            float yp, ym, g = 0.0f, one = 1.0f;
            nn_act_ex_forward(&yp, NULL, &xp, 1, s, NULL);
            nn_act_ex_forward(&ym, NULL, &xm, 1, s, NULL);
            nn_act_ex_backward(&g, &one, &x[j], 1, s, NULL);
            const double fd = ((double)yp - ym) / ((double)xp - xm);
            if (fabs(fd - g) > 2e-3 + 1e-2 * fabs(g)) {
                CHECK_MSG(0, "%s: at x = %g slope %g, finite difference %g", label, (double)x[j], (double)g, fd);
                break;
            }
            tested++;
        }
        CHECK(tested > N / 2);
    }
    FREE_ALL(x, y, yr, dy, dx, dxr);
}

/* a recorded pattern replayed at other inputs keeps every value on its recorded piece */
static void test_act_ex_patterns(void)
{
    enum { N = 2048 };
    float *x = falloc(N), *x2 = falloc(N), *y = falloc(N), *y2 = falloc(N), *dx = falloc(N), *one = falloc(N);
    uint8_t *pat = calloc(N, 1);
    for (int i = 0; i < N; i++) one[i] = 1.0f;
    for (size_t i = 0; i < N_ACT_SPECS; i++) {
        const NnActSpec s = act_specs[i];
        char label[48];
        snprintf(label, sizeof label, "pattern %d (%g, %g)", (int)s.act, (double)s.a, (double)s.b);
        FhRng rng = rng_for(label, 0);
        fill_uniform(&rng, x, N, -8.0, 8.0);
        nn_act_ex_forward(y, pat, x, N, s, NULL);
        nn_act_ex_forward(y2, NULL, x, N, s, pat);
        CHECK_MSG(memcmp(y, y2, sizeof(float) * N) == 0, "%s: replay at the recorded point differs", label);
        nn_act_ex_forward(y2, NULL, x, N, s, NULL); /* the branch-free training loops: the same bits */
        CHECK_MSG(memcmp(y, y2, sizeof(float) * N) == 0, "%s: the pass without patterns differs", label);
        fill_normal(&rng, x2, N, 1.0);
        memset(dx, 0, sizeof(float) * N);
        memset(y2, 0, sizeof(float) * N);
        nn_act_ex_backward(dx, x2, x, N, s, NULL);
        nn_act_ex_backward(y2, x2, x, N, s, pat);
        CHECK_MSG(memcmp(dx, y2, sizeof(float) * N) == 0, "%s: backward without patterns differs", label);
        for (int j = 0; j < N; j++) x2[j] = -x[j]; /* most values change piece */
        nn_act_ex_forward(y2, NULL, x2, N, s, pat);
        memset(dx, 0, sizeof(float) * N);
        nn_act_ex_backward(dx, one, x2, N, s, pat);
        int bad = 0, piecewise = nn_act_piecewise(s.act);
        for (int j = 0; j < N && !bad; j++) {
            /* the recorded piece's formula at x2 */
            const double v = x2[j];
            double want, slope;
            switch (pat[j] * 16 + (int)s.act) {
            default:
                want = NAN, slope = NAN;
                if (!piecewise) { /* smooth: replay is the function itself */
                    nn_act_ex_forward_ref(&y[j], &x2[j], 1, s);
                    want = y[j];
                    float g = 0.0f;
                    nn_act_ex_backward_ref(&g, &one[j], &x2[j], 1, s);
                    slope = g;
                } else if (pat[j] == 1) {
                    want = s.act == NN_ACT_HARDSIGMOID ? s.a * v + s.b : s.act == NN_ACT_HARDSWISH ? v * (v + 3) / 6 : v;
                    slope = s.act == NN_ACT_HARDSIGMOID ? s.a : s.act == NN_ACT_HARDSWISH ? v / 3 + 0.5 : 1;
                } else if (pat[j] == 0) {
                    want = s.act == NN_ACT_LEAKY_RELU ? s.a * v : s.act == NN_ACT_CLIP ? s.a : 0;
                    slope = s.act == NN_ACT_LEAKY_RELU ? s.a : 0;
                } else {
                    want = s.act == NN_ACT_CLIP ? s.b : s.act == NN_ACT_HARDSIGMOID ? 1 : v;
                    slope = s.act == NN_ACT_HARDSWISH ? 1 : 0;
                }
            }
            bad = fabs(y2[j] - want) > 1e-5 * (1 + fabs(want)) || fabs(dx[j] - slope) > 1e-5 * (1 + fabs(slope));
            if (bad)
                CHECK_MSG(0, "%s: x %g piece %d: y %g (want %g), slope %g (want %g)", label, v, pat[j],
                          (double)y2[j], want, (double)dx[j], slope);
        }
    }
    FREE_ALL(x, x2, y, y2, dx, one, pat);
}

static int build_act_ex(NnModel *m, int x, const void *arg)
{
    /* smooth ones after a conv, so that the gradient flows into parameters too; piecewise ones on the input,
     * whose values the check draws once (a conv's outputs move with every weight step and may cross a kink) */
    const NnActSpec *s = arg;
    int h = nn_act_piecewise(s->act) ? x : nn_conv2d(m, x, 3, 3, 1, 1, 1, 1, NN_ACT_NONE);
    return nn_act_ex(m, h, *s);
}

static void test_grad_act_ex(void)
{
    for (size_t i = 0; i < N_ACT_SPECS; i++) {
        char label[48];
        snprintf(label, sizeof label, "act_ex_%zu", i);
        /* scale 3: the inputs reach every piece of HardSwish and HardSigmoid */
        GradCase c = {.label = label, .in = {2, 5, 5}, .batch = 2, .build = build_act_ex, .arg = &act_specs[i],
                      .training = 1, .x_scale = 3.0};
        grad_check(&c);
    }
}

static void test_bad_act_ex(void)
{
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){2, 4, 4}, 1));
    CHECK(nn_act_ex(&m, m.input, (NnActSpec){NN_ACT_CLIP, 1.0f, 0.0f}) < 0);
    CHECK_MSG_HAS("min <= max");
    nn_model_free(&m);
    fh_error_clear();
    CHECK_OK(nn_model_init(&m, "relu", (NnShape){2, 4, 4}, 1));
    CHECK(nn_act_ex(&m, m.input, (NnActSpec){NN_ACT_RELU6, 0, 0}) > 0 && m.layers[0].act == NN_ACT_RELU6);
    nn_model_free(&m);
}

/* ============================== main ============================== */

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    layer_tests_init();

    RUN(test_conv_ex_blas_matches_ref);
    RUN(test_conv_ex_onednn_matches_ref);
    RUN(test_conv_ex_square_same_bits);
    RUN(test_grad_conv_ex);
    RUN(test_bad_conv_ex);
    RUN(test_pool_ex_pytorch_values);
    RUN(test_pool_ex_matches_ref);
    RUN(test_grad_pool_ex);
    RUN(test_pool_square_unchanged);
    RUN(test_act_ex_matches_ref);
    RUN(test_act_ex_patterns);
    RUN(test_grad_act_ex);
    RUN(test_bad_act_ex);
    return test_summary();
}
