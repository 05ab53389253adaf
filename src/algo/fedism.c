/* Method family 'fedism' (docs/methods/sam.md §12, with the GSAM step of 2): FedISM (constant radius) and
 * FedISM+ (progressive radius rho(t) = rho_max ((t + 1)/T)^tau) with SAGA server weights from each client's
 * sharpness S_i (FedISM+(S)) or perturbed loss PL_i (FedISM+(L)) measured on its whole local set at w^t.
 *
 * Local training (SALT) is sam.c's two-pass step (algo_sam_step: SAM / ASAM / GSAM, radius from this
 * family's round_radius hook) on top of the configured [train] optimizer, or plain steps (perturb = none); the paper uses Adam (lr 3e-4,
 * weight decay 5e-4 as L2) with logit-adjusted cross-entropy ([train] logit_adjust = 1).
 *
 * Keys: FedISM's radius is sam.c's rho (its own default), FedISM+'s rho_max, tau and horizon are its radius
 * schedule; both rows share the part ism_options (saga, the perturbation, q, beta, score_rows).
 * Upload scalars: 0 = S_i or PL_i, 1 = L0, 2 = L1 (the losses at w^t and w^t + e), 3 = rho(t) (clients.csv
 * columns saga_score, l0, l1, rho; metrics.csv rho), 4 = mean ||eps|| of the steps, 5 = their mean ||g||.
 * Server scalars (broadcast, checkpointed; K-sized): [0, K) a_k, the SAGA moving average of every client;
 * [K, 2K) 1 once client k has been aggregated (its first appearance uses wtilde, docs/methods/sam.md §12 [PROPOSED]). */
#include "algo_internal.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

#define ISM_NORM_EPS 1e-12 /* e in rho g/(||g|| + e) of the local steps: FFL4MIA's gsam.py (docs/methods/sam.md §2, 12) */
#define SAGA_FLOOR 1e-10   /* S_i = max(L1 - L0, 1e-10); + 1e-10 after normalising (train_Baseline.py) */

enum { SAGA_SHARPNESS, SAGA_LOSS };
enum { ISM_PERTURB_NONE = PERTURB_GSAM + 1 }; /* perturb = none: plain optimiser steps */
/* FedISM's keys (both rows): the SAGA score, the local perturbation (sam.c's step with its own choices and
 * defaults, sam|asam|gsam|none, gsam by default), the SAGA server's q, beta and score rows */
