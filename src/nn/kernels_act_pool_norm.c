/* Element-wise, pooling and normalisation kernels (everything but the BLAS-backed layers). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels.h"

/* Lane kernels of the channel-blocked layouts (block 8 or 16, NnTensor.block) are inlined with their lane count
 * L a constant (LANES), so that a loop over the lanes is whole vectors. */
#define LANE_INLINE static inline __attribute__((always_inline))
#define LANES(L, f, ...) ((L) == 16 ? f(__VA_ARGS__, 16) : f(__VA_ARGS__, 8))

/* ============================== activations ============================== */

/* Compares, not fminf(fmaxf()): those keep IEEE NaN rules that gcc will not vectorise (5x slower in
 * batch norm). The same values, NaN included (it becomes 0); only a -0 input becomes +0. */
static inline float relu6(float v)
{
    v = v > 0.0f ? v : 0.0f;
    return v < 6.0f ? v : 6.0f;
}

void nn_act_forward(float *y, int64_t n, NnAct act)
{
    if (act == NN_ACT_RELU) {
        NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;);
    } else if (act == NN_ACT_RELU6) {
        NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) y[i] = relu6(y[i]););
    }
}

void nn_act_backward(float *dy, const float *y, int64_t n, NnAct act)
{
    if (act == NN_ACT_RELU) {
        NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;);
    } else if (act == NN_ACT_RELU6) {
        /* PyTorch's hardtanh: gradient passes strictly inside (0, 6) */
        NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) dy[i] = ((y[i] > 0.0f) & (y[i] < 6.0f)) ? dy[i] : 0.0f;);
    }
}

/* ============================== pooling ============================== */

/* 2x2 stride 2 without padding: the pool of every model in the zoo but resnet18_gn's stem. Branch-free
 * selects (the comparisons are data-dependent coin flips); the first maximum wins ties, as below. */
static void maxpool2x2_plane(float *yp, int32_t *ap, const float *xp, int w, int ho, int wo)
{
    for (int oh = 0; oh < ho; oh++) {
        const float *r0 = xp + (2 * oh) * w, *r1 = r0 + w;
        int32_t base0 = 2 * oh * w, base1 = base0 + w;
        for (int ow = 0; ow < wo; ow++) {
            float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
            int32_t ia = base0 + 2 * ow, ic = base1 + 2 * ow;
            float m0 = b > a ? b : a, m1 = d > c ? d : c;
            int32_t i0 = b > a ? ia + 1 : ia, i1 = d > c ? ic + 1 : ic;
            yp[oh * wo + ow] = m1 > m0 ? m1 : m0;
            ap[oh * wo + ow] = m1 > m0 ? i1 : i0;
        }
    }
}

static void maxpool_plane(float *yp, int32_t *ap, const float *xp, int h, int w, int k, int stride, int pad, int ho,
                          int wo)
{
    if (k == 2 && stride == 2 && pad == 0) {
        maxpool2x2_plane(yp, ap, xp, w, ho, wo);
        return;
    }
    for (int oh = 0; oh < ho; oh++) {
        int h0 = oh * stride - pad;
        for (int ow = 0; ow < wo; ow++) {
            int w0 = ow * stride - pad;
            float best = -FLT_MAX;
            int32_t best_i = -1;
            for (int i = 0; i < k; i++) {
                int ih = h0 + i;
                if (ih < 0 || ih >= h) continue;
                for (int j = 0; j < k; j++) {
                    int iw = w0 + j;
                    if (iw < 0 || iw >= w) continue;
                    float v = xp[ih * w + iw];
                    /* the first maximum wins ties */
                    if (v > best || best_i < 0) {
                        best = v;
                        best_i = ih * w + iw;
                    }
                }
            }
            yp[oh * wo + ow] = best;
            ap[oh * wo + ow] = best_i;
        }
    }
}

void nn_maxpool_forward(float *y, int32_t *argmax, const float *x, int planes, int h, int w, int k, int stride,
                        int pad, int ho, int wo)
{
    const int64_t in = (int64_t)h * w, out = (int64_t)ho * wo;
    NN_PARALLEL_FOR(planes * in, for (int p = 0; p < planes; p++)
                                     maxpool_plane(y + p * out, argmax + p * out, x + p * in, h, w, k, stride, pad,
                                                   ho, wo););
}

/* x in a channel-blocked layout: each sample's block of channels is a run of h*w vectors of L lanes; the window
 * is walked in NCHW's order per lane (the same maxima and winners), and argmax holds the winner's index within
 * the run, so that the backward pass and the pattern replay treat a run as a plane of h*w*L values */
/* four lanes at once, as GCC vector types: the compare-and-select below is not vectorised from a lane loop */
typedef float Lane4f __attribute__((vector_size(16)));
typedef int32_t Lane4i __attribute__((vector_size(16)));

