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

