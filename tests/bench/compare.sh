#!/usr/bin/env bash
# Regression check (`make bench-compare BASE=<commit>`): the engine's training step and the demo's round on two
# builds side by side, the commit BASE and this working tree, so that a change that slows a model is seen before it
# lands. BASE is exported (git archive) and built once into build/bench-base/<commit> (kept for the next
# comparison). The two binaries alternate BENCH_ALTERNATIONS times per row (ABBA order), one thread each; the table gives the
# medians, their [min-max] ranges and this tree's median over BASE's. A row more than BENCH_TOLERANCE (default 5 %)
# slower is marked SLOWER and the script exits 1.
# Rows: `fedhet bench` for every model of BENCH_MODELS (default "mlp cnn resnet8 resnet18_gn mobilenetv2") at
# batch BENCH_BATCH (64), then the round of inputs/demo-fedavg.ini (cnn, 10 clients, -np 1, BENCH_ROUNDS rounds,
# median over rounds 2..; BENCH_ROUNDS=0 leaves it out).
# Knobs: BASE (required), BENCH_MODELS, BENCH_BATCH, BENCH_ALTERNATIONS (default 5), BENCH_REPS (3),
# BENCH_ROUNDS (default 3), BENCH_TOLERANCE (percent, default 5), BENCH_CORETYPE (tests/bench/common.sh),
# BENCH_OUT (default outputs/bench; writes compare.csv), FEDHET (this tree's binary, default bin/fedhet).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/common.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
[ -n "${BASE:-}" ] || { echo "usage: make bench-compare BASE=<commit>   (the build to compare this working tree with)" >&2; exit 2; }
sha=$(git rev-parse --verify --quiet "$BASE^{commit}") ||
    { echo "bench-compare: BASE=$BASE is not a commit of this repository" >&2; exit 2; }
models=${BENCH_MODELS:-"mlp cnn resnet8 resnet18_gn mobilenetv2"}
batch=${BENCH_BATCH:-64}
alternations=${BENCH_ALTERNATIONS:-5}
reps=${BENCH_REPS:-3}
rounds=${BENCH_ROUNDS:-3}
tolerance=${BENCH_TOLERANCE:-5}
out=${BENCH_OUT:-outputs/bench}
head_bin=${FEDHET:-bin/fedhet}
mkdir -p "$out"

base_dir=build/bench-base/$sha
if [ ! -x "$base_dir/bin/fedhet" ]; then
    echo "building BASE $(git log -1 --format='%h %s' "$sha") in $base_dir"
    rm -rf "$base_dir.tmp" && mkdir -p "$base_dir.tmp"
    git archive "$sha" | tar -x -C "$base_dir.tmp"
    make -C "$base_dir.tmp" -j"$(nproc)" bin/fedhet >"$base_dir.log" 2>&1 ||
        { echo "bench-compare: BASE does not build (see $base_dir.log)" >&2; exit 1; }
    rm -rf "$base_dir" && mv "$base_dir.tmp" "$base_dir"
fi
base_bin=$base_dir/bin/fedhet
bench_coretype "$head_bin" --version
echo "$(cpu_line), 1 thread; BASE $(git log -1 --format='%h' "$sha") against this tree ($(git describe --always --dirty)), $alternations alternations, medians [min-max]"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
csv=$out/compare.csv
echo "row,unit,base,base_min,base_max,head,head_min,head_max,head_over_base,verdict" >"$csv"
printf '%-24s %-10s | %-28s | %-28s | %7s\n' row unit "BASE" "this tree" "ratio"
slower=0
# row unit higher_is_better base_values head_values: one line of the table and the CSV
report() {
    local bs hs r verdict decimals=1
    [ "$3" = 1 ] || decimals=3
    bs=$(printf '%s' "$4" | stats $decimals) hs=$(printf '%s' "$5" | stats $decimals)
    # r is this tree's speed over BASE's, whatever the unit
    r=$(awk -v h="$(field 1 "$hs")" -v b="$(field 1 "$bs")" -v up="$3" 'BEGIN { printf "%.3f", up ? h / b : b / h }')
    verdict=$(awk -v r="$r" -v t="$tolerance" 'BEGIN { print (r < 1 - t / 100) ? "SLOWER" : (r > 1 + t / 100) ? "faster" : "same" }')
    [ "$verdict" = SLOWER ] && slower=$((slower + 1))
    printf '%-24s %-10s | %-28s | %-28s | %7s %s\n' "$1" "$2" "$(stats_text "$bs")" "$(stats_text "$hs")" "$r" "$verdict"
    echo "$1,$2,$bs,$hs,$r,$verdict" >>"$csv"
}

# MEASURE ARGS...: runs `MEASURE BINARY SIDE ARGS...` for both builds in turns, the first of a pair alternating
# too (ABBA), so that neither gains from its place; the values go to b_vals and h_vals, one per line
alternate() {
    local a side v
    b_vals="" h_vals=""
    for ((a = 0; a < alternations; a++)); do
        for side in $( ((a % 2)) && echo "head base" || echo "base head"); do
            if [ "$side" = base ]; then v=$("$1" "$base_bin" "$side" "${@:2}"); b_vals+="$v"$'\n'
            else v=$("$1" "$head_bin" "$side" "${@:2}"); h_vals+="$v"$'\n'; fi
        done
    done
}
step_rate() { field 5 "$("$1" bench --model "$3" --batch "$batch" --threads 1 --reps "$reps")"; }
round_time() {
    mpirun --oversubscribe -np 1 "$1" run inputs/demo-fedavg.ini --force fl.rounds="$rounds" fl.checkpoint_every=0 \
        output.dir="$tmp" output.name="$2" output.log_level=warn >/dev/null
    median_col "$tmp/$2/metrics.csv" t_round
}

for m in $models; do
    alternate step_rate "$m"
    report "$m b$batch" samples/s 1 "$b_vals" "$h_vals"
done
if [ "$rounds" -gt 0 ]; then
    [ "$rounds" -ge 2 ] || { echo "bench-compare: BENCH_ROUNDS must be 0 or at least 2 (round 1 is warm-up)" >&2; exit 2; }
    alternate round_time
    report "round demo-fedavg -np 1" s/round 0 "$b_vals" "$h_vals"
fi
echo "wrote $csv"
if [ "$slower" -gt 0 ]; then
    echo "bench-compare: $slower row(s) more than $tolerance % slower than BASE" >&2
    exit 1
fi