static inline Lane4f lane4_load(const float *p)
{
    Lane4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* a where take is set (all bits: a comparison's true), else b */
static inline Lane4f lane4_select(Lane4i take, Lane4f a, Lane4f b)
{
    return (Lane4f)(((Lane4i)a & take) | ((Lane4i)b & ~take));
}

LANE_INLINE void maxpool_run(float *restrict yr, int32_t *restrict ar, const float *restrict xr, int h, int w, int k,
                             int stride, int pad, int ho, int wo, const int L)
{
    const Lane4i lane = {0, 1, 2, 3};
    for (int oh = 0; oh < ho; oh++) {
        const int h0 = oh * stride - pad, ih0 = h0 > 0 ? h0 : 0, ih1 = h0 + k < h ? h0 + k : h;
        for (int ow = 0; ow < wo; ow++) {
            const int w0 = ow * stride - pad, iw0 = w0 > 0 ? w0 : 0, iw1 = w0 + k < w ? w0 + k : w;
            Lane4f best[NN_MAX_BLOCK / 4];
            Lane4i best_i[NN_MAX_BLOCK / 4];
            const int32_t first = (ih0 * w + iw0) * L;
            for (int v = 0; v < L / 4; v++) {
                memcpy(&best[v], xr + first + 4 * v, sizeof(Lane4f));
                best_i[v] = lane + (first + 4 * v);
            }
            for (int ih = ih0; ih < ih1; ih++)
                for (int iw = ih == ih0 ? iw0 + 1 : iw0; iw < iw1; iw++) {
                    const int32_t at = (ih * w + iw) * L;
                    for (int v = 0; v < L / 4; v++) {
                        const Lane4f x = lane4_load(xr + at + 4 * v);
                        const Lane4i take = x > best[v]; /* the first maximum wins ties */
                        best[v] = lane4_select(take, x, best[v]);
                        best_i[v] = ((lane + (at + 4 * v)) & take) | (best_i[v] & ~take);
                    }
                }
            const int64_t o = ((int64_t)oh * wo + ow) * L;
            memcpy(yr + o, best, sizeof(float) * (size_t)L);
            memcpy(ar + o, best_i, sizeof(int32_t) * (size_t)L);
        }
    }
}

/* 2x2 stride 2 without padding: the pairwise selects of maxpool2x2_plane (the same winners as NCHW, ties and NaN
 * included); a third faster than the general walk, whose window bounds the compiler cannot unroll */
LANE_INLINE void maxpool2x2_run(float *restrict yr, int32_t *restrict ar, const float *restrict xr, int w, int ho,
                                int wo, const int L)
{
    const Lane4i lane = {0, 1, 2, 3};
    for (int oh = 0; oh < ho; oh++)
        for (int ow = 0; ow < wo; ow++) {
            const int32_t ia = (2 * oh * w + 2 * ow) * L, ic = ia + w * L;
            const int64_t o = ((int64_t)oh * wo + ow) * L;
            for (int v = 0; v < L; v += 4) {
                const Lane4f a = lane4_load(xr + ia + v), b = lane4_load(xr + ia + L + v);
                const Lane4f c = lane4_load(xr + ic + v), d = lane4_load(xr + ic + L + v);
                const Lane4i take_b = b > a, take_d = d > c; /* -1 where taken */
                const Lane4f m0 = lane4_select(take_b, b, a), m1 = lane4_select(take_d, d, c);
                const Lane4i i0 = lane + (ia + v) - take_b * L, i1 = lane + (ic + v) - take_d * L;
                const Lane4i take_1 = m1 > m0;
                const Lane4f best = lane4_select(take_1, m1, m0);
                const Lane4i best_i = (i1 & take_1) | (i0 & ~take_1);
                memcpy(yr + o + v, &best, sizeof best);
                memcpy(ar + o + v, &best_i, sizeof best_i);
            }
        }
}

void nn_maxpool_forward_blocked(float *y, int32_t *argmax, const float *x, int batch, int c, int h, int w, int k,
                                int stride, int pad, int ho, int wo, int block)
{
    const int runs = batch * (c / block);
    const int64_t in = (int64_t)h * w * block, out = (int64_t)ho * wo * block;
    if (k == 2 && stride == 2 && pad == 0)
        NN_PARALLEL_FOR((int64_t)runs * in, for (int r = 0; r < runs; r++)
                            LANES(block, maxpool2x2_run, y + r * out, argmax + r * out, x + r * in, w, ho, wo););
    else
        NN_PARALLEL_FOR((int64_t)runs * in, for (int r = 0; r < runs; r++)
                            LANES(block, maxpool_run, y + r * out, argmax + r * out, x + r * in, h, w, k, stride, pad,
                                  ho, wo););
}

void nn_maxpool_backward(float *dx, const float *dy, const int32_t *argmax, int planes, int64_t in, int64_t out)
{
    NN_PARALLEL_FOR(planes * in, for (int p = 0; p < planes; p++) {
        float *dxp = dx + p * in;
        for (int64_t i = 0; i < out; i++) dxp[argmax[p * out + i]] += dy[p * out + i];
    });
}

int nn_maxpool_tiles(int h, int w, int k, int stride, int pad)
{
    return stride == k && pad == 0 && h % k == 0 && w % k == 0;
}

/* every input value lies in one window: a dense pass over dx in input order instead of a scatter, with the
 * scatter's sums (onto zeros, 0 + dy: a -0 gradient lands as +0); four lanes at once as above. On NCHW planes,
 * one lane, it ran 7x slower than the scatter: blocked layouts only */
LANE_INLINE void maxpool_tiled_backward_run(float *restrict dxr, const float *restrict dyr, const int32_t *restrict ar,
                                            int w, int k, int ho, int wo, const int onto_zeros, const int L)
{
    const Lane4i lane = {0, 1, 2, 3};
    for (int oh = 0; oh < ho; oh++)
        for (int i = 0; i < k; i++)
            for (int ow = 0; ow < wo; ow++)
                for (int j = 0; j < k; j++) {
                    const int32_t at = ((oh * k + i) * w + ow * k + j) * L;
                    const int64_t o = ((int64_t)oh * wo + ow) * L;
                    for (int v = 0; v < L; v += 4) {
                        Lane4i winner;
                        memcpy(&winner, ar + o + v, sizeof winner);
                        const Lane4f before = onto_zeros ? (Lane4f){0} : lane4_load(dxr + at + v);
                        const Lane4f sum = lane4_select(winner == lane + (at + v), before + lane4_load(dyr + o + v),
                                                        before);
                        memcpy(dxr + at + v, &sum, sizeof sum);
                    }
                }
}

void nn_maxpool_backward_tiled(float *dx, const float *dy, const int32_t *argmax, int runs, int h, int w, int k,
                               int block, int onto_zeros)
{
    const int ho = h / k, wo = w / k;
    const int64_t in = (int64_t)h * w * block, out = (int64_t)ho * wo * block;
    /* onto_zeros as a constant of each inlined copy: the load it spares stays out of the loop */
    NN_PARALLEL_FOR(runs * in, for (int r = 0; r < runs; r++) {
        float *dxr = dx + r * in;
        const float *dyr = dy + r * out;
        const int32_t *ar = argmax + r * out;
        if (onto_zeros) LANES(block, maxpool_tiled_backward_run, dxr, dyr, ar, w, k, ho, wo, 1);
        else LANES(block, maxpool_tiled_backward_run, dxr, dyr, ar, w, k, ho, wo, 0);
    });
}

void nn_avgpool_forward(float *y, const float *x, int planes, int h, int w, int k, int stride, int pad, int ho,
                        int wo)
{
    float inv = 1.0f / (float)(k * k);
    NN_PARALLEL_FOR((int64_t)planes * h * w, for (int p = 0; p < planes; p++) {
        const float *xp = x + (int64_t)p * h * w;
        float *yp = y + (int64_t)p * ho * wo;
        for (int oh = 0; oh < ho; oh++)
            for (int ow = 0; ow < wo; ow++) {
                float s = 0.0f;
                for (int i = 0; i < k; i++) {
                    int ih = oh * stride - pad + i;
                    if (ih < 0 || ih >= h) continue;
                    for (int j = 0; j < k; j++) {
                        int iw = ow * stride - pad + j;
                        if (iw >= 0 && iw < w) s += xp[ih * w + iw];
                    }
                }
                yp[oh * wo + ow] = s * inv;
            }
    });
}

void nn_avgpool_backward(float *dx, const float *dy, int planes, int h, int w, int k, int stride, int pad, int ho,
                         int wo)
{
    float inv = 1.0f / (float)(k * k);
    NN_PARALLEL_FOR((int64_t)planes * h * w, for (int p = 0; p < planes; p++) {
        float *dxp = dx + (int64_t)p * h * w;
        const float *dyp = dy + (int64_t)p * ho * wo;
        for (int oh = 0; oh < ho; oh++)
            for (int ow = 0; ow < wo; ow++) {
                float g = dyp[oh * wo + ow] * inv;
                for (int i = 0; i < k; i++) {
                    int ih = oh * stride - pad + i;
                    if (ih < 0 || ih >= h) continue;
                    for (int j = 0; j < k; j++) {
                        int iw = ow * stride - pad + j;
                        if (iw >= 0 && iw < w) dxp[ih * w + iw] += g;
                    }
                }
            }
    });
}

static float plane_mean(const float *xp, int hw)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < hw; i++) s += xp[i];
    return s / (float)hw;
}

