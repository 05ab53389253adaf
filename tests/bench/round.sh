#!/usr/bin/env bash
# Round benchmark (issue "Federated runtime"): time per round split into phases for the cnn on
# Fashion-MNIST, 10 clients (Dirichlet 0.1), FedAvg, 1 local epoch, batch 64, with 1, 2 and 3 ranks
# (-np 1: one process trains every client; -np 2: one client rank; -np 3: two client ranks), and the
# same round as a plain PyTorch loop (tests/bench/torch_round.py) when python3-torch is installed.
# Phases come from metrics.csv (median over rounds 2..R; round 1 is warm-up): broadcast, local training
# (slowest rank), gather, aggregation, evaluation. Targets: broadcast + gather + aggregation < 5 % of the
# round; 2 client ranks >= 1.8x faster than 1; fedhet >= 1.5x faster than PyTorch.
# Knobs: BENCH_ROUNDS (default 3), BENCH_OUT (default outputs/bench), FEDHET (default bin/fedhet).
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
fedhet=${FEDHET:-bin/fedhet}
rounds=${BENCH_ROUNDS:-3}
out=${BENCH_OUT:-outputs/bench}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
csv=$out/round.csv
echo "ranks,client_ranks,t_round,t_broadcast,t_train,t_gather,t_aggregate,t_eval,comm_share" >"$csv"
median_col() { # file column-name -> median over rows 2.. (round 1 is warm-up)
    local c
    c=$(head -1 "$1" | tr ',' '\n' | grep -nx "$2" | cut -d: -f1)
    tail -n +3 "$1" | cut -d, -f"$c" | sort -g | awk '{ v[n++] = $1 } END { print (n % 2) ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2 }'
}
printf "%-6s %-12s %9s %9s %9s %9s %9s %9s %8s\n" ranks client_ranks round_s bcast_s train_s gather_s aggr_s eval_s comm_%
declare -A round_of
for np in 1 2 3; do
    mpirun --oversubscribe -np "$np" "$fedhet" run inputs/demo-fedavg.ini --force fl.rounds="$rounds" \
        fl.checkpoint_every=0 output.dir="$tmp" output.name="np$np" output.log_level=warn >/dev/null
    m=$tmp/np$np/metrics.csv
    r=$(median_col "$m" t_round); b=$(median_col "$m" t_broadcast); t=$(median_col "$m" t_train)
    g=$(median_col "$m" t_gather); a=$(median_col "$m" t_aggregate); e=$(median_col "$m" t_eval)
    share=$(awk -v b="$b" -v g="$g" -v a="$a" -v r="$r" 'BEGIN { printf "%.2f", 100 * (b + g + a) / r }')
    cr=$((np > 1 ? np - 1 : 1))
    round_of[$np]=$r
    echo "$np,$cr,$r,$b,$t,$g,$a,$e,$share" >>"$csv"
    printf "%-6s %-12s %9.3f %9.4f %9.3f %9.4f %9.4f %9.3f %8s\n" "$np" "$cr" "$r" "$b" "$t" "$g" "$a" "$e" "$share"
done
awk -v one="${round_of[2]}" -v two="${round_of[3]}" 'BEGIN { printf "speed-up of 2 client ranks over 1: %.2fx (target >= 1.8x)\n", one / two }'
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    sizes=$(h5dump -d /clients/offsets -y -w 0 inputs/data/fmnist-dir0.1-k10.h5 | awk '/^ *DATA {/ { getline; gsub(/[ ,]+/, " "); print }' |
        awk '{ for (i = 2; i <= NF; i++) printf "%s%d", (i > 2 ? "," : ""), $i - $(i - 1) }')
    tr=$(OMP_NUM_THREADS=1 /usr/bin/python3 tests/bench/torch_round.py --sizes "$sizes" --threads 1 | cut -d, -f2)
    echo "pytorch,1,$tr,,,,,," >>"$csv"
    awk -v f="${round_of[1]}" -v t="$tr" 'BEGIN { printf "PyTorch round (1 thread, clients in turn): %.3f s; fedhet -np 1: %.3f s -> %.2fx (target >= 1.5x)\n", t, f, t / f }'
else
    echo "(python3-torch not installed: 'make deps-bench' adds the PyTorch round)"
fi
echo "wrote $csv"
