/* Unit tests for the CIFAR binary and HDF5 readers (src/data/readers.c): tiny CIFAR-10 / CIFAR-100 batch
 * files and tiny HDF5 files (written here with the HDF5 API) in a fresh mkdtemp directory under /tmp,
 * removed at the end; read back exactly, and every broken variant must fail with FH_ERR_DATA naming the file.
 *
 * Run alone:  build/tests/test_readers [test_name]
 * or without make:
 *   mpicc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -Wno-unused-parameter -Iinclude -Itests/unit \
 *     tests/unit/test_readers.c src/data/readers.c src/data/idx.c src/core/error.c src/core/log.c \
 *     $(pkg-config --cflags --libs hdf5-openmpi) -lz -lm -o /tmp/test_readers && /tmp/test_readers */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* mkdtemp, mkdir */
#endif

#include "test.h"

#include "fedhet/core.h"
#include "fedhet/data.h"

#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "test_tmp.h"

static int write_bytes(const char *path, const void *data, size_t len)
{
    tmp_record(path);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = len == 0 || fwrite(data, 1, len, f) == len;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int is_zeroed(const DataImageSet *s)
{
    return s->n == 0 && s->images == NULL && s->labels == NULL && s->c == 0 && s->h == 0 && s->w == 0 &&
           s->classes == 0;
}

static int has_text(const char *message, const char *part) { return part == NULL || strstr(message, part) != NULL; }

/* the call must fail with `status`, the message must contain a and b (b may be NULL), outputs zeroed */
#define CHECK_FAILS(call, status, a, b, train, test)                                                       \
    do {                                                                                                   \
        int st_ = (call);                                                                                  \
        const char *m_ = fh_error_message();                                                               \
        CHECK_MSG(st_ == (status), "status %d, expected %d; message: %s", st_, (status), m_);              \
        CHECK_MSG(has_text(m_, (a)) && has_text(m_, (b)), "message lacks \"%s\" or \"%s\": %s", (a),       \
                  (b) ? (const char *)(b) : "", m_);                                                       \
        CHECK(is_zeroed(train) && is_zeroed(test));                                                        \
    } while (0)

/* ==== CIFAR ============================================================================================ */

enum { CIFAR_PIX = 3072 };

/* pixel byte j of record i of file f: a pattern that differs between files, records and positions */
static uint8_t cifar_pixel(int f, int i, int j) { return (uint8_t)(j * 7 + i * 31 + f * 101 + (j >> 10) * 13); }

/* Writes `records` records: CIFAR-10 (label_bytes 1) label = labels[i]; CIFAR-100 (2) coarse = labels[i] / 5,
 * fine = labels[i]. extra_bytes > 0 appends junk, < 0 cuts the file short. */
static int write_cifar(const char *path, int label_bytes, int f, int records, const int *labels, int extra_bytes)
{
    size_t rec = (size_t)label_bytes + CIFAR_PIX;
    size_t len = rec * (size_t)records;
    unsigned char *b = calloc(len + (extra_bytes > 0 ? (size_t)extra_bytes : 0) + 1, 1);
    if (!b) return -1;
    for (int i = 0; i < records; i++) {
        unsigned char *r = b + rec * (size_t)i;
        if (label_bytes == 2) r[0] = (unsigned char)(labels[i] / 5);
        r[label_bytes - 1] = (unsigned char)labels[i];
        for (int j = 0; j < CIFAR_PIX; j++) r[label_bytes + j] = cifar_pixel(f, i, j);
    }
    len = (size_t)((long long)len + extra_bytes);
    int st = write_bytes(path, b, len);
    free(b);
    return st;
}

static const int c10_counts[6] = { 3, 3, 2, 1, 3, 2 }; /* data_batch_1..5, test_batch */
static const int c10_labels[6][3] = { { 0, 9, 4 }, { 1, 2, 3 }, { 5, 6, 0 }, { 7, 0, 0 }, { 8, 9, 1 }, { 3, 9, 0 } };

/* a complete CIFAR-10 directory; file k (0..5) may be broken by `extra` bytes */
static const char *make_cifar10(const char *name, int broken_file, int extra)
{
    const char *dir = tmp_dir(name);
    static char keep[512];
    snprintf(keep, sizeof keep, "%s", dir);
    for (int f = 0; f < 6; f++) {
        char path[600];
        if (f < 5) snprintf(path, sizeof path, "%s/data_batch_%d.bin", keep, f + 1);
        else snprintf(path, sizeof path, "%s/test_batch.bin", keep);
        if (write_cifar(path, 1, f, c10_counts[f], c10_labels[f], f == broken_file ? extra : 0) != 0)
            printf("    cannot write %s\n", path);
    }
    return keep;
}

static void check_cifar_rows(const DataImageSet *s, int first_file, int n_files, const int counts[],
                             const int labels[][3])
{
    int64_t row = 0;
    int pixels_ok = 1, labels_ok = 1;
    for (int f = first_file; f < first_file + n_files; f++)
        for (int i = 0; i < counts[f]; i++, row++) {
            if (row >= s->n) return;
            labels_ok &= s->labels[row] == labels[f][i];
            for (int j = 0; j < CIFAR_PIX; j++) pixels_ok &= s->images[row * CIFAR_PIX + j] == cifar_pixel(f, i, j);
        }
    CHECK(row == s->n);
    CHECK(labels_ok);
    CHECK(pixels_ok);
}

static void test_cifar10_read(void)
{
    const char *dir = make_cifar10("c10", -1, 0);
    DataImageSet train, test;
    CHECK_OK(data_cifar_read(&train, &test, dir, 10));
    CHECK(train.n == 12 && test.n == 2);
    CHECK(train.c == 3 && train.h == 32 && train.w == 32 && train.classes == 10);
    CHECK(test.c == 3 && test.h == 32 && test.w == 32 && test.classes == 10);
    check_cifar_rows(&train, 0, 5, c10_counts, c10_labels);
    check_cifar_rows(&test, 5, 1, c10_counts, c10_labels);
    /* the record's pixels are R plane, G plane, B plane, 32 x 32 row-major: [c, h, w] as is */
    if (train.n == 12) CHECK(train.images[1 * 1024 + 2 * 32 + 3] == cifar_pixel(0, 0, 1024 + 2 * 32 + 3));
    data_imageset_free(&train);
    data_imageset_free(&test);
    CHECK(is_zeroed(&train) && is_zeroed(&test));
}

static void test_cifar100_read(void)
{
    const char *dir = tmp_dir("c100");
    char path[600];
    const int counts[2] = { 4, 3 };
    const int labels[2][3] = { { 99, 0, 57 }, { 12, 99, 1 } };
    const int train_labels[4] = { 99, 0, 57, 42 };
    snprintf(path, sizeof path, "%s/train.bin", dir);
    write_cifar(path, 2, 0, 4, train_labels, 0);
    snprintf(path, sizeof path, "%s/test.bin", dir);
    write_cifar(path, 2, 1, 3, labels[1], 0);
    DataImageSet train, test;
    CHECK_OK(data_cifar_read(&train, &test, dir, 100));
    CHECK(train.n == 4 && test.n == 3 && train.classes == 100 && test.classes == 100);
    /* the fine label (second byte) is used, not the coarse one */
    if (train.n == 4) CHECK(train.labels[0] == 99 && train.labels[1] == 0 && train.labels[2] == 57 && train.labels[3] == 42);
    check_cifar_rows(&test, 1, 1, counts, labels);
    int ok = 1;
    for (int i = 0; i < 4 && train.n == 4; i++)
        for (int j = 0; j < CIFAR_PIX; j++) ok &= train.images[i * CIFAR_PIX + j] == cifar_pixel(0, i, j);
    CHECK(ok);
    data_imageset_free(&train);
    data_imageset_free(&test);
    /* a CIFAR-100 directory read as CIFAR-10: data_batch_1.bin is missing */
    CHECK_FAILS(data_cifar_read(&train, &test, dir, 10), FH_ERR_DATA, "data_batch_1.bin", "cannot open", &train, &test);
}

static void test_cifar_truncated(void)
{
    const char *dir = make_cifar10("c10_trunc", 2, -5); /* data_batch_3.bin: 2 records less 5 bytes */
    DataImageSet train, test;
    CHECK_FAILS(data_cifar_read(&train, &test, dir, 10), FH_ERR_DATA, "data_batch_3.bin: 6141 bytes",
                "is not a whole number of 3073-byte CIFAR-10 records", &train, &test);
    dir = make_cifar10("c10_long", 5, 7); /* test_batch.bin with 7 trailing bytes */
    CHECK_FAILS(data_cifar_read(&train, &test, dir, 10), FH_ERR_DATA, "test_batch.bin: 6153 bytes",
                "3073-byte CIFAR-10 records", &train, &test);
    dir = make_cifar10("c10_empty", 0, -3 * 3073); /* data_batch_1.bin empty */
    CHECK_FAILS(data_cifar_read(&train, &test, dir, 10), FH_ERR_DATA, "data_batch_1.bin", "empty", &train, &test);
    /* a CIFAR-100 file cut mid-record */
    const char *d100 = tmp_dir("c100_trunc");
    char path[600];
    const int l[2] = { 1, 2 };
    snprintf(path, sizeof path, "%s/train.bin", d100);
    write_cifar(path, 2, 0, 2, l, -1);
    snprintf(path, sizeof path, "%s/test.bin", d100);
    write_cifar(path, 2, 0, 2, l, 0);
    CHECK_FAILS(data_cifar_read(&train, &test, d100, 100), FH_ERR_DATA, "train.bin: 6147 bytes",
                "3074-byte CIFAR-100 records", &train, &test);
}

static void test_cifar_label_out_of_range(void)
{
    const char *dir = make_cifar10("c10_label", -1, 0);
    char path[600];
    const int bad[3] = { 1, 10, 2 };
    snprintf(path, sizeof path, "%s/data_batch_4.bin", dir);
    write_cifar(path, 1, 3, 3, bad, 0);
    DataImageSet train, test;
    CHECK_FAILS(data_cifar_read(&train, &test, dir, 10), FH_ERR_DATA, "data_batch_4.bin: label 10 in record 1",
                "out of range for 10 classes", &train, &test);
    /* CIFAR-100: fine label 100 */
    const char *d100 = tmp_dir("c100_label");
    const int good[2] = { 3, 4 }, bad100[2] = { 3, 100 };
    snprintf(path, sizeof path, "%s/train.bin", d100);
    write_cifar(path, 2, 0, 2, good, 0);
    snprintf(path, sizeof path, "%s/test.bin", d100);
    write_cifar(path, 2, 0, 2, bad100, 0);
    CHECK_FAILS(data_cifar_read(&train, &test, d100, 100), FH_ERR_DATA, "test.bin: fine label 100 in record 1",
                "100 classes", &train, &test);
}

static void test_cifar_missing_file(void)
{
    const char *dir = make_cifar10("c10_missing", -1, 0);
    char path[600];
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    remove(path);
    DataImageSet train, test;
    CHECK_FAILS(data_cifar_read(&train, &test, dir, 10), FH_ERR_DATA, "test_batch.bin: cannot open",
                "No such file", &train, &test);
    CHECK_FAILS(data_cifar_read(&train, &test, tmp_path("no_such_dir"), 10), FH_ERR_DATA,
                "no_such_dir/data_batch_1.bin", "cannot open", &train, &test);
    /* classes other than 10 / 100 is a usage error */
    CHECK_FAILS(data_cifar_read(&train, &test, dir, 20), FH_ERR_USAGE, "classes = 20", NULL, &train, &test);
    /* a directory where a batch file should be */
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    if (mkdir(path, 0700) == 0) tmp_record(path);
    CHECK_FAILS(data_cifar_read(&train, &test, dir, 10), FH_ERR_DATA, "test_batch.bin", NULL, &train, &test);
}

/* ==== HDF5 ============================================================================================= */

/* writes a dataset `name` (intermediate groups created) of file type ftype from memory of type mtype */
static void h5_put(hid_t file, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                   const void *data)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t space = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(file, name, ftype, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0 || H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) printf("    cannot write %s\n", name);
    H5Dclose(d);
    H5Sclose(space);
    H5Pclose(lcpl);
}

