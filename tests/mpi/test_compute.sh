#!/usr/bin/env bash
# End-to-end tests of the cost columns of metrics.csv (cum_*: passes of training, scoring and evaluation,
# bytes down and up, wall seconds) and of `fedhet report --x` on the tiny synthetic set of tests/mpi/lib.sh
# (6 clients, 600 training and 100 test rows, mlp of 54,004 state values, 3 of 6 clients per round, one
# epoch of batch 16): the counts against the samples in clients.csv, the bytes against the protocol's
# formula, the same counts on 1 and 3 ranks and across --resume, the report's axes and its error for runs
# without the columns.
# usage: tests/mpi/test_compute.sh [test_name]      (last line: "N passed, N failed")
source "$(dirname "$0")/lib.sh"

P=54004    # state values of the mlp on 1x8x8 with 4 classes (checked in setup against fedhet inspect)
N_TEST=100 # test rows of the tiny set

setup()
{
    setup_tiny || return 1
    local state
    state=$("$FEDHET" inspect --model mlp --input 1x8x8 --classes 4 | sed -n 's/^state vector: \([0-9]*\) floats.*/\1/p')
    [ "$state" = "$P" ] || { echo "the mlp's state has $state values, the test expects $P"; return 1; }
}

# per_round CSV COLUMN: the column's increase in each round (its cumulative value minus the previous row's)
per_round() { column "$1" "$2" | awk '{ printf "%.0f\n", $1 - prev; prev = $1 }'; }

# samples_per_round RUN_DIR FACTOR: FACTOR x the samples the round's clients trained (clients.csv, one epoch)
samples_per_round()
{
    awk -F, -v f="$2" 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "round") r = i; if ($i == "samples") s = i }; next }
        { n[$r] += $s; if ($r > last) last = $r }
        END { for (t = 0; t <= last; t++) printf "%.0f\n", f * n[t] }' "$1/clients.csv"
}

# expect_counts TAG COLUMN FACTOR: COLUMN grows each round by FACTOR x the samples trained in it
expect_counts()
{
    local dir=$WORK/out/$1 got want
    got=$(per_round "$dir/metrics.csv" "$2" | tr '\n' ' ')
    want=$(samples_per_round "$dir" "$3" | tr '\n' ' ')
    [ -n "$want" ] && [ "$got" = "$want" ] || fail "$1: $2 per round is '$got', expected $3 x the samples trained: '$want'"
}

# expect_zero TAG COLUMN: COLUMN is 0 in every row
expect_zero()
{
    column "$WORK/out/$1/metrics.csv" "$2" | awk '{ if ($1 != "0") bad = 1 } END { exit bad || NR == 0 }' ||
        fail "$1: $2 is not 0: $(column "$WORK/out/$1/metrics.csv" "$2" | tr '\n' ' ')"
}

# 1. FedAvg: forward = backward = the samples trained; FedSAM's two-pass step: 2x both; FedLESAM's
#    single-backprop step: 1x; none of them scores or probes
test_training_passes()
{
    local m
    for m in fedavg fedsam fedlesam; do
        fh 3 "$m" "$WORK/base.ini" output.name="$m" algo.method="$m"
        expect_rc "$m" 0 || return
    done
    expect_counts fedavg cum_train_forward 1
    expect_counts fedavg cum_train_backward 1
    expect_counts fedsam cum_train_forward 2
    expect_counts fedsam cum_train_backward 2
    expect_counts fedlesam cum_train_forward 1
    expect_counts fedlesam cum_train_backward 1
    for m in fedavg fedsam fedlesam; do
        expect_zero "$m" cum_score_forward
        expect_zero "$m" cum_score_backward
    done
}

# 2. Client counts are integers summed in the records: the same on 1 and 3 ranks (FedSAM)
test_ranks()
{
    fh 1 sam1 "$WORK/base.ini" output.name=sam1 algo.method=fedsam
    expect_rc "fedsam np 1" 0 || return
    fh 3 sam3 "$WORK/base.ini" output.name=sam3 algo.method=fedsam
    expect_rc "fedsam np 3" 0 || return
    local c
    for c in cum_train_forward cum_train_backward cum_eval_forward cum_bytes_down cum_bytes_up; do
        diff <(column "$WORK/out/sam1/metrics.csv" $c) <(column "$WORK/out/sam3/metrics.csv" $c) >/dev/null ||
            fail "$c differs between 1 and 3 ranks"
    done
}

