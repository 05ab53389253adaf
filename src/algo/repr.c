/* Method family 'repr' (docs/methods/baselines.md A.17-A.21): methods that shape the representation or keep past models.
 *
 *   moon       MOON: model-contrastive term on the features against w^t and the client's previous model
 *   feddecorr  FedDecorr: decorrelation of the batch's features
 *   fedmr      FedMR: m slot models trained by the round's clients, recombined tensor by tensor
 *   fednp      FedNP-min: the documented minimal FedNP (a per-client posterior network on the classifier weights)
 *   fedgkd     FedGKD: distillation from the average of the last M global models (or their logits' average)
 *
 * Batch terms add their gradient to d/dlogits or d/dfeatures and return their value; every term is
 * multiplied by its coefficient (not skipped) so that a zero coefficient runs the same code and adds
 * exact zeros: MOON mu = 0, FedDecorr beta = 0, FedGKD gamma = 0 and FedNP lambda = 0 equal FedAvg bit for
 * bit, which the tests check. Extra forwards run on the client rank's aux models in eval mode. */
#include "algo_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/rng.h"

#define PI 3.14159265358979323846

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* work vectors (n_state floats each) that hold `floats` floats */
static int work_vectors_for(int64_t floats, int64_t n_state)
{
    if (n_state <= 0 || floats <= 0) return floats > 0;
    return (int)((floats + n_state - 1) / n_state);
}

/* ==== MOON (docs/methods/baselines.md A.17) ================================================================================= */

typedef struct {
    double mu, tau;
    int proj_dim;
} MoonOptions;
static const AlgoOption moon_keys[] = {
    { ALGO_NUMBER(MoonOptions, mu), .def.f = 1.0, .lo = 0.0, .hi = 1e6,
      .help = "contrastive weight mu >= 0; default 1 (FLOOD; MOON paper 5 for CIFAR-10, 1 for CIFAR-100); "
              "mu = 0 is FedAvg. z = the classifier's input (penultimate features, or the projection head's output "
              "with proj_dim > 0); cos with eps 1e-8; negatives in eval mode; w_k^prev starts as the initial global "
              "w^0 (FLOOD; official MOON: no negative in round 0)" },
    { ALGO_NUMBER(MoonOptions, tau), .def.f = 0.5, .lo = 0.0, .hi = 1e6, .lo_open = 1,
      .help = "temperature tau > 0 of the contrastive softmax; default 0.5 (MOON, FLOOD)" },
    { ALGO_INT(MoonOptions, proj_dim), .def.i = 0, .lo = 0, .hi = 65536,
      .help = "projection head width: 0 (FLOOD's form, no head; default) or > 0 (official MOON's ModelFedCon: "
              "Linear(f, f), ReLU, Linear(f, proj_dim) on the representation, the classifier on its output; MOON's "
              "code uses 256); z is the head's output, and the head is part of the model state (trained, averaged, "
              "checkpointed). Not for mobilenetv2 (its classifier is a convolution)" },
};
static const AlgoOptionPart moon_options = ALGO_OPTION_PART("moon", MoonOptions, moon_keys);
ALGO_OPTIONS_OF(moon_of, MoonOptions, moon_options)
#define MOON_COS_EPS 1e-8 /* PyTorch cosine_similarity: x.y / (max(|x|, eps) max(|y|, eps)) */

/* MOON's model-contrastive loss (Li et al. 2021, Eq. 3) of the rows of z [n, d] against the positives zg
 * (features of w^t) and negatives zp (features of the previous local model), both frozen:
 *   l_i = -log( e^{cos(z_i, zg_i)/tau} / (e^{cos(z_i, zg_i)/tau} + e^{cos(z_i, zp_i)/tau}) ) = softplus(u_i),
 *   u_i = (cos(z_i, zp_i) - cos(z_i, zg_i)) / tau.
 * Returns mean_i l_i; adds scale * d l_i / d z_i to dz for every row. */
static double moon_contrastive(float *dz, const float *z, const float *zg, const float *zp, int n, int64_t d,
                               double tau, double scale)
{
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        const float *a = z + (int64_t)i * d, *g = zg + (int64_t)i * d, *p = zp + (int64_t)i * d;
        double aa = 0, gg = 0, pp = 0, ag = 0, ap = 0;
        for (int64_t j = 0; j < d; j++) {
            aa += (double)a[j] * a[j];
            gg += (double)g[j] * g[j];
            pp += (double)p[j] * p[j];
            ag += (double)a[j] * g[j];
            ap += (double)a[j] * p[j];
        }
        const double na = sqrt(aa), ca = fmax(na, MOON_COS_EPS), cg = fmax(sqrt(gg), MOON_COS_EPS),
                     cp = fmax(sqrt(pp), MOON_COS_EPS);
        const double spos = ag / (ca * cg), sneg = ap / (ca * cp);
        const double u = (sneg - spos) / tau;
        total += u > 0 ? u + log1p(exp(-u)) : log1p(exp(u));
        /* dl/dspos = -sigma(u)/tau, dl/dsneg = sigma(u)/tau; ds/da = y/(ca cy) - s a/|a|^2 (|a| > eps) */
        const double k = sigmoid(u) / tau;
        const double coef_g = -k / (ca * cg), coef_p = k / (ca * cp);
        const double coef_a = na > MOON_COS_EPS ? -(-k * spos + k * sneg) / (na * na) : 0.0;
        float *dzi = dz + (int64_t)i * d;
        for (int64_t j = 0; j < d; j++)
            dzi[j] += (float)(scale * (coef_g * g[j] + coef_p * p[j] + coef_a * a[j]));
    }
    return n > 0 ? total / n : 0.0;
}

