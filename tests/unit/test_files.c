/* Unit tests of the file helpers of src/core/files.c: an atomic write replaces the whole file or leaves the
 * old one (a write that fails half way, a rename that fails, a discarded stream), removes the temporaries of
 * processes that no longer run and no other file, mkdir -p of nested
 * folders, existence, whole-file reads; and of src/core/h5io.c's own deflated chunks.
 * Run alone: make build/tests/test_files && build/tests/test_files [test_name] */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "test_tmp.h"

#include "fedhet/h5io.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* the whole of path, or "" when unreadable (a static buffer) */
static const char *contents(const char *path)
{
    static char buf[1 << 16];
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* files in dir whose names start with prefix */
static int count_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

static void test_write_replaces(void)
{
    const char *dir = tmp_dir("w"), *path = tmp_path("w/out.txt");
    tmp_record(path);
    CHECK_OK(fh_write_file_atomic(path, "first\n"));
    CHECK(!strcmp(contents(path), "first\n"));
    CHECK_OK(fh_write_file_atomic(path, "second, longer\n"));
    CHECK(!strcmp(contents(path), "second, longer\n"));
    CHECK(count_prefixed(dir, "out.txt.tmp-") == 0);
}

/* A write that fails half way (the file-size limit stops it, as a full disk would): the old file stays,
 * the temporary goes, and the error names the file. */
static void test_failed_write_keeps_old(void)
{
    const char *dir = tmp_dir("fail"), *path = tmp_path("fail/keep.txt");
    tmp_record(path);
    CHECK_OK(fh_write_file_atomic(path, "old content\n"));
    static char big[1 << 16];
    memset(big, 'x', sizeof big - 1);
    struct rlimit saved, small;
    if (getrlimit(RLIMIT_FSIZE, &saved) != 0) {
        TEST_SKIP("getrlimit failed");
        return;
    }
    small = saved;
    small.rlim_cur = 4096;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN); /* EFBIG instead of the signal */
    if (setrlimit(RLIMIT_FSIZE, &small) != 0) {
        signal(SIGXFSZ, old_handler);
        TEST_SKIP("setrlimit failed");
        return;
    }
    fh_error_clear();
    int st = fh_write_file_atomic(path, big);
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, old_handler);
    CHECK(st == FH_ERR_IO);
    CHECK_MSG(strstr(fh_error_message(), "keep.txt") != NULL, "%s", fh_error_message());
    CHECK(!strcmp(contents(path), "old content\n"));
    CHECK(count_prefixed(dir, "keep.txt.tmp-") == 0);
    fh_error_clear();
}

/* The rename fails (a folder is in the way): the temporary goes, the folder is untouched. */
static void test_failed_rename(void)
{
    const char *dir = tmp_dir("ren"), *busy = tmp_dir("ren/busy");
    const char *inside = tmp_path("ren/busy/x");
    CHECK_OK(fh_write_file_atomic(inside, "x"));
    tmp_record(inside);
    fh_error_clear();
    CHECK(fh_write_file_atomic(busy, "text") == FH_ERR_IO);
    CHECK_MSG(strstr(fh_error_message(), "busy") != NULL, "%s", fh_error_message());
    CHECK(count_prefixed(dir, "busy.tmp-") == 0);
    CHECK(!strcmp(contents(inside), "x"));
    fh_error_clear();
}

/* A stream written and then discarded leaves the old file; committed, it replaces it. */
/* PATH.tmp-PID of a process that has ended (a SIGKILL) goes at the next atomic write of PATH; ours, a living
 * process's, another file's and a name that is no pid stay */
