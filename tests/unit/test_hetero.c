/* Heterogeneity statistics of a partition (src/data/hetero.c): label entropy, effective classes, total
 * variation and earth mover's distance to the pooled label distribution, and the Gini coefficient of the
 * client sizes, against values worked out by hand on small count matrices and against identities (IID
 * clients are at distance 0, two labels make EMD = TV, one client holding everything gives Gini
 * (K - 1) / K); the /stats cache of a partition file and its fallback to /clients/label_counts. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#endif

#include "test.h"
#include "test_tmp.h"

#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>

#include "fedhet/core.h"
#include "fedhet/data.h"

/* 3 clients x 3 labels:
 *   client 0: 4 0 0   p = (1, 0, 0)
 *   client 1: 2 2 0   p = (1/2, 1/2, 0)
 *   client 2: 0 2 6   p = (0, 1/4, 3/4)
 * pooled: 6 4 6 of 16, q = (3/8, 1/4, 3/8), cumulative Q = (3/8, 5/8, 1). */
static const int32_t hand_counts[9] = { 4, 0, 0, 2, 2, 0, 0, 2, 6 };

static void check_hand_values(const DataHetero *h)
{
    CHECK(h->n_clients == 3 && h->classes == 3);
    /* entropy: 0; ln 2; -(1/4 ln 1/4 + 3/4 ln 3/4) */
    CHECK_NEAR(h->entropy[0], 0.0, 1e-15);
    CHECK_NEAR(h->entropy[1], log(2.0), 1e-15);
    CHECK_NEAR(h->entropy[2], 0.25 * log(4.0) + 0.75 * log(4.0 / 3.0), 1e-15);
    CHECK_NEAR(h->effective_classes[0], 1.0, 1e-15);
    CHECK_NEAR(h->effective_classes[1], 2.0, 1e-15);
    CHECK_NEAR(h->effective_classes[2], 4.0 / pow(3.0, 0.75), 1e-14); /* 4^(1/4) (4/3)^(3/4) */
    /* TV: (5/8 + 2/8 + 3/8) / 2; (1/8 + 2/8 + 3/8) / 2; (3/8 + 0 + 3/8) / 2 */
    CHECK_NEAR(h->tv[0], 5.0 / 8.0, 1e-15);
    CHECK_NEAR(h->tv[1], 3.0 / 8.0, 1e-15);
    CHECK_NEAR(h->tv[2], 3.0 / 8.0, 1e-15);
    /* EMD = |P(0) - Q(0)| + |P(1) - Q(1)|: P = (1, 1) -> 5/8 + 3/8; (1/2, 1) -> 1/8 + 3/8; (0, 1/4) -> 3/8 + 3/8.
     * Client 0 must move 3/8 of its mass from label 0 to 1 and 3/8 to 2: 3/8 + 2 * 3/8 = 1 as well. */
    CHECK_NEAR(h->emd[0], 1.0, 1e-15);
    CHECK_NEAR(h->emd[1], 0.5, 1e-15);
    CHECK_NEAR(h->emd[2], 0.75, 1e-15);
    /* sizes 4, 4, 8: sum_ij |n_i - n_j| = 4 pairs x 4 = 16; / (2 x 3 x 16) = 1/6 */
    CHECK_NEAR(h->size_gini, 1.0 / 6.0, 1e-15);
}

static void test_hand_matrix(void)
{
    DataHetero h;
    CHECK_OK(data_hetero_compute(&h, hand_counts, 3, 3));
    if (h.entropy) check_hand_values(&h);
    double s[4];
    data_summary4(h.tv, 3, s); /* 3/8, 3/8, 5/8 */
    CHECK_NEAR(s[0], 3.0 / 8.0, 1e-15);
    CHECK_NEAR(s[1], 3.0 / 8.0, 1e-15);
    CHECK_NEAR(s[2], 5.0 / 8.0, 1e-15);
    CHECK_NEAR(s[3], 11.0 / 24.0, 1e-15);
    data_hetero_free(&h);
    CHECK(h.entropy == NULL && h.tv == NULL);
}

/* clients whose labels follow the pooled distribution: TV = EMD = 0; uniform labels: entropy ln C */
static void test_iid_clients(void)
{
    const int32_t counts[3 * 4] = { 5, 5, 5, 5, 1, 1, 1, 1, 10, 10, 10, 10 };
    DataHetero h;
    CHECK_OK(data_hetero_compute(&h, counts, 3, 4));
    for (int k = 0; k < 3 && h.entropy; k++) {
        CHECK_NEAR(h.tv[k], 0.0, 1e-15);
        CHECK_NEAR(h.emd[k], 0.0, 1e-15);
        CHECK_NEAR(h.entropy[k], log(4.0), 1e-15);
        CHECK_NEAR(h.effective_classes[k], 4.0, 1e-14);
    }
    /* sizes 20, 4, 40: sorted 4, 20, 40; sum_ij |n_i - n_j| = 2 (16 + 36 + 20) = 144; / (2 x 3 x 64) = 3/8 */
    CHECK_NEAR(h.size_gini, 3.0 / 8.0, 1e-15);
    data_hetero_free(&h);

    const int32_t equal[2 * 3] = { 3, 1, 0, 0, 1, 3 };
    CHECK_OK(data_hetero_compute(&h, equal, 2, 3));
    CHECK(h.size_gini == 0.0);
    data_hetero_free(&h);
}

