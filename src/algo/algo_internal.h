/* Internal to src/algo: the method families (one file each, one table of registry rows each) and helpers
 * shared by their parts. */
#ifndef FEDHET_ALGO_INTERNAL_H
#define FEDHET_ALGO_INTERNAL_H

#include "fedhet/algo.h"

/* Each family file defines its rows: const AlgoMethod algo_family_<name>[] and its row count. */
#define ALGO_FAMILY(name)                             \
    extern const AlgoMethod algo_family_##name[];     \
    extern const int algo_family_##name##_count;
ALGO_FAMILY(basic)    /* fedavg, uniform (docs/methods/baselines.md A.1, A.2) */
ALGO_FAMILY(server)   /* fedavgm, fedprox, scaffold, feddyn, fednova, fedcm (A.3-A.8) */
ALGO_FAMILY(fair)     /* qfedavg, afl, fairfed, fedce, fedga, fedlw, fednolowe, feddisco (A.9-A.16) */
ALGO_FAMILY(repr)     /* moon, feddecorr, fedmr, fednp, fedgkd (A.17-A.21) */
ALGO_FAMILY(sam)      /* fedsam, mofedsam, fedgamma, fedspeed, fedsmoo, fedlesam(-s,-d), fedlwsam (sam 3-8, 11) */
ALGO_FAMILY(flood)    /* flood, also a plug-in (algorithms-sam 13) */
ALGO_FAMILY(fedism)   /* fedism, fedismplus (algorithms-sam 12) */
ALGO_FAMILY(wmsam)    /* fedwmsam, afedsam (algorithms-sam 9, 15) */
ALGO_FAMILY(fedscam)  /* fedscam, fedscam_wa, fedscam_sam (algorithms-sam 10) */
#undef ALGO_FAMILY

/* The most clients a round of setup s can select: per_round, or K when the number varies (bernoulli). */
static inline int algo_max_selected(const AlgoSetup *s) { return s->per_round > 0 ? s->per_round : s->n_clients; }

/* Hooks' scratch (AlgoScratch): arrays are handed out in whole 64-byte units, so that a sizes hook adds
 * algo_scratch_bytes for each array a hook takes (and keeps the most over its hooks, which run one at a time). */
static inline size_t algo_scratch_bytes(size_t n, size_t size) { return (n * size + 63) / 64 * 64; }
/* The next n elements of `size` bytes of *s (which then starts after them), zeroed; asking past its end is a
 * programming error (the method's sizes asked for too little) and aborts naming `what`. */
void *algo_scratch_take(AlgoScratch *s, size_t n, size_t size, const char *what);

/* Sums in double over the uploads, ALGO_BLOCK elements at a time in an accumulator on the stack: each element is
 * summed in the same order as one pass over the whole vector would sum it, and the round allocates nothing.
 * algo_block_len: the elements of the block that starts at lo, of n. */
enum { ALGO_BLOCK = 512 };
static inline int64_t algo_block_len(int64_t lo, int64_t n) { return n - lo < ALGO_BLOCK ? n - lo : ALGO_BLOCK; }

/* OOD score of logits z (A.23; higher = more in-distribution): 0 energy, 1 msp, 2 maxlogit, 3 gen */
double algo_ood_score(int score, const float *z, int classes);
/* FLOOD's ASH scores (docs/methods/sam.md §13; variant 4 ash-p, 5 ash-b, 6 ash-s as flood_score's choices): the
 * energy of the classifier W [classes, D], b (NULL: none) on the activation a [D] shaped at its p-th percentile;
 * work: D doubles of scratch */
double algo_ash_score(int variant, const float *a, int64_t D, const float *W, const float *b, int classes, double p,
                      double *work);
/* FLOOD's lambda_t for round t from the view of a row with FLOOD's part (schedule, amplitude, halt, start) */
double algo_flood_lambda(AlgoOptions flood, int round);

