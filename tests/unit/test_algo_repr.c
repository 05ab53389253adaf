/* The 'repr' family's parts against docs/methods/baselines.md (A.17-A.22): MOON's contrastive gradient and FedDecorr's
 * decorrelation gradient by finite differences on small feature matrices, FedNP-min's NPN gradient likewise,
 * FedMR's recombination (a per-tensor permutation of the slots; off: every slot is the uniform average),
 * FedGKD's FIFO of past globals and its teacher, and logit adjustment (docs/methods/baselines.md A.22: absent classes get no
 * mass and no gradient; equal priors give plain cross-entropy).
 * MOON's projection head: the zoo's architecture and the contrastive gradient through it, by central differences.
 * Includes src/algo/repr.c to reach its static parts (the registry then uses this copy).
 * usage: build/tests/test_algo_repr [test_name] */
#include "test.h"
#include "test_tmp.h"

#include <stdlib.h>

#include "../../src/algo/repr.c"
#include "../../src/fl/fl_internal.h"
#include "server_step.h"
#include "test_options.h"

static void fill(float *x, int64_t n, double lo, double hi, uint32_t stream)
{
    FhRng rng;
    fh_rng_init(&rng, 7, FH_RNG_TEST, stream, 0, 0);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * fh_rng_uniform(&rng));
}

/* input 1x1x4 -> linear 3 (the features) -> linear 2 (logits) */
static void tiny_model(NnModel *m, int max_batch)
{
    CHECK_OK(nn_model_init(m, "tiny", (NnShape){ 1, 1, 4 }, max_batch));
    int x = nn_flatten(m, m->input);
    int f = nn_linear(m, x, 3, 1, NN_ACT_NONE);
    int y = nn_linear(m, f, 2, 1, NN_ACT_NONE);
    CHECK_OK(nn_model_finalize(m, y, f, 2));
}

/* ---- MOON --------------------------------------------------------------------------------------------- */

static double cosine(const float *a, const float *b, int d)
{
    double ab = 0, aa = 0, bb = 0;
    for (int j = 0; j < d; j++) ab += (double)a[j] * b[j], aa += (double)a[j] * a[j], bb += (double)b[j] * b[j];
    return ab / (fmax(sqrt(aa), 1e-8) * fmax(sqrt(bb), 1e-8));
}

static void test_moon_contrastive_gradient(void)
{
    enum { B = 3, D = 3 };
    NnModel g, prev, fresh;
    tiny_model(&g, B);
    tiny_model(&prev, B);
    tiny_model(&fresh, B);
    const int64_t P = g.n_state;
    float *wg = malloc((size_t)P * sizeof(float)), *wp = malloc((size_t)P * sizeof(float));
    fill(wg, P, -1, 1, 1);
    fill(wp, P, -1, 1, 2);
    float x[B * 4], z[B * D], dz[B * D], dlogits[B * 2] = { 0 };
    fill(x, B * 4, -1, 1, 3);
    fill(z, B * D, -1, 1, 4);
    const AlgoMethod *moon = algo_find("moon");
    AlgoOptionBlock ob;
    const AlgoOptions o = OPTIONS(&ob, moon, { "mu", 1.7 }, { "tau", 0.5 });
    AlgoSetup setup = { .seed = 5 };
    AlgoClientRound c_round = { .global = wg, .has_state = 1, .options = o, .setup = &setup, .n_state = P };
    AlgoClientCtx c = { .round = &c_round, .state = { .client_vecs = wp } };
    c.state.aux[0] = &g;
    c.state.aux[1] = &prev;
    CHECK_OK(moon_begin(&c));
    AlgoBatch b = { x, NULL, B, 2, NULL, z, D };
    memset(dz, 0, sizeof dz);
    const double L = moon_batch_term(&c, &b, dlogits, dz);

    /* the value, from the aux models' features computed here */
    CHECK_OK(nn_model_forward(&g, x, B));
    CHECK_OK(nn_model_forward(&prev, x, B));
    double ref = 0;
    for (int i = 0; i < B; i++) {
        const double sp = cosine(z + i * D, nn_model_features(&g) + i * D, D) / 0.5,
                     sn = cosine(z + i * D, nn_model_features(&prev) + i * D, D) / 0.5;
        ref += -log(exp(sp) / (exp(sp) + exp(sn)));
    }
    CHECK_NEAR(L, 1.7 * ref / B, 1e-6);

    /* d/dz by central differences of the term's value */
    const float h = 1.0f / 1024;
    double worst = 0, scale = 0;
    for (int k = 0; k < B * D; k++) {
        float scratch[B * D];
        const float z0 = z[k];
        z[k] = z0 + h;
        const double up = moon_batch_term(&c, &b, dlogits, scratch);
        z[k] = z0 - h;
        const double down = moon_batch_term(&c, &b, dlogits, scratch);
        z[k] = z0;
        const double fd = (up - down) / (2.0 * h);
        worst = fmax(worst, fabs(fd - dz[k]));
        scale = fmax(scale, fabs(fd));
    }
    CHECK_MSG(scale > 1e-3 && worst <= 1e-3 * scale, "largest |fd - analytic| %.3g of %.3g", worst, scale);
    for (int k = 0; k < 2 * B; k++) CHECK(dlogits[k] == 0.0f);

    /* mu = 0: exact zeros */
    option_set(&ob, moon, "mu", 0.0);
    memset(dz, 0, sizeof dz);
    CHECK(moon_batch_term(&c, &b, dlogits, dz) == 0.0);
    for (int k = 0; k < B * D; k++) CHECK(dz[k] == 0.0f);

    /* first participation: the previous model is w^0 of fl.seed */
    c_round.has_state = 0;
    CHECK_OK(moon_begin(&c));
    nn_model_init_params(&fresh, 5);
    CHECK(memcmp(prev.state, fresh.state, (size_t)P * sizeof(float)) == 0);
    CHECK(memcmp(g.state, wg, (size_t)P * sizeof(float)) == 0);
    CHECK(!g.training && !prev.training);
    free(wg), free(wp);
    nn_model_free(&g), nn_model_free(&prev), nn_model_free(&fresh);
}

