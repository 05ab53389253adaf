/* The 'server' method family (docs/methods/baselines.md A.3-A.8) by hand: each method's hooks called directly on small vectors
 * (2 trainable parameters and 1 buffer) against values worked out from the documented equations, and the
 * algebraic identities of their state: SCAFFOLD's c = (1/K) sum_k c_k under any selection, FedDyn's
 * S = sum_k H_k, FedNova = FedAvg for equal step counts, FedAvgM beta = 0 = FedAvg.
 * Run one test: build/tests/test_algo_server test_name */
#include "test.h"

#include <stdlib.h>

#include "fedhet/algo.h"
#include "fedhet/rng.h"
#include "test_options.h"

enum { P = 2, S = 3 }; /* trainable parameters, state size (1 buffer) */

static AlgoServerCtx server(const AlgoMethod *m, AlgoOptions o, const float *current, float *vecs, float *priv,
                            int K, AlgoSizes *z)
{
    static AlgoSetup setup;
    setup = (AlgoSetup){ .options = o, .n_clients = K, .n_params = P, .n_state = S, .optimizer = "sgd", .lr = 0.1,
                         .batch_size = 4 };
    static max_align_t scratch[8];
    algo_sizes(m, &setup, z);
    CHECK(z->server_scratch <= sizeof scratch);
    return (AlgoServerCtx){ .n_clients = K, .n_params = P, .n_state = S, .options = o, .setup = &setup, .sizes = z,
                            .lr = 0.1, .current = current, .server_vecs = vecs, .server_private = priv,
                            .scratch = { scratch, z->server_scratch } };
}

/* the method's weights, then its update */
static void aggregate(const AlgoMethod *m, AlgoServerCtx *s, const AlgoUpload *u, int n, float *out)
{
    double p[8];
    float sums[ALGO_MAX_SUMS * S];
    double coef[(1 + ALGO_MAX_SUMS) * 8];
    s->n_selected = n; /* as the runtime's context says */
    CHECK_OK(m->weights->weights(s, u, n, p));
    CHECK_OK(algo_server_update(m->update, s, u, n, p, out, sums, coef));
}

