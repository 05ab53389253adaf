/* The config of `fedhet run`: every key, its default, range and meaning, in one table. */
#include "fl_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/onnx.h"

/* The keys every method shares, then one method's own keys. */

#define BIG 1e12

/* The keys every method shares, in the order of --help (the partition keys join them in build_base) */
#define AT(field) FH_CONFIG_AT(FlSettings, field)
static const FhConfigKey base[] = {
    { .section = "data", .key = "path", .type = FH_CFG_STRING, .required = 1,
      .help = "partitioned HDF5 file (fedhet partition); made from source if absent", AT(data_path) },
    { .section = "data", .key = "source", .type = FH_CFG_STRING,
      .help = "raw data set to partition into path when path does not exist (e.g. fashion-mnist), as the partition "
              "keys below say (those of fedhet partition); empty: path must exist", AT(data_source) },
    { .section = "data", .key = "source_options", .type = FH_CFG_STRING,
      .help = "image source keys of fedhet partition as 'key=value key=value' (with source: size, resize, "
              "crop, channels, "
              "label_columns, client_column, holdout_domain, normalise, ...; docs/data.md)", AT(source_options) },
    { .section = "data", .key = "normalise", .type = FH_CFG_CHOICE, .def.s = "file", .choices = "file|imagenet|none",
      .help = "input normalisation: the partition file's mean/std, ImageNet's (0.485,0.456,0.406 / "
              "0.229,0.224,0.225), "
              "or none (x/255)", AT(normalise) },
    { .section = "data", .key = "augment", .type = FH_CFG_CHOICE, .def.s = "auto", .choices = "auto|on|off",
      .help = "training augmentation; auto: pad-4 crop + flip for 3x32x32, random-resized-crop + flip above "
              "32x32", AT(augment) },
    { .section = "data", .key = "crop_scale_min", .type = FH_CFG_FLOAT, .def.f = 0.08, .lo = 1e-6, .hi = 1,
      .help = "random-resized-crop: smallest area share", AT(crop.scale_min) },
    { .section = "data", .key = "crop_scale_max", .type = FH_CFG_FLOAT, .def.f = 1, .lo = 1e-6, .hi = 1,
      .help = "random-resized-crop: largest area share", AT(crop.scale_max) },
    { .section = "data", .key = "crop_ratio_min", .type = FH_CFG_FLOAT, .def.f = 0.75, .lo = 1e-3, .hi = 1e3,
      .help = "random-resized-crop: smallest aspect w/h", AT(crop.ratio_min) },
    { .section = "data", .key = "crop_ratio_max", .type = FH_CFG_FLOAT, .def.f = 1.3333333333333333,
      .lo = 1e-3, .hi = 1e3,
      .help = "random-resized-crop: largest aspect w/h", AT(crop.ratio_max) },
    { .section = "data", .key = "flip", .type = FH_CFG_FLOAT, .def.f = 0.5, .lo = 0, .hi = 1,
      .help = "random-resized-crop: horizontal flip probability", AT(crop.flip) },
    { .section = "data", .key = "eval_batch", .type = FH_CFG_INT, .def.i = 500, .lo = 1, .hi = 1e6,
      .help = "test batch size (evaluation is split over ranks by batch)", AT(eval_batch) },
    { .section = "model", .key = "name", .type = FH_CFG_CHOICE, .def.s = "cnn",
      .choices = "mlp|cnn|lenet|smallcnn|resnet8|resnet18|resnet18_gn|mobilenetv2",
      .help = "model of the zoo", AT(model) },
    { .section = "model", .key = "norm", .type = FH_CFG_CHOICE, .def.s = "bn", .choices = "bn|gn",
      .help = "resnet18 normalisation", AT(norm) },
    { .section = "model", .key = "groups", .type = FH_CFG_INT, .def.i = 2, .lo = 1, .hi = 1024,
      .help = "GroupNorm groups", AT(groups) },
    { .section = "model", .key = "init", .type = FH_CFG_STRING,
      .help = "HDF5 file whose /model tensors start the run (a run.h5, checkpoint.h5 or tools/fedhet-torch export); "
              "random: fedhet's own initialisation from fl.seed; onnx: the initializers of [model] onnx; "
              "empty: onnx with [model] onnx, else random", AT(init) },
    { .section = "model", .key = "onnx", .type = FH_CFG_STRING,
      .help = "ONNX file of the model (replaces name; docs/onnx.md): its graph becomes the model", AT(onnx) },
    { .section = "model", .key = "features", .type = FH_CFG_STRING,
      .help = "with onnx: the node (or output) whose output is the features tensor; empty: the input of the last "
              "Gemm / MatMul", AT(features) },
    { .section = "train", .key = "optimizer", .type = FH_CFG_CHOICE, .def.s = "sgd", .choices = "sgd|adam|adamw",
      .help = "local optimiser, fresh every round (docs/methods/baselines.md §0.1)", AT(optimizer) },
    { .section = "train", .key = "lr", .type = FH_CFG_FLOAT, .def.f = 0.01, .lo = 1e-12, .hi = BIG,
      .help = "local learning rate, > 0", AT(lr) },
    { .section = "train", .key = "momentum", .type = FH_CFG_FLOAT, .def.f = 0, .lo = 0, .hi = 0.999999,
      .help = "SGD momentum", AT(momentum) },
    { .section = "train", .key = "weight_decay", .type = FH_CFG_FLOAT, .def.f = 0, .lo = 0, .hi = 1,
      .help = "L2 added to the gradient (AdamW: decoupled)", AT(weight_decay) },
    { .section = "train", .key = "epochs", .type = FH_CFG_INT, .def.i = 1, .lo = 1, .hi = 100000,
      .help = "local epochs E (when steps = 0)", AT(epochs) },
    { .section = "train", .key = "steps", .type = FH_CFG_INT, .def.i = 0, .lo = 0, .hi = 1e12,
      .help = "local steps per round instead of epochs; 0: E epochs", AT(steps) },
    { .section = "train", .key = "batch_size", .type = FH_CFG_INT, .def.i = 64, .lo = 1, .hi = 65536,
      .help = "local batch size B (the last partial batch is kept)", AT(batch_size) },
    { .section = "train", .key = "clip", .type = FH_CFG_FLOAT, .def.f = 0, .lo = 0, .hi = BIG,
      .help = "clip the gradient's L2 norm to this; 0: off", AT(clip) },
    { .section = "train", .key = "lr_decay", .type = FH_CFG_FLOAT, .def.f = 1, .lo = 1e-6, .hi = 1,
      .help = "lr multiplied by this after every round (docs/methods/baselines.md §0.1.5)", AT(lr_decay) },
    { .section = "train", .key = "beta1", .type = FH_CFG_FLOAT, .def.f = 0.9, .lo = 0, .hi = 0.999999,
      .help = "Adam beta1", AT(beta1) },
    { .section = "train", .key = "beta2", .type = FH_CFG_FLOAT, .def.f = 0.999, .lo = 0, .hi = 0.999999999,
      .help = "Adam beta2", AT(beta2) },
    { .section = "train", .key = "eps", .type = FH_CFG_FLOAT, .def.f = 1e-8, .lo = 1e-30, .hi = 1,
      .help = "Adam epsilon", AT(eps) },
    { .section = "train", .key = "logit_adjust", .type = FH_CFG_FLOAT, .def.f = 0, .lo = 0, .hi = 100,
      .help = "logit adjustment tau of the local loss, any method (docs/methods/baselines.md A.22; seed 001 "
              "uses 1); 0: off", AT(logit_adjust) },
    { .section = "train", .key = "threads", .type = FH_CFG_INT, .def.i = 1, .lo = 1, .hi = 256,
      .help = "OpenBLAS and oneDNN threads per rank (results are promised for a fixed value)", AT(threads) },
    { .section = "train", .key = "backend", .type = FH_CFG_CHOICE, .def.s = NN_BACKEND_DEFAULT,
      .choices = "onednn|blas|auto",
      .help = "what computes the conv layers: onednn (oneDNN's primitives), blas (im2col + OpenBLAS sgemm), "
              "or auto (oneDNN "
              "where it can build a layer, blas for the others, each named in a warning); the results differ "
              "in the last "
              "bits between backends (and CPU instruction sets), never between rank counts", AT(backend) },
    { .section = "fl", .key = "rounds", .type = FH_CFG_INT, .def.i = 10, .lo = 1, .hi = 1e8,
      .help = "communication rounds T", AT(rounds) },
    { .section = "fl", .key = "selection", .type = FH_CFG_CHOICE, .def.s = "all",
      .choices = "all|fraction|count|bernoulli",
      .help = "clients per round: all; fraction: max(floor(fraction K), 1) uniform without replacement; "
              "count; bernoulli: each with p = fraction (docs/methods/baselines.md §0.2)", AT(selection) },
    { .section = "fl", .key = "fraction", .type = FH_CFG_FLOAT, .def.f = 0.1, .lo = 1e-9, .hi = 1,
      .help = "share of clients for selection = fraction | bernoulli", AT(fraction) },
    { .section = "fl", .key = "count", .type = FH_CFG_INT, .def.i = 10, .lo = 1, .hi = 1e6,
      .help = "clients per round for selection = count", AT(count) },
    { .section = "fl", .key = "seed", .type = FH_CFG_INT, .def.i = 0, .lo = 0, .hi = 2147483647,
      .help = "seed of model init, selection, shuffles, augmentation", AT(seed) },
    { .section = "fl", .key = "eval_every", .type = FH_CFG_INT, .def.i = 1, .lo = 0, .hi = 1e8,
      .help = "evaluate the global model every this many rounds (and after the last); 0: last only (a partition file "
              "without /test runs only with 0)", AT(eval_every) },
    { .section = "fl", .key = "checkpoint_every", .type = FH_CFG_INT, .def.i = 10, .lo = 0, .hi = 1e8,
      .help = "checkpoint every this many rounds (and at the end); 0: end only", AT(checkpoint_every) },
    { .section = "fl", .key = "term_grace", .type = FH_CFG_FLOAT, .def.f = 60, .lo = 0, .hi = 1e7,
      .help = "seconds a round may still run after SIGTERM (or SIGUSR1); one still running then is left "
              "between local "
              "steps and the run stops with the checkpoint of the round before", AT(term_grace) },
    { .section = "fl", .key = "sharpness_every", .type = FH_CFG_INT, .def.i = 0, .lo = 0, .hi = 1e8,
      .help = "metrics.csv sharpness S(rho) = L(rho) - L and perturbed loss L(rho) of the global model on a "
              "fixed probe set "
              "(docs/methods/sam.md §12; eval mode, plain CE, rank 0) every this many rounds and after the "
              "last; 0: off", AT(sharpness_every) },
    { .section = "fl", .key = "sharpness_rho", .type = FH_CFG_FLOAT, .def.f = 0.05, .lo = 0, .hi = 1e6,
      .help = "radius rho of the sharpness diagnostic", AT(sharpness_rho) },
    { .section = "fl", .key = "sharpness_probe", .type = FH_CFG_INT, .def.i = 1000, .lo = 1, .hi = 1e7,
      .help = "probe rows of the sharpness diagnostic: the first rows of every client, in proportion to its "
              "size (training "
              "data, no augmentation)", AT(sharpness_probe) },
    { .section = "fl", .key = "hessian_every", .type = FH_CFG_INT, .def.i = 0, .lo = 0, .hi = 1e8,
      .help = "metrics.csv hessian_max_eig (power iteration) and hessian_trace (Hutchinson) of the global "
              "model's mean CE "
              "on the sharpness probe set (fl.sharpness_probe rows; eval mode; Hessian-vector products by central "
              "differences of gradients, 2 probe gradients each, spread over all ranks, the same bits on any "
              "rank count) "
              "every this many rounds and after the last; 0: off", AT(hessian_every) },
    { .section = "fl", .key = "hessian_iters", .type = FH_CFG_INT, .def.i = 100, .lo = 1, .hi = 100000,
      .help = "most power iterations for hessian_max_eig", AT(hessian_iters) },
    { .section = "fl", .key = "hessian_tol", .type = FH_CFG_FLOAT, .def.f = 1e-3, .lo = 0, .hi = 1,
      .help = "power iteration stops when the eigenvalue changes by at most this fraction between iterations; "
              "0: always "
              "fl.hessian_iters", AT(hessian_tol) },
    { .section = "fl", .key = "hessian_samples", .type = FH_CFG_INT, .def.i = 10, .lo = 1, .hi = 100000,
      .help = "Rademacher vectors of the Hutchinson estimate hessian_trace (its standard error is in the "
              "log)", AT(hessian_samples) },
    { .section = "fl", .key = "hessian_step", .type = FH_CFG_FLOAT, .def.f = 1e-3, .lo = 1e-6, .hi = 0.1,
      .help = "central-difference step of the Hessian-vector products, relative: |eps v| = hessian_step * "
              "max(|w|, 1) "
              "(both gradients keep the ReLU / max-pool pattern of w, so no kink lies between them)",
      AT(hessian_step) },
    { .section = "algo", .key = "method", .type = FH_CFG_CHOICE, .def.s = "fedavg",
      .help = "federated method (fedhet methods lists them)" },
    { .section = "algo", .key = "plugin", .type = FH_CFG_CHOICE, .def.s = "none",
      .help = "a method added on top of `method` (flood: FLOOD's sample weighting and aggregation, "
              "docs/methods/sam.md §13)" },
    { .section = "output", .key = "dir", .type = FH_CFG_STRING, .def.s = "outputs",
      .help = "folder of run folders", AT(out_dir) },
    { .section = "output", .key = "name", .type = FH_CFG_STRING,
      .help = "run folder name; empty: the config file's name without .ini", AT(name) },
    { .section = "output", .key = "log_level", .type = FH_CFG_CHOICE, .def.s = "info",
      .choices = "quiet|warn|info|debug",
      .help = "how much to print", AT(log_level) },
};
#undef AT
enum { BASE_N = sizeof base / sizeof base[0] };