/* MOON's projection head (proj_dim > 0, official MOON's ModelFedCon): the zoo puts Linear(f, f), ReLU,
 * Linear(f, proj_dim) between the representation and the classifier, the features become the head's output,
 * and the gradient of mu l_con through the head and the layers below matches central differences of the term's
 * value; the classifier gets none of it */
static void test_moon_head_gradient(void)
{
    enum { B = 4, PROJ = 5 };
    const AlgoMethod *moon = algo_find("moon");
    CHECK(algo_option_find(moon, "proj_dim") && algo_option_default(moon, algo_option_find(moon, "proj_dim")) == 0.0);
    AlgoOptionBlock ob;
    const AlgoOptions o = OPTIONS(&ob, moon, { "mu", 1.3 }, { "tau", 0.5 }, { "proj_dim", PROJ });
    AlgoSetup setup = { .options = o, .seed = 5 };
    AlgoSizes z = { 0 };
    moon_sizes(&setup, &z);
    CHECK(z.proj_dim == PROJ && z.aux_models == 2);
    const NnShape in = { 1, 1, 6 };
    NnZooOptions head = { .norm = "bn", .gn_groups = 2, .proj_dim = PROJ }, none = { .norm = "bn", .gn_groups = 2 };
    NnModel m, g, prev, plain;
    CHECK_OK(nn_zoo_build(&m, "mlp", in, 3, B, &head));
    CHECK_OK(nn_zoo_build(&g, "mlp", in, 3, B, &head));
    CHECK_OK(nn_zoo_build(&prev, "mlp", in, 3, B, &head));
    CHECK_OK(nn_zoo_build(&plain, "mlp", in, 3, B, &none));
    /* mlp: 6 -> 200 -> 200 (representation) -> [200 -> 200, ReLU, -> PROJ] -> 3 */
    CHECK(nn_model_features_size(&m) == PROJ && nn_model_features_size(&plain) == 200);
    CHECK(m.n_params == plain.n_params - (200 * 3 + 3) + (200 * 200 + 200) + (200 * PROJ + PROJ) + (PROJ * 3 + 3));
    const NnLayer *cls = &m.layers[m.n_layers - 1], *h2 = &m.layers[m.n_layers - 2], *h1 = &m.layers[m.n_layers - 3],
                  *rep = &m.layers[m.n_layers - 4];
    CHECK(cls->in == m.features && cls->cin == PROJ && h2->out == m.features && h1->cout == 200 && h1->act == NN_ACT_RELU);
    nn_model_init_params(&m, 11);
    float *wg = malloc((size_t)m.n_state * sizeof(float)), *wp = malloc((size_t)m.n_state * sizeof(float));
    nn_model_init_params(&g, 12);
    nn_model_init_params(&prev, 13);
    memcpy(wg, g.state, (size_t)m.n_state * sizeof(float));
    memcpy(wp, prev.state, (size_t)m.n_state * sizeof(float));
    const AlgoClientRound c_round = { .global = wg, .has_state = 1, .options = o, .setup = &setup,
                                      .n_state = m.n_state };
    AlgoClientCtx c = { .round = &c_round, .state = { .client_vecs = wp } };
    c.state.aux[0] = &g;
    c.state.aux[1] = &prev;
    CHECK_OK(moon_begin(&c));
    float x[B * 6], dlogits[B * 3] = { 0 }, dfeat[B * PROJ];
    fill(x, B * 6, -1, 1, 9);
    /* the analytic gradient: the term's d/dfeatures back through the model */
    CHECK_OK(nn_model_forward(&m, x, B));
    AlgoBatch b = { x, NULL, B, 3, nn_model_logits(&m), nn_model_features(&m), PROJ };
    memset(dfeat, 0, sizeof dfeat);
    const double L = moon_batch_term(&c, &b, dlogits, dfeat);
    CHECK(L > 0.0);
    nn_model_zero_grad(&m);
    nn_model_backward(&m, dlogits, dfeat);
    for (int64_t j = cls->w_off; j < cls->w_off + 3 * PROJ; j++) CHECK(m.grad[j] == 0.0f);
    /* central differences at the 4 largest-gradient weights of the head's two layers and the representation */
    const NnLayer *layers[3] = { h2, h1, rep };
    const float step = 1.0f / 4096; /* small: a ReLU of the head sits near its kink at a larger step */
    for (int t = 0; t < 3; t++) {
        const int64_t off = layers[t]->w_off, n = (int64_t)layers[t]->cin * layers[t]->cout;
        double worst = 0, scale = 0;
        for (int pick = 0; pick < 4; pick++) {
            int64_t best = off;
            for (int64_t j = off; j < off + n; j++)
                if (fabsf(m.grad[j]) > fabsf(m.grad[best])) best = j;
            const float w0 = m.state[best], g0 = m.grad[best];
            m.grad[best] = 0.0f; /* the next pick is another weight */
            float scratch[B * PROJ];
            m.state[best] = w0 + step;
            CHECK_OK(nn_model_forward(&m, x, B));
            const double up = moon_batch_term(&c, &b, dlogits, scratch);
            m.state[best] = w0 - step;
            CHECK_OK(nn_model_forward(&m, x, B));
            const double down = moon_batch_term(&c, &b, dlogits, scratch);
            m.state[best] = w0;
            const double fd = (up - down) / (2.0 * step);
            worst = fmax(worst, fabs(fd - g0));
            scale = fmax(scale, fabs(fd));
        }
        CHECK_MSG(scale > 1e-4 && worst <= 2e-3 * scale, "layer %d: largest |fd - analytic| %.3g of %.3g", t, worst,
                  scale);
    }
    free(wg), free(wp);
    nn_model_free(&m), nn_model_free(&g), nn_model_free(&prev), nn_model_free(&plain);
}

