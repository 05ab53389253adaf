/* Partitioned dataset files: the writer behind `fedhet partition` and the reader behind the batch loader
 * and `fedhet inspect`. Layout (docs/usage.md, Data):
 *   /clients/images uint8 [N,C,H,W] grouped by client, /clients/labels int32 [N],
 *   /clients/offsets int64 [K+1], /clients/label_counts int32 [K,classes], /clients/corruption int32 [K],
 *   /clients/source_index int64 [N] (the row's index in the source's listing, for provenance; format_version 1:
 *   in the training rows left after the test set was taken out), /clients/source_path strings [N] (image
 *   sources whose rows are files), /test/images, /test/labels, /test/source_index, /test/source_path,
 *   /test/domain, /test_corrupted/images, /test_corrupted/labels; /class_names strings [classes] and
 *   /domain_names strings (sources that name them);
 *   /stats/label_entropy, /stats/effective_classes, /stats/tv_to_global, /stats/emd_to_global float64 [K]
 *   and the /stats attributes size_gini and definition (a cache of data_hetero_compute on the label counts);
 *   root attributes: format, format_version, source, source_format, classes, shape, mean, std, scheme,
 *   variant, n_clients, alpha, min_size, classes_per_client, seed, corruption, severity, n_corrupted,
 *   corruption constants, parameters. */
#include "fedhet/data.h"
#include "fedhet/core.h"
#include "fedhet/h5io.h"
#include "hetero_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Chunks of about 64 KiB: a rank reading one client decompresses little beyond its rows. */
#define PARTFILE_CHUNK_BYTES ((size_t)64 << 10)
/* Rows are gathered and corrupted this many bytes at a time. */
#define PARTFILE_BLOCK_BYTES ((size_t)8 << 20)

struct DataPartFileH5 {
    FhH5File file;
    hid_t images[3], labels[3]; /* per DataRowGroup, opened lazily */
};

static const char *const group_names[3] = { "/clients", "/test", "/test_corrupted" };

/* The normalisation a reader divides by: what the writer refuses is what data_partfile_open refuses. */
static int check_channel_stats(const char *path, int c, const double *mean, const double *std)
{
    for (int ch = 0; ch < c; ch++)
        if (!(std[ch] > 0) || !isfinite(mean[ch]) || !isfinite(std[ch]))
            FH_FAIL(FH_ERR_DATA, "%s: channel %d has mean %g and std %g; need finite values and std > 0 (a constant "
                    "channel: give std=, or normalise=none, to fedhet partition)", path, ch, mean[ch], std[ch]);
    return FH_OK;
}

/* mean and population std of x/255 per channel from a histogram of byte values [c, 256]: exact */
static void stats_from_hist(const uint64_t *hist, int c, double *mean, double *std)
{
    for (int ch = 0; ch < c; ch++) {
        const uint64_t *h = hist + (size_t)ch * 256;
        double count = 0.0, sum = 0.0, sq = 0.0;
        for (int v = 0; v < 256; v++) count += (double)h[v], sum += (double)h[v] * v;
        double m = count > 0 ? sum / count : 0.0;
        for (int v = 0; v < 256; v++) sq += (double)h[v] * (v - m) * (v - m);
        mean[ch] = m / 255.0;
        std[ch] = count > 0 ? sqrt(sq / count) / 255.0 : 0.0;
    }
}

static void hist_add(uint64_t *hist, const uint8_t *image, int c, size_t plane)
{
    /* four partial counts: runs of equal pixels (smooth images) would otherwise wait on one counter */
    uint64_t part[4][256];
    for (int ch = 0; ch < c; ch++) {
        const uint8_t *p = image + (size_t)ch * plane;
        uint64_t *h = hist + (size_t)ch * 256;
        memset(part, 0, sizeof part);
        size_t j = 0;
        for (; j + 4 <= plane; j += 4) part[0][p[j]]++, part[1][p[j + 1]]++, part[2][p[j + 2]]++, part[3][p[j + 3]]++;
        for (; j < plane; j++) part[0][p[j]]++;
        for (int v = 0; v < 256; v++) h[v] += part[0][v] + part[1][v] + part[2][v] + part[3][v];
    }
}

void data_channel_stats(const DataImageSet *set, double *mean, double *std)
{
    const size_t plane = (size_t)set->h * set->w;
    uint64_t *hist = calloc((size_t)set->c * 256, sizeof *hist);
    if (!hist) {
        for (int ch = 0; ch < set->c; ch++) mean[ch] = std[ch] = NAN;
        return;
    }
    for (int64_t i = 0; i < set->n; i++) hist_add(hist, set->images + (size_t)i * set->c * plane, set->c, plane);
    stats_from_hist(hist, set->c, mean, std);
    free(hist);
}

/* Row `row` of a set, from memory or decoded by the set's source. */
static int image_of(const DataImageSet *set, int64_t row, uint8_t *out)
{
    const size_t bytes = (size_t)set->c * set->h * set->w;
    if (set->images) {
        memcpy(out, set->images + (size_t)row * bytes, bytes);
        return FH_OK;
    }
    return set->fetch(set->fetch_ctx, row, out);
}

/* ---- writing ------------------------------------------------------------------------------------------ */

static hsize_t chunk_rows(size_t row_bytes)
{
    size_t rows = PARTFILE_CHUNK_BYTES / (row_bytes ? row_bytes : 1);
    return rows ? rows : 1;
}

/* Channel statistics gathered while the clean training rows go by: each source row counted once. */
typedef struct {
    uint64_t *hist; /* [c, 256] */
    uint8_t *seen;  /* [n] source rows counted */
} RowStats;

