/* The 'fair' method family (docs/methods/baselines.md A.9-A.16) through its hooks, on hand-made uploads: q-FedAvg with q = 0
 * is uniform averaging bit for bit and with q = 1 the documented step; AFL's simplex projection on hand-computed
 * examples and its refusal of partial participation; FairFed, FedGA, FedLW, FedNoLoWe weights on hand
 * examples; FedDisco with a = b = 0 gives FedAvg's weights exactly. Client hooks run with a stub
 * eval_local that returns chosen losses and accuracies. */
#include "test.h"

#include <stdlib.h>

#include "fedhet/algo.h"
#include "server_step.h"
#include "test_options.h"

enum { MAXK = 8 };

/* stub evaluation: per client, the value for the broadcast global state, for the client's own (trained)
 * state and for any other state (FedCE's minus model) */
static double stub_global[MAXK], stub_own[MAXK], stub_other[MAXK];
static int stub_calls;

static int stub_eval(AlgoClientCtx *c, NnModel *model, const float *state, AlgoLocalEval *out)
{
    stub_calls++;
    const double v = state == c->round->global ? stub_global[c->round->client]
                     : state == c->model->state ? stub_own[c->round->client] : stub_other[c->round->client];
    out->loss = v;
    out->accuracy = out->balanced_accuracy = v;
    return FH_OK;
}

typedef struct {
    NnModel model;
    AlgoClientCtx c;
    AlgoClientRound round;
    AlgoClientServices svc;
    AlgoSetup setup;
    AlgoSizes z;
    double up[4];
} FakeClient;

/* a client of method m at `round` holding state `w` after training from `global` */
static void fake_client(FakeClient *f, const AlgoMethod *m, AlgoOptions o, int K, int client, int round,
                        const float *global, float *w, int64_t n_params, int64_t n_state, double lr)
{
    memset(f, 0, sizeof *f);
    f->setup = (AlgoSetup){ .options = o, .n_clients = K, .per_round = K, .all_clients = 1, .rounds = 10,
                            .n_params = n_params, .n_state = n_state, .optimizer = "sgd", .lr = lr };
    algo_sizes(m, &f->setup, &f->z);
    f->model.state = w;
    f->round = (AlgoClientRound){ .client = client, .t = round, .lr = lr, .n_params = n_params, .n_state = n_state,
                                  .setup = &f->setup, .sizes = &f->z, .options = o, .method = m, .global = global };
    f->svc = (AlgoClientServices){ .eval_local = stub_eval };
    f->c = (AlgoClientCtx){ .model = &f->model, .round = &f->round, .svc = &f->svc,
                            .state = { .upload_scalars = f->up } };
}

static AlgoServerCtx server(const AlgoMethod *m, AlgoOptions o, AlgoSetup *setup, AlgoSizes *z, int K, int round,
                            const float *current, int64_t n_params, int64_t n_state, double lr, double *scalars,
                            const int64_t *sizes)
{
    *setup = (AlgoSetup){ .options = o, .n_clients = K, .per_round = K, .all_clients = 1, .rounds = 10,
                          .n_params = n_params, .n_state = n_state, .optimizer = "sgd", .lr = lr };
    algo_sizes(m, setup, z);
    return (AlgoServerCtx){ .round = round, .rounds = 10, .n_clients = K, .n_selected = K, .n_params = n_params,
                            .n_state = n_state, .options = o, .setup = setup, .sizes = z, .lr = lr, .current = current,
                            .server_scalars = scalars, .client_sizes = sizes,
                            .scratch = test_scratch(z->server_scratch) };
}

/* ---- q-FedAvg -------------------------------------------------------------------------------------------- */

/* Spec A.9's unit test: with q = 0, h_k = L and w^{t+1} = w^t - (1/m) sum_k (w^t - w_k) = (1/m) sum_k w_k,
 * uniform averaging (not FedAvg's sample weights: the step has no n_k in it). The implementation is exactly
 * uniform averaging bit for bit; with q = 1 it is the documented step w^t - sum D_k / sum h_k. */
