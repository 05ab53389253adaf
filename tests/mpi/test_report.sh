#!/usr/bin/env bash
# End-to-end tests of `fedhet report DIR` (summary tables and plots of runs and grids, docs/methods/metrics.md C.2 / C.3) and
# `fedhet landscape` (loss around a checkpoint) on tiny synthetic data (tests/mpi/lib.sh): the numbers in
# summary.csv against the runs' metrics.csv, folders of runs, failed members listed, PNGs written, the figures
# drawn again from summary.csv and curves.csv alone (--redraw); the
# landscape's centre equal to the run's test loss, the same numbers on 1 and 3 ranks, bad inputs, a checkpoint
# of another model layout refused.
# usage: tests/mpi/test_report.sh [test_name]      (last line: "N passed, N failed"; exit 1 when any failed)
. "$(dirname "$0")/lib.sh"


# fx NP TAG COMMAND ARGS...: mpirun -np NP fedhet COMMAND ARGS (NP 0: no mpirun); sets RC
fx()
{
    local np=$1 tag=$2
    LAST_TAG=$tag
    shift 2
    if [ "$np" = 0 ]; then
        timeout -k 5 "$RUN_LIMIT" "$FEDHET" "$@" >"$WORK/$tag.out" 2>"$WORK/$tag.err"
    else
        timeout -k 5 "$RUN_LIMIT" mpirun --oversubscribe -np "$np" "$FEDHET" "$@" >"$WORK/$tag.out" 2>"$WORK/$tag.err"
    fi
    RC=$?
    return 0
}

is_png() { [ -s "$1" ] && [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = "211PNG" ]; }

# csv_cell FILE ROW_MATCH COLUMN: the value of COLUMN in the first row whose first field contains ROW_MATCH
csv_cell()
{
    awk -F, -v m="$2" -v name="$3" '
        NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
        index($1, m) && c { print $c; exit }' "$1"
}

setup()
{
    setup_tiny || return 1
    { cat "$WORK/base.ini"; printf '\n[grid]\ntrain.lr = 0.05, 0.2\nseed = 1..3\nranks_per_member = 1\n'; } >"$WORK/sens.ini"
    sed -i 's/^rounds = 3/rounds = 4/' "$WORK/sens.ini"
    fx 2 grid grid "$WORK/sens.ini" || return 1
    [ "$RC" = 0 ] || { cat "$WORK/grid.err"; return 1; }
}

