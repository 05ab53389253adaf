/* Unit tests for the client partitioner (src/data/partition.c, docs/methods/baselines.md B.3 - B.6):
 * coverage (every row in exactly one client, or at most one where the scheme leaves rows unused), the sizes
 * each variant promises, min_size, the balancing trick of B.4, label mixes at alpha = 1e6, shard and
 * class limits of B.5, the clean/corrupted split of the quality variant, determinism by seed, and the
 * error messages for infeasible or invalid settings. Labels are synthetic (balanced, or drawn from the
 * Philox test stream); a last test partitions the real Fashion-MNIST labels when Debian's
 * dataset-fashion-mnist is installed, and prints how many Dirichlet draws it needed (debug log).
 *
 * Run alone:  build/tests/test_partition [test_name]
 * or without make:
 *   mpicc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -fopenmp-simd -Wall -Wextra -Wno-unused-parameter \
 *     -Iinclude -Itests/unit tests/unit/test_partition.c src/data/partition.c src/data/idx.c \
 *     src/core/error.c src/core/log.c src/core/rng.c -lz -lm -o /tmp/test_partition && /tmp/test_partition */
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fedhet/core.h"
#include "fedhet/data.h"
#include "fedhet/rng.h"

#define SEED 20250101u
#define N_SYN 2000
#define C_SYN 10

/* ---- fixtures ---- */

/* labels[i] = i mod C: every class has N/C rows (when C divides N) */
static int32_t *labels_balanced(int64_t n, int classes)
{
    int32_t *y = malloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)(i % classes);
    return y;
}

/* labels drawn uniformly from the Philox test stream: unequal class sizes */
static int32_t *labels_random(int64_t n, int classes, uint32_t stream)
{
    int32_t *y = malloc((size_t)n * sizeof *y);
    FhRng rng;
    fh_rng_init(&rng, SEED, FH_RNG_TEST, stream, 0, 0);
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)fh_rng_below(&rng, (uint64_t)classes);
    return y;
}

static DataPartitionSpec spec_of(const char *scheme, const char *variant, int n_clients)
{
    DataPartitionSpec s = {0};
    s.scheme = scheme;
    s.variant = variant;
    s.n_clients = n_clients;
    s.seed = 7;
    return s;
}

static int64_t client_size(const DataPartition *p, int k) { return p->offsets[k + 1] - p->offsets[k]; }

/* Structure of a partition: offsets start at 0 and never decrease, every index is a row of [0, n).
 * Returns the number of rows used more than once (extra copies) and, in *n_unused, rows never used. */
static int64_t check_structure(const DataPartition *p, int n_clients, int64_t n, int64_t *n_unused)
{
    CHECK(p->n_clients == n_clients);
    CHECK(p->offsets != NULL && p->indices != NULL);
    if (!p->offsets || !p->indices) return -1;
    CHECK(p->offsets[0] == 0);
    for (int k = 0; k < n_clients; k++) CHECK_MSG(p->offsets[k + 1] >= p->offsets[k], "client %d", k);
    int64_t total = p->offsets[n_clients], extra = 0, unused = 0;
    int32_t *seen = calloc((size_t)n, sizeof *seen);
    for (int64_t i = 0; i < total; i++) {
        int64_t row = p->indices[i];
        if (row < 0 || row >= n) {
            CHECK_MSG(0, "index %lld out of [0, %lld)", (long long)row, (long long)n);
            continue;
        }
        if (seen[row]++) extra++;
    }
    for (int64_t i = 0; i < n; i++) unused += seen[i] == 0;
    free(seen);
    if (n_unused) *n_unused = unused;
    return extra;
}

/* every row exactly once */
static void check_exact_cover(const DataPartition *p, int n_clients, int64_t n)
{
    int64_t unused = -1, extra = check_structure(p, n_clients, n, &unused);
    CHECK_MSG(extra == 0 && unused == 0, "%lld rows repeated, %lld unused", (long long)extra, (long long)unused);
    CHECK(p->offsets[n_clients] == n);
}

/* counts[k * classes + c] = rows of class c held by client k (caller frees) */
static int64_t *class_counts(const DataPartition *p, const int32_t *labels, int classes)
{
    int64_t *counts = calloc((size_t)p->n_clients * classes, sizeof *counts);
    for (int k = 0; k < p->n_clients; k++)
        for (int64_t i = p->offsets[k]; i < p->offsets[k + 1]; i++) counts[(size_t)k * classes + labels[p->indices[i]]]++;
    return counts;
}

static int n_distinct_classes(const int64_t *counts_row, int classes)
{
    int d = 0;
    for (int c = 0; c < classes; c++) d += counts_row[c] > 0;
    return d;
}

