/* The error chain: one message per failure plus a frame per FH_CHECK on the way up. */
#include "fedhet/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char error_text[FH_ERROR_CAPACITY];
static _Thread_local size_t error_len;

static void error_append(const char *fmt, ...) FH_PRINTF(1, 2);
static void error_append(const char *fmt, ...)
{
    if (error_len >= FH_ERROR_CAPACITY - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(error_text + error_len, FH_ERROR_CAPACITY - error_len, fmt, ap);
    va_end(ap);
    if (n > 0) error_len += (size_t)n;
    if (error_len > FH_ERROR_CAPACITY - 1) error_len = FH_ERROR_CAPACITY - 1;
}

int fh_error_raise(int status, const char *file, int line, const char *fmt, ...)
{
    error_len = 0;
    error_text[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(error_text, FH_ERROR_CAPACITY, fmt, ap);
    va_end(ap);
    error_len = n > 0 ? (size_t)n : 0;
    if (error_len > FH_ERROR_CAPACITY - 1) error_len = FH_ERROR_CAPACITY - 1;
    error_append("\n  at %s:%d", file, line);
    return status;
}

int fh_error_trace(int status, const char *file, int line, const char *expr)
{
    if (error_len == 0) error_append("%s (no message recorded)", fh_status_name(status));
    error_append("\n  at %s:%d (%s)", file, line, expr);
    return status;
}

const char *fh_error_message(void) { return error_text; }

int fh_error_adopt(int status, const char *chain)
{
    error_len = 0;
    error_text[0] = '\0';
    error_append("%s", chain);
    return status;
}

void fh_error_clear(void)
{
    error_len = 0;
    error_text[0] = '\0';
}

/* The exit codes of every command (docs/usage.md, The executable). */
static const FhExitCode exit_codes[] = {
    { "0", "ok (also a run or grid stopped by SIGTERM, SIGUSR1 or SIGINT after its checkpoint)" },
    { "1", "usage or config: an option, key or value; a run folder in use or a symbolic link" },
    { "2", "input data: an input file or folder that is missing, unreadable, damaged or of the wrong kind" },
    { "3", "numerical divergence (the last good checkpoint is kept)" },
    { "4", "I/O: a write that failed (full disk, file-size limit), a damaged checkpoint or run.h5" },
    { "5", "MPI" },
    { "6", "out of memory" },
    { "10+N", "fedhet grid: N members failed (N at most 100)" },
};
/* the table's codes are the statuses' values */
_Static_assert(FH_OK == 0 && FH_ERR_USAGE == 1 && FH_ERR_DATA == 2 && FH_ERR_NUMERIC == 3 && FH_ERR_IO == 4 &&
                   FH_ERR_MPI == 5 && FH_ERR_MEMORY == 6 && FH_EXIT_GRID_FAILED == 10,
               "exit_codes[] lists the statuses by value");

const FhExitCode *fh_exit_codes(int *n)
{
    *n = (int)(sizeof exit_codes / sizeof exit_codes[0]);
    return exit_codes;
}

void fh_exit_codes_print(FILE *out)
{
    for (size_t i = 0; i < sizeof exit_codes / sizeof exit_codes[0]; i++)
        fprintf(out, "  %-6s %s\n", exit_codes[i].code, exit_codes[i].meaning);
}

static int is_grid_failure(int status) { return status > FH_EXIT_GRID_FAILED && status <= FH_EXIT_GRID_FAILED + 100; }

/* a bug to report: no message, an MPI failure, or a status that is no exit code */
static int error_is_internal(int status, const char *chain)
{
    const int user = (status >= FH_ERR_USAGE && status <= FH_ERR_MEMORY && status != FH_ERR_MPI) || is_grid_failure(status);
    return !user || strstr(chain, "(no message recorded)") != NULL;
}

static int trace_wanted(void)
{
    const char *t = getenv("FEDHET_TRACE");
    return t && *t && strcmp(t, "0") != 0;
}

void fh_error_format(int status, const char *chain, char *out, size_t size)
{
    if (size == 0) return;
    if (error_is_internal(status, chain) || trace_wanted()) {
        snprintf(out, size, "%s", chain);
        return;
    }
    /* every line but the frames: a chain adopted from another rank keeps its "rank N: " prefix */
    size_t used = 0;
    for (const char *line = chain; *line;) {
        size_t n = strcspn(line, "\n");
        if (strncmp(line, "  at ", 5) != 0 && used + 1 < size) {
            used += (size_t)snprintf(out + used, size - used, "%s%.*s", used ? "\n" : "", (int)n, line);
            if (used >= size) used = size - 1;
        }
        line += n;
        if (*line == '\n') line++;
    }
    out[used] = '\0';
}

const char *fh_error_text(int status)
{
    static _Thread_local char text[FH_ERROR_CAPACITY];
    fh_error_format(status, error_text, text, sizeof text);
    return text;
}

const char *fh_status_name(int status)
{
    switch (status) {
    case FH_OK: return "ok";
    case FH_ERR_USAGE: return "usage or config error";
    case FH_ERR_DATA: return "input data error";
    case FH_ERR_NUMERIC: return "numerical divergence";
    case FH_ERR_IO: return "I/O error";
    case FH_ERR_MPI: return "MPI error";
    case FH_ERR_MEMORY: return "out of memory";
    default: return is_grid_failure(status) ? "grid members failed" : "unknown error";
    }
}

int fh_calloc(void *out_ptr, size_t count, size_t size, const char *what)
{
    void **out = (void **)out_ptr;
    *out = NULL;
    if (count == 0 || size == 0) return FH_OK;
    if (count > SIZE_MAX / size)
        FH_FAIL(FH_ERR_MEMORY, "allocation of %zu x %zu bytes for %s overflows", count, size, what);
    *out = calloc(count, size);
    if (!*out)
        FH_FAIL(FH_ERR_MEMORY, "out of memory allocating %.1f MiB for %s",
                (double)count * (double)size / 1048576.0, what);
    return FH_OK;
}

int fh_alloc_aligned(void *out_ptr, size_t bytes, const char *what)
{
    void **out = (void **)out_ptr;
    *out = NULL;
    if (bytes == 0) return FH_OK;
    size_t rounded = (bytes + 63) / 64 * 64;
    *out = aligned_alloc(64, rounded);
    if (!*out) FH_FAIL(FH_ERR_MEMORY, "out of memory allocating %.1f MiB for %s", (double)bytes / 1048576.0, what);
    memset(*out, 0, rounded);
    return FH_OK;
}

void fh_free(void *ptr_to_ptr)
{
    void **p = (void **)ptr_to_ptr;
    free(*p);
    *p = NULL;
}
