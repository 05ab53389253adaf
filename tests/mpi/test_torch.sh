#!/usr/bin/env bash
# PyTorch interop end to end: models trained by fedhet give PyTorch's logits once converted
# (tools/fedhet-torch to-torch), a PyTorch initialisation started by `[model] init` gives PyTorch's first-step
# loss, init files of another architecture are refused with every mismatch listed, resume does not read the
# init file again, and version-2 checkpoints (without /model) still resume.
# Works on a tiny 3x16x16, 4-class HDF5 set (tests/mpi/torch_interop.py, which holds the tolerance and
# why) in a temporary folder; needs /usr/bin/python3 with python3-torch and python3-h5py (make deps).
# usage: tests/mpi/test_torch.sh [test_name]      (last line: "N passed, N failed"; exit 1 when any failed)
source "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
TORCH_PY=$HERE/torch_interop.py
TOOL=$ROOT/tools/fedhet-torch
LOGITS=$ROOT/build/tests/model_logits

setup()
{
    [ -x "$LOGITS" ] || { echo "$LOGITS is missing (make first)"; return 1; }
    $PY -c 'import torch, h5py' || { echo "/usr/bin/python3 lacks torch or h5py: run make deps"; return 1; }
    $PY "$TORCH_PY" source "$WORK/src.h5" || return 1
    "$FEDHET" partition "$WORK/src.h5" "$WORK/p2.h5" scheme=iid clients=2 partition_seed=1 >"$WORK/partition.out" 2>&1 ||
        { cat "$WORK/partition.out"; return 1; }
    cat >"$WORK/base.ini" <<EOF
; fedhet PyTorch interop tests: 2 IID clients of a 3x16x16, 4-class synthetic set, 24 rows each
[data]
path = $WORK/p2.h5
eval_batch = 16

[model]
name = cnn

[train]
lr = 0.05
momentum = 0.9
batch_size = 16

[fl]
rounds = 1
checkpoint_every = 1

[output]
dir = $WORK/out
EOF
}

# py WHAT ARGS...: runs torch_interop.py; its line becomes a note, a nonzero exit a failure
py()
{
    local what=$1 out
    shift
    out=$($PY "$TORCH_PY" "$@" 2>&1)
    local rc=$? line
    while IFS= read -r line; do [ -n "$line" ] && note "$line"; done <<<"$out"
    [ $rc -eq 0 ] || { fail "$what: $(printf '%s' "$out" | tail -2 | tr '\n' ' ')"; return 1; }
}

# both_ways MODEL: fedhet-trained MODEL -> PyTorch, same logits; PyTorch's init -> fedhet, same first-step loss
both_ways()
{
    local m=$1
    fh 3 "$m" "$WORK/base.ini" model.name="$m" output.name="$m"
    expect_rc "$m: training run" 0 || return
    "$LOGITS" "$WORK/out/$m/run.h5" "$WORK/p2.h5" "$WORK/$m-fedhet.h5" >"$WORK/$m-logits.out" 2>&1 ||
        { fail "$m: model_logits: $(tail -1 "$WORK/$m-logits.out")"; return; }
    "$TOOL" to-torch "$WORK/out/$m/run.h5" "$WORK/$m.pt" >"$WORK/$m-to.out" 2>&1 ||
        { fail "$m: to-torch: $(tail -1 "$WORK/$m-to.out")"; return; }
    py "$m" logits "$m" "$WORK/$m.pt" "$WORK/$m-fedhet.h5" "$WORK/out/$m/metrics.csv" + init "$m" "$WORK/$m-init.pt" || return
    "$TOOL" from-torch "$WORK/$m-init.pt" "$WORK/$m-init.h5" --arch "$m" --input 3x16x16 --classes 4 \
        >"$WORK/$m-from.out" 2>&1 || { fail "$m: from-torch: $(tail -1 "$WORK/$m-from.out")"; return; }
    "$TOOL" to-torch "$WORK/$m-init.h5" "$WORK/$m-back.pt" >"$WORK/$m-back.out" 2>&1 ||
        { fail "$m: to-torch of the init file: $(tail -1 "$WORK/$m-back.out")"; return; }
    # one step on a batch larger than each client: the logged loss is the initial model's on all its rows
    fh 3 "$m-init" "$WORK/base.ini" model.name="$m" output.name="$m-init" model.init="$WORK/$m-init.h5" \
        train.steps=1 train.batch_size=64
    expect_rc "$m: run from the init file" 0 || return
    py "$m" same "$WORK/$m-init.pt" "$WORK/$m-back.pt" + \
        first-loss "$m" "$WORK/$m-init.pt" "$WORK/$m-fedhet.h5" "$WORK/p2.h5" "$WORK/out/$m-init/clients.csv"
}

