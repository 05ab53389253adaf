/* fedhet analysis (src/analysis): what is computed from finished runs and checkpoints.
 *   report.c     summary tables and plots of a run folder, a grid folder or a folder of run folders
 *                (statistics of docs/methods/metrics.md C.2 and C.3): fedhet report DIR
 *   landscape.c  the test loss around a checkpoint's model along random filter-normalised directions,
 *                spread over the ranks of a communicator: fedhet landscape
 *   plot.c       PNG figures drawn by gnuplot, for both and for fedhet report --partition
 * Above fl (checkpoints are read through fl's reader) and grid (a grid folder's members and states). */
#ifndef FEDHET_ANALYSIS_H
#define FEDHET_ANALYSIS_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "fedhet/config.h"

/* ---- report (src/analysis/report.c) ---- */
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
    int redraw;           /* 1: only the figures, again, from dir's summary.csv and curves.csv (report_redraw) */
} ReportOptions;

/* The options of fedhet report DIR (`--KEY VALUE`, a BOOL `--KEY`), with their defaults and help */
const FhConfigKey *report_option_keys(int *n);
/* the option named key ("last", "x", ...), NULL for none */
const FhConfigKey *report_option(const char *key);
void report_options_default(ReportOptions *o);
/* --targets: comma-separated numbers into o->targets */
int report_parse_targets(const char *text, ReportOptions *o);
/* Writes summary.csv, summary.md, curves.csv and the figures, and prints the summary table on stdout; with
 * o->redraw, report_redraw instead. */
int report_runs(const ReportOptions *o);
/* The figures of a report folder drawn again from its own summary.csv (the sensitivity figures) and curves.csv
 * (the curves, when the folder has one: reports made before it existed have not), with the name and metric of
 * its summary.md, into out_dir (NULL: dir); no run folder is read. */
int report_redraw(const ReportOptions *o);

/* statistics (docs/methods/metrics.md C.2, C.3) */
/* mean, and sample std (divisor n - 1; NAN for n < 2) of the finite values among x[0..n) */
void report_mean_std(const double *x, int n, double *mean, double *std, int *count);
/* the smallest 1-based round t + 1 with a[t] >= target among finite values, or 0 when never */
int report_rounds_to(const double *a, int n, double target);
/* mean of the last k finite values (all when fewer) */
double report_last_k_mean(const double *a, int n, int k);

/* ---- a partition file's figure (src/analysis/partition_figure.c) ---- */
typedef struct {
    int n_clients, classes;
    int64_t n_rows;
    int n_corrupted;
} PartitionFigureInfo;
/* OUT.png of partition file `path`: client x label heat map over the client sizes, per-client label entropy
 * and TV (corrupted clients in red); what it showed into *info. OUT must not be the partition file. */
int partition_figure(const char *path, const char *out_path, PartitionFigureInfo *info);

/* ---- landscape (src/analysis/landscape.c) ---- */
typedef struct {
    const char *checkpoint; /* checkpoint.h5 or run.h5 of a run folder */
    int dims;               /* 1: a curve along one direction; 2: a surface over two */
    int points;             /* per axis (odd: the model itself is the centre point) */
    double span;            /* coordinates from -span to span, in units of the normalised direction */
    int64_t seed;           /* of the directions (Philox, purpose projection) */
    int subset;             /* test rows used, spread evenly over the test set; 0: all of them */
    int batch;              /* rows per forward pass */
    int threads;            /* OpenBLAS threads per rank */
    int save_directions;    /* 1: also store the direction vectors (/directions) */
    const char *data;       /* the partition file; "": [data] path of the checkpoint's config */
    const char *out;        /* output folder; "": the checkpoint's folder */
    const char *name;       /* writes OUT/NAME.h5 and OUT/NAME.png */
    const char *bias;       /* 1-D tensors (biases, norm weights): "zero" or "weights" (the tensor itself) */
} LandscapeOptions;

/* Its keys (`fedhet landscape key=value`, section "landscape"), landing in LandscapeOptions */
const FhConfigKey *landscape_keys(int *n);
/* Every rank of comm: the points are dealt to the ranks in turn; rank 0 writes OUT/NAME.h5 (atomically)
 * and draws OUT/NAME.png. The numbers do not depend on the rank count. The same status on every rank. */
int landscape_run(const LandscapeOptions *o, MPI_Comm comm);

/* ---- gnuplot figures (src/analysis/plot.c) ----
 * A figure's data files and script go to a private temporary folder; gnuplot draws into the image's
 * atomic temporary (fh_atomic_open), which replaces OUT only when gnuplot succeeded, so a failure never
 * leaves a partial image. */
/* Writes the figure's data files into `dir` and its gnuplot script into `script` (an open file), which
 * must draw into `image`. */
typedef int (*PlotWriter)(void *ctx, const char *dir, FILE *script, const char *image);
/* Draws out_path (a PNG) with the script write() produces. Errors: FH_ERR_IO naming gnuplot's stderr
 * tail, a missing gnuplot (naming its package) or an unwritable destination. */
int plot_png(const char *out_path, PlotWriter write, void *ctx);
/* s as a single-quoted gnuplot string */
void plot_gp_string(FILE *out, const char *s);
/* "set terminal pngcairo size W,H noenhanced font ',10'" (png when cairo is missing) and "set output" */
void plot_gp_terminal(FILE *out, int width, int height, const char *image);
/* plot_gp_terminal plus the legend of `entries` entries, the longest `longest` characters: at the right of the
 * plot when it fits there (a quarter of the width), else below it in columns, the image made taller for it */
void plot_gp_terminal_key(FILE *out, int width, int height, const char *image, int entries, int longest);

#endif
