#!/usr/bin/env python3
"""The reproduction study's summary tables (docs/reproduction.md, top): per paper, how many of its claims are
reproduced, contradicted, inconclusive or pending, raw and Holm-adjusted; per claim, its verdicts, what the
verdict covers (model, data, rounds as a share of the paper's horizon, local work) and its category with the
one-line reason. From the verdicts each claim's grids wrote (docs/repro/GRID/verdicts.csv, by
tools/repro-verdict.py) and the coverage kept per claim in docs/repro/claims.csv.

A claim is the part of a comparison id before its first '-' or lower-case suffix (T1a, T1b -> T1; T14-0.5-... ->
T14); S1 is two claims, one per paper (S1-fedscam..., S1-afedsam...). By the plan's rule a claim is reproduced
when all its comparisons are, contradicted when any is, inconclusive otherwise; pending while a comparison has
no verdict yet (its grid has not run or is incomplete) and none is contradicted.

Holm-adjusted (tools/repro_stats.py): each comparison's one-sided p-values in the paper's and the opposite
direction, d / SE taken as normal as the rule reads it. A comparison is contradicted when Holm's step-down over
the claim's comparisons rejects it at the rule's own level 1 - Phi(2) = 2.28 % family-wise, reproduced when its
own p-value is below that level (a claim is reproduced only when all its comparisons are, an intersection-union
rule that needs no adjustment): a claim of one comparison keeps its raw verdict. The same with Student's t at
Welch-Satterthwaite degrees of freedom (from the groups' std in verdicts.csv; a side that is a gap of groups has
no std there, so min(n) - 1, the smallest the Welch value can be) is shown on the --comparisons page and
counted in the fpr block. An agreement comparison (~D) whose 2 SE is at least D is
"untestable at n": reproduced is out of reach whatever d is.

usage: tools/repro-summary.py [DOCS_REPRO_DIR]     (the summary block, markdown on stdout; default docs/repro)
       tools/repro-summary.py --update FILE.md [FILE.md ...] [DOCS_REPRO_DIR]
                       replaces, in each file, the text between '<!-- summary -->' and '<!-- /summary -->'
                       (required; docs/reproduction.md and docs/results.md), and where present '<!-- marginal -->' ... '<!-- /marginal -->' (the
                       comparisons within 2-2.5 SE) and '<!-- fpr -->' ... '<!-- /fpr -->' (the false-positive
                       rate of the rule at n = 3, computed); every file is checked before any is written
       tools/repro-summary.py --comparisons OUT.md [DOCS_REPRO_DIR]
                       every comparison with its d / SE, degrees of freedom, p-values, raw and Holm verdicts
"""
import csv
import glob
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import repro_stats as st  # noqa: E402

PAPERS = [  # (paper, claims), as in docs/reproduction.md
    ("000 FedSCAM", ["T1", "T2", "T3", "T4", "T5", "T6", "S1-fedscam", "S2", "S4"]),
    ("001 FedISM+", ["T10", "T11", "S5"]),
    ("002 FLOOD", ["T7", "T8", "T9", "S6"]),
    ("003 A-FedSAM", ["T12", "S1-afedsam", "S3", "S7"]),
    ("004 FedWMSAM", ["T13", "T14", "S8"]),
]
VERDICTS = ("reproduced", "contradicted", "inconclusive", "pending")
CLAIM_KEYS = ("claim", "model", "paper_model", "data", "paper_data", "rounds", "paper_rounds", "local",
              "paper_local", "category", "reason")
CATEGORIES = ("model/data", "reduced horizon", "reduced local work", "unpublished hyperparameters",
              "operationalisation", "holds at any scale")
# a category whose explanation no grid tests (e.g. no grid varies the local work of that claim)
UNTESTED = " (untested)"
# the grid files whose declarations say how a comparison counts (diagnostic, sensitivity, superseded, failed runs)
GRIDS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "inputs", "repro")


def fail(msg):
    sys.stderr.write(f"repro-summary: error: {msg}\n")
    sys.exit(2)