typedef struct {
    int saga, perturb;
    double asam_eta, gsam_alpha, q, beta;
    int score_rows;
} IsmOptions;
static const AlgoOption ism_keys[] = {
    { ALGO_CHOICE(IsmOptions, saga), .def.s = "sharpness", .choices = "sharpness|loss",
      .help = "SAGA's client score, on the whole local set at w^t with the round's radius (eval mode, plain CE): "
              "sharpness (S_i = max(L(w^t + e) - L(w^t), 1e-10), FedISM+(S); the official code's only variant; default) "
              "or loss (the perturbed loss PL_i = L(w^t + e), FedISM+(L), paper Eq. 17)" },
    { ALGO_CHOICE(IsmOptions, perturb), .def.s = "gsam", .choices = "sam|asam|gsam|none",
      .help = "local optimiser of SALT, on top of [train] optimizer (the paper: Adam lr 3e-4, wd 5e-4, with [train] "
              "logit_adjust = 1): gsam (GSAM, docs/methods/sam.md §2; FFL4MIA train_GSAM; default), sam (equal to gsam with gsam_alpha = 0) or asam; "
              "eps = rho g/(||g|| + 1e-12) as FFL4MIA's gsam.py; none: plain [train] optimizer steps, SAGA alone "
              "(the paper's Table I 'SAGA only' rows; the score keeps the round's radius)" },
    { ALGO_NUMBER(IsmOptions, asam_eta), .def.f = 0.2, .lo = 0.0, .hi = 1e6,
      .help = "ASAM offset eta_a (perturb = asam only); docs/methods/sam.md §1 default 0.2" },
    { ALGO_NUMBER(IsmOptions, gsam_alpha), .def.f = 0.1, .lo = 0.0, .hi = 1.0,
      .help = "GSAM alpha in [0, 1] (perturb = gsam): FedISM's code default 0.1 (docs/methods/sam.md §12); official GSAM example 0.4; "
              "0 is SAM" },
    { ALGO_NUMBER(IsmOptions, q), .def.f = 2.0, .lo = 0.0, .hi = 100.0,
      .help = "SAGA exponent q in [0, 100]: wtilde_i ~ (S_i/sum S + 1e-10)^q; docs/methods/sam.md §12 default 2.0 (paper and code); "
              "q = 0 gives uniform weights (averaging without n_i) [fedhet accepts 0 for that ablation]" },
    { ALGO_NUMBER(IsmOptions, beta), .def.f = 0.5, .lo = 0.0, .hi = 1.0, .lo_open = 1,
      .help = "SAGA moving average beta in (0, 1]: a_i <- beta wtilde_i + (1 - beta) a_i, a_i = wtilde_i at a client's "
              "first aggregation; docs/methods/sam.md §12 default 0.5; 1: no averaging. Partial participation [PROPOSED]: only the "
              "participants' a_i move, renormalised over them" },
    { ALGO_INT(IsmOptions, score_rows), .def.i = 0, .lo = 0, .hi = 1e9,
      .help = "rows of the client's local set the SAGA score is measured on: 0 = all (docs/methods/sam.md §12, paper and code; default); "
              "N > 0: its first N rows in file order (a random subset for iid and dirichlet partitions, which are "
              "shuffled per client) [PROPOSED cost cap: the score costs one forward-backward and one forward pass per "
              "row, more than short local training; the quick configs use it]" },
};
static const AlgoOptionPart ism_options = ALGO_OPTION_PART("fedism", IsmOptions, ism_keys);
ALGO_OPTIONS_OF(ism_of, IsmOptions, ism_options)

/* FedISM+'s radius schedule: rho_max first, tau and horizon last (the order fedhet methods lists them in) */
typedef struct {
    double rho_max;
} IsmPlusRhoOptions;
static const AlgoOption ismplus_rho_keys[] = {
    { ALGO_NUMBER(IsmPlusRhoOptions, rho_max), .def.f = 0.1, .lo = 0.0, .hi = 1e6,
      .help = "largest radius rho_max >= 0 of rho(t) = rho_max ((t + 1)/T)^tau (paper Eq. 12 with t = 1..T; "
              "FFL4MIA get_current_rho); docs/methods/sam.md §12 default 0.1. The paper's setup also uses [train] optimizer = adam, "
              "lr 3e-4, weight_decay 5e-4, batch 32, epochs 1, logit_adjust = 1" },
};
static const AlgoOptionPart ismplus_rho_options =
    ALGO_OPTION_PART("fedismplus_rho", IsmPlusRhoOptions, ismplus_rho_keys);
ALGO_OPTIONS_OF(ismplus_rho_of, IsmPlusRhoOptions, ismplus_rho_options)
typedef struct {
    double tau;
    int horizon;
} IsmPlusGrowthOptions;
static const AlgoOption ismplus_growth_keys[] = {
    { ALGO_NUMBER(IsmPlusGrowthOptions, tau), .def.f = 0.5, .lo = 0.0, .hi = 1e3, .lo_open = 1,
      .help = "growth exponent tau > 0 of rho(t) (tau < 1: fast early growth; 1: linear); docs/methods/sam.md §12 default 0.5" },
    { ALGO_INT(IsmPlusGrowthOptions, horizon), .def.i = 0, .lo = 0, .hi = 1e9,
      .help = "T of rho(t) in rounds: 0 = fl.rounds (the paper); T >= fl.rounds keeps the schedule "
              "of a longer run (set it when a run is to be extended with --resume)" },
};
static const AlgoOptionPart ismplus_growth_options =
    ALGO_OPTION_PART("fedismplus_growth", IsmPlusGrowthOptions, ismplus_growth_keys);
