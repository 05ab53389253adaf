/* fedhet methods: every method with its components, state and payload (docs/methods/baselines.md A.24), so that users see the
 * cost before they run; `fedhet methods NAME` adds the method's keys. */
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "fedhet/algo.h"
#include "fedhet/config.h"
#include "fedhet/core.h"

static void print_help(void)
{
    printf("usage: fedhet methods [NAME] [--format=text|tsv|json]\n"
           "\n"
           "Without NAME: one line per method: name, components (the hooks it sets: weigh = per-sample\n"
           "  loss weights, batch = loss on logits or features, term = gradient term, corr = gradient\n"
           "  correction, step = own local step, report = client begin/end work, weights, update, init =\n"
           "  server state), state kept per client and on the server, and payload per participating client\n"
           "  and round in models (P floats) and scalars.\n"
           "With NAME: the method's summary, family, source, and its [algo] keys with defaults, ranges and meaning.\n"
           "--format=tsv or json: every method as a table for scripts (fedhet keys --help describes the formats):\n"
           "  method, family, plugin (usable as [algo] plugin), components, state, payload, server weights,\n"
           "  aggregation (folded: the client ranks send rank 0 partial sums; gathered: rank 0 receives every\n"
           "  upload, and why), keys\n"
           "  (its [algo] keys in order; fedhet keys algo has their types, defaults and help), source, summary.\n");
}

static void components(const AlgoMethod *m, char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
#define PART(cond, name) \
    if (cond && used < n) used += (size_t)snprintf(out + used, n - used, "%s%s", used ? "+" : "", name);
    PART(m->sample_weights, "weigh")
    PART(m->batch_term, "batch")
    PART(m->local_term, "term")
    PART(m->correction, "corr")
    PART(m->step, "step")
    PART(m->report, "report")
    PART(m->weights && m->weights != &algo_weights_samples, "weights")
    PART(m->update, "update")
    PART(m->server_init, "init")
#undef PART
    if (!used) snprintf(out, n, "-");
}

/* how the round aggregates the method (docs/architecture.md "Aggregation") */
static void aggregation(const AlgoMethod *m, char *out, size_t n)
{
    const char *why = algo_gathers_why(m->update, m->weights);
    if (why) snprintf(out, n, "gathered: %s", why);
    else snprintf(out, n, "folded");
}

static void print_keys(const AlgoMethod *m)
{
    if (!algo_option_count(m)) {
        printf("  no keys\n");
        return;
    }
    for (int i = 0; i < algo_option_count(m); i++) {
        const AlgoOption *o = algo_option_at(m, i);
        const double def = algo_option_default(m, o);
        int len = 0;
        const char *choice = o->type == FH_CFG_CHOICE ? algo_option_choice(o, (int)def, &len) : NULL;
        if (choice)
            printf("  %-16s default %.*s, one of %s\n", o->key, len, choice, o->choices);
        else if (o->type == FH_CFG_BOOL)
            printf("  %-16s default %s, one of true|false\n", o->key, def != 0.0 ? "true" : "false");
        else if (o->type == FH_CFG_INT)
            printf("  %-16s default %.0f, range %c%.0f, %.0f%c\n", o->key, def, o->lo_open ? '(' : '[', o->lo, o->hi,
                   o->hi_open ? ')' : ']');
        else
            printf("  %-16s default %g, range %c%g, %g%c\n", o->key, def, o->lo_open ? '(' : '[', o->lo, o->hi,
                   o->hi_open ? ')' : ']');
        printf("  %-16s %s\n", "", algo_option_help(m, o));
    }
}

/* the rule of the server weights; a method without a weights part averages by sample counts (src/fl/run.c) */
static const char *weights_rule(const AlgoMethod *m) { return (m->weights ? m->weights : &algo_weights_samples)->rule; }
static const char *weights_note(const AlgoMethod *m)
{
    return strcmp(weights_rule(m), ALGO_WEIGHTS_BY_KEY) ? "" : " (uniform or sample counts: the weights key below)";
}