# 1. A grid of 2 learning rates x 3 seeds: one row per learning rate; the statistics recomputed from the
#    members' metrics.csv.
test_report_grid()
{
    local G=$WORK/out/sens
    fx 0 rep report "$G" --targets 0.3,0.99
    expect_rc "report of the grid" 0 || return
    [ -f "$G/summary.csv" ] && [ -f "$G/summary.md" ] || { fail "summary.csv or summary.md missing"; return; }
    [ "$(data_rows "$G/summary.csv")" = 2 ] || fail "summary.csv has $(data_rows "$G/summary.csv") rows, expected 2"
    is_png "$G/accuracy.png" || fail "accuracy.png missing or not a PNG"
    is_png "$G/sensitivity-lr.png" || fail "sensitivity-lr.png missing or not a PNG"
    grep -q '(sensitivity-lr.png)' "$G/summary.md" || fail "summary.md does not show sensitivity-lr.png"
    local lr want got
    for lr in 0.05 0.2; do
        # final accuracies of the three seeds, from the runs themselves
        local finals=() t3=() s
        for s in 1 2 3; do
            finals+=("$(column "$G/lr-${lr}_seed-$s/metrics.csv" test_accuracy | tail -1)")
            t3+=("$(column "$G/lr-${lr}_seed-$s/metrics.csv" test_accuracy | awk '$1 >= 0.3 { print NR; exit }')")
        done
        want=$(printf '%s\n' "${finals[@]}" | awk '{ s += $1; q[NR] = $1 } END { m = s / NR; for (i in q) v += (q[i] - m) ^ 2; printf "%.6f %.6f", m, sqrt(v / (NR - 1)) }')
        got="$(csv_cell "$G/summary.csv" "lr=$lr" final_mean) $(csv_cell "$G/summary.csv" "lr=$lr" final_std)"
        close "${want% *}" "${got% *}" 2e-6 && close "${want#* }" "${got#* }" 2e-6 ||
            fail "lr $lr: final mean/std in summary.csv '$got', from metrics.csv '$want'"
        [ "$(csv_cell "$G/summary.csv" "lr=$lr" runs)" = 3 ] || fail "lr $lr: runs = $(csv_cell "$G/summary.csv" "lr=$lr" runs)"
        # rounds to 0.3: mean over the seeds that reached it, and their count
        local reached n_reached
        reached=$(printf '%s\n' "${t3[@]}" | awk 'NF { s += $1; n++ } END { if (n) printf "%.2f %d", s / n, n; else print "- 0" }')
        n_reached=$(csv_cell "$G/summary.csv" "lr=$lr" rounds_to_0.3_reached)
        [ "$n_reached" = "${reached#* }" ] || fail "lr $lr: rounds_to_0.3_reached $n_reached, expected ${reached#* }"
        [ "${reached#* }" = 0 ] || [ "$(csv_cell "$G/summary.csv" "lr=$lr" rounds_to_0.3_mean)" = "${reached% *}" ] ||
            fail "lr $lr: rounds_to_0.3_mean $(csv_cell "$G/summary.csv" "lr=$lr" rounds_to_0.3_mean), expected ${reached% *}"
        [ "$(csv_cell "$G/summary.csv" "lr=$lr" rounds_to_0.99_reached)" = 0 ] || fail "lr $lr: 0.99 reached?"
    done
    grep -q "± " "$WORK/rep.out" || fail "the table on stdout has no mean ± std"
}

# 2. One run folder; a folder of plain runs (the swept key found from their config.ini); another metric.
test_report_runs()
{
    fh 2 r1 "$WORK/base.ini" output.dir="$WORK/runs" output.name=a train.lr=0.05
    fh 2 r2 "$WORK/base.ini" output.dir="$WORK/runs" output.name=b train.lr=0.1
    fh 2 r3 "$WORK/base.ini" output.dir="$WORK/runs" output.name=c train.lr=0.1 fl.seed=4
    fx 0 one report "$WORK/runs/a" --no-plots
    expect_rc "report of one run" 0 || return
    [ "$(data_rows "$WORK/runs/a/summary.csv")" = 1 ] || fail "one run: summary.csv rows $(data_rows "$WORK/runs/a/summary.csv")"
    [ -e "$WORK/runs/a/accuracy.png" ] && fail "--no-plots drew accuracy.png"
    local want
    want=$(column "$WORK/runs/a/metrics.csv" test_accuracy | tail -1)
    close "$want" "$(csv_cell "$WORK/runs/a/summary.csv" "" final_mean)" 1e-6 || fail "one run: final_mean differs from metrics.csv ($want)"
    fx 0 folder report "$WORK/runs" --out "$WORK/runs_report" --metric test_loss --last 2
    expect_rc "report of a folder of runs" 0 || return
    [ "$(data_rows "$WORK/runs_report/summary.csv")" = 2 ] || fail "folder: $(data_rows "$WORK/runs_report/summary.csv") configurations, expected 2 (lr 0.05, 0.1)"
    head -1 "$WORK/runs_report/summary.csv" | grep -q "train.lr" || fail "folder: train.lr not found as the swept key"
    head -1 "$WORK/runs_report/summary.csv" | grep -q "last2_mean" || fail "folder: --last 2 not in the header"
    is_png "$WORK/runs_report/test_loss.png" || fail "folder: test_loss.png missing"
    is_png "$WORK/runs_report/sensitivity-lr.png" || fail "folder: sensitivity-lr.png missing"
    [ "$(csv_cell "$WORK/runs_report/summary.csv" "lr=0.1" runs)" = 2 ] || fail "folder: lr 0.1 should pool runs b and c (seeds 3, 4)"
}