/* aux[0] <- w^t, aux[1] <- w_k^prev, both frozen in eval mode (MOON main.py: global and previous nets
 * .eval()). A client's first participation: w_k^prev = w^0, the initial global (docs/methods/baselines.md A.17, FLOOD), rebuilt
 * from fl.seed exactly as the run made it. */
static int moon_begin(AlgoClientCtx *c)
{
    NnModel *g = c->state.aux[0], *prev = c->state.aux[1];
    if (!g || !prev) FH_FAIL(FH_ERR_USAGE, "moon: needs 2 extra models on the client rank");
    nn_vec_copy(g->state, c->round->global, c->round->n_state);
    if (c->round->has_state) nn_vec_copy(prev->state, c->state.client_vecs, c->round->n_state);
    else nn_model_init_params(prev, (uint64_t)c->round->setup->seed);
    nn_model_set_training(g, 0);
    nn_model_set_training(prev, 0);
    return FH_OK;
}

/* mu * l_con: two extra forwards (3F + 1Bk per step); its gradient goes into d/dfeatures */
static double moon_batch_term(AlgoClientCtx *c, const AlgoBatch *b, float *dlogits, float *dfeatures)
{
    NnModel *g = c->state.aux[0], *prev = c->state.aux[1];
    if (nn_model_forward(g, b->x, b->count) != FH_OK || nn_model_forward(prev, b->x, b->count) != FH_OK)
        return NAN; /* cannot happen (same batch as the model's); NaN stops the run */
    const double mu = moon_of(c->round->options)->mu;
    return mu * moon_contrastive(dfeatures, b->features, nn_model_features(g), nn_model_features(prev), b->count,
                                 b->feature_size, moon_of(c->round->options)->tau, mu / b->count);
}

/* w_k^prev <- w_k^t (the whole state: the negatives are computed in eval mode with its BN statistics) */
static int moon_end(AlgoClientCtx *c)
{
    nn_vec_copy(c->state.client_vecs, c->model->state, c->round->n_state);
    return FH_OK;
}

/* proj_dim > 0: the models carry MOON's projection head, so its parameters are trained, averaged and checkpointed
 * with the rest of the state, and the features contrasted (and classified) are its output */
static void moon_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->aux_models = 2;
    z->proj_dim = moon_of(s->options)->proj_dim;
}

static const AlgoBatchTerm moon_term_part = { moon_batch_term };
static const AlgoClientReport moon_report_part = { moon_begin, moon_end };

/* ==== FedDecorr (docs/methods/baselines.md A.18) ============================================================================ */

typedef struct {
    double beta;
} DecorrOptions;
static const AlgoOption decorr_keys[] = {
    { ALGO_NUMBER(DecorrOptions, beta), .def.f = 0.1, .lo = 0.0, .hi = 1e6,
      .help = "decorrelation weight beta >= 0; default 0.1 (official CIFAR-10 scripts, FLOOD); beta = 0 is "
              "FedAvg. Features = the classifier's input; unbiased variance, eps 1e-8; a batch of 1 adds 0" },
};
static const AlgoOptionPart decorr_options = ALGO_OPTION_PART("feddecorr", DecorrOptions, decorr_keys);
ALGO_OPTIONS_OF(decorr_of, DecorrOptions, decorr_options)
#define DECORR_EPS 1e-8

/* floats of scratch decorr_loss needs */
static int64_t decorr_work_floats(int64_t n, int64_t d) { return 2 * n * d + d * d + 2 * d; }

/* FedDecorr's loss (bytedance/FedDecorr loss.py) of features z [n, d]: centre each column, divide by
 * sqrt(eps + s_j^2) with s_j^2 the unbiased column variance, M = Zh^T Zh,
 *   L = (1/n) (1/(d(d-1))) sum_{a != b} M_ab^2;
 * 0 when n = 1 (or d = 1). Adds scale * dL/dz to dz; work: decorr_work_floats(n, d). */
static double decorr_loss(float *dz, const float *z, int n, int64_t d, double scale, float *work)
{
    if (n < 2 || d < 2) return 0.0;
    float *xh = work, *dxh = xh + (int64_t)n * d, *mm = dxh + (int64_t)n * d, *sd = mm + d * d, *mean = sd + d;
    for (int64_t j = 0; j < d; j++) {
        double s = 0.0, v = 0.0;
        for (int i = 0; i < n; i++) s += z[(int64_t)i * d + j];
        const double mu = s / n;
        for (int i = 0; i < n; i++) {
            const double y = z[(int64_t)i * d + j] - mu;
            v += y * y;
        }
        const double sdj = sqrt(DECORR_EPS + v / (n - 1));
        mean[j] = (float)mu;
        sd[j] = (float)sdj;
        for (int i = 0; i < n; i++) xh[(int64_t)i * d + j] = (float)((z[(int64_t)i * d + j] - mu) / sdj);
    }
    /* M = Zh^T Zh [d, d] */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)d, (int)d, n, 1.0f, xh, (int)d, xh, (int)d, 0.0f, mm,
                (int)d);
    const double c = 1.0 / ((double)n * (double)d * (double)(d - 1));
    double loss = 0.0;
    /* dL/dZh = Zh G with G = 4c M off the diagonal (M symmetric; each M_ab appears twice) */
    for (int64_t a = 0; a < d; a++)
        for (int64_t b = 0; b < d; b++) {
            const double m_ab = mm[a * d + b];
            if (a != b) loss += m_ab * m_ab;
            mm[a * d + b] = a != b ? (float)(4.0 * c * m_ab) : 0.0f;
        }
    loss *= c;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, (int)d, (int)d, 1.0f, xh, (int)d, mm, (int)d, 0.0f, dxh,
                (int)d);
    /* through zh = y / sd (sd from the unbiased variance of y) and y = z - mean:
     * dy_i = g_i / sd - (sum_k g_k y_k) y_i / (sd^3 (n - 1)); dz_i = dy_i - mean_k dy_k */
    for (int64_t j = 0; j < d; j++) {
        const double sdj = sd[j], mu = mean[j];
        double dot = 0.0;
        for (int i = 0; i < n; i++) dot += (double)dxh[(int64_t)i * d + j] * ((double)z[(int64_t)i * d + j] - mu);
        const double k = dot / (sdj * sdj * sdj * (n - 1));
        double sum_dy = 0.0;
        for (int i = 0; i < n; i++) {
            const double dy = dxh[(int64_t)i * d + j] / sdj - k * ((double)z[(int64_t)i * d + j] - mu);
            xh[(int64_t)i * d + j] = (float)dy; /* xh is no longer needed */
            sum_dy += dy;
        }
        const double mdy = sum_dy / n;
        for (int i = 0; i < n; i++) dz[(int64_t)i * d + j] += (float)(scale * ((double)xh[(int64_t)i * d + j] - mdy));
    }
    return loss;
}

