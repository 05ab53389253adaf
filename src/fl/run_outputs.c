/* A run's outputs on rank 0: the run folder (claimed with its lock, made, or removed when a failed setup leaves
 * nothing to resume), metrics.csv and clients.csv (their columns, rows and full-disk errors), log.txt, and the
 * progress and memory lines. The round protocol that fills them is in run.c. */
#include "run_outputs.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fedhet/core.h"

#define X(name) #name,
const char *const fl_column_names[FL_N_COLUMNS] = { FL_METRIC_COLUMNS };
#undef X
const char *const fl_client_column_names[FL_N_CCOLUMNS] = { "round", "client", "samples", "steps",
                                                            "loss", "weight", "seconds" };

static int symlink_refused(const char *path)
{
    FH_FAIL(FH_ERR_IO, "%s is a symbolic link: fedhet does not write through it (replace it with a plain file)", path);
}

/* Outputs are opened without following symbolic links: a link in a run folder must not redirect a write,
 * or the truncation of a resumed CSV, to a file elsewhere. */
static int open_output(FILE **f, const char *path, int append)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | (append ? O_APPEND : O_TRUNC), 0666);
    if (fd < 0 && errno == ELOOP) return symlink_refused(path);
    if (fd < 0) FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    *f = fdopen(fd, append ? "a" : "w");
    if (!*f) {
        int err = errno;
        close(fd);
        FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", path, strerror(err));
    }
    return FH_OK;
}

/* cols / rows, then extra columns (may be 0) of extra_rows [n_rows * n_extra] */
static int open_csv_extra(FILE **f, const char *dir, const char *name, const char *const *cols, int n_cols,
                          const double *rows, int64_t n_rows, char *const *extra, int n_extra, const double *extra_rows)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FH_CHECK(open_output(f, path, 0));
    for (int c = 0; c < n_cols + n_extra; c++) fprintf(*f, "%s%s", c ? "," : "", c < n_cols ? cols[c] : extra[c - n_cols]);
    fputc('\n', *f);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int c = 0; c < n_cols + n_extra; c++) {
            double v = c < n_cols ? rows[r * n_cols + c] : extra_rows[r * n_extra + c - n_cols];
            if (c) fputc(',', *f);
            if (!isnan(v)) fprintf(*f, "%.10g", v);
        }
        fputc('\n', *f);
    }
    errno = 0;
    if (fflush(*f) != 0 || ferror(*f))
        FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", path, errno ? strerror(errno) : "write error");
    return FH_OK;
}

static int open_csv(FILE **f, const char *dir, const char *name, const char *const *cols, int n_cols,
                    const double *rows, int64_t n_rows)
{
    return open_csv_extra(f, dir, name, cols, n_cols, rows, n_rows, NULL, 0, NULL);
}

/* The per-domain accuracy columns of a test set that holds two or more domains. */
int fl_domain_columns(FlRun *run)
{
    const DataPartFile *f = &run->data;
    if (!f->test_domain || f->n_domains < 2) return FH_OK;
    FH_CHECK(fh_calloc(&run->dcol_of_domain, (size_t)f->n_domains, sizeof *run->dcol_of_domain, "domain columns"));
    for (int d = 0; d < f->n_domains; d++) run->dcol_of_domain[d] = -1;
    for (int64_t i = 0; i < f->n_test; i++) run->dcol_of_domain[f->test_domain[i]] = 0;
    int n = 0;
    for (int d = 0; d < f->n_domains; d++)
        if (run->dcol_of_domain[d] == 0) run->dcol_of_domain[d] = n++;
    if (n < 2) {
        fh_free(&run->dcol_of_domain);
        return FH_OK;
    }
    run->n_dcols = n;
    FH_CHECK(fh_calloc(&run->dcol_names, (size_t)n, sizeof *run->dcol_names, "domain column names"));
    FH_CHECK(fh_calloc(&run->drows, (size_t)run->s.rounds * n, sizeof *run->drows, "domain accuracies"));
    FH_CHECK(fh_calloc(&run->dnow, (size_t)n, sizeof *run->dnow, "domain accuracies"));
    for (int d = 0; d < f->n_domains; d++) {
        int c = run->dcol_of_domain[d];
        if (c < 0) continue;
        size_t len = strlen(f->domain_names[d]) + 16;
        FH_CHECK(fh_calloc(&run->dcol_names[c], len, 1, "domain column name"));
        snprintf(run->dcol_names[c], len, "test_accuracy_%s", f->domain_names[d]);
        /* a CSV header cell: commas and quotes would shift the columns */
        for (char *p = run->dcol_names[c]; *p; p++)
            if (*p == ',' || *p == '"' || *p == ' ') *p = '_';
    }
    return FH_OK;
}

