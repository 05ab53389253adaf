/* Method family 'fedscam' (docs/methods/sam.md §10; seed 000, arXiv 2601.00853): FedSCAM and its two ablations.
 *
 *   fedscam      SAM local training with a per-client radius rho_i from a heterogeneity score h_i and the
 *                alignment c_i of a pilot direction with the previous global direction; server weights
 *                S_i = n_i/(1 + gamma_h h_adj_i) max(0, 1 + beta c_i) q_i, with optional clustered conflict
 *                damping (q_i = lambda_c);
 *   fedscam_wa   the same server weights, plain SGD local training, a plain-gradient pilot (paper's WA);
 *   fedscam_sam  the adaptive radius only: the server averages with n_i but still computes u_t (paper's SAM).
 *
 * Client, round t (report->begin, before the first step; model->state = w_t):
 *   h_i = (1/B) sum_b ||g(w_t; xi_b)||, xi_b the first B minibatches of an extra shuffle (c->svc->probe_grad:
 *        train mode, BatchNorm statistics frozen, not training steps);
 *   pilot: e_p = rho_pilot g_1/||g_1||, rho_pilot = 0.5 rho_max/(1 + alpha_rho h_i), v_i = -g(w_t + e_p; xi_1)
 *          (WA: v_i = -g_1, no extra pass);
 *   s_i = Proj_d(Normalize(v_i)); c_i = cos(s_i, u_{t-1}) (0 while u = 0); h_adj_i = h_i max(0, 1 - kappa c_i);
 *   rho_i = rho_max/(1 + alpha_rho h_adj_i), the radius of every SAM step (client_radius hook, sam.c's step).
 * report->end: z_i = Proj_d(Normalize(Delta_i)), ||Delta_i||.
 * Server: weights as above (fallback n_i when they sum to 0); w_{t+1} = weighted average (buffers too);
 *   u_t = Proj_d(Normalize(w_{t+1} - w_t)) into the server scalars (d doubles, broadcast, checkpointed).
 * Proj_d: a signed count sketch (or dense Gaussian) from Philox (seed, projection) with the coordinate as
 * counter: the same on every rank, in every round, without a stored matrix. Projections and norms cover the
 * trainable parameters [0, n_params).
 *
 * Upload scalars: rho_i, h_i, c_i, h_adj_i, ||Delta_i||, then z_i (d), then (SAM rows) the diagnostics mean ||eps||
 * and mean ||g||. clients.csv gets rho, h, c, h_adj, delta_norm (WA: no rho); metrics.csv rho = mean rho_i. */
#include "algo_internal.h"
#include "fedscam.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/rng.h"

#define SCAM_KMEANS_ITERS 50
#define SCAM_SMALL_MODEL 1000000 /* trainable parameters below which d defaults to 256 (else 512) */
/* second Philox counter word under (seed, projection): keeps these draws apart from each other and from
 * fedhet landscape's (direction, tensor, 0) streams */
#define TAG_SKETCH 0xF5CA0001u
#define TAG_GAUSS 0xF5CA0002u
#define TAG_KMEANS 0xF5CA0003u

enum { UP_RHO, UP_H, UP_C, UP_HADJ, UP_DNORM, UP_Z };

/* The keys, in four parts: the radius (rows with SAM steps), the server weights (rows with FedSCAM's weights),
 * the summaries (every row), the conflict damping (with the weights). */
typedef struct {
    double rho_max, alpha_rho;
} ScamRadiusOptions;
static const AlgoOption scam_radius_keys[] = {
    { ALGO_NUMBER(ScamRadiusOptions, rho_max), .def.f = 0.05, .lo = 0.0, .hi = 1e6,
      .help = "largest SAM radius rho_max >= 0: rho_i = rho_max/(1 + alpha_rho h_adj_i), the pilot uses 0.5 rho_max/(1 + "
              "alpha_rho h_i); paper default 0.05 (the paper sweeps 0.01, 0.05, 0.1; 0.1 gave its best final "
              "accuracy)" },
    { ALGO_NUMBER(ScamRadiusOptions, alpha_rho), .def.f = 1.0, .lo = 0.0, .hi = 1e6,
      .help = "radius modulation strength alpha_rho >= 0; default 1 [PROPOSED: the paper gives no value]; 0 puts "
              "every client at rho_max. h_i is a raw gradient norm, so the scale depends on model, loss and batch size" },
};
static const AlgoOptionPart scam_radius_options =
    ALGO_OPTION_PART("fedscam_radius", ScamRadiusOptions, scam_radius_keys);
