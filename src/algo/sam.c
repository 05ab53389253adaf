/* Method family 'sam' (spec algorithms-sam 0-8, 11, 16): the SAM, ASAM and GSAM local steps, FedLESAM's
 * single-backprop global-direction step, and the rows FedSAM, MoFedSAM, FedGAMMA, FedSpeed, FedSMOO,
 * FedLESAM, FedLESAM-S, FedLESAM-D and FedLWSAM.
 *
 * The step order of the FL-Simulator family (spec 0.2), written once in sam_two_pass / lesam_pass:
 *   1. the perturbation comes from the pure minibatch-loss gradient (c->grad_pure: no correction, no clip,
 *      no weight decay); the perturbed pass runs with BatchNorm running statistics frozen (spec 0.3);
 *   2. w is restored from a saved copy, bit for bit (the codes subtract eps again; spec 0.3 [PROPOSED]);
 *   3. the runtime's grad_terms adds the method's local terms and correction at w and clips (train.clip);
 *   4. FedDyn-style methods add lambda w after the clip (omega = wd + lambda), and the configured optimiser
 *      adds the weight decay and steps.
 *
 * Key layout shared by the rows: hp 0 rho, hp 1 weights (uniform|samples; FedLWSAM: lw); the rows with a
 * choice of perturbation have perturb, asam_eta, gsam_alpha at hp 2-4 (algo_sam_step reads them there) and
 * rho_schedule, rho_min at hp 5-6 (read by this file's radius hook, algo_sam_lr_radius).
 * Upload scalars: the row's own first, then the diagnostics (mean ||eps|| and mean ||g|| of the client's
 * steps, AlgoSizes.upload_perturb_norm / upload_grad_norm). Parameters-only rules (control variates, dual
 * variables, momentum) cover [0, n_params); buffers are averaged with the method's weights (spec 0.3). */
#include "algo_internal.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

#define SAM_NORM_EPS 1e-7  /* e in rho g / (||g|| + e): FL-Simulator ESAM, DRegSAM, LESAM (spec 0.3) */
#define GSAM_EPS 1e-12     /* GSAM's cosine and projection (spec 2) */

enum { HP_RHO, HP_WEIGHTS };
enum { HP_PERTURB = 2, HP_ASAM_ETA, HP_GSAM_ALPHA, HP_RHO_SCHEDULE, HP_RHO_MIN, HP_SAM_END };
enum { PERTURB_SAM, PERTURB_ASAM, PERTURB_GSAM };
enum { RHO_CONSTANT, RHO_LR };
enum { MO_ALPHA = HP_SAM_END, MO_K_NORM };       /* MoFedSAM */
enum { GAMMA_K_NORM = HP_SAM_END };              /* FedGAMMA */
enum { SPEED_LAMBDA = HP_SAM_END, SPEED_MERGE }; /* FedSpeed */
enum { SMOO_LAMBDA = 2 };                        /* FedSMOO */
enum { LE_MODE = 2, LE_COMPAT, LE_LAMBDA, LE_K_NORM }; /* FedLESAM(-S, -D) */
enum { LE_PAPER, LE_CODE };
enum { COMPAT_INTENDED, COMPAT_OFFICIAL };
enum { K_NORM_CODE, K_NORM_ACTUAL };
enum { SC_K_BAR };                               /* server scalar 0 of FedGAMMA, FedLESAM-S */

/* ---- shared ------------------------------------------------------------------------------------------- */

/* Running means over the round's steps (c->step counts from 0; the scalars start at 0). */
static void diag_add(AlgoClientCtx *c, double eps_norm, double grad_norm)
{
    const AlgoSizes *z = c->sizes;
    const double k = (double)(c->step + 1);
    if (z->upload_perturb_norm > 0) {
        double *v = c->upload_scalars + z->upload_perturb_norm - 1;
        *v += (eps_norm - *v) / k;
    }
    if (z->upload_grad_norm > 0) {
        double *v = c->upload_scalars + z->upload_grad_norm - 1;
        *v += (grad_norm - *v) / k;
    }
}

/* the two diagnostic upload scalars after the row's own */
static void diag_sizes(AlgoSizes *z)
{
    z->upload_perturb_norm = z->upload_scalars + 1;
    z->upload_grad_norm = z->upload_scalars + 2;
    z->upload_scalars += 2;
}

static double norm_eps(const AlgoClientCtx *c)
{
    const AlgoLocalStep *st = c->method ? c->method->step : NULL;
    return st && st->norm_eps > 0.0 ? st->norm_eps : SAM_NORM_EPS;
}

double algo_sam_radius(const AlgoClientCtx *c)
{
    const AlgoLocalStep *st = c->method ? c->method->step : NULL;
    double rho = st && st->round_radius ? st->round_radius(c->setup, c->hp, c->round) : c->hp[HP_RHO];
    if (st && st->client_radius) rho = st->client_radius(c, rho);
    return rho;
}

/* K_bar = E n_0 / B from client 0's size, as a real number (FL-Simulator, spec 0.2); train.steps when the
 * round is a fixed step count */
static double k_bar(const AlgoSetup *s, const int64_t *client_sizes)
{
    if (s->steps > 0) return (double)s->steps;
    return (double)s->epochs * (double)client_sizes[0] / (double)s->batch_size;
}

/* GSAM's radius schedule (spec 2): rho_t - rho_min is proportional to lr_t - lr_min, rho_t = rho_max = rho at
 * lr_max, rho_min at lr_min, over the run's schedule lr_t = lr lr_decay^t, t = 0..T-1 (lr_t multiplied
 * round by round as the runtime does, so that the values are the rounds' own). A constant lr gives rho, as
 * GSAM's scheduler does when its max and min lr are equal. */
