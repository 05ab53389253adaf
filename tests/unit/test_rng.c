/* Unit tests for src/core/rng.c, the Philox4x32-10 counter-based generator: the Random123 known-answer
 * vectors, the key/counter/word layout of a stream, determinism and separation of streams, and the
 * moments of every distribution (uniform, normal, gamma, Dirichlet, categorical, bounded integers,
 * shuffles). Seeds are fixed, so every statistical check is deterministic; tolerances are still set at
 * about 5 standard errors so that a change of seed would not make them fail.
 *
 * Run all:  build/tests/test_rng            Run one:  build/tests/test_rng test_gamma_moments */
#include "test.h"

#include <Random123/philox.h>
#include <stdint.h>
#include <stdlib.h>

#include "fedhet/rng.h"

#define SEED 20240611u

/* The three philox4x32-10 vectors of Random123's kat_vectors file. */
static const struct {
    uint32_t ctr[4], key[2], out[4];
} kat[3] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

/* (seed, purpose) whose key is kat[i].key: key[1] = bits 32..55 of seed | purpose << 24 */
static uint64_t kat_seed(int i) { return ((uint64_t)(kat[i].key[1] & 0xFFFFFFu) << 32) | kat[i].key[0]; }
static FhRngPurpose kat_purpose(int i) { return (FhRngPurpose)(kat[i].key[1] >> 24); }

static void test_kat_raw_philox(void)
{
    for (int i = 0; i < 3; i++) {
        philox4x32_ctr_t c = {{kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]}};
        philox4x32_key_t k = {{kat[i].key[0], kat[i].key[1]}};
        philox4x32_ctr_t r = philox4x32_R(10, c, k);
        for (int w = 0; w < 4; w++)
            CHECK_MSG(r.v[w] == kat[i].out[w], "vector %d word %d: %08x != %08x", i, w, r.v[w], kat[i].out[w]);
    }
}

static void test_kat_block(void)
{
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        fh_rng_block(out, kat_seed(i), kat_purpose(i), kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]);
        for (int w = 0; w < 4; w++)
            CHECK_MSG(out[w] == kat[i].out[w], "vector %d word %d: %08x != %08x", i, w, out[w], kat[i].out[w]);
    }
    /* the key layout itself: kat vector 2 has purpose 0x29 and seed bits 32..55 = 0x9f31d0 */
    FhRng rng;
    fh_rng_init(&rng, kat_seed(2), kat_purpose(2), 1, 2, 3);
    CHECK(rng.key[0] == 0xa4093822u);
    CHECK(rng.key[1] == 0x299f31d0u);
    /* seed bits 56..63 are not part of the key (that byte holds the purpose) */
    uint32_t a[4], b[4];
    fh_rng_block(a, 0x00123456789abcdeULL, FH_RNG_TEST, 1, 2, 3, 4);
    fh_rng_block(b, 0xff123456789abcdeULL, FH_RNG_TEST, 1, 2, 3, 4);
    CHECK(memcmp(a, b, sizeof a) == 0);
}

/* A stream opened at (c0, c1, c2) hands out block {c0, c1, c2, 0} word 0 first, then block 1, ... */
static void test_stream_layout(void)
{
    /* stream (key {0, 0}, counters 0, 0, 0): its block 0 is the first known-answer vector */
    FhRng rng;
    fh_rng_init(&rng, kat_seed(0), kat_purpose(0), 0, 0, 0);
    for (int w = 0; w < 4; w++) CHECK(fh_rng_u32(&rng) == kat[0].out[w]);

    const uint32_t c0 = 7, c1 = 0xdeadbeef, c2 = 42;
    uint32_t blk[3][4];
    for (uint32_t b = 0; b < 3; b++) fh_rng_block(blk[b], SEED, FH_RNG_SAMPLE, c0, c1, c2, b);
    fh_rng_init(&rng, SEED, FH_RNG_SAMPLE, c0, c1, c2);
    for (int b = 0; b < 3; b++)
        for (int w = 0; w < 4; w++) CHECK_MSG(fh_rng_u32(&rng) == blk[b][w], "block %d word %d", b, w);
    CHECK(rng.ctr[3] == 3);

    /* u64 = first word high; uniform = top 53 bits of that; uniform_f = top 24 bits of one word */
    fh_rng_init(&rng, SEED, FH_RNG_SAMPLE, c0, c1, c2);
    uint64_t x = fh_rng_u64(&rng);
    CHECK(x == (((uint64_t)blk[0][0] << 32) | blk[0][1]));
    double u = fh_rng_uniform(&rng);
    CHECK(u == (double)(((((uint64_t)blk[0][2] << 32) | blk[0][3])) >> 11) / 9007199254740992.0);
    float f = fh_rng_uniform_f(&rng);
    CHECK(f == (float)(blk[1][0] >> 8) / 16777216.0f);
    /* a u64 straddling two blocks takes the last word of one and the first of the next */
    fh_rng_init(&rng, SEED, FH_RNG_SAMPLE, c0, c1, c2);
    for (int i = 0; i < 3; i++) (void)fh_rng_u32(&rng);
    CHECK(fh_rng_u64(&rng) == (((uint64_t)blk[0][3] << 32) | blk[1][0]));
}

