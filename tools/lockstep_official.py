"""What tools/lockstep-fedwmsam.py and tools/lockstep-fedlesam.py share: one w^0 and one set of clients for
fedhet and a method's official code, fedhet's run and its checkpoint, the official modules imported from a
user's checkout without copying or editing them, and the bound that each round's figures must keep.

Both sides start from one w^0 (a PyTorch initialisation of tests/bench's cnn twin, handed to fedhet through
`[model] init`), see the same clients (K clients of ROWS Fashion-MNIST rows, normalised as fedhet normalises
them) and take full-batch steps (batch = the client's rows), so that no shuffle can make the batches differ.
"""
import gzip
import importlib
import os
import subprocess
import sys
import types

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "bench"))
import torch_bench  # noqa: E402

FMNIST = "/usr/share/datasets/fashion-mnist/"
ROWS = 32  # rows per client = the batch: full-batch steps
# |fedhet - official| after a round may reach ULP_FACTOR x what the official code moves from itself when w^0 moves
# by one float ulp (rounding alone; the clip and the per-tensor perturbation amplify it from round to round), or
# BOUND x the official quantity when that is larger; a planted error lands 1e-2 of a step or more away.
BOUND = 1e-3
ULP_FACTOR = 10
# both sides' training: lr 0.05 x 0.998 a round, weight decay 1e-3, clip 10 (the codes' hard-wired max_norm)
TRAIN_CONFIG = """[data]
path = {part}
[model]
name = cnn
init = {init}
[train]
optimizer = sgd
lr = {lr}
weight_decay = {wd}
clip = 10
batch_size = {rows}
steps = {steps}
lr_decay = {lr_decay}
"""


def idx(name, offset):
    return np.frombuffer(gzip.open(FMNIST + name).read(), np.uint8, offset=offset)


def prepare(work, fedhet, clients):
    """The source set, fedhet's partition of it (iid: ROWS rows a client) and w^0 (init.pt, init.h5)."""
    src, part = os.path.join(work, "src.h5"), os.path.join(work, "part.h5")
    x = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    y = idx("train-labels-idx1-ubyte.gz", 8)
    xt = idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    yt = idx("t10k-labels-idx1-ubyte.gz", 8)
    n = clients * ROWS
    with h5py.File(src, "w") as f:
        f["/train/images"], f["/train/labels"] = x[:n], y[:n].astype(np.int32)
        f["/test/images"], f["/test/labels"] = xt[:200], yt[:200].astype(np.int32)
    subprocess.run([fedhet, "partition", src, part, "scheme=iid", "clients=%d" % clients, "--force"],
                   check=True, capture_output=True)
    torch.manual_seed(0)
    torch.save(model_func().state_dict(), os.path.join(work, "init.pt"))
    subprocess.run([sys.executable, os.path.join(HERE, "fedhet-torch"), "from-torch", os.path.join(work, "init.pt"),
                    os.path.join(work, "init.h5"), "--arch", "cnn", "--input", "1x28x28", "--classes", "10"],
                   check=True, capture_output=True)
    return part


def model_func():
    return torch_bench.build("cnn", 1, 28, 28, 10)


def init_model(work):
    m = model_func()
    m.load_state_dict(torch.load(os.path.join(work, "init.pt")))
    return m


def initial_params(work, utils, nudge):
    """fedhet's initial model and the official code's flat w0 of it (utils: the official utils module); nudge moves
    every entry of w0 one float up, for the rounding reference"""
    init = init_model(work)
    w0 = utils.get_mdl_params(init)
    if nudge:
        w0 = torch.from_numpy(np.nextafter(w0.numpy(), np.float32(np.inf)))
    return init, w0


def client_data(part):
    """The partition's clients and test rows as the official code's data object ('mnist': no augmentation)."""
    with h5py.File(part, "r") as f:
        mean = np.float32(np.array(f.attrs["mean"]).ravel()[0])
        std = np.float32(np.array(f.attrs["std"]).ravel()[0])
        norm = lambda a: (a.astype(np.float32) / np.float32(255) - mean) / std  # noqa: E731
        x, y, off = norm(f["/clients/images"][...]), f["/clients/labels"][...], f["/clients/offsets"][...]
        xt, yt = norm(f["/test/images"][...]), f["/test/labels"][...]
    k = len(off) - 1
    return types.SimpleNamespace(client_x=[x[off[i]:off[i + 1]] for i in range(k)],
                                 client_y=[y[off[i]:off[i + 1]] for i in range(k)], test_x=xt, test_y=yt)


def fedhet_run(o, config, rounds, name):
    """fedhet run of `config` for `rounds` rounds; its output folder."""
    cfg = os.path.join(o.workdir, name + ".ini")
    with open(cfg, "w") as f:
        f.write(config)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    subprocess.run([o.fedhet, "run", cfg, "fl.rounds=%d" % rounds, "output.dir=" + os.path.join(o.workdir, "out"),
                    "output.name=" + name, "--force"], check=True, capture_output=True, env=env, cwd=o.workdir)
    return os.path.join(o.workdir, "out", name)


