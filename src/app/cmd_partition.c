/* fedhet partition SRC DST.h5 [key=value ...]: a raw data set -> a partitioned HDF5 file (DESIGN.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app.h"
#include "fedhet/config.h"
#include "fedhet/core.h"
#include "fedhet/data.h"

typedef struct {
    const char *key, *default_text, *help;
} PartKey;

/* One place for every key, its default and its meaning: parsing, --help and the recorded parameters. */
static const PartKey part_keys[] = {
    {"scheme", "iid", "iid | dirichlet | pathological | quantity"},
    {"variant", "default", "iid: niid-bench|flood|fl-simulator; dirichlet: niid-bench|prior|quality; "
                           "pathological: shard|class (spec B.3-B.5)"},
    {"clients", "10", "number of clients K"},
    {"alpha", "0.5", "Dirichlet / quantity concentration (> 0)"},
    {"min_size", "10", "Dirichlet / quantity: smallest client allowed (resampled until it holds)"},
    {"classes_per_client", "2", "pathological: classes (shards) per client"},
    {"max_attempts", "10000", "resampling bound before an infeasible setting is reported"},
    {"seed", "0", "partition seed (Philox stream 'partition')"},
    {"corruption", "none", "none | gaussian_noise | motion_blur (spec B.7)"},
    {"severity", "3", "corruption severity 1..5"},
    {"corrupted", "", "number of corrupted clients (the last ones); default round(corrupted_ratio * K)"},
    {"corrupted_ratio", "0.2", "share of corrupted clients when a corruption is set and corrupted is not"},
    {"format", "auto", "source format: auto | idx | cifar10 | cifar100 | hdf5"},
    {"classes", "10", "class count of IDX labels"},
    {"mean", "", "per-channel mean, comma-separated (default: computed from the training images)"},
    {"std", "", "per-channel std, comma-separated (default: computed from the training images)"},
    {"deflate", "4", "compression level 0..9"},
};
enum { N_PART_KEYS = sizeof part_keys / sizeof part_keys[0] };

static void print_help(void)
{
    printf("usage: fedhet partition SRC DST.h5 [key=value ...] [--force]\n"
           "  Reads a raw data set, splits its training set over clients, optionally corrupts the last clients\n"
           "  and a copy of the test set, and writes DST.h5 (atomically; an existing DST needs --force).\n"
           "  SRC: fashion-mnist (= %s), a folder of IDX files (MNIST, Fashion-MNIST),\n"
           "       a folder of CIFAR-10/100 binary batches, or an HDF5 file (/train/images, /train/labels, /test/...).\n"
           "keys (default):\n",
           DATA_FASHION_MNIST_DIR);
    for (int i = 0; i < N_PART_KEYS; i++)
        printf("  %-18s (%s) %s\n", part_keys[i].key, *part_keys[i].default_text ? part_keys[i].default_text : "-",
               part_keys[i].help);
    printf("example: fedhet partition fashion-mnist inputs/data/fmnist-dir0.1.h5 scheme=dirichlet alpha=0.1 clients=100\n");
}

typedef struct {
    const char *value[N_PART_KEYS];
    int given[N_PART_KEYS];
} PartArgs;

static int key_index(const char *key)
{
    for (int i = 0; i < N_PART_KEYS; i++)
        if (!strcmp(part_keys[i].key, key)) return i;
    return -1;
}

static const char *val(const PartArgs *a, const char *key) { return a->value[key_index(key)]; }

static int set_key_value(PartArgs *a, const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) FH_FAIL(FH_ERR_USAGE, "'%s' is not key=value (see fedhet partition --help)", arg);
    char key[64];
    size_t len = (size_t)(eq - arg);
    if (len >= sizeof key) FH_FAIL(FH_ERR_USAGE, "unknown key '%.*s'", (int)len, arg);
    memcpy(key, arg, len);
    key[len] = '\0';
    int i = key_index(key);
    if (i < 0) {
        const char *names[N_PART_KEYS];
        for (int j = 0; j < N_PART_KEYS; j++) names[j] = part_keys[j].key;
        const char *near = fh_nearest_name(key, names, N_PART_KEYS);
        if (near) FH_FAIL(FH_ERR_USAGE, "unknown key '%s'; did you mean '%s'?", key, near);
        FH_FAIL(FH_ERR_USAGE, "unknown key '%s' (see fedhet partition --help)", key);
    }
    a->value[i] = eq + 1;
    a->given[i] = 1;
    return FH_OK;
}