static int64_t min_client_size(const DataPartition *p)
{
    int64_t m = INT64_MAX;
    for (int k = 0; k < p->n_clients; k++)
        if (client_size(p, k) < m) m = client_size(p, k);
    return m;
}

/* ---- B.3 IID ---- */

static void test_iid_niid_bench_array_split(void)
{
    const int64_t n = 2003; /* 2003 = 7 * 286 + 1: one client gets 287 */
    int32_t *y = labels_random(n, C_SYN, 1);
    const int ks[3] = {7, 10, 2003};
    for (int t = 0; t < 3; t++) {
        const int K = ks[t];
        DataPartitionSpec s = spec_of("iid", NULL, K);
        DataPartition p;
        CHECK_OK(data_partition(&p, y, n, C_SYN, &s));
        check_exact_cover(&p, K, n);
        for (int k = 0; k < K; k++)
            CHECK_MSG(client_size(&p, k) == n / K + (k < n % K ? 1 : 0), "K=%d client %d size %lld", K, k,
                      (long long)client_size(&p, k));
        data_partition_free(&p);
        CHECK(p.offsets == NULL && p.indices == NULL && p.n_clients == 0);
    }
    free(y);
}

static void test_iid_flood_leaves_remainder_unused(void)
{
    const int64_t n = 2003;
    const int K = 7;
    int32_t *y = labels_random(n, C_SYN, 2);
    DataPartitionSpec s = spec_of("iid", "flood", K);
    DataPartition p;
    CHECK_OK(data_partition(&p, y, n, C_SYN, &s));
    int64_t unused = -1;
    CHECK(check_structure(&p, K, n, &unused) == 0);
    CHECK_MSG(unused == n % K, "unused %lld, expected N mod K = %lld", (long long)unused, (long long)(n % K));
    for (int k = 0; k < K; k++) CHECK(client_size(&p, k) == n / K);
    data_partition_free(&p);
    free(y);
}

static void test_iid_fl_simulator_client0_takes_remainder(void)
{
    const int64_t n = 2003;
    const int K = 7;
    int32_t *y = labels_random(n, C_SYN, 3);
    DataPartitionSpec s = spec_of("iid", "fl-simulator", K), s0 = spec_of("iid", "niid-bench", K);
    DataPartition p, p0;
    CHECK_OK(data_partition(&p, y, n, C_SYN, &s));
    CHECK_OK(data_partition(&p0, y, n, C_SYN, &s0));
    check_exact_cover(&p, K, n);
    CHECK(client_size(&p, 0) == n / K + n % K);
    for (int k = 1; k < K; k++) CHECK(client_size(&p, k) == n / K);
    /* both variants cut the same permutation stream into contiguous slices */
    if (p.indices && p0.indices) CHECK(memcmp(p.indices, p0.indices, (size_t)n * sizeof *p.indices) == 0);
    data_partition_free(&p);
    data_partition_free(&p0);
    free(y);
}

/* ---- B.4 Dirichlet, NIID-Bench ---- */

/* B.4 balancing trick, checked from the output: a client holding >= N/K rows of classes < c receives
 * nothing of class c. One exception is the procedure's own: the last client's chunk is n_c minus the last
 * cut point floor(cumsum(p)_{K-2} n_c), and a float cumsum that ends just below 1 leaves it one row even
 * when its p is 0 (NumPy does the same), so client K-1 may hold one such row per class. */
static void check_balancing(const DataPartition *p, const int32_t *labels, int64_t n, int classes)
{
    int64_t *counts = class_counts(p, labels, classes);
    const double fair = (double)n / p->n_clients;
    int violations = 0;
    for (int k = 0; k < p->n_clients; k++) {
        int64_t before = 0;
        for (int c = 0; c < classes; c++) {
            int64_t allowed = k == p->n_clients - 1 ? 1 : 0;
            if ((double)before >= fair && counts[(size_t)k * classes + c] > allowed) violations++;
            before += counts[(size_t)k * classes + c];
        }
    }
    CHECK_MSG(violations == 0, "%d (client, class) pairs break the balancing trick", violations);
    free(counts);
}