/* string attribute on object `obj`: fixed-length ASCII (NumPy bytes) or variable-length UTF-8 (h5py str) */
static void h5_put_string_attr(hid_t file, const char *obj, const char *attr, const char *value, int variable)
{
    hid_t o = H5Oopen(file, obj, H5P_DEFAULT);
    hid_t type = H5Tcopy(H5T_C_S1);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a;
    if (variable) {
        H5Tset_size(type, H5T_VARIABLE);
        H5Tset_cset(type, H5T_CSET_UTF8);
        a = H5Acreate2(o, attr, type, space, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, type, &value);
    } else {
        H5Tset_size(type, strlen(value));
        H5Tset_strpad(type, H5T_STR_NULLPAD);
        a = H5Acreate2(o, attr, type, space, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, type, value);
    }
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
    H5Oclose(o);
}

static void h5_put_int_attr(hid_t file, const char *obj, const char *attr, int64_t value)
{
    hid_t o = H5Oopen(file, obj, H5P_DEFAULT);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(o, attr, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &value);
    H5Aclose(a);
    H5Sclose(space);
    H5Oclose(o);
}

static hid_t h5_create(const char *path)
{
    tmp_record(path);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) printf("    cannot create %s\n", path);
    return f;
}

/* fixture: N images of C x H x W; pixel of (n, c, y, x) in NCHW order */
enum { HN = 4, HC = 3, HH = 2, HW = 5, HIMG = HC * HH * HW, HTN = 2 };
static uint8_t h5_pixel(int set, int n, int c, int y, int x) { return (uint8_t)(set * 97 + n * 61 + c * 29 + y * 7 + x * 3 + 1); }

