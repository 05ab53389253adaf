#!/usr/bin/env bash
# Method-hook benchmark (issue "baselines", Speed and memory): per-step overhead of the hooks of FedProx
# (proximal gradient term), SCAFFOLD (control-variate correction, c_k update), FedDyn (dynamic term, H_k
# update) and FedCM (direction mixing) over plain FedAvg. Each method runs `fedhet run` on the real
# Fashion-MNIST demo (inputs/demo-fedavg.ini: cnn, 10 Dirichlet(0.1) clients, batch 64) with one client rank
# (-np 2), a fixed train.steps, no evaluation and no checkpoints; the time per local step is each client's
# training time over its steps (clients.csv seconds / steps), rounds 2.. only (round 1 is warm-up), median over
# clients, rounds and repeats, and beside it the minimum, the least disturbed sample (on a loaded machine other
# processes inflate the spread far beyond the hooks' cost). Methods run interleaved (fedavg, fedprox, ...,
# fedavg, fedprox, ...) so that outside load spreads over all of them. Target: overhead below 5 % (element-wise
# O(P) work per step next to a cnn forward and backward). Then, in one process (tests/bench/method_hooks.c,
# compiled here against build/libfedhet.a), the hooks alone against one cnn step: outputs/bench/method_hooks.csv.
# Knobs: BENCH_STEPS (default 50), BENCH_ROUNDS (3), BENCH_CLIENTS (clients per round, 5), BENCH_REPEAT (2),
#        BENCH_METHODS ("fedavg fedprox scaffold feddyn fedcm"), BENCH_HOOK_REPS (40), BENCH_OUT (outputs/bench),
#        FEDHET (bin/fedhet), CC (mpicc).
# Output: outputs/bench/methods.csv (method, s_per_step, overhead_pct over fedavg's median, s_per_step_min,
# overhead_min_pct, samples) and the same as a table.
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
minimum() { sort -g "$1" | head -1; }
pct() { awk -v t="$1" -v b="$2" 'BEGIN { printf "%.2f", 100 * (t / b - 1) }'; }
csv=$out/methods.csv
echo "method,s_per_step,overhead_pct,s_per_step_min,overhead_min_pct,samples" >"$csv"
base=$(median "$tmp/fedavg.steps")
base_min=$(minimum "$tmp/fedavg.steps")
printf "%-10s %12s %12s %12s %12s %8s\n" method s/step overhead_% min_s/step min_overh_% samples
for m in $methods; do
    t=$(median "$tmp/$m.steps")
    tm=$(minimum "$tmp/$m.steps")
    n=$(wc -l <"$tmp/$m.steps")
    o=$(pct "$t" "$base")
    om=$(pct "$tm" "$base_min")
    echo "$m,$t,$o,$tm,$om,$n" >>"$csv"
    printf "%-10s %12.6f %12s %12.6f %12s %8d\n" "$m" "$t" "$o" "$tm" "$om" "$n"
done
echo "cnn on Fashion-MNIST, batch 64, $steps steps x $clients clients x rounds 2..$rounds x $repeat repeats per method," \
     "1 client rank; target: overhead < 5 %"
echo "wrote $csv"

# In one process: the hooks' time per step next to one cnn step (both minima of interleaved samples), which
# outside load disturbs far less than the end-to-end wall times above.
cc=${CC:-mpicc}
"$cc" -std=c11 -D_POSIX_C_SOURCE=200809L -O3 -march=native -fopenmp-simd -Iinclude \
    $(pkg-config --cflags hdf5-openmpi openblas) tests/bench/method_hooks.c build/libfedhet.a \
    $(pkg-config --libs hdf5-openmpi openblas) -linih -lz -lm -o "$tmp/method_hooks"
hooks=$out/method_hooks.csv
"$tmp/method_hooks" "$steps" "${BENCH_HOOK_REPS:-40}" >"$hooks" 2>"$tmp/hooks.err"
printf "\n%-10s %12s %12s %12s %12s\n" method hook_ms hook_ms_med step_ms overhead_%
tail -n +2 "$hooks" | awk -F, '{ printf "%-10s %12.4f %12.4f %12.3f %12.2f\n", $1, $2, $3, $4, $5 }'
cat "$tmp/hooks.err"
echo "hooks per step (gradient term + correction + end-of-round hook / $steps) over one cnn step, one process;" \
     "target < 5 %"
echo "wrote $hooks"
