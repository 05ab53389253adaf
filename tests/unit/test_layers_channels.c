/* Channel arithmetic of the engine (src/nn): element-wise and channel-broadcast products (squeeze-and-excitation),
 * channel-broadcast adds, concatenation of n inputs (an input twice, the model's input among them), channel
 * slices and the channel shuffle: their forward values, the kernels against the naive references, finite
 * differences in graphs, the activation memory plan (planned buffers give the bits of unshared ones), branch
 * patterns through the new layers, and oneDNN's layouts around them (the same numbers as blas, within rounding).
 * Run: make build/tests/test_layers_channels && build/tests/test_layers_channels [test_name] */
#include "test.h"

#include "layer_check.h"

/* ============================== graphs ============================== */

/* squeeze-and-excitation: h * sigmoid(fc(relu(fc(gap(h))))), the scale C x 1 x 1 */
static int build_se(NnModel *m, int x, const void *arg)
{
    (void)arg;
    int h = nn_conv2d(m, x, 6, 3, 1, 1, 1, 1, NN_ACT_NONE);
    int s = nn_linear(m, nn_gap(m, h), 3, 1, NN_ACT_NONE);
    s = nn_act_ex(m, nn_linear(m, s, 6, 1, NN_ACT_NONE), (NnActSpec){NN_ACT_SIGMOID, 0, 0});
    return nn_mul(m, h, s);
}

/* a product of two same-shape branches, and of a tensor with itself */
static int build_mul_same(NnModel *m, int x, const void *arg)
{
    (void)arg;
    int a = nn_conv2d(m, x, 3, 3, 1, 1, 1, 1, NN_ACT_NONE);
    int b = nn_conv2d(m, x, 3, 1, 1, 0, 1, 1, NN_ACT_NONE);
    return nn_mul(m, nn_mul(m, a, b), a);
}

/* a broadcast add of per-channel values computed from the input, and of the input's own mean */
static int build_add_bcast(NnModel *m, int x, const void *arg)
{
    (void)arg;
    int h = nn_conv2d(m, x, 3, 3, 1, 1, 1, 1, NN_ACT_NONE);
    int b = nn_gap(m, nn_conv2d(m, x, 3, 3, 2, 1, 1, 0, NN_ACT_NONE));
    return nn_add(m, nn_add(m, h, b, NN_ACT_NONE), nn_gap(m, h), NN_ACT_NONE);
}

/* DenseNet's pattern: each conv reads the concatenation of everything before it; the input and a tensor twice */
static int build_dense(NnModel *m, int x, const void *arg)
{
    (void)arg;
    int a = nn_conv2d(m, x, 3, 3, 1, 1, 1, 1, NN_ACT_NONE);
    int c1 = nn_concat(m, (int[]){x, a}, 2);
    int b = nn_conv2d(m, c1, 2, 3, 1, 1, 1, 1, NN_ACT_NONE);
    int c2 = nn_concat(m, (int[]){x, a, b, a}, 4);
    return nn_conv2d(m, c2, 4, 1, 1, 0, 1, 1, NN_ACT_NONE);
}

/* a channel split into two branches put back in the other order, then a shuffle between grouped convs */
static int build_split_shuffle(NnModel *m, int x, const void *arg)
{
    (void)arg;
    int h = nn_conv2d(m, x, 6, 3, 1, 1, 1, 1, NN_ACT_NONE);
    int lo = nn_slice_channels(m, h, 0, 2), hi = nn_slice_channels(m, h, 2, 6);
    int c = nn_concat(m, (int[]){nn_conv2d(m, hi, 4, 1, 1, 0, 1, 1, NN_ACT_NONE), lo}, 2);
    int s = nn_channel_shuffle(m, nn_conv2d(m, c, 6, 1, 1, 0, 3, 1, NN_ACT_NONE), 3);
    return nn_conv2d(m, s, 3, 1, 1, 0, 3, 1, NN_ACT_NONE);
}