# 3. FLOOD scores the trained model on the client's whole set once (forward only), apart from training,
#    which costs what FedAvg's does; FedISM measures each client's sharpness on its whole set (a pass with
#    gradients at w, a forward pass at the perturbed w) beside its SAM steps
test_scoring_passes()
{
    fh 3 flood "$WORK/base.ini" output.name=flood algo.method=flood
    expect_rc "flood" 0 || return
    expect_counts flood cum_score_forward 1
    expect_zero flood cum_score_backward
    expect_counts flood cum_train_forward 1
    expect_counts flood cum_train_backward 1
    fh 3 fedism "$WORK/base.ini" output.name=fedism algo.method=fedism
    expect_rc "fedism" 0 || return
    expect_counts fedism cum_score_forward 2
    expect_counts fedism cum_score_backward 1
    expect_counts fedism cum_train_backward 2
}

# 4. Evaluation: the test rows every evaluated round; the sharpness probe (n rows) adds two forward passes
#    and one backward pass of its rows in the rounds that measure it
test_eval_passes()
{
    fh 3 ev "$WORK/base.ini" output.name=ev fl.rounds=4 fl.eval_every=2 fl.sharpness_every=3 fl.sharpness_probe=50
    expect_rc "eval_every=2, sharpness_every=3" 0 || return
    local got
    # rounds 1..4: eval in 2 and 4, sharpness in 3 and 4 (the last round always)
    got=$(per_round "$WORK/out/ev/metrics.csv" cum_eval_forward | tr '\n' ' ')
    [ "$got" = "0 $N_TEST 100 $((N_TEST + 100)) " ] ||
        fail "cum_eval_forward per round is '$got', expected '0 $N_TEST 100 $((N_TEST + 100)) '"
    got=$(per_round "$WORK/out/ev/metrics.csv" cum_eval_backward | tr '\n' ' ')
    [ "$got" = "0 0 50 50 " ] || fail "cum_eval_backward per round is '$got', expected '0 0 50 50 '"
}

# 5. Bytes as the protocol sends them: per selected client the broadcast (1 + server vectors) x P floats and
#    the upload record, a header rounded up to 64 bytes (128 for FedAvg's 80-byte header) and
#    (1 + upload vectors) x P floats; SCAFFOLD moves two vectors each way
test_bytes()
{
    fh 3 by "$WORK/base.ini" output.name=by
    expect_rc "fedavg" 0 || return
    local down up
    down=$(column "$WORK/out/by/metrics.csv" cum_bytes_down | tr '\n' ' ')
    up=$(column "$WORK/out/by/metrics.csv" cum_bytes_up | tr '\n' ' ')
    [ "$down" = "$((3 * 4 * P)) $((6 * 4 * P)) $((9 * 4 * P)) " ] ||
        fail "fedavg cum_bytes_down '$down', expected 3 clients x 4 P bytes per round"
    [ "$up" = "$((3 * (128 + 4 * P))) $((6 * (128 + 4 * P))) $((9 * (128 + 4 * P))) " ] ||
        fail "fedavg cum_bytes_up '$up', expected 3 clients x (128 + 4 P) bytes per round"
    fh 3 bysc "$WORK/base.ini" output.name=bysc algo.method=scaffold
    expect_rc "scaffold" 0 || return
    down=$(column "$WORK/out/bysc/metrics.csv" cum_bytes_down | tr '\n' ' ')
    [ "$down" = "$((3 * 8 * P)) $((6 * 8 * P)) $((9 * 8 * P)) " ] ||
        fail "scaffold cum_bytes_down '$down', expected 3 clients x 8 P bytes per round"
    per_round "$WORK/out/bysc/metrics.csv" cum_bytes_up |
        awk -v P="$P" '{ h = $1 / 3 - 8 * P; if (h < 128 || h % 64) bad = 1 } END { exit bad || NR != 3 }' ||
        fail "scaffold cum_bytes_up per round is not 3 x (a 64-byte multiple header + 8 P): $(per_round "$WORK/out/bysc/metrics.csv" cum_bytes_up | tr '\n' ' ')"
}

# 6. --resume continues the sums from the checkpoint's rows: 2 rounds + --resume to 4 = 4 rounds straight;
#    wall seconds keep growing across the resume
test_resume()
{
    fh 3 rsA "$WORK/base.ini" output.name=rsA algo.method=fedsam fl.rounds=4
    expect_rc "4 rounds" 0 || return
    fh 3 rsB "$WORK/base.ini" output.name=rsB algo.method=fedsam fl.rounds=2
    expect_rc "2 rounds" 0 || return
    fh 3 rsB2 --resume "$WORK/out/rsB" fl.rounds=4
    expect_rc "--resume to 4" 0 || return
    local c
    for c in cum_train_forward cum_train_backward cum_score_forward cum_eval_forward cum_bytes_down cum_bytes_up; do
        diff <(column "$WORK/out/rsA/metrics.csv" $c) <(column "$WORK/out/rsB/metrics.csv" $c) >/dev/null ||
            fail "$c: straight '$(column "$WORK/out/rsA/metrics.csv" $c | tr '\n' ' ')' vs resumed '$(column "$WORK/out/rsB/metrics.csv" $c | tr '\n' ' ')'"
    done
    column "$WORK/out/rsB/metrics.csv" cum_seconds | awk '{ if (!($1 > prev)) bad = 1; prev = $1 } END { exit bad || NR != 4 }' ||
        fail "cum_seconds does not grow over the resume: $(column "$WORK/out/rsB/metrics.csv" cum_seconds | tr '\n' ' ')"
}

