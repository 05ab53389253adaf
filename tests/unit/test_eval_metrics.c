/* Unit tests for src/fl/eval_metrics.c, the classification metrics of docs/methods/metrics.md C.4: hand-computed binary AUCs
 * (ties, perfect and reversed separation), accuracy against balanced accuracy, argmax ties, one-vs-rest
 * (macro, weighted) and one-vs-one AUC on a 3-class example worked out by hand, absent classes, macro F1,
 * the loss (uniform and huge logits), brute-force O(n^2) pairwise AUCs on random data with many ties,
 * invariance under a permutation of the samples, and bad input.
 *
 * Run all:  build/tests/test_eval_metrics            Run one:  build/tests/test_eval_metrics test_auc_hand */
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fedhet/rng.h"

#include "../../src/fl/eval_metrics.h"

#define SEED 20240923u

/* ---- fl_auc_binary, by hand ---- */

static void test_auc_hand(void)
{
    /* sorted: 0.1 (neg, rank 1), 0.35 (pos, 2), 0.4 (neg, 3), 0.8 (pos, 4): (2 + 4 - 3) / (2 * 2) = 0.75 */
    const double s1[4] = {0.1, 0.4, 0.35, 0.8};
    const uint8_t p1[4] = {0, 0, 1, 1};
    CHECK_NEAR(fl_auc_binary(s1, p1, 4), 0.75, 1e-15);

    /* tie across the classes: 0.2 (neg, rank 1), 0.5 0.5 (pos + neg, ranks 2.5 each), 0.9 (pos, 4):
     * (2.5 + 4 - 3) / 4 = 0.875; pairwise: pos 0.5 beats 0.2 (1) and ties 0.5 (1/2), pos 0.9 beats both (2) */
    const double s2[4] = {0.5, 0.5, 0.2, 0.9};
    const uint8_t p2[4] = {1, 0, 0, 1};
    CHECK_NEAR(fl_auc_binary(s2, p2, 4), 0.875, 1e-15);

    /* everything tied: 1/2 */
    const double s3[3] = {0.3, 0.3, 0.3};
    const uint8_t p3[3] = {1, 0, 1};
    CHECK_NEAR(fl_auc_binary(s3, p3, 3), 0.5, 1e-15);

    /* perfect separation and its reverse */
    const double s4[6] = {0.9, 0.1, 0.8, 0.2, 0.7, 0.3};
    const uint8_t p4[6] = {1, 0, 1, 0, 1, 0}, q4[6] = {0, 1, 0, 1, 0, 1};
    CHECK_NEAR(fl_auc_binary(s4, p4, 6), 1.0, 1e-15);
    CHECK_NEAR(fl_auc_binary(s4, q4, 6), 0.0, 1e-15);

    /* an empty class: undefined */
    const uint8_t all[3] = {1, 1, 1}, none[3] = {0, 0, 0};
    CHECK(isnan(fl_auc_binary(s3, all, 3)));
    CHECK(isnan(fl_auc_binary(s3, none, 3)));
    CHECK(isnan(fl_auc_binary(s3, p3, 0)));
}

/* ---- brute force ---- */

/* sum over (positive i, negative j) of 1[s_i > s_j] + 1/2 1[s_i == s_j], over P * N */
static double brute_auc(const double *s, const uint8_t *pos, int64_t n)
{
    double wins = 0.0;
    int64_t np = 0, nn = 0;
    for (int64_t i = 0; i < n; i++) *(pos[i] ? &np : &nn) += 1;
    for (int64_t i = 0; i < n; i++) {
        if (!pos[i]) continue;
        for (int64_t j = 0; j < n; j++) {
            if (pos[j]) continue;
            wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
        }
    }
    return wins / ((double)np * (double)nn);
}

