#!/usr/bin/env bash
# ONNX import and export end to end (docs/onnx.md):
#   nodes        ONNX's own node tests (libonnx-testdata) of every supported op: each passes within ONNX's tolerance
#                or is refused naming what is unsupported; a wrong number fails; counts per op printed
#   torchvision  torchvision 0.14 models and FL-Simulator's ResNet-18 with GroupNorm exported by torch.onnx.export:
#                fedhet's logits = PyTorch's within 1e-4 of the largest, 10 SGD steps' losses within the tolerance
#                tests/mpi/onnx_torch.py states; exported back, onnx.checker passes and the logits are bit-identical;
#                an op fedhet lacks is refused by name
#   zoo_roundtrip  the zoo's resnet18 exported (fedhet export), imported and trained: the same bits as the zoo model
#   every_method every method of `fedhet methods` and the flood plug-in: a round of the imported CNN on one rank
#   tools        a grid of the imported CNN, Hessian sharpness, the run's memory lines, fedhet inspect
#   methods      a small imported CNN in 3-rank runs: fedavg, fedsam, fedwmsam, moon (features); 1, 2 and 3 ranks
#                identical; checkpoint + --resume bit-identical; fedhet landscape of the run; fedhet export of the
#                run passes onnx.checker and imports back with the same logits bit for bit
#   bad_input    damaged file exit 2 naming it; unsupported op / attribute, control flow, weights shared in two
#                orientations, Resize, float16, an attribute twice, a negative input dimension exit 1 naming what is
#                missing; weights shared (tied) by two layers are one parameter
#                saying what and where; no run folder
# Works on the 3x16x16, 4-class set of tests/mpi/torch_interop.py in a temporary folder; needs /usr/bin/python3 with
# python3-torch, python3-torchvision, python3-onnx and libonnx-testdata (make deps).
# usage: tests/mpi/test_onnx.sh [test_name]      (last line: "N passed, N failed"; exit 1 when any failed)
source "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
OT=$HERE/onnx_torch.py
MODEL=$ROOT/build/tests/onnx_model
NODE_DATA=/usr/share/libonnx-testdata/data/node

setup()
{
    [ -x "$MODEL" ] || { echo "$MODEL is missing (make first)"; return 1; }
    $PY -c 'import torch, torchvision, onnx' || { echo "/usr/bin/python3 lacks torch, torchvision or onnx: run make deps"; return 1; }
    [ -d "$NODE_DATA" ] || { echo "$NODE_DATA is missing: run make deps (libonnx-testdata)"; return 1; }
    $PY "$HERE/torch_interop.py" source "$WORK/src.h5" || return 1
    "$FEDHET" partition "$WORK/src.h5" "$WORK/p3.h5" scheme=iid clients=3 partition_seed=1 >"$WORK/partition.out" 2>&1 ||
        { cat "$WORK/partition.out"; return 1; }
    $PY "$OT" tiny "$WORK/tiny.onnx" 2>/dev/null || return 1
    cat >"$WORK/base.ini" <<EOF
; fedhet ONNX tests: 3 IID clients of a 3x16x16, 4-class synthetic set, a small CNN from PyTorch
[data]
path = $WORK/p3.h5
eval_batch = 16

[model]
onnx = $WORK/tiny.onnx

[train]
lr = 0.05
momentum = 0.9
batch_size = 8
backend = blas

[fl]
rounds = 2
checkpoint_every = 1
seed = 5

[algo]
method = fedavg

[output]
dir = $WORK/out
EOF
}

# ---- ONNX's node tests ----
test_nodes()
{
    local ops list t op rc passed=0 refused=0 wrong=0
    ops=$(printf '%s\n' Add AveragePool BatchNormalization Clip Concat Conv Div Dropout Erf Exp Expand Flatten Gather \
        Gemm GlobalAveragePool HardSigmoid HardSwish Identity InstanceNormalization LayerNormalization LeakyRelu MatMul \
        MaxPool Mul Pad Pow ReduceMean Relu Reshape Sigmoid Slice Softmax Split Sqrt Squeeze Sub Tanh Transpose \
        Unsqueeze)
    mkdir -p "$WORK/nodes"
    list=$($PY "$OT" nodes "$NODE_DATA" "$WORK/nodes" 2>/dev/null | awk -v ops="$(echo $ops)" \
        'BEGIN { n = split(ops, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 } want[$2] { print }')
    [ -n "$list" ] || { fail "no node test of a supported op was found in $NODE_DATA"; return; }
    declare -A P R
    while read -r t op; do
        local d=$WORK/nodes/$t
        local x=$d/x.bin mode=() judge=(near "$d/out.bin" "$d/ref.bin")
        [ -f "$x" ] || x=/dev/null # a non-float input: the importer must refuse it by itself
        if [ -f "$d/dropout_ratio" ]; then # a training-mode dropout: judged by the law of its mask
            mode=(train)
            judge=(dropout "$d/out.bin" "$d/x.bin" "$(cat "$d/dropout_ratio")")
        fi
        "$MODEL" node "$d/model.onnx" "$x" "$d/out.bin" "${mode[@]}" >"$d/log" 2>&1
        rc=$?
        if [ $rc -eq 0 ]; then
            if $PY "$OT" "${judge[@]}" >"$d/cmp" 2>&1; then
                passed=$((passed + 1)) P[$op]=$((${P[$op]:-0} + 1))
            else
                wrong=$((wrong + 1))
                fail "$t ($op): a wrong result: $(cat "$d/cmp")"
            fi
        elif [ $rc -eq 1 ] && grep -q "^$d/model.onnx: .*\(support\|must\|only\)" "$d/log"; then
            refused=$((refused + 1)) R[$op]=$((${R[$op]:-0} + 1))
        else
            wrong=$((wrong + 1))
            fail "$t ($op): exit $rc without naming what is unsupported: $(head -1 "$d/log")"
        fi
    done <<<"$list"
    for op in $ops; do note "$op: ${P[$op]:-0} passed, ${R[$op]:-0} refused"; done
    note "node tests: $passed passed, $refused refused, $wrong wrong"
    [ "$passed" -ge 20 ] || fail "only $passed node tests pass"
}

