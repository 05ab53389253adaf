/* What a user reads when something fails (src/core/error.c fh_error_format, printed by src/app/main.c): a
 * user's mistake (config, key, value, file, data, I/O) is one line naming it, its hint after "; "; the call
 * chain ("  at file:line" frames) is printed only for internal errors (a bug: a status passed up with no
 * message, an MPI failure) and for every error under FEDHET_TRACE=1. Exit codes stay 1 usage/config,
 * 2 input data, 4 I/O. One sample of each class through the real bin/fedhet, and the formatter alone.
 *   make bin/fedhet build/tests/test_messages && build/tests/test_messages [test_name] */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* popen, pclose, setenv, mkdtemp */
#endif

#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "test_bin.h"
#include "test_tmp.h"

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* one sample run: exit code, exactly `lines` output lines, no frame, and the needles */
#define EXPECT_LINES(r, code, lines, ...)                                                                     \
    do {                                                                                                      \
        RunResult *rr_ = (r);                                                                                 \
        EXPECT(rr_, code, __VA_ARGS__);                                                                       \
        CHECK_MSG(count_lines(rr_->out) == (lines), "%s: %d lines, expected %d:\n%s", rr_->cmd,               \
                  count_lines(rr_->out), lines, rr_->out);                                                    \
        CHECK_MSG(strstr(rr_->out, "  at src/") == NULL, "%s: a call chain for a user's mistake:\n%s",        \
                  rr_->cmd, rr_->out);                                                                        \
    } while (0)

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
    tmp_record(path);
}

/* ---- the formatter ---- */

static void test_format_user_error(void)
{
    char out[512];
    unsetenv("FEDHET_TRACE");
    fh_error_raise(FH_ERR_USAGE, "src/core/config.c", 227, "x.ini:4: unknown key 'roundz' in [fl]; did you mean 'rounds'?");
    fh_error_trace(FH_ERR_USAGE, "src/fl/run.c", 34, "fl_config_load(...)");
    fh_error_format(FH_ERR_USAGE, fh_error_message(), out, sizeof out);
    CHECK_MSG(!strcmp(out, "x.ini:4: unknown key 'roundz' in [fl]; did you mean 'rounds'?"), "got '%s'", out);
    CHECK(!strcmp(fh_error_text(FH_ERR_USAGE), out));
    /* the whole chain stays available (log.txt, bug reports) */
    CHECK(strstr(fh_error_message(), "  at src/fl/run.c:34") != NULL);
    /* a chain adopted from another rank keeps its prefix and loses its frames */
    fh_error_format(FH_ERR_DATA, "rank 2: bad label 12 in x.h5\n  at src/data/loader.c:10", out, sizeof out);
    CHECK_MSG(!strcmp(out, "rank 2: bad label 12 in x.h5"), "got '%s'", out);
    /* a message of two lines (a hint line) keeps both */
    fh_error_format(FH_ERR_IO, "cannot write x\n  hint: the disk is full\n  at src/core/files.c:3", out, sizeof out);
    CHECK_MSG(!strcmp(out, "cannot write x\n  hint: the disk is full"), "got '%s'", out);
    fh_error_clear();
}

static void test_format_internal_and_trace(void)
{
    char out[512];
    unsetenv("FEDHET_TRACE");
    /* a status passed up without a message is a bug: the chain is what a report needs */
    fh_error_clear();
    fh_error_trace(FH_ERR_IO, "src/fl/run.c", 99, "step()");
    fh_error_format(FH_ERR_IO, fh_error_message(), out, sizeof out);
    CHECK_MSG(strstr(out, "no message recorded") && strstr(out, "  at src/fl/run.c:99"), "got '%s'", out);
    /* MPI failures and statuses outside the exit codes */
    fh_error_format(FH_ERR_MPI, "MPI_Bcast failed\n  at src/fl/comm.c:5", out, sizeof out);
    CHECK_MSG(strstr(out, "  at src/fl/comm.c:5") != NULL, "got '%s'", out);
    fh_error_format(7, "odd\n  at a.c:1", out, sizeof out);
    CHECK_MSG(strstr(out, "  at a.c:1") != NULL, "got '%s'", out);
    /* FEDHET_TRACE=1 asks for the chain of any error; 0 or empty does not */
    setenv("FEDHET_TRACE", "1", 1);
    fh_error_format(FH_ERR_USAGE, "bad\n  at a.c:1", out, sizeof out);
    CHECK_MSG(!strcmp(out, "bad\n  at a.c:1"), "got '%s'", out);
    setenv("FEDHET_TRACE", "0", 1);
    fh_error_format(FH_ERR_USAGE, "bad\n  at a.c:1", out, sizeof out);
    CHECK_MSG(!strcmp(out, "bad"), "got '%s'", out);
    unsetenv("FEDHET_TRACE");
    /* a tiny buffer is cut, never overrun */
    char small[4];
    fh_error_format(FH_ERR_USAGE, "abcdef\n  at a.c:1", small, sizeof small);
    CHECK_MSG(!strcmp(small, "abc"), "got '%s'", small);
    fh_error_clear();
}

