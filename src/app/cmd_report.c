/* fedhet report: figures from fedhet's files, drawn by gnuplot.
 *
 * Modes: --partition DST.h5 OUT.png (a partition file: client x label heat map over the client sizes).
 * Each mode gathers its numbers into data files in a private temporary folder, writes a gnuplot script
 * there and runs it; the image goes to OUT.tmp-<pid> and is renamed over OUT only when gnuplot succeeded,
 * so a failure never leaves a partial or stale-looking image. Reports of run folders (tables and curves
 * of an OUTPUT_DIR) are meant to become one more mode beside --partition. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app.h"
#include "fedhet/core.h"
#include "fedhet/data.h"

#define REPORT_PATH_MAX 4096

static void print_help(void)
{
    printf("usage: fedhet report --partition DST.h5 OUT.png\n"
           "  --partition DST.h5  a partition file written by `fedhet partition`: draws OUT.png with two panels,\n"
           "                      a heat map of the client x label counts (x: client, y: label, colour: samples;\n"
           "                      white: none) and bars of the samples per client, corrupted clients in red.\n"
           "  The figure is drawn by gnuplot (Debian package gnuplot-nox; `make deps` installs it), found on PATH,\n"
           "  with its pngcairo terminal when present, else png. OUT.png appears only once it is complete.\n"
           "  Exit codes: 1 usage, 2 a missing or bad partition file, 4 gnuplot missing or failing, OUT unwritable.\n");
}

/* ---- helpers: temporary folder, gnuplot strings, running gnuplot ---- */

/* A fresh private folder under $TMPDIR (or /tmp). */
static int tmpdir_make(char *dir, size_t size)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    if (snprintf(dir, size, "%s/fedhet-report-XXXXXX", base) >= (int)size)
        FH_FAIL(FH_ERR_IO, "TMPDIR=%s: path too long", base);
    if (!mkdtemp(dir)) FH_FAIL(FH_ERR_IO, "cannot create a temporary folder %s: %s", dir, strerror(errno));
    return FH_OK;
}

/* Removes the folder and the plain files in it (it is ours alone: mkdtemp made it). */
static void tmpdir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[REPORT_PATH_MAX];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path) unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static int join_path(char *out, size_t size, const char *dir, const char *name)
{
    if (snprintf(out, size, "%s/%s", dir, name) >= (int)size) FH_FAIL(FH_ERR_IO, "%s/%s: path too long", dir, name);
    return FH_OK;
}

/* s as a single-quoted gnuplot string: inside one, only a quote needs escaping (doubled) */
static void gp_string(FILE *out, const char *s)
{
    fputc('\'', out);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', out);
        fputc(*s == '\n' ? ' ' : *s, out);
    }
    fputc('\'', out);
}