# export_checked RUN NAME WHAT: `fedhet export` of the run folder to $WORK/NAME.onnx, which onnx.checker accepts and
# whose import (onnx_model roundtrip) gives the same logits bit for bit on $WORK/x16.bin (8 x 3 x 16 x 16, 4 classes,
# written here); 1 when the export itself failed
export_checked()
{
    local run=$1 name=$2 what=$3
    "$FEDHET" export "$run" "$WORK/$name.onnx" >"$WORK/$name.export.out" 2>&1 ||
        { fail "export of $what: $(tail -1 "$WORK/$name.export.out")"; return 1; }
    $PY "$OT" check "$WORK/$name.onnx" >/dev/null 2>&1 || fail "onnx.checker refuses the exported $what"
    $PY -c 'import numpy as np; np.random.default_rng(0).standard_normal((8, 3, 16, 16), dtype=np.float32).tofile("'"$WORK"'/x16.bin")'
    "$MODEL" roundtrip "$WORK/$name.onnx" "$WORK/x16.bin" 8 3 16 16 4 "$WORK/$name.again.onnx" >"$WORK/$name.rt.out" 2>&1 ||
        fail "import of the exported $what: $(tail -1 "$WORK/$name.rt.out")"
}

# ---- torchvision models against PyTorch ----
# produce NAME [train|eval] [SIZE]: PyTorch's export, logits and losses and fedhet's logits and losses for 3 x SIZE x
# SIZE inputs (default 32, kept in its size file), in $WORK/tv/NAME/ (one folder per model: two run at once); the
# first error line in its .err
produce()
{
    local n=$1 mode=${2:-train} size=${3:-32} opset=${4:-13}
    local d=$WORK/tv/$n
    [ "$opset" = 13 ] || d=$WORK/tv/$n-$opset
    mkdir -p "$d"
    echo "$size" >"$d/size"
    ONNX_TEST_OPSET=$opset ONNX_TEST_SIZE=$size $PY "$OT" export "$n" "$d" "$mode" >"$d/export.log" 2>&1 ||
        { echo "export: $(tail -1 "$d/export.log")" >"$d/err"; return; }
    "$MODEL" logits "$d/$n.onnx" "$d/x.bin" 16 3 "$size" "$size" 10 "$d/$n.fh_logits" >"$d/log" 2>&1 &&
        "$MODEL" sgd "$d/$n.onnx" "$d/x.bin" "$d/y.bin" 16 3 "$size" "$size" 10 10 0.01 "$d/$n.fh_losses" >>"$d/log" 2>&1 ||
        echo "fedhet: $(head -1 "$d/log")" >"$d/err"
}

