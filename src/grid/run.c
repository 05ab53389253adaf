/* The grid run (grid.h): many federations in one MPI job.
 *
 * MPI_COMM_WORLD is split (MPI_Comm_split) into groups of ranks_per_member consecutive ranks; each group
 * is a whole federation (fl_run on the group's communicator, its rank 0 the server) and takes members in
 * turn until none is left: the group's rank 0 claims the next member by creating grid/claims/<index>
 * with O_EXCL (no rank is a dispatcher, and no MPI progress is needed between groups), then broadcasts
 * it to its group. Errors every rank of a member sees (a bad value, divergence) come back from fl_run on
 * every rank of the group: the member is recorded as failed and the group goes on. SIGTERM: running
 * members finish their round and checkpoint (fl_run), no group starts another member, and
 * `fedhet grid --resume DIR` later skips finished members and resumes the others.
 *
 * Status of grid_run: FH_OK when no member failed (also when SIGTERM interrupted the grid: the resume line
 * says how to go on); GRID_EXIT_FAILED + N when N members failed (N capped at 100); 1..5 as for every
 * command when the grid itself is wrong, before any member starts. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fedhet/grid.h"
#include "fedhet/core.h"
#include "fedhet/fl.h"

/* ---- small helpers -------------------------------------------------------------------------------------- */

static int stop_seen(void) { return fh_stop_requested(); }

static int bcast_polite(void *buf, int bytes, MPI_Comm comm)
{
    MPI_Request req;
    if (MPI_Ibcast(buf, bytes, MPI_BYTE, 0, comm, &req) != MPI_SUCCESS) FH_FAIL(FH_ERR_MPI, "MPI_Ibcast failed");
    return fl_wait(&req);
}

static int barrier_polite(MPI_Comm comm)
{
    MPI_Request req;
    if (MPI_Ibarrier(comm, &req) != MPI_SUCCESS) FH_FAIL(FH_ERR_MPI, "MPI_Ibarrier failed");
    return fl_wait(&req);
}

/* Removes the plain files of a folder (grid/status with --force, grid/claims) but those another process
 * holds locked: the claim of a member that another grid job (a second `grid --resume` of this folder) is
 * running stays, so that this job does not run it too. Locks die with their process: a claim of a killed
 * job is free and goes. */
static void clear_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[GRID_PATH + 300];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        if (!fh_lock_held(path, NULL, 0)) unlink(path);
    }
    closedir(d);
}

/* the claim this process's group holds while it runs a member (flock, as a run folder's .lock) */
static FhLock claim_lock = { .fd = -1 };

static int count_suffix(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    size_t ls = strlen(suffix);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        n += l > ls && !strcmp(e->d_name + l - ls, suffix);
    }
    closedir(d);
    return n;
}

