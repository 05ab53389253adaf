/* The experiment configuration: an INI file checked against a caller's schema, plus command-line
 * overrides "section.key=value".
 *
 * The text is read by the INI reader (src/core/ini_reader.c, shared with the readers that have no schema);
 * config_on_line checks each line against the schema as it comes.
 *
 * Values are kept as text as given and parsed once, after the file and the overrides, so a bad value in
 * the file that an override replaces is no error. */
#include "fedhet/config.h"
#include "fedhet/buf.h"
#include "fedhet/core.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { ORIGIN_DEFAULT = 0, ORIGIN_OVERRIDE = -1 }; /* Entry.line; > 0 is a line of the file */

/* Longest name fh_nearest_name compares; longer ones get no suggestion (keeps the table on the stack). */
#define NEAREST_MAX_LEN 128
/* Room for "path:line: " in messages. */
#define WHERE_CAP 4200

typedef struct {
    char *given;       /* the value as given, unquoted; NULL when the default applies */
    int line;          /* where it was given: a file line, ORIGIN_OVERRIDE or ORIGIN_DEFAULT */
    int equals_default; /* the typed value equals the schema default (marks "; default" in the text) */
    const char *default_text; /* the default as text: the schema's string, or number_text */
    char number_text[40];
    int64_t i;
    double f;
    int b;
} Entry;

struct FhConfig {
    const FhConfigKey *schema;
    int n;
    Entry *entries;
    char *source; /* path or source name, for messages */
    const char *override_source; /* where the overrides came from: "command line", or source when there is no text */
};

const char *fh_config_type_name(FhConfigType t)
{
    switch (t) {
    case FH_CFG_INT: return "int";
    case FH_CFG_FLOAT: return "float";
    case FH_CFG_BOOL: return "bool";
    case FH_CFG_STRING: return "string";
    case FH_CFG_CHOICE: return "choice";
    }
    return "?";
}

static int config_strndup(char **out, const char *s, size_t n, const char *what)
{
    FH_CHECK(fh_calloc(out, n + 1, 1, what));
    memcpy(*out, s, n);
    return FH_OK;
}

/* ---- names and suggestions ---- */

static int config_osa_distance(const char *a, size_t la, const char *b, size_t lb)
{
    /* rows i-2, i-1, i of the optimal-string-alignment table */
    int rows[3][NEAREST_MAX_LEN + 1];
    int *r2 = rows[0], *r1 = rows[1], *r0 = rows[2];
    for (size_t j = 0; j <= lb; j++) r1[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        r0[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int d = r1[j - 1] + (ca != cb);
            if (r1[j] + 1 < d) d = r1[j] + 1;
            if (r0[j - 1] + 1 < d) d = r0[j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && r2[j - 2] + 1 < d)
                d = r2[j - 2] + 1;
            r0[j] = d;
        }
        int *t = r2;
        r2 = r1;
        r1 = r0;
        r0 = t;
    }
    return r1[lb];
}

const char *fh_nearest_name(const char *word, const char *const *candidates, int n)
{
    if (!word || !candidates) return NULL;
    size_t lw = strlen(word);
    if (lw > NEAREST_MAX_LEN) return NULL;
    int limit = (int)(lw / 3) > 2 ? (int)(lw / 3) : 2;
    const char *best = NULL;
    int best_d = limit + 1;
    for (int i = 0; i < n; i++) {
        const char *c = candidates[i];
        if (!c) continue;
        size_t lc = strlen(c);
        if (lc > NEAREST_MAX_LEN) continue;
        int d = config_osa_distance(word, lw, c, lc);
        /* d == the longer length: nothing of the word survives, so it is no suggestion */
        if (d < best_d && (size_t)d < (lw > lc ? lw : lc)) {
            best = c;
            best_d = d;
        }
    }
    return best;
}

static int config_name_ok(const char *s)
{
    if (!s || !*s) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-') return 0;
    return 1;
}

static int config_find(const FhConfigKey *schema, int n, const char *section, const char *key)
{
    for (int k = 0; k < n; k++)
        if (strcmp(schema[k].section, section) == 0 && strcmp(schema[k].key, key) == 0) return k;
    return -1;
}

/* index of the schema key that first names `section`, or -1 */
static int config_find_section(const FhConfigKey *schema, int n, const char *section)
{
    for (int k = 0; k < n; k++)
        if (strcmp(schema[k].section, section) == 0) return k;
    return -1;
}

static int config_section_first(const FhConfigKey *schema, int k)
{
    for (int j = 0; j < k; j++)
        if (strcmp(schema[j].section, schema[k].section) == 0) return 0;
    return 1;
}

