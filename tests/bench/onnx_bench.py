#!/usr/bin/python3
"""PyTorch side of the ONNX benchmark (tests/bench/onnx.sh) and of tools/onnx-acceptance.sh.
Runs under /usr/bin/python3 (Debian's python3-torch 1.13, python3-torchvision 0.14, python3-onnx; make deps).

  onnx_bench.py export NAME OUT.onnx [--input CxHxW] [--classes K]
      NAME as tests/mpi/onnx_torch.py builds it (a torchvision 0.14 model, weights=None, or resnet18_gn), or
      "zoo:M" for fedhet zoo model M's PyTorch twin (tests/bench/torch_bench.py); torch.manual_seed(0) weights,
      exported as docs/onnx.md says (training mode; efficientnet_b0 in eval mode with PRESERVE). A C other than
      3 rebuilds the first conv for C input channels.
  onnx_bench.py torch NAME [--input CxHxW] [--classes K] [--batch B] [--reps R]
      PyTorch's training step (forward, cross-entropy, backward, SGD with momentum: torch_bench.py's sgd step) of
      the same model with the same weights, one thread, in the fastest of the configurations a user can pick
      (torch_bench.configs_for: zero_grad set_to_none, channels_last, mkldnn); prints
      samples_per_s,gflops,configuration (gflops = 3 x forward FLOPs of conv and linear layers per sample x
      samples/s, as fedhet bench counts them). --config "set_to_none=B channels_last=B mkldnn=B" (as printed)
      measures that configuration without the search.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "mpi"))
import onnx_torch  # noqa: E402
import torch_bench  # noqa: E402
from torch_bench import torch  # noqa: E402


def build(name, inp, classes):
    torch.manual_seed(0)
    c, h, w = inp
    if name.startswith("zoo:"):
        return torch_bench.build(name[4:], c, h, w, classes)
    if name not in onnx_torch.MODELS:
        raise SystemExit("onnx_bench.py: unknown model %s (one of %s, or zoo:M)" % (name, ", ".join(onnx_torch.MODELS)))
    if h != w:
        raise SystemExit("onnx_bench.py: --input %dx%dx%d: square inputs only" % inp)
    return onnx_torch.make_model(name, classes, c, h)


def main(argv):
    ap = argparse.ArgumentParser(prog="onnx_bench.py", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("cmd", choices=["export", "torch"])
    ap.add_argument("name")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--input", type=torch_bench.parse_input, default=(3, 32, 32))
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--config", help="a configuration as printed: no search")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    m = build(a.name, a.input, a.classes)
    if a.cmd == "export":
        if not a.out:
            ap.error("export needs OUT.onnx")
        mode = "eval" if a.name in onnx_torch.EVAL_ONLY else "train"
        onnx_torch.save_onnx(m, torch.randn(2, *a.input), a.out, mode)
        return 0
    if a.config:
        cfg = torch_bench.parse_config(a.config)
        sps, gflops = torch_bench.bench_model(m, a.batch, "sgd", a.input, a.classes, a.reps, config=cfg)
    else:
        sps, gflops, cfg = torch_bench.bench_best(m, a.batch, "sgd", a.input, a.classes, a.reps)
    print("%.1f,%.3f,%s" % (sps, gflops, torch_bench.config_name(cfg)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
