/* The 'sam' method family's parts called directly (docs/methods/sam.md §1-8, 11, 12): the SAM step with
 * rho = 0 is the SGD step bit for bit (BatchNorm statistics included); the perturbation has norm rho and
 * the weights are restored exactly; ASAM's and GSAM's formulas, GSAM alpha = 0 = SAM; FedSpeed's and
 * FedSMOO's dual variables after one full-participation round against a hand-computed 2-parameter example;
 * MoFedSAM's first two rounds as FL-Simulator runs them (alpha lr in round 0, mom from K_bar); FedGAMMA's control variates against SCAFFOLD's identities; FedLESAM's perturbation (intended and the
 * official code's per-tensor indexing); the radius hooks and their validation, GSAM's lr-proportional radius;
 * the sharpness diagnostic.
 * usage: build/tests/test_algo_sam [test_name] */
#include "test.h"

#include <stdlib.h>

#include "fake_client.h"
#include "fedhet/rng.h"

/* conv 3x3 (bias) -> batch norm + relu -> gap -> linear: BN buffers, weights and biases */
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
}

/* a batch of 6 samples, different per step */
typedef struct {
    NnModel *m;
    AlgoClientCtx *c;
    float x[8 * 32], dlogits[8 * 3];
    int32_t y[8];
    int count, calls;
    float *seen[2]; /* the state at the first two calls (optional) */
    float *grads[2]; /* the gradient returned by the first two calls (optional) */
} Batch;

static void batch_fill(Batch *b, int step)
{
    FhRng rng;
    fh_rng_init(&rng, 5, FH_RNG_TEST, (uint32_t)step, 0, 0);
    b->count = 6;
    for (int i = 0; i < b->count * 32; i++) b->x[i] = (float)(fh_rng_uniform(&rng) * 2.0 - 1.0);
    for (int i = 0; i < b->count; i++) b->y[i] = (int32_t)((i + step) % 3);
    b->calls = 0;
}

static int batch_grad(void *env, double *loss)
{
    Batch *b = env;
    NnModel *m = b->m;
    const int k = b->calls++;
    if (k < 2 && b->seen[k]) memcpy(b->seen[k], m->state, (size_t)m->n_state * sizeof(float));
    nn_model_zero_grad(m);
    FH_CHECK(nn_model_forward(m, b->x, b->count));
    memset(b->dlogits, 0, sizeof b->dlogits);
    *loss = nn_softmax_xent(b->dlogits, NULL, nn_model_logits(m), b->y, NULL, NULL, b->count, m->classes);
    nn_model_backward(m, b->dlogits, NULL);
    if (!b->c->state.grad_pure) b->c->svc->grad_terms(b->c, m->grad, loss);
    if (k < 2 && b->grads[k]) memcpy(b->grads[k], m->grad, (size_t)m->n_params * sizeof(float));
    return FH_OK;
}

static double dist(const float *a, const float *b, int64_t n)
{
    double s = 0.0;
    for (int64_t j = 0; j < n; j++) s += ((double)a[j] - b[j]) * ((double)a[j] - b[j]);
    return sqrt(s);
}

/* ---- SAM, ASAM, GSAM --------------------------------------------------------------------------------- */

/* rho = 0: three SAM steps equal three SGD steps (gradient, clip, step) bit for bit, BN running statistics
 * included (updated by the first pass only) */
static void test_sam_rho0_equals_sgd(void)
{
    NnModel a, b;
    bn_model(&a);
    bn_model(&b);
    Fake f, g;
    fake_init(&f, "fedsam", &a);
    fake_init(&g, "fedsam", &b);
    fake_set(&f, "rho", 0.0);
    Batch ba = { .m = &a, .c = &f.c }, bb = { .m = &b, .c = &g.c };
    for (int step = 0; step < 3; step++) {
        f.c.state.step = g.c.state.step = step;
        batch_fill(&ba, step);
        batch_fill(&bb, step);
        double la = 0, lb = 0;
        CHECK_OK(algo_sam_step(&f.c, batch_grad, &ba, &la));
        CHECK(ba.calls == 2);
        CHECK_OK(batch_grad(&bb, &lb)); /* the runtime's default step */
        fake_optimizer_step(&g.c, b.state, b.grad);
        CHECK(la == lb);
    }
    CHECK(a.n_buffers > 0);
    CHECK_MSG(memcmp(a.state, b.state, (size_t)a.n_state * sizeof(float)) == 0, "SAM rho=0 differs from SGD");
    CHECK(f.up[algo_upload_index(&f.z, "perturb_norm")] == 0.0 && f.up[algo_upload_index(&f.z, "grad_norm")] > 0.0);
    fake_free(&f), fake_free(&g);
    nn_model_free(&a), nn_model_free(&b);
}

