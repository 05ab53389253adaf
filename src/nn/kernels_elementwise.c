/* Standalone activations beyond ReLU, channel arithmetic (broadcast add and multiply, concat, slice, shuffle) and
 * pooling of any geometry: the layers of imported convolutional networks. Each kernel splits its loop over whole
 * planes or elements (NN_PARALLEL_FOR), every sum in one thread's order, so the bits never depend on the thread
 * count; the _ref versions are the naive loops the tests compare them with. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "kernels_math.h"

/* ============================== activations ============================== */

int nn_act_piecewise(NnAct act)
{
    return act == NN_ACT_RELU || act == NN_ACT_RELU6 || act == NN_ACT_LEAKY_RELU || act == NN_ACT_CLIP ||
           act == NN_ACT_HARDSIGMOID || act == NN_ACT_HARDSWISH;
}

/* the piece of x: 0 below, 1 the middle (the only one of a smooth function), 2 above; the boundaries are where
 * PyTorch's backward passes switch, so that gradients agree with it at the kinks too */
static inline uint8_t act_branch(float x, NnActSpec s)
{
    switch (s.act) {
    case NN_ACT_RELU: return x > 0.0f;
    case NN_ACT_RELU6: return x <= 0.0f ? 0 : x < 6.0f ? 1 : 2;
    case NN_ACT_LEAKY_RELU: return x > 0.0f;
    case NN_ACT_CLIP: return x < s.a ? 0 : x > s.b ? 2 : 1;
    case NN_ACT_HARDSIGMOID: {
        const float t = s.a * x + s.b;
        return t <= 0.0f ? 0 : t < 1.0f ? 1 : 2;
    }
    case NN_ACT_HARDSWISH: return x < -3.0f ? 0 : x <= 3.0f ? 1 : 2;
    default: return 1;
    }
}

static inline float act_value(float x, uint8_t br, NnActSpec s)
{
    switch (s.act) {
    case NN_ACT_RELU: return br ? x : 0.0f;
    case NN_ACT_RELU6: return br == 1 ? x : br ? 6.0f : 0.0f;
    case NN_ACT_LEAKY_RELU: return br ? x : s.a * x;
    case NN_ACT_CLIP: return br == 1 ? x : br ? s.b : s.a;
    case NN_ACT_SIGMOID: return sigmoidf(x);
    case NN_ACT_HARDSIGMOID: return br == 1 ? s.a * x + s.b : br ? 1.0f : 0.0f;
    case NN_ACT_HARDSWISH: return br == 1 ? x * (x + 3.0f) / 6.0f : br ? x : 0.0f;
    case NN_ACT_SILU: return x * sigmoidf(x);
    case NN_ACT_TANH: return tanhf(x);
    case NN_ACT_GELU: return gelu(x);
    case NN_ACT_GELU_TANH: return gelu_tanh(x);
    case NN_ACT_ERF: return ferf(x);
    case NN_ACT_SQRT: return sqrtf(x);
    case NN_ACT_EXP: return fexp(x);
    case NN_ACT_POW: return fpow(x, s.a);
    case NN_ACT_AFFINE: return s.a * x + s.b;
    default: return x;
    }
}

static inline float act_slope(float x, uint8_t br, NnActSpec s)
{
    switch (s.act) {
    case NN_ACT_RELU: return br ? 1.0f : 0.0f;
    case NN_ACT_RELU6: return br == 1 ? 1.0f : 0.0f;
    case NN_ACT_LEAKY_RELU: return br ? 1.0f : s.a;
    case NN_ACT_CLIP: return br == 1 ? 1.0f : 0.0f;
    case NN_ACT_SIGMOID: {
        const float y = sigmoidf(x);
        return y * (1.0f - y);
    }
    case NN_ACT_HARDSIGMOID: return br == 1 ? s.a : 0.0f;
    case NN_ACT_HARDSWISH: return br == 1 ? x / 3.0f + 0.5f : br ? 1.0f : 0.0f;
    case NN_ACT_SILU: {
        const float y = sigmoidf(x);
        return y * (1.0f + x * (1.0f - y));
    }
    case NN_ACT_TANH: {
        const float y = tanhf(x);
        return 1.0f - y * y;
    }
    case NN_ACT_GELU: return gelu_slope(x);
    case NN_ACT_GELU_TANH: return gelu_tanh_slope(x);
    case NN_ACT_ERF: return 2.0f * GELU_PDF * GELU_K * 2.0f * fexp(-x * x); /* 2 / sqrt(pi) e^-x^2 */
    case NN_ACT_SQRT: return 0.5f / sqrtf(x);
    case NN_ACT_EXP: return fexp(x);
    case NN_ACT_POW: return s.a * fpow(x, s.a - 1.0f);
    case NN_ACT_AFFINE: return s.a;
    default: return 1.0f;
    }
}

