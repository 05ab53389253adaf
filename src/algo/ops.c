/* A method and its plug-in composed into one table of hooks (include/fedhet/algo.h, "a method composed with its
 * plug-in"): the defaults and the composition rules in one place. */
#include "algo_internal.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

/* -0.0: the loss plus it is the loss, bit for bit, whatever its sign */
static double no_grad_term(AlgoClientCtx *c, const float *w, float *grad) { return -0.0; }
static void no_correction(AlgoClientCtx *c, float *grad) {}
static int nothing(AlgoClientCtx *c) { return FH_OK; }
static int no_server_init(AlgoServerCtx *s, float *global) { return FH_OK; }

/* the configured optimiser's step on the batch's gradient */
static int optimizer_step(AlgoClientCtx *c, AlgoGradFn grad, void *env, double *loss)
{
    FH_CHECK(grad(env, loss));
    c->svc->optimizer_step(c, c->model->state, c->model->grad);
    return FH_OK;
}

/* a hook of the plug-in the rules do not compose, or NULL */
static const char *plugin_extra_hook(const AlgoMethod *p)
{
    if (p->batch_term) return "a batch term";
    if (p->local_term) return "a local term";
    if (p->correction) return "a gradient correction";
    if (p->step) return "a local step";
    if (p->report && p->report->begin) return "a report begin";
    if (p->update) return "a server update";
    if (p->server_init) return "a server init";
    return NULL;
}

/* The plug-in's sizes joined to the host's z: its upload scalars, their names and its scratch after the host's. */
static int add_plugin_sizes(AlgoOps *ops, const AlgoSetup *plugin_setup)
{
    const AlgoMethod *plugin = ops->plugin_options.row;
    AlgoSizes *z = &ops->sizes, pz;
    algo_sizes(plugin, plugin_setup, &pz);
    z->upload_scalars += pz.upload_scalars;
    z->client_scratch += pz.client_scratch;
    z->server_scratch += pz.server_scratch;
    for (int i = 0; i < pz.n_named; i++) {
        if (algo_upload_index(z, pz.named[i].name) >= 0 || z->n_named == ALGO_MAX_NAMED)
            FH_FAIL(FH_ERR_USAGE, "plug-in %s's upload scalar %s: method %s has one of that name (or too many)",
                    plugin->name, pz.named[i].name, ops->options.row->name);
        algo_upload_named(z, ops->host_upload_scalars + pz.named[i].at, pz.named[i].name, pz.named[i].show);
    }
    return FH_OK;
}

/* The host's hooks, the defaults where it has none, and the plug-in's where the rules take them. */
static void compose_hooks(AlgoOps *ops, const AlgoMethod *m, const AlgoMethod *plugin)
{
    if (m->sample_weights) ops->weigh = m->sample_weights->weigh;
    else if (plugin && plugin->sample_weights) {
        ops->weigh = plugin->sample_weights->weigh;
        ops->weigh_by_plugin = 1;
    }
    ops->has_weigh = ops->weigh != NULL;
    ops->batch_term = m->batch_term ? m->batch_term->batch_term : NULL;
    ops->has_batch_term = ops->batch_term != NULL;
    ops->grad_term = m->local_term && m->local_term->grad_term ? m->local_term->grad_term : no_grad_term;
    ops->correct = m->correction && m->correction->correct ? m->correction->correct : no_correction;
    ops->step = m->step && m->step->step ? m->step->step : optimizer_step;
    ops->report_begin = m->report && m->report->begin ? m->report->begin : nothing;
    ops->report_end = m->report && m->report->end ? m->report->end : nothing;
    ops->plugin_report_end = plugin && plugin->report && plugin->report->end ? plugin->report->end : NULL;
    if (m->update) ops->update = *m->update;
    ops->server_init = m->server_init ? m->server_init : no_server_init;
    ops->weights = m->weights ? m->weights : &algo_weights_samples;
    if (plugin && plugin->weights) {
        ops->weights = plugin->weights;
        ops->weights_by_plugin = 1;
    }
    ops->round_scalar = m->round_scalar;
    if (!ops->round_scalar && plugin && plugin->round_scalar) {
        ops->round_scalar = plugin->round_scalar;
        ops->round_scalar_by_plugin = 1;
    }
    ops->folds = !algo_gathers_why(&ops->update, ops->weights);
}

const char *algo_gathers_why(const AlgoServerUpdate *update, const AlgoServerWeights *weights)
{
    if (update && update->update)
        return update->gathered_because ? update->gathered_because : "its server update reads every uploaded model";
    if (weights && weights->reads_models) return "its server weights read every uploaded model";
    return NULL;
}

