/* Local training of one client (docs/methods/baselines.md §0.1), written once; methods change it only through their hooks. */
#include "fl_internal.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

/* The services hooks call (AlgoClientServices), defined with the local loop below */
static void grad_terms(AlgoClientCtx *c, float *grad, double *loss);
static int eval_local(AlgoClientCtx *c, NnModel *model, const float *state, AlgoLocalEval *out);
static int for_each_local_batch(AlgoClientCtx *c, NnModel *model, const float *state,
                                int (*fn)(void *env, const AlgoBatch *b), void *env);
static int probe_grad(AlgoClientCtx *c, int index, const float *state, double *loss, int64_t *rows);

/* the configured optimiser's step (AlgoClientServices.optimizer_step), one of them picked at fl_client_init */
static void sgd_step(AlgoClientCtx *c, float *w, const float *grad)
{
    FlClientWork *work = c->runtime;
    nn_sgd_step(&work->sgd, w, grad, (float)c->round->lr);
}

static void adam_step(AlgoClientCtx *c, float *w, const float *grad)
{
    FlClientWork *work = c->runtime;
    nn_adam_step(&work->adam, w, grad, (float)c->round->lr);
}

int fl_clients_per_round(const FlSettings *s, int K)
{
    if (!strcmp(s->selection, "all")) return K;
    if (!strcmp(s->selection, "bernoulli")) return -1;
    int m = !strcmp(s->selection, "count") ? (s->count < K ? s->count : K) : (int)floor(s->fraction * K);
    return m < 1 ? 1 : m;
}

void fl_algo_setup(AlgoSetup *a, const FlSettings *s, const NnModel *m, int K, int classes)
{
    *a = (AlgoSetup){ .options = fl_method_options(s), .n_clients = K, .per_round = fl_clients_per_round(s, K),
                      .all_clients = !strcmp(s->selection, "all"), .rounds = s->rounds,
                      .n_params = m ? m->n_params : 0, .n_state = m ? m->n_state : 0,
                      .feature_size = m ? nn_model_features_size(m) : 0, .classes = classes,
                      .optimizer = s->optimizer, .lr = s->lr, .momentum = s->momentum,
                      .weight_decay = s->weight_decay, .clip = s->clip, .steps = s->steps, .epochs = s->epochs,
                      .batch_size = s->batch_size, .seed = s->seed, .lr_decay = s->lr_decay };
}

int fl_init_kind(const FlSettings *s)
{
    if (!strcmp(s->init, "random")) return FL_INIT_RANDOM;
    if (!strcmp(s->init, "onnx") || (!*s->init && s->net)) return FL_INIT_ONNX;
    return *s->init ? FL_INIT_FILE : FL_INIT_RANDOM;
}