test_torchvision()
{
    # each model shows layers the others lack: residual adds and batch norms; the GroupNorm pattern; depthwise convs
    # and ReLU6; HardSwish, HardSigmoid and squeeze-and-excitation's broadcast Mul; Concat and ceil_mode pools;
    # dense concatenation and transitions; SiLU with stochastic depth (eval export only); grouped convs with
    # squeeze-and-excitation; a plain stack (its adaptive pool replaced: onnx_torch.make_model). ResNet-50 joins
    # with FEDHET_ONNX_ALL=1 only: its bottlenecks are ResNet-18's layers and SqueezeNet's 1x1 convolutions.
    # FL-Simulator's ResNet-18 keeps its CIFAR stem's full resolution through the first stage: 16 x 16 inputs halve
    # the slowest export of the set and still end on a 2 x 2 map. The slowest first: two workers then finish together.
    local models=(vgg11_bn "resnet18_gn train 16" resnet18 densenet121 "efficientnet_b0 eval" mobilenet_v2
        regnet_y_400mf mobilenet_v3_small squeezenet1_1) i n out
    [ "${FEDHET_ONNX_ALL:-0}" = 1 ] && models=(resnet50 "${models[@]}")
    for ((i = 0; i < ${#models[@]}; i++)); do # one thread each, two at once
        [ "$i" -ge 2 ] && wait -n
        OMP_NUM_THREADS=1 produce ${models[i]} &
    done
    wait
    for n in "${models[@]}"; do
        n=${n%% *}
        if [ -s "$WORK/tv/$n/err" ]; then
            fail "$n: $(cat "$WORK/tv/$n/err")"
        elif out=$($PY "$OT" compare "$n" "$WORK/tv/$n" 2>&1); then
            note "$out"
        else
            fail "$out"
        fi
    done
    # their layers go back out: onnx.checker accepts the export and its import gives the same logits bit for bit
    local n size
    for n in mobilenet_v3_small squeezenet1_1 resnet18_gn; do
        size=$(cat "$WORK/tv/$n/size")
        "$MODEL" roundtrip "$WORK/tv/$n/$n.onnx" "$WORK/tv/$n/x.bin" 4 3 $size $size 10 "$WORK/tv/$n/$n-back.onnx" \
            >"$WORK/$n-rt.out" 2>&1 && $PY "$OT" check "$WORK/tv/$n/$n-back.onnx" >>"$WORK/$n-rt.out" 2>&1 || fail "$n exported back: $(tail -1 "$WORK/$n-rt.out")"
    done
    # a network that needs what the engine lacks is refused by name, never imported wrongly
    $PY - "$WORK/tv/resnet18/resnet18.onnx" "$WORK/tv/resize.onnx" <<'EOF' || { fail "cannot make the Resize graph"; return; }
import sys, onnx
from onnx import helper
m = onnx.load(sys.argv[1])
n = m.graph.node[0]
m.graph.node.insert(0, helper.make_node("Resize", ["input", "", "scales_up"], ["resized"], name="upsample", mode="nearest"))
m.graph.initializer.append(helper.make_tensor("scales_up", onnx.TensorProto.FLOAT, [4], [1, 1, 1, 1]))
n.input[0] = "resized"
onnx.save(m, sys.argv[2])
EOF
    "$FEDHET" inspect --model "$WORK/tv/resize.onnx" --backend blas >/dev/null 2>"$WORK/resize.err"
    local rc=$?
    [ $rc -eq 1 ] && grep -q "node 'upsample' (Resize): Resize (upsampling) is not supported" "$WORK/resize.err" ||
        fail "a Resize node: exit $rc: $(head -1 "$WORK/resize.err")"
}

# ---- a transformer in runs ----
test_transformer_runs()
{
    # the tiny ViT (onnx_torch.py TinyViT: LayerNorm, MultiheadAttention, GELU, dropout and stochastic depth in
    # training) through what the CNN goes through above: every method and the FLOOD plug-in, the same bits on 1 and
    # 3 ranks, a bit-identical resume, export and re-import, the landscape, the sharpness and Hessian probes, an init
    # from its run.h5, and its weights into the PyTorch module (tools/fedhet-torch to-torch)
    $PY "$OT" tiny_vit "$WORK/tiny_vit.onnx" >"$WORK/tvit.log" 2>&1 || { fail "cannot export the tiny ViT: $(tail -1 "$WORK/tvit.log")"; return; }
    local vit=model.onnx=$WORK/tiny_vit.onnx m n=0
    for m in $("$FEDHET" keys methods 2>/dev/null | awk -F'\t' 'NR > 1 { print $1 }'); do
        n=$((n + 1))
        fh 1 "v_$m" "$WORK/base.ini" "$vit" algo.method=$m fl.rounds=1 fl.checkpoint_every=0 output.name="v_$m"
        expect_rc "$m on the tiny ViT" 0
    done
    fh 1 v_plugin "$WORK/base.ini" "$vit" algo.method=fedsam algo.plugin=flood fl.rounds=1 output.name=v_plugin
    expect_rc "fedsam with the flood plug-in on the tiny ViT" 0
    note "$n methods and the flood plug-in ran a round on the tiny ViT"
    fh 3 v3 "$WORK/base.ini" "$vit" output.name=v3 fl.sharpness_every=1 fl.hessian_every=1 fl.hessian_iters=5
    fh 1 v1 "$WORK/base.ini" "$vit" output.name=v1 fl.sharpness_every=1 fl.hessian_every=1 fl.hessian_iters=5
    expect_rc "the tiny ViT on 1 rank" 0 && same_global "$WORK/out/v1/run.h5" "$WORK/out/v3/run.h5" "tiny ViT: 1 vs 3 ranks"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "hessian_max_eig") h = i; if ($i == "sharpness") s = i }; next }
        !h || !s || $h == "" || $h == "nan" || $s == "" { bad = 1 } END { exit bad || NR != 3 }' "$WORK/out/v3/metrics.csv" ||
        fail "the tiny ViT's run lacks its sharpness or Hessian columns"
    resume_identical "tiny ViT, fedsam" "$vit" algo.method=fedsam
    export_checked "$WORK/out/v3" vit_trained "tiny ViT's run" || return
    timeout -k 5 "$RUN_LIMIT" mpirun --oversubscribe -np 2 "$FEDHET" landscape "$WORK/out/v3/run.h5" dims=1 points=3 \
        out="$WORK" >"$WORK/vland.out" 2>&1 || fail "landscape of the tiny ViT: $(grep -m1 error "$WORK/vland.out")"
    # an init from the run's named tensors: at a step of 1e-12 the model stays the run's but for rounding
    fh 3 vinit "$WORK/base.ini" "$vit" output.name=vinit model.init="$WORK/out/v3/run.h5" fl.rounds=1 train.lr=1e-12
    expect_rc "the tiny ViT from a run.h5" 0 && $PY - "$WORK/out/v3/run.h5" "$WORK/out/vinit/run.h5" <<'EOF' >"$WORK/vinit.cmp" 2>&1 ||
import sys, h5py, numpy as np
a, b = (np.array(h5py.File(p, "r")["/server/global"]) for p in sys.argv[1:])
print("largest difference %.3g" % np.abs(a - b).max())
sys.exit(0 if a.shape == b.shape and np.abs(a - b).max() < 1e-9 else 1)
EOF
        fail "the tiny ViT from a run.h5 does not start from its weights: $(cat "$WORK/vinit.cmp")"
    # its weights into the PyTorch module, evaluated there: the logits of fedhet's export of the same run
    PYTHONPATH=$HERE "$ROOT/tools/fedhet-torch" to-torch "$WORK/out/v3/run.h5" "$WORK/vit.pt" --arch onnx_torch:TinyViT \
        >"$WORK/vtt.out" 2>&1 || { fail "to-torch of the tiny ViT: $(tail -3 "$WORK/vtt.out" | tr '\n' ' ')"; return; }
    "$MODEL" logits "$WORK/vit_trained.onnx" "$WORK/x16.bin" 8 3 16 16 4 "$WORK/vit.fh_logits" >"$WORK/vlog.out" 2>&1 ||
        { fail "logits of the exported tiny ViT: $(tail -1 "$WORK/vlog.out")"; return; }
    PYTHONPATH=$HERE $PY - "$WORK" <<'EOF' >"$WORK/vcmp.out" 2>&1 || fail "the tiny ViT in PyTorch: $(tail -1 "$WORK/vcmp.out")"
import sys, numpy as np, torch, onnx_torch
d = sys.argv[1]
m = onnx_torch.TinyViT(3, 16, 16, 4)
m.load_state_dict(torch.load(d + "/vit.pt"), strict=True)
m.eval()
with torch.no_grad():
    t = m(torch.from_numpy(np.fromfile(d + "/x16.bin", np.float32).reshape(8, 3, 16, 16))).numpy().ravel()
f = np.fromfile(d + "/vit.fh_logits", np.float32)
err = np.abs(t - f).max() / np.abs(t).max()
print("logits of the run's weights in PyTorch against fedhet: %.3g of the largest" % err)
sys.exit(0 if err < 1e-4 else 1)
EOF
}

