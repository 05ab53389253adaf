/* fedhet command line: one function per subcommand, each returning an fh status (= exit code). */
#ifndef FEDHET_APP_H
#define FEDHET_APP_H

#include <stdio.h>

#include "fedhet/nn.h"

int app_cmd_run(int argc, char **argv);
int app_cmd_partition(int argc, char **argv);
int app_cmd_inspect(int argc, char **argv);
int app_cmd_bench(int argc, char **argv);
int app_cmd_report(int argc, char **argv);
int app_cmd_grid(int argc, char **argv);
int app_cmd_landscape(int argc, char **argv);
int app_cmd_methods(int argc, char **argv);
int app_cmd_export(int argc, char **argv);
int app_cmd_steps(int argc, char **argv);
int app_cmd_keys(int argc, char **argv);

/* A subcommand: its row of the one table of them (src/app/main.c), which `fedhet --help`, the dispatch and
 * `fedhet keys commands` read. */
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    int needs_mpi; /* only these start MPI: the others run as plain programs */
    int stops_on_signal; /* SIGTERM/SIGUSR1 end these at their next safe point (checkpoint, exit 0) */
    const char *options; /* the options it takes besides --help, space-separated */
    const char *keys;    /* the command whose config keys it takes (a grid's are a run's); NULL: none */
} AppCommand;
const AppCommand *app_commands(int *n);

/* ---- tables for scripts (src/app/table.c): `fedhet keys`, `fedhet methods --format` ----
 * TSV: a header row, then a row per line; a tab, newline, carriage return or backslash in a cell is written \t,
 * \n, \r or \\. JSON: an array of objects, one per row, keyed by the column names. A list cell is its items
 * joined by single spaces in TSV and an array of strings in JSON; a bool cell is true or false in both. */
typedef enum { APP_FORMAT_TEXT, APP_FORMAT_TSV, APP_FORMAT_JSON } AppFormat;
typedef enum { APP_CELL_TEXT, APP_CELL_LIST, APP_CELL_BOOL } AppCellKind;
typedef struct {
    const char *name;
    AppCellKind kind;
} AppColumn;
typedef struct {
    FILE *out;
    AppFormat format; /* TSV or JSON */
    const AppColumn *columns;
    int n_columns, rows;
} AppTable;
void app_table_begin(AppTable *t, FILE *out, AppFormat format, const AppColumn *columns, int n_columns);
/* cells[n_columns]: text (NULL reads as ""); a list's items space-separated; a bool's "true" or "false" */
void app_table_row(AppTable *t, const char *const *cells);
void app_table_end(AppTable *t);
/* argv[*i] "--format=F" or "--format F" (F = tsv, json, or text where text_allowed): *format set, *i advanced past a
 * separate value, *consumed 1; another argument: *consumed 0. A bad or missing F is FH_ERR_USAGE naming it. */
int app_format_take(int argc, char **argv, int *i, int text_allowed, AppFormat *format, int *consumed);

/* every registry row as a table (`fedhet methods --format`, `fedhet keys methods`) */
void app_methods_table(FILE *out, AppFormat format);

/* "1x28x28" -> {1, 28, 28} */
int app_parse_shape(const char *text, NnShape *shape);
/* strict integer / float parsing; `what` names the option in the error */
int app_parse_int(const char *text, const char *what, long lo, long hi, int *out);
int app_parse_float(const char *text, const char *what, double lo, double hi, double *out);
/* argv[*i] is an option that needs a value: returns it and advances, or fails naming the option */
int app_option_value(int argc, char **argv, int *i, const char **value);

/* model options shared by inspect and bench: --model --input --classes --norm --groups --backend; --model FILE.onnx
 * reads the graph, whose input shape and class count become the defaults */
typedef struct {
    const char *model;
    NnShape input;
    int input_given;
    int classes;
    int classes_given;
    NnZooOptions zoo;
    struct OnnxNet *net; /* --model FILE.onnx: its graph (zoo.build builds it) */
} AppModelArgs;
void app_model_args_default(AppModelArgs *a);
/* consumes argv[*i] (and its value) if it is a model option: 1 consumed, 0 not ours, <0 never (errors are statuses) */
int app_model_args_take(AppModelArgs *a, int argc, char **argv, int *i, int *consumed);
/* after the options: an input shape from an ONNX file that --input would refuse is FH_ERR_DATA naming the file */
int app_model_args_check(const AppModelArgs *a);
/* mlp/cnn/lenet/smallcnn default to 1x28x28, the ResNets and MobileNetV2 to 3x32x32 */
NnShape app_default_input(const char *model);

#endif
