/* The sharpness probe (docs/methods/sam.md §12 definitions): the loss L0 on a set, the loss L1 after the
 * worst-case step of radius rho along the set's full gradient, in eval mode with plain cross-entropy; over a
 * probe set in memory (metrics.csv sharpness / perturbed_loss) or over a client's local set streamed batch by
 * batch (FedISM's and FedISM+'s reports). */
#include "algo_internal.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

/* layout of work: [n_state] the perturbed state, [max_batch * classes] logit gradients */
int64_t algo_sam_sharpness_work(const NnModel *m) { return m->n_state + (int64_t)m->max_batch * m->classes; }

/* the summed plain CE of the first `use` of a batch's `count` rows (logits at m->state); with_grad: + the gradient
 * of that sum, accumulated into m->grad (rows past `use` give none) */
static double batch_loss(NnModel *m, const float *logits, const int32_t *y, int count, int use, float *dlogits,
                         int with_grad)
{
    memset(dlogits, 0, (size_t)count * m->classes * sizeof(float));
    const float l = nn_softmax_xent(dlogits, NULL, logits, y, NULL, NULL, use, m->classes);
    if (with_grad) {
        nn_vec_scale(dlogits, (float)use, (int64_t)use * m->classes); /* mean -> sum over the samples */
        nn_model_backward(m, dlogits, NULL);                           /* accumulates over the batches */
    }
    return (double)l * use;
}

/* pert = state + e, e = rho G/(||G|| + 1e-12) on the trainable part, G = m->grad (FedISM's get_perturb_model) */
static void perturb(const NnModel *m, const float *state, double rho, float *pert)
{
    const float scale = (float)(rho / (sqrt(nn_vec_dot_ordered(m->grad, m->grad, m->n_params)) + 1e-12));
    nn_vec_copy(pert, state, m->n_state);
    nn_vec_axpy(pert, scale, m->grad, m->n_params);
}

/* mean CE over the probe at m->state; with_grad: also sum of per-sample gradients into m->grad */
static int probe_pass(NnModel *m, const float *x, const int32_t *y, int64_t n, float *dlogits, int with_grad,
                      double *loss)
{
    const int64_t row = m->tensors[m->input].size;
    double sum = 0.0;
    if (with_grad) nn_model_zero_grad(m);
    for (int64_t first = 0; first < n; first += m->max_batch) {
        const int count = (int)(n - first < m->max_batch ? n - first : m->max_batch);
        FH_CHECK(nn_model_forward(m, x + first * row, count));
        sum += batch_loss(m, nn_model_logits(m), y + first, count, count, dlogits, with_grad);
    }
    *loss = n > 0 ? sum / (double)n : 0.0;
    return FH_OK;
}

int algo_sam_sharpness(NnModel *m, const float *state, const float *x, const int32_t *y, int64_t n, double rho,
                       float *work, double *loss, double *perturbed)
{
    float *saved = m->state, *pert = work, *dlogits = work + m->n_state;
    const int training = m->training;
    nn_model_set_training(m, 0); /* running statistics, nothing updated (docs/methods/sam.md §0.3) */
    m->state = (float *)state;
    int status = probe_pass(m, x, y, n, dlogits, 1, loss);
    if (status == FH_OK) {
        perturb(m, state, rho, pert);
        m->state = pert;
        status = probe_pass(m, x, y, n, dlogits, 0, perturbed);
    }
    m->state = saved;
    nn_model_set_training(m, training);
    return status;
}

#define LOCAL_PASS_DONE (-1) /* a batch callback's value that ends for_each_local_batch early */

typedef struct {
    NnModel *model;
    float *dlogits;
    int with_grad;
    int64_t rows; /* rows to use, 0: all */
    double sum;
    int64_t n;
} LocalPass;

/* plain CE of (the first rows of) one batch (eval mode); with_grad: + the gradient of their summed loss */
static int local_pass_batch(void *env, const AlgoBatch *b)
{
    LocalPass *e = env;
    const int use = e->rows > 0 && e->rows - e->n < b->count ? (int)(e->rows - e->n) : b->count;
    e->sum += batch_loss(e->model, b->logits, b->y, b->count, use, e->dlogits, e->with_grad);
    e->n += use;
    return e->rows > 0 && e->n >= e->rows ? LOCAL_PASS_DONE : FH_OK;
}

/* algo_sam_sharpness's definitions over the client's whole local set (rows > 0: its first `rows` rows in file
 * order), streamed batch by batch through c->svc->for_each_local_batch (eval mode, no augmentation): G = sum of the
 * per-sample CE gradients at `state`, e = rho G/(||G|| + 1e-12) on the trainable part, *L0 = mean CE at state,
 * *L1 = mean CE at state + e. pert: n_state floats of scratch (holds state + e); the logit gradients of a batch
 * come from c's scratch (algo_local_sharpness_scratch). Uses model's gradient and activations. */
int algo_local_sharpness(AlgoClientCtx *c, NnModel *model, const float *state, double rho, int64_t rows, float *pert,
                         double *L0, double *L1)
{
    AlgoScratch scratch = c->state.scratch;
    LocalPass e = { .model = model, .with_grad = 1, .rows = rows };
    e.dlogits = algo_scratch_take(&scratch, (size_t)model->max_batch * model->classes, sizeof(float),
                                  "the local sharpness's logit gradients");
    nn_model_zero_grad(model);
    int status = c->svc->for_each_local_batch(c, model, state, local_pass_batch, &e);
    if (status == LOCAL_PASS_DONE) status = FH_OK;
    if (status == FH_OK) {
        *L0 = e.n > 0 ? e.sum / (double)e.n : 0.0;
        perturb(model, state, rho, pert);
        e = (LocalPass){ .model = model, .dlogits = e.dlogits, .rows = rows };
        status = c->svc->for_each_local_batch(c, model, pert, local_pass_batch, &e);
        if (status == LOCAL_PASS_DONE) status = FH_OK;
        *L1 = e.n > 0 ? e.sum / (double)e.n : 0.0;
    }
    return status;
}

size_t algo_local_sharpness_scratch(const AlgoSetup *s)
{
    return algo_scratch_bytes((size_t)s->batch_size * s->classes, sizeof(float));
}
