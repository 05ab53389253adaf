/* Dataset readers of docs/methods/partitions.md B.1 beyond IDX: CIFAR-10 / CIFAR-100 binary batches and a user's own image set
 * in HDF5. Both produce DataImageSet with uint8 images [n, c, h, w] and int32 labels.
 *
 * As in idx.c, everything read from a file is distrusted: sizes, shapes, types and every label are
 * checked, and each failure is FH_ERR_DATA with a message that starts with the file's path. On failure
 * both output sets are freed and left zeroed. */
#include "fedhet/data.h"
#include "fedhet/core.h"
#include "fedhet/h5io.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define READERS_PATH_MAX 4096

/* ==== CIFAR binary ====================================================================================
 *
 * A batch file is a plain sequence of records: CIFAR-10 = 1 label byte + 3072 pixels (3073 bytes),
 * CIFAR-100 = coarse label byte, fine label byte + 3072 pixels (3074 bytes). The pixels are the red plane,
 * then green, then blue, each 32 x 32 row-major: already [c, h, w]. The official files hold 10000 records
 * each (CIFAR-100 train.bin 50000), but any whole, non-zero number of records is accepted. */

#define CIFAR_PIXELS 3072
#define CIFAR_MAX_FILES 5

typedef struct {
    int classes;
    const char *name;         /* "CIFAR-10" */
    size_t record;            /* bytes per record */
    int label_byte;           /* offset of the label used */
    int n_train;              /* number of training files */
    const char *train[CIFAR_MAX_FILES];
    const char *test;
} CifarFormat;

static const CifarFormat cifar10 = { 10, "CIFAR-10", 1 + CIFAR_PIXELS, 0, 5,
                                     { "data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                       "data_batch_4.bin", "data_batch_5.bin" },
                                     "test_batch.bin" };
static const CifarFormat cifar100 = { 100, "CIFAR-100", 2 + CIFAR_PIXELS, 1, 1, { "train.bin" }, "test.bin" };

static int cifar_path(char *path, const char *dir, const char *name)
{
    int len = snprintf(path, READERS_PATH_MAX, "%s/%s", dir, name);
    if (len < 0 || len >= READERS_PATH_MAX)
        FH_FAIL(FH_ERR_DATA, "data path %s/%s is too long (limit %d bytes)", dir, name, READERS_PATH_MAX - 1);
    return FH_OK;
}

static int cifar_open(const char *path, const CifarFormat *fmt, FILE **out)
{
    errno = 0;
    *out = fopen(path, "rb");
    if (!*out) {
        int err = errno;
        if (err == ENOENT)
            FH_FAIL(FH_ERR_DATA, "%s: cannot open: %s (the %s binary version is expected: %s%s and %s)", path,
                    strerror(err), fmt->name, fmt->train[0], fmt->n_train > 1 ? " .. data_batch_5.bin" : "",
                    fmt->test);
        FH_FAIL(FH_ERR_DATA, "%s: cannot open: %s", path, err ? strerror(err) : "unknown error");
    }
    return FH_OK;
}

/* Number of records in the file at path, from its size: non-zero and a whole number of records. */
static int cifar_count_records(const char *path, const CifarFormat *fmt, int64_t *n)
{
    *n = 0;
    FILE *f;
    FH_CHECK(cifar_open(path, fmt, &f));
    struct stat st;
    int ok = fstat(fileno(f), &st) == 0;
    int err = errno;
    fclose(f);
    if (!ok) FH_FAIL(FH_ERR_DATA, "%s: cannot stat: %s", path, strerror(err));
    if (!S_ISREG(st.st_mode)) FH_FAIL(FH_ERR_DATA, "%s: not a regular file", path);
    long long bytes = (long long)st.st_size;
    if (bytes == 0)
        FH_FAIL(FH_ERR_DATA, "%s: file is empty (expected %zu-byte %s records)", path, fmt->record, fmt->name);
    if (bytes % (long long)fmt->record != 0)
        FH_FAIL(FH_ERR_DATA,
                "%s: %lld bytes is not a whole number of %zu-byte %s records (%lld whole record%s and %lld "
                "bytes over: truncated, or not a %s file?)",
                path, bytes, fmt->record, fmt->name, bytes / (long long)fmt->record,
                bytes / (long long)fmt->record == 1 ? "" : "s", bytes % (long long)fmt->record, fmt->name);
    *n = (int64_t)(bytes / (long long)fmt->record);
    return FH_OK;
}

/* Reads count records of path into rows [first, first + count) of set. */
static int cifar_read_records(const char *path, const CifarFormat *fmt, DataImageSet *set, int64_t first,
                              int64_t count)
{
    FILE *f;
    FH_CHECK(cifar_open(path, fmt, &f));
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    unsigned char record[2 + CIFAR_PIXELS];
    int status = FH_OK;
    for (int64_t i = 0; i < count && status == FH_OK; i++) {
        size_t got = fread(record, 1, fmt->record, f);
        if (got != fmt->record) {
            if (ferror(f))
                status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: read error in record %lld: %s", path,
                                        (long long)i, strerror(errno));
            else
                status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                        "%s: file ended in record %lld of %lld (did it change while being read?)",
                                        path, (long long)i, (long long)count);
            break;
        }
        int label = record[fmt->label_byte];
        if (label >= fmt->classes) {
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                    "%s: %slabel %d in record %lld is out of range for %d classes (need 0..%d)",
                                    path, fmt->classes == 100 ? "fine " : "", label, (long long)i, fmt->classes,
                                    fmt->classes - 1);
            break;
        }
        set->labels[first + i] = label;
        memcpy(set->images + (size_t)(first + i) * CIFAR_PIXELS, record + fmt->label_byte + 1, CIFAR_PIXELS);
    }
    fclose(f);
    return status;
}

