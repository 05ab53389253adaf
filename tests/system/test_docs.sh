#!/usr/bin/env bash
# The documentation against the code: the generated pages are current (tools/gen-docs.py --check: a new key
# or method must reach docs/ through `make docs`), the README shows the two commands and .ci/run calls
# `make test`.
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

check generated_current
check readme_commands
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ]
