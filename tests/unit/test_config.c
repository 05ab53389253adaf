/* Unit tests for src/core/config.c, the schema-driven INI configuration: defaults, file values and
 * overrides; every kind of config error with the line, key and suggestion its message must carry; the
 * value syntax (comments, quotes, long lines); the resolved text round trip, diff, hash and help; and
 * the name suggestions of fh_nearest_name; the INI reader alone, without a schema (src/core/ini_reader.c).
 *
 * Run all:  build/tests/test_config            Run one:  build/tests/test_config test_overrides */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "test_tmp.h"

#include <stdarg.h>
#include <stdlib.h>

#include "fedhet/config.h"

/* all five types, a required key, a key name shared by two sections, a string that may be empty */
static const FhConfigKey schema[] = {
    {.section = "train", .key = "lr", .type = FH_CFG_FLOAT, .def.f = 0.1, .lo = 0, .hi = 1e6, .help = "learning rate"},
    {.section = "train", .key = "rounds", .type = FH_CFG_INT, .required = 1, .lo = 1, .hi = 100000,
     .help = "communication rounds"},
    {.section = "train", .key = "optimizer", .type = FH_CFG_CHOICE, .def.s = "sgd", .choices = "sgd|adam|adamw",
     .help = "local optimiser"},
    {.section = "fl", .key = "iid", .type = FH_CFG_BOOL, .def.b = 0, .help = "split the data IID"},
    {.section = "fl", .key = "clients", .type = FH_CFG_INT, .def.i = 10, .lo = 1, .hi = 1000, .help = "number of clients"},
    {.section = "algo", .key = "mu", .type = FH_CFG_FLOAT, .def.f = 0.01, .lo = 0, .hi = 10, .help = "proximal weight"},
    {.section = "train", .key = "seed", .type = FH_CFG_INT, .def.i = 0, .help = "random seed (any integer)"},
    {.section = "output", .key = "name", .type = FH_CFG_STRING, .def.s = "run", .help = "run folder name"},
    {.section = "output", .key = "note", .type = FH_CFG_STRING, .help = "free text"},
};
#define NKEYS ((int)(sizeof schema / sizeof schema[0]))

static int load(FhConfig **c, const char *text, char *const *ov, int n_ov)
{
    return fh_config_load_text(c, schema, NKEYS, text, "cfg.ini", ov, n_ov);
}

/* 1 when loading fails with FH_ERR_USAGE, no config, and a message holding every needle (NULL-ended) */
static int fails_with(const char *text, char *const *ov, int n_ov, ...)
{
    FhConfig *c = (FhConfig *)&c; /* must come back NULL */
    fh_error_clear();
    int st = load(&c, text, ov, n_ov);
    int ok = st == FH_ERR_USAGE && c == NULL;
    va_list ap;
    va_start(ap, n_ov);
    for (const char *needle; (needle = va_arg(ap, const char *));)
        if (!strstr(fh_error_message(), needle)) {
            printf("    missing \"%s\"\n", needle);
            ok = 0;
        }
    va_end(ap);
    if (!ok) printf("    status %d, message:\n%s\n", st, fh_error_message());
    if (st == FH_OK) fh_config_free(&c);
    return ok;
}

static void test_defaults(void)
{
    FhConfig *c = NULL;
    CHECK_OK(load(&c, "[train]\nrounds = 5\n", NULL, 0));
    if (!c) return;
    CHECK(fh_config_int(c, "train", "rounds") == 5);
    CHECK(!fh_config_is_default(c, "train", "rounds"));
    CHECK_NEAR(fh_config_float(c, "train", "lr"), 0.1, 0);
    CHECK(fh_config_is_default(c, "train", "lr"));
    CHECK(strcmp(fh_config_string(c, "train", "optimizer"), "sgd") == 0);
    CHECK(fh_config_bool(c, "fl", "iid") == 0);
    CHECK(fh_config_int(c, "fl", "clients") == 10);
    CHECK(strcmp(fh_config_string(c, "output", "name"), "run") == 0);
    CHECK(strcmp(fh_config_string(c, "output", "note"), "") == 0);
    CHECK(fh_config_is_default(c, "output", "note"));
    fh_config_free(&c);
    CHECK(c == NULL);
}

/* a real file: comments of both kinds, ':' separators, quotes, whitespace, a BOM, CRLF line ends */
static void test_file_values(void)
{
    const char *path = tmp_path("values.ini");
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    tmp_record(path);
    fputs("\xEF\xBB\xBF; experiment\r\n"
          "# another comment\n"
          "[ train ]   ; the training\n"
          "lr = 0.25 ; inline\n"
          "rounds: 7\t# tab then hash\n"
          "optimizer=adamw\n"
          "\n"
          "[fl] # federated\n"
          "iid = YES\r\n"
          "[output]\n"
          "name = \"my ; run\"  ; quoted keeps the ';'\n"
          "note = a#b;c\n",
          f);
    fclose(f);
    FhConfig *c = NULL;
    CHECK_OK(fh_config_load_file(&c, schema, NKEYS, path, NULL, 0));
    if (!c) return;
    CHECK_NEAR(fh_config_float(c, "train", "lr"), 0.25, 0);
    CHECK(fh_config_int(c, "train", "rounds") == 7);
    CHECK(strcmp(fh_config_string(c, "train", "optimizer"), "adamw") == 0);
    CHECK(fh_config_bool(c, "fl", "iid") == 1);
    CHECK(strcmp(fh_config_string(c, "output", "name"), "my ; run") == 0);
    CHECK(strcmp(fh_config_string(c, "output", "note"), "a#b;c") == 0); /* no whitespace: no comment */
    CHECK(!fh_config_is_default(c, "output", "note"));
    fh_config_free(&c);
}