static double decorr_batch_term(AlgoClientCtx *c, const AlgoBatch *b, float *dlogits, float *dfeatures)
{
    const double beta = decorr_of(c->round->options)->beta;
    return beta * decorr_loss(dfeatures, b->features, b->count, b->feature_size, beta, c->state.work);
}

static void decorr_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->work_vectors = work_vectors_for(decorr_work_floats(s->batch_size, s->feature_size), s->n_state);
}

static const AlgoBatchTerm decorr_term_part = { decorr_batch_term };

/* ==== FedMR (docs/methods/baselines.md A.19) ================================================================================ */

typedef struct {
    int first_stage;
} FedMrOptions;
static const AlgoOption fedmr_keys[] = {
    { ALGO_INT(FedMrOptions, first_stage), .def.i = 100, .lo = 0, .hi = 1e9,
      .help = "t_1: rounds t < t_1 reset every slot to the uniform average (uniform averaging), rounds t >= t_1 "
              "recombine every tensor with its own random permutation; default 100 (FLOOD's server; official "
              "code 0, its README 50-100 for VGG). m = clients per round (fl.selection bernoulli refused); the "
              "slots travel as m broadcast vectors; slot i goes to the i-th selected client in ascending id" },
};
static const AlgoOptionPart fedmr_options = ALGO_OPTION_PART("fedmr", FedMrOptions, fedmr_keys);
ALGO_OPTIONS_OF(fedmr_of, FedMrOptions, fedmr_options)

/* The m slot models are the server vectors (broadcast with w^t); the global state is their uniform average,
 * used for evaluation only. Slot i goes to the round's i-th selected client (selection in ascending id). */
static void fedmr_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    z->server_vectors = s->per_round > 0 ? s->per_round : 0;
    /* the recombination's permutation and its done flags */
    z->server_scratch = algo_scratch_bytes((size_t)z->server_vectors, sizeof(int64_t)) +
                        algo_scratch_bytes((size_t)z->server_vectors, 1);
}

static int fedmr_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    if (s->per_round < 1)
        return algo_refuse(m, "keeps one slot model per client of a round, so the number per round must be fixed: "
                           "fl.selection = bernoulli is not supported (use fl.selection = fraction, count or all)");
    return FH_OK;
}

/* every slot starts as w^0 */
static int fedmr_init(AlgoServerCtx *s, float *global)
{
    for (int i = 0; i < s->sizes->server_vectors; i++) nn_vec_copy(s->server_vecs + (size_t)i * s->n_state, global, s->n_state);
    return FH_OK;
}

/* the client trains its slot instead of w^t */
static int fedmr_begin(AlgoClientCtx *c)
{
    if (c->round->slot < 0 || c->round->slot >= c->round->sizes->server_vectors)
        FH_FAIL(FH_ERR_USAGE, "fedmr: client %d has slot %d of %d", c->round->client, c->round->slot,
                c->round->sizes->server_vectors);
    nn_vec_copy(c->model->state, c->round->server_vecs + (size_t)c->round->slot * c->round->n_state, c->round->n_state);
    return FH_OK;
}

/* new slot i's [off, off + count) = old slot perm[i]'s, in place by cycles, in chunks of a stack buffer */
static void fedmr_permute(float *slots, int64_t n_state, int m, int64_t off, int64_t count, const int64_t *perm,
                          unsigned char *done)
{
    float tmp[1024];
    for (int64_t a = off; a < off + count; a += 1024) {
        const size_t len = (size_t)(off + count - a < 1024 ? off + count - a : 1024) * sizeof(float);
        memset(done, 0, (size_t)m);
        for (int i0 = 0; i0 < m; i0++) {
            if (done[i0]) continue;
            done[i0] = 1;
            if (perm[i0] == i0) continue;
            memcpy(tmp, slots + (size_t)i0 * n_state + a, len);
            int i = i0;
            for (;;) {
                const int j = (int)perm[i];
                if (j == i0) {
                    memcpy(slots + (size_t)i * n_state + a, tmp, len);
                    break;
                }
                memcpy(slots + (size_t)i * n_state + a, slots + (size_t)j * n_state + a, len);
                done[j] = 1;
                i = j;
            }
        }
    }
}