/* a mixed sequence of draws, to compare streams with every code path in play */
static void draw_mixed(FhRng *rng, double *out, int n)
{
    for (int i = 0; i < n; i++) {
        switch (i % 6) {
        case 0: out[i] = fh_rng_u32(rng); break;
        case 1: out[i] = fh_rng_normal(rng); break;
        case 2: out[i] = fh_rng_gamma(rng, 0.3); break;
        case 3: out[i] = (double)fh_rng_below(rng, 1000003); break;
        case 4: out[i] = fh_rng_uniform(rng); break;
        default: out[i] = fh_rng_gamma(rng, 2.5); break;
        }
    }
}

static void test_same_inputs_same_stream(void)
{
    enum { N = 3000 };
    static double a[N], b[N];
    FhRng r1, r2, other;
    fh_rng_init(&r1, SEED, FH_RNG_SHUFFLE, 3, 1, 4);
    draw_mixed(&r1, a, N);
    /* other streams drawn in between must not matter */
    fh_rng_init(&other, SEED, FH_RNG_SHUFFLE, 3, 1, 5);
    for (int i = 0; i < 100; i++) (void)fh_rng_normal(&other);
    fh_rng_init(&r2, SEED, FH_RNG_SHUFFLE, 3, 1, 4);
    draw_mixed(&r2, b, N);
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* re-initialising a used generator restarts the stream, including the Box-Muller spare */
    (void)fh_rng_normal(&r2); /* leaves a spare behind */
    fh_rng_init(&r2, SEED, FH_RNG_SHUFFLE, 3, 1, 4);
    draw_mixed(&r2, b, N);
    CHECK(memcmp(a, b, sizeof a) == 0);
}

static int first_words_equal(uint64_t s1, FhRngPurpose p1, const uint32_t c1[3], uint64_t s2, FhRngPurpose p2,
                             const uint32_t c2[3])
{
    FhRng a, b;
    fh_rng_init(&a, s1, p1, c1[0], c1[1], c1[2]);
    fh_rng_init(&b, s2, p2, c2[0], c2[1], c2[2]);
    int same = 0;
    for (int i = 0; i < 16; i++) same += fh_rng_u32(&a) == fh_rng_u32(&b);
    return same;
}