test_cnn() { both_ways cnn; }
test_resnet18_gn() { both_ways resnet18_gn; }
test_mobilenetv2() { both_ways mobilenetv2; }

# An init file of another architecture: one error listing each mismatch, exit 2, no run folder.
test_init_mismatch()
{
    fh 2 cnnsrc "$WORK/base.ini" output.name=cnnsrc
    expect_rc "cnn run" 0 || return
    fh 2 mismatch "$WORK/base.ini" model.name=smallcnn output.name=mismatch model.init="$WORK/out/cnnsrc/run.h5"
    expect_rc "smallcnn from cnn's run.h5" 2 || return
    local err=$WORK/mismatch.err
    grep -q "init = $WORK/out/cnnsrc/run.h5: /model does not fit model smallcnn on 3x16x16 with 4 classes (18 missing, misshapen or non-finite, 2 extra tensors)" "$err" ||
        fail "the error does not name the file, the model and the counts: $(errline mismatch)"
    local want
    for want in "misshapen  conv1.weight: \[32, 3, 5, 5\], the model has \[32, 3, 3, 3\]" "missing    bn3.running_var \[128\]" \
                "missing    conv3.weight \[128, 64, 3, 3\]" "extra      conv2.bias" "misshapen  fc1.weight: \[512, 1024\], the model has \[128, 512\]"; do
        grep -q "^  $want\$" "$err" || fail "the error lacks the line '$want'"
    done
    [ "$(grep -c '^  \(missing\|misshapen\|extra\) ' "$err")" -eq 20 ] ||
        fail "the error lists $(grep -c '^  \(missing\|misshapen\|extra\) ' "$err") mismatches, expected 20"
    [ ! -e "$WORK/out/mismatch" ] || fail "a refused init left its run folder"
    # not HDF5, no /model, a missing file: exit 2 naming the file
    fh 2 nomodel "$WORK/base.ini" output.name=nomodel model.init="$WORK/p2.h5"
    expect_rc "a partition file as init" 2 && { grep -q "$WORK/p2.h5: no /model group" "$WORK/nomodel.err" || fail "no /model: $(errline nomodel)"; }
    fh 2 noinit "$WORK/base.ini" output.name=noinit model.init="$WORK/none.h5"
    expect_rc "a missing init file" 2 && { grep -q "$WORK/none.h5: cannot open" "$WORK/noinit.err" || fail "missing file: $(errline noinit)"; }
    # a NaN in a tensor of the right shape
    cp "$WORK/out/cnnsrc/run.h5" "$WORK/nan.h5"
    $PY -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r+"); f["model/fc2.bias"][1] = float("nan"); f.close()' "$WORK/nan.h5"
    fh 2 nan "$WORK/base.ini" output.name=nan model.init="$WORK/nan.h5"
    expect_rc "an init file with a NaN" 2 &&
        { grep -q "^  nonfinite  fc2.bias: 1 of 4 values are NaN or infinite$" "$WORK/nan.err" || fail "NaN: $(errline nan)"; }
    [ ! -e "$WORK/out/nomodel" ] && [ ! -e "$WORK/out/noinit" ] && [ ! -e "$WORK/out/nan" ] || fail "a refused init left a run folder"
    # the tool refuses a model for another architecture the same way
    "$TOOL" to-torch "$WORK/out/cnnsrc/run.h5" "$WORK/x.pt" --arch lenet >"$WORK/tool.out" 2>&1
    local rc=$?
    [ $rc -eq 2 ] || fail "to-torch --arch lenet on a cnn: exit $rc, expected 2"
    grep -q "fedhet conv1.weight \[32, 3, 5, 5\] vs PyTorch conv1.weight \[64, 3, 5, 5\]" "$WORK/tool.out" ||
        fail "to-torch --arch lenet on a cnn: $(head -3 "$WORK/tool.out" | tr '\n' ' ')"
    [ ! -e "$WORK/x.pt" ] || fail "a refused to-torch left its output"
}

