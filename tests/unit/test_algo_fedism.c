/* The 'fedism' method family's parts called directly (docs/methods/sam.md §12): FedISM+'s rho(t) follows
 * rho_max ((t + 1)/T)^tau for every round of several T (and FedISM's radius is constant), through the hook
 * the local steps read; the key checks; the client's sharpness on its whole local set equals sam_diag's
 * algo_sam_sharpness on the same rows bit for bit, and the report uploads S_i = max(L1 - L0, 1e-10) or PL_i =
 * L1 at the round's radius; SAGA with q = 0 is uniform averaging bit for bit (every beta, partial
 * participation, first appearances); SAGA's weights and moving average against a hand-computed example of
 * two rounds with partial participation.
 * usage: build/tests/test_algo_fedism [test_name] */
#include "test.h"

#include <stdlib.h>

#include "../../src/algo/algo_internal.h"
#include "fedhet/rng.h"
#include "test_options.h"

/* ---- the radius ------------------------------------------------------------------------------------ */

/* rho(t) = rho_max ((t + 1)/T)^tau for t = 0 .. T-1: the closed forms tau = 1 (linear) and tau = 0.5 (sqrt),
 * rho(T - 1) = rho_max exactly, strictly increasing; horizon replaces T; the client's radius (algo_sam_radius,
 * what algo_sam_step uses) is the hook's value; FedISM: rho every round */
static void test_radius_schedule(void)
{
    const AlgoMethod *plus = algo_find("fedismplus"), *ism = algo_find("fedism");
    CHECK(plus && ism && plus->step && plus->step->round_radius == algo_fedismplus_radius);
    CHECK(ism->step && ism->step->round_radius == NULL && ism->step->step == plus->step->step);
    AlgoOptionBlock ob;
    const AlgoOptions o = options_default(&ob, plus);
    CHECK(option_value(o, "rho_max") == 0.1 && option_value(o, "tau") == 0.5 && option_value(o, "q") == 2.0);
    CHECK(option_value(o, "beta") == 0.5 && option_value(o, "horizon") == 0.0);
    CHECK(option_value(o, "perturb") == 2 && option_value(o, "gsam_alpha") == 0.1 && option_value(o, "saga") == 0);
    const int Ts[] = { 1, 2, 7, 300 };
    const double taus[] = { 0.5, 1.0, 2.0, 0.25 };
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            AlgoSetup s = { .options = o, .rounds = Ts[a] };
            const double rho = 0.1 * (b + 1);
            option_set(&ob, plus, "rho_max", rho);
            option_set(&ob, plus, "tau", taus[b]);
            double prev = 0.0;
            int bad = 0;
            for (int t = 0; t < Ts[a]; t++) {
                const double r = plus->step->round_radius(&s, o, t), x = (double)(t + 1) / Ts[a];
                if (r != rho * pow(x, taus[b]) || !(r > prev)) bad++;
                if (taus[b] == 1.0 && r != rho * x) bad++;
                if (taus[b] == 0.5 && fabs(r - rho * sqrt(x)) > 4e-16 * rho) bad++;
                if (taus[b] == 2.0 && fabs(r - rho * x * x) > 4e-16 * rho) bad++;
                prev = r;
            }
            CHECK_MSG(bad == 0, "T = %d tau = %g: %d rounds off the schedule", Ts[a], taus[b], bad);
            CHECK(plus->step->round_radius(&s, o, Ts[a] - 1) == rho);
            CHECK_OK(plus->validate(plus, &s));
        }
    /* horizon T = 10 in a run of 5 rounds: the first half of the long schedule */
    options_default(&ob, plus);
    option_set(&ob, plus, "horizon", 10);
    AlgoSetup s = { .options = o, .rounds = 5 };
    for (int t = 0; t < 5; t++) CHECK(plus->step->round_radius(&s, o, t) == 0.1 * pow((t + 1) / 10.0, 0.5));
    CHECK_OK(plus->validate(plus, &s));
    /* what the local step reads */
    AlgoSizes z;
    algo_sizes(plus, &s, &z);
    const AlgoClientRound r = { .t = 3, .setup = &s, .sizes = &z, .options = o, .method = plus };
    const AlgoClientCtx c = { .round = &r };
    CHECK(algo_sam_radius(&c) == 0.1 * pow(0.4, 0.5));
    AlgoOptionBlock ib;
    const AlgoOptions hi = options_default(&ib, ism);
    CHECK(option_value(hi, "rho") == 0.05 && option_value(hi, "q") == 2.0 && option_value(hi, "beta") == 0.5);
    CHECK(option_value(hi, "perturb") == 2 && option_value(hi, "gsam_alpha") == 0.1);
    AlgoSetup si = { .options = hi, .rounds = 5 };
    AlgoClientRound ri = { .setup = &si, .sizes = &z, .options = hi, .method = ism };
    const AlgoClientCtx ci = { .round = &ri };
    for (ri.t = 0; ri.t < 5; ri.t++) CHECK(algo_sam_radius(&ci) == 0.05);
}