void nn_gap_forward(float *y, const float *x, int planes, int hw)
{
    NN_PARALLEL_FOR((int64_t)planes * hw, for (int p = 0; p < planes; p++) y[p] = plane_mean(x + (int64_t)p * hw, hw););
}

void nn_gap_backward(float *dx, const float *dy, int planes, int hw)
{
    NN_PARALLEL_FOR((int64_t)planes * hw, for (int p = 0; p < planes; p++) {
        float g = dy[p] / (float)hw;
        float *dxp = dx + (int64_t)p * hw;
        for (int i = 0; i < hw; i++) dxp[i] += g;
    });
}

/* x in a channel-blocked layout (block lanes, NnTensor.block); y [batch, c] is the same in every layout. Each lane
 * sums its channel over the run in order (other bits than plane_mean's). */
static void gap_run(float *y, const float *xr, int hw, int block)
{
    float sum[NN_MAX_BLOCK] = {0};
    for (int64_t i = 0; i < (int64_t)hw * block; i += block)
#pragma omp simd
        for (int j = 0; j < block; j++) sum[j] += xr[i + j];
    for (int j = 0; j < block; j++) y[j] = sum[j] / (float)hw;
}

static void gap_backward_run(float *dxr, const float *dy, int hw, int block)
{
    float g[NN_MAX_BLOCK];
    for (int j = 0; j < block; j++) g[j] = dy[j] / (float)hw;
    for (int64_t i = 0; i < (int64_t)hw * block; i += block)
#pragma omp simd
        for (int j = 0; j < block; j++) dxr[i + j] += g[j];
}

void nn_gap_forward_blocked(float *y, const float *x, int batch, int c, int hw, int block)
{
    const int runs = batch * (c / block);
    NN_PARALLEL_FOR((int64_t)batch * c * hw, for (int r = 0; r < runs; r++)
                        gap_run(y + (int64_t)r * block, x + (int64_t)r * hw * block, hw, block););
}

void nn_gap_backward_blocked(float *dx, const float *dy, int batch, int c, int hw, int block)
{
    const int runs = batch * (c / block);
    NN_PARALLEL_FOR((int64_t)batch * c * hw, for (int r = 0; r < runs; r++)
                        gap_backward_run(dx + (int64_t)r * hw * block, dy + (int64_t)r * block, hw, block););
}

/* ============================== batch norm ============================== */

static inline float act_apply(float v, NnAct act)
{
    if (act == NN_ACT_RELU) return v > 0.0f ? v : 0.0f;
    if (act == NN_ACT_RELU6) return relu6(v);
    return v;
}

static inline float act_mask(float dy, float y, NnAct act)
{
    if (act == NN_ACT_RELU) return y > 0.0f ? dy : 0.0f;
    if (act == NN_ACT_RELU6) return ((y > 0.0f) & (y < 6.0f)) ? dy : 0.0f;
    return dy;
}

