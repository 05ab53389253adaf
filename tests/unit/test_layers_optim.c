/* The optimisers (src/nn): SGD (momentum, Nesterov, weight decay), Adam and AdamW against PyTorch's update
 * rules in double precision, their reset, gradient-norm clipping, the whole-vector passes of a SAM step, and the
 * exact sums of the server's aggregation (nn_sum_*: order-independent, exact against integer arithmetic, NaN
 * beyond their window).
 * Run: make build/tests/test_layers_optim && build/tests/test_layers_optim [test_name] */
#include "test.h"

#include "layer_check.h"

/* ============================== optimisers ============================== */

static const float opt_p0[3] = {1.0f, -2.0f, 0.5f};
static const float opt_g[3][3] = {{0.1f, -0.2f, 0.3f}, {-0.4f, 0.5f, 0.05f}, {0.2f, 0.2f, -0.6f}};

static void test_sgd_pytorch(void)
{
    const struct {
        float mom, wd;
        int nesterov;
        const char *name;
    } cfg[] = {{0.0f, 0.0f, 0, "plain"},          {0.9f, 0.0f, 0, "momentum"},     {0.9f, 0.0f, 1, "nesterov"},
               {0.0f, 0.1f, 0, "weight decay"},   {0.9f, 0.1f, 0, "momentum+wd"}, {0.9f, 0.1f, 1, "nesterov+wd"}};
    const float lr = 0.1f;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        NnSgd opt;
        CHECK_OK(nn_sgd_init(&opt, 3, cfg[c].mom, cfg[c].wd, cfg[c].nesterov));
        CHECK((opt.buf != NULL) == (cfg[c].mom > 0.0f));
        float p[3];
        double ref[3], buf[3] = {0, 0, 0};
        const double mom = cfg[c].mom, wd = cfg[c].wd;
        for (int i = 0; i < 3; i++) ref[i] = p[i] = opt_p0[i];
        for (int t = 0; t < 3; t++) {
            nn_sgd_step(&opt, p, opt_g[t], lr);
            /* torch.optim.SGD: d = g + wd p; buf = d on the first step, else mom buf + (1 - dampening) d;
             * d = nesterov ? d + mom buf : buf; p -= lr d */
            for (int i = 0; i < 3; i++) {
                double d = opt_g[t][i] + wd * ref[i];
                if (mom > 0.0) {
                    buf[i] = t == 0 ? d : mom * buf[i] + d;
                    d = cfg[c].nesterov ? d + mom * buf[i] : buf[i];
                    if (t == 0) CHECK_NEAR(opt.buf[i], opt_g[0][i] + wd * opt_p0[i], 1e-7); /* buffer = gradient */
                }
                ref[i] -= (double)lr * d;
                CHECK_MSG(fabs(p[i] - ref[i]) <= 1e-6, "SGD %s step %d [%d]: %.9g vs %.9g", cfg[c].name, t + 1, i,
                          (double)p[i], ref[i]);
            }
        }
        /* reset: the next step is a first step again */
        nn_sgd_reset(&opt);
        float p2[3] = {opt_p0[0], opt_p0[1], opt_p0[2]}, p3[3] = {opt_p0[0], opt_p0[1], opt_p0[2]};
        nn_sgd_step(&opt, p2, opt_g[0], lr);
        NnSgd fresh;
        CHECK_OK(nn_sgd_init(&fresh, 3, cfg[c].mom, cfg[c].wd, cfg[c].nesterov));
        nn_sgd_step(&fresh, p3, opt_g[0], lr);
        CHECK(memcmp(p2, p3, sizeof p2) == 0);
        nn_sgd_free(&fresh);
        nn_sgd_free(&opt);
    }
    /* by hand: p = 1, g = 1 every step, lr 0.1, momentum 0.9
     * heavy ball: buf 1, 1.9, 2.71 -> p 0.9, 0.71, 0.439
     * nesterov:   d = 1 + 0.9 buf = 1.9, 2.71, 3.439 -> p 0.81, 0.539, 0.1951 */
    const double want[2][3] = {{0.9, 0.71, 0.439}, {0.81, 0.539, 0.1951}};
    for (int nest = 0; nest < 2; nest++) {
        NnSgd opt;
        CHECK_OK(nn_sgd_init(&opt, 1, 0.9f, 0.0f, nest));
        float p = 1.0f, g = 1.0f;
        for (int t = 0; t < 3; t++) {
            nn_sgd_step(&opt, &p, &g, 0.1f);
            CHECK_NEAR(p, want[nest][t], 1e-6);
        }
        nn_sgd_free(&opt);
    }
    /* bad settings */
    NnSgd bad;
    CHECK(nn_sgd_init(&bad, 3, 0.0f, 0.0f, 1) != FH_OK);
    nn_sgd_free(&bad);
    CHECK(nn_sgd_init(&bad, 3, -0.5f, 0.0f, 0) != FH_OK);
    nn_sgd_free(&bad);
}

