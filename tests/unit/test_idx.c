/* Unit tests for the IDX reader (src/data/idx.c): tiny IDX files, raw and gzip, are written into a
 * fresh mkdtemp directory under /tmp (removed at the end), plus a read of the real Fashion-MNIST files
 * when Debian's dataset-fashion-mnist is installed.
 *
 * Run alone:  build/tests/test_idx [test_name]
 * or without make:
 *   mpicc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -Wno-unused-parameter -Iinclude -Itests/unit \
 *     tests/unit/test_idx.c src/data/idx.c src/core/error.c src/core/log.c -lz -lm -o /tmp/test_idx && /tmp/test_idx */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* mkdtemp, mkdir */
#endif

#include "test.h"

#include "fedhet/core.h"
#include "fedhet/data.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <zlib.h>

#include "test_tmp.h"

static int write_bytes(const char *path, const void *data, size_t len, int gz)
{
    tmp_record(path);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f) return -1;
        int ok = len == 0 || gzwrite(f, data, (unsigned)len) == (int)len;
        return (gzclose(f) == Z_OK && ok) ? 0 : -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* An IDX file in memory: magic, dims, then payload_len bytes of payload (which may disagree with the
 * dims on purpose). Caller frees. */
static unsigned char *idx_build(uint32_t magic, const uint32_t *dims, int ndims, const unsigned char *payload,
                                size_t payload_len, size_t *len)
{
    *len = 4 + 4 * (size_t)ndims + payload_len;
    unsigned char *b = malloc(*len);
    if (!b) return NULL;
    put_be32(b, magic);
    for (int i = 0; i < ndims; i++) put_be32(b + 4 + 4 * i, dims[i]);
    if (payload_len) memcpy(b + 4 + 4 * ndims, payload, payload_len);
    return b;
}

static int write_idx(const char *path, uint32_t magic, const uint32_t *dims, int ndims,
                     const unsigned char *payload, size_t payload_len, int gz)
{
    size_t len = 0;
    unsigned char *b = idx_build(magic, dims, ndims, payload, payload_len, &len);
    if (!b) return -1;
    int r = write_bytes(path, b, len, gz);
    free(b);
    return r;
}

/* the standard small fixture: 5 images of 3 x 4, pixel = 7*i + 3*k mod 256 ... made to cover 0 and 255 */
enum { FX_N = 5, FX_H = 3, FX_W = 4, FX_PIX = FX_N * FX_H * FX_W };
static unsigned char fx_pixels[FX_PIX];
static unsigned char fx_labels[FX_N] = { 3, 0, 9, 1, 9 };

static void fx_init(void)
{
    for (int i = 0; i < FX_PIX; i++) fx_pixels[i] = (unsigned char)(i * 37 % 256);
    fx_pixels[0] = 0;
    fx_pixels[FX_PIX - 1] = 255;
}

static int write_fx_images(const char *path, int gz)
{
    uint32_t dims[3] = { FX_N, FX_H, FX_W };
    return write_idx(path, 0x00000803u, dims, 3, fx_pixels, FX_PIX, gz);
}

static int write_fx_labels(const char *path, const unsigned char *labels, uint32_t n, int gz)
{
    uint32_t dims[1] = { n };
    return write_idx(path, 0x00000801u, dims, 1, labels, n, gz);
}

static int msg_has(const char *needle) { return strstr(fh_error_message(), needle) != NULL; }

/* ---- tests ---- */

static void test_raw_and_gzip_read_identical(void)
{
    const char *img_raw = tmp_path("a-images-raw"), *img_gz = tmp_path("a-images.gz");
    const char *lab_raw = tmp_path("a-labels-raw"), *lab_gz = tmp_path("a-labels.gz");
    CHECK(write_fx_images(img_raw, 0) == 0);
    CHECK(write_fx_images(img_gz, 1) == 0);
    CHECK(write_fx_labels(lab_raw, fx_labels, FX_N, 0) == 0);
    CHECK(write_fx_labels(lab_gz, fx_labels, FX_N, 1) == 0);

    for (int gz = 0; gz < 2; gz++) {
        uint8_t *img = NULL;
        int32_t *lab = NULL;
        int64_t n = -1, nl = -1;
        int h = -1, w = -1;
        CHECK_OK(data_idx_read_images(gz ? img_gz : img_raw, &img, &n, &h, &w));
        CHECK_OK(data_idx_read_labels(gz ? lab_gz : lab_raw, &lab, &nl));
        CHECK(n == FX_N && h == FX_H && w == FX_W && nl == FX_N);
        CHECK(img && memcmp(img, fx_pixels, FX_PIX) == 0);
        for (int i = 0; lab && i < FX_N; i++) CHECK_MSG(lab[i] == fx_labels[i], "gz=%d label %d", gz, i);
        free(img);
        free(lab);
    }
}