static void test_fedavgm_variants_by_hand(void)
{
    const AlgoMethod *m = algo_find("fedavgm");
    CHECK(m && m->update && algo_option_find(m, "beta") && algo_option_find(m, "eta_g"));
    /* two clients, n = 1 and 3: avg = (w1 + 3 w2)/4 */
    float w0[S] = { 1.0f, -2.0f, 5.0f }, a[S] = { 0.0f, -2.0f, 1.0f }, b[S] = { 0.5f, -1.0f, 3.0f };
    AlgoUpload u[2] = { { 0, 1, 4, 0, NULL, a, NULL }, { 1, 3, 4, 0, NULL, b, NULL } };
    const double avg[S] = { 0.375, -1.25, 2.5 }; /* g = w0 - avg = (0.625, -0.75) */
    const double beta = 0.5, eta = 2.0;
    for (int variant = 0; variant < 4; variant++) {
        AlgoOptionBlock ob;
        const AlgoOptions o = options_default(&ob, m);
        option_set(&ob, m, "beta", beta);
        option_set(&ob, m, "eta_g", eta);
        option_set(&ob, m, "variant", variant);
        float v[S] = { 0.25f, -0.5f, 0 }, out[S];
        AlgoSizes z;
        AlgoServerCtx s = server(m, o, w0, NULL, v, 2, &z);
        CHECK(z.server_private == 1 && z.server_vectors == 0);
        aggregate(m, &s, u, 2, out);
        for (int j = 0; j < P; j++) {
            const double g = w0[j] - avg[j], vo = j ? -0.5 : 0.25;
            double vn, expect;
            switch (variant) {
            case 0: vn = beta * vo + g; expect = w0[j] - eta * vn; break;                /* canonical */
            case 1: vn = beta * vo - g; expect = w0[j] + eta * vn; break;                /* flood: deltas */
            case 2: vn = beta * vo + (1 - beta) * g; expect = w0[j] - eta * vn; break;   /* ema */
            default: vn = beta * vo + g; expect = w0[j] - eta * (g + beta * vn); break;  /* nesterov */
            }
            CHECK_NEAR(out[j], expect, 1e-6);
            CHECK_NEAR(v[j], vn, 1e-6);
        }
        CHECK_NEAR(out[2], avg[2], 0); /* buffer: plain sample-weighted average */
    }
    /* flood with v_f = -v: the same model as canonical */
    {
        AlgoOptionBlock bc, bf;
        const AlgoOptions canonical = options_default(&bc, m), flood = options_default(&bf, m);
        option_set(&bc, m, "beta", beta);
        option_set(&bc, m, "eta_g", eta);
        option_set(&bf, m, "beta", beta);
        option_set(&bf, m, "eta_g", eta);
        option_set(&bf, m, "variant", 1); /* flood */
        float vc[S] = { 0.25f, -0.5f, 0 }, vf[S] = { -0.25f, 0.5f, 0 }, oc[S], of[S];
        AlgoSizes z;
        AlgoServerCtx sc = server(m, canonical, w0, NULL, vc, 2, &z);
        aggregate(m, &sc, u, 2, oc);
        AlgoServerCtx sf = server(m, flood, w0, NULL, vf, 2, &z);
        aggregate(m, &sf, u, 2, of);
        CHECK(memcmp(oc, of, sizeof oc) == 0);
        CHECK(vc[0] == -vf[0] && vc[1] == -vf[1]);
    }
    /* beta = 0, eta_g = 1: exactly FedAvg, whatever v held */
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, m);
    option_set(&ob, m, "beta", 0);
    option_set(&ob, m, "eta_g", 1);
    double ref_p[2];
    float v[S] = { 7, -3, 0 }, out[S], ref[S];
    AlgoSizes z;
    AlgoServerCtx s = server(m, o, w0, NULL, v, 2, &z);
    aggregate(m, &s, u, 2, out);
    CHECK_OK(algo_weights_samples.weights(&s, u, 2, ref_p));
    CHECK_OK(algo_average(&s, u, 2, ref_p, ref));
    CHECK(memcmp(out, ref, sizeof out) == 0);
}

/* The weighted average over gathered uploads (algo_average) has the bits of the folded round: the uploads'
 * terms p_i / sum p x_i summed on several ranks (partial sums, merged in another order) */
static void test_average_is_the_fold(void)
{
    enum { M = 7 };
    const AlgoMethod *m = algo_find("fedavg");
    AlgoOptionBlock ob;
    AlgoSizes z;
    float w0[S] = { 0 }, states[M][S], gathered[S], folded[S];
    AlgoServerCtx s = server(m, options_default(&ob, m), w0, NULL, NULL, M, &z);
    AlgoUpload u[M];
    FhRng rng;
    fh_rng_init(&rng, 9, FH_RNG_TEST, 0, 0, 0);
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < S; j++) states[i][j] = (float)((fh_rng_uniform(&rng) - 0.5) * pow(10.0, 6.0 * (i % 3) - 4.0));
        u[i] = (AlgoUpload){ i, 1 + (int64_t)(fh_rng_uniform(&rng) * 100), 3, 0, NULL, states[i], NULL };
    }
    double p[M], total;
    CHECK_OK(m->weights->weights(&s, u, M, p));
    CHECK_OK(algo_server_update(m->update, &s, u, M, p, gathered, NULL, NULL));
    CHECK_OK(algo_average_total(&s, p, M, &total));
    double rank[3][NN_SUM_BINS * S];
    for (int r = 0; r < 3; r++) nn_sum_zero(rank[r], S);
    for (int i = M - 1; i >= 0; i--) nn_sum_add(rank[i % 3], p[i] / total, states[i], S); /* ranks own every third */
    nn_sum_merge(rank[1], rank[2], S);
    nn_sum_merge(rank[1], rank[0], S);
    nn_sum_result(rank[1], S, folded);
    CHECK(memcmp(gathered, folded, sizeof folded) == 0);
}

