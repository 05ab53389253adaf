#!/usr/bin/env bash
# Failures and stop signals of `fedhet run` under mpirun, on the tiny synthetic set of lib.sh:
#   client_error     a partition file with damaged compressed client rows, on 3 ranks: the client ranks'
#                    real message (not "no message recorded") is on stderr, exit 2
#   alone_error      a client rank failing alone mid-run: rank 0 prints its message and log.txt has it
#   early_sigterm    SIGTERM as soon as the ranks' handlers exist (during MPI start-up): the run stops at
#                    its first safe point with a checkpoint, exit 0 and the resume line (not killed, 143)
#   startup_sigterm  SIGTERM while the shared libraries' constructors still run (a preloaded one that takes
#                    1 s stands in for a slow start on a loaded node): the handler exists already (installed
#                    from .preinit_array), so the run stops after round 1 with exit 0 instead of dying (143)
#   long_round       a round of 2^32 + 1 local steps: SIGTERM leaves it after fl.term_grace, exit 0, the
#                    checkpoint of the rounds before
#   left_resume      a round left after fl.term_grace, then --resume: bit-identical to an uninterrupted run
#   usr1_mpirun      SIGUSR1 to mpirun (forwarded to the ranks): as SIGTERM to the ranks, mpirun exits 0
#   sigterm_mpirun   SIGTERM to mpirun itself: Open MPI kills the ranks 1 s later (odls_base_sigkill_timeout)
#                    and exits nonzero — docs/usage.md says not to use it; checked here so that it stays true
# usage: tests/mpi/test_signals.sh [test_name]      (last line: "N passed, N failed"; exit 1 when any failed)
source "$(dirname "$0")/lib.sh"

setup() { setup_tiny; }

# bg_run TAG NP ARGS...: mpirun in the background; MPIRUN_PID its pid
bg_run()
{
    local tag=$1 np=$2
    shift 2
    LAST_TAG=$tag
    timeout -k 5 "$RUN_LIMIT" mpirun --oversubscribe -np "$np" "$FEDHET" run "$@" >"$WORK/$tag.out" 2>"$WORK/$tag.err" &
    MPIRUN_PID=$!
    BG_PIDS+=("$MPIRUN_PID")
}

# ranks_of_run NAME: the rank processes of the run output.name=NAME
ranks_of_run() { pgrep -f -- "^$FEDHET run .*$WORK.* output.name=$1( |$)" 2>/dev/null | tr '\n' ' '; }

# handlers_ready PIDS: every process catches SIGTERM (bit 15 of SigCgt)
handlers_ready()
{
    local p mask
    for p in $1; do
        mask=$(awk '/^SigCgt:/ { print $2 }' "/proc/$p/status" 2>/dev/null)
        [ -n "$mask" ] && [ $((0x$mask & 0x4000)) -ne 0 ] || return 1
    done
    return 0
}

test_client_error()
{
    cp "$WORK/p6.h5" "$WORK/bad.h5"
    dump_dataset "$WORK/p6.h5" /clients/images "$WORK/img.bin" || { fail "cannot dump /clients/images"; return; }
    python3 "$HERE/flip_data.py" --deflate "$WORK/bad.h5" "$WORK/img.bin" >/dev/null ||
        { fail "flip_data.py --deflate found no compressed chunk of /clients/images to damage"; return; }
    local np
    for np in 1 3; do
        fh "$np" "bad$np" "$WORK/base.ini" data.path="$WORK/bad.h5" output.name="bad$np"
        expect_rc "np $np, damaged client rows" 2 || continue
        grep -q "of /clients/images failed (HDF5: inflate() failed)" "$WORK/bad$np.err" ||
            fail "np $np: stderr lacks the HDF5 message: $(errline "bad$np")"
        grep -q "no message recorded" "$WORK/bad$np.err" && fail "np $np: 'no message recorded' on stderr"
    done
    grep -q "error: rank [12]: .*bad.h5: reading rows" "$WORK/bad3.err" ||
        fail "np 3: the message does not say which client rank failed: $(errline bad3)"
}

test_alone_error()
{
    MPI_X=(-x FEDHET_TEST_FAIL_RANK=2 -x FEDHET_TEST_FAIL_ROUND=1)
    RUN_LIMIT=30 fh 3 alone "$WORK/base.ini" output.name=alone
    MPI_X=()
    expect_rc "rank 2 failing in round 2 of 3" 2
    grep -q "\[rank 0\] error: rank 2 failed: .*failure injected" "$WORK/alone.err" ||
        fail "rank 0 did not print rank 2's message: $(errline alone)"
    grep -q "rank 2 failed: .*failure injected" "$WORK/out/alone/log.txt" 2>/dev/null ||
        fail "log.txt lacks rank 2's message"
}