static void adam_reference(double *p, const float *const *grads, int steps, double lr, float b1f, float b2f,
                           float epsf, float wdf, int decoupled)
{
    double b1 = b1f, b2 = b2f, eps = epsf, wd = wdf, m[3] = {0, 0, 0}, v[3] = {0, 0, 0};
    for (int t = 1; t <= steps; t++) {
        double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
        for (int i = 0; i < 3; i++) {
            double g = grads[t - 1][i];
            if (decoupled) p[i] *= 1.0 - lr * wd; /* AdamW: decay the weights directly */
            else g += wd * p[i];                 /* Adam: L2 through the gradient */
            m[i] = b1 * m[i] + (1.0 - b1) * g;
            v[i] = b2 * v[i] + (1.0 - b2) * g * g;
            p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
        }
    }
}

static void test_adam_adamw(void)
{
    const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    const float *grads[3] = {opt_g[0], opt_g[1], opt_g[2]};
    const float wds[2] = {0.0f, 0.1f};
    float final[2][2][3]; /* [wd][decoupled] */
    for (int wi = 0; wi < 2; wi++)
        for (int dec = 0; dec < 2; dec++) {
            NnAdam opt;
            CHECK_OK(nn_adam_init(&opt, 3, b1, b2, eps, wds[wi], dec));
            float p[3] = {opt_p0[0], opt_p0[1], opt_p0[2]};
            for (int t = 1; t <= 3; t++) {
                nn_adam_step(&opt, p, opt_g[t - 1], lr);
                double ref[3] = {opt_p0[0], opt_p0[1], opt_p0[2]};
                adam_reference(ref, grads, t, lr, b1, b2, eps, wds[wi], dec);
                for (int i = 0; i < 3; i++)
                    CHECK_MSG(fabs(p[i] - ref[i]) <= 2e-6, "%s wd %g step %d [%d]: %.9g vs %.9g",
                              dec ? "AdamW" : "Adam", (double)wds[wi], t, i, (double)p[i], ref[i]);
                if (t == 1 && wi == 0) /* bias-corrected first step: lr * sign(g) */
                    for (int i = 0; i < 3; i++)
                        CHECK_NEAR(p[i], opt_p0[i] - lr * (opt_g[0][i] > 0 ? 1.0 : -1.0), 1e-6);
            }
            memcpy(final[wi][dec], p, sizeof p);
            /* reset starts over */
            nn_adam_reset(&opt);
            float q[3] = {opt_p0[0], opt_p0[1], opt_p0[2]};
            nn_adam_step(&opt, q, opt_g[0], lr);
            double ref1[3] = {opt_p0[0], opt_p0[1], opt_p0[2]};
            adam_reference(ref1, grads, 1, lr, b1, b2, eps, wds[wi], dec);
            for (int i = 0; i < 3; i++) CHECK_NEAR(q[i], ref1[i], 2e-6);
            nn_adam_free(&opt);
        }
    /* no weight decay: the two agree exactly; with it they differ */
    CHECK(memcmp(final[0][0], final[0][1], sizeof final[0][0]) == 0);
    CHECK(max_diff(final[1][0], final[1][1], 3) > 1e-5);
    NnAdam bad;
    CHECK(nn_adam_init(&bad, 3, 1.0f, 0.999f, 1e-8f, 0.0f, 0) != FH_OK);
    nn_adam_free(&bad);
}

static void test_clip_grad_norm(void)
{
    float g[3] = {3.0f, 4.0f, 0.0f};
    float n = nn_clip_grad_norm(g, 3, 1.0f);
    CHECK_NEAR(n, 5.0, 1e-6);
    CHECK_NEAR(sqrt((double)g[0] * g[0] + (double)g[1] * g[1] + (double)g[2] * g[2]), 1.0, 1e-5);
    CHECK_NEAR(g[0], 0.6, 1e-5);
    CHECK_NEAR(g[1], 0.8, 1e-5);
    CHECK(g[2] == 0.0f);
    /* below the limit: returned norm, no change */
    float h[2] = {0.3f, 0.4f};
    n = nn_clip_grad_norm(h, 2, 1.0f);
    CHECK_NEAR(n, 0.5, 1e-7);
    CHECK(h[0] == 0.3f && h[1] == 0.4f);
    /* a long vector against a double norm */
    enum { N = 10000 };
    static float v[N], v0[N];
    FhRng rng = rng_for("clip", 0);
    fill_normal(&rng, v, N, 2.0);
    memcpy(v0, v, sizeof v);
    double s = 0.0;
    for (int i = 0; i < N; i++) s += (double)v[i] * v[i];
    double norm = sqrt(s);
    n = nn_clip_grad_norm(v, N, 7.5f);
    CHECK_NEAR(n, norm, 1e-5 * norm);
    s = 0.0;
    for (int i = 0; i < N; i++) s += (double)v[i] * v[i];
    CHECK_NEAR(sqrt(s), 7.5, 7.5e-5);
    for (int i = 0; i < N; i++) CHECK_NEAR(v[i], v0[i] * (7.5 / norm), 1e-5);
}