# ---- transformers against PyTorch ----
test_transformers()
{
    # torchvision's VisionTransformer in a CIFAR configuration at opsets 13 (LayerNorm decomposed) and 17; ConvNeXt-T
    # (depthwise convs, LayerNorm over channels between permutes, layer scale, GELU); an MLP-Mixer written by hand
    # (token mixing on the transposed tokens, a mean over tokens); a small torchvision SwinTransformer at opsets 13 and
    # 17 (maps padded to its windows, the cyclic shift as slices and concats, the shifted windows' attention mask folded
    # from constants, the relative-position table read through a Gather): logits and 10 SGD steps against PyTorch, then
    # each exported back (onnx.checker's full check) and imported to the same logits bit for bit. ViT-B/16 at 224 x 224
    # and swin_t at 32 x 32 join with FEDHET_ONNX_ALL=1. Then a DeiT-style network written by hand (timm's attention: one qkv projection
    # permuted into heads, a distillation token, layer scale, GELU's tanh form) through the user's command,
    # tools/fedhet-torch compare.
    local jobs=("convnext_tiny train 32 17" "vit_small train 32 13" "vit_small train 32 17" "mixer train 32 13"
        "swin_small train 32 13" "swin_small train 32 17") i n d
    [ "${FEDHET_ONNX_ALL:-0}" = 1 ] && jobs=("vit_b_16 train 224 17" "swin_t train 32 17" "${jobs[@]}")
    for ((i = 0; i < ${#jobs[@]}; i++)); do
        [ "$i" -ge 2 ] && wait -n
        OMP_NUM_THREADS=1 produce ${jobs[i]} &
    done
    wait
    for n in "${jobs[@]}"; do
        set -- $n
        d=$WORK/tv/$1
        [ "$4" = 13 ] || d=$WORK/tv/$1-$4
        if [ -s "$d/err" ]; then
            fail "$1 (opset $4): $(cat "$d/err")"
        elif out=$($PY "$OT" compare "$1" "$d" 2>&1); then
            note "opset $4: $out"
        else
            fail "opset $4: $out"
        fi
        "$MODEL" roundtrip "$d/$1.onnx" "$d/x.bin" 4 3 "$3" "$3" 10 "$d/$1-back.onnx" >"$d/rt.out" 2>&1 &&
            $PY "$OT" check "$d/$1-back.onnx" >>"$d/rt.out" 2>&1 || fail "$1 (opset $4) exported back: $(tail -1 "$d/rt.out")"
    done
    $PY - "$WORK/deit.onnx" <<'EOF' >"$WORK/deit.log" 2>&1 || { fail "cannot export the DeiT-style network: $(tail -1 "$WORK/deit.log")"; return; }
import sys, torch, torch.nn as nn
class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        a = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return self.proj((a @ v).transpose(1, 2).reshape(b, n, c))
class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(approximate="tanh"), nn.Linear(2 * dim, dim))
        self.g1, self.g2 = nn.Parameter(0.1 * torch.ones(dim)), nn.Parameter(0.1 * torch.ones(dim))
    def forward(self, x):
        x = x + self.g1 * self.attn(self.n1(x))
        return x + self.g2 * self.mlp(self.n2(x))
class DeiT(nn.Module):
    def __init__(self, dim=48, depth=2, heads=3, classes=10):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.cls, self.dist = nn.Parameter(0.02 * torch.randn(1, 1, dim)), nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.pos = nn.Parameter(0.02 * torch.randn(1, 18, dim))
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.norm, self.head, self.head_dist = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, classes), nn.Linear(dim, classes)
    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        b = x.shape[0]
        x = torch.cat((self.cls.expand(b, -1, -1), self.dist.expand(b, -1, -1), x), dim=1) + self.pos
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        return (self.head(x[:, 0]) + self.head_dist(x[:, 1])) / 2
torch.manual_seed(0)
torch.onnx.export(DeiT().train(), torch.randn(2, 3, 16, 16), sys.argv[1], opset_version=17,
                  training=torch.onnx.TrainingMode.TRAINING, input_names=["input"], output_names=["logits"],
                  dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
EOF
    if out=$(OMP_NUM_THREADS=1 "$ROOT/tools/fedhet-torch" compare "$WORK/deit.onnx" --fedhet "$FEDHET" 2>&1); then
        note "DeiT-style: $(printf '%s\n' "$out" | sed -n 2p); $(printf '%s\n' "$out" | tail -1)"
    else
        fail "fedhet-torch compare on the DeiT-style network: $(printf '%s\n' "$out" | tail -3 | tr '\n' ' ')"
    fi
}

# ---- the zoo's resnet18 through ONNX ----
test_zoo_roundtrip()
{
    local short="fl.rounds=1 train.steps=3" # resnet18 is slow: a few steps show the bits
    fh 2 zoo0 "$WORK/base.ini" model.onnx= model.name=resnet18 output.name=zoo0 $short
    expect_rc "zoo resnet18, 1 round" 0 || return
    "$FEDHET" export "$WORK/out/zoo0" "$WORK/zoo0.onnx" >"$WORK/zexp.out" 2>&1 || { fail "export: $(tail -1 "$WORK/zexp.out")"; return; }
    $PY "$OT" check "$WORK/zoo0.onnx" >"$WORK/zcheck.out" 2>&1 || { fail "onnx.checker: $(tail -1 "$WORK/zcheck.out")"; return; }
    # the same start (round 1's model) trained on: as a zoo model from its run.h5, and as the imported graph
    fh 2 zooA "$WORK/base.ini" model.onnx= model.name=resnet18 model.init="$WORK/out/zoo0/run.h5" output.name=zooA $short
    expect_rc "zoo resnet18 from run.h5" 0 || return
    fh 2 zooB "$WORK/base.ini" model.onnx="$WORK/zoo0.onnx" output.name=zooB $short
    expect_rc "imported resnet18" 0 || return
    same_global "$WORK/out/zooA/run.h5" "$WORK/out/zooB/run.h5" "zoo vs imported resnet18" || return
    same_csv "$WORK/out/zooA/metrics.csv" "$WORK/out/zooB/metrics.csv" "zoo vs imported resnet18"
}

# ---- every method on an imported model ----
test_methods()
{
    local m
    for m in fedavg fedsam fedwmsam moon; do
        fh 3 "m_$m" "$WORK/base.ini" algo.method=$m output.name="m_$m"
        expect_rc "$m on the imported CNN" 0 || continue
        [ "$(data_rows "$WORK/out/m_$m/metrics.csv")" -eq 2 ] || fail "$m: metrics.csv lacks its 2 rounds"
    done
    # the same bits on 1, 2 and 3 ranks
    fh 1 r1 "$WORK/base.ini" output.name=r1
    fh 2 r2 "$WORK/base.ini" output.name=r2
    expect_rc "1 and 2 ranks" 0 || return
    same_global "$WORK/out/r1/run.h5" "$WORK/out/m_fedavg/run.h5" "1 vs 3 ranks"
    same_global "$WORK/out/r2/run.h5" "$WORK/out/m_fedavg/run.h5" "2 vs 3 ranks"
    # checkpoint + resume
    resume_identical "imported CNN, fedsam" algo.method=fedsam
    # export of the run: onnx.checker, and the import gives the same logits bit for bit
    export_checked "$WORK/out/m_fedavg" trained "imported CNN's run" || return
    # the loss landscape of the imported model's run
    timeout -k 5 "$RUN_LIMIT" mpirun --oversubscribe -np 2 "$FEDHET" landscape "$WORK/out/m_fedavg/run.h5" dims=1 points=3 \
        out="$WORK" >"$WORK/land.out" 2>&1 || fail "landscape of the imported model: $(grep -m1 error "$WORK/land.out")"
    "$FEDHET" export "$WORK/out/m_fedavg" --round 7 "$WORK/r7.onnx" >/dev/null 2>"$WORK/r7.err"
    [ $? -eq 1 ] && grep -q "no model after round 7" "$WORK/r7.err" || fail "--round 7 of a 2-round run: $(head -1 "$WORK/r7.err")"
}

# every method of `fedhet methods` (and the FLOOD plug-in) trains the imported CNN for a round on one rank: the
# features tensor, the per-sample hooks and the server steps all find what they need in an imported graph
test_every_method()
{
    local m n=0
    for m in $("$FEDHET" keys methods 2>/dev/null | awk -F'\t' 'NR > 1 { print $1 }'); do
        n=$((n + 1))
        fh 1 "e_$m" "$WORK/base.ini" algo.method=$m fl.rounds=1 fl.checkpoint_every=0 output.name="e_$m"
        expect_rc "$m on the imported CNN" 0 || continue
        [ "$(data_rows "$WORK/out/e_$m/metrics.csv")" -eq 1 ] || fail "$m: metrics.csv lacks its round"
    done
    [ "$n" -ge 38 ] || fail "fedhet methods listed $n methods, fewer than 38"
    fh 1 e_plugin "$WORK/base.ini" algo.method=fedsam algo.plugin=flood fl.rounds=1 output.name=e_plugin
    expect_rc "fedsam with the flood plug-in on the imported CNN" 0
    note "$n methods and the flood plug-in ran a round on the imported CNN"
}

# the tools around a run, on the imported CNN: a grid of two members, Hessian sharpness in metrics.csv, the run's
# memory lines and fedhet inspect's layers, parameters, FLOPs and memory
test_tools()
{
    { cat "$WORK/base.ini"; printf '[grid]\nseed = 0..1\nranks_per_member = 1\n'; } |
        sed -e 's/^rounds = 2/rounds = 1/' -e "s#^dir = .*#dir = $WORK/grids#" >"$WORK/grid.ini"
    fg 2 grid "$WORK/grid.ini"
    expect_rc "a grid of the imported CNN" 0 &&
        [ "$(grep -c ',done,' "$WORK/grids/grid/members.csv" 2>/dev/null)" = 2 ] ||
        fail "grid of the imported CNN: members.csv: $(tr '\n' ' ' <"$WORK/grids/grid/members.csv" 2>/dev/null | cut -c1-300)"
    fh 3 hess "$WORK/base.ini" fl.hessian_every=1 fl.hessian_iters=5 output.name=hess
    expect_rc "hessian_every=1 on the imported CNN" 0 &&
        awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "hessian_max_eig") c = i; next }
            !c || $c == "" || $c == "nan" { bad = 1 } END { exit bad || NR != 3 }' "$WORK/out/hess/metrics.csv" ||
        fail "hessian_max_eig missing from metrics.csv of the imported CNN"
    grep -q "memory per client rank" "$WORK/hess.out" "$WORK/hess.err" 2>/dev/null ||
        fail "the run of the imported CNN prints no memory line"
    "$FEDHET" inspect --model "$WORK/tiny.onnx" --input 3x16x16 --classes 4 >"$WORK/inspect.out" 2>&1 ||
        { fail "inspect --model tiny.onnx: $(tail -1 "$WORK/inspect.out")"; return; }
    local want
    for want in "trainable parameters:" "forward FLOPs per sample:" "activations + gradients + workspace per model instance" \
        "batchnorm"; do
        grep -q -- "$want" "$WORK/inspect.out" || fail "inspect of the imported CNN lacks \"$want\""
    done
}

