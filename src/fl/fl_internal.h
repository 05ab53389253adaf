/* Internal interfaces of the fl module (src/fl): settings, MPI protocol, client training, evaluation,
 * outputs and checkpoints. */
#ifndef FEDHET_FL_INTERNAL_H
#define FEDHET_FL_INTERNAL_H

#include <mpi.h>
#include <stdint.h>

#include "fedhet/algo.h"
#include "fedhet/config.h"
#include "fedhet/data.h"
#include "fedhet/fl.h"
#include "fedhet/nn.h"
#include "eval_metrics.h"

/* The resolved config, typed (src/fl/settings.c). */
typedef struct {
    const char *data_path, *data_source, *scheme, *corruption;
    const char *variant; /* [data] variant of the scheme ("": its default) */
    double alpha;
    int n_clients_partition, min_size, classes_per_client, severity, corrupted, partition_seed;
    int eval_batch;
    const char *model, *norm;
    int groups;
    const char *optimizer;
    double lr, momentum, weight_decay, clip, lr_decay, beta1, beta2, eps;
    int epochs, batch_size;
    int64_t steps;
    int threads;
    double logit_adjust;
    int rounds;
    const char *selection;
    double fraction;
    int count, eval_every, checkpoint_every;
    int sharpness_every, sharpness_probe; /* metrics.csv sharpness / perturbed_loss (spec algorithms-sam 12) */
    double sharpness_rho;
    int64_t seed;
    const AlgoMethod *method;
    double hp[ALGO_MAX_HP];
    const AlgoMethod *plugin; /* NULL, or a method added on top ([algo] plugin) */
    double plugin_hp[ALGO_MAX_HP];
    const char *out_dir, *name, *log_level;
} FlSettings;

int fl_settings_from_config(FlSettings *s, const FhConfig *cfg, const char *config_path);
/* Loads a run config: [algo] method first, then the method's own keys (others' keys are an error). */
int fl_config_load(FhConfig **out, const char *path, char *const *overrides, int n_overrides);
/* the base keys with [algo] method and `m`'s keys (kept for the process's lifetime) */
const FhConfigKey *fl_config_schema_for(const AlgoMethod *m, const AlgoMethod *plugin, int *n);
/* the base keys with every method's keys as free text */
const FhConfigKey *fl_config_schema_any(int *n);

/* ---- protocol (src/fl/comm.c) ---- */
typedef struct {
    MPI_Comm comm;
    int rank, size;
    int n_client_ranks;   /* size - 1, or 1 when size == 1 (rank 0 trains) */
} FlComm;
/* Rank that trains clients: rank 0 alone, else 1..size-1 */
int fl_comm_init(FlComm *c, MPI_Comm comm);
/* Collectives that wait politely (MPI_Test + short sleeps) so that idle ranks leave the cores to
 * ranks that compute. */
int fl_bcast(FlComm *c, void *buf, int64_t bytes);
int fl_wait(MPI_Request *req);
/* Every rank's status -> the first nonzero one (same on all ranks). */
int fl_agree(FlComm *c, int status);

/* ---- round plan ---- */
enum { FL_PLAN_RUN = 0, FL_PLAN_STOP_SIGNAL = 1, FL_PLAN_STOP_DIVERGED = 2 };
typedef struct {
    int32_t round, action, n_selected, eval;
    double lr;
} FlPlanHeader;

/* ---- upload records: {header, scalars, vectors}, fixed size per method ---- */
typedef struct {
    int64_t client, n_samples, n_steps, nonfinite;
    double train_loss, seconds;
    /* per-sample passes of the round, counted by the model instances: the local steps (train_*), and the
     * client's scoring and probe passes outside them (score_*: whole-set passes, probe gradients, hooks) */
    int64_t train_forward, train_backward, score_forward, score_backward;
} FlRecordHeader;

typedef struct {
    size_t header_bytes; /* header + scalars, rounded up to 64 */
    size_t bytes;        /* header_bytes + (1 + n_upload_vectors) * n_state * 4 */
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
    AlgoSizes z;
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
    DataBatchIter probe_it; /* AlgoClientCtx.probe_grad: the extra shuffle, open during report->begin only */
    int probe_open, probe_loaded; /* probe_loaded: the probe batch in x, y (-1: none) */
    int64_t probe_rows;
    int64_t service_forward, service_backward; /* passes made by for_each_local_batch and probe_grad */
    int host_upload_scalars; /* the method's own upload scalars; a plug-in's follow */
    NnSgd sgd;
    NnAdam adam;
    float *work;     /* [z.work_vectors * n_state] */
    AlgoClientCtx ctx;
    int n_owned;
    /* persistent state of each owned client, one block each: z.client_vectors * n_state floats, then
     * z.client_floats, then a has-state flag (1.0 once the client has trained) */
    float *client_state;
    int64_t block;
} FlClientWork;

