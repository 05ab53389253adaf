#!/usr/bin/env bash
# Method-hook benchmark (issue "baselines", Speed and memory): per-step overhead of the hooks of FedProx
# (proximal gradient term), SCAFFOLD (control-variate correction, c_k update), FedDyn (dynamic term, H_k
# update) and FedCM (direction mixing) over plain FedAvg. Each method runs `fedhet run` on the real
# Fashion-MNIST demo (inputs/demo-fedavg.ini: cnn, 10 Dirichlet(0.1) clients, batch 64) with one client rank
# (-np 2), a fixed train.steps, no evaluation and no checkpoints; the time per local step is each client's
# training time over its steps (clients.csv seconds / steps), rounds 2.. only (round 1 is warm-up), median over
# clients, rounds and repeats. Methods are run interleaved (fedavg, fedprox, ..., fedavg, fedprox, ...) so that
# load from other processes spreads over all of them. Target: overhead below 5 % (element-wise O(P) work per
# step next to a cnn forward and backward).
# Knobs: BENCH_STEPS (default 50), BENCH_ROUNDS (3), BENCH_CLIENTS (clients per round, 5), BENCH_REPEAT (2),
#        BENCH_METHODS ("fedavg fedprox scaffold feddyn fedcm"), BENCH_OUT (outputs/bench), FEDHET (bin/fedhet).
# Output: outputs/bench/methods.csv (method, s_per_step, overhead_pct, samples) and the same as a table.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
fedhet=${FEDHET:-bin/fedhet}
steps=${BENCH_STEPS:-50}
rounds=${BENCH_ROUNDS:-3}
clients=${BENCH_CLIENTS:-5}
repeat=${BENCH_REPEAT:-2}
methods=${BENCH_METHODS:-fedavg fedprox scaffold feddyn fedcm}
out=${BENCH_OUT:-outputs/bench}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case " $methods " in *" fedavg "*) ;; *) methods="fedavg $methods" ;; esac

# per_step CLIENTS.CSV: seconds/steps of every client row of rounds >= 1 (0-based round column)
per_step()
{
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
             $col["round"] >= 1 && $col["steps"] > 0 { printf "%.9g\n", $col["seconds"] / $col["steps"] }' "$1"
}

for r in $(seq 1 "$repeat"); do
    for m in $methods; do
        mpirun --oversubscribe -np 2 "$fedhet" run inputs/demo-fedavg.ini --force algo.method="$m" fl.rounds="$rounds" \
            train.steps="$steps" fl.selection=count fl.count="$clients" fl.eval_every=0 fl.checkpoint_every=0 \
            output.dir="$tmp" output.name="$m-$r" output.log_level=warn >"$tmp/$m-$r.log" 2>&1 ||
            { echo "fedhet run failed for $m:"; tail -5 "$tmp/$m-$r.log"; exit 1; }
        per_step "$tmp/$m-$r/clients.csv" >>"$tmp/$m.steps"
    done
done

median() { sort -g "$1" | awk '{ v[n++] = $1 } END { print (n % 2) ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2 }'; }
csv=$out/methods.csv
echo "method,s_per_step,overhead_pct,samples" >"$csv"
base=$(median "$tmp/fedavg.steps")
printf "%-10s %12s %12s %8s\n" method s/step overhead_% samples
for m in $methods; do
    t=$(median "$tmp/$m.steps")
    n=$(wc -l <"$tmp/$m.steps")
    o=$(awk -v t="$t" -v b="$base" 'BEGIN { printf "%.2f", 100 * (t / b - 1) }')
    echo "$m,$t,$o,$n" >>"$csv"
    printf "%-10s %12.6f %12s %8d\n" "$m" "$t" "$o" "$n"
done
echo "cnn on Fashion-MNIST, batch 64, $steps steps x $clients clients x rounds 2..$rounds x $repeat repeats per method," \
     "1 client rank; target: overhead < 5 %"
echo "wrote $csv"
