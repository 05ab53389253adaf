/* Internal interfaces of the fl module (src/fl): settings, MPI protocol, client training, evaluation,
 * outputs and checkpoints. */
#ifndef FEDHET_FL_INTERNAL_H
#define FEDHET_FL_INTERNAL_H

#include <mpi.h>
#include <stdint.h>

#include "fedhet/algo.h"
#include "fedhet/config.h"
#include "fedhet/core.h"
#include "fedhet/data.h"
#include "fedhet/fl.h"
#include "fedhet/h5io.h"
#include "fedhet/nn.h"
#include "eval_metrics.h"

/* The resolved config, typed (src/fl/settings.c). */
typedef struct {
    const char *data_path, *data_source;
    DataPartitionKeys part; /* [data] partition keys: how path is made from source */
    const char *source_options, *normalise, *augment; /* [data] image source keys, normalisation, augmentation */
    DataCropParams crop;
    int eval_batch;
    const char *model, *norm;
    int groups;
    const char *init; /* [model] init: HDF5 file of named tensors to start from, "random", "onnx" or "" (fl_init_kind) */
    const char *onnx, *features; /* [model] onnx (the graph, read into net) and features ("": defaults) */
    struct OnnxNet *net;
    const char *optimizer;
    double lr, momentum, weight_decay, clip, lr_decay, beta1, beta2, eps;
    int epochs, batch_size;
    int64_t steps;
    int threads;
    const char *backend; /* [train] backend of the conv layers: blas | onednn (NnZooOptions.backend) */
    double logit_adjust;
    int rounds;
    const char *selection;
    double fraction;
    int count, eval_every, checkpoint_every;
    double term_grace; /* seconds a round may run on after a stop request */
    int sharpness_every, sharpness_probe; /* metrics.csv sharpness / perturbed_loss (docs/methods/sam.md §12) */
    double sharpness_rho;
    int hessian_every, hessian_iters, hessian_samples; /* metrics.csv hessian_max_eig / hessian_trace */
    double hessian_tol, hessian_step;
    int64_t seed;
    const AlgoMethod *method;
    AlgoOptionBlock options;  /* the method's [algo] keys (views: fl_method_options) */
    const AlgoMethod *plugin; /* NULL, or a method added on top ([algo] plugin) */
    AlgoOptionBlock plugin_options;
    const char *out_dir, *name, *log_level;
} FlSettings;

int fl_settings_from_config(FlSettings *s, const FhConfig *cfg, const char *config_path);
/* what the method's hooks and the plug-in's see of their keys (views into s, which must not move) */
static inline AlgoOptions fl_method_options(const FlSettings *s) { return algo_options_view(s->method, &s->options); }
static inline AlgoOptions fl_plugin_options(const FlSettings *s) { return algo_options_view(s->plugin,
                                                                                            &s->plugin_options); }
/* Loads a run config: [algo] method first, then the method's own keys (others' keys are an error). saved: the
 * config fedhet wrote into a run folder, whose renamed keys are read under their new names. */
int fl_config_load(FhConfig **out, const char *path, int saved, char *const *overrides, int n_overrides);
/* The same from the text of a saved config (config.ini, a checkpoint's /meta config); source names it in messages */
int fl_config_load_saved(FhConfig **out, const char *text, const char *source, char *const *overrides, int n_overrides);
/* A config text fedhet saved (config.ini, a checkpoint's /meta config) with keys renamed since (a key's .was) under
 * their new names, into *out (free() it). */
int fl_config_text_upgrade(const char *text, char **out);

/* ---- protocol (src/fl/comm.c) ---- */
typedef struct {
    MPI_Comm comm;
    int rank, size;
    int n_client_ranks;   /* size - 1, or 1 when size == 1 (rank 0 trains) */
} FlComm;
/* Rank that trains clients: rank 0 alone, else 1..size-1 */
int fl_comm_init(FlComm *c, MPI_Comm comm);
/* fn(arg) runs once in this process just before fl's MPI_Abort (NULL: nothing) */
void fl_before_abort(void (*fn)(void *arg), void *arg);
/* fl_wait without sleeping, for a collective every rank is in (the fold's reductions): a nonblocking collective
 * advances only inside MPI calls */
