/* gnuplot figures (analysis.h): temporary folder, script, gnuplot run, atomic replacement of the image. */
#include "fedhet/analysis.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fedhet/core.h"

/* A fresh private folder under $TMPDIR (or /tmp). */
static int tmpdir_make(char *dir, size_t size)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    if (snprintf(dir, size, "%s/fedhet-report-XXXXXX", base) >= (int)size)
        FH_FAIL(FH_ERR_IO, "TMPDIR=%s: path too long", base);
    if (!mkdtemp(dir)) FH_FAIL(FH_ERR_IO, "cannot create a temporary folder %s: %s", dir, strerror(errno));
    fh_tmp_register_dir(dir); /* a signal during gnuplot's run removes it too */
    return FH_OK;
}

/* Removes the folder and the plain files in it (it is ours alone: mkdtemp made it). */
static void tmpdir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[FH_PATH_MAX];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path) unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
    fh_tmp_forget(dir);
}

/* s as a single-quoted gnuplot string: inside one, only a quote needs escaping (doubled) */
void plot_gp_string(FILE *out, const char *s)
{
    fputc('\'', out);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', out);
        fputc(*s == '\n' ? ' ' : *s, out);
    }
    fputc('\'', out);
}

void plot_gp_terminal(FILE *out, int width, int height, const char *image)
{
    /* noenhanced: names like gaussian_noise or rho_max must not turn into subscripts */
    fprintf(out, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
                 "    set terminal pngcairo size %d,%d noenhanced font ',10'\n"
                 "} else {\n"
                 "    set terminal png size %d,%d noenhanced\n"
                 "}\n"
                 "set output ",
            width, height, width, height);
    plot_gp_string(out, image);
    fputc('\n', out);
}

/* pngcairo's 10-point font: about 7 pixels a character, 16 a legend row; a legend entry adds its line sample */
enum { KEY_CHAR_PX = 7, KEY_ROW_PX = 16, KEY_SAMPLE_PX = 70 };

void plot_gp_terminal_key(FILE *out, int width, int height, const char *image, int entries, int longest)
{
    const int entry_px = longest * KEY_CHAR_PX + KEY_SAMPLE_PX;
    /* at the right while it takes at most a quarter of the width and its rows fit beside the plot */
    if (entry_px <= width / 4 && entries * KEY_ROW_PX <= height - 120) {
        plot_gp_terminal(out, width, height, image);
        fprintf(out, "set key outside right top vertical\n");
        return;
    }
    /* else below it, in as many columns as fit the width, the image taller by the legend's rows */
    int cols = (width - 40) / entry_px;
    if (cols < 1) cols = 1;
    if (cols > entries) cols = entries > 0 ? entries : 1;
    const int rows = (entries + cols - 1) / cols;
    /* an empty key title: a row of space between the x axis' label and the legend, which gnuplot would set
     * right against it */
    plot_gp_terminal(out, width, height + (rows + 1) * KEY_ROW_PX + 20, image);
    fprintf(out, "set key outside bottom center horizontal maxcols %d maxrows %d title ' '\n", cols, rows > 0 ? rows : 1);
}

/* The first executable `name` on PATH; FH_ERR_IO naming the package otherwise. */
static int find_program(const char *name, const char *package, char *out, size_t size)
{
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/bin:/bin";
    for (const char *p = path;;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        /* an empty PATH entry means the current folder */
        int n = len ? snprintf(out, size, "%.*s/%s", (int)len, p, name) : snprintf(out, size, "./%s", name);
        struct stat st;
        if (n < (int)size && stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return FH_OK;
        if (!colon) break;
        p = colon + 1;
    }
    FH_FAIL(FH_ERR_IO, "%s not found: run make deps (package %s)", name, package);
}

/* The last `keep` bytes of a small text file, trailing blank lines dropped; "" when unreadable. */
static void file_tail(const char *path, char *buf, size_t keep)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        long start = end > (long)keep - 1 ? end - ((long)keep - 1) : 0;
        if (end >= 0 && fseek(f, start, SEEK_SET) == 0) {
            size_t n = fread(buf, 1, keep - 1, f);
            buf[n] = '\0';
            while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\r')) buf[--n] = '\0';
        }
    }
    fclose(f);
}

/* Runs `gnuplot script` with stdout discarded and stderr in err_path; a failure carries stderr's tail. */
static int run_gnuplot(const char *gnuplot, const char *script, const char *err_path)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) FH_FAIL(FH_ERR_IO, "cannot start %s: %s", gnuplot, strerror(errno));
    if (pid == 0) {
        int null_fd = open("/dev/null", O_RDWR);
        int err_fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (null_fd < 0 || err_fd < 0 || dup2(null_fd, 0) < 0 || dup2(null_fd, 1) < 0 || dup2(err_fd, 2) < 0)
            _exit(127);
        char *const args[] = {(char *)"gnuplot", (char *)script, NULL};
        execv(gnuplot, args);
        dprintf(2, "cannot run %s: %s\n", gnuplot, strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) FH_FAIL(FH_ERR_IO, "waiting for %s: %s", gnuplot, strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return FH_OK;
    char tail[1500];
    file_tail(err_path, tail, sizeof tail);
    if (WIFSIGNALED(status))
        FH_FAIL(FH_ERR_IO, "%s was killed by signal %d; its stderr ends:\n%s", gnuplot, WTERMSIG(status), tail);
    FH_FAIL(FH_ERR_IO, "%s failed (exit %d); its stderr ends:\n%s", gnuplot, WEXITSTATUS(status), tail);
}

static int draw(const char *gnuplot, const char *dir, const char *image, PlotWriter write, void *ctx)
{
    char script[FH_PATH_MAX], err[FH_PATH_MAX];
    FH_CHECK(fh_path_join(script, sizeof script, dir, "figure.gp"));
    FH_CHECK(fh_path_join(err, sizeof err, dir, "gnuplot.stderr"));
    FILE *out = fopen(script, "w");
    if (!out) FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", script, strerror(errno));
    int status = write(ctx, dir, out, image);
    if ((ferror(out) | (fclose(out) != 0)) && status == FH_OK)
        status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: write failed", script);
    FH_CHECK(status);
    FH_CHECK(run_gnuplot(gnuplot, script, err));
    struct stat st;
    if (stat(image, &st) != 0 || st.st_size == 0)
        FH_FAIL(FH_ERR_IO, "%s exited 0 but wrote no image to %s", gnuplot, image);
    return FH_OK;
}

int plot_png(const char *out_path, PlotWriter write, void *ctx)
{
    char gnuplot[FH_PATH_MAX], dir[FH_PATH_MAX];
    dir[0] = '\0';
    FH_CHECK(find_program("gnuplot", "gnuplot-nox", gnuplot, sizeof gnuplot));
    /* the temporary image is made here first, so an unwritable destination is reported plainly before
     * gnuplot runs; gnuplot writes into it by name */
    FhAtomicFile image;
    FH_CHECK(fh_atomic_open(&image, out_path));
    int status = tmpdir_make(dir, sizeof dir);
    if (status == FH_OK) status = draw(gnuplot, dir, image.tmp, write, ctx);
    if (status == FH_OK) status = fh_atomic_commit(&image);
    else fh_atomic_discard(&image);
    if (dir[0]) tmpdir_remove(dir);
    return status;
}
