/* The config of `fedhet run`: every key, its default, range and meaning, in one table. */
#include "fl_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/onnx.h"

#define BIG 1e12

/* The keys every method shares; then [algo] method; then one method's own keys. */
static void base_keys(void);

static FhConfigKey base[80];
static int base_n;

static void add(const char *section, const char *key, FhConfigType type, const char *def, double lo, double hi,
                const char *choices, const char *help)
{
    base[base_n++] = (FhConfigKey){ section, key, type, def, lo, hi, choices, help };
}

static void build_base(void)
{
    if (base_n) return;
    base_keys();
}

const FhConfigKey *fl_config_schema(int *n)
{
    build_base();
    *n = base_n;
    return base;
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

/* the default's text of key o of method m: a number, or the choice at the default's index */
static const char *option_default_text(const AlgoMethod *m, const AlgoOption *o)
{
    char *text = malloc(32);
    if (!text) return "";
    const double value = algo_option_default(m, o);
    int len = 0;
    const char *choice = o->type == ALGO_OPTION_CHOICE ? algo_option_choice(o, (int)value, &len) : NULL;
    if (choice) snprintf(text, 32, "%.*s", len, choice);
    else snprintf(text, 32, "%.15g", value);
    return text;
}

static void add_option_keys(FhConfigKey *k, int *n, const AlgoMethod *m)
{
    for (int i = 0; i < algo_option_count(m); i++) {
        const AlgoOption *o = algo_option_at(m, i);
        const char *def = option_default_text(m, o), *help = algo_option_help(m, o);
        k[(*n)++] = o->type == ALGO_OPTION_CHOICE
                        ? (FhConfigKey){ "algo", o->key, FH_CFG_CHOICE, def, 1, 0, o->choices, help }
                        : (FhConfigKey){ "algo", o->key, FH_CFG_FLOAT, def, o->lo, o->hi, NULL, help };
    }
}

const FhConfigKey *fl_config_schema_for(const AlgoMethod *m, const AlgoMethod *plugin, int *n)
{
    build_base();
    const int mi = method_index(m), pi = plugin_slot(plugin);
    *n = base_n;
    if (mi < 0 || pi < 0) return base;
    if (!method_schema[mi][pi]) {
        FhConfigKey *k = calloc((size_t)(base_n + algo_option_count(m) + (plugin ? algo_option_count(plugin) : 0)),
                                sizeof *k);
        if (!k) return base;
        memcpy(k, base, (size_t)base_n * sizeof *k);
        int kn = base_n;
        add_option_keys(k, &kn, m);
        if (plugin) add_option_keys(k, &kn, plugin);
        method_schema[mi][pi] = k;
        method_schema_n[mi][pi] = kn;
    }
    *n = method_schema_n[mi][pi];
    return method_schema[mi][pi];
}

/* Every method key of every method as a free string: for reading [algo] method before the method's own
 * schema is known, and for naming the method a stray key belongs to. */
const FhConfigKey *fl_config_schema_any(int *n)
{
    static FhConfigKey *k;
    static int kn;
    build_base();
    if (!k) {
        int total = base_n;
        for (int i = 0; i < algo_count(); i++) total += algo_option_count(algo_at(i));
        k = calloc((size_t)total, sizeof *k);
        if (!k) {
            *n = base_n;
            return base;
        }
        memcpy(k, base, (size_t)base_n * sizeof *k);
        kn = base_n;
        for (int i = 0; i < algo_count(); i++)
            for (int h = 0; h < algo_option_count(algo_at(i)); h++) {
                const char *key = algo_option_at(algo_at(i), h)->key;
                int seen = 0;
                for (int j = base_n; j < kn; j++) seen |= !strcmp(k[j].key, key);
                if (!seen) k[kn++] = (FhConfigKey){ "algo", key, FH_CFG_STRING, "", 1, 0, NULL, "method key" };
            }
    }
    *n = kn;
    return k;
}

static void base_keys(void)
{
    add("data", "path", FH_CFG_STRING, NULL, 1, 0, NULL, "partitioned HDF5 file (fedhet partition); made from source if absent");
    add("data", "source", FH_CFG_STRING, "", 1, 0, NULL,
        "raw data set to partition into path when path does not exist (e.g. fashion-mnist); empty: path must exist");
    add("data", "scheme", FH_CFG_CHOICE, "dirichlet", 1, 0, "iid|dirichlet|pathological|quantity|natural",
        "partition scheme (with source); natural: a client per domain folder or client_column value");
    add("data", "source_options", FH_CFG_STRING, "", 1, 0, NULL,
        "image source keys of fedhet partition as 'key=value key=value' (with source: size, resize, crop, channels, "
        "label_columns, client_column, holdout_domain, split_within, normalise, ...; docs/data.md)");
    add("data", "normalise", FH_CFG_CHOICE, "file", 1, 0, "file|imagenet|none",
        "input normalisation: the partition file's mean/std, ImageNet's (0.485,0.456,0.406 / 0.229,0.224,0.225), "
        "or none (x/255)");
    add("data", "augment", FH_CFG_CHOICE, "auto", 1, 0, "auto|on|off",
        "training augmentation; auto: pad-4 crop + flip for 3x32x32, random-resized-crop + flip above 32x32");
    add("data", "crop_scale_min", FH_CFG_FLOAT, "0.08", 1e-6, 1, NULL, "random-resized-crop: smallest area share");
    add("data", "crop_scale_max", FH_CFG_FLOAT, "1", 1e-6, 1, NULL, "random-resized-crop: largest area share");
    add("data", "crop_ratio_min", FH_CFG_FLOAT, "0.75", 1e-3, 1e3, NULL, "random-resized-crop: smallest aspect w/h");
    add("data", "crop_ratio_max", FH_CFG_FLOAT, "1.3333333333333333", 1e-3, 1e3, NULL,
        "random-resized-crop: largest aspect w/h");
    add("data", "flip", FH_CFG_FLOAT, "0.5", 0, 1, NULL, "random-resized-crop: horizontal flip probability");
    add("data", "variant", FH_CFG_STRING, "", 1, 0, NULL,
        "the scheme's variant (with source; docs/methods/partitions.md B.3-B.5, as fedhet partition): iid niid-bench|flood|fl-simulator, "
        "dirichlet niid-bench|prior|quality, pathological shard|class; empty: the scheme's default");
    add("data", "alpha", FH_CFG_FLOAT, "0.5", 1e-9, BIG, NULL, "Dirichlet / quantity concentration, > 0 (with source)");
    add("data", "clients", FH_CFG_INT, "10", 1, 1000000, NULL, "number of clients K (with source)");
    add("data", "min_size", FH_CFG_INT, "10", 0, 1e9, NULL, "smallest client (with source)");
    add("data", "classes_per_client", FH_CFG_INT, "2", 1, 1e6, NULL, "pathological classes per client (with source)");
    add("data", "corruption", FH_CFG_CHOICE, "none", 1, 0, "none|gaussian_noise|motion_blur", "quality shift of the last clients (with source)");
    add("data", "severity", FH_CFG_INT, "3", 1, 5, NULL, "corruption severity (with source)");
    add("data", "corrupted", FH_CFG_INT, "0", 0, 1e6, NULL, "number of corrupted clients (with source)");
    add("data", "partition_seed", FH_CFG_INT, "0", 0, 2147483647, NULL, "partition seed (with source)");
    add("data", "eval_batch", FH_CFG_INT, "500", 1, 1e6, NULL, "test batch size (evaluation is split over ranks by batch)");
    add("model", "name", FH_CFG_CHOICE, "cnn", 1, 0, "mlp|cnn|lenet|smallcnn|resnet8|resnet18|resnet18_gn|mobilenetv2", "model of the zoo");
    add("model", "norm", FH_CFG_CHOICE, "bn", 1, 0, "bn|gn", "resnet18 normalisation");
    add("model", "groups", FH_CFG_INT, "2", 1, 1024, NULL, "GroupNorm groups");
    add("model", "init", FH_CFG_STRING, "", 1, 0, NULL,
        "HDF5 file whose /model tensors start the run (a run.h5, checkpoint.h5 or tools/fedhet-torch export); "
        "random: fedhet's own initialisation from fl.seed; onnx: the initializers of [model] onnx; "
        "empty: onnx with [model] onnx, else random");
    add("model", "onnx", FH_CFG_STRING, "", 1, 0, NULL,
        "ONNX file of the model (replaces name; docs/onnx.md): its graph becomes the model");
    add("model", "features", FH_CFG_STRING, "", 1, 0, NULL,
        "with onnx: the node (or output) whose output is the features tensor; empty: the input of the last "
        "Gemm / MatMul");
    add("train", "optimizer", FH_CFG_CHOICE, "sgd", 1, 0, "sgd|adam|adamw", "local optimiser, fresh every round (docs/methods/baselines.md §0.1)");
    add("train", "lr", FH_CFG_FLOAT, "0.01", 1e-12, BIG, NULL, "local learning rate, > 0");
    add("train", "momentum", FH_CFG_FLOAT, "0", 0, 0.999999, NULL, "SGD momentum");
    add("train", "weight_decay", FH_CFG_FLOAT, "0", 0, 1, NULL, "L2 added to the gradient (AdamW: decoupled)");
    add("train", "epochs", FH_CFG_INT, "1", 1, 100000, NULL, "local epochs E (when steps = 0)");
    add("train", "steps", FH_CFG_INT, "0", 0, 1e12, NULL, "local steps per round instead of epochs; 0: E epochs");
    add("train", "batch_size", FH_CFG_INT, "64", 1, 65536, NULL, "local batch size B (the last partial batch is kept)");
    add("train", "clip", FH_CFG_FLOAT, "0", 0, BIG, NULL, "clip the gradient's L2 norm to this; 0: off");
    add("train", "lr_decay", FH_CFG_FLOAT, "1", 1e-6, 1, NULL, "lr multiplied by this after every round (docs/methods/baselines.md §0.1.5)");
    add("train", "beta1", FH_CFG_FLOAT, "0.9", 0, 0.999999, NULL, "Adam beta1");
    add("train", "beta2", FH_CFG_FLOAT, "0.999", 0, 0.999999999, NULL, "Adam beta2");
    add("train", "eps", FH_CFG_FLOAT, "1e-8", 1e-30, 1, NULL, "Adam epsilon");
    add("train", "logit_adjust", FH_CFG_FLOAT, "0", 0, 100, NULL,
        "logit adjustment tau of the local loss, any method (docs/methods/baselines.md A.22; seed 001 uses 1); 0: off");
    add("train", "threads", FH_CFG_INT, "1", 1, 256, NULL,
        "OpenBLAS and oneDNN threads per rank (results are promised for a fixed value)");
    add("train", "backend", FH_CFG_CHOICE, NN_BACKEND_DEFAULT, 1, 0, "onednn|blas|auto",
        "what computes the conv layers: onednn (oneDNN's primitives), blas (im2col + OpenBLAS sgemm), or auto (oneDNN "
        "where it can build a layer, blas for the others, each named in a warning); the results differ in the last "
        "bits between backends (and CPU instruction sets), never between rank counts");
    add("fl", "rounds", FH_CFG_INT, "10", 1, 1e8, NULL, "communication rounds T");
    add("fl", "selection", FH_CFG_CHOICE, "all", 1, 0, "all|fraction|count|bernoulli",
        "clients per round: all; fraction: max(floor(fraction K), 1) uniform without replacement; count; bernoulli: each with p = fraction (docs/methods/baselines.md §0.2)");
    add("fl", "fraction", FH_CFG_FLOAT, "0.1", 1e-9, 1, NULL, "share of clients for selection = fraction | bernoulli");
    add("fl", "count", FH_CFG_INT, "10", 1, 1e6, NULL, "clients per round for selection = count");
    add("fl", "seed", FH_CFG_INT, "0", 0, 2147483647, NULL, "seed of model init, selection, shuffles, augmentation");
    add("fl", "eval_every", FH_CFG_INT, "1", 0, 1e8, NULL, "evaluate the global model every this many rounds (and after the last); 0: last only (a partition file "
        "without /test runs only with 0)");
    add("fl", "checkpoint_every", FH_CFG_INT, "10", 0, 1e8, NULL, "checkpoint every this many rounds (and at the end); 0: end only");
    add("fl", "term_grace", FH_CFG_FLOAT, "60", 0, 1e7, NULL,
        "seconds a round may still run after SIGTERM (or SIGUSR1); one still running then is left between local "
        "steps and the run stops with the checkpoint of the round before (written unless the method keeps per-client "
        "state, whose checkpoint stays as it was)");
    add("fl", "sharpness_every", FH_CFG_INT, "0", 0, 1e8, NULL,
        "metrics.csv sharpness S(rho) = L(rho) - L and perturbed loss L(rho) of the global model on a fixed probe set "
        "(docs/methods/sam.md §12; eval mode, plain CE, rank 0) every this many rounds and after the last; 0: off");
    add("fl", "sharpness_rho", FH_CFG_FLOAT, "0.05", 0, 1e6, NULL, "radius rho of the sharpness diagnostic");
    add("fl", "sharpness_probe", FH_CFG_INT, "1000", 1, 1e7, NULL,
        "probe rows of the sharpness diagnostic: the first rows of every client, in proportion to its size (training "
        "data, no augmentation)");
    add("fl", "hessian_every", FH_CFG_INT, "0", 0, 1e8, NULL,
        "metrics.csv hessian_max_eig (power iteration) and hessian_trace (Hutchinson) of the global model's mean CE "
        "on the sharpness probe set (fl.sharpness_probe rows; eval mode; Hessian-vector products by central "
        "differences of gradients, 2 probe gradients each, spread over all ranks, the same bits on any rank count) "
        "every this many rounds and after the last; 0: off");
    add("fl", "hessian_iters", FH_CFG_INT, "100", 1, 100000, NULL, "most power iterations for hessian_max_eig");
    add("fl", "hessian_tol", FH_CFG_FLOAT, "1e-3", 0, 1, NULL,
        "power iteration stops when the eigenvalue changes by at most this fraction between iterations; 0: always "
        "fl.hessian_iters");
    add("fl", "hessian_samples", FH_CFG_INT, "10", 1, 100000, NULL,
        "Rademacher vectors of the Hutchinson estimate hessian_trace (its standard error is in the log)");
    add("fl", "hessian_step", FH_CFG_FLOAT, "1e-3", 1e-6, 0.1, NULL,
        "central-difference step of the Hessian-vector products, relative: |eps v| = hessian_step * max(|w|, 1) "
        "(both gradients keep the ReLU / max-pool pattern of w, so no kink lies between them)");
    add("algo", "method", FH_CFG_CHOICE, "fedavg", 1, 0, algo_choices(), "federated method (fedhet methods lists them)");
    add("algo", "plugin", FH_CFG_CHOICE, "none", 1, 0, algo_plugin_choices(),
        "a method added on top of `method` (flood: FLOOD's sample weighting and aggregation, docs/methods/sam.md §13)");
    add("output", "dir", FH_CFG_STRING, "outputs", 1, 0, NULL, "folder of run folders");
    add("output", "name", FH_CFG_STRING, "", 1, 0, NULL, "run folder name; empty: the config file's name without .ini");
    add("output", "log_level", FH_CFG_CHOICE, "info", 1, 0, "quiet|warn|info|debug", "how much to print");
}

void fl_print_config_help(FILE *out)
{
    int n;
    const FhConfigKey *keys = fl_config_schema(&n);
    fh_config_print_help(out, keys, n);
    fprintf(out, "\nMethod keys, in [algo], each valid only with its method (fedhet methods NAME for details):\n");
    for (int i = 0; i < algo_count(); i++) {
        const AlgoMethod *m = algo_at(i);
        if (!algo_option_count(m)) continue;
        fprintf(out, "  %-12s", m->name);
        for (int h = 0; h < algo_option_count(m); h++) fprintf(out, "%s%s", h ? ", " : " ", algo_option_at(m, h)->key);
        fprintf(out, "\n");
    }
}

/* Keys renamed since configs that run folders and checkpoints still hold: a saved config is read with the new
 * names; a config a user writes gets the loader's "did you mean" for the old one. */
static const struct {
    const char *section, *was, *now;
} renamed_keys[] = { { "algo", "eta_s", "eta_g" } };

int fl_config_text_upgrade(const char *text, char **out)
{
    const size_t len = strlen(text);
    size_t grow = 0; /* a renamed key may be longer */
    for (size_t r = 0; r < sizeof renamed_keys / sizeof renamed_keys[0]; r++)
        for (const char *p = text; (p = strstr(p, renamed_keys[r].was)); p++)
            grow += strlen(renamed_keys[r].now);
    char *o = NULL;
    FH_CHECK(fh_calloc(&o, len + grow + 1, 1, "the upgraded config"));
    char section[64] = "";
    size_t w = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        const size_t n = end ? (size_t)(end - line) + 1 : strlen(line);
        const char *p = line + strspn(line, " \t");
        if (*p == '[') {
            const size_t k = strcspn(p + 1, "]\n");
            snprintf(section, sizeof section, "%.*s", (int)(k < sizeof section ? k : sizeof section - 1), p + 1);
        }
        const char *now = NULL;
        size_t was_len = 0;
        for (size_t r = 0; r < sizeof renamed_keys / sizeof renamed_keys[0] && !now; r++) {
            was_len = strlen(renamed_keys[r].was);
            if (!strcmp(section, renamed_keys[r].section) && !strncmp(p, renamed_keys[r].was, was_len) &&
                (p[was_len] == '=' || p[was_len] == ' ' || p[was_len] == '\t'))
                now = renamed_keys[r].now;
        }
        if (now) {
            const size_t lead = (size_t)(p - line);
            memcpy(o + w, line, lead);
            w += lead;
            memcpy(o + w, now, strlen(now));
            w += strlen(now);
            memcpy(o + w, p + was_len, n - lead - was_len);
            w += n - lead - was_len;
        } else {
            memcpy(o + w, line, n);
            w += n;
        }
        line += n;
    }
    o[w] = '\0';
    *out = o;
    return FH_OK;
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
    char *text = NULL;
    if (saved) {
        char *raw = NULL;
        FH_CHECK(fh_read_file(path, &raw, FH_ERR_USAGE));
        const int status = fl_config_text_upgrade(raw, &text);
        free(raw);
        FH_CHECK(status);
    }
    const int status = config_load(out, path, text, overrides, n_overrides);
    free(text);
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
        fh_config_free(&first);
        FH_FAIL(FH_ERR_USAGE, "%s: [algo] %s is a key of %s, not of method %s%s%s (its keys: %s)", path, any[i].key,
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
        const char *why = status == FH_OK ? plugin->plugin_refuse(m, algo_options_view(m, &hs.options)) : NULL;
        fh_config_free(&host_cfg);
        FH_CHECK(status);
        if (why) FH_FAIL(FH_ERR_USAGE, "%s: [algo] plugin = %s cannot join method %s: %s", path, plugin->name, m->name, why);
    }
    const FhConfigKey *own = fl_config_schema_for(m, plugin, &n);
    return config_load_with(out, own, n, path, text, overrides, n_overrides);
}

