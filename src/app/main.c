/* fedhet: the one executable. Dispatches subcommands; turns statuses into exit codes (docs/usage.md, The executable). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "app.h"
#include "fedhet/core.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    int needs_mpi; /* only these start MPI: the others run as plain programs */
    int stops_on_signal; /* SIGTERM/SIGUSR1 end these at their next safe point (checkpoint, exit 0) */
} AppCommand;

static const AppCommand commands[] = {
    {"run", app_cmd_run, "one experiment (mpirun -np N fedhet run CONFIG.ini [key=value ...])", 1, 1},
    {"partition", app_cmd_partition, "raw data set -> partitioned HDF5 file (SRC DST.h5 [key=value ...])", 0, 0},
    {"inspect", app_cmd_inspect, "what a partition file holds (FILE.h5), or a model's layers (--model NAME)", 0, 0},
    {"methods", app_cmd_methods, "every federated method: components, state, payload (methods NAME: its keys)", 0, 0},
    {"bench", app_cmd_bench, "one engine benchmark point as a CSV line", 0, 0},
    {"grid", app_cmd_grid, "many experiments in one MPI job: the lists of a [grid] section (GRID.ini [key=value ...])", 1, 1},
    {"report", app_cmd_report, "summary tables and plots of runs and grids (DIR), or a partition file (--partition DST.h5 OUT.png)", 0, 0},
    {"export", app_cmd_export, "a run's global model as an ONNX inference graph (RUN_DIR [--round R] FILE.onnx)", 1, 0},
    {"landscape", app_cmd_landscape, "loss around a model along random filter-normalised directions (CHECKPOINT.h5)", 1, 0},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: fedhet <command> [options]   (fedhet <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nexit codes: 0 ok, 1 usage or config, 2 input data, 3 numerical divergence, 4 I/O, 5 MPI\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return FH_ERR_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return FH_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) != 0) continue;
        int rank = 0;
        /* before MPI_Init, which alone takes about half a second: a time limit's signal then is kept */
        if (commands[i].stops_on_signal) fh_stop_signals_install();
        if (commands[i].needs_mpi) {
            if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
                fprintf(stderr, "fedhet %s: error: MPI_Init failed\n", argv[1]);
                return FH_ERR_MPI;
            }
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        }
        int status = commands[i].run(argc - 1, argv + 1);
        /* every rank reaches the same status; one message is enough (the call chain only for a bug, or with
         * FEDHET_TRACE=1: fh_error_text) */
        if (status != FH_OK && rank == 0) fprintf(stderr, "fedhet %s: error: %s\n", argv[1], fh_error_text(status));
        if (commands[i].needs_mpi) MPI_Finalize();
        return status;
    }
    fprintf(stderr, "fedhet: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return FH_ERR_USAGE;
}
