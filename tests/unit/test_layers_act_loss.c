/* Activations and losses (src/nn): finite-difference gradients (layer_check.h) of ReLU and ReLU6, fused
 * into linear, conv, norm and add layers and standalone; softmax cross-entropy (per-sample losses, weights,
 * logit adjustment, large logits) and KL distillation against double-precision hand computations, and
 * nn_count_correct.
 * Run: make build/tests/test_layers_act_loss && build/tests/test_layers_act_loss [test_name] */
#include "test.h"

#include "layer_check.h"

/* ============================== layer gradient tests ============================== */

static void test_grad_fused_act(void)
{
    layer_case("linear_relu", (NnShape){6, 1, 1},
               (LayerArg){.op = NN_OP_LINEAR, .cout = 8, .bias = 1, .act = NN_ACT_RELU, .batch = 4});
    layer_case("linear_relu6", (NnShape){6, 1, 1},
               (LayerArg){.op = NN_OP_LINEAR, .cout = 8, .bias = 1, .act = NN_ACT_RELU6, .x_scale = 8, .batch = 4});
    layer_case("conv_relu", (NnShape){2, 5, 5},
               (LayerArg){.op = NN_OP_CONV2D, .cout = 3, .k = 3, .stride = 1, .pad = 1, .groups = 1, .bias = 1,
                          .act = NN_ACT_RELU});
    layer_case("conv_relu6", (NnShape){2, 5, 5},
               (LayerArg){.op = NN_OP_CONV2D, .cout = 3, .k = 3, .stride = 1, .pad = 1, .groups = 1, .bias = 1,
                          .act = NN_ACT_RELU6, .x_scale = 8});
    layer_case("bn_train_relu", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_BATCHNORM, .act = NN_ACT_RELU});
    layer_case("bn_eval_relu", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_BATCHNORM, .act = NN_ACT_RELU, .eval = 1});
    layer_case("conv_depthwise_relu6", (NnShape){3, 5, 5},
               (LayerArg){.op = NN_OP_CONV2D, .cout = 3, .k = 3, .stride = 1, .pad = 1, .groups = 3, .bias = 1,
                          .act = NN_ACT_RELU6, .x_scale = 12});
    layer_case("conv_1x1_relu", (NnShape){4, 3, 3},
               (LayerArg){.op = NN_OP_CONV2D, .cout = 3, .k = 1, .stride = 1, .groups = 1, .bias = 1,
                          .act = NN_ACT_RELU});
    layer_case("conv_groups2_relu6", (NnShape){4, 4, 4},
               (LayerArg){.op = NN_OP_CONV2D, .cout = 4, .k = 3, .stride = 1, .pad = 1, .groups = 2, .bias = 1,
                          .act = NN_ACT_RELU6, .x_scale = 8});
    layer_case("gn_relu", (NnShape){4, 3, 3}, (LayerArg){.op = NN_OP_GROUPNORM, .groups = 2, .act = NN_ACT_RELU});
    NnAct relu = NN_ACT_RELU;
    GradCase c = {.label = "residual_relu", .in = {2, 4, 4}, .batch = 2, .build = build_residual, .arg = &relu,
                  .training = 1, .guard = NN_ACT_RELU};
    grad_check(&c);
}

static void test_grad_act_standalone(void)
{
    layer_case("relu", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_ACT, .act = NN_ACT_RELU});
    layer_case("relu6", (NnShape){3, 4, 4}, (LayerArg){.op = NN_OP_ACT, .act = NN_ACT_RELU6});
}

/* ============================== losses ============================== */

typedef struct {
    const int32_t *labels;
    const float *weights, *adjust;
    const float *teacher;
    float temperature, weight;
    int kl;
    int batch, classes;
} LossArg;

static double loss_eval(const LossArg *a, const float *z, float *dz)
{
    if (a->kl) return nn_kl_distill(dz, z, a->teacher, a->temperature, a->weight, a->batch, a->classes);
    return nn_softmax_xent(dz, NULL, z, a->labels, a->weights, a->adjust, a->batch, a->classes);
}

