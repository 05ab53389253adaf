/* fedhet report: tables and figures from fedhet's files, figures drawn by gnuplot (analysis.h).
 *
 * Modes: DIR (a run folder, a grid folder or any folder of run folders: summary.csv, summary.md and PNG
 * curves, src/analysis/report.c) and --partition DST.h5 OUT.png (a partition file: client x label heat map
 * over the client sizes and the per-client label entropy and TV). Each figure's numbers go to data files
 * in a private temporary folder with a gnuplot script; the image goes to OUT.tmp-<pid> and is renamed
 * over OUT only when gnuplot succeeded, so a failure never leaves a partial or stale-looking image. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app.h"
#include "fedhet/core.h"
#include "fedhet/analysis.h"
#include "fedhet/data.h"

#define REPORT_PATH_MAX 4096

/* ---- --partition ---- */

static int write_partition_data(const DataPartFile *f, const char *counts_path, const char *sizes_path)
{
    FILE *out = fopen(counts_path, "w");
    if (!out) FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", counts_path, strerror(errno));
    /* zero cells are left out: they stay white, and a sparse non-IID matrix stays small */
    fprintf(out, "# client label count\n");
    for (int k = 0; k < f->n_clients; k++)
        for (int c = 0; c < f->classes; c++) {
            int32_t v = f->label_counts[(size_t)k * f->classes + c];
            if (v > 0) fprintf(out, "%d %d %d\n", k, c, (int)v);
        }
    if (ferror(out) | (fclose(out) != 0)) FH_FAIL(FH_ERR_IO, "%s: write failed", counts_path);
    out = fopen(sizes_path, "w");
    if (!out) FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", sizes_path, strerror(errno));
    fprintf(out, "# client samples corrupted\n");
    for (int k = 0; k < f->n_clients; k++)
        fprintf(out, "%d %lld %d\n", k, (long long)(f->offsets[k + 1] - f->offsets[k]),
                f->corruption[k] != DATA_CORRUPT_NONE);
    if (ferror(out) | (fclose(out) != 0)) FH_FAIL(FH_ERR_IO, "%s: write failed", sizes_path);
    return FH_OK;
}

/* client, entropy (nats), TV; clients without rows have no label distribution and are left out */
static int write_hetero_data(const DataHetero *h, const char *path)
{
    FILE *out = fopen(path, "w");
    if (!out) FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    fprintf(out, "# client entropy_nats tv\n");
    for (int k = 0; k < h->n_clients; k++)
        if (isfinite(h->entropy[k])) fprintf(out, "%d %.9g %.9g\n", k, h->entropy[k], h->tv[k]);
    if (ferror(out) | (fclose(out) != 0)) FH_FAIL(FH_ERR_IO, "%s: write failed", path);
    return FH_OK;
}

/* the third panel: entropy bars (left axis, up to ln C) and TV points (right axis, 0..1) per client */
static void write_hetero_panel(const DataPartFile *f, const DataHetero *h, FILE *out, const char *hetero_path)
{
    double tv[4], entropy[4];
    data_summary4(h->tv, h->n_clients, tv);
    data_summary4(h->entropy, h->n_clients, entropy);
    char title[512];
    snprintf(title, sizeof title, "label heterogeneity per client: entropy (bars, nats; mean %.3f of ln %d = %.3f) and "
             "TV to the global labels (points; mean %.3f); size Gini %.3f", entropy[3], f->classes, log(f->classes),
             tv[3], h->size_gini);
    fprintf(out, "set tmargin at screen 0.31\nset bmargin at screen 0.06\nset title ");
    plot_gp_string(out, title);
    fprintf(out, "\nset xlabel 'client'\nset ylabel 'entropy (nats)'\nset yrange [0:%.9g]\nset ytics autofreq nomirror\n"
                 "set y2label 'total variation'\nset y2range [0:1]\nset y2tics 0.25\n"
                 "set boxwidth %s absolute\nset style fill solid 0.6 noborder\nplot ",
            1.05 * log(f->classes), f->n_clients <= 200 ? "0.8" : "1.0");
    plot_gp_string(out, hetero_path);
    fprintf(out, " using 1:2 with boxes lc rgb '#88ccee' notitle, \\\n     ");
    plot_gp_string(out, hetero_path);
    fprintf(out, " using 1:3 axes x1y2 with points pt 7 ps %s lc rgb '#aa3377' notitle\n",
            f->n_clients <= 100 ? "1.0" : "0.5");
}