static void test_overrides(void)
{
    char *ov[] = {"train.lr=0.3", "train.rounds = 4", "train.rounds=9", " fl.iid = on ", "output.name=\"a b\""};
    FhConfig *c = NULL;
    CHECK_OK(load(&c, "[train]\nlr = 0.2\nrounds = 1\n", ov, 5));
    if (!c) return;
    CHECK_NEAR(fh_config_float(c, "train", "lr"), 0.3, 0);       /* beats the file */
    CHECK(fh_config_int(c, "train", "rounds") == 9);             /* the later override wins */
    CHECK(fh_config_bool(c, "fl", "iid") == 1);                  /* whitespace stripped */
    CHECK(!fh_config_is_default(c, "fl", "iid"));
    CHECK(strcmp(fh_config_string(c, "output", "name"), "a b") == 0);
    fh_config_free(&c);

    /* values are checked after the overrides: a bad file value that an override replaces is fine */
    char *fix[] = {"train.lr=0.5"};
    CHECK_OK(load(&c, "[train]\nlr = abc\nrounds = 1\n", fix, 1));
    if (c) CHECK_NEAR(fh_config_float(c, "train", "lr"), 0.5, 0);
    fh_config_free(&c);

    /* no text at all: defaults and overrides */
    char *only[] = {"train.rounds=3"};
    CHECK_OK(fh_config_load_text(&c, schema, NKEYS, NULL, NULL, only, 1));
    if (c) CHECK(fh_config_int(c, "train", "rounds") == 3);
    fh_config_free(&c);
}

static void test_missing_file(void)
{
    FhConfig *c = NULL;
    const char *path = tmp_path("absent.ini");
    CHECK(fh_config_load_file(&c, schema, NKEYS, path, NULL, 0) == FH_ERR_DATA); /* a missing input: exit 2 */
    CHECK(c == NULL);
    CHECK(strstr(fh_error_message(), path) != NULL);
    CHECK(strstr(fh_error_message(), "cannot open config: No such file or directory") != NULL);
    /* a directory opens but does not read */
    CHECK(fh_config_load_file(&c, schema, NKEYS, tmp_root, NULL, 0) == FH_ERR_DATA);
    CHECK(strstr(fh_error_message(), "cannot read config") != NULL);
    CHECK(c == NULL);
}

static void test_syntax_errors(void)
{
    CHECK(fails_with("[train]\nrounds = 5\njunk line\n", NULL, 0, "cfg.ini:3: syntax error", NULL));
    /* the line, and what it lacks */
    CHECK(fails_with("[train]\nrounds\n", NULL, 0, "cfg.ini:2: syntax error: 'rounds' has no '='; a key line is key = value",
                     NULL));
    CHECK(fails_with("[train\nrounds = 5\n", NULL, 0, "a section line is [name], with its closing ']'", NULL));
    CHECK(fails_with("[train\nrounds = 5\n", NULL, 0, "cfg.ini:1: syntax error", NULL));
    CHECK(fails_with("[train] extra\nrounds = 5\n", NULL, 0, "cfg.ini:1: syntax error", NULL));
    CHECK(fails_with("[train]\n = 5\n", NULL, 0, "cfg.ini:2: syntax error", NULL));
    CHECK(fails_with("[train]\nrounds ; = 5\n", NULL, 0, "cfg.ini:2: syntax error", NULL));
    CHECK(fails_with("rounds = 5\n[train]\n", NULL, 0, "cfg.ini:1: key 'rounds' is outside any section", NULL));
    /* the first error wins, whether libinih or the schema found it */
    CHECK(fails_with("[train]\njunk\nbogus = 1\n", NULL, 0, "cfg.ini:2: syntax error", NULL));
    CHECK(fails_with("[train]\nbogus = 1\njunk\n", NULL, 0, "cfg.ini:2: unknown key 'bogus'", NULL));
}

static void test_unknown_section(void)
{
    CHECK(fails_with("[trian]\nrounds = 5\n", NULL, 0, "cfg.ini:1: unknown section [trian]; did you mean [train]?",
                     NULL));
    /* an empty misspelled section is caught too, and with no near name the sections are listed */
    CHECK(fails_with("[train]\nrounds = 5\n\n[zzzzzz]\n", NULL, 0, "cfg.ini:4: unknown section [zzzzzz]",
                     "[train], [fl], [algo], [output]", NULL));
}

static void test_unknown_key(void)
{
    CHECK(fails_with("[train]\nrounds = 5\n; c\nrouns = 3\n", NULL, 0,
                     "cfg.ini:4: unknown key 'rouns' in [train]; did you mean 'rounds'?", NULL));
    /* nothing near in [train]: the other sections are searched and named */
    CHECK(fails_with("[train]\nrounds = 5\nmu = 0.1\n", NULL, 0,
                     "cfg.ini:3: unknown key 'mu' in [train]; did you mean 'algo.mu'?", NULL));
    CHECK(fails_with("[fl]\nclient = 3\n", NULL, 0, "did you mean 'clients'?", NULL));
    /* nothing near anywhere: the keys of the section are listed */
    CHECK(fails_with("[fl]\nwxyzwxyz = 1\n", NULL, 0, "unknown key 'wxyzwxyz' in [fl]; its keys are iid, clients",
                     NULL));
}

static void test_duplicate_key(void)
{
    CHECK(fails_with("[train]\nrounds = 5\nlr = 0.1\n[fl]\n[train]\nrounds = 6\n", NULL, 0,
                     "cfg.ini:6: [train] rounds is given twice (lines 2 and 6)", NULL));
    /* the same key name in two sections is no duplicate */
    FhConfig *c = NULL;
    CHECK_OK(load(&c, "[train]\nrounds = 5\n[fl]\nclients = 5\n", NULL, 0));
    fh_config_free(&c);
}

