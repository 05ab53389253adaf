/* One experiment: setup and the round loop (docs/architecture.md); its outputs are in run_outputs.c. The loop
 * exists once; methods act only through their hooks (src/algo). */
#include "fl_internal.h"
#include "run_outputs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fedhet/core.h"
#include "fedhet/onnx.h"

/* ---- setup -------------------------------------------------------------------------------------------- */

static const char *const resume_may_change[] = { "fl.rounds", "fl.term_grace", NULL };

/* --resume's folder is a run folder: what a mistaken folder gets instead of "config.ini: cannot open" */
static int check_resume_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) FH_FAIL(FH_ERR_DATA, "--resume %s: no such folder (it takes a run folder, e.g. outputs/NAME)", dir);
    if (!S_ISDIR(st.st_mode)) FH_FAIL(FH_ERR_DATA, "--resume %s: not a folder (it takes a run folder, e.g. outputs/NAME)", dir);
    if (fh_path_exists(dir, "config.ini")) return FH_OK;
    if (fh_path_exists(dir, "grid/grid.ini"))
        FH_FAIL(FH_ERR_DATA, "--resume %s: not a run folder but a grid folder (fedhet grid --resume %s continues it)", dir, dir);
    FH_FAIL(FH_ERR_DATA, "--resume %s: not a run folder (it has no config.ini; a run folder is what fedhet run made, e.g. "
            "outputs/NAME)", dir);
}

static int load_config(FlRun *run, const FlRunOptions *opt, const char **path_out)
{
    static char path[4200];
    if (opt->resume_dir) FH_CHECK(check_resume_dir(opt->resume_dir));
    if (opt->config_path) snprintf(path, sizeof path, "%s", opt->config_path);
    else snprintf(path, sizeof path, "%s/config.ini", opt->resume_dir ? opt->resume_dir : ".");
    *path_out = path;
    FH_CHECK(fl_config_load(&run->cfg, path, !opt->config_path, opt->overrides, opt->n_overrides));
    FH_CHECK(fl_settings_from_config(&run->s, run->cfg, path));
    FH_CHECK(fh_config_to_text(run->cfg, &run->config_text));
    return FH_OK;
}

/* [data] path exists, or [data] source can make it */
static int check_data_path(const FlSettings *s, const FhConfig *cfg)
{
    struct stat st;
    if (stat(s->data_path, &st) == 0 || *s->data_source) return FH_OK;
    char origin[FH_PATH_MAX + 32]; /* the config line that named it, or the command line */
    FH_FAIL(FH_ERR_DATA, "%s: [data] path = %s does not exist (make it with fedhet partition, or set [data] source to "
            "make it here)", fh_config_origin(cfg, "data", "path", origin, sizeof origin), s->data_path);
}

/* The partition file: used as is, or made from [data] source when it does not exist yet. */
static int prepare_data(const FlSettings *s, const FhConfig *cfg, const char *config_path)
{
    struct stat st;
    if (stat(s->data_path, &st) == 0) return FH_OK;
    FH_CHECK(check_data_path(s, cfg));
    char where[4200];
    snprintf(where, sizeof where, "%.4000s: [data] source_options", config_path);
    FhConfig *source_cfg = NULL; /* holds the strings of source */
    FH_CHECK(data_source_options_parse(&source_cfg, s->source_options, where));
    DataSourceOptions source;
    DataPartFileSpec spec;
    data_source_options_from(source_cfg, &source);
    snprintf(where, sizeof where, "%.4000s: [data]", config_path);
    int status = data_partition_spec_from(&spec, &source, &s->part, where);
    static char params[8192];
    data_partition_parameters(cfg, source_cfg, &spec, params, sizeof params);
    const size_t used = strlen(params);
    snprintf(params + used, sizeof params - used, " (from %s)", config_path);
    spec.parameters = params;
    if (status == FH_OK) {
        fh_log_info("making %s from %s", s->data_path, s->data_source);
        status = data_partition_make(s->data_source, &source, s->data_path, &spec, *s->part.mean ? s->part.mean : NULL,
                                     *s->part.std ? s->part.std : NULL);
    }
    fh_config_free(&source_cfg);
    return status;
}

/* The rank count fits the data: checked before the run folder is made. */
static int check_rank_count(const FlRun *run, const char *data_path)
{
    DataPartFile f;
    FH_CHECK(data_partfile_open(&f, data_path));
    int K = f.n_clients, classes = f.classes;
    const int64_t n_test = f.n_test;
    data_partfile_close(&f);
    /* a run without evaluation is asked for, never a silent consequence of the data file */
    if (n_test == 0 && run->s.eval_every != 0)
        FH_FAIL(FH_ERR_DATA, "%s has no test set (/test): the run could not evaluate its model (make the file with a "
                "test split, or set fl.eval_every = 0 to run without evaluation)", data_path);
    if (run->comm.size > 1 && run->comm.size - 1 > K)
        FH_FAIL(FH_ERR_USAGE, "%d ranks for %d clients: at most clients + 1 = %d ranks (rank 0 is the server)",
                run->comm.size, K, K + 1);
    /* the method and its plug-in refuse what they cannot honour before the run folder exists */
    AlgoSetup setup;
    AlgoOps ops;
    fl_algo_setup(&setup, &run->s, NULL, K, classes);
    const int status = algo_ops_compose(&ops, &setup, fl_plugin_options(&run->s));
    algo_ops_free(&ops);
    return status;
}

int fl_config_validate(const char *config_path, char *const *overrides, int n_overrides, int ranks)
{
    FlRun run;
    memset(&run, 0, sizeof run);
    FlRunOptions opt = { .config_path = config_path, .overrides = overrides, .n_overrides = n_overrides };
    const char *path = NULL;
    int status = load_config(&run, &opt, &path);
    if (status == FH_OK) status = check_data_path(&run.s, run.cfg);
    /* a file still to be made from [data] source is checked when it is made */
    struct stat st;
    run.comm.size = ranks;
    if (status == FH_OK && stat(run.s.data_path, &st) == 0) status = check_rank_count(&run, run.s.data_path);
    fh_config_free(&run.cfg);
    free(run.config_text);
    return status;
}

/* [model] init: the named tensors of the file, for the model on the data file's shape and classes */
static int read_init(FlRun *run)
{
    DataPartFile f;
    FH_CHECK(data_partfile_open(&f, run->s.data_path));
    const NnShape shape = { f.c, f.h, f.w };
    const int classes = f.classes, n_clients = f.n_clients;
    data_partfile_close(&f);
    if (fl_init_kind(&run->s) == FL_INIT_ONNX) { /* the file's initializers over fedhet's initialisation (a head) */
        NnModel m;
        FH_CHECK(fl_model_build(&m, &run->s, shape, classes, n_clients, 1));
        nn_model_init_params(&m, (uint64_t)run->s.seed);
        int status = fh_alloc_aligned(&run->init_state, (size_t)m.n_state * sizeof(float), "initial state");
        if (status == FH_OK) {
            nn_vec_copy(run->init_state, m.state, m.n_state);
            status = onnx_net_copy_weights(run->s.net, &m, run->init_state);
        }
        nn_model_free(&m);
        return status;
    }
    return fl_model_tensors_read(run->s.init, &run->s, shape, classes, n_clients, &run->init_state);
}

/* The config of a resumed run must be the one it started with, but for fl.rounds. */
static int check_resume_config(const FhConfig *old, const FhConfig *cfg, const char *config_path, const char *against)
{
    char *diff = NULL;
    FH_CHECK(fh_config_diff(old, cfg, resume_may_change, &diff));
    if (!diff) return FH_OK;
    int status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__,
                                "%s: the config differs from %s (only fl.rounds may change on --resume): %s",
                                config_path, against, diff);
    free(diff);
    return status;
}