double algo_sam_lr_radius(const AlgoSetup *s, const double *hp, int round)
{
    const double rho = hp[HP_RHO];
    if ((int)hp[HP_RHO_SCHEDULE] != RHO_LR) return rho;
    double lr_t = s->lr, lr_min = s->lr;
    for (int t = 1; t < s->rounds; t++) {
        lr_min *= s->lr_decay;
        if (t == round) lr_t = lr_min;
    }
    if (round >= s->rounds) lr_t = lr_min; /* past the schedule's end (not reached by a run) */
    const double lr_max = s->lr;
    if (!(lr_max > lr_min)) return rho;
    const double rho_min = hp[HP_RHO_MIN];
    return rho_min + (rho - rho_min) * (lr_t - lr_min) / (lr_max - lr_min);
}

/* rho finite and >= 0 (also rho(t) of a round_radius hook, every round); refuses naming the keys */
static int sam_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    if (!isfinite(s->hp[HP_RHO]) || s->hp[HP_RHO] < 0.0)
        return algo_refuse(m, "[algo] rho = %g must be a finite number >= 0", s->hp[HP_RHO]);
    if (algo_hp_index(m, "rho_schedule") == HP_RHO_SCHEDULE && (int)s->hp[HP_RHO_SCHEDULE] == RHO_LR &&
        s->hp[HP_RHO_MIN] > s->hp[HP_RHO])
        return algo_refuse(m, "[algo] rho_min = %g is larger than rho = %g (rho is the largest radius of "
                           "rho_schedule = lr): lower rho_min or raise rho", s->hp[HP_RHO_MIN], s->hp[HP_RHO]);
    const AlgoLocalStep *st = m->step;
    if (st && st->round_radius)
        for (int t = 0; t < s->rounds; t++) {
            const double r = st->round_radius(s, s->hp, t);
            if (!isfinite(r) || r < 0.0)
                return algo_refuse(m, "the radius schedule gives rho(%d) = %g (must be finite and >= 0): check the "
                                   "radius keys ([algo] rho and the schedule's keys)", t, r);
        }
    return FH_OK;
}

/* weights = uniform (FL-Simulator server.py; default) | samples */
static int sam_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    return ((int)s->hp[HP_WEIGHTS] ? &algo_weights_samples : &algo_weights_uniform)->weights(s, u, m, p);
}

static const AlgoServerWeights sam_weights_part = { .weights = sam_weights };

/* ---- the two-pass step: SAM, ASAM, GSAM (spec 1, 2), FedSpeed's merge (6), FedSMOO's dual (7) --------- */

typedef struct {
    int perturb;         /* PERTURB_* */
    double rho, asam_eta, gsam_alpha;
    double merge;        /* FedSpeed's a: (1 - a) g + a g_s; 1: the perturbed gradient alone */
    double extra_decay;  /* lambda of omega = wd + lambda, added after the clip */
    float *mu;           /* FedSMOO: mu_i [n_params], updated every step; NULL otherwise */
    const float *s;      /* FedSMOO: the global perturbation s */
} SamPass;

/* ASAM (spec 1): eps = rho T^2 g / (||T g|| + e), T = |w| + eta on weight tensors (conv, linear and norm
 * weights), 1 on biases; g becomes T g; returns ||eps||. Works on the model's tensor table. */
static double asam_perturb(const NnModel *m, float *w, float *g, double rho, double eta, double e)
{
    const float a = (float)eta;
    double tg = 0.0;
    for (int v = 0; v < m->n_views; v++) {
        const NnParamView *pv = &m->views[v];
        if (!pv->trainable) continue;
        float *gv = g + pv->offset;
        const float *wv = w + pv->offset;
        if (pv->role == NN_ROLE_WEIGHT || pv->role == NN_ROLE_NORM_WEIGHT) {
#pragma omp simd reduction(+ : tg)
            for (int64_t j = 0; j < pv->count; j++) {
                gv[j] *= fabsf(wv[j]) + a;
                tg += (double)gv[j] * (double)gv[j];
            }
        } else {
#pragma omp simd reduction(+ : tg)
            for (int64_t j = 0; j < pv->count; j++) tg += (double)gv[j] * (double)gv[j];
        }
    }
    const float scale = (float)(rho / (sqrt(tg) + e));
    double sq = 0.0;
    for (int v = 0; v < m->n_views; v++) {
        const NnParamView *pv = &m->views[v];
        if (!pv->trainable) continue;
        const float *gv = g + pv->offset;
        float *wv = w + pv->offset;
        const int scaled = pv->role == NN_ROLE_WEIGHT || pv->role == NN_ROLE_NORM_WEIGHT;
#pragma omp simd reduction(+ : sq)
        for (int64_t j = 0; j < pv->count; j++) {
            const float t = scaled ? fabsf(wv[j]) + a : 1.0f, eps = scale * t * gv[j];
            wv[j] += eps;
            sq += (double)eps * (double)eps;
        }
    }
    return sqrt(sq);
}

