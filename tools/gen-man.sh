#!/usr/bin/env bash
# The man page fedhet(1) with help2man: the synopsis and the commands of `fedhet --help`, then a section per
# subcommand (the list from `fedhet keys commands`) holding its `--help` verbatim, the environment, the exit
# codes (`fedhet keys exit-codes`) and where the documentation is. Built by `make man` into build/man/fedhet.1
# and installed by `make install`.
# usage: tools/gen-man.sh BIN OUT.1
set -euo pipefail
bin=$1 out=$2
command -v help2man >/dev/null || { echo "error: help2man not found: run 'make deps' (package help2man)" >&2; exit 1; }
inc=$(mktemp) tmp=$out.tmp-$$
trap 'rm -f "$inc" "$tmp" "$tmp.utf8"' EXIT
# roff: a backslash is \e; a line may not start with . or ' (a request) nor, in help2man's include file,
# with [ (a section name)
roff() { sed -e 's/\\/\\e/g' -e "s/^\([.'[]\)/\\\\\&\1/"; }
# ... keeping lines that are roff requests already (the exit-code table's .TP and .B)
roff_text() { sed -e 's/\\/\\e/g'; }
# non-ASCII characters (the help texts' § and ±) as groff's \[uXXXX] escapes: help2man writes them in its own
# locale, C unless told otherwise, where each byte became "?"; escaped, the page reads the same under any locale
ascii_escapes() { perl -CSD -pe 's/([^\x00-\x7f])/sprintf("\\[u%04X]", ord($1))/ge'; }
# a column of a `fedhet keys` table (TSV, a header row naming the columns; cells escape tabs and newlines)
column() { "$bin" keys "$1" | awk -F'\t' -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next } { print $c }'; }
commands=$(column commands command)
[ -n "$commands" ] || { echo "error: $bin keys commands listed no command" >&2; exit 1; }
{
    echo '[DESCRIPTION]'
    echo 'fedhet is an MPI-parallel federated-learning simulator for studying optimisation under client'
    echo 'heterogeneity, with the sharpness-aware family of methods at its centre. Rank 0 of'
    echo '.B mpirun'
    echo 'is the server, the other ranks train the clients; data sets and checkpoints are HDF5.'
    echo 'Every subcommand takes --help; its text follows.'
    for c in $commands; do
        printf '\n[COMMAND %s]\n.nf\n' "$(echo "$c" | tr a-z A-Z)"
        "$bin" "$c" --help 2>&1 | roff
        printf '.fi\n'
    done
    cat <<'EOT'

[ENVIRONMENT]
.TP
.B FEDHET_TRACE
1: every error prints the call chain that led to it (file:line frames), not only internal errors.
.TP
.B OPENBLAS_NUM_THREADS, OMP_NUM_THREADS
threads of OpenBLAS and oneDNN per rank (train.threads sets them for a run).

EOT
    # the exit codes: the one table every command uses
    printf '\n[EXIT STATUS]\n'
    "$bin" keys exit-codes | awk -F'\t' 'NR > 1 { printf ".TP\n.B %s\n%s\n", $1, $2 }' | roff_text
    cat <<'EOT'

[FILES]
.TP
.I outputs/NAME/
a run: config.ini, metrics.csv, clients.csv, run.h5, checkpoint.h5, log.txt.

[SEE ALSO]
README.md and docs/ of the source tree: docs/usage.md, docs/configuration.md (every key),
docs/methods/ (the methods' equations), docs/reproduction.md.
EOT
} >"$inc"
help2man --no-info --no-discard-stderr --locale=C.UTF-8 --version-string="fedhet" \
    --name="MPI-parallel federated-learning simulator" --include="$inc" --output="$tmp.utf8" "$bin"
ascii_escapes <"$tmp.utf8" >"$tmp"
rm -f "$tmp.utf8"
mv "$tmp" "$out"