/* with two labels the |i - j| ground distance is the 0/1 one, so EMD = TV; with more labels EMD >= TV
 * (moving mass costs at least 1 per unit) and EMD <= (C - 1) TV */
static void test_emd_bounds(void)
{
    const int32_t two[4 * 2] = { 7, 1, 0, 9, 3, 3, 12, 0 };
    DataHetero h;
    CHECK_OK(data_hetero_compute(&h, two, 4, 2));
    for (int k = 0; k < 4 && h.emd; k++) CHECK_NEAR(h.emd[k], h.tv[k], 1e-15);
    data_hetero_free(&h);

    const int32_t five[3 * 5] = { 9, 0, 0, 0, 1, 0, 3, 3, 0, 0, 1, 1, 1, 1, 20 };
    CHECK_OK(data_hetero_compute(&h, five, 3, 5));
    for (int k = 0; k < 3 && h.emd; k++) {
        CHECK(h.emd[k] >= h.tv[k] - 1e-15);
        CHECK(h.emd[k] <= 4 * h.tv[k] + 1e-15);
    }
    /* client 0 (9 of label 0, 1 of label 4) against pooled (10, 4, 4, 1, 21) / 40: hand-computed
     * P = (0.9, 0.9, 0.9, 0.9), Q = (0.25, 0.35, 0.45, 0.475): EMD = 0.65 + 0.55 + 0.45 + 0.425 */
    if (h.emd) CHECK_NEAR(h.emd[0], 2.075, 1e-14);
    data_hetero_free(&h);
}

/* one client with every row: Gini (K - 1) / K; empty clients have no distribution (NAN) and the summary
 * leaves them out */
static void test_extremes_and_empty_clients(void)
{
    const int32_t counts[4 * 2] = { 0, 0, 3, 5, 0, 0, 0, 0 };
    DataHetero h;
    CHECK_OK(data_hetero_compute(&h, counts, 4, 2));
    CHECK_NEAR(h.size_gini, 3.0 / 4.0, 1e-15);
    CHECK(isnan(h.entropy[0]) && isnan(h.tv[2]) && isnan(h.emd[3]) && isnan(h.effective_classes[0]));
    CHECK_NEAR(h.tv[1], 0.0, 1e-15);
    double s[4];
    data_summary4(h.entropy, 4, s);
    CHECK_NEAR(s[0], h.entropy[1], 0);
    CHECK_NEAR(s[1], h.entropy[1], 0);
    CHECK_NEAR(s[3], h.entropy[1], 0);
    data_hetero_free(&h);

    const double even[4] = { 4, 1, NAN, 3 }, none[2] = { NAN, NAN };
    data_summary4(even, 4, s); /* 1, 3, 4: odd count after NAN */
    CHECK(s[0] == 1 && s[1] == 3 && s[2] == 4 && s[3] == 8.0 / 3.0);
    const double four[4] = { 4, 1, 2, 3 };
    data_summary4(four, 4, s);
    CHECK(s[1] == 2.5 && s[3] == 2.5);
    data_summary4(none, 2, s);
    CHECK(isnan(s[0]) && isnan(s[1]) && isnan(s[2]) && isnan(s[3]));
}

static void test_bad_counts(void)
{
    const int32_t negative[4] = { 1, -1, 2, 2 }, zero[4] = { 0, 0, 0, 0 };
    DataHetero h;
    CHECK(data_hetero_compute(&h, negative, 2, 2) == FH_ERR_DATA);
    CHECK(strstr(fh_error_message(), "client 0, label 1") != NULL);
    CHECK(h.entropy == NULL);
    CHECK(data_hetero_compute(&h, zero, 2, 2) == FH_ERR_DATA);
    CHECK(strstr(fh_error_message(), "no training rows") != NULL);
    fh_error_clear();
}

/* ---- the /stats cache of a partition file ---- */