/* The run's keys: its own, with the partition keys (src/data/keys.c, landing in FlSettings.part) after [data] source,
 * and [algo] method and plugin with their choices from the registry. */
#define PART_AFTER "source"
static FhConfigKey schema[BASE_N + 32];
static int schema_n;

static void build_base(void)
{
    if (schema_n) return;
    int n_part;
    const FhConfigKey *part = data_partition_keys(&n_part);
    for (int i = 0; i < BASE_N; i++) {
        schema[schema_n] = base[i];
        if (!strcmp(base[i].section, "algo"))
            schema[schema_n].choices = !strcmp(base[i].key, "method") ? algo_choices() : algo_plugin_choices();
        schema_n++;
        if (strcmp(base[i].section, "data") || strcmp(base[i].key, PART_AFTER)) continue;
        if (schema_n + n_part > (int)(sizeof schema / sizeof schema[0])) {
            fprintf(stderr, "fedhet: %d partition keys do not fit the run schema\n", n_part);
            abort();
        }
        for (int j = 0; j < n_part; j++) {
            schema[schema_n] = part[j];
            schema[schema_n++].at += offsetof(FlSettings, part);
        }
    }
}

const FhConfigKey *fl_config_schema(int *n)
{
    build_base();
    *n = schema_n;
    return schema;
}

