/* fedhet report: tables and figures from fedhet's files, figures drawn by gnuplot (analysis.h).
 *
 * Modes: DIR (a run folder, a grid folder or any folder of run folders: summary.csv, summary.md and PNG
 * curves, src/analysis/report.c) and --partition DST.h5 OUT.png (a partition file's figure,
 * src/analysis/partition_figure.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "fedhet/analysis.h"
#include "fedhet/config.h"
#include "fedhet/core.h"

static int report_partition(const char *path, const char *out_path)
{
    PartitionFigureInfo info;
    FH_CHECK(partition_figure(path, out_path, &info));
    printf("wrote %s: %d client%s x %d labels, %lld training rows%s\n", out_path, info.n_clients,
           info.n_clients == 1 ? "" : "s", info.classes, (long long)info.n_rows,
           info.n_corrupted ? ", corrupted clients in red" : "");
    return FH_OK;
}

static void print_help(void)
{
    printf("usage: fedhet report --partition DST.h5 OUT.png\n"
           "       fedhet report DIR [--out DIR2] [--last K] [--targets T1,T2,...] [--metric NAME] [--seed-key KEY]\n"
           "                         [--x round|passes|bytes|seconds] [--no-plots]\n"
           "       fedhet report --redraw DIR [--out DIR2] [--x round|passes|bytes|seconds]\n"
           "  DIR          a run folder (fedhet run), a grid folder (fedhet grid) or a folder of run folders. Writes into\n"
           "               DIR (or --out DIR2): summary.csv and summary.md (one row per configuration: the runs that differ\n"
           "               only in the seed key; mean ± sample std over them of the final value, the mean of the last K\n"
           "               rounds and the best value; rounds to each target; wall time: docs/methods/metrics.md C.2, C.3),\n"
           "               curves.csv (per configuration and round: the metric's mean, min and max over the runs and the\n"
           "               mean cumulative passes, bytes and seconds), accuracy.png (the metric per round, mean line and\n"
           "               min-max band per configuration) and sensitivity-KEY.png for each swept key (final value against\n"
           "               the key's values, mean ± std; a key of names: a point and error bar per configuration). Legends\n"
           "               go below the plot when they would take more than a quarter of its width. The swept keys are a\n"
           "               grid's lists, or the config keys that differ between the runs' config.ini. When the runs'\n"
           "               partition files ([data] path) differ, summary.csv adds their heterogeneity, the mean over\n"
           "               the runs of each file's partition_entropy_nats_mean, partition_effective_classes_mean,\n"
           "               partition_tv_mean, partition_emd_mean (client means) and partition_size_gini (see fedhet\n"
           "               inspect --help); an unreadable file leaves them empty, with a warning.\n"
           "  options (default):\n");
    int n;
    const FhConfigKey *keys = report_option_keys(&n);
    for (int k = 0; k < n; k++) {
        char def[256];
        fh_config_default_text(&keys[k], def, sizeof def);
        printf("  --%-12s (%s) %s%s%s%s\n", keys[k].key, keys[k].type == FH_CFG_BOOL ? "off" : def[0] ? def : "-",
               keys[k].help, keys[k].choices ? " (" : "", keys[k].choices ? keys[k].choices : "", keys[k].choices ? ")" : "");
    }
    printf("  --partition DST.h5  a partition file written by `fedhet partition`: draws OUT.png with three panels,\n"
           "                      a heat map of the client x label counts (x: client, y: label, colour: samples;\n"
           "                      white: none), bars of the samples per client, corrupted clients in red, and the\n"
           "                      label heterogeneity per client: entropy in nats (bars) and the total-variation\n"
           "                      distance to the global label distribution (points), with the size Gini (see\n"
           "                      fedhet inspect --help).\n"
           "  Figures are drawn by gnuplot (Debian package gnuplot-nox; `make deps` installs it), found on PATH,\n"
           "  with its pngcairo terminal when present, else png. An image appears only once it is complete.\n"
           "  Exit codes: 1 usage, 2 a missing or bad input file, 4 gnuplot missing or failing, outputs unwritable.\n");
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
            if (fh_config_choice_index(report_option("x")->choices, ro.x) < 0)
                FH_FAIL(FH_ERR_USAGE, "--x %s: expected one of %s", ro.x, report_option("x")->choices);
        }
        else if (!strcmp(argv[i], "--no-plots")) ro.plots = 0;
        else if (!strcmp(argv[i], "--redraw")) ro.redraw = 1;
        else if (!strcmp(argv[i], "--last")) {
            FH_CHECK(app_option_value(argc, argv, &i, &v));
            FH_CHECK(app_parse_int(v, "--last", (long)report_option("last")->lo, (long)report_option("last")->hi, &ro.last_k));
        } else if (!strcmp(argv[i], "--targets")) {
            FH_CHECK(app_option_value(argc, argv, &i, &v));
            FH_CHECK(report_parse_targets(v, &ro));
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
