#!/usr/bin/python3
"""Independent twins of fedhet's FedAvgM and FedSCAM (full, WA and SAM), written from the methods' equations
(spec baselines-and-protocols A.3; algorithms-sam 1 and 10, as docs/methods and `fedhet methods` state them),
run in lockstep with fedhet and compared round by round. Used by tests/twins/test_twins.sh.

  twins.py lockstep NAME METHOD DATA.h5 PARTITION.h5 INIT.pt RUNS_DIR ROUNDS LR STEPS KEY=VALUE...
      [+ lockstep ...]        several joined by "+" share one start of Python and torch

NAME labels the output lines ("NAME round R: ...", "NAME: first difference: ...", "NAME: agrees").

METHOD: fedavgm | fedscam | fedscam_wa | fedscam_sam. DATA.h5: model_logits' output for the partition (its
/train_x are the rows as fedhet normalises them, client by client in the partition's order). INIT.pt: the
initial state_dict fedhet started from ([model] init). RUNS_DIR/r1, r2, ...: fedhet runs of the same config
stopped after 1, 2, ... rounds (run.h5: /model; clients.csv: per-client quantities). KEY=VALUE: the method's
[algo] keys as given to fedhet (beta, eta_g; rho_max, alpha_rho, gamma_h, kappa, beta, proj_dim) and
seed=fl.seed (FedSCAM's projection is keyed by it). --mutate pilot_radius|pilot_sign plants an error in the
twin (FedSCAM: the pilot radius x10, or the pilot's ascent e_p flipped): the lockstep must then fail.

The setting makes every local step a full-batch step (batch larger than every client), every client take
part every round and the model an mlp, so the twin needs neither fedhet's shuffles nor its batch order:
the same initial weights and the same data give the same trajectory up to float rounding. The twin runs in
float64. FedSCAM's summaries go through the signed count sketch of docs/methods/sam.md §10: bucket(k) =
floor(r0 d / 2^32) and sign(k) = - when the top bit of r1 is set, (r0, r1, r2, r3) = Philox4x32-10 with key
(seed low 32 bits, seed bits 32..55 | purpose 7 << 24) and counter (k, 0xF5CA0001, k >> 32, 0), written here
from the Random123 definition (checked against its known answers). So the twin computes every quantity
itself: the probe h_i, the pilot radius and direction, s_i, c_i = cos(s_i, u_{t-1}), h_adj, the radius, the
weights and u_t, and compares fedhet's h, c, h_adj, rho, weight and ||Delta|| of every client every round.

Prints, per round, each compared quantity's largest difference (relative; c absolute) and the first that exceeds
the tolerance; exit 0 when all agree, 1 otherwise. A deliberately wrong twin (FedAvgM: beta = 0, which is
FedAvg; FedSCAM: the radius and weights of another variant) is printed beside it, to show the comparison
can fail.
"""
import csv
import math
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "bench"))
import torch_bench  # noqa: E402

# float32 (fedhet) against float64 (the twin) over a few full-batch steps: rounding moves a weight by about
# 1e-7 of its size per operation; 1e-4 of the round's step is ~100x that, and a wrong weight, radius or
# momentum moves the model by a sizeable fraction of the step (the wrong twins below: 1e-2 to 1)
RTOL = 1e-4
C, H, W, CLASSES = 3, 16, 16, 4
SAM_E = 1e-12


MUTATIONS = ("pilot_radius", "pilot_sign")

# Philox4x32-10 (Random123), vectorised over counters; uint64 holds every 32x32-bit product
PHILOX_M, PHILOX_W, MASK32 = (0xD2511F53, 0xCD9E8D57), (0x9E3779B9, 0xBB67AE85), np.uint64(0xFFFFFFFF)
PURPOSE_PROJECTION, TAG_SKETCH = 7, 0xF5CA0001


def philox(ctr, key):
    c = [np.asarray(x, np.uint64) & MASK32 for x in ctr]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    m0, m1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(PHILOX_W[0])) & MASK32, (k1 + np.uint64(PHILOX_W[1])) & MASK32
        p0, p1 = m0 * c[0], m1 * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & MASK32, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & MASK32]
    return c


