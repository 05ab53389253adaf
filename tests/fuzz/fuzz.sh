#!/usr/bin/env bash
# make fuzz: each libFuzzer target (build-fuzz/fuzz_<target>) for FUZZ_SECONDS (default 600), one after the
# other, on build-fuzz/corpus/<target> (where new inputs go), its seeds and tests/fuzz/crashes/<target>.
# Inputs that crash, leak, hang (over 10 s) or break a property are written to tests/fuzz/crashes/<target>/:
# fix the code, keep the file (tests/fuzz/test_fuzz.sh replays it in make test). FUZZ_TARGETS="idx grid"
# picks targets. A finding stops libFuzzer; it is started again on the grown corpus until the time is spent.
set -u
cd "$(dirname "$0")/../.."
. tests/fuzz/corpus.sh
seconds=${FUZZ_SECONDS:-600}
targets=${FUZZ_TARGETS:-$FUZZ_ALL}
fuzz_make_seeds || { echo "fuzz: cannot write the seed corpora"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
summary=()
for t in $targets; do
    bin=$FUZZ_BUILD/fuzz_$t
    [ -x "$bin" ] || { echo "fuzz: $bin is missing (make fuzz-build)"; exit 1; }
    corpus=$FUZZ_BUILD/corpus/$t
    mkdir -p "$corpus" "$FUZZ_BUILD/logs"
    log=$FUZZ_BUILD/logs/$t.log
    before=$(ls "$FUZZ_CRASHES/$t" | wc -l)
    echo "== fuzz_$t for $seconds s (log $log)"
    : >"$log"
    start=$(date +%s) execs=0 cov=0
    while left=$((start + seconds - $(date +%s))); [ "$left" -gt 0 ]; do
        "$bin" -timeout=10 -rss_limit_mb=2048 -max_total_time="$left" -print_final_stats=1 \
            -artifact_prefix="$FUZZ_CRASHES/$t/" "$corpus" "$FUZZ_SEEDS/$t" "$FUZZ_CRASHES/$t" >>"$log" 2>&1
        n=$(grep -E '^stat::number_of_executed_units' "$log" | tail -n 1 | sed -E 's/.*: *//')
        execs=$((execs + ${n:-0}))
        c=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | sed -E 's/cov: //')
        [ "${c:-0}" -gt "$cov" ] && cov=$c
    done
    found=$(( $(ls "$FUZZ_CRASHES/$t" | wc -l) - before ))
    line="fuzz_$t: $execs executions, coverage $cov edges, corpus $(ls "$corpus" | wc -l) inputs, $found new crash inputs"
    echo "   $line"
    summary+=("$line")
done
echo "== summary ($seconds s each)"
printf '   %s\n' "${summary[@]}"
