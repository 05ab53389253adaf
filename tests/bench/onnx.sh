#!/usr/bin/env bash
# ONNX benchmark (`make bench-onnx`): every torchvision model of docs/onnx.md exported by torch.onnx.export and
# trained by `fedhet bench --model FILE.onnx`, side by side with PyTorch's training step on the same model and input
# (tests/bench/onnx_bench.py, in the fastest configuration a PyTorch user can pick), one thread each; then the zoo's
# resnet18 against the same network exported from its PyTorch twin and imported (the imported model should run
# within 5 % of the zoo's), in alternating pairs. Each row alternates fedhet and PyTorch BENCH_ALTERNATIONS times
# and reports the medians, their ranges and the ratio of the medians, so that a machine whose speed drifts slows
# both sides alike.
# PyTorch's BLAS: where Debian's OpenBLAS does not know the CPU it falls back to its oldest kernels (a Xeon with
# AVX-512 reported as "Prescott", a fifth of the speed); the script then sets OPENBLAS_CORETYPE to the newest
# family the CPU supports (SkylakeX with AVX-512, Haswell with AVX2) for both sides, and says so.
# Writes $BENCH_OUT/onnx.csv (model,input,batch,fedhet_samples_per_s,fedhet_min,fedhet_max,fedhet_gflops,
# torch_samples_per_s,torch_min,torch_max,torch_gflops,torch_config,ratio) and $BENCH_OUT/onnx-zoo.csv
# (pair,zoo_samples_per_s,imported_samples_per_s,ratio).
# Knobs (environment):
#   BENCH_ONNX_MODELS  models (default all ten: resnet18 resnet50 mobilenet_v2 mobilenet_v3_small vgg11_bn
#                      squeezenet1_1 densenet121 efficientnet_b0 regnet_y_400mf resnet18_gn; the transformers:
#                      vit_small convnext_tiny mixer); "none": no table
#   BENCH_INPUT        CxHxW, or several separated by spaces (default 3x32x32)
#   BENCH_BATCH        batch size, or several separated by spaces (default 32)
#   BENCH_ALTERNATIONS fedhet/PyTorch alternations per row (default 5)
#   BENCH_REPS         repetitions inside each measurement (default 3)     BENCH_PAIRS  zoo/imported pairs (default 3)
#   BENCH_JOBS         N > 1: the models split over N processes at once, process i pinned to core i (taskset),
#                      for a machine with N idle cores; the zoo pairs run afterwards on core 0
#   BENCH_CPU          pin this process to that core (taskset -c)
#   BENCH_CORETYPE     OPENBLAS_CORETYPE for both sides ("auto", the default, as above; "" leaves OpenBLAS's choice)
#   BENCH_OUT          output folder (default outputs/bench)    FEDHET (default bin/fedhet)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/common.sh
models=${BENCH_ONNX_MODELS:-"resnet18 resnet50 mobilenet_v2 mobilenet_v3_small vgg11_bn squeezenet1_1 densenet121 efficientnet_b0 regnet_y_400mf resnet18_gn"}
[ "$models" = none ] && models=""
inputs=${BENCH_INPUT:-3x32x32}
batches=${BENCH_BATCH:-32}
alternations=${BENCH_ALTERNATIONS:-5}
reps=${BENCH_REPS:-3}
pairs=${BENCH_PAIRS:-3}
jobs=${BENCH_JOBS:-1}
out=${BENCH_OUT:-outputs/bench}
fedhet=${FEDHET:-bin/fedhet}
py=/usr/bin/python3
helper=tests/bench/onnx_bench.py
mkdir -p "$out/onnx-models"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
pin=()
[ -n "${BENCH_CPU:-}" ] && pin=(taskset -c "$BENCH_CPU")
header="model,input,batch,fedhet_samples_per_s,fedhet_min,fedhet_max,fedhet_gflops,torch_samples_per_s,torch_min,torch_max,torch_gflops,torch_config,ratio"
# the parts of BENCH_JOBS inherit OPENBLAS_CORETYPE, so only the parent says it
bench_coretype "$py" -c 'import torch'
[ -z "${BENCH_CPU:-}" ] && echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), 1 thread, $alternations alternations per row, medians [min-max]"

