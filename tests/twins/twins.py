#!/usr/bin/python3
"""Independent twins of fedhet's FedAvgM, FedSCAM (full, WA and SAM), FedWMSAM, A-FedSAM, FLOOD and FedISM+,
written from the methods' equations (spec baselines-and-protocols A.3; algorithms-sam 1, 2, 9, 10, 12, 13 and
15, as docs/methods and `fedhet methods` state them), run in lockstep with fedhet and compared round by round.
Used by tests/twins/test_twins.sh.

  twins.py lockstep NAME METHOD DATA.h5 PARTITION.h5 INIT.pt RUNS_DIR ROUNDS LR STEPS KEY=VALUE...
      [+ lockstep ...]        several joined by "+" share one start of Python and torch

NAME labels the output lines ("NAME round R: ...", "NAME: first difference: ...", "NAME: agrees").

METHOD: fedavgm | fedscam | fedscam_wa | fedscam_sam | fedwmsam | afedsam | flood | fedismplus. DATA.h5:
model_logits' output for the partition (its /train_x are the rows as fedhet normalises them, client by client
in the partition's order). INIT.pt: the initial state_dict fedhet started from ([model] init). RUNS_DIR/r1,
r2, ...: fedhet runs of the same config stopped after 1, 2, ... rounds (run.h5: /model; clients.csv:
per-client quantities; metrics.csv: the round's schedule value). KEY=VALUE: the method's [algo] keys as given
to fedhet (beta, eta_g; rho_max, alpha_rho, gamma_h, kappa, beta, proj_dim; rho, alpha_0, alpha_lambda,
weights; mu_max, lambda, temperature; flood_*; rho_max, tau, horizon, q, beta, gsam_alpha), seed=fl.seed
(FedSCAM's projection is keyed by it) and train.lr, train.weight_decay, train.logit_adjust, train.beta1,
train.beta2, train.eps where the run sets them (FedISM+ runs under Adam). --mutate NAME plants an error in the
twin, and the lockstep must then fail: FedSCAM pilot_radius (the pilot radius x10) or pilot_sign (the pilot's
ascent e_p flipped); FedWMSAM perturb_sign (eps_b away from the target); A-FedSAM kl_sign (the distillation
term subtracted); FLOOD mask_sum (the masked loss divided by the sum of the mask, not n_b); FedISM+ rho_const
(rho(t) = rho_max every round).

The setting makes every local step a full-batch step (batch larger than every client), every client take
part every round and the model an mlp, so the twin needs neither fedhet's shuffles nor its batch order:
the same initial weights and the same data give the same trajectory up to float rounding. The twin runs in
float64. FedSCAM's summaries go through the signed count sketch of docs/methods/sam.md §10: bucket(k) =
floor(r0 d / 2^32) and sign(k) = - when the top bit of r1 is set, (r0, r1, r2, r3) = Philox4x32-10 with key
(seed low 32 bits, seed bits 32..55 | purpose 7 << 24) and counter (k, 0xF5CA0001, k >> 32, 0), written here
from the Random123 definition (checked against its known answers). So the twin computes every quantity
itself: the probe h_i, the pilot radius and direction, s_i, c_i = cos(s_i, u_{t-1}), h_adj, the radius, the
weights and u_t, and compares fedhet's h, c, h_adj, rho, weight and ||Delta|| of every client every round.
The other twins compare what fedhet writes of them: every client's weight (and FLOOD's phi; FedISM+'s
saga_score, l0, l1, rho) and the round's metrics.csv method_scalar (FedWMSAM alpha_r, A-FedSAM mu_t, FLOOD
lambda_t; FedISM+ its rho column).

Prints, per round, each compared quantity's largest difference (relative; c absolute) and the first that exceeds
the tolerance; exit 0 when all agree, 1 otherwise. A deliberately wrong twin (FedAvgM: beta = 0, which is
FedAvg; FedSCAM: the radius and weights of another variant; FedWMSAM: alpha frozen; A-FedSAM: mu_t = 0;
FLOOD: lambda_t = 1; FedISM+: uniform weights) is printed beside it, to show the comparison can fail.
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


def loss_grad_at(model, vec, x, loss_of_logits):
    """the gradient of loss_of_logits(model(x)) at the flat weights vec, and the loss"""
    set_flat(model, vec)
    model.zero_grad()
    loss = loss_of_logits(model(x))
    g = torch.autograd.grad(loss, list(model.parameters()))
    return torch.cat([t.reshape(-1) for t in g]), float(loss)


def grad_at(model, vec, x, y):
    """mean cross-entropy's gradient at the flat weights vec on all of (x, y), and the loss"""
    return loss_grad_at(model, vec, x, lambda z: F.cross_entropy(z, y))


