/* The federated client loop against plain centralised training: FedAvg with one client, R rounds of E
 * epochs, equals the same minibatch steps written as an ordinary training loop (model, loader, SGD with
 * momentum, a fresh optimiser every round), bit for bit. Also: the aggregation of one upload returns it
 * unchanged, and Uniform equals FedAvg when every client has the same size. */
#include "test.h"
#include "test_tmp.h"

#include <hdf5.h>
#include <stdlib.h>

#include "../../src/fl/fl_internal.h"
#include "fedhet/rng.h"
#include "tiny_partition.h"

static void settings(FlSettings *s, const char *method)
{
    memset(s, 0, sizeof *s);
    s->model = "mlp";
    s->norm = "bn";
    s->groups = 2;
    s->optimizer = "sgd";
    s->lr = 0.05;
    s->momentum = 0.9;
    s->epochs = 2;
    s->batch_size = 16;
    s->seed = 11;
    s->selection = "all";
    s->rounds = 3;
    s->method = algo_find(method);
}

static void test_one_client_fedavg_equals_centralised(void)
{
    const char *path = tiny_partition("one.h5", 1, 100);
    DataPartFile f;
    CHECK_OK(data_partfile_open(&f, path));
    FlSettings s;
    settings(&s, "fedavg");
    int client = 0;
    FlClientWork w;
    CHECK_OK(fl_client_init(&w, &s, &f, &client, 1));
    const int64_t P = w.model.n_state;
    FlRecordLayout l;
    fl_record_layout(&l, &w.ops.sizes, P);
    void *rec = calloc(1, l.bytes);
    float *global = malloc((size_t)P * sizeof(float)), *next = malloc((size_t)P * sizeof(float));
    nn_model_init_params(&w.model, (uint64_t)s.seed);
    memcpy(global, w.model.state, (size_t)P * sizeof(float));

    /* the centralised reference: its own model, loader and optimiser */
    NnModel ref;
    NnZooOptions zoo = { .norm = "bn", .gn_groups = 2 };
    CHECK_OK(nn_zoo_build(&ref, "mlp", (NnShape){ 1, 6, 6 }, 3, 16, &zoo));
    memcpy(ref.state, global, (size_t)P * sizeof(float));
    DataLoader L;
    CHECK_OK(data_loader_init(&L, &f, &client, 1, -1));
    NnSgd sgd;
    CHECK_OK(nn_sgd_init(&sgd, ref.n_params, 0.9f, 0.0f, 0));
    float x[16 * 36], dlogits[16 * 3];
    int32_t y[16];

    for (int round = 0; round < 3; round++) {
        CHECK_OK(fl_client_train(&w, &l, global, NULL, NULL, 0, 0, round, s.lr, rec));
        AlgoUpload u = { 0, fl_record_header(rec)->n_samples, fl_record_header(rec)->n_steps, 0, NULL,
                         fl_record_state(rec, &l), NULL };
        AlgoServerCtx sc = { .round = round, .n_clients = 1, .n_params = w.model.n_params, .n_state = P };
        double p;
        CHECK_OK(algo_weights_samples.weights(&sc, &u, 1, &p));
        CHECK_OK(algo_average(&sc, &u, 1, &p, next));
        CHECK(memcmp(next, fl_record_state(rec, &l), (size_t)P * sizeof(float)) == 0);
        memcpy(global, next, (size_t)P * sizeof(float));

        DataBatchIter it;
        nn_sgd_reset(&sgd);
        CHECK_OK(data_loader_begin(&L, &it, 0, (uint64_t)s.seed, (uint32_t)round));
        const int64_t steps = 2 * ((100 + 15) / 16);
        CHECK(fl_record_header(rec)->n_steps == steps);
        for (int64_t step = 0; step < steps; step++) {
            int64_t count = data_loader_next(&L, &it, 16, x, y);
            nn_model_zero_grad(&ref);
            CHECK_OK(nn_model_forward(&ref, x, (int)count));
            memset(dlogits, 0, sizeof dlogits);
            nn_softmax_xent(dlogits, NULL, nn_model_logits(&ref), y, NULL, NULL, (int)count, 3);
            nn_model_backward(&ref, dlogits, NULL);
            nn_sgd_step(&sgd, ref.state, ref.grad, (float)s.lr);
        }
        CHECK_MSG(memcmp(ref.state, global, (size_t)P * sizeof(float)) == 0, "round %d differs", round);
    }
    nn_sgd_free(&sgd);
    data_loader_free(&L);
    nn_model_free(&ref);
    fl_client_free(&w);
    data_partfile_close(&f);
    free(rec), free(global), free(next);
}

static void test_uniform_equals_fedavg_for_equal_sizes(void)
{
    const int64_t P = 5;
    float a[5] = { 1, 2, 3, 4, 5 }, b[5] = { -1, 0, 1, 2, 30 }, c[5] = { 0.5f, 0.25f, 0, 8, -2 };
    AlgoUpload u[3] = { { 0, 40, 3, 0, NULL, a, NULL }, { 1, 40, 3, 0, NULL, b, NULL }, { 2, 40, 3, 0, NULL, c, NULL } };
    AlgoServerCtx sc = { .n_clients = 3, .n_params = P, .n_state = P };
    double p1[3], p2[3];
    float g1[5], g2[5];
    CHECK_OK(algo_weights_samples.weights(&sc, u, 3, p1));
    CHECK_OK(algo_weights_uniform.weights(&sc, u, 3, p2));
    CHECK_OK(algo_average(&sc, u, 3, p1, g1));
    CHECK_OK(algo_average(&sc, u, 3, p2, g2));
    CHECK(memcmp(g1, g2, sizeof g1) == 0);
    CHECK_NEAR(g1[4], 11.0, 1e-6);
    /* unequal sizes: FedAvg weights by samples (docs/methods/baselines.md A.1) */
    u[2].n_samples = 120;
    CHECK_OK(algo_weights_samples.weights(&sc, u, 3, p1));
    CHECK_OK(algo_average(&sc, u, 3, p1, g1));
    CHECK_NEAR(g1[0], (40 * 1 + 40 * -1 + 120 * 0.5) / 200.0, 1e-6);
}

/* records lie back to back in the gather buffer: every record starts 8-byte aligned (its header holds int64 and
 * double fields) whatever the state size, odd ones included */
static void test_record_layout_aligned(void)
{
    for (int64_t n_state = 1; n_state <= 9; n_state++)
        for (int vectors = 0; vectors <= 2; vectors++)
            for (int scalars = 0; scalars <= 3; scalars++) {
                AlgoSizes z = { .upload_vectors = vectors, .upload_scalars = scalars };
                FlRecordLayout l;
                fl_record_layout(&l, &z, n_state);
                CHECK_MSG(l.bytes % 8 == 0 && l.header_bytes % 64 == 0, "n_state %lld, %d vectors: record of %zu bytes",
                          (long long)n_state, vectors, l.bytes);
                CHECK(l.bytes >= l.header_bytes + (size_t)(1 + vectors) * (size_t)n_state * sizeof(float));
                CHECK(l.bytes < l.header_bytes + (size_t)(1 + vectors) * (size_t)n_state * sizeof(float) + 8);
            }
}

int main(int argc, char **argv)
{
    TEST_MAIN_BEGIN(argc, argv);
    if (tmp_init("flclient") != 0) return 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    RUN(test_record_layout_aligned);
    RUN(test_one_client_fedavg_equals_centralised);
    RUN(test_uniform_equals_fedavg_for_equal_sizes);
    tmp_cleanup();
    return test_summary();
}