static void test_stale_temporaries(void)
{
    const char *dir = tmp_dir("stale");
    pid_t child = fork();
    if (child == 0) _exit(0);
    CHECK(child > 0 && waitpid(child, NULL, 0) == child);
    char dead[600], alive[600], mine[600], other[600], word[600];
    snprintf(dead, sizeof dead, "%s/out.csv.tmp-%ld", dir, (long)child);
    snprintf(alive, sizeof alive, "%s/out.csv.tmp-%ld", dir, (long)getppid());
    snprintf(mine, sizeof mine, "%s/out.csv.tmp-%ld", dir, (long)getpid());
    snprintf(other, sizeof other, "%s/other.csv.tmp-%ld", dir, (long)child);
    snprintf(word, sizeof word, "%s/out.csv.tmp-x1", dir);
    const char *made[] = { dead, alive, other, word };
    for (int i = 0; i < 4; i++) {
        FILE *f = fopen(made[i], "w");
        CHECK(f != NULL);
        if (f) fclose(f);
        tmp_record(made[i]);
    }
    char path[600];
    snprintf(path, sizeof path, "%s/out.csv", dir);
    tmp_record(path);
    CHECK_OK(fh_write_file_atomic(path, "new\n"));
    CHECK(access(dead, F_OK) != 0); /* removed (with a warning on stderr) */
    CHECK(access(alive, F_OK) == 0 && access(other, F_OK) == 0 && access(word, F_OK) == 0);
    CHECK(access(mine, F_OK) != 0); /* our own temporary was renamed into place */
    CHECK(!strcmp(contents(path), "new\n"));
}

static void test_stream(void)
{
    const char *dir = tmp_dir("s"), *path = tmp_path("s/table.csv");
    tmp_record(path);
    CHECK_OK(fh_write_file_atomic(path, "a,b\n"));
    FhAtomicFile a;
    CHECK_OK(fh_atomic_open(&a, path));
    fprintf(a.f, "c,d\n");
    fh_atomic_discard(&a);
    CHECK(!strcmp(contents(path), "a,b\n"));
    CHECK(count_prefixed(dir, "table.csv.tmp-") == 0);
    CHECK_OK(fh_atomic_open(&a, path));
    fprintf(a.f, "e,f\n");
    CHECK(!strcmp(contents(path), "a,b\n")); /* not before the commit */
    CHECK_OK(fh_atomic_commit(&a));
    CHECK(!strcmp(contents(path), "e,f\n"));
    /* a destination in a folder that does not exist: refused at once, naming it */
    fh_error_clear();
    CHECK(fh_atomic_open(&a, tmp_path("s/none/t.csv")) == FH_ERR_IO);
    CHECK(strstr(fh_error_message(), "none/t.csv") != NULL);
    fh_error_clear();
}