static void test_qfedavg_q0_is_uniform_and_q1_the_step(void)
{
    const AlgoMethod *m = algo_find("qfedavg");
    CHECK(m != NULL);
    if (!m) return;
    const int64_t P = 6;
    const double lr = 0.07;
    float w0[6] = { 0.3f, -1.25f, 2.0f, 0.01f, 5.5f, -0.75f };
    float x[3][6] = { { 0.25f, -1.0f, 2.5f, 0.0f, 5.0f, -0.7f },
                      { 0.5f, -1.5f, 1.75f, 0.02f, 6.0f, -0.8f },
                      { 0.1f, -1.2f, 2.2f, 0.03f, 5.25f, -0.72f } };
    const double F[3] = { 0.8, 2.5, 1.3 };
    const int64_t n[3] = { 10, 50, 25 };
    for (int qi = 0; qi < 2; qi++) {
        AlgoOptionBlock ob;
        const AlgoOptions opts = OPTIONS(&ob, m, { "q", qi == 0 ? 0.0 : 1.0 }, { "variant", 0 /* original */ });
        double up[3][4];
        AlgoUpload u[3];
        for (int k = 0; k < 3; k++) {
            FakeClient fc;
            fake_client(&fc, m, opts, 3, k, 2, w0, x[k], P, P, lr);
            CHECK(fc.z.upload_scalars == 2);
            stub_global[k] = F[k];
            CHECK_OK(m->report->begin(&fc.c));
            CHECK_OK(m->report->end(&fc.c));
            memcpy(up[k], fc.up, sizeof up[k]);
            u[k] = (AlgoUpload){ k, n[k], 4, 0.0, up[k], x[k], NULL };
        }
        CHECK_NEAR(up[1][0], 2.5, 0);
        AlgoSetup setup;
        AlgoSizes z;
        AlgoServerCtx s = server(m, opts, &setup, &z, 3, 2, w0, P, P, lr, NULL, NULL);
        double p[3];
        float got[6], want[6];
        CHECK_OK(m->weights->weights(&s, u, 3, p));
        CHECK_OK(server_step(m, &s, u, 3, p, got));
        if (qi == 0) {
            CHECK_NEAR(up[0][1], 1.0 / lr, 0); /* h_k = L */
            double pu[3];
            CHECK_OK(algo_weights_uniform.weights(&s, u, 3, pu));
            CHECK_OK(algo_average(&s, u, 3, pu, want));
            CHECK_MSG(memcmp(got, want, sizeof got) == 0, "q = 0 differs from uniform averaging");
        } else {
            /* the documented formulas written out */
            const double L = 1.0 / lr;
            double H = 0.0, D[6] = { 0 };
            for (int k = 0; k < 3; k++) {
                double sq = 0.0;
                for (int j = 0; j < P; j++) sq += (L * ((double)w0[j] - x[k][j])) * (L * ((double)w0[j] - x[k][j]));
                const double b = F[k] + 1e-10;
                const double h = 1.0 * sq + L * b;
                CHECK_NEAR(up[k][1], h, 1e-9 * h);
                H += h;
                for (int j = 0; j < P; j++) D[j] += b * L * ((double)w0[j] - x[k][j]);
            }
            for (int j = 0; j < P; j++) CHECK_NEAR(got[j], w0[j] - D[j] / H, 1e-6);
            CHECK(memcmp(got, w0, sizeof got) != 0);
        }
    }
    /* lossweight: p_k proportional to (F_k + 1e-10)^q */
    AlgoOptionBlock ob;
    const AlgoOptions opts = OPTIONS(&ob, m, { "q", 2.0 }, { "variant", 1 /* lossweight */ });
    AlgoUpload u[3];
    double up[3][1] = { { F[0] }, { F[1] }, { F[2] } };
    for (int k = 0; k < 3; k++) u[k] = (AlgoUpload){ k, n[k], 4, 0.0, up[k], x[k], NULL };
    AlgoSetup setup;
    AlgoSizes z;
    AlgoServerCtx s = server(m, opts, &setup, &z, 3, 0, w0, P, P, lr, NULL, NULL);
    CHECK(z.upload_scalars == 1);
    double p[3];
    CHECK_OK(m->weights->weights(&s, u, 3, p));
    CHECK_NEAR(p[1] / p[0], pow(2.5 + 1e-10, 2) / pow(0.8 + 1e-10, 2), 1e-12);
}