/* one copy of the loop per activation (a constant `act` inlined), so that the choice is outside the loop */
#define ACT_CASES(ACT_LOOP)                                                                                    \
    switch (spec.act) {                                                                                        \
    case NN_ACT_LEAKY_RELU: ACT_LOOP(NN_ACT_LEAKY_RELU); break;                                               \
    case NN_ACT_CLIP: ACT_LOOP(NN_ACT_CLIP); break;                                                           \
    case NN_ACT_SIGMOID: ACT_LOOP(NN_ACT_SIGMOID); break;                                                     \
    case NN_ACT_HARDSIGMOID: ACT_LOOP(NN_ACT_HARDSIGMOID); break;                                             \
    case NN_ACT_HARDSWISH: ACT_LOOP(NN_ACT_HARDSWISH); break;                                                 \
    case NN_ACT_SILU: ACT_LOOP(NN_ACT_SILU); break;                                                           \
    case NN_ACT_TANH: ACT_LOOP(NN_ACT_TANH); break;                                                           \
    case NN_ACT_GELU: ACT_LOOP(NN_ACT_GELU); break;                                                           \
    case NN_ACT_GELU_TANH: ACT_LOOP(NN_ACT_GELU_TANH); break;                                                 \
    case NN_ACT_ERF: ACT_LOOP(NN_ACT_ERF); break;                                                             \
    case NN_ACT_SQRT: ACT_LOOP(NN_ACT_SQRT); break;                                                           \
    case NN_ACT_EXP: ACT_LOOP(NN_ACT_EXP); break;                                                             \
    case NN_ACT_POW: ACT_LOOP(NN_ACT_POW); break;                                                             \
    case NN_ACT_AFFINE: ACT_LOOP(NN_ACT_AFFINE); break;                                                       \
    default: ACT_LOOP(spec.act); break;                                                                       \
    }

void nn_act_ex_forward(float *y, uint8_t *record, const float *x, int64_t n, NnActSpec spec, const uint8_t *replay)
{
    if (!record && !replay && nn_isa_act_forward(y, x, n, spec)) return;
#define FWD_LOOP(A)                                                                                            \
    do {                                                                                                       \
        const NnActSpec sp = {(A), spec.a, spec.b};                                                            \
        NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) {                                                   \
            const uint8_t br = replay ? replay[i] : act_branch(x[i], sp);                                      \
            if (record) record[i] = br;                                                                        \
            y[i] = act_value(x[i], br, sp);                                                                    \
        });                                                                                                    \
    } while (0)
    ACT_CASES(FWD_LOOP)
#undef FWD_LOOP
}

void nn_act_ex_backward(float *dx, const float *dy, const float *x, int64_t n, NnActSpec spec, const uint8_t *replay)
{
    if (!replay && nn_isa_act_backward(dx, dy, x, n, spec)) return;
#define BWD_LOOP(A)                                                                                            \
    do {                                                                                                       \
        const NnActSpec sp = {(A), spec.a, spec.b};                                                            \
        NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) {                                                   \
            const uint8_t br = replay ? replay[i] : act_branch(x[i], sp);                                      \
            dx[i] += dy[i] * act_slope(x[i], br, sp);                                                          \
        });                                                                                                    \
    } while (0)
    ACT_CASES(BWD_LOOP)
#undef BWD_LOOP
}

#define PI_D 3.14159265358979323846

