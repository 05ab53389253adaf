/* The 'fedscam' method family's parts called directly (docs/methods/sam.md §10): the radius strictly decreases
 * in the heterogeneity score; the client's probe, pilot, alignment and radius against a hand-driven quadratic
 * "model" (full, WA); the random projection (one +-1 entry per coordinate, the same on every call, linear, inner
 * products preserved in expectation, sketch and Gaussian); k-means on hand examples; the server weights (the
 * formula, the zero-key reduction to n_i, the fallback, conflict damping inside clusters) and u_t.
 * usage: build/tests/test_algo_fedscam [test_name] */
#include "test.h"

#include <stdlib.h>

#include "../../src/algo/algo_internal.h"
#include "../../src/algo/fedscam.h"
#include "fedhet/rng.h"
#include "server_step.h"
#include "test_options.h"

enum { UP_RHO, UP_H, UP_C, UP_HADJ, UP_DNORM, UP_Z }; /* fedscam.c's upload layout */
#define P 6
#define D 4


/* ---- the radius ---------------------------------------------------------------------------------------- */

static void test_radius_decreases_in_h(void)
{
    CHECK_NEAR(fedscam_radius(0.05, 1.0, 0.0), 0.05, 0);
    double last = INFINITY;
    for (double h = 0.0; h <= 1000.0; h = h * 1.5 + 0.01) {
        const double r = fedscam_radius(0.05, 1.0, h);
        CHECK_MSG(r < last && r > 0.0, "rho(%g) = %g after %g", h, r, last);
        last = r;
    }
    CHECK_NEAR(fedscam_radius(0.05, 2.0, 1.5), 0.05 / 4.0, 1e-17);
    for (double h = 0.0; h < 10.0; h += 0.5) CHECK(fedscam_radius(0.07, 0.0, h) == 0.07); /* alpha_rho = 0 */
}

/* ---- the client hooks on a quadratic "model" ------------------------------------------------------------ */

/* probe batch b's loss 0.5 sum_j a_bj (w_j - t_bj)^2: gradient a_bj (w_j - t_bj) */
typedef struct {
    AlgoClientCtx c;
    AlgoClientRound round;
    AlgoClientServices svc;
    AlgoSetup setup;
    AlgoSizes z;
    NnModel m;
    AlgoOptionBlock options;
    double up[UP_Z + D + 2], u[D];
    float state[P], grad[P], global[P], work[P];
    double a[3][P], t[3][P];
    int batches, calls;
} Fake;

static int fake_probe(AlgoClientCtx *c, int index, const float *state, double *loss, int64_t *rows)
{
    Fake *f = c->runtime;
    f->calls++;
    *rows = 0;
    *loss = 0.0;
    if (index >= f->batches) return FH_OK;
    for (int j = 0; j < P; j++) f->grad[j] = (float)(f->a[index][j] * ((double)state[j] - f->t[index][j]));
    *rows = 4;
    return FH_OK;
}

static void fake_init(Fake *f, const char *name, double scale)
{
    memset(f, 0, sizeof *f);
    const AlgoMethod *meth = algo_find(name);
    CHECK(meth != NULL);
    const AlgoOptions o = OPTIONS(&f->options, meth, { "proj_dim", D });
    f->m.state = f->state;
    f->m.grad = f->grad;
    f->m.n_params = f->m.n_state = P;
    f->setup = (AlgoSetup){ .options = o, .n_clients = 2, .per_round = 2, .all_clients = 1, .rounds = 5, .n_params = P,
                            .n_state = P, .optimizer = "sgd", .lr = 0.1, .epochs = 1, .batch_size = 4, .seed = 11 };
    algo_sizes(meth, &f->setup, &f->z);
    CHECK(f->z.upload_scalars <= UP_Z + D + 2 && f->z.server_scalars == D);
    FhRng rng;
    fh_rng_init(&rng, 3, FH_RNG_TEST, 0, 0, 0);
    for (int j = 0; j < P; j++) f->global[j] = f->state[j] = (float)(fh_rng_uniform(&rng) - 0.5);
    for (int b = 0; b < 3; b++)
        for (int j = 0; j < P; j++) {
            f->a[b][j] = scale * (0.5 + fh_rng_uniform(&rng));
            f->t[b][j] = fh_rng_uniform(&rng) * 2.0 - 1.0;
        }
    f->batches = 3;
    f->round = (AlgoClientRound){ .lr = 0.1, .n_samples = 12, .n_params = P, .n_state = P, .setup = &f->setup,
                                  .sizes = &f->z, .options = o, .method = meth, .global = f->global,
                                  .server_scalars = f->u };
    f->svc = (AlgoClientServices){ .probe_grad = fake_probe };
    f->c = (AlgoClientCtx){ .model = &f->m, .round = &f->round, .svc = &f->svc, .runtime = f,
                            .state = { .upload_scalars = f->up, .work = f->work, .n_steps = 3 } };
}

