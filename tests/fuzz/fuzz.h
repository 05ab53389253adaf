/* Shared pieces of the libFuzzer targets (tests/fuzz/fuzz_*.c).
 *
 * The readers under test take paths (fopen, gzopen, H5Fopen through fh_h5_open), so each input is
 * written to a file in a private folder on tmpfs (/dev/shm) and read back from there: nothing touches
 * the disk, and the code path is the one users run. An error status is the expected answer to most
 * inputs; a crash, a sanitizer report, a leak or a failed property (abort) is a finding. */
#ifndef FEDHET_FUZZ_H
#define FEDHET_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fedhet/core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char fuzz_dir[256];

static inline void fuzz_remove_dir(void)
{
    if (!fuzz_dir[0]) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir);
}

/* The process's folder for input files, made once (tmpfs when there is one). */
static inline const char *fuzz_tmp_dir(void)
{
    if (fuzz_dir[0]) return fuzz_dir;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/fedhet-fuzz-%ld", base, (long)getpid());
    if (mkdir(fuzz_dir, 0700) != 0 && access(fuzz_dir, W_OK) != 0) {
        perror(fuzz_dir);
        abort();
    }
    atexit(fuzz_remove_dir);
    return fuzz_dir;
}

/* fuzz_tmp_dir()/name */
static inline void fuzz_path(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", fuzz_tmp_dir(), name);
}

/* Writes bytes to path (replacing it); a failure here is the harness's, so it aborts loudly. */
static inline void fuzz_write(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* A NUL-terminated copy of the input, for the text parsers (free() it). */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *t = malloc(size + 1);
    if (!t) abort();
    memcpy(t, data, size);
    t[size] = '\0';
    return t;
}

/* A property that must hold for every input: report it and abort, so libFuzzer keeps the input. */
#define FUZZ_ASSERT(cond, ...)                                                                   \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "fuzz property failed at %s:%d: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fprintf(stderr, "\n");                                                              \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

#endif
