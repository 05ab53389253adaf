/* Unit tests for the quality-shift corruptions (src/data/corrupt.c, docs/methods/partitions.md B.7): Gaussian noise against the
 * formula applied to the same Philox normals, motion blur against kernels computed here at fixed angles
 * (through data_motion_blur_at_angle of src/data/corrupt_internal.h), severity tables, names, determinism.
 *
 * Run alone:  build/tests/test_corrupt [test_name]
 * or without make:
 *   mpicc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -fopenmp-simd -Wall -Wextra -Wno-unused-parameter -Iinclude \
 *     -Itests/unit tests/unit/test_corrupt.c src/data/corrupt.c src/core/error.c src/core/log.c \
 *     src/core/rng.c -lm -o /tmp/test_corrupt && /tmp/test_corrupt */
#include "test.h"

#include "fedhet/core.h"
#include "fedhet/data.h"
#include "fedhet/rng.h"

#include "../../src/data/corrupt_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

/* one-sided Gaussian of B.7 step 2, computed here independently: k_i = exp(-i^2/(2 s^2)) / sum */
static void ref_kernel(double *k, int width, double sigma)
{
    double sum = 0.0;
    for (int i = 0; i < width; i++) sum += k[i] = exp(-(double)(i * i) / (2.0 * sigma * sigma));
    for (int i = 0; i < width; i++) k[i] /= sum;
}

static uint8_t round_pixel(double v) { return (uint8_t)floor((v < 0 ? 0 : v > 255 ? 255 : v) + 0.5); }

/* Out-of-place reference of B.7 steps 1-5 for one plane, written straight from the formulas. */
static void ref_blur_plane(uint8_t *out, const uint8_t *in, int h, int w, double radius, double sigma,
                           double theta_deg)
{
    int width = 2 * (int)ceil(radius) + 1;
    double *k = malloc(sizeof *k * (size_t)width);
    ref_kernel(k, width, sigma);
    double t = theta_deg * 3.14159265358979323846 / 180.0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double acc = 0.0;
            for (int i = 0; i < width; i++) {
                int sx = x + (int)ceil(i * cos(t) - 0.5), sy = y + (int)ceil(i * sin(t) - 0.5);
                sx = sx < 0 ? 0 : sx >= w ? w - 1 : sx;
                sy = sy < 0 ? 0 : sy >= h ? h - 1 : sy;
                acc += k[i] * in[sy * w + sx];
            }
            out[y * w + x] = round_pixel(acc);
        }
    free(k);
}

static void fill_random(uint8_t *img, size_t n, uint32_t stream)
{
    FhRng r;
    fh_rng_init(&r, 99, FH_RNG_TEST, stream, 0, 0);
    for (size_t i = 0; i < n; i++) img[i] = (uint8_t)fh_rng_below(&r, 256);
}

static double mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += fabs((double)a[i] - (double)b[i]);
    return s / (double)n;
}

/* ---- Gaussian noise ---- */

/* A 1x3x4 image with sigma 0.3: every pixel checked against floor(255 * clip(x/255 + sigma n, 0, 1)) with
 * n drawn here from the documented stream; the fixture must contain a pixel clipped at 0, one clipped at
 * 255, and one whose 255 * t has a fractional part >= 0.5 (where rounding would give a different answer). */
static void test_gaussian_noise_formula(void)
{
    const uint8_t x[12] = { 0, 0, 0, 255, 255, 255, 128, 64, 200, 10, 250, 100 };
    uint8_t img[12];
    memcpy(img, x, sizeof img);
    DataCorruptionParams p = { .type = DATA_CORRUPT_GAUSSIAN_NOISE, .severity = 3, .sigma = 0.3 };
    const uint64_t seed = 2030;
    data_corrupt_image(img, 1, 3, 4, &p, seed, 0, 7);

    FhRng r;
    fh_rng_init(&r, seed, FH_RNG_PARTITION, 0xC0000001u, 0, 7);
    int clipped_low = 0, clipped_high = 0, truncation_matters = 0;
    for (int i = 0; i < 12; i++) {
        double t = x[i] / 255.0 + 0.3 * fh_rng_normal(&r);
        if (t <= 0.0) clipped_low++;
        if (t >= 1.0) clipped_high++;
        double c = t < 0 ? 0 : t > 1 ? 1 : t;
        double v = 255.0 * c;
        if (v - floor(v) >= 0.5) truncation_matters++;
        uint8_t expect = (uint8_t)floor(v);
        CHECK_MSG(img[i] == expect, "pixel %d: x %d, t %.6f -> got %d, expected %d", i, x[i], t, img[i], expect);
    }
    CHECK_MSG(clipped_low > 0 && clipped_high > 0 && truncation_matters > 0,
              "fixture does not cover clipping at 0 (%d), at 255 (%d) and truncation (%d): pick another seed",
              clipped_low, clipped_high, truncation_matters);
    /* the same numbers, verified once and frozen: a change of stream layout or formula shows up here */
    const uint8_t frozen[12] = { 0, 0, 54, 255, 237, 183, 168, 76, 255, 69, 247, 161 };
    CHECK(memcmp(img, frozen, sizeof frozen) == 0);
}

