/* Partition files and the batch loader (src/data/partfile.c, src/data/loader.c): every training sample
 * lands in exactly one client, label counts match the rows, the same seed gives the same bytes, corrupted
 * clients hold exactly the B.7 corruption of their rows, bad files fail naming the file, writes are
 * atomic, class and domain names and each row's place in its source are recorded (and files of format_version 1,
 * without them, still open), a rank owning 10 of 100 clients reads 10 % of the rows, and batches follow the promised order,
 * normalisation and augmentation.
 *
 * Images are synthetic with each row's source index written into its first pixels, so a stored image
 * tells where it came from. */
#include "test.h"
#include "test_tmp.h"

#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fedhet/core.h"
#include "fedhet/data.h"
#include "fedhet/h5io.h"
#include "fedhet/rng.h"

#define SEED 7u

/* n images c x h x w; pixel 0..2 of channel 0 hold the row index (base 256), the rest pseudo-random */
static void make_set(DataImageSet *s, int64_t n, int c, int h, int w, int classes, uint32_t stream)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->c = c;
    s->h = h;
    s->w = w;
    s->classes = classes;
    size_t row = (size_t)c * h * w;
    s->images = malloc((size_t)n * row);
    s->labels = malloc((size_t)n * sizeof *s->labels);
    FhRng rng;
    fh_rng_init(&rng, SEED, FH_RNG_TEST, stream, 0, 0);
    for (int64_t i = 0; i < n; i++) {
        uint8_t *p = s->images + (size_t)i * row;
        for (size_t j = 0; j < row; j++) p[j] = (uint8_t)fh_rng_below(&rng, 256);
        p[0] = (uint8_t)(i & 255);
        p[1] = (uint8_t)((i >> 8) & 255);
        p[2] = (uint8_t)((i >> 16) & 255);
        s->labels[i] = (int32_t)(i % classes);
    }
}

static int64_t row_id(const uint8_t *p) { return p[0] | (p[1] << 8) | ((int64_t)p[2] << 16); }

static DataPartFileSpec spec_default(const char *scheme, int k)
{
    DataPartFileSpec s;
    memset(&s, 0, sizeof s);
    s.source = "synthetic";
    s.source_format = "hdf5";
    s.partition.scheme = scheme;
    s.partition.n_clients = k;
    s.partition.alpha = 0.5;
    s.partition.min_size = 2;
    s.partition.classes_per_client = 2;
    s.partition.max_attempts = 1000;
    s.partition.seed = SEED;
    s.deflate = 4;
    return s;
}

/* partitions train by spec and writes path; returns the partition (caller frees) */
static int write_file(const char *path, const DataImageSet *train, const DataImageSet *test, DataPartFileSpec *spec,
                      DataPartition *part)
{
    FH_CHECK(data_partition(part, train->labels, train->n, train->classes, &spec->partition));
    return data_partfile_write(path, train, test, part, spec);
}

/* writes tmp_path(name) (removed at the end) by write_file and opens it into f; returns the path */
static const char *write_and_open(const char *name, const DataImageSet *train, const DataImageSet *test,
                                  DataPartFileSpec *spec, DataPartition *part, DataPartFile *f)
{
    const char *path = tmp_path(name);
    tmp_record(path);
    CHECK_OK(write_file(path, train, test, spec, part));
    CHECK_OK(data_partfile_open(f, path));
    return path;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Every entry of the folder that starts with prefix (to find leftover temporary files). */
static int count_prefixed(const char *prefix)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls -d %s* 2>/dev/null | wc -l", prefix);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = -1;
        pclose(p);
    }
    return n;
}

/* ---- writing and reading back ---- */