static void test_int_values(void)
{
    CHECK(fails_with("[train]\nrounds = 5x\n", NULL, 0, "cfg.ini:2: [train] rounds = 5x: not an integer", NULL));
    CHECK(fails_with("[train]\nrounds = 1.5\n", NULL, 0, "rounds = 1.5: not an integer", NULL));
    CHECK(fails_with("[train]\nrounds = 0x10\n", NULL, 0, "rounds = 0x10: not an integer", "hexadecimal", NULL));
    CHECK(fails_with("[train]\nrounds = 1e-1\n", NULL, 0, "rounds = 1e-1: not an integer", "fraction", NULL));
    CHECK(fails_with("[train]\nrounds = 1e30\n", NULL, 0, "rounds = 1e30: not an integer", "2^53", NULL));
    CHECK(fails_with("[train]\nrounds = -\n", NULL, 0, "rounds = -: not an integer", NULL));
    CHECK(fails_with("[train]\nrounds =\n", NULL, 0, "cfg.ini:2: [train] rounds: the value is empty", NULL));
    CHECK(fails_with("[train]\nrounds = 1\nseed = 99999999999999999999\n", NULL, 0, "64-bit", NULL));
    CHECK(fails_with("[train]\nrounds = 0\n", NULL, 0, "[train] rounds = 0: must be in [1, 100000]", NULL));
    CHECK(fails_with("[train]\nrounds = 100001\n", NULL, 0, "must be in [1, 100000]", NULL));
    /* a whole number in float notation is that integer (a key that once was a float reads as it did) */
    FhConfig *w = NULL;
    CHECK_OK(load(&w, "[train]\nrounds = 1e3\nseed = -4.0\n[fl]\nclients = 12.00\n", NULL, 0));
    if (w)
        CHECK(fh_config_int(w, "train", "rounds") == 1000 && fh_config_int(w, "train", "seed") == -4 &&
              fh_config_int(w, "fl", "clients") == 12);
    fh_config_free(&w);
    CHECK(fails_with("[train]\nrounds = 1e6\n", NULL, 0, "rounds = 1e6: must be in [1, 100000]", NULL));
    FhConfig *c = NULL; /* the range is inclusive; no range (lo > hi) takes any int64 */
    CHECK_OK(load(&c, "[train]\nrounds = +100000\nseed = -9223372036854775808\n", NULL, 0));
    if (c) {
        CHECK(fh_config_int(c, "train", "rounds") == 100000);
        CHECK(fh_config_int(c, "train", "seed") == INT64_MIN);
    }
    fh_config_free(&c);
}

static void test_float_values(void)
{
    CHECK(fails_with("[train]\nrounds = 1\nlr = -0.1\n", NULL, 0, "cfg.ini:3: [train] lr = -0.1: must be in [0, 1e+06]",
                     NULL));
    /* one decimal syntax for every numeric key: what strtod alone would take beyond it is refused */
    CHECK(fails_with("[train]\nrounds = 1\nlr = nan\n", NULL, 0, "lr = nan: not a number in decimal notation", NULL));
    CHECK(fails_with("[train]\nrounds = 1\nlr = inf\n", NULL, 0, "lr = inf: not a number in decimal notation", NULL));
    CHECK(fails_with("[train]\nrounds = 1\nlr = -Infinity\n", NULL, 0, "not a number in decimal notation", NULL));
    CHECK(fails_with("[train]\nrounds = 1\nlr = 0x10\n", NULL, 0, "cfg.ini:3: [train] lr = 0x10: not a number in "
                     "decimal notation", "hexadecimal", NULL));
    CHECK(fails_with("[train]\nrounds = 1\nlr = 0x1p-3\n", NULL, 0, "lr = 0x1p-3: not a number", NULL));
    char *hex_override[] = { "train.lr=0X10" };
    CHECK(fails_with("[train]\nrounds = 1\n", hex_override, 1, "command line: [train] lr = 0X10: not a number", NULL));
    CHECK(fails_with("[train]\nrounds = 1\nlr = .\n", NULL, 0, "lr = .: not a number", NULL));
    CHECK(fails_with("[train]\nrounds = 1\nlr = 1e\n", NULL, 0, "lr = 1e: not a number", NULL));
    CHECK(fails_with("[train]\nrounds = 1\nlr = e5\n", NULL, 0, "lr = e5: not a number", NULL));
    CHECK(fails_with("[train]\nrounds = 1\nlr = 1e+\n", NULL, 0, "lr = 1e+: not a number", NULL));
    const char *decimals[] = { ".5", "5.", "+1e+2", "1E-3", "0.25e1", "007" };
    const double values[] = { 0.5, 5.0, 100.0, 1e-3, 2.5, 7.0 };
    for (int i = 0; i < 6; i++) {
        char text[96];
        snprintf(text, sizeof text, "[train]\nrounds = 1\nlr = %s\n", decimals[i]);
        FhConfig *d = NULL;
        CHECK_OK(load(&d, text, NULL, 0));
        if (d) CHECK_MSG(fh_config_float(d, "train", "lr") == values[i], "lr = %s", decimals[i]);
        fh_config_free(&d);
    }
    CHECK(fails_with("[train]\nrounds = 1\nlr = 1e999\n", NULL, 0, "must be a finite number", NULL));
    CHECK(fails_with("[train]\nrounds = 1\nlr = 0.1.2\n", NULL, 0, "lr = 0.1.2: not a number", NULL));
    /* a bound %g would round is shown with the digits it needs */
    const FhConfigKey tight[] = {{.section = "a", .key = "beta", .type = FH_CFG_FLOAT, .def.f = 0.9, .hi = 0.999999999},
                                 {.section = "a", .key = "seed", .type = FH_CFG_INT, .hi = 2147483647}};
    FhConfig *c = NULL;
    CHECK(fh_config_load_text(&c, tight, 2, "[a]\nbeta = 1\n", "t", NULL, 0) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "beta = 1: must be in [0, 0.999999999]") != NULL);
    CHECK(fh_config_load_text(&c, tight, 2, "[a]\nseed = 2147483648\n", "t", NULL, 0) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "seed = 2147483648: must be in [0, 2147483647]") != NULL);
    CHECK_OK(load(&c, "[train]\nrounds = 1\nlr = 1e6\n[algo]\nmu = 0\n", NULL, 0));
    if (c) {
        CHECK_NEAR(fh_config_float(c, "train", "lr"), 1e6, 0);
        CHECK_NEAR(fh_config_float(c, "algo", "mu"), 0, 0);
    }
    fh_config_free(&c);
}

