/* Method family 'server' (docs/methods/baselines.md A.3-A.8): FedAvgM, FedProx, SCAFFOLD, FedDyn, FedNova, FedCM.
 *
 * Every rule here acts on the trainable parameters [0, n_params) only; buffers [n_params, n_state) (BN
 * running statistics) are averaged with the method's aggregation weights (docs/methods/sam.md §0.3). Every server
 * step folds (AlgoServerUpdate): sums over the uploads are AlgoSums (exact sums, whole or folded by the client
 * ranks), and what a step needs of the uploads' headers goes from observe to finish in the server scratch
 * (algo_server_keep).
 *
 * Server steps of the form w^{t+1} = w^t - eta (w^t - avg) are written as avg + (1 - eta)(w^t - avg) + ...,
 * algebraically the same, so that the neutral settings (FedAvgM beta = 0, SCAFFOLD/FedCM eta_g = 1, FedNova
 * with equal step counts) give the plain average bit for bit; the plain step is algo_server_step_to.
 *
 * algo_scaffold_correct, feddyn_end, feddyn_finish, algo_fedcm_blend and FedCM's server step are shared with the
 * SAM family (algo_internal.h; FedGAMMA, FedWMSAM, FedSpeed/FedSMOO, MoFedSAM), which passes its own settings. */
#include "algo_internal.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

/* ---- shared ------------------------------------------------------------------------------------------- */

/* Weights from a `weights = samples|uniform` (or uniform|samples) choice. */
static int weights_choice(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p, int uniform)
{
    return (uniform ? &algo_weights_uniform : &algo_weights_samples)->weights(s, u, m, p);
}

/* A number observe hands to finish within the round: the first double of the server scratch, which is the same
 * block for both (AlgoServerCtx.scratch); the method's sizes ask for it (algo_server_keep_sizes). */
double *algo_server_keep(AlgoServerCtx *s, const char *what)
{
    AlgoScratch scratch = s->scratch;
    return algo_scratch_take(&scratch, 1, sizeof(double), what);
}

double algo_server_kept(const AlgoServerCtx *s) { return *(const double *)s->scratch.base; }

void algo_server_keep_sizes(AlgoSizes *z)
{
    const size_t bytes = algo_scratch_bytes(1, sizeof(double));
    if (z->server_scratch < bytes) z->server_scratch = bytes;
}

/* ---- the server step (FedAvgM, SCAFFOLD, FedCM, FedWMSAM) ----------------------------------------------------------- */

/* One key for the global step size of every method whose server moves w^t along its own direction: each row's tune
 * says what the direction is. */
typedef struct {
    double eta_g;
} ServerStepOptions;
static const AlgoOption server_step_keys[] = {
    { ALGO_NUMBER(ServerStepOptions, eta_g), .def.f = 1.0, .lo = 0.0, .hi = 1000.0, .lo_open = 1, .was = "eta_s",
      .help = "global (server) step size eta_g > 0 along the method's server direction; default 1" },
};
const AlgoOptionPart algo_server_step_options = ALGO_OPTION_PART("server step", ServerStepOptions, server_step_keys);

double algo_server_step(AlgoOptions o)
{
    return ((const ServerStepOptions *)algo_options(o, &algo_server_step_options))->eta_g;
}

/* ---- FedAvgM (docs/methods/baselines.md A.3) ------------------------------------------------------------------------------- */

enum { AVGM_CANONICAL, AVGM_FLOOD, AVGM_EMA, AVGM_NESTEROV };
typedef struct {
    double beta;
    int variant;
} AvgmOptions;
static const AlgoOption avgm_keys[] = {
    { ALGO_NUMBER(AvgmOptions, beta), .def.f = 0.9, .lo = 0.0, .hi = 1.0, .hi_open = 1,
      .help = "server momentum beta in [0, 1); default 0.9 [recon]; FLOOD uses 0.1, FedDecorr's EMA 0.9; "
              "beta = 0 with eta_g = 1 is FedAvg; the effective step is eta_g/(1 - beta)" },
    { ALGO_CHOICE(AvgmOptions, variant), .def.s = "canonical", .choices = "canonical|flood|ema|nesterov",
      .help = "canonical (Hsu et al.: v = beta v + g, w -= eta_g v; default), flood (FLOOD serverM.py: the same "
              "algebra on client deltas, bit-identical to canonical; FLOOD runs it with beta = 0.1), ema (MOON, "
              "FedDisco, FedDecorr: v = beta v + (1 - beta) g), nesterov (FL-bench: w -= eta_g (g + beta v))" },
};
static const AlgoOptionPart avgm_options = ALGO_OPTION_PART("fedavgm", AvgmOptions, avgm_keys);
ALGO_OPTIONS_OF(avgm_of, AvgmOptions, avgm_options)

