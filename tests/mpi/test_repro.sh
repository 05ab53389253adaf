#!/usr/bin/env bash
# The reproduction study's tools (docs/reproduction.md): tools/repro-verdict.py applies the pre-registered
# rule to hand-made grid results (>, < and ~D verdicts, a side that is a gap between two groups, a factor,
# rounds to a target that a run never reaches, a group with a failed member), refuses malformed
# declarations, and every grid file of inputs/repro/ is valid, with each declared comparison selecting at
# least 3 members; tools/reproduce.sh (make reproduce) lists the claims when the claim is unknown.
# usage: tests/mpi/test_repro.sh [test_name]      (last line: "N passed, N failed"; exit 1 when any failed)
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
VERDICT=$ROOT/tools/repro-verdict.py

setup()
{
    [ -x "$PY" ] || { echo "$PY is missing: run make deps (package python3)"; return 1; }
    [ -f "$VERDICT" ] || { echo "$VERDICT is missing"; return 1; }
}

# member DIR INDEX METHOD SEED STATE ACC...: one member of a fake grid: its members.csv row and, when done,
# a metrics.csv with test_accuracy per round
member()
{
    local dir=$1 index=$2 method=$3 seed=$4 state=$5
    shift 5
    local name="method-${method}_seed-$seed" r=0 acc
    [ -f "$dir/members.csv" ] ||
        echo "index,member,algo.method,fl.seed,state,exit,attempts,seconds,rounds_done,final_accuracy,message" >"$dir/members.csv"
    echo "$index,$name,$method,$seed,$state,0,1,1.0,$#,," >>"$dir/members.csv"
    [ "$state" = done ] || return 0
    mkdir -p "$dir/$name"
    # rounds from 0, as fedhet writes them
    { echo "round,lr,test_accuracy"; for acc in "$@"; do echo "$r,0.01,$acc"; r=$((r + 1)); done; } >"$dir/$name/metrics.csv"
}

fake_grid()
{
    local dir=$WORK/grid
    rm -rf "$dir"
    mkdir -p "$dir"
    member "$dir" 0 a 0 done 0.60 0.76 0.80
    member "$dir" 1 a 1 done 0.60 0.76 0.81
    member "$dir" 2 a 2 done 0.60 0.76 0.82
    member "$dir" 3 b 0 done 0.50 0.60 0.70
    member "$dir" 4 b 1 done 0.50 0.60 0.71
    member "$dir" 5 b 2 done 0.50 0.60 0.72
    member "$dir" 6 c 0 done 0.60 0.70 0.805
    member "$dir" 7 c 1 done 0.60 0.70 0.815
    member "$dir" 8 c 2 done 0.60 0.70 0.83
    member "$dir" 9 d 0 done 0.60 0.70 0.80
    member "$dir" 10 d 1 done 0.60 0.70 0.80
    member "$dir" 11 d 2 failed
}

# verdict_of ID: the verdict column of comparison ID in $WORK/verdicts.md
verdict_of() { awk -F'|' -v id="$1" '{ gsub(/ /, "", $2) } $2 == id { sub(/^ +/, "", $9); sub(/ +$/, "", $9); print $9 }' "$WORK/verdicts.md"; }

expect_verdict()
{
    local got
    got=$(verdict_of "$1")
    case "$got" in "$2"*) ;; *) fail "$1: verdict '$got', expected '$2'" ;; esac
}