/* Writes `count` rows of src (in the order `rows`, or 0.. when rows is NULL) to group/images and
 * group/labels, corrupting each when params is not NULL, one block at a time; stats (may be NULL) counts
 * the clean rows. */
static int write_rows(const FhH5File *f, const char *group, const DataImageSet *src, const int64_t *rows,
                      int64_t count, const DataCorruptionParams *const *params_of_row, uint64_t seed,
                      uint32_t corrupt_group, int deflate, RowStats *stats)
{
    const size_t row_bytes = (size_t)src->c * src->h * src->w;
    const hsize_t dims[4] = { (hsize_t)count, (hsize_t)src->c, (hsize_t)src->h, (hsize_t)src->w };
    const FhH5Layout layout = { chunk_rows(row_bytes), deflate, 0 };
    char name[64];
    hid_t dset;
    int32_t *labels = NULL;
    uint8_t *block = NULL;
    /* whole chunks per block: fh_h5_write_rows compresses those itself */
    int64_t block_rows = (int64_t)(PARTFILE_BLOCK_BYTES / row_bytes / layout.chunk_rows * layout.chunk_rows);
    if (block_rows < (int64_t)layout.chunk_rows) block_rows = (int64_t)layout.chunk_rows;
    if (block_rows > count) block_rows = count > 0 ? count : 1;

    snprintf(name, sizeof name, "%s/images", group);
    FH_CHECK(fh_h5_create_dataset(f, name, H5T_STD_U8LE, 4, dims, &layout, &dset));
    int status = fh_calloc(&block, (size_t)block_rows, row_bytes, "row block");
    if (status == FH_OK) status = fh_calloc(&labels, (size_t)(count > 0 ? count : 1), sizeof *labels, "labels");
    for (int64_t first = 0; status == FH_OK && first < count; first += block_rows) {
        int64_t n = count - first < block_rows ? count - first : block_rows;
        for (int64_t i = 0; i < n && status == FH_OK; i++) {
            int64_t r = first + i, src_row = rows ? rows[r] : r;
            uint8_t *dst = block + (size_t)i * row_bytes;
            if ((status = image_of(src, src_row, dst)) != FH_OK) break;
            if (stats && !stats->seen[src_row]) {
                stats->seen[src_row] = 1;
                hist_add(stats->hist, dst, src->c, (size_t)src->h * src->w);
            }
            labels[r] = src->labels[src_row];
            const DataCorruptionParams *p = params_of_row ? params_of_row[r] : NULL;
            if (p) data_corrupt_image(dst, src->c, src->h, src->w, p, seed, corrupt_group, (uint32_t)r);
        }
        if (status == FH_OK)
            status = fh_h5_write_rows(f, dset, name, H5T_NATIVE_UINT8, (hsize_t)first, (hsize_t)n, block);
    }
    H5Dclose(dset);
    if (status == FH_OK) {
        snprintf(name, sizeof name, "%s/labels", group);
        const FhH5Layout label_layout = { count > 0 ? 65536 : 0, deflate, 0 };
        status = fh_h5_write(f, name, H5T_NATIVE_INT32, H5T_STD_I32LE, 1, dims, &label_layout, labels);
    }
    fh_free(&block);
    fh_free(&labels);
    return status;
}

/* The names of the /stats datasets, in the order of the DataHetero arrays they hold */
static const char *const hetero_names[4] = { "/stats/label_entropy", "/stats/effective_classes", "/stats/tv_to_global",
                                             "/stats/emd_to_global" };

static void hetero_arrays(DataHetero *h, double *arrays[4])
{
    arrays[0] = h->entropy, arrays[1] = h->effective_classes, arrays[2] = h->tv, arrays[3] = h->emd;
}

static int write_hetero(const FhH5File *f, const int32_t *counts, int K, int classes)
{
    DataHetero h;
    FH_CHECK(data_hetero_compute(&h, counts, K, classes));
    hid_t group;
    int status = fh_h5_group(f, "/stats", &group);
    if (status != FH_OK) {
        data_hetero_free(&h);
        return status;
    }
    double *arrays[4];
    hetero_arrays(&h, arrays);
    const hsize_t dims = (hsize_t)K;
    for (int i = 0; i < 4 && status == FH_OK; i++)
        status = fh_h5_write(f, hetero_names[i], H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, 1, &dims, NULL, arrays[i]);
    if (status == FH_OK) status = fh_h5_attr_write_doubles(f, group, "size_gini", &h.size_gini, 1);
    if (status == FH_OK)
        status = fh_h5_attr_write_string(f, group, "definition",
                                         "per client against the pooled training labels: label entropy in nats, "
                                         "effective classes = exp(entropy), total variation, earth mover's distance "
                                         "with ground distance |i - j| on the label index; size_gini: Gini "
                                         "coefficient of the client sizes");
    H5Gclose(group);
    data_hetero_free(&h);
    return status;
}

/* The provenance of rows (in the order rows, or 0.. when NULL) of set: the source's listing index, and the file
 * where the source has files. Sources without a listing of their own (IDX, CIFAR, HDF5) list the training set and
 * then the test set, so a row's index is its row, plus first_index for the test set. */
typedef struct {
    const DataImageSet *set;
    const int64_t *rows;
} RowsOf;

static const char *path_of_row(const void *ctx, int64_t i)
{
    const RowsOf *r = ctx;
    return r->set->paths[r->rows ? r->rows[i] : i];
}

static const char *string_at(const void *ctx, int64_t i) { return ((char *const *)ctx)[i]; }

