#!/usr/bin/python3
"""PyTorch side of tests/mpi/test_torch.sh (runs under /usr/bin/python3 with python3-torch, python3-h5py).

  torch_interop.py source OUT.h5                 a tiny learnable 3x16x16, 4-class HDF5 source set
  torch_interop.py logits MODEL STATE.pt FEDHET.h5 [METRICS.csv]
        (with METRICS.csv: FEDHET.h5's logits give the run's last test accuracy and loss), then loads STATE.pt (strict) into tests/bench's MODEL (or module:Class of the current folder), evaluation mode, logits on FEDHET.h5's /test_x;
        compares with its /test_logits (model_logits' output)
  torch_interop.py init MODEL OUT.pt             PyTorch's own initialisation (seed 0) with random BatchNorm
                                                 running statistics, as a state_dict file
  torch_interop.py first-loss MODEL STATE.pt FEDHET.h5 PARTITION.h5 CLIENTS.csv
        each client's mean cross-entropy of STATE.pt in training mode (batch statistics) on all its rows
        (FEDHET.h5's /train_x, /train_y), against clients.csv's round-1 loss: a run of one step with a batch
        larger than every client
  torch_interop.py same A.pt B.pt                two state_dict files hold the same keys, shapes and bits
Several commands may be joined by "+" (one start of Python and torch). Each prints one line of numbers;
exit 0 when all are within tolerance, 1 otherwise.

Tolerance: fedhet and PyTorch compute the same float32 functions in different orders (im2col + OpenBLAS
sgemm against oneDNN's direct convolutions, different reduction orders in the norms), so results differ by
rounding only: about sqrt(n) * 2^-24 relative per dot product of n terms, compounded over the depth.
1e-4 of the logits' largest magnitude (or of the loss) is about 100x what that gives for these depths, and far below
any error of mapping (a transposed, swapped or missing tensor moves the logits by O(1) of their scale).
"""
import csv
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "bench"))
import torch_bench  # noqa: E402

RTOL = 1e-4
C, H, W, CLASSES = 3, 16, 16, 4


def build(name):
    """A zoo twin of tests/bench, or module:Class built as Class(C, H, W, classes) (module in the cwd)."""
    if ":" in name:
        sys.path.insert(0, os.getcwd())
        module, cls = name.split(":", 1)
        return getattr(__import__(module), cls)(C, H, W, CLASSES)
    return torch_bench.build(name, C, H, W, CLASSES)


def source(out):
    rng = np.random.default_rng(7)

    def make(n):
        labels = np.arange(n) % CLASSES
        rng.shuffle(labels)
        images = rng.integers(0, 120, size=(n, C, H, W))
        for i, lab in enumerate(labels):  # class c brightens band c of the rows and channel c % 3
            images[i, lab % C, lab * H // CLASSES:(lab + 1) * H // CLASSES, :] += 120
        return images.astype(np.uint8), labels.astype(np.int32)

    with h5py.File(out, "w") as f:
        for group, n in (("train", 48), ("test", 40)):
            images, labels = make(n)
            f.create_dataset(group + "/images", data=images)
            f.create_dataset(group + "/labels", data=labels)


def load(name, path):
    model = build(name)
    model.load_state_dict(torch.load(path), strict=True)
    return model


def run_evaluation(ref, y, metrics_csv):
    """model_logits' logits give the run's own last test accuracy and loss: it evaluates that model."""
    with open(metrics_csv) as f:
        last = list(csv.DictReader(f))[-1]
    z = ref.astype(np.float64)
    z -= z.max(1, keepdims=True)
    loss = float(np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(len(y)), y]))
    acc = float(np.mean(ref.argmax(1) == y))
    ok = abs(acc - float(last["test_accuracy"])) < 1e-9 and abs(loss - float(last["test_loss"])) <= 1e-5 * loss
    print("model_logits: accuracy %.4f loss %.6f; the run's metrics.csv: %s %s" % (acc, loss, last["test_accuracy"],
                                                                                 last["test_loss"]))
    return 0 if ok else 1


