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

usage: tools/repro-verdict.py GRID.ini GRID_OUTPUT_DIR [--csv OUT.csv]   (markdown table on stdout)
       tools/repro-verdict.py --finished GRID_OUTPUT_DIR   exit 0 when every member has ended (done or failed),
                                                          3 when some have not (a grid stopped by a signal)
       tools/repro-verdict.py --check GRID.ini [FEDHET]   before any run: every member's config is valid
                                                          (fedhet grid --list) and every selector picks
                                                          at least 3 members
"""
import csv
import math
import os
import re
import subprocess
import sys

MIN_RUNS = 3


def fail(msg):
    sys.stderr.write(f"repro-verdict: error: {msg}\n")
    sys.exit(2)


def parse_declarations(grid_path):
    decls = []
    with open(grid_path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = re.match(r"\s*;\s*verdict:\s*(.*)$", line)
            if not m:
                continue
            parts = m.group(1).split()
            if len(parts) != 5:
                fail(f"{grid_path}:{lineno}: expected 'ID STATISTIC LEFT OP RIGHT', got: {m.group(1).strip()}")
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


def group_values(grid_dir, members, sel, stat, where):
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


def verdict(op, d, se):
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


def check(grid_path, fedhet):
    """members from `fedhet grid GRID --list`: index, member, one value per swept key, then INVALID: ..."""
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
    print(f"{grid_path}: {len(members)} members valid, {len(parse_declarations(grid_path))} verdicts declared")
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
    decls = parse_declarations(grid_path)
    members = read_members(grid_dir)
    out_rows = []
    for d in decls:
        where = f"{grid_path}: verdict {d['id']}"
        sides = []
        for side in (d["left"], d["right"]):
            mean, var, n_done, n_all, flags = 0.0, 0.0, [], [], 0
            for sign, sel in side:
                xs, fl, n = group_values(grid_dir, members, sel, d["stat"], where)
                m, sd = mean_sd(xs)
                mean += sign * m
                var += sd * sd / len(xs) if len(xs) > 1 else float("nan")
                n_done.append(len(xs))
                n_all.append(n)
                flags += fl
            sides.append(dict(mean=mean, var=var, n=min(n_done), n_all=min(n_all), flags=flags,
                              sd=math.sqrt(var * min(n_done)) if len(side) == 1 and min(n_done) > 1 else float("nan")))
        L, R = sides
        f = d["factor"]
        lm, ls, rm, rs = L["mean"], L["sd"], R["mean"], R["sd"]
        lx, rx = [0] * L["n"], [0] * R["n"]
        lflags, rflags = L["flags"], R["flags"]
        if L["n"] < MIN_RUNS or R["n"] < MIN_RUNS:
            diff, se = float("nan"), float("nan")
            v = f"incomplete ({L['n']} and {R['n']} runs done of {L['n_all']} and {R['n_all']})"
        else:
            diff = lm - f * rm
            se = math.sqrt(L["var"] + f * f * R["var"])
            v = verdict(d["op"], diff, se)
        note = ", ".join(s for s in (f"{lflags} left run(s) never reached" if lflags else "",
                                     f"{rflags} right run(s) never reached" if rflags else "") if s)
        out_rows.append(dict(id=d["id"], statistic=d["stat"], comparison=d["text"], left_mean=lm, left_std=ls,
                             left_n=len(lx), right_mean=rm, right_std=rs, right_n=len(rx), difference=diff,
                             se=se, verdict=v, note=note))
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
