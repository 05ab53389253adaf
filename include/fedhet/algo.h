/* fedhet algorithms as components (docs/architecture.md; docs/adding-a-method.md).
 *
 * A method is one registry row (src/algo/registry.c) that picks parts; every part is a small const table
 * of function pointers where NULL means the default behaviour. At setup algo_ops_compose joins the row and its
 * plug-in into one table with the defaults filled in (AlgoOps: the composition rules are written there), which
 * is all the runtime calls. The round loop and the local training loop live once in src/fl and call these hooks:
 *
 *   start of a run:            server_init               (server state at round 0; not on resume)
 *   client, before training:   report->begin             (may evaluate models on the client's data)
 *   local training, per step:  forward on the batch
 *                              batch_term->batch_term    (MOON, FedDecorr, distillation: d/dlogits, d/dfeatures)
 *                              backward; grad = d loss/dw at w
 *                              + local_term->grad_term   (FedProx, FedDyn, ...)
 *                              correction->correct        (SCAFFOLD, FedCM, ...)
 *                              clip (train.clip)
 *                              step->step                 (default: the configured optimiser; SAM family:
 *                                                          computes gradients again at perturbed weights)
 *   client, after training:    report->end               (fills upload scalars/vectors, client state)
 *   server:                    weights->weights           (default: sample counts)
 *                              update->update             (default: weighted average of uploaded states)
 *
 * Sizes are data: how many persistent per-client vectors, server vectors (broadcast each round) and
 * server-only vectors, server scalars (broadcast), upload scalars and vectors a method needs; a method whose
 * sizes depend on its options or on K computes them in `sizes`. All vectors have the model's state
 * layout (n_state floats: trainable parameters first, then buffers).
 *
 * Options are named: a part's keys live in its own struct, declared once (AlgoOption, AlgoOptionPart); a row
 * lists the parts it uses, and every hook reads them from the view it is given (AlgoSetup, AlgoClientRound and
 * AlgoServerCtx .options) with algo_options or the part's typed accessor (ALGO_OPTIONS_OF).
 *
 * A client hook gets an AlgoClientCtx: the model it trains (model->state = w), the round (AlgoClientRound:
 * client, round t, lr, sizes, options, w^t and the broadcast server vectors and scalars; read-only), the
 * client's state (AlgoClientState: persistent vectors, upload scalars and vectors, scratch, extra models, the
 * step counters; the hooks write it) and the runtime's services (AlgoClientServices: the optimiser step picked
 * at setup, grad_terms, local evaluation and passes, probe gradients). A plug-in's hooks get the same with the
 * plug-in's options and its own upload scalars. */
#ifndef FEDHET_ALGO_H
#define FEDHET_ALGO_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "fedhet/config.h"
#include "fedhet/nn.h"

#define ALGO_MAX_AUX 2 /* extra model instances per client rank */

struct AlgoMethod;

/* ---- named options ----------------------------------------------------------------------------------
 * A part of a method (the SAM step, the FedCM blend, FLOOD, a method's own rules) reads its [algo] keys from
 * its own struct, declared once with a table of AlgoOption (key = the field's name, its offset, default,
 * range, help): an AlgoOptionPart. A method row lists the parts it uses (AlgoMethod.parts, in the order
 * fedhet methods NAME lists their keys); the config fills one block per run with every part of the row at its
 * own aligned offset, and hooks fetch their part's struct from the view with algo_options(view, &part),
 * usually through a typed accessor of the part. */

#define ALGO_MAX_PARTS 8        /* option parts per method row */
#define ALGO_MAX_TUNES 4        /* per-row defaults / help of shared parts' keys */
#define ALGO_OPTIONS_BYTES 512  /* one run's options: the row's parts at aligned offsets (the registry test checks) */

/* A method's key is a config key of [algo] (fedhet/config.h), landing in its part's struct: a number (FH_CFG_FLOAT,
 * .def.f, range) into a double, a count (FH_CFG_INT, .def.i, range) into an int, a switch (FH_CFG_BOOL, .def.b) as 0/1
 * into an int, a choice (FH_CFG_CHOICE, .def.s, .choices) as its index into an int. */
typedef FhConfigKey AlgoOption;

/* The first members of an AlgoOption: the key named after field `f` of struct T, whose type is checked at compile
 * time: a double (ALGO_NUMBER), an int (ALGO_INT, ALGO_BOOL) or an int-sized field (ALGO_CHOICE). */