int fl_client_init(FlClientWork *w, const FlSettings *s, DataPartFile *f, const int *owned, int n_owned)
{
    memset(w, 0, sizeof *w);
    w->s = s;
    w->data = f;
    w->n_owned = n_owned;
    const AlgoMethod *m = s->method;
    const NnShape shape = { f->c, f->h, f->w };
    FH_CHECK(fl_model_build(&w->model, s, shape, f->classes, f->n_clients, s->batch_size));
    fl_algo_setup(&w->setup, s, &w->model, f->n_clients, f->classes);
    FH_CHECK(algo_ops_compose(&w->ops, &w->setup, fl_plugin_options(s)));
    const AlgoSizes *z = &w->ops.sizes;
    if (z->aux_models > ALGO_MAX_AUX)
        FH_FAIL(FH_ERR_USAGE, "method %s asks for %d extra models (at most %d)", m->name, z->aux_models, ALGO_MAX_AUX);
    for (int a = 0; a < z->aux_models; a++)
        FH_CHECK(fl_model_build(&w->aux[a], s, shape, f->classes, f->n_clients, s->batch_size));
    /* settings made in code rather than from a config leave these unset: automatic, torchvision's crop */
    const char *augment = s->augment ? s->augment : "auto";
    FH_CHECK(data_loader_init(&w->loader, f, owned, n_owned, !strcmp(augment, "on") ? 1 : !strcmp(augment, "off") ? 0 : -1));
    if (s->crop.scale_max > 0) data_loader_set_crop(&w->loader, &s->crop);
    const size_t row = (size_t)f->c * f->h * f->w;
    FH_CHECK(fh_alloc_aligned(&w->x, (size_t)s->batch_size * row * sizeof(float), "input batch"));
    FH_CHECK(fh_calloc(&w->y, (size_t)s->batch_size, sizeof *w->y, "label batch"));
    FH_CHECK(fh_alloc_aligned(&w->dlogits, (size_t)s->batch_size * f->classes * sizeof(float), "logit gradients"));
    if (w->ops.has_weigh)
        FH_CHECK(fh_calloc(&w->sample_w, (size_t)s->batch_size, sizeof *w->sample_w, "sample weights"));
    if (w->ops.has_batch_term)
        FH_CHECK(fh_alloc_aligned(&w->dfeatures, (size_t)s->batch_size * w->setup.feature_size * sizeof(float),
                                  "feature gradients"));
    if (s->logit_adjust > 0)
        FH_CHECK(fh_calloc(&w->logit_adjust, (size_t)f->classes, sizeof *w->logit_adjust, "logit adjustment"));
    const int64_t n_params = w->model.n_params, n_state = w->model.n_state;
    w->sgd_on = !strcmp(s->optimizer, "sgd");
    if (w->sgd_on)
        FH_CHECK(nn_sgd_init(&w->sgd, n_params, (float)s->momentum, (float)s->weight_decay, 0));
    else
        FH_CHECK(nn_adam_init(&w->adam, n_params, (float)s->beta1, (float)s->beta2, (float)s->eps,
                              (float)s->weight_decay, !strcmp(s->optimizer, "adamw")));
    w->svc = (AlgoClientServices){ .optimizer_step = w->sgd_on ? sgd_step : adam_step, .grad_terms = grad_terms,
                                   .eval_local = eval_local, .for_each_local_batch = for_each_local_batch,
                                   .probe_grad = probe_grad };
    if (z->work_vectors > 0)
        FH_CHECK(fh_alloc_aligned(&w->work, (size_t)z->work_vectors * n_state * sizeof(float), "method scratch vectors"));
    if (z->client_scratch > 0) FH_CHECK(fh_alloc_aligned(&w->scratch, z->client_scratch, "method scratch"));
    w->block = (int64_t)z->client_vectors * n_state + z->client_floats + 1;
    if (n_owned > 0) {
        FH_CHECK(fh_alloc_aligned(&w->client_state, (size_t)w->block * sizeof(float), "persistent client state"));
        memset(w->client_state, 0, (size_t)w->block * sizeof(float));
    }
    return FH_OK;
}

void fl_client_free(FlClientWork *w)
{
    nn_model_free(&w->model);
    for (int a = 0; a < ALGO_MAX_AUX; a++)
        if (w->aux[a].finalized || w->aux[a].layers) nn_model_free(&w->aux[a]);
    data_loader_free(&w->loader);
    fh_free(&w->x);
    fh_free(&w->y);
    fh_free(&w->dlogits);
    fh_free(&w->dfeatures);
    fh_free(&w->sample_w);
    fh_free(&w->logit_adjust);
    fh_free(&w->work);
    fh_free(&w->scratch);
    algo_ops_free(&w->ops);
    fh_free(&w->client_state);
    nn_sgd_free(&w->sgd);
    nn_adam_free(&w->adam);
}

/* Per-sample passes so far of every model instance the client trains with (the model and the method's
 * extra models). */
static void count_passes(const FlClientWork *w, int64_t *forward, int64_t *backward)
{
    *forward = w->model.forward_samples;
    *backward = w->model.backward_samples;
    for (int a = 0; a < w->ops.sizes.aux_models; a++) {
        *forward += w->aux[a].forward_samples;
        *backward += w->aux[a].backward_samples;
    }
}

/* Adds the passes made since (forward0, backward0) to the scoring services' tally. */
static void add_service_passes(FlClientWork *w, int64_t forward0, int64_t backward0)
{
    int64_t forward, backward;
    count_passes(w, &forward, &backward);
    w->service_forward += forward - forward0;
    w->service_backward += backward - backward0;
}

/* Every batch of the client's whole training set through `model` at `state`, in eval mode and file order,
 * in batches of the training batch size. */
static int for_each_local_batch(AlgoClientCtx *c, NnModel *model, const float *state,
                                int (*fn)(void *env, const AlgoBatch *b), void *env)
{
    FlClientWork *w = c->runtime;
    float *saved = model->state;
    model->state = (float *)state;
    const int training = model->training;
    nn_model_set_training(model, 0);
    int64_t forward0, backward0;
    count_passes(w, &forward0, &backward0);
    int status = FH_OK;
    for (int64_t first = 0; status == FH_OK; first += w->s->batch_size) {
        const int64_t count = data_loader_rows(&w->loader, c->round->client, first, w->s->batch_size, w->x, w->y);
        if (count == 0) break;
        status = nn_model_forward(model, w->x, (int)count);
        if (status != FH_OK) break;
        const AlgoBatch b = { w->x, w->y, (int)count, model->classes, nn_model_logits(model), nn_model_features(model),
                              nn_model_features_size(model) };
        status = fn(env, &b);
    }
    model->state = saved;
    nn_model_set_training(model, training);
    add_service_passes(w, forward0, backward0);
    return status;
}

