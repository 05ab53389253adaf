/* Linear, dropout, add and flatten (src/nn): finite-difference gradients (layer_check.h), residual graphs
 * in which a tensor feeds two layers, dropout masks keyed by their counters, and add's shape errors.
 * Run: make build/tests/test_layers_dense && build/tests/test_layers_dense [test_name] */
#include "test.h"

#include "layer_check.h"

/* ---- multi-layer graphs ---- */

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

/* ============================== layer gradient tests ============================== */

static void test_grad_linear(void)
{
    layer_case("linear_bias", (NnShape){2, 3, 3}, (LayerArg){.op = NN_OP_LINEAR, .cout = 5, .bias = 1});
    layer_case("linear_nobias", (NnShape){7, 1, 1}, (LayerArg){.op = NN_OP_LINEAR, .cout = 4, .bias = 0});
    layer_case("linear_batch1", (NnShape){6, 1, 1}, (LayerArg){.op = NN_OP_LINEAR, .cout = 3, .bias = 1, .batch = 1});
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

/* ============================== bad input ============================== */

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

/* ============================== main ============================== */

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    layer_tests_init();

    RUN(test_grad_linear);
    RUN(test_grad_dropout);
    RUN(test_grad_residual_add);
    RUN(test_grad_flatten);
    RUN(test_dropout_mask_counters);
    RUN(test_bad_add_shapes);
    return test_summary();
}