/* refused: rho_max < 0 or not finite, tau <= 0, q < 0, horizon between 0 and fl.rounds; the message names the key.
 * (Ranges and types of the config layer: beta in (0, 1], q in [0, 100], tau in (0, 1e3], horizon and score_rows
 * integers.) */
static void test_validate(void)
{
    const AlgoMethod *plus = algo_find("fedismplus"), *ism = algo_find("fedism");
    AlgoOptionBlock ob;
    AlgoSetup s = { .rounds = 6 };
    struct {
        const AlgoMethod *m;
        const char *key;
        double value;
    } bad[] = { { plus, "rho_max", -0.1 }, { plus, "rho_max", NAN }, { plus, "rho_max", INFINITY },
                { plus, "tau", 0.0 },      { plus, "tau", -1.0 },    { plus, "q", -0.5 },
                { plus, "horizon", 5 },    { ism, "rho", -1 },       { ism, "q", -1 } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s.options = options_default(&ob, bad[i].m);
        option_set(&ob, bad[i].m, bad[i].key, bad[i].value);
        fh_error_clear();
        CHECK_MSG(bad[i].m->validate(bad[i].m, &s) == FH_ERR_USAGE, "%s %s = %g accepted", bad[i].m->name, bad[i].key,
                  bad[i].value);
        char want[32];
        snprintf(want, sizeof want, "] %s =", bad[i].key);
        CHECK_MSG(strstr(fh_error_message(), want) != NULL, "message without '%s': %s", want, fh_error_message());
    }
    fh_error_clear();
    s.options = options_default(&ob, plus);
    option_set(&ob, plus, "horizon", 6);
    CHECK_OK(plus->validate(plus, &s));
    option_set(&ob, plus, "q", 0);
    CHECK_OK(plus->validate(plus, &s));
    /* counts: a fraction does not land, and the message names the key */
    CHECK(algo_option_set(&ob, plus, "horizon", 7.5) == FH_ERR_USAGE && strstr(fh_error_message(), "horizon"));
    CHECK(algo_option_set(&ob, ism, "score_rows", 2.5) == FH_ERR_USAGE && strstr(fh_error_message(), "score_rows"));
    fh_error_clear();
    const AlgoOption *beta = algo_option_find(plus, "beta"), *tau = algo_option_find(plus, "tau");
    CHECK(beta && beta->lo == 0.0 && beta->lo_open && beta->hi == 1.0 && !beta->hi_open);
    CHECK(tau && tau->lo == 0.0 && tau->lo_open);
    CHECK(!algo_option_find(ism, "tau") && !algo_option_find(ism, "rho_max") && !algo_option_find(plus, "rho"));
    CHECK(ism->quality_shift && plus->quality_shift && !algo_find("fedavg")->quality_shift);
}

/* ---- the client's report ----------------------------------------------------------------------------- */

/* conv 3x3 (bias) -> batch norm + relu -> gap -> linear: BN buffers (eval mode uses them), at most 8 rows */
static void bn_model(NnModel *m)
{
    CHECK_OK(nn_model_init(m, "tiny", (NnShape){ 2, 4, 4 }, 8));
    int x = nn_conv2d(m, m->input, 3, 3, 1, 1, 1, 1, NN_ACT_NONE);
    x = nn_batchnorm(m, x, NN_ACT_RELU);
    x = nn_gap(m, x);
    int f = nn_flatten(m, x);
    int y = nn_linear(m, f, 3, 1, NN_ACT_NONE);
    CHECK_OK(nn_model_finalize(m, y, f, 3));
    nn_model_init_params(m, 7);
    /* running statistics away from (0, 1) so that eval mode matters */
    for (int v = 0; v < m->n_views; v++)
        if (!m->views[v].trainable)
            for (int64_t j = m->views[v].offset; j < m->views[v].offset + m->views[v].count; j++)
                m->state[j] = 0.3f + 0.1f * (float)(j % 3);
}

