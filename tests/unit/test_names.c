/* Unit tests for src/core/names.c: the plain-name check every command applies to the names it turns
 * into folders, and the shell quoting of the paths printed in "Resume with" lines (checked by letting
 * /bin/sh read the quoted word back).
 *
 * Run all:  build/tests/test_names            Run one:  build/tests/test_names test_shell_quote_round_trip */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

static void test_plain_names(void)
{
    const char *good[] = { "a", "lr0.05", "rho-0_seed-1", "..a", "a..", ".hidden", "a b" };
    for (int i = 0; i < 7; i++) CHECK_MSG(fh_check_plain_name(good[i], "[output] name") == FH_OK, "'%s'", good[i]);
    const char *bad[] = { "", ".", "..", "a/b", "/", "../x", "x/" };
    for (int i = 0; i < 7; i++) {
        fh_error_clear();
        CHECK_MSG(fh_check_plain_name(bad[i], "[output] name") == FH_ERR_USAGE, "'%s'", bad[i]);
        char want[64];
        snprintf(want, sizeof want, "[output] name = '%s': must be a plain name", bad[i]);
        CHECK_MSG(strstr(fh_error_message(), want) != NULL, "%s", fh_error_message());
    }
}

static void test_shell_quote_plain(void)
{
    char out[64];
    CHECK(!strcmp(fh_shell_quote("outputs/demo-fedavg", out, sizeof out), "outputs/demo-fedavg"));
    CHECK(!strcmp(fh_shell_quote("outputs/a b;touch X", out, sizeof out), "'outputs/a b;touch X'"));
    CHECK(!strcmp(fh_shell_quote("it's", out, sizeof out), "'it'\\''s'"));
    CHECK(!strcmp(fh_shell_quote("", out, sizeof out), "''"));
    CHECK(!strcmp(fh_shell_quote("$HOME", out, sizeof out), "'$HOME'"));
}

/* sh reads every quoted word back as the original text, whatever it holds */
static void test_shell_quote_round_trip(void)
{
    const char *words[] = { "outputs/a b;touch X", "a'b", "''", "x$(id)`id`", "tab\there", "new\nline", "*?[a]",
                            "a\\b", "\"q\"", "~user", "-n", "#c", "plain/path-1.0" };
    const int n = (int)(sizeof words / sizeof words[0]);
    for (int i = 0; i < n; i++) {
        char quoted[256], cmd[512], back[256];
        fh_shell_quote(words[i], quoted, sizeof quoted);
        snprintf(cmd, sizeof cmd, "printf '%%s' %s", quoted);
        FILE *p = popen(cmd, "r");
        CHECK(p != NULL);
        if (!p) continue;
        size_t got = fread(back, 1, sizeof back - 1, p);
        back[got] = '\0';
        int rc = pclose(p);
        CHECK_MSG(rc == 0 && !strcmp(back, words[i]), "word %d: quoted %s, read back '%s' (exit %d)", i, quoted, back,
                  rc);
    }
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_plain_names);
    RUN(test_shell_quote_plain);
    RUN(test_shell_quote_round_trip);
    return test_summary();
}