test_verdict_rule()
{
    fake_grid
    cat >"$WORK/claim.ini" <<'EOF'
; verdict: up final:test_accuracy method=a > method=b
; verdict: down final:test_accuracy method=b > method=a
; verdict: less final:test_accuracy method=b < method=a
; verdict: near final:test_accuracy method=a ~0.2 method=b
; verdict: far final:test_accuracy method=a ~0.05 method=b
; verdict: close final:test_accuracy method=c > method=a
; verdict: factor final:test_accuracy method=a > 1.1*method=b
; verdict: gap final:test_accuracy method=a|method=b > method=c|method=b
; verdict: reach reach0.75:test_accuracy method=a < method=b
; verdict: last last2:test_accuracy method=a > method=b
; verdict: partial final:test_accuracy method=d > method=b
EOF
    "$PY" "$VERDICT" "$WORK/claim.ini" "$WORK/grid" --csv "$WORK/verdicts.csv" >"$WORK/verdicts.md" 2>"$WORK/verdict.err" ||
        { fail "repro-verdict exited $?: $(head -2 "$WORK/verdict.err")"; return; }
    # d = 0.10, SE = sqrt(2 x 0.0001/3) = 0.0082
    expect_verdict up reproduced
    expect_verdict down contradicted
    expect_verdict less reproduced
    expect_verdict near reproduced        # |d| + 2 SE = 0.116 <= 0.2
    expect_verdict far contradicted       # |d| - 2 SE = 0.084 > 0.05
    expect_verdict close inconclusive     # d = 0.0033, SE = 0.0075
    expect_verdict factor reproduced      # 0.81 - 1.1 x 0.71 = 0.029 > 2 x 0.0086
    expect_verdict gap inconclusive       # (0.81 - 0.71) - (0.8167 - 0.71) = -0.0067
    expect_verdict reach reproduced       # round 2 against never (counted as 4)
    grep -q "never reached" "$WORK/verdicts.md" || fail "reach: the runs that never reached the target are not flagged"
    # 1-based rounds, as fedhet report counts them: a reaches 0.75 in round 2, b never (3 rounds + 1)
    grep -q '^reach,reach0.75:test_accuracy,[^,]*,2.0,0.0,3,4.0,0.0,3,' "$WORK/verdicts.csv" ||
        fail "reach: rounds are not 1-based (2 and 4 expected): $(grep '^reach' "$WORK/verdicts.csv")"
    expect_verdict last reproduced
    expect_verdict partial "incomplete"
    # with too few runs d and SE are undefined: a dash, never "nan"
    grep '^| partial ' "$WORK/verdicts.md" | grep -q '| — | — | incomplete' ||
        fail "partial: d and SE not shown as '—': $(grep '^| partial ' "$WORK/verdicts.md")"
    grep -qi 'nan' "$WORK/verdicts.md" && fail "verdicts.md shows nan: $(grep -i nan "$WORK/verdicts.md" | head -1)"
    grep -q '^up,final:test_accuracy,.*,0.81,0.01' "$WORK/verdicts.csv" ||
        fail "verdicts.csv lacks the mean 0.81 and std 0.01 of 'up': $(grep '^up' "$WORK/verdicts.csv")"
}

test_bad_declarations()
{
    fake_grid
    local bad
    for bad in "; verdict: x final:test_accuracy method=a >" \
               "; verdict: x best:test_accuracy method=a > method=b" \
               "; verdict: x final:test_accuracy method=a >= method=b" \
               "; verdict: x final:test_accuracy method=zz > method=b" \
               "; verdict: x final:test_accuracy rho=1 > method=b" \
               "; verdict: x final:no_such_column method=a > method=b"; do
        echo "$bad" >"$WORK/bad.ini"
        "$PY" "$VERDICT" "$WORK/bad.ini" "$WORK/grid" >/dev/null 2>"$WORK/bad.err"
        local rc=$?
        [ "$rc" -eq 2 ] || fail "'$bad': exit $rc, expected 2"
        grep -q "repro-verdict: error:" "$WORK/bad.err" || fail "'$bad': no error message"
    done
    : >"$WORK/empty.ini"
    "$PY" "$VERDICT" "$WORK/empty.ini" "$WORK/grid" >/dev/null 2>&1 && fail "a grid without verdict lines was accepted"
    "$PY" "$VERDICT" "$WORK/claim.ini" "$WORK/nowhere" >/dev/null 2>&1 && fail "a missing grid folder was accepted"
    return 0
}

