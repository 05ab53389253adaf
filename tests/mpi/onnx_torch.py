#!/usr/bin/python3
"""PyTorch and ONNX side of tests/mpi/test_onnx.sh (runs under /usr/bin/python3: python3-torch,
python3-torchvision 0.14, python3-onnx; make deps).

  onnx_torch.py tiny OUT.onnx              a small CNN (conv-BN-ReLU, max pool, conv-BN-ReLU, global average pool,
                                           linear) for the 3x16x16, 4-class set of torch_interop.py source,
                                           exported in training mode (BatchNormalization kept)
  onnx_torch.py tiny_vit OUT.onnx          a one-block vision transformer for the same set (TinyViT below: dropout
                                           and stochastic depth at 0.1), training mode, opset 17
  onnx_torch.py export NAME DIR [eval]     torchvision NAME (weights=None, 10 classes) or "resnet18_gn" (FL-Simulator's
                                           ResNet-18 with GroupNorm, below), exported for 2 x 3 x SIZE x SIZE (training
                                           mode, or eval + PRESERVE without constant folding); DIR gets NAME.onnx,
                                           x.bin (STEPS x BATCH rows), y.bin (int32 labels), NAME.logits (eval-mode
                                           logits of the first batch) and NAME.losses (STEPS plain SGD steps from the
                                           same weights in training mode, lr LR)
  onnx_torch.py compare NAME DIR           fedhet's DIR/NAME.fh_logits and .fh_losses against PyTorch's
  onnx_torch.py check FILE.onnx            onnx.checker.check_model with full_check=True (shape inference too)
  onnx_torch.py nodes TESTDIR OUTDIR       ONNX's node tests of TESTDIR (libonnx-testdata) as files for onnx_model:
                                           every input but the first becomes an initializer; prints one line
                                           "NAME OP" per test written; a training-mode dropout gets a file
                                           dropout_ratio (its reference mask is the reference's own random draw)
  onnx_torch.py near OUT REF               a node test's output against its reference, ONNX's tolerance
  onnx_torch.py dropout OUT X RATIO        a training-mode dropout's output: 0 or X / (1 - RATIO), the share kept
                                           1 - RATIO within 5 standard deviations

Tolerances (compare, tools/compare_rule.py): the logits of fedhet and PyTorch on the same weights agree within
1e-4 of the largest logit (tests/mpi/torch_interop.py explains the figure: rounding only, different summation orders).
The SGD losses (batch 16, lr 0.01, plain SGD): the first (same weights) within 1e-4 relative; every later one within
1e-4 + 10 x PyTorch's own rounding spread up to that step, measured in the same run: the largest relative difference so
far between PyTorch in float32 and the same steps in float64, or from weights nudged by a relative 1e-7 (one draw of
rounding alone can stay small by luck) (10 x: two rounding differences of the same size grow by factors that differ
from step to step; fedhet's difference from PyTorch came to 1.2-6 x that spread on these models at the step where
the growth shows first, e.g. resnet18's third). Why a measured bound: ImageNet networks on 32x32 inputs end on 1x1 feature maps,
where batch norm normalises 16 values per channel, and their training at initialisation amplifies a rounding-level
difference (1e-7) by orders of magnitude per step: PyTorch's float32 losses leave its float64 ones by 1e-2 after one
step on regnet_y_400mf and resnet50 and by 10-50 % after ten on efficientnet_b0, while on squeezenet and the small
networks they stay within 1e-6 (resnet18_gn: 1e-3 after ten). fedhet's float32 is another float32 summation order, so it may differ from
PyTorch's as much as PyTorch's differs from exact arithmetic, and where PyTorch stays exact, so must fedhet. A wrong
gradient (a missing, swapped or transposed term) changes the next loss by O(lr |g|^2), 0.02 to 0.2 for these models,
far beyond the bound wherever the networks are not yet chaotic.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "tools"))
import compare_rule  # noqa: E402  the tolerance rule

STEPS, BATCH, LR = 10, int(os.environ.get("ONNX_TEST_BATCH", "16")), float(os.environ.get("ONNX_TEST_LR", "0.01"))
SIZE = int(os.environ.get("ONNX_TEST_SIZE", "32"))
LOGIT_RTOL = compare_rule.LOGIT_RTOL


def tiny(out):
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2, 2),
                      nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
    m.train()
    torch.onnx.export(m, torch.randn(2, 3, 16, 16), out, training=torch.onnx.TrainingMode.TRAINING,
                      opset_version=13, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    return 0


def tiny_vit_module():
    """TinyViT(C, H, W, classes): a vision transformer small enough for every method's run in the tests: a patch
    embedding, a class token, a position embedding, one block of torch's MultiheadAttention and a GELU MLP with
    dropout, stochastic depth as docs/onnx.md exports it (torch.rand), a LayerNorm and a linear head. A module of
    this file, so that tools/fedhet-torch to-torch --arch onnx_torch:TinyViT builds it."""
    import torch
    import torch.nn as nn

    class DropPath(nn.Module):
        def __init__(self, p):
            super().__init__()
            self.p = p

        def forward(self, x):
            if not self.training or self.p == 0:
                return x
            keep = 1 - self.p
            mask = (torch.rand([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype, device=x.device) < keep).to(x.dtype)
            return x * mask / keep

    class TinyViT(nn.Module):
        def __init__(self, c=3, h=16, w=16, classes=4, dim=16, heads=2, patch=4, drop=0.1):
            super().__init__()
            self.patch = nn.Conv2d(c, dim, patch, patch)
            self.cls = nn.Parameter(torch.zeros(1, 1, dim))
            self.pos = nn.Parameter(0.02 * torch.randn(1, (h // patch) * (w // patch) + 1, dim))
            self.ln1, self.ln2, self.ln = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Dropout(drop), nn.Linear(2 * dim, dim))
            self.drop_path = DropPath(drop)
            self.head = nn.Linear(dim, classes)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            y = self.ln1(x)
            x = x + self.drop_path(self.attn(y, y, y, need_weights=False)[0])
            x = x + self.drop_path(self.mlp(self.ln2(x)))
            return self.head(self.ln(x)[:, 0])

    return TinyViT


def TinyViT(c, h, w, classes):  # noqa: N802 (a class's name: what fedhet-torch --arch builds)
    return tiny_vit_module()(c, h, w, classes)


def tiny_vit(out):
    import torch
    torch.manual_seed(0)
    m = TinyViT(3, 16, 16, 4).train()
    torch.onnx.export(m, torch.randn(2, 3, 16, 16), out, training=torch.onnx.TrainingMode.TRAINING,
                      opset_version=17, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    return 0


def resnet18_gn(classes):
    """FL-Simulator's ResNet-18 (CIFAR stem: 3x3 conv, no max pool) with GroupNorm(2, C) in place of batch norm."""
    import torch.nn as nn

    def norm(c):
        return nn.GroupNorm(2, c)

    class Block(nn.Module):
        def __init__(self, a, b, stride):
            super().__init__()
            self.c1, self.n1 = nn.Conv2d(a, b, 3, stride, 1, bias=False), norm(b)
            self.c2, self.n2 = nn.Conv2d(b, b, 3, 1, 1, bias=False), norm(b)
            self.short = nn.Sequential()
            if stride != 1 or a != b:
                self.short = nn.Sequential(nn.Conv2d(a, b, 1, stride, bias=False), norm(b))

        def forward(self, x):
            y = nn.functional.relu(self.n1(self.c1(x)))
            return nn.functional.relu(self.n2(self.c2(y)) + self.short(x))

    layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), norm(64), nn.ReLU()]
    a = 64
    for b, s in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(a, b, s), Block(b, b, 1)]
        a = b
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