void app_methods_table(FILE *out, AppFormat format)
{
    static const AppColumn columns[] = {
        {"method", APP_CELL_TEXT}, {"family", APP_CELL_TEXT}, {"plugin", APP_CELL_BOOL},
        {"components", APP_CELL_TEXT}, {"state", APP_CELL_TEXT}, {"payload", APP_CELL_TEXT},
        {"server_weights", APP_CELL_TEXT}, {"aggregation", APP_CELL_TEXT}, {"keys", APP_CELL_LIST}, {"source", APP_CELL_TEXT},
        {"summary", APP_CELL_TEXT},
    };
    AppTable t;
    app_table_begin(&t, out, format, columns, (int)(sizeof columns / sizeof columns[0]));
    for (int i = 0; i < algo_count(); i++) {
        const AlgoMethod *m = algo_at(i);
        char parts[128], weights[256], agg[128], keys[1024] = "";
        components(m, parts, sizeof parts);
        aggregation(m, agg, sizeof agg);
        snprintf(weights, sizeof weights, "%s%s", weights_rule(m), weights_note(m));
        size_t used = 0;
        for (int h = 0; h < algo_option_count(m) && used < sizeof keys; h++)
            used += (size_t)snprintf(keys + used, sizeof keys - used, "%s%s", h ? " " : "", algo_option_at(m, h)->key);
        const char *cells[] = { m->name, algo_family_of(m), m->plugin ? "true" : "false", parts,
                                m->state ? m->state : "-", m->payload ? m->payload : "-", weights, agg, keys, m->source,
                                m->summary };
        app_table_row(&t, cells);
    }
    app_table_end(&t);
}

/* no such method: the nearest name when one is near, else the list */
static int unknown_method(const char *name)
{
    const char **names = NULL;
    FH_CHECK(fh_calloc(&names, (size_t)algo_count() + 1, sizeof *names, "method names"));
    for (int i = 0; i < algo_count(); i++) names[i] = algo_at(i)->name;
    const char *near = fh_nearest_name(name, names, algo_count());
    fh_free(&names);
    if (near) FH_FAIL(FH_ERR_USAGE, "no method named '%s'; did you mean '%s'? (fedhet methods lists them)", name, near);
    FH_FAIL(FH_ERR_USAGE, "no method named '%s'; methods: %s", name, algo_choices());
}

int app_cmd_methods(int argc, char **argv)
{
    const char *name = NULL;
    AppFormat format = APP_FORMAT_TEXT;
    for (int i = 1; i < argc; i++) {
        int consumed = 0;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help();
            return FH_OK;
        }
        FH_CHECK(app_format_take(argc, argv, &i, 1, &format, &consumed));
        if (consumed) continue;
        if (argv[i][0] == '-') FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet methods --help)", argv[i]);
        if (name) FH_FAIL(FH_ERR_USAGE, "methods takes at most one method name (see fedhet methods --help)");
        name = argv[i];
    }
    if (format != APP_FORMAT_TEXT) {
        if (name) FH_FAIL(FH_ERR_USAGE, "--format lists every method; without NAME (fedhet keys algo has their keys)");
        app_methods_table(stdout, format);
        return FH_OK;
    }
    if (name) {
        const AlgoMethod *m = algo_find(name);
        if (!m) return unknown_method(name);
        char parts[128], agg[128];
        components(m, parts, sizeof parts);
        aggregation(m, agg, sizeof agg);
        printf("%s: %s\n  family: %s\n  source: %s\n  components: %s\n  state: %s\n  payload: %s\n  server weights: %s%s\n"
               "  aggregation: %s\n\n[algo] keys (method = %s):\n",
               m->name, m->summary, algo_family_of(m), m->source, parts, m->state ? m->state : "-", m->payload ? m->payload : "-",
               weights_rule(m), weights_note(m), agg, m->name);
        print_keys(m);
        return FH_OK;
    }
    /* columns as wide as their longest entry, so that every method stays on one line */
    int wn = 6, wc = 10, ws = 23, wp = 7;
    for (int i = 0; i < algo_count(); i++) {
        const AlgoMethod *m = algo_at(i);
        char parts[128];
        components(m, parts, sizeof parts);
        wn = (int)strlen(m->name) > wn ? (int)strlen(m->name) : wn;
        wc = (int)strlen(parts) > wc ? (int)strlen(parts) : wc;
        if (m->state && (int)strlen(m->state) > ws) ws = (int)strlen(m->state);
        if (m->payload && (int)strlen(m->payload) > wp) wp = (int)strlen(m->payload);
    }
    printf("%-*s  %-*s  %-*s  %-*s  %s\n", wn, "method", wc, "components", ws, "state (client | server)", wp, "payload",
           "summary");
    for (int i = 0; i < algo_count(); i++) {
        const AlgoMethod *m = algo_at(i);
        char parts[128];
        components(m, parts, sizeof parts);
        printf("%-*s  %-*s  %-*s  %-*s  %s\n", wn, m->name, wc, parts, ws, m->state ? m->state : "-", wp,
               m->payload ? m->payload : "-", m->summary);
    }
    printf("\nP = model size in floats; K = clients; m = clients per round. fedhet methods NAME lists a method's keys.\n"
           "Plug-ins (added to any method with [algo] plugin = NAME): %s\n", algo_plugin_choices() + 5);
    return FH_OK;
}