/* One schema per (method, plug-in) pair, built once and kept (a loaded config holds its schema by pointer). */
#define MAX_METHODS 96
#define MAX_PLUGINS 4
static FhConfigKey *method_schema[MAX_METHODS][MAX_PLUGINS + 1];
static int method_schema_n[MAX_METHODS][MAX_PLUGINS + 1];

static int method_index(const AlgoMethod *m)
{
    for (int i = 0; i < algo_count() && i < MAX_METHODS; i++)
        if (algo_at(i) == m) return i;
    return -1;
}

/* 0 for none, else 1 + the plug-in's position among the plug-ins */
static int plugin_slot(const AlgoMethod *plugin)
{
    if (!plugin) return 0;
    for (int i = 0, slot = 1; i < algo_count() && slot <= MAX_PLUGINS; i++)
        if (algo_at(i)->plugin) {
            if (algo_at(i) == plugin) return slot;
            slot++;
        }
    return -1;
}

const FhConfigKey *fl_config_schema_for(const AlgoMethod *m, const AlgoMethod *plugin, int *n)
{
    build_base();
    const int mi = method_index(m), pi = plugin_slot(plugin);
    *n = schema_n;
    if (mi < 0 || pi < 0) return schema;
    if (!method_schema[mi][pi]) {
        FhConfigKey *k = calloc((size_t)(schema_n + algo_option_count(m) + (plugin ? algo_option_count(plugin) : 0)),
                                sizeof *k);
        if (!k) return schema;
        memcpy(k, schema, (size_t)schema_n * sizeof *k);
        int kn = schema_n;
        for (int i = 0; i < algo_option_count(m); i++) k[kn++] = algo_option_config_key(m, algo_option_at(m, i));
        for (int i = 0; plugin && i < algo_option_count(plugin); i++)
            k[kn++] = algo_option_config_key(plugin, algo_option_at(plugin, i));
        method_schema[mi][pi] = k;
        method_schema_n[mi][pi] = kn;
    }
    *n = method_schema_n[mi][pi];
    return method_schema[mi][pi];
}

