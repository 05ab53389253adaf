/* Grid files (grid.h): the [grid] section, its lists and zip lines, member names and overrides, and the
 * per-member state files. No MPI here (tests/unit/test_grid.c runs it as a plain program). */
#include "fedhet/grid.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fedhet/core.h"
#include "fedhet/fl.h"
#include "fedhet/config.h"

/* ---- [grid] settings ------------------------------------------------------------------------------------ */

/* The [grid] keys that are settings of the grid, not lists of a run key (grid.KEY=VALUE on the command line) */
static const FhConfigKey settings[] = {
    { .section = "grid", .key = "ranks_per_member", .type = FH_CFG_INT, .def.i = 0, .lo = 0, .hi = 1e6,
      .help = "ranks per federation: the N ranks run N / ranks_per_member members at a time; 0: all ranks, one member "
              "at a time" },
    { .section = "grid", .key = "zip", .type = FH_CFG_STRING,
      .help = "comma-separated keys whose lists (of one length) vary together, one line per group" },
};

const FhConfigKey *grid_setting_keys(int *n)
{
    *n = (int)(sizeof settings / sizeof settings[0]);
    return settings;
}

/* ---- config keys --------------------------------------------------------------------------------------- */

/* every "section.key" a run config may hold: the run schema's keys, every method's once */
static char **known_keys;
static int n_known;

static int known_keys_build(void)
{
    if (known_keys) return FH_OK;
    int n;
    const FhConfigKey *schema = fl_config_schema_any(&n);
    char **keys = calloc((size_t)n, sizeof *keys);
    if (!keys) FH_FAIL(FH_ERR_MEMORY, "out of memory for the config key list");
    for (int i = 0; i < n; i++) {
        keys[i] = malloc(strlen(schema[i].section) + strlen(schema[i].key) + 2);
        if (!keys[i]) FH_FAIL(FH_ERR_MEMORY, "out of memory for the config key list");
        sprintf(keys[i], "%s.%s", schema[i].section, schema[i].key);
    }
    known_keys = keys;
    n_known = n;
    return FH_OK;
}

int grid_resolve_key(const char *given, const char *where, char *out, size_t size)
{
    FH_CHECK(known_keys_build());
    if (strchr(given, '.')) {
        for (int i = 0; i < n_known; i++)
            if (!strcmp(known_keys[i], given)) {
                snprintf(out, size, "%s", given);
                return FH_OK;
            }
        const char *near = fh_nearest_name(given, (const char *const *)known_keys, n_known);
        if (near) FH_FAIL(FH_ERR_USAGE, "%s%s is not a config key; did you mean %s? (fedhet run --help lists them)", where, given, near);
        FH_FAIL(FH_ERR_USAGE, "%s%s is not a config key (fedhet run --help lists them)", where, given);
    }
    /* a bare name: it must name exactly one key */
    int found = -1, n_found = 0;
    char both[512] = "";
    for (int i = 0; i < n_known; i++) {
        const char *dot = strchr(known_keys[i], '.');
        if (strcmp(dot + 1, given)) continue;
        size_t used = strlen(both);
        snprintf(both + used, sizeof both - used, "%s%s", n_found ? " or " : "", known_keys[i]);
        found = i;
        n_found++;
    }
    if (n_found == 1) {
        snprintf(out, size, "%s", known_keys[found]);
        return FH_OK;
    }
    if (n_found > 1) FH_FAIL(FH_ERR_USAGE, "%s%s is ambiguous: write %s", where, given, both);
    const char **names = calloc(n_known > 0 ? (size_t)n_known : 1, sizeof *names);
    if (!names) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    for (int i = 0; i < n_known; i++) names[i] = strchr(known_keys[i], '.') + 1;
    const char *near = fh_nearest_name(given, names, n_known);
    char hint[256] = "";
    for (int i = 0; near && i < n_known; i++)
        if (names[i] == near) snprintf(hint, sizeof hint, "; did you mean %s?", known_keys[i]);
    free(names);
    FH_FAIL(FH_ERR_USAGE, "%s%s is not a config key%s (keys are section.key; fedhet run --help lists them)", where,
            given, hint);
}

