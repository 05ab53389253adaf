#!/usr/bin/env bash
# Crash consistency: every rank of a short run is SIGKILLed at exact points (after each phase of a round,
# inside the checkpoint write, between the final checkpoint and run.h5, inside the run.h5 write), then
# --resume finishes the run; run.h5 (every server and client dataset), metrics.csv and clients.csv (less
# the timing columns) must equal those of an uninterrupted run, whatever the point. The same for a grid
# member and `fedhet grid --resume`. The points are hit by the failure injection of src/fl/inject.c
# (FEDHET_TEST_KILL_POINT, FEDHET_TEST_KILL_ROUND), not by timing.
# usage: tests/mpi/test_crash.sh [test_name]      (last line: "N passed, N failed"; exit 1 when any failed)
source "$(dirname "$0")/lib.sh"


setup()
{
    setup_tiny || return 1
    { cat "$WORK/base.ini"; printf '\n[grid]\ntrain.lr = 0.05, 0.1\n'; } >"$WORK/sweep.ini"
}

# kill_env POINT ROUND: the next runs SIGKILL themselves at POINT of round ROUND (0-based)
kill_env() { MPI_X=(-x FEDHET_TEST_KILL_POINT="$1" -x FEDHET_TEST_KILL_ROUND="$2"); }

# same_run REF DIR WHAT: DIR's run.h5 and CSVs equal REF's (timing columns aside)
same_run()
{
    [ -f "$2/run.h5" ] || { fail "$3: no run.h5 after --resume ($(ls "$2" | tr '\n' ' '))"; return 1; }
    same_state "$1/run.h5" "$2/run.h5" "$3" || return 1
    same_csv "$1/metrics.csv" "$2/metrics.csv" "$3" || return 1
    same_csv "$1/clients.csv" "$2/clients.csv" "$3" || return 1
    [ "$(rounds_done "$2/run.h5")" = 3 ] || fail "$3: run.h5 says rounds_done = '$(rounds_done "$2/run.h5")'"
    return 0
}

