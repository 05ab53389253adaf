/* Quality-shift corruptions of docs/methods/partitions.md B.7 (seed 001, FFL4MIA): Gaussian noise and motion blur on uint8
 * images [c, h, w], with the severity constants of CIFAR-10-C, Tiny-ImageNet-C and ImageNet-C.
 *
 * Randomness: the draws of one image come from its own Philox stream
 *     fh_rng_init(&rng, seed, FH_RNG_PARTITION, tag, group, index)
 * with tag DATA_CORRUPT_TAG_NOISE (0xC0000001) or DATA_CORRUPT_TAG_BLUR (0xC0000002) from
 * corrupt_internal.h; group 0 = training images, 1 = test images; index = the image's row. The tag in the
 * first counter word keeps these streams apart from the partitioner's (same purpose, first counter word
 * below 0xC0000000), and a per-image stream makes an image's corruption independent of which rank
 * corrupts it and in what order. (data.h describes the counter as (group, index, 0); the tag in front is
 * the one addition.) */
#include "fedhet/data.h"
#include "fedhet/core.h"
#include "fedhet/rng.h"

#include "corrupt_internal.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define CORRUPT_PI 3.14159265358979323846

/* ---- names ------------------------------------------------------------------------------------------ */

static const struct {
    DataCorruption type;
    const char *name;
} corrupt_names[] = {
    { DATA_CORRUPT_NONE, "none" },
    { DATA_CORRUPT_GAUSSIAN_NOISE, "gaussian_noise" },
    { DATA_CORRUPT_MOTION_BLUR, "motion_blur" },
};
#define CORRUPT_N_NAMES ((int)(sizeof corrupt_names / sizeof corrupt_names[0]))

int data_corruption_from_name(DataCorruption *type, const char *name)
{
    *type = DATA_CORRUPT_NONE;
    if (!name) FH_FAIL(FH_ERR_USAGE, "corruption name is missing (expected gaussian_noise, motion_blur or none)");
    for (int i = 0; i < CORRUPT_N_NAMES; i++)
        if (strcmp(name, corrupt_names[i].name) == 0) {
            *type = corrupt_names[i].type;
            return FH_OK;
        }
    FH_FAIL(FH_ERR_USAGE, "unknown corruption '%s' (expected gaussian_noise, motion_blur or none)", name);
}

const char *data_corruption_name(DataCorruption type)
{
    for (int i = 0; i < CORRUPT_N_NAMES; i++)
        if (corrupt_names[i].type == type) return corrupt_names[i].name;
    return "unknown";
}

/* ---- severity tables (B.7) ---------------------------------------------------------------------------- */

/* Rows: 0 = CIFAR-10-C (max side <= 32), 1 = Tiny-ImageNet-C (<= 64), 2 = ImageNet-C (above). */
static const double corrupt_noise_sigma[3][5] = {
    { 0.04, 0.06, 0.08, 0.09, 0.10 },
    { 0.04, 0.08, 0.12, 0.15, 0.18 },
    { 0.08, 0.12, 0.18, 0.26, 0.38 },
};
static const double corrupt_blur_radius_sigma[3][5][2] = {
    { { 6, 1 }, { 6, 1.5 }, { 6, 2 }, { 8, 2 }, { 9, 2.5 } },
    { { 10, 1 }, { 10, 1.5 }, { 10, 2 }, { 10, 2.5 }, { 12, 3 } },
    { { 10, 3 }, { 15, 5 }, { 15, 8 }, { 15, 12 }, { 20, 15 } },
};

int data_corruption_params(DataCorruptionParams *p, DataCorruption type, int severity, int h, int w)
{
    memset(p, 0, sizeof *p);
    p->type = DATA_CORRUPT_NONE;
    if (type == DATA_CORRUPT_NONE) return FH_OK; /* nothing to look up: severity is ignored and left 0 */
    if (type != DATA_CORRUPT_GAUSSIAN_NOISE && type != DATA_CORRUPT_MOTION_BLUR)
        FH_FAIL(FH_ERR_USAGE, "unknown corruption type %d (expected gaussian_noise, motion_blur or none)",
                (int)type);
    if (severity < 1 || severity > 5)
        FH_FAIL(FH_ERR_USAGE, "%s severity %d is out of range (need 1..5)", data_corruption_name(type), severity);
    if (h < 1 || w < 1)
        FH_FAIL(FH_ERR_USAGE, "%s: image size %d x %d is not positive", data_corruption_name(type), h, w);
    int side = h > w ? h : w;
    int table = side <= 32 ? 0 : side <= 64 ? 1 : 2; /* B.7: constants by image size [recon for 28 px] */
    p->type = type;
    p->severity = severity;
    if (type == DATA_CORRUPT_GAUSSIAN_NOISE) {
        p->sigma = corrupt_noise_sigma[table][severity - 1];
    } else {
        p->radius = corrupt_blur_radius_sigma[table][severity - 1][0];
        p->blur_sigma = corrupt_blur_radius_sigma[table][severity - 1][1];
    }
    return FH_OK;
}

/* ---- Gaussian noise (B.7) -------------------------------------------------------------------------- */

/* y = floor(255 * clip(x/255 + n, 0, 1)), n ~ N(0, sigma^2) per stored value, drawn in storage order
 * (channel, row, column). The floor is NumPy's astype(uint8) truncation, kept on purpose (B.7). */