/* clients per round when fixed by the selection rule; -1 for bernoulli */
int fl_clients_per_round(const FlSettings *s, int K);
/* What the method sees of the config; m may be NULL before the model exists (sizes then 0). */
void fl_algo_setup(AlgoSetup *a, const FlSettings *s, const NnModel *m, int K, int classes);
int fl_client_init(FlClientWork *w, const FlSettings *s, DataPartFile *f, const int *owned, int n_owned);
void fl_client_free(FlClientWork *w);
/* the persistent block of owned client `client` */
float *fl_client_block(FlClientWork *w, int client);
/* Trains `client` from global for the round; writes the record (header, scalars, final state).
 * slot_in_round: the client's position in the round's selection. */
int fl_client_train(FlClientWork *w, const FlRecordLayout *l, const float *global, const float *server_vecs,
                    const double *server_scalars, int client, int slot_in_round, int round, double lr, void *record);

/* ---- evaluation (src/fl/eval.c) ---- */
/* Every rank evaluates a share of the fixed-size test batches (batch b on rank b mod size) of the
 * model whose state is `state`; rank 0 gathers the logits in sample order and computes the metrics,
 * so results do not depend on the number of ranks. */
int fl_evaluate(FlComm *c, NnModel *m, DataPartFile *f, DataRowGroup group, int eval_batch, FlEvalMetrics *out);

/* ---- one run (src/fl/run.c) ---- */
/* metrics.csv columns (spec C.11), one double each; FL_METRIC_COLUMNS names them in order */
#define FL_METRIC_COLUMNS                                                                                 \
    X(round) X(lr) X(n_selected) X(selected_hash) X(t_broadcast) X(t_train) X(t_gather) X(t_aggregate)     \
    X(t_eval) X(t_round) X(t_client_mean) X(t_client_max) X(test_accuracy) X(test_loss)                    \
    X(test_balanced_accuracy) X(test_auc_ovr_macro) X(test_auc_ovr_weighted) X(test_auc_ovo_macro)          \
    X(test_f1_macro) X(corrupted_accuracy) X(corrupted_loss) X(corrupted_balanced_accuracy)                 \
    X(corrupted_auc_ovo_macro) X(train_loss) X(drift) X(drift_full) X(divergence) X(bytes_down) X(bytes_up)       \
    X(client_auc_std) X(client_bacc_std)                                                                    \
    X(perturb_norm) X(grad_norm) X(sharpness) X(perturbed_loss) X(method_scalar) X(rho)                    \
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
#define FL_MAX_CCOLUMNS (FL_N_CCOLUMNS + 24) /* with the method's own (AlgoSizes.client_columns) */

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
    FlRecordLayout layout;
    int64_t n_state, n_params;
    uint64_t layout_hash;
    float *global;            /* [n_state + n_server_vectors * n_state]: what is broadcast */
    float *server_vecs;       /* view into global after the state */
    double *server_scalars;   /* [z.server_scalars], broadcast every round */
    float *server_private;    /* rank 0: [z.server_private * n_state] */
    AlgoSizes z;              /* the method's sizes for this run */
    int64_t *client_sizes;    /* [K] n_k */
    int start_round;          /* first round to run (after a resume) */
    double lr;                /* lr of the next round */
    /* rank 0 */
    double *rows;             /* [rounds * FL_N_COLUMNS] */
    int n_rows;
    double *client_rows;      /* [cap_client_rows * n_ccols] */
    int n_ccols;              /* clients.csv columns: the fixed ones, then the method's */
    const char *ccol_names[FL_MAX_CCOLUMNS];
    char ccol_text[512];      /* the method's column names */
    int64_t n_client_rows, cap_client_rows;
    FILE *metrics_csv, *clients_csv, *log;
    float *probe_x, *probe_work; /* fl.sharpness_every: the probe set [n_probe rows] and scratch */
    int32_t *probe_y;
    int64_t n_probe;
} FlRun;

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
/* Writes PATH atomically: rounds done, lr, global state, server vectors and scalars, every client's
 * persistent vectors (sent to rank 0 one client at a time), metrics rows, config text, layout hash. */
int fl_checkpoint_save(FlRun *run, int rounds_done, const char *path);
/* Reads the checkpoint of run->dir into run (rank 0 reads; state is broadcast or sent to owners).
 * A damaged file is FH_ERR_IO and nothing is changed on disk. */
int fl_checkpoint_load(FlRun *run);
/* Rank 0: the config text stored in a checkpoint, to compare with the one given. */
int fl_checkpoint_read_config(const char *path, char **text);
uint64_t fl_layout_hash(const NnModel *m);

#endif
