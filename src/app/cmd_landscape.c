/* fedhet landscape CHECKPOINT.h5 [key=value ...]: the settings and --help; the landscape itself
 * (directions, evaluation spread over the ranks, outputs) is src/analysis/landscape.c (fedhet/analysis.h). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "fedhet/analysis.h"
#include "fedhet/config.h"
#include "fedhet/core.h"

static const char *const ls_keys[] = { "dims", "points", "span", "seed", "subset", "batch", "data", "bias",
                                       "out", "name", "threads", "save_directions" };

static void print_help(void)
{
    printf("usage: mpirun -np N fedhet landscape CHECKPOINT.h5 [key=value ...]\n"
           "  The test loss around the model of a checkpoint (checkpoint.h5 or run.h5 of a run folder) along random\n"
           "  filter-normalised directions (Li et al. 2018); the grid points are spread over the N ranks.\n"
           "  keys:\n"
           "    dims=2            1: a curve along one direction; 2: a surface over two\n"
           "    points=21         points per axis (odd: the model itself is the centre point)\n"
           "    span=1            coordinates from -span to span, in units of the normalised direction\n"
           "    seed=0            seed of the directions (Philox, purpose projection)\n"
           "    subset=0          test rows used, spread evenly over the test set; 0: all of them\n"
           "    batch=500         rows per forward pass\n"
           "    data=PATH         the partition file (default: [data] path of the checkpoint's config)\n"
           "    bias=zero         1-D tensors (biases, norm weights): zero, or weights (the tensor itself)\n"
           "    out=DIR           output folder (default: the checkpoint's folder)\n"
           "    name=landscape    writes DIR/NAME.h5 (/alpha, /beta, /loss, /accuracy and the settings as\n"
           "                      attributes) and DIR/NAME.png (a curve, or a heat map of log10 loss with contours)\n"
           "    threads=1         OpenBLAS threads per rank\n"
           "    save_directions=0 1: also store the two direction vectors (/directions, 2 x model size)\n"
           "  Exit codes: 1 usage, 2 bad data file, 4 a damaged checkpoint, I/O or gnuplot failure, 5 MPI.\n");
}

static int parse_args(LandscapeOptions *o, int argc, char **argv)
{
    landscape_options_default(o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        if (a[0] == '-') FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet landscape --help)", a);
        if (!eq) {
            if (o->checkpoint) FH_FAIL(FH_ERR_USAGE, "unexpected argument '%s' (one CHECKPOINT.h5; settings are key=value)", a);
            o->checkpoint = a;
            continue;
        }
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(eq - a), a);
        const char *v = eq + 1;
        int n;
        if (!strcmp(key, "dims")) FH_CHECK(app_parse_int(v, "dims", 1, 2, &o->dims));
        else if (!strcmp(key, "points")) FH_CHECK(app_parse_int(v, "points", 2, 1001, &o->points));
        else if (!strcmp(key, "span")) FH_CHECK(app_parse_float(v, "span", 1e-9, 1e6, &o->span));
        else if (!strcmp(key, "seed")) {
            FH_CHECK(app_parse_int(v, "seed", 0, 2147483647, &n));
            o->seed = n;
        } else if (!strcmp(key, "subset")) FH_CHECK(app_parse_int(v, "subset", 0, 2000000000, &o->subset));
        else if (!strcmp(key, "batch")) FH_CHECK(app_parse_int(v, "batch", 1, 65536, &o->batch));
        else if (!strcmp(key, "threads")) FH_CHECK(app_parse_int(v, "threads", 1, 256, &o->threads));
        else if (!strcmp(key, "save_directions")) FH_CHECK(app_parse_int(v, "save_directions", 0, 1, &o->save_directions));
        else if (!strcmp(key, "data")) o->data = v;
        else if (!strcmp(key, "out")) o->out = v;
        else if (!strcmp(key, "name")) o->name = v;
        else if (!strcmp(key, "bias")) {
            if (strcmp(v, "zero") && strcmp(v, "weights")) FH_FAIL(FH_ERR_USAGE, "bias = '%s': expected zero or weights", v);
            o->bias = v;
        } else {
            const char *near = fh_nearest_name(key, ls_keys, (int)(sizeof ls_keys / sizeof ls_keys[0]));
            if (near) FH_FAIL(FH_ERR_USAGE, "unknown key '%s'; did you mean %s? (see fedhet landscape --help)", key, near);
            FH_FAIL(FH_ERR_USAGE, "unknown key '%s' (see fedhet landscape --help)", key);
        }
    }
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
    FH_CHECK(parse_args(&o, argc, argv));
    fh_log_set_rank(-1);
    return landscape_run(&o, MPI_COMM_WORLD);
}