ALGO_OPTIONS_OF(scam_radius_of, ScamRadiusOptions, scam_radius_options)

typedef struct {
    double gamma_h, beta;
} ScamWeightsOptions;
static const AlgoOption scam_weights_keys[] = {
    { ALGO_NUMBER(ScamWeightsOptions, gamma_h), .def.f = 1.0, .lo = 0.0, .hi = 1e6,
      .help = "heterogeneity penalty gamma_h >= 0 in S_i = n_i/(1 + gamma_h h_adj_i) max(0, 1 + beta c_i) q_i; "
              "paper default 1 (the paper sweeps 0, 1, 5; 1 the most stable)" },
    { ALGO_NUMBER(ScamWeightsOptions, beta), .def.f = 0.8, .lo = 0.0, .hi = 1e6,
      .help = "alignment boost beta >= 0 in max(0, 1 + beta c_i); default 0.8 [PROPOSED, inside the paper's sweep 0, "
              "0.8, 2; the paper finds no gain over 0 at Dirichlet 0.1]; 0 disables. Weights summing to 0 fall back to "
              "n_i" },
};
static const AlgoOptionPart scam_weights_options =
    ALGO_OPTION_PART("fedscam_weights", ScamWeightsOptions, scam_weights_keys);

typedef struct {
    double kappa;
    int probe_batches, proj_dim, proj;
} ScamSummaryOptions;
static const AlgoOption scam_summary_keys[] = {
    { ALGO_NUMBER(ScamSummaryOptions, kappa), .def.f = 0.5, .lo = 0.0, .hi = 1e6,
      .help = "alignment credit kappa >= 0 in h_adj_i = h_i max(0, 1 - kappa c_i), c_i = cos(s_i, u_{t-1}) of the pilot "
              "direction's summary with the previous global direction's; default 0.5 [PROPOSED: not in the paper]" },
    { ALGO_INT(ScamSummaryOptions, probe_batches), .def.i = 3, .lo = 1, .hi = 1e6,
      .help = "B, minibatches of the heterogeneity score h_i = (1/B) sum ||g(w_t; xi_b)||: the first B of an extra "
              "shuffle of the client's data (fewer if it has fewer), train mode, BatchNorm statistics frozen, not training "
              "steps [PROPOSED]; paper default 3" },
    { ALGO_INT(ScamSummaryOptions, proj_dim), .def.i = 0, .lo = 0, .hi = 1e6,
      .help = "d, the dimension of the projected summaries (u, s_i, z_i; d doubles each way): d >= 1, or 0 = "
              "auto (default): 512, or 256 for models under 1M trainable parameters ([PROPOSED threshold]; the paper "
              "uses 256 for its small CNN, 512 for ResNet-18)" },
    { ALGO_CHOICE(ScamSummaryOptions, proj), .def.s = "sketch", .choices = "sketch|gaussian",
      .help = "Proj_d: sketch (signed count sketch, bucket and sign of coordinate k from Philox (fl.seed, projection) with "
              "counter k; O(P), no stored matrix; default [PROPOSED]) or gaussian (dense N(0, 1/d) entries from the "
              "same counters; O(d P) per projection, slow on large models); the paper only says 'random projection'" },
};
static const AlgoOptionPart scam_summary_options =
    ALGO_OPTION_PART("fedscam_summary", ScamSummaryOptions, scam_summary_keys);
ALGO_OPTIONS_OF(scam_summary_of, ScamSummaryOptions, scam_summary_options)