test_early_sigterm()
{
    # each rank is signalled the moment it catches SIGTERM, which is before MPI_Init (about 0.5 s): most
    # are still single-threaded then (Open MPI's threads start inside MPI_Init)
    local name=early ranks p until signalled=" " early=0
    bg_run $name 3 "$WORK/base.ini" output.name=$name fl.rounds=50
    until=$(($(date +%s) + 30))
    while [ "$(date +%s)" -lt "$until" ] && [ "$(echo $signalled | wc -w)" -lt 3 ]; do
        kill -0 "$MPIRUN_PID" 2>/dev/null || break
        for p in $(ranks_of_run $name); do
            case "$signalled" in *" $p "*) continue ;; esac
            handlers_ready "$p" || continue
            [ "$(awk '/^Threads:/ { print $2 }' "/proc/$p/status" 2>/dev/null)" = 1 ] && early=$((early + 1))
            kill -TERM "$p" && signalled="$signalled$p "
        done
    done
    [ "$(echo $signalled | wc -w)" = 3 ] || { fail "signalled only '$signalled' (3 ranks expected)"; wait "$MPIRUN_PID"; return; }
    wait "$MPIRUN_PID"
    RC=$?
    expect_rc "SIGTERM to each rank as soon as it catches it" 0
    grep -q "Resume with" "$WORK/$name.out" || fail "no 'Resume with' line"
    local rd
    rd=$(rounds_done "$WORK/out/$name/checkpoint.h5")
    [ -n "$rd" ] && [ "$rd" -lt 50 ] || fail "checkpoint rounds_done '$rd' (expected a stop before round 50)"
    note "$early of 3 ranks were signalled before MPI start-up; stopped with a checkpoint of $rd rounds"
}

test_startup_sigterm()
{
    # a constructor that sleeps 1 s, and does not pass itself on to the processes the run starts (orted)
    cat >"$WORK/slow.c" <<'EOF2'
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <time.h>
__attribute__((constructor)) static void slow_start(void)
{
    unsetenv("LD_PRELOAD");
    struct timespec t = { 1, 0 };
    nanosleep(&t, NULL);
}
EOF2
    cc -shared -fPIC -o "$WORK/slow.so" "$WORK/slow.c" || { fail "cannot build the slow constructor"; return; }
    local name=startup pid
    timeout -k 5 "$RUN_LIMIT" env LD_PRELOAD="$WORK/slow.so" "$FEDHET" run "$WORK/one.ini" output.name=$name fl.rounds=50 \
        >"$WORK/$name.out" 2>"$WORK/$name.err" &
    pid=$!
    BG_PIDS+=("$pid")
    sleep 0.5
    pkill -TERM -P "$pid" -f -- "output.name=$name" || { fail "no run process to signal"; wait "$pid"; return; }
    wait "$pid"
    RC=$? LAST_TAG=$name
    expect_rc "SIGTERM during the libraries' start-up" 0 || return
    grep -q "stopped by SIGTERM after round 1 of 50; checkpoint written. Resume with" "$WORK/$name.out" ||
        fail "no line saying it stopped after round 1: $(tail -1 "$WORK/$name.out")"
}

test_long_round()
{
    local name=long t0 took
    bg_run $name 3 "$WORK/base.ini" output.name=$name fl.rounds=2 train.steps=4294967297 fl.term_grace=1
    local until=$(($(date +%s) + 60)) ranks=""
    while [ "$(date +%s)" -lt "$until" ]; do
        ranks=$(ranks_of_run $name)
        [ "$(echo $ranks | wc -w)" = 3 ] && [ -f "$WORK/out/$name/metrics.csv" ] && break
        kill -0 "$MPIRUN_PID" 2>/dev/null || break
        sleep 0.05
    done
    sleep 1 # well inside round 1
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    kill -TERM $ranks 2>/dev/null || { fail "no rank processes to signal"; return; }
    wait "$MPIRUN_PID"
    RC=$?
    took=$(elapsed_since "$t0")
    expect_rc "SIGTERM inside a round of 2^32 + 1 steps" 0 || return
    grep -q "round 1 was left between local steps after fl.term_grace = 1 s; checkpoint written. Resume with" \
        "$WORK/$name.out" || fail "no line saying round 1 was left: $(tail -1 "$WORK/$name.out")"
    [ "$(rounds_done "$WORK/out/$name/checkpoint.h5")" = 0 ] || fail "checkpoint rounds_done is not 0"
    [ "$(data_rows "$WORK/out/$name/metrics.csv")" = 0 ] || fail "metrics.csv has rows of a round that was left"
    awk -v t="$took" 'BEGIN { exit !(t < 30) }' || fail "the run took $took s to stop (grace 1 s)"
    note "stopped $took s after SIGTERM (fl.term_grace = 1)"
}

