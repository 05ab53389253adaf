#!/usr/bin/env bash
# SAM-family step benchmark (issue "sharpness-aware family", Speed and memory): the time of one local step of
# each method through the runtime's client loop and its hooks, over FedAvg's SGD step of the same model and
# batch (build/bench/sam_step, tests/bench/sam_step.c: one process, the methods take turns in slices of
# BENCH_SAM_STEPS steps and each keeps its fastest slice in CPU seconds, so outside load does not bias the ratios).
# cnn on Fashion-MNIST (inputs/demo-fedavg.ini's partition, made by `make run` or on first use), client 0,
# batch 64, one thread. Targets: two-pass methods (FedSAM and the rows built on it) <= 2.1x the SGD step;
# single-backprop (FedLESAM, in code mode so that every step perturbs) <= 1.15x.
# Knobs: BENCH_SAM_METHODS (name or name:key=value, a choice by its index), BENCH_SAM_MODEL (cnn),
# BENCH_SAM_BATCH (64), BENCH_SAM_STEPS (10), BENCH_SAM_SLICES (6), BENCH_OUT (outputs/bench).
# Writes $BENCH_OUT/sam.csv (method, seconds_per_step, ratio_vs_sgd, target, ok).
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
methods=${BENCH_SAM_METHODS:-"fedavg fedsam fedsam:perturb=1 fedsam:perturb=2 mofedsam fedgamma fedspeed fedsmoo fedlwsam fedlesam fedlesam-s fedlesam-d"}
model=${BENCH_SAM_MODEL:-cnn}
batch=${BENCH_SAM_BATCH:-64}
steps=${BENCH_SAM_STEPS:-10}
slices=${BENCH_SAM_SLICES:-6}
out=${BENCH_OUT:-outputs/bench}
data=inputs/data/fmnist-dir0.1-k10.h5
mkdir -p "$out"
if [ ! -f "$data" ]; then
    bin/fedhet partition fashion-mnist "$data" scheme=dirichlet alpha=0.1 clients=10 >/dev/null
fi
raw=$(build/bench/sam_step "$data" "$model" "$batch" "$steps" "$slices" $methods)
csv=$out/sam.csv
echo "method,seconds_per_step,ratio_vs_sgd,target,ok" >"$csv"
printf "%-22s %12s %8s %8s\n" method "s/step" "x SGD" target
fails=0
while IFS=, read -r spec t ratio; do
    case $spec in
        method) continue ;;
        fedavg) target="" ;;
        fedlesam*) target=1.15 ;;
        *) target=2.1 ;;
    esac
    ok=$([ -z "$target" ] && echo "" || awk -v r="$ratio" -v g="$target" 'BEGIN { print (r <= g) ? "yes" : "no" }')
    [ "$ok" = no ] && fails=$((fails + 1))
    printf "%-22s %12s %8.3f %8s %s\n" "$spec" "$t" "$ratio" "$target" "$ok"
    echo "$spec,$t,$ratio,$target,$ok" >>"$csv"
done <<<"$raw"
echo "$model, batch $batch, 1 thread; wrote $csv ($fails above target)"
