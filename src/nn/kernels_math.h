/* Scalar float functions of the activations, inline so that each loop that calls them vectorises at its own width
 * (kernels_isa.c compiles the loops for several instruction sets; these are the same operations in each). */
#ifndef FEDHET_NN_KERNELS_MATH_H
#define FEDHET_NN_KERNELS_MATH_H

#include <math.h>
#include <stdint.h>

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* exp without branches, so that loops over it vectorise (libm's expf does not): 2^k e^r with k = round(x log2 e),
 * e^r by Cephes' expf polynomial, within about 1 ulp. Below -80 it is 0, so that neither it nor the products that
 * follow (GELU's x phi(x), erfc's tail) are subnormal floats, which take a CPU a hundred times longer; above 88.7
 * it stays at 3.4e38. */
static inline float fexp(float x)
{
    const float live = x >= -80.0f ? 1.0f : 0.0f;
    x = x < -80.0f ? -80.0f : x > 88.7f ? 88.7f : x;
    const float k = floorf(x * 1.44269504088896341f + 0.5f);
    const float r = x - k * 0.693359375f + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3333452501e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float e = p * r * r + r + 1.0f;
    union {
        int32_t i;
        float f;
    } two_k;
    two_k.i = ((int32_t)k + 127) << 23;
    return e * two_k.f * live;
}

/* erfc(|x|) with a relative error below 1.2e-7 (Numerical Recipes' erfcc, a Chebyshev fit): accurate in the tails,
 * where 1 - erf would cancel, so that GELU keeps its relative precision for negative inputs */
static inline float ferfc_abs(float x)
{
    const float z = fabsf(x), t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    return t * fexp(-z * z - 1.26551223f + t * p);
}

/* 1 + erf(x): 2 - erfc(x) above 0, erfc(-x) below */
static inline float one_plus_erf(float x)
{
    const float e = ferfc_abs(x);
    return x >= 0.0f ? 2.0f - e : e;
}

/* erf: its Taylor series near 0 (where 1 - erfc loses the digits), else 1 - erfc(|x|) with x's sign */
static inline float ferf(float x)
{
    const float x2 = x * x;
    const float near0 = x * (1.12837917f + x2 * (-0.376126389f + x2 * (0.112837917f + x2 * (-0.0268661706f +
                                                                                         x2 * 0.00522397762f))));
    const float far = x >= 0.0f ? 1.0f - ferfc_abs(x) : ferfc_abs(x) - 1.0f;
    return x2 < 0.0625f ? near0 : far;
}

#define GELU_K 0.70710678118654752f    /* 1 / sqrt 2 */
#define GELU_PDF 0.39894228040143268f  /* 1 / sqrt(2 pi) */
#define GELU_TANH_C 0.79788456080286536f /* sqrt(2 / pi) */

static inline float gelu(float x) { return 0.5f * x * one_plus_erf(x * GELU_K); }
static inline float gelu_slope(float x) { return 0.5f * one_plus_erf(x * GELU_K) + x * GELU_PDF * fexp(-0.5f * x * x); }
/* x (1 + tanh v) / 2 = x sigmoid(2 v) */
static inline float gelu_tanh(float x)
{
    const float v = GELU_TANH_C * (x + 0.044715f * x * x * x);
    return x / (1.0f + fexp(-2.0f * v));
}
static inline float gelu_tanh_slope(float x)
{
    const float v = GELU_TANH_C * (x + 0.044715f * x * x * x), s = 1.0f / (1.0f + fexp(-2.0f * v));
    return s + x * s * (1.0f - s) * 2.0f * GELU_TANH_C * (1.0f + 3.0f * 0.044715f * x * x);
}
static inline float fpow(float x, float a) { return a == 2.0f ? x * x : a == 3.0f ? x * x * x : powf(x, a); }

#endif
