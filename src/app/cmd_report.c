/* fedhet report: tables and figures from fedhet's files, figures drawn by gnuplot (plot.h).
 *
 * Modes: DIR (a run folder, a grid folder or any folder of run folders: summary.csv, summary.md and PNG
 * curves, src/app/report.c) and --partition DST.h5 OUT.png (a partition file: client x label heat map
 * over the client sizes). Each figure's numbers go to data files in a private temporary folder with a
 * gnuplot script; the image goes to OUT.tmp-<pid> and is renamed over OUT only when gnuplot succeeded,
 * so a failure never leaves a partial or stale-looking image. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app.h"
#include "fedhet/core.h"
#include "fedhet/data.h"
#include "plot.h"
#include "report.h"

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

static int write_partition_script(const DataPartFile *f, FILE *out, const char *counts_path, const char *sizes_path,
                                  const char *image_path)
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

    app_gp_terminal(out, 1100, 760, image_path);
    fprintf(out, "set multiplot title ");
    app_gp_string(out, title);
    /* fixed margins so that the two panels share the client axis */
    fprintf(out, "\nset lmargin at screen 0.08\nset rmargin at screen 0.88\n"
                 "set xrange [-0.5:%d.5]\n", K - 1);
    if (K <= 40) fprintf(out, "set xtics 1\n");
    else fprintf(out, "set xtics autofreq\n");
    fprintf(out, "set mxtics 1\nset grid noxtics noytics\n");

    fprintf(out, "set tmargin at screen 0.91\nset bmargin at screen 0.46\n"
                 "set title 'label counts per client (white: none)'\n"
                 "set ylabel 'label'\nunset xlabel\n"
                 "set yrange [-0.5:%d.5]\n", C - 1);
    if (C <= 40) fprintf(out, "set ytics 1\n");
    fprintf(out, "set cbrange [0:%d]\nset cblabel 'samples'\n"
                 "set palette defined (0 '#deebf7', 0.5 '#4292c6', 1 '#08306b')\n"
                 "set colorbox user origin screen 0.9, screen 0.46 size screen 0.02, screen 0.45\n"
                 "plot ",
            (int)largest);
    app_gp_string(out, counts_path);
    fprintf(out, " using 1:2:(0.5):(0.5):3 with boxxyerror fillstyle solid 1.0 noborder lc palette notitle\n");

    fprintf(out, "set tmargin at screen 0.33\nset bmargin at screen 0.07\n"
                 "unset colorbox\nset title ");
    app_gp_string(out, bars_title);
    fprintf(out, "\nset xlabel 'client'\nset ylabel 'samples'\nset yrange [0:*]\nset ytics autofreq\n"
                 "set boxwidth %s absolute\nset style fill solid 0.9 noborder\nplot ",
            K <= 200 ? "0.8" : "1.0");
    /* one series per colour; a series with no points at all would be an error in gnuplot */
    int series = 0;
    if (n_corrupted < K) {
        app_gp_string(out, sizes_path);
        fprintf(out, " using 1:($3 == 0 ? $2 : 1/0) with boxes lc rgb '#4477aa' notitle");
        series++;
    }
    if (n_corrupted > 0) {
        if (series) fprintf(out, ", \\\n     ");
        app_gp_string(out, sizes_path);
        fprintf(out, " using 1:($3 != 0 ? $2 : 1/0) with boxes lc rgb '#cc3311' notitle");
    }
    fprintf(out, "\nunset multiplot\nset output\n");
    return FH_OK;
}

/* AppPlotWriter: data files into dir, the script into out */
static int draw_partition(void *ctx, const char *dir, FILE *out, const char *image_path)
{
    const DataPartFile *f = ctx;
    char counts[REPORT_PATH_MAX], sizes[REPORT_PATH_MAX];
    FH_CHECK(app_join_path(counts, sizeof counts, dir, "counts.dat"));
    FH_CHECK(app_join_path(sizes, sizeof sizes, dir, "sizes.dat"));
    FH_CHECK(write_partition_data(f, counts, sizes));
    return write_partition_script(f, out, counts, sizes, image_path);
}

static int report_partition(const char *path, const char *out_path)
{
    struct stat in_st, out_st;
    if (stat(path, &in_st) == 0 && stat(out_path, &out_st) == 0 && in_st.st_dev == out_st.st_dev &&
        in_st.st_ino == out_st.st_ino)
        FH_FAIL(FH_ERR_USAGE, "%s is the partition file itself; give another OUT.png", out_path);
    DataPartFile f;
    FH_CHECK(data_partfile_open(&f, path));
    int status = app_plot_png(out_path, draw_partition, &f);
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
           "               rounds and the best value; rounds to each target; wall time: spec C.2, C.3), accuracy.png\n"
           "               (the metric per round, mean line and min-max band per configuration) and sensitivity-KEY.png\n"
           "               for each swept key (final value against the key's values, mean ± std). The swept keys are a\n"
           "               grid's lists, or the config keys that differ between the runs' config.ini.\n"
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
           "  --partition DST.h5  a partition file written by `fedhet partition`: draws OUT.png with two panels,\n"
           "                      a heat map of the client x label counts (x: client, y: label, colour: samples;\n"
           "                      white: none) and bars of the samples per client, corrupted clients in red.\n"
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
