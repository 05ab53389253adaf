/* Counter-based random numbers: Philox4x32-10 (Random123) keyed by (seed, purpose).
 *
 * A stream is opened at a counter (c0, c1, c2) chosen by the caller from what the draw belongs to
 * (round, client, step, layer...), never from the rank or the clock; the fourth counter word walks
 * the stream. The same (seed, purpose, c0, c1, c2) always yields the same numbers, on any rank. */
#ifndef FEDHET_RNG_H
#define FEDHET_RNG_H

#include <stdint.h>

typedef enum {
    FH_RNG_INIT = 1,
    FH_RNG_SAMPLE = 2,
    FH_RNG_SHUFFLE = 3,
    FH_RNG_AUGMENT = 4,
    FH_RNG_DROPOUT = 5,
    FH_RNG_PARTITION = 6,
    FH_RNG_PROJECTION = 7,
    FH_RNG_HESSIAN = 8, /* power-iteration start and Hutchinson probe vectors */
    FH_RNG_DROP_PATH = 9, /* stochastic depth: which samples skip a residual branch */
    FH_RNG_TEST = 15 /* tests and benchmarks only */
} FhRngPurpose;

typedef struct {
    uint32_t key[2];
    uint32_t ctr[4];  /* ctr[3] counts 4-word blocks */
    uint32_t block[4];
    int n_left;       /* unused words left in block */
    int has_spare;    /* Box-Muller keeps its second normal */
    double spare;
} FhRng;

/* key = (low 32 bits of seed, bits 32..55 of seed | purpose << 24) */
void fh_rng_init(FhRng *rng, uint64_t seed, FhRngPurpose purpose, uint32_t c0, uint32_t c1, uint32_t c2);

/* One Philox block without a stream: out = philox(key(seed, purpose), {c0, c1, c2, c3}). */
void fh_rng_block(uint32_t out[4], uint64_t seed, FhRngPurpose purpose, uint32_t c0, uint32_t c1, uint32_t c2,
                  uint32_t c3);

uint32_t fh_rng_u32(FhRng *rng);
uint64_t fh_rng_u64(FhRng *rng);
uint64_t fh_rng_below(FhRng *rng, uint64_t n);   /* uniform in [0, n), unbiased; n >= 1 */
double fh_rng_uniform(FhRng *rng);               /* [0, 1), 53 bits */
float fh_rng_uniform_f(FhRng *rng);              /* [0, 1), 24 bits */
double fh_rng_normal(FhRng *rng);                /* N(0, 1), Box-Muller */
double fh_rng_gamma(FhRng *rng, double shape);   /* Gamma(shape, 1), shape > 0 (Marsaglia-Tsang) */
/* Dirichlet(alpha[0..k-1]); alpha == NULL means every alpha equals alpha_all. out sums to 1. */
void fh_rng_dirichlet(FhRng *rng, double *out, const double *alpha, double alpha_all, int k);
/* index i with probability p[i] / sum(p); p[i] >= 0, sum > 0 */
int64_t fh_rng_categorical(FhRng *rng, const double *p, int64_t n);
/* Fisher-Yates, in place */
void fh_rng_shuffle_i64(FhRng *rng, int64_t *items, int64_t n);
void fh_rng_shuffle_i32(FhRng *rng, int32_t *items, int64_t n);
/* perm = a uniformly random permutation of 0..n-1 */
void fh_rng_permutation(FhRng *rng, int64_t *perm, int64_t n);

#endif