# ---- constants of any rank, and zero pads, against numpy ----
test_folds()
{
    # what Swin's attention mask and window padding need, in one graph on N x 2 x 3 x 4: a 3-D constant reversed along
    # two axes by one Slice (steps -1, ends past the start), written into by ScatterND, sliced with step 2 twice and
    # concatenated back along its last axis, added to the input, then padded with zeros on the three axes after the
    # batch (begins and ends): fedhet's output against the same arithmetic in numpy
    local d=$WORK/folds
    mkdir -p "$d"
    $PY - "$d" <<'EOF' >"$d/make.log" 2>&1 || { fail "cannot make the folding graph: $(tail -1 "$d/make.log")"; return; }
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto as T
d = sys.argv[1]
c = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
idx, upd = np.array([[0, 1], [1, 2]], np.int64), np.full((2, 4), 100.0, np.float32)
big = np.iinfo(np.int64)
def const(name, v):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(v), name))
nodes = [const("c", c), const("idx", idx), const("upd", upd), const("pads", np.array([0, 1, 0, 2, 0, 0, 3, 1])),
         const("rs", np.array([-1, big.max])), const("re", np.array([big.min, big.min])),
         const("ra", np.array([1, 2])), const("rp", np.array([-1, -1])), const("s0", np.array([0])),
         const("s1", np.array([1])), const("e", np.array([big.max])), const("a2", np.array([-1])),
         const("p2", np.array([2])),
         helper.make_node("Slice", ["c", "rs", "re", "ra", "rp"], ["rev"]),
         helper.make_node("ScatterND", ["rev", "idx", "upd"], ["sc"]),
         helper.make_node("Slice", ["sc", "s0", "e", "a2", "p2"], ["even"]),
         helper.make_node("Slice", ["sc", "s1", "e", "a2", "p2"], ["odd"]),
         helper.make_node("Concat", ["even", "odd"], ["cat"], axis=2),
         helper.make_node("Add", ["input", "cat"], ["sum"]),
         helper.make_node("Pad", ["sum", "pads"], ["out"], mode="constant")]