/* FedISM+ with perturb = none (SAGA alone): one gradient per step and the SGD step bit for bit, at any radius */
static void test_fedism_perturb_none_is_sgd(void)
{
    NnModel a, b;
    bn_model(&a);
    bn_model(&b);
    Fake f, g;
    fake_init(&f, "fedismplus", &a);
    fake_init(&g, "fedismplus", &b);
    const AlgoMethod *meth = algo_find("fedismplus");
    const AlgoOption *perturb = algo_option_find(meth, "perturb");
    CHECK(perturb && perturb->choices && strstr(perturb->choices, "|none"));
    fake_set(&f, "perturb", 3.0); /* none */
    fake_set(&f, "rho_max", 0.5); /* ignored by the step */
    Batch ba = { .m = &a, .c = &f.c }, bb = { .m = &b, .c = &g.c };
    for (int step = 0; step < 3; step++) {
        f.c.state.step = g.c.state.step = step;
        batch_fill(&ba, step);
        batch_fill(&bb, step);
        double la = 0, lb = 0;
        CHECK_OK(meth->step->step(&f.c, batch_grad, &ba, &la));
        CHECK(ba.calls == 1);
        CHECK_OK(batch_grad(&bb, &lb));
        fake_optimizer_step(&g.c, b.state, b.grad);
        CHECK(la == lb);
    }
    CHECK_MSG(memcmp(a.state, b.state, (size_t)a.n_state * sizeof(float)) == 0, "perturb = none differs from SGD");
    fake_free(&f), fake_free(&g);
    nn_model_free(&a), nn_model_free(&b);
}

/* rho = 0.3: the second pass runs at w + eps with ||eps|| = rho and eps parallel to the first gradient;
 * the optimiser starts from the pre-step weights bit for bit; running statistics as after one forward */
static void test_sam_perturbation_and_restore(void)
{
    NnModel a, b;
    bn_model(&a);
    bn_model(&b);
    Fake f, g;
    fake_init(&f, "fedsam", &a);
    fake_init(&g, "fedsam", &b);
    fake_set(&f, "rho", 0.3);
    const int64_t P = a.n_params, S = a.n_state;
    float *before = malloc((size_t)S * sizeof(float)), *at[2] = { malloc(S * 4), malloc(S * 4) },
          *gr[2] = { malloc(P * 4), malloc(P * 4) };
    f.opt_seen = malloc((size_t)P * sizeof(float));
    memcpy(before, a.state, (size_t)S * sizeof(float));
    Batch ba = { .m = &a, .c = &f.c, .seen = { at[0], at[1] }, .grads = { gr[0], gr[1] } }, bb = { .m = &b, .c = &g.c };
    batch_fill(&ba, 0);
    batch_fill(&bb, 0);
    double loss;
    CHECK_OK(algo_sam_step(&f.c, batch_grad, &ba, &loss));
    CHECK(memcmp(at[0], before, (size_t)S * sizeof(float)) == 0);
    CHECK_NEAR(dist(at[1], at[0], P), 0.3, 1e-6);
    double gnorm = 0.0;
    for (int64_t j = 0; j < P; j++) gnorm += (double)gr[0][j] * gr[0][j];
    gnorm = sqrt(gnorm);
    double worst = 0.0;
    for (int64_t j = 0; j < P; j++) worst = fmax(worst, fabs((at[1][j] - at[0][j]) - 0.3 * gr[0][j] / gnorm));
    CHECK_MSG(worst < 1e-6, "eps is not rho g/||g||: worst %g", worst);
    /* buffers are never perturbed, and the perturbed pass does not move them */
    CHECK(memcmp(at[1] + P, a.state + P, (size_t)(S - P) * sizeof(float)) == 0);
    CHECK_MSG(memcmp(f.opt_seen, before, (size_t)P * sizeof(float)) == 0, "the weights were not restored exactly");
    CHECK_NEAR(f.up[algo_upload_index(&f.z, "perturb_norm")], 0.3, 1e-6);
    CHECK_NEAR(f.up[algo_upload_index(&f.z, "grad_norm")], gnorm, 1e-5 * gnorm);
    /* running statistics: those of one training forward at w */
    CHECK_OK(batch_grad(&bb, &loss));
    CHECK(memcmp(a.state + P, b.state + P, (size_t)(S - P) * sizeof(float)) == 0);
    CHECK(memcmp(a.state + P, before + P, (size_t)(S - P) * sizeof(float)) != 0);
    free(before), free(at[0]), free(at[1]), free(gr[0]), free(gr[1]);
    fake_free(&f), fake_free(&g);
    nn_model_free(&a), nn_model_free(&b);
}

/* ASAM: eps = rho T^2 g/||T g||, T = |w| + eta on weights, 1 on biases (docs/methods/sam.md §1) */
static void test_asam_perturbation(void)
{
    NnModel a;
    bn_model(&a);
    Fake f;
    fake_init(&f, "fedsam", &a);
    fake_set(&f, "rho", 0.5);
    fake_set(&f, "perturb", 1); /* asam */
    fake_set(&f, "asam_eta", 0.2);
    const int64_t P = a.n_params;
    float *at[2] = { malloc(a.n_state * 4), malloc(a.n_state * 4) }, *g0 = malloc(P * 4), *t = malloc(P * 4);
    Batch ba = { .m = &a, .c = &f.c, .seen = { at[0], at[1] }, .grads = { g0, NULL } };
    batch_fill(&ba, 1);
    double loss, tg = 0.0;
    CHECK_OK(algo_sam_step(&f.c, batch_grad, &ba, &loss));
    int weights = 0, biases = 0;
    for (int v = 0; v < a.n_views; v++) {
        const NnParamView *pv = &a.views[v];
        if (!pv->trainable) continue;
        const int scaled = pv->role == NN_ROLE_WEIGHT || pv->role == NN_ROLE_NORM_WEIGHT;
        weights += scaled, biases += !scaled;
        for (int64_t j = pv->offset; j < pv->offset + pv->count; j++) t[j] = scaled ? fabsf(at[0][j]) + 0.2f : 1.0f;
    }
    CHECK(weights == 3 && biases == 3);
    for (int64_t j = 0; j < P; j++) tg += (double)t[j] * g0[j] * t[j] * g0[j];
    tg = sqrt(tg);
    double worst = 0.0, sq = 0.0;
    for (int64_t j = 0; j < P; j++) {
        const double eps = at[1][j] - at[0][j];
        worst = fmax(worst, fabs(eps - 0.5 * t[j] * t[j] * g0[j] / tg));
        sq += eps * eps;
    }
    CHECK_MSG(worst < 1e-6, "ASAM eps differs by %g", worst);
    CHECK_NEAR(f.up[algo_upload_index(&f.z, "perturb_norm")], sqrt(sq), 1e-6);
    free(at[0]), free(at[1]), free(g0), free(t);
    fake_free(&f);
    nn_model_free(&a);
}

