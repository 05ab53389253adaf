/* Engine kernels, private to src/nn. Outputs first, then inputs, sizes last; shapes in the comment.
 * Forward kernels overwrite their output; backward kernels accumulate into gradients. */
#ifndef FEDHET_NN_KERNELS_H
#define FEDHET_NN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <omp.h>

#include "fedhet/nn.h"

/* NN_PARALLEL_FOR(work, for-loop): the loop split over the OpenMP threads (train.threads) when it touches at
 * least NN_PAR_MIN floats and there are several threads; below that a parallel region costs more than it
 * saves, and on one thread the loop runs inline (libgomp allocates a one-thread region's team on every call).
 * Each iteration writes its own outputs and sums in the one-thread order, so the bits never depend on the
 * thread count (test_layers_pool_norm checks it). */
#define NN_PAR_MIN 32768
#define NN_PARALLEL_FOR(work, ...)                                              \
    do {                                                                        \
        if ((int64_t)(work) >= NN_PAR_MIN && omp_get_max_threads() > 1) {       \
            _Pragma("omp parallel for schedule(static)") __VA_ARGS__            \
        } else {                                                                \
            __VA_ARGS__                                                         \
        }                                                                       \
    } while (0)

/* ---- activations: y = act(x) in place; dy *= act'(y) in place (the mask is read off the output) ---- */
void nn_act_forward(float *y, int64_t n, NnAct act);
void nn_act_backward(float *dy, const float *y, int64_t n, NnAct act);

/* ---- c = alpha op(a) op(b) + beta c, row-major: OpenBLAS's sgemm, or oneDNN's (onednn != 0: its kernels follow
 * the CPU's instruction set where an OpenBLAS build may not know the CPU and fall back to old ones) ---- */
void nn_gemm(int onednn, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
             const float *b, int ldb, float beta, float *c, int ldc);

/* ---- linear: y[B, n_out] = x[B, n_in] w^T + b;  w [n_out, n_in]; the _ex forms on oneDNN's gemm when asked ---- */
void nn_linear_forward_ex(float *y, const float *x, const float *w, const float *b, int batch, int n_in, int n_out,
                          int onednn);
void nn_linear_backward_ex(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int batch,
                           int n_in, int n_out, int onednn);
void nn_linear_forward(float *y, const float *x, const float *w, const float *b, int batch, int n_in, int n_out);
/* dx may be NULL (first layer) */
void nn_linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int batch,
                        int n_in, int n_out);

/* ---- conv2d, NCHW; w [cout, cin/groups, kh, kw] ----
 * The fields after wo are the general geometry (NnConvSpec); left 0 they are the square case's: kh = kw = k,
 * strides `stride`, pads `pad` on every side, no dilation (dil 1). pad_b and pad_r only fix ho and wo. */
typedef struct {
    int batch, cin, h, w, cout, k, stride, pad, groups, ho, wo;
    int kh, kw, stride_h, stride_w, pad_t, pad_l, pad_b, pad_r, dil_h, dil_w;
} NnConvShape;
int nn_conv_out_size(int in, int k, int stride, int pad);
/* s with its general fields filled from the square ones where they are 0 */
NnConvShape nn_conv_shape_full(const NnConvShape *s);
/* floats of workspace the BLAS path needs for this shape when `chunk` samples go through one gemm */
int64_t nn_conv2d_workspace(const NnConvShape *s, int chunk);
int nn_conv2d_chunk(const NnConvShape *s);
void nn_conv2d_forward(float *y, const float *x, const float *w, const float *b, const NnConvShape *s, float *ws);
/* y = act(conv(x) + b), the bias and activation applied sample by sample while the output is in cache.
 * The backward pass rebuilds the im2col columns: measured faster than keeping them from the forward
 * pass, since rebuilt columns sit in L2 while kept ones come back from memory. */
void nn_conv2d_forward_act(float *y, const float *x, const float *w, const float *b, const NnConvShape *s, NnAct act,
                           float *ws);
/* the adjoint of nn_conv2d_forward_act; dy is overwritten with dy * act'(y) */
void nn_conv2d_backward_act(float *dx, float *dw, float *db, float *dy, const float *y, const float *x,
                            const float *w, const NnConvShape *s, NnAct act, float *ws);