/* ---- lists --------------------------------------------------------------------------------------------- */

static int push_value(GridAxis *a, const char *v, size_t n)
{
    if (a->n_values >= GRID_VALUES_MAX)
        FH_FAIL(FH_ERR_USAGE, "[grid] %s: more than %d values in one list", a->key, GRID_VALUES_MAX);
    if (a->n_values == a->cap_values) { /* doubling: a range of 100,000 values is 17 reallocations */
        const int cap = a->cap_values ? 2 * a->cap_values : 8;
        char **grown = realloc(a->values, (size_t)cap * sizeof *grown);
        if (!grown) FH_FAIL(FH_ERR_MEMORY, "out of memory for grid values");
        a->values = grown;
        a->cap_values = cap;
    }
    a->values[a->n_values] = malloc(n + 1);
    if (!a->values[a->n_values]) FH_FAIL(FH_ERR_MEMORY, "out of memory for grid values");
    memcpy(a->values[a->n_values], v, n);
    a->values[a->n_values][n] = '\0';
    a->n_values++;
    return FH_OK;
}

/* "A..B" with integers A <= B */
static int parse_range(const char *s, size_t n, long *lo, long *hi)
{
    char buf[64];
    if (n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *dots = strstr(buf, "..");
    if (!dots || dots == buf) return 0;
    *dots = '\0';
    char *end1, *end2;
    errno = 0;
    *lo = strtol(buf, &end1, 10);
    *hi = strtol(dots + 2, &end2, 10);
    return errno == 0 && *end1 == '\0' && *end2 == '\0' && dots[2] != '\0';
}

/* "0.01, 0.05, \"a, b\", 0..3, -": items split at commas outside double quotes, trimmed, unquoted;
 * integer ranges A..B expand; a bare - leaves the key unset for that member. Repeats are checked once the
 * zip lines are known (build_dims). */
static int parse_list(GridAxis *a, const char *raw, const char *where)
{
    const char *p = raw;
    int item = 0;
    for (;;) {
        item++;
        while (isspace((unsigned char)*p)) p++;
        const char *start = p;
        int quoted = 0;
        while (*p && (quoted || *p != ',')) {
            if (*p == '"') quoted = !quoted;
            p++;
        }
        size_t n = (size_t)(p - start);
        while (n && isspace((unsigned char)start[n - 1])) n--;
        if (n >= 2 && start[0] == '"' && start[n - 1] == '"') {
            start++;
            n -= 2;
        } else if (n == 0) {
            if (item == 1 && !*p) FH_FAIL(FH_ERR_USAGE, "%s%s: empty list (give values separated by commas)", where, a->key);
            FH_FAIL(FH_ERR_USAGE, "%s%s: item %d of the list is empty", where, a->key, item);
        }
        if (memchr(start, '"', n)) FH_FAIL(FH_ERR_USAGE, "%s%s: item %d: stray double quote", where, a->key, item);
        long lo, hi;
        if (parse_range(start, n, &lo, &hi)) {
            if (hi < lo) FH_FAIL(FH_ERR_USAGE, "%s%s: range %.*s is empty (write A..B with A <= B)", where, a->key, (int)n, start);
            if (hi - lo >= 100000) FH_FAIL(FH_ERR_USAGE, "%s%s: range %.*s is too long", where, a->key, (int)n, start);
            for (long v = lo; v <= hi; v++) {
                char num[32];
                int len = snprintf(num, sizeof num, "%ld", v);
                FH_CHECK(push_value(a, num, (size_t)len));
            }
        } else
            FH_CHECK(push_value(a, start, n));
        if (!*p) break;
        p++; /* the comma */
    }
    return FH_OK;
}

static void axis_free(GridAxis *a)
{
    for (int i = 0; i < a->n_values; i++) free(a->values[i]);
    free(a->values);
    memset(a, 0, sizeof *a);
}

/* ---- loading ------------------------------------------------------------------------------------------- */

typedef struct {
    char text[1024];
    int line;
} ZipLine;

static int find_axis(const GridSpec *g, const char *key)
{
    for (int a = 0; a < g->n_axes; a++)
        if (!strcmp(g->axes[a].key, key)) return a;
    return -1;
}

/* Sets (or replaces) the list of key; line 0 = the command line. */
static int set_axis(GridSpec *g, const char *given, const char *raw, int line)
{
    char where[GRID_PATH + 64], key[128];
    if (line) snprintf(where, sizeof where, "%s:%d: [grid] ", g->path, line);
    else snprintf(where, sizeof where, "command line: grid.");
    FH_CHECK(grid_resolve_key(given, where, key, sizeof key));
    if (!strcmp(key, "output.dir") || !strcmp(key, "output.name"))
        FH_FAIL(FH_ERR_USAGE, "%s%s cannot be swept: the grid sets it for every member (members go to <output.dir>/<grid "
                "name>/<member>)", where, key);
    int a = find_axis(g, key);
    if (a >= 0) {
        if (line && g->axes[a].line) FH_FAIL(FH_ERR_USAGE, "%s%s is listed twice (lines %d and %d)", where, key, g->axes[a].line, line);
        axis_free(&g->axes[a]);
    } else {
        if (g->n_axes == GRID_MAX_AXES) FH_FAIL(FH_ERR_USAGE, "%smore than %d swept keys", where, GRID_MAX_AXES);
        a = g->n_axes++;
    }
    GridAxis *ax = &g->axes[a];
    memset(ax, 0, sizeof *ax);
    snprintf(ax->key, sizeof ax->key, "%s", key);
    ax->line = line;
    /* with the key as given in the message ("seed" resolves to fl.seed) */
    return parse_list(ax, raw, where);
}

static int set_ranks(GridSpec *g, const char *v, const char *where)
{
    const FhConfigKey *k = &settings[0];
    char *end;
    errno = 0;
    long r = strtol(v, &end, 10);
    if (errno || end == v || *end || r < k->lo || r > k->hi)
        FH_FAIL(FH_ERR_USAGE, "%s%s = '%s': expected an integer from %.0f to %.0f (0: all ranks)", where, k->key, v, k->lo,
                k->hi);
    g->ranks_per_member = (int)r;
    return FH_OK;
}

/* One position of a list (or of a zip line's lists): its values joined, for sorting */
typedef struct {
    char *tuple;
    int pos;
} GridTuple;

static int cmp_tuple(const void *a, const void *b)
{
    const GridTuple *x = a, *y = b;
    const int c = strcmp(x->tuple, y->tuple);
    return c ? c : x->pos - y->pos;
}

/* Refuses a value listed twice in axis a's list, or, for a zip line (zip_of[a] >= 0), two positions with the same
 * values of every key of the line. Sorted, so that long lists (ranges of up to GRID_VALUES_MAX) stay fast. */
static int check_repeats(const GridSpec *g, int a, const int *zip_of)
{
    const int n = g->axes[a].n_values;
    GridTuple *t = calloc(n > 0 ? (size_t)n : 1, sizeof *t);
    if (!t) FH_FAIL(FH_ERR_MEMORY, "out of memory for the grid's lists");
    int status = FH_OK;
    for (int i = 0; i < n && status == FH_OK; i++) {
        size_t len = 1;
        for (int b = 0; b < g->n_axes; b++)
            if (b == a || (zip_of[a] >= 0 && zip_of[b] == zip_of[a])) len += strlen(g->axes[b].values[i]) + 1;
        t[i].pos = i;
        t[i].tuple = malloc(len);
        if (!t[i].tuple) {
            status = fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory for the grid's lists");
            break;
        }
        char *p = t[i].tuple;
        for (int b = 0; b < g->n_axes; b++)
            if (b == a || (zip_of[a] >= 0 && zip_of[b] == zip_of[a])) {
                const size_t l = strlen(g->axes[b].values[i]);
                memcpy(p, g->axes[b].values[i], l);
                p += l;
                *p++ = '\x1f'; /* unit separator: not in a config value */
            }
        *p = '\0';
    }
    if (status == FH_OK) qsort(t, (size_t)n, sizeof *t, cmp_tuple);
    for (int i = 1; i < n && status == FH_OK; i++) {
        if (strcmp(t[i].tuple, t[i - 1].tuple)) continue;
        char where[GRID_PATH + 64];
        if (g->axes[a].line) snprintf(where, sizeof where, "%s:%d: [grid] ", g->path, g->axes[a].line);
        else snprintf(where, sizeof where, "command line: grid.");
        if (zip_of[a] < 0)
            status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s%s: value %s is listed twice", where,
                                    g->axes[a].key, g->axes[a].values[t[i].pos]);
        else
            status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s%s: positions %d and %d of its zip line give "
                                    "the same values for every key of the line", where, g->axes[a].key,
                                    t[i - 1].pos + 1, t[i].pos + 1);
    }
    for (int i = 0; i < n; i++) free(t[i].tuple);
    free(t);
    return status;
}

