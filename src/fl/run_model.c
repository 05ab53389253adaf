/* A run's model, built in one place: for the run's clients, its [model] init and the commands that read a saved
 * run (fedhet export, fedhet landscape), so that a key or method that changes the architecture changes it everywhere;
 * and for those commands the run's partition file as the run read it. */
#include "fl_internal.h"

#include <stdlib.h>

#include "fedhet/core.h"
#include "fedhet/onnx.h"

/* the zoo options of the run's model: its [model] and [train] backend keys, what the method adds (its sizes hook's
 * proj_dim: MOON's projection head) and, with [model] onnx, the graph */
static NnZooOptions zoo_options(const FlSettings *s, int n_clients, int classes)
{
    AlgoSetup setup;
    AlgoSizes arch;
    fl_algo_setup(&setup, s, NULL, n_clients, classes); /* the sizes before the model exists */
    algo_sizes(s->method, &setup, &arch);
    const NnZooOptions zoo = { .norm = s->norm, .gn_groups = s->groups, .proj_dim = arch.proj_dim, .backend = s->backend };
    return s->net ? onnx_zoo_options(s->net, &zoo) : zoo;
}

int fl_model_build(NnModel *m, const FlSettings *s, NnShape shape, int classes, int n_clients, int max_batch)
{
    const NnZooOptions zoo = zoo_options(s, n_clients, classes);
    return nn_zoo_build(m, s->model, shape, classes, max_batch, &zoo);
}

struct FlRunModel {
    FhConfig *cfg; /* the settings point into it */
    FlSettings s;
};

void fl_run_model_close(FlRunModel **r)
{
    if (!*r) return;
    onnx_net_free((*r)->s.net);
    fh_config_free(&(*r)->cfg);
    free(*r);
    *r = NULL;
}

int fl_run_model_open(FlRunModel **out, const char *config_text, const char *source)
{
    *out = NULL;
    FlRunModel *r = calloc(1, sizeof *r);
    if (!r) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    int status = fl_config_load_saved(&r->cfg, config_text, source, NULL, 0);
    if (status == FH_OK) status = fl_settings_from_config(&r->s, r->cfg, source);
    if (status != FH_OK) {
        fl_run_model_close(&r);
        return status;
    }
    *out = r;
    return FH_OK;
}

const char *fl_run_model_data_path(const FlRunModel *r) { return r->s.data_path; }

int fl_run_model_data_open(const FlRunModel *r, const char *path, DataPartFile *f)
{
    FH_CHECK(data_partfile_open(f, path ? path : r->s.data_path));
    const int status = data_normalise_set(f, r->s.normalise);
    if (status != FH_OK) data_partfile_close(f);
    return status;
}

const char *fl_run_model_name(const FlRunModel *r) { return r->s.model; }

int fl_run_model_build(const FlRunModel *r, const DataPartFile *f, int max_batch, NnModel *m)
{
    return fl_model_build(m, &r->s, (NnShape){ f->c, f->h, f->w }, f->classes, f->n_clients, max_batch);
}
