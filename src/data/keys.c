/* The keys of a partition and of an image source, one table each: `fedhet partition` reads both, a run's [data]
 * holds the partition keys (it makes its partition file from [data] source when the file does not exist yet) and
 * [data] source_options the source keys. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/data.h"

#define AT(field) FH_CONFIG_AT(DataPartitionKeys, field)
static const FhConfigKey partition_keys[] = {
    { .section = "data", .key = "scheme", .type = FH_CFG_CHOICE, .def.s = "dirichlet", AT(scheme),
      .choices = "iid|dirichlet|pathological|quantity|natural",
      .help = "partition scheme; natural: a client per domain folder or client_column value" },
    { .section = "data", .key = "variant", .type = FH_CFG_STRING, AT(variant),
      .help = "the scheme's variant (docs/methods/partitions.md B.3-B.5): iid niid-bench|flood|fl-simulator, "
              "dirichlet niid-bench|prior|quality, pathological shard|class; empty: the scheme's default" },
    { .section = "data", .key = "clients", .type = FH_CFG_INT, .def.i = 10, .lo = 1, .hi = 1000000, AT(clients),
      .help = "number of clients K (natural: from the data)" },
    { .section = "data", .key = "alpha", .type = FH_CFG_FLOAT, .def.f = 0.5, .lo = 0, .hi = 1e12, .lo_open = 1,
      AT(alpha), .help = "Dirichlet / quantity concentration" },
    { .section = "data", .key = "min_size", .type = FH_CFG_INT, .def.i = 10, .lo = 0, .hi = 1e9, AT(min_size),
      .help = "Dirichlet / quantity: smallest client allowed (resampled until it holds)" },
    { .section = "data", .key = "classes_per_client", .type = FH_CFG_INT, .def.i = 2, .lo = 1, .hi = 1e6,
      AT(classes_per_client), .help = "pathological: classes (shards) per client" },
    { .section = "data", .key = "max_attempts", .type = FH_CFG_INT, .def.i = 10000, .lo = 1, .hi = 1e8,
      AT(max_attempts), .help = "resampling bound before an infeasible setting is reported" },
    { .section = "data", .key = "partition_seed", .type = FH_CFG_INT, .def.i = 0, .lo = 0, .hi = 2147483647, AT(seed),
      .was = "seed", .help = "partition seed (Philox stream 'partition')" },
    { .section = "data", .key = "split_within", .type = FH_CFG_CHOICE, .def.s = "none", .choices = "none|iid|dirichlet",
      AT(split_within), .help = "scheme natural: none (a client per group), or split each group again by iid or "
                                "dirichlet (alpha, min_size)" },
    { .section = "data", .key = "split_clients", .type = FH_CFG_INT, .def.i = 2, .lo = 1, .hi = 1000000,
      AT(split_clients), .help = "scheme natural with split_within: clients per group" },
    { .section = "data", .key = "corruption", .type = FH_CFG_CHOICE, .def.s = "none",
      .choices = "none|gaussian_noise|motion_blur", AT(corruption),
      .help = "quality shift of the last clients and of a copy of the test set (docs/methods/partitions.md B.7)" },
    { .section = "data", .key = "severity", .type = FH_CFG_INT, .def.i = 3, .lo = 1, .hi = 5, AT(severity),
      .help = "corruption severity" },
    { .section = "data", .key = "corrupted", .type = FH_CFG_INT, .def.i = 0, .lo = 0, .hi = 1000000, AT(corrupted),
      .help = "number of corrupted clients (the last ones); 0 with a corruption: round(corrupted_ratio K)" },
    { .section = "data", .key = "corrupted_ratio", .type = FH_CFG_FLOAT, .def.f = 0.2, .lo = 0, .hi = 1,
      AT(corrupted_ratio), .help = "share of corrupted clients when a corruption is set and corrupted is 0" },
    { .section = "data", .key = "format", .type = FH_CFG_CHOICE, .def.s = "auto", AT(format),
      .choices = "auto|idx|cifar10|cifar100|hdf5|imagefolder|domains|csv|npy|npz", .help = "source format" },
    { .section = "data", .key = "classes", .type = FH_CFG_INT, .def.i = 10, .lo = 2, .hi = 256, AT(classes),
      .help = "class count of IDX labels" },
    { .section = "data", .key = "mean", .type = FH_CFG_STRING, AT(mean),
      .help = "per-channel mean recorded in the file, comma-separated; empty: by the source key normalise" },
    { .section = "data", .key = "std", .type = FH_CFG_STRING, AT(std),
      .help = "per-channel std recorded in the file, comma-separated; empty: by the source key normalise" },
    { .section = "data", .key = "deflate", .type = FH_CFG_INT, .def.i = 4, .lo = 0, .hi = 9, AT(deflate),
      .help = "compression level of the file" },
};
#undef AT

#define AT(field) FH_CONFIG_AT(DataSourceOptions, field)
#define AT_INDEX(field) FH_CONFIG_AT_INDEX(DataSourceOptions, field)
static const FhConfigKey source_keys[] = {
    { .section = "source", .key = "size", .type = FH_CFG_INT, .def.i = 0, .lo = 0, .hi = 32768, AT(image.size),
      .help = "image sources: output side in pixels; 0 = keep the images' own (common) size" },
    { .section = "source", .key = "resize", .type = FH_CFG_CHOICE, .def.s = "shorter", .choices = "shorter|exact|none",
      AT_INDEX(image.resize), .help = "shorter (shorter side to size, aspect kept), exact (size x size) or none" },
    { .section = "source", .key = "crop", .type = FH_CFG_CHOICE, .def.s = "center", .choices = "none|center",
      AT_INDEX(image.crop_center), .help = "center: a centre crop to size x size after the resize" },
    /* lands as the index 0, 1, 2; data_source_options_from makes the last 3 */
    { .section = "source", .key = "channels", .type = FH_CFG_CHOICE, .def.s = "auto", .choices = "auto|1|3",
      AT_INDEX(image.channels), .help = "auto (3 when any image is colour, else 1), 1 (grey: ITU-R 601 luma) or 3 (RGB: "
                                        "grey repeated)" },
    { .section = "source", .key = "shrink_on_load", .type = FH_CFG_CHOICE, .def.s = "1", .choices = "0|1",
      AT_INDEX(image.shrink_on_load), .help = "JPEG: decode at a DCT scale 1/2..1/8 that covers the resize and "
                                              "divides both sides (faster; PIL's draft() pixels)" },
    { .section = "source", .key = "exif_orientation", .type = FH_CFG_CHOICE, .def.s = "ignore", .choices = "ignore|apply",
      AT_INDEX(image.exif_orientation), .help = "JPEG and PNG: apply turns each image upright by its EXIF orientation tag "
                                                "(PIL's ImageOps.exif_transpose); ignore keeps the stored pixels, as "
                                                "torchvision's ImageFolder" },
    /* PIL's own limit: it refuses images above twice Image.MAX_IMAGE_PIXELS */
    { .section = "source", .key = "max_pixels", .type = FH_CFG_INT, .def.i = 178956970, .lo = 1,
      .hi = (double)32768 * 32768, AT(image.max_pixels),
      .help = "the most pixels (width x height) an image may have, checked from its header before decoding (PIL's "
              "limit; about 1 GiB of memory to decode one that large)" },
    { .section = "source", .key = "on_error", .type = FH_CFG_CHOICE, .def.s = "fail", .choices = "fail|skip",
      AT_INDEX(skip_unreadable), .help = "an unreadable image: fail (exit 2 naming it) or skip (decodes every image "
                                         "once more up front; skipped ones counted and named)" },
    { .section = "source", .key = "image_root", .type = FH_CFG_STRING, AT(image_root),
      .help = "csv: folder the image column's names are relative to (default: the table's folder)" },
    { .section = "source", .key = "image_column", .type = FH_CFG_STRING, .def.s = "image", AT(image_column),
      .help = "csv: column of image file names" },
    { .section = "source", .key = "image_suffix", .type = FH_CFG_STRING, AT(image_suffix),
      .help = "csv: appended to every image name (ISIC 2019: .jpg)" },
    { .section = "source", .key = "label_column", .type = FH_CFG_STRING, .def.s = "label", AT(label_column),
      .help = "csv: column of class names or numbers" },
    { .section = "source", .key = "label_columns", .type = FH_CFG_STRING, AT(label_columns),
      .help = "csv: one-hot columns instead, comma-separated, in class order (ISIC 2019's ground truth)" },
    { .section = "source", .key = "class_names", .type = FH_CFG_STRING, AT(class_names),
      .help = "csv: the classes, comma-separated, in id order; other labels are an error" },
    { .section = "source", .key = "client_column", .type = FH_CFG_STRING, AT(client_column),
      .help = "csv: column whose values are the natural groups (scheme=natural, holdout_domain)" },
    { .section = "source", .key = "split_column", .type = FH_CFG_STRING, AT(split_column),
      .help = "csv: column of train | test" },
    { .section = "source", .key = "layout", .type = FH_CFG_CHOICE, .def.s = "auto", .choices = "auto|nhwc|nchw",
      AT(layout), .help = "npy/npz images: the axis order" },
    { .section = "source", .key = "float_max", .type = FH_CFG_FLOAT, .def.f = 1, .lo = 1e-6, .hi = 1e6, AT(float_max),
      .help = "npy/npz float32 images span 0..float_max (1 or 255)" },
    { .section = "source", .key = "test_fraction", .type = FH_CFG_FLOAT, .def.f = 0.2, .lo = 0, .hi = 0.99,
      AT(test_fraction), .help = "sources without a test split: share of each (domain, class) held out as the test set" },
    { .section = "source", .key = "holdout_domain", .type = FH_CFG_STRING, AT(holdout_domain),
      .help = "domains (or client column values), comma-separated, that form the test set instead" },
    { .section = "source", .key = "normalise", .type = FH_CFG_CHOICE, .def.s = "file", .choices = "file|imagenet|none",
      AT(normalise), .help = "mean/std recorded in the file: file (computed from the training images), imagenet or "
                             "none (0 / 1); mean= and std= override" },
};
#undef AT
#undef AT_INDEX