int algo_ops_compose(AlgoOps *ops, const AlgoSetup *setup, AlgoOptions plugin_options)
{
    memset(ops, 0, sizeof *ops);
    const AlgoMethod *m = setup->options.row, *plugin = plugin_options.row;
    ops->options = setup->options;
    ops->plugin_options = plugin_options;
    const char *extra = plugin ? plugin_extra_hook(plugin) : NULL;
    if (extra) FH_FAIL(FH_ERR_USAGE, "plug-in %s has %s, which no composition rule joins to a host", plugin->name, extra);
    compose_hooks(ops, m, plugin);
    algo_sizes(m, setup, &ops->sizes);
    ops->host_upload_scalars = ops->sizes.upload_scalars;
    ops->host_client_scratch = ops->sizes.client_scratch;
    ops->host_server_scratch = ops->sizes.server_scratch;
    if (m->validate) FH_CHECK(m->validate(m, setup));
    if (!plugin) return FH_OK;
    AlgoSetup plugin_setup = *setup;
    plugin_setup.options = plugin_options;
    FH_CHECK(add_plugin_sizes(ops, &plugin_setup));
    if (plugin->validate) FH_CHECK(plugin->validate(plugin, &plugin_setup));
    if (ops->weights_by_plugin)
        FH_CHECK(fh_calloc(&ops->plugin_uploads, (size_t)setup->n_clients, sizeof *ops->plugin_uploads,
                           "the plug-in's uploads"));
    return FH_OK;
}

void algo_ops_free(AlgoOps *ops) { fh_free(&ops->plugin_uploads); }

const char *algo_ops_plugin_refusal(const AlgoMethod *host, AlgoOptions host_options, const AlgoMethod *plugin)
{
    return plugin->plugin_refuse ? plugin->plugin_refuse(host, host_options) : NULL;
}

/* the part of a scratch view past its first `first` bytes (a plug-in's) */
static AlgoScratch scratch_after(AlgoScratch whole, size_t first)
{
    return (AlgoScratch){ whole.base ? (char *)whole.base + first : NULL, whole.bytes - first };
}

AlgoScratch algo_ops_client_scratch(const AlgoOps *ops, void *block)
{
    return (AlgoScratch){ block, ops->host_client_scratch };
}

AlgoScratch algo_ops_server_scratch(const AlgoOps *ops, void *block)
{
    return (AlgoScratch){ block, ops->host_server_scratch };
}

/* The plug-in's view of host context c, in *round and *view. */
static AlgoClientCtx *plugin_view(const AlgoOps *ops, const AlgoClientCtx *c, AlgoClientRound *round,
                                  AlgoClientCtx *view)
{
    *round = *c->round;
    round->options = ops->plugin_options;
    *view = *c;
    view->round = round;
    view->state.upload_scalars = c->state.upload_scalars + ops->host_upload_scalars;
    view->state.scratch = scratch_after((AlgoScratch){ c->state.scratch.base, ops->sizes.client_scratch },
                                        ops->host_client_scratch);
    return view;
}

int algo_ops_weigh(const AlgoOps *ops, AlgoClientCtx *c, const AlgoBatch *b, float *weights)
{
    if (!ops->weigh_by_plugin) return ops->weigh(c, b, weights);
    AlgoClientRound round;
    AlgoClientCtx view;
    return ops->weigh(plugin_view(ops, c, &round, &view), b, weights);
}

int algo_ops_report_end(const AlgoOps *ops, AlgoClientCtx *c)
{
    FH_CHECK(ops->report_end(c));
    if (!ops->plugin_report_end) return FH_OK;
    AlgoClientRound round;
    AlgoClientCtx view;
    return ops->plugin_report_end(plugin_view(ops, c, &round, &view));
}

int algo_ops_weights(const AlgoOps *ops, const AlgoServerCtx *s, const AlgoUpload *u, int m, double *p)
{
    if (!ops->weights_by_plugin) return ops->weights->weights(s, u, m, p);
    AlgoServerCtx view = *s;
    view.options = ops->plugin_options;
    view.scratch = scratch_after((AlgoScratch){ s->scratch.base, ops->sizes.server_scratch }, ops->host_server_scratch);
    for (int i = 0; i < m; i++) {
        ops->plugin_uploads[i] = u[i];
        ops->plugin_uploads[i].scalars = u[i].scalars + ops->host_upload_scalars;
    }
    return ops->weights->weights(&view, ops->plugin_uploads, m, p);
}

double algo_ops_method_scalar(const AlgoOps *ops, const double *server_scalars, int round)
{
    if (ops->sizes.shown_server_scalar >= 0) return server_scalars[ops->sizes.shown_server_scalar];
    if (!ops->round_scalar) return NAN;
    return ops->round_scalar(ops->round_scalar_by_plugin ? ops->plugin_options : ops->options, round);
}