void nn_conv2d_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                        const NnConvShape *s, float *ws);
/* naive direct loops, for testing the BLAS path */
void nn_conv2d_forward_ref(float *y, const float *x, const float *w, const float *b, const NnConvShape *s);
void nn_conv2d_backward_ref(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                            const NnConvShape *s);

/* ---- conv2d on oneDNN (onednn.c): the contract of nn_conv2d_forward_act / nn_conv2d_backward_act ---- */
typedef struct NnOnednn NnOnednn;         /* a model's engine, stream and shared buffers */
typedef struct NnOnednnConv NnOnednnConv; /* one conv layer's primitives, by batch size */
int nn_onednn_create(NnOnednn **ctx);
void nn_onednn_free(NnOnednn **ctx);
size_t nn_onednn_bytes(const NnOnednn *ctx);
/* the primitives for shape s at its batch, the largest the conv will see; `name` (the layer) names errors */
/* the channel block of the layouts oneDNN's convs run in on this CPU: 16 with AVX-512, else 8 */
int nn_onednn_block(void);
/* x_block / y_block: the layouts of the input and output tensors (NnTensor.block) */
int nn_onednn_conv_create(NnOnednnConv **conv, NnOnednn *ctx, const NnConvShape *s, int bias, int x_block,
                          int y_block, const char *name);
void nn_onednn_conv_free(NnOnednnConv **conv);
/* b must be given exactly when the conv was created with a bias; batch <= the creation's */
int nn_onednn_conv_forward(NnOnednnConv *c, float *y, const float *x, const float *w, const float *b, int batch,
                           NnAct act);
/* after a forward at the same batch; dx may be NULL (a first layer), dw and db NULL (the caller computes the
 * weights' gradient: a depthwise conv's NN_DW_WEIGHTS); dy is overwritten with dy * act'(y).
 * dw_zero: dw and db hold zeros (the model's first backward after a zero fill), so they are written, not added
 * to: the same values, less memory traffic. dx_zero: nothing has reached dx yet; it is written whatever it holds */
void nn_onednn_conv_backward(NnOnednnConv *c, float *dx, float *dw, float *db, float *dy, const float *y,
                             const float *x, const float *w, int batch, NnAct act, int dw_zero, int dx_zero);
/* the implementation oneDNN chose for the largest batch: which 0 forward, 1 backward-data, 2 backward-weights */
const char *nn_onednn_conv_impl(const NnOnednnConv *c, int which);

/* ---- batch norm and max pooling on oneDNN, training mode (onednn.c); block: the tensors' layout ---- */
typedef struct NnOnednnLayer NnOnednnLayer;
/* act: a ReLU is fused (forward and backward); other activations are the caller's passes */
int nn_onednn_bn_create(NnOnednnLayer **bn, NnOnednn *ctx, int batch, int c, int h, int w, int block, float eps,
                        NnAct act, const char *name);
int nn_onednn_maxpool_create(NnOnednnLayer **pool, NnOnednn *ctx, int batch, int c, int h, int w, int block, int k,
                             int stride, int pad, int ho, int wo, const char *name);
void nn_onednn_layer_free(NnOnednnLayer **layer);
const char *nn_onednn_layer_impl(const NnOnednnLayer *layer, int backward);
/* batch statistics: writes y, the mean and the biased variance (the backward's inputs); no running statistics */
int nn_onednn_bn_forward(NnOnednnLayer *bn, float *y, float *mean, float *var, const float *x, const float *gamma,
                         const float *beta, int batch);
/* dx (NULL: not wanted), dgamma, dbeta accumulate; *_zero: nothing has reached them yet, so they are written */
void nn_onednn_bn_backward(NnOnednnLayer *bn, float *dx, float *dgamma, float *dbeta, const float *dy,
                           const float *x, const float *gamma, const float *beta, const float *mean, const float *var,
                           int batch, int dgrad_zero, int dx_zero);
