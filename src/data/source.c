/* Raw data sets by path: detects the format from what the path holds (data.h). */
#include "fedhet/data.h"
#include "fedhet/core.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int file_exists_in(const char *dir, const char *name)
{
    char path[4096];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return 0;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* "idx" | "cifar10" | "cifar100", or NULL when the folder holds none of them */
static const char *detect_folder(const char *dir)
{
    if (file_exists_in(dir, "train-images-idx3-ubyte") || file_exists_in(dir, "train-images-idx3-ubyte.gz"))
        return "idx";
    if (file_exists_in(dir, "data_batch_1.bin")) return "cifar10";
    if (file_exists_in(dir, "train.bin")) return "cifar100";
    return NULL;
}

/* A class without training images cannot be partitioned by label and usually means a wrong class count. */
static int check_every_class(const DataImageSet *train, const char *src)
{
    int64_t *count = NULL;
    FH_CHECK(fh_calloc(&count, (size_t)train->classes, sizeof *count, "class counts"));
    for (int64_t i = 0; i < train->n; i++) count[train->labels[i]]++;
    int empty = -1;
    for (int c = 0; c < train->classes && empty < 0; c++)
        if (count[c] == 0) empty = c;
    fh_free(&count);
    if (empty >= 0)
        FH_FAIL(FH_ERR_DATA, "%s: class %d has no training images (%d classes expected); check the classes setting",
                src, empty, train->classes);
    return FH_OK;
}

int data_source_read(DataImageSet *train, DataImageSet *test, const char *src, const char *format, int idx_classes,
                     const char **format_used)
{
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (!src || !*src) FH_FAIL(FH_ERR_USAGE, "the source data set is empty");
    if (!strcmp(src, "fashion-mnist")) src = DATA_FASHION_MNIST_DIR;
    if (!format || !strcmp(format, "auto")) {
        struct stat st;
        if (stat(src, &st) != 0) {
            int err = errno;
            if (!strcmp(src, DATA_FASHION_MNIST_DIR))
                FH_FAIL(FH_ERR_DATA, "%s: %s (install Debian's dataset-fashion-mnist: make deps)", src, strerror(err));
            FH_FAIL(FH_ERR_DATA, "%s: %s", src, strerror(err));
        }
        if (S_ISDIR(st.st_mode)) {
            format = detect_folder(src);
            if (!format)
                FH_FAIL(FH_ERR_DATA, "%s: holds no known data set (looked for train-images-idx3-ubyte[.gz] (IDX), "
                        "data_batch_1.bin (CIFAR-10), train.bin (CIFAR-100), *.npy arrays, class or domain folders "
                        "of images)", src);
        } else {
            format = "hdf5";
        }
    }
    int status;
    if (!strcmp(format, "idx")) {
        status = data_idx_read_set(train, src, "train", idx_classes);
        if (status == FH_OK) status = data_idx_read_set(test, src, "t10k", idx_classes);
        *format_used = "idx";
    } else if (!strcmp(format, "cifar10") || !strcmp(format, "cifar100")) {
        status = data_cifar_read(train, test, src, strcmp(format, "cifar100") ? 10 : 100);
        *format_used = strcmp(format, "cifar10") ? "cifar100" : "cifar10";
    } else if (!strcmp(format, "hdf5")) {
        status = data_hdf5_read(train, test, src);
        *format_used = "hdf5";
    } else {
        FH_FAIL(FH_ERR_USAGE, "format '%s' is not one of auto, idx, cifar10, cifar100, hdf5, imagefolder, domains, csv, npy, "
                "npz", format);
    }
    if (status == FH_OK) status = check_every_class(train, src);
    if (status != FH_OK) {
        data_imageset_free(train);
        data_imageset_free(test);
        return fh_error_trace(status, __FILE__, __LINE__, "data_source_read");
    }
    return FH_OK;
}

/* imgsource.c */
int data_source_is_image_format(const char *format);
const char *data_source_detect_layout(const char *src);
int data_image_source_open(DataSource **out, DataImageSet *train, DataImageSet *test, const char *src,
                           const DataSourceOptions *o, const char *format);

void data_source_options_default(DataSourceOptions *o)
{
    memset(o, 0, sizeof *o);
    o->format = "auto";
    o->idx_classes = 10;
    o->image = (DataImageOptions){ 0, DATA_RESIZE_SHORTER, 1, 0, 1 };
    o->image_column = "image";
    o->label_column = "label";
    o->image_suffix = "";
    o->layout = "auto";
    o->float_max = 1.0;
    o->test_fraction = 0.2;
}

int data_source_open(DataSource **out, DataImageSet *train, DataImageSet *test, const char *src,
                     const DataSourceOptions *o, const char **format_used)
{
    *out = NULL;
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    const char *format = o->format && *o->format ? o->format : "auto";
    if (src && !strcmp(format, "auto") && strcmp(src, "fashion-mnist")) {
        struct stat st;
        int folder = stat(src, &st) == 0 && S_ISDIR(st.st_mode);
        const char *layout = data_source_detect_layout(src);
        if (layout && (!folder || !detect_folder(src))) format = layout;
    }
    if (!data_source_is_image_format(format))
        return data_source_read(train, test, src, format, o->idx_classes, format_used);
    *format_used = format;
    FH_CHECK(data_image_source_open(out, train, test, src, o, format));
    int status = check_every_class(train, src);
    if (status != FH_OK) {
        data_imageset_free(train);
        data_imageset_free(test);
        data_source_close(out);
        return fh_error_trace(status, __FILE__, __LINE__, "data_source_open");
    }
    return FH_OK;
}

/* ---- source keys: one table for `fedhet partition --help`, its parsing and [data] source_options ---- */

static const DataSourceKey source_keys[] = {
    {"size", "0", "image sources: output side in pixels; 0 = keep the images' own (common) size"},
    {"resize", "shorter", "shorter (shorter side to size, aspect kept) | exact (size x size) | none"},
    {"crop", "center", "center (centre crop to size x size after the resize) | none"},
    {"channels", "auto", "auto (the first image's) | 1 (grey: ITU-R 601 luma) | 3 (RGB: grey repeated)"},
    {"shrink_on_load", "1", "JPEG: decode at a DCT scale 1/2..1/8 that still covers the resize (faster)"},
    {"on_error", "fail", "an unreadable image: fail (exit 2 naming it) | skip (decodes every image once more "
                         "up front; skipped ones counted and named)"},
    {"image_root", "", "csv: folder the image column's names are relative to (default: the table's folder)"},
    {"image_column", "image", "csv: column of image file names"},
    {"image_suffix", "", "csv: appended to every image name (ISIC 2019: .jpg)"},
    {"label_column", "label", "csv: column of class names or numbers"},
    {"label_columns", "", "csv: one-hot columns instead, comma-separated, in class order (ISIC 2019's ground truth)"},
    {"class_names", "", "csv: the classes, comma-separated, in id order; other labels are an error"},
    {"client_column", "", "csv: column whose values are the natural groups (scheme=natural, holdout_domain)"},
    {"split_column", "", "csv: column of train | test"},
    {"layout", "auto", "npy/npz images: auto | nhwc | nchw"},
    {"float_max", "1", "npy/npz float32 images span 0..float_max (1 or 255)"},
    {"test_fraction", "0.2", "sources without a test split: share of each (domain, class) held out as the test set"},
    {"holdout_domain", "", "domains (or client column values), comma-separated, that form the test set instead"},
    {"split_within", "none", "scheme=natural: none (a client per group) | iid | dirichlet (split each group again)"},
    {"split_clients", "2", "scheme=natural with split_within: clients per group"},
    {"normalise", "file", "mean/std recorded in the file: file (computed from the training images) | imagenet | "
                          "none (0 / 1); mean= and std= override"},
};

const DataSourceKey *data_source_keys(int *n)
{
    *n = (int)(sizeof source_keys / sizeof source_keys[0]);
    return source_keys;
}

static int number_in(const char *key, const char *value, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(value, &end);
    if (errno || end == value || *end || !(*out >= lo && *out <= hi))
        FH_FAIL(FH_ERR_USAGE, "%s=%s: need a number in %g..%g", key, value, lo, hi);
    return FH_OK;
}

static int choice(const char *key, const char *value, const char *const *names, int n, int *out)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(value, names[i])) {
            *out = i;
            return FH_OK;
        }
    FH_FAIL(FH_ERR_USAGE, "%s=%s: not one of %s%s%s%s%s", key, value, names[0], n > 1 ? ", " : "", n > 1 ? names[1] : "",
            n > 2 ? ", " : "", n > 2 ? names[2] : "");
}

