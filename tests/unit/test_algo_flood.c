/* FLOOD's parts against (docs/methods/sam.md §13, docs/methods/baselines.md A.23): the pseudo-OOD mask marks exactly the samples
 * below the batch's lower-interpolated q-quantile, the lambda schedules and their timing, the OOD scores,
 * the ASH scores against hand-computed values and through the mask on a model, and DAC weights (alpha = 0
 * gives FedAvg's weights exactly). */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/algo/algo_internal.h"
#include "test_options.h"

enum { ASH_P = 4, ASH_B, ASH_S };

/* FLOOD's client scratch for batches of `batch` rows with `features` features, as its sizes ask for it */
static AlgoScratch flood_scratch(AlgoOptions o, int batch, int64_t features)
{
    const AlgoSetup setup = { .options = o, .batch_size = batch, .feature_size = features };
    AlgoSizes z;
    algo_sizes(o.row, &setup, &z);
    return test_scratch(z.client_scratch);
}

static void test_mask_marks_the_quantile(void)
{
    const AlgoMethod *m = algo_find("flood");
    CHECK(m && m->sample_weights);
    if (!m) return;
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, m);
    option_set(&ob, m, "flood_schedule", 6); /* constant */
    option_set(&ob, m, "flood_lambda", 7.0);
    option_set(&ob, m, "flood_score", 2); /* maxlogit: the score is the largest logit, easy to set */
    enum { B = 11, C = 3 };
    float logits[B * C], weights[B];
    /* sample i's max logit is a distinct value, in scrambled order */
    const int order[B] = { 5, 0, 9, 3, 10, 1, 7, 2, 8, 4, 6 };
    for (int i = 0; i < B; i++) {
        logits[i * C + 0] = -1.0f;
        logits[i * C + 1] = (float)order[i];
        logits[i * C + 2] = -2.0f;
    }
    const double qs[] = { 0.7, 0.5, 0.05, 0.95 };
    for (size_t t = 0; t < sizeof qs / sizeof qs[0]; t++) {
        option_set(&ob, m, "flood_q", qs[t]);
        const AlgoClientRound r = { .t = 3, .options = o };
        AlgoClientCtx c = { .round = &r, .state = { .scratch = flood_scratch(o, B, 0) } };
        AlgoBatch b = { NULL, NULL, B, C, logits, NULL, 0 };
        CHECK_OK(m->sample_weights->weigh(&c, &b, weights));
        /* threshold = the floor(q (B - 1))-th smallest score; strictly below it: weight lambda */
        const int k = (int)(qs[t] * (B - 1));
        int marked = 0;
        for (int i = 0; i < B; i++) {
            const int below = order[i] < k;
            CHECK_MSG(weights[i] == (below ? 7.0f : 1.0f), "q %.2f sample %d (rank %d): weight %g", qs[t], i, order[i],
                      weights[i]);
            marked += below;
        }
        CHECK(marked == k);
    }
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the mask of batches with many equal scores, and of batches larger than 512 rows, against a threshold taken from a
 * sorted copy (the selection that replaced the sort picks the same value) */
static void test_mask_ties_and_large_batches(void)
{
    const AlgoMethod *m = algo_find("flood");
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, m);
    option_set(&ob, m, "flood_schedule", 6); /* constant */
    option_set(&ob, m, "flood_lambda", 7.0);
    option_set(&ob, m, "flood_score", 2); /* maxlogit */
    enum { C = 2, MAX_B = 700 };
    static float logits[MAX_B * C], weights[MAX_B];
    static double sorted[MAX_B];
    const int sizes[] = { 1, 2, 16, 513, MAX_B };
    const int levels[] = { 1, 3, 50 }; /* distinct score values: ties everywhere, or few */
    for (size_t n = 0; n < sizeof sizes / sizeof sizes[0]; n++)
        for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
            const int B = sizes[n];
            for (int i = 0; i < B; i++) {
                const float v = (float)((i * 7919) % levels[l]) - 0.5f * (float)levels[l];
                logits[i * C] = v;
                logits[i * C + 1] = v - 1.0f;
                sorted[i] = v;
            }
            qsort(sorted, (size_t)B, sizeof *sorted, by_value);
            const double q = 0.7, tau = sorted[(int)(q * (B - 1))];
            option_set(&ob, m, "flood_q", q);
            const AlgoClientRound r = { .t = 3, .options = o };
            AlgoClientCtx c = { .round = &r, .state = { .scratch = flood_scratch(o, B, 0) } };
            AlgoBatch b = { NULL, NULL, B, C, logits, NULL, 0 };
            CHECK_OK(m->sample_weights->weigh(&c, &b, weights));
            int wrong = 0;
            for (int i = 0; i < B; i++) wrong += weights[i] != (logits[i * C] < tau ? 7.0f : 1.0f);
            CHECK_MSG(wrong == 0, "batch %d, %d score values: %d weights differ", B, levels[l], wrong);
        }
}

