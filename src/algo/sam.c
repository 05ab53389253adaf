/* Method family 'sam' (docs/methods/sam.md §0-8, 11, 16): the SAM, ASAM and GSAM local steps, FedLESAM's
 * single-backprop global-direction step, and the rows FedSAM, MoFedSAM, FedGAMMA, FedSpeed, FedSMOO,
 * FedLESAM, FedLESAM-S, FedLESAM-D and FedLWSAM.
 *
 * The step order of the FL-Simulator family (docs/methods/sam.md §0.2), written once in sam_two_pass / lesam_pass:
 *   1. the perturbation comes from the pure minibatch-loss gradient (c->state.grad_pure: no correction, no clip,
 *      no weight decay); the perturbed pass runs with BatchNorm running statistics frozen (docs/methods/sam.md §0.3);
 *   2. w is restored from a saved copy, bit for bit (the codes subtract eps again; docs/methods/sam.md §0.3 [PROPOSED]);
 *   3. the runtime's grad_terms adds the method's local terms and correction at w and clips (train.clip);
 *   4. FedDyn-style methods add lambda w after the clip (omega = wd + lambda), and the configured optimiser
 *      adds the weight decay and steps.
 *
 * Option parts shared by the rows (algo_internal.h): the radius rho, the server weights, the perturbation
 * (perturb, asam_eta, gsam_alpha: algo_sam_step reads them), GSAM's radius schedule (rho_schedule, rho_min: this
 * file's radius hook, algo_sam_lr_radius), the prox weight lambda and the step count normalisation k_norm; the
 * rows add their own parts (FedLESAM's mode and compat, MoFedSAM's alpha, FedSpeed's merge, FedLWSAM's lw).
 * Upload scalars: the row's own first, then the diagnostics (mean ||eps|| and mean ||g|| of the client's
 * steps, the upload scalars named perturb_norm and grad_norm). Parameters-only rules (control variates, dual
 * variables, momentum) cover [0, n_params); buffers are averaged with the method's weights (docs/methods/baselines.md §0.3). */
#include "algo_internal.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

#define SAM_NORM_EPS 1e-7  /* e in rho g / (||g|| + e): FL-Simulator ESAM, DRegSAM, LESAM (docs/methods/sam.md §0.3) */
#define GSAM_EPS 1e-12     /* GSAM's cosine and projection (docs/methods/sam.md §2) */

enum { WEIGHTS_UNIFORM, WEIGHTS_SAMPLES };
enum { SC_K_BAR }; /* server scalar 0 of FedGAMMA, FedLESAM-S, FedWMSAM */

/* ---- the shared option parts (algo_internal.h) ------------------------------------------------------- */

static const AlgoOption radius_keys[] = {
    { ALGO_NUMBER(SamRadiusOptions, rho), .def.f = 0.1, .lo = 0.0, .hi = 1e6,
      .help = "SAM radius rho >= 0; default 0.1 (FL-Simulator)" },
};
const AlgoOptionPart algo_sam_radius_options = ALGO_OPTION_PART("sam_radius", SamRadiusOptions, radius_keys);

static const AlgoOption weights_keys[] = {
    { ALGO_CHOICE(SamWeightsOptions, weights), .def.s = "uniform", .choices = "uniform|samples",
      .help = "server average: uniform (FL-Simulator server.py; docs/methods/sam.md §0.2 default) or samples (sample counts)" },
};
const AlgoOptionPart algo_sam_weights_options = ALGO_OPTION_PART("sam_weights", SamWeightsOptions, weights_keys);

static const AlgoOption perturb_keys[] = {
    { ALGO_CHOICE(SamPerturbOptions, perturb), .def.s = "sam", .choices = "sam|asam|gsam",
      .help = "local perturbation: sam (eps = rho g/(||g|| + 1e-7), docs/methods/sam.md §1; default), asam (eps = rho T^2 g/||T g||, "
              "T = |w| + asam_eta on weight tensors, 1 on biases; Caldarola's FedASAM uses rho 0.7), gsam (GSAM, docs/methods/sam.md §2: "
              "descend g_p - gsam_alpha g_perp; the norms use e = 1e-7 like SAM so that gsam_alpha = 0 is SAM bit for bit; "
              "GSAM's code uses 1e-12)" },
    { ALGO_NUMBER(SamPerturbOptions, asam_eta), .def.f = 0.2, .lo = 0.0, .hi = 1e6,
      .help = "ASAM offset eta_a in T = |w| + eta_a (perturb = asam); docs/methods/sam.md §1: Caldarola's FedASAM 0.2; FL-Simulator's "
              "adaptive ESAM has 0" },
    { ALGO_NUMBER(SamPerturbOptions, gsam_alpha), .def.f = 0.4, .lo = 0.0, .hi = 1.0,
      .help = "GSAM alpha in [0, 1] (perturb = gsam): official GSAM example 0.4 (default), FedISM 0.1; 0 is SAM" },
};
const AlgoOptionPart algo_sam_perturb_options = ALGO_OPTION_PART("sam_perturb", SamPerturbOptions, perturb_keys);

static const AlgoOption schedule_keys[] = {
    { ALGO_CHOICE(SamScheduleOptions, rho_schedule), .def.s = "constant", .choices = "constant|lr",
      .help = "radius over the rounds: constant (rho every round; default) or lr (GSAM's scheduler, docs/methods/sam.md §2: rho_t = "
              "rho_min + (rho - rho_min)(lr_t - lr_min)/(lr_max - lr_min) over the run's lr schedule lr lr_decay^t, "
              "t = 0..T-1, so rho in round 0 and rho_min in the last; rho throughout when train.lr_decay = 1). Any "
              "perturbation; T is fl.rounds, so extending a run on resume stretches the rest of the schedule" },
    { ALGO_NUMBER(SamScheduleOptions, rho_min), .def.f = 0.0, .lo = 0.0, .hi = 1e6,
      .help = "smallest radius of rho_schedule = lr (at the last round's lr), <= rho; default 0" },
};
const AlgoOptionPart algo_sam_schedule_options = ALGO_OPTION_PART("sam_schedule", SamScheduleOptions, schedule_keys);

