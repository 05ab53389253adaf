/* Schema-free INI reading (ini.h): the syntax of src/core/config.c, kept in step with its parser. */
#include "ini.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"

static void trim(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)**s)) (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

/* a comment starts at i: ';' or '#' first on the line or after whitespace */
static int comment_at(const char *s, size_t i)
{
    return (s[i] == ';' || s[i] == '#') && (i == 0 || isspace((unsigned char)s[i - 1]));
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static int add_entry(AppIni *ini, const char *section, const char *key, size_t lk, const char *raw, size_t lr,
                     const char *value, size_t lv, int line)
{
    if (ini->n == ini->cap) {
        int cap = ini->cap ? 2 * ini->cap : 32;
        AppIniEntry *grown = realloc(ini->entries, (size_t)cap * sizeof *grown);
        if (!grown) FH_FAIL(FH_ERR_IO, "out of memory reading INI text");
        ini->entries = grown;
        ini->cap = cap;
    }
    AppIniEntry *e = &ini->entries[ini->n];
    e->section = dup_n(section, strlen(section));
    e->key = dup_n(key, lk);
    e->raw = dup_n(raw, lr);
    e->value = dup_n(value, lv);
    e->line = line;
    ini->n++;
    if (!e->section || !e->key || !e->raw || !e->value) FH_FAIL(FH_ERR_IO, "out of memory reading INI text");
    return FH_OK;
}

static int parse_lines(AppIni *ini, const char *text, const char *source)
{
    char section[128] = "";
    int line = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        const char *s = p;
        p += n + (nl != NULL);
        line++;
        if (line == 1 && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3, n -= 3;
        trim(&s, &n);
        if (n == 0 || comment_at(s, 0)) continue;
        if (s[0] == '[') {
            const char *close = memchr(s, ']', n);
            if (!close) FH_FAIL(FH_ERR_USAGE, "%s:%d: syntax error (no ']' after '[')", source, line);
            const char *name = s + 1;
            size_t ln = (size_t)(close - name);
            trim(&name, &ln);
            if (ln == 0 || ln >= sizeof section) FH_FAIL(FH_ERR_USAGE, "%s:%d: bad section name", source, line);
            memcpy(section, name, ln);
            section[ln] = '\0';
            continue;
        }
        size_t cut = 0;
        while (cut < n && s[cut] != '=' && s[cut] != ':' && !comment_at(s, cut)) cut++;
        if (cut == n || comment_at(s, cut))
            FH_FAIL(FH_ERR_USAGE, "%s:%d: syntax error (expected key = value)", source, line);
        const char *key = s;
        size_t lk = cut;
        trim(&key, &lk);
        if (lk == 0) FH_FAIL(FH_ERR_USAGE, "%s:%d: syntax error (no key name before the '%c')", source, line, s[cut]);
        if (!section[0])
            FH_FAIL(FH_ERR_USAGE, "%s:%d: key '%.*s' is outside any section", source, line, (int)lk, key);
        /* raw: up to a comment outside double quotes */
        const char *v = s + cut + 1;
        size_t lv = n - cut - 1, end = 0;
        int quoted = 0;
        for (; end < lv; end++) {
            if (v[end] == '"') quoted = !quoted;
            else if (!quoted && comment_at(v, end)) break;
        }
        if (quoted) FH_FAIL(FH_ERR_USAGE, "%s:%d: [%s] %.*s: unterminated double quote", source, line, section, (int)lk, key);
        const char *raw = v;
        size_t lr = end;
        trim(&raw, &lr);
        const char *val = raw;
        size_t lval = lr;
        if (lval >= 2 && val[0] == '"' && val[lval - 1] == '"' && !memchr(val + 1, '"', lval - 2)) val++, lval -= 2;
        FH_CHECK(add_entry(ini, section, key, lk, raw, lr, val, lval, line));
    }
    return FH_OK;
}

int app_ini_parse(AppIni *ini, const char *text, const char *source)
{
    memset(ini, 0, sizeof *ini);
    int status = parse_lines(ini, text, source);
    if (status != FH_OK) app_ini_free(ini); /* the entries before the bad line */
    return status;
}

int app_ini_load(AppIni *ini, const char *path, int fail_status)
{
    memset(ini, 0, sizeof *ini);
    char *text = NULL;
    FH_CHECK(fh_read_file(path, &text, fail_status));
    int status = app_ini_parse(ini, text, path);
    free(text);
    return status;
}

const char *app_ini_get(const AppIni *ini, const char *section, const char *key)
{
    for (int i = ini->n - 1; i >= 0; i--)
        if (!strcmp(ini->entries[i].section, section) && !strcmp(ini->entries[i].key, key)) return ini->entries[i].value;
    return NULL;
}

void app_ini_free(AppIni *ini)
{
    for (int i = 0; i < ini->n; i++) {
        free(ini->entries[i].section);
        free(ini->entries[i].key);
        free(ini->entries[i].value);
        free(ini->entries[i].raw);
    }
    free(ini->entries);
    memset(ini, 0, sizeof *ini);
}
