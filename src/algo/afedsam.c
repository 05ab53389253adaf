/* A-FedSAM (docs/methods/sam.md §15, RECONSTRUCTED: the seed lost every formula and no code was found), family
 * 'wmsam': its parts; its registry row is in fedwmsam.c's family table.
 *
 * FedSAM's local SAM step (sam.c's algo_sam_step: SAM, ASAM or GSAM after the shared perturbation part) with a KL
 * distillation term from the global model at the perturbed point, weighted by a growing mu_t:
 *   g    = grad CE(w; xi)                                  fb 1 (no distillation)
 *   r    = grad [CE(w + eps; xi) + mu_t T^2 KL(softmax(z_t/T) || softmax(z(w + eps)/T))]   fb 2
 *   mu_t = (1 - lambda) mu_{t-1} + lambda mu_max, mu_0 = 0 (= mu_max (1 - (1 - lambda)^t))
 * The teacher z_t: the global model w^t received this round (teacher = global) or the server's moving average of
 * the global models (teacher = ema, +1P down), forwarded once per step on aux model 0 in eval mode, in the step's
 * first pass (its logits stay in the aux model for the second). The pass is told apart by the student's BatchNorm
 * flag: sam.c's two-pass step runs the perturbed pass with bn_update_running = 0 (docs/methods/sam.md §0.3).
 * Server scalar 0: mu_t (metrics.csv method_scalar); server vector 0 (teacher = ema): the teacher. mu_t = 0
 * (mu_max = 0 or lambda = 0, and round 0) skips the teacher and the term: FedSAM bit for bit. */
#include "algo_internal.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

/* A-FedSAM's own keys; the radius, weights and perturbation are sam.c's parts */
enum { AF_TEACHER_GLOBAL, AF_TEACHER_EMA };
typedef struct {
    double mu_max, lambda, temperature;
    int teacher;
} AfedsamOptions;
static const AlgoOption afedsam_keys[] = {
    { ALGO_NUMBER(AfedsamOptions, mu_max), .def.f = 1.0, .lo = 0.0, .hi = 1e6,
      .help = "limit mu_max >= 0 of the distillation weight mu_t = (1 - lambda) mu_{t-1} + lambda mu_max, mu_0 = 0 "
              "(the paper: an exponentially weighted moving average, small early, growing) [RECON: value 1 "
              "PROPOSED]; 0 is FedSAM bit for bit" },
    { ALGO_NUMBER(AfedsamOptions, lambda), .def.f = 0.01, .lo = 0.0, .hi = 1.0,
      .help = "growth rate lambda in [0, 1] of mu_t (the paper's lambda: too small, weak guidance; too large, strong "
              "guidance too early) [RECON: 0.01 per round PROPOSED]; also the teacher = ema rate; 0 keeps mu_t = 0" },
    { ALGO_NUMBER(AfedsamOptions, temperature), .def.f = 4.0, .lo = 1.0, .hi = 1000.0,
      .help = "distillation temperature T >= 1 of mu_t T^2 KL(softmax(z_t/T) || softmax(z/T)); default 4 (the "
              "paper, following FedGKD: 1 -> 4 improves, higher worse)" },
    { ALGO_CHOICE(AfedsamOptions, teacher), .def.s = "global", .choices = "global|ema",
      .help = "global (w^t, the received global model: no extra download, the paper's claim; default) or ema (the "
              "server's average tbar <- (1 - lambda) tbar + lambda w^{t+1} from tbar_0 = w^0, +1P down) [RECON]. "
              "The documented third option (KL at the unperturbed w, a third backward) is not implemented" },
};
const AlgoOptionPart afedsam_options = ALGO_OPTION_PART("afedsam", AfedsamOptions, afedsam_keys);
ALGO_OPTIONS_OF(afedsam_of, AfedsamOptions, afedsam_options)
enum { AF_SC_MU };

/* mu_{t+1} = (1 - lambda) mu_t + lambda mu_max (docs/methods/sam.md §15) */
static double afedsam_next_mu(double mu, double lambda, double mu_max) { return (1.0 - lambda) * mu + lambda * mu_max; }

/* the teacher into aux[0], eval mode (nothing while mu_t = 0) */
static int afedsam_begin(AlgoClientCtx *c)
{
    if (!(c->round->server_scalars[AF_SC_MU] > 0.0)) return FH_OK;
    NnModel *t = c->state.aux[0];
    nn_model_set_training(t, 0);
    nn_vec_copy(t->state,
                afedsam_of(c->round->options)->teacher == AF_TEACHER_EMA ? c->round->server_vecs : c->round->global,
                c->round->n_state);
    return FH_OK;
}

/* first pass (at w, BatchNorm statistics updated): the teacher's logits of the step's batch, no term; second pass
 * (at w + eps, statistics frozen): mu_t T^2 KL(teacher || student) (FedGKD's convention, docs/methods/sam.md §14) */
static double afedsam_batch_term(AlgoClientCtx *c, const AlgoBatch *b, float *dlogits, float *dfeatures)
{
    const double mu = c->round->server_scalars[AF_SC_MU];
    if (!(mu > 0.0)) return 0.0;
    NnModel *t = c->state.aux[0];
    if (c->model->bn_update_running) return nn_model_forward(t, b->x, b->count) == FH_OK ? 0.0 : NAN;
    return nn_kl_distill(dlogits, b->logits, nn_model_logits(t), (float)afedsam_of(c->round->options)->temperature,
                         (float)mu, b->count, b->classes);
}

int afedsam_init(AlgoServerCtx *s, float *global)
{
    s->server_scalars[AF_SC_MU] = 0.0;
    if (afedsam_of(s->options)->teacher == AF_TEACHER_EMA) nn_vec_copy(s->server_vecs, global, s->n_state);
    return FH_OK;
}

/* after FedSAM's weighted average (global holds it): mu_{t+1}; teacher = ema: tbar <- (1 - lambda) tbar +
 * lambda w^{t+1} (whole state) */
static int afedsam_finish(AlgoServerCtx *s, const float *sums, float *global)
{
    const AfedsamOptions *o = afedsam_of(s->options);
    const double lambda = o->lambda;
    s->server_scalars[AF_SC_MU] = afedsam_next_mu(s->server_scalars[AF_SC_MU], lambda, o->mu_max);
    if (o->teacher == AF_TEACHER_EMA) {
        float *tbar = s->server_vecs;
        for (int64_t j = 0; j < s->n_state; j++)
            tbar[j] = (float)((1.0 - lambda) * (double)tbar[j] + lambda * (double)global[j]);
    }
    return FH_OK;
}

int afedsam_validate(const AlgoMethod *meth, const AlgoSetup *s)
{
    FH_CHECK(algo_refuse_nonfinite(meth, s->options));
    return algo_sam_validate(meth, s);
}

void afedsam_sizes(const AlgoSetup *s, AlgoSizes *z)
{
    algo_sam_sizes(s, z);
    z->aux_models = 1;
    z->server_scalars = 1;
    z->server_vectors = afedsam_of(s->options)->teacher == AF_TEACHER_EMA;
    z->shown_server_scalar = AF_SC_MU;
}

const AlgoBatchTerm afedsam_term_part = { .batch_term = afedsam_batch_term };
const AlgoClientReport afedsam_report_part = { .begin = afedsam_begin };
const AlgoServerUpdate afedsam_update_part = { .finish = afedsam_finish };