/* The first executable `name` on PATH (default /usr/bin:/bin). */
static int find_program(const char *name, char *out, size_t size)
{
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/bin:/bin";
    for (const char *p = path; ; ) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        /* an empty PATH entry means the current folder */
        int n = len ? snprintf(out, size, "%.*s/%s", (int)len, p, name) : snprintf(out, size, "./%s", name);
        struct stat st;
        if (n < (int)size && stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return FH_OK;
        if (!colon) break;
        p = colon + 1;
    }
    FH_FAIL(FH_ERR_IO, "%s not found: run make deps (package gnuplot-nox)", name);
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

/* ---- --partition ---- */

static int write_partition_data(const DataPartFile *f, const char *counts_path, const char *sizes_path)
{
    FILE *out = fopen(counts_path, "w");
    if (!out) FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", counts_path, strerror(errno));
    /* zero cells are left out: they stay white, and a sparse non-IID matrix stays small */
    fprintf(out, "# client label count\n");
    for (int k = 0; k < f->n_clients; k++)
        for (int c = 0; c < f->classes; c++) {
            int32_t v = f->label_counts[(size_t)k * f->classes + c];
            if (v > 0) fprintf(out, "%d %d %d\n", k, c, (int)v);
        }
    if (ferror(out) | (fclose(out) != 0)) FH_FAIL(FH_ERR_IO, "%s: write failed", counts_path);
    out = fopen(sizes_path, "w");
    if (!out) FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", sizes_path, strerror(errno));
    fprintf(out, "# client samples corrupted\n");
    for (int k = 0; k < f->n_clients; k++)
        fprintf(out, "%d %lld %d\n", k, (long long)(f->offsets[k + 1] - f->offsets[k]),
                f->corruption[k] != DATA_CORRUPT_NONE);
    if (ferror(out) | (fclose(out) != 0)) FH_FAIL(FH_ERR_IO, "%s: write failed", sizes_path);
    return FH_OK;
}

static int write_partition_script(const DataPartFile *f, const char *script_path, const char *counts_path,
                                  const char *sizes_path, const char *image_path)
{
    const int K = f->n_clients, C = f->classes;
    int32_t largest = 1;
    int n_corrupted = 0;
    for (size_t i = 0; i < (size_t)K * C; i++)
        if (f->label_counts[i] > largest) largest = f->label_counts[i];
    for (int k = 0; k < K; k++) n_corrupted += f->corruption[k] != DATA_CORRUPT_NONE;
    const char *name = strrchr(f->path, '/') ? strrchr(f->path, '/') + 1 : f->path;
    char title[1024], bars_title[256];
    snprintf(title, sizeof title, "%s: %s (%s), %d client%s, %d classes, %lld training rows, seed %lld", name,
             f->scheme, *f->variant ? f->variant : "default", K, K == 1 ? "" : "s", C, (long long)f->n_rows,
             (long long)f->seed);
    if (n_corrupted)
        snprintf(bars_title, sizeof bars_title, "samples per client (red: %d corrupted, %s severity %d)", n_corrupted,
                 f->corruption_name, f->severity);
    else snprintf(bars_title, sizeof bars_title, "samples per client");

    FILE *out = fopen(script_path, "w");
    if (!out) FH_FAIL(FH_ERR_IO, "%s: cannot write: %s", script_path, strerror(errno));
    /* noenhanced: names like gaussian_noise must not turn into subscripts */
    fprintf(out, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
                 "    set terminal pngcairo size 1100,760 noenhanced font ',10'\n"
                 "} else {\n"
                 "    set terminal png size 1100,760 noenhanced\n"
                 "}\n"
                 "set output ");
    gp_string(out, image_path);
    fprintf(out, "\nset multiplot title ");
    gp_string(out, title);
    /* fixed margins so that the two panels share the client axis */
    fprintf(out, "\nset lmargin at screen 0.08\nset rmargin at screen 0.88\n"
                 "set xrange [-0.5:%d.5]\n", K - 1);
    if (K <= 40) fprintf(out, "set xtics 1\n");
    else fprintf(out, "set xtics autofreq\n");
    fprintf(out, "set mxtics 1\nset grid noxtics noytics\n");

    fprintf(out, "set tmargin at screen 0.91\nset bmargin at screen 0.46\n"
                 "set title 'label counts per client (white: none)'\n"
                 "set ylabel 'label'\nunset xlabel\n"
                 "set yrange [-0.5:%d.5]\n", C - 1);
    if (C <= 40) fprintf(out, "set ytics 1\n");
    fprintf(out, "set cbrange [0:%d]\nset cblabel 'samples'\n"
                 "set palette defined (0 '#deebf7', 0.5 '#4292c6', 1 '#08306b')\n"
                 "set colorbox user origin screen 0.9, screen 0.46 size screen 0.02, screen 0.45\n"
                 "plot ",
            (int)largest);
    gp_string(out, counts_path);
    fprintf(out, " using 1:2:(0.5):(0.5):3 with boxxyerror fillstyle solid 1.0 noborder lc palette notitle\n");

    fprintf(out, "set tmargin at screen 0.33\nset bmargin at screen 0.07\n"
                 "unset colorbox\nset title ");
    gp_string(out, bars_title);
    fprintf(out, "\nset xlabel 'client'\nset ylabel 'samples'\nset yrange [0:*]\nset ytics autofreq\n"
                 "set boxwidth %s absolute\nset style fill solid 0.9 noborder\nplot ",
            K <= 200 ? "0.8" : "1.0");
    /* one series per colour; a series with no points at all would be an error in gnuplot */
    int series = 0;
    if (n_corrupted < K) {
        gp_string(out, sizes_path);
        fprintf(out, " using 1:($3 == 0 ? $2 : 1/0) with boxes lc rgb '#4477aa' notitle");
        series++;
    }
    if (n_corrupted > 0) {
        if (series) fprintf(out, ", \\\n     ");
        gp_string(out, sizes_path);
        fprintf(out, " using 1:($3 != 0 ? $2 : 1/0) with boxes lc rgb '#cc3311' notitle");
    }
    fprintf(out, "\nunset multiplot\nset output\n");
    if (ferror(out) | (fclose(out) != 0)) FH_FAIL(FH_ERR_IO, "%s: write failed", script_path);
    return FH_OK;
}

/* Draws into image_path with the files of the temporary folder dir. */
static int draw_partition(const DataPartFile *f, const char *gnuplot, const char *dir, const char *image_path)
{
    char counts[REPORT_PATH_MAX], sizes[REPORT_PATH_MAX], script[REPORT_PATH_MAX], err[REPORT_PATH_MAX];
    FH_CHECK(join_path(counts, sizeof counts, dir, "counts.dat"));
    FH_CHECK(join_path(sizes, sizeof sizes, dir, "sizes.dat"));
    FH_CHECK(join_path(script, sizeof script, dir, "partition.gp"));
    FH_CHECK(join_path(err, sizeof err, dir, "gnuplot.stderr"));
    FH_CHECK(write_partition_data(f, counts, sizes));
    FH_CHECK(write_partition_script(f, script, counts, sizes, image_path));
    FH_CHECK(run_gnuplot(gnuplot, script, err));
    struct stat st;
    if (stat(image_path, &st) != 0 || st.st_size == 0)
        FH_FAIL(FH_ERR_IO, "%s exited 0 but wrote no image to %s", gnuplot, image_path);
    return FH_OK;
}

static int report_partition(const char *path, const char *out_path)
{
    struct stat in_st, out_st;
    if (stat(path, &in_st) == 0 && stat(out_path, &out_st) == 0 && in_st.st_dev == out_st.st_dev &&
        in_st.st_ino == out_st.st_ino)
        FH_FAIL(FH_ERR_USAGE, "%s is the partition file itself; give another OUT.png", out_path);
    DataPartFile f;
    FH_CHECK(data_partfile_open(&f, path));
    char gnuplot[REPORT_PATH_MAX], image_tmp[REPORT_PATH_MAX], dir[REPORT_PATH_MAX];
    dir[0] = '\0';
    int status = find_program("gnuplot", gnuplot, sizeof gnuplot);
    if (status == FH_OK && snprintf(image_tmp, sizeof image_tmp, "%s.tmp-%ld", out_path, (long)getpid()) >=
                               (int)sizeof image_tmp)
        status = fh_error_raise(FH_ERR_USAGE, __FILE__, __LINE__, "%s: path too long", out_path);
    int created = 0;
    if (status == FH_OK) {
        /* made here first, so an unwritable destination is reported plainly before gnuplot runs */
        int fd = open(image_tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd < 0)
            status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: cannot write here (creating %s: %s)",
                                    out_path, image_tmp, strerror(errno));
        else {
            close(fd);
            created = 1;
        }
    }
    if (status == FH_OK) status = tmpdir_make(dir, sizeof dir);
    if (status == FH_OK) status = draw_partition(&f, gnuplot, dir, image_tmp);
    if (status == FH_OK && rename(image_tmp, out_path) != 0)
        status = fh_error_raise(FH_ERR_IO, __FILE__, __LINE__, "%s: cannot rename %s over it: %s", out_path,
                                image_tmp, strerror(errno));
    if (status != FH_OK && created) unlink(image_tmp);
    if (dir[0]) tmpdir_remove(dir);
    if (status == FH_OK)
        printf("wrote %s: %d client%s x %d labels, %lld training rows%s\n", out_path, f.n_clients,
               f.n_clients == 1 ? "" : "s", f.classes, (long long)f.n_rows,
               f.n_corrupted ? ", corrupted clients in red" : "");
    data_partfile_close(&f);
    return status;
}

int app_cmd_report(int argc, char **argv)
{
    const char *partition = NULL, *out = NULL;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help();
            return FH_OK;
        }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--partition")) FH_CHECK(app_option_value(argc, argv, &i, &partition));
        else if (argv[i][0] == '-' && argv[i][1])
            FH_FAIL(FH_ERR_USAGE, "unknown option '%s' (see fedhet report --help)", argv[i]);
        else if (!out) out = argv[i];
        else FH_FAIL(FH_ERR_USAGE, "unexpected argument '%s' (see fedhet report --help)", argv[i]);
    }
    if (!partition)
        FH_FAIL(FH_ERR_USAGE,
                "only --partition is available in this version: fedhet report --partition DST.h5 OUT.png");
    if (!out) FH_FAIL(FH_ERR_USAGE, "--partition %s: give the image to write, OUT.png", partition);
    return report_partition(partition, out);
}
