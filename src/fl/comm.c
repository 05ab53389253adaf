/* MPI protocol helpers. Waiting ranks poll with short sleeps instead of spinning: with more ranks than
 * cores (a server rank beside two client ranks on two cores) a spinning rank would steal a core from a
 * rank that trains. */
#include "fl_internal.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fedhet/core.h"

#define FL_CHUNK ((int64_t)1 << 30) /* MPI counts are int: large buffers go in pieces */
#define FL_ALONE_GRACE_S 5.0           /* how long a failing client rank waits for rank 0 to end the job */

typedef struct {
    int32_t status, rank;
    char text[FH_ERROR_CAPACITY];
} FlErrorNote;

/* rank 0 of a federation of several ranks, while fl_run runs: fl_wait listens for error notes */
static FlComm *error_watch;

void fl_watch_errors(FlComm *c) { error_watch = c && c->rank == 0 && c->size > 1 ? c : NULL; }

/* what this process does just before it calls MPI_Abort (rank 0: remove a run folder with nothing to resume) */
static void (*abort_cleanup)(void *);
static void *abort_cleanup_arg;

void fl_before_abort(void (*fn)(void *arg), void *arg)
{
    abort_cleanup = fn;
    abort_cleanup_arg = arg;
}

static void abort_job(MPI_Comm comm, int status)
{
    if (abort_cleanup) abort_cleanup(abort_cleanup_arg);
    abort_cleanup = NULL;
    MPI_Abort(comm, status);
}

static void note_from(FlErrorNote *n, int status, int rank, const char *chain)
{
    n->status = status;
    n->rank = rank;
    snprintf(n->text, sizeof n->text, "%s", chain);
}

/* Rank 0: a client rank's note ends the job here, so that its message is in rank 0's stderr and log. */
static void check_error_notes(FlComm *c)
{
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, FL_TAG_ERROR, c->comm, &flag, &st) != MPI_SUCCESS || !flag) return;
    static FlErrorNote n;
    if (MPI_Recv(&n, (int)sizeof n, MPI_BYTE, st.MPI_SOURCE, FL_TAG_ERROR, c->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        note_from(&n, FH_ERR_MPI, st.MPI_SOURCE, "its error message could not be received");
    n.text[sizeof n.text - 1] = '\0';
    static char text[sizeof n.text];
    fh_error_format(n.status, n.text, text, sizeof text);
    fh_log_error("rank %d failed: %s", (int)n.rank, text);
    abort_job(c->comm, n.status != FH_OK ? n.status : FH_ERR_MPI);
}

int fl_comm_init(FlComm *c, MPI_Comm comm)
{
    c->comm = comm;
    if (MPI_Comm_rank(comm, &c->rank) != MPI_SUCCESS || MPI_Comm_size(comm, &c->size) != MPI_SUCCESS)
        FH_FAIL(FH_ERR_MPI, "cannot query the MPI communicator");
    c->n_client_ranks = c->size > 1 ? c->size - 1 : 1;
    return FH_OK;
}

/* The one polite wait: MPI_Test, and between polls a sleep growing from 20 us by a quarter per poll up to
 * 1 ms. It serves every wait, the grid's idle groups included: the 1 ms ceiling bounds what a wait adds to
 * a round (rounds of small models take milliseconds), while a thousand polls a second cost a waiting rank
 * a small fraction of a core (the grid's former 20 ms ceiling saved little of that, and would have added up
 * to 20 ms to every broadcast of a round). on_poll (optional) runs between polls; its error ends the wait. */
static int wait_polite(MPI_Request *req, int (*on_poll)(void *arg), void *arg)
{
    long sleep_ns = 20000;
    for (;;) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) FH_FAIL(FH_ERR_MPI, "MPI_Test failed");
        if (done) return FH_OK;
        if (error_watch) check_error_notes(error_watch);
        if (on_poll) FH_CHECK(on_poll(arg));
        struct timespec ts = { 0, sleep_ns };
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000) sleep_ns += sleep_ns / 4;
    }
}

int fl_wait(MPI_Request *req) { return wait_polite(req, NULL, NULL); }

/* rank 0 still reads a failing rank's note */
int fl_wait_busy(MPI_Request *req)
{
    for (;;) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) FH_FAIL(FH_ERR_MPI, "MPI_Test failed");
        if (done) return FH_OK;
        if (error_watch) check_error_notes(error_watch);
    }
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
    if (all == FH_OK || c->size == 1) return all;
    /* rank 0 prints the error: the lowest rank failing with that status sends it its message */
    int mine = status == all ? c->rank : c->size, from = mine;
    if (MPI_Iallreduce(&mine, &from, 1, MPI_INT, MPI_MIN, c->comm, &req) != MPI_SUCCESS) return all;
    if (fl_wait(&req) != FH_OK || from == 0 || from >= c->size) return all;
    static FlErrorNote n;
    if (c->rank == from) note_from(&n, status, from, fh_error_message());
    if (MPI_Ibcast(&n, (int)sizeof n, MPI_BYTE, from, c->comm, &req) != MPI_SUCCESS || fl_wait(&req) != FH_OK)
        return all;
    if (c->rank != from) {
        n.text[sizeof n.text - 1] = '\0';
        char chain[FH_ERROR_CAPACITY + 32];
        snprintf(chain, sizeof chain, "rank %d: %s", from, n.text);
        fh_error_adopt(all, chain);
    }
    return all;
}