# The points of one run of 3 rounds on 2 ranks (checkpoint every round); for each, the kill must have
# happened (nonzero exit, and no run.h5 unless the point lies after it) and --resume must end identical.
test_kill_points_run()
{
    fh 2 ref "$WORK/base.ini" output.name=ref
    expect_rc "uninterrupted run" 0 || return
    local case point round name
    for case in setup@0 broadcast@1 train@1 gather@1 aggregate@1 evaluate@1 checkpoint.h5@1 checkpoint.h5@2 \
                checkpoint.h5:done@2 run.h5@2 run.h5:done@2; do
        point=${case%@*} round=${case#*@}
        name=k_$(echo "$case" | tr -c 'a-zA-Z0-9\n' _)
        kill_env "$point" "$round"
        fh 2 "$name" "$WORK/base.ini" output.name="$name"
        MPI_X=()
        if [ "$RC" -eq 0 ] || [ "$RC" -eq 124 ]; then fail "$case: the run was not killed (exit $RC)"; continue; fi
        if [ "$point" != run.h5:done ] && [ -e "$WORK/out/$name/run.h5" ]; then
            fail "$case: run.h5 exists after a kill before it was written"; continue
        fi
        fh 2 "${name}_resume" --resume "$WORK/out/$name"
        expect_rc "$case: --resume" 0 || continue
        same_run "$WORK/out/ref" "$WORK/out/$name" "$case: killed + --resume vs uninterrupted"
    done
    # the folder of a run killed before its first checkpoint is restarted, and says so
    grep -q "no checkpoint" "$WORK/k_setup_0_resume.out" ||
        fail "setup@0: --resume does not say the run starts again: $(head -2 "$WORK/k_setup_0_resume.out" | tr '\n' ' ')"
    grep -q "writing it from the final checkpoint" "$WORK/k_run_h5_2_resume.out" ||
        fail "run.h5@2: --resume does not say it writes run.h5: $(head -2 "$WORK/k_run_h5_2_resume.out" | tr '\n' ' ')"
    ls "$WORK/out/k_run_h5_2" | grep -q '\.tmp-' && fail "run.h5@2: --resume left the killed run's temporary file"
    # once run.h5 is current, another --resume leaves it alone
    local before after
    before=$(stat -c %y "$WORK/out/k_run_h5_2/run.h5")
    fh 2 again --resume "$WORK/out/k_run_h5_2"
    expect_rc "a second --resume of a finished run" 0
    after=$(stat -c %y "$WORK/out/k_run_h5_2/run.h5")
    [ "$before" = "$after" ] || fail "a second --resume rewrote a current run.h5"
    grep -q "all 3 rounds are done" "$WORK/again.out" || fail "a second --resume: no 'all 3 rounds are done'"
}

# A finished run whose run.h5 is gone (the state a kill inside its write leaves): --resume writes it.
test_missing_final_model()
{
    fh 2 gone "$WORK/base.ini" output.name=gone
    expect_rc "uninterrupted run" 0 || return
    cp -r "$WORK/out/gone" "$WORK/out/gone_ref"
    rm "$WORK/out/gone/run.h5"
    fh 2 gone2 --resume "$WORK/out/gone"
    expect_rc "--resume without run.h5" 0 || return
    same_run "$WORK/out/gone_ref" "$WORK/out/gone" "run.h5 removed + --resume vs the original"
}



# A grid of 2 members (one at a time on 2 ranks), its first member killed at a point; `fedhet grid
# --resume` finishes both, each identical to the members of an uninterrupted grid and recorded done.
test_kill_points_grid()
{
    fg 2 gref "$WORK/sweep.ini" output.name=gref
    expect_rc "uninterrupted grid" 0 || return
    local case point round name m
    for case in train@1 checkpoint.h5:done@2 run.h5@2; do
        point=${case%@*} round=${case#*@}
        name=gk_$(echo "$case" | tr -c 'a-zA-Z0-9\n' _)
        kill_env "$point" "$round"
        fg 2 "$name" "$WORK/sweep.ini" output.name="$name"
        MPI_X=()
        if [ "$RC" -eq 0 ] || [ "$RC" -eq 124 ]; then fail "grid $case: the grid was not killed (exit $RC)"; continue; fi
        [ -e "$WORK/out/$name/lr-0.05/run.h5" ] && { fail "grid $case: run.h5 exists after the kill"; continue; }
        fg 2 "${name}_resume" --resume "$WORK/out/$name"
        expect_rc "grid $case: grid --resume" 0 || continue
        for m in lr-0.05 lr-0.1; do
            same_run "$WORK/out/gref/$m" "$WORK/out/$name/$m" "grid $case: member $m" || continue
            [ "$(member_state "$WORK/out/$name" "$m")" = done ] ||
                fail "grid $case: member $m is '$(member_state "$WORK/out/$name" "$m")' in members.csv"
        done
    done
}

# A finished grid member whose run.h5 is gone: `fedhet grid --resume` writes it from the final checkpoint
# instead of counting the member done.
test_missing_final_model_grid()
{
    fg 2 gdone "$WORK/sweep.ini" output.name=gdone
    expect_rc "uninterrupted grid" 0 || return
    local G=$WORK/out/gdone
    cp -r "$G/lr-0.1" "$WORK/gdone_lr-0.1"
    rm "$G/lr-0.1/run.h5"
    fg 2 gdone2 --resume "$G"
    expect_rc "grid --resume without a member's run.h5" 0 || return
    same_run "$WORK/gdone_lr-0.1" "$G/lr-0.1" "member lr-0.1: run.h5 removed + grid --resume vs the original"
    [ "$(member_state "$G" lr-0.1)" = done ] || fail "member lr-0.1 is '$(member_state "$G" lr-0.1)' in members.csv"
}

TESTS=(kill_points_run missing_final_model kill_points_grid missing_final_model_grid)
run_tests "$@"
