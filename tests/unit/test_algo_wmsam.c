/* The 'wmsam' method family's parts called directly (docs/methods/sam.md §9 FedWMSAM, 15 A-FedSAM): FedWMSAM's
 * server round (s_k, alpha_{r+1}, c, mom_{r+1}, x_{r+1}) and its personalised momentum and blend against
 * hand-computed 2-parameter examples; its step (no perturbation at b = 0, then rho delta/||delta|| towards the
 * running target x_r + b mom_k, or the official code's negated per-tensor one; exact restore); A-FedSAM's mu_t
 * recurrence, its ema teacher and its distillation term (teacher logits in the first pass, the KL in the second).
 * usage: build/tests/test_algo_wmsam [test_name] */
#include "test.h"

#include <stdlib.h>

#include "fake_client.h"
#include "server_step.h"

/* linear 3 -> 2 -> 2: tensors of 6, 2, 4, 2 parameters (J = 4), no buffers */
static void two_layer_model(NnModel *m)
{
    CHECK_OK(nn_model_init(m, "two", (NnShape){ 3, 1, 1 }, 4));
    int x = nn_flatten(m, m->input);
    x = nn_linear(m, x, 2, 1, NN_ACT_RELU);
    int y = nn_linear(m, x, 2, 1, NN_ACT_NONE);
    CHECK_OK(nn_model_finalize(m, y, x, 2));
    nn_model_init_params(m, 3);
}

/* ---- FedWMSAM: the server round (docs/methods/sam.md §9) --------------------------------------------------------------- */

/* N = 3 clients, 2 selected; K_bar = E n_0/B = 8/4 = 2, eta_r = 0.5, gamma = 0.998.
 * mom_r = (1, 0); Delta_0 = (-1, 0): cos = -1, s_0 = 0; Delta_2 = (0, 2): cos = 0, s_2 = 1; mean 0.5 (from the
 * uploaded dot(Delta_k, mom_r) and ||Delta_k||^2):
 *   alpha = 0.99 0.2 + 0.01 0.5 = 0.203
 * c = (0.1, -0.2): dc_k = -c - Delta_k/(K eta) = -c - Delta_k:  dc_0 = (0.9, 0.2), dc_2 = (-0.1, -1.8);
 *   c += (dc_0 + dc_2)/3 = (0.1 + 0.8/3, -0.2 - 1.6/3)
 * Delta_bar = (-0.5, 1) (uniform): x = (1, 1) + 2 Delta_bar = (0, 3) (eta_g = 2);
 *   mom = -Delta_bar/(K eta) gamma = (0.5, -1) 0.998 */