static double vnorm(const double *x, int n)
{
    double s = 0.0;
    for (int j = 0; j < n; j++) s += x[j] * x[j];
    return sqrt(s);
}

/* h_i, the pilot at w_t + e_p, c_i against a known u, h_adj, rho_i, by hand */
static void expect_begin(Fake *f, int wa)
{
    const double rho_max = wa ? 0.0 : option_value(f->round.options, "rho_max");
    const double alpha = wa ? 0.0 : option_value(f->round.options, "alpha_rho");
    const double kappa = option_value(f->round.options, "kappa");
    double h = 0.0, g0[P], n0 = 0.0;
    for (int b = 0; b < f->batches && b < 3; b++) {
        double sq = 0.0;
        for (int j = 0; j < P; j++) {
            const double g = (double)(float)(f->a[b][j] * ((double)f->global[j] - f->t[b][j]));
            sq += g * g;
            if (b == 0) g0[j] = g;
        }
        h += sqrt(sq) / f->batches;
        if (b == 0) n0 = sqrt(sq);
    }
    float v[P];
    if (wa) {
        for (int j = 0; j < P; j++) v[j] = (float)g0[j];
    } else {
        const float scale = (float)(0.5 * rho_max / (1.0 + alpha * h) / n0);
        for (int j = 0; j < P; j++) {
            const float wp = f->global[j] + scale * (float)g0[j];
            v[j] = (float)(f->a[0][j] * ((double)wp - f->t[0][j]));
        }
    }
    double vn = 0.0, s[D];
    for (int j = 0; j < P; j++) vn += (double)v[j] * v[j];
    fedscam_project(11, 0, v, NULL, P, -1.0 / sqrt(vn), D, s);
    double dot = 0.0;
    for (int j = 0; j < D; j++) dot += s[j] * f->u[j];
    const double un = vnorm(f->u, D), c = un > 0.0 ? dot / (vnorm(s, D) * un) : 0.0;
    const double h_adj = h * fmax(0.0, 1.0 - kappa * c);
    /* float-level tolerances: the compiler may keep the test's float products in higher precision */
    CHECK_NEAR(f->up[UP_H], h, 1e-6 * h);
    CHECK_NEAR(f->up[UP_C], c, 1e-6);
    CHECK_NEAR(f->up[UP_HADJ], h_adj, 1e-6 * h);
    if (wa) CHECK(isnan(f->up[UP_RHO]));
    else CHECK_NEAR(f->up[UP_RHO], rho_max / (1.0 + alpha * h_adj), 1e-6 * rho_max);
}

static void test_client_begin(void)
{
    for (int wa = 0; wa < 2; wa++) {
        Fake f;
        fake_init(&f, wa ? "fedscam_wa" : "fedscam", 1.0);
        /* round 0: u = 0, c = 0, h_adj = h */
        CHECK_OK(f.round.method->report->begin(&f.c));
        CHECK(f.calls == (wa ? 3 : 4)); /* B = 3 probes (+ the pilot) */
        CHECK(f.up[UP_C] == 0.0);
        expect_begin(&f, wa);
        /* a direction u aligned with the pilot direction: c = 1 and h_adj = h (1 - kappa) */
        memcpy(f.u, f.up + UP_Z, sizeof f.u);
        CHECK_OK(f.round.method->report->begin(&f.c));
        CHECK_NEAR(f.up[UP_C], 1.0, 1e-12);
        expect_begin(&f, wa);
        /* an arbitrary u, and a client with a single batch */
        for (int j = 0; j < D; j++) f.u[j] = j - 1.5;
        CHECK_OK(f.round.method->report->begin(&f.c));
        expect_begin(&f, wa);
        f.batches = 1;
        CHECK_OK(f.round.method->report->begin(&f.c));
        expect_begin(&f, wa);
        /* state untouched; the step's radius hook gives rho_i */
        CHECK(!memcmp(f.state, f.global, sizeof f.state));
        if (!wa) CHECK(f.round.method->step->client_radius(&f.c, 0.05) == f.up[UP_RHO]);
    }
}