static void test_mkdir_p(void)
{
    const char *deep = tmp_path("m/a/b/c");
    tmp_record(tmp_path("m"));
    tmp_record(tmp_path("m/a"));
    tmp_record(tmp_path("m/a/b"));
    tmp_record(deep);
    CHECK_OK(fh_mkdir_p(deep));
    struct stat st;
    CHECK(stat(deep, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK_OK(fh_mkdir_p(deep)); /* again: nothing to do */
    char slash[700];
    snprintf(slash, sizeof slash, "%s/", deep);
    CHECK_OK(fh_mkdir_p(slash)); /* a trailing slash */
    /* a file in the way */
    const char *file = tmp_path("m/a/file");
    tmp_record(file);
    CHECK_OK(fh_write_file_atomic(file, ""));
    fh_error_clear();
    CHECK(fh_mkdir_p(tmp_path("m/a/file/d")) == FH_ERR_IO);
    CHECK_MSG(strstr(fh_error_message(), "m/a/file") != NULL, "%s", fh_error_message());
    fh_error_clear();
    CHECK(fh_mkdir_p(file) == FH_ERR_IO);
    fh_error_clear();
}

static void test_exists(void)
{
    const char *dir = tmp_dir("e"), *file = tmp_path("e/f");
    tmp_record(file);
    CHECK_OK(fh_write_file_atomic(file, "1"));
    CHECK(fh_path_exists(dir, "f"));
    CHECK(fh_path_exists(dir, NULL) && fh_path_exists(dir, "") && fh_path_exists(dir, "."));
    CHECK(fh_path_exists(file, NULL));
    CHECK(!fh_path_exists(dir, "g"));
    CHECK(!fh_path_exists(file, ".")); /* a file is no folder */
    CHECK(!fh_path_exists(tmp_path("e/none"), NULL));
}

static void test_read_file(void)
{
    const char *path = tmp_path("r.txt");
    tmp_record(path);
    CHECK_OK(fh_write_file_atomic(path, "line 1\nline 2\n"));
    char *text = NULL;
    CHECK_OK(fh_read_file(path, &text, FH_ERR_DATA));
    CHECK(text && !strcmp(text, "line 1\nline 2\n"));
    free(text);
    FILE *f = fopen(path, "wb");
    fwrite("a\0b", 1, 3, f);
    fclose(f);
    fh_error_clear();
    CHECK(fh_read_file(path, &text, FH_ERR_DATA) == FH_ERR_DATA && text == NULL);
    CHECK(strstr(fh_error_message(), "NUL") != NULL);
    fh_error_clear();
    CHECK(fh_read_file(tmp_path("none.txt"), &text, FH_ERR_USAGE) == FH_ERR_USAGE);
    fh_error_clear();
}

/* rows written in whole deflated chunks by fh_h5_write_rows (libdeflate, H5Dwrite_chunk; the last chunk part-filled)
 * read back through HDF5's own deflate filter (zlib) as written, beside a block that is not chunk-aligned and goes
 * through HDF5's filter */
/* rows written as whole chunks (deflated by libdeflate, or raw without a filter) or by HDF5 read back the same */
static void check_whole_chunks(int deflate)
{
    enum { ROWS = 23, COLS = 40, CHUNK = 4 };
    static uint8_t rows[ROWS][COLS], back[ROWS][COLS];
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) rows[r][c] = (uint8_t)(c < 8 ? r * 7 + c * c : 3); /* compressible: most of a row the same */
    const hsize_t dims[2] = { ROWS, COLS };
    const FhH5Layout layout = { CHUNK, deflate, 0 };
    FhH5File f;
    hid_t dset;
    memset(back, 0, sizeof back);
    CHECK(fh_h5_create(&f, tmp_path("chunks.h5"), FH_ERR_IO) == FH_OK);
    CHECK(fh_h5_create_dataset(&f, "/rows", H5T_STD_U8LE, 2, dims, &layout, &dset) == FH_OK);
    CHECK(fh_h5_write_rows(&f, dset, "/rows", H5T_NATIVE_UINT8, 0, 8, rows[0]) == FH_OK);    /* two whole chunks */
    CHECK(fh_h5_write_rows(&f, dset, "/rows", H5T_NATIVE_UINT8, 8, 6, rows[8]) == FH_OK);    /* 1.5 chunks: HDF5's */
    CHECK(fh_h5_write_rows(&f, dset, "/rows", H5T_NATIVE_UINT8, 14, 2, rows[14]) == FH_OK);  /* the rest of one */
    CHECK(fh_h5_write_rows(&f, dset, "/rows", H5T_NATIVE_UINT8, 16, 7, rows[16]) == FH_OK);  /* to the end */
    H5Dclose(dset);
    CHECK(fh_h5_commit(&f) == FH_OK);
    CHECK(fh_h5_open(&f, tmp_path("chunks.h5"), FH_ERR_DATA) == FH_OK);
    CHECK(fh_h5_open_dataset(&f, "/rows", &dset) == FH_OK);
    hid_t dcpl = H5Dget_create_plist(dset);
    CHECK(H5Pget_layout(dcpl) == H5D_CHUNKED);
    if (deflate) {
        unsigned flags, cd[1];
        size_t n_cd = 1;
        CHECK(H5Pget_filter2(dcpl, 0, &flags, &n_cd, cd, 0, NULL, NULL) == H5Z_FILTER_DEFLATE && cd[0] == (unsigned)deflate);
        CHECK(H5Dget_storage_size(dset) > 0 && H5Dget_storage_size(dset) < sizeof rows / 2);
    } else {
        CHECK(H5Pget_nfilters(dcpl) == 0);
        CHECK(H5Dget_storage_size(dset) == (ROWS + CHUNK - 1) / CHUNK * CHUNK * COLS); /* the last chunk whole */
    }
    H5Pclose(dcpl);
    CHECK(fh_h5_read_rows(&f, dset, "/rows", H5T_NATIVE_UINT8, 0, ROWS, back[0]) == FH_OK);
    CHECK(!memcmp(rows, back, sizeof rows));
    H5Dclose(dset);
    fh_h5_close(&f);
}

static void test_deflated_chunks(void) { check_whole_chunks(4); }
static void test_raw_chunks(void) { check_whole_chunks(0); }

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    if (tmp_init("files") != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN(test_write_replaces);
    RUN(test_failed_write_keeps_old);
    RUN(test_failed_rename);
    RUN(test_stale_temporaries);
    RUN(test_stream);
    RUN(test_mkdir_p);
    RUN(test_exists);
    RUN(test_read_file);
    RUN(test_deflated_chunks);
    RUN(test_raw_chunks);
    tmp_cleanup();
    return test_summary();
}