static void test_wmsam_server_round(void)
{
    float w[2], gbuf[2];
    NnModel m;
    two_params(&m, w, gbuf);
    Fake f;
    fake_init(&f, "fedwmsam", &m);
    const AlgoMethod *meth = f.round.method;
    CHECK(f.z.client_vectors == 1 && f.z.server_vectors == 2 && f.z.server_scalars == 2 && f.z.work_vectors == 4);
    CHECK(f.z.shown_server_scalar == 1 && algo_upload_index(&f.z, "perturb_norm") == 0 &&
          algo_upload_index(&f.z, "grad_norm") == 1);
    CHECK(f.z.upload_scalars == 4 && algo_upload_index(&f.z, "mom_dot") == 2 && algo_upload_index(&f.z, "delta_sq") == 3);
    fake_set(&f, "eta_g", 2.0);
    int64_t sizes[3] = { 8, 20, 12 };
    float sv[4] = { 0 }, next[2];
    const float cur[2] = { 1.0f, 1.0f };
    AlgoServerCtx s = { .n_clients = 3, .n_params = 2, .n_state = 2, .options = f.round.options, .setup = &f.setup,
                        .sizes = &f.z,
                        .lr = 0.5, .current = cur, .server_vecs = sv, .server_scalars = f.server_scalars,
                        .client_sizes = sizes, .scratch = test_scratch(f.z.server_scratch) };
    CHECK_OK(meth->server_init(&s, next));
    CHECK_NEAR(f.server_scalars[0], 2.0, 1e-15);
    CHECK(f.server_scalars[1] == 0.1); /* alpha_0 */
    f.server_scalars[1] = 0.2;
    sv[0] = 0.1f, sv[1] = -0.2f; /* c */
    sv[2] = 1.0f, sv[3] = 0.0f;  /* mom_r */
    const float y0[2] = { 0.0f, 1.0f }, y2[2] = { 1.0f, 3.0f };
    double a0[4] = { 0, 0, -1.0, 1.0 }, a2[4] = { 0, 0, 0.0, 4.0 }; /* dot(Delta_k, mom_r), ||Delta_k||^2 */
    AlgoUpload u[2] = { { 0, 8, 3, 0, a0, y0, NULL }, { 2, 12, 5, 0, a2, y2, NULL } };
    double p[2];
    CHECK_OK(meth->weights->weights(&s, u, 2, p));
    CHECK(p[0] == p[1]); /* uniform by default */
    CHECK_OK(server_step(meth, &s, u, 2, p, next));
    CHECK_NEAR(f.server_scalars[1], 0.99 * 0.2 + 0.01 * 0.5, 1e-15);
    CHECK_NEAR(sv[0], 0.1 + 0.8 / 3, 1e-6);
    CHECK_NEAR(sv[1], -0.2 - 1.6 / 3, 1e-6);
    CHECK_NEAR(next[0], 0.0, 1e-7);
    CHECK_NEAR(next[1], 3.0, 1e-7);
    CHECK_NEAR(sv[2], 0.5 * 0.998, 1e-7);
    CHECK_NEAR(sv[3], -1.0 * 0.998, 1e-7);
    CHECK(f.server_scalars[0] == 2.0); /* K_bar untouched */

    /* k_norm = actual: mom with the round's mean steps (3 + 5)/2 = 4 (c_k with each client's own, FedGAMMA's) */
    fake_set(&f, "k_norm", 1);
    sv[2] = 1.0f, sv[3] = 0.0f;
    CHECK_OK(server_step(meth, &s, u, 2, p, next));
    CHECK_NEAR(sv[2], 0.5 / (4 * 0.5) * 0.998, 1e-7);
    fake_set(&f, "k_norm", 0);

    /* mom_r = 0 (round 0): every s_k = 0, clipped to 0.1; alpha_0 = 0.1 stays 0.1 */
    f.server_scalars[1] = 0.1;
    sv[2] = sv[3] = 0.0f;
    CHECK_OK(server_step(meth, &s, u, 2, p, next));
    CHECK_NEAR(f.server_scalars[1], 0.1, 1e-16);
    /* every client along mom: s_k = 2, clipped to 0.9 */
    const float ya[2] = { 2.0f, 1.0f }, yb[2] = { 4.0f, 1.0f };
    double aa[4] = { 0, 0, 3.0, 1.0 }, ab[4] = { 0, 0, 9.0, 9.0 };
    AlgoUpload along[2] = { { 0, 8, 3, 0, aa, ya, NULL }, { 2, 12, 5, 0, ab, yb, NULL } };
    sv[2] = 3.0f, sv[3] = 0.0f;
    f.server_scalars[1] = 0.5;
    CHECK_OK(server_step(meth, &s, along, 2, p, next));
    CHECK_NEAR(f.server_scalars[1], 0.99 * 0.5 + 0.01 * 0.9, 1e-15);
    /* alpha_lambda = 0 freezes alpha, exactly */
    fake_set(&f, "alpha_lambda", 0.0);
    f.server_scalars[1] = 1.0;
    CHECK_OK(server_step(meth, &s, u, 2, p, next));
    CHECK(f.server_scalars[1] == 1.0);
    fake_free(&f);
}

/* ---- FedWMSAM: personalised momentum and the blend (docs/methods/sam.md §9) --------------------------------------------- */

/* alpha = 0.2, c = (1, 2), c_k = (0, 1), mom_r = (0.5, -0.5): mom_k = mom_r + 0.25 (c - c_k) = (0.75, -0.25);
 * r = 0.2 g + 0.8 mom_k; alpha = 1: r = g + (c - c_k) (SCAFFOLD) */