int data_source_option_set(DataSourceOptions *o, DataPartitionSpec *p, const char *key, const char *value,
                           int *known)
{
    double v;
    int i = 0;
    *known = 1;
    if (!strcmp(key, "size")) {
        FH_CHECK(number_in(key, value, 0, 32768, &v));
        o->image.size = (int)v;
    }
    else if (!strcmp(key, "resize")) {
        static const char *const n[] = { "shorter", "exact", "none" };
        FH_CHECK(choice(key, value, n, 3, &i));
        o->image.resize = (DataResize)i;
    } else if (!strcmp(key, "crop")) {
        static const char *const n[] = { "none", "center" };
        FH_CHECK(choice(key, value, n, 2, &o->image.crop_center));
    } else if (!strcmp(key, "channels")) {
        static const char *const n[] = { "auto", "1", "3" };
        FH_CHECK(choice(key, value, n, 3, &i));
        o->image.channels = i == 0 ? 0 : i == 1 ? 1 : 3;
    } else if (!strcmp(key, "shrink_on_load")) {
        static const char *const n[] = { "0", "1" };
        FH_CHECK(choice(key, value, n, 2, &o->image.shrink_on_load));
    } else if (!strcmp(key, "on_error")) {
        static const char *const n[] = { "fail", "skip" };
        FH_CHECK(choice(key, value, n, 2, &o->skip_unreadable));
    } else if (!strcmp(key, "image_root")) o->image_root = value;
    else if (!strcmp(key, "image_column")) o->image_column = value;
    else if (!strcmp(key, "image_suffix")) o->image_suffix = value;
    else if (!strcmp(key, "label_column")) o->label_column = value;
    else if (!strcmp(key, "label_columns")) o->label_columns = value;
    else if (!strcmp(key, "class_names")) o->class_names = value;
    else if (!strcmp(key, "client_column")) o->client_column = value;
    else if (!strcmp(key, "split_column")) o->split_column = value;
    else if (!strcmp(key, "layout")) {
        static const char *const n[] = { "auto", "nhwc", "nchw" };
        FH_CHECK(choice(key, value, n, 3, &i));
        o->layout = value;
    } else if (!strcmp(key, "float_max")) FH_CHECK(number_in(key, value, 1e-6, 1e6, &o->float_max));
    else if (!strcmp(key, "test_fraction")) FH_CHECK(number_in(key, value, 0, 0.99, &o->test_fraction));
    else if (!strcmp(key, "holdout_domain")) o->holdout_domain = value;
    else if (!strcmp(key, "split_within")) {
        static const char *const n[] = { "none", "iid", "dirichlet" };
        FH_CHECK(choice(key, value, n, 3, &i));
        p->split_within = value;
    } else if (!strcmp(key, "split_clients")) {
        FH_CHECK(number_in(key, value, 1, 1000000, &v));
        p->split_clients = (int)v;
    } else if (!strcmp(key, "normalise")) {
        static const char *const n[] = { "file", "imagenet", "none" };
        FH_CHECK(choice(key, value, n, 3, &i));
        o->normalise = value;
    }
    else *known = 0;
    return FH_OK;
}

int data_source_options_parse(DataSourceOptions *o, DataPartitionSpec *p, char *text, const char *where)
{
    for (char *save = NULL, *tok = strtok_r(text, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok) FH_FAIL(FH_ERR_USAGE, "%s: '%s' is not key=value", where, tok);
        *eq = '\0';
        int known;
        FH_CHECK(data_source_option_set(o, p, tok, eq + 1, &known));
        if (!known) FH_FAIL(FH_ERR_USAGE, "%s: unknown source key '%s' (see fedhet partition --help)", where, tok);
    }
    return FH_OK;
}