static int write_provenance(const FhH5File *f, const char *group, const DataImageSet *set, const int64_t *rows,
                            int64_t count, int64_t first_index, int deflate)
{
    int64_t *index = NULL;
    char name[64];
    FH_CHECK(fh_calloc(&index, (size_t)(count > 0 ? count : 1), sizeof *index, "source indices"));
    for (int64_t i = 0; i < count; i++) {
        const int64_t row = rows ? rows[i] : i;
        index[i] = set->source_index ? set->source_index[row] : first_index + row;
    }
    const hsize_t dims = (hsize_t)count;
    const FhH5Layout layout = { count > 0 ? 65536 : 0, deflate, 0 };
    snprintf(name, sizeof name, "%s/source_index", group);
    int status = fh_h5_write(f, name, H5T_NATIVE_INT64, H5T_STD_I64LE, 1, &dims, &layout, index);
    fh_free(&index);
    const RowsOf of = { set, rows };
    snprintf(name, sizeof name, "%s/source_path", group);
    if (status == FH_OK && set->paths) status = fh_h5_write_strings(f, name, count, path_of_row, &of, deflate);
    return status;
}

static int write_clients(const FhH5File *f, const DataImageSet *train, const DataPartition *part,
                         const DataPartFileSpec *spec, const DataCorruptionParams *corrupt, RowStats *stats)
{
    const int K = part->n_clients, classes = train->classes;
    const int64_t n = part->offsets[K];
    const int first_corrupted = K - spec->n_corrupted;
    int32_t *counts = NULL, *corruption = NULL;
    const DataCorruptionParams **params_of_row = NULL;
    hid_t group;
    FH_CHECK(fh_h5_group(f, "/clients", &group));
    H5Gclose(group);
    int status = fh_calloc(&counts, (size_t)K * classes, sizeof *counts, "label counts");
    if (status == FH_OK) status = fh_calloc(&corruption, (size_t)K, sizeof *corruption, "client corruption");
    if (status == FH_OK && spec->corruption != DATA_CORRUPT_NONE)
        status = fh_calloc(&params_of_row, (size_t)(n > 0 ? n : 1), sizeof *params_of_row, "corrupted rows");
    for (int k = 0; k < K && status == FH_OK; k++) {
        int corrupted = spec->corruption != DATA_CORRUPT_NONE && k >= first_corrupted;
        corruption[k] = corrupted ? (int32_t)spec->corruption : 0;
        for (int64_t r = part->offsets[k]; r < part->offsets[k + 1]; r++) {
            counts[(size_t)k * classes + train->labels[part->indices[r]]]++;
            if (corrupted) params_of_row[r] = corrupt;
        }
    }
    if (status == FH_OK)
        status = write_rows(f, "/clients", train, part->indices, n, params_of_row, spec->partition.seed, 0, spec->deflate,
                            stats);
    const hsize_t dims_offsets = (hsize_t)K + 1, dims_counts[2] = { (hsize_t)K, (hsize_t)classes },
                  dims_k = (hsize_t)K;
    if (status == FH_OK)
        status = fh_h5_write(f, "/clients/offsets", H5T_NATIVE_INT64, H5T_STD_I64LE, 1, &dims_offsets, NULL,
                             part->offsets);
    if (status == FH_OK)
        status = fh_h5_write(f, "/clients/label_counts", H5T_NATIVE_INT32, H5T_STD_I32LE, 2, dims_counts, NULL, counts);
    if (status == FH_OK)
        status = fh_h5_write(f, "/clients/corruption", H5T_NATIVE_INT32, H5T_STD_I32LE, 1, &dims_k, NULL, corruption);
    /* without training rows there is no label distribution to measure */
    if (status == FH_OK && n > 0) status = write_hetero(f, counts, K, classes);
    if (status == FH_OK) status = write_provenance(f, "/clients", train, part->indices, n, 0, spec->deflate);
    fh_free(&counts);
    fh_free(&corruption);
    fh_free(&params_of_row);
    return status;
}

static int write_test(const FhH5File *f, const DataImageSet *test, int64_t n_train, const DataPartFileSpec *spec,
                      const DataCorruptionParams *corrupt)
{
    hid_t group;
    FH_CHECK(fh_h5_group(f, "/test", &group));
    H5Gclose(group);
    FH_CHECK(write_rows(f, "/test", test, NULL, test->n, NULL, 0, 1, spec->deflate, NULL));
    FH_CHECK(write_provenance(f, "/test", test, NULL, test->n, n_train, spec->deflate));
    if (test->groups) {
        /* the domain of every test row, for per-domain accuracy */
        const hsize_t dims = (hsize_t)test->n;
        const FhH5Layout layout = { 65536, spec->deflate, 0 };
        FH_CHECK(fh_h5_write(f, "/test/domain", H5T_NATIVE_INT32, H5T_STD_I32LE, 1, &dims, &layout, test->groups));
    }
    if (spec->corruption == DATA_CORRUPT_NONE) return FH_OK;
    const DataCorruptionParams **every = NULL;
    FH_CHECK(fh_calloc(&every, (size_t)test->n, sizeof *every, "corrupted test rows"));
    for (int64_t i = 0; i < test->n; i++) every[i] = corrupt;
    int status = fh_h5_group(f, "/test_corrupted", &group);
    if (status == FH_OK) {
        H5Gclose(group);
        status = write_rows(f, "/test_corrupted", test, NULL, test->n, every, spec->partition.seed, 1, spec->deflate,
                            NULL);
    }
    fh_free(&every);
    return status;
}