static void test_auc_brute_force(void)
{
    enum { N = 500 };
    static double s[N], sq[N];
    static uint8_t pos[N];
    for (int trial = 0; trial < 4; trial++) {
        FhRng rng;
        fh_rng_init(&rng, SEED, FH_RNG_TEST, 1, (uint32_t)trial, 0);
        double p_pos = 0.1 + 0.25 * trial; /* 0.1 .. 0.85: imbalanced both ways */
        for (int i = 0; i < N; i++) {
            pos[i] = fh_rng_uniform(&rng) < p_pos;
            /* positives score a little higher on average, so the AUC is not about 1/2 */
            s[i] = fh_rng_uniform(&rng) * 0.8 + (pos[i] ? 0.2 : 0.0);
            sq[i] = floor(s[i] * 10.0) / 10.0; /* 10 levels: many ties, within and across the classes */
        }
        double a = fl_auc_binary(s, pos, N), b = brute_auc(s, pos, N);
        double aq = fl_auc_binary(sq, pos, N), bq = brute_auc(sq, pos, N);
        CHECK_MSG(fabs(a - b) <= 1e-12, "trial %d: %.17g vs brute %.17g", trial, a, b);
        CHECK_MSG(fabs(aq - bq) <= 1e-12, "trial %d quantised: %.17g vs brute %.17g", trial, aq, bq);
        CHECK(a > 0.5 && a < 1.0);
        CHECK(fabs(aq - a) > 1e-6); /* the ties really change the value */
    }
}

/* ---- fl_eval_metrics ---- */

/* logits = log(p) per row: softmax(logits) = p up to rounding (every row of p sums to 1) */
static void logits_of_probs(float *z, const double *p, int n)
{
    for (int i = 0; i < n; i++) z[i] = (float)log(p[i]);
}

/* The 3-class example: y = 0 0 0 1 1 2, scores (columns 0, 1, 2):
 *   r0 y0: .70 .20 .10   pred 0 ok
 *   r1 y0: .50 .15 .35   pred 0 ok
 *   r2 y0: .25 .45 .30   pred 1 wrong
 *   r3 y1: .30 .55 .15   pred 1 ok
 *   r4 y1: .40 .40 .20   tie 0/1 -> pred 0 wrong
 *   r5 y2: .05 .25 .70   pred 2 ok
 * accuracy 4/6; recalls 2/3, 1/2, 1 -> balanced (2/3 + 1/2 + 1) / 3 = 13/18.
 * F1: class 0 tp 2, true 3, pred 3 (r0 r1 r4) -> 2/3; class 1 tp 1, true 2, pred 2 (r2 r3) -> 1/2;
 *     class 2 -> 1; macro 13/18.
 * OvR class 0, column 0: positives .70 .50 .25 vs negatives .30 .40 .05: .70 beats 3, .50 beats 3,
 *     .25 beats 1 (.05) -> 7/9.
 * OvR class 1, column 1: positives .55 .40 vs negatives .20 .15 .45 .25: .55 beats 4, .40 beats 3 -> 7/8.
 * OvR class 2, column 2: positive .70 vs .10 .35 .30 .15 .20 -> 5/5 = 1.
 *     macro = (7/9 + 7/8 + 1) / 3 = (56 + 63 + 72) / 216 = 191/216;
 *     weighted = (3 * 7/9 + 2 * 7/8 + 1 * 1) / 6 = (28/12 + 21/12 + 12/12) / 6 = 61/72.
 * OvO {0,1} (rows 0-4): A_01 = column 0, .70 .50 .25 vs .30 .40: 2 + 2 + 0 = 4 of 6 -> 2/3;
 *     A_10 = column 1, .55 .40 vs .20 .15 .45: 3 + 2 = 5 of 6 -> 5/6; pair (2/3 + 5/6) / 2 = 3/4.
 *     (A_01 on all samples would be the OvR value 7/9: the restriction matters.)
 * OvO {0,2} (rows 0 1 2 5): A_02 = column 0, .70 .50 .25 vs .05 -> 1; A_20 = column 2, .70 vs .10 .35 .30
 *     -> 1; pair 1.   OvO {1,2} (rows 3 4 5): A_12 = .55 .40 vs .25 -> 1; A_21 = .70 vs .15 .20 -> 1; pair 1.
 *     macro = (3/4 + 1 + 1) / 3 = 11/12.
 * loss = -(ln .70 + ln .50 + ln .25 + ln .55 + ln .40 + ln .70) / 6. */
