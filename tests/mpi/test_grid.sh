#!/usr/bin/env bash
# End-to-end tests of `fedhet grid` under mpirun on tiny synthetic data (tests/mpi/lib.sh): members on
# sub-communicators bit-identical to the same members run alone with `fedhet run`; failing members recorded
# while the others go on; bad grids refused before anything is written; SIGTERM then --resume ending
# bit-identical to an uninterrupted grid; --member (job arrays), --list, --count, --force, --help.
# usage: tests/mpi/test_grid.sh [test_name]      (last line: "N passed, N failed"; exit 1 when any failed)
. "$(dirname "$0")/lib.sh"




setup()
{
    setup_tiny || return 1
    # the grid: base.ini plus lists; 2 x 2 members
    { cat "$WORK/base.ini"; printf '\n[grid]\ntrain.lr = 0.05, 0.1\nseed = 1, 2\nranks_per_member = 2\n'; } >"$WORK/sweep.ini"
}

MEMBERS="lr-0.05_seed-1 lr-0.05_seed-2 lr-0.1_seed-1 lr-0.1_seed-2"

# 1. 4 members on 2 groups of 2 ranks: each equals `fedhet run` of the same config on 2 ranks, bit for bit.
test_members_equal_runs_alone()
{
    fg 4 g1 "$WORK/sweep.ini"
    expect_rc "grid of 4 members on -np 4" 0 || return
    local G=$WORK/out/sweep m lr seed
    [ -f "$G/members.csv" ] || { fail "no members.csv"; return; }
    grep -q "members done" "$WORK/g1.out" && grep -q "ETA" "$WORK/g1.out" || fail "no progress lines with ETA on stdout"
    [ "$(grep -c '^\[grid\] start' "$WORK/g1.out")" = 4 ] || fail "$(grep -c '^\[grid\] start' "$WORK/g1.out") members started, expected 4"
    grep -q "on group 1" "$WORK/g1.out" || fail "group 1 ran no member: $(grep start "$WORK/g1.out" | tr '\n' ' ')"
    for m in $MEMBERS; do
        [ "$(member_state "$G" "$m")" = done ] || fail "$m: state '$(member_state "$G" "$m")' in members.csv"
        [ -f "$G/$m/log.txt" ] || fail "$m: no log.txt"
        grep -q "round 3/3" "$G/$m/log.txt" || fail "$m: its log.txt lacks the round lines"
        lr=${m#lr-}; lr=${lr%%_*}; seed=${m##*seed-}
        fh 2 "alone_$m" "$WORK/base.ini" train.lr="$lr" fl.seed="$seed" output.dir="$WORK/alone" output.name="$m"
        expect_rc "$m alone" 0 || continue
        same_global "$WORK/alone/$m/run.h5" "$G/$m/run.h5" "$m: grid member vs fedhet run alone"
        same_csv "$WORK/alone/$m/metrics.csv" "$G/$m/metrics.csv" "$m: grid member vs fedhet run alone"
        same_csv "$WORK/alone/$m/clients.csv" "$G/$m/clients.csv" "$m: grid member vs fedhet run alone"
    done
    # each member ran exactly once
    local attempts
    attempts=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "attempts") c = i; next } { print $c }' "$G/members.csv" | sort -u | tr '\n' ' ')
    [ "$attempts" = "1 " ] || fail "attempts per member: '$attempts', expected 1 each"
    # the same grid again is refused without --resume/--force, and --force reruns it
    fg 4 g1again "$WORK/sweep.ini"
    expect_rc "the same grid again" 1 && { grep -q -- "--resume" "$WORK/g1again.err" || fail "the refusal does not mention --resume: $(errline g1again)"; }
    fg 2 g1force "$WORK/sweep.ini" --force grid.ranks_per_member=1
    expect_rc "--force on 2 groups of 1 rank" 0 &&
        same_global "$WORK/alone/lr-0.1_seed-2/run.h5" "$G/lr-0.1_seed-2/run.h5" "--force rerun on 1 rank per member vs alone on 2"
}