/* rank 0: accuracy of the evaluated logits per test domain into run->dnow (rows in file order) */
void fl_domain_accuracy(FlRun *run)
{
    const DataPartFile *f = &run->data;
    int64_t correct[256] = { 0 }, total[256] = { 0 };
    const int classes = f->classes;
    for (int64_t i = 0; i < f->n_test; i++) {
        const float *z = run->eval.ordered + (size_t)i * classes;
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (z[k] > z[best]) best = k;
        const int c = run->dcol_of_domain[f->test_domain[i]];
        if (c < 0 || c >= 256) continue;
        total[c]++;
        correct[c] += best == run->eval.labels[i];
    }
    for (int c = 0; c < run->n_dcols; c++) run->dnow[c] = total[c] ? (double)correct[c] / total[c] : NAN;
}

void fl_csv_cells(FILE *f, const double *row, int n_cols, int after_cells)
{
    for (int c = 0; c < n_cols; c++) {
        if (c || after_cells) fputc(',', f);
        if (!isnan(row[c])) fprintf(f, "%.10g", row[c]);
    }
}

/* Ends a row. A row that cannot be written (a full disk) is an I/O error naming the file; --resume rewrites the
 * CSVs from the checkpoint, so a half-written row does not outlive it. */
int fl_csv_end_row(FILE *f, const char *dir, const char *name)
{
    fputc('\n', f);
    errno = 0;
    if (fflush(f) != 0 || ferror(f)) {
        const int err = errno;
        clearerr(f);
        FH_FAIL(FH_ERR_IO, "%s/%s: cannot write: %s (the checkpoint keeps every finished round; --resume rewrites "
                "the file once there is room)", dir, name, err ? strerror(err) : "write error");
    }
    return FH_OK;
}

int fl_csv_row(FILE *f, const double *row, int n_cols, const char *dir, const char *name)
{
    fl_csv_cells(f, row, n_cols, 0);
    return fl_csv_end_row(f, dir, name);
}

/* A job killed while writing leaves PATH.tmp-<pid> files: never valid, so removed on resume. */
static void remove_stale_temporaries(const char *dir)
{
    char pattern[4300];
    snprintf(pattern, sizeof pattern, "%s/*.tmp-*", dir);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) unlink(g.gl_pathv[i]);
    globfree(&g);
}

/* Rank 0: the run folder, made or reopened together with its lock (.lock, held until the run ends), so
 * that the check and the claim are one step: of two runs started at once with one name, mkdir lets one
 * make the folder and the other is refused; of two writers of an existing folder (--resume, --force, a
 * grid member) flock lets one in. A folder that is a symbolic link is refused before anything is
 * written: --force through it would replace the run it points to. mode 0: reopen (--resume), 1: make,
 * 2: make or replace (--force). */
int fl_claim_run_folder(FlRun *run, int mode)
{
    char lock_path[4300], holder[400];
    struct stat st;
    snprintf(lock_path, sizeof lock_path, "%s/.lock", run->dir);
    if (lstat(run->dir, &st) == 0 && S_ISLNK(st.st_mode)) {
        char target[1024];
        ssize_t n = readlink(run->dir, target, sizeof target - 1);
        target[n > 0 ? n : 0] = '\0';
        FH_FAIL(FH_ERR_USAGE, "run folder %s is a symbolic link (to %s): fedhet does not write through it; name the "
                "folder itself", run->dir, target);
    }
    if (mode == 0 && stat(run->dir, &st) != 0)
        FH_FAIL(FH_ERR_USAGE, "--resume %s: %s", run->dir, strerror(errno));
    if (mode == 0 && !S_ISDIR(st.st_mode)) FH_FAIL(FH_ERR_USAGE, "--resume %s: not a folder", run->dir);
    if (mode > 0) {
        FH_CHECK(fh_mkdir_p(run->s.out_dir));
        if (mkdir(run->dir, 0777) == 0) run->made_folder = 1;
        else if (errno != EEXIST) FH_FAIL(FH_ERR_IO, "cannot create folder %s: %s", run->dir, strerror(errno));
        else if (fh_lock_held(lock_path, holder, sizeof holder))
            FH_FAIL(FH_ERR_USAGE, "%s is in use by %s (it holds %s): one writer per folder", run->dir, holder, lock_path);
        else if (mode == 1)
            FH_FAIL(FH_ERR_USAGE, "%s already exists (--force replaces it, --resume %s continues it)", run->dir,
                    run->dir);
    }
    char what[4400];
    snprintf(what, sizeof what, "run folder %.4300s", run->dir);
    int status = fh_lock_take(&run->lock, lock_path, what);
    if (status != FH_OK) run->made_folder = 0; /* another writer took it in between: the folder is theirs now */
    return status;
}

