/* fedhet data: dataset readers, partitions across clients, quality-shift corruptions.
 * Readers check magic numbers, dimensions and sizes and fail with FH_ERR_DATA naming the file.
 * Procedures follow docs/methods/partitions.md; random draws use Philox purpose
 * FH_RNG_PARTITION (rng.h). */
#ifndef FEDHET_DATA_H
#define FEDHET_DATA_H

#include <stdint.h>
#include <stdio.h>

#include "fedhet/config.h"

/* An image set: uint8 images [n, c, h, w] and int32 labels [n] in [0, classes). The images are either in
 * memory (images) or streamed from the source one row at a time (images NULL, fetch): the image sources of
 * data_source_open decode a file per call, so a data set never has to fit in memory. A set made by hand
 * starts zeroed: the fields it does not use must be NULL / 0. */
typedef struct {
    int64_t n;
    int c, h, w;
    int classes;
    uint8_t *images;
    int32_t *labels;
    /* row -> image [c, h, w]; FH_ERR_DATA naming the file that cannot be decoded */
    int (*fetch)(void *ctx, int64_t row, uint8_t *image);
    void *fetch_ctx;
    /* natural groups (a client column's values, or domain folders): group of each row [n] or NULL, and
     * the names of every group of the source (borrowed from it) */
    int32_t *groups;
    int n_groups;
    char *const *group_names;
    /* provenance (the image sources; NULL from the other readers): each row's index in the source's listing [n]
     * (every image the source lists, in its reading order, before splits and skips), each row's file [n] (the
     * strings borrowed from the source; NULL for arrays), and the class names [classes] (borrowed) */
    int64_t *source_index;
    const char **paths;
    char *const *class_names;
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

/* ---- more readers (docs/methods/partitions.md B.1) ----------------------------------------------------------------------- */

/* CIFAR binary batches in dir: CIFAR-10 (classes 10) data_batch_1..5.bin + test_batch.bin, records of
 * 1 label byte + 3072 pixel bytes; CIFAR-100 (classes 100) train.bin + test.bin, records of coarse and
 * fine label bytes + 3072 pixels (the fine label is used). Images come out [n, 3, 32, 32]. */
int data_cifar_read(DataImageSet *train, DataImageSet *test, const char *dir, int classes);

/* A user's own image set in HDF5: /train/images uint8 [N,C,H,W] (or [N,H,W,C] when the dataset has the
 * string attribute layout = "NHWC"), /train/labels integer [N]; optional /test/images, /test/labels
 * (test->n == 0 when absent); optional integer attribute `classes` on /train/labels, else max label + 1.
 * Images come out [n, c, h, w]. */
int data_hdf5_read(DataImageSet *train, DataImageSet *test, const char *path);

/* ---- partitions (docs/methods/partitions.md B.3 - B.6) -------------------------------------------------------------------- */

typedef struct {
    const char *scheme;  /* "iid" | "dirichlet" | "pathological" | "quantity" | "natural" */
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
    /* natural: a client per group present in groups [n] (ascending group id); with split_within "iid" or
     * "dirichlet" each group is split again into split_clients clients by that scheme (alpha, min_size) */
    const int32_t *groups;
    int n_groups;
    const char *split_within; /* NULL or "none" = one client per group */
    int split_clients;
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

/* ---- quality shift (docs/methods/partitions.md B.7) ------------------------------------------------------------------------ */

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

/* ---- sources ------------------------------------------------------------------------------------------ */

/* Reads a raw data set. src: a folder of IDX files (train-/t10k- images and labels, .gz or raw), a folder
 * of CIFAR-10 (data_batch_1.bin ...) or CIFAR-100 (train.bin, test.bin) batches, an HDF5 file (data.h
 * layout above), or the names "fashion-mnist" (DATA_FASHION_MNIST_DIR). format: "auto" (or NULL) detects
 * from the content, else "idx" | "cifar10" | "cifar100" | "hdf5". idx_classes: the class count of IDX
 * labels. *format_used names what was read. */
int data_source_read(DataImageSet *train, DataImageSet *test, const char *src, const char *format, int idx_classes,
                     const char **format_used);

/* ---- image sources: folders of images, label tables, NumPy arrays (docs/data.md) ------------------------ */

typedef enum { DATA_RESIZE_SHORTER = 0, DATA_RESIZE_EXACT, DATA_RESIZE_NONE } DataResize;

typedef struct {
    int size;           /* output side; 0 = every image keeps its (common) size */
    DataResize resize;  /* shorter: shorter side to size (aspect kept); exact: size x size; none */
    int crop_center;    /* centre crop to size x size after the resize */
    int channels;       /* 1 or 3; 0 = 3 when any image is colour, else 1 */
    int shrink_on_load; /* JPEG DCT scaling before the resize (faster; on by default) */
    int exif_orientation; /* 1: images turned upright by their EXIF orientation tag (PIL's exif_transpose) */
    int64_t max_pixels; /* the most pixels (width x height) an image may have, checked from its header; 0: any */
} DataImageOptions;

/* How data_source_open reads a source; strings may be NULL or "" for unset. */
typedef struct {
    const char *format; /* auto | idx | cifar10 | cifar100 | hdf5 | imagefolder | domains | csv | npy | npz */
    int idx_classes;    /* class count of IDX labels */
    DataImageOptions image;
    int skip_unreadable; /* on_error = skip: unreadable images are counted, named and left out */
    /* csv: the table's columns; image paths are image_root/VALUE+image_suffix (image_root default: the
     * table's folder) */
    const char *image_root, *image_column, *image_suffix, *label_column, *label_columns, *class_names;
    const char *client_column, *split_column;
    /* npy / npz */
    const char *layout; /* auto | nhwc | nchw */
    double float_max;   /* float32 images span 0 .. float_max (1 or 255) */
    const char *normalise; /* file (computed) | imagenet | none: the mean/std recorded */
    /* test set of sources without a split: a share of each group and class (Philox purpose partition) */
    double test_fraction;
    const char *holdout_domain; /* comma-separated group names that form the test set instead */
    uint64_t seed;
} DataSourceOptions;


typedef struct DataSource DataSource;
/* Opens src by o: the formats of data_source_read (read into memory as before) or an image source, whose
 * sets stream their images through fetch (metadata only in memory: about 100 bytes per image plus one
 * decoded image). *format_used names the format read. Close with data_source_close after the sets. */
int data_source_open(DataSource **out, DataImageSet *train, DataImageSet *test, const char *src,
                     const DataSourceOptions *o, const char **format_used);
/* images left out by on_error = skip, and a line naming the first of them ("" when none) */
int64_t data_source_skipped(const DataSource *s, const char **first_names);
void data_source_close(DataSource **s);

/* ---- partitioned dataset files (docs/usage.md, Data) ------------------------------------------ */

/* Format marker and version in the root attributes `format` and `format_version`; checked on open. */
/* The most classes a partition file holds: its reader refuses more (and an image source makes no more) */
#define DATA_MAX_CLASSES (1 << 20)
#define DATA_PARTFILE_FORMAT "fedhet-partition"
#define DATA_PARTFILE_VERSION 2 /* 2: /clients/source_index indexes the source's listing, and names are stored */

typedef struct {
    const char *source;        /* recorded as given, e.g. "/usr/share/datasets/fashion-mnist" */
    const char *source_format; /* "idx" | "cifar10" | "cifar100" | "hdf5" */
    DataPartitionSpec partition;
    DataCorruption corruption; /* the last n_corrupted clients and a copy of the test set get it */
    int severity;
    int n_corrupted;
    const double *mean, *std;  /* per channel; NULL = computed from the clean training images */
    int deflate;               /* 0..9 */
    const char *parameters;    /* the resolved key=value list, recorded for `inspect` (may be NULL) */
    double corrupted_ratio;    /* > 0 with n_corrupted < 0: n_corrupted = round(ratio K) once K is known (natural) */
} DataPartFileSpec;

/* ---- the keys of a partition and of an image source (src/data/keys.c) ----
 * One table each, read by `fedhet partition` (key=value), by a run's [data] (which makes its partition file from
 * [data] source when the file does not exist yet) and by [data] source_options. */

/* The partition keys' values (section "data"), as data_partition_keys lands them */
typedef struct {
    const char *scheme, *variant, *corruption, *split_within, *format, *mean, *std;
    int clients, min_size, classes_per_client, max_attempts, split_clients, severity, corrupted, classes, deflate;
    double alpha, corrupted_ratio;
    int64_t seed; /* partition_seed */
} DataPartitionKeys;
const FhConfigKey *data_partition_keys(int *n);
/* The image source keys (section "source"), landing in DataSourceOptions (data_source_options_from) */
const FhConfigKey *data_source_keys(int *n);
/* Every key of `fedhet partition`: the partition keys, then the source keys */
const FhConfigKey *data_partition_command_keys(int *n);
/* The source keys of cfg into *o (its strings borrowed from cfg) */
void data_source_options_from(const FhConfig *cfg, DataSourceOptions *o);
/* Source keys as "key=value key=value ..." ([data] source_options) into *cfg (free it after the options' use);
 * where names the text in messages. */
int data_source_options_parse(FhConfig **cfg, const char *text, const char *where);
/* The partition keys k into the file's spec and the source's format, classes and seed, checked together (a
 * corruption count without a corruption, split_within without scheme natural, ...) before any data is read; where
 * begins the messages. */
int data_partition_spec_from(DataPartFileSpec *spec, DataSourceOptions *source, const DataPartitionKeys *k,
                             const char *where);
/* A key given on the command line (cfg: the partition keys) that these settings do not read (alpha with scheme
 * iid, severity without a corruption, ...) is FH_ERR_USAGE naming it. */
int data_partition_check_given(const FhConfig *cfg, const DataPartFileSpec *spec, const char *where);
/* The parameters recorded in the file: "key=value" of every partition key of cfg ([data]) that means something for
 * spec, then the source keys given (of source_cfg, [source]; NULL: none). */
void data_partition_parameters(const FhConfig *cfg, const FhConfig *source_cfg, const DataPartFileSpec *spec,
                               char *out, size_t cap);

/* Writes the partitioned set atomically (PATH.tmp-<pid>, fsync, rename): on failure nothing is left at
 * path. Rows are copied and corrupted a block at a time: memory beyond the inputs is one block.
 * Corruption draws: training image at stored row r uses counter (tag, 0, r), test image i (tag, 1, i).
 * The heterogeneity statistics (DataHetero) go under /stats: float64 [K] datasets label_entropy,
 * effective_classes, tv_to_global, emd_to_global and the attribute size_gini. */
int data_partfile_write(const char *path, const DataImageSet *train, const DataImageSet *test,
                        const DataPartition *part, const DataPartFileSpec *spec);

/* Reads src (data_source_read), partitions it by spec->partition, writes dst (creating its folder) and prints
 * a summary on stdout: clients, min/median/max samples and classes per client, corrupted clients, channel
 * statistics. mean_text / std_text: comma-separated per-channel values, or NULL to compute them. */
int data_partition_make(const char *src, const DataSourceOptions *o, const char *dst, DataPartFileSpec *spec,
                        const char *mean_text, const char *std_text);

/* "clients K: samples min / median / max; classes per client min / median / max" from the offsets [K+1]
 * and label counts [K, classes] of a partition. */
void data_print_client_spread(FILE *out, const int64_t *offsets, const int32_t *label_counts, int K, int classes);

typedef enum { DATA_ROWS_CLIENTS = 0, DATA_ROWS_TEST, DATA_ROWS_TEST_CORRUPTED } DataRowGroup;

/* An open partition file: metadata in memory, rows read on demand (hyperslabs). */
typedef struct {
    char *path;
    int n_clients, classes, c, h, w;
    int64_t n_rows;         /* training rows over all clients */
    int64_t n_test;         /* 0 when the source had no test set */
    int has_test_corrupted;
    int64_t *offsets;       /* [n_clients + 1] */
    int32_t *label_counts;  /* [n_clients * classes] */
    int32_t *corruption;    /* [n_clients] DataCorruption of each client */
    double *mean, *std;     /* [c] */
    char *source, *scheme, *variant, *corruption_name, *parameters;
    int severity, n_corrupted;
    int64_t seed;
    int64_t bytes_read;     /* image + label bytes read through data_partfile_read_rows */
    /* files of a source with natural groups (domains): their names, and the domain of every test row
     * (/test/domain; NULL when absent) */
    int n_domains;
    char **domain_names;
    int32_t *test_domain;
    char **class_names;     /* [classes] from /class_names; NULL when the file has none (IDX, CIFAR, HDF5 sources,
                             * format_version 1) */
    int format_version;
    struct DataPartFileH5 *h5;
} DataPartFile;

/* Opens and validates (format, version, shapes, offsets, label counts): FH_ERR_DATA naming the file. */
int data_partfile_open(DataPartFile *f, const char *path);
/* Rows [first, first + count) of a group: images [count, c, h, w], labels [count] (either may be NULL).
 * Labels are checked against classes. */
int data_partfile_read_rows(DataPartFile *f, DataRowGroup group, int64_t first, int64_t count, uint8_t *images,
                            int32_t *labels);
void data_partfile_close(DataPartFile *f);
/* Per-channel mean and population std of x/255 over the images: exact (histogram of byte values). */
void data_channel_stats(const DataImageSet *set, double *mean, double *std);

/* ---- heterogeneity statistics of a partition ---------------------------------------------------------- */

/* Per client k with n_k rows and label distribution p_k = counts[k, :] / n_k, against the pooled (global)
 * distribution q of all training rows; NAN for a client without rows. */
typedef struct {
    int n_clients, classes;
    double *entropy;           /* [K] label entropy in nats: -sum_c p_kc ln p_kc (0 ln 0 = 0), 0 .. ln C */
    double *effective_classes; /* [K] exp(entropy): 1 for one label, C for uniform labels */
    double *tv;                /* [K] total-variation distance 1/2 sum_c |p_kc - q_c|, 0 .. 1 */
    double *emd;               /* [K] earth mover's distance with ground distance |i - j| on the label index:
                                * sum_{c < C-1} |P_k(c) - Q(c)| over the cumulative distributions, 0 .. C - 1 */
    double size_gini;          /* Gini coefficient of the client sizes n_k: sum_ij |n_i - n_j| / (2 K sum n),
                                * 0 = equal sizes, (K - 1) / K = one client holds every row */
} DataHetero;

/* From the label count matrix [K, classes] alone. FH_ERR_DATA for negative counts or no rows at all. */
int data_hetero_compute(DataHetero *h, const int32_t *label_counts, int K, int classes);
void data_hetero_free(DataHetero *h);
/* min, median (the mean of the two middle values for an even count), max and mean of the finite values
 * among v[0..n); NAN when none */
void data_summary4(const double *v, int n, double out[4]);
/* The summary lines `fedhet partition` and `fedhet inspect` print: min / median / max / mean of each
 * per-client statistic and the size Gini. */
void data_print_hetero_summary(FILE *out, const DataHetero *h);
/* The statistics of an open partition file: read from /stats when the file has them (*stored = 1), else
 * computed from /clients/label_counts (*stored = 0; files written before /stats existed). A /stats group
 * of the wrong shape or with non-finite values where the client has rows is FH_ERR_DATA naming it. */
int data_partfile_hetero(DataPartFile *f, DataHetero *h, int *stored);

/* ---- batch loader (docs/methods/partitions.md B.1) ----------------------------------------------------------------------------- */

/* The training rows of the clients one rank owns, read once from the partition file (only those rows:
 * the file groups rows by client, so each client is one hyperslab), and served as normalised float
 * batches. One client is iterated at a time per loader. */
typedef struct {
    float scale_min, scale_max; /* area share of the crop (0.08, 1) */
    float ratio_min, ratio_max; /* aspect w / h (3/4, 4/3) */
    float flip;                 /* horizontal flip probability (0.5) */
} DataCropParams;

typedef struct {
    int n_owned;
    int *clients;       /* [n_owned] ascending client ids */
    int64_t *first;     /* [n_owned + 1] row of each owned client in images/labels */
    uint8_t *images;    /* owned rows [first[n_owned], c, h, w] */
    int32_t *labels;
    int c, h, w, n_clients;
    int augment;        /* random crop (zero padding 4) + horizontal flip, docs/methods/partitions.md B.1 FLOOD; above 32 x 32
                         * random-resized-crop + flip */
    DataCropParams crop;
    uint8_t *crop_out;  /* [c, h, w] one resized crop */
    struct ImgResizer *crop_resizer; /* the crop's resampler (src/data/imgsrc_internal.h) */
    float *lut;         /* [c * 256]: (v / 255 - mean[ch]) / std[ch] */
    int64_t *order;     /* [largest owned client] this epoch's row order */
    int64_t bytes_read; /* bytes this loader read from the file */
} DataLoader;

typedef struct {
    int slot;            /* index into DataLoader.clients */
    int64_t n, pos;      /* rows of the client, next position in this epoch */
    uint64_t seed;
    uint32_t client, round, epoch;
} DataBatchIter;

/* augment: 1 on, 0 off, -1 automatic (on for 3-channel 32 x 32 images and for images larger than 32 x 32,
 * off otherwise). Images up to 32 x 32 get B.1's pad-4 crop + flip; larger ones torchvision's
 * RandomResizedCrop + RandomHorizontalFlip (parameters: data_loader_set_crop). clients need not be sorted;
 * duplicates and ids outside 0..K-1 are FH_ERR_USAGE. */
int data_loader_init(DataLoader *L, DataPartFile *f, const int *clients, int n_owned, int augment);
/* RandomResizedCrop's scale and ratio ranges and the flip probability (defaults: torchvision's) */
void data_loader_set_crop(DataLoader *L, const DataCropParams *p);
/* Replaces the file's mean/std in f (in memory): "file" keeps them, "imagenet" takes ImageNet's
 * (3 channels; 1 channel: their means), "none" mean 0, std 1. FH_ERR_USAGE for another name. */
int data_normalise_set(DataPartFile *f, const char *mode);
void data_loader_free(DataLoader *L);
/* rows of an owned client, or -1 when this loader does not hold it */
int64_t data_loader_client_rows(const DataLoader *L, int client);
/* Starts epoch 0 of `client` in `round`: order = a permutation keyed by Philox (seed, shuffle) with counter
 * (client, round, epoch). FH_ERR_USAGE if the client is not owned. */
int data_loader_begin(DataLoader *L, DataBatchIter *it, int client, uint64_t seed, uint32_t round);
/* The same, starting at epoch `epoch` (an extra shuffle outside the training epochs: FedSCAM's probe uses
 * 0xFFFFFFFF). */
int data_loader_begin_epoch(DataLoader *L, DataBatchIter *it, int client, uint64_t seed, uint32_t round,
                            uint32_t epoch);
/* The next batch of up to batch_size rows into x [count, c, h, w] and y [count]; returns count (> 0 for a
 * non-empty client). The last partial batch of an epoch is kept; the next call starts the next epoch,
 * reshuffled. Augmentation draws come from (seed, augment) with counter (client, round, epoch, position). */
int64_t data_loader_next(DataLoader *L, DataBatchIter *it, int64_t batch_size, float *x, int32_t *y);
/* Rows first .. first+count-1 of an owned client in file order, normalised, never augmented (evaluation on
 * a client's own data); returns the rows written (0 for a client not held). */
int64_t data_loader_rows(const DataLoader *L, int client, int64_t first, int64_t count, float *x, int32_t *y);
/* Rows of a test group as normalised floats (no augmentation); scratch holds count images. */
int data_test_read(DataPartFile *f, const float *lut, DataRowGroup group, int64_t first, int64_t count, float *x,
                   int32_t *y, uint8_t *scratch);
/* lut [c * 256] from the file's mean and std */
void data_normal_lut(float *lut, const DataPartFile *f);

#endif