def logits_at(model, vec, x):
    set_flat(model, vec)
    with torch.no_grad():
        return model(x)


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


def server_average(w, deltas, p):
    return w + sum(pk * d for pk, d in zip(p, deltas))


def family_weights(clients, uniform):
    """the FL-Simulator family's server weights: uniform, or by sample counts (algo.weights)"""
    n = torch.tensor([float(len(y)) for _, y in clients])
    return torch.full_like(n, 1.0 / len(n)) if uniform else n / n.sum()


class WmsamTwin:
    """FedWMSAM, docs/methods/sam.md §9 (compat = intended, k_norm = code: K_bar = train.steps): personalised
    momentum mom_k, the one-backprop perturbation towards target_b = x_r + b mom_k, the blend alpha_r g +
    (1 - alpha_r) mom_k, control variates c, c_k, the cosine-adaptive alpha and mom_{r+1} = -Delta_bar/(K eta)
    ([train] clip, weight decay and lr decay are off here). Wrong twin: alpha frozen at alpha_0."""

    MUTATIONS = ("perturb_sign",)

    def __init__(self, model, w0, clients, lr, steps, o, wrong=False, mutate=None):
        self.model, self.w, self.clients, self.lr, self.steps = model, w0.clone(), clients, lr, steps
        self.rho, self.alpha = float(o.get("rho", 0.1)), float(o.get("alpha_0", 0.1))
        self.lam = 0.0 if wrong else float(o.get("alpha_lambda", 0.01))
        self.eta_g, self.uniform = float(o.get("eta_g", 1.0)), o.get("weights", "uniform") == "uniform"
        self.mutate = mutate
        self.mom, self.c = torch.zeros_like(w0), torch.zeros_like(w0)
        self.ck = [torch.zeros_like(w0) for _ in clients]
        self.scalar = self.alpha  # metrics.csv method_scalar: the alpha_r the round used

    def client(self, k, x, y):
        a = self.alpha
        mom_k = self.mom + (a / (1 - a)) * (self.c - self.ck[k])
        xb, target = self.w.clone(), self.w.clone()
        for _ in range(self.steps):
            delta = target - xb
            nd = float(delta.norm())
            eps = self.rho * delta / (nd + 1e-7) if nd > 0 else torch.zeros_like(delta)
            if self.mutate == "perturb_sign":
                eps = -eps
            g, _ = grad_at(self.model, xb + eps, x, y)
            xb = xb - self.lr * (a * g + (1 - a) * mom_k)
            target = target + mom_k
        return xb - self.w

    def round(self):
        self.scalar = self.alpha
        deltas = [self.client(k, x, y) for k, (x, y) in enumerate(self.clients)]
        p = family_weights(self.clients, self.uniform)
        rows, s, dc = {}, [], torch.zeros_like(self.w)
        K = float(self.steps)
        for k, d in enumerate(deltas):
            has = float(d.norm()) > 0 and float(self.mom.norm()) > 0
            s.append(1 + cosine(d, self.mom) if has else 0.0)
            new_ck = self.ck[k] - self.c - d / (K * self.lr)
            dc += new_ck - self.ck[k]
            self.ck[k] = new_ck
            rows[k] = dict(weight=float(p[k]))
        mean_s = sum(s) / len(s)
        clip = "is open" if 0.1 <= mean_s <= 0.9 else "binds"
        self.note = f"mean s_k {mean_s:.3g} (alpha's clip [0.1, 0.9] {clip})"
        self.alpha = (1 - self.lam) * self.alpha + self.lam * min(0.9, max(0.1, mean_s))
        self.c = self.c + dc / len(deltas)
        bar = sum(pk * d for pk, d in zip(p, deltas))
        self.mom = -bar / (K * self.lr)
        self.w = self.w + self.eta_g * bar
        return rows


def kl_teacher(zs, zt, T):
    """KL(softmax(zt/T) || softmax(zs/T)), averaged over the samples"""
    return F.kl_div(F.log_softmax(zs / T, dim=1), F.softmax(zt / T, dim=1), reduction="batchmean")


