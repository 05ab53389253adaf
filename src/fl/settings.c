/* The config of `fedhet run`: every key, its default, range and meaning, in one table. */
#include "fl_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fedhet/core.h"

#define BIG 1e12

static FhConfigKey schema[64 + ALGO_MAX_HP * 8];
static int schema_n;

static void add(const char *section, const char *key, FhConfigType type, const char *def, double lo, double hi,
                const char *choices, const char *help)
{
    schema[schema_n++] = (FhConfigKey){ section, key, type, def, lo, hi, choices, help };
}

/* Hyperparameters of every method, once each (two methods may share a key such as mu). */
static void add_method_keys(void)
{
    static char defaults[ALGO_MAX_HP * 8][32];
    int n_defaults = 0;
    for (int i = 0; i < algo_count(); i++) {
        const AlgoMethod *m = algo_at(i);
        for (int h = 0; h < m->n_hp; h++) {
            int seen = 0;
            for (int j = 0; j < schema_n; j++)
                seen |= !strcmp(schema[j].section, "algo") && !strcmp(schema[j].key, m->hp[h].key);
            if (seen) continue;
            snprintf(defaults[n_defaults], sizeof defaults[0], "%.15g", m->hp[h].default_value);
            add("algo", m->hp[h].key, FH_CFG_FLOAT, defaults[n_defaults++], m->hp[h].lo, m->hp[h].hi, NULL,
                m->hp[h].help);
        }
    }
}

const FhConfigKey *fl_config_schema(int *n)
{
    if (!schema_n) {
        add("data", "path", FH_CFG_STRING, NULL, 1, 0, NULL, "partitioned HDF5 file (fedhet partition); made from source if absent");
        add("data", "source", FH_CFG_STRING, "", 1, 0, NULL,
            "raw data set to partition into path when path does not exist (e.g. fashion-mnist); empty: path must exist");
        add("data", "scheme", FH_CFG_CHOICE, "dirichlet", 1, 0, "iid|dirichlet|pathological|quantity", "partition scheme (with source)");
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
        add("train", "optimizer", FH_CFG_CHOICE, "sgd", 1, 0, "sgd|adam|adamw", "local optimiser, fresh every round (spec 0.1)");
        add("train", "lr", FH_CFG_FLOAT, "0.01", 1e-12, BIG, NULL, "local learning rate, > 0");
        add("train", "momentum", FH_CFG_FLOAT, "0", 0, 0.999999, NULL, "SGD momentum");
        add("train", "weight_decay", FH_CFG_FLOAT, "0", 0, 1, NULL, "L2 added to the gradient (AdamW: decoupled)");
        add("train", "epochs", FH_CFG_INT, "1", 1, 100000, NULL, "local epochs E (when steps = 0)");
        add("train", "steps", FH_CFG_INT, "0", 0, 1e12, NULL, "local steps per round instead of epochs; 0: E epochs");
        add("train", "batch_size", FH_CFG_INT, "64", 1, 65536, NULL, "local batch size B (the last partial batch is kept)");
        add("train", "clip", FH_CFG_FLOAT, "0", 0, BIG, NULL, "clip the gradient's L2 norm to this; 0: off");
        add("train", "lr_decay", FH_CFG_FLOAT, "1", 1e-6, 1, NULL, "lr multiplied by this after every round (spec 0.1.5)");
        add("train", "beta1", FH_CFG_FLOAT, "0.9", 0, 0.999999, NULL, "Adam beta1");
        add("train", "beta2", FH_CFG_FLOAT, "0.999", 0, 0.999999999, NULL, "Adam beta2");
        add("train", "eps", FH_CFG_FLOAT, "1e-8", 1e-30, 1, NULL, "Adam epsilon");
        add("train", "threads", FH_CFG_INT, "1", 1, 256, NULL, "OpenBLAS threads per rank (results are promised for a fixed value)");
        add("fl", "rounds", FH_CFG_INT, "10", 1, 1e8, NULL, "communication rounds T");
        add("fl", "selection", FH_CFG_CHOICE, "all", 1, 0, "all|fraction|count|bernoulli",
            "clients per round: all; fraction: max(floor(fraction K), 1) uniform without replacement; count; bernoulli: each with p = fraction (spec 0.2)");
        add("fl", "fraction", FH_CFG_FLOAT, "0.1", 1e-9, 1, NULL, "share of clients for selection = fraction | bernoulli");
        add("fl", "count", FH_CFG_INT, "10", 1, 1e6, NULL, "clients per round for selection = count");
        add("fl", "seed", FH_CFG_INT, "0", 0, 2147483647, NULL, "seed of model init, selection, shuffles, augmentation");
        add("fl", "eval_every", FH_CFG_INT, "1", 0, 1e8, NULL, "evaluate the global model every this many rounds (and after the last); 0: last only");
        add("fl", "checkpoint_every", FH_CFG_INT, "10", 0, 1e8, NULL, "checkpoint every this many rounds (and at the end); 0: end only");
        add("algo", "method", FH_CFG_CHOICE, "fedavg", 1, 0, algo_choices(), "federated method (fedhet methods lists them)");
        add_method_keys();
        add("output", "dir", FH_CFG_STRING, "outputs", 1, 0, NULL, "folder of run folders");
        add("output", "name", FH_CFG_STRING, "", 1, 0, NULL, "run folder name; empty: the config file's name without .ini");
        add("output", "log_level", FH_CFG_CHOICE, "info", 1, 0, "quiet|warn|info|debug", "how much to print");
    }
    *n = schema_n;
    return schema;
}

