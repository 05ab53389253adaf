/* Files and folders (core.h): whole text files read and written, atomic replacement, mkdir -p, existence.
 *
 * Atomic replacement: the new content goes to PATH.tmp-<pid> (one writer per process, so the pid keeps
 * concurrent writers of one path apart), which is synced to disk and renamed over PATH, and the folder is
 * synced so that the rename survives a crash too. A reader, or a crash at any point, sees the old file or
 * the whole new one; on a failure the temporary is removed and PATH keeps its old content. */
#define _POSIX_C_SOURCE 200809L
#include "fedhet/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int fh_read_bytes(const char *path, char **bytes, size_t *len, int fail_status)
{
    *bytes = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) FH_FAIL(fail_status, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *grown = realloc(buf, cap * 2);
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) FH_FAIL(FH_ERR_MEMORY, "%s: out of memory reading it", path);
    if (bad) {
        free(buf);
        FH_FAIL(fail_status, "%s: read error", path);
    }
    buf[n] = '\0';
    *bytes = buf;
    *len = n;
    return FH_OK;
}

int fh_read_file(const char *path, char **text, int fail_status)
{
    size_t n;
    FH_CHECK(fh_read_bytes(path, text, &n, fail_status));
    if (strlen(*text) != n) {
        free(*text);
        *text = NULL;
        FH_FAIL(fail_status, "%s: not a text file (it holds a NUL byte)", path);
    }
    return FH_OK;
}

void fh_csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s == '\n' ? ' ' : *s, f);
    }
    fputc('"', f);
}

int fh_check_readable(const char *path)
{
    if (access(path, R_OK) != 0) FH_FAIL(FH_ERR_DATA, "%s: cannot open: %s", path, strerror(errno));
    return FH_OK;
}

int fh_path_join(char *out, size_t size, const char *dir, const char *name)
{
    if (snprintf(out, size, "%s/%s", dir, name) >= (int)size) FH_FAIL(FH_ERR_IO, "%s/%s: path too long", dir, name);
    return FH_OK;
}

int fh_path_exists(const char *dir, const char *name)
{
    char path[FH_PATH_MAX];
    struct stat st;
    if (!name || !*name) return stat(dir, &st) == 0;
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return 0;
    return stat(path, &st) == 0;
}

int fh_mkdir_p(const char *path)
{
    char dir[FH_PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) FH_FAIL(FH_ERR_IO, "%s: path too long", path);
    /* each prefix ending at a '/', then the whole path; EEXIST is fine (made by us earlier, or by another rank) */
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        const char saved = *p;
        *p = '\0';
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            FH_FAIL(FH_ERR_IO, "cannot create folder %s: %s", dir, strerror(errno));
        *p = saved;
        if (!saved) break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        FH_FAIL(FH_ERR_IO, "cannot create folder %s: a file is in the way", dir);
    return FH_OK;
}

/* ---- atomic replacement ---- */

int fh_atomic_tmp_path(char *out, size_t size, const char *path)
{
    if (snprintf(out, size, "%s.tmp-%ld", path, (long)getpid()) >= (int)size) {
        if (size) out[0] = '\0';
        FH_FAIL(FH_ERR_IO, "%s: path too long", path);
    }
    return FH_OK;
}

/* the folder of path into dir ("." for a bare name); returns path's last part */
static const char *split_dir(const char *path, char *dir, size_t size)
{
    snprintf(dir, size, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, size, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    const char *last = strrchr(path, '/');
    return last ? last + 1 : path;
}

void fh_atomic_sweep_stale(const char *path)
{
    char dir[FH_PATH_MAX];
    if (strlen(path) >= sizeof dir) return;
    const char *base = split_dir(path, dir, sizeof dir);
    const size_t lb = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, base, lb) != 0 || strncmp(e->d_name + lb, ".tmp-", 5) != 0) continue;
        const char *pid_text = e->d_name + lb + 5;
        if (!*pid_text || strspn(pid_text, "0123456789") != strlen(pid_text)) continue;
        const long pid = strtol(pid_text, NULL, 10);
        /* alive (ours, or another process's: EPERM is alive too), or a pid that does not fit: left alone */
        if (pid <= 0 || pid == (long)getpid() || (pid_t)pid != pid || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char stale[FH_PATH_MAX + 300];
        snprintf(stale, sizeof stale, "%s/%s", dir, e->d_name);
        if (unlink(stale) == 0)
            fh_log_warn("removed %s: a temporary left by process %ld, which no longer runs", stale, pid);
    }
    closedir(d);
}