/* the client with the larger gradients (same directions) gets the strictly smaller radius */
static void test_radius_ordering_through_begin(void)
{
    double last = INFINITY, last_h = 0.0;
    for (double scale = 0.25; scale < 20.0; scale *= 2.0) {
        Fake f;
        fake_init(&f, "fedscam", scale);
        CHECK_OK(f.round.method->report->begin(&f.c));
        CHECK(f.up[UP_H] > last_h);
        CHECK_MSG(f.up[UP_RHO] < last, "scale %g: rho %g after %g", scale, f.up[UP_RHO], last);
        last = f.up[UP_RHO];
        last_h = f.up[UP_H];
    }
}

/* report->end: ||Delta|| and z = Proj(Delta)/||Delta|| */
static void test_client_end(void)
{
    Fake f;
    fake_init(&f, "fedscam", 1.0);
    float delta[P];
    double sq = 0.0;
    for (int j = 0; j < P; j++) {
        f.state[j] = f.global[j] + 0.1f * (float)(j - 2);
        delta[j] = f.state[j] - f.global[j];
        sq += (double)delta[j] * delta[j];
    }
    CHECK_OK(f.round.method->report->end(&f.c));
    double z[D];
    fedscam_project(11, 0, delta, NULL, P, 1.0 / sqrt(sq), D, z);
    CHECK_NEAR(f.up[UP_DNORM], sqrt(sq), 1e-15);
    for (int j = 0; j < D; j++) CHECK_NEAR(f.up[UP_Z + j], z[j], 1e-12);
}

/* ---- the projection ------------------------------------------------------------------------------------- */

static void test_projection(void)
{
    enum { N = 200, DD = 32 };
    static float x[N], y[N], e[N];
    FhRng rng;
    fh_rng_init(&rng, 9, FH_RNG_TEST, 0, 0, 0);
    double xy = 0.0, xx = 0.0;
    for (int k = 0; k < N; k++) {
        x[k] = (float)(fh_rng_uniform(&rng) * 2.0 - 1.0);
        y[k] = x[k] + (float)(fh_rng_uniform(&rng) - 0.5);
        xy += (double)x[k] * y[k];
        xx += (double)x[k] * x[k];
    }
    /* sketch: coordinate k lands in one bucket with sign +-1; the same on every call */
    double out[DD], again[DD];
    for (int k = 0; k < N; k++) {
        memset(e, 0, sizeof e);
        e[k] = 1.0f;
        fedscam_project(5, 0, e, NULL, N, 1.0, DD, out);
        int nonzero = 0;
        for (int j = 0; j < DD; j++)
            if (out[j] != 0.0) {
                nonzero++;
                CHECK(fabs(out[j]) == 1.0);
            }
        CHECK(nonzero == 1);
    }
    for (int g = 0; g < 2; g++) {
        fedscam_project(5, g, x, NULL, N, 0.5, DD, out);
        fedscam_project(5, g, x, NULL, N, 0.5, DD, again);
        CHECK(!memcmp(out, again, sizeof out));
        /* linear: Proj(x - y) = Proj(x) - Proj(y) */
        double px[DD], py[DD], pd[DD];
        fedscam_project(5, g, x, NULL, N, 1.0, DD, px);
        fedscam_project(5, g, y, NULL, N, 1.0, DD, py);
        fedscam_project(5, g, x, y, N, 1.0, DD, pd);
        for (int j = 0; j < DD; j++) CHECK_NEAR(pd[j], px[j] - py[j], 1e-9);
        /* another seed, another projection */
        fedscam_project(6, g, x, NULL, N, 0.5, DD, again);
        CHECK(memcmp(out, again, sizeof out) != 0);
    }
    /* E <Px, Py> = <x, y> and E ||Px||^2 = ||x||^2 over seeds (sd of the mean about 1.6 % here) */
    for (int g = 0; g < 2; g++) {
        const int seeds = g ? 400 : 2000;
        double mean_xy = 0.0, mean_xx = 0.0;
        for (int sd = 0; sd < seeds; sd++) {
            double px[DD], py[DD];
            fedscam_project((uint64_t)(100 + sd), g, x, NULL, N, 1.0, DD, px);
            fedscam_project((uint64_t)(100 + sd), g, y, NULL, N, 1.0, DD, py);
            double a = 0.0, b = 0.0;
            for (int j = 0; j < DD; j++) a += px[j] * py[j], b += px[j] * px[j];
            mean_xy += a / seeds;
            mean_xx += b / seeds;
        }
        CHECK_MSG(fabs(mean_xy / xy - 1.0) < (g ? 0.1 : 0.06), "%s: mean <Px,Py> %g, <x,y> %g", g ? "gaussian" : "sketch",
                  mean_xy, xy);
        CHECK_MSG(fabs(mean_xx / xx - 1.0) < (g ? 0.1 : 0.06), "%s: mean ||Px||^2 %g, ||x||^2 %g",
                  g ? "gaussian" : "sketch", mean_xx, xx);
    }
}

