/* Method family 'fair': server weights from clients' losses, accuracies, contributions and label
 * distributions (docs/methods/baselines.md A.9-A.16): q-FedAvg, AFL, FairFed, FedCE, FedGA, FedLW, FedNoLoWe, FedDisco.
 * Local training is the runtime's loop throughout; the parts here are client reports (extra evaluation
 * passes via eval_local, upload scalars, per-client vectors) and server weights/updates. Per-client
 * quantities on the server are K-sized scalar arrays in server_scalars (broadcast, checkpointed). */
#include "algo_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"

#define QFFL_EPS 1e-10 /* q-FedAvg: F_k + 1e-10 (fair_flearn) */
#define FEDLW_EPS 1e-8

/* ---- shared pieces ------------------------------------------------------------------------------------ */

/* mean CE of `state` on the client's whole training set (eval mode, no augmentation) */
static int local_loss(AlgoClientCtx *c, const float *state, double *loss)
{
    AlgoLocalEval e;
    FH_CHECK(c->svc->eval_local(c, c->model, state, &e));
    *loss = e.loss;
    return FH_OK;
}

/* L_k: sample-averaged training loss over all local steps of the round (docs/methods/baselines.md A.15, shared by A.14) */
static double round_train_loss(const AlgoClientCtx *c)
{
    return c->state.samples_seen > 0 ? c->state.loss_sample_sum / (double)c->state.samples_seen : 0.0;
}

static int need_all_clients(const AlgoMethod *m, const AlgoSetup *s, const char *why)
{
    if (!s->all_clients)
        return algo_refuse(m, "needs every client in every round (%s): set fl.selection = all", why);
    return FH_OK;
}

/* p_i = weight of client u[i].client in a K-sized server array */
static void weights_from_array(const AlgoUpload *u, int m, const double *per_client, double *p)
{
    for (int i = 0; i < m; i++) p[i] = per_client[u[i].client];
}

/* x_k <- x_k / sum x; uniform when the sum is not positive */
static void normalise(double *x, int n)
{
    double sum = 0.0;
    for (int k = 0; k < n; k++) sum += x[k];
    for (int k = 0; k < n; k++) x[k] = sum > 0.0 ? x[k] / sum : 1.0 / n;
}

/* ==== q-FedAvg (docs/methods/baselines.md A.9) =============================================================================== */

enum { QF_ORIGINAL, QF_LOSSWEIGHT };
typedef struct {
    double q;
    int variant;
} QfflOptions;
static const AlgoOption qffl_keys[] = {
    { ALGO_NUMBER(QfflOptions, q), .def.f = 1.0, .lo = 0.0, .hi = 1e4,
      .help = "fairness power q >= 0; default 1 [recon]; seed 001 tunes q in {0.5, 1, 2, 5}; q = 0 is uniform "
              "averaging" },
    { ALGO_CHOICE(QfflOptions, variant), .def.s = "original", .choices = "original|lossweight",
      .help = "original (default; Li et al., fair_flearn: F_k = loss of w^t on the client's training set, "
              "w^{t+1} = w^t - sum D_k / sum h_k with L = 1/lr, buffers sample-weighted; L = 1/lr presumes plain SGD: "
              "with momentum or many local steps ||dw_k||^2 grows and the step shrinks, q > 0 then trains slowly) | lossweight (seed 001, "
              "FFL4MIA: w^{t+1} = sum p_k w_k, p_k proportional to (F_k + 1e-10)^q)" },
};
static const AlgoOptionPart qffl_options = ALGO_OPTION_PART("qfedavg", QfflOptions, qffl_keys);
ALGO_OPTIONS_OF(qffl_of, QfflOptions, qffl_options)

static void qffl_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    const int original = qffl_of(s->options)->variant == QF_ORIGINAL;
    z->upload_scalars = original ? 2 : 1; /* F_k (, h_k) */
    if (original) algo_server_keep_sizes(z); /* the round's step s, observe to finish */
}

/* F_k = loss of the broadcast w^t on the client's whole training set */
static int qffl_begin(AlgoClientCtx *c) { return local_loss(c, c->round->global, &c->state.upload_scalars[0]); }

/* original: h_k = q (F_k + eps)^(q-1) ||dw_k||^2 + L (F_k + eps)^q, dw_k = L (w^t - w_k), L = 1/lr */
static int qffl_end(AlgoClientCtx *c)
{
    if (qffl_of(c->round->options)->variant != QF_ORIGINAL) return FH_OK;
    const double q = qffl_of(c->round->options)->q, L = 1.0 / c->round->lr,
                 base = c->state.upload_scalars[0] + QFFL_EPS;
    const float *w = c->model->state;
    double sq = 0.0;
    for (int64_t j = 0; j < c->round->n_params; j++) {
        const double d = L * ((double)c->round->global[j] - (double)w[j]);
        sq += d * d;
    }
    c->state.upload_scalars[1] = q * pow(base, q - 1.0) * sq + L * pow(base, q);
    return FH_OK;
}

/* p_k = (F_k + eps)^q: the lossweight variant's weights; the original's step is built on them too */
static int qffl_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    for (int i = 0; i < m; i++) {
        p[i] = pow(u[i].scalars[0] + QFFL_EPS, qffl_of(s->options)->q);
        if (!isfinite(p[i]))
            FH_FAIL(FH_ERR_NUMERIC, "round %d: q-FedAvg weight (F_k + 1e-10)^q of client %d is %g (F_k = %g, q = %g): "
                    "lower [algo] q", s->round + 1, u[i].client, p[i], u[i].scalars[0], qffl_of(s->options)->q);
    }
    return FH_OK;
}

