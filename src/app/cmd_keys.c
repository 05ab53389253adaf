/* fedhet keys: every config key (of run, partition, landscape, grid and report, every method's [algo] keys with the methods that
 * take them), the commands and the methods as TSV or JSON tables (app.h), read from the schema tables and the
 * registry themselves: what the bash completion, tools/gen-docs.py and tools/gen-man.sh read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "fedhet/algo.h"
#include "fedhet/analysis.h"
#include "fedhet/config.h"
#include "fedhet/core.h"
#include "fedhet/data.h"
#include "fedhet/fl.h"
#include "fedhet/grid.h"

static void print_help(void)
{
    printf("usage: fedhet keys [--format=tsv|json] [TABLE]\n"
           "\n"
           "Tables for scripts, read from the key tables and the method registry (not from help texts).\n"
           "TABLE: all (default): every config key of every command; run, partition, landscape, grid (its [grid]\n"
           "  settings; its other keys are run's) or report (its options, given as --KEY VALUE): that command's\n"
           "  keys; a section (data, model, train, fl, algo, output, source, ...): the keys of that section;\n"
           "  commands: the subcommands; methods: the methods (as fedhet methods --format); exit-codes: the exit\n"
           "  codes of every command (code, meaning).\n"
           "Columns of a key table:\n"
           "  command   run, partition, landscape, grid or report\n"
           "  section   [section] in a config file; a partition's or landscape's key is given without it, a\n"
           "            report's as --KEY\n"
           "  key       the key's name\n"
           "  type      int, float, bool, string or choice\n"
           "  default   the default as a config would give it (empty when required)\n"
           "  allowed   a number's range ([lo, hi], ( ) for an open end), a choice's a|b|c, a bool's true|false\n"
           "  required  true: no default\n"
           "  methods   an [algo] key of methods: the methods that take it with this row's default, allowed values\n"
           "            and help (a method whose default or help differs has a row of its own); empty: every method\n"
           "  help      what it means\n"
           "Columns of commands: command, mpi (it runs under mpirun), keys (the command whose keys it takes),\n"
           "  options (besides --help), summary.\n"
           "Formats: tsv (default): a header row, then a row per line; a tab, newline, carriage return or backslash\n"
           "  in a cell is \\t, \\n, \\r, \\\\. json: an array of objects keyed by column. A list (methods, options,\n"
           "  a method's keys) is space-separated in TSV and an array in JSON; a bool is true or false.\n"
           "example: fedhet keys algo | awk -F'\\t' 'NR > 1 { print $3 }' | sort -u   (every method key)\n");
}

static const AppColumn key_columns[] = {
    {"command", APP_CELL_TEXT}, {"section", APP_CELL_TEXT}, {"key", APP_CELL_TEXT},
    {"type", APP_CELL_TEXT},    {"default", APP_CELL_TEXT}, {"allowed", APP_CELL_TEXT},
    {"required", APP_CELL_BOOL}, {"methods", APP_CELL_LIST}, {"help", APP_CELL_TEXT},
};
enum { N_KEY_COLUMNS = sizeof key_columns / sizeof key_columns[0] };

/* which rows a table prints: every one ("all"), a command's, or a section's */
typedef struct {
    const char *what;
    int count_only; /* 1: count the rows that match, print none */
    int matched;
    AppTable table;
} KeyFilter;

static void key_row(KeyFilter *f, const char *command, const FhConfigKey *k, const char *methods)
{
    if (strcmp(f->what, "all") && strcmp(f->what, command) && strcmp(f->what, k->section)) return;
    f->matched++;
    if (f->count_only) return;
    char def[512], range[96];
    fh_config_default_text(k, def, sizeof def);
    fh_config_range_text(k, range, sizeof range);
    const char *allowed = k->type == FH_CFG_CHOICE ? k->choices : k->type == FH_CFG_BOOL ? "true|false" : range;
    const char *cells[N_KEY_COLUMNS] = { command, k->section, k->key, fh_config_type_name(k->type), def, allowed,
                                         k->required ? "true" : "false", methods, k->help };
    app_table_row(&f->table, cells);
}

static void key_rows(KeyFilter *f, const char *command, const FhConfigKey *keys, int n)
{
    for (int i = 0; i < n; i++) key_row(f, command, &keys[i], "");
}

static int same_text(const char *a, const char *b) { return !strcmp(a ? a : "", b ? b : ""); }

/* the same key as a method sees it: type, default, range or choices, and help */
static int same_key(const FhConfigKey *a, const FhConfigKey *b)
{
    char da[512], db[512], ra[96], rb[96];
    fh_config_default_text(a, da, sizeof da);
    fh_config_default_text(b, db, sizeof db);
    fh_config_range_text(a, ra, sizeof ra);
    fh_config_range_text(b, rb, sizeof rb);
    return !strcmp(a->key, b->key) && a->type == b->type && a->required == b->required && !strcmp(da, db) &&
           !strcmp(ra, rb) && same_text(a->choices, b->choices) && same_text(a->help, b->help);
}

/* Every method's [algo] keys as the run schema of that method holds them (its own defaults and help): a row per
 * distinct key, naming the methods that share it, in the order of first appearance. */
