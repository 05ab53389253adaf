#!/usr/bin/env bash
# The reproduction study's tools (docs/reproduction.md): tools/repro-verdict.py applies the pre-registered
# rule to hand-made grid results (>, < and ~D verdicts, a side that is a gap between two groups, a factor,
# rounds to a target that a run never reaches, a group with a failed member), refuses malformed
# declarations, and every grid file of inputs/repro/ and inputs/repro/paper/ is valid, with each declared comparison selecting at
# least 3 members, an agreement margin narrower than 2 SE is marked untestable at n;
# tools/repro-summary.py's tables (raw and Holm-adjusted verdicts, the coverage and category kept per claim,
# the marginal comparisons, the false-positive rate) and tools/repro_stats.py's t tail and Holm step-down;
# tools/reproduce.sh (make reproduce) lists the claims when the claim is unknown; tools/repro-runs.py keeps every
# member's per-round outputs.
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
; verdict: tight final:test_accuracy method=a ~0.01 method=c
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
    # 2 SE = 0.0186 >= 0.01: no d can reproduce it; 3 x (0.0186 / 0.01)^2 = 10.4 -> 11 seeds a side
    expect_verdict tight "inconclusive (untestable at n: 2 SE >= 0.01, 11 seeds a side needed)"
    grep '^near,' "$WORK/verdicts.csv" | grep -q untestable && fail "near: 2 SE = 0.016 < 0.2 marked untestable"
    # Welch-Satterthwaite df: two groups of 3 with equal spread give 4
    head -1 "$WORK/verdicts.csv" | grep -q ',se,df,verdict,' || fail "verdicts.csv has no df column: $(head -1 "$WORK/verdicts.csv")"
    grep -q '^up,.*,0.008165,4.0,reproduced' "$WORK/verdicts.csv" || fail "up: df is not 4: $(grep '^up' "$WORK/verdicts.csv")"
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
    for g in "$ROOT"/inputs/repro/*.ini "$ROOT"/inputs/repro/paper/*.ini; do
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
    # a dropped follow-up is refused with its reason, before any run
    "$ROOT/tools/reproduce.sh" T1-f1 >"$WORK/drop.out" 2>&1 && fail "reproduce.sh ran the dropped T1-f1"
    grep -q "T1-f1 was dropped before its runs: it cannot change any verdict" "$WORK/drop.out" ||
        fail "no 'dropped' message: $(head -3 "$WORK/drop.out")"
}

# vrow ID OP D SE VERDICT: one verdicts.csv row, two groups of 3 with std 0.01 (the columns repro-verdict.py writes)
vrow() { echo "$1,final:test_accuracy,method=a $2 method=b,0.5,0.01,3,0.5,0.01,3,$3,$4,4.0,$5,"; }
VHEAD=id,statistic,comparison,left_mean,left_std,left_n,right_mean,right_std,right_n,difference,se,df,verdict,note

# the summary tables: a claim is reproduced when all its comparisons are, contradicted when any is, pending
# while one has no verdict and none is contradicted; S1 counts once per paper; the Holm-adjusted verdict
# beside the raw one; the coverage and category from claims.csv; --update rewrites only the marked blocks
test_summary_table()
{
    mkdir -p "$WORK/repro/A" "$WORK/repro/B" "$WORK/repro/C" "$WORK/repro/D"
    cp "$ROOT/docs/repro/claims.csv" "$WORK/repro/" || { fail "docs/repro/claims.csv is missing"; return; }
    { echo "$VHEAD"; vrow T1a '>' 0.05 0.01 reproduced; vrow T1b '>' 0.01 0.01 inconclusive
      vrow T7a-dir0.1 '>' 0.05 0.01 reproduced; vrow T7b '>' 0.05 0.01 reproduced; } >"$WORK/repro/A/verdicts.csv"
    { echo "$VHEAD"; vrow T12a '>' 0.05 0.01 reproduced; vrow S3 '>' -0.021 0.01 contradicted
      vrow S1-afedsam-up '>' 0.05 0.01 reproduced; vrow S7-up '>' nan nan "incomplete (2 and 3 runs)"; } >"$WORK/repro/B/verdicts.csv"
    # a follow-up's comparison without a verdict leaves a contradicted claim contradicted
    { echo "$VHEAD"; vrow S3-f1 '>' nan nan "incomplete (1 and 3 runs)"; } >"$WORK/repro/C/verdicts.csv"
    # one comparison of five past 2 SE (2.1): contradicted raw, not after Holm (p 0.018 > 0.0228 / 5);
    # an agreement margin of 1 point under an SE of 1 point: untestable, 3 x (0.02 / 0.01)^2 = 12 seeds needed
    { echo "$VHEAD"; vrow T13a '>' -0.021 0.01 contradicted
      for x in b c d e; do vrow "T13$x" '>' 0.005 0.01 inconclusive; done
      vrow S6-flat '~0.01' 0.0 0.01 inconclusive
      # a pooled follow-up's text names its other seeds: its statistics count as any other row's
      echo "S5-f1,final:test_accuracy,method=a ~0.01 method=b (with C's S5),0.5,0.01,6,0.5,0.01,6,0.0,0.008,10.0,inconclusive,,pooled"
    } >"$WORK/repro/D/verdicts.csv"
    "$PY" "$ROOT/tools/repro-summary.py" "$WORK/repro" >"$WORK/summary.md" 2>"$WORK/summary.err" ||
        { fail "repro-summary.py failed: $(head -3 "$WORK/summary.err")"; return; }
    grep -q '^| 000 FedSCAM |.*| 0 | 0 | 1 (T1) | 8 (' "$WORK/summary.md" || fail "T1 not inconclusive: $(grep 000 "$WORK/summary.md")"
    grep -q '^| 002 FLOOD |.*| 1 (T7) | 0 | 1 (S6) | 2 (' "$WORK/summary.md" || fail "T7 not reproduced: $(grep 002 "$WORK/summary.md")"
    # the calibrated reading leads (S3 at d / SE = -2.1 with 4 df: p 0.051, inconclusive), the normal ones follow
    grep -q '^| 003 A-FedSAM |.*| 2 (T12, S1) | 0 | 0 | 2 (S3, S7) | 2 / 1 / 0 / 1 | 2 / 1 / 0 / 1 |' "$WORK/summary.md" ||
        fail "A-FedSAM row wrong (S3 contradicted only in the normal readings): $(grep 003 "$WORK/summary.md")"
    grep -q '^| 004 FedWMSAM |.*| 0 | 0 | 1 (T13) | 2 (T14, S8) | 0 / 1 / 0 / 2 | 0 / 0 / 1 / 2 |' "$WORK/summary.md" ||
        fail "FedWMSAM row: T13 not inconclusive after Holm: $(grep 004 "$WORK/summary.md")"
    grep -q '^| T13 | 5 | inconclusive | T13a: -0.0210 \[-0.0488, +0.0068\] | contradicted (1) / inconclusive | — |' "$WORK/summary.md" ||
        fail "T13's claim row wrong: $(grep '^| T13 ' "$WORK/summary.md")"
    grep -q '^| S6 | 1 | inconclusive | .* | inconclusive / inconclusive | S6-flat (12) |' "$WORK/summary.md" ||
        fail "S6-flat not untestable at n (12 seeds): $(grep '^| S6 ' "$WORK/summary.md")"
    grep -q '^| S5 | 1 | inconclusive | .* | S5-f1 (' "$WORK/summary.md" ||
        fail "the pooled S5-f1 not untestable at n: $(grep '^| S5 ' "$WORK/summary.md")"
    grep -q '^| T7 |.* 25 of 2000 rounds (1.25 %);.*| \*model/data\*, \*reduced horizon\*: ' "$WORK/summary.md" ||
        fail "T7's coverage or categories missing: $(grep '^| T7 ' "$WORK/summary.md")"
    grep -q '^Paired by seed: not computable' "$WORK/summary.md" || fail "the summary does not say the paired reading is not computable"
    # every file given gets the summary; the marginal and false-positive blocks where a file has them
    printf 'before\n<!-- summary -->\nold table\n<!-- /summary -->\n<!-- marginal -->\nx\n<!-- /marginal -->\n<!-- fpr -->\ny\n<!-- /fpr -->\nafter\n' >"$WORK/doc.md"
    printf 'readme\n<!-- summary -->\nold\n<!-- /summary -->\nend\n' >"$WORK/readme.md"
    "$PY" "$ROOT/tools/repro-summary.py" --update "$WORK/doc.md" "$WORK/readme.md" "$WORK/repro" || fail "--update failed"
    grep -q 'old table' "$WORK/doc.md" && fail "--update kept the old table"
    [ "$(head -1 "$WORK/doc.md")" = before ] && [ "$(tail -1 "$WORK/doc.md")" = after ] || fail "--update changed text outside the block"
    grep -q '^| T13a (method=a > method=b) | D | -0.0210 | 0.0100 | 2.10 | contradicted | inconclusive |' "$WORK/doc.md" ||
        fail "T13a (2.1 SE) not in the marginal block: $(sed -n '/<!-- marginal -->/,/<!-- \/marginal -->/p' "$WORK/doc.md")"
    grep -q '^| T13b' "$WORK/doc.md" && fail "T13b (0.5 SE) listed as marginal"
    grep -q 'P(t₄ > 2) | 5.81 % | 11.61 %' "$WORK/doc.md" || fail "the false-positive rate at n = 3 (5.81 %) is not in the fpr block"
    grep -q '^| 002 FLOOD |.*| 1 (T7) |' "$WORK/readme.md" || fail "the second file did not get the table"
    [ "$(tail -1 "$WORK/readme.md")" = end ] || fail "--update changed text outside the second file's block"
    # a file without the block: an error naming it, and no file written
    printf 'no markers\n' >"$WORK/plain.md"
    printf 'readme\n<!-- summary -->\nstale\n<!-- /summary -->\nend\n' >"$WORK/readme.md"
    "$PY" "$ROOT/tools/repro-summary.py" --update "$WORK/readme.md" "$WORK/plain.md" "$WORK/repro" 2>"$WORK/upd.err" && fail "--update without markers succeeded"
    grep -q "plain.md has no" "$WORK/upd.err" || fail "no message naming the file: $(cat "$WORK/upd.err")"
    grep -q stale "$WORK/readme.md" || fail "a file was written although another had no block"
    # the coverage is data kept per claim: a claim without its row, or a category outside the five, is an error
    grep -v '^S8,' "$ROOT/docs/repro/claims.csv" >"$WORK/repro/claims.csv"
    "$PY" "$ROOT/tools/repro-summary.py" "$WORK/repro" >/dev/null 2>"$WORK/claims.err" && fail "a claim without a claims.csv row was accepted"
    grep -q "no row for claim(s) S8" "$WORK/claims.err" || fail "no message naming S8: $(cat "$WORK/claims.err")"
    sed 's/; reduced horizon,/; short run,/' "$ROOT/docs/repro/claims.csv" >"$WORK/repro/claims.csv"
    "$PY" "$ROOT/tools/repro-summary.py" "$WORK/repro" >/dev/null 2>"$WORK/claims.err" && fail "an unknown category was accepted"
    grep -q "category 'short run' is not one of" "$WORK/claims.err" || fail "no message naming the category: $(cat "$WORK/claims.err")"
    # every claim on another model or data than its paper's carries model/data
    sed 's/,model\/data; reduced horizon,/,reduced horizon,/' "$ROOT/docs/repro/claims.csv" >"$WORK/repro/claims.csv"
    "$PY" "$ROOT/tools/repro-summary.py" "$WORK/repro" >/dev/null 2>"$WORK/claims.err" && fail "a claim without model/data was accepted"
    grep -q "must include model/data" "$WORK/claims.err" || fail "no model/data message: $(cat "$WORK/claims.err")"
}

# the statistics behind the adjusted verdicts: Student's t tail, Holm's step-down, the simulated rate
test_repro_stats()
{
    "$PY" - "$ROOT/tools" >"$WORK/stats.out" 2>&1 <<'EOF' || fail "repro_stats: $(tail -3 "$WORK/stats.out")"
import sys
sys.path.insert(0, sys.argv[1])
import repro_stats as s
def near(a, b, tol=1e-6):
    assert abs(a - b) < tol, (a, b)
near(s.t_sf(2.0, 4.0), 0.0580583)        # tables: P(t4 > 2)
near(s.t_sf(2.776445, 4.0), 0.025)       # t4's 97.5 % point
near(s.t_sf(12.7062, 1.0), 0.025, 1e-5)  # t1's
near(s.t_sf(-1.0, 3.0), 1 - s.t_sf(1.0, 3.0))
near(s.t_sf(2.0, float("inf")), 0.0227501)
near(s.welch_df([(1.0, 3), (1.0, 3)]), 4.0)
near(s.HOLM_ALPHA, 0.0227501)
assert s.holm([0.004, 0.012, 0.02]) == [True, False, False]  # 0.004 < 0.0228 / 3; 0.012 >= 0.0228 / 2 stops
assert s.holm([0.004, 0.01, 0.02]) == [True, True, True]     # 0.01 < 0.0114, 0.02 < 0.0228
assert s.holm([0.01, float("nan")]) == [True, False]
assert s.untestable("~0.01", 0.004, 3) is None and s.untestable("~0.01", 0.01, 3) == 12
assert s.untestable(">", 1.0, 3) is None
near(s.false_positive_rate(3, 1.0, 20000, seed=1), 0.058, 0.006)
# Welch on a hand example, checked against an independent computation: a = 1, 2, 3 and b = 3, 4, 5 have equal
# variances (1), so df = 4 and t4's closed form F(t) = 1/2 + (3/4) x (1 - x^2 / 3), x = t / sqrt(t^2 + 4)
import itertools, math, statistics
a, b = [1.0, 2.0, 3.0], [3.0, 4.0, 5.0]
d = statistics.mean(a) - statistics.mean(b)
se = math.sqrt(statistics.variance(a) / 3 + statistics.variance(b) / 3)
df = s.welch_df([(statistics.variance(a) / 3, 3), (statistics.variance(b) / 3, 3)])
near(df, 4.0)
t = d / se
x = t / math.sqrt(t * t + 4)
near(s.p_values(">", d, se, df)[0], 1 - (0.5 + 0.75 * x * (1 - x * x / 3)))   # P(T > t), t = -2.449
near(s.p_values("<", d, se, df)[0], 0.5 + 0.75 * x * (1 - x * x / 3))
lo, hi = s.confidence_interval(d, se, df)
near(lo, -2 - 2.776445 * se, 1e-5); near(hi, -2 + 2.776445 * se, 1e-5)           # t4's 97.5 % point from tables
# unequal variances: df by hand, (1/3 + 4/3)^2 / ((1/3)^2 / 2 + (4/3)^2 / 2) = 50 / 17
near(s.welch_df([(1 / 3, 3), (4 / 3, 3)]), 50 / 17)
# 3 against 3 runs: 20 splits, so no exact permutation test goes below 1/20
near(s.permutation_floor(3, 3), 0.05); near(s.permutation_floor(6, 6), 1 / 924)
near(s.mann_whitney([10, 11, 16], [6, 7, 7])[1], 0.05)      # fully separated: 1 split of 20
near(s.mann_whitney([5, 5, 5], [5, 5, 5])[0], 1.0)
# a tie across the groups: mid-ranks 1, 2, 3.5 | 3.5, 5, 6; xs's rank sum 6.5 is the smallest, reached by
# the 2 splits {1, 2, either 3.5}: p = 2 / 20
splits = [sum(c) for c in itertools.combinations([1, 2, 3.5, 3.5, 5, 6], 3)]
near(s.mann_whitney([1, 2, 3], [3, 4, 5])[0], sum(x <= 6.5 for x in splits) / 20)
near(s.mann_whitney([1, 2, 3], [3, 4, 5])[0], 0.1)
# rounds to a target read back from mean and std: 10, 11 and 16 (never, 15 rounds + 1)
assert s.integer_runs(12.333333, 3.21455, 3, 1, 16) == [10, 11, 16]
assert s.integer_runs(6.333333, 0.816497, 6, 1, 16) is None          # six runs: more than one multiset fits
m, sd, n = s.with_runs(0.5, 0.141421, 2, [0.1])
near(m, statistics.mean([0.4, 0.6, 0.1])); near(sd, statistics.stdev([0.4, 0.6, 0.1]), 1e-5); assert n == 3
EOF
}

# the calibrated reading: a comparison declared diagnostic is listed but left out of its claim's tally;
# rounds to a target are judged by the exact Mann-Whitney test, which at 3 against 3 runs cannot go below
# p = 0.05; a failed run counts at the grid's declared value
test_calibrated_reading()
{
    mkdir -p "$WORK/cal/T13" "$WORK/cal/T14" "$WORK/cal/T7-f1" "$WORK/grids"
    cp "$ROOT/docs/repro/claims.csv" "$WORK/cal/"
    { echo "$VHEAD"; vrow T13a '>' -0.05 0.01 contradicted; vrow T13b '>' 0.005 0.01 inconclusive; } >"$WORK/cal/T13/verdicts.csv"
    printf '; verdict: T13a final:test_accuracy method=a > method=b\n; diagnostic: T13a -- an arm outside the table\n' \
        >"$WORK/grids/T13.ini"
    # MoFedSAM 10, 11, never (16) against FedAvg 4, 5, 6: d / SE = 3.8, but the best of 20 splits: p = 0.05
    { echo "$VHEAD"; echo "T14-x,reach0.6:test_accuracy,method=mofedsam < method=fedavg,12.333333,3.21455,3,5.0,1.0,3,7.333333,1.943651,2.4,contradicted,1 left run(s) never reached"; } \
        >"$WORK/cal/T14/verdicts.csv"
    printf 'config,algo.method,runs,rounds\n"method=fedavg",fedavg,3,15\n' >"$WORK/cal/T14/summary.csv"
    # a failed run (2 of 3 done) counted at 0.1: left 0.2, 0.3 and 0.1
    { echo "$VHEAD"; echo "T7a-f1,last5:test_accuracy,method=flood > method=fedavg,0.25,0.070711,2,0.7,0.01,3,nan,nan,nan,incomplete (2 and 3 runs done of 3 and 3),"; } \
        >"$WORK/cal/T7-f1/verdicts.csv"
    printf '; verdict: T7a-f1 last5:test_accuracy method=flood > method=fedavg\n; failed-run: last5:test_accuracy 0.1 -- diverged\n; sensitivity: T7a-f1 -- another model\n' \
        >"$WORK/grids/T7-f1.ini"
    "$PY" "$ROOT/tools/repro-summary.py" --grids "$WORK/grids" "$WORK/cal" >"$WORK/cal.md" 2>"$WORK/cal.err" ||
        { fail "repro-summary --grids failed: $(head -3 "$WORK/cal.err")"; return; }
    grep -q '^| T13 | 1 (1) | inconclusive |' "$WORK/cal.md" || fail "the diagnostic T13a was counted: $(grep '^| T13 ' "$WORK/cal.md")"
    grep -q 'T13a (diagnostic): contradicted, normal contradicted' "$WORK/cal.md" || fail "the diagnostic T13a is not listed"
    grep -q '^| T14 | 1 | inconclusive | T14-x: +7.3333 .*Mann-Whitney p 1 / 0.05 | contradicted (1) / contradicted |' "$WORK/cal.md" ||
        fail "T14's rank reading wrong: $(grep '^| T14 ' "$WORK/cal.md")"
    grep -q 'T7a-f1 (sensitivity, 1 failed run(s) counted at 0.1): contradicted, normal contradicted' "$WORK/cal.md" ||
        fail "the failed run was not counted: $(grep 'T7a-f1' "$WORK/cal.md")"
    grep -q '^| T7 | 0 (1) | pending |' "$WORK/cal.md" || fail "the sensitivity row counted with T7: $(grep '^| T7 ' "$WORK/cal.md")"
    # repro-verdict: a failed member counts at the declared value, and the role is written
    fake_grid
    printf '; verdict: partial final:test_accuracy method=d > method=b\n; failed-run: final:test_accuracy 0.1 -- diverged\n; diagnostic: partial -- why\n' \
        >"$WORK/failed.ini"
    "$PY" "$VERDICT" "$WORK/failed.ini" "$WORK/grid" --csv "$WORK/failed.csv" >/dev/null 2>"$WORK/failed.err" ||
        { fail "repro-verdict with a failed-run line: $(cat "$WORK/failed.err")"; return; }
    grep -q '^partial,final:test_accuracy,.*,0.566667,0.404145,3,0.71,0.01,3,.*,inconclusive,,diagnostic' "$WORK/failed.csv" ||
        fail "failed run not counted at 0.1 or role missing: $(grep '^partial' "$WORK/failed.csv")"
    printf '; verdict: up final:test_accuracy method=a > method=b\n; diagnostic: nosuch\n' >"$WORK/badrole.ini"
    "$PY" "$VERDICT" --check "$WORK/badrole.ini" "$FEDHET" >/dev/null 2>"$WORK/badrole.err" && fail "a role naming no comparison was accepted"
    grep -q "names nosuch, which is not a comparison" "$WORK/badrole.err" || fail "no role message: $(cat "$WORK/badrole.err")"
}


# a follow-up with more seeds: its pooled comparison joins its own groups with the original's (mean, std, n
# from the original's verdicts.csv); its own row, the new seeds alone, is a replication
test_pooled_followup()
{
    fake_grid
    mkdir -p "$WORK/orig/ORIG"
    { echo "$VHEAD"; echo "up,final:test_accuracy,method=a > method=b,0.75,0.01,3,0.70,0.01,3,0.05,0.008165,4.0,reproduced,"; } \
        >"$WORK/orig/ORIG/verdicts.csv"
    printf '; verdict: up-f2 final:test_accuracy method=a > method=b\n; pooled: up-p up-f2 ORIG:up\n' >"$WORK/f2.ini"
    "$PY" "$VERDICT" "$WORK/f2.ini" "$WORK/grid" --csv "$WORK/f2.csv" --repro-dir "$WORK/orig" >"$WORK/f2.md" 2>"$WORK/f2.err" ||
        { fail "repro-verdict with a pooled line exited $?: $(head -2 "$WORK/f2.err")"; return; }
    # new a 0.80-0.82, b 0.70-0.72; pooled a: mean 0.78, s^2 = (2e-4 + 2e-4 + 1.5 x 0.06^2) / 5, sd 0.034059
    grep -q '^up-f2,.*,0.81,0.01,3,0.71,0.01,3,.*,reproduced,,replication' "$WORK/f2.csv" ||
        fail "the new seeds' row is not a replication: $(grep '^up-f2' "$WORK/f2.csv")"
    grep -q '^up-p,.*,0.78,0.034059,6,0.705,0.010488,6,0.075,0.014549,.*,reproduced,.*,pooled' "$WORK/f2.csv" ||
        fail "pooled groups wrong: $(grep '^up-p' "$WORK/f2.csv")"
    local bad
    for bad in '; pooled: up-p nosuch ORIG:up' '; pooled: up-p up-f2 ORIG:nosuch' '; pooled: up-p up-f2 NOGRID:up' \
               '; pooled: up-p up-f2'; do
        printf '; verdict: up-f2 final:test_accuracy method=a > method=b\n%s\n' "$bad" >"$WORK/bad.ini"
        "$PY" "$VERDICT" "$WORK/bad.ini" "$WORK/grid" --repro-dir "$WORK/orig" >/dev/null 2>"$WORK/bad.err"
        [ $? -eq 2 ] && grep -q "repro-verdict: error:" "$WORK/bad.err" || fail "'$bad' not refused: $(cat "$WORK/bad.err")"
    done
    printf '; verdict: up-f2 last2:test_accuracy method=a > method=b\n; pooled: up-p up-f2 ORIG:up\n' >"$WORK/bad.ini"
    "$PY" "$VERDICT" "$WORK/bad.ini" "$WORK/grid" --repro-dir "$WORK/orig" >/dev/null 2>"$WORK/bad.err" &&
        fail "a pooled original with another statistic was accepted"
    grep -q "statistic final:test_accuracy is not last2:test_accuracy" "$WORK/bad.err" || fail "no statistic message: $(cat "$WORK/bad.err")"
    # the summary counts the pooled row with its claim, not the replication
    mkdir -p "$WORK/prepro/A"
    cp "$ROOT/docs/repro/claims.csv" "$WORK/prepro/"
    { echo "$VHEAD,role"; echo "S8-f2,s,method=a > method=b,0.5,0.01,3,0.6,0.01,3,-0.1,0.01,4.0,contradicted,,replication"
      echo "S8-f2p,s,method=a > method=b,0.5,0.01,6,0.5,0.01,6,0.0,0.01,10.0,inconclusive,,pooled"; } >"$WORK/prepro/A/verdicts.csv"
    "$PY" "$ROOT/tools/repro-summary.py" "$WORK/prepro" >"$WORK/psum.md" 2>&1 || fail "summary with a replication row: $(tail -2 "$WORK/psum.md")"
    grep -q '^| S8 | 1 | inconclusive | S8-f2p: ' "$WORK/psum.md" || fail "the replication row was counted: $(grep '^| S8 ' "$WORK/psum.md")"
    "$PY" "$ROOT/tools/repro-summary.py" --comparisons "$WORK/pcomp.md" "$WORK/prepro" || fail "--comparisons failed"
    grep -q '^| S8 | S8-f2 |.*not counted' "$WORK/pcomp.md" || fail "the comparisons page does not show the replication"
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

# every member's per-round rows kept, compressed, with its grid keys; the same runs give the same bytes; members of
# different methods (other columns) kept under the union of their columns; a malformed row refused naming its file
test_runs_kept()
{
    fake_grid
    printf 'round,client,samples,weight\n0,3,10,0.5\n0,4,10,0.5\n' >"$WORK/grid/method-a_seed-0/clients.csv"
    "$PY" "$ROOT/tools/repro-runs.py" "$WORK/grid" "$WORK/kept" >"$WORK/kept.out" 2>&1 ||
        { fail "repro-runs exited $?: $(cat "$WORK/kept.out")"; return; }
    grep -q "33 member rounds of 12 members" "$WORK/kept.out" || fail "wrong counts: $(cat "$WORK/kept.out")"
    zcat "$WORK/kept/runs.csv.gz" >"$WORK/runs.csv"
    [ "$(head -1 "$WORK/runs.csv")" = "member,algo.method,fl.seed,round,lr,test_accuracy" ] ||
        fail "runs header: $(head -1 "$WORK/runs.csv")"
    grep -qx 'method-c_seed-2,c,2,2,0.01,0.83' "$WORK/runs.csv" || fail "member c seed 2's last round is missing"
    [ "$(zcat "$WORK/kept/clients.csv.gz" | sed -n 3p)" = "method-a_seed-0,a,0,0,4,10,0.5" ] ||
        fail "clients rows: $(zcat "$WORK/kept/clients.csv.gz")"
    local first
    first=$(md5sum <"$WORK/kept/runs.csv.gz")
    "$PY" "$ROOT/tools/repro-runs.py" "$WORK/grid" "$WORK/kept" >/dev/null 2>&1
    [ "$(md5sum <"$WORK/kept/runs.csv.gz")" = "$first" ] || fail "the same runs gave other bytes"
    # another method's own column (FLOOD's phi): the union, empty where a member has none
    printf 'round,client,samples,phi,weight\n0,1,10,0.25,0.5\n' >"$WORK/grid/method-b_seed-1/clients.csv"
    "$PY" "$ROOT/tools/repro-runs.py" "$WORK/grid" "$WORK/kept" >"$WORK/kept.out" 2>&1 ||
        { fail "members with other columns refused: $(cat "$WORK/kept.out")"; return; }
    zcat "$WORK/kept/clients.csv.gz" >"$WORK/clients.csv"
    [ "$(head -1 "$WORK/clients.csv")" = "member,algo.method,fl.seed,round,client,samples,weight,phi" ] ||
        fail "clients header: $(head -1 "$WORK/clients.csv")"
    grep -qx 'method-a_seed-0,a,0,0,4,10,0.5,' "$WORK/clients.csv" && grep -qx 'method-b_seed-1,b,1,0,1,10,0.5,0.25' "$WORK/clients.csv" ||
        fail "clients rows under the union: $(cat "$WORK/clients.csv")"
    printf 'round,test_accuracy\n0,0.5,7\n' >"$WORK/grid/method-b_seed-1/metrics.csv"
    "$PY" "$ROOT/tools/repro-runs.py" "$WORK/grid" "$WORK/kept" >"$WORK/bad.out" 2>&1 && fail "a malformed row accepted"
    grep -q "method-b_seed-1/metrics.csv:2: 3 fields where the header has 2" "$WORK/bad.out" ||
        fail "no file named: $(cat "$WORK/bad.out")"
    grep -q 'repro-runs.py' "$ROOT/tools/reproduce.sh" || fail "tools/reproduce.sh does not keep the runs"
}

TESTS=(verdict_rule bad_declarations study_grids_valid reproduce_unknown_claim summary_table repro_stats calibrated_reading pooled_followup stopped_grid_unfinished runs_kept)
run_tests "$@"
