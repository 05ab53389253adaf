/* Rank-prefixed logging: every line says which rank wrote it, so interleaved MPI output stays readable. */
#define _POSIX_C_SOURCE 200809L
#include "fedhet/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static int log_rank = -1;
static int log_level = FH_LOG_INFO;
static FILE *log_copy;

void fh_log_set_file(FILE *copy) { log_copy = copy; }

void fh_log_set_rank(int rank) { log_rank = rank; }
void fh_log_set_level(int level) { log_level = level; }
int fh_log_level(void) { return log_level; }

static void log_write(FILE *stream, const char *tag, const char *fmt, va_list ap)
{
    char line[2048];
    int n = 0;
    if (log_rank >= 0) n = snprintf(line, sizeof line, "[rank %d] %s", log_rank, tag);
    else n = snprintf(line, sizeof line, "%s", tag);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    /* one fputs per line keeps lines from different ranks whole */
    fputs(line, stream);
    fputc('\n', stream);
    fflush(stream);
    if (log_copy) {
        fputs(line, log_copy);
        fputc('\n', log_copy);
        fflush(log_copy);
    }
}

#define FH_LOG_FN(fn, level, stream, tag)           \
    void fn(const char *fmt, ...)                   \
    {                                               \
        if (log_level < (level)) return;            \
        va_list ap;                                 \
        va_start(ap, fmt);                          \
        log_write((stream), (tag), fmt, ap);        \
        va_end(ap);                                 \
    }

FH_LOG_FN(fh_log_info, FH_LOG_INFO, stdout, "")
FH_LOG_FN(fh_log_warn, FH_LOG_WARN, stderr, "warning: ")
FH_LOG_FN(fh_log_error, FH_LOG_QUIET, stderr, "error: ")
FH_LOG_FN(fh_log_debug, FH_LOG_DEBUG, stderr, "debug: ")

double fh_time_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