/* the client's local set: 21 rows (two full batches of 8 and a partial one) */
enum { ROWS = 21, ROW = 32 };
static float set_x[ROWS * ROW];
static int32_t set_y[ROWS];
static int passes, batches;

static void fill_set(void)
{
    FhRng rng;
    fh_rng_init(&rng, 9, FH_RNG_TEST, 0, 0, 0);
    for (int i = 0; i < ROWS * ROW; i++) set_x[i] = (float)(fh_rng_uniform(&rng) * 2.0 - 1.0);
    for (int i = 0; i < ROWS; i++) set_y[i] = (int32_t)((i * 7) % 3);
}

/* the runtime's pass, in chunks of the model's batch: eval mode, state swapped in and back */
static int fake_for_each(AlgoClientCtx *c, NnModel *model, const float *state, int (*fn)(void *, const AlgoBatch *),
                         void *env)
{
    float *saved = model->state;
    const int training = model->training;
    model->state = (float *)state;
    nn_model_set_training(model, 0);
    passes++;
    int status = FH_OK;
    for (int first = 0; first < ROWS && status == FH_OK; first += model->max_batch) {
        const int count = ROWS - first < model->max_batch ? ROWS - first : model->max_batch;
        batches++;
        status = nn_model_forward(model, set_x + first * ROW, count);
        if (status != FH_OK) break;
        const AlgoBatch b = { set_x + first * ROW, set_y + first, count, model->classes, nn_model_logits(model),
                              nn_model_features(model), nn_model_features_size(model) };
        status = fn(env, &b);
    }
    model->state = saved;
    nn_model_set_training(model, training);
    return status;
}

/* algo_local_sharpness over the streamed set == algo_sam_sharpness on the same rows, bit for bit; the report
 * uploads S_i at rho(t) (fedismplus) or rho (fedism), or PL_i = L1 (saga = loss), and leaves the model as it
 * was; S and L differ */
