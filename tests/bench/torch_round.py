#!/usr/bin/env python3
"""One FedAvg round as a plain PyTorch loop, the reference for tests/bench/round.sh.

Same workload as fedhet's round: the model of tests/bench/torch_bench.py, every client of the given
sizes trains 1 epoch (fresh SGD, lr 0.01, momentum 0.9, batch 64, last partial batch kept) from the
global state, then the server averages the state dicts weighted by sample counts. Inputs are random
tensors of the data set's shape (timing does not depend on pixel values), clients run one after another
in one process with torch.set_num_threads(threads).

Usage: /usr/bin/python3 tests/bench/torch_round.py --sizes 386,6566,... [--model cnn] [--input 1x28x28]
       [--batch 64] [--threads 1] [--rounds 2]
Prints: round seconds (median over rounds after one warm-up round) as "torch_round_seconds,<s>".
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch_bench import build  # noqa: E402


def one_round(model, global_state, data, batch):
    states, weights = [], []
    for x, y in data:
        model.load_state_dict(global_state)
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        perm = torch.randperm(x.shape[0])
        for i in range(0, x.shape[0], batch):
            idx = perm[i:i + batch]
            opt.zero_grad()
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        weights.append(float(x.shape[0]))
    total = sum(weights)
    new = {}
    for k in global_state:
        if global_state[k].dtype.is_floating_point:
            new[k] = sum(w / total * s[k] for w, s in zip(weights, states))
        else:
            new[k] = states[-1][k]
    return new


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--input", default="1x28x28")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c, h, w = (int(v) for v in a.input.split("x"))
    model = build(a.model, c, h, w, a.classes)
    sizes = [int(s) for s in a.sizes.split(",")]
    data = [(torch.randn(n, c, h, w), torch.randint(0, a.classes, (n,))) for n in sizes]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    times = []
    for r in range(a.rounds + 1):
        t0 = time.perf_counter()
        state = one_round(model, state, data, a.batch)
        if r > 0:
            times.append(time.perf_counter() - t0)
    print("torch_round_seconds,%.3f" % statistics.median(times))


if __name__ == "__main__":
    main()