def claim_of(comparison_id):
    if comparison_id.startswith("S1-"):
        return "S1-" + comparison_id.split("-")[1]
    m = re.match(r"([TS]\d+)", comparison_id)
    return m.group(1) if m else comparison_id


def shown(claim):
    return claim.replace("-fedscam", " (FedSCAM)").replace("-afedsam", " (A-FedSAM)")


def num(row, key):
    try:
        return float(row.get(key) or "nan")
    except ValueError:
        return float("nan")


def grid_file(grids_dir, grid):
    path = os.path.join(grids_dir, grid + ".ini")
    return path if os.path.exists(path) else None


def recount_failed(c, row, value):
    """a committed 'incomplete (a and b runs done of c and d)' row of a grid that declares failed runs an
    outcome ('; failed-run:'): its failed members join their groups at that value, and the rule judges again"""
    m = re.match(r"incomplete \((\d+) and (\d+) runs done of (\d+) and (\d+)\)", row["verdict"])
    if not m or c["op"] not in (">", "<") or c["factor"] != 1.0:
        return
    done_l, done_r, all_l, all_r = (int(x) for x in m.groups())
    ls, rs = num(row, "left_std"), num(row, "right_std")
    if math.isnan(ls) or math.isnan(rs):
        return
    lm, ls, ln = st.with_runs(num(row, "left_mean"), ls, done_l, [value] * (all_l - done_l))
    rm, rs, rn = st.with_runs(num(row, "right_mean"), rs, done_r, [value] * (all_r - done_r))
    c.update(d=lm - rm, se=math.sqrt(ls * ls / ln + rs * rs / rn), df=st.welch_df([(ls * ls / ln, ln), (rs * rs / rn, rn)]),
             left=(lm, ls, ln), right=(rm, rs, rn), n=min(ln, rn))
    c["raw"] = st.rule_verdict(c["op"], c["d"], c["se"])
    c["recount"] = f"{all_l - done_l + all_r - done_r} failed run(s) counted at {value:g}"


def comparison(row, grid, role, failed_value=None):
    """one verdicts.csv row with the statistics the adjusted verdicts need"""
    c = dict(id=row["id"], grid=grid, raw=row["verdict"].split(" ")[0], text=row.get("comparison", ""),
             stat=row.get("statistic", ""), note=row.get("note", ""),
             d=num(row, "difference"), se=num(row, "se"), role=role, recount="")
    # a pooled row's text ends with where its other seeds come from: "... (with T1's T1a)"
    parts = re.sub(r"\s*\(with [^()]*\)$", "", c["text"]).split()
    c["op"] = parts[1] if len(parts) == 3 else ""
    f = re.match(r"([0-9.]+)\*", parts[2]) if len(parts) == 3 else None
    c["factor"] = factor = float(f.group(1)) if f else 1.0
    ln, rn = num(row, "left_n"), num(row, "right_n")
    ls, rs = num(row, "left_std"), num(row, "right_std")
    c["left"], c["right"] = (num(row, "left_mean"), ls, ln), (num(row, "right_mean"), rs, rn)
    if not math.isnan(num(row, "df")):
        c["df"] = num(row, "df")
    elif not any(math.isnan(x) for x in (ls, rs, ln, rn)):
        c["df"] = st.welch_df([(ls * ls / ln, ln), (factor * factor * rs * rs / rn, rn)])
    elif not any(math.isnan(x) for x in (ln, rn)):
        c["df"] = min(ln, rn) - 1.0  # a gap side: the Welch value's lower bound
    else:
        c["df"] = float("nan")
    c["n"] = int(min(ln, rn)) if not any(math.isnan(x) for x in (ln, rn)) else 0
    if failed_value is not None and c["raw"] == "incomplete":
        recount_failed(c, row, failed_value)
    c["t"] = c["d"] / c["se"] if c["se"] and not math.isnan(c["se"]) else float("nan")
    valid = c["op"] and c["raw"] in ("reproduced", "contradicted", "inconclusive")
    nan2 = (float("nan"),) * 2
    c["p_paper"], c["p_opposite"] = st.p_values(c["op"], c["d"], c["se"]) if valid else nan2
    c["pt_paper"], c["pt_opposite"] = st.p_values(c["op"], c["d"], c["se"], c["df"]) if valid else nan2
    c["ci"] = st.confidence_interval(c["d"], c["se"], c["df"]) if valid else nan2
    c["distance"] = st.distance_in_se(c["op"], c["d"], c["se"], c["raw"]) if valid else float("nan")
    c["needed"] = st.untestable(c["op"], c["se"], c["n"]) if valid else None
    c["runs"] = None  # the per-run values, where a rank statistic reads them back (rounds to a target)
    return c