static void test_fedprox_term(void)
{
    const AlgoMethod *m = algo_find("fedprox");
    CHECK(m && m->local_term && m->weights);
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, m);
    option_set(&ob, m, "mu", 0.5);
    float global[S] = { 1, 2, 9 }, w[S] = { 2, 0, 4 }, grad[S] = { 0.1f, 0.2f, 0.3f };
    const AlgoClientRound c_round = { .global = global, .options = o, .n_params = P, .n_state = S };
    AlgoClientCtx c = { .round = &c_round };
    double value = m->local_term->grad_term(&c, w, grad);
    CHECK_NEAR(value, 0.25 * (1 + 4), 1e-12); /* (mu/2)||w - w^t||^2 over the parameters only */
    CHECK_NEAR(grad[0], 0.1 + 0.5 * 1, 1e-6);
    CHECK_NEAR(grad[1], 0.2 + 0.5 * -2, 1e-6);
    CHECK(grad[2] == 0.3f); /* buffers untouched */
    /* weights: samples by default, uniform on request */
    float a[S] = { 0 }, b[S] = { 0 };
    AlgoUpload u[2] = { { 0, 1, 1, 0, NULL, a, NULL }, { 1, 3, 1, 0, NULL, b, NULL } };
    AlgoServerCtx s = { .options = o, .n_params = P, .n_state = S };
    double p[2];
    CHECK_OK(m->weights->weights(&s, u, 2, p));
    CHECK(p[0] == 1 && p[1] == 3);
    option_set(&ob, m, "weights", 1); /* uniform */
    CHECK_OK(m->weights->weights(&s, u, 2, p));
    CHECK(p[0] == p[1]);
}

/* SCAFFOLD option II on the client: c_k+ = c_k - c + (w^t - y)/(K_k lr), delta c = c_k+ - c_k */
static void test_scaffold_client_by_hand(void)
{
    const AlgoMethod *m = algo_find("scaffold");
    CHECK(m && m->report && m->report->end && m->correction);
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, m); /* option II */
    AlgoSetup setup = { .options = o, .batch_size = 4, .optimizer = "sgd" };
    float global[S] = { 1, 2, 7 }, y[S] = { 0.5f, 2.5f, 8 }, cs[S] = { 0.1f, -0.2f, 0 }, ck[S] = { 0.3f, 0.4f, 0 };
    float up[S] = { 9, 9, 9 }, grad[S] = { 1, 1, 1 };
    NnModel model;
    memset(&model, 0, sizeof model);
    model.state = y;
    const AlgoClientRound c_round = { .global = global, .server_vecs = cs, .options = o, .setup = &setup,
                                      .n_params = P, .n_state = S, .lr = 0.1, .n_samples = 16 };
    AlgoClientCtx c = { .model = &model, .round = &c_round,
                        .state = { .client_vecs = ck, .upload_vecs = up, .step = 4, .n_steps = 4 } };
    m->correction->correct(&c, grad);
    CHECK_NEAR(grad[0], 1 + 0.1 - 0.3, 1e-6);
    CHECK_NEAR(grad[1], 1 - 0.2 - 0.4, 1e-6);
    CHECK(grad[2] == 1);
    CHECK_OK(m->report->end(&c));
    const double c0 = 0.3 - 0.1 + (1 - 0.5) / 0.4, c1 = 0.4 + 0.2 + (2 - 2.5) / 0.4;
    CHECK_NEAR(ck[0], c0, 1e-6);
    CHECK_NEAR(ck[1], c1, 1e-6);
    CHECK_NEAR(up[0], c0 - 0.3, 1e-6);
    CHECK_NEAR(up[1], c1 - 0.4, 1e-6);
    CHECK(up[2] == 0 && ck[2] == 0);
}

/* server: w = w^t + avg(y - w^t) (uniform), c += (1/K) sum delta c_k with K = all clients; the model's
 * buffers are averaged */
