/* fedhet grid GRID.ini [key=value ...]: many federations in one MPI job. The options and the printing
 * modes (--list, --count) are here; the grid itself (its files, member claiming, the run) is src/grid
 * (fedhet/grid.h). Exit code: 0 when no member failed (also when SIGTERM interrupted the grid); 10 + N
 * when N members failed (N capped at 100); 1..5 as for every command when the grid itself is wrong. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "fedhet/core.h"
#include "fedhet/grid.h"

static void print_help(void)
{
    int n;
    const FhConfigKey *settings = grid_setting_keys(&n);
    printf("usage: mpirun -np N fedhet grid GRID.ini [section.key=value ...] [grid.KEY=LIST ...] [--force] [--yes]\n"
           "       mpirun -np N fedhet grid --resume outputs/GRID [--retry-failed]\n"
           "       fedhet grid GRID.ini --list | --count\n"
           "       srun fedhet grid GRID.ini --member I        (one member: a task of a SLURM job array)\n"
           "  A grid file is a run config (fedhet run --help lists its keys) plus a [grid] section of lists:\n"
           "      [grid]\n"
           "      algo.rho = 0.01, 0.05, 0.1       ; section.key = comma-separated values\n"
           "      seed = 0..2                      ; a bare key naming one config key; A..B: integers A to B\n"
           "      zip = train.lr, train.epochs     ; keys that vary together (lists of one length), one line per group\n"
           "      algo.rho = -, 0.05                ; -: this member leaves the key unset (zip it with algo.method to\n"
           "                                        ; give each method only its own keys)\n"
           "      ranks_per_member = 2             ; ranks per federation\n"
           "  [grid] settings (default); every other [grid] key is a list:\n");
    fh_config_print_args_help(stdout, settings, n);
    printf("  Members are the Cartesian product of the lists (the last key varies fastest). The N ranks are split\n"
           "  into N / ranks_per_member groups; each group runs one member at a time, as `fedhet run` would on that\n"
           "  many ranks (bit-identical results), until none is left.\n"
           "  Outputs: <[output] dir>/<grid name>/<member>/ (a run folder each, with its log.txt), members.csv, and\n"
           "  grid/ (the grid file, its arguments, the members' config and states). The grid name is [output] name,\n"
           "  else the grid file's name. A member name is key-value per swept key, e.g. rho-0.05_seed-1.\n"
           "  Command line: section.key=value applies to every member; grid.KEY=LIST replaces or adds a list,\n"
           "  grid.ranks_per_member=R and grid.zip=a,b the settings.\n"
           "  --force         replace an existing grid folder's members (their run folders are rewritten)\n"
           "  --yes           allow more than %d members\n"
           "  --resume DIR    continue an interrupted grid: finished members are skipped, members with a checkpoint\n"
           "                  resume from it, the others start\n"
           "  --retry-failed  with --resume or --member: run failed members again\n"
           "  --list          print the members (and whether their configs are valid) and exit\n"
           "  --count         print the number of members and exit (for sbatch --array=0-$((count-1)))\n"
           "  --member I      run member I (0-based) alone on all ranks, resuming it when it has a checkpoint\n"
           "  --verbose       also print the members' round lines (they always go to each member's log.txt)\n"
           "  Every member is checked before any starts (its config, its data file, its ranks against the clients, the\n"
           "  method): an invalid member refuses the whole grid, each one named, and nothing is written.\n"
           "  SIGTERM (or SIGUSR1 to mpirun, or SIGINT): running members finish their round (or leave one still running after\n"
           "  fl.term_grace seconds) and checkpoint, no new member starts, exit 0.\n"
           "  Exit codes: 0 no member failed; 10+N: N members failed (N <= 100); else as every command (fedhet --help).\n",
           GRID_MEMBERS_ASK);
}

/* ---- options -------------------------------------------------------------------------------------------- */