#define S(sec, key) fh_config_string(cfg, sec, key)

/* A method's keys into its option block: a choice is carried as its index; open range ends checked here */
static int read_options(const FhConfig *cfg, const AlgoMethod *m, AlgoOptionBlock *b, const char *config_path)
{
    algo_options_reset(b, m);
    for (int i = 0; i < algo_option_count(m); i++) {
        const AlgoOption *o = algo_option_at(m, i);
        if (o->type == ALGO_OPTION_CHOICE) { /* the config checked that it is one of them */
            FH_CHECK(algo_option_set(b, m, o->key, algo_option_choice_index(o, fh_config_string(cfg, "algo", o->key))));
            continue;
        }
        const double v = fh_config_float(cfg, "algo", o->key);
        if ((o->lo_open && !(v > o->lo)) || (o->hi_open && !(v < o->hi)))
            FH_FAIL(FH_ERR_USAGE, "%s: [algo] %s = %g is outside %c%g, %g%c (method %s)",
                    config_path ? config_path : "config", o->key, v, o->lo_open ? '(' : '[', o->lo, o->hi,
                    o->hi_open ? ')' : ']', m->name);
        FH_CHECK(algo_option_set(b, m, o->key, v));
    }
    return FH_OK;
}
#define I(sec, key) fh_config_int(cfg, sec, key)
#define F(sec, key) fh_config_float(cfg, sec, key)