static void h5_images_nchw(uint8_t *out, int set, int n_images)
{
    for (int n = 0; n < n_images; n++)
        for (int c = 0; c < HC; c++)
            for (int y = 0; y < HH; y++)
                for (int x = 0; x < HW; x++) out[((n * HC + c) * HH + y) * HW + x] = h5_pixel(set, n, c, y, x);
}

static void h5_images_nhwc(uint8_t *out, int set, int n_images)
{
    for (int n = 0; n < n_images; n++)
        for (int y = 0; y < HH; y++)
            for (int x = 0; x < HW; x++)
                for (int c = 0; c < HC; c++) out[((n * HH + y) * HW + x) * HC + c] = h5_pixel(set, n, c, y, x);
}

static void check_h5_set(const DataImageSet *s, int set, int n_images, const int32_t *labels, int classes)
{
    CHECK(s->n == n_images && s->c == HC && s->h == HH && s->w == HW && s->classes == classes);
    if (s->n != n_images) return;
    uint8_t expect[HN * HIMG];
    h5_images_nchw(expect, set, n_images);
    CHECK(memcmp(s->images, expect, (size_t)n_images * HIMG) == 0);
    CHECK(memcmp(s->labels, labels, (size_t)n_images * sizeof *labels) == 0);
}

static const hsize_t dims_nchw[4] = { HN, HC, HH, HW }, dims_nhwc[4] = { HN, HH, HW, HC };
static const hsize_t tdims_nchw[4] = { HTN, HC, HH, HW }, tdims_nhwc[4] = { HTN, HH, HW, HC };