/* original: w^{t+1} = w^t - sum_k D_k / sum_k h_k with D_k = p_k L (w^t - w_k). Written as
 * (1 - s) w^t + s avg_p(w_k), s = sum_k p_k L / sum_k h_k, avg_p the p-weighted average: the same step
 * (sum_k D_k = L P (w^t - avg_p), P = sum p_k), and with q = 0 (p_k = 1, h_k = L) s is exactly 1 and the
 * result is exactly uniform averaging (docs/methods/baselines.md A.9 unit test). Buffers: sample-weighted average
 * (docs/methods/baselines.md §0.3), the update's sum. The step s from the uploads' h_k, before the sums, kept for the
 * finish (algo_server_keep). */
static int qffl_observe(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p)
{
    if (qffl_of(s->options)->variant != QF_ORIGINAL) return FH_OK;
    const double L = 1.0 / s->lr;
    double num = 0.0, h = 0.0;
    for (int i = 0; i < m; i++) {
        num += p[i] * L;
        h += u[i].scalars[1];
    }
    if (!(h > 0.0) || !isfinite(h) || !isfinite(num))
        FH_FAIL(FH_ERR_NUMERIC, "round %d: q-FedAvg step: sum of h_k = %g, sum of L (F_k + 1e-10)^q = %g", s->round + 1,
                h, num);
    *algo_server_keep(s, "q-FedAvg's step") = num / h;
    return FH_OK;
}

/* the buffers' weights n_k / sum n (original) */
static int qffl_coefficients(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, int k, double *coef)
{
    double total = 0.0;
    for (int i = 0; i < m; i++) total += (double)u[i].n_samples;
    for (int i = 0; i < m; i++) coef[i] = (double)u[i].n_samples / total;
    return FH_OK;
}

/* original, after the p-weighted average (global holds it): the parameters' step, the buffers' sample-weighted
 * average */
static int qffl_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    if (qffl_of(s->options)->variant != QF_ORIGINAL) return FH_OK;
    const double step = algo_server_kept(s);
    for (int64_t j = 0; j < s->n_params; j++)
        global[j] = (float)((1.0 - step) * (double)s->current[j] + step * (double)global[j]);
    memcpy(global + s->n_params, sums + s->n_params, (size_t)(s->n_state - s->n_params) * sizeof *global);
    return FH_OK;
}

static const AlgoClientReport qffl_report = { qffl_begin, qffl_end };
static const AlgoServerWeights qffl_weights_part = { .weights = qffl_weights, .rule = "q-FedAvg's (loss powers)" };
static const AlgoServerUpdate qffl_update_part = {
    .observe = qffl_observe,
    .n_sums = 1, .sums = { { .source = ALGO_SUM_STATE, .coef = ALGO_COEF_OWN } }, .coefficients = qffl_coefficients,
    .finish = qffl_finish
};

/* ==== AFL (docs/methods/baselines.md A.10) =================================================================================== */

enum { AFL_ORIGINAL, AFL_WORST };
typedef struct {
    int variant;
    double eta_lambda;
} AflOptions;
static const AlgoOption afl_keys[] = {
    { ALGO_CHOICE(AflOptions, variant), .def.s = "worst", .choices = "original|worst",
      .help = "worst (default; seed 001, FFL4MIA q >= 100: w^{t+1} = the local model of the client with the largest "
              "loss F_k of w^t) | original (Mohri et al., fair_flearn: one minibatch SGD step per client with step "
              "size [train] lr, w^{t+1} = sum lambda_k w_k, lambda <- Proj_simplex(lambda + eta_lambda loss), the "
              "reported model is the running average of iterates; needs fl.selection = all, train.steps = 1, "
              "train.optimizer = sgd, train.momentum = 0)" },
    { ALGO_NUMBER(AflOptions, eta_lambda), .def.f = 0.01, .lo = 0.0, .hi = 1e6,
      .help = "original: step size of lambda; fair_flearn default 0.01" },
};
static const AlgoOptionPart afl_options = ALGO_OPTION_PART("afl", AflOptions, afl_keys);
ALGO_OPTIONS_OF(afl_of, AflOptions, afl_options)

static void afl_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    if (afl_of(s->options)->variant == AFL_ORIGINAL) {
        z->server_scalars = s->n_clients; /* lambda */
        z->server_private = 1;            /* the running average of iterates, the reported model */
        z->eval_private = 0;
        z->upload_scalars = 0;            /* the minibatch loss is the upload's train_loss (one step) */
        z->server_scratch = algo_scratch_bytes((size_t)s->n_clients, sizeof(double)); /* the projection's sort */
    } else {
        z->upload_scalars = 1; /* F_k */
    }
}

static int afl_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    if (afl_of(s->options)->variant != AFL_ORIGINAL) return FH_OK;
    char bad[512] = "";
    size_t used = 0;
    if (!s->all_clients) used += (size_t)snprintf(bad + used, sizeof bad - used, " fl.selection = all;");
    if (s->steps != 1) used += (size_t)snprintf(bad + used, sizeof bad - used, " train.steps = 1 (now %lld);", (long long)s->steps);
    if (strcmp(s->optimizer, "sgd"))
        used += (size_t)snprintf(bad + used, sizeof bad - used, " train.optimizer = sgd (now %s);", s->optimizer);
    if (s->momentum != 0.0) used += (size_t)snprintf(bad + used, sizeof bad - used, " train.momentum = 0 (now %g);", s->momentum);
    if (used)
        return algo_refuse(m, "variant = original (Mohri et al.: every client takes one plain SGD step on one minibatch "
                           "each round) needs:%s or use variant = worst", bad);
    return FH_OK;
}