static const AlgoOption lambda_keys[] = {
    { ALGO_NUMBER(SamLambdaOptions, lambda), .def.f = 0.1, .lo = 0.0, .hi = 1e6,
      .help = "prox weight lambda >= 0; default 0.1: r = g_s + lambda (h_i - w^t) before the clip, "
              "+ (wd + lambda) w after it; h_i = sum of the client's past deltas; w^{t+1} = mean w_i + "
              "mean over all N clients of h" },
};
const AlgoOptionPart algo_sam_lambda_options = ALGO_OPTION_PART("sam_lambda", SamLambdaOptions, lambda_keys);

static const AlgoOption k_norm_keys[] = {
    { ALGO_CHOICE(KNormOptions, k_norm), .def.s = "code", .choices = "code|actual",
      .help = "local step count K in the server formulas: code (K_bar = E n_0/B from client 0's size, for every client, "
              "as FL-Simulator; train.steps when set; default) or actual (each client's steps taken) [PROPOSED]" },
};
const AlgoOptionPart algo_k_norm_options = ALGO_OPTION_PART("k_norm", KNormOptions, k_norm_keys);

/* ---- shared ------------------------------------------------------------------------------------------- */

/* Running means over the round's steps (c->state.step counts from 0; the scalars start at 0). */
static void diag_add(AlgoClientCtx *c, double eps_norm, double grad_norm)
{
    const AlgoSizes *z = c->round->sizes;
    const double k = (double)(c->state.step + 1);
    const int at_eps = algo_upload_index(z, "perturb_norm"), at_grad = algo_upload_index(z, "grad_norm");
    if (at_eps >= 0) {
        double *v = c->state.upload_scalars + at_eps;
        *v += (eps_norm - *v) / k;
    }
    if (at_grad >= 0) {
        double *v = c->state.upload_scalars + at_grad;
        *v += (grad_norm - *v) / k;
    }
}

/* the two diagnostic upload scalars after the row's own */
static void diag_sizes(AlgoSizes *z)
{
    algo_upload_add(z, "perturb_norm", ALGO_SHOW_MEAN);
    algo_upload_add(z, "grad_norm", ALGO_SHOW_MEAN);
}

static double norm_eps(const AlgoClientCtx *c)
{
    const AlgoLocalStep *st = c->round->method ? c->round->method->step : NULL;
    return st && st->norm_eps > 0.0 ? st->norm_eps : SAM_NORM_EPS;
}

double algo_sam_radius(const AlgoClientCtx *c)
{
    const AlgoLocalStep *st = c->round->method ? c->round->method->step : NULL;
    double rho = st && st->round_radius ? st->round_radius(c->round->setup, c->round->options, c->round->t)
                                        : sam_radius_of(c->round->options)->rho;
    if (st && st->client_radius) rho = st->client_radius(c, rho);
    return rho;
}

/* K_bar = E n_0 / B from client 0's size, as a real number (FL-Simulator, docs/methods/sam.md §0.2); train.steps when the
 * round is a fixed step count */
static double k_bar(const AlgoSetup *s, const int64_t *client_sizes)
{
    if (s->steps > 0) return (double)s->steps;
    return (double)s->epochs * (double)client_sizes[0] / (double)s->batch_size;
}

/* GSAM's radius schedule (docs/methods/sam.md §2): rho_t - rho_min is proportional to lr_t - lr_min, rho_t = rho_max = rho at
 * lr_max, rho_min at lr_min, over the run's schedule lr_t = lr lr_decay^t, t = 0..T-1 (nn_lr_of_round: the
 * rounds' own values). A constant lr gives rho, as GSAM's scheduler does when its max and min lr are equal. */
double algo_sam_lr_radius(const AlgoSetup *s, AlgoOptions o, int round)
{
    const double rho = sam_radius_of(o)->rho;
    const SamScheduleOptions *sched = sam_schedule_of(o);
    if (sched->rho_schedule != RHO_LR) return rho;
    const int last = s->rounds - 1;
    /* past the schedule's end (not reached by a run): its last lr */
    const double lr_t = nn_lr_of_round(s->lr, s->lr_decay, round < last ? round : last);
    const double lr_min = nn_lr_of_round(s->lr, s->lr_decay, last), lr_max = s->lr;
    if (!(lr_max > lr_min)) return rho;
    const double rho_min = sched->rho_min;
    return rho_min + (rho - rho_min) * (lr_t - lr_min) / (lr_max - lr_min);
}

/* rho finite and >= 0 (also rho(t) of a round_radius hook, every round); refuses naming the keys */
static int sam_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    const double rho = sam_radius_of(s->options)->rho;
    if (!isfinite(rho) || rho < 0.0) return algo_refuse(m, "[algo] rho = %g must be a finite number >= 0", rho);
    const SamScheduleOptions *sched = algo_options_find(s->options, &algo_sam_schedule_options);
    if (sched && sched->rho_schedule == RHO_LR && sched->rho_min > rho)
        return algo_refuse(m, "[algo] rho_min = %g is larger than rho = %g (rho is the largest radius of "
                           "rho_schedule = lr): lower rho_min or raise rho", sched->rho_min, rho);
    const AlgoLocalStep *st = m->step;
    if (st && st->round_radius)
        for (int t = 0; t < s->rounds; t++) {
            const double r = st->round_radius(s, s->options, t);
            if (!isfinite(r) || r < 0.0)
                return algo_refuse(m, "the radius schedule gives rho(%d) = %g (must be finite and >= 0): check the "
                                   "radius keys ([algo] rho and the schedule's keys)", t, r);
        }
    return FH_OK;
}