/* ---- FedDecorr ------------------------------------------------------------------------------------------ */

/* the loss written out from docs/methods, in double */
static double decorr_ref(const double *z, int n, int d)
{
    double zh[64];
    for (int j = 0; j < d; j++) {
        double m = 0, v = 0;
        for (int i = 0; i < n; i++) m += z[i * d + j] / n;
        for (int i = 0; i < n; i++) v += (z[i * d + j] - m) * (z[i * d + j] - m) / (n - 1);
        for (int i = 0; i < n; i++) zh[i * d + j] = (z[i * d + j] - m) / sqrt(1e-8 + v);
    }
    double s = 0;
    for (int a = 0; a < d; a++)
        for (int b = 0; b < d; b++) {
            if (a == b) continue;
            double mab = 0;
            for (int i = 0; i < n; i++) mab += zh[i * d + a] * zh[i * d + b];
            s += mab * mab;
        }
    return s / (n * (double)d * (d - 1));
}

static void test_decorr_gradient(void)
{
    enum { B = 5, D = 4 };
    float z[B * D], dz[B * D], work[2 * B * D + D * D + 2 * D + 16];
    double zd[B * D];
    fill(z, B * D, -1, 2, 11);
    for (int k = 0; k < B * D; k++) zd[k] = z[k];
    memset(dz, 0, sizeof dz);
    const double L = decorr_loss(dz, z, B, D, 1.0, work);
    CHECK_NEAR(L, decorr_ref(zd, B, D), 1e-6 * fmax(1.0, L));
    double worst = 0, scale = 0;
    for (int k = 0; k < B * D; k++) {
        const double h = 1e-5, z0 = zd[k];
        zd[k] = z0 + h;
        const double up = decorr_ref(zd, B, D);
        zd[k] = z0 - h;
        const double down = decorr_ref(zd, B, D);
        zd[k] = z0;
        const double fd = (up - down) / (2 * h);
        worst = fmax(worst, fabs(fd - dz[k]));
        scale = fmax(scale, fabs(fd));
    }
    CHECK_MSG(scale > 1e-3 && worst <= 1e-3 * scale, "largest |fd - analytic| %.3g of %.3g", worst, scale);

    /* through the hook: beta scales value and gradient; beta = 0 adds exact zeros */
    const AlgoMethod *decorr = algo_find("feddecorr");
    AlgoOptionBlock ob;
    const AlgoClientRound c_round = { .options = OPTIONS(&ob, decorr, { "beta", 0.1 }) };
    AlgoClientCtx c = { .round = &c_round, .state = { .work = work } };
    AlgoBatch b = { NULL, NULL, B, 2, NULL, z, D };
    float dz2[B * D] = { 0 };
    CHECK_NEAR(decorr_batch_term(&c, &b, NULL, dz2), 0.1 * L, 1e-9);
    for (int k = 0; k < B * D; k++) CHECK_NEAR(dz2[k], 0.1 * dz[k], 1e-6);
    option_set(&ob, decorr, "beta", 0.0);
    memset(dz2, 0, sizeof dz2);
    CHECK(decorr_batch_term(&c, &b, NULL, dz2) == 0.0);
    for (int k = 0; k < B * D; k++) CHECK(dz2[k] == 0.0f);
    /* a batch of one: 0 and no gradient */
    option_set(&ob, decorr, "beta", 0.1);
    b.count = 1;
    memset(dz2, 0, sizeof dz2);
    CHECK(decorr_batch_term(&c, &b, NULL, dz2) == 0.0);
    for (int k = 0; k < B * D; k++) CHECK(dz2[k] == 0.0f);
    /* the scratch it asks for */
    AlgoSetup s = { .batch_size = 64, .feature_size = 512, .n_state = 100000 };
    AlgoSizes zs = { 0 };
    decorr_sizes(&s, &zs);
    CHECK(zs.work_vectors == (int)((2 * 64 * 512 + 512 * 512 + 2 * 512 + 99999) / 100000));
}