/* "[data], [model], ..." or "[data]; did you mean ...": the part after "unknown section [x]" */
static int config_unknown_section(const FhConfigKey *schema, int n, const char *where, const char *name)
{
    const char **names = NULL;
    FH_CHECK(fh_calloc(&names, (size_t)n + 1, sizeof *names, "config section names"));
    int m = 0;
    for (int k = 0; k < n; k++)
        if (config_section_first(schema, k)) names[m++] = schema[k].section;
    const char *near = fh_nearest_name(name, names, m);
    char list[1024] = "";
    size_t len = 0;
    for (int i = 0; i < m && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s[%s]", i ? ", " : "", names[i]);
    fh_free(&names);
    if (near) FH_FAIL(FH_ERR_USAGE, "%sunknown section [%s]; did you mean [%s]?", where, name, near);
    FH_FAIL(FH_ERR_USAGE, "%sunknown section [%s]; the sections are %s", where, name, list);
}

/* Unknown key in a known section: suggest from the same section, then from every section. */
static int config_unknown_key(const FhConfigKey *schema, int n, const char *where, const char *section,
                              const char *key)
{
    const char **names = NULL;
    FH_CHECK(fh_calloc(&names, (size_t)n + 1, sizeof *names, "config key names"));
    int m = 0;
    char list[1024] = "";
    size_t len = 0;
    for (int k = 0; k < n; k++)
        if (strcmp(schema[k].section, section) == 0) {
            names[m++] = schema[k].key;
            if (len < sizeof list)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "", schema[k].key);
        }
    const char *near = NULL; /* a former name first, then the nearest */
    for (int k = 0; k < n && !near; k++)
        if (schema[k].was && !strcmp(schema[k].was, key) && !strcmp(schema[k].section, section)) near = schema[k].key;
    if (!near) near = fh_nearest_name(key, names, m);
    if (near) {
        fh_free(&names);
        FH_FAIL(FH_ERR_USAGE, "%sunknown key '%s' in [%s]; did you mean '%s'?", where, key, section, near);
    }
    for (int k = 0; k < n; k++) names[k] = schema[k].key;
    near = fh_nearest_name(key, names, n);
    int at = -1;
    for (int k = 0; near && k < n; k++)
        if (names[k] == near) at = k;
    fh_free(&names);
    if (at >= 0)
        FH_FAIL(FH_ERR_USAGE, "%sunknown key '%s' in [%s]; did you mean '%s.%s'?", where, key, section,
                schema[at].section, schema[at].key);
    FH_FAIL(FH_ERR_USAGE, "%sunknown key '%s' in [%s]; its keys are %s", where, key, section, list);
}

/* ---- values ---- */

int fh_config_choice_index(const char *choices, const char *value)
{
    const size_t len = strlen(value);
    int index = 0;
    for (const char *p = choices; p && *p; index++) {
        const size_t n = strcspn(p, "|");
        if (n == len && !strncmp(p, value, len)) return index;
        p += n + (p[n] == '|');
    }
    return -1;
}

static int config_choice_has(const char *choices, const char *v) { return fh_config_choice_index(choices, v) >= 0; }

/* the nearest choice to `word`, copied into out; "" when none is near (or on out of memory: it is only
 * a hint in a message that is being raised anyway) */
static void config_choice_nearest(const char *choices, const char *word, char *out, size_t cap)
{
    out[0] = '\0';
    size_t m = 1;
    for (const char *p = choices; *p; p++) m += *p == '|';
    char *copy = strdup(choices);
    const char **names = calloc(m, sizeof *names);
    if (copy && names) {
        size_t i = 0;
        for (char *p = copy; p && i < m;) {
            names[i++] = p;
            char *bar = strchr(p, '|');
            if (bar) *bar = '\0';
            p = bar ? bar + 1 : NULL;
        }
        const char *near = fh_nearest_name(word, names, (int)i);
        if (near) snprintf(out, cap, "%s", near);
    }
    free(copy);
    free(names);
}

static int config_bool_word(const char *s, int *b)
{
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) return *b = 1, 1;
        if (strcasecmp(s, no[i]) == 0) return *b = 0, 1;
    }
    return 0;
}

/* A range bound as %g when that reads back exactly, else with just enough digits: %g would show an
 * upper bound 0.999999999 as 1 and 2147483647 as 2.14748e+09, which the message would then contradict. */
static void config_format_bound(double v, char *out, size_t cap)
{
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(out, cap, "%.*g", digits, v);
        if (strtod(out, NULL) == v) return;
    }
}

static int config_ranged(const FhConfigKey *k)
{
    return (k->type == FH_CFG_INT || k->type == FH_CFG_FLOAT) && k->lo < k->hi;
}

static int config_in_range(const FhConfigKey *k, double v)
{
    return !config_ranged(k) ||
           ((k->lo_open ? v > k->lo : v >= k->lo) && (k->hi_open ? v < k->hi : v <= k->hi));
}

/* "[0, 1]", "(0, 1000]"; an integer's bounds in digits, "[1, 1000000]" */
static void config_format_range(const FhConfigKey *k, char *out, size_t cap)
{
    char lo[32], hi[32];
    if (k->type == FH_CFG_INT) {
        snprintf(lo, sizeof lo, "%.0f", k->lo);
        snprintf(hi, sizeof hi, "%.0f", k->hi);
    } else {
        config_format_bound(k->lo, lo, sizeof lo);
        config_format_bound(k->hi, hi, sizeof hi);
    }
    snprintf(out, cap, "%c%s, %s%c", k->lo_open ? '(' : '[', lo, hi, k->hi_open ? ')' : ']');
}

void fh_config_range_text(const FhConfigKey *k, char *out, size_t cap)
{
    if (config_ranged(k)) config_format_range(k, out, cap);
    else snprintf(out, cap, "%s", "");
}

static int config_range_error(const FhConfigKey *k, const char *text, const char *where)
{
    char range[80];
    config_format_range(k, range, sizeof range);
    FH_FAIL(FH_ERR_USAGE, "%s[%s] %s = %s: must be in %s", where, k->section, k->key, text, range);
}

/* The shortest decimal that reads back as v, exponents without padding (1e-08 -> 1e-8): 1e-3, 0.05, 1.3333333333333333;
 * a whole-number part is written out (60, 1000), and a tie goes to the form without an exponent. */