/* v: server-only vector 0. With pseudo-gradient g = w^t - avg (avg: sample-weighted average):
 *   canonical  v <- beta v + g;            w <- w^t - eta_g v
 *   flood      v <- beta v + (avg - w^t);  w <- w^t + eta_g v      (client deltas: v is -v of canonical)
 *   ema        v <- beta v + (1 - beta) g; w <- w^t - eta_g v
 *   nesterov   v <- beta v + g;            w <- w^t - eta_g (g + beta v)
 * Written as w = avg + (1 - eta_g A) g - eta_g B v_old with the step = A g + B v_old (global holds avg). */
static int fedavgm_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    const AvgmOptions *o = avgm_of(s->options);
    const double beta = o->beta, eta = algo_server_step(s->options);
    const int variant = o->variant;
    float *v = s->server_private;
    const float *cur = s->current;
    if (variant == AVGM_FLOOD) {
        /* FLOOD serverM.py: delta form, w = w^t + eta_g (beta v + delta) = avg + (eta_g - 1) delta + eta_g beta v */
        for (int64_t j = 0; j < s->n_params; j++) {
            const double avg = global[j], delta = avg - (double)cur[j], vo = v[j];
            v[j] = (float)(beta * vo + delta);
            global[j] = (float)(avg + (eta - 1.0) * delta + eta * beta * vo);
        }
        return FH_OK;
    }
    const double c = variant == AVGM_EMA ? 1.0 - beta : 1.0;
    const double A = variant == AVGM_EMA ? 1.0 - beta : variant == AVGM_NESTEROV ? 1.0 + beta : 1.0;
    const double B = variant == AVGM_NESTEROV ? beta * beta : beta;
    for (int64_t j = 0; j < s->n_params; j++) {
        const double avg = global[j], g = (double)cur[j] - avg, vo = v[j];
        v[j] = (float)(beta * vo + c * g);
        global[j] = (float)(avg + (1.0 - eta * A) * g - eta * B * vo);
    }
    return FH_OK;
}

static const AlgoServerUpdate fedavgm_update_part = { .finish = fedavgm_finish };

/* ---- FedProx (docs/methods/baselines.md A.4) ------------------------------------------------------------------------------- */

enum { PROX_SAMPLES, PROX_UNIFORM };
typedef struct {
    double mu;
    int weights;
} ProxOptions;
static const AlgoOption prox_keys[] = {
    { ALGO_NUMBER(ProxOptions, mu), .def.f = 0.01, .lo = 0.0, .hi = 1000.0,
      .help = "proximal coefficient mu >= 0; default 0.01 [recon] (FLOOD code 0.01, FLOOD paper 0.1, "
              "NIID-Bench 0.001, FL-Simulator 0.1); mu = 0 is FedAvg" },
    { ALGO_CHOICE(ProxOptions, weights), .def.s = "samples", .choices = "samples|uniform",
      .help = "server average: samples (FLOOD, NIID-Bench; default) or uniform (FL-Simulator, seeds 003/004)" },
};
static const AlgoOptionPart prox_options = ALGO_OPTION_PART("fedprox", ProxOptions, prox_keys);
ALGO_OPTIONS_OF(prox_of, ProxOptions, prox_options)

/* (mu/2) ||w - w^t||^2 over the parameters; gradient mu (w - w^t) */
static double fedprox_term(AlgoClientCtx *c, const float *w, float *grad)
{
    const double mu_d = prox_of(c->round->options)->mu;
    const float mu = (float)mu_d;
    const float *g = c->round->global;
    double sq = 0.0;
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < c->round->n_params; j++) {
        const float d = w[j] - g[j];
        grad[j] += mu * d;
        sq += (double)d * (double)d;
    }
    return 0.5 * mu_d * sq;
}

static int fedprox_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    return weights_choice(s, u, m, p, prox_of(s->options)->weights == PROX_UNIFORM);
}