/* finite differences of a loss along random directions of the logits */
static void loss_fd(const char *label, const LossArg *a, const float *z0, int n_dirs)
{
    int64_t n = (int64_t)a->batch * a->classes;
    float *z = fdup(z0, n), *dz = falloc(n), *scratch = falloc(n), *zp = falloc(n), *zm = falloc(n);
    loss_eval(a, z, dz);
    FhRng rng = rng_for(label, 1);
    for (int k = 0; k < n_dirs; k++) {
        double an = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double d = 2.0 * fh_rng_uniform(&rng) - 1.0;
            zp[i] = (float)(z[i] + FD_EPS * d);
            zm[i] = (float)(z[i] - FD_EPS * d);
            an += (double)dz[i] * ((double)zp[i] - (double)zm[i]);
        }
        an /= 2.0 * FD_EPS;
        double fd = (loss_eval(a, zp, scratch) - loss_eval(a, zm, scratch)) / (2.0 * FD_EPS);
        double err = fabs(an - fd), tol = FD_ATOL + FD_RTOL * fmax(fabs(an), fabs(fd));
        if (verbose) printf("\n    %-24s analytic %+.7e  fd %+.7e", label, an, fd);
        CHECK_MSG(err <= tol, "%s: analytic %.7g, finite difference %.7g", label, an, fd);
        CHECK_MSG(fmax(fabs(an), fabs(fd)) >= FD_MIN_DERIV, "%s: directional derivative %.3g too small", label, fd);
    }
    if (verbose) printf("\n  %-44s ", "");
    free(z);
    free(dz);
    free(scratch);
    free(zp);
    free(zm);
}

enum { LB = 4, LC = 5 };

static void loss_data(const char *label, float *z, int32_t *labels, float *w, float *adj)
{
    FhRng rng = rng_for(label, 0);
    fill_normal(&rng, z, LB * LC, 2.0);
    for (int i = 0; i < LB; i++) labels[i] = (int32_t)fh_rng_below(&rng, LC);
    if (w) fill_uniform(&rng, w, LB, 0.25, 2.0);
    if (adj) fill_uniform(&rng, adj, LC, -1.5, 1.5);
}

static void test_xent_grad_fd(void)
{
    float z[LB * LC], w[LB], adj[LC];
    int32_t labels[LB];
    loss_data("xent_fd", z, labels, w, adj);
    loss_fd("xent", &(LossArg){.labels = labels, .batch = LB, .classes = LC}, z, 4);
    loss_fd("xent_weights", &(LossArg){.labels = labels, .weights = w, .batch = LB, .classes = LC}, z, 4);
    loss_fd("xent_adjust", &(LossArg){.labels = labels, .adjust = adj, .batch = LB, .classes = LC}, z, 4);
    loss_fd("xent_both", &(LossArg){.labels = labels, .weights = w, .adjust = adj, .batch = LB, .classes = LC}, z,
            4);
}

/* softmax cross-entropy of one row, in double */
static double xent_row(const float *z, const float *adj, int y, int classes, double *p)
{
    double mx = -INFINITY;
    for (int k = 0; k < classes; k++) mx = fmax(mx, (double)z[k] + (adj ? adj[k] : 0.0));
    double s = 0.0;
    for (int k = 0; k < classes; k++) s += exp((double)z[k] + (adj ? adj[k] : 0.0) - mx);
    double lse = mx + log(s);
    if (p)
        for (int k = 0; k < classes; k++) p[k] = exp((double)z[k] + (adj ? adj[k] : 0.0) - lse);
    return lse - ((double)z[y] + (adj ? adj[y] : 0.0));
}

static void test_xent_per_sample_and_weights(void)
{
    float z[LB * LC], w[LB], ps[LB], ps_w[LB], dz[LB * LC] = {0}, dz1[LB * LC] = {0}, dzw[LB * LC] = {0};
    int32_t labels[LB];
    loss_data("xent_hand", z, labels, w, NULL);
    float loss = nn_softmax_xent(dz, ps, z, labels, NULL, NULL, LB, LC);
    double mean = 0.0, wsum = 0.0;
    for (int i = 0; i < LB; i++) {
        double p[LC];
        double l = xent_row(z + i * LC, NULL, labels[i], LC, p);
        CHECK_NEAR(ps[i], l, 1e-5 * (1.0 + l));
        mean += l / LB;
        wsum += w[i] * l;
        for (int k = 0; k < LC; k++) CHECK_NEAR(dz[i * LC + k], (p[k] - (k == labels[i])) / LB, 1e-6);
    }
    CHECK_NEAR(loss, mean, 1e-5 * (1.0 + mean));

    /* weights of 1 are the unweighted loss */
    const float ones[LB] = {1, 1, 1, 1};
    float loss1 = nn_softmax_xent(dz1, NULL, z, labels, ones, NULL, LB, LC);
    CHECK(loss1 == loss);
    CHECK(memcmp(dz1, dz, sizeof dz) == 0);

    /* weights w: sum(w_i l_i) / B (the batch, not the sum of weights); per_sample stays unweighted */
    float lossw = nn_softmax_xent(dzw, ps_w, z, labels, w, NULL, LB, LC);
    CHECK_NEAR(lossw, wsum / LB, 1e-5 * (1.0 + wsum));
    for (int i = 0; i < LB; i++) {
        CHECK_NEAR(ps_w[i], ps[i], 1e-7);
        for (int k = 0; k < LC; k++) CHECK_NEAR(dzw[i * LC + k], w[i] * dz[i * LC + k], 1e-6);
    }

    /* the gradient accumulates into dlogits */
    float dz2[LB * LC];
    memcpy(dz2, dz, sizeof dz2);
    nn_softmax_xent(dz2, NULL, z, labels, NULL, NULL, LB, LC);
    for (int i = 0; i < LB * LC; i++) CHECK_NEAR(dz2[i], 2.0f * dz[i], 1e-7);
}