/* Recombination (FedMR Training_FedMR.py): for every tensor of the state (each weight, bias and buffer on
 * its own) a fresh permutation pi of the slots, new slot i = old slot pi(i). Philox (fl.seed, sample) at
 * counter (round, 1 + tensor index, 0); client selection uses (round, 0, 0). */
static int fedmr_recombine(AlgoServerCtx *s, int m)
{
    if (s->n_views <= 0 || !s->views) FH_FAIL(FH_ERR_USAGE, "fedmr: the server context lacks the model's tensor layout");
    AlgoScratch scratch = s->scratch;
    int64_t *perm = algo_scratch_take(&scratch, (size_t)m, sizeof *perm, "FedMR's permutation");
    unsigned char *done = algo_scratch_take(&scratch, (size_t)m, 1, "FedMR's permutation flags");
    for (int v = 0; v < s->n_views; v++) {
        FhRng rng;
        fh_rng_init(&rng, (uint64_t)s->setup->seed, FH_RNG_SAMPLE, (uint32_t)s->round, (uint32_t)(1 + v), 0);
        fh_rng_permutation(&rng, perm, m);
        fedmr_permute(s->server_vecs, s->n_state, m, s->views[v].offset, s->views[v].count, perm, done);
    }
    return FH_OK;
}

/* global = uniform average of the trained slots (evaluation); then recombination (round >= first_stage) or
 * every slot reset to the average (round < first_stage: uniform averaging) */
static int fedmr_update(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global)
{
    const int slots = s->sizes->server_vectors;
    const int64_t P = s->n_state;
    if (m != slots) FH_FAIL(FH_ERR_USAGE, "fedmr: %d uploads for %d slot models", m, slots);
    FH_CHECK(algo_average(s, u, m, p, global));
    if (s->round < fedmr_of(s->options)->first_stage) {
        for (int i = 0; i < slots; i++) nn_vec_copy(s->server_vecs + (size_t)i * P, global, P);
        return FH_OK;
    }
    for (int i = 0; i < m; i++) {
        int slot = -1;
        for (int k = 0; k < s->n_selected; k++)
            if (s->selected[k] == u[i].client) slot = k;
        if (slot < 0 || slot >= slots) FH_FAIL(FH_ERR_USAGE, "fedmr: client %d is not in the round's selection", u[i].client);
        nn_vec_copy(s->server_vecs + (size_t)slot * P, u[i].state, P);
    }
    return fedmr_recombine(s, slots);
}

static const AlgoClientReport fedmr_report_part = { fedmr_begin, NULL };
static const AlgoServerUpdate fedmr_update_part = {
    .update = fedmr_update, .gathered_because = "FedMR recombines the layers of every client's model"
};

/* ==== FedGKD (docs/methods/baselines.md A.21) =============================================================================== */

enum { GKD_AVG, GKD_VOTE };
typedef struct {
    double gamma, temperature;
    int buffer_length, variant;
} GkdOptions;
static const AlgoOption gkd_keys[] = {
    { ALGO_NUMBER(GkdOptions, gamma), .def.f = 0.1, .lo = 0.0, .hi = 1e6,
      .help = "distillation weight gamma >= 0 of gamma T^2 KL(teacher || student); default 0.1 (FedGKD README, "
              "CIFAR-10 ResNet-8); gamma = 0 is FedAvg; off in round 0 (empty buffer)" },
    { ALGO_INT(GkdOptions, buffer_length), .def.i = 5, .lo = 1, .hi = 1000,
      .help = "M, the number of past global models kept (FIFO, newest w^t included); default 5 (README)" },
    { ALGO_NUMBER(GkdOptions, temperature), .def.f = 1.0, .lo = 0.0, .hi = 1000.0, .lo_open = 1,
      .help = "distillation temperature T > 0; default 1 (FedGKD code and README)" },
    { ALGO_CHOICE(GkdOptions, variant), .def.s = "avg", .choices = "avg|vote",
      .help = "avg: the teacher is the parameter average of the buffer (spec, FedGKD avg_param; default); vote: "
              "distillation from the mean of the M buffered models' logits, all M broadcast [recon: docs/methods/baselines.md A.21 "
              "leaves FedGKD-VOTE out of scope]" },
};
static const AlgoOptionPart gkd_options = ALGO_OPTION_PART("fedgkd", GkdOptions, gkd_keys);
ALGO_OPTIONS_OF(gkd_of, GkdOptions, gkd_options)
enum { GKD_COUNT, GKD_HEAD }; /* server scalars: models in the buffer, next slot to write */

/* The FIFO of the last M globals: avg keeps it on the server (private vectors) and broadcasts the teacher,
 * their parameter average, as server vector 0 (none when M = 1: the teacher is w^t); vote broadcasts the
 * buffer itself (server vectors 0..M-1) and the client averages the M models' logits. */
static void fedgkd_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    const GkdOptions *o = gkd_of(s->options);
    const int M = o->buffer_length >= 1 ? o->buffer_length : 1;
    if (o->variant == GKD_VOTE) {
        z->server_vectors = M;
        z->work_vectors = work_vectors_for((int64_t)s->batch_size * s->classes, s->n_state);
    } else {
        z->server_private = M;
        z->server_vectors = M > 1;
        /* fedgkd_finish's view of the buffer as uploads, and their weights */
        if (M > 1) z->server_scratch = algo_scratch_bytes((size_t)M, sizeof(AlgoUpload)) +
                                       algo_scratch_bytes((size_t)M, sizeof(double));
    }
    z->server_scalars = 2;
    z->aux_models = 1;
}

/* after the average: w^{t+1} enters the FIFO (the oldest leaves); avg: teacher = uniform average of the
 * buffer, in slot order */
