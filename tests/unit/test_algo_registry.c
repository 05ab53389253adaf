/* Every row of the method registry (include/fedhet/algo.h): unique method names; each row's option parts
 * declared well (unique keys over its parts, help, defaults inside their ranges, valid default choices, every
 * field inside its part's struct, the block within ALGO_OPTIONS_BYTES, tunes of keys the row has); every key in
 * `fedhet methods NAME` with its default; and every row (and FLOOD as a plug-in) validated, sized, trained for
 * two local steps on two clients and aggregated for two rounds on a tiny model through the runtime's client
 * loop, so that a hook reading a part its row does not list aborts here.
 * usage: build/tests/test_algo_registry [test_name] (from the repository root: the listing runs bin/fedhet) */
#include "test.h"
#include "test_bin.h"
#include "test_tmp.h"

#include <hdf5.h>
#include <math.h>

#include "../../src/fl/fl_internal.h"
#include "test_options.h"
#include "tiny_partition.h"

static void test_names_unique(void)
{
    CHECK(algo_count() > 1 && algo_find("fedavg") == algo_at(0));
    for (int i = 0; i < algo_count(); i++) {
        const AlgoMethod *m = algo_at(i);
        CHECK_MSG(m->name && *m->name && m->summary && m->source, "row %d", i);
        CHECK_MSG(algo_find(m->name) == m, "%s: the name is taken by an earlier row", m->name);
    }
}

/* the bytes a key's field occupies in its part's struct */
static size_t field_size(const AlgoOption *o) { return o->type == FH_CFG_FLOAT ? sizeof(double) : sizeof(int); }

static void check_default(const AlgoMethod *m, const AlgoOption *o, double d)
{
    int len;
    if (o->type == FH_CFG_CHOICE) {
        CHECK_MSG(d == floor(d) && algo_option_choice(o, (int)d, &len), "%s.%s: default %g is not a choice of %s",
                  m->name, o->key, d, o->choices);
        return;
    }
    if (o->type == FH_CFG_BOOL) {
        CHECK_MSG(d == 0.0 || d == 1.0, "%s.%s: default %g is not 0 (false) or 1 (true)", m->name, o->key, d);
        return;
    }
    if (o->type == FH_CFG_INT) CHECK_MSG(d == floor(d), "%s.%s: default %g is not an integer", m->name, o->key, d);
    const int above = o->lo_open ? d > o->lo : d >= o->lo, below = o->hi_open ? d < o->hi : d <= o->hi;
    CHECK_MSG(above && below, "%s.%s: default %g is outside %c%g, %g%c", m->name, o->key, d, o->lo_open ? '(' : '[',
              o->lo, o->hi, o->hi_open ? ')' : ']');
}

static void test_option_parts_declared(void)
{
    for (int i = 0; i < algo_count(); i++) {
        const AlgoMethod *m = algo_at(i);
        CHECK_MSG(algo_options_size(m) <= ALGO_OPTIONS_BYTES, "%s: options of %zu bytes", m->name,
                  algo_options_size(m));
        for (int p = 0; p < ALGO_MAX_PARTS && m->parts[p]; p++) {
            const AlgoOptionPart *part = m->parts[p];
            CHECK_MSG(part->name && part->n > 0 && part->size > 0, "%s: part %d", m->name, p);
            for (int q = 0; q < p; q++) CHECK_MSG(m->parts[q] != part, "%s lists part %s twice", m->name, part->name);
            for (int k = 0; k < part->n; k++) {
                const AlgoOption *o = &part->keys[k];
                CHECK_MSG(o->at + field_size(o) <= part->size, "%s.%s: field outside part %s", m->name, o->key,
                          part->name);
                CHECK_MSG((o->type == FH_CFG_CHOICE) == (o->choices != NULL), "%s.%s: a choice needs its choices",
                          m->name, o->key);
            }
        }
        for (int k = 0; k < algo_option_count(m); k++) {
            const AlgoOption *o = algo_option_at(m, k);
            CHECK_MSG(o && o->key && *o->key, "%s: key %d", m->name, k);
            if (!o) continue;
            CHECK_MSG(algo_option_find(m, o->key) == o, "%s: key %s twice", m->name, o->key);
            const char *help = algo_option_help(m, o);
            CHECK_MSG(help && strlen(help) > 10, "%s.%s: no help", m->name, o->key);
            check_default(m, o, algo_option_default(m, o));
        }
        for (int t = 0; t < ALGO_MAX_TUNES && m->tunes[t].key; t++)
            CHECK_MSG(algo_option_find(m, m->tunes[t].key), "%s: a tune of %s, not one of its keys", m->name,
                      m->tunes[t].key);
        /* the defaults land in the block: every key reads back its default */
        AlgoOptionBlock b;
        algo_options_reset(&b, m);
        for (int k = 0; k < algo_option_count(m); k++) {
            const AlgoOption *o = algo_option_at(m, k);
            CHECK_MSG(algo_option_value(algo_options_view(m, &b), o) == algo_option_default(m, o), "%s.%s", m->name,
                      o->key);
        }
    }
    AlgoOptionBlock b;
    algo_options_reset(&b, algo_find("fedavg"));
    CHECK(algo_option_set(&b, algo_find("fedavg"), "rho", 1.0) == FH_ERR_USAGE); /* not a key of fedavg */
    fh_error_clear();
}

