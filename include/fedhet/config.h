/* fedhet config: a schema-driven INI experiment configuration.
 *
 * The caller owns the schema, a table of keys (section, name, type, default, range or choices, help);
 * this module knows no key names. Loading parses an INI file or text, applies command-line overrides
 * "section.key=value" (they beat the file; of two overrides of one key the later wins), checks every
 * value against the schema and then gives typed access. Anything wrong with a config -- an unknown
 * section or key (the nearest valid name is suggested), a key given twice in the file, a value that does
 * not parse or is out of range, a required key left out -- is an FH_ERR_USAGE raised by the load, whose
 * message names the file and line (or "command line") and the key.
 *
 * File syntax: "[section]" headers; "key = value" (or "key: value") lines; comments on their own line
 * start with ';' or '#'; a ';' or '#' after whitespace starts an inline comment. Whitespace around names
 * and values is stripped. A value may be wrapped in double quotes, inside which everything is kept
 * literally (spaces, ';', '#'); double quotes elsewhere in a value and control characters are errors.
 * Indented lines do not continue the previous value. Key and section names are [A-Za-z0-9_-].
 *
 * Values: FLOAT in decimal notation (0.05, -2, 1e-3); INT as decimal digits with an optional sign, or a whole number
 * in FLOAT notation (3.0, 1e2: a key that once was a float reads as before), never with a fraction; BOOL true|false
 * (or yes/no, on/off, 1/0); CHOICE one of its choices. */
#ifndef FEDHET_CONFIG_H
#define FEDHET_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { FH_CFG_INT, FH_CFG_FLOAT, FH_CFG_BOOL, FH_CFG_STRING, FH_CFG_CHOICE } FhConfigType;

/* The C type of the field a key's value lands in (fh_config_land); FH_CONFIG_AT names the field. */
typedef enum {
    FH_LAND_NONE = 0,
    FH_LAND_INT,
    FH_LAND_INT64,
    FH_LAND_FLOAT,
    FH_LAND_DOUBLE,
    FH_LAND_STRING,
    FH_LAND_INDEX /* a CHOICE as the position of its value among the choices, into an int (or an enum of int's size) */
} FhConfigLand;

/* A key's default, by its type: .i (INT), .f (FLOAT), .b (BOOL), .s (STRING and CHOICE; NULL reads as "") */
typedef union {
    int64_t i;
    double f;
    int b;
    const char *s;
} FhConfigValue;

/* One key, written once with designated initializers, e.g.
 *   { .section = "train", .key = "lr", .type = FH_CFG_FLOAT, .def.f = 0.01, .lo = 1e-12, .hi = 1e12,
 *     .help = "local learning rate", FH_CONFIG_AT(FlSettings, lr) } */
typedef struct {
    const char *section;      /* "data", "model", "train", "fl", "algo", "output" */
    const char *key;          /* "lr" */
    FhConfigType type;
    FhConfigValue def;        /* the default */
    int required;             /* 1: no default; an error if absent after the file and the overrides */
    double lo, hi;            /* range of INT and FLOAT; none when lo >= hi (as when both are left out) */
    int lo_open, hi_open;     /* 1: that end is excluded, (lo, hi] */
    const char *choices;      /* CHOICE: "|"-separated, e.g. "sgd|adam|adamw" */
    const char *help;         /* one line */
    const char *was;          /* a former name: a config given by a user with it gets "did you mean" this key; a saved
                               * one is read as if it named this key (fh_config_text_upgrade) */
    FhConfigLand land;        /* FH_LAND_NONE: read with the getters only */
    size_t at;                /* offset of the field in the struct fh_config_land fills */
} FhConfigKey;

/* .land and .at of a key whose value lands in field `field` of `Struct`: the field's C type picks the land (int,
 * int64_t, float, double, const char *; a BOOL lands as 0 or 1 in an int); a field of another type does not compile. */
#define FH_CONFIG_AT(Struct, field)                                                                                  \
    .at = offsetof(Struct, field),                                                                                  \
    .land = _Generic(((Struct *)0)->field, int: FH_LAND_INT, int64_t: FH_LAND_INT64, float: FH_LAND_FLOAT,          \
                     double: FH_LAND_DOUBLE, const char *: FH_LAND_STRING)