/* ---- motion blur at fixed angles ---- */

enum { BH = 5, BW = 5 };

static void blur_single_bright(uint8_t *img, int bx, int by, double radius, double sigma, double theta)
{
    memset(img, 0, BH * BW);
    img[by * BW + bx] = 255;
    data_motion_blur_at_angle(img, 1, BH, BW, radius, sigma, theta);
}

static void check_plane(const uint8_t *got, const double *expect_real, const char *what)
{
    for (int y = 0; y < BH; y++)
        for (int x = 0; x < BW; x++) {
            uint8_t e = round_pixel(expect_real[y * BW + x]);
            CHECK_MSG(got[y * BW + x] == e, "%s: (x %d, y %d) got %d, expected %d (%.4f)", what, x, y,
                      got[y * BW + x], e, expect_real[y * BW + x]);
        }
}

/* theta = 0, R = 2 (W = 5), sigma = 1: offsets ox_i = i, oy_i = 0, so out(x, 2) = sum_i k_i in(x + i, 2).
 * A bright pixel at (2, 2) is read by x = 2 (i = 0), x = 1 (i = 1), x = 0 (i = 2): the smear appears on its
 * LEFT in the output, because each output pixel averages the pixels to its right (out(x) uses in(x+ox)). */
static void test_motion_blur_theta0_hand(void)
{
    double k[5];
    ref_kernel(k, 5, 1.0);
    /* k is proportional to 1, e^-1/2, e^-2, e^-9/2, e^-8 */
    CHECK_NEAR(k[1] / k[0], exp(-0.5), 1e-15);
    CHECK_NEAR(k[4] / k[0], exp(-8.0), 1e-15);
    uint8_t img[BH * BW];
    blur_single_bright(img, 2, 2, 2.0, 1.0, 0.0);
    double e[BH * BW] = { 0 };
    e[2 * BW + 2] = 255 * k[0];
    e[2 * BW + 1] = 255 * k[1];
    e[2 * BW + 0] = 255 * k[2];
    check_plane(img, e, "theta 0");
    /* the numbers themselves: 255 k0 = 255 / (1 + e^-1/2 + e^-2 + e^-9/2 + e^-8) = 145.44 -> 145,
     * 255 k1 = 88.21 -> 88, 255 k2 = 19.68 -> 20 (rounded, not truncated), 255 k3, 255 k4 fall off */
    CHECK(img[2 * BW + 2] == 145);
    CHECK(img[2 * BW + 1] == 88);
    CHECK(img[2 * BW + 0] == 20);
    CHECK(img[2 * BW + 3] == 0 && img[2 * BW + 4] == 0 && img[1 * BW + 2] == 0);
}

/* theta = 0 with the bright pixel on the right edge: reads beyond column 4 clamp to it, so
 * out(4) = sum k = 255, out(3) = 1 - k0, out(2) = k2 + k3 + k4, out(1) = k3 + k4, out(0) = k4. */
static void test_motion_blur_edge_clamp(void)
{
    double k[5];
    ref_kernel(k, 5, 1.0);
    uint8_t img[BH * BW];
    blur_single_bright(img, 4, 2, 2.0, 1.0, 0.0);
    double e[BH * BW] = { 0 };
    e[2 * BW + 4] = 255 * (k[0] + k[1] + k[2] + k[3] + k[4]);
    e[2 * BW + 3] = 255 * (k[1] + k[2] + k[3] + k[4]);
    e[2 * BW + 2] = 255 * (k[2] + k[3] + k[4]);
    e[2 * BW + 1] = 255 * (k[3] + k[4]);
    e[2 * BW + 0] = 255 * k[4];
    check_plane(img, e, "theta 0, right edge");
    CHECK(img[2 * BW + 4] == 255);
    /* bottom edge at theta = 90: the trail points down, reads past row 4 clamp to row 4 */
    blur_single_bright(img, 1, 4, 2.0, 1.0, 90.0);
    memset(e, 0, sizeof e);
    e[4 * BW + 1] = 255.0;
    e[3 * BW + 1] = 255 * (k[1] + k[2] + k[3] + k[4]);
    e[2 * BW + 1] = 255 * (k[2] + k[3] + k[4]);
    e[1 * BW + 1] = 255 * (k[3] + k[4]);
    e[0 * BW + 1] = 255 * k[4];
    check_plane(img, e, "theta 90, bottom edge");
}