/* work[0]: the saved weights; work[1]: the unperturbed gradient (GSAM, FedSpeed's merge) */
static int sam_two_pass(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss, const SamPass *o)
{
    NnModel *m = c->model;
    const int64_t P = c->n_params;
    float *w = m->state, *g = m->grad, *saved = c->work;
    float *g0 = o->perturb == PERTURB_GSAM || o->merge != 1.0 ? c->work + c->n_state : NULL;
    const double e = norm_eps(c);
    double loss0 = 0.0, loss1 = 0.0;
    c->grad_pure = 1;
    int status = grad(env, &loss0); /* fb 1 at w; BatchNorm statistics are updated here only */
    if (status != FH_OK) {
        c->grad_pure = 0;
        return status;
    }
    const double gnorm = nn_vec_norm_f64(g, P);
    if (g0) nn_vec_copy(g0, g, P);
    double eps_norm;
    if (o->mu) {
        /* FedSMOO (DRegSAM): g' = g - mu_i - s; eps = rho g'/(||g'|| + e); mu_i <- mu_i + eps - s */
        float *mu = o->mu;
        const float *s = o->s;
#pragma omp simd
        for (int64_t j = 0; j < P; j++) g[j] = g[j] - mu[j] - s[j];
        const float scale = (float)(o->rho / (nn_vec_norm_f64(g, P) + e));
        double sq = 0.0;
#pragma omp simd reduction(+ : sq)
        for (int64_t j = 0; j < P; j++) {
            const float eps = scale * g[j];
            saved[j] = w[j];
            w[j] += eps;
            mu[j] += eps - s[j];
            sq += (double)eps * (double)eps;
        }
        eps_norm = sqrt(sq);
    } else if (o->perturb == PERTURB_ASAM) {
        nn_vec_copy(saved, w, P);
        eps_norm = asam_perturb(m, w, g, o->rho, o->asam_eta, e);
    } else {
        const float scale = (float)(o->rho / (gnorm + e)); /* SAM (and GSAM's ascent): eps = rho g/(||g|| + e) */
#pragma omp simd
        for (int64_t j = 0; j < P; j++) {
            saved[j] = w[j];
            w[j] += scale * g[j];
        }
        eps_norm = (double)scale * gnorm;
    }
    const int bn = m->bn_update_running;
    m->bn_update_running = 0; /* fb 2 at w + eps, running statistics frozen (spec 0.3) */
    status = grad(env, &loss1);
    m->bn_update_running = bn;
    nn_vec_copy(w, saved, P); /* exact restore */
    c->grad_pure = 0;
    FH_CHECK(status);
    if (o->perturb == PERTURB_GSAM && o->gsam_alpha != 0.0) {
        /* GSAM: d = g_p - alpha (g - cos ||g|| g_p/||g_p||), the ascent on the part of g orthogonal to g_p */
        const double gpn = nn_vec_norm_f64(g, P), cosq = nn_vec_dot_f64(g0, g, P) / (gnorm * gpn + GSAM_EPS);
        const float coef = (float)(cosq * gnorm / (gpn + GSAM_EPS)), a = (float)o->gsam_alpha;
#pragma omp simd
        for (int64_t j = 0; j < P; j++) g[j] = g[j] - a * (g0[j] - coef * g[j]);
    }
    if (o->merge != 1.0) {
        /* FedSpeed paper: (1 - a) g + a g_s */
        const float a = (float)o->merge, b = (float)(1.0 - o->merge);
#pragma omp simd
        for (int64_t j = 0; j < P; j++) g[j] = b * g0[j] + a * g[j];
    }
    diag_add(c, eps_norm, gnorm);
    double value = loss0; /* the unperturbed loss is reported (FedLWSAM's L_i, spec 11) */
    c->grad_terms(c, g, &value);
    if (o->extra_decay != 0.0) nn_vec_axpy(g, (float)o->extra_decay, w, P);
    c->optimizer_step(c, w, g);
    *loss = value;
    return FH_OK;
}

static SamPass sam_pass_of(const AlgoClientCtx *c)
{
    return (SamPass){ .perturb = (int)c->hp[HP_PERTURB], .rho = algo_sam_radius(c), .asam_eta = c->hp[HP_ASAM_ETA],
                      .gsam_alpha = c->hp[HP_GSAM_ALPHA], .merge = 1.0 };
}

int algo_sam_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    const SamPass o = sam_pass_of(c);
    return sam_two_pass(c, grad, env, loss, &o);
}

/* FedSpeed (spec 6): SAM with the prox correction (correction part) and lambda w after the clip */
static int speed_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    SamPass o = sam_pass_of(c);
    o.extra_decay = c->hp[SPEED_LAMBDA];
    o.merge = c->hp[SPEED_MERGE];
    return sam_two_pass(c, grad, env, loss, &o);
}

/* FedSMOO (spec 7): client vector 1 = mu_i, server vector 0 = s */
static int smoo_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    const SamPass o = { .perturb = PERTURB_SAM, .rho = algo_sam_radius(c), .merge = 1.0,
                        .extra_decay = c->hp[SMOO_LAMBDA], .mu = c->client_vecs + c->n_state, .s = c->server_vecs };
    return sam_two_pass(c, grad, env, loss, &o);
}

/* work vectors of the rows with a perturbation choice: the saved w, and g for GSAM */
static void sam_pick_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->work_vectors = (int)s->hp[HP_PERTURB] == PERTURB_GSAM ? 2 : 1;
    diag_sizes(z);
}

static const AlgoLocalStep sam_step_part = { .step = algo_sam_step, .round_radius = algo_sam_lr_radius };
static const AlgoLocalStep speed_step_part = { .step = speed_step, .round_radius = algo_sam_lr_radius };
static const AlgoLocalStep smoo_step_part = { .step = smoo_step };

/* ---- FedDyn-style prox correction (FedSpeed, FedSMOO, FedLESAM-D; spec 6) ----------------------------- */

/* lambda (h_i - w^t) before the clip; lambda w comes after it (the step). hp index of lambda per row. */
static void dyn_correct_at(AlgoClientCtx *c, float *grad, int hp_lambda)
{
    const float lambda = (float)c->hp[hp_lambda];
    const float *h = c->client_vecs, *wt = c->global;
#pragma omp simd
    for (int64_t j = 0; j < c->n_params; j++) grad[j] += lambda * (h[j] - wt[j]);
}

static void speed_correct(AlgoClientCtx *c, float *grad) { dyn_correct_at(c, grad, SPEED_LAMBDA); }
static void smoo_correct(AlgoClientCtx *c, float *grad) { dyn_correct_at(c, grad, SMOO_LAMBDA); }
static void lesam_d_correct(AlgoClientCtx *c, float *grad) { dyn_correct_at(c, grad, LE_LAMBDA); }

static const AlgoGradCorrection speed_correct_part = { .correct = speed_correct };
static const AlgoGradCorrection smoo_correct_part = { .correct = smoo_correct };
static const AlgoGradCorrection lesam_d_correct_part = { .correct = lesam_d_correct };

/* ---- control variates with K_bar (FedGAMMA, FedLESAM-S; spec 5) --------------------------------------- */

/* client vector 0: c_i; server vector 0: c; server scalar 0: K_bar.
 * Client: c_i <- c_i - c - Delta_i/(K eta), K = K_bar (k_norm = code) or the steps taken (actual). */