static void config_format_number(double v, char *out, size_t cap)
{
    char best[40] = "";
    const int plain_only = fabs(v) >= 1 && fabs(v) < 1e15;
    for (int style = 0; style < 2; style++)
        for (int digits = 1; digits <= 17; digits++) {
            char t[40];
            snprintf(t, sizeof t, style ? "%.*e" : "%.*g", style ? digits - 1 : digits, v);
            if (strtod(t, NULL) != v) continue;
            char *e = strchr(t, 'e');
            if (e && plain_only) continue;
            if (e) {
                char *d = e + 1, *p = e + 1;
                if (*p == '+') p++;
                else if (*p == '-') *d++ = *p++;
                while (*p == '0' && p[1]) p++;
                memmove(d, p, strlen(p) + 1);
            }
            const size_t len = strlen(t), best_len = strlen(best);
            if (!best[0] || len < best_len || (len == best_len && !e && strchr(best, 'e')))
                snprintf(best, sizeof best, "%s", t);
        }
    snprintf(out, cap, "%s", best[0] ? best : "0");
}

void fh_config_default_text(const FhConfigKey *k, char *out, size_t cap)
{
    if (k->required) {
        snprintf(out, cap, "%s", "");
        return;
    }
    switch (k->type) {
    case FH_CFG_INT: snprintf(out, cap, "%" PRId64, k->def.i); break;
    case FH_CFG_FLOAT: config_format_number(k->def.f, out, cap); break;
    case FH_CFG_BOOL: snprintf(out, cap, "%s", k->def.b ? "true" : "false"); break;
    case FH_CFG_STRING:
    case FH_CFG_CHOICE: snprintf(out, cap, "%s", k->def.s ? k->def.s : ""); break;
    }
}

/* The one number syntax of every numeric key: decimal, an optional sign, and for floats a fraction and
 * an exponent (strtod alone would also take hexadecimal, inf and nan). */
static int config_decimal(const char *text, int integer)
{
    const char *p = text;
    if (*p == '+' || *p == '-') p++;
    size_t digits = strspn(p, "0123456789");
    p += digits;
    if (integer) return digits > 0 && *p == '\0';
    if (*p == '.') {
        size_t frac = strspn(p + 1, "0123456789");
        digits += frac;
        p += 1 + frac;
    }
    if (!digits) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        size_t exp = strspn(p, "0123456789");
        if (!exp) return 0;
        p += exp;
    }
    return *p == '\0';
}

/* Checks `text` against key k and stores the typed value in e. `where` starts the message
 * ("file:12: ", "command line: ", "config schema: default of "). */
static int config_parse_value(const FhConfigKey *k, const char *text, const char *where, Entry *e)
{
    for (const char *p = text; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            FH_FAIL(FH_ERR_USAGE, "%s[%s] %s: the value contains a control character (0x%02x)", where,
                    k->section, k->key, ch);
        if (ch == '"')
            FH_FAIL(FH_ERR_USAGE, "%s[%s] %s = %s: double quotes are allowed only around the whole value",
                    where, k->section, k->key, text);
    }
    if (!*text && k->type != FH_CFG_STRING)
        FH_FAIL(FH_ERR_USAGE, "%s[%s] %s: the value is empty; expected %s", where, k->section, k->key,
                fh_config_type_name(k->type));
    char *end = NULL;
    switch (k->type) {
    case FH_CFG_INT: {
        long long v = 0;
        if (config_decimal(text, 1)) {
            errno = 0;
            v = strtoll(text, &end, 10);
            if (errno == ERANGE)
                FH_FAIL(FH_ERR_USAGE, "%s[%s] %s = %s: outside the 64-bit integer range", where, k->section,
                        k->key, text);
        } else if (config_decimal(text, 0)) {
            /* a whole number in float notation (3.0, 1e2) is that integer: a key that counts things reads as it did
             * when it was a float; up to 2^53, where every whole double is exact */
            const double d = strtod(text, &end);
            if (d != floor(d) || fabs(d) > 9007199254740992.0)
                FH_FAIL(FH_ERR_USAGE, "%s[%s] %s = %s: not an integer (a fraction; whole numbers may be written 3, "
                        "3.0 or 3e2, and beyond 2^53 only as digits)", where, k->section, k->key, text);
            v = (long long)d;
        } else
            FH_FAIL(FH_ERR_USAGE, "%s[%s] %s = %s: not an integer (decimal digits with an optional sign, or a whole "
                    "number such as 3.0 or 3e2; no hexadecimal)", where, k->section, k->key, text);
        if (!config_in_range(k, (double)v)) return config_range_error(k, text, where);
        e->i = (int64_t)v;
        break;
    }
    case FH_CFG_FLOAT: {
        if (!config_decimal(text, 0))
            FH_FAIL(FH_ERR_USAGE, "%s[%s] %s = %s: not a number in decimal notation (such as 0.05, -2 or "
                    "1e-3; hexadecimal, inf and nan are refused)", where, k->section, k->key, text);
        double v = strtod(text, &end);
        if (!isfinite(v))
            FH_FAIL(FH_ERR_USAGE, "%s[%s] %s = %s: must be a finite number", where, k->section, k->key, text);
        if (!config_in_range(k, v)) return config_range_error(k, text, where);
        e->f = v;
        break;
    }
    case FH_CFG_BOOL:
        if (!config_bool_word(text, &e->b))
            FH_FAIL(FH_ERR_USAGE, "%s[%s] %s = %s: must be true or false (or yes/no, on/off, 1/0)", where,
                    k->section, k->key, text);
        break;
    case FH_CFG_STRING: break;
    case FH_CFG_CHOICE:
        if (!config_choice_has(k->choices, text)) {
            char near[128];
            config_choice_nearest(k->choices, text, near, sizeof near);
            if (near[0])
                FH_FAIL(FH_ERR_USAGE, "%s[%s] %s = %s: must be one of %s; did you mean '%s'?", where,
                        k->section, k->key, text, k->choices, near);
            FH_FAIL(FH_ERR_USAGE, "%s[%s] %s = %s: must be one of %s", where, k->section, k->key, text,
                    k->choices);
        }
        break;
    }
    return FH_OK;
}

