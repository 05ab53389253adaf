/* Classification metrics of docs/methods/metrics.md C.4 — internal header of the fl module (no MPI; pure functions).
 *
 * Scores: s_{i,c} = exp(z_{i,c} - m_i) / S_i with m_i = max_c z_{i,c} and S_i = sum_c exp(z_{i,c} - m_i)
 * (double, classes summed in index order), i.e. softmax probabilities computed in double from the float
 * logits z. Everything below is a function of the inputs only: ranks come from a stable sort, every sum
 * is in double in a fixed (index) order, and the rank sums of the AUCs are exact in double. */
#ifndef FEDHET_FL_EVAL_METRICS_H
#define FEDHET_FL_EVAL_METRICS_H

#include <stdint.h>

typedef struct {
    int64_t n;                 /* samples */
    double loss;               /* mean cross-entropy from logits (log-softmax in double) */
    double accuracy, balanced_accuracy;
    double auc_ovr_macro, auc_ovr_weighted, auc_ovo_macro;
    double f1_macro;
} FlEvalMetrics;

/* logits [n, classes] row-major float, labels [n] in [0, classes). n >= 1.
 * Scores for AUC are softmax probabilities computed in double from the logits (above).
 *
 *  - prediction = argmax_c s_{i,c}, lowest index on ties; accuracy = mean 1[pred = y];
 *  - balanced_accuracy = mean per-class recall over the classes present in y;
 *  - auc_ovr_macro = mean over classes c of AUC(s_{.,c}; y = c vs y != c); auc_ovr_weighted weights class c
 *    by |{y = c}| / n. A class absent from y has no defined AUC: it is SKIPPED (sklearn raises an error
 *    instead), i.e. the macro mean divides by the number of classes with both positives and negatives;
 *  - auc_ovo_macro (Hand & Till) = mean over unordered pairs {a, b} of classes both present in y of
 *    (A_ab + A_ba) / 2, A_ab = AUC(s_{.,a}; y = a vs y = b) on the samples with y in {a, b};
 *  - f1_macro = mean per-class F1 = 2PR / (P + R) (0 when undefined) over the classes present in y or
 *    predicted (sklearn's default labels);
 *  - loss = mean over samples of -log softmax(z_i)_{y_i} = m_i + log S_i - z_{i,y_i}.
 * The AUCs are NAN when fewer than two classes are present in y. Non-finite logits are not rejected; they
 * give a non-finite loss and meaningless scores.
 * Memory: O(n + classes^2) doubles (the OvO table), no copy of the logits.
 * Returns FH_OK, or FH_ERR_USAGE for n < 1 / classes < 2 / a label out of range (the message names the
 * label and its row) / a NULL pointer, FH_ERR_IO when memory runs out (fh_calloc). */
int fl_eval_metrics(FlEvalMetrics *out, const float *logits, const int32_t *labels, int64_t n, int classes);

/* The work arrays of the metrics for up to n samples of up to `classes` classes: O(n + classes^2) doubles
 * (fl_eval_metrics_work_bytes), made once so that repeated evaluations allocate nothing. */
typedef struct {
    int64_t n;
    int classes;
    double *row_max, *row_sum, *row_buf; /* [n], [n], [classes] */
    int64_t *n_true, *n_pred, *n_tp;     /* [classes] */
    int64_t *start, *fill;               /* [classes + 1], [classes]: per-class runs of the split column */
    struct ScoreItem *items;             /* [2n]: sort buffer and its scratch */
    double *runs;                        /* [n]: column scores split by label, each run sorted */
    double *auc_ovr;                     /* [classes] */
    double *auc_pair;                    /* [classes * classes]: A_ab at a * classes + b */
} FlEvalMetricsWork;
int fl_eval_metrics_work_init(FlEvalMetricsWork *w, int64_t n, int classes);
void fl_eval_metrics_work_free(FlEvalMetricsWork *w);
int64_t fl_eval_metrics_work_bytes(int64_t n, int classes);
/* fl_eval_metrics in the work arrays w (n and classes at most w's); allocates nothing */
int fl_eval_metrics_with(FlEvalMetrics *out, FlEvalMetricsWork *w, const float *logits, const int32_t *labels,
                         int64_t n, int classes);

/* Mann–Whitney AUC with average ranks for ties (ties count 1/2): scores [n], positive[n] in {0,1}
 * (any non-zero value counts as positive). AUC = (sum of the positives' ranks - P(P+1)/2) / (P N).
 * NaN scores rank above every number and tie with each other.
 * Returns NAN when either class is empty (or n < 1), and also when memory runs out (the error message is
 * then set, as by fh_calloc). */
double fl_auc_binary(const double *scores, const uint8_t *positive, int64_t n);

#endif
