#!/usr/bin/env bash
# `fedhet keys` and `fedhet methods --format`: the tables scripts read (the bash completion, tools/gen-docs.py,
# tools/gen-man.sh). JSON that parses and says what the TSV says (escapes undone), a TSV row as many cells as its
# header, every key `fedhet run --help`, `partition --help`, `landscape --help`, `grid --help` and `report --help`
# list, with its type, every method's keys, the commands' options as the commands take them, and errors for a bad
# table or format.
# usage: tests/system/test_keys.sh [NAME]      (last line: "N passed, N failed, N skipped")
cd "$(dirname "$0")/../.." || exit 1
PY=/usr/bin/python3
F=${FEDHET:-bin/fedhet}
passed=0 failed=0
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fedhet-keys.XXXXXX") || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
check() { if [ -n "${SELECT:-}" ] && [ "$SELECT" != "$1" ]; then return; fi
    if "$1" >"$WORK/$1.out" 2>&1; then passed=$((passed + 1)); echo "  $1 ok"
    else failed=$((failed + 1)); echo "  $1 FAILED: $(tail -5 "$WORK/$1.out")"; fi; }
SELECT=${1:-}
TABLES="all run partition landscape grid report algo data source commands methods exit-codes"

# every table as JSON parses (json.tool), and as TSV has one header and rows of its width; the two say the same
# once the TSV escapes are undone (lists space-separated, bools true/false)
formats_agree()
{
    local t
    for t in $TABLES; do
        "$F" keys --format=json "$t" >"$WORK/$t.json" || { echo "keys --format=json $t failed"; return 1; }
        $PY -m json.tool "$WORK/$t.json" >/dev/null || { echo "keys --format=json $t: not JSON"; return 1; }
        "$F" keys --format tsv "$t" >"$WORK/$t.tsv" || { echo "keys --format tsv $t failed"; return 1; }
        $PY - "$WORK/$t.tsv" "$WORK/$t.json" "$t" <<'EOF' || return 1
import json, sys
lines = open(sys.argv[1]).read().split("\n")
assert lines[-1] == "", "no newline at the end"
rows = [l.split("\t") for l in lines[:-1]]
head, body = rows[0], rows[1:]
bad = [i + 2 for i, r in enumerate(body) if len(r) != len(head)]
if bad: sys.exit("%s: rows %s do not have %d cells" % (sys.argv[3], bad[:5], len(head)))
def unescape(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\":
            out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}[s[i + 1]]); i += 2
        else:
            out.append(s[i]); i += 1
    return "".join(out)
objs = json.load(open(sys.argv[2]))
if len(objs) != len(body) or not body: sys.exit("%s: %d JSON rows, %d TSV rows" % (sys.argv[3], len(objs), len(body)))
for o, r in zip(objs, body):
    if list(o) != head: sys.exit("%s: JSON keys %s, TSV header %s" % (sys.argv[3], list(o), head))
    for name, cell in zip(head, r):
        v = o[name]
        text = " ".join(v) if isinstance(v, list) else ("true" if v else "false") if isinstance(v, bool) else v
        if text != unescape(cell): sys.exit("%s: %s: JSON %r, TSV %r" % (sys.argv[3], name, v, cell))
EOF
    done
    "$F" keys | cmp -s - "$WORK/all.tsv" || { echo "fedhet keys is not fedhet keys all as TSV"; return 1; }
    "$F" methods --format=tsv | cmp -s - "$WORK/methods.tsv" || { echo "methods --format=tsv differs from keys methods"; return 1; }
}