/* One set from n_files batch files in dir, concatenated in the given order. */
static int cifar_read_set(DataImageSet *set, const char *dir, const CifarFormat *fmt, const char *const *files,
                          int n_files)
{
    char paths[CIFAR_MAX_FILES][READERS_PATH_MAX];
    int64_t counts[CIFAR_MAX_FILES], total = 0;
    for (int i = 0; i < n_files; i++) {
        FH_CHECK(cifar_path(paths[i], dir, files[i]));
        FH_CHECK(cifar_count_records(paths[i], fmt, &counts[i]));
        total += counts[i];
    }
    FH_CHECK(fh_calloc(&set->images, (size_t)total, CIFAR_PIXELS, "CIFAR images"));
    FH_CHECK(fh_calloc(&set->labels, (size_t)total, sizeof *set->labels, "CIFAR labels"));
    set->n = total;
    set->c = 3;
    set->h = set->w = 32;
    set->classes = fmt->classes;
    int64_t first = 0;
    for (int i = 0; i < n_files; i++) {
        FH_CHECK(cifar_read_records(paths[i], fmt, set, first, counts[i]));
        first += counts[i];
    }
    return FH_OK;
}

static int cifar_read_into(DataImageSet *train, DataImageSet *test, const char *dir, int classes)
{
    if (!dir || !*dir) FH_FAIL(FH_ERR_USAGE, "data_cifar_read: the data directory is not given");
    if (classes != 10 && classes != 100)
        FH_FAIL(FH_ERR_USAGE, "data_cifar_read: classes = %d, need 10 (CIFAR-10) or 100 (CIFAR-100)", classes);
    const CifarFormat *fmt = classes == 10 ? &cifar10 : &cifar100;
    FH_CHECK(cifar_read_set(train, dir, fmt, fmt->train, fmt->n_train));
    FH_CHECK(cifar_read_set(test, dir, fmt, &fmt->test, 1));
    return FH_OK;
}

int data_cifar_read(DataImageSet *train, DataImageSet *test, const char *dir, int classes)
{
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    int status = cifar_read_into(train, test, dir, classes);
    if (status != FH_OK) {
        data_imageset_free(train);
        data_imageset_free(test);
        return fh_error_trace(status, __FILE__, __LINE__, "data_cifar_read");
    }
    return FH_OK;
}