static void cv_end(AlgoClientCtx *c, int hp_k_norm)
{
    const double K = (int)c->hp[hp_k_norm] == K_NORM_CODE ? c->server_scalars[SC_K_BAR] : (double)c->step;
    if (!(K > 0.0) || c->step == 0) return;
    const double inv = 1.0 / (K * c->lr);
    float *ci = c->client_vecs;
    const float *sc = c->server_vecs, *y = c->model->state, *wt = c->global;
    for (int64_t j = 0; j < c->n_params; j++)
        ci[j] = (float)((double)ci[j] - (double)sc[j] - ((double)y[j] - (double)wt[j]) * inv);
}

/* Server: c <- c + (1/N) sum_i (c_i_new - c_i), with c_i_new - c_i = -c - Delta_i/(K_i eta) derived from
 * the uploaded model (so only w_i travels up; spec 5 payload); N = all clients. */
static int cv_update(AlgoServerCtx *s, const AlgoUpload *u, int m, int hp_k_norm)
{
    const int64_t P = s->n_params;
    double *acc = NULL;
    FH_CHECK(fh_calloc(&acc, (size_t)P, sizeof *acc, "control variate sum"));
    float *cv = s->server_vecs;
    for (int i = 0; i < m; i++) {
        const double K = (int)s->hp[hp_k_norm] == K_NORM_CODE ? s->server_scalars[SC_K_BAR] : (double)u[i].n_steps;
        if (!(K > 0.0) || u[i].n_steps == 0) continue;
        const double inv = 1.0 / (K * s->lr);
        const float *y = u[i].state, *wt = s->current;
        for (int64_t j = 0; j < P; j++) acc[j] += -(double)cv[j] - ((double)y[j] - (double)wt[j]) * inv;
    }
    for (int64_t j = 0; j < P; j++) cv[j] = (float)((double)cv[j] + acc[j] / s->n_clients);
    fh_free(&acc);
    return FH_OK;
}

static int k_bar_init(AlgoServerCtx *s, float *global)
{
    s->server_scalars[SC_K_BAR] = k_bar(s->setup, s->client_sizes);
    return FH_OK;
}

/* ---- FedGAMMA (spec 5) -------------------------------------------------------------------------------- */

static int gamma_end(AlgoClientCtx *c)
{
    cv_end(c, GAMMA_K_NORM);
    return FH_OK;
}

static int gamma_update(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global)
{
    FH_CHECK(algo_average(s, u, m, p, global));
    return cv_update(s, u, m, GAMMA_K_NORM);
}

static const AlgoClientReport gamma_report_part = { .end = gamma_end };
static const AlgoServerUpdate gamma_update_part = { .update = gamma_update };

/* ---- FedSMOO server and report (spec 7) --------------------------------------------------------------- */

/* h_i += Delta_i (FedDyn's), upload mu_i */
static int smoo_end(AlgoClientCtx *c)
{
    FH_CHECK(feddyn_end(c));
    nn_vec_copy(c->upload_vecs, c->client_vecs + c->n_state, c->n_params);
    memset(c->upload_vecs + c->n_params, 0, (size_t)(c->n_state - c->n_params) * sizeof(float));
    return FH_OK;
}

/* FedDyn's update (H += sum Delta_i; w = avg + H/N), then s = rho mu_bar/(||mu_bar|| + 1e-7), mu_bar the
 * weighted mean of the uploaded mu_i (uniform by default: (1/m) sum, as the code) */
static int smoo_update(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global)
{
    FH_CHECK(feddyn_update(s, u, m, p, global));
    float *sv = s->server_vecs;
    FH_CHECK(algo_average_range(s, u, m, p, 0, 0, s->n_params, sv));
    const float scale = (float)(s->hp[HP_RHO] / (nn_vec_norm_f64(sv, s->n_params) + SAM_NORM_EPS));
    nn_vec_scale(sv, scale, s->n_params);
    return FH_OK;
}

static const AlgoClientReport smoo_report_part = { .end = smoo_end };
static const AlgoServerUpdate smoo_update_part = { .update = smoo_update };
static const AlgoClientReport dyn_report_part = { .end = feddyn_end };
static const AlgoServerUpdate dyn_update_part = { .update = feddyn_update };

/* ---- MoFedSAM (spec 4): FedCM's correction and server direction --------------------------------------- */

/* FedCM's parts read alpha at hp 0 and eta_g at hp 1: they are called with that view */
static void mofedsam_correct(AlgoClientCtx *c, float *grad)
{
    const double *hp = c->hp, cm[2] = { hp[MO_ALPHA], 1.0 };
    c->hp = cm;
    fedcm_correct(c, grad);
    c->hp = hp;
}

/* w^{t+1} = w^t + mean Delta; mom = -Delta_bar/(K eta_t), K = K_bar (code) or the mean steps of the round
 * (actual: FedCM's update itself) */
static int mofedsam_update(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global)
{
    const double cm[2] = { s->hp[MO_ALPHA], 1.0 };
    if ((int)s->hp[MO_K_NORM] == K_NORM_ACTUAL) {
        AlgoServerCtx view = *s;
        view.hp = cm;
        return fedcm_update(&view, u, m, p, global);
    }
    FH_CHECK(algo_average(s, u, m, p, global));
    const double scale = 1.0 / (k_bar(s->setup, s->client_sizes) * s->lr);
    float *D = s->server_vecs;
    for (int64_t j = 0; j < s->n_params; j++) D[j] = (float)(((double)s->current[j] - (double)global[j]) * scale);
    return FH_OK;
}

static const AlgoGradCorrection mofedsam_correct_part = { .correct = mofedsam_correct };
static const AlgoServerUpdate mofedsam_update_part = { .update = mofedsam_update };

/* ---- FedGAMMA's correction: SCAFFOLD's (c - c_i before the clip), option II view -------------------- */

static void gamma_correct(AlgoClientCtx *c, float *grad)
{
    const double *hp = c->hp, scaf[3] = { 0.0, 0.0, 1.0 }; /* variant = option2, weights, eta_g = 1 */
    c->hp = scaf;
    scaffold_correct(c, grad);
    c->hp = hp;
}

static const AlgoGradCorrection gamma_correct_part = { .correct = gamma_correct };

