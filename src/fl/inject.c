/* Failure injection for the crash tests (tests/mpi/test_crash.sh): SIGKILL at a named point of a run,
 * so that a test hits an exact moment (after a phase of a round, inside a checkpoint write) instead of
 * racing a timer. Points: setup (the run folder made, no round run yet), broadcast, train, gather,
 * aggregate, evaluate (after those phases of a round), checkpoint.h5 and run.h5 (rank 0: the file's
 * temporary copy written, not yet renamed), checkpoint.h5:done and run.h5:done (just renamed). */
#include "fl_internal.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

void fl_injected_kill(const char *point, int round)
{
    const char *p = getenv("FEDHET_TEST_KILL_POINT"), *r = getenv("FEDHET_TEST_KILL_ROUND");
    if (p && !strcmp(p, point) && (!r || !*r || atoi(r) == round)) raise(SIGKILL);
}
