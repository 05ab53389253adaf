/* Stop requests by signal: the flag that a run's safe points poll (include/fedhet/core.h). */
#define _POSIX_C_SOURCE 200809L
#include "fedhet/core.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t stop_signal; /* the first stop signal seen, 0 before any */

static void on_stop_signal(int sig)
{
    if (!stop_signal) stop_signal = sig;
}

void fh_stop_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int fh_stop_requested(void) { return stop_signal != 0; }

const char *fh_stop_signal_name(void)
{
    switch (stop_signal) {
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "SIGTERM";
    }
}