/* ---- FedMR --------------------------------------------------------------------------------------------- */

/* input 2x3x3 -> conv 2 -> batch norm -> gap -> flatten -> linear 3: weights, biases and buffers */
static void bn_model(NnModel *m)
{
    CHECK_OK(nn_model_init(m, "tinybn", (NnShape){ 2, 3, 3 }, 4));
    int x = nn_conv2d(m, m->input, 2, 3, 1, 1, 1, 1, NN_ACT_NONE);
    x = nn_batchnorm(m, x, NN_ACT_RELU);
    x = nn_flatten(m, nn_gap(m, x));
    int y = nn_linear(m, x, 3, 1, NN_ACT_NONE);
    CHECK_OK(nn_model_finalize(m, y, x, 3));
}

static void test_fedmr_recombination(void)
{
    enum { M = 3 };
    NnModel model;
    bn_model(&model);
    const int64_t P = model.n_state;
    CHECK(model.n_buffers > 0);
    float *slots = malloc((size_t)M * P * sizeof(float)), *states = malloc((size_t)M * P * sizeof(float)),
          *global = malloc((size_t)P * sizeof(float));
    fill(states, M * P, -1, 1, 21);
    const AlgoMethod *fedmr = algo_find("fedmr");
    AlgoOptionBlock ob;
    const AlgoOptions o = OPTIONS(&ob, fedmr, { "first_stage", 0 });
    const int32_t selected[M] = { 1, 3, 4 };
    AlgoSetup setup = { .seed = 9, .per_round = M };
    AlgoSizes z = { 0 };
    fedmr_sizes(&setup, &z);
    CHECK(z.server_vectors == M);
    AlgoServerCtx s = { .round = 2, .n_clients = 6, .n_selected = M, .selected = selected, .n_params = model.n_params,
                        .n_state = P, .options = o, .setup = &setup, .sizes = &z, .server_vecs = slots,
                        .views = model.views, .n_views = model.n_views, .scratch = test_scratch(z.server_scratch) };
    AlgoUpload u[M];
    double p[M];
    for (int i = 0; i < M; i++) u[i] = (AlgoUpload){ selected[i], 10 + i, 1, 0, NULL, states + (size_t)i * P, NULL };
    CHECK_OK(algo_weights_uniform.weights(&s, u, M, p));
    CHECK_OK(fedmr_update(&s, u, M, p, global));
    for (int64_t j = 0; j < P; j++) {
        const double mean = ((double)states[j] + states[P + j] + states[2 * P + j]) / 3.0;
        CHECK_NEAR(global[j], mean, 1e-6);
    }
    /* every tensor of every new slot is that tensor of exactly one trained model, a permutation per tensor */
    int64_t perms[64];
    int n_views = model.n_views < 64 ? model.n_views : 64, moved = 0;
    for (int v = 0; v < n_views; v++) {
        const NnParamView *pv = &model.views[v];
        int used[M] = { 0 }, code = 0;
        for (int i = 0; i < M; i++) {
            int from = -1;
            for (int j = 0; j < M; j++)
                if (!memcmp(slots + (size_t)i * P + pv->offset, states + (size_t)j * P + pv->offset,
                            (size_t)pv->count * sizeof(float)))
                    from = j;
            CHECK_MSG(from >= 0, "view %s of slot %d is no trained tensor", pv->name, i);
            if (from >= 0) used[from]++;
            code = code * M + from;
            moved += from != i;
        }
        for (int j = 0; j < M; j++) CHECK_MSG(used[j] == 1, "view %s: model %d used %d times", pv->name, j, used[j]);
        perms[v] = code;
    }
    int distinct = 0;
    for (int v = 1; v < n_views; v++) distinct += perms[v] != perms[0];
    CHECK_MSG(moved > 0 && distinct > 0, "%d views: the tensors were not permuted independently", n_views);
    /* the same round and seed: the same recombination */
    float *again = malloc((size_t)M * P * sizeof(float));
    memcpy(again, slots, (size_t)M * P * sizeof(float));
    s.server_vecs = again;
    CHECK_OK(fedmr_update(&s, u, M, p, global));
    CHECK(memcmp(again, slots, (size_t)M * P * sizeof(float)) == 0);
    /* first stage (round < t_1): every slot is the uniform average, which is what `uniform` computes */
    option_set(&ob, fedmr, "first_stage", 1000);
    float *avg = malloc((size_t)P * sizeof(float));
    CHECK_OK(algo_average(&s, u, M, p, avg));
    CHECK_OK(fedmr_update(&s, u, M, p, global));
    CHECK(memcmp(avg, global, (size_t)P * sizeof(float)) == 0);
    for (int i = 0; i < M; i++) CHECK(memcmp(again + (size_t)i * P, global, (size_t)P * sizeof(float)) == 0);
    /* bernoulli selection refused */
    setup.per_round = -1;
    CHECK(fedmr_validate(algo_find("fedmr"), &setup) == FH_ERR_USAGE);
    free(slots), free(states), free(global), free(again), free(avg);
    nn_model_free(&model);
}