static int fedgkd_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    const int64_t P = s->n_state;
    const GkdOptions *o = gkd_of(s->options);
    const int M = o->buffer_length, vote = o->variant == GKD_VOTE;
    float *fifo = vote ? s->server_vecs : s->server_private;
    int head = (int)s->server_scalars[GKD_HEAD], count = (int)s->server_scalars[GKD_COUNT];
    nn_vec_copy(fifo + (size_t)head * P, global, P);
    head = (head + 1) % M;
    count = count + 1 < M ? count + 1 : M;
    s->server_scalars[GKD_HEAD] = head;
    s->server_scalars[GKD_COUNT] = count;
    if (vote || M == 1) return FH_OK;
    AlgoScratch scratch = s->scratch;
    AlgoUpload *buf = algo_scratch_take(&scratch, (size_t)count, sizeof *buf, "FedGKD's buffer");
    double *ones = algo_scratch_take(&scratch, (size_t)count, sizeof *ones, "FedGKD's weights");
    for (int i = 0; i < count; i++) {
        buf[i].state = fifo + (size_t)i * P;
        ones[i] = 1.0;
    }
    return algo_average_range(s, buf, count, ones, -1, 0, P, s->server_vecs);
}

/* the teacher into aux[0], eval mode; nothing while the buffer is empty (round 0: distillation off) */
static int fedgkd_begin(AlgoClientCtx *c)
{
    if (c->round->server_scalars[GKD_COUNT] < 1) return FH_OK;
    NnModel *t = c->state.aux[0];
    if (!t) FH_FAIL(FH_ERR_USAGE, "fedgkd: needs an extra model on the client rank");
    nn_model_set_training(t, 0);
    if (gkd_of(c->round->options)->variant == GKD_AVG)
        nn_vec_copy(t->state, c->round->sizes->server_vectors ? c->round->server_vecs : c->round->global,
                    c->round->n_state);
    return FH_OK;
}

/* gamma T^2 mean KL(softmax(t/T) || softmax(s/T)) (FedGKD worker_fedgkd.py); avg: t = logits of the averaged
 * model (2F + 1Bk per step); vote: t = mean of the buffered models' logits ((1 + M)F + 1Bk) */
static double fedgkd_batch_term(AlgoClientCtx *c, const AlgoBatch *b, float *dlogits, float *dfeatures)
{
    const int count = (int)c->round->server_scalars[GKD_COUNT];
    if (count < 1) return 0.0;
    NnModel *t = c->state.aux[0];
    const float *teacher;
    if (gkd_of(c->round->options)->variant == GKD_AVG) {
        if (nn_model_forward(t, b->x, b->count) != FH_OK) return NAN;
        teacher = nn_model_logits(t);
    } else {
        float *acc = c->state.work, *own = t->state;
        const int64_t n = (int64_t)b->count * b->classes;
        memset(acc, 0, (size_t)n * sizeof(float));
        for (int i = 0; i < count; i++) {
            t->state = (float *)(c->round->server_vecs + (size_t)i * c->round->n_state); /* read only in eval mode */
            const int status = nn_model_forward(t, b->x, b->count);
            t->state = own;
            if (status != FH_OK) return NAN;
            nn_vec_axpy(acc, 1.0f, nn_model_logits(t), n);
        }
        nn_vec_scale(acc, 1.0f / (float)count, n);
        teacher = acc;
    }
    const GkdOptions *o = gkd_of(c->round->options);
    return nn_kl_distill(dlogits, b->logits, teacher, (float)o->temperature, (float)o->gamma, b->count, b->classes);
}

static const AlgoBatchTerm fedgkd_term_part = { fedgkd_batch_term };
static const AlgoClientReport fedgkd_report_part = { fedgkd_begin, NULL };
static const AlgoServerUpdate fedgkd_update_part = { .finish = fedgkd_finish };

/* ==== FedNP-min (docs/methods/baselines.md A.20) ============================================================================ */

/* Follows the documented minimal version (the FLOOD port of FedNP): a per-client NPN maps a 10-dimensional
 * Gaussian (mu, sigma) to a Gaussian over the D classifier weights, and L_np pulls the classifier towards
 * its mean. Layout:
 *   client floats  cavity mean [10], cavity variance [10], NPN: W1 [10 x 10], b1 [10], W2 [10 x D], b2 [D]
 *   upload scalars site mean [10], site variance [10], the feature mean f of the local set
 *   server scalars every client's site (mean [10], variance [10]), K x 20, initialised to (0, 1)
 *   work           the current prior (mu, sigma) [20 doubles], the NPN gradient [110 + 11 D doubles]
 * Reconstructed where the sources are silent [recon]: the prior of the first step comes from the first batch's
 * features; the cavity of client k is the precision-weighted product of the other K - 1 clients' latest
 * sites (so the initial sites (0, 1) give the documented initial cavity (0, 1/(K-1))); "remove cavity"
 * subtracts natural parameters, sigma_site = 1/(1/sigma_post - 1/sigma_cav), mu_site = sigma_site
 * (mu_post/sigma_post - mu_cav/sigma_cav), both clamped to [EPS, 5] (a negative variance becomes EPS); the
 * NPN is stepped by plain SGD with the local lr and weight decay (no momentum). */