static void format_duration(double s, char *out, size_t size)
{
    if (!(s >= 0) || s > 1e8) snprintf(out, size, "?");
    else if (s < 10) snprintf(out, size, "%.1f s", s);
    else if (s < 60) snprintf(out, size, "%.0f s", s);
    else if (s < 3600) snprintf(out, size, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(out, size, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

/* last test_accuracy and the number of rows of a run's metrics.csv (NAN, 0 when absent) */
static void read_final(const char *run_dir, double *acc, int *rows)
{
    *acc = NAN;
    *rows = 0;
    char path[GRID_PATH + 1200];
    snprintf(path, sizeof path, "%s/metrics.csv", run_dir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[8192];
    int col = -1;
    if (fgets(line, sizeof line, f)) {
        int c = 0;
        for (char *save = NULL, *tok = strtok_r(line, ",\n", &save); tok; tok = strtok_r(NULL, ",\n", &save), c++)
            if (!strcmp(tok, "test_accuracy")) col = c;
    }
    while (fgets(line, sizeof line, f)) {
        (*rows)++;
        int c = 0;
        for (char *p = line; col >= 0 && *p; c++) {
            char *comma = strchr(p, ',');
            if (c == col) {
                if (p[0] != ',' && p[0] != '\n') *acc = atof(p);
                break;
            }
            if (!comma) break;
            p = comma + 1;
        }
    }
    fclose(f);
}

/* the first line of the current error */
static void error_first_line(char *out, size_t size)
{
    const char *m = fh_error_message();
    size_t n = strcspn(m, "\n");
    snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), m);
}

/* ---- the plan ------------------------------------------------------------------------------------------- */

enum { PLAN_SKIP_DONE = 0, PLAN_SKIP_FAILED, PLAN_FRESH, PLAN_FRESH_FORCE, PLAN_RESUME };

static int plan_runs(char p) { return p == PLAN_FRESH || p == PLAN_FRESH_FORCE || p == PLAN_RESUME; }

/* Replaces the temporary copy's path in config messages with the grid file's. */
static int raise_with_path(int status, const char *tmp, const char *real, const char *member)
{
    char msg[4096];
    const char *m = fh_error_message();
    size_t lt = strlen(tmp), used = 0;
    while (*m && used + 1 < sizeof msg) {
        if (!strncmp(m, tmp, lt)) {
            used += (size_t)snprintf(msg + used, sizeof msg - used, "%s", real);
            m += lt;
        } else
            msg[used++] = *m++;
        if (used >= sizeof msg) used = sizeof msg - 1;
    }
    msg[used] = '\0';
    if (member) return fh_error_raise(status, __FILE__, __LINE__, "member %s: %s", member, msg);
    return fh_error_raise(status, __FILE__, __LINE__, "%s", msg);
}

/* Checks every member's config as fl_run would before its folder exists (fl_config_validate: the keys, the data
 * file, the rank count, the method), on a private copy of base_text named like the grid file. invalid[i] = 1 for
 * members that fail, messages[i] the first line of its error; G->first_status is the first one's status. */
static int validate_members(Grid *G, int ranks)
{
    const GridSpec *g = &G->g;
    char *invalid = G->invalid, **messages = G->messages;
    const char *tmpbase = getenv("TMPDIR");
    char dir[GRID_PATH], path[2 * GRID_PATH + 8];
    snprintf(dir, sizeof dir, "%s/fedhet-grid-XXXXXX", tmpbase && *tmpbase ? tmpbase : "/tmp");
    if (!mkdtemp(dir)) FH_FAIL(FH_ERR_IO, "cannot create a temporary folder %s: %s", dir, strerror(errno));
    fh_tmp_register_dir(dir);
    const char *base = strrchr(g->path, '/') ? strrchr(g->path, '/') + 1 : g->path;
    snprintf(path, sizeof path, "%s/%s", dir, base);
    int status = fh_write_file_atomic(path, g->base_text);
    G->n_invalid = 0;
    for (int64_t i = 0; i < g->n_members && status == FH_OK; i++) {
        char **ov = NULL, name[1024];
        int n = 0;
        grid_member_name(g, i, name, sizeof name);
        status = grid_member_overrides(g, i, &ov, &n);
        if (status != FH_OK) break;
        int st = fl_config_validate(path, ov, n, ranks);
        grid_strings_free(ov, n);
        invalid[i] = st != FH_OK;
        if (st == FH_OK) continue;
        raise_with_path(st, path, g->path, name);
        if (!G->n_invalid) G->first_status = st;
        char line[1024];
        error_first_line(line, sizeof line);
        messages[i] = strdup(line);
        G->n_invalid++;
        fh_error_clear();
    }
    unlink(path);
    rmdir(dir);
    fh_tmp_forget(dir);
    return status;
}

/* The state of member i before this session, from its status file and run folder. */
static int plan_member(const Grid *G, int64_t i, int retry_failed, char *plan)
{
    char name[1024], run_dir[GRID_PATH + 1100];
    grid_member_name(&G->g, i, name, sizeof name);
    snprintf(run_dir, sizeof run_dir, "%s/%s", G->g.dir, name);
    GridStatus s;
    FH_CHECK(grid_status_read(G->g.dir, name, &s));
    /* done only with its final model: a kill while run.h5 was written leaves just the final checkpoint,
     * from which a resume writes it */
    const int final_current = fl_final_model_current(run_dir);
    if (final_current && (s.state == GRID_DONE || !fh_path_exists(run_dir, "checkpoint.h5"))) *plan = PLAN_SKIP_DONE;
    else if (s.state == GRID_FAILED && !retry_failed) *plan = PLAN_SKIP_FAILED;
    else if (fh_path_exists(run_dir, "checkpoint.h5")) *plan = PLAN_RESUME;
    else if (fh_path_exists(run_dir, ".")) *plan = PLAN_FRESH_FORCE; /* made, but killed before its first checkpoint */
    else *plan = PLAN_FRESH;
    return FH_OK;
}

static int write_grid_files(const Grid *G, const GridOptions *o, int array_mode)
{
    const GridSpec *g = &G->g;
    char path[GRID_PATH + 64];
    FH_CHECK(fh_mkdir_p(g->dir));
    snprintf(path, sizeof path, "%s/grid/status", g->dir);
    FH_CHECK(fh_mkdir_p(path));
    snprintf(path, sizeof path, "%s/grid/claims", g->dir);
    FH_CHECK(fh_mkdir_p(path));
    snprintf(path, sizeof path, "%s/grid/grid.ini", g->dir);
    if (array_mode && fh_path_exists(path, NULL)) {
        /* array tasks share the folder: it must hold this very grid */
        char *old = NULL;
        FH_CHECK(fh_read_file(path, &old, FH_ERR_IO));
        int same = !strcmp(old, g->text);
        free(old);
        if (!same) FH_FAIL(FH_ERR_USAGE, "%s holds another grid file (%s differs from %s)", g->dir, path, g->path);
    }
    FH_CHECK(fh_write_file_atomic(path, g->text));
    size_t len = 1;
    for (int i = 0; i < o->n_args; i++) len += strlen(o->args[i]) + 1;
    char *args = calloc(len, 1);
    if (!args) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    for (int i = 0; i < o->n_args; i++) strcat(strcat(args, o->args[i]), "\n");
    snprintf(path, sizeof path, "%s/grid/args.txt", g->dir);
    int status = fh_write_file_atomic(path, args);
    free(args);
    FH_CHECK(status);
    snprintf(path, sizeof path, "%s/grid/base.ini", g->dir);
    return fh_write_file_atomic(path, g->base_text);
}

/* members.csv from the status files; counts of each state */
static int write_members_csv(const GridSpec *g, int64_t count[5], char *failed_list, size_t size)
{
    char path[GRID_PATH + 64];
    snprintf(path, sizeof path, "%s/members.csv", g->dir);
    FhAtomicFile out;
    FH_CHECK(fh_atomic_open(&out, path));
    FILE *f = out.f;
    fprintf(f, "index,member");
    for (int a = 0; a < g->n_axes; a++) fprintf(f, ",%s", g->axes[a].key);
    fprintf(f, ",state,exit,attempts,seconds,rounds_done,final_accuracy,message\n");
    for (int s = 0; s < 5; s++) count[s] = 0;
    size_t used = 0;
    failed_list[0] = '\0';
    int status = FH_OK;
    for (int64_t i = 0; i < g->n_members && status == FH_OK; i++) {
        char name[1024];
        grid_member_name(g, i, name, sizeof name);
        GridStatus s;
        status = grid_status_read(g->dir, name, &s);
        if (status != FH_OK) break;
        count[s.state]++;
        fprintf(f, "%lld,", (long long)i);
        fh_csv_field(f, name);
        for (int a = 0; a < g->n_axes; a++) {
            fputc(',', f);
            fh_csv_field(f, grid_member_value(g, i, a));
        }
        fprintf(f, ",%s,%d,%d,%.3f,%d,", grid_state_name(s.state), s.exit_code, s.attempt, s.seconds, s.rounds_done);
        if (!isnan(s.final_accuracy)) fprintf(f, "%.6f", s.final_accuracy);
        fputc(',', f);
        fh_csv_field(f, s.message);
        fputc('\n', f);
        if (s.state == GRID_FAILED && used + 1 < size)
            used += (size_t)snprintf(failed_list + used, size - used, "\n  %s (exit %d): %s", name, s.exit_code, s.message);
        if (used >= size) used = size - 1;
    }
    if (status != FH_OK) {
        fh_atomic_discard(&out);
        return status;
    }
    return fh_atomic_commit(&out);
}

/* ---- rank 0 before any member: load, check, validate, prepare the folder -------------------------------- */

static int load_spec(Grid *G, const GridOptions *o)
{
    if (!o->resume_dir) return grid_spec_load(&G->g, o->grid_path, o->args, o->n_args);
    /* --resume DIR: the grid file and arguments it was started with */
    char path[GRID_PATH + 64], *args_text = NULL;
    snprintf(path, sizeof path, "%s/grid/args.txt", o->resume_dir);
    if (!fh_path_exists(path, NULL))
        FH_FAIL(FH_ERR_USAGE, "%s is not a grid folder (no grid/args.txt; fedhet grid GRID.ini starts one)", o->resume_dir);
    FH_CHECK(fh_read_file(path, &args_text, FH_ERR_IO));
    char *args[512];
    int n = 0;
    for (char *save = NULL, *line = strtok_r(args_text, "\n", &save); line && n < 512; line = strtok_r(NULL, "\n", &save))
        if (*line) args[n++] = line;
    snprintf(path, sizeof path, "%s/grid/grid.ini", o->resume_dir);
    int status = grid_spec_load(&G->g, path, args, n);
    free(args_text);
    FH_CHECK(status);
    /* the folder may have moved: members live where the grid is now */
    char dir[GRID_PATH];
    snprintf(dir, sizeof dir, "%s", o->resume_dir);
    size_t l = strlen(dir);
    while (l > 1 && dir[l - 1] == '/') dir[--l] = '\0';
    snprintf(G->g.dir, sizeof G->g.dir, "%s", dir);
    return FH_OK;
}

static int check_ranks(const Grid *G, const GridOptions *o)
{
    const int W = G->world_size, R = G->g.ranks_per_member ? G->g.ranks_per_member : W;
    if (o->member >= 0) return FH_OK; /* one member on every rank */
    if (R > W)
        FH_FAIL(FH_ERR_USAGE, "%s: ranks_per_member = %d but the job has %d rank%s (mpirun -np %d or more, a multiple "
                "of %d)", G->g.path, R, W, W == 1 ? "" : "s", R, R);
    if (W % R)
        FH_FAIL(FH_ERR_USAGE, "%s: %d ranks are not a multiple of ranks_per_member = %d (use -np %d or %d)", G->g.path, W,
                R, W / R * R, (W / R + 1) * R);
    return FH_OK;
}

void grid_init(Grid *G)
{
    memset(G, 0, sizeof *G);
    MPI_Comm_rank(MPI_COMM_WORLD, &G->world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &G->world_size);
}

int grid_load(Grid *G, const GridOptions *o)
{
    FH_CHECK(load_spec(G, o));
    snprintf(G->base_path, sizeof G->base_path, "%s/grid/base.ini", G->g.dir);
    return fh_calloc(&G->plan, (size_t)G->g.n_members, 1, "grid plan");
}

int grid_check(Grid *G, const GridOptions *o)
{
    const GridSpec *g = &G->g;
    if (o->member >= g->n_members)
        FH_FAIL(FH_ERR_USAGE, "--member %ld: the grid has %lld members (0..%lld)", o->member, (long long)g->n_members,
                (long long)g->n_members - 1);
    if (g->n_members > GRID_MEMBERS_ASK && !o->yes && !o->list && o->member < 0)
        FH_FAIL(FH_ERR_USAGE, "%s: %lld members (more than %d): check the lists, and add --yes if you mean it", g->path,
                (long long)g->n_members, GRID_MEMBERS_ASK);
    if (!o->list) FH_CHECK(check_ranks(G, o));
    FH_CHECK(fh_calloc(&G->invalid, (size_t)g->n_members, 1, "grid member checks"));
    FH_CHECK(fh_calloc(&G->messages, (size_t)g->n_members, sizeof *G->messages, "grid member messages"));
    /* a member's ranks: its group's, or all of them for --member; --list checks no rank count */
    const int ranks = o->list ? 0 : o->member >= 0 || !g->ranks_per_member ? G->world_size : g->ranks_per_member;
    return validate_members(G, ranks);
}

/* Refuses the grid when a member is invalid, naming each (the first few): a bad value in a list is a mistake of
 * the grid file, found before any member runs; running the others first would only delay the fix, and a grid
 * folder's lists cannot change on --resume. */
static int refuse_invalid(const Grid *G)
{
    const GridSpec *g = &G->g;
    char list[3000] = "";
    size_t used = 0;
    int64_t named = 0;
    for (int64_t i = 0; i < g->n_members && named < 5; i++) {
        if (!G->invalid[i]) continue;
        used += (size_t)snprintf(list + used, sizeof list - used, "\n  %s", G->messages[i] ? G->messages[i] : "");
        if (used >= sizeof list) used = sizeof list - 1;
        named++;
    }
    FH_FAIL(G->first_status, "%s: %lld of %lld members are invalid; nothing was started (fix the grid's lists and start "
            "it again):%s%s", g->path, (long long)G->n_invalid, (long long)g->n_members, list,
            G->n_invalid > named ? "\n  ... (fedhet grid GRID.ini --list marks every invalid member)" : "");
}

int grid_prepare(Grid *G, const GridOptions *o)
{
    GridSpec *g = &G->g;
    const int only = o->member >= 0;
    if (G->n_invalid > 0) return refuse_invalid(G);
    int status = FH_OK;

    /* the folder */
    char path[GRID_PATH + 64];
    snprintf(path, sizeof path, "%s/grid/grid.ini", g->dir);
    const int is_grid = fh_path_exists(path, NULL);
    if (status == FH_OK && !o->resume_dir && !only && fh_path_exists(g->dir, NULL) && !o->force) {
        if (is_grid)
            status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s already exists (fedhet grid --resume %s "
                                    "continues it, --force replaces its members)", g->dir, g->dir);
        else
            status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s already exists and is not a grid folder "
                                    "(--force uses it anyway)", g->dir);
    }
    if (status == FH_OK && o->resume_dir && !is_grid)
        status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s is not a grid folder (no grid/grid.ini)", g->dir);
    if (status == FH_OK && !o->resume_dir) status = write_grid_files(G, o, only);
    if (status == FH_OK && o->force) {
        snprintf(path, sizeof path, "%s/grid/status", g->dir);
        clear_dir(path);
        snprintf(path, sizeof path, "%s/members.csv", g->dir);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/grid/claims", g->dir);
    if (status == FH_OK && !only) clear_dir(path);
    for (int64_t i = 0; i < g->n_members && status == FH_OK; i++) {
        if (only && i != o->member) {
            G->plan[i] = PLAN_SKIP_DONE;
            continue;
        }
        if (o->force) G->plan[i] = PLAN_FRESH_FORCE;
        else status = plan_member(G, i, o->retry_failed, &G->plan[i]);
    }
    return status;
}

/* ---- members -------------------------------------------------------------------------------------------- */

/* group rank 0: the next member this group takes, or -1 */
static int64_t claim_next(const Grid *G, int64_t *cursor)
{
    char path[GRID_PATH + 100];
    for (; *cursor < G->g.n_members; (*cursor)++) {
        if (!plan_runs(G->plan[*cursor])) continue;
        snprintf(path, sizeof path, "%s/grid/claims/%lld", G->g.dir, (long long)*cursor);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0) continue; /* another group has it, or had it in this session */
        close(fd);
        /* held until the member is recorded: another job's clear_dir then leaves it alone */
        if (fh_lock_take(&claim_lock, path, "grid member claim") != FH_OK) {
            fh_error_clear();
            continue;
        }
        return (*cursor)++;
    }
    return -1;
}

typedef struct {
    double t_start;
    int64_t done_before, total_this_session; /* done_before: ended before this session (finished or failed) */
    int64_t failed_before;                   /* of those, failed ones (not run again without --retry-failed) */
} Progress;

static int run_member(Grid *G, const GridOptions *o, MPI_Comm group, int group_id, int64_t i, const Progress *pr)
{
    const GridSpec *g = &G->g;
    int grank;
    MPI_Comm_rank(group, &grank);
    char name[1024], run_dir[GRID_PATH + 1100];
    grid_member_name(g, i, name, sizeof name);
    snprintf(run_dir, sizeof run_dir, "%s/%s", g->dir, name);
    GridStatus s;
    int status = FH_OK;
    if (grank == 0) {
        status = grid_status_read(g->dir, name, &s);
        s.state = GRID_RUNNING;
        s.attempt++;
        s.group = group_id;
        s.exit_code = 0;
        s.message[0] = '\0';
        if (status == FH_OK) status = grid_status_write(g->dir, name, &s);
        if (status != FH_OK) return status; /* rank 0 of the group alone: the caller aborts */
        const int first = group_id * G->ranks_per_member;
        printf("[grid] start %s (member %lld of %lld%s) on group %d (rank%s %d%s%.0d)\n", name, (long long)i + 1,
               (long long)g->n_members, G->plan[i] == PLAN_RESUME ? ", resumed from its checkpoint" : "", group_id,
               G->ranks_per_member > 1 ? "s" : "", first, G->ranks_per_member > 1 ? "-" : "",
               G->ranks_per_member > 1 ? first + G->ranks_per_member - 1 : 0);
        fflush(stdout);
    }
    char **ov = NULL;
    int n_ov = 0;
    FH_CHECK(grid_member_overrides(g, i, &ov, &n_ov));
    int stopped = 0;
    FlRunOptions opt;
    memset(&opt, 0, sizeof opt);
    opt.stopped = &stopped;
    if (G->plan[i] == PLAN_RESUME) opt.resume_dir = run_dir;
    else {
        opt.config_path = G->base_path;
        opt.overrides = ov;
        opt.n_overrides = n_ov;
        opt.force = G->plan[i] == PLAN_FRESH_FORCE;
    }
    /* the member's round lines go to its log.txt; stdout keeps the grid's own lines */
    int saved_stdout = -1;
    if (grank == 0 && !o->verbose) {
        fflush(stdout);
        saved_stdout = dup(1);
        int null_fd = open("/dev/null", O_WRONLY);
        if (saved_stdout >= 0 && null_fd >= 0) dup2(null_fd, 1);
        if (null_fd >= 0) close(null_fd);
    }
    const double t0 = fh_time_now();
    fh_error_clear();
    status = fl_run(&opt, group);
    const double seconds = fh_time_now() - t0;
    fh_log_set_rank(-1);
    if (saved_stdout >= 0) {
        fflush(stdout);
        dup2(saved_stdout, 1);
        close(saved_stdout);
    }
    grid_strings_free(ov, n_ov);
    if (grank != 0) {
        fh_error_clear();
        return FH_OK;
    }

    s.seconds = seconds;
    s.exit_code = status;
    s.state = status != FH_OK ? GRID_FAILED : stopped ? GRID_STOPPED : GRID_DONE;
    if (status != FH_OK) error_first_line(s.message, sizeof s.message);
    fh_error_clear();
    read_final(run_dir, &s.final_accuracy, &s.rounds_done);
    FH_CHECK(grid_status_write(g->dir, name, &s));
    char path[GRID_PATH + 100];
    snprintf(path, sizeof path, "%s/grid/claims/%lld.end", g->dir, (long long)i);
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) close(fd);
    fh_lock_release(&claim_lock);

    /* progress: members finished in this session, over all groups */
    char claims[GRID_PATH + 32];
    snprintf(claims, sizeof claims, "%s/grid/claims", g->dir);
    const int64_t ended = count_suffix(claims, ".end");
    const double elapsed = fh_time_now() - pr->t_start;
    const int64_t left = pr->total_this_session - ended;
    char took[32], el[32], eta[32], what[1200];
    format_duration(seconds, took, sizeof took);
    format_duration(elapsed, el, sizeof el);
    format_duration(ended > 0 ? elapsed / ended * left : NAN, eta, sizeof eta);
    if (s.state == GRID_DONE) {
        if (isnan(s.final_accuracy)) snprintf(what, sizeof what, "done in %s", took);
        else snprintf(what, sizeof what, "done in %s, final test accuracy %.4f", took, s.final_accuracy);
    } else if (s.state == GRID_STOPPED)
        snprintf(what, sizeof what, "stopped by %s after %d rounds (checkpoint written) in %s", fh_stop_signal_name(),
                 s.rounds_done, took);
    else
        snprintf(what, sizeof what, "FAILED (exit %d) in %s: %.900s", s.exit_code, took, s.message);
    printf("[grid] %lld/%lld members done: %s %s; elapsed %s, ETA %s\n", (long long)(pr->done_before + ended),
           (long long)g->n_members, name, what, el, left > 0 ? eta : "0 s");
    fflush(stdout);
    return FH_OK;
}

