/* fedhet grid (src/grid): a grid file is a run config plus a [grid] section whose keys hold lists; the
 * Cartesian product of the lists (keys named on one `zip` line vary together) gives the members, each one
 * federation with its own run folder <[output] dir>/<grid name>/<member>/.
 *
 * The grid folder:
 *   members.csv            one line per member: values, state, exit code, seconds, message
 *   <member>/              the member's run folder (fl_run: config.ini, metrics.csv, run.h5, log.txt ...)
 *   grid/grid.ini          the grid file as given; grid/args.txt its command-line arguments, one a line
 *   grid/base.ini          the grid file without [grid] (its lines blanked): every member's config file
 *   grid/status/<member>.ini   the member's state, written by the rank that serves it
 *   grid/claims/<member>   made (O_EXCL) by the group that takes the member, so each runs once */
#ifndef FEDHET_GRID_H
#define FEDHET_GRID_H

#include <stddef.h>
#include <stdint.h>

#include "fedhet/config.h"

#define GRID_MAX_AXES 32
#define GRID_PATH 4096
#define GRID_MEMBERS_ASK 1000     /* more members than this need --yes */
#define GRID_MEMBERS_MAX 10000000 /* never more than this */
#define GRID_VALUES_MAX 100000    /* values in one list */

typedef struct {
    char key[128];        /* resolved "section.key" */
    char short_name[128]; /* the key in member names: the part after the dot, or all of it when ambiguous */
    char **values;
    int n_values, cap_values;
    int dim;              /* dimension of the product (keys on one zip line share one) */
    int line;             /* line in the grid file; 0: command line */
} GridAxis;

typedef struct {
    char path[GRID_PATH]; /* the grid file */
    char *text;           /* as read */
    char *base_text;      /* without [grid]: its header and lines turned into comments */
    GridAxis axes[GRID_MAX_AXES];
    int n_axes;
    int n_dims;
    int dim_size[GRID_MAX_AXES];
    int ranks_per_member; /* 0: not given (all ranks, one member at a time) */
    int64_t n_members;
    char **overrides;     /* command-line "section.key=value", applied to every member */
    int n_overrides;
    char out_dir[GRID_PATH], name[512];
    char dir[GRID_PATH];  /* out_dir/name: the grid folder */
} GridSpec;

/* Reads the grid file and its command-line arguments: "section.key=value" overrides every member's
 * config; "grid.KEY=LIST" sets a list or a [grid] setting (grid.ranks_per_member=2, grid.zip=a,b).
 * Errors (FH_ERR_USAGE, naming file, line and key): no [grid] section or no list in it, a key that is
 * not a config key, an empty list or item, a repeated value, zip lines that do not fit, an override of a
 * swept key, output.dir or output.name in [grid], member names that collide, more than GRID_MEMBERS_MAX
 * members. */
int grid_spec_load(GridSpec *g, const char *path, char *const *args, int n_args);
void grid_spec_free(GridSpec *g);

/* Member i's value of axis a */
/* a list item "-": the member does not set the key (it keeps its default) */
int grid_value_is_unset(const char *value);
const char *grid_member_value(const GridSpec *g, int64_t i, int a);
/* "rho_max-0.05_seed-1": short_name-value per axis, joined by '_'; characters other than
 * [A-Za-z0-9.+-] in values become '~' */
void grid_member_name(const GridSpec *g, int64_t i, char *out, size_t size);
/* Every override of member i: the command line's, its values, output.dir = the grid folder and
 * output.name = its name. Free with grid_strings_free. */
int grid_member_overrides(const GridSpec *g, int64_t i, char ***out, int *n);
void grid_strings_free(char **v, int n);
/* A `section.key` or a bare key that names one config key (a base key or a key of some method) ->
 * "section.key"; FH_ERR_USAGE with the nearest key otherwise. `where` prefixes the message. */
int grid_resolve_key(const char *given, const char *where, char *out, size_t size);
/* The [grid] settings (ranks_per_member, zip): every other [grid] key lists the values of a run key */
const FhConfigKey *grid_setting_keys(int *n);