/* Rank 0 before any work: data file, run folder name (never replaced without --force), a resumed run's
 * config against its checkpoint's. The folder is claimed here (made empty, or reopened, with its lock);
 * its files are written by fl_open_outputs once the whole setup has succeeded, and a setup error
 * removes a folder made here (remove_empty_run_folder). */
static int prepare_rank0(FlRun *run, const FlRunOptions *opt, const char *config_path)
{
    FH_CHECK(prepare_data(&run->s, run->cfg, config_path));
    FH_CHECK(check_rank_count(run, run->s.data_path));
    struct stat st;
    if (opt->resume_dir) {
        snprintf(run->dir, sizeof run->dir, "%s", opt->resume_dir);
        snprintf(run->checkpoint_path, sizeof run->checkpoint_path, "%s/checkpoint.h5", run->dir);
        FH_CHECK(fl_claim_run_folder(run, 0));
        if (stat(run->checkpoint_path, &st) != 0) {
            if (errno != ENOENT)
                FH_FAIL(FH_ERR_IO, "%s: cannot read: %s", run->checkpoint_path, strerror(errno));
            /* stopped before its first checkpoint: nothing to continue, so the run starts again; a finished
             * run that lost its checkpoint is not replaced that way */
            char path[4300];
            snprintf(path, sizeof path, "%s/run.h5", run->dir);
            if (stat(path, &st) == 0 && fl_checkpoint_verify(path) != FH_OK)
                return fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s is damaged and there is no checkpoint to "
                                      "rebuild it from (--force runs the experiment again)", path);
            if (stat(path, &st) == 0)
                FH_FAIL(FH_ERR_USAGE, "%s: no checkpoint to resume from, but the run's final model %s exists (--force "
                        "runs it again)", run->checkpoint_path, path);
            snprintf(path, sizeof path, "%s/config.ini", run->dir);
            FhConfig *old = NULL;
            int status = fl_config_load(&old, path, 1, NULL, 0);
            if (status == FH_OK) status = check_resume_config(old, run->cfg, config_path, path);
            fh_config_free(&old);
            FH_CHECK(status);
            run->restart = 1;
            fh_log_info("%s has no checkpoint (the run stopped before its first one): starting it again from round 1",
                        run->dir);
            /* a restart starts from the init file as the first attempt did */
            if (fl_init_kind(&run->s) != FL_INIT_RANDOM) FH_CHECK(read_init(run));
            return FH_OK;
        }
        /* nothing is continued from a file that is not whole */
        FH_CHECK(fl_checkpoint_verify(run->checkpoint_path));
        char *saved = NULL;
        FH_CHECK(fl_checkpoint_read_config(run->checkpoint_path, &saved));
        int n;
        const FhConfigKey *schema = fl_config_schema_for(run->s.method, run->s.plugin, &n);
        FhConfig *old = NULL;
        int status = fh_config_load_text(&old, schema, n, saved, run->checkpoint_path, NULL, 0);
        free(saved);
        if (status != FH_OK)
            return fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__,
                                  "%s: the checkpoint's config does not load as a config of method %s (was it written "
                                  "by another method?)", run->checkpoint_path, run->s.method->name);
        status = check_resume_config(old, run->cfg, config_path, "the checkpoint's");
        fh_config_free(&old);
        return status;
    }
    char name[4300];
    if (*run->s.name) snprintf(name, sizeof name, "%s", run->s.name);
    else {
        const char *base = strrchr(config_path, '/');
        snprintf(name, sizeof name, "%s", base ? base + 1 : config_path);
        char *dot = strrchr(name, '.');
        if (dot && dot != name) *dot = '\0';
        char what[4400];
        snprintf(what, sizeof what, "%.4300s: the run folder's name (the config file's name; set [output] name)",
                 config_path);
        FH_CHECK(fh_check_plain_name(name, what));
    }
    /* a bad init file is input data: refused before the run folder exists */
    if (fl_init_kind(&run->s) != FL_INIT_RANDOM) FH_CHECK(read_init(run));
    snprintf(run->dir, sizeof run->dir, "%.2000s/%.2000s", run->s.out_dir, name);
    snprintf(run->checkpoint_path, sizeof run->checkpoint_path, "%s/checkpoint.h5", run->dir);
    return fl_claim_run_folder(run, opt->force ? 2 : 1);
}

typedef struct {
    int64_t size;
    int id;
} ClientSize;

