/* PNG figures drawn by gnuplot (Debian gnuplot-nox), shared by fedhet report and fedhet landscape.
 * A figure's data files and script go to a private temporary folder; gnuplot draws into OUT.tmp-<pid>,
 * which is renamed over OUT only when gnuplot succeeded, so a failure never leaves a partial image. */
#ifndef FEDHET_APP_PLOT_H
#define FEDHET_APP_PLOT_H

#include <stddef.h>
#include <stdio.h>

/* Writes the figure's data files into `dir` and its gnuplot script into `script` (an open file), which
 * must draw into `image`. */
typedef int (*AppPlotWriter)(void *ctx, const char *dir, FILE *script, const char *image);

/* Draws out_path (a PNG) with the script write() produces. Errors: FH_ERR_IO naming gnuplot's stderr
 * tail, a missing gnuplot or an unwritable destination. */
int app_plot_png(const char *out_path, AppPlotWriter write, void *ctx);

/* s as a single-quoted gnuplot string */
void app_gp_string(FILE *out, const char *s);
/* "set terminal pngcairo size W,H noenhanced font ',10'" (png when cairo is missing) and "set output" */
void app_gp_terminal(FILE *out, int width, int height, const char *image);
/* The first executable `name` on PATH; FH_ERR_IO naming the package otherwise. */
int app_find_program(const char *name, const char *package, char *out, size_t size);

#endif