/* every new layer kind with piecewise pieces: for the patterns and oneDNN's layouts */
static int build_mixed(NnModel *m, int x, const void *arg)
{
    (void)arg;
    int h = nn_conv2d(m, x, 16, 3, 1, 1, 1, 0, NN_ACT_NONE);
    h = nn_batchnorm(m, h, NN_ACT_NONE);
    h = nn_act_ex(m, h, (NnActSpec){NN_ACT_HARDSWISH, 0, 0});
    int s = nn_act_ex(m, nn_linear(m, nn_gap(m, h), 16, 1, NN_ACT_NONE), (NnActSpec){NN_ACT_HARDSIGMOID, 1.0f / 6, 0.5f});
    h = nn_mul(m, h, s);
    const NnConvSpec dil = {3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 16, 0};
    int d = nn_conv2d_ex(m, h, 16, &dil, NN_ACT_NONE);
    h = nn_add(m, d, h, NN_ACT_NONE);
    h = nn_act_ex(m, h, (NnActSpec){NN_ACT_LEAKY_RELU, 0.1f, 0});
    const NnPoolSpec p = {3, 3, 2, 2, 1, 1, 1, 1, 1, 0};
    int mp = nn_maxpool_ex(m, h, &p);
    int ap = nn_avgpool_ex(m, h, &p);
    h = nn_concat(m, (int[]){mp, ap, mp}, 3);
    h = nn_channel_shuffle(m, nn_slice_channels(m, h, 8, 40), 4);
    h = nn_conv2d(m, h, 16, 3, 1, 1, 1, 1, NN_ACT_RELU);
    return nn_linear(m, nn_flatten(m, nn_gap(m, h)), 5, 1, NN_ACT_NONE);
}

static void test_grad_graphs(void)
{
    struct {
        const char *label;
        int (*build)(NnModel *, int, const void *);
    } cases[] = {{"se", build_se},           {"mul_same", build_mul_same},           {"add_bcast", build_add_bcast},
                 {"dense", build_dense},     {"split_shuffle", build_split_shuffle}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        GradCase c = {.label = cases[i].label, .in = {3, 5, 4}, .batch = 2, .build = cases[i].build, .training = 1};
        grad_check(&c);
    }
}

/* ============================== forward values and kernels ============================== */

static void test_channel_values(void)
{
    enum { B = 2, C = 6, HW = 3 };
    float x[B * C * HW], y[B * C * HW], dx[B * C * HW];
    for (int i = 0; i < B * C * HW; i++) x[i] = (float)i;
    /* shuffle of 3 groups of 2: output channels take input channels 0 2 4 1 3 5 */
    static const int perm[C] = {0, 2, 4, 1, 3, 5};
    nn_shuffle_forward(y, x, B, C, 3, HW);
    int ok = 1;
    for (int n = 0; n < B; n++)
        for (int c = 0; c < C; c++)
            for (int j = 0; j < HW; j++) ok &= y[(n * C + c) * HW + j] == x[(n * C + perm[c]) * HW + j];
    CHECK_MSG(ok, "shuffle forward");
    memset(dx, 0, sizeof dx);
    nn_shuffle_backward(dx, y, B, C, 3, HW); /* the inverse permutation: back to x */
    CHECK(memcmp(dx, x, sizeof x) == 0);
    /* slice channels [2, 5) of x, then put them back at channel 1 of a 4-channel tensor */
    float s[B * 3 * HW], z[B * 4 * HW];
    nn_channels_copy(s, 3, 0, x, C, 2, 3, B, HW, 0);
    ok = 1;
    for (int n = 0; n < B; n++)
        for (int i = 0; i < 3 * HW; i++) ok &= s[n * 3 * HW + i] == x[(n * C + 2) * HW + i];
    CHECK_MSG(ok, "slice");
    for (int i = 0; i < B * 4 * HW; i++) z[i] = 1.0f;
    nn_channels_copy(z, 4, 1, s, 3, 0, 3, B, HW, 1);
    CHECK(z[0] == 1.0f && z[HW] == 1.0f + x[2 * HW] && z[4 * HW + HW + 2] == 1.0f + x[(C + 2) * HW + 2]);
}