static int afl_init(AlgoServerCtx *s, float *global)
{
    if (afl_of(s->options)->variant != AFL_ORIGINAL) return FH_OK;
    for (int k = 0; k < s->n_clients; k++) s->server_scalars[k] = 1.0 / s->n_clients; /* lambda^0 = 1/K */
    memcpy(s->server_private, global, (size_t)s->n_state * sizeof(float));
    return FH_OK;
}

static int afl_begin(AlgoClientCtx *c)
{
    if (afl_of(c->round->options)->variant == AFL_ORIGINAL) return FH_OK;
    return local_loss(c, c->round->global, &c->state.upload_scalars[0]);
}

/* original: p_k = lambda_k; worst: weight 1 on the largest F_k (the lowest id on ties) */
static int afl_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    if (afl_of(s->options)->variant == AFL_ORIGINAL) {
        weights_from_array(u, m, s->server_scalars, p);
        return FH_OK;
    }
    int worst = 0;
    for (int i = 1; i < m; i++)
        if (u[i].scalars[0] > u[worst].scalars[0]) worst = i;
    for (int i = 0; i < m; i++) p[i] = i == worst ? 1.0 : 0.0;
    return FH_OK;
}

/* Euclidean projection of y [n] onto the probability simplex (sort-based; fair_flearn `project`):
 * u = y sorted descending, rho = max{j : u_j + (1 - sum_{i<=j} u_i)/j > 0}, theta = (1 - sum_{i<=rho} u_i)/rho,
 * y_k <- max(y_k + theta, 0). `sorted` is scratch [n]. */
static void simplex_project(double *y, int n, double *sorted)
{
    memcpy(sorted, y, (size_t)n * sizeof *sorted);
    for (int i = 1; i < n; i++) { /* insertion sort, descending: n = K is small */
        double v = sorted[i];
        int j = i - 1;
        while (j >= 0 && sorted[j] < v) {
            sorted[j + 1] = sorted[j];
            j--;
        }
        sorted[j + 1] = v;
    }
    double cum = 0.0, cum_rho = sorted[0];
    int rho = 1;
    for (int j = 1; j <= n; j++) {
        cum += sorted[j - 1];
        if (sorted[j - 1] + (1.0 - cum) / j > 0.0) {
            rho = j;
            cum_rho = cum;
        }
    }
    const double theta = (1.0 - cum_rho) / rho;
    for (int k = 0; k < n; k++) y[k] = y[k] + theta > 0.0 ? y[k] + theta : 0.0;
}

/* original: w^{t+1} = sum_k lambda_k w_k = w^t - lr sum_k lambda_k g_k (each w_k is one SGD step, the average);
 * lambda <- Proj(lambda + eta_lambda l), l_k the minibatch loss at w^t (the weights of this round were taken
 * before) */
static int afl_observe(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p)
{
    if (afl_of(s->options)->variant != AFL_ORIGINAL) return FH_OK;
    double *lambda = s->server_scalars;
    AlgoScratch scratch = s->scratch;
    double *sorted = algo_scratch_take(&scratch, (size_t)s->n_clients, sizeof *sorted, "AFL's projection");
    for (int i = 0; i < m; i++) lambda[u[i].client] += afl_of(s->options)->eta_lambda * u[i].train_loss;
    simplex_project(lambda, s->n_clients, sorted);
    return FH_OK;
}

/* original, after the average: running average wbar^{t+1} = (t wbar^t + w^{t+1}) / (t + 1), the evaluated model */
static int afl_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    if (afl_of(s->options)->variant != AFL_ORIGINAL) return FH_OK;
    const double t = s->round;
    float *avg = s->server_private;
    for (int64_t j = 0; j < s->n_state; j++) avg[j] = (float)((t * (double)avg[j] + (double)global[j]) / (t + 1.0));
    return FH_OK;
}

static const AlgoClientReport afl_report = { afl_begin, NULL };
static const AlgoServerWeights afl_weights_part = { .weights = afl_weights, .rule = "AFL's (the worst client, or minimax lambda)" };
static const AlgoServerUpdate afl_update_part = { .observe = afl_observe, .finish = afl_finish };

/* ==== FairFed (docs/methods/baselines.md A.11) =============================================================================== */

typedef struct {
    double beta;
    int ffl4mia_bug;
} FairFedOptions;
static const AlgoOption fairfed_keys[] = {
    { ALGO_NUMBER(FairFedOptions, beta), .def.f = 0.5, .lo = 0.0, .hi = 1e3,
      .help = "fairness budget beta >= 0; default 0.5 [recon]; seed 001 tunes {0.1, 0.5, 1.0}. Seed 001's form ("
              "FFL4MIA; the paper's text was not available): local metric = balanced accuracy of w^t on the client's "
              "training data (eval mode, no augmentation, unlike FFL4MIA), omega clipped at 0 then normalised" },
    { ALGO_BOOL(FairFedOptions, ffl4mia_bug), .def.b = 0,
      .help = "true reproduces FFL4MIA's element-wise mean accuracy (gap acc_k (1 - n_k/N)); default false: "
              "gap |acc_k - sum_j n_j/N acc_j| (Ezzeldin et al.)" },
};
static const AlgoOptionPart fairfed_options = ALGO_OPTION_PART("fairfed", FairFedOptions, fairfed_keys);
ALGO_OPTIONS_OF(fairfed_of, FairFedOptions, fairfed_options)