static int write_attributes(const FhH5File *f, const DataImageSet *train, const DataPartition *part,
                            const DataPartFileSpec *spec, const double *mean, const double *std,
                            const DataCorruptionParams *corrupt)
{
    const DataPartitionSpec *ps = &spec->partition;
    const hid_t root = f->id;
    const int64_t version = DATA_PARTFILE_VERSION, classes = train->classes,
                  shape[3] = { train->c, train->h, train->w }, k = part->n_clients, min_size = ps->min_size,
                  per_client = ps->classes_per_client, seed = (int64_t)ps->seed, severity = spec->severity,
                  n_corrupted = spec->n_corrupted;
    const double corruption_constants[3] = { corrupt->sigma, corrupt->radius, corrupt->blur_sigma };
    FH_CHECK(fh_h5_attr_write_string(f, root, "format", DATA_PARTFILE_FORMAT));
    FH_CHECK(fh_h5_attr_write_int64s(f, root, "format_version", &version, 1));
    FH_CHECK(fh_h5_attr_write_string(f, root, "source", spec->source ? spec->source : ""));
    FH_CHECK(fh_h5_attr_write_string(f, root, "source_format", spec->source_format ? spec->source_format : ""));
    FH_CHECK(fh_h5_attr_write_int64s(f, root, "classes", &classes, 1));
    FH_CHECK(fh_h5_attr_write_int64s(f, root, "shape", shape, 3));
    FH_CHECK(fh_h5_attr_write_doubles(f, root, "mean", mean, train->c));
    FH_CHECK(fh_h5_attr_write_doubles(f, root, "std", std, train->c));
    FH_CHECK(fh_h5_attr_write_string(f, root, "scheme", ps->scheme));
    FH_CHECK(fh_h5_attr_write_string(f, root, "variant", ps->variant ? ps->variant : ""));
    FH_CHECK(fh_h5_attr_write_int64s(f, root, "n_clients", &k, 1));
    FH_CHECK(fh_h5_attr_write_doubles(f, root, "alpha", &ps->alpha, 1));
    FH_CHECK(fh_h5_attr_write_int64s(f, root, "min_size", &min_size, 1));
    FH_CHECK(fh_h5_attr_write_int64s(f, root, "classes_per_client", &per_client, 1));
    FH_CHECK(fh_h5_attr_write_int64s(f, root, "seed", &seed, 1));
    FH_CHECK(fh_h5_attr_write_string(f, root, "corruption", data_corruption_name(spec->corruption)));
    FH_CHECK(fh_h5_attr_write_int64s(f, root, "severity", &severity, 1));
    FH_CHECK(fh_h5_attr_write_int64s(f, root, "n_corrupted", &n_corrupted, 1));
    FH_CHECK(fh_h5_attr_write_doubles(f, root, "corruption_sigma_radius_blursigma", corruption_constants, 3));
    FH_CHECK(fh_h5_attr_write_string(f, root, "parameters", spec->parameters ? spec->parameters : ""));
    if (train->n_groups > 0) {
        /* the names of the natural groups (domains, client column values), one a line, in id order */
        size_t len = 1;
        for (int g = 0; g < train->n_groups; g++) len += strlen(train->group_names[g]) + 1;
        char *text = calloc(len, 1);
        if (!text) FH_FAIL(FH_ERR_MEMORY, "out of memory for the domain names");
        for (int g = 0; g < train->n_groups; g++) strcat(strcat(text, train->group_names[g]), "\n");
        /* the attribute for the scripts that read it; /domain_names is what the reader reads */
        int status = fh_h5_attr_write_string(f, root, "domains", text);
        free(text);
        FH_CHECK(status);
        FH_CHECK(fh_h5_write_strings(f, "/domain_names", train->n_groups, string_at, train->group_names, spec->deflate));
    }
    if (train->class_names)
        FH_CHECK(fh_h5_write_strings(f, "/class_names", train->classes, string_at, train->class_names, spec->deflate));
    return FH_OK;
}

static int check_write_inputs(const char *path, const DataImageSet *train, const DataImageSet *test,
                              const DataPartition *part, const DataPartFileSpec *spec)
{
    const int K = part->n_clients;
    if (K < 1 || part->offsets[0] != 0)
        FH_FAIL(FH_ERR_USAGE, "%s: the partition has %d clients and starts at %lld", path, K,
                (long long)(K >= 1 ? part->offsets[0] : 0));
    for (int k = 0; k < K; k++)
        if (part->offsets[k + 1] < part->offsets[k])
            FH_FAIL(FH_ERR_USAGE, "%s: partition offsets decrease at client %d", path, k);
    for (int64_t r = 0; r < part->offsets[K]; r++)
        if (part->indices[r] < 0 || part->indices[r] >= train->n)
            FH_FAIL(FH_ERR_USAGE, "%s: partition row %lld points outside the training set", path, (long long)r);
    if (spec->n_corrupted < 0 || spec->n_corrupted > K)
        FH_FAIL(FH_ERR_USAGE, "%s: %d corrupted clients out of %d", path, spec->n_corrupted, K);
    if (spec->deflate < 0 || spec->deflate > 9) FH_FAIL(FH_ERR_USAGE, "%s: deflate level %d (need 0..9)", path, spec->deflate);
    if (test->n > 0 && (test->c != train->c || test->h != train->h || test->w != train->w))
        FH_FAIL(FH_ERR_DATA, "%s: test images are %dx%dx%d but training images %dx%dx%d", path, test->c, test->h,
                test->w, train->c, train->h, train->w);
    return FH_OK;
}

