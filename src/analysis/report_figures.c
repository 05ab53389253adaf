/* A report's figures (report_internal.h): the metric per round for each configuration, and the final metric
 * against each swept key, drawn by gnuplot from the report's tables. The tables come from the runs (report.c)
 * or, for `fedhet report --redraw DIR`, from DIR's summary.csv, summary.md and curves.csv, so that a committed
 * report's figures are drawn again from its committed numbers.
 *
 * Legends: at the right while they take at most a quarter of the width, else below the plot
 * (plot_gp_terminal_key). A key whose values are not numbers is a category axis: each configuration a point
 * with its error bar, series side by side, tick labels turned when they would not fit side by side. */
#include "report_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"

/* ---- tables ------------------------------------------------------------------------------------------- */

int report_tables_alloc(ReportTables *T, int n_configs, int n_rows)
{
    T->n_configs = n_configs;
    T->n_rows = n_rows;
    const size_t nc = (size_t)(n_configs ? n_configs : 1), nr = (size_t)(n_rows ? n_rows : 1);
    FH_CHECK(fh_calloc(&T->values, nc * (size_t)(T->n_keys ? T->n_keys : 1), sizeof *T->values, "report values"));
    FH_CHECK(fh_calloc(&T->fallback, nc, sizeof *T->fallback, "report labels"));
    FH_CHECK(fh_calloc(&T->final_mean, nc, sizeof *T->final_mean, "report means"));
    FH_CHECK(fh_calloc(&T->final_std, nc, sizeof *T->final_std, "report stds"));
    FH_CHECK(fh_calloc(&T->row_config, nr, sizeof *T->row_config, "report curve rows"));
    return fh_calloc(&T->rows, nr, sizeof *T->rows, "report curve rows");
}

void report_tables_free(ReportTables *T)
{
    for (int c = 0; T->values && c < T->n_configs * T->n_keys; c++) free(T->values[c]);
    for (int c = 0; T->fallback && c < T->n_configs; c++) free(T->fallback[c]);
    fh_free(&T->values);
    fh_free(&T->fallback);
    fh_free(&T->final_mean);
    fh_free(&T->final_std);
    fh_free(&T->row_config);
    fh_free(&T->rows);
}

static const char *value_of(const ReportTables *T, int c, int k) { return T->values[(size_t)c * T->n_keys + k]; }

/* 1 when key k has two different values among the configurations */
static int key_varies(const ReportTables *T, int k)
{
    for (int c = 1; c < T->n_configs; c++)
        if (strcmp(value_of(T, 0, k), value_of(T, c, k)) != 0) return 1;
    return 0;
}

/* a configuration that leaves a key unset ('-': its method has no such key) */
static int value_set(const char *v) { return v && v[0] && strcmp(v, "-") != 0; }

void report_tables_label(const ReportTables *T, int c, int skip, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int pass = 0; pass < (skip < 0 ? 2 : 1) && !out[0]; pass++)
        for (int k = 0; k < T->n_keys && used + 1 < size; k++) {
            if (k == skip || !key_varies(T, k) || (pass == 0 && !value_set(value_of(T, c, k)))) continue;
            used += (size_t)snprintf(out + used, size - used, "%s%s=%s", used ? ", " : "", T->label[k], value_of(T, c, k));
            if (used >= size) used = size - 1;
        }
    if (!out[0] && skip < 0) snprintf(out, size, "%s", T->fallback[c] ? T->fallback[c] : "all runs");
    else if (!out[0]) snprintf(out, size, "other keys unset"); /* e.g. the methods without the keys of the others */
}

static const char *const curve_columns[CURVE_N] = { "round", "runs", "mean", "min", "max", "passes", "bytes", "seconds" };

