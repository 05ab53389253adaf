/* Classification metrics of docs/methods/metrics.md C.4: loss, accuracy, balanced accuracy, one-vs-rest and one-vs-one AUC,
 * macro F1. See eval_metrics.h for the definitions.
 *
 * How the AUCs are computed. Only the classes present in y matter, and only their score columns. For each
 * such column c the n scores s_{.,c} are sorted once (stable merge sort on (score, label) items); then
 *  - one-vs-rest: the rank-sum formula on that sorted array, positives = label c, ties get average ranks;
 *  - one-vs-one: the sorted array is split by label into per-class runs (still sorted), and for every
 *    other present class b, A_cb = AUC(class-c run vs class-b run) by a merge of the two runs with the same
 *    rank-sum formula. That is exactly "restrict to y in {c, b}, rank, sum the positives' ranks".
 * Cost: one sort of n per present class plus O(n) merges per pair of classes' worth of samples, i.e.
 * O(C n log n + C n); no per-pair sort. Rank sums are sums of half-integers below 2^53, hence exact in
 * double: the result does not depend on the summation order at all. */
#include "eval_metrics.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

typedef struct ScoreItem {
    double s;
    int32_t y;
} ScoreItem;

/* strict order on scores with NaN above every number (so sorting is well defined for any input) */
static inline int score_less(double a, double b)
{
    if (isnan(b)) return !isnan(a);
    return a < b; /* false when a is NaN */
}
static inline int score_same(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

/* Stable bottom-up merge sort of items by score; tmp has room for n items. */
static void sort_items(ScoreItem *a, ScoreItem *tmp, int64_t n)
{
    const int64_t run = 32;
    for (int64_t lo = 0; lo < n; lo += run) { /* insertion sort of each run (stable) */
        int64_t hi = lo + run < n ? lo + run : n;
        for (int64_t i = lo + 1; i < hi; i++) {
            ScoreItem v = a[i];
            int64_t j = i;
            while (j > lo && score_less(v.s, a[j - 1].s)) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = v;
        }
    }
    ScoreItem *src = a, *dst = tmp;
    for (int64_t width = run; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n;
            int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) dst[k++] = score_less(src[j].s, src[i].s) ? src[j++] : src[i++];
            while (i < mid) dst[k++] = src[i++];
            while (j < hi) dst[k++] = src[j++];
        }
        ScoreItem *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, (size_t)n * sizeof *a);
}

/* AUC from items sorted by score: positives are the items with y == pos_label (n_pos of them).
 * Ties share the average rank: a group at 0-based positions [i, j) has ranks (i + 1 + j) / 2. */
static double auc_sorted_items(const ScoreItem *v, int64_t n, int32_t pos_label, int64_t n_pos)
{
    int64_t n_neg = n - n_pos;
    if (n_pos <= 0 || n_neg <= 0) return NAN;
    double rank_sum = 0.0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i, cp = 0;
        while (j < n && score_same(v[j].s, v[i].s)) cp += v[j++].y == pos_label;
        rank_sum += (double)cp * (double)(i + 1 + j) * 0.5;
        i = j;
    }
    double p = (double)n_pos;
    return (rank_sum - p * (p + 1.0) * 0.5) / (p * (double)n_neg);
}

/* AUC of sorted positive scores pos[np] against sorted negative scores neg[nn]: the same rank-sum formula
 * on the merged order (a group of cp positives and cn negatives after r smaller scores has average rank
 * r + (1 + cp + cn) / 2). */
static double auc_merge(const double *pos, int64_t np, const double *neg, int64_t nn)
{
    if (np <= 0 || nn <= 0) return NAN;
    double rank_sum = 0.0;
    int64_t ip = 0, in = 0, r = 0;
    while (ip < np || in < nn) {
        double v = (ip < np && (in >= nn || !score_less(neg[in], pos[ip]))) ? pos[ip] : neg[in];
        int64_t cp = 0, cn = 0;
        while (ip < np && score_same(pos[ip], v)) ip++, cp++;
        while (in < nn && score_same(neg[in], v)) in++, cn++;
        rank_sum += (double)cp * (double)(2 * r + 1 + cp + cn) * 0.5;
        r += cp + cn;
    }
    double p = (double)np;
    return (rank_sum - p * (p + 1.0) * 0.5) / (p * (double)nn);
}