class AfedsamTwin:
    """A-FedSAM, docs/methods/sam.md §15 (teacher = global, perturb = sam): SAM with eps from the CE gradient,
    the gradient at w + eps of CE + mu_t T^2 KL(teacher || student), mu_t = (1 - lambda) mu_{t-1} + lambda
    mu_max from mu_0 = 0; uniform (or sample-count) mean. Wrong twin: mu_t = 0 (FedSAM)."""

    MUTATIONS = ("kl_sign",)

    def __init__(self, model, w0, clients, lr, steps, o, wrong=False, mutate=None):
        self.model, self.w, self.clients, self.lr, self.steps = model, w0.clone(), clients, lr, steps
        self.rho, self.mu_max = float(o.get("rho", 0.1)), float(o.get("mu_max", 1.0))
        self.lam = float(o.get("lambda", 0.01))
        self.T, self.uniform = float(o.get("temperature", 4.0)), o.get("weights", "uniform") == "uniform"
        self.wrong, self.mutate, self.mu, self.scalar = wrong, mutate, 0.0, 0.0

    def client(self, x, y):
        zt = logits_at(self.model, self.w, x)  # the teacher: the received global model
        mu = 0.0 if self.wrong else -self.mu if self.mutate == "kl_sign" else self.mu
        T = self.T
        w = self.w.clone()
        for _ in range(self.steps):
            g, _ = grad_at(self.model, w, x, y)
            eps = self.rho * g / (g.norm() + 1e-7)
            r, _ = loss_grad_at(self.model, w + eps, x,
                                lambda z: F.cross_entropy(z, y) + mu * T * T * kl_teacher(z, zt, T))
            w = w - self.lr * r
        return w - self.w

    def round(self):
        self.scalar = self.mu
        deltas = [self.client(x, y) for x, y in self.clients]
        p = family_weights(self.clients, self.uniform)
        self.w = server_average(self.w, deltas, p)
        self.mu = (1 - self.lam) * self.mu + self.lam * self.mu_max  # mu_{t+1}
        return {k: dict(weight=float(p[k])) for k in range(len(deltas))}


def flood_lambda(o, t):
    """lambda_t of docs/methods/sam.md §13 (flood_start = 0): 1 in round 0, f(min(t - 1, T_h)) after"""
    sched = o.get("flood_schedule", "auto")
    code = o.get("flood_compat", "paper") == "code"
    if sched == "auto":
        sched = "logistic" if code else "cosine"
    if sched == "constant":
        return float(o.get("flood_lambda", 1.0))
    if t == 0:
        return 1.0
    a = float(o.get("flood_a", 0)) or (50.0 if code else 200.0)
    th = float(o.get("flood_halt", 1000))
    u = min(t - 1, th)
    if sched == "cosine":
        return a * (1 - math.cos(math.pi * u / th))
    if sched == "linear":
        return 2 * a * u / th
    if sched == "quadratic":
        return 2 * a * (u / th) ** 2
    if sched == "exponential":
        return 2 * a * (1 - math.exp(-5.0 * u)) / (1 - math.exp(-5.0 * th))
    sig = lambda v: 1 / (1 + math.exp(-v))  # noqa: E731
    s = 10.0
    return 2 * a * (sig(s * (u - th / 2)) - sig(-s * th / 2)) / (sig(s * th / 2) - sig(-s * th / 2))


class FloodTwin:
    """FLOOD, docs/methods/sam.md §13 (energy score): per batch the masked CE (1/n_b) sum mask_j CE_j with
    mask_j = lambda_t below the batch's q-quantile of the energy (lower interpolation, strict <), phi_i = the
    mean energy of the local model on the local set, DAC weights p_i = (n_i/sum n + alpha phi_i/sum phi)/(1 +
    alpha). [train] momentum 0 here. Wrong twin: lambda_t = 1 (no ASW)."""

    MUTATIONS = ("mask_sum",)

    def __init__(self, model, w0, clients, lr, steps, o, wrong=False, mutate=None):
        self.model, self.w, self.clients, self.lr, self.steps, self.o = model, w0.clone(), clients, lr, steps, o
        self.q, self.alpha = float(o.get("flood_q", 0.7)), float(o.get("flood_alpha", 0.5))
        self.wrong, self.mutate, self.t, self.scalar = wrong, mutate, 0, 1.0
        self.gap = math.inf  # the smallest relative gap of a score to the batch threshold: the mask's margin

    def masked_loss(self, z, y, lam):
        with torch.no_grad():
            sc = torch.logsumexp(z, dim=1)  # energy, T_e = 1
            srt = torch.sort(sc).values
            tau = srt[int(math.floor(self.q * (len(sc) - 1)))]
            others = (sc - tau).abs()[(sc - tau).abs() > 0]
            if len(others):
                self.gap = min(self.gap, float(others.min()) / max(float(tau.abs()), 1e-30))
                self.note = f"smallest relative gap of a score to its batch's threshold {self.gap:.2g}"
            mask = torch.where(sc < tau, torch.full_like(sc, lam), torch.ones_like(sc))
        per = F.cross_entropy(z, y, reduction="none")
        return (mask * per).sum() / (mask.sum() if self.mutate == "mask_sum" else len(y))

    def round(self):
        lam = 1.0 if self.wrong else flood_lambda(self.o, self.t)
        self.scalar = lam
        deltas, phi = [], []
        for x, y in self.clients:
            w = self.w.clone()
            for _ in range(self.steps):
                g, _ = loss_grad_at(self.model, w, x, lambda z: self.masked_loss(z, y, lam))
                w = w - self.lr * g
            deltas.append(w - self.w)
            phi.append(float(torch.logsumexp(logits_at(self.model, w, x), dim=1).mean()))
        n = torch.tensor([float(len(y)) for _, y in self.clients])
        ph = torch.tensor(phi)
        p = (n / n.sum() + self.alpha * ph / ph.sum()) / (1 + self.alpha)
        self.w = server_average(self.w, deltas, p)
        self.t += 1
        return {k: dict(phi=phi[k], weight=float(p[k])) for k in range(len(deltas))}