/* the definitions written out, in double */
static double act_ref(double x, NnActSpec s, int slope)
{
    const double a = s.a, b = s.b, sg = 1.0 / (1.0 + exp(-x));
    switch (s.act) {
    case NN_ACT_RELU: return slope ? (x > 0) : (x > 0 ? x : 0);
    case NN_ACT_RELU6: return slope ? (x > 0 && x < 6) : fmin(fmax(x, 0), 6);
    case NN_ACT_LEAKY_RELU: return slope ? (x > 0 ? 1 : a) : (x > 0 ? x : a * x);
    case NN_ACT_CLIP: return slope ? (x >= a && x <= b) : fmin(fmax(x, a), b);
    case NN_ACT_SIGMOID: return slope ? sg * (1 - sg) : sg;
    case NN_ACT_HARDSIGMOID: return slope ? (a * x + b > 0 && a * x + b < 1 ? a : 0) : fmax(0, fmin(1, a * x + b));
    case NN_ACT_HARDSWISH: return slope ? (x < -3 ? 0 : x <= 3 ? x / 3 + 0.5 : 1) : x * fmin(fmax(x + 3, 0), 6) / 6;
    case NN_ACT_SILU: return slope ? sg * (1 + x * (1 - sg)) : x * sg;
    case NN_ACT_TANH: return slope ? 1 - tanh(x) * tanh(x) : tanh(x);
    case NN_ACT_GELU: {
        const double cdf = 0.5 * erfc(-x / sqrt(2.0));
        return slope ? cdf + x * exp(-0.5 * x * x) / sqrt(2 * PI_D) : x * cdf;
    }
    case NN_ACT_GELU_TANH: {
        const double c = sqrt(2 / PI_D), v = c * (x + 0.044715 * x * x * x), t = tanh(v);
        return slope ? 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x) : 0.5 * x * (1 + t);
    }
    case NN_ACT_ERF: return slope ? 2 / sqrt(PI_D) * exp(-x * x) : erf(x);
    case NN_ACT_SQRT: return slope ? 0.5 / sqrt(x) : sqrt(x);
    case NN_ACT_EXP: return exp(x);
    case NN_ACT_POW: return slope ? a * pow(x, a - 1) : pow(x, a);
    case NN_ACT_AFFINE: return slope ? a : a * x + b;
    default: return slope ? 1 : x;
    }
}

void nn_act_ex_forward_ref(float *y, const float *x, int64_t n, NnActSpec spec)
{
    for (int64_t i = 0; i < n; i++) y[i] = (float)act_ref(x[i], spec, 0);
}

void nn_act_ex_backward_ref(float *dx, const float *dy, const float *x, int64_t n, NnActSpec spec)
{
    for (int64_t i = 0; i < n; i++) dx[i] += (float)(dy[i] * act_ref(x[i], spec, 1));
}


/* ============================== channel arithmetic ============================== */

/* The broadcast kernels walk runs of hw vectors of L lanes: a channel's plane in NCHW (L = 1), a block of L channels
 * in a blocked layout, whose C x 1 x 1 operand is the same floats in either layout (L divides C). Sums over a run
 * go in its order, lane by lane. */
void nn_add_bcast_forward(float *y, const float *a, const float *b, int batch, int c, int64_t hw, int block)
{
    const int L = block ? block : 1;
    const int64_t runs = (int64_t)batch * c / L, len = hw * L;
    NN_PARALLEL_FOR(runs * len, for (int64_t r = 0; r < runs; r++) {
        const float *bv = b + r * L;
        for (int64_t i = 0; i < hw; i++)
            for (int v = 0; v < L; v++) y[r * len + i * L + v] = a[r * len + i * L + v] + bv[v];
    });
}

void nn_add_bcast_backward(float *da, float *db, const float *dy, int batch, int c, int64_t hw, int block)
{
    const int L = block ? block : 1;
    const int64_t runs = (int64_t)batch * c / L, len = hw * L;
    NN_PARALLEL_FOR(runs * len, for (int64_t r = 0; r < runs; r++) {
        const float *d = dy + r * len;
        float s[NN_MAX_BLOCK] = {0};
        for (int64_t i = 0; i < hw; i++)
            for (int v = 0; v < L; v++) s[v] += d[i * L + v];
        for (int v = 0; db && v < L; v++) db[r * L + v] += s[v];
        if (da)
            for (int64_t i = 0; i < len; i++) da[r * len + i] += d[i];
    });
}

