#!/usr/bin/env python3
"""Verdicts of the reproduction study (docs/reproduction.md): the comparisons a grid file declares before its
runs, applied to the grid's finished members.

A grid file in inputs/repro/ declares its comparisons in comment lines, written before any result is seen:

    ; verdict: ID STATISTIC LEFT OP RIGHT

  ID         a name for the comparison (e.g. T1a)
  STATISTIC  what one run contributes, from its metrics.csv:
               final:COL       the last non-empty value of COL
               lastK:COL       the mean of the last K non-empty values of COL (e.g. last5:corrupted_balanced_accuracy)
               mean:COL        the mean of COL over rounds 2.. (round 1 is warm-up; docs/methods/metrics.md C.8 for the timing columns)
               reachT:COL      the first round whose COL is >= T (docs/methods/metrics.md C.3); a run that never reaches it counts
                               as rounds + 1 and is flagged
               stdK:COL        the population std of the last K non-empty values of COL (fluctuation, FLOOD)
  LEFT/RIGHT members selected by key=value pairs joined by ',' (key: a swept key as in members.csv, or its
             part after the dot: method=fedavg,alpha=0.1); RIGHT may start with a factor, 1.5*method=fedavg.
             A side may be a difference of groups, A|B = mean(A) - mean(B) (a gap, e.g. FLOOD - FedAvg at one
             partition, compared with the same gap at another)
  OP         >  LEFT is larger;  <  LEFT is smaller;  ~D  the two agree within D

The rule (fixed in docs/reproduction.md): over the seeds, d = mean(LEFT) - f mean(RIGHT) and
SE = sqrt(s_L^2/n_L + f^2 s_R^2/n_R) (sample variances; a side that is a difference of groups adds its groups'
s^2/n). For > (or <): reproduced when d > 2 SE (d < -2 SE),
contradicted when d < -2 SE (d > 2 SE), else inconclusive. For ~D: reproduced when |d| + 2 SE <= D,
contradicted when |d| - 2 SE > D, else inconclusive. Fewer than 3 runs on a side: incomplete, no verdict.
A follow-up that adds seeds to a finished comparison declares, beside its own verdict line, before its runs:

    ; pooled: ID NEW_ID GRID:ORIG_ID

  comparison ID is NEW_ID (declared in this file, two single groups) over this grid's seeds together with
  those of comparison ORIG_ID of grid GRID, whose groups' mean, std and n come from docs/repro/GRID/verdicts.csv
  (the statistic must be the same; the operator may differ: a re-operationalisation). NEW_ID's own row, the
  new seeds alone, is marked role=replication; the pooled row role=pooled.

Comparisons listed with their claim but left out of its tally are declared as such (before the runs, or with
the reason and date when added later):

    ; diagnostic: ID [ID ...] -- reason     an arm that asks why, not whether the paper's claim holds
    ; sensitivity: ID [ID ...] -- reason    another model or schedule than the claim's setting
    ; superseded: ID [ID ...] -- reason     a coding a later follow-up replaces (its pooled rows count)

  the role column of verdicts.csv carries the role. A run that fails because its method's computation
  diverged is an outcome, not a missing run, where the grid says what it counts as:

    ; failed-run: STATISTIC VALUE -- reason  every failed member counts at VALUE for STATISTIC (e.g.
                                            last5:test_accuracy 0.10, chance on 10 classes)

A ~D comparison whose 2 SE is at least D cannot be reproduced whatever d is: its note says "untestable at n"
with the seeds a side the observed spread would need. verdicts.csv also carries df, the Welch-Satterthwaite
degrees of freedom of d / SE, for the Holm-adjusted verdicts of tools/repro-summary.py.

usage: tools/repro-verdict.py GRID.ini GRID_OUTPUT_DIR [--csv OUT.csv] [--repro-dir DIR]   (markdown on stdout;
                                                          DIR: where pooled originals are, default docs/repro)
       tools/repro-verdict.py --finished GRID_OUTPUT_DIR   exit 0 when every member has ended (done or failed),
                                                          3 when some have not (a grid stopped by a signal)
       tools/repro-verdict.py --check GRID.ini [FEDHET]   before any run: every member's config is valid
                                                          (fedhet grid --list), every selector picks
                                                          at least 3 members, every pooled original exists
"""
import csv
import math
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import repro_stats as st  # noqa: E402

