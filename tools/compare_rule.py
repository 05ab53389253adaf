"""The tolerance rule of a comparison of fedhet with PyTorch (docs/onnx.md), shared by `fedhet-torch compare` and
tests/mpi/onnx_torch.py; numpy only, so that it loads without PyTorch.
"""
import numpy as np

# The tolerance rule of a comparison with PyTorch (docs/onnx.md): the logits of the same weights agree to rounding;
# the first loss within FIRST_RTOL relative; step k within FIRST_RTOL + SPREAD_FACTOR x PyTorch's own rounding
# spread up to step k, and never tighter than LATER_FLOOR. The spread is measured in the same run, three times, the
# largest taken: PyTorch's float32 steps against the same steps in float64, and against float32 steps from weights
# nudged by one rounding (a relative 1e-7, two draws). Each is one draw of how far rounding carries, and all can stay
# small by luck where another float32 summation order grows: vgg11_bn (32 x 32 inputs, Intel Xeon) moved its fifth loss
# by 2.7e-4 with OpenBLAS on several threads, under the float64 run and under one nudge of three, and by 1e-5 under all
# three with OpenBLAS on one thread. The floor covers that: a wrong gradient (a missing, swapped or transposed term)
# moves the next loss by 0.02 to 0.2 on these models, 20 times the floor and more.
LOGIT_RTOL, FIRST_RTOL, SPREAD_FACTOR, LATER_FLOOR = 1e-4, 1e-4, 10.0, 1e-3
NUDGE_SEEDS = (7, 8)


def tolerances(losses, losses64, losses_nudged):
    """the spread of PyTorch's own rounding up to each step (losses_nudged: one row per nudge), and each step's
    tolerance"""
    ref = np.asarray(losses, np.float64)
    spread = np.abs(ref - np.asarray(losses64)) / np.abs(np.asarray(losses64))
    for row in np.atleast_2d(np.asarray(losses_nudged, np.float64)):
        spread = np.maximum(spread, np.abs(ref - row) / np.abs(ref))
    spread = np.maximum.accumulate(spread)
    tol = np.maximum(FIRST_RTOL + SPREAD_FACTOR * spread, LATER_FLOOR)
    tol[0] = FIRST_RTOL  # the same weights: rounding only
    return spread, tol