static int larger_then_lower_id(const void *a, const void *b)
{
    const ClientSize *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* rank a before rank b: less loaded, or as loaded and lower */
static int lighter(const int64_t *load, int a, int b) { return load[a] < load[b] || (load[a] == load[b] && a < b); }

/* Moves heap[at] down the min-heap of client ranks ordered by (load, rank) to where it belongs. */
static void lightest_first(int *heap, int n, const int64_t *load, int at)
{
    for (int child; (child = 2 * at + 1) < n; at = child) {
        if (child + 1 < n && lighter(load, heap[child + 1], heap[child])) child++;
        if (lighter(load, heap[at], heap[child])) return;
        const int t = heap[at];
        heap[at] = heap[child];
        heap[child] = t;
    }
}

/* Longest-processing-time first: clients by size (largest first, then id) go to the least-loaded client
 * rank (lowest rank on ties). Depends only on the data and the rank count. O(K log K): a sort, and a heap of
 * the ranks by (load, rank) whose root takes each client. */
static int assign_clients(FlRun *run)
{
    const int K = run->n_clients, R = run->comm.n_client_ranks, first_rank = run->comm.size > 1 ? 1 : 0;
    ClientSize *order = NULL;
    int64_t *load = NULL;
    int *heap = NULL;
    FH_CHECK(fh_calloc(&run->owner, (size_t)K, sizeof *run->owner, "client owners"));
    FH_CHECK(fh_calloc(&run->owned, (size_t)K, sizeof *run->owned, "owned clients"));
    int status = fh_calloc(&order, (size_t)K, sizeof *order, "client order");
    if (status == FH_OK) status = fh_calloc(&load, (size_t)R, sizeof *load, "rank loads");
    if (status == FH_OK) status = fh_calloc(&heap, (size_t)R, sizeof *heap, "ranks by load");
    if (status != FH_OK) {
        fh_free(&order);
        fh_free(&load);
        return status;
    }
    const int64_t *off = run->data.offsets;
    for (int k = 0; k < K; k++) order[k] = (ClientSize){ off[k + 1] - off[k], k };
    qsort(order, (size_t)K, sizeof *order, larger_then_lower_id); /* a total order: the result is unique */
    for (int r = 0; r < R; r++) heap[r] = r; /* every load 0: ascending ranks are a heap */
    for (int i = 0; i < K; i++) {
        const int best = heap[0];
        run->owner[order[i].id] = first_rank + best;
        load[best] += order[i].size;
        lightest_first(heap, R, load, 0);
    }
    run->n_owned = 0;
    for (int k = 0; k < K; k++)
        if (run->owner[k] == run->comm.rank) run->owned[run->n_owned++] = k;
    fh_free(&order);
    fh_free(&load);
    fh_free(&heap);
    return FH_OK;
}

/* ---- the round loop ----------------------------------------------------------------------------------- */

typedef struct {
    int32_t eval, checkpoint, stop; /* stop: FL_PLAN_* */
    int32_t pad;
} FlControl;

typedef struct {
    MPI_Datatype record_type, head_type, head_in_record; /* a record; its header and scalars; those a record apart */
    char *send, *recv;            /* records (folding: rank 0 receives the headers only; early: a rank keeps only
                                   * the headers, and trains into the fold's batch) */
    size_t stride;                /* rank 0: bytes between gathered records */
    int folds;                    /* the server step folds (AlgoOps.folds): client ranks send partial sums */
    FlFold fold;
    int *record_slot;             /* [records]: the selection slot of each record a rank trains */
    double *coef;                 /* rank 0, gathered: [(1 + n_sums) * m_max] scratch of algo_server_update */
    float *sums;                  /* rank 0: [n_sums * n_state] the server step's sums (AlgoServerUpdate) */
    double *delta;                /* rank 0: [n_params] D = sum_i (w_i - w^t), for metrics.csv divergence */
    int32_t *selected;
    int *counts, *displs;
    int *order;                   /* recv index sorted by client id */
    AlgoUpload *uploads;          /* the round's uploads in ascending client id */
    double *weights;
    float *next;                  /* the aggregated state */
    double *rank_seconds;         /* [ranks]: training seconds of each rank in the round */
    double round_seconds_sum;
    int rounds_timed;
    FlLeave leave;                /* leaving a round after a stop request */
    int checkpointed;             /* rounds done in the last checkpoint on disk (-1: none) */
} FlLoop;

static int loop_init(FlRun *run, FlLoop *L)
{
    memset(L, 0, sizeof *L);
    const int K = run->n_clients, m_max = fl_max_selected(&run->s, K);
    const size_t rec = run->layout.bytes;
    L->folds = run->work.ops.folds;
    /* a single rank holds its records where rank 0 reads them; folding, rank 0 of several gets their headers */
    L->stride = L->folds && run->comm.size > 1 ? run->layout.header_bytes : rec;
    MPI_Type_contiguous((int)rec, MPI_BYTE, &L->record_type);
    MPI_Type_commit(&L->record_type);
    MPI_Type_contiguous((int)run->layout.header_bytes, MPI_BYTE, &L->head_type);
    MPI_Type_commit(&L->head_type);
    MPI_Type_create_resized(L->head_type, 0, (MPI_Aint)rec, &L->head_in_record);
    MPI_Type_commit(&L->head_in_record);
    const int n_records = run->comm.size > 1 ? (run->n_owned < m_max ? run->n_owned : m_max) : m_max;
    FH_CHECK(fh_calloc(&L->record_slot, (size_t)(n_records > 0 ? n_records : 1), sizeof *L->record_slot, "record slots"));
    const int rows = 1 + run->work.ops.update.n_sums;
    if (L->folds) { /* every rank takes the same way: the busiest rank's records decide */
        int *owned = NULL, busiest = 0;
        FH_CHECK(fh_calloc(&owned, (size_t)run->comm.size, sizeof *owned, "clients per rank"));
        for (int k = 0; k < K; k++) owned[run->owner[k]]++;
        for (int r = 0; r < run->comm.size; r++) busiest = owned[r] > busiest ? owned[r] : busiest;
        fh_free(&owned);
        FH_CHECK(fl_fold_init(&L->fold, run, m_max, busiest < m_max ? busiest : m_max));
    }
    if (run->comm.rank == 0 && !L->folds)
        fh_log_info("aggregation: gathered (rank 0 receives every upload: %s)",
                    algo_gathers_why(&run->work.ops.update, run->work.ops.weights));
    else if (run->comm.rank == 0)
        fh_log_info("aggregation: folded %s", L->fold.early ? "as each client finishes (each training rank keeps "
                    "the round's partial sums, not its records)" : "once the round's weights are known (each "
                    "training rank keeps its records until then)");
    if (L->fold.early && run->comm.size == 1) L->stride = run->layout.header_bytes; /* the headers alone are kept */
    FH_CHECK(fh_calloc(&L->selected, (size_t)fl_select_room(&run->s, K), sizeof *L->selected, "selected clients"));
    FH_CHECK(fl_leave_init(&L->leave, &run->comm, run->s.term_grace));
    L->checkpointed = run->start_round > 0 ? run->start_round : -1;
    run->work.leave_poll = fl_leave_poll;
    run->work.leave_arg = &L->leave;
    if (run->comm.size > 1 && run->n_owned > 0)
        FH_CHECK(fh_alloc_aligned(&L->send, (size_t)n_records * (L->fold.early ? run->layout.header_bytes : rec),
                                  "upload records"));
    if (run->comm.rank == 0) {
        FH_CHECK(fh_alloc_aligned(&L->recv, (size_t)m_max * L->stride, "gathered upload records"));
        FH_CHECK(fh_calloc(&L->coef, (size_t)rows * m_max, sizeof *L->coef, "aggregation coefficients"));
        if (rows > 1)
            FH_CHECK(fh_alloc_aligned(&L->sums, (size_t)(rows - 1) * run->n_state * sizeof(float), "the server step's sums"));
        FH_CHECK(fh_alloc_aligned(&L->delta, (size_t)run->n_params * sizeof(double), "the clients' summed change"));
        FH_CHECK(fh_calloc(&L->counts, (size_t)run->comm.size, sizeof *L->counts, "gather counts"));
        FH_CHECK(fh_calloc(&L->displs, (size_t)run->comm.size, sizeof *L->displs, "gather offsets"));
        FH_CHECK(fh_calloc(&L->order, (size_t)K, sizeof *L->order, "upload order"));
        FH_CHECK(fh_calloc(&L->uploads, (size_t)K, sizeof *L->uploads, "uploads"));
        FH_CHECK(fh_calloc(&L->weights, (size_t)K, sizeof *L->weights, "weights"));
        FH_CHECK(fh_alloc_aligned(&L->next, (size_t)run->n_state * sizeof(float), "next global state"));
        FH_CHECK(fh_calloc(&L->rank_seconds, (size_t)run->comm.size, sizeof *L->rank_seconds, "training seconds"));
    }
    return FH_OK;
}

static void loop_free(FlLoop *L)
{
    if (L->record_type) MPI_Type_free(&L->record_type);
    if (L->head_type) MPI_Type_free(&L->head_type);
    if (L->head_in_record) MPI_Type_free(&L->head_in_record);
    fh_free(&L->record_slot);
    fl_fold_free(&L->fold);
    fh_free(&L->coef);
    fh_free(&L->sums);
    fh_free(&L->delta);
    fh_free(&L->send);
    fh_free(&L->recv);
    fh_free(&L->selected);
    fl_leave_free(&L->leave);
    fh_free(&L->counts);
    fh_free(&L->displs);
    fh_free(&L->order);
    fh_free(&L->uploads);
    fh_free(&L->weights);
    fh_free(&L->next);
    fh_free(&L->rank_seconds);
}

/* The end of phase `point` of round t on this rank, passed to the tests' fault injection; a failure injected
 * there is this rank's alone. */
static int phase_end(FlRun *run, const char *point, int t)
{
    const int status = fl_fault_point(point, run->comm.rank, t);
    if (status != FH_OK) fl_fail_alone(&run->comm, status);
    return status;
}

/* Client ranks: train the selected clients they own, ascending id, into records. */
static int train_selected(FlRun *run, FlLoop *L, int n_selected, int round, double lr, int *n_mine)
{
    *n_mine = 0;
    char *base = run->comm.size > 1 ? L->send : L->recv;
    const size_t kept = L->fold.early ? run->layout.header_bytes : run->layout.bytes; /* bytes kept per record */
    FlClientWork *w = &run->work;
    for (int i = 0; i < n_selected; i++) {
        int k = L->selected[i];
        if (run->owner[k] != run->comm.rank) continue;
        /* a left round still sends its count of records (the gather's shape), unused */
        if (!w->left) {
            char *record = L->fold.early ? fl_fold_next_record(&L->fold, run) : base + (size_t)(*n_mine) * kept;
            FH_CHECK(fl_store_load(&run->store, i, w->client_state));
            FH_CHECK(fl_client_train(w, &run->layout, run->global, run->server_vecs, run->server_scalars, k, i,
                                     round, lr, record));
            if (!w->left) FH_CHECK(fl_store_put(&run->store, k, w->client_state));
            if (L->fold.early && !w->left) { /* folded soon: only its header stays */
                memcpy(base + (size_t)(*n_mine) * kept, record, kept);
                fl_fold_record(&L->fold, run, i, n_selected);
            }
        }
        L->record_slot[(*n_mine)++] = i;
    }
    if (L->fold.early) fl_fold_flush(&L->fold, run, n_selected); /* a left round's sums go unused */
    return FH_OK;
}

/* Rank 0 receives every record, or folding their headers and scalars alone (the head of each record, which the
 * gather picks out with a stride: the records lie back to back in L->send) */
static int gather_records(FlRun *run, FlLoop *L, int n_selected, int n_mine, int round)
{
    if (run->comm.size == 1) return FH_OK;
    if (run->comm.rank == 0) {
        for (int r = 0; r < run->comm.size; r++) L->counts[r] = 0;
        for (int i = 0; i < n_selected; i++) L->counts[run->owner[L->selected[i]]]++;
        for (int r = 0, off = 0; r < run->comm.size; r++) {
            L->displs[r] = off;
            off += L->counts[r];
        }
    }
    MPI_Request req;
    const MPI_Datatype sent = !L->folds ? L->record_type : L->fold.early ? L->head_type : L->head_in_record;
    if (MPI_Igatherv(L->send, n_mine, sent, L->recv, L->counts, L->displs, L->folds ? L->head_type : L->record_type, 0,
                     run->comm.comm, &req) != MPI_SUCCESS)
        FH_FAIL(FH_ERR_MPI, "gathering the upload records failed");
    return run->comm.rank == 0 ? fl_leave_wait_gather(&L->leave, &req, round) : fl_wait(&req);
}

static AlgoServerCtx server_ctx(FlRun *run, int round, double lr, const int32_t *selected, int n_selected)
{
    return (AlgoServerCtx){ .round = round, .rounds = run->s.rounds, .n_clients = run->n_clients,
                            .n_selected = n_selected, .selected = selected, .n_params = run->n_params,
                            .n_state = run->n_state, .options = fl_method_options(&run->s),
                            .setup = &run->work.setup, .sizes = &run->z,
                            .lr = lr, .current = run->global, .server_vecs = run->server_vecs,
                            .server_private = run->server_private, .server_scalars = run->server_scalars,
                            .client_sizes = run->client_sizes, .label_counts = run->data.label_counts,
                            .classes = run->data.classes, .views = run->work.model.views,
                            .n_views = run->work.model.n_views,
                            .scratch = algo_ops_server_scratch(&run->work.ops, run->server_scratch) };
}

/* Rank 0: gathered record `slot` (records arrive grouped by rank) */
static char *gathered_record(const FlRun *run, const FlLoop *L, int slot)
{
    return L->recv + (size_t)slot * L->stride;
}

/* Rank 0: the round's uploads in ascending client id; *diverged when a client's training loss is not finite */
static int order_uploads(FlRun *run, FlLoop *L, int n_selected, int round, int *diverged)
{
    for (int i = 0; i < n_selected; i++) { /* by client id: each record's place in the (ascending) selection */
        const int64_t client = fl_record_header(gathered_record(run, L, i))->client;
        int lo = 0, hi = n_selected - 1;
        while (lo < hi) {
            const int mid = lo + (hi - lo) / 2;
            if (L->selected[mid] < client) lo = mid + 1;
            else hi = mid;
        }
        if (L->selected[lo] != client)
            FH_FAIL(FH_ERR_MPI, "round %d: a record of client %lld, which the round did not select", round + 1,
                    (long long)client);
        L->order[lo] = i;
    }
    *diverged = 0;
    for (int i = 0; i < n_selected; i++) {
        char *rec = gathered_record(run, L, L->order[i]);
        const FlRecordHeader *h = fl_record_header(rec);
        const float *state = L->folds ? NULL : fl_record_state(rec, &run->layout);
        L->uploads[i] = (AlgoUpload){ (int)h->client, h->n_samples, h->n_steps, h->train_loss, fl_record_scalars(rec),
                                      state, state ? state + run->n_state : NULL };
        if (h->nonfinite || !isfinite(h->train_loss)) {
            if (!*diverged)
                fh_log_error("round %d: client %lld's training loss is %g (diverged)", round + 1,
                             (long long)h->client, h->train_loss);
            *diverged = 1;
        }
    }
    return FH_OK;
}

/* Rank 0: the server step into L->next: over gathered uploads the method's own update, or the average with its
 * observe, sums and finish (algo_server_update); folding, the sums came reduced and finish is left. *diverged when
 * the new state is not finite. */
static int server_step(FlRun *run, FlLoop *L, AlgoServerCtx *sctx, int n_selected, int round, int *diverged)
{
    const AlgoServerUpdate *up = &run->work.ops.update;
    if (!L->folds)
        FH_CHECK(algo_server_update(up, sctx, L->uploads, n_selected, L->weights, L->next, L->sums, L->coef));
    else if (up->finish) FH_CHECK(up->finish(sctx, L->sums, L->next));
    for (int64_t j = 0; j < run->n_state; j++)
        if (!isfinite(L->next[j])) {
            fh_log_error("round %d: the aggregated state holds %g at index %lld (diverged)", round + 1, L->next[j],
                         (long long)j);
            *diverged = 1;
            return FH_OK;
        }
    return FH_OK;
}

/* Rank 0: the uploads in ascending client id, their weights and the method's scalar, before the server step;
 * folding, also the method's observe and the coefficients (fl_fold_coefficients). *diverged when a client's
 * loss is not finite. */
static int aggregate_begin(FlRun *run, FlLoop *L, AlgoServerCtx *sctx, int n_selected, int round, double *row,
                           int *diverged)
{
    FH_CHECK(order_uploads(run, L, n_selected, round, diverged));
    if (*diverged) return FH_OK;
    FH_CHECK(algo_ops_weights(&run->work.ops, sctx, L->uploads, n_selected, L->weights));
    row[FL_COL_method_scalar] = algo_ops_method_scalar(&run->work.ops, run->server_scalars, round);
    if (!L->folds) return FH_OK;
    const AlgoServerUpdate *up = &run->work.ops.update;
    if (up->observe) FH_CHECK(up->observe(sctx, L->uploads, n_selected, L->weights));
    return fl_fold_coefficients(&L->fold, run, sctx, L->uploads, n_selected, L->weights);
}

/* Every rank, folding, after aggregate_begin: rank 0 broadcasts the coefficients (held records; early: only
 * whether to fold), or that the round is not folded (left, diverged); the partial sums reduce to rank 0, which
 * finishes the server step. */
static int fold_round(FlRun *run, FlLoop *L, AlgoServerCtx *sctx, int n_selected, int n_mine, int round,
                      int *diverged)
{
    const int root = run->comm.rank == 0, several = run->comm.size > 1;
    FlFold *f = &L->fold;
    const int64_t go = (int64_t)(1 + f->n_sums) * n_selected; /* the flag follows the round's coefficients */
    if (root) f->coef[go] = !L->leave.decided && !*diverged;
    if (f->early) FH_CHECK(fl_bcast(&run->comm, f->coef + go, (int64_t)sizeof(double)));
    else FH_CHECK(fl_bcast(&run->comm, f->coef, (go + 1) * (int64_t)sizeof(double)));
    if (f->coef[go] == 0.0) return FH_OK;
    float *out[ALGO_MAX_SUMS + 1];
    out[0] = L->next;
    for (int k = 0; k < f->n_sums; k++) out[1 + k] = L->sums ? L->sums + (size_t)k * run->n_state : NULL;
    const int n_own = root && several ? 0 : n_mine;
    FH_CHECK(fl_fold_reduce(f, run, several ? L->send : L->recv, L->record_slot, f->early ? 0 : n_own, n_selected, out,
                            L->delta));
    const int status = root ? server_step(run, L, sctx, n_selected, round, diverged) : FH_OK;
    if (status != FH_OK) fl_fail_alone(&run->comm, status);
    return status;
}

/* Rank 0, while run->global is still w^t: the round's metrics.csv columns from the uploads (docs/methods/metrics.md
 * C.7: drift against w^t from the headers, divergence against w^{t+1} = L->next from them, D and L->next), the train
 * loss, the clients' times and the SAM family's diagnostics */
static void upload_columns(const FlRun *run, const FlLoop *L, int n_selected, double *row)
{
    double t_client_sum = 0.0, t_client_max = 0.0, loss_sum = 0.0;
    int64_t samples = 0;
    for (int i = 0; i < n_selected; i++) {
        const FlRecordHeader *h = fl_record_header(gathered_record(run, L, L->order[i]));
        t_client_sum += h->seconds;
        if (h->seconds > t_client_max) t_client_max = h->seconds;
        loss_sum += h->train_loss * (double)h->n_samples;
        samples += h->n_samples;
    }
    double drift = 0, drift_full = 0, drift2 = 0;
    for (int i = 0; i < n_selected; i++) {
        const FlRecordHeader *h = fl_record_header(gathered_record(run, L, L->order[i]));
        drift += sqrt(h->drift2_params);
        drift_full += sqrt(h->drift2_params + h->drift2_buffers);
        drift2 += h->drift2_params;
    }
    const double divergence = fl_divergence_sum(run, drift2, n_selected, L->delta, L->next);
    row[FL_COL_drift] = drift / n_selected;
    row[FL_COL_drift_full] = drift_full / n_selected;
    row[FL_COL_divergence] = divergence / n_selected;
    row[FL_COL_train_loss] = samples > 0 ? loss_sum / (double)samples : NAN;
    row[FL_COL_t_client_mean] = t_client_sum / n_selected;
    row[FL_COL_t_client_max] = t_client_max;
    /* the named upload scalars shown as plain means over the round's clients (perturb_norm, grad_norm, rho: the
     * SAM family's diagnostics and radius); the others stay NaN */
    for (int c = 0; c < run->n_mean_cols; c++) {
        double *mean = &row[run->mean_col[c]];
        *mean = 0.0;
        for (int i = 0; i < n_selected; i++) *mean += L->uploads[i].scalars[run->mean_scalar[c]] / n_selected;
    }
}

/* Rank 0: the round's clients.csv rows, kept for the checkpoints and appended to the file */
static int client_rows(FlRun *run, const FlLoop *L, int n_selected, int round)
{
    double wsum = 0;
    for (int i = 0; i < n_selected; i++) wsum += L->weights[i];
    for (int i = 0; i < n_selected; i++) {
        if (run->n_client_rows == run->cap_client_rows)
            FH_FAIL(FH_ERR_USAGE, "round %d: more clients.csv rows than the %lld the selection plan holds", round + 1,
                    (long long)run->cap_client_rows);
        double *cr = run->client_rows + run->n_client_rows++ * run->n_ccols;
        const AlgoUpload *u = &L->uploads[i];
        cr[FL_CCOL_ROUND] = round;
        cr[FL_CCOL_CLIENT] = u->client;
        cr[FL_CCOL_SAMPLES] = (double)u->n_samples;
        cr[FL_CCOL_STEPS] = (double)u->n_steps;
        cr[FL_CCOL_LOSS] = u->train_loss;
        cr[FL_CCOL_WEIGHT] = L->weights[i] / wsum;
        cr[FL_CCOL_SECONDS] = fl_record_header(gathered_record(run, L, L->order[i]))->seconds;
        for (int c = FL_N_CCOLUMNS; c < run->n_ccols; c++) /* the method's columns */
            cr[c] = u->scalars[run->ccol_scalar[c]];
        FH_CHECK(fl_csv_row(run->clients_csv, cr, run->n_ccols, run->dir, "clients.csv"));
    }
    return FH_OK;
}

/* Rank 0, after the server step: D over gathered uploads (folding, it came reduced), the round's metrics.csv columns
 * and clients.csv rows, and w^{t+1} as the global state. */
static int aggregate_end(FlRun *run, FlLoop *L, int n_selected, int round, double *row)
{
    if (!L->folds) fl_fold_delta_gathered(run, L->uploads, n_selected, L->delta);
    upload_columns(run, L, n_selected, row);
    nn_vec_copy(run->global, L->next, run->n_state);
    return client_rows(run, L, n_selected, round);
}

static int evaluate(FlRun *run, double *row)
{
    if (run->data.n_test == 0) return FH_OK;
    NnModel *m = &run->work.model;
    /* the evaluated model: the global state, or the method's server-only vector (AFL's running average) */
    if (run->comm.rank == 0)
        nn_vec_copy(m->state, run->z.eval_private >= 0 ? run->server_private + (size_t)run->z.eval_private * run->n_state
                                                      : run->global, run->n_state);
    FH_CHECK(fl_bcast(&run->comm, m->state, run->n_state * (int64_t)sizeof(float)));
    FlEvalMetrics e;
    FH_CHECK(fl_evaluate(&run->comm, &run->eval, m, &run->data, DATA_ROWS_TEST, &e));
    if (run->comm.rank == 0) {
        row[FL_COL_test_accuracy] = e.accuracy;
        row[FL_COL_test_loss] = e.loss;
        row[FL_COL_test_balanced_accuracy] = e.balanced_accuracy;
        row[FL_COL_test_auc_ovr_macro] = e.auc_ovr_macro;
        row[FL_COL_test_auc_ovr_weighted] = e.auc_ovr_weighted;
        row[FL_COL_test_auc_ovo_macro] = e.auc_ovo_macro;
        row[FL_COL_test_f1_macro] = e.f1_macro;
        if (run->n_dcols) fl_domain_accuracy(run);
    }
    if (!run->data.has_test_corrupted) return FH_OK;
    FH_CHECK(fl_evaluate(&run->comm, &run->eval, m, &run->data, DATA_ROWS_TEST_CORRUPTED, &e));
    if (run->comm.rank == 0) {
        row[FL_COL_corrupted_accuracy] = e.accuracy;
        row[FL_COL_corrupted_loss] = e.loss;
        row[FL_COL_corrupted_balanced_accuracy] = e.balanced_accuracy;
        row[FL_COL_corrupted_auc_ovo_macro] = e.auc_ovo_macro;
        /* docs/methods/metrics.md C.6: each client scored on the test set of its own quality; population std over clients */
        const int K = run->n_clients;
        int corrupted = 0;
        for (int k = 0; k < K; k++) corrupted += run->data.corruption[k] != 0;
        const double p = (double)corrupted / K, spread = sqrt(p * (1 - p));
        row[FL_COL_client_auc_std] = spread * fabs(row[FL_COL_test_auc_ovo_macro] - row[FL_COL_corrupted_auc_ovo_macro]);
        row[FL_COL_client_bacc_std] =
            spread * fabs(row[FL_COL_test_balanced_accuracy] - row[FL_COL_corrupted_balanced_accuracy]);
    }
    return FH_OK;
}

/* Rank 0 at setup, with fl.sharpness_every: the probe set and the sharpness scratch */
static int sharpness_init(FlRun *run)
{
    FH_CHECK(fl_probe_load(run));
    return fh_calloc(&run->probe_work, (size_t)algo_sam_sharpness_work(&run->work.model), sizeof(float),
                     "sharpness scratch");
}

/* Rank 0: sharpness and perturbed loss of the global model on the probe set (fl.sharpness_every;
 * docs/methods/sam.md §12). */
static int sharpness(FlRun *run, double *row)
{
    NnModel *m = &run->work.model;
    double l0 = 0.0, l1 = 0.0;
    FH_CHECK(algo_sam_sharpness(m, run->global, run->probe_x, run->probe_y, run->n_probe, run->s.sharpness_rho,
                                run->probe_work, &l0, &l1));
    row[FL_COL_sharpness] = l1 - l0 > 1e-10 ? l1 - l0 : 1e-10; /* S = max(L1 - L0, 1e-10) (FedISM) */
    row[FL_COL_perturbed_loss] = l1;
    return FH_OK;
}

static uint64_t hash_ids(const int32_t *ids, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)ids[i]) * 1099511628211ull;
    return h & ((1ull << 52) - 1); /* exact in a double */
}