# 3. Failed members of a grid are listed, not averaged; bad inputs give clear errors.
test_report_failures()
{
    { cat "$WORK/base.ini"; printf '\n[grid]\ntrain.lr = 0.05, 1e6\n'; } >"$WORK/withfail.ini"
    fx 2 gfail grid "$WORK/withfail.ini" grid.ranks_per_member=1
    [ "$RC" = 11 ] || fail "grid with a diverging member: exit $RC, expected 11"
    fx 0 repfail report "$WORK/out/withfail"
    expect_rc "report of a grid with a failed member" 0 || return
    grep -q "lr-1e6: failed" "$WORK/out/withfail/summary.md" || fail "summary.md does not list lr-1e6 as failed"
    [ "$(csv_cell "$WORK/out/withfail/summary.csv" "lr=1e6" runs)" = 0 ] || fail "the failed member counts as a run in summary.csv"
    [ "$(csv_cell "$WORK/out/withfail/summary.csv" "lr=0.05" runs)" = 1 ] || fail "lr 0.05 is not one run in summary.csv"
    fx 0 nodir report "$WORK/nothing-here"
    expect_rc "report of a missing folder" 2
    mkdir -p "$WORK/empty"
    fx 0 empty report "$WORK/empty"
    expect_rc "report of a folder without runs" 1
    fx 0 metric report "$WORK/out/sens" --metric bogus
    expect_rc "report --metric bogus" 1
    grep -q "no column bogus" "$WORK/metric.err" || fail "--metric bogus: $(errline metric)"
    mkdir -p "$WORK/fakebin"
    MPI_X=()
    timeout 60 env PATH=/nonexistent "$FEDHET" report "$WORK/out/sens" --out "$WORK/nognuplot" >"$WORK/nognu.out" 2>"$WORK/nognu.err"
    RC=$? LAST_TAG=nognu
    expect_rc "report without gnuplot" 4 && { grep -q "gnuplot-nox" "$WORK/nognu.err" || fail "no package named: $(errline nognu)"; }
    ls "$WORK/nognuplot"/*.png >/dev/null 2>&1 && fail "an image was written without gnuplot"
    fx 0 rhelp report --help
    expect_rc "report --help" 0 && { grep -q "summary.md" "$WORK/rhelp.out" || fail "report --help does not mention summary.md"; }
}

# 3b. Runs on different partition files: summary.csv carries each partition's heterogeneity (the client
#     means inspect prints, and the size Gini); runs on one partition file do not get these columns; an
#     unreadable partition leaves its cells empty with a warning.
test_report_partition_stats()
{
    "$FEDHET" partition "$WORK/idx" "$WORK/p6iid.h5" scheme=iid clients=6 partition_seed=1 classes=4 >"$WORK/p6iid.out" 2>&1 ||
        { fail "partition p6iid: $(tail -1 "$WORK/p6iid.out")"; return; }
    fh 2 ha "$WORK/base.ini" output.dir="$WORK/hruns" output.name=dir
    fh 2 hb "$WORK/base.ini" output.dir="$WORK/hruns" output.name=iid data.path="$WORK/p6iid.h5"
    fh 2 hc "$WORK/base.ini" output.dir="$WORK/hruns" output.name=dir-seed4 fl.seed=4
    fx 0 hrep report "$WORK/hruns" --no-plots
    expect_rc "report of runs on two partitions" 0 || return
    local csv=$WORK/hruns/summary.csv file i want got
    local cols=(- - partition_entropy_nats_mean partition_effective_classes_mean partition_tv_mean partition_emd_mean)
    [ "$(data_rows "$csv")" = 2 ] || fail "$(data_rows "$csv") configurations, expected 2 (the two partitions)"
    for file in p6 p6iid; do
        "$FEDHET" inspect "$WORK/$file.h5" >"$WORK/$file.inspect" 2>&1 || { fail "inspect $file.h5 failed"; continue; }
        # the per-client table (client entropy eff_classes TV EMD): column means
        for i in 2 3 4 5; do
            want=$(awk -v c="$i" '/^ *client  entropy/ { on = 1; next } on && NF == 5 { s += $c; n++ } END { if (n) printf "%.6f", s / n }' "$WORK/$file.inspect")
            got=$(csv_cell "$csv" "$file.h5" "${cols[$i]}")
            close "$want" "$got" 0.003 || fail "$file.h5: ${cols[$i]} = '$got' in summary.csv, inspect's clients give '$want'"
        done
        want=$(awk '/^size Gini/ { print $3 }' "$WORK/$file.inspect")
        got=$(csv_cell "$csv" "$file.h5" partition_size_gini)
        close "$want" "$got" 0.0005 || fail "$file.h5: partition_size_gini = '$got', inspect says '$want'"
    done
    # IID clients of a 4-class set: close to the global label distribution, entropy close to ln 4
    got=$(csv_cell "$csv" "p6iid.h5" partition_tv_mean)
    awk -v v="$got" 'BEGIN { exit !(v != "" && v < 0.1) }' || fail "IID partition: partition_tv_mean = '$got', expected < 0.1"
    awk -v a="$got" -v b="$(csv_cell "$csv" "p6.h5" partition_tv_mean)" 'BEGIN { exit !(b > a) }' ||
        fail "Dirichlet(0.5) partition is not further from the global labels than the IID one"
    # runs on one partition file: no partition columns
    fx 0 hsame report "$WORK/out/sens" --no-plots --out "$WORK/sens_same"
    expect_rc "report of a grid on one partition" 0 &&
        { head -1 "$WORK/sens_same/summary.csv" | grep -q partition_ && fail "a grid on one partition got partition_ columns"; }
    # a partition file that is gone: empty cells and a warning naming it
    mv "$WORK/p6iid.h5" "$WORK/p6iid.moved"
    fx 0 hgone report "$WORK/hruns" --no-plots --out "$WORK/hruns_gone"
    mv "$WORK/p6iid.moved" "$WORK/p6iid.h5"
    expect_rc "report with a missing partition file" 0 || return
    grep -q "warning: run iid: .*p6iid.h5" "$WORK/hgone.err" || fail "no warning naming p6iid.h5: $(cat "$WORK/hgone.err")"
    [ -z "$(csv_cell "$WORK/hruns_gone/summary.csv" "p6iid.h5" partition_tv_mean)" ] || fail "a missing partition has values"
    [ -n "$(csv_cell "$WORK/hruns_gone/summary.csv" "p6.h5" partition_tv_mean)" ] || fail "the other partition lost its values"
}

# 4. The landscape: the centre point is the model itself (its loss = the run's final test loss); points
#    spread over 1 or 3 ranks give the same numbers; 1-D and subsets.
test_landscape()
{
    local R=$WORK/out/sens/lr-0.05_seed-1
    fx 0 ls1 landscape "$R/run.h5" points=5 out="$WORK/ls1"
    expect_rc "landscape on 1 rank" 0 || return
    fx 3 ls3 landscape "$R/run.h5" points=5 out="$WORK/ls3"
    expect_rc "landscape on 3 ranks" 0 || return
    is_png "$WORK/ls1/landscape.png" || fail "landscape.png missing"
    dump_dataset "$WORK/ls1/landscape.h5" /loss "$WORK/l1.bin" && dump_dataset "$WORK/ls3/landscape.h5" /loss "$WORK/l3.bin" ||
        { fail "cannot read /loss"; return; }
    cmp -s "$WORK/l1.bin" "$WORK/l3.bin" || fail "/loss differs between 1 and 3 ranks"
    [ "$(stat -c %s "$WORK/l1.bin")" = 200 ] || fail "/loss has $(stat -c %s "$WORK/l1.bin") bytes, expected 5 x 5 doubles"
    local centre want
    centre=$(h5dump -d "/loss[2,2;;1,1]" "$WORK/ls1/landscape.h5" 2>/dev/null | sed -n 's/^ *(2,2): *\([-0-9.e+]*\).*/\1/p')
    want=$(column "$R/metrics.csv" test_loss | tail -1)
    close "$centre" "$want" 2e-5 || fail "centre loss '$centre' differs from the run's final test loss $want"
    fx 2 ls1d landscape "$R/run.h5" dims=1 points=7 subset=40 seed=3 out="$WORK/ls1d" name=curve
    expect_rc "1-D landscape on a subset" 0 || return
    is_png "$WORK/ls1d/curve.png" || fail "curve.png missing"
    dump_dataset "$WORK/ls1d/curve.h5" /loss "$WORK/l1d.bin"
    [ "$(stat -c %s "$WORK/l1d.bin" 2>/dev/null)" = 56 ] || fail "1-D /loss is not 7 doubles"
    h5dump -a /rows "$WORK/ls1d/curve.h5" 2>/dev/null | grep -q "(0): 40" || fail "the rows attribute is not 40"
}

