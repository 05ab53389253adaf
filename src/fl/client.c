/* Local training of one client (spec 0.1), written once; methods change it only through their hooks. */
#include "fl_internal.h"

#include <math.h>
#include <string.h>

#include "fedhet/core.h"

static void optimizer_step(AlgoClientCtx *c, float *w, const float *grad)
{
    FlClientWork *work = c->optimizer;
    if (!strcmp(work->s->optimizer, "sgd")) nn_sgd_step(&work->sgd, w, grad, (float)c->lr);
    else nn_adam_step(&work->adam, w, grad, (float)c->lr);
}

int fl_client_init(FlClientWork *w, const FlSettings *s, DataPartFile *f, const int *owned, int n_owned)
{
    memset(w, 0, sizeof *w);
    w->s = s;
    NnZooOptions zoo = { s->norm, s->groups, 0.0f };
    FH_CHECK(nn_zoo_build(&w->model, s->model, (NnShape){ f->c, f->h, f->w }, f->classes, s->batch_size, &zoo));
    FH_CHECK(data_loader_init(&w->loader, f, owned, n_owned, -1));
    const size_t row = (size_t)f->c * f->h * f->w;
    FH_CHECK(fh_alloc_aligned(&w->x, (size_t)s->batch_size * row * sizeof(float), "input batch"));
    FH_CHECK(fh_calloc(&w->y, (size_t)s->batch_size, sizeof *w->y, "label batch"));
    FH_CHECK(fh_alloc_aligned(&w->dlogits, (size_t)s->batch_size * f->classes * sizeof(float), "logit gradients"));
    const int64_t n_params = w->model.n_params;
    if (!strcmp(s->optimizer, "sgd"))
        FH_CHECK(nn_sgd_init(&w->sgd, n_params, (float)s->momentum, (float)s->weight_decay, 0));
    else
        FH_CHECK(nn_adam_init(&w->adam, n_params, (float)s->beta1, (float)s->beta2, (float)s->eps,
                              (float)s->weight_decay, !strcmp(s->optimizer, "adamw")));
    const AlgoMethod *m = s->method;
    if (m->n_client_vectors > 0)
        FH_CHECK(fh_alloc_aligned(&w->client_vecs,
                                  (size_t)n_owned * m->n_client_vectors * w->model.n_state * sizeof(float),
                                  "persistent client vectors"));
    return FH_OK;
}

void fl_client_free(FlClientWork *w)
{
    nn_model_free(&w->model);
    data_loader_free(&w->loader);
    fh_free(&w->x);
    fh_free(&w->y);
    fh_free(&w->dlogits);
    fh_free(&w->client_vecs);
    nn_sgd_free(&w->sgd);
    nn_adam_free(&w->adam);
}

typedef struct {
    FlClientWork *w;
    int64_t count;
} GradEnv;

/* Loss and gradient of the current batch at model->state, local terms and correction included. */
static int batch_grad(void *env_ptr, double *loss)
{
    GradEnv *env = env_ptr;
    FlClientWork *w = env->w;
    NnModel *m = &w->model;
    AlgoClientCtx *c = &w->ctx;
    const AlgoMethod *meth = w->s->method;
    m->dropout_ctr[0] = (uint32_t)c->round;
    m->dropout_ctr[1] = (uint32_t)c->client;
    m->dropout_ctr[2] = (uint32_t)c->step;
    nn_model_zero_grad(m);
    FH_CHECK(nn_model_forward(m, w->x, (int)env->count));
    memset(w->dlogits, 0, (size_t)env->count * m->classes * sizeof(float));
    *loss = nn_softmax_xent(w->dlogits, NULL, nn_model_logits(m), w->y, NULL, NULL, (int)env->count, m->classes);
    nn_model_backward(m, w->dlogits, NULL);
    if (meth->local_term && meth->local_term->grad_term) *loss += meth->local_term->grad_term(c, m->state, m->grad);
    if (meth->correction && meth->correction->correct) meth->correction->correct(c, m->grad);
    if (w->s->clip > 0) nn_clip_grad_norm(m->grad, m->n_params, (float)w->s->clip);
    return FH_OK;
}

int fl_client_train(FlClientWork *w, const FlRecordLayout *l, const float *global, const float *server_vecs,
                    int client, int round, double lr, void *record)
{
    const double t0 = fh_time_now();
    const FlSettings *s = w->s;
    const AlgoMethod *meth = s->method;
    NnModel *m = &w->model;
    const int64_t n = data_loader_client_rows(&w->loader, client);
    if (n < 0) FH_FAIL(FH_ERR_USAGE, "client %d is not held by this rank", client);
    int slot = 0;
    while (w->loader.clients[slot] != client) slot++;

    nn_vec_copy(m->state, global, m->n_state);
    nn_model_set_training(m, 1);
    m->dropout_seed = (uint64_t)s->seed;
    if (!strcmp(s->optimizer, "sgd")) nn_sgd_reset(&w->sgd); /* spec 0.1.1: fresh optimiser state */
    else nn_adam_reset(&w->adam);

    FlRecordHeader *h = fl_record_header(record);
    memset(record, 0, l->header_bytes);
    const int64_t steps = s->steps > 0 ? s->steps : (int64_t)s->epochs * ((n + s->batch_size - 1) / s->batch_size);
    AlgoClientCtx *c = &w->ctx;
    *c = (AlgoClientCtx){
        .model = m, .global = global, .server_vecs = server_vecs,
        .client_vecs = w->client_vecs ? w->client_vecs + (size_t)slot * meth->n_client_vectors * m->n_state : NULL,
        .upload_vecs = l->n_vectors ? fl_record_state(record, l) + m->n_state : NULL,
        .upload_scalars = fl_record_scalars(record), .hp = s->hp, .client = client, .round = round,
        .n_samples = n, .step = 0, .n_steps = n > 0 ? steps : 0, .n_params = m->n_params, .n_state = m->n_state,
        .lr = lr, .optimizer_step = optimizer_step, .optimizer = w,
    };
    if (meth->report && meth->report->begin) meth->report->begin(c);

    DataBatchIter it;
    FH_CHECK(data_loader_begin(&w->loader, &it, client, (uint64_t)s->seed, (uint32_t)round));
    double loss_sum = 0.0;
    int nonfinite = 0;
    GradEnv env = { w, 0 };
    for (c->step = 0; c->step < c->n_steps; c->step++) {
        env.count = data_loader_next(&w->loader, &it, s->batch_size, w->x, w->y);
        double loss = 0.0;
        if (meth->step && meth->step->step) {
            FH_CHECK(meth->step->step(c, batch_grad, &env, &loss));
        } else {
            FH_CHECK(batch_grad(&env, &loss));
            optimizer_step(c, m->state, m->grad);
        }
        loss_sum += loss;
        if (!isfinite(loss)) {
            nonfinite = 1; /* the server stops the run; training on would only spread the NaN */
            c->step++;
            break;
        }
    }
    if (meth->report && meth->report->end) meth->report->end(c);
    h->client = client;
    h->n_samples = n;
    h->n_steps = c->step;
    h->nonfinite = nonfinite;
    h->train_loss = c->step > 0 ? loss_sum / (double)c->step : 0.0;
    nn_vec_copy(fl_record_state(record, l), m->state, m->n_state);
    h->seconds = fh_time_now() - t0;
    return FH_OK;
}