/* Rank 0, after the server step: the round's identity, phase times and traffic into row. Training overlaps
 * across ranks: the slowest rank's total is the phase's length. */
static void round_columns(const FlRun *run, const FlLoop *L, const FlPlanHeader *plan, const double times[4],
                          int diverged, int64_t bcast_bytes, double *row)
{
    row[FL_COL_round] = plan->round;
    row[FL_COL_lr] = plan->lr;
    row[FL_COL_n_selected] = plan->n_selected;
    row[FL_COL_selected_hash] = (double)hash_ids(L->selected, plan->n_selected);
    row[FL_COL_t_broadcast] = times[1] - times[0];
    double per_rank_max = 0.0;
    if (!diverged) {
        double *sum = L->rank_seconds;
        memset(sum, 0, (size_t)run->comm.size * sizeof *sum);
        for (int i = 0; i < plan->n_selected; i++) {
            int r = run->owner[L->uploads[i].client];
            sum[r] += fl_record_header(gathered_record(run, L, L->order[i]))->seconds;
            if (sum[r] > per_rank_max) per_rank_max = sum[r];
        }
    }
    const double gather = times[2] - times[1];
    row[FL_COL_t_train] = per_rank_max;
    row[FL_COL_t_gather] = gather - per_rank_max > 0 ? gather - per_rank_max : 0.0;
    row[FL_COL_t_aggregate] = times[3] - times[2];
    row[FL_COL_t_round] = times[3] - times[0];
    row[FL_COL_bytes_down] = (double)plan->n_selected * (double)bcast_bytes;
    row[FL_COL_bytes_up] = (double)plan->n_selected * (double)run->layout.bytes;
}