/* copy, fill and x + a y (SAM's ascent) split over threads for long vectors: the same bits as one thread,
 * and a copy between overlapping ranges keeps memmove's meaning */
static void test_vector_passes(void)
{
    enum { N = 3 * 32768 + 1234 };
    static float w[N], g[N], w1[N], s1[N], w2[N], s2[N], z[N];
    FhRng rng = rng_for("passes", 0);
    fill_normal(&rng, w, N, 1.0);
    fill_normal(&rng, g, N, 0.1);
    const float scale = 0.37f;
    for (int threads = 1; threads <= 2; threads++) {
        nn_set_threads(threads);
        float *wt = threads == 1 ? w1 : w2, *st = threads == 1 ? s1 : s2;
        nn_vec_copy(wt, w, N);
        CHECK(memcmp(wt, w, sizeof w) == 0);
        nn_vec_add_scaled(st, wt, scale, g, N);
        CHECK(memcmp(wt, w, sizeof w) == 0);
        int near = 1;
        for (int i = 0; i < N; i++) near &= fabs((double)st[i] - ((double)w[i] + scale * (double)g[i])) <= 1e-6 * (fabs(w[i]) + 1);
        CHECK_MSG(near, "%d threads: out is not x + a y", threads);
        for (int i = 0; i < N; i++) z[i] = 1.0f;
        nn_vec_zero(z, N);
        int zero = 1;
        for (int i = 0; i < N; i++) zero &= z[i] == 0.0f;
        CHECK_MSG(zero, "%d threads: nn_vec_zero left a value", threads);
        /* overlapping: shift by one to the right, as memmove would */
        nn_vec_copy(z, w, N);
        nn_vec_copy(z + 1, z, N - 1);
        CHECK(z[0] == w[0] && memcmp(z + 1, w, sizeof(float) * (N - 1)) == 0);
    }
    nn_set_threads(1);
    CHECK(memcmp(s1, s2, sizeof s1) == 0);
}

/* ============================== exact sums (nn_sum_*) ============================== */

enum { SUM_N = 700, SUM_TERMS = 23 };

/* terms of every size, some cancelling: weights a_i, vectors x_i */
static void sum_terms(double *a, float *x)
{
    FhRng rng = rng_for("exact sums", 0);
    for (int i = 0; i < SUM_TERMS; i++) {
        a[i] = (0.5 + fh_rng_uniform(&rng)) / SUM_TERMS;
        const double scale = ldexp(1.0, (int)(fh_rng_u32(&rng) % 60) - 40);
        fill_normal(&rng, x + (size_t)i * SUM_N, SUM_N, scale);
    }
    for (int j = 0; j < SUM_N; j += 7) { /* a large term and its negation around small ones */
        x[j] = 3.0e6f;
        x[(size_t)(SUM_TERMS - 1) * SUM_N + j] = -3.0e6f;
        a[SUM_TERMS - 1] = a[0];
    }
}

/* The same bits in any order of the terms and however they are split into partial sums that are then merged
 * (the ranks' partials reduced by MPI_SUM in whatever order), unlike a double accumulation. */
