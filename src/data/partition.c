/* Client partitions of a training set: docs/methods/partitions.md, sections B.2 - B.6.
 *
 * data_partition() validates the spec, checks the labels, groups the rows by label once and hands over
 * to one procedure per (scheme, variant) row of the table at the bottom of this file:
 *   iid          niid-bench (default)  B.3  permutation cut with array_split sizes
 *                flood                 B.3  each client draws floor(N/K) from the pool, N mod K unused
 *                fl-simulator          B.3  permutation cut floor(N/K), client 0 takes the remainder
 *   dirichlet    niid-bench (default)  B.4  per-class Dir(alpha) over clients, balancing trick, redraw
 *                                           the whole allocation until every client has >= min_size
 *                prior                 B.4  FL-Simulator: class prior per client, equal sizes, refill
 *                quality               B.4  FFL4MIA: clean group and corrupted group (last m ids)
 *   pathological shard (default)       B.5  FLOOD Path(r): s = r*K/C contiguous shards per class
 *                class                 B.5  FL-Simulator: c classes per client + prior sampling
 *   quantity     niid-bench (default)  B.6  Dir(alpha) client sizes over one permutation, redraw
 *
 * Randomness (B.2). The reference codes use NumPy's legacy generator; we reproduce the procedures (and
 * so the distributions), not its bit stream. Every draw comes from a Philox stream of purpose
 * FH_RNG_PARTITION opened at counter (c0, c1, c2) = (step tag, what, which): the tag (PART_TAG_* below)
 * names the step of the procedure, c1 and c2 the attempt, class, client or group the draw is for. A
 * draw therefore depends only on the seed and on what it is for, never on how many draws came before
 * elsewhere; this is also what lets the B.4 / B.6 resampling loops test an attempt without doing its
 * shuffles and then redo exactly that attempt. c0 = 0 and 1 belong to data_corrupt_image (data.h:
 * counter (group, image, 0)), so the tags start at 0x100.
 *
 * Output: offsets [K + 1] and indices grouped by client; within a client the order is the one the
 * procedure produces (noted per procedure). On failure *out is left empty (all fields zero). */
#include "fedhet/data.h"
#include "fedhet/core.h"
#include "fedhet/rng.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define PART_DEFAULT_MIN_SIZE 10
#define PART_DEFAULT_MAX_ATTEMPTS 10000
/* [recon] B.4: redraws of one class's p when the balancing trick has zeroed every client that got mass
 * (only with tiny alpha, where Dir(alpha) is nearly one-hot). Each redraw succeeds with probability
 * >= 1/K, so the cap is never reached in practice; if it is, the attempt counts as failed. */
#define PART_MAX_P_REDRAWS 10000

/* c0 of every partition stream: one value per procedure step (see the header comment) */
enum {
    PART_TAG_IID_PERM = 0x100,   /* B.3 niid-bench and fl-simulator permutation     (0, 0)            */
    PART_TAG_IID_FLOOD,          /* B.3 flood: client k's draws from the pool        (k, 0)            */
    PART_TAG_DIR_P,              /* B.4 step 2b: p ~ Dir(beta 1_K) of class c        (attempt, c)      */
    PART_TAG_DIR_SHUFFLE,        /* B.4 step 2b: shuffle of class c's indices        (attempt, c)      */
    PART_TAG_DIR_FINAL,          /* B.4 step 3: shuffle of client k's list           (attempt, k)      */
    PART_TAG_PRIOR_PERM,         /* B.4 prior (1): permutation of the training set   (0, 0)            */
    PART_TAG_PRIOR_DIR,          /* B.4 prior (3): pi_k ~ Dir(beta 1_C)              (k, 0)            */
    PART_TAG_PRIOR_PICK,         /* B.4 prior (4): client picks                      (0, 0)            */
    PART_TAG_PRIOR_CLASS,        /* B.4 prior (4): client k's class draws            (k, 0)            */
    PART_TAG_QUALITY_DIR,        /* B.4 quality: Dir(alpha) over group g for class c (c, g)            */
    PART_TAG_QUALITY_ASSIGN,     /* B.4 quality: per-sample client draws             (c, g)            */
    PART_TAG_SHARD_LABELS,       /* B.5 shard step 3: shuffle of the label list      (0, 0)            */
    PART_TAG_SHARD_PICK,         /* B.5 shard step 4: client i's shard picks         (i, 0)            */
    PART_TAG_CLASS_CHOOSE,       /* B.5 class: client k's c classes                  (k, 0)            */
    PART_TAG_QUANTITY_PERM,      /* B.6 permutation                                  (0, 0)            */
    PART_TAG_QUANTITY_Q          /* B.6 q ~ Dir(beta 1_K)                            (attempt, 0)      */
};

/* FH_FAIL / FH_CHECK for functions holding temporaries: record the error, then jump to `done:`, which
 * frees them. The function needs `int status = FH_OK;`. */
#define PART_FAIL(code, ...)                                                    \
    do {                                                                        \
        status = fh_error_raise((code), __FILE__, __LINE__, __VA_ARGS__);       \
        goto done;                                                              \
    } while (0)