def import_official(checkout, modules):
    """The official modules, imported from the user's checkout as they are. A package whose __init__.py fails is
    entered without it (FedLESAM's server/__init__.py imports files its repository lacks); scipy and tqdm,
    imported but unused on these paths, get stand-ins when missing."""
    if checkout not in sys.path:
        sys.path.insert(0, checkout)
    for name, parts in (("scipy", ("io", "stats")), ("tqdm", ())):
        try:
            importlib.import_module(name)
        except ImportError:
            stand_in = types.ModuleType(name)
            sys.modules[name] = stand_in
            for p in parts:
                setattr(stand_in, p, types.ModuleType(name + "." + p))
                sys.modules[name + "." + p] = getattr(stand_in, p)
            if name == "tqdm":
                stand_in.tqdm = lambda it=None, *a, **k: it
    for package in sorted({m.split(".")[0] for m in modules if "." in m}):
        try:
            importlib.import_module(package)
        except ImportError:  # its __init__.py fails: the package without it, its modules as they are
            pkg = types.ModuleType(package)
            pkg.__path__ = [os.path.join(checkout, package)]
            sys.modules[package] = pkg
    return [importlib.import_module(m) for m in modules]


def quiet(fn):
    """fn() with stdout to /dev/null: the official code prints its setup and every client's progress."""
    devnull = open(os.devnull, "w")
    stdout, sys.stdout = sys.stdout, devnull
    try:
        return fn()
    finally:
        sys.stdout = stdout
        devnull.close()


def intended_first_step(sign):
    """a first_step for the official LESAM/WMSAM optimizers with docs/methods/sam.md's intended perturbation:
    eps = sign rho d/(||d|| + 1e-7) over the whole flat direction d (none without one). ||d|| is the exact L2 norm
    (§0.1; fedhet sums it in double): torch's float32 norm of the cnn's 1.7 M entries is off by 9e-5 of it on
    FedWMSAM's first delta, which moves eps (radius 0.1) by 9e-6, far beyond rounding."""
    @torch.no_grad()
    def first_step(self, g_update):
        for group in self.param_groups:
            if g_update is None:
                continue
            d = g_update.detach()
            scale = sign * group["rho"] / (float(d.double().norm()) + 1e-7)
            offset = 0
            for p in group["params"]:
                n = p.numel()
                e_w = d[offset:offset + n].reshape(p.shape).to(p) * scale
                offset += n
                p.add_(e_w)
                self.state[p]["e_w"] = e_w
    return first_step


def install_first_step(optimizer, compat, intended_sign, plant):
    """optimizer.first_step: the official one or the intended one; plant sign: the direction negated"""
    if not hasattr(optimizer, "official_first_step"):
        optimizer.official_first_step = optimizer.first_step
    first_step = intended_first_step(intended_sign) if compat == "intended" else optimizer.official_first_step
    if plant == "sign":
        optimizer.first_step = lambda self, g: first_step(self, None if g is None else -g)
    else:
        optimizer.first_step = first_step


def add_arguments(ap, checkout, env, workdir):
    """the options both tools share"""
    ap.add_argument("--official", default=os.environ.get(env), help="checkout of %s (default: $%s)" % (checkout, env))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--compat", choices=("official", "intended", "both"), default="both")
    ap.add_argument("--plant", choices=("rho", "sign"), help="a planted error on the official side")
    ap.add_argument("--workdir", default=workdir)
    ap.add_argument("--fedhet", default=os.path.join(HERE, "..", "bin", "fedhet"))


def setup(o, tool, marker, env):
    """checks the checkout, makes the paths absolute and prepares the data and w^0; the partition's path"""
    if not o.official or not os.path.isfile(os.path.join(o.official, marker)):
        sys.exit("%s: %s: not a checkout of the official code (no %s); give --official DIR or %s"
                 % (tool, o.official, marker, env))
    o.official, o.workdir, o.fedhet = (os.path.abspath(p) for p in (o.official, o.workdir, o.fedhet))
    os.makedirs(o.workdir, exist_ok=True)
    return prepare(o.workdir, o.fedhet, o.clients)


def compats(o):
    return ("official", "intended") if o.compat == "both" else (o.compat,)


def dist(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - np.asarray(b, np.float64)))


def norm(a):
    return float(np.linalg.norm(np.asarray(a, np.float64)))


class Bound:
    """Each compared quantity's |fedhet - official| against BOUND x its scale or ULP_FACTOR x the official code's
    own distance under a one-ulp change of w^0, whichever is larger."""

    def __init__(self):
        self.failures = []

    def check(self, label, diff, scale, ulp=None):
        limit = BOUND * scale
        if ulp is not None:
            limit = max(limit, ULP_FACTOR * ulp)
        if not diff <= limit:
            self.failures.append("%s: |fedhet - official| %.3g > bound %.3g" % (label, diff, limit))

    def verdict(self, tool):
        for f in self.failures:
            print("%s: beyond the bound: %s" % (tool, f))
        print("%s: %s" % (tool, "FAIL" if self.failures else "agrees within the bound"))
        return 1 if self.failures else 0