int report_curves_write(const ReportTables *T, const char *path)
{
    FhAtomicFile out;
    FH_CHECK(fh_atomic_open(&out, path));
    FILE *f = out.f;
    fprintf(f, "config");
    for (int k = 0; k < T->n_keys; k++) {
        fputc(',', f);
        fh_csv_field(f, T->key[k]);
    }
    for (int j = 0; j < CURVE_N; j++) fprintf(f, ",%s", curve_columns[j]);
    fprintf(f, "\n");
    for (int i = 0; i < T->n_rows; i++) {
        const int c = T->row_config[i];
        char label[1024];
        report_tables_label(T, c, -1, label, sizeof label);
        fh_csv_field(f, label);
        for (int k = 0; k < T->n_keys; k++) {
            fputc(',', f);
            fh_csv_field(f, value_of(T, c, k));
        }
        for (int j = 0; j < CURVE_N; j++) {
            if (isfinite(T->rows[i][j])) fprintf(f, ",%.10g", T->rows[i][j]);
            else fprintf(f, ",");
        }
        fprintf(f, "\n");
    }
    return fh_atomic_commit(&out);
}

/* ---- figures ------------------------------------------------------------------------------------------ */

static int parse_number(const char *s, double *v)
{
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return errno == 0 && *end == '\0' && end != s;
}

static int compare_values(const char *a, const char *b)
{
    double x, y;
    if (parse_number(a, &x) && parse_number(b, &y)) return (x > y) - (x < y);
    return strcmp(a, b);
}

typedef struct {
    const ReportTables *T;
    const char *x; /* curves: round | passes | bytes | seconds */
    int key;       /* sensitivity: the key against which */
} FigureCtx;

static int x_column(const char *x)
{
    if (!strcmp(x, "passes")) return CURVE_PASSES;
    if (!strcmp(x, "bytes")) return CURVE_BYTES;
    if (!strcmp(x, "seconds")) return CURVE_SECONDS;
    return CURVE_ROUND;
}

static const char *x_label(const char *x)
{
    if (!strcmp(x, "passes")) return "training backward passes (per sample, cumulative)";
    if (!strcmp(x, "bytes")) return "bytes sent down + up (cumulative)";
    if (!strcmp(x, "seconds")) return "wall seconds (cumulative)";
    return "round";
}

/* title, axis labels and grid */
static void axes(FILE *out, const char *title, const char *xlabel, const char *ylabel)
{
    fprintf(out, "set title ");
    plot_gp_string(out, title);
    fprintf(out, "\nset xlabel ");
    plot_gp_string(out, xlabel);
    fprintf(out, "\nset ylabel ");
    plot_gp_string(out, ylabel);
    fprintf(out, "\nset grid\n");
}

/* writes path, or fails naming it */
static int data_file(const char *dir, const char *name, int index, char *path, size_t size, FILE **f)
{
    snprintf(path, size, "%s/%s%d.dat", dir, name, index);
    *f = fopen(path, "w");
    if (!*f) FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return FH_OK;
}

/* accuracy.png: per configuration the mean over its runs per round, band min..max; against the round, or (--x)
 * the mean over the runs of the round's cumulative passes, bytes or seconds */