/* weights = uniform (FL-Simulator server.py; default) | samples */
static int sam_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    const int samples = sam_weights_of(s->options)->weights == WEIGHTS_SAMPLES;
    return (samples ? &algo_weights_samples : &algo_weights_uniform)->weights(s, u, m, p);
}

static const AlgoServerWeights sam_weights_part = { .weights = sam_weights, .rule = ALGO_WEIGHTS_BY_KEY, .from_plan = 1 };

/* ---- the two-pass step: SAM, ASAM, GSAM (docs/methods/sam.md §1, 2), FedSpeed's merge (6), FedSMOO's dual (7) --------- */

typedef struct {
    int perturb;         /* PERTURB_* */
    double rho, asam_eta, gsam_alpha;
    double merge;        /* FedSpeed's a: (1 - a) g + a g_s; 1: the perturbed gradient alone */
    double extra_decay;  /* lambda of omega = wd + lambda, added after the clip */
    float *mu;           /* FedSMOO: mu_i [n_params], updated every step; NULL otherwise */
    const float *s;      /* FedSMOO: the global perturbation s */
} SamPass;

/* ASAM (docs/methods/sam.md §1): eps = rho T^2 g / (||T g|| + e), T = |w| + eta on weight tensors (conv, linear and norm
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
    const int64_t P = c->round->n_params;
    float *w = m->state, *g = m->grad, *saved = c->state.work;
    float *g0 = o->perturb == PERTURB_GSAM || o->merge != 1.0 ? c->state.work + c->round->n_state : NULL;
    const double e = norm_eps(c);
    double loss0 = 0.0, loss1 = 0.0;
    c->state.grad_pure = 1;
    int status = grad(env, &loss0); /* fb 1 at w; BatchNorm statistics are updated here only */
    if (status != FH_OK) {
        c->state.grad_pure = 0;
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
        /* SAM (and GSAM's ascent): eps = rho g/(||g|| + e). w + eps is written beside w and the model reads
         * it there (its state pointer), so w is never touched: no copy to save, none to restore. */
        const float scale = (float)(o->rho / (gnorm + e));
        nn_model_perturb_beside(m, saved, scale, g);
        eps_norm = (double)scale * gnorm;
    }
    const int bn = m->bn_update_running;
    m->bn_update_running = 0; /* fb 2 at w + eps, running statistics frozen (docs/methods/sam.md §0.3) */
    status = grad(env, &loss1);
    m->bn_update_running = bn;
    if (m->state == saved) m->state = w;
    else nn_vec_copy(w, saved, P); /* exact restore */
    c->state.grad_pure = 0;
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
    double value = loss0; /* the unperturbed loss is reported (FedLWSAM's L_i, docs/methods/sam.md §11) */
    c->svc->grad_terms(c, g, &value);
    if (o->extra_decay != 0.0) nn_vec_axpy(g, (float)o->extra_decay, w, P);
    c->svc->optimizer_step(c, w, g);
    *loss = value;
    return FH_OK;
}

static SamPass sam_pass_of(const AlgoClientCtx *c, const SamPerturbOptions *p)
{
    return (SamPass){ .perturb = p->perturb, .rho = algo_sam_radius(c), .asam_eta = p->asam_eta,
                      .gsam_alpha = p->gsam_alpha, .merge = 1.0 };
}

int algo_sam_step_with(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss, const SamPerturbOptions *p)
{
    const SamPass o = sam_pass_of(c, p);
    return sam_two_pass(c, grad, env, loss, &o);
}

int algo_sam_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    return algo_sam_step_with(c, grad, env, loss, sam_perturb_of(c->round->options));
}

/* FedSpeed's own key: the merge of the unperturbed and perturbed gradients */
typedef struct {
    double speed_merge;
} SpeedOptions;
static const AlgoOption speed_keys[] = {
    { ALGO_NUMBER(SpeedOptions, speed_merge), .def.f = 1.0, .lo = 0.0, .hi = 1.0,
      .help = "merge coefficient a: the descent gradient is (1 - a) g + a g_s; default 1 (the official code: "
              "the perturbed gradient alone); the paper merges the two (its coefficient is not pinned)" },
};
static const AlgoOptionPart speed_options = ALGO_OPTION_PART("fedspeed", SpeedOptions, speed_keys);
ALGO_OPTIONS_OF(speed_of, SpeedOptions, speed_options)

/* FedSpeed (docs/methods/sam.md §6): SAM with the prox correction (correction part) and lambda w after the clip */
static int speed_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    SamPass o = sam_pass_of(c, sam_perturb_of(c->round->options));
    o.extra_decay = sam_lambda_of(c->round->options)->lambda;
    o.merge = speed_of(c->round->options)->speed_merge;
    return sam_two_pass(c, grad, env, loss, &o);
}

/* FedSMOO (docs/methods/sam.md §7): client vector 1 = mu_i, server vector 0 = s */
static int smoo_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    const SamPass o = { .perturb = PERTURB_SAM, .rho = algo_sam_radius(c), .merge = 1.0,
                        .extra_decay = sam_lambda_of(c->round->options)->lambda,
                        .mu = c->state.client_vecs + c->round->n_state,
                        .s = c->round->server_vecs };
    return sam_two_pass(c, grad, env, loss, &o);
}

/* work vectors of the rows with a perturbation choice: the saved w, and g for GSAM */
static void sam_pick_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->work_vectors = sam_perturb_of(s->options)->perturb == PERTURB_GSAM ? 2 : 1;
    diag_sizes(z);
}

static const AlgoLocalStep sam_step_part = { .step = algo_sam_step, .round_radius = algo_sam_lr_radius };
static const AlgoLocalStep speed_step_part = { .step = speed_step, .round_radius = algo_sam_lr_radius };
static const AlgoLocalStep smoo_step_part = { .step = smoo_step };