static void test_mul_add_kernels(void)
{
    enum { B = 3, C = 5, HW = 7 };
    const int64_t n = B * C * HW;
    FhRng rng = rng_for("mul_add", 0);
    float *a = falloc(n), *b = falloc(n), *dy = falloc(n), *y = falloc(n), *yr = falloc(n);
    float *da = falloc(n), *db = falloc(n), *dar = falloc(n), *dbr = falloc(n);
    fill_normal(&rng, a, n, 1.0);
    fill_normal(&rng, b, n, 1.0);
    fill_normal(&rng, dy, n, 1.0);
    for (int bcast = 0; bcast < 2; bcast++) {
        const int64_t bhw = bcast ? 1 : HW, nb = B * C * bhw;
        const char *label = bcast ? "mul broadcast" : "mul";
        nn_mul_forward(y, a, b, B, C, HW, bhw);
        nn_mul_forward_ref(yr, a, b, B, C, HW, bhw);
        check_close(label, "forward", y, yr, n, 0);
        memset(da, 0, sizeof(float) * n), memset(db, 0, sizeof(float) * n);
        memset(dar, 0, sizeof(float) * n), memset(dbr, 0, sizeof(float) * n);
        nn_mul_backward(da, db, dy, a, b, B, C, HW, bhw);
        nn_mul_backward_ref(dar, dbr, dy, a, b, B, C, HW, bhw);
        check_close(label, "da", da, dar, n, 1e-6);
        check_close(label, "db", db, dbr, nb, 1e-6);
    }
    /* broadcast add: y = a + b[c]; db = sums of dy over each plane */
    nn_add_bcast_forward(y, a, b, B, C, HW);
    memset(da, 0, sizeof(float) * n), memset(db, 0, sizeof(float) * n);
    nn_add_bcast_backward(da, db, dy, B, C, HW);
    int ok = 1;
    for (int p = 0; p < B * C; p++) {
        double s = 0.0;
        for (int j = 0; j < HW; j++) {
            ok &= y[p * HW + j] == a[p * HW + j] + b[p] && da[p * HW + j] == dy[p * HW + j];
            s += dy[p * HW + j];
        }
        ok &= fabs(db[p] - s) <= 1e-5 * (1 + fabs(s));
    }
    CHECK_MSG(ok, "broadcast add");
    float *bufs[] = {a, b, dy, y, yr, da, db, dar, dbr};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

static void test_bad_channel_ops(void)
{
    NnModel m;
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){4, 5, 5}, 1));
    int g = nn_gap(&m, m.input);
    int p = nn_avgpool(&m, m.input, 2, 2, 0);
    CHECK(nn_mul(&m, g, m.input) < 0); /* the broadcast operand comes second */
    CHECK_MSG_HAS("4x1x1");
    nn_model_free(&m);
    fh_error_clear();
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){4, 5, 5}, 1));
    p = nn_avgpool(&m, m.input, 2, 2, 0);
    CHECK(nn_concat(&m, (int[]){m.input, p}, 2) < 0);
    CHECK_MSG_HAS("spatial sizes differ");
    nn_model_free(&m);
    fh_error_clear();
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){4, 5, 5}, 1));
    CHECK(nn_slice_channels(&m, m.input, 3, 3) < 0);
    CHECK_MSG_HAS("[3, 3)");
    nn_model_free(&m);
    fh_error_clear();
    CHECK_OK(nn_model_init(&m, "bad", (NnShape){4, 5, 5}, 1));
    CHECK(nn_channel_shuffle(&m, m.input, 3) < 0);
    CHECK_MSG_HAS("divisible");
    nn_model_free(&m);
    fh_error_clear();
}

/* ============================== the model's machinery ============================== */