/* with buffers, the original step covers the trainable part; buffers get sample-weighted averaging */
static void test_qfedavg_buffers_sample_weighted(void)
{
    const AlgoMethod *m = algo_find("qfedavg");
    const int64_t P = 2, S = 4;
    float w0[4] = { 1, 1, 0, 0 };
    float a[4] = { 0, 2, 1, 10 }, b[4] = { 2, 0, 3, 20 };
    double ua[2] = { 1.0, 0 }, ub[2] = { 1.0, 0 };
    AlgoOptionBlock ob;
    const AlgoOptions opts = OPTIONS(&ob, m, { "q", 0.0 }, { "variant", 0 /* original */ });
    ua[1] = ub[1] = 1.0 / 0.1; /* h_k = L with q = 0 */
    AlgoUpload u[2] = { { 0, 30, 1, 0, ua, a, NULL }, { 1, 10, 1, 0, ub, b, NULL } };
    AlgoSetup setup;
    AlgoSizes z;
    AlgoServerCtx s = server(m, opts, &setup, &z, 2, 0, w0, P, S, 0.1, NULL, NULL);
    double p[2];
    float got[4];
    CHECK_OK(m->weights->weights(&s, u, 2, p));
    CHECK_OK(server_step(m, &s, u, 2, p, got));
    CHECK_NEAR(got[0], 1.0, 1e-7); /* uniform on parameters */
    CHECK_NEAR(got[1], 1.0, 1e-7);
    CHECK_NEAR(got[2], (30 * 1.0 + 10 * 3.0) / 40, 1e-6); /* n_k-weighted on buffers */
    CHECK_NEAR(got[3], (30 * 10.0 + 10 * 20.0) / 40, 1e-6);
}

/* ---- AFL -------------------------------------------------------------------------------------------------- */

/* lambda <- Proj(lambda + eta_lambda l): with lambda = 1/K, eta_lambda = 1 and losses y - 1/K the update
 * hook projects y; each y below is projected by hand with the sort-based rule of docs/methods/baselines.md A.10 */
static void test_afl_simplex_projection(void)
{
    const AlgoMethod *m = algo_find("afl");
    CHECK(m != NULL);
    if (!m) return;
    static const struct {
        int n;
        double y[4], want[4];
    } cases[] = {
        { 3, { 0.6, 0.6, 0.0 }, { 0.5, 0.5, 0.0 } },            /* rho = 2, theta = -0.1 */
        { 3, { 2.0, 0.0, 0.0 }, { 1.0, 0.0, 0.0 } },            /* rho = 1, theta = -1 */
        { 4, { 0.5, 1.0, -0.5, 0.2 }, { 0.25, 0.75, 0.0, 0.0 } }, /* rho = 2, theta = -0.25 */
        { 3, { 0.1, 0.2, 0.7 }, { 0.1, 0.2, 0.7 } },            /* already on the simplex */
        { 3, { 0.1, 0.1, 0.1 }, { 1.0 / 3, 1.0 / 3, 1.0 / 3 } }, /* theta = +0.7/3 */
        { 4, { -1.0, 3.0, 2.5, 2.9 }, { 0.0, 3.0 - 7.4 / 3, 2.5 - 7.4 / 3, 2.9 - 7.4 / 3 } }, /* rho = 3, theta = -7.4/3 */
    };
    AlgoOptionBlock ob;
    const AlgoOptions opts = OPTIONS(&ob, m, { "variant", 0 /* original */ }, { "eta_lambda", 1.0 });
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int K = cases[t].n;
        const int64_t P = 2;
        float w0[2] = { 0, 0 }, x[4][2], avg[2] = { 0, 0 }, got[2];
        double lambda[4], p[4];
        AlgoUpload u[4];
        for (int k = 0; k < K; k++) {
            x[k][0] = (float)k;
            x[k][1] = 1.0f;
            lambda[k] = 1.0 / K;
            u[k] = (AlgoUpload){ k, 10, 1, cases[t].y[k] - 1.0 / K, NULL, x[k], NULL };
        }
        AlgoSetup setup;
        AlgoSizes z;
        AlgoServerCtx s = server(m, opts, &setup, &z, K, 0, w0, P, P, 0.1, lambda, NULL);
        s.server_private = avg;
        CHECK(z.server_scalars == K && z.server_private == 1 && z.eval_private == 0);
        CHECK_OK(m->weights->weights(&s, u, K, p));
        CHECK_OK(server_step(m, &s, u, K, p, got));
        double sum = 0.0;
        for (int k = 0; k < K; k++) {
            CHECK_MSG(fabs(lambda[k] - cases[t].want[k]) < 1e-12, "case %zu: lambda_%d = %.15g, want %.15g", t, k,
                      lambda[k], cases[t].want[k]);
            sum += lambda[k];
        }
        CHECK_NEAR(sum, 1.0, 1e-12);
    }
}