/* ---- the command ---------------------------------------------------------------------------------------- */

void grid_free(Grid *G)
{
    if (G->messages)
        for (int64_t i = 0; i < G->g.n_members; i++) free(G->messages[i]);
    fh_free(&G->messages);
    fh_free(&G->invalid);
    grid_spec_free(&G->g);
    fh_free(&G->plan);
}

/* world rank 0 after every group is done: members.csv, the summary, the exit status */
static int finish(const Grid *G, const GridOptions *o)
{
    const GridSpec *g = &G->g;
    int64_t count[5];
    char failed[8192];
    FH_CHECK(write_members_csv(g, count, failed, sizeof failed));
    const int64_t unfinished = count[GRID_PENDING] + count[GRID_RUNNING] + count[GRID_STOPPED];
    printf("[grid] %s: %lld member%s: %lld done, %lld failed", g->dir, (long long)g->n_members,
           g->n_members == 1 ? "" : "s", (long long)count[GRID_DONE], (long long)count[GRID_FAILED]);
    if (unfinished) printf(", %lld not finished", (long long)unfinished);
    printf("; members.csv written\n");
    if (unfinished && o->member < 0) {
        char quoted[4 * sizeof g->dir + 3];
        printf("[grid] %s: continue with fedhet grid --resume %s\n", stop_seen() ? "stopped by a signal" : "incomplete",
               fh_shell_quote(g->dir, quoted, sizeof quoted));
    }
    else if (!unfinished)
        printf("[grid] summary tables and plots: fedhet report %s\n", g->dir);
    fflush(stdout);
    if (o->member >= 0) {
        /* an array task answers for its own member only */
        char name[1024];
        grid_member_name(g, o->member, name, sizeof name);
        GridStatus s;
        FH_CHECK(grid_status_read(g->dir, name, &s));
        if (s.state != GRID_FAILED) return FH_OK;
        FH_FAIL(GRID_EXIT_FAILED + 1, "member %ld (%s) failed (exit %d): %s", o->member, name, s.exit_code, s.message);
    }
    if (count[GRID_FAILED] == 0) return FH_OK;
    const int64_t n = count[GRID_FAILED] > 100 ? 100 : count[GRID_FAILED];
    FH_FAIL(GRID_EXIT_FAILED + (int)n, "%lld of %lld members failed (exit code %d = 10 + failed members):%s",
            (long long)count[GRID_FAILED], (long long)g->n_members, GRID_EXIT_FAILED + (int)n, failed);
}