/* The batch-norm kernels work on blocks of BN_BLOCK channels, sample by sample, so that memory is read in
 * runs of BN_BLOCK adjacent planes (one plane at a time, the prefetcher restarts at every page); blocks are
 * what threads split. Each channel's sums still run over the samples in order: the bits do not depend on
 * the blocks. In a channel-blocked layout (block 8 or 16, NnTensor.block) a block is the layout's own: a
 * sample's block is one run of hw vectors of `block` lanes, summed lane by lane (the lane kernels below;
 * other bits than NCHW's plane sums, the same from run to run). */
enum { BN_BLOCK = NN_MAX_BLOCK };

typedef struct {
    int batch, c, hw;
    int block; /* 0: NCHW; else the channel block of the layout */
    NnAct act;
    int dx_zero; /* backward: nothing has reached dx yet, so it is written (0 + the gradient), not added to */
} BnShape;

/* where plane (b, ch) starts; in a blocked layout, with ch the block's first channel, where its run starts */
static inline int64_t bn_plane(const BnShape *s, int b, int ch) { return ((int64_t)b * s->c + ch) * s->hw; }
static inline int bn_step(const BnShape *s) { return s->block ? s->block : BN_BLOCK; }
static inline int bn_blocks(const BnShape *s) { return (s->c + bn_step(s) - 1) / bn_step(s); }

/* `call` for every block of channels [c0, c1) of s, the blocks split over the threads */
#define BN_FOR_BLOCKS(s, call)                                                                     \
    NN_PARALLEL_FOR((int64_t)(s)->batch * (s)->c * (s)->hw, for (int blk = 0; blk < bn_blocks(s); blk++) { \
        const int c0 = blk * bn_step(s), c1 = c0 + bn_step(s) < (s)->c ? c0 + bn_step(s) : (s)->c;          \
        call;                                                                                      \
    })

/* ---- the batch-norm lane kernels: one sample's run of hw vectors of L lanes, channel j in lane j. Sums run in
 * float over chunks of BN_CHUNK positions, then in double: about the rounding of the NCHW kernels' plane sums. */
enum { BN_CHUNK = 64 };

LANE_INLINE void lanes_affine(float *yp, const float *xp, const float *scale, const float *offset, int hw, NnAct act,
                            const int L)
{
    for (int64_t i = 0; i < (int64_t)hw * L; i += L)
#pragma omp simd
        for (int j = 0; j < L; j++) yp[i + j] = act_apply(xp[i + j] * scale[j] + offset[j], act);
}

/* the end of a chunk: its float sums added to the double ones */
LANE_INLINE void lanes_flush(double *sum1, double *sum2, const float *s1, const float *s2, const int L)
{
    for (int j = 0; j < L; j++) {
        sum1[j] += s1[j];
        sum2[j] += s2[j];
    }
}

/* sums of x - shift and (x - shift)^2, added to sum and sumsq */
LANE_INLINE void lanes_stats(double *sum, double *sumsq, const float *xp, const float *shift, int hw, const int L)
{
    for (int i0 = 0; i0 < hw; i0 += BN_CHUNK) {
        const int i1 = i0 + BN_CHUNK < hw ? i0 + BN_CHUNK : hw;
        float s1[NN_MAX_BLOCK] = {0}, s2[NN_MAX_BLOCK] = {0};
        for (int64_t i = (int64_t)i0 * L; i < (int64_t)i1 * L; i += L)
#pragma omp simd
            for (int j = 0; j < L; j++) {
                float d = xp[i + j] - shift[j];
                s1[j] += d;
                s2[j] += d * d;
            }
        lanes_flush(sum, sumsq, s1, s2, L);
    }
}

/* sums of dy and dy * (x - mean), dy masked by the activation first (and stored back) */
LANE_INLINE void lanes_mask_sums(double *sum_dy, double *sum_dy_xc, float *dyp, const float *yp, const float *xp,
                               const float *mean, int hw, const NnAct act, const int L)
{
    for (int i0 = 0; i0 < hw; i0 += BN_CHUNK) {
        const int i1 = i0 + BN_CHUNK < hw ? i0 + BN_CHUNK : hw;
        float s1[NN_MAX_BLOCK] = {0}, s2[NN_MAX_BLOCK] = {0};
        for (int64_t i = (int64_t)i0 * L; i < (int64_t)i1 * L; i += L)
#pragma omp simd
            for (int j = 0; j < L; j++) {
                float g = act == NN_ACT_NONE ? dyp[i + j] : act_mask(dyp[i + j], yp[i + j], act);
                if (act != NN_ACT_NONE) dyp[i + j] = g;
                s1[j] += g;
                s2[j] += g * (xp[i + j] - mean[j]);
            }
        lanes_flush(sum_dy, sum_dy_xc, s1, s2, L);
    }
}

/* one activation per inlined copy: a choice inside the loop keeps it from vectorising */
LANE_INLINE void lanes_mask_sums_act(double *sum_dy, double *sum_dy_xc, float *dyp, const float *yp, const float *xp,
                                   const float *mean, int hw, NnAct act, const int L)
{
    if (act == NN_ACT_RELU) lanes_mask_sums(sum_dy, sum_dy_xc, dyp, yp, xp, mean, hw, NN_ACT_RELU, L);
    else if (act == NN_ACT_RELU6) lanes_mask_sums(sum_dy, sum_dy_xc, dyp, yp, xp, mean, hw, NN_ACT_RELU6, L);
    else lanes_mask_sums(sum_dy, sum_dy_xc, dyp, yp, xp, mean, hw, NN_ACT_NONE, L);
}