int fl_wait_busy(MPI_Request *req);
/* A broadcast from rank 0 that waits politely (fl_wait) */
int fl_bcast(FlComm *c, void *buf, int64_t bytes);
/* Every rank's status -> the largest (same on all ranks); on failure rank 0 also gets the message of the
 * lowest rank that failed with it ("rank R: ..."), which it prints. */
int fl_agree(FlComm *c, int status);
/* A rank failing alone (the others cannot know): a client rank sends its message to rank 0, which prints
 * it and ends the job (MPI_Abort); a single process just prints it. */
void fl_fail_alone(FlComm *c, int status);
/* Rank 0 of a run (c) or none (NULL): while set, rank 0's waits act on the client ranks' error notes. */
void fl_watch_errors(FlComm *c);

/* Leaving a round that would outlast [fl] term_grace after a stop request (SIGTERM): rank 0 alone decides,
 * once the request is `grace` seconds old and the gather is not complete, and sends every client rank one
 * note; a rank that trains polls for it between local steps, finishes its step and joins the gather at
 * once. Every rank reaches the gather and the control broadcast after it, so no rank can wait forever. */
typedef struct {
    FlComm *comm;
    double grace, seen; /* seen: when rank 0 first saw the request (-1: not yet) */
    int decided;        /* this round is left (rank 0: notes sent; a client rank: its note read) */
    int32_t round;
    MPI_Request *sends; /* rank 0: one per client rank */
} FlLeave;
int fl_leave_init(FlLeave *l, FlComm *c, double grace);
void fl_leave_free(FlLeave *l);
/* between local steps on a rank that trains (the argument is the FlLeave): 1 when the round is left */
int fl_leave_poll(void *leave);
/* rank 0 of several ranks: waits for the gather of round `round`, deciding on the way */
int fl_leave_wait_gather(FlLeave *l, MPI_Request *req, int round);
/* after the control broadcast said the round is left: client ranks read their note if they have not */
int fl_leave_finish(FlLeave *l);

/* The protocol's point-to-point tags: a client rank's error note to rank 0 (fl_fail_alone), rank 0's request to
 * leave the round, and the client state blocks of a version-3 checkpoint on their way into the store, sent one
 * client at a time (in order, so one tag serves every client) */
enum { FL_TAG_ERROR = 7701, FL_TAG_LEAVE = 7702, FL_TAG_CLIENT_STATE = 7703 };

/* ---- round plan ---- */
enum { FL_PLAN_RUN = 0, FL_PLAN_STOP_SIGNAL = 1, FL_PLAN_STOP_DIVERGED = 2, FL_PLAN_STOP_LEFT = 3 };
typedef struct {
    int32_t round, action, n_selected, eval;
    double lr;
} FlPlanHeader;

/* Folding (docs/architecture.md "Aggregation"): elements of the state (or of a summed vector) folded and reduced at
 * once; a rank holds the partial sums of two such chunks, one reduced while the next is folded. */
#define FL_FOLD_CHUNK ((int64_t)1 << 17)
#define FL_FOLD_BYTES (2 * NN_SUM_BINS * (int64_t)sizeof(double) * FL_FOLD_CHUNK)
#define FL_FOLD_CACHED (8 * NN_SUM_BLOCK) /* elements whose bins (128 KiB) stay in cache while every record adds */
#define FL_FOLD_BATCH_MAX 16              /* early folding: records folded together, at most */


/* ---- upload records: {header, scalars, vectors}, fixed size per method ---- */
typedef struct {
    int64_t client, n_samples, n_steps, nonfinite;
    double train_loss, seconds;
    /* per-sample passes of the round, counted by the model instances: the local steps (train_*), and the
     * client's scoring and probe passes outside them (score_*: whole-set passes, probe gradients, hooks) */
    int64_t train_forward, train_backward, score_forward, score_backward;
    double drift2_params, drift2_buffers; /* ||w_k - w^t||^2 over the parameters and over the buffers */
} FlRecordHeader;

typedef struct {
    size_t header_bytes; /* header + scalars, rounded up to 64 */
    size_t bytes;        /* header_bytes + (1 + n_upload_vectors) * n_state * 4, rounded up to 8 */
    int n_scalars, n_vectors;
    int64_t n_state;
} FlRecordLayout;