static void test_dirichlet_niid_bench_cover_and_min_size(void)
{
    int32_t *y = labels_random(N_SYN, C_SYN, 4);
    const double alphas[3] = {0.1, 0.5, 5.0};
    const int ks[3] = {10, 20, 50};
    for (int a = 0; a < 3; a++) {
        DataPartitionSpec s = spec_of("dirichlet", NULL, ks[a]);
        s.alpha = alphas[a];
        DataPartition p;
        CHECK_OK(data_partition(&p, y, N_SYN, C_SYN, &s));
        if (!p.offsets) continue;
        check_exact_cover(&p, ks[a], N_SYN);
        CHECK_MSG(min_client_size(&p) >= 10, "alpha=%g K=%d: smallest client %lld", alphas[a], ks[a],
                  (long long)min_client_size(&p));
        check_balancing(&p, y, N_SYN, C_SYN);
        /* step 3 shuffles each client's list: a client with two or more classes is not label-sorted */
        int64_t *counts = class_counts(&p, y, C_SYN);
        int n_sorted = 0;
        for (int k = 0; k < ks[a]; k++) {
            if (n_distinct_classes(counts + (size_t)k * C_SYN, C_SYN) < 2) continue;
            int sorted = 1;
            for (int64_t i = p.offsets[k] + 1; i < p.offsets[k + 1]; i++)
                sorted &= y[p.indices[i]] >= y[p.indices[i - 1]];
            n_sorted += sorted;
        }
        CHECK_MSG(n_sorted == 0, "alpha=%g: %d clients keep their rows in class order", alphas[a], n_sorted);
        free(counts);
        data_partition_free(&p);
    }
    /* an explicit min_size */
    DataPartitionSpec s = spec_of("dirichlet", "niid-bench", 10);
    s.alpha = 0.3;
    s.min_size = 60;
    DataPartition p;
    CHECK_OK(data_partition(&p, y, N_SYN, C_SYN, &s));
    if (p.offsets) CHECK(min_client_size(&p) >= 60);
    data_partition_free(&p);
    free(y);
}

/* small alpha gives skewed clients: most hold few classes */
static void test_dirichlet_small_alpha_is_skewed(void)
{
    int32_t *y = labels_balanced(N_SYN, C_SYN);
    DataPartitionSpec s = spec_of("dirichlet", NULL, 10);
    s.alpha = 0.1;
    DataPartition p;
    CHECK_OK(data_partition(&p, y, N_SYN, C_SYN, &s));
    if (p.offsets) {
        int64_t *counts = class_counts(&p, y, C_SYN);
        double mean_top = 0.0;
        for (int k = 0; k < 10; k++) {
            int64_t top = 0;
            for (int c = 0; c < C_SYN; c++)
                if (counts[k * C_SYN + c] > top) top = counts[k * C_SYN + c];
            mean_top += (double)top / (double)client_size(&p, k) / 10.0;
        }
        /* uniform mixes would give 0.1; Dir(0.1) puts most of a client on one or two classes */
        CHECK_MSG(mean_top > 0.4, "mean largest-class share %.3f", mean_top);
        free(counts);
    }
    data_partition_free(&p);
    free(y);
}

/* alpha = 1e6: p is within ~1e-3 of 1/K, so every client's mix is within a few rows of uniform.
 * Tolerance: |share - 1/C| <= 0.02 (each client has ~200 rows, ~20 per class; floors move +-1 row). */
static void test_dirichlet_large_alpha_uniform_mix(void)
{
    int32_t *y = labels_balanced(N_SYN, C_SYN);
    DataPartitionSpec s = spec_of("dirichlet", NULL, 10);
    s.alpha = 1e6;
    DataPartition p;
    CHECK_OK(data_partition(&p, y, N_SYN, C_SYN, &s));
    if (p.offsets) {
        check_exact_cover(&p, 10, N_SYN);
        int64_t *counts = class_counts(&p, y, C_SYN);
        double worst = 0.0;
        for (int k = 0; k < 10; k++)
            for (int c = 0; c < C_SYN; c++) {
                double dev = fabs((double)counts[k * C_SYN + c] / (double)client_size(&p, k) - 1.0 / C_SYN);
                if (dev > worst) worst = dev;
            }
        CHECK_MSG(worst <= 0.02, "largest deviation from 1/C: %.4f", worst);
        free(counts);
        /* step 2b shuffles idx_c before cutting it: a client's ~20 rows of a class (rows c + C m) are not
         * one contiguous run m0..m0+19 of the class's rows */
        int n_runs = 0;
        for (int k = 0; k < 10; k++)
            for (int c = 0; c < C_SYN; c++) {
                int64_t lo = INT64_MAX, hi = -1, cnt = 0;
                for (int64_t i = p.offsets[k]; i < p.offsets[k + 1]; i++) {
                    int64_t row = p.indices[i];
                    if (y[row] != c) continue;
                    cnt++;
                    if (row / C_SYN < lo) lo = row / C_SYN;
                    if (row / C_SYN > hi) hi = row / C_SYN;
                }
                n_runs += cnt >= 5 && hi - lo + 1 == cnt;
            }
        CHECK_MSG(n_runs == 0, "%d (client, class) chunks are unshuffled runs", n_runs);
    }
    data_partition_free(&p);
    free(y);
}

/* ---- B.4 prior sampling (FL-Simulator) ---- */

