/* Tests of the data commands of the command line: `fedhet partition`, `fedhet inspect FILE.h5` and
 * `fedhet report --partition`. Runs the real binary bin/fedhet (as test_cli.c does: popen, stderr folded
 * into stdout) on a tiny synthetic IDX source written into a fresh mkdtemp folder: 200 training and 40
 * test images of 1x8x8, 4 classes, every class present. Checks exit codes, messages, the count matrix
 * printed by inspect against data_partfile_open, the PNG written by report, that failures leave no
 * output or temporary file behind, and that partitioning is byte-for-byte reproducible.
 *
 * Needs gnuplot (Debian gnuplot-nox, installed by `make deps`) for the report tests. Run alone:
 *   make bin/fedhet build/tests/test_data_cli && build/tests/test_data_cli [test_name] */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* popen, pclose, setenv, mkdtemp */
#endif

#include "test.h"

#include <dirent.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fedhet/data.h"
#include "test_tmp.h"

#include "test_bin.h"

/* ---- files ---- */

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* whole file into a malloc'd buffer; NULL when unreadable */
static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n == cap) {
            cap = cap ? 2 * cap : 65536;
            unsigned char *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    *len = n;
    return buf;
}

static int write_file(const char *path, const void *data, size_t len)
{
    tmp_record(path);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* entries of a folder whose name contains `needle` ("" counts every entry but . and ..) */
static int count_entries(const char *dir, const char *needle)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, needle)) n++;
    closedir(d);
    return n;
}

/* removes everything under dir (the test's own folders only) */
static void sweep(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            sweep(path);
            rmdir(path);
        } else unlink(path);
    }
    closedir(d);
}

/* ---- the synthetic source: an IDX folder ---- */

enum { SRC_N = 200, SRC_TEST = 40, SRC_SIDE = 8, SRC_CLASSES = 4 };

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static int write_idx(const char *path, uint32_t magic, const uint32_t *dims, int ndims, const unsigned char *payload,
                     size_t payload_len)
{
    size_t len = 4 + 4 * (size_t)ndims + payload_len;
    unsigned char *b = malloc(len);
    if (!b) return -1;
    put_be32(b, magic);
    for (int i = 0; i < ndims; i++) put_be32(b + 4 + 4 * i, dims[i]);
    memcpy(b + 4 + 4 * ndims, payload, payload_len);
    int r = write_file(path, b, len);
    free(b);
    return r;
}

/* images of a fixed pseudo-random texture; labels cycle through the classes (shuffled by a stride) */
static int write_idx_set(const char *dir, const char *prefix, int n, uint32_t salt)
{
    unsigned char *pixels = malloc((size_t)n * SRC_SIDE * SRC_SIDE), *labels = malloc((size_t)n);
    if (!pixels || !labels) {
        free(pixels), free(labels);
        return -1;
    }
    uint32_t x = 2463534242u ^ salt;
    for (size_t i = 0; i < (size_t)n * SRC_SIDE * SRC_SIDE; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        pixels[i] = (unsigned char)(x >> 24);
    }
    for (int i = 0; i < n; i++) labels[i] = (unsigned char)((i * 7 + i / 5) % SRC_CLASSES);
    char path[700];
    const uint32_t image_dims[3] = {(uint32_t)n, SRC_SIDE, SRC_SIDE}, label_dims[1] = {(uint32_t)n};
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, prefix);
    int r = write_idx(path, 0x00000803, image_dims, 3, pixels, (size_t)n * SRC_SIDE * SRC_SIDE);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, prefix);
    if (r == 0) r = write_idx(path, 0x00000801, label_dims, 1, labels, (size_t)n);
    free(pixels), free(labels);
    return r;
}

/* paths shared by the tests, set up once in main */
static char src_dir[640], dst_path[640], dst_corrupted[640], garbage_path[640], out_dir[640], report_tmp[640];
static int fixture_ok;

#define PART_ARGS "scheme=dirichlet alpha=0.5 clients=5 min_size=2 partition_seed=3 classes=4"