static void test_different_inputs_differ(void)
{
    const uint32_t c[3] = {10, 20, 30};
    CHECK(first_words_equal(SEED, FH_RNG_INIT, c, SEED, FH_RNG_INIT, c) == 16);
    /* 16 words agreeing by chance is 2^-32 each; allow none to agree beyond a coincidence or two */
    CHECK(first_words_equal(SEED, FH_RNG_INIT, c, SEED, FH_RNG_SAMPLE, c) <= 1);
    CHECK(first_words_equal(SEED, FH_RNG_DROPOUT, c, SEED, FH_RNG_AUGMENT, c) <= 1);
    const int seed_bits[] = {0, 31, 32, 55};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(first_words_equal(SEED, FH_RNG_INIT, c, SEED ^ (1ULL << seed_bits[i]), FH_RNG_INIT, c) <= 1,
                  "seed bit %d", seed_bits[i]);
    for (int w = 0; w < 3; w++) {
        uint32_t d[3] = {c[0], c[1], c[2]};
        d[w] ^= 1u;
        CHECK_MSG(first_words_equal(SEED, FH_RNG_INIT, c, SEED, FH_RNG_INIT, d) <= 1, "counter word %d", w);
        d[w] = c[w] ^ 0x80000000u;
        CHECK_MSG(first_words_equal(SEED, FH_RNG_INIT, c, SEED, FH_RNG_INIT, d) <= 1, "counter word %d top", w);
    }
    /* counter words must not be interchangeable: (a, b, c) and (b, a, c) are different streams */
    const uint32_t swapped[3] = {20, 10, 30};
    CHECK(first_words_equal(SEED, FH_RNG_INIT, c, SEED, FH_RNG_INIT, swapped) <= 1);
    /* fh_rng_block: each of the four counter words matters */
    uint32_t base[4], o[4];
    fh_rng_block(base, SEED, FH_RNG_TEST, 1, 2, 3, 4);
    for (int w = 0; w < 4; w++) {
        uint32_t cc[4] = {1, 2, 3, 4};
        cc[w] += 1;
        fh_rng_block(o, SEED, FH_RNG_TEST, cc[0], cc[1], cc[2], cc[3]);
        CHECK_MSG(memcmp(base, o, sizeof o) != 0, "block counter word %d", w);
    }
}

static void test_uniform_moments(void)
{
    enum { N = 100000 };
    FhRng rng;
    fh_rng_init(&rng, SEED, FH_RNG_TEST, 1, 0, 0);
    double s = 0, s2 = 0, sf = 0, sf2 = 0;
    int in_range = 1, in_range_f = 1;
    for (int i = 0; i < N; i++) {
        double u = fh_rng_uniform(&rng);
        float f = fh_rng_uniform_f(&rng);
        in_range &= u >= 0.0 && u < 1.0;
        in_range_f &= f >= 0.0f && f < 1.0f;
        s += u;
        s2 += u * u;
        sf += f;
        sf2 += (double)f * f;
    }
    CHECK(in_range);
    CHECK(in_range_f);
    /* SE of the mean 0.29/sqrt(N) = 9e-4; SE of the variance 0.075/sqrt(N) = 2.4e-4 */
    double m = s / N, v = s2 / N - m * m;
    CHECK_NEAR(m, 0.5, 0.005);
    CHECK_NEAR(v, 1.0 / 12.0, 0.0015);
    m = sf / N;
    v = sf2 / N - m * m;
    CHECK_NEAR(m, 0.5, 0.005);
    CHECK_NEAR(v, 1.0 / 12.0, 0.0015);
    /* the extremes are reachable as values, not just limits: the largest uniform is below 1 */
    CHECK((double)((1ULL << 53) - 1) * 0x1.0p-53 < 1.0);
}

static void test_normal_moments(void)
{
    enum { N = 200000 };
    FhRng rng;
    fh_rng_init(&rng, SEED, FH_RNG_TEST, 2, 0, 0);
    double s = 0, s2 = 0, s3 = 0, s4 = 0;
    int finite = 1;
    for (int i = 0; i < N; i++) {
        double x = fh_rng_normal(&rng);
        finite &= isfinite(x);
        s += x;
        s2 += x * x;
        s3 += x * x * x;
        s4 += x * x * x * x;
    }
    CHECK(finite);
    /* SEs over 2e5 draws: mean 2.2e-3, E[x^2] 3.2e-3, E[x^3] 5.5e-3, E[x^4] 2.2e-2; tolerances ~5 SE */
    CHECK_NEAR(s / N, 0.0, 0.012);
    CHECK_NEAR(s2 / N, 1.0, 0.016);
    CHECK_NEAR(s3 / N, 0.0, 0.03);
    CHECK_NEAR(s4 / N, 3.0, 0.11);
    /* the pair of a Box-Muller step is uncorrelated: E[x_{2i} x_{2i+1}] ~ 0 */
    fh_rng_init(&rng, SEED, FH_RNG_TEST, 2, 1, 0);
    double sxy = 0;
    for (int i = 0; i < N / 2; i++) {
        double x = fh_rng_normal(&rng), y = fh_rng_normal(&rng);
        sxy += x * y;
    }
    CHECK_NEAR(sxy / (N / 2), 0.0, 0.016);
}