static const double ex3_p[6][3] = {{.70, .20, .10}, {.50, .15, .35}, {.25, .45, .30},
                                   {.30, .55, .15}, {.40, .40, .20}, {.05, .25, .70}};
static const int32_t ex3_y[6] = {0, 0, 0, 1, 1, 2};

static void check_ex3(const FlEvalMetrics *m)
{
    CHECK(m->n == 6);
    CHECK_NEAR(m->accuracy, 4.0 / 6.0, 1e-15);
    CHECK_NEAR(m->balanced_accuracy, 13.0 / 18.0, 1e-15);
    CHECK_NEAR(m->f1_macro, 13.0 / 18.0, 1e-15);
    CHECK_NEAR(m->auc_ovr_macro, 191.0 / 216.0, 1e-15);
    CHECK_NEAR(m->auc_ovr_weighted, 61.0 / 72.0, 1e-15);
    CHECK_NEAR(m->auc_ovo_macro, 11.0 / 12.0, 1e-15);
    double loss = -(log(.70) + log(.50) + log(.25) + log(.55) + log(.40) + log(.70)) / 6.0;
    CHECK_NEAR(m->loss, loss, 1e-6); /* float logits */
}

static void test_three_class_hand(void)
{
    float z[18];
    logits_of_probs(z, &ex3_p[0][0], 18);
    FlEvalMetrics m;
    CHECK_OK(fl_eval_metrics(&m, z, ex3_y, 6, 3));
    check_ex3(&m);
}

/* The same data with a fourth class that nobody has and nobody predicts (logit -1e30: probability 0, so the
 * other columns are unchanged): its OvR AUC is undefined and skipped, its pairs are skipped, it is not in
 * the balanced accuracy nor in F1 -> every value equals the 3-class one. */
static void test_absent_class_skipped(void)
{
    float z[24];
    for (int i = 0; i < 6; i++) {
        logits_of_probs(z + 4 * i, ex3_p[i], 3);
        z[4 * i + 3] = -1e30f;
    }
    FlEvalMetrics m;
    CHECK_OK(fl_eval_metrics(&m, z, ex3_y, 6, 4));
    check_ex3(&m);

    /* only one class present: no AUC is defined */
    const int32_t y1[6] = {1, 1, 1, 1, 1, 1};
    CHECK_OK(fl_eval_metrics(&m, z, y1, 6, 4));
    CHECK(isnan(m.auc_ovr_macro) && isnan(m.auc_ovr_weighted) && isnan(m.auc_ovo_macro));
    CHECK_NEAR(m.accuracy, 2.0 / 6.0, 1e-15); /* r2 and r3 predict 1 */
    CHECK_NEAR(m.balanced_accuracy, 2.0 / 6.0, 1e-15);
}

/* one-hot-ish logits: 5 at the prediction, 0 elsewhere */
static void logits_of_preds(float *z, const int *pred, int n, int classes)
{
    for (int i = 0; i < n; i++)
        for (int c = 0; c < classes; c++) z[i * classes + c] = c == pred[i] ? 5.0f : 0.0f;
}

static void test_accuracy_vs_balanced(void)
{
    /* 8 samples of class 0, 2 of class 1; predictions all right but the last:
     * accuracy 9/10; recalls 8/8 and 1/2 -> balanced 3/4 */
    int32_t y[10] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1};
    int pred[10] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 0};
    float z[20];
    logits_of_preds(z, pred, 10, 2);
    FlEvalMetrics m;
    CHECK_OK(fl_eval_metrics(&m, z, y, 10, 2));
    CHECK_NEAR(m.accuracy, 0.9, 1e-15);
    CHECK_NEAR(m.balanced_accuracy, 0.75, 1e-15);
    /* F1: class 0 tp 8, true 8, pred 9 -> 16/17; class 1 tp 1, true 2, pred 1 -> 2/3 */
    CHECK_NEAR(m.f1_macro, (16.0 / 17.0 + 2.0 / 3.0) / 2.0, 1e-15);

    /* always predicting the majority: accuracy 0.8, balanced 0.5 */
    int pred0[10] = {0};
    logits_of_preds(z, pred0, 10, 2);
    CHECK_OK(fl_eval_metrics(&m, z, y, 10, 2));
    CHECK_NEAR(m.accuracy, 0.8, 1e-15);
    CHECK_NEAR(m.balanced_accuracy, 0.5, 1e-15);
}

