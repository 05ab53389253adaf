/* fedhet report DIR (analysis.h): run folders -> summary.csv, summary.md, accuracy.png and one
 * sensitivity-<key>.png per swept key.
 *
 * Runs: DIR itself when it holds metrics.csv; the members of a grid folder (grid/grid.ini, their states
 * from grid/status); else every subfolder holding metrics.csv. The swept keys are the grid's lists, or
 * for a plain folder the config keys whose values differ between the runs' config.ini (output.* aside).
 * Runs that differ only in the seed key form one configuration: per-run statistics first (final value,
 * mean of the last k rounds, best, rounds to each target), then mean and sample std over the runs.
 * When the runs differ in their partition file ([data] path), summary.csv also carries its heterogeneity
 * statistics (data.h DataHetero), so that the metric can be set against measured heterogeneity. */
#include "report_internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fedhet/core.h"
#include "fedhet/data.h"
#include "fedhet/grid.h"
#include "fedhet/config.h"
#include "fedhet/fl.h"

#define MAX_KEYS REPORT_MAX_KEYS
#define REPORT_PARTITION_STATS 5
#define PATHN REPORT_PATHN

/* The options of fedhet report DIR, as `--KEY VALUE` (a BOOL: `--KEY` alone), with their defaults */
static const FhConfigKey options[] = {
    { .section = "report", .key = "out", .type = FH_CFG_STRING,
      .help = "the folder to write into (its last part a plain name); default: DIR" },
    { .section = "report", .key = "last", .type = FH_CFG_INT, .def.i = 10, .lo = 1, .hi = 1e9,
      .help = "window K of the last-K mean" },
    { .section = "report", .key = "targets", .type = FH_CFG_STRING, .def.s = "0.5,0.6,0.7,0.8",
      .help = "comma-separated accuracies for rounds-to-target" },
    { .section = "report", .key = "metric", .type = FH_CFG_STRING, .def.s = "test_accuracy",
      .help = "the metrics.csv column (e.g. test_balanced_accuracy, test_loss)" },
    { .section = "report", .key = "seed-key", .type = FH_CFG_STRING, .def.s = "fl.seed",
      .help = "the key whose values are repetitions" },
    { .section = "report", .key = "x", .type = FH_CFG_CHOICE, .def.s = "round", .choices = "round|passes|bytes|seconds",
      .help = "the curves' x axis: passes = cumulative per-sample backward passes of local training summed over the "
              "clients (metrics.csv cum_train_backward; a SAM step counts two), bytes = cumulative bytes sent down and "
              "up (cum_bytes_down + cum_bytes_up), seconds = cumulative wall seconds (cum_seconds); a configuration's "
              "x is the mean over its runs. The figure is METRIC-AXIS.png (e.g. accuracy-passes.png). summary.csv "
              "gives passes and bytes to each target beside the rounds (passes_to_T_mean, bytes_to_T_mean) whatever "
              "the axis. Runs made before metrics.csv had these columns: round only (others exit 2 naming the "
              "column)" },
    { .section = "report", .key = "no-plots", .type = FH_CFG_BOOL, .help = "tables only" },
    { .section = "report", .key = "redraw", .type = FH_CFG_BOOL,
      .help = "only the figures, drawn again from DIR's own summary.csv and curves.csv (name and metric from its "
              "summary.md), without the runs: a committed report's figures after a change of their drawing. A report "
              "made before curves.csv existed gets its sensitivity figures only" },
};

const FhConfigKey *report_option_keys(int *n)
{
    *n = (int)(sizeof options / sizeof options[0]);
    return options;
}

const FhConfigKey *report_option(const char *key)
{
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        if (!strcmp(options[i].key, key)) return &options[i];
    return NULL;
}

int report_parse_targets(const char *text, ReportOptions *o)
{
    o->n_targets = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->n_targets == REPORT_MAX_TARGETS) FH_FAIL(FH_ERR_USAGE, "--targets: at most %d values", REPORT_MAX_TARGETS);
        char *end;
        errno = 0;
        const double t = strtod(tok, &end);
        if (end == tok || *end || errno || !isfinite(t)) FH_FAIL(FH_ERR_USAGE, "--targets: '%s' is not a number", tok);
        o->targets[o->n_targets++] = t;
    }
    return FH_OK;
}

void report_options_default(ReportOptions *o)
{
    memset(o, 0, sizeof *o);
    o->metric = report_option("metric")->def.s;
    o->seed_key = report_option("seed-key")->def.s;
    o->x = report_option("x")->def.s;
    o->last_k = (int)report_option("last")->def.i;
    report_parse_targets(report_option("targets")->def.s, o);
    o->plots = !report_option("no-plots")->def.b;
}

/* ---- statistics ---------------------------------------------------------------------------------------- */

void report_mean_std(const double *x, int n, double *mean, double *std, int *count)
{
    double s = 0;
    int c = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i])) s += x[i], c++;
    *count = c;
    *mean = c ? s / c : NAN;
    if (c < 2) {
        *std = NAN;
        return;
    }
    double ss = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i])) ss += (x[i] - *mean) * (x[i] - *mean);
    *std = sqrt(ss / (c - 1));
}

int report_rounds_to(const double *a, int n, double target)
{
    for (int t = 0; t < n; t++)
        if (isfinite(a[t]) && a[t] >= target) return t + 1;
    return 0;
}

double report_last_k_mean(const double *a, int n, int k)
{
    double s = 0;
    int c = 0;
    for (int t = n - 1; t >= 0 && c < k; t--)
        if (isfinite(a[t])) s += a[t], c++;
    return c ? s / c : NAN;
}

/* ---- runs ---------------------------------------------------------------------------------------------- */

typedef struct {
    char name[1024];
    char dir[PATHN];
    char *values[MAX_KEYS]; /* per swept key */
    int has_metrics;
    int rounds_planned, n_rows;
    double *metric, *t_round, *t_eval; /* [n_rows], by round index */
    double *passes, *bytes, *seconds;   /* [n_rows] cumulative cost (NAN when metrics.csv predates the cum_* columns) */
    unsigned columns;                   /* bit j: metrics.csv has column j of read_metrics (MC_*) */
    char state[32];         /* "done", "failed", "incomplete", ... */
    char message[1100];
    /* statistics */
    double final, last_k, best, wall, round_s;
    int to_target[REPORT_MAX_TARGETS];
    double passes_to[REPORT_MAX_TARGETS], bytes_to[REPORT_MAX_TARGETS]; /* at that round; NAN when not reached */
    int group;
    char data_path[PATHN];  /* [data] path of its config.ini */
    double partition[REPORT_PARTITION_STATS]; /* its partition's heterogeneity; NAN when unknown */
} Run;

