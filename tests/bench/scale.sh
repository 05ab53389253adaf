#!/usr/bin/env bash
# Scale benchmark (`make bench-scale`): what rank 0 and the client ranks hold, and what a round spends outside
# local training, as the clients grow. Fashion-MNIST split IID into 100 and 10,000 clients (600 and 6 training
# images each), the cnn, 1 local epoch at batch 32, lr 0.05, BENCH_ROUNDS rounds (default 3; evaluation after
# the last only, no checkpoint but the run's end). Memory: the peak resident set of rank 0 and of the largest
# client rank, from the run's last log line (getrusage: the whole process, setup and final evaluation included).
# Time: medians over rounds 2.. of t_round and t_train (the slowest rank's training) in metrics.csv; non-training
# = t_round - t_train (broadcast, waiting, aggregation). Three tables:
#   1. clients per round 10, 100, 1000 of 10,000 (FedAvg, 3 ranks: rank 0 and 2 client ranks);
#   2. 100 clients per round of 100 and of 10,000 clients (FedAvg, 3 ranks);
#   3. FedAvg and SCAFFOLD (BENCH_SCAFFOLD_CLIENTS, default 10,000: its control variates, P floats per client, lie
#      in the run folder's client-state.bin) at 100 per round on 1, 2, 3 and 8 ranks (8: oversubscribed on a
#      smaller machine).
# Targets: rank 0's peak at 1,000 clients per round within 1.2x of its peak at 10; non-training time at most 10 % of
# the round at 100 clients per round; SCAFFOLD with 10,000 clients under 2 GB per rank. Times are medians over
# BENCH_ALTERNATIONS (default 3) alternations of every configuration, with [min-max].
# Knobs: BENCH_ROUNDS, BENCH_ALTERNATIONS, BENCH_SCAFFOLD_CLIENTS, BENCH_OUT (default outputs/bench), FEDHET.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/common.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
fedhet=${FEDHET:-bin/fedhet}
rounds=${BENCH_ROUNDS:-3}
alternations=${BENCH_ALTERNATIONS:-3}
scaffold_clients=${BENCH_SCAFFOLD_CLIENTS:-10000}
out=${BENCH_OUT:-outputs/bench}
[ "$rounds" -ge 2 ] || { echo "scale.sh: BENCH_ROUNDS must be at least 2 (round 1 is warm-up)" >&2; exit 1; }
mkdir -p "$out" inputs/data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bench_coretype "$fedhet" --version
echo "$(cpu_line); $alternations alternations, $rounds rounds each, medians [min-max]"

# the partition files, made once (inputs/data is git-ignored)
data_for() {
    local k=$1 file=inputs/data/fmnist-iid-k$1.h5
    [ -f "$file" ] || "$fedhet" partition fashion-mnist "$file" scheme=iid clients="$k" partition_seed=1 >/dev/null
    echo "$file"
}

# run NAME NP DATA PER_ROUND METHOD: one run; prints "rank0_MiB,client_MiB,t_round,t_train,state_disk_MiB"
run() {
    local name=$1 np=$2 data=$3 per=$4 method=$5
    mpirun --oversubscribe -np "$np" "$fedhet" run inputs/demo-fedavg.ini --force data.path="$data" data.source= \
        model.name=cnn train.lr=0.05 train.momentum=0 train.batch_size=32 fl.rounds="$rounds" fl.selection=count \
        fl.count="$per" fl.eval_every=0 fl.checkpoint_every=0 algo.method="$method" \
        output.dir="$tmp" output.name="$name" output.log_level=info >"$tmp/$name.out" 2>&1 ||
        { echo "scale.sh: run $name failed:" >&2; tail -5 "$tmp/$name.out" >&2; exit 1; }
    local line r0 cl
    line=$(grep "peak resident memory" "$tmp/$name/log.txt" | tail -1)
    r0=$(sed -n 's/.*rank 0 \([0-9.]*\) MiB.*/\1/p; s/.*memory: \([0-9.]*\) MiB (one rank).*/\1/p' <<<"$line")
    cl=$(sed -n 's/.*client ranks up to \([0-9.]*\) MiB.*/\1/p' <<<"$line")
    local disk=0 # client-state.bin's blocks in use (sparse: what the disk holds)
    [ -f "$tmp/$name/client-state.bin" ] && disk=$(du -k "$tmp/$name/client-state.bin" | awk '{ printf "%.1f", $1 / 1024 }')
    echo "$r0,${cl:-$r0},$(median_col "$tmp/$name/metrics.csv" t_round),$(median_col "$tmp/$name/metrics.csv" t_train),$disk"
    rm -rf "${tmp:?}/$name"
}