static void test_gzip_detected_from_content_not_name(void)
{
    /* gzip content under a plain name and raw content under a .gz name both read */
    const char *gz_plain = tmp_path("b-images-idx3-ubyte"), *raw_gzname = tmp_path("b-raw-images.gz");
    CHECK(write_fx_images(gz_plain, 1) == 0);
    CHECK(write_fx_images(raw_gzname, 0) == 0);
    for (int k = 0; k < 2; k++) {
        uint8_t *img = NULL;
        int64_t n = 0;
        int h = 0, w = 0;
        CHECK_OK(data_idx_read_images(k ? raw_gzname : gz_plain, &img, &n, &h, &w));
        CHECK(n == FX_N && h == FX_H && w == FX_W && img && memcmp(img, fx_pixels, FX_PIX) == 0);
        free(img);
    }
}

static void test_read_set_dims_and_labels(void)
{
    const char *dir = tmp_dir("set_ok");
    char p[600];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    CHECK(write_fx_images(p, 1) == 0);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir);
    CHECK(write_fx_labels(p, fx_labels, FX_N, 1) == 0);

    DataImageSet set;
    CHECK_OK(data_idx_read_set(&set, dir, "train", 10));
    CHECK(set.n == FX_N && set.c == 1 && set.h == FX_H && set.w == FX_W && set.classes == 10);
    CHECK(set.images && memcmp(set.images, fx_pixels, FX_PIX) == 0);
    for (int i = 0; set.labels && i < FX_N; i++) CHECK(set.labels[i] == fx_labels[i]);
    data_imageset_free(&set);
    CHECK(set.images == NULL && set.labels == NULL && set.n == 0);
    data_imageset_free(&set); /* twice is harmless */
}

static void test_read_set_falls_back_to_raw_and_prefers_gz(void)
{
    const char *dir = tmp_dir("set_raw");
    char p[600];
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", dir);
    CHECK(write_fx_images(p, 0) == 0);
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", dir);
    CHECK(write_fx_labels(p, fx_labels, FX_N, 0) == 0);
    DataImageSet set;
    CHECK_OK(data_idx_read_set(&set, dir, "t10k", 10));
    CHECK(set.n == FX_N && set.images && memcmp(set.images, fx_pixels, FX_PIX) == 0);
    data_imageset_free(&set);

    /* a valid .gz beside a broken raw file: the .gz must be the one read */
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", dir);
    CHECK(write_bytes(p, "junk", 4, 0) == 0);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", dir);
    CHECK(write_fx_images(p, 1) == 0);
    CHECK_OK(data_idx_read_set(&set, dir, "t10k", 10));
    CHECK(set.n == FX_N);
    data_imageset_free(&set);
}

static void test_wrong_magic(void)
{
    const char *labels_as_images = tmp_path("c-labels-idx1-ubyte.gz");
    CHECK(write_fx_labels(labels_as_images, fx_labels, FX_N, 1) == 0);
    uint8_t *img = (uint8_t *)1;
    int64_t n = 7;
    int h = 7, w = 7;
    int st = data_idx_read_images(labels_as_images, &img, &n, &h, &w);
    CHECK(st == FH_ERR_DATA);
    CHECK_MSG(msg_has("c-labels-idx1-ubyte.gz") && msg_has("magic") && msg_has("0x00000801") &&
                  msg_has("0x00000803"),
              "%s", fh_error_message());
    CHECK(img == NULL && n == 0 && h == 0 && w == 0);

    const char *images_as_labels = tmp_path("c-images-idx3-ubyte");
    CHECK(write_fx_images(images_as_labels, 0) == 0);
    int32_t *lab = NULL;
    st = data_idx_read_labels(images_as_labels, &lab, &n);
    CHECK(st == FH_ERR_DATA && lab == NULL);
    CHECK_MSG(msg_has("c-images-idx3-ubyte") && msg_has("magic"), "%s", fh_error_message());

    /* float32 element type (0x0D) with 3 dims: an IDX file, but not one of uint8 images */
    const char *floats = tmp_path("c-float-images");
    uint32_t dims[3] = { 1, 1, 1 };
    unsigned char four[4] = { 0, 0, 0, 0 };
    CHECK(write_idx(floats, 0x00000D03u, dims, 3, four, 4, 0) == 0);
    st = data_idx_read_images(floats, &img, &n, &h, &w);
    CHECK(st == FH_ERR_DATA && img == NULL);
    CHECK_MSG(msg_has("c-float-images") && msg_has("magic"), "%s", fh_error_message());
}

