/* The INI reader (config.h "INI text"): one syntax for run configs, grid files, run folders' config.ini
 * and grid state files. The config loader (config.c) checks each line against its schema; fh_ini_parse
 * keeps every entry for readers without a schema.
 *
 * libinih's stream parser reads the text through ini_read_line, which hands it one line at a time after
 * doing three things libinih cannot be told to do at run time in a portable way: counting lines (Debian
 * builds libinih without line numbers in the handler), owning the value syntax (its inline comments know
 * only ';' and would cut a quoted " ; ", and it would read an indented line as a second value of the
 * previous key) and keeping long values whole (its line buffer is 200 bytes). So libinih sees "name=" and
 * blank lines and finds the syntax errors; the line being handled waits in the Reader. */
#define _POSIX_C_SOURCE 200809L
#include "fedhet/buf.h"
#include "fedhet/config.h"
#include "fedhet/core.h"

#include <ctype.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *text, *source;
    size_t len, pos;
    int line;              /* the line last handed to libinih, from 1 */
    char *section;         /* the current section ("" before the first header); room for the whole text */
    int in_section;
    char *key, *raw, *value; /* of the key line handed to libinih */
    FhIniHandler handler;
    void *user;
    int status;            /* first error found by the reader or the handler */
    int status_line;
} Reader;