static int config_values_equal(FhConfigType t, const Entry *a, const char *ta, const Entry *b, const char *tb)
{
    switch (t) {
    case FH_CFG_INT: return a->i == b->i;
    case FH_CFG_FLOAT: return a->f == b->f;
    case FH_CFG_BOOL: return a->b == b->b;
    case FH_CFG_STRING:
    case FH_CFG_CHOICE: return strcmp(ta, tb) == 0;
    }
    return 0;
}

/* Values that would not read back as themselves unquoted: empty, edge whitespace, comment marks. */
static int config_needs_quotes(const char *s)
{
    size_t n = strlen(s);
    return n == 0 || isspace((unsigned char)s[0]) || isspace((unsigned char)s[n - 1]) || strchr(s, ';') ||
           strchr(s, '#');
}

static const char *config_text_of(const FhConfig *c, int k)
{
    return c->entries[k].given ? c->entries[k].given : c->entries[k].default_text;
}

/* the default of key k as an entry (typed value and text) */
static void config_default_entry(const FhConfigKey *k, Entry *e)
{
    e->i = k->type == FH_CFG_INT ? k->def.i : 0;
    e->f = k->type == FH_CFG_FLOAT ? k->def.f : 0;
    e->b = k->type == FH_CFG_BOOL ? k->def.b : 0;
    if (k->type == FH_CFG_STRING || k->type == FH_CFG_CHOICE) e->default_text = k->def.s ? k->def.s : "";
    else {
        fh_config_default_text(k, e->number_text, sizeof e->number_text);
        e->default_text = e->number_text;
    }
}

/* whether a land fits its key: the type, and an int field holds every value of the range */
static int config_land_fits(const FhConfigKey *k)
{
    switch (k->land) {
    case FH_LAND_NONE: return 1;
    case FH_LAND_INT:
        return k->type == FH_CFG_BOOL ||
               (k->type == FH_CFG_INT && config_ranged(k) && k->lo >= INT_MIN && k->hi <= INT_MAX);
    case FH_LAND_INT64: return k->type == FH_CFG_INT;
    case FH_LAND_FLOAT:
    case FH_LAND_DOUBLE: return k->type == FH_CFG_FLOAT;
    case FH_LAND_STRING: return k->type == FH_CFG_STRING || k->type == FH_CFG_CHOICE;
    case FH_LAND_INDEX: return k->type == FH_CFG_CHOICE;
    }
    return 0;
}

/* ---- the schema ---- */

static int config_check_schema(const FhConfigKey *schema, int n)
{
    if (n < 0 || (n > 0 && !schema)) FH_FAIL(FH_ERR_USAGE, "config schema: %d keys at %p", n, (const void *)schema);
    for (int k = 0; k < n; k++) {
        const FhConfigKey *key = &schema[k];
        if (!config_name_ok(key->section) || !config_name_ok(key->key))
            FH_FAIL(FH_ERR_USAGE, "config schema: key %d: section '%s' and key '%s' must be non-empty [A-Za-z0-9_-]",
                    k, key->section ? key->section : "(null)", key->key ? key->key : "(null)");
        if (config_find(schema, k, key->section, key->key) >= 0)
            FH_FAIL(FH_ERR_USAGE, "config schema: [%s] %s is listed twice", key->section, key->key);
        if ((unsigned)key->type > FH_CFG_CHOICE)
            FH_FAIL(FH_ERR_USAGE, "config schema: [%s] %s: unknown type %d", key->section, key->key, (int)key->type);
        if (key->type == FH_CFG_CHOICE) {
            const char *ch = key->choices;
            int bad = !ch || !*ch || ch[0] == '|' || ch[strlen(ch) - 1] == '|' || strstr(ch, "||");
            for (const char *p = ch; !bad && *p; p++) bad = *p != '|' && !isgraph((unsigned char)*p);
            for (const char *p = ch; !bad && *p; p++) bad = *p == ';' || *p == '#' || *p == '"';
            if (bad)
                FH_FAIL(FH_ERR_USAGE, "config schema: [%s] %s: choices '%s' must be non-empty names joined by '|'",
                        key->section, key->key, ch ? ch : "(null)");
        }
        if (!config_land_fits(key))
            FH_FAIL(FH_ERR_USAGE, "config schema: [%s] %s: its field (land %d) does not hold a %s of its range",
                    key->section, key->key, (int)key->land, fh_config_type_name(key->type));
        if (!key->required) {
            char text[512];
            Entry scratch = {0};
            fh_config_default_text(key, text, sizeof text);
            FH_CHECK(config_parse_value(key, text, "config schema: default of ", &scratch));
        }
    }
    for (int k = 0; k < n; k++) /* a former name names one key of its section, and no key now */
        if (schema[k].was && (!config_name_ok(schema[k].was) || config_find(schema, n, schema[k].section, schema[k].was) >= 0))
            FH_FAIL(FH_ERR_USAGE, "config schema: [%s] %s: former name '%s' must be a name no key of [%s] has",
                    schema[k].section, schema[k].key, schema[k].was, schema[k].section);
    return FH_OK;
}

/* ---- reading the file ---- */