static int fsync_path(const char *path, int flags)
{
    int fd = open(path, flags);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int fh_atomic_replace(const char *tmp, const char *path)
{
    if (fsync_path(tmp, O_RDONLY) != 0 || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        fh_tmp_forget(tmp);
        FH_FAIL(FH_ERR_IO, "%s: cannot put the file in place: %s", path, strerror(err));
    }
    fh_tmp_forget(tmp); /* a signal from here on finds no file under that name: harmless */
    char dir[FH_PATH_MAX];
    split_dir(path, dir, sizeof dir);
    fsync_path(dir, O_RDONLY | O_DIRECTORY); /* best effort: some file systems refuse to sync a folder */
    return FH_OK;
}

int fh_atomic_open(FhAtomicFile *a, const char *path)
{
    memset(a, 0, sizeof *a);
    if (snprintf(a->path, sizeof a->path, "%s", path) >= (int)sizeof a->path)
        FH_FAIL(FH_ERR_IO, "%s: path too long", path);
    FH_CHECK(fh_atomic_tmp_path(a->tmp, sizeof a->tmp, path));
    fh_atomic_sweep_stale(path);
    fh_tmp_register(a->tmp); /* before the file exists: no moment when a signal would leave it */
    a->f = fopen(a->tmp, "w");
    if (!a->f) {
        const int err = errno;
        fh_tmp_forget(a->tmp);
        FH_FAIL(FH_ERR_IO, "%s: cannot write (creating %s: %s)", path, a->tmp, strerror(err));
    }
    return FH_OK;
}

int fh_atomic_commit(FhAtomicFile *a)
{
    if (!a->f) FH_FAIL(FH_ERR_IO, "%s: not open for writing", a->path);
    errno = 0;
    int ok = ferror(a->f) == 0;
    ok = (fflush(a->f) == 0) && ok;
    ok = (fclose(a->f) == 0) && ok;
    const int err = errno;
    a->f = NULL;
    if (!ok) {
        unlink(a->tmp);
        fh_tmp_forget(a->tmp);
        FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", a->path, err ? strerror(err) : "write error");
    }
    return fh_atomic_replace(a->tmp, a->path);
}

void fh_atomic_discard(FhAtomicFile *a)
{
    if (a->f) {
        fclose(a->f);
        a->f = NULL;
        unlink(a->tmp);
        fh_tmp_forget(a->tmp);
    }
}

int fh_write_file_atomic(const char *path, const char *text)
{
    FhAtomicFile a;
    FH_CHECK(fh_atomic_open(&a, path));
    if (fputs(text, a.f) < 0) {
        int err = errno;
        fh_atomic_discard(&a);
        FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", path, strerror(err));
    }
    return fh_atomic_commit(&a);
}

/* ---- one writer per folder ---- */

/* "pid N on host H" from a lock file's content, or a note that the holder has not written it yet */
static void lock_holder_text(int fd, char *out, size_t size)
{
    char buf[300];
    long pid = 0;
    char host[256] = "";
    /* the holder writes its text just after it takes the lock: give it up to 0.2 s */
    for (int attempt = 0; attempt < 100; attempt++) {
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        buf[n > 0 ? n : 0] = '\0';
        if (sscanf(buf, "%ld %255s", &pid, host) == 2 && strchr(buf, '\n')) {
            snprintf(out, size, "pid %ld on host %s", pid, host);
            return;
        }
        struct timespec ts = { 0, 2000000 };
        nanosleep(&ts, NULL);
    }
    snprintf(out, size, "a process that is just starting");
}

int fh_lock_held(const char *path, char *holder, size_t size)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 0;
    int held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (held && holder) lock_holder_text(fd, holder, size);
    close(fd); /* drops the shared lock, if it was taken */
    return held;
}

int fh_lock_take(FhLock *l, const char *path, const char *what)
{
    l->fd = -1;
    if (snprintf(l->path, sizeof l->path, "%s", path) >= (int)sizeof l->path) FH_FAIL(FH_ERR_IO, "%s: path too long", path);
    /* a holder that removes the file as it leaves (fh_lock_drop) may do so between our open and flock:
     * the lock then belongs to a file no longer at path, so it is taken again on the new one */
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 && errno == ELOOP)
            FH_FAIL(FH_ERR_IO, "%s is a symbolic link: fedhet does not lock through it (remove it)", path);
        if (fd < 0) FH_FAIL(FH_ERR_IO, "%s: cannot open the lock file of %s: %s", path, what, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int err = errno;
            char holder[400];
            if (err == EWOULDBLOCK) lock_holder_text(fd, holder, sizeof holder);
            close(fd);
            if (err == EWOULDBLOCK)
                FH_FAIL(FH_ERR_USAGE, "%s is in use by %s (it holds %s): one writer per folder; wait for it to end, "
                        "or stop it first", what, holder, path);
            FH_FAIL(FH_ERR_IO, "%s: cannot lock %s: %s", path, what, strerror(err));
        }
        struct stat held, now;
        if (fstat(fd, &held) != 0 || stat(path, &now) != 0 || held.st_ino != now.st_ino || held.st_dev != now.st_dev) {
            close(fd);
            continue;
        }
        char text[320], host[256] = "unknown";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        int n = snprintf(text, sizeof text, "%ld %s\n", (long)getpid(), host);
        /* the text is for messages only: a full disk that refuses it does not stop the run */
        if (ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)n, 0) != n) (void)ftruncate(fd, 0);
        l->fd = fd;
        return FH_OK;
    }
    FH_FAIL(FH_ERR_IO, "%s: the lock file of %s keeps being replaced", path, what);
}

void fh_lock_release(FhLock *l)
{
    if (l->fd >= 0) {
        (void)!ftruncate(l->fd, 0); /* emptied first: a later refusal never names a holder that has left */
        close(l->fd);
    }
    l->fd = -1;
}

void fh_lock_drop(FhLock *l)
{
    if (l->fd >= 0) unlink(l->path);
    fh_lock_release(l);
}
