/* Counter-based random numbers on Random123's Philox4x32-10.
 *
 * Every draw is a pure function of (seed, purpose, c0, c1, c2, position in the stream), so a number
 * does not depend on which rank draws it, in what order streams are opened, or how many other draws
 * happened elsewhere. A stream is the sequence of blocks philox(key, {c0, c1, c2, b}) for b = 0, 1, 2...,
 * consumed one 32-bit word at a time, word 0 first. No global state, no rand(), no clock. */
#include "fedhet/rng.h"

#include <Random123/philox.h>
#include <math.h>
#include <stddef.h>

/* The header's "Philox4x32-10": pin the round count rather than trust the library default. */
#define FH_PHILOX_ROUNDS 10

static void philox_block(uint32_t out[4], const uint32_t key[2], const uint32_t ctr[4])
{
    philox4x32_ctr_t c = {{ctr[0], ctr[1], ctr[2], ctr[3]}};
    philox4x32_key_t k = {{key[0], key[1]}};
    philox4x32_ctr_t r = philox4x32_R(FH_PHILOX_ROUNDS, c, k);
    for (int i = 0; i < 4; i++) out[i] = r.v[i];
}

/* Bits 56..63 of the seed are dropped: that byte of the key holds the purpose, which keeps the streams
 * of different purposes apart for every seed. */
static void make_key(uint32_t key[2], uint64_t seed, FhRngPurpose purpose)
{
    key[0] = (uint32_t)seed;
    key[1] = (uint32_t)((seed >> 32) & 0xFFFFFFu) | ((uint32_t)purpose << 24);
}

void fh_rng_init(FhRng *rng, uint64_t seed, FhRngPurpose purpose, uint32_t c0, uint32_t c1, uint32_t c2)
{
    make_key(rng->key, seed, purpose);
    rng->ctr[0] = c0;
    rng->ctr[1] = c1;
    rng->ctr[2] = c2;
    rng->ctr[3] = 0;
    for (int i = 0; i < 4; i++) rng->block[i] = 0;
    rng->n_left = 0; /* the first draw computes block 0 */
    rng->has_spare = 0;
    rng->spare = 0.0;
}

void fh_rng_block(uint32_t out[4], uint64_t seed, FhRngPurpose purpose, uint32_t c0, uint32_t c1, uint32_t c2,
                  uint32_t c3)
{
    uint32_t key[2];
    const uint32_t ctr[4] = {c0, c1, c2, c3};
    make_key(key, seed, purpose);
    philox_block(out, key, ctr);
}

uint32_t fh_rng_u32(FhRng *rng)
{
    if (rng->n_left <= 0) {
        philox_block(rng->block, rng->key, rng->ctr);
        /* 2^32 blocks (2^34 words) per stream: far beyond any draw count here, so a wrap is not handled */
        rng->ctr[3]++;
        rng->n_left = 4;
    }
    return rng->block[4 - rng->n_left--];
}

uint64_t fh_rng_u64(FhRng *rng)
{
    uint64_t hi = fh_rng_u32(rng); /* two statements: the order of the two draws must be fixed */
    uint64_t lo = fh_rng_u32(rng);
    return (hi << 32) | lo;
}

uint64_t fh_rng_below(FhRng *rng, uint64_t n)
{
    if (n <= 1) return 0; /* n == 1 needs no randomness; n == 0 breaks the contract, answer 0 rather than trap */
    if (n - 1 == UINT32_MAX) return fh_rng_u32(rng);
    if (n <= UINT32_MAX) {
        /* Lemire's multiply-shift on one 32-bit word; rejecting low parts below 2^32 mod n removes the bias */
        uint32_t n32 = (uint32_t)n;
        uint64_t m = (uint64_t)fh_rng_u32(rng) * n32;
        if ((uint32_t)m < n32) {
            uint32_t threshold = (uint32_t)(0u - n32) % n32;
            while ((uint32_t)m < threshold) m = (uint64_t)fh_rng_u32(rng) * n32;
        }
        return m >> 32;
    }
    /* n > 2^32: plain rejection on 64 bits (no portable 128-bit product in C11). Values below 2^64 mod n
     * are rejected so the accepted range is a whole number of copies of [0, n). */
    uint64_t threshold = (0 - n) % n;
    uint64_t x = fh_rng_u64(rng);
    while (x < threshold) x = fh_rng_u64(rng);
    return x % n;
}

double fh_rng_uniform(FhRng *rng) { return (double)(fh_rng_u64(rng) >> 11) * 0x1.0p-53; }

float fh_rng_uniform_f(FhRng *rng) { return (float)(fh_rng_u32(rng) >> 8) * 0x1.0p-24f; }