static void test_lambda_schedules(void)
{
    const AlgoMethod *m = algo_find("flood");
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, m);
    option_set(&ob, m, "flood_halt", 100);
    /* paper default: cosine, a = 200; code timing: lambda_0 = 1, lambda_t = f(min(t - 1, T_h)) */
    CHECK(algo_flood_lambda(o, 0) == 1.0);
    CHECK_NEAR(algo_flood_lambda(o, 1), 0.0, 1e-12);
    CHECK_NEAR(algo_flood_lambda(o, 51), 200.0, 1e-9);
    CHECK_NEAR(algo_flood_lambda(o, 101), 400.0, 1e-9);
    CHECK_NEAR(algo_flood_lambda(o, 5000), 400.0, 1e-9);
    /* code compat: logistic with a = 50, ending at 2a = 100, symmetric around T_h / 2 */
    option_set(&ob, m, "flood_compat", 1);
    CHECK_NEAR(algo_flood_lambda(o, 1), 0.0, 1e-9);
    CHECK_NEAR(algo_flood_lambda(o, 51), 50.0, 1e-9);
    CHECK_NEAR(algo_flood_lambda(o, 101), 100.0, 1e-9);
    /* every schedule ends at 2a; linear is linear */
    option_set(&ob, m, "flood_a", 10);
    for (int s = 1; s <= 5; s++) {
        option_set(&ob, m, "flood_schedule", s);
        CHECK_NEAR(algo_flood_lambda(o, 101), 20.0, 1e-9);
    }
    option_set(&ob, m, "flood_schedule", 2);
    CHECK_NEAR(algo_flood_lambda(o, 26), 5.0, 1e-12);
    /* start phase: lambda = 1 up to t_start, then the schedule shifted */
    option_set(&ob, m, "flood_start", 10);
    CHECK(algo_flood_lambda(o, 10) == 1.0);
    CHECK_NEAR(algo_flood_lambda(o, 36), 5.0, 1e-12);
}

static void test_scores(void)
{
    const float z[3] = { 1.0f, 3.0f, 2.0f };
    const double lse = log(exp(1.0) + exp(3.0) + exp(2.0));
    CHECK_NEAR(algo_ood_score(0, z, 3), lse, 1e-12);
    CHECK_NEAR(algo_ood_score(1, z, 3), exp(3.0 - lse), 1e-12);
    CHECK_NEAR(algo_ood_score(2, z, 3), 3.0, 0);
    double gen = 0.0;
    for (int k = 0; k < 3; k++) {
        double p = exp(z[k] - lse);
        gen += pow(p, 0.1) * pow(1 - p, 0.1);
    }
    CHECK_NEAR(algo_ood_score(3, z, 3), -gen, 1e-12);
}

static double lse2(double a, double b) { return log(exp(a) + exp(b)); }

/* ASH-P, -B, -S by hand: a = (0, 1, 2, 3, 4), p = 60: t = a sorted [floor(0.6 * 4) = 2] = 2, kept {2, 3, 4};
 * s1 = 10, s2 = 9, k = 3; W = [[.1 .2 .3 .4 .5], [.5 -.1 0 .2 -.3]], b = (.1, -.2) */
