#!/usr/bin/python3
"""lockstep-fedwmsam: fedhet's FedWMSAM against the official FedWMSAM code, in lockstep; exits 1 beyond the bound.

usage:
  tools/lockstep-fedwmsam.py --official DIR [--rounds R] [--show 1,2,3] [--clients K] [--count M] [--steps S]
                             [--compat official|intended|both] [--plant rho|sign] [--step-sweep]
                             [--workdir DIR] [--fedhet BIN]

DIR (or the environment's FEDWMSAM_OFFICIAL) is a checkout of the paper's code (github
Huang-Yongzhi/NeurlPS_FedWMSAM, commit a922a1d); nothing of it is copied. Both sides start from one w^0 (a
PyTorch initialisation of tests/bench's cnn twin, handed to fedhet through `[model] init`), see the same
clients (K clients of 32 Fashion-MNIST rows, normalised as fedhet normalises them) and take full-batch steps
(batch 32 = the client's rows, so no shuffle can make the batches differ), with the clients fedhet selects
(`fl.selection = count` when --count is given, else all) imposed on the official server. Settings: lr 0.05 x
0.998 per round, weight decay 1e-3, clip 10 (the code's hard-wired max_norm), rho 0.1, alpha_0 0.1, K = S steps
(local_epochs = S in the code, n_0/B = 1).

compat official: fedhet's `compat = official` against the code as it is. compat intended: fedhet's default
against the same code with WMSAM.first_step replaced by docs/methods/sam.md §9's intended perturbation,
eps = +rho delta/(||delta|| + 1e-7) over the whole flat vector delta = target - x, ||delta|| exact (written in
tools/lockstep_official.py; the momentum, control variates, alpha, clip and server stay the official code's).

After each round it prints the distance between the two global models, server momenta, global and client
control variates, and both alphas, and the same distances between the official code and itself with w^0
moved by one float ulp and with its full batches' rows in another order, the larger of the two: what rounding
alone opens (the code shuffles each batch from torch's global generator, seeded here: 0, and 1 for the other
order). The bound: each distance at most 10x that distance, or 1e-3 of the official quantity's norm (the
model: of the official round's step; alpha: 1e-6) when that is larger. Exit 0 within the bound, 1 beyond it.
--plant changes the official side (rho: its radius x10; sign: its perturbation negated): the tool must then
exit 1. --step-sweep compares round 1 after 1..S local steps, tensor by tensor (printed, not asserted).

alpha: the official server's s_k = 1 + cos(Delta_k, mom_r) takes torch's float32 norms and dot over all 1.7 M
entries, which put the cosine about 1e-4 off here (float32 accumulation: a bias that neither a one-ulp change
of w^0 nor another row order moves), and alpha_{r+1} = 0.99 alpha_r + 0.01 clip(mean s_k, 0.1, 0.9) carries
1e-2 of it. The code runs as coded; the tool also takes each of its cosines in double, replays alpha's rule
with those (sam.md §9, its cos exact as in §0.1; fedhet sums in double) and compares fedhet's alpha with that
one. Both official alphas are printed.

Needs /usr/bin/python3 with python3-torch, python3-h5py and the Fashion-MNIST IDX files
(dataset-fashion-mnist). The official code imports scipy without using it here; a stand-in module is
put in its place when scipy is missing.
"""
import argparse
import csv
import os
import subprocess
import sys
import types

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import lockstep_official as ls  # noqa: E402

LR, LR_DECAY, WD, RHO, ALPHA0 = 0.05, 0.998, 1e-3, 0.1, 0.1
CONFIG = ls.TRAIN_CONFIG + """[fl]
selection = {selection}
count = {count}
eval_every = 1
checkpoint_every = 1
[algo]
method = fedwmsam
rho = {rho}
alpha_0 = {alpha0}
compat = {compat}
"""


