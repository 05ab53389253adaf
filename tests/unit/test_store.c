/* Unit tests for src/fl/store.c, the clients' persistent state out of core: the slot allocation against its rules
 * over many random rounds (a slot a checkpoint refers to is never handed out again before the next checkpoint, no
 * two clients share a slot, the file stays within 2K + m slots, a store rebuilt from a checkpoint's table allocates
 * exactly as the one that wrote it, a left round undoes itself), and the file: states read back as written, a
 * table that does not match the file (another round, a truncated file) is refused naming the file.
 *
 * Run all:  build/tests/test_store            Run one:  build/tests/test_store test_file_round_trip */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "test_tmp.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/fl/fl_internal.h"
#include "fedhet/rng.h"

enum { K = 9, M = 4 };

/* Under make DEBUG=1: Open MPI 4.1 leaks from MPI_Init (see test_checkpoint.c) */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }

static FlComm comm;

/* m distinct clients of K in ascending id, from the counter-based generator */
static int draw_selection(FhRng *rng, int32_t *ids)
{
    int pool[K], n = 0;
    for (int k = 0; k < K; k++) pool[k] = k;
    const int m = 1 + (int)fh_rng_below(rng, M);
    for (int i = 0; i < m; i++) {
        int j = i + (int)fh_rng_below(rng, (uint64_t)(K - i)), t = pool[i];
        pool[i] = pool[j], pool[j] = t;
    }
    for (int k = 0; k < K; k++)
        for (int i = 0; i < m; i++)
            if (pool[i] == k) ids[n++] = k;
    return n;
}

static int same_tables(const FlStore *a, const FlStore *b)
{
    return !memcmp(a->now, b->now, K * sizeof *a->now) && !memcmp(a->saved, b->saved, K * sizeof *a->saved);
}

/* the rules every table must keep */
static void check_rules(const FlStore *st)
{
    for (int k = 0; k < K; k++) {
        const int64_t s = st->now[k].slot;
        CHECK(s < 2 * K + M);
        for (int j = 0; j < K; j++) {
            if (j != k && s >= 0) CHECK_MSG(s != st->now[j].slot, "clients %d and %d share slot %lld", k, j, (long long)s);
            /* another client's checkpointed slot is never handed out */
            if (j != k && s >= 0) CHECK_MSG(s != st->saved[j].slot, "client %d got client %d's checkpointed slot", k, j);
        }
        if (s >= 0) CHECK(st->used[s / 64] >> (s % 64) & 1);
        if (st->saved[k].slot >= 0) CHECK(st->used[st->saved[k].slot / 64] >> (st->saved[k].slot % 64) & 1);
    }
}

static void test_allocation_rules(void)
{
    FlStore a, b;
    CHECK_OK(fl_store_open(&a, &comm, tmp_root, K, 0, 1, M, 1));
    CHECK_OK(fl_store_open(&b, &comm, tmp_root, K, 0, 1, M, 1));
    FhRng rng;
    fh_rng_init(&rng, 5, FH_RNG_SAMPLE, 0, 0, 0);
    int32_t ids[M];
    int commits = 0, undos = 0;
    for (int t = 0; t < 400 && !test_current_failed; t++) {
        const int n = draw_selection(&rng, ids);
        fl_store_round(&a, ids, n, t);
        fl_store_round(&b, ids, n, t);
        check_rules(&a);
        const uint64_t what = fh_rng_below(&rng, 10);
        if (what == 0) { /* a left round: back to the table before it */
            FlStoreEntry before[K];
            memcpy(before, b.now, sizeof before);
            for (int i = 0; i < n; i++) before[ids[i]] = b.journal[i].before;
            fl_store_round_undo(&a);
            fl_store_round_undo(&b);
            CHECK(!memcmp(a.now, before, sizeof before));
            undos++;
        } else {
            fl_store_round_end(&a);
            fl_store_round_end(&b);
        }
        check_rules(&a);
        if (what >= 7) { /* a checkpoint; b becomes a store resumed from it */
            fl_store_committed(&a);
            FlStoreEntry table[K];
            memcpy(table, a.now, sizeof table);
            fl_store_set_table(&b, table);
            CHECK(!memcmp(a.now, a.saved, sizeof table));
            for (int64_t w = 0; w < a.n_words; w++) CHECK(a.used[w] == b.used[w]); /* exactly the table's slots */
            commits++;
        }
        CHECK_MSG(same_tables(&a, &b), "the resumed store allocates differently after round %d", t);
    }
    CHECK(commits > 50 && undos > 10);
    fl_store_close(&a);
    fl_store_close(&b);
}