/* ==== HDF5 ==============================================================================================
 *
 * Layout (data.h): /train/images uint8 [N,C,H,W], or [N,H,W,C] with the string attribute layout = "NHWC"
 * ("NCHW" may be stated too); /train/labels any integer type [N]; optional /test/images and /test/labels
 * alike; optional integer attribute `classes` on /train/labels. Without the attribute, classes = the
 * largest label of train and test + 1 (a test label unseen in training is allowed).
 *
 * HDF5's automatic error printing is switched off for the duration of the call (and restored after); an
 * unexpected library failure is reported with the innermost message of HDF5's error stack. */

#define H5R_MAX_SIDE 65536
#define H5R_MAX_CLASSES (1 << 20)
/* NHWC images are read this many bytes at a time and transposed, not all at once: no second full copy.
 * (Overridable only to exercise the multi-chunk path on tiny files: -DH5R_TRANSPOSE_CHUNK=100.) */
#ifndef H5R_TRANSPOSE_CHUNK
#define H5R_TRANSPOSE_CHUNK ((size_t)64 << 20)
#endif

/* The string attribute `layout` of dset: *nhwc = 1 for "NHWC", 0 for "NCHW" or no attribute. */
static int h5r_read_layout(const FhH5File *r, hid_t dset, const char *name, int *nhwc)
{
    int has;
    char *text = NULL;
    *nhwc = 0;
    FH_CHECK(fh_h5_attr_exists(r, dset, "layout", &has));
    if (!has) return FH_OK;
    FH_CHECK(fh_h5_attr_read_string(r, dset, "layout", &text));
    for (size_t n = strlen(text); n > 0 && text[n - 1] == ' '; n--) text[n - 1] = '\0';
    int status = FH_OK;
    if (strcmp(text, "NHWC") == 0) *nhwc = 1;
    else if (strcmp(text, "NCHW") != 0)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                "%s: the layout attribute of %s is \"%s\"; expected \"NCHW\" or \"NHWC\"", r->path,
                                name, text);
    free(text);
    return status;
}

/* The file type and dataspace of an open dataset; the caller closes whichever of them is valid. */
static int h5r_query(const FhH5File *r, hid_t dset, const char *name, hid_t *type, hid_t *space)
{
    char msg[256];
    *type = H5Dget_type(dset);
    *space = H5Dget_space(dset);
    if (*type < 0 || *space < 0)
        FH_FAIL(FH_ERR_DATA, "%s: cannot query %s (HDF5: %s)", r->path, name, fh_h5_message(msg));
    return FH_OK;
}

/* Reads rows [first, first + rows) of an NHWC dataset into buf and transposes them into out (NCHW). */
static int h5r_read_nhwc_rows(const FhH5File *r, const char *name, hid_t dset, hid_t fspace, uint8_t *out,
                              uint8_t *buf, const hsize_t dims[4], hsize_t first, hsize_t rows)
{
    const hsize_t start[4] = { first, 0, 0, 0 }, count[4] = { rows, dims[1], dims[2], dims[3] };
    char msg[256];
    hid_t mspace = H5Screate_simple(4, count, NULL);
    herr_t rd = -1;
    if (mspace >= 0 && H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) >= 0)
        rd = H5Dread(dset, H5T_NATIVE_UINT8, mspace, fspace, H5P_DEFAULT, buf);
    if (rd < 0) {
        fh_h5_message(msg);
        if (mspace >= 0) H5Sclose(mspace);
        FH_FAIL(FH_ERR_DATA, "%s: reading rows %llu..%llu of %s failed (HDF5: %s)", r->path,
                (unsigned long long)first, (unsigned long long)(first + rows - 1), name, msg);
    }
    H5Sclose(mspace);
    const size_t h = (size_t)dims[1], w = (size_t)dims[2], c = (size_t)dims[3], plane = h * w;
    for (size_t n = 0; n < (size_t)rows; n++) {
        const uint8_t *src = buf + n * plane * c;
        uint8_t *dst = out + ((size_t)first + n) * plane * c;
        for (size_t p = 0; p < plane; p++)
            for (size_t ch = 0; ch < c; ch++) dst[ch * plane + p] = src[p * c + ch];
    }
    return FH_OK;
}

