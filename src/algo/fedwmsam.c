/* Method family 'wmsam' (docs/methods/sam.md §9, 15): FedWMSAM (this file) and A-FedSAM (afedsam.c holds its
 * parts; its registry row is in the family table at the end of this file).
 *
 * FedWMSAM (docs/methods/sam.md §9): the server's momentum mom_r (the global per-step gradient of the last round) personalised
 * with SCAFFOLD control variates, mom_k = mom_r + alpha_r/(1 - alpha_r) (c - c_k), drives both the local
 * direction r = alpha_r g + (1 - alpha_r) mom_k and a one-backprop perturbation towards the predicted global
 * point target_b = x_r + b mom_k; alpha_r follows the clients' cosine with mom_r.
 *
 * Layout: client vector 0 c_k; server vectors 0 c, 1 mom_r (broadcast: the client forms mom_k itself, docs/methods/sam.md §9
 * payload with client-held c_k); server scalars 0 K_bar (sam.c's k_bar_init and control variates read it
 * there), 1 alpha_r (metrics.csv method_scalar); work vectors 0 mom_k, 1 target_b, 2 eps, 3 the saved weights
 * (and the official perturbation's per-tensor scratch). Upload scalars: the diagnostics (mean ||eps||, mean ||g||),
 * then dot(Delta_k, mom_r) and ||Delta_k||^2, from which the server's alpha follows without the clients' models
 * (the round folds, docs/architecture.md "Aggregation").
 * The step order is the FL-Simulator one (docs/methods/sam.md §0.2): the pure minibatch gradient at x_b + eps (c->state.grad_pure),
 * exact restore, the blend (correction hook), clip (train.clip), weight decay and the SGD step (optimiser).
 * Parameters-only rules cover [0, n_params); buffers are averaged with the method's weights (docs/methods/baselines.md §0.3). */
#include "algo_internal.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

#define WM_NORM_EPS 1e-7 /* e in rho delta/(||delta|| + e): LESAM.py, which WMSAM.py reuses (docs/methods/sam.md §0.3, 8) */

enum { WM_INTENDED, WM_OFFICIAL };
typedef struct {
    double alpha_0, alpha_lambda;
    int k_norm, compat;
} WmsamOptions;
static const AlgoOption wmsam_keys[] = {
    { ALGO_NUMBER(WmsamOptions, alpha_0), .def.f = 0.1, .lo = 0.0, .hi = 1.0, .lo_open = 1,
      .help = "alpha_0 in (0, 1], the starting weight of the fresh gradient in r = alpha g + (1 - alpha) mom_k (0.1 = "
              "90 % momentum; default 0.1, train.py); 1 needs rho = 0 (mom_k undefined) and with alpha_lambda = 0 "
              "gives SCAFFOLD-corrected SGD; metrics.csv method_scalar logs alpha_r" },
    { ALGO_NUMBER(WmsamOptions, alpha_lambda), .def.f = 0.01, .lo = 0.0, .hi = 1.0,
      .help = "smoothing lambda in [0, 1] of alpha_{r+1} = (1 - lambda) alpha_r + lambda clip(mean_k s_k, 0.1, 0.9), "
              "s_k = 1 + cos(Delta_k, mom_r) (the code's +1 shift); default 0.01, hard-wired in the code (the "
              "poster writes a generic lambda); 0 freezes alpha at alpha_0" },
    { ALGO_CHOICE(WmsamOptions, k_norm), .def.s = "code", .choices = "code|actual",
      .help = "local step count K in c_k's update and mom: code (K_bar = E n_0/B from client 0's size, for every "
              "client, as FL-Simulator; train.steps when set; default) or actual (each client's steps taken in c_k, "
              "the round's mean steps in mom) [PROPOSED]" },
    { ALGO_CHOICE(WmsamOptions, compat), .def.s = "intended", .choices = "intended|official",
      .help = "intended (the poster's perturbation towards the target, full-vector norm; default) or official (both "
              "[CODE-BUG]s of WMSAM.py, docs/methods/sam.md §9: the LESAM optimiser negates delta, so the code perturbs away from the "
              "target, and indexes it per tensor as in docs/methods/sam.md §8: tensor j gets the constant -rho delta[j]/(sum_{j<J} "
              "|delta[j]| + 1e-7)). Nothing else changes" },
};
static const AlgoOptionPart wmsam_options = ALGO_OPTION_PART("fedwmsam", WmsamOptions, wmsam_keys);
ALGO_OPTIONS_OF(wmsam_of, WmsamOptions, wmsam_options)