void fl_record_layout(FlRecordLayout *l, const AlgoSizes *z, int64_t n_state);
static inline FlRecordHeader *fl_record_header(void *rec) { return (FlRecordHeader *)rec; }
static inline double *fl_record_scalars(void *rec) { return (double *)((char *)rec + sizeof(FlRecordHeader)); }
static inline float *fl_record_state(void *rec, const FlRecordLayout *l) { return (float *)((char *)rec + l->header_bytes); }

/* ---- client side (src/fl/client.c) ---- */
typedef struct {
    const FlSettings *s;
    AlgoSetup setup;
    AlgoOps ops;     /* the method composed with its plug-in (algo_ops_compose): all the loops call */
    NnModel model;
    NnModel aux[ALGO_MAX_AUX];
    DataLoader loader;
    DataPartFile *data;
    float *x;        /* [batch, c, h, w] */
    int32_t *y;
    float *dlogits;  /* [batch, classes] */
    float *dfeatures; /* [batch, feature_size], methods with a batch term */
    float *logit_adjust; /* [classes], train.logit_adjust > 0 */
    float *sample_w;     /* [batch], methods or plug-ins with sample weights */
    int64_t weighed_step; /* the step whose sample weights sample_w holds (-1: none yet this round) */
    DataBatchIter probe_it; /* AlgoClientServices.probe_grad: the extra shuffle, open during report->begin only */
    int probe_open, probe_loaded; /* probe_loaded: the probe batch in x, y (-1: none) */
    int64_t probe_rows;
    int64_t service_forward, service_backward; /* passes made by for_each_local_batch and probe_grad */
    void *scratch;   /* [z.client_scratch] bytes: the hooks' scratch (algo_ops_client_scratch) */
    int sgd_on;      /* train.optimizer = sgd (else adam or adamw) */
    NnSgd sgd;
    NnAdam adam;
    float *work;     /* [z.work_vectors * n_state] */
    AlgoClientServices svc; /* what the hooks call back: the local loop's services, the optimiser picked at init */
    AlgoClientRound round;  /* the client being trained: its round view */
    AlgoClientCtx ctx;
    int n_owned;
    /* the persistent state of the client being trained (fl_store_load): z.client_vectors * n_state floats, then
     * z.client_floats, then a has-state flag (1.0 once the client has trained) */
    float *client_state;
    int64_t block;
    /* polled between local steps (NULL: never); when it returns 1 the client's training ends there and
     * `left` is set: the record is incomplete and the round is not to be used */
    int (*leave_poll)(void *arg);
    void *leave_arg;
    int left;
} FlClientWork;

/* ---- per-client state out of core (src/fl/store.c): the run folder's client-state.bin ---- */
typedef struct {
    int64_t slot;   /* -1: the client has no state yet */
    int64_t round;  /* the round (from 0) that wrote it */
} FlStoreEntry;
typedef struct {
    int32_t client;
    FlStoreEntry before; /* the client's entry before this round */
} FlStoreJournal;
typedef struct {
    int fd;                   /* -1: no file (a method without per-client floats keeps the table only) */
    char path[4200];
    int n_clients;
    int64_t slot_floats, slot_bytes;
    uint64_t layout_hash;
    FlStoreEntry *now, *saved; /* [K]: every rank's copy of the table, and the table of the last checkpoint */
    int32_t *moved;            /* clients whose entry differs from the checkpoint's */
    int n_moved;
    FlStoreJournal *journal;  /* [m_max]: this round's clients by selection slot */
    int n_journal;
    uint64_t *used;           /* bitmap of the slots in use */
    int64_t n_words, hint;
    int dirty;                /* written since the last sync */
} FlStore;
/* Collective. fresh: a new run (the file is made anew); else the file is opened (made if missing: a checkpoint of
 * an older format) and its header checked. slot_floats = 0: no file. */
int fl_store_open(FlStore *st, FlComm *c, const char *dir, int n_clients, int64_t slot_floats, uint64_t layout_hash,
                  int m_max, int fresh);
void fl_store_close(FlStore *st);
/* every rank, after the plan: each selected client gets a new slot; round_end frees what nothing refers to any more,
 * round_undo (a left round) returns the table to where it was */
void fl_store_round(FlStore *st, const int32_t *selected, int n, int round);
void fl_store_round_end(FlStore *st);
void fl_store_round_undo(FlStore *st);
/* the owner: the persistent block (slot_floats, then the has-state flag) of the client of selection slot i as the
 * round found it; a client's state into the slot its entry names now (after fl_store_round: its new one) */