typedef struct {
    int cluster, clusters;
    double lambda_c;
} ScamClusterOptions;
static const AlgoOption scam_cluster_keys[] = {
    { ALGO_BOOL(ScamClusterOptions, cluster), .def.b = 0,
      .help = "clustered conflict damping: k-means of the unit z_i (k-means++ seeding from Philox, Lloyd until stable or "
              "50 iterations) into K_c = min(clusters, m) clusters; inside a cluster, of every pair with cos(z_i, z_j) < 0 "
              "the client with the smaller ||Delta|| (ties: the larger id) gets q_i = lambda_c, once [PROPOSED]; "
              "default false (optional in the paper)" },
    { ALGO_INT(ScamClusterOptions, clusters), .def.i = 3, .lo = 1, .hi = 1e6,
      .help = "K_c >= 1, the number of clusters (capped at the round's client count m); default 3 "
              "[PROPOSED: not in the paper]" },
    { ALGO_NUMBER(ScamClusterOptions, lambda_c), .def.f = 0.5, .lo = 0.0, .hi = 1.0, .lo_open = 1,
      .help = "conflict down-weight factor lambda_c in (0, 1] for the flagged clients (cluster = true); default 0.5 "
              "[PROPOSED: not in the paper]" },
};
static const AlgoOptionPart scam_cluster_options =
    ALGO_OPTION_PART("fedscam_cluster", ScamClusterOptions, scam_cluster_keys);

/* A row's settings; the parts it lacks take their neutral values (WA has no radius, SAM no weights) */
typedef struct {
    int sam; /* SAM local steps and a pilot at the perturbed point (not WA) */
    double rho_max, alpha_rho, gamma_h, beta, kappa, lambda_c;
    int probe, dim_key, gaussian, cluster, clusters;
} ScamSettings;

static ScamSettings scam_settings(AlgoOptions o)
{
    const ScamRadiusOptions *r = algo_options_find(o, &scam_radius_options);
    const ScamWeightsOptions *w = algo_options_find(o, &scam_weights_options);
    const ScamSummaryOptions *y = scam_summary_of(o);
    const ScamClusterOptions *k = algo_options_find(o, &scam_cluster_options);
    return (ScamSettings){ .sam = r != NULL, .rho_max = r ? r->rho_max : 0.0, .alpha_rho = r ? r->alpha_rho : 0.0,
                           .gamma_h = w ? w->gamma_h : 0.0, .beta = w ? w->beta : 0.0, .kappa = y->kappa,
                           .lambda_c = k ? k->lambda_c : 1.0, .probe = y->probe_batches,
                           .dim_key = y->proj_dim, .gaussian = y->proj, .cluster = k ? k->cluster : 0,
                           .clusters = k ? k->clusters : 1 };
}

/* d: proj_dim, or 0 = 512 (256 under 1M trainable parameters) */
static int dim_of(const ScamSettings *h, int64_t n_params)
{
    return h->dim_key > 0 ? h->dim_key : n_params < SCAM_SMALL_MODEL ? 256 : 512;
}

/* cos(a, b), 0 when a norm is 0 (docs/methods/sam.md §0.1) */
static double cosine(const double *a, const double *b, int d)
{
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (int j = 0; j < d; j++) {
        ab += a[j] * b[j];
        aa += a[j] * a[j];
        bb += b[j] * b[j];
    }
    return aa > 0.0 && bb > 0.0 ? ab / (sqrt(aa) * sqrt(bb)) : 0.0;
}

/* ---- the formulas -------------------------------------------------------------------------------------- */

double fedscam_radius(double rho_max, double alpha_rho, double h_adj) { return rho_max / (1.0 + alpha_rho * h_adj); }

double fedscam_weight(double n, double gamma_h, double h_adj, double beta, double c, double q)
{
    const double align = 1.0 + beta * c;
    return n / (1.0 + gamma_h * h_adj) * (align > 0.0 ? align : 0.0) * q;
}