static void fill(float *block, int n, int client, int round)
{
    for (int i = 0; i < n; i++) block[i] = (float)(client * 1000 + round * 10 + i);
}

static void test_file_round_trip(void)
{
    enum { F = 5 };
    FlStore st;
    CHECK_OK(fl_store_open(&st, &comm, tmp_root, K, F, 0xabc, M, 1));
    char path[600];
    snprintf(path, sizeof path, "%.64s/client-state.bin", tmp_root);
    tmp_record(path);
    float block[F + 1], got[F + 1];
    const int32_t first[] = { 1, 4 }, second[] = { 4, 7 };
    fl_store_round(&st, first, 2, 0);
    for (int i = 0; i < 2; i++) {
        CHECK_OK(fl_store_load(&st, i, got));
        CHECK(got[F] == 0.0f && got[0] == 0.0f); /* no state yet */
        fill(block, F, first[i], 0);
        CHECK_OK(fl_store_put(&st, first[i], block));
    }
    fl_store_round_end(&st);
    CHECK_OK(fl_store_sync(&st));
    fl_store_committed(&st);
    fl_store_round(&st, second, 2, 1);
    CHECK_OK(fl_store_load(&st, 0, got)); /* client 4 as round 0 left it */
    fill(block, F, 4, 0);
    CHECK(got[F] == 1.0f && !memcmp(got, block, F * sizeof(float)));
    CHECK_OK(fl_store_load(&st, 1, got));
    CHECK(got[F] == 0.0f);
    for (int i = 0; i < 2; i++) {
        fill(block, F, second[i], 1);
        CHECK_OK(fl_store_put(&st, second[i], block));
    }
    fl_store_round_end(&st);
    CHECK_OK(fl_store_check_table(&st, st.now, K, "the table"));
    CHECK_OK(fl_store_check_table(&st, st.saved, K, "the checkpoint's table")); /* its slots are kept */

    /* another round's state where the table says round 0, a slot past the file's end */
    FlStoreEntry wrong[K];
    memcpy(wrong, st.saved, sizeof wrong);
    wrong[4].round = 1;
    CHECK(fl_store_check_table(&st, wrong, K, "ckpt.h5") == FH_ERR_IO);
    CHECK(strstr(fh_error_message(), "client-state.bin") && strstr(fh_error_message(), "client 4"));
    memcpy(wrong, st.saved, sizeof wrong);
    wrong[1].slot = 2 * K;
    CHECK(fl_store_check_table(&st, wrong, K, "ckpt.h5") == FH_ERR_IO);
    CHECK(strstr(fh_error_message(), "truncated"));
    fh_error_clear();

    /* reopened as a resumed run does: the header is checked */
    fl_store_close(&st);
    CHECK_OK(fl_store_open(&st, &comm, tmp_root, K, F, 0xabc, M, 0));
    fl_store_close(&st);
    CHECK(fl_store_open(&st, &comm, tmp_root, K, F + 1, 0xabc, M, 0) == FH_ERR_IO);
    CHECK(strstr(fh_error_message(), "client-state.bin"));
    fh_error_clear();
    fl_store_close(&st);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    MPI_Init(&argc, &argv);
    if (tmp_init("store") != 0) return 1;
    if (fl_comm_init(&comm, MPI_COMM_WORLD) != FH_OK) return 1;
    RUN(test_allocation_rules);
    RUN(test_file_round_trip);
    tmp_cleanup();
    MPI_Finalize();
    return test_summary();
}
