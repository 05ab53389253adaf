/* Server weights and the default server update (spec A.1, A.2). */
#include "fedhet/algo.h"
#include "fedhet/core.h"

#include <stdlib.h>

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

const AlgoServerWeights algo_weights_samples = { weights_samples };
const AlgoServerWeights algo_weights_uniform = { weights_uniform };

/* global = sum_i p_i state_i / sum_i p_i, accumulated in double in ascending client id (DESIGN rule 3),
 * over the whole state: BN buffers are averaged with the same weights (spec 0.3). */
int algo_average(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global)
{
    double total = 0.0;
    for (int i = 0; i < m; i++) total += p[i];
    if (!(total > 0.0)) FH_FAIL(FH_ERR_NUMERIC, "round %d: aggregation weights sum to %g", s->round, total);
    double *acc = NULL;
    FH_CHECK(fh_calloc(&acc, (size_t)s->n_state, sizeof *acc, "aggregation accumulator"));
    for (int i = 0; i < m; i++) {
        const double w = p[i] / total;
        const float *x = u[i].state;
        for (int64_t j = 0; j < s->n_state; j++) acc[j] += w * (double)x[j];
    }
    for (int64_t j = 0; j < s->n_state; j++) global[j] = (float)acc[j];
    fh_free(&acc);
    return FH_OK;
}