static int draw_curves(void *ctx, const char *dir, FILE *out, const char *image)
{
    const FigureCtx *F = ctx;
    const ReportTables *T = F->T;
    const int xc = x_column(F->x), by_round = xc == CURVE_ROUND;
    int longest = 0, shown = 0, most = 0;
    for (int c = 0; c < T->n_configs; c++) {
        char label[1024];
        report_tables_label(T, c, -1, label, sizeof label);
        if ((int)strlen(label) > longest) longest = (int)strlen(label);
        shown++;
    }
    for (int i = 0; i < T->n_rows; i++)
        if (T->rows[i][CURVE_ROUND] > most) most = (int)T->rows[i][CURVE_ROUND];
    plot_gp_terminal_key(out, 1000, 640, image, shown, longest);
    char title[REPORT_PATHN + 300];
    if (by_round) snprintf(title, sizeof title, "%s: %s per round", T->name, T->metric);
    else snprintf(title, sizeof title, "%s: %s against %s", T->name, T->metric, x_label(F->x));
    axes(out, title, x_label(F->x), T->metric);
    fprintf(out, "set style fill transparent solid 0.18 noborder\n");
    if (by_round)
        fprintf(out, "set xrange [1:%d]\n%s\n", most > 1 ? most : 2, most <= 20 ? "set xtics 1" : "set xtics autofreq");
    else fprintf(out, "set xrange [0:*]\nset xtics autofreq\nset format x '%%.1s%%c'\n");
    fprintf(out, "plot ");
    int plotted = 0;
    for (int c = 0; c < T->n_configs; c++) {
        char path[REPORT_PATHN];
        FILE *d;
        FH_CHECK(data_file(dir, "curve", c, path, sizeof path, &d));
        int points = 0, runs = 0;
        for (int i = 0; i < T->n_rows; i++) {
            const double *r = T->rows[i];
            if (T->row_config[i] != c || !isfinite(r[CURVE_MEAN]) || !isfinite(r[xc])) continue;
            fprintf(d, "%.12g %.8g %.8g %.8g\n", r[xc], r[CURVE_MEAN], r[CURVE_MIN], r[CURVE_MAX]);
            points++;
            if (r[CURVE_RUNS] > runs) runs = (int)r[CURVE_RUNS];
        }
        if (fclose(d) != 0) FH_FAIL(FH_ERR_IO, "%s: write failed", path);
        if (!points) continue;
        char label[1024];
        report_tables_label(T, c, -1, label, sizeof label);
        const int color = c % 8 + 1;
        if (runs > 1) {
            fprintf(out, "%s", plotted ? ", \\\n     " : "");
            plot_gp_string(out, path);
            fprintf(out, " using 1:3:4 with filledcurves lc %d notitle", color);
            plotted = 1;
        }
        fprintf(out, "%s", plotted ? ", \\\n     " : "");
        plot_gp_string(out, path);
        fprintf(out, " using 1:2 with linespoints lw 2 pt 7 ps 0.5 lc %d title ", color);
        plot_gp_string(out, label);
        plotted = 1;
    }
    if (!plotted) FH_FAIL(FH_ERR_DATA, "%s: no configuration has a value of %s to plot", T->name, T->metric);
    fprintf(out, "\nset output\n");
    return FH_OK;
}

/* sensitivity-KEY.png: the final metric (mean ± std over seeds) against the key's values, one series per
 * combination of the other keys. Numbers: a line through the values (a log axis when they span 20x or more);
 * names (a category axis): a point with its error bar per configuration, series side by side, no line. */