double fh_rng_normal(FhRng *rng)
{
    if (rng->has_spare) {
        rng->has_spare = 0;
        return rng->spare;
    }
    /* 1 - u lies in (0, 1], so the log is finite */
    double r = sqrt(-2.0 * log(1.0 - fh_rng_uniform(rng)));
    double theta = 6.283185307179586476925286766559 * fh_rng_uniform(rng);
    rng->spare = r * sin(theta);
    rng->has_spare = 1;
    return r * cos(theta);
}

/* Marsaglia & Tsang (2000), valid for shape >= 1. */
static double gamma_mt(FhRng *rng, double shape)
{
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = fh_rng_normal(rng);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        double u = fh_rng_uniform(rng);
        double x2 = x * x;
        if (u < 1.0 - 0.0331 * x2 * x2) return d * v; /* cheap squeeze accepts ~98% */
        if (log(u) < 0.5 * x2 + d * (1.0 - v + log(v))) return d * v;
    }
}

/* log of a Gamma(shape, 1) draw. For shape < 1 it uses Gamma(shape) = Gamma(shape + 1) * U^(1/shape),
 * kept in log space because U^(1/shape) underflows for small shapes. Consumes exactly the draws of
 * fh_rng_gamma, which is exp() of this. */
static double log_gamma_draw(FhRng *rng, double shape)
{
    if (shape >= 1.0) return log(gamma_mt(rng, shape));
    double g = gamma_mt(rng, shape + 1.0);
    double u = 1.0 - fh_rng_uniform(rng); /* (0, 1]: log(u) is finite */
    return log(g) + log(u) / shape;
}

double fh_rng_gamma(FhRng *rng, double shape)
{
    if (!(shape > 0.0) || isinf(shape)) return NAN; /* outside the contract: make it visible */
    if (shape >= 1.0) return gamma_mt(rng, shape);
    return exp(log_gamma_draw(rng, shape)); /* may underflow to 0 for tiny shapes, as it should */
}

void fh_rng_dirichlet(FhRng *rng, double *out, const double *alpha, double alpha_all, int k)
{
    if (k <= 0) return;
    /* Normalised gammas, computed from log-gammas relative to the largest one (log-sum-exp). With
     * alpha ~1e-3 most plain gammas underflow to 0, often all of them at once; in log space the largest
     * term is exactly 1, so the sum never vanishes and the tiny components keep their true ratios. */
    double max_lg = -INFINITY;
    for (int i = 0; i < k; i++) {
        double a = alpha ? alpha[i] : alpha_all;
        out[i] = (a > 0.0 && !isinf(a)) ? log_gamma_draw(rng, a) : -INFINITY;
        if (out[i] > max_lg) max_lg = out[i];
    }
    double sum = 0.0;
    if (isfinite(max_lg)) {
        for (int i = 0; i < k; i++) {
            out[i] = exp(out[i] - max_lg);
            sum += out[i];
        }
    }
    if (sum > 0.0 && isfinite(sum)) {
        for (int i = 0; i < k; i++) out[i] /= sum;
        return;
    }
    /* Guard, unreachable for valid alphas (all > 0 and finite): if no gamma survives, put mass 1 on one
     * component drawn proportional to alpha, which is the limit of Dirichlet(alpha) as alpha -> 0. With
     * no positive alpha at all the answer is the uniform point, so out still sums to 1. */
    double asum = 0.0;
    for (int i = 0; i < k; i++) {
        double a = alpha ? alpha[i] : alpha_all;
        out[i] = (a > 0.0 && isfinite(a)) ? a : 0.0;
        asum += out[i];
    }
    if (!(asum > 0.0 && isfinite(asum))) {
        for (int i = 0; i < k; i++) out[i] = 1.0 / k;
        return;
    }
    int64_t pick = fh_rng_categorical(rng, out, k);
    for (int i = 0; i < k; i++) out[i] = (i == pick) ? 1.0 : 0.0;
}

int64_t fh_rng_categorical(FhRng *rng, const double *p, int64_t n)
{
    if (n <= 0) return -1;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += p[i];
    double u = fh_rng_uniform(rng) * sum;
    double cum = 0.0;
    int64_t last_positive = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!(p[i] > 0.0)) continue; /* a zero weight is never chosen, even when u == cum */
        cum += p[i];
        last_positive = i;
        if (u < cum) return i;
    }
    return last_positive; /* rounding left u at or above the final cumulative sum */
}

void fh_rng_shuffle_i64(FhRng *rng, int64_t *items, int64_t n)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)fh_rng_below(rng, (uint64_t)i + 1);
        int64_t t = items[i];
        items[i] = items[j];
        items[j] = t;
    }
}

void fh_rng_shuffle_i32(FhRng *rng, int32_t *items, int64_t n)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)fh_rng_below(rng, (uint64_t)i + 1);
        int32_t t = items[i];
        items[i] = items[j];
        items[j] = t;
    }
}

void fh_rng_permutation(FhRng *rng, int64_t *perm, int64_t n)
{
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    fh_rng_shuffle_i64(rng, perm, n);
}