double fl_auc_binary(const double *scores, const uint8_t *positive, int64_t n)
{
    if (!scores || !positive || n < 1) return NAN;
    int64_t n_pos = 0;
    for (int64_t i = 0; i < n; i++) n_pos += positive[i] != 0;
    if (n_pos == 0 || n_pos == n) return NAN;
    ScoreItem *items = NULL;
    if (fh_calloc(&items, (size_t)n * 2, sizeof *items, "AUC sort buffer") != FH_OK) return NAN;
    for (int64_t i = 0; i < n; i++) items[i] = (ScoreItem){scores[i], positive[i] != 0};
    sort_items(items, items + n, n);
    double auc = auc_sorted_items(items, n, 1, n_pos);
    fh_free(&items);
    return auc;
}

/* The one softmax probability expression used everywhere (prediction and AUC scores), so that the two
 * agree bit for bit. */
static inline double softmax_prob(float z, double row_max, double row_sum)
{
    return exp((double)z - row_max) / row_sum;
}

void fl_eval_metrics_work_free(FlEvalMetricsWork *w)
{
    fh_free(&w->row_max);
    fh_free(&w->row_sum);
    fh_free(&w->row_buf);
    fh_free(&w->n_true);
    fh_free(&w->n_pred);
    fh_free(&w->n_tp);
    fh_free(&w->start);
    fh_free(&w->fill);
    fh_free(&w->items);
    fh_free(&w->runs);
    fh_free(&w->auc_ovr);
    fh_free(&w->auc_pair);
    w->n = 0;
    w->classes = 0;
}

int64_t fl_eval_metrics_work_bytes(int64_t n, int classes)
{
    const int64_t c = classes;
    return n * (int64_t)(2 * sizeof(double) + 2 * sizeof(ScoreItem) + sizeof(double)) +
           c * (int64_t)(2 * sizeof(double) + 5 * sizeof(int64_t)) + (int64_t)sizeof(int64_t) +
           c * c * (int64_t)sizeof(double);
}

int fl_eval_metrics_work_init(FlEvalMetricsWork *w, int64_t n, int classes)
{
    memset(w, 0, sizeof *w);
    size_t un = (size_t)n, uc = (size_t)classes;
    int status = fh_calloc(&w->row_max, un, sizeof(double), "eval metrics: row maxima");
    if (status == FH_OK) status = fh_calloc(&w->row_sum, un, sizeof(double), "eval metrics: row sums");
    if (status == FH_OK) status = fh_calloc(&w->row_buf, uc, sizeof(double), "eval metrics: row buffer");
    if (status == FH_OK) status = fh_calloc(&w->n_true, uc, sizeof(int64_t), "eval metrics: class counts");
    if (status == FH_OK) status = fh_calloc(&w->n_pred, uc, sizeof(int64_t), "eval metrics: prediction counts");
    if (status == FH_OK) status = fh_calloc(&w->n_tp, uc, sizeof(int64_t), "eval metrics: true positives");
    if (status == FH_OK) status = fh_calloc(&w->start, uc + 1, sizeof(int64_t), "eval metrics: class offsets");
    if (status == FH_OK) status = fh_calloc(&w->fill, uc, sizeof(int64_t), "eval metrics: class fill");
    if (status == FH_OK) status = fh_calloc(&w->auc_ovr, uc, sizeof(double), "eval metrics: one-vs-rest AUCs");
    if (status == FH_OK) status = fh_calloc(&w->auc_pair, uc, uc * sizeof(double), "eval metrics: one-vs-one AUC table");
    if (status == FH_OK) status = fh_calloc(&w->items, un, 2 * sizeof(ScoreItem), "eval metrics: sort buffer");
    if (status == FH_OK) status = fh_calloc(&w->runs, un, sizeof(double), "eval metrics: per-class score runs");
    if (status != FH_OK) {
        fl_eval_metrics_work_free(w);
        return fh_error_trace(status, __FILE__, __LINE__, "fl_eval_metrics_work_init");
    }
    w->n = n;
    w->classes = classes;
    return FH_OK;
}

