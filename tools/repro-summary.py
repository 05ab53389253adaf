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
CATEGORIES = ("reduced horizon", "reduced local work", "unpublished hyperparameters", "operationalisation",
              "holds at any scale")


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


def comparison(row, grid):
    """one verdicts.csv row with the statistics the adjusted verdict needs"""
    c = dict(id=row["id"], grid=grid, raw=row["verdict"].split(" ")[0], text=row.get("comparison", ""),
             d=num(row, "difference"), se=num(row, "se"), role=row.get("role") or "")
    # a pooled row's text ends with where its other seeds come from: "... (with T1's T1a)"
    parts = re.sub(r"\s*\(with [^()]*\)$", "", c["text"]).split()
    c["op"] = parts[1] if len(parts) == 3 else ""
    f = re.match(r"([0-9.]+)\*", parts[2]) if len(parts) == 3 else None
    factor = float(f.group(1)) if f else 1.0
    ln, rn = num(row, "left_n"), num(row, "right_n")
    ls, rs = num(row, "left_std"), num(row, "right_std")
    if not math.isnan(num(row, "df")):
        c["df"] = num(row, "df")
    elif not any(math.isnan(x) for x in (ls, rs, ln, rn)):
        c["df"] = st.welch_df([(ls * ls / ln, ln), (factor * factor * rs * rs / rn, rn)])
    elif not any(math.isnan(x) for x in (ln, rn)):
        c["df"] = min(ln, rn) - 1.0  # a gap side: the Welch value's lower bound
    else:
        c["df"] = float("nan")
    c["n"] = int(min(ln, rn)) if not any(math.isnan(x) for x in (ln, rn)) else 0
    c["t"] = c["d"] / c["se"] if c["se"] and not math.isnan(c["se"]) else float("nan")
    valid = c["op"] and c["raw"] in ("reproduced", "contradicted", "inconclusive")
    nan2 = (float("nan"),) * 2
    c["p_paper"], c["p_opposite"] = st.p_values(c["op"], c["d"], c["se"]) if valid else nan2
    c["pt_paper"], c["pt_opposite"] = st.p_values(c["op"], c["d"], c["se"], c["df"]) if valid else nan2
    c["distance"] = st.distance_in_se(c["op"], c["d"], c["se"], c["raw"]) if valid else float("nan")
    c["needed"] = st.untestable(c["op"], c["se"], c["n"]) if valid else None
    return c


