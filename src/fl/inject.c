/* Fault injection for the tests, the run's one observer of its points (fl_fault_point): the round loop passes it
 * at the end of each phase of a round, the checkpoint writer at each step of a file's atomic write, and nothing
 * else of the protocol knows about faults. Two faults, each from the environment:
 * - FEDHET_TEST_KILL_POINT=point (FEDHET_TEST_KILL_ROUND=round, 0-based; unset: any round): the process raises
 *   SIGKILL there, so that a crash test (tests/mpi/test_crash.sh) hits an exact moment instead of racing a timer.
 *   Points: setup (the run folder made, no round run yet), broadcast, train, gather, aggregate, evaluate (after
 *   those phases of a round), checkpoint.h5 and run.h5 (rank 0: the file's temporary copy written, not yet
 *   renamed), checkpoint.h5:done and run.h5:done (just renamed).
 * - FEDHET_TEST_FAIL_RANK=rank and FEDHET_TEST_FAIL_ROUND=round: that rank fails alone with an error at the
 *   broadcast point of that round, before it trains (tests/mpi/test_run.sh, test_reliability.sh,
 *   test_signals.sh). */
#include "fl_internal.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

int fl_fault_point(const char *point, int rank, int round)
{
    const char *p = getenv("FEDHET_TEST_KILL_POINT"), *r = getenv("FEDHET_TEST_KILL_ROUND");
    if (p && !strcmp(p, point) && (!r || !*r || atoi(r) == round)) raise(SIGKILL);
    const char *fr = getenv("FEDHET_TEST_FAIL_RANK"), *ft = getenv("FEDHET_TEST_FAIL_ROUND");
    if (!strcmp(point, "broadcast") && fr && ft && atoi(fr) == rank && atoi(ft) == round)
        FH_FAIL(FH_ERR_DATA, "rank %d: failure injected for testing (FEDHET_TEST_FAIL_RANK=%s, FEDHET_TEST_FAIL_ROUND=%s)",
                rank, fr, ft);
    return FH_OK;
}