static int write_partition_script(const DataPartFile *f, const DataHetero *h, FILE *out, const char *counts_path,
                                  const char *sizes_path, const char *hetero_path, const char *image_path)
{
    const int K = f->n_clients, C = f->classes;
    int32_t largest = 1;
    int n_corrupted = 0;
    for (size_t i = 0; i < (size_t)K * C; i++)
        if (f->label_counts[i] > largest) largest = f->label_counts[i];
    for (int k = 0; k < K; k++) n_corrupted += f->corruption[k] != DATA_CORRUPT_NONE;
    const char *name = strrchr(f->path, '/') ? strrchr(f->path, '/') + 1 : f->path;
    char title[1024], bars_title[256];
    snprintf(title, sizeof title, "%s: %s (%s), %d client%s, %d classes, %lld training rows, seed %lld", name,
             f->scheme, *f->variant ? f->variant : "default", K, K == 1 ? "" : "s", C, (long long)f->n_rows,
             (long long)f->seed);
    if (n_corrupted)
        snprintf(bars_title, sizeof bars_title, "samples per client (red: %d corrupted, %s severity %d)", n_corrupted,
                 f->corruption_name, f->severity);
    else snprintf(bars_title, sizeof bars_title, "samples per client");

    plot_gp_terminal(out, 1100, 1000, image_path);
    fprintf(out, "set multiplot title ");
    plot_gp_string(out, title);
    /* fixed margins so that the three panels share the client axis */
    fprintf(out, "\nset lmargin at screen 0.08\nset rmargin at screen 0.88\n"
                 "set xrange [-0.5:%d.5]\n", K - 1);
    if (K <= 40) fprintf(out, "set xtics 1\n");
    else fprintf(out, "set xtics autofreq\n");
    fprintf(out, "set mxtics 1\nset grid noxtics noytics\n");

    fprintf(out, "set tmargin at screen 0.93\nset bmargin at screen 0.62\n"
                 "set title 'label counts per client (white: none)'\n"
                 "set ylabel 'label'\nunset xlabel\n"
                 "set yrange [-0.5:%d.5]\n", C - 1);
    if (C <= 40) fprintf(out, "set ytics 1\n");
    fprintf(out, "set cbrange [0:%d]\nset cblabel 'samples'\n"
                 "set palette defined (0 '#deebf7', 0.5 '#4292c6', 1 '#08306b')\n"
                 "set colorbox user origin screen 0.9, screen 0.62 size screen 0.02, screen 0.31\n"
                 "plot ",
            (int)largest);
    plot_gp_string(out, counts_path);
    fprintf(out, " using 1:2:(0.5):(0.5):3 with boxxyerror fillstyle solid 1.0 noborder lc palette notitle\n");

    fprintf(out, "set tmargin at screen 0.55\nset bmargin at screen 0.38\n"
                 "unset colorbox\nset title ");
    plot_gp_string(out, bars_title);
    /* about 4 ticks on the short panel: a 1, 2 or 5 times a power of ten */
    int64_t largest_size = 1;
    for (int k = 0; k < K; k++)
        if (f->offsets[k + 1] - f->offsets[k] > largest_size) largest_size = f->offsets[k + 1] - f->offsets[k];
    double tick = pow(10.0, floor(log10((double)largest_size / 4.0)));
    if (tick * 5 <= largest_size / 4.0) tick *= 5;
    else if (tick * 2 <= largest_size / 4.0) tick *= 2;
    if (tick < 1) tick = 1;
    fprintf(out, "\nunset xlabel\nset ylabel 'samples'\nset yrange [0:*]\nset ytics %.0f\n", tick);
    fprintf(out, "set boxwidth %s absolute\nset style fill solid 0.9 noborder\nplot ",
            K <= 200 ? "0.8" : "1.0");
    /* one series per colour; a series with no points at all would be an error in gnuplot */
    int series = 0;
    if (n_corrupted < K) {
        plot_gp_string(out, sizes_path);
        fprintf(out, " using 1:($3 == 0 ? $2 : 1/0) with boxes lc rgb '#4477aa' notitle");
        series++;
    }
    if (n_corrupted > 0) {
        if (series) fprintf(out, ", \\\n     ");
        plot_gp_string(out, sizes_path);
        fprintf(out, " using 1:($3 != 0 ? $2 : 1/0) with boxes lc rgb '#cc3311' notitle");
    }
    fprintf(out, "\n");
    write_hetero_panel(f, h, out, hetero_path);
    fprintf(out, "unset multiplot\nset output\n");
    return FH_OK;
}