/* Rank 0 once setup has succeeded: the run folder and its resolved config.ini. A run made anew (--force,
 * or restarted by --resume) first loses the outputs of the one it replaces. */
static int create_run_folder(FlRun *run, const FlRunOptions *opt)
{
    char path[4300];
    struct stat st;
    const char *outputs[] = { "log.txt", "metrics.csv", "clients.csv" };
    for (int i = 0; i < 3; i++) { /* refused before anything is written (open_output is the guard) */
        snprintf(path, sizeof path, "%s/%s", run->dir, outputs[i]);
        if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) return symlink_refused(path);
    }
    if (opt->resume_dir) remove_stale_temporaries(run->dir);
    if (!opt->resume_dir || run->restart) {
        const char *files[] = { "metrics.csv", "clients.csv", "run.h5", "checkpoint.h5", "log.txt" };
        for (int i = 0; i < 5; i++) {
            if (run->restart && !strcmp(files[i], "log.txt")) continue; /* it tells why the run stopped */
            snprintf(path, sizeof path, "%s/%s", run->dir, files[i]);
            unlink(path);
        }
    }
    FH_CHECK(fh_mkdir_p(run->dir));
    run->made_folder = run->made_folder || !opt->resume_dir || run->restart;
    snprintf(path, sizeof path, "%s/config.ini", run->dir);
    return fh_write_file_atomic(path, run->config_text); /* on --resume, fl.rounds may have changed */
}

/* Rank 0 after an error, whichever rank had it (also just before MPI_Abort): a folder this run made that
 * holds no checkpoint has nothing to resume, so it goes (the error is on stderr) and a retry needs no
 * --force. */
void fl_remove_empty_run_folder(FlRun *run)
{
    struct stat st;
    if (!run->made_folder || run->lock.fd < 0 || stat(run->checkpoint_path, &st) == 0) return;
    if (run->metrics_csv) fclose(run->metrics_csv), run->metrics_csv = NULL;
    if (run->clients_csv) fclose(run->clients_csv), run->clients_csv = NULL;
    const char *files[] = { "config.ini", "log.txt", "metrics.csv", "clients.csv", "client-state.bin" };
    char path[4300];
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", run->dir, files[i]);
        unlink(path);
    }
    remove_stale_temporaries(run->dir);
    fh_lock_drop(&run->lock);
    rmdir(run->dir); /* only when nothing else is in it */
}

int fl_open_outputs(FlRun *run, const FlRunOptions *opt)
{
    FH_CHECK(create_run_folder(run, opt));
    char path[4300];
    snprintf(path, sizeof path, "%s/log.txt", run->dir);
    FH_CHECK(open_output(&run->log, path, 1));
    fh_log_set_file(run->log);
    FH_CHECK(open_csv_extra(&run->metrics_csv, run->dir, "metrics.csv", fl_column_names, FL_N_COLUMNS, run->rows,
                            run->n_rows, run->dcol_names, run->n_dcols, run->drows));
    FH_CHECK(open_csv(&run->clients_csv, run->dir, "clients.csv", run->ccol_names, run->n_ccols, run->client_rows,
                      run->n_client_rows));
    return FH_OK;
}

void fl_progress_line(const FlRun *run, const double *row, double eta)
{
    char acc[64] = "";
    if (!isnan(row[FL_COL_test_accuracy]))
        snprintf(acc, sizeof acc, "  test acc %.4f loss %.4f", row[FL_COL_test_accuracy], row[FL_COL_test_loss]);
    fh_log_info("round %d/%d%s  train loss %.4f  drift %.4g  round %.2f s (eval %.2f s)  ETA %.0f s",
                (int)row[FL_COL_round] + 1, run->s.rounds, acc, row[FL_COL_train_loss], row[FL_COL_drift],
                row[FL_COL_t_round], row[FL_COL_t_eval], eta);
}

