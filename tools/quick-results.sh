#!/usr/bin/env bash
# The README's results of the seed methods: each inputs/NAME-quick.ini over seeds 0..2 as a `fedhet grid`
# of one-rank members (NP ranks, default 3: three seeds at once), then `fedhet report` of the grid, into
# outputs/quick-results/NAME/ (summary.md, accuracy.png). Existing grid folders are replaced.
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
if [ $# -eq 0 ]; then
    set -- $(ls inputs/*-quick.ini | sed 's|^inputs/||; s|-quick\.ini$||')
fi
for name in "$@"; do
    config=inputs/$name-quick.ini
    [ -f "$config" ] || { echo "quick-results: $config does not exist" >&2; exit 1; }
    # the quick config as it is, plus the seeds as the grid's one list
    grid=$OUT/$name.ini
    { cat "$config"; printf '\n[grid]\nseed = %s\nranks_per_member = 1\n' "$SEEDS"; } >"$grid"
    echo "== $name"
    start=$(date +%s)
    # failed members (exit 10 + their count) are reported with the others; the next config still runs
    rc=0
    mpirun --oversubscribe -np "$NP" "$FEDHET" grid "$grid" output.dir="$OUT" --force || rc=$?
    echo "   $(( $(date +%s) - start )) s$([ "$rc" -eq 0 ] || echo ", grid exit $rc")"
    [ "$rc" -eq 0 ] || [ "$rc" -ge 10 ] || continue
    "$FEDHET" report "$OUT/$name" --last 3 >/dev/null
    sed -n '1,/^$/p' "$OUT/$name/summary.md"
done