/* The dimensions: each zip line is one (at the place of its first key), every other key its own. */
static int build_dims(GridSpec *g, const ZipLine *zips, int n_zips)
{
    for (int a = 0; a < g->n_axes; a++) g->axes[a].dim = -1;
    int zip_of[GRID_MAX_AXES];
    for (int a = 0; a < g->n_axes; a++) zip_of[a] = -1;
    for (int z = 0; z < n_zips; z++) {
        char where[GRID_PATH + 64];
        if (zips[z].line) snprintf(where, sizeof where, "%s:%d: [grid] zip: ", g->path, zips[z].line);
        else snprintf(where, sizeof where, "command line: grid.zip: ");
        char buf[1024];
        snprintf(buf, sizeof buf, "%.1000s", zips[z].text);
        int n_keys = 0, first_len = -1;
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            while (isspace((unsigned char)*tok)) tok++;
            size_t n = strlen(tok);
            while (n && isspace((unsigned char)tok[n - 1])) tok[--n] = '\0';
            if (!n) FH_FAIL(FH_ERR_USAGE, "%san empty key name", where);
            char key[128];
            FH_CHECK(grid_resolve_key(tok, where, key, sizeof key));
            int a = find_axis(g, key);
            if (a < 0) FH_FAIL(FH_ERR_USAGE, "%s%s has no list in [grid]", where, key);
            if (zip_of[a] >= 0) FH_FAIL(FH_ERR_USAGE, "%s%s is already zipped (a key may be on one zip line only)", where, key);
            zip_of[a] = z;
            if (first_len < 0) first_len = g->axes[a].n_values;
            else if (g->axes[a].n_values != first_len)
                FH_FAIL(FH_ERR_USAGE, "%skeys that vary together need lists of one length: %s has %d values, the first "
                        "key %d", where, key, g->axes[a].n_values, first_len);
            n_keys++;
        }
        if (n_keys < 2) FH_FAIL(FH_ERR_USAGE, "%sname at least two keys of [grid] that vary together", where);
    }
    /* a value twice in one list would run the same member twice: refused, except inside a zip line, where
     * only the same values of every key of the line at two positions are */
    for (int a = 0; a < g->n_axes; a++) {
        if (zip_of[a] >= 0) {
            int first = -1;
            for (int b = 0; b < a && first < 0; b++)
                if (zip_of[b] == zip_of[a]) first = b;
            if (first >= 0) continue; /* the line is checked once, at its first key */
        }
        FH_CHECK(check_repeats(g, a, zip_of));
    }
    g->n_dims = 0;
    for (int a = 0; a < g->n_axes; a++) {
        if (g->axes[a].dim >= 0) continue;
        int d = g->n_dims++;
        g->dim_size[d] = g->axes[a].n_values;
        g->axes[a].dim = d;
        if (zip_of[a] >= 0)
            for (int b = a + 1; b < g->n_axes; b++)
                if (zip_of[b] == zip_of[a]) g->axes[b].dim = d;
    }
    double n = 1;
    for (int d = 0; d < g->n_dims; d++) n *= g->dim_size[d];
    if (n > GRID_MEMBERS_MAX)
        FH_FAIL(FH_ERR_USAGE, "%s: the lists give %.0f members; more than %d are refused", g->path, n, GRID_MEMBERS_MAX);
    g->n_members = (int64_t)n;
    return FH_OK;
}