static void test_dirichlet_prior_equal_sizes(void)
{
    const int64_t n = 2003;
    const int K = 7;
    int32_t *y = labels_random(n, C_SYN, 5);
    const double alphas[2] = {0.1, 1.0};
    for (int a = 0; a < 2; a++) {
        DataPartitionSpec s = spec_of("dirichlet", "prior", K);
        s.alpha = alphas[a];
        DataPartition p;
        CHECK_OK(data_partition(&p, y, n, C_SYN, &s));
        if (!p.offsets) continue;
        check_structure(&p, K, n, NULL); /* rows may repeat once a class is refilled */
        CHECK(p.offsets[K] == n);
        CHECK(client_size(&p, 0) == n / K + n % K);
        for (int k = 1; k < K; k++) CHECK(client_size(&p, k) == n / K);
        data_partition_free(&p);
    }
    free(y);
}

/* alpha = 1e6: pi_k ~ uniform, so each client's mix is multinomial around 1/C.
 * 20000 rows, K = 10: 2000 per client, share sd 0.0067; tolerance 0.035 (~5 sd). */
static void test_dirichlet_prior_large_alpha_uniform_mix(void)
{
    const int64_t n = 20000;
    int32_t *y = labels_balanced(n, C_SYN);
    DataPartitionSpec s = spec_of("dirichlet", "prior", 10);
    s.alpha = 1e6;
    DataPartition p;
    CHECK_OK(data_partition(&p, y, n, C_SYN, &s));
    if (p.offsets) {
        int64_t *counts = class_counts(&p, y, C_SYN);
        double worst = 0.0;
        for (int k = 0; k < 10; k++)
            for (int c = 0; c < C_SYN; c++) {
                double dev = fabs((double)counts[k * C_SYN + c] / (double)client_size(&p, k) - 1.0 / C_SYN);
                if (dev > worst) worst = dev;
            }
        CHECK_MSG(worst <= 0.035, "largest deviation from 1/C: %.4f", worst);
        free(counts);
    }
    data_partition_free(&p);
    free(y);
}

/* ---- B.4 quality groups (FFL4MIA) ---- */

static void test_dirichlet_quality_groups(void)
{
    int32_t *y = labels_random(N_SYN, C_SYN, 6);
    const int K = 20, ms[3] = {4, 1, 0};
    for (int t = 0; t < 3; t++) {
        const int m = ms[t];
        DataPartitionSpec s = spec_of("dirichlet", "quality", K);
        s.alpha = 1.0;
        s.n_corrupted = m;
        DataPartition p;
        CHECK_OK(data_partition(&p, y, N_SYN, C_SYN, &s));
        if (!p.offsets) continue;
        check_exact_cover(&p, K, N_SYN);
        int64_t *counts = class_counts(&p, y, C_SYN);
        for (int c = 0; c < C_SYN; c++) {
            int64_t n_c = 0, corrupted = 0;
            for (int k = 0; k < K; k++) {
                n_c += counts[k * C_SYN + c];
                if (k >= K - m) corrupted += counts[k * C_SYN + c];
            }
            /* exactly n_c - round((K-m)/K n_c) rows, i.e. m/K of the class up to rounding */
            int64_t expect = n_c - (int64_t)rint((double)(K - m) / K * (double)n_c);
            CHECK_MSG(corrupted == expect, "m=%d class %d: corrupted group has %lld, expected %lld", m, c,
                      (long long)corrupted, (long long)expect);
            CHECK(fabs((double)corrupted - (double)m / K * (double)n_c) <= 0.5);
        }
        free(counts);
        data_partition_free(&p);
    }
    free(y);
}

/* ---- B.5 pathological ---- */

static void test_path_shard_classes_and_sizes(void)
{
    struct { int K, r; int balanced; } cases[] = {{20, 2, 1}, {10, 3, 1}, {50, 5, 1}, {20, 2, 0}, {100, 3, 0}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int K = cases[t].K, r = cases[t].r;
        int32_t *y = cases[t].balanced ? labels_balanced(N_SYN, C_SYN) : labels_random(N_SYN, C_SYN, 7);
        DataPartitionSpec s = spec_of("pathological", NULL, K);
        s.classes_per_client = r;
        DataPartition p;
        CHECK_OK(data_partition(&p, y, N_SYN, C_SYN, &s));
        if (p.offsets) {
            check_exact_cover(&p, K, N_SYN);
            int64_t *counts = class_counts(&p, y, C_SYN);
            const double fair = (double)N_SYN / K;
            for (int k = 0; k < K; k++) {
                int d = n_distinct_classes(counts + (size_t)k * C_SYN, C_SYN);
                CHECK_MSG(d >= 1 && d <= r, "K=%d r=%d client %d has %d classes", K, r, k, d);
                /* balanced classes: r shards of N/(C s) = N/(K r) rows (+1 leftover each at most);
                 * random labels: class sizes vary by ~+-10% */
                double tol = cases[t].balanced ? r : 0.2 * fair;
                CHECK_MSG(fabs((double)client_size(&p, k) - fair) <= tol, "K=%d r=%d client %d size %lld", K, r, k,
                          (long long)client_size(&p, k));
            }
            free(counts);
        }
        data_partition_free(&p);
        free(y);
    }
}