enum {
    N_PARTITION_KEYS = sizeof partition_keys / sizeof partition_keys[0],
    N_SOURCE_KEYS = sizeof source_keys / sizeof source_keys[0]
};

const FhConfigKey *data_partition_keys(int *n)
{
    *n = N_PARTITION_KEYS;
    return partition_keys;
}

const FhConfigKey *data_source_keys(int *n)
{
    *n = N_SOURCE_KEYS;
    return source_keys;
}

const FhConfigKey *data_partition_command_keys(int *n)
{
    static FhConfigKey keys[N_PARTITION_KEYS + N_SOURCE_KEYS];
    if (!keys[0].key) {
        memcpy(keys, partition_keys, sizeof partition_keys);
        memcpy(keys + N_PARTITION_KEYS, source_keys, sizeof source_keys);
    }
    *n = N_PARTITION_KEYS + N_SOURCE_KEYS;
    return keys;
}

void data_source_options_from(const FhConfig *cfg, DataSourceOptions *o)
{
    memset(o, 0, sizeof *o);
    fh_config_land(cfg, "source", o);
    if (o->image.channels == 2) o->image.channels = 3; /* the choice "3" */
}

static const FhConfigKey *partition_key(const char *name)
{
    for (int i = 0; i < N_PARTITION_KEYS; i++)
        if (!strcmp(partition_keys[i].key, name)) return &partition_keys[i];
    return NULL;
}