/* weights lambda on the models, the running average of iterates, lambda^0 = 1/K; the worst variant puts
 * weight 1 on the largest F_k */
static void test_afl_average_and_worst(void)
{
    const AlgoMethod *m = algo_find("afl");
    const int K = 2;
    const int64_t P = 1;
    AlgoOptionBlock ob;
    const AlgoOptions opts = OPTIONS(&ob, m, { "variant", 0 /* original */ }, { "eta_lambda", 0.5 });
    float w0[1] = { 4.0f }, avg[1] = { 0 }, a[1] = { 2.0f }, b[1] = { 8.0f }, got[1];
    double lambda[2], p[2];
    AlgoSetup setup;
    AlgoSizes z;
    AlgoServerCtx s = server(m, opts, &setup, &z, K, 0, w0, P, P, 0.1, lambda, NULL);
    s.server_private = avg;
    CHECK_OK(m->server_init(&s, w0));
    CHECK_NEAR(lambda[0], 0.5, 0);
    CHECK_NEAR(avg[0], 4.0, 0);
    AlgoUpload u[2] = { { 0, 10, 1, 1.0, NULL, a, NULL }, { 1, 10, 1, 0.2, NULL, b, NULL } };
    CHECK_OK(m->weights->weights(&s, u, K, p));
    CHECK_OK(server_step(m, &s, u, K, p, got));
    CHECK_NEAR(got[0], 5.0, 1e-6);     /* 0.5 * 2 + 0.5 * 8 */
    CHECK_NEAR(avg[0], 5.0, 1e-6);     /* round 0: wbar^1 = w^1 */
    CHECK_NEAR(lambda[0], 0.7, 1e-12); /* Proj((0.5, 0.5) + 0.5 (1.0, 0.2)) = (0.7, 0.3) */
    CHECK_NEAR(lambda[1], 0.3, 1e-12);
    s.round = 1;
    s.current = got;
    float next[1];
    CHECK_OK(m->weights->weights(&s, u, K, p));
    CHECK_OK(server_step(m, &s, u, K, p, next));
    CHECK_NEAR(next[0], 0.7 * 2 + 0.3 * 8, 1e-6);
    CHECK_NEAR(avg[0], (1 * 5.0 + next[0]) / 2, 1e-6);

    AlgoOptionBlock wb;
    s = server(m, OPTIONS(&wb, m, { "variant", 1 /* worst */ }), &setup, &z, 3, 0, w0, P, P, 0.1, NULL, NULL);
    CHECK(z.server_scalars == 0 && z.upload_scalars == 1 && z.eval_private == -1);
    double F[3][1] = { { 0.5 }, { 1.5 }, { 1.5 } };
    float c[1] = { 9.0f };
    AlgoUpload v[3] = { { 0, 10, 3, 0, F[0], a, NULL }, { 2, 10, 3, 0, F[1], b, NULL }, { 5, 10, 3, 0, F[2], c, NULL } };
    double q[3];
    CHECK_OK(m->weights->weights(&s, v, 3, q));
    CHECK(q[0] == 0 && q[1] == 1 && q[2] == 0); /* ties: the lowest id */
    CHECK_OK(server_step(m, &s, v, 3, q, got));
    CHECK(got[0] == 8.0f);
}