/* the winners stay in the layer's workspace for the backward */
int nn_onednn_maxpool_forward(NnOnednnLayer *pool, float *y, const float *x, int batch);
void nn_onednn_maxpool_backward(NnOnednnLayer *pool, float *dx, const float *dy, int batch, int dx_zero);

/* ---- general pooling (NnPoolSpec) over `planes` NCHW planes; the square kernels below are its fast cases ---- */
typedef struct {
    int planes, h, w, kh, kw, stride_h, stride_w, pad_t, pad_l, pad_b, pad_r, ho, wo, count_include_pad;
} NnPoolShape;
/* output size of one axis under ceil_mode's rule (the last window starts inside the input or the leading pad) */
int nn_pool_out_size(int in, int k, int stride, int pad_lo, int pad_hi, int ceil_mode);
/* argmax: the winner's index within its plane (nn_maxpool_backward reads it) */
void nn_maxpool_ex_forward(float *y, int32_t *argmax, const float *x, const NnPoolShape *s);
void nn_maxpool_ex_forward_ref(float *y, int32_t *argmax, const float *x, const NnPoolShape *s);
void nn_avgpool_ex_forward(float *y, const float *x, const NnPoolShape *s);
void nn_avgpool_ex_backward(float *dx, const float *dy, const NnPoolShape *s);
void nn_avgpool_ex_forward_ref(float *y, const float *x, const NnPoolShape *s);
void nn_avgpool_ex_backward_ref(float *dx, const float *dy, const NnPoolShape *s);

/* ---- standalone activations (kernels_elementwise.c): y = f(x); dx += dy f'(x). Branch patterns
 * (NN_PATTERN_*): `record` (may be NULL) receives each value's piece of a piecewise function (0 below, 1 the
 * middle, 2 above); `replay` (NULL: none) makes each value follow the recorded piece, also in the backward ---- */
void nn_act_ex_forward(float *y, uint8_t *record, const float *x, int64_t n, NnActSpec spec, const uint8_t *replay);
void nn_act_ex_backward(float *dx, const float *dy, const float *x, int64_t n, NnActSpec spec, const uint8_t *replay);
void nn_act_ex_forward_ref(float *y, const float *x, int64_t n, NnActSpec spec);
void nn_act_ex_backward_ref(float *dx, const float *dy, const float *x, int64_t n, NnActSpec spec);
/* whether an activation is piecewise (its branches are recorded for NN_PATTERN_*) */
int nn_act_piecewise(NnAct act);

/* ---- channel ops over x [batch, c, hw] (kernels_elementwise.c); backward passes accumulate; block: the layout of
 * a and y (NnTensor.block, dividing c), in which b [batch, c] is the same floats ---- */
/* y = a + b, b [batch, c] broadcast over hw; db += sums over hw; da, db may be NULL */
void nn_add_bcast_forward(float *y, const float *a, const float *b, int batch, int c, int64_t hw, int block);
void nn_add_bcast_backward(float *da, float *db, const float *dy, int batch, int c, int64_t hw, int block);
/* y = a * b, b [batch, c, hw] (bhw = hw: any layout) or [batch, c] broadcast (bhw = 1); da, db may be NULL */
void nn_mul_forward(float *y, const float *a, const float *b, int batch, int c, int64_t hw, int64_t bhw, int block);
void nn_mul_backward(float *da, float *db, const float *dy, const float *a, const float *b, int batch, int c,
                     int64_t hw, int64_t bhw, int block);
/* the same in NCHW, naive */
void nn_mul_forward_ref(float *y, const float *a, const float *b, int batch, int c, int64_t hw, int64_t bhw);
void nn_mul_backward_ref(float *da, float *db, const float *dy, const float *a, const float *b, int batch, int c,
                         int64_t hw, int64_t bhw);
/* channels [y_c0, y_c0 + c) of y [batch, y_c, hw] = (add: +=) channels [x_c0, x_c0 + c) of x [batch, x_c, hw]:
 * concat and slice, forward and backward; also in a blocked layout whose block divides every count and offset
 * (those channels are then one run of c * hw floats as well) */
void nn_channels_copy(float *y, int y_c, int y_c0, const float *x, int x_c, int x_c0, int c, int batch, int64_t hw,
                      int add);
