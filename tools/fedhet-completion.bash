# bash completion for fedhet: subcommands, their options, config keys as section.key= (run, grid) or key=
# (partition, landscape), the values of a choice or bool key (algo.method=<TAB> lists the methods), method names,
# and files. Everything is read from the tables of the fedhet being completed (`fedhet keys`: TSV with a header
# row), so new commands, keys and methods appear without editing this file, whatever the length of their names.
# Installed by `make install PREFIX=...` into PREFIX/share/bash-completion/completions/fedhet; by hand:
#   source tools/fedhet-completion.bash

# column NAME of the rows of `fedhet keys TABLE` (the header row names the columns)
_fedhet_column() { "$1" keys "$2" 2>/dev/null | awk -F'\t' -v col="$3" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next } c { print $c }'; }

# the subcommands
_fedhet_commands() { _fedhet_column "$1" commands command; }

# a column of one subcommand's row of `fedhet keys commands` (options: its --options, space-separated; keys: the
# command whose config keys it takes)
_fedhet_command_field()
{
    "$1" keys commands 2>/dev/null | awk -F'\t' -v cmd="$2" -v col="$3" '
        NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
        $1 == cmd && c { print $c }'
}

# the keys of command $2 as section.key (run) or key (partition, landscape: given without their section)
_fedhet_keys()
{
    "$1" keys "$2" 2>/dev/null | awk -F'\t' -v cmd="$2" 'NR > 1 { print (cmd == "run" ? $2 "." $3 : $3) }' | sort -u
}

# the values of key $3 of command $2 (section.key for run): a choice's choices or a bool's true|false, over every
# row of that key (an [algo] key may have a row per method)
_fedhet_key_values()
{
    "$1" keys "$2" 2>/dev/null | awk -F'\t' -v cmd="$2" -v key="$3" '
        NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "type") t = i; if ($i == "allowed") a = i } next }
        (cmd == "run" ? $2 "." $3 : $3) == key && ($t == "choice" || $t == "bool") { n = split($a, v, "|"); for (i = 1; i <= n; i++) print v[i] }' |
        sort -u
}

_fedhet()
{
    local bin=${COMP_WORDS[0]} cmd=${COMP_WORDS[1]:-}
    # the word being completed, whole: bash splits "algo.method=fed" at '=' (COMP_WORDBREAKS)
    local line=${COMP_LINE:0:COMP_POINT} cur
    cur=${line##*[[:space:]]}
    COMPREPLY=()
    if [ "$COMP_CWORD" -le 1 ]; then
        COMPREPLY=($(compgen -W "$(_fedhet_commands "$bin") --help" -- "$cur"))
        return
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_fedhet_command_field "$bin" "$cmd" options) --help" -- "$cur"))
        return
    fi
    local keys prefix=""
    keys=$(_fedhet_command_field "$bin" "$cmd" keys)
    if [ -n "$keys" ] && [[ $cur == *=* ]]; then
        local key=${cur%%=*} value=${cur#*=}
        [[ $COMP_WORDBREAKS == *=* ]] || prefix="$key="
        COMPREPLY=($(compgen -W "$(_fedhet_key_values "$bin" "$keys" "${key#grid.}")" -P "$prefix" -- "$value"))
        [ ${#COMPREPLY[@]} -gt 0 ] || COMPREPLY=($(compgen -f -P "$prefix" -- "$value"))
        return
    fi
    case $keys in
    run)
        if [[ $cur == *.* && ! -e $cur && $cur != */* ]]; then
            COMPREPLY=($(compgen -W "$(_fedhet_keys "$bin" run)" -S = -- "$cur"))
            [ ${#COMPREPLY[@]} -gt 0 ] && compopt -o nospace 2>/dev/null
            [ ${#COMPREPLY[@]} -gt 0 ] || COMPREPLY=($(compgen -f -- "$cur"))
        else
            # a config file or a run folder first; keys once one is given
            COMPREPLY=($(compgen -f -- "$cur") $(compgen -W "$(_fedhet_keys "$bin" run)" -S = -- "$cur"))
            compopt -o nospace -o filenames 2>/dev/null
        fi
        ;;
    partition | landscape)
        local sources=""
        [ "$keys" = partition ] && sources=fashion-mnist
        COMPREPLY=($(compgen -W "$(_fedhet_keys "$bin" "$keys" | sed 's/$/=/') $sources" -- "$cur") $(compgen -f -- "$cur"))
        compopt -o nospace -o filenames 2>/dev/null
        ;;
    *)
        if [ "$cmd" = methods ]; then
            COMPREPLY=($(compgen -W "$(_fedhet_column "$bin" methods method)" -- "$cur"))
        else
            COMPREPLY=($(compgen -f -- "$cur"))
            compopt -o filenames 2>/dev/null
        fi
        ;;
    esac
}
complete -F _fedhet fedhet