static void test_implausible_dims(void)
{
    uint32_t bad[][3] = { { 0, 28, 28 }, { 5, 0, 28 }, { 5, 28, 0 }, { 5, 65537, 1 }, { 5, 1, 65537 },
                          { 0x80000001u, 1, 1 } };
    const char *path = tmp_path("d-images");
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        CHECK(write_idx(path, 0x00000803u, bad[k], 3, fx_pixels, 16, k % 2) == 0);
        uint8_t *img = NULL;
        int64_t n = 0;
        int h = 0, w = 0;
        int st = data_idx_read_images(path, &img, &n, &h, &w);
        CHECK_MSG(st == FH_ERR_DATA && img == NULL, "case %zu: status %d", k, st);
        CHECK_MSG(msg_has("d-images") && msg_has("dims"), "case %zu: %s", k, fh_error_message());
    }
    uint32_t zero[1] = { 0 };
    CHECK(write_idx(path, 0x00000801u, zero, 1, NULL, 0, 0) == 0);
    int32_t *lab = NULL;
    int64_t n = 0;
    CHECK(data_idx_read_labels(path, &lab, &n) == FH_ERR_DATA && lab == NULL);
    CHECK_MSG(msg_has("d-images") && msg_has("count"), "%s", fh_error_message());
}

static void test_truncated(void)
{
    /* header says 5 x 3 x 4 = 60 bytes; only 41 follow */
    uint32_t dims[3] = { FX_N, FX_H, FX_W };
    for (int gz = 0; gz < 2; gz++) {
        const char *path = tmp_path(gz ? "e-images.gz" : "e-images");
        CHECK(write_idx(path, 0x00000803u, dims, 3, fx_pixels, 41, gz) == 0);
        uint8_t *img = NULL;
        int64_t n = 0;
        int h = 0, w = 0;
        CHECK(data_idx_read_images(path, &img, &n, &h, &w) == FH_ERR_DATA);
        CHECK(img == NULL && n == 0);
        CHECK_MSG(msg_has(path) && msg_has("truncated") && msg_has("expected 60 payload bytes, found 41"), "%s",
                  fh_error_message());
    }
    /* a header cut inside the dims, and an empty file */
    const char *path = tmp_path("e-short-header");
    unsigned char hdr[10] = { 0, 0, 8, 3, 0, 0, 0, 5, 0, 0 };
    CHECK(write_bytes(path, hdr, sizeof hdr, 0) == 0);
    uint8_t *img = NULL;
    int64_t n = 0;
    int h = 0, w = 0;
    CHECK(data_idx_read_images(path, &img, &n, &h, &w) == FH_ERR_DATA && img == NULL);
    CHECK_MSG(msg_has(path) && msg_has("truncated"), "%s", fh_error_message());
    CHECK(write_bytes(path, "", 0, 0) == 0);
    CHECK(data_idx_read_images(path, &img, &n, &h, &w) == FH_ERR_DATA && img == NULL);
    CHECK_MSG(msg_has(path) && msg_has("truncated"), "%s", fh_error_message());
    /* labels: header says 5, 3 present */
    {
        size_t len = 0;
        uint32_t d1[1] = { FX_N };
        unsigned char *b = idx_build(0x00000801u, d1, 1, fx_labels, 3, &len);
        CHECK(b && write_bytes(path, b, len, 1) == 0);
        free(b);
    }
    int32_t *lab = NULL;
    CHECK(data_idx_read_labels(path, &lab, &n) == FH_ERR_DATA && lab == NULL);
    CHECK_MSG(msg_has("truncated") && msg_has("expected 5 payload bytes, found 3"), "%s", fh_error_message());
}