# several processes at once: each takes every N-th model on its own core and writes a part, merged here
if [ "$jobs" -gt 1 ] && [ -n "$models" ]; then
    read -r -a list <<<"$models"
    pids=()
    for ((i = 0; i < jobs; i++)); do
        part=""
        for ((k = i; k < ${#list[@]}; k += jobs)); do part+="${list[k]} "; done
        [ -n "$part" ] || continue
        BENCH_JOBS=1 BENCH_CPU=$i BENCH_PAIRS=0 BENCH_ONNX_MODELS="$part" BENCH_OUT="$out/part$i" "$0" \
            >"$out/part$i.log" 2>&1 & pids+=($!)
    done
    status=0
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    echo "$header" >"$out/onnx.csv"
    for ((i = 0; i < jobs; i++)); do
        [ -f "$out/part$i/onnx.csv" ] && tail -n +2 "$out/part$i/onnx.csv" >>"$out/onnx.csv"
        [ -f "$out/part$i.log" ] && grep -v '^wrote' "$out/part$i.log" || true
    done
    [ "$status" = 0 ] || { echo "onnx.sh: a part failed (see $out/part*.log)" >&2; exit 1; }
    models=""  # the table is done: on to the zoo pairs, on core 0
    pin=(taskset -c 0)
else
    echo "$header" >"$out/onnx.csv"
fi

[ -n "$models" ] && printf '%-14s %-8s %5s | %-24s %7s | %-24s %7s | %6s | %s\n' model input batch "fedhet samples/s" \
    GFLOP/s "PyTorch samples/s" GFLOP/s ratio "PyTorch's fastest configuration"
for m in $models; do
    for input in $inputs; do
        f=$out/onnx-models/$m-$input.onnx
        "${pin[@]}" "$py" $helper export "$m" "$f" --input "$input" >"$f.log" 2>&1 ||
            { echo "onnx.sh: $m: export failed: $(tail -1 "$f.log")" >&2; exit 1; }
        for batch in $batches; do
            fs=() ts=() cfg=""
            for ((a = 0; a < alternations; a++)); do
                # the first PyTorch measurement searches its configurations; the others measure the winner
                fh=$("${pin[@]}" "$fedhet" bench --model "$f" --batch "$batch" --threads 1 --reps "$reps")
                th=$("${pin[@]}" "$py" $helper torch "$m" --input "$input" --batch "$batch" --reps "$reps" \
                    ${cfg:+--config "$cfg"})
                fs+=("$(field 5 "$fh")") ts+=("$(field 1 "$th")") cfg=$(field 3 "$th")
                flops=$(awk -v g="$(field 6 "$fh")" -v s="$(field 5 "$fh")" 'BEGIN { print g / s }')
            done
            f_st=$(printf '%s\n' "${fs[@]}" | stats) t_st=$(printf '%s\n' "${ts[@]}" | stats)
            # GFLOP/s of both from fedhet's count per sample (the same network): PyTorch's module hooks miss the
            # products attention computes functionally
            fg=$(awk -v f="$flops" -v s="$(field 1 "$f_st")" 'BEGIN { printf "%.2f", f * s }')
            tg=$(awk -v f="$flops" -v s="$(field 1 "$t_st")" 'BEGIN { printf "%.2f", f * s }')
            ratio=$(awk -v a="$(field 1 "$f_st")" -v b="$(field 1 "$t_st")" 'BEGIN { printf "%.2f", a / b }')
            printf '%-14s %-8s %5s | %-24s %7s | %-24s %7s | %6s | %s\n' "$m" "$input" "$batch" \
                "$(stats_text "$f_st")" "$fg" "$(stats_text "$t_st")" "$tg" "$ratio" "$cfg"
            echo "$m,$input,$batch,$f_st,$fg,$t_st,$tg,$cfg,$ratio" >>"$out/onnx.csv"
        done
    done
done

# the zoo's resnet18 and its PyTorch twin exported and imported: the same layers, so the same speed; the pairs
# alternate so that a drifting machine slows both alike
echo "pair,zoo_samples_per_s,imported_samples_per_s,ratio" >"$out/onnx-zoo.csv"
input=${inputs%% *} batch=${batches%% *}
if [ "$pairs" -gt 0 ]; then
    f=$out/onnx-models/zoo-resnet18-$input.onnx
    "${pin[@]}" "$py" $helper export zoo:resnet18 "$f" --input "$input" >"$f.log" 2>&1 ||
        { echo "onnx.sh: zoo:resnet18: export failed: $(tail -1 "$f.log")" >&2; exit 1; }
    for ((p = 1; p <= pairs; p++)); do
        z=$(field 5 "$("${pin[@]}" "$fedhet" bench --model resnet18 --input "$input" --batch "$batch" --threads 1 --reps "$reps")")
        i=$(field 5 "$("${pin[@]}" "$fedhet" bench --model "$f" --batch "$batch" --threads 1 --reps "$reps")")
        r=$(awk -v a="$i" -v b="$z" 'BEGIN { printf "%.3f", a / b }')
        echo "resnet18 zoo / imported, pair $p: $z / $i samples/s, imported / zoo $r"
        echo "$p,$z,$i,$r" >>"$out/onnx-zoo.csv"
    done
    awk -F, 'NR > 1 { z += $2; i += $3 } END { if (z > 0) printf "resnet18 imported / zoo over all pairs: %.3f (target within 5 %%: %s)\n", i / z, (i / z >= 0.95 && i / z <= 1.05) ? "yes" : "no" }' "$out/onnx-zoo.csv"
fi
echo "wrote $out/onnx.csv and $out/onnx-zoo.csv"