#define ALGO_OPTION_AT(T, f, ctype) (offsetof(T, f) + 0 * sizeof(char[_Generic(((T *)0)->f, ctype: 1, default: -1)]))
#define ALGO_NUMBER(T, f)                                                                                             \
    .section = "algo", .key = #f, .type = FH_CFG_FLOAT, .at = ALGO_OPTION_AT(T, f, double), .land = FH_LAND_DOUBLE
#define ALGO_INT(T, f)                                                                                                \
    .section = "algo", .key = #f, .type = FH_CFG_INT, .at = ALGO_OPTION_AT(T, f, int), .land = FH_LAND_INT
#define ALGO_BOOL(T, f)                                                                                               \
    .section = "algo", .key = #f, .type = FH_CFG_BOOL, .at = ALGO_OPTION_AT(T, f, int), .land = FH_LAND_INT
#define ALGO_CHOICE(T, f) .section = "algo", .key = #f, .type = FH_CFG_CHOICE, FH_CONFIG_AT_INDEX(T, f)

typedef struct AlgoOptionPart {
    const char *name;        /* in messages and tests */
    size_t size;             /* sizeof the part's struct */
    int n;
    const AlgoOption *keys;  /* [n] */
} AlgoOptionPart;
#define ALGO_OPTION_PART(name, T, keys) { name, sizeof(T), (int)(sizeof keys / sizeof keys[0]), keys }
/* A part's typed accessor: `const T *fn(AlgoOptions o)`, its struct in the view */
#define ALGO_OPTIONS_OF(fn, T, part) \
    static inline const T *fn(AlgoOptions o) { return (const T *)algo_options(o, &(part)); }

/* A row's own default and help for a key of a shared part (a method whose radius or text differs). */
typedef struct {
    const char *key;
    double default_value; /* a number's or a count's (a whole number), a switch's (0 or 1); NAN: the part's */
    const char *help;     /* NULL: the part's */
} AlgoOptionTune;

/* One run's options: storage for a row's parts, filled at setup (algo_options_reset, algo_option_set). */
typedef union {
    max_align_t align;
    unsigned char bytes[ALGO_OPTIONS_BYTES];
} AlgoOptionBlock;

/* What hooks see: the row whose parts are in the block (a plug-in's hooks get the plug-in's view). */
typedef struct {
    const struct AlgoMethod *row;
    const AlgoOptionBlock *block;
} AlgoOptions;

/* The struct of `part` in view o; a row without that part aborts naming both (a programming error). */
const void *algo_options(AlgoOptions o, const AlgoOptionPart *part);
/* The same, NULL when the row does not list the part (for a hook shared by rows with and without it). */
const void *algo_options_find(AlgoOptions o, const AlgoOptionPart *part);
/* The row's keys, part by part: i in [0, algo_option_count(m)). */
int algo_option_count(const struct AlgoMethod *m);
const AlgoOption *algo_option_at(const struct AlgoMethod *m, int i);
/* key `key` of m, NULL if m has none */
const AlgoOption *algo_option_find(const struct AlgoMethod *m, const char *key);
/* the key's default (a choice: its index; a switch: 0 or 1) and help for row m (the row's tune, else the part's) */
double algo_option_default(const struct AlgoMethod *m, const AlgoOption *o);
const char *algo_option_help(const struct AlgoMethod *m, const AlgoOption *o);
/* key o as row m's config schema has it: the row's default and help, landing nowhere (the block is filled by
 * algo_option_set) */
FhConfigKey algo_option_config_key(const struct AlgoMethod *m, const AlgoOption *o);
/* choice `index` of o: its text (not NUL-terminated) and length; NULL past the last */
const char *algo_option_choice(const AlgoOption *o, int index, int *len);
/* the index of choice `text` of o, -1 if it is none of them */
int algo_option_choice_index(const AlgoOption *o, const char *text);
/* bytes m's block uses (its parts at aligned offsets) */
size_t algo_options_size(const struct AlgoMethod *m);
/* every key of m at its default */
void algo_options_reset(AlgoOptionBlock *b, const struct AlgoMethod *m);
/* key `key` of m := value (a choice: its index; a switch: 0 or 1); FH_ERR_USAGE for a key m does not have, or a value
 * its int field cannot hold (a fraction, outside its range) */
int algo_option_set(AlgoOptionBlock *b, const struct AlgoMethod *m, const char *key, double value);
/* the value of key o in view (o a key of view.row; a choice: its index; a switch: 0 or 1) */
double algo_option_value(AlgoOptions view, const AlgoOption *o);