/* `fedhet methods NAME` lists every key of the row with its default, and the rule of its server weights */
static void test_methods_listing(void)
{
    for (int i = 0; i < algo_count(); i++) {
        const AlgoMethod *m = algo_at(i);
        RunResult *r = run_fedhet("methods %s", m->name);
        CHECK_MSG(r->code == 0, "%s: %s", r->cmd, r->out);
        if (!algo_option_count(m)) CHECK_MSG(strstr(r->out, "no keys") != NULL, "%s", m->name);
        for (int k = 0; k < algo_option_count(m); k++) {
            const AlgoOption *o = algo_option_at(m, k);
            char want[160];
            int len = 0;
            const char *choice = algo_option_choice(o, (int)algo_option_default(m, o), &len);
            if (o->type == FH_CFG_CHOICE)
                snprintf(want, sizeof want, "  %-16s default %.*s, one of", o->key, len, choice);
            else if (o->type == FH_CFG_BOOL)
                snprintf(want, sizeof want, "  %-16s default %s, one of true|false", o->key,
                         algo_option_default(m, o) ? "true" : "false");
            else if (o->type == FH_CFG_INT) /* in digits, the range too */
                snprintf(want, sizeof want, "  %-16s default %.0f, range %c%.0f, %.0f%c", o->key,
                         algo_option_default(m, o), o->lo_open ? '(' : '[', o->lo, o->hi, o->hi_open ? ')' : ']');
            else
                snprintf(want, sizeof want, "  %-16s default %g, range", o->key, algo_option_default(m, o));
            CHECK_MSG(strstr(r->out, want) != NULL, "methods %s: no line '%s'", m->name, want);
        }
        /* the server weights' rule: a method with a `weights` key names it, and only such a method */
        const AlgoServerWeights *w = m->weights ? m->weights : &algo_weights_samples;
        CHECK_MSG(w->rule && *w->rule, "%s: server weights without a rule", m->name);
        if (!w->rule) continue;
        CHECK_MSG(!strcmp(w->rule, ALGO_WEIGHTS_BY_KEY) == (algo_option_find(m, "weights") != NULL),
                  "%s: server weights '%s' but %s weights key", m->name, w->rule,
                  algo_option_find(m, "weights") ? "a" : "no");
        char line[160];
        snprintf(line, sizeof line, "  server weights: %s", w->rule);
        CHECK_MSG(strstr(r->out, line) != NULL, "methods %s: no line '%s'", m->name, line);
    }
}

/* Counts and switches of a method's keys through the run config: a fraction is refused naming the key, a whole number
 * written as a float lands as that integer, a switch takes true/false and nothing else; the values land as ints */