void fl_print_config_help(FILE *out)
{
    int n;
    const FhConfigKey *keys = fl_config_schema(&n);
    fh_config_print_help(out, keys, n);
}

#define S(sec, key) fh_config_string(cfg, sec, key)
#define I(sec, key) fh_config_int(cfg, sec, key)
#define F(sec, key) fh_config_float(cfg, sec, key)

int fl_settings_from_config(FlSettings *s, const FhConfig *cfg, const char *config_path)
{
    memset(s, 0, sizeof *s);
    s->data_path = S("data", "path");
    s->data_source = S("data", "source");
    s->scheme = S("data", "scheme");
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
    s->rounds = (int)I("fl", "rounds");
    s->selection = S("fl", "selection");
    s->fraction = F("fl", "fraction");
    s->count = (int)I("fl", "count");
    s->seed = I("fl", "seed");
    s->eval_every = (int)I("fl", "eval_every");
    s->checkpoint_every = (int)I("fl", "checkpoint_every");
    s->method = algo_find(S("algo", "method"));
    if (!s->method) FH_FAIL(FH_ERR_USAGE, "[algo] method = %s is unknown", S("algo", "method"));
    for (int h = 0; h < s->method->n_hp; h++) s->hp[h] = F("algo", s->method->hp[h].key);
    s->out_dir = S("output", "dir");
    s->name = S("output", "name");
    s->log_level = S("output", "log_level");
    if (!*s->data_path) FH_FAIL(FH_ERR_USAGE, "%s: [data] path is empty", config_path ? config_path : "config");
    if (*s->data_source && strcmp(s->corruption, "none") && s->corrupted == 0)
        FH_FAIL(FH_ERR_USAGE, "%s: [data] corruption = %s but corrupted = 0 (how many clients?)",
                config_path ? config_path : "config", s->corruption);
    if (!*s->out_dir) FH_FAIL(FH_ERR_USAGE, "%s: [output] dir is empty", config_path ? config_path : "config");
    if (strchr(s->name, '/'))
        FH_FAIL(FH_ERR_USAGE, "%s: [output] name = %s must not contain '/'", config_path ? config_path : "config", s->name);
    return FH_OK;
}