int fl_store_load(FlStore *st, int slot_in_round, float *block);
int fl_store_put(FlStore *st, int client, const float *block);
/* checkpoints: what a rank wrote reaches the disk before a checkpoint refers to it; once committed, the slots it
 * superseded are free */
int fl_store_sync(FlStore *st);
void fl_store_committed(FlStore *st);
/* a checkpoint's table: checked against the file (rank 0), installed (every rank) */
int fl_store_check_table(const FlStore *st, const FlStoreEntry *table, int n_clients, const char *source);
void fl_store_set_table(FlStore *st, const FlStoreEntry *table);
/* fl_checkpoint_inspect's file: every client's state in [K, n] datasets (vectors of n_state, then the rest of
 * slot_floats, then has_state), read by the checkpoint's table from the store beside it */
int fl_store_export(const char *ckpt_path, const FlStoreEntry *table, int K, int64_t slot_floats, int64_t vectors,
                    int64_t n_state, const char *out_path);

/* clients per round when fixed by the selection rule; -1 for bernoulli */
int fl_clients_per_round(const FlSettings *s, int K);
/* What the method sees of the config; m may be NULL before the model exists (sizes then 0). */
void fl_algo_setup(AlgoSetup *a, const FlSettings *s, const NnModel *m, int K, int classes);
/* The run's model for data of that shape, classes and clients (src/fl/run_model.c): its [model] keys, [train] backend
 * and what the method adds (MOON's projection head); max_batch as nn_zoo_build's. */
int fl_model_build(NnModel *m, const FlSettings *s, NnShape shape, int classes, int n_clients, int max_batch);
/* where the first global model comes from: fedhet's initialisation, an HDF5 file ([model] init) or the ONNX
 * file's initializers */
enum { FL_INIT_RANDOM = 0, FL_INIT_FILE, FL_INIT_ONNX };
int fl_init_kind(const FlSettings *s);
int fl_client_init(FlClientWork *w, const FlSettings *s, DataPartFile *f, const int *owned, int n_owned);
void fl_client_free(FlClientWork *w);
/* Trains `client` from global for the round; writes the record (header, scalars, final state).
 * slot_in_round: the client's position in the round's selection. */
int fl_client_train(FlClientWork *w, const FlRecordLayout *l, const float *global, const float *server_vecs,
                    const double *server_scalars, int client, int slot_in_round, int round, double lr, void *record);

/* ---- evaluation (src/fl/eval.c) ---- */
/* The evaluation's buffers, made at setup for the data file's test set (the corrupted copy has the same
 * rows), so that evaluating allocates nothing. */
typedef struct {
    int eval_batch;
    int64_t mine;            /* test rows this rank evaluates */
    float *x;                /* [eval_batch, c, h, w] */
    int32_t *y;              /* [eval_batch] */
    uint8_t *scratch;        /* [eval_batch, c, h, w] as stored */
    float *logits;           /* [mine, classes] */
    float *lut;              /* [c * 256] normalisation table */
    /* rank 0 */
    int *counts, *displs;    /* [ranks]: the gather of the logits */
    float *all, *ordered;    /* [n_test, classes]: gathered in rank order, then in sample order */
    int32_t *labels;         /* [n_test] */
    FlEvalMetricsWork metrics;
} FlEval;
int fl_eval_init(FlEval *e, const FlComm *c, const DataPartFile *f, int eval_batch);
/* the bytes fl_eval_init allocates on rank `rank` of `size` (0 without a test set) */
int64_t fl_eval_bytes(const DataPartFile *f, int eval_batch, int rank, int size);
void fl_eval_free(FlEval *e);
/* Every rank evaluates a share of the fixed-size test batches (batch b on rank b mod size) of model m;
 * rank 0 gathers the logits in sample order and computes the metrics, so results do not depend on the
 * number of ranks. Collective. */
int fl_evaluate(FlComm *c, FlEval *e, NnModel *m, DataPartFile *f, DataRowGroup group, FlEvalMetrics *out);