ALGO_OPTIONS_OF(ismplus_growth_of, IsmPlusGrowthOptions, ismplus_growth_options)

enum { UP_SAGA, UP_L0, UP_L1, UP_RHO, UP_PERTURB_NORM, UP_GRAD_NORM, UP_COUNT };

/* ---- radius ----------------------------------------------------------------------------------------- */

/* T of the schedule: [algo] horizon, or fl.rounds when it is 0 */
static double ism_horizon(const AlgoSetup *s, const IsmPlusGrowthOptions *g)
{
    return g->horizon > 0 ? (double)g->horizon : (double)s->rounds;
}

/* FedISM+ (docs/methods/sam.md §12, Eq. 12; FFL4MIA get_current_rho): rho(t) = rho_max ((t + 1)/T)^tau, t = 0 .. T-1 */
double algo_fedismplus_radius(const AlgoSetup *s, AlgoOptions o, int round)
{
    const IsmPlusGrowthOptions *g = ismplus_growth_of(o);
    const double rho_max = ismplus_rho_of(o)->rho_max;
    return rho_max * pow(((double)round + 1.0) / ism_horizon(s, g), g->tau);
}

static int ism_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    const IsmOptions *o = ism_of(s->options);
    const IsmPlusRhoOptions *plus = algo_options_find(s->options, &ismplus_rho_options);
    const char *rho_key = plus ? "rho_max" : "rho";
    const double rho = plus ? plus->rho_max : sam_radius_of(s->options)->rho;
    if (!isfinite(rho) || rho < 0.0) return algo_refuse(m, "[algo] %s = %g must be a finite number >= 0", rho_key, rho);
    if (!isfinite(o->q) || o->q < 0.0) return algo_refuse(m, "[algo] q = %g must be a finite number >= 0", o->q);
    if (!plus) return FH_OK;
    const IsmPlusGrowthOptions *g = ismplus_growth_of(s->options);
    if (!isfinite(g->tau) || !(g->tau > 0.0))
        return algo_refuse(m, "[algo] tau = %g must be a finite number > 0", g->tau);
    if (g->horizon > 0 && g->horizon < s->rounds)
        return algo_refuse(m, "[algo] horizon = %d must be 0 (T = fl.rounds) or at least fl.rounds = %d (rho(t) "
                           "would pass rho_max)", g->horizon, s->rounds);
    for (int t = 0; t < s->rounds; t++) {
        const double r = algo_fedismplus_radius(s, s->options, t);
        if (!isfinite(r) || r < 0.0)
            return algo_refuse(m, "the radius schedule gives rho(%d) = %g: check [algo] rho_max, tau and horizon", t, r);
    }
    return FH_OK;
}

/* ---- the client's report: sharpness on its whole local set at w^t (docs/methods/sam.md §12; src/algo/sam_diag.c) ---- */

/* Before training (model->state = w^t): upload scalar 0 = S_i = max(L1 - L0, 1e-10) or PL_i = L1 at this
 * round's radius. work[0] holds the perturbed state until the first step overwrites it. */
static int ism_begin(AlgoClientCtx *c)
{
    double L0 = 0.0, L1 = 0.0;
    const double rho = algo_sam_radius(c);
    const IsmOptions *o = ism_of(c->round->options);
    FH_CHECK(algo_local_sharpness(c, c->model, c->round->global, rho, (int64_t)o->score_rows, c->state.work, &L0, &L1));
    c->state.upload_scalars[UP_SAGA] = o->saga == SAGA_LOSS ? L1 : fmax(L1 - L0, SAGA_FLOOR);
    c->state.upload_scalars[UP_L0] = L0;
    c->state.upload_scalars[UP_L1] = L1;
    c->state.upload_scalars[UP_RHO] = rho;
    return FH_OK;
}

/* ---- server: SAGA weights (docs/methods/sam.md §12, Eqs. 16-18) ------------------------------------------------------ */