MIN_RUNS = 3
# the study's results, where a follow-up's pooled comparison finds its original's groups
REPRO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "repro")


def fail(msg):
    sys.stderr.write(f"repro-verdict: error: {msg}\n")
    sys.exit(2)


def comment_lines(grid_path, tag):
    return st.comment_lines(grid_path, tag)


def parse_declarations(grid_path):
    decls = []
    for lineno, text in comment_lines(grid_path, "verdict"):
        parts = text.split()
        if len(parts) != 5:
            fail(f"{grid_path}:{lineno}: expected 'ID STATISTIC LEFT OP RIGHT', got: {text}")
        ident, stat, left, op, right = parts
        if not re.fullmatch(r"(final|mean|last\d+|std\d+|reach[0-9.]+):\w+", stat):
            fail(f"{grid_path}:{lineno}: statistic '{stat}' is not final:COL, lastK:COL, stdK:COL, mean:COL or reachT:COL")
        if not re.fullmatch(r">|<|~[0-9.]+", op):
            fail(f"{grid_path}:{lineno}: operator '{op}' is not >, < or ~D")
        factor = 1.0
        fm = re.match(r"([0-9.]+)\*(.*)$", right)
        if fm:
            factor, right = float(fm.group(1)), fm.group(2)
        decls.append(dict(id=ident, stat=stat, left=parse_side(left, grid_path, lineno),
                          right=parse_side(right, grid_path, lineno), op=op, factor=factor,
                          text=f"{left} {op} {'' if factor == 1.0 else f'{factor:g}*'}{right}"))
    if not decls:
        fail(f"{grid_path} declares no '; verdict:' line")
    return decls


def parse_side(text, path, lineno):
    """[(sign, selector)]: the first group +, every group after a | -"""
    return [(1.0 if i == 0 else -1.0, parse_selector(t, path, lineno)) for i, t in enumerate(text.split("|"))]


def parse_selector(text, path, lineno):
    sel = {}
    for pair in text.split(","):
        if "=" not in pair:
            fail(f"{path}:{lineno}: selector '{text}' is not key=value[,key=value]")
        k, v = pair.split("=", 1)
        sel[k] = v
    return sel


def read_members(grid_dir):
    path = os.path.join(grid_dir, "members.csv")
    if not os.path.exists(path):
        fail(f"{path} is missing: run the grid first (make reproduce CLAIM=...)")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return rows


def matches(member, sel):
    for k, v in sel.items():
        keys = [c for c in member if c and (c == k or c.split(".", 1)[-1] == k)]
        if len(keys) != 1:
            return None  # unknown or ambiguous key
        if member[keys[0]] != v:
            return False
    return True


def column(rows, name, path):
    if not rows or name not in rows[0]:
        fail(f"{path} has no column {name}")
    # metrics.csv counts rounds from 0; statistics speak of 1-based rounds as fedhet report does (docs/methods/metrics.md C.3)
    return [(int(float(r["round"])) + 1, float(r[name])) for r in rows if r[name] not in ("", "nan")]


