#!/usr/bin/env python3
"""PyTorch reference benchmark for fedhet's model zoo (shared/docs/methods/models.md).

Must run under the *system* python, /usr/bin/python3, with Debian 12's
python3-torch (1.13) installed (`make deps-bench`, or
`apt-get install -y --no-install-recommends python3-torch python3-numpy`).
A pyenv/virtualenv python3 found first on PATH usually has no torch; invoke
it as `/usr/bin/python3 tests/bench/torch_bench.py ...`.

Usage
  torch_bench.py --model M --batch B --threads T --mode sgd|sam
                 [--input CxHxW] [--classes 10] [--reps 5] [--config "set_to_none=... ..."]
      prints one CSV line: model,batch,threads,mode,samples_per_s,gflops,configuration
      (the format of `fedhet bench` and the configuration measured; no header).
  torch_bench.py --all [--models a,b] [--batches 32,64,256] [--threads 1,2]
                 [--modes sgd,sam] [--classes 10] [--reps 5]
      one line per point; input defaults to 3x32x32 for resnet8, resnet18,
      resnet18_gn, mobilenetv2 and to 1x28x28 for mlp, cnn, lenet, smallcnn
      (--input overrides it for every model).
  torch_bench.py --check
      checks the parameter counts of docs/methods/models.md and prints trainable / buffer
      counts (BatchNorm running mean + var; num_batches_tracked excluded)
      and forward GFLOP/sample for every model on 1x28x28 and 3x32x32.

Step: sgd = forward + cross-entropy + backward + SGD(lr=0.01, momentum=0.9)
step; sam = two-pass SAM (rho=0.05): forward+backward, perturb w += rho*g/||g||,
zero grads, forward+backward at the perturbed point, restore w, SGD step.
Inputs and labels are random, fixed before timing (torch.manual_seed(0)),
model in train mode, fp32, torch.set_num_threads(T). Each point runs in PyTorch's fastest configuration: every
combination of zero_grad(set_to_none), channels_last (convolutional models) and mkldnn is tried for a short
rep and the winner measured in full; its name goes to stderr.
samples_per_s = median over reps of steps*batch/elapsed (after a warm-up);
steps per rep are calibrated so one rep lasts ~0.5 s (one step at least; when a
single step takes over 1 s, reps is capped at 3 to keep the point bounded).
gflops = 3 * forward FLOPs/sample * samples_per_s / 1e9, forward FLOPs =
2 * multiply-adds of conv and linear layers only (the same count for both
modes, as in the C engine).
"""
import argparse
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    sys.stderr.write(
        "torch_bench.py: PyTorch is not available (%s).\n"
        "Install it with `make deps-bench` (apt-get install -y --no-install-recommends "
        "python3-torch python3-numpy) and run this script with /usr/bin/python3, "
        "not a pyenv/venv python3.\n" % e)
    sys.exit(2)

MODELS = ["mlp", "cnn", "lenet", "smallcnn", "resnet8", "resnet18", "resnet18_gn", "mobilenetv2"]
DEFAULT_INPUT = {
    "mlp": (1, 28, 28), "cnn": (1, 28, 28), "lenet": (1, 28, 28), "smallcnn": (1, 28, 28),
    "resnet8": (3, 32, 32), "resnet18": (3, 32, 32), "resnet18_gn": (3, 32, 32),
    "mobilenetv2": (3, 32, 32),
}


# ---------------------------------------------------------------- model zoo

def make_norm(kind, ch, groups):
    if kind == "bn":
        return nn.BatchNorm2d(ch, eps=1e-5, momentum=0.1)
    if kind == "gn":
        return nn.GroupNorm(groups, ch, eps=1e-5)
    raise ValueError("norm must be bn or gn, got %r" % kind)