/* ---- FedGKD -------------------------------------------------------------------------------------------- */

static void test_fedgkd_buffer(void)
{
    enum { P = 4 };
    for (int variant = 0; variant < 2; variant++) {
        AlgoOptionBlock ob;
        const AlgoOptions o = OPTIONS(&ob, algo_find("fedgkd"), { "gamma", 0.1 }, { "buffer_length", 2 },
                                      { "temperature", 1.0 }, { "variant", variant });
        AlgoSetup setup = { .options = o, .batch_size = 2, .classes = 2, .n_state = P };
        AlgoSizes z = { 0 };
        fedgkd_sizes(&setup, &z);
        CHECK(z.server_scalars == 2 && z.aux_models == 1);
        CHECK(variant ? z.server_vectors == 2 && z.server_private == 0 : z.server_vectors == 1 && z.server_private == 2);
        float vecs[2 * P] = { 0 }, priv[2 * P] = { 0 }, global[P];
        double sc[2] = { 0, 0 };
        AlgoServerCtx s = { .n_params = P, .n_state = P, .options = o, .setup = &setup, .sizes = &z,
                            .server_vecs = vecs, .server_private = priv, .server_scalars = sc,
                            .scratch = test_scratch(z.server_scratch) };
        float g[3][P] = { { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { -1, 0, 2, 16 } };
        double one = 1.0;
        for (int t = 0; t < 3; t++) {
            AlgoUpload u = { 0, 5, 1, 0, NULL, g[t], NULL };
            s.round = t;
            CHECK_OK(server_step(algo_find("fedgkd"), &s, &u, 1, &one, global));
            CHECK(memcmp(global, g[t], sizeof global) == 0);
            CHECK(sc[0] == (t + 1 < 2 ? t + 1 : 2));
        }
        /* the buffer holds the last two globals; avg broadcasts their mean */
        const float *fifo = variant ? vecs : priv;
        CHECK(!memcmp(fifo, g[2], sizeof g[2]) && !memcmp(fifo + P, g[1], sizeof g[1]));
        if (!variant)
            for (int j = 0; j < P; j++) CHECK(vecs[j] == (g[1][j] + g[2][j]) / 2);
    }
    /* M = 1: the teacher is w^t itself, nothing extra broadcast */
    AlgoOptionBlock b1;
    AlgoSetup s1 = { .options = OPTIONS(&b1, algo_find("fedgkd"), { "buffer_length", 1 }) };
    AlgoSizes z1 = { 0 };
    fedgkd_sizes(&s1, &z1);
    CHECK(z1.server_vectors == 0 && z1.server_private == 1);
    /* a count: a fraction does not land */
    CHECK(algo_option_set(&b1, algo_find("fedgkd"), "buffer_length", 2.5) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "buffer_length") != NULL);
    fh_error_clear();
}