int fl_settings_from_config(FlSettings *s, const FhConfig *cfg, const char *config_path)
{
    memset(s, 0, sizeof *s);
    s->data_path = S("data", "path");
    s->data_source = S("data", "source");
    s->source_options = S("data", "source_options");
    s->normalise = S("data", "normalise");
    s->augment = S("data", "augment");
    s->crop.scale_min = (float)F("data", "crop_scale_min");
    s->crop.scale_max = (float)F("data", "crop_scale_max");
    s->crop.ratio_min = (float)F("data", "crop_ratio_min");
    s->crop.ratio_max = (float)F("data", "crop_ratio_max");
    s->crop.flip = (float)F("data", "flip");
    s->scheme = S("data", "scheme");
    s->variant = S("data", "variant");
    s->alpha = F("data", "alpha");
    s->n_clients_partition = (int)I("data", "clients");
    s->min_size = (int)I("data", "min_size");
    s->classes_per_client = (int)I("data", "classes_per_client");
    s->corruption = S("data", "corruption");
    s->severity = (int)I("data", "severity");
    s->corrupted = (int)I("data", "corrupted");
    s->partition_seed = (int)I("data", "partition_seed");
    s->eval_batch = (int)I("data", "eval_batch");
    s->model = S("model", "name");
    s->norm = S("model", "norm");
    s->groups = (int)I("model", "groups");
    s->init = S("model", "init");
    s->onnx = S("model", "onnx");
    s->features = S("model", "features");
    s->optimizer = S("train", "optimizer");
    s->lr = F("train", "lr");
    s->momentum = F("train", "momentum");
    s->weight_decay = F("train", "weight_decay");
    s->epochs = (int)I("train", "epochs");
    s->steps = I("train", "steps");
    s->batch_size = (int)I("train", "batch_size");
    s->clip = F("train", "clip");
    s->lr_decay = F("train", "lr_decay");
    s->beta1 = F("train", "beta1");
    s->beta2 = F("train", "beta2");
    s->eps = F("train", "eps");
    s->threads = (int)I("train", "threads");
    s->backend = S("train", "backend");
    s->logit_adjust = F("train", "logit_adjust");
    s->rounds = (int)I("fl", "rounds");
    s->selection = S("fl", "selection");
    s->fraction = F("fl", "fraction");
    s->count = (int)I("fl", "count");
    s->seed = I("fl", "seed");
    s->eval_every = (int)I("fl", "eval_every");
    s->checkpoint_every = (int)I("fl", "checkpoint_every");
    s->term_grace = F("fl", "term_grace");
    s->sharpness_every = (int)I("fl", "sharpness_every");
    s->sharpness_rho = F("fl", "sharpness_rho");
    s->sharpness_probe = (int)I("fl", "sharpness_probe");
    s->hessian_every = (int)I("fl", "hessian_every");
    s->hessian_iters = (int)I("fl", "hessian_iters");
    s->hessian_tol = F("fl", "hessian_tol");
    s->hessian_samples = (int)I("fl", "hessian_samples");
    s->hessian_step = F("fl", "hessian_step");
    s->method = algo_find(S("algo", "method"));
    if (!s->method) FH_FAIL(FH_ERR_USAGE, "[algo] method = %s is unknown", S("algo", "method"));
    FH_CHECK(read_options(cfg, s->method, &s->options, config_path));
    s->plugin = algo_find(S("algo", "plugin"));
    if (s->plugin) FH_CHECK(read_options(cfg, s->plugin, &s->plugin_options, config_path));
    s->out_dir = S("output", "dir");
    s->name = S("output", "name");
    s->log_level = S("output", "log_level");
    if (!*s->data_path) FH_FAIL(FH_ERR_USAGE, "%s: [data] path is empty", config_path ? config_path : "config");
    if (*s->data_source && strcmp(s->corruption, "none") && s->corrupted == 0)
        FH_FAIL(FH_ERR_USAGE, "%s: [data] corruption = %s but corrupted = 0 (how many clients?)",
                config_path ? config_path : "config", s->corruption);
    if (!*s->out_dir) FH_FAIL(FH_ERR_USAGE, "%s: [output] dir is empty", config_path ? config_path : "config");
    if (!*s->onnx && (!strcmp(s->init, "onnx") || *s->features))
        FH_FAIL(FH_ERR_USAGE, "%s: [model] %s needs [model] onnx", config_path ? config_path : "config",
                *s->features ? "features" : "init = onnx");
    if (*s->onnx) { /* every rank reads the graph: each builds its models from it */
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