/* ---- k-means -------------------------------------------------------------------------------------------- */

/* k-means's scratch for m rows of d into k clusters */
static AlgoScratch kmeans_work(int m, int d, int k) { return test_scratch(fedscam_kmeans_scratch(m, d, k)); }

static void test_kmeans_hand_example(void)
{
    /* three groups in the plane, listed interleaved */
    const double x[9 * 2] = { 1.0, 0.1, -1.0, 0.0, 0.0, 5.0, 1.1, -0.1, -0.9, 0.1, 0.1, 5.2, 0.9, 0.0, -1.1, -0.1,
                              -0.1, 4.9 };
    for (uint32_t round = 0; round < 20; round++) {
        int a[9];
        fedscam_kmeans(x, 9, 2, 3, 7, round, a, kmeans_work(9, 2, 3));
        for (int i = 0; i < 9; i++) {
            CHECK(a[i] >= 0 && a[i] < 3);
            CHECK(a[i] == a[i % 3]);               /* same group, same cluster */
            if (i < 3) CHECK(a[i] != a[(i + 1) % 3]); /* different groups apart */
        }
        int b[9];
        fedscam_kmeans(x, 9, 2, 3, 7, round, b, kmeans_work(9, 2, 3)); /* the same draw every call */
        CHECK(!memcmp(a, b, sizeof a));
        /* two clusters: the two nearby groups together, the far one alone */
        fedscam_kmeans(x, 9, 2, 2, 7, round, a, kmeans_work(9, 2, 2));
        for (int i = 0; i < 9; i++) CHECK(a[i] == a[i % 3]);
        CHECK(a[0] == a[1] && a[2] != a[0]);
        /* one cluster; more clusters than rows is capped */
        fedscam_kmeans(x, 9, 2, 1, 7, round, a, kmeans_work(9, 2, 1));
        for (int i = 0; i < 9; i++) CHECK(a[i] == 0);
        fedscam_kmeans(x, 3, 2, 5, 7, round, a, kmeans_work(3, 2, 5));
        CHECK(a[0] != a[1] && a[1] != a[2] && a[0] != a[2]);
    }
    /* identical rows: k-means++ still finds k distinct seeds, every row goes to the first equal centre */
    const double same[4 * 2] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    int a[4];
    fedscam_kmeans(same, 4, 2, 3, 7, 0, a, kmeans_work(4, 2, 3));
    for (int i = 0; i < 4; i++) CHECK(a[i] == 0);
}

/* ---- server --------------------------------------------------------------------------------------------- */

typedef struct {
    AlgoSetup setup;
    AlgoSizes z;
    AlgoOptionBlock options;
    double u[D];
    double sc[4][UP_Z + D + 2];
    float w[4][P], current[P];
    AlgoUpload up[4];
    AlgoServerCtx s;
} Server;

static void server_init(Server *v, const AlgoMethod *m, int n_up)
{
    memset(v, 0, sizeof *v);
    v->setup = (AlgoSetup){ .options = OPTIONS(&v->options, m, { "proj_dim", D }), .n_clients = 6, .per_round = n_up,
                            .rounds = 10, .n_params = P, .n_state = P,
                            .optimizer = "sgd", .lr = 0.1, .seed = 11 };
    algo_sizes(m, &v->setup, &v->z);
    const int64_t n[4] = { 30, 10, 25, 40 };
    for (int i = 0; i < n_up; i++) {
        for (int j = 0; j < P; j++) v->w[i][j] = (float)(0.1 * (i + 1) * (j % 3) - 0.05 * j);
        v->up[i] = (AlgoUpload){ 2 * i + 1, n[i], 3, 0.0, v->sc[i], v->w[i], NULL };
    }
    for (int j = 0; j < P; j++) v->current[j] = 0.01f * (float)j;
    v->s = (AlgoServerCtx){ .round = 2, .rounds = 10, .n_clients = 6, .n_selected = n_up, .n_params = P, .n_state = P,
                            .options = v->setup.options, .setup = &v->setup, .sizes = &v->z, .lr = 0.1,
                            .current = v->current,
                            .server_scalars = v->u, .scratch = test_scratch(v->z.server_scratch) };
}

