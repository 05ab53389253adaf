/* A method's server step over gathered uploads as the runtime calls it (algo_server_update: its own update, or
 * observe, the weighted average, the sums and finish), with buffers for the sums and coefficients. Include after
 * test.h. */
#ifndef FEDHET_TEST_SERVER_STEP_H
#define FEDHET_TEST_SERVER_STEP_H

#include <stdlib.h>

#include "fedhet/algo.h"

static inline int server_step(const AlgoMethod *m, AlgoServerCtx *s, const AlgoUpload *u, int n, const double *p,
                              float *global)
{
    float *sums = calloc((size_t)ALGO_MAX_SUMS * (size_t)s->n_state, sizeof *sums);
    double *coef = calloc((size_t)(1 + ALGO_MAX_SUMS) * (size_t)n, sizeof *coef);
    CHECK(sums && coef);
    const int status = algo_server_update(m->update, s, u, n, p, global, sums, coef);
    free(sums);
    free(coef);
    return status;
}

#endif
