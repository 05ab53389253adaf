#!/usr/bin/python3
"""lockstep-fedwmsam: fedhet's FedWMSAM against the official FedWMSAM code, in lockstep.

usage:
  tools/lockstep-fedwmsam.py --official DIR [--rounds R] [--show 1,2,3] [--clients K] [--count M]
                             [--steps S] [--step-sweep] [--calibrate] [--workdir DIR] [--fedhet BIN]

DIR is a checkout of the paper's code (github Huang-Yongzhi/NeurlPS_FedWMSAM, commit a922a1d); nothing of it
is copied. Both sides start from one w^0 (a PyTorch initialisation of tests/bench's cnn twin, handed to
fedhet through `[model] init`), see the same clients (K clients of 32 Fashion-MNIST rows, normalised as
fedhet normalises them) and take full-batch steps (batch 32 = the client's rows, so no shuffle can make the
batches differ), with the clients fedhet selects (`fl.selection = count` when --count is given, else all)
imposed on the official server. Settings: lr 0.05 x 0.998 per round, weight decay 1e-3, clip 10 (the code's
hard-wired max_norm), rho 0.1, alpha_0 0.1, K = S steps (local_epochs = S in the code, n_0/B = 1),
fedhet with `compat = official`.

After each round it prints the distance between the two global models, server momenta, global and client
control variates, and both alphas. --calibrate also runs the official code against itself with w^0 moved by
one float ulp: the distance rounding alone opens, which a faithful implementation matches. --step-sweep
compares round 1 after 1..S local steps, tensor by tensor.

Needs /usr/bin/python3 with python3-torch, python3-h5py and the Fashion-MNIST IDX files
(dataset-fashion-mnist). The official code imports scipy without using it here; a stand-in module is
put in its place when scipy is missing.
"""
import argparse
import csv
import gzip
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
LR, LR_DECAY, WD, RHO, ALPHA0 = 0.05, 0.998, 1e-3, 0.1, 0.1
CONFIG = """[data]
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
[fl]
selection = {selection}
count = {count}
eval_every = 1
checkpoint_every = 1
[algo]
method = fedwmsam
rho = {rho}
alpha_0 = {alpha0}
compat = official
"""


def idx(name, offset):
    return np.frombuffer(gzip.open(FMNIST + name).read(), np.uint8, offset=offset)


def prepare(work, fedhet, clients):
    """The source set, fedhet's partition of it (iid: ROWS rows a client) and w^0 for both sides."""
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
    torch.save(torch_bench.build("cnn", 1, 28, 28, 10).state_dict(), os.path.join(work, "init.pt"))
    subprocess.run([sys.executable, os.path.join(HERE, "fedhet-torch"), "from-torch", os.path.join(work, "init.pt"),
                    os.path.join(work, "init.h5"), "--arch", "cnn", "--input", "1x28x28", "--classes", "10"],
                   check=True, capture_output=True)
    return part


def fedhet_run(o, part, rounds, steps, name):
    """fedhet for `rounds` rounds; its checkpoint's server and client state and the clients it selected."""
    cfg = os.path.join(o.workdir, "lockstep.ini")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(part=part, init=os.path.join(o.workdir, "init.h5"), lr=LR, wd=WD, rows=ROWS,
                              steps=steps, lr_decay=LR_DECAY, rho=RHO, alpha0=ALPHA0,
                              selection="count" if o.count else "all", count=o.count or 1))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    subprocess.run([o.fedhet, "run", cfg, "fl.rounds=%d" % rounds, "output.dir=" + os.path.join(o.workdir, "out"),
                    "output.name=" + name, "--force"], check=True, capture_output=True, env=env, cwd=o.workdir)
    run = os.path.join(o.workdir, "out", name)
    with h5py.File(os.path.join(run, "checkpoint.h5"), "r") as f:
        state = dict(w=f["/server/global"][...], c=f["/server/vectors"][0], mom=f["/server/vectors"][1],
                     ci=f["/clients/vector_0"][...], alpha=float(f["/server/scalars"][1]),
                     model={k: f["/model/" + k][...] for k in f["/model"]})
    rows = list(csv.DictReader(open(os.path.join(run, "clients.csv"))))
    selected = [np.array(sorted(int(r["client"]) for r in rows if int(r["round"]) == t)) for t in range(rounds)]
    return state, selected