/* ---- one run (src/fl/run.c; its outputs: run_outputs.h) ---- */
/* metrics.csv columns (docs/methods/metrics.md C.11), one double each; FL_METRIC_COLUMNS names them in order */
#define FL_METRIC_COLUMNS                                                                                 \
    X(round) X(lr) X(n_selected) X(selected_hash) X(t_broadcast) X(t_train) X(t_gather) X(t_aggregate)     \
    X(t_eval) X(t_round) X(t_client_mean) X(t_client_max) X(test_accuracy) X(test_loss)                    \
    X(test_balanced_accuracy) X(test_auc_ovr_macro) X(test_auc_ovr_weighted) X(test_auc_ovo_macro)          \
    X(test_f1_macro) X(corrupted_accuracy) X(corrupted_loss) X(corrupted_balanced_accuracy)                 \
    X(corrupted_auc_ovo_macro) X(train_loss) X(drift) X(drift_full) X(divergence) X(bytes_down) X(bytes_up)       \
    X(client_auc_std) X(client_bacc_std)                                                                    \
    X(perturb_norm) X(grad_norm) X(sharpness) X(perturbed_loss) X(method_scalar) X(rho)                    \
    X(hessian_max_eig) X(hessian_trace)                                                                     \
    X(cum_train_forward) X(cum_train_backward) X(cum_score_forward) X(cum_score_backward) X(cum_eval_forward)    \
    X(cum_eval_backward) X(cum_bytes_down) X(cum_bytes_up) X(cum_seconds)
#define X(name) FL_COL_##name,
enum { FL_METRIC_COLUMNS FL_N_COLUMNS };
#undef X
extern const char *const fl_column_names[FL_N_COLUMNS];

/* clients.csv columns */
enum { FL_CCOL_ROUND, FL_CCOL_CLIENT, FL_CCOL_SAMPLES, FL_CCOL_STEPS, FL_CCOL_LOSS, FL_CCOL_WEIGHT, FL_CCOL_SECONDS,
       FL_N_CCOLUMNS };
extern const char *const fl_client_column_names[FL_N_CCOLUMNS];
#define FL_MAX_CCOLUMNS (FL_N_CCOLUMNS + ALGO_MAX_NAMED) /* with the method's own (ALGO_SHOW_CLIENT) */

typedef struct {
    FlComm comm;
    FhConfig *cfg;
    FlSettings s;
    char *config_text;        /* resolved */
    char dir[4096];           /* run folder */
    char checkpoint_path[4200];
    DataPartFile data;
    int n_clients;
    int *owner;               /* [K] rank that trains client k */
    int *owned;               /* this rank's clients, ascending */
    int n_owned;
    FlClientWork work;
    FlStore store;            /* the clients' persistent state (every rank: the table; owners: their slots) */
    FlRecordLayout layout;
    int64_t n_state, n_params;
    uint64_t layout_hash;
    float *global;            /* [n_state + n_server_vectors * n_state]: what is broadcast */
    float *server_vecs;       /* view into global after the state */
    double *server_scalars;   /* [z.server_scalars], broadcast every round */
    float *server_private;    /* rank 0: [z.server_private * n_state] */
    void *server_scratch;     /* rank 0: [z.server_scratch] bytes, the server hooks' scratch (algo_ops_server_scratch) */
    AlgoSizes z;              /* the method's sizes for this run */
    int64_t *client_sizes;    /* [K] n_k */
    int start_round;          /* first round to run (after a resume) */
    int restart;              /* --resume of a folder without a checkpoint: the run starts again */
    int write_final;          /* run.h5 is written at the end (not when a resumed run's is current) */
    int made_folder;          /* rank 0: this run made (or restarted) its folder */
    FhLock lock;              /* rank 0: the run folder's .lock, held for the whole run */
    double lr;                /* lr of the next round */
    /* rank 0 */
    double *rows;             /* [rounds * FL_N_COLUMNS] */
    int n_rows;
    /* metrics.csv's per-domain test accuracy, after the fixed columns, when the test set holds rows of two
     * or more domains (a partition with natural groups): "test_accuracy_<domain>" */
    int n_dcols;
    char **dcol_names;        /* [n_dcols] */
    int *dcol_of_domain;      /* [data.n_domains] column, or -1 for a domain without test rows */
    double *drows;            /* [rounds * n_dcols] */
    double *dnow;             /* [n_dcols] the last evaluation's */
    double *client_rows;      /* [cap_client_rows * n_ccols] */
    int n_ccols;              /* clients.csv columns: the fixed ones, then the method's */
    const char *ccol_names[FL_MAX_CCOLUMNS];
    int ccol_scalar[FL_MAX_CCOLUMNS]; /* the upload scalar of each of the method's and the plug-in's columns */
    /* metrics.csv columns that are the mean of a named upload scalar (ALGO_SHOW_MEAN): column and scalar */
    int n_mean_cols, mean_col[ALGO_MAX_NAMED], mean_scalar[ALGO_MAX_NAMED];
    int64_t n_client_rows, cap_client_rows;
    FILE *metrics_csv, *clients_csv, *log;
    float *probe_x, *probe_work; /* the probe set [n_probe rows] (fl.sharpness_every, fl.hessian_every) and the
                                  * sharpness scratch (rank 0) */
    int32_t *probe_y;
    int64_t n_probe;
    float *init_state;        /* rank 0, [n_state]: [model] init, read before the run folder exists */
    struct FlHessian *hessian;   /* fl.hessian_every: its buffers */
    FlEval eval;              /* a data file with a test set */
    char *tensor_names;       /* rank 0, for the checkpoints: the /model tensor names */
} FlRun;

