/* fedhet report DIR: summary tables and plots of a run folder, a grid folder or a folder of run folders
 * (statistics of spec/baselines-and-protocols.md C.2 and C.3). */
#ifndef FEDHET_APP_REPORT_H
#define FEDHET_APP_REPORT_H

#define REPORT_MAX_TARGETS 16

typedef struct {
    const char *dir;      /* what to summarise */
    const char *out_dir;  /* where summary.csv, summary.md and the PNGs go; NULL: dir */
    const char *metric;   /* metrics.csv column; NULL: test_accuracy */
    const char *seed_key; /* the key whose runs are repetitions; NULL: fl.seed */
    const char *x;        /* the curves' x axis: round, passes, bytes or seconds; NULL: round */
    int last_k;           /* the "mean of the last k rounds" window */
    double targets[REPORT_MAX_TARGETS];
    int n_targets;
    int plots;            /* 0: tables only */
} ReportOptions;

void report_options_default(ReportOptions *o);
int report_runs(const ReportOptions *o);

/* ---- statistics (spec C.2, C.3), exposed for tests ---- */
/* mean, and sample std (divisor n - 1; NAN for n < 2) of the finite values among x[0..n) */
void report_mean_std(const double *x, int n, double *mean, double *std, int *count);
/* the smallest 1-based round t + 1 with a[t] >= target among finite values, or 0 when never */
int report_rounds_to(const double *a, int n, double target);
/* mean of the last k finite values (all when fewer) */
double report_last_k_mean(const double *a, int n, int k);

#endif