/* balanced labels y = i mod C: a shard is a contiguous run of its class's rows, so each client's rows of
 * one class come in runs of step C (one run per shard, plus at most one leftover row each). */
static void test_path_shard_contiguous_shards(void)
{
    int32_t *y = labels_balanced(N_SYN, C_SYN);
    DataPartitionSpec s = spec_of("pathological", "shard", 20);
    s.classes_per_client = 2; /* s = 4 shards of 50 per class */
    DataPartition p;
    CHECK_OK(data_partition(&p, y, N_SYN, C_SYN, &s));
    if (p.offsets) {
        for (int k = 0; k < 20; k++) {
            CHECK(client_size(&p, k) == 100);
            int64_t off = p.offsets[k];
            for (int j = 0; j < 2; j++) { /* shard j: 50 rows r0, r0 + C, ..., r0 + 49 C with r0 = c + 50 C t */
                const int64_t *sh = p.indices + off + 50 * j;
                int64_t r0 = sh[0];
                CHECK_MSG(((r0 / C_SYN) % 50) == 0, "client %d shard %d starts at row %lld", k, j, (long long)r0);
                for (int i = 1; i < 50; i++) CHECK(sh[i] == r0 + (int64_t)i * C_SYN);
            }
        }
    }
    data_partition_free(&p);
    free(y);
}

static void test_path_class_exact_classes(void)
{
    const int64_t n = 2003;
    int32_t *y = labels_random(n, C_SYN, 8);
    const int cs[3] = {1, 2, 3};
    for (int t = 0; t < 3; t++) {
        const int K = 10, c_per = cs[t];
        DataPartitionSpec s = spec_of("pathological", "class", K);
        s.classes_per_client = c_per;
        DataPartition p;
        CHECK_OK(data_partition(&p, y, n, C_SYN, &s));
        if (!p.offsets) continue;
        check_structure(&p, K, n, NULL); /* rows may repeat (refill) */
        CHECK(client_size(&p, 0) == n / K + n % K);
        for (int k = 1; k < K; k++) CHECK(client_size(&p, k) == n / K);
        int64_t *counts = class_counts(&p, y, C_SYN);
        for (int k = 0; k < K; k++) {
            int d = n_distinct_classes(counts + (size_t)k * C_SYN, C_SYN);
            CHECK_MSG(d == c_per, "c=%d client %d has %d classes", c_per, k, d);
        }
        free(counts);
        data_partition_free(&p);
    }
    free(y);
}

/* ---- B.6 quantity ---- */

static void test_quantity_cover_min_size_and_skew(void)
{
    int32_t *y = labels_random(N_SYN, C_SYN, 9);
    DataPartitionSpec s = spec_of("quantity", NULL, 20);
    s.alpha = 0.5;
    DataPartition p;
    CHECK_OK(data_partition(&p, y, N_SYN, C_SYN, &s));
    if (p.offsets) {
        check_exact_cover(&p, 20, N_SYN);
        CHECK(min_client_size(&p) >= 10);
        int64_t largest = 0;
        for (int k = 0; k < 20; k++)
            if (client_size(&p, k) > largest) largest = client_size(&p, k);
        CHECK_MSG(largest > 2 * min_client_size(&p), "sizes %lld..%lld are not skewed", (long long)min_client_size(&p),
                  (long long)largest);
    }
    data_partition_free(&p);
    s.n_clients = 10; /* mean 200 rows; Dir(2) gives every client >= 50 in about 40 % of the draws */
    s.alpha = 2.0;
    s.min_size = 50;
    s.variant = "niid-bench";
    CHECK_OK(data_partition(&p, y, N_SYN, C_SYN, &s));
    if (p.offsets) CHECK(min_client_size(&p) >= 50);
    data_partition_free(&p);
    free(y);
}

/* ---- determinism ---- */