/* ---- FedDyn-style prox correction (FedSpeed, FedSMOO, FedLESAM-D; docs/methods/sam.md §6) ----------------------------- */

/* lambda (h_i - w^t) before the clip; lambda w comes after it (the step) */
static void dyn_correct(AlgoClientCtx *c, float *grad)
{
    const float lambda = (float)sam_lambda_of(c->round->options)->lambda;
    const float *h = c->state.client_vecs, *wt = c->round->global;
#pragma omp simd
    for (int64_t j = 0; j < c->round->n_params; j++) grad[j] += lambda * (h[j] - wt[j]);
}

static const AlgoGradCorrection dyn_correct_part = { .correct = dyn_correct };

/* ---- control variates with K_bar (FedGAMMA, FedLESAM-S; docs/methods/sam.md §5) --------------------------------------- */

/* client vector 0: c_i; server vector 0: c; server scalar 0: K_bar.
 * Client: c_i <- c_i - c - Delta_i/(K eta), K = K_bar (k_norm = code) or the steps taken (actual). */
static void cv_end(AlgoClientCtx *c, int k_norm)
{
    const double K = k_norm == K_NORM_CODE ? c->round->server_scalars[SC_K_BAR] : (double)c->state.step;
    if (!(K > 0.0) || c->state.step == 0) return;
    const double inv = 1.0 / (K * c->round->lr);
    float *ci = c->state.client_vecs;
    const float *sc = c->round->server_vecs, *y = c->model->state, *wt = c->round->global;
    for (int64_t j = 0; j < c->round->n_params; j++)
        ci[j] = (float)((double)ci[j] - (double)sc[j] - ((double)y[j] - (double)wt[j]) * inv);
}

/* Server: c <- c + (1/N) sum_i (c_i_new - c_i), with c_i_new - c_i = -c - Delta_i/(K_i eta) derived from
 * the uploaded model (so only w_i travels up; docs/methods/sam.md §5 payload); N = all clients. cv_inverse: client
 * i's 1/(K_i eta), 0 when its c_i did not change (no step). */
double algo_sam_cv_rate(int k_norm, double k_bar, int64_t n_steps, double lr)
{
    const double K = k_norm == K_NORM_CODE ? k_bar : (double)n_steps;
    return !(K > 0.0) || n_steps == 0 ? 0.0 : 1.0 / (K * lr);
}

static double cv_inverse(const AlgoServerCtx *s, const AlgoUpload *u, int k_norm)
{
    return algo_sam_cv_rate(k_norm, s->server_scalars[SC_K_BAR], u->n_steps, s->lr);
}

void algo_sam_cv_apply(float *c, const float *sum, double n, int64_t n_params, int n_clients)
{
    for (int64_t j = 0; j < n_params; j++)
        c[j] = (float)((double)c[j] - (n * (double)c[j] + (double)sum[j]) / n_clients);
}

/* Folded (FedGAMMA, FedLESAM-S): c <- c - (n c + sum_i Delta_i/(K_i eta)) / N, n the clients that stepped (observe
 * counts them from the headers and keeps n for finish), the sum a change sum (CV_SUM) with coefficients 1/(K_i eta) */
#define CV_SUM { .source = ALGO_SUM_DELTA, .coef = ALGO_COEF_OWN }
static int cv_observe(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p)
{
    const int k_norm = k_norm_of(s->options)->k_norm;
    double n = 0.0;
    for (int i = 0; i < m; i++) n += cv_inverse(s, &u[i], k_norm) != 0.0;
    *algo_server_keep(s, "the control variates' count of clients") = n;
    return FH_OK;
}

static int cv_coefficients(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, int k, double *coef)
{
    const int k_norm = k_norm_of(s->options)->k_norm;
    for (int i = 0; i < m; i++) coef[i] = cv_inverse(s, &u[i], k_norm);
    return FH_OK;
}

/* sum: CV_SUM's */
static void cv_finish(AlgoServerCtx *s, const float *sum)
{
    algo_sam_cv_apply(s->server_vecs, sum, algo_server_kept(s), s->n_params, s->n_clients);
}

static int k_bar_init(AlgoServerCtx *s, float *global)
{
    s->server_scalars[SC_K_BAR] = k_bar(s->setup, s->client_sizes);
    return FH_OK;
}

/* ---- FedGAMMA (docs/methods/sam.md §5) -------------------------------------------------------------------------------- */

static int gamma_end(AlgoClientCtx *c)
{
    cv_end(c, k_norm_of(c->round->options)->k_norm);
    return FH_OK;
}

static int gamma_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    cv_finish(s, sums);
    return FH_OK;
}

/* the scratch of a row whose observe keeps a number for finish (algo_server_keep) */
static void sam_keep_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    sam_pick_sizes(s, z);
    algo_server_keep_sizes(z);
}

static const AlgoClientReport gamma_report_part = { .end = gamma_end };
static const AlgoServerUpdate gamma_update_part = {
    .observe = cv_observe, .n_sums = 1, .sums = { CV_SUM }, .coefficients = cv_coefficients, .finish = gamma_finish
};

/* ---- FedSMOO server and report (docs/methods/sam.md §7) --------------------------------------------------------------- */

/* h_i += Delta_i (FedDyn's), upload mu_i */
static int smoo_end(AlgoClientCtx *c)
{
    FH_CHECK(feddyn_end(c));
    nn_vec_copy(c->state.upload_vecs, c->state.client_vecs + c->round->n_state, c->round->n_params);
    memset(c->state.upload_vecs + c->round->n_params, 0,
           (size_t)(c->round->n_state - c->round->n_params) * sizeof(float));
    return FH_OK;
}

/* FedDyn's step (H += sum Delta_i; w = avg + H/N), then s = rho mu_bar/(||mu_bar|| + 1e-7), mu_bar the
 * weighted mean of the uploaded mu_i (sums[1]; uniform by default: (1/m) sum, as the code) */