static void test_wmsam_personalised_momentum(void)
{
    float w[2] = { 0.3f, 0.4f }, gbuf[2];
    NnModel m;
    two_params(&m, w, gbuf);
    Fake f;
    fake_init(&f, "fedwmsam", &m);
    const AlgoMethod *meth = f.round.method;
    f.global[0] = 0.3f, f.global[1] = 0.4f;
    f.server_scalars[1] = 0.2;
    f.server_vecs[0] = 1.0f, f.server_vecs[1] = 2.0f;  /* c */
    f.server_vecs[2] = 0.5f, f.server_vecs[3] = -0.5f; /* mom_r */
    f.client_vecs[0] = 0.0f, f.client_vecs[1] = 1.0f;  /* c_k */
    CHECK_OK(meth->report->begin(&f.c));
    CHECK_NEAR(f.work[0], 0.75, 1e-7);
    CHECK_NEAR(f.work[1], -0.25, 1e-7);
    CHECK(f.work[2] == 0.3f && f.work[3] == 0.4f); /* target_0 = x_r */
    float grad[2] = { 1.0f, -2.0f };
    meth->correction->correct(&f.c, grad);
    CHECK_NEAR(grad[0], 0.2 * 1.0 + 0.8 * 0.75, 1e-6);
    CHECK_NEAR(grad[1], 0.2 * -2.0 + 0.8 * -0.25, 1e-6);
    /* (1 - alpha) mom_k = (1 - alpha) mom_r + alpha (c - c_k) (docs/methods/sam.md §9) */
    CHECK_NEAR(grad[0], 0.2 * (1.0 + 1.0) + 0.8 * 0.5, 1e-6);
    f.server_scalars[1] = 1.0;
    CHECK_OK(meth->report->begin(&f.c));
    CHECK(isfinite(f.work[0]) && isfinite(f.work[1]));
    float g1[2] = { 1.0f, -2.0f };
    meth->correction->correct(&f.c, g1);
    CHECK(g1[0] == 1.0f + (1.0f - 0.0f) && g1[1] == -2.0f + (2.0f - 1.0f));
    /* the end of the round: c_k <- c_k - c - Delta_k/(K_bar eta) */
    f.server_scalars[0] = 4.0;
    w[0] = 0.1f, w[1] = 0.8f;
    f.c.state.step = 3;
    f.round.lr = 0.5;
    CHECK_OK(meth->report->end(&f.c));
    CHECK_NEAR(f.client_vecs[0], 0.0 - 1.0 - (0.1 - 0.3) / 2.0, 1e-6);
    CHECK_NEAR(f.client_vecs[1], 1.0 - 2.0 - (0.8 - 0.4) / 2.0, 1e-6);
    /* and uploads Delta_k = (-0.2, 0.4)'s dot with mom_r = (0.5, -0.5) and its squared norm, for the server's s_k */
    const double d0 = (double)0.1f - (double)0.3f, d1 = (double)0.8f - (double)0.4f;
    CHECK(f.up[2] == d0 * 0.5 + d1 * -0.5 && f.up[3] == d0 * d0 + d1 * d1);
    fake_free(&f);
}

/* ---- FedWMSAM: the momentum-guided perturbation (docs/methods/sam.md §9) -------------------------------------------------- */

/* a quadratic loss 0.5 ||w - a||^2: grad = w - a; records the weights the gradient was taken at */
typedef struct {
    AlgoClientCtx *c;
    float seen[14], a[14];
    int calls;
} Quad;

static int quad_grad(void *env, double *loss)
{
    Quad *q = env;
    NnModel *m = q->c->model;
    memcpy(q->seen, m->state, sizeof q->seen);
    *loss = 0.0;
    for (int j = 0; j < 14; j++) {
        m->grad[j] = m->state[j] - q->a[j];
        *loss += 0.5 * (double)m->grad[j] * m->grad[j];
    }
    q->calls++;
    CHECK(q->c->state.grad_pure == 1);
    return FH_OK;
}