/* theta = +45: i cos - 0.5 = i sin - 0.5 = -0.5, 0.207, 0.914, 1.621, 2.328 -> offsets 0, 1, 1, 2, 3 on both
 * axes. A bright (2, 2) is read by (2, 2) with k0, (1, 1) with k1 + k2, (0, 0) with k3 ((-1, -1) is off the
 * image, so k4 lands nowhere). theta = -45: oy = 0, -1, -1, -2, -3, so the smear runs to (1, 3) and (0, 4);
 * this also exercises the bottom-up visiting order of the in-place loop. */
static void test_motion_blur_theta45_hand(void)
{
    double k[5];
    ref_kernel(k, 5, 1.0);
    uint8_t img[BH * BW];
    blur_single_bright(img, 2, 2, 2.0, 1.0, 45.0);
    double e[BH * BW] = { 0 };
    e[2 * BW + 2] = 255 * k[0];
    e[1 * BW + 1] = 255 * (k[1] + k[2]);
    e[0 * BW + 0] = 255 * k[3];
    check_plane(img, e, "theta 45");

    blur_single_bright(img, 2, 2, 2.0, 1.0, -45.0);
    memset(e, 0, sizeof e);
    e[2 * BW + 2] = 255 * k[0];
    e[3 * BW + 1] = 255 * (k[1] + k[2]);
    e[4 * BW + 0] = 255 * k[3];
    check_plane(img, e, "theta -45");
}

/* The in-place operator equals the out-of-place reference on random images, for angles in every
 * quadrant, several radii and channel counts. */
static void test_motion_blur_matches_reference(void)
{
    enum { C = 3, H = 9, W = 11 };
    const double angles[] = { -45.0, -30.0, -0.1, 0.0, 12.5, 44.9, 45.0, 90.0, 135.0, 180.0, 200.0, 270.0, 315.0 };
    const double radii[][2] = { { 1, 0.5 }, { 3, 1.5 }, { 6, 2 }, { 15, 8 } };
    uint8_t in[C * H * W], got[C * H * W], expect[C * H * W];
    fill_random(in, sizeof in, 1);
    for (size_t a = 0; a < sizeof angles / sizeof angles[0]; a++)
        for (size_t r = 0; r < sizeof radii / sizeof radii[0]; r++) {
            memcpy(got, in, sizeof in);
            data_motion_blur_at_angle(got, C, H, W, radii[r][0], radii[r][1], angles[a]);
            for (int ch = 0; ch < C; ch++)
                ref_blur_plane(expect + ch * H * W, in + ch * H * W, H, W, radii[r][0], radii[r][1], angles[a]);
            CHECK_MSG(memcmp(got, expect, sizeof got) == 0, "theta %g, R %g, sigma %g differs from the reference",
                      angles[a], radii[r][0], radii[r][1]);
        }
    /* a constant image stays constant (weights sum to 1) */
    memset(got, 77, sizeof got);
    data_motion_blur_at_angle(got, C, H, W, 9, 2.5, 17.0);
    int all = 1;
    for (size_t i = 0; i < sizeof got; i++) all &= got[i] == 77;
    CHECK(all);
}

/* data_corrupt_image's blur = the helper at theta = -45 + 90 u, u the first uniform of the blur stream */
static void test_motion_blur_angle_from_stream(void)
{
    enum { C = 3, H = 32, W = 32 };
    static uint8_t img[C * H * W], expect[C * H * W];
    DataCorruptionParams p;
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_MOTION_BLUR, 3, H, W));
    for (uint32_t index = 0; index < 20; index++) {
        fill_random(img, sizeof img, 100 + index);
        memcpy(expect, img, sizeof img);
        FhRng r;
        fh_rng_init(&r, 11, FH_RNG_PARTITION, 0xC0000002u, 1, index);
        double theta = -45.0 + 90.0 * fh_rng_uniform(&r);
        CHECK(theta >= -45.0 && theta < 45.0);
        data_motion_blur_at_angle(expect, C, H, W, 6.0, 2.0, theta);
        data_corrupt_image(img, C, H, W, &p, 11, 1, index);
        CHECK_MSG(memcmp(img, expect, sizeof img) == 0, "index %u", (unsigned)index);
    }
}