/* /<group>/images into set->images (NCHW) and set->n, c, h, w. */
static int h5r_read_images(const FhH5File *r, const char *name, DataImageSet *set)
{
    hid_t dset, type = H5I_INVALID_HID, space = H5I_INVALID_HID;
    uint8_t *buf = NULL;
    char msg[256], tbuf[64];
    int nhwc = 0, status;
    FH_CHECK(fh_h5_open_dataset(r, name, &dset));
    status = h5r_read_layout(r, dset, name, &nhwc);
    if (status != FH_OK) goto done;
    const char *shape = nhwc ? "[N,H,W,C]" : "[N,C,H,W]";
    status = h5r_query(r, dset, name, &type, &space);
    if (status != FH_OK) goto done;
    if (H5Tget_class(type) != H5T_INTEGER || H5Tget_size(type) != 1 || H5Tget_sign(type) != H5T_SGN_NONE) {
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: %s must be uint8 %s (found %s)", r->path, name,
                                shape, fh_h5_type_text(type, tbuf));
        goto done;
    }
    int rank = H5Sget_simple_extent_ndims(space);
    if (rank != 4) {
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: %s must be uint8 %s (found rank %d)", r->path,
                                name, shape, rank);
        goto done;
    }
    hsize_t dims[4];
    H5Sget_simple_extent_dims(space, dims, NULL);
    if (dims[0] == 0) {
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: %s has no images (N = 0)", r->path, name);
        goto done;
    }
    for (int i = 1; i < 4; i++)
        if (dims[i] == 0 || dims[i] > H5R_MAX_SIDE) {
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                    "%s: %s has implausible dims %llu x %llu x %llu x %llu %s (need 1..%d but N)",
                                    r->path, name, (unsigned long long)dims[0], (unsigned long long)dims[1],
                                    (unsigned long long)dims[2], (unsigned long long)dims[3], shape, H5R_MAX_SIDE);
            goto done;
        }
    /* dims[1..3] <= 2^16 each, so the per-image size fits in 64 bits; the total is checked by division */
    const uint64_t image_bytes = (uint64_t)dims[1] * dims[2] * dims[3];
    if (dims[0] > (uint64_t)INT64_MAX / image_bytes || (uint64_t)dims[0] * image_bytes > SIZE_MAX) {
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                "%s: %s holds %llu images of %llu bytes, more than this machine can address",
                                r->path, name, (unsigned long long)dims[0], (unsigned long long)image_bytes);
        goto done;
    }
    status = fh_calloc(&set->images, (size_t)dims[0], (size_t)image_bytes, name);
    if (status != FH_OK) goto done;
    if (!nhwc) {
        if (H5Dread(dset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, set->images) < 0) {
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: reading %s failed (HDF5: %s)", r->path, name,
                                    fh_h5_message(msg));
            goto done;
        }
    } else {
        hsize_t per_chunk = image_bytes >= H5R_TRANSPOSE_CHUNK ? 1 : H5R_TRANSPOSE_CHUNK / image_bytes;
        if (per_chunk > dims[0]) per_chunk = dims[0];
        status = fh_calloc(&buf, (size_t)per_chunk, (size_t)image_bytes, "NHWC transpose buffer");
        for (hsize_t first = 0; status == FH_OK && first < dims[0]; first += per_chunk) {
            hsize_t rows = dims[0] - first < per_chunk ? dims[0] - first : per_chunk;
            status = h5r_read_nhwc_rows(r, name, dset, space, set->images, buf, dims, first, rows);
        }
        if (status != FH_OK) goto done;
    }
    set->n = (int64_t)dims[0];
    set->c = (int)(nhwc ? dims[3] : dims[1]);
    set->h = (int)(nhwc ? dims[1] : dims[2]);
    set->w = (int)(nhwc ? dims[2] : dims[3]);