static int build_model(NnModel *m, int (*build)(NnModel *, int, const void *), NnShape in, int batch,
                       NnBackend backend, int no_reuse)
{
    CHECK_OK(nn_model_init(m, "mixed", in, batch));
    m->backend = backend;
    m->no_activation_reuse = no_reuse;
    int out = build(m, m->input, NULL);
    int st = nn_model_finalize(m, out, out, 5);
    CHECK_OK(st);
    if (st == FH_OK) nn_model_init_params(m, SEED);
    return st;
}

/* one training step of two models with the same state: logits, gradients and the input gradient */
static void step_both(NnModel *ms[2], const float *x, int batch, const float *dl)
{
    for (int k = 0; k < 2; k++) {
        ms[k]->need_input_grad = 1;
        nn_model_zero_grad(ms[k]);
        CHECK_OK(nn_model_forward(ms[k], x, batch));
        nn_model_backward(ms[k], dl, NULL);
    }
}

#define MIXED_BATCH 3
#define MIXED_X ((int64_t)MIXED_BATCH * 3 * 9 * 9)

/* two build_mixed models with the same parameters (backend and no_activation_reuse of each), an input and a
 * logits gradient; the input to free, NULL (both models freed) after a failure */
static float *mixed_pair(NnModel ms[2], const NnBackend backend[2], const int no_reuse[2], const char *label,
                         float dl[MIXED_BATCH * 5])
{
    if (build_model(&ms[0], build_mixed, (NnShape){3, 9, 9}, MIXED_BATCH, backend[0], no_reuse[0]) != FH_OK)
        return NULL;
    if (build_model(&ms[1], build_mixed, (NnShape){3, 9, 9}, MIXED_BATCH, backend[1], no_reuse[1]) != FH_OK) {
        nn_model_free(&ms[0]);
        return NULL;
    }
    FhRng rng = rng_for(label, 0);
    float *x = falloc(MIXED_X);
    fill_normal(&rng, x, MIXED_X, 1.0);
    fill_uniform(&rng, dl, MIXED_BATCH * 5, -1, 1);
    return x;
}

/* the planned buffers (concat inputs live until the concat, the mul's and activations' inputs kept for the
 * backward) give the bits of a buffer per tensor, twice (dirty buffers), and use less memory */
static void test_activation_plan(void)
{
    NnModel pair[2];
    float dl[MIXED_BATCH * 5], *x = mixed_pair(pair, (const NnBackend[]){NN_BACKEND_BLAS, NN_BACKEND_BLAS},
                                               (const int[]){0, 1}, "plan", dl);
    if (!x) return;
    NnModel *planned = &pair[0], *plain = &pair[1], *ms[2] = {planned, plain};
    for (int rep = 0; rep < 2; rep++) {
        step_both(ms, x, MIXED_BATCH, dl);
        CHECK(memcmp(nn_model_logits(planned), nn_model_logits(plain), sizeof dl) == 0);
        CHECK(memcmp(planned->grad, plain->grad, sizeof(float) * (size_t)planned->n_state) == 0);
        CHECK(memcmp(planned->tensors[0].grad, plain->tensors[0].grad, sizeof(float) * (size_t)MIXED_X) == 0);
        CHECK(memcmp(planned->state, plain->state, sizeof(float) * (size_t)planned->n_state) == 0);
    }
    CHECK(nn_model_activation_bytes(planned, MIXED_BATCH) < nn_model_activation_bytes(plain, MIXED_BATCH));
    CHECK(nn_model_flops_forward(planned) > 0);
    nn_model_free(planned);
    nn_model_free(plain);
    free(x);
}

