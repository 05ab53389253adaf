#!/usr/bin/env bash
# ONNX acceptance: every torchvision 0.14 model of docs/onnx.md (and FL-Simulator's ResNet-18 with GroupNorm),
# exported by torch.onnx.export for Fashion-MNIST, trains in a 3-rank `fedhet run` with FedSAM and with FedWMSAM.
#
# 1-channel export: the model's first conv is rebuilt with one input channel (its kernel, stride, pads, groups and
# bias kept: tests/mpi/onnx_torch.py make_model), and the model is exported for 1 x 28 x 28 inputs, so the data
# is Fashion-MNIST as fedhet reads it (no repeated channel). Five halvings of 28 leave no map: vgg11_bn loses its
# fifth max pool (and, as in the tests, its adaptive pool: a 512-input classifier), densenet121 its stem max pool.
#
# The transformers (vit_small, convnext_tiny, mixer: tests/mpi/onnx_torch.py) are exported the same way.
#
# The data: the first ACC_TRAIN training and ACC_TEST test images of Fashion-MNIST
# (/usr/share/datasets/fashion-mnist), at 28 x 28, or resized to ACC_SIZE x ACC_SIZE (through an npz of those
# images, `fedhet partition ... size=ACC_SIZE resize=exact`), partitioned over ACC_CLIENTS clients (IID, or
# Dirichlet 0.5 with ACC_SCHEME=dirichlet); every client trains ACC_STEPS local steps of batch 32 per round, for
# ACC_ROUNDS rounds. The table shows the training loss of the first and the last round beside the final test
# accuracy. These ImageNet networks start from torchvision's initialisation: with fewer steps per round (4
# Dirichlet clients of 20 steps) most of them stay at chance for several rounds, in PyTorch as in fedhet; models
# whose batch norms have PyTorch's momentum 0.01 (the MobileNetV3s) evaluate with running statistics still near
# their start; squeezenet1_1's ReLUs die at lr 0.05 (in PyTorch too: docs/onnx.md).
#
# usage: tools/onnx-acceptance.sh [MODEL ...]     (default: all ten)
# Environment: ACC_OUT (default outputs/onnx-acceptance), ACC_METHODS (default "fedsam fedwmsam"), ACC_ROUNDS (3),
#   ACC_STEPS (60), ACC_LR (0.05), ACC_MOMENTUM (0: plain SGD), ACC_CLIENTS (2), ACC_SCHEME (iid, or dirichlet:
#   Dir(0.5)), ACC_TRAIN (2000), ACC_TEST (500), ACC_SIZE (28), ACC_RANKS (3), FEDHET (default bin/fedhet).
# Prints one line per model and method (rounds done, final test accuracy, seconds) and writes
# $ACC_OUT/acceptance.csv; exits 1 when a run fails or does not finish its rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
models=${*:-"resnet18 resnet50 mobilenet_v2 mobilenet_v3_small vgg11_bn squeezenet1_1 densenet121 efficientnet_b0 regnet_y_400mf resnet18_gn"}
out=${ACC_OUT:-outputs/onnx-acceptance}
methods=${ACC_METHODS:-"fedsam fedwmsam"}
rounds=${ACC_ROUNDS:-3}
steps=${ACC_STEPS:-60}
lr=${ACC_LR:-0.05}
momentum=${ACC_MOMENTUM:-0}
clients=${ACC_CLIENTS:-2}
scheme=${ACC_SCHEME:-iid}
ntrain=${ACC_TRAIN:-2000}
ntest=${ACC_TEST:-500}
size=${ACC_SIZE:-28}
ranks=${ACC_RANKS:-3}
fedhet=${FEDHET:-bin/fedhet}
py=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out/idx" "$out/models" "$out/runs"
data=$out/fmnist-$ntrain-$ntest-$size-k$clients-$scheme.h5
split=(scheme="$scheme" clients="$clients") # the Dirichlet keys only where the scheme reads them
[ "$scheme" = dirichlet ] && split+=(alpha=0.5 min_size=10)

if [ ! -f "$data" ] && [ "$size" != 28 ]; then # resized: through an npz of the same images
    "$py" - /usr/share/datasets/fashion-mnist "$out/fmnist.npz" "$ntrain" "$ntest" <<'EOF'