static void test_every_sample_once_and_counts_match(void)
{
    DataImageSet train, test;
    make_set(&train, 500, 1, 6, 6, 5, 1);
    make_set(&test, 50, 1, 6, 6, 5, 2);
    DataPartFileSpec spec = spec_default("dirichlet", 8);
    DataPartition part;
    DataPartFile f;
    write_and_open("dir.h5", &train, &test, &spec, &part, &f);
    CHECK(f.n_clients == 8 && f.classes == 5 && f.c == 1 && f.h == 6 && f.w == 6);
    CHECK(f.n_rows == 500 && f.n_test == 50 && !f.has_test_corrupted);
    CHECK(!strcmp(f.scheme, "dirichlet") && !strcmp(f.source, "synthetic"));
    uint8_t *img = malloc(500 * 36);
    int32_t *lab = malloc(500 * sizeof *lab);
    int *seen = calloc(500, sizeof *seen);
    CHECK_OK(data_partfile_read_rows(&f, DATA_ROWS_CLIENTS, 0, 500, img, lab));
    for (int k = 0; k < 8; k++) {
        int counts[5] = { 0 };
        CHECK(f.offsets[k + 1] - f.offsets[k] >= spec.partition.min_size);
        for (int64_t r = f.offsets[k]; r < f.offsets[k + 1]; r++) {
            int64_t src = row_id(img + r * 36);
            CHECK(src >= 0 && src < 500);
            if (src < 0 || src >= 500) continue;
            seen[src]++;
            CHECK(lab[r] == train.labels[src]);
            CHECK(memcmp(img + r * 36, train.images + src * 36, 36) == 0);
            counts[lab[r]]++;
        }
        for (int c = 0; c < 5; c++) CHECK(counts[c] == f.label_counts[k * 5 + c]);
    }
    for (int i = 0; i < 500; i++) CHECK_MSG(seen[i] == 1, "row %d stored %d times", i, seen[i]);
    /* the test set is stored as is */
    CHECK_OK(data_partfile_read_rows(&f, DATA_ROWS_TEST, 0, 50, img, lab));
    CHECK(memcmp(img, test.images, 50 * 36) == 0 && memcmp(lab, test.labels, 50 * sizeof *lab) == 0);
    /* mean/std attributes are the training set's */
    double mean, std;
    data_channel_stats(&train, &mean, &std);
    CHECK_NEAR(f.mean[0], mean, 1e-12);
    CHECK_NEAR(f.std[0], std, 1e-12);
    CHECK(mean > 0.4 && mean < 0.6); /* near-uniform bytes */
    data_partfile_close(&f);
    free(img), free(lab), free(seen);
    data_partition_free(&part);
    data_imageset_free(&train), data_imageset_free(&test);
}

static void test_channel_stats_exact(void)
{
    /* 2 images, 2 channels of 2 pixels: channel 0 = {0, 255, 0, 255}, channel 1 = all 51 */
    uint8_t px[8] = { 0, 255, 51, 51, 0, 255, 51, 51 };
    int32_t y[2] = { 0, 1 };
    DataImageSet s = { 2, 2, 1, 2, 2, px, y, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL };
    double mean[2], std[2];
    data_channel_stats(&s, mean, std);
    CHECK_NEAR(mean[0], 0.5, 1e-15);
    CHECK_NEAR(std[0], 0.5, 1e-15);
    CHECK_NEAR(mean[1], 0.2, 1e-15);
    CHECK_NEAR(std[1], 0.0, 1e-15);
}