/* ---- one sample of each class through bin/fedhet ---- */

static void test_config_key_and_value(void)
{
    char ini[256], clean[256];
    snprintf(ini, sizeof ini, "%s/typo.ini", tmp_root);
    write_file(ini, "[data]\npath = p.h5\n[fl]\nroundz = 3\n");
    snprintf(clean, sizeof clean, "%s/clean.ini", tmp_root);
    write_file(clean, "[data]\npath = p.h5\n");
    /* a mistyped key in the file: its line, the key, the nearest key */
    EXPECT_LINES(run_fedhet("run '%s'", ini), 1, 1, "typo.ini:4: unknown key 'roundz' in [fl]",
                 "did you mean 'rounds'?");
    /* the same on the command line */
    EXPECT_LINES(run_fedhet("run '%s' fl.roundz=3", clean), 1, 1, "command line", "did you mean 'rounds'?");
    /* a bad value */
    EXPECT_LINES(run_fedhet("run '%s' fl.rounds=abc", clean), 1, 1, "not an integer");
    /* FEDHET_TRACE=1: the call chain too */
    RunResult *r = run_fedhet_env("FEDHET_TRACE=1", "run '%s'", ini);
    EXPECT(r, 1, "did you mean 'rounds'?", "  at src/core/config.c:");
}

static void test_usage_file_data_io(void)
{
    /* usage: an unknown model */
    EXPECT_LINES(run_fedhet("inspect --model nope"), 1, 1, "unknown model");
    /* a file that is not there */
    EXPECT_LINES(run_fedhet("run '%s/absent.ini'", tmp_root), 1, 1, "absent.ini", "cannot open");
    /* input data: an IDX file with a wrong magic (exit 2) */
    char dir[256], path[320];
    snprintf(dir, sizeof dir, "%s/idx", tmp_root);
    CHECK(mkdir(dir, 0700) == 0);
    tmp_record(dir);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    write_file(path, "xxxxxxxxxxxxxxxxxxxxxxxx");
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", dir);
    write_file(path, "xxxxxxxxxxxxxxxxxxxxxxxx");
    EXPECT_LINES(run_fedhet("partition '%s' '%s/o.h5' format=idx", dir, tmp_root), 2, 1, "wrong magic number");
    /* I/O: a report of a folder that does not exist (exit 1: a wrong argument) and a checkpoint that is
     * not HDF5 (exit 4) */
    EXPECT_LINES(run_fedhet("report '%s/nothing'", tmp_root), 1, 1, "no such folder");
    snprintf(path, sizeof path, "%s/run.h5", tmp_root);
    write_file(path, "not hdf5");
    RunResult *r = run_fedhet("landscape '%s'", path);
    CHECK_MSG(r->code == 1 || r->code == 4, "%s: exit %d:\n%s", r->cmd, r->code, r->out);
    CHECK_MSG(strstr(r->out, "  at src/") == NULL, "%s: a call chain for a user's mistake:\n%s", r->cmd, r->out);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    /* bin/fedhet of a sanitized build: Open MPI's allocations at MPI_Init are never freed, and leak reports
     * would add lines to the one-line messages counted here (tests/mpi/lib.sh does the same for its runs) */
    setenv("ASAN_OPTIONS", "detect_leaks=0", 0);
    if (test_bin_locate(argv[0]) != 0) return 1;
    if (tmp_init("messages") != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN(test_format_user_error);
    RUN(test_format_internal_and_trace);
    RUN(test_config_key_and_value);
    RUN(test_usage_file_data_io);
    tmp_cleanup();
    return test_summary();
}