void fedscam_project(uint64_t seed, int gaussian, const float *a, const float *b, int64_t n, double scale, int d,
                     double *out)
{
    memset(out, 0, (size_t)d * sizeof *out);
    if (!gaussian) {
        /* bucket(k) = floor(r0 d / 2^32), sign(k) = - when the top bit of r1 is set */
        for (int64_t k = 0; k < n; k++) {
            uint32_t r[4];
            fh_rng_block(r, seed, FH_RNG_PROJECTION, (uint32_t)k, TAG_SKETCH, (uint32_t)(k >> 32), 0);
            const double x = b ? (double)a[k] - (double)b[k] : (double)a[k];
            const int j = (int)(((uint64_t)r[0] * (uint64_t)d) >> 32);
            out[j] += r[1] >> 31 ? -x : x;
        }
    } else {
        /* entry (j, k) ~ N(0, 1/d): Box-Muller on the words of block (k, tag, j/4), two pairs per block */
        const double sd = 1.0 / sqrt((double)d), two_pi = 6.283185307179586;
        for (int64_t k = 0; k < n; k++) {
            const double x = b ? (double)a[k] - (double)b[k] : (double)a[k];
            if (x == 0.0) continue;
            for (int j0 = 0; j0 < d; j0 += 4) {
                uint32_t r[4];
                fh_rng_block(r, seed, FH_RNG_PROJECTION, (uint32_t)k, TAG_GAUSS, (uint32_t)(j0 / 4), (uint32_t)(k >> 32));
                for (int p = 0; p < 2; p++) {
                    const double u1 = ((double)r[2 * p] + 1.0) / 4294967296.0, u2 = (double)r[2 * p + 1] / 4294967296.0;
                    const double rad = sd * sqrt(-2.0 * log(u1)) * x, ang = two_pi * u2;
                    if (j0 + 2 * p < d) out[j0 + 2 * p] += rad * cos(ang);
                    if (j0 + 2 * p + 1 < d) out[j0 + 2 * p + 1] += rad * sin(ang);
                }
            }
        }
    }
    for (int j = 0; j < d; j++) out[j] *= scale;
}

static double sq_dist(const double *a, const double *b, int d)
{
    double s = 0.0;
    for (int j = 0; j < d; j++) s += (a[j] - b[j]) * (a[j] - b[j]);
    return s;
}

/* k-means's clusters: k capped at the rows m, at least 1 */
static int kmeans_clusters(int m, int k) { return k > m ? m : k < 1 ? 1 : k; }

size_t fedscam_kmeans_scratch(int m, int d, int k)
{
    k = kmeans_clusters(m, k);
    return algo_scratch_bytes((size_t)k * d, sizeof(double)) + algo_scratch_bytes((size_t)m, sizeof(double)) +
           algo_scratch_bytes((size_t)k, sizeof(int)) + algo_scratch_bytes((size_t)m, sizeof(int));
}

void fedscam_kmeans(const double *x, int m, int d, int k, uint64_t seed, uint32_t round, int *assign,
                    AlgoScratch work)
{
    k = kmeans_clusters(m, k);
    double *cent = algo_scratch_take(&work, (size_t)k * d, sizeof *cent, "k-means centres"),
           *d2 = algo_scratch_take(&work, (size_t)m, sizeof *d2, "k-means distances");
    int *count = algo_scratch_take(&work, (size_t)k, sizeof *count, "k-means counts"),
        *chosen = algo_scratch_take(&work, (size_t)m, sizeof *chosen, "k-means seeds");
    /* k-means++: the first centre uniform, then each with probability ~ squared distance to the nearest */
    FhRng rng;
    fh_rng_init(&rng, seed, FH_RNG_PROJECTION, round, TAG_KMEANS, 0);
    int pick = (int)fh_rng_below(&rng, (uint64_t)m);
    for (int c = 0; c < k; c++) {
        if (c > 0) {
            double total = 0.0;
            for (int i = 0; i < m; i++) {
                double best = INFINITY;
                for (int e = 0; e < c; e++) {
                    const double s = sq_dist(x + (size_t)i * d, cent + (size_t)e * d, d);
                    if (s < best) best = s;
                }
                d2[i] = best;
                total += best;
            }
            if (total > 0.0) pick = (int)fh_rng_categorical(&rng, d2, m);
            else /* every row sits on a centre: the first row not taken yet */
                for (pick = 0; chosen[pick]; pick++) {}
        }
        chosen[pick] = 1;
        memcpy(cent + (size_t)c * d, x + (size_t)pick * d, (size_t)d * sizeof *cent);
    }
    /* Lloyd: assign to the nearest centre (ties: lower index), then centres = means (an empty cluster keeps
     * its centre), until nothing moves */
    for (int i = 0; i < m; i++) assign[i] = -1;
    for (int it = 0; it < SCAM_KMEANS_ITERS; it++) {
        int moved = 0;
        for (int i = 0; i < m; i++) {
            int best = 0;
            double bd = sq_dist(x + (size_t)i * d, cent, d);
            for (int c = 1; c < k; c++) {
                const double s = sq_dist(x + (size_t)i * d, cent + (size_t)c * d, d);
                if (s < bd) bd = s, best = c;
            }
            if (assign[i] != best) moved = 1, assign[i] = best;
        }
        if (!moved) break;
        memset(count, 0, (size_t)k * sizeof *count);
        for (int i = 0; i < m; i++) count[assign[i]]++;
        for (int c = 0; c < k; c++)
            if (count[c]) memset(cent + (size_t)c * d, 0, (size_t)d * sizeof *cent);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < d; j++) cent[(size_t)assign[i] * d + j] += x[(size_t)i * d + j];
        for (int c = 0; c < k; c++)
            for (int j = 0; count[c] && j < d; j++) cent[(size_t)c * d + j] /= count[c];
    }
}