static void test_scaffold_server_by_hand(void)
{
    const AlgoMethod *m = algo_find("scaffold");
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, m); /* option II, uniform, eta_g = 1 */
    float w0[S] = { 1, 1, 0 }, a[S] = { 0, 2, 4 }, b[S] = { 1, 5, 8 }, c[S] = { 0.5f, 0.5f, 0 };
    float da[S] = { 1, 2, 0 }, db[S] = { 3, -4, 0 }, out[S];
    AlgoUpload u[2] = { { 1, 10, 3, 0, NULL, a, da }, { 4, 30, 3, 0, NULL, b, db } };
    AlgoSizes z;
    AlgoServerCtx s = server(m, o, w0, c, NULL, 5, &z);
    CHECK(z.client_vectors == 1 && z.server_vectors == 1 && z.upload_vectors == 1 && z.work_vectors == 0);
    aggregate(m, &s, u, 2, out);
    CHECK_NEAR(out[0], 0.5, 1e-7);
    CHECK_NEAR(out[1], 3.5, 1e-7);
    CHECK_NEAR(out[2], 6.0, 1e-7);
    CHECK_NEAR(c[0], 0.5 + (1 + 3) / 5.0, 1e-7);
    CHECK_NEAR(c[1], 0.5 + (2 - 4) / 5.0, 1e-7);
    /* eta_g = 2 doubles the step; weights = samples: (10 a + 30 b)/40 */
    option_set(&ob, m, "weights", 1); /* samples */
    option_set(&ob, m, "eta_g", 2);
    aggregate(m, &s, u, 2, out);
    CHECK_NEAR(out[0], 1 + 2 * (0.75 - 1), 1e-6);
    CHECK_NEAR(out[1], 1 + 2 * (4.25 - 1), 1e-6);
    CHECK_NEAR(out[2], 7.0, 1e-6);
    /* flood: c becomes the plain mean of the uploaded c_k */
    option_set(&ob, m, "variant", 1); /* flood */
    option_set(&ob, m, "eta_g", 1);
    algo_sizes(m, s.setup, &z);
    CHECK(z.work_vectors == 1);
    aggregate(m, &s, u, 2, out);
    CHECK_NEAR(c[0], 2.0, 1e-7);
    CHECK_NEAR(c[1], -1.0, 1e-7);
}

/* c = (1/K) sum_k c_k holds after every round whatever the selection, because c moves by (1/K) of the
 * selected clients' changes; the clients' end hook and the server update, 6 rounds on K = 4 */
static void test_scaffold_variate_is_mean_of_clients(void)
{
    const AlgoMethod *m = algo_find("scaffold");
    enum { K = 4 };
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, m);
    AlgoSetup setup = { .options = o, .batch_size = 4, .optimizer = "sgd" };
    float global[S] = { 0.5f, -0.25f, 1 }, next[S], cs[S] = { 0 }, ck[K][S], y[K][S], dc[K][S];
    memset(ck, 0, sizeof ck);
    FhRng rng;
    fh_rng_init(&rng, 5, FH_RNG_TEST, 0, 0, 0);
    for (int round = 0; round < 6; round++) {
        int sel[K], n = 0;
        for (int k = 0; k < K; k++)
            if (round % 3 == 0 || fh_rng_uniform(&rng) < 0.5) sel[n++] = k; /* full, then partial rounds */
        if (n == 0) sel[n++] = round % K;
        AlgoUpload u[K];
        for (int i = 0; i < n; i++) {
            const int k = sel[i];
            for (int j = 0; j < S; j++) y[k][j] = global[j] + (float)(fh_rng_uniform(&rng) - 0.5);
            NnModel model;
            memset(&model, 0, sizeof model);
            model.state = y[k];
            const AlgoClientRound c_round = { .global = global, .server_vecs = cs, .options = o, .setup = &setup,
                                              .n_params = P, .n_state = S, .lr = 0.05, .n_samples = 12 };
            AlgoClientCtx c = { .model = &model, .round = &c_round,
                                .state = { .client_vecs = ck[k], .upload_vecs = dc[k], .step = 3 + k,
                                           .n_steps = 3 + k } };
            CHECK_OK(m->report->end(&c));
            u[i] = (AlgoUpload){ k, 12, 3 + k, 0, NULL, y[k], dc[k] };
        }
        AlgoSizes z;
        AlgoServerCtx s = server(m, o, global, cs, NULL, K, &z);
        s.round = round;
        aggregate(m, &s, u, n, next);
        memcpy(global, next, sizeof global);
        for (int j = 0; j < P; j++) {
            double mean = 0;
            for (int k = 0; k < K; k++) mean += ck[k][j];
            CHECK_NEAR(cs[j], mean / K, 1e-5 * (1 + fabs(mean)));
        }
    }
    CHECK(cs[0] != 0 && cs[1] != 0);
}

