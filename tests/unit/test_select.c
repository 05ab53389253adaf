/* Unit tests for src/fl/select.c: the clients a round selects. count and fraction draw the first m of a
 * Fisher-Yates permutation without writing the permutation out; they must give exactly the ids the plain
 * draw gives (the whole permutation of 0..K-1, then sorted), for every seed, K, m and round, since
 * every run's results depend on them. Also the buffer sizes: the draw stays within fl_select_room entries.
 *
 * Run all:  build/tests/test_select            Run one:  build/tests/test_select test_count_equals_dense_draw */
#include "test.h"

#include <stdlib.h>

#include "../../src/fl/fl_internal.h"
#include "fedhet/rng.h"

static int ascending(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The plain draw: the whole permutation, the first m of it, sorted. */
static void dense_reference(const FlSettings *s, int K, int m, int round, int32_t *perm, int32_t *want)
{
    FhRng rng;
    fh_rng_init(&rng, (uint64_t)s->seed, FH_RNG_SAMPLE, (uint32_t)round, 0, 0);
    for (int k = 0; k < K; k++) perm[k] = k;
    for (int i = 0; i < m; i++) {
        int j = i + (int)fh_rng_below(&rng, (uint64_t)(K - i));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < m; i++) want[i] = perm[i];
    qsort(want, (size_t)m, sizeof *want, ascending);
}

/* fl_select_clients against the reference for one (selection, K, m, seed, round); the ids buffer is exactly
 * fl_select_room entries with a guard after it. Returns 0 on a mismatch. */
static int same_as_dense(const char *selection, int K, int m, int64_t seed, int round)
{
    FlSettings s = { .selection = selection, .seed = seed };
    if (!strcmp(selection, "count")) s.count = m;
    else s.fraction = (double)m / K;
    const int expect_m = fl_clients_per_round(&s, K);
    const int64_t room = fl_select_room(&s, K);
    int32_t *ids = calloc((size_t)room + 1, sizeof *ids), *perm = calloc((size_t)K, sizeof *perm),
            *want = calloc((size_t)K, sizeof *want);
    CHECK(ids && perm && want);
    if (!ids || !perm || !want) {
        FREE_ALL(ids, perm, want);
        return 0;
    }
    ids[room] = 0x5eed;
    const int got = fl_select_clients(&s, K, round, ids);
    dense_reference(&s, K, expect_m, round, perm, want);
    int ok = got == expect_m && ids[room] == 0x5eed && room <= (int64_t)expect_m + 8 * (int64_t)(expect_m + 1);
    for (int i = 0; ok && i < got; i++) ok = ids[i] == want[i];
    CHECK_MSG(ok, "selection=%s K=%d m=%d seed=%lld round=%d: got %d ids, want %d", selection, K, m, (long long)seed,
              round, got, expect_m);
    FREE_ALL(ids, perm, want);
    return ok;
}

static void test_count_equals_dense_draw(void)
{
    static const int Ks[] = { 1, 2, 3, 7, 10, 64, 100, 1000, 4097 };
    for (size_t a = 0; a < sizeof Ks / sizeof *Ks; a++) {
        const int K = Ks[a];
        const int ms[] = { 1, 2, K / 10, K / 3, K / 2, K - 1, K };
        for (size_t b = 0; b < sizeof ms / sizeof *ms; b++) {
            if (ms[b] < 1 || ms[b] > K) continue;
            for (int64_t seed = 0; seed < 3; seed++)
                for (int round = 0; round < 4; round++)
                    if (!same_as_dense("count", K, ms[b], seed, round)) return;
        }
    }
}

static void test_fraction_equals_dense_draw(void)
{
    for (int K = 5; K <= 500; K += 99)
        for (int m = 1; m <= K; m += K / 4 + 1)
            for (int round = 0; round < 5; round++)
                if (!same_as_dense("fraction", K, m, 17, round)) return;
}

/* 100,000 clients: a few selected (the cross-device case), a fifth, and every one */
static void test_many_clients(void)
{
    static const int ms[] = { 1, 10, 100, 1000, 20000, 100000 };
    for (size_t b = 0; b < sizeof ms / sizeof *ms; b++)
        for (int round = 0; round < 2; round++)
            if (!same_as_dense("count", 100000, ms[b], 5, round)) return;
}

/* all and bernoulli write up to K ids and need K entries */
static void test_all_and_bernoulli_room(void)
{
    FlSettings all = { .selection = "all", .seed = 1 }, bern = { .selection = "bernoulli", .fraction = 0.3, .seed = 1 };
    CHECK(fl_select_room(&all, 50) == 50);
    CHECK(fl_select_room(&bern, 50) == 50);
    CHECK(fl_max_selected(&all, 50) == 50 && fl_max_selected(&bern, 50) == 50);
    int32_t ids[50];
    CHECK(fl_select_clients(&all, 50, 0, ids) == 50);
    for (int k = 0; k < 50; k++) CHECK(ids[k] == k);
    const int m = fl_select_clients(&bern, 50, 3, ids);
    CHECK(m >= 1 && m <= 50);
    for (int i = 1; i < m; i++) CHECK(ids[i - 1] < ids[i]);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_count_equals_dense_draw);
    RUN(test_fraction_equals_dense_draw);
    RUN(test_many_clients);
    RUN(test_all_and_bernoulli_room);
    return test_summary();
}