test_study_grids_valid()
{
    local g n=0
    for g in "$ROOT"/inputs/repro/*.ini; do
        [ -f "$g" ] || continue
        n=$((n + 1))
        "$PY" "$VERDICT" --check "$g" "$FEDHET" >"$WORK/check.out" 2>&1 ||
            fail "$(basename "$g"): $(tail -1 "$WORK/check.out" | cut -c1-300)"
    done
    [ "$n" -gt 0 ] || fail "no grid file in inputs/repro/"
}

test_reproduce_unknown_claim()
{
    # the script behind `make reproduce CLAIM=...` (make itself would rebuild: not inside the suite)
    "$ROOT/tools/reproduce.sh" NO_SUCH >"$WORK/make.out" 2>&1 && fail "reproduce.sh NO_SUCH succeeded"
    grep -q "unknown claim NO_SUCH" "$WORK/make.out" || fail "no 'unknown claim' message: $(head -3 "$WORK/make.out")"
    grep -q "T1" "$WORK/make.out" || fail "the valid claims are not listed: $(head -3 "$WORK/make.out")"
}

# the summary table: a claim is reproduced when all its comparisons are, contradicted when any is, pending
# while one has no verdict and none is contradicted; S1 counts once per paper; --update rewrites only the marked block
test_summary_table()
{
    mkdir -p "$WORK/repro/A" "$WORK/repro/B" "$WORK/repro/C"
    printf 'id,verdict\nT1a,reproduced\nT1b,inconclusive\nT7a-dir0.1,reproduced\nT7b,reproduced\n' >"$WORK/repro/A/verdicts.csv"
    printf 'id,verdict\nT12a,reproduced\nS3,contradicted\nS1-afedsam-up,reproduced\nS7-up,incomplete (2 and 3 runs)\n' \
        >"$WORK/repro/B/verdicts.csv"
    # a follow-up's comparison without a verdict leaves a contradicted claim contradicted
    printf 'id,verdict\nS3-f1,incomplete (1 and 3 runs)\n' >"$WORK/repro/C/verdicts.csv"
    "$PY" "$ROOT/tools/repro-summary.py" "$WORK/repro" >"$WORK/summary.md" 2>&1 || fail "repro-summary.py failed"
    grep -q '^| 000 FedSCAM |.*| 0 | 0 | 1 (T1) | 8 (' "$WORK/summary.md" || fail "T1 not inconclusive: $(grep 000 "$WORK/summary.md")"
    grep -q '^| 002 FLOOD |.*| 1 (T7) | 0 | 0 | 3 (' "$WORK/summary.md" || fail "T7 not reproduced: $(grep 002 "$WORK/summary.md")"
    grep -q '^| 003 A-FedSAM |.*| 2 (T12, S1) | 1 (S3) | 0 | 1 (S7) |' "$WORK/summary.md" ||
        fail "A-FedSAM row wrong: $(grep 003 "$WORK/summary.md")"
    # every file given (the report and the results page) gets the same table
    printf 'before\n<!-- summary -->\nold table\n<!-- /summary -->\nafter\n' >"$WORK/doc.md"
    printf 'readme\n<!-- summary -->\nold\n<!-- /summary -->\nend\n' >"$WORK/readme.md"
    "$PY" "$ROOT/tools/repro-summary.py" --update "$WORK/doc.md" "$WORK/readme.md" "$WORK/repro" || fail "--update failed"
    grep -q 'old table' "$WORK/doc.md" && fail "--update kept the old table"
    [ "$(head -1 "$WORK/doc.md")" = before ] && [ "$(tail -1 "$WORK/doc.md")" = after ] || fail "--update changed text outside the block"
    grep -q '^| 002 FLOOD |.*| 1 (T7) |' "$WORK/readme.md" || fail "the second file did not get the table"
    [ "$(tail -1 "$WORK/readme.md")" = end ] || fail "--update changed text outside the second file's block"
    # a file without the block: an error naming it, and no file written
    printf 'no markers\n' >"$WORK/plain.md"
    printf 'readme\n<!-- summary -->\nstale\n<!-- /summary -->\nend\n' >"$WORK/readme.md"
    "$PY" "$ROOT/tools/repro-summary.py" --update "$WORK/readme.md" "$WORK/plain.md" "$WORK/repro" 2>"$WORK/upd.err" && fail "--update without markers succeeded"
    grep -q "plain.md has no" "$WORK/upd.err" || fail "no message naming the file: $(cat "$WORK/upd.err")"
    grep -q stale "$WORK/readme.md" || fail "a file was written although another had no block"
}

# a grid stopped by a signal (members neither done nor failed) gives no report or verdicts yet
test_stopped_grid_unfinished()
{
    mkdir -p "$WORK/stopped" "$WORK/ended"
    printf 'index,member,algo.method,fl.seed,state\n0,a,fedavg,0,done\n1,b,fedavg,1,stopped\n' >"$WORK/stopped/members.csv"
    printf 'index,member,algo.method,fl.seed,state\n0,a,fedavg,0,done\n1,b,fedavg,1,failed\n' >"$WORK/ended/members.csv"
    "$PY" "$VERDICT" --finished "$WORK/stopped" >"$WORK/fin.out" 2>&1
    [ $? -eq 3 ] || fail "--finished on a stopped grid did not exit 3: $(cat "$WORK/fin.out")"
    grep -q "1 member(s) not finished, e.g. b" "$WORK/fin.out" || fail "no count of unfinished members: $(cat "$WORK/fin.out")"
    "$PY" "$VERDICT" --finished "$WORK/ended" >"$WORK/fin2.out" 2>&1 || fail "--finished on an ended grid: $(cat "$WORK/fin2.out")"
    grep -q -- '--finished' "$ROOT/tools/reproduce.sh" || fail "tools/reproduce.sh does not check that the grid finished"
}

TESTS=(verdict_rule bad_declarations study_grids_valid reproduce_unknown_claim summary_table stopped_grid_unfinished)
run_tests "$@"