static void trim(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)**s)) (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

/* A ';' or '#' after whitespace starts a comment (and so does one opening the line). */
static int is_comment_at(const char *line, size_t i)
{
    return (line[i] == ';' || line[i] == '#') && (i == 0 || isspace((unsigned char)line[i - 1]));
}

static void copy_n(char *out, const char *s, size_t n)
{
    memcpy(out, s, n);
    out[n] = '\0';
}

/* Copies line[0..n) and `tail` into libinih's buffer with a newline, or fails when they do not fit. */
static int reader_emit(const Reader *r, char *out, size_t cap, const char *s, size_t n, const char *tail)
{
    const size_t lt = strlen(tail);
    if (n + lt + 2 > cap)
        FH_FAIL(FH_ERR_USAGE, "%s:%d: syntax error (a section or key name longer than %zu characters)", r->source,
                r->line, cap - 2 - lt);
    memcpy(out, s, n);
    memcpy(out + n, tail, lt);
    out[n + lt] = '\n';
    out[n + lt + 1] = '\0';
    return FH_OK;
}

/* The value part of a key line, from just after '=' or ':': raw runs to a comment outside double quotes
 * (a quote left open runs to the end of the line); value is raw without the quotes when raw is one quoted
 * string, else raw itself. */
static void reader_value(Reader *r, const char *v, size_t n)
{
    size_t end = 0;
    int quoted = 0;
    for (; end < n; end++) {
        if (v[end] == '"') quoted = !quoted;
        else if (!quoted && end > 0 && is_comment_at(v, end)) break; /* v[-1] is the separator, no space */
    }
    const char *raw = v;
    size_t lr = end;
    trim(&raw, &lr);
    copy_n(r->raw, raw, lr);
    const char *close = lr > 1 && raw[0] == '"' ? memchr(raw + 1, '"', lr - 1) : NULL;
    size_t after = close ? (size_t)(close - raw) + 1 : 0;
    while (close && after < lr && isspace((unsigned char)raw[after])) after++;
    if (close && (after == lr || raw[after] == ';' || raw[after] == '#'))
        copy_n(r->value, raw + 1, (size_t)(close - raw) - 1);
    else copy_n(r->value, raw, lr);
}

static int reader_call(Reader *r, const char *key)
{
    const FhIniLine l = { r->section, key, key ? r->raw : NULL, key ? r->value : NULL, r->line };
    return r->handler(r->user, &l);
}

/* One physical line -> what libinih sees ("name=", a blank line, or a line it will call a syntax error).
 * Section headers go to the handler here; keys outside a section are found here, where the line is known. */
static int reader_line(Reader *r, const char *s, size_t n, char *out, size_t cap)
{
    if (r->line == 1 && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3, n -= 3; /* UTF-8 BOM */
    trim(&s, &n);
    if (n == 0 || is_comment_at(s, 0)) return reader_emit(r, out, cap, "", 0, "");
    if (s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close) return reader_emit(r, out, cap, s, n, ""); /* libinih reports it */
        size_t j = (size_t)(close - s) + 1;
        while (j < n && isspace((unsigned char)s[j])) j++;
        if (j < n && !is_comment_at(s, j))
            FH_FAIL(FH_ERR_USAGE, "%s:%d: syntax error (text after the section header)", r->source, r->line);
        const char *name = s + 1;
        size_t ln = (size_t)(close - name);
        trim(&name, &ln);
        copy_n(r->section, name, ln);
        r->in_section = 1;
        FH_CHECK(reader_call(r, NULL));
        return reader_emit(r, out, cap, "", 0, "");
    }
    /* the name ends at the first '=' or ':' (as in libinih); a comment before it leaves no separator */
    size_t cut = 0;
    while (cut < n && s[cut] != '=' && s[cut] != ':' && !is_comment_at(s, cut)) cut++;
    if (cut == n || is_comment_at(s, cut)) {
        n = cut;
        trim(&s, &n);
        return reader_emit(r, out, cap, s, n, ""); /* libinih reports it */
    }
    const char *name = s;
    size_t ln = cut;
    trim(&name, &ln);
    if (ln == 0) FH_FAIL(FH_ERR_USAGE, "%s:%d: syntax error (no key name before the '%c')", r->source, r->line, s[cut]);
    copy_n(r->key, name, ln);
    if (!r->in_section)
        FH_FAIL(FH_ERR_USAGE, "%s:%d: key '%s' is outside any section; put it under a [section] header", r->source,
                r->line, r->key);
    reader_value(r, s + cut + 1, n - cut - 1);
    return reader_emit(r, out, cap, r->key, ln, "="); /* the value stays in the Reader */
}

static char *ini_read_line(char *out, int num, void *stream)
{
    Reader *r = stream;
    if (r->status != FH_OK || r->pos >= r->len) return NULL;
    const char *s = r->text + r->pos;
    const char *nl = memchr(s, '\n', r->len - r->pos);
    size_t n = nl ? (size_t)(nl - s) : r->len - r->pos;
    r->pos += n + (nl != NULL);
    r->line++;
    int st = reader_line(r, s, n, out, num > 0 ? (size_t)num : 0);
    if (st != FH_OK) {
        r->status = st;
        r->status_line = r->line;
        return NULL;
    }
    return out;
}

static int ini_on_key(void *user, const char *section, const char *name, const char *value)
{
    (void)section, (void)name, (void)value; /* libinih saw only "name="; the line is in the Reader */
    Reader *r = user;
    int st = reader_call(r, r->key);
    if (st != FH_OK) {
        r->status = st;
        r->status_line = r->line;
        return 0;
    }
    return 1;
}

/* libinih's syntax error on line `line`, with the line and what it lacks */
static int syntax_error(const Reader *r, int line)
{
    const char *p = r->text;
    for (int i = 1; i < line && p; i++) p = strchr(p, '\n'), p = p ? p + 1 : NULL;
    size_t n = p ? strcspn(p, "\r\n") : 0;
    if (p) trim(&p, &n);
    if (n > 60) n = 60; /* enough to recognise it */
    if (p && n && *p == '[')
        FH_FAIL(FH_ERR_USAGE, "%s:%d: syntax error in '%.*s'; a section line is [name], with its closing ']'", r->source,
                line, (int)n, p);
    if (p && n && !memchr(p, '=', n) && !memchr(p, ':', n))
        FH_FAIL(FH_ERR_USAGE, "%s:%d: syntax error: '%.*s' has no '='; a key line is key = value (a comment starts with "
                "';' or '#')", r->source, line, (int)n, p);
    FH_FAIL(FH_ERR_USAGE, "%s:%d: syntax error in '%.*s'; a line is [section], key = value or a comment", r->source, line,
            (int)n, p ? p : "");
}

int fh_ini_read(const char *text, const char *source, FhIniHandler handler, void *user)
{
    Reader r = { .text = text, .source = source ? source : "config", .len = strlen(text), .handler = handler,
                 .user = user };
    char *room = NULL;
    FH_CHECK(fh_calloc(&room, 4, r.len + 1, "INI line buffers"));
    r.section = room;
    r.key = room + (r.len + 1);
    r.raw = room + 2 * (r.len + 1);
    r.value = room + 3 * (r.len + 1);
    int rc = ini_parse_stream(ini_read_line, &r, ini_on_key, &r);
    fh_free(&room);
    if (rc < 0) FH_FAIL(FH_ERR_MEMORY, "%s: libinih failed (%d): out of memory?", r.source, rc);
    /* libinih goes on after its own syntax errors, so an earlier one of those beats ours */
    if (rc > 0 && (r.status == FH_OK || rc < r.status_line)) return syntax_error(&r, rc);
    if (r.status != FH_OK)
        return fh_error_trace(r.status, __FILE__, __LINE__, "ini_parse_stream(ini_read_line, &r, ...)");
    return FH_OK;
}

/* ---- every entry, without a schema ---- */

static char *dup_text(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int ini_keep(void *user, const FhIniLine *l)
{
    FhIni *ini = user;
    if (!l->key) return FH_OK;
    FH_CHECK(fh_grow(&ini->entries, &ini->cap, ini->n + 1, sizeof *ini->entries, "the INI text's entries"));
    FhIniEntry *e = &ini->entries[ini->n++];
    e->section = dup_text(l->section);
    e->key = dup_text(l->key);
    e->raw = dup_text(l->raw);
    e->value = dup_text(l->value);
    e->line = l->line;
    if (!e->section || !e->key || !e->raw || !e->value) FH_FAIL(FH_ERR_MEMORY, "out of memory reading INI text");
    return FH_OK;
}

int fh_ini_parse(FhIni *ini, const char *text, const char *source)
{
    memset(ini, 0, sizeof *ini);
    int status = fh_ini_read(text, source, ini_keep, ini);
    if (status != FH_OK) fh_ini_free(ini); /* the entries before the bad line */
    return status;
}

int fh_ini_load(FhIni *ini, const char *path, int fail_status)
{
    memset(ini, 0, sizeof *ini);
    char *text = NULL;
    FH_CHECK(fh_read_file(path, &text, fail_status));
    int status = fh_ini_parse(ini, text, path);
    free(text);
    return status;
}

const char *fh_ini_get(const FhIni *ini, const char *section, const char *key)
{
    for (int i = ini->n - 1; i >= 0; i--)
        if (!strcmp(ini->entries[i].section, section) && !strcmp(ini->entries[i].key, key))
            return ini->entries[i].value;
    return NULL;
}

void fh_ini_free(FhIni *ini)
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