static int smoo_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    FH_CHECK(feddyn_finish(s, sums, global));
    float *sv = s->server_vecs;
    nn_vec_copy(sv, sums + s->n_state, s->n_params);
    const double rho = sam_radius_of(s->options)->rho;
    const float scale = (float)(rho / (nn_vec_norm_f64(sv, s->n_params) + SAM_NORM_EPS));
    nn_vec_scale(sv, scale, s->n_params);
    return FH_OK;
}

static const AlgoClientReport smoo_report_part = { .end = smoo_end };
static const AlgoServerUpdate smoo_update_part = {
    .n_sums = 2, .sums = { FEDDYN_SUM, { .source = ALGO_SUM_VECTOR, .vector = 0, .coef = ALGO_COEF_AVERAGE } },
    .finish = smoo_finish
};
static const AlgoClientReport dyn_report_part = { .end = feddyn_end };

/* ---- MoFedSAM (docs/methods/sam.md §4): FedCM's correction and server direction --------------------------------------- */

/* MoFedSAM's own key: FedCM's alpha, with its own meaning for the SAM gradient */
typedef struct {
    double alpha;
} MoFedSamOptions;
static const AlgoOption mofedsam_keys[] = {
    { ALGO_NUMBER(MoFedSamOptions, alpha), .def.f = 0.1, .lo = 0.0, .hi = 1.0, .lo_open = 1,
      .help = "weight of the fresh SAM gradient in (0, 1] (FedCM convention, not a momentum coefficient): "
              "r = alpha g_s + (1 - alpha) mom before the clip; default 0.1 (README: 0.05 or 0.1); round 0 "
              "runs at alpha lr (mom = 0), as the code" },
};
static const AlgoOptionPart mofedsam_options = ALGO_OPTION_PART("mofedsam", MoFedSamOptions, mofedsam_keys);
ALGO_OPTIONS_OF(mofedsam_of, MoFedSamOptions, mofedsam_options)

static void mofedsam_correct(AlgoClientCtx *c, float *grad)
{
    algo_fedcm_blend(c, grad, mofedsam_of(c->round->options)->alpha);
}

/* w^{t+1} = w^t + mean Delta; mom = -Delta_bar/(K eta_t), K = K_bar (code) or the mean steps of the round
 * (actual: FedCM's observe keeps it) */
static int mofedsam_observe(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p)
{
    return k_norm_of(s->options)->k_norm == K_NORM_ACTUAL ? algo_fedcm_observe(s, u, m, p) : FH_OK;
}

static int mofedsam_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    const double scale = k_norm_of(s->options)->k_norm == K_NORM_ACTUAL
                             ? algo_server_kept(s)
                             : 1.0 / (k_bar(s->setup, s->client_sizes) * s->lr);
    algo_fedcm_direction(s, global, scale, 1.0);
    return FH_OK;
}

static const AlgoGradCorrection mofedsam_correct_part = { .correct = mofedsam_correct };
static const AlgoServerUpdate mofedsam_update_part = { .observe = mofedsam_observe, .finish = mofedsam_finish };

/* ---- FedGAMMA's correction: SCAFFOLD's option II (c - c_i before the clip) ---------------------------- */

static const AlgoGradCorrection gamma_correct_part = { .correct = algo_scaffold_correct };

/* ---- FedLESAM (docs/methods/sam.md §8): a fixed global-direction perturbation, one fb per step ------------------------ */

/* Paper mode: the last client vector is w_old (the global model the client last received). Code mode: the
 * last server vector is gu = w^t - w^{t-1} (broadcast). FedLESAM-S: client vector 0 c_i, server vector 0 c;
 * FedLESAM-D: client vector 0 h_i, server-only vector 0 sum_k h_k. work[0]: eps of the round; work[1]: the
 * saved weights (lesam_w_old and the functions after it name them). */

/* [CODE-BUG] LESAM.py (docs/methods/sam.md §8; also FedWMSAM's WMSAM.py, docs/methods/sam.md §9): d becomes the official perturbation, tensor j
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

/* FedLESAM's own keys (all three rows) */
enum { LE_PAPER, LE_CODE };
enum { COMPAT_INTENDED, COMPAT_OFFICIAL };
typedef struct {
    int mode, compat;
} LesamOptions;
static const AlgoOption lesam_keys[] = {
    { ALGO_CHOICE(LesamOptions, mode), .def.s = "paper", .choices = "paper|code",
      .help = "global direction: paper (each client's stale global model w_old - w^t, stored per client; no "
              "perturbation at a client's first participation; default) or code (the official code: the last global "
              "step, eps = -rho gu/||gu||, gu = w^t - w^{t-1} broadcast; none in round 0). Equal under full "
              "participation" },
    { ALGO_CHOICE(LesamOptions, compat), .def.s = "intended", .choices = "intended|official",
      .help = "intended (the full-vector perturbation rho d/||d||; default) or official ([CODE-BUG] of LESAM.py, docs/methods/sam.md §"
              "8: tensor j gets the constant rho d[j]/(sum_{j<J} |d[j]| + 1e-7) from the j-th element of the flat "
              "direction; reproduces published numbers). Nothing else changes" },
};
static const AlgoOptionPart lesam_options = ALGO_OPTION_PART("fedlesam", LesamOptions, lesam_keys);
ALGO_OPTIONS_OF(lesam_of, LesamOptions, lesam_options)

/* The layout above by name: w_old (paper mode), gu (code mode), eps and the saved weights */
static float *lesam_w_old(const AlgoClientCtx *c)
{
    return c->state.client_vecs + (size_t)(c->round->sizes->client_vectors - 1) * c->round->n_state;
}