/* The stop line of a round left after a stop request; `checkpointed`: rounds in the checkpoint on disk. */
void fl_left_round_line(const FlRun *run, int t, int checkpointed)
{
    const FlSettings *s = &run->s;
    if (checkpointed == t)
        fh_log_info("stopped by %s after round %d of %d: round %d was left between local steps after "
                    "fl.term_grace = %g s; checkpoint written. Resume with: fedhet run --resume %s",
                    fh_stop_signal_name(), t, s->rounds, t + 1, s->term_grace, run->dir);
    else /* the checkpoint of the round before could not be written */
        fh_log_info("stopped by %s during round %d of %d (left between local steps after fl.term_grace = %g s); the "
                    "checkpoint stays at round %d. Resume with: fedhet run --resume %s", fh_stop_signal_name(), t + 1,
                    s->rounds, s->term_grace, checkpointed, run->dir);
}

/* ", method scratch N KiB" for a method's scratch of `bytes` (usually kilobytes), "" without any */
static const char *scratch_note(char *buf, size_t size, size_t bytes)
{
    if (!bytes) return "";
    snprintf(buf, size, ", method scratch %.1f KiB", (double)bytes / 1024);
    return buf;
}

/* Every rank: the peak resident memory of each rank, logged by rank 0 (rank 0's own and the largest client
 * rank's): what a job needs per rank, measured (`make bench-scale` reads it) */
int fl_peak_memory_line(const FlRun *run)
{
    struct rusage usage;
    struct {
        double mib;
        int rank;
    } mine = { 0.0, run->comm.rank }, top = { 0.0, 0 }; /* MPI_DOUBLE_INT's layout */
    if (getrusage(RUSAGE_SELF, &usage) == 0) mine.mib = (double)usage.ru_maxrss / 1024.0; /* KiB on Linux */
    const double rank0 = mine.mib;
    if (run->comm.rank == 0 && run->comm.size > 1) mine.mib = -1.0; /* the client ranks' largest */
    if (MPI_Reduce(&mine, &top, 1, MPI_DOUBLE_INT, MPI_MAXLOC, 0, run->comm.comm) != MPI_SUCCESS)
        FH_FAIL(FH_ERR_MPI, "reducing the ranks' peak memory failed");
    if (run->comm.rank != 0) return FH_OK;
    if (run->comm.size == 1) fh_log_info("peak resident memory: %.1f MiB (one rank)", rank0);
    else
        fh_log_info("peak resident memory: rank 0 %.1f MiB, client ranks up to %.1f MiB (rank %d)", rank0, top.mib,
                    top.rank);
    return FH_OK;
}

void fl_print_budget(const FlRun *run)
{
    const double mib = 1048576.0, state = (double)run->n_state * 4 / mib;
    const AlgoMethod *m = run->s.method;
    const NnModel *model = &run->work.model;
    fh_log_info("run %s: %s, model %s (%lld state values, %.1f MiB; conv layers on %s), %d clients on %d client "
                "rank%s, %d rounds", run->dir, m->name, run->s.model, (long long)run->n_state, state,
                nn_backend_name(model->backend), run->n_clients, run->comm.n_client_ranks,
                run->comm.n_client_ranks > 1 ? "s" : "", run->s.rounds);
    double model_work =
        ((double)nn_model_activation_bytes(model, run->s.batch_size) + (double)nn_model_backend_bytes(model)) / mib +
        3 * state;
    /* the busiest client rank: the most clients one rank owns, and the upload records it can hold at once */
    int most_owned = 0;
    for (int r = 0; r < run->comm.size; r++) {
        int n = 0;
        for (int k = 0; k < run->n_clients; k++) n += run->owner[k] == r;
        if (n > most_owned) most_owned = n;
    }
    const int max_selected = fl_max_selected(&run->s, run->n_clients);
    const int uploads = most_owned < max_selected ? most_owned : max_selected;
    const int size = run->comm.size, client_rank = size > 1 ? 1 : 0; /* rank 1 evaluates the most batches of them */
    char client_scratch[64], server_scratch[64];
    const double block = (double)run->work.block * 4 / mib;
    fh_log_info("memory per client rank (at most %d client%s each): model state + gradient + optimiser + activations "
                "%.1f MiB, its clients' data, the persistent state of the client it trains %.1f MiB, upload records "
                "%d x %.1f MiB = %.1f MiB, evaluation %.1f MiB%s", most_owned, most_owned == 1 ? "" : "s", model_work,
                block, uploads, (double)run->layout.bytes / mib, uploads * (double)run->layout.bytes / mib,
                (double)fl_eval_bytes(&run->data, run->s.eval_batch, client_rank, size) / mib,
                scratch_note(client_scratch, sizeof client_scratch, run->z.client_scratch));
    if (run->store.slot_floats > 0)
        fh_log_info("per-client state on disk: %s, %.1f MiB per client that has trained, plus one per client trained "
                    "since the last checkpoint (%d clients: up to %.1f GiB)", run->store.path,
                    (double)run->store.slot_bytes / mib, run->n_clients,
                    (2.0 * run->n_clients + max_selected) * (double)run->store.slot_bytes / (1024.0 * mib));
    /* the metrics.csv rows and every clients.csv row of the run, kept for the checkpoints */
    const double rows = ((double)run->s.rounds * FL_N_COLUMNS + (double)run->cap_client_rows * run->n_ccols) * 8 / mib;
    char uploads_note[160];
    if (run->work.ops.folds)
        snprintf(uploads_note, sizeof uploads_note, "folded uploads: %d headers x %.1f KiB + partial sums %.1f MiB",
                 max_selected, (double)run->layout.header_bytes / 1024.0, (double)FL_FOLD_BYTES / mib);
    else
        snprintf(uploads_note, sizeof uploads_note, "gathered uploads up to %d x %.1f MiB = %.1f MiB", max_selected,
                 (double)run->layout.bytes / mib, max_selected * (double)run->layout.bytes / mib);
    fh_log_info("memory on rank 0: %s, plus %d model-sized vectors, evaluation %.1f MiB, metric rows %.1f MiB%s",
                uploads_note, 3 + run->z.server_vectors + run->z.server_private + run->work.ops.update.n_sums,
                (double)fl_eval_bytes(&run->data, run->s.eval_batch, 0, size) / mib, rows,
                scratch_note(server_scratch, sizeof server_scratch, run->z.server_scratch));
    if (m->quality_shift && !run->data.has_test_corrupted)
        fh_log_info("%s: the data has no corrupted test set ([data] corruption = none): the clean/corrupted comparison "
                    "is off (metrics.csv corrupted_*, client_auc_std, client_bacc_std stay empty; docs/methods/metrics.md C.5, C.6)",
                    m->name);
}