/* GSAM alpha = 0 is SAM bit for bit; alpha = 0.4 descends g_p - alpha (g - cos ||g|| g_p/||g_p||) */
static void test_gsam(void)
{
    NnModel a, b;
    bn_model(&a);
    bn_model(&b);
    Fake f, g;
    fake_init(&f, "fedsam", &a);
    fake_init(&g, "fedsam", &b);
    fake_set(&f, "perturb", 2); /* gsam */
    fake_set(&f, "gsam_alpha", 0.0);
    algo_sizes(f.round.method, &f.setup, &f.z);
    CHECK(f.z.work_vectors == 2);
    Batch ba = { .m = &a, .c = &f.c }, bb = { .m = &b, .c = &g.c };
    for (int step = 0; step < 2; step++) {
        f.c.state.step = g.c.state.step = step;
        batch_fill(&ba, step);
        batch_fill(&bb, step);
        double la, lb;
        CHECK_OK(algo_sam_step(&f.c, batch_grad, &ba, &la));
        CHECK_OK(algo_sam_step(&g.c, batch_grad, &bb, &lb));
    }
    CHECK_MSG(memcmp(a.state, b.state, (size_t)a.n_state * sizeof(float)) == 0, "GSAM alpha=0 differs from SAM");

    /* alpha = 0.4 against the formula, from the recorded gradients (no clip at these norms) */
    fake_set(&f, "gsam_alpha", 0.4);
    const int64_t P = a.n_params;
    float *gr[2] = { malloc(P * 4), malloc(P * 4) }, *d = malloc(P * 4);
    f.opt_seen = malloc(P * 4);
    memcpy(d, a.state, P * 4);
    Batch bc = { .m = &a, .c = &f.c, .grads = { gr[0], gr[1] } };
    batch_fill(&bc, 5);
    double l;
    CHECK_OK(algo_sam_step(&f.c, batch_grad, &bc, &l));
    double n0 = 0, n1 = 0, dt = 0;
    for (int64_t j = 0; j < P; j++) n0 += (double)gr[0][j] * gr[0][j], n1 += (double)gr[1][j] * gr[1][j],
                                   dt += (double)gr[0][j] * gr[1][j];
    n0 = sqrt(n0), n1 = sqrt(n1);
    CHECK(n0 < 10 && n1 < 10);
    const double cosq = dt / (n0 * n1 + 1e-12);
    double worst = 0.0, perp_dot = 0.0;
    for (int64_t j = 0; j < P; j++) {
        const double perp = gr[0][j] - cosq * n0 * gr[1][j] / (n1 + 1e-12), want = gr[1][j] - 0.4 * perp;
        const double got = ((double)d[j] - a.state[j]) / 0.1; /* plain SGD, lr 0.1 */
        worst = fmax(worst, fabs(got - want));
        perp_dot += perp * gr[1][j];
    }
    CHECK_MSG(worst < 1e-4, "GSAM direction differs by %g", worst);
    CHECK_NEAR(perp_dot, 0.0, 1e-6 * n0 * n1); /* g_perp is orthogonal to g_p */
    free(gr[0]), free(gr[1]), free(d);
    fake_free(&f), fake_free(&g);
    nn_model_free(&a), nn_model_free(&b);
}

/* ---- FedSpeed and FedSMOO: one full-participation round, 2 parameters, by hand (docs/methods/sam.md §6, 7) ---------- */

/* loss 0.5 ||w - a||^2 with a = 0: g(w) = w */
static int quad_grad(void *env, double *loss)
{
    AlgoClientCtx *c = env;
    NnModel *m = c->model;
    for (int j = 0; j < 2; j++) m->grad[j] = m->state[j];
    *loss = 0.5 * ((double)m->state[0] * m->state[0] + (double)m->state[1] * m->state[1]);
    if (!c->state.grad_pure) c->svc->grad_terms(c, m->grad, loss);
    return FH_OK;
}

/* the row's server step over gathered uploads, as the runtime runs it (algo_server_update), with the server scratch
 * its sizes ask for */
static void server_update(const AlgoMethod *meth, AlgoServerCtx *s, const AlgoUpload *u, int m, const double *p,
                          float *next)
{
    enum { N = 4 }; /* state elements and uploads at most */
    float sums[ALGO_MAX_SUMS * N];
    double coef[(1 + ALGO_MAX_SUMS) * N];
    max_align_t block[8];
    CHECK(s->n_state <= N && m <= N && s->sizes->server_scratch <= sizeof block);
    s->scratch = (AlgoScratch){ block, s->sizes->server_scratch };
    CHECK_OK(algo_server_update(meth->update, s, u, m, p, next, sums, coef));
}