static void test_wmsam_step(void)
{
    NnModel m;
    two_layer_model(&m);
    CHECK(m.n_params == 14 && m.n_state == 14);
    for (int compat = 0; compat < 2; compat++) {
        Fake f;
        fake_init(&f, "fedwmsam", &m);
        fake_set(&f, "compat", compat);
        fake_set(&f, "rho", 0.05);
        const AlgoMethod *meth = f.round.method;
        Quad q = { .c = &f.c };
        float x0[14], momk[14];
        for (int j = 0; j < 14; j++) {
            x0[j] = f.global[j] = m.state[j] = (float)(0.1 * j - 0.5);
            q.a[j] = (float)((j % 4) * 0.2);
            f.server_vecs[14 + j] = (float)(0.01 * ((j % 3) - 1)); /* mom_r; c = c_k = 0: mom_k = mom_r */
        }
        f.server_scalars[1] = 0.3;
        CHECK_OK(meth->report->begin(&f.c));
        memcpy(momk, f.work, sizeof momk);
        /* b = 0: x_0 = target_0, no perturbation */
        double loss;
        f.c.state.step = 0;
        CHECK_OK(meth->step->step(&f.c, quad_grad, &q, &loss));
        CHECK(memcmp(q.seen, x0, sizeof x0) == 0);
        CHECK(f.up[0] == 0.0);
        float x1[14], r[14];
        for (int j = 0; j < 14; j++) r[j] = 0.3f * (x0[j] - q.a[j]) + 0.7f * momk[j];
        nn_clip_grad_norm(r, 14, 10.0f);
        for (int j = 0; j < 14; j++) {
            x1[j] = x0[j] - 0.1f * r[j];
            CHECK_NEAR(m.state[j], x1[j], 1e-6);
        }
        memcpy(x1, m.state, sizeof x1);
        /* b = 1: delta = x_r + mom_k - x_1 */
        f.c.state.step = 1;
        CHECK_OK(meth->step->step(&f.c, quad_grad, &q, &loss));
        double delta[14], n = 0.0, l1 = 0.0;
        for (int j = 0; j < 14; j++) {
            delta[j] = (double)x0[j] + momk[j] - x1[j];
            n += delta[j] * delta[j];
        }
        n = sqrt(n);
        for (int j = 0; j < 4; j++) l1 += fabs(delta[j]);
        const int first[4] = { 0, 6, 8, 12 }, count[4] = { 6, 2, 4, 2 };
        double eps_norm = 0.0;
        for (int t = 0; t < 4; t++)
            for (int j = first[t]; j < first[t] + count[t]; j++) {
                /* intended: towards the target; official: -rho delta[t]/(sum_{t<4} |delta[t]| + 1e-7) per tensor */
                const double eps = compat ? -0.05 * delta[t] / (l1 + 1e-7) : 0.05 * delta[j] / (n + 1e-7);
                CHECK_NEAR(q.seen[j], x1[j] + eps, 1e-6);
                eps_norm += eps * eps;
            }
        CHECK_NEAR(f.up[0], 0.5 * sqrt(eps_norm), 1e-7); /* the mean over the two steps (0, then ||eps||) */
        /* the step starts from the restored x_1 and uses the gradient at the perturbed point */
        for (int j = 0; j < 14; j++) r[j] = 0.3f * (q.seen[j] - q.a[j]) + 0.7f * momk[j];
        nn_clip_grad_norm(r, 14, 10.0f);
        for (int j = 0; j < 14; j++) CHECK_NEAR(m.state[j], x1[j] - 0.1f * r[j], 1e-6);
        /* target_2 = x_r + 2 mom_k */
        for (int j = 0; j < 14; j++) CHECK_NEAR(f.work[14 + j], (double)x0[j] + 2.0 * momk[j], 1e-6);
        CHECK(q.calls == 2);
        fake_free(&f);
    }
    nn_model_free(&m);
}

/* ---- A-FedSAM (docs/methods/sam.md §15, reconstructed) ----------------------------------------------------------------- */

/* mu_t = (1 - lambda) mu_{t-1} + lambda mu_max from mu_0 = 0, i.e. mu_max (1 - (1 - lambda)^t); the ema teacher
 * tbar <- (1 - lambda) tbar + lambda w^{t+1} from w^0 */