/* ---- client -------------------------------------------------------------------------------------------- */

/* h_i, the pilot direction, c_i, h_adj_i, rho_i into the upload scalars (s_i is kept where z_i goes later) */
static int scam_begin(AlgoClientCtx *c)
{
    const ScamSettings h = scam_settings(c->round->options);
    const int64_t P = c->round->n_params, N = c->round->n_state;
    const int d = dim_of(&h, P);
    const uint64_t seed = (uint64_t)c->round->setup->seed;
    double *up = c->state.upload_scalars, *s = up + UP_Z;
    const float *g = c->model->grad, *wt = c->round->global;
    float *g1 = h.sam ? c->state.work : NULL; /* the first probe gradient, kept for the pilot */
    double loss = 0.0, sum = 0.0, g1_norm = 0.0;
    int64_t rows = 0;
    int batches = 0;
    memset(s, 0, (size_t)d * sizeof *s);
    for (int b = 0; b < h.probe; b++) {
        FH_CHECK(c->svc->probe_grad(c, b, wt, &loss, &rows));
        if (rows == 0) break;
        const double norm = nn_vec_norm_f64(g, P);
        sum += norm;
        batches++;
        if (b > 0) continue;
        g1_norm = norm;
        if (g1) nn_vec_copy(g1, g, P);
        else if (norm > 0.0) fedscam_project(seed, h.gaussian, g, NULL, P, -1.0 / norm, d, s); /* WA: v = -g_1 */
    }
    const double h_i = batches ? sum / batches : 0.0;
    if (g1 && batches) {
        /* w_t + e_p, e_p = rho_pilot g_1/||g_1|| (buffers as w_t); v = -g(w_t + e_p; xi_1) */
        const double rho_pilot = 0.5 * fedscam_radius(h.rho_max, h.alpha_rho, h_i);
        const float scale = g1_norm > 0.0 ? (float)(rho_pilot / g1_norm) : 0.0f;
        for (int64_t j = 0; j < P; j++) g1[j] = wt[j] + scale * g1[j];
        if (N > P) memcpy(g1 + P, wt + P, (size_t)(N - P) * sizeof(float));
        FH_CHECK(c->svc->probe_grad(c, 0, g1, &loss, &rows));
        const double norm = nn_vec_norm_f64(g, P);
        if (norm > 0.0) fedscam_project(seed, h.gaussian, g, NULL, P, -1.0 / norm, d, s);
    }
    const double c_i = cosine(s, c->round->server_scalars, d), credit = 1.0 - h.kappa * c_i;
    const double h_adj = h_i * (credit > 0.0 ? credit : 0.0);
    up[UP_RHO] = h.sam ? fedscam_radius(h.rho_max, h.alpha_rho, h_adj) : NAN;
    up[UP_H] = h_i;
    up[UP_C] = c_i;
    up[UP_HADJ] = h_adj;
    return FH_OK;
}

/* ||Delta_i|| and z_i = Proj_d(Normalize(Delta_i)) */
static int scam_end(AlgoClientCtx *c)
{
    const ScamSettings h = scam_settings(c->round->options);
    const int64_t P = c->round->n_params;
    double *up = c->state.upload_scalars;
    const double norm = nn_vec_dist_f64(c->model->state, c->round->global, P);
    up[UP_DNORM] = norm;
    fedscam_project((uint64_t)c->round->setup->seed, h.gaussian, c->model->state, c->round->global, P,
                    norm > 0.0 ? 1.0 / norm : 0.0, dim_of(&h, P), up + UP_Z);
    return FH_OK;
}