g = helper.make_graph(nodes, "folds", [helper.make_tensor_value_info("input", T.FLOAT, ["batch", 2, 3, 4])],
                      [helper.make_tensor_value_info("out", T.FLOAT, ["batch", 3, 6, 7])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), d + "/model.onnx")
x = np.random.default_rng(0).standard_normal((3, 2, 3, 4), dtype=np.float32)
sc = c[:, ::-1, ::-1].copy()
sc[0, 1], sc[1, 2] = upd
cat = np.concatenate([sc[:, :, 0::2], sc[:, :, 1::2]], axis=2)
x.tofile(d + "/x.bin")
np.pad(x + cat, [(0, 0), (1, 0), (0, 3), (2, 1)]).astype(np.float32).tofile(d + "/ref.bin")
EOF
    "$MODEL" node "$d/model.onnx" "$d/x.bin" "$d/out.bin" >"$d/log" 2>&1 || { fail "the folding graph: $(head -1 "$d/log")"; return; }
    $PY "$OT" near "$d/out.bin" "$d/ref.bin" >"$d/cmp" 2>&1 || fail "the folding graph: $(cat "$d/cmp")"
}

# ---- bad input ----
test_bad_input()
{
    head -c 3000 "$WORK/tiny.onnx" >"$WORK/cut.onnx"
    fh 2 cut "$WORK/base.ini" model.onnx="$WORK/cut.onnx" output.name=cut
    expect_rc "a truncated file" 2 && { grep -q "$WORK/cut.onnx" "$WORK/cut.err" || fail "truncated: $(errline cut)"; }
    [ -e "$WORK/out/cut" ] && fail "a refused model left its run folder"
    $PY - "$WORK" <<'EOF' || { fail "cannot make the bad graphs"; return; }
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto as T
d = sys.argv[1]
x = helper.make_tensor_value_info("x", T.FLOAT, ["N", 3, 16, 16])
y = helper.make_tensor_value_info("y", T.FLOAT, ["N", 4])
w = numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "w")
fc = numpy_helper.from_array(np.zeros((4, 4), np.float32), "fc")
tail = [helper.make_node("GlobalAveragePool", ["c"], ["g"], name="gap"), helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc"], ["y"], name="head", transB=1)]
def save(name, nodes, inits):
    m = helper.make_model(helper.make_graph(nodes, name, [x], [y], inits), opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(m, "%s/%s.onnx" % (d, name))
save("samepad", [helper.make_node("Conv", ["x", "w"], ["c"], name="conv_s", auto_pad="SAME_UPPER")] + tail, [w, fc])
save("unknown", [helper.make_node("Conv", ["x", "w"], ["c0"], name="conv"), helper.make_node("Softsign", ["c0"], ["c"], name="soft")] + tail, [w, fc])
branch = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "b", [], [helper.make_tensor_value_info("z", T.FLOAT, None)])
save("control", [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                 helper.make_node("If", ["cond"], ["q"], name="branchy", then_branch=branch, else_branch=branch)] + tail,
     [w, fc, numpy_helper.from_array(np.array(True), "cond")])
trunk = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("GlobalAveragePool", ["c"], ["g"], name="gap"),
         helper.make_node("Flatten", ["g"], ["f"], name="flat"), helper.make_node("Gemm", ["f", "fc"], ["h"], name="fc1", transB=1)]