/* ---- tables, names, determinism ---- */

static void test_params_tables(void)
{
    DataCorruptionParams p;
    /* 28x28 (Fashion-MNIST) and 32x32 use CIFAR-10-C */
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_GAUSSIAN_NOISE, 3, 28, 28));
    CHECK(p.type == DATA_CORRUPT_GAUSSIAN_NOISE && p.severity == 3 && p.sigma == 0.08);
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_GAUSSIAN_NOISE, 5, 32, 32));
    CHECK(p.sigma == 0.10);
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_MOTION_BLUR, 3, 28, 28));
    CHECK(p.radius == 6 && p.blur_sigma == 2 && p.sigma == 0);
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_MOTION_BLUR, 5, 28, 28));
    CHECK(p.radius == 9 && p.blur_sigma == 2.5);
    /* 64x64 and 32x33 (the larger side decides) use Tiny-ImageNet-C */
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_GAUSSIAN_NOISE, 4, 64, 64));
    CHECK(p.sigma == 0.15);
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_GAUSSIAN_NOISE, 1, 32, 33));
    CHECK(p.sigma == 0.04);
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_MOTION_BLUR, 5, 64, 64));
    CHECK(p.radius == 12 && p.blur_sigma == 3);
    /* 224x224 uses ImageNet-C */
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_GAUSSIAN_NOISE, 3, 224, 224));
    CHECK(p.sigma == 0.18);
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_GAUSSIAN_NOISE, 5, 224, 224));
    CHECK(p.sigma == 0.38);
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_MOTION_BLUR, 1, 224, 224));
    CHECK(p.radius == 10 && p.blur_sigma == 3);
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_MOTION_BLUR, 4, 65, 10));
    CHECK(p.radius == 15 && p.blur_sigma == 12);
    /* none: no constants */
    CHECK_OK(data_corruption_params(&p, DATA_CORRUPT_NONE, 0, 28, 28));
    CHECK(p.type == DATA_CORRUPT_NONE && p.sigma == 0 && p.radius == 0);
}

static void test_params_reject_bad_severity(void)
{
    DataCorruptionParams p;
    CHECK(data_corruption_params(&p, DATA_CORRUPT_GAUSSIAN_NOISE, 0, 28, 28) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "severity 0") != NULL);
    CHECK(strstr(fh_error_message(), "1..5") != NULL);
    CHECK(data_corruption_params(&p, DATA_CORRUPT_MOTION_BLUR, 6, 224, 224) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "severity 6") != NULL);
    CHECK(strstr(fh_error_message(), "motion_blur") != NULL);
    CHECK(data_corruption_params(&p, DATA_CORRUPT_MOTION_BLUR, 3, 0, 28) == FH_ERR_USAGE);
    CHECK(data_corruption_params(&p, (DataCorruption)42, 3, 28, 28) == FH_ERR_USAGE);
}

static void test_names_round_trip(void)
{
    const DataCorruption all[] = { DATA_CORRUPT_NONE, DATA_CORRUPT_GAUSSIAN_NOISE, DATA_CORRUPT_MOTION_BLUR };
    for (int i = 0; i < 3; i++) {
        DataCorruption t = (DataCorruption)-1;
        CHECK_OK(data_corruption_from_name(&t, data_corruption_name(all[i])));
        CHECK(t == all[i]);
    }
    CHECK(strcmp(data_corruption_name(DATA_CORRUPT_GAUSSIAN_NOISE), "gaussian_noise") == 0);
    CHECK(strcmp(data_corruption_name(DATA_CORRUPT_MOTION_BLUR), "motion_blur") == 0);
    CHECK(strcmp(data_corruption_name(DATA_CORRUPT_NONE), "none") == 0);
    DataCorruption t;
    CHECK(data_corruption_from_name(&t, "gaussian") == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "'gaussian'") != NULL);
    CHECK(data_corruption_from_name(&t, NULL) == FH_ERR_USAGE);
}