static const AlgoLocalTerm fedprox_term_part = { .grad_term = fedprox_term };
static const AlgoServerWeights fedprox_weights_part = { .weights = fedprox_weights, .rule = ALGO_WEIGHTS_BY_KEY, .from_plan = 1 };

/* ---- SCAFFOLD (docs/methods/baselines.md A.5) ------------------------------------------------------------------------------ */

enum { SCAF_OPTION2, SCAF_FLOOD };
enum { SCAF_UNIFORM, SCAF_SAMPLES };
typedef struct {
    int variant, weights;
} ScaffoldOptions;
static const AlgoOption scaffold_keys[] = {
    { ALGO_CHOICE(ScaffoldOptions, variant), .def.s = "option2", .choices = "option2|flood",
      .help = "option2 (Karimireddy et al. option II; c - c_k added to the gradient before clipping as in "
              "FL-Simulator; K_k = steps taken as in NIID-Bench; c += (1/K) sum delta c_k; default) or flood "
              "(FLOOD code, seed 002 only: w -= lr (c - c_k) after each momentum-SGD step, then one extra epoch of "
              "plain training from w_E with a fresh momentum buffer [recon], c_k = (w_E - w')/(k_b lr), w_E "
              "uploaded, c = mean of the selected c_k; costs (E+1)/E local compute; FLOOD averages with "
              "weights = samples)" },
    { ALGO_CHOICE(ScaffoldOptions, weights), .def.s = "uniform", .choices = "uniform|samples",
      .help = "model average: uniform (paper, FL-Simulator; default) or samples (NIID-Bench, FLOOD)" },
};
static const AlgoOptionPart scaffold_options = ALGO_OPTION_PART("scaffold", ScaffoldOptions, scaffold_keys);
ALGO_OPTIONS_OF(scaffold_of, ScaffoldOptions, scaffold_options)

/* client vector 0: c_k; server vector 0: c; upload vector 0: delta c_k (option II) or the new c_k (flood);
 * flood: work vector 0 holds w_E, the model after the E corrected epochs */

static int64_t scaffold_epoch_steps(const AlgoClientCtx *c)
{
    const int64_t b = c->round->setup->batch_size;
    return (c->round->n_samples + b - 1) / b;
}

/* option II: y <- y - lr (g + c - c_k), the correction added to the gradient before clipping (FL-Simulator) */
void algo_scaffold_correct(AlgoClientCtx *c, float *grad)
{
    const float *sc = c->round->server_vecs, *ck = c->state.client_vecs;
#pragma omp simd
    for (int64_t j = 0; j < c->round->n_params; j++) grad[j] += sc[j] - ck[j];
}

static void scaffold_correct(AlgoClientCtx *c, float *grad)
{
    if (scaffold_of(c->round->options)->variant == SCAF_OPTION2) algo_scaffold_correct(c, grad);
}

/* flood: one more epoch of plain training after the E corrected ones */
static int scaffold_begin(AlgoClientCtx *c)
{
    if (scaffold_of(c->round->options)->variant == SCAF_FLOOD && c->state.n_steps > 0)
        c->state.n_steps += scaffold_epoch_steps(c);
    return FH_OK;
}

/* The default step (gradient, optimiser); flood: w <- w - lr (c - c_k) after each step of the E epochs,
 * then w_E saved and the extra epoch run from it with a fresh momentum buffer and no correction. */
static int scaffold_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    float *w = c->model->state;
    if (scaffold_of(c->round->options)->variant != SCAF_FLOOD) {
        FH_CHECK(grad(env, loss));
        c->svc->optimizer_step(c, w, c->model->grad);
        return FH_OK;
    }
    const int64_t main_steps = c->state.n_steps - scaffold_epoch_steps(c);
    if (c->state.step == main_steps) {
        nn_vec_copy(c->state.work, w, c->round->n_state);
        if (c->state.momentum_buf) memset(c->state.momentum_buf, 0, (size_t)c->round->n_params * sizeof(float));
    }
    FH_CHECK(grad(env, loss));
    c->svc->optimizer_step(c, w, c->model->grad);
    if (c->state.step < main_steps) {
        const float lr = (float)c->round->lr, *sc = c->round->server_vecs, *ck = c->state.client_vecs;
#pragma omp simd
        for (int64_t j = 0; j < c->round->n_params; j++) w[j] -= lr * (sc[j] - ck[j]);
    }
    return FH_OK;
}