typedef struct {
    char key[128], label[128]; /* resolved key, short label */
} Key;

typedef struct {
    const ReportOptions *o;
    char title[PATHN];
    int grid, single;
    Run *runs;
    int n_runs;
    Key keys[MAX_KEYS];
    int n_keys;
    int seed_key;               /* index into keys, -1 when the seed is not swept */
    int *group_first;           /* run index of each group's first run */
    int n_groups;
    int partitions_differ;      /* the runs name more than one partition file */
    ReportTables T;             /* the configurations (group g: row g) and curves the labels and figures use */
} Report;

static int parse_double(const char *s, double *v)
{
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return errno == 0 && *end == '\0' && end != s;
}

/* metrics.csv columns a report reads, in this order (the metric is --metric) */
enum { MC_ROUND, MC_METRIC, MC_T_ROUND, MC_T_EVAL, MC_PASSES, MC_BYTES_DOWN, MC_BYTES_UP, MC_SECONDS, MC_N };
static const char *const cost_column_names[MC_N] = { [MC_PASSES] = "cum_train_backward",
                                                     [MC_BYTES_DOWN] = "cum_bytes_down",
                                                     [MC_BYTES_UP] = "cum_bytes_up", [MC_SECONDS] = "cum_seconds" };

/* The cost column that --x x needs and run r lacks, or NULL */
static const char *missing_x_column(const Run *r, const char *x)
{
    int need[2] = { -1, -1 };
    if (!strcmp(x, "passes")) need[0] = MC_PASSES;
    else if (!strcmp(x, "bytes")) need[0] = MC_BYTES_DOWN, need[1] = MC_BYTES_UP;
    else if (!strcmp(x, "seconds")) need[0] = MC_SECONDS;
    for (int i = 0; i < 2; i++)
        if (need[i] >= 0 && !(r->columns & (1u << need[i]))) return cost_column_names[need[i]];
    return NULL;
}

/* metrics.csv: the metric column, the round timings and the cumulative cost, NAN where empty */
static int read_metrics(Run *r, const char *metric)
{
    char path[PATHN + 32];
    snprintf(path, sizeof path, "%s/metrics.csv", r->dir);
    char *text = NULL;
    FH_CHECK(fh_read_file(path, &text, FH_ERR_DATA));
    int cols[MC_N];
    const char *names[MC_N] = { "round", metric, "t_round", "t_eval" };
    for (int j = MC_PASSES; j < MC_N; j++) names[j] = cost_column_names[j];
    for (int j = 0; j < MC_N; j++) cols[j] = -1;
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    if (!line) {
        free(text);
        FH_FAIL(FH_ERR_DATA, "%s is empty", path);
    }
    int c = 0;
    for (char *p = line;; c++) {
        char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        for (int j = 0; j < MC_N; j++)
            if (strlen(names[j]) == n && !strncmp(p, names[j], n)) cols[j] = c;
        if (!comma) break;
        p = comma + 1;
    }
    if (cols[MC_METRIC] < 0) {
        free(text);
        FH_FAIL(FH_ERR_USAGE, "%s has no column %s (--metric names a column of metrics.csv, e.g. test_accuracy, "
                "test_loss, test_balanced_accuracy)", path, metric);
    }
    r->columns = 0;
    for (int j = 0; j < MC_N; j++)
        if (cols[j] >= 0) r->columns |= 1u << j;
    int cap = 64, n_rows = 0;
    double *rows = malloc((size_t)cap * MC_N * sizeof *rows);
    for (line = strtok_r(NULL, "\n", &save); line && rows; line = strtok_r(NULL, "\n", &save)) {
        if (n_rows == cap) {
            cap *= 2;
            double *grown = realloc(rows, (size_t)cap * MC_N * sizeof *rows);
            if (!grown) {
                free(rows);
                rows = NULL;
                break;
            }
            rows = grown;
        }
        double v[MC_N];
        for (int j = 0; j < MC_N; j++) v[j] = NAN;
        c = 0;
        for (char *p = line;; c++) {
            char *comma = strchr(p, ',');
            if (comma) *comma = '\0';
            for (int j = 0; j < MC_N; j++)
                if (cols[j] == c && !parse_double(p, &v[j])) v[j] = NAN;
            if (!comma) break;
            p = comma + 1;
        }
        memcpy(rows + (size_t)n_rows * MC_N, v, sizeof v);
        n_rows++;
    }
    free(text);
    if (!rows) FH_FAIL(FH_ERR_MEMORY, "out of memory reading %s", path);
    r->n_rows = n_rows;
    double **out[] = { &r->metric, &r->t_round, &r->t_eval, &r->passes, &r->bytes, &r->seconds };
    for (size_t j = 0; j < sizeof out / sizeof *out; j++) *out[j] = calloc((size_t)n_rows + 1, sizeof(double));
    if (!r->metric || !r->t_round || !r->t_eval || !r->passes || !r->bytes || !r->seconds) {
        free(rows);
        FH_FAIL(FH_ERR_MEMORY, "out of memory reading %s", path);
    }
    for (int i = 0; i < n_rows; i++) {
        const double *v = rows + (size_t)i * MC_N;
        r->metric[i] = v[MC_METRIC];
        r->t_round[i] = v[MC_T_ROUND];
        r->t_eval[i] = v[MC_T_EVAL];
        r->passes[i] = v[MC_PASSES];
        r->bytes[i] = v[MC_BYTES_DOWN] + v[MC_BYTES_UP]; /* NAN when either is absent */
        r->seconds[i] = v[MC_SECONDS];
    }
    free(rows);
    r->has_metrics = 1;
    return FH_OK;
}

