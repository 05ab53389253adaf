/* fedhet core: status codes, the error chain, rank-prefixed logging, wall-clock timers.
 *
 * Every fallible function returns an int status (FH_OK on success). A failure records a message with
 * FH_FAIL; callers pass it up with FH_CHECK, which adds their file:line to the chain. Only src/app turns
 * a status into an exit code: the status values ARE the exit codes, one table for every command
 * (fh_exit_codes_print: `fedhet --help`, the man page, docs/usage.md). */
#ifndef FEDHET_CORE_H
#define FEDHET_CORE_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

enum {
    FH_OK = 0,
    FH_ERR_USAGE = 1,   /* usage or config */
    FH_ERR_DATA = 2,    /* input data: an input file or folder that is missing, unreadable, damaged or of the wrong kind */
    FH_ERR_NUMERIC = 3, /* numerical divergence */
    FH_ERR_IO = 4,      /* I/O: a write that failed, a damaged checkpoint or run.h5 */
    FH_ERR_MPI = 5,
    FH_ERR_MEMORY = 6,  /* out of memory */
    FH_EXIT_GRID_FAILED = 10 /* fedhet grid: 10 + the number of failed members (at most 100) */
};

#if defined(__GNUC__)
#define FH_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FH_PRINTF(a, b)
#endif

#define FH_ERROR_CAPACITY 4096 /* bytes of the error chain, frames included */

/* Records the first message of a new error (clearing any older chain) and returns status. */
int fh_error_raise(int status, const char *file, int line, const char *fmt, ...) FH_PRINTF(4, 5);
/* Appends a "  at file:line (expr)" frame to the current chain and returns status. */
int fh_error_trace(int status, const char *file, int line, const char *expr);
const char *fh_error_message(void); /* the whole chain; "" when none */
/* Replaces the chain by one recorded elsewhere (another MPI rank's) and returns status. */
int fh_error_adopt(int status, const char *chain);
void fh_error_clear(void);
const char *fh_status_name(int status);
/* The exit-code table, one "  N  meaning" line per code: `fedhet --help` prints it, `fedhet keys exit-codes` lists it
 * (and so the man page). */
typedef struct {
    const char *code; /* "1", or "10+N" for grid failures */
    const char *meaning;
} FhExitCode;
const FhExitCode *fh_exit_codes(int *n);
void fh_exit_codes_print(FILE *out);
/* What a user reads of an error: the message (one line, its hint after "; ") without the "  at file:line"
 * frames of the chain. The whole chain is kept for internal errors, which are bugs to report (a status
 * passed up without a message, an MPI failure, a status outside the exit codes), and for every error when
 * the environment sets FEDHET_TRACE=1. fh_error_format does the same for a chain received from another
 * rank, into out; fh_error_text formats the current chain (thread-local storage). */
void fh_error_format(int status, const char *chain, char *out, size_t size);
const char *fh_error_text(int status);