static void test_feddyn_by_hand(void)
{
    const AlgoMethod *m = algo_find("feddyn");
    CHECK(m && m->local_term && m->report && m->update);
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, m);
    option_set(&ob, m, "alpha", 0.5);
    float global[S] = { 1, 2, 3 }, w[S] = { 2, 0, 3 }, H[S] = { 0.5f, -1, 0 }, grad[S] = { 0, 0, 0 };
    NnModel model;
    memset(&model, 0, sizeof model);
    model.state = w;
    const AlgoClientRound c_round = { .global = global, .options = o, .n_params = P, .n_state = S };
    AlgoClientCtx c = { .model = &model, .round = &c_round, .state = { .client_vecs = H } };
    /* gradient alpha (w - w^t + H), value alpha <H, w> + (alpha/2)||w - w^t||^2 */
    double value = m->local_term->grad_term(&c, w, grad);
    CHECK_NEAR(grad[0], 0.5 * (1 + 0.5), 1e-7);
    CHECK_NEAR(grad[1], 0.5 * (-2 - 1), 1e-7);
    CHECK(grad[2] == 0);
    CHECK_NEAR(value, 0.5 * (0.5 * 2 + -1 * 0) + 0.25 * (1 + 4), 1e-12);
    CHECK_OK(m->report->end(&c)); /* H_k += w_k - w^t */
    CHECK_NEAR(H[0], 1.5, 1e-7);
    CHECK_NEAR(H[1], -3.0, 1e-7);
    CHECK(H[2] == 0);
    /* server: S += sum deltas; w = uniform mean + S/K (K = 4) */
    float Ssum[S] = { 1, 1, 0 }, a[S] = { 2, 0, 3 }, b[S] = { 0, 4, 5 }, out[S];
    AlgoUpload u[2] = { { 0, 5, 2, 0, NULL, a, NULL }, { 2, 50, 2, 0, NULL, b, NULL } };
    AlgoSizes z;
    AlgoServerCtx s = server(m, o, global, NULL, Ssum, 4, &z);
    CHECK(z.client_vectors == 1 && z.server_private == 1);
    aggregate(m, &s, u, 2, out);
    CHECK_NEAR(Ssum[0], 1 + (1 + -1), 1e-7);
    CHECK_NEAR(Ssum[1], 1 + (-2 + 2), 1e-7);
    CHECK_NEAR(out[0], 1 + 1 / 4.0, 1e-7);
    CHECK_NEAR(out[1], 2 + 1 / 4.0, 1e-7);
    CHECK_NEAR(out[2], 4, 1e-7); /* buffer: uniform mean */
}