typedef struct {
    FlClientWork *w;
    double loss;
    int64_t correct, n, hits[256], seen[256];
} LocalEvalSums;

static int eval_batch(void *env, const AlgoBatch *b)
{
    LocalEvalSums *e = env;
    memset(e->w->dlogits, 0, (size_t)b->count * b->classes * sizeof(float));
    e->loss += (double)nn_softmax_xent(e->w->dlogits, NULL, b->logits, b->y, NULL, NULL, b->count, b->classes) *
               (double)b->count;
    for (int i = 0; i < b->count; i++) {
        int best = 0;
        for (int k = 1; k < b->classes; k++)
            if (b->logits[(int64_t)i * b->classes + k] > b->logits[(int64_t)i * b->classes + best]) best = k;
        e->seen[b->y[i]]++;
        if (best == b->y[i]) {
            e->hits[b->y[i]]++;
            e->correct++;
        }
    }
    e->n += b->count;
    return FH_OK;
}

/* Mean CE, accuracy and balanced accuracy of `state` on the client's whole training set. */
static int eval_local(AlgoClientCtx *c, NnModel *model, const float *state, AlgoLocalEval *out)
{
    if (model->classes > 256) FH_FAIL(FH_ERR_USAGE, "local evaluation supports at most 256 classes (%d)", model->classes);
    LocalEvalSums e;
    memset(&e, 0, sizeof e);
    e.w = c->runtime;
    FH_CHECK(for_each_local_batch(c, model, state, eval_batch, &e));
    double recall = 0.0;
    int present = 0;
    for (int k = 0; k < model->classes; k++)
        if (e.seen[k] > 0) {
            recall += (double)e.hits[k] / (double)e.seen[k];
            present++;
        }
    out->loss = e.n ? e.loss / (double)e.n : 0.0;
    out->accuracy = e.n ? (double)e.correct / (double)e.n : 0.0;
    out->balanced_accuracy = present ? recall / present : 0.0;
    return FH_OK;
}

typedef struct {
    FlClientWork *w;
    int64_t count;
} GradEnv;

/* After the backward pass: local terms at model->state (their value into *loss), correction, clip. */
static void grad_terms(AlgoClientCtx *c, float *grad, double *loss)
{
    FlClientWork *w = c->runtime;
    NnModel *m = c->model;
    *loss += w->ops.grad_term(c, m->state, grad);
    w->ops.correct(c, grad);
    if (w->s->clip > 0) nn_clip_grad_norm(grad, m->n_params, (float)w->s->clip);
}

/* Loss and gradient of the current batch at model->state, local terms and correction included (only the
 * pure loss gradient while c->state.grad_pure is set). */
static int batch_grad(void *env_ptr, double *loss)
{
    GradEnv *env = env_ptr;
    FlClientWork *w = env->w;
    NnModel *m = &w->model;
    AlgoClientCtx *c = &w->ctx;
    m->dropout_ctr[0] = (uint32_t)c->round->t;
    m->dropout_ctr[1] = (uint32_t)c->round->client;
    m->dropout_ctr[2] = (uint32_t)c->state.step;
    nn_model_zero_grad(m);
    FH_CHECK(nn_model_forward(m, w->x, (int)env->count));
    const AlgoBatch b = { w->x, w->y, (int)env->count, m->classes, nn_model_logits(m), nn_model_features(m),
                          w->setup.feature_size };
    /* sample weights come from the step's first forward (a SAM step's perturbed pass reuses them) */
    float *weights = w->sample_w;
    if (weights && w->weighed_step != c->state.step) {
        w->weighed_step = c->state.step;
        FH_CHECK(algo_ops_weigh(&w->ops, c, &b, weights));
    }
    memset(w->dlogits, 0, (size_t)env->count * m->classes * sizeof(float));
    *loss = nn_softmax_xent(w->dlogits, NULL, nn_model_logits(m), w->y, weights, w->logit_adjust, (int)env->count,
                            m->classes);
    float *dfeatures = NULL;
    if (w->ops.has_batch_term) {
        dfeatures = w->dfeatures;
        memset(dfeatures, 0, (size_t)env->count * w->setup.feature_size * sizeof(float));
        *loss += w->ops.batch_term(c, &b, w->dlogits, dfeatures);
    }
    nn_model_backward(m, w->dlogits, dfeatures);
    if (!c->state.grad_pure) grad_terms(c, m->grad, loss);
    return FH_OK;
}

