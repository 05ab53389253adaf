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
[algo] keys as given to fedhet (beta, eta_g; rho_max, alpha_rho, gamma_h, kappa, beta), and c=fedhet.

The setting makes every local step a full-batch step (batch larger than every client), every client take
part every round and the model an mlp, so the twin needs neither fedhet's shuffles nor its batch order:
the same initial weights and the same data give the same trajectory up to float rounding. The twin runs in
float64. FedSCAM's alignment c_i and summary u_t go through fedhet's Philox sign sketch, which the equations
leave to the implementation: the lockstep runs with kappa = beta = 0, where no quantity depends on c_i, and
reports c_i against the exact (unprojected) cosine for information only; with c=fedhet the twin takes fedhet's
c_i (its sketch) as given and computes everything downstream (h_adj, the radius, the weights with beta c_i),
which tests the equations with kappa, beta > 0 except the sketch itself.

Prints, per round, each compared quantity's largest relative difference and the first that exceeds the
tolerance; exit 0 when all agree, 1 otherwise. A deliberately wrong twin (FedAvgM: beta = 0, which is
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
    def __init__(self, method, model, w0, clients, lr, steps, opts, wrong=False):
        self.method, self.model, self.w, self.clients = method, model, w0.clone(), clients
        self.lr, self.steps, self.o, self.wrong = lr, steps, opts, wrong
        self.v = torch.zeros_like(w0)  # FedAvgM's server momentum, v^0 = 0
        self.u = torch.zeros_like(w0)  # FedSCAM's previous global update (unprojected, for the c_i report)
        self.c_given = None            # per client, fedhet's c_i for the round (c=fedhet)

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
                e_p = 0.5 * rho_max / (1 + a_rho * h) * g0 / g0.norm()  # 2.-3. pilot radius and direction
                v = -grad_at(self.model, self.w + e_p, x, y)[0]
            un = float(self.u.norm())
            c = float(v @ self.u / (v.norm() * un)) if un > 0 else 0.0  # 5. exact cosine (fedhet: sketched)
            c_exact = c
            if self.c_given is not None:
                c = self.c_given[len(rows)]  # fedhet's sketched c_i: everything downstream of it is the twin's
            h_adj = h * max(0.0, 1 - kappa * c)                         # 6.
            rho = rho_max / (1 + a_rho * h_adj)                         # 7.
            if self.wrong:
                rho = rho_max                                           # the wrong twin: no per-client radius
            wi = local(self.model, self.w, x, y, self.lr, self.steps, None if self.method == "fedscam_wa" else rho)
            deltas.append(wi - self.w)
            rows.append(dict(h=h, c=c, c_exact=c_exact, h_adj=h_adj, rho=rho, delta_norm=float(deltas[-1].norm())))
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
        self.u = new - self.w                                           # server 5. (unprojected)
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
    twin = Twin(method, model, w0, clients, lr, steps, opts)
    wrong = Twin(method, model, w0, clients, lr, steps, opts, wrong=True)
    ok = True
    for r in range(1, rounds + 1):
        before = twin.w.clone()
        run = os.path.join(runs, f"r{r}")
        fc = fedhet_clients(os.path.join(run, "clients.csv"), r - 1)
        if opts.get("c") == "fedhet":
            twin.c_given = wrong.c_given = [fc[i]["c"] for i in range(len(clients))]
        rows = twin.round()
        wrong.round()
        fw = fedhet_model(os.path.join(run, "run.h5"), names)
        step = float((twin.w - before).norm())
        diff = float((fw - twin.w).norm()) / step
        off_wrong = float((wrong.w - twin.w).norm()) / step
        worst, first = {}, None
        for i, tr in rows.items():
            for key in ("h", "h_adj", "rho", "weight", "delta_norm"):
                if key == "rho" and method == "fedscam_wa":
                    continue  # no SAM step: the WA ablation has no radius
                if key not in fc.get(i, {}):
                    raise SystemExit(f"{run}/clients.csv: round {r - 1} client {i} has no {key}")
                d = abs(fc[i][key] - tr[key]) / max(abs(tr[key]), 1e-30)
                worst[key] = max(worst.get(key, 0.0), d)
                if d > RTOL and first is None:
                    first = f"round {r} client {i} {key}: fedhet {fc[i][key]:.9g}, twin {tr[key]:.9g}"
        line = " ".join(f"{k} {v:.2g}" for k, v in worst.items())
        if rows:
            cdev = max(abs(fc[i].get("c", 0.0) - tr["c_exact"]) for i, tr in rows.items())
            line += f"; c (sketched, not compared) within {cdev:.2g} of the exact cosine"
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
