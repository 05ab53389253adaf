/* The round's clients: which ones a round selects, and the most any round can (the buffers' size). */
#include "fl_internal.h"

#include <string.h>

#include "fedhet/rng.h"

/* Slots of the open-addressing map of the sparse Fisher-Yates: a power of two at least twice the m keys it
 * holds, so that linear probing stays short. */
static int32_t displaced_slots(int m)
{
    int32_t slots = 2;
    while (slots < 2 * m) slots *= 2;
    return slots;
}

/* The value at position `at` of the permutation being drawn: the map's entry, or `at` itself when that
 * position was never swapped. *slot is where `at` lives or would go. */
static int32_t displaced_find(const int32_t *keys, const int32_t *values, int32_t mask, int32_t at, int32_t *slot)
{
    int32_t s = (int32_t)(((uint32_t)at * 0x9E3779B1u) & (uint32_t)mask); /* an odd multiplier scatters runs */
    while (keys[s] >= 0 && keys[s] != at) s = (s + 1) & mask;
    *slot = s;
    return keys[s] == at ? values[s] : at;
}

/* Moves ids[at] down the max-heap ids[0..n) to where it belongs. */
static void sift_down(int32_t *ids, int n, int at)
{
    for (int child; (child = 2 * at + 1) < n; at = child) {
        if (child + 1 < n && ids[child + 1] > ids[child]) child++;
        if (ids[at] >= ids[child]) return;
        const int32_t t = ids[at];
        ids[at] = ids[child];
        ids[child] = t;
    }
}

/* Sorts ids[0..n) ascending in place: heap sort, O(n log n) without memory. */
static void sort_ids(int32_t *ids, int n)
{
    for (int root = n / 2 - 1; root >= 0; root--) sift_down(ids, n, root);
    for (int end = n - 1; end > 0; end--) {
        const int32_t t = ids[0];
        ids[0] = ids[end];
        ids[end] = t;
        sift_down(ids, end, 0);
    }
}

/* Selected clients of round t in ascending id (docs/methods/baselines.md §0.2), from Philox (seed, sample) with
 * counter (t). count and fraction: the first m of a uniform permutation of 0..K-1 by Fisher-Yates, sorted.
 * The permutation is never written out: a map holds the positions the swaps displaced, in the scratch after
 * ids[m], so a round costs O(m log m) whatever K is. ids holds fl_select_room(s, K) entries. */
int fl_select_clients(const FlSettings *s, int K, int round, int32_t *ids)
{
    FhRng rng;
    fh_rng_init(&rng, (uint64_t)s->seed, FH_RNG_SAMPLE, (uint32_t)round, 0, 0);
    int m = 0;
    if (!strcmp(s->selection, "all")) {
        for (int k = 0; k < K; k++) ids[m++] = k;
    } else if (!strcmp(s->selection, "bernoulli")) {
        while (m == 0) /* none active: redraw (docs/methods/baselines.md §0.2) */
            for (int k = 0; k < K; k++)
                if (fh_rng_uniform(&rng) < s->fraction) ids[m++] = k;
    } else {
        m = fl_clients_per_round(s, K);
        const int32_t slots = displaced_slots(m), mask = slots - 1;
        int32_t *keys = ids + m, *values = keys + slots;
        for (int32_t i = 0; i < slots; i++) keys[i] = -1;
        for (int i = 0; i < m; i++) { /* swap positions i and j >= i; position i is final afterwards */
            const int32_t j = i + (int32_t)fh_rng_below(&rng, (uint64_t)(K - i));
            int32_t at_i, at_j;
            const int32_t value_i = displaced_find(keys, values, mask, i, &at_i);
            ids[i] = displaced_find(keys, values, mask, j, &at_j);
            if (j != i) { /* position j now holds what i held; i is never read again */
                keys[at_j] = j;
                values[at_j] = value_i;
            }
        }
        sort_ids(ids, m);
    }
    return m;
}

/* The most clients a round can select: m for count and fraction, K for all and bernoulli. Upload records
 * are model-sized, so the buffers hold this many, not K. */
int fl_max_selected(const FlSettings *s, int K)
{
    const int m = fl_clients_per_round(s, K);
    return m > 0 ? m : K;
}

/* Entries of the ids buffer fl_select_clients needs: the selection, and for count and fraction the map of its
 * draw (two entries per slot). */
int64_t fl_select_room(const FlSettings *s, int K)
{
    const int m = fl_clients_per_round(s, K);
    if (m < 0 || !strcmp(s->selection, "all")) return K;
    return (int64_t)m + 2 * (int64_t)displaced_slots(m);
}
