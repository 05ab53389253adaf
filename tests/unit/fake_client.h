/* A method's client context around a model with a fake runtime (plain SGD steps, the method's gradient
 * correction, FL-Simulator's clip at norm 10), for tests that call a method family's hooks directly;
 * and a 2-parameter "model" for hand-computed examples. Include after test.h. */
#ifndef FEDHET_TEST_FAKE_CLIENT_H
#define FEDHET_TEST_FAKE_CLIENT_H

#include <stdlib.h>
#include <string.h>

#include "../../src/algo/algo_internal.h"
#include "test_options.h"

typedef struct {
    AlgoClientCtx c;
    AlgoClientRound round; /* what c->round points to: tests change the round, client, method here */
    AlgoClientServices svc;
    AlgoSetup setup;
    AlgoSizes z;
    AlgoOptionBlock opts; /* the method's keys: defaults, changed by fake_set */
    double up[8];
    float *work, *client_vecs, *server_vecs, *global, *upload_vecs;
    double server_scalars[4];
    NnSgd sgd;
    float *opt_seen; /* set by a test: receives the weights the last optimiser step started from */
} Fake;

static void fake_grad_terms(AlgoClientCtx *c, float *grad, double *loss)
{
    (void)loss;
    if (c->round->method->correction) c->round->method->correction->correct(c, grad);
    nn_clip_grad_norm(grad, c->round->n_params, 10.0f); /* FL-Simulator's clip (docs/methods/sam.md §0.2) */
}

static void fake_optimizer_step(AlgoClientCtx *c, float *w, const float *grad)
{
    Fake *f = c->runtime;
    if (f->opt_seen) memcpy(f->opt_seen, w, (size_t)c->round->n_params * sizeof(float));
    nn_sgd_step(&f->sgd, w, grad, (float)c->round->lr);
}

/* method `name` with its default keys, 2 clients both selected, lr 0.1 decaying by 0.998 per round
 * (FL-Simulator's), 4 steps of batch 4; a caller that changes a key (fake_set) calls algo_sizes again */
static void fake_init(Fake *f, const char *name, NnModel *m)
{
    memset(f, 0, sizeof *f);
    const AlgoMethod *meth = algo_find(name);
    CHECK(meth != NULL);
    algo_options_reset(&f->opts, meth);
    f->setup = (AlgoSetup){ .options = algo_options_view(meth, &f->opts), .n_clients = 2, .per_round = 2,
                            .all_clients = 1, .rounds = 5, .n_params = m->n_params, .n_state = m->n_state,
                            .classes = m->classes, .optimizer = "sgd",
                            .lr = 0.1, .epochs = 1, .batch_size = 4, .lr_decay = 0.998 };
    const size_t n = (size_t)m->n_state;
    f->work = calloc(4 * n, sizeof(float));
    f->client_vecs = calloc(4 * n, sizeof(float));
    f->server_vecs = calloc(4 * n, sizeof(float));
    f->global = calloc(n, sizeof(float));
    f->upload_vecs = calloc(2 * n, sizeof(float));
    CHECK_OK(nn_sgd_init(&f->sgd, m->n_params, 0.0f, 0.0f, 0));
    f->round = (AlgoClientRound){ .lr = 0.1, .n_params = m->n_params, .n_state = m->n_state, .setup = &f->setup,
                                  .sizes = &f->z, .options = f->setup.options, .method = meth, .global = f->global,
                                  .server_vecs = f->server_vecs, .server_scalars = f->server_scalars };
    f->svc = (AlgoClientServices){ .optimizer_step = fake_optimizer_step, .grad_terms = fake_grad_terms };
    f->c = (AlgoClientCtx){ .model = m, .round = &f->round, .svc = &f->svc, .runtime = f,
                            .state = { .client_vecs = f->client_vecs, .upload_vecs = f->upload_vecs,
                                       .upload_scalars = f->up, .work = f->work, .n_steps = 4 } };
    algo_sizes(meth, &f->setup, &f->z);
}

/* key `key` of the fake's method := value (a choice: its index) */
static void fake_set(Fake *f, const char *key, double value) { option_set(&f->opts, f->round.method, key, value); }

static void fake_free(Fake *f)
{
    free(f->work), free(f->client_vecs), free(f->server_vecs), free(f->global), free(f->upload_vecs);
    free(f->opt_seen);
    nn_sgd_free(&f->sgd);
}

/* A 2-parameter "model" for the hand-computed examples: only state and grad are used. */
static void two_params(NnModel *m, float *state, float *grad)
{
    memset(m, 0, sizeof *m);
    m->state = state;
    m->grad = grad;
    m->n_params = m->n_state = 2;
    m->bn_update_running = 1;
}

#endif