static void test_ash_scores(void)
{
    const float a[5] = { 3.0f, 0.0f, 4.0f, 1.0f, 2.0f }; /* scrambled: the percentile sorts */
    const float W[10] = { 0.4f, 0.1f, 0.5f, 0.2f, 0.3f, 0.2f, 0.5f, -0.3f, -0.1f, 0.0f }; /* columns follow a */
    const float b[2] = { 0.1f, -0.2f };
    double scratch[5];
    /* ASH-P: z = (.3*2 + .4*3 + .5*4 + .1, 0*2 + .2*3 - .3*4 - .2) = (3.9, -0.8) */
    CHECK_NEAR(algo_ash_score(ASH_P, a, 5, W, b, 2, 60.0, scratch), lse2(3.9, -0.8), 1e-6);
    /* ASH-B: kept values 10/3: z = (1.2 * 10/3 + .1, -.1 * 10/3 - .2) */
    CHECK_NEAR(algo_ash_score(ASH_B, a, 5, W, b, 2, 60.0, scratch), lse2(4.1, -1.0 / 3 - 0.2), 1e-6);
    /* ASH-S: kept values times e^(10/9): z = (3.8 f + .1, -.6 f - .2) */
    const double f = exp(10.0 / 9.0);
    CHECK_NEAR(algo_ash_score(ASH_S, a, 5, W, b, 2, 60.0, scratch), lse2(3.8 * f + 0.1, -0.6 * f - 0.2), 1e-6);
    /* p = 0 keeps everything: ASH-P is the plain energy of W a + b */
    CHECK_NEAR(algo_ash_score(ASH_P, a, 5, W, b, 2, 0.0, scratch), lse2(4.1, -0.1 + 0.6 - 1.2 - 0.2), 1e-6);
    /* p = 100 keeps the largest (4): ASH-B puts s1 = 10 there */
    CHECK_NEAR(algo_ash_score(ASH_B, a, 5, W, b, 2, 100.0, scratch), lse2(0.5 * 10 + 0.1, -0.3 * 10 - 0.2), 1e-6);
    /* an all-zero activation: s2 = 0, ASH-S scores as ASH-P (the bias alone) */
    const float zero[5] = { 0 };
    CHECK_NEAR(algo_ash_score(ASH_S, zero, 5, W, b, 2, 90.0, scratch), lse2(0.1, -0.2), 1e-7);
    CHECK_NEAR(algo_ash_score(ASH_B, zero, 5, W, b, 2, 90.0, scratch), lse2(0.1, -0.2), 1e-7);
}

/* ASH through FLOOD's mask on a real model: the scores come from the features and the model's classifier, and
 * a model without a linear classifier on its features is refused naming the key */
static void test_ash_in_the_mask(void)
{
    const AlgoMethod *m = algo_find("flood");
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, m);
    CHECK(option_value(o, "flood_ash_percentile") == 90.0);
    option_set(&ob, m, "flood_schedule", 6); /* constant */
    option_set(&ob, m, "flood_lambda", 3.0);
    option_set(&ob, m, "flood_q", 0.5);
    option_set(&ob, m, "flood_score", ASH_B);
    NnModel net;
    CHECK_OK(nn_model_init(&net, "mlp2", (NnShape){ 1, 1, 6 }, 8));
    int x = nn_flatten(&net, net.input);
    x = nn_linear(&net, x, 10, 1, NN_ACT_RELU);
    int y = nn_linear(&net, x, 3, 1, NN_ACT_NONE);
    CHECK_OK(nn_model_finalize(&net, y, x, 3));
    nn_model_init_params(&net, 3);
    float in[5 * 6];
    for (int i = 0; i < 30; i++) in[i] = (float)sin(1.7 * i);
    CHECK_OK(nn_model_forward(&net, in, 5));
    const NnLayer *cls = &net.layers[net.n_layers - 1];
    const AlgoClientRound r = { .t = 2, .options = o };
    AlgoClientCtx c = { .model = &net, .round = &r,
                        .state = { .scratch = flood_scratch(o, 5, nn_model_features_size(&net)) } };
    AlgoBatch b = { in, NULL, 5, 3, nn_model_logits(&net), nn_model_features(&net), nn_model_features_size(&net) };
    float weights[5];
    double sc[5], sorted[5], scratch[10];
    CHECK_OK(m->sample_weights->weigh(&c, &b, weights));
    for (int i = 0; i < 5; i++)
        sorted[i] = sc[i] = algo_ash_score(ASH_B, b.features + i * 10, 10, net.state + cls->w_off, net.state + cls->b_off,
                                           3, 90.0, scratch);
    for (int i = 1; i < 5; i++) /* insertion sort: the threshold is the 2nd smallest (floor(0.5 * 4)) */
        for (int j = i; j > 0 && sorted[j] < sorted[j - 1]; j--) {
            double t = sorted[j];
            sorted[j] = sorted[j - 1], sorted[j - 1] = t;
        }
    int marked = 0;
    for (int i = 0; i < 5; i++) {
        CHECK(weights[i] == (sc[i] < sorted[2] ? 3.0f : 1.0f));
        marked += weights[i] == 3.0f;
    }
    CHECK(marked == 2);
    /* the ASH score is not the energy of the unshaped logits */
    CHECK(fabs(sc[0] - algo_ood_score(0, b.logits, 3)) > 1e-6);
    /* no classifier on the features: refused */
    net.features = net.input;
    fh_error_clear();
    CHECK(m->sample_weights->weigh(&c, &b, weights) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "flood_score") != NULL);
    fh_error_clear();
    nn_model_free(&net);
}

