"""Statistics of the reproduction study's rule (docs/reproduction.md, "The verdict rule"), shared by
tools/repro-verdict.py and tools/repro-summary.py: Student's t tail and quantile (no SciPy on the machines),
the Welch-Satterthwaite degrees of freedom of d / SE and d's confidence interval, one-sided p-values of a
comparison in the paper's and in the opposite direction, Holm's step-down, the false-positive rate of the
2-SE rule at n seeds, the exact permutation floor and the exact Mann-Whitney test (rounds to a target), and
the declarations of a grid file that say how its comparisons count (diagnostic, sensitivity, superseded,
the value of a failed run).
"""
import itertools
import math
import random
import re

# the family-wise level of the Holm-adjusted verdicts, per direction: the 2-SE rule's own one-sided level when
# d / SE is taken as normal, 1 - Phi(2) = 0.02275, so that a claim of one comparison keeps its raw verdict and
# the adjustment shows the multiplicity alone (the rule's real level at n = 3 is false_positive_rate's)
HOLM_ALPHA = 0.5 * math.erfc(2.0 / math.sqrt(2.0))
# the calibrated reading's family-wise level per direction (docs/reproduction.md, "The calibrated reading"):
# 5 % two-sided, so that "reproduced" or "contradicted" means d's 95 % confidence interval excludes 0 (or the
# margin), Holm over the counted comparisons of one paper
ALPHA = 0.025
# how a grid file may declare that some of its comparisons do not count in their claim's tally (listed, not
# counted): '; ROLE: ID [ID ...] -- reason'
LISTED_ROLES = ("diagnostic", "sensitivity", "superseded")
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


def rule_verdict(op, d, se):
    """the verdict rule, fixed before any result: d beyond 2 SE (docs/reproduction.md, "The verdict rule")"""
    if op == ">":
        return "reproduced" if d > 2 * se else "contradicted" if d < -2 * se else "inconclusive"
    if op == "<":
        return "reproduced" if d < -2 * se else "contradicted" if d > 2 * se else "inconclusive"
    margin = float(op[1:])
    if abs(d) + 2 * se <= margin:
        return "reproduced"
    if abs(d) - 2 * se > margin:
        return "contradicted"
    return "inconclusive"


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


def t_ppf(q, df):
    """the q-quantile of Student's t with df degrees of freedom (0 < q < 1), by bisection on t_sf"""
    if math.isnan(df) or not 0.0 < q < 1.0:
        return float("nan")
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if 1.0 - t_sf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def confidence_interval(d, se, df, level=0.95):
    """d's two-sided confidence interval, d / SE read as Student's t with df (Welch) degrees of freedom"""
    if any(math.isnan(x) for x in (d, se, df)):
        return float("nan"), float("nan")
    half = t_ppf(0.5 + level / 2.0, df) * se
    return d - half, d + half


def permutation_floor(n1, n2):
    """the smallest one-sided p-value an exact permutation (rank) test of n1 against n2 runs can give: the
    observed split is one of C(n1 + n2, n1) equally likely ones"""
    return 1.0 / math.comb(n1 + n2, n1)


def _midranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def mann_whitney(xs, ys):
    """exact one-sided p-values of Mann-Whitney's rank-sum test (ties at mid-ranks, every split of the pooled
    runs equally likely): (P(xs's rank sum <= observed), P(>= observed)), i.e. xs smaller / xs larger"""
    pooled = list(xs) + list(ys)
    ranks = _midranks(pooled)
    observed = sum(ranks[:len(xs)])
    sums = [sum(ranks[i] for i in c) for c in itertools.combinations(range(len(pooled)), len(xs))]
    eps = 1e-9
    return (sum(s <= observed + eps for s in sums) / len(sums), sum(s >= observed - eps for s in sums) / len(sums))


def integer_runs(mean, sd, n, low, high):
    """the n integers in [low, high] whose mean and sample std are mean and sd (as a verdicts.csv keeps them, to
    6 digits): how a group of rounds-to-target runs is read back; None unless exactly one multiset fits"""
    fits = [c for c in itertools.combinations_with_replacement(range(low, high + 1), n)
            if abs(sum(c) / n - mean) < 1e-5 and
            abs(math.sqrt(sum((x - sum(c) / n) ** 2 for x in c) / (n - 1)) - sd) < 1e-5]
    return list(fits[0]) if len(fits) == 1 else None


def with_runs(mean, sd, n, values):
    """a group's mean, sample std and n once runs of the given values join it"""
    total, squares = mean * n, (sd * sd * (n - 1) if n > 1 else 0.0) + n * mean * mean
    total += sum(values)
    squares += sum(v * v for v in values)
    n += len(values)
    m = total / n
    return m, math.sqrt(max(squares - n * m * m, 0.0) / (n - 1)) if n > 1 else float("nan"), n


def comment_lines(grid_path, tag):
    """(line number, text) of every '; TAG: text' comment line of a grid file"""
    with open(grid_path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = re.match(rf"\s*;\s*{tag}:\s*(.*)$", line)
            if m:
                yield lineno, m.group(1).strip()


def declared_roles(grid_path):
    """{comparison id: role} of a grid file's '; diagnostic:', '; sensitivity:' and '; superseded:' lines (ids
    up to a '--' that starts the reason)"""
    roles = {}
    for role in LISTED_ROLES:
        for _, text in comment_lines(grid_path, role):
            for ident in text.split("--", 1)[0].split():
                roles[ident] = role
    return roles


def failed_run_values(grid_path):
    """{statistic: value} of a grid file's '; failed-run: STATISTIC VALUE -- reason' lines: a member that ended
    in failure (its method's computation diverged) is an outcome, counted at that value"""
    values = {}
    for lineno, text in comment_lines(grid_path, "failed-run"):
        parts = text.split("--", 1)[0].split()
        try:
            values[parts[0]] = float(parts[1])
        except (IndexError, ValueError):
            raise ValueError(f"{grid_path}:{lineno}: expected 'STATISTIC VALUE -- reason', got: {text}")
    return values
