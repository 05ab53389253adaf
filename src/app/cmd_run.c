/* fedhet run CONFIG.ini [key=value ...] [--force] | fedhet run --resume RUN_DIR [CONFIG.ini] [key=value ...] */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "fedhet/core.h"
#include "fedhet/fl.h"

static void print_help(void)
{
    printf("usage: mpirun -np N fedhet run CONFIG.ini [section.key=value ...] [--force]\n"
           "       mpirun -np N fedhet run --resume outputs/NAME [section.key=value ...]\n"
           "  Rank 0 is the server, ranks 1..N-1 train the clients (N = 1: one process does both).\n"
           "  Writes outputs/NAME/: config.ini (resolved), metrics.csv, clients.csv, run.h5, checkpoint.h5, log.txt,\n"
           "  and client-state.bin for a method that keeps state per client (SCAFFOLD's c_k, ...; checkpoints refer to it).\n"
           "  --force    replace an existing run folder (never one that is a symbolic link)\n"
           "  --resume   continue a run from its checkpoint (only fl.rounds and fl.term_grace may change); a\n"
           "             finished run whose run.h5 is missing, damaged or older than its checkpoint gets it written; a\n"
           "             folder without a checkpoint (stopped before its first one) starts again from round 1\n"
           "  One writer per run folder: a run holds a lock on NAME/.lock; another run, --resume or --force of it\n"
           "  exits 1 naming the holder's pid and host. A full disk is exit 4 naming the file; the last checkpoint\n"
           "  stays, and --resume continues once there is room (docs/reliability.md).\n"
           "  SIGTERM (SLURM's time limit; to every rank, not to mpirun), SIGUSR1 (to mpirun, which forwards it) or\n"
           "  SIGINT (Ctrl-C; mpirun itself then exits 1, the ranks 0) finishes the round, checkpoints and exits 0\n"
           "  with the line to resume. A round still running\n"
           "  fl.term_grace seconds (default 60) after the signal is left between local steps instead: the run\n"
           "  stops with the checkpoint of the round before.\n"
           "  SIGTERM to mpirun itself kills the ranks 1 s later (Open MPI): no checkpoint, exit nonzero.\n\n"
           "config keys ([section] key, type, default, allowed values):\n");
    fl_print_config_help(stdout);
}

int app_cmd_run(int argc, char **argv)
{
    FlRunOptions opt;
    memset(&opt, 0, sizeof opt);
    static char *overrides[256];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            int rank = 0, inited = 0;
            MPI_Initialized(&inited);
            if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            if (rank == 0) print_help();
            return FH_OK;
        }
        if (!strcmp(argv[i], "--force")) opt.force = 1;
        else if (!strcmp(argv[i], "--resume")) {
            if (i + 1 >= argc) FH_FAIL(FH_ERR_USAGE, "--resume needs the run folder, e.g. --resume outputs/demo");
            opt.resume_dir = argv[++i];
        } else if (argv[i][0] == '-') FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet run --help)", argv[i]);
        else if (strchr(argv[i], '=')) {
            if (opt.n_overrides == 256) FH_FAIL(FH_ERR_USAGE, "more than 256 overrides");
            overrides[opt.n_overrides++] = argv[i];
        } else if (!opt.config_path) opt.config_path = argv[i];
        else FH_FAIL(FH_ERR_USAGE, "unexpected argument '%s' (one CONFIG.ini; overrides are section.key=value)", argv[i]);
    }
    if (!opt.config_path && !opt.resume_dir) FH_FAIL(FH_ERR_USAGE, "need CONFIG.ini or --resume RUN_DIR (see fedhet run --help)");
    if (opt.force && opt.resume_dir) FH_FAIL(FH_ERR_USAGE, "--force and --resume exclude each other");
    opt.overrides = overrides;
    return fl_run(&opt, MPI_COMM_WORLD);
}