static void test_xent_logit_adjust(void)
{
    float z[LB * LC], adj[LC], za[LB * LC], ps_a[LB], ps_b[LB], dz_a[LB * LC] = {0}, dz_b[LB * LC] = {0};
    int32_t labels[LB];
    loss_data("xent_adjust", z, labels, NULL, adj);
    for (int i = 0; i < LB; i++)
        for (int k = 0; k < LC; k++) za[i * LC + k] = z[i * LC + k] + adj[k];
    float la = nn_softmax_xent(dz_a, ps_a, z, labels, NULL, adj, LB, LC);
    float lb = nn_softmax_xent(dz_b, ps_b, za, labels, NULL, NULL, LB, LC);
    CHECK_NEAR(la, lb, 1e-6 * (1.0 + fabs(lb)));
    for (int i = 0; i < LB; i++) {
        CHECK_NEAR(ps_a[i], ps_b[i], 1e-6 * (1.0 + fabs(ps_b[i])));
        CHECK_NEAR(ps_a[i], xent_row(z + i * LC, adj, labels[i], LC, NULL), 1e-5);
    }
    CHECK(max_diff(dz_a, dz_b, LB * LC) <= 1e-7);
    /* and it is not a no-op */
    float plain = nn_softmax_xent(dz_b, NULL, z, labels, NULL, NULL, LB, LC);
    CHECK(fabs(plain - la) > 1e-3);
}

static void test_xent_large_logits(void)
{
    const float z[3 * 4] = {1e4f, -1e4f, 5e3f, 0.0f, /* */ 1e4f, 1e4f, 1e4f, 1e4f, /* */ -1e4f, -1e4f, -1e4f, -9999.0f};
    const int32_t labels[3] = {1, 2, 3};
    float dz[12] = {0}, ps[3];
    float loss = nn_softmax_xent(dz, ps, z, labels, NULL, NULL, 3, 4);
    CHECK(isfinite(loss));
    for (int i = 0; i < 12; i++) CHECK(isfinite(dz[i]));
    CHECK_NEAR(ps[0], 2e4, 1e-2);    /* lse = 1e4, minus z[1] = -1e4 */
    CHECK_NEAR(ps[1], log(4.0), 1e-6); /* all equal */
    double l2 = log(3.0 * exp(-1.0) + 1.0); /* lse - z[3] with z[3] one above the rest */
    CHECK_NEAR(ps[2], l2, 1e-5);
    CHECK_NEAR(loss, (2e4 + log(4.0) + l2) / 3.0, 1e-2);
    CHECK_NEAR(dz[0], 1.0 / 3.0, 1e-6); /* p = (1, 0, 0, 0), label 1 */
    CHECK_NEAR(dz[1], -1.0 / 3.0, 1e-6);
    CHECK_NEAR(dz[2], 0.0, 1e-7);
    float dk[12] = {0};
    float kl = nn_kl_distill(dk, z, z + 4, 2.0f, 1.0f, 2, 4);
    CHECK(isfinite(kl));
    for (int i = 0; i < 8; i++) CHECK(isfinite(dk[i]));
}