static void test_argmax_tie_lowest_index(void)
{
    /* row 0: 1 3 3 2 -> 1; row 1: all equal -> 0; row 2: 0 -1 7 7 -> 2 */
    const float z[12] = {1, 3, 3, 2, 0, 0, 0, 0, 0, -1, 7, 7};
    const int32_t lowest[3] = {1, 0, 2}, other[3] = {2, 3, 3};
    FlEvalMetrics m;
    CHECK_OK(fl_eval_metrics(&m, z, lowest, 3, 4));
    CHECK_NEAR(m.accuracy, 1.0, 0.0);
    CHECK_OK(fl_eval_metrics(&m, z, other, 3, 4));
    CHECK_NEAR(m.accuracy, 0.0, 0.0);
}

static void test_f1_macro_hand(void)
{
    /* 4 classes, y = 0 0 1 1 1 2, pred = 0 0 0 1 3 1:
     * class 0: tp 2, P = 2/3, R = 2/2 -> F1 = 2 (2/3)(1) / (5/3) = 4/5
     * class 1: tp 1 (r3), P = 1/2 (r3 r5), R = 1/3 -> F1 = 2 (1/6) / (5/6) = 2/5
     * class 2: tp 0 -> 0;  class 3: absent from y but predicted once -> in the mean, F1 0
     * macro = (4/5 + 2/5 + 0 + 0) / 4 = 3/10 (it would be 2/5 without class 3).
     * balanced accuracy over the present classes 0 1 2: (1 + 1/3 + 0) / 3 = 4/9; accuracy 3/6. */
    const int32_t y[6] = {0, 0, 1, 1, 1, 2};
    const int pred[6] = {0, 0, 0, 1, 3, 1};
    float z[24];
    logits_of_preds(z, pred, 6, 4);
    FlEvalMetrics m;
    CHECK_OK(fl_eval_metrics(&m, z, y, 6, 4));
    CHECK_NEAR(m.f1_macro, 0.3, 1e-15);
    CHECK_NEAR(m.balanced_accuracy, 4.0 / 9.0, 1e-15);
    CHECK_NEAR(m.accuracy, 0.5, 1e-15);
}

static void test_loss(void)
{
    /* all-zero logits: every probability 1/C, loss log C */
    float z[7 * 5] = {0};
    const int32_t y[5] = {0, 6, 3, 2, 6};
    FlEvalMetrics m;
    CHECK_OK(fl_eval_metrics(&m, z, y, 5, 7));
    CHECK_NEAR(m.loss, log(7.0), 1e-15);
    CHECK_NEAR(m.auc_ovr_macro, 0.5, 1e-15); /* everything tied */
    CHECK_NEAR(m.auc_ovo_macro, 0.5, 1e-15);

    /* huge logits (exp(1000) overflows a double): right label -> 0, wrong label -> 1000 */
    const float big[4] = {1000.0f, 0.0f, 0.0f, 1000.0f};
    const int32_t right[2] = {0, 1}, wrong[2] = {1, 0}, mixed[2] = {0, 0};
    CHECK_OK(fl_eval_metrics(&m, big, right, 2, 2));
    CHECK(isfinite(m.loss));
    CHECK_NEAR(m.loss, 0.0, 1e-12);
    CHECK_NEAR(m.accuracy, 1.0, 0.0);
    CHECK_NEAR(m.auc_ovr_macro, 1.0, 1e-15);
    CHECK_OK(fl_eval_metrics(&m, big, wrong, 2, 2));
    CHECK(isfinite(m.loss));
    CHECK_NEAR(m.loss, 1000.0, 1e-9);
    CHECK_NEAR(m.auc_ovr_macro, 0.0, 1e-15);
    CHECK_OK(fl_eval_metrics(&m, big, mixed, 2, 2));
    CHECK_NEAR(m.loss, 500.0, 1e-9);
    CHECK(isnan(m.auc_ovr_macro));
}