/* dx += k (dy - m1 - xhat m2), xhat = (x - mean) invstd */
LANE_INLINE void lanes_dx(float *dxp, const float *xp, const float *dyp, const float *mean, const float *invstd,
                        const float *k, const float *m1, const float *m2, int hw, const int dx_zero, const int L)
{
    for (int64_t i = 0; i < (int64_t)hw * L; i += L)
#pragma omp simd
        for (int j = 0; j < L; j++) {
            float xhat = (xp[i + j] - mean[j]) * invstd[j];
            dxp[i + j] = (dx_zero ? 0.0f : dxp[i + j]) + k[j] * (dyp[i + j] - m1[j] - xhat * m2[j]);
        }
}

/* frozen statistics: s1 += dy, s2 += dy xhat, dx += k dy (dxp may be NULL) */
LANE_INLINE void lanes_eval_backward(float *s1, float *s2, float *dxp, const float *xp, const float *dyp,
                                   const float *mean, const float *invstd, const float *k, int hw, const int L)
{
    for (int64_t i = 0; i < (int64_t)hw * L; i += L)
#pragma omp simd
        for (int j = 0; j < L; j++) {
            s1[j] += dyp[i + j];
            s2[j] += dyp[i + j] * (xp[i + j] - mean[j]) * invstd[j];
            if (dxp) dxp[i + j] += dyp[i + j] * k[j];
        }
}

static void bn_affine_block(float *y, const float *x, const float *scale, const float *offset, const BnShape *s,
                            int c0, int c1)
{
    const int L = s->block;
    for (int b = 0; b < s->batch; b++) {
        if (L) {
            float *yp = y + bn_plane(s, b, c0);
            const float *xp = x + bn_plane(s, b, c0);
            if (s->act == NN_ACT_RELU) LANES(L, lanes_affine, yp, xp, scale, offset, s->hw, NN_ACT_RELU);
            else if (s->act == NN_ACT_RELU6) LANES(L, lanes_affine, yp, xp, scale, offset, s->hw, NN_ACT_RELU6);
            else LANES(L, lanes_affine, yp, xp, scale, offset, s->hw, NN_ACT_NONE);
            continue;
        }
        for (int ch = c0; ch < c1; ch++) {
            const float *xp = x + bn_plane(s, b, ch);
            float *yp = y + bn_plane(s, b, ch);
            const float k = scale[ch - c0], o = offset[ch - c0];
            for (int i = 0; i < s->hw; i++) yp[i] = act_apply(xp[i] * k + o, s->act);
        }
    }
}

void nn_batchnorm_running_update(float *rm, float *rv, int ch, double mean, double var, int64_t count, float momentum)
{
    /* running variance uses the unbiased estimate, as PyTorch */
    double unbiased = count > 1 ? var * (double)count / (double)(count - 1) : var;
    rm[ch] = (1.0f - momentum) * rm[ch] + momentum * (float)mean;
    rv[ch] = (1.0f - momentum) * rv[ch] + momentum * (float)unbiased;
}

/* One pass for the statistics: sums of (x - K) and (x - K)^2 with K the channel's first value (the
 * shifted-data algorithm: no cancellation when the mean is large against the spread), per plane (or per
 * lane of a sample's run) in float, across samples in double. A second pass normalises and applies the
 * activation. */
static void bn_train_block(float *y, float *save_mean, float *save_invstd, float *rm, float *rv, const float *x,
                           const float *gamma, const float *beta, float eps, float momentum, const BnShape *s, int c0,
                           int c1)
{
    const int64_t count = (int64_t)s->batch * s->hw;
    const int L = s->block;
    double sum[BN_BLOCK] = {0}, sumsq[BN_BLOCK] = {0};
    float shift[BN_BLOCK], scale[BN_BLOCK], offset[BN_BLOCK];
    for (int ch = c0; ch < c1; ch++) shift[ch - c0] = L ? x[bn_plane(s, 0, c0) + ch - c0] : x[bn_plane(s, 0, ch)];
    for (int b = 0; b < s->batch; b++) {
        if (L) {
            LANES(L, lanes_stats, sum, sumsq, x + bn_plane(s, b, c0), shift, s->hw);
            continue;
        }
        for (int ch = c0; ch < c1; ch++) {
            const float *xp = x + bn_plane(s, b, ch);
            const float k = shift[ch - c0];
            float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
            for (int i = 0; i < s->hw; i++) {
                float d = xp[i] - k;
                s1 += d;
                s2 += d * d;
            }
            sum[ch - c0] += s1;
            sumsq[ch - c0] += s2;
        }
    }
    for (int ch = c0; ch < c1; ch++) {
        const int j = ch - c0;
        double mean_shifted = sum[j] / (double)count;
        double var = sumsq[j] / (double)count - mean_shifted * mean_shifted; /* biased: used to normalise */
        if (var < 0.0) var = 0.0;
        double mean = (double)shift[j] + mean_shifted;
        float invstd = (float)(1.0 / sqrt(var + (double)eps));
        save_mean[ch] = (float)mean;
        save_invstd[ch] = invstd;
        if (rm) nn_batchnorm_running_update(rm, rv, ch, mean, var, count, momentum);
        scale[j] = gamma[ch] * invstd;
        offset[j] = beta[ch] - (float)mean * scale[j];
    }
    bn_affine_block(y, x, scale, offset, s, c0, c1);
}

void nn_batchnorm_forward_train_act(float *y, float *save_mean, float *save_invstd, float *rm, float *rv,
                                    const float *x, const float *gamma, const float *beta, int batch, int c, int hw,
                                    float eps, float momentum, NnAct act, int block)
{
    const BnShape s = {batch, c, hw, block, act, 0};
    BN_FOR_BLOCKS(&s, bn_train_block(y, save_mean, save_invstd, rm, rv, x, gamma, beta, eps, momentum, &s, c0, c1));
}