test_landscape_bad()
{
    local R=$WORK/out/sens/lr-0.05_seed-1
    fx 0 lsnot landscape "$R/metrics.csv"
    expect_rc "landscape of a CSV file" 4
    fx 0 lskey landscape "$R/run.h5" pionts=5
    expect_rc "landscape pionts=5" 1 && { grep -q "did you mean 'points'" "$WORK/lskey.err" || fail "no suggestion: $(errline lskey)"; }
    fx 0 lsdims landscape "$R/run.h5" dims=3
    expect_rc "landscape dims=3" 1
    # a partition file of another shape: the model does not fit the checkpoint
    python3 "$HERE/make_idx.py" "$WORK/idx10" 200 50 10 4 >/dev/null 2>&1
    "$FEDHET" partition "$WORK/idx10" "$WORK/p10.h5" scheme=iid clients=2 classes=4 >/dev/null 2>&1
    fx 0 lsdata landscape "$R/run.h5" data="$WORK/p10.h5"
    expect_rc "landscape with another data set" 1 && { grep -q "state values" "$WORK/lsdata.err" || fail "$(errline lsdata)"; }
    fx 0 lshelp landscape --help
    expect_rc "landscape --help" 0
}

# 5. A checkpoint written by a model of another layout with the same number of state values (here: the run's
#    file with another layout hash) is refused by the landscape, which reads it through fl's checkpoint
#    reader, naming the file: numbers of another layout would otherwise read as nonsense.
test_landscape_layout()
{
    local R=$WORK/out/sens/lr-0.05_seed-1 py=/usr/bin/python3
    $py -c 'import h5py' 2>/dev/null || { SKIP_WHY="$py lacks h5py (make deps installs python3-h5py)"; return; }
    cp "$R/run.h5" "$WORK/other_layout.h5"
    $py -c 'import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    meta = f["/meta"].attrs
    meta.modify("layout_hash", meta["layout_hash"] ^ 1)' "$WORK/other_layout.h5" || { fail "cannot rewrite the layout hash"; return; }
    fx 0 lslayout landscape "$WORK/other_layout.h5" points=3 out="$WORK/lslayout"
    expect_rc "landscape of a checkpoint of another model layout" 1 || return
    grep -q "other_layout.h5: written by a model of another layout" "$WORK/lslayout.err" || fail "$(errline lslayout)"
    [ ! -e "$WORK/lslayout/landscape.h5" ] || fail "a landscape was written"
}

