#!/usr/bin/env bash
# The job scripts jobs/*.sbatch submitted to a REAL SLURM (a one-node cluster that tools/test-slurm.sh
# starts, unless SLURM_CONF names a running one) with `sbatch --wait`, on tiny configs:
#   run    jobs/run.sbatch: one experiment on 3 ranks, bit-identical to the same config under mpirun;
#   grid   jobs/grid.sbatch: 4 members on 2 groups of 2 ranks, each bit-identical to the member run alone;
#   array  jobs/array.sbatch: the same grid as a 4-task job array, each task equal to the grid's member;
#   chain  jobs/chain.sbatch: link 1 (--time=1 --signal=TERM@55) is stopped by its time limit's signal,
#          link 2 (submitted with --dependency=afterok) resumes, and the run ends bit-identical to an
#          uninterrupted one; link 3 finds it complete.
#   long_round  jobs/run.sbatch with one round of 2^32 + 1 local steps: SLURM's time-limit SIGTERM leaves it
#          after fl.term_grace, exit 0 with a checkpoint, before SLURM's SIGKILL.
#   lint   every #SBATCH line of jobs/*.sbatch carries a comment.
# Starting the cluster needs root (or passwordless sudo) and slurm-wlm and munge (make deps installs them).
# When no cluster can be had, every test that needs one FAILS with the reason: these tests run wherever
# `make test` runs. The cluster this script started (state in /tmp/fedhet-test-slurm.PID) is removed at
# the end.
# usage: tests/slurm/test_slurm.sh [test_name]      (last line: "N passed, N failed, N skipped"; exit 1 when any failed)
. "$(dirname "$0")/../mpi/lib.sh"

JOBS=$ROOT/jobs
TEST_SLURM=$ROOT/tools/test-slurm.sh
# a cluster of this run's own: concurrent test runs must not stop each other's
export FEDHET_TEST_SLURM_DIR=/tmp/fedhet-test-slurm.$$
STARTED_SLURM=0
SLURM_MISSING=""
SUDO=()