static int fixture_init(void)
{
    snprintf(src_dir, sizeof src_dir, "%s", tmp_dir("src"));
    snprintf(out_dir, sizeof out_dir, "%s", tmp_dir("out"));
    snprintf(report_tmp, sizeof report_tmp, "%s", tmp_dir("report_tmp"));
    snprintf(dst_path, sizeof dst_path, "%s", tmp_path("dst.h5"));
    snprintf(dst_corrupted, sizeof dst_corrupted, "%s", tmp_path("dst_corrupted.h5"));
    snprintf(garbage_path, sizeof garbage_path, "%s", tmp_path("garbage.h5"));
    tmp_record(dst_path);
    tmp_record(dst_corrupted);
    if (write_idx_set(src_dir, "train", SRC_N, 1) || write_idx_set(src_dir, "t10k", SRC_TEST, 2)) {
        printf("  cannot write the IDX source in %s\n", src_dir);
        return -1;
    }
    char garbage[3000];
    for (size_t i = 0; i < sizeof garbage; i++) garbage[i] = (char)(i * 131 + 7);
    if (write_file(garbage_path, garbage, sizeof garbage)) return -1;

    RunResult *r = run_fedhet("partition '%s' '%s' " PART_ARGS, src_dir, dst_path);
    if (r->code != 0) {
        printf("  fixture: %s: exit %d\n%s\n", r->cmd, r->code, r->out);
        return -1;
    }
    r = run_fedhet("partition '%s' '%s' " PART_ARGS " corruption=gaussian_noise corrupted=2", src_dir, dst_corrupted);
    if (r->code != 0) {
        printf("  fixture: %s: exit %d\n%s\n", r->cmd, r->code, r->out);
        return -1;
    }
    return 0;
}

#define REQUIRE_FIXTURE()                                                                     \
    do {                                                                                      \
        CHECK_MSG(fixture_ok, "the partition files of the fixture could not be made (above)"); \
        if (!fixture_ok) return;                                                              \
    } while (0)

/* ---- partition ---- */

static void test_partition_unknown_key(void)
{
    const char *dst = tmp_path("typo.h5");
    tmp_record(dst);
    EXPECT(run_fedhet("partition '%s' '%s' scheme=dirichlet alpah=0.1 clients=5", src_dir, dst), 1, "alpah",
           "did you mean 'alpha'");
    /* a renamed key names its new name; a key the scheme does not read is refused, not ignored */
    EXPECT(run_fedhet("partition '%s' '%s' scheme=iid seed=1", src_dir, dst), 1, "did you mean 'partition_seed'");
    EXPECT(run_fedhet("partition '%s' '%s' scheme=iid alpha=0.5", src_dir, dst), 1,
           "alpha = 0.5 means nothing with scheme = iid");
    EXPECT(run_fedhet("partition '%s' '%s' scheme=dirichlet severity=5", src_dir, dst), 1,
           "severity = 5 means nothing with scheme = dirichlet, corruption = none");
    CHECK_MSG(!file_exists(dst), "%s was written although a key was wrong", dst);
}

static void test_partition_refuses_existing_dst(void)
{
    REQUIRE_FIXTURE();
    size_t before_len = 0, after_len = 0;
    unsigned char *before = read_file(dst_path, &before_len);
    EXPECT(run_fedhet("partition '%s' '%s' scheme=iid clients=3 classes=4", src_dir, dst_path), 1, "already exists",
           "--force");
    unsigned char *after = read_file(dst_path, &after_len);
    CHECK_MSG(before && after && before_len == after_len && !memcmp(before, after, before_len),
              "%s changed although partition refused to replace it", dst_path);
    free(before), free(after);
}