/* Rank 0: what follows round t: evaluation, checkpoint, or a stop (divergence, a signal) */
static FlControl round_control(const FlSettings *s, int t, int diverged)
{
    FlControl ctl = { 0, 0, FL_PLAN_RUN, 0 };
    const int last = t == s->rounds - 1, stop = fh_stop_requested();
    ctl.eval = (s->eval_every > 0 && (t + 1) % s->eval_every == 0) || last;
    ctl.checkpoint = (s->checkpoint_every > 0 && (t + 1) % s->checkpoint_every == 0) || last || stop;
    ctl.stop = diverged ? FL_PLAN_STOP_DIVERGED : (stop && !last) ? FL_PLAN_STOP_SIGNAL : FL_PLAN_RUN;
    if (diverged) ctl.eval = ctl.checkpoint = 0;
    return ctl;
}

static int diverged_error(const FlRun *run, int t)
{
    struct stat st;
    if (stat(run->checkpoint_path, &st) == 0)
        FH_FAIL(FH_ERR_NUMERIC, "round %d diverged (see the message above); the last good checkpoint, %s, is "
                "kept (lower [train] lr, or set [train] clip)", t + 1, run->checkpoint_path);
    FH_FAIL(FH_ERR_NUMERIC, "round %d diverged (see the message above) before any checkpoint was written "
            "(lower [train] lr, or set [train] clip)", t + 1);
}

