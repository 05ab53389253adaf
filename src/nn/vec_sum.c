/* Exact, order-independent sums of weighted float vectors (fedhet/nn.h, docs/architecture.md "Aggregation").
 *
 * A term c = a x (one rounding, in double) is split over fixed bins by extraction: with E = 1.5 * 2^e,
 * q = (c + E) - E is c rounded to a multiple of ulp(E) = 2^(e-52), exactly, when |c| < 2^(e-1), and c - q is exact
 * too. Bin k takes multiples of 2^(-32 k): bin 0 the terms' whole part (|c| < 2^32), bin k > 0 the part left by
 * bin k-1 (at most 2^31 of its units). Each bin's sum of such multiples stays exact for 2^21 terms (53-bit
 * significands), so additions in any order, on any rank, give the same bins. The terms are deposited by
 * nn_isa_sum_block_add (kernels_isa.inc, one copy per vector width, the same IEEE operations in each): the build is
 * ISO C (-std=c11), so GCC contracts no multiply-add, and no flag reassociates. */
#include <math.h>

#include "fedhet/nn.h"
#include "kernels.h"

#define SUM_TOP 4294967296.0 /* 2^32: the terms' bound, the first bin's 2^(e-20) */

static const double extractor[NN_SUM_BINS] = { 0x1.8p52, 0x1.8p20, 0x1.8p-12, 0x1.8p-44 };

void nn_sum_zero(double *acc, int64_t n)
{
    for (int64_t j = 0; j < NN_SUM_BINS * n; j++) acc[j] = 0.0;
}

/* Elements go in blocks of NN_SUM_BLOCK, each block's bins together: a term's pass over a block stays in L1, and
 * a caller that takes every term of a range before the next range keeps that range's bins in cache. */
static inline int64_t block_len(int64_t base, int64_t n) { return n - base < NN_SUM_BLOCK ? n - base : NN_SUM_BLOCK; }

void nn_sum_add(double *restrict acc, double a, const float *restrict x, int64_t n)
{
    for (int64_t base = 0; base < n; base += NN_SUM_BLOCK) {
        const int64_t len = block_len(base, n);
        nn_isa_sum_block_add(acc + NN_SUM_BINS * base, len, a, x + base, NULL, extractor, SUM_TOP);
    }
}

void nn_sum_add_diff(double *restrict acc, double a, const float *restrict x, const float *restrict y, int64_t n)
{
    for (int64_t base = 0; base < n; base += NN_SUM_BLOCK) {
        const int64_t len = block_len(base, n);
        nn_isa_sum_block_add(acc + NN_SUM_BINS * base, len, a, x + base, y + base, extractor, SUM_TOP);
    }
}

void nn_sum_merge(double *restrict acc, const double *restrict other, int64_t n)
{
    for (int64_t j = 0; j < NN_SUM_BINS * n; j++) acc[j] += other[j];
}

void nn_sum_result_f64(const double *acc, int64_t n, double *out)
{
    for (int64_t base = 0; base < n; base += NN_SUM_BLOCK) {
        const int64_t len = block_len(base, n);
        const double *b = acc + NN_SUM_BINS * base;
        for (int64_t j = 0; j < len; j++) out[base + j] = b[j] + (b[len + j] + (b[2 * len + j] + b[3 * len + j]));
    }
}

void nn_sum_result(const double *acc, int64_t n, float *out)
{
    for (int64_t base = 0; base < n; base += NN_SUM_BLOCK) {
        const int64_t len = block_len(base, n);
        const double *b = acc + NN_SUM_BINS * base;
        for (int64_t j = 0; j < len; j++)
            out[base + j] = (float)(b[j] + (b[len + j] + (b[2 * len + j] + b[3 * len + j])));
    }
}