static int add_run(Report *R, const char *dir, const char *name)
{
    Run *grown = realloc(R->runs, (size_t)(R->n_runs + 1) * sizeof *grown);
    if (!grown) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    R->runs = grown;
    Run *r = &R->runs[R->n_runs++];
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->final = r->last_k = r->best = NAN;
    for (int i = 0; i < REPORT_PARTITION_STATS; i++) r->partition[i] = NAN;
    return FH_OK;
}

/* fl.rounds and the values of `keys` from the run's config.ini */
static int read_run_config(Run *r, FhIni *ini)
{
    char path[PATHN + 32];
    snprintf(path, sizeof path, "%s/config.ini", r->dir);
    FH_CHECK(fh_ini_load(ini, path, FH_ERR_DATA));
    const char *v = fh_ini_get(ini, "fl", "rounds");
    r->rounds_planned = v ? atoi(v) : 0;
    v = fh_ini_get(ini, "data", "path");
    snprintf(r->data_path, sizeof r->data_path, "%s", v ? v : "");
    return FH_OK;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int values_equal(const char *a, const char *b)
{
    double x, y;
    if (parse_double(a, &x) && parse_double(b, &y)) return x == y;
    return !strcmp(a, b);
}

/* A plain folder: subfolders with metrics.csv; swept keys = config keys that differ. */
static int collect_folder(Report *R, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) FH_FAIL(FH_ERR_DATA, "%s: cannot open: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char sub[PATHN];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        if (!fh_path_exists(sub, "metrics.csv")) continue;
        char **grown = realloc(names, (size_t)(n + 1) * sizeof *names);
        if (!grown) break;
        names = grown;
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_names);
    int status = FH_OK;
    for (int i = 0; i < n && status == FH_OK; i++) {
        char sub[PATHN];
        snprintf(sub, sizeof sub, "%s/%s", dir, names[i]);
        status = add_run(R, sub, names[i]);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    FH_CHECK(status);
    if (R->n_runs == 0)
        FH_FAIL(FH_ERR_USAGE, "%s holds no run: no metrics.csv in it or in its subfolders (give a run folder, a grid "
                "folder or a folder of runs; --partition DST.h5 OUT.png draws a partition file)", dir);

    /* every run's config; keys whose values differ are swept */
    FhIni *cfg = calloc((size_t)R->n_runs, sizeof *cfg);
    if (!cfg) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    for (int i = 0; i < R->n_runs && status == FH_OK; i++) status = read_run_config(&R->runs[i], &cfg[i]);
    for (int i = 0; i < R->n_runs && status == FH_OK; i++)
        for (int j = 0; j < cfg[i].n && status == FH_OK; j++) {
            const FhIniEntry *en = &cfg[i].entries[j];
            if (!strcmp(en->section, "output")) continue;
            char key[128];
            snprintf(key, sizeof key, "%s.%s", en->section, en->key);
            int known = 0;
            for (int k = 0; k < R->n_keys; k++) known |= !strcmp(R->keys[k].key, key);
            if (known) continue;
            int differs = 0;
            for (int m = 0; m < R->n_runs && !differs; m++) {
                const char *v = fh_ini_get(&cfg[m], en->section, en->key);
                differs = !v || !values_equal(v, en->value);
            }
            if (!differs) continue;
            if (R->n_keys == MAX_KEYS) {
                status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s: the runs differ in more than %d keys", dir,
                                        MAX_KEYS);
                break;
            }
            snprintf(R->keys[R->n_keys].key, sizeof R->keys[0].key, "%s", key);
            R->n_keys++;
        }
    for (int i = 0; i < R->n_runs && status == FH_OK; i++)
        for (int k = 0; k < R->n_keys; k++) {
            char sec[128];
            snprintf(sec, sizeof sec, "%s", R->keys[k].key);
            char *dot = strchr(sec, '.');
            *dot = '\0';
            const char *v = fh_ini_get(&cfg[i], sec, dot + 1);
            R->runs[i].values[k] = strdup(v ? v : "(default)");
        }
    for (int i = 0; i < R->n_runs; i++) fh_ini_free(&cfg[i]);
    free(cfg);
    return status;
}

/* A grid folder: its members in order, their lists, their states. */
static int collect_grid(Report *R, const char *dir)
{
    char path[PATHN], *args_text = NULL;
    snprintf(path, sizeof path, "%s/grid/args.txt", dir);
    FH_CHECK(fh_read_file(path, &args_text, FH_ERR_DATA));
    char *args[512];
    int n = 0;
    for (char *save = NULL, *line = strtok_r(args_text, "\n", &save); line && n < 512; line = strtok_r(NULL, "\n", &save))
        if (*line) args[n++] = line;
    snprintf(path, sizeof path, "%s/grid/grid.ini", dir);
    GridSpec g;
    int status = grid_spec_load(&g, path, args, n);
    free(args_text);
    FH_CHECK(status);
    for (int a = 0; a < g.n_axes; a++) {
        snprintf(R->keys[a].key, sizeof R->keys[a].key, "%s", g.axes[a].key);
        snprintf(R->keys[a].label, sizeof R->keys[a].label, "%s", g.axes[a].short_name);
    }
    R->n_keys = g.n_axes;
    for (int64_t i = 0; i < g.n_members && status == FH_OK; i++) {
        char name[1024], sub[PATHN];
        grid_member_name(&g, i, name, sizeof name);
        snprintf(sub, sizeof sub, "%s/%s", dir, name);
        status = add_run(R, sub, name);
        if (status != FH_OK) break;
        Run *r = &R->runs[R->n_runs - 1];
        for (int a = 0; a < g.n_axes; a++) r->values[a] = strdup(grid_member_value(&g, i, a));
        GridStatus s;
        status = grid_status_read(dir, name, &s);
        if (status != FH_OK) break;
        snprintf(r->state, sizeof r->state, "%s", grid_state_name(s.state));
        if (s.state == GRID_FAILED) snprintf(r->message, sizeof r->message, "exit %d: %s", s.exit_code, s.message);
        FhIni cfg;
        if (fh_path_exists(sub, "config.ini") && read_run_config(r, &cfg) == FH_OK) fh_ini_free(&cfg);
        else fh_error_clear();
    }
    grid_spec_free(&g);
    return status;
}