/* the SAM radius of this client's steps: rho_i of report->begin */
static double scam_client_radius(const AlgoClientCtx *c, double rho) { return c->state.upload_scalars[UP_RHO]; }

/* rho(t) of sam.c's radius hooks: rho_max, which the client's radius replaces */
static double scam_round_radius(const AlgoSetup *s, AlgoOptions o, int round)
{
    return scam_radius_of(o)->rho_max;
}

/* sam.c's plain SAM step (docs/methods/sam.md §1) with rho_i */
static int scam_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    const SamPerturbOptions sam = { .perturb = PERTURB_SAM };
    return algo_sam_step_with(c, grad, env, loss, &sam);
}

/* ---- server -------------------------------------------------------------------------------------------- */

/* the server scratch of damp_conflicts for m clients: their unit z_i, clusters and flags, then k-means's */
static size_t damp_conflicts_scratch(int m, int d, const ScamSettings *h)
{
    return algo_scratch_bytes((size_t)m * d, sizeof(double)) + 2 * algo_scratch_bytes((size_t)m, sizeof(int)) +
           fedscam_kmeans_scratch(m, d, h->clusters);
}

/* q_i = lambda_c for the clients flagged in a conflicting pair inside a k-means cluster of the unit z_i */
static void damp_conflicts(const AlgoServerCtx *s, const AlgoUpload *u, int m, int d, const ScamSettings *h, double *q)
{
    AlgoScratch scratch = s->scratch;
    double *x = algo_scratch_take(&scratch, (size_t)m * d, sizeof *x, "FedSCAM's unit summaries");
    int *assign = algo_scratch_take(&scratch, (size_t)m, sizeof *assign, "FedSCAM's clusters"),
        *flagged = algo_scratch_take(&scratch, (size_t)m, sizeof *flagged, "FedSCAM's conflict flags");
    for (int i = 0; i < m; i++) {
        const double *z = u[i].scalars + UP_Z;
        double n = 0.0;
        for (int j = 0; j < d; j++) n += z[j] * z[j];
        n = sqrt(n);
        for (int j = 0; n > 0.0 && j < d; j++) x[(size_t)i * d + j] = z[j] / n;
    }
    const int k = h->clusters < m ? h->clusters : m;
    fedscam_kmeans(x, m, d, k, (uint64_t)s->setup->seed, (uint32_t)s->round, assign, scratch);
    for (int i = 0; i < m; i++)
        for (int j = i + 1; j < m; j++) {
            if (assign[i] != assign[j]) continue;
            double dot = 0.0;
            for (int e = 0; e < d; e++) dot += x[(size_t)i * d + e] * x[(size_t)j * d + e];
            if (!(dot < 0.0)) continue;
            /* the smaller ||Delta||; on a tie the larger client id (uploads are in ascending id) */
            flagged[u[i].scalars[UP_DNORM] < u[j].scalars[UP_DNORM] ? i : j] = 1;
        }
    for (int i = 0; i < m; i++)
        if (flagged[i]) q[i] = h->lambda_c;
}

static int scam_weights(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    const ScamSettings h = scam_settings(s->options);
    for (int i = 0; i < m; i++) p[i] = 1.0; /* q_i */
    if (h.cluster && m > 1) damp_conflicts(s, u, m, dim_of(&h, s->n_params), &h, p);
    double total = 0.0;
    for (int i = 0; i < m; i++) {
        const double *sc = u[i].scalars;
        p[i] = fedscam_weight((double)u[i].n_samples, h.gamma_h, sc[UP_HADJ], h.beta, sc[UP_C], p[i]);
        total += p[i];
    }
    if (!(total > 0.0)) /* every weight 0 (all alignments <= -1/beta): sample counts [PROPOSED] */
        for (int i = 0; i < m; i++) p[i] = (double)u[i].n_samples;
    return FH_OK;
}

/* after the weighted average (buffers with the same weights; global holds it): u_t = Proj_d(Normalize(w_{t+1} -
 * w_t)) */