class MLP(nn.Module):
    def __init__(self, c, h, w, classes):
        super().__init__()
        self.fc1 = nn.Linear(c * h * w, 200)
        self.fc2 = nn.Linear(200, 200)
        self.fc3 = nn.Linear(200, classes)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class CNN(nn.Module):
    def __init__(self, c, h, w, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * (h // 4) * (w // 4), 512)
        self.fc2 = nn.Linear(512, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


class LeNet(nn.Module):
    def __init__(self, c, h, w, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 64, 5)
        self.conv2 = nn.Conv2d(64, 64, 5)
        hh = ((h - 4) // 2 - 4) // 2
        ww = ((w - 4) // 2 - 4) // 2
        self.fc1 = nn.Linear(64 * hh * ww, 384)
        self.fc2 = nn.Linear(384, 192)
        self.fc3 = nn.Linear(192, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class SmallCNN(nn.Module):
    def __init__(self, c, h, w, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(128)
        self.fc1 = nn.Linear(128 * (h // 8) * (w // 8), 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2, 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2, 2)
        x = F.max_pool2d(F.relu(self.bn3(self.conv3(x))), 2, 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


class BasicBlock(nn.Module):
    def __init__(self, a, b, s, norm="bn", groups=2):
        super().__init__()
        self.conv1 = nn.Conv2d(a, b, 3, stride=s, padding=1, bias=False)
        self.n1 = make_norm(norm, b, groups)
        self.conv2 = nn.Conv2d(b, b, 3, stride=1, padding=1, bias=False)
        self.n2 = make_norm(norm, b, groups)
        if s != 1 or a != b:
            self.shortcut = nn.Sequential(
                nn.Conv2d(a, b, 1, stride=s, bias=False), make_norm(norm, b, groups))
        else:
            self.shortcut = nn.Identity()

    def forward(self, x):
        out = F.relu(self.n1(self.conv1(x)))
        out = self.n2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet8(nn.Module):
    def __init__(self, c, h, w, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 128, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(128)
        self.layer1 = BasicBlock(128, 128, 1)
        self.layer2 = BasicBlock(128, 256, 2)
        self.layer3 = BasicBlock(256, 512, 2)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


class ResNet18(nn.Module):
    """CIFAR stem (imagenet_stem=False) or ImageNet stem (resnet18_gn)."""

    def __init__(self, c, h, w, classes, norm="bn", groups=2, imagenet_stem=False):
        super().__init__()
        self.imagenet_stem = imagenet_stem
        if imagenet_stem:
            self.conv1 = nn.Conv2d(c, 64, 7, stride=2, padding=3, bias=False)
        else:
            self.conv1 = nn.Conv2d(c, 64, 3, stride=1, padding=1, bias=False)
        self.n1 = make_norm(norm, 64, groups)
        layers, a = [], 64
        for i, b in enumerate((64, 128, 256, 512)):
            s = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(a, b, s, norm, groups),
                                        BasicBlock(b, b, 1, norm, groups)))
            a = b
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = F.relu(self.n1(self.conv1(x)))
        if self.imagenet_stem:
            x = F.max_pool2d(x, 3, stride=2, padding=1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


class InvertedResidual(nn.Module):
    def __init__(self, a, b, s, t):
        super().__init__()
        m = a * t
        self.use_res = (s == 1 and a == b)
        self.conv1 = nn.Conv2d(a, m, 1)
        self.bn1 = nn.BatchNorm2d(m)
        self.conv2 = nn.Conv2d(m, m, 3, stride=s, padding=1, groups=m)
        self.bn2 = nn.BatchNorm2d(m)
        self.conv3 = nn.Conv2d(m, b, 1)
        self.bn3 = nn.BatchNorm2d(b)

    def forward(self, x):
        out = F.relu6(self.bn1(self.conv1(x)))
        out = F.relu6(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return out + x if self.use_res else out


class MobileNetV2(nn.Module):
    CFG = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, c, h, w, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        blocks, a = [], 32
        for t, b, n, s in self.CFG:
            for i in range(n):
                blocks.append(InvertedResidual(a, b, s if i == 0 else 1, t))
                a = b
        self.blocks = nn.Sequential(*blocks)
        self.conv2 = nn.Conv2d(320, 1280, 1)
        self.bn2 = nn.BatchNorm2d(1280)
        self.classifier = nn.Conv2d(1280, classes, 1)

    def forward(self, x):
        x = F.relu6(self.bn1(self.conv1(x)))
        x = self.blocks(x)
        x = F.relu6(self.bn2(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 1)
        return torch.flatten(self.classifier(x), 1)


def build(name, c, h, w, classes, norm="bn", groups=2):
    if name == "mlp":
        return MLP(c, h, w, classes)
    if name == "cnn":
        return CNN(c, h, w, classes)
    if name == "lenet":
        return LeNet(c, h, w, classes)
    if name == "smallcnn":
        return SmallCNN(c, h, w, classes)
    if name == "resnet8":
        return ResNet8(c, h, w, classes)
    if name == "resnet18":
        return ResNet18(c, h, w, classes, norm=norm, groups=groups)
    if name == "resnet18_gn":
        return ResNet18(c, h, w, classes, norm="gn", groups=groups, imagenet_stem=True)
    if name == "mobilenetv2":
        return MobileNetV2(c, h, w, classes)
    raise ValueError("unknown model %r (known: %s)" % (name, ", ".join(MODELS)))


# ---------------------------------------------------------------- counting

def count_params(model):
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    buffers = sum(b.numel() for n, b in model.named_buffers()
                  if not n.endswith("num_batches_tracked"))
    return trainable, buffers


def forward_flops(model, c, h, w):
    """2 x multiply-adds of conv and linear layers, per sample."""
    total = [0]

    def conv_hook(mod, inp, out):
        _, cout, ho, wo = out.shape
        kh, kw = mod.kernel_size
        total[0] += 2 * cout * ho * wo * (mod.in_channels // mod.groups) * kh * kw

    def lin_hook(mod, inp, out):  # every row of a sequence (tokens x features) counts
        total[0] += 2 * mod.in_features * mod.out_features * (inp[0].numel() // mod.in_features)

    hooks = []
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Linear):
            hooks.append(m.register_forward_hook(lin_hook))
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, c, h, w))
    model.train(was_training)
    for hk in hooks:
        hk.remove()
    return total[0]


# ---------------------------------------------------------------- steps

def make_step(model, x, y, mode, lr=0.01, momentum=0.9, rho=0.05, set_to_none=False):
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum)

    def sgd_step():
        opt.zero_grad(set_to_none=set_to_none)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    def sam_step():
        opt.zero_grad(set_to_none=set_to_none)
        F.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            gnorm = torch.norm(torch.stack([p.grad.norm(2) for p in params]), 2)
            scale = rho / (gnorm + 1e-12)
            eps = []
            for p in params:
                e = p.grad * scale
                p.add_(e)
                eps.append(e)
        opt.zero_grad(set_to_none=set_to_none)
        F.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for p, e in zip(params, eps):
                p.sub_(e)
        opt.step()

    if mode == "sgd":
        return sgd_step
    if mode == "sam":
        return sam_step
    raise ValueError("mode must be sgd or sam, got %r" % mode)


def bench_point(name, batch, threads, mode, inp, classes, reps, norm="bn", groups=2,
                target_s=0.5, config=None):
    """samples/s, GFLOP/s and the configuration measured: `config`, or the fastest one found"""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    c, h, w = inp
    model = build(name, c, h, w, classes, norm=norm, groups=groups)
    if config is not None:
        sps, gflops = bench_model(model, batch, mode, inp, classes, reps, target_s, config)
        return sps, gflops, config
    # PyTorch at its fastest: a claim against it holds only there; the winner goes to stderr beside the CSV line
    sps, gflops, cfg = bench_best(model, batch, mode, inp, classes, reps, target_s)
    print("%s batch %d %s: fastest PyTorch configuration %s" % (name, batch, mode, config_name(cfg)), file=sys.stderr)
    return sps, gflops, cfg


# The settings a PyTorch user can pick without changing the model: how zero_grad clears the gradients, the
# memory format of a convolutional network, and whether oneDNN (mkldnn) runs the kernels that have it.
CONFIG_DEFAULT = {"set_to_none": False, "channels_last": False, "mkldnn": True}


def configs_for(model):
    has_conv = any(isinstance(m, nn.Conv2d) for m in model.modules())
    return [{"set_to_none": n, "channels_last": c, "mkldnn": k}
            for n in (False, True) for c in ((False, True) if has_conv else (False,)) for k in (True, False)]


def config_name(cfg):
    return "set_to_none=%s channels_last=%s mkldnn=%s" % (cfg["set_to_none"], cfg["channels_last"], cfg["mkldnn"])


def parse_config(text):
    """config_name's text back to a config"""
    cfg = dict(CONFIG_DEFAULT)
    for item in text.split():
        key, _, value = item.partition("=")
        if key not in cfg or value not in ("True", "False"):
            raise SystemExit("torch_bench.py: bad configuration item %r (expected %s)" % (item, config_name(cfg)))
        cfg[key] = value == "True"
    return cfg


def bench_model(model, batch, mode, inp, classes, reps, target_s=0.5, config=None):
    """samples/s and GFLOP/s of `model`'s training step (the threads as set by the caller) in `config`"""
    cfg = dict(CONFIG_DEFAULT, **(config or {}))
    c, h, w = inp
    flops = forward_flops(model, c, h, w)
    model.train()
    fmt = torch.channels_last if cfg["channels_last"] else torch.contiguous_format
    model = model.to(memory_format=fmt)
    x = torch.randn(batch, c, h, w, dtype=torch.float32).to(memory_format=fmt)
    y = torch.randint(0, classes, (batch,))
    step = make_step(model, x, y, mode, set_to_none=cfg["set_to_none"])
    with torch.backends.mkldnn.flags(enabled=cfg["mkldnn"]):
        return timed(step, batch, flops, reps, target_s)


def bench_best(model, batch, mode, inp, classes, reps, target_s=0.5):
    """bench_model in the fastest of configs_for(model) (each tried for one short rep, the winner measured in
    full): samples/s, GFLOP/s and the winner's config"""
    trial = [(bench_model(model, batch, mode, inp, classes, 1, target_s / 2, cfg)[0], i, cfg)
             for i, cfg in enumerate(configs_for(model))]
    best = max(trial, key=lambda t: (t[0], -t[1]))[2]
    sps, gflops = bench_model(model, batch, mode, inp, classes, reps, target_s, best)
    return sps, gflops, best


def timed(step, batch, flops, reps, target_s):
    """median samples/s of `step` over reps and its GFLOP/s"""
    # warm-up, then calibrate steps per rep from one timed step
    step()
    t0 = time.perf_counter()
    step()
    one = max(time.perf_counter() - t0, 1e-6)
    steps = max(1, int(round(target_s / one)))
    if one > 1.0:  # very slow points (e.g. resnet18, batch 256, 1 thread): bound the time
        reps = min(reps, 3)

    rates = []
    for _ in range(max(1, reps)):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        el = time.perf_counter() - t0
        rates.append(steps * batch / el)
    sps = statistics.median(rates)
    gflops = 3.0 * flops * sps / 1e9
    return sps, gflops


def fmt_line(name, batch, threads, mode, sps, gflops):
    return "%s,%d,%d,%s,%.1f,%.3f" % (name, batch, threads, mode, sps, gflops)


# ---------------------------------------------------------------- CLI

def parse_input(s):
    try:
        parts = tuple(int(v) for v in s.lower().split("x"))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) <= 0:
        raise argparse.ArgumentTypeError("--input must look like 1x28x28, got %r" % s)
    return parts


def int_list(s):
    try:
        out = [int(v) for v in s.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected a comma-separated list of integers, got %r" % s)
    if not out or min(out) <= 0:
        raise argparse.ArgumentTypeError("expected positive integers, got %r" % s)
    return out


def str_list(s):
    return [v.strip() for v in s.split(",") if v.strip()]


def run_check():
    ok = True
    expect = {("cnn", (1, 28, 28)): 1663370, ("cnn", (3, 32, 32)): 2156490}
    print("model,input,classes,trainable,buffers,fwd_gflop_per_sample")
    for inp in ((1, 28, 28), (3, 32, 32)):
        for name in MODELS:
            torch.manual_seed(0)
            m = build(name, *inp, 10)
            tr, bu = count_params(m)
            fl = forward_flops(m, *inp)
            print("%s,%s,10,%d,%d,%.6f" % (name, "x".join(map(str, inp)), tr, bu, fl / 1e9))
            want = expect.get((name, inp))
            if want is not None and tr != want:
                sys.stderr.write("CHECK FAILED: %s on %s has %d trainable parameters, docs/methods/models.md says %d\n"
                                 % (name, "x".join(map(str, inp)), tr, want))
                ok = False
    # resnet18 with GroupNorm (norm=gn): same trainable count, no buffers
    for inp in ((1, 28, 28), (3, 32, 32)):
        m = build("resnet18", *inp, 10, norm="gn", groups=2)
        tr, bu = count_params(m)
        print("%s,%s,10,%d,%d,%.6f" % ("resnet18(norm=gn)", "x".join(map(str, inp)), tr, bu,
                                      forward_flops(m, *inp) / 1e9))
    print("check: %s" % ("OK" if ok else "FAILED"), file=sys.stderr)
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="PyTorch reference benchmark for fedhet's model zoo (run with /usr/bin/python3).")
    ap.add_argument("--model", choices=MODELS)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--threads", type=str, default=None,
                    help="thread count (single point) or comma list (--all; default 1,2)")
    ap.add_argument("--mode", choices=["sgd", "sam"])
    ap.add_argument("--input", type=parse_input, default=None, help="CxHxW, e.g. 3x32x32")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--norm", choices=["bn", "gn"], default="bn", help="resnet18 only")
    ap.add_argument("--groups", type=int, default=2, help="GroupNorm groups (default 2)")
    ap.add_argument("--all", action="store_true", help="sweep models x batches x threads x modes")
    ap.add_argument("--models", type=str_list, default=None)
    ap.add_argument("--batches", type=int_list, default=[32, 64, 256])
    ap.add_argument("--modes", type=str_list, default=["sgd", "sam"])
    ap.add_argument("--check", action="store_true", help="verify and print parameter counts")
    ap.add_argument("--config", default=None,
                    help='single point: measure this configuration instead of searching the fastest, as printed '
                         'last on the line ("set_to_none=True channels_last=False mkldnn=True")')
    a = ap.parse_args(argv)

    if a.check:
        return run_check()

    if a.classes <= 0 or a.reps <= 0:
        ap.error("--classes and --reps must be positive")

    if a.all:
        models = a.models or ([a.model] if a.model else MODELS)
        for m in models:
            if m not in MODELS:
                ap.error("unknown model %r (known: %s)" % (m, ", ".join(MODELS)))
        for md in a.modes:
            if md not in ("sgd", "sam"):
                ap.error("unknown mode %r" % md)
        threads = int_list(a.threads) if a.threads else [1, 2]
        batches = [a.batch] if (a.batch and a.batches == [32, 64, 256]) else a.batches
        for m in models:
            inp = a.input or DEFAULT_INPUT[m]
            for b in batches:
                for t in threads:
                    for md in a.modes:
                        sps, gf, _ = bench_point(m, b, t, md, inp, a.classes, a.reps,
                                                 norm=a.norm, groups=a.groups)
                        print(fmt_line(m, b, t, md, sps, gf), flush=True)
        return 0

    if not (a.model and a.batch and a.mode and a.threads):
        ap.error("need --model, --batch, --threads and --mode (or --all / --check)")
    try:
        t = int(a.threads)
    except ValueError:
        ap.error("--threads must be one integer for a single point")
    if a.batch <= 0 or t <= 0:
        ap.error("--batch and --threads must be positive")
    inp = a.input or DEFAULT_INPUT[a.model]
    config = parse_config(a.config) if a.config else None
    sps, gf, cfg = bench_point(a.model, a.batch, t, a.mode, inp, a.classes, a.reps,
                               norm=a.norm, groups=a.groups, config=config)
    # the configuration last, so that a caller can measure the same one again (--config)
    print("%s,%s" % (fmt_line(a.model, a.batch, t, a.mode, sps, gf), config_name(cfg)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
