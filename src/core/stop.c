/* Signals (include/fedhet/core.h): the stop flag that a run's safe points poll, the temporaries removed when a
 * signal ends the process, and SIGXFSZ ignored so that a file-size limit is a write error. */
#define _GNU_SOURCE /* syscall(SYS_getdents64) */
#include "fedhet/core.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal; /* the first stop signal seen, 0 before any */

static void on_stop_signal(int sig)
{
    if (!stop_signal) stop_signal = sig;
}

/* ---- temporaries removed by a fatal signal ----
 * Slots the handler reads: a slot's path is written before `used` is set, and `used` cleared before the slot is
 * reused, so the handler never reads a half-written path. `owner` keeps a forked child (gnuplot before its exec)
 * from removing its parent's files. */
enum { TMP_SLOTS = 16 };
static struct {
    volatile sig_atomic_t used; /* 1 a file, 2 a folder (its files too) */
    pid_t owner;
    char path[FH_PATH_MAX + 32];
} tmp_slots[TMP_SLOTS];

static void tmp_add(const char *path, int kind)
{
    for (int i = 0; i < TMP_SLOTS; i++) {
        if (tmp_slots[i].used) continue;
        if (snprintf(tmp_slots[i].path, sizeof tmp_slots[i].path, "%s", path) >= (int)sizeof tmp_slots[i].path) return;
        tmp_slots[i].owner = getpid();
        tmp_slots[i].used = kind;
        return;
    }
    /* more than TMP_SLOTS at once: the extra one is still removed on every other exit path */
}

void fh_tmp_register(const char *path) { tmp_add(path, 1); }
void fh_tmp_register_dir(const char *dir) { tmp_add(dir, 2); }

void fh_tmp_forget(const char *path)
{
    for (int i = 0; i < TMP_SLOTS; i++)
        if (tmp_slots[i].used && !strcmp(tmp_slots[i].path, path)) tmp_slots[i].used = 0;
}

/* the files of a folder and the folder, with async-signal-safe calls only (no opendir: it allocates) */
static void remove_dir_in_handler(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (fd >= 0) {
        char buf[4096];
        long n;
        while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
            for (long off = 0; off < n;) {
                /* struct linux_dirent64: d_ino 8, d_off 8, d_reclen 2, d_type 1, then the name */
                unsigned short reclen;
                memcpy(&reclen, buf + off + 16, sizeof reclen);
                const char *name = buf + off + 19;
                if (strcmp(name, ".") && strcmp(name, "..")) unlinkat(fd, name, 0);
                off += reclen;
            }
        }
        close(fd);
    }
    rmdir(dir);
}

static void on_fatal_signal(int sig)
{
    const pid_t self = getpid();
    for (int i = 0; i < TMP_SLOTS; i++) {
        if (!tmp_slots[i].used || tmp_slots[i].owner != self) continue;
        if (tmp_slots[i].used == 2) remove_dir_in_handler(tmp_slots[i].path);
        else unlink(tmp_slots[i].path);
    }
    /* then end as the signal would have: the shell sees 128 + sig */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void handle(int sig, void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

void fh_signals_install(int stop_on_signal)
{
    /* a file-size limit (ulimit -f) would kill the process in the middle of a write, leaving its temporary; ignored,
     * the write fails with EFBIG and takes the error path of a full disk (exit 4) */
    signal(SIGXFSZ, SIG_IGN);
    static const int stop_sigs[] = { SIGTERM, SIGUSR1, SIGINT };
    for (size_t i = 0; i < sizeof stop_sigs / sizeof stop_sigs[0]; i++)
        handle(stop_sigs[i], stop_on_signal ? on_stop_signal : on_fatal_signal);
    static const int fatal_sigs[] = { SIGHUP, SIGQUIT, SIGPIPE };
    for (size_t i = 0; i < sizeof fatal_sigs / sizeof fatal_sigs[0]; i++) handle(fatal_sigs[i], on_fatal_signal);
}

int fh_stop_requested(void) { return stop_signal != 0; }

const char *fh_stop_signal_name(void)
{
    switch (stop_signal) {
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "SIGTERM";
    }
}