typedef struct {
    double lambda;
} FedNpOptions;
static const AlgoOption fednp_keys[] = {
    { ALGO_NUMBER(FedNpOptions, lambda), .def.f = 0.01, .lo = 0.0, .hi = 1e6,
      .help = "FedNP-min (not the full FedNP: docs/methods/baselines.md A.20's minimal version of the FLOOD port, D = classifier "
              "weights): weight lambda >= 0 of L_np = mean_i (W_i - mu_i)^2 / (2 sigma_i + 1e-5), KLD dropped; "
              "default 0.01; lambda = 0 trains the NPN but leaves the model as FedAvg's. Features = the "
              "classifier's input; cavity = product of the other clients' sites [recon]" },
};
static const AlgoOptionPart fednp_options = ALGO_OPTION_PART("fednp", FedNpOptions, fednp_keys);
ALGO_OPTIONS_OF(fednp_of, FedNpOptions, fednp_options)
#define NP_EPS 1e-5
#define NP_HI 5.0
#define NP_DIM 10
#define NP_SITE (2 * NP_DIM)
#define NP_NPN_FLOATS(D) (NP_DIM * NP_DIM + NP_DIM + 11 * (D))
#define NP_RNG_TAG 0x4e504eu /* "NPN": Philox (fl.seed, init) counter (tag, client, 0) */

static double np_clamp(double x) { return fmin(fmax(x, NP_EPS), NP_HI); } /* NaN -> EPS */

/* EP prior (mu, sigma) [10 each] of the cavity (cm, cs) seen through the feature mean f (docs/methods/baselines.md A.20) */
static void fednp_prior(double *mu, double *sigma, const float *cav_m, const float *cav_s, double f)
{
    const double a2 = 4.0 - 2.0 * sqrt(2.0), b2 = log(sqrt(2.0) + 1.0);
    const double a3 = 6.0 * (1.0 - pow(2.0, -1.5)), b3 = log(pow(2.0, 1.5) - 1.0);
    for (int k = 0; k < NP_DIM; k++) {
        const double cm = f * cav_m[k], cs = f * f * cav_s[k];
#define NP_S(a, b) sigmoid((a) * (cm + (b)) / (sqrt(fmax(0.0, 1.0 + PI / 8.0 * (a) * (a) * cs)) + NP_EPS))
        const double e1 = NP_S(1.0, 0.0), e2 = NP_S(a2, b2), e3 = NP_S(a3, b3);
#undef NP_S
        const double p1 = (cm + cs) * e1 - cs * e2;
        const double p2 = (cm + 2.0 * cs) * e2 - 2.0 * cs * e3;
        const double s1 = p1 / (e1 * f + NP_EPS);
        const double s2 = (cs * e1 + (cm + cs) * p1 - cs * p2) / (e1 * f * f + NP_EPS);
        mu[k] = np_clamp(s1);
        sigma[k] = np_clamp(fmax(0.0, s2 - s1 * s1) + NP_EPS);
    }
}

/* L_np = (1/D) sum_i (w_i - mu_i)^2 / (2 s_i + EPS), (mu, s) = NPN(xm, xs):
 *   NPNLinear(x_m, x_s) = (x_m W + b, x_s (W o W)), W [in x out];
 *   NPNSigmoid: a_m = sigma(o_m / sqrt(1 + pi/8 o_s)), a_s = sigma(al (o_m + be) / sqrt(1 + pi/8 al^2 o_s)) - a_m^2,
 *   al = 4 - 2 sqrt 2, be = -ln(sqrt 2 + 1).
 * Adds scale dL/dw to gw (when not NULL); writes dL/dtheta to g (when not NULL; the NPN's layout). */
static double fednp_loss(const float *npn, int64_t D, const double *xm, const double *xs, const float *w, double scale,
                         float *gw, double *g)
{
    const double al = 4.0 - 2.0 * sqrt(2.0), be = -log(sqrt(2.0) + 1.0);
    const float *W1 = npn, *b1 = W1 + NP_DIM * NP_DIM, *W2 = b1 + NP_DIM, *b2 = W2 + NP_DIM * D;
    double om[NP_DIM], os[NP_DIM], am[NP_DIM], as[NP_DIM], dam[NP_DIM] = { 0 }, das[NP_DIM] = { 0 };
    for (int k = 0; k < NP_DIM; k++) {
        double m = b1[k], s = 0.0;
        for (int j = 0; j < NP_DIM; j++) {
            m += xm[j] * W1[j * NP_DIM + k];
            s += xs[j] * (double)W1[j * NP_DIM + k] * W1[j * NP_DIM + k];
        }
        om[k] = m;
        os[k] = s;
        am[k] = sigmoid(m / sqrt(1.0 + PI / 8.0 * s));
        as[k] = sigmoid(al * (m + be) / sqrt(1.0 + PI / 8.0 * al * al * s)) - am[k] * am[k];
    }
    double *gW1 = g, *gb1 = g ? g + NP_DIM * NP_DIM : NULL, *gW2 = g ? gb1 + NP_DIM : NULL, *gb2 = g ? gW2 + NP_DIM * D : NULL;
    double loss = 0.0;
    for (int64_t i = 0; i < D; i++) {
        double mu = b2[i], s = 0.0;
        for (int j = 0; j < NP_DIM; j++) {
            const double wji = W2[j * D + i];
            mu += am[j] * wji;
            s += as[j] * wji * wji;
        }
        const double den = 2.0 * s + NP_EPS, r = (double)w[i] - mu;
        loss += r * r / den;
        if (gw) gw[i] += (float)(scale * 2.0 * r / ((double)D * den));
        if (!g) continue;
        const double dmu = -2.0 * r / ((double)D * den), ds = -2.0 * r * r / ((double)D * den * den);
        gb2[i] = dmu;
        for (int j = 0; j < NP_DIM; j++) {
            const double wji = W2[j * D + i];
            gW2[j * D + i] = dmu * am[j] + ds * as[j] * 2.0 * wji;
            dam[j] += dmu * wji;
            das[j] += ds * wji * wji;
        }
    }
    if (g)
        for (int k = 0; k < NP_DIM; k++) {
            const double u = 1.0 + PI / 8.0 * os[k], v = 1.0 + PI / 8.0 * al * al * os[k];
            const double s2 = sigmoid(al * (om[k] + be) / sqrt(v));
            const double dh1 = (dam[k] - 2.0 * am[k] * das[k]) * am[k] * (1.0 - am[k]);
            const double dh2 = das[k] * s2 * (1.0 - s2);
            const double dom = dh1 / sqrt(u) + dh2 * al / sqrt(v);
            const double dos = -0.5 * PI / 8.0 * (dh1 * om[k] / (u * sqrt(u)) + dh2 * al * al * al * (om[k] + be) / (v * sqrt(v)));
            gb1[k] = dom;
            for (int j = 0; j < NP_DIM; j++) gW1[j * NP_DIM + k] = dom * xm[j] + dos * xs[j] * 2.0 * W1[j * NP_DIM + k];
        }
    return loss / (double)D;
}

