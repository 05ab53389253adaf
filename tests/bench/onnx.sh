#!/usr/bin/env bash
# ONNX benchmark (`make bench-onnx`): every torchvision model of docs/onnx.md exported by torch.onnx.export and
# trained by `fedhet bench --model FILE.onnx`, side by side with PyTorch's training step on the same model and input
# (tests/bench/onnx_bench.py), batch 32, one thread each; then the zoo's resnet18 against the same network exported
# from its PyTorch twin and imported (the imported model should run within 5 % of the zoo's), in alternating pairs.
# Writes $BENCH_OUT/onnx.csv (model,input,batch,fedhet_samples_per_s,fedhet_gflops,torch_samples_per_s,
# torch_gflops,ratio) and $BENCH_OUT/onnx-zoo.csv (pair,zoo_samples_per_s,imported_samples_per_s,ratio).
# Knobs (environment):
#   BENCH_ONNX_MODELS  models (default all ten: resnet18 resnet50 mobilenet_v2 mobilenet_v3_small vgg11_bn
#                      squeezenet1_1 densenet121 efficientnet_b0 regnet_y_400mf resnet18_gn); "none": no table
#   BENCH_INPUT        CxHxW (default 3x32x32)     BENCH_BATCH (default 32)
#   BENCH_REPS         repetitions of each point (default 5)     BENCH_PAIRS  zoo/imported pairs (default 3; 0: none)
#   BENCH_JOBS         N > 1: the models split over N processes at once, process i pinned to core i (taskset),
#                      for a machine with N idle cores; the zoo pairs run afterwards on core 0
#   BENCH_CPU          pin this process to that core (taskset -c)
#   BENCH_OUT          output folder (default outputs/bench)    FEDHET (default bin/fedhet)
set -euo pipefail
cd "$(dirname "$0")/../.."
models=${BENCH_ONNX_MODELS:-"resnet18 resnet50 mobilenet_v2 mobilenet_v3_small vgg11_bn squeezenet1_1 densenet121 efficientnet_b0 regnet_y_400mf resnet18_gn"}
[ "$models" = none ] && models=""
input=${BENCH_INPUT:-3x32x32}
batch=${BENCH_BATCH:-32}
reps=${BENCH_REPS:-5}
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
field() { cut -d, -f"$1" <<<"$2"; }
header="model,input,batch,fedhet_samples_per_s,fedhet_gflops,torch_samples_per_s,torch_gflops,ratio"

[ -z "${BENCH_CPU:-}" ] && echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), input $input, batch $batch, 1 thread"

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

[ -n "$models" ] && printf '%-20s | %11s %8s | %11s %8s | %6s\n' model "fedhet s/s" GFLOP/s "torch s/s" GFLOP/s ratio
for m in $models; do
    f=$out/onnx-models/$m-$input.onnx
    "${pin[@]}" "$py" $helper export "$m" "$f" --input "$input" >"$f.log" 2>&1 ||
        { echo "onnx.sh: $m: export failed: $(tail -1 "$f.log")" >&2; exit 1; }
    fh=$("${pin[@]}" "$fedhet" bench --model "$f" --batch "$batch" --threads 1 --reps "$reps")
    th=$("${pin[@]}" "$py" $helper torch "$m" --input "$input" --batch "$batch" --reps "$reps")
    ratio=$(awk -v a="$(field 5 "$fh")" -v b="$(field 1 "$th")" 'BEGIN { printf "%.2f", a / b }')
    printf '%-20s | %11s %8s | %11s %8s | %6s\n' "$m" "$(field 5 "$fh")" "$(field 6 "$fh")" "$(field 1 "$th")" \
        "$(field 2 "$th")" "$ratio"
    echo "$m,$input,$batch,$(field 5 "$fh"),$(field 6 "$fh"),$th,$ratio" >>"$out/onnx.csv"
done

# the zoo's resnet18 and its PyTorch twin exported and imported: the same layers, so the same speed; the pairs
# alternate so that a drifting machine slows both alike
echo "pair,zoo_samples_per_s,imported_samples_per_s,ratio" >"$out/onnx-zoo.csv"
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