typedef struct {
    const DataPartFile *file;
    const DataHetero *hetero;
} PartitionFigure;

/* PlotWriter: data files into dir, the script into out */
static int draw_partition(void *ctx, const char *dir, FILE *out, const char *image_path)
{
    const PartitionFigure *fig = ctx;
    char counts[REPORT_PATH_MAX], sizes[REPORT_PATH_MAX], hetero[REPORT_PATH_MAX];
    FH_CHECK(fh_path_join(counts, sizeof counts, dir, "counts.dat"));
    FH_CHECK(fh_path_join(sizes, sizeof sizes, dir, "sizes.dat"));
    FH_CHECK(fh_path_join(hetero, sizeof hetero, dir, "hetero.dat"));
    FH_CHECK(write_partition_data(fig->file, counts, sizes));
    FH_CHECK(write_hetero_data(fig->hetero, hetero));
    return write_partition_script(fig->file, fig->hetero, out, counts, sizes, hetero, image_path);
}

static int report_partition(const char *path, const char *out_path)
{
    struct stat in_st, out_st;
    if (stat(path, &in_st) == 0 && stat(out_path, &out_st) == 0 && in_st.st_dev == out_st.st_dev &&
        in_st.st_ino == out_st.st_ino)
        FH_FAIL(FH_ERR_USAGE, "%s is the partition file itself; give another OUT.png", out_path);
    DataPartFile f;
    FH_CHECK(data_partfile_open(&f, path));
    DataHetero h;
    int stored;
    int status = data_partfile_hetero(&f, &h, &stored);
    if (status != FH_OK) {
        data_partfile_close(&f);
        return status;
    }
    PartitionFigure fig = { &f, &h };
    status = plot_png(out_path, draw_partition, &fig);
    data_hetero_free(&h);
    if (status == FH_OK)
        printf("wrote %s: %d client%s x %d labels, %lld training rows%s\n", out_path, f.n_clients,
               f.n_clients == 1 ? "" : "s", f.classes, (long long)f.n_rows,
               f.n_corrupted ? ", corrupted clients in red" : "");
    data_partfile_close(&f);
    return status;
}

static void print_help(void)
{
    printf("usage: fedhet report --partition DST.h5 OUT.png\n"
           "       fedhet report DIR [--out DIR2] [--last K] [--targets T1,T2,...] [--metric NAME] [--seed-key KEY]\n"
           "                         [--x round|passes|bytes|seconds] [--no-plots]\n"
           "  DIR          a run folder (fedhet run), a grid folder (fedhet grid) or a folder of run folders. Writes into\n"
           "               DIR (or --out DIR2): summary.csv and summary.md (one row per configuration: the runs that differ\n"
           "               only in the seed key; mean ± sample std over them of the final value, the mean of the last K\n"
           "               rounds and the best value; rounds to each target; wall time: docs/methods/metrics.md C.2, C.3), accuracy.png\n"
           "               (the metric per round, mean line and min-max band per configuration) and sensitivity-KEY.png\n"
           "               for each swept key (final value against the key's values, mean ± std). The swept keys are a\n"
           "               grid's lists, or the config keys that differ between the runs' config.ini. When the runs'\n"
           "               partition files ([data] path) differ, summary.csv adds their heterogeneity, the mean over\n"
           "               the runs of each file's partition_entropy_nats_mean, partition_effective_classes_mean,\n"
           "               partition_tv_mean, partition_emd_mean (client means) and partition_size_gini (see fedhet\n"
           "               inspect --help); an unreadable file leaves them empty, with a warning.\n"
           "  --last K     window of the last-K mean (default 10)\n"
           "  --targets    accuracies for rounds-to-target (default 0.5,0.6,0.7,0.8)\n"
           "  --metric     the metrics.csv column (default test_accuracy; e.g. test_balanced_accuracy, test_loss)\n"
           "  --seed-key   the key whose values are repetitions (default fl.seed)\n"
           "  --x AXIS     the curves' x axis (default round): passes = cumulative per-sample backward passes of\n"
           "               local training summed over the clients (metrics.csv cum_train_backward; a SAM step counts\n"
           "               two), bytes = cumulative bytes sent down and up (cum_bytes_down + cum_bytes_up), seconds =\n"
           "               cumulative wall seconds (cum_seconds); a configuration's x is the mean over its runs.\n"
           "               The figure is METRIC-AXIS.png (e.g. accuracy-passes.png). summary.csv gives passes and\n"
           "               bytes to each target beside the rounds (passes_to_T_mean, bytes_to_T_mean) whatever the axis.\n"
           "               Runs made before metrics.csv had these columns: --x round only (others exit 2 naming the column).\n"
           "  --no-plots   tables only\n"
           "  --partition DST.h5  a partition file written by `fedhet partition`: draws OUT.png with three panels,\n"
           "                      a heat map of the client x label counts (x: client, y: label, colour: samples;\n"
           "                      white: none), bars of the samples per client, corrupted clients in red, and the\n"
           "                      label heterogeneity per client: entropy in nats (bars) and the total-variation\n"
           "                      distance to the global label distribution (points), with the size Gini (see\n"
           "                      fedhet inspect --help).\n"
           "  Figures are drawn by gnuplot (Debian package gnuplot-nox; `make deps` installs it), found on PATH,\n"
           "  with its pngcairo terminal when present, else png. An image appears only once it is complete.\n"
           "  Exit codes: 1 usage, 2 a missing or bad input file, 4 gnuplot missing or failing, outputs unwritable.\n");
}