class IsmTwin:
    """FedISM+ (and FedISM), docs/methods/sam.md §12 with §2: rho(t) = rho_max ((t + 1)/T)^tau (FedISM: rho),
    SALT = GSAM (alpha = gsam_alpha, eps = rho g/(||g|| + 1e-12)) under a fresh Adam with weight decay as L2,
    on the logit-adjusted CE (tau = logit_adjust, absent classes -inf); the score S_i on the whole local set
    at w^t with plain CE; SAGA weights wtilde ~ (S/sum S + 1e-10)^q, a = beta wtilde + (1 - beta) a. Wrong
    twin: uniform weights (no SAGA)."""

    MUTATIONS = ("rho_const",)
    SCALAR = "rho"  # metrics.csv: the round's radius

    def __init__(self, model, w0, clients, lr, steps, o, wrong=False, mutate=None, plus=True):
        self.model, self.w, self.clients, self.lr, self.steps, self.o = model, w0.clone(), clients, lr, steps, o
        self.plus, self.wrong, self.mutate, self.t, self.a, self.scalar = plus, wrong, mutate, 0, None, None
        self.galpha, self.q = float(o.get("gsam_alpha", 0.1)), float(o.get("q", 2.0))
        self.beta = float(o.get("beta", 0.5))
        self.wd, self.la = float(o.get("train.weight_decay", 0)), float(o.get("train.logit_adjust", 0))
        self.b1, self.b2, self.aeps = (float(o.get("train.beta1", 0.9)), float(o.get("train.beta2", 0.999)),
                                       float(o.get("train.eps", 1e-8)))

    def radius(self):
        if self.plus and "horizon" not in self.o:
            raise SystemExit("twins.py: fedismplus needs horizon=T (the run's algo.horizon)")
        if not self.plus:
            return float(self.o.get("rho", 0.05))
        rmax = float(self.o.get("rho_max", 0.1))
        if self.mutate == "rho_const":
            return rmax
        return rmax * ((self.t + 1) / float(self.o["horizon"])) ** float(self.o.get("tau", 0.5))

    def client(self, x, y, rho):
        counts = torch.bincount(y, minlength=CLASSES).double()
        # tau log(pi): -inf for absent classes (their softmax mass and gradient 0); nothing when tau = 0
        adj = self.la * torch.log(counts / counts.sum()) if self.la else torch.zeros(CLASSES)
        la_ce = lambda z: F.cross_entropy(z + adj, y)  # noqa: E731
        w = self.w.clone()
        m, v = torch.zeros_like(w), torch.zeros_like(w)
        for step in range(1, self.steps + 1):
            g, _ = loss_grad_at(self.model, w, x, la_ce)
            gn = float(g.norm())
            gp, _ = loss_grad_at(self.model, w + rho * g / (gn + 1e-12), x, la_ce)
            gpn = float(gp.norm())
            cosq = float(g @ gp) / (gn * gpn + 1e-12)
            d = gp - self.galpha * (g - cosq * gn * gp / (gpn + 1e-12))
            d = d + self.wd * w
            m = self.b1 * m + (1 - self.b1) * d
            v = self.b2 * v + (1 - self.b2) * d * d
            mhat, vhat = m / (1 - self.b1 ** step), v / (1 - self.b2 ** step)
            w = w - self.lr * mhat / (vhat.sqrt() + self.aeps)
        return w

    def score(self, x, y, rho):
        G, l0 = loss_grad_at(self.model, self.w, x, lambda z: F.cross_entropy(z, y, reduction="sum"))
        l0 /= len(y)
        l1 = float(F.cross_entropy(logits_at(self.model, self.w + rho * G / (float(G.norm()) + 1e-12), x), y))
        return max(l1 - l0, 1e-10), l0, l1

    def round(self):
        rho = self.radius()
        self.scalar = rho
        ws, rows = [], {}
        for k, (x, y) in enumerate(self.clients):
            s, l0, l1 = self.score(x, y, rho)
            ws.append(self.client(x, y, rho))
            rows[k] = dict(saga_score=s, l0=l0, l1=l1, rho=rho)
        S = torch.tensor([r["saga_score"] for r in rows.values()])
        wt = (S / S.sum() + 1e-10) ** self.q
        wt = wt / wt.sum()
        self.a = wt if self.a is None else self.beta * wt + (1 - self.beta) * self.a
        p = torch.full_like(wt, 1.0 / len(wt)) if self.wrong else self.a / self.a.sum()
        for k, r in rows.items():
            r["weight"] = float(p[k])
        self.w = sum(pk * wk for pk, wk in zip(p, ws))
        self.t += 1
        return rows