/* ---- grouping ------------------------------------------------------------------------------------------ */

static int compare_values(const char *a, const char *b)
{
    double x, y;
    if (parse_double(a, &x) && parse_double(b, &y)) return (x > y) - (x < y);
    return strcmp(a, b);
}

static const Report *sort_ctx;

/* by the swept keys in order, the seed last */
static int compare_runs(const void *pa, const void *pb)
{
    const Run *a = pa, *b = pb;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < sort_ctx->n_keys; k++) {
            if ((k == sort_ctx->seed_key) != pass) continue;
            int c = compare_values(a->values[k], b->values[k]);
            if (c) return c;
        }
    return strcmp(a->name, b->name);
}

static int same_config(const Report *R, const Run *a, const Run *b)
{
    for (int k = 0; k < R->n_keys; k++)
        if (k != R->seed_key && strcmp(a->values[k], b->values[k])) return 0;
    return 1;
}

static void find_seed_key(Report *R)
{
    R->seed_key = -1;
    const char *want = R->o->seed_key;
    for (int k = 0; k < R->n_keys; k++) {
        const char *dot = strchr(R->keys[k].key, '.');
        if (!strcmp(R->keys[k].key, want) || (!strchr(want, '.') && dot && !strcmp(dot + 1, want))) R->seed_key = k;
    }
    for (int k = 0; k < R->n_keys; k++)
        if (!R->keys[k].label[0]) {
            /* short label: the part after the dot unless two keys share it */
            const char *part = strchr(R->keys[k].key, '.') + 1;
            int clash = 0;
            for (int j = 0; j < R->n_keys; j++)
                if (j != k && !strcmp(strchr(R->keys[j].key, '.') + 1, part)) clash = 1;
            snprintf(R->keys[k].label, sizeof R->keys[k].label, "%s", clash ? R->keys[k].key : part);
        }
}

static int usable(const Report *R, const Run *r)
{
    if (!r->has_metrics || r->n_rows == 0) return 0;
    if (R->single) return 1;
    return r->rounds_planned <= 0 || r->n_rows >= r->rounds_planned;
}

static void run_stats(const Report *R, Run *r)
{
    const ReportOptions *o = R->o;
    r->final = report_last_k_mean(r->metric, r->n_rows, 1);
    r->last_k = report_last_k_mean(r->metric, r->n_rows, o->last_k);
    r->best = NAN;
    for (int t = 0; t < r->n_rows; t++)
        if (isfinite(r->metric[t]) && !(r->best >= r->metric[t])) r->best = r->metric[t];
    for (int j = 0; j < o->n_targets; j++) {
        r->to_target[j] = report_rounds_to(r->metric, r->n_rows, o->targets[j]);
        const int at = r->to_target[j] - 1;
        r->passes_to[j] = at >= 0 ? r->passes[at] : NAN;
        r->bytes_to[j] = at >= 0 ? r->bytes[at] : NAN;
    }
    r->wall = 0;
    double s = 0;
    int c = 0;
    for (int t = 0; t < r->n_rows; t++) {
        if (isfinite(r->t_round[t])) r->wall += r->t_round[t];
        if (isfinite(r->t_eval[t])) r->wall += r->t_eval[t];
        /* docs/methods/metrics.md C.8: round 0 is warm-up */
        if ((t > 0 || r->n_rows == 1) && isfinite(r->t_round[t])) s += r->t_round[t], c++;
    }
    r->round_s = c ? s / c : NAN;
    if (!r->state[0]) snprintf(r->state, sizeof r->state, "%s", usable(R, r) ? "done" : "incomplete");
}

/* ---- the runs' partitions ------------------------------------------------------------------------------ */

/* summary.csv columns of the runs' partitions: client means of label entropy (nats), effective classes, TV
 * and EMD to the global labels, and the size Gini (data.h DataHetero) */
static const char *const partition_columns[REPORT_PARTITION_STATS] = {
    "partition_entropy_nats_mean", "partition_effective_classes_mean", "partition_tv_mean", "partition_emd_mean",
    "partition_size_gini",
};

static int partition_summary(const char *path, double out[REPORT_PARTITION_STATS])
{
    DataPartFile f;
    FH_CHECK(data_partfile_open(&f, path));
    DataHetero h;
    int stored;
    int status = data_partfile_hetero(&f, &h, &stored);
    data_partfile_close(&f);
    FH_CHECK(status);
    const double *per_client[4] = { h.entropy, h.effective_classes, h.tv, h.emd };
    for (int i = 0; i < 4; i++) {
        double s[4];
        data_summary4(per_client[i], h.n_clients, s);
        out[i] = s[3];
    }
    out[4] = h.size_gini;
    data_hetero_free(&h);
    return FH_OK;
}

/* When the runs name different partition files, each run's heterogeneity summary (read once per file). A
 * file that cannot be read leaves its runs' columns empty with a warning: the accuracy table stands
 * without it (partition files are often kept elsewhere than the runs). */
static void partition_stats(Report *R)
{
    const char *first = NULL;
    R->partitions_differ = 0;
    for (int i = 0; i < R->n_runs && !R->partitions_differ; i++) {
        const char *path = R->runs[i].data_path;
        if (!path[0]) continue; /* no config.ini (a member that never started) */
        if (!first) first = path;
        else if (strcmp(path, first)) R->partitions_differ = 1;
    }
    if (!R->partitions_differ) return;
    for (int i = 0; i < R->n_runs; i++) {
        Run *r = &R->runs[i];
        if (!r->data_path[0]) continue;
        int seen = -1;
        for (int j = 0; j < i && seen < 0; j++)
            if (!strcmp(R->runs[j].data_path, r->data_path)) seen = j;
        if (seen >= 0) {
            memcpy(r->partition, R->runs[seen].partition, sizeof r->partition);
            continue;
        }
        if (partition_summary(r->data_path, r->partition) != FH_OK) {
            const char *message = fh_error_message(), *end = strchr(message, '\n');
            fprintf(stderr, "fedhet report: warning: run %s: its partition's statistics are left empty in summary.csv: "
                    "%.*s\n", r->name, end ? (int)(end - message) : (int)strlen(message), message);
            fh_error_clear();
            for (int k = 0; k < REPORT_PARTITION_STATS; k++) r->partition[k] = NAN;
        }
    }
}