# Random123's known answers: a wrong Philox would make every sketch differ for a reason not worth chasing
assert [int(v) for v in philox((0, 0, 0, 0), (0, 0))] == [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
assert [int(v) for v in philox((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0))] == \
    [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]


class Sketch:
    """Proj_d of docs/methods/sam.md §10: the signed count sketch of coordinate k from Philox (seed, projection)"""

    def __init__(self, seed, d, n):
        k = np.arange(n, dtype=np.uint64)
        key = (seed & 0xFFFFFFFF, ((seed >> 32) & 0xFFFFFF) | (PURPOSE_PROJECTION << 24))
        r = philox((k, np.full(n, TAG_SKETCH, np.uint64), k >> np.uint64(32), np.zeros(n, np.uint64)), key)
        self.bucket = torch.from_numpy(((r[0] * np.uint64(d)) >> np.uint64(32)).astype(np.int64))
        self.sign = torch.from_numpy(np.where(r[1] >> np.uint64(31), -1.0, 1.0))
        self.d = d

    def __call__(self, x):
        """Proj_d(Normalize(x)); a zero vector stays zero"""
        norm = float(x.norm())
        out = torch.zeros(self.d, dtype=torch.float64)
        return out.index_add_(0, self.bucket, self.sign * x / norm) if norm > 0 else out


def cosine(a, b):
    na, nb = float(a.norm()), float(b.norm())
    return float(a @ b) / (na * nb) if na > 0 and nb > 0 else 0.0


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def set_flat(model, vec):
    torch.nn.utils.vector_to_parameters(vec, list(model.parameters()))


def grad_at(model, vec, x, y):
    """mean cross-entropy's gradient at the flat weights vec on all of (x, y), and the loss"""
    set_flat(model, vec)
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    g = torch.autograd.grad(loss, list(model.parameters()))
    return torch.cat([t.reshape(-1) for t in g]), float(loss)


def local(model, w, x, y, lr, steps, rho):
    """steps of full-batch SGD (rho None) or SAM at radius rho (docs/methods/sam.md §1), momentum 0"""
    w = w.clone()
    for _ in range(steps):
        g, _ = grad_at(model, w, x, y)
        if rho is not None:
            eps = rho * g / (g.norm() + SAM_E)
            g, _ = grad_at(model, w + eps, x, y)
        w = w - lr * g
    return w


class Twin:
    def __init__(self, method, model, w0, clients, lr, steps, opts, wrong=False, mutate=None):
        self.method, self.model, self.w, self.clients = method, model, w0.clone(), clients
        self.lr, self.steps, self.o, self.wrong, self.mutate = lr, steps, opts, wrong, mutate
        self.v = torch.zeros_like(w0)  # FedAvgM's server momentum, v^0 = 0
        if method != "fedavgm":
            # d = proj_dim, or 256 under 1M trainable parameters (the mlp here)
            d = int(opts.get("proj_dim", 0)) or (256 if w0.numel() < 1_000_000 else 512)
            self.proj = Sketch(int(opts.get("seed", 0)), d, w0.numel())
            self.u = torch.zeros(d, dtype=torch.float64)  # u_{t-1}, zero at t = 0

    def round(self):
        n = torch.tensor([float(len(y)) for _, y in self.clients], dtype=torch.float64)
        if self.method == "fedavgm":
            # docs/methods/baselines.md A.3: g = sum_k p_k (w - w_k), p_k = n_k / sum n; v = beta v + g; w = w - eta_g v
            beta = 0.0 if self.wrong else float(self.o.get("beta", 0.9))
            eta = float(self.o.get("eta_g", 1.0))
            ws = [local(self.model, self.w, x, y, self.lr, self.steps, None) for x, y in self.clients]
            p = n / n.sum()
            g = sum(pk * (self.w - wk) for pk, wk in zip(p, ws))
            self.v = beta * self.v + g
            self.w = self.w - eta * self.v
            return {}
        # FedSCAM, docs/methods/sam.md §10, with a full batch: the probe's B batches are the one batch
        rho_max, a_rho = float(self.o.get("rho_max", 0.05)), float(self.o.get("alpha_rho", 1.0))
        gamma, kappa, beta = float(self.o.get("gamma_h", 1.0)), float(self.o.get("kappa", 0.5)), float(self.o.get("beta", 0.8))
        rows, deltas = [], []
        for x, y in self.clients:
            g0, _ = grad_at(self.model, self.w, x, y)
            h = float(g0.norm())                                        # 1. h_i
            if self.method == "fedscam_wa":
                v = -g0                                                 # 3. (WA) the plain-gradient pilot
            else:
                rho_pilot = 0.5 * rho_max / (1 + a_rho * h)             # 2. pilot radius
                if self.mutate == "pilot_radius":
                    rho_pilot *= 10
                e_p = rho_pilot * g0 / g0.norm()                        # 3. pilot ascent and direction
                if self.mutate == "pilot_sign":
                    e_p = -e_p
                v = -grad_at(self.model, self.w + e_p, x, y)[0]
            c = cosine(self.proj(v), self.u)                            # 4.-5. s_i and c_i (0 while u = 0)
            h_adj = h * max(0.0, 1 - kappa * c)                         # 6.
            rho = rho_max / (1 + a_rho * h_adj)                         # 7.
            if self.wrong:
                rho = rho_max                                           # the wrong twin: no per-client radius
            wi = local(self.model, self.w, x, y, self.lr, self.steps, None if self.method == "fedscam_wa" else rho)
            deltas.append(wi - self.w)
            rows.append(dict(h=h, c=c, h_adj=h_adj, rho=rho, delta_norm=float(deltas[-1].norm())))
        if self.method == "fedscam_sam" or (self.wrong and self.method == "fedscam_wa"):
            s = n.clone()                                               # server 3. (SAM) sample counts
        else:
            s = torch.tensor([float(k) / (1 + gamma * r["h_adj"]) * max(0.0, 1 + beta * r["c"])
                              for k, r in zip(n, rows)], dtype=torch.float64)
            if float(s.sum()) == 0.0:
                s = n.clone()
        p = s / s.sum()
        for r, pk in zip(rows, p):
            r["weight"] = float(pk)
        new = self.w + sum(pk * d for pk, d in zip(p, deltas))          # server 4.
        self.u = self.proj(new - self.w)                                # server 5.
        self.w = new
        return {i: r for i, r in enumerate(rows)}


def fedhet_model(path, names):
    with h5py.File(path, "r") as f:
        got = sorted(f["model"].keys())
        if got != sorted(names):
            raise SystemExit(f"{path}: /model holds {got}, the twin's parameters are {sorted(names)}")
        return torch.cat([torch.from_numpy(np.array(f["model"][k], dtype=np.float64)).reshape(-1) for k in names])


def fedhet_clients(path, rnd):
    out = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            if int(float(row["round"])) == rnd:
                out[int(float(row["client"]))] = {k: float(v) for k, v in row.items() if v not in ("", None)}
    return out


def lockstep(label, method, data_h5, partition, init_pt, runs, rounds, lr, steps, *kv):
    torch.set_default_dtype(torch.float64)
    kv, mutate = list(kv), None
    if "--mutate" in kv:
        at = kv.index("--mutate")
        mutate = kv[at + 1] if at + 1 < len(kv) else ""
        del kv[at:at + 2]
        if mutate not in MUTATIONS:
            raise SystemExit(f"twins.py: --mutate {mutate!r}: one of {', '.join(MUTATIONS)}")
    opts = dict(a.split("=", 1) for a in kv)
    rounds, lr, steps = int(rounds), float(lr), int(steps)
    with h5py.File(data_h5, "r") as f:
        x, y = torch.from_numpy(np.array(f["train_x"], dtype=np.float64)), torch.from_numpy(np.array(f["train_y"])).long()
    with h5py.File(partition, "r") as f:
        off = np.array(f["clients/offsets"])
    clients = [(x[off[k]:off[k + 1]], y[off[k]:off[k + 1]]) for k in range(len(off) - 1)]
    model = torch_bench.build("mlp", C, H, W, CLASSES).double()
    state = torch.load(init_pt)
    model.load_state_dict({k: v.double() for k, v in state.items()}, strict=True)
    names = [k for k, _ in model.named_parameters()]
    w0 = flat(model)
    twin = Twin(method, model, w0, clients, lr, steps, opts, mutate=mutate)
    wrong = Twin(method, model, w0, clients, lr, steps, opts, wrong=True)
    ok = True
    for r in range(1, rounds + 1):
        before = twin.w.clone()
        run = os.path.join(runs, f"r{r}")
        fc = fedhet_clients(os.path.join(run, "clients.csv"), r - 1)
        rows = twin.round()
        wrong.round()
        fw = fedhet_model(os.path.join(run, "run.h5"), names)
        step = float((twin.w - before).norm())
        diff = float((fw - twin.w).norm()) / step
        off_wrong = float((wrong.w - twin.w).norm()) / step
        worst, first = {}, None
        for i, tr in rows.items():
            for key in ("h", "c", "h_adj", "rho", "weight", "delta_norm"):
                if key == "rho" and method == "fedscam_wa":
                    continue  # no SAM step: the WA ablation has no radius
                if key not in fc.get(i, {}):
                    raise SystemExit(f"{run}/clients.csv: round {r - 1} client {i} has no {key}")
                # c, a cosine, absolutely (it is 0 in the first round); the others relative to the twin's
                d = abs(fc[i][key] - tr[key]) / (1.0 if key == "c" else max(abs(tr[key]), 1e-30))
                worst[key] = max(worst.get(key, 0.0), d)
                if d > RTOL and first is None:
                    first = f"round {r} client {i} {key}: fedhet {fc[i][key]:.9g}, twin {tr[key]:.9g}"
        line = " ".join(f"{k} {v:.2g}" for k, v in worst.items())
        if diff > RTOL and first is None:
            first = f"round {r} global model: |fedhet - twin| = {diff:.3g} of the round's step"
        print(f"{label} round {r}: model |fedhet - twin| / |step| {diff:.2g} (tolerance {RTOL:g}; the wrong twin "
              f"{off_wrong:.2g}){'; per client: ' + line if line else ''}")
        if first:
            print(f"{label}: first difference: {first}")
            return 1
        if r == rounds and off_wrong <= 100 * RTOL:  # FedAvgM's wrong twin (FedAvg) is the same in round 1
            print(f"{label}: the wrong twin is within {off_wrong:.2g}: the comparison cannot tell them apart")
            ok = False
    if ok:
        print(f"{label}: agrees")
    return 0 if ok else 1


def main(argv):
    torch.set_num_threads(1)
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) > 1 else 1
    words, worst = argv[1:], 0
    while words:
        n = words.index("+") if "+" in words else len(words)
        if words[0] != "lockstep" or n < 10:
            print(__doc__)
            return 1
        worst = max(worst, lockstep(*words[1:n]))
        words = words[n + 1:]
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv))