/* ---- FedNP-min ---------------------------------------------------------------------------------------- */

static void test_fednp_npn_gradient(void)
{
    enum { D = 6, N = NP_NPN_FLOATS(D) };
    float npn[N], w[D], gw[D] = { 0 };
    double g[N], xm[NP_DIM], xs[NP_DIM];
    fill(npn, N, -0.6, 0.6, 31);
    fill(w, D, -1, 1, 32);
    for (int k = 0; k < NP_DIM; k++) xm[k] = 0.2 + 0.4 * k, xs[k] = 0.1 + 0.3 * k;
    const double L = fednp_loss(npn, D, xm, xs, w, 1.0, gw, g);
    CHECK(isfinite(L) && L > 0);
    double worst = 0, scale = 0;
    for (int q = 0; q < N + D; q++) {
        float *x = q < N ? &npn[q] : &w[q - N];
        const float x0 = *x, h = 1.0f / 512;
        *x = x0 + h;
        const double up = fednp_loss(npn, D, xm, xs, w, 1.0, NULL, NULL);
        *x = x0 - h;
        const double down = fednp_loss(npn, D, xm, xs, w, 1.0, NULL, NULL);
        *x = x0;
        const double fd = (up - down) / (2.0 * h), an = q < N ? g[q] : gw[q - N];
        worst = fmax(worst, fabs(fd - an));
        scale = fmax(scale, fabs(fd));
    }
    CHECK_MSG(scale > 1e-3 && worst <= 2e-3 * scale, "largest |fd - analytic| %.3g of %.3g", worst, scale);

    /* the initial sites (0, 1) give the documented initial cavity (0, 1/(K-1)) */
    enum { K = 5 };
    double sites[K * NP_SITE];
    AlgoOptionBlock ob;
    const AlgoOptions o = OPTIONS(&ob, algo_find("fednp"), { "lambda", 0.01 });
    AlgoSizes z = { 0 };
    AlgoSetup setup = { .n_clients = K, .classes = 2, .feature_size = 3, .n_state = 100 };
    fednp_sizes(&setup, &z);
    CHECK(z.server_scalars == K * NP_SITE && z.upload_scalars == NP_SITE + 1 && z.client_floats == NP_SITE + NP_NPN_FLOATS(6));
    AlgoServerCtx s = { .n_clients = K, .options = o, .server_scalars = sites, .sizes = &z };
    CHECK_OK(fednp_init(&s, NULL));
    float cav[NP_SITE];
    fednp_cavity(cav, sites, K, 2);
    for (int d = 0; d < NP_DIM; d++) {
        CHECK(cav[d] == 0.0f);
        CHECK_NEAR(cav[NP_DIM + d], 1.0 / (K - 1), 1e-4);
    }
    /* an uploaded site changes the others' cavities by precision weighting, not the sender's */
    double up[NP_SITE + 1];
    for (int d = 0; d < NP_DIM; d++) up[d] = 2.0, up[NP_DIM + d] = 0.5;
    AlgoUpload u = { 3, 10, 1, 0, up, NULL, NULL };
    float st[1] = { 0 }, gl[1];
    s.n_state = 1, s.n_params = 1;
    u.state = st;
    double one = 1.0;
    CHECK_OK(server_step(algo_find("fednp"), &s, &u, 1, &one, gl));
    fednp_cavity(cav, sites, K, 0);
    const double l1 = 1.0 / (1.0 + NP_EPS), l3 = 1.0 / (0.5 + NP_EPS), sig = 1.0 / (3 * l1 + l3 + NP_EPS);
    CHECK_NEAR(cav[NP_DIM], sig, 1e-6);
    CHECK_NEAR(cav[0], sig * 2.0 * l3, 1e-6);
    float cav3[NP_SITE];
    fednp_cavity(cav3, sites, K, 3);
    CHECK_NEAR(cav3[NP_DIM], 1.0 / (K - 1), 1e-4);
    /* the prior is clamped into [EPS, 5] */
    double mu[NP_DIM], sg[NP_DIM];
    const double fs[] = { 0.0, 0.3, 7.0, 1e4 };
    for (int i = 0; i < 4; i++) {
        fednp_prior(mu, sg, cav, cav + NP_DIM, fs[i]);
        for (int d = 0; d < NP_DIM; d++)
            CHECK(mu[d] >= NP_EPS && mu[d] <= NP_HI && sg[d] >= NP_EPS && sg[d] <= NP_HI);
    }
}