/* Every method key of every method as a free string: for reading [algo] method before the method's own
 * schema is known, for naming the method a stray key belongs to, and for checking a grid's keys. */
const FhConfigKey *fl_config_schema_any(int *n)
{
    static FhConfigKey *k;
    static int kn;
    build_base();
    if (!k) {
        int total = schema_n;
        for (int i = 0; i < algo_count(); i++) total += algo_option_count(algo_at(i));
        k = calloc((size_t)total, sizeof *k);
        if (!k) {
            *n = schema_n;
            return schema;
        }
        memcpy(k, schema, (size_t)schema_n * sizeof *k);
        kn = schema_n;
        for (int i = 0; i < algo_count(); i++)
            for (int h = 0; h < algo_option_count(algo_at(i)); h++) {
                const char *key = algo_option_at(algo_at(i), h)->key;
                int seen = 0;
                for (int j = schema_n; j < kn; j++) seen |= !strcmp(k[j].key, key);
                if (!seen)
                    k[kn++] = (FhConfigKey){ .section = "algo", .key = key, .type = FH_CFG_STRING,
                                             .was = algo_option_at(algo_at(i), h)->was, .help = "method key" };
            }
    }
    *n = kn;
    return k;
}


void fl_print_config_help(FILE *out)
{
    int n;
    const FhConfigKey *keys = fl_config_schema(&n);
    fh_config_print_help(out, keys, n);
    fprintf(out, "\nMethod keys, in [algo], each valid only with its method (fedhet methods NAME for details):\n");
    /* the name column as wide as the longest name: at least two spaces before the keys, whatever a name's length
     * (the bash completion and tools/gen-docs.py read these lines) */
    int width = 0;
    for (int i = 0; i < algo_count(); i++)
        if ((int)strlen(algo_at(i)->name) > width) width = (int)strlen(algo_at(i)->name);
    for (int i = 0; i < algo_count(); i++) {
        const AlgoMethod *m = algo_at(i);
        if (!algo_option_count(m)) continue;
        fprintf(out, "  %-*s ", width, m->name);
        for (int h = 0; h < algo_option_count(m); h++) fprintf(out, "%s%s", h ? ", " : " ", algo_option_at(m, h)->key);
        fprintf(out, "\n");
    }
}