static void trim(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)**s)) (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

/* FhIniHandler: a section must be in the schema; a key is set from its line once. A value that opens with
 * a double quote is one quoted string (followed by a comment at most); elsewhere in a value double quotes
 * are an error of config_parse_value. */
static int config_on_line(void *user, const FhIniLine *l)
{
    FhConfig *c = user;
    char where[WHERE_CAP];
    snprintf(where, sizeof where, "%s:%d: ", c->source, l->line);
    if (!l->key) {
        if (config_find_section(c->schema, c->n, l->section) < 0)
            return config_unknown_section(c->schema, c->n, where, l->section);
        return FH_OK;
    }
    if (l->raw[0] == '"' && !strcmp(l->value, l->raw)) {
        if (!strchr(l->raw + 1, '"'))
            FH_FAIL(FH_ERR_USAGE, "%s[%s] %s: unterminated double quote", where, l->section, l->key);
        FH_FAIL(FH_ERR_USAGE, "%s[%s] %s: text after the closing double quote", where, l->section, l->key);
    }
    int k = config_find(c->schema, c->n, l->section, l->key);
    if (k < 0) return config_unknown_key(c->schema, c->n, where, l->section, l->key);
    Entry *e = &c->entries[k];
    if (e->line > 0)
        FH_FAIL(FH_ERR_USAGE, "%s[%s] %s is given twice (lines %d and %d)", where, l->section, l->key, e->line,
                l->line);
    fh_free(&e->given);
    FH_CHECK(config_strndup(&e->given, l->value, strlen(l->value), "config value"));
    e->line = l->line;
    return FH_OK;
}

/* ---- overrides ---- */

static int config_override(FhConfig *c, const char *arg)
{
    const char *eq = strchr(arg, '=');
    const char *dot = eq ? memchr(arg, '.', (size_t)(eq - arg)) : NULL;
    if (!dot) FH_FAIL(FH_ERR_USAGE, "command line: '%s' is not of the form section.key=value", arg);
    const char *sec = arg, *key = dot + 1, *val = eq + 1;
    size_t ls = (size_t)(dot - arg), lk = (size_t)(eq - key), lv = strlen(val);
    trim(&sec, &ls);
    trim(&key, &lk);
    trim(&val, &lv);
    if (ls == 0 || lk == 0)
        FH_FAIL(FH_ERR_USAGE, "command line: '%s' is not of the form section.key=value", arg);
    if (lv >= 2 && val[0] == '"' && val[lv - 1] == '"') val++, lv -= 2; /* quoting as in the file */
    char section[WHERE_CAP], name[WHERE_CAP];
    snprintf(section, sizeof section, "%.*s", (int)ls, sec);
    snprintf(name, sizeof name, "%.*s", (int)lk, key);
    if (config_find_section(c->schema, c->n, section) < 0)
        return config_unknown_section(c->schema, c->n, "command line: ", section);
    int k = config_find(c->schema, c->n, section, name);
    if (k < 0) return config_unknown_key(c->schema, c->n, "command line: ", section, name);
    Entry *e = &c->entries[k];
    fh_free(&e->given);
    FH_CHECK(config_strndup(&e->given, val, lv, "config value"));
    e->line = ORIGIN_OVERRIDE;
    return FH_OK;
}

/* ---- loading ---- */

static int config_fill(FhConfig *c, const char *text, char *const *overrides, int n_overrides)
{
    FH_CHECK(fh_calloc(&c->entries, (size_t)c->n + 1, sizeof *c->entries, "config entries"));
    if (text) FH_CHECK(fh_ini_read(text, c->source, config_on_line, c));
    for (int i = 0; i < n_overrides; i++) FH_CHECK(config_override(c, overrides[i]));
    for (int k = 0; k < c->n; k++) {
        const FhConfigKey *key = &c->schema[k];
        Entry *e = &c->entries[k];
        config_default_entry(key, e);
        if (!e->given && key->required)
            FH_FAIL(FH_ERR_USAGE, "%s: required key %s.%s is missing (%s); set it in [%s] or with %s.%s=VALUE",
                    c->source, key->section, key->key, key->help ? key->help : "no help", key->section,
                    key->section, key->key);
        char where[WHERE_CAP];
        if (e->line > 0) snprintf(where, sizeof where, "%s:%d: ", c->source, e->line);
        else snprintf(where, sizeof where, "%s: ", c->override_source);
        if (!e->given) {
            e->equals_default = 1;
            continue;
        }
        FH_CHECK(config_parse_value(key, e->given, where, e));
        if (!key->required) {
            Entry d = {0};
            config_default_entry(key, &d);
            e->equals_default = config_values_equal(key->type, e, e->given, &d, d.default_text);
        }
    }
    return FH_OK;
}

int fh_config_load_text(FhConfig **out, const FhConfigKey *schema, int n, const char *text,
                        const char *source_name, char *const *overrides, int n_overrides)
{
    *out = NULL;
    FH_CHECK(config_check_schema(schema, n));
    if (n_overrides > 0 && !overrides) FH_FAIL(FH_ERR_USAGE, "config: %d overrides but no list", n_overrides);
    FhConfig *c = NULL;
    FH_CHECK(fh_calloc(&c, 1, sizeof *c, "config"));
    c->schema = schema;
    c->n = n;
    const char *src = source_name ? source_name : "config";
    int status = config_strndup(&c->source, src, strlen(src), "config source name");
    c->override_source = !text && source_name ? c->source : "command line";
    if (status == FH_OK) status = config_fill(c, text, overrides, n_overrides);
    if (status != FH_OK) {
        fh_config_free(&c);
        return fh_error_trace(status, __FILE__, __LINE__, "config_fill(c, text, overrides, n_overrides)");
    }
    *out = c;
    return FH_OK;
}

/* "section.key=value" of the argument "key=value": the one key of that name */
static int config_arg_override(const FhConfigKey *schema, int n, const char *arg, const char *where, char **out)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) FH_FAIL(FH_ERR_USAGE, "%s: '%s' is not key=value", where, arg);
    const size_t len = (size_t)(eq - arg);
    int at = -1;
    for (int k = 0; k < n && at < 0; k++)
        if (strlen(schema[k].key) == len && !strncmp(schema[k].key, arg, len)) at = k;
    if (at < 0) {
        const char **names = NULL;
        FH_CHECK(fh_calloc(&names, (size_t)n + 1, sizeof *names, "config key names"));
        for (int k = 0; k < n; k++) names[k] = schema[k].key;
        char word[NEAREST_MAX_LEN];
        snprintf(word, sizeof word, "%.*s", (int)(len < sizeof word ? len : sizeof word - 1), arg);
        const char *near = NULL; /* a former name first, then the nearest */
        for (int k = 0; k < n && !near; k++)
            if (schema[k].was && !strcmp(schema[k].was, word)) near = schema[k].key;
        if (!near) near = fh_nearest_name(word, names, n);
        fh_free(&names);
        if (near) FH_FAIL(FH_ERR_USAGE, "%s: unknown key '%.*s'; did you mean '%s'?", where, (int)len, arg, near);
        FH_FAIL(FH_ERR_USAGE, "%s: unknown key '%.*s' (--help lists the keys)", where, (int)len, arg);
    }
    FH_CHECK(fh_calloc(out, strlen(schema[at].section) + strlen(arg) + 2, 1, "the command's keys"));
    sprintf(*out, "%s.%s", schema[at].section, arg);
    return FH_OK;
}