static void test_bool_values(void)
{
    const char *yes[] = {"true", "True", "yes", "on", "1"}, *no[] = {"false", "FALSE", "no", "off", "0"};
    for (int i = 0; i < 10; i++) {
        char text[64];
        snprintf(text, sizeof text, "[train]\nrounds = 1\n[fl]\niid = %s\n", i < 5 ? yes[i] : no[i - 5]);
        FhConfig *c = NULL;
        CHECK_OK(load(&c, text, NULL, 0));
        if (c) CHECK_MSG(fh_config_bool(c, "fl", "iid") == (i < 5), "%s", text);
        fh_config_free(&c);
    }
    CHECK(fails_with("[train]\nrounds = 1\n[fl]\niid = maybe\n", NULL, 0,
                     "cfg.ini:4: [fl] iid = maybe: must be true or false", NULL));
}

static void test_choice_values(void)
{
    CHECK(fails_with("[train]\nrounds = 1\noptimizer = adm\n", NULL, 0,
                     "cfg.ini:3: [train] optimizer = adm: must be one of sgd|adam|adamw; did you mean 'adam'?", NULL));
    CHECK(fails_with("[train]\nrounds = 1\noptimizer = lbfgs-b\n", NULL, 0, "must be one of sgd|adam|adamw", NULL));
    CHECK(!strstr(fh_error_message(), "did you mean"));
    /* choices are exact: a prefix or another case is not one */
    CHECK(fails_with("[train]\nrounds = 1\noptimizer = ada\n", NULL, 0, "must be one of", NULL));
    CHECK(fails_with("[train]\nrounds = 1\noptimizer = SGD\n", NULL, 0, "did you mean 'sgd'?", NULL));
}

static void test_required_missing(void)
{
    CHECK(fails_with("[train]\nlr = 0.1\n", NULL, 0, "train.rounds", "communication rounds", NULL));
    CHECK(fails_with(NULL, NULL, 0, "cfg.ini: required key train.rounds is missing", NULL));
}

static void test_override_errors(void)
{
    char *no_eq[] = {"train.lr"}, *no_dot[] = {"lr=0.1"}, *no_key[] = {"train.=1"};
    char *sec[] = {"trian.lr=0.1"}, *key[] = {"train.rouns=3"}, *val[] = {"train.rounds=1", "train.lr=-1"};
    CHECK(fails_with("", no_eq, 1, "command line: 'train.lr' is not of the form section.key=value", NULL));
    CHECK(fails_with("", no_dot, 1, "'lr=0.1' is not of the form section.key=value", NULL));
    CHECK(fails_with("", no_key, 1, "is not of the form", NULL));
    CHECK(fails_with("", sec, 1, "command line: unknown section [trian]; did you mean [train]?", NULL));
    CHECK(fails_with("", key, 1, "command line: unknown key 'rouns' in [train]; did you mean 'rounds'?", NULL));
    CHECK(fails_with("", val, 2, "command line: [train] lr = -1: must be in [0, 1e+06]", NULL));
}

/* libinih's line buffer is 200 bytes; quoting and comment rules are this module's own */
static void test_value_syntax(void)
{
    char text[1200], longname[801];
    memset(longname, 'x', 800);
    longname[800] = '\0';
    snprintf(text, sizeof text, "[train]\nrounds = 2\n[output]\nname = %s ; long\n", longname);
    FhConfig *c = NULL;
    CHECK_OK(load(&c, text, NULL, 0));
    if (c) CHECK(strcmp(fh_config_string(c, "output", "name"), longname) == 0);
    fh_config_free(&c);

    /* quotes keep edge spaces and comment marks; a quoted number is a number */
    CHECK_OK(load(&c, "[train]\nrounds = \"12\"\n[output]\nname = \" # x ; \"\nnote = \"\"\n", NULL, 0));
    if (c) {
        CHECK(fh_config_int(c, "train", "rounds") == 12);
        CHECK(strcmp(fh_config_string(c, "output", "name"), " # x ; ") == 0);
        CHECK(strcmp(fh_config_string(c, "output", "note"), "") == 0);
        CHECK(!fh_config_is_default(c, "output", "note"));
    }
    fh_config_free(&c);

    CHECK(fails_with("[train]\nrounds = 1\n[output]\nname = \"abc\n", NULL, 0,
                     "cfg.ini:4: [output] name: unterminated double quote", NULL));
    CHECK(fails_with("[train]\nrounds = 1\n[output]\nname = \"a\" b\n", NULL, 0, "text after the closing double quote",
                     NULL));
    CHECK(fails_with("[train]\nrounds = 1\n[output]\nname = a\"b\n", NULL, 0,
                     "cfg.ini:4: [output] name = a\"b: double quotes are allowed only around the whole value", NULL));
    char *ctl[] = {"output.note=a\nb"};
    CHECK(fails_with("[train]\nrounds = 1\n", ctl, 1, "command line: [output] note: the value contains a control",
                     NULL));
    /* an indented line is no continuation of the value above it */
    CHECK(fails_with("[train]\nrounds = 1\n  2\n", NULL, 0, "cfg.ini:3: syntax error", NULL));
}