/* y channel i * groups + g = x channel g * (c / groups) + i; backward the inverse, accumulated */
void nn_shuffle_forward(float *y, const float *x, int batch, int c, int groups, int64_t hw);
void nn_shuffle_backward(float *dx, const float *dy, int batch, int c, int groups, int64_t hw);

/* ---- pooling over [B*C] planes of h x w ---- */
void nn_maxpool_forward(float *y, int32_t *argmax, const float *x, int planes, int h, int w, int k, int stride,
                        int pad, int ho, int wo);
/* x in a channel-blocked layout (block lanes); argmax: the winner's index within its sample's run of h*w*block */
void nn_maxpool_forward_blocked(float *y, int32_t *argmax, const float *x, int batch, int c, int h, int w, int k,
                                int stride, int pad, int ho, int wo, int block);
/* planes of `in` input and `out` output values: h*w and ho*wo in NCHW, times the block in a blocked layout */
void nn_maxpool_backward(float *dx, const float *dy, const int32_t *argmax, int planes, int64_t in, int64_t out);
/* windows that tile the input: stride k, no padding, h and w multiples of k */
int nn_maxpool_tiles(int h, int w, int k, int stride, int pad);
/* for windows that tile a channel-blocked input (runs of h*w vectors of `block` lanes), the same dx as
 * nn_maxpool_backward; onto_zeros: dx is written, its contents ignored */
void nn_maxpool_backward_tiled(float *dx, const float *dy, const int32_t *argmax, int runs, int h, int w, int k,
                               int block, int onto_zeros);
/* count_include_pad: the divisor is always k*k */
void nn_avgpool_forward(float *y, const float *x, int planes, int h, int w, int k, int stride, int pad, int ho,
                        int wo);
void nn_avgpool_backward(float *dx, const float *dy, int planes, int h, int w, int k, int stride, int pad, int ho,
                         int wo);
void nn_gap_forward(float *y, const float *x, int planes, int hw);
void nn_gap_backward(float *dx, const float *dy, int planes, int hw);
/* the same for x in a channel-blocked layout (NnTensor.block: 8 or 16, dividing c) */
void nn_gap_forward_blocked(float *y, const float *x, int batch, int c, int hw, int block);
void nn_gap_backward_blocked(float *dx, const float *dy, int batch, int c, int hw, int block);

/* ---- batch norm over x [B, C, hw] ---- */
/* training: batch statistics; saves mean and 1/sqrt(var + eps); updates running stats when rm != NULL */
void nn_batchnorm_forward_train(float *y, float *save_mean, float *save_invstd, float *rm, float *rv,
                                const float *x, const float *gamma, const float *beta, int batch, int c, int hw,
                                float eps, float momentum);
/* one channel's running statistics after a batch of `count` values per channel with these biased statistics */
void nn_batchnorm_running_update(float *rm, float *rv, int ch, double mean, double var, int64_t count, float momentum);
void nn_batchnorm_forward_eval(float *y, const float *x, const float *gamma, const float *beta, const float *rm,
                               const float *rv, int batch, int c, int hw, float eps);
void nn_batchnorm_backward_train(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                                 const float *gamma, const float *save_mean, const float *save_invstd, int batch,
                                 int c, int hw);
/* the same with the activation fused: y = act(bn(x)); backward overwrites dy with dy * act'(y); block: the
 * tensors' layout, 0 for NCHW, else the channel block of a blocked layout (NnTensor.block, dividing c) */
void nn_batchnorm_forward_train_act(float *y, float *save_mean, float *save_invstd, float *rm, float *rv,
                                    const float *x, const float *gamma, const float *beta, int batch, int c, int hw,
                                    float eps, float momentum, NnAct act, int block);
void nn_batchnorm_forward_eval_act(float *y, const float *x, const float *gamma, const float *beta, const float *rm,
                                   const float *rv, int batch, int c, int hw, float eps, NnAct act, int block);
void nn_batchnorm_backward_train_act(float *dx, float *dgamma, float *dbeta, float *dy, const float *y,
                                     const float *x, const float *gamma, const float *save_mean,
                                     const float *save_invstd, int batch, int c, int hw, NnAct act, int block,
                                     int dx_zero);