int fh_config_load_args(FhConfig **out, const FhConfigKey *schema, int n, char *const *args, int n_args,
                        const char *source_name)
{
    *out = NULL;
    const char *where = source_name ? source_name : "command line";
    char **overrides = NULL;
    FH_CHECK(fh_calloc(&overrides, (size_t)n_args + 1, sizeof *overrides, "the command's keys"));
    int status = FH_OK;
    for (int i = 0; i < n_args && status == FH_OK; i++)
        status = config_arg_override(schema, n, args[i], where, &overrides[i]);
    if (status == FH_OK) status = fh_config_load_text(out, schema, n, NULL, where, overrides, n_args);
    for (int i = 0; i < n_args; i++) free(overrides[i]);
    free(overrides);
    return status;
}

int fh_config_load_file(FhConfig **out, const FhConfigKey *schema, int n, const char *path,
                        char *const *overrides, int n_overrides)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) FH_FAIL(FH_ERR_DATA, "%s: cannot open config: %s", path, strerror(errno));
    FhText b = {0};
    char chunk[8192];
    size_t got;
    int status = FH_OK;
    while (status == FH_OK && (got = fread(chunk, 1, sizeof chunk, f)) > 0)
        status = fh_text_append(&b, chunk, got);
    int read_errno = errno;
    if (status == FH_OK && ferror(f)) {
        status = fh_error_raise(FH_ERR_DATA, __FILE__, __LINE__, "%s: cannot read config: %s", path,
                                strerror(read_errno));
    }
    fclose(f);
    if (status == FH_OK) status = fh_text_append(&b, "", 0); /* an empty file still gets a string */
    if (status == FH_OK && b.len != strlen(b.s)) {
        int line = 1;
        for (const char *p = b.s; *p; p++) line += *p == '\n';
        status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s:%d: NUL byte: is this a text file?", path,
                                line);
    }
    if (status == FH_OK) status = fh_config_load_text(out, schema, n, b.s, path, overrides, n_overrides);
    free(b.s);
    if (status != FH_OK) return fh_error_trace(status, __FILE__, __LINE__, "fh_config_load_text(...)");
    return FH_OK;
}

void fh_config_free(FhConfig **cfg)
{
    if (!cfg || !*cfg) return;
    FhConfig *c = *cfg;
    if (c->entries)
        for (int k = 0; k < c->n; k++) fh_free(&c->entries[k].given);
    fh_free(&c->entries);
    fh_free(&c->source);
    fh_free(cfg);
}

/* ---- former names ---- */

/* The key of `section` whose former name begins the line at p (followed by '=' or a blank), NULL if none;
 * *was_len: the former name's length */
static const FhConfigKey *config_renamed(const FhConfigKey *schema, int n, const char *section, const char *p,
                                         size_t *was_len)
{
    for (int k = 0; k < n; k++) {
        const FhConfigKey *key = &schema[k];
        if (!key->was || strcmp(key->section, section)) continue;
        const size_t len = strlen(key->was);
        if (!strncmp(p, key->was, len) && (p[len] == '=' || p[len] == ' ' || p[len] == '\t')) {
            *was_len = len;
            return key;
        }
    }
    return NULL;
}

static int config_upgrade_build(const FhConfigKey *schema, int n, const char *text, FhText *o)
{
    FH_CHECK(fh_text_append(o, "", 0)); /* a string even for an empty text */
    char section[64] = "";
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        const size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
        const char *p = line + strspn(line, " \t");
        if (*p == '[') {
            const size_t k = strcspn(p + 1, "]\n");
            snprintf(section, sizeof section, "%.*s", (int)(k < sizeof section ? k : sizeof section - 1), p + 1);
        }
        size_t was_len = 0;
        const FhConfigKey *key = config_renamed(schema, n, section, p, &was_len);
        if (key) {
            const size_t lead = (size_t)(p - line);
            FH_CHECK(fh_text_append(o, line, lead));
            FH_CHECK(fh_text_add(o, "%s", key->key));
            FH_CHECK(fh_text_append(o, p + was_len, len - lead - was_len));
        } else {
            FH_CHECK(fh_text_append(o, line, len));
        }
        line += len;
    }
    return FH_OK;
}

