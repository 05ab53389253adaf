/* Shared by test_models and test_onednn: a zoo model trained for a few SGD steps on fixed data, its losses and
 * final state. Include after test.h. */
#ifndef FEDHET_TEST_ZOO_TRAIN_H
#define FEDHET_TEST_ZOO_TRAIN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/core.h"
#include "fedhet/nn.h"
#include "fedhet/rng.h"

/* `steps` SGD steps (learning rate lr, momentum 0.9) of model `name` (options opt, may be NULL; 10 classes) on fixed
 * Philox data: step s takes the first batches[s % n_batches] samples of one batch of the largest size (a
 * smaller entry stands for a client's last partial batch); nudge +1 / -1: every input value one float step up /
 * down, the smallest change of the data there is (0: none). losses[steps]; returns a copy of the final state (free()) or NULL,
 * with its length in *n_state. */
static inline float *zoo_train_fixed(const char *name, NnShape in, const NnZooOptions *opt, const int *batches,
                                     int n_batches, int steps, float lr, int nudge, uint64_t seed, float *losses,
                                     int64_t *n_state)
{
    int max_batch = 0;
    for (int i = 0; i < n_batches; i++) max_batch = batches[i] > max_batch ? batches[i] : max_batch;
    NnModel m;
    if (nn_zoo_build(&m, name, in, 10, max_batch, opt) != FH_OK) {
        printf("    build %s: %s\n", name, fh_error_message());
        return NULL;
    }
    nn_model_init_params(&m, seed);
    const int64_t n_in = (int64_t)max_batch * in.c * in.h * in.w;
    float *x = malloc(sizeof(float) * (size_t)n_in);
    float *dl = calloc((size_t)max_batch * 10, sizeof(float));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)max_batch);
    float *out = malloc(sizeof(float) * (size_t)m.n_state);
    NnSgd opt_sgd;
    int ok = x && dl && y && out && nn_sgd_init(&opt_sgd, m.n_params, 0.9f, 0.0f, 0) == FH_OK;
    if (ok) {
        FhRng rng;
        fh_rng_init(&rng, 20240611u, FH_RNG_TEST, 100, 0, 0);
        for (int64_t i = 0; i < n_in; i++) x[i] = (float)fh_rng_normal(&rng);
        for (int64_t i = 0; nudge && i < n_in; i++) x[i] = nextafterf(x[i], nudge > 0 ? INFINITY : -INFINITY);
        fh_rng_init(&rng, 20240611u, FH_RNG_TEST, 101, 0, 0);
        for (int i = 0; i < max_batch; i++) y[i] = (int32_t)fh_rng_below(&rng, 10);
        nn_model_set_training(&m, 1);
        for (int s = 0; s < steps && ok; s++) {
            const int batch = batches[s % n_batches];
            nn_model_zero_grad(&m);
            ok = nn_model_forward(&m, x, batch) == FH_OK;
            memset(dl, 0, sizeof(float) * (size_t)batch * 10);
            losses[s] = nn_softmax_xent(dl, NULL, nn_model_logits(&m), y, NULL, NULL, batch, 10);
            nn_model_backward(&m, dl, NULL);
            nn_sgd_step(&opt_sgd, m.state, m.grad, lr);
        }
        memcpy(out, m.state, sizeof(float) * (size_t)m.n_state);
        *n_state = m.n_state;
        nn_sgd_free(&opt_sgd);
    }
    if (!ok) {
        free(out);
        out = NULL;
    }
    free(x);
    free(dl);
    free(y);
    nn_model_free(&m);
    return out;
}

#endif