static int parse_long(const PartArgs *a, const char *key, long lo, long hi, long *out)
{
    const char *text = val(a, key);
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end) FH_FAIL(FH_ERR_USAGE, "%s=%s is not an integer", key, text);
    if (v < lo || v > hi) FH_FAIL(FH_ERR_USAGE, "%s=%ld is out of range (need %ld..%ld)", key, v, lo, hi);
    *out = v;
    return FH_OK;
}

static int parse_double(const PartArgs *a, const char *key, double lo, double hi, double *out)
{
    const char *text = val(a, key);
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v)) FH_FAIL(FH_ERR_USAGE, "%s=%s is not a finite number", key, text);
    if (v < lo || v > hi) FH_FAIL(FH_ERR_USAGE, "%s=%g is out of range (need %g..%g)", key, v, lo, hi);
    *out = v;
    return FH_OK;
}

/* "0.1,0.2,0.3" -> channels values, each > lo_exclusive */
static int parse_channels(const char *key, const char *text, int channels, double lo_exclusive, double *out)
{
    const char *p = text;
    for (int ch = 0; ch < channels; ch++) {
        char *end = NULL;
        errno = 0;
        out[ch] = strtod(p, &end);
        if (errno || end == p || !isfinite(out[ch]) || !(out[ch] > lo_exclusive))
            FH_FAIL(FH_ERR_USAGE, "%s=%s: need %d comma-separated numbers above %g (one per channel)", key, text,
                    channels, lo_exclusive);
        p = end;
        if (ch + 1 < channels) {
            if (*p != ',')
                FH_FAIL(FH_ERR_USAGE, "%s=%s: need %d comma-separated values (one per channel)", key, text, channels);
            p++;
        }
    }
    if (*p) FH_FAIL(FH_ERR_USAGE, "%s=%s: need exactly %d values (one per channel)", key, text, channels);
    return FH_OK;
}

/* Validated settings, before any data is read (so a typo costs nothing). */
typedef struct {
    DataPartFileSpec file;
    double corrupted_ratio;
    long idx_classes;
} PartSettings;

