#!/usr/bin/env python3
"""The reproduction study's summary table (docs/reproduction.md, top): per paper, how many of its claims are
reproduced, contradicted, inconclusive or pending, from the verdicts each claim's grid wrote
(docs/repro/GRID/verdicts.csv, by tools/repro-verdict.py).

A claim is the part of a comparison id before its first '-' or lower-case suffix (T1a, T1b -> T1; T14-0.5-... ->
T14); S1 is two claims, one per paper (S1-fedscam..., S1-afedsam...). By the plan's rule a claim is reproduced
when all its comparisons are, contradicted when any is, inconclusive otherwise; pending while a comparison has
no verdict yet (its grid has not run or is incomplete) and none is contradicted.

usage: tools/repro-summary.py [DOCS_REPRO_DIR]     (default docs/repro; markdown on stdout)
       tools/repro-summary.py --update FILE.md [FILE.md ...] [DOCS_REPRO_DIR]
                       replaces the table between '<!-- summary -->' and '<!-- /summary -->' in each file
                       (docs/reproduction.md and docs/results.md)
"""
import csv
import glob
import os
import re
import sys

PAPERS = [  # (paper, claims), as in docs/reproduction.md
    ("000 FedSCAM", ["T1", "T2", "T3", "T4", "T5", "T6", "S1-fedscam", "S2", "S4"]),
    ("001 FedISM+", ["T10", "T11", "S5"]),
    ("002 FLOOD", ["T7", "T8", "T9", "S6"]),
    ("003 A-FedSAM", ["T12", "S1-afedsam", "S3", "S7"]),
    ("004 FedWMSAM", ["T13", "T14", "S8"]),
]


def claim_of(comparison_id):
    if comparison_id.startswith("S1-"):
        return "S1-" + comparison_id.split("-")[1]
    m = re.match(r"([TS]\d+)", comparison_id)
    return m.group(1) if m else comparison_id


def claim_verdicts(repro_dir):
    found = {}
    for path in sorted(glob.glob(os.path.join(repro_dir, "*", "verdicts.csv"))):
        with open(path, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                found.setdefault(claim_of(row["id"]), []).append(row["verdict"].split(" ")[0])
    verdicts = {}
    for claim, vs in found.items():
        # one contradicted comparison decides the claim, whatever its other comparisons (a follow-up's, say) give
        if any(v == "contradicted" for v in vs):
            verdicts[claim] = "contradicted"
        elif any(v not in ("reproduced", "inconclusive") for v in vs):
            verdicts[claim] = "pending"
        elif all(v == "reproduced" for v in vs):
            verdicts[claim] = "reproduced"
        else:
            verdicts[claim] = "inconclusive"
    return verdicts


def table(repro_dir):
    verdicts = claim_verdicts(repro_dir)
    lines = ["| paper | claims | reproduced | contradicted | inconclusive | pending |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for paper, claims in PAPERS:
        count = {k: [] for k in ("reproduced", "contradicted", "inconclusive", "pending")}
        for c in claims:
            count[verdicts.get(c, "pending")].append(c.replace("-fedscam", "").replace("-afedsam", ""))
        cells = [f"{len(v)} ({', '.join(v)})" if v else "0" for v in count.values()]
        shown = ", ".join(c.replace("-fedscam", " (FedSCAM)").replace("-afedsam", " (A-FedSAM)") for c in claims)
        lines.append(f"| {paper} | {shown} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) > 1 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) > 2 and argv[1] == "--update":
        args = argv[2:]
        repro_dir = args.pop() if len(args) > 1 and os.path.isdir(args[-1]) else "docs/repro"
        start, end = "<!-- summary -->\n", "<!-- /summary -->"
        texts = {}
        for doc in args:  # every file checked before any is written
            text = open(doc, encoding="utf-8").read()
            if start not in text or end not in text:
                sys.stderr.write(f"repro-summary: error: {doc} has no '<!-- summary -->' ... '<!-- /summary -->' block\n")
                return 2
            texts[doc] = text
        summary = table(repro_dir)
        for doc, text in texts.items():
            a, b = text.index(start) + len(start), text.index(end)
            tmp = doc + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text[:a] + summary + text[b:])
            os.replace(tmp, doc)
        return 0
    sys.stdout.write(table(argv[1] if len(argv) > 1 else "docs/repro"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