TWINS = {"fedwmsam": WmsamTwin, "afedsam": AfedsamTwin, "flood": FloodTwin, "fedismplus": IsmTwin}


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


def fedhet_round_scalar(path, rnd, column):
    """metrics.csv column (method_scalar, rho) of round rnd (0-based)"""
    with open(path) as f:
        for row in csv.DictReader(f):
            if int(float(row["round"])) == rnd:
                if not row.get(column):
                    raise SystemExit(f"{path}: round {rnd} has no {column}")
                return float(row[column])
    raise SystemExit(f"{path}: no round {rnd}")


def lockstep(label, method, data_h5, partition, init_pt, runs, rounds, lr, steps, *kv):
    torch.set_default_dtype(torch.float64)
    kv, mutate = list(kv), None
    if "--mutate" in kv:
        at = kv.index("--mutate")
        mutate = kv[at + 1] if at + 1 < len(kv) else ""
        del kv[at:at + 2]
        allowed = TWINS[method].MUTATIONS if method in TWINS else MUTATIONS
        if mutate not in allowed:
            raise SystemExit(f"twins.py: --mutate {mutate!r}: one of {', '.join(allowed)}")
    opts = dict(a.split("=", 1) for a in kv)
    rounds, lr, steps = int(rounds), float(opts.get("train.lr", lr)), int(steps)
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
    if method in TWINS:
        twin = TWINS[method](model, w0, clients, lr, steps, opts, mutate=mutate)
        wrong = TWINS[method](model, w0, clients, lr, steps, opts, wrong=True)
    else:
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
            for key in tr:
                if key == "rho" and method == "fedscam_wa":
                    continue  # no SAM step: the WA ablation has no radius
                if key not in fc.get(i, {}):
                    raise SystemExit(f"{run}/clients.csv: round {r - 1} client {i} has no {key}")
                # c, a cosine, absolutely (it is 0 in the first round); the others relative to the twin's
                d = abs(fc[i][key] - tr[key]) / (1.0 if key == "c" else max(abs(tr[key]), 1e-30))
                worst[key] = max(worst.get(key, 0.0), d)
                if d > RTOL and first is None:
                    first = f"round {r} client {i} {key}: fedhet {fc[i][key]:.9g}, twin {tr[key]:.9g}"
        scalar_line = ""
        if getattr(twin, "scalar", None) is not None:
            # the round's schedule value (alpha_r, mu_t, lambda_t; rho(t) in FedISM's own column), relative
            col = getattr(twin, "SCALAR", "method_scalar")
            fs = fedhet_round_scalar(os.path.join(run, "metrics.csv"), r - 1, col)
            d = abs(fs - twin.scalar) / max(abs(twin.scalar), 1e-30)
            scalar_line = f"; {col} {d:.2g}"
            if d > RTOL and first is None:
                first = f"round {r} {col}: fedhet {fs:.9g}, twin {twin.scalar:.9g}"
        line = " ".join(f"{k} {v:.2g}" for k, v in worst.items())
        if diff > RTOL and first is None:
            first = f"round {r} global model: |fedhet - twin| = {diff:.3g} of the round's step"
        print(f"{label} round {r}: model |fedhet - twin| / |step| {diff:.2g} (tolerance {RTOL:g}; the wrong twin "
              f"{off_wrong:.2g}){'; per client: ' + line if line else ''}{scalar_line}"
              f"{'; twin: ' + twin.note if getattr(twin, 'note', '') else ''}")
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