static int settings_from_args(PartSettings *s, const PartArgs *a)
{
    long v;
    memset(s, 0, sizeof *s);
    DataPartitionSpec *p = &s->file.partition;
    p->scheme = val(a, "scheme");
    const char *schemes[] = {"iid", "dirichlet", "pathological", "quantity"};
    int known = 0;
    for (int i = 0; i < 4; i++) known |= !strcmp(p->scheme, schemes[i]);
    if (!known) {
        const char *near = fh_nearest_name(p->scheme, schemes, 4);
        FH_FAIL(FH_ERR_USAGE, "scheme=%s is not one of iid, dirichlet, pathological, quantity%s%s%s", p->scheme,
                near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
    }
    p->variant = strcmp(val(a, "variant"), "default") ? val(a, "variant") : NULL;
    FH_CHECK(parse_long(a, "clients", 1, 1000000, &v));
    p->n_clients = (int)v;
    FH_CHECK(parse_double(a, "alpha", 1e-9, 1e12, &p->alpha));
    FH_CHECK(parse_long(a, "min_size", 0, 1L << 30, &v));
    p->min_size = (int)v;
    FH_CHECK(parse_long(a, "classes_per_client", 1, 1 << 20, &v));
    p->classes_per_client = (int)v;
    FH_CHECK(parse_long(a, "max_attempts", 1, 100000000, &v));
    p->max_attempts = (int)v;
    FH_CHECK(parse_long(a, "seed", 0, 2147483647L, &v));
    p->seed = (uint64_t)v;
    FH_CHECK(data_corruption_from_name(&s->file.corruption, val(a, "corruption")));
    FH_CHECK(parse_long(a, "severity", 1, 5, &v));
    s->file.severity = s->file.corruption == DATA_CORRUPT_NONE ? 0 : (int)v;
    FH_CHECK(parse_double(a, "corrupted_ratio", 0.0, 1.0, &s->corrupted_ratio));
    if (s->file.corruption == DATA_CORRUPT_NONE) {
        if (a->given[key_index("corrupted")] || a->given[key_index("corrupted_ratio")])
            FH_FAIL(FH_ERR_USAGE, "corrupted/corrupted_ratio given but corruption=none (set corruption=gaussian_noise "
                    "or motion_blur)");
        s->file.n_corrupted = 0;
    } else if (a->given[key_index("corrupted")]) {
        FH_CHECK(parse_long(a, "corrupted", 0, p->n_clients, &v));
        s->file.n_corrupted = (int)v;
    } else {
        s->file.n_corrupted = (int)lround(s->corrupted_ratio * p->n_clients); /* spec B.7: m = round(ratio K) */
    }
    p->n_corrupted = s->file.n_corrupted;
    FH_CHECK(parse_long(a, "classes", 2, 256, &s->idx_classes));
    FH_CHECK(parse_long(a, "deflate", 0, 9, &v));
    s->file.deflate = (int)v;
    return FH_OK;
}

/* Whether a key means anything for these settings: the recorded parameters list only those. */
static int key_applies(const char *key, const PartSettings *s)
{
    const char *scheme = s->file.partition.scheme;
    int label_skew = !strcmp(scheme, "dirichlet") || !strcmp(scheme, "quantity");
    if (!strcmp(key, "alpha") || !strcmp(key, "min_size") || !strcmp(key, "max_attempts")) return label_skew;
    if (!strcmp(key, "classes_per_client")) return !strcmp(scheme, "pathological");
    if (!strcmp(key, "severity") || !strcmp(key, "corrupted") || !strcmp(key, "corrupted_ratio"))
        return s->file.corruption != DATA_CORRUPT_NONE;
    return strcmp(key, "format") && strcmp(key, "deflate");
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* min / median / max of n values (sorted in place) */
static void spread(int64_t *v, int n, int64_t out[3])
{
    qsort(v, (size_t)n, sizeof *v, cmp_i64);
    out[0] = v[0];
    out[1] = v[n / 2];
    out[2] = v[n - 1];
}

static void print_summary(const DataPartition *part, const DataImageSet *train, const PartSettings *s)
{
    const int K = part->n_clients;
    int64_t *sizes = malloc((size_t)K * sizeof *sizes), *classes = malloc((size_t)K * sizeof *classes);
    int *seen = calloc((size_t)train->classes, sizeof *seen);
    if (!sizes || !classes || !seen) {
        free(sizes), free(classes), free(seen);
        return;
    }
    for (int k = 0; k < K; k++) {
        sizes[k] = part->offsets[k + 1] - part->offsets[k];
        classes[k] = 0;
        for (int64_t r = part->offsets[k]; r < part->offsets[k + 1]; r++) {
            int32_t y = train->labels[part->indices[r]];
            if (seen[y] != k + 1) {
                seen[y] = k + 1;
                classes[k]++;
            }
        }
    }
    int64_t sz[3], cl[3];
    spread(sizes, K, sz);
    spread(classes, K, cl);
    printf("clients     %d: samples min %lld / median %lld / max %lld; classes per client min %lld / median %lld / "
           "max %lld\n", K, (long long)sz[0], (long long)sz[1], (long long)sz[2], (long long)cl[0], (long long)cl[1],
           (long long)cl[2]);
    if (s->file.n_corrupted > 0)
        printf("corrupted   clients %d..%d (%d of %d): %s severity %d, and a corrupted copy of the test set\n",
               K - s->file.n_corrupted, K - 1, s->file.n_corrupted, K, data_corruption_name(s->file.corruption),
               s->file.severity);
    else printf("corrupted   none\n");
    free(sizes), free(classes), free(seen);
}

/* mkdir -p of path's folder */
static int make_parent_dirs(const char *path)
{
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) FH_FAIL(FH_ERR_USAGE, "%s: path too long", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return FH_OK;
    *slash = '\0';
    for (char *p = dir + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(dir, 0777) != 0 && errno != EEXIST)
                FH_FAIL(FH_ERR_IO, "%s: cannot create folder %s: %s", path, dir, strerror(errno));
            *p = saved;
            if (saved == '\0') break;
        }
    }
    return FH_OK;
}