/* the documented scores, computed the documented way */
static void softmax_rows(double *s, const float *z, int64_t n, int classes)
{
    for (int64_t i = 0; i < n; i++) {
        const float *r = z + i * classes;
        double mx = r[0], sum = 0.0;
        for (int c = 1; c < classes; c++)
            if ((double)r[c] > mx) mx = r[c];
        for (int c = 0; c < classes; c++) sum += exp((double)r[c] - mx);
        for (int c = 0; c < classes; c++) s[i * classes + c] = exp((double)r[c] - mx) / sum;
    }
}

/* AUC of column col, positives y == a against negatives y == b (b < 0: every y != a), pair by pair */
static double brute_auc_col(const double *s, const int32_t *y, int64_t n, int classes, int col, int a, int b)
{
    double wins = 0.0, np = 0, nn = 0;
    for (int64_t i = 0; i < n; i++) {
        if (y[i] == a) np++;
        else if (b < 0 || y[i] == b) nn++;
    }
    for (int64_t i = 0; i < n; i++) {
        if (y[i] != a) continue;
        double si = s[i * classes + col];
        for (int64_t j = 0; j < n; j++) {
            if (y[j] == a || (b >= 0 && y[j] != b)) continue;
            double sj = s[j * classes + col];
            wins += si > sj ? 1.0 : si == sj ? 0.5 : 0.0;
        }
    }
    return wins / (np * nn);
}

/* Random logits on a coarse grid (ties everywhere), class 4 of 5 absent from y; every metric against a
 * direct computation from the definitions. */