/* The folded server step (src/fl/fold.c): segments average, the method's sums, D = sum_i (w_i - w^t) */
typedef struct {
    int early;                /* coefficients from the plan: records folded as they are made, none kept */
    int n_sums, n_segments;   /* the method's sums; 2 + n_sums */
    int64_t offset[ALGO_MAX_SUMS + 2], total; /* each segment's first element in the whole-length sums */
    double *coef;             /* [(1 + n_sums) * m_max + 1]: each slot's coefficients, segment after segment; then
                               * the round's go (1: fold, 0: left or diverged) */
    double *chunks;           /* two chunks of partial sums being reduced (FL_FOLD_BYTES) */
    double *acc;              /* early, on a training rank: the round's whole-length partial sums */
    char *batch;              /* early, on a training rank: records trained but not yet folded, folded together a
                               * cache block at a time so that acc streams through memory once per batch */
    int *batch_slot;          /* their selection slots */
    int batch_n, batch_cap;
    AlgoUpload *plan;         /* early: the selected clients as the plan knows them (id, size) */
    double *plan_weights;
} FlFold;
int fl_fold_init(FlFold *f, const FlRun *run, int m_max, int held_records);
void fl_fold_free(FlFold *f);
/* every rank, after the plan: early, the round's coefficients from the plan, and the partial sums emptied */
int fl_fold_plan(FlFold *f, FlRun *run, AlgoServerCtx *sctx, const int32_t *selected, int n_selected);
/* a training rank, early: where the next client's record is trained; then fl_fold_record takes it (selection slot
 * `slot`) into the batch, which is folded into the partial sums when full and by fl_fold_flush */
void *fl_fold_next_record(const FlFold *f, const FlRun *run);
void fl_fold_record(FlFold *f, const FlRun *run, int slot, int n_selected);
void fl_fold_flush(FlFold *f, const FlRun *run, int n_selected);
/* rank 0, after the weights: the coefficients to broadcast (held), or a check that the uploads match the plan's */
int fl_fold_coefficients(FlFold *f, FlRun *run, AlgoServerCtx *sctx, const AlgoUpload *u, int m, const double *p);
/* every rank: the round's sums reduced at rank 0 into out[segment] and D into delta [n_params], in double (held:
 * from the n_records records at `records`, record r of selection slot record_slot[r]) */
int fl_fold_reduce(FlFold *f, FlRun *run, const char *records, const int *record_slot, int n_records, int n_selected,
                   float *const *out, double *delta);
/* rank 0, gathered uploads: D into out [n_params] in double, the bits the fold gives */
void fl_fold_delta_gathered(const FlRun *run, const AlgoUpload *u, int m, double *out);
/* sum_i ||w_i - w^{t+1}||^2 over the parameters from sum_i ||w_i - w^t||^2, D and w^{t+1} (run->global: w^t) */
double fl_divergence_sum(const FlRun *run, double drift2_sum, int m, const double *delta_sum, const float *next);