/* the same for a CHOICE landing as its index (FH_LAND_INDEX); the field must have an int's size */
#define FH_CONFIG_AT_INDEX(Struct, field)                                                                            \
    .at = offsetof(Struct, field) + 0 * sizeof(char[sizeof(((Struct *)0)->field) == sizeof(int) ? 1 : -1]),         \
    .land = FH_LAND_INDEX

typedef struct FhConfig FhConfig; /* opaque */

/* Loads a config. schema: n keys, kept by pointer (it must outlive the config); it is checked too, and
 * a bad schema (duplicate or malformed names, a default that fails its own rules) is an FH_ERR_USAGE
 * "config schema: ...". overrides: argv-style "section.key=value" strings (n_overrides may be 0).
 * *out is NULL on failure. A missing or unreadable file is FH_ERR_DATA "<path>: cannot open config" (a
 * missing input file is exit 2 for every command). */
int fh_config_load_file(FhConfig **out, const FhConfigKey *schema, int n, const char *path,
                        char *const *overrides, int n_overrides);
/* The same from INI text (NULL: none, so only defaults and overrides); source_name is used in messages
 * in place of a path (NULL: "config"). */
int fh_config_load_text(FhConfig **out, const FhConfigKey *schema, int n, const char *text,
                        const char *source_name, char *const *overrides, int n_overrides);
void fh_config_free(FhConfig **cfg);

/* The text of a config saved by an earlier version as this version names its keys: a line that gives a key by its
 * former name (.was) in that key's section gives it by its name, the rest of the line as it was; every other line
 * as it was. A config a user writes is not upgraded: its former names get "did you mean". free() *out. */
int fh_config_text_upgrade(const FhConfigKey *schema, int n, const char *text, char **out);

/* Typed getters. The key must be in the schema with that type (fh_config_string: STRING or CHOICE);
 * anything else is a programming error and aborts with a message. */
int64_t fh_config_int(const FhConfig *c, const char *section, const char *key);
double fh_config_float(const FhConfig *c, const char *section, const char *key);
int fh_config_bool(const FhConfig *c, const char *section, const char *key);
const char *fh_config_string(const FhConfig *c, const char *section, const char *key);
/* 1 when neither the file nor an override gave the key, so the schema default applies */
int fh_config_is_default(const FhConfig *c, const char *section, const char *key);
/* Where the key's value comes from, for messages, into out: "FILE:LINE", the overrides' source ("command
 * line"), or the file's name for a default; returns out. */
const char *fh_config_origin(const FhConfig *c, const char *section, const char *key, char *out, size_t size);

/* The resolved config as INI text: every schema key, in schema order grouped by section (sections in
 * order of first appearance), the value as given or the default, quoted where it must be. Values equal
 * to the schema default (given or not) carry a trailing "; default" comment, so that the text of a
 * config loaded from this text is this text again. Loading it gives the same values. free() the text. */
int fh_config_to_text(const FhConfig *c, char **text);

/* Keys whose values differ between a and b (loaded with the same schema), compared as typed values
 * ("0.10" equals "0.1"), skipping the "section.key" names in `ignore` (NULL-terminated; NULL: none).
 * *diff: "section.key: A -> B" lines joined by "; ", malloc'd (free() it); NULL when none differ. */
int fh_config_diff(const FhConfig *a, const FhConfig *b, const char *const *ignore, char **diff);

/* The same for a command whose keys come as "key=value" arguments (fedhet partition, fedhet landscape): a key is
 * named without its section (no two keys of the schema share a name), args[i] "key=value" being the override
 * "section.key=value"; messages begin with source_name (NULL: "command line"). Nothing is read from a file. */
int fh_config_load_args(FhConfig **out, const FhConfigKey *schema, int n, char *const *args, int n_args,
                        const char *source_name);

/* `--help` of such a command: "  key  (default) help (allowed values)", a line per key ("-" for an empty default) */
void fh_config_print_args_help(FILE *out, const FhConfigKey *schema, int n);