static int parse_targets(const char *text, ReportOptions *o)
{
    o->n_targets = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->n_targets == REPORT_MAX_TARGETS) FH_FAIL(FH_ERR_USAGE, "--targets: at most %d values", REPORT_MAX_TARGETS);
        FH_CHECK(app_parse_float(tok, "--targets", -1e300, 1e300, &o->targets[o->n_targets]));
        o->n_targets++;
    }
    return FH_OK;
}

int app_cmd_report(int argc, char **argv)
{
    const char *partition = NULL, *out = NULL, *dir = NULL;
    ReportOptions ro;
    report_options_default(&ro);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help();
            return FH_OK;
        }
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--partition")) FH_CHECK(app_option_value(argc, argv, &i, &partition));
        else if (!strcmp(argv[i], "--out")) FH_CHECK(app_option_value(argc, argv, &i, &ro.out_dir));
        else if (!strcmp(argv[i], "--metric")) FH_CHECK(app_option_value(argc, argv, &i, &ro.metric));
        else if (!strcmp(argv[i], "--seed-key")) FH_CHECK(app_option_value(argc, argv, &i, &ro.seed_key));
        else if (!strcmp(argv[i], "--x")) {
            FH_CHECK(app_option_value(argc, argv, &i, &ro.x));
            if (strcmp(ro.x, "round") && strcmp(ro.x, "passes") && strcmp(ro.x, "bytes") && strcmp(ro.x, "seconds"))
                FH_FAIL(FH_ERR_USAGE, "--x %s: expected round, passes, bytes or seconds", ro.x);
        }
        else if (!strcmp(argv[i], "--no-plots")) ro.plots = 0;
        else if (!strcmp(argv[i], "--last")) {
            FH_CHECK(app_option_value(argc, argv, &i, &v));
            FH_CHECK(app_parse_int(v, "--last", 1, 1000000000, &ro.last_k));
        } else if (!strcmp(argv[i], "--targets")) {
            FH_CHECK(app_option_value(argc, argv, &i, &v));
            FH_CHECK(parse_targets(v, &ro));
        } else if (argv[i][0] == '-' && argv[i][1])
            FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet report --help)", argv[i]);
        else if (!out) out = argv[i];
        else FH_FAIL(FH_ERR_USAGE, "unexpected argument '%s' (see fedhet report --help)", argv[i]);
    }
    if (ro.out_dir) { /* a path, whose last part must name a folder of its own */
        char last[4096];
        size_t n = strlen(ro.out_dir);
        while (n > 1 && ro.out_dir[n - 1] == '/') n--;
        const char *start = ro.out_dir + n;
        while (start > ro.out_dir && start[-1] != '/') start--;
        snprintf(last, sizeof last, "%.*s", (int)(ro.out_dir + n - start), start);
        FH_CHECK(fh_check_plain_name(last, "--out (its last part)"));
    }
    if (partition) {
        if (!out) FH_FAIL(FH_ERR_USAGE, "--partition %s: give the image to write, OUT.png", partition);
        return report_partition(partition, out);
    }
    dir = out;
    if (!dir)
        FH_FAIL(FH_ERR_USAGE, "give a run or grid folder (fedhet report outputs/NAME), or --partition DST.h5 OUT.png "
                "(see fedhet report --help)");
    ro.dir = dir;
    return report_runs(&ro);
}