/* after a key changed: the sizes and the scratch they ask for (as the runtime makes them at setup) */
static void server_resize(Server *v, const AlgoMethod *m)
{
    algo_sizes(m, &v->setup, &v->z);
    v->s.scratch = test_scratch(v->z.server_scratch);
}

static void test_server_weights(void)
{
    for (int wa = 0; wa < 2; wa++) {
        const AlgoMethod *m = algo_find(wa ? "fedscam_wa" : "fedscam");
        Server v;
        server_init(&v, m, 3);
        const double h_adj[3] = { 0.5, 2.0, 0.0 }, c[3] = { 0.3, -0.9, 0.0 };
        for (int i = 0; i < 3; i++) v.sc[i][UP_HADJ] = h_adj[i], v.sc[i][UP_C] = c[i];
        double p[3];
        CHECK_OK(m->weights->weights(&v.s, v.up, 3, p));
        /* defaults gamma_h = 1, beta = 0.8: n/(1 + h_adj) (1 + 0.8 c) */
        CHECK_NEAR(p[0], 30.0 / 1.5 * 1.24, 1e-12);
        CHECK_NEAR(p[1], 10.0 / 3.0 * (1.0 - 0.72), 1e-12);
        CHECK_NEAR(p[2], 25.0, 1e-12);
        CHECK_NEAR(fedscam_weight(10, 1, 2, 0.8, -2.0, 1), 0.0, 0); /* max(0, .) */
        /* gamma_h = beta = 0: exactly the sample counts */
        option_set(&v.options, m, "gamma_h", 0.0);
        option_set(&v.options, m, "beta", 0.0);
        CHECK_OK(m->weights->weights(&v.s, v.up, 3, p));
        CHECK(p[0] == 30.0 && p[1] == 10.0 && p[2] == 25.0);
        /* every alignment below -1/beta: weights 0, fallback to n_i */
        option_set(&v.options, m, "beta", 2.0);
        for (int i = 0; i < 3; i++) v.sc[i][UP_C] = -0.6;
        CHECK_OK(m->weights->weights(&v.s, v.up, 3, p));
        CHECK(p[0] == 30.0 && p[1] == 10.0 && p[2] == 25.0);
    }
}

/* cluster = true: inside a cluster, of each pair with cos(z_i, z_j) < 0 the smaller ||Delta|| (ties: the larger
 * id) gets lambda_c, once */
static void test_conflict_damping(void)
{
    const AlgoMethod *m = algo_find("fedscam");
    Server v;
    server_init(&v, m, 4);
    option_set(&v.options, m, "gamma_h", 0.0);
    option_set(&v.options, m, "beta", 0.0);
    option_set(&v.options, m, "cluster", 1.0);
    option_set(&v.options, m, "clusters", 1.0);
    option_set(&v.options, m, "lambda_c", 0.25);
    server_resize(&v, m);
    CHECK(v.z.server_scratch > 0);
    /* z: 0 and 1 opposite, 2 opposite to both 0 and 3 (3 along 0) */
    const double z[4][D] = { { 1, 0, 0, 0 }, { -1, 0.1, 0, 0 }, { -0.5, -0.5, 0, 0 }, { 2, 0, 0, 0 } };
    const double dn[4] = { 1.0, 3.0, 2.0, 2.0 };
    for (int i = 0; i < 4; i++) {
        memcpy(v.sc[i] + UP_Z, z[i], sizeof z[i]);
        v.sc[i][UP_DNORM] = dn[i];
    }
    double p[4];
    CHECK_OK(m->weights->weights(&v.s, v.up, 4, p));
    /* pairs with a negative cosine: (0,1) and (0,2) flag 0 (||Delta|| 1), (1,3) flags 3 (2 < 3), (2,3) ties at
     * 2 and flags the larger id, 3; 1 and 2 (cosine > 0 between them) keep their weights */
    CHECK(p[0] == 30.0 * 0.25);
    CHECK(p[1] == 10.0);
    CHECK(p[2] == 25.0);
    CHECK(p[3] == 40.0 * 0.25);
    /* K_c = 4 clusters of one: nothing to damp */
    option_set(&v.options, m, "clusters", 4.0);
    server_resize(&v, m);
    CHECK_OK(m->weights->weights(&v.s, v.up, 4, p));
    CHECK(p[0] == 30.0 && p[1] == 10.0 && p[2] == 25.0 && p[3] == 40.0);
    /* cluster = false: nothing either */
    option_set(&v.options, m, "clusters", 1.0);
    option_set(&v.options, m, "cluster", 0.0);
    CHECK_OK(m->weights->weights(&v.s, v.up, 4, p));
    CHECK(p[0] == 30.0 && p[3] == 40.0);
}