void nn_batchnorm_backward_eval(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                                const float *gamma, const float *rm, const float *rv, int batch, int c, int hw,
                                float eps, int block);

/* ---- group norm over x [B, C, hw], `groups` groups of C/groups channels; save_* are [B*groups]; block: the
 * layout as for batch norm, dividing C/groups ---- */
void nn_groupnorm_forward(float *y, float *save_mean, float *save_invstd, const float *x, const float *gamma,
                          const float *beta, int batch, int c, int hw, int groups, float eps, int block);
void nn_groupnorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                           const float *gamma, const float *save_mean, const float *save_invstd, int batch, int c,
                           int hw, int groups, int block, int dx_zero);
/* dx_zero (both backward passes above): nothing has reached dx yet, so it is written whatever it holds, with the
 * bits of a zero fill and an add */

/* ---- tensors of any rank (kernels_nd.c): dims at run time, row-major ---- */
#define NN_ND_OPS 2
/* a loop over y's dims (coalesced), with each operand's strides (0: broadcast along that dim) */
typedef struct {
    int nd, n_ops;
    int64_t n[NN_MAX_DIMS], ys[NN_MAX_DIMS], s[NN_ND_OPS][NN_MAX_DIMS];
    int64_t total;
} NnNdLoop;
/* ny: y's dims; nops[k]: operand k's (the same rank; each dim equal to y's or 1) */
void nn_nd_loop_init(NnNdLoop *L, int nd, const int64_t *ny, int n_ops, const int64_t *const *nops);
void nn_binary_forward(float *y, const float *a, const float *b, const NnNdLoop *L, NnBinOp op);
/* da, db (NULL: not wanted) accumulate, summed over the dims they are broadcast on */
void nn_binary_backward(float *da, float *db, const float *dy, const float *a, const float *b, const NnNdLoop *L,
                        NnBinOp op);
/* L over y with x as operand 0 */
void nn_expand_forward(float *y, const float *x, const NnNdLoop *L);
void nn_expand_backward(float *dx, const float *dy, const NnNdLoop *L);
/* L over x with y as operand 0 (stride 0 along the reduced dims) */
void nn_reduce_mean_forward(float *y, const float *x, const NnNdLoop *L, int64_t count, int64_t y_n);
void nn_reduce_mean_backward(float *dx, const float *dy, const NnNdLoop *L, int64_t count);
/* y = x with its dims n[0..nd) permuted (y dim k is x dim perm[k]); add: y += */
void nn_transpose_run(float *y, const float *x, int nd, const int64_t *n, const int *perm, int add);
/* `count` products y [m, n_cols] = alpha op(a) [m, k] op(b) [k, n_cols], op(x) = x, or x^T stored (trans_a, trans_b);
 * rows lda, ldb, ldy floats apart (y's columns adjacent); product i's offsets are sums over its leading index
 * (n[0..nd)) of the strides sa, sb, sy (0: broadcast) */
typedef struct {
    int m, k, n_cols, trans_a, trans_b, nd, onednn;
    float alpha;
    int64_t lda, ldb, ldy;
    int64_t count;
    int64_t n[NN_MAX_DIMS], sa[NN_MAX_DIMS], sb[NN_MAX_DIMS], sy[NN_MAX_DIMS];
} NnMatmulShape;
void nn_matmul_forward(float *y, const float *a, const float *b, const NnMatmulShape *s);
void nn_matmul_backward(float *da, float *db, const float *dy, const float *a, const float *b, const NnMatmulShape *s);
/* rows of d values; w and b NULL: no affine part */
void nn_layernorm_forward(float *y, float *save_mean, float *save_invstd, const float *x, const float *w,
                          const float *b, int64_t rows, int64_t d, float eps);
void nn_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                           const float *save_mean, const float *save_invstd, int64_t rows, int64_t d);
/* along the middle dim of [outer, len, inner] */
void nn_softmax_forward(float *y, const float *x, int64_t outer, int64_t len, int64_t inner);
void nn_softmax_backward(float *dx, const float *dy, const float *y, int64_t outer, int64_t len, int64_t inner);
void nn_gather_forward(float *y, const float *x, const int32_t *index, int n, int64_t outer, int64_t len,
                       int64_t inner);