static void test_deterministic_per_image(void)
{
    enum { N = 3 * 16 * 16 };
    uint8_t src[N], a[N], b[N];
    fill_random(src, N, 7);
    for (int type = 1; type <= 2; type++) {
        DataCorruptionParams p;
        CHECK_OK(data_corruption_params(&p, (DataCorruption)type, 3, 16, 16));
        memcpy(a, src, N);
        memcpy(b, src, N);
        data_corrupt_image(a, 3, 16, 16, &p, 42, 0, 5);
        data_corrupt_image(b, 3, 16, 16, &p, 42, 0, 5);
        CHECK(memcmp(a, b, N) == 0);
        CHECK(memcmp(a, src, N) != 0);
        memcpy(b, src, N);
        data_corrupt_image(b, 3, 16, 16, &p, 42, 0, 6); /* other index */
        CHECK_MSG(memcmp(a, b, N) != 0, "%s: index 5 and 6 agree", data_corruption_name(p.type));
        memcpy(b, src, N);
        data_corrupt_image(b, 3, 16, 16, &p, 42, 1, 5); /* test image instead of training image */
        CHECK_MSG(memcmp(a, b, N) != 0, "%s: group 0 and 1 agree", data_corruption_name(p.type));
        memcpy(b, src, N);
        data_corrupt_image(b, 3, 16, 16, &p, 43, 0, 5); /* other seed */
        CHECK_MSG(memcmp(a, b, N) != 0, "%s: seed 42 and 43 agree", data_corruption_name(p.type));
    }
    /* none leaves the image alone */
    DataCorruptionParams none;
    CHECK_OK(data_corruption_params(&none, DATA_CORRUPT_NONE, 3, 16, 16));
    memcpy(a, src, N);
    data_corrupt_image(a, 3, 16, 16, &none, 42, 0, 5);
    CHECK(memcmp(a, src, N) == 0);
}

/* Mean absolute change grows with severity: strictly for noise; for blur the CIFAR-10-C rows 3 -> 4 differ
 * only by a longer tail of weights below 1e-9 (R 6 -> 8 at sigma 2), so there it may only stay equal. */
static void test_severity_increases_change(void)
{
    enum { C = 3, H = 32, W = 32, N = C * H * W, IMAGES = 8 };
    static uint8_t src[IMAGES][N], out[N];
    for (int m = 0; m < IMAGES; m++) fill_random(src[m], N, 200 + (uint32_t)m);
    for (int type = 1; type <= 2; type++) {
        double change[6] = { 0 };
        for (int s = 1; s <= 5; s++) {
            DataCorruptionParams p;
            CHECK_OK(data_corruption_params(&p, (DataCorruption)type, s, H, W));
            for (int m = 0; m < IMAGES; m++) {
                memcpy(out, src[m], N);
                data_corrupt_image(out, C, H, W, &p, 3, 0, (uint32_t)m);
                change[s] += mean_abs_diff(out, src[m], N) / IMAGES;
            }
        }
        for (int s = 2; s <= 5; s++) {
            int strict = type == DATA_CORRUPT_GAUSSIAN_NOISE || s != 4;
            CHECK_MSG(strict ? change[s] > change[s - 1] : change[s] >= change[s - 1] - 1e-9,
                      "%s: severity %d changes %.4f, severity %d changes %.4f", type == 1 ? "noise" : "blur", s,
                      change[s], s - 1, change[s - 1]);
        }
    }
}

/* A grey-scale image is corrupted as one plane: bytes after h * w stay untouched. */
static void test_grey_scale_single_channel(void)
{
    enum { H = 28, W = 28, N = H * W };
    static uint8_t buf[N + 64];
    for (int type = 1; type <= 2; type++) {
        fill_random(buf, N, 9);
        memset(buf + N, 0xAB, 64);
        DataCorruptionParams p;
        CHECK_OK(data_corruption_params(&p, (DataCorruption)type, 5, H, W));
        data_corrupt_image(buf, 1, H, W, &p, 1, 0, 0);
        int guard = 1;
        for (int i = 0; i < 64; i++) guard &= buf[N + i] == 0xAB;
        CHECK(guard);
    }
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_gaussian_noise_formula);
    RUN(test_motion_blur_theta0_hand);
    RUN(test_motion_blur_edge_clamp);
    RUN(test_motion_blur_theta45_hand);
    RUN(test_motion_blur_matches_reference);
    RUN(test_motion_blur_angle_from_stream);
    RUN(test_params_tables);
    RUN(test_params_reject_bad_severity);
    RUN(test_names_round_trip);
    RUN(test_deterministic_per_image);
    RUN(test_severity_increases_change);
    RUN(test_grey_scale_single_channel);
    return test_summary();
}