def run_statistic(metrics_path, stat):
    with open(metrics_path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    kind, col = stat.split(":", 1)
    values = column(rows, col, metrics_path)
    if not values:
        fail(f"{metrics_path}: column {col} has no value")
    flag = ""
    if kind == "final":
        x = values[-1][1]
    elif kind == "mean":
        later = [v for r, v in values if r >= 2] or [v for _, v in values]
        x = sum(later) / len(later)
    elif kind.startswith("last"):
        k = int(kind[4:])
        tail = [v for _, v in values[-k:]]
        x = sum(tail) / len(tail)
    elif kind.startswith("std"):
        k = int(kind[3:])
        tail = [v for _, v in values[-k:]]
        m = sum(tail) / len(tail)
        x = math.sqrt(sum((v - m) ** 2 for v in tail) / len(tail))
    else:  # reachT
        target = float(kind[5:])
        hit = [r for r, v in values if v >= target]
        last_round = int(float(rows[-1]["round"])) + 1
        x = float(hit[0]) if hit else float(last_round + 1)
        flag = "" if hit else "never reached"
    return x, flag


def group_values(grid_dir, members, sel, stat, where, failed_value=None):
    """a group's run statistics; a failed member counts at failed_value when the grid declares one for stat
    ('; failed-run:'), else not at all"""
    xs, flags = [], 0
    chosen = []
    for m in members:
        ok = matches(m, sel)
        if ok is None:
            fail(f"{where}: selector key of {sel} is not a swept key of the grid (members.csv columns)")
        if ok:
            chosen.append(m)
    if not chosen:
        fail(f"{where}: no member matches {sel}")
    for m in chosen:
        if m["state"] == "failed" and failed_value is not None:
            xs.append(failed_value)
            continue
        if m["state"] != "done":
            continue
        x, flag = run_statistic(os.path.join(grid_dir, m["member"], "metrics.csv"), stat)
        xs.append(x)
        flags += bool(flag)
    return xs, flags, len(chosen)


def mean_sd(xs):
    n = len(xs)
    m = sum(xs) / n if n else float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else float("nan")
    return m, sd


def check(grid_path, fedhet):
    """members from `fedhet grid GRID --list`: index, member, one value per swept key, then INVALID: ..."""
    decls = parse_declarations(grid_path)
    pooled = parse_pooled(grid_path, decls)
    known = {x["id"] for x in decls} | {p[0] for p in pooled}
    for ident, role in st.declared_roles(grid_path).items():
        if ident not in known:
            fail(f"{grid_path}: '; {role}:' names {ident}, which is not a comparison of this file")
    try:
        st.failed_run_values(grid_path)
    except ValueError as e:
        fail(str(e))
    out = subprocess.run([fedhet, "grid", grid_path, "--list"], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"{fedhet} grid {grid_path} --list exited {out.returncode}: {out.stderr.strip()}")
    lines = out.stdout.splitlines()
    header = next((l.split() for l in lines if l.split()[:2] == ["index", "member"]), None)
    if not header:
        fail(f"{fedhet} grid {grid_path} --list printed no member table")
    keys = header[2:]
    members, invalid = [], []
    for l in lines:
        t = l.split()
        if len(t) < 2 + len(keys) or not t[0].isdigit():
            continue
        if "INVALID:" in t:
            invalid.append(l.strip())
        m = dict(zip(keys, t[2:2 + len(keys)]))
        m.update(member=t[1], state="done")
        members.append(m)
    if invalid:
        fail(f"{grid_path}: {len(invalid)} member config(s) invalid, e.g. {invalid[0]}")
    for d in parse_declarations(grid_path):
        for _, sel in d["left"] + d["right"]:
            n = 0
            for m in members:
                ok = matches(m, sel)
                if ok is None:
                    fail(f"{grid_path}: verdict {d['id']}: {sel} names a key the grid does not sweep")
                n += ok
            if n < MIN_RUNS:
                fail(f"{grid_path}: verdict {d['id']}: {sel} selects {n} member(s), fewer than {MIN_RUNS}")
    for pid, new_id, grid, ident in pooled:
        original_row(REPRO_DIR, grid, ident, next(x for x in decls if x["id"] == new_id), f"{grid_path}: pooled {pid}")
    print(f"{grid_path}: {len(members)} members valid, {len(decls)} verdicts declared")
    return 0


def shown(v, fmt):
    """a number of the table; "—" where it is undefined (too few runs for a std, d or SE)"""
    return format(v, fmt) if math.isfinite(v) else "—"


def cell(mean, sd, n):
    """a group: mean ± sample std (n); a difference of groups has no single std: mean (n)"""
    if not math.isfinite(mean):
        return f"— ({n})"
    return f"{mean:.4f} ± {sd:.4f} ({n})" if math.isfinite(sd) else f"{mean:.4f} ({n})"


def unfinished(grid_dir):
    """members of a grid that have not ended (neither done nor failed): a grid stopped by a signal has some"""
    return [m["member"] for m in read_members(grid_dir) if m.get("state") not in ("done", "failed")]


def judge(d, L, R):
    """one comparison's row: d, SE, Welch df and the rule's verdict from its two sides' group statistics"""
    f = d["factor"]
    lm, ls, rm, rs = L["mean"], L["sd"], R["mean"], R["sd"]
    lflags, rflags = L["flags"], R["flags"]
    needed = None
    if L["n"] < MIN_RUNS or R["n"] < MIN_RUNS:
        diff, se, df = float("nan"), float("nan"), float("nan")
        v = f"incomplete ({L['n']} and {R['n']} runs done of {L['n_all']} and {R['n_all']})"
    else:
        diff = lm - f * rm
        se = math.sqrt(L["var"] + f * f * R["var"])
        df = st.welch_df(L["parts"] + [(f * f * v, n) for v, n in R["parts"]])
        v = st.rule_verdict(d["op"], diff, se)
        # an agreement margin that 2 SE cannot fit under: "reproduced" is out of reach at these seeds
        needed = st.untestable(d["op"], se, min(L["n"], R["n"]))
    note = ", ".join(s for s in (f"{lflags} left run(s) never reached" if lflags else "",
                                 f"{rflags} right run(s) never reached" if rflags else "",
                                 f"untestable at n: 2 SE >= {d['op'][1:]}, {needed} seeds a side needed"
                                 if needed else "") if s)
    return dict(id=d["id"], statistic=d["stat"], comparison=d["text"], left_mean=lm, left_std=ls, left_n=L["n"],
                right_mean=rm, right_std=rs, right_n=R["n"], difference=diff, se=se, df=df, verdict=v, note=note)


def parse_pooled(grid_path, decls):
    """'; pooled: ID NEW_ID GRID:ORIG_ID': comparison ID is NEW_ID over this grid's seeds and those of comparison
    ORIG_ID of grid GRID (docs/repro/GRID/verdicts.csv), its groups pooled from their mean, std and n; NEW_ID's
    own row (the new seeds alone) is then a replication, reported but not counted with its claim"""
    out = []
    for lineno, text in comment_lines(grid_path, "pooled"):
        parts = text.split()
        if len(parts) != 3 or ":" not in parts[2]:
            fail(f"{grid_path}:{lineno}: expected 'ID NEW_ID GRID:ORIG_ID', got: {text}")
        d = next((x for x in decls if x["id"] == parts[1]), None)
        if d is None:
            fail(f"{grid_path}:{lineno}: pooled {parts[0]}: {parts[1]} is not a verdict this file declares")
        if len(d["left"]) != 1 or len(d["right"]) != 1 or d["factor"] != 1.0:
            fail(f"{grid_path}:{lineno}: pooled {parts[0]}: {parts[1]} must compare two single groups")
        out.append((parts[0], parts[1]) + tuple(parts[2].split(":", 1)))
    return out


def original_row(repro_dir, grid, ident, d, where):
    path = os.path.join(repro_dir, grid, "verdicts.csv")
    if not os.path.exists(path):
        fail(f"{where}: pooled with {grid}:{ident}, but {path} is missing")
    with open(path, newline="", encoding="utf-8") as f:
        row = next((r for r in csv.DictReader(f) if r["id"] == ident), None)
    if row is None:
        fail(f"{where}: pooled with {grid}:{ident}, but {path} has no comparison {ident}")
    if row["statistic"] != d["stat"]:
        fail(f"{where}: pooled with {grid}:{ident}, whose statistic {row['statistic']} is not {d['stat']}")
    for k in ("left_mean", "left_std", "left_n", "right_mean", "right_std", "right_n"):
        try:
            if math.isnan(float(row[k])):
                raise ValueError
        except ValueError:
            fail(f"{where}: pooled with {grid}:{ident}, whose {k} is '{row[k]}' (a side that is a gap cannot be pooled)")
    return row


def pool(new, orig, side):
    """two groups of runs of one configuration joined: mean, sample variance and n from each group's own"""
    n1, m1, s1 = new[f"{side}_n"], new[f"{side}_mean"], new[f"{side}_std"]
    n2, m2, s2 = int(orig[f"{side}_n"]), float(orig[f"{side}_mean"]), float(orig[f"{side}_std"])
    n = n1 + n2
    m = (n1 * m1 + n2 * m2) / n
    var = ((n1 - 1) * s1 * s1 + (n2 - 1) * s2 * s2 + n1 * n2 / n * (m1 - m2) ** 2) / (n - 1)
    return dict(mean=m, var=var / n, n=n, n_all=n, flags=0, parts=[(var / n, n)], sd=math.sqrt(var))


def main(argv):
    if len(argv) >= 3 and argv[1] == "--finished":
        left = unfinished(argv[2])
        if left:
            print(f"{argv[2]}: {len(left)} member(s) not finished, e.g. {left[0]}")
            return 3
        return 0
    if len(argv) >= 3 and argv[1] == "--check":
        return check(argv[2], argv[3] if len(argv) > 3 else "bin/fedhet")
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 1
    grid_path, grid_dir = argv[1], argv[2]
    csv_out = argv[argv.index("--csv") + 1] if "--csv" in argv else None
    repro_dir = argv[argv.index("--repro-dir") + 1] if "--repro-dir" in argv else REPRO_DIR
    decls = parse_declarations(grid_path)
    pooled = parse_pooled(grid_path, decls)
    replicated = {p[1] for p in pooled}
    roles = st.declared_roles(grid_path)
    try:
        failed_values = st.failed_run_values(grid_path)
    except ValueError as e:
        fail(str(e))
    members = read_members(grid_dir)
    out_rows = []
    for d in decls:
        where = f"{grid_path}: verdict {d['id']}"
        sides = []
        for side in (d["left"], d["right"]):
            mean, var, n_done, n_all, flags, parts = 0.0, 0.0, [], [], 0, []
            for sign, sel in side:
                xs, fl, n = group_values(grid_dir, members, sel, d["stat"], where, failed_values.get(d["stat"]))
                m, sd = mean_sd(xs)
                mean += sign * m
                var += sd * sd / len(xs) if len(xs) > 1 else float("nan")
                parts.append((sd * sd / len(xs) if len(xs) > 1 else float("nan"), len(xs)))
                n_done.append(len(xs))
                n_all.append(n)
                flags += fl
            sides.append(dict(mean=mean, var=var, n=min(n_done), n_all=min(n_all), flags=flags, parts=parts,
                              sd=math.sqrt(var * min(n_done)) if len(side) == 1 and min(n_done) > 1 else float("nan")))
        L, R = sides
        row = judge(d, L, R)
        row["role"] = "replication" if d["id"] in replicated else roles.get(d["id"], "")
        out_rows.append(row)
    for pid, new_id, orig_grid, orig_id in pooled:
        new = next(r for r in out_rows if r["id"] == new_id)
        d = next(x for x in decls if x["id"] == new_id)
        orig = original_row(repro_dir, orig_grid, orig_id, d, grid_path)
        if new["left_n"] < MIN_RUNS or new["right_n"] < MIN_RUNS:
            L = R = dict(mean=float("nan"), var=float("nan"), n=0, n_all=0, flags=0, parts=[], sd=float("nan"))
        else:
            L = pool(new, orig, "left")
            R = pool(new, orig, "right")
        row = judge(dict(d, id=pid, text=d["text"] + f" (with {orig_grid}'s {orig_id})"), L, R)
        row["role"] = roles.get(pid, "pooled")
        row["note"] = ", ".join(x for x in (f"seeds of {orig_grid}'s {orig_id} and {new_id}", row["note"]) if x)
        out_rows.append(row)
    print("| id | statistic | comparison | left: mean ± std (n) | right: mean ± std (n) | d | SE | verdict |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- |")
    for r in out_rows:
        comparison = r["comparison"].replace("|", " − ")  # a gap A|B; a bare | would split the table's cell
        print(f"| {r['id']} | {r['statistic']} | {comparison} | {cell(r['left_mean'], r['left_std'], r['left_n'])} | "
              f"{cell(r['right_mean'], r['right_std'], r['right_n'])} | {shown(r['difference'], '+.4f')} | "
              f"{shown(r['se'], '.4f')} | "
              f"{r['verdict']}{' (' + r['note'] + ')' if r['note'] else ''} |")
    if csv_out:
        with open(csv_out, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(out_rows[0]))
            w.writeheader()
            w.writerows({k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()} for r in out_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
