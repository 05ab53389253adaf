/* Tables for scripts: TSV with a header row, or a JSON array of objects (app.h). What completion, the generated
 * docs and the man page read, so that no script parses a help text laid out for people. */
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "fedhet/core.h"

/* a TSV cell: tab, newline, carriage return and backslash escaped, so that every row stays one line of n cells */
static void tsv_text(FILE *out, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '\t': fputs("\\t", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\\': fputs("\\\\", out); break;
        default: fputc(*s, out);
        }
    }
}

/* a JSON string of the first n bytes of s (UTF-8 passes through; control characters escaped) */
static void json_text(FILE *out, const char *s, size_t n)
{
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c == '\t') fputs("\\t", out);
        else if (c == '\r') fputs("\\r", out);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

/* a list cell ("a b c") as ["a", "b", "c"] */
static void json_list(FILE *out, const char *s)
{
    fputc('[', out);
    int items = 0;
    while (*s) {
        while (*s == ' ') s++;
        const size_t n = strcspn(s, " ");
        if (!n) break;
        if (items++) fputs(", ", out);
        json_text(out, s, n);
        s += n;
    }
    fputc(']', out);
}

void app_table_begin(AppTable *t, FILE *out, AppFormat format, const AppColumn *columns, int n_columns)
{
    *t = (AppTable){ .out = out, .format = format, .columns = columns, .n_columns = n_columns };
    if (format == APP_FORMAT_JSON) {
        fputc('[', out);
        return;
    }
    for (int c = 0; c < n_columns; c++) {
        if (c) fputc('\t', out);
        tsv_text(out, columns[c].name);
    }
    fputc('\n', out);
}

void app_table_row(AppTable *t, const char *const *cells)
{
    FILE *out = t->out;
    if (t->format == APP_FORMAT_JSON) fputs(t->rows ? ",\n {" : "\n {", out);
    for (int c = 0; c < t->n_columns; c++) {
        const char *cell = cells[c] ? cells[c] : "";
        if (t->format != APP_FORMAT_JSON) {
            if (c) fputc('\t', out);
            tsv_text(out, cell);
            continue;
        }
        if (c) fputs(", ", out);
        json_text(out, t->columns[c].name, strlen(t->columns[c].name));
        fputs(": ", out);
        if (t->columns[c].kind == APP_CELL_LIST) json_list(out, cell);
        else if (t->columns[c].kind == APP_CELL_BOOL) fputs(strcmp(cell, "true") ? "false" : "true", out);
        else json_text(out, cell, strlen(cell));
    }
    fputs(t->format == APP_FORMAT_JSON ? "}" : "\n", out);
    t->rows++;
}

void app_table_end(AppTable *t)
{
    if (t->format == APP_FORMAT_JSON) fputs(t->rows ? "\n]\n" : "]\n", t->out);
}

int app_format_take(int argc, char **argv, int *i, int text_allowed, AppFormat *format, int *consumed)
{
    const char *a = argv[*i], *value = NULL;
    *consumed = 0;
    if (!strncmp(a, "--format=", 9)) value = a + 9;
    else if (!strcmp(a, "--format")) FH_CHECK(app_option_value(argc, argv, i, &value));
    else return FH_OK;
    if (!strcmp(value, "tsv")) *format = APP_FORMAT_TSV;
    else if (!strcmp(value, "json")) *format = APP_FORMAT_JSON;
    else if (text_allowed && !strcmp(value, "text")) *format = APP_FORMAT_TEXT;
    else FH_FAIL(FH_ERR_USAGE, "--format: '%s' must be %s", value, text_allowed ? "text, tsv or json" : "tsv or json");
    *consumed = 1;
    return FH_OK;
}