static void test_to_text_round_trip(void)
{
    char *ov[] = {"train.rounds=30", "train.lr=0.10", "output.name= a;b ", "output.note=\"\"", "fl.iid=yes"};
    FhConfig *a = NULL, *b = NULL;
    CHECK_OK(load(&a, "[algo]\nmu = 0.5\n", ov, 5));
    if (!a) return;
    CHECK(strcmp(fh_config_string(a, "output", "name"), "a;b") == 0);
    char *text = NULL, *again = NULL;
    CHECK_OK(fh_config_to_text(a, &text));
    if (!text) goto done;
    const char *expected = "[train]\n"
                           "lr = 0.10 ; default\n" /* given, but equal to the default */
                           "rounds = 30\n"
                           "optimizer = sgd ; default\n"
                           "seed = 0 ; default\n"
                           "\n[fl]\n"
                           "iid = yes\n"
                           "clients = 10 ; default\n"
                           "\n[algo]\n"
                           "mu = 0.5\n"
                           "\n[output]\n"
                           "name = \"a;b\"\n"
                           "note = \"\" ; default\n";
    CHECK_MSG(strcmp(text, expected) == 0, "got:\n%s", text);
    CHECK_OK(fh_config_load_text(&b, schema, NKEYS, text, "resolved", NULL, 0));
    if (!b) goto done;
    CHECK_OK(fh_config_to_text(b, &again));
    CHECK_MSG(again && strcmp(again, text) == 0, "second text:\n%s", again ? again : "(null)");
    CHECK(fh_config_int(b, "train", "rounds") == 30);
    CHECK_NEAR(fh_config_float(b, "train", "lr"), 0.1, 0);
    CHECK(fh_config_bool(b, "fl", "iid") == 1);
    CHECK_NEAR(fh_config_float(b, "algo", "mu"), 0.5, 0);
    CHECK(strcmp(fh_config_string(b, "output", "name"), "a;b") == 0);
    CHECK(strcmp(fh_config_string(b, "output", "note"), "") == 0);
    CHECK(fh_config_hash(a) == fh_config_hash(b));
    char *diff = (char *)"x";
    CHECK_OK(fh_config_diff(a, b, NULL, &diff));
    CHECK(diff == NULL);
    free(diff);
done:
    free(text);
    free(again);
    fh_config_free(&a);
    fh_config_free(&b);
}

static void test_diff(void)
{
    char *ov_b[] = {"train.lr=0.2", "train.rounds=8", "output.name=other run"};
    FhConfig *a = NULL, *b = NULL;
    CHECK_OK(load(&a, "[train]\nrounds = 5\nlr = 0.1\n[fl]\niid = off\n", NULL, 0));
    CHECK_OK(load(&b, "[train]\nrounds = 5\nlr = 1e-1\n[fl]\niid = 0\n", ov_b, 3));
    if (!a || !b) goto done;
    char *diff = NULL;
    CHECK_OK(fh_config_diff(a, b, NULL, &diff));
    CHECK_MSG(diff && strcmp(diff, "train.lr: 0.1 -> 0.2; train.rounds: 5 -> 8; output.name: run -> other run") == 0,
              "%s", diff ? diff : "(null)");
    free(diff);
    const char *ignore[] = {"train.rounds", "output.name", "fl.rounds", NULL};
    CHECK_OK(fh_config_diff(a, b, ignore, &diff));
    CHECK_MSG(diff && strcmp(diff, "train.lr: 0.1 -> 0.2") == 0, "%s", diff ? diff : "(null)");
    free(diff);
    /* spellings of one value are no difference ("0.1" vs "1e-1", "off" vs "0") */
    FhConfig *c = NULL;
    CHECK_OK(load(&c, "[train]\nrounds = 5\nlr = 1e-1\n[fl]\niid = 0\n", NULL, 0));
    CHECK_OK(fh_config_diff(a, c, NULL, &diff));
    CHECK_MSG(diff == NULL, "%s", diff);
    free(diff);
    fh_config_free(&c);
done:
    fh_config_free(&a);
    fh_config_free(&b);
}

static void test_hash(void)
{
    FhConfig *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(load(&a, "[train]\nrounds = 5\n", NULL, 0));
    CHECK_OK(load(&b, "[train]\nrounds = 05\nlr = 1e-1\noptimizer = sgd\n[fl]\niid = no\n", NULL, 0));
    CHECK_OK(load(&c, "[train]\nrounds = 6\n", NULL, 0));
    if (a && b && c) {
        CHECK(fh_config_hash(a) == fh_config_hash(b)); /* same values, other spellings, defaults given */
        CHECK(fh_config_hash(a) != fh_config_hash(c));
        /* pinned (checked against a Python FNV-1a of the canonical lines): run identities must not
         * change with a refactoring */
        CHECK_MSG(fh_config_hash(a) == UINT64_C(0x4a7f0e70ee9908b8), "hash %016llx",
                  (unsigned long long)fh_config_hash(a));
    }
    fh_config_free(&a);
    fh_config_free(&b);
    fh_config_free(&c);
}