static void fairfed_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->server_scalars = s->n_clients; /* omega */
    z->upload_scalars = 1;            /* acc_k */
    z->server_scratch = algo_scratch_bytes((size_t)algo_max_selected(s), sizeof(double)); /* the gaps */
}

static int fairfed_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    return need_all_clients(m, s, "omega is updated from every client's accuracy");
}

static int fairfed_init(AlgoServerCtx *s, float *global)
{
    int64_t total = 0;
    for (int k = 0; k < s->n_clients; k++) total += s->client_sizes[k];
    for (int k = 0; k < s->n_clients; k++) s->server_scalars[k] = (double)s->client_sizes[k] / (double)total;
    return FH_OK;
}

/* acc_k: balanced accuracy of the broadcast w^t on the client's training data (rounds t >= 1) */
static int fairfed_begin(AlgoClientCtx *c)
{
    c->state.upload_scalars[0] = 0.0;
    if (c->round->t == 0) return FH_OK;
    AlgoLocalEval e;
    FH_CHECK(c->svc->eval_local(c, c->model, c->round->global, &e));
    c->state.upload_scalars[0] = e.balanced_accuracy;
    return FH_OK;
}

/* t >= 1: Acc = sum_k n_k/N acc_k, D_k = |acc_k - Acc| (ffl4mia_bug: acc_k (1 - n_k/N)),
 * omega_k <- max(omega_k - beta (D_k - mean D), 0), normalised; round 0 uses omega^0 = n_k/N */
static int fairfed_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    double *omega = s->server_scalars;
    if (s->round > 0) {
        double total = 0.0, acc = 0.0, mean_gap = 0.0;
        for (int i = 0; i < m; i++) total += (double)u[i].n_samples;
        for (int i = 0; i < m; i++) acc += (double)u[i].n_samples / total * u[i].scalars[0];
        AlgoScratch scratch = s->scratch;
        double *gap = algo_scratch_take(&scratch, (size_t)m, sizeof *gap, "FairFed's gaps");
        for (int i = 0; i < m; i++) {
            const double a = u[i].scalars[0];
            gap[i] = fairfed_of(s->options)->ffl4mia_bug ? a * (1.0 - (double)u[i].n_samples / total) : fabs(a - acc);
            mean_gap += gap[i] / m;
        }
        double sum = 0.0;
        for (int i = 0; i < m; i++) {
            const double w = omega[u[i].client] - fairfed_of(s->options)->beta * (gap[i] - mean_gap);
            gap[i] = w > 0.0 ? w : 0.0; /* reused: the new omega */
            sum += gap[i];
        }
        /* all clipped to zero [recon]: keep the previous omega */
        if (sum > 0.0)
            for (int i = 0; i < m; i++) omega[u[i].client] = gap[i] / sum;
    }
    weights_from_array(u, m, omega, p);
    return FH_OK;
}

static const AlgoClientReport fairfed_report = { fairfed_begin, NULL };
static const AlgoServerWeights fairfed_weights_part = { .weights = fairfed_weights, .rule = "FairFed's (balanced-accuracy gaps)" };

/* ==== FedCE (docs/methods/baselines.md A.12) ================================================================================= */

enum { CE_TIMES, CE_PLUS };
typedef struct {
    int mode;
} FedCeOptions;
static const AlgoOption fedce_keys[] = {
    { ALGO_CHOICE(FedCeOptions, mode), .def.s = "times", .choices = "times|plus",
      .help = "combine the normalised contributions by product (default, FFL4MIA) or sum. The documented form (FFL4MIA, full "
              "participation): the minus model (w^t - c_k w_k^{t-1})/(1 - c_k) is evaluated by the client on its own "
              "training data (balanced accuracy; 0 when 1 - c_k < 1e-6 [recon]); cosines over trainable parameters" },
};
static const AlgoOptionPart fedce_options = ALGO_OPTION_PART("fedce", FedCeOptions, fedce_keys);
ALGO_OPTIONS_OF(fedce_of, FedCeOptions, fedce_options)
/* server scalars: c [K] (broadcast: the client reads its c_k), then running sums of cos, new coefficients
 * and minus-model accuracies [K] each */
enum { CE_C, CE_COS_SUM, CE_COEF_SUM, CE_ACC_SUM, CE_ARRAYS };

static void fedce_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->client_vectors = 1; /* w_k^{t-1} */
    z->work_vectors = 1;   /* the minus model */
    z->server_scalars = (int64_t)CE_ARRAYS * s->n_clients;
    z->upload_scalars = 1; /* a_k */
    z->server_scratch = 6 * algo_scratch_bytes((size_t)algo_max_selected(s), sizeof(double)); /* fedce_weights */
}

static int fedce_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    return need_all_clients(m, s, "consensus, contributions and running means are over all clients");
}

static int fedce_init(AlgoServerCtx *s, float *global)
{
    memset(s->server_scalars, 0, (size_t)CE_ARRAYS * s->n_clients * sizeof(double));
    for (int k = 0; k < s->n_clients; k++) s->server_scalars[CE_C * s->n_clients + k] = 1.0 / s->n_clients;
    return FH_OK;
}

/* a_k^t: balanced accuracy of the minus model (w^t - c_k w_k^{t-1}) / (1 - c_k); 0 in round 0 and when
 * 1 - c_k < 1e-6 [recon] */