/* The classifier weight: the linear layer that produces the logits, [classes x features] */
static int fednp_classifier(const NnModel *m, int64_t *offset, int64_t *count)
{
    for (int l = m->n_layers - 1; l >= 0; l--)
        if (m->layers[l].out == m->logits && m->layers[l].type == NN_OP_LINEAR && m->layers[l].w_off >= 0) {
            *offset = m->layers[l].w_off;
            *count = (int64_t)m->layers[l].cin * m->layers[l].cout;
            return FH_OK;
        }
    FH_FAIL(FH_ERR_USAGE, "fednp: model %s has no linear classifier producing the logits", m->arch);
}

static void fednp_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    const int64_t D = (int64_t)s->classes * s->feature_size;
    z->client_floats = NP_SITE + NP_NPN_FLOATS(D);
    z->upload_scalars = NP_SITE + 1;
    z->server_scalars = (int64_t)NP_SITE * s->n_clients;
    z->work_vectors = work_vectors_for(2 * (NP_SITE + NP_NPN_FLOATS(D)), s->n_state);
}

static int fednp_validate(const AlgoMethod *m, const AlgoSetup *s)
{
    if (s->n_clients < 2) return algo_refuse(m, "the cavity of a client is the product of the other clients' sites: needs at least 2 clients");
    return FH_OK;
}

/* every client's site starts at (0, 1) */
static int fednp_init(AlgoServerCtx *s, float *global)
{
    for (int k = 0; k < s->n_clients; k++)
        for (int d = 0; d < NP_DIM; d++) {
            s->server_scalars[(int64_t)k * NP_SITE + d] = 0.0;
            s->server_scalars[(int64_t)k * NP_SITE + NP_DIM + d] = 1.0;
        }
    return FH_OK;
}

/* the cavity of client k: precision-weighted product of the other clients' sites (ascending id) */
static void fednp_cavity(float *cav, const double *sites, int n_clients, int k)
{
    for (int d = 0; d < NP_DIM; d++) {
        double prec = 0.0, eta = 0.0;
        for (int j = 0; j < n_clients; j++) {
            if (j == k) continue;
            const double lj = 1.0 / (sites[(int64_t)j * NP_SITE + NP_DIM + d] + NP_EPS);
            prec += lj;
            eta += sites[(int64_t)j * NP_SITE + d] * lj;
        }
        const double sigma = 1.0 / (prec + NP_EPS);
        cav[d] = (float)(sigma * eta);
        cav[NP_DIM + d] = (float)sigma;
    }
}

static int fednp_begin(AlgoClientCtx *c)
{
    const int64_t D = (int64_t)c->round->setup->classes * c->round->setup->feature_size;
    int64_t off = 0, count = 0;
    FH_CHECK(fednp_classifier(c->model, &off, &count));
    if (count != D) FH_FAIL(FH_ERR_USAGE, "fednp: classifier has %lld weights, expected %lld", (long long)count, (long long)D);
    float *npn = c->state.client_floats + NP_SITE;
    if (!c->round->has_state) { /* NPN parameters U(-0.05, 0.05) */
        FhRng rng;
        fh_rng_init(&rng, (uint64_t)c->round->setup->seed, FH_RNG_INIT, NP_RNG_TAG, (uint32_t)c->round->client, 0);
        for (int64_t q = 0; q < NP_NPN_FLOATS(D); q++) npn[q] = (float)(0.1 * fh_rng_uniform(&rng) - 0.05);
    }
    fednp_cavity(c->state.client_floats, c->round->server_scalars, c->round->setup->n_clients, c->round->client);
    return FH_OK;
}

static double mean_floats(const float *x, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    return n > 0 ? s / (double)n : 0.0;
}

/* lambda L_np: its gradient on the classifier weights into grad, an SGD step of the NPN, then the prior of
 * the next step from this batch's (detached) features, still in the model after the backward pass */
static double fednp_term(AlgoClientCtx *c, const float *w, float *grad)
{
    const int64_t D = (int64_t)c->round->setup->classes * c->round->setup->feature_size;
    int64_t off = 0, count = 0;
    if (fednp_classifier(c->model, &off, &count) != FH_OK) return NAN;
    const double lambda = fednp_of(c->round->options)->lambda;
    float *npn = c->state.client_floats + NP_SITE;
    const float *cav = c->state.client_floats;
    double *prior = (double *)c->state.work, *g = prior + NP_SITE;
    const double f = mean_floats(nn_model_features(c->model), (int64_t)c->model->batch * c->round->setup->feature_size);
    if (c->state.step == 0) fednp_prior(prior, prior + NP_DIM, cav, cav + NP_DIM, f);
    const double L = fednp_loss(npn, D, prior, prior + NP_DIM, w + off, lambda, grad + off, g);
    const double lr = c->round->lr, wd = c->round->setup->weight_decay;
    for (int64_t q = 0; q < NP_NPN_FLOATS(D); q++) npn[q] = (float)(npn[q] - lr * (lambda * g[q] + wd * npn[q]));
    fednp_prior(prior, prior + NP_DIM, cav, cav + NP_DIM, f);
    return lambda * L;
}