/* Short names: the part after the dot, unless two swept keys share it. */
static void short_names(GridSpec *g)
{
    for (int a = 0; a < g->n_axes; a++) {
        const char *part = strchr(g->axes[a].key, '.') + 1;
        int clash = 0;
        for (int b = 0; b < g->n_axes; b++)
            if (b != a && !strcmp(strchr(g->axes[b].key, '.') + 1, part)) clash = 1;
        snprintf(g->axes[a].short_name, sizeof g->axes[a].short_name, "%s", clash ? g->axes[a].key : part);
    }
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int check_names_unique(const GridSpec *g)
{
    char **names = calloc((size_t)g->n_members, sizeof *names);
    if (!names) FH_FAIL(FH_ERR_MEMORY, "out of memory for %lld member names", (long long)g->n_members);
    int status = FH_OK;
    for (int64_t i = 0; i < g->n_members && status == FH_OK; i++) {
        char name[1024];
        grid_member_name(g, i, name, sizeof name);
        if (!name[0]) {
            status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s: member %lld sets no key (every list gives "
                                    "it -): it would have no folder name", g->path, (long long)i);
            break;
        }
        names[i] = strdup(name);
        if (!names[i]) status = fh_error_raise(FH_ERR_MEMORY, __FILE__, __LINE__, "out of memory for member names");
    }
    if (status == FH_OK) {
        qsort(names, (size_t)g->n_members, sizeof *names, cmp_str);
        for (int64_t i = 1; i < g->n_members && status == FH_OK; i++)
            if (!strcmp(names[i], names[i - 1]))
                status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__,
                                        "%s: two members would share the folder name %s (values that differ only in "
                                        "characters outside [A-Za-z0-9.+-])", g->path, names[i]);
    }
    for (int64_t i = 0; i < g->n_members; i++) free(names[i]);
    free(names);
    return status;
}

