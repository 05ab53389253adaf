#!/usr/bin/env bash
# The method tables of docs/results.md from real runs: inputs/methods-table.ini once per method (3 MPI ranks), then
# a markdown table of each run's server weights, test accuracy after rounds 10 and 20 (beside FedAvg's), seconds
# per round and backward passes per round, into outputs/methods-table/table.md.
# usage: tools/methods-table.sh [METHOD[:key=value,...] ...]   (default: every method of `fedhet keys methods`)
# FEDHET=path runs another build (e.g. a copy, while the tree is rebuilt). NP: ranks (3).
# e.g.   tools/methods-table.sh fedavg fedprox "afl:algo.variant=original,train.steps=1"
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
NP=${NP:-3}
FEDHET=${FEDHET:-bin/fedhet}
CONFIG=inputs/methods-table.ini
OUT=outputs/methods-table
mkdir -p "$OUT"
if [ $# -eq 0 ]; then
    set -- $("$FEDHET" keys methods | awk -F'\t' 'NR > 1 { print $1 }')
fi
column() { awk -F, -v name="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next } c { print $c }' "$1"; }
for spec in "$@"; do
    method=${spec%%:*}
    extra=()
    name=$method
    if [ "$spec" != "$method" ]; then
        IFS=, read -r -a extra <<<"${spec#*:}"
        name=$method-$(echo "${spec#*:}" | tr -c 'a-zA-Z0-9.=\n' _ | tr '=' '-')
    fi
    echo "== $name"
    start=$(date +%s)
    if mpirun --oversubscribe -np "$NP" "$FEDHET" run "$CONFIG" algo.method="$method" "${extra[@]}" \
        output.name="$name" --force >"$OUT/$name.log" 2>&1; then
        echo "   $(( $(date +%s) - start )) s"
    else
        echo "   failed: $(grep -m1 error "$OUT/$name.log" || tail -1 "$OUT/$name.log")"
    fi
done
# the server weights a run aggregated with: the method's rule (`fedhet methods NAME`), resolved through the
# run's own `weights` key where the rule is that key
server_weights() {
    local config=$1 method rule
    method=$(awk '/^\[algo\]/ { a = 1; next } /^\[/ { a = 0 } a && $1 == "method" { print $3 }' "$config")
    rule=$("$FEDHET" methods "$method" | sed -n 's/^  server weights: //p' | sed 's/ (uniform or sample.*//')
    if [ "$rule" = algo.weights ]; then
        awk '/^\[algo\]/ { a = 1; next } /^\[/ { a = 0 } a && $1 == "weights" { print ($3 == "samples" ? "sample counts" : $3) }' "$config"
    else
        echo "$rule"
    fi
}
# the table: every run folder there is
at_round() { # metrics.csv's column $2 after 1-based round $3
    awk -F, -v name="$2" -v r="$3" 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == name) c = i; if ($i == "round") k = i } next }
        $k + 1 == r { print $c }' "$1"
}
{
    echo "| method | server weights | test accuracy, round 10 | round 20 | vs FedAvg (round 20) | s / round | backward passes per round |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
    base=$(at_round "$OUT/fedavg/metrics.csv" test_accuracy 20 2>/dev/null || true)
    for dir in "$OUT"/*/; do
        name=$(basename "$dir")
        csv=$dir/metrics.csv
        [ -f "$csv" ] || continue
        acc=$(at_round "$csv" test_accuracy 20)
        # a run that stopped with an error (e.g. diverged) has no final accuracy to show
        if [ -z "$acc" ] || [ "$acc" = nan ] || grep -q error "$OUT/$name.log" 2>/dev/null; then
            printf '| %s | | failed (%s.log) | | | | |\n' "$name" "$name"
            continue
        fi
        acc10=$(at_round "$csv" test_accuracy 10)
        secs=$(column "$csv" t_round | awk '{ s += $1; n++ } END { if (n) printf "%.3f", s / n }')
        passes=$(column "$csv" cum_train_backward | awk '{ last = $1; n++ } END { if (n) printf "%d", last / n }')
        diff=$(awk -v a="$acc" -v b="$base" 'BEGIN { if (b == "") print "-"; else printf "%+.4f", a - b }')
        printf '| %s | %s | %.4f | %.4f | %s | %s | %s |\n' "$name" "$(server_weights "$dir/config.ini")" "$acc10" \
            "$acc" "$diff" "$secs" "$passes"
    done
} >"$OUT/table.md"
cat "$OUT/table.md"
