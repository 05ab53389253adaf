/* fedhet algorithms as components (DESIGN.md "Algorithms as components").
 *
 * A method is one registry row (src/algo/registry.c) that picks parts; every part is a small const table
 * of function pointers where NULL means the default behaviour. The round loop and the local training
 * loop live once in src/fl and call these hooks:
 *
 *   local training, per step:  grad = d loss/dw at w (forward + backward on the batch)
 *                              + local_term->grad_term   (FedProx, FedDyn, ...)
 *                              correction->correct        (SCAFFOLD, FedCM, ...)
 *                              step->step                 (default: the configured optimiser; SAM family:
 *                                                          computes gradients again at perturbed weights)
 *   end of local training:     report->end               (fills upload scalars/vectors, client state)
 *   server:                    weights->weights           (default: sample counts)
 *                              update->update             (default: weighted average of uploaded states)
 *
 * Capabilities are data: how many persistent per-client vectors, server vectors and upload scalars and
 * vectors a method needs. All vectors have the model's state layout (n_state floats: trainable
 * parameters first, then buffers). */
#ifndef FEDHET_ALGO_H
#define FEDHET_ALGO_H

#include <stdint.h>

#include "fedhet/nn.h"

#define ALGO_MAX_HP 8 /* hyperparameters per method */

/* What client-side hooks see. */
typedef struct AlgoClientCtx {
    NnModel *model;           /* model->state is the client's working vector w */
    const float *global;      /* w^t, the state broadcast this round */
    const float *server_vecs; /* [n_server_vectors * n_state], broadcast with w^t */
    float *client_vecs;       /* [n_client_vectors * n_state], this client's persistent vectors */
    float *upload_vecs;       /* [n_upload_vectors * n_state] sent besides the model */
    double *upload_scalars;   /* [n_upload_scalars] */
    const double *hp;         /* the method's hyperparameters, in the order of AlgoMethod.hp */
    int client, round;
    int64_t n_samples, step, n_steps, n_params, n_state;
    double lr;
    /* the configured optimiser's update of w (trainable part) with grad; used by step hooks */
    void (*optimizer_step)(struct AlgoClientCtx *c, float *w, const float *grad);
    void *optimizer;
} AlgoClientCtx;

/* Computes the mean loss of the current batch at model->state and its gradient (local terms and
 * correction included) into model->grad; returns FH_OK or a status. */
typedef int (*AlgoGradFn)(void *env, double *loss);

typedef struct {
    /* adds d term/dw at w to grad; returns the term's value (added to the reported loss) */
    double (*grad_term)(AlgoClientCtx *c, const float *w, float *grad);
} AlgoLocalTerm;

typedef struct {
    void (*correct)(AlgoClientCtx *c, float *grad);
} AlgoGradCorrection;

typedef struct {
    /* one local step; the default calls grad once and then c->optimizer_step */
    int (*step)(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss);
} AlgoLocalStep;

typedef struct {
    void (*begin)(AlgoClientCtx *c); /* before the first step of the round */
    void (*end)(AlgoClientCtx *c);   /* after the last: fill uploads, update client_vecs */
} AlgoClientReport;

/* One gathered upload as the server sees it. */
typedef struct {
    int client;
    int64_t n_samples, n_steps;
    double train_loss;
    const double *scalars; /* [n_upload_scalars] */
    const float *state;    /* the client's final w [n_state] */
    const float *vecs;     /* [n_upload_vectors * n_state] */
} AlgoUpload;

typedef struct {
    int round;
    int n_clients;                /* K */
    int64_t n_params, n_state;
    const double *hp;
    float *server_vecs;           /* [n_server_vectors * n_state], persistent on the server */
    double *server_scalars;       /* [n_server_scalars] */
} AlgoServerCtx;

typedef struct {
    /* p[i] for uploads in ascending client id; they need not sum to 1 (the update normalises) */
    int (*weights)(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p);
} AlgoServerWeights;

typedef struct {
    /* new global state from the uploads and weights (default: sum p_i state_i / sum p_i, in double,
     * ascending client id) */
    int (*update)(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global);
} AlgoServerUpdate;

typedef struct {
    const char *key;     /* config key in [algo] */
    double default_value;
    double lo, hi;
    const char *help;
} AlgoHyper;

typedef struct {
    const char *name;
    const char *summary;
    const char *source;  /* spec section */
    const AlgoLocalTerm *local_term;
    const AlgoGradCorrection *correction;
    const AlgoLocalStep *step;
    const AlgoClientReport *report;
    const AlgoServerWeights *weights;
    const AlgoServerUpdate *update;
    int n_client_vectors, n_server_vectors, n_server_scalars, n_upload_vectors, n_upload_scalars;
    int n_hp;
    AlgoHyper hp[ALGO_MAX_HP];
} AlgoMethod;

/* The registry: NULL for an unknown name. */
const AlgoMethod *algo_find(const char *name);
int algo_count(void);
const AlgoMethod *algo_at(int i);
/* "fedavg|uniform|..." for the config's choice list (static storage) */
const char *algo_choices(void);

/* Default parts, for methods that reuse them */
extern const AlgoServerWeights algo_weights_samples;
extern const AlgoServerWeights algo_weights_uniform;
int algo_average(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global);

#endif