slurm_cleanup()
{
    local p
    for p in $(pgrep -f -- "^$FEDHET (run|grid) .*$WORK" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    [ "$STARTED_SLURM" = 1 ] && "${SUDO[@]}" "$TEST_SLURM" stop >/dev/null 2>&1
}
trap 'slurm_cleanup; cleanup' EXIT

# Uses the SLURM of SLURM_CONF when it answers, else starts one; sets SLURM_MISSING when neither works.
slurm_up()
{
    if [ -n "${SLURM_CONF:-}" ] && scontrol ping 2>/dev/null | grep -q 'is UP'; then return; fi
    if [ "$(id -u)" != 0 ]; then
        sudo -n true 2>/dev/null || { SLURM_MISSING="starting the test SLURM needs root (or sudo -n)"; return; }
        SUDO=(sudo -n env FEDHET_TEST_SLURM_DIR="$FEDHET_TEST_SLURM_DIR")
    fi
    local out
    if ! out=$("${SUDO[@]}" "$TEST_SLURM" start 2>"$WORK/slurm-start.err"); then
        SLURM_MISSING="tools/test-slurm.sh start failed: $(tail -3 "$WORK/slurm-start.err" | tr '\n' ' ')"
        return
    fi
    STARTED_SLURM=1
    eval "$out"
}

# sb TAG SBATCH_ARGS...: sbatch --wait (job output in $WORK/TAG.out); RC = the job's exit code
sb()
{
    local tag=$1
    shift
    LAST_TAG=$tag
    timeout -k 5 300 sbatch --wait --overcommit --output="$WORK/$tag.out" --job-name="fedhet-test-$tag" "$@" \
        >"$WORK/$tag.sbatch" 2>"$WORK/$tag.err"
    RC=$?
    [ "$RC" = 124 ] && note "$tag: sbatch --wait timed out"
    return 0
}

job_tail() { tail -3 "$WORK/$1.out" 2>/dev/null | tr '\n' ' ' | cut -c1-300; }

setup()
{
    setup_tiny || return 1
    { cat "$WORK/base.ini"; printf '\n[grid]\ntrain.lr = 0.05, 0.1\nseed = 1, 2\nranks_per_member = 2\n'; } >"$WORK/sweep.ini"
    # every job starts in the repository root (jobs/*.sbatch cd to the submit dir and use bin/fedhet)
    cd "$ROOT" || return 1
}

# a test that needs the cluster fails when there is none
no_slurm() { [ -n "$SLURM_MISSING" ] && fail "no SLURM to run on: $SLURM_MISSING"; [ -n "$SLURM_MISSING" ]; }

MEMBERS="lr-0.05_seed-1 lr-0.05_seed-2 lr-0.1_seed-1 lr-0.1_seed-2"

test_run()
{
    no_slurm && return
    sb run --ntasks=3 "$JOBS/run.sbatch" "$WORK/base.ini" output.dir="$WORK/slurm" output.name=run1
    expect_rc "sbatch --wait jobs/run.sbatch" 0 || { note "job output: $(job_tail run)"; return; }
    [ -f "$WORK/slurm/run1/run.h5" ] || { fail "no run.h5 ($(job_tail run))"; return; }
    grep -q "done: 3 rounds" "$WORK/run.out" || fail "the job's output lacks 'done: 3 rounds'"
    fh 3 runref "$WORK/base.ini" output.dir="$WORK/ref" output.name=run1
    expect_rc "the same config under mpirun" 0 &&
        same_global "$WORK/ref/run1/run.h5" "$WORK/slurm/run1/run.h5" "srun job vs mpirun"
}

test_grid()
{
    no_slurm && return
    sb grid --ntasks=4 "$JOBS/grid.sbatch" "$WORK/sweep.ini" output.dir="$WORK/slurm"
    expect_rc "sbatch --wait jobs/grid.sbatch (4 members, 2 groups)" 0 || { note "job output: $(job_tail grid)"; return; }
    local G=$WORK/slurm/sweep m lr seed
    grep -q "on 2 groups of 2 ranks" "$WORK/grid.out" || fail "the grid did not run on 2 groups of 2 ranks: $(grep -m1 '\[grid\]' "$WORK/grid.out")"
    grep -q "on group 1" "$WORK/grid.out" || fail "group 1 ran no member"
    for m in $MEMBERS; do
        lr=${m#lr-}; lr=${lr%%_*}; seed=${m##*seed-}
        fh 2 "alone_$m" "$WORK/base.ini" train.lr="$lr" fl.seed="$seed" output.dir="$WORK/alone" output.name="$m"
        expect_rc "$m alone under mpirun" 0 || continue
        same_global "$WORK/alone/$m/run.h5" "$G/$m/run.h5" "$m: SLURM grid member vs fedhet run alone"
        same_csv "$WORK/alone/$m/metrics.csv" "$G/$m/metrics.csv" "$m: SLURM grid member vs fedhet run alone"
    done
}

test_array()
{
    no_slurm && return
    local n
    n=$("$FEDHET" grid "$WORK/sweep.ini" --count 2>/dev/null)
    [ "$n" = 4 ] || { fail "fedhet grid --count printed '$n'"; return; }
    LAST_TAG=array
    timeout -k 5 300 sbatch --wait --overcommit --array=0-$((n - 1)) --ntasks=2 --output="$WORK/array-%a.out" \
        --job-name=fedhet-test-array "$JOBS/array.sbatch" "$WORK/sweep.ini" output.dir="$WORK/arr" \
        >"$WORK/array.sbatch" 2>"$WORK/array.err"
    RC=$?
    expect_rc "sbatch --wait --array=0-3 jobs/array.sbatch" 0 || { note "task 0: $(tail -2 "$WORK/array-0.out" | tr '\n' ' ')"; return; }
    local m
    for m in $MEMBERS; do
        [ -f "$WORK/alone/$m/run.h5" ] || fh 2 "alone_$m" "$WORK/base.ini" train.lr="$(echo "$m" | sed 's/lr-\([^_]*\)_.*/\1/')" \
            fl.seed="${m##*seed-}" output.dir="$WORK/alone" output.name="$m"
        same_global "$WORK/alone/$m/run.h5" "$WORK/arr/sweep/$m/run.h5" "$m: array task vs fedhet run alone"
    done
    local done_count
    done_count=$(grep -c ',done,' "$WORK/arr/sweep/members.csv" 2>/dev/null)
    [ "$done_count" = 4 ] || note "members.csv of the array counts $done_count done (the last task to finish rewrites it)"
}

# The chain: rounds enough for about 50 s of uninterrupted run on this machine (measured first), so that
# link 1 (--time=1 --signal=TERM@55: slurmctld sends the signal once 5 s are used, at its next time-limit
# pass, within about 35 s) is always stopped by it; link 2 has time to finish.
test_chain()
{
    no_slurm && return
    local cfg=("$WORK/base.ini" train.epochs=2 fl.checkpoint_every=1000000)
    fh 2 calib "${cfg[@]}" output.dir="$WORK/calib" output.name=c fl.rounds=60
    expect_rc "calibration run" 0 || return
    local per rounds
    per=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "t_round") a = i; if ($i == "t_eval") b = i }; next }
                   NR > 6 { s += $a + $b; n++ } END { printf "%.6f", s / n }' "$WORK/calib/c/metrics.csv")
    rounds=$(awk -v p="$per" 'BEGIN { r = int(50 / (p > 0 ? p : 0.001)); if (r < 200) r = 200; if (r > 200000) r = 200000; print r }')
    note "$rounds rounds (about $per s each here)"
    cfg+=(fl.rounds="$rounds" output.dir="$WORK/chain" output.name=long)
    # the uninterrupted reference runs outside SLURM meanwhile
    timeout -k 5 600 mpirun --oversubscribe -np 2 "$FEDHET" run "$WORK/base.ini" train.epochs=2 fl.checkpoint_every=1000000 \
        fl.rounds="$rounds" output.dir="$WORK/chainref" output.name=long >"$WORK/chainref.out" 2>"$WORK/chainref.err" &
    local refpid=$!
    BG_PIDS+=("$refpid")
    local j1 j2 j3
    j1=$(sbatch --parsable --overcommit --ntasks=2 --time=1 --signal=TERM@55 --output="$WORK/chain1.out" \
        --job-name=fedhet-test-chain "$JOBS/chain.sbatch" "${cfg[@]}") || { fail "sbatch link 1: $j1"; return; }
    j2=$(sbatch --parsable --overcommit --ntasks=2 --time=5 --dependency=afterok:"$j1" --output="$WORK/chain2.out" \
        --job-name=fedhet-test-chain "$JOBS/chain.sbatch" "${cfg[@]}") || { fail "sbatch link 2: $j2"; return; }
    LAST_TAG=chain3
    timeout -k 5 400 sbatch --wait --overcommit --ntasks=2 --time=5 --dependency=afterok:"$j2" --output="$WORK/chain3.out" \
        --job-name=fedhet-test-chain "$JOBS/chain.sbatch" "${cfg[@]}" >"$WORK/chain3.sbatch" 2>"$WORK/chain3.err"
    RC=$?
    expect_rc "link 3 (after links 1 and 2 succeeded)" 0 || {
        note "link 1: $(tail -2 "$WORK/chain1.out" | tr '\n' ' ')"; note "link 2: $(tail -2 "$WORK/chain2.out" 2>/dev/null | tr '\n' ' ')"; }
    grep -q "stopped by SIGTERM after round" "$WORK/chain1.out" ||
        fail "link 1 was not stopped by its time limit's SIGTERM: $(tail -2 "$WORK/chain1.out" | tr '\n' ' ')"
    local stopped_at
    stopped_at=$(sed -n 's/.*stopped by SIGTERM after round \([0-9]*\).*/\1/p' "$WORK/chain1.out" | head -1)
    note "link 1 stopped after round ${stopped_at:-?} of $rounds"
    grep -q "resuming" "$WORK/chain2.out" 2>/dev/null || fail "link 2 did not resume the run"
    grep -q "is complete" "$WORK/chain2.out" 2>/dev/null || fail "link 2 did not complete the run: $(tail -2 "$WORK/chain2.out" | tr '\n' ' ')"
    grep -q "nothing to do" "$WORK/chain3.out" 2>/dev/null || fail "link 3 did not find the run complete"
    wait "$refpid"
    RC=$? LAST_TAG=chainref
    expect_rc "uninterrupted reference" 0 || return
    same_global "$WORK/chainref/long/run.h5" "$WORK/chain/long/run.h5" "chain (time-limit stop + resume) vs uninterrupted"
    same_csv "$WORK/chainref/long/metrics.csv" "$WORK/chain/long/metrics.csv" "chain vs uninterrupted"
}