static void test_partition_garbage_source(void)
{
    const char *folder = tmp_dir("garbage_out"), *dst = tmp_path("garbage_out/g.h5");
    tmp_record(dst);
    EXPECT(run_fedhet("partition '%s' '%s' " PART_ARGS, garbage_path, dst), 2, "garbage.h5");
    CHECK_MSG(!file_exists(dst), "%s left behind after a failed partition", dst);
    CHECK_MSG(count_entries(folder, "") == 0, "%d entries (e.g. g.h5.tmp-*) left in %s after a failed partition",
              count_entries(folder, ""), folder);
    /* a source folder without any data set is an input-data error too */
    const char *empty = tmp_dir("empty_src");
    EXPECT(run_fedhet("partition '%s' '%s' " PART_ARGS, empty, dst), 2, "empty_src");
    CHECK(!file_exists(dst));
    CHECK(count_entries(folder, "") == 0);
}

/* A min_size no partition can meet is refused at once, naming the keys: more than N rows in all, or so many
 * clients below it in every draw that max_attempts draws would not find one. */
static void test_partition_min_size_out_of_reach(void)
{
    const char *dst = tmp_path("min_size.h5");
    tmp_record(dst);
    EXPECT(run_fedhet("partition '%s' '%s' scheme=dirichlet clients=50 min_size=5 classes=4", src_dir, dst), 1,
           "min_size=5", "K=50", "lower min_size or K");
    const time_t t0 = time(NULL);
    EXPECT(run_fedhet("partition '%s' '%s' scheme=dirichlet alpha=0.01 clients=100 min_size=1 max_attempts=100000000 "
                      "classes=4", src_dir, dst), 1, "min_size=1 is out of reach", "alpha=0.01", "max_attempts=100000000");
    EXPECT(run_fedhet("partition '%s' '%s' scheme=quantity alpha=0.01 clients=100 min_size=1 classes=4", src_dir, dst),
           1, "quantity niid-bench: min_size=1 is out of reach");
    CHECK_MSG(time(NULL) - t0 < 10, "took %lld s to refuse", (long long)(time(NULL) - t0));
    CHECK_MSG(!file_exists(dst), "%s was written although min_size is out of reach", dst);
}

/* 1 when the two files hold equal tables and rows (read through data_partfile_open), else 0; prints
 * what differs */
static int same_contents(const char *a, const char *b)
{
    DataPartFile fa, fb;
    if (data_partfile_open(&fa, a) != FH_OK) return printf("    %s: %s\n", a, fh_error_message()), 0;
    if (data_partfile_open(&fb, b) != FH_OK) {
        printf("    %s: %s\n", b, fh_error_message());
        data_partfile_close(&fa);
        return 0;
    }
    int same = fa.n_clients == fb.n_clients && fa.classes == fb.classes && fa.n_rows == fb.n_rows &&
               fa.n_test == fb.n_test && fa.c == fb.c && fa.h == fb.h && fa.w == fb.w &&
               fa.has_test_corrupted == fb.has_test_corrupted;
    if (!same) printf("    shapes differ\n");
    if (same) {
        size_t kc = (size_t)fa.n_clients * fa.classes;
        if (memcmp(fa.offsets, fb.offsets, (size_t)(fa.n_clients + 1) * sizeof *fa.offsets) ||
            memcmp(fa.label_counts, fb.label_counts, kc * sizeof *fa.label_counts) ||
            memcmp(fa.corruption, fb.corruption, (size_t)fa.n_clients * sizeof *fa.corruption) ||
            memcmp(fa.mean, fb.mean, (size_t)fa.c * sizeof *fa.mean) ||
            memcmp(fa.std, fb.std, (size_t)fa.c * sizeof *fa.std) ||
            strcmp(fa.parameters, fb.parameters)) {
            printf("    per-client tables or attributes differ\n");
            same = 0;
        }
    }
    const DataRowGroup groups[3] = {DATA_ROWS_CLIENTS, DATA_ROWS_TEST, DATA_ROWS_TEST_CORRUPTED};
    for (int g = 0; same && g < 3; g++) {
        int64_t n = g == 0 ? fa.n_rows : (g == 2 && !fa.has_test_corrupted) ? 0 : fa.n_test;
        size_t row = (size_t)fa.c * fa.h * fa.w;
        uint8_t *ia = malloc((size_t)n * row + 1), *ib = malloc((size_t)n * row + 1);
        int32_t *la = malloc((size_t)n * sizeof *la + 1), *lb = malloc((size_t)n * sizeof *lb + 1);
        if (ia && ib && la && lb && data_partfile_read_rows(&fa, groups[g], 0, n, ia, la) == FH_OK &&
            data_partfile_read_rows(&fb, groups[g], 0, n, ib, lb) == FH_OK) {
            if (memcmp(ia, ib, (size_t)n * row) || memcmp(la, lb, (size_t)n * sizeof *la)) {
                printf("    the rows of group %d differ\n", g);
                same = 0;
            }
        } else {
            printf("    cannot read group %d: %s\n", g, fh_error_message());
            same = 0;
        }
        free(ia), free(ib), free(la), free(lb);
    }
    data_partfile_close(&fa);
    data_partfile_close(&fb);
    return same;
}