/* ---- member states (grid/status/<member>.ini; src/grid/spec.c) ---- */
typedef enum { GRID_PENDING = 0, GRID_RUNNING, GRID_DONE, GRID_FAILED, GRID_STOPPED } GridState;

typedef struct {
    GridState state;
    int exit_code;
    double seconds;     /* wall time of the last attempt */
    int group, attempt; /* the group that ran it; attempts so far */
    int rounds_done;
    double final_accuracy; /* NAN when unknown */
    char message[1024]; /* the error of a failed member, one line */
} GridStatus;

const char *grid_state_name(GridState s);
/* Reads grid_dir/grid/status/<member>.ini; a missing file is GRID_PENDING. */
int grid_status_read(const char *grid_dir, const char *member, GridStatus *s);
int grid_status_write(const char *grid_dir, const char *member, const GridStatus *s);

/* ---- the grid run (src/grid/run.c) ----
 * MPI_COMM_WORLD is split into groups of ranks_per_member ranks; each group runs one member at a time
 * (fl_run on the group), claiming the next by creating grid/claims/<index>, until none is left. Rank 0
 * alone loads, checks and prepares (grid_load, grid_check, grid_prepare: a command that only prints stops
 * between them); then every rank calls grid_run. */
#define GRID_EXIT_FAILED 10 /* grid_run's status when members failed: this + their number (at most 100) */

typedef struct {
    const char *grid_path;  /* the grid file; NULL with resume_dir */
    const char *resume_dir; /* a grid folder to continue (its grid/grid.ini and grid/args.txt) */
    char **args;            /* section.key=value and grid.KEY=LIST */
    int n_args;
    int force;              /* replace an existing grid folder's members */
    int yes;                /* allow more than GRID_MEMBERS_ASK members */
    int list;               /* the members are only listed: no rank count or --yes check */
    int verbose;            /* members' round lines on stdout too (they always go to their log.txt) */
    int retry_failed;       /* run failed members again (resume_dir or member) */
    long member;            /* run this member alone on all ranks; -1: every member */
} GridOptions;

typedef struct {
    GridSpec g;
    char *plan;                      /* [n_members] what this session does with each member */
    char *invalid;                   /* [n_members] grid_check: 1 where the member's config fails */
    char **messages;                 /* [n_members] grid_check: the first line of that error, else NULL */
    int64_t n_invalid;
    int first_status;                /* the first invalid member's status (its exit code) */
    char base_path[GRID_PATH + 64];  /* grid/base.ini: every member's config file */
    int world_rank, world_size, ranks_per_member, n_groups;
} Grid;

/* Zeroes G and records this rank's place in MPI_COMM_WORLD. */
void grid_init(Grid *G);
/* The grid of o: its file and arguments, or with resume_dir those it was started with (the members then
 * live where the folder is now). */
int grid_load(Grid *G, const GridOptions *o);
/* Rank 0: o->member in range, more than GRID_MEMBERS_ASK members only with --yes, a rank count that fits
 * (both unless o->list), then every member checked as fl_run would before its folder exists: the config, the
 * data file (or a source to make it), the rank count against the clients, the method (G->invalid, G->messages). */
int grid_check(Grid *G, const GridOptions *o);
/* Rank 0, before any member starts: refuses a grid with an invalid member (naming them; its status is the
 * first one's) and an existing folder (unless resumed or forced), writes grid/ (grid.ini, args.txt,
 * base.ini) and plans each member (skip finished ones, resume those with a checkpoint). */
int grid_prepare(Grid *G, const GridOptions *o);
/* Every rank: rank 0's status and whether the command only printed (quit) are broadcast; then the other
 * ranks load the same grid, the groups run the planned members, and rank 0 writes members.csv and the
 * summary lines. The same status on every rank (see GRID_EXIT_FAILED). */
int grid_run(Grid *G, const GridOptions *o, int rank0_status, int rank0_quit);
void grid_free(Grid *G);

#endif