static void test_same_seed_same_bytes(void)
{
    DataImageSet train, test;
    make_set(&train, 400, 1, 5, 5, 4, 3);
    make_set(&test, 40, 1, 5, 5, 4, 4);
    const char *a = tmp_path("a.h5"), *b = tmp_path("b.h5"), *c = tmp_path("c.h5");
    tmp_record(a), tmp_record(b), tmp_record(c);
    DataPartition p1, p2, p3;
    DataPartFileSpec s1 = spec_default("dirichlet", 6), s2 = s1, s3 = s1;
    s1.corruption = s2.corruption = s3.corruption = DATA_CORRUPT_GAUSSIAN_NOISE;
    s1.severity = s2.severity = s3.severity = 3;
    s1.n_corrupted = s2.n_corrupted = s3.n_corrupted = 2;
    s3.partition.seed = SEED + 1;
    CHECK_OK(write_file(a, &train, &test, &s1, &p1));
    CHECK_OK(write_file(b, &train, &test, &s2, &p2));
    CHECK_OK(write_file(c, &train, &test, &s3, &p3));
    long na = file_size(a), nb = file_size(b);
    CHECK(na > 0 && na == nb);
    char *ba = malloc((size_t)na), *bb = malloc((size_t)na), *bc = malloc((size_t)na);
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb"), *fc = fopen(c, "rb");
    CHECK(fa && fb && fc);
    if (fa && fb && fc) {
        CHECK(fread(ba, 1, (size_t)na, fa) == (size_t)na && fread(bb, 1, (size_t)na, fb) == (size_t)na);
        CHECK_MSG(memcmp(ba, bb, (size_t)na) == 0, "same seed, different bytes");
        size_t nc = fread(bc, 1, (size_t)na, fc);
        CHECK_MSG(nc != (size_t)na || memcmp(ba, bc, (size_t)na) != 0, "another seed, same bytes");
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    if (fc) fclose(fc);
    free(ba), free(bb), free(bc);
    data_partition_free(&p1), data_partition_free(&p2), data_partition_free(&p3);
    data_imageset_free(&train), data_imageset_free(&test);
}

static void test_corrupted_clients_hold_b7_corruption(void)
{
    DataImageSet train, test;
    make_set(&train, 300, 1, 8, 8, 3, 5);
    make_set(&test, 30, 1, 8, 8, 3, 6);
    DataPartFileSpec spec = spec_default("iid", 5);
    spec.corruption = DATA_CORRUPT_MOTION_BLUR;
    spec.severity = 2;
    spec.n_corrupted = 2;
    DataPartition part;
    const char *path = tmp_path("blur.h5");
    tmp_record(path);
    CHECK_OK(write_file(path, &train, &test, &spec, &part));
    DataPartFile f;
    CHECK_OK(data_partfile_open(&f, path));
    CHECK(f.has_test_corrupted && f.n_corrupted == 2 && f.severity == 2 && !strcmp(f.corruption_name, "motion_blur"));
    DataCorruptionParams params;
    CHECK_OK(data_corruption_params(&params, DATA_CORRUPT_MOTION_BLUR, 2, 8, 8));
    uint8_t stored[64], expect[64];
    int32_t y;
    for (int k = 0; k < 5; k++) {
        CHECK(f.corruption[k] == (k >= 3 ? DATA_CORRUPT_MOTION_BLUR : DATA_CORRUPT_NONE));
        for (int64_t r = f.offsets[k]; r < f.offsets[k + 1]; r++) {
            CHECK_OK(data_partfile_read_rows(&f, DATA_ROWS_CLIENTS, r, 1, stored, &y));
            memcpy(expect, train.images + part.indices[r] * 64, 64);
            if (k >= 3) data_corrupt_image(expect, 1, 8, 8, &params, SEED, 0, (uint32_t)r);
            CHECK_MSG(memcmp(stored, expect, 64) == 0, "client %d row %lld", k, (long long)r);
        }
    }
    int differs = 0;
    for (int64_t i = 0; i < 30; i++) {
        CHECK_OK(data_partfile_read_rows(&f, DATA_ROWS_TEST_CORRUPTED, i, 1, stored, &y));
        memcpy(expect, test.images + i * 64, 64);
        data_corrupt_image(expect, 1, 8, 8, &params, SEED, 1, (uint32_t)i);
        CHECK(memcmp(stored, expect, 64) == 0 && y == test.labels[i]);
        differs += memcmp(stored, test.images + i * 64, 64) != 0;
    }
    CHECK(differs > 20);
    data_partfile_close(&f);
    data_partition_free(&part);
    data_imageset_free(&train), data_imageset_free(&test);
}

/* ---- failures: clear errors, nothing left behind ---- */

static void test_write_to_missing_folder_leaves_nothing(void)
{
    DataImageSet train, test = { 0 };
    make_set(&train, 100, 1, 4, 4, 2, 7);
    DataPartFileSpec spec = spec_default("iid", 4);
    DataPartition part;
    const char *path = tmp_path("no/such/folder/x.h5");
    int st = write_file(path, &train, &test, &spec, &part);
    CHECK_MSG(st == FH_ERR_IO && strstr(fh_error_message(), "no/such/folder/x.h5"), "%d %s", st, fh_error_message());
    CHECK(count_prefixed(tmp_path("no")) == 0);
    data_partition_free(&part);
    data_imageset_free(&train);
}

static void expect_open_fails(const char *path, const char *part)
{
    DataPartFile f;
    int st = data_partfile_open(&f, path);
    CHECK_MSG(st == FH_ERR_DATA && strstr(fh_error_message(), path) && strstr(fh_error_message(), part),
              "status %d, message: %s (wanted \"%s\")", st, fh_error_message(), part);
    CHECK(f.h5 == NULL && f.offsets == NULL);
}

/* overwrites dataset `name` of an existing file with n int64 values */
static void spoil_int64(const char *path, const char *name, const int64_t *v)
{
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    CHECK(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Dclose(d);
    H5Fclose(file);
}

static void test_bad_files_fail_naming_file(void)
{
    DataImageSet train, test;
    make_set(&train, 60, 1, 4, 4, 3, 8);
    make_set(&test, 9, 1, 4, 4, 3, 9);
    DataPartFileSpec spec = spec_default("iid", 3);
    DataPartition part;
    const char *good = tmp_path("good.h5");
    tmp_record(good);
    CHECK_OK(write_file(good, &train, &test, &spec, &part));

    expect_open_fails(tmp_path("missing.h5"), "cannot open");
    /* not HDF5 */
    const char *garbage = tmp_path("garbage.h5");
    tmp_record(garbage);
    FILE *g = fopen(garbage, "wb");
    fputs("this is not an HDF5 file at all, just text\n", g);
    fclose(g);
    expect_open_fails(garbage, "not an HDF5 file");
    /* truncated */
    long n = file_size(good);
    char *bytes = malloc((size_t)n);
    FILE *in = fopen(good, "rb");
    CHECK(fread(bytes, 1, (size_t)n, in) == (size_t)n);
    fclose(in);
    const char *half = tmp_path("half.h5");
    tmp_record(half);
    FILE *out = fopen(half, "wb");
    fwrite(bytes, 1, (size_t)n / 2, out);
    fclose(out);
    {
        DataPartFile f;
        int st = data_partfile_open(&f, half);
        CHECK_MSG(st == FH_ERR_DATA && strstr(fh_error_message(), "half.h5"), "%d %s", st, fh_error_message());
    }
    /* an HDF5 file that is not a partition file */
    const char *other = tmp_path("other.h5");
    tmp_record(other);
    hid_t h = H5Fcreate(other, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(h);
    expect_open_fails(other, "not a fedhet partition file");
    /* offsets that skip rows */
    const char *offs = tmp_path("offsets.h5");
    tmp_record(offs);
    out = fopen(offs, "wb");
    fwrite(bytes, 1, (size_t)n, out);
    fclose(out);
    int64_t bad[4] = { 0, 30, 20, 60 };
    spoil_int64(offs, "/clients/offsets", bad);
    expect_open_fails(offs, "decreases at client 1");
    int64_t short_end[4] = { 0, 20, 40, 59 };
    spoil_int64(offs, "/clients/offsets", short_end);
    expect_open_fails(offs, "/clients/offsets runs from 0 to 59");
    free(bytes);

    /* a label out of range is caught when the rows are read */
    const char *lab = tmp_path("labels.h5");
    tmp_record(lab);
    DataPartition p2;
    CHECK_OK(write_file(lab, &train, &test, &spec, &p2));
    hid_t file = H5Fopen(lab, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(file, "/test/labels", H5P_DEFAULT);
    int32_t labels[9] = { 0, 1, 2, 0, 1, 7, 0, 1, 2 };
    CHECK(H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels) >= 0);
    H5Dclose(d);
    H5Fclose(file);
    DataPartFile f;
    CHECK_OK(data_partfile_open(&f, lab));
    uint8_t img[9 * 16];
    int32_t y[9];
    int st = data_partfile_read_rows(&f, DATA_ROWS_TEST, 0, 9, img, y);
    CHECK_MSG(st == FH_ERR_DATA && strstr(fh_error_message(), "label 7 at row 5"), "%d %s", st, fh_error_message());
    st = data_partfile_read_rows(&f, DATA_ROWS_TEST_CORRUPTED, 0, 1, img, y);
    CHECK_MSG(st == FH_ERR_DATA && strstr(fh_error_message(), "no corrupted test set"), "%s", fh_error_message());
    data_partfile_close(&f);
    data_partition_free(&part), data_partition_free(&p2);
    data_imageset_free(&train), data_imageset_free(&test);
}

/* ---- names and provenance ---- */

static void h5_int64_dataset(const char *path, const char *name, int64_t *out, int64_t n)
{
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    hid_t space = H5Dget_space(d);
    CHECK_MSG(H5Sget_simple_extent_npoints(space) == n, "%s has %lld values", name,
              (long long)H5Sget_simple_extent_npoints(space));
    CHECK(H5Sget_simple_extent_npoints(space) != n || H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0);
    H5Sclose(space);
    H5Dclose(d);
    H5Fclose(file);
}

static void copy_file(const char *from, const char *to)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    CHECK(system(cmd) == 0);
}

static void test_names_and_provenance(void)
{
    DataImageSet train, test;
    make_set(&train, 40, 1, 4, 4, 4, 10);
    make_set(&test, 10, 1, 4, 4, 4, 11);
    char *const classes[4] = { "ant", "bee", "cat", "dog" }, *const domains[2] = { "north", "south" };
    char path_text[40][24];
    const char *paths[40];
    int64_t listing[40];
    int32_t groups[40], test_groups[10];
    for (int i = 0; i < 40; i++) {
        snprintf(path_text[i], sizeof path_text[i], "img/%d.png", i);
        paths[i] = path_text[i], listing[i] = 3 * i + 1, groups[i] = i % 2;
    }
    for (int i = 0; i < 10; i++) test_groups[i] = i % 2;
    train.class_names = classes, train.paths = paths, train.source_index = listing;
    train.groups = groups, train.n_groups = 2, train.group_names = domains;
    test.groups = test_groups, test.n_groups = 2, test.group_names = domains;
    DataPartFileSpec spec = spec_default("dirichlet", 4);
    DataPartition part;
    DataPartFile f;
    const char *path = write_and_open("names.h5", &train, &test, &spec, &part, &f);
    CHECK(f.format_version == DATA_PARTFILE_VERSION);
    CHECK(f.class_names && f.n_domains == 2);
    for (int c = 0; f.class_names && c < 4; c++) CHECK(!strcmp(f.class_names[c], classes[c]));
    for (int d = 0; d < f.n_domains; d++) CHECK(!strcmp(f.domain_names[d], domains[d]));
    data_partfile_close(&f);
    /* each row's listing index and file; the test rows of a source without a listing of its own follow the
     * training rows */
    int64_t index[40], test_index[10];
    h5_int64_dataset(path, "/clients/source_index", index, 40);
    h5_int64_dataset(path, "/test/source_index", test_index, 10);
    FhH5File h;
    char **stored = NULL;
    int64_t n_stored = 0;
    CHECK_OK(fh_h5_open(&h, path, FH_ERR_DATA));
    CHECK_OK(fh_h5_read_strings(&h, "/clients/source_path", &stored, &n_stored));
    int has_test_paths = 1;
    CHECK_OK(fh_h5_exists(&h, "/test/source_path", &has_test_paths));
    fh_h5_close(&h);
    CHECK(n_stored == 40 && !has_test_paths);
    for (int64_t r = 0; r < 40 && n_stored == 40; r++) {
        CHECK(index[r] == listing[part.indices[r]]);
        CHECK(!strcmp(stored[r], paths[part.indices[r]]));
    }
    for (int i = 0; i < 10; i++) CHECK(test_index[i] == 40 + i);
    fh_h5_strings_free(&stored, n_stored);

    /* a file of format_version 1 (no names, domains in the attribute alone) opens without class names */
    const char *old = tmp_path("version1.h5");
    tmp_record(old);
    copy_file(path, old);
    hid_t file = H5Fopen(old, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(H5Ldelete(file, "/class_names", H5P_DEFAULT) >= 0 && H5Ldelete(file, "/domain_names", H5P_DEFAULT) >= 0);
    CHECK(H5Ldelete(file, "/clients/source_path", H5P_DEFAULT) >= 0 &&
          H5Ldelete(file, "/test/source_index", H5P_DEFAULT) >= 0);
    int64_t version = 1;
    hid_t attr = H5Aopen(file, "format_version", H5P_DEFAULT);
    CHECK(H5Awrite(attr, H5T_NATIVE_INT64, &version) >= 0);
    H5Aclose(attr);
    H5Fclose(file);
    CHECK_OK(data_partfile_open(&f, old));
    CHECK(f.format_version == 1 && !f.class_names && f.n_domains == 2 && f.test_domain);
    for (int d = 0; d < f.n_domains; d++) CHECK(!strcmp(f.domain_names[d], domains[d]));
    data_partfile_close(&f);
    /* a newer version is refused, saying so; so are names that do not match the classes */
    file = H5Fopen(old, H5F_ACC_RDWR, H5P_DEFAULT);
    version = DATA_PARTFILE_VERSION + 1;
    attr = H5Aopen(file, "format_version", H5P_DEFAULT);
    CHECK(H5Awrite(attr, H5T_NATIVE_INT64, &version) >= 0);
    H5Aclose(attr);
    H5Fclose(file);
    expect_open_fails(old, "written by a newer fedhet");
    copy_file(path, old);
    file = H5Fopen(old, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(H5Ldelete(file, "/class_names", H5P_DEFAULT) >= 0);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 4);
    const hsize_t three = 3;
    hid_t space = H5Screate_simple(1, &three, NULL);
    hid_t d = H5Dcreate2(file, "/class_names", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, "ant\0bee\0cat\0") >= 0);
    H5Dclose(d), H5Sclose(space), H5Tclose(type);
    H5Fclose(file);
    expect_open_fails(old, "/class_names holds 3 names for 4 classes");
    data_partition_free(&part);
    train.class_names = NULL, train.paths = NULL, train.source_index = NULL, train.groups = NULL;
    test.groups = NULL;
    data_imageset_free(&train), data_imageset_free(&test);
}

/* ---- loader ---- */

static void test_rank_reads_only_its_clients(void)
{
    DataImageSet train, test = { 0 };
    make_set(&train, 5000, 1, 8, 8, 10, 10);
    DataPartFileSpec spec = spec_default("dirichlet", 100);
    spec.partition.alpha = 0.5;
    DataPartition part;
    const char *path = tmp_path("hundred.h5");
    tmp_record(path);
    CHECK_OK(write_file(path, &train, &test, &spec, &part));
    DataPartFile f;
    CHECK_OK(data_partfile_open(&f, path));
    /* the 10 clients a rank of 10 would own: every 10th id */
    int owned[10];
    int64_t owned_rows = 0;
    for (int i = 0; i < 10; i++) {
        owned[i] = 3 + 10 * i;
        owned_rows += f.offsets[owned[i] + 1] - f.offsets[owned[i]];
    }
    DataLoader L;
    CHECK_OK(data_loader_init(&L, &f, owned, 10, -1));
    const int64_t row_bytes = 64 + 4, all_bytes = 5000 * row_bytes;
    CHECK(L.bytes_read == owned_rows * row_bytes);
    double share = (double)L.bytes_read / (double)all_bytes;
    printf("(read %.1f %% of the training rows) ", 100.0 * share);
    CHECK(share > 0.05 && share < 0.15);
    CHECK(data_loader_client_rows(&L, 13) == f.offsets[14] - f.offsets[13] && data_loader_client_rows(&L, 14) == -1);
    data_loader_free(&L);
    data_partfile_close(&f);
    data_partition_free(&part);
    data_imageset_free(&train);
}

/* all batches of one epoch of client k with batch size b: rows seen in order */
static void epoch_rows(DataLoader *L, DataBatchIter *it, int64_t b, int64_t *rows_out, int64_t *sizes, int *n_batches)
{
    const size_t row = (size_t)L->c * L->h * L->w;
    float *x = malloc((size_t)b * row * sizeof *x);
    int32_t *y = malloc((size_t)b * sizeof *y);
    int64_t pos = 0;
    *n_batches = 0;
    do {
        int64_t got = data_loader_next(L, it, b, x, y);
        sizes[(*n_batches)++] = got;
        for (int64_t i = 0; i < got; i++) {
            /* decode the source row from the normalised first three pixels */
            uint8_t px[3];
            for (int j = 0; j < 3; j++) {
                float v = x[i * row + j];
                px[j] = (uint8_t)lrint(255.0 * (v * 0.25 + 0.5)); /* mean 0.5, std 0.25 below */
            }
            rows_out[pos++] = row_id(px);
        }
    } while (it->pos < it->n);
    free(x), free(y);
}

static void test_loader_epochs_shuffle_and_partial_batch(void)
{
    DataImageSet train, test = { 0 };
    make_set(&train, 69, 1, 4, 4, 3, 11);
    DataPartFileSpec spec = spec_default("iid", 3); /* 23 rows each */
    const double mean = 0.5, std = 0.25;
    spec.mean = &mean;
    spec.std = &std;
    DataPartition part;
    const char *path = tmp_path("epochs.h5");
    tmp_record(path);
    CHECK_OK(write_file(path, &train, &test, &spec, &part));
    DataPartFile f;
    CHECK_OK(data_partfile_open(&f, path));
    int all[3] = { 2, 0, 1 }, one[1] = { 1 };
    DataLoader L, L1;
    CHECK_OK(data_loader_init(&L, &f, all, 3, -1));
    CHECK_OK(data_loader_init(&L1, &f, one, 1, -1));
    CHECK(L.augment == 0);
    DataBatchIter it, it1;
    int64_t r0[23], r1[23], r2[23], sizes[8];
    int nb;
    CHECK_OK(data_loader_begin(&L, &it, 1, 99, 4));
    epoch_rows(&L, &it, 10, r0, sizes, &nb);
    CHECK(nb == 3 && sizes[0] == 10 && sizes[1] == 10 && sizes[2] == 3);
    /* one epoch = each of the client's rows once */
    int seen[69] = { 0 };
    for (int i = 0; i < 23; i++) {
        CHECK(r0[i] >= 0 && r0[i] < 69);
        if (r0[i] >= 0 && r0[i] < 69) seen[r0[i]]++;
    }
    for (int64_t r = f.offsets[1]; r < f.offsets[2]; r++) CHECK(seen[part.indices[r]] == 1);
    /* next epoch: reshuffled */
    epoch_rows(&L, &it, 10, r1, sizes, &nb);
    CHECK(it.epoch == 1 && memcmp(r0, r1, sizeof r0) != 0);
    /* same (seed, client, round) on a loader owning other clients: the same order (rank-independent) */
    CHECK_OK(data_loader_begin(&L1, &it1, 1, 99, 4));
    epoch_rows(&L1, &it1, 7, r2, sizes, &nb);
    CHECK(memcmp(r0, r2, sizeof r0) == 0);
    /* another round: another order */
    CHECK_OK(data_loader_begin(&L1, &it1, 1, 99, 5));
    epoch_rows(&L1, &it1, 23, r2, sizes, &nb);
    CHECK(nb == 1 && memcmp(r0, r2, sizeof r0) != 0);
    CHECK(data_loader_begin(&L1, &it1, 0, 99, 5) == FH_ERR_USAGE);
    data_loader_free(&L), data_loader_free(&L1);
    data_partfile_close(&f);
    data_partition_free(&part);
    data_imageset_free(&train);
}

static void test_loader_normalises_with_file_stats(void)
{
    DataImageSet train, test;
    make_set(&train, 40, 3, 5, 5, 2, 12);
    make_set(&test, 6, 3, 5, 5, 2, 13);
    DataPartFileSpec spec = spec_default("iid", 2);
    DataPartition part;
    const char *path = tmp_path("norm.h5");
    tmp_record(path);
    CHECK_OK(write_file(path, &train, &test, &spec, &part));
    DataPartFile f;
    CHECK_OK(data_partfile_open(&f, path));
    float lut[3 * 256], x[6 * 75];
    int32_t y[6];
    uint8_t scratch[6 * 75];
    data_normal_lut(lut, &f);
    CHECK_OK(data_test_read(&f, lut, DATA_ROWS_TEST, 0, 6, x, y, scratch));
    double worst = 0;
    for (int i = 0; i < 6; i++)
        for (int ch = 0; ch < 3; ch++)
            for (int p = 0; p < 25; p++) {
                size_t at = (size_t)i * 75 + ch * 25 + p;
                double want = ((double)test.images[at] / 255.0 - f.mean[ch]) / f.std[ch];
                worst = fmax(worst, fabs(want - x[at]));
            }
    CHECK(worst < 1e-5);
    CHECK(memcmp(y, test.labels, sizeof y) == 0);
    data_partfile_close(&f);
    data_partition_free(&part);
    data_imageset_free(&train), data_imageset_free(&test);
}

/* Augmented 32x32 colour images are crops (zero padding 4) of the original, flipped or not. */
static void test_loader_augments_colour_32(void)
{
    DataImageSet train, test = { 0 };
    make_set(&train, 20, 3, 32, 32, 2, 14);
    DataPartFileSpec spec = spec_default("iid", 1);
    const double mean[3] = { 0, 0, 0 }, std[3] = { 1, 1, 1 };
    spec.mean = mean;
    spec.std = std;
    DataPartition part;
    const char *path = tmp_path("aug.h5");
    tmp_record(path);
    CHECK_OK(write_file(path, &train, &test, &spec, &part));
    DataPartFile f;
    CHECK_OK(data_partfile_open(&f, path));
    int client = 0;
    DataLoader L;
    CHECK_OK(data_loader_init(&L, &f, &client, 1, -1));
    CHECK(L.augment == 1);
    DataBatchIter it;
    CHECK_OK(data_loader_begin(&L, &it, 0, 5, 0));
    static float x[20 * 3072];
    int32_t y[20];
    CHECK(data_loader_next(&L, &it, 20, x, y) == 20);
    int matched = 0, flipped = 0, shifted = 0;
    for (int i = 0; i < 20; i++) {
        int64_t src = L.order[i];
        const uint8_t *img = L.images + src * 3072;
        int found = 0;
        for (int flip = 0; flip < 2 && !found; flip++)
            for (int dy = 0; dy <= 8 && !found; dy++)
                for (int dx = 0; dx <= 8 && !found; dx++) {
                    int ok = 1;
                    for (int ch = 0; ch < 3 && ok; ch++)
                        for (int yy = 0; yy < 32 && ok; yy++)
                            for (int xx = 0; xx < 32 && ok; xx++) {
                                int sy = yy + dy - 4, sx = (flip ? 31 - xx : xx) + dx - 4;
                                int v = (sy >= 0 && sy < 32 && sx >= 0 && sx < 32) ? img[ch * 1024 + sy * 32 + sx] : 0;
                                ok = fabsf(x[i * 3072 + ch * 1024 + yy * 32 + xx] - (float)v / 255.0f) < 1e-6f;
                            }
                    if (ok) {
                        found = 1;
                        flipped += flip;
                        shifted += dy != 4 || dx != 4;
                    }
                }
        matched += found;
    }
    CHECK(matched == 20);
    CHECK(flipped > 2 && flipped < 18 && shifted > 10);
    data_loader_free(&L);
    data_partfile_close(&f);
    data_partition_free(&part);
    data_imageset_free(&train);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    if (tmp_init("partfile") != 0) return 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    RUN(test_every_sample_once_and_counts_match);
    RUN(test_channel_stats_exact);
    RUN(test_same_seed_same_bytes);
    RUN(test_corrupted_clients_hold_b7_corruption);
    RUN(test_write_to_missing_folder_leaves_nothing);
    RUN(test_bad_files_fail_naming_file);
    RUN(test_names_and_provenance);
    RUN(test_rank_reads_only_its_clients);
    RUN(test_loader_epochs_shuffle_and_partial_batch);
    RUN(test_loader_normalises_with_file_stats);
    RUN(test_loader_augments_colour_32);
    tmp_cleanup();
    return test_summary();
}