# 2 rounds from an init file (a checkpoint.h5) == 1 round + --resume to 2 after the init file is gone.
test_init_resume()
{
    # a checkpoint is an init file too
    [ -f "$WORK/out/cnnsrc/checkpoint.h5" ] || fh 2 cnnsrc "$WORK/base.ini" output.name=cnnsrc
    cp "$WORK/out/cnnsrc/checkpoint.h5" "$WORK/cnn-init.h5" || { fail "no cnn checkpoint.h5 to start from"; return; }
    fh 3 straight "$WORK/base.ini" output.name=straight model.init="$WORK/cnn-init.h5" fl.rounds=2
    expect_rc "2 rounds from init" 0 || return
    fh 3 half "$WORK/base.ini" output.name=half model.init="$WORK/cnn-init.h5" fl.rounds=1
    expect_rc "1 round from init" 0 || return
    rm -f "$WORK/cnn-init.h5"
    fh 2 resumed --resume "$WORK/out/half" fl.rounds=2
    expect_rc "--resume without the init file" 0 || return
    same_global "$WORK/out/straight/run.h5" "$WORK/out/half/run.h5" "init + resume vs straight"
    # the init was used: one round from it differs from one round of fedhet's own initialisation (cnnsrc)
    # only in where it started, so the two models differ
    dump_global "$WORK/out/half/run.h5" "$WORK/ga.bin" && dump_global "$WORK/out/cnnsrc/run.h5" "$WORK/gb.bin" ||
        { fail "cannot read the models"; return; }
    cmp -s "$WORK/ga.bin" "$WORK/gb.bin" && fail "rounds from the init file end where fedhet's own initialisation does"
}

# A checkpoint of format version 2 (before /model, with the clients' state inside it) still resumes; an unknown
# version is refused.
test_checkpoint_v2()
{
    fh 3 v2 "$WORK/base.ini" output.name=v2
    expect_rc "1 round" 0 || return
    fh 3 v2ref "$WORK/base.ini" output.name=v2ref fl.rounds=2
    expect_rc "2 rounds" 0 || return
    cp "$WORK/out/v2/checkpoint.h5" "$WORK/v2-copy.h5"
    $PY - "$WORK/out/v2/checkpoint.h5" <<'EOF' || { fail "cannot rewrite the checkpoint as version 2"; return; }
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    del f["model"]
    slots = f["clients/slots"][...]  # FedAvg keeps no per-client floats: version 2 held only has_state
    del f["clients/slots"]
    f.create_dataset("clients/has_state", data=(slots[:, :1] >= 0).astype("<f4"), chunks=True, fletcher32=True)
    f["meta"].attrs["format_version"] = np.array([2], dtype=np.int64)
EOF
    fh 2 v2resume --resume "$WORK/out/v2" fl.rounds=2
    expect_rc "--resume from a version-2 checkpoint" 0 || return
    same_global "$WORK/out/v2ref/run.h5" "$WORK/out/v2/run.h5" "version-2 resume vs straight"
    h5ls "$WORK/out/v2/run.h5/model/conv1.weight" >/dev/null 2>&1 || fail "the resumed run's run.h5 has no /model"
    mkdir -p "$WORK/out/v9" && cp "$WORK/v2-copy.h5" "$WORK/out/v9/checkpoint.h5"
    cp "$WORK/out/v2/config.ini" "$WORK/out/v9/config.ini"
    $PY -c 'import sys,h5py,numpy as np; f=h5py.File(sys.argv[1],"r+"); f["meta"].attrs["format_version"]=np.array([9],dtype=np.int64)' \
        "$WORK/out/v9/checkpoint.h5"
    fh 2 v9 --resume "$WORK/out/v9" fl.rounds=2
    expect_rc "--resume from a version-9 checkpoint" 4 &&
        { grep -q "checkpoint version 9; this fedhet reads 2 to 4" "$WORK/v9.err" || fail "version 9: $(errline v9)"; }
}