/* The error for a configuration a method cannot honour (FH_ERR_USAGE naming the method). */
int algo_refuse(const AlgoMethod *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* refuses a number key of m whose value in o is not finite (NaN, inf: the config reads them) */
int algo_refuse_nonfinite(const AlgoMethod *m, AlgoOptions o);

/* ---- the SAM family's shared option parts (src/algo/sam.c; docs/methods/sam.md §0-3) -------------------- */

/* rho: the SAM radius of rows without a round_radius hook (AlgoLocalStep) */
typedef struct {
    double rho;
} SamRadiusOptions;
/* weights: the server average, uniform (FL-Simulator) | samples */
typedef struct {
    int weights;
} SamWeightsOptions;
/* the two-pass step's perturbation (docs/methods/sam.md §1, 2); fedism.c declares its own keys into the same struct */
enum { PERTURB_SAM, PERTURB_ASAM, PERTURB_GSAM };
typedef struct {
    int perturb;
    double asam_eta, gsam_alpha;
} SamPerturbOptions;
/* GSAM's lr-proportional radius over the rounds (docs/methods/sam.md §2) */
enum { RHO_CONSTANT, RHO_LR };
typedef struct {
    int rho_schedule;
    double rho_min;
} SamScheduleOptions;
/* lambda: FedSpeed's, FedSMOO's and FedLESAM-D's prox weight, FedLESAM-S's SCAFFOLD scale */
typedef struct {
    double lambda;
} SamLambdaOptions;
/* k_norm: the local step count K of the server formulas, K_bar (code) | each client's steps (actual) */
enum { K_NORM_CODE, K_NORM_ACTUAL };
typedef struct {
    int k_norm;
} KNormOptions;
extern const AlgoOptionPart algo_sam_radius_options, algo_sam_weights_options, algo_sam_perturb_options,
    algo_sam_schedule_options, algo_sam_lambda_options, algo_k_norm_options;
ALGO_OPTIONS_OF(sam_radius_of, SamRadiusOptions, algo_sam_radius_options)
ALGO_OPTIONS_OF(sam_weights_of, SamWeightsOptions, algo_sam_weights_options)
ALGO_OPTIONS_OF(sam_perturb_of, SamPerturbOptions, algo_sam_perturb_options)
ALGO_OPTIONS_OF(sam_schedule_of, SamScheduleOptions, algo_sam_schedule_options)
ALGO_OPTIONS_OF(sam_lambda_of, SamLambdaOptions, algo_sam_lambda_options)
ALGO_OPTIONS_OF(k_norm_of, KNormOptions, algo_k_norm_options)

/* SAM family (src/algo/sam.c). algo_sam_step: the two-pass step of FedSAM (docs/methods/sam.md §1, 2): SAM, ASAM
 * or GSAM after the row's perturbation part, with the radius hooks of the method's step part; algo_sam_step_with:
 * the same with the perturbation given (a row with its own perturbation keys); algo_sam_radius: the radius of
 * client c's steps this round. */
int algo_sam_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss);
int algo_sam_step_with(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss, const SamPerturbOptions *p);
double algo_sam_radius(const AlgoClientCtx *c);
/* The round_radius hook of the rows with the schedule part: rho every round, or GSAM's lr-proportional rho(t)
 * after rho_schedule, rho_min (docs/methods/sam.md §2). */
double algo_sam_lr_radius(const AlgoSetup *s, AlgoOptions o, int round);
/* FedISM (src/algo/fedism.c, docs/methods/sam.md §12): FedISM+'s rho(t) = rho_max ((t + 1)/T)^tau (its round_radius
 * hook). */
double algo_fedismplus_radius(const AlgoSetup *s, AlgoOptions o, int round);
/* The sharpness probe over client c's whole local set (src/algo/sam_diag.c; rows > 0: its first rows) at `state`,
 * streamed through c->svc->for_each_local_batch (*L0, *L1 = mean CE at state, state + e; pert: n_state floats of
 * scratch; c's scratch: algo_local_sharpness_scratch), as algo_sam_sharpness over a set in memory. */
int algo_local_sharpness(AlgoClientCtx *c, NnModel *model, const float *state, double rho, int64_t rows, float *pert,
                         double *L0, double *L1);
/* the client scratch algo_local_sharpness takes (a batch's logit gradients, for c->model) */
size_t algo_local_sharpness_scratch(const AlgoSetup *s);
/* More of sam.c for family wmsam: its validation (rho), weights (the weights part), sizes (work vectors of the
 * perturbation, diagnostics), the diagnostics' sizes and running means, K_bar (docs/methods/sam.md §0.2) and its server_init
 * (server scalar 0), the control variates of FedGAMMA (client vector 0 c_i, server vector 0 c, docs/methods/sam.md §5; k_norm a
 * K_NORM_* choice), and the official LESAM perturbation ([CODE-BUG], docs/methods/sam.md §8: d becomes it in place; first: scratch
 * of one float per tensor). */