static int scaffold_end(AlgoClientCtx *c)
{
    float *ck = c->state.client_vecs, *up = c->state.upload_vecs, *y = c->model->state;
    const float *sc = c->round->server_vecs, *wt = c->round->global;
    const int64_t P = c->round->n_params;
    memset(up + P, 0, (size_t)(c->round->n_state - P) * sizeof(float));
    if (scaffold_of(c->round->options)->variant == SCAF_FLOOD) {
        /* c_k <- (w_E - w') / (k_b lr), a fresh estimate; w_E is uploaded */
        const int64_t kb = scaffold_epoch_steps(c), main_steps = c->state.n_steps - kb;
        if (c->state.step <= main_steps) { /* stopped early (non-finite loss): nothing to estimate */
            nn_vec_copy(up, ck, P);
            return FH_OK;
        }
        const double inv = 1.0 / ((double)kb * c->round->lr);
        const float *wE = c->state.work;
        for (int64_t j = 0; j < P; j++) {
            const float cn = (float)(((double)wE[j] - (double)y[j]) * inv);
            up[j] = cn;
            ck[j] = cn;
        }
        nn_vec_copy(y, wE, c->round->n_state);
        return FH_OK;
    }
    /* option II (SCAFFOLD Eq. 4): c_k+ = c_k - c + (w^t - y) / (K_k lr), K_k = steps taken (NIID-Bench) */
    if (c->state.step == 0) {
        memset(up, 0, (size_t)P * sizeof(float));
        return FH_OK;
    }
    const double inv = 1.0 / ((double)c->state.step * c->round->lr);
    for (int64_t j = 0; j < P; j++) {
        const float cn = (float)((double)ck[j] - (double)sc[j] + ((double)wt[j] - (double)y[j]) * inv);
        up[j] = (float)((double)cn - (double)ck[j]);
        ck[j] = cn;
    }
    return FH_OK;
}

static int scaffold_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    return weights_choice(s, u, m, p, scaffold_of(s->options)->weights == SCAF_UNIFORM);
}

/* after the average: w <- w^t + eta_g (avg - w^t); option II: c <- c + (1/K) sum_k delta c_k (K = all clients);
 * flood: c <- mean of the selected clients' new c_k (sums: the uploaded delta c_k or c_k, summed) */
static int scaffold_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    const ScaffoldOptions *o = scaffold_of(s->options);
    const double eta = algo_server_step(s->options);
    const int64_t P = s->n_params;
    for (int64_t j = 0; j < P; j++) global[j] = algo_server_step_to(global[j], s->current[j], eta);
    float *c = s->server_vecs;
    if (o->variant == SCAF_FLOOD)
        for (int64_t j = 0; j < P; j++) c[j] = (float)((double)sums[j] / s->n_selected);
    else
        for (int64_t j = 0; j < P; j++) c[j] = (float)((double)c[j] + (double)sums[j] / s->n_clients);
    return FH_OK;
}

static int scaffold_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    if (scaffold_of(s->options)->variant == SCAF_FLOOD && strcmp(s->optimizer, "sgd") != 0)
        return algo_refuse(m, "variant = flood runs FLOOD's momentum-SGD loop (its extra epoch restarts the SGD "
                           "momentum): set train.optimizer = sgd (now %s), or algo.variant = option2", s->optimizer);
    return FH_OK;
}

static void scaffold_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->work_vectors = scaffold_of(s->options)->variant == SCAF_FLOOD ? 1 : 0;
}

static const AlgoGradCorrection scaffold_correct_part = { .correct = scaffold_correct };
static const AlgoLocalStep scaffold_step_part = { .step = scaffold_step };
static const AlgoClientReport scaffold_report_part = { .begin = scaffold_begin, .end = scaffold_end };
static const AlgoServerWeights scaffold_weights_part = { .weights = scaffold_weights, .rule = ALGO_WEIGHTS_BY_KEY, .from_plan = 1 };
static const AlgoServerUpdate scaffold_update_part = {
    .n_sums = 1, .sums = { { .source = ALGO_SUM_VECTOR, .vector = 0, .coef = ALGO_COEF_ONE } }, .finish = scaffold_finish
};

/* ---- FedDyn (docs/methods/baselines.md A.6, FL-Simulator form) ------------------------------------------------------------- */