int data_partfile_write(const char *path, const DataImageSet *train, const DataImageSet *test,
                        const DataPartition *part, const DataPartFileSpec *spec)
{
    FH_CHECK(check_write_inputs(path, train, test, part, spec));
    DataCorruptionParams corrupt;
    FH_CHECK(data_corruption_params(&corrupt, spec->corruption, spec->severity, train->h, train->w));
    double *mean = NULL, *std = NULL;
    RowStats stats = { NULL, NULL };
    uint8_t *image = NULL;
    int status = fh_calloc(&mean, (size_t)train->c, sizeof *mean, "channel means");
    if (status == FH_OK) status = fh_calloc(&std, (size_t)train->c, sizeof *std, "channel stds");
    if (status == FH_OK) status = fh_calloc(&stats.hist, (size_t)train->c * 256, sizeof *stats.hist, "histogram");
    if (status == FH_OK) status = fh_calloc(&stats.seen, (size_t)(train->n ? train->n : 1), 1, "rows counted");
    if (status == FH_OK) status = fh_calloc(&image, (size_t)train->c * train->h * train->w, 1, "image");

    FhH5Quiet quiet;
    fh_h5_quiet_begin(&quiet);
    FhH5File f;
    int created = 0;
    if (status == FH_OK) status = fh_h5_create(&f, path, FH_ERR_IO);
    created = status == FH_OK;
    if (status == FH_OK) status = write_clients(&f, train, part, spec, &corrupt, &stats);
    if (status == FH_OK && test->n > 0) status = write_test(&f, test, train->n, spec, &corrupt);
    /* the statistics cover every clean training row, also those no client holds */
    for (int64_t r = 0; status == FH_OK && r < train->n; r++)
        if (!stats.seen[r] && (status = image_of(train, r, image)) == FH_OK)
            hist_add(stats.hist, image, train->c, (size_t)train->h * train->w);
    if (status == FH_OK) {
        stats_from_hist(stats.hist, train->c, mean, std);
        for (int ch = 0; ch < train->c; ch++) {
            if (spec->mean) mean[ch] = spec->mean[ch];
            if (spec->std) std[ch] = spec->std[ch];
        }
        /* checked before the file is put in place: a file its reader refuses is never written */
        status = check_channel_stats(path, train->c, mean, std);
    }
    if (status == FH_OK) status = write_attributes(&f, train, part, spec, mean, std, &corrupt);
    if (status == FH_OK) status = fh_h5_commit(&f);
    else if (created) fh_h5_discard(&f);
    fh_h5_quiet_end(&quiet);
    fh_free(&mean);
    fh_free(&std);
    fh_free(&stats.hist);
    fh_free(&stats.seen);
    fh_free(&image);
    if (status != FH_OK) return fh_error_trace(status, __FILE__, __LINE__, "data_partfile_write");
    return FH_OK;
}

/* ---- reading ------------------------------------------------------------------------------------------- */

static int read_string_attr(DataPartFile *f, const char *name, char **out)
{
    return fh_h5_attr_read_string(&f->h5->file, f->h5->file.id, name, out);
}

static int read_int_attr(DataPartFile *f, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    FH_CHECK(fh_h5_attr_read_int64s(&f->h5->file, f->h5->file.id, name, out, 1));
    if (*out < lo || *out > hi)
        FH_FAIL(FH_ERR_DATA, "%s: attribute %s = %lld is out of range (need %lld..%lld)", f->path, name,
                (long long)*out, (long long)lo, (long long)hi);
    return FH_OK;
}

/* The group's images and labels datasets: shapes checked against the file's shape; *rows their length. */
static int open_group(DataPartFile *f, DataRowGroup g, int64_t *rows)
{
    FhH5File *h = &f->h5->file;
    char name[64];
    hsize_t dims[4], ldims[1];
    snprintf(name, sizeof name, "%s/images", group_names[g]);
    FH_CHECK(fh_h5_open_checked(h, name, H5T_INTEGER, 1, 4, dims, &f->h5->images[g]));
    if (dims[1] != (hsize_t)f->c || dims[2] != (hsize_t)f->h || dims[3] != (hsize_t)f->w)
        FH_FAIL(FH_ERR_DATA, "%s: %s is [%llu,%llu,%llu,%llu] but the shape attribute says %dx%dx%d", f->path, name,
                (unsigned long long)dims[0], (unsigned long long)dims[1], (unsigned long long)dims[2],
                (unsigned long long)dims[3], f->c, f->h, f->w);
    snprintf(name, sizeof name, "%s/labels", group_names[g]);
    FH_CHECK(fh_h5_open_checked(h, name, H5T_INTEGER, 0, 1, ldims, &f->h5->labels[g]));
    if (ldims[0] != dims[0])
        FH_FAIL(FH_ERR_DATA, "%s: %s has %llu rows but %s/images has %llu", f->path, name,
                (unsigned long long)ldims[0], group_names[g], (unsigned long long)dims[0]);
    *rows = (int64_t)dims[0];
    return FH_OK;
}

/* Small per-client tables: offsets must run from 0 to N without decreasing; label counts must add up to
 * each client's size. */