/* The participants' new moving averages a[i] (ascending client id):
 *   wtilde_i = (v_i/sum v + 1e-10)^q / sum_j (v_j/sum v + 1e-10)^q     over the participants,
 *   a_i <- a_i + beta (wtilde_i - a_i)   (= beta wtilde_i + (1 - beta) a_i; this form keeps a_i bit for bit
 *                                          when wtilde_i = a_i, so q = 0 is uniform averaging exactly),
 *   a_i  = wtilde_i at the client's first aggregation.
 * The powers are taken of the ratios to the largest term (same value after the normalisation; no underflow of
 * all terms at large q). */
static int saga_compute(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *a)
{
    const IsmOptions *o = ism_of(s->options);
    const double q = o->q, beta = o->beta;
    const double *avg = s->server_scalars, *seen = s->server_scalars + s->n_clients;
    double sum = 0.0;
    for (int i = 0; i < m; i++) {
        const double v = u[i].scalars[UP_SAGA];
        if (!isfinite(v) || v < 0.0)
            FH_FAIL(FH_ERR_NUMERIC, "round %d: client %d reports %s %g (SAGA needs a finite value >= 0)", s->round + 1,
                    u[i].client, o->saga == SAGA_LOSS ? "perturbed loss" : "sharpness", v);
        sum += v;
    }
    double top = 0.0;
    for (int i = 0; i < m; i++) {
        a[i] = (sum > 0.0 ? u[i].scalars[UP_SAGA] / sum : 0.0) + SAGA_FLOOR;
        if (a[i] > top) top = a[i];
    }
    double total = 0.0;
    for (int i = 0; i < m; i++) total += a[i] = pow(a[i] / top, q);
    for (int i = 0; i < m; i++) {
        const double wt = a[i] / total;
        const int k = u[i].client;
        a[i] = seen[k] != 0.0 ? avg[k] + beta * (wt - avg[k]) : wt;
    }
    return FH_OK;
}

/* p_i proportional to the participants' a_i (the update normalises: renormalised to sum 1 over the round's
 * clients); scaled by the largest so that equal a_i give p_i = 1 exactly, as uniform averaging. No n_i. */
static int saga_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    FH_CHECK(saga_compute(s, u, m, p));
    double top = 0.0;
    for (int i = 0; i < m; i++)
        if (p[i] > top) top = p[i];
    if (!(top > 0.0)) FH_FAIL(FH_ERR_NUMERIC, "round %d: SAGA weights are all zero", s->round + 1);
    for (int i = 0; i < m; i++) p[i] /= top;
    return FH_OK;
}

/* keeps the participants' moving averages; w^{t+1} is then the weighted average sum p_i w_i / sum p_i over the whole
 * state (BatchNorm statistics included, as the code's FedAvg) */
static int saga_observe(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p)
{
    AlgoScratch scratch = s->scratch;
    double *a = algo_scratch_take(&scratch, (size_t)m, sizeof *a, "SAGA's moving averages");
    FH_CHECK(saga_compute(s, u, m, a));
    for (int i = 0; i < m; i++) {
        s->server_scalars[u[i].client] = a[i];
        s->server_scalars[s->n_clients + u[i].client] = 1.0;
    }
    return FH_OK;
}

static const AlgoServerWeights saga_weights_part = { .weights = saga_weights, .rule = "SAGA (sharpness, algo.q)" };
static const AlgoServerUpdate saga_update_part = { .observe = saga_observe };

/* ---- parts and sizes ------------------------------------------------------------------------------- */

/* upload: S_i, L0, L1, rho(t) (clients.csv columns, metrics.csv rho) and the step diagnostics; server: a and the
 * seen flags (2K); work: the saved w (and g for GSAM), work[0] also holds w^t + e in the report */
