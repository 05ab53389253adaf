/* kernels_isa.inc compiled three times, for AVX-512, for AVX2 and for the baseline the build targets (x86-64-v2 by
 * default), and the copy for this CPU picked once at start. Each copy does the same IEEE operations in the same
 * order: -std=c11 fuses no multiply-add, and no sum is reassociated, so results are bit-identical whichever copy
 * runs; only the vector width, and so the speed, differs. tests/system/test_portable.sh checks that AVX
 * instructions appear only in the _avx2 and _avx512 copies. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_math.h"

#define LANES 16
#define LANES_FOLD(acc)                                                                                        \
    do {                                                                                                       \
        for (int w_ = LANES / 2; w_ >= 1; w_ /= 2)                                                             \
            for (int j_ = 0; j_ < w_; j_++) (acc)[j_] += (acc)[j_ + w_];                                      \
    } while (0)

/* the padded plane a depthwise conv's taps read, hp x wp; 1 when LANES such planes fit NN_DW_BLOCK floats */
static inline int dw_block_dims(const NnConvShape *s, int *hp, int *wp)
{
    *hp = (s->ho - 1) * s->stride_h + s->kh;
    *wp = (s->wo - 1) * s->stride_w + s->kw;
    return (int64_t)*hp * *wp * LANES <= NN_DW_BLOCK;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) /* clang: the baseline copy only */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512")
#define VEC(name) name##_avx512
#include "kernels_isa.inc"
#undef VEC
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2")
#define VEC(name) name##_avx2
#include "kernels_isa.inc"
#undef VEC
#pragma GCC pop_options
#define NN_VEC_WIDE 1
#endif

#define VEC(name) name##_base
#include "kernels_isa.inc"
#undef VEC

static int isa_level; /* NN_ISA_BASE, _AVX2, _AVX512: set before main by isa_detect */

static int isa_supported(void)
{
#ifdef NN_VEC_WIDE
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return NN_ISA_AVX512;
    if (__builtin_cpu_supports("avx2")) return NN_ISA_AVX2;
#endif
    return NN_ISA_BASE;
}

__attribute__((constructor)) static void isa_detect(void) { isa_level = isa_supported(); }

int nn_isa(void) { return isa_level; }

int nn_isa_set(int level)
{
    const int best = isa_supported();
    isa_level = level < NN_ISA_BASE ? NN_ISA_BASE : level > best ? best : level;
    return isa_level;
}

const char *nn_isa_name(int level)
{
    return level == NN_ISA_AVX512 ? "avx512" : level == NN_ISA_AVX2 ? "avx2" : "baseline";
}

#ifdef NN_VEC_WIDE
#define DISPATCH(name, args)                                                                                   \
    (isa_level == NN_ISA_AVX512 ? name##_avx512 args : isa_level == NN_ISA_AVX2 ? name##_avx2 args : name##_base args)
#else
#define DISPATCH(name, args) name##_base args
#endif

int nn_isa_act_forward(float *y, const float *x, int64_t n, NnActSpec s)
{
    return DISPATCH(act_forward, (y, x, n, s));
}

int nn_isa_act_backward(float *dx, const float *dy, const float *x, int64_t n, NnActSpec s)
{
    return DISPATCH(act_backward, (dx, dy, x, n, s));
}

void nn_isa_rows_add_bias(float *y, const float *b, int64_t rows, int64_t n)
{
    DISPATCH(rows_add_bias, (y, b, rows, n));
}

void nn_isa_rows_sum(float *db, const float *dy, int64_t rows, int64_t n) { DISPATCH(rows_sum, (db, dy, rows, n)); }

void nn_isa_layernorm_forward(float *y, float *save_mean, float *save_invstd, const float *x, const float *w,
                              const float *b, int64_t rows, int64_t d, float eps)
{
    DISPATCH(layernorm_forward, (y, save_mean, save_invstd, x, w, b, rows, d, eps));
}

void nn_isa_layernorm_backward_dx(float *dx, const float *dy, const float *x, const float *w, const float *save_mean,
                                  const float *save_invstd, int64_t rows, int64_t d)
{
    DISPATCH(layernorm_backward_dx, (dx, dy, x, w, save_mean, save_invstd, rows, d));
}

void nn_isa_layernorm_backward_params(float *dw, float *db, const float *dy, const float *x, const float *save_mean,
                                      const float *save_invstd, int64_t rows, int64_t d)
{
    DISPATCH(layernorm_backward_params, (dw, db, dy, x, save_mean, save_invstd, rows, d));
}

void nn_isa_softmax_rows_forward(float *y, const float *x, int64_t rows, int64_t len)
{
    DISPATCH(softmax_rows_forward, (y, x, rows, len));
}

void nn_isa_softmax_rows_backward(float *dx, const float *dy, const float *y, int64_t rows, int64_t len)
{
    DISPATCH(softmax_rows_backward, (dx, dy, y, rows, len));
}

void nn_isa_sum_block_add(double *bins, int64_t len, double a, const float *x, const float *y, const double *extractor,
                          double top)
{
    DISPATCH(sum_block_add, (bins, len, a, x, y, extractor, top));
}

int nn_isa_dwconv_fits(const NnConvShape *shape)
{
    const NnConvShape full = nn_conv_shape_full(shape), *s = &full;
    return s->groups == s->cin && s->cout == s->cin && s->dil_h == 1 && s->dil_w == 1 && s->stride_h > 0 &&
           s->stride_w > 0 && s->kw <= NN_DW_MAX_K && s->kh * s->kw <= NN_DW_TAPS &&
           (int64_t)((s->ho - 1) * s->stride_h + s->kh) * ((s->wo - 1) * s->stride_w + s->kw) <= NN_DW_PAD;
}

int nn_isa_dwconv_blocked(const NnConvShape *shape)
{
    const NnConvShape s = nn_conv_shape_full(shape);
    int hp, wp;
    return nn_isa_dwconv_fits(&s) && dw_block_dims(&s, &hp, &wp);
}

void nn_isa_dwconv_forward(float *y, const float *x, const float *w, const float *b, const NnConvShape *s)
{
    const NnConvShape g = nn_conv_shape_full(s);
    DISPATCH(dwconv_forward, (y, x, w, b, &g));
}

void nn_isa_dwconv_backward_data(float *dx, const float *dy, const float *w, const NnConvShape *s)
{
    const NnConvShape g = nn_conv_shape_full(s);
    DISPATCH(dwconv_backward_data, (dx, dy, w, &g));
}

void nn_isa_dwconv_backward_weights(float *dw, float *db, const float *dy, const float *x, const NnConvShape *s)
{
    const NnConvShape g = nn_conv_shape_full(s);
    DISPATCH(dwconv_backward_weights, (dw, db, dy, x, &g));
}
