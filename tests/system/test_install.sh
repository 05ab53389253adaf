#!/usr/bin/env bash
# `make install PREFIX=...`: the executable, the man page fedhet(1) made from the help texts, and the bash
# completion of subcommands, config keys and their values, all under PREFIX; the installed completion
# completes from the installed fedhet.
# usage: tests/system/test_install.sh [NAME]      (last line: "N passed, N failed, N skipped")
cd "$(dirname "$0")/../.." || exit 1
passed=0 failed=0
SELECT=${1:-}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fedhet-install.XXXXXX") || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
trap 'rm -rf "$WORK"' EXIT
check() { if [ -n "$SELECT" ] && [ "$SELECT" != "$1" ]; then return; fi
    if "$1" >"$WORK/$1.out" 2>&1; then passed=$((passed + 1)); echo "  $1 ok"
    else failed=$((failed + 1)); echo "  $1 FAILED: $(tail -5 "$WORK/$1.out")"; fi; }
P=$WORK/prefix

installed()
{
    make --no-print-directory install PREFIX="$P" >"$WORK/install.log" 2>&1 || { tail -5 "$WORK/install.log"; return 1; }
    [ -x "$P/bin/fedhet" ] || { echo "no $P/bin/fedhet"; return 1; }
    "$P/bin/fedhet" --help | grep -q '^commands:' || { echo "the installed fedhet does not run"; return 1; }
    [ -s "$P/share/man/man1/fedhet.1" ] || { echo "no man page"; return 1; }
    [ -s "$P/share/bash-completion/completions/fedhet" ] || { echo "no bash completion"; return 1; }
}

# the man page: one section per subcommand with its --help, the environment and exit codes
man_page()
{
    [ -s "$P/share/man/man1/fedhet.1" ] || installed || return 1
    local text
    text=$(MANWIDTH=200 man -l "$P/share/man/man1/fedhet.1" 2>/dev/null) || text=$(groff -man -Tascii "$P/share/man/man1/fedhet.1")
    for want in "COMMAND RUN" "COMMAND PARTITION" "COMMAND GRID" "COMMAND REPORT" "FEDHET_TRACE" "EXIT STATUS" \
                "checkpoint_every" "[data]" "dirichlet"; do
        printf '%s\n' "$text" | grep -qF -- "$want" || { echo "the man page lacks '$want'"; return 1; }
    done
    # non-ASCII characters of the help texts (docs/methods/baselines.md §0.1, mean ± std) survive as groff escapes,
    # never as "??"; the file itself is ASCII
    grep -q '??' "$P/share/man/man1/fedhet.1" && { echo "the man page has '??' where characters were: $(grep -m1 '??' "$P/share/man/man1/fedhet.1" | cut -c1-120)"; return 1; }
    LC_ALL=C grep -q $'[\x80-\xff]' "$P/share/man/man1/fedhet.1" && { echo "the man page holds raw non-ASCII bytes"; return 1; }
    grep -qF 'baselines.md \[u00A7]0.1' "$P/share/man/man1/fedhet.1" || { echo "the man page lacks the escaped §"; return 1; }
    # the exit codes are fedhet --help's table, every code of it
    local code
    for code in $(bin/fedhet --help | awk '/^exit codes/ { on = 1; next } on && NF == 0 { exit } on { print $1 }'); do
        printf '%s\n' "$text" | sed -n '/^EXIT STATUS/,/^[A-Z]/p' | awk -v c="$code" '$1 == c { f = 1 } END { exit !f }' ||
            { echo "EXIT STATUS lacks exit code $code"; return 1; }
    done
    # every subcommand of fedhet --help has its section
    for c in $(bin/fedhet --help | awk '/^commands:/ { on = 1; next } on && NF == 0 { exit } on { print $1 }'); do
        printf '%s\n' "$text" | grep -q "^COMMAND $(echo "$c" | tr a-z A-Z)\$" || { echo "no section for $c"; return 1; }
    done
}