/* ---- FedLESAM (spec 8): a fixed global-direction perturbation, one fb per step ------------------------ */

/* Paper mode: the last client vector is w_old (the global model the client last received). Code mode: the
 * last server vector is gu = w^t - w^{t-1} (broadcast). FedLESAM-S: client vector 0 c_i, server vector 0 c;
 * FedLESAM-D: client vector 0 h_i, server-only vector 0 sum_k h_k. work[0]: eps of the round; work[1]: the
 * saved weights. */

/* [CODE-BUG] LESAM.py (spec 8; also FedWMSAM's WMSAM.py, spec 9): d becomes the official perturbation, tensor j
 * the constant rho d[j] / (sum_{j<J} |d[j]| + 1e-7), d[j] the j-th element of the flat vector, J the number of
 * trainable tensors; first: scratch of J floats */
void algo_lesam_official(const NnModel *m, float *d, double rho, float *first)
{
    int J = 0;
    double l1 = 0.0;
    for (int v = 0; v < m->n_views; v++)
        if (m->views[v].trainable) {
            first[J] = d[J];
            l1 += fabs((double)d[J]);
            J++;
        }
    for (int v = 0, j = 0; v < m->n_views; v++) {
        const NnParamView *pv = &m->views[v];
        if (!pv->trainable) continue;
        const float value = (float)(rho * (double)first[j++] / (l1 + SAM_NORM_EPS));
        for (int64_t k = pv->offset; k < pv->offset + pv->count; k++) d[k] = value;
    }
}

static int lesam_begin(AlgoClientCtx *c)
{
    const int64_t P = c->n_params, N = c->n_state;
    float *eps = c->work;
    memset(eps, 0, (size_t)P * sizeof(float));
    const double rho = algo_sam_radius(c);
    if ((int)c->hp[LE_MODE] == LE_PAPER) {
        /* d = w_old - w^t; nothing stored before the first participation: no perturbation [PROPOSED] */
        if (c->has_state) {
            const float *old = c->client_vecs + (size_t)(c->sizes->client_vectors - 1) * N, *wt = c->global;
#pragma omp simd
            for (int64_t j = 0; j < P; j++) eps[j] = old[j] - wt[j];
        }
    } else {
        /* d = -gu (round 0: gu = 0) */
        const float *gu = c->server_vecs + (size_t)(c->sizes->server_vectors - 1) * N;
#pragma omp simd
        for (int64_t j = 0; j < P; j++) eps[j] = -gu[j];
    }
    if ((int)c->hp[LE_COMPAT] == COMPAT_OFFICIAL) {
        algo_lesam_official(c->model, eps, rho, c->work + N);
    } else {
        /* intended: eps = rho d/(||d|| + e) */
        const double n = nn_vec_norm_f64(eps, P);
        nn_vec_scale(eps, n > 0.0 ? (float)(rho / (n + norm_eps(c))) : 0.0f, P);
    }
    /* the round's ||eps|| is the diagnostic's running mean from the start; the step reads it back */
    c->upload_scalars[c->sizes->upload_perturb_norm - 1] = nn_vec_norm_f64(eps, P);
    return FH_OK;
}

static int lesam_pass(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss, double extra_decay)
{
    NnModel *m = c->model;
    const int64_t P = c->n_params;
    float *w = m->state, *g = m->grad, *eps = c->work, *saved = c->work + c->n_state;
    const double eps_norm = c->upload_scalars[c->sizes->upload_perturb_norm - 1];
    if (eps_norm > 0.0) {
        nn_vec_copy(saved, w, P);
        nn_vec_axpy(w, 1.0f, eps, P);
    }
    c->grad_pure = 1;
    const int status = grad(env, loss); /* the only fb, at w + eps: BatchNorm statistics come from it (0.3) */
    c->grad_pure = 0;
    if (eps_norm > 0.0) nn_vec_copy(w, saved, P);
    FH_CHECK(status);
    diag_add(c, eps_norm, nn_vec_norm_f64(g, P));
    c->grad_terms(c, g, loss);
    if (extra_decay != 0.0) nn_vec_axpy(g, (float)extra_decay, w, P);
    c->optimizer_step(c, w, g);
    return FH_OK;
}

static int lesam_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    return lesam_pass(c, grad, env, loss, 0.0);
}

static int lesam_d_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    return lesam_pass(c, grad, env, loss, c->hp[LE_LAMBDA]);
}

/* paper mode: w_old <- w^t */
static int lesam_end(AlgoClientCtx *c)
{
    if ((int)c->hp[LE_MODE] == LE_PAPER)
        nn_vec_copy(c->client_vecs + (size_t)(c->sizes->client_vectors - 1) * c->n_state, c->global, c->n_state);
    return FH_OK;
}

/* code mode: gu <- w^{t+1} - w^t (trainable part), after the row's own update */
static void lesam_global_step(AlgoServerCtx *s, const float *global)
{
    if ((int)s->hp[LE_MODE] != LE_CODE) return;
    float *gu = s->server_vecs + (size_t)(s->sizes->server_vectors - 1) * s->n_state;
    for (int64_t j = 0; j < s->n_params; j++) gu[j] = global[j] - s->current[j];
}

static int lesam_update(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global)
{
    FH_CHECK(algo_average(s, u, m, p, global));
    lesam_global_step(s, global);
    return FH_OK;
}

/* FedLESAM-S: lambda (c - c_i) before the clip (the code scales SCAFFOLD's correction by lamb; spec 8) */
static void lesam_s_correct(AlgoClientCtx *c, float *grad)
{
    const float lambda = (float)c->hp[LE_LAMBDA];
    const float *sc = c->server_vecs, *ci = c->client_vecs;
#pragma omp simd
    for (int64_t j = 0; j < c->n_params; j++) grad[j] += lambda * (sc[j] - ci[j]);
}

static int lesam_s_end(AlgoClientCtx *c)
{
    cv_end(c, LE_K_NORM);
    return lesam_end(c);
}

static int lesam_s_update(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global)
{
    FH_CHECK(algo_average(s, u, m, p, global));
    FH_CHECK(cv_update(s, u, m, LE_K_NORM));
    lesam_global_step(s, global);
    return FH_OK;
}

