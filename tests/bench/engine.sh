#!/usr/bin/env bash
# Engine benchmark (`make bench`): for every model at batch 32, 64, 256 with 1 and 2 threads, training
# samples/s (forward + backward + SGD step) on the default backend (onednn) and on blas, the SAM step time
# over the SGD step time, achieved GFLOP/s (3 x forward FLOPs per sample) and its fraction of the OpenBLAS
# sgemm peak of this machine at the same thread count, measured in the same run.
# When Debian's python3-torch is installed (`make deps-bench`), PyTorch runs the same architectures
# beside ours (tests/bench/torch_bench.py) in its fastest configuration (searched on the first alternation of
# each point, named in the table) and the table shows the ratio of the medians. fedhet and PyTorch alternate
# BENCH_ALTERNATIONS times per point; the table gives medians and [min-max] ranges, so that a machine whose
# speed drifts slows both sides alike.
# Writes outputs/bench/engine.csv and outputs/bench/sgemm.csv. Knobs (environment): BENCH_MODELS, BENCH_BATCHES,
# BENCH_THREADS, BENCH_ALTERNATIONS (default 5), BENCH_REPS (inside each measurement, default 3), BENCH_SECONDS
# (per rep, default 0.5), BENCH_CORETYPE (tests/bench/common.sh), BENCH_OUT (default outputs/bench),
# FEDHET (the binary, default bin/fedhet: point it at a copy to keep building while a long run goes on).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/common.sh
models=${BENCH_MODELS:-"mlp cnn lenet smallcnn resnet8 resnet18 resnet18_gn mobilenetv2"}
batches=${BENCH_BATCHES:-"32 64 256"}
threads_list=${BENCH_THREADS:-"1 2"}
alternations=${BENCH_ALTERNATIONS:-5}
reps=${BENCH_REPS:-3}
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
bench_coretype "$fedhet" --version
# OpenBLAS sizes its thread pool at load time: give it exactly the threads asked for
point() { OPENBLAS_NUM_THREADS=$3 "$fedhet" bench --model "$1" --batch "$2" --threads "$3" --mode "$4" --reps "$reps" --seconds "$seconds" ${5:+--backend "$5"}; }
# model batch threads mode [configuration]: the CSV line, the configuration measured last
tpoint() { OMP_NUM_THREADS=$3 "$torch_py" tests/bench/torch_bench.py --model "$1" --batch "$2" --threads "$3" --mode "$4" --reps "$reps" ${5:+--config "$5"} 2>/dev/null; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "threads,sgemm_gflops" >"$out/sgemm.csv"
echo "$(cpu_line); $alternations alternations per point, medians [min-max]"
declare -A peak_of
for t in $threads_list; do
    peak=$(OPENBLAS_NUM_THREADS=$t "$fedhet" bench --sgemm 1024 --threads "$t")
    peak_of[$t]=$(field 4 "$peak")
    echo "OpenBLAS sgemm 1024^3, $t thread(s): ${peak_of[$t]} GFLOP/s"
    echo "$t,${peak_of[$t]}" >>"$out/sgemm.csv"
done
echo "model,batch,threads,samples_per_s,samples_min,samples_max,gflops,peak_fraction,sam_samples_per_s,sam_over_sgd,blas_samples_per_s,torch_samples_per_s,torch_min,torch_max,torch_sam_samples_per_s,torch_config,ratio_vs_torch" >"$csv"
printf '%-12s %5s %3s | %-26s %7s %5s %8s | %11s | %-26s %9s | %6s | %s\n' model batch thr "samples/s" GFLOP/s peak "SAM/SGD" \
    "blas s/s" "torch samples/s" "torch SAM" ratio "PyTorch's fastest configuration"
for m in $models; do
    for b in $batches; do
        for t in $threads_list; do
            rates=() sam_rates=() sam_ratios=() gfs=() trates=() tsams=() cfg="" cfg_sam=""
            for ((a = 0; a < alternations; a++)); do
                # the SGD and SAM steps in turns within every rep (--mode both): their ratio survives a drifting machine
                both=$(point "$m" "$b" "$t" both)
                sgd=$(sed -n 1p <<<"$both")
                rate=$(field 5 "$sgd") sam_rate=$(field 5 "$(sed -n 2p <<<"$both")")
                rates+=("$rate") sam_rates+=("$sam_rate") gfs+=("$(field 6 "$sgd")")
                sam_ratios+=("$(awk -v a="$rate" -v b="$sam_rate" 'BEGIN { printf "%.4f", a / b }')")
                if [ "$have_torch" = 1 ]; then
                    # the first alternation searches PyTorch's configurations; the others measure the winners
                    tl=$(tpoint "$m" "$b" "$t" sgd "$cfg"); trates+=("$(field 5 "$tl")") cfg=$(field 7 "$tl")
                    tl=$(tpoint "$m" "$b" "$t" sam "$cfg_sam"); tsams+=("$(field 5 "$tl")") cfg_sam=$(field 7 "$tl")
                fi
            done
            blas=$(field 5 "$(point "$m" "$b" "$t" sgd blas)")
            st=$(printf '%s\n' "${rates[@]}" | stats)
            rate=$(field 1 "$st")
            sam_rate=$(field 1 "$(printf '%s\n' "${sam_rates[@]}" | stats)")
            sam_ratio=$(printf '%.2f' "$(printf '%s\n' "${sam_ratios[@]}" | median)")
            gf=$(printf '%s\n' "${gfs[@]}" | stats | cut -d, -f1)
            frac=$(ratio "$gf" "${peak_of[$t]}")
            tst="" tsam="" ratio_t="" ttext=""
            if [ "$have_torch" = 1 ]; then
                tst=$(printf '%s\n' "${trates[@]}" | stats)
                tsam=$(field 1 "$(printf '%s\n' "${tsams[@]}" | stats)")
                ratio_t=$(ratio "$rate" "$(field 1 "$tst")")
                ttext=$(stats_text "$tst")
            fi
            printf '%-12s %5s %3s | %-26s %7s %5s %8s | %11s | %-26s %9s | %6s | %s\n' "$m" "$b" "$t" "$(stats_text "$st")" "$gf" \
                "$frac" "$sam_ratio" "$blas" "$ttext" "$tsam" "$ratio_t" "$cfg"
            echo "$m,$b,$t,$st,$gf,$frac,$sam_rate,$sam_ratio,$blas,${tst:-,,},$tsam,$cfg,$ratio_t" >>"$csv"
        done
    done
done
echo "wrote $csv and $out/sgemm.csv"