# One round of 2^32 + 1 local steps under a time limit (--time=1 --signal=TERM@55): SLURM's SIGTERM comes
# while the round runs, and the round is left fl.term_grace = 5 s later, long before SLURM's SIGKILL: the
# job exits 0 with the checkpoint of the rounds before it (none: rounds_done 0) and the resume line.
test_long_round()
{
    no_slurm && return
    sb longround --ntasks=3 --time=1 --signal=TERM@55 "$JOBS/run.sbatch" "$WORK/base.ini" output.dir="$WORK/slurm" \
        output.name=longround fl.rounds=2 train.steps=4294967297 fl.term_grace=5
    expect_rc "sbatch --wait jobs/run.sbatch with a round of 2^32 + 1 steps" 0 || { note "job output: $(job_tail longround)"; return; }
    grep -q "round 1 was left between local steps after fl.term_grace = 5 s; checkpoint written. Resume with" \
        "$WORK/longround.out" || fail "the job did not leave its round: $(job_tail longround)"
    [ "$(rounds_done "$WORK/slurm/longround/checkpoint.h5")" = 0 ] || fail "checkpoint rounds_done is not 0"
}

# every #SBATCH line says what it is for
test_lint()
{
    local f bad
    for f in "$JOBS"/*.sbatch; do
        bad=$(grep -n '^#SBATCH' "$f" | grep -v '#SBATCH [^#]*  *# ' | cut -c1-80)
        [ -n "$bad" ] && fail "$(basename "$f"): #SBATCH lines without a comment: $bad"
        grep -q 'cpus-per-task' "$f" && grep -q 'OPENBLAS_NUM_THREADS=\$threads' "$f" ||
            fail "$(basename "$f"): threads do not follow --cpus-per-task"
        bash -n "$f" || fail "$(basename "$f"): bash -n fails"
    done
}

TESTS=(lint run grid array chain long_round)
slurm_up
if [ -n "$SLURM_MISSING" ]; then
    echo "  FAIL: the SLURM job tests cannot run: $SLURM_MISSING"
elif [ "$STARTED_SLURM" = 1 ]; then
    echo "  started a one-node SLURM with tools/test-slurm.sh (SLURM_CONF=$SLURM_CONF); removed at the end"
else
    echo "  using the running SLURM of SLURM_CONF=$SLURM_CONF"
fi
run_tests "$@"