static void test_hdf5_nchw_int64_labels_with_test(void)
{
    const char *path = tmp_path("nchw.h5");
    hid_t f = h5_create(path);
    uint8_t img[HN * HIMG];
    h5_images_nchw(img, 0, HN);
    h5_put(f, "/train/images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, dims_nchw, img);
    const int64_t lab[HN] = { 0, 2, 1, 2 };
    hsize_t ln = HN;
    h5_put(f, "/train/labels", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &ln, lab);
    h5_images_nchw(img, 1, HTN);
    h5_put(f, "/test/images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, tdims_nchw, img);
    const int64_t tlab[HTN] = { 3, 0 }; /* label 3 only in the test set: classes = 4 */
    ln = HTN;
    h5_put(f, "/test/labels", H5T_STD_I64BE, H5T_NATIVE_INT64, 1, &ln, tlab);
    h5_put_string_attr(f, "/train/images", "layout", "NCHW", 0);
    H5Fclose(f);

    DataImageSet train, test;
    CHECK_OK(data_hdf5_read(&train, &test, path));
    const int32_t e_lab[HN] = { 0, 2, 1, 2 }, e_tlab[HTN] = { 3, 0 };
    check_h5_set(&train, 0, HN, e_lab, 4);
    check_h5_set(&test, 1, HTN, e_tlab, 4);
    data_imageset_free(&train);
    data_imageset_free(&test);
}

static void test_hdf5_nhwc_uint8_labels_no_test(void)
{
    const char *path = tmp_path("nhwc.h5");
    hid_t f = h5_create(path);
    uint8_t img[HN * HIMG];
    h5_images_nhwc(img, 0, HN);
    h5_put(f, "/train/images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, dims_nhwc, img);
    h5_put_string_attr(f, "/train/images", "layout", "NHWC", 0);
    const uint8_t lab[HN] = { 1, 0, 1, 1 };
    hsize_t ln = HN;
    h5_put(f, "/train/labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, &ln, lab);
    H5Fclose(f);

    DataImageSet train, test;
    CHECK_OK(data_hdf5_read(&train, &test, path));
    const int32_t e_lab[HN] = { 1, 0, 1, 1 };
    check_h5_set(&train, 0, HN, e_lab, 2);
    CHECK(is_zeroed(&test)); /* no /test: n = 0, pointers NULL */
    data_imageset_free(&train);
    data_imageset_free(&test);
}

/* h5py writes str attributes as variable-length UTF-8; the test set has its own NHWC attribute */
static void test_hdf5_nhwc_variable_string_and_classes_attr(void)
{
    const char *path = tmp_path("nhwc_vlen.h5");
    hid_t f = h5_create(path);
    uint8_t img[HN * HIMG];
    h5_images_nhwc(img, 0, HN);
    h5_put(f, "/train/images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, dims_nhwc, img);
    h5_put_string_attr(f, "/train/images", "layout", "NHWC", 1);
    const int16_t lab[HN] = { 3, 0, 1, 1 };
    hsize_t ln = HN;
    h5_put(f, "/train/labels", H5T_STD_I16LE, H5T_NATIVE_INT16, 1, &ln, lab);
    h5_put_int_attr(f, "/train/labels", "classes", 10);
    h5_images_nhwc(img, 1, HTN);
    h5_put(f, "/test/images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, tdims_nhwc, img);
    h5_put_string_attr(f, "/test/images", "layout", "NHWC", 1);
    const uint32_t tlab[HTN] = { 9, 2 };
    ln = HTN;
    h5_put(f, "/test/labels", H5T_STD_U32LE, H5T_NATIVE_UINT32, 1, &ln, tlab);
    H5Fclose(f);

    DataImageSet train, test;
    CHECK_OK(data_hdf5_read(&train, &test, path));
    const int32_t e_lab[HN] = { 3, 0, 1, 1 }, e_tlab[HTN] = { 9, 2 };
    check_h5_set(&train, 0, HN, e_lab, 10);
    check_h5_set(&test, 1, HTN, e_tlab, 10);
    data_imageset_free(&train);
    data_imageset_free(&test);
}

/* Builds a valid NCHW file, then lets `spoil` change it; returns the path. */
typedef enum {
    SPOIL_NO_IMAGES, SPOIL_RANK2, SPOIL_FLOAT_IMAGES, SPOIL_LABEL_ROWS, SPOIL_NEG_LABEL, SPOIL_HUGE_LABEL,
    SPOIL_CLASSES_TOO_SMALL, SPOIL_CLASSES_ONE, SPOIL_ONE_CLASS, SPOIL_BAD_LAYOUT, SPOIL_TEST_SHAPE,
    SPOIL_TEST_NO_LABELS, SPOIL_FLOAT_LABELS, SPOIL_NO_LABELS
} Spoil;

static const char *h5_spoiled(const char *name, Spoil spoil)
{
    const char *path = tmp_path(name);
    hid_t f = h5_create(path);
    uint8_t img[HN * HIMG];
    float fimg[HN * HIMG] = { 0 };
    h5_images_nchw(img, 0, HN);
    if (spoil == SPOIL_RANK2) {
        const hsize_t d2[2] = { HN, HIMG };
        h5_put(f, "/train/images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 2, d2, img);
    } else if (spoil == SPOIL_FLOAT_IMAGES) {
        h5_put(f, "/train/images", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, dims_nchw, fimg);
    } else if (spoil != SPOIL_NO_IMAGES) {
        h5_put(f, "/train/images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, dims_nchw, img);
    }
    if (spoil == SPOIL_BAD_LAYOUT) h5_put_string_attr(f, "/train/images", "layout", "CHWN", 0);
    int64_t lab[HN] = { 0, 1, 2, 1 };
    if (spoil == SPOIL_NEG_LABEL) lab[2] = -1;
    if (spoil == SPOIL_HUGE_LABEL) lab[3] = INT64_C(5000000000);
    if (spoil == SPOIL_ONE_CLASS) lab[1] = lab[2] = lab[3] = 0;
    hsize_t ln = spoil == SPOIL_LABEL_ROWS ? HN - 1 : HN;
    if (spoil == SPOIL_FLOAT_LABELS) {
        const double dl[HN] = { 0, 1, 2, 1 };
        h5_put(f, "/train/labels", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &ln, dl);
    } else if (spoil != SPOIL_NO_LABELS) {
        h5_put(f, "/train/labels", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &ln, lab);
    }
    if (spoil == SPOIL_CLASSES_TOO_SMALL) h5_put_int_attr(f, "/train/labels", "classes", 2);
    if (spoil == SPOIL_CLASSES_ONE) h5_put_int_attr(f, "/train/labels", "classes", 1);
    if (spoil == SPOIL_TEST_SHAPE) {
        const hsize_t td[4] = { 1, 1, HH, HW };
        h5_put(f, "/test/images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, td, img);
        ln = 1;
        h5_put(f, "/test/labels", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &ln, lab);
    }
    if (spoil == SPOIL_TEST_NO_LABELS) h5_put(f, "/test/images", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, tdims_nchw, img);
    H5Fclose(f);
    return path;
}

static void test_hdf5_missing_dataset(void)
{
    DataImageSet train, test;
    const char *p = h5_spoiled("no_images.h5", SPOIL_NO_IMAGES);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "no_images.h5: dataset /train/images is missing",
                NULL, &train, &test);
    p = h5_spoiled("no_labels.h5", SPOIL_NO_LABELS);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "no_labels.h5: dataset /train/labels is missing",
                NULL, &train, &test);
    p = h5_spoiled("test_no_labels.h5", SPOIL_TEST_NO_LABELS);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "test_no_labels.h5: dataset /test/labels is missing",
                NULL, &train, &test);
    /* an empty HDF5 file: no /train at all */
    const char *empty = tmp_path("empty.h5");
    H5Fclose(h5_create(empty));
    CHECK_FAILS(data_hdf5_read(&train, &test, empty), FH_ERR_DATA, "empty.h5: dataset /train/images is missing",
                NULL, &train, &test);
}

static void test_hdf5_wrong_shape_or_type(void)
{
    DataImageSet train, test;
    const char *p = h5_spoiled("rank2.h5", SPOIL_RANK2);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA,
                "rank2.h5: /train/images must be uint8 [N,C,H,W] (found rank 2)", NULL, &train, &test);
    p = h5_spoiled("float.h5", SPOIL_FLOAT_IMAGES);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "float.h5: /train/images must be uint8",
                "found 4-byte float", &train, &test);
    p = h5_spoiled("float_labels.h5", SPOIL_FLOAT_LABELS);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "float_labels.h5: /train/labels must be integer",
                "8-byte float", &train, &test);
    p = h5_spoiled("layout.h5", SPOIL_BAD_LAYOUT);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "layout.h5: the layout attribute of /train/images",
                "\"CHWN\"", &train, &test);
    p = h5_spoiled("test_shape.h5", SPOIL_TEST_SHAPE);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "test_shape.h5: /test/images is 1x2x5",
                "/train/images is 3x2x5", &train, &test);
}

static void test_hdf5_label_errors(void)
{
    DataImageSet train, test;
    const char *p = h5_spoiled("rows.h5", SPOIL_LABEL_ROWS);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "rows.h5: /train/labels has 3 rows but /train/images has 4",
                NULL, &train, &test);
    p = h5_spoiled("neg.h5", SPOIL_NEG_LABEL);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "neg.h5: label -1 at row 2", "negative", &train, &test);
    p = h5_spoiled("huge.h5", SPOIL_HUGE_LABEL); /* 5e9 saturates to INT32_MAX in the conversion */
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "huge.h5: label 2147483647 (or beyond", "at row 3", &train,
                &test);
    p = h5_spoiled("classes.h5", SPOIL_CLASSES_TOO_SMALL);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "classes.h5: label 2 at row 2 of /train/labels",
                "out of range for 2 classes", &train, &test);
    p = h5_spoiled("classes1.h5", SPOIL_CLASSES_ONE);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "classes1.h5: the classes attribute", "is 1", &train,
                &test);
    p = h5_spoiled("oneclass.h5", SPOIL_ONE_CLASS);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "oneclass.h5: every label is 0", "at least 2", &train,
                &test);
}