static void test_afl_original_refuses_partial_participation(void)
{
    const AlgoMethod *m = algo_find("afl");
    AlgoOptionBlock bo, bw;
    const AlgoOptions orig = OPTIONS(&bo, m, { "variant", 0 }), worst = OPTIONS(&bw, m, { "variant", 1 });
    AlgoSetup s = { .options = orig, .n_clients = 6, .per_round = 3, .all_clients = 0, .optimizer = "sgd", .steps = 1 };
    CHECK(m->validate(m, &s) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "fl.selection") != NULL);
    s.all_clients = 1;
    CHECK_OK(m->validate(m, &s));
    s.steps = 0;
    CHECK(m->validate(m, &s) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "train.steps") != NULL);
    s.steps = 1;
    s.momentum = 0.9;
    CHECK(m->validate(m, &s) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "train.momentum") != NULL);
    s.momentum = 0;
    s.optimizer = "adam";
    CHECK(m->validate(m, &s) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "train.optimizer") != NULL);
    fh_error_clear();
    AlgoSetup w = { .options = worst, .n_clients = 6, .per_round = 3, .optimizer = "adam", .momentum = 0.9 };
    CHECK_OK(m->validate(m, &w));
    /* the methods that need every client */
    const char *all[] = { "fairfed", "fedce", "fedga" };
    for (int i = 0; i < 3; i++) {
        const AlgoMethod *a = algo_find(all[i]);
        AlgoOptionBlock ob;
        AlgoSetup p = { .options = options_default(&ob, a), .n_clients = 6, .per_round = 3, .optimizer = "sgd" };
        CHECK_MSG(a->validate(a, &p) == FH_ERR_USAGE && strstr(fh_error_message(), "fl.selection"), "%s", all[i]);
        p.all_clients = 1;
        CHECK_OK(a->validate(a, &p));
    }
}

/* ---- FairFed ---------------------------------------------------------------------------------------------- */

/* n = (10, 20, 70): omega^0 = (0.1, 0.2, 0.7); acc = (0.5, 0.8, 0.9), beta = 0.5. Acc = 0.84,
 * gaps (0.34, 0.04, 0.06), mean 0.14667: omega = (0.0033333, 0.2533333, 0.7433333) (sums to 1).
 * FFL4MIA's element-wise mean: gaps acc_k (1 - n_k/N) = (0.45, 0.64, 0.27), mean 0.45333:
 * omega = (0.1016667, 0.1066667, 0.7916667). */
static void test_fairfed_weights_hand_example(void)
{
    const AlgoMethod *m = algo_find("fairfed");
    const int64_t n[3] = { 10, 20, 70 };
    const double acc[3] = { 0.5, 0.8, 0.9 };
    const double want[2][3] = { { 0.1 - 0.5 * (0.34 - 0.44 / 3), 0.2 - 0.5 * (0.04 - 0.44 / 3),
                                  0.7 - 0.5 * (0.06 - 0.44 / 3) },
                                { 0.1 - 0.5 * (0.45 - 1.36 / 3), 0.2 - 0.5 * (0.64 - 1.36 / 3),
                                  0.7 - 0.5 * (0.27 - 1.36 / 3) } };
    for (int bug = 0; bug < 2; bug++) {
        AlgoOptionBlock ob;
        const AlgoOptions opts = OPTIONS(&ob, m, { "beta", 0.5 }, { "ffl4mia_bug", bug });
        double omega[3], up[3][1];
        float w0[1] = { 0 }, x[1] = { 0 };
        AlgoSetup setup;
        AlgoSizes z;
        AlgoServerCtx s = server(m, opts, &setup, &z, 3, 0, w0, 1, 1, 0.1, omega, n);
        CHECK(z.server_scalars == 3 && z.upload_scalars == 1);
        CHECK_OK(m->server_init(&s, w0));
        CHECK_NEAR(omega[2], 0.7, 1e-15);
        AlgoUpload u[3];
        stub_calls = 0;
        for (int k = 0; k < 3; k++) {
            FakeClient fc;
            fake_client(&fc, m, opts, 3, k, 1, w0, x, 1, 1, 0.1);
            stub_global[k] = acc[k];
            CHECK_OK(m->report->begin(&fc.c));
            up[k][0] = fc.up[0];
            u[k] = (AlgoUpload){ k, n[k], 1, 0, up[k], x, NULL };
        }
        CHECK(stub_calls == 3);
        double p[3];
        /* round 0 aggregates with omega^0 */
        CHECK_OK(m->weights->weights(&s, u, 3, p));
        CHECK_NEAR(p[0], 0.1, 1e-15);
        s.round = 1;
        CHECK_OK(m->weights->weights(&s, u, 3, p));
        for (int k = 0; k < 3; k++) {
            CHECK_MSG(fabs(p[k] - want[bug][k]) < 1e-12, "bug %d: p_%d = %.12g, want %.12g", bug, k, p[k], want[bug][k]);
            CHECK_NEAR(omega[k], p[k], 0);
        }
    }
}

