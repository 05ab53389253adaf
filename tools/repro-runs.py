#!/usr/bin/env python3
"""Every member's per-round outputs of a finished grid, kept beside its report so that every figure and every
statistic of docs/repro can be recomputed without running the grid again (the run folders stay on the machine
that ran them).

Writes, in DOCS_DIR:
  runs.csv.gz     one row per member and round: member, the member's grid keys (as members.csv names them), then
                  every column of its metrics.csv (test accuracy, losses, timings, counters, ...)
  clients.csv.gz  one row per member, round and selected client: member, its grid keys, then clients.csv's columns
Members of different methods write different columns (FLOOD's phi, ...): a file holds the union, in the order
the members first name them, empty where a member has none. A member without a metrics.csv (failed before its
first round) has no rows; members.csv (its state and message) is in the report's summary. The files are gzip with
no time stamp: the same runs give the same bytes.

usage: tools/repro-runs.py GRID_OUTPUT_DIR DOCS_DIR        (tools/reproduce.sh calls it for docs/repro/CLAIM)
Exit 1 with a message naming the file when the grid folder or a member's CSV cannot be read or is malformed."""
import csv
import gzip
import io
import os
import sys

# members.csv columns that describe the run, not its grid keys
MEMBER_FIELDS = ("index", "member", "state", "exit", "attempts", "seconds", "rounds_done", "final_accuracy",
                 "message")


def fail(msg):
    print(f"repro-runs: {msg}", file=sys.stderr)
    sys.exit(1)


def read_csv(path):
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    except (UnicodeDecodeError, csv.Error) as e:
        fail(f"{path}: not a CSV file ({e})")
    if not rows:
        fail(f"{path}: empty (no header)")
    return rows[0], rows[1:]


def gather(grid_dir, members, keys, name):
    """the rows of every member's NAME (metrics.csv or clients.csv), each prefixed with the member and its keys, under
    the union of the members' columns (methods add their own: FLOOD's phi, FedISM+'s saga_score, ...), empty where a
    member has no such column"""
    columns, tables = [], []
    for m in members:
        path = os.path.join(grid_dir, m["member"], name)
        if not os.path.exists(path):
            continue
        h, rows = read_csv(path)
        if len(set(h)) != len(h):
            fail(f"{path}: a column name appears twice")
        bad = next((i for i, r in enumerate(rows, 2) if len(r) != len(h)), None)
        if bad:
            fail(f"{path}:{bad}: {len(rows[bad - 2])} fields where the header has {len(h)}")
        columns += [c for c in h if c not in columns]
        tables.append((m, h, rows))
    out = []
    for m, h, rows in tables:
        prefix = [m["member"]] + [m[k] for k in keys]
        at = {c: i for i, c in enumerate(h)}
        out += [prefix + [r[at[c]] if c in at else "" for c in columns] for r in rows]
    return ["member"] + keys + columns, out


def write_gz(path, header, rows):
    text = io.StringIO()
    w = csv.writer(text, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as g:
            g.write(text.getvalue().encode("utf-8"))
    os.replace(tmp, path)


def main(argv):
    if len(argv) > 1 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) != 3:
        print("usage: tools/repro-runs.py GRID_OUTPUT_DIR DOCS_DIR", file=sys.stderr)
        return 1
    grid_dir, docs_dir = argv[1], argv[2]
    header, rows = read_csv(os.path.join(grid_dir, "members.csv"))
    if "member" not in header:
        fail(f"{os.path.join(grid_dir, 'members.csv')}: no 'member' column: not a grid's member table")
    members = [dict(zip(header, r)) for r in rows]
    keys = [h for h in header if h not in MEMBER_FIELDS]
    os.makedirs(docs_dir, exist_ok=True)
    n_metrics = n_clients = 0
    for name, out in (("metrics.csv", "runs.csv.gz"), ("clients.csv", "clients.csv.gz")):
        h, r = gather(grid_dir, members, keys, name)
        write_gz(os.path.join(docs_dir, out), h, r)
        if name == "metrics.csv":
            n_metrics = len(r)
        else:
            n_clients = len(r)
    print(f"repro-runs: {docs_dir}/runs.csv.gz ({n_metrics} member rounds of {len(members)} members), "
          f"{docs_dir}/clients.csv.gz ({n_clients} client rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