static void test_nearest_name(void)
{
    const char *const names[] = {"lr", "rounds", "learning_rate", "momentum", "clients", "client_frac"};
    const int n = 6;
    const char *r;
    CHECK((r = fh_nearest_name("learning_rat", names, n)) && strcmp(r, "learning_rate") == 0);
    CHECK((r = fh_nearest_name("lerning_rate", names, n)) && strcmp(r, "learning_rate") == 0);
    CHECK((r = fh_nearest_name("lernng_rat", names, n)) && strcmp(r, "learning_rate") == 0); /* 3 <= 10/3 */
    CHECK((r = fh_nearest_name("rouns", names, n)) && strcmp(r, "rounds") == 0);
    CHECK((r = fh_nearest_name("momnetum", names, n)) && strcmp(r, "momentum") == 0); /* one transposition */
    CHECK((r = fh_nearest_name("ROUNDS", names, n)) && strcmp(r, "rounds") == 0);     /* case is ignored */
    CHECK((r = fh_nearest_name("rl", names, n)) && strcmp(r, "lr") == 0);
    CHECK((r = fh_nearest_name("client", names, n)) && strcmp(r, "clients") == 0);
    CHECK(fh_nearest_name("xyz", names, n) == NULL);
    CHECK(fh_nearest_name("learning", names, n) == NULL); /* 5 edits from learning_rate: over 8/3 -> 2 */
    /* short words: within 2, but never a replacement of the whole word */
    const char *const x[] = {"x"};
    CHECK(fh_nearest_name("ab", x, 1) == NULL);
    const char *const tie[] = {"sgd", "sgx"};
    CHECK((r = fh_nearest_name("sgz", tie, 2)) && strcmp(r, "sgd") == 0); /* ties: the earlier */
    CHECK(fh_nearest_name("lr", names, 0) == NULL);
}

/* fh_config_print_help's text of the schema keys[n] (free() it; NULL when it cannot be written) */
static char *help_text(const FhConfigKey *keys, int n)
{
    char *help = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&help, &size);
    if (!f) return NULL;
    fh_config_print_help(f, keys, n);
    fclose(f);
    return help;
}

static void test_help(void)
{
    char *text = help_text(schema, NKEYS);
    CHECK(text != NULL);
    if (!text) return;
    for (int k = 0; k < NKEYS; k++) {
        char sec[32];
        snprintf(sec, sizeof sec, "[%s]\n", schema[k].section);
        CHECK_MSG(strstr(text, sec) && strstr(text, schema[k].key) && strstr(text, schema[k].help), "%s.%s",
                  schema[k].section, schema[k].key);
    }
    /* one header per section, in order of first appearance, though "seed" comes after [fl] in the table */
    int n_train = 0;
    for (const char *p = text; (p = strstr(p, "[train]")); p++) n_train++;
    CHECK(n_train == 1);
    const char *fl = strstr(text, "[fl]"), *seed = strstr(text, "seed");
    CHECK(fl && seed && seed < fl);
    CHECK(strstr(text, "rounds") && strstr(strstr(text, "rounds"), "required"));
    CHECK(strstr(text, "one of sgd|adam|adamw") != NULL);
    CHECK(strstr(text, "in [0, 1e+06]") != NULL);
    CHECK(strstr(text, "default 0.1") != NULL);
    CHECK(strstr(text, "default \"\"") != NULL);
    free(text);
}

static void test_schema_errors(void)
{
    FhConfig *c = NULL;
    const FhConfigKey dup[] = {{.section = "a", .key = "k", .type = FH_CFG_INT, .def.i = 1},
                               {.section = "a", .key = "k", .type = FH_CFG_INT, .def.i = 2}};
    CHECK(fh_config_load_text(&c, dup, 2, "", NULL, NULL, 0) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "config schema: [a] k is listed twice") != NULL);
    const FhConfigKey bad_default[] = {{.section = "a", .key = "k", .type = FH_CFG_INT, .def.i = 7, .hi = 5}};
    CHECK(fh_config_load_text(&c, bad_default, 1, "", NULL, NULL, 0) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "config schema: default of [a] k = 7: must be in [0, 5]") != NULL);
    const FhConfigKey bad_choices[] = {{.section = "a", .key = "k", .type = FH_CFG_CHOICE, .def.s = "x", .choices = "x||y"}};
    CHECK(fh_config_load_text(&c, bad_choices, 1, "", NULL, NULL, 0) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "choices 'x||y'") != NULL);
    const FhConfigKey bad_name[] = {{.section = "a", .key = "k.x", .type = FH_CFG_INT, .def.i = 1}};
    CHECK(fh_config_load_text(&c, bad_name, 1, "", NULL, NULL, 0) == FH_ERR_USAGE);
    /* a field that cannot hold the key: an int for an unbounded integer, a double for a string */
    typedef struct {
        int small;
        double number;
    } Target;
    const FhConfigKey wide[] = {{.section = "a", .key = "k", .type = FH_CFG_INT, FH_CONFIG_AT(Target, small)}};
    CHECK(fh_config_load_text(&c, wide, 1, "", NULL, NULL, 0) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "config schema: [a] k: its field") != NULL);
    const FhConfigKey text[] = {{.section = "a", .key = "k", .type = FH_CFG_STRING, FH_CONFIG_AT(Target, number)}};
    CHECK(fh_config_load_text(&c, text, 1, "", NULL, NULL, 0) == FH_ERR_USAGE);
    /* a former name that a key of its section has now would read two ways */
    const FhConfigKey was_taken[] = {{.section = "a", .key = "k", .type = FH_CFG_INT, .was = "j"},
                                     {.section = "a", .key = "j", .type = FH_CFG_INT}};
    CHECK(fh_config_load_text(&c, was_taken, 2, "", NULL, NULL, 0) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "config schema: [a] k: former name 'j'") != NULL);
    CHECK(c == NULL);
}

/* a former name (.was): a saved text reads it as the key's name, in the key's section only; a user's text is told
 * the new name */