void fl_fail_alone(FlComm *c, int status)
{
    if (c->size > 1 && c->rank != 0) {
        /* rank 0 prints the message (stderr and log.txt) and ends the job; this rank does so itself when
         * rank 0 has not within the grace (busy elsewhere, or gone) */
        static FlErrorNote n;
        note_from(&n, status, c->rank, fh_error_message());
        MPI_Request req;
        if (MPI_Isend(&n, (int)sizeof n, MPI_BYTE, 0, FL_TAG_ERROR, c->comm, &req) == MPI_SUCCESS) {
            const double until = fh_time_now() + FL_ALONE_GRACE_S;
            int sent = 0;
            while (fh_time_now() < until) {
                if (!sent && MPI_Test(&req, &sent, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
                struct timespec ts = { 0, 1000000 };
                nanosleep(&ts, NULL);
            }
        }
    }
    fh_log_error("%s", fh_error_text(status));
    if (c->size > 1) abort_job(c->comm, status);
}

void fl_record_layout(FlRecordLayout *l, const AlgoSizes *m, int64_t n_state)
{
    size_t head = sizeof(FlRecordHeader) + (size_t)m->upload_scalars * sizeof(double);
    l->header_bytes = (head + 63) / 64 * 64;
    l->n_scalars = m->upload_scalars;
    l->n_vectors = m->upload_vectors;
    l->n_state = n_state;
    /* records lie back to back in the gather buffers: a multiple of 8 bytes keeps every header's int64 and
     * double fields aligned when (1 + vectors) x n_state is odd */
    l->bytes = (l->header_bytes + (size_t)(1 + m->upload_vectors) * (size_t)n_state * sizeof(float) + 7) / 8 * 8;
}

/* ---- leaving a round after a stop request -------------------------------------------------------------- */

int fl_leave_init(FlLeave *l, FlComm *c, double grace)
{
    memset(l, 0, sizeof *l);
    l->comm = c;
    l->grace = grace;
    l->seen = -1.0;
    if (c->rank == 0 && c->size > 1)
        FH_CHECK(fh_calloc(&l->sends, (size_t)c->size, sizeof *l->sends, "round-leave requests"));
    return FH_OK;
}

void fl_leave_free(FlLeave *l) { fh_free(&l->sends); }

/* Rank 0: a stop was requested at least `grace` seconds ago (the clock starts when rank 0 first sees it) */
static int leave_due(FlLeave *l)
{
    if (!fh_stop_requested()) return 0;
    const double now = fh_time_now();
    if (l->seen < 0) l->seen = now;
    return now - l->seen >= l->grace;
}

int fl_leave_poll(void *arg)
{
    FlLeave *l = arg;
    if (l->decided) return 1;
    if (l->comm->size == 1) return l->decided = leave_due(l);
    int flag = 0;
    if (MPI_Iprobe(0, FL_TAG_LEAVE, l->comm->comm, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) return 0;
    int32_t round;
    if (MPI_Recv(&round, 1, MPI_INT32_T, 0, FL_TAG_LEAVE, l->comm->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
    return l->decided = 1;
}

typedef struct {
    FlLeave *leave;
    int round;
} LeaveCheck;

/* between the polls of rank 0's gather: leave the round once the stop request is old enough */
static int leave_decide(void *arg)
{
    LeaveCheck *lc = arg;
    FlLeave *l = lc->leave;
    FlComm *c = l->comm;
    if (l->decided || !leave_due(l)) return FH_OK;
    /* every client rank gets exactly one note per left round: the ones that finished training read theirs
     * in fl_leave_finish */
    l->round = lc->round;
    for (int r = 1; r < c->size; r++)
        if (MPI_Isend(&l->round, 1, MPI_INT32_T, r, FL_TAG_LEAVE, c->comm, &l->sends[r]) != MPI_SUCCESS)
            FH_FAIL(FH_ERR_MPI, "telling rank %d to leave round %d failed", r, lc->round + 1);
    l->decided = 1;
    return FH_OK;
}

int fl_leave_wait_gather(FlLeave *l, MPI_Request *req, int round)
{
    LeaveCheck lc = { l, round };
    return wait_polite(req, leave_decide, &lc);
}

int fl_leave_finish(FlLeave *l)
{
    FlComm *c = l->comm;
    if (c->size == 1) return FH_OK;
    if (c->rank == 0) {
        for (int r = 1; r < c->size; r++) FH_CHECK(fl_wait(&l->sends[r]));
        return FH_OK;
    }
    if (l->decided) return FH_OK;
    MPI_Request req;
    if (MPI_Irecv(&l->round, 1, MPI_INT32_T, 0, FL_TAG_LEAVE, c->comm, &req) != MPI_SUCCESS)
        FH_FAIL(FH_ERR_MPI, "receiving the note to leave the round failed");
    FH_CHECK(fl_wait(&req));
    l->decided = 1;
    return FH_OK;
}