static void test_hdf5_not_hdf5(void)
{
    DataImageSet train, test;
    unsigned char junk[4096];
    uint32_t s = 12345;
    for (size_t i = 0; i < sizeof junk; i++) {
        s = s * 1664525u + 1013904223u;
        junk[i] = (unsigned char)(s >> 24);
    }
    const char *p = tmp_path("garbage.h5");
    write_bytes(p, junk, sizeof junk);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "garbage.h5: not an HDF5 file", NULL, &train, &test);
    p = tmp_path("zero.h5");
    write_bytes(p, junk, 0);
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "zero.h5: not an HDF5 file", NULL, &train, &test);
    /* a real HDF5 file cut in half */
    const char *good = h5_spoiled("whole.h5", SPOIL_NEG_LABEL);
    FILE *f = fopen(good, "rb");
    static unsigned char buf[1 << 16];
    size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    p = tmp_path("half.h5");
    write_bytes(p, buf, len / 2);
    int st = data_hdf5_read(&train, &test, p);
    CHECK_MSG(st == FH_ERR_DATA && strstr(fh_error_message(), "half.h5") != NULL, "%d: %s", st, fh_error_message());
    CHECK(is_zeroed(&train) && is_zeroed(&test));
    p = tmp_path("no_such_file.h5");
    CHECK_FAILS(data_hdf5_read(&train, &test, p), FH_ERR_DATA, "no_such_file.h5: cannot open", "No such file",
                &train, &test);
}