static void corrupt_gaussian_noise(uint8_t *image, size_t count, double sigma, FhRng *rng)
{
    for (size_t i = 0; i < count; i++) {
        double t = (double)image[i] / 255.0 + sigma * fh_rng_normal(rng);
        if (t < 0.0) t = 0.0;
        if (t > 1.0) t = 1.0;
        image[i] = (uint8_t)floor(255.0 * t);
    }
}

/* ---- motion blur (B.7, ImageMagick MotionBlurImage) ----------------------------------------------------- */

static int corrupt_clamp(int v, int hi) { return v < 0 ? 0 : v > hi ? hi : v; }

void data_motion_blur_at_angle(uint8_t *image, int c, int h, int w, double radius, double sigma, double theta_deg)
{
    if (!(radius > 0.0) || c < 1 || h < 1 || w < 1) return;
    if (radius > DATA_BLUR_MAX_RADIUS) radius = DATA_BLUR_MAX_RADIUS;

    /* B.7 step 1: kernel width W = 2 * ceil(R) + 1 */
    enum { MAX_WIDTH = 2 * DATA_BLUR_MAX_RADIUS + 1 };
    const int width = 2 * (int)ceil(radius) + 1;
    double kernel[MAX_WIDTH];
    int ox[MAX_WIDTH], oy[MAX_WIDTH];

    /* B.7 step 2: one-sided Gaussian k_i = exp(-i^2 / (2 sigma^2)), i = 0..W-1, normalised to sum 1 */
    double sum = 0.0;
    for (int i = 0; i < width; i++) {
        kernel[i] = sigma > 0.0 ? exp(-(double)i * i / (2.0 * sigma * sigma)) : (i == 0 ? 1.0 : 0.0);
        sum += kernel[i];
    }
    for (int i = 0; i < width; i++) kernel[i] /= sum;

    /* B.7 step 3: ox_i = ceil(i cos(theta) - 0.5), oy_i = ceil(i sin(theta) - 0.5) (round half down);
     * x = column to the right, y = row downward */
    const double theta = theta_deg * (CORRUPT_PI / 180.0);
    const double cs = cos(theta), sn = sin(theta);
    int any_neg_x = 0, any_neg_y = 0;
    for (int i = 0; i < width; i++) {
        ox[i] = (int)ceil((double)i * cs - 0.5);
        oy[i] = (int)ceil((double)i * sn - 0.5);
        any_neg_x |= ox[i] < 0;
        any_neg_y |= oy[i] < 0;
    }

    /* In place, no scratch buffer: all offsets of one angle point into the same quadrant (ox_i all >= 0 or
     * all <= 0, likewise oy_i), and clamping keeps a read on that side of the pixel. Visiting pixels
     * against the trail (rows in the direction opposite to oy, columns opposite to ox) therefore reads
     * only pixels that are not yet written, or the current pixel itself before its write. */
    const int y0 = any_neg_y ? h - 1 : 0, ystep = any_neg_y ? -1 : 1;
    const int x0 = any_neg_x ? w - 1 : 0, xstep = any_neg_x ? -1 : 1;
    for (int ch = 0; ch < c; ch++) {
        uint8_t *plane = image + (size_t)ch * (size_t)h * (size_t)w;
        for (int yi = 0, y = y0; yi < h; yi++, y += ystep) {
            for (int xi = 0, x = x0; xi < w; xi++, x += xstep) {
                /* B.7 step 4: out(x, y) = sum_i k_i in(x + ox_i, y + oy_i), edge-clamped, in double */
                double acc = 0.0;
                for (int i = 0; i < width; i++) {
                    int sx = corrupt_clamp(x + ox[i], w - 1), sy = corrupt_clamp(y + oy[i], h - 1);
                    acc += kernel[i] * (double)plane[(size_t)sy * (size_t)w + (size_t)sx];
                }
                /* B.7 step 5: clamp to [0, 255], round to nearest (halves up) */
                if (acc < 0.0) acc = 0.0;
                if (acc > 255.0) acc = 255.0;
                plane[(size_t)y * (size_t)w + (size_t)x] = (uint8_t)floor(acc + 0.5);
            }
        }
    }
}

/* ---- one image ------------------------------------------------------------------------------------------ */

void data_corrupt_image(uint8_t *image, int c, int h, int w, const DataCorruptionParams *p, uint64_t seed,
                        uint32_t group, uint32_t index)
{
    if (!image || !p || c < 1 || h < 1 || w < 1) return;
    FhRng rng;
    switch (p->type) {
    case DATA_CORRUPT_GAUSSIAN_NOISE:
        fh_rng_init(&rng, seed, FH_RNG_PARTITION, DATA_CORRUPT_TAG_NOISE, group, index);
        corrupt_gaussian_noise(image, (size_t)c * (size_t)h * (size_t)w, p->sigma, &rng);
        break;
    case DATA_CORRUPT_MOTION_BLUR: {
        /* B.7: theta ~ U(-45, 45) degrees, one draw per image, shared by its channels */
        fh_rng_init(&rng, seed, FH_RNG_PARTITION, DATA_CORRUPT_TAG_BLUR, group, index);
        double theta_deg = -45.0 + 90.0 * fh_rng_uniform(&rng);
        data_motion_blur_at_angle(image, c, h, w, p->radius, p->blur_sigma, theta_deg);
        break;
    }
    default:
        break; /* DATA_CORRUPT_NONE: unchanged */
    }
}