static int draw_sensitivity(void *ctx, const char *dir, FILE *out, const char *image)
{
    const FigureCtx *F = ctx;
    const ReportTables *T = F->T;
    const int k = F->key;
    /* the key's distinct values, sorted; numeric when every value is a number */
    const char **vals = NULL;
    int *series_of = NULL, *first_of = NULL;
    FH_CHECK(fh_calloc(&vals, (size_t)T->n_configs + 1, sizeof *vals, "sensitivity values"));
    int status = fh_calloc(&series_of, (size_t)T->n_configs + 1, sizeof *series_of, "sensitivity series");
    if (status == FH_OK) status = fh_calloc(&first_of, (size_t)T->n_configs + 1, sizeof *first_of, "sensitivity series");
    int nv = 0, numeric = 1, n_series = 0, longest = 0, longest_tick = 0;
    double lo = INFINITY, hi = -INFINITY, x;
    for (int c = 0; status == FH_OK && c < T->n_configs; c++) {
        int seen = 0;
        for (int j = 0; j < nv && !seen; j++) seen = !strcmp(vals[j], value_of(T, c, k));
        if (!seen) vals[nv++] = value_of(T, c, k);
        /* series: the configurations that agree on every key but k */
        series_of[c] = -1;
        for (int h = 0; h < c && series_of[c] < 0; h++) {
            int same = 1;
            for (int m = 0; m < T->n_keys && same; m++)
                if (m != k && strcmp(value_of(T, c, m), value_of(T, h, m))) same = 0;
            if (same) series_of[c] = series_of[h];
        }
        if (series_of[c] < 0) first_of[n_series] = c, series_of[c] = n_series++;
        char label[1024];
        report_tables_label(T, c, k, label, sizeof label);
        if ((int)strlen(label) > longest) longest = (int)strlen(label);
    }
    for (int a = 1; a < nv; a++)
        for (int b = a; b > 0 && compare_values(vals[b - 1], vals[b]) > 0; b--) {
            const char *t = vals[b];
            vals[b] = vals[b - 1];
            vals[b - 1] = t;
        }
    for (int j = 0; j < nv; j++) {
        if ((int)strlen(vals[j]) > longest_tick) longest_tick = (int)strlen(vals[j]);
        if (!parse_number(vals[j], &x)) numeric = 0;
        else lo = x < lo ? x : lo, hi = x > hi ? x : hi;
    }
    const int logx = numeric && lo > 0 && hi / lo >= 20;
    if (status == FH_OK) {
        plot_gp_terminal_key(out, 900, 600, image, n_series, longest);
        char title[REPORT_PATHN + 400], ylabel[256];
        if (T->n_seeds > 0)
            snprintf(title, sizeof title, "%s: final %s against %s (mean ± std over %d seeds)", T->name, T->metric,
                     T->key[k], T->n_seeds);
        else snprintf(title, sizeof title, "%s: final %s against %s", T->name, T->metric, T->key[k]);
        snprintf(ylabel, sizeof ylabel, "final %s", T->metric);
        axes(out, title, T->key[k], ylabel);
        fprintf(out, "set offsets graph 0.05, graph 0.05, graph 0.05, graph 0.05\n");
        if (logx) fprintf(out, "set logscale x\n");
    }
    if (status == FH_OK && !numeric) {
        fprintf(out, "set offsets 0, 0, graph 0.05, graph 0.05\nset xtics (");
        for (int j = 0; j < nv; j++) {
            fprintf(out, "%s", j ? ", " : "");
            plot_gp_string(out, vals[j]);
            fprintf(out, " %d", j);
        }
        fprintf(out, ")\nset xrange [-0.5:%d.5]\n", nv - 1);
        /* about 7 pixels a character (pngcairo, 10 points) on a plot area of about 780: turned when side by
         * side they would touch */
        if (nv * (longest_tick * 7 + 12) > 780) fprintf(out, "set xtics rotate by 30 right\n");
    }
    if (status == FH_OK) fprintf(out, "plot ");
    /* a category's series side by side around it, those it has only, within half its width */
    int most_at = 1;
    for (int j = 0; j < nv; j++) {
        int here = 0;
        for (int c = 0; c < T->n_configs; c++) here += !strcmp(value_of(T, c, k), vals[j]);
        most_at = here > most_at ? here : most_at;
    }
    const double step = 0.5 / most_at;
    int plotted = 0;
    for (int s = 0; status == FH_OK && s < n_series; s++) {
        char path[REPORT_PATHN];
        FILE *d;
        status = data_file(dir, "sens", s, path, sizeof path, &d);
        if (status != FH_OK) break;
        int rows = 0;
        for (int j = 0; j < nv; j++)
            for (int c = 0; c < T->n_configs; c++) {
                if (series_of[c] != s || strcmp(value_of(T, c, k), vals[j]) || !isfinite(T->final_mean[c])) continue;
                int rank = 0, here = 0; /* c's place among the configurations of this category */
                for (int h = 0; h < T->n_configs; h++)
                    if (!strcmp(value_of(T, h, k), vals[j])) rank += series_of[h] < s, here++;
                const double xv = numeric ? atof(vals[j]) : j + (rank - (here - 1) / 2.0) * step;
                fprintf(d, "%.10g %.8g %.8g\n", xv, T->final_mean[c], isfinite(T->final_std[c]) ? T->final_std[c] : 0.0);
                rows++;
            }
        if (fclose(d) != 0) status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: write failed", path);
        if (status != FH_OK || !rows) continue;
        char label[1024];
        report_tables_label(T, first_of[s], k, label, sizeof label);
        fprintf(out, "%s", plotted ? ", \\\n     " : "");
        plot_gp_string(out, path);
        if (numeric) fprintf(out, " using 1:2:3 with yerrorlines lw 2 pt 7 lc %d ", s % 8 + 1);
        else fprintf(out, " using 1:2:3 with yerrorbars lw 2 pt 7 ps 1.2 lc %d ", s % 8 + 1);
        if (label[0]) {
            fprintf(out, "title ");
            plot_gp_string(out, label);
        } else
            fprintf(out, "notitle");
        plotted = 1;
    }
    if (status == FH_OK && !plotted)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: no finished configuration to plot against %s",
                                T->name, T->key[k]);
    if (status == FH_OK) fprintf(out, "\nset output\n");
    fh_free(&vals);
    fh_free(&series_of);
    fh_free(&first_of);
    return status;
}