static void test_gamma_moments(void)
{
    enum { N = 200000 };
    const double shapes[] = {0.1, 0.5, 1.0, 3.7};
    for (int si = 0; si < 4; si++) {
        const double k = shapes[si];
        FhRng rng;
        fh_rng_init(&rng, SEED, FH_RNG_TEST, 3, (uint32_t)si, 0);
        double s = 0, s2 = 0;
        int valid = 1;
        for (int i = 0; i < N; i++) {
            double g = fh_rng_gamma(&rng, k);
            valid &= isfinite(g) && g >= 0.0;
            s += g;
            s2 += g * g;
        }
        double m = s / N, v = s2 / N - m * m;
        /* Gamma(k, 1): mean k, variance k, excess kurtosis 6/k, so SE(mean) = sqrt(k/N) and
         * SE(var) = k sqrt((2 + 6/k)/N); tolerance 5 SE (relative: 0.5% to 2.2% for the mean, 1.7% to
         * 9% for the variance) */
        double tol_m = 5.0 * sqrt(k / N), tol_v = 5.0 * k * sqrt((2.0 + 6.0 / k) / N);
        CHECK_MSG(valid, "shape %g produced a negative or non-finite draw", k);
        CHECK_MSG(fabs(m - k) <= tol_m, "shape %g: mean %.6g, tol %.3g", k, m, tol_m);
        CHECK_MSG(fabs(v - k) <= tol_v, "shape %g: variance %.6g, tol %.3g", k, v, tol_v);
    }
    FhRng rng;
    fh_rng_init(&rng, SEED, FH_RNG_TEST, 3, 9, 0);
    CHECK(isnan(fh_rng_gamma(&rng, 0.0)));
    CHECK(isnan(fh_rng_gamma(&rng, -1.0)));
}

static void test_dirichlet_moments(void)
{
    enum { N = 50000, K = 4 };
    const double alpha[K] = {0.5, 1.0, 2.0, 4.5}; /* sum 8 */
    double mean[K] = {0}, out[K];
    int sums_ok = 1, nonneg = 1;
    FhRng rng;
    fh_rng_init(&rng, SEED, FH_RNG_PARTITION, 0, 0, 0);
    for (int i = 0; i < N; i++) {
        fh_rng_dirichlet(&rng, out, alpha, 0.0, K);
        double s = 0;
        for (int j = 0; j < K; j++) {
            nonneg &= out[j] >= 0.0;
            s += out[j];
            mean[j] += out[j] / N;
        }
        sums_ok &= fabs(s - 1.0) <= 1e-12;
    }
    CHECK(sums_ok);
    CHECK(nonneg);
    /* Var(x_j) = a_j (8 - a_j) / (64 * 9) <= 0.027, SE(mean) <= 7.4e-4 */
    for (int j = 0; j < K; j++) CHECK_NEAR(mean[j], alpha[j] / 8.0, 0.004);

    /* alpha == NULL: every alpha is alpha_all */
    enum { K5 = 5 };
    double mean5[K5] = {0}, out5[K5];
    fh_rng_init(&rng, SEED, FH_RNG_PARTITION, 1, 0, 0);
    for (int i = 0; i < N; i++) {
        fh_rng_dirichlet(&rng, out5, NULL, 2.0, K5);
        for (int j = 0; j < K5; j++) mean5[j] += out5[j] / N;
    }
    /* Var = 0.2 * 0.8 / 11 = 0.0145, SE 5.4e-4 */
    for (int j = 0; j < K5; j++) CHECK_NEAR(mean5[j], 0.2, 0.003);
}