/* data_hdf5_read switches HDF5's automatic error printing off only for its own duration */
static void test_hdf5_error_printing_restored(void)
{
    H5E_auto2_t before = NULL, after = NULL;
    void *before_data = NULL, *after_data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &before, &before_data);
    DataImageSet train, test;
    (void)data_hdf5_read(&train, &test, tmp_path("garbage.h5"));
    H5Eget_auto2(H5E_DEFAULT, &after, &after_data);
    CHECK(before == after && before_data == after_data);
    CHECK(before != NULL);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    if (tmp_init("readers") != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN(test_cifar10_read);
    RUN(test_cifar100_read);
    RUN(test_cifar_truncated);
    RUN(test_cifar_label_out_of_range);
    RUN(test_cifar_missing_file);
    RUN(test_hdf5_nchw_int64_labels_with_test);
    RUN(test_hdf5_nhwc_uint8_labels_no_test);
    RUN(test_hdf5_nhwc_variable_string_and_classes_attr);
    RUN(test_hdf5_missing_dataset);
    RUN(test_hdf5_wrong_shape_or_type);
    RUN(test_hdf5_label_errors);
    RUN(test_hdf5_not_hdf5);
    RUN(test_hdf5_error_printing_restored);
    tmp_cleanup();
    return test_summary();
}