#define PART_TRY(call)                                                          \
    do {                                                                        \
        status = (call);                                                        \
        if (status != FH_OK) {                                                  \
            status = fh_error_trace(status, __FILE__, __LINE__, #call);        \
            goto done;                                                          \
        }                                                                       \
    } while (0)

/* Everything a procedure needs: the validated spec with defaults filled in, and the rows grouped by
 * class (class c owns class_rows[class_start[c] .. class_start[c+1]-1], in data-set order). */
typedef struct {
    const int32_t *labels;
    int64_t n;
    int classes;
    int n_clients;
    double alpha;
    int min_size;
    int classes_per_client;
    int n_corrupted;
    int max_attempts;
    uint64_t seed;
    const char *name; /* "dirichlet niid-bench", for messages */
    const int64_t *class_start;
    const int64_t *class_rows;
} PartCtx;

static void part_rng(FhRng *rng, const PartCtx *ctx, uint32_t tag, uint32_t c1, uint32_t c2)
{
    fh_rng_init(rng, ctx->seed, FH_RNG_PARTITION, tag, c1, c2);
}

/* Allocates the output for n_clients clients and n_indices entries (offsets zeroed). */
static int part_alloc(DataPartition *out, int n_clients, int64_t n_indices)
{
    out->n_clients = n_clients;
    FH_CHECK(fh_calloc(&out->offsets, (size_t)n_clients + 1, sizeof *out->offsets, "partition offsets"));
    FH_CHECK(fh_calloc(&out->indices, (size_t)n_indices, sizeof *out->indices, "partition indices"));
    return FH_OK;
}

static void part_offsets_from_sizes(DataPartition *out, const int64_t *sizes)
{
    out->offsets[0] = 0;
    for (int k = 0; k < out->n_clients; k++) out->offsets[k + 1] = out->offsets[k] + sizes[k];
}

/* B.2 categorical on a cumulative table cum[0..n-1] (non-decreasing, cum[n-1] > 0): the first index
 * whose cumulative weight exceeds U * cum[n-1], by bisection. Entries of zero weight are never chosen
 * (also when rounding puts U * cum[n-1] at the top). One uniform per draw. */
static int64_t part_categorical_cum(FhRng *rng, const double *cum, int64_t n)
{
    double u = fh_rng_uniform(rng) * cum[n - 1];
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cum[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    while (lo > 0 && cum[lo] == cum[lo - 1]) lo--;
    return lo;
}

/* cum[j] = p[0] + ... + p[j], summed left to right as NumPy's cumsum does */
static void part_cumsum(double *cum, const double *p, int64_t n)
{
    double s = 0.0;
    for (int64_t j = 0; j < n; j++) {
        s += p[j];
        cum[j] = s;
    }
}

/* ============================== B.4 / B.6 redraw loops ============================== */

/* A draw's short clients (below min_size) are a sum of K nearly independent events, so their count is about
 * Poisson (its variance matches its mean in practice) and a draw leaves none short with probability about
 * exp(-mean). After PART_REACH_DRAWS draws the mean is estimated; taken three standard errors low, if it puts
 * the chance that any of the remaining draws succeeds below PART_REACH_CHANCE, the loop says so at once
 * instead of spinning through max_attempts. A partition found within the first draws is never affected. */
#define PART_REACH_DRAWS 16
#define PART_REACH_CHANCE 1e-3
/* a long loop reports its progress every so many seconds */
#define PART_NOTE_SECONDS 5.0

typedef struct {
    const PartCtx *ctx;
    double start, next_note;
    double short_sum;     /* short clients summed over the draws so far */
    int64_t fewest_short; /* the fewest short clients of one draw so far (-1: no draw yet) */
} PartRedraws;

static void redraws_begin(PartRedraws *r, const PartCtx *ctx)
{
    *r = (PartRedraws){ .ctx = ctx, .start = fh_time_now(), .fewest_short = -1 };
    r->next_note = r->start + PART_NOTE_SECONDS;
}

/* After draw `attempt` (0-based) left n_short clients below min_size: FH_ERR_USAGE once min_size is out of
 * reach (see PART_REACH_*), else FH_OK, with a progress line when the loop runs long. */
static int redraws_rejected(PartRedraws *r, int attempt, int64_t n_short)
{
    const PartCtx *ctx = r->ctx;
    r->short_sum += (double)n_short;
    if (r->fewest_short < 0 || n_short < r->fewest_short) r->fewest_short = n_short;
    if (attempt + 1 == PART_REACH_DRAWS && ctx->max_attempts > PART_REACH_DRAWS) {
        const double mean = r->short_sum / PART_REACH_DRAWS, low = mean - 3.0 * sqrt(mean / PART_REACH_DRAWS);
        if ((double)(ctx->max_attempts - PART_REACH_DRAWS) * exp(-low) < PART_REACH_CHANCE)
            FH_FAIL(FH_ERR_USAGE,
                    "%s: min_size=%d is out of reach (alpha=%g, K=%d, N=%lld): the first %d draws left %.1f clients "
                    "below min_size on average (the fewest: %lld), so a draw leaves none with a chance of about "
                    "exp(-%.1f), too small for max_attempts=%d; raise alpha or lower min_size or K",
                    ctx->name, ctx->min_size, ctx->alpha, ctx->n_clients, (long long)ctx->n, PART_REACH_DRAWS, mean,
                    (long long)r->fewest_short, mean, ctx->max_attempts);
    }
    const double now = fh_time_now();
    if (now >= r->next_note) {
        const double per_draw = (now - r->start) / (attempt + 1);
        fh_log_info("%s: draw %d of at most %d rejected after %.0f s (the fewest clients below min_size=%d in one "
                    "draw: %lld); all %d draws would take %.0f s more",
                    ctx->name, attempt + 1, ctx->max_attempts, now - r->start, ctx->min_size,
                    (long long)r->fewest_short, ctx->max_attempts, per_draw * (ctx->max_attempts - attempt - 1));
        r->next_note = now + PART_NOTE_SECONDS;
    }
    return FH_OK;
}

/* ============================== B.3 IID ============================== */

/* B.3 fedhet default (NIID-Bench "homo", FFL4MIA iid_sampling): one permutation of the N rows cut into K
 * contiguous parts of array_split sizes: the first N mod K parts get floor(N/K) + 1, the rest floor(N/K).
 * Client order: the permutation's. */
static int part_iid_niid_bench(DataPartition *out, const PartCtx *ctx)
{
    const int n_clients = ctx->n_clients;
    FH_CHECK(part_alloc(out, n_clients, ctx->n));
    FhRng rng;
    part_rng(&rng, ctx, PART_TAG_IID_PERM, 0, 0);
    fh_rng_permutation(&rng, out->indices, ctx->n);
    const int64_t base = ctx->n / n_clients, extra = ctx->n % n_clients;
    for (int k = 0; k < n_clients; k++) out->offsets[k + 1] = out->offsets[k] + base + (k < extra ? 1 : 0);
    return FH_OK;
}

/* B.3 FL-Simulator variant: the same kind of permutation (the same stream as niid-bench, so the two
 * variants slice one permutation differently), sizes floor(N/K) with client 0 also taking the N mod K
 * remainder, contiguous slices. */
static int part_iid_fl_simulator(DataPartition *out, const PartCtx *ctx)
{
    const int n_clients = ctx->n_clients;
    FH_CHECK(part_alloc(out, n_clients, ctx->n));
    FhRng rng;
    part_rng(&rng, ctx, PART_TAG_IID_PERM, 0, 0);
    fh_rng_permutation(&rng, out->indices, ctx->n);
    const int64_t base = ctx->n / n_clients, extra = ctx->n % n_clients;
    for (int k = 0; k < n_clients; k++) out->offsets[k + 1] = out->offsets[k] + base + (k == 0 ? extra : 0);
    return FH_OK;
}

/* B.3 FLOOD variant: each client in turn draws floor(N/K) rows without replacement from the rows not yet
 * taken; the N mod K rows left at the end are unused. A draw moves the picked row to the end of the
 * live part of the pool (swap-remove). Client order: the order of its draws. */
static int part_iid_flood(DataPartition *out, const PartCtx *ctx)
{
    int status = FH_OK;
    int64_t *pool = NULL;
    const int n_clients = ctx->n_clients;
    const int64_t per_client = ctx->n / n_clients;
    PART_TRY(part_alloc(out, n_clients, per_client * n_clients));
    PART_TRY(fh_calloc(&pool, (size_t)ctx->n, sizeof *pool, "iid flood pool"));
    for (int64_t i = 0; i < ctx->n; i++) pool[i] = i;
    int64_t n_left = ctx->n, pos = 0;
    for (int k = 0; k < n_clients; k++) {
        FhRng rng;
        part_rng(&rng, ctx, PART_TAG_IID_FLOOD, (uint32_t)k, 0);
        for (int64_t t = 0; t < per_client; t++) {
            int64_t j = (int64_t)fh_rng_below(&rng, (uint64_t)n_left);
            int64_t row = pool[j];
            pool[j] = pool[n_left - 1];
            pool[n_left - 1] = row;
            n_left--;
            out->indices[pos++] = row;
        }
        out->offsets[k + 1] = pos;
    }
done:
    fh_free(&pool);
    return status;
}

/* ============================== B.4 Dirichlet, NIID-Bench ============================== */

/* Work arrays of one B.4 attempt */
typedef struct {
    int64_t *sizes;     /* [K] |idx_batch[j]| */
    double *p;          /* [K] */
    int64_t *cuts;      /* [K + 1] chunk j of a class is [cuts[j], cuts[j+1]) */
    int64_t *class_buf; /* [max n_c] one class's shuffled rows */
    int64_t *pos;       /* [K] next free slot of client j in the output (assign pass) */
} DirWork;

/* B.4 step 2 (a, b) for one attempt. Without `out` it only computes the client sizes, which is all the
 * accept test of step 2c looks at; with `out` it also shuffles each class and appends chunk j at
 * pos[j]. Both passes open the same streams (attempt, class), so they cut at the same points.
 * Returns 0 when a class's p could not be drawn (see PART_MAX_P_REDRAWS): the attempt then fails. */
static int dir_attempt(const PartCtx *ctx, uint32_t attempt, DirWork *w, DataPartition *out)
{
    const int n_clients = ctx->n_clients;
    const double fair = (double)ctx->n / n_clients; /* N/K, compared as a real number (B.4) */
    for (int j = 0; j < n_clients; j++) w->sizes[j] = 0;                    /* step 2a */
    for (int c = 0; c < ctx->classes; c++) {                                /* step 2b, classes in order */
        const int64_t n_c = ctx->class_start[c + 1] - ctx->class_start[c];
        if (n_c == 0) continue; /* an empty class splits into K empty chunks whatever p is */
        FhRng rng;
        part_rng(&rng, ctx, PART_TAG_DIR_P, attempt, (uint32_t)c);
        double sum = 0.0;
        for (int redraw = 0;; redraw++) {
            if (redraw == PART_MAX_P_REDRAWS) return 0;
            fh_rng_dirichlet(&rng, w->p, NULL, ctx->alpha, n_clients);
            /* balancing trick: no more samples for a client already holding >= N/K (sizes before class c) */
            sum = 0.0;
            for (int j = 0; j < n_clients; j++) {
                if ((double)w->sizes[j] >= fair) w->p[j] = 0.0;
                sum += w->p[j];
            }
            /* [recon] all mass on full clients (tiny alpha): redraw p, as B.2 redraws an underflowed
             * Dirichlet. NumPy would divide 0/0 and hand the whole class to the last client. */
            if (sum > 0.0) break;
        }
        /* cut points cp_j = floor(cumsum(p / sum p)_j * n_c), j = 0..K-2; the last cumulative value is
         * dropped. Kept exactly so, artefact included: when cumsum_{K-2} rounds to just below 1, the last
         * client's chunk n_c - cp_{K-2} holds one row even if the balancing trick zeroed its p (NumPy
         * does the same). */
        double cum = 0.0;
        w->cuts[0] = 0;
        for (int j = 0; j < n_clients - 1; j++) {
            cum += w->p[j] / sum;
            int64_t cp = (int64_t)(cum * (double)n_c);
            w->cuts[j + 1] = cp < n_c ? cp : n_c; /* a cumulative sum that rounds above 1 stays in range */
        }
        w->cuts[n_clients] = n_c;
        if (out) {
            FhRng shuffle;
            memcpy(w->class_buf, ctx->class_rows + ctx->class_start[c], (size_t)n_c * sizeof *w->class_buf);
            part_rng(&shuffle, ctx, PART_TAG_DIR_SHUFFLE, attempt, (uint32_t)c);
            fh_rng_shuffle_i64(&shuffle, w->class_buf, n_c); /* idx_c, shuffled */
            for (int j = 0; j < n_clients; j++) {
                int64_t len = w->cuts[j + 1] - w->cuts[j];
                memcpy(out->indices + w->pos[j], w->class_buf + w->cuts[j], (size_t)len * sizeof *out->indices);
                w->pos[j] += len;
            }
        }
        for (int j = 0; j < n_clients; j++) w->sizes[j] += w->cuts[j + 1] - w->cuts[j];
    }
    return 1;
}

/* B.4 "standard implementation" (NIID-Bench partition_data, noniid-labeldir; FLood niid_distribution):
 * draw whole allocations until every client holds >= min_size samples (step 2c), at most max_attempts
 * times, then shuffle each client's list (step 3, as NIID-Bench does). */
static int part_dirichlet_niid_bench(DataPartition *out, const PartCtx *ctx)
{
    int status = FH_OK;
    const int n_clients = ctx->n_clients;
    DirWork w = {0};
    int64_t max_class = 0;
    for (int c = 0; c < ctx->classes; c++) {
        int64_t n_c = ctx->class_start[c + 1] - ctx->class_start[c];
        if (n_c > max_class) max_class = n_c;
    }
    if ((int64_t)ctx->min_size * n_clients > ctx->n)
        PART_FAIL(FH_ERR_USAGE,
                  "%s: min_size=%d samples for each of K=%d clients needs %lld samples, but N=%lld "
                  "(alpha=%g): lower min_size or K",
                  ctx->name, ctx->min_size, n_clients, (long long)ctx->min_size * n_clients, (long long)ctx->n,
                  ctx->alpha);
    PART_TRY(fh_calloc(&w.sizes, (size_t)n_clients, sizeof *w.sizes, "dirichlet client sizes"));
    PART_TRY(fh_calloc(&w.p, (size_t)n_clients, sizeof *w.p, "dirichlet proportions"));
    PART_TRY(fh_calloc(&w.cuts, (size_t)n_clients + 1, sizeof *w.cuts, "dirichlet cut points"));
    PART_TRY(fh_calloc(&w.pos, (size_t)n_clients, sizeof *w.pos, "dirichlet fill positions"));
    PART_TRY(fh_calloc(&w.class_buf, (size_t)max_class, sizeof *w.class_buf, "dirichlet class indices"));

    int accepted = -1;
    PartRedraws redraws;
    redraws_begin(&redraws, ctx);
    for (int attempt = 0; attempt < ctx->max_attempts && accepted < 0; attempt++) {
        /* a draw whose p could not be drawn counts as K short clients */
        int64_t n_short = n_clients;
        if (dir_attempt(ctx, (uint32_t)attempt, &w, NULL)) {
            n_short = 0;
            for (int j = 0; j < n_clients; j++) n_short += w.sizes[j] < ctx->min_size;
        }
        if (n_short == 0) accepted = attempt; /* step 2: while min_size < min_require_size */
        else PART_TRY(redraws_rejected(&redraws, attempt, n_short));
    }
    if (accepted < 0)
        PART_FAIL(FH_ERR_USAGE,
                  "%s: no partition with every client >= min_size=%d samples after %d draws "
                  "(alpha=%g, K=%d, N=%lld): raise alpha or lower min_size or K",
                  ctx->name, ctx->min_size, ctx->max_attempts, ctx->alpha, n_clients, (long long)ctx->n);
    fh_log_debug("%s: draw %d of at most %d accepted (alpha=%g, K=%d, N=%lld, min_size=%d)", ctx->name,
                 accepted + 1, ctx->max_attempts, ctx->alpha, n_clients, (long long)ctx->n, ctx->min_size);

    /* the accepted attempt again, now placing the rows: sizes are known, so each client writes in place */
    PART_TRY(part_alloc(out, n_clients, ctx->n));
    part_offsets_from_sizes(out, w.sizes);
    for (int j = 0; j < n_clients; j++) w.pos[j] = out->offsets[j];
    dir_attempt(ctx, (uint32_t)accepted, &w, out); /* cannot fail: it succeeded with these streams */
    for (int j = 0; j < n_clients; j++) {          /* step 3 */
        FhRng rng;
        part_rng(&rng, ctx, PART_TAG_DIR_FINAL, (uint32_t)accepted, (uint32_t)j);
        fh_rng_shuffle_i64(&rng, out->indices + out->offsets[j], out->offsets[j + 1] - out->offsets[j]);
    }
done:
    fh_free(&w.sizes);
    fh_free(&w.p);
    fh_free(&w.cuts);
    fh_free(&w.pos);
    fh_free(&w.class_buf);
    return status;
}

/* ============================== B.4 prior sampling (FL-Simulator) ============================== */

/* B.4 FL-Simulator prior sampling (dataset.py DatasetObject.set_data), shared with Path-class (B.5).
 * priors [K, C]: row k is client k's class prior pi_k (rows sum to 1; zeros allowed).
 * (1) permute the training set; class c's list holds its rows in permuted order.
 * (2) quota floor(N/K) per client, client 0 also takes N mod K.
 * (4) until every quota is filled: pick a client uniformly among all K, skip it if full, decrease its
 *     quota, draw a class from pi_k; if the class's pool is exhausted refill it (counter back to the full
 *     class size) and redraw the class; take the class's next unused row, consuming the list from its end.
 * As FL-Simulator, client k's row goes to slot quota_left (after the decrement), so a client's list
 * fills from its end backwards. Rows repeat across clients once a class has been refilled.
 * Every class must be non-empty (checked by the caller), otherwise a refill would loop forever. */
static int prior_sampling(DataPartition *out, const PartCtx *ctx, const double *priors)
{
    int status = FH_OK;
    const int n_clients = ctx->n_clients, n_classes = ctx->classes;
    const int64_t n = ctx->n;
    int64_t *perm = NULL, *class_list = NULL, *fill = NULL, *amount = NULL, *quota = NULL;
    double *cum = NULL;
    FhRng *class_rng = NULL;
    PART_TRY(fh_calloc(&perm, (size_t)n, sizeof *perm, "prior sampling permutation"));
    PART_TRY(fh_calloc(&class_list, (size_t)n, sizeof *class_list, "prior sampling class lists"));
    PART_TRY(fh_calloc(&fill, (size_t)n_classes, sizeof *fill, "prior sampling class fill"));
    PART_TRY(fh_calloc(&amount, (size_t)n_classes, sizeof *amount, "prior sampling class counters"));
    PART_TRY(fh_calloc(&quota, (size_t)n_clients, sizeof *quota, "prior sampling quotas"));
    PART_TRY(fh_calloc(&cum, (size_t)n_clients * (size_t)n_classes, sizeof *cum, "prior sampling priors"));
    PART_TRY(fh_calloc(&class_rng, (size_t)n_clients, sizeof *class_rng, "prior sampling streams"));
    PART_TRY(part_alloc(out, n_clients, n));

    FhRng rng; /* (1) */
    part_rng(&rng, ctx, PART_TAG_PRIOR_PERM, 0, 0);
    fh_rng_permutation(&rng, perm, n);
    for (int64_t i = 0; i < n; i++) {
        int c = ctx->labels[perm[i]];
        class_list[ctx->class_start[c] + fill[c]++] = perm[i];
    }
    for (int c = 0; c < n_classes; c++) amount[c] = fill[c];

    const int64_t base = n / n_clients, extra = n % n_clients; /* (2) */
    for (int k = 0; k < n_clients; k++) {
        quota[k] = base + (k == 0 ? extra : 0);
        out->offsets[k + 1] = out->offsets[k] + quota[k];
        part_cumsum(cum + (size_t)k * n_classes, priors + (size_t)k * n_classes, n_classes);
        part_rng(&class_rng[k], ctx, PART_TAG_PRIOR_CLASS, (uint32_t)k, 0);
    }

    part_rng(&rng, ctx, PART_TAG_PRIOR_PICK, 0, 0); /* (4) */
    for (int64_t n_left = n; n_left > 0;) {
        int k = (int)fh_rng_below(&rng, (uint64_t)n_clients);
        if (quota[k] <= 0) continue;
        quota[k]--;
        for (;;) {
            int c = (int)part_categorical_cum(&class_rng[k], cum + (size_t)k * n_classes, n_classes);
            if (amount[c] <= 0) { /* exhausted: refill and redraw the class */
                amount[c] = ctx->class_start[c + 1] - ctx->class_start[c];
                continue;
            }
            amount[c]--;
            out->indices[out->offsets[k] + quota[k]] = class_list[ctx->class_start[c] + amount[c]];
            break;
        }
        n_left--;
    }
done:
    fh_free(&perm);
    fh_free(&class_list);
    fh_free(&fill);
    fh_free(&amount);
    fh_free(&quota);
    fh_free(&cum);
    fh_free(&class_rng);
    return status;
}

/* B.4 FL-Simulator prior-sampling Dirichlet: (3) pi_k ~ Dir(beta 1_C) per client, then prior_sampling. */
static int part_dirichlet_prior(DataPartition *out, const PartCtx *ctx)
{
    int status = FH_OK;
    double *priors = NULL;
    PART_TRY(fh_calloc(&priors, (size_t)ctx->n_clients * (size_t)ctx->classes, sizeof *priors,
                       "dirichlet prior class priors"));
    for (int k = 0; k < ctx->n_clients; k++) {
        FhRng rng;
        part_rng(&rng, ctx, PART_TAG_PRIOR_DIR, (uint32_t)k, 0);
        fh_rng_dirichlet(&rng, priors + (size_t)k * ctx->classes, NULL, ctx->alpha, ctx->classes);
    }
    PART_TRY(prior_sampling(out, ctx, priors));
done:
    fh_free(&priors);
    return status;
}

/* ============================== B.4 quality shift groups (FFL4MIA) ============================== */

/* B.4 FFL4MIA quality-shift Dirichlet (sampling.py non_iid_dirichlet_sampling): clients 0..K-m-1 are the
 * clean group, K-m..K-1 the corrupted group. For each class c, its rows in data-set order: the first
 * round((K-m)/K * n_c) go to the clean group, the rest to the corrupted group; within each group one
 * Dir(alpha) over the group's clients is drawn for this class, and every row goes independently to a
 * client of the group by a categorical draw. No minimum size. Client order: by class, then data-set order. */
static int part_dirichlet_quality(DataPartition *out, const PartCtx *ctx)
{
    int status = FH_OK;
    const int n_clients = ctx->n_clients, n_corrupted = ctx->n_corrupted;
    const int group_first[2] = {0, n_clients - n_corrupted};
    const int group_size[2] = {n_clients - n_corrupted, n_corrupted};
    int32_t *owner = NULL;
    int64_t *sizes = NULL, *pos = NULL;
    double *p = NULL, *cum = NULL;
    PART_TRY(fh_calloc(&owner, (size_t)ctx->n, sizeof *owner, "dirichlet quality owners"));
    PART_TRY(fh_calloc(&sizes, (size_t)n_clients, sizeof *sizes, "dirichlet quality sizes"));
    PART_TRY(fh_calloc(&pos, (size_t)n_clients, sizeof *pos, "dirichlet quality fill positions"));
    PART_TRY(fh_calloc(&p, (size_t)n_clients, sizeof *p, "dirichlet quality proportions"));
    PART_TRY(fh_calloc(&cum, (size_t)n_clients, sizeof *cum, "dirichlet quality cumulative proportions"));

    for (int c = 0; c < ctx->classes; c++) {
        const int64_t *rows = ctx->class_rows + ctx->class_start[c];
        const int64_t n_c = ctx->class_start[c + 1] - ctx->class_start[c];
        /* Python round(): half to even, which is rint() in the default rounding mode */
        const int64_t n_clean = (int64_t)rint((double)(n_clients - n_corrupted) / n_clients * (double)n_c);
        for (int g = 0; g < 2; g++) {
            const int64_t first = g ? n_clean : 0, last = g ? n_c : n_clean;
            if (group_size[g] == 0 || last <= first) continue;
            FhRng rng;
            part_rng(&rng, ctx, PART_TAG_QUALITY_DIR, (uint32_t)c, (uint32_t)g);
            fh_rng_dirichlet(&rng, p, NULL, ctx->alpha, group_size[g]);
            part_cumsum(cum, p, group_size[g]);
            part_rng(&rng, ctx, PART_TAG_QUALITY_ASSIGN, (uint32_t)c, (uint32_t)g);
            for (int64_t i = first; i < last; i++) {
                int k = group_first[g] + (int)part_categorical_cum(&rng, cum, group_size[g]);
                owner[rows[i]] = k;
                sizes[k]++;
            }
        }
    }
    PART_TRY(part_alloc(out, n_clients, ctx->n));
    part_offsets_from_sizes(out, sizes);
    int n_empty = 0;
    for (int k = 0; k < n_clients; k++) {
        pos[k] = out->offsets[k];
        n_empty += sizes[k] == 0;
    }
    for (int64_t i = 0; i < ctx->n; i++) { /* class_rows is class-major, data-set order within a class */
        int64_t row = ctx->class_rows[i];
        out->indices[pos[owner[row]]++] = row;
    }
    if (n_empty > 0)
        fh_log_warn("%s: %d of %d clients received no sample (alpha=%g; FFL4MIA has no minimum size)", ctx->name,
                    n_empty, n_clients, ctx->alpha);
done:
    fh_free(&owner);
    fh_free(&sizes);
    fh_free(&pos);
    fh_free(&p);
    fh_free(&cum);
    return status;
}

/* ============================== B.5 pathological ============================== */

/* B.5 Path-shard(r), FLOOD utils/dataset.py branch pathological (shard_per_user = r):
 * 1. s = r*K/C shards per class (integral: checked by the caller).
 * 2. Class c's rows in data-set order: the first n_c - (n_c mod s) cut into s equal contiguous shards of
 *    q = floor(n_c / s); the leftover rows go one each to shards 0, 1, ... (shard t = rows[t*q, (t+1)*q)
 *    plus rows[s*q + t] when t < n_c mod s).
 * 3. The list [0..C-1] repeated s times (length K*r), shuffled, read as K rows of r labels.
 * 4. Client i, for each label of its row: a shard of that label uniformly among the remaining ones,
 *    removed from the list (Python list.pop keeps the others in order).
 * Every row is used exactly once. Client order: its shards in row order, each in data-set order. */
static int part_path_shard(DataPartition *out, const PartCtx *ctx)
{
    int status = FH_OK;
    const int n_clients = ctx->n_clients, n_classes = ctx->classes, r = ctx->classes_per_client;
    const int64_t s = (int64_t)r * n_clients / n_classes, n_slots = (int64_t)r * n_clients;
    int32_t *label_list = NULL;
    int64_t *avail = NULL, *n_avail = NULL, *chosen = NULL, *sizes = NULL;
    for (int c = 0; c < n_classes; c++) {
        int64_t n_c = ctx->class_start[c + 1] - ctx->class_start[c];
        if (n_c < s)
            PART_FAIL(FH_ERR_USAGE,
                      "%s: class %d has %lld samples, fewer than its s = r*K/C = %d*%d/%d = %lld shards "
                      "(a shard would be empty): lower r or K",
                      ctx->name, c, (long long)n_c, r, n_clients, n_classes, (long long)s);
    }
    PART_TRY(fh_calloc(&label_list, (size_t)n_slots, sizeof *label_list, "pathological shard labels"));
    PART_TRY(fh_calloc(&avail, (size_t)(s * n_classes), sizeof *avail, "pathological shard lists"));
    PART_TRY(fh_calloc(&n_avail, (size_t)n_classes, sizeof *n_avail, "pathological shard counts"));
    PART_TRY(fh_calloc(&chosen, (size_t)n_slots, sizeof *chosen, "pathological shard choices"));
    PART_TRY(fh_calloc(&sizes, (size_t)n_clients, sizeof *sizes, "pathological client sizes"));

    for (int c = 0; c < n_classes; c++) { /* step 2: shard t of class c is avail[c*s + t] = t */
        for (int64_t t = 0; t < s; t++) avail[c * s + t] = t;
        n_avail[c] = s;
    }
    FhRng rng; /* step 3 */
    for (int64_t i = 0; i < n_slots; i++) label_list[i] = (int32_t)(i % n_classes);
    part_rng(&rng, ctx, PART_TAG_SHARD_LABELS, 0, 0);
    fh_rng_shuffle_i32(&rng, label_list, n_slots);
    for (int i = 0; i < n_clients; i++) { /* step 4 */
        part_rng(&rng, ctx, PART_TAG_SHARD_PICK, (uint32_t)i, 0);
        for (int j = 0; j < r; j++) {
            const int c = label_list[(int64_t)i * r + j];
            int64_t *list = avail + c * s;
            int64_t pick = (int64_t)fh_rng_below(&rng, (uint64_t)n_avail[c]);
            int64_t t = list[pick];
            memmove(list + pick, list + pick + 1, (size_t)(n_avail[c] - pick - 1) * sizeof *list);
            n_avail[c]--;
            chosen[(int64_t)i * r + j] = t;
            const int64_t n_c = ctx->class_start[c + 1] - ctx->class_start[c];
            sizes[i] += n_c / s + (t < n_c % s ? 1 : 0);
        }
    }
    PART_TRY(part_alloc(out, n_clients, ctx->n));
    part_offsets_from_sizes(out, sizes);
    for (int i = 0; i < n_clients; i++) {
        int64_t pos = out->offsets[i];
        for (int j = 0; j < r; j++) {
            const int c = label_list[(int64_t)i * r + j];
            const int64_t t = chosen[(int64_t)i * r + j];
            const int64_t *rows = ctx->class_rows + ctx->class_start[c];
            const int64_t n_c = ctx->class_start[c + 1] - ctx->class_start[c], q = n_c / s;
            memcpy(out->indices + pos, rows + t * q, (size_t)q * sizeof *rows);
            pos += q;
            if (t < n_c % s) out->indices[pos++] = rows[s * q + t];
        }
    }
done:
    fh_free(&label_list);
    fh_free(&avail);
    fh_free(&n_avail);
    fh_free(&chosen);
    fh_free(&sizes);
    return status;
}

/* B.5 Path-class(c), FL-Simulator "Pathological": each client draws c distinct classes uniformly at
 * random (as FL-Simulator: a row of c ones and C-c zeros, shuffled), its prior is uniform over them,
 * then the prior sampling of B.4 (equal sizes, refill on exhaustion). */
static int part_path_class(DataPartition *out, const PartCtx *ctx)
{
    int status = FH_OK;
    const int n_classes = ctx->classes, c_per = ctx->classes_per_client;
    double *priors = NULL;
    int32_t *mark = NULL;
    PART_TRY(fh_calloc(&priors, (size_t)ctx->n_clients * (size_t)n_classes, sizeof *priors,
                       "pathological class priors"));
    PART_TRY(fh_calloc(&mark, (size_t)n_classes, sizeof *mark, "pathological class choice"));
    for (int k = 0; k < ctx->n_clients; k++) {
        FhRng rng;
        for (int j = 0; j < n_classes; j++) mark[j] = j < c_per;
        part_rng(&rng, ctx, PART_TAG_CLASS_CHOOSE, (uint32_t)k, 0);
        fh_rng_shuffle_i32(&rng, mark, n_classes);
        for (int j = 0; j < n_classes; j++) priors[(size_t)k * n_classes + j] = mark[j] ? 1.0 / c_per : 0.0;
    }
    PART_TRY(prior_sampling(out, ctx, priors));
done:
    fh_free(&priors);
    fh_free(&mark);
    return status;
}

/* ============================== B.6 quantity skew ============================== */

/* B.6 NIID-Bench iid-diff-quantity: permute the rows; draw q ~ Dir(beta 1_K) (normalised again, as
 * NIID-Bench does) until min_j q_j * N >= min_size; cut the permutation at floor(cumsum(q) * N), last
 * dropped. Since floor(a + b) >= floor(a) + floor(b), every chunk then holds >= min_size rows; the chunk
 * sizes are checked as well so that the promise also holds at the edges of float rounding. */
static int part_quantity(DataPartition *out, const PartCtx *ctx)
{
    int status = FH_OK;
    const int n_clients = ctx->n_clients;
    const int64_t n = ctx->n;
    double *q = NULL;
    int64_t *cuts = NULL;
    if ((int64_t)ctx->min_size * n_clients > n)
        PART_FAIL(FH_ERR_USAGE,
                  "%s: min_size=%d samples for each of K=%d clients needs %lld samples, but N=%lld "
                  "(alpha=%g): lower min_size or K",
                  ctx->name, ctx->min_size, n_clients, (long long)ctx->min_size * n_clients, (long long)n,
                  ctx->alpha);
    PART_TRY(fh_calloc(&q, (size_t)n_clients, sizeof *q, "quantity proportions"));
    PART_TRY(fh_calloc(&cuts, (size_t)n_clients + 1, sizeof *cuts, "quantity cut points"));
    int accepted = -1;
    PartRedraws redraws;
    redraws_begin(&redraws, ctx);
    for (int attempt = 0; attempt < ctx->max_attempts && accepted < 0; attempt++) {
        FhRng rng;
        part_rng(&rng, ctx, PART_TAG_QUANTITY_Q, (uint32_t)attempt, 0);
        fh_rng_dirichlet(&rng, q, NULL, ctx->alpha, n_clients);
        double sum = 0.0;
        int64_t n_short = 0;
        for (int j = 0; j < n_clients; j++) sum += q[j];
        for (int j = 0; j < n_clients; j++) {
            q[j] /= sum;
            n_short += q[j] * (double)n < (double)ctx->min_size;
        }
        if (n_short == 0) {
            double cum = 0.0;
            cuts[0] = 0;
            cuts[n_clients] = n;
            for (int j = 0; j < n_clients - 1; j++) {
                cum += q[j];
                int64_t cp = (int64_t)(cum * (double)n);
                cuts[j + 1] = cp < n ? cp : n;
            }
            for (int j = 0; j < n_clients; j++) n_short += cuts[j + 1] - cuts[j] < ctx->min_size;
        }
        if (n_short == 0) accepted = attempt;
        else PART_TRY(redraws_rejected(&redraws, attempt, n_short));
    }
    if (accepted < 0)
        PART_FAIL(FH_ERR_USAGE,
                  "%s: no partition with every client >= min_size=%d samples after %d draws "
                  "(alpha=%g, K=%d, N=%lld): raise alpha or lower min_size or K",
                  ctx->name, ctx->min_size, ctx->max_attempts, ctx->alpha, n_clients, (long long)n);
    fh_log_debug("%s: draw %d of at most %d accepted (alpha=%g, K=%d, N=%lld, min_size=%d)", ctx->name,
                 accepted + 1, ctx->max_attempts, ctx->alpha, n_clients, (long long)n, ctx->min_size);
    PART_TRY(part_alloc(out, n_clients, n));
    FhRng rng;
    part_rng(&rng, ctx, PART_TAG_QUANTITY_PERM, 0, 0);
    fh_rng_permutation(&rng, out->indices, n);
    memcpy(out->offsets, cuts, ((size_t)n_clients + 1) * sizeof *cuts);
done:
    fh_free(&q);
    fh_free(&cuts);
    return status;
}

/* ============================== the table and the entry point ============================== */

enum {
    PART_NEEDS_ALPHA = 1u << 0,       /* alpha > 0, finite */
    PART_NEEDS_MIN_SIZE = 1u << 1,    /* min_size and max_attempts are used */
    PART_NEEDS_PER_CLIENT = 1u << 2,  /* classes_per_client in 1..classes */
    PART_NEEDS_SHARDS = 1u << 3,      /* r*K/C integral */
    PART_NEEDS_CORRUPTED = 1u << 4,   /* n_corrupted in 0..K-1 */
    PART_NEEDS_ALL_CLASSES = 1u << 5  /* every class has a sample */
};

typedef struct {
    const char *scheme;
    const char *variant; /* the first row of a scheme is its default */
    int (*run)(DataPartition *out, const PartCtx *ctx);
    unsigned needs;
} PartProcedure;

static const PartProcedure part_procedures[] = {
    {"iid", "niid-bench", part_iid_niid_bench, 0},
    {"iid", "flood", part_iid_flood, 0},
    {"iid", "fl-simulator", part_iid_fl_simulator, 0},
    {"dirichlet", "niid-bench", part_dirichlet_niid_bench, PART_NEEDS_ALPHA | PART_NEEDS_MIN_SIZE},
    {"dirichlet", "prior", part_dirichlet_prior, PART_NEEDS_ALPHA | PART_NEEDS_ALL_CLASSES},
    {"dirichlet", "quality", part_dirichlet_quality, PART_NEEDS_ALPHA | PART_NEEDS_CORRUPTED},
    {"pathological", "shard", part_path_shard, PART_NEEDS_PER_CLIENT | PART_NEEDS_SHARDS | PART_NEEDS_ALL_CLASSES},
    {"pathological", "class", part_path_class, PART_NEEDS_PER_CLIENT | PART_NEEDS_ALL_CLASSES},
    {"quantity", "niid-bench", part_quantity, PART_NEEDS_ALPHA | PART_NEEDS_MIN_SIZE},
};
#define PART_N_PROCEDURES ((int)(sizeof part_procedures / sizeof part_procedures[0]))

/* The row for (scheme, variant); variant NULL or "" picks the scheme's default. Unknown names are
 * FH_ERR_USAGE listing the valid ones. */
static int part_find(const PartProcedure **found, const char *scheme, const char *variant)
{
    char valid[256];
    size_t len = 0;
    int scheme_known = 0;
    *found = NULL;
    for (int i = 0; i < PART_N_PROCEDURES; i++) {
        const PartProcedure *row = &part_procedures[i];
        if (!scheme || strcmp(row->scheme, scheme) != 0) continue;
        scheme_known = 1;
        if (!variant || !*variant || strcmp(row->variant, variant) == 0) {
            *found = row;
            return FH_OK;
        }
    }
    valid[0] = '\0';
    for (int i = 0; i < PART_N_PROCEDURES && len < sizeof valid; i++) {
        const PartProcedure *row = &part_procedures[i];
        int first_of_scheme = i == 0 || strcmp(part_procedures[i - 1].scheme, row->scheme) != 0;
        int n = 0;
        if (!scheme_known && first_of_scheme)
            n = snprintf(valid + len, sizeof valid - len, "%s%s", len ? ", " : "", row->scheme);
        else if (scheme_known && strcmp(row->scheme, scheme) == 0)
            n = snprintf(valid + len, sizeof valid - len, "%s%s%s", len ? ", " : "", row->variant,
                         first_of_scheme ? " (default)" : "");
        if (n > 0) len += (size_t)n;
    }
    if (!scheme_known)
        FH_FAIL(FH_ERR_USAGE, "partition: unknown scheme \"%s\" (valid: %s)", scheme ? scheme : "(null)", valid);
    FH_FAIL(FH_ERR_USAGE, "partition: unknown variant \"%s\" for scheme \"%s\" (valid: %s)", variant, scheme, valid);
}

static int gcd_int(int a, int b)
{
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Checks the spec against what the procedure needs and fills the defaults into ctx. */
static int part_validate(PartCtx *ctx, const PartProcedure *proc, const DataPartitionSpec *spec, int64_t n,
                         int classes)
{
    const char *name = ctx->name;
    const int n_clients = spec->n_clients;
    if (n_clients < 1 || n_clients > n)
        FH_FAIL(FH_ERR_USAGE, "%s: n_clients=%d must be in 1..N=%lld (the number of training samples)", name,
                n_clients, (long long)n);
    if ((proc->needs & PART_NEEDS_ALPHA) && !(spec->alpha > 0.0 && isfinite(spec->alpha)))
        FH_FAIL(FH_ERR_USAGE, "%s: alpha=%g must be a finite number > 0 (Dirichlet concentration)", name,
                spec->alpha);
    if ((proc->needs & PART_NEEDS_MIN_SIZE) && spec->min_size < 0)
        FH_FAIL(FH_ERR_USAGE, "%s: min_size=%d must be >= 1 (0 means the default %d)", name, spec->min_size,
                PART_DEFAULT_MIN_SIZE);
    if ((proc->needs & PART_NEEDS_MIN_SIZE) && spec->max_attempts < 0)
        FH_FAIL(FH_ERR_USAGE, "%s: max_attempts=%d must be >= 1 (0 means the default %d)", name,
                spec->max_attempts, PART_DEFAULT_MAX_ATTEMPTS);
    if ((proc->needs & PART_NEEDS_PER_CLIENT) && (spec->classes_per_client < 1 || spec->classes_per_client > classes))
        FH_FAIL(FH_ERR_USAGE, "%s: classes_per_client=%d must be in 1..%d (the number of classes)", name,
                spec->classes_per_client, classes);
    if (proc->needs & PART_NEEDS_SHARDS) {
        const int r = spec->classes_per_client;
        if (((int64_t)r * n_clients) % classes != 0)
            FH_FAIL(FH_ERR_USAGE,
                    "%s: r*K/C = %d*%d/%d is not an integer; choose K a multiple of %d (or r with r*K a "
                    "multiple of C=%d)",
                    name, r, n_clients, classes, classes / gcd_int(r, classes), classes);
    }
    if ((proc->needs & PART_NEEDS_CORRUPTED) && (spec->n_corrupted < 0 || spec->n_corrupted > n_clients - 1))
        FH_FAIL(FH_ERR_USAGE, "%s: n_corrupted=%d must be in 0..%d (K-1: the clean group needs a client)", name,
                spec->n_corrupted, n_clients - 1);
    ctx->n_clients = n_clients;
    ctx->alpha = spec->alpha;
    ctx->min_size = spec->min_size ? spec->min_size : PART_DEFAULT_MIN_SIZE;
    ctx->max_attempts = spec->max_attempts ? spec->max_attempts : PART_DEFAULT_MAX_ATTEMPTS;
    ctx->classes_per_client = spec->classes_per_client;
    ctx->n_corrupted = spec->n_corrupted;
    ctx->seed = spec->seed;
    return FH_OK;
}

/* scheme natural: a client per group present (ascending id), rows in data-set order; with split_within a
 * group's rows are split again by that scheme, its draws seeded by (seed, group) */
static int part_natural(DataPartition *out, const int32_t *labels, int64_t n, int classes, const DataPartitionSpec *spec)
{
    const char *within = spec->split_within && *spec->split_within && strcmp(spec->split_within, "none")
                             ? spec->split_within : NULL;
    if (!spec->groups || spec->n_groups < 1)
        FH_FAIL(FH_ERR_USAGE, "partition natural: the source has no natural groups (use a domain tree, or a table "
                "with client_column)");
    if (within && strcmp(within, "iid") && strcmp(within, "dirichlet"))
        FH_FAIL(FH_ERR_USAGE, "partition natural: split_within = %s is not one of none, iid, dirichlet", within);
    const int per_group = within ? spec->split_clients : 1;
    if (per_group < 1) FH_FAIL(FH_ERR_USAGE, "partition natural: split_clients = %d must be >= 1", spec->split_clients);
    const int G = spec->n_groups;
    int64_t *start = NULL, *rows = NULL, *fill = NULL;
    int32_t *sub_labels = NULL;
    int status = fh_calloc(&start, (size_t)G + 1, sizeof *start, "group offsets");
    if (status == FH_OK) status = fh_calloc(&rows, (size_t)n, sizeof *rows, "group rows");
    if (status == FH_OK) status = fh_calloc(&fill, (size_t)G, sizeof *fill, "group fill");
    if (status == FH_OK) status = fh_calloc(&sub_labels, (size_t)n, sizeof *sub_labels, "group labels");
    for (int64_t i = 0; i < n && status == FH_OK; i++) {
        if (spec->groups[i] < 0 || spec->groups[i] >= G)
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "partition natural: row %lld has group %d of %d",
                                    (long long)i, (int)spec->groups[i], G);
        else start[spec->groups[i] + 1]++;
    }
    int present = 0;
    for (int g = 0; g < G && status == FH_OK; g++) present += start[g + 1] > 0, start[g + 1] += start[g];
    for (int64_t i = 0; i < n && status == FH_OK; i++) rows[start[spec->groups[i]] + fill[spec->groups[i]]++] = i;
    const int K = present * per_group;
    if (status == FH_OK) status = fh_calloc(&out->offsets, (size_t)K + 1, sizeof *out->offsets, "partition offsets");
    if (status == FH_OK) status = fh_calloc(&out->indices, (size_t)n, sizeof *out->indices, "partition indices");
    int k = 0;
    int64_t at = 0;
    for (int g = 0; g < G && status == FH_OK; g++) {
        const int64_t m = start[g + 1] - start[g], *grows = rows + start[g];
        if (m == 0) continue;
        if (!within) {
            memcpy(out->indices + at, grows, (size_t)m * sizeof *grows);
            at += m;
            out->offsets[++k] = at;
            continue;
        }
        for (int64_t i = 0; i < m; i++) sub_labels[i] = labels[grows[i]];
        DataPartitionSpec sub = *spec;
        sub.scheme = within;
        sub.variant = NULL;
        sub.n_clients = per_group;
        sub.groups = NULL;
        sub.n_groups = 0;
        sub.n_corrupted = 0;
        sub.seed = spec->seed ^ ((uint64_t)(g + 1) << 32);
        DataPartition part;
        status = data_partition(&part, sub_labels, m, classes, &sub);
        if (status != FH_OK) {
            status = fh_error_trace(status, __FILE__, __LINE__, "splitting a natural group");
            break;
        }
        for (int j = 0; j < per_group; j++) {
            for (int64_t r = part.offsets[j]; r < part.offsets[j + 1]; r++) out->indices[at++] = grows[part.indices[r]];
            out->offsets[++k] = at;
        }
        data_partition_free(&part);
    }
    out->n_clients = K;
    fh_free(&start);
    fh_free(&rows);
    fh_free(&fill);
    fh_free(&sub_labels);
    if (status != FH_OK) data_partition_free(out);
    return status;
}

int data_partition(DataPartition *out, const int32_t *labels, int64_t n, int classes, const DataPartitionSpec *spec)
{
    if (out && spec && spec->scheme && !strcmp(spec->scheme, "natural") && labels && n >= 1) {
        memset(out, 0, sizeof *out);
        return part_natural(out, labels, n, classes, spec);
    }
    int status = FH_OK;
    int64_t *class_start = NULL, *class_rows = NULL, *fill = NULL;
    char name[64];
    if (!out) FH_FAIL(FH_ERR_USAGE, "partition: output is NULL");
    memset(out, 0, sizeof *out);
    if (!spec) FH_FAIL(FH_ERR_USAGE, "partition: spec is NULL");
    if (!labels || n < 1 || classes < 1)
        FH_FAIL(FH_ERR_USAGE, "partition: need labels, N >= 1 and classes >= 1 (got labels %s, N=%lld, classes=%d)",
                labels ? "set" : "NULL", (long long)n, classes);
    if (n > (int64_t)1 << 52)
        FH_FAIL(FH_ERR_USAGE, "partition: N=%lld samples is beyond what the cut points' doubles count exactly",
                (long long)n);
    const PartProcedure *proc;
    FH_CHECK(part_find(&proc, spec->scheme, spec->variant));
    snprintf(name, sizeof name, "%s %s", proc->scheme, proc->variant);
    PartCtx ctx = {.labels = labels, .n = n, .classes = classes, .name = name};
    FH_CHECK(part_validate(&ctx, proc, spec, n, classes));

    for (int64_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            FH_FAIL(FH_ERR_DATA, "%s: label of training row %lld is %d, outside [0, %d) (classes=%d)", name,
                    (long long)i, (int)labels[i], classes, classes);

    /* rows grouped by class, data-set order within a class (counting sort) */
    PART_TRY(fh_calloc(&class_start, (size_t)classes + 1, sizeof *class_start, "partition class offsets"));
    PART_TRY(fh_calloc(&class_rows, (size_t)n, sizeof *class_rows, "partition class rows"));
    PART_TRY(fh_calloc(&fill, (size_t)classes, sizeof *fill, "partition class fill"));
    for (int64_t i = 0; i < n; i++) class_start[labels[i] + 1]++;
    for (int c = 0; c < classes; c++) class_start[c + 1] += class_start[c];
    for (int64_t i = 0; i < n; i++) class_rows[class_start[labels[i]] + fill[labels[i]]++] = i;
    if (proc->needs & PART_NEEDS_ALL_CLASSES)
        for (int c = 0; c < classes; c++)
            if (class_start[c + 1] == class_start[c])
                PART_FAIL(FH_ERR_DATA,
                          "%s: class %d has no training sample (labels in [0, %d)); this scheme needs every "
                          "class present: check `classes` against the data set",
                          name, c, classes);
    ctx.class_start = class_start;
    ctx.class_rows = class_rows;
    PART_TRY(proc->run(out, &ctx));
done:
    fh_free(&class_start);
    fh_free(&class_rows);
    fh_free(&fill);
    if (status != FH_OK) data_partition_free(out);
    return status;
}

void data_partition_free(DataPartition *p)
{
    if (!p) return;
    fh_free(&p->offsets);
    fh_free(&p->indices);
    p->n_clients = 0;
}