static int fedce_begin(AlgoClientCtx *c)
{
    c->state.upload_scalars[0] = 0.0;
    const double ck = c->round->server_scalars[CE_C * c->round->setup->n_clients + c->round->client];
    if (!c->round->has_state || 1.0 - ck < 1e-6) return FH_OK;
    const float *prev = c->state.client_vecs;
    for (int64_t j = 0; j < c->round->n_state; j++)
        c->state.work[j] = (float)(((double)c->round->global[j] - ck * (double)prev[j]) / (1.0 - ck));
    AlgoLocalEval e;
    FH_CHECK(c->svc->eval_local(c, c->model, c->state.work, &e));
    c->state.upload_scalars[0] = e.balanced_accuracy;
    return FH_OK;
}

static int fedce_end(AlgoClientCtx *c)
{
    memcpy(c->state.client_vecs, c->model->state, (size_t)c->round->n_state * sizeof(float));
    return FH_OK;
}

/* dot[i] = <s_i, r_i>, ss[i] = ||s_i||^2, rr[i] = ||r_i||^2 over the trainable part, r_i = G - c_i s_i,
 * G = sum_k c_k s_k, s_k = w_k - w^t: G a block at a time (algo_block_len), each sum in ascending element order */
static void fedce_sums(const AlgoServerCtx *s, const AlgoUpload *u, int m, const double *c, double *dot, double *ss,
                       double *rr)
{
    const int64_t P = s->n_params;
    double G[ALGO_BLOCK];
    for (int64_t lo = 0; lo < P; lo += ALGO_BLOCK) {
        const int64_t n = algo_block_len(lo, P);
        const float *w = s->current + lo;
        memset(G, 0, (size_t)n * sizeof *G);
        for (int i = 0; i < m; i++) {
            const double ck = c[u[i].client];
            const float *x = u[i].state + lo;
            for (int64_t j = 0; j < n; j++) G[j] += ck * ((double)x[j] - (double)w[j]);
        }
        for (int i = 0; i < m; i++) {
            const double ck = c[u[i].client];
            const float *x = u[i].state + lo;
            double d = dot[i], a = ss[i], r = rr[i];
            for (int64_t j = 0; j < n; j++) {
                const double sj = (double)x[j] - (double)w[j], rj = G[j] - ck * sj;
                d += sj * rj;
                a += sj * sj;
                r += rj * rj;
            }
            dot[i] = d, ss[i] = a, rr[i] = r;
        }
    }
}

/* G = sum_k c_k s_k, s_k = w_k - w^t (trainable); cos_k = cos(s_k, G - c_k s_k); cw = 1 - mean cos,
 * mv = 1 - mean a, each normalised; c~ = cw mv (times) or cw + mv (plus), normalised; c = mean of c~ */
static int fedce_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    const int K = s->n_clients;
    double *c = s->server_scalars + CE_C * K, *cos_sum = s->server_scalars + CE_COS_SUM * K,
           *coef_sum = s->server_scalars + CE_COEF_SUM * K, *acc_sum = s->server_scalars + CE_ACC_SUM * K;
    AlgoScratch scratch = s->scratch;
    double *dot = algo_scratch_take(&scratch, (size_t)m, sizeof *dot, "FedCE's sums"),
           *ss = algo_scratch_take(&scratch, (size_t)m, sizeof *ss, "FedCE's sums"),
           *rr = algo_scratch_take(&scratch, (size_t)m, sizeof *rr, "FedCE's sums"),
           *cw = algo_scratch_take(&scratch, (size_t)m, sizeof *cw, "FedCE's coefficients"),
           *mv = algo_scratch_take(&scratch, (size_t)m, sizeof *mv, "FedCE's coefficients"),
           *ct = algo_scratch_take(&scratch, (size_t)m, sizeof *ct, "FedCE's coefficients");
    fedce_sums(s, u, m, c, dot, ss, rr);
    const double n_rounds = s->round + 1.0;
    for (int i = 0; i < m; i++) {
        const int k = u[i].client;
        cos_sum[k] += ss[i] > 0.0 && rr[i] > 0.0 ? dot[i] / (sqrt(ss[i]) * sqrt(rr[i])) : 0.0; /* with 0: 0 */
        acc_sum[k] += u[i].scalars[0];
        cw[i] = 1.0 - cos_sum[k] / n_rounds;
        mv[i] = 1.0 - acc_sum[k] / n_rounds;
    }
    normalise(cw, m);
    normalise(mv, m);
    for (int i = 0; i < m; i++) ct[i] = fedce_of(s->options)->mode == CE_TIMES ? cw[i] * mv[i] : cw[i] + mv[i];
    normalise(ct, m);
    for (int i = 0; i < m; i++) {
        coef_sum[u[i].client] += ct[i];
        c[u[i].client] = coef_sum[u[i].client] / n_rounds;
    }
    weights_from_array(u, m, c, p);
    return FH_OK;
}

static const AlgoClientReport fedce_report = { fedce_begin, fedce_end };
static const AlgoServerWeights fedce_weights_part = { .weights = fedce_weights, .rule = "FedCE's (contributions)", .reads_models = 1 };

/* ==== FedGA (docs/methods/baselines.md A.13, seed-001 form) ================================================================== */