static void test_typed_method_keys(void)
{
    const char *config = tmp_path("typed.ini");
    tmp_record(config);
    FILE *f = fopen(config, "w");
    CHECK(f != NULL);
    if (!f) return;
    fprintf(f, "[data]\npath = unused.h5\n[algo]\nmethod = fedscam\n[output]\ndir = %s\n", tmp_root);
    fclose(f);
    const struct {
        const char *override, *error; /* error NULL: loads */
        const char *key;
        double value;
    } cases[] = {
        { "algo.clusters=2.5", "[algo] clusters = 2.5: not an integer", NULL, 0 },
        { "algo.proj_dim=64.5", "[algo] proj_dim = 64.5: not an integer", NULL, 0 },
        { "algo.clusters=0", "[algo] clusters = 0: must be in [1, 1000000]", NULL, 0 },
        { "algo.cluster=maybe", "[algo] cluster = maybe: must be true or false", NULL, 0 },
        { "algo.clusters=4.0", NULL, "clusters", 4 },
        { "algo.proj_dim=1e2", NULL, "proj_dim", 100 },
        { "algo.cluster=true", NULL, "cluster", 1 },
        { "algo.cluster=false", NULL, "cluster", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char override[64];
        snprintf(override, sizeof override, "%s", cases[i].override);
        char *overrides[1] = { override };
        FhConfig *cfg = NULL;
        fh_error_clear();
        const int status = fl_config_load(&cfg, config, 0, overrides, 1);
        if (cases[i].error) {
            CHECK_MSG(status == FH_ERR_USAGE && strstr(fh_error_message(), cases[i].error), "%s: %s", override,
                      fh_error_message());
            fh_config_free(&cfg);
            continue;
        }
        CHECK_MSG(status == FH_OK, "%s: %s", override, fh_error_message());
        if (!cfg) continue;
        FlSettings s;
        CHECK_OK(fl_settings_from_config(&s, cfg, config));
        CHECK_MSG(option_value(fl_method_options(&s), cases[i].key) == cases[i].value, "%s", override);
        fh_config_free(&cfg);
    }
    fh_error_clear();
}

/* A row's tune of a count or a switch of a shared part: its default in the block, the schema and the listing */
typedef struct {
    int count, on;
    double scale;
} TunedOptions;
static const AlgoOption tuned_keys[] = {
    { ALGO_INT(TunedOptions, count), .def.i = 3, .lo = 1, .hi = 100, .help = "a count of things to tune" },
    { ALGO_BOOL(TunedOptions, on), .def.b = 0, .help = "a switch to tune, off by default" },
    { ALGO_NUMBER(TunedOptions, scale), .def.f = 0.5, .lo = 0, .hi = 1, .help = "a number left at its default" },
};
static const AlgoOptionPart tuned_part = ALGO_OPTION_PART("tuned", TunedOptions, tuned_keys);

static void test_tunes_of_typed_keys(void)
{
    const AlgoMethod plain = { .name = "plain", .parts = { &tuned_part } };
    const AlgoMethod tuned = { .name = "tuned", .parts = { &tuned_part },
                               .tunes = { { "count", 7, "seven things" }, { "on", 1, NULL } } };
    AlgoOptionBlock b;
    algo_options_reset(&b, &plain);
    const TunedOptions *o = algo_options(algo_options_view(&plain, &b), &tuned_part);
    CHECK(o->count == 3 && o->on == 0 && o->scale == 0.5);
    algo_options_reset(&b, &tuned);
    o = algo_options(algo_options_view(&tuned, &b), &tuned_part);
    CHECK(o->count == 7 && o->on == 1 && o->scale == 0.5);
    const FhConfigKey count = algo_option_config_key(&tuned, &tuned_keys[0]);
    const FhConfigKey on = algo_option_config_key(&tuned, &tuned_keys[1]);
    CHECK(count.type == FH_CFG_INT && count.def.i == 7 && !strcmp(count.help, "seven things") &&
          count.land == FH_LAND_NONE);
    CHECK(on.type == FH_CFG_BOOL && on.def.b == 1 && !strcmp(on.help, tuned_keys[1].help));
    CHECK(algo_option_config_key(&plain, &tuned_keys[0]).def.i == 3);
    /* the config reads the tuned defaults */
    const FhConfigKey schema[] = { count, on };
    FhConfig *cfg = NULL;
    CHECK_OK(fh_config_load_text(&cfg, schema, 2, "[algo]\n", "tuned", NULL, 0));
    if (cfg) CHECK(fh_config_int(cfg, "algo", "count") == 7 && fh_config_bool(cfg, "algo", "on") == 1);
    fh_config_free(&cfg);
    /* a count takes whole values only; a switch 0 or 1 */
    CHECK(algo_option_set(&b, &tuned, "count", 4) == FH_OK && o->count == 4);
    CHECK(algo_option_set(&b, &tuned, "count", 4.5) == FH_ERR_USAGE && strstr(fh_error_message(), "count = 4.5"));
    CHECK(algo_option_set(&b, &tuned, "on", 2) == FH_ERR_USAGE && strstr(fh_error_message(), "on = 2"));
    fh_error_clear();
}

/* ---- every row through the runtime's client loop and the server hooks ------------------------------------- */

enum { K = 2, ROUNDS = 2 };

static const char *tiny_config(const char *data)
{
    const char *path = tmp_path("registry.ini");
    tmp_record(path);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return path;
    fprintf(f,
            "[data]\npath = %s\n[model]\nname = mlp\n[train]\noptimizer = sgd\nlr = 0.05\nbatch_size = 8\nsteps = 2\n"
            "[fl]\nrounds = %d\nselection = all\nseed = 3\n[output]\ndir = %s\n",
            data, ROUNDS, tmp_root);
    fclose(f);
    return path;
}

/* method `name` (with plug-in `plugin` or NULL) at its defaults: two clients, two rounds */
static void run_row(const char *config, const char *name, const char *plugin)
{
    char method[160], with[160];
    snprintf(method, sizeof method, "algo.method=%s", name);
    snprintf(with, sizeof with, "algo.plugin=%s", plugin ? plugin : "none");
    char *overrides[2] = { method, with };
    FhConfig *cfg = NULL;
    CHECK_OK(fl_config_load(&cfg, config, 0, overrides, 2));
    if (!cfg) return;
    FlSettings s;
    CHECK_OK(fl_settings_from_config(&s, cfg, config));
    DataPartFile f;
    CHECK_OK(data_partfile_open(&f, s.data_path));
    const int owned[K] = { 0, 1 };
    FlClientWork w;
    const int status = fl_client_init(&w, &s, &f, owned, K); /* validates and sizes */
    CHECK_MSG(status == FH_OK, "%s: %s", name, fh_error_message());
    if (status != FH_OK) {
        fh_error_clear();
        data_partfile_close(&f);
        fh_config_free(&cfg);
        return;
    }
    const AlgoSizes *z = &w.ops.sizes;
    const int64_t N = w.model.n_state;
    FlRecordLayout l;
    fl_record_layout(&l, z, N);
    char *rec = calloc(K, l.bytes);
    float *global = calloc((size_t)(1 + z->server_vectors) * N, sizeof(float)), *next = calloc((size_t)N,
                                                                                               sizeof(float));
    float *priv = calloc((size_t)(z->server_private + 1) * N, sizeof(float));
    float *sums = calloc((size_t)ALGO_MAX_SUMS * N, sizeof(float)); /* the server step's sums and coefficients */
    double coef[(1 + ALGO_MAX_SUMS) * K];
    double *scalars = calloc((size_t)(z->server_scalars + 1), sizeof(double)), p[K];
    int64_t client_sizes[K];
    for (int k = 0; k < K; k++) client_sizes[k] = data_loader_client_rows(&w.loader, k);
    nn_model_init_params(&w.model, (uint64_t)s.seed);
    memcpy(global, w.model.state, (size_t)N * sizeof(float));
    const int32_t selected[K] = { 0, 1 };
    AlgoServerCtx sc = { .rounds = ROUNDS, .n_clients = K, .n_selected = K, .selected = selected,
                         .n_params = w.model.n_params, .n_state = N, .options = fl_method_options(&s),
                         .setup = &w.setup, .sizes = z, .lr = s.lr, .current = global, .server_vecs = global + N,
                         .server_private = priv, .server_scalars = scalars, .client_sizes = client_sizes,
                         .label_counts = f.label_counts, .classes = f.classes, .views = w.model.views,
                         .n_views = w.model.n_views };
    /* the server scratch the row's sizes ask for, as the runtime hands it */
    sc.scratch = algo_ops_server_scratch(&w.ops, test_scratch(z->server_scratch).base);
    CHECK_OK(w.ops.server_init(&sc, global)); /* the runtime's composition (algo_ops_compose) */
    for (int round = 0; round < ROUNDS; round++) {
        AlgoUpload u[K];
        for (int k = 0; k < K; k++) {
            char *r = rec + (size_t)k * l.bytes;
            CHECK_OK(fl_client_train(&w, &l, global, global + N, scalars, k, k, round, s.lr, r));
            FlRecordHeader *h = fl_record_header(r);
            CHECK_MSG(h->n_steps > 0 && !h->nonfinite, "%s round %d client %d", name, round, k);
            u[k] = (AlgoUpload){ k, h->n_samples, h->n_steps, h->train_loss, fl_record_scalars(r),
                                 fl_record_state(r, &l), fl_record_state(r, &l) + N };
        }
        sc.round = round;
        CHECK_OK(algo_ops_weights(&w.ops, &sc, u, K, p));
        CHECK_OK(algo_server_update(&w.ops.update, &sc, u, K, p, next, sums, coef));
        int finite = 1;
        for (int64_t j = 0; j < N; j++) finite &= isfinite(next[j]) != 0;
        CHECK_MSG(finite, "%s round %d: the aggregate is not finite", name, round);
        memcpy(global, next, (size_t)N * sizeof(float));
    }
    free(rec), free(global), free(next), free(priv), free(sums), free(scalars);
    fl_client_free(&w);
    data_partfile_close(&f);
    fh_config_free(&cfg);
}

/* Every row composes alone and under every plug-in (every hook a function, validation and sizes included); a
 * plug-in with a hook no rule joins is refused */
static void test_composition(void)
{
    static AlgoOptionBlock host_keys, plugin_keys;
    AlgoSetup setup = { .n_clients = K, .per_round = K, .all_clients = 1, .rounds = ROUNDS, .n_params = 100,
                        .n_state = 100, .feature_size = 10, .classes = 4, .optimizer = "sgd", .lr = 0.1,
                        .momentum = 0.9, .epochs = 1, .batch_size = 8, .seed = 1, .lr_decay = 1.0 };
    for (int i = 0; i < algo_count(); i++)
        for (int j = -1; j < algo_count(); j++) {
            const AlgoMethod *m = algo_at(i), *plugin = j < 0 ? NULL : algo_at(j);
            if (plugin && (!plugin->plugin || plugin == m)) continue;
            algo_options_reset(&host_keys, m);
            if (plugin) algo_options_reset(&plugin_keys, plugin);
            setup.options = algo_options_view(m, &host_keys);
            AlgoOps ops;
            CHECK_MSG(algo_ops_compose(&ops, &setup, algo_options_view(plugin, &plugin_keys)) == FH_OK, "%s + %s: %s",
                      m->name, plugin ? plugin->name : "-", fh_error_message());
            CHECK_MSG(ops.grad_term && ops.correct && ops.step && ops.report_begin && ops.report_end &&
                      ops.server_init && ops.weights, "%s: a hook left NULL", m->name);
            CHECK(ops.has_weigh == (ops.weigh != NULL) && ops.has_batch_term == (ops.batch_term != NULL));
            if (plugin && !m->sample_weights && plugin->sample_weights) CHECK(ops.weigh_by_plugin);
            if (plugin && m->sample_weights) CHECK(ops.weigh == m->sample_weights->weigh && !ops.weigh_by_plugin);
            if (plugin && plugin->weights) CHECK(ops.weights == plugin->weights && ops.plugin_uploads);
            if (plugin) /* the plug-in's upload scalars follow the host's */
                CHECK(ops.sizes.upload_scalars == ops.host_upload_scalars + plugin->n_upload_scalars);
            algo_ops_free(&ops);
        }
    AlgoMethod stepping = *algo_find("flood");
    stepping.step = algo_find("fedsam")->step;
    AlgoOps ops;
    fh_error_clear();
    algo_options_reset(&host_keys, algo_find("fedavg"));
    algo_options_reset(&plugin_keys, &stepping);
    setup.options = algo_options_view(algo_find("fedavg"), &host_keys);
    CHECK(algo_ops_compose(&ops, &setup, algo_options_view(&stepping, &plugin_keys)) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "plug-in flood has a local step") != NULL);
    algo_ops_free(&ops);
    fh_error_clear();
}

static void test_every_row_trains(void)
{
    const char *config = tiny_config(tiny_partition("registry.h5", K, 48));
    for (int i = 0; i < algo_count(); i++) run_row(config, algo_at(i)->name, NULL);
    run_row(config, "fedsam", "flood");
    run_row(config, "fedprox", "flood");
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    if (test_bin_locate(argv[0]) != 0) return 1;
    if (tmp_init("registry") != 0) return 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    RUN(test_names_unique);
    RUN(test_option_parts_declared);
    RUN(test_methods_listing);
    RUN(test_typed_method_keys);
    RUN(test_tunes_of_typed_keys);
    RUN(test_composition);
    RUN(test_every_row_trains);
    tmp_cleanup();
    return test_summary();
}