import gzip, sys
import numpy as np
src, dst, ntrain, ntest = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def load(split, n):
    with gzip.open("%s/%s-images-idx3-ubyte.gz" % (src, split)) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)[:n]
    with gzip.open("%s/%s-labels-idx1-ubyte.gz" % (src, split)) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:n].astype(np.int64)
    return x, y
(xt, yt), (xe, ye) = load("train", ntrain), load("t10k", ntest)
np.savez(dst, x_train=xt, y_train=yt, x_test=xe, y_test=ye)
EOF
    "$fedhet" partition "$out/fmnist.npz" "$data" "${split[@]}" size="$size" resize=exact >"$out/partition.log" ||
        { echo "onnx-acceptance: fedhet partition failed: $(tail -2 "$out/partition.log")" >&2; exit 1; }
fi
if [ ! -f "$data" ]; then
    "$py" - /usr/share/datasets/fashion-mnist "$out/idx" "$ntrain" "$ntest" <<'EOF'
import gzip, os, sys
src, dst, ntrain, ntest = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for split, n in (("train", ntrain), ("t10k", ntest)):
    for kind, hdr, row in (("images-idx3", 16, 784), ("labels-idx1", 8, 1)):
        with gzip.open(os.path.join(src, "%s-%s-ubyte.gz" % (split, kind)), "rb") as f:
            head, body = f.read(hdr), f.read(n * row)
        head = head[:4] + n.to_bytes(4, "big") + head[8:]  # the IDX header's count: the first n rows
        with open(os.path.join(dst, "%s-%s-ubyte" % (split, kind)), "wb") as f:
            f.write(head + body)
EOF
    "$fedhet" partition "$out/idx" "$data" format=idx "${split[@]}" >"$out/partition.log" || { echo "onnx-acceptance: fedhet partition failed: $(tail -2 "$out/partition.log")" >&2; exit 1; }
fi

csv=$out/acceptance.csv
echo "model,method,rounds_done,rounds,first_train_loss,last_train_loss,final_test_accuracy,seconds" >"$csv"
printf '%-20s %-9s %9s %17s %9s %8s\n' model method rounds "train loss" accuracy seconds
failed=0
for m in $models; do
    f=$out/models/$m-1x${size}x$size.onnx
    if ! "$py" tests/bench/onnx_bench.py export "$m" "$f" --input "1x${size}x$size" >"$f.log" 2>&1; then
        echo "onnx-acceptance: $m: export failed: $(tail -1 "$f.log")" >&2
        failed=1
        continue
    fi
    for meth in $methods; do
        name=$m-$meth
        cat >"$out/runs/$name.ini" <<EOF
[data]
path = $data
eval_batch = 250
[model]
onnx = $f
[train]
lr = $lr
momentum = $momentum
batch_size = 32
steps = $steps
[fl]
rounds = $rounds
selection = all
eval_every = 1
checkpoint_every = 0
[algo]
method = $meth
[output]
dir = $out/runs
name = $name
EOF
        t0=$(date +%s.%N)
        rc=0
        mpirun --oversubscribe -np "$ranks" "$fedhet" run "$out/runs/$name.ini" --force >"$out/runs/$name.log" 2>&1 || rc=$?
        secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        met=$out/runs/$name/metrics.csv
        done_rounds=0 acc="" l0="-" l1="-"
        if [ -f "$met" ]; then
            read -r done_rounds acc l0 l1 < <(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
                { n++; if ($col["test_accuracy"] != "" && $col["test_accuracy"] != "nan") a = $col["test_accuracy"]
                  if (n == 1) first = $col["train_loss"]; last = $col["train_loss"] }
                END { printf "%d %s %.4f %.4f\n", n, (a == "" ? "-" : a), first, last }' "$met")
        fi
        printf '%-20s %-9s %3s / %-3s %8s -> %-6s %9s %8s%s\n' "$m" "$meth" "$done_rounds" "$rounds" "$l0" "$l1" "${acc:--}" "$secs" \
            "$([ "$rc" = 0 ] && [ "$done_rounds" = "$rounds" ] || echo "  FAILED (exit $rc): $(tail -1 "$out/runs/$name.log")")"
        echo "$m,$meth,$done_rounds,$rounds,$l0,$l1,${acc:--},$secs" >>"$csv"
        [ "$rc" = 0 ] && [ "$done_rounds" = "$rounds" ] || failed=1
    done
done
echo "wrote $csv"
exit $failed