static void test_former_names(void)
{
    const FhConfigKey schema[] = {{.section = "a", .key = "new_name", .type = FH_CFG_INT, .was = "old"},
                                  {.section = "b", .key = "old", .type = FH_CFG_INT}};
    char *text = NULL;
    CHECK_OK(fh_config_text_upgrade(schema, 2, "[b]\nold = 1\n[a]\n  old = 2 ; x\nold_x = 3\nold=4", &text));
    CHECK(text && !strcmp(text, "[b]\nold = 1\n[a]\n  new_name = 2 ; x\nold_x = 3\nnew_name=4"));
    free(text);
    CHECK_OK(fh_config_text_upgrade(schema, 2, "", &text));
    CHECK(text && !strcmp(text, ""));
    free(text);
    FhConfig *c = NULL;
    CHECK(fh_config_load_text(&c, schema, 2, "[a]\nold = 2\n", "cfg.ini", NULL, 0) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "unknown key 'old' in [a]; did you mean 'new_name'?") != NULL);
}

/* A key retyped from a float to an int, or from the choice false|true to a bool, keeps its hash (run identity) and
 * reads the configs written before; a bool lands as 0/1 in an int; an int's range is shown in digits. */
static void test_retyped_keys(void)
{
    typedef struct {
        int proj_dim, cluster;
    } Target;
    const FhConfigKey before[] = {
        {.section = "algo", .key = "proj_dim", .type = FH_CFG_FLOAT, .def.f = 0, .lo = 0, .hi = 1e9},
        {.section = "algo", .key = "cluster", .type = FH_CFG_CHOICE, .def.s = "false", .choices = "false|true"},
    };
    const FhConfigKey after[] = {
        {.section = "algo", .key = "proj_dim", .type = FH_CFG_INT, .def.i = 0, .lo = 0, .hi = 1e9,
         FH_CONFIG_AT(Target, proj_dim)},
        {.section = "algo", .key = "cluster", .type = FH_CFG_BOOL, .def.b = 0, FH_CONFIG_AT(Target, cluster)},
    };
    const char *texts[] = {"", "[algo]\nproj_dim = 64\ncluster = true\n", "[algo]\nproj_dim = 64.0\ncluster = false\n",
                           "[algo]\nproj_dim = 1e2\n"};
    for (int i = 0; i < 4; i++) {
        FhConfig *a = NULL, *b = NULL;
        CHECK_OK(fh_config_load_text(&a, before, 2, texts[i], "old", NULL, 0));
        CHECK_OK(fh_config_load_text(&b, after, 2, texts[i], "new", NULL, 0));
        if (a && b) CHECK_MSG(fh_config_hash(a) == fh_config_hash(b), "hash of '%s' changed", texts[i]);
        if (b && i == 1) {
            Target got = {0};
            fh_config_land(b, NULL, &got);
            CHECK(got.proj_dim == 64 && got.cluster == 1);
        }
        fh_config_free(&a);
        fh_config_free(&b);
    }
    FhConfig *c = NULL;
    CHECK(fh_config_load_text(&c, after, 2, "[algo]\nproj_dim = 2.5\n", "new", NULL, 0) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "[algo] proj_dim = 2.5: not an integer") != NULL);
    CHECK(fh_config_load_text(&c, after, 2, "[algo]\ncluster = maybe\n", "new", NULL, 0) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "[algo] cluster = maybe: must be true or false") != NULL);
    fh_error_clear();
    char *help = help_text(after, 2);
    CHECK(help && strstr(help, "in [0, 1000000000]") && strstr(help, "true|false"));
    free(help);
}

/* typed defaults shown as the shortest decimal that reads back; open range ends; values landing in a struct */
static void test_typed_schema(void)
{
    typedef struct {
        int rounds;
        int64_t seed;
        float scale;
        double lr, mu;
        const char *name;
    } Target;
    const FhConfigKey keys[] = {
        {.section = "t", .key = "rounds", .type = FH_CFG_INT, .def.i = 3, .lo = 1, .hi = 100, FH_CONFIG_AT(Target, rounds)},
        {.section = "t", .key = "seed", .type = FH_CFG_INT, .def.i = -5, FH_CONFIG_AT(Target, seed)},
        {.section = "t", .key = "scale", .type = FH_CFG_FLOAT, .def.f = 4.0 / 3, .lo = 0, .hi = 2, FH_CONFIG_AT(Target, scale)},
        {.section = "t", .key = "lr", .type = FH_CFG_FLOAT, .def.f = 1e-8, .lo = 0, .hi = 1, .lo_open = 1,
         FH_CONFIG_AT(Target, lr)},
        {.section = "t", .key = "mu", .type = FH_CFG_FLOAT, .def.f = 1e-3, .lo = 0, .hi = 1000, .hi_open = 1,
         FH_CONFIG_AT(Target, mu)},
        {.section = "t", .key = "name", .type = FH_CFG_STRING, .def.s = "run", FH_CONFIG_AT(Target, name)},
        {.section = "t", .key = "tol", .type = FH_CFG_FLOAT, .def.f = 0.05},
    };
    const char *shown[] = {"3", "-5", "1.3333333333333333", "1e-8", "1e-3", "run", "0.05"};
    for (int k = 0; k < 7; k++) {
        char text[64];
        fh_config_default_text(&keys[k], text, sizeof text);
        CHECK_MSG(!strcmp(text, shown[k]), "%s: %s, want %s", keys[k].key, text, shown[k]);
    }
    FhConfig *c = NULL;
    CHECK(fh_config_load_text(&c, keys, 7, "[t]\nlr = 0\n", "t", NULL, 0) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "lr = 0: must be in (0, 1]") != NULL);
    CHECK(fh_config_load_text(&c, keys, 7, "[t]\nmu = 1000\n", "t", NULL, 0) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "mu = 1000: must be in [0, 1000)") != NULL);
    char *over[] = {"t.rounds=7", "t.name=x"};
    CHECK_OK(fh_config_load_text(&c, keys, 7, "[t]\nmu = 999.5\n", "t", over, 2));
    if (!c) return;
    Target got;
    memset(&got, 0, sizeof got);
    fh_config_land(c, NULL, &got);
    CHECK(got.rounds == 7 && got.seed == -5 && got.scale == (float)(4.0 / 3) && got.lr == 1e-8 && got.mu == 999.5);
    CHECK(got.name && !strcmp(got.name, "x"));
    char *resolved = NULL;
    CHECK_OK(fh_config_to_text(c, &resolved));
    CHECK(resolved && strstr(resolved, "lr = 1e-8 ; default\n") && strstr(resolved, "scale = 1.3333333333333333 ; default"));
    free(resolved);
    char *help = help_text(keys, 7);
    CHECK(help && strstr(help, "in (0, 1]") && strstr(help, "in [0, 1000)") && strstr(help, "default 1e-3"));
    free(help);
    fh_config_free(&c);
    /* key=value arguments of a command: the schema's one section, no section in the key */
    char *args[] = {"rounds=9", "lr=0.5"};
    CHECK_OK(fh_config_load_args(&c, keys, 7, args, 2, NULL));
    if (c) CHECK(fh_config_int(c, "t", "rounds") == 9 && fh_config_float(c, "t", "lr") == 0.5);
    fh_config_free(&c);
    char *typo[] = {"rouns=9"}, *dotted[] = {"t.rounds=9"}, *bare[] = {"rounds"};
    CHECK(fh_config_load_args(&c, keys, 7, typo, 1, NULL) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "unknown key 'rouns'; did you mean 'rounds'?") != NULL);
    CHECK(fh_config_load_args(&c, keys, 7, dotted, 1, NULL) == FH_ERR_USAGE);
    CHECK(fh_config_load_args(&c, keys, 7, bare, 1, NULL) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "'rounds' is not key=value") != NULL && c == NULL);
}