static const float *lesam_gu(const AlgoClientCtx *c)
{
    return c->round->server_vecs + (size_t)(c->round->sizes->server_vectors - 1) * c->round->n_state;
}

static float *lesam_gu_server(const AlgoServerCtx *s)
{
    return s->server_vecs + (size_t)(s->sizes->server_vectors - 1) * s->n_state;
}

static float *lesam_eps(const AlgoClientCtx *c) { return c->state.work; }
static float *lesam_saved(const AlgoClientCtx *c) { return c->state.work + c->round->n_state; }

static int lesam_begin(AlgoClientCtx *c)
{
    const int64_t P = c->round->n_params;
    float *eps = lesam_eps(c);
    memset(eps, 0, (size_t)P * sizeof(float));
    const double rho = algo_sam_radius(c);
    const LesamOptions *o = lesam_of(c->round->options);
    if (o->mode == LE_PAPER) {
        /* d = w_old - w^t; nothing stored before the first participation: no perturbation [PROPOSED] */
        if (c->round->has_state) {
            const float *old = lesam_w_old(c), *wt = c->round->global;
#pragma omp simd
            for (int64_t j = 0; j < P; j++) eps[j] = old[j] - wt[j];
        }
    } else {
        /* d = -gu (round 0: gu = 0) */
        const float *gu = lesam_gu(c);
#pragma omp simd
        for (int64_t j = 0; j < P; j++) eps[j] = -gu[j];
    }
    if (o->compat == COMPAT_OFFICIAL) {
        algo_lesam_official(c->model, eps, rho, lesam_saved(c)); /* its scratch until the first step */
    } else {
        /* intended: eps = rho d/(||d|| + e) */
        const double n = nn_vec_norm_f64(eps, P);
        nn_vec_scale(eps, n > 0.0 ? (float)(rho / (n + norm_eps(c))) : 0.0f, P);
    }
    /* the round's ||eps|| is the diagnostic's running mean from the start; the step reads it back */
    c->state.upload_scalars[algo_upload_index(c->round->sizes, "perturb_norm")] = nn_vec_norm_f64(eps, P);
    return FH_OK;
}

static int lesam_pass(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss, double extra_decay)
{
    NnModel *m = c->model;
    const int64_t P = c->round->n_params;
    float *w = m->state, *g = m->grad, *eps = lesam_eps(c), *saved = lesam_saved(c);
    const double eps_norm = c->state.upload_scalars[algo_upload_index(c->round->sizes, "perturb_norm")];
    if (eps_norm > 0.0) {
        nn_vec_copy(saved, w, P);
        nn_vec_axpy(w, 1.0f, eps, P);
    }
    c->state.grad_pure = 1;
    const int status = grad(env, loss); /* the only fb, at w + eps: BatchNorm statistics come from it (0.3) */
    c->state.grad_pure = 0;
    if (eps_norm > 0.0) nn_vec_copy(w, saved, P);
    FH_CHECK(status);
    diag_add(c, eps_norm, nn_vec_norm_f64(g, P));
    c->svc->grad_terms(c, g, loss);
    if (extra_decay != 0.0) nn_vec_axpy(g, (float)extra_decay, w, P);
    c->svc->optimizer_step(c, w, g);
    return FH_OK;
}

static int lesam_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    return lesam_pass(c, grad, env, loss, 0.0);
}

static int lesam_d_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    return lesam_pass(c, grad, env, loss, sam_lambda_of(c->round->options)->lambda);
}

/* paper mode: w_old <- w^t */
static int lesam_end(AlgoClientCtx *c)
{
    if (lesam_of(c->round->options)->mode == LE_PAPER)
        nn_vec_copy(lesam_w_old(c), c->round->global, c->round->n_state);
    return FH_OK;
}

/* code mode: gu <- w^{t+1} - w^t (trainable part), after the row's own update */
static void lesam_global_step(AlgoServerCtx *s, const float *global)
{
    if (lesam_of(s->options)->mode != LE_CODE) return;
    float *gu = lesam_gu_server(s);
    for (int64_t j = 0; j < s->n_params; j++) gu[j] = global[j] - s->current[j];
}

static int lesam_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    lesam_global_step(s, global);
    return FH_OK;
}

/* FedLESAM-S: lambda (c - c_i) before the clip (the code scales SCAFFOLD's correction by lamb; docs/methods/sam.md §8) */
static void lesam_s_correct(AlgoClientCtx *c, float *grad)
{
    const float lambda = (float)sam_lambda_of(c->round->options)->lambda;
    const float *sc = c->round->server_vecs, *ci = c->state.client_vecs;
#pragma omp simd
    for (int64_t j = 0; j < c->round->n_params; j++) grad[j] += lambda * (sc[j] - ci[j]);
}

static int lesam_s_end(AlgoClientCtx *c)
{
    cv_end(c, k_norm_of(c->round->options)->k_norm);
    return lesam_end(c);
}

static int lesam_s_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    cv_finish(s, sums);
    lesam_global_step(s, global);
    return FH_OK;
}

static int lesam_d_end(AlgoClientCtx *c)
{
    FH_CHECK(feddyn_end(c));
    return lesam_end(c);
}

static int lesam_d_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    FH_CHECK(feddyn_finish(s, sums, global));
    lesam_global_step(s, global);
    return FH_OK;
}

/* paper mode: + w_old per client; code mode: + gu on the server */
static void lesam_mode_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    if (lesam_of(s->options)->mode == LE_PAPER) z->client_vectors += 1;
    else z->server_vectors += 1;
    z->work_vectors = 2;
    diag_sizes(z);
}

static void lesam_s_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    lesam_mode_sizes(s, z);
    algo_server_keep_sizes(z); /* cv_observe's count */
}