/* eval mode: a pattern recorded and replayed at the same weights gives the plain pass's bits */
static void test_patterns_replay(void)
{
    const NnShape in = {3, 9, 9};
    const int batch = 2;
    NnModel m;
    if (build_model(&m, build_mixed, in, batch, NN_BACKEND_BLAS, 0) != FH_OK) return;
    FhRng rng = rng_for("patterns", 0);
    const int64_t nx = (int64_t)batch * 3 * 81;
    float *x = falloc(nx), dl[2 * 5], logits[2 * 5];
    fill_normal(&rng, x, nx, 1.0);
    fill_uniform(&rng, dl, 10, -1, 1);
    nn_model_set_training(&m, 0);
    nn_model_zero_grad(&m);
    CHECK_OK(nn_model_forward(&m, x, batch));
    memcpy(logits, nn_model_logits(&m), sizeof logits);
    nn_model_backward(&m, dl, NULL);
    float *g = fdup(m.grad, m.n_state);
    CHECK_OK(nn_model_pattern_alloc(&m));
    m.pattern = NN_PATTERN_RECORD;
    CHECK_OK(nn_model_forward(&m, x, batch));
    CHECK(memcmp(logits, nn_model_logits(&m), sizeof logits) == 0);
    m.pattern = NN_PATTERN_REPLAY;
    nn_model_zero_grad(&m);
    CHECK_OK(nn_model_forward(&m, x, batch));
    CHECK_MSG(memcmp(logits, nn_model_logits(&m), sizeof logits) == 0, "replayed logits differ");
    nn_model_backward(&m, dl, NULL);
    CHECK_MSG(memcmp(g, m.grad, sizeof(float) * (size_t)m.n_state) == 0, "replayed gradients differ");
    m.pattern = NN_PATTERN_OFF;
    nn_model_free(&m);
    free(x);
    free(g);
}

/* under oneDNN the convs run blocked, and the new layers read NCHW (or keep the blocks: element-wise activations,
 * a same-shape add): the numbers of blas within rounding */
static void test_onednn_layouts(void)
{
    NnModel pair[2];
    float dl[MIXED_BATCH * 5], *x = mixed_pair(pair, (const NnBackend[]){NN_BACKEND_ONEDNN, NN_BACKEND_BLAS},
                                               (const int[]){0, 0}, "onednn", dl);
    if (!x) return;
    NnModel *on = &pair[0], *bl = &pair[1], *ms[2] = {on, bl};
    for (int i = 0; i < on->n_layers; i++) {
        const NnLayer *l = &on->layers[i];
        const int nchw_only = l->type == NN_OP_MUL || l->type == NN_OP_CONCAT || l->type == NN_OP_SLICE ||
                              l->type == NN_OP_SHUFFLE || l->type == NN_OP_AVGPOOL ||
                              (l->type == NN_OP_MAXPOOL && l->ceil_mode);
        for (int k = 0; nchw_only && k < (l->ins ? l->n_ins : 1 + (l->in2 >= 0)); k++) {
            const int t = l->ins ? l->ins[k] : k ? l->in2 : l->in;
            CHECK_MSG(on->tensors[t].block == 0, "%s reads a blocked tensor", l->name);
        }
    }
    int blocked = 0;
    for (int t = 0; t < on->n_tensors; t++) blocked += on->tensors[t].block != 0;
    CHECK_MSG(blocked > 0, "no tensor runs blocked");
    step_both(ms, x, MIXED_BATCH, dl);
    check_close("onednn mixed", "logits", nn_model_logits(on), nn_model_logits(bl), MIXED_BATCH * 5, 1e-4);
    check_close("onednn mixed", "gradient", on->grad, bl->grad, on->n_params, 1e-4);
    check_close("onednn mixed", "input gradient", on->tensors[0].grad, bl->tensors[0].grad, MIXED_X, 1e-4);
    nn_model_free(on);
    nn_model_free(bl);
    free(x);
}

/* ============================== main ============================== */

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    layer_tests_init();

    RUN(test_grad_graphs);
    RUN(test_channel_values);
    RUN(test_mul_add_kernels);
    RUN(test_bad_channel_ops);
    RUN(test_activation_plan);
    RUN(test_patterns_replay);
    RUN(test_onednn_layouts);
    return test_summary();
}
