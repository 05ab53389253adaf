#!/usr/bin/env bash
# The fuzz targets within make test, two tests each: "replay" runs the target once on every seed input and
# on every crash input ever kept in tests/fuzz/crashes/<target>/ (each once a crash, leak or broken
# property, now fixed: it must pass), and "fuzz" fuzzes from the seeds for FUZZ_TEST_SECONDS (default 4)
# with a fixed libFuzzer seed. A new finding is left in a temporary folder named in the failure: copy it
# into tests/fuzz/crashes/<target>/ when fixing the code. Prints "N passed, N failed".
# Some targets: tests/fuzz/test_fuzz.sh idx cifar
set -u
cd "$(dirname "$0")/../.."
. tests/fuzz/corpus.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
seconds=${FUZZ_TEST_SECONDS:-4}
targets=${*:-$FUZZ_ALL}
passed=0 failed=0
fail() { failed=$((failed + 1)); echo "  $1 FAIL: $2"; }
pass() { passed=$((passed + 1)); echo "  $1 ok"; }
for t in $targets; do
    [ -x "$FUZZ_BUILD/fuzz_$t" ] || { echo "  $FUZZ_BUILD/fuzz_$t is missing: run make fuzz-build"; echo "0 passed, 1 failed"; exit 1; }
done
[ -x "$FUZZ_BUILD/fuzz_seeds" ] && fuzz_make_seeds >/dev/null || { echo "  cannot write the seed corpora"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/fedhet-fuzz.XXXXXX") || { echo "0 passed, 1 failed"; exit 1; }
for t in $targets; do
    bin=$FUZZ_BUILD/fuzz_$t
    inputs=("$FUZZ_SEEDS/$t"/* "$FUZZ_CRASHES/$t"/*)
    files=()
    for f in "${inputs[@]}"; do [ -f "$f" ] && files+=("$f"); done
    if [ ${#files[@]} -eq 0 ]; then
        fail "$t replay" "no seed inputs in $FUZZ_SEEDS/$t"
    elif "$bin" "${files[@]}" >"$work/$t-replay.log" 2>&1; then
        pass "$t replay (${#files[@]} inputs)"
    else
        # libFuzzer prints "Running: FILE" before each input: the last one is the input that failed
        fail "$t replay" "$(grep -E '^Running:' "$work/$t-replay.log" | tail -n 1 | sed 's/^Running: //'): $(grep -m1 -E 'ERROR|fuzz property' "$work/$t-replay.log") (log $work/$t-replay.log)"
    fi
    mkdir -p "$work/$t-corpus" "$work/$t-found"
    if "$bin" -seed=1 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$work/$t-found/" \
        "$work/$t-corpus" "$FUZZ_SEEDS/$t" >"$work/$t-fuzz.log" 2>&1; then
        pass "$t fuzz ($seconds s)"
    else
        fail "$t fuzz" "new finding: $(ls "$work/$t-found" | head -n 1) in $work/$t-found (log $work/$t-fuzz.log)"
    fi
done
[ "$failed" -eq 0 ] && rm -rf "$work"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