int fh_config_text_upgrade(const FhConfigKey *schema, int n, const char *text, char **out)
{
    *out = NULL;
    FhText o = {0};
    const int status = config_upgrade_build(schema, n, text, &o);
    if (status != FH_OK) {
        free(o.s);
        return fh_error_trace(status, __FILE__, __LINE__, "config_upgrade_build(schema, n, text, &o)");
    }
    *out = o.s;
    return FH_OK;
}

/* ---- access ---- */

enum { FH_CFG_ANY = -1 }; /* config_entry: a key of any type */

static const Entry *config_entry(const FhConfig *c, const char *section, const char *key, int want, const char *fn)
{
    if (!c || !section || !key) {
        fprintf(stderr, "fedhet: %s: NULL config, section or key\n", fn);
        abort();
    }
    int k = config_find(c->schema, c->n, section, key);
    if (k < 0) {
        fprintf(stderr, "fedhet: %s: [%s] %s is not in the config schema\n", fn, section, key);
        abort();
    }
    FhConfigType t = c->schema[k].type;
    if (want != FH_CFG_ANY && (int)t != want && !(want == FH_CFG_STRING && t == FH_CFG_CHOICE)) {
        fprintf(stderr, "fedhet: %s: [%s] %s is a %s key\n", fn, section, key, fh_config_type_name(t));
        abort();
    }
    return &c->entries[k];
}

int64_t fh_config_int(const FhConfig *c, const char *section, const char *key)
{
    return config_entry(c, section, key, FH_CFG_INT, "fh_config_int")->i;
}

double fh_config_float(const FhConfig *c, const char *section, const char *key)
{
    return config_entry(c, section, key, FH_CFG_FLOAT, "fh_config_float")->f;
}

int fh_config_bool(const FhConfig *c, const char *section, const char *key)
{
    return config_entry(c, section, key, FH_CFG_BOOL, "fh_config_bool")->b;
}

const char *fh_config_string(const FhConfig *c, const char *section, const char *key)
{
    const Entry *e = config_entry(c, section, key, FH_CFG_STRING, "fh_config_string");
    return config_text_of(c, (int)(e - c->entries));
}

int fh_config_is_default(const FhConfig *c, const char *section, const char *key)
{
    return config_entry(c, section, key, FH_CFG_ANY, "fh_config_is_default")->given == NULL;
}

const char *fh_config_origin(const FhConfig *c, const char *section, const char *key, char *out, size_t size)
{
    const Entry *e = config_entry(c, section, key, FH_CFG_ANY, "fh_config_origin");
    if (e->line > 0) snprintf(out, size, "%s:%d", c->source, e->line);
    else snprintf(out, size, "%s", e->line == ORIGIN_OVERRIDE ? c->override_source : c->source);
    return out;
}

void fh_config_land(const FhConfig *c, const char *section, void *dst)
{
    for (int k = 0; k < c->n; k++) {
        const FhConfigKey *key = &c->schema[k];
        const Entry *e = &c->entries[k];
        if (section && strcmp(section, key->section)) continue;
        char *at = (char *)dst + key->at;
        switch (key->land) {
        case FH_LAND_NONE: break;
        case FH_LAND_INT: *(int *)(void *)at = key->type == FH_CFG_BOOL ? e->b : (int)e->i; break;
        case FH_LAND_INT64: *(int64_t *)(void *)at = e->i; break;
        case FH_LAND_FLOAT: *(float *)(void *)at = (float)e->f; break;
        case FH_LAND_DOUBLE: *(double *)(void *)at = e->f; break;
        case FH_LAND_STRING: *(const char **)(void *)at = config_text_of(c, k); break;
        case FH_LAND_INDEX: *(int *)(void *)at = fh_config_choice_index(key->choices, config_text_of(c, k)); break;
        }
    }
}

const char *fh_config_text(const FhConfig *c, const char *section, const char *key)
{
    const int k = config_find(c->schema, c->n, section, key);
    if (k < 0) {
        fprintf(stderr, "fedhet: fh_config_text: [%s] %s is not in the config schema\n", section, key);
        abort();
    }
    return config_text_of(c, k);
}

/* ---- text, diff, help, hash ---- */

static int buf_add_value(FhText *b, const char *v)
{
    return config_needs_quotes(v) ? fh_text_add(b, "\"%s\"", v) : fh_text_add(b, "%s", v);
}

static int config_text_build(const FhConfig *c, FhText *b)
{
    int first = 1;
    for (int k = 0; k < c->n; k++) {
        if (!config_section_first(c->schema, k)) continue;
        const char *sec = c->schema[k].section;
        FH_CHECK(fh_text_add(b, "%s[%s]\n", first ? "" : "\n", sec));
        first = 0;
        for (int j = k; j < c->n; j++) {
            if (strcmp(c->schema[j].section, sec) != 0) continue;
            FH_CHECK(fh_text_add(b, "%s = ", c->schema[j].key));
            FH_CHECK(buf_add_value(b, config_text_of(c, j)));
            FH_CHECK(fh_text_add(b, "%s\n", c->entries[j].equals_default ? " ; default" : ""));
        }
    }
    return fh_text_add(b, "%s", ""); /* a string even for an empty schema */
}

int fh_config_to_text(const FhConfig *c, char **text)
{
    *text = NULL;
    FhText b = {0};
    int status = config_text_build(c, &b);
    if (status != FH_OK) {
        free(b.s);
        return fh_error_trace(status, __FILE__, __LINE__, "config_text_build(c, &b)");
    }
    *text = b.s;
    return FH_OK;
}

static int config_ignored(const FhConfigKey *k, const char *const *ignore)
{
    size_t ls = strlen(k->section);
    for (; ignore && *ignore; ignore++)
        if (strncmp(*ignore, k->section, ls) == 0 && (*ignore)[ls] == '.' && strcmp(*ignore + ls + 1, k->key) == 0)
            return 1;
    return 0;
}