/* Scratch of a method's hooks, made once per run so that rounds allocate nothing: a method's sizes ask for it in
 * bytes (AlgoSizes.client_scratch, server_scratch), the runtime hands every hook call the same block, and a hook
 * takes its arrays from the start of its view (algo_scratch_take in src/algo); nothing in it outlasts the call. */
typedef struct {
    void *base;
    size_t bytes;
} AlgoScratch;

/* What a method may know of the run's configuration (validation, sizes, hooks). */
typedef struct {
    AlgoOptions options;     /* the method's [algo] keys */
    int n_clients;           /* K */
    int per_round;           /* clients per round when fixed (selection all|count|fraction), -1 (bernoulli) */
    int all_clients;         /* 1: selection = all */
    int rounds;              /* T */
    int64_t n_params, n_state, feature_size;
    int classes;
    const char *optimizer;   /* sgd|adam|adamw */
    double lr, momentum, weight_decay, clip;
    int64_t steps;           /* fixed local steps, 0: epochs */
    int epochs, batch_size;
    int64_t seed;            /* fl.seed: w^0 = nn_model_init_params(seed); key of the method's Philox draws */
    double lr_decay;         /* train.lr_decay: lr of round t+1 = lr_decay x lr of round t */
} AlgoSetup;

/* Where the runtime shows an upload scalar a method names (flags) */
enum {
    ALGO_SHOW_MEAN = 1,  /* the metrics.csv column of that name (perturb_norm, grad_norm, rho): the plain mean over the
                          * round's clients; NaN in rounds of a method without it */
    ALGO_SHOW_CLIENT = 2 /* a clients.csv column of that name: each client's value, after the fixed columns in the
                          * order the names were given (a plug-in's after the host's) */
};
typedef struct {
    const char *name;
    int at;    /* index in the upload scalars */
    int show;  /* ALGO_SHOW_* */
} AlgoNamedScalar;
#define ALGO_MAX_NAMED 16

typedef struct {
    int client_vectors;      /* persistent per client, on the client's rank, checkpointed */
    int64_t client_floats;   /* persistent per-client floats besides the vectors (small states) */
    int server_vectors;      /* persistent on the server, broadcast with w^t every round */
    int server_private;      /* persistent on the server only */
    int64_t server_scalars;  /* persistent doubles on the server, broadcast every round */
    int upload_vectors, upload_scalars;
    int eval_private;        /* -1: evaluate the global state; else this server-only vector */
    int aux_models;          /* extra model instances on client ranks (teachers, previous models) */
    int proj_dim;            /* > 0: every model instance is built with a projection head of this width on its
                              * representation (NnZooOptions.proj_dim; MOON); sizes() may not read n_params for it */
    int work_vectors;        /* scratch state vectors on client ranks */
    /* bytes of AlgoScratch one call of the method's client hooks / server hooks may use (the most over its hooks);
     * a plug-in's follow the host's */
    size_t client_scratch, server_scratch;
    /* the upload scalars the runtime shows, by name (algo_upload_named, algo_upload_add) */
    AlgoNamedScalar named[ALGO_MAX_NAMED];
    int n_named;
    /* metrics.csv method_scalar: the index of the server scalar shown each round (its value during the round, before
     * the update; the method's help names it, e.g. FedWMSAM's alpha_r); -1 (algo_sizes' default): none (NaN) */
    int shown_server_scalar;
} AlgoSizes;

/* Names upload scalar `at` (in [0, z->upload_scalars)) for the runtime to show; a name given twice or past
 * ALGO_MAX_NAMED is a programming error (abort naming it). */
void algo_upload_named(AlgoSizes *z, int at, const char *name, int show);
/* Appends one upload scalar named `name` and returns its index */
int algo_upload_add(AlgoSizes *z, const char *name, int show);
/* The index of the upload scalar named `name`, -1 if none */
int algo_upload_index(const AlgoSizes *z, const char *name);

/* A model's quality on the client's whole training set (eval mode, no augmentation). */
typedef struct {
    double loss, accuracy, balanced_accuracy; /* mean CE; balanced: mean recall over the classes present */
} AlgoLocalEval;

struct AlgoClientCtx;