# rounds of 500 local steps per client; SIGTERM after the first row, grace 0: the round under way is left
test_left_resume()
{
    local name=left args=(fl.rounds=3 train.steps=500 fl.checkpoint_every=100 fl.term_grace=0)
    bg_run $name 3 "$WORK/base.ini" output.name=$name "${args[@]}"
    if ! wait_rows "$WORK/out/$name/metrics.csv" 1 "$RUN_LIMIT" "$MPIRUN_PID"; then
        wait "$MPIRUN_PID"
        fail "the run ended (exit $?) before its first metrics row: $(errline $name)"
        return
    fi
    # shellcheck disable=SC2046
    kill -TERM $(ranks_of_run $name) 2>/dev/null
    wait "$MPIRUN_PID"
    RC=$?
    expect_rc "SIGTERM with fl.term_grace = 0" 0 || return
    local rd
    rd=$(rounds_done "$WORK/out/$name/checkpoint.h5")
    grep -q "Resume with" "$WORK/$name.out" || fail "no 'Resume with' line"
    [ -n "$rd" ] && [ "$rd" = "$(data_rows "$WORK/out/$name/metrics.csv")" ] ||
        fail "checkpoint rounds_done '$rd' but metrics.csv has $(data_rows "$WORK/out/$name/metrics.csv") rows"
    grep -q "was left between local steps" "$WORK/$name.out" ||
        note "the round ended before the signal was seen: $(tail -1 "$WORK/$name.out" | cut -c1-120)"
    fh 2 leftResume --resume "$WORK/out/$name"
    expect_rc "--resume after a left round" 0 || return
    fh 3 leftRef "$WORK/base.ini" output.name=leftRef "${args[@]}"
    expect_rc "uninterrupted reference" 0 || return
    same_global "$WORK/out/leftRef/run.h5" "$WORK/out/$name/run.h5" "uninterrupted vs left round + resume"
    same_csv "$WORK/out/leftRef/metrics.csv" "$WORK/out/$name/metrics.csv" "uninterrupted vs left round + resume"
    note "stopped with $rd rounds done"
}

test_usr1_mpirun()
{
    local name=usr1
    bg_run $name 3 "$WORK/base.ini" output.name=$name fl.rounds=2000 fl.checkpoint_every=100000 train.epochs=5
    if ! wait_rows "$WORK/out/$name/metrics.csv" 1 60 "$MPIRUN_PID"; then
        wait "$MPIRUN_PID"
        fail "the run ended (exit $?) or stalled before its first metrics row: $(errline $name)"
        return
    fi
    local mp
    mp=$(pgrep -P "$MPIRUN_PID" -x mpirun)
    [ -n "$mp" ] || { fail "no mpirun under the test's timeout"; return; }
    kill -USR1 "$mp"
    wait "$MPIRUN_PID"
    RC=$?
    expect_rc "mpirun after SIGUSR1" 0 || return
    grep -q "stopped by SIGUSR1 after round .*Resume with" "$WORK/$name.out" || fail "no resume line naming SIGUSR1"
    local rd target
    rd=$(rounds_done "$WORK/out/$name/checkpoint.h5")
    [ -n "$rd" ] && [ "$rd" = "$(data_rows "$WORK/out/$name/metrics.csv")" ] || { fail "checkpoint rounds_done '$rd'"; return; }
    target=$((rd + 2))
    fh 3 usr1b --resume "$WORK/out/$name" fl.rounds=$target
    expect_rc "--resume fl.rounds=$target" 0 || return
    fh 3 usr1Ref "$WORK/base.ini" output.name=usr1Ref fl.rounds=$target fl.checkpoint_every=100000 train.epochs=5
    expect_rc "uninterrupted reference" 0 &&
        same_global "$WORK/out/usr1Ref/run.h5" "$WORK/out/$name/run.h5" "uninterrupted vs SIGUSR1 to mpirun + resume"
    note "stopped after round $rd"
}

test_sigterm_mpirun()
{
    local name=termmpi
    bg_run $name 3 "$WORK/base.ini" output.name=$name fl.rounds=2 train.steps=4294967297 fl.term_grace=60
    if ! wait_rows "$WORK/out/$name/metrics.csv" 0 60 "$MPIRUN_PID"; then
        wait "$MPIRUN_PID"
        fail "the run ended (exit $?) before it started: $(errline $name)"
        return
    fi
    sleep 1
    local mp
    mp=$(pgrep -P "$MPIRUN_PID" -x mpirun)
    [ -n "$mp" ] || { fail "no mpirun under the test's timeout"; return; }
    kill -TERM "$mp"
    wait "$MPIRUN_PID"
    RC=$?
    [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] ||
        fail "mpirun exited $RC after SIGTERM in a long round: the advice against it in docs/usage.md is out of date"
    [ -z "$(ranks_of_run $name)" ] || fail "rank processes left: $(ranks_of_run $name)"
    note "mpirun exited $RC"
}

TESTS=(client_error alone_error early_sigterm startup_sigterm long_round left_resume usr1_mpirun sigterm_mpirun)

run_tests "$@"