/* The layout above by name, in one place: what a client sees (the broadcast c, mom_r, alpha_r and its own work
 * vectors) and what the server updates. */
enum { WM_SCALAR_K_BAR, WM_SCALAR_ALPHA }; /* K_bar where sam.c's k_bar_init and control variates read it */
static const char *const WM_UP_DOT = "mom_dot", *const WM_UP_DELTA_SQ = "delta_sq"; /* upload scalars by name */
enum { WM_N_WORK = 4 };
typedef struct {
    const float *c, *mom;
    double alpha;
    float *momk, *target, *eps, *saved;
} WmsamClient;
typedef struct {
    float *c, *mom;
    double *k_bar, *alpha;
} WmsamServer;
/* What observe hands to finish within a round, in the server scratch (the same block for both, as
 * algo_server_keep's one number): the round's mean steps and the number of clients whose c_k changed */
typedef struct {
    double steps, cv_clients;
} WmsamKept;

static WmsamClient wmsam_client(const AlgoClientCtx *c)
{
    const int64_t N = c->round->n_state;
    return (WmsamClient){ .c = c->round->server_vecs, .mom = c->round->server_vecs + N,
                          .alpha = c->round->server_scalars[WM_SCALAR_ALPHA],
                          .momk = c->state.work, .target = c->state.work + N, .eps = c->state.work + 2 * N,
                          .saved = c->state.work + 3 * N };
}

static WmsamServer wmsam_server(const AlgoServerCtx *s)
{
    return (WmsamServer){ .c = s->server_vecs, .mom = s->server_vecs + s->n_state,
                          .k_bar = &s->server_scalars[WM_SCALAR_K_BAR],
                          .alpha = &s->server_scalars[WM_SCALAR_ALPHA] };
}

/* alpha_{r+1} = (1 - lambda) alpha_r + lambda clip(mean_k s_k, 0.1, 0.9) (docs/methods/sam.md §9; the code's lambda = 0.01) */
static double wmsam_next_alpha(double alpha, double lambda, double mean_s)
{
    const double clipped = mean_s < 0.1 ? 0.1 : mean_s > 0.9 ? 0.9 : mean_s;
    return (1.0 - lambda) * alpha + lambda * clipped;
}

/* dot(Delta, mom_r) and ||Delta||^2, Delta = y - x_r, over the parameters in double in index order */
static void wmsam_alignment(const float *y, const float *x, const float *mom, int64_t P, double *dot, double *dd)
{
    double sd = 0.0, sq = 0.0;
    for (int64_t j = 0; j < P; j++) {
        const double d = (double)y[j] - (double)x[j];
        sd += d * (double)mom[j];
        sq += d * d;
    }
    *dot = sd;
    *dd = sq;
}

/* ---- client ------------------------------------------------------------------------------------------- */

/* mom_k = mom_r + alpha_r/(1 - alpha_r) (c - c_k) [CODE server/FedWMSAM.py, formed here from the broadcast c and
 * mom_r and the client's c_k]; target_0 = x_r. At alpha_r = 1 (alpha_0 = 1, which validation allows with rho = 0
 * only) the momentum has weight 0: mom_k = mom_r, unused. */
static int wmsam_begin(AlgoClientCtx *c)
{
    const int64_t P = c->round->n_params;
    const WmsamClient v = wmsam_client(c);
    const float *cg = v.c, *mom = v.mom, *ck = c->state.client_vecs;
    float *momk = v.momk;
    const float f = v.alpha < 1.0 ? (float)(v.alpha / (1.0 - v.alpha)) : 0.0f;
#pragma omp simd
    for (int64_t j = 0; j < P; j++) momk[j] = mom[j] + f * (cg[j] - ck[j]);
    nn_vec_copy(v.target, c->round->global, P);
    return FH_OK;
}

/* r = alpha_r g + (1 - alpha_r) mom_k, before the clip. At alpha_r = 1 the limit of the blend, g + (c - c_k):
 * SCAFFOLD's correction itself (docs/methods/sam.md §9: (1 - alpha) mom_k = (1 - alpha) mom_r + alpha (c - c_k)). */