/* What a client's hooks know of its round: set by the runtime before report->begin, read-only to hooks. */
typedef struct {
    int client;                   /* k */
    int t;                        /* the round, from 0 (w^t was broadcast for it) */
    int slot;                     /* the client's position in the round's selection */
    double lr;                    /* the local lr of this round */
    int64_t n_samples;            /* n_k, the client's training rows */
    int64_t n_params, n_state;
    int has_state;                /* 0 until this client has finished a round (its persistent state is unset) */
    const AlgoSetup *setup;
    const AlgoSizes *sizes;
    AlgoOptions options;          /* the method's keys (a plug-in's hooks: the plug-in's) */
    const struct AlgoMethod *method; /* the run's method (the host's row while a plug-in's hook runs) */
    const float *global;          /* w^t, the state broadcast this round */
    const float *server_vecs;     /* [server_vectors * n_state], broadcast with w^t */
    const double *server_scalars; /* [server_scalars], broadcast with w^t */
    const int32_t *label_counts;  /* [classes] of this client */
} AlgoClientRound;

/* The client's own state during the round: views into the runtime's buffers, which hooks write. */
typedef struct {
    float *client_vecs;           /* [client_vectors * n_state], this client's persistent vectors */
    float *client_floats;         /* [client_floats] */
    float *upload_vecs;           /* [upload_vectors * n_state] sent besides the model */
    double *upload_scalars;       /* [upload_scalars] (a plug-in's hooks: its own, which follow the host's) */
    float *work;                  /* [work_vectors * n_state] scratch */
    AlgoScratch scratch;          /* [sizes.client_scratch] bytes for one hook call (a plug-in's hooks: its own) */
    NnModel *aux[ALGO_MAX_AUX];   /* [sizes.aux_models] models of the same architecture, for extra forwards */
    float *momentum_buf;          /* the SGD momentum buffer [n_params], NULL without momentum */
    int momentum_kept;            /* set by report->begin after loading momentum_buf: the first step continues
                                   * that buffer (an optimiser kept across rounds, FedNoLoWe) instead of starting it */
    /* SAM-family steps (docs/methods/sam.md §0.2): while grad_pure = 1 the grad callback returns the pure
     * minibatch-loss gradient (loss and batch terms only: no local terms, correction or clip), from which a
     * perturbation is computed; the services' grad_terms then adds what it left out */
    int grad_pure;
    /* kept by the runtime: the step (from 0) and the round's steps (report->begin may add to n_steps: SCAFFOLD's
     * flood variant), the sum over steps of batch-mean loss x batch size (FedNoLoWe's L_k), the rows seen */
    int64_t step, n_steps;
    double loss_sample_sum;
    int64_t samples_seen;
} AlgoClientState;

struct AlgoBatch;

/* What the runtime does for client hooks (one const table per runtime; c->runtime is its data). */
typedef struct {
    /* the configured optimiser's update of w (trainable part) with grad, picked at setup; used by step hooks */
    void (*optimizer_step)(struct AlgoClientCtx *c, float *w, const float *grad);
    /* after the backward pass of a grad_pure pass: adds to grad at model->state what the pure gradient left out
     * (local terms, correction, clip, in that order) and the local terms' value to *loss */
    void (*grad_terms)(struct AlgoClientCtx *c, float *grad, double *loss);
    /* evaluates `state` on this client's whole training set in eval mode, without augmentation (uses
     * model's activations and the batch buffers: call it from report hooks, not inside a step) */
    int (*eval_local)(struct AlgoClientCtx *c, NnModel *model, const float *state, AlgoLocalEval *out);
    /* the same pass, calling fn(env, batch) for every batch (logits, features); a value other than FH_OK from fn
     * ends the pass and is returned */
    int (*for_each_local_batch)(struct AlgoClientCtx *c, NnModel *model, const float *state,
                                int (*fn)(void *env, const struct AlgoBatch *b), void *env);
    /* Probe gradients (FedSCAM's heterogeneity score and pilot, docs/methods/sam.md §10), from report->begin only:
     * minibatch `index` (0, 1, ...; the training batch size) of an extra shuffle of this client's data, Philox
     * (seed, shuffle) with counter (client, round, epoch 0xFFFFFFFF), never a training step; forwarded at `state`
     * in train mode with BatchNorm running statistics frozen; the mean CE loss (logit adjustment as in training, no
     * sample weights, no method terms) into *loss and its gradient into model->grad. *rows: the batch's rows, 0
     * past the client's last batch (the probe never starts a second pass). model->state is left as it was. */
    int (*probe_grad)(struct AlgoClientCtx *c, int index, const float *state, double *loss, int64_t *rows);
} AlgoClientServices;

/* What client-side hooks see: the model they train, the round (read-only), the client's state and the
 * runtime's services. */
typedef struct AlgoClientCtx {
    NnModel *model;               /* model->state is the client's working vector w */
    const AlgoClientRound *round;
    AlgoClientState state;
    const AlgoClientServices *svc;
    void *runtime;                /* the services' own data */
} AlgoClientCtx;