/* Every rank: the evaluation, the sharpness probe and the Hessian columns that round t asks for, their passes
 * counted into cost; *seconds: their wall time. */
static int round_measures(FlRun *run, int t, const FlControl *ctl, double *row, FlRoundCost *cost, double *seconds)
{
    const FlSettings *s = &run->s;
    const double t0 = fh_time_now();
    const int probe = s->sharpness_every > 0 && ((t + 1) % s->sharpness_every == 0 || t == s->rounds - 1);
    const int64_t eval_forward0 = run->work.model.forward_samples, eval_backward0 = run->work.model.backward_samples;
    if (ctl->eval) FH_CHECK(evaluate(run, row));
    if (probe) FH_CHECK(fl_agree(&run->comm, run->comm.rank == 0 ? sharpness(run, row) : FH_OK));
    const int hessian = s->hessian_every > 0 && ((t + 1) % s->hessian_every == 0 || t == s->rounds - 1);
    if (hessian) FH_CHECK(fl_hessian(run, t, row));
    if (ctl->eval || probe || hessian)
        FH_CHECK(fl_cost_reduce_passes(&run->comm, &run->work.model, eval_forward0, eval_backward0, cost));
    *seconds = fh_time_now() - t0;
    return FH_OK;
}

/* Rank 0: round t's metrics.csv row (cost columns, the per-domain columns after the fixed ones), kept for a
 * resume, and its progress line with the ETA from the rounds timed so far. */
static int metrics_row(FlRun *run, FlLoop *L, int t, double *row, double t_eval, FlRoundCost *cost, double *cost_mark)
{
    const FlSettings *s = &run->s;
    row[FL_COL_t_eval] = t_eval;
    const double now = fh_time_now();
    cost->seconds = now - *cost_mark;
    *cost_mark = now;
    fl_cost_row(row, run->n_rows ? run->rows + (size_t)(run->n_rows - 1) * FL_N_COLUMNS : NULL, cost);
    double *d = run->n_dcols ? run->drows + (size_t)run->n_rows * run->n_dcols : NULL;
    for (int c = 0; c < run->n_dcols; c++) d[c] = isnan(row[FL_COL_test_accuracy]) ? NAN : run->dnow[c];
    memcpy(run->rows + (size_t)run->n_rows++ * FL_N_COLUMNS, row, FL_N_COLUMNS * sizeof *row);
    fl_csv_cells(run->metrics_csv, row, FL_N_COLUMNS, 0);
    fl_csv_cells(run->metrics_csv, d, run->n_dcols, 1);
    const int status = fl_csv_end_row(run->metrics_csv, run->dir, "metrics.csv");
    if (t > run->start_round || run->start_round == s->rounds - 1) {
        L->round_seconds_sum += row[FL_COL_t_round] + t_eval;
        L->rounds_timed++;
    }
    double per = L->rounds_timed ? L->round_seconds_sum / L->rounds_timed : row[FL_COL_t_round] + t_eval;
    fl_progress_line(run, row, per * (s->rounds - 1 - t));
    return status;
}

/* The rounds: plan and broadcast, local training, gather, the server step (rank 0), the round's control
 * broadcast, measures, the metrics row, a checkpoint; a client that left, a divergence or a signal ends them. */