static void test_truncated_gzip_stream(void)
{
    /* a valid gzip file cut in the middle of the compressed stream: zlib's "unexpected end of file" */
    const char *full = tmp_path("f-full.gz"), *cut = tmp_path("f-cut.gz");
    enum { N = 40, H = 28, W = 28 };
    static unsigned char pix[N * H * W];
    uint32_t s = 12345;
    for (size_t i = 0; i < sizeof pix; i++) {
        s = s * 1103515245u + 12345u;
        pix[i] = (unsigned char)(s >> 24); /* incompressible, so the cut lands inside the payload */
    }
    uint32_t dims[3] = { N, H, W };
    CHECK(write_idx(full, 0x00000803u, dims, 3, pix, sizeof pix, 1) == 0);
    FILE *f = fopen(full, "rb");
    CHECK(f != NULL);
    if (!f) return;
    static unsigned char gzbytes[N * H * W + 1024];
    size_t len = fread(gzbytes, 1, sizeof gzbytes, f);
    fclose(f);
    CHECK(len > 100);
    CHECK(write_bytes(cut, gzbytes, len / 2, 0) == 0);
    uint8_t *img = NULL;
    int64_t n = 0;
    int h = 0, w = 0;
    CHECK(data_idx_read_images(cut, &img, &n, &h, &w) == FH_ERR_DATA && img == NULL);
    CHECK_MSG(msg_has(cut), "%s", fh_error_message());
    CHECK_OK(data_idx_read_images(full, &img, &n, &h, &w));
    CHECK(n == N && img && memcmp(img, pix, sizeof pix) == 0);
    free(img);
}

static void test_trailing_garbage(void)
{
    unsigned char more[FX_PIX + 7];
    memcpy(more, fx_pixels, FX_PIX);
    memset(more + FX_PIX, 0xAB, 7);
    uint32_t dims[3] = { FX_N, FX_H, FX_W };
    for (int gz = 0; gz < 2; gz++) {
        const char *path = tmp_path(gz ? "g-images.gz" : "g-images");
        CHECK(write_idx(path, 0x00000803u, dims, 3, more, sizeof more, gz) == 0);
        uint8_t *img = NULL;
        int64_t n = 0;
        int h = 0, w = 0;
        CHECK(data_idx_read_images(path, &img, &n, &h, &w) == FH_ERR_DATA && img == NULL);
        CHECK_MSG(msg_has(path) && msg_has("7 bytes of trailing data"), "%s", fh_error_message());
    }
}

static void test_garbage_files_fail_cleanly(void)
{
    /* random bytes, sometimes behind a valid magic and/or a gzip signature: always an error, never a crash */
    const char *path = tmp_path("h-garbage");
    static unsigned char buf[4096];
    uint32_t s = 2024;
    int failures_seen = 0, trials = 300;
    for (int t = 0; t < trials; t++) {
        s = s * 1664525u + 1013904223u;
        size_t len = (s >> 8) % 600;
        for (size_t i = 0; i < len; i++) {
            s = s * 1664525u + 1013904223u;
            buf[i] = (unsigned char)(s >> 24);
        }
        int variant = t % 4;
        if (variant == 1 && len >= 4) put_be32(buf, 0x00000803u);
        if (variant == 2 && len >= 2) buf[0] = 0x1f, buf[1] = 0x8b; /* gzip signature, garbage after */
        if (variant == 3 && len >= 8) put_be32(buf, 0x00000801u), put_be32(buf + 4, (uint32_t)(len - 8 + 1));
        CHECK(write_bytes(path, buf, len, 0) == 0);
        uint8_t *img = NULL;
        int32_t *lab = NULL;
        int64_t n = 0;
        int h = 0, w = 0;
        int si = data_idx_read_images(path, &img, &n, &h, &w);
        int sl = data_idx_read_labels(path, &lab, &n);
        CHECK_MSG(si != FH_OK && sl != FH_OK, "trial %d len %zu: %d %d", t, len, si, sl);
        CHECK(img == NULL && lab == NULL);
        failures_seen += (si == FH_ERR_DATA) + (sl == FH_ERR_DATA);
        free(img);
        free(lab);
    }
    CHECK_MSG(failures_seen == 2 * trials, "%d of %d failures were FH_ERR_DATA", failures_seen, 2 * trials);
    /* the same garbage gzip-compressed */
    CHECK(write_bytes(path, buf, 333, 1) == 0);
    uint8_t *img = NULL;
    int64_t n = 0;
    int h = 0, w = 0;
    CHECK(data_idx_read_images(path, &img, &n, &h, &w) == FH_ERR_DATA && img == NULL);
}