/* the server step: the weighted average, then u = Proj(w_{t+1} - w_t)/||w_{t+1} - w_t|| */
static void test_server_update(void)
{
    const char *rows[3] = { "fedscam", "fedscam_wa", "fedscam_sam" };
    for (int r = 0; r < 3; r++) {
        const AlgoMethod *m = algo_find(rows[r]);
        Server v;
        server_init(&v, m, 3);
        const double p[3] = { 1.0, 2.0, 3.0 };
        float got[P], diff[P];
        CHECK_OK(server_step(m, &v.s, v.up, 3, p, got));
        double sq = 0.0;
        for (int j = 0; j < P; j++) {
            const double want = (1.0 * v.w[0][j] + 2.0 * v.w[1][j] + 3.0 * v.w[2][j]) / 6.0;
            CHECK_NEAR(got[j], want, 1e-6);
            diff[j] = got[j] - v.current[j];
            sq += (double)diff[j] * diff[j];
        }
        double u[D];
        fedscam_project(11, 0, diff, NULL, P, 1.0 / sqrt(sq), D, u);
        for (int j = 0; j < D; j++) CHECK_NEAR(v.u[j], u[j], 1e-6); /* the test's difference is rounded to float */
        /* no move: u = 0 */
        for (int i = 0; i < 3; i++) memcpy(v.w[i], v.current, sizeof v.current);
        CHECK_OK(server_step(m, &v.s, v.up, 3, p, got));
        for (int j = 0; j < D; j++) CHECK(v.u[j] == 0.0);
    }
}

/* sizes: d = proj_dim, or 256 / 512 around 1M trainable parameters; the radius and the column lists */
static void test_sizes(void)
{
    const AlgoMethod *m = algo_find("fedscam");
    AlgoOptionBlock ob;
    AlgoSetup s = { .options = options_default(&ob, m), .n_params = 999999 };
    AlgoSizes z;
    algo_sizes(m, &s, &z);
    CHECK(z.server_scalars == 256 && z.upload_scalars == UP_Z + 256 + 2 && algo_upload_index(&z, "rho") == UP_RHO);
    CHECK(algo_upload_index(&z, "perturb_norm") == UP_Z + 256 && algo_upload_index(&z, "grad_norm") == UP_Z + 257);
    const char *columns[] = { "rho", "h", "c", "h_adj", "delta_norm" };
    for (int i = 0; i < 5; i++) CHECK(!strcmp(z.named[i].name, columns[i]) && z.named[i].at == UP_RHO + i);
    s.n_params = 1000000;
    algo_sizes(m, &s, &z);
    CHECK(z.server_scalars == 512);
    option_set(&ob, m, "proj_dim", 7);
    algo_sizes(m, &s, &z);
    CHECK(z.server_scalars == 7);
    const AlgoMethod *wa = algo_find("fedscam_wa");
    s.options = options_default(&ob, wa);
    algo_sizes(wa, &s, &z);
    CHECK(algo_upload_index(&z, "rho") < 0 && algo_upload_index(&z, "perturb_norm") < 0 && z.work_vectors == 0);
    CHECK(z.n_named == 4 && !strcmp(z.named[0].name, "h") && z.named[0].at == UP_H &&
          !strcmp(z.named[3].name, "delta_norm") && z.named[3].at == UP_DNORM);
    /* counts: a fraction does not land */
    CHECK(algo_option_set(&ob, wa, "clusters", 2.5) == FH_ERR_USAGE);
    CHECK(strstr(fh_error_message(), "clusters") != NULL);
    fh_error_clear();
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    RUN(test_radius_decreases_in_h);
    RUN(test_client_begin);
    RUN(test_radius_ordering_through_begin);
    RUN(test_client_end);
    RUN(test_projection);
    RUN(test_kmeans_hand_example);
    RUN(test_server_weights);
    RUN(test_conflict_damping);
    RUN(test_server_update);
    RUN(test_sizes);
    return test_summary();
}