k100=$(data_for 100)
k10k=$(data_for 10000)
kscaf=$(data_for "$scaffold_clients")
# configurations: NAME NP DATA PER_ROUND METHOD
configs=(
    "per10 3 $k10k 10 fedavg" "per100 3 $k10k 100 fedavg" "per1000 3 $k10k 1000 fedavg"
    "k100 3 $k100 100 fedavg"
    "avg-np1 1 $k10k 100 fedavg" "avg-np2 2 $k10k 100 fedavg" "avg-np8 8 $k10k 100 fedavg"
    "scaf-np1 1 $kscaf 100 scaffold" "scaf-np2 2 $kscaf 100 scaffold" "scaf-np3 3 $kscaf 100 scaffold"
    "scaf-np8 8 $kscaf 100 scaffold"
)
declare -A mem0 memc rnd trn disk
for ((a = 1; a <= alternations; a++)); do
    for c in "${configs[@]}"; do
        read -r name np data per method <<<"$c"
        r=$(run "$name" "$np" "$data" "$per" "$method")
        mem0[$name]=$(field 1 "$r") memc[$name]=$(field 2 "$r") disk[$name]=$(field 5 "$r")
        rnd[$name]+="$(field 3 "$r")"$'\n' trn[$name]+="$(field 4 "$r")"$'\n'
    done
    echo "alternation $a/$alternations done"
done
csv=$out/scale.csv
echo "config,ranks,clients,per_round,method,rank0_mib,client_rank_mib,t_round,t_round_min,t_round_max,t_train,non_training_share,state_disk_mib" >"$csv"
row() { # NAME NP CLIENTS PER METHOD: a table line and a CSV line
    local st r tr share
    st=$(printf '%s' "${rnd[$1]}" | stats 3)
    r=$(field 1 "$st") tr=$(printf '%s' "${trn[$1]}" | median)
    share=$(awk -v r="$r" -v t="$tr" 'BEGIN { printf "%.1f", (r > 0 ? 100 * (r - t) / r : 0) }')
    echo "$1,$2,$3,$4,$5,${mem0[$1]},${memc[$1]},$r,$(field 2 "$st"),$(field 3 "$st"),$tr,$share,${disk[$1]}" >>"$csv"
    printf "%-9s %5s %8s %9s %-9s %10s %12s %-22s %9.3f %9s %10s\n" "$1" "$2" "$3" "$4" "$5" "${mem0[$1]}" "${memc[$1]}" \
        "$(stats_text "$st")" "$tr" "$share" "${disk[$1]}"
}
printf "%-9s %5s %8s %9s %-9s %10s %12s %-22s %9s %9s %10s\n" config ranks clients per_round method rank0_MiB client_MiB \
    round_s train_s non-train% disk_MiB
row per10 3 10000 10 fedavg
row per100 3 10000 100 fedavg
row per1000 3 10000 1000 fedavg
row k100 3 100 100 fedavg
row avg-np1 1 10000 100 fedavg
row avg-np2 2 10000 100 fedavg
row per100 3 10000 100 fedavg
row avg-np8 8 10000 100 fedavg
for np in 1 2 3 8; do row "scaf-np$np" "$np" "$scaffold_clients" 100 scaffold; done
awk -v a="${mem0[per1000]}" -v b="${mem0[per10]}" 'BEGIN { printf "rank 0 at 1000 per round / at 10: %.2fx (target <= 1.2x)\n", a / b }'
echo "wrote $csv"