def fedhet_run(o, part, compat, rounds, steps, name):
    """fedhet for `rounds` rounds; its checkpoint's server and client state and the clients it selected."""
    run = ls.fedhet_run(o, CONFIG.format(part=part, init=os.path.join(o.workdir, "init.h5"), lr=LR, wd=WD,
                                         rows=ls.ROWS, steps=steps, lr_decay=LR_DECAY, rho=RHO, alpha0=ALPHA0,
                                         selection="count" if o.count else "all", count=o.count or 1,
                                         compat=compat), rounds, name)
    # the clients' c_k live in the run's client-state.bin: `fedhet inspect --client-state` writes them as [K, P]
    cs = os.path.join(run, "client-state.h5")
    subprocess.run([o.fedhet, "inspect", os.path.join(run, "run.h5"), "--client-state", cs], check=True,
                   capture_output=True)
    with h5py.File(os.path.join(run, "checkpoint.h5"), "r") as f, h5py.File(cs, "r") as g:
        state = dict(w=f["/server/global"][...], c=f["/server/vectors"][0], mom=f["/server/vectors"][1],
                     ci=g["/clients/vector_0"][...], alpha=float(f["/server/scalars"][1]),
                     model={k: f["/model/" + k][...] for k in f["/model"]})
    rows = list(csv.DictReader(open(os.path.join(run, "clients.csv"))))
    selected = [np.array(sorted(int(r["client"]) for r in rows if int(r["round"]) == t)) for t in range(rounds)]
    return state, selected


def exact_cosines(server_mod):
    """server_mod.cosine_similarity still answers as coded; each call also appends 1 + cos of the same vectors
    in double (0 when a norm is 0, as coded) to the list returned"""
    coded = getattr(server_mod, "coded_cosine_similarity", server_mod.cosine_similarity)
    server_mod.coded_cosine_similarity = coded
    exact = []

    def cosine_similarity(a, b):
        a64, b64 = torch.as_tensor(a).double(), torch.as_tensor(b).double()
        denom = float(a64.norm() * b64.norm())
        exact.append(0.0 if denom == 0 else float(torch.dot(a64, b64)) / denom + 1.0)
        return coded(a, b)
    server_mod.cosine_similarity = cosine_similarity
    return exact


def official_run(o, part, compat, rounds, steps, selected, nudge=False, row_order=0):
    """The official server and clients on the same clients and selection; the state after each round. The
    clients' DataLoaders shuffle the full batch from torch's global generator, seeded here with row_order: the
    rows' order changes only how the sums round."""
    torch.manual_seed(row_order)
    server_mod, optimizer_mod, utils = ls.import_official(o.official, ["server.FedWMSAM", "optimizer.WMSAM", "utils"])
    # docs/methods/sam.md §9: eps = +rho delta/||delta||, towards the target
    ls.install_first_step(optimizer_mod.WMSAM, compat, 1.0, o.plant)
    data = ls.client_data(part)
    args = types.SimpleNamespace(method="FedWMSAM", dataset="mnist", total_client=len(data.client_x),
                                 comm_rounds=rounds, local_epochs=steps, batchsize=ls.ROWS, weight_decay=WD,
                                 local_learning_rate=LR, global_learning_rate=1.0, lr_decay=LR_DECAY, seed=0,
                                 active_ratio=1.0, use_RI=False, alpha=ALPHA0, beta=0.1,
                                 rho=RHO * (10 if o.plant == "rho" else 1), mode="normal", out_file="", non_iid=False)
    init, w0 = ls.initial_params(o.workdir, utils, nudge)
    srv = ls.quiet(lambda: server_mod.FedWMSAM("cpu", ls.model_func, init, w0.clone(), data, "FedWMSAM", args))
    states = []
    srv._activate_clients_ = lambda t: selected[t]
    exact = exact_cosines(server_mod)
    alpha_exact = [ALPHA0]

    def after_round(t, sel):
        # the code's alpha rule, its cosines taken in double (the docstring's alpha)
        mean_s = float(np.mean(exact))
        alpha_exact[0] = 0.99 * alpha_exact[0] + 0.01 * max(0.1, min(mean_s, 0.9))
        exact.clear()
        states.append(dict(w=srv.server_model_params_list.clone().numpy(), mom=srv.momentum.clone().numpy(),
                           c=srv.c_params_list.clone().numpy(), ci=srv.c_i_params_list.clone().numpy(),
                           alpha_coded=args.alpha, alpha=alpha_exact[0]))
    srv._test_ = after_round
    srv._save_results_ = srv._summary_ = lambda: None
    ls.quiet(srv.train)
    return states, w0.numpy()