void nn_mul_forward(float *y, const float *a, const float *b, int batch, int c, int64_t hw, int64_t bhw, int block)
{
    if (bhw == hw) { /* element-wise: any layout */
        const int64_t n = (int64_t)batch * c * hw;
        NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];);
        return;
    }
    const int L = block ? block : 1;
    const int64_t runs = (int64_t)batch * c / L, len = hw * L;
    NN_PARALLEL_FOR(runs * len, for (int64_t r = 0; r < runs; r++) {
        const float *bv = b + r * L;
        for (int64_t i = 0; i < hw; i++)
            for (int v = 0; v < L; v++) y[r * len + i * L + v] = a[r * len + i * L + v] * bv[v];
    });
}

void nn_mul_backward(float *da, float *db, const float *dy, const float *a, const float *b, int batch, int c,
                     int64_t hw, int64_t bhw, int block)
{
    if (bhw == hw) {
        const int64_t n = (int64_t)batch * c * hw;
        NN_PARALLEL_FOR(n, for (int64_t i = 0; i < n; i++) {
            if (da) da[i] += dy[i] * b[i];
            if (db) db[i] += dy[i] * a[i];
        });
        return;
    }
    const int L = block ? block : 1;
    const int64_t runs = (int64_t)batch * c / L, len = hw * L;
    NN_PARALLEL_FOR(runs * len, for (int64_t r = 0; r < runs; r++) {
        const float *bv = b + r * L, *d = dy + r * len, *ar = a + r * len;
        float s[NN_MAX_BLOCK] = {0};
        for (int64_t i = 0; i < hw; i++)
            for (int v = 0; v < L; v++) s[v] += d[i * L + v] * ar[i * L + v];
        for (int v = 0; db && v < L; v++) db[r * L + v] += s[v];
        if (da)
            for (int64_t i = 0; i < hw; i++)
                for (int v = 0; v < L; v++) da[r * len + i * L + v] += d[i * L + v] * bv[v];
    });
}

void nn_mul_forward_ref(float *y, const float *a, const float *b, int batch, int c, int64_t hw, int64_t bhw)
{
    for (int64_t p = 0; p < (int64_t)batch * c; p++)
        for (int64_t i = 0; i < hw; i++) y[p * hw + i] = a[p * hw + i] * b[p * bhw + (bhw == hw ? i : 0)];
}

void nn_mul_backward_ref(float *da, float *db, const float *dy, const float *a, const float *b, int batch, int c,
                         int64_t hw, int64_t bhw)
{
    for (int64_t p = 0; p < (int64_t)batch * c; p++) {
        double s = 0.0;
        for (int64_t i = 0; i < hw; i++) {
            const int64_t bi = p * bhw + (bhw == hw ? i : 0);
            if (da) da[p * hw + i] += dy[p * hw + i] * b[bi];
            if (db && bhw == hw) db[bi] += dy[p * hw + i] * a[p * hw + i];
            s += (double)dy[p * hw + i] * a[p * hw + i];
        }
        if (db && bhw != hw) db[p] += (float)s;
    }
}

void nn_channels_copy(float *y, int y_c, int y_c0, const float *x, int x_c, int x_c0, int c, int batch, int64_t hw,
                      int add)
{
    const int64_t run = (int64_t)c * hw;
    NN_PARALLEL_FOR((int64_t)batch * run, for (int n = 0; n < batch; n++) {
        float *yn = y + ((int64_t)n * y_c + y_c0) * hw;
        const float *xn = x + ((int64_t)n * x_c + x_c0) * hw;
        if (add)
            for (int64_t i = 0; i < run; i++) yn[i] += xn[i];
        else
            memcpy(yn, xn, sizeof(float) * (size_t)run);
    });
}

void nn_shuffle_forward(float *y, const float *x, int batch, int c, int groups, int64_t hw)
{
    const int per = c / groups;
    NN_PARALLEL_FOR((int64_t)batch * c * hw, for (int n = 0; n < batch; n++)
        for (int g = 0; g < groups; g++)
            for (int i = 0; i < per; i++)
                memcpy(y + ((int64_t)n * c + (int64_t)i * groups + g) * hw, x + ((int64_t)n * c + (int64_t)g * per + i) * hw,
                       sizeof(float) * (size_t)hw););
}