static int read_client_tables(DataPartFile *f)
{
    FhH5File *h = &f->h5->file;
    const int K = f->n_clients;
    hsize_t dims[2];
    hid_t d;
    FH_CHECK(fh_h5_open_checked(h, "/clients/offsets", H5T_INTEGER, 0, 1, dims, &d));
    H5Dclose(d);
    if (dims[0] != (hsize_t)K + 1)
        FH_FAIL(FH_ERR_DATA, "%s: /clients/offsets has %llu entries; need n_clients + 1 = %d", f->path,
                (unsigned long long)dims[0], K + 1);
    FH_CHECK(fh_calloc(&f->offsets, (size_t)K + 1, sizeof *f->offsets, "offsets"));
    FH_CHECK(fh_h5_read_all(h, "/clients/offsets", H5T_NATIVE_INT64, f->offsets));
    if (f->offsets[0] != 0 || f->offsets[K] != f->n_rows)
        FH_FAIL(FH_ERR_DATA, "%s: /clients/offsets runs from %lld to %lld; need 0 to %lld (the rows of /clients/images)",
                f->path, (long long)f->offsets[0], (long long)f->offsets[K], (long long)f->n_rows);
    for (int k = 0; k < K; k++)
        if (f->offsets[k + 1] < f->offsets[k])
            FH_FAIL(FH_ERR_DATA, "%s: /clients/offsets decreases at client %d", f->path, k);

    FH_CHECK(fh_h5_open_checked(h, "/clients/label_counts", H5T_INTEGER, 0, 2, dims, &d));
    H5Dclose(d);
    if (dims[0] != (hsize_t)K || dims[1] != (hsize_t)f->classes)
        FH_FAIL(FH_ERR_DATA, "%s: /clients/label_counts is [%llu,%llu]; need [%d,%d]", f->path,
                (unsigned long long)dims[0], (unsigned long long)dims[1], K, f->classes);
    FH_CHECK(fh_calloc(&f->label_counts, (size_t)K * f->classes, sizeof *f->label_counts, "label counts"));
    FH_CHECK(fh_h5_read_all(h, "/clients/label_counts", H5T_NATIVE_INT32, f->label_counts));
    for (int k = 0; k < K; k++) {
        int64_t sum = 0;
        for (int c = 0; c < f->classes; c++) sum += f->label_counts[(size_t)k * f->classes + c];
        if (sum != f->offsets[k + 1] - f->offsets[k])
            FH_FAIL(FH_ERR_DATA, "%s: label counts of client %d add up to %lld but it has %lld rows", f->path, k,
                    (long long)sum, (long long)(f->offsets[k + 1] - f->offsets[k]));
    }

    FH_CHECK(fh_h5_open_checked(h, "/clients/corruption", H5T_INTEGER, 0, 1, dims, &d));
    H5Dclose(d);
    if (dims[0] != (hsize_t)K)
        FH_FAIL(FH_ERR_DATA, "%s: /clients/corruption has %llu entries; need %d", f->path, (unsigned long long)dims[0], K);
    FH_CHECK(fh_calloc(&f->corruption, (size_t)K, sizeof *f->corruption, "corruption"));
    FH_CHECK(fh_h5_read_all(h, "/clients/corruption", H5T_NATIVE_INT32, f->corruption));
    for (int k = 0; k < K; k++)
        if (f->corruption[k] < DATA_CORRUPT_NONE || f->corruption[k] > DATA_CORRUPT_MOTION_BLUR)
            FH_FAIL(FH_ERR_DATA, "%s: /clients/corruption[%d] = %d is not a known corruption", f->path, k,
                    (int)f->corruption[k]);
    return FH_OK;
}

/* /test/domain: a domain of the file's names for every test row */
static int open_test_domain(DataPartFile *f)
{
    FhH5File *h = &f->h5->file;
    int has = 0;
    if (f->n_test > 0) FH_CHECK(fh_h5_exists(h, "/test/domain", &has));
    if (!has) return FH_OK;
    hsize_t dims[1];
    hid_t d;
    FH_CHECK(fh_h5_open_checked(h, "/test/domain", H5T_INTEGER, 0, 1, dims, &d));
    H5Dclose(d);
    if (dims[0] != (hsize_t)f->n_test)
        FH_FAIL(FH_ERR_DATA, "%s: /test/domain has %llu entries for %lld test rows", f->path,
                (unsigned long long)dims[0], (long long)f->n_test);
    FH_CHECK(fh_calloc(&f->test_domain, (size_t)f->n_test, sizeof *f->test_domain, "test domains"));
    FH_CHECK(fh_h5_read_all(h, "/test/domain", H5T_NATIVE_INT32, f->test_domain));
    for (int64_t i = 0; i < f->n_test; i++)
        if (f->test_domain[i] < 0 || f->test_domain[i] >= f->n_domains)
            FH_FAIL(FH_ERR_DATA, "%s: /test/domain[%lld] = %d but the file names %d domains", f->path, (long long)i,
                    (int)f->test_domain[i], f->n_domains);
    return FH_OK;
}

/* /class_names, when the source named its classes */
static int open_class_names(DataPartFile *f)
{
    FhH5File *h = &f->h5->file;
    int has;
    FH_CHECK(fh_h5_exists(h, "/class_names", &has));
    if (!has) return FH_OK;
    char **names;
    int64_t n;
    FH_CHECK(fh_h5_read_strings(h, "/class_names", &names, &n));
    if (n != f->classes) {
        fh_h5_strings_free(&names, n);
        FH_FAIL(FH_ERR_DATA, "%s: /class_names holds %lld names for %d classes", f->path, (long long)n, f->classes);
    }
    f->class_names = names;
    return FH_OK;
}

/* the domain names (/domain_names; files of format_version 1: the "domains" attribute, names one a line) and
 * /test/domain, when the source had natural groups */
static int open_domains(DataPartFile *f)
{
    FhH5File *h = &f->h5->file;
    int has_names;
    FH_CHECK(fh_h5_exists(h, "/domain_names", &has_names));
    if (has_names) {
        char **names;
        int64_t n;
        FH_CHECK(fh_h5_read_strings(h, "/domain_names", &names, &n));
        if (n > INT32_MAX) {
            fh_h5_strings_free(&names, n);
            FH_FAIL(FH_ERR_DATA, "%s: /domain_names holds %lld names", f->path, (long long)n);
        }
        f->domain_names = names;
        f->n_domains = (int)n;
        return open_test_domain(f);
    }
    if (H5Aexists(h->id, "domains") <= 0) return FH_OK;
    char *text = NULL;
    FH_CHECK(read_string_attr(f, "domains", &text));
    int n = 0;
    for (const char *p = text; *p; p++) n += *p == '\n';
    int status = fh_calloc(&f->domain_names, (size_t)(n ? n : 1), sizeof *f->domain_names, "domain names");
    for (char *save = NULL, *tok = status == FH_OK ? strtok_r(text, "\n", &save) : NULL; tok && f->n_domains < n;
         tok = strtok_r(NULL, "\n", &save))
        if (!(f->domain_names[f->n_domains++] = strdup(tok)))
            status = fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory for domain names");
    free(text);
    FH_CHECK(status);
    return open_test_domain(f);
}