/* Computes the mean loss of the current batch at model->state and its gradient (local terms and
 * correction included) into model->grad; returns FH_OK or a status. */
typedef int (*AlgoGradFn)(void *env, double *loss);

/* The batch of the current step, after the forward pass. */
typedef struct AlgoBatch {
    const float *x;
    const int32_t *y;
    int count, classes;
    const float *logits;    /* [count, classes] */
    const float *features;  /* [count, feature_size]: the classifier's input */
    int64_t feature_size;
} AlgoBatch;

typedef struct {
    /* per-sample weights [b->count] of the batch's cross-entropy (mean of w_i l_i over the batch; FLOOD);
     * called after the forward pass, before the loss */
    int (*weigh)(AlgoClientCtx *c, const AlgoBatch *b, float *weights);
} AlgoSampleWeights;

typedef struct {
    /* adds d term/d logits and d term/d features of the batch; returns the term's value */
    double (*batch_term)(AlgoClientCtx *c, const AlgoBatch *b, float *dlogits, float *dfeatures);
} AlgoBatchTerm;

typedef struct {
    /* adds d term/dw at w to grad; returns the term's value (added to the reported loss) */
    double (*grad_term)(AlgoClientCtx *c, const float *w, float *grad);
} AlgoLocalTerm;

typedef struct {
    void (*correct)(AlgoClientCtx *c, float *grad);
} AlgoGradCorrection;

typedef struct {
    /* one local step; the default calls grad once and then c->svc->optimizer_step */
    int (*step)(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss);
    /* SAM-family steps only (src/algo/sam.c; NULL / 0: the default). The radius of a step is
     * client_radius(c, round_radius(setup, options, round)): round_radius gives rho(t) of every client of a round
     * (FedISM+'s progressive radius; NULL: the key rho of the shared part algo_sam_radius_options), and is checked
     * for every round at
     * validation (NaN or negative: refused naming the method's keys); client_radius turns it into this
     * client's radius (FedSCAM; NULL: rho(t) itself). norm_eps is e in eps = rho g / (||g|| + e) (0: 1e-7,
     * FL-Simulator). A method with its own radius sets these two hooks and reuses algo_sam_step. */
    double (*round_radius)(const AlgoSetup *s, AlgoOptions o, int round);
    double (*client_radius)(const AlgoClientCtx *c, double rho);
    double norm_eps;
} AlgoLocalStep;

typedef struct {
    int (*begin)(AlgoClientCtx *c); /* before the first step of the round (model->state = w^t) */
    int (*end)(AlgoClientCtx *c);   /* after the last: fill uploads, update client state */
} AlgoClientReport;

/* One gathered upload as the server sees it. */
typedef struct {
    int client;
    int64_t n_samples, n_steps;
    double train_loss;
    const double *scalars; /* [upload_scalars] */
    const float *state;    /* the client's final w [n_state] */
    const float *vecs;     /* [upload_vectors * n_state] */
} AlgoUpload;

typedef struct {
    int round, rounds;
    int n_clients;                /* K */
    int n_selected;
    const int32_t *selected;      /* this round's clients in selection order */
    int64_t n_params, n_state;
    AlgoOptions options;          /* the method's keys (a plug-in's weights: the plug-in's) */
    const AlgoSetup *setup;
    const AlgoSizes *sizes;
    double lr;                    /* the local lr of this round */
    const float *current;         /* w^t */
    float *server_vecs;           /* [server_vectors * n_state], persistent, broadcast */
    float *server_private;        /* [server_private * n_state], persistent, server only */
    double *server_scalars;       /* [server_scalars], persistent, broadcast */
    const int64_t *client_sizes;  /* [K] n_k of every client */
    const int32_t *label_counts;  /* [K * classes] */
    int classes;
    const NnParamView *views;     /* [n_views] the model's tensors in the state layout (per-tensor rules) */
    int n_views;
    AlgoScratch scratch;          /* [sizes.server_scratch] bytes for one hook call (a plug-in's weights: its own) */
} AlgoServerCtx;

typedef struct {
    /* p[i] for uploads in ascending client id; they need not sum to 1 (the update normalises) */
    int (*weights)(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p);
    const char *rule; /* what the weights are, for `fedhet methods` and the README's tables */
    int reads_models; /* the weights read the uploaded states or vectors: the round gathers every upload */
    int from_plan;    /* the weights read each upload's client id and n_samples alone (the client's size): every
                       * rank can compute them from the round's plan, before the clients train */
} AlgoServerWeights;
/* the rule of weights chosen by the method's `weights` key (uniform or sample counts) */
#define ALGO_WEIGHTS_BY_KEY "algo.weights"