static int lesam_d_end(AlgoClientCtx *c)
{
    FH_CHECK(feddyn_end(c));
    return lesam_end(c);
}

static int lesam_d_update(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global)
{
    FH_CHECK(feddyn_update(s, u, m, p, global));
    lesam_global_step(s, global);
    return FH_OK;
}

/* paper mode: + w_old per client; code mode: + gu on the server */
static void lesam_mode_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    if ((int)s->hp[LE_MODE] == LE_PAPER) z->client_vectors += 1;
    else z->server_vectors += 1;
    z->work_vectors = 2;
    diag_sizes(z);
}

static const AlgoLocalStep lesam_step_part = { .step = lesam_step };
static const AlgoLocalStep lesam_d_step_part = { .step = lesam_d_step };
static const AlgoClientReport lesam_report_part = { .begin = lesam_begin, .end = lesam_end };
static const AlgoClientReport lesam_s_report_part = { .begin = lesam_begin, .end = lesam_s_end };
static const AlgoClientReport lesam_d_report_part = { .begin = lesam_begin, .end = lesam_d_end };
static const AlgoGradCorrection lesam_s_correct_part = { .correct = lesam_s_correct };
static const AlgoServerUpdate lesam_update_part = { .update = lesam_update };
static const AlgoServerUpdate lesam_s_update_part = { .update = lesam_s_update };
static const AlgoServerUpdate lesam_d_update_part = { .update = lesam_d_update };

/* ---- FedLWSAM (spec 11): FedSAM with FedLW / FedNoLoWe weights ---------------------------------------- */

enum { LW_FEDLW, LW_NOLOWE };

/* upload scalar 0: L_i, the sample-weighted mean of the unperturbed minibatch losses of the round */
static int lwsam_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    if ((int)s->hp[HP_WEIGHTS] == LW_NOLOWE) return fednolowe_weights(s, u, m, p);
    const double lw[1] = { 0.0 }; /* FedLW's times_samples = false: no n_i (spec 11) */
    AlgoServerCtx view = *s;
    view.hp = lw;
    return fedlw_weights(&view, u, m, p);
}

static const AlgoClientReport lwsam_report_part = { .end = upload_train_loss };
static const AlgoServerWeights lwsam_weights_part = { .weights = lwsam_weights };

/* ---- sizes -------------------------------------------------------------------------------------------- */

static void speed_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    sam_pick_sizes(s, z);
    if (s->hp[SPEED_MERGE] != 1.0) z->work_vectors = 2;
}

static void one_work_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->work_vectors = 1;
    diag_sizes(z);
}

/* ---- the registry rows -------------------------------------------------------------------------------- */

#define KEY_WEIGHTS                                                                                             \
    { "weights", 0, 0, 0, "uniform|samples",                                                                   \
      "server average: uniform (FL-Simulator server.py; spec 0.2 default) or samples (sample counts)" }
#define KEY_PERTURB                                                                                             \
    { "perturb", 0, 0, 0, "sam|asam|gsam",                                                                     \
      "local perturbation: sam (eps = rho g/(||g|| + 1e-7), spec 1; default), asam (eps = rho T^2 g/||T g||, "  \
      "T = |w| + asam_eta on weight tensors, 1 on biases; Caldarola's FedASAM uses rho 0.7), gsam (GSAM, spec 2: " \
      "descend g_p - gsam_alpha g_perp; the norms use e = 1e-7 like SAM so that gsam_alpha = 0 is SAM bit for bit; " \
      "GSAM's code uses 1e-12)" },                                                                             \
    { "asam_eta", 0.2, 0.0, 1e6, NULL,                                                                         \
      "ASAM offset eta_a in T = |w| + eta_a (perturb = asam); spec 1: Caldarola's FedASAM 0.2; FL-Simulator's "  \
      "adaptive ESAM has 0" },                                                                                 \
    { "gsam_alpha", 0.4, 0.0, 1.0, NULL,                                                                       \
      "GSAM alpha in [0, 1] (perturb = gsam): official GSAM example 0.4 (default), FedISM 0.1; 0 is SAM" },      \
    { "rho_schedule", 0, 0, 0, "constant|lr",                                                                  \
      "radius over the rounds: constant (rho every round; default) or lr (GSAM's scheduler, spec 2: rho_t = "   \
      "rho_min + (rho - rho_min)(lr_t - lr_min)/(lr_max - lr_min) over the run's lr schedule lr lr_decay^t, "   \
      "t = 0..T-1, so rho in round 0 and rho_min in the last; rho throughout when train.lr_decay = 1). Any "   \
      "perturbation; T is fl.rounds, so extending a run on resume stretches the rest of the schedule" },       \
    { "rho_min", 0.0, 0.0, 1e6, NULL,                                                                          \
      "smallest radius of rho_schedule = lr (at the last round's lr), <= rho; default 0" }
#define KEY_K_NORM                                                                                              \
    { "k_norm", 0, 0, 0, "code|actual",                                                                        \
      "local step count K in the server formulas: code (K_bar = E n_0/B from client 0's size, for every client, " \
      "as FL-Simulator; train.steps when set; default) or actual (each client's steps taken) [PROPOSED]" }
#define KEY_LAMBDA(what)                                                                                        \
    { "lambda", 0.1, 0.0, 1e6, NULL, what }
#define KEY_MODE                                                                                                \
    { "mode", 0, 0, 0, "paper|code",                                                                           \
      "global direction: paper (each client's stale global model w_old - w^t, stored per client; no "           \
      "perturbation at a client's first participation; default) or code (the official code: the last global "  \
      "step, eps = -rho gu/||gu||, gu = w^t - w^{t-1} broadcast; none in round 0). Equal under full "           \
      "participation" }
#define KEY_COMPAT                                                                                              \
    { "compat", 0, 0, 0, "intended|official",                                                                  \
      "intended (the full-vector perturbation rho d/||d||; default) or official ([CODE-BUG] of LESAM.py, spec " \
      "8: tensor j gets the constant rho d[j]/(sum_{j<J} |d[j]| + 1e-7) from the j-th element of the flat "      \
      "direction; reproduces published numbers). Nothing else changes" }