# --arch module:Class: the user's own module, with other names than the zoo's twin, gets the same model.
test_user_module()
{
    [ -f "$WORK/cnn-fedhet.h5" ] || both_ways cnn
    cat >"$WORK/usernet.py" <<'EOF'
import torch.nn as nn

class Net(nn.Module):
    """fedhet's cnn under other names: features.0 / features.3 / head.1 / head.3"""
    def __init__(self, c, h, w, classes):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64 * (h // 4) * (w // 4), 512), nn.ReLU(),
                                  nn.Linear(512, classes))

    def forward(self, x):
        return self.head(self.features(x))
EOF
    (cd "$WORK" && "$TOOL" to-torch "$WORK/out/cnn/run.h5" "$WORK/user.pt" --arch usernet:Net) >"$WORK/user.out" 2>&1 ||
        { fail "to-torch --arch usernet:Net: $(tail -1 "$WORK/user.out")"; return; }
    (cd "$WORK" && $PY "$TORCH_PY" logits usernet:Net "$WORK/user.pt" "$WORK/cnn-fedhet.h5") >"$WORK/user-logits.out" 2>&1 ||
        { fail "usernet:Net logits: $(tail -1 "$WORK/user-logits.out")"; return; }
    note "$(cat "$WORK/user-logits.out")"
}

# A run of a model imported from ONNX: to-torch without --arch says it needs the PyTorch module; with
# --arch module:Class the state_dict gives the logits of the run's model exported back (fedhet export)
test_onnx_run()
{
    local onnx_model=$ROOT/build/tests/onnx_model rc
    [ -x "$onnx_model" ] || { fail "$onnx_model is missing (make first)"; return; }
    cat >"$WORK/onnxnet.py" <<'EOF'
import torch.nn as nn

class Net(nn.Module):
    def __init__(self, c, h, w, classes):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, classes))

    def forward(self, x):
        return self.body(x)
EOF
    (cd "$WORK" && $PY - <<'EOF') >"$WORK/onnxnet.out" 2>&1 || { fail "onnxnet export: $(tail -1 "$WORK/onnxnet.out")"; return; }
import torch, onnxnet
torch.manual_seed(0)
m = onnxnet.Net(3, 16, 16, 4).train()
torch.onnx.export(m, torch.randn(2, 3, 16, 16), "onnxnet.onnx", training=torch.onnx.TrainingMode.TRAINING,
                  opset_version=13, input_names=["input"], output_names=["logits"])
torch.randn(8, 3, 16, 16).numpy().tofile("onnxnet-x.bin")
EOF
    fh 3 onnxrun "$WORK/base.ini" model.onnx="$WORK/onnxnet.onnx" output.name=onnxrun
    expect_rc "run of an imported model" 0 || return
    "$TOOL" to-torch "$WORK/out/onnxrun/run.h5" "$WORK/o.pt" >"$WORK/onnx-to.out" 2>&1; rc=$?
    [ $rc -eq 1 ] && grep -q "imported from ONNX (\[model\] onnx): to-torch needs the original PyTorch module, --arch module:Class" \
        "$WORK/onnx-to.out" || fail "to-torch of an imported run without --arch: exit $rc: $(tail -1 "$WORK/onnx-to.out")"
    [ ! -e "$WORK/o.pt" ] || fail "a refused conversion left its output"
    (cd "$WORK" && "$TOOL" to-torch "$WORK/out/onnxrun/run.h5" "$WORK/onnxrun.pt" --arch onnxnet:Net) >"$WORK/onnx-to2.out" 2>&1 ||
        { fail "to-torch --arch onnxnet:Net: $(tail -1 "$WORK/onnx-to2.out")"; return; }
    "$FEDHET" export "$WORK/out/onnxrun" "$WORK/onnxrun-back.onnx" >"$WORK/onnx-export.out" 2>&1 &&
        "$onnx_model" logits "$WORK/onnxrun-back.onnx" "$WORK/onnxnet-x.bin" 8 3 16 16 4 "$WORK/onnxrun.fh" \
            >>"$WORK/onnx-export.out" 2>&1 || { fail "fedhet export / onnx_model: $(tail -1 "$WORK/onnx-export.out")"; return; }
    (cd "$WORK" && $PY - <<'EOF') >"$WORK/onnx-cmp.out" 2>&1 || fail "$(tail -1 "$WORK/onnx-cmp.out")"