static int method_key_rows(KeyFilter *f)
{
    int n_base, n_rows = 0, total = 0;
    fl_config_schema(&n_base);
    for (int i = 0; i < algo_count(); i++) total += algo_option_count(algo_at(i));
    const FhConfigKey **rows = NULL;
    char *names = NULL; /* the methods of row r at names[r * names_cap] */
    size_t names_cap = 1;
    for (int i = 0; i < algo_count(); i++) names_cap += strlen(algo_at(i)->name) + 1;
    int status = fh_calloc(&rows, (size_t)total + 1, sizeof *rows, "the method keys");
    if (status == FH_OK) status = fh_calloc(&names, ((size_t)total + 1) * names_cap, 1, "the method keys' methods");
    for (int i = 0; status == FH_OK && i < algo_count(); i++) {
        const AlgoMethod *m = algo_at(i);
        int n;
        const FhConfigKey *keys = fl_config_schema_for(m, NULL, &n);
        for (int j = n_base; j < n; j++) {
            int r = 0;
            while (r < n_rows && !same_key(rows[r], &keys[j])) r++;
            if (r == n_rows) rows[n_rows++] = &keys[j];
            char *list = names + (size_t)r * names_cap;
            const size_t used = strlen(list);
            snprintf(list + used, names_cap - used, "%s%s", used ? " " : "", m->name);
        }
    }
    for (int r = 0; status == FH_OK && r < n_rows; r++) key_row(f, "run", rows[r], names + (size_t)r * names_cap);
    free(rows);
    free(names);
    return status;
}

/* every key of every command, in the order of their tables */
static int all_key_rows(KeyFilter *f)
{
    int n;
    const FhConfigKey *keys = fl_config_schema(&n);
    key_rows(f, "run", keys, n);
    FH_CHECK(method_key_rows(f));
    keys = data_partition_command_keys(&n);
    key_rows(f, "partition", keys, n);
    keys = landscape_keys(&n);
    key_rows(f, "landscape", keys, n);
    keys = grid_setting_keys(&n);
    key_rows(f, "grid", keys, n);
    keys = report_option_keys(&n);
    key_rows(f, "report", keys, n);
    return FH_OK;
}

static int key_table(const char *what, AppFormat format)
{
    KeyFilter f = { .what = what, .count_only = 1 };
    FH_CHECK(all_key_rows(&f));
    if (!f.matched)
        FH_FAIL(FH_ERR_USAGE, "no table '%s': all, commands, methods, exit-codes, run, partition, landscape, grid, "
                              "report, or a section with keys such as algo (see fedhet keys --help)", what);
    f.count_only = 0;
    app_table_begin(&f.table, stdout, format, key_columns, N_KEY_COLUMNS);
    FH_CHECK(all_key_rows(&f));
    app_table_end(&f.table);
    return FH_OK;
}

static void command_table(AppFormat format)
{
    static const AppColumn columns[] = {
        {"command", APP_CELL_TEXT}, {"mpi", APP_CELL_BOOL}, {"keys", APP_CELL_TEXT},
        {"options", APP_CELL_LIST}, {"summary", APP_CELL_TEXT},
    };
    AppTable t;
    app_table_begin(&t, stdout, format, columns, (int)(sizeof columns / sizeof columns[0]));
    int n;
    const AppCommand *c = app_commands(&n);
    for (int i = 0; i < n; i++) {
        const char *cells[] = { c[i].name, c[i].needs_mpi ? "true" : "false", c[i].keys, c[i].options, c[i].summary };
        app_table_row(&t, cells);
    }
    app_table_end(&t);
}

static void exit_code_table(AppFormat format)
{
    static const AppColumn columns[] = { {"code", APP_CELL_TEXT}, {"meaning", APP_CELL_TEXT} };
    AppTable t;
    app_table_begin(&t, stdout, format, columns, 2);
    int n;
    const FhExitCode *codes = fh_exit_codes(&n);
    for (int i = 0; i < n; i++) {
        const char *cells[] = { codes[i].code, codes[i].meaning };
        app_table_row(&t, cells);
    }
    app_table_end(&t);
}

int app_cmd_keys(int argc, char **argv)
{
    AppFormat format = APP_FORMAT_TSV;
    const char *what = NULL;
    for (int i = 1; i < argc; i++) {
        int consumed = 0;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help();
            return FH_OK;
        }
        FH_CHECK(app_format_take(argc, argv, &i, 0, &format, &consumed));
        if (consumed) continue;
        if (argv[i][0] == '-') FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet keys --help)", argv[i]);
        if (what) FH_FAIL(FH_ERR_USAGE, "keys takes one table, not '%s' and '%s' (see fedhet keys --help)", what, argv[i]);
        what = argv[i];
    }
    if (!what) what = "all";
    if (!strcmp(what, "commands")) command_table(format);
    else if (!strcmp(what, "methods")) app_methods_table(stdout, format);
    else if (!strcmp(what, "exit-codes")) exit_code_table(format);
    else return key_table(what, format);
    return FH_OK;
}