const AlgoMethod algo_family_sam[] = {
    {
        .name = "fedsam",
        .summary = "FedSAM: FedAvg with SAM local steps (or ASAM, GSAM), uniform average",
        .source = "spec algorithms-sam 1-3",
        .state = "-",
        .payload = "down 1, up 1",
        .step = &sam_step_part,
        .weights = &sam_weights_part,
        .validate = sam_validate,
        .sizes = sam_pick_sizes,
        .n_hp = 7,
        .hp = {
            { "rho", 0.1, 0.0, 1e6, NULL,
              "SAM radius rho >= 0; spec default 0.1 (FL-Simulator train.py, Caldarola's FedSAM); rho = 0 is "
              "FedAvg's SGD step bit for bit" },
            KEY_WEIGHTS,
            KEY_PERTURB,
        },
    },
    {
        .name = "mofedsam",
        .summary = "MoFedSAM: SAM local steps mixed with the server's per-step direction (FedCM momentum)",
        .source = "spec algorithms-sam 4",
        .state = "- | mom (P)",
        .payload = "down 2, up 1",
        .correction = &mofedsam_correct_part,
        .step = &sam_step_part,
        .weights = &sam_weights_part,
        .update = &mofedsam_update_part,
        .validate = sam_validate,
        .sizes = sam_pick_sizes,
        .n_server_vectors = 1,
        .n_hp = 9,
        .hp = {
            { "rho", 0.1, 0.0, 1e6, NULL, "SAM radius rho >= 0; spec default 0.1 (FL-Simulator)" },
            KEY_WEIGHTS,
            KEY_PERTURB,
            { "alpha", 0.1, 0.0, 1.0,
              NULL, "weight of the fresh SAM gradient in (0, 1] (FedCM convention, not a momentum coefficient): "
              "r = alpha g_s + (1 - alpha) mom before the clip; spec default 0.1 (README: 0.05 or 0.1); round 0 "
              "runs at alpha lr (mom = 0), as the code", 1, 0 },
            KEY_K_NORM,
        },
    },
    {
        .name = "fedgamma",
        .summary = "FedGAMMA: SAM local steps with SCAFFOLD control variates (c - c_i) in the descent gradient",
        .source = "spec algorithms-sam 5",
        .state = "c_i (P) | c (P), K_bar",
        .payload = "down 2, up 1",
        .correction = &gamma_correct_part,
        .step = &sam_step_part,
        .report = &gamma_report_part,
        .weights = &sam_weights_part,
        .update = &gamma_update_part,
        .server_init = k_bar_init,
        .validate = sam_validate,
        .sizes = sam_pick_sizes,
        .n_client_vectors = 1,
        .n_server_vectors = 1,
        .n_server_scalars = 1,
        .n_hp = 8,
        .hp = {
            { "rho", 0.01, 0.0, 1e6, NULL,
              "SAM radius rho >= 0; spec default 0.01 (FL-Simulator README's SAM lr for FedGamma). The control "
              "variates are not used in the perturbation, as in the code" },
            KEY_WEIGHTS,
            KEY_PERTURB,
            KEY_K_NORM,
        },
    },
    {
        .name = "fedspeed",
        .summary = "FedSpeed: SAM local steps with a FedDyn-like prox term and prox-correction h_i",
        .source = "spec algorithms-sam 6",
        .state = "h_i (P) | sum_k h_k (P, rank 0)",
        .payload = "down 1, up 1",
        .correction = &speed_correct_part,
        .step = &speed_step_part,
        .report = &dyn_report_part,
        .weights = &sam_weights_part,
        .update = &dyn_update_part,
        .validate = sam_validate,
        .sizes = speed_sizes,
        .n_client_vectors = 1,
        .n_server_private = 1,
        .n_hp = 9,
        .hp = {
            { "rho", 0.1, 0.0, 1e6, NULL, "SAM radius rho >= 0; spec default 0.1 (FL-Simulator)" },
            KEY_WEIGHTS,
            KEY_PERTURB,
            KEY_LAMBDA("prox weight lambda >= 0; spec default 0.1: r = g_s + lambda (h_i - w^t) before the clip, "
                       "+ (wd + lambda) w after it; h_i = sum of the client's past deltas; w^{t+1} = mean w_i + "
                       "mean over all N clients of h"),
            { "speed_merge", 1.0, 0.0, 1.0, NULL,
              "merge coefficient a: the descent gradient is (1 - a) g + a g_s; spec default 1 (the official code: "
              "the perturbed gradient alone); the paper merges the two (its coefficient is not pinned)" },
        },
    },
    {
        .name = "fedsmoo",
        .summary = "FedSMOO: FedSpeed's regulariser plus a dual variable mu_i that aligns local perturbations "
                   "with a global one s",
        .source = "spec algorithms-sam 7",
        .state = "h_i, mu_i (2P) | s (P), sum_k h_k (P, rank 0)",
        .payload = "down 2, up 2",
        .correction = &smoo_correct_part,
        .step = &smoo_step_part,
        .report = &smoo_report_part,
        .weights = &sam_weights_part,
        .update = &smoo_update_part,
        .validate = sam_validate,
        .sizes = one_work_sizes,
        .n_client_vectors = 2,
        .n_server_vectors = 1,
        .n_server_private = 1,
        .n_upload_vectors = 1,
        .n_hp = 3,
        .hp = {
            { "rho", 0.1, 0.0, 1e6, NULL,
              "SAM radius rho >= 0, also the radius of the global perturbation s = rho mu_bar/||mu_bar||; spec "
              "default 0.1" },
            KEY_WEIGHTS,
            KEY_LAMBDA("prox weight lambda >= 0; spec default 0.1 (as FedSpeed): lambda (h_i - w^t) before the "
                       "clip, (wd + lambda) w after it"),
        },
    },
    {
        .name = "fedlesam",
        .summary = "FedLESAM: one-backprop SAM with the global ascent direction estimated from global-model moves",
        .source = "spec algorithms-sam 8",
        .state = "w_old (P; mode = code: -) | - (mode = code: gu (P))",
        .payload = "down 1, up 1 (mode = code: down 2)",
        .step = &lesam_step_part,
        .report = &lesam_report_part,
        .weights = &sam_weights_part,
        .update = &lesam_update_part,
        .validate = sam_validate,
        .sizes = lesam_mode_sizes,
        .n_hp = 4,
        .hp = {
            { "rho", 0.1, 0.0, 1e6, NULL,
              "radius rho >= 0 of the fixed per-round perturbation; spec default 0.1 (train.py; the README's "
              "FedLESAM-S example uses 0.5 and advises tuning)" },
            KEY_WEIGHTS,
            KEY_MODE,
            KEY_COMPAT,
        },
    },
    {
        .name = "fedlesam-s",
        .summary = "FedLESAM-S: FedLESAM with SCAFFOLD control variates scaled by lambda",
        .source = "spec algorithms-sam 8 (and 5)",
        .state = "c_i (P) + w_old (P; mode = code: -) | c (P), K_bar (mode = code: + gu (P))",
        .payload = "down 2, up 1 (mode = code: down 3)",
        .correction = &lesam_s_correct_part,
        .step = &lesam_step_part,
        .report = &lesam_s_report_part,
        .weights = &sam_weights_part,
        .update = &lesam_s_update_part,
        .server_init = k_bar_init,
        .validate = sam_validate,
        .sizes = lesam_mode_sizes,
        .n_client_vectors = 1,
        .n_server_vectors = 1,
        .n_server_scalars = 1,
        .n_hp = 6,
        .hp = {
            { "rho", 0.1, 0.0, 1e6, NULL, "radius rho >= 0; spec default 0.1 (train.py; README example 0.5)" },
            KEY_WEIGHTS,
            KEY_MODE,
            KEY_COMPAT,
            KEY_LAMBDA("scale of the SCAFFOLD correction lambda (c - c_i) >= 0; spec default 0.1 (the code "
                       "multiplies SCAFFOLD's correction by lamb; FedGAMMA does not). Control variates as FedGAMMA "
                       "(c += (1/N) sum dc_i)"),
            KEY_K_NORM,
        },
    },
    {
        .name = "fedlesam-d",
        .summary = "FedLESAM-D: FedLESAM with FedDyn's dynamic regulariser (as FedSpeed)",
        .source = "spec algorithms-sam 8 (and 6)",
        .state = "h_i (P) + w_old (P; mode = code: -) | sum_k h_k (P, rank 0) (mode = code: + gu (P))",
        .payload = "down 1, up 1 (mode = code: down 2)",
        .correction = &lesam_d_correct_part,
        .step = &lesam_d_step_part,
        .report = &lesam_d_report_part,
        .weights = &sam_weights_part,
        .update = &lesam_d_update_part,
        .validate = sam_validate,
        .sizes = lesam_mode_sizes,
        .n_client_vectors = 1,
        .n_server_private = 1,
        .n_hp = 5,
        .hp = {
            { "rho", 0.1, 0.0, 1e6, NULL, "radius rho >= 0; spec default 0.1 (train.py)" },
            KEY_WEIGHTS,
            KEY_MODE,
            KEY_COMPAT,
            KEY_LAMBDA("prox weight lambda >= 0; spec default 0.1: lambda (h_i - w^t) before the clip, (wd + lambda) "
                       "w after it; server as FedSpeed; in code mode gu = w^{t+1} - w^t, the full change"),
        },
    },
    {
        .name = "fedlwsam",
        .summary = "FedLWSAM: FedSAM local training with loss-based server weights (FedLW or FedNoLoWe)",
        .source = "spec algorithms-sam 11",
        .state = "-",
        .payload = "down 1, up 1 + L_i",
        .step = &sam_step_part,
        .report = &lwsam_report_part,
        .weights = &lwsam_weights_part,
        .validate = sam_validate,
        .sizes = sam_pick_sizes,
        .n_upload_scalars = 1,
        .n_hp = 7,
        .hp = {
            { "rho", 0.05, 0.0, 1e6, NULL,
              "SAM radius rho >= 0; spec default 0.05 = FedSCAM's rho_max [PROPOSED, to match the FedSCAM "
              "comparison]" },
            { "lw", 0, 0, 0, "fedlw|nolowe",
              "weights from L_i, the sample-weighted mean unperturbed training loss of the round: fedlw (p_i ~ "
              "1/(L_i + eps), reconstructed [RECON]; fair.c's FedLW with eps = 1e-8, spec 11 writes 1e-12; default) "
              "or nolowe (FedNoLoWe's (1 - L_i/sum L)/(m - 1)); neither uses n_i" },
            KEY_PERTURB,
        },
    },
};
const int algo_family_sam_count = sizeof algo_family_sam / sizeof algo_family_sam[0];

/* ---- parts family 'wmsam' reuses (declared in algo_internal.h) ---------------------------------------- */

int algo_sam_validate(const AlgoMethod *m, const AlgoSetup *s) { return sam_validate(m, s); }
int algo_sam_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p) { return sam_weights(s, u, m, p); }
void algo_sam_sizes(const AlgoSetup *s, AlgoSizes *z) { sam_pick_sizes(s, z); }
void algo_sam_diag_sizes(AlgoSizes *z) { diag_sizes(z); }
void algo_sam_diag_add(AlgoClientCtx *c, double eps_norm, double grad_norm) { diag_add(c, eps_norm, grad_norm); }
double algo_sam_k_bar(const AlgoSetup *s, const int64_t *client_sizes) { return k_bar(s, client_sizes); }
int algo_sam_k_bar_init(AlgoServerCtx *s, float *global) { return k_bar_init(s, global); }
void algo_sam_cv_end(AlgoClientCtx *c, int hp_k_norm) { cv_end(c, hp_k_norm); }
int algo_sam_cv_update(AlgoServerCtx *s, const AlgoUpload *u, int m, int hp_k_norm) { return cv_update(s, u, m, hp_k_norm); }