def read_comparisons(repro_dir, all_rows=False):
    """per claim, its comparisons; a follow-up's replication row (its new seeds alone, beside the pooled
    comparison that counts) only when all_rows"""
    found = {}
    for path in sorted(glob.glob(os.path.join(repro_dir, "*", "verdicts.csv"))):
        grid = os.path.basename(os.path.dirname(path))
        if grid.startswith("paper-"):
            continue  # a paper-scale grid's verdicts are another setting's: their own section, not the claims'
        with open(path, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                if all_rows or row.get("role") != "replication":
                    found.setdefault(claim_of(row["id"]), []).append(comparison(row, grid))
    for every in found.values():
        comps = [c for c in every if c["role"] != "replication"]  # a claim's family: the comparisons it counts
        for c in every:
            if c["role"] == "replication":
                c["holm"] = c["holm_t"] = "—"
        for key, paper, opposite in (("holm", "p_paper", "p_opposite"), ("holm_t", "pt_paper", "pt_opposite")):
            contra = st.holm([c[opposite] for c in comps])
            for c, rejected in zip(comps, contra):
                if c["raw"] not in ("reproduced", "contradicted", "inconclusive"):
                    c[key] = "pending"
                elif math.isnan(c[paper]):
                    c[key] = "—"  # no statistics in the file: nothing to adjust
                elif rejected:
                    c[key] = "contradicted"
                elif c[paper] < st.HOLM_ALPHA:
                    c[key] = "reproduced"
                else:
                    c[key] = "inconclusive"
    return found


def combine(vs):
    # one contradicted comparison decides the claim, whatever its other comparisons (a follow-up's, say) give
    if any(v == "contradicted" for v in vs):
        return "contradicted"
    if any(v not in ("reproduced", "inconclusive") for v in vs):
        return "pending"
    if all(v == "reproduced" for v in vs):
        return "reproduced"
    return "inconclusive"


def claim_verdicts(repro_dir):
    comps = read_comparisons(repro_dir)
    return {claim: combine([c["raw"] for c in cs]) for claim, cs in comps.items()}


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
        if r["category"] not in CATEGORIES:
            fail(f"{path}:{i}: claim {r['claim']}: category '{r['category']}' is not one of: {', '.join(CATEGORIES)}")
        if not r["reason"].strip():
            fail(f"{path}:{i}: claim {r['claim']} has no reason")
        claims[r["claim"]] = r
    missing = [c for _, cs in PAPERS for c in cs if c not in claims]
    if missing:
        fail(f"{path} has no row for claim(s) {', '.join(missing)}")
    return claims


def coverage(r):
    """what the verdict covers: model, data, rounds as a share of the paper's horizon, local work"""
    model = r["model"] + (f" (paper {r['paper_model']})" if r["paper_model"] != r["model"] else "")
    data = r["data"] + (f" (paper {r['paper_data']})" if r["paper_data"] != r["data"] else "")
    if r["paper_rounds"]:
        share = 100.0 * float(r["rounds"]) / float(r["paper_rounds"])
        rounds = f"{r['rounds']} of {r['paper_rounds']} rounds ({share:.3g} %)"
    else:
        rounds = f"{r['rounds']} rounds (a round's cost: no horizon)"
    return f"{model}; {data}; {rounds}; local {r['local']} (paper {r['paper_local']})"


def summary(repro_dir):
    claims = read_claims(repro_dir)
    comps = read_comparisons(repro_dir)
    raw = {c: combine([x["raw"] for x in cs]) for c, cs in comps.items()}
    adj = {c: combine([x["holm"] if x["holm"] != "—" else x["raw"] for x in cs]) for c, cs in comps.items()}
    lines = ["| paper | claims | reproduced | contradicted | inconclusive | pending | Holm-adjusted: reproduced / "
             "contradicted / inconclusive / pending |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for paper, cs in PAPERS:
        count = {k: [] for k in VERDICTS}
        holm = {k: [] for k in VERDICTS}
        for c in cs:
            count[raw.get(c, "pending")].append(c.replace("-fedscam", "").replace("-afedsam", ""))
            holm[adj.get(c, "pending")].append(c.replace("-fedscam", "").replace("-afedsam", ""))
        cells = [f"{len(v)} ({', '.join(v)})" if v else "0" for v in count.values()]
        hcell = " / ".join(str(len(v)) for v in holm.values())
        changed = [c for c in cs if raw.get(c, "pending") != adj.get(c, "pending")]
        if changed:
            hcell += " (" + ", ".join(f"{shown(c)} {adj.get(c, 'pending')}" for c in changed) + ")"
        lines.append(f"| {paper} | {', '.join(shown(c) for c in cs)} | " + " | ".join(cells) + f" | {hcell} |")
    lines += ["", "| claim | comparisons | verdict | Holm-adjusted | untestable at n (seeds a side needed) | "
              "what the verdict covers | category: reason |",
              "| --- | ---: | --- | --- | --- | --- | --- |"]
    for _, cs in PAPERS:
        for c in cs:
            mine = comps.get(c, [])
            n_contra = sum(x["raw"] == "contradicted" for x in mine)
            n_holm = sum(x["holm"] == "contradicted" for x in mine)
            v = raw.get(c, "pending") + (f" ({n_contra} of {len(mine)})" if n_contra else "")
            h = adj.get(c, "pending") + (f" ({n_holm} of {len(mine)})" if n_holm else "")
            unt = ", ".join(f"{x['id']} ({x['needed']})" for x in mine if x["needed"]) or "—"
            r = claims[c]
            lines.append(f"| {shown(c)} | {len(mine)} | {v} | {h} | {unt} | {coverage(r)} | "
                         f"*{r['category']}*: {r['reason']} |")
    every = [c for _, cs in PAPERS for c in cs]
    for verdict in ("contradicted", "reproduced"):
        by = [(cat, [shown(c) for c in every if raw.get(c) == verdict and claims[c]["category"] == cat])
              for cat in CATEGORIES]
        lines += ["", f"{verdict.capitalize()} claims by category: " +
                  "; ".join(f"*{cat}* {len(cs)} ({', '.join(cs)})" for cat, cs in by if cs) + "."]
    return "\n".join(lines) + "\n"


def marginal(repro_dir):
    """the comparisons whose verdict statistic lies within 2-2.5 SE of its threshold (either side of a verdict)"""
    comps = read_comparisons(repro_dir)
    lo, hi = st.MARGINAL
    lines = ["| comparison | grid | d | SE | in SE | verdict | Holm-adjusted |",
             "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    for _, cs in PAPERS:
        for claim in cs:
            for x in comps.get(claim, []):
                if lo <= round(x["distance"], 2) <= hi:  # as the table shows it
                    lines.append(f"| {x['id']} ({x['text'].replace('|', ' − ')}) | {x['grid']} | {x['d']:+.4f} | "
                                 f"{x['se']:.4f} | {x['distance']:.2f} | {x['raw']} | {x['holm']} |")
    return "\n".join(lines) + "\n"


def fpr(repro_dir):
    """the rule's false-positive rate at n = 3, its growth with the number of comparisons of a claim, and what
    the two corrections do to the study's verdicts"""
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
    comps = read_comparisons(repro_dir)
    every = [x for cs in comps.values() for x in cs]
    claims = {"raw": {}, "holm": {}, "holm_t": {}}
    for claim, cs in comps.items():
        for key in claims:
            claims[key][claim] = combine([x[key] if x[key] != "—" else x["raw"] for x in cs])
    lines += ["",
              "| the study's verdicts | contradicted comparisons | reproduced comparisons | contradicted claims "
              "| reproduced claims |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for key, label in (("raw", "raw (d beyond 2 SE)"),
                       ("holm", "Holm-adjusted (normal d / SE, family-wise 2.28 % per claim)"),
                       ("holm_t", "Holm-adjusted with Welch's t (n = 3: df 2-4)")):
        lines.append(f"| {label} | {sum(x[key] == 'contradicted' for x in every)} | "
                     f"{sum(x[key] == 'reproduced' for x in every)} | "
                     f"{sum(v == 'contradicted' for v in claims[key].values())} | "
                     f"{sum(v == 'reproduced' for v in claims[key].values())} |")
    return "\n".join(lines) + "\n"


def comparisons_page(repro_dir):
    comps = read_comparisons(repro_dir, all_rows=True)
    lines = ["# Every comparison of the reproduction study, raw and Holm-adjusted",
             "",
             "Generated by `tools/repro-summary.py --comparisons` from `docs/repro/*/verdicts.csv` (rule and "
             "adjustment: docs/reproduction.md, \"The verdict rule\"). p: one-sided, in the paper's direction / the opposite one, with d / SE taken as "
             "normal (the rule's own reading) and with Welch's t (df by Welch-Satterthwaite; min(n) − 1 for a "
             "side that is a gap of groups); Holm: family-wise 2.28 % over the claim's comparisons.",
             "",
             "| claim | comparison | grid | d | SE | d / SE | df | p normal | p Welch t | verdict | Holm-adjusted "
             "| Holm, Welch t |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for _, cs in PAPERS:
        for claim in cs:
            for x in comps.get(claim, []):
                note = f"; untestable at n ({x['needed']} seeds needed)" if x["needed"] else ""
                note += "; the new seeds alone, not counted (the pooled row counts)" if x["role"] == "replication" else ""
                lines.append(f"| {shown(claim)} | {x['id']} | {x['grid']} | {x['d']:+.4f} | {x['se']:.4f} | "
                             f"{x['t']:+.2f} | {x['df']:.1f} | {x['p_paper']:.2g} / {x['p_opposite']:.2g} | "
                             f"{x['pt_paper']:.2g} / {x['pt_opposite']:.2g} | {x['raw']}{note} | {x['holm']} | "
                             f"{x['holm_t']} |")
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
    if len(argv) > 1 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) > 2 and argv[1] == "--comparisons":
        write(argv[2], comparisons_page(argv[3] if len(argv) > 3 else "docs/repro"))
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
        blocks = {"summary": summary(repro_dir)}
        if any("<!-- marginal -->\n" in t for t in texts.values()):
            blocks["marginal"] = marginal(repro_dir)
        if any("<!-- fpr -->\n" in t for t in texts.values()):
            blocks["fpr"] = fpr(repro_dir)
        for doc, text in texts.items():
            for name, body in blocks.items():
                if f"<!-- {name} -->\n" in text and f"<!-- /{name} -->" in text:
                    text = replace_block(text, name, body)
            write(doc, text)
        return 0
    sys.stdout.write(summary(argv[1] if len(argv) > 1 else "docs/repro"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