/* ---- group statistics ---------------------------------------------------------------------------------- */

typedef struct {
    int n;                       /* usable runs */
    double final_m, final_s, last_m, last_s, best_m, best_s, wall_m, round_m;
    double to_m[REPORT_MAX_TARGETS], passes_to_m[REPORT_MAX_TARGETS], bytes_to_m[REPORT_MAX_TARGETS];
    int to_n[REPORT_MAX_TARGETS];
    int rounds;                  /* most rows among its runs */
    double partition[REPORT_PARTITION_STATS]; /* mean over its runs with a known partition */
} GroupStats;

static void group_stats(const Report *R, int g, GroupStats *G)
{
    memset(G, 0, sizeof *G);
    double f[4096], l[4096], b[4096], w[4096], rs[4096];
    int n = 0;
    for (int i = 0; i < R->n_runs; i++) {
        const Run *r = &R->runs[i];
        if (r->group != g || !usable(R, r) || n == 4096) continue;
        f[n] = r->final, l[n] = r->last_k, b[n] = r->best, w[n] = r->wall, rs[n] = r->round_s;
        if (r->n_rows > G->rounds) G->rounds = r->n_rows;
        n++;
    }
    G->n = n;
    int c;
    double dummy;
    report_mean_std(f, n, &G->final_m, &G->final_s, &c);
    report_mean_std(l, n, &G->last_m, &G->last_s, &c);
    report_mean_std(b, n, &G->best_m, &G->best_s, &c);
    report_mean_std(w, n, &G->wall_m, &dummy, &c);
    report_mean_std(rs, n, &G->round_m, &dummy, &c);
    for (int p = 0; p < REPORT_PARTITION_STATS; p++) {
        double v[4096], std;
        int m = 0;
        for (int i = 0; i < R->n_runs; i++)
            if (R->runs[i].group == g && usable(R, &R->runs[i]) && m < 4096) v[m++] = R->runs[i].partition[p];
        report_mean_std(v, m, &G->partition[p], &std, &c);
    }
    for (int j = 0; j < R->o->n_targets; j++) {
        double s = 0;
        int k = 0;
        for (int i = 0; i < R->n_runs; i++) {
            const Run *r = &R->runs[i];
            if (r->group == g && usable(R, r) && r->to_target[j] > 0) s += r->to_target[j], k++;
        }
        G->to_n[j] = k;
        G->to_m[j] = k ? s / k : NAN;
        /* passes and bytes at that round, over the same runs (NAN when a run predates the cum_* columns) */
        double p = 0, b = 0;
        for (int i = 0; i < R->n_runs; i++) {
            const Run *r = &R->runs[i];
            if (r->group == g && usable(R, r) && r->to_target[j] > 0) p += r->passes_to[j], b += r->bytes_to[j];
        }
        G->passes_to_m[j] = k ? p / k : NAN;
        G->bytes_to_m[j] = k ? b / k : NAN;
    }
}

/* ---- tables -------------------------------------------------------------------------------------------- */

static void fmt_num(char *out, size_t size, double v, const char *f)
{
    if (isfinite(v)) snprintf(out, size, f, v);
    else snprintf(out, size, "%s", "");
}

static void fmt_pm(char *out, size_t size, double m, double s)
{
    if (!isfinite(m)) snprintf(out, size, "—");
    else if (!isfinite(s)) snprintf(out, size, "%.4f", m);
    else snprintf(out, size, "%.4f ± %.4f", m, s);
}

/* configuration g's statistics, and the cells every table shows of it: label, final, last-k, best */
typedef struct {
    char label[1024], final[64], last[64], best[64];
} GroupCells;

static void group_row(const Report *R, int g, GroupStats *G, GroupCells *cells)
{
    group_stats(R, g, G);
    report_tables_label(&R->T, g, -1, cells->label, sizeof cells->label);
    fmt_pm(cells->final, sizeof cells->final, G->final_m, G->final_s);
    fmt_pm(cells->last, sizeof cells->last, G->last_m, G->last_s);
    fmt_pm(cells->best, sizeof cells->best, G->best_m, G->best_s);
}

static int write_summary_csv(const Report *R, const char *path)
{
    const ReportOptions *o = R->o;
    FhAtomicFile out;
    FH_CHECK(fh_atomic_open(&out, path));
    FILE *f = out.f;
    fprintf(f, "config");
    for (int k = 0; k < R->n_keys; k++)
        if (k != R->seed_key) fprintf(f, ",%s", R->keys[k].key);
    fprintf(f, ",runs,rounds,final_mean,final_std,last%d_mean,last%d_std,best_mean,best_std", o->last_k, o->last_k);
    for (int j = 0; j < o->n_targets; j++)
        fprintf(f, ",rounds_to_%g_mean,rounds_to_%g_reached,passes_to_%g_mean,bytes_to_%g_mean", o->targets[j],
                o->targets[j], o->targets[j], o->targets[j]);
    fprintf(f, ",wall_s_mean,round_s_mean");
    for (int p = 0; R->partitions_differ && p < REPORT_PARTITION_STATS; p++) fprintf(f, ",%s", partition_columns[p]);
    fprintf(f, "\n");
    for (int g = 0; g < R->n_groups; g++) {
        const Run *first = &R->runs[R->group_first[g]];
        GroupStats G;
        group_stats(R, g, &G);
        char label[1024], a[64];
        report_tables_label(&R->T, g, -1, label, sizeof label);
        fprintf(f, "\"%s\"", label);
        for (int k = 0; k < R->n_keys; k++)
            if (k != R->seed_key) fprintf(f, ",%s", first->values[k]);
        fprintf(f, ",%d,%d", G.n, G.rounds);
        const double v[6] = { G.final_m, G.final_s, G.last_m, G.last_s, G.best_m, G.best_s };
        for (int i = 0; i < 6; i++) {
            fmt_num(a, sizeof a, v[i], "%.6f");
            fprintf(f, ",%s", a);
        }
        for (int j = 0; j < o->n_targets; j++) {
            char p[64], b[64];
            fmt_num(a, sizeof a, G.to_m[j], "%.2f");
            fmt_num(p, sizeof p, G.passes_to_m[j], "%.1f");
            fmt_num(b, sizeof b, G.bytes_to_m[j], "%.1f");
            fprintf(f, ",%s,%d,%s,%s", a, G.to_n[j], p, b);
        }
        fmt_num(a, sizeof a, G.wall_m, "%.3f");
        fprintf(f, ",%s", a);
        fmt_num(a, sizeof a, G.round_m, "%.4f");
        fprintf(f, ",%s", a);
        for (int p = 0; R->partitions_differ && p < REPORT_PARTITION_STATS; p++) {
            fmt_num(a, sizeof a, G.partition[p], "%.6f");
            fprintf(f, ",%s", a);
        }
        fprintf(f, "\n");
    }
    return fh_atomic_commit(&out);
}