static void test_local_sharpness(void)
{
    fill_set();
    NnModel m;
    bn_model(&m);
    const int64_t S = m.n_state;
    float *state = malloc((size_t)S * 4), *copy = malloc((size_t)S * 4), *pert = malloc((size_t)S * 4);
    float *work = calloc((size_t)algo_sam_sharpness_work(&m), sizeof(float));
    memcpy(state, m.state, (size_t)S * 4);
    memcpy(copy, m.state, (size_t)S * 4);
    nn_model_set_training(&m, 1);
    const AlgoClientRound r = { .n_params = m.n_params, .n_state = S };
    const AlgoClientServices svc = { .for_each_local_batch = fake_for_each };
    const AlgoSetup batches_of = { .batch_size = m.max_batch, .classes = m.classes };
    AlgoClientCtx c = { .model = &m, .round = &r, .svc = &svc,
                        .state = { .scratch = test_scratch(algo_local_sharpness_scratch(&batches_of)) } };
    double l0, l1, r0, r1;
    passes = 0;
    CHECK_OK(algo_local_sharpness(&c, &m, state, 0.07, 0, pert, &l0, &l1));
    CHECK(passes == 2);
    CHECK_OK(algo_sam_sharpness(&m, state, set_x, set_y, ROWS, 0.07, work, &r0, &r1));
    CHECK_MSG(l0 == r0 && l1 == r1, "L0 %.17g vs %.17g, L1 %.17g vs %.17g", l0, r0, l1, r1);
    CHECK(l1 > l0);
    CHECK(m.training == 1 && memcmp(m.state, copy, (size_t)S * 4) == 0 && memcmp(state, copy, (size_t)S * 4) == 0);
    /* score_rows: the first 13 rows (a full batch and 5 of the next; the third batch is not forwarded), and a
     * cap above the set's size is the whole set */
    double c0, c1;
    passes = batches = 0;
    CHECK_OK(algo_local_sharpness(&c, &m, state, 0.07, 13, pert, &c0, &c1));
    CHECK(passes == 2 && batches == 4);
    CHECK_OK(algo_sam_sharpness(&m, state, set_x, set_y, 13, 0.07, work, &r0, &r1));
    CHECK_MSG(c0 == r0 && c1 == r1, "13 rows: L0 %.17g vs %.17g, L1 %.17g vs %.17g", c0, r0, c1, r1);
    CHECK(c0 != l0);
    CHECK_OK(algo_local_sharpness(&c, &m, state, 0.07, 1000, pert, &c0, &c1));
    CHECK(c0 == l0 && c1 == l1);

    /* the report hook of both rows, round 2 of 4 */
    const char *names[2] = { "fedismplus", "fedism" };
    double scores[2][2];
    for (int r = 0; r < 2; r++) {
        const AlgoMethod *meth = algo_find(names[r]);
        double up[6] = { 0 };
        AlgoOptionBlock ob;
        const AlgoOptions o = options_default(&ob, meth);
        AlgoSetup s = { .options = o, .rounds = 4, .n_params = m.n_params, .n_state = S, .classes = m.classes,
                        .batch_size = m.max_batch };
        AlgoSizes z;
        algo_sizes(meth, &s, &z);
        CHECK(z.upload_scalars == 6 && algo_upload_index(&z, "perturb_norm") == 4 &&
              algo_upload_index(&z, "grad_norm") == 5 && z.work_vectors == 2);
        CHECK(z.n_named == 6 && algo_upload_index(&z, "rho") == 3 && z.named[3].show == (ALGO_SHOW_CLIENT | ALGO_SHOW_MEAN));
        const char *columns[] = { "saga_score", "l0", "l1", "rho" };
        for (int i = 0; i < 4; i++)
            CHECK(!strcmp(z.named[i].name, columns[i]) && z.named[i].at == i && (z.named[i].show & ALGO_SHOW_CLIENT));
        CHECK(z.server_scalars == 0 && z.client_vectors == 0);
        float *w = calloc((size_t)(z.work_vectors * S), sizeof(float));
        const AlgoClientRound rc = { .t = 2, .n_params = m.n_params, .n_state = S, .setup = &s, .sizes = &z,
                                     .options = o, .method = meth, .global = state };
        AlgoClientCtx cc = { .model = &m, .round = &rc, .svc = &svc,
                             .state = { .upload_scalars = up, .work = w, .scratch = test_scratch(z.client_scratch) } };
        const double rho = r == 0 ? 0.1 * sqrt(3.0 / 4.0) : 0.05;
        CHECK_OK(algo_sam_sharpness(&m, state, set_x, set_y, ROWS, rho, work, &r0, &r1));
        for (int v = 0; v < 2; v++) {
            option_set(&ob, meth, "saga", v);
            CHECK_OK(meth->report->begin(&cc));
            scores[r][v] = up[0];
        }
        CHECK_MSG(scores[r][0] == fmax(r1 - r0, 1e-10), "%s: S_i %.17g, expected %.17g", names[r], scores[r][0], r1 - r0);
        CHECK_MSG(scores[r][1] == r1, "%s: PL_i %.17g, expected %.17g", names[r], scores[r][1], r1);
        CHECK(up[1] == r0 && up[2] == r1 && up[3] == rho);
        CHECK(scores[r][0] != scores[r][1] && scores[r][0] > 1e-10);
        CHECK(memcmp(m.state, copy, (size_t)S * 4) == 0 && m.training == 1);
        /* radius 0: no sharpness, the floor */
        option_set(&ob, meth, r == 0 ? "rho_max" : "rho", 0.0);
        option_set(&ob, meth, "saga", 0);
        CHECK_OK(meth->report->begin(&cc));
        CHECK(up[0] == 1e-10);
        free(w);
    }
    CHECK(scores[0][0] != scores[1][0]); /* the radius of the round is used */
    free(state), free(copy), free(pert), free(work);
    nn_model_free(&m);
}

/* ---- server: SAGA ------------------------------------------------------------------------------------- */

typedef struct {
    const AlgoMethod *m;
    AlgoOptionBlock options;
    AlgoSetup setup;
    AlgoSizes z;
    double scalars[2 * 8];
    float cur[5];
} Server;

static void server_init(Server *v, const char *name, int K)
{
    memset(v, 0, sizeof *v);
    v->m = algo_find(name);
    v->setup = (AlgoSetup){ .options = options_default(&v->options, v->m), .n_clients = K, .rounds = 10,
                            .n_params = 3, .n_state = 5 };
    algo_sizes(v->m, &v->setup, &v->z);
    CHECK(v->z.server_scalars == 2 * K);
}