def counted(c):
    """a comparison in its claim's tally: not a replication (its pooled row counts) nor a listed role"""
    return c["role"] in ("", "pooled")


def reach_runs(c, by_id, high):
    """the per-run rounds to the target of a reach comparison's two groups, read back from the mean and std
    verdicts.csv keeps (3 integers are determined by them); a pooled row's from its two parts"""
    if c["role"] == "pooled":
        m = re.match(r"seeds of \S+'s (\S+) and (\S+?)(,|$)", c["note"])
        parts = [by_id.get(m.group(1)), by_id.get(m.group(2))] if m else [None]
        if any(p is None or p["runs"] is None for p in parts):
            return None
        return parts[0]["runs"][0] + parts[1]["runs"][0], parts[0]["runs"][1] + parts[1]["runs"][1]
    sides = []
    for mean, sd, n in (c["left"], c["right"]):
        if any(math.isnan(x) for x in (mean, sd, n)) or n > 4:
            return None
        sides.append(st.integer_runs(mean, sd, int(n), 1, high))
    return None if None in sides else tuple(sides)


def rank_p_values(c):
    """one-sided exact Mann-Whitney p-values (paper's direction, opposite) of a reach comparison: runs that never
    reach the target tie at the worst rank, whatever round they are written as"""
    xs, ys = c["runs"]
    smaller, larger = st.mann_whitney(xs, ys)
    return (smaller, larger) if c["op"] == "<" else (larger, smaller)


def paper_of(claim):
    return next(p for p, cs in PAPERS if claim in cs)


def adjust(comps, key, paper_key, opposite_key, alpha):
    """Holm over comps (one family) on the opposite direction's p-values: contradicted where it rejects,
    reproduced where the paper's own p-value is below alpha, else inconclusive"""
    family = [c for c in comps if counted(c)]
    contra = st.holm([c[opposite_key] for c in family], alpha)
    for c, rejected in zip(family, contra):
        if c["raw"] not in ("reproduced", "contradicted", "inconclusive"):
            c[key] = "pending"
        elif math.isnan(c[paper_key]):
            c[key] = "—"  # no statistics in the file: nothing to adjust
        elif rejected:
            c[key] = "contradicted"
        elif c[paper_key] < alpha:
            c[key] = "reproduced"
        else:
            c[key] = "inconclusive"
    for c in comps:
        if not counted(c):  # listed, not counted: its own reading, unadjusted
            c[key] = ("contradicted" if c[opposite_key] < alpha else "reproduced" if c[paper_key] < alpha
                      else "inconclusive") if not math.isnan(c[paper_key]) else "—"