static void key_list(const Report *R, int k, char *out, size_t size)
{
    /* the distinct values of key k in run order */
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < R->n_runs && used + 1 < size; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = !strcmp(R->runs[j].values[k], R->runs[i].values[k]);
        if (!seen) used += (size_t)snprintf(out + used, size - used, "%s%s", used ? ", " : "", R->runs[i].values[k]);
    }
}

static int write_summary_md(const Report *R, const char *path, char figures[][PATHN], int n_figures)
{
    const ReportOptions *o = R->o;
    FhAtomicFile out;
    FH_CHECK(fh_atomic_open(&out, path));
    FILE *f = out.f;
    int n_usable = 0;
    for (int i = 0; i < R->n_runs; i++) n_usable += usable(R, &R->runs[i]);
    fprintf(f, "# %s\n\n", R->title);
    if (R->single)
        fprintf(f, "One run, %d rounds.", R->runs[0].n_rows);
    else {
        fprintf(f, "%d run%s (%d finished) in %d configuration%s", R->n_runs, R->n_runs == 1 ? "" : "s", n_usable,
                R->n_groups, R->n_groups == 1 ? "" : "s");
        if (R->seed_key >= 0) {
            char l[1024];
            key_list(R, R->seed_key, l, sizeof l);
            fprintf(f, " over seeds %s = %s", R->keys[R->seed_key].key, l);
        }
        fprintf(f, ".");
        for (int k = 0, first = 1; k < R->n_keys; k++) {
            if (k == R->seed_key) continue;
            char l[1024];
            key_list(R, k, l, sizeof l);
            fprintf(f, "%s%s = %s", first ? " Swept: " : "; ", R->keys[k].key, l);
            first = 0;
        }
        if (R->n_keys - (R->seed_key >= 0) > 0) fprintf(f, ".");
    }
    fprintf(f, "\n\nMetric `%s` of the global model. Per run: final = after the last round; last-%d = mean of the last %d "
               "evaluated rounds; best = the largest value (secondary, never the headline); rounds to τ = the first "
               "1-based round reaching τ. Per configuration: mean ± sample std (divisor n − 1) over its runs "
               "(docs/methods/metrics.md C.2); rounds to τ: mean over the runs that reached τ, with their count (C.3). Wall: seconds of "
               "rounds and evaluation per run; s/round: mean round time without round 1 (C.8).\n\n",
            o->metric, o->last_k, o->last_k);
    fprintf(f, "| configuration | runs | final | last-%d | best |", o->last_k);
    for (int j = 0; j < o->n_targets; j++) fprintf(f, " rounds to %g |", o->targets[j]);
    fprintf(f, " wall s | s/round |\n|---|---:|---:|---:|---:|");
    for (int j = 0; j < o->n_targets; j++) fprintf(f, "---:|");
    fprintf(f, "---:|---:|\n");
    for (int g = 0; g < R->n_groups; g++) {
        GroupStats G;
        GroupCells cells;
        group_row(R, g, &G, &cells);
        fprintf(f, "| %s | %d | %s | %s | %s |", cells.label, G.n, cells.final, cells.last, cells.best);
        for (int j = 0; j < o->n_targets; j++) {
            if (G.to_n[j]) fprintf(f, " %.1f (%d/%d) |", G.to_m[j], G.to_n[j], G.n);
            else fprintf(f, " — (0/%d) |", G.n);
        }
        char wall[64], round_s[64];
        fmt_num(wall, sizeof wall, G.wall_m, G.wall_m < 10 ? "%.2f" : "%.1f");
        fmt_num(round_s, sizeof round_s, G.round_m, "%.3f");
        fprintf(f, " %s | %s |\n", wall, round_s);
    }
    int with_cost = 0;
    for (int i = 0; i < R->n_runs; i++) with_cost |= usable(R, &R->runs[i]) && !missing_x_column(&R->runs[i], "passes");
    if (with_cost && o->n_targets > 0) {
        fprintf(f, "\nCost to τ: cumulative training backward passes (per sample, summed over clients) and bytes sent "
                   "down and up until the round that reached τ, mean over the runs that reached it (metrics.csv "
                   "`cum_train_backward`, `cum_bytes_down` + `cum_bytes_up`).\n\n| configuration |");
        for (int j = 0; j < o->n_targets; j++) fprintf(f, " passes to %g | MiB to %g |", o->targets[j], o->targets[j]);
        fprintf(f, "\n|---|");
        for (int j = 0; j < o->n_targets; j++) fprintf(f, "---:|---:|");
        fprintf(f, "\n");
        for (int g = 0; g < R->n_groups; g++) {
            GroupStats G;
            group_stats(R, g, &G);
            char label[1024], a[64], b[64];
            report_tables_label(&R->T, g, -1, label, sizeof label);
            fprintf(f, "| %s |", label);
            for (int j = 0; j < o->n_targets; j++) {
                fmt_num(a, sizeof a, G.passes_to_m[j], "%.0f");
                fmt_num(b, sizeof b, G.bytes_to_m[j] / 1048576.0, "%.1f");
                fprintf(f, " %s | %s |", a[0] ? a : "—", b[0] ? b : "—");
            }
            fprintf(f, "\n");
        }
    }
    for (int i = 0; i < n_figures; i++) {
        const char *base = strrchr(figures[i], '/') ? strrchr(figures[i], '/') + 1 : figures[i];
        fprintf(f, "\n![%s](%s)\n", base, base);
    }
    if (!R->single) {
        fprintf(f, "\n## Runs\n\n| run |");
        for (int k = 0; k < R->n_keys; k++) fprintf(f, " %s |", R->keys[k].key);
        fprintf(f, " state | rounds | final | last-%d | best | wall s |\n|---|", o->last_k);
        for (int k = 0; k < R->n_keys; k++) fprintf(f, "---|");
        fprintf(f, "---|---:|---:|---:|---:|---:|\n");
        for (int i = 0; i < R->n_runs; i++) {
            const Run *r = &R->runs[i];
            char a[64], b[64], c[64], w[64];
            fmt_num(a, sizeof a, r->final, "%.4f");
            fmt_num(b, sizeof b, r->last_k, "%.4f");
            fmt_num(c, sizeof c, r->best, "%.4f");
            fmt_num(w, sizeof w, r->has_metrics ? r->wall : NAN, r->wall < 10 ? "%.2f" : "%.1f");
            fprintf(f, "| %s |", r->name);
            for (int k = 0; k < R->n_keys; k++) fprintf(f, " %s |", r->values[k]);
            fprintf(f, " %s | %d/%d | %s | %s | %s | %s |\n", r->state, r->n_rows, r->rounds_planned, a, b, c, w);
        }
        int left_out = 0;
        for (int i = 0; i < R->n_runs; i++) left_out += !usable(R, &R->runs[i]);
        if (left_out) {
            fprintf(f, "\nNot in the statistics (%d):\n\n", left_out);
            for (int i = 0; i < R->n_runs; i++) {
                const Run *r = &R->runs[i];
                if (usable(R, r)) continue;
                if (r->message[0]) fprintf(f, "- %s: %s, %s\n", r->name, r->state, r->message);
                else fprintf(f, "- %s: %s (%d of %d rounds)\n", r->name, r->state, r->n_rows, r->rounds_planned);
            }
        }
    }
    return fh_atomic_commit(&out);
}