# png_height FILE: the height in pixels (the PNG header's IHDR field)
png_height() { od -An -tu1 -j20 -N4 "$1" | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }'; }

# 8. Labels carry only the keys that differ between the runs shown and that the run sets: methods side by
#    side leave out an unset key (mu=-) and a key every run shares; a legend too wide for the right side
#    goes below the plot (a taller image), a short one stays at the right (the default height, 640).
test_report_labels_legend()
{
    { cat "$WORK/base.ini"; printf '
[grid]
algo.method = fedavg, fedprox, fedprox
algo.mu = -, 0.1, 0.5
'
      printf 'zip = algo.method, algo.mu
train.momentum = 0.9
train.lr = 0.05, 0.1
ranks_per_member = 1
'; } >"$WORK/mixed.ini"
    sed -i 's/^rounds = 3/rounds = 1/' "$WORK/mixed.ini"
    fx 2 mixed grid "$WORK/mixed.ini"
    expect_rc "grid of methods side by side" 0 || return
    fx 0 rep_mixed report "$WORK/out/mixed"
    expect_rc "report of the methods" 0 || return
    local csv=$WORK/out/mixed/summary.csv labels
    labels=$(awk -F'"' 'NR > 1 { print $2 }' "$csv" | tr '\n' ';')
    [ "$labels" = "method=fedavg, lr=0.05;method=fedavg, lr=0.1;method=fedprox, mu=0.1, lr=0.05;method=fedprox, mu=0.1, lr=0.1;method=fedprox, mu=0.5, lr=0.05;method=fedprox, mu=0.5, lr=0.1;" ] ||
        fail "labels: '$labels'"
    grep -q 'mu=-\|momentum=' "$csv" "$WORK/out/mixed/summary.md" && fail "an unset or shared key in a label: $(grep -m1 'mu=-\|momentum=' "$csv")"
    local h
    h=$(png_height "$WORK/out/mixed/accuracy.png")
    [ "$h" -gt 640 ] || fail "accuracy.png is $h pixels high: its wide legend is not below the plot"
    fx 0 rep_sens report "$WORK/out/sens" --out "$WORK/out/sens_labels"
    expect_rc "report of the sensitivity grid" 0 || return
    h=$(png_height "$WORK/out/sens_labels/accuracy.png")
    [ "$h" = 640 ] || fail "the short legend of the sensitivity grid moved: accuracy.png is $h pixels high"
}

# 9. curves.csv holds each configuration's curve (its last round's mean is summary.csv's final mean), and
#    --redraw draws the figures again from summary.csv and curves.csv alone (no run folder beside them); a folder
#    without summary.csv exits 2 naming it.
test_report_redraw()
{
    local G=$WORK/out/sens C=$WORK/redraw lr
    fx 0 rep_curves report "$G"
    expect_rc "report of the grid" 0 || return
    [ "$(data_rows "$G/curves.csv")" = 8 ] || fail "curves.csv has $(data_rows "$G/curves.csv") rows, expected 2 x 4 rounds"
    for lr in 0.05 0.2; do
        local last final
        last=$(awk -F, -v m="lr=$lr" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "mean") c = i; next } $1 == m { v = $c } END { print v }' "$G/curves.csv")
        final=$(csv_cell "$G/summary.csv" "lr=$lr" final_mean)
        close "$last" "$final" 2e-6 || fail "lr $lr: curves.csv's last mean $last, summary.csv's final mean $final"
    done
    mkdir -p "$C"
    cp "$G/summary.csv" "$G/summary.md" "$G/curves.csv" "$C/"
    fx 0 redraw report --redraw "$C"
    expect_rc "--redraw from the tables alone" 0 || return
    is_png "$C/accuracy.png" || fail "--redraw: no accuracy.png"
    is_png "$C/sensitivity-lr.png" || fail "--redraw: no sensitivity-lr.png"
    grep -q "sens: redrew" "$WORK/redraw.out" || fail "--redraw does not name the report: $(head -1 "$WORK/redraw.out")"
    rm "$C/curves.csv" "$C/accuracy.png"
    fx 0 redraw2 report --redraw "$C" --x passes
    expect_rc "--redraw without curves.csv" 0
    [ -e "$C/accuracy-passes.png" ] && fail "--redraw drew curves without curves.csv"
    rm "$C/summary.csv"
    fx 0 redraw3 report --redraw "$C"
    expect_rc "--redraw without summary.csv" 2 && { grep -q "summary.csv: cannot open" "$WORK/redraw3.err" || fail "--redraw: $(errline redraw3)"; }
}

TESTS=(report_grid report_runs report_failures report_partition_stats landscape landscape_bad landscape_layout report_labels_legend
       report_redraw)
run_tests "$@"