static void test_same_seed_same_partition(void)
{
    int32_t *y = labels_random(N_SYN, C_SYN, 10);
    const char *rows[][2] = {{"iid", "niid-bench"},  {"iid", "flood"},         {"iid", "fl-simulator"},
                             {"dirichlet", "niid-bench"}, {"dirichlet", "prior"}, {"dirichlet", "quality"},
                             {"pathological", "shard"}, {"pathological", "class"}, {"quantity", NULL}};
    for (size_t t = 0; t < sizeof rows / sizeof rows[0]; t++) {
        DataPartitionSpec s = spec_of(rows[t][0], rows[t][1], 20);
        s.alpha = 0.5;
        s.classes_per_client = 2;
        s.n_corrupted = 4;
        DataPartition a, b, c;
        CHECK_OK(data_partition(&a, y, N_SYN, C_SYN, &s));
        CHECK_OK(data_partition(&b, y, N_SYN, C_SYN, &s));
        s.seed += 1;
        CHECK_OK(data_partition(&c, y, N_SYN, C_SYN, &s));
        if (a.offsets && b.offsets && c.offsets) {
            int64_t total = a.offsets[20];
            CHECK_MSG(memcmp(a.offsets, b.offsets, 21 * sizeof *a.offsets) == 0 &&
                          memcmp(a.indices, b.indices, (size_t)total * sizeof *a.indices) == 0,
                      "%s %s: same seed, different partitions", rows[t][0], rows[t][1]);
            int same = c.offsets[20] == total &&
                       memcmp(a.indices, c.indices, (size_t)total * sizeof *a.indices) == 0;
            CHECK_MSG(!same, "%s %s: seed change did not change the partition", rows[t][0], rows[t][1]);
        }
        data_partition_free(&a);
        data_partition_free(&b);
        data_partition_free(&c);
    }
    free(y);
}

/* ---- errors ---- */

static int fails_with(int expect_status, const char *expect_a, const char *expect_b, const int32_t *y, int64_t n,
                      int classes, const DataPartitionSpec *s)
{
    DataPartition p;
    memset(&p, 0xAB, sizeof p); /* garbage in: data_partition must not trust it */
    int st = data_partition(&p, y, n, classes, s);
    const char *msg = fh_error_message();
    int ok = st == expect_status && p.offsets == NULL && p.indices == NULL && p.n_clients == 0 &&
             (!expect_a || strstr(msg, expect_a)) && (!expect_b || strstr(msg, expect_b));
    if (!ok) printf("\n    status %d (expected %d), message: %s\n", st, expect_status, msg);
    if (st == FH_OK) data_partition_free(&p);
    fh_error_clear();
    return ok;
}

static void test_dirichlet_infeasible_fails_loudly(void)
{
    int32_t *y = labels_random(N_SYN, C_SYN, 11);
    DataPartitionSpec s = spec_of("dirichlet", NULL, 200);
    s.alpha = 1e-3;
    s.min_size = 10;
    s.max_attempts = 10; /* fewer than the draws that judge the reach: every draw is made */
    CHECK(fails_with(FH_ERR_USAGE, "alpha", "min_size", y, N_SYN, C_SYN, &s));
    CHECK(fails_with(FH_ERR_USAGE, "after 10 draws", "K=200", y, N_SYN, C_SYN, &s));
    s.scheme = "quantity";
    CHECK(fails_with(FH_ERR_USAGE, "alpha", "min_size", y, N_SYN, C_SYN, &s));
    /* with more draws allowed, the first ones show that min_size is out of reach: said then, not after all */
    s.scheme = "dirichlet";
    s.max_attempts = 100000000;
    double t0 = fh_time_now();
    CHECK(fails_with(FH_ERR_USAGE, "min_size=10 is out of reach", "max_attempts=100000000", y, N_SYN, C_SYN, &s));
    s.scheme = "quantity";
    CHECK(fails_with(FH_ERR_USAGE, "min_size=10 is out of reach", "K=200", y, N_SYN, C_SYN, &s));
    CHECK_MSG(fh_time_now() - t0 < 5.0, "took %.1f s to say so", fh_time_now() - t0);
    /* K * min_size > N cannot work at any alpha: said at once */
    s.scheme = "dirichlet";
    s.alpha = 100.0;
    s.n_clients = 201;
    CHECK(fails_with(FH_ERR_USAGE, "min_size=10", "lower min_size or K", y, N_SYN, C_SYN, &s));
    free(y);
}

static void test_shard_not_integral_fails(void)
{
    int32_t *y = labels_balanced(N_SYN, C_SYN);
    DataPartitionSpec s = spec_of("pathological", "shard", 7);
    s.classes_per_client = 2;
    CHECK(fails_with(FH_ERR_USAGE, "r*K/C = 2*7/10 is not an integer", "multiple of 5", y, N_SYN, C_SYN, &s));
    /* more shards than rows of a class */
    s.n_clients = 1000;
    s.classes_per_client = 10; /* s = 1000 > 200 rows per class */
    CHECK(fails_with(FH_ERR_USAGE, "fewer than", "shards", y, N_SYN, C_SYN, &s));
    free(y);
}