static void wmsam_correct(AlgoClientCtx *c, float *grad)
{
    const WmsamClient v = wmsam_client(c);
    if (v.alpha == 1.0) {
        algo_scaffold_correct(c, grad);
        return;
    }
    const float a = (float)v.alpha, b = (float)(1.0 - v.alpha);
    const float *momk = v.momk;
#pragma omp simd
    for (int64_t j = 0; j < c->round->n_params; j++) grad[j] = a * grad[j] + b * momk[j];
}

/* One step (docs/methods/sam.md §9): delta_b = target_b - x_b; eps = rho delta_b/(||delta_b|| + e), none when delta_b = 0 (always
 * at b = 0); compat = official: eps = the LESAM optimiser's of -delta_b (both [CODE-BUG]s); the only fb at
 * x_b + eps; x_b restored exactly; target_{b+1} = target_b + mom_k (the code's running target). */
static int wmsam_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    NnModel *m = c->model;
    const int64_t P = c->round->n_params;
    float *w = m->state, *g = m->grad;
    const WmsamClient v = wmsam_client(c);
    float *momk = v.momk, *target = v.target, *eps = v.eps, *saved = v.saved;
    const double rho = algo_sam_radius(c);
    double eps_norm = 0.0;
    if (rho > 0.0) {
#pragma omp simd
        for (int64_t j = 0; j < P; j++) eps[j] = target[j] - w[j];
        const double n = nn_vec_norm_f64(eps, P);
        if (n > 0.0) {
            if (wmsam_of(c->round->options)->compat == WM_OFFICIAL) {
                nn_vec_scale(eps, -1.0f, P); /* LESAM.py negates its input: away from the target */
                algo_lesam_official(m, eps, rho, saved);
            } else {
                nn_vec_scale(eps, (float)(rho / (n + WM_NORM_EPS)), P);
            }
            eps_norm = nn_vec_norm_f64(eps, P);
        }
    }
    if (eps_norm > 0.0) {
        nn_vec_copy(saved, w, P);
        nn_vec_axpy(w, 1.0f, eps, P);
    }
    c->state.grad_pure = 1;
    const int status = grad(env, loss); /* the only fb: BatchNorm statistics come from it (docs/methods/sam.md §0.3) */
    c->state.grad_pure = 0;
    if (eps_norm > 0.0) nn_vec_copy(w, saved, P);
    FH_CHECK(status);
    algo_sam_diag_add(c, eps_norm, nn_vec_norm_f64(g, P));
    c->svc->grad_terms(c, g, loss); /* the blend (wmsam_correct), then clip */
    c->svc->optimizer_step(c, w, g); /* + weight decay, after the clip */
    nn_vec_axpy(target, 1.0f, momk, P);
    return FH_OK;
}

/* uploads dot(Delta_k, mom_r) and ||Delta_k||^2 (the server's s_k); c_k <- c_k - c - Delta_k/(K eta_r), K = K_bar
 * (k_norm = code) or the steps taken (FedGAMMA's, docs/methods/sam.md §5) */
static int wmsam_end(AlgoClientCtx *c)
{
    const AlgoSizes *z = c->round->sizes;
    double *up = c->state.upload_scalars;
    wmsam_alignment(c->model->state, c->round->global, wmsam_client(c).mom, c->round->n_params,
                    &up[algo_upload_index(z, WM_UP_DOT)], &up[algo_upload_index(z, WM_UP_DELTA_SQ)]);
    algo_sam_cv_end(c, wmsam_of(c->round->options)->k_norm);
    return FH_OK;
}

/* ---- server ------------------------------------------------------------------------------------------- */

static int wmsam_init(AlgoServerCtx *s, float *global)
{
    FH_CHECK(algo_sam_k_bar_init(s, global));
    *wmsam_server(s).alpha = wmsam_of(s->options)->alpha_0;
    return FH_OK;
}

/* 1/(K eta_r) of a client's dc_k = -c - Delta_k/(K eta_r), K = K_bar (code) or its steps (actual); 0: c_k kept
 * (no step taken; sam.c's control variates) */
static double wmsam_cv_rate(const AlgoServerCtx *s, int k_norm, int64_t n_steps)
{
    return algo_sam_cv_rate(k_norm, s->server_scalars[WM_SCALAR_K_BAR], n_steps, s->lr);
}