/* weight * T^2 * mean_i KL(softmax(t_i / T) || softmax(s_i / T)) and its gradient, in double */
static double kl_direct(double *grad, const float *s, const float *t, double T, double weight, int batch,
                        int classes)
{
    double total = 0.0;
    for (int i = 0; i < batch; i++) {
        double ps[16], pt[16], ss = 0.0, st = 0.0;
        for (int k = 0; k < classes; k++) {
            ps[k] = exp(s[i * classes + k] / T);
            pt[k] = exp(t[i * classes + k] / T);
            ss += ps[k];
            st += pt[k];
        }
        for (int k = 0; k < classes; k++) {
            ps[k] /= ss;
            pt[k] /= st;
            total += pt[k] * (log(pt[k]) - log(ps[k]));
            /* d/ds_k of T^2 KL = T (ps_k - pt_k) */
            grad[i * classes + k] = weight * T * (ps[k] - pt[k]) / batch;
        }
    }
    return weight * T * T * total / batch;
}

static void test_kl_distill(void)
{
    float s[LB * LC], t[LB * LC], dz[LB * LC];
    int32_t unused[LB];
    loss_data("kl_student", s, unused, NULL, NULL);
    loss_data("kl_teacher", t, unused, NULL, NULL);
    const float temps[3] = {1.0f, 2.0f, 4.0f};
    for (int ti = 0; ti < 3; ti++) {
        float T = temps[ti], wgt = 0.7f;
        char label[32];
        snprintf(label, sizeof label, "kl_T%g", (double)T);
        LossArg a = {.kl = 1, .teacher = t, .temperature = T, .weight = wgt, .batch = LB, .classes = LC};
        loss_fd(label, &a, s, 3);
        /* T^2 scaling against a direct double computation */
        double g[LB * LC];
        double want = kl_direct(g, s, t, T, wgt, LB, LC);
        memset(dz, 0, sizeof dz);
        float got = nn_kl_distill(dz, s, t, T, wgt, LB, LC);
        CHECK_MSG(fabs(got - want) <= 1e-5 * (1.0 + fabs(want)), "T = %g: %.8g vs %.8g", (double)T, (double)got, want);
        for (int i = 0; i < LB * LC; i++) CHECK_NEAR(dz[i], g[i], 1e-6);
    }
    /* identical logits: KL 0, gradient 0 */
    memset(dz, 0, sizeof dz);
    float same = nn_kl_distill(dz, s, s, 3.0f, 1.0f, LB, LC);
    CHECK_NEAR(same, 0.0, 1e-7);
    CHECK(max_abs(dz, LB * LC) <= 1e-7);
    /* the gradient accumulates and the weight scales both */
    float dz2[LB * LC] = {0}, dz3[LB * LC] = {0};
    float l1 = nn_kl_distill(dz2, s, t, 2.0f, 1.0f, LB, LC);
    float l3 = nn_kl_distill(dz3, s, t, 2.0f, 3.0f, LB, LC);
    CHECK_NEAR(l3, 3.0 * l1, 1e-5 * (1.0 + fabs(l3)));
    for (int i = 0; i < LB * LC; i++) CHECK_NEAR(dz3[i], 3.0 * dz2[i], 1e-6);
    nn_kl_distill(dz2, s, t, 2.0f, 1.0f, LB, LC);
    for (int i = 0; i < LB * LC; i++) CHECK_NEAR(dz2[i], dz3[i] * (2.0 / 3.0), 1e-6);
}

static void test_count_correct(void)
{
    const float z[4 * 3] = {0.1f, 0.9f, 0.0f, /* 1 */ 2.0f, -1.0f, 1.0f, /* 0 */
                            0.5f, 0.5f, 0.2f, /* tie: first, 0 */ -3.0f, -2.0f, -1.0f /* 2 */};
    const int32_t labels[4] = {1, 2, 0, 2};
    int32_t pred[4] = {-1, -1, -1, -1};
    CHECK(nn_count_correct(pred, z, labels, 4, 3) == 3);
    CHECK(pred[0] == 1 && pred[1] == 0 && pred[2] == 0 && pred[3] == 2);
    int32_t pred2[4] = {-1, -1, -1, -1};
    CHECK(nn_count_correct(pred2, z, NULL, 4, 3) == 0);
    CHECK(memcmp(pred, pred2, sizeof pred) == 0);
    CHECK(nn_count_correct(NULL, z, labels, 4, 3) == 3);
    CHECK(nn_count_correct(NULL, z, labels, 1, 3) == 1);
}

/* ============================== main ============================== */

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    layer_tests_init();

    RUN(test_grad_fused_act);
    RUN(test_grad_act_standalone);
    RUN(test_xent_grad_fd);
    RUN(test_xent_per_sample_and_weights);
    RUN(test_xent_logit_adjust);
    RUN(test_xent_large_logits);
    RUN(test_kl_distill);
    RUN(test_count_correct);
    return test_summary();
}
