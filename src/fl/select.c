/* The round's clients: which ones a round selects, and the most any round can (the buffers' size). */
#include "fl_internal.h"

#include <string.h>

#include "fedhet/rng.h"

/* Selected clients of round t in ascending id (docs/methods/baselines.md §0.2), from Philox (seed, sample) with counter (t). */
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
        /* partial Fisher-Yates: the first m of a uniform permutation, then sorted */
        for (int k = 0; k < K; k++) ids[k] = k;
        for (int i = 0; i < m; i++) {
            int j = i + (int)fh_rng_below(&rng, (uint64_t)(K - i));
            int32_t t = ids[i];
            ids[i] = ids[j];
            ids[j] = t;
        }
        for (int i = 1; i < m; i++) {
            int32_t v = ids[i];
            int j = i - 1;
            while (j >= 0 && ids[j] > v) {
                ids[j + 1] = ids[j];
                j--;
            }
            ids[j + 1] = v;
        }
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