static int run_members(Grid *G, const GridOptions *o)
{
    const GridSpec *g = &G->g;
    const int R = o->member >= 0 ? G->world_size : (g->ranks_per_member ? g->ranks_per_member : G->world_size);
    G->ranks_per_member = R;
    G->n_groups = G->world_size / R;
    const int group_id = G->world_rank / R;
    MPI_Comm group;
    if (MPI_Comm_split(MPI_COMM_WORLD, group_id, G->world_rank, &group) != MPI_SUCCESS)
        FH_FAIL(FH_ERR_MPI, "MPI_Comm_split into groups of %d ranks failed", R);
    int grank;
    MPI_Comm_rank(group, &grank);
    Progress pr = { fh_time_now(), 0, 0, 0 };
    for (int64_t i = 0; i < g->n_members; i++) {
        if (plan_runs(G->plan[i])) pr.total_this_session++;
        else if (o->member < 0) pr.done_before++, pr.failed_before += G->plan[i] == PLAN_SKIP_FAILED;
    }
    if (G->world_rank == 0) {
        if (o->member >= 0 && !plan_runs(G->plan[o->member])) {
            char name[1024];
            grid_member_name(g, o->member, name, sizeof name);
            printf("[grid] member %ld (%s) is %s: nothing to do%s\n", o->member, name,
                   G->plan[o->member] == PLAN_SKIP_DONE ? "finished" : "failed",
                   G->plan[o->member] == PLAN_SKIP_FAILED ? " (--retry-failed runs it again)" : "");
        } else {
            char failed[96] = "";
            if (pr.failed_before)
                snprintf(failed, sizeof failed, ", %lld failed before (--retry-failed runs them again)",
                         (long long)pr.failed_before);
            printf("[grid] %s: %lld member%s, %lld to run (%lld already finished%s) on %d group%s of %d rank%s\n", g->dir,
                   (long long)g->n_members, g->n_members == 1 ? "" : "s", (long long)pr.total_this_session,
                   (long long)(pr.done_before - pr.failed_before), failed, G->n_groups, G->n_groups == 1 ? "" : "s", R,
                   R == 1 ? "" : "s");
            if (G->n_groups > pr.total_this_session && o->member < 0)
                printf("[grid] note: %d group%s will have no member to run\n", G->n_groups - (int)pr.total_this_session,
                       G->n_groups - pr.total_this_session == 1 ? "" : "s");
        }
        fflush(stdout);
    }
    int64_t cursor = 0;
    int first = 1;
    for (;;) {
        int64_t idx = -1;
        if (grank == 0) {
            if (stop_seen()) idx = -1;
            else if (o->member >= 0) idx = first && plan_runs(G->plan[o->member]) ? o->member : -1;
            else idx = claim_next(G, &cursor);
        }
        first = 0;
        int status = bcast_polite(&idx, sizeof idx, group);
        if (status != FH_OK) {
            MPI_Comm_free(&group);
            return status;
        }
        if (idx < 0) break;
        status = run_member(G, o, group, group_id, idx, &pr);
        if (status != FH_OK) {
            /* this rank alone could not record the member: the grid's files cannot be trusted any more */
            fprintf(stderr, "fedhet grid: rank %d: error: %s\n", G->world_rank, fh_error_text(status));
            MPI_Abort(MPI_COMM_WORLD, status);
        }
    }
    MPI_Comm_free(&group);
    return FH_OK;
}