/* The columns of the named upload scalars (AlgoSizes.named, a plug-in's after the host's): clients.csv's after the
 * fixed ones, and the metrics.csv columns that are their means. */
int fl_client_columns(FlRun *run)
{
    run->n_ccols = FL_N_CCOLUMNS;
    for (int c = 0; c < FL_N_CCOLUMNS; c++) run->ccol_names[c] = fl_client_column_names[c];
    run->n_mean_cols = 0;
    for (int i = 0; i < run->z.n_named; i++) {
        const AlgoNamedScalar *u = &run->z.named[i];
        if (u->show & ALGO_SHOW_CLIENT) { /* FL_MAX_CCOLUMNS holds ALGO_MAX_NAMED of them */
            run->ccol_scalar[run->n_ccols] = u->at;
            run->ccol_names[run->n_ccols++] = u->name;
        }
        if (!(u->show & ALGO_SHOW_MEAN)) continue;
        int col = -1;
        for (int c = 0; c < FL_N_COLUMNS && col < 0; c++)
            if (!strcmp(fl_column_names[c], u->name)) col = c;
        if (col < 0)
            FH_FAIL(FH_ERR_USAGE, "method %s: upload scalar %s is shown as a metrics.csv mean, which has no column of "
                    "that name", run->s.method->name, u->name);
        run->mean_col[run->n_mean_cols] = col;
        run->mean_scalar[run->n_mean_cols++] = u->at;
    }
    return FH_OK;
}

/* Rank 0: room for every clients.csv row of the run, those of a resumed checkpoint and one per selected
 * client of each round still to run (the selection plan is drawn here as the rounds will draw it), so that
 * the rounds allocate nothing; the checkpoint writes them all. */
int fl_reserve_client_rows(FlRun *run)
{
    const int K = run->n_clients, per_round = fl_clients_per_round(&run->s, K);
    int64_t rows = run->n_client_rows;
    int32_t *ids = NULL;
    if (per_round < 0) FH_CHECK(fh_calloc(&ids, (size_t)K, sizeof *ids, "selection plan"));
    for (int t = run->start_round; t < run->s.rounds; t++)
        rows += per_round >= 0 ? per_round : fl_select_clients(&run->s, K, t, ids);
    fh_free(&ids);
    double *room = NULL;
    FH_CHECK(fh_calloc(&room, (size_t)(rows > 0 ? rows : 1), (size_t)run->n_ccols * sizeof(double), "clients.csv rows"));
    if (run->n_client_rows > 0)
        memcpy(room, run->client_rows, (size_t)run->n_client_rows * run->n_ccols * sizeof(double));
    fh_free(&run->client_rows);
    run->client_rows = room;
    run->cap_client_rows = rows;
    return FH_OK;
}