/* a label as part of a file name */
static void file_name_part(char *out, size_t size, const char *label)
{
    size_t n = 0;
    for (const char *p = label; *p && n + 1 < size; p++)
        out[n++] = (isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == '_') ? *p : '_';
    out[n] = '\0';
}

int report_figures_draw(const ReportTables *T, const char *x, const char *out_dir, char figures[][REPORT_PATHN], int *n)
{
    FigureCtx F = { T, x, -1 };
    if (T->n_rows > 0) {
        char part[200] = "accuracy";
        if (strcmp(T->metric, "test_accuracy")) file_name_part(part, sizeof part, T->metric);
        if (strcmp(x, "round")) snprintf(figures[*n], REPORT_PATHN, "%s/%s-%s.png", out_dir, part, x);
        else snprintf(figures[*n], REPORT_PATHN, "%s/%s.png", out_dir, part);
        FH_CHECK(plot_png(figures[*n], draw_curves, &F));
        (*n)++;
    }
    for (int k = 0; k < T->n_keys; k++) {
        if (!key_varies(T, k)) continue; /* one value: nothing to draw */
        char part[200];
        file_name_part(part, sizeof part, T->label[k]);
        snprintf(figures[*n], REPORT_PATHN, "%s/sensitivity-%s.png", out_dir, part);
        F.key = k;
        FH_CHECK(plot_png(figures[*n], draw_sensitivity, &F));
        (*n)++;
    }
    return FH_OK;
}

/* ---- --redraw: the tables read back from a report folder ---------------------------------------------- */

/* the cells of one CSV line, in place: quoted cells unquoted ("" inside one is a quote); the count */
static int csv_split(char *line, char **cells, int max)
{
    int n = 0;
    char *p = line;
    while (n < max) {
        char *cell = p, *w = p;
        if (*p == '"') {
            for (p++; *p && !(*p == '"' && p[1] != '"'); p++) *w++ = *p == '"' ? *++p : *p;
            if (*p == '"') p++;
        } else
            while (*p && *p != ',') *w++ = *p++;
        const char end = *p;
        *w = '\0';
        cells[n++] = cell;
        if (end != ',') break;
        p++;
    }
    return n;
}

static int column(char **cells, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(cells[i], name)) return i;
    return -1;
}

static double cell_number(const char *s)
{
    double v;
    return parse_number(s, &v) ? v : NAN;
}

