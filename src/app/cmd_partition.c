/* fedhet partition SRC DST.h5 [key=value ...]: a raw data set -> a partitioned HDF5 file (docs/usage.md, Data). */
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
    {"scheme", "iid", "iid | dirichlet | pathological | quantity | natural (a client per domain folder or "
                      "client_column value)"},
    {"variant", "default", "iid: niid-bench|flood|fl-simulator; dirichlet: niid-bench|prior|quality; "
                           "pathological: shard|class (docs/methods/partitions.md B.3-B.5)"},
    {"clients", "10", "number of clients K (natural: from the data)"},
    {"alpha", "0.5", "Dirichlet / quantity concentration (> 0)"},
    {"min_size", "10", "Dirichlet / quantity: smallest client allowed (resampled until it holds)"},
    {"classes_per_client", "2", "pathological: classes (shards) per client"},
    {"max_attempts", "10000", "resampling bound before an infeasible setting is reported"},
    {"seed", "0", "partition seed (Philox stream 'partition')"},
    {"corruption", "none", "none | gaussian_noise | motion_blur (docs/methods/partitions.md B.7)"},
    {"severity", "3", "corruption severity 1..5"},
    {"corrupted", "", "number of corrupted clients (the last ones); default round(corrupted_ratio * K)"},
    {"corrupted_ratio", "0.2", "share of corrupted clients when a corruption is set and corrupted is not"},
    {"format", "auto", "source format: auto | idx | cifar10 | cifar100 | hdf5 | imagefolder | domains | csv | npy | "
                       "npz"},
    {"classes", "10", "class count of IDX labels"},
    {"mean", "", "per-channel mean, comma-separated (default: computed from the training images)"},
    {"std", "", "per-channel std, comma-separated (default: computed from the training images)"},
    {"deflate", "4", "compression level 0..9"},
};
enum { N_PART_KEYS = sizeof part_keys / sizeof part_keys[0] };

static void print_help(void)
{
    int n_source_keys;
    const DataSourceKey *source_keys = data_source_keys(&n_source_keys);
    printf("usage: fedhet partition SRC DST.h5 [key=value ...] [--force]\n"
           "  Reads a raw data set, splits its training set over clients, optionally corrupts the last clients\n"
           "  and a copy of the test set, and writes DST.h5 (atomically; an existing DST needs --force), with the\n"
           "  label heterogeneity of its clients under /stats (entropy in nats, effective classes, TV and EMD to\n"
           "  the global labels, size Gini: see fedhet inspect --help), whose summary it prints.\n"
           "  SRC: fashion-mnist (= %s), a folder of IDX files (MNIST, Fashion-MNIST),\n"
           "       a folder of CIFAR-10/100 binary batches, or an HDF5 file (/train/images, /train/labels, /test/...);\n"
           "       or an image source (docs/data.md): an image folder tree ROOT/CLASS/*.{jpg,jpeg,png} (or\n"
           "       ROOT/{train,test}/CLASS/*), a domain tree ROOT/DOMAIN/CLASS/*, a label table FILE.csv, a folder of\n"
           "       .npy arrays (x_train.npy y_train.npy [x_test.npy y_test.npy], or train_images.npy ...), or FILE.npz.\n"
           "  Image sources are streamed: images are decoded (libjpeg-turbo, libpng) and resized (libswscale) one at a\n"
           "  time in the order the file is written. Peak memory: about 30 MiB, plus about 150 bytes per image\n"
           "  (paths, labels, the partition), plus one decoded source image; never the data set itself.\n"
           "keys (default):\n",
           DATA_FASHION_MNIST_DIR);
    for (int i = 0; i < N_PART_KEYS; i++)
        printf("  %-18s (%s) %s\n", part_keys[i].key, *part_keys[i].default_text ? part_keys[i].default_text : "-",
               part_keys[i].help);
    printf("image source keys (default):\n");
    for (int i = 0; i < n_source_keys; i++)
        printf("  %-18s (%s) %s\n", source_keys[i].key, *source_keys[i].default_text ? source_keys[i].default_text : "-",
               source_keys[i].help);
    printf("example: fedhet partition fashion-mnist inputs/data/fmnist-dir0.1.h5 scheme=dirichlet alpha=0.1 clients=100\n");
}