static void test_dac_weights(void)
{
    const AlgoMethod *m = algo_find("flood");
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, m);
    double phi[3] = { 2.0, 1.0, 5.0 };
    AlgoUpload u[3] = { { 0, 30, 1, 0, &phi[0], NULL, NULL }, { 1, 10, 1, 0, &phi[1], NULL, NULL },
                        { 2, 60, 1, 0, &phi[2], NULL, NULL } };
    AlgoServerCtx s = { .options = o };
    double p[3];
    option_set(&ob, m, "flood_alpha", 0.0);
    CHECK_OK(m->weights->weights(&s, u, 3, p));
    CHECK(p[0] == 30.0 && p[1] == 10.0 && p[2] == 60.0);
    option_set(&ob, m, "flood_alpha", 0.5);
    CHECK_OK(m->weights->weights(&s, u, 3, p));
    const double sum = p[0] + p[1] + p[2];
    for (int i = 0; i < 3; i++)
        CHECK_NEAR(p[i] / sum, (u[i].n_samples / 100.0 + 0.5 * phi[i] / 8.0) / 1.5, 1e-15);
    /* negative scores: code-literal sums invert, the shift keeps the order */
    double neg[3] = { -2.0, -1.0, -5.0 };
    for (int i = 0; i < 3; i++) u[i].scalars = &neg[i];
    option_set(&ob, m, "flood_dac_shift", 1);
    CHECK_OK(m->weights->weights(&s, u, 3, p));
    const double shifted[3] = { 3.0 + 1e-6, 4.0 + 1e-6, 1e-6 }, total = 7.0 + 3e-6;
    const double psum = p[0] + p[1] + p[2];
    for (int i = 0; i < 3; i++) CHECK_NEAR(p[i] / psum, (u[i].n_samples / 100.0 + 0.5 * shifted[i] / total) / 1.5, 1e-12);
    /* a diverged client (phi not finite) is named as such, not sent to the shift */
    neg[1] = NAN;
    CHECK(m->weights->weights(&s, u, 3, p) == FH_ERR_NUMERIC);
    CHECK(strstr(fh_error_message(), "client 1's") && strstr(fh_error_message(), "diverged") &&
          !strstr(fh_error_message(), "dac_shift"));
    fh_error_clear();
}

int main(int argc, char **argv)
{
    test_only = argc > 1 ? argv[1] : NULL;
    RUN(test_mask_marks_the_quantile);
    RUN(test_mask_ties_and_large_batches);
    RUN(test_lambda_schedules);
    RUN(test_scores);
    RUN(test_ash_scores);
    RUN(test_ash_in_the_mask);
    RUN(test_dac_weights);
    return test_summary();
}