typedef struct {
    double alpha;
} DynOptions;
static const AlgoOption dyn_keys[] = {
    { ALGO_NUMBER(DynOptions, alpha), .def.f = 0.1, .lo = 0.0, .hi = 1000.0,
      .help = "regularisation coefficient alpha >= 0; default 0.1 (FL-Simulator, A-FedSAM). FL-Simulator form "
              "(gradient + alpha (w - w^t + H_k), H_k = sum of past deltas, w = mean_selected w_k + mean_K H_k); the "
              "weight decay +alpha goes through the gradient term, so train.clip clips it too (FL-Simulator clips "
              "before its optimiser adds it). The server's mean_K H_k does not depend on alpha: alpha = 0 still "
              "differs from uniform averaging" },
};
static const AlgoOptionPart dyn_options = ALGO_OPTION_PART("feddyn", DynOptions, dyn_keys);
ALGO_OPTIONS_OF(dyn_of, DynOptions, dyn_options)

/* client vector 0: H_k = sum of the client's past deltas; server-only vector 0: S = sum_k H_k over all K.
 * Gradient term alpha (w - w^t + H_k) (the linear term alpha <w, H_k - w^t> plus weight decay +alpha);
 * value: the paper's alpha <H_k, w> + (alpha/2) ||w - w^t||^2. */
static double feddyn_term(AlgoClientCtx *c, const float *w, float *grad)
{
    const double alpha = dyn_of(c->round->options)->alpha;
    const float a = (float)alpha;
    const float *g = c->round->global, *H = c->state.client_vecs;
    double lin = 0.0, sq = 0.0;
#pragma omp simd reduction(+ : lin, sq)
    for (int64_t j = 0; j < c->round->n_params; j++) {
        const float d = w[j] - g[j];
        grad[j] += a * (d + H[j]);
        lin += (double)H[j] * (double)w[j];
        sq += (double)d * (double)d;
    }
    return alpha * (lin + 0.5 * sq);
}

/* H_k += w_k - w^t */
int feddyn_end(AlgoClientCtx *c)
{
    float *H = c->state.client_vecs;
    const float *y = c->model->state, *g = c->round->global;
#pragma omp simd
    for (int64_t j = 0; j < c->round->n_params; j++) H[j] += y[j] - g[j];
    return FH_OK;
}

/* S += sum_{k in S_t} (w_k - w^t) (sums[0]: FEDDYN_SUM); w^{t+1} = mean_{S_t} w_k + S / K (global holds the mean) */
int feddyn_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    float *S = s->server_private;
    for (int64_t j = 0; j < s->n_params; j++) {
        S[j] = (float)((double)S[j] + (double)sums[j]);
        global[j] = (float)((double)global[j] + (double)S[j] / s->n_clients);
    }
    return FH_OK;
}

static const AlgoLocalTerm feddyn_term_part = { .grad_term = feddyn_term };
static const AlgoClientReport feddyn_report_part = { .end = feddyn_end };
const AlgoServerUpdate feddyn_update_part = { .n_sums = 1, .sums = { FEDDYN_SUM }, .finish = feddyn_finish };

/* ---- FedNova (docs/methods/baselines.md A.7) ------------------------------------------------------------------------------- */

/* a_k = [tau - rho (1 - rho^tau) / (1 - rho)] / (1 - rho), a_k = tau for rho = 0 (FedNova Eq. for momentum SGD) */
static double fednova_norm(int64_t tau, double rho)
{
    if (rho == 0.0) return (double)tau;
    return ((double)tau - rho * (1.0 - pow(rho, (double)tau)) / (1.0 - rho)) / (1.0 - rho);
}

/* upload scalar 0: a_k */
static int fednova_end(AlgoClientCtx *c)
{
    c->state.upload_scalars[0] = fednova_norm(c->state.step, c->round->setup->momentum);
    return FH_OK;
}

/* w^{t+1} = w^t - tau_eff sum_k p_k d_k, d_k = (w^t - w_k)/a_k, tau_eff = sum_k p_k a_k; written as
 * avg + sum_k p_k (1 - tau_eff/a_k)(w^t - w_k), tau_eff = a_0 + sum_k p_k (a_k - a_0) (exactly a_0 when all
 * a_k are equal, and then the state is the sample-weighted average: FedAvg). The sum is over the changes
 * w_k - w^t, so its coefficients are -p_k (1 - tau_eff/a_k) (p normalised), 0 for a client that took no step. */