static void test_dirichlet_tiny_alpha(void)
{
    enum { N = 20000, K = 10 };
    double out[K], mean[K] = {0};
    int valid = 1, sums_ok = 1, nearly_one_hot = 0;
    FhRng rng;
    fh_rng_init(&rng, SEED, FH_RNG_PARTITION, 2, 0, 0);
    for (int i = 0; i < N; i++) {
        fh_rng_dirichlet(&rng, out, NULL, 1e-3, K);
        double s = 0, mx = 0;
        for (int j = 0; j < K; j++) {
            valid &= isfinite(out[j]) && out[j] >= 0.0;
            s += out[j];
            mean[j] += out[j] / N;
            if (out[j] > mx) mx = out[j];
        }
        sums_ok &= fabs(s - 1.0) <= 1e-12;
        nearly_one_hot += mx > 0.99;
    }
    CHECK(valid);
    CHECK(sums_ok);
    /* with total alpha 0.01 nearly all mass sits on one component, chosen uniformly here:
     * Var(x_j) ~ 0.09, SE(mean) 2.1e-3 */
    CHECK_MSG(nearly_one_hot > 0.95 * N, "%d of %d draws nearly one-hot", nearly_one_hot, N);
    for (int j = 0; j < K; j++) CHECK_NEAR(mean[j], 0.1, 0.012);

    /* unequal tiny alphas keep their proportions: mean = alpha_j / sum(alpha) = 0.25, 0.75 */
    const double a2[2] = {1e-3, 3e-3};
    double m0 = 0;
    fh_rng_init(&rng, SEED, FH_RNG_PARTITION, 2, 1, 0);
    for (int i = 0; i < N; i++) {
        fh_rng_dirichlet(&rng, out, a2, 0.0, 2);
        valid &= isfinite(out[0]) && isfinite(out[1]) && fabs(out[0] + out[1] - 1.0) <= 1e-12;
        m0 += out[0] / N;
    }
    CHECK(valid);
    CHECK_NEAR(m0, 0.25, 0.016); /* SE 3.1e-3 */
}

static void test_categorical_frequencies(void)
{
    enum { N = 100000, K = 5 };
    const double p[K] = {0.2, 0.0, 0.8, 0.4, 0.6}; /* unnormalised: sum 2 */
    int count[K] = {0}, in_range = 1;
    FhRng rng;
    fh_rng_init(&rng, SEED, FH_RNG_SAMPLE, 5, 0, 0);
    for (int i = 0; i < N; i++) {
        int64_t c = fh_rng_categorical(&rng, p, K);
        in_range &= c >= 0 && c < K;
        if (c >= 0 && c < K) count[c]++;
    }
    CHECK(in_range);
    CHECK(count[1] == 0);
    /* SE <= 1.6e-3 */
    for (int j = 0; j < K; j++) CHECK_NEAR((double)count[j] / N, p[j] / 2.0, 0.008);
    /* all mass on one index, at either end */
    const double first[3] = {1.0, 0.0, 0.0}, last[3] = {0.0, 0.0, 3.0};
    int ok = 1;
    for (int i = 0; i < 1000; i++) {
        ok &= fh_rng_categorical(&rng, first, 3) == 0;
        ok &= fh_rng_categorical(&rng, last, 3) == 2;
    }
    CHECK(ok);
    const double one[1] = {0.5};
    CHECK(fh_rng_categorical(&rng, one, 1) == 0);
}

static void test_below_range_and_uniform(void)
{
    enum { N = 70000 };
    FhRng rng;
    fh_rng_init(&rng, SEED, FH_RNG_TEST, 6, 0, 0);
    int count[7] = {0}, in_range = 1;
    for (int i = 0; i < N; i++) {
        uint64_t r = fh_rng_below(&rng, 7);
        in_range &= r < 7;
        if (r < 7) count[r]++;
    }
    CHECK(in_range);
    /* chi-square with 6 degrees of freedom: 30 is exceeded with probability 4e-5 */
    double chi2 = 0;
    for (int j = 0; j < 7; j++) chi2 += (count[j] - N / 7.0) * (count[j] - N / 7.0) / (N / 7.0);
    CHECK_MSG(chi2 < 30.0, "chi2 = %.2f", chi2);

    CHECK(fh_rng_below(&rng, 1) == 0);
    const uint64_t ns[] = {2, 3, 1000003, 3ULL << 30, 1ULL << 32, (1ULL << 32) + 1, 3ULL << 62, UINT64_MAX};
    for (int k = 0; k < 8; k++) {
        int ok = 1;
        for (int i = 0; i < 2000; i++) ok &= fh_rng_below(&rng, ns[k]) < ns[k];
        CHECK_MSG(ok, "n = %llu", (unsigned long long)ns[k]);
    }

    /* unbiasedness where a biased method shows it clearly (each would give 1/2 instead of 1/3):
     * n = 3 * 2^30 on the 32-bit path, multiply-shift without rejection favours r % 3 == 0;
     * n = 3 * 2^62 on the 64-bit path, a plain modulo favours r < 2^62. SE 1.5e-3 over 1e5. */
    int hits32 = 0, hits64 = 0;
    for (int i = 0; i < 100000; i++) {
        hits32 += fh_rng_below(&rng, 3ULL << 30) % 3 == 0;
        hits64 += fh_rng_below(&rng, 3ULL << 62) < (1ULL << 62);
    }
    CHECK_NEAR(hits32 / 100000.0, 1.0 / 3.0, 0.008);
    CHECK_NEAR(hits64 / 100000.0, 1.0 / 3.0, 0.008);
}