static int open_into(DataPartFile *f, const char *path)
{
    FhH5File *h = &f->h5->file;
    FH_CHECK(fh_h5_open(h, f->path, FH_ERR_DATA));
    char *format = NULL;
    int status = read_string_attr(f, "format", &format);
    if (status != FH_OK || strcmp(format, DATA_PARTFILE_FORMAT) != 0) {
        free(format);
        FH_FAIL(FH_ERR_DATA, "%s: not a fedhet partition file (no format = \"%s\" attribute; write one with "
                "`fedhet partition`)", path, DATA_PARTFILE_FORMAT);
    }
    free(format);
    int64_t version, classes, shape[3], k, severity, n_corrupted;
    FH_CHECK(read_int_attr(f, "format_version", 1, INT32_MAX, &version));
    if (version > DATA_PARTFILE_VERSION)
        FH_FAIL(FH_ERR_DATA, "%s: format_version %lld, written by a newer fedhet (this one reads 1..%d): make it again "
                "with this fedhet's `fedhet partition`, or use the newer one", path, (long long)version,
                DATA_PARTFILE_VERSION);
    f->format_version = (int)version;
    FH_CHECK(read_int_attr(f, "classes", 2, DATA_MAX_CLASSES, &classes));
    FH_CHECK(fh_h5_attr_read_int64s(h, h->id, "shape", shape, 3));
    for (int i = 0; i < 3; i++)
        if (shape[i] < 1 || shape[i] > 65536)
            FH_FAIL(FH_ERR_DATA, "%s: attribute shape = %lldx%lldx%lld is not a plausible image shape", path,
                    (long long)shape[0], (long long)shape[1], (long long)shape[2]);
    FH_CHECK(read_int_attr(f, "n_clients", 1, INT32_MAX - 1, &k));
    FH_CHECK(read_int_attr(f, "seed", INT64_MIN, INT64_MAX, &f->seed));
    FH_CHECK(read_int_attr(f, "severity", 0, 5, &severity));
    FH_CHECK(read_int_attr(f, "n_corrupted", 0, k, &n_corrupted));
    f->classes = (int)classes;
    f->c = (int)shape[0];
    f->h = (int)shape[1];
    f->w = (int)shape[2];
    f->n_clients = (int)k;
    f->severity = (int)severity;
    f->n_corrupted = (int)n_corrupted;
    FH_CHECK(fh_calloc(&f->mean, (size_t)f->c, sizeof *f->mean, "mean"));
    FH_CHECK(fh_calloc(&f->std, (size_t)f->c, sizeof *f->std, "std"));
    FH_CHECK(fh_h5_attr_read_doubles(h, h->id, "mean", f->mean, f->c));
    FH_CHECK(fh_h5_attr_read_doubles(h, h->id, "std", f->std, f->c));
    FH_CHECK(check_channel_stats(path, f->c, f->mean, f->std));
    FH_CHECK(read_string_attr(f, "source", &f->source));
    FH_CHECK(read_string_attr(f, "scheme", &f->scheme));
    FH_CHECK(read_string_attr(f, "variant", &f->variant));
    FH_CHECK(read_string_attr(f, "corruption", &f->corruption_name));
    FH_CHECK(read_string_attr(f, "parameters", &f->parameters));

    FH_CHECK(open_group(f, DATA_ROWS_CLIENTS, &f->n_rows));
    FH_CHECK(read_client_tables(f));
    int has_test, has_corrupted;
    FH_CHECK(fh_h5_exists(h, "/test", &has_test));
    if (has_test) FH_CHECK(open_group(f, DATA_ROWS_TEST, &f->n_test));
    FH_CHECK(fh_h5_exists(h, "/test_corrupted", &has_corrupted));
    if (has_corrupted) {
        int64_t n;
        FH_CHECK(open_group(f, DATA_ROWS_TEST_CORRUPTED, &n));
        if (n != f->n_test)
            FH_FAIL(FH_ERR_DATA, "%s: /test_corrupted has %lld rows but /test has %lld", path, (long long)n,
                    (long long)f->n_test);
        f->has_test_corrupted = 1;
    }
    FH_CHECK(open_class_names(f));
    return open_domains(f);
}

int data_partfile_open(DataPartFile *f, const char *path)
{
    memset(f, 0, sizeof *f);
    FH_CHECK(fh_calloc(&f->h5, 1, sizeof *f->h5, "partition file handle"));
    for (int g = 0; g < 3; g++) f->h5->images[g] = f->h5->labels[g] = H5I_INVALID_HID;
    f->h5->file.id = H5I_INVALID_HID;
    f->path = strdup(path ? path : "");
    if (!f->path) {
        data_partfile_close(f);
        FH_FAIL(FH_ERR_MEMORY, "out of memory opening %s", path);
    }
    FhH5Quiet quiet;
    fh_h5_quiet_begin(&quiet);
    int status = open_into(f, f->path);
    fh_h5_quiet_end(&quiet);
    if (status != FH_OK) {
        data_partfile_close(f);
        return fh_error_trace(status, __FILE__, __LINE__, "data_partfile_open");
    }
    return FH_OK;
}