static const AlgoLocalStep lesam_step_part = { .step = lesam_step };
static const AlgoLocalStep lesam_d_step_part = { .step = lesam_d_step };
static const AlgoClientReport lesam_report_part = { .begin = lesam_begin, .end = lesam_end };
static const AlgoClientReport lesam_s_report_part = { .begin = lesam_begin, .end = lesam_s_end };
static const AlgoClientReport lesam_d_report_part = { .begin = lesam_begin, .end = lesam_d_end };
static const AlgoGradCorrection lesam_s_correct_part = { .correct = lesam_s_correct };
static const AlgoServerUpdate lesam_update_part = { .finish = lesam_finish };
static const AlgoServerUpdate lesam_s_update_part = {
    .observe = cv_observe, .n_sums = 1, .sums = { CV_SUM }, .coefficients = cv_coefficients, .finish = lesam_s_finish
};
static const AlgoServerUpdate lesam_d_update_part = { .n_sums = 1, .sums = { FEDDYN_SUM }, .finish = lesam_d_finish };

/* ---- FedLWSAM (docs/methods/sam.md §11): FedSAM with FedLW / FedNoLoWe weights ---------------------------------------- */

enum { LW_FEDLW, LW_NOLOWE };
typedef struct {
    int lw;
} LwSamOptions;
static const AlgoOption lwsam_keys[] = {
    { ALGO_CHOICE(LwSamOptions, lw), .def.s = "fedlw", .choices = "fedlw|nolowe",
      .help = "weights from L_i, the sample-weighted mean unperturbed training loss of the round: fedlw (p_i ~ "
              "1/(L_i + eps), reconstructed [RECON]; fair.c's FedLW with eps = 1e-8, docs/methods/sam.md §11 writes 1e-12; default) "
              "or nolowe (FedNoLoWe's (1 - L_i/sum L)/(m - 1)); neither uses n_i" },
};
static const AlgoOptionPart lwsam_options = ALGO_OPTION_PART("fedlwsam", LwSamOptions, lwsam_keys);
ALGO_OPTIONS_OF(lwsam_of, LwSamOptions, lwsam_options)

/* upload scalar 0: L_i, the sample-weighted mean of the unperturbed minibatch losses of the round */
static int lwsam_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    if (lwsam_of(s->options)->lw == LW_NOLOWE) return fednolowe_weights(s, u, m, p);
    algo_fedlw_weights(u, m, p, 0); /* FedLW's times_samples = false: no n_i (docs/methods/sam.md §11) */
    return FH_OK;
}

static const AlgoClientReport lwsam_report_part = { .end = upload_train_loss };
static const AlgoServerWeights lwsam_weights_part = { .weights = lwsam_weights, .rule = "FedLW's or FedNoLoWe's (algo.lw)" };

/* ---- sizes -------------------------------------------------------------------------------------------- */

static void speed_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    sam_pick_sizes(s, z);
    if (speed_of(s->options)->speed_merge != 1.0) z->work_vectors = 2;
}

static void one_work_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->work_vectors = 1;
    diag_sizes(z);
}

/* ---- the registry rows -------------------------------------------------------------------------------- */

/* the parts of the rows with FedSAM's step: radius, weights, perturbation, radius schedule */
#define SAM_STEP_PARTS \
    &algo_sam_radius_options, &algo_sam_weights_options, &algo_sam_perturb_options, &algo_sam_schedule_options