# 2. A member that diverges is recorded as failed; the others finish; exit code 10 + failed members (a message
#    without call-chain frames); --resume counts it as failed, not finished.
test_failed_members()
{
    { cat "$WORK/base.ini"; printf '\n[grid]\ntrain.lr = 0.05, 1e6\n'; } >"$WORK/fails.ini"
    fg 2 gf "$WORK/fails.ini" grid.ranks_per_member=1
    expect_rc "grid with a diverging member" 11
    local G=$WORK/out/fails
    [ "$(member_state "$G" lr-0.05)" = done ] || fail "lr 0.05: state '$(member_state "$G" lr-0.05)'"
    [ "$(member_state "$G" lr-1e6)" = failed ] || fail "lr 1e6: state '$(member_state "$G" lr-1e6)'"
    grep "lr-1e6" "$G/members.csv" | grep -q "diverged" || fail "members.csv: no 'diverged' message for lr 1e6"
    grep -q "1 of 2 members failed" "$WORK/gf.err" || fail "stderr lacks '1 of 2 members failed': $(errline gf)"
    grep -q "  at src/" "$WORK/gf.err" && fail "the error shows call-chain frames unasked: $(grep -m1 '  at src/' "$WORK/gf.err")"
    # --resume skips it (and the finished one): nothing runs, same exit code
    fg 2 gf2 --resume "$G"
    expect_rc "--resume of a grid with a failed member" 11
    grep -q "0 to run (1 already finished, 1 failed before" "$WORK/gf2.out" ||
        fail "--resume: the counts are wrong: $(grep '\[grid\]' "$WORK/gf2.out" | head -1)"
}

# 2b. A bad value in a list, found before any member starts, whatever it is: a value out of range (exit 1) or a
#     data file that does not exist (exit 2); every invalid member is named, nothing runs and nothing is written.
test_invalid_members()
{
    local G=$WORK/badout/sweep
    fg 1 inv1 "$WORK/sweep.ini" output.dir="$WORK/badout" grid.train.lr=0.05,-1,-2 grid.ranks_per_member=1
    expect_rc "a list with invalid values" 1
    grep -q "4 of 6 members are invalid; nothing was started" "$WORK/inv1.err" || fail "no count of invalid members: $(errline inv1)"
    grep -q "member lr--1_seed-1: .*lr = -1" "$WORK/inv1.err" && grep -q "member lr--2_seed-1: .*lr = -2" "$WORK/inv1.err" ||
        fail "the invalid members are not all named: $(tr '\n' ' ' <"$WORK/inv1.err" | cut -c1-400)"
    [ -e "$WORK/badout" ] && { fail "a grid with invalid members wrote $WORK/badout"; rm -rf "$WORK/badout"; }
    fg 1 inv2 "$WORK/sweep.ini" output.dir="$WORK/badout" grid.data.path="$WORK/p6.h5,$WORK/nope.h5" grid.ranks_per_member=1
    expect_rc "a list naming a missing data file" 2
    grep -q "nope.h5 does not exist" "$WORK/inv2.err" || fail "the missing file is not named: $(errline inv2)"
    grep -q "  at src/" "$WORK/inv2.err" && fail "call-chain frames unasked: $(grep -m1 '  at src/' "$WORK/inv2.err")"
    [ -e "$WORK/badout" ] && { fail "a grid with a missing data file wrote $WORK/badout"; rm -rf "$WORK/badout"; }
    # a data file with fewer clients than a member's ranks need
    fg 4 inv3 "$WORK/sweep.ini" output.dir="$WORK/badout" grid.data.path="$WORK/p6.h5,$WORK/p1.h5" grid.ranks_per_member=4
    expect_rc "a member with more ranks than its clients allow" 1
    grep -q "4 ranks for 1 clients" "$WORK/inv3.err" || fail "the rank count is not refused: $(errline inv3)"
    [ -e "$WORK/badout" ] && { fail "$WORK/badout was written"; rm -rf "$WORK/badout"; }
    return 0
}