static void test_afedsam_schedule(void)
{
    float w[2], gbuf[2];
    NnModel m;
    two_params(&m, w, gbuf);
    Fake f;
    fake_init(&f, "afedsam", &m);
    const AlgoMethod *meth = f.round.method;
    CHECK(f.z.aux_models == 1 && f.z.server_scalars == 1 && f.z.server_vectors == 0 && f.z.shown_server_scalar == 0);
    CHECK(f.z.work_vectors == 1 && algo_upload_index(&f.z, "perturb_norm") == 0);
    fake_set(&f, "mu_max", 2.0);
    fake_set(&f, "lambda", 0.1);
    fake_set(&f, "teacher", 1); /* ema */
    algo_sizes(meth, &f.setup, &f.z);
    CHECK(f.z.server_vectors == 1);
    int64_t sizes[2] = { 8, 8 };
    float tbar[2], next[2] = { 1.0f, -1.0f };
    const float cur[2] = { 1.0f, -1.0f }, y[2] = { 3.0f, 1.0f };
    AlgoServerCtx s = { .n_clients = 2, .n_params = 2, .n_state = 2, .options = f.round.options, .setup = &f.setup,
                        .sizes = &f.z,
                        .lr = 0.1, .current = cur, .server_vecs = tbar, .server_scalars = f.server_scalars,
                        .client_sizes = sizes };
    f.server_scalars[0] = 7.0;
    CHECK_OK(meth->server_init(&s, next));
    CHECK(f.server_scalars[0] == 0.0 && tbar[0] == 1.0f && tbar[1] == -1.0f);
    AlgoUpload u = { 0, 8, 2, 0, NULL, y, NULL };
    double p = 1.0;
    for (int t = 1; t <= 30; t++) {
        CHECK_OK(server_step(meth, &s, &u, 1, &p, next));
        CHECK_NEAR(f.server_scalars[0], 2.0 * (1.0 - pow(0.9, t)), 1e-12);
    }
    CHECK(next[0] == 3.0f && next[1] == 1.0f);
    /* tbar after 30 rounds at w = y: y + 0.9^30 (w^0 - y) */
    CHECK_NEAR(tbar[0], 3.0 + pow(0.9, 30) * (1.0 - 3.0), 1e-5);
    CHECK_NEAR(tbar[1], 1.0 + pow(0.9, 30) * (-1.0 - 1.0), 1e-5);
    fake_free(&f);
}

/* the distillation term: nothing at mu_t = 0; first pass (BN statistics updated): the teacher's logits, no term;
 * second pass (statistics frozen, the perturbed one): mu T^2 KL(softmax(z_t/T) || softmax(z_s/T)) with z_t the
 * global model's logits of the batch */
static void test_afedsam_distillation(void)
{
    NnModel student, teacher, ref;
    two_layer_model(&student);
    two_layer_model(&teacher);
    two_layer_model(&ref);
    Fake f;
    fake_init(&f, "afedsam", &student);
    const AlgoMethod *meth = f.round.method;
    f.c.state.aux[0] = &teacher;
    for (int j = 0; j < 14; j++) f.global[j] = ref.state[j] = (float)(0.05 * j - 0.3);
    float x[4 * 3];
    for (int i = 0; i < 12; i++) x[i] = (float)(0.1 * i - 0.4);
    int32_t y[4] = { 0, 1, 1, 0 };
    CHECK_OK(nn_model_forward(&student, x, 4));
    const AlgoBatch b = { x, y, 4, 2, nn_model_logits(&student), nn_model_features(&student), 2 };
    float dl[8] = { 0 }, want[8] = { 0 };
    /* mu_t = 0: no term, teacher untouched */
    f.server_scalars[0] = 0.0;
    CHECK_OK(meth->report->begin(&f.c));
    CHECK(meth->batch_term->batch_term(&f.c, &b, dl, NULL) == 0.0);
    for (int i = 0; i < 8; i++) CHECK(dl[i] == 0.0f);
    /* mu_t = 0.5 */
    f.server_scalars[0] = 0.5;
    CHECK_OK(meth->report->begin(&f.c));
    CHECK(memcmp(teacher.state, f.global, 14 * sizeof(float)) == 0 && teacher.training == 0);
    student.bn_update_running = 1;
    CHECK(meth->batch_term->batch_term(&f.c, &b, dl, NULL) == 0.0);
    for (int i = 0; i < 8; i++) CHECK(dl[i] == 0.0f);
    student.bn_update_running = 0;
    const double value = meth->batch_term->batch_term(&f.c, &b, dl, NULL);
    student.bn_update_running = 1;
    nn_model_set_training(&ref, 0);
    CHECK_OK(nn_model_forward(&ref, x, 4));
    const double expect = nn_kl_distill(want, b.logits, nn_model_logits(&ref), 4.0f, 0.5f, 4, 2);
    CHECK(value == expect && value > 0.0);
    CHECK(memcmp(dl, want, sizeof dl) == 0);
    fake_free(&f);
    nn_model_free(&student), nn_model_free(&teacher), nn_model_free(&ref);
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_wmsam_server_round);
    RUN(test_wmsam_personalised_momentum);
    RUN(test_wmsam_step);
    RUN(test_afedsam_schedule);
    RUN(test_afedsam_distillation);
    return test_summary();
}