/* ---- FedGA ------------------------------------------------------------------------------------------------ */

/* K = 3, T = 10. Round 0: weights a^0 = 1/3; the clients' own losses after training (0.5, 0.4, 0.3) are kept.
 * Round 1: L_k(w^1) = (1.0, 0.5, 0.6), gaps (0.5, 0.1, 0.3), centred (0.2, -0.2, 0), max 0.2;
 * d_1 = 0.05 * 9/10 = 0.045, step 0.015: a = (1/3 + 0.015, 1/3 - 0.015, 1/3). */
static void test_fedga_weights_after_one_round(void)
{
    const AlgoMethod *m = algo_find("fedga");
    AlgoOptionBlock ob;
    const AlgoOptions opts = OPTIONS(&ob, m, { "step", 0.05 });
    const int64_t n[3] = { 10, 20, 30 };
    double sc[6];
    float w0[1] = { 0 }, x[3][1] = { { 1 }, { 2 }, { 3 } };
    AlgoSetup setup;
    AlgoSizes z;
    AlgoServerCtx s = server(m, opts, &setup, &z, 3, 0, w0, 1, 1, 0.1, sc, n);
    CHECK(z.server_scalars == 6 && z.upload_scalars == 2);
    CHECK_OK(m->server_init(&s, w0));
    const double own[3] = { 0.5, 0.4, 0.3 }, glob[3] = { 1.0, 0.5, 0.6 };
    for (int round = 0; round < 2; round++) {
        double up[3][2];
        AlgoUpload u[3];
        stub_calls = 0;
        for (int k = 0; k < 3; k++) {
            FakeClient fc;
            fake_client(&fc, m, opts, 3, k, round, w0, x[k], 1, 1, 0.1);
            stub_global[k] = glob[k];
            stub_own[k] = own[k] + round; /* round 1's own losses are not used by round 1's weights */
            CHECK_OK(m->report->begin(&fc.c));
            CHECK_OK(m->report->end(&fc.c));
            memcpy(up[k], fc.up, sizeof up[k]);
            u[k] = (AlgoUpload){ k, n[k], 1, 0, up[k], x[k], NULL };
        }
        CHECK(stub_calls == (round == 0 ? 3 : 6)); /* round 0 has no gap to measure */
        s.round = round;
        double p[3];
        CHECK_OK(m->weights->weights(&s, u, 3, p));
        if (round == 0) {
            for (int k = 0; k < 3; k++) CHECK_NEAR(p[k], 1.0 / 3, 1e-15);
            CHECK_NEAR(sc[3], 0.5, 0);
        } else {
            CHECK_NEAR(p[0], 1.0 / 3 + 0.015, 1e-12);
            CHECK_NEAR(p[1], 1.0 / 3 - 0.015, 1e-12);
            CHECK_NEAR(p[2], 1.0 / 3, 1e-12);
            CHECK_NEAR(sc[3], 1.5, 0); /* L_k(w_k^1) kept for round 2 */
        }
    }
    /* FFL4MIA's order: normalise, then clip; the clipped vector is stored without renormalising */
    sc[0] = 0.005, sc[1] = 0.495, sc[2] = 0.5;
    sc[3] = 0.0, sc[4] = 0.4, sc[5] = 0.2; /* gaps (0.0, 0.4, 0.2) - 0.2 = (-0.2, 0.2, 0) */
    double up[3][2] = { { 0.0, 0 }, { 0.8, 0 }, { 0.4, 0 } };
    AlgoUpload u[3];
    for (int k = 0; k < 3; k++) u[k] = (AlgoUpload){ k, n[k], 1, 0, up[k], x[k], NULL };
    s.round = 1;
    double p[3];
    CHECK_OK(m->weights->weights(&s, u, 3, p));
    CHECK_NEAR(p[0], 0.0, 0);
    CHECK_NEAR(p[1], 0.51, 1e-12);
    CHECK_NEAR(p[2], 0.5, 1e-12);
    CHECK_NEAR(sc[1] + sc[2], 1.01, 1e-12);
}

