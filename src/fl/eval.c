/* Distributed evaluation of the global model (DESIGN.md data flow; metrics of spec C.4). */
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

int fl_evaluate(FlComm *c, NnModel *m, DataPartFile *f, DataRowGroup group, int eval_batch, FlEvalMetrics *out)
{
    const int64_t n = f->n_test, n_batches = (n + eval_batch - 1) / eval_batch;
    const int classes = f->classes;
    const size_t row = (size_t)f->c * f->h * f->w;
    int64_t mine = 0; /* rows this rank evaluates: batches b with b mod size == rank */
    for (int64_t b = c->rank; b < n_batches; b += c->size)
        mine += (b + 1) * eval_batch < n ? eval_batch : n - b * eval_batch;
    float *x = NULL, *logits = NULL, *all = NULL, *lut = NULL;
    int32_t *y = NULL, *labels = NULL;
    uint8_t *scratch = NULL;
    int *counts = NULL, *displs = NULL;
    int status = fh_alloc_aligned(&x, (size_t)eval_batch * row * sizeof(float), "evaluation batch");
    if (status == FH_OK) status = fh_calloc(&y, (size_t)eval_batch, sizeof *y, "evaluation labels");
    if (status == FH_OK) status = fh_calloc(&scratch, (size_t)eval_batch, row, "evaluation images");
    if (status == FH_OK) status = fh_calloc(&logits, (size_t)(mine > 0 ? mine : 1) * classes, sizeof *logits, "logits");
    if (status == FH_OK) status = fh_calloc(&lut, (size_t)f->c * 256, sizeof *lut, "normalisation table");
    if (status != FH_OK) goto done;
    data_normal_lut(lut, f);
    nn_model_set_training(m, 0);
    int64_t at = 0;
    for (int64_t b = c->rank; b < n_batches && status == FH_OK; b += c->size) {
        int64_t first = b * eval_batch, count = first + eval_batch < n ? eval_batch : n - first;
        status = eval_batch_logits(m, f, lut, group, first, count, x, y, scratch, logits + (size_t)at * classes);
        at += count;
    }
    nn_model_set_training(m, 1);
    status = fl_agree(c, status);
    if (status != FH_OK) goto done;

    /* rank 0 gathers every rank's logits (in rank order) and puts them back in sample order */
    if (c->rank == 0) {
        status = fh_calloc(&counts, (size_t)c->size, sizeof *counts, "gather counts");
        if (status == FH_OK) status = fh_calloc(&displs, (size_t)c->size, sizeof *displs, "gather offsets");
        if (status == FH_OK) status = fh_calloc(&all, (size_t)n * classes, sizeof *all, "all logits");
        if (status == FH_OK) status = fh_calloc(&labels, (size_t)n, sizeof *labels, "test labels");
        if (status != FH_OK) goto done; /* out of memory on rank 0 alone: the caller aborts the job */
        int64_t off = 0;
        for (int r = 0; r < c->size; r++) {
            int64_t rows = 0;
            for (int64_t b = r; b < n_batches; b += c->size) rows += (b + 1) * eval_batch < n ? eval_batch : n - b * eval_batch;
            counts[r] = (int)(rows * classes);
            displs[r] = (int)(off * classes);
            off += rows;
        }
    }
    MPI_Request req;
    if (MPI_Igatherv(logits, (int)(mine * classes), MPI_FLOAT, c->rank == 0 ? all : NULL, counts,
                     displs, MPI_FLOAT, 0, c->comm, &req) != MPI_SUCCESS) {
        status = fh_error_raise(FH_ERR_MPI, __FILE__, __LINE__, "gathering test logits failed");
        goto done;
    }
    status = fl_wait(&req);
    if (status == FH_OK && c->rank == 0) {
        /* reorder: rank r's rows are its batches in ascending order */
        float *ordered = NULL;
        status = fh_calloc(&ordered, (size_t)n * classes, sizeof *ordered, "ordered logits");
        if (status == FH_OK) {
            int64_t src = 0;
            for (int r = 0; r < c->size; r++)
                for (int64_t b = r; b < n_batches; b += c->size) {
                    int64_t first = b * eval_batch, count = first + eval_batch < n ? eval_batch : n - first;
                    memcpy(ordered + (size_t)first * classes, all + (size_t)src * classes,
                           (size_t)count * classes * sizeof(float));
                    src += count;
                }
            status = data_partfile_read_rows(f, group, 0, n, NULL, labels);
            if (status == FH_OK) status = fl_eval_metrics(out, ordered, labels, n, classes);
            fh_free(&ordered);
        }
    }
done:
    fh_free(&x);
    fh_free(&y);
    fh_free(&scratch);
    fh_free(&logits);
    fh_free(&lut);
    fh_free(&all);
    fh_free(&labels);
    fh_free(&counts);
    fh_free(&displs);
    return status;
}