void nn_batchnorm_forward_train(float *y, float *save_mean, float *save_invstd, float *rm, float *rv,
                                const float *x, const float *gamma, const float *beta, int batch, int c, int hw,
                                float eps, float momentum)
{
    nn_batchnorm_forward_train_act(y, save_mean, save_invstd, rm, rv, x, gamma, beta, batch, c, hw, eps, momentum,
                                   NN_ACT_NONE, 0);
}

static void bn_eval_block(float *y, const float *x, const float *gamma, const float *beta, const float *rm,
                          const float *rv, float eps, const BnShape *s, int c0, int c1)
{
    float scale[BN_BLOCK], offset[BN_BLOCK];
    for (int ch = c0; ch < c1; ch++) {
        float invstd = 1.0f / sqrtf(rv[ch] + eps);
        scale[ch - c0] = gamma[ch] * invstd;
        offset[ch - c0] = beta[ch] - rm[ch] * scale[ch - c0];
    }
    bn_affine_block(y, x, scale, offset, s, c0, c1);
}

void nn_batchnorm_forward_eval_act(float *y, const float *x, const float *gamma, const float *beta, const float *rm,
                                   const float *rv, int batch, int c, int hw, float eps, NnAct act, int block)
{
    const BnShape s = {batch, c, hw, block, act, 0};
    BN_FOR_BLOCKS(&s, bn_eval_block(y, x, gamma, beta, rm, rv, eps, &s, c0, c1));
}

void nn_batchnorm_forward_eval(float *y, const float *x, const float *gamma, const float *beta, const float *rm,
                               const float *rv, int batch, int c, int hw, float eps)
{
    nn_batchnorm_forward_eval_act(y, x, gamma, beta, rm, rv, batch, c, hw, eps, NN_ACT_NONE, 0);
}

/* The sums of dy and dy * (x - mean) over a plane, dy masked by the activation first (and stored back) */
static inline void bn_mask_sums(float *dyp, const float *yp, const float *xp, float mean, int hw, NnAct act,
                                float *sum_dy, float *sum_dy_xc)
{
    float s1 = 0.0f, s2 = 0.0f;
    if (act == NN_ACT_NONE) {
#pragma omp simd reduction(+ : s1, s2)
        for (int i = 0; i < hw; i++) {
            s1 += dyp[i];
            s2 += dyp[i] * (xp[i] - mean);
        }
    } else {
#pragma omp simd reduction(+ : s1, s2)
        for (int i = 0; i < hw; i++) {
            float g = act_mask(dyp[i], yp[i], act);
            dyp[i] = g;
            s1 += g;
            s2 += g * (xp[i] - mean);
        }
    }
    *sum_dy = s1;
    *sum_dy_xc = s2;
}

/* the sums of one sample over the block, into sum_dy / sum_dy_xc; one inlined copy per activation: a choice
 * inside the loops keeps them from vectorising */
static void bn_backward_sums(double *sum_dy, double *sum_dy_xc, float *dy, const float *y, const float *x,
                             const float *save_mean, const BnShape *s, int b, int c0, int c1)
{
    const int hw = s->hw, L = s->block;
    if (L) {
        const float *yp = y ? y + bn_plane(s, b, c0) : NULL;
        LANES(L, lanes_mask_sums_act, sum_dy, sum_dy_xc, dy + bn_plane(s, b, c0), yp, x + bn_plane(s, b, c0),
                 save_mean + c0, hw, s->act);
        return;
    }
    for (int ch = c0; ch < c1; ch++) {
        const float *xp = x + bn_plane(s, b, ch);
        float *dyp = dy + bn_plane(s, b, ch);
        const float *yp = y ? y + bn_plane(s, b, ch) : NULL;
        const float mean = save_mean[ch];
        float s1, s2;
        if (s->act == NN_ACT_RELU) bn_mask_sums(dyp, yp, xp, mean, hw, NN_ACT_RELU, &s1, &s2);
        else if (s->act == NN_ACT_RELU6) bn_mask_sums(dyp, yp, xp, mean, hw, NN_ACT_RELU6, &s1, &s2);
        else bn_mask_sums(dyp, yp, xp, mean, hw, NN_ACT_NONE, &s1, &s2);
        sum_dy[ch - c0] += s1;
        sum_dy_xc[ch - c0] += s2;
    }
}

/* Two passes: the sums (masking dy by the activation on the fly and storing it back), then dx. */
static void bn_backward_block(float *dx, float *dgamma, float *dbeta, float *dy, const float *y, const float *x,
                              const float *gamma, const float *save_mean, const float *save_invstd, const BnShape *s,
                              int c0, int c1)
{
    const int64_t count = (int64_t)s->batch * s->hw;
    const int hw = s->hw, L = s->block;
    double sum_dy[BN_BLOCK] = {0}, sum_dy_xhat[BN_BLOCK] = {0};
    for (int b = 0; b < s->batch; b++) bn_backward_sums(sum_dy, sum_dy_xhat, dy, y, x, save_mean, s, b, c0, c1);
    float k[BN_BLOCK], mean_dy[BN_BLOCK], mean_dy_xhat[BN_BLOCK];
    for (int ch = c0; ch < c1; ch++) {
        const int j = ch - c0;
        sum_dy_xhat[j] *= save_invstd[ch];
        dgamma[ch] += (float)sum_dy_xhat[j];
        dbeta[ch] += (float)sum_dy[j];
        /* dx = gamma*invstd/N * (N dy - sum(dy) - xhat sum(dy xhat)) */
        k[j] = gamma[ch] * save_invstd[ch];
        mean_dy[j] = (float)(sum_dy[j] / (double)count);
        mean_dy_xhat[j] = (float)(sum_dy_xhat[j] / (double)count);
    }
    if (!dx) return;
    for (int b = 0; b < s->batch; b++) {
        if (L) {
            const int64_t at = bn_plane(s, b, c0);
            /* dx_zero as a constant of each inlined copy, as in the tiled max-pool backward */
            if (s->dx_zero)
                LANES(L, lanes_dx, dx + at, x + at, dy + at, save_mean + c0, save_invstd + c0, k, mean_dy, mean_dy_xhat,
                      hw, 1);
            else
                LANES(L, lanes_dx, dx + at, x + at, dy + at, save_mean + c0, save_invstd + c0, k, mean_dy, mean_dy_xhat,
                      hw, 0);
            continue;
        }
        for (int ch = c0; ch < c1; ch++) {
            const int j = ch - c0;
            const float *xp = x + bn_plane(s, b, ch);
            const float *dyp = dy + bn_plane(s, b, ch);
            float *dxp = dx + bn_plane(s, b, ch);
            const float mean = save_mean[ch], invstd = save_invstd[ch], kj = k[j], m1 = mean_dy[j],
                        m2 = mean_dy_xhat[j];
            if (s->dx_zero)
                for (int i = 0; i < hw; i++) dxp[i] = 0.0f;
            for (int i = 0; i < hw; i++) {
                float xhat = (xp[i] - mean) * invstd;
                dxp[i] += kj * (dyp[i] - m1 - xhat * m2);
            }
        }
    }
}