done:
    fh_free(&buf);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    H5Dclose(dset);
    if (status != FH_OK) return fh_error_trace(status, __FILE__, __LINE__, "h5r_read_images");
    return FH_OK;
}

/* /<group>/labels: integers of any width, converted to int32 by HDF5 (values outside int32 saturate, so
 * they still fail the checks below); n rows like the images; none negative. *max_label = the largest. */
static int h5r_read_labels(const FhH5File *r, const char *name, const char *images_name, DataImageSet *set,
                           int32_t *max_label)
{
    hid_t dset, type = H5I_INVALID_HID, space = H5I_INVALID_HID;
    char msg[256], tbuf[64];
    int status = FH_OK;
    *max_label = -1;
    FH_CHECK(fh_h5_open_dataset(r, name, &dset));
    status = h5r_query(r, dset, name, &type, &space);
    if (status != FH_OK) goto done;
    if (H5Tget_class(type) != H5T_INTEGER) {
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: %s must be integer [N] (found %s)", r->path, name,
                                fh_h5_type_text(type, tbuf));
        goto done;
    }
    int rank = H5Sget_simple_extent_ndims(space);
    if (rank != 1) {
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: %s must be integer [N] (found rank %d)", r->path,
                                name, rank);
        goto done;
    }
    hsize_t rows = 0;
    H5Sget_simple_extent_dims(space, &rows, NULL);
    if ((int64_t)rows != set->n || rows > (hsize_t)INT64_MAX) {
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: %s has %llu rows but %s has %lld", r->path, name,
                                (unsigned long long)rows, images_name, (long long)set->n);
        goto done;
    }
    status = fh_calloc(&set->labels, (size_t)rows, sizeof *set->labels, name);
    if (status != FH_OK) goto done;
    if (H5Dread(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, set->labels) < 0) {
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: reading %s failed (HDF5: %s)", r->path, name,
                                fh_h5_message(msg));
        goto done;
    }
    for (hsize_t i = 0; i < rows; i++) {
        int32_t v = set->labels[i];
        /* the conversion to int32 saturates: say so when the value shown may not be the stored one */
        const char *saturated = (v == INT32_MAX || v == INT32_MIN) ? " (or beyond: the int32 conversion saturates)" : "";
        if (v < 0) {
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: label %d%s at row %llu of %s is negative",
                                    r->path, (int)v, saturated, (unsigned long long)i, name);
            goto done;
        }
        if (v >= H5R_MAX_CLASSES) {
            status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                    "%s: label %d%s at row %llu of %s is beyond the limit of %d classes", r->path,
                                    (int)v, saturated, (unsigned long long)i, name, H5R_MAX_CLASSES);
            goto done;
        }
        if (v > *max_label) *max_label = v;
    }
done:
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    H5Dclose(dset);
    if (status != FH_OK) return fh_error_trace(status, __FILE__, __LINE__, "h5r_read_labels");
    return FH_OK;
}

/* The optional integer attribute `classes` on /train/labels: *classes = its value, or 0 when absent. */
static int h5r_read_classes_attr(const FhH5File *r, const char *name, int *classes)
{
    *classes = 0;
    char msg[256], tbuf[64];
    hid_t dset;
    FH_CHECK(fh_h5_open_dataset(r, name, &dset));
    htri_t has = H5Aexists(dset, "classes");
    if (has <= 0) {
        if (has < 0) fh_h5_message(msg);
        H5Dclose(dset);
        if (has < 0)
            FH_FAIL(FH_ERR_DATA, "%s: cannot check %s for a classes attribute (HDF5: %s)", r->path, name, msg);
        return FH_OK;
    }
    int status = FH_OK;
    long long value = 0;
    hid_t attr = H5Aopen(dset, "classes", H5P_DEFAULT);
    hid_t type = attr >= 0 ? H5Aget_type(attr) : H5I_INVALID_HID;
    hid_t space = attr >= 0 ? H5Aget_space(attr) : H5I_INVALID_HID;
    if (attr < 0 || type < 0 || space < 0)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: cannot open the classes attribute of %s (HDF5: %s)",
                                r->path, name, fh_h5_message(msg));
    else if (H5Tget_class(type) != H5T_INTEGER || H5Sget_simple_extent_npoints(space) != 1)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                "%s: the classes attribute of %s must be one integer (found %s)", r->path, name,
                                H5Tget_class(type) != H5T_INTEGER ? fh_h5_type_text(type, tbuf) : "several values");
    else if (H5Aread(attr, H5T_NATIVE_LLONG, &value) < 0)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: cannot read the classes attribute of %s (HDF5: %s)",
                                r->path, name, fh_h5_message(msg));
    else if (value < 2 || value > H5R_MAX_CLASSES)
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                "%s: the classes attribute of %s is %lld; need 2..%d", r->path, name, value,
                                H5R_MAX_CLASSES);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    H5Dclose(dset);
    if (status != FH_OK) return fh_error_trace(status, __FILE__, __LINE__, "h5r_read_classes_attr");
    *classes = (int)value;
    return FH_OK;
}