int data_source_options_parse(FhConfig **cfg, const char *text, const char *where)
{
    *cfg = NULL;
    char *copy = strdup(text ? text : "");
    char **args = calloc(strlen(copy) / 2 + 2, sizeof *args);
    if (!copy || !args) {
        free(copy);
        free(args);
        FH_FAIL(FH_ERR_MEMORY, "out of memory for %s", where);
    }
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(copy, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) args[n++] = tok;
    int status = FH_OK;
    /* a partition key written here (split_within, split_clients were source options once) gets its place named */
    for (int i = 0; i < n && status == FH_OK; i++) {
        const size_t len = strcspn(args[i], "=");
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(len < sizeof key ? len : sizeof key - 1), args[i]);
        if (partition_key(key))
            status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s: %s is a [data] key, not a source option: "
                                    "write '%s = %s' in [data]", where, key, key, args[i][len] ? args[i] + len + 1 : "...");
    }
    if (status == FH_OK) status = fh_config_load_args(cfg, source_keys, N_SOURCE_KEYS, args, n, where);
    free(args);
    free(copy);
    return status;
}

int data_partition_spec_from(DataPartFileSpec *spec, DataSourceOptions *source, const DataPartitionKeys *k,
                             const char *where)
{
    memset(spec, 0, sizeof *spec);
    DataPartitionSpec *p = &spec->partition;
    const int natural = !strcmp(k->scheme, "natural");
    p->scheme = k->scheme;
    p->variant = *k->variant && strcmp(k->variant, "default") ? k->variant : NULL;
    p->n_clients = k->clients;
    p->alpha = k->alpha;
    p->min_size = k->min_size;
    p->classes_per_client = k->classes_per_client;
    p->max_attempts = k->max_attempts;
    p->seed = (uint64_t)k->seed;
    p->split_within = k->split_within;
    p->split_clients = k->split_clients;
    if (!natural && strcmp(k->split_within, "none"))
        FH_FAIL(FH_ERR_USAGE, "%s: split_within = %s needs scheme = natural", where, k->split_within);
    FH_CHECK(data_corruption_from_name(&spec->corruption, k->corruption)); /* one of the key's choices */
    if (spec->corruption == DATA_CORRUPT_NONE) {
        if (k->corrupted > 0 || k->corrupted_ratio != partition_key("corrupted_ratio")->def.f)
            FH_FAIL(FH_ERR_USAGE, "%s: corrupted or corrupted_ratio given but corruption = none (set corruption = "
                    "gaussian_noise or motion_blur)", where);
    } else {
        spec->severity = k->severity;
        if (k->corrupted > 0) {
            if (!natural && k->corrupted > k->clients)
                FH_FAIL(FH_ERR_USAGE, "%s: corrupted = %d is more than the %d clients", where, k->corrupted, k->clients);
            spec->n_corrupted = k->corrupted;
        } else if (natural) {
            spec->n_corrupted = -1; /* from the ratio once the data gives K */
            spec->corrupted_ratio = k->corrupted_ratio;
        } else {
            spec->n_corrupted = (int)lround(k->corrupted_ratio * k->clients); /* partitions.md B.7: round(ratio K) */
        }
    }
    p->n_corrupted = spec->n_corrupted;
    spec->deflate = k->deflate;
    source->format = k->format;
    source->idx_classes = k->classes;
    source->seed = p->seed;
    return FH_OK;
}