void nn_batchnorm_backward_train_act(float *dx, float *dgamma, float *dbeta, float *dy, const float *y,
                                     const float *x, const float *gamma, const float *save_mean,
                                     const float *save_invstd, int batch, int c, int hw, NnAct act, int block,
                                     int dx_zero)
{
    const BnShape s = {batch, c, hw, block, act, dx_zero};
    BN_FOR_BLOCKS(&s, bn_backward_block(dx, dgamma, dbeta, dy, y, x, gamma, save_mean, save_invstd, &s, c0, c1));
}

void nn_batchnorm_backward_train(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                                 const float *gamma, const float *save_mean, const float *save_invstd, int batch,
                                 int c, int hw)
{
    /* with no activation dy is only read */
    nn_batchnorm_backward_train_act(dx, dgamma, dbeta, (float *)dy, NULL, x, gamma, save_mean, save_invstd, batch, c,
                                    hw, NN_ACT_NONE, 0, 0);
}

static void bn_backward_eval_block(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                                   const float *gamma, const float *rm, const float *rv, float eps, const BnShape *s,
                                   int c0, int c1)
{
    const int hw = s->hw, L = s->block;
    float s1[BN_BLOCK] = {0}, s2[BN_BLOCK] = {0}, invstd[BN_BLOCK], k[BN_BLOCK];
    for (int ch = c0; ch < c1; ch++) {
        invstd[ch - c0] = 1.0f / sqrtf(rv[ch] + eps);
        k[ch - c0] = gamma[ch] * invstd[ch - c0];
    }
    for (int b = 0; b < s->batch; b++) {
        if (L) {
            LANES(L, lanes_eval_backward, s1, s2, dx ? dx + bn_plane(s, b, c0) : NULL, x + bn_plane(s, b, c0),
                     dy + bn_plane(s, b, c0), rm + c0, invstd, k, hw);
            continue;
        }
        for (int ch = c0; ch < c1; ch++) {
            const int j = ch - c0;
            const float mean = rm[ch], kj = k[j];
            const float *xp = x + bn_plane(s, b, ch);
            const float *dyp = dy + bn_plane(s, b, ch);
            float *dxp = dx ? dx + bn_plane(s, b, ch) : NULL;
            float a1 = s1[j], a2 = s2[j];
#pragma omp simd reduction(+ : a1, a2)
            for (int i = 0; i < hw; i++) {
                a1 += dyp[i];
                a2 += dyp[i] * (xp[i] - mean) * invstd[j];
                if (dxp) dxp[i] += dyp[i] * kj;
            }
            s1[j] = a1;
            s2[j] = a2;
        }
    }
    for (int ch = c0; ch < c1; ch++) {
        dgamma[ch] += s2[ch - c0];
        dbeta[ch] += s1[ch - c0];
    }
}

void nn_batchnorm_backward_eval(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                                const float *gamma, const float *rm, const float *rv, int batch, int c, int hw,
                                float eps, int block)
{
    const BnShape s = {batch, c, hw, block, NN_ACT_NONE, 0};
    BN_FOR_BLOCKS(&s, bn_backward_eval_block(dx, dgamma, dbeta, dy, x, gamma, rm, rv, eps, &s, c0, c1));
}

/* ============================== group norm ============================== */

/* A group's channels are one contiguous region of a sample in NCHW and in a blocked layout whose block divides
 * the group's channels (NnTensor.block): its statistics are the same sums either way; only the per-channel
 * scale, shift and parameter gradients find their channel by layout. */
static void gn_forward_group(float *y, float *save_mean, float *save_invstd, const float *x, const float *gamma,
                             const float *beta, int c, int hw, int groups, float eps, int block, int b, int g)
{
    int cg = c / groups;
    int64_t count = (int64_t)cg * hw;
    const float *xg = x + ((int64_t)b * c + (int64_t)g * cg) * hw;
    double sum = 0.0, sumsq = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < count; i++) sum += xg[i];
    double mean = sum / (double)count;