/* a failing load leaves the error chain with the public function's frame, for the bug-report trace */
static void test_error_chain(void)
{
    const char *path = tmp_path("bad.ini");
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    tmp_record(path);
    fputs("[train]\nrounds = 2\nlr = fast\n", f);
    fclose(f);
    FhConfig *c = NULL;
    CHECK(fh_config_load_file(&c, schema, NKEYS, path, NULL, 0) == FH_ERR_USAGE);
    const char *msg = fh_error_message();
    char want[700];
    snprintf(want, sizeof want, "%s:3: [train] lr = fast: not a number", path);
    CHECK_MSG(strncmp(msg, want, strlen(want)) == 0, "%s", msg); /* the message comes first */
    CHECK(strstr(msg, "\n  at ") != NULL);
}

/* The reader without a schema (fh_ini_parse): every entry in order, raw (quotes kept, for grid lists) and
 * value (unquoted), comments cut outside quotes only; errors name the source and line. */
static void test_ini_reader(void)
{
    FhIni ini;
    CHECK_OK(fh_ini_parse(&ini, "\xEF\xBB\xBF; head\n[a]\nk = v ; c\nq: \"x ; y\"\n[b]\nk=2\n"
                                "list = \"a, b\", c ; both\nc = \"x\"# after\nopen = \"x ; y\n", "t"));
    CHECK(ini.n == 6);
    CHECK(!strcmp(fh_ini_get(&ini, "a", "k"), "v"));
    CHECK(!strcmp(fh_ini_get(&ini, "a", "q"), "x ; y"));
    CHECK(ini.n > 1 && !strcmp(ini.entries[1].raw, "\"x ; y\"") && ini.entries[1].line == 4);
    CHECK(!strcmp(fh_ini_get(&ini, "b", "k"), "2"));
    CHECK(fh_ini_get(&ini, "b", "q") == NULL);
    CHECK(ini.n > 3 && !strcmp(ini.entries[3].raw, "\"a, b\", c") && !strcmp(ini.entries[3].value, "\"a, b\", c"));
    CHECK(!strcmp(fh_ini_get(&ini, "b", "c"), "x"));
    CHECK(!strcmp(fh_ini_get(&ini, "b", "open"), "\"x ; y")); /* an open quote runs to the end of the line */
    fh_ini_free(&ini);
    const char *bad[][2] = {
        { "k = v\n", "t:1: key 'k' is outside any section" },
        { "[a]\nk = 1\njunk\n", "t:3: syntax error" },
        { "[a\nk = 1\n", "t:1: syntax error" },
        { "[a] x\nk = 1\n", "t:1: syntax error (text after the section header)" },
        { "[a]\n= 1\n", "t:2: syntax error (no key name" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fh_error_clear();
        CHECK_MSG(fh_ini_parse(&ini, bad[i][0], "t") == FH_ERR_USAGE && ini.n == 0 && !ini.entries, "%s", bad[i][0]);
        CHECK_MSG(strstr(fh_error_message(), bad[i][1]) != NULL, "%s", fh_error_message());
    }
    fh_error_clear();
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    if (tmp_init("config") != 0) return 1;
    RUN(test_defaults);
    RUN(test_file_values);
    RUN(test_overrides);
    RUN(test_missing_file);
    RUN(test_syntax_errors);
    RUN(test_unknown_section);
    RUN(test_unknown_key);
    RUN(test_duplicate_key);
    RUN(test_int_values);
    RUN(test_float_values);
    RUN(test_bool_values);
    RUN(test_choice_values);
    RUN(test_required_missing);
    RUN(test_override_errors);
    RUN(test_value_syntax);
    RUN(test_to_text_round_trip);
    RUN(test_diff);
    RUN(test_hash);
    RUN(test_nearest_name);
    RUN(test_help);
    RUN(test_schema_errors);
    RUN(test_retyped_keys);
    RUN(test_former_names);
    RUN(test_typed_schema);
    RUN(test_error_chain);
    RUN(test_ini_reader);
    tmp_cleanup();
    return test_summary();
}