# 3. Bad grids: exit 1 with a clear message before anything is written.
test_bad_grids()
{
    local t np args want
    bad()
    {
        np=$1 t=$2 want=$3
        shift 3
        fg "$np" "bad_$t" "$@"
        if expect_rc "$t" 1; then
            grep -qi -- "$want" "$WORK/bad_$t.err" || fail "$t: stderr lacks '$want': $(errline "bad_$t")"
        fi
        [ -e "$WORK/badout" ] && { fail "$t: $WORK/badout was written ($(ls "$WORK/badout" | head -3 | tr '\n' ' '))"; rm -rf "$WORK/badout"; }
    }
    bad 1 notakey "not a config key" "$WORK/sweep.ini" output.dir="$WORK/badout" grid.train.lrr=0.1,0.2
    bad 1 emptylist "empty list" "$WORK/sweep.ini" output.dir="$WORK/badout" grid.seed=
    bad 1 toomanyranks "ranks_per_member = 4" "$WORK/sweep.ini" output.dir="$WORK/badout" grid.ranks_per_member=4
    bad 3 notmultiple "not a multiple" "$WORK/sweep.ini" output.dir="$WORK/badout"
    bad 1 thousand "--yes" "$WORK/sweep.ini" output.dir="$WORK/badout" grid.seed=0..1000
    bad 1 allinvalid "4 of 4 members are invalid" "$WORK/sweep.ini" output.dir="$WORK/badout" grid.train.lr=-1,-2 grid.ranks_per_member=1
    bad 1 swept "swept by" "$WORK/sweep.ini" output.dir="$WORK/badout" train.lr=0.3
    bad 1 nogrid "no \[grid\] section" "$WORK/base.ini" output.dir="$WORK/badout"
    bad 1 option "unknown option" "$WORK/sweep.ini" --bogus
    # --list prints without running or writing; more than 1000 members need no --yes there
    fg 1 list "$WORK/sweep.ini" output.dir="$WORK/badout" grid.seed=0..1000 --list
    expect_rc "--list of 2002 members" 0
    grep -q "lr-0.1_seed-1000" "$WORK/list.out" || fail "--list lacks member lr-0.1_seed-1000"
    fg 1 count "$WORK/sweep.ini" output.dir="$WORK/badout" --count
    [ "$(cat "$WORK/count.out")" = 4 ] || fail "--count printed '$(cat "$WORK/count.out")', expected 4"
    fg 1 listinv "$WORK/sweep.ini" output.dir="$WORK/badout" grid.train.lr=0.1,-1 --list
    grep "lr--1" "$WORK/listinv.out" | grep -q INVALID || fail "--list does not mark lr -1 INVALID"
    [ -e "$WORK/badout" ] && fail "--list/--count wrote $WORK/badout"
}

# 4. SIGTERM to every rank mid-grid: running members checkpoint, no member starts, exit 0; --resume
#    finishes; every member ends bit-identical to an uninterrupted grid's.
test_sigterm_resume()
{
    local args=("$WORK/sweep.ini" fl.rounds=150 fl.checkpoint_every=1000)
    fg 4 ref "${args[@]}" output.dir="$WORK/ref"
    expect_rc "uninterrupted grid" 0 || return
    timeout -k 5 "$RUN_LIMIT" mpirun --oversubscribe -np 4 "$FEDHET" grid "${args[@]}" output.dir="$WORK/int" \
        >"$WORK/int.out" 2>"$WORK/int.err" &
    local tpid=$! m
    BG_PIDS+=("$tpid")
    local until=$(($(date +%s) + 60)) seen=0
    while [ "$(date +%s)" -lt "$until" ] && kill -0 "$tpid" 2>/dev/null; do
        for m in $MEMBERS; do
            [ "$(data_rows "$WORK/int/sweep/$m/metrics.csv")" -ge 2 ] && seen=1
        done
        [ "$seen" = 1 ] && break
        sleep 0.02
    done
    [ "$seen" = 1 ] || { wait "$tpid"; fail "no member reached round 2 (grid exit $?)"; return; }
    local ranks
    ranks=$(pgrep -f -- "^$FEDHET grid $WORK/sweep.ini" | tr '\n' ' ')
    kill -TERM $ranks
    wait "$tpid"
    RC=$? LAST_TAG=int
    expect_rc "grid after SIGTERM to its ranks" 0 || return
    grep -q -- "--resume $WORK/int/sweep" "$WORK/int.out" || fail "no resume line on stdout"
    local states
    states=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "state") c = i; next } { print $c }' "$WORK/int/sweep/members.csv" | sort | uniq -c | tr -s ' \n' ' ')
    note "states after SIGTERM:$states"
    echo "$states" | grep -q stopped || fail "no member was stopped by SIGTERM (states:$states)"
    echo "$states" | grep -q done && note "a member had finished before the signal"
    fg 4 int2 --resume "$WORK/int/sweep"
    expect_rc "--resume" 0 || return
    for m in $MEMBERS; do
        [ "$(member_state "$WORK/int/sweep" "$m")" = done ] || fail "$m: state '$(member_state "$WORK/int/sweep" "$m")' after --resume"
        same_global "$WORK/ref/sweep/$m/run.h5" "$WORK/int/sweep/$m/run.h5" "$m: uninterrupted vs SIGTERM + --resume"
        same_csv "$WORK/ref/sweep/$m/metrics.csv" "$WORK/int/sweep/$m/metrics.csv" "$m: uninterrupted vs SIGTERM + --resume"
    done
    grep -q "resumed from its checkpoint" "$WORK/int2.out" || fail "--resume printed no resumed member"
    # a finished grid resumes to nothing
    fg 2 int3 --resume "$WORK/int/sweep" 
    expect_rc "--resume of a finished grid (other rank count)" 0
    grep -q "0 to run" "$WORK/int3.out" || fail "--resume of a finished grid ran members"
}