#pragma omp simd reduction(+ : sumsq)
    for (int64_t i = 0; i < count; i++) {
        double d = xg[i] - mean;
        sumsq += d * d;
    }
    float invstd = (float)(1.0 / sqrt(sumsq / (double)count + (double)eps));
    save_mean[b * groups + g] = (float)mean;
    save_invstd[b * groups + g] = invstd;
    float *yg = y + ((int64_t)b * c + (int64_t)g * cg) * hw;
    if (block) {
        for (int k = 0; k < cg; k += block) {
            float scale[NN_MAX_BLOCK], shift[NN_MAX_BLOCK];
            for (int j = 0; j < block; j++) {
                scale[j] = gamma[g * cg + k + j] * invstd;
                shift[j] = beta[g * cg + k + j] - (float)mean * scale[j];
            }
            const float *xr = xg + (int64_t)k * hw;
            float *yr = yg + (int64_t)k * hw;
            for (int64_t i = 0; i < (int64_t)hw * block; i += block)
#pragma omp simd
                for (int j = 0; j < block; j++) yr[i + j] = xr[i + j] * scale[j] + shift[j];
        }
        return;
    }
    for (int ci = 0; ci < cg; ci++) {
        int ch = g * cg + ci;
        float scale = gamma[ch] * invstd, shift = beta[ch] - (float)mean * scale;
        for (int i = 0; i < hw; i++) yg[ci * hw + i] = xg[ci * hw + i] * scale + shift;
    }
}

void nn_groupnorm_forward(float *y, float *save_mean, float *save_invstd, const float *x, const float *gamma,
                          const float *beta, int batch, int c, int hw, int groups, float eps, int block)
{
    NN_PARALLEL_FOR((int64_t)batch * c * hw,
                    for (int bg = 0; bg < batch * groups; bg++)
                        gn_forward_group(y, save_mean, save_invstd, x, gamma, beta, c, hw, groups, eps, block,
                                         bg / groups, bg % groups););
}

/* per-channel sums s1 = sum dy, s2 = sum dy * xhat over a blocked run of `block` channels */
static void gn_sums_lanes(float *s1, float *s2, const float *xr, const float *dyr, float mean, float invstd, int hw,
                          int block)
{
    for (int j = 0; j < block; j++) s1[j] = s2[j] = 0.0f;
    for (int64_t i = 0; i < (int64_t)hw * block; i += block)
#pragma omp simd
        for (int j = 0; j < block; j++) {
            float xhat = (xr[i + j] - mean) * invstd;
            s1[j] += dyr[i + j];
            s2[j] += dyr[i + j] * xhat;
        }
}

/* One group of every sample, the samples in order: dgamma and dbeta sum over the batch as on one thread. */
static void gn_backward_group(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                              const float *gamma, const float *save_mean, const float *save_invstd, int batch, int c,
                              int hw, int groups, int block, int dx_zero, int g)
{
    int cg = c / groups;
    int64_t count = (int64_t)cg * hw;
    for (int b = 0; b < batch; b++) {
        float mean = save_mean[b * groups + g], invstd = save_invstd[b * groups + g];
        const float *xg = x + ((int64_t)b * c + (int64_t)g * cg) * hw;
        const float *dyg = dy + ((int64_t)b * c + (int64_t)g * cg) * hw;
        /* with dxhat = dy * gamma: dx = invstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
        double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
        for (int ci = 0; ci < cg; ci += block ? block : 1) {
            int ch = g * cg + ci;
            float s1 = 0.0f, s2 = 0.0f;
            if (block) {
                float l1[NN_MAX_BLOCK], l2[NN_MAX_BLOCK];
                gn_sums_lanes(l1, l2, xg + (int64_t)ci * hw, dyg + (int64_t)ci * hw, mean, invstd, hw, block);
                for (int j = 0; j < block; j++) {
                    dbeta[ch + j] += l1[j];
                    dgamma[ch + j] += l2[j];
                    sum_dxhat += (double)l1[j] * gamma[ch + j];
                    sum_dxhat_xhat += (double)l2[j] * gamma[ch + j];
                }
                continue;
            }
#pragma omp simd reduction(+ : s1, s2)
            for (int i = 0; i < hw; i++) {
                float xhat = (xg[ci * hw + i] - mean) * invstd;
                s1 += dyg[ci * hw + i];
                s2 += dyg[ci * hw + i] * xhat;
            }
            dbeta[ch] += s1;
            dgamma[ch] += s2;
            sum_dxhat += (double)s1 * gamma[ch];
            sum_dxhat_xhat += (double)s2 * gamma[ch];
        }
        if (!dx) continue;
        float m1 = (float)(sum_dxhat / (double)count), m2 = (float)(sum_dxhat_xhat / (double)count);
        float *dxg = dx + ((int64_t)b * c + (int64_t)g * cg) * hw;
        if (dx_zero) memset(dxg, 0, sizeof(float) * (size_t)count); /* cache-hot: the pass below reads it at once */
        if (block) {
            for (int k = 0; k < cg; k += block) {
                const float *gm = gamma + g * cg + k, *xr = xg + (int64_t)k * hw, *dyr = dyg + (int64_t)k * hw;
                float *dxr = dxg + (int64_t)k * hw;
                for (int64_t i = 0; i < (int64_t)hw * block; i += block)
#pragma omp simd
                    for (int j = 0; j < block; j++) {
                        float xhat = (xr[i + j] - mean) * invstd;
                        dxr[i + j] += invstd * (dyr[i + j] * gm[j] - m1 - xhat * m2);
                    }
            }
            continue;
        }
        for (int ci = 0; ci < cg; ci++) {
            float gm = gamma[g * cg + ci];
            for (int i = 0; i < hw; i++) {
                float xhat = (xg[ci * hw + i] - mean) * invstd;
                dxg[ci * hw + i] += invstd * (dyg[ci * hw + i] * gm - m1 - xhat * m2);
            }
        }
    }
}

void nn_groupnorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                           const float *gamma, const float *save_mean, const float *save_invstd, int batch, int c,
                           int hw, int groups, int block, int dx_zero)
{
    NN_PARALLEL_FOR((int64_t)batch * c * hw,
                    for (int g = 0; g < groups; g++)
                        gn_backward_group(dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd, batch, c, hw, groups,
                                          block, dx_zero, g););
}