/* The server step. Without `update` it is the weighted average, sum_i p_i state_i / sum p (algo_average), then the
 * method's sums over the round's uploads (AlgoSum) and its `finish`: the client ranks fold all of them into
 * partial sums, so that rank 0 never holds the uploads (docs/architecture.md "Aggregation"); `observe` adds
 * server state from the uploads' scalars. A method with its own `update` needs every upload's models at rank 0:
 * the round gathers them. */
#define ALGO_MAX_SUMS 3
typedef enum {
    ALGO_SUM_STATE,  /* the upload's state w_i */
    ALGO_SUM_DELTA,  /* its change w_i - w^t (each term formed in double before it is weighted) */
    ALGO_SUM_VECTOR, /* its upload vector `vector` */
} AlgoSumSource;
typedef enum {
    ALGO_COEF_AVERAGE, /* p_i / sum p, the average's */
    ALGO_COEF_ONE,     /* 1 */
    ALGO_COEF_OWN,     /* the method's `coefficients` */
} AlgoSumCoef;
typedef struct {
    AlgoSumSource source;
    int vector;
    AlgoSumCoef coef;
} AlgoSum;

typedef struct {
    /* new global state from every gathered upload and the weights */
    int (*update)(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global);
    /* without update, all optional: before the average, server state from the uploads' headers and scalars (their
     * state and vecs are NULL) and the weights */
    int (*observe)(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p);
    /* sums[k] = sum_i coef_i x_i over n_state elements (exact sums, as the average) */
    int n_sums;
    AlgoSum sums[ALGO_MAX_SUMS];
    /* sum k's coefficients (ALGO_COEF_OWN) of uploads i in ascending id, from their scalars (models NULL) */
    int (*coefficients)(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, int k, double *coef);
    /* after the average (global holds it); sums [n_sums * n_state] */
    int (*finish)(AlgoServerCtx *s, const float *sums, float *global);
    const char *gathered_because; /* with update: what of every model it needs (`fedhet methods`); NULL: generic */
} AlgoServerUpdate;
/* The coefficients of the average (row 0: p_i / sum p) and of up's sums (row 1 + k) of uploads i in ascending id:
 * coef [(1 + up->n_sums) * m]; rank 0 computes them, in the gathered step and to broadcast them to the folding
 * ranks. up NULL: the average's alone. */
int algo_sum_coefficients(const AlgoServerUpdate *up, AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p,
                          double *coef);
/* acc += coef x over elements [lo, lo + n) of a sum's source: state, vecs (its upload vectors) and current (w^t) */
void algo_sum_add(double *acc, const AlgoSum *sum, double coef, const float *state, const float *vecs,
                  const float *current, int64_t n_state, int64_t lo, int64_t n);
/* The server step over gathered uploads: up's update; or observe, the weighted average, the sums (into sums
 * [up->n_sums * n_state]) and finish, with coef [(1 + n_sums) * m] as scratch. The folded round computes the same
 * bits. up NULL: the average. */
int algo_server_update(const AlgoServerUpdate *up, AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p,
                       float *global, float *sums, double *coef);
/* Why a server step of this update and weights needs every upload's models at rank 0 (the round gathers them),
 * or NULL: the client ranks fold it (AlgoOps.folds). NULL parts: the defaults. */
const char *algo_gathers_why(const AlgoServerUpdate *update, const AlgoServerWeights *weights);