/* The first label >= classes in set, as an error naming it. */
static int h5r_check_labels(const FhH5File *r, const DataImageSet *set, const char *name, int classes,
                            const char *why)
{
    for (int64_t i = 0; i < set->n; i++)
        if (set->labels[i] >= classes)
            FH_FAIL(FH_ERR_DATA, "%s: label %d at row %lld of %s is out of range for %d classes (%s)", r->path,
                    (int)set->labels[i], (long long)i, name, classes, why);
    return FH_OK;
}

static int h5r_read_into(DataImageSet *train, DataImageSet *test, const FhH5File *r)
{
    int32_t max_train = -1, max_test = -1;
    FH_CHECK(h5r_read_images(r, "/train/images", train));
    FH_CHECK(h5r_read_labels(r, "/train/labels", "/train/images", train, &max_train));

    int has_test = 0;
    FH_CHECK(fh_h5_exists(r, "/test", &has_test));
    if (has_test) {
        FH_CHECK(h5r_read_images(r, "/test/images", test));
        if (test->c != train->c || test->h != train->h || test->w != train->w)
            FH_FAIL(FH_ERR_DATA, "%s: /test/images is %dx%dx%d (CxHxW) but /train/images is %dx%dx%d", r->path, test->c,
                    test->h, test->w, train->c, train->h, train->w);
        FH_CHECK(h5r_read_labels(r, "/test/labels", "/test/images", test, &max_test));
    }

    int classes = 0;
    FH_CHECK(h5r_read_classes_attr(r, "/train/labels", &classes));
    const char *why = "attribute classes of /train/labels";
    if (classes == 0) {
        classes = (max_train > max_test ? max_train : max_test) + 1;
        if (classes < 2)
            FH_FAIL(FH_ERR_DATA, "%s: every label is %d, so there would be %d class%s (need at least 2; set the "
                    "integer attribute classes on /train/labels if the file holds only some classes)",
                    r->path, classes - 1, classes, classes == 1 ? "" : "es");
        why = "largest label + 1";
    }
    FH_CHECK(h5r_check_labels(r, train, "/train/labels", classes, why));
    FH_CHECK(h5r_check_labels(r, test, "/test/labels", classes, why));
    train->classes = classes;
    if (has_test) test->classes = classes;
    return FH_OK;
}

int data_hdf5_read(DataImageSet *train, DataImageSet *test, const char *path)
{
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    FhH5Quiet quiet;
    fh_h5_quiet_begin(&quiet);
    FhH5File r;
    int status = fh_h5_open(&r, path, FH_ERR_DATA);
    if (status == FH_OK) status = h5r_read_into(train, test, &r);
    int close_status = fh_h5_close(&r);
    if (status == FH_OK) status = close_status;
    fh_h5_quiet_end(&quiet);
    if (status != FH_OK) {
        data_imageset_free(train);
        data_imageset_free(test);
        return fh_error_trace(status, __FILE__, __LINE__, "data_hdf5_read");
    }
    return FH_OK;
}
