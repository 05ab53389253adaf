#!/usr/bin/env bash
# The documentation against the code: the generated pages are current (tools/gen-docs.py --check: a new key
# or method must reach docs/ through `make docs`), the method counts of README.md and docs/onnx.md and the family
# table of docs/methods/README.md match the registry (`fedhet keys methods`), the README shows the two commands and .ci/run calls
# `make test`, every relative link of README.md and docs/ resolves (anchors too: tools/check-links.py), every
# function of src/ keeps the error rule of docs/architecture.md (tools/check-errors.py), and no source,
# script, page or help text cites the former outside specification ("spec §13", "spec A.4",
# "spec/algorithms-sam.md", ...) instead of the pages under docs/methods/, and no file keeps a merge's conflict
# markers.
# usage: tests/system/test_docs.sh [NAME]      (last line: "N passed, N failed, N skipped")
cd "$(dirname "$0")/../.." || exit 1
PY=/usr/bin/python3
passed=0 failed=0
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fedhet-docs.XXXXXX") || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
trap 'rm -rf "$WORK"' EXIT
check() { if [ -n "${SELECT:-}" ] && [ "$SELECT" != "$1" ]; then return; fi
    if "$1" >"$WORK/$1.out" 2>&1; then passed=$((passed + 1)); echo "  $1 ok"
    else failed=$((failed + 1)); echo "  $1 FAILED: $(tail -5 "$WORK/$1.out")"; fi; }
SELECT=${1:-}

# the generated pages equal what bin/fedhet's help texts give now; and the check notices a stale page
generated_current()
{
    [ -x bin/fedhet ] || { echo "bin/fedhet missing: run make"; return 1; }
    $PY tools/gen-docs.py --check || return 1
    mkdir -p "$WORK/copy/docs/methods" "$WORK/copy/tools" "$WORK/copy/bin"
    cp docs/configuration.md "$WORK/copy/docs/" && cp docs/methods/methods-table.md "$WORK/copy/docs/methods/"
    cp tools/gen-docs.py "$WORK/copy/tools/"
    sed -i 's/^| `rounds` | int | `10` |/| `rounds` | int | `11` |/' "$WORK/copy/docs/configuration.md"
    if $PY "$WORK/copy/tools/gen-docs.py" --check --fedhet "$PWD/bin/fedhet" 2>"$WORK/stale.err"; then
        echo "a changed default in configuration.md passed --check"; return 1
    fi
    grep -q 'configuration.md out of date' "$WORK/stale.err" || { echo "no message naming the page: $(cat "$WORK/stale.err")"; return 1; }
}

# the README's two commands, and CI runs the README's test command
readme_commands()
{
    grep -q '^make run ' README.md || { echo "README.md does not show 'make run'"; return 1; }
    grep -q '^make test ' README.md || { echo "README.md does not show 'make test'"; return 1; }
    grep -q '^make test$' .ci/run || { echo ".ci/run does not call 'make test'"; return 1; }
    n=$(wc -l <README.md)
    [ "$n" -le 200 ] || { echo "README.md has $n lines (at most 200: the rest belongs under docs/)"; return 1; }
}

# every relative link resolves; and the checker finds a missing file and a missing anchor
links_resolve()
{
    $PY tools/check-links.py || return 1
    mkdir -p "$WORK/links"
    printf '# Page\n\n## A section\n\n[ok](#a-section) [bad anchor](#nowhere) [bad file](absent.md)\n' >"$WORK/links/p.md"
    printf '```\n[in code](absent-too.md)\n```\n' >>"$WORK/links/p.md"
    $PY tools/check-links.py "$WORK/links/p.md" >"$WORK/links.out" && { echo "broken links passed"; return 1; }
    grep -q "no heading or anchor 'nowhere'" "$WORK/links.out" && grep -q 'no such file.*absent.md' "$WORK/links.out" ||
        { echo "not reported: $(cat "$WORK/links.out")"; return 1; }
    grep -q 'absent-too' "$WORK/links.out" && { echo "a link inside a code block was checked"; return 1; }
    return 0
}