static void test_huge_dims_on_tiny_file(void)
{
    /* plausible-looking but enormous dims (2^31 x 65536 x 65536) must read as truncated, not allocate */
    uint32_t dims[3] = { 0x80000000u, 65536, 65536 };
    const char *path = tmp_path("i-huge");
    CHECK(write_idx(path, 0x00000803u, dims, 3, fx_pixels, FX_PIX, 0) == 0);
    uint8_t *img = NULL;
    int64_t n = 0;
    int h = 0, w = 0;
    CHECK(data_idx_read_images(path, &img, &n, &h, &w) == FH_ERR_DATA && img == NULL);
    CHECK_MSG(msg_has("truncated") && msg_has("found 60"), "%s", fh_error_message());
}

static void test_label_out_of_range(void)
{
    const char *dir = tmp_dir("set_badlabel");
    char ip[600], lp[600];
    snprintf(ip, sizeof ip, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(lp, sizeof lp, "%s/train-labels-idx1-ubyte.gz", dir);
    unsigned char labels[FX_N] = { 1, 2, 12, 3, 4 };
    CHECK(write_fx_images(ip, 1) == 0);
    CHECK(write_fx_labels(lp, labels, FX_N, 1) == 0);
    DataImageSet set;
    int st = data_idx_read_set(&set, dir, "train", 10);
    CHECK(st == FH_ERR_DATA);
    CHECK_MSG(msg_has(lp) && msg_has("label 12") && msg_has("index 2"), "%s", fh_error_message());
    CHECK(set.images == NULL && set.labels == NULL && set.n == 0);
    /* with enough classes the same files are fine */
    CHECK_OK(data_idx_read_set(&set, dir, "train", 13));
    CHECK(set.classes == 13);
    data_imageset_free(&set);
    /* 9 is the largest label in the fixture: classes = 9 must reject it */
    CHECK(write_fx_labels(lp, fx_labels, FX_N, 1) == 0);
    CHECK(data_idx_read_set(&set, dir, "train", 9) == FH_ERR_DATA);
    CHECK_MSG(msg_has("label 9"), "%s", fh_error_message());
}

static void test_count_mismatch(void)
{
    const char *dir = tmp_dir("set_mismatch");
    char ip[600], lp[600];
    snprintf(ip, sizeof ip, "%s/train-images-idx3-ubyte", dir);
    snprintf(lp, sizeof lp, "%s/train-labels-idx1-ubyte", dir);
    CHECK(write_fx_images(ip, 0) == 0);
    CHECK(write_fx_labels(lp, fx_labels, FX_N - 1, 0) == 0);
    DataImageSet set;
    CHECK(data_idx_read_set(&set, dir, "train", 10) == FH_ERR_DATA);
    CHECK_MSG(msg_has(ip) && msg_has(lp) && msg_has("5 images") && msg_has("4 labels"), "%s",
              fh_error_message());
    CHECK(set.images == NULL && set.labels == NULL);
}

static void test_missing_file(void)
{
    const char *path = tmp_path("no-such-file-idx3-ubyte.gz");
    uint8_t *img = NULL;
    int64_t n = 0;
    int h = 0, w = 0;
    CHECK(data_idx_read_images(path, &img, &n, &h, &w) == FH_ERR_DATA && img == NULL);
    CHECK_MSG(msg_has(path) && msg_has("cannot open"), "%s", fh_error_message());
    int32_t *lab = NULL;
    CHECK(data_idx_read_labels(path, &lab, &n) == FH_ERR_DATA && lab == NULL);
    CHECK_MSG(msg_has(path), "%s", fh_error_message());

    /* a set dir with images but no labels file at all */
    const char *dir = tmp_dir("set_missing");
    char ip[600], expect[600];
    snprintf(ip, sizeof ip, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(expect, sizeof expect, "%s/train-labels-idx1-ubyte", dir);
    CHECK(write_fx_images(ip, 1) == 0);
    DataImageSet set;
    CHECK(data_idx_read_set(&set, dir, "train", 10) == FH_ERR_DATA);
    CHECK_MSG(msg_has(expect) && msg_has("not found"), "%s", fh_error_message());
    CHECK(set.images == NULL && set.labels == NULL);
    /* and a directory that does not exist */
    CHECK(data_idx_read_set(&set, tmp_path("no_such_dir"), "t10k", 10) == FH_ERR_DATA);
    CHECK_MSG(msg_has("no_such_dir/t10k-images-idx3-ubyte"), "%s", fh_error_message());
}

static void test_images_to_float(void)
{
    /* 3 rows of c=1, 2 x 2 */
    uint8_t pix[12] = { 0, 255, 51, 102, 1, 2, 3, 4, 128, 64, 32, 16 };
    int32_t lab[3] = { 0, 1, 2 };
    DataImageSet set = { .n = 3, .c = 1, .h = 2, .w = 2, .classes = 3, .images = pix, .labels = lab };
    float out[9];
    for (int i = 0; i < 9; i++) out[i] = -999.0f;
    const float mean = 0.2860f, std = 0.3530f;
    data_images_to_float(out, &set, 1, 2, mean, std); /* rows 1 and 2 only */
    for (int i = 0; i < 8; i++) {
        double want = ((double)pix[4 + i] / 255.0 - mean) / std;
        CHECK_NEAR(out[i], want, 1e-6);
    }
    CHECK(out[8] == -999.0f); /* nothing written past count rows */

    data_images_to_float(out, &set, 0, 1, 0.0f, 1.0f); /* mean 0, std 1: plain x / 255 */
    CHECK_NEAR(out[0], 0.0, 0.0);
    CHECK_NEAR(out[1], 1.0, 1e-7);
    CHECK_NEAR(out[2], 0.2, 1e-7);
    CHECK_NEAR(out[3], 0.4, 1e-7);
    data_images_to_float(out, &set, 0, 1, 0.5f, 0.5f); /* maps [0, 255] onto [-1, 1] */
    CHECK_NEAR(out[0], -1.0, 1e-7);
    CHECK_NEAR(out[1], 1.0, 1e-7);
    out[0] = 42.0f;
    data_images_to_float(out, &set, 3, 0, 0.0f, 1.0f); /* empty range writes nothing */
    CHECK(out[0] == 42.0f);
}

static void test_fashion_mnist_real(void)
{
    struct stat st;
    if (stat(DATA_FASHION_MNIST_DIR, &st) != 0 || !S_ISDIR(st.st_mode)) {
        TEST_SKIP("no %s: make deps installs Debian's dataset-fashion-mnist", DATA_FASHION_MNIST_DIR);
        return;
    }
    const char *prefixes[2] = { "train", "t10k" };
    const int64_t sizes[2] = { 60000, 10000 };
    for (int k = 0; k < 2; k++) {
        DataImageSet set;
        CHECK_OK(data_idx_read_set(&set, DATA_FASHION_MNIST_DIR, prefixes[k], 10));
        CHECK_MSG(set.n == sizes[k], "%s: n = %lld", prefixes[k], (long long)set.n);
        CHECK(set.c == 1 && set.h == 28 && set.w == 28 && set.classes == 10);
        int64_t counts[10] = { 0 };
        for (int64_t i = 0; set.labels && i < set.n; i++)
            if (set.labels[i] >= 0 && set.labels[i] < 10) counts[set.labels[i]]++;
        for (int c = 0; c < 10; c++)
            CHECK_MSG(counts[c] == sizes[k] / 10, "%s: class %d occurs %lld times", prefixes[k], c,
                      (long long)counts[c]);
        /* pixels use the whole byte range, and the mean is near the well-known 0.286 */
        int saw0 = 0, saw255 = 0;
        double sum = 0;
        size_t total = (size_t)set.n * 28 * 28;
        for (size_t i = 0; set.images && i < total; i++) {
            saw0 |= set.images[i] == 0;
            saw255 |= set.images[i] == 255;
            sum += set.images[i];
        }
        CHECK(saw0 && saw255);
        CHECK_NEAR(sum / (double)total / 255.0, 0.286, 0.01);
        data_imageset_free(&set);
    }
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    if (tmp_init("idx") != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    fx_init();
    RUN(test_raw_and_gzip_read_identical);
    RUN(test_gzip_detected_from_content_not_name);
    RUN(test_read_set_dims_and_labels);
    RUN(test_read_set_falls_back_to_raw_and_prefers_gz);
    RUN(test_wrong_magic);
    RUN(test_implausible_dims);
    RUN(test_truncated);
    RUN(test_truncated_gzip_stream);
    RUN(test_trailing_garbage);
    RUN(test_garbage_files_fail_cleanly);
    RUN(test_huge_dims_on_tiny_file);
    RUN(test_label_out_of_range);
    RUN(test_count_mismatch);
    RUN(test_missing_file);
    RUN(test_images_to_float);
    RUN(test_fashion_mnist_real);
    tmp_cleanup();
    return test_summary();
}
