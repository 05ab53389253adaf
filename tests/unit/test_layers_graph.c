/* Whole graphs (src/nn): finite-difference gradients (layer_check.h) with an extra gradient fed at the
 * features tensor and through a network of most layer kinds (train and eval), the forward values of every
 * layer kind (finite differences only test that backward matches forward), and the model-level errors
 * (class count, layers after finalize, out-of-range batches, bad model arguments).
 * Run: make build/tests/test_layers_graph && build/tests/test_layers_graph [test_name] */
#include "test.h"

#include "layer_check.h"

/* ---- multi-layer graphs ---- */

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

/* ============================== bad input ============================== */

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
    layer_tests_init();

    RUN(test_grad_features);
    RUN(test_grad_composite);
    RUN(test_forward_values);
    RUN(test_bad_finalize_and_batch);
    return test_summary();
}