# every key of the help texts is a row of its command with the type --help shows; every method key of `run --help`
# is an [algo] row naming that method; a key table's types, bools and lists are what they say
help_keys_listed()
{
    "$F" keys --format=json all >"$WORK/all.json" || return 1
    "$F" run --help >"$WORK/run.help" && "$F" partition --help >"$WORK/partition.help" || return 1
    "$F" landscape --help >"$WORK/landscape.help" || return 1
    "$F" grid --help >"$WORK/grid.help" && "$F" report --help >"$WORK/report.help" || return 1
    $PY - "$WORK" <<'EOF'
import json, re, sys
w = sys.argv[1]
rows = json.load(open(w + "/all.json"))
errors = []
for r in rows:
    if r["type"] not in ("int", "float", "bool", "string", "choice"): errors.append("type %r" % r["type"])
    if not isinstance(r["required"], bool) or not isinstance(r["methods"], list): errors.append("%s: bool/list" % r["key"])
    if r["type"] == "choice" and r["default"] not in r["allowed"].split("|"): errors.append("%s: default %r not allowed" % (r["key"], r["default"]))
    if r["required"] and r["default"]: errors.append("%s: required with a default" % r["key"])
    if r["command"] != "run" and r["methods"]: errors.append("%s: methods outside run" % r["key"])
run = {(r["section"], r["key"]): r for r in rows if r["command"] == "run" and not r["methods"]}
section, in_methods = None, False
for l in open(w + "/run.help").read().split("\n")[1:]:
    if l.startswith("Method keys"): in_methods = True; continue
    m = re.match(r"^\[(\w+)\]$", l)
    if m: section = m.group(1); continue
    if in_methods:
        m = re.match(r"^  (\S+)\s+(.*)$", l)
        if not m: continue
        for key in m.group(2).split(", "):
            if not any(r["key"] == key.strip() and m.group(1) in r["methods"] for r in rows):
                errors.append("run --help: method %s's key %s has no [algo] row naming it" % (m.group(1), key))
        continue
    m = re.match(r"^  (\S+)\s+(string|choice|float|int|bool)\s", l)
    if section and m:
        r = run.get((section, m.group(1)))
        if not r: errors.append("run --help: [%s] %s is no row of fedhet keys run" % (section, m.group(1)))
        elif r["type"] != m.group(2): errors.append("[%s] %s: --help %s, keys %s" % (section, m.group(1), m.group(2), r["type"]))
# a key line: "  KEY   (default) help"; report's options are "  --KEY   (default) help"
for command, key_re in (("partition", r"^  (\w+) +\("), ("landscape", r"^  (\w+) +\("), ("grid", r"^  (\w+)  +\("),
                        ("report", r"^  --([\w-]+) +\(")):
    names = {r["key"] for r in rows if r["command"] == command}
    listed = [k for k in re.findall(key_re, open("%s/%s.help" % (w, command)).read(), re.M) if k != "keys"]
    if not listed: errors.append("%s --help: no keys found" % command)
    errors += ["%s --help: %s is no row of fedhet keys %s" % (command, k, command) for k in listed if k not in names]
want = {("run", "fl", "rounds"): "int", ("run", "train", "lr"): "float", ("run", "algo", "method"): "choice",
        ("run", "data", "path"): "string", ("partition", "data", "scheme"): "choice", ("landscape", "landscape", "points"): "int"}
for (c, s, k), t in want.items():
    got = [r for r in rows if (r["command"], r["section"], r["key"]) == (c, s, k)]
    if len(got) != 1 or got[0]["type"] != t: errors.append("%s [%s] %s: %s rows, want one of type %s" % (c, s, k, len(got), t))
path = [r for r in rows if r["section"] == "data" and r["key"] == "path" and r["command"] == "run"]
if not path or not path[0]["required"]: errors.append("[data] path is not required")
if errors: sys.exit("\n".join(errors[:10]))
EOF
}