/* The hand matrix as a partition file: 16 rows of 1x2x2, clients 0..2 own rows 0-3, 4-7, 8-15. */
static int write_hand_file(const char *path)
{
    int32_t labels[16] = { 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2 };
    uint8_t images[16 * 4] = { 0 };
    int64_t offsets[4] = { 0, 4, 8, 16 }, indices[16];
    for (int i = 0; i < 16; i++) indices[i] = i, images[i * 4] = (uint8_t)(i * 9);
    DataImageSet train = { 16, 1, 2, 2, 3, images, labels, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL },
                 test = { 0, 1, 2, 2, 3, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL };
    DataPartition part = { 3, offsets, indices };
    DataPartFileSpec spec;
    memset(&spec, 0, sizeof spec);
    spec.source = "hand";
    spec.source_format = "hdf5";
    spec.partition.scheme = "iid";
    spec.partition.n_clients = 3;
    spec.deflate = 1;
    tmp_record(path);
    return data_partfile_write(path, &train, &test, &part, &spec);
}

/* Replaces /stats with finite values for 3 clients, but damage 0: a NAN entropy for client 1 (which has
 * rows); damage 1: a tv_to_global of length 2; 2: none. */
static int write_stats(const char *path, int damage)
{
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (file < 0) return -1;
    if (H5Lexists(file, "/stats", H5P_DEFAULT) > 0) H5Ldelete(file, "/stats", H5P_DEFAULT);
    hid_t group = H5Gcreate2(file, "/stats", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const char *names[4] = { "label_entropy", "effective_classes", "tv_to_global", "emd_to_global" };
    const double fine[3] = { 0.1, 0.2, 0.3 }, with_nan[3] = { 0.1, NAN, 0.3 };
    herr_t err = group < 0 ? -1 : 0;
    for (int i = 0; i < 4 && err >= 0; i++) {
        hsize_t dims = damage == 1 && i == 2 ? 2 : 3;
        hid_t space = H5Screate_simple(1, &dims, NULL);
        hid_t d = H5Dcreate2(group, names[i], H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        err = H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, damage == 0 && i == 0 ? with_nan : fine);
        H5Dclose(d);
        H5Sclose(space);
    }
    const double gini = 0.25;
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(group, "size_gini", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    if (err >= 0) err = H5Awrite(a, H5T_NATIVE_DOUBLE, &gini);
    H5Aclose(a);
    H5Sclose(space);
    H5Gclose(group);
    H5Fclose(file);
    return err;
}

static void test_partfile_stats(void)
{
    const char *path = tmp_path("hand.h5");
    CHECK_OK(write_hand_file(path));
    DataPartFile f;
    DataHetero h;
    int stored = -1;
    CHECK_OK(data_partfile_open(&f, path));
    CHECK_OK(data_partfile_hetero(&f, &h, &stored));
    CHECK(stored == 1);
    if (h.entropy) check_hand_values(&h);
    data_hetero_free(&h);
    data_partfile_close(&f);

    /* a file made before /stats existed: computed from the label counts, the same values */
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(file >= 0 && H5Ldelete(file, "/stats", H5P_DEFAULT) >= 0);
    H5Fclose(file);
    CHECK_OK(data_partfile_open(&f, path));
    CHECK_OK(data_partfile_hetero(&f, &h, &stored));
    CHECK(stored == 0);
    if (h.entropy) check_hand_values(&h);
    data_hetero_free(&h);
    data_partfile_close(&f);

    /* stored values are what is reported (the cache is read, not recomputed) */
    CHECK(write_stats(path, 2) >= 0);
    CHECK_OK(data_partfile_open(&f, path));
    CHECK_OK(data_partfile_hetero(&f, &h, &stored));
    CHECK(stored == 1);
    if (h.entropy) CHECK(h.entropy[0] == 0.1 && h.emd[2] == 0.3 && h.size_gini == 0.25);
    data_hetero_free(&h);
    data_partfile_close(&f);

    /* a damaged cache is refused naming the dataset */
    const char *expected[2] = { "/stats/label_entropy[1] = nan", "/stats/tv_to_global has 2 entries" };
    for (int damage = 0; damage < 2; damage++) {
        CHECK(write_stats(path, damage) >= 0);
        CHECK_OK(data_partfile_open(&f, path));
        CHECK(data_partfile_hetero(&f, &h, &stored) == FH_ERR_DATA);
        CHECK_MSG(strstr(fh_error_message(), expected[damage]) && strstr(fh_error_message(), path), "%s",
                  fh_error_message());
        CHECK(h.entropy == NULL);
        data_partfile_close(&f);
        fh_error_clear();
    }
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    if (tmp_init("hetero") != 0) return 1;
    RUN(test_hand_matrix);
    RUN(test_iid_clients);
    RUN(test_emd_bounds);
    RUN(test_extremes_and_empty_clients);
    RUN(test_bad_counts);
    RUN(test_partfile_stats);
    tmp_cleanup();
    return test_summary();
}