/* ---- FedLW, FedNoLoWe --------------------------------------------------------------------------------- */

/* L = (0.5, 1, 2): FedLW p proportional to (2, 1, 0.5) -> (4/7, 2/7, 1/7); times n = (10, 20, 40): equal */
static void test_fedlw_weights_hand_example(void)
{
    const AlgoMethod *m = algo_find("fedlw");
    float x[1] = { 0 };
    double L[3][1] = { { 0.5 }, { 1.0 }, { 2.0 } };
    const int64_t n[3] = { 10, 20, 40 };
    AlgoUpload u[3];
    for (int k = 0; k < 3; k++) u[k] = (AlgoUpload){ k, n[k], 1, 0, L[k], x, NULL };
    for (int ts = 0; ts < 2; ts++) {
        AlgoOptionBlock ob;
        const AlgoOptions opts = OPTIONS(&ob, m, { "times_samples", ts });
        AlgoSetup setup;
        AlgoSizes z;
        AlgoServerCtx s = server(m, opts, &setup, &z, 3, 0, x, 1, 1, 0.1, NULL, NULL);
        double p[3], sum = 0;
        CHECK_OK(m->weights->weights(&s, u, 3, p));
        for (int k = 0; k < 3; k++) sum += p[k];
        const double want[2][3] = { { 4.0 / 7, 2.0 / 7, 1.0 / 7 }, { 1.0 / 3, 1.0 / 3, 1.0 / 3 } };
        for (int k = 0; k < 3; k++) CHECK_NEAR(p[k] / sum, want[ts][k], 1e-7);
    }
    /* the client reports the sample-averaged training loss of the round */
    FakeClient fc;
    AlgoOptionBlock ob;
    fake_client(&fc, m, options_default(&ob, m), 3, 0, 0, x, x, 1, 1, 0.1);
    fc.c.state.loss_sample_sum = 16 * 0.5 + 16 * 0.7 + 4 * 1.1;
    fc.c.state.samples_seen = 36;
    CHECK_OK(m->report->end(&fc.c));
    CHECK_NEAR(fc.up[0], (8 + 11.2 + 4.4) / 36, 1e-12);
}

/* L = (1, 2, 3, 4): l = (0.1, 0.2, 0.3, 0.4), p = (1 - l)/(m - 1) = (0.3, 0.26667, 0.23333, 0.2) */
static void test_fednolowe_weights_hand_example(void)
{
    const AlgoMethod *m = algo_find("fednolowe");
    AlgoOptionBlock ob;
    const AlgoOptions opts = options_default(&ob, m);
    float x[1] = { 0 };
    double L[4][1] = { { 1 }, { 2 }, { 3 }, { 4 } };
    AlgoUpload u[4];
    for (int k = 0; k < 4; k++) u[k] = (AlgoUpload){ k, 10 * (k + 1), 1, 0, L[k], x, NULL };
    AlgoSetup setup;
    AlgoSizes z;
    AlgoServerCtx s = server(m, opts, &setup, &z, 4, 0, x, 1, 1, 0.1, NULL, NULL);
    CHECK(z.client_vectors == 0 && z.upload_scalars == 1);
    double p[4];
    CHECK_OK(m->weights->weights(&s, u, 4, p));
    for (int k = 0; k < 4; k++) CHECK_NEAR(p[k], (1.0 - (k + 1) / 10.0) / 3.0, 1e-15);
    CHECK_OK(m->weights->weights(&s, u, 1, p)); /* m = 1 */
    CHECK_NEAR(p[0], 1.0, 0);
    for (int k = 0; k < 4; k++) L[k][0] = 0.0; /* sum L = 0: uniform */
    CHECK_OK(m->weights->weights(&s, u, 4, p));
    CHECK(p[0] == p[3] && p[0] > 0);
    /* persistent_optimizer keeps one momentum vector per client and needs SGD with momentum */
    AlgoOptionBlock pb;
    AlgoSetup ps = { .options = OPTIONS(&pb, m, { "persistent_optimizer", 1 }), .n_clients = 4, .optimizer = "sgd",
                     .momentum = 0.9 };
    algo_sizes(m, &ps, &z);
    CHECK(z.client_vectors == 1);
    CHECK_OK(m->validate(m, &ps));
    ps.momentum = 0;
    CHECK(m->validate(m, &ps) == FH_ERR_USAGE && strstr(fh_error_message(), "train.momentum"));
    fh_error_clear();
}