static void test_fedsmoo_two_params(void)
{
    float w[2] = { 1.0f, 2.0f }, gbuf[2];
    NnModel m;
    two_params(&m, w, gbuf);
    Fake f;
    fake_init(&f, "fedsmoo", &m);
    CHECK(f.z.client_vectors == 2 && f.z.server_vectors == 1 && f.z.server_private == 1 && f.z.upload_vectors == 1);
    f.global[0] = 1.0f, f.global[1] = 2.0f;         /* w^t */
    float *h = f.client_vecs, *mu = f.client_vecs + 2; /* h_i = 0 */
    mu[0] = 0.1f, mu[1] = 0.0f;
    f.server_vecs[0] = 0.0f, f.server_vecs[1] = 0.2f;  /* s */
    double loss;
    CHECK_OK(f.round.method->step->step(&f.c, quad_grad, &f.c, &loss));
    /* g = [1, 2]; g' = g - mu - s = [0.9, 1.8]; eps = 0.1 [1, 2]/sqrt 5; mu += eps - s;
     * g_s = w + eps; r = g_s + 0.1 (h - w^t); d = r + 0.1 w; w -= 0.1 d */
    const double e0 = 0.1 / sqrt(5.0), e1 = 0.2 / sqrt(5.0);
    CHECK_NEAR(mu[0], 0.1 + e0, 1e-7);
    CHECK_NEAR(mu[1], e1 - 0.2, 1e-7);
    const double w0 = 1.0 - 0.1 * ((1.0 + e0) - 0.1 * 1.0 + 0.1 * 1.0), w1 = 2.0 - 0.1 * ((2.0 + e1) - 0.1 * 2.0 + 0.1 * 2.0);
    CHECK_NEAR(w[0], w0, 1e-6);
    CHECK_NEAR(w[1], w1, 1e-6);
    CHECK_NEAR(f.up[algo_upload_index(&f.z, "perturb_norm")], 0.1, 1e-7);
    CHECK_OK(f.round.method->report->end(&f.c));
    CHECK_NEAR(h[0], w0 - 1.0, 1e-6); /* h_i = Delta_i */
    CHECK_NEAR(h[1], w1 - 2.0, 1e-6);
    CHECK(f.upload_vecs[0] == mu[0] && f.upload_vecs[1] == mu[1]); /* mu_i goes up */

    /* server, both clients (N = 2): client 1 ended at [0.5, 3] with mu_1 = [0.2, 0.1] */
    float w_1[2] = { 0.5f, 3.0f }, mu_1[2] = { 0.2f, 0.1f }, up0[4], up1[4], sum_h[2] = { 0, 0 }, next[2];
    memcpy(up0, w, 8), memcpy(up0 + 2, f.upload_vecs, 8);
    memcpy(up1, w_1, 8), memcpy(up1 + 2, mu_1, 8);
    AlgoUpload u[2] = { { 0, 10, 1, 0, NULL, up0, up0 + 2 }, { 1, 30, 1, 0, NULL, up1, up1 + 2 } };
    const float cur[2] = { 1.0f, 2.0f };
    AlgoServerCtx s = { .round = 0, .rounds = 5, .n_clients = 2, .n_selected = 2, .n_params = 2, .n_state = 2,
                        .options = f.round.options, .setup = &f.setup, .sizes = &f.z, .lr = 0.1, .current = cur,
                        .server_vecs = f.server_vecs, .server_private = sum_h };
    double p[2];
    CHECK_OK(f.round.method->weights->weights(&s, u, 2, p));
    CHECK(p[0] == p[1]); /* uniform by default */
    server_update(f.round.method, &s, u, 2, p, next);
    const double H0 = (w0 - 1.0) + (0.5 - 1.0), H1 = (w1 - 2.0) + (3.0 - 2.0);
    CHECK_NEAR(sum_h[0], H0, 1e-6);
    CHECK_NEAR(sum_h[1], H1, 1e-6);
    CHECK_NEAR(next[0], (w0 + 0.5) / 2 + H0 / 2, 1e-6);
    CHECK_NEAR(next[1], (w1 + 3.0) / 2 + H1 / 2, 1e-6);
    const double mb0 = (0.1 + e0 + 0.2) / 2, mb1 = (e1 - 0.2 + 0.1) / 2, mn = sqrt(mb0 * mb0 + mb1 * mb1);
    CHECK_NEAR(f.server_vecs[0], 0.1 * mb0 / mn, 1e-6); /* s = rho mu_bar / ||mu_bar|| */
    CHECK_NEAR(f.server_vecs[1], 0.1 * mb1 / mn, 1e-6);
    fake_free(&f);
}

/* MoFedSAM's first rounds as FL-Simulator's code runs them (docs/methods/sam.md §4): round 0 has mom = 0, so the step is alpha lr
 * g_s (not lr g_s); the server then sets mom = -Delta_bar / (K_bar lr), K_bar = E n_0 / B from client 0's size
 * (k_norm = code; not the round's mean steps), and w^1 = w^0 + Delta_bar (uniform); round 1 steps along
 * alpha g_s + (1 - alpha) mom */