/* ---- the tables the labels and figures use --------------------------------------------------------------- */

/* mean of the finite values of column `col` of the group's usable runs at round index t (metric: its min and max
 * too); the runs counted */
static int round_values(const Report *R, int g, int t, double *row)
{
    double s = 0, lo = INFINITY, hi = -INFINITY, cost[3] = { 0, 0, 0 };
    int c = 0, any = 0, n_cost[3] = { 0, 0, 0 };
    for (int i = 0; i < R->n_runs; i++) {
        const Run *r = &R->runs[i];
        if (r->group != g || !usable(R, r)) continue;
        if (t < r->n_rows) any = 1;
        if (t >= r->n_rows || !isfinite(r->metric[t])) continue;
        s += r->metric[t], c++;
        lo = r->metric[t] < lo ? r->metric[t] : lo;
        hi = r->metric[t] > hi ? r->metric[t] : hi;
        const double v[3] = { r->passes[t], r->bytes[t], r->seconds[t] };
        for (int j = 0; j < 3; j++)
            if (isfinite(v[j])) cost[j] += v[j], n_cost[j]++;
    }
    row[CURVE_ROUND] = t + 1;
    row[CURVE_RUNS] = c;
    row[CURVE_MEAN] = c ? s / c : NAN;
    row[CURVE_MIN] = c ? lo : NAN;
    row[CURVE_MAX] = c ? hi : NAN;
    for (int j = 0; j < 3; j++) row[CURVE_PASSES + j] = n_cost[j] == c && c ? cost[j] / c : NAN;
    return any;
}

static int build_tables(Report *R)
{
    ReportTables *T = &R->T;
    const char *base = strrchr(R->title, '/');
    snprintf(T->name, sizeof T->name, "%s", base && base[1] ? base + 1 : R->title);
    snprintf(T->metric, sizeof T->metric, "%s", R->o->metric);
    for (int i = 0; R->seed_key >= 0 && i < R->n_runs; i++)
        T->n_seeds += R->runs[i].group == R->runs[0].group && usable(R, &R->runs[i]);
    for (int k = 0; k < R->n_keys; k++) {
        if (k == R->seed_key) continue;
        snprintf(T->key[T->n_keys], sizeof T->key[0], "%s", R->keys[k].key);
        snprintf(T->label[T->n_keys], sizeof T->label[0], "%s", R->keys[k].label);
        T->n_keys++;
    }
    int n_rows = 0;
    double row[CURVE_N];
    for (int g = 0; g < R->n_groups; g++)
        for (int t = 0; round_values(R, g, t, row); t++) n_rows += isfinite(row[CURVE_MEAN]);
    FH_CHECK(report_tables_alloc(T, R->n_groups, n_rows));
    int at = 0;
    for (int g = 0; g < R->n_groups; g++) {
        const Run *first = &R->runs[R->group_first[g]];
        for (int k = 0, j = 0; k < R->n_keys; k++)
            if (k != R->seed_key && !(T->values[(size_t)g * T->n_keys + j++] = strdup(first->values[k])))
                FH_FAIL(FH_ERR_MEMORY, "out of memory for the report's values");
        if (!(T->fallback[g] = strdup(R->single ? first->name : "all runs")))
            FH_FAIL(FH_ERR_MEMORY, "out of memory for the report's labels");
        GroupStats G;
        group_stats(R, g, &G);
        T->final_mean[g] = G.final_m;
        T->final_std[g] = G.final_s;
        for (int t = 0; round_values(R, g, t, row); t++)
            if (isfinite(row[CURVE_MEAN])) {
                T->row_config[at] = g;
                memcpy(T->rows[at++], row, sizeof row);
            }
    }
    return FH_OK;
}

/* ---- the command --------------------------------------------------------------------------------------- */

static void report_free(Report *R)
{
    for (int i = 0; i < R->n_runs; i++) {
        Run *r = &R->runs[i];
        for (int k = 0; k < MAX_KEYS; k++) free(r->values[k]);
        free(r->metric);
        free(r->t_round);
        free(r->t_eval);
        free(r->passes);
        free(r->bytes);
        free(r->seconds);
    }
    free(R->runs);
    free(R->group_first);
    report_tables_free(&R->T);
}