static void test_labels_out_of_range_fail(void)
{
    int32_t *y = labels_balanced(N_SYN, C_SYN);
    DataPartitionSpec s = spec_of("iid", NULL, 10);
    y[1234] = 10;
    CHECK(fails_with(FH_ERR_DATA, "row 1234", "is 10", y, N_SYN, C_SYN, &s));
    y[1234] = -1;
    s.scheme = "dirichlet";
    s.alpha = 0.5;
    CHECK(fails_with(FH_ERR_DATA, "row 1234", "is -1", y, N_SYN, C_SYN, &s));
    free(y);
}

static void test_invalid_specs_fail(void)
{
    int32_t *y = labels_balanced(N_SYN, C_SYN);
    DataPartitionSpec s = spec_of("iid", NULL, N_SYN + 1);
    CHECK(fails_with(FH_ERR_USAGE, "n_clients=2001", "N=2000", y, N_SYN, C_SYN, &s));
    s.n_clients = 0;
    CHECK(fails_with(FH_ERR_USAGE, "n_clients=0", NULL, y, N_SYN, C_SYN, &s));
    s = spec_of("dirichlet", NULL, 10);
    CHECK(fails_with(FH_ERR_USAGE, "alpha=0", NULL, y, N_SYN, C_SYN, &s));
    s.alpha = -1.0;
    CHECK(fails_with(FH_ERR_USAGE, "alpha=-1", NULL, y, N_SYN, C_SYN, &s));
    s.scheme = "quantity";
    CHECK(fails_with(FH_ERR_USAGE, "alpha=-1", NULL, y, N_SYN, C_SYN, &s));
    s = spec_of("pathological", "class", 10);
    CHECK(fails_with(FH_ERR_USAGE, "classes_per_client=0", "1..10", y, N_SYN, C_SYN, &s));
    s.classes_per_client = 11;
    CHECK(fails_with(FH_ERR_USAGE, "classes_per_client=11", NULL, y, N_SYN, C_SYN, &s));
    s.variant = "shard";
    CHECK(fails_with(FH_ERR_USAGE, "classes_per_client=11", NULL, y, N_SYN, C_SYN, &s));
    s = spec_of("dirichlet", "quality", 10);
    s.alpha = 1.0;
    s.n_corrupted = 10;
    CHECK(fails_with(FH_ERR_USAGE, "n_corrupted=10", "0..9", y, N_SYN, C_SYN, &s));
    s.n_corrupted = -1;
    CHECK(fails_with(FH_ERR_USAGE, "n_corrupted=-1", NULL, y, N_SYN, C_SYN, &s));
    s = spec_of("noniid", NULL, 10);
    CHECK(fails_with(FH_ERR_USAGE, "unknown scheme \"noniid\"", "iid, dirichlet, pathological, quantity", y, N_SYN,
                     C_SYN, &s));
    s = spec_of("iid", "homo", 10);
    CHECK(fails_with(FH_ERR_USAGE, "unknown variant \"homo\"", "niid-bench (default), flood, fl-simulator", y, N_SYN,
                     C_SYN, &s));
    s = spec_of("dirichlet", "labeldir", 10);
    s.alpha = 1.0;
    CHECK(fails_with(FH_ERR_USAGE, "unknown variant", "prior", y, N_SYN, C_SYN, &s));
    s = spec_of(NULL, NULL, 10);
    CHECK(fails_with(FH_ERR_USAGE, "unknown scheme", NULL, y, N_SYN, C_SYN, &s));
    s = spec_of("dirichlet", NULL, 10);
    s.alpha = 1.0;
    s.min_size = -3;
    CHECK(fails_with(FH_ERR_USAGE, "min_size=-3", NULL, y, N_SYN, C_SYN, &s));
    free(y);
}

/* pathological schemes and prior sampling need every class; NIID-Bench Dirichlet and IID do not */
static void test_empty_class(void)
{
    int32_t *y = labels_balanced(N_SYN, C_SYN);
    for (int64_t i = 0; i < N_SYN; i++)
        if (y[i] == 3) y[i] = 4;
    DataPartitionSpec s = spec_of("pathological", "shard", 10);
    s.classes_per_client = 2;
    CHECK(fails_with(FH_ERR_DATA, "class 3 has no training sample", NULL, y, N_SYN, C_SYN, &s));
    s.variant = "class";
    CHECK(fails_with(FH_ERR_DATA, "class 3 has no training sample", NULL, y, N_SYN, C_SYN, &s));
    s = spec_of("dirichlet", "prior", 10);
    s.alpha = 0.5;
    CHECK(fails_with(FH_ERR_DATA, "class 3", NULL, y, N_SYN, C_SYN, &s));
    s.variant = NULL;
    DataPartition p;
    CHECK_OK(data_partition(&p, y, N_SYN, C_SYN, &s));
    if (p.offsets) check_exact_cover(&p, 10, N_SYN);
    data_partition_free(&p);
    s.variant = "quality";
    s.n_corrupted = 2;
    CHECK_OK(data_partition(&p, y, N_SYN, C_SYN, &s));
    if (p.offsets) check_exact_cover(&p, 10, N_SYN);
    data_partition_free(&p);
    free(y);
}