/* everything but the AUCs, plus the per-row softmax statistics */
static void eval_rows(FlEvalMetrics *out, FlEvalMetricsWork *w, const float *logits, const int32_t *labels, int64_t n,
                      int classes)
{
    double loss_sum = 0.0;
    int64_t correct = 0;
    memset(w->n_true, 0, (size_t)classes * sizeof *w->n_true);
    memset(w->n_pred, 0, (size_t)classes * sizeof *w->n_pred);
    memset(w->n_tp, 0, (size_t)classes * sizeof *w->n_tp);
    for (int64_t i = 0; i < n; i++) {
        const float *z = logits + i * classes;
        double m = z[0];
        for (int c = 1; c < classes; c++)
            if ((double)z[c] > m) m = z[c];
        double sum = 0.0;
        for (int c = 0; c < classes; c++) {
            w->row_buf[c] = exp((double)z[c] - m);
            sum += w->row_buf[c];
        }
        w->row_max[i] = m;
        w->row_sum[i] = sum;
        int y = labels[i];
        loss_sum += m + log(sum) - (double)z[y];
        /* argmax of the probabilities (same expression as softmax_prob), lowest index on ties */
        int pred = 0;
        double best = w->row_buf[0] / sum;
        for (int c = 1; c < classes; c++) {
            double s = w->row_buf[c] / sum;
            if (s > best) best = s, pred = c;
        }
        w->n_true[y]++;
        w->n_pred[pred]++;
        if (pred == y) w->n_tp[y]++, correct++;
    }
    out->loss = loss_sum / (double)n;
    out->accuracy = (double)correct / (double)n;

    double recall_sum = 0.0, f1_sum = 0.0;
    int n_present = 0, n_f1 = 0;
    for (int c = 0; c < classes; c++) {
        if (w->n_true[c] > 0) {
            recall_sum += (double)w->n_tp[c] / (double)w->n_true[c];
            n_present++;
        }
        if (w->n_true[c] > 0 || w->n_pred[c] > 0) {
            /* F1 = 2PR / (P + R) with P = tp/pred, R = tp/true, which is 2 tp / (true + pred) whenever it
             * is defined; 0 when tp = 0 (P or R zero or undefined) */
            if (w->n_tp[c] > 0) f1_sum += 2.0 * (double)w->n_tp[c] / (double)(w->n_true[c] + w->n_pred[c]);
            n_f1++;
        }
    }
    out->balanced_accuracy = recall_sum / n_present; /* n_present >= 1 since n >= 1 */
    out->f1_macro = f1_sum / n_f1;
}