int grid_run(Grid *G, const GridOptions *o, int rank0_status, int rank0_quit)
{
    /* the other ranks wait for rank 0's verdict */
    int head[2] = { rank0_status, rank0_quit };
    if (MPI_Bcast(head, 2, MPI_INT, 0, MPI_COMM_WORLD) != MPI_SUCCESS) head[0] = FH_ERR_MPI;
    int status = head[0];
    if (status != FH_OK || head[1]) return status;
    if (G->world_rank != 0) {
        /* the same files give the same grid */
        status = grid_load(G, o);
        if (status != FH_OK) {
            fprintf(stderr, "fedhet grid: rank %d: error: %s\n", G->world_rank, fh_error_text(status));
            MPI_Abort(MPI_COMM_WORLD, status);
        }
    }
    int64_t n = G->g.n_members;
    for (int64_t off = 0; off < n && status == FH_OK; off += 1 << 30) {
        int chunk = (int)(n - off < (1 << 30) ? n - off : (1 << 30));
        if (MPI_Bcast(G->plan + off, chunk, MPI_CHAR, 0, MPI_COMM_WORLD) != MPI_SUCCESS) status = FH_ERR_MPI;
    }
    if (status == FH_OK) status = run_members(G, o);
    if (status == FH_OK) status = barrier_polite(MPI_COMM_WORLD);
    int final = FH_OK;
    if (status == FH_OK && G->world_rank == 0) final = finish(G, o);
    if (status == FH_OK && MPI_Bcast(&final, 1, MPI_INT, 0, MPI_COMM_WORLD) != MPI_SUCCESS) final = FH_ERR_MPI;
    if (status == FH_OK) status = final;
    return status;
}