static void test_mofedsam_first_rounds(void)
{
    float w[2] = { 1.0f, 2.0f }, gbuf[2];
    NnModel m;
    two_params(&m, w, gbuf);
    Fake f;
    fake_init(&f, "mofedsam", &m);
    f.global[0] = 1.0f, f.global[1] = 2.0f;
    double loss;
    CHECK_OK(f.round.method->step->step(&f.c, quad_grad, &f.c, &loss));
    /* g = w, eps = 0.1 g/||g||, g_s = w + eps; w <- w - lr alpha g_s with lr 0.1, alpha 0.1 */
    const double e0 = 0.1 / sqrt(5.0), e1 = 0.2 / sqrt(5.0);
    const double w0 = 1.0 - 0.1 * 0.1 * (1.0 + e0), w1 = 2.0 - 0.1 * 0.1 * (2.0 + e1);
    CHECK_NEAR(w[0], w0, 1e-7);
    CHECK_NEAR(w[1], w1, 1e-7);
    /* server: client 0 (8 samples) moved to w, client 1 (20 samples) to [0.5, 3]; E = 1, B = 4: K_bar = 8/4 = 2 */
    float w_1[2] = { 0.5f, 3.0f }, next[2];
    const float cur[2] = { 1.0f, 2.0f };
    const int64_t sizes[2] = { 8, 20 };
    AlgoUpload u[2] = { { 0, 8, 2, 0, NULL, w, NULL }, { 1, 20, 5, 0, NULL, w_1, NULL } };
    AlgoServerCtx s = { .round = 0, .rounds = 5, .n_clients = 2, .n_selected = 2, .n_params = 2, .n_state = 2,
                        .options = f.round.options, .setup = &f.setup, .sizes = &f.z, .lr = 0.1, .current = cur,
                        .server_vecs = f.server_vecs, .client_sizes = sizes };
    double p[2];
    CHECK_OK(f.round.method->weights->weights(&s, u, 2, p));
    server_update(f.round.method, &s, u, 2, p, next);
    const double d0 = ((w0 - 1.0) + (0.5 - 1.0)) / 2, d1 = ((w1 - 2.0) + (3.0 - 2.0)) / 2;
    CHECK_NEAR(next[0], 1.0 + d0, 1e-6);
    CHECK_NEAR(next[1], 2.0 + d1, 1e-6);
    CHECK_NEAR(f.server_vecs[0], -d0 / (2 * 0.1), 1e-5);
    CHECK_NEAR(f.server_vecs[1], -d1 / (2 * 0.1), 1e-5);
    /* round 1 from w^1: r = alpha g_s + (1 - alpha) mom */
    const float mom[2] = { f.server_vecs[0], f.server_vecs[1] };
    w[0] = next[0], w[1] = next[1];
    f.global[0] = next[0], f.global[1] = next[1];
    f.round.t = 1, f.c.state.step = 0;
    CHECK_OK(f.round.method->step->step(&f.c, quad_grad, &f.c, &loss));
    const double n = sqrt((double)next[0] * next[0] + (double)next[1] * next[1]);
    const double gs0 = next[0] * (1 + 0.1 / n), gs1 = next[1] * (1 + 0.1 / n);
    CHECK_NEAR(w[0], next[0] - 0.1 * (0.1 * gs0 + 0.9 * mom[0]), 1e-6);
    CHECK_NEAR(w[1], next[1] - 0.1 * (0.1 * gs1 + 0.9 * mom[1]), 1e-6);
    fake_free(&f);
}

static void test_fedspeed_two_params(void)
{
    float w[2] = { 1.0f, 2.0f }, gbuf[2];
    NnModel m;
    two_params(&m, w, gbuf);
    Fake f;
    fake_init(&f, "fedspeed", &m);
    f.global[0] = 1.0f, f.global[1] = 2.0f;
    float *h = f.client_vecs;
    h[0] = 0.5f, h[1] = -1.0f; /* from an earlier round */
    double loss;
    CHECK_OK(f.round.method->step->step(&f.c, quad_grad, &f.c, &loss));
    /* eps = 0.1 g/||g||, g = w; g_s = w + eps; r = g_s + 0.1 (h - w^t); d = r + 0.1 w */
    const double e0 = 0.1 / sqrt(5.0), e1 = 0.2 / sqrt(5.0);
    const double w0 = 1.0 - 0.1 * ((1.0 + e0) + 0.1 * (0.5 - 1.0) + 0.1 * 1.0);
    const double w1 = 2.0 - 0.1 * ((2.0 + e1) + 0.1 * (-1.0 - 2.0) + 0.1 * 2.0);
    CHECK_NEAR(w[0], w0, 1e-6);
    CHECK_NEAR(w[1], w1, 1e-6);
    CHECK_NEAR(loss, 2.5, 1e-6); /* the unperturbed loss */
    CHECK_OK(f.round.method->report->end(&f.c));
    CHECK_NEAR(h[0], 0.5 + (w0 - 1.0), 1e-6);
    CHECK_NEAR(h[1], -1.0 + (w1 - 2.0), 1e-6);
    /* server: N = 3 clients, 2 selected; the running sum of h held [0.5, -1] */
    float w_1[2] = { 0.0f, 1.0f }, sum_h[2] = { 0.5f, -1.0f }, next[2];
    AlgoUpload u[2] = { { 0, 10, 1, 0, NULL, w, NULL }, { 2, 10, 1, 0, NULL, w_1, NULL } };
    const float cur[2] = { 1.0f, 2.0f };
    AlgoServerCtx s = { .n_clients = 3, .n_selected = 2, .n_params = 2, .n_state = 2, .options = f.round.options,
                        .setup = &f.setup,
                        .sizes = &f.z, .lr = 0.1, .current = cur, .server_private = sum_h };
    double p[2] = { 1, 1 };
    server_update(f.round.method, &s, u, 2, p, next);
    const double H0 = 0.5 + (w0 - 1.0) + (0.0 - 1.0), H1 = -1.0 + (w1 - 2.0) + (1.0 - 2.0);
    CHECK_NEAR(sum_h[0], H0, 1e-6);
    CHECK_NEAR(sum_h[1], H1, 1e-6);
    CHECK_NEAR(next[0], (w0 + 0.0) / 2 + H0 / 3, 1e-6); /* mean over all N = 3 clients */
    CHECK_NEAR(next[1], (w1 + 1.0) / 2 + H1 / 3, 1e-6);
    fake_free(&f);
}