/* summary.md: the report's name (its heading's last part), the metric and whether the runs repeat over seeds */
static void read_summary_md(ReportTables *T, const char *dir, int *over_seeds)
{
    char path[REPORT_PATHN], *text = NULL;
    snprintf(path, sizeof path, "%s/summary.md", dir);
    *over_seeds = 0;
    if (fh_read_file(path, &text, FH_ERR_DATA) != FH_OK) {
        fh_error_clear(); /* the folder's name and the default metric then */
        return;
    }
    if (!strncmp(text, "# ", 2)) {
        size_t n = strcspn(text + 2, "\n");
        while (n > 0 && text[2 + n - 1] == '/') n--;
        const char *start = text + 2;
        for (size_t i = 0; i < n; i++)
            if (text[2 + i] == '/') start = text + 3 + i;
        snprintf(T->name, sizeof T->name, "%.*s", (int)(text + 2 + n - start), start);
    }
    const char *m = strstr(text, "Metric `");
    if (m) snprintf(T->metric, sizeof T->metric, "%.*s", (int)strcspn(m + 8, "`"), m + 8);
    *over_seeds = strstr(text, " over seeds ") != NULL;
    free(text);
}

/* summary.csv's configurations: the key columns between "config" and "runs", final_mean and final_std */
static int read_summary_csv(ReportTables *T, const char *dir, char *text, int over_seeds)
{
    char *cells[4 * REPORT_MAX_KEYS + 200];
    const int max = (int)(sizeof cells / sizeof cells[0]);
    char *line = text, *next = strchr(line, '\n');
    if (next) *next++ = '\0';
    const int n = csv_split(line, cells, max);
    const int runs = column(cells, n, "runs"), mean = column(cells, n, "final_mean"), std = column(cells, n, "final_std");
    if (n < 2 || strcmp(cells[0], "config") || runs < 1 || runs - 1 > REPORT_MAX_KEYS || mean < 0 || std < 0)
        FH_FAIL(FH_ERR_DATA, "%s/summary.csv: not a summary of fedhet report (no config, runs, final_mean and final_std "
                "columns)", dir);
    T->n_keys = runs - 1;
    for (int k = 0; k < T->n_keys; k++) snprintf(T->key[k], sizeof T->key[k], "%s", cells[1 + k]);
    for (int k = 0; k < T->n_keys; k++) {
        /* the part after the dot unless two keys share it, as the report labels them */
        const char *part = strchr(T->key[k], '.') ? strchr(T->key[k], '.') + 1 : T->key[k];
        int clash = 0;
        for (int j = 0; j < T->n_keys; j++) {
            const char *other = strchr(T->key[j], '.') ? strchr(T->key[j], '.') + 1 : T->key[j];
            clash |= j != k && !strcmp(other, part);
        }
        snprintf(T->label[k], sizeof T->label[k], "%s", clash ? T->key[k] : part);
    }
    int n_configs = 0;
    for (char *p = next; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) n_configs += *p != '\n';
    FH_CHECK(report_tables_alloc(T, n_configs, 0));
    int c = 0;
    for (line = next; line && *line && c < n_configs; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (!*line) continue;
        const int got = csv_split(line, cells, max);
        if (got <= std) FH_FAIL(FH_ERR_DATA, "%s/summary.csv: configuration %d has %d cells (need %d)", dir, c + 1, got, std + 1);
        for (int k = 0; k < T->n_keys; k++)
            if (!(T->values[(size_t)c * T->n_keys + k] = strdup(cells[1 + k])))
                FH_FAIL(FH_ERR_MEMORY, "out of memory reading %s/summary.csv", dir);
        if (!(T->fallback[c] = strdup(cells[0]))) FH_FAIL(FH_ERR_MEMORY, "out of memory reading %s/summary.csv", dir);
        T->final_mean[c] = cell_number(cells[mean]);
        T->final_std[c] = cell_number(cells[std]);
        if (c == 0 && over_seeds) T->n_seeds = (int)cell_number(cells[runs]);
        c++;
    }
    T->n_configs = c;
    return FH_OK;
}