void nn_shuffle_backward(float *dx, const float *dy, int batch, int c, int groups, int64_t hw)
{
    const int per = c / groups;
    NN_PARALLEL_FOR((int64_t)batch * c * hw, for (int n = 0; n < batch; n++)
        for (int g = 0; g < groups; g++)
            for (int i = 0; i < per; i++) {
                float *d = dx + ((int64_t)n * c + (int64_t)g * per + i) * hw;
                const float *s = dy + ((int64_t)n * c + (int64_t)i * groups + g) * hw;
                for (int64_t j = 0; j < hw; j++) d[j] += s[j];
            });
}

/* ============================== pooling of any geometry ============================== */

int nn_pool_out_size(int in, int k, int stride, int pad_lo, int pad_hi, int ceil_mode)
{
    const int span = in + pad_lo + pad_hi - k;
    if (span < 0 || stride < 1) return 0;
    int out = (ceil_mode ? span + stride - 1 : span) / stride + 1;
    if (ceil_mode && (int64_t)(out - 1) * stride >= (int64_t)in + pad_lo) out--; /* the last window starts inside */
    return out;
}

/* window rows [*lo, *hi) of output row o in the input, and the extent *span it covers up to the far pad */
static inline void pool_window(int o, int stride, int pad_lo, int k, int in, int pad_hi, int *lo, int *hi, int *span)
{
    int start = o * stride - pad_lo, end = start + k;
    if (end > in + pad_hi) end = in + pad_hi;
    *span = end - start;
    *lo = start < 0 ? 0 : start;
    *hi = end > in ? in : end;
}

static void maxpool_ex_plane(float *yp, int32_t *ap, const float *xp, const NnPoolShape *s)
{
    for (int oh = 0; oh < s->ho; oh++) {
        int h0, h1, sh, w0, w1, sw;
        pool_window(oh, s->stride_h, s->pad_t, s->kh, s->h, s->pad_b, &h0, &h1, &sh);
        for (int ow = 0; ow < s->wo; ow++) {
            pool_window(ow, s->stride_w, s->pad_l, s->kw, s->w, s->pad_r, &w0, &w1, &sw);
            float best = -FLT_MAX;
            int32_t best_i = -1;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++) {
                    const float v = xp[ih * s->w + iw];
                    if (v > best || best_i < 0) { /* the first maximum wins ties */
                        best = v;
                        best_i = ih * s->w + iw;
                    }
                }
            yp[oh * s->wo + ow] = best;
            ap[oh * s->wo + ow] = best_i;
        }
    }
}

void nn_maxpool_ex_forward(float *y, int32_t *argmax, const float *x, const NnPoolShape *s)
{
    const int64_t in = (int64_t)s->h * s->w, out = (int64_t)s->ho * s->wo;
    NN_PARALLEL_FOR(s->planes * in, for (int p = 0; p < s->planes; p++)
                                        maxpool_ex_plane(y + p * out, argmax + p * out, x + p * in, s););
}

void nn_maxpool_ex_forward_ref(float *y, int32_t *argmax, const float *x, const NnPoolShape *s)
{
    for (int p = 0; p < s->planes; p++)
        for (int oh = 0; oh < s->ho; oh++)
            for (int ow = 0; ow < s->wo; ow++) {
                double best = -INFINITY;
                int32_t at = -1;
                for (int i = 0; i < s->kh; i++)
                    for (int j = 0; j < s->kw; j++) {
                        const int ih = oh * s->stride_h - s->pad_t + i, iw = ow * s->stride_w - s->pad_l + j;
                        if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) continue;
                        const float v = x[((int64_t)p * s->h + ih) * s->w + iw];
                        if (v > best) {
                            best = v;
                            at = ih * s->w + iw;
                        }
                    }
                y[((int64_t)p * s->ho + oh) * s->wo + ow] = (float)best;
                argmax[((int64_t)p * s->ho + oh) * s->wo + ow] = at;
            }
}

static inline float avg_divisor(const NnPoolShape *s, int h0, int h1, int sh, int w0, int w1, int sw)
{
    return s->count_include_pad ? (float)(sh * sw) : (float)((h1 - h0) * (w1 - w0));
}