/* ---- logit adjustment (docs/methods/baselines.md A.22) ------------------------------------------------------------------------ */

static void test_logit_adjust_absent_classes(void)
{
    enum { B = 4, C = 4 };
    const int32_t counts[C] = { 5, 0, 3, 0 }, y[B] = { 0, 2, 2, 0 };
    const double tau = 1.0;
    float adj[C], logits[B * C], dl[B * C] = { 0 };
    for (int k = 0; k < C; k++) adj[k] = counts[k] ? (float)(tau * log(counts[k] / 8.0)) : -INFINITY;
    fill(logits, B * C, -3, 3, 41);
    const float loss = nn_softmax_xent(dl, NULL, logits, y, NULL, adj, B, C);
    double ref = 0;
    for (int i = 0; i < B; i++) {
        double s = 0;
        for (int k = 0; k < C; k++)
            if (counts[k]) s += exp((double)logits[i * C + k] + adj[k]);
        ref += log(s) - ((double)logits[i * C + y[i]] + adj[y[i]]);
        for (int k = 0; k < C; k++) {
            if (!counts[k]) CHECK_MSG(dl[i * C + k] == 0.0f, "absent class %d: gradient %g", k, dl[i * C + k]);
            /* the adjusted softmax mass, p = B dl + onehot */
            const double p = B * (double)dl[i * C + k] + (k == y[i]);
            const double pref = counts[k] ? exp((double)logits[i * C + k] + adj[k]) / s : 0.0;
            CHECK_NEAR(p, pref, 1e-6);
        }
    }
    CHECK(isfinite(loss));
    CHECK_NEAR(loss, ref / B, 1e-5);
    /* equal priors: plain cross-entropy */
    float eq[C], d1[B * C] = { 0 }, d2[B * C] = { 0 };
    for (int k = 0; k < C; k++) eq[k] = (float)(tau * log(0.25));
    const float l1 = nn_softmax_xent(d1, NULL, logits, y, NULL, eq, B, C);
    const float l2 = nn_softmax_xent(d2, NULL, logits, y, NULL, NULL, B, C);
    CHECK_NEAR(l1, l2, 1e-6);
    for (int k = 0; k < B * C; k++) CHECK_NEAR(d1[k], d2[k], 1e-7);
}

/* one client that holds classes 0 and 1 of 3: with train.logit_adjust the classifier row and bias of class 2
 * get no gradient in local training, so they leave the round exactly as they came; without, they move */