/* AlgoClientServices.probe_grad (FedSCAM, docs/methods/sam.md §10): batch `index` of the extra shuffle (epoch
 * 0xFFFFFFFF), kept in the batch buffers until another batch is asked for; the gradient of the mean CE at `state`
 * in train mode, BatchNorm running statistics frozen. Only while report->begin runs: the shuffle shares the
 * loader's order with training. */
static int probe_grad(AlgoClientCtx *c, int index, const float *state, double *loss, int64_t *rows)
{
    FlClientWork *w = c->runtime;
    NnModel *m = c->model;
    const int64_t batch = w->s->batch_size;
    *rows = 0;
    *loss = 0.0;
    if (!w->probe_open) FH_FAIL(FH_ERR_USAGE, "method %s: probe gradients are available in report->begin only",
                                w->s->method->name);
    if (index < 0 || (int64_t)index * batch >= c->round->n_samples) return FH_OK; /* never into a second pass */
    if (index < w->probe_loaded || w->probe_loaded < 0) {
        FH_CHECK(data_loader_begin_epoch(&w->loader, &w->probe_it, c->round->client, (uint64_t)w->s->seed,
                                         (uint32_t)c->round->t, 0xFFFFFFFFu));
        w->probe_loaded = -1;
    }
    while (w->probe_loaded < index) {
        w->probe_rows = data_loader_next(&w->loader, &w->probe_it, batch, w->x, w->y);
        w->probe_loaded++;
    }
    float *saved = m->state;
    const int bn = m->bn_update_running;
    m->state = (float *)state;
    m->bn_update_running = 0;
    m->dropout_ctr[0] = (uint32_t)c->round->t;
    m->dropout_ctr[1] = (uint32_t)c->round->client;
    m->dropout_ctr[2] = 0xFFFFFFFFu - (uint32_t)index;
    nn_model_zero_grad(m);
    int64_t forward0, backward0;
    count_passes(w, &forward0, &backward0);
    const int status = nn_model_forward(m, w->x, (int)w->probe_rows);
    if (status == FH_OK) {
        memset(w->dlogits, 0, (size_t)w->probe_rows * m->classes * sizeof(float));
        *loss = nn_softmax_xent(w->dlogits, NULL, nn_model_logits(m), w->y, NULL, w->logit_adjust, (int)w->probe_rows,
                                m->classes);
        nn_model_backward(m, w->dlogits, NULL);
        *rows = w->probe_rows;
    }
    add_service_passes(w, forward0, backward0);
    m->state = saved;
    m->bn_update_running = bn;
    return status;
}

/* docs/methods/baselines.md A.22: tau log pi_c of the client's label distribution; absent classes are -inf (no mass, no gradient) */
static void set_logit_adjust(FlClientWork *w, int client, int64_t n)
{
    if (!w->logit_adjust) return;
    const int32_t *counts = w->data->label_counts + (size_t)client * w->data->classes;
    for (int k = 0; k < w->data->classes; k++)
        w->logit_adjust[k] = counts[k] > 0 ? (float)(w->s->logit_adjust * log((double)counts[k] / (double)n)) : -INFINITY;
}

