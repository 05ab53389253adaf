#!/usr/bin/env bash
# One claim of the reproduction study (docs/reproduction.md): runs inputs/repro/CLAIM.ini as a `fedhet grid`
# (continuing it with --resume when outputs/repro-CLAIM exists), then writes docs/repro/CLAIM/: the grid's
# report (summary.md, summary.csv, accuracy.png, sensitivity plots), every member's per-round outputs
# (runs.csv.gz, clients.csv.gz: tools/repro-runs.py) and verdicts.md / verdicts.csv, the comparisons the grid
# file declared before its runs, judged by tools/repro-verdict.py; then the summary
# tables of docs/reproduction.md (and README.md's copy) and docs/repro/comparisons.md, by tools/repro-summary.py.
# usage: tools/reproduce.sh CLAIM          (make reproduce CLAIM=T7)
#        NP=ranks (default: the grid file's '; reproduce: np N' line, else 2)   FEDHET=path: another build
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
FEDHET=${FEDHET:-bin/fedhet}
claims() { for f in inputs/repro/*.ini; do basename "$f" .ini; done | tr '\n' ' '; }
claim=${1:-}
if [ -z "$claim" ] || [ ! -f "inputs/repro/$claim.ini" ]; then
    echo "reproduce: unknown claim ${claim:-(none)}; the claims are: $(claims)" >&2
    echo "usage: make reproduce CLAIM=NAME" >&2
    exit 1
fi
grid=inputs/repro/$claim.ini
# a follow-up dropped before its runs (it could change no verdict) stays as written, with its reason, unrun
if grep -q '^; dropped:' "$grid"; then
    echo "reproduce: $claim was dropped before its runs: $(sed -n 's/^; dropped: //p' "$grid")" >&2
    exit 1
fi
/usr/bin/python3 tools/repro-verdict.py --check "$grid" "$FEDHET"
np=${NP:-$(sed -n 's/^; reproduce: np \([0-9][0-9]*\).*/\1/p' "$grid" | head -1)}
np=${np:-2}
out=outputs/repro-$claim
rc=0
if [ -d "$out" ]; then
    mpirun --oversubscribe -np "$np" "$FEDHET" grid --resume "$out" || rc=$?
else
    # T1 and T7 ran on the blas backend, the default when they ran (their files name none); the later grids on
    # the default onednn
    backend=()
    case $claim in T1 | T7) backend=(train.backend=blas) ;; esac
    mpirun --oversubscribe -np "$np" "$FEDHET" grid "$grid" output.dir=outputs output.name="repro-$claim" \
        "${backend[@]}" || rc=$?
fi
# 10 + N: N members failed; their rows say so and the verdicts count only finished runs
if [ "$rc" -ne 0 ] && [ "$rc" -lt 10 ]; then
    echo "reproduce: the grid stopped (exit $rc); continue with: make reproduce CLAIM=$claim" >&2
    exit "$rc"
fi
# a grid stopped by a signal exits 0 with members left: no report or verdict until every member has ended
if ! /usr/bin/python3 tools/repro-verdict.py --finished "$out" >&2; then
    echo "reproduce: the grid was stopped; no report or verdicts yet; continue with: make reproduce CLAIM=$claim" >&2
    exit 3
fi
mkdir -p "docs/repro/$claim"
"$FEDHET" report "$out" --out "docs/repro/$claim"
/usr/bin/python3 tools/repro-runs.py "$out" "docs/repro/$claim"
/usr/bin/python3 tools/repro-verdict.py "$grid" "$out" --csv "docs/repro/$claim/verdicts.csv" >"docs/repro/$claim/verdicts.md"
/usr/bin/python3 tools/repro-summary.py --update docs/reproduction.md docs/results.md docs/repro
/usr/bin/python3 tools/repro-summary.py --comparisons docs/repro/comparisons.md docs/repro
cat "docs/repro/$claim/verdicts.md"