typedef struct {
    double sum;
    int64_t n;
} FeatureSum;

static int fednp_add_features(void *env, const AlgoBatch *b)
{
    FeatureSum *e = env;
    const int64_t n = (int64_t)b->count * b->feature_size;
    e->sum += mean_floats(b->features, n) * (double)n;
    e->n += n;
    return FH_OK;
}

/* the site: the prior from the trained model's features on the whole local set (eval mode), cavity removed */
static int fednp_end(AlgoClientCtx *c)
{
    if (!c->svc->for_each_local_batch) FH_FAIL(FH_ERR_USAGE, "fednp: the client context cannot iterate the local data");
    FeatureSum e = { 0.0, 0 };
    FH_CHECK(c->svc->for_each_local_batch(c, c->model, c->model->state, fednp_add_features, &e));
    const double f = e.n > 0 ? e.sum / (double)e.n : 0.0;
    double mu[NP_DIM], sigma[NP_DIM];
    const float *cav = c->state.client_floats;
    fednp_prior(mu, sigma, cav, cav + NP_DIM, f);
    for (int d = 0; d < NP_DIM; d++) {
        const double sr = 1.0 / (1.0 / sigma[d] - 1.0 / (double)cav[NP_DIM + d]);
        const double mr = sr * (mu[d] / sigma[d] - (double)cav[d] / (double)cav[NP_DIM + d]);
        c->state.upload_scalars[d] = np_clamp(mr);
        c->state.upload_scalars[NP_DIM + d] = np_clamp(sr);
    }
    c->state.upload_scalars[NP_SITE] = f;
    return FH_OK;
}

/* the uploaded sites replace the senders' (precision merge at the next cavity); the models: FedAvg */
static int fednp_observe(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p)
{
    for (int i = 0; i < m; i++)
        memcpy(s->server_scalars + (int64_t)u[i].client * NP_SITE, u[i].scalars, NP_SITE * sizeof(double));
    return FH_OK;
}

static const AlgoLocalTerm fednp_term_part = { fednp_term };
static const AlgoClientReport fednp_report_part = { fednp_begin, fednp_end };
static const AlgoServerUpdate fednp_update_part = { .observe = fednp_observe };

/* ==== registry rows ===================================================================================== */

const AlgoMethod algo_family_repr[] = {
    {
        .name = "moon",
        .summary = "MOON: model-contrastive term on the features vs w^t (positive) and the client's previous model",
        .source = "docs/methods/baselines.md A.17",
        .state = "w_k^prev (P) | -",
        .payload = "down 1, up 1",
        .batch_term = &moon_term_part,
        .report = &moon_report_part,
        .weights = &algo_weights_samples,
        .sizes = moon_sizes,
        .n_client_vectors = 1,
        .parts = { &moon_options },
    },
    {
        .name = "feddecorr",
        .summary = "FedDecorr: beta x mean squared off-diagonal correlation of the batch's features",
        .source = "docs/methods/baselines.md A.18",
        .state = "-",
        .payload = "down 1, up 1",
        .batch_term = &decorr_term_part,
        .weights = &algo_weights_samples,
        .sizes = decorr_sizes,
        .parts = { &decorr_options },
    },
    {
        .name = "fedmr",
        .aggregation_is_method = "FedMR keeps slot models and recombines layers: its server step is no weighted mean",
        .summary = "FedMR: m slot models trained by the round's clients, recombined tensor by tensor; eval on their mean",
        .source = "docs/methods/baselines.md A.19",
        .state = "- | m slots (m P, broadcast)",
        .payload = "down 1, up 1",
        .report = &fedmr_report_part,
        .weights = &algo_weights_uniform,
        .update = &fedmr_update_part,
        .server_init = fedmr_init,
        .validate = fedmr_validate,
        .sizes = fedmr_sizes,
        .parts = { &fedmr_options },
    },
    {
        .name = "fednp",
        .summary = "FedNP-min: the documented minimal FedNP, a per-client posterior network regularising the classifier",
        .source = "docs/methods/baselines.md A.20 (minimal version)",
        .state = "NPN+cavity (11D+130) | 20 K",
        .payload = "down 1+20, up 1+20",
        .local_term = &fednp_term_part,
        .report = &fednp_report_part,
        .weights = &algo_weights_samples,
        .update = &fednp_update_part,
        .server_init = fednp_init,
        .validate = fednp_validate,
        .sizes = fednp_sizes,
        .parts = { &fednp_options },
    },
    {
        .name = "fedgkd",
        .summary = "FedGKD: distillation from the average of the last M global models (variant vote: their logits)",
        .source = "docs/methods/baselines.md A.21",
        .state = "- | M past globals (M P)",
        .payload = "down 2, vote 1+M; up 1",
        .batch_term = &fedgkd_term_part,
        .report = &fedgkd_report_part,
        .weights = &algo_weights_samples,
        .update = &fedgkd_update_part,
        .sizes = fedgkd_sizes,
        .parts = { &gkd_options },
    },
};
const int algo_family_repr_count = sizeof algo_family_repr / sizeof algo_family_repr[0];
