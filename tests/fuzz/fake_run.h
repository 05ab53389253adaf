/* A small FlRun on MPI_COMM_SELF with every kind of checkpointed state (server vectors, private
 * vectors, scalars, two clients' persistent vectors and floats in a client-state.bin, metric rows), for
 * writing seed checkpoints with fl_checkpoint_save and reading fuzzed ones with fl_checkpoint_load. */
#ifndef FEDHET_FUZZ_FAKE_RUN_H
#define FEDHET_FUZZ_FAKE_RUN_H

#include <stdlib.h>
#include <string.h>

#include "../../src/fl/fl_internal.h"
#include "fedhet/core.h"

enum { FAKE_N_STATE = 6, FAKE_ROUNDS = 4, FAKE_CLIENTS = 2 };

static int fake_clients[FAKE_CLIENTS] = { 0, 1 };
static int fake_owner[FAKE_CLIENTS] = { 0, 0 };

static inline void *fake_zalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) abort();
    return p;
}

/* MPI must be initialised. The state values are a fixed pattern, so a saved file is always the same; the two
 * clients' states go to store_dir/client-state.bin, made anew, in slots 0 and 1 of round 0 (so a checkpoint
 * saved by one fake run loads into another whose store is elsewhere). */
static inline void fake_run_init(FlRun *run, const char *store_dir)
{
    memset(run, 0, sizeof *run);
    if (fl_comm_init(&run->comm, MPI_COMM_SELF) != FH_OK) abort();
    run->s.rounds = FAKE_ROUNDS;
    run->s.seed = 7;
    run->s.model = "tiny";
    run->s.norm = "none";
    /* a model whose state is the FAKE_N_STATE floats (2 inputs -> linear 2): checkpoints write its tensors */
    NnModel *m = &run->work.model;
    if (nn_model_init(m, "tiny", (NnShape){ 1, 1, 2 }, 1) != FH_OK) abort();
    const int x = nn_flatten(m, m->input);
    if (nn_model_finalize(m, nn_linear(m, x, 2, 1, NN_ACT_NONE), x, 2) != FH_OK || m->n_state != FAKE_N_STATE) abort();
    run->n_state = FAKE_N_STATE;
    run->layout_hash = 0x5eedULL;
    run->lr = 0.05;
    run->config_text = "[data]\npath = fuzz.h5\n";
    run->z.server_vectors = 1;
    run->z.server_private = 1;
    run->z.server_scalars = 2;
    run->z.client_vectors = 1;
    run->z.client_floats = 2;
    run->n_clients = FAKE_CLIENTS;
    run->owner = fake_owner;
    run->global = fake_zalloc(sizeof(float) * (1 + run->z.server_vectors) * FAKE_N_STATE);
    run->server_vecs = run->global + FAKE_N_STATE;
    run->server_private = fake_zalloc(sizeof(float) * run->z.server_private * FAKE_N_STATE);
    run->server_scalars = fake_zalloc(sizeof(double) * run->z.server_scalars);
    run->rows = fake_zalloc(sizeof(double) * FAKE_ROUNDS * FL_N_COLUMNS);
    run->n_ccols = FL_N_CCOLUMNS;
    for (int c = 0; c < FL_N_CCOLUMNS; c++) run->ccol_names[c] = fl_client_column_names[c];
    run->work.block = run->z.client_vectors * FAKE_N_STATE + run->z.client_floats + 1;
    run->work.n_owned = FAKE_CLIENTS;
    run->work.loader.n_owned = FAKE_CLIENTS;
    run->work.loader.clients = fake_clients;
    run->work.client_state = fake_zalloc(sizeof(float) * FAKE_CLIENTS * (size_t)run->work.block);
    for (int i = 0; i < (1 + run->z.server_vectors) * FAKE_N_STATE; i++) run->global[i] = 0.25f * (float)i - 1.0f;
    for (int i = 0; i < FAKE_N_STATE; i++) run->server_private[i] = (float)i;
    run->server_scalars[0] = 1.5;
    run->server_scalars[1] = -2.0;
    for (int64_t i = 0; i < FAKE_CLIENTS * run->work.block; i++) run->work.client_state[i] = 0.5f * (float)i;
    if (fl_store_open(&run->store, &run->comm, store_dir, FAKE_CLIENTS, run->work.block - 1, run->layout_hash,
                      FAKE_CLIENTS, 1) != FH_OK)
        abort();
    fl_store_round(&run->store, fake_clients, FAKE_CLIENTS, 0);
    for (int k = 0; k < FAKE_CLIENTS; k++)
        if (fl_store_put(&run->store, k, run->work.client_state + (size_t)k * run->work.block) != FH_OK) abort();
    fl_store_round_end(&run->store);
    if (fl_checkpoint_init(run) != FH_OK) abort();
}

/* n_rows rounds done, each with one clients.csv row per client */
static inline void fake_run_set_rounds(FlRun *run, int n_rows)
{
    run->n_rows = n_rows;
    for (int r = 0; r < n_rows; r++)
        for (int c = 0; c < FL_N_COLUMNS; c++) run->rows[r * FL_N_COLUMNS + c] = r + 0.01 * c;
    free(run->client_rows);
    run->n_client_rows = (int64_t)n_rows * FAKE_CLIENTS;
    run->cap_client_rows = run->n_client_rows > 0 ? run->n_client_rows : 1;
    run->client_rows = fake_zalloc(sizeof(double) * (size_t)(run->cap_client_rows * run->n_ccols));
    for (int64_t i = 0; i < run->n_client_rows * run->n_ccols; i++) run->client_rows[i] = (double)i;
}

static inline void fake_run_free(FlRun *run)
{
    nn_model_free(&run->work.model);
    free(run->global);
    free(run->server_private);
    free(run->server_scalars);
    free(run->rows);
    free(run->client_rows);
    free(run->work.client_state);
    fl_store_close(&run->store);
    fl_checkpoint_free(run);
    memset(run, 0, sizeof *run);
}

#endif