int algo_sam_validate(const AlgoMethod *m, const AlgoSetup *s);
int algo_sam_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p);
void algo_sam_sizes(const AlgoSetup *s, AlgoSizes *z);
void algo_sam_diag_sizes(AlgoSizes *z);
void algo_sam_diag_add(AlgoClientCtx *c, double eps_norm, double grad_norm);
double algo_sam_k_bar(const AlgoSetup *s, const int64_t *client_sizes);
int algo_sam_k_bar_init(AlgoServerCtx *s, float *global);
void algo_sam_cv_end(AlgoClientCtx *c, int k_norm);
/* a client's 1/(K eta) in the control variates' change (K = k_bar (code) or its steps (actual); 0: no step), and
 * c <- c - (n c + sum)/N with sum the change sum of the Delta_i/(K_i eta), n the clients that stepped */
double algo_sam_cv_rate(int k_norm, double k_bar, int64_t n_steps, double lr);
void algo_sam_cv_apply(float *c, const float *sum, double n, int64_t n_params, int n_clients);
void algo_lesam_official(const NnModel *m, float *d, double rho, float *first);
/* A-FedSAM's parts (afedsam.c, docs/methods/sam.md §15), for its row in fedwmsam.c's family table */
extern const AlgoOptionPart afedsam_options;
extern const AlgoBatchTerm afedsam_term_part;
extern const AlgoClientReport afedsam_report_part;
extern const AlgoServerUpdate afedsam_update_part;
int afedsam_init(AlgoServerCtx *s, float *global);
int afedsam_validate(const AlgoMethod *m, const AlgoSetup *s);
void afedsam_sizes(const AlgoSetup *s, AlgoSizes *z);

/* Parts other families reuse (docs/methods/sam.md §4-7, 11 build on A.5, A.6, A.8, A.14, A.15); their settings are
 * arguments, so that every row passes its own key. */
void algo_scaffold_correct(AlgoClientCtx *c, float *grad); /* server.c: grad += c - c_k (option II; server vector 0,
                                                            * client vector 0) */
int feddyn_end(AlgoClientCtx *c);                     /* server.c: H_k += w_k - w^t (client vector 0) */
/* FedDyn's server step (server.c): the sum of the round's changes sum_k (w_k - w^t), FEDDYN_SUM, as sums[0]; its
 * finish S += that sum, w = avg + S/K (server-only vector 0: S); the part that is both */
#define FEDDYN_SUM { .source = ALGO_SUM_DELTA, .coef = ALGO_COEF_ONE }
int feddyn_finish(AlgoServerCtx *s, const float *sums, float *global);
extern const AlgoServerUpdate feddyn_update_part;
void algo_fedcm_blend(AlgoClientCtx *c, float *grad, double alpha); /* server.c: alpha g + (1 - alpha) D */
/* FedCM's server step (server.c): observe keeps 1/(K_loc lr), K_loc the round's mean steps (algo_server_keep);
 * after the average, D (server vector 0) = (w^t - avg) scale and the step eta_g */
int algo_fedcm_observe(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p);
void algo_fedcm_direction(AlgoServerCtx *s, float *global, double scale, double eta_g);
/* A number observe hands to finish within a round (server.c): algo_server_keep (observe) returns its place, zeroed
 * (what: for the message when the scratch is too small), algo_server_kept (finish) its value; it lives in the server
 * scratch, the same block for both, for which the method's sizes call algo_server_keep_sizes. */
double *algo_server_keep(AlgoServerCtx *s, const char *what);
double algo_server_kept(const AlgoServerCtx *s);
void algo_server_keep_sizes(AlgoSizes *z);
/* The server step's option part (key eta_g, every method whose server moves w^t along its own direction) and its
 * value in view o. */
extern const AlgoOptionPart algo_server_step_options;
double algo_server_step(AlgoOptions o);
/* w^{t+1} = w^t + eta_g (avg - w^t), written as avg + (eta_g - 1)(avg - w^t): algebraically the same, and eta_g = 1
 * gives the average bit for bit (the neutral setting of every method that takes the step). */
static inline float algo_server_step_to(double avg, double current, double eta_g)
{
    return (float)(avg + (eta_g - 1.0) * (avg - current));
}
int upload_train_loss(AlgoClientCtx *c);              /* fair.c: upload scalar 0 = L_k */
/* fair.c: FedLW's p_k ~ 1/(L_k + 1e-8), times n_k when times_samples (upload scalar 0 = L_k) */
void algo_fedlw_weights(const AlgoUpload *u, int m, double *p, int times_samples);
int fednolowe_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p); /* fair.c */

#endif