# exported in eval mode with PRESERVE: efficientnet_b0's stochastic depth has no training-mode export
EVAL_ONLY = ("efficientnet_b0",)
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "vgg11_bn", "squeezenet1_1", "densenet121",
          "efficientnet_b0", "regnet_y_400mf", "resnet18_gn", "vit_small", "convnext_tiny", "mixer", "vit_b_16",
          "swin_small", "swin_t")


def mixer(classes, channels=3, size=32, patch=4, dim=128, depth=4, tokens_mlp=64, channels_mlp=256):
    """an MLP-Mixer written by hand (Tolstikhin et al. 2021): a patch embedding, blocks of token mixing (on the
    transposed tokens) and channel mixing, each after a LayerNorm with a residual, a mean over tokens, a linear head"""
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, tokens):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.tok = nn.Sequential(nn.Linear(tokens, tokens_mlp), nn.GELU(), nn.Linear(tokens_mlp, tokens))
            self.ch = nn.Sequential(nn.Linear(dim, channels_mlp), nn.GELU(), nn.Linear(channels_mlp, dim))

        def forward(self, x):
            x = x + self.tok(self.ln1(x).transpose(1, 2)).transpose(1, 2)
            return x + self.ch(self.ln2(x))

    class Mixer(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(channels, dim, patch, patch)
            self.blocks = nn.Sequential(*[Block((size // patch) ** 2) for _ in range(depth)])
            self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

        def forward(self, x):
            x = self.stem(x).flatten(2).transpose(1, 2)
            return self.head(self.ln(self.blocks(x)).mean(dim=1))

    return Mixer()


def vit_small(classes, channels=3, size=32):
    """torchvision's VisionTransformer in a CIFAR-size configuration (Dosovitskiy et al. 2021's layout, patch 4)"""
    from torchvision.models import VisionTransformer
    return VisionTransformer(image_size=size, patch_size=4, num_layers=6, num_heads=4, hidden_dim=192, mlp_dim=384,
                             num_classes=classes)


def swin_small(classes, size=32):
    """torchvision's SwinTransformer small enough for the tests, with windows that really shift and maps padded to
    them, as swin_t's first stage at 32 px: patch 4 leaves 8 x 8 then 4 x 4 maps, padded to 9 x 9 and 6 x 6 for windows
    of 3 and shifted by 1 (torchvision drops the shift where one window covers the padded map)"""
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=24, depths=[2, 2], num_heads=[2, 4], window_size=[3, 3],
                           stochastic_depth_prob=0.0, num_classes=classes)


def make_model(name, classes=10, channels=3, size=32):
    """torchvision NAME (weights=None), resnet18_gn, vit_small or mixer for C x SIZE x SIZE inputs, dropout and
    stochastic depth at p = 0. channels != 3: the first conv is rebuilt with that many input channels (its other
    attributes kept)."""
    import torch
    import torchvision
    if name == "resnet18_gn":
        m = resnet18_gn(classes)
    elif name == "vit_small":
        m = vit_small(classes, size=size)
    elif name == "mixer":
        m = mixer(classes, size=size)
    elif name == "swin_small":
        m = swin_small(classes, size=size)
    elif name.startswith("vit_"):
        m = getattr(torchvision.models, name)(weights=None, num_classes=classes, image_size=size)
    else:
        m = getattr(torchvision.models, name)(weights=None, num_classes=classes)
    if hasattr(m, "heads"):  # VisionTransformer's head starts at zero: all logits 0 would test nothing
        torch.nn.init.normal_(m.heads.head.weight, std=0.02)
    if name == "vgg11_bn":  # its adaptive pool to 7 x 7 has no export from 1 x 1 maps: a 512-input classifier
        m.avgpool = torch.nn.Identity()
        m.classifier[0] = torch.nn.Linear(512, 4096)
        if size < 32:  # a fifth halving would leave no map (28 -> 14 -> 7 -> 3 -> 1 -> 0): the last max pool goes
            m.features[-1] = torch.nn.Identity()
    if name == "densenet121" and size < 32:  # 28 -> 14 -> 7 -> 3 -> 1 -> 0 after its last transition: no stem pool
        m.features.pool0 = torch.nn.Identity()
    for mod in m.modules():  # dropout's masks and stochastic depth cannot be the same on both sides: p = 0
        if isinstance(mod, (torch.nn.Dropout, torchvision.ops.StochasticDepth)):
            mod.p = 0.0
    if channels != 3:
        parent, key, conv = next((p, k, c) for p in m.modules() for k, c in p.named_children()
                                 if isinstance(c, torch.nn.Conv2d))
        setattr(parent, key, torch.nn.Conv2d(channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                                             conv.dilation, conv.groups, conv.bias is not None))
    return m


def save_onnx(m, x, path, mode="train", fold=True):
    """torch.onnx.export as docs/onnx.md says: training mode (BatchNormalization and Dropout kept), or eval mode with
    PRESERVE and no constant folding (batch norms kept in inference form); fold=False: training mode without constant
    folding (Swin: its relative-position table stays one parameter read through a Gather)"""
    import torch
    opset = int(os.environ.get("ONNX_TEST_OPSET", "13"))
    dynamic = {"input": {0: "batch"}, "logits": {0: "batch"}}
    if mode == "eval":
        m.eval()
        torch.onnx.export(m, x, path, training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
                          opset_version=opset, input_names=["input"], output_names=["logits"], dynamic_axes=dynamic)
    else:
        m.train()
        torch.onnx.export(m, x, path, training=torch.onnx.TrainingMode.TRAINING, opset_version=opset,
                          input_names=["input"], output_names=["logits"], dynamic_axes=dynamic,
                          do_constant_folding=fold)


def export(name, d, mode="train"):
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    m = make_model(name, size=SIZE)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(STEPS * BATCH, 3, SIZE, SIZE, generator=g)
    y = torch.randint(0, 10, (STEPS * BATCH,), generator=g, dtype=torch.int32)
    path = os.path.join(d, name + ".onnx")
    save_onnx(m, x[:2], path, mode, fold=not name.startswith("swin"))
    x.numpy().tofile(os.path.join(d, "x.bin"))
    y.numpy().tofile(os.path.join(d, "y.bin"))
    m.eval()
    with torch.no_grad():
        m(x[:BATCH]).numpy().tofile(os.path.join(d, name + ".logits"))
    # the steps from a model made afresh (the export's trace has run the other one): the weights in the file
    torch.manual_seed(0)
    np.array(sgd_losses(make_model(name, size=SIZE), x, y), np.float32).tofile(os.path.join(d, name + ".losses"))
    # the same steps in float64 from the same weights: how far PyTorch's own float32 rounding carries the losses
    torch.manual_seed(0)
    np.array(sgd_losses(make_model(name, size=SIZE).double(), x.double(), y), np.float64).tofile(os.path.join(d, name + ".losses64"))
    # and from weights nudged by one rounding: how far a rounding-level difference grows (compare_rule.py)
    import onnxgraph
    nudged = []
    for seed in compare_rule.NUDGE_SEEDS:
        torch.manual_seed(0)
        nudged.append(sgd_losses(onnxgraph.nudged(make_model(name, size=SIZE), seed), x, y))
    np.array(nudged, np.float32).tofile(os.path.join(d, name + ".losses_nudged"))
    return 0


def sgd_losses(m, x, y):
    import torch
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x[s * BATCH:(s + 1) * BATCH]), y[s * BATCH:(s + 1) * BATCH].long())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def compare(name, d):
    ref = np.fromfile(os.path.join(d, name + ".logits"), np.float32)
    got = np.fromfile(os.path.join(d, name + ".fh_logits"), np.float32)
    rl = np.fromfile(os.path.join(d, name + ".losses"), np.float32)
    gl = np.fromfile(os.path.join(d, name + ".fh_losses"), np.float32)
    if ref.shape != got.shape or rl.shape != gl.shape:
        print("%s: shapes differ" % name)
        return 1
    l64 = np.fromfile(os.path.join(d, name + ".losses64"), np.float64)
    ln = np.fromfile(os.path.join(d, name + ".losses_nudged"), np.float32).reshape(-1, STEPS)
    dl = float(np.abs(ref - got).max() / np.abs(ref).max())
    rel = np.abs(rl - gl) / np.abs(rl)
    spread, tol = compare_rule.tolerances(rl, l64, ln)
    ok = dl <= LOGIT_RTOL and bool(np.all(rel <= tol))
    worst = int(np.argmax(rel / tol))
    print("%s: logits max difference %.3g of the largest (tolerance %.0e); %d SGD steps' losses %.4f..%.4f, relative "
          "differences: first %.2g (tolerance %.0e), second %.2g (%.2g), largest %.2g (%.2g); PyTorch's own float32 "
          "spread %.2g, tightest at step %d: %.2g (%.2g)%s"
          % (name, dl, LOGIT_RTOL, STEPS, rl[0], rl[-1], rel[0], compare_rule.FIRST_RTOL, rel[1], tol[1], rel.max(), tol[-1],
             spread[-1], worst + 1, rel[worst], tol[worst], "" if ok else " FAIL"))
    return 0 if ok else 1


def check(path):
    import onnx
    onnx.checker.check_model(onnx.load(path), full_check=True)
    print("%s: onnx.checker passes (full check)" % path)
    return 0


def nodes(testdir, outdir):
    for t in sorted(os.listdir(testdir)):
        try:
            op = node_test(os.path.join(testdir, t), os.path.join(outdir, t))
        except Exception:  # data this onnx module cannot read (sequences, other element types): not a candidate
            op = None
        if op:
            print(t, op)
    return 0


def node_test(src, out):
    import onnx
    from onnx import numpy_helper
    if not os.path.exists(os.path.join(src, "model.onnx")) or not os.path.isdir(os.path.join(src, "test_data_set_0")):
        return None
    model = onnx.load(os.path.join(src, "model.onnx"))
    g = model.graph
    if len(g.output) > 1 and len(g.node) == 1 and g.node[0].op_type == "LayerNormalization":
        del g.output[1:]  # its mean and inverse deviation: statistics the engine keeps to itself
    if len(g.output) != 1 or len(g.input) < 1:
        return None
    ds = os.path.join(src, "test_data_set_0")
    ins = []
    for k in range(len(g.input)):
        p = os.path.join(ds, "input_%d.pb" % k)
        if not os.path.exists(p):
            break
        tp = onnx.TensorProto()
        with open(p, "rb") as f:
            tp.ParseFromString(f.read())
        ins.append(numpy_helper.to_array(tp))
    if len(ins) != len(g.input):
        return None
    for k in range(1, len(g.input)):  # weights and parameters become initializers
        init = numpy_helper.from_array(ins[k], g.input[k].name)
        g.initializer.append(init)
    op = g.node[0].op_type if len(g.node) else "?"
    # a test generated at an opset below 11 whose op has not changed since is the same test at opset 13
    import onnx.defs
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version < 11 and len(g.node) == 1 and \
                onnx.defs.get_schema(op, 13).since_version <= o.version:
            o.version = 13
    os.makedirs(out, exist_ok=True)
    onnx.save(model, os.path.join(out, "model.onnx"))
    if ins[0].dtype != np.float32:
        return op
    ins[0].astype(np.float32).tofile(os.path.join(out, "x.bin"))
    # a training-mode dropout's reference holds the reference's own random mask: judged by its law instead (dropout)
    if op == "Dropout" and len(ins) == 3 and bool(np.asarray(ins[2]).reshape(-1)[0]) and float(ins[1]) > 0:
        with open(os.path.join(out, "dropout_ratio"), "w") as f:
            f.write("%r\n" % float(ins[1]))
    tp = onnx.TensorProto()
    with open(os.path.join(ds, "output_0.pb"), "rb") as f:
        tp.ParseFromString(f.read())
    numpy_helper.to_array(tp).astype(np.float32).tofile(os.path.join(out, "ref.bin"))
    return op


def near(a, b):
    """node tests: fedhet's output against the reference within ONNX's backend test tolerance (rtol 1e-3, atol 1e-7;
    atol 1e-5 here for float32 sums computed in another order)"""
    x, y = np.fromfile(a, np.float32), np.fromfile(b, np.float32)
    ok = x.shape == y.shape and np.allclose(x, y, rtol=1e-3, atol=1e-5)
    print("same" if ok else "differ: max difference %s" % (np.abs(x - y).max() if x.shape == y.shape else "shape"))
    return 0 if ok else 1


def dropout(out, x, ratio):
    """a training-mode dropout node test: every output is 0 or x / (1 - ratio), and the share kept is 1 - ratio
    within 5 standard deviations of a binomial draw"""
    y, x, r = np.fromfile(out, np.float32), np.fromfile(x, np.float32), float(ratio)
    if x.shape != y.shape:
        print("differ: shape")
        return 1
    kept = y != 0
    scaled = np.allclose(y[kept], x[kept] / (1 - r), rtol=1e-6, atol=0)
    share, sd = kept.mean(), np.sqrt(r * (1 - r) / x.size)
    ok = scaled and abs(share - (1 - r)) <= 5 * sd + 1.0 / x.size
    print("same law: %.3f kept (1 - ratio %.3f)" % (share, 1 - r) if ok else
          "differ: %s, %.3f kept against 1 - ratio %.3f" % ("kept values scaled by 1 / (1 - ratio)" if scaled else
                                                            "kept values not x / (1 - ratio)", share, 1 - r))
    return 0 if ok else 1


def main(argv):
    cmds = {"tiny": tiny, "tiny_vit": tiny_vit, "export": export, "compare": compare, "check": check, "nodes": nodes, "near": near,
            "dropout": dropout}
    if len(argv) < 2 or argv[1] not in cmds:
        print(__doc__)
        return 1
    return cmds[argv[1]](*argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
