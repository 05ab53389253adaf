/* Distributed evaluation of the global model (docs/architecture.md: a round, step 5; metrics of docs/methods/metrics.md C.4). */
#include "fl_internal.h"

#include <string.h>

#include "fedhet/core.h"

/* Forward of rows [first, first + count) in chunks of the model's max batch, logits into out. The chunk
 * boundaries depend only on the batch, never on the rank count, so the logits do not either. */
static int eval_batch_logits(NnModel *m, DataPartFile *f, const float *lut, DataRowGroup group, int64_t first,
                             int64_t count, float *x, int32_t *y, uint8_t *scratch, float *out)
{
    FH_CHECK(data_test_read(f, lut, group, first, count, x, y, scratch));
    const size_t row = (size_t)f->c * f->h * f->w;
    for (int64_t off = 0; off < count; off += m->max_batch) {
        int n = (int)(count - off < m->max_batch ? count - off : m->max_batch);
        FH_CHECK(nn_model_forward(m, x + (size_t)off * row, n));
        memcpy(out + (size_t)off * m->classes, nn_model_logits(m), (size_t)n * m->classes * sizeof(float));
    }
    return FH_OK;
}

/* rows of the test batches b = rank, rank + size, ... (those rank `rank` evaluates) */
static int64_t rows_of_rank(int64_t n, int eval_batch, int rank, int size)
{
    const int64_t n_batches = (n + eval_batch - 1) / eval_batch;
    int64_t rows = 0;
    for (int64_t b = rank; b < n_batches; b += size) rows += (b + 1) * eval_batch < n ? eval_batch : n - b * eval_batch;
    return rows;
}

int64_t fl_eval_bytes(const DataPartFile *f, int eval_batch, int rank, int size)
{
    if (f->n_test == 0) return 0;
    const int64_t n = f->n_test, classes = f->classes, row = (int64_t)f->c * f->h * f->w,
                  mine = rows_of_rank(n, eval_batch, rank, size);
    /* x, scratch, y, logits, lut; rank 0: counts, displs, all, ordered, labels, the metrics' work */
    int64_t bytes = eval_batch * row * (int64_t)(sizeof(float) + sizeof(uint8_t)) +
                    eval_batch * (int64_t)sizeof(int32_t) + (mine > 0 ? mine : 1) * classes * (int64_t)sizeof(float) +
                    f->c * 256 * (int64_t)sizeof(float);
    if (rank == 0)
        bytes += 2 * size * (int64_t)sizeof(int) + 2 * n * classes * (int64_t)sizeof(float) +
                 n * (int64_t)sizeof(int32_t) + fl_eval_metrics_work_bytes(n, (int)classes);
    return bytes;
}

int fl_eval_init(FlEval *e, const FlComm *c, const DataPartFile *f, int eval_batch)
{
    memset(e, 0, sizeof *e);
    const int64_t n = f->n_test;
    const int classes = f->classes;
    const size_t row = (size_t)f->c * f->h * f->w;
    e->eval_batch = eval_batch;
    e->mine = rows_of_rank(n, eval_batch, c->rank, c->size);
    FH_CHECK(fh_alloc_aligned(&e->x, (size_t)eval_batch * row * sizeof(float), "evaluation batch"));
    FH_CHECK(fh_calloc(&e->y, (size_t)eval_batch, sizeof *e->y, "evaluation labels"));
    FH_CHECK(fh_calloc(&e->scratch, (size_t)eval_batch, row, "evaluation images"));
    FH_CHECK(fh_calloc(&e->logits, (size_t)(e->mine > 0 ? e->mine : 1) * classes, sizeof *e->logits, "logits"));
    FH_CHECK(fh_calloc(&e->lut, (size_t)f->c * 256, sizeof *e->lut, "normalisation table"));
    data_normal_lut(e->lut, f);
    if (c->rank != 0) return FH_OK;
    /* rank 0 gathers every rank's logits (in rank order) and puts them back in sample order */
    FH_CHECK(fh_calloc(&e->counts, (size_t)c->size, sizeof *e->counts, "gather counts"));
    FH_CHECK(fh_calloc(&e->displs, (size_t)c->size, sizeof *e->displs, "gather offsets"));
    FH_CHECK(fh_calloc(&e->all, (size_t)n * classes, sizeof *e->all, "all logits"));
    FH_CHECK(fh_calloc(&e->ordered, (size_t)n * classes, sizeof *e->ordered, "ordered logits"));
    FH_CHECK(fh_calloc(&e->labels, (size_t)n, sizeof *e->labels, "test labels"));
    int64_t off = 0;
    for (int r = 0; r < c->size; r++) {
        const int64_t rows = rows_of_rank(n, eval_batch, r, c->size);
        e->counts[r] = (int)(rows * classes);
        e->displs[r] = (int)(off * classes);
        off += rows;
    }
    return fl_eval_metrics_work_init(&e->metrics, n, classes);
}

void fl_eval_free(FlEval *e)
{
    fh_free(&e->x);
    fh_free(&e->y);
    fh_free(&e->scratch);
    fh_free(&e->logits);
    fh_free(&e->lut);
    fh_free(&e->counts);
    fh_free(&e->displs);
    fh_free(&e->all);
    fh_free(&e->ordered);
    fh_free(&e->labels);
    fl_eval_metrics_work_free(&e->metrics);
    memset(e, 0, sizeof *e);
}

int fl_evaluate(FlComm *c, FlEval *e, NnModel *m, DataPartFile *f, DataRowGroup group, FlEvalMetrics *out)
{
    const int eval_batch = e->eval_batch;
    const int64_t n = f->n_test, n_batches = (n + eval_batch - 1) / eval_batch;
    const int classes = f->classes;
    int status = FH_OK;
    nn_model_set_training(m, 0);
    int64_t at = 0;
    for (int64_t b = c->rank; b < n_batches && status == FH_OK; b += c->size) {
        int64_t first = b * eval_batch, count = first + eval_batch < n ? eval_batch : n - first;
        status = eval_batch_logits(m, f, e->lut, group, first, count, e->x, e->y, e->scratch,
                                   e->logits + (size_t)at * classes);
        at += count;
    }
    nn_model_set_training(m, 1);
    status = fl_agree(c, status);
    if (status != FH_OK) return status;

    MPI_Request req;
    if (MPI_Igatherv(e->logits, (int)(e->mine * classes), MPI_FLOAT, c->rank == 0 ? e->all : NULL, e->counts,
                     e->displs, MPI_FLOAT, 0, c->comm, &req) != MPI_SUCCESS)
        FH_FAIL(FH_ERR_MPI, "gathering test logits failed");
    status = fl_wait(&req);
    if (status != FH_OK || c->rank != 0) return status;
    /* reorder: rank r's rows are its batches in ascending order */
    int64_t src = 0;
    for (int r = 0; r < c->size; r++)
        for (int64_t b = r; b < n_batches; b += c->size) {
            int64_t first = b * eval_batch, count = first + eval_batch < n ? eval_batch : n - first;
            memcpy(e->ordered + (size_t)first * classes, e->all + (size_t)src * classes,
                   (size_t)count * classes * sizeof(float));
            src += count;
        }
    status = data_partfile_read_rows(f, group, 0, n, NULL, e->labels);
    if (status == FH_OK) status = fl_eval_metrics_with(out, &e->metrics, e->ordered, e->labels, n, classes);
    return status;
}