/* ---- FedGAMMA: SCAFFOLD's identities (docs/methods/sam.md §5) ------------------------------------------------------- */

/* 3 clients, rounds {0, 1} then {1, 2}: c_i <- c_i - c - Delta_i/(K eta); c = (1/N) sum_i c_i after each
 * round, c_i of clients not selected unchanged; K = K_bar = E n_0/B (code) */
static void test_fedgamma_control_variates(void)
{
    float w[2], gbuf[2];
    NnModel m;
    two_params(&m, w, gbuf);
    Fake f;
    fake_init(&f, "fedgamma", &m);
    const AlgoMethod *meth = f.round.method;
    int64_t sizes[3] = { 8, 20, 12 };
    float ci[3][2] = { { 0 } }, cv[2] = { 0, 0 }, next[2];
    const float cur[2] = { 0.5f, -0.5f };
    AlgoServerCtx s = { .n_clients = 3, .n_params = 2, .n_state = 2, .options = f.round.options, .setup = &f.setup,
                        .sizes = &f.z,
                        .lr = 0.1, .current = cur, .server_vecs = cv, .server_scalars = f.server_scalars,
                        .client_sizes = sizes };
    CHECK_OK(meth->server_init(&s, next));
    CHECK_NEAR(f.server_scalars[0], 1.0 * 8 / 4, 1e-12); /* E n_0 / B */
    const int rounds[2][2] = { { 0, 1 }, { 1, 2 } };
    const float finals[3][2] = { { 0.25f, -0.25f }, { 0.75f, -1.0f }, { 0.0f, 0.0f } };
    for (int r = 0; r < 2; r++) {
        float states[2][2];
        AlgoUpload u[2];
        float before[3][2];
        memcpy(before, ci, sizeof ci);
        for (int i = 0; i < 2; i++) {
            const int k = rounds[r][i];
            memcpy(f.client_vecs, ci[k], 8);
            memcpy(f.server_vecs, cv, 8);
            memcpy(f.global, cur, 8);
            memcpy(w, finals[k], 8);
            f.c.state.step = 3; /* steps taken */
            CHECK_OK(meth->report->end(&f.c));
            for (int j = 0; j < 2; j++) {
                const double want = (double)before[k][j] - cv[j] - ((double)finals[k][j] - cur[j]) / (2.0 * 0.1);
                CHECK_NEAR(f.client_vecs[j], want, 1e-5);
            }
            memcpy(ci[k], f.client_vecs, 8);
            memcpy(states[i], finals[k], 8);
            u[i] = (AlgoUpload){ k, sizes[k], 3, 0, NULL, states[i], NULL };
        }
        s.round = r;
        double p[2] = { 1, 1 };
        server_update(meth, &s, u, 2, p, next);
        for (int j = 0; j < 2; j++) {
            CHECK_NEAR(cv[j], (ci[0][j] + ci[1][j] + ci[2][j]) / 3.0, 1e-5); /* c = mean of all c_i */
            CHECK_NEAR(next[j], (states[0][j] + states[1][j]) / 2.0, 1e-6);
        }
        for (int k = 0; k < 3; k++)
            if (k != rounds[r][0] && k != rounds[r][1]) CHECK(memcmp(ci[k], before[k], 8) == 0);
    }
    CHECK(fabsf(cv[0]) > 0.1f);
    /* the correction is SCAFFOLD's: grad += c - c_i */
    float grad[2] = { 1.0f, 1.0f };
    memcpy(f.server_vecs, cv, 8);
    memcpy(f.client_vecs, ci[1], 8);
    meth->correction->correct(&f.c, grad);
    CHECK_NEAR(grad[0], 1.0 + cv[0] - ci[1][0], 1e-6);
    fake_free(&f);
}

/* ---- FedLESAM: the fixed perturbation of a round (docs/methods/sam.md §8) ------------------------------------------- */

/* linear 3 -> 2 -> 2: tensors of 6, 2, 4, 2 parameters (J = 4) */
static void two_layer_model(NnModel *m)
{
    CHECK_OK(nn_model_init(m, "two", (NnShape){ 3, 1, 1 }, 4));
    int x = nn_flatten(m, m->input);
    x = nn_linear(m, x, 2, 1, NN_ACT_RELU);
    int y = nn_linear(m, x, 2, 1, NN_ACT_NONE);
    CHECK_OK(nn_model_finalize(m, y, x, 2));
    nn_model_init_params(m, 3);
}

