#!/usr/bin/python3
"""lockstep-fedlesam: fedhet's FedLESAM against the official FedLESAM code, in lockstep; exits 1 beyond the bound.

usage:
  tools/lockstep-fedlesam.py --official DIR [--rounds R] [--clients K] [--steps S] [--compat official|intended|both]
                             [--plant rho|sign] [--workdir DIR] [--fedhet BIN]

DIR (or the environment's FEDLESAM_OFFICIAL) is a checkout of github MediaBrain-SJTU/FedLESAM (commit d6663cc);
nothing of it is copied. Its server.FedLESAM and client.fedlesam classes and optimizer.LESAM run unmodified
(the package server/__init__.py, which imports files the repository lacks, is bypassed, not edited), beside
`fedhet run` with `method = fedlesam`, `mode = code`: one w^0, K clients of 32 Fashion-MNIST rows, full-batch
steps, every client every round (mode = code equals mode = paper then). Settings: lr 0.05 x 0.998 per round,
weight decay 1e-3, clip 10 (the code's hard-wired max_norm), rho 0.1, S local steps (local_epochs = S, n_0/B = 1).

compat official: fedhet's `compat = official` against the code as it is. compat intended: fedhet's default
against the same code with LESAM.first_step replaced by docs/methods/sam.md §8's intended perturbation,
eps = -rho gu/(||gu|| + 1e-7) over the whole flat vector (written here; everything else stays the official code).

After each round it prints the official step, |fedhet - official| of the global model and the distance the
official code moves from itself when w^0 moves by one float ulp (what rounding alone opens). The bound: every
round's distance at most 10x that ulp distance, or 1e-3 of the official step when that is larger. Exit 0
within the bound, 1 beyond it. --plant changes the official side (rho: its radius x10; sign: its perturbation
negated): the tool must then exit 1.

Needs /usr/bin/python3 with python3-torch, python3-torchvision (imported by the code's dataset.py), python3-h5py
and the Fashion-MNIST IDX files (dataset-fashion-mnist).
"""
import argparse
import os
import sys
import types

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import lockstep_official as ls  # noqa: E402

LR, LR_DECAY, WD, RHO = 0.05, 0.998, 1e-3, 0.1
CONFIG = ls.TRAIN_CONFIG + """[fl]
selection = all
eval_every = 1
checkpoint_every = 1
[algo]
method = fedlesam
rho = {rho}
mode = code
compat = {compat}
"""


def fedhet_state(o, part, compat, rounds):
    run = ls.fedhet_run(o, CONFIG.format(part=part, init=os.path.join(o.workdir, "init.h5"), lr=LR, wd=WD,
                                         rows=ls.ROWS, steps=o.steps, lr_decay=LR_DECAY, rho=RHO, compat=compat),
                        rounds, "%s-r%d" % (compat, rounds))
    with h5py.File(os.path.join(run, "checkpoint.h5"), "r") as f:
        return f["/server/global"][...]


def official_run(o, part, compat, rounds, nudge=False):
    """The official server and clients on the same clients; the global model after each round."""
    server_mod, optimizer_mod, utils = ls.import_official(o.official, ["server.FedLESAM", "optimizer.LESAM", "utils"])
    # docs/methods/sam.md §8: eps = -rho gu/||gu||
    ls.install_first_step(optimizer_mod.LESAM, compat, -1.0, o.plant)
    data = ls.client_data(part)
    k = len(data.client_x)
    args = types.SimpleNamespace(method="FedLESAM", dataset="mnist", total_client=k, comm_rounds=rounds,
                                 local_epochs=o.steps, batchsize=ls.ROWS, weight_decay=WD, local_learning_rate=LR,
                                 global_learning_rate=1.0, lr_decay=LR_DECAY, seed=0, active_ratio=1.0, use_RI=False,
                                 beta=0.1, rho=RHO * (10 if o.plant == "rho" else 1), mode="normal", out_file="",
                                 non_iid=False)
    init, w0 = ls.initial_params(o.workdir, utils, nudge)
    srv = ls.quiet(lambda: server_mod.FedLESAM("cpu", ls.model_func, init, w0.clone(), data, "FedLESAM", args))
    states = []
    srv._activate_clients_ = lambda t: np.arange(k)
    srv._test_ = lambda t, sel: states.append(srv.server_model_params_list.clone().numpy())
    srv._save_results_ = srv._summary_ = lambda: None
    ls.quiet(srv.train)
    return states, w0.numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ls.add_arguments(ap, "MediaBrain-SJTU/FedLESAM", "FEDLESAM_OFFICIAL", "outputs/lockstep-fedlesam")
    o = ap.parse_args()
    part = ls.setup(o, "lockstep-fedlesam", os.path.join("optimizer", "LESAM.py"), "FEDLESAM_OFFICIAL")
    bound = ls.Bound()
    for compat in ls.compats(o):
        theirs, w0 = official_run(o, part, compat, o.rounds)
        ref = official_run(o, part, compat, o.rounds, nudge=True)[0]
        print("compat %s%s: round  |official step|  |w fedhet - official|  |official - official(w0 + 1 ulp)|" % (
            compat, " (planted: %s)" % o.plant if o.plant else ""))
        for r in range(1, o.rounds + 1):
            mine = fedhet_state(o, part, compat, r)
            t, prev = theirs[r - 1], theirs[r - 2] if r > 1 else w0
            p = t.size
            step, diff = ls.dist(t, prev), ls.dist(mine[:p], t)
            ulp = ls.dist(ref[r - 1], t)
            print("  %5d  %.4g  %.3g  %.3g" % (r, step, diff, ulp), flush=True)
            bound.check("compat %s round %d w" % (compat, r), diff, step, ulp)
    return bound.verdict("lockstep-fedlesam")


if __name__ == "__main__":
    sys.exit(main())
