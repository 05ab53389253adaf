/* fedhet data: dataset readers, partitions across clients, quality-shift corruptions.
 * Readers check magic numbers, dimensions and sizes and fail with FH_ERR_DATA naming the file.
 * Procedures follow spec/baselines-and-protocols.md part B; random draws use Philox purpose
 * FH_RNG_PARTITION (rng.h). */
#ifndef FEDHET_DATA_H
#define FEDHET_DATA_H

#include <stdint.h>

/* An in-memory image set: uint8 images [n, c, h, w] and int32 labels [n] in [0, classes). */
typedef struct {
    int64_t n;
    int c, h, w;
    int classes;
    uint8_t *images;
    int32_t *labels;
} DataImageSet;

/* IDX files, gzip-compressed or raw (detected from the content, not the name).
 * Images: magic 0x00000803, dims n x h x w, uint8. Labels: magic 0x00000801, dim n, uint8. */
int data_idx_read_images(const char *path, uint8_t **images, int64_t *n, int *h, int *w);
int data_idx_read_labels(const char *path, int32_t **labels, int64_t *n);

/* Reads `prefix`-images-idx3-ubyte[.gz] and `prefix`-labels-idx1-ubyte[.gz] from dir (prefix "train" or
 * "t10k"), checks that counts agree and labels are < classes. */
int data_idx_read_set(DataImageSet *set, const char *dir, const char *prefix, int classes);
void data_imageset_free(DataImageSet *set);

/* Default location of Debian's dataset-fashion-mnist */
#define DATA_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Per-pixel normalisation to float: out = (x / 255 - mean) / std, for rows [first, first + count). */
void data_images_to_float(float *out, const DataImageSet *set, int64_t first, int64_t count, float mean, float std);

/* ---- more readers (spec B.1) ----------------------------------------------------------------------- */

/* CIFAR binary batches in dir: CIFAR-10 (classes 10) data_batch_1..5.bin + test_batch.bin, records of
 * 1 label byte + 3072 pixel bytes; CIFAR-100 (classes 100) train.bin + test.bin, records of coarse and
 * fine label bytes + 3072 pixels (the fine label is used). Images come out [n, 3, 32, 32]. */
int data_cifar_read(DataImageSet *train, DataImageSet *test, const char *dir, int classes);

/* A user's own image set in HDF5: /train/images uint8 [N,C,H,W] (or [N,H,W,C] when the dataset has the
 * string attribute layout = "NHWC"), /train/labels integer [N]; optional /test/images, /test/labels
 * (test->n == 0 when absent); optional integer attribute `classes` on /train/labels, else max label + 1.
 * Images come out [n, c, h, w]. */
int data_hdf5_read(DataImageSet *train, DataImageSet *test, const char *path);

/* ---- partitions (spec B.3 - B.6) -------------------------------------------------------------------- */

typedef struct {
    const char *scheme;  /* "iid" | "dirichlet" | "pathological" | "quantity" */
    /* iid: "niid-bench" (default, array_split) | "flood" | "fl-simulator";
     * dirichlet: "niid-bench" (default, B.4 resampling with balancing) | "prior" (FL-Simulator
     *   prior-sampling, equal sizes, refill) | "quality" (FFL4MIA groups of clean and corrupted clients);
     * pathological: "shard" (default, FLOOD Path(r)) | "class" (FL-Simulator, c classes per client) */
    const char *variant; /* NULL = default */
    int n_clients;       /* K >= 1 */
    double alpha;        /* Dirichlet / quantity concentration > 0 */
    int min_size;        /* B.4 / B.6 minimum client size, default 10 */
    int classes_per_client; /* pathological r (shard) or c (class) */
    int n_corrupted;     /* "quality" variant: the last m client ids form the corrupted group */
    int max_attempts;    /* resampling bound, default 10000 */
    uint64_t seed;
} DataPartitionSpec;

typedef struct {
    int n_clients;
    int64_t *offsets; /* [n_clients + 1]: client k owns indices[offsets[k] .. offsets[k+1]-1] */
    int64_t *indices; /* rows of the training set, grouped by client (may repeat for "prior") */
} DataPartition;

/* labels [n] in [0, classes). Infeasible settings (e.g. alpha/min_size/K that never satisfy the
 * minimum within max_attempts, shards that do not divide) are FH_ERR_USAGE with a message naming them. */
int data_partition(DataPartition *out, const int32_t *labels, int64_t n, int classes, const DataPartitionSpec *spec);
void data_partition_free(DataPartition *p);

/* ---- quality shift (spec B.7) ------------------------------------------------------------------------ */

typedef enum { DATA_CORRUPT_NONE = 0, DATA_CORRUPT_GAUSSIAN_NOISE, DATA_CORRUPT_MOTION_BLUR } DataCorruption;

typedef struct {
    DataCorruption type;
    int severity;      /* 1..5 */
    double sigma;      /* Gaussian noise std (of x/255) */
    double radius;     /* motion blur R */
    double blur_sigma; /* motion blur sigma */
} DataCorruptionParams;

/* "gaussian_noise" | "motion_blur" | "none" */
int data_corruption_from_name(DataCorruption *type, const char *name);
const char *data_corruption_name(DataCorruption type);
/* The constants of B.7 for this image size: CIFAR-10-C for sides <= 32, Tiny-ImageNet-C up to 64,
 * ImageNet-C above. Severity outside 1..5 is FH_ERR_USAGE. */
int data_corruption_params(DataCorruptionParams *p, DataCorruption type, int severity, int h, int w);
/* Corrupts one uint8 image [c, h, w] in place. Draws come from Philox purpose `partition` keyed by seed
 * with counter (tag, group, index): tag fixed per corruption (src/data/corrupt_internal.h), group 0 =
 * training images, 1 = test images; index = the image's row. */
void data_corrupt_image(uint8_t *image, int c, int h, int w, const DataCorruptionParams *p, uint64_t seed,
                        uint32_t group, uint32_t index);

#endif
