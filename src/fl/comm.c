/* MPI protocol helpers. Waiting ranks poll with short sleeps instead of spinning: with more ranks than
 * cores (a server rank beside two client ranks on two cores) a spinning rank would steal a core from a
 * rank that trains. */
#include "fl_internal.h"

#include <limits.h>
#include <time.h>

#include "fedhet/core.h"

#define FL_CHUNK ((int64_t)1 << 30) /* MPI counts are int: large buffers go in pieces */

int fl_comm_init(FlComm *c, MPI_Comm comm)
{
    c->comm = comm;
    if (MPI_Comm_rank(comm, &c->rank) != MPI_SUCCESS || MPI_Comm_size(comm, &c->size) != MPI_SUCCESS)
        FH_FAIL(FH_ERR_MPI, "cannot query the MPI communicator");
    c->n_client_ranks = c->size > 1 ? c->size - 1 : 1;
    return FH_OK;
}

int fl_wait(MPI_Request *req)
{
    int done = 0;
    long sleep_ns = 20000;
    while (!done) {
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) FH_FAIL(FH_ERR_MPI, "MPI_Test failed");
        if (!done) {
            struct timespec ts = { 0, sleep_ns };
            nanosleep(&ts, NULL);
            if (sleep_ns < 1000000) sleep_ns += sleep_ns / 4; /* up to 1 ms between polls */
        }
    }
    return FH_OK;
}

int fl_bcast(FlComm *c, void *buf, int64_t bytes)
{
    for (int64_t off = 0; off < bytes; off += FL_CHUNK) {
        int n = (int)(bytes - off < FL_CHUNK ? bytes - off : FL_CHUNK);
        MPI_Request req;
        if (MPI_Ibcast((char *)buf + off, n, MPI_BYTE, 0, c->comm, &req) != MPI_SUCCESS)
            FH_FAIL(FH_ERR_MPI, "MPI_Ibcast of %lld bytes failed", (long long)bytes);
        FH_CHECK(fl_wait(&req));
    }
    return FH_OK;
}

int fl_agree(FlComm *c, int status)
{
    int all = status;
    MPI_Request req;
    if (MPI_Iallreduce(&status, &all, 1, MPI_INT, MPI_MAX, c->comm, &req) != MPI_SUCCESS) return FH_ERR_MPI;
    if (fl_wait(&req) != FH_OK) return FH_ERR_MPI;
    return all;
}

void fl_record_layout(FlRecordLayout *l, const AlgoSizes *m, int64_t n_state)
{
    size_t head = sizeof(FlRecordHeader) + (size_t)m->upload_scalars * sizeof(double);
    l->header_bytes = (head + 63) / 64 * 64;
    l->n_scalars = m->upload_scalars;
    l->n_vectors = m->upload_vectors;
    l->n_state = n_state;
    l->bytes = l->header_bytes + (size_t)(1 + m->upload_vectors) * (size_t)n_state * sizeof(float);
}
