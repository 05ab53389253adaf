/* FLOOD's parts against the spec (algorithms-sam 13, A.23): the pseudo-OOD mask marks exactly the samples
 * below the batch's lower-interpolated q-quantile, the lambda schedules and their timing, the OOD scores,
 * and DAC weights (alpha = 0 gives FedAvg's weights exactly). */
#include "test.h"

#include <stdlib.h>

#include "../../src/algo/algo_internal.h"

enum { HP_SCORE, HP_Q, HP_A, HP_HALT, HP_SCHEDULE, HP_START, HP_ALPHA, HP_COMPAT, HP_SHIFT, HP_LAMBDA };

static void defaults(const AlgoMethod *m, double *hp)
{
    for (int h = 0; h < m->n_hp; h++) hp[h] = m->hp[h].default_value;
}

static void test_mask_marks_the_quantile(void)
{
    const AlgoMethod *m = algo_find("flood");
    CHECK(m && m->sample_weights);
    if (!m) return;
    double hp[ALGO_MAX_HP];
    defaults(m, hp);
    hp[HP_SCHEDULE] = 6; /* constant */
    hp[HP_LAMBDA] = 7.0;
    hp[HP_SCORE] = 2; /* maxlogit: the score is the largest logit, easy to set */
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
        hp[HP_Q] = qs[t];
        AlgoClientCtx c;
        memset(&c, 0, sizeof c);
        c.hp = hp;
        c.round = 3;
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

static void test_lambda_schedules(void)
{
    const AlgoMethod *m = algo_find("flood");
    double hp[ALGO_MAX_HP];
    defaults(m, hp);
    hp[HP_HALT] = 100;
    /* paper default: cosine, a = 200; code timing: lambda_0 = 1, lambda_t = f(min(t - 1, T_h)) */
    CHECK(algo_flood_lambda(hp, 0) == 1.0);
    CHECK_NEAR(algo_flood_lambda(hp, 1), 0.0, 1e-12);
    CHECK_NEAR(algo_flood_lambda(hp, 51), 200.0, 1e-9);
    CHECK_NEAR(algo_flood_lambda(hp, 101), 400.0, 1e-9);
    CHECK_NEAR(algo_flood_lambda(hp, 5000), 400.0, 1e-9);
    /* code compat: logistic with a = 50, ending at 2a = 100, symmetric around T_h / 2 */
    hp[HP_COMPAT] = 1;
    CHECK_NEAR(algo_flood_lambda(hp, 1), 0.0, 1e-9);
    CHECK_NEAR(algo_flood_lambda(hp, 51), 50.0, 1e-9);
    CHECK_NEAR(algo_flood_lambda(hp, 101), 100.0, 1e-9);
    /* every schedule ends at 2a; linear is linear */
    hp[HP_A] = 10;
    for (int s = 1; s <= 5; s++) {
        hp[HP_SCHEDULE] = s;
        CHECK_NEAR(algo_flood_lambda(hp, 101), 20.0, 1e-9);
    }
    hp[HP_SCHEDULE] = 2;
    CHECK_NEAR(algo_flood_lambda(hp, 26), 5.0, 1e-12);
    /* start phase: lambda = 1 up to t_start, then the schedule shifted */
    hp[HP_START] = 10;
    CHECK(algo_flood_lambda(hp, 10) == 1.0);
    CHECK_NEAR(algo_flood_lambda(hp, 36), 5.0, 1e-12);
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

static void test_dac_weights(void)
{
    const AlgoMethod *m = algo_find("flood");
    double hp[ALGO_MAX_HP];
    defaults(m, hp);
    double phi[3] = { 2.0, 1.0, 5.0 };
    AlgoUpload u[3] = { { 0, 30, 1, 0, &phi[0], NULL, NULL }, { 1, 10, 1, 0, &phi[1], NULL, NULL },
                        { 2, 60, 1, 0, &phi[2], NULL, NULL } };
    AlgoServerCtx s = { .hp = hp };
    double p[3];
    hp[HP_ALPHA] = 0.0;
    CHECK_OK(m->weights->weights(&s, u, 3, p));
    CHECK(p[0] == 30.0 && p[1] == 10.0 && p[2] == 60.0);
    hp[HP_ALPHA] = 0.5;
    CHECK_OK(m->weights->weights(&s, u, 3, p));
    const double sum = p[0] + p[1] + p[2];
    for (int i = 0; i < 3; i++)
        CHECK_NEAR(p[i] / sum, (u[i].n_samples / 100.0 + 0.5 * phi[i] / 8.0) / 1.5, 1e-15);
    /* negative scores: code-literal sums invert, the shift keeps the order */
    double neg[3] = { -2.0, -1.0, -5.0 };
    for (int i = 0; i < 3; i++) u[i].scalars = &neg[i];
    hp[HP_SHIFT] = 1;
    CHECK_OK(m->weights->weights(&s, u, 3, p));
    const double shifted[3] = { 3.0 + 1e-6, 4.0 + 1e-6, 1e-6 }, total = 7.0 + 3e-6;
    const double psum = p[0] + p[1] + p[2];
    for (int i = 0; i < 3; i++) CHECK_NEAR(p[i] / psum, (u[i].n_samples / 100.0 + 0.5 * shifted[i] / total) / 1.5, 1e-12);
}

int main(int argc, char **argv)
{
    test_only = argc > 1 ? argv[1] : NULL;
    RUN(test_mask_marks_the_quantile);
    RUN(test_lambda_schedules);
    RUN(test_scores);
    RUN(test_dac_weights);
    return test_summary();
}
