/* Compute and communication accounting of a run: the cumulative cum_* columns of metrics.csv, so that
 * methods can be compared at equal cost rather than per round (a SAM step costs two backward passes,
 * FedAvg's one). Passes are counted by the model instances where they happen (NnModel.forward_samples,
 * backward_samples); client counts travel in the upload records and are integers, so their sums do not
 * depend on the rank count. */
#include "fl_internal.h"

#include "fedhet/core.h"

void fl_cost_add_records(FlRoundCost *cost, const char *records, int n, size_t record_bytes)
{
    for (int i = 0; i < n; i++) {
        const FlRecordHeader *h = (const FlRecordHeader *)(records + (size_t)i * record_bytes);
        cost->train_forward += h->train_forward;
        cost->train_backward += h->train_backward;
        cost->score_forward += h->score_forward;
        cost->score_backward += h->score_backward;
    }
}

int fl_cost_reduce_passes(FlComm *comm, const NnModel *m, int64_t forward0, int64_t backward0, FlRoundCost *cost)
{
    int64_t mine[2] = { m->forward_samples - forward0, m->backward_samples - backward0 }, all[2] = { 0, 0 };
    MPI_Request req;
    if (MPI_Ireduce(mine, all, 2, MPI_INT64_T, MPI_SUM, 0, comm->comm, &req) != MPI_SUCCESS)
        FH_FAIL(FH_ERR_MPI, "summing the evaluation passes over the ranks failed");
    FH_CHECK(fl_wait(&req));
    cost->eval_forward += all[0];
    cost->eval_backward += all[1];
    return FH_OK;
}

void fl_cost_row(double *row, const double *prev, const FlRoundCost *cost)
{
    const double round_values[] = { (double)cost->train_forward, (double)cost->train_backward,
                                    (double)cost->score_forward, (double)cost->score_backward,
                                    (double)cost->eval_forward,  (double)cost->eval_backward,
                                    row[FL_COL_bytes_down],      row[FL_COL_bytes_up],
                                    cost->seconds };
    const int columns[] = { FL_COL_cum_train_forward, FL_COL_cum_train_backward, FL_COL_cum_score_forward,
                            FL_COL_cum_score_backward, FL_COL_cum_eval_forward,  FL_COL_cum_eval_backward,
                            FL_COL_cum_bytes_down,     FL_COL_cum_bytes_up,      FL_COL_cum_seconds };
    for (size_t i = 0; i < sizeof columns / sizeof *columns; i++)
        row[columns[i]] = (prev ? prev[columns[i]] : 0.0) + round_values[i];
}
