/* A tiny test harness: each tests/unit/test_*.c is one program whose main RUNs its tests and
 * returns test_summary(); it prints "N passed, N failed, N skipped" and tests/run.sh adds the files up.
 * A test fails when any CHECK in it fails; CHECK prints file:line and carries on. A test that cannot run
 * here calls TEST_SKIP: it counts as skipped (never as passed), and as failed when CI is set. */
#ifndef FEDHET_TEST_H
#define FEDHET_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"

static int test_n_passed, test_n_failed, test_n_skipped, test_current_failed, test_current_skipped;
static const char *test_only; /* argv[1]: run only the test of that name */

/* free(p) for each pointer given */
#define FREE_ALL(...)                                                                \
    do {                                                                             \
        void *all_[] = {__VA_ARGS__};                                                \
        for (size_t i_ = 0; i_ < sizeof all_ / sizeof all_[0]; i_++) free(all_[i_]); \
    } while (0)

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            printf("    CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            test_current_failed = 1;                                                     \
        }                                                                                \
    } while (0)

#define CHECK_MSG(cond, ...)                                                             \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            printf("    CHECK failed at %s:%d: %s: ", __FILE__, __LINE__, #cond);        \
            printf(__VA_ARGS__);                                                         \
            printf("\n");                                                                \
            test_current_failed = 1;                                                     \
        }                                                                                \
    } while (0)

/* a call returning an fh status must succeed; prints the error chain otherwise */
#define CHECK_OK(call)                                                                   \
    do {                                                                                 \
        int check_status_ = (call);                                                      \
        if (check_status_ != FH_OK) {                                                    \
            printf("    CHECK_OK failed at %s:%d: %s -> %d\n%s\n", __FILE__, __LINE__, #call, \
                   check_status_, fh_error_message());                                   \
            test_current_failed = 1;                                                     \
        }                                                                                \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                            \
    do {                                                                                 \
        double check_a_ = (double)(a), check_b_ = (double)(b);                           \
        if (!(fabs(check_a_ - check_b_) <= (tol))) {                                     \
            printf("    CHECK_NEAR failed at %s:%d: %s = %.9g, %s = %.9g, tol %.3g\n",   \
                   __FILE__, __LINE__, #a, check_a_, #b, check_b_, (double)(tol));       \
            test_current_failed = 1;                                                     \
        }                                                                                \
    } while (0)

/* the test cannot run here (say why, printf-style); the caller returns */
#define TEST_SKIP(...)                                                                   \
    do {                                                                                 \
        printf("(cannot run: ");                                                         \
        printf(__VA_ARGS__);                                                             \
        printf("%s) ", getenv("CI") ? "; CI is set, so this is a failure" : "");         \
        if (getenv("CI")) test_current_failed = 1;                                       \
        else test_current_skipped = 1;                                                   \
    } while (0)

static void test_run(const char *name, void (*fn)(void))
{
    if (test_only && strcmp(test_only, name) != 0) return;
    test_current_failed = test_current_skipped = 0;
    fh_error_clear();
    printf("  %-44s ", name);
    fflush(stdout);
    fn();
    if (test_current_failed) {
        test_n_failed++;
        printf("  %-44s FAIL\n", name);
    } else if (test_current_skipped) {
        test_n_skipped++;
        printf("SKIP\n");
    } else {
        test_n_passed++;
        printf("ok\n");
    }
    fflush(stdout);
}

#define TEST_MAIN_BEGIN(argc, argv) \
    do {                            \
        if ((argc) > 1) test_only = (argv)[1]; \
    } while (0)
#define RUN(fn) test_run(#fn, fn)

static int test_summary(void)
{
    printf("%d passed, %d failed, %d skipped\n", test_n_passed, test_n_failed, test_n_skipped);
    return test_n_failed ? 1 : 0;
}

#endif