static void test_exact_sum_any_order(void)
{
    static double a[SUM_TERMS], whole[NN_SUM_BINS * SUM_N], part[3][NN_SUM_BINS * SUM_N];
    static float x[SUM_TERMS * SUM_N], forward[SUM_N], backward[SUM_N], merged[SUM_N];
    sum_terms(a, x);
    nn_sum_zero(whole, SUM_N);
    for (int i = 0; i < SUM_TERMS; i++) nn_sum_add(whole, a[i], x + (size_t)i * SUM_N, SUM_N);
    nn_sum_result(whole, SUM_N, forward);
    nn_sum_zero(whole, SUM_N);
    for (int i = SUM_TERMS - 1; i >= 0; i--) nn_sum_add(whole, a[i], x + (size_t)i * SUM_N, SUM_N);
    nn_sum_result(whole, SUM_N, backward);
    CHECK(memcmp(forward, backward, sizeof forward) == 0);
    for (int p = 0; p < 3; p++) nn_sum_zero(part[p], SUM_N);
    for (int i = 0; i < SUM_TERMS; i++) nn_sum_add(part[(i * 7) % 3], a[i], x + (size_t)i * SUM_N, SUM_N);
    nn_sum_merge(part[2], part[0], SUM_N);
    nn_sum_merge(part[2], part[1], SUM_N);
    nn_sum_result(part[2], SUM_N, merged);
    CHECK(memcmp(forward, merged, sizeof forward) == 0);
    /* close to the double sum, and exactly the small part that a double accumulation loses next to 2^30 */
    int near = 1;
    for (int j = 0; j < SUM_N; j++) {
        double d = 0.0, mag = 0.0;
        for (int i = 0; i < SUM_TERMS; i++) d += a[i] * x[(size_t)i * SUM_N + j], mag += fabs(a[i] * x[(size_t)i * SUM_N + j]);
        near &= fabs(forward[j] - d) <= 1e-7 * fabs(d) + 1e-15 * mag;
    }
    CHECK_MSG(near, "the exact sums are far from the double sums");
    const float big = 0x1p30f, small = 0x1p-40f, terms[3] = { big, small, -big };
    double acc[NN_SUM_BINS];
    float got;
    nn_sum_zero(acc, 1);
    for (int i = 0; i < 3; i++) nn_sum_add(acc, 1.0, &terms[i], 1);
    nn_sum_result(acc, 1, &got);
    CHECK_MSG(got == small && (double)big + (double)small - (double)big == 0.0, "2^30 + 2^-40 - 2^30 = %a", got);
}

/* Exact: the bins hold the sum of the terms as integers of 2^-96 (terms that are such integers and fit 128 bits),
 * checked against __int128 arithmetic. */
static void test_exact_sum_is_exact(void)
{
    enum { N = 64, TERMS = 40 };
    static float x[TERMS * N];
    static double acc[NN_SUM_BINS * N];
    double a[TERMS];
    __int128 want[N] = { 0 };
    FhRng rng = rng_for("exact sums, integers", 0);
    nn_sum_zero(acc, N);
    for (int i = 0; i < TERMS; i++) {
        a[i] = ldexp(1.0, (int)(fh_rng_u32(&rng) % 9) - 4); /* a power of two: a x is exact */
        for (int j = 0; j < N; j++) {
            const int e = (int)(fh_rng_u32(&rng) % 70) - 60; /* terms from 2^-64 to 2^14: multiples of 2^-96 */
            const int32_t mant = (int32_t)(fh_rng_u32(&rng) % (1u << 24)) * (fh_rng_u32(&rng) % 2 ? 1 : -1);
            x[(size_t)i * N + j] = (float)ldexp((double)mant, e - 24);
            want[j] += (__int128)mant * ((__int128)1 << (e - 24 + 96 + ilogb(a[i])));
        }
        nn_sum_add(acc, a[i], x + (size_t)i * N, N);
    }
    int exact = 1;
    for (int j = 0; j < N; j++) {
        __int128 got = 0;
        for (int k = 0; k < NN_SUM_BINS; k++) got += (__int128)ldexp(acc[k * N + j], 96);
        exact &= got == want[j];
    }
    CHECK_MSG(exact, "the bins do not hold the exact sum");
}

/* The window: terms of magnitude 2^32 or more, infinities and NaNs make the element's sum NaN; a term's part
 * below 2^-97 is dropped, 2^-96 and above kept. */
static void test_exact_sum_window(void)
{
    const float terms[6] = { 0x1p32f, INFINITY, NAN, 0x1.fffffep31f, 0x1p-96f, 0x1p-100f };
    double acc[NN_SUM_BINS];
    float got[6];
    for (int i = 0; i < 6; i++) {
        nn_sum_zero(acc, 1);
        nn_sum_add(acc, 1.0, &terms[i], 1);
        nn_sum_add(acc, 1.0, &(float){ 0.0f }, 1);
        nn_sum_result(acc, 1, &got[i]);
    }
    CHECK(isnan(got[0]) && isnan(got[1]) && isnan(got[2]));
    CHECK(got[3] == terms[3] && got[4] == terms[4] && got[5] == 0.0f);
    nn_sum_zero(acc, 1);
    nn_sum_add(acc, -2.0, &(float){ 0x1p31f }, 1); /* -2^32 */
    nn_sum_result(acc, 1, &got[0]);
    CHECK(isnan(got[0]));
}

/* ============================== main ============================== */

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    layer_tests_init();

    RUN(test_sgd_pytorch);
    RUN(test_adam_adamw);
    RUN(test_clip_grad_norm);
    RUN(test_vector_passes);
    RUN(test_exact_sum_any_order);
    RUN(test_exact_sum_is_exact);
    RUN(test_exact_sum_window);
    return test_summary();
}