int fl_client_train(FlClientWork *w, const FlRecordLayout *l, const float *global, const float *server_vecs,
                    const double *server_scalars, int client, int slot_in_round, int round, double lr, void *record)
{
    const double t0 = fh_time_now();
    const FlSettings *s = w->s;
    const AlgoMethod *meth = s->method;
    NnModel *m = &w->model;
    const int64_t n = data_loader_client_rows(&w->loader, client);
    if (n < 0) FH_FAIL(FH_ERR_USAGE, "client %d is not held by this rank", client);
    float *block = w->client_state; /* fl_store_load filled it */

    nn_vec_copy(m->state, global, m->n_state);
    nn_model_set_training(m, 1);
    m->dropout_seed = (uint64_t)s->seed;
    if (w->sgd_on) nn_sgd_reset(&w->sgd); /* docs/methods/baselines.md §0.1.1: fresh optimiser state */
    else nn_adam_reset(&w->adam);
    set_logit_adjust(w, client, n);

    FlRecordHeader *h = fl_record_header(record);
    memset(record, 0, l->header_bytes);
    const int64_t steps = s->steps > 0 ? s->steps : (int64_t)s->epochs * ((n + s->batch_size - 1) / s->batch_size);
    w->round = (AlgoClientRound){
        .client = client, .t = round, .slot = slot_in_round, .lr = lr, .n_samples = n, .n_params = m->n_params,
        .n_state = m->n_state, .has_state = block[w->block - 1] != 0.0f, .setup = &w->setup, .sizes = &w->ops.sizes,
        .options = fl_method_options(s), .method = meth, .global = global, .server_vecs = server_vecs,
        .server_scalars = server_scalars, .label_counts = w->data->label_counts + (size_t)client * w->data->classes,
    };
    AlgoClientCtx *c = &w->ctx;
    const AlgoSizes *z = &w->ops.sizes;
    const int64_t state_floats = (int64_t)z->client_vectors * m->n_state;
    *c = (AlgoClientCtx){
        .model = m, .round = &w->round, .svc = &w->svc, .runtime = w,
        .state = { .client_vecs = z->client_vectors ? block : NULL,
                   .client_floats = z->client_floats ? block + state_floats : NULL,
                   .upload_vecs = l->n_vectors ? fl_record_state(record, l) + m->n_state : NULL,
                   .upload_scalars = fl_record_scalars(record), .work = w->work, .scratch = algo_ops_client_scratch(&w->ops, w->scratch),
                   .momentum_buf = w->sgd_on ? w->sgd.buf : NULL, .n_steps = n > 0 ? steps : 0 },
    };
    for (int a = 0; a < z->aux_models; a++) c->state.aux[a] = &w->aux[a];
    w->weighed_step = -1;
    int64_t forward0, backward0, forward1, backward1, forward2, backward2, forward3, backward3;
    count_passes(w, &forward0, &backward0);
    w->probe_open = 1; /* probe_grad: from report->begin only */
    w->probe_loaded = -1;
    FH_CHECK(w->ops.report_begin(c));
    w->probe_open = 0;
    if (c->state.momentum_kept && c->state.momentum_buf) w->sgd.steps = 1; /* PyTorch: a kept buffer is continued */

    DataBatchIter it;
    FH_CHECK(data_loader_begin(&w->loader, &it, client, (uint64_t)s->seed, (uint32_t)round));
    double loss_sum = 0.0;
    int nonfinite = 0;
    GradEnv env = { w, 0 };
    count_passes(w, &forward1, &backward1);
    const int64_t service_forward1 = w->service_forward, service_backward1 = w->service_backward;
    for (c->state.step = 0; c->state.step < c->state.n_steps; c->state.step++) {
        if (w->leave_poll && w->leave_poll(w->leave_arg)) {
            w->left = 1; /* a stop request: the round is left, and nothing of this client is kept */
            return FH_OK;
        }
        env.count = data_loader_next(&w->loader, &it, s->batch_size, w->x, w->y);
        double loss = 0.0;
        FH_CHECK(w->ops.step(c, batch_grad, &env, &loss));
        loss_sum += loss;
        c->state.loss_sample_sum += loss * (double)env.count;
        c->state.samples_seen += env.count;
        if (!isfinite(loss)) {
            nonfinite = 1; /* the server stops the run; training on would only spread the NaN */
            c->state.step++;
            break;
        }
    }
    count_passes(w, &forward2, &backward2);
    /* the steps' passes, less what the scoring services did inside them (e.g. sample weights from a whole-set pass) */
    h->train_forward = forward2 - forward1 - (w->service_forward - service_forward1);
    h->train_backward = backward2 - backward1 - (w->service_backward - service_backward1);
    FH_CHECK(algo_ops_report_end(&w->ops, c));
    block[w->block - 1] = 1.0f;
    count_passes(w, &forward3, &backward3);
    h->score_forward = forward3 - forward0 - h->train_forward;
    h->score_backward = backward3 - backward0 - h->train_backward;
    h->client = client;
    h->n_samples = n;
    h->n_steps = c->state.step;
    h->nonfinite = nonfinite;
    h->train_loss = c->state.step > 0 ? loss_sum / (double)c->state.step : 0.0;
    nn_vec_copy(fl_record_state(record, l), m->state, m->n_state);
    h->seconds = fh_time_now() - t0;
    /* metrics.csv drift (docs/methods/metrics.md C.7), measured where the state is: a folded round sends rank 0 no state */
    h->drift2_params = nn_vec_dist2_ordered(m->state, global, m->n_params);
    h->drift2_buffers = nn_vec_dist2_ordered(m->state + m->n_params, global + m->n_params, m->n_state - m->n_params);
    return FH_OK;
}
