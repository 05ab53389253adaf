#!/usr/bin/env python3
"""One FedAvg round as a plain PyTorch loop, the reference for tests/bench/round.sh.

Same workload as fedhet's round: the model of tests/bench/torch_bench.py, every client of the given
sizes trains 1 epoch (fresh SGD, lr 0.01, momentum 0.9, batch 64, last partial batch kept) from the
global state, then the server averages the state dicts weighted by sample counts. Inputs are random
tensors of the data set's shape (timing does not depend on pixel values), clients run one after another
in one process with torch.set_num_threads(threads).
The round runs in PyTorch's fastest configuration for the model's training step at this batch size
(torch_bench.bench_best: zero_grad set_to_none, channels_last, mkldnn), or in the one given with --config.

Usage: /usr/bin/python3 tests/bench/torch_round.py --sizes 386,6566,... [--model cnn] [--input 1x28x28]
       [--batch 64] [--threads 1] [--rounds 2] [--config "set_to_none=... channels_last=... mkldnn=..."]
Prints: round seconds (median over rounds after one warm-up round) and the configuration, as
"torch_round_seconds,<s>,<configuration>".
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch_bench import bench_best, build, config_name, parse_config  # noqa: E402


def one_round(model, global_state, data, batch, set_to_none):
    states, weights = [], []
    for x, y in data:
        model.load_state_dict(global_state)
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        perm = torch.randperm(x.shape[0])
        for i in range(0, x.shape[0], batch):
            idx = perm[i:i + batch]
            opt.zero_grad(set_to_none=set_to_none)
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
    ap.add_argument("--config", default=None, help="measure this configuration instead of searching the fastest")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c, h, w = (int(v) for v in a.input.split("x"))
    model = build(a.model, c, h, w, a.classes)
    if a.config:
        cfg = parse_config(a.config)
    else:
        cfg = bench_best(build(a.model, c, h, w, a.classes), a.batch, "sgd", (c, h, w), a.classes, 1)[2]
    fmt = torch.channels_last if cfg["channels_last"] else torch.contiguous_format
    model = model.to(memory_format=fmt)
    sizes = [int(s) for s in a.sizes.split(",")]
    data = [(torch.randn(n, c, h, w).to(memory_format=fmt), torch.randint(0, a.classes, (n,))) for n in sizes]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    times = []
    with torch.backends.mkldnn.flags(enabled=cfg["mkldnn"]):
        for r in range(a.rounds + 1):
            t0 = time.perf_counter()
            state = one_round(model, state, data, a.batch, cfg["set_to_none"])
            if r > 0:
                times.append(time.perf_counter() - t0)
    print("torch_round_seconds,%.3f,%s" % (statistics.median(times), config_name(cfg)))


if __name__ == "__main__":
    main()