/* --count only prints the number of members; the rest is the grid's (grid.h) */
static int parse_options(GridOptions *o, int *count, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    *count = 0;
    o->member = -1;
    o->args = calloc((size_t)argc + 1, sizeof *o->args);
    if (!o->args) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--force")) o->force = 1;
        else if (!strcmp(a, "--yes")) o->yes = 1;
        else if (!strcmp(a, "--list")) o->list = 1;
        else if (!strcmp(a, "--count")) *count = 1;
        else if (!strcmp(a, "--verbose")) o->verbose = 1;
        else if (!strcmp(a, "--retry-failed")) o->retry_failed = 1;
        else if (!strcmp(a, "--resume")) FH_CHECK(app_option_value(argc, argv, &i, &o->resume_dir));
        else if (!strcmp(a, "--member")) {
            const char *v;
            FH_CHECK(app_option_value(argc, argv, &i, &v));
            int m;
            FH_CHECK(app_parse_int(v, "--member", 0, GRID_MEMBERS_MAX, &m));
            o->member = m;
        } else if (a[0] == '-') FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet grid --help)", a);
        else if (strchr(a, '=')) o->args[o->n_args++] = argv[i];
        else if (!o->grid_path) o->grid_path = a;
        else FH_FAIL(FH_ERR_USAGE, "unexpected argument '%s' (one GRID.ini; overrides are section.key=value)", a);
    }
    if (o->resume_dir && o->grid_path)
        FH_FAIL(FH_ERR_USAGE, "--resume %s takes no grid file (it uses %s/grid/grid.ini)", o->resume_dir, o->resume_dir);
    if (o->resume_dir && o->n_args)
        FH_FAIL(FH_ERR_USAGE, "--resume takes no key=value: a grid continues with the arguments it started with");
    if (!o->resume_dir && !o->grid_path) FH_FAIL(FH_ERR_USAGE, "need GRID.ini or --resume DIR (see fedhet grid --help)");
    if (o->force && o->resume_dir) FH_FAIL(FH_ERR_USAGE, "--force and --resume exclude each other");
    if (o->member >= 0 && (o->list || *count)) FH_FAIL(FH_ERR_USAGE, "--member runs a member; --list and --count only print");
    if (o->retry_failed && !o->resume_dir && o->member < 0)
        FH_FAIL(FH_ERR_USAGE, "--retry-failed goes with --resume DIR or --member I");
    return FH_OK;
}

/* --list: the members, and which are invalid (grid_check) */
static void print_list(const Grid *G)
{
    const GridSpec *g = &G->g;
    const char *invalid = G->invalid;
    char **messages = G->messages;
    printf("grid %s: %lld member%s", g->dir, (long long)g->n_members, g->n_members == 1 ? "" : "s");
    for (int d = 0; d < g->n_dims; d++) printf("%s%d", d ? " x " : " (", g->dim_size[d]);
    if (g->ranks_per_member) printf("), ranks_per_member %d\n", g->ranks_per_member);
    else printf("), ranks_per_member: all ranks\n");
    printf("%6s  %-40s", "index", "member");
    for (int a = 0; a < g->n_axes; a++) printf("  %s", g->axes[a].key);
    printf("\n");
    for (int64_t i = 0; i < g->n_members; i++) {
        char name[1024];
        grid_member_name(g, i, name, sizeof name);
        printf("%6lld  %-40s", (long long)i, name);
        for (int a = 0; a < g->n_axes; a++) printf("  %s", grid_member_value(g, i, a));
        if (invalid && invalid[i]) printf("  INVALID: %s", messages && messages[i] ? messages[i] : "");
        printf("\n");
    }
}

/* rank 0: everything before the members; *quit = 1 when the command only prints */
static int prepare(Grid *G, const GridOptions *o, int count, int *quit)
{
    *quit = 0;
    FH_CHECK(grid_load(G, o));
    if (count) {
        printf("%lld\n", (long long)G->g.n_members);
        *quit = 1;
        return FH_OK;
    }
    FH_CHECK(grid_check(G, o));
    if (o->list) {
        print_list(G);
        *quit = 1;
        return FH_OK;
    }
    return grid_prepare(G, o);
}

int app_cmd_grid(int argc, char **argv)
{
    Grid G;
    grid_init(&G);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (G.world_rank == 0) print_help();
            return FH_OK;
        }
    GridOptions o;
    int count = 0;
    int status = parse_options(&o, &count, argc, argv);
    if (status != FH_OK) {
        free(o.args);
        return status;
    }
    fh_log_set_rank(-1);
    /* rank 0 checks everything and prepares the folder; the others wait for its verdict in grid_run */
    int quit = 0;
    if (G.world_rank == 0) status = prepare(&G, &o, count, &quit);
    status = grid_run(&G, &o, status, quit);
    free(o.args);
    grid_free(&G);
    return status;
}