void nn_gather_backward(float *dx, const float *dy, const int32_t *index, int n, int64_t outer, int64_t len,
                        int64_t inner);

/* ---- kernels_isa.c: loops compiled for AVX-512, AVX2 and the baseline, the copy for this CPU chosen at start;
 * bit-identical results whichever runs. nn_isa_set (tests) caps the choice and returns the level in force. ---- */
enum { NN_ISA_BASE, NN_ISA_AVX2, NN_ISA_AVX512 };
int nn_isa(void);
int nn_isa_set(int level);
const char *nn_isa_name(int level);
/* y = act(x), dx += dy act'(x) for the smooth and piecewise activations without patterns; 0: not one of them */
int nn_isa_act_forward(float *y, const float *x, int64_t n, NnActSpec s);
int nn_isa_act_backward(float *dx, const float *dy, const float *x, int64_t n, NnActSpec s);
/* y[r, :] += b over rows of n; db += the rows of dy summed in row order */
void nn_isa_rows_add_bias(float *y, const float *b, int64_t rows, int64_t n);
void nn_isa_rows_sum(float *db, const float *dy, int64_t rows, int64_t n);
/* rows of d values (nn_layernorm_forward); the backward's dx part */
void nn_isa_layernorm_forward(float *y, float *save_mean, float *save_invstd, const float *x, const float *w,
                              const float *b, int64_t rows, int64_t d, float eps);
void nn_isa_layernorm_backward_dx(float *dx, const float *dy, const float *x, const float *w, const float *save_mean,
                                  const float *save_invstd, int64_t rows, int64_t d);
void nn_isa_layernorm_backward_params(float *dw, float *db, const float *dy, const float *x, const float *save_mean,
                                      const float *save_invstd, int64_t rows, int64_t d);
/* a depthwise conv (one filter a channel, no dilation) on NCHW planes, directly: for the passes where oneDNN
 * falls back to a gemm (a 7 x 7 filter on a 2 x 2 map; the backward weights of any depthwise conv on NCHW) */
#define NN_DW_MAX_K 16     /* the widest filter it takes (the lanes of its backward weights) */
#define NN_DW_PAD 16384    /* the largest padded input plane it takes, in floats (its stack buffer) */
#define NN_DW_TAPS 128     /* the most taps (kh x kw) it takes */
#define NN_DW_BLOCK 16384  /* small maps: the floats of one block of 16 channels' padded planes, channel-last */
int nn_isa_dwconv_fits(const NnConvShape *s);
/* 1 when the map is small enough for the channel-blocked kernels, which beat oneDNN's on NCHW in every pass but
 * the forward */
int nn_isa_dwconv_blocked(const NnConvShape *s);
void nn_isa_dwconv_forward(float *y, const float *x, const float *w, const float *b, const NnConvShape *s);
/* dx += ...; dw += ..., db (may be NULL) += ... */
void nn_isa_dwconv_backward_data(float *dx, const float *dy, const float *w, const NnConvShape *s);
void nn_isa_dwconv_backward_weights(float *dw, float *db, const float *dy, const float *x, const NnConvShape *s);
/* softmax along rows of len values, forward and backward (dx += y (dy - sum(dy y))) */
void nn_isa_softmax_rows_forward(float *y, const float *x, int64_t rows, int64_t len);
void nn_isa_softmax_rows_backward(float *dx, const float *dy, const float *y, int64_t rows, int64_t len);
/* The exact sums' terms (src/nn/vec_sum.c) of one block of len elements into its bins (NN_SUM_BINS rows of len):
 * a x[j], or a (x[j] - y[j]) when y is not NULL; each split over the bins by the extractors (1.5 * 2^e); a term of
 * magnitude top or more, or not finite, makes the element NaN. */
void nn_isa_sum_block_add(double *bins, int64_t len, double a, const float *x, const float *y, const double *extractor,
                          double top);

#endif
