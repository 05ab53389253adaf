/* Server weights and the default server update (docs/methods/baselines.md A.1, A.2). */
#include "algo_internal.h"
#include "fedhet/core.h"

/* FedAvg (A.1): p_k proportional to n_k over the selected clients */
static int weights_samples(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    for (int i = 0; i < m; i++) p[i] = (double)u[i].n_samples;
    return FH_OK;
}

/* Uniform (A.2): p_k = 1/m */
static int weights_uniform(const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    for (int i = 0; i < m; i++) p[i] = 1.0;
    return FH_OK;
}

const AlgoServerWeights algo_weights_samples = { weights_samples, "sample counts" };
const AlgoServerWeights algo_weights_uniform = { weights_uniform, "uniform" };

int algo_average_range(const AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, int vec, int64_t from,
                       int64_t to, float *out)
{
    double total = 0.0;
    for (int i = 0; i < m; i++) total += p[i];
    if (!(total > 0.0)) FH_FAIL(FH_ERR_NUMERIC, "round %d: aggregation weights sum to %g", s->round + 1, total);
    double acc[ALGO_BLOCK]; /* the block's sums stay in L1 while every upload streams past them once */
    for (int64_t lo = from; lo < to; lo += ALGO_BLOCK) {
        const int64_t n = algo_block_len(lo - from, to - from);
        for (int64_t j = 0; j < n; j++) acc[j] = 0.0;
        for (int i = 0; i < m; i++) { /* each element summed in ascending client id, as a whole-vector pass would */
            const double w = p[i] / total;
            const float *x = (vec < 0 ? u[i].state : u[i].vecs + (size_t)vec * s->n_state) + lo;
            for (int64_t j = 0; j < n; j++) acc[j] += w * (double)x[j];
        }
        for (int64_t j = 0; j < n; j++) out[lo + j] = (float)acc[j];
    }
    return FH_OK;
}

/* global = sum_i p_i state_i / sum_i p_i, accumulated in double in ascending client id (DESIGN rule 3),
 * over the whole state: BN buffers are averaged with the same weights (docs/methods/baselines.md §0.3). */
int algo_average(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global)
{
    return algo_average_range(s, u, m, p, -1, 0, s->n_state, global);
}