/* ---- FedDisco --------------------------------------------------------------------------------------------- */

static void test_feddisco_ab0_is_fedavg_and_hand_example(void)
{
    const AlgoMethod *m = algo_find("feddisco");
    float x[1] = { 0 };
    /* 3 clients, 2 classes: (6, 4); (9, 1); (3, 0) d = log 2 */
    const int32_t counts[6] = { 6, 4, 9, 1, 3, 0 };
    const int64_t n[3] = { 10, 10, 3 };
    AlgoUpload u[3];
    for (int k = 0; k < 3; k++) u[k] = (AlgoUpload){ k, n[k], 1, 0, NULL, x, NULL };
    AlgoOptionBlock ob;
    const AlgoOptions zero = OPTIONS(&ob, m, { "a", 0 }, { "b", 0 });
    AlgoSetup setup;
    AlgoSizes z;
    AlgoServerCtx s = server(m, zero, &setup, &z, 3, 0, x, 1, 1, 0.1, NULL, n);
    s.label_counts = counts;
    s.classes = 2;
    double p[3], q[3];
    CHECK_OK(m->weights->weights(&s, u, 3, p));
    CHECK_OK(algo_weights_samples.weights(&s, u, 3, q));
    CHECK(memcmp(p, q, sizeof p) == 0);
    /* a = 0.5, b = 0.1 */
    option_set(&ob, m, "a", 0.5);
    option_set(&ob, m, "b", 0.1);
    const double d0 = 0.6 * log(0.6 * 2) + 0.4 * log(0.4 * 2), d1 = 0.9 * log(0.9 * 2) + 0.1 * log(0.1 * 2),
                 d2 = log(2.0), ds = d0 + d1 + d2;
    const double want[3] = { 10.0 / 23 - 0.5 * d0 / ds + 0.1, 10.0 / 23 - 0.5 * d1 / ds + 0.1, 3.0 / 23 - 0.5 * d2 / ds + 0.1 };
    CHECK_OK(m->weights->weights(&s, u, 3, p));
    double sum = 0, wsum = 0;
    for (int k = 0; k < 3; k++) sum += p[k], wsum += want[k] > 0 ? want[k] : 0;
    for (int k = 0; k < 3; k++) CHECK_NEAR(p[k] / sum, (want[k] > 0 ? want[k] : 0) / wsum, 1e-12);
    CHECK(want[2] < 0 && p[2] == 0); /* the most skewed small client is clipped to 0 */
    /* every q_k <= 0: sample weights */
    option_set(&ob, m, "a", 100);
    option_set(&ob, m, "b", 0);
    CHECK_OK(m->weights->weights(&s, u, 3, p));
    CHECK(p[0] == 10 && p[1] == 10 && p[2] == 3);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_qfedavg_q0_is_uniform_and_q1_the_step);
    RUN(test_qfedavg_buffers_sample_weighted);
    RUN(test_afl_simplex_projection);
    RUN(test_afl_average_and_worst);
    RUN(test_afl_original_refuses_partial_participation);
    RUN(test_fairfed_weights_hand_example);
    RUN(test_fedga_weights_after_one_round);
    RUN(test_fedlw_weights_hand_example);
    RUN(test_fednolowe_weights_hand_example);
    RUN(test_feddisco_ab0_is_fedavg_and_hand_example);
    return test_summary();
}