/* Before the sums (docs/methods/sam.md §9, clients in ascending id): s_k = 1 + cos(Delta_k, mom_r) from the
 * uploaded dot and ||Delta_k||^2 with the mom_r broadcast this round (0 when a norm is 0); alpha_{r+1}; the round's
 * mean steps and the number of clients whose c_k changed, for the finish. */
static int wmsam_observe(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p)
{
    const WmsamOptions *o = wmsam_of(s->options);
    const WmsamServer v = wmsam_server(s);
    const int dot_at = algo_upload_index(s->sizes, WM_UP_DOT), dd_at = algo_upload_index(s->sizes, WM_UP_DELTA_SQ);
    const double mom_norm = nn_vec_norm_f64(v.mom, s->n_params);
    double s_sum = 0.0, k_mean = 0.0;
    int cv_clients = 0;
    for (int i = 0; i < m; i++) {
        const double dot = u[i].scalars[dot_at], dd = u[i].scalars[dd_at];
        s_sum += mom_norm > 0.0 && dd > 0.0 ? 1.0 + dot / (sqrt(dd) * mom_norm) : 0.0;
        k_mean += (double)u[i].n_steps / m;
        cv_clients += wmsam_cv_rate(s, o->k_norm, u[i].n_steps) > 0.0;
    }
    *v.alpha = wmsam_next_alpha(*v.alpha, o->alpha_lambda, s_sum / m);
    AlgoScratch scratch = s->scratch;
    WmsamKept *kept = algo_scratch_take(&scratch, 1, sizeof *kept, "FedWMSAM's round counts");
    kept->steps = k_mean;
    kept->cv_clients = cv_clients;
    return FH_OK;
}

/* the sum of the Delta_k / (K eta_r) that change c */
static int wmsam_coefficients(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, int k, double *coef)
{
    const int k_norm = wmsam_of(s->options)->k_norm;
    for (int i = 0; i < m; i++) coef[i] = wmsam_cv_rate(s, k_norm, u[i].n_steps);
    return FH_OK;
}

/* After the average Delta_bar (weighted, uniform by default; global holds x_r + Delta_bar): c += (1/N) sum dc_k,
 * i.e. c - (n c + sum_k Delta_k/(K eta_r))/N (N = all clients, n those whose c_k changed); x_{r+1} = x_r + eta_g
 * Delta_bar; mom_{r+1} = -Delta_bar/(K eta_r) gamma, K = K_bar (code) or the round's mean steps (actual), gamma =
 * train.lr_decay (the code's extra factor). */
static int wmsam_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    const WmsamOptions *o = wmsam_of(s->options);
    const WmsamServer v = wmsam_server(s);
    const WmsamKept *kept = s->scratch.base;
    algo_sam_cv_apply(v.c, sums, kept->cv_clients, s->n_params, s->n_clients);
    const double K = o->k_norm == K_NORM_CODE ? *v.k_bar : kept->steps;
    AlgoServerCtx at_mom = *s; /* FedCM's direction D = (x_r - avg) scale, into mom (server vector 1) */
    at_mom.server_vecs = v.mom;
    algo_fedcm_direction(&at_mom, global, K > 0.0 ? s->setup->lr_decay / (K * s->lr) : 0.0,
                         algo_server_step(s->options));
    return FH_OK;
}

static int wmsam_validate(const AlgoMethod *meth, const AlgoSetup *s)
{
    FH_CHECK(algo_refuse_nonfinite(meth, s->options));
    FH_CHECK(algo_sam_validate(meth, s));
    const double rho = sam_radius_of(s->options)->rho;
    if (wmsam_of(s->options)->alpha_0 == 1.0 && rho > 0.0)
        return algo_refuse(meth, "[algo] alpha_0 = 1 makes mom_k = mom + alpha/(1 - alpha) (c - c_k), and with it the "
                           "perturbation target, undefined: alpha_0 = 1 is allowed with [algo] rho = 0 only (the "
                           "SCAFFOLD limit; rho = %g)", rho);
    return FH_OK;
}

static void wmsam_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->work_vectors = WM_N_WORK;
    algo_sam_diag_sizes(z);
    algo_upload_add(z, WM_UP_DOT, 0);
    algo_upload_add(z, WM_UP_DELTA_SQ, 0);
    const size_t kept = algo_scratch_bytes(1, sizeof(WmsamKept));
    if (z->server_scratch < kept) z->server_scratch = kept;
    z->shown_server_scalar = WM_SCALAR_ALPHA;
}