int fl_config_text_upgrade(const char *text, char **out)
{
    int n;
    const FhConfigKey *any = fl_config_schema_any(&n);
    return fh_config_text_upgrade(any, n, text, out);
}

/* the config at path (a saved one upgraded) against schema */
static int config_load_with(FhConfig **out, const FhConfigKey *schema, int n, const char *path, const char *saved_text,
                            char *const *overrides, int n_overrides)
{
    if (saved_text) return fh_config_load_text(out, schema, n, saved_text, path, overrides, n_overrides);
    return fh_config_load_file(out, schema, n, path, overrides, n_overrides);
}

static int config_load(FhConfig **out, const char *path, const char *text, char *const *overrides, int n_overrides);

/* Two passes: the first reads [algo] method with every method key accepted as text, and rejects keys of
 * other methods; the second loads the config against the method's own typed keys. */
int fl_config_load(FhConfig **out, const char *path, int saved, char *const *overrides, int n_overrides)
{
    *out = NULL;
    if (!saved) return config_load(out, path, NULL, overrides, n_overrides);
    char *raw = NULL;
    FH_CHECK(fh_read_file(path, &raw, FH_ERR_DATA));
    const int status = fl_config_load_saved(out, raw, path, overrides, n_overrides);
    free(raw);
    return status;
}