# complete LINE: COMPREPLY of the installed completion for the command line LINE (cursor at its end)
complete_line()
{
    bash -c '
        source "$1"
        COMP_LINE=$2 COMP_POINT=${#2}
        read -r -a COMP_WORDS <<<"$2"
        [[ $2 == *" " ]] && COMP_WORDS+=("")
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        [ -n "$3" ] && COMP_WORDBREAKS=$3
        _fedhet
        printf "%s\n" "${COMPREPLY[@]}"' _ "$P/share/bash-completion/completions/fedhet" "$1" "${2:-}"
}

completion()
{
    [ -s "$P/share/bash-completion/completions/fedhet" ] || installed || return 1
    local F=$P/bin/fedhet got
    got=$(complete_line "$F r") && [ "$(echo $got)" = "run report" ] || { echo "subcommands: '$got'"; return 1; }
    got=$(complete_line "$F run x.ini fl.ro")
    [ "$got" = "fl.rounds=" ] || { echo "fl.ro: '$got'"; return 1; }
    # a value of a choice key, and the methods for algo.method (with and without '=' as a word break)
    got=$(complete_line "$F run x.ini train.optimizer=ad" $' \t\n"\'><;|&(:')
    [ "$(echo $got)" = "train.optimizer=adam train.optimizer=adamw" ] || { echo "optimizer values: '$got'"; return 1; }
    got=$(complete_line "$F run x.ini algo.method=fedsm")
    [ "$got" = fedsmoo ] || { echo "algo.method=fedsm (= breaks words): '$got'"; return 1; }
    # method keys, partition keys, options
    complete_line "$F grid g.ini algo.rho_m" | grep -qx 'algo.rho_max=' || { echo "no algo.rho_max="; return 1; }
    complete_line "$F partition fashion-mnist x.h5 sch" | grep -qx 'scheme=' || { echo "no scheme="; return 1; }
    complete_line "$F run --r" | grep -qx -- '--resume' || { echo "no --resume"; return 1; }
    # every key of every method (as `fedhet methods NAME` lists them) completes
    local m k keys
    keys=$(complete_line "$F run x.ini algo.")
    for m in $("$F" methods | awk 'NR > 1 && NF == 0 { exit } NR > 1 { print $1 }'); do
        for k in $("$F" methods "$m" | awk '/^\[algo\] keys/ { on = 1; next } on && /^  [a-z_0-9]+ +default / { print $1 }'); do
            printf '%s\n' "$keys" | grep -qx "algo.$k=" || { echo "method $m: algo.$k= does not complete"; return 1; }
        done
    done
    # values of a partition key, landscape keys, method names for fedhet methods, the options of any command
    got=$(complete_line "$F partition fashion-mnist x.h5 scheme=dir")
    [ "$got" = dirichlet ] || { echo "scheme=dir: '$got'"; return 1; }
    complete_line "$F landscape run.h5 poi" | grep -qx 'points=' || { echo "no points="; return 1; }
    got=$(complete_line "$F methods fedsm")
    [ "$got" = fedsmoo ] || { echo "methods fedsm: '$got'"; return 1; }
    complete_line "$F keys --f" | grep -qx -- '--format' || { echo "no --format for keys"; return 1; }
    # names of any length: a fedhet whose tables hold a method (and its key) with a 25-character name
    mkdir -p "$WORK/long/bin"
    cat >"$WORK/long/bin/fedhet" <<EOS
#!/bin/sh
case "\$1 \$2" in
"keys run")
    "$F" keys run | sed 's/\\tfedavg|uniform/\\ta_method_with_a_long_name|fedavg|uniform/'
    printf 'run\\talgo\\tzeta_two\\tchoice\\tup\\tup|down\\tfalse\\ta_method_with_a_long_name\\ta long method key\\n' ;;
"keys methods")
    "$F" keys methods
    printf 'a_method_with_a_long_name\\tbasic\\tfalse\\t-\\t-\\t-\\tsample counts\\tzeta_two\\tdocs/x.md\\tlong\\n' ;;
*) exec "$F" "\$@" ;;
esac
EOS
    chmod +x "$WORK/long/bin/fedhet"
    local L=$WORK/long/bin/fedhet
    got=$(complete_line "$L run x.ini algo.zeta_t")
    [ "$got" = "algo.zeta_two=" ] || { echo "the keys of a long method name do not complete: '$got'"; return 1; }
    got=$(complete_line "$L run x.ini algo.zeta_two=d")
    [ "$got" = down ] || { echo "the values of a long method's key: '$got'"; return 1; }
    got=$(complete_line "$L run x.ini algo.method=a_method_w")
    [ "$got" = a_method_with_a_long_name ] || { echo "algo.method= a long name: '$got'"; return 1; }
    got=$(complete_line "$L methods a_meth")
    [ "$got" = a_method_with_a_long_name ] || { echo "methods a long name: '$got'"; return 1; }
}

check installed
check man_page
check completion
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ]
