/* The per-step cost of the server-family hooks next to one local step of the cnn, in one process (built and
 * run by tests/bench/methods.sh). A step is forward, cross-entropy, backward and the SGD step (momentum 0.9)
 * on a batch of 64 Fashion-MNIST-sized images; a method's hooks per step are its gradient term and its
 * correction on the cnn's P parameters, plus its end-of-round hook amortised over STEPS steps. Steps and hooks
 * are timed interleaved, REPS times each; the minimum of each (the least disturbed sample) is reported, and the
 * median beside it.
 * usage: method_hooks [STEPS] [REPS]    prints CSV: method,hook_ms,hook_ms_median,step_ms,overhead_pct */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedhet/algo.h"
#include "fedhet/core.h"
#include "fedhet/nn.h"

enum { BATCH = 64, N_METHODS = 4 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double minimum(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        if (v[i] < m) m = v[i];
    return m;
}

int main(int argc, char **argv)
{
    const int steps = argc > 1 ? atoi(argv[1]) : 50, reps = argc > 2 ? atoi(argv[2]) : 30;
    if (steps < 1 || reps < 1) {
        fprintf(stderr, "usage: method_hooks [STEPS >= 1] [REPS >= 1]\n");
        return 1;
    }
    nn_set_threads(1);
    NnModel model;
    NnZooOptions zoo = { .norm = "bn", .gn_groups = 2 };
    if (nn_zoo_build(&model, "cnn", (NnShape){ 1, 28, 28 }, 10, BATCH, &zoo) != FH_OK) {
        fprintf(stderr, "%s\n", fh_error_message());
        return 1;
    }
    nn_model_init_params(&model, 1);
    const int64_t P = model.n_params, S = model.n_state;
    NnSgd sgd;
    if (nn_sgd_init(&sgd, P, 0.9f, 0.0f, 0) != FH_OK) return 1;
    float *x = malloc(sizeof(float) * BATCH * 784), *dlogits = malloc(sizeof(float) * BATCH * 10);
    int32_t y[BATCH];
    float *global = malloc(sizeof(float) * (size_t)S), *vecs = malloc(sizeof(float) * (size_t)S * 3);
    float *hook_grad = malloc(sizeof(float) * (size_t)S), *wk = malloc(sizeof(float) * (size_t)S);
    if (!x || !dlogits || !global || !vecs || !hook_grad || !wk) return 1;
    for (int i = 0; i < BATCH * 784; i++) x[i] = (float)((i * 7919) % 255) / 255.0f - 0.3f;
    for (int i = 0; i < BATCH; i++) y[i] = i % 10;
    memcpy(global, model.state, sizeof(float) * (size_t)S);
    for (int64_t j = 0; j < S; j++) {
        vecs[j] = 1e-3f * (float)(j % 13);
        vecs[S + j] = 1e-3f * (float)(j % 7);
        vecs[2 * S + j] = 0;
        hook_grad[j] = 1e-2f;
        wk[j] = global[j] + 1e-3f;
    }

    const char *names[N_METHODS] = { "fedprox", "scaffold", "feddyn", "fedcm" };
    AlgoOptionBlock options[N_METHODS]; /* each method at its defaults */
    for (int k = 0; k < N_METHODS; k++) algo_options_reset(&options[k], algo_find(names[k]));
    AlgoSetup setup = { .batch_size = BATCH, .optimizer = "sgd", .lr = 0.01, .momentum = 0.9 };
    double *t_step = calloc((size_t)reps, sizeof(double)), *t_hook = calloc((size_t)reps * N_METHODS, sizeof(double));
    NnModel hook_model = model; /* the end hooks read model->state: a view on wk */
    hook_model.state = wk;
    for (int r = 0; r < reps; r++) {
        double t0 = fh_time_now();
        nn_model_zero_grad(&model);
        if (nn_model_forward(&model, x, BATCH) != FH_OK) return 1;
        memset(dlogits, 0, sizeof(float) * BATCH * 10);
        nn_softmax_xent(dlogits, NULL, nn_model_logits(&model), y, NULL, NULL, BATCH, 10);
        nn_model_backward(&model, dlogits, NULL);
        nn_sgd_step(&sgd, model.state, model.grad, 0.01f);
        t_step[r] = fh_time_now() - t0;
        for (int k = 0; k < N_METHODS; k++) {
            const AlgoMethod *m = algo_find(names[k]);
            const AlgoClientRound round = { .lr = 0.01, .n_samples = 6000, .n_params = P, .n_state = S,
                                            .setup = &setup, .options = algo_options_view(m, &options[k]), .method = m,
                                            .global = global, .server_vecs = vecs };
            AlgoClientCtx c = { .model = &hook_model, .round = &round,
                                .state = { .client_vecs = vecs + S, .upload_vecs = vecs + 2 * S, .step = steps,
                                           .n_steps = steps } };
            t0 = fh_time_now();
            if (m->local_term) m->local_term->grad_term(&c, wk, hook_grad);
            if (m->correction) m->correction->correct(&c, hook_grad);
            double t = fh_time_now() - t0;
            if (m->report && m->report->end) {
                t0 = fh_time_now();
                m->report->end(&c);
                t += (fh_time_now() - t0) / steps;
            }
            t_hook[(size_t)k * reps + r] = t;
        }
    }
    const double step_min = minimum(t_step, reps);
    printf("method,hook_ms,hook_ms_median,step_ms,overhead_pct\n");
    for (int k = 0; k < N_METHODS; k++) {
        double *v = t_hook + (size_t)k * reps;
        const double mn = minimum(v, reps), md = median(v, reps);
        printf("%s,%.4f,%.4f,%.3f,%.2f\n", names[k], 1e3 * mn, 1e3 * md, 1e3 * step_min, 100.0 * mn / step_min);
    }
    fprintf(stderr, "cnn step (P = %lld): min %.3f ms, median %.3f ms over %d\n", (long long)P, 1e3 * step_min,
            1e3 * median(t_step, reps), reps);
    return 0;
}
