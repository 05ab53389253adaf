#!/usr/bin/env bash
# The results of the seed methods in docs/results.md: each inputs/NAME-quick.ini over seeds 0..2 as a `fedhet grid`
# of one-rank members (NP ranks, default 3: three seeds at once), then `fedhet report` of the grid, into
# outputs/quick-results/NAME/ (summary.md, accuracy.png). Existing grid folders are replaced.
# A config with the line `; quick-results beside: METHOD` also runs METHOD on the same setting (its [algo]
# keys other than method dropped) as the grid NAME-METHOD, e.g. FedAvg beside FedISM+ (docs/methods/metrics.md C.5: deltas
# against FedAvg). Runs with a corrupted test set get quality.md: the docs/methods/metrics.md C.5 statistic (the last 5
# rounds of all runs pooled, mean and population std) of clean and corrupted balanced accuracy and OvO
# macro AUC, and of the client-level AUC std (C.6).
# usage: tools/quick-results.sh [NAME ...]   (default: every inputs/*-quick.ini)
#        e.g. tools/quick-results.sh fedscam flood-dir          FEDHET=path: another build
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
NP=${NP:-3}
SEEDS=${SEEDS:-0..2}
FEDHET=${FEDHET:-bin/fedhet}
OUT=outputs/quick-results
mkdir -p "$OUT"

# C.5 pooled statistic over GRID/*/metrics.csv; silent when the runs have no corrupted test set
quality_summary() {
    local grid=$1
    awk -F, -v pool=5 '
        FNR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; rows = 0; next }
        { line[FILENAME, ++rows] = $0; last[FILENAME] = rows }
        END {
            n = split("test_balanced_accuracy corrupted_balanced_accuracy test_auc_ovo_macro corrupted_auc_ovo_macro client_auc_std", names, " ")
            if (!("corrupted_balanced_accuracy" in col)) exit
            for (f in last)
                for (r = last[f] - pool + 1; r <= last[f]; r++) {
                    if (r < 1) continue
                    split(line[f, r], v, ",")
                    if (v[col["corrupted_balanced_accuracy"]] == "") exit
                    for (j = 1; j <= n; j++) { x = v[col[names[j]]]; s[j] += x; ss[j] += x * x }
                    count++
                }
            printf "| statistic (last %d rounds x runs pooled, %d values) | mean | std |\n|---|---:|---:|\n", pool, count
            for (j = 1; j <= n; j++) {
                m = s[j] / count; var = ss[j] / count - m * m
                printf "| %s | %.4f | %.4f |\n", names[j], m, sqrt(var > 0 ? var : 0)
            }
        }' "$grid"/*/metrics.csv
}

# NAME CONFIG: the config over the seeds as one grid, its report, and the quality table where it applies
run_grid() {
    local name=$1 config=$2 grid=$OUT/$1.ini rc=0 start
    { cat "$config"; printf '\n[grid]\nseed = %s\nranks_per_member = 1\n' "$SEEDS"; } >"$grid"
    echo "== $name"
    start=$(date +%s)
    # failed members (exit 10 + their count) are reported with the others; the next config still runs
    mpirun --oversubscribe -np "$NP" "$FEDHET" grid "$grid" output.dir="$OUT" --force || rc=$?
    echo "   $(( $(date +%s) - start )) s$([ "$rc" -eq 0 ] || echo ", grid exit $rc")"
    [ "$rc" -eq 0 ] || [ "$rc" -ge 10 ] || return 0
    "$FEDHET" report "$OUT/$name" --last 3 >/dev/null
    sed -n '/^| configuration/,/^$/p' "$OUT/$name/summary.md"
    quality_summary "$OUT/$name" >"$OUT/$name/quality.md"
    if [ -s "$OUT/$name/quality.md" ]; then cat "$OUT/$name/quality.md"; else rm -f "$OUT/$name/quality.md"; fi
}

if [ $# -eq 0 ]; then
    set -- $(ls inputs/*-quick.ini | sed 's|^inputs/||; s|-quick\.ini$||')
fi
for name in "$@"; do
    config=inputs/$name-quick.ini
    [ -f "$config" ] || { echo "quick-results: $config does not exist" >&2; exit 1; }
    run_grid "$name" "$config"
    beside=$(sed -n 's/^; *quick-results beside: *\([a-z0-9_-]*\).*/\1/p' "$config")
    if [ -n "$beside" ]; then
        # the same setting under another method: the [algo] section keeps only its method line
        sed "/^\[algo\]/,/^\[/{/^method *=/s/=.*/= $beside/;/^\[/!{/^method *=/!{/^[a-z_]* *=/d}}}" \
            "$config" >"$OUT/$name-$beside.quick.ini"
        run_grid "$name-$beside" "$OUT/$name-$beside.quick.ini"
    fi
done
