#!/usr/bin/env bash
# Engine benchmark (`make bench`): for every model at batch 32, 64, 256 with 1 and 2 threads, training
# samples/s (forward + backward + SGD step) on the default backend (onednn) and on blas, the SAM step time
# over the SGD step time, achieved GFLOP/s (3 x forward FLOPs per sample) and its fraction of the OpenBLAS
# sgemm peak of this machine at the same thread count, measured in the same run.
# When Debian's python3-torch is installed (`make deps-bench`), PyTorch runs the same architectures
# beside ours (tests/bench/torch_bench.py) and the table shows the ratio.
# Writes outputs/bench/engine.csv and outputs/bench/sgemm.csv. Knobs (environment): BENCH_MODELS, BENCH_BATCHES, BENCH_THREADS,
# BENCH_REPS (default 5), BENCH_SECONDS (per rep, default 0.5), BENCH_OUT (default outputs/bench),
# FEDHET (the binary, default bin/fedhet: point it at a copy to keep building while a long run goes on).
set -euo pipefail
cd "$(dirname "$0")/../.."
models=${BENCH_MODELS:-"mlp cnn lenet smallcnn resnet8 resnet18 resnet18_gn mobilenetv2"}
batches=${BENCH_BATCHES:-"32 64 256"}
threads_list=${BENCH_THREADS:-"1 2"}
reps=${BENCH_REPS:-5}
seconds=${BENCH_SECONDS:-0.5}
out=${BENCH_OUT:-outputs/bench}
fedhet=${FEDHET:-bin/fedhet}
mkdir -p "$out"
csv=$out/engine.csv
torch_py=/usr/bin/python3
have_torch=0
if "$torch_py" -c 'import torch' 2>/dev/null; then have_torch=1; else
    echo "(python3-torch not installed: PyTorch columns left empty; 'make deps-bench' installs it)"
fi
# OpenBLAS sizes its thread pool at load time: give it exactly the threads asked for
point() { OPENBLAS_NUM_THREADS=$3 "$fedhet" bench --model "$1" --batch "$2" --threads "$3" --mode "$4" --reps "$reps" --seconds "$seconds" ${5:+--backend "$5"}; }
tpoint() { OMP_NUM_THREADS=$3 "$torch_py" tests/bench/torch_bench.py --model "$1" --batch "$2" --threads "$3" --mode "$4" --reps "$reps"; }
field() { cut -d, -f"$1" <<<"$2"; }

echo "threads,sgemm_gflops" >"$out/sgemm.csv"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
declare -A peak_of
for t in $threads_list; do
    peak=$(OPENBLAS_NUM_THREADS=$t "$fedhet" bench --sgemm 1024 --threads "$t")
    peak_of[$t]=$(field 4 "$peak")
    echo "OpenBLAS sgemm 1024^3, $t thread(s): ${peak_of[$t]} GFLOP/s"
    echo "$t,${peak_of[$t]}" >>"$out/sgemm.csv"
done
echo "model,batch,threads,samples_per_s,gflops,peak_fraction,sam_samples_per_s,sam_over_sgd,blas_samples_per_s,torch_samples_per_s,torch_sam_samples_per_s,ratio_vs_torch" >"$csv"
printf '%-12s %5s %3s | %11s %7s %5s %8s | %11s | %11s %8s | %6s\n' model batch thr "samples/s" GFLOP/s peak "SAM/SGD" "blas s/s" "torch s/s" "torch SAM" "ratio"
for m in $models; do
    for b in $batches; do
        for t in $threads_list; do
            # the SGD and SAM steps in turns within every rep (--mode both): their ratio survives a drifting machine
            both=$(point "$m" "$b" "$t" both)
            sgd=$(sed -n 1p <<<"$both")
            sam=$(sed -n 2p <<<"$both")
            blas=$(field 5 "$(point "$m" "$b" "$t" sgd blas)")
            rate=$(field 5 "$sgd"); gf=$(field 6 "$sgd"); sam_rate=$(field 5 "$sam")
            sam_ratio=$(awk -v a="$rate" -v b="$sam_rate" 'BEGIN { printf "%.2f", a / b }')
            frac=$(awk -v a="$gf" -v b="${peak_of[$t]}" 'BEGIN { printf "%.2f", a / b }')
            trate="" tsam="" ratio=""
            if [ "$have_torch" = 1 ]; then
                trate=$(field 5 "$(tpoint "$m" "$b" "$t" sgd)")
                tsam=$(field 5 "$(tpoint "$m" "$b" "$t" sam)")
                ratio=$(awk -v a="$rate" -v b="$trate" 'BEGIN { printf "%.2f", a / b }')
            fi
            printf '%-12s %5s %3s | %11s %7s %5s %8s | %11s | %11s %8s | %6s\n' "$m" "$b" "$t" "$rate" "$gf" "$frac" "$sam_ratio" "$blas" "$trate" "$tsam" "$ratio"
            echo "$m,$b,$t,$rate,$gf,$frac,$sam_rate,$sam_ratio,$blas,$trate,$tsam,$ratio" >>"$csv"
        done
    done
done
echo "wrote $csv and $out/sgemm.csv"