typedef struct AlgoMethod {
    const char *name;
    const char *summary;
    const char *source;  /* section of docs/methods/ */
    const char *state;   /* "client: c_k (P); server: c (P)" (docs/methods/baselines.md A.24) */
    const char *payload; /* "down 2, up 2" */
    const AlgoSampleWeights *sample_weights;
    const AlgoBatchTerm *batch_term;
    const AlgoLocalTerm *local_term;
    const AlgoGradCorrection *correction;
    const AlgoLocalStep *step;
    const AlgoClientReport *report;
    const AlgoServerWeights *weights;
    const AlgoServerUpdate *update;
    /* fresh-run server state (round 0); global holds w^0 and may be changed */
    int (*server_init)(AlgoServerCtx *s, float *global);
    /* refuses a configuration it cannot honour: FH_ERR_USAGE with a message naming the keys */
    int (*validate)(const struct AlgoMethod *m, const AlgoSetup *s);
    /* sizes depending on the setup; NULL: the fixed counts below */
    void (*sizes)(const AlgoSetup *s, AlgoSizes *z);
    int n_client_vectors, n_server_vectors, n_server_private, n_server_scalars, n_upload_vectors, n_upload_scalars;
    /* a method usable as `[algo] plugin = name` on top of another (its sample weights, report and server
     * weights compose with the host's; its upload scalars follow the host's); plugin_refuse names hosts it
     * cannot join: NULL, or a reason for host `host` */
    int plugin;
    const char *(*plugin_refuse)(const struct AlgoMethod *host, AlgoOptions host_options);
    /* non-NULL: the server's weights or step are the method itself (what they are), so that no plug-in may
     * replace them */
    const char *aggregation_is_method;
    /* metrics.csv method_scalar of a method whose shown value follows from the round alone (FLOOD's lambda_t), so
     * that it keeps no server scalar for it (AlgoSizes.shown_server_scalar); a plug-in's shows when the host shows none */
    double (*round_scalar)(AlgoOptions options, int round);
    /* 1: the method's paper compares clean and corrupted test sets (docs/methods/metrics.md C.5, C.6; FedISM); a run whose data
     * has no corrupted test set says at the start that those metrics are off */
    int quality_shift;
    /* the option parts the method's hooks read (NULL-terminated unless full), and its own defaults and help
     * for keys of shared parts */
    const AlgoOptionPart *parts[ALGO_MAX_PARTS];
    AlgoOptionTune tunes[ALGO_MAX_TUNES];
} AlgoMethod;

/* The registry: NULL for an unknown name. */
const AlgoMethod *algo_find(const char *name);
int algo_count(void);
const AlgoMethod *algo_at(int i);
/* the family a registry row belongs to (its file in src/algo), "-" for a row outside the registry */
const char *algo_family_of(const AlgoMethod *m);
/* "fedavg|uniform|..." for the config's choice list (static storage) */
const char *algo_choices(void);
/* "none|flood|...": the methods usable as plug-ins */
const char *algo_plugin_choices(void);
/* a row's options as the hooks see them */
static inline AlgoOptions algo_options_view(const AlgoMethod *m, const AlgoOptionBlock *b)
{
    return (AlgoOptions){ m, b };
}
/* The sizes of m under setup (the fixed counts, then m->sizes). */
void algo_sizes(const AlgoMethod *m, const AlgoSetup *setup, AlgoSizes *z);

/* ---- a method composed with its plug-in (src/algo/ops.c) ----
 * At setup the runtime composes the row and its plug-in into one table (algo_ops_compose), the only place that
 * knows a plug-in: it validates both, merges their sizes and fills in the defaults, so that the loops call the table
 * without a NULL check and never a row's hook. The rules, all of them here:
 * - validation: the host's validate, then the plug-in's (with its options);
 * - sizes: the host's; the plug-in adds its upload scalars (and their names) and its client and server scratch
 *   after the host's, and uses nothing else of its sizes;
 * - sample weights: the host's; else the plug-in's (called with the plug-in's view); else none (has_weigh 0: the
 *   batch's cross-entropy is unweighted);
 * - batch term: the host's; else none (has_batch_term 0: no feature gradients);
 * - local term, correction, step, report begin, update, server init: the host's, else the default (no term, no
 *   correction, the configured optimiser's step, nothing, the weighted average, nothing);
 * - folds: the update is the host's observe/average/sums/finish (no own update) and the server weights read no
 *   uploaded model: the client ranks fold the round's sums;
 * - report end: the host's, then the plug-in's (with its view);
 * - server weights: the plug-in's replace the host's (with its view of the uploads: its own scalars); else the
 *   host's, by default the sample counts; a host whose aggregation is the method itself (aggregation_is_method)
 *   refuses such a plug-in when the config is read;
 * - metrics.csv method_scalar: the host's shown server scalar, else its round_scalar, else the plug-in's;
 * - a plug-in with any other hook (a batch or local term, a correction, a step, a report begin, an update, a
 *   server init) is refused: FH_ERR_USAGE naming it.
 * A plug-in's view of a hook's context is the host's with the plug-in's options, its own upload scalars (which
 * follow the host's) and its own part of the scratch (which follows the host's). */