static void test_fedlesam_perturbation(void)
{
    NnModel m;
    two_layer_model(&m);
    CHECK(m.n_params == 14);
    Fake f;
    fake_init(&f, "fedlesam", &m);
    const AlgoMethod *meth = f.round.method;
    CHECK(f.z.client_vectors == 1 && f.z.server_vectors == 0 && f.z.work_vectors == 2);
    float d[14];
    for (int j = 0; j < 14; j++) {
        f.global[j] = (float)(0.1 * j);
        d[j] = (float)((j % 3) - 1) * (float)(j + 1) * 0.01f;
        f.client_vecs[j] = f.global[j] + d[j]; /* w_old */
    }
    /* first participation: no perturbation */
    f.round.has_state = 0;
    CHECK_OK(meth->report->begin(&f.c));
    for (int j = 0; j < 14; j++) CHECK(f.work[j] == 0.0f);
    CHECK(f.up[algo_upload_index(&f.z, "perturb_norm")] == 0.0);
    /* intended: rho (w_old - w^t)/||w_old - w^t|| */
    f.round.has_state = 1;
    CHECK_OK(meth->report->begin(&f.c));
    double n = 0;
    for (int j = 0; j < 14; j++) n += (double)d[j] * d[j];
    n = sqrt(n);
    for (int j = 0; j < 14; j++) CHECK_NEAR(f.work[j], 0.1 * d[j] / n, 1e-7);
    CHECK_NEAR(f.up[algo_upload_index(&f.z, "perturb_norm")], 0.1, 1e-7);
    /* official: tensor j gets rho d[j]/(sum_{j<4} |d[j]| + 1e-7) */
    fake_set(&f, "compat", 1); /* official */
    CHECK_OK(meth->report->begin(&f.c));
    const double l1 = fabs(d[0]) + fabs(d[1]) + fabs(d[2]) + fabs(d[3]);
    const int first[4] = { 0, 6, 8, 12 }, count[4] = { 6, 2, 4, 2 };
    for (int t = 0; t < 4; t++)
        for (int j = first[t]; j < first[t] + count[t]; j++) CHECK_NEAR(f.work[j], 0.1 * d[t] / (l1 + 1e-7), 1e-7);
    /* code mode: eps = -rho gu/||gu||, gu the broadcast last global step */
    fake_set(&f, "mode", 1); /* code */
    fake_set(&f, "compat", 0);
    algo_sizes(meth, &f.setup, &f.z);
    CHECK(f.z.client_vectors == 0 && f.z.server_vectors == 1);
    for (int j = 0; j < 14; j++) f.server_vecs[j] = -d[j];
    CHECK_OK(meth->report->begin(&f.c));
    for (int j = 0; j < 14; j++) CHECK_NEAR(f.work[j], 0.1 * d[j] / n, 1e-7);
    /* paper mode remembers w^t */
    fake_set(&f, "mode", 0); /* paper */
    algo_sizes(meth, &f.setup, &f.z);
    CHECK_OK(meth->report->end(&f.c));
    CHECK(memcmp(f.client_vecs, f.global, 14 * sizeof(float)) == 0);
    fake_free(&f);
    nn_model_free(&m);
}

/* ---- the radius hooks ------------------------------------------------------------------------------ */

static double progressive(const AlgoSetup *s, AlgoOptions o, int round)
{
    return sam_radius_of(o)->rho * sqrt((round + 1.0) / s->rounds); /* FedISM+-like rho(t) */
}

static double halve_odd(const AlgoClientCtx *c, double rho) { return c->round->client % 2 ? rho / 2 : rho; }

static double broken(const AlgoSetup *s, AlgoOptions o, int round)
{
    return round == 3 ? NAN : sam_radius_of(o)->rho;
}

static void test_radius_hooks(void)
{
    NnModel a;
    bn_model(&a);
    const AlgoMethod *fedsam = algo_find("fedsam");
    AlgoLocalStep step = { .step = algo_sam_step, .round_radius = progressive, .client_radius = halve_odd };
    AlgoMethod meth = *fedsam;
    meth.step = &step;
    Fake f;
    fake_init(&f, "fedsam", &a);
    f.round.method = &meth;
    f.round.t = 3, f.round.client = 1;
    CHECK_NEAR(algo_sam_radius(&f.c), 0.1 * sqrt(4.0 / 5.0) / 2, 1e-15);
    f.round.client = 2;
    CHECK_NEAR(algo_sam_radius(&f.c), 0.1 * sqrt(4.0 / 5.0), 1e-15);
    float *at[2] = { malloc(a.n_state * 4), malloc(a.n_state * 4) };
    Batch ba = { .m = &a, .c = &f.c, .seen = { at[0], at[1] } };
    batch_fill(&ba, 0);
    double loss;
    CHECK_OK(algo_sam_step(&f.c, batch_grad, &ba, &loss));
    CHECK_NEAR(dist(at[1], at[0], a.n_params), 0.1 * sqrt(4.0 / 5.0), 1e-6); /* the step uses the hooks */
    CHECK_OK(meth.validate(&meth, &f.setup));
    step.round_radius = broken;
    fh_error_clear();
    CHECK(meth.validate(&meth, &f.setup) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "rho") != NULL);
    fh_error_clear();
    fake_set(&f, "rho", -1);
    step.round_radius = NULL;
    CHECK(meth.validate(&meth, &f.setup) == FH_ERR_USAGE);
    fh_error_clear();
    free(at[0]), free(at[1]);
    fake_free(&f);
    nn_model_free(&a);
}