typedef struct {
    double step;
} FedGaOptions;
static const AlgoOption fedga_keys[] = {
    { ALGO_NUMBER(FedGaOptions, step), .def.f = 0.05, .lo = 0.0, .hi = 1.0,
      .help = "d_t = step (T - t)/T, weight step d_t/K; FFL4MIA 0.05. Seed 001's form: gaps "
              "L_k(w^t) - L_k(w_k^{t-1}) on the client's training data, centred, a^0 = 1/K, normalise then clip; the "
              "official FedDG-GA (held-out gaps, not centred, step 0.2/#domains, size-weighted a^0) is not implemented. "
              "T = fl.rounds: raising it on --resume changes the remaining steps" },
};
static const AlgoOptionPart fedga_options = ALGO_OPTION_PART("fedga", FedGaOptions, fedga_keys);
ALGO_OPTIONS_OF(fedga_of, FedGaOptions, fedga_options)
/* server scalars: a [K], then L_k(w_k^{t-1}) [K] from the previous round's uploads */
enum { GA_A, GA_OWN_PREV, GA_ARRAYS };
/* upload scalars: L_k(w^t) (begin), L_k(w_k^t) (end) */
enum { GA_UP_GLOBAL, GA_UP_OWN };

static int fedga_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    return need_all_clients(m, s, "the gaps and weights are over all clients");
}

static void fedga_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->server_scalars = (int64_t)GA_ARRAYS * s->n_clients;
    z->upload_scalars = 2;
}

static int fedga_init(AlgoServerCtx *s, float *global)
{
    memset(s->server_scalars, 0, (size_t)GA_ARRAYS * s->n_clients * sizeof(double));
    for (int k = 0; k < s->n_clients; k++) s->server_scalars[GA_A * s->n_clients + k] = 1.0 / s->n_clients;
    return FH_OK;
}

/* L_k(w^t) at the start of round t >= 1 (the gap's first term) */
static int fedga_begin(AlgoClientCtx *c)
{
    c->state.upload_scalars[GA_UP_GLOBAL] = 0.0;
    return c->round->t == 0 ? FH_OK : local_loss(c, c->round->global, &c->state.upload_scalars[GA_UP_GLOBAL]);
}

/* L_k(w_k^t) of the trained model, used by the next round's gap (every round: fl.rounds may be raised on
 * --resume) */
static int fedga_end(AlgoClientCtx *c) { return local_loss(c, c->model->state, &c->state.upload_scalars[GA_UP_OWN]); }

/* t >= 1: G_k = L_k(w^t) - L_k(w_k^{t-1}), centred; d_t = step (T - t)/T; a_k += (d_t/K) G_k / max|G|;
 * a <- a / sum a; a <- max(a, 0) (stored unnormalised, FFL4MIA's order); p = a */
static int fedga_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    const int K = s->n_clients;
    double *a = s->server_scalars + GA_A * K, *own_prev = s->server_scalars + GA_OWN_PREV * K;
    if (s->round > 0) {
        double mean = 0.0, max_abs = 0.0, sum = 0.0;
        for (int i = 0; i < m; i++) mean += (u[i].scalars[GA_UP_GLOBAL] - own_prev[u[i].client]) / m;
        for (int i = 0; i < m; i++) {
            const double g = fabs(u[i].scalars[GA_UP_GLOBAL] - own_prev[u[i].client] - mean);
            if (g > max_abs) max_abs = g;
        }
        const double d = fedga_of(s->options)->step * (double)(s->rounds - s->round) / (double)s->rounds, step = d / K;
        if (max_abs > 0.0) /* all gaps equal: nothing to adjust [recon] */
            for (int i = 0; i < m; i++)
                a[u[i].client] += step * (u[i].scalars[GA_UP_GLOBAL] - own_prev[u[i].client] - mean) / max_abs;
        for (int k = 0; k < K; k++) sum += a[k];
        if (sum > 0.0)
            for (int k = 0; k < K; k++) a[k] /= sum;
        for (int k = 0; k < K; k++) a[k] = a[k] > 0.0 ? a[k] : 0.0;
    }
    for (int i = 0; i < m; i++) own_prev[u[i].client] = u[i].scalars[GA_UP_OWN];
    weights_from_array(u, m, a, p);
    return FH_OK;
}

static const AlgoClientReport fedga_report = { fedga_begin, fedga_end };
static const AlgoServerWeights fedga_weights_part = { .weights = fedga_weights, .rule = "FedGA's (generalisation gaps)" };

/* ==== FedLW (docs/methods/baselines.md A.14, reconstructed) ================================================================== */

typedef struct {
    int times_samples;
} FedLwOptions;
static const AlgoOption fedlw_keys[] = {
    { ALGO_BOOL(FedLwOptions, times_samples), .def.b = 0,
      .help = "true multiplies 1/(L_k + 1e-8) by n_k; default false (a reconstruction: raw inverse loss, L_k the "
              "sample-averaged local training loss of the round)" },
};
static const AlgoOptionPart fedlw_options = ALGO_OPTION_PART("fedlw", FedLwOptions, fedlw_keys);
ALGO_OPTIONS_OF(fedlw_of, FedLwOptions, fedlw_options)

/* upload scalar 0 = L_k (also used by the SAM family's loss-weighted hybrids, algo_internal.h) */
int upload_train_loss(AlgoClientCtx *c)
{
    c->state.upload_scalars[0] = round_train_loss(c);
    return FH_OK;
}

/* p_k proportional to 1/(L_k + 1e-8) (times n_k with times_samples) */
void algo_fedlw_weights(const AlgoUpload *u, int m, double *p, int times_samples)
{
    for (int i = 0; i < m; i++) p[i] = (times_samples ? (double)u[i].n_samples : 1.0) / (u[i].scalars[0] + FEDLW_EPS);
}