# 5. --member I (a SLURM array task): one member on all ranks, resumable, idempotent.
test_member_mode()
{
    fg 2 mem1 "$WORK/sweep.ini" --member 1 output.dir="$WORK/arr"
    expect_rc "--member 1" 0 || return
    local G=$WORK/arr/sweep
    [ "$(member_state "$G" lr-0.05_seed-2)" = done ] || fail "member 1 not done: '$(member_state "$G" lr-0.05_seed-2)'"
    [ "$(member_state "$G" lr-0.05_seed-1)" = pending ] || fail "member 0 is '$(member_state "$G" lr-0.05_seed-1)', expected pending"
    [ -e "$G/lr-0.05_seed-1" ] && fail "--member 1 made member 0's folder"
    fg 1 mem1b "$WORK/sweep.ini" --member 1 output.dir="$WORK/arr"
    expect_rc "--member 1 again" 0
    grep -q "nothing to do" "$WORK/mem1b.out" || fail "--member 1 again did not say 'nothing to do'"
    fg 3 mem3 "$WORK/sweep.ini" --member 3 output.dir="$WORK/arr"
    expect_rc "--member 3 on 3 ranks" 0 || return
    fh 2 alone3 "$WORK/base.ini" train.lr=0.1 fl.seed=2 output.dir="$WORK/alone3" output.name=m3
    expect_rc "member 3 alone" 0 && same_global "$WORK/alone3/m3/run.h5" "$G/lr-0.1_seed-2/run.h5" "--member 3 on 3 ranks vs alone on 2"
    fg 1 membad "$WORK/sweep.ini" --member 9 output.dir="$WORK/arr"
    expect_rc "--member 9 of 4" 1
    # a different grid file in the same folder is refused
    mkdir -p "$WORK/other" && sed 's/^seed = 1, 2/seed = 1, 3/' "$WORK/sweep.ini" >"$WORK/other/sweep.ini"
    fg 1 memother "$WORK/other/sweep.ini" --member 0 output.dir="$WORK/arr"
    expect_rc "--member with another grid file in the folder" 1
}

test_help()
{
    "$FEDHET" grid --help >"$WORK/help.out" 2>&1
    RC=$? LAST_TAG=help
    expect_rc "grid --help" 0
    grep -q "ranks_per_member" "$WORK/help.out" && grep -q -- "--resume" "$WORK/help.out" || fail "grid --help lacks ranks_per_member or --resume"
}

TESTS=(members_equal_runs_alone failed_members invalid_members bad_grids sigterm_resume member_mode help)
run_tests "$@"
