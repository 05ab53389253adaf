#!/usr/bin/env bash
# Round benchmark (issue "Federated runtime"): time per round split into phases for the cnn on
# Fashion-MNIST, 10 clients (Dirichlet 0.1), FedAvg, 1 local epoch, batch 64, with 1, 2 and 3 ranks
# (-np 1: one process trains every client; -np 2: one client rank; -np 3: two client ranks), and the
# same round as a plain PyTorch loop (tests/bench/torch_round.py, in PyTorch's fastest configuration) when
# python3-torch is installed. The runs alternate BENCH_ALTERNATIONS times (fedhet -np 1, 2, 3, PyTorch), so
# that a machine whose speed drifts slows all alike; the table gives medians over the alternations and their
# [min-max] ranges. Within a run, each phase is the median over rounds 2..R (round 1 is warm-up): broadcast,
# local training (slowest rank), gather, aggregation, evaluation. Targets: broadcast + gather + aggregation
# < 5 % of the round; 2 client ranks >= 1.9x faster than 1; fedhet >= 1.5x faster than PyTorch.
# Knobs: BENCH_ROUNDS (default 3), BENCH_ALTERNATIONS (default 3), BENCH_CORETYPE (tests/bench/common.sh),
# BENCH_OUT (default outputs/bench), FEDHET (default bin/fedhet).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/common.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
fedhet=${FEDHET:-bin/fedhet}
rounds=${BENCH_ROUNDS:-3}
alternations=${BENCH_ALTERNATIONS:-3}
out=${BENCH_OUT:-outputs/bench}
data=inputs/data/fmnist-dir0.1-k10.h5
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bench_coretype "$fedhet" --version
echo "$(cpu_line); $alternations alternations, medians [min-max]"
have_torch=0
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then have_torch=1; else
    echo "(python3-torch not installed: 'make deps-bench' adds the PyTorch round)"
fi
[ "$rounds" -ge 2 ] || { echo "round.sh: BENCH_ROUNDS must be at least 2 (round 1 is warm-up)" >&2; exit 1; }
phases="t_round t_broadcast t_train t_gather t_aggregate t_eval"
declare -A runs  # "np phase" -> the run medians, one per line
sizes="" torch_rounds=() cfg=""
for ((a = 1; a <= alternations; a++)); do
    for np in 1 2 3; do
        mpirun --oversubscribe -np "$np" "$fedhet" run inputs/demo-fedavg.ini --force fl.rounds="$rounds" \
            fl.checkpoint_every=0 output.dir="$tmp" output.name="np$np" output.log_level=warn >/dev/null
        for p in $phases; do runs[$np $p]+="$(median_col "$tmp/np$np/metrics.csv" "$p")"$'\n'; done
    done
    if [ "$have_torch" = 1 ]; then
        [ -n "$sizes" ] || sizes=$(h5dump -d /clients/offsets -y -w 0 "$data" | awk '/^ *DATA {/ { getline; gsub(/[ ,]+/, " "); print }' |
            awk '{ for (i = 2; i <= NF; i++) printf "%s%d", (i > 2 ? "," : ""), $i - $(i - 1) }')
        # the first alternation searches PyTorch's configurations; the others run the winner
        tl=$(OMP_NUM_THREADS=1 /usr/bin/python3 tests/bench/torch_round.py --sizes "$sizes" --threads 1 \
            --rounds "$((rounds - 1))" ${cfg:+--config "$cfg"})
        torch_rounds+=("$(field 2 "$tl")") cfg=$(field 3 "$tl")
    fi
    echo "alternation $a/$alternations: fedhet -np 1 $(median_col "$tmp/np1/metrics.csv" t_round) s${torch_rounds[*]:+, PyTorch ${torch_rounds[-1]} s}"
done
csv=$out/round.csv
echo "ranks,client_ranks,t_round,t_round_min,t_round_max,t_broadcast,t_train,t_gather,t_aggregate,t_eval,comm_share" >"$csv"
printf "%-6s %-12s %-26s %9s %9s %9s %9s %9s %8s\n" ranks client_ranks round_s bcast_s train_s gather_s aggr_s eval_s comm_%
declare -A round_of
for np in 1 2 3; do
    st=$(printf '%s' "${runs[$np t_round]}" | stats 3)
    r=$(field 1 "$st") lo=$(field 2 "$st") hi=$(field 3 "$st")
    b=$(printf '%s' "${runs[$np t_broadcast]}" | median); t=$(printf '%s' "${runs[$np t_train]}" | median)
    g=$(printf '%s' "${runs[$np t_gather]}" | median); ag=$(printf '%s' "${runs[$np t_aggregate]}" | median)
    e=$(printf '%s' "${runs[$np t_eval]}" | median)
    share=$(awk -v b="$b" -v g="$g" -v a="$ag" -v r="$r" 'BEGIN { printf "%.2f", 100 * (b + g + a) / r }')
    cr=$((np > 1 ? np - 1 : 1))
    round_of[$np]=$r
    echo "$np,$cr,$r,$lo,$hi,$b,$t,$g,$ag,$e,$share" >>"$csv"
    printf "%-6s %-12s %-26s %9.4f %9.3f %9.4f %9.4f %9.3f %8s\n" "$np" "$cr" "$(stats_text "$st")" "$b" "$t" "$g" "$ag" "$e" "$share"
done
awk -v one="${round_of[2]}" -v two="${round_of[3]}" 'BEGIN { printf "speed-up of 2 client ranks over 1: %.2fx (target >= 1.9x)\n", one / two }'
if [ "$have_torch" = 1 ]; then
    st=$(printf '%s\n' "${torch_rounds[@]}" | stats 3)
    tr=$(field 1 "$st") lo=$(field 2 "$st") hi=$(field 3 "$st")
    echo "pytorch,1,$tr,$lo,$hi,,,,,," >>"$csv"
    awk -v f="${round_of[1]}" -v t="$tr" -v lo="$lo" -v hi="$hi" -v c="$cfg" 'BEGIN { printf "PyTorch round (1 thread, clients in turn, %s): %.3f s [%s-%s]; fedhet -np 1: %.3f s -> %.2fx (target >= 1.5x)\n", c, t, lo, hi, f, t / f }'
fi
echo "wrote $csv"