static int fednova_coefficients(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, int k, double *coef)
{
    double total, tau_eff = 0.0;
    FH_CHECK(algo_average_total(s, p, m, &total));
    const double a0 = u[0].scalars[0];
    for (int i = 0; i < m; i++) tau_eff += p[i] / total * (u[i].scalars[0] - a0);
    tau_eff += a0;
    for (int i = 0; i < m; i++) {
        const double a = u[i].scalars[0];
        coef[i] = a > 0.0 ? -(p[i] / total * (1.0 - tau_eff / a)) : 0.0; /* no step: w_k = w^t */
    }
    return FH_OK;
}

static int fednova_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    for (int64_t j = 0; j < s->n_params; j++) global[j] = (float)((double)global[j] + (double)sums[j]);
    return FH_OK;
}

static int fednova_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    if (strcmp(s->optimizer, "sgd") != 0)
        return algo_refuse(m, "its normaliser a_k assumes SGD with momentum rho = train.momentum: set train.optimizer "
                           "= sgd (now %s)", s->optimizer);
    return FH_OK;
}

static const AlgoClientReport fednova_report_part = { .end = fednova_end };
static const AlgoServerUpdate fednova_update_part = {
    .n_sums = 1, .sums = { { .source = ALGO_SUM_DELTA, .coef = ALGO_COEF_OWN } }, .coefficients = fednova_coefficients,
    .finish = fednova_finish
};

/* ---- FedCM (docs/methods/baselines.md A.8) --------------------------------------------------------------------------------- */

typedef struct {
    double alpha;
} FedCmOptions;
static const AlgoOption fedcm_keys[] = {
    { ALGO_NUMBER(FedCmOptions, alpha), .def.f = 0.1, .lo = 0.0, .hi = 1.0, .lo_open = 1,
      .help = "weight of the local gradient, in (0, 1]; default 0.1 (paper and FL-Simulator); alpha = 1 is "
              "uniform averaging. D = -mean delta / (K_loc lr_prev), K_loc = mean steps of the previous round's "
              "clients [recon; FL-Simulator uses E n_0/B]" },
};
static const AlgoOptionPart fedcm_options = ALGO_OPTION_PART("fedcm", FedCmOptions, fedcm_keys);
ALGO_OPTIONS_OF(fedcm_of, FedCmOptions, fedcm_options)

/* server vector 0: D = -mean(w_k - w^t) / (K_loc lr) of the previous round (0 in round 0);
 * v = alpha g + (1 - alpha) D, clipped afterwards by the loop, then the SGD step with weight decay */
void algo_fedcm_blend(AlgoClientCtx *c, float *grad, double alpha)
{
    const float a = (float)alpha, b = (float)(1.0 - alpha);
    const float *D = c->round->server_vecs;
#pragma omp simd
    for (int64_t j = 0; j < c->round->n_params; j++) grad[j] = a * grad[j] + b * D[j];
}

/* K_loc = mean steps of this round's clients, from the headers: 1/(K_loc lr) (0 when none stepped), lr = this
 * round's lr (the "previous round" of the next round that uses D), kept for finish (algo_server_keep) */
int algo_fedcm_observe(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p)
{
    double k_loc = 0.0;
    for (int i = 0; i < m; i++) k_loc += (double)u[i].n_steps;
    k_loc /= m;
    *algo_server_keep(s, "FedCM's 1/(K_loc lr)") = k_loc > 0.0 ? 1.0 / (k_loc * s->lr) : 0.0;
    return FH_OK;
}

/* global holds mean w_k: D = (w^t - mean w_k) scale; w^{t+1} = w^t + eta_g mean(w_k - w^t) */
void algo_fedcm_direction(AlgoServerCtx *s, float *global, double scale, double eta_g)
{
    float *D = s->server_vecs;
    for (int64_t j = 0; j < s->n_params; j++) {
        const double avg = global[j];
        D[j] = (float)(((double)s->current[j] - avg) * scale);
        global[j] = algo_server_step_to(avg, s->current[j], eta_g);
    }
}

static void fedcm_correct(AlgoClientCtx *c, float *grad) { algo_fedcm_blend(c, grad,
                                                                            fedcm_of(c->round->options)->alpha); }

