/* Internal to src/algo: the method families (one file each, one table of registry rows each) and helpers
 * shared by their parts. */
#ifndef FEDHET_ALGO_INTERNAL_H
#define FEDHET_ALGO_INTERNAL_H

#include "fedhet/algo.h"

/* Each family file defines its rows: const AlgoMethod algo_family_<name>[] and its row count. */
#define ALGO_FAMILY(name)                             \
    extern const AlgoMethod algo_family_##name[];     \
    extern const int algo_family_##name##_count;
ALGO_FAMILY(basic)    /* fedavg, uniform (spec A.1, A.2) */
ALGO_FAMILY(server)   /* fedavgm, fedprox, scaffold, feddyn, fednova, fedcm (A.3-A.8) */
ALGO_FAMILY(fair)     /* qfedavg, afl, fairfed, fedce, fedga, fedlw, fednolowe, feddisco (A.9-A.16) */
ALGO_FAMILY(repr)     /* moon, feddecorr, fedmr, fednp, fedgkd (A.17-A.21) */
ALGO_FAMILY(sam)      /* fedsam, mofedsam, fedgamma, fedspeed, fedsmoo, fedlesam(-s,-d), fedlwsam (sam 3-8, 11) */
ALGO_FAMILY(flood)    /* flood, also a plug-in (algorithms-sam 13) */
#undef ALGO_FAMILY

/* OOD score of logits z (A.23; higher = more in-distribution): 0 energy, 1 msp, 2 maxlogit, 3 gen */
double algo_ood_score(int score, const float *z, int classes);
/* FLOOD's lambda_t for round t from its hyperparameters (schedule, amplitude, halt, start) */
double algo_flood_lambda(const double *flood_hp, int round);

/* The error for a configuration a method cannot honour (FH_ERR_USAGE naming the method). */
int algo_refuse(const AlgoMethod *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* SAM family (src/algo/sam.c). algo_sam_step: the two-pass step of FedSAM (spec algorithms-sam 1, 2): SAM,
 * ASAM or GSAM after the keys rho, perturb, asam_eta, gsam_alpha at hp 0, 2, 3, 4, with the radius hooks
 * of the method's step part; algo_sam_radius: the radius of client c's steps this round. */
int algo_sam_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss);
double algo_sam_radius(const AlgoClientCtx *c);

/* Parts other families reuse (spec algorithms-sam 4-7, 11 build on A.5, A.6, A.8, A.14, A.15). */
void scaffold_correct(AlgoClientCtx *c, float *grad); /* server.c: grad += c - c_k (hp 0 = option2) */
int feddyn_end(AlgoClientCtx *c);                     /* server.c: H_k += w_k - w^t (client vector 0) */
int feddyn_update(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global); /* avg + sum H/K */
void fedcm_correct(AlgoClientCtx *c, float *grad);    /* server.c: alpha g + (1 - alpha) D (hp 0 = alpha) */
int fedcm_update(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global); /* D, hp 1 eta_g */
int upload_train_loss(AlgoClientCtx *c);              /* fair.c: upload scalar 0 = L_k */
int fedlw_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p);     /* fair.c (hp 0 times_samples) */
int fednolowe_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p); /* fair.c */

#endif
