/* A method and its plug-in composed into one table of hooks (include/fedhet/algo.h, "a method composed with its
 * plug-in"): the defaults and the composition rules in one place. */
#include "algo_internal.h"

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

int algo_ops_compose(AlgoOps *ops, const AlgoMethod *m, const AlgoMethod *plugin)
{
    memset(ops, 0, sizeof *ops);
    const char *extra = plugin ? plugin_extra_hook(plugin) : NULL;
    if (extra) FH_FAIL(FH_ERR_USAGE, "plug-in %s has %s, which no composition rule joins to a host", plugin->name, extra);
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
    ops->plugin_report_end = plugin && plugin->report && plugin->report->end ? plugin->report->end : nothing;
    ops->update = m->update && m->update->update ? m->update->update : algo_average;
    ops->server_init = m->server_init ? m->server_init : no_server_init;
    ops->round_scalar = m->round_scalar;
    if (!ops->round_scalar && plugin && plugin->round_scalar) {
        ops->round_scalar = plugin->round_scalar;
        ops->round_scalar_by_plugin = 1;
    }
    return FH_OK;
}