/* ---- many clients ---- */

/* 10,000 clients of 60,000 rows (6 each on average, as Fashion-MNIST gives): iid and Dirichlet cover every row
 * once in about a second; a min_size that no draw reaches is reported after the first draws, not after
 * max_attempts of them. */
static void test_ten_thousand_clients(void)
{
    enum { K = 10000, N = 60000 };
    int32_t *y = labels_random(N, C_SYN, 12);
    DataPartitionSpec s = spec_of("iid", NULL, K);
    DataPartition p;
    double t0 = fh_time_now();
    CHECK_OK(data_partition(&p, y, N, C_SYN, &s));
    if (p.offsets) {
        check_exact_cover(&p, K, N);
        CHECK(min_client_size(&p) == N / K);
    }
    data_partition_free(&p);
    s = spec_of("dirichlet", NULL, K);
    s.alpha = 3.0;
    s.min_size = 1;
    CHECK_OK(data_partition(&p, y, N, C_SYN, &s));
    if (p.offsets) {
        check_exact_cover(&p, K, N);
        CHECK(min_client_size(&p) >= 1);
    }
    data_partition_free(&p);
    s.alpha = 0.5;
    s.min_size = 2;
    CHECK(fails_with(FH_ERR_USAGE, "min_size=2 is out of reach", "K=10000", y, N, C_SYN, &s));
    const double seconds = fh_time_now() - t0;
    CHECK_MSG(seconds < 10.0, "took %.1f s", seconds);
    free(y);
}

/* ---- real labels ---- */

static void test_fashion_mnist_dirichlet_0_1_k100(void)
{
    struct stat st;
    if (stat(DATA_FASHION_MNIST_DIR, &st) != 0 || !S_ISDIR(st.st_mode)) {
        TEST_SKIP("no %s: make deps installs Debian's dataset-fashion-mnist", DATA_FASHION_MNIST_DIR);
        return;
    }
    int32_t *y = NULL;
    int64_t n = 0;
    CHECK_OK(data_idx_read_labels(DATA_FASHION_MNIST_DIR "/train-labels-idx1-ubyte.gz", &y, &n));
    if (!y) return;
    CHECK(n == 60000);
    DataPartitionSpec s = spec_of("dirichlet", NULL, 100);
    s.alpha = 0.1;
    DataPartition p;
    int level = fh_log_level();
    fh_log_set_level(FH_LOG_DEBUG); /* the partitioner logs which draw it accepted */
    printf("\n");
    fflush(stdout);
    double t0 = fh_time_now();
    CHECK_OK(data_partition(&p, y, n, 10, &s));
    double seconds = fh_time_now() - t0;
    fflush(stderr);
    fh_log_set_level(level);
    if (p.offsets) {
        check_exact_cover(&p, 100, n);
        CHECK(min_client_size(&p) >= 10);
        check_balancing(&p, y, n, 10);
        int64_t largest = 0;
        for (int k = 0; k < 100; k++)
            if (client_size(&p, k) > largest) largest = client_size(&p, k);
        printf("    60000 labels, K=100, alpha=0.1: clients %lld..%lld rows, %.3f s  ", (long long)min_client_size(&p),
               (long long)largest, seconds);
    }
    CHECK_MSG(seconds < 5.0, "took %.2f s", seconds);
    data_partition_free(&p);
    free(y);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_iid_niid_bench_array_split);
    RUN(test_iid_flood_leaves_remainder_unused);
    RUN(test_iid_fl_simulator_client0_takes_remainder);
    RUN(test_dirichlet_niid_bench_cover_and_min_size);
    RUN(test_dirichlet_small_alpha_is_skewed);
    RUN(test_dirichlet_large_alpha_uniform_mix);
    RUN(test_dirichlet_prior_equal_sizes);
    RUN(test_dirichlet_prior_large_alpha_uniform_mix);
    RUN(test_dirichlet_quality_groups);
    RUN(test_path_shard_classes_and_sizes);
    RUN(test_path_shard_contiguous_shards);
    RUN(test_path_class_exact_classes);
    RUN(test_quantity_cover_min_size_and_skew);
    RUN(test_same_seed_same_partition);
    RUN(test_dirichlet_infeasible_fails_loudly);
    RUN(test_shard_not_integral_fails);
    RUN(test_labels_out_of_range_fail);
    RUN(test_invalid_specs_fail);
    RUN(test_empty_class);
    RUN(test_ten_thousand_clients);
    RUN(test_fashion_mnist_dirichlet_0_1_k100);
    return test_summary();
}