static int partition_run(const char *src, const char *dst, const PartArgs *a, int force)
{
    PartSettings s;
    FH_CHECK(settings_from_args(&s, a));
    struct stat st;
    if (!force && stat(dst, &st) == 0)
        FH_FAIL(FH_ERR_USAGE, "%s already exists (add --force to replace it)", dst);

    char parameters[2048];
    size_t used = 0;
    for (int i = 0; i < N_PART_KEYS && used < sizeof parameters; i++)
        if (*a->value[i] && key_applies(part_keys[i].key, &s))
            used += (size_t)snprintf(parameters + used, sizeof parameters - used, "%s%s=%s", used ? " " : "",
                                     part_keys[i].key, a->value[i]);

    double t0 = fh_time_now();
    DataImageSet train, test;
    const char *format_used = NULL;
    FH_CHECK(data_source_read(&train, &test, src, val(a, "format"), (int)s.idx_classes, &format_used));
    printf("source      %s (%s): %lld train, %lld test, %dx%dx%d, %d classes (read in %.1f s)\n", src, format_used,
           (long long)train.n, (long long)test.n, train.c, train.h, train.w, train.classes, fh_time_now() - t0);

    double mean[256], std[256];
    int status = FH_OK;
    if (train.c > 256) status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: %d channels (at most 256)", src, train.c);
    if (status == FH_OK && a->given[key_index("mean")])
        status = parse_channels("mean", val(a, "mean"), train.c, -1e30, mean);
    if (status == FH_OK && a->given[key_index("std")]) status = parse_channels("std", val(a, "std"), train.c, 0.0, std);
    s.file.mean = a->given[key_index("mean")] ? mean : NULL;
    s.file.std = a->given[key_index("std")] ? std : NULL;
    s.file.source = src;
    s.file.source_format = format_used;
    s.file.parameters = parameters;

    DataPartition part = {0};
    double t1 = fh_time_now();
    if (status == FH_OK) status = data_partition(&part, train.labels, train.n, train.classes, &s.file.partition);
    if (status == FH_OK) {
        printf("partition   %s (%.1f s)\n", parameters, fh_time_now() - t1);
        print_summary(&part, &train, &s);
        status = make_parent_dirs(dst);
    }
    double t2 = fh_time_now();
    if (status == FH_OK) status = data_partfile_write(dst, &train, &test, &part, &s.file);
    if (status == FH_OK) {
        DataPartFile f;
        status = data_partfile_open(&f, dst);
        if (status == FH_OK) {
            printf("mean / std ");
            for (int ch = 0; ch < f.c; ch++) printf(" %.4f / %.4f", f.mean[ch], f.std[ch]);
            stat(dst, &st);
            printf("\nwrote       %s (%.1f MiB) in %.1f s; %.1f s in all\n", dst, (double)st.st_size / 1048576.0,
                   fh_time_now() - t2, fh_time_now() - t0);
            data_partfile_close(&f);
        }
    }
    data_partition_free(&part);
    data_imageset_free(&train);
    data_imageset_free(&test);
    return status;
}

int app_cmd_partition(int argc, char **argv)
{
    PartArgs a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < N_PART_KEYS; i++) a.value[i] = part_keys[i].default_text;
    const char *positional[2] = {NULL, NULL};
    int n_positional = 0, force = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help();
            return FH_OK;
        }
        if (!strcmp(argv[i], "--force")) force = 1;
        else if (argv[i][0] == '-') FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet partition --help)", argv[i]);
        else if (strchr(argv[i], '=') && n_positional == 2) FH_CHECK(set_key_value(&a, argv[i]));
        else if (n_positional < 2) positional[n_positional++] = argv[i];
        else FH_FAIL(FH_ERR_USAGE, "unexpected argument '%s' (keys are key=value)", argv[i]);
    }
    if (n_positional < 2) FH_FAIL(FH_ERR_USAGE, "need SRC and DST.h5 (see fedhet partition --help)");
    return partition_run(positional[0], positional[1], &a, force);
}