def read_comparisons(repro_dir, all_rows=False, grids_dir=None):
    """per claim, its comparisons (a follow-up's replication row, its new seeds alone beside the pooled
    comparison that counts, only when all_rows), with the normal reading (Holm per claim at the rule's level),
    and the calibrated one (Welch's t, or Mann-Whitney for rounds to a target; Holm per paper at ALPHA), and
    the same calibrated reading with the family per claim and over the whole study"""
    grids_dir = grids_dir or GRIDS_DIR
    found, by_id = {}, {}
    for path in sorted(glob.glob(os.path.join(repro_dir, "*", "verdicts.csv"))):
        grid = os.path.basename(os.path.dirname(path))
        if grid.startswith("paper-"):
            continue  # a paper-scale grid's verdicts are another setting's: their own section, not the claims'
        gf = grid_file(grids_dir, grid)
        roles = st.declared_roles(gf) if gf else {}
        failed = st.failed_run_values(gf) if gf else {}
        high = rounds_of(os.path.dirname(path)) + 1
        with open(path, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                role = roles.get(row["id"], row.get("role") or "")
                c = comparison(row, grid, role, failed.get(row.get("statistic", "")))
                c["high"] = high
                by_id[c["id"]] = c
                if all_rows or role != "replication":
                    found.setdefault(claim_of(row["id"]), []).append(c)
    # a pooled row's runs are its parts', read first (its original may be in a grid read after it)
    for c in sorted(by_id.values(), key=lambda x: x["role"] == "pooled"):
        if c["stat"].startswith("reach") and c["high"] > 1:
            c["runs"] = reach_runs(c, by_id, c["high"])
    for every in found.values():
        for c in every:
            c["pc_paper"], c["pc_opposite"] = rank_p_values(c) if c["runs"] else (c["pt_paper"], c["pt_opposite"])
            c["reading"] = "Mann-Whitney" if c["runs"] else "Welch t"
            if c["role"] == "replication":
                c["holm"] = c["cal"] = c["cal_claim"] = c["cal_study"] = "—"
    for every in found.values():
        adjust([c for c in every if c["role"] != "replication"], "holm", "p_paper", "p_opposite", st.HOLM_ALPHA)
        adjust([c for c in every if c["role"] != "replication"], "cal_claim", "pc_paper", "pc_opposite", st.ALPHA)
    for paper, cs in PAPERS:
        adjust([c for claim in cs for c in found.get(claim, []) if c["role"] != "replication"], "cal", "pc_paper",
               "pc_opposite", st.ALPHA)
    adjust([c for every in found.values() for c in every if c["role"] != "replication"], "cal_study", "pc_paper",
           "pc_opposite", st.ALPHA)
    return found


def rounds_of(grid_dir):
    """the rounds of a grid's runs (its summary.csv), 0 when unknown"""
    path = os.path.join(grid_dir, "summary.csv")
    if not os.path.exists(path):
        return 0
    with open(path, newline="", encoding="utf-8") as f:
        return max((int(float(r["rounds"])) for r in csv.DictReader(f) if r.get("rounds")), default=0)


def combine(vs):
    # one contradicted comparison decides the claim, whatever its other comparisons (a follow-up's, say) give
    if any(v == "contradicted" for v in vs):
        return "contradicted"
    if any(v not in ("reproduced", "inconclusive") for v in vs):
        return "pending"
    if all(v == "reproduced" for v in vs):
        return "reproduced"
    return "inconclusive"


def claim_verdict(cs, key):
    """a claim's verdict under one reading, from its counted comparisons"""
    vs = [x[key] if x[key] != "—" else x["raw"] for x in cs if counted(x)]
    return combine(vs) if vs else "pending"


def claim_verdicts(repro_dir):
    comps = read_comparisons(repro_dir)
    return {claim: claim_verdict(cs, "raw") for claim, cs in comps.items()}


def categories(r):
    """a claim's categories, in claims.csv as 'model/data; reduced horizon', each maybe marked ' (untested)'"""
    return [c.strip() for c in r["category"].split(";") if c.strip()]


def read_claims(repro_dir):
    path = os.path.join(repro_dir, "claims.csv")
    if not os.path.exists(path):
        fail(f"{path} is missing: it keeps each claim's coverage and category")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows or list(rows[0]) != list(CLAIM_KEYS):
        fail(f"{path}: columns must be {','.join(CLAIM_KEYS)}")
    claims = {}
    for i, r in enumerate(rows, 2):
        for cat in categories(r):
            if cat.removesuffix(UNTESTED) not in CATEGORIES:
                fail(f"{path}:{i}: claim {r['claim']}: category '{cat}' is not one of: {', '.join(CATEGORIES)}")
        substituted = r["model"] != r["paper_model"] or r["data"] != r["paper_data"]
        if substituted and "model/data" not in categories(r):
            fail(f"{path}:{i}: claim {r['claim']} runs another model or data than its paper's: its categories "
                 f"must include model/data")
        if not r["reason"].strip():
            fail(f"{path}:{i}: claim {r['claim']} has no reason")
        claims[r["claim"]] = r
    missing = [c for _, cs in PAPERS for c in cs if c not in claims]
    if missing:
        fail(f"{path} has no row for claim(s) {', '.join(missing)}")
    return claims


def coverage(r):
    """what the verdict covers: model, data, rounds as a share of the paper's horizon (rounds 'A / B': the
    claim's grids run A and B rounds), local work"""
    model = r["model"] + (f" (paper {r['paper_model']})" if r["paper_model"] != r["model"] else "")
    data = r["data"] + (f" (paper {r['paper_data']})" if r["paper_data"] != r["data"] else "")
    if r["paper_rounds"]:
        shares = " / ".join(f"{100.0 * float(x) / float(r['paper_rounds']):.3g}" for x in r["rounds"].split("/"))
        rounds = f"{r['rounds']} of {r['paper_rounds']} rounds ({shares} %)"
    else:
        rounds = f"{r['rounds']} rounds (a round's cost: no horizon)"
    return f"{model}; {data}; {rounds}; local {r['local']} (paper {r['paper_local']})"


def brief(c):
    return c.replace("-fedscam", "").replace("-afedsam", "")


def counts_cell(claims, verdict_of):
    """'R / C / I / P' of a paper's claims under one reading"""
    return " / ".join(str(sum(verdict_of.get(c, "pending") == v for c in claims)) for v in VERDICTS)


def deciding(mine, verdict):
    """the comparison that decides a claim under the calibrated reading: for a contradicted claim the one most
    clearly against the paper, else the weakest in the paper's direction"""
    cs = [x for x in mine if counted(x) and not math.isnan(x["pc_paper"])]
    if not cs:
        return None
    if verdict == "contradicted":
        return min(cs, key=lambda x: x["pc_opposite"])
    return max(cs, key=lambda x: x["pc_paper"])


def ci_text(x):
    if x is None:
        return "—"
    lo, hi = x["ci"]
    rank = f", Mann-Whitney p {x['pc_paper']:.2g} / {x['pc_opposite']:.2g}" if x["runs"] else ""
    return f"{x['id']}: {x['d']:+.4f} [{lo:+.4f}, {hi:+.4f}]{rank}"


def readings(repro_dir, grids_dir=None):
    comps = read_comparisons(repro_dir, grids_dir=grids_dir)
    return comps, {key: {c: claim_verdict(cs, key) for c, cs in comps.items()}
                   for key in ("cal", "raw", "holm", "cal_claim", "cal_study")}


def summary(repro_dir, grids_dir=None):
    claims = read_claims(repro_dir)
    comps, v = readings(repro_dir, grids_dir)
    a = f"{200 * st.ALPHA:g} %"
    lines = [f"| paper | claims | Welch t, Holm {a} two-sided per paper: reproduced | contradicted | inconclusive | pending | "
             "normal, raw (the 2-SE rule): R / C / I / P | normal, Holm 2.28 % per claim: R / C / I / P |",
             "| --- | --- | --- | --- | --- | ---: | --- | --- |"]
    for paper, cs in PAPERS:
        cells = []
        for verdict in VERDICTS:
            these = [brief(c) for c in cs if v["cal"].get(c, "pending") == verdict]
            cells.append(f"{len(these)} ({', '.join(these)})" if these else "0")
        lines.append(f"| {paper} | {', '.join(shown(c) for c in cs)} | " + " | ".join(cells) +
                     f" | {counts_cell(cs, v['raw'])} | {counts_cell(cs, v['holm'])} |")
    every = [c for _, cs in PAPERS for c in cs]
    total = {key: {verdict: sum(v[key].get(c, "pending") == verdict for c in every) for verdict in VERDICTS}
             for key in ("cal", "raw", "holm")}
    lines.append(f"| all | {len(every)} claims | " + " | ".join(str(total["cal"][x]) for x in VERDICTS) + " | " +
                 " / ".join(str(total["raw"][x]) for x in VERDICTS) + " | " +
                 " / ".join(str(total["holm"][x]) for x in VERDICTS) + " |")
    lines += ["", "Paired by seed: not computable from the committed files (docs/reproduction.md, \"The calibrated "
              "reading\"); every verdict above treats the two arms' seeds as independent."]
    lines += ["", f"| claim | comparisons counted (listed, not counted) | Welch t, Holm {a} two-sided per paper | deciding "
              "comparison: d [95 % CI, Welch] | normal: raw / Holm | untestable at n (seeds a side needed) | "
              "what the verdict covers | categories: reason |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    listed = []
    for _, cs in PAPERS:
        for c in cs:
            mine = comps.get(c, [])
            mine_counted = [x for x in mine if counted(x)]
            n_cal = sum(x["cal"] == "contradicted" for x in mine_counted)
            cal = v["cal"].get(c, "pending") + (f" ({n_cal} of {len(mine_counted)})" if n_cal else "")
            n_raw = sum(x["raw"] == "contradicted" for x in mine_counted)
            normal = (v["raw"].get(c, "pending") + (f" ({n_raw})" if n_raw else "") + " / " +
                      v["holm"].get(c, "pending"))
            unt = ", ".join(f"{x['id']} ({x['needed']})" for x in mine_counted if x["needed"]) or "—"
            others = [x for x in mine if not counted(x)]
            listed += [(c, x) for x in others]
            r = claims[c]
            cats = ", ".join(f"*{cat}*" for cat in categories(r))
            lines.append(f"| {shown(c)} | {len(mine_counted)}" + (f" ({len(others)})" if others else "") +
                         f" | {cal} | {ci_text(deciding(mine, v['cal'].get(c)))} | {normal} | {unt} | {coverage(r)} | "
                         f"{cats}: {r['reason']} |")
    if listed:
        lines += ["", "Listed, not counted (declared in their grid files): " + "; ".join(
            f"{x['id']} ({x['role']}{', ' + x['recount'] if x['recount'] else ''}): {x['cal']}, normal {x['raw']}"
            for _, x in listed) + "."]
    for verdict in ("contradicted", "reproduced"):
        by = []
        for cat in CATEGORIES[1:]:
            for mark in ("", UNTESTED):
                these = [shown(c) for c in every if v["cal"].get(c) == verdict and cat + mark in categories(claims[c])]
                if these:
                    by.append(f"*{cat + mark}* {len(these)} ({', '.join(these)})")
        n = sum(v["cal"].get(c) == verdict for c in every)
        lines += ["", f"{verdict.capitalize()} claims (Welch t, Holm {a} two-sided per paper), every one also *model/data*: "
                  f"{n}" + (": " + "; ".join(by) if by else "") + "."]
    return "\n".join(lines) + "\n"


def marginal(repro_dir, grids_dir=None):
    """the comparisons whose verdict statistic lies within 2-2.5 SE of its threshold (either side of a verdict)"""
    comps = read_comparisons(repro_dir, grids_dir=grids_dir)
    lo, hi = st.MARGINAL
    lines = ["| comparison | grid | d | SE | in SE | verdict | Holm-adjusted |",
             "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    for _, cs in PAPERS:
        for claim in cs:
            for x in comps.get(claim, []):
                if counted(x) and lo <= round(x["distance"], 2) <= hi:  # as the table shows it
                    lines.append(f"| {x['id']} ({x['text'].replace('|', ' − ')}) | {x['grid']} | {x['d']:+.4f} | "
                                 f"{x['se']:.4f} | {x['distance']:.2f} | {x['raw']} | {x['holm']} |")
    return "\n".join(lines) + "\n"


def flips(repro_dir, grids_dir=None):
    """the comparisons, of claims contradicted or inconclusive under some reading, whose verdict is not the same
    under the normal (raw, Holm) and the calibrated readings"""
    comps, v = readings(repro_dir, grids_dir)
    out = []
    for _, cs in PAPERS:
        for claim in cs:
            if all(v[k].get(claim) == "reproduced" for k in ("cal", "raw", "holm")):
                continue
            for x in comps.get(claim, []):
                if counted(x) and len({x["raw"], x["holm"], x["cal"]}) > 1:
                    out.append((claim, x))
    return out


def fpr(repro_dir, grids_dir=None):
    """the rule's false-positive rate at n = 3, its growth with the number of comparisons of a claim, the exact
    permutation floor, and what each reading and family does to the study's verdicts"""
    eq_t, uneq_t = st.t_sf(2.0, 4.0), st.t_sf(2.0, 2.0)
    eq_s = st.false_positive_rate(3, 1.0, 200000, seed=1)
    uneq_s = st.false_positive_rate(3, 10.0, 200000, seed=2)
    lines = ["| two groups of 3 seeds with equal means | d > 2 SE (one direction) | either direction |",
             "| --- | ---: | ---: |",
             f"| equal spreads: d / SE is t with 4 df, P(t₄ > 2) | {100 * eq_t:.2f} % | {200 * eq_t:.2f} % |",
             f"| equal spreads, simulated (200,000 pairs, seed 1) | {100 * eq_s:.2f} % | {200 * eq_s:.2f} % |",
             f"| one side 10× the other's std: t with 2 df, P(t₂ > 2) | {100 * uneq_t:.2f} % | {200 * uneq_t:.2f} % |",
             f"| one side 10× the other's std, simulated (200,000 pairs, seed 2) | {100 * uneq_s:.2f} % | "
             f"{200 * uneq_s:.2f} % |",
             "| normal statistic (SE known), P(z > 2), the level 2 SE suggests | 2.28 % | 4.55 % |",
             "",
             "| comparisons in a claim (all null, independent) | 1 | 3 | 5 | 9 | 18 | 26 |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for label, p in (("P(at least one contradicted), equal spreads", eq_t),
                     ("P(at least one contradicted), unequal spreads", uneq_t)):
        lines.append(f"| {label} | " + " | ".join(f"{100 * (1 - (1 - p) ** m):.0f} %"
                                                  for m in (1, 3, 5, 9, 18, 26)) + " |")
    lines += ["", "| seeds a side | splits of the pooled runs | smallest exact one-sided p (permutation, rank) |",
              "| ---: | ---: | ---: |"]
    for n in (3, 6, 9):
        lines.append(f"| {n} vs {n} | C({2 * n}, {n}) = {math.comb(2 * n, n)} | {st.permutation_floor(n, n):.4g} |")
    comps, v = readings(repro_dir, grids_dir)
    every = [x for cs in comps.values() for x in cs if counted(x)]
    a = f"{200 * st.ALPHA:g} % two-sided"
    lines += ["",
              "| the study's verdicts | contradicted comparisons | reproduced comparisons | contradicted claims "
              "| reproduced claims |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for key, label in (("cal", f"Welch t (Mann-Whitney for rounds to a target), Holm {a} per paper: the headline"),
                       ("cal_claim", f"the same, Holm {a} per claim"),
                       ("cal_study", f"the same, Holm {a} over the whole study"),
                       ("raw", "normal, raw (d beyond 2 SE: the rule)"),
                       ("holm", "normal, Holm-adjusted 2.28 % per claim")):
        lines.append(f"| {label} | {sum(x[key] == 'contradicted' for x in every)} | "
                     f"{sum(x[key] == 'reproduced' for x in every)} | "
                     f"{sum(x == 'contradicted' for x in v[key].values())} | "
                     f"{sum(x == 'reproduced' for x in v[key].values())} |")
    return "\n".join(lines) + "\n"


def comparisons_page(repro_dir, grids_dir=None):
    comps = read_comparisons(repro_dir, all_rows=True, grids_dir=grids_dir)
    a = f"{200 * st.ALPHA:g} % two-sided"
    lines = ["# Every comparison of the reproduction study: calibrated and normal readings",
             "",
             "Generated by `tools/repro-summary.py --comparisons` from `docs/repro/*/verdicts.csv` and the "
             "declarations of `inputs/repro/*.ini` (rule and readings: docs/reproduction.md, \"The verdict rule\" "
             "and \"The calibrated reading\"). p: one-sided, in the paper's direction / the opposite one. "
             f"Calibrated: Student's t at the Welch-Satterthwaite df (min(n) − 1 for a side that is a gap of groups), "
             f"or the exact Mann-Whitney test for rounds to a target; Holm at {a} over the counted comparisons of "
             "the claim's paper. d's 95 % CI: Welch t. Normal: d / SE as normal (the rule's reading); Holm at "
             "2.28 % over the claim's comparisons. Listed, not counted: a replication (the pooled row counts) "
             "or a comparison declared diagnostic, sensitivity or superseded in its grid file.",
             "",
             f"| claim | comparison | grid | d [95 % CI] | SE | d / SE | df | p calibrated | calibrated, Holm {a} "
             "per paper | p normal | verdict (the rule) | normal, Holm |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- | --- |"]
    for _, cs in PAPERS:
        for claim in cs:
            for x in comps.get(claim, []):
                note = f"; untestable at n ({x['needed']} seeds needed)" if x["needed"] else ""
                note += "; the new seeds alone, not counted (the pooled row counts)" if x["role"] == "replication" else ""
                note += f"; {x['role']}, not counted" if x["role"] in st.LISTED_ROLES else ""
                note += f"; {x['recount']}" if x["recount"] else ""
                lo, hi = x["ci"]
                kind = " (MW)" if x["runs"] else ""
                lines.append(f"| {shown(claim)} | {x['id']} | {x['grid']} | {x['d']:+.4f} [{lo:+.4f}, {hi:+.4f}] | "
                             f"{x['se']:.4f} | {x['t']:+.2f} | {x['df']:.1f} | "
                             f"{x['pc_paper']:.2g} / {x['pc_opposite']:.2g}{kind} | {x['cal']} | "
                             f"{x['p_paper']:.2g} / {x['p_opposite']:.2g} | {x['raw']}{note} | {x['holm']} |")
    return "\n".join(lines) + "\n"


def replace_block(text, name, body):
    start, end = f"<!-- {name} -->\n", f"<!-- /{name} -->"
    a, b = text.index(start) + len(start), text.index(end)
    return text[:a] + body + text[b:]


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv):
    grids_dir = None
    if "--grids" in argv:
        i = argv.index("--grids")
        grids_dir = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if len(argv) > 1 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) > 2 and argv[1] == "--comparisons":
        write(argv[2], comparisons_page(argv[3] if len(argv) > 3 else "docs/repro", grids_dir))
        return 0
    if len(argv) > 2 and argv[1] == "--update":
        args = argv[2:]
        repro_dir = args.pop() if len(args) > 1 and os.path.isdir(args[-1]) else "docs/repro"
        texts = {}
        for doc in args:  # every file checked before any is written
            text = open(doc, encoding="utf-8").read()
            if "<!-- summary -->\n" not in text or "<!-- /summary -->" not in text:
                fail(f"{doc} has no '<!-- summary -->' ... '<!-- /summary -->' block")
            texts[doc] = text
        blocks = {"summary": summary(repro_dir, grids_dir)}
        if any("<!-- marginal -->\n" in t for t in texts.values()):
            blocks["marginal"] = marginal(repro_dir, grids_dir)
        if any("<!-- fpr -->\n" in t for t in texts.values()):
            blocks["fpr"] = fpr(repro_dir, grids_dir)
        for doc, text in texts.items():
            for name, body in blocks.items():
                if f"<!-- {name} -->\n" in text and f"<!-- /{name} -->" in text:
                    text = replace_block(text, name, body)
            write(doc, text)
        return 0
    if len(argv) > 1 and argv[1] == "--flips":
        for claim, x in flips(argv[2] if len(argv) > 2 else "docs/repro", grids_dir):
            print(f"{shown(claim)}\t{x['id']}\t{x['grid']}\traw {x['raw']}\tHolm {x['holm']}\tcalibrated {x['cal']}")
        return 0
    sys.stdout.write(summary(argv[1] if len(argv) > 1 else "docs/repro", grids_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
