#!/usr/bin/env bash
# The signature set: a fingerprint of what every method computes, to show a refactoring changed no result.
# Runs each method of `fedhet methods` at its defaults, once more for every other value of each of its choice and
# true/false keys (`fedhet keys algo`), the FLOOD plug-in on four hosts, the lr schedule under the methods
# that read it, the oneDNN conv path, and the sharpness and Hessian probes: 2 rounds of a tiny MLP (or CNN) on 6 Dirichlet clients of a synthetic
# set, 2 ranks. Prints one line per run: its name, then sha256 of the final global model and of metrics.csv and
# clients.csv without their timing columns. Compare two builds with diff.
# usage: tools/signatures.sh [OUT.txt]      FEDHET=path: another build (default bin/fedhet); NP (default 2);
#        ONLY=REGEX: the runs whose names match
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
FEDHET=${FEDHET:-bin/fedhet}
np=${NP:-2}
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

/usr/bin/python3 tests/mpi/make_idx.py "$work/idx" 600 100 8 4 >/dev/null
"$FEDHET" partition "$work/idx" "$work/p6.h5" scheme=dirichlet alpha=0.5 clients=6 min_size=5 partition_seed=1 classes=4 \
    >/dev/null
cat >"$work/base.ini" <<EOF
[data]
path = $work/p6.h5
eval_batch = 30

[model]
name = mlp

[train]
optimizer = sgd
lr = 0.05
momentum = 0.9
batch_size = 16
epochs = 1

[fl]
rounds = 2
selection = fraction
fraction = 0.5
seed = 3
checkpoint_every = 0

[output]
dir = $work/out
EOF

# the columns of a CSV except the timing ones, as tests/mpi/lib.sh untimed
untimed()
{
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) keep[i] = ($i !~ /^t_/ && $i != "seconds" && $i != "cum_seconds") }
        { o = ""; n = 0; for (i = 1; i <= NF; i++) if (keep[i]) o = o (n++ ? "," : "") $i; print o }' "$1"
}

# sig NAME KEY=VALUE...: one run and its line
sig()
{
    local name=$1 run=$work/out/$1
    shift
    [[ -z "${ONLY:-}" || $name =~ $ONLY ]] || return 0
    # methods that refuse the partial selection (FairFed, FedCE, FedGA, AFL's original) run with every client,
    # AFL's original also with one plain step
    local extra ok=
    for extra in "" "fl.selection=all" "fl.selection=all train.steps=1 train.momentum=0"; do
        rm -rf "$run"
        # shellcheck disable=SC2086
        if mpirun --oversubscribe -np "$np" "$FEDHET" run "$work/base.ini" output.name="$name" "$@" $extra </dev/null \
            >"$work/$name.log" 2>&1; then
            ok=1
            break
        fi
    done
    if [ -z "$ok" ]; then
        echo "$name FAILED $(grep -m1 'error' "$work/$name.log")"
        return
    fi
    local model csvs
    model=$(h5dump -d /server/global -b LE -o "$work/g.bin" "$run/run.h5" >/dev/null 2>&1 && sha256sum <"$work/g.bin")
    csvs=$( (untimed "$run/metrics.csv"; untimed "$run/clients.csv") | sha256sum)
    echo "$name ${model%% *} ${csvs%% *}"
}

[ -z "${1:-}" ] || exec >"$1"
# the methods and each one's choice and true/false keys, from `fedhet keys` (columns: see fedhet keys --help)
methods=$("$FEDHET" keys methods | awk -F'\t' 'NR > 1 { print $1 }')
keys_of=$("$FEDHET" keys methods | awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "keys") k = i; next }
    { print $1 "\t" $k }')
choice_keys=$("$FEDHET" keys algo | awk -F'\t' 'NR > 1 && ($4 == "choice" || $4 == "bool") { print $3 "\t" $5 "\t" $6 "\t" $8 }')
{
    for m in $methods; do
        sig "$m" algo.method="$m"
        # every other value of each choice or true/false key of the method, in the method's key order; a key's row is
        # the one naming the method, else the one for every method
        for key in $(awk -F'\t' -v m="$m" '$1 == m { print $2 }' <<<"$keys_of"); do
            row=$(awk -F'\t' -v k="$key" -v m="$m" '$1 == k && (" " $4 " ") ~ (" " m " ") { print; exit }' <<<"$choice_keys")
            [ -n "$row" ] || row=$(awk -F'\t' -v k="$key" '$1 == k && $4 == "" { print; exit }' <<<"$choice_keys")
            [ -n "$row" ] || continue
            IFS=$'\t' read -r _ def choices _ <<<"$row"
            for v in ${choices//|/ }; do
                [ "$v" = "$def" ] || sig "$m.$key=$v" algo.method="$m" "algo.$key=$v"
            done
        done
    done
    for host in fedavg fedprox scaffold fedsam; do sig "$host+flood" algo.method=$host algo.plugin=flood; done
    for m in fedavg fedsam fedwmsam fedismplus; do sig "$m.lr_decay" algo.method=$m train.lr_decay=0.9; done
    sig fedsam.rho_schedule=lr.lr_decay algo.method=fedsam algo.rho_schedule=lr train.lr_decay=0.9
    for m in fedavg fedsam scaffold; do sig "$m.cnn" algo.method=$m model.name=cnn; done
    sig fedavg.probes algo.method=fedavg fl.sharpness_every=1 fl.hessian_every=1
}