/* whether partition key `key` means anything for spec: the recorded parameters list only those */
static int key_applies(const char *key, const DataPartFileSpec *spec)
{
    const DataPartitionSpec *p = &spec->partition;
    const int natural = !strcmp(p->scheme, "natural"), split = natural && strcmp(p->split_within, "none");
    const int label_skew = !strcmp(p->scheme, "dirichlet") || !strcmp(p->scheme, "quantity");
    if (!strcmp(key, "clients")) return !natural;
    if (!strcmp(key, "alpha") || !strcmp(key, "min_size") || !strcmp(key, "max_attempts"))
        return label_skew || (split && !strcmp(p->split_within, "dirichlet"));
    if (!strcmp(key, "classes_per_client")) return !strcmp(p->scheme, "pathological");
    if (!strcmp(key, "split_within")) return natural;
    if (!strcmp(key, "split_clients")) return split;
    if (!strcmp(key, "severity") || !strcmp(key, "corrupted") || !strcmp(key, "corrupted_ratio"))
        return spec->corruption != DATA_CORRUPT_NONE;
    /* classes: IDX only, recorded as the file's classes attribute; format and deflate: not the data's */
    return strcmp(key, "classes") && strcmp(key, "format") && strcmp(key, "deflate");
}

int data_partition_check_given(const FhConfig *cfg, const DataPartFileSpec *spec, const char *where)
{
    /* the keys one scheme or a corruption reads and the others ignore */
    static const char *const specific[] = { "clients", "alpha", "min_size", "max_attempts", "classes_per_client",
                                            "split_clients", "severity" };
    for (size_t i = 0; i < sizeof specific / sizeof specific[0]; i++)
        if (!fh_config_is_default(cfg, "data", specific[i]) && !key_applies(specific[i], spec))
            FH_FAIL(FH_ERR_USAGE, "%s: %s = %s means nothing with scheme = %s%s, corruption = %s (fedhet partition "
                    "--help says which keys each reads)", where, specific[i], fh_config_text(cfg, "data", specific[i]),
                    spec->partition.scheme, spec->partition.split_within && strcmp(spec->partition.split_within, "none")
                    ? " and split_within" : "", data_corruption_name(spec->corruption));
    return FH_OK;
}

void data_partition_parameters(const FhConfig *cfg, const FhConfig *source_cfg, const DataPartFileSpec *spec,
                               char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < N_PARTITION_KEYS && used < cap; i++) {
        const char *value = fh_config_text(cfg, "data", partition_keys[i].key);
        if (*value && key_applies(partition_keys[i].key, spec))
            used += (size_t)snprintf(out + used, cap - used, "%s%s=%s", used ? " " : "", partition_keys[i].key, value);
    }
    for (int i = 0; source_cfg && i < N_SOURCE_KEYS && used < cap; i++)
        if (!fh_config_is_default(source_cfg, "source", source_keys[i].key))
            used += (size_t)snprintf(out + used, cap - used, " %s=%s", source_keys[i].key,
                                     fh_config_text(source_cfg, "source", source_keys[i].key));
}
