/* The figure of a partition file (`fedhet report --partition`): a client x label heat map over the client
 * sizes, and the per-client label entropy and TV, drawn by gnuplot through plot_png (the image replaced only
 * when gnuplot succeeded). */
#include "fedhet/analysis.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fedhet/core.h"
#include "fedhet/data.h"

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
    char counts[FH_PATH_MAX], sizes[FH_PATH_MAX], hetero[FH_PATH_MAX];
    FH_CHECK(fh_path_join(counts, sizeof counts, dir, "counts.dat"));
    FH_CHECK(fh_path_join(sizes, sizeof sizes, dir, "sizes.dat"));
    FH_CHECK(fh_path_join(hetero, sizeof hetero, dir, "hetero.dat"));
    FH_CHECK(write_partition_data(fig->file, counts, sizes));
    FH_CHECK(write_hetero_data(fig->hetero, hetero));
    return write_partition_script(fig->file, fig->hetero, out, counts, sizes, hetero, image_path);
}

int partition_figure(const char *path, const char *out_path, PartitionFigureInfo *info)
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
    *info = (PartitionFigureInfo){ f.n_clients, f.classes, f.n_rows, f.n_corrupted };
    data_partfile_close(&f);
    return status;
}
