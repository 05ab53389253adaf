/* fedhet landscape CHECKPOINT.h5 [key=value ...]: the settings and --help; the landscape itself
 * (directions, evaluation spread over the ranks, outputs) is src/analysis/landscape.c (fedhet/analysis.h). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "fedhet/analysis.h"
#include "fedhet/config.h"
#include "fedhet/core.h"

static void print_help(void)
{
    int n;
    const FhConfigKey *keys = landscape_keys(&n);
    printf("usage: mpirun -np N fedhet landscape CHECKPOINT.h5 [key=value ...]\n"
           "  The test loss around the model of a checkpoint (checkpoint.h5 or run.h5 of a run folder) along random\n"
           "  filter-normalised directions (Li et al. 2018); the grid points are spread over the N ranks.\n"
           "  keys (default):\n");
    fh_config_print_args_help(stdout, keys, n);
    printf("  Exit codes: 1 usage, 2 a missing input file or a bad data file, 4 a damaged checkpoint, I/O or gnuplot\n"
           "  failure, 5 MPI, 6 out of memory (the table of fedhet --help).\n");
}

static int parse_args(LandscapeOptions *o, FhConfig **cfg, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    char **settings = NULL;
    FH_CHECK(fh_calloc(&settings, (size_t)argc + 1, sizeof *settings, "the landscape's keys"));
    int n_settings = 0, status = FH_OK;
    for (int i = 1; i < argc && status == FH_OK; i++) {
        const char *a = argv[i];
        if (a[0] == '-')
            status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__,
                                    "unknown option '%s' (see fedhet landscape --help)", a);
        else if (strchr(a, '=')) settings[n_settings++] = argv[i];
        else if (o->checkpoint)
            status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__,
                                    "unexpected argument '%s' (one CHECKPOINT.h5; settings are key=value)", a);
        else o->checkpoint = a;
    }
    int n;
    const FhConfigKey *keys = landscape_keys(&n);
    if (status == FH_OK) status = fh_config_load_args(cfg, keys, n, settings, n_settings, NULL);
    free(settings);
    FH_CHECK(status);
    fh_config_land(*cfg, NULL, o); /* the keys' fields; checkpoint has no key */
    if (!o->checkpoint) FH_FAIL(FH_ERR_USAGE, "give a checkpoint: fedhet landscape outputs/NAME/run.h5 (see --help)");
    FH_CHECK(fh_check_plain_name(o->name, "name"));
    return FH_OK;
}

int app_cmd_landscape(int argc, char **argv)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (rank == 0) print_help();
            return FH_OK;
        }
    LandscapeOptions o;
    FhConfig *cfg = NULL; /* holds the strings of o */
    int status = parse_args(&o, &cfg, argc, argv);
    fh_log_set_rank(-1);
    if (status == FH_OK) status = landscape_run(&o, MPI_COMM_WORLD);
    fh_config_free(&cfg);
    return status;
}