static void test_fednova_by_hand(void)
{
    const AlgoMethod *m = algo_find("fednova");
    CHECK(m && m->report && m->update && m->validate);
    AlgoSetup setup = { .momentum = 0.9, .optimizer = "sgd" };
    double scalar = 0;
    const AlgoClientRound c_round = { .setup = &setup };
    AlgoClientCtx c = { .round = &c_round, .state = { .upload_scalars = &scalar, .step = 5 } };
    CHECK_OK(m->report->end(&c));
    CHECK_NEAR(scalar, (5 - 0.9 * (1 - pow(0.9, 5)) / 0.1) / 0.1, 1e-12); /* 13.1441 */
    CHECK_NEAR(scalar, 13.1441, 1e-9);
    setup.momentum = 0;
    CHECK_OK(m->report->end(&c));
    CHECK(scalar == 5);
    setup.optimizer = "adam";
    CHECK(m->validate(m, &setup) == FH_ERR_USAGE);
    fh_error_clear();

    /* unequal a_k: w = w^t - tau_eff sum p_k (w^t - w_k)/a_k, tau_eff = sum p_k a_k, p = samples */
    float w0[S] = { 1, -1, 0 }, a[S] = { 0, 1, 2 }, b[S] = { 3, -3, 6 }, out[S];
    double sa = 2, sb = 6;
    AlgoUpload u[2] = { { 0, 10, 2, 0, &sa, a, NULL }, { 1, 30, 6, 0, &sb, b, NULL } };
    AlgoSizes z;
    AlgoOptionBlock ob;
    AlgoServerCtx s = server(m, options_default(&ob, m), w0, NULL, NULL, 2, &z);
    CHECK(z.upload_scalars == 1);
    aggregate(m, &s, u, 2, out);
    const double tau = 0.25 * 2 + 0.75 * 6;
    for (int j = 0; j < P; j++) {
        const double d = 0.25 * (w0[j] - a[j]) / 2 + 0.75 * (w0[j] - b[j]) / 6;
        CHECK_NEAR(out[j], w0[j] - tau * d, 1e-6);
    }
    CHECK_NEAR(out[2], 0.25 * 2 + 0.75 * 6, 1e-7); /* buffer: sample-weighted average */
    /* equal a_k: the sample-weighted average bit for bit */
    sa = sb = 13.1441;
    double p[2];
    float ref[S];
    aggregate(m, &s, u, 2, out);
    CHECK_OK(algo_weights_samples.weights(&s, u, 2, p));
    CHECK_OK(algo_average(&s, u, 2, p, ref));
    CHECK(memcmp(out, ref, sizeof out) == 0);
}

static void test_fedcm_by_hand(void)
{
    const AlgoMethod *m = algo_find("fedcm");
    CHECK(m && m->correction && m->update);
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, m);
    option_set(&ob, m, "alpha", 0.25);
    float D[S] = { 4, -8, 0 }, grad[S] = { 1, 2, 3 };
    const AlgoClientRound c_round = { .server_vecs = D, .options = o, .n_params = P, .n_state = S };
    AlgoClientCtx c = { .round = &c_round };
    m->correction->correct(&c, grad);
    CHECK_NEAR(grad[0], 0.25 * 1 + 0.75 * 4, 1e-7);
    CHECK_NEAR(grad[1], 0.25 * 2 + 0.75 * -8, 1e-7);
    CHECK(grad[2] == 3);
    /* w = w^t + mean delta (uniform); D = -mean delta / (K_loc lr), K_loc = mean steps = 4, lr = 0.1 */
    float w0[S] = { 1, 1, 0 }, a[S] = { 0, 2, 4 }, b[S] = { 1, 5, 8 }, out[S];
    AlgoUpload u[2] = { { 0, 1, 2, 0, NULL, a, NULL }, { 1, 9, 6, 0, NULL, b, NULL } };
    AlgoSizes z;
    AlgoServerCtx s = server(m, o, w0, D, NULL, 3, &z);
    CHECK(z.server_vectors == 1);
    aggregate(m, &s, u, 2, out);
    CHECK_NEAR(out[0], 0.5, 1e-7);
    CHECK_NEAR(out[1], 3.5, 1e-7);
    CHECK_NEAR(out[2], 6, 1e-7);
    CHECK_NEAR(D[0], -(0.5 - 1) / (4 * 0.1), 1e-6);
    CHECK_NEAR(D[1], -(3.5 - 1) / (4 * 0.1), 1e-6);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_fedavgm_variants_by_hand);
    RUN(test_average_is_the_fold);
    RUN(test_fedprox_term);
    RUN(test_scaffold_client_by_hand);
    RUN(test_scaffold_server_by_hand);
    RUN(test_scaffold_variate_is_mean_of_clients);
    RUN(test_feddyn_by_hand);
    RUN(test_fednova_by_hand);
    RUN(test_fedcm_by_hand);
    return test_summary();
}