# every method of the methods table has a row per key in `fedhet keys algo`, naming it, with the default and help
# `fedhet methods NAME` shows for it
method_keys_listed()
{
    "$F" keys --format=json methods >"$WORK/methods.json" && "$F" keys --format=json algo >"$WORK/algo.json" || return 1
    local m
    for m in $($PY -c 'import json, sys; print(" ".join(m["method"] for m in json.load(open(sys.argv[1]))))' "$WORK/methods.json"); do
        "$F" methods "$m" >"$WORK/m.$m" || { echo "fedhet methods $m failed"; return 1; }
    done
    $PY - "$WORK" <<'EOF'
import json, re, sys
w = sys.argv[1]
methods, algo = json.load(open(w + "/methods.json")), json.load(open(w + "/algo.json"))
errors = []
for m in methods:
    text = open("%s/m.%s" % (w, m["method"])).read()
    listed = re.findall(r"^  (\S+)\s+default (.*?), (?:range|one of) ", text, re.M)
    if [k for k, _ in listed] != m["keys"]: errors.append("%s: keys %s, methods NAME %s" % (m["method"], m["keys"], listed))
    for key, default in listed:
        rows = [r for r in algo if r["key"] == key and m["method"] in r["methods"]]
        if len(rows) != 1: errors.append("%s: %d rows of key %s" % (m["method"], len(rows), key)); continue
        def same(a, b):
            try: return float(a) == float(b)
            except ValueError: return a == b
        if not same(rows[0]["default"], default):
            errors.append("%s %s: default %s, methods NAME %s" % (m["method"], key, rows[0]["default"], default))
    if m["family"] in ("", "-"): errors.append("%s: no family" % m["method"])
if errors: sys.exit("\n".join(errors[:10]))
EOF
}

# the options of `fedhet keys commands`: each one its command takes (given alone it is never an unknown option),
# and every --option a command's --help shows is listed (but --help and those it cites of other programs)
command_options()
{
    "$F" keys commands >"$WORK/commands.tsv" || return 1
    local cmd options o out
    # (a tab is whitespace to read: empty cells would vanish, so the two columns are joined by '|')
    while IFS='|' read -r cmd options; do
        for o in $options; do
            out=$(timeout 60 "$F" "$cmd" "$o" </dev/null 2>&1)
            case $out in *"unknown option"*) echo "fedhet $cmd $o: $out"; return 1 ;; esac
        done
        for o in $("$F" "$cmd" --help | sed -e 's/sbatch --array[^ ]*//' -e 's/fedhet [a-z]* --[a-z-]*//g' | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
            [ "$o" = --help ] && continue
            [[ " $options " == *" $o "* ]] || { echo "fedhet $cmd --help shows $o, which keys commands does not list"; return 1; }
        done
    done < <(awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } { print $c["command"] "|" $c["options"] }' "$WORK/commands.tsv")
    # and every command of fedhet --help is a row
    for cmd in $("$F" --help | awk '/^commands:/ { on = 1; next } on && NF == 0 { exit } on { print $1 }'); do
        awk -F'\t' -v c="$cmd" '$1 == c { f = 1 } END { exit !f }' "$WORK/commands.tsv" || { echo "no row for $cmd"; return 1; }
    done
}

# a table that does not exist, a bad format, a stray argument: exit 1 naming them, nothing on stdout
bad_arguments()
{
    local out
    "$F" keys nosuch >"$WORK/out" 2>"$WORK/err"; [ $? -eq 1 ] && [ ! -s "$WORK/out" ] && grep -q "no table 'nosuch'" "$WORK/err" ||
        { echo "keys nosuch: $(cat "$WORK/out" "$WORK/err")"; return 1; }
    out=$("$F" keys --format=xml 2>&1); [ $? -eq 1 ] && [[ $out == *"'xml' must be tsv or json"* ]] || { echo "--format=xml: $out"; return 1; }
    out=$("$F" keys run algo 2>&1); [ $? -eq 1 ] && [[ $out == *"one table"* ]] || { echo "two tables: $out"; return 1; }
    out=$("$F" methods fedavg --format=tsv 2>&1); [ $? -eq 1 ] && [[ $out == *"without NAME"* ]] || { echo "methods NAME --format: $out"; return 1; }
    out=$("$F" keys --format 2>&1); [ $? -eq 1 ] && [[ $out == *"needs a value"* ]] || { echo "--format alone: $out"; return 1; }
}

[ -x "$F" ] || { echo "  $F missing: run make"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
check formats_agree
check help_keys_listed
check method_keys_listed
check command_options
check bad_arguments
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ]