def official_run(o, part, rounds, steps, selected, nudge=False):
    """The official server and clients, unmodified, on the same clients and selection; the state after each round."""
    if o.official not in sys.path:
        sys.path.insert(0, o.official)
    try:
        import scipy.io  # noqa: F401
        import scipy.stats  # noqa: F401
    except ImportError:
        stand_in = types.ModuleType("scipy")
        stand_in.io, stand_in.stats = types.ModuleType("scipy.io"), types.ModuleType("scipy.stats")
        sys.modules.update({"scipy": stand_in, "scipy.io": stand_in.io, "scipy.stats": stand_in.stats})
    import server as official_server
    from utils import get_mdl_params

    with h5py.File(part, "r") as f:
        mean = np.float32(np.array(f.attrs["mean"]).ravel()[0])
        std = np.float32(np.array(f.attrs["std"]).ravel()[0])
        norm = lambda a: (a.astype(np.float32) / np.float32(255) - mean) / std  # noqa: E731
        x, y, off = norm(f["/clients/images"][...]), f["/clients/labels"][...], f["/clients/offsets"][...]
        xt, yt = norm(f["/test/images"][...]), f["/test/labels"][...]
    k = len(off) - 1
    # dataset 'mnist': the code's Dataset hands the float rows over as they are (no augmentation)
    data = types.SimpleNamespace(client_x=[x[off[i]:off[i + 1]] for i in range(k)],
                                 client_y=[y[off[i]:off[i + 1]] for i in range(k)], test_x=xt, test_y=yt)
    args = types.SimpleNamespace(method="FedWMSAM", dataset="mnist", total_client=k, comm_rounds=rounds,
                                 local_epochs=steps, batchsize=ROWS, weight_decay=WD, local_learning_rate=LR,
                                 global_learning_rate=1.0, lr_decay=LR_DECAY, seed=0, active_ratio=1.0, use_RI=False,
                                 alpha=ALPHA0, beta=0.1, rho=RHO, mode="normal", out_file="", non_iid=False)
    model_func = lambda: torch_bench.build("cnn", 1, 28, 28, 10)  # noqa: E731
    init = model_func()
    init.load_state_dict(torch.load(os.path.join(o.workdir, "init.pt")))
    w0 = get_mdl_params(init)
    if nudge:
        w0 = torch.from_numpy(np.nextafter(w0.numpy(), np.float32(np.inf)))
    devnull = open(os.devnull, "w")
    stdout, sys.stdout = sys.stdout, devnull  # the code prints its setup and every client's progress
    try:
        srv = official_server.FedWMSAM("cpu", model_func, init, w0.clone(), data, "FedWMSAM", args)
    finally:
        sys.stdout = stdout
    states = []
    srv._activate_clients_ = lambda t: selected[t]
    srv._test_ = lambda t, sel: states.append(dict(w=srv.server_model_params_list.clone().numpy(),
                                                   mom=srv.momentum.clone().numpy(), c=srv.c_params_list.clone().numpy(),
                                                   ci=srv.c_i_params_list.clone().numpy(), alpha=args.alpha))
    srv._save_results_ = srv._summary_ = lambda: None
    stdout, sys.stdout = sys.stdout, devnull
    try:
        srv.train()
    finally:
        sys.stdout = stdout
    return states, w0.numpy()


def dist(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - np.asarray(b, np.float64)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--official", required=True, help="checkout of Huang-Yongzhi/NeurlPS_FedWMSAM")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--show", default="", help="rounds to compare (default: every round)")
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--count", type=int, default=0, help="clients a round (default: all)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--step-sweep", action="store_true")
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--workdir", default="outputs/lockstep-fedwmsam")
    ap.add_argument("--fedhet", default=os.path.join(HERE, "..", "bin", "fedhet"))
    o = ap.parse_args()
    if not os.path.isfile(os.path.join(o.official, "server", "FedWMSAM.py")):
        sys.exit("lockstep-fedwmsam: %s: not a checkout of the official FedWMSAM code (no server/FedWMSAM.py)"
                 % o.official)
    o.workdir, o.fedhet = os.path.abspath(o.workdir), os.path.abspath(o.fedhet)
    os.makedirs(o.workdir, exist_ok=True)
    part = prepare(o.workdir, o.fedhet, o.clients)
    show = [int(s) for s in o.show.split(",")] if o.show else list(range(1, o.rounds + 1))

    if o.step_sweep:
        print("round 1 after s steps, tensor by tensor: |fedhet - official| (|official's step|)")
        for s in range(1, o.steps + 1):
            mine, selected = fedhet_run(o, part, 1, s, "sweep%d" % s)
            theirs, w0 = official_run(o, part, 1, s, selected)
            offset, parts = 0, []
            for name in ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight", "fc1.bias",
                         "fc2.weight", "fc2.bias"):
                n = mine["model"][name].size
                a, b = mine["w"][offset:offset + n], theirs[0]["w"][offset:offset + n]
                parts.append("%s %.2g (%.2g)" % (name, dist(a, b), dist(b, w0[offset:offset + n])))
                offset += n
            print("s=%d: %s" % (s, ", ".join(parts)))
        return

    ref = None
    print("round  |step|     |w diff|  |mom diff|  |c diff|  max|c_k diff|  alpha fedhet / official")
    theirs, w0 = None, None
    for r in show:
        mine, selected = fedhet_run(o, part, r, o.steps, "r%d" % r)
        if theirs is None:
            _, selected_all = fedhet_run(o, part, max(show), o.steps, "r%d" % max(show))
            theirs, w0 = official_run(o, part, max(show), o.steps, selected_all)
            if o.calibrate:
                ref, _ = official_run(o, part, max(show), o.steps, selected_all, nudge=True)
        t = theirs[r - 1]
        p = t["w"].size
        prev = theirs[r - 2]["w"] if r > 1 else w0
        line = "%5d  %.4g  %.3g  %.3g  %.3g  %.3g  %.8f / %.8f" % (
            r, dist(t["w"], prev), dist(mine["w"][:p], t["w"]), dist(mine["mom"][:p], t["mom"]),
            dist(mine["c"][:p], t["c"]), max(dist(mine["ci"][i, :p], t["ci"][i]) for i in range(len(t["ci"]))),
            mine["alpha"], t["alpha"])
        if ref is not None:
            line += "   official vs official + 1 ulp: |w diff| %.3g  |mom diff| %.3g" % (
                dist(ref[r - 1]["w"], t["w"]), dist(ref[r - 1]["mom"], t["mom"]))
        print(line, flush=True)


if __name__ == "__main__":
    main()