static int fedcm_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    algo_fedcm_direction(s, global, algo_server_kept(s), algo_server_step(s->options));
    return FH_OK;
}

static void fedcm_sizes(const AlgoSetup *s, AlgoSizes *z) { algo_server_keep_sizes(z); }

static const AlgoGradCorrection fedcm_correct_part = { .correct = fedcm_correct };
static const AlgoServerUpdate fedcm_update_part = { .observe = algo_fedcm_observe, .finish = fedcm_finish };

/* ---- the registry rows -------------------------------------------------------------------------------- */

const AlgoMethod algo_family_server[] = {
    {
        .name = "fedavgm",
        .summary = "FedAvgM: sample-weighted average as a pseudo-gradient, server momentum (Hsu et al. 2019)",
        .source = "docs/methods/baselines.md A.3",
        .state = "- | v (P, rank 0 only)",
        .payload = "down 1, up 1",
        .weights = &algo_weights_samples,
        .update = &fedavgm_update_part,
        .n_server_private = 1,
        .parts = { &avgm_options, &algo_server_step_options },
        .tunes = { { "eta_g", NAN,
                     "server learning rate eta_g > 0 (Hsu et al.'s eta); default 1 (FedAvg step plus momentum), as "
                     "in every reference code" } },
    },
    {
        .name = "fedprox",
        .summary = "FedProx: local proximal term (mu/2)||w - w^t||^2 on the parameters",
        .source = "docs/methods/baselines.md A.4",
        .state = "-",
        .payload = "down 1, up 1",
        .local_term = &fedprox_term_part,
        .weights = &fedprox_weights_part,
        .parts = { &prox_options },
    },
    {
        .name = "scaffold",
        .summary = "SCAFFOLD: control variates c_k, c correct every local gradient (option II)",
        .source = "docs/methods/baselines.md A.5",
        .state = "c_k (P) | c (P)",
        .payload = "down 2, up 2",
        .correction = &scaffold_correct_part,
        .step = &scaffold_step_part,
        .report = &scaffold_report_part,
        .weights = &scaffold_weights_part,
        .update = &scaffold_update_part,
        .validate = scaffold_validate,
        .sizes = scaffold_sizes,
        .n_client_vectors = 1,
        .n_server_vectors = 1,
        .n_upload_vectors = 1,
        .parts = { &scaffold_options, &algo_server_step_options },
        .tunes = { { "eta_g", NAN, "global step size eta_g: w += eta_g avg(y_k - w^t); default 1 (paper, all codes)" } },
    },
    {
        .name = "feddyn",
        .summary = "FedDyn: dynamic regulariser alpha<w, H_k - w^t> + wd alpha; server adds mean_K H_k",
        .source = "docs/methods/baselines.md A.6",
        .state = "H_k (P) | sum_k H_k (P, rank 0)",
        .payload = "down 1, up 1",
        .local_term = &feddyn_term_part,
        .report = &feddyn_report_part,
        .weights = &algo_weights_uniform,
        .update = &feddyn_update_part,
        .n_client_vectors = 1,
        .n_server_private = 1,
        .parts = { &dyn_options },
    },
    {
        .name = "fednova",
        .summary = "FedNova: normalised averaging of client updates by their step counts a_k",
        .source = "docs/methods/baselines.md A.7",
        .state = "-",
        .payload = "down 1, up 1 + a_k",
        .report = &fednova_report_part,
        .weights = &algo_weights_samples,
        .update = &fednova_update_part,
        .validate = fednova_validate,
        .n_upload_scalars = 1,
    },
    {
        .name = "fedcm",
        .summary = "FedCM: client steps mix alpha * gradient with (1 - alpha) * the server's global direction D",
        .source = "docs/methods/baselines.md A.8",
        .state = "- | D (P)",
        .payload = "down 2, up 1",
        .correction = &fedcm_correct_part,
        .weights = &algo_weights_uniform,
        .update = &fedcm_update_part,
        .sizes = fedcm_sizes,
        .n_server_vectors = 1,
        .parts = { &fedcm_options, &algo_server_step_options },
        .tunes = { { "eta_g", NAN, "global step size eta_g: w += eta_g mean(w_k - w^t); default 1" } },
    },
};
const int algo_family_server_count = sizeof algo_family_server / sizeof algo_family_server[0];