/* The clients of round `round` (ids ascending), their count; the most any round selects (src/fl/select.c) */
int fl_select_clients(const FlSettings *s, int K, int round, int32_t *ids);
int fl_max_selected(const FlSettings *s, int K);
int64_t fl_select_room(const FlSettings *s, int K); /* entries of fl_select_clients' ids buffer */

/* ---- the probe set and the Hessian columns (src/fl/hessian.c) ---- */
typedef struct FlHessian FlHessian;
/* run->probe_x, probe_y, n_probe: the first fl.sharpness_probe rows of every client in proportion to its
 * size, normalised, not augmented; read once (any rank may call it) */
int fl_probe_load(FlRun *run);
/* Collective, at setup with fl.hessian_every: the estimate's buffers, the model's activation patterns and
 * the probe set */
int fl_hessian_init(FlRun *run);
/* Collective: hessian_max_eig and hessian_trace of the global state into row (rank 0), cost in the log */
int fl_hessian(FlRun *run, int round, double *row);
void fl_hessian_free(FlRun *run);

/* ---- compute accounting (src/fl/accounting.c): metrics.csv cum_* columns ---- */
typedef struct {
    int64_t train_forward, train_backward, score_forward, score_backward; /* clients' per-sample passes */
    int64_t eval_forward, eval_backward; /* evaluation and the server's sharpness probe, all ranks */
    double seconds;                      /* wall seconds since the previous row */
} FlRoundCost;
/* Rank 0: adds the passes of n gathered upload records. */
void fl_cost_add_records(FlRoundCost *cost, const char *records, int n, size_t record_bytes);
/* Collective: every rank's passes of m since (forward0, backward0), summed onto rank 0's eval_* */
int fl_cost_reduce_passes(FlComm *comm, const NnModel *m, int64_t forward0, int64_t backward0, FlRoundCost *cost);
/* The cum_* columns of row: prev's (NULL for a run's first round) plus the round's cost and row's bytes. */
void fl_cost_row(double *row, const double *prev, const FlRoundCost *cost);

/* ---- checkpoints (src/fl/checkpoint.c): collective over the run's communicator ---- */
/* Rank 0 at setup (the model known): what fl_checkpoint_save needs, so that writing a checkpoint allocates nothing;
 * fl_checkpoint_free releases it. */
int fl_checkpoint_init(FlRun *run);
void fl_checkpoint_free(FlRun *run);
/* Writes PATH atomically: rounds done, lr, global state, server vectors and scalars, where each client's persistent
 * state lies in the store (synced first on every rank), metrics rows, config text, layout hash; then frees the slots
 * only the previous checkpoint referred to. */
int fl_checkpoint_save(FlRun *run, int rounds_done, const char *path);
/* Reads the checkpoint of run->dir into run (rank 0 reads; state is broadcast or sent to owners).
 * A damaged file is FH_ERR_IO and nothing is changed on disk. */
int fl_checkpoint_load(FlRun *run);
uint64_t fl_layout_hash(const NnModel *m);

/* Fault injection for the tests (src/fl/inject.c): rank `rank` passes point `point` of round `round` (0-based);
 * a kill asked for there raises SIGKILL, a failure asked for there is returned as the error. */
int fl_fault_point(const char *point, int rank, int round);

/* ---- the model as named tensors (src/fl/model_tensors.c) ----
 * /model/<view name> in PyTorch's shapes (conv [out, in/groups, kh, kw], linear [out, in], norm [C]),
 * plus a scalar <bn>.num_batches_tracked per BatchNorm, as torch's state_dict has it. The flat state
 * (/server/global) stays the source of truth; these are a copy beside it. */
int fl_model_tensors_write(const FhH5File *f, const NnModel *m, const FlSettings *s, const char *names,
                           const float *state);
/* The /model attribute `tensors` of model m: its tensor names in state_dict order, comma-separated
 * (malloc'd), made once so that writing a checkpoint allocates nothing. */
int fl_model_tensor_names(const NnModel *m, char **names_out);
/* Reads the /model tensors of `path` into *state_out (n_state floats, fh_alloc_aligned: release with
 * fh_free) for model s->model on shape/classes. Every missing, extra, misshapen or non-finite tensor is
 * listed in one FH_ERR_DATA error; a BatchNorm's num_batches_tracked is accepted and ignored. */
int fl_model_tensors_read(const char *path, const FlSettings *s, NnShape shape, int classes, int n_clients,
                          float **state_out);

#endif