static void test_multiclass_brute_force(void)
{
    enum { N = 300, C = 5 };
    static float z[N * C];
    static double s[N * C];
    static int32_t y[N];
    FhRng rng;
    fh_rng_init(&rng, SEED, FH_RNG_TEST, 2, 0, 0);
    for (int i = 0; i < N; i++) {
        y[i] = (int32_t)fh_rng_below(&rng, 4);
        if (y[i] == 3 && fh_rng_uniform(&rng) < 0.7) y[i] = 0; /* imbalanced */
        for (int c = 0; c < C; c++) z[i * C + c] = (float)fh_rng_below(&rng, 3) + (c == y[i] ? 1.0f : 0.0f);
    }
    softmax_rows(s, z, N, C);

    int64_t cnt[C] = {0}, tp[C] = {0}, pc[C] = {0};
    double loss = 0.0;
    for (int i = 0; i < N; i++) {
        int p = 0;
        for (int c = 1; c < C; c++)
            if (s[i * C + c] > s[i * C + p]) p = c;
        cnt[y[i]]++, pc[p]++;
        if (p == y[i]) tp[p]++;
        loss += -log(s[i * C + y[i]]);
    }
    double acc = 0, bal = 0, f1 = 0, ovr = 0, ovr_w = 0, ovo = 0;
    int n_present = 0, n_f1 = 0, n_pairs = 0;
    for (int c = 0; c < C; c++) {
        acc += (double)tp[c] / N;
        if (cnt[c] > 0) {
            n_present++;
            bal += (double)tp[c] / cnt[c];
            double a = brute_auc_col(s, y, N, C, c, c, -1);
            ovr += a;
            ovr_w += a * cnt[c] / N;
        }
        if (cnt[c] > 0 || pc[c] > 0) {
            n_f1++;
            double P = pc[c] ? (double)tp[c] / pc[c] : 0, R = cnt[c] ? (double)tp[c] / cnt[c] : 0;
            f1 += P + R > 0 ? 2 * P * R / (P + R) : 0;
        }
        for (int b = c + 1; b < C; b++) {
            if (cnt[c] == 0 || cnt[b] == 0) continue;
            ovo += (brute_auc_col(s, y, N, C, c, c, b) + brute_auc_col(s, y, N, C, b, b, c)) / 2;
            n_pairs++;
        }
    }
    CHECK(cnt[4] == 0 && n_present == 4 && n_pairs == 6);

    FlEvalMetrics m;
    CHECK_OK(fl_eval_metrics(&m, z, y, N, C));
    CHECK_NEAR(m.accuracy, acc, 1e-12);
    CHECK_NEAR(m.balanced_accuracy, bal / n_present, 1e-12);
    CHECK_NEAR(m.f1_macro, f1 / n_f1, 1e-12);
    CHECK_NEAR(m.auc_ovr_macro, ovr / n_present, 1e-12);
    CHECK_NEAR(m.auc_ovr_weighted, ovr_w, 1e-12);
    CHECK_NEAR(m.auc_ovo_macro, ovo / n_pairs, 1e-12);
    CHECK_NEAR(m.loss, loss / N, 1e-12);
    CHECK(m.auc_ovr_macro > 0.55 && m.auc_ovr_macro < 0.99); /* a non-trivial case */
    CHECK(fabs(m.auc_ovr_macro - m.auc_ovo_macro) > 1e-6);

    /* the same samples in another order: the same metrics (AUCs exactly; the loss up to summation order) */
    static float zp[N * C];
    static int32_t yp[N];
    int64_t perm[N];
    fh_rng_permutation(&rng, perm, N);
    for (int i = 0; i < N; i++) {
        yp[i] = y[perm[i]];
        memcpy(zp + i * C, z + perm[i] * C, C * sizeof(float));
    }
    FlEvalMetrics mp;
    CHECK_OK(fl_eval_metrics(&mp, zp, yp, N, C));
    CHECK(mp.accuracy == m.accuracy && mp.balanced_accuracy == m.balanced_accuracy && mp.f1_macro == m.f1_macro);
    CHECK(mp.auc_ovr_macro == m.auc_ovr_macro && mp.auc_ovr_weighted == m.auc_ovr_weighted);
    CHECK(mp.auc_ovo_macro == m.auc_ovo_macro);
    CHECK_NEAR(mp.loss, m.loss, 1e-12);
}

static void test_bad_input(void)
{
    const float z[6] = {0, 1, 2, 3, 4, 5};
    const int32_t bad_hi[3] = {0, 1, 2}, bad_lo[3] = {1, -1, 0}, ok[3] = {0, 1, 0};
    FlEvalMetrics m;
    CHECK(fl_eval_metrics(&m, z, bad_hi, 3, 2) == FH_ERR_USAGE);
    CHECK_MSG(strstr(fh_error_message(), "label 2") && strstr(fh_error_message(), "row 2"), "%s",
              fh_error_message());
    CHECK(fl_eval_metrics(&m, z, bad_lo, 3, 2) == FH_ERR_USAGE);
    CHECK_MSG(strstr(fh_error_message(), "label -1") && strstr(fh_error_message(), "row 1"), "%s",
              fh_error_message());
    CHECK(fl_eval_metrics(&m, z, ok, 0, 2) == FH_ERR_USAGE);
    CHECK(fl_eval_metrics(&m, z, ok, -3, 2) == FH_ERR_USAGE);
    CHECK(fl_eval_metrics(&m, z, ok, 3, 1) == FH_ERR_USAGE);
    CHECK(fl_eval_metrics(&m, NULL, ok, 3, 2) == FH_ERR_USAGE);
    CHECK_OK(fl_eval_metrics(&m, z, ok, 3, 2));
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_auc_hand);
    RUN(test_auc_brute_force);
    RUN(test_three_class_hand);
    RUN(test_absent_class_skipped);
    RUN(test_accuracy_vs_balanced);
    RUN(test_argmax_tie_lowest_index);
    RUN(test_f1_macro_hand);
    RUN(test_loss);
    RUN(test_multiclass_brute_force);
    RUN(test_bad_input);
    return test_summary();
}