typedef struct {
    const char *value[N_PART_KEYS];
    int given[N_PART_KEYS];
    DataSourceOptions source;
    DataPartitionSpec natural; /* split_within, split_clients */
    char source_text[2048];    /* the source keys given, for the recorded parameters */
    size_t source_used;
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
    int i = key_index(key), known = 0;
    if (i < 0) FH_CHECK(data_source_option_set(&a->source, &a->natural, key, eq + 1, &known));
    if (known) {
        if (a->source_used < sizeof a->source_text)
            a->source_used += (size_t)snprintf(a->source_text + a->source_used, sizeof a->source_text - a->source_used,
                                               " %s", arg);
        return FH_OK;
    }
    if (i < 0) {
        int n_source;
        const DataSourceKey *sk = data_source_keys(&n_source);
        const char *names[N_PART_KEYS + 64];
        for (int j = 0; j < N_PART_KEYS; j++) names[j] = part_keys[j].key;
        for (int j = 0; j < n_source && j < 64; j++) names[N_PART_KEYS + j] = sk[j].key;
        const char *near = fh_nearest_name(key, names, N_PART_KEYS + (n_source < 64 ? n_source : 64));
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
    const char *schemes[] = {"iid", "dirichlet", "pathological", "quantity", "natural"};
    int known = 0;
    for (int i = 0; i < 5; i++) known |= !strcmp(p->scheme, schemes[i]);
    if (!known) {
        const char *near = fh_nearest_name(p->scheme, schemes, 5);
        FH_FAIL(FH_ERR_USAGE, "scheme=%s is not one of iid, dirichlet, pathological, quantity, natural%s%s%s", p->scheme,
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
        FH_CHECK(parse_long(a, "corrupted", 0, strcmp(p->scheme, "natural") ? p->n_clients : 1000000, &v));
        s->file.n_corrupted = (int)v;
    } else if (!strcmp(p->scheme, "natural")) {
        s->file.n_corrupted = -1; /* from the ratio once the data gives K */
        s->file.corrupted_ratio = s->corrupted_ratio;
    } else {
        s->file.n_corrupted = (int)lround(s->corrupted_ratio * p->n_clients); /* docs/methods/partitions.md B.7: m = round(ratio K) */
    }
    p->n_corrupted = s->file.n_corrupted;
    FH_CHECK(parse_long(a, "classes", 2, 256, &s->idx_classes));
    p->split_within = a->natural.split_within;
    p->split_clients = a->natural.split_clients;
    if (strcmp(p->scheme, "natural") && p->split_within && strcmp(p->split_within, "none"))
        FH_FAIL(FH_ERR_USAGE, "split_within=%s needs scheme=natural", p->split_within);
    FH_CHECK(parse_long(a, "deflate", 0, 9, &v));
    s->file.deflate = (int)v;
    return FH_OK;
}

/* Whether a key means anything for these settings: the recorded parameters list only those. */
static int key_applies(const char *key, const PartSettings *s)
{
    const char *scheme = s->file.partition.scheme;
    int label_skew = !strcmp(scheme, "dirichlet") || !strcmp(scheme, "quantity");
    if (!strcmp(scheme, "natural") && !strcmp(key, "clients")) return 0;
    if (!strcmp(key, "alpha") || !strcmp(key, "min_size") || !strcmp(key, "max_attempts"))
        return label_skew || (s->file.partition.split_within && !strcmp(s->file.partition.split_within, "dirichlet"));
    if (!strcmp(key, "classes_per_client")) return !strcmp(scheme, "pathological");
    if (!strcmp(key, "severity") || !strcmp(key, "corrupted") || !strcmp(key, "corrupted_ratio"))
        return s->file.corruption != DATA_CORRUPT_NONE;
    if (!strcmp(key, "classes")) return 0; /* IDX only; recorded by the file's classes attribute */
    return strcmp(key, "format") && strcmp(key, "deflate");
}

static int partition_run(const char *src, const char *dst, const PartArgs *a, int force)
{
    PartSettings s;
    FH_CHECK(settings_from_args(&s, a));
    struct stat st;
    if (!force && stat(dst, &st) == 0)
        FH_FAIL(FH_ERR_USAGE, "%s already exists (add --force to replace it)", dst);

    static char parameters[2048];
    size_t used = 0;
    for (int i = 0; i < N_PART_KEYS && used < sizeof parameters; i++)
        if (*a->value[i] && key_applies(part_keys[i].key, &s))
            used += (size_t)snprintf(parameters + used, sizeof parameters - used, "%s%s=%s", used ? " " : "",
                                     part_keys[i].key, a->value[i]);
    if (used < sizeof parameters) snprintf(parameters + used, sizeof parameters - used, "%s", a->source_text);
    s.file.parameters = parameters;

    DataSourceOptions source = a->source;
    source.format = val(a, "format");
    source.idx_classes = (int)s.idx_classes;
    source.seed = s.file.partition.seed;
    return data_partition_make(src, &source, dst, &s.file, a->given[key_index("mean")] ? val(a, "mean") : NULL,
                               a->given[key_index("std")] ? val(a, "std") : NULL);
}

int app_cmd_partition(int argc, char **argv)
{
    static PartArgs a;
    memset(&a, 0, sizeof a);
    data_source_options_default(&a.source);
    a.natural.split_clients = 2;
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