static int read_hetero(DataPartFile *f, DataHetero *h)
{
    FhH5File *file = &f->h5->file;
    const int K = f->n_clients;
    FH_CHECK(data_hetero_alloc(h, K, f->classes));
    double *arrays[4];
    hetero_arrays(h, arrays);
    for (int i = 0; i < 4; i++) {
        hsize_t dims[1];
        hid_t d;
        FH_CHECK(fh_h5_open_checked(file, hetero_names[i], H5T_FLOAT, 0, 1, dims, &d));
        H5Dclose(d);
        if (dims[0] != (hsize_t)K)
            FH_FAIL(FH_ERR_DATA, "%s: %s has %llu entries; need n_clients = %d", f->path, hetero_names[i],
                    (unsigned long long)dims[0], K);
        FH_CHECK(fh_h5_read_all(file, hetero_names[i], H5T_NATIVE_DOUBLE, arrays[i]));
        for (int k = 0; k < K; k++)
            if (f->offsets[k + 1] > f->offsets[k] && !isfinite(arrays[i][k]))
                FH_FAIL(FH_ERR_DATA, "%s: %s[%d] = %g but client %d has rows", f->path, hetero_names[i], k,
                        arrays[i][k], k);
    }
    hid_t group = H5Gopen2(file->id, "/stats", H5P_DEFAULT);
    if (group < 0) FH_FAIL(FH_ERR_DATA, "%s: cannot open /stats", f->path);
    int status = fh_h5_attr_read_doubles(file, group, "size_gini", &h->size_gini, 1);
    H5Gclose(group);
    FH_CHECK(status);
    if (!(h->size_gini >= 0 && h->size_gini <= 1))
        FH_FAIL(FH_ERR_DATA, "%s: /stats attribute size_gini = %g (need 0..1)", f->path, h->size_gini);
    return FH_OK;
}

int data_partfile_hetero(DataPartFile *f, DataHetero *h, int *stored)
{
    memset(h, 0, sizeof *h);
    *stored = 0;
    FhH5Quiet quiet;
    fh_h5_quiet_begin(&quiet);
    int has_stats = 0;
    int status = fh_h5_exists(&f->h5->file, "/stats", &has_stats);
    if (status == FH_OK && has_stats) {
        status = read_hetero(f, h);
        if (status != FH_OK) data_hetero_free(h);
        else *stored = 1;
    }
    fh_h5_quiet_end(&quiet);
    FH_CHECK(status);
    if (*stored) return FH_OK;
    if (f->n_rows == 0) FH_FAIL(FH_ERR_DATA, "%s: no training rows: no label distribution to measure", f->path);
    FH_CHECK(data_hetero_compute(h, f->label_counts, f->n_clients, f->classes));
    return FH_OK;
}

int data_partfile_read_rows(DataPartFile *f, DataRowGroup group, int64_t first, int64_t count, uint8_t *images,
                            int32_t *labels)
{
    const int64_t total = group == DATA_ROWS_CLIENTS ? f->n_rows : f->n_test;
    if (group == DATA_ROWS_TEST_CORRUPTED && !f->has_test_corrupted)
        FH_FAIL(FH_ERR_DATA, "%s: has no corrupted test set (it was partitioned without a corruption)", f->path);
    if (group != DATA_ROWS_CLIENTS && f->n_test == 0)
        FH_FAIL(FH_ERR_DATA, "%s: has no test set", f->path);
    if (first < 0 || count < 0 || first + count > total)
        FH_FAIL(FH_ERR_USAGE, "%s: rows %lld..%lld of %s requested but it has %lld", f->path, (long long)first,
                (long long)(first + count), group_names[group], (long long)total);
    if (count == 0) return FH_OK;
    FhH5Quiet quiet;
    fh_h5_quiet_begin(&quiet);
    char name[64];
    int status = FH_OK;
    if (images) {
        snprintf(name, sizeof name, "%s/images", group_names[group]);
        status = fh_h5_read_rows(&f->h5->file, f->h5->images[group], name, H5T_NATIVE_UINT8, (hsize_t)first,
                                 (hsize_t)count, images);
        if (status == FH_OK) f->bytes_read += count * (int64_t)f->c * f->h * f->w;
    }
    if (status == FH_OK && labels) {
        snprintf(name, sizeof name, "%s/labels", group_names[group]);
        status = fh_h5_read_rows(&f->h5->file, f->h5->labels[group], name, H5T_NATIVE_INT32, (hsize_t)first,
                                 (hsize_t)count, labels);
        if (status == FH_OK) f->bytes_read += count * (int64_t)sizeof *labels;
        for (int64_t i = 0; status == FH_OK && i < count; i++)
            if (labels[i] < 0 || labels[i] >= f->classes)
                status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__,
                                        "%s: label %d at row %lld of %s is out of range for %d classes", f->path,
                                        (int)labels[i], (long long)(first + i), name, f->classes);
    }
    fh_h5_quiet_end(&quiet);
    return status;
}

void data_partfile_close(DataPartFile *f)
{
    if (f->h5) {
        for (int g = 0; g < 3; g++) {
            if (f->h5->images[g] >= 0) H5Dclose(f->h5->images[g]);
            if (f->h5->labels[g] >= 0) H5Dclose(f->h5->labels[g]);
        }
        if (f->h5->file.id >= 0) H5Fclose(f->h5->file.id);
        fh_free(&f->h5);
    }
    free(f->path);
    free(f->source);
    free(f->scheme);
    free(f->variant);
    free(f->corruption_name);
    free(f->parameters);
    for (int d = 0; d < f->n_domains; d++) free(f->domain_names[d]);
    fh_free(&f->domain_names);
    fh_h5_strings_free(&f->class_names, f->classes);
    fh_free(&f->test_domain);
    fh_free(&f->offsets);
    fh_free(&f->label_counts);
    fh_free(&f->corruption);
    fh_free(&f->mean);
    fh_free(&f->std);
    memset(f, 0, sizeof *f);
}