static int is_permutation(const int64_t *perm, int64_t n)
{
    char *seen = calloc((size_t)n + 1, 1);
    int ok = seen != NULL;
    for (int64_t i = 0; ok && i < n; i++) {
        if (perm[i] < 0 || perm[i] >= n || seen[perm[i]]) ok = 0;
        else seen[perm[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_permutation(void)
{
    enum { N = 1000 };
    static int64_t a[N], b[N], c[N];
    FhRng rng;
    fh_rng_init(&rng, SEED, FH_RNG_SHUFFLE, 1, 2, 0);
    fh_rng_permutation(&rng, a, N);
    CHECK(is_permutation(a, N));
    int fixed = 0;
    for (int i = 0; i < N; i++) fixed += a[i] == i;
    CHECK_MSG(fixed < 10, "%d fixed points (expect ~1)", fixed); /* it actually moved things */

    fh_rng_init(&rng, SEED, FH_RNG_SHUFFLE, 1, 2, 0);
    fh_rng_permutation(&rng, b, N);
    CHECK(memcmp(a, b, sizeof a) == 0);

    fh_rng_init(&rng, SEED, FH_RNG_SHUFFLE, 1, 3, 0); /* another epoch, say */
    fh_rng_permutation(&rng, c, N);
    CHECK(is_permutation(c, N));
    CHECK(memcmp(a, c, sizeof a) != 0);

    /* degenerate sizes */
    int64_t one = 123;
    fh_rng_permutation(&rng, &one, 1);
    CHECK(one == 0);
    fh_rng_permutation(&rng, NULL, 0);
}

static void test_shuffle_position_uniform(void)
{
    enum { N = 100000, K = 10 };
    int first64[K] = {0}, last64[K] = {0}, first32[K] = {0};
    FhRng rng;
    fh_rng_init(&rng, SEED, FH_RNG_SHUFFLE, 9, 0, 0);
    int perm_ok = 1;
    for (int i = 0; i < N; i++) {
        int64_t v[K];
        int32_t w[K];
        for (int j = 0; j < K; j++) v[j] = w[j] = j;
        fh_rng_shuffle_i64(&rng, v, K);
        fh_rng_shuffle_i32(&rng, w, K);
        perm_ok &= is_permutation(v, K);
        first64[v[0]]++;
        last64[v[K - 1]]++;
        first32[w[0]]++;
    }
    CHECK(perm_ok);
    /* each value lands in a given position with probability 1/10: SE 9.5e-4, tolerance 0.006 */
    for (int j = 0; j < K; j++) {
        CHECK_MSG(fabs(first64[j] / (double)N - 0.1) < 0.006, "i64: value %d first %d times", j, first64[j]);
        CHECK_MSG(fabs(last64[j] / (double)N - 0.1) < 0.006, "i64: value %d last %d times", j, last64[j]);
        CHECK_MSG(fabs(first32[j] / (double)N - 0.1) < 0.006, "i32: value %d first %d times", j, first32[j]);
    }
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_kat_raw_philox);
    RUN(test_kat_block);
    RUN(test_stream_layout);
    RUN(test_same_inputs_same_stream);
    RUN(test_different_inputs_differ);
    RUN(test_uniform_moments);
    RUN(test_normal_moments);
    RUN(test_gamma_moments);
    RUN(test_dirichlet_moments);
    RUN(test_dirichlet_tiny_alpha);
    RUN(test_categorical_frequencies);
    RUN(test_below_range_and_uniform);
    RUN(test_permutation);
    RUN(test_shuffle_position_uniform);
    return test_summary();
}