def logits(name, state, fedhet_h5, metrics_csv=None):
    with h5py.File(fedhet_h5, "r") as f:
        x, ref, y = torch.from_numpy(np.array(f["test_x"])), np.array(f["test_logits"]), np.array(f["test_y"])
    if metrics_csv and run_evaluation(ref, y, metrics_csv):
        return 1
    model = load(name, state).eval()
    torch.manual_seed(0)
    fresh = build(name).eval()  # the same architecture untrained: how far a model that was not carried over is
    with torch.no_grad():
        out, out_fresh = model(x).numpy(), fresh(x).numpy()
    scale = float(np.abs(ref).max())
    tol = RTOL * scale
    diff, diff_fresh = float(np.abs(out - ref).max()), float(np.abs(out_fresh - ref).max())
    agree = float((out.argmax(1) == ref.argmax(1)).mean())
    print("%s: %d test rows, max |logit| %.4g, max |torch - fedhet| %.3g (tolerance %.3g; an untrained torch model "
          "%.3g), argmax agreement %.3f" % (name, len(ref), scale, diff, tol, diff_fresh, agree))
    return 0 if scale > 0 and diff <= tol and diff_fresh > 100 * tol else 1


def init(name, out):
    torch.manual_seed(0)
    model = build(name)
    g = torch.Generator().manual_seed(1)
    for mod in model.modules():  # running statistics that differ from their defaults, to be carried over
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
            mod.num_batches_tracked.fill_(3)
    torch.save(model.state_dict(), out)
    return 0


def first_loss(name, state, fedhet_h5, partition, clients_csv):
    with h5py.File(fedhet_h5, "r") as f:
        x, y = torch.from_numpy(np.array(f["train_x"])), torch.from_numpy(np.array(f["train_y"])).long()
    with h5py.File(partition, "r") as f:
        offsets = np.array(f["clients/offsets"])
    fedhet_loss = {}
    with open(clients_csv) as f:
        for row in csv.DictReader(f):
            if int(float(row["round"])) in (0, 1) and int(float(row["steps"])) == 1:
                fedhet_loss[int(float(row["client"]))] = float(row["loss"])
    model = load(name, state).train()
    worst, lines = 0.0, []
    if sorted(fedhet_loss) != list(range(len(offsets) - 1)):
        print("%s: clients.csv has one-step losses for clients %s, expected 0..%d" % (name, sorted(fedhet_loss),
                                                                                   len(offsets) - 2))
        return 1
    for k, ref in sorted(fedhet_loss.items()):
        a, b = int(offsets[k]), int(offsets[k + 1])
        with torch.no_grad():
            loss = float(F.cross_entropy(model(x[a:b]), y[a:b]))
        worst = max(worst, abs(loss - ref) / abs(ref))
        lines.append("client %d (%d rows) torch %.6f fedhet %.6f" % (k, b - a, loss, ref))
    print("%s: %s; max relative difference %.3g (tolerance %.3g)" % (name, "; ".join(lines), worst, RTOL))
    return 0 if worst <= RTOL else 1


def same(a, b):
    sa, sb = torch.load(a), torch.load(b)
    if list(sa.keys()) != list(sb.keys()):
        print("keys differ: %s" % sorted(set(sa) ^ set(sb)))
        return 1
    bad = [k for k in sa if sa[k].shape != sb[k].shape or sa[k].dtype != sb[k].dtype or not torch.equal(sa[k], sb[k])]
    print("%d tensors, %d differ%s" % (len(sa), len(bad), (": " + ", ".join(bad[:5])) if bad else ""))
    return 1 if bad else 0


def main(argv):
    torch.set_num_threads(1)
    commands = {"source": source, "logits": logits, "init": init, "first-loss": first_loss, "same": same}
    words, worst = argv[1:], 0
    while words:  # several commands joined by "+" share one start of Python and torch
        n = words.index("+") if "+" in words else len(words)
        worst = max(worst, commands[words[0]](*words[1:n]) or 0)
        words = words[n + 1:]
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv))