static void avgpool_ex_plane(float *yp, const float *xp, const NnPoolShape *s)
{
    for (int oh = 0; oh < s->ho; oh++) {
        int h0, h1, sh, w0, w1, sw;
        pool_window(oh, s->stride_h, s->pad_t, s->kh, s->h, s->pad_b, &h0, &h1, &sh);
        for (int ow = 0; ow < s->wo; ow++) {
            pool_window(ow, s->stride_w, s->pad_l, s->kw, s->w, s->pad_r, &w0, &w1, &sw);
            float sum = 0.0f;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++) sum += xp[ih * s->w + iw];
            yp[oh * s->wo + ow] = sum / avg_divisor(s, h0, h1, sh, w0, w1, sw);
        }
    }
}

static void avgpool_ex_plane_backward(float *dxp, const float *dyp, const NnPoolShape *s)
{
    for (int oh = 0; oh < s->ho; oh++) {
        int h0, h1, sh, w0, w1, sw;
        pool_window(oh, s->stride_h, s->pad_t, s->kh, s->h, s->pad_b, &h0, &h1, &sh);
        for (int ow = 0; ow < s->wo; ow++) {
            pool_window(ow, s->stride_w, s->pad_l, s->kw, s->w, s->pad_r, &w0, &w1, &sw);
            const float g = dyp[oh * s->wo + ow] / avg_divisor(s, h0, h1, sh, w0, w1, sw);
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++) dxp[ih * s->w + iw] += g;
        }
    }
}

void nn_avgpool_ex_forward(float *y, const float *x, const NnPoolShape *s)
{
    const int64_t in = (int64_t)s->h * s->w, out = (int64_t)s->ho * s->wo;
    NN_PARALLEL_FOR(s->planes * in, for (int p = 0; p < s->planes; p++) avgpool_ex_plane(y + p * out, x + p * in, s););
}

void nn_avgpool_ex_backward(float *dx, const float *dy, const NnPoolShape *s)
{
    const int64_t in = (int64_t)s->h * s->w, out = (int64_t)s->ho * s->wo;
    NN_PARALLEL_FOR(s->planes * in, for (int p = 0; p < s->planes; p++)
                                        avgpool_ex_plane_backward(dx + p * in, dy + p * out, s););
}

/* the divisor from PyTorch's definition: the window clipped to the padded input (count_include_pad), or the
 * input values it holds */
static double avg_ref_divisor(const NnPoolShape *s, int oh, int ow)
{
    int n_in = 0, n_pad = 0;
    for (int i = 0; i < s->kh; i++)
        for (int j = 0; j < s->kw; j++) {
            const int ih = oh * s->stride_h - s->pad_t + i, iw = ow * s->stride_w - s->pad_l + j;
            n_in += ih >= 0 && ih < s->h && iw >= 0 && iw < s->w;
            n_pad += ih < s->h + s->pad_b && iw < s->w + s->pad_r;
        }
    return s->count_include_pad ? n_pad : n_in;
}

void nn_avgpool_ex_forward_ref(float *y, const float *x, const NnPoolShape *s)
{
    for (int p = 0; p < s->planes; p++)
        for (int oh = 0; oh < s->ho; oh++)
            for (int ow = 0; ow < s->wo; ow++) {
                double sum = 0.0;
                for (int i = 0; i < s->kh; i++)
                    for (int j = 0; j < s->kw; j++) {
                        const int ih = oh * s->stride_h - s->pad_t + i, iw = ow * s->stride_w - s->pad_l + j;
                        if (ih >= 0 && ih < s->h && iw >= 0 && iw < s->w) sum += x[((int64_t)p * s->h + ih) * s->w + iw];
                    }
                y[((int64_t)p * s->ho + oh) * s->wo + ow] = (float)(sum / avg_ref_divisor(s, oh, ow));
            }
}

void nn_avgpool_ex_backward_ref(float *dx, const float *dy, const NnPoolShape *s)
{
    for (int p = 0; p < s->planes; p++)
        for (int oh = 0; oh < s->ho; oh++)
            for (int ow = 0; ow < s->wo; ow++) {
                const double g = dy[((int64_t)p * s->ho + oh) * s->wo + ow] / avg_ref_divisor(s, oh, ow);
                for (int i = 0; i < s->kh; i++)
                    for (int j = 0; j < s->kw; j++) {
                        const int ih = oh * s->stride_h - s->pad_t + i, iw = ow * s->stride_w - s->pad_l + j;
                        if (ih >= 0 && ih < s->h && iw >= 0 && iw < s->w)
                            dx[((int64_t)p * s->h + ih) * s->w + iw] += (float)g;
                    }
            }
}