static const AlgoGradCorrection wmsam_correct_part = { .correct = wmsam_correct };
static const AlgoLocalStep wmsam_step_part = { .step = wmsam_step };
static const AlgoClientReport wmsam_report_part = { .begin = wmsam_begin, .end = wmsam_end };
static const AlgoServerWeights wmsam_weights_part = { .weights = algo_sam_weights, .rule = ALGO_WEIGHTS_BY_KEY, .from_plan = 1 };
static const AlgoServerUpdate wmsam_update_part = {
    .observe = wmsam_observe,
    .n_sums = 1, .sums = { { .source = ALGO_SUM_DELTA, .coef = ALGO_COEF_OWN } }, .coefficients = wmsam_coefficients,
    .finish = wmsam_finish
};
static const AlgoLocalStep afedsam_step_part = { .step = algo_sam_step };

/* ---- the registry rows -------------------------------------------------------------------------------- */

const AlgoMethod algo_family_wmsam[] = {
    {
        .name = "fedwmsam",
        .summary = "FedWMSAM: server momentum personalised with control variates, momentum-guided one-backprop "
                   "perturbation, cosine-adaptive alpha (metrics.csv method_scalar = alpha_r)",
        .source = "docs/methods/sam.md §9",
        .state = "c_k (P) | c, mom (P each), K_bar, alpha",
        .payload = "down 3 + alpha, up 1 + dot(Delta_k, mom), ||Delta_k||^2",
        .correction = &wmsam_correct_part,
        .step = &wmsam_step_part,
        .report = &wmsam_report_part,
        .weights = &wmsam_weights_part,
        .update = &wmsam_update_part,
        .server_init = wmsam_init,
        .validate = wmsam_validate,
        .sizes = wmsam_sizes,
        .n_client_vectors = 1,
        .n_server_vectors = 2,
        .n_server_scalars = 2,
        .parts = { &algo_sam_radius_options, &algo_sam_weights_options, &wmsam_options, &algo_server_step_options },
        .tunes = {
            { "eta_g", NAN,
              "global step size eta_g: x += eta_g Delta_bar; default 1 (FL-Simulator family); mom uses the unscaled "
              "Delta_bar" },
            { "rho", NAN,
              "radius rho >= 0 of the momentum-guided perturbation eps = rho delta/(||delta|| + 1e-7), delta = x_r + "
              "b mom_k - x_b; default 0.1 (train.py). The README/poster's best rho ~ 0.01 was measured with the "
              "buggy perturbation (compat = official): re-tune it for the intended rule. rho = 0: no perturbation" },
            { "weights", NAN,
              "server average Delta_bar: uniform (FL-Simulator server.py; docs/methods/sam.md §0.2 default) or samples (sample counts)" },
        },
    },
    {
        .name = "afedsam",
        .summary = "A-FedSAM [RECONSTRUCTED, docs/methods/sam.md §15]: FedSAM plus KL distillation from the global model with a "
                   "growing weight mu_t (metrics.csv method_scalar = mu_t)",
        .source = "docs/methods/sam.md §15 (reconstructed; 1-3)",
        .state = "- | mu_t (teacher = ema: + tbar (P))",
        .payload = "down 1 + mu_t, up 1 (teacher = ema: down 2)",
        .batch_term = &afedsam_term_part,
        .step = &afedsam_step_part,
        .report = &afedsam_report_part,
        .weights = &wmsam_weights_part,
        .update = &afedsam_update_part,
        .server_init = afedsam_init,
        .validate = afedsam_validate,
        .sizes = afedsam_sizes,
        .parts = { &algo_sam_radius_options, &algo_sam_weights_options, &algo_sam_perturb_options, &afedsam_options },
        .tunes = {
            { "rho", NAN,
              "SAM radius rho >= 0; default 0.1 (the paper searched 0.01 .. 0.5, 0.1 best); rho = 0 with "
              "mu_max = 0 is FedAvg's SGD step (uniform average)" },
            { "weights", NAN,
              "server average: uniform (FL-Simulator, the paper's evident code base; default) or samples" },
            { "perturb", NAN,
              "local perturbation, as fedsam's (default sam: the paper's; asam, gsam for studies); the distillation "
              "term is evaluated at the perturbed point only" },
        },
    },
};
const int algo_family_wmsam_count = sizeof algo_family_wmsam / sizeof algo_family_wmsam[0];