static int run_rounds(FlRun *run, FlLoop *L, int *stopped_by_signal)
{
    const FlSettings *s = &run->s;
    const int64_t bcast_floats = (int64_t)(1 + run->z.server_vectors) * run->n_state;
    const int64_t bcast_bytes = bcast_floats * (int64_t)sizeof(float) + run->z.server_scalars * (int64_t)sizeof(double);
    *stopped_by_signal = 0;
    double cost_mark = fh_time_now(); /* cum_seconds: wall time between rows, checkpoint writes included */
    for (int t = run->start_round; t < s->rounds; t++) {
        double row[FL_N_COLUMNS], times[4];
        for (int c = 0; c < FL_N_COLUMNS; c++) row[c] = NAN;
        FlRoundCost cost = { 0 };
        FlPlanHeader plan = { t, FL_PLAN_RUN, 0, 0, run->lr };
        if (run->comm.rank == 0) plan.n_selected = fl_select_clients(s, run->n_clients, t, L->selected);
        FH_CHECK(fl_bcast(&run->comm, &plan, sizeof plan));
        FH_CHECK(fl_bcast(&run->comm, L->selected, (int64_t)plan.n_selected * (int64_t)sizeof *L->selected));
        fl_store_round(&run->store, L->selected, plan.n_selected, t);
        AlgoServerCtx sctx = server_ctx(run, t, plan.lr, L->selected, plan.n_selected);
        if (L->fold.early)
            FH_CHECK(fl_agree(&run->comm, fl_fold_plan(&L->fold, run, &sctx, L->selected, plan.n_selected)));
        times[0] = fh_time_now();
        FH_CHECK(fl_bcast(&run->comm, run->global, bcast_floats * (int64_t)sizeof(float)));
        if (run->z.server_scalars)
            FH_CHECK(fl_bcast(&run->comm, run->server_scalars, run->z.server_scalars * (int64_t)sizeof(double)));
        times[1] = fh_time_now();
        FH_CHECK(phase_end(run, "broadcast", t));

        int n_mine = 0, status = FH_OK;
        run->work.left = 0;
        L->leave.decided = 0;
        if (run->comm.rank != 0 || run->comm.size == 1) {
            status = train_selected(run, L, plan.n_selected, t, plan.lr, &n_mine);
            if (status != FH_OK) {
                fl_fail_alone(&run->comm, status);
                return status;
            }
        }
        FH_CHECK(phase_end(run, "train", t));
        FH_CHECK(gather_records(run, L, plan.n_selected, n_mine, t));
        times[2] = fh_time_now();
        FH_CHECK(phase_end(run, "gather", t));

        /* the server step: rank 0 alone over gathered uploads, or folded by every rank; a left round has none */
        FlControl ctl = { 0, 0, FL_PLAN_RUN, 0 };
        int diverged = 0;
        if (run->comm.rank == 0 && !L->leave.decided) {
            status = aggregate_begin(run, L, &sctx, plan.n_selected, t, row, &diverged);
            if (status == FH_OK && !diverged && !L->folds)
                status = server_step(run, L, &sctx, plan.n_selected, t, &diverged);
            if (status != FH_OK) {
                fl_fail_alone(&run->comm, status);
                return status;
            }
        }
        if (L->folds) FH_CHECK(fold_round(run, L, &sctx, plan.n_selected, n_mine, t, &diverged));
        if (run->comm.rank == 0 && L->leave.decided) {
            /* the round before is all there is: a checkpoint of it (the clients' slots of then are all kept) */
            ctl.stop = FL_PLAN_STOP_LEFT;
            ctl.checkpoint = L->checkpointed != t;
        } else if (run->comm.rank == 0) {
            status = diverged ? FH_OK : aggregate_end(run, L, plan.n_selected, t, row);
            if (status != FH_OK) {
                fl_fail_alone(&run->comm, status);
                return status;
            }
            times[3] = fh_time_now();
            round_columns(run, L, &plan, times, diverged, bcast_bytes, row);
            fl_cost_add_records(&cost, L->recv, plan.n_selected, L->stride);
            ctl = round_control(s, t, diverged);
        }
        FH_CHECK(fl_bcast(&run->comm, &ctl, sizeof ctl));
        FH_CHECK(phase_end(run, "aggregate", t));
        if (ctl.stop == FL_PLAN_STOP_LEFT) {
            fl_store_round_undo(&run->store);
            FH_CHECK(fl_leave_finish(&L->leave));
            if (ctl.checkpoint) {
                FH_CHECK(fl_checkpoint_save(run, t, run->checkpoint_path));
                L->checkpointed = t;
            }
            *stopped_by_signal = 1;
            if (run->comm.rank == 0) fl_left_round_line(run, t, L->checkpointed);
            return FH_OK;
        }
        if (ctl.stop == FL_PLAN_STOP_DIVERGED) return diverged_error(run, t);
        fl_store_round_end(&run->store);
        run->lr = nn_lr_next(plan.lr, s->lr_decay);

        double t_eval = 0.0;
        FH_CHECK(round_measures(run, t, &ctl, row, &cost, &t_eval));
        if (run->comm.rank == 0) status = metrics_row(run, L, t, row, t_eval, &cost, &cost_mark);
        FH_CHECK(fl_agree(&run->comm, status)); /* metrics.csv written */
        FH_CHECK(phase_end(run, "evaluate", t));
        if (ctl.checkpoint) {
            FH_CHECK(fl_checkpoint_save(run, t + 1, run->checkpoint_path));
            L->checkpointed = t + 1;
        }
        if (ctl.stop == FL_PLAN_STOP_SIGNAL) {
            *stopped_by_signal = 1;
            if (run->comm.rank == 0) {
                char quoted[4 * sizeof run->dir + 3];
                fh_log_info("stopped by %s after round %d of %d; checkpoint written. Resume with: fedhet run "
                            "--resume %s", fh_stop_signal_name(), t + 1, s->rounds, fh_shell_quote(run->dir, quoted, sizeof quoted));
            }
            return FH_OK;
        }
    }
    return FH_OK;
}

/* ---- fl_run ------------------------------------------------------------------------------------------- */

static void run_free(FlRun *run)
{
    fl_store_close(&run->store);
    fl_client_free(&run->work);
    data_partfile_close(&run->data);
    fh_config_free(&run->cfg);
    free(run->config_text);
    fh_free(&run->owner);
    fh_free(&run->owned);
    fh_free(&run->global);
    fh_free(&run->init_state);
    fh_free(&run->server_scalars);
    fh_free(&run->server_private);
    fh_free(&run->server_scratch);
    fh_free(&run->client_sizes);
    fh_free(&run->rows);
    for (int c = 0; c < run->n_dcols && run->dcol_names; c++) fh_free(&run->dcol_names[c]);
    fh_free(&run->dcol_names);
    fh_free(&run->dcol_of_domain);
    fh_free(&run->drows);
    fh_free(&run->dnow);
    fh_free(&run->probe_x);
    fh_free(&run->probe_y);
    fh_free(&run->probe_work);
    fl_hessian_free(run);
    fl_eval_free(&run->eval);
    fl_checkpoint_free(run);
    fh_free(&run->client_rows);
    if (run->metrics_csv) fclose(run->metrics_csv);
    if (run->clients_csv) fclose(run->clients_csv);
    fh_log_set_file(NULL);
    if (run->log) fclose(run->log);
    fh_lock_release(&run->lock); /* last: every file of the run is closed */
    memset(run, 0, sizeof *run);
    run->lock.fd = -1;
}

/* the clients' persistent state (src/fl/store.c); fresh: a new or restarted run */
static int store_open(FlRun *run, int fresh)
{
    return fl_store_open(&run->store, &run->comm, run->dir, run->n_clients, run->work.block - 1, run->layout_hash,
                         fl_max_selected(&run->s, run->n_clients), fresh);
}