# the old citation forms (the former specification outside the project); "the spec" naming a
# DataPartitionSpec variable in code is not one of them
OLD_CITATION="spec/(algorithms-sam|baselines-and-protocols|models|reported-results)|\bspec (default|defaults|algorithms-sam|§|[A-D]\.[0-9]|[0-9])|\bspec's\b|\bSpec (form|\(seed)|the spec \(|\(spec \[|; spec and |the data spec|spec reconstruction|spec says|spec writes|spec section|\bspec \"\$|; spec\$|the spec\b.*(tags|notes|writes|says|leaves|is silent)|(matches|match|against|of) the spec\b"

no_outside_citations()
{
    local hits
    hits=$(grep -rnE "$OLD_CITATION" src include tests tools docs README.md Makefile --exclude=test_docs.sh)
    [ -z "$hits" ] || { echo "$(printf '%s\n' "$hits" | wc -l) citation(s) of the former specification, e.g.:"; printf '%s\n' "$hits" | head -5; return 1; }
    [ -x bin/fedhet ] || { echo "bin/fedhet missing: run make"; return 1; }
    local c m
    for c in "" $(bin/fedhet keys commands | awk -F'\t' 'NR > 1 { print $1 }'); do
        hits=$(bin/fedhet $c --help 2>&1 | grep -nE "$OLD_CITATION")
        [ -z "$hits" ] || { echo "fedhet $c --help: $hits" | head -3; return 1; }
    done
    for m in $(bin/fedhet keys methods | awk -F'\t' 'NR > 1 { print $1 }'); do
        hits=$(bin/fedhet methods "$m" | grep -nE "$OLD_CITATION")
        [ -z "$hits" ] || { echo "fedhet methods $m: $hits" | head -3; return 1; }
    done
    # the pattern finds the old forms
    printf '/* see spec algorithms-sam 8 */\n"spec default 0.1"\nspec A.4\n' | grep -cE "$OLD_CITATION" | grep -qx 3 ||
        { echo "the pattern misses an old form"; return 1; }
}

# every function of src/ keeps the error rule of docs/architecture.md (tools/check-errors.py); and the
# checker finds a stray label, a function mixing done: with a status chain, an exit that leaks and an
# "out of memory" under another code than FH_ERR_MEMORY
error_rule_kept()
{
    $PY tools/check-errors.py || return 1
    cat >"$WORK/bad.c" <<'C'
static int stray(int x)
{
    if (x) goto out;
    return 0;
out:
    return 1;
}

static int mixed(int n)
{
    int status = fh_calloc(&p, 1, 1, "p");
    if (status == FH_OK) status = step();
    if (n) goto done;
done:
    return status;
}

static int leaks(const char *path)
{
    double *buf = NULL;
    FH_CHECK(fh_calloc(&buf, 8, sizeof *buf, "buffer"));
    FILE *f = fopen(path, "r");
    if (!f) FH_FAIL(FH_ERR_IO, "%s: cannot read", path);
    fclose(f);
    free(buf);
    return FH_OK;
}

static int keeps(const char *path, char **out)
{
    char *text = malloc(16);
    if (!text) FH_FAIL(FH_ERR_MEMORY, "out of memory");
    FILE *f = fopen(path, "r");
    if (!f) {
        free(text);
        FH_FAIL(FH_ERR_IO, "%s: cannot read", path);
    }
    fclose(f);
    *out = text;
    return FH_OK;
}

static int oom_as_io(void)
{
    FH_FAIL(FH_ERR_IO, "out of memory for the table");
}
C
    $PY tools/check-errors.py "$WORK/bad.c" >"$WORK/rule.out" && { echo "the planted breaches passed"; return 1; }
    grep -q 'stray: label' "$WORK/rule.out" && grep -q 'mixed: mixed' "$WORK/rule.out" &&
        grep -q 'leaks: leak: line 23 leaves while buf' "$WORK/rule.out" &&
        grep -q 'oom_as_io: memory: line .* says "out of memory" with FH_ERR_IO' "$WORK/rule.out" ||
        { echo "not reported: $(cat "$WORK/rule.out")"; return 1; }
    grep -q 'keeps' "$WORK/rule.out" && { echo "a release before the exit was reported: $(cat "$WORK/rule.out")"; return 1; }
    return 0
}