save("shared", trunk + [helper.make_node("Gemm", ["h", "fc"], ["y"], name="fc2", transB=1)], [w, fc])
save("shared_t", trunk + [helper.make_node("Gemm", ["h", "fc"], ["y"], name="fc2", transB=0)], [w, fc])
save("resize", [helper.make_node("Conv", ["x", "w"], ["c0"], name="conv"),
                helper.make_node("Resize", ["c0", "", "scales"], ["c"], name="up", mode="nearest")] + tail,
     [w, fc, numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")])
save("half", [helper.make_node("Conv", ["x", "w16"], ["c"], name="conv")] + tail,
     [numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float16), "w16"), fc])
save("twice", [helper.make_node("Conv", ["x", "w"], ["c"], name="conv_g", group=1)] + tail, [w, fc])
m = onnx.load("%s/twice.onnx" % d)
m.graph.node[0].attribute.append(helper.make_attribute("group", 3))
onnx.save(m, "%s/twice.onnx" % d)
m = onnx.load("%s/samepad.onnx" % d)
m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = -3
onnx.save(m, "%s/negdim.onnx" % d)
m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = (1 << 32) + 3
onnx.save(m, "%s/bigdim.onnx" % d)
EOF
    local n want rc
    # tied weights: one initializer read by two layers is one parameter (conv 108 + linear 16, not 32)
    "$FEDHET" inspect --model "$WORK/shared.onnx" --classes 4 >"$WORK/shared.out" 2>&1 ||
        fail "shared weights: $(tail -1 "$WORK/shared.out")"
    grep -q "trainable parameters: 124$" "$WORK/shared.out" ||
        fail "shared weights are not one parameter: $(grep "trainable parameters" "$WORK/shared.out")"
    for n in samepad unknown control shared_t resize half twice negdim; do
        case $n in
        samepad) want="node 'conv_s' (Conv): attribute auto_pad = SAME_UPPER is not supported" ;;
        unknown) want="node 'soft' (Softsign): op type Softsign is not supported (supported: Add, AveragePool," ;;
        control) want="node 'branchy' (If): control flow is not supported" ;;
        shared_t) want="node 'fc2' (Gemm): initializer 'fc' is already the weight of layer fc1, read differently there" ;;
        resize) want="node 'up' (Resize): Resize (upsampling) is not supported" ;;
        half) want="tensor w16 is float16: float16 (and bfloat16) weights are not supported" ;;
        twice) want="node 'conv_g' (Conv): attribute group is given twice" ;;
        negdim) want="input 'x' has dimension 1 fixed at -3" ;;
        esac
        fh 2 "bad_$n" "$WORK/base.ini" model.onnx="$WORK/$n.onnx" output.name="bad_$n"
        expect_rc "$n graph" 1 || continue
        grep -qF "$WORK/$n.onnx: $want" "$WORK/bad_$n.err" || fail "$n: the message lacks '$want': $(errline "bad_$n")"
        [ -e "$WORK/out/bad_$n" ] && fail "$n: the run folder was made"
    done
    # inspect refuses as the run does
    "$FEDHET" inspect --model "$WORK/samepad.onnx" >/dev/null 2>&1 && fail "inspect imported auto_pad = SAME_UPPER"
    # a fixed dimension beyond the engine's sizes is refused with the way out, not wrapped to a small int
    "$FEDHET" inspect --model "$WORK/bigdim.onnx" >"$WORK/bigdim.out" 2>&1
    rc=$?
    [ "$rc" = 2 ] || fail "inspect of a 2^32 + 3 dimension: exit $rc, expected 2"
    grep -qF "$WORK/bigdim.onnx: the graph's input shape has a dimension outside 1..65536: give the shape with --input" \
        "$WORK/bigdim.out" || fail "inspect of a 2^32 + 3 dimension: $(tail -1 "$WORK/bigdim.out")"
}

TESTS=(bad_input methods every_method tools zoo_roundtrip nodes folds torchvision transformers transformer_runs)
run_tests "$@"