/* base_text: the file with the [grid] section's header and lines turned into comments (so the line
 * numbers of config errors still point into the grid file); *n_grid_sections: how many [grid] headers */
static int split_text(GridSpec *g, int *n_grid_sections)
{
    size_t len = strlen(g->text);
    /* each line grows by at most "; " */
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += g->text[i] == '\n';
    g->base_text = malloc(len + 2 * lines + 2);
    if (!g->base_text) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    char *out = g->base_text;
    int in_grid = 0;
    *n_grid_sections = 0;
    for (const char *p = g->text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
        const char *s = p;
        while (s < p + n && isspace((unsigned char)*s)) s++;
        if (*s == '[') {
            const char *close = memchr(s, ']', (size_t)(p + n - s));
            const char *name = s + 1;
            while (close && name < close && isspace((unsigned char)*name)) name++;
            size_t ln = close ? (size_t)(close - name) : 0;
            while (ln && isspace((unsigned char)name[ln - 1])) ln--;
            in_grid = close && ln == 4 && !strncmp(name, "grid", 4);
            *n_grid_sections += in_grid;
        }
        if (in_grid) {
            *out++ = ';';
            *out++ = ' ';
        }
        memcpy(out, p, n);
        out += n;
        p += n;
    }
    *out = '\0';
    return FH_OK;
}