import numpy as np, torch, onnxnet
m = onnxnet.Net(3, 16, 16, 4)
m.load_state_dict(torch.load("onnxrun.pt"), strict=True)
m.eval()
with torch.no_grad():
    ref = m(torch.from_numpy(np.fromfile("onnxnet-x.bin", np.float32).reshape(8, 3, 16, 16))).numpy().ravel()
got = np.fromfile("onnxrun.fh", np.float32)
d = float(np.abs(ref - got).max() / np.abs(ref).max())
print("imported run through to-torch --arch onnxnet:Net: logits max difference %.2g of the largest (tolerance 1e-4)" % d)
assert d <= 1e-4, "logits differ"
EOF
    note "$(tail -1 "$WORK/onnx-cmp.out")"
}

# The tool's help, usage errors (exit 1) and bad inputs (exit 2) name what is wrong.
test_tool_errors()
{
    "$TOOL" --help >"$WORK/help.out" 2>&1 || fail "--help: exit $?"
    grep -q "to-torch RUN.h5 OUT.pt" "$WORK/help.out" && grep -q "module:Class" "$WORK/help.out" || fail "--help lacks the usage"
    local rc
    "$TOOL" from-torch "$WORK/none.pt" "$WORK/o.h5" --arch cnn --classes 4 >"$WORK/t1.out" 2>&1; rc=$?
    [ $rc -eq 1 ] && grep -q -- "--input" "$WORK/t1.out" || fail "from-torch without --input: exit $rc: $(tail -1 "$WORK/t1.out")"
    "$TOOL" from-torch "$WORK/base.ini" "$WORK/o.h5" --arch cnn --input 3x16x16 --classes 4 >"$WORK/t2.out" 2>&1; rc=$?
    [ $rc -eq 2 ] && grep -q "base.ini: cannot load" "$WORK/t2.out" || fail "from-torch of a text file: exit $rc: $(tail -1 "$WORK/t2.out")"
    "$TOOL" to-torch "$WORK/p2.h5" "$WORK/o.pt" >"$WORK/t3.out" 2>&1; rc=$?
    [ $rc -eq 2 ] && grep -q "p2.h5: no /model group" "$WORK/t3.out" || fail "to-torch of a partition file: exit $rc: $(tail -1 "$WORK/t3.out")"
    [ -f "$WORK/out/cnnsrc/run.h5" ] || fh 2 cnnsrc "$WORK/base.ini" output.name=cnnsrc
    "$TOOL" to-torch "$WORK/out/cnnsrc/run.h5" "$WORK/o.pt" --arch nosuchmodel >"$WORK/t4.out" 2>&1; rc=$?
    [ $rc -eq 1 ] && grep -q "nosuchmodel: not a fedhet model" "$WORK/t4.out" || fail "to-torch --arch nosuchmodel: exit $rc: $(tail -1 "$WORK/t4.out")"
    # a state_dict of another architecture: every mismatch listed
    [ -f "$WORK/cnn-init.pt" ] || $PY "$TORCH_PY" init cnn "$WORK/cnn-init.pt"
    "$TOOL" from-torch "$WORK/cnn-init.pt" "$WORK/o.h5" --arch smallcnn --input 3x16x16 --classes 4 >"$WORK/t5.out" 2>&1; rc=$?
    [ $rc -eq 2 ] && grep -q "missing    bn1.running_mean" "$WORK/t5.out" && grep -q "misshapen  fc1.weight \[512, 1024\], smallcnn has \[128, 512\]" "$WORK/t5.out" ||
        fail "from-torch of a cnn as smallcnn: exit $rc: $(head -4 "$WORK/t5.out" | tr '\n' ' ')"
    [ ! -e "$WORK/o.h5" ] && [ ! -e "$WORK/o.pt" ] || fail "a refused conversion left its output"
}

TESTS=(cnn resnet18_gn mobilenetv2 user_module onnx_run init_mismatch init_resume checkpoint_v2 tool_errors)
run_tests "$@"
