/* What a report's figures are drawn from (src/analysis/report_figures.c): its configurations and their curves, made
 * by report.c from the runs, or read back from a report folder's summary.csv and curves.csv (fedhet report
 * --redraw), so that a committed report's figures can be drawn again without its runs. */
#ifndef FEDHET_REPORT_INTERNAL_H
#define FEDHET_REPORT_INTERNAL_H

#include <stddef.h>

#include "fedhet/analysis.h"
#include "fedhet/grid.h"

#define REPORT_MAX_KEYS GRID_MAX_AXES
#define REPORT_PATHN 4400

/* curves.csv columns after the configuration's: the round, its runs, the metric's mean, min and max over them,
 * and the means of the cumulative cost columns (NAN where a run lacks them) */
enum { CURVE_ROUND, CURVE_RUNS, CURVE_MEAN, CURVE_MIN, CURVE_MAX, CURVE_PASSES, CURVE_BYTES, CURVE_SECONDS, CURVE_N };

typedef struct {
    char name[REPORT_PATHN];   /* the report's name in titles: the folder's last part */
    char metric[128];          /* the metrics.csv column summarised */
    int n_seeds;               /* runs per configuration over seeds; 0: no seed key */
    int n_keys;                /* swept keys, the seed's aside */
    char key[REPORT_MAX_KEYS][128], label[REPORT_MAX_KEYS][128]; /* algo.rho, and rho (the last part unless shared) */
    int n_configs;
    char **values;             /* [n_configs * n_keys] as given ("-": the configuration leaves the key unset) */
    char **fallback;           /* [n_configs] the label when no key tells configurations apart */
    double *final_mean, *final_std; /* [n_configs] the final metric over the configuration's runs */
    int n_rows;                /* curve rows, configuration by configuration, rounds ascending */
    int *row_config;           /* [n_rows] */
    double (*rows)[CURVE_N];   /* [n_rows] */
} ReportTables;

/* room for n_configs configurations of n_keys keys and n_rows curve rows (zeroed; NULL strings) */
int report_tables_alloc(ReportTables *T, int n_configs, int n_rows);
void report_tables_free(ReportTables *T);
/* "rho=0.05, lr=0.1": the keys of configuration c, other than `skip` (-1: none), that differ between the
 * configurations and that c sets; when that leaves nothing although a key differs, the differing keys with '-';
 * else its fallback */
void report_tables_label(const ReportTables *T, int c, int skip, char *out, size_t size);
/* curves.csv: the configuration's label and key values, then the CURVE_* columns, a row per round */
int report_curves_write(const ReportTables *T, const char *path);
/* out_dir/accuracy.png (METRIC.png for another metric, -X before .png for --x X) when there are curve rows, and
 * out_dir/sensitivity-LABEL.png for every key with two values or more; their paths into figures[*n] */
int report_figures_draw(const ReportTables *T, const char *x, const char *out_dir, char figures[][REPORT_PATHN], int *n);

#endif