def step_sweep(o, part, compat):
    print("compat %s, round 1 after s steps, tensor by tensor: |fedhet - official| (|official's step|)" % compat)
    for s in range(1, o.steps + 1):
        mine, selected = fedhet_run(o, part, compat, 1, s, "%s-sweep%d" % (compat, s))
        theirs, w0 = official_run(o, part, compat, 1, s, selected)
        offset, parts = 0, []
        for name in ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight", "fc1.bias",
                     "fc2.weight", "fc2.bias"):
            n = mine["model"][name].size
            a, b = mine["w"][offset:offset + n], theirs[0]["w"][offset:offset + n]
            parts.append("%s %.2g (%.2g)" % (name, ls.dist(a, b), ls.dist(b, w0[offset:offset + n])))
            offset += n
        print("s=%d: %s" % (s, ", ".join(parts)))


def lockstep(o, part, compat, show, bound):
    """every round of `show`: fedhet against the official code, and the official code against itself with w^0 + 1
    ulp and with its rows in another order (the larger of the two: what rounding alone opens)"""
    last = max(show)
    _, selected = fedhet_run(o, part, compat, last, o.steps, "%s-r%d" % (compat, last))
    theirs, w0 = official_run(o, part, compat, last, o.steps, selected)
    nudged, _ = official_run(o, part, compat, last, o.steps, selected, nudge=True)
    reordered, _ = official_run(o, part, compat, last, o.steps, selected, row_order=1)
    print("compat %s%s: round  |step|  |w diff|  |mom diff|  |c diff|  max|c_k diff|  alpha fedhet / official "
          "(cos in double; as coded)   official vs official (w0 + 1 ulp or rows reordered, the larger): the same"
          % (compat, " (planted: %s)" % o.plant if o.plant else ""))
    for r in show:
        mine = fedhet_run(o, part, compat, r, o.steps, "%s-r%d" % (compat, r))[0]
        t = theirs[r - 1]
        p = t["w"].size
        prev = theirs[r - 2]["w"] if r > 1 else w0
        step = ls.dist(t["w"], prev)
        quantities = dict(
            w=(lambda a: ls.dist(a["w"][:p], t["w"]), step),
            mom=(lambda a: ls.dist(a["mom"][:p], t["mom"]), ls.norm(t["mom"])),
            c=(lambda a: ls.dist(a["c"][:p], t["c"]), ls.norm(t["c"])),
            c_k=(lambda a: max(ls.dist(a["ci"][i, :p], t["ci"][i]) for i in range(len(t["ci"]))),
                 max(ls.norm(c) for c in t["ci"])),
            alpha=(lambda a: abs(a["alpha"] - t["alpha"]), 1e-3))
        figures = {k: (diff(mine), max(diff(nudged[r - 1]), diff(reordered[r - 1])), scale)
                   for k, (diff, scale) in quantities.items()}
        print("  %5d  %.4g  %s  %.8f / %.8f; %.8f   %s" % (
            r, step, "  ".join("%.3g" % f[0] for k, f in figures.items() if k != "alpha"), mine["alpha"], t["alpha"],
            t["alpha_coded"],
            "  ".join("%.3g" % f[1] for f in figures.values())), flush=True)
        for k, (diff, spread, scale) in figures.items():
            bound.check("compat %s round %d %s" % (compat, r, k), diff, scale, spread)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ls.add_arguments(ap, "Huang-Yongzhi/NeurlPS_FedWMSAM", "FEDWMSAM_OFFICIAL", "outputs/lockstep-fedwmsam")
    ap.add_argument("--show", default="", help="rounds to compare (default: every round)")
    ap.add_argument("--count", type=int, default=0, help="clients a round (default: all)")
    ap.add_argument("--step-sweep", action="store_true")
    o = ap.parse_args()
    part = ls.setup(o, "lockstep-fedwmsam", os.path.join("server", "FedWMSAM.py"), "FEDWMSAM_OFFICIAL")
    show = [int(s) for s in o.show.split(",")] if o.show else list(range(1, o.rounds + 1))
    bound = ls.Bound()
    for compat in ls.compats(o):
        if o.step_sweep:
            step_sweep(o, part, compat)
        else:
            lockstep(o, part, compat, show, bound)
    return 0 if o.step_sweep else bound.verdict("lockstep-fedwmsam")


if __name__ == "__main__":
    sys.exit(main())
