/* Flatness diagnostics of a model state (docs/methods/sam.md §12 definitions, used by metrics.csv
 * sharpness / perturbed_loss): the loss L0 on a probe set, the loss L1 after the worst-case step of
 * radius rho along the probe set's full gradient, in eval mode with plain cross-entropy. */
#include "algo_internal.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

/* layout of work: [n_state] the perturbed state, [max_batch * classes] logit gradients */
int64_t algo_sam_sharpness_work(const NnModel *m) { return m->n_state + (int64_t)m->max_batch * m->classes; }

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
        memset(dlogits, 0, (size_t)count * m->classes * sizeof(float));
        const float l = nn_softmax_xent(dlogits, NULL, nn_model_logits(m), y + first, NULL, NULL, count, m->classes);
        sum += (double)l * count;
        if (with_grad) {
            nn_vec_scale(dlogits, (float)count, (int64_t)count * m->classes); /* mean -> sum over the samples */
            nn_model_backward(m, dlogits, NULL);                               /* accumulates over the chunks */
        }
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
        /* e = rho G/(||G|| + 1e-12) on the trainable part (FedISM's get_perturb_model) */
        double sq = 0.0;
        for (int64_t j = 0; j < m->n_params; j++) sq += (double)m->grad[j] * (double)m->grad[j];
        const float scale = (float)(rho / (sqrt(sq) + 1e-12));
        nn_vec_copy(pert, state, m->n_state);
        nn_vec_axpy(pert, scale, m->grad, m->n_params);
        m->state = pert;
        status = probe_pass(m, x, y, n, dlogits, 0, perturbed);
    }
    m->state = saved;
    nn_model_set_training(m, training);
    return status;
}