int fl_config_load_saved(FhConfig **out, const char *text, const char *source, char *const *overrides, int n_overrides)
{
    *out = NULL;
    char *upgraded = NULL;
    FH_CHECK(fl_config_text_upgrade(text, &upgraded));
    const int status = config_load(out, source, upgraded, overrides, n_overrides);
    free(upgraded);
    return status;
}

static int config_load(FhConfig **out, const char *path, const char *text, char *const *overrides, int n_overrides)
{
    int n;
    const FhConfigKey *any = fl_config_schema_any(&n);
    FhConfig *first = NULL;
    FH_CHECK(config_load_with(&first, any, n, path, text, overrides, n_overrides));
    const AlgoMethod *m = algo_find(fh_config_string(first, "algo", "method"));
    const AlgoMethod *plugin = algo_find(fh_config_string(first, "algo", "plugin"));
    for (int i = 0; m && i < n; i++) {
        if (strcmp(any[i].section, "algo") || !strcmp(any[i].key, "method") || !strcmp(any[i].key, "plugin")) continue;
        if (fh_config_is_default(first, "algo", any[i].key) || algo_option_find(m, any[i].key) ||
            (plugin && algo_option_find(plugin, any[i].key)))
            continue;
        char owners[512] = "", keys[512] = "";
        size_t used = 0;
        for (int j = 0; j < algo_count(); j++)
            if (algo_option_find(algo_at(j), any[i].key) && used < sizeof owners)
                used += (size_t)snprintf(owners + used, sizeof owners - used, "%s%s", used ? ", " : "", algo_at(j)->name);
        used = 0;
        for (int h = 0; h < algo_option_count(m) && used < sizeof keys; h++)
            used += (size_t)snprintf(keys + used, sizeof keys - used, "%s%s", h ? ", " : "", algo_option_at(m, h)->key);
        char origin[FH_PATH_MAX + 32]; /* the line that set it, or the command line */
        fh_config_origin(first, "algo", any[i].key, origin, sizeof origin);
        fh_config_free(&first);
        FH_FAIL(FH_ERR_USAGE, "%s: [algo] %s is a key of %s, not of method %s%s%s (its keys: %s)", origin, any[i].key,
                owners, m->name, plugin ? " with plugin " : "", plugin ? plugin->name : "",
                algo_option_count(m) ? keys : "none");
    }
    fh_config_free(&first);
    if (!m) FH_FAIL(FH_ERR_USAGE, "%s: [algo] method is unknown", path);
    if (plugin && plugin == m)
        FH_FAIL(FH_ERR_USAGE, "%s: [algo] plugin = %s on method %s: the method already is the plug-in (use plugin = none)",
                path, plugin->name, m->name);
    if (plugin && plugin->plugin_refuse) {
        /* the host's keys as given (variants decide some refusals) */
        FhConfig *host_cfg = NULL;
        const FhConfigKey *own = fl_config_schema_for(m, plugin, &n);
        FH_CHECK(config_load_with(&host_cfg, own, n, path, text, overrides, n_overrides));
        FlSettings hs;
        int status = fl_settings_from_config(&hs, host_cfg, path);
        const char *why = status == FH_OK ? algo_ops_plugin_refusal(m, algo_options_view(m, &hs.options), plugin) : NULL;
        fh_config_free(&host_cfg);
        FH_CHECK(status);
        if (why) FH_FAIL(FH_ERR_USAGE, "%s: [algo] plugin = %s cannot join method %s: %s", path, plugin->name, m->name, why);
    }
    const FhConfigKey *own = fl_config_schema_for(m, plugin, &n);
    return config_load_with(out, own, n, path, text, overrides, n_overrides);
}