static int scam_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    const ScamSettings h = scam_settings(s->options);
    const int64_t P = s->n_params;
    const double norm = nn_vec_dist_f64(global, s->current, P);
    fedscam_project((uint64_t)s->setup->seed, h.gaussian, global, s->current, P, norm > 0.0 ? 1.0 / norm : 0.0,
                    dim_of(&h, P), s->server_scalars);
    return FH_OK;
}

static void scam_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    const ScamSettings h = scam_settings(s->options);
    const int d = dim_of(&h, s->n_params);
    z->server_scalars = d;       /* u */
    z->upload_scalars = UP_Z + d; /* rho_i, h_i, c_i, h_adj_i, ||Delta_i||, z_i */
    if (h.cluster) z->server_scratch = damp_conflicts_scratch(algo_max_selected(s), d, &h);
    if (h.sam) algo_upload_named(z, UP_RHO, "rho", ALGO_SHOW_CLIENT | ALGO_SHOW_MEAN);
    algo_upload_named(z, UP_H, "h", ALGO_SHOW_CLIENT);
    algo_upload_named(z, UP_C, "c", ALGO_SHOW_CLIENT);
    algo_upload_named(z, UP_HADJ, "h_adj", ALGO_SHOW_CLIENT);
    algo_upload_named(z, UP_DNORM, "delta_norm", ALGO_SHOW_CLIENT);
    if (!h.sam) return;
    z->work_vectors = 1; /* the pilot's point, then SAM's saved weights */
    algo_sam_diag_sizes(z);
}

static const AlgoLocalStep scam_step_part = { .step = scam_step, .round_radius = scam_round_radius,
                                              .client_radius = scam_client_radius };
static const AlgoClientReport scam_report_part = { .begin = scam_begin, .end = scam_end };
static const AlgoServerWeights scam_weights_part = { .weights = scam_weights, .rule = "FedSCAM's (heterogeneity and alignment)" };
static const AlgoServerUpdate scam_update_part = { .finish = scam_finish };

/* ---- the registry rows ---------------------------------------------------------------------------------- */

const AlgoMethod algo_family_fedscam[] = {
    {
        .name = "fedscam",
        .summary = "FedSCAM: SAM with a per-client radius from gradient heterogeneity and alignment, heterogeneity- "
                   "and alignment-aware server weights (no public code: the pilot, projection, clustering and "
                   "alpha_rho, kappa, beta, K_c, lambda_c are the documented choices)",
        .source = "docs/methods/sam.md §10",
        .state = "- | u (d scalars)",
        .payload = "down 1 + d scalars, up 1 + 7 + d scalars",
        .step = &scam_step_part,
        .report = &scam_report_part,
        .weights = &scam_weights_part,
        .update = &scam_update_part,
        .sizes = scam_sizes,
        .parts = { &scam_radius_options, &scam_weights_options, &scam_summary_options, &scam_cluster_options },
    },
    {
        .name = "fedscam_wa",
        .summary = "FedSCAM (WA) ablation: FedSCAM's server weights over plain SGD local training (pilot = the plain "
                   "first probe gradient)",
        .source = "docs/methods/sam.md §10 (ablations)",
        .state = "- | u (d scalars)",
        .payload = "down 1 + d scalars, up 1 + 5 + d scalars",
        .report = &scam_report_part,
        .weights = &scam_weights_part,
        .update = &scam_update_part,
        .sizes = scam_sizes,
        .parts = { &scam_weights_options, &scam_summary_options, &scam_cluster_options },
    },
    {
        .name = "fedscam_sam",
        .summary = "FedSCAM (SAM) ablation: FedSCAM's per-client radius, server average by sample counts (u_t still "
                   "computed for the alignment)",
        .source = "docs/methods/sam.md §10 (ablations)",
        .state = "- | u (d scalars)",
        .payload = "down 1 + d scalars, up 1 + 7 + d scalars",
        .step = &scam_step_part,
        .report = &scam_report_part,
        .weights = &algo_weights_samples,
        .update = &scam_update_part,
        .sizes = scam_sizes,
        .parts = { &scam_radius_options, &scam_summary_options },
    },
};
const int algo_family_fedscam_count = sizeof algo_family_fedscam / sizeof algo_family_fedscam[0];