int grid_spec_load(GridSpec *g, const char *path, char *const *args, int n_args)
{
    memset(g, 0, sizeof *g);
    snprintf(g->path, sizeof g->path, "%s", path);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        FH_FAIL(FH_ERR_USAGE, "%s is a folder; give the grid file (or --resume %s to continue a grid)", path, path);
    FH_CHECK(fh_read_file(path, &g->text, FH_ERR_DATA));
    int n_sections = 0;
    FH_CHECK(split_text(g, &n_sections));
    if (n_sections == 0)
        FH_FAIL(FH_ERR_USAGE, "%s has no [grid] section: add one with the lists to sweep, e.g.\n[grid]\nalgo.rho = "
                "0.01, 0.05, 0.1\nseed = 0, 1, 2", path);
    if (n_sections > 1) FH_FAIL(FH_ERR_USAGE, "%s: [grid] appears %d times; write one [grid] section", path, n_sections);
    FhIni ini;
    FH_CHECK(fh_ini_parse(&ini, g->text, path));
    ZipLine zips[GRID_MAX_AXES];
    int n_zips = 0, status = FH_OK;
    for (int i = 0; i < ini.n && status == FH_OK; i++) {
        const FhIniEntry *e = &ini.entries[i];
        if (strcmp(e->section, "grid")) continue;
        char where[GRID_PATH + 64];
        snprintf(where, sizeof where, "%s:%d: [grid] ", path, e->line);
        if (!strcmp(e->key, settings[0].key)) status = set_ranks(g, e->value, where);
        else if (!strcmp(e->key, settings[1].key)) {
            if (n_zips == GRID_MAX_AXES) status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%stoo many zip lines", where);
            else {
                snprintf(zips[n_zips].text, sizeof zips[n_zips].text, "%s", e->value);
                zips[n_zips++].line = e->line;
            }
        } else status = set_axis(g, e->key, e->raw, e->line);
    }
    fh_ini_free(&ini);
    FH_CHECK(status);

    /* the command line: grid.X=LIST, then overrides */
    g->overrides = calloc((size_t)n_args + 1, sizeof *g->overrides);
    if (!g->overrides) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    int cmd_zip = 0;
    for (int i = 0; i < n_args; i++) {
        const char *eq = strchr(args[i], '=');
        if (!eq) FH_FAIL(FH_ERR_USAGE, "command line: '%s' is not of the form section.key=value", args[i]);
        if (!strncmp(args[i], "grid.", 5)) {
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(eq - args[i] - 5), args[i] + 5);
            if (!strcmp(key, settings[0].key)) FH_CHECK(set_ranks(g, eq + 1, "command line: grid."));
            else if (!strcmp(key, settings[1].key)) {
                if (!cmd_zip) n_zips = 0; /* the command line's zip lines replace the file's */
                cmd_zip = 1;
                if (n_zips == GRID_MAX_AXES) FH_FAIL(FH_ERR_USAGE, "command line: too many grid.zip");
                snprintf(zips[n_zips].text, sizeof zips[n_zips].text, "%s", eq + 1);
                zips[n_zips++].line = 0;
            } else FH_CHECK(set_axis(g, key, eq + 1, 0));
            continue;
        }
        g->overrides[g->n_overrides] = strdup(args[i]);
        if (!g->overrides[g->n_overrides]) FH_FAIL(FH_ERR_MEMORY, "out of memory");
        g->n_overrides++;
    }
    if (g->n_axes == 0)
        FH_FAIL(FH_ERR_USAGE, "%s: [grid] lists no key to sweep (e.g. seed = 0, 1, 2)", path);
    /* an override of a swept key would be silently beaten by the list */
    for (int i = 0; i < g->n_overrides; i++) {
        char given[256], key[128];
        snprintf(given, sizeof given, "%.*s", (int)(strchr(g->overrides[i], '=') - g->overrides[i]), g->overrides[i]);
        if (!strchr(given, '.')) FH_FAIL(FH_ERR_USAGE, "command line: '%s' is not of the form section.key=value", g->overrides[i]);
        if (grid_resolve_key(given, "", key, sizeof key) != FH_OK) {
            fh_error_clear(); /* the config check names it properly */
            continue;
        }
        if (find_axis(g, key) >= 0)
            FH_FAIL(FH_ERR_USAGE, "command line: %s is swept by [grid]; change its list with grid.%s=A,B,...", given, key);
    }
    FH_CHECK(build_dims(g, zips, n_zips));
    short_names(g);

    /* the grid folder: <[output] dir>/<[output] name, or the grid file's name> */
    FhIni base;
    FH_CHECK(fh_ini_parse(&base, g->base_text, path));
    /* "-" means the member leaves the key at its default; a value in the base config would win silently */
    for (int a = 0; a < g->n_axes; a++) {
        int has_unset = 0;
        for (int v = 0; v < g->axes[a].n_values; v++) has_unset |= grid_value_is_unset(g->axes[a].values[v]);
        char section[128];
        snprintf(section, sizeof section, "%s", g->axes[a].key);
        char *dot = strchr(section, '.');
        *dot = '\0';
        if (has_unset && fh_ini_get(&base, section, dot + 1)) {
            fh_ini_free(&base);
            FH_FAIL(FH_ERR_USAGE, "%s: [grid] %s (line %d; 0: the command line) lists - (unset) for some members, but "
                    "[%s] sets %s: remove it there and give its value in the list", path, g->axes[a].key,
                    g->axes[a].line, section, dot + 1);
        }
    }
    const char *dir = fh_ini_get(&base, "output", "dir"), *name = fh_ini_get(&base, "output", "name");
    snprintf(g->out_dir, sizeof g->out_dir, "%s", dir && *dir ? dir : "outputs");
    snprintf(g->name, sizeof g->name, "%s", name ? name : "");
    fh_ini_free(&base);
    for (int i = 0; i < g->n_overrides; i++) {
        if (!strncmp(g->overrides[i], "output.dir=", 11)) snprintf(g->out_dir, sizeof g->out_dir, "%s", g->overrides[i] + 11);
        if (!strncmp(g->overrides[i], "output.name=", 12)) snprintf(g->name, sizeof g->name, "%s", g->overrides[i] + 12);
    }
    if (!g->name[0]) {
        const char *b = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        snprintf(g->name, sizeof g->name, "%s", b);
        char *dot = strrchr(g->name, '.');
        if (dot && dot != g->name) *dot = '\0';
    }
    char what[GRID_PATH + 64];
    snprintf(what, sizeof what, "%.*s: the grid name ([output] name)", GRID_PATH, path);
    FH_CHECK(fh_check_plain_name(g->name, what));
    if (snprintf(g->dir, sizeof g->dir, "%s/%s", g->out_dir, g->name) >= (int)sizeof g->dir - 600)
        FH_FAIL(FH_ERR_USAGE, "%s/%s: path too long", g->out_dir, g->name);
    if (g->n_members <= GRID_MEMBERS_ASK * 100) FH_CHECK(check_names_unique(g));
    return FH_OK;
}