const AlgoMethod algo_family_sam[] = {
    {
        .name = "fedsam",
        .summary = "FedSAM: FedAvg with SAM local steps (or ASAM, GSAM), uniform average",
        .source = "docs/methods/sam.md §1-3",
        .state = "-",
        .payload = "down 1, up 1",
        .step = &sam_step_part,
        .weights = &sam_weights_part,
        .validate = sam_validate,
        .sizes = sam_pick_sizes,
        .parts = { SAM_STEP_PARTS },
        .tunes = {
            { "rho", NAN,
              "SAM radius rho >= 0; default 0.1 (FL-Simulator train.py, Caldarola's FedSAM); rho = 0 is "
              "FedAvg's SGD step bit for bit" },
        },
    },
    {
        .name = "mofedsam",
        .summary = "MoFedSAM: SAM local steps mixed with the server's per-step direction (FedCM momentum)",
        .source = "docs/methods/sam.md §4",
        .state = "- | mom (P)",
        .payload = "down 2, up 1",
        .correction = &mofedsam_correct_part,
        .step = &sam_step_part,
        .weights = &sam_weights_part,
        .update = &mofedsam_update_part,
        .validate = sam_validate,
        .sizes = sam_keep_sizes,
        .n_server_vectors = 1,
        .parts = { SAM_STEP_PARTS, &mofedsam_options, &algo_k_norm_options },
    },
    {
        .name = "fedgamma",
        .summary = "FedGAMMA: SAM local steps with SCAFFOLD control variates (c - c_i) in the descent gradient",
        .source = "docs/methods/sam.md §5",
        .state = "c_i (P) | c (P), K_bar",
        .payload = "down 2, up 1",
        .correction = &gamma_correct_part,
        .step = &sam_step_part,
        .report = &gamma_report_part,
        .weights = &sam_weights_part,
        .update = &gamma_update_part,
        .server_init = k_bar_init,
        .validate = sam_validate,
        .sizes = sam_keep_sizes,
        .n_client_vectors = 1,
        .n_server_vectors = 1,
        .n_server_scalars = 1,
        .parts = { SAM_STEP_PARTS, &algo_k_norm_options },
        .tunes = {
            { "rho", 0.01,
              "SAM radius rho >= 0; default 0.01 (FL-Simulator README's SAM lr for FedGamma). The control "
              "variates are not used in the perturbation, as in the code" },
        },
    },
    {
        .name = "fedspeed",
        .summary = "FedSpeed: SAM local steps with a FedDyn-like prox term and prox-correction h_i",
        .source = "docs/methods/sam.md §6",
        .state = "h_i (P) | sum_k h_k (P, rank 0)",
        .payload = "down 1, up 1",
        .correction = &dyn_correct_part,
        .step = &speed_step_part,
        .report = &dyn_report_part,
        .weights = &sam_weights_part,
        .update = &feddyn_update_part,
        .validate = sam_validate,
        .sizes = speed_sizes,
        .n_client_vectors = 1,
        .n_server_private = 1,
        .parts = { SAM_STEP_PARTS, &algo_sam_lambda_options, &speed_options },
    },
    {
        .name = "fedsmoo",
        .summary = "FedSMOO: FedSpeed's regulariser plus a dual variable mu_i that aligns local perturbations "
                   "with a global one s",
        .source = "docs/methods/sam.md §7",
        .state = "h_i, mu_i (2P) | s (P), sum_k h_k (P, rank 0)",
        .payload = "down 2, up 2",
        .correction = &dyn_correct_part,
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
        .parts = { &algo_sam_radius_options, &algo_sam_weights_options, &algo_sam_lambda_options },
        .tunes = {
            { "rho", NAN,
              "SAM radius rho >= 0, also the radius of the global perturbation s = rho mu_bar/||mu_bar||; "
              "default 0.1" },
            { "lambda", NAN,
              "prox weight lambda >= 0; default 0.1 (as FedSpeed): lambda (h_i - w^t) before the "
              "clip, (wd + lambda) w after it" },
        },
    },
    {
        .name = "fedlesam",
        .summary = "FedLESAM: one-backprop SAM with the global ascent direction estimated from global-model moves",
        .source = "docs/methods/sam.md §8",
        .state = "w_old (P; mode = code: -) | - (mode = code: gu (P))",
        .payload = "down 1, up 1 (mode = code: down 2)",
        .step = &lesam_step_part,
        .report = &lesam_report_part,
        .weights = &sam_weights_part,
        .update = &lesam_update_part,
        .validate = sam_validate,
        .sizes = lesam_mode_sizes,
        .parts = { &algo_sam_radius_options, &algo_sam_weights_options, &lesam_options },
        .tunes = {
            { "rho", NAN,
              "radius rho >= 0 of the fixed per-round perturbation; default 0.1 (train.py; the README's "
              "FedLESAM-S example uses 0.5 and advises tuning)" },
        },
    },
    {
        .name = "fedlesam-s",
        .summary = "FedLESAM-S: FedLESAM with SCAFFOLD control variates scaled by lambda",
        .source = "docs/methods/sam.md §8 (and 5)",
        .state = "c_i (P) + w_old (P; mode = code: -) | c (P), K_bar (mode = code: + gu (P))",
        .payload = "down 2, up 1 (mode = code: down 3)",
        .correction = &lesam_s_correct_part,
        .step = &lesam_step_part,
        .report = &lesam_s_report_part,
        .weights = &sam_weights_part,
        .update = &lesam_s_update_part,
        .server_init = k_bar_init,
        .validate = sam_validate,
        .sizes = lesam_s_sizes,
        .n_client_vectors = 1,
        .n_server_vectors = 1,
        .n_server_scalars = 1,
        .parts = { &algo_sam_radius_options, &algo_sam_weights_options, &lesam_options, &algo_sam_lambda_options,
                   &algo_k_norm_options },
        .tunes = {
            { "rho", NAN,
              "radius rho >= 0; default 0.1 (train.py; README example 0.5)" },
            { "lambda", NAN,
              "scale of the SCAFFOLD correction lambda (c - c_i) >= 0; default 0.1 (the code "
              "multiplies SCAFFOLD's correction by lamb; FedGAMMA does not). Control variates as FedGAMMA "
              "(c += (1/N) sum dc_i)" },
        },
    },
    {
        .name = "fedlesam-d",
        .summary = "FedLESAM-D: FedLESAM with FedDyn's dynamic regulariser (as FedSpeed)",
        .source = "docs/methods/sam.md §8 (and 6)",
        .state = "h_i (P) + w_old (P; mode = code: -) | sum_k h_k (P, rank 0) (mode = code: + gu (P))",
        .payload = "down 1, up 1 (mode = code: down 2)",
        .correction = &dyn_correct_part,
        .step = &lesam_d_step_part,
        .report = &lesam_d_report_part,
        .weights = &sam_weights_part,
        .update = &lesam_d_update_part,
        .validate = sam_validate,
        .sizes = lesam_mode_sizes,
        .n_client_vectors = 1,
        .n_server_private = 1,
        .parts = { &algo_sam_radius_options, &algo_sam_weights_options, &lesam_options, &algo_sam_lambda_options },
        .tunes = {
            { "rho", NAN,
              "radius rho >= 0; default 0.1 (train.py)" },
            { "lambda", NAN,
              "prox weight lambda >= 0; default 0.1: lambda (h_i - w^t) before the clip, (wd + lambda) "
              "w after it; server as FedSpeed; in code mode gu = w^{t+1} - w^t, the full change" },
        },
    },
    {
        .name = "fedlwsam",
        .summary = "FedLWSAM: FedSAM local training with loss-based server weights (FedLW or FedNoLoWe)",
        .source = "docs/methods/sam.md §11",
        .state = "-",
        .payload = "down 1, up 1 + L_i",
        .step = &sam_step_part,
        .report = &lwsam_report_part,
        .weights = &lwsam_weights_part,
        .validate = sam_validate,
        .sizes = sam_pick_sizes,
        .n_upload_scalars = 1,
        .parts = { &algo_sam_radius_options, &lwsam_options, &algo_sam_perturb_options, &algo_sam_schedule_options },
        .tunes = {
            { "rho", 0.05,
              "SAM radius rho >= 0; default 0.05 = FedSCAM's rho_max [PROPOSED, to match the FedSCAM "
              "comparison]" },
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
void algo_sam_cv_end(AlgoClientCtx *c, int k_norm) { cv_end(c, k_norm); }