static int fedlw_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    algo_fedlw_weights(u, m, p, fedlw_of(s->options)->times_samples);
    return FH_OK;
}

static const AlgoClientReport fedlw_report = { NULL, upload_train_loss };
static const AlgoServerWeights fedlw_weights_part = { .weights = fedlw_weights, .rule = "FedLW's (1 / training loss)" };

/* ==== FedNoLoWe (docs/methods/baselines.md A.15) ============================================================================= */

typedef struct {
    int persistent_optimizer;
} NoLoWeOptions;
static const AlgoOption nolowe_keys[] = {
    { ALGO_BOOL(NoLoWeOptions, persistent_optimizer), .def.b = 0,
      .help = "true keeps each client's SGD momentum buffer between its participations (the official fednolowe "
              "script); default false: a fresh optimiser every round like every other method ([recon])" },
};
static const AlgoOptionPart nolowe_options = ALGO_OPTION_PART("fednolowe", NoLoWeOptions, nolowe_keys);
ALGO_OPTIONS_OF(nolowe_of, NoLoWeOptions, nolowe_options)

static void fednolowe_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->client_vectors = nolowe_of(s->options)->persistent_optimizer ? 1 : 0; /* the client's SGD momentum buffer */
    z->upload_scalars = 1;                                  /* L_k */
}

static int fednolowe_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    if (nolowe_of(s->options)->persistent_optimizer && (strcmp(s->optimizer, "sgd") || !(s->momentum > 0.0)))
        return algo_refuse(m, "persistent_optimizer = true keeps each client's SGD momentum buffer across rounds: it "
                           "needs train.optimizer = sgd and train.momentum > 0 (now %s, momentum %g)", s->optimizer,
                           s->momentum);
    return FH_OK;
}

/* persistent_optimizer: the client's momentum buffer from its last participation continues */
static int fednolowe_begin(AlgoClientCtx *c)
{
    if (!nolowe_of(c->round->options)->persistent_optimizer || !c->round->has_state || !c->state.momentum_buf)
        return FH_OK;
    memcpy(c->state.momentum_buf, c->state.client_vecs, (size_t)c->round->n_params * sizeof(float));
    c->state.momentum_kept = 1;
    return FH_OK;
}

static int fednolowe_end(AlgoClientCtx *c)
{
    if (nolowe_of(c->round->options)->persistent_optimizer && c->state.momentum_buf)
        memcpy(c->state.client_vecs, c->state.momentum_buf, (size_t)c->round->n_params * sizeof(float));
    return upload_train_loss(c);
}

/* l_k = L_k / sum L; p_k = (1 - l_k) / sum_j (1 - l_j) = (1 - l_k)/(m - 1); sum L = 0: uniform; m = 1: 1 */
int fednolowe_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    double total = 0.0;
    for (int i = 0; i < m; i++) total += u[i].scalars[0];
    if (m == 1 || !(total > 0.0)) {
        for (int i = 0; i < m; i++) p[i] = 1.0;
        return FH_OK;
    }
    for (int i = 0; i < m; i++) p[i] = 1.0 - u[i].scalars[0] / total;
    normalise(p, m);
    return FH_OK;
}

static const AlgoClientReport fednolowe_report = { fednolowe_begin, fednolowe_end };
static const AlgoServerWeights fednolowe_weights_part = { .weights = fednolowe_weights, .rule = "FedNoLoWe's (normalised losses)" };

/* ==== FedDisco (docs/methods/baselines.md A.16) ============================================================================== */

typedef struct {
    double a, b;
} DiscoOptions;
static const AlgoOption disco_keys[] = {
    { ALGO_NUMBER(DiscoOptions, a), .def.f = 0.5, .lo = 0.0, .hi = 1e6,
      .help = "discrepancy coefficient a >= 0; official code 0.5; a = b = 0 is FedAvg" },
    { ALGO_NUMBER(DiscoOptions, b), .def.f = 0.1, .lo = 0.0, .hi = 1e6,
      .help = "offset b >= 0; official code 0.1 (the FLOOD paper's b = 1 is taken as a typo)" },
};
static const AlgoOptionPart disco_options = ALGO_OPTION_PART("feddisco", DiscoOptions, disco_keys);
ALGO_OPTIONS_OF(disco_of, DiscoOptions, disco_options)

/* d_k = KL(p_k || uniform) of client k's label distribution */
static double disco_discrepancy(const AlgoServerCtx *s, int k)
{
    const int32_t *counts = s->label_counts + (size_t)k * s->classes;
    int64_t n = 0;
    for (int c = 0; c < s->classes; c++) n += counts[c];
    double d = 0.0;
    for (int c = 0; c < s->classes; c++)
        if (counts[c] > 0) {
            const double pc = (double)counts[c] / (double)n;
            d += pc * log(pc * s->classes);
        }
    return d;
}

/* q_k = n_k/N_S - a d~_k + b, d~_k = d_k / sum_S d_j; p = max(q, 0) normalised; all q <= 0: sample weights.
 * Computed as N_S q_k = n_k - a d~_k N_S + b N_S (the same weights after normalisation), so that a = b = 0
 * gives FedAvg's weights n_k exactly. */