# the method counts the README and docs/onnx.md write, and the family table of docs/methods/README.md, against the
# registry (`fedhet keys methods`): a method added or removed without them, or a table row lost, fails
methods_counted()
{
    [ -x bin/fedhet ] || { echo "bin/fedhet missing: run make"; return 1; }
    local n got
    n=$(bin/fedhet keys methods | awk 'NR > 1' | wc -l)
    [ "$n" -gt 0 ] || { echo "fedhet keys methods listed no method"; return 1; }
    got=$(grep -oE 'It has [0-9]+ methods' README.md | grep -oE '[0-9]+')
    [ "$got" = "$n" ] || { echo "README.md says 'It has ${got:-no count} methods'; fedhet keys methods lists $n"; return 1; }
    got=$(grep -oE 'every method of `fedhet methods` \([0-9]+\)' docs/onnx.md | grep -oE '[0-9]+')
    [ "$got" = "$n" ] || { echo "docs/onnx.md counts ${got:-no} methods of fedhet methods; fedhet keys methods lists $n"; return 1; }
}

# the family table of docs/methods/README.md (its "methods (config name)" column) names every registry method once,
# and the methods of one registry family (a file of src/algo) share a row; then a copy without a row fails the check
FAMILY_TABLE='
import sys
table, registry = open(sys.argv[1]).read().split("\n"), open(sys.argv[2]).read().split("\n")[1:]
family = dict(l.split("\t")[:2] for l in registry if l)
head = next((i for i, l in enumerate(table) if l.startswith("| family | methods")), None)
if head is None:
    sys.exit("%s: no table headed | family | methods" % sys.argv[1])
rows, seen, errors = {}, {}, []
for l in table[head + 2:]:
    if not l.startswith("|"):
        break
    cells = [c.strip() for c in l.strip().strip("|").split("|")]
    import re
    for m in re.findall(r"`([^`]+)`", cells[1]):
        if m not in family:
            errors.append("row %s names %s, which is no method of the registry" % (cells[0], m))
        elif m in seen:
            errors.append("%s is in rows %s and %s" % (m, seen[m], cells[0]))
        seen[m] = cells[0]
        rows.setdefault(family.get(m), set()).add(cells[0])
missing = [m for m in family if m not in seen]
if missing:
    errors.append("no row names %s" % ", ".join(missing))
errors += ["family %s is split over rows %s" % (f, ", ".join(sorted(r))) for f, r in rows.items() if f and len(r) > 1]
if errors:
    sys.exit("%s: %s" % (sys.argv[1], "; ".join(errors)))
'

families_listed()
{
    [ -x bin/fedhet ] || { echo "bin/fedhet missing: run make"; return 1; }
    bin/fedhet keys methods >"$WORK/methods.tsv" || return 1
    $PY -c "$FAMILY_TABLE" docs/methods/README.md "$WORK/methods.tsv" || return 1
    # a row taken out of a copy fails
    awk '/^\| family \| methods/ { t = 1 } t && /^\| averaging/ { t = 0; next } { print }' docs/methods/README.md \
        >"$WORK/families.md"
    if $PY -c "$FAMILY_TABLE" "$WORK/families.md" "$WORK/methods.tsv" 2>"$WORK/families.err"; then
        echo "a family table without its averaging row passed"; return 1
    fi
    grep -q 'no row names fedavg, uniform' "$WORK/families.err" || { echo "not reported: $(cat "$WORK/families.err")"; return 1; }
}

# lines a merge left unresolved ("<<<<<<< ours", ">>>>>>> theirs") in the sources, tests, tools and pages
conflict_lines() { grep -rnE '^(<{7}|>{7})( |$)' "$@" 2>/dev/null; }
no_conflict_markers()
{
    local hits
    hits=$(conflict_lines src include tests tools docs README.md Makefile .ci)
    [ -z "$hits" ] || { echo "unresolved merge: $(echo "$hits" | head -3)"; return 1; }
    printf 'text\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> branch\n' >"$WORK/merged.md"
    [ -n "$(conflict_lines "$WORK/merged.md")" ] || { echo "a file with conflict markers passed"; return 1; }
}

check generated_current
check no_conflict_markers
check methods_counted
check families_listed
check readme_commands
check links_resolve
check no_outside_citations
check error_rule_kept
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ]