typedef struct {
    AlgoOptions options, plugin_options; /* the host's and the plug-in's rows and keys (plugin_options.row NULL: none) */
    AlgoSizes sizes;                     /* the host's with the plug-in's additions */
    int has_weigh, has_batch_term;       /* sample weights (algo_ops_weigh), feature gradients */
    double (*batch_term)(AlgoClientCtx *c, const AlgoBatch *b, float *dlogits, float *dfeatures);
    double (*grad_term)(AlgoClientCtx *c, const float *w, float *grad);
    void (*correct)(AlgoClientCtx *c, float *grad);
    int (*step)(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss);
    int (*report_begin)(AlgoClientCtx *c);
    AlgoServerUpdate update;             /* the host's (all NULL: the weighted average) */
    int folds;                           /* the server step folds: no own update, weights from scalars alone */
    int (*server_init)(AlgoServerCtx *s, float *global);
    /* what the functions below switch between views with (ops.c's own) */
    int host_upload_scalars;                         /* the plug-in's upload scalars start here */
    size_t host_client_scratch, host_server_scratch; /* the plug-in's scratch starts here */
    int (*weigh)(AlgoClientCtx *c, const AlgoBatch *b, float *weights);
    int weigh_by_plugin;
    int (*report_end)(AlgoClientCtx *c), (*plugin_report_end)(AlgoClientCtx *c);
    const AlgoServerWeights *weights;
    int weights_by_plugin;
    double (*round_scalar)(AlgoOptions options, int round);
    int round_scalar_by_plugin;
    AlgoUpload *plugin_uploads;          /* [n_clients]: the uploads as the plug-in's server weights see them */
} AlgoOps;
/* Composes setup->options.row with plug-in plugin_options.row (NULL: none) for the run described by setup (a
 * setup without a model validates only: its sizes are not the run's); FH_ERR_USAGE for a configuration either
 * refuses. Release with algo_ops_free. */
int algo_ops_compose(AlgoOps *ops, const AlgoSetup *setup, AlgoOptions plugin_options);
void algo_ops_free(AlgoOps *ops);
/* Why plugin cannot join host (its plugin_refuse, read when the config is: a host's keys decide some), or NULL. */
const char *algo_ops_plugin_refusal(const AlgoMethod *host, AlgoOptions host_options, const AlgoMethod *plugin);
/* The host's view of a client or server scratch block of ops->sizes' bytes (NULL when 0); hooks are handed it. */
AlgoScratch algo_ops_client_scratch(const AlgoOps *ops, void *block);
AlgoScratch algo_ops_server_scratch(const AlgoOps *ops, void *block);
/* The batch's sample weights (has_weigh), the report's end, the round's server weights p [m] and the round's
 * metrics.csv method_scalar (NaN: none), each in the view of the row the rules pick; c and s: the host's. */
int algo_ops_weigh(const AlgoOps *ops, AlgoClientCtx *c, const AlgoBatch *b, float *weights);
int algo_ops_report_end(const AlgoOps *ops, AlgoClientCtx *c);
int algo_ops_weights(const AlgoOps *ops, const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p);
double algo_ops_method_scalar(const AlgoOps *ops, const double *server_scalars, int round);

/* Default parts, for methods that reuse them */
extern const AlgoServerWeights algo_weights_samples;
extern const AlgoServerWeights algo_weights_uniform;
int algo_average(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global);
/* out[j] = sum_i p_i/sum p * x_i[j] for j in [from, to), x_i = u[i].state (vec < 0) or u[i].vecs + vec*n_state;
 * an exact sum (nn_sum_add). For rules that treat parameters and buffers apart. */
int algo_average_range(const AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, int vec, int64_t from,
                       int64_t to, float *out);
/* *total = sum_i p_i, refused when not positive or when m exceeds an exact sum's terms */
int algo_average_total(const AlgoServerCtx *s, const double *p, int m, double *total);

/* SAM family diagnostics (src/algo/sam_diag.c) */
/* Floats of scratch algo_sam_sharpness needs for model m. */
int64_t algo_sam_sharpness_work(const NnModel *m);
/* Sharpness of `state` on a probe set (docs/methods/sam.md §12 definitions): eval mode, plain CE;
 * G = sum of the per-sample gradients, e = rho G / (||G|| + 1e-12) on the trainable part; *loss = L0 = mean
 * CE at state, *perturbed = L1 = mean CE at state + e (the sharpness is max(L1 - L0, 1e-10)). x [n, C, H, W],
 * y [n], forwarded in chunks of model->max_batch; work: algo_sam_sharpness_work(m) floats. m->state, its
 * training flag and its gradient are used and m->state is put back. */
int algo_sam_sharpness(NnModel *m, const float *state, const float *x, const int32_t *y, int64_t n, double rho,
                       float *work, double *loss, double *perturbed);

#endif
