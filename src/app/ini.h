/* INI text as a list of (section, key, value) entries, without a schema, read with the syntax of
 * src/core/config.c: "[section]" headers, "key = value" or "key: value", comments on their own line or
 * after whitespace (';' or '#'), a value wrapped in double quotes kept literally. For what the config
 * module cannot load on its own: the [grid] section of grid files (fedhet grid) and the resolved
 * config.ini of run folders, whatever their method (fedhet report, fedhet landscape). */
#ifndef FEDHET_APP_INI_H
#define FEDHET_APP_INI_H

typedef struct {
    char *section, *key;
    char *value; /* unquoted */
    char *raw;   /* as written after the separator: comment cut, trimmed, quotes kept (grid lists) */
    int line;    /* 1-based */
} AppIniEntry;

typedef struct {
    AppIniEntry *entries;
    int n, cap;
} AppIni;

/* Parses text; `source` names it in messages ("FILE:LINE: ..."), FH_ERR_USAGE on a syntax error (ini is
 * then empty: nothing to free). */
int app_ini_parse(AppIni *ini, const char *text, const char *source);
/* Reads and parses a file; an unreadable file is `fail_status`. */
int app_ini_load(AppIni *ini, const char *path, int fail_status);
/* The value of the last entry section.key, or NULL */
const char *app_ini_get(const AppIni *ini, const char *section, const char *key);
void app_ini_free(AppIni *ini);

#endif