static AlgoServerCtx server_ctx(Server *v, int round, int m)
{
    return (AlgoServerCtx){ .round = round, .rounds = 10, .n_clients = v->setup.n_clients, .n_selected = m,
                            .n_params = 3, .n_state = 5, .options = v->setup.options, .setup = &v->setup,
                            .sizes = &v->z, .current = v->cur, .server_scalars = v->scalars,
                            .scratch = test_scratch(v->z.server_scratch) };
}

/* q = 0: whatever the scores, every round's weights are exactly 1 (uniform's), and the new global state is
 * uniform averaging's bit for bit; several betas, partial participation with first appearances and returns */
static void test_saga_q0_is_uniform(void)
{
    const double betas[] = { 0.5, 0.3, 1.0, 0.77 };
    const int rounds[4][3] = { { 0, 2, 5 }, { 1, 2, 3 }, { 0, 4, 5 }, { 2, 3, 4 } };
    FhRng rng;
    fh_rng_init(&rng, 4, FH_RNG_TEST, 0, 0, 0);
    for (int b = 0; b < 4; b++) {
        Server v;
        server_init(&v, b % 2 ? "fedism" : "fedismplus", 6);
        option_set(&v.options, v.m, "q", 0.0);
        option_set(&v.options, v.m, "beta", betas[b]);
        option_set(&v.options, v.m, "saga", b / 2);
        for (int r = 0; r < 4; r++) {
            double sc[3][3];
            float states[3][5], next[5], ref[5];
            AlgoUpload u[3];
            for (int i = 0; i < 3; i++) {
                for (int j = 0; j < 3; j++) sc[i][j] = fh_rng_uniform(&rng) * (i + 1) * 0.3;
                for (int j = 0; j < 5; j++) states[i][j] = (float)(fh_rng_uniform(&rng) * 4.0 - 2.0);
                u[i] = (AlgoUpload){ rounds[r][i], 10 + 7 * i, 3, 0.5, sc[i], states[i], NULL };
            }
            AlgoServerCtx s = server_ctx(&v, r, 3);
            double p[3], pu[3];
            CHECK_OK(v.m->weights->weights(&s, u, 3, p));
            CHECK_MSG(p[0] == 1.0 && p[1] == 1.0 && p[2] == 1.0, "beta %g round %d: p = %.17g %.17g %.17g", betas[b], r,
                      p[0], p[1], p[2]);
            CHECK_OK(algo_server_update(v.m->update, &s, u, 3, p, next, NULL, NULL));
            CHECK_OK(algo_weights_uniform.weights(&s, u, 3, pu));
            CHECK_OK(algo_average(&s, u, 3, pu, ref));
            CHECK(memcmp(next, ref, sizeof next) == 0);
        }
    }
}

/* K = 4, q = 2, beta = 0.5. Round 1, clients {0, 1, 2} with S = 0.1, 0.3, 0.6: wtilde = (0.01, 0.09, 0.36)/0.46
 * and a = wtilde (first appearances). Round 2, clients {1, 2, 3} with S = 0.2, 0.2, 0.4: wtilde = (1, 1, 4)/6,
 * a_1 = (1/6 + 0.09/0.46)/2, a_2 = (1/6 + 0.36/0.46)/2, a_3 = 4/6 (first), a_0 unchanged; the weights are the
 * participants' a renormalised; the global state is their weighted mean. The same with SAGA-L on the scores. */