static void ism_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->upload_scalars = UP_COUNT;
    algo_upload_named(z, UP_SAGA, "saga_score", ALGO_SHOW_CLIENT);
    algo_upload_named(z, UP_L0, "l0", ALGO_SHOW_CLIENT);
    algo_upload_named(z, UP_L1, "l1", ALGO_SHOW_CLIENT);
    algo_upload_named(z, UP_RHO, "rho", ALGO_SHOW_CLIENT | ALGO_SHOW_MEAN);
    algo_upload_named(z, UP_PERTURB_NORM, "perturb_norm", ALGO_SHOW_MEAN);
    algo_upload_named(z, UP_GRAD_NORM, "grad_norm", ALGO_SHOW_MEAN);
    z->server_scalars = 2 * (int64_t)s->n_clients;
    z->work_vectors = ism_of(s->options)->perturb == PERTURB_GSAM ? 2 : 1;
    z->client_scratch = algo_local_sharpness_scratch(s);
    z->server_scratch = algo_scratch_bytes((size_t)algo_max_selected(s), sizeof(double)); /* saga_observe's a */
}

/* SALT's step, or with perturb = none the runtime's plain step: SAGA alone (the paper's Table I ablation) */
static int ism_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    const IsmOptions *o = ism_of(c->round->options);
    if (o->perturb != ISM_PERTURB_NONE) {
        const SamPerturbOptions p = { o->perturb, o->asam_eta, o->gsam_alpha };
        return algo_sam_step_with(c, grad, env, loss, &p);
    }
    FH_CHECK(grad(env, loss));
    c->svc->optimizer_step(c, c->model->state, c->model->grad);
    return FH_OK;
}

static const AlgoLocalStep ism_step_part = { .step = ism_step, .norm_eps = ISM_NORM_EPS };
static const AlgoLocalStep ismplus_step_part = { .step = ism_step, .round_radius = algo_fedismplus_radius,
                                                 .norm_eps = ISM_NORM_EPS };
static const AlgoClientReport ism_report_part = { .begin = ism_begin };

const AlgoMethod algo_family_fedism[] = {
    {
        .name = "fedism",
        .summary = "FedISM: sharpness-aware local training (GSAM) at a constant radius, server weights growing "
                   "with each client's sharpness on its local set (SAGA)",
        .source = "docs/methods/sam.md §12 (and 2)",
        .state = "- | a_k and first-appearance flags (2K scalars)",
        .payload = "down 1, up 1 + S_i (+ L0, L1, rho for clients.csv)",
        .step = &ism_step_part,
        .report = &ism_report_part,
        .weights = &saga_weights_part,
        .update = &saga_update_part,
        .validate = ism_validate,
        .sizes = ism_sizes,
        .quality_shift = 1,
        .parts = { &algo_sam_radius_options, &ism_options },
        .tunes = {
            { "rho", 0.05,
              "radius rho >= 0 of the local GSAM steps and of the sharpness S_i; docs/methods/sam.md §12 default 0.05 (FFL4MIA "
              "options.py). The paper's setup also uses [train] optimizer = adam, lr 3e-4, weight_decay 5e-4, "
              "batch 32, epochs 1, logit_adjust = 1" },
        },
    },
    {
        .name = "fedismplus",
        .summary = "FedISM+: FedISM with a progressive radius rho(t) = rho_max ((t + 1)/T)^tau; SAGA from "
                   "sharpness (S) or perturbed loss (L)",
        .source = "docs/methods/sam.md §12 (and 2)",
        .state = "- | a_k and first-appearance flags (2K scalars)",
        .payload = "down 1 (rho(t) computed on the client), up 1 + S_i or PL_i (+ L0, L1, rho for clients.csv)",
        .step = &ismplus_step_part,
        .report = &ism_report_part,
        .weights = &saga_weights_part,
        .update = &saga_update_part,
        .validate = ism_validate,
        .sizes = ism_sizes,
        .quality_shift = 1,
        .parts = { &ismplus_rho_options, &ism_options, &ismplus_growth_options },
    },
};
const int algo_family_fedism_count = sizeof algo_family_fedism / sizeof algo_family_fedism[0];