/* curves.csv, when the folder has one: its rows, each matched to its configuration by the key values */
static int read_curves_csv(ReportTables *T, const char *dir, char *text)
{
    char *cells[4 * REPORT_MAX_KEYS + 200];
    const int max = (int)(sizeof cells / sizeof cells[0]);
    int n_lines = 0;
    for (const char *p = text; *p; p++) n_lines += *p == '\n';
    FH_CHECK(fh_calloc(&T->row_config, (size_t)n_lines + 1, sizeof *T->row_config, "curve rows"));
    FH_CHECK(fh_calloc(&T->rows, (size_t)n_lines + 1, sizeof *T->rows, "curve rows"));
    char *line = text, *next = strchr(line, '\n');
    if (next) *next++ = '\0';
    const int n = csv_split(line, cells, max);
    if (n != 1 + T->n_keys + CURVE_N || strcmp(cells[0], "config"))
        FH_FAIL(FH_ERR_DATA, "%s/curves.csv: its columns are not summary.csv's keys and %s ... %s", dir,
                curve_columns[0], curve_columns[CURVE_N - 1]);
    for (line = next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (csv_split(line, cells, max) != n) FH_FAIL(FH_ERR_DATA, "%s/curves.csv: a row of another width", dir);
        int config = -1;
        for (int c = 0; c < T->n_configs && config < 0; c++) {
            int same = 1;
            for (int k = 0; k < T->n_keys && same; k++) same = !strcmp(value_of(T, c, k), cells[1 + k]);
            if (same) config = c;
        }
        if (config < 0) FH_FAIL(FH_ERR_DATA, "%s/curves.csv: configuration '%s' is not in summary.csv", dir, cells[0]);
        T->row_config[T->n_rows] = config;
        for (int j = 0; j < CURVE_N; j++) T->rows[T->n_rows][j] = cell_number(cells[1 + T->n_keys + j]);
        T->n_rows++;
    }
    return FH_OK;
}

int report_redraw(const ReportOptions *o)
{
    ReportTables T;
    memset(&T, 0, sizeof T);
    const char *base = strrchr(o->dir, '/');
    snprintf(T.name, sizeof T.name, "%s", base && base[1] ? base + 1 : o->dir);
    snprintf(T.metric, sizeof T.metric, "%s", o->metric);
    int over_seeds;
    read_summary_md(&T, o->dir, &over_seeds);
    char path[REPORT_PATHN], *text = NULL;
    snprintf(path, sizeof path, "%s/summary.csv", o->dir);
    int status = fh_read_file(path, &text, FH_ERR_DATA);
    if (status == FH_OK) status = read_summary_csv(&T, o->dir, text, over_seeds);
    fh_free(&text);
    snprintf(path, sizeof path, "%s/curves.csv", o->dir);
    const int have_curves = fh_path_exists(path, NULL);
    if (status == FH_OK && have_curves) {
        /* the empty curve arrays of report_tables_alloc give way to the file's */
        fh_free(&T.row_config);
        fh_free(&T.rows);
        status = fh_read_file(path, &text, FH_ERR_DATA);
        if (status == FH_OK) status = read_curves_csv(&T, o->dir, text);
        fh_free(&text);
    }
    static char figures[REPORT_MAX_KEYS + 1][REPORT_PATHN];
    int n_fig = 0;
    const char *out_dir = o->out_dir ? o->out_dir : o->dir;
    if (status == FH_OK) status = fh_mkdir_p(out_dir);
    if (status == FH_OK) status = report_figures_draw(&T, o->x, out_dir, figures, &n_fig);
    if (status == FH_OK) {
        printf("%s: redrew", T.name);
        for (int i = 0; i < n_fig; i++) printf("%s %s", i ? "," : "", figures[i]);
        printf(" from summary.csv%s\n", have_curves ? " and curves.csv" : " (no curves.csv: no curve figure)");
    }
    report_tables_free(&T);
    return status;
}