void grid_spec_free(GridSpec *g)
{
    for (int a = 0; a < g->n_axes; a++) axis_free(&g->axes[a]);
    grid_strings_free(g->overrides, g->n_overrides);
    free(g->text);
    free(g->base_text);
    memset(g, 0, sizeof *g);
}

/* ---- members ------------------------------------------------------------------------------------------- */

static int dim_index(const GridSpec *g, int64_t i, int d)
{
    for (int e = g->n_dims - 1; e > d; e--) i /= g->dim_size[e];
    return (int)(i % g->dim_size[d]);
}

const char *grid_member_value(const GridSpec *g, int64_t i, int a)
{
    return g->axes[a].values[dim_index(g, i, g->axes[a].dim)];
}

int grid_value_is_unset(const char *value) { return !strcmp(value, "-"); }

void grid_member_name(const GridSpec *g, int64_t i, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int a = 0; a < g->n_axes && used + 1 < size; a++) {
        if (grid_value_is_unset(grid_member_value(g, i, a))) continue;
        used += (size_t)snprintf(out + used, size - used, "%s%s-", used ? "_" : "", g->axes[a].short_name);
        for (const char *v = grid_member_value(g, i, a); *v && used + 1 < size; v++)
            out[used++] = (isalnum((unsigned char)*v) || *v == '.' || *v == '+' || *v == '-') ? *v : '~';
        out[used < size ? used : size - 1] = '\0';
    }
}