static int feddisco_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    const DiscoOptions *o = disco_of(s->options);
    double d_sum = 0.0, n_sum = 0.0, q_sum = 0.0;
    for (int i = 0; i < m; i++) {
        p[i] = disco_discrepancy(s, u[i].client); /* p holds d_k first */
        d_sum += p[i];
        n_sum += (double)u[i].n_samples;
    }
    for (int i = 0; i < m; i++) {
        const double dt = d_sum > 0.0 ? p[i] / d_sum : 0.0;
        const double q = (double)u[i].n_samples - o->a * dt * n_sum + o->b * n_sum;
        p[i] = q > 0.0 ? q : 0.0;
        q_sum += p[i];
    }
    if (!(q_sum > 0.0))
        for (int i = 0; i < m; i++) p[i] = (double)u[i].n_samples;
    return FH_OK;
}

static const AlgoServerWeights feddisco_weights_part = { .weights = feddisco_weights, .rule = "FedDisco's (sample counts and label discrepancy)" };

/* ==== the rows ========================================================================================== */

const AlgoMethod algo_family_fair[] = {
    {
        .name = "qfedavg",
        .aggregation_is_method = "q-FedAvg's server step (or loss-power weights) is its method",
        .summary = "q-FedAvg: loss-powered fair aggregation (original step of Li et al. 2020, or seed 001's loss-power "
                   "weighted average)",
        .source = "docs/methods/baselines.md A.9",
        .state = "-",
        .payload = "down 1, up 1 + h_k",
        .report = &qffl_report,
        .weights = &qffl_weights_part,
        .update = &qffl_update_part,
        .sizes = qffl_sizes,
        .parts = { &qffl_options },
    },
    {
        .name = "afl",
        .aggregation_is_method = "AFL's weights are its method (lambda on the simplex, or the worst client)",
        .summary = "Agnostic FL: the worst client's model (seed 001, default) or minimax weights lambda on the simplex "
                   "with the running average of iterates as the model (original; the state is the original's)",
        .source = "docs/methods/baselines.md A.10",
        .state = "- | lambda (K), avg (P)",
        .payload = "down 1, up 1 + F_k",
        .report = &afl_report,
        .weights = &afl_weights_part,
        .update = &afl_update_part,
        .server_init = afl_init,
        .validate = afl_validate,
        .sizes = afl_sizes,
        .parts = { &afl_options },
    },
    {
        .name = "fairfed",
        .aggregation_is_method = "FairFed's fairness weights are its method",
        .summary = "FairFed: weights moved away from clients whose balanced accuracy of w^t deviates from the mean",
        .source = "docs/methods/baselines.md A.11",
        .state = "- | omega (K)",
        .payload = "down 1, up 1 + acc_k",
        .report = &fairfed_report,
        .weights = &fairfed_weights_part,
        .server_init = fairfed_init,
        .validate = fairfed_validate,
        .sizes = fairfed_sizes,
        .parts = { &fairfed_options },
    },
    {
        .name = "fedce",
        .aggregation_is_method = "FedCE's contribution weights are its method",
        .summary = "FedCE: weights from gradient-space (cosine) and data-space (minus-model accuracy) contributions",
        .source = "docs/methods/baselines.md A.12",
        .state = "w_k^{t-1} (P) | c, 3 histories (4K)",
        .payload = "down 1+c_k, up 1+a_k",
        .report = &fedce_report,
        .weights = &fedce_weights_part,
        .server_init = fedce_init,
        .validate = fedce_validate,
        .sizes = fedce_sizes,
        .parts = { &fedce_options },
    },
    {
        .name = "fedga",
        .aggregation_is_method = "FedGA's generalisation weights are its method",
        .summary = "FedGA: weights moved towards clients with large generalisation gaps (seed-001 form)",
        .source = "docs/methods/baselines.md A.13",
        .state = "- | a (K), L_k(w_k) (K)",
        .payload = "down 1, up 1+2 scalars",
        .report = &fedga_report,
        .weights = &fedga_weights_part,
        .server_init = fedga_init,
        .validate = fedga_validate,
        .sizes = fedga_sizes,
        .parts = { &fedga_options },
    },
    {
        .name = "fedlw",
        .aggregation_is_method = "FedLW's loss weights are its method",
        .summary = "FedLW [reconstructed: only the abstract of Yao et al. 2025 is available]: weights proportional "
                   "to 1/(training loss)",
        .source = "docs/methods/baselines.md A.14 [recon]",
        .state = "-",
        .payload = "down 1, up 1 + L_k",
        .report = &fedlw_report,
        .weights = &fedlw_weights_part,
        .n_upload_scalars = 1,
        .parts = { &fedlw_options },
    },
    {
        .name = "fednolowe",
        .aggregation_is_method = "FedNoLoWe's loss weights are its method",
        .summary = "FedNoLoWe: normalised loss-based weights (1 - L_k/sum L)/(m - 1)",
        .source = "docs/methods/baselines.md A.15",
        .state = "momentum (P, optional) | -",
        .payload = "down 1, up 1 + L_k",
        .report = &fednolowe_report,
        .weights = &fednolowe_weights_part,
        .validate = fednolowe_validate,
        .sizes = fednolowe_sizes,
        .parts = { &nolowe_options },
    },
    {
        .name = "feddisco",
        .aggregation_is_method = "FedDisco's discrepancy weights are its method",
        .summary = "FedDisco: sample weights corrected by the KL discrepancy of each client's label distribution",
        .source = "docs/methods/baselines.md A.16",
        .state = "-",
        .payload = "down 1, up 1",
        .weights = &feddisco_weights_part,
        .parts = { &disco_options },
    },
};
const int algo_family_fair_count = sizeof algo_family_fair / sizeof algo_family_fair[0];
