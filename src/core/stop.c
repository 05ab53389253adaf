/* Stop requests by signal: the flag that a run's safe points poll (include/fedhet/core.h). */
#define _POSIX_C_SOURCE 200809L
#include "fedhet/core.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t stop_flag;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

void fh_stop_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

int fh_stop_requested(void) { return stop_flag != 0; }