static void test_saga_hand_example(void)
{
    for (int variant = 0; variant < 2; variant++) {
        Server v;
        server_init(&v, "fedismplus", 4);
        option_set(&v.options, v.m, "saga", variant);
        const double tol = 1e-8; /* the 1e-10 floor of the code */
        double s1[3][3] = { { 0.1 }, { 0.3 }, { 0.6 } }, s2[3][3] = { { 0.2 }, { 0.2 }, { 0.4 } };
        float st[3][5] = { { 1, 0, 0, 1, 2 }, { 0, 1, 0, 3, 4 }, { 0, 0, 1, 5, 6 } }, next[5];
        AlgoUpload u1[3] = { { 0, 50, 1, 0, s1[0], st[0], NULL }, { 1, 5, 1, 0, s1[1], st[1], NULL },
                             { 2, 500, 1, 0, s1[2], st[2], NULL } };
        AlgoServerCtx s = server_ctx(&v, 0, 3);
        double p[3];
        CHECK_OK(v.m->weights->weights(&s, u1, 3, p));
        const double w1[3] = { 0.01 / 0.46, 0.09 / 0.46, 0.36 / 0.46 };
        const double sum1 = p[0] + p[1] + p[2];
        for (int i = 0; i < 3; i++) CHECK_NEAR(p[i] / sum1, w1[i], tol);
        CHECK(p[2] == 1.0); /* scaled by the largest */
        CHECK_OK(algo_server_update(v.m->update, &s, u1, 3, p, next, NULL, NULL));
        for (int i = 0; i < 3; i++) {
            CHECK_NEAR(v.scalars[i], w1[i], tol);
            CHECK(v.scalars[4 + i] == 1.0);
        }
        CHECK(v.scalars[3] == 0.0 && v.scalars[7] == 0.0);
        for (int j = 0; j < 5; j++) {
            double want = 0;
            for (int i = 0; i < 3; i++) want += w1[i] * st[i][j];
            CHECK_NEAR(next[j], want, 1e-6); /* no sample counts */
        }
        const double a0 = v.scalars[0];
        AlgoUpload u2[3] = { { 1, 5, 1, 0, s2[0], st[0], NULL }, { 2, 500, 1, 0, s2[1], st[1], NULL },
                             { 3, 50, 1, 0, s2[2], st[2], NULL } };
        s = server_ctx(&v, 1, 3);
        CHECK_OK(v.m->weights->weights(&s, u2, 3, p));
        const double a[3] = { 0.5 / 6 + 0.5 * w1[1], 0.5 / 6 + 0.5 * w1[2], 4.0 / 6 }, asum = a[0] + a[1] + a[2];
        const double sum2 = p[0] + p[1] + p[2];
        for (int i = 0; i < 3; i++) CHECK_NEAR(p[i] / sum2, a[i] / asum, tol);
        CHECK_OK(algo_server_update(v.m->update, &s, u2, 3, p, next, NULL, NULL));
        CHECK(v.scalars[0] == a0);
        for (int i = 0; i < 3; i++) {
            CHECK_NEAR(v.scalars[1 + i], a[i], tol);
            CHECK(v.scalars[5 + i] == 1.0);
        }
        CHECK(v.scalars[4] == 1.0);
        for (int j = 0; j < 5; j++) {
            double want = 0;
            for (int i = 0; i < 3; i++) want += a[i] / asum * st[i][j];
            CHECK_NEAR(next[j], want, 1e-6);
        }
    }
    /* zero perturbed losses (nothing to weigh by): uniform; a negative or NaN score is an error */
    Server v;
    server_init(&v, "fedism", 4);
    option_set(&v.options, v.m, "saga", 1);
    double z[2][3] = { { 0 }, { 0 } };
    float st[5] = { 0 };
    AlgoUpload u[2] = { { 0, 1, 1, 0, z[0], st, NULL }, { 3, 1, 1, 0, z[1], st, NULL } };
    AlgoServerCtx s = server_ctx(&v, 0, 2);
    double p[2];
    CHECK_OK(v.m->weights->weights(&s, u, 2, p));
    CHECK(p[0] == 1.0 && p[1] == 1.0);
    z[1][0] = NAN;
    fh_error_clear();
    CHECK(v.m->weights->weights(&s, u, 2, p) == FH_ERR_NUMERIC);
    CHECK(strstr(fh_error_message(), "client 3") != NULL);
    fh_error_clear();
}

/* q large: no underflow (the largest score keeps weight 1), the order of the scores is kept */
static void test_saga_large_q(void)
{
    Server v;
    server_init(&v, "fedism", 3);
    option_set(&v.options, v.m, "q", 100);
    double sc[3][3] = { { 1e-10 }, { 0.5 }, { 0.4 } };
    float st[5] = { 0 };
    AlgoUpload u[3] = { { 0, 1, 1, 0, sc[0], st, NULL }, { 1, 1, 1, 0, sc[1], st, NULL }, { 2, 1, 1, 0, sc[2], st, NULL } };
    AlgoServerCtx s = server_ctx(&v, 0, 3);
    double p[3];
    CHECK_OK(v.m->weights->weights(&s, u, 3, p));
    CHECK(p[1] == 1.0 && p[2] > 0.0 && p[2] < p[1] && p[0] >= 0.0 && p[0] < p[2]);
    CHECK_NEAR(p[2], pow(0.4 / 0.5, 100), 1e-15);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_radius_schedule);
    RUN(test_validate);
    RUN(test_local_sharpness);
    RUN(test_saga_q0_is_uniform);
    RUN(test_saga_hand_example);
    RUN(test_saga_large_q);
    return test_summary();
}