static void eval_aucs(FlEvalMetrics *out, FlEvalMetricsWork *w, const float *logits, const int32_t *labels, int64_t n,
                      int classes)
{
    int n_present = 0;
    for (int c = 0; c < classes; c++) n_present += w->n_true[c] > 0;
    out->auc_ovr_macro = out->auc_ovr_weighted = out->auc_ovo_macro = NAN;
    if (n_present < 2) return; /* no class has both positives and negatives */

    w->start[0] = 0;
    for (int c = 0; c < classes; c++) w->start[c + 1] = w->start[c] + w->n_true[c];

    ScoreItem *items = w->items, *scratch = w->items + n;
    for (int a = 0; a < classes; a++) {
        w->auc_ovr[a] = NAN;
        if (w->n_true[a] == 0) continue; /* column of an absent class: used by no AUC */
        for (int64_t i = 0; i < n; i++)
            items[i] = (ScoreItem){softmax_prob(logits[i * classes + a], w->row_max[i], w->row_sum[i]), labels[i]};
        sort_items(items, scratch, n);
        /* n_present >= 2, so class a has both positives and negatives */
        w->auc_ovr[a] = auc_sorted_items(items, n, a, w->n_true[a]);

        for (int c = 0; c < classes; c++) w->fill[c] = w->start[c];
        for (int64_t i = 0; i < n; i++) w->runs[w->fill[items[i].y]++] = items[i].s;
        const double *run_a = w->runs + w->start[a];
        for (int b = 0; b < classes; b++) {
            if (b == a || w->n_true[b] == 0) continue;
            w->auc_pair[(int64_t)a * classes + b] = auc_merge(run_a, w->n_true[a], w->runs + w->start[b], w->n_true[b]);
        }
    }

    /* Classes absent from y have no one-vs-rest AUC (no positives). sklearn raises an error there; we skip
     * them: the macro mean divides by the number of classes that have both positives and negatives, and the
     * weighted mean gives them their weight, 0. (With >= 2 present classes every present class has both.) */
    double macro = 0.0, weighted = 0.0;
    int n_defined = 0;
    for (int c = 0; c < classes; c++) {
        if (w->n_true[c] == 0) continue;
        macro += w->auc_ovr[c];
        weighted += ((double)w->n_true[c] / (double)n) * w->auc_ovr[c];
        n_defined++;
    }
    out->auc_ovr_macro = macro / n_defined;
    out->auc_ovr_weighted = weighted;

    double ovo = 0.0;
    int64_t n_pairs = 0;
    for (int a = 0; a < classes; a++) {
        if (w->n_true[a] == 0) continue;
        for (int b = a + 1; b < classes; b++) {
            if (w->n_true[b] == 0) continue;
            ovo += (w->auc_pair[(int64_t)a * classes + b] + w->auc_pair[(int64_t)b * classes + a]) / 2.0;
            n_pairs++;
        }
    }
    out->auc_ovo_macro = ovo / (double)n_pairs;
}

int fl_eval_metrics_with(FlEvalMetrics *out, FlEvalMetricsWork *w, const float *logits, const int32_t *labels,
                         int64_t n, int classes)
{
    if (!out || !logits || !labels) FH_FAIL(FH_ERR_USAGE, "eval metrics: NULL output, logits or labels");
    if (n < 1) FH_FAIL(FH_ERR_USAGE, "eval metrics: need at least one sample, got n = %lld", (long long)n);
    if (classes < 2) FH_FAIL(FH_ERR_USAGE, "eval metrics: need at least 2 classes, got %d", classes);
    if (n > w->n || classes > w->classes)
        FH_FAIL(FH_ERR_USAGE, "eval metrics: %lld samples of %d classes, but the work arrays hold %lld of %d",
                (long long)n, classes, (long long)w->n, w->classes);
    for (int64_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            FH_FAIL(FH_ERR_USAGE, "eval metrics: label %d at row %lld is outside [0, %d)", (int)labels[i],
                    (long long)i, classes);
    FlEvalMetrics m;
    memset(&m, 0, sizeof m);
    m.n = n;
    eval_rows(&m, w, logits, labels, n, classes);
    eval_aucs(&m, w, logits, labels, n, classes);
    *out = m;
    return FH_OK;
}

int fl_eval_metrics(FlEvalMetrics *out, const float *logits, const int32_t *labels, int64_t n, int classes)
{
    if (!out || !logits || !labels) FH_FAIL(FH_ERR_USAGE, "eval metrics: NULL output, logits or labels");
    if (n < 1) FH_FAIL(FH_ERR_USAGE, "eval metrics: need at least one sample, got n = %lld", (long long)n);
    if (classes < 2) FH_FAIL(FH_ERR_USAGE, "eval metrics: need at least 2 classes, got %d", classes);
    FlEvalMetricsWork w;
    FH_CHECK(fl_eval_metrics_work_init(&w, n, classes));
    const int status = fl_eval_metrics_with(out, &w, logits, labels, n, classes);
    fl_eval_metrics_work_free(&w);
    return status;
}
