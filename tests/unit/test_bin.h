/* Running the real bin/fedhet from a test: popen with stderr folded into stdout, the exit code, whether
 * it crashed, and a check of the output. Include after test.h; define _POSIX_C_SOURCE 200809L first. */
#ifndef FEDHET_TEST_BIN_H
#define FEDHET_TEST_BIN_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char fedhet_bin[1024];

typedef struct {
    int code;    /* exit code, or -1 when it could not be run / did not exit normally */
    int crashed; /* killed by a signal (directly or as reported by the shell: 128 + signal) */
    char cmd[5200];
    char out[65536];
} RunResult;

/* Finds bin/fedhet in the working directory (the repository root), else relative to this program, and
 * sets the children's environment (one BLAS thread, MPI allowed as root). Returns 0, or prints why not and
 * a failing summary line and returns 1. */
static inline int test_bin_locate(const char *argv0)
{
    snprintf(fedhet_bin, sizeof fedhet_bin, "bin/fedhet");
    if (access(fedhet_bin, X_OK) != 0 && argv0 && strchr(argv0, '/')) {
        char dir[900];
        snprintf(dir, sizeof dir, "%s", argv0);
        *strrchr(dir, '/') = '\0';
        snprintf(fedhet_bin, sizeof fedhet_bin, "%s/../../bin/fedhet", dir);
    }
    if (access(fedhet_bin, X_OK) != 0 || strchr(fedhet_bin, '\'')) {
        printf("  bin/fedhet not found (looked for bin/fedhet in the working directory and for %s): run "
               "'make bin/fedhet' and start the tests from the repository root\n",
               fedhet_bin);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    return 0;
}

/* runs `ENV bin/fedhet ARGS 2>&1`, ARGS from a printf format; paths in ARGS are single-quoted by the
 * caller and come from mkdtemp (no quotes in them) */
static RunResult *run_fedhet_env(const char *env, const char *fmt, ...) FH_PRINTF(2, 3);
static RunResult *run_fedhet_env(const char *env, const char *fmt, ...)
{
    static RunResult r;
    memset(&r, 0, sizeof r);
    r.code = -1;
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(r.cmd, sizeof r.cmd, "%s%s'%s' %s 2>&1", env ? env : "", env ? " " : "", fedhet_bin, args);
    FILE *p = popen(r.cmd, "r");
    if (!p) {
        printf("    cannot run %s\n", r.cmd);
        return &r;
    }
    size_t n = 0, got;
    char sink[4096];
    while ((got = fread(n < sizeof r.out - 1 ? r.out + n : sink, 1,
                        n < sizeof r.out - 1 ? sizeof r.out - 1 - n : sizeof sink, p)) > 0)
        if (n < sizeof r.out - 1) n += got;
    r.out[n] = '\0';
    int status = pclose(p);
    if (status == -1) return &r;
    if (WIFSIGNALED(status)) {
        r.crashed = 1;
    } else if (WIFEXITED(status)) {
        r.code = WEXITSTATUS(status);
        if (r.code > 128) r.crashed = 1;
    }
    return &r;
}

#define run_fedhet(...) run_fedhet_env(NULL, __VA_ARGS__)

/* the exit code and that the output contains every needle */
#define EXPECT(r, expect_code, ...)                                                                             \
    do {                                                                                                        \
        RunResult *r_ = (r);                                                                                    \
        const char *needles_[] = {__VA_ARGS__, NULL};                                                           \
        CHECK_MSG(!r_->crashed, "%s crashed (exit %d):\n%s", r_->cmd, r_->code, r_->out);                       \
        CHECK_MSG(r_->code == (expect_code), "%s: exit %d, expected %d; output:\n%s", r_->cmd, r_->code,        \
                  expect_code, r_->out);                                                                        \
        for (const char **n_ = needles_; *n_; n_++)                                                             \
            CHECK_MSG(strstr(r_->out, *n_) != NULL, "%s: output lacks '%s':\n%s", r_->cmd, *n_, r_->out);       \
    } while (0)

#endif
