/* Server weights and the default server update (docs/methods/baselines.md A.1, A.2). */
#include "algo_internal.h"

#include <string.h>

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

const AlgoServerWeights algo_weights_samples = { .weights = weights_samples, .rule = "sample counts", .from_plan = 1 };
const AlgoServerWeights algo_weights_uniform = { .weights = weights_uniform, .rule = "uniform", .from_plan = 1 };

int algo_average_range(const AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, int vec, int64_t from,
                       int64_t to, float *out)
{
    double total;
    FH_CHECK(algo_average_total(s, p, m, &total));
    double acc[NN_SUM_BINS * ALGO_BLOCK]; /* the block's sums stay in L1 while every upload streams past them once */
    for (int64_t lo = from; lo < to; lo += ALGO_BLOCK) {
        const int64_t n = algo_block_len(lo - from, to - from);
        nn_sum_zero(acc, n);
        for (int i = 0; i < m; i++)
            nn_sum_add(acc, p[i] / total, (vec < 0 ? u[i].state : u[i].vecs + (size_t)vec * s->n_state) + lo, n);
        nn_sum_result(acc, n, out + lo);
    }
    return FH_OK;
}

int algo_average_total(const AlgoServerCtx *s, const double *p, int m, double *total)
{
    *total = 0.0;
    for (int i = 0; i < m; i++) *total += p[i];
    if (!(*total > 0.0)) FH_FAIL(FH_ERR_NUMERIC, "round %d: aggregation weights sum to %g", s->round + 1, *total);
    if (m > NN_SUM_MAX_TERMS) FH_FAIL(FH_ERR_USAGE, "round %d: %d clients in one sum, at most %d", s->round + 1, m,
                                      NN_SUM_MAX_TERMS);
    return FH_OK;
}

/* global = sum_i (p_i / sum_k p_k) state_i, an exact sum (nn_sum_add: the same bits in any order, whole or
 * folded by the client ranks), over the whole state: BN buffers are averaged with the same weights (docs/methods/baselines.md §0.3). */
int algo_average(AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p, float *global)
{
    return algo_average_range(s, u, m, p, -1, 0, s->n_state, global);
}

int algo_sum_coefficients(const AlgoServerUpdate *up, AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p,
                          double *coef)
{
    double total;
    FH_CHECK(algo_average_total(s, p, m, &total));
    for (int i = 0; i < m; i++) coef[i] = p[i] / total; /* algo_average_range's factor */
    for (int k = 0; up && k < up->n_sums; k++) {
        double *c = coef + (size_t)(1 + k) * m;
        switch (up->sums[k].coef) {
        case ALGO_COEF_AVERAGE: memcpy(c, coef, (size_t)m * sizeof *c); break;
        case ALGO_COEF_ONE: for (int i = 0; i < m; i++) c[i] = 1.0; break;
        case ALGO_COEF_OWN: FH_CHECK(up->coefficients(s, u, m, p, k, c)); break;
        }
    }
    return FH_OK;
}

void algo_sum_add(double *acc, const AlgoSum *sum, double coef, const float *state, const float *vecs,
                  const float *current, int64_t n_state, int64_t lo, int64_t n)
{
    switch (sum->source) {
    case ALGO_SUM_STATE: nn_sum_add(acc, coef, state + lo, n); break;
    case ALGO_SUM_DELTA: nn_sum_add_diff(acc, coef, state + lo, current + lo, n); break;
    case ALGO_SUM_VECTOR: nn_sum_add(acc, coef, vecs + (size_t)sum->vector * n_state + lo, n); break;
    }
}

int algo_server_update(const AlgoServerUpdate *up, AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p,
                       float *global, float *sums, double *coef)
{
    if (up && up->update) return up->update(s, u, m, p, global);
    if (up && up->observe) FH_CHECK(up->observe(s, u, m, p));
    FH_CHECK(algo_average(s, u, m, p, global));
    if (!up || (!up->n_sums && !up->finish)) return FH_OK;
    FH_CHECK(algo_sum_coefficients(up, s, u, m, p, coef));
    double acc[NN_SUM_BINS * ALGO_BLOCK];
    for (int k = 0; k < up->n_sums; k++)
        for (int64_t lo = 0; lo < s->n_state; lo += ALGO_BLOCK) {
            const int64_t n = algo_block_len(lo, s->n_state);
            nn_sum_zero(acc, n);
            for (int i = 0; i < m; i++)
                algo_sum_add(acc, &up->sums[k], coef[(size_t)(1 + k) * m + i], u[i].state, u[i].vecs, s->current,
                             s->n_state, lo, n);
            nn_sum_result(acc, n, sums + (size_t)k * s->n_state + lo);
        }
    return up->finish ? up->finish(s, sums, global) : FH_OK;
}