void grid_strings_free(char **v, int n)
{
    if (!v) return;
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

int grid_member_overrides(const GridSpec *g, int64_t i, char ***out, int *n)
{
    const int total = g->n_overrides + g->n_axes + 2;
    char **v = calloc((size_t)total, sizeof *v);
    if (!v) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    int k = 0;
    char name[1024];
    grid_member_name(g, i, name, sizeof name);
    for (int j = 0; j < g->n_overrides; j++) v[k++] = strdup(g->overrides[j]);
    for (int a = 0; a < g->n_axes; a++) {
        const char *val = grid_member_value(g, i, a);
        if (grid_value_is_unset(val)) continue;
        size_t len = strlen(g->axes[a].key) + strlen(val) + 2;
        if ((v[k] = malloc(len))) snprintf(v[k], len, "%s=%s", g->axes[a].key, val);
        k++;
    }
    size_t len = strlen(g->dir) + 16;
    if ((v[k] = malloc(len))) snprintf(v[k], len, "output.dir=%s", g->dir);
    k++;
    len = strlen(name) + 16;
    if ((v[k] = malloc(len))) snprintf(v[k], len, "output.name=%s", name);
    k++;
    for (int j = 0; j < k; j++)
        if (!v[j]) {
            grid_strings_free(v, k);
            FH_FAIL(FH_ERR_MEMORY, "out of memory");
        }
    *out = v;
    *n = k;
    return FH_OK;
}

/* ---- member states ------------------------------------------------------------------------------------- */

static const char *const state_names[] = { "pending", "running", "done", "failed", "stopped" };

const char *grid_state_name(GridState s) { return state_names[s]; }

static int status_path(char *out, size_t size, const char *grid_dir, const char *member)
{
    if (snprintf(out, size, "%s/grid/status/%s.ini", grid_dir, member) >= (int)size)
        FH_FAIL(FH_ERR_IO, "%s/grid/status/%s.ini: path too long", grid_dir, member);
    return FH_OK;
}

int grid_status_read(const char *grid_dir, const char *member, GridStatus *s)
{
    memset(s, 0, sizeof *s);
    s->state = GRID_PENDING;
    s->final_accuracy = NAN;
    char path[GRID_PATH + 1200];
    FH_CHECK(status_path(path, sizeof path, grid_dir, member));
    if (!fh_path_exists(path, NULL)) return FH_OK;
    FhIni ini;
    FH_CHECK(fh_ini_load(&ini, path, FH_ERR_IO));
    const char *v = fh_ini_get(&ini, "member", "state");
    for (int i = 0; v && i < 5; i++)
        if (!strcmp(v, state_names[i])) s->state = (GridState)i;
    if ((v = fh_ini_get(&ini, "member", "exit"))) s->exit_code = atoi(v);
    if ((v = fh_ini_get(&ini, "member", "seconds"))) s->seconds = atof(v);
    if ((v = fh_ini_get(&ini, "member", "group"))) s->group = atoi(v);
    if ((v = fh_ini_get(&ini, "member", "attempt"))) s->attempt = atoi(v);
    if ((v = fh_ini_get(&ini, "member", "rounds_done"))) s->rounds_done = atoi(v);
    if ((v = fh_ini_get(&ini, "member", "final_accuracy")) && *v) s->final_accuracy = atof(v);
    if ((v = fh_ini_get(&ini, "member", "message"))) snprintf(s->message, sizeof s->message, "%s", v);
    fh_ini_free(&ini);
    return FH_OK;
}

int grid_status_write(const char *grid_dir, const char *member, const GridStatus *s)
{
    char path[GRID_PATH + 1200], msg[sizeof s->message];
    FH_CHECK(status_path(path, sizeof path, grid_dir, member));
    /* one line, no double quotes: it is written as a quoted INI value */
    size_t n = 0;
    for (const char *p = s->message; *p && n + 1 < sizeof msg; p++)
        msg[n++] = *p == '\n' ? '|' : *p == '"' ? '\'' : (*p == '\r' || *p == '\t') ? ' ' : *p;
    msg[n] = '\0';
    char text[4096], acc[32] = "";
    if (!isnan(s->final_accuracy)) snprintf(acc, sizeof acc, "%.6f", s->final_accuracy);
    snprintf(text, sizeof text,
             "; fedhet grid: the state of member %s\n[member]\nname = %s\nstate = %s\nexit = %d\nseconds = %.3f\n"
             "group = %d\nattempt = %d\nrounds_done = %d\nfinal_accuracy = %s\nmessage = \"%s\"\n",
             member, member, state_names[s->state], s->exit_code, s->seconds, s->group, s->attempt, s->rounds_done, acc,
             msg);
    return fh_write_file_atomic(path, text);
}