static int run_setup(FlRun *run, const FlRunOptions *opt, const char *config_path)
{
    const FlSettings *s = &run->s;
    const int rank = run->comm.rank;
    int status = rank == 0 ? prepare_rank0(run, opt, config_path) : FH_OK;
    FH_CHECK(fl_agree(&run->comm, status));
    FH_CHECK(fl_bcast(&run->comm, run->dir, sizeof run->dir));
    FH_CHECK(fl_bcast(&run->comm, run->checkpoint_path, sizeof run->checkpoint_path));
    FH_CHECK(fl_bcast(&run->comm, &run->restart, sizeof run->restart));
    status = rank == 0 ? data_partfile_open(&run->data, s->data_path) : FH_OK;
    FH_CHECK(fl_agree(&run->comm, status));
    if (rank != 0) FH_CHECK(fl_agree(&run->comm, data_partfile_open(&run->data, s->data_path)));
    else FH_CHECK(fl_agree(&run->comm, FH_OK));
    if (s->normalise) FH_CHECK(data_normalise_set(&run->data, s->normalise));
    run->n_clients = run->data.n_clients;
    FH_CHECK(fh_calloc(&run->client_sizes, (size_t)run->n_clients, sizeof *run->client_sizes, "client sizes"));
    for (int k = 0; k < run->n_clients; k++) run->client_sizes[k] = run->data.offsets[k + 1] - run->data.offsets[k];
    if (run->comm.size > 1 && run->comm.size - 1 > run->n_clients)
        FH_FAIL(FH_ERR_USAGE, "%d ranks for %d clients: at most clients + 1 = %d ranks (rank 0 is the server)",
                run->comm.size, run->n_clients, run->n_clients + 1);
    FH_CHECK(assign_clients(run));
    nn_set_threads(s->threads);
    char why[512];
    if (rank <= 1 && nn_threads_problem(s->threads, why, sizeof why)) fh_log_warn("%s", why);
    FH_CHECK(fl_agree(&run->comm, fl_client_init(&run->work, s, &run->data, run->owned, run->n_owned)));
    NnModel *m = &run->work.model;
    run->n_state = m->n_state;
    run->n_params = m->n_params;
    run->layout_hash = fl_layout_hash(m);
    run->z = run->work.ops.sizes;
    fl_record_layout(&run->layout, &run->z, run->n_state);
    if (run->data.n_test > 0)
        FH_CHECK(fl_agree(&run->comm, fl_eval_init(&run->eval, &run->comm, &run->data, s->eval_batch)));
    if (s->sharpness_every > 0) FH_CHECK(fl_agree(&run->comm, rank == 0 ? sharpness_init(run) : FH_OK));
    if (s->hessian_every > 0) FH_CHECK(fl_agree(&run->comm, fl_hessian_init(run)));
    FH_CHECK(fh_alloc_aligned(&run->global, (size_t)(1 + run->z.server_vectors) * run->n_state * sizeof(float),
                              "global state"));
    run->server_vecs = run->global + run->n_state;
    memset(run->global, 0, (size_t)(1 + run->z.server_vectors) * run->n_state * sizeof(float));
    FH_CHECK(fh_calloc(&run->server_scalars, (size_t)(run->z.server_scalars + 1), sizeof(double), "server scalars"));
    if (rank == 0 && run->z.server_private > 0) {
        FH_CHECK(fh_alloc_aligned(&run->server_private, (size_t)run->z.server_private * run->n_state * sizeof(float),
                                  "server vectors"));
        memset(run->server_private, 0, (size_t)run->z.server_private * run->n_state * sizeof(float));
    }
    if (rank == 0 && run->z.server_scratch > 0)
        FH_CHECK(fh_alloc_aligned(&run->server_scratch, run->z.server_scratch, "method server scratch"));
    FH_CHECK(fh_calloc(&run->rows, (size_t)s->rounds, FL_N_COLUMNS * sizeof(double), "metrics rows"));
    FH_CHECK(fl_client_columns(run));
    if (rank == 0) FH_CHECK(fl_domain_columns(run));
    FH_CHECK(fl_agree(&run->comm, rank == 0 ? fl_checkpoint_init(run) : FH_OK));
    run->lr = s->lr;
    run->write_final = 1;
    const int resuming = opt->resume_dir && !run->restart;
    if (resuming) {
        FH_CHECK(store_open(run, 0));
        FH_CHECK(fl_checkpoint_load(run));
        if (rank == 0 && run->start_round >= s->rounds) {
            /* a kill after the last checkpoint but before run.h5 was renamed into place */
            run->write_final = !fl_final_model_current(run->dir);
            if (run->write_final)
                fh_log_info("%s: all %d rounds are done but run.h5 is missing, damaged or older than checkpoint.h5: "
                            "writing it from the final checkpoint", run->dir, s->rounds);
            else fh_log_info("%s: all %d rounds are done (raise fl.rounds to continue)", run->dir, s->rounds);
        }
        FH_CHECK(fl_bcast(&run->comm, &run->write_final, sizeof run->write_final));
    } else {
        nn_model_init_params(m, (uint64_t)s->seed);
        if (fl_init_kind(s) != FL_INIT_RANDOM) {
            if (rank == 0) nn_vec_copy(m->state, run->init_state, run->n_state);
            FH_CHECK(fl_bcast(&run->comm, m->state, run->n_state * (int64_t)sizeof(float)));
            fh_free(&run->init_state);
        }
        nn_vec_copy(run->global, m->state, run->n_state);
        status = FH_OK;
        if (rank == 0) {
            AlgoServerCtx sctx = server_ctx(run, 0, run->lr, NULL, 0);
            status = run->work.ops.server_init(&sctx, run->global);
        }
        FH_CHECK(fl_agree(&run->comm, status));
    }
    status = rank == 0 ? fl_reserve_client_rows(run) : FH_OK;
    FH_CHECK(fl_agree(&run->comm, status));
    status = rank == 0 ? fl_open_outputs(run, opt) : FH_OK;
    FH_CHECK(fl_agree(&run->comm, status));
    if (!resuming) FH_CHECK(store_open(run, 1)); /* the run folder exists from here */
    if (rank == 0) fl_print_budget(run);
    FH_CHECK(phase_end(run, "setup", run->start_round));
    return FH_OK;
}

static void remove_empty_run_folder_cb(void *run) { fl_remove_empty_run_folder(run); }

int fl_run(const FlRunOptions *opt, MPI_Comm comm)
{
    FlRun run;
    memset(&run, 0, sizeof run);
    run.lock.fd = -1;
    run.store.fd = -1;
    int status = fl_comm_init(&run.comm, comm);
    if (status != FH_OK) return status;
    if (run.comm.rank == 0) fl_before_abort(remove_empty_run_folder_cb, &run);
    fh_log_set_rank(run.comm.size > 1 ? run.comm.rank : -1);
    fl_watch_errors(&run.comm);

    const char *config_path = NULL;
    /* every rank loads the same config and so fails the same way: only rank 0 prints */
    status = load_config(&run, opt, &config_path);
    if (status == FH_OK) {
        const char *lv = run.s.log_level;
        fh_log_set_level(!strcmp(lv, "quiet") ? FH_LOG_QUIET : !strcmp(lv, "warn") ? FH_LOG_WARN
                         : !strcmp(lv, "debug") ? FH_LOG_DEBUG : FH_LOG_INFO);
        if (run.comm.rank != 0 && fh_log_level() > FH_LOG_WARN) fh_log_set_level(FH_LOG_WARN);
        status = run_setup(&run, opt, config_path);
    }
    FlLoop loop;
    memset(&loop, 0, sizeof loop);
    int stopped = 0;
    if (status == FH_OK) status = fl_agree(&run.comm, loop_init(&run, &loop));
    if (status == FH_OK) status = run_rounds(&run, &loop, &stopped);
    if (status == FH_OK && !stopped && run.write_final) {
        char path[4300];
        snprintf(path, sizeof path, "%s/run.h5", run.dir);
        status = fl_checkpoint_save(&run, run.s.rounds, path);
        if (status == FH_OK && run.comm.rank == 0) {
            const double *last = run.rows + (size_t)(run.n_rows - 1) * FL_N_COLUMNS;
            fh_log_info("done: %d rounds, final test accuracy %.4f; outputs in %s", run.s.rounds,
                        last[FL_COL_test_accuracy], run.dir);
        }
    }
    if (status == FH_OK) status = fl_peak_memory_line(&run);
    if (status != FH_OK && run.comm.rank == 0 && run.log) {
        /* the error also belongs in the run's log */
        fprintf(run.log, "error: %s\n", fh_error_message());
        fflush(run.log);
    }
    if (status != FH_OK && run.comm.rank == 0) fl_remove_empty_run_folder(&run);
    if (opt->stopped) *opt->stopped = status == FH_OK && stopped;
    fl_before_abort(NULL, NULL);
    fl_watch_errors(NULL);
    loop_free(&loop);
    run_free(&run);
    return status;
}