static void test_logit_adjust_in_local_training(void)
{
    const int64_t n = 60;
    DataImageSet train = { n, 1, 4, 4, 3, malloc((size_t)n * 16), malloc((size_t)n * sizeof(int32_t)), NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL };
    DataImageSet test = { 0 };
    FhRng rng;
    fh_rng_init(&rng, 3, FH_RNG_TEST, 0, 0, 0);
    for (int64_t i = 0; i < n; i++) {
        train.labels[i] = (int32_t)(i % 2);
        for (int j = 0; j < 16; j++)
            train.images[i * 16 + j] = (uint8_t)(fh_rng_below(&rng, 100) + (j / 8 == train.labels[i] ? 150 : 0));
    }
    DataPartFileSpec spec;
    memset(&spec, 0, sizeof spec);
    spec.partition = (DataPartitionSpec){ "iid", NULL, 1, 1.0, 1, 1, 0, 100, 5, NULL, 0, NULL, 0 };
    spec.deflate = 1;
    DataPartition part;
    const char *path = tmp_path("la.h5");
    tmp_record(path);
    CHECK_OK(data_partition(&part, train.labels, n, 3, &spec.partition));
    CHECK_OK(data_partfile_write(path, &train, &test, &part, &spec));
    data_partition_free(&part);
    data_imageset_free(&train);
    DataPartFile f;
    CHECK_OK(data_partfile_open(&f, path));
    for (int with = 0; with < 2; with++) {
        FlSettings s;
        memset(&s, 0, sizeof s);
        s.model = "mlp", s.norm = "bn", s.groups = 2, s.optimizer = "sgd", s.lr = 0.1, s.momentum = 0.9;
        s.epochs = 2, s.batch_size = 16, s.seed = 4, s.selection = "all", s.rounds = 1;
        s.method = algo_find("fedavg");
        s.logit_adjust = with ? 1.0 : 0.0;
        int client = 0;
        FlClientWork w;
        CHECK_OK(fl_client_init(&w, &s, &f, &client, 1));
        FlRecordLayout l;
        fl_record_layout(&l, &w.ops.sizes, w.model.n_state);
        void *rec = calloc(1, l.bytes);
        const int64_t P = w.model.n_state;
        float *global = malloc((size_t)P * sizeof(float));
        nn_model_init_params(&w.model, 4);
        memcpy(global, w.model.state, (size_t)P * sizeof(float));
        CHECK_OK(fl_client_train(&w, &l, global, NULL, NULL, 0, 0, 0, s.lr, rec));
        const float *out = fl_record_state(rec, &l);
        const NnLayer *cls = &w.model.layers[w.model.n_layers - 1];
        const int64_t row = cls->w_off + 2 * (int64_t)cls->cin;
        const int same = !memcmp(out + row, global + row, (size_t)cls->cin * sizeof(float)) &&
                         out[cls->b_off + 2] == global[cls->b_off + 2];
        CHECK_MSG(same == with, "logit_adjust %d: the absent class's classifier row %s", with, same ? "did not move" : "moved");
        free(rec), free(global);
        fl_client_free(&w);
    }
    data_partfile_close(&f);
}

/* ---- registry rows ---------------------------------------------------------------------------------------- */

static void test_rows(void)
{
    const char *names[] = { "moon", "feddecorr", "fedmr", "fednp", "fedgkd" };
    for (int i = 0; i < 5; i++) {
        const AlgoMethod *m = algo_find(names[i]);
        CHECK_MSG(m && m->state && m->payload && m->summary, "%s", names[i]);
        /* the round folds every row but FedMR, which says why it needs every model (fedhet methods) */
        const char *why = m ? algo_gathers_why(m->update, m->weights) : NULL;
        CHECK_MSG(i == 2 ? why && strstr(why, "recombines the layers") : !why, "%s: %s", names[i], why ? why : "folded");
    }
    CHECK(algo_option_find(algo_find("moon"), "tau") && algo_option_find(algo_find("moon"), "tau")->lo_open);
    const AlgoMethod *gkd = algo_find("fedgkd");
    CHECK(algo_option_find(gkd, "buffer_length") && algo_option_find(gkd, "buffer_length")->type == FH_CFG_INT);
    CHECK(algo_option_find(gkd, "variant") && algo_option_find(gkd, "variant")->type == FH_CFG_CHOICE);
    CHECK(strstr(algo_find("fednp")->summary, "FedNP-min") != NULL);
}

int main(int argc, char **argv)
{
    test_only = argc > 1 ? argv[1] : NULL;
    if (tmp_init("algorepr") != 0) return 1;
    RUN(test_moon_contrastive_gradient);
    RUN(test_moon_head_gradient);
    RUN(test_decorr_gradient);
    RUN(test_fedmr_recombination);
    RUN(test_fedgkd_buffer);
    RUN(test_fednp_npn_gradient);
    RUN(test_logit_adjust_absent_classes);
    RUN(test_logit_adjust_in_local_training);
    RUN(test_rows);
    tmp_cleanup();
    return test_summary();
}