/* GSAM's lr-proportional radius (docs/methods/sam.md §2), hand-computed: lr 0.1 decaying by 0.9 over 4 rounds (0.1, 0.09, 0.081,
 * 0.0729), rho = 0.05, rho_min = 0.01: rho_t = 0.01 + 0.04 (lr_t - 0.0729)/0.0271; the step perturbs by it */
static void test_gsam_lr_radius(void)
{
    NnModel a;
    bn_model(&a);
    Fake f;
    fake_init(&f, "fedsam", &a);
    const AlgoMethod *meth = f.round.method;
    /* the schedule's keys are one part, declared once, in every row with a choice of perturbation */
    const AlgoOption *rmin = algo_option_find(meth, "rho_min");
    CHECK(rmin && rmin == algo_option_find(algo_find("mofedsam"), "rho_min") &&
          rmin == algo_option_find(algo_find("fedspeed"), "rho_min"));
    f.setup.lr = 0.1, f.setup.lr_decay = 0.9, f.setup.rounds = 4;
    fake_set(&f, "rho", 0.05);
    fake_set(&f, "rho_min", 0.01);
    for (int t = 0; t < 4; t++) CHECK(algo_sam_lr_radius(&f.setup, f.round.options, t) == 0.05); /* constant: rho */
    fake_set(&f, "rho_schedule", 1); /* lr */
    const double expect[4] = { 0.05, 0.01 + 0.04 * 0.0171 / 0.0271, 0.01 + 0.04 * 0.0081 / 0.0271, 0.01 };
    for (int t = 0; t < 4; t++) CHECK_NEAR(algo_sam_lr_radius(&f.setup, f.round.options, t), expect[t], 1e-12);
    f.setup.lr_decay = 1.0; /* no schedule to follow: rho */
    CHECK(algo_sam_lr_radius(&f.setup, f.round.options, 2) == 0.05);
    f.setup.lr_decay = 0.9;
    /* the step's perturbation has the round's radius */
    f.round.t = 2;
    CHECK_NEAR(algo_sam_radius(&f.c), expect[2], 1e-12);
    float *at[2] = { malloc(a.n_state * 4), malloc(a.n_state * 4) };
    Batch ba = { .m = &a, .c = &f.c, .seen = { at[0], at[1] } };
    batch_fill(&ba, 0);
    double loss;
    CHECK_OK(algo_sam_step(&f.c, batch_grad, &ba, &loss));
    CHECK_NEAR(dist(at[1], at[0], a.n_params), expect[2], 1e-6);
    /* validation: rho_min above rho is refused, naming both keys */
    CHECK_OK(meth->validate(meth, &f.setup));
    fake_set(&f, "rho_min", 0.06);
    fh_error_clear();
    CHECK(meth->validate(meth, &f.setup) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "rho_min") != NULL && strstr(fh_error_message(), "rho =") != NULL);
    fh_error_clear();
    free(at[0]), free(at[1]);
    fake_free(&f);
    nn_model_free(&a);
}

/* ---- the sharpness diagnostic (docs/methods/sam.md §12 definitions) ------------------------------------------------ */

static void test_sharpness(void)
{
    NnModel a;
    bn_model(&a);
    Batch b = { .m = &a };
    batch_fill(&b, 2);
    float *work = calloc((size_t)algo_sam_sharpness_work(&a), sizeof(float));
    float *state = malloc(a.n_state * 4), *copy = malloc(a.n_state * 4);
    memcpy(state, a.state, a.n_state * 4);
    memcpy(copy, a.state, a.n_state * 4);
    double l0, l1, r0, r1;
    CHECK_OK(algo_sam_sharpness(&a, state, b.x, b.y, b.count, 0.0, work, &r0, &r1));
    CHECK(r0 == r1); /* rho = 0: no sharpness */
    CHECK_OK(algo_sam_sharpness(&a, state, b.x, b.y, b.count, 0.05, work, &l0, &l1));
    CHECK(l0 == r0);
    CHECK(l1 > l0); /* the first-order ascent raises the loss */
    CHECK(memcmp(state, copy, a.n_state * 4) == 0 && memcmp(a.state, copy, a.n_state * 4) == 0);
    CHECK(a.training == 1);
    /* L0 is the eval-mode mean cross-entropy; chunks of max_batch give the same numbers */
    nn_model_set_training(&a, 0);
    CHECK_OK(nn_model_forward(&a, b.x, b.count));
    float dl[8 * 3] = { 0 };
    const double direct = nn_softmax_xent(dl, NULL, nn_model_logits(&a), b.y, NULL, NULL, b.count, 3);
    nn_model_set_training(&a, 1);
    CHECK_NEAR(l0, direct, 1e-6);
    free(work), free(state), free(copy);
    nn_model_free(&a);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_sam_rho0_equals_sgd);
    RUN(test_fedism_perturb_none_is_sgd);
    RUN(test_sam_perturbation_and_restore);
    RUN(test_asam_perturbation);
    RUN(test_gsam);
    RUN(test_fedsmoo_two_params);
    RUN(test_fedspeed_two_params);
    RUN(test_mofedsam_first_rounds);
    RUN(test_fedgamma_control_variates);
    RUN(test_fedlesam_perturbation);
    RUN(test_radius_hooks);
    RUN(test_gsam_lr_radius);
    RUN(test_sharpness);
    return test_summary();
}