# 7. fedhet report --x: a figure per axis; passes and bytes to a target are the run's cumulative values at
#    the first round reaching it
test_report_x()
{
    fh 3 rx "$WORK/base.ini" output.name=rx algo.method=fedsam
    expect_rc "fedsam" 0 || return
    local R=$WORK/out/rx x
    for x in round passes bytes seconds; do
        timeout -k 5 "$RUN_LIMIT" "$FEDHET" report "$R" --out "$WORK/rep-$x" --x "$x" --targets 0.01 \
            >"$WORK/rep-$x.out" 2>&1 || { fail "report --x $x: exit $? ($(head -2 "$WORK/rep-$x.out" | tr '\n' ' '))"; continue; }
        local png=$WORK/rep-$x/accuracy-$x.png
        [ "$x" = round ] && png=$WORK/rep-$x/accuracy.png
        [ -s "$png" ] && [ "$(head -c 4 "$png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "report --x $x: no $png"
    done
    # accuracy >= 0.01 in the first evaluated round: passes and bytes of round 1
    local csv=$WORK/rep-passes/summary.csv got want
    got=$(column "$csv" passes_to_0.01_mean)
    want=$(column "$R/metrics.csv" cum_train_backward | head -1)
    awk -v a="$got" -v b="$want" 'BEGIN { exit !(a != "" && a == b) }' || fail "passes_to_0.01_mean '$got', expected '$want'"
    got=$(column "$csv" bytes_to_0.01_mean)
    want=$(paste -d, <(column "$R/metrics.csv" cum_bytes_down) <(column "$R/metrics.csv" cum_bytes_up) |
           awk -F, 'NR == 1 { print $1 + $2 }')
    awk -v a="$got" -v b="$want" 'BEGIN { exit !(a != "" && a == b) }' || fail "bytes_to_0.01_mean '$got', expected '$want'"
    grep -q "passes to 0.01" "$WORK/rep-passes/summary.md" || fail "summary.md has no passes-to-target table"
    timeout -k 5 "$RUN_LIMIT" "$FEDHET" report "$R" --out "$WORK/rep-bad" --x epochs >"$WORK/rep-bad.out" 2>&1
    local rc=$?
    [ "$rc" = 1 ] && grep -q -- "--x epochs" "$WORK/rep-bad.out" || fail "report --x epochs: exit $rc, expected 1 naming --x"
}

# 8. A run made before the cost columns existed: --x passes exits 2 naming the missing column and writes
#    nothing; --x round still reports it
test_report_missing_column()
{
    fh 3 old "$WORK/base.ini" output.name=old
    expect_rc "fedavg" 0 || return
    local R=$WORK/old-run
    mkdir -p "$R" && cp "$WORK/out/old/config.ini" "$R/"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) keep[i] = $i !~ /^cum_/ }
        { out = ""; n = 0; for (i = 1; i <= NF; i++) if (keep[i]) out = out (n++ ? "," : "") $i; print out }' \
        "$WORK/out/old/metrics.csv" >"$R/metrics.csv"
    timeout -k 5 "$RUN_LIMIT" "$FEDHET" report "$R" --out "$WORK/rep-old" --x passes >"$WORK/rep-old.out" 2>&1
    local rc=$?
    [ "$rc" = 2 ] || fail "report --x passes of an old run: exit $rc, expected 2"
    grep -q "no column cum_train_backward" "$WORK/rep-old.out" ||
        fail "report --x passes of an old run: the message does not name cum_train_backward: $(head -1 "$WORK/rep-old.out")"
    [ ! -e "$WORK/rep-old/summary.csv" ] || fail "report --x passes of an old run wrote summary.csv"
    timeout -k 5 "$RUN_LIMIT" "$FEDHET" report "$R" --out "$WORK/rep-old" --x seconds >"$WORK/rep-old2.out" 2>&1
    rc=$?
    [ "$rc" = 2 ] && grep -q "no column cum_seconds" "$WORK/rep-old2.out" ||
        fail "report --x seconds of an old run: exit $rc, expected 2 naming cum_seconds"
    timeout -k 5 "$RUN_LIMIT" "$FEDHET" report "$R" --out "$WORK/rep-old" >"$WORK/rep-old3.out" 2>&1 ||
        fail "report of an old run by round: exit $? ($(head -1 "$WORK/rep-old3.out"))"
}

TESTS=(training_passes ranks scoring_passes eval_passes bytes resume report_x report_missing_column)
run_tests "$@"