/* A method's keys into its option block: a choice is carried as its index, a switch as 0 or 1 (the config checked
 * them all). */
static int read_options(const FhConfig *cfg, const AlgoMethod *m, AlgoOptionBlock *b)
{
    algo_options_reset(b, m);
    for (int i = 0; i < algo_option_count(m); i++) {
        const AlgoOption *o = algo_option_at(m, i);
        double v = 0;
        switch (o->type) {
        case FH_CFG_CHOICE: v = algo_option_choice_index(o, fh_config_string(cfg, "algo", o->key)); break;
        case FH_CFG_INT: v = (double)fh_config_int(cfg, "algo", o->key); break;
        case FH_CFG_BOOL: v = fh_config_bool(cfg, "algo", o->key); break;
        default: v = fh_config_float(cfg, "algo", o->key); break;
        }
        FH_CHECK(algo_option_set(b, m, o->key, v));
    }
    return FH_OK;
}

#define S(sec, key) fh_config_string(cfg, sec, key)

int fl_settings_from_config(FlSettings *s, const FhConfig *cfg, const char *config_path)
{
    memset(s, 0, sizeof *s);
    fh_config_land(cfg, NULL, s);
    s->method = algo_find(S("algo", "method"));
    if (!s->method) FH_FAIL(FH_ERR_USAGE, "[algo] method = %s is unknown", S("algo", "method"));
    FH_CHECK(read_options(cfg, s->method, &s->options));
    s->plugin = algo_find(S("algo", "plugin"));
    if (s->plugin) FH_CHECK(read_options(cfg, s->plugin, &s->plugin_options));
    if (!*s->data_path) FH_FAIL(FH_ERR_USAGE, "%s: [data] path is empty", config_path ? config_path : "config");
    if (!*s->out_dir) FH_FAIL(FH_ERR_USAGE, "%s: [output] dir is empty", config_path ? config_path : "config");
    if (!*s->onnx && (!strcmp(s->init, "onnx") || *s->features))
        FH_FAIL(FH_ERR_USAGE, "%s: [model] %s needs [model] onnx", config_path ? config_path : "config",
                *s->features ? "features" : "init = onnx");
    if (*s->onnx) { /* every rank reads the graph: each builds its models from it */
        FH_CHECK(fh_check_readable(s->onnx));
        FH_CHECK(onnx_net_read(&s->net, s->onnx));
        onnx_net_set_features(s->net, s->features);
        s->model = "onnx";
    }
    if (s->crop.scale_min > s->crop.scale_max || s->crop.ratio_min > s->crop.ratio_max)
        FH_FAIL(FH_ERR_USAGE, "%s: [data] crop_scale_min/max or crop_ratio_min/max: min above max",
                config_path ? config_path : "config");
    if (*s->name) { /* empty: the config file's name, checked when the run folder is named */
        char what[4200];
        snprintf(what, sizeof what, "%.4000s: [output] name", config_path ? config_path : "config");
        FH_CHECK(fh_check_plain_name(s->name, what));
    }
    return FH_OK;
}