static int config_diff_build(const FhConfig *a, const FhConfig *b, const char *const *ignore, FhText *out)
{
    for (int k = 0; k < a->n; k++) {
        const FhConfigKey *key = &a->schema[k];
        const char *ta = config_text_of(a, k), *tb = config_text_of(b, k);
        if (config_ignored(key, ignore) || config_values_equal(key->type, &a->entries[k], ta, &b->entries[k], tb))
            continue;
        FH_CHECK(fh_text_add(out, "%s%s.%s: ", out->len ? "; " : "", key->section, key->key));
        FH_CHECK(buf_add_value(out, ta));
        FH_CHECK(fh_text_add(out, " -> "));
        FH_CHECK(buf_add_value(out, tb));
    }
    return FH_OK;
}

int fh_config_diff(const FhConfig *a, const FhConfig *b, const char *const *ignore, char **diff)
{
    *diff = NULL;
    if (a->schema != b->schema || a->n != b->n)
        FH_FAIL(FH_ERR_USAGE, "config diff: %s and %s were loaded with different schemas", a->source, b->source);
    FhText out = {0};
    int status = config_diff_build(a, b, ignore, &out);
    if (status != FH_OK) {
        free(out.s);
        return fh_error_trace(status, __FILE__, __LINE__, "config_diff_build(a, b, ignore, &out)");
    }
    *diff = out.s; /* NULL when nothing was added */
    return FH_OK;
}

/* the "allowed" column of the help: a range, the choices, or nothing */
static void config_allowed(const FhConfigKey *k, char *out, size_t cap)
{
    out[0] = '\0';
    if (k->type == FH_CFG_CHOICE) snprintf(out, cap, "one of %s", k->choices ? k->choices : "");
    else if (k->type == FH_CFG_BOOL) snprintf(out, cap, "true|false");
    else if (config_ranged(k)) {
        char range[80];
        config_format_range(k, range, sizeof range);
        snprintf(out, cap, "in %s", range);
    }
}

static void config_default_shown(const FhConfigKey *k, char *out, size_t cap)
{
    char text[400];
    fh_config_default_text(k, text, sizeof text);
    if (k->required) snprintf(out, cap, "required");
    else if (config_needs_quotes(text)) snprintf(out, cap, "default \"%s\"", text);
    else snprintf(out, cap, "default %s", text);
}

/* Column widths stop growing here: a long list of choices overflows its own row instead of pushing
 * every help line to the right. */
#define HELP_COLUMN_MAX 24

void fh_config_print_help(FILE *out, const FhConfigKey *schema, int n)
{
    int wk = 0, wd = 0, wa = 0;
    char buf[512];
    for (int k = 0; k < n; k++) {
        int l = (int)strlen(schema[k].key);
        if (l > wk) wk = l;
        config_default_shown(&schema[k], buf, sizeof buf);
        if ((l = (int)strlen(buf)) > wd) wd = l;
        config_allowed(&schema[k], buf, sizeof buf);
        if ((l = (int)strlen(buf)) > wa) wa = l;
    }
    if (wk > HELP_COLUMN_MAX) wk = HELP_COLUMN_MAX;
    if (wd > HELP_COLUMN_MAX) wd = HELP_COLUMN_MAX;
    if (wa > HELP_COLUMN_MAX) wa = HELP_COLUMN_MAX;
    for (int k = 0; k < n; k++) {
        if (!config_section_first(schema, k)) continue;
        fprintf(out, "%s[%s]\n", k ? "\n" : "", schema[k].section);
        for (int j = k; j < n; j++) {
            if (strcmp(schema[j].section, schema[k].section) != 0) continue;
            char def[512], allowed[512];
            config_default_shown(&schema[j], def, sizeof def);
            config_allowed(&schema[j], allowed, sizeof allowed);
            const char *help = schema[j].help ? schema[j].help : "";
            fprintf(out, "  %-*s  %-6s  %-*s  %-*s  %s\n", wk, schema[j].key, fh_config_type_name(schema[j].type),
                    wd, def, wa, allowed, help);
        }
    }
}

void fh_config_print_args_help(FILE *out, const FhConfigKey *schema, int n)
{
    for (int k = 0; k < n; k++) {
        char def[400], allowed[512];
        fh_config_default_text(&schema[k], def, sizeof def);
        config_allowed(&schema[k], allowed, sizeof allowed);
        fprintf(out, "  %-18s (%s) %s%s%s%s\n", schema[k].key, def[0] ? def : "-", schema[k].help ? schema[k].help : "",
                allowed[0] ? " (" : "", allowed, allowed[0] ? ")" : "");
    }
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t fh_config_hash(const FhConfig *c)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int k = 0; k < c->n; k++) {
        const FhConfigKey *key = &c->schema[k];
        const Entry *e = &c->entries[k];
        char num[64] = "";
        const char *v = num;
        switch (key->type) {
        case FH_CFG_INT: snprintf(num, sizeof num, "%" PRId64, e->i); break;
        case FH_CFG_FLOAT: snprintf(num, sizeof num, "%.17g", e->f == 0.0 ? 0.0 : e->f); break; /* -0 == 0 */
        case FH_CFG_BOOL: v = e->b ? "true" : "false"; break;
        case FH_CFG_STRING:
        case FH_CFG_CHOICE: v = config_text_of(c, k); break;
        }
        h = fnv1a(h, key->section);
        h = fnv1a(h, ".");
        h = fnv1a(h, key->key);
        h = fnv1a(h, "=");
        h = fnv1a(h, v);
        h = fnv1a(h, "\n");
    }
    return h;
}