/* Writes every key of `section` (NULL: of every section) with a land into the struct at dst (the key's .at from dst):
 * an INT key into an int or int64_t, a BOOL as 0 or 1 into an int, a FLOAT into a float or double, a STRING or CHOICE
 * as a pointer into the config (valid while it lives) or a CHOICE as its index. The schema check refuses a land that
 * does not fit its key. */
void fh_config_land(const FhConfig *c, const char *section, void *dst);
/* The position of value among the '|'-joined choices, -1 if it is none of them */
int fh_config_choice_index(const char *choices, const char *value);
/* A key's value as text: as given, or its default's text */
const char *fh_config_text(const FhConfig *c, const char *section, const char *key);

/* The text of a key's default as --help and the resolved config show it: the shortest decimal that reads back
 * as the same number (1e-8, 0.05, 1.3333333333333333), the choice or string itself; "" when required. */
void fh_config_default_text(const FhConfigKey *k, char *out, size_t cap);

/* "int", "float", "bool", "string" or "choice" */
const char *fh_config_type_name(FhConfigType t);
/* The range of an INT or FLOAT key as --help shows it ("[0, 1)", "(0, inf]"); "" for a key without one */
void fh_config_range_text(const FhConfigKey *k, char *out, size_t cap);

/* `--help` text: every key grouped by section with its type, default (or "required"), range or
 * choices, and help line. */
void fh_config_print_help(FILE *out, const FhConfigKey *schema, int n);

/* FNV-1a 64 of the canonical resolved values ("section.key=value" lines in schema order; numbers in a
 * fixed format), for run identity: equal values give equal hashes however they were spelled and
 * whether or not they were defaults. */
uint64_t fh_config_hash(const FhConfig *c);

/* ---- INI text (src/core/ini_reader.c): the one reader of the syntax above ----
 * The config loader checks each line against its schema; fh_ini_parse keeps every entry, for what has no
 * schema of its own: a grid file's [grid] section, the config.ini of run folders whatever their method,
 * grid state files. */
typedef struct {
    const char *section; /* the current section (a "[section]" line: the one it opens) */
    const char *key;     /* NULL on a "[section]" line */
    const char *raw;     /* after the '=' or ':' up to a comment outside double quotes, trimmed, quotes kept
                          * (a quote left open runs to the end of the line) */
    const char *value;   /* raw without the double quotes when raw is one quoted string (a comment may follow
                          * its closing quote), else raw */
    int line;            /* 1-based */
} FhIniLine;
/* Called for each "[section]" line and each key line in order; a status other than FH_OK stops reading. */
typedef int (*FhIniHandler)(void *user, const FhIniLine *line);
/* Reads INI text; `source` names it in messages ("SOURCE:LINE: ..."; NULL: "config"). Syntax errors,
 * keys outside a section and name lines too long are FH_ERR_USAGE; the first error (the reader's or the
 * handler's) is returned. */
int fh_ini_read(const char *text, const char *source, FhIniHandler handler, void *user);

typedef struct {
    char *section, *key, *value, *raw; /* as in FhIniLine */
    int line;
} FhIniEntry;
typedef struct {
    FhIniEntry *entries;
    int n, cap;
} FhIni;
/* Every key line of text; on an error ini is empty (nothing to free). */
int fh_ini_parse(FhIni *ini, const char *text, const char *source);
/* The same from a file; one that cannot be read is `fail_status`. */
int fh_ini_load(FhIni *ini, const char *path, int fail_status);
/* The value of the last entry section.key, or NULL */
const char *fh_ini_get(const FhIni *ini, const char *section, const char *key);
void fh_ini_free(FhIni *ini);

/* The nearest of `candidates` to `word` by optimal-string-alignment (Damerau-Levenshtein) distance,
 * ignoring case; NULL when none is within max(2, strlen(word)/3) or the nearest would replace the whole
 * word. Ties go to the earlier candidate. For suggesting names anywhere a name can be mistyped. */
const char *fh_nearest_name(const char *word, const char *const *candidates, int n);

#endif