/* The same command twice gives the same bytes. The second run starts in a later wall-clock second, so
 * that a timestamp written into the file shows every time rather than now and then. */
static void test_partition_reproducible(void)
{
    const char *a = tmp_path("rep_a.h5"), *b = tmp_path("rep_b.h5");
    tmp_record(a);
    tmp_record(b);
    const char *extra = "corruption=gaussian_noise corrupted=2";
    RunResult *r = run_fedhet("partition '%s' '%s' " PART_ARGS " %s", src_dir, a, extra);
    EXPECT(r, 0, "wrote", "label entropy (nats): min", "size Gini");
    /* the heterogeneity summary it prints is the one inspect prints from the file's /stats */
    char *made = strdup(r->out);
    r = run_fedhet("inspect '%s'", a);
    const char *from = made ? strstr(made, "\nentropy") : NULL, *to = from ? strstr(from, "\ncorrupted") : NULL;
    CHECK_MSG(from && to, "no heterogeneity summary in the partition output:\n%s", made ? made : "");
    if (from && to) {
        char *summary = strndup(from, (size_t)(to - from + 1));
        CHECK_MSG(summary && strstr(r->out, summary), "partition printed\n%s\nbut inspect\n%s", summary, r->out);
        free(summary);
    }
    free(made);
    EXPECT(run_fedhet("partition '%s' '%s' " PART_ARGS " %s", src_dir, b, extra), 0, "wrote");
    time_t started = time(NULL);
    while (time(NULL) == started) {
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    /* --force over an existing file, same settings: still the same bytes */
    EXPECT(run_fedhet("partition '%s' '%s' " PART_ARGS " %s --force", src_dir, b, extra), 0, "wrote");
    size_t la = 0, lb = 0;
    unsigned char *da = read_file(a, &la), *db = read_file(b, &lb);
    CHECK_MSG(da && db, "cannot read %s or %s", a, b);
    int same = da && db && la == lb && !memcmp(da, db, la);
    if (da && db && !same) {
        size_t first = 0;
        while (first < la && first < lb && da[first] == db[first]) first++;
        printf("    %s (%zu bytes) and %s (%zu bytes) differ from byte %zu; their contents are %s\n", a, la, b, lb,
               first, same_contents(a, b) ? "equal" : "NOT equal");
    }
    CHECK_MSG(same, "two runs of the same partition command wrote different files");
    free(da), free(db);
}

/* ---- inspect ---- */

/* Parses the matrix printed by inspect and compares it with the file as data_partfile_open reads it. */
static void check_inspect_matrix(const char *path, const char *out)
{
    DataPartFile f;
    int status = data_partfile_open(&f, path);
    CHECK_MSG(status == FH_OK, "data_partfile_open(%s): %s", path, fh_error_message());
    if (status != FH_OK) return;
    const char *p = strstr(out, "\n client  samples  corrupted");
    if (!p) p = strstr(out, "\nclient  samples  corrupted");
    CHECK_MSG(p != NULL, "no matrix header 'client  samples  corrupted' in:\n%s", out);
    if (p) {
        p = strchr(p + 1, '\n'); /* past the header */
        int rows = 0;
        for (int k = 0; p && k < f.n_clients; k++, rows++) {
            char *end;
            long id = strtol(p + 1, &end, 10);
            long samples = strtol(end, &end, 10);
            while (*end == ' ') end++;
            int yes = !strncmp(end, "yes", 3), no = !strncmp(end, "no", 2);
            CHECK_MSG(id == k && (yes || no), "row %d of the matrix: '%.60s'", k, p + 1);
            end += yes ? 3 : 2;
            long sum = 0;
            for (int c = 0; c < f.classes; c++) {
                long v = strtol(end, &end, 10);
                sum += v;
                CHECK_MSG(v == f.label_counts[(size_t)k * f.classes + c], "client %d label %d: printed %ld, file %d", k,
                          c, v, (int)f.label_counts[(size_t)k * f.classes + c]);
            }
            CHECK_MSG(*end == '\n' || *end == '\0', "client %d: more columns than %d classes: '%.40s'", k, f.classes,
                      end);
            CHECK_MSG(sum == samples, "client %d: counts add up to %ld but samples says %ld", k, sum, samples);
            CHECK_MSG(samples == f.offsets[k + 1] - f.offsets[k], "client %d: samples %ld, file %lld", k, samples,
                      (long long)(f.offsets[k + 1] - f.offsets[k]));
            CHECK_MSG(yes == (f.corruption[k] != DATA_CORRUPT_NONE), "client %d: corrupted column says %s", k,
                      yes ? "yes" : "no");
            p = strchr(p + 1, '\n');
        }
        CHECK_MSG(rows == f.n_clients, "%d matrix rows for %d clients", rows, f.n_clients);
    }
    data_partfile_close(&f);
}

/* Parses the per-client heterogeneity table printed by inspect and compares it with data_hetero_compute on
 * the file's label counts (to the printed precision). */
static void check_inspect_hetero(const char *path, const char *out)
{
    DataPartFile f;
    int status = data_partfile_open(&f, path);
    CHECK_MSG(status == FH_OK, "data_partfile_open(%s): %s", path, fh_error_message());
    if (status != FH_OK) return;
    DataHetero h;
    CHECK_OK(data_hetero_compute(&h, f.label_counts, f.n_clients, f.classes));
    const char *p = strstr(out, "client  entropy  eff classes     TV    EMD\n");
    CHECK_MSG(p != NULL, "no heterogeneity table header in:\n%s", out);
    if (p && h.entropy) {
        p = strchr(p, '\n');
        for (int k = 0; k < f.n_clients; k++) {
            char *end;
            long id = strtol(p + 1, &end, 10);
            double v[4];
            for (int i = 0; i < 4; i++) v[i] = strtod(end, &end);
            CHECK_MSG(id == k, "row %d of the heterogeneity table: '%.60s'", k, p + 1);
            CHECK_NEAR(v[0], h.entropy[k], 0.0005 + 1e-12);
            CHECK_NEAR(v[1], h.effective_classes[k], 0.005 + 1e-12);
            CHECK_NEAR(v[2], h.tv[k], 0.0005 + 1e-12);
            CHECK_NEAR(v[3], h.emd[k], 0.0005 + 1e-12);
            p = strchr(p + 1, '\n');
            if (!p) break;
        }
        double s[4];
        char line[200];
        data_summary4(h.tv, f.n_clients, s);
        snprintf(line, sizeof line, "TV          to the global label distribution: min %.3f / median %.3f / max %.3f / "
                 "mean %.3f\n", s[0], s[1], s[2], s[3]);
        CHECK_MSG(strstr(out, line) != NULL, "no line '%s' in:\n%s", line, out);
        snprintf(line, sizeof line, "size Gini   %.3f ", h.size_gini);
        CHECK_MSG(strstr(out, line) != NULL, "no line '%s' in:\n%s", line, out);
    }
    data_hetero_free(&h);
    data_partfile_close(&f);
}

static void test_inspect_partition(void)
{
    REQUIRE_FIXTURE();
    RunResult *r = run_fedhet("inspect '%s'", dst_path);
    EXPECT(r, 0, "dst.h5", "dirichlet", "variant default", "alpha=0.5", "clients=5", "min_size=2", "seed=3",
           "classes     4", "1x8x8", "200 rows over 5 clients", "40 rows; corrupted copy: no", "corruption  none",
           "samples min", "label entropy (nats): min", "exp(entropy): min", "size Gini", "as stored in /stats");
    check_inspect_matrix(dst_path, r->out);
    check_inspect_hetero(dst_path, r->out);
}

/* a copy of the fixture's partition file named `name` (in the test folder) without the HDF5 object `drop` */
static const char *copy_without(const char *name, const char *drop)
{
    const char *copy = tmp_path(name);
    size_t len = 0;
    unsigned char *bytes = read_file(dst_path, &len);
    CHECK(bytes && write_file(copy, bytes, len) == 0);
    free(bytes);
    hid_t h = H5Fopen(copy, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(h >= 0 && H5Ldelete(h, drop, H5P_DEFAULT) >= 0);
    if (h >= 0) H5Fclose(h);
    return copy;
}

/* a partition file made before /stats existed: inspect computes the same statistics from the label counts */
static void test_inspect_without_stored_stats(void)
{
    REQUIRE_FIXTURE();
    const char *old_file = copy_without("no_stats.h5", "/stats");
    RunResult *r = run_fedhet("inspect '%s'", old_file);
    EXPECT(r, 0, "computed from /clients/label_counts");
    check_inspect_hetero(old_file, r->out);
    char *with = strdup(r->out);
    r = run_fedhet("inspect '%s'", dst_path);
    /* from the summary on, the two outputs agree but for where the statistics came from */
    const char *a = with ? strstr(with, "\nentropy") : NULL, *b = strstr(r->out, "\nentropy");
    const char *a_end = a ? strstr(a, "\n(heterogeneity") : NULL, *b_end = b ? strstr(b, "\n(heterogeneity") : NULL;
    CHECK(a && b && a_end && b_end && a_end - a == b_end - b && !memcmp(a, b, (size_t)(a_end - a)));
    CHECK(a_end && b_end && !strcmp(strchr(a_end + 1, '\n'), strchr(b_end + 1, '\n')));
    free(with);
}

static void test_inspect_corrupted_partition(void)
{
    REQUIRE_FIXTURE();
    RunResult *r = run_fedhet("inspect '%s'", dst_corrupted);
    EXPECT(r, 0, "corrupted copy: yes", "gaussian_noise severity 3", "2 of 5 clients (3..4)", "corrupted=2");
    check_inspect_matrix(dst_corrupted, r->out);
}

static void test_inspect_errors(void)
{
    REQUIRE_FIXTURE();
    EXPECT(run_fedhet("inspect '%s'", garbage_path), 2, garbage_path, "not an HDF5 file");
    const char *missing = tmp_path("missing.h5");
    EXPECT(run_fedhet("inspect '%s'", missing), 2, missing);
    /* an HDF5 file that is not a partition file */
    const char *plain = tmp_path("plain.h5");
    tmp_record(plain);
    hid_t h = H5Fcreate(plain, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(h >= 0);
    if (h >= 0) H5Fclose(h);
    EXPECT(run_fedhet("inspect '%s'", plain), 2, plain, "not a fedhet partition file");
    EXPECT(run_fedhet("inspect '%s' --model cnn", dst_path), 1, "not both");
    EXPECT(run_fedhet("inspect --model cnn '%s'", dst_path), 1, "not both");
    EXPECT(run_fedhet("inspect '%s' '%s'", dst_path, dst_corrupted), 1, "one FILE");
}

/* ---- report ---- */

static const unsigned char png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static void check_png(const char *path)
{
    size_t len = 0;
    unsigned char *b = read_file(path, &len);
    CHECK_MSG(b != NULL, "%s was not written", path);
    if (b) {
        CHECK_MSG(len > 1000, "%s: %zu bytes", path, len);
        CHECK_MSG(len >= 8 && !memcmp(b, png_signature, 8), "%s does not start with the PNG signature", path);
    }
    free(b);
}

/* report's temporary folder (under TMPDIR) is gone and nothing but final images is in out_dir */
static void check_no_leftovers(void)
{
    CHECK_MSG(count_entries(report_tmp, "") == 0, "%d entries left in TMPDIR %s", count_entries(report_tmp, ""),
              report_tmp);
    CHECK_MSG(count_entries(out_dir, ".tmp") == 0, "temporary image left in %s", out_dir);
}

static char env_tmpdir[800];

static void test_report_partition(void)
{
    REQUIRE_FIXTURE();
    const char *png = tmp_path("out/plain.png");
    tmp_record(png);
    EXPECT(run_fedhet_env(env_tmpdir, "report --partition '%s' '%s'", dst_path, png), 0, "wrote");
    check_png(png);
    check_no_leftovers();
    /* a second report replaces the image */
    EXPECT(run_fedhet_env(env_tmpdir, "report --partition '%s' '%s'", dst_path, png), 0, "wrote");
    check_png(png);
    check_no_leftovers();
}

static void test_report_corrupted_partition(void)
{
    REQUIRE_FIXTURE();
    const char *png = tmp_path("out/corrupted.png");
    tmp_record(png);
    EXPECT(run_fedhet_env(env_tmpdir, "report --partition '%s' '%s'", dst_corrupted, png), 0, "wrote", "corrupted");
    check_png(png);
    check_no_leftovers();
}

/* the heterogeneity panel: drawn for a file without /stats too; a damaged /stats is an input error that
 * leaves no image */
static void test_report_partition_stats(void)
{
    REQUIRE_FIXTURE();
    const char *png = tmp_path("out/no_stats.png");
    tmp_record(png);
    const char *old_file = copy_without("no_stats_report.h5", "/stats");
    EXPECT(run_fedhet_env(env_tmpdir, "report --partition '%s' '%s'", old_file, png), 0, "wrote");
    check_png(png);
    check_no_leftovers();
    const char *damaged = copy_without("damaged_stats.h5", "/stats/tv_to_global");
    const char *png2 = tmp_path("out/damaged.png");
    tmp_record(png2);
    EXPECT(run_fedhet_env(env_tmpdir, "report --partition '%s' '%s'", damaged, png2), 2, "damaged_stats.h5",
           "/stats/tv_to_global");
    CHECK_MSG(!file_exists(png2), "%s written from a damaged file", png2);
    check_no_leftovers();
    EXPECT(run_fedhet("inspect '%s'", damaged), 2, "damaged_stats.h5", "/stats/tv_to_global");
}

static void test_report_bad_inputs(void)
{
    REQUIRE_FIXTURE();
    const char *png = tmp_path("out/bad.png");
    tmp_record(png);
    EXPECT(run_fedhet_env(env_tmpdir, "report --partition '%s' '%s'", garbage_path, png), 2, garbage_path);
    CHECK(!file_exists(png));
    EXPECT(run_fedhet_env(env_tmpdir, "report --partition '%s' '%s'", tmp_path("missing.h5"), png), 2, "missing.h5");
    CHECK(!file_exists(png));
    const char *nowhere = tmp_path("no_such_folder/x.png");
    RunResult *r = run_fedhet_env(env_tmpdir, "report --partition '%s' '%s'", dst_path, nowhere);
    CHECK_MSG(r->code != 0 && !r->crashed, "%s: exit %d\n%s", r->cmd, r->code, r->out);
    CHECK_MSG(strstr(r->out, "no_such_folder") != NULL, "message does not name the destination:\n%s", r->out);
    CHECK(!file_exists(nowhere));
    /* the partition file is not overwritten by its own report */
    size_t before_len = 0, after_len = 0;
    unsigned char *before = read_file(dst_path, &before_len);
    EXPECT(run_fedhet_env(env_tmpdir, "report --partition '%s' '%s'", dst_path, dst_path), 1, "partition file itself");
    unsigned char *after = read_file(dst_path, &after_len);
    CHECK(before && after && before_len == after_len && !memcmp(before, after, before_len));
    free(before), free(after);
    check_no_leftovers();
}

/* gnuplot missing, failing, or exiting 0 without an image: exit 4 and no image */
static void test_report_gnuplot_failures(void)
{
    REQUIRE_FIXTURE();
    const char *png = tmp_path("out/gp.png");
    tmp_record(png);
    char env[1600];
    snprintf(env, sizeof env, "%s PATH=/nonexistent", env_tmpdir);
    EXPECT(run_fedhet_env(env, "report --partition '%s' '%s'", dst_path, png), 4, "gnuplot not found",
           "make deps", "gnuplot-nox");
    CHECK(!file_exists(png));
    check_no_leftovers();

    const char *bin = tmp_dir("fakebin"), *fake = tmp_path("fakebin/gnuplot");
    const char *failing = "#!/bin/sh\necho 'line 7: undefined variable: frobnicate' >&2\nexit 1\n";
    CHECK(write_file(fake, failing, strlen(failing)) == 0 && chmod(fake, 0755) == 0);
    snprintf(env, sizeof env, "%s PATH='%s':/usr/bin:/bin", env_tmpdir, bin);
    EXPECT(run_fedhet_env(env, "report --partition '%s' '%s'", dst_path, png), 4, "failed",
           "undefined variable: frobnicate");
    CHECK(!file_exists(png));
    check_no_leftovers();

    const char *silent = "#!/bin/sh\nexit 0\n";
    CHECK(write_file(fake, silent, strlen(silent)) == 0 && chmod(fake, 0755) == 0);
    EXPECT(run_fedhet_env(env, "report --partition '%s' '%s'", dst_path, png), 4, "no image");
    CHECK(!file_exists(png));
    check_no_leftovers();
}

static void test_report_usage(void)
{
    EXPECT(run_fedhet("report"), 1, "give a run or grid folder", "--partition DST.h5 OUT.png");
    EXPECT(run_fedhet("report '%s'", out_dir), 1, "holds no run", "--partition DST.h5 OUT.png");
    EXPECT(run_fedhet("report --partition"), 1, "--partition", "needs a value");
    EXPECT(run_fedhet("report --partition '%s'", dst_path), 1, "OUT.png");
    EXPECT(run_fedhet("report --partition '%s' a.png b.png", dst_path), 1, "unexpected argument");
    EXPECT(run_fedhet("report --bogus"), 1, "unknown option", "--bogus");
}

static void test_help(void)
{
    EXPECT(run_fedhet("inspect --help"), 0, "usage: fedhet inspect FILE.h5", "--model", "partition", "label",
           "entropy (nats)", "|i - j|", "Gini");
    EXPECT(run_fedhet("report --help"), 0, "usage: fedhet report --partition DST.h5 OUT.png", "gnuplot");
    EXPECT(run_fedhet("--help"), 0, "report", "partition", "inspect");
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    if (test_bin_locate(argv[0]) != 0) return 1;
    if (tmp_init("datacli") != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    fixture_ok = fixture_init() == 0;
    snprintf(env_tmpdir, sizeof env_tmpdir, "TMPDIR='%s'", report_tmp);

    RUN(test_partition_unknown_key);
    RUN(test_partition_refuses_existing_dst);
    RUN(test_partition_garbage_source);
    RUN(test_partition_min_size_out_of_reach);
    RUN(test_partition_reproducible);
    RUN(test_inspect_partition);
    RUN(test_inspect_without_stored_stats);
    RUN(test_inspect_corrupted_partition);
    RUN(test_inspect_errors);
    RUN(test_report_partition);
    RUN(test_report_corrupted_partition);
    RUN(test_report_partition_stats);
    RUN(test_report_bad_inputs);
    RUN(test_report_gnuplot_failures);
    RUN(test_report_usage);
    RUN(test_help);

    sweep(tmp_root);
    tmp_cleanup();
    return test_summary();
}