static int summarise(Report *R)
{
    const ReportOptions *o = R->o;
    const char *dir = o->dir;
    if (fh_path_exists(dir, "metrics.csv")) {
        R->single = 1;
        const char *base = strrchr(dir, '/') && strrchr(dir, '/')[1] ? strrchr(dir, '/') + 1 : dir;
        FH_CHECK(add_run(R, dir, base));
        FhIni cfg;
        FH_CHECK(read_run_config(&R->runs[0], &cfg));
        fh_ini_free(&cfg);
    } else if (fh_path_exists(dir, "grid/grid.ini")) {
        R->grid = 1;
        FH_CHECK(collect_grid(R, dir));
    } else
        FH_CHECK(collect_folder(R, dir));
    snprintf(R->title, sizeof R->title, "%s", dir);
    size_t tl = strlen(R->title);
    while (tl > 1 && R->title[tl - 1] == '/') R->title[--tl] = '\0';
    find_seed_key(R);
    for (int i = 0; i < R->n_runs; i++) {
        Run *r = &R->runs[i];
        if (fh_path_exists(r->dir, "metrics.csv")) FH_CHECK(read_metrics(r, o->metric));
        const char *missing = r->has_metrics ? missing_x_column(r, o->x) : NULL;
        if (missing)
            FH_FAIL(FH_ERR_DATA, "%s/metrics.csv has no column %s, which --x %s needs (the run was made before "
                    "metrics.csv counted passes, bytes and seconds; --x round works with it)", r->dir, missing, o->x);
        for (int k = 0; k < R->n_keys; k++)
            if (!r->values[k]) r->values[k] = strdup("");
        run_stats(R, r);
        /* a run's final model must be whole: a damaged run.h5 is named, not summarised beside good ones */
        if (fh_path_exists(r->dir, "run.h5")) {
            char path[PATHN + 16];
            snprintf(path, sizeof path, "%s/run.h5", r->dir);
            if (fl_checkpoint_verify(path) != FH_OK)
                return fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: the run's final model is damaged (fedhet "
                                      "run --resume %s rebuilds it from the final checkpoint)", path, r->dir);
        }
    }
    partition_stats(R);
    int n_usable = 0;
    for (int i = 0; i < R->n_runs; i++) n_usable += usable(R, &R->runs[i]);
    if (!n_usable)
        FH_FAIL(FH_ERR_DATA, "%s: no finished run to summarise (%d run%s, none with all its rounds in metrics.csv)", dir,
                R->n_runs, R->n_runs == 1 ? "" : "s");
    sort_ctx = R;
    qsort(R->runs, (size_t)R->n_runs, sizeof *R->runs, compare_runs);
    R->group_first = calloc((size_t)R->n_runs, sizeof *R->group_first);
    if (!R->group_first) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    for (int i = 0; i < R->n_runs; i++) {
        int g = -1;
        for (int h = 0; h < R->n_groups && g < 0; h++)
            if (same_config(R, &R->runs[R->group_first[h]], &R->runs[i])) g = h;
        if (g < 0) {
            g = R->n_groups++;
            R->group_first[g] = i;
        }
        R->runs[i].group = g;
    }

    const char *out_dir = o->out_dir ? o->out_dir : dir;
    FH_CHECK(fh_mkdir_p(out_dir));
    FH_CHECK(build_tables(R));
    static char figures[MAX_KEYS + 1][PATHN];
    int n_fig = 0;
    if (o->plots) FH_CHECK(report_figures_draw(&R->T, o->x, out_dir, figures, &n_fig));
    char path[PATHN];
    snprintf(path, sizeof path, "%s/summary.csv", out_dir);
    FH_CHECK(write_summary_csv(R, path));
    snprintf(path, sizeof path, "%s/summary.md", out_dir);
    FH_CHECK(write_summary_md(R, path, figures, n_fig));
    snprintf(path, sizeof path, "%s/curves.csv", out_dir);
    FH_CHECK(report_curves_write(&R->T, path));

    /* the table on stdout too */
    printf("%s: %d run%s (%d finished), %d configuration%s; metric %s\n", R->title, R->n_runs, R->n_runs == 1 ? "" : "s",
           n_usable, R->n_groups, R->n_groups == 1 ? "" : "s", o->metric);
    char lastk[32];
    snprintf(lastk, sizeof lastk, "last-%d", o->last_k);
    printf("  %-40s %4s  %-17s  %-17s  %-17s  %8s\n", "configuration", "runs", "final", lastk, "best", "wall s");
    for (int g = 0; g < R->n_groups; g++) {
        GroupStats G;
        GroupCells cells;
        group_row(R, g, &G, &cells);
        printf("  %-40s %4d  %-17s  %-17s  %-17s  %8.2f\n", cells.label, G.n, cells.final, cells.last, cells.best,
               G.wall_m);
    }
    printf("wrote %s/summary.csv, %s/summary.md, %s/curves.csv", out_dir, out_dir, out_dir);
    for (int i = 0; i < n_fig; i++) printf(", %s", strrchr(figures[i], '/') + 1);
    printf("\n");
    return FH_OK;
}

int report_runs(const ReportOptions *o)
{
    struct stat st;
    if (stat(o->dir, &st) != 0) FH_FAIL(FH_ERR_DATA, "%s: no such folder", o->dir);
    if (!S_ISDIR(st.st_mode))
        FH_FAIL(FH_ERR_USAGE, "%s is not a folder (give a run or grid folder; --partition DST.h5 OUT.png for a partition "
                "file)", o->dir);
    /* writing into a run folder: as its one writer (a run or resume still writing it refuses the report) */
    FhLock lock = { .fd = -1 };
    char lock_path[PATHN + 16], what[PATHN + 32];
    snprintf(lock_path, sizeof lock_path, "%s/.lock", o->dir);
    snprintf(what, sizeof what, "run folder %s", o->dir);
    if (!o->out_dir && fh_path_exists(o->dir, "metrics.csv")) FH_CHECK(fh_lock_take(&lock, lock_path, what));
    Report R;
    memset(&R, 0, sizeof R);
    R.o = o;
    int status = o->redraw ? report_redraw(o) : summarise(&R);
    report_free(&R);
    fh_lock_release(&lock);
    return status;
}