#define FH_FAIL(status, ...) return fh_error_raise((status), __FILE__, __LINE__, __VA_ARGS__)
#define FH_CHECK(call)                                                        \
    do {                                                                      \
        int fh_status_ = (call);                                              \
        if (fh_status_ != FH_OK)                                              \
            return fh_error_trace(fh_status_, __FILE__, __LINE__, #call);     \
    } while (0)

/* malloc/calloc that raise FH_ERR_MEMORY naming what was being allocated. *out is NULL on failure. */
int fh_calloc(void *out_ptr, size_t count, size_t size, const char *what);
/* 64-byte aligned, zeroed; release with fh_free. */
int fh_alloc_aligned(void *out_ptr, size_t bytes, const char *what);
void fh_free(void *ptr_to_ptr); /* frees *ptr and sets it to NULL */

/* ---- signals ---- */
/* What every command installs before any other work (src/app/main.c: from .preinit_array, before the shared
 * libraries' constructors, and again first thing in main). SIGXFSZ is ignored: a file-size limit then fails the
 * write (EFBIG), which is exit 4 like a full disk, instead of killing the process mid-write.
 * stop_on_signal (run, grid): SIGTERM (a scheduler's time limit), SIGUSR1 (what mpirun forwards to the ranks)
 * and SIGINT (Ctrl-C, which a terminal sends to mpirun and the ranks alike) set a flag that long loops poll at
 * their safe points, so a signal that comes while MPI and the data are still starting up is not lost.
 * Otherwise those three, and SIGHUP, SIGQUIT and SIGPIPE for every command, remove the temporaries the process
 * is writing (fh_tmp_register) and then end it as the signal would (exit status 128 + signal). */
void fh_signals_install(int stop_on_signal);
/* A temporary file (or a private folder and the files in it) that a fatal signal removes; fh_tmp_forget once it
 * is renamed into place or removed. The atomic writers (fh_atomic_open, fh_h5_create) register their own. */
void fh_tmp_register(const char *path);
void fh_tmp_register_dir(const char *dir);
void fh_tmp_forget(const char *path);
int fh_stop_requested(void);
const char *fh_stop_signal_name(void); /* "SIGTERM", "SIGUSR1" or "SIGINT": the first stop signal seen */

/* ---- logging ---- */
enum { FH_LOG_QUIET = 0, FH_LOG_WARN = 1, FH_LOG_INFO = 2, FH_LOG_DEBUG = 3 };
void fh_log_set_rank(int rank);  /* prefix "[rank R]"; -1 removes the prefix */
void fh_log_set_level(int level);
void fh_log_set_file(FILE *copy); /* every line printed is also appended here (a run's log.txt); NULL: none */
int fh_log_level(void);
void fh_log_info(const char *fmt, ...) FH_PRINTF(1, 2);  /* stdout */
void fh_log_warn(const char *fmt, ...) FH_PRINTF(1, 2);  /* stderr */
void fh_log_error(const char *fmt, ...) FH_PRINTF(1, 2); /* stderr, always */
void fh_log_debug(const char *fmt, ...) FH_PRINTF(1, 2);

/* ---- names and paths ---- */
/* FH_OK when `name` can be one folder (or file) name: not empty, ".", ".." and without '/'; else
 * FH_ERR_USAGE naming `what` (e.g. "[output] name"). */
int fh_check_plain_name(const char *name, const char *what);
/* `text` as one shell word in out: as is when it holds only safe characters, else in single quotes
 * (an embedded ' as '\''); returns out. */
const char *fh_shell_quote(const char *text, char *out, size_t size);

/* ---- files and folders (src/core/files.c) ---- */
#define FH_PATH_MAX 4096
/* A whole file into a malloc'd NUL-terminated buffer (free() it); `fail_status` when it cannot be opened or
 * read or holds a NUL byte, FH_ERR_IO when memory runs out. */
int fh_read_file(const char *path, char **text, int fail_status);
/* A whole file of any bytes (NUL-terminated beyond *len, free() it): errors as fh_read_file's */
int fh_read_bytes(const char *path, char **bytes, size_t *len, int fail_status);
/* s as one CSV field: as is, or in double quotes (a quote doubled, a newline a space) when it holds a comma, a
 * quote or a newline */
void fh_csv_field(FILE *f, const char *s);
/* FH_ERR_DATA "PATH: cannot open: REASON" when an input file is missing or unreadable (exit 2, whatever the
 * file; for readers whose own refusal carries another status) */
int fh_check_readable(const char *path);
/* dir/name into out; FH_ERR_IO when it does not fit */
int fh_path_join(char *out, size_t size, const char *dir, const char *name);
/* 1 when dir/name exists (any kind of file; name NULL or "": dir itself), else 0 */
int fh_path_exists(const char *dir, const char *name);
/* mkdir -p: path and every missing folder above it; FH_ERR_IO naming the folder that cannot be made */
int fh_mkdir_p(const char *path);

/* Atomic replacement: the new content is written to PATH.tmp-<pid>, synced, renamed over PATH and the
 * folder synced, so that a reader or a crash sees the old file or the whole new one; on any failure the
 * temporary is removed and PATH is left as it was. */
/* PATH.tmp-<pid> into out */
int fh_atomic_tmp_path(char *out, size_t size, const char *path);
/* Removes the temporaries PATH.tmp-<pid> of processes that no longer run on this host (a SIGKILL, a lost node),
 * with a warning naming each; the atomic writers call it before they write PATH. A process of another host
 * writing PATH on a shared file system looks dead from here: write one PATH from one node at a time. */
void fh_atomic_sweep_stale(const char *path);
/* The last step, for a temporary written by other means (an HDF5 library, another program): sync tmp,
 * rename it over path, sync the folder; tmp is removed on failure. */
int fh_atomic_replace(const char *tmp, const char *path);
/* A file written as a stream: fh_atomic_open creates the temporary (f), fh_atomic_commit puts it in
 * place (any earlier write error fails it), fh_atomic_discard drops it. */
typedef struct {
    FILE *f;
    char path[FH_PATH_MAX], tmp[FH_PATH_MAX + 32];
} FhAtomicFile;
int fh_atomic_open(FhAtomicFile *a, const char *path);
int fh_atomic_commit(FhAtomicFile *a);
void fh_atomic_discard(FhAtomicFile *a);
/* text as the whole new content of path */
int fh_write_file_atomic(const char *path, const char *text);

/* ---- one writer per folder (src/core/files.c) ----
 * An exclusive flock(2) on a lock file, held until fh_lock_release or the process ends (the kernel drops
 * it then, so a lock left by a killed process is free again: no stale lock to clear). The holder writes
 * "pid host" into the file; a refused taker names them. Taken without waiting: a second writer fails at
 * once (FH_ERR_USAGE) instead of queueing behind a run that may last days. */
typedef struct {
    int fd; /* -1: not held */
    char path[FH_PATH_MAX];
} FhLock;
/* Takes path (created if missing); `what` names the thing locked in the refusal ("run folder X"). */
int fh_lock_take(FhLock *l, const char *path, const char *what);
/* 1 when path exists and another process holds its lock (holder: "pid N on host H"), else 0 */
int fh_lock_held(const char *path, char *holder, size_t size);
void fh_lock_release(FhLock *l); /* the file stays (the next taker reuses it) */
void fh_lock_drop(FhLock *l);    /* removes the lock file, then releases (the folder is going away) */

/* ---- timers ---- */
double fh_time_now(void); /* monotonic seconds */

#endif
