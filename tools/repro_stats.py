"""Statistics of the reproduction study's rule (docs/reproduction.md, "The verdict rule"), shared by
tools/repro-verdict.py and tools/repro-summary.py: Student's t tail (no SciPy on the machines), the
Welch-Satterthwaite degrees of freedom of d / SE, one-sided p-values of a comparison in the paper's and in
the opposite direction, Holm's step-down, and the false-positive rate of the 2-SE rule at n seeds.
"""
import math
import random

# the family-wise level of the Holm-adjusted verdicts, per direction: the 2-SE rule's own one-sided level when
# d / SE is taken as normal, 1 - Phi(2) = 0.02275, so that a claim of one comparison keeps its raw verdict and
# the adjustment shows the multiplicity alone (the rule's real level at n = 3 is false_positive_rate's)
HOLM_ALPHA = 0.5 * math.erfc(2.0 / math.sqrt(2.0))
# a verdict "within 2-2.5 SE" of the rule's threshold is marginal (docs/reproduction.md, follow-ups)
MARGINAL = (2.0, 2.5)


def _betacf(a, b, x):
    """continued fraction of the regularised incomplete beta (modified Lentz)"""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a, b, x):
    """I_x(a, b), the regularised incomplete beta function"""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbeta) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbeta) * _betacf(b, a, 1.0 - x) / b


def t_sf(t, df):
    """P(T > t) for Student's t with df (real, > 0) degrees of freedom"""
    if math.isnan(t) or math.isnan(df):
        return float("nan")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if math.isinf(df):
        return 0.5 * math.erfc(t / math.sqrt(2.0))
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def welch_df(parts):
    """Welch-Satterthwaite degrees of freedom of a sum of independent s^2/n terms: parts = [(s^2/n, n), ...]"""
    num = sum(v for v, _ in parts) ** 2
    den = sum(v * v / (n - 1) for v, n in parts if n > 1)
    if den == 0.0:
        # every group without spread: d / SE is not a t statistic; the smallest n - 1 is the safe bound
        return float(min(n for _, n in parts) - 1)
    return num / den


def p_values(op, d, se, df=math.inf):
    """one-sided p-values (paper's direction, opposite direction) of a comparison judged by the rule:
    for > and <, H0 d <= 0 (>= 0) and H0 d >= 0 (<= 0); for ~D, H0 |d| >= D (agreement) and H0 |d| <= D; df = inf: d / SE taken as normal"""
    if any(math.isnan(x) for x in (d, se, df)) or se <= 0.0:
        return float("nan"), float("nan")
    if op == ">":
        return t_sf(d / se, df), t_sf(-d / se, df)
    if op == "<":
        return t_sf(-d / se, df), t_sf(d / se, df)
    margin = float(op[1:])
    return t_sf((margin - abs(d)) / se, df), t_sf((abs(d) - margin) / se, df)


def distance_in_se(op, d, se, verdict):
    """how far a verdict's statistic is past (or short of) the rule's 2-SE threshold, in SE: the quantity the
    rule compares with 2 for the verdict given (for an inconclusive one, the nearer of the two thresholds)"""
    if any(math.isnan(x) for x in (d, se)) or se <= 0.0:
        return float("nan")
    if op in (">", "<"):
        return abs(d) / se
    margin = float(op[1:])
    if verdict == "reproduced":
        return (margin - abs(d)) / se
    if verdict == "contradicted":
        return (abs(d) - margin) / se
    return max((margin - abs(d)) / se, (abs(d) - margin) / se)


def untestable(op, se, n):
    """an agreement margin D that 2 SE at n seeds cannot fit under: 'reproduced' is out of reach whatever d is;
    returns the seeds per side that the observed spread would need (SE ~ 1/sqrt(n)), else None"""
    if not op.startswith("~") or math.isnan(se):
        return None
    margin = float(op[1:])
    if 2.0 * se < margin:
        return None
    return max(n + 1, math.ceil(n * (2.0 * se / margin) ** 2))


def holm(ps, alpha=HOLM_ALPHA):
    """Holm's step-down at family-wise level alpha: which of the p-values (nan: not tested) are rejected (strictly
    below the level, as the rule's d > 2 SE is strict)"""
    order = sorted((p, i) for i, p in enumerate(ps) if not math.isnan(p))
    m = len(order)
    rejected = [False] * len(ps)
    for k, (p, i) in enumerate(order):
        if p >= alpha / (m - k):
            break
        rejected[i] = True
    return rejected


def false_positive_rate(n=3, sd_ratio=1.0, draws=200000, seed=1):
    """share of comparisons of two equal means (n seeds a side, normal runs, std ratio sd_ratio) whose
    d exceeds 2 SE in one given direction, by simulation with a fixed seed (the rule's SE, sample variances)"""
    rng = random.Random(seed)
    hits = 0
    for _ in range(draws):
        a = [rng.gauss(0.0, 1.0) for _ in range(n)]
        b = [rng.gauss(0.0, sd_ratio) for _ in range(n)]
        ma, mb = sum(a) / n, sum(b) / n
        va = sum((x - ma) ** 2 for x in a) / (n - 1)
        vb = sum((x - mb) ** 2 for x in b) / (n - 1)
        hits += (ma - mb) > 2.0 * math.sqrt(va / n + vb / n)
    return hits / draws
