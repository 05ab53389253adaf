# bash completion for fedhet: subcommands, their options, config keys as section.key= (run, grid), the values of
# a choice key (algo.method=<TAB> lists the methods), partition keys, and files. Everything is read from the
# fedhet being completed (its --help texts), so new keys and methods appear without editing this file.
# Installed by `make install PREFIX=...` into PREFIX/share/bash-completion/completions/fedhet; by hand:
#   source tools/fedhet-completion.bash

# the subcommands of `fedhet --help`
_fedhet_commands() { "$1" --help 2>/dev/null | awk '/^commands:/ { on = 1; next } on && NF == 0 { exit } on { print $1 }'; }

# the options (--name) a subcommand's --help mentions
_fedhet_options() { "$1" "$2" --help 2>/dev/null | grep -o -- '--[a-z][a-z-]*' | sort -u; }

# section.key of every config key, then algo.KEY of every method's keys (`fedhet run --help`)
_fedhet_config_keys()
{
    "$1" run --help 2>/dev/null | awk '
        /^config keys/ { on = 1; next }
        /^Method keys/ { on = 0; m = 1; next }
        on && /^\[[a-z]+\]$/ { s = substr($0, 2, length($0) - 2); next }
        on && /^  [a-z_0-9]+ / { print s "." $1 }
        m && /^  [^ ]+ +[^ ]/ { sub(/^  [^ ]+ +/, ""); n = split($0, k, /, */); for (i = 1; i <= n; i++) print "algo." k[i] }' | sort -u
}

# the values of a choice key ("one of a|b|c" in `fedhet run --help`), or true|false
_fedhet_config_values()
{
    local section=${2%%.*} key=${2#*.}
    "$1" run --help 2>/dev/null | awk -v s="[$section]" -v k="$key" '
        /^\[[a-z]+\]$/ { cur = $0; next }
        cur == s && $1 == k { if (match($0, /one of [^ ]+/)) { v = substr($0, RSTART + 7, RLENGTH - 7); gsub(/\|/, " ", v); print v } exit }'
}

# the keys of `fedhet partition --help` as key=
_fedhet_partition_keys() { "$1" partition --help 2>/dev/null | awk '/^keys/ { on = 1; next } on && /^  [a-z_]+ +\(/ { print $1 "=" }'; }

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
    local prefix=""
    case $cmd in
    run | grid)
        if [[ $cur == *=* ]]; then
            local key=${cur%%=*} value=${cur#*=}
            [[ $COMP_WORDBREAKS == *=* ]] || prefix="$key="
            local values
            values=$(_fedhet_config_values "$bin" "${key#grid.}")
            [ "$key" = algo.method ] && values=$("$bin" methods 2>/dev/null | awk 'NR > 1 && NF == 0 { exit } NR > 1 { print $1 }')
            COMPREPLY=($(compgen -W "$values" -P "$prefix" -- "$value"))
            [ ${#COMPREPLY[@]} -gt 0 ] || COMPREPLY=($(compgen -f -P "$prefix" -- "$value"))
        elif [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$(_fedhet_options "$bin" "$cmd")" -- "$cur"))
        elif [[ $cur == *.* && ! -e $cur && $cur != */* ]]; then
            COMPREPLY=($(compgen -W "$(_fedhet_config_keys "$bin")" -S = -- "$cur"))
            [ ${#COMPREPLY[@]} -gt 0 ] && compopt -o nospace 2>/dev/null
            [ ${#COMPREPLY[@]} -gt 0 ] || COMPREPLY=($(compgen -f -- "$cur"))
        else
            # a config file or a run folder first; keys once one is given
            COMPREPLY=($(compgen -f -- "$cur") $(compgen -W "$(_fedhet_config_keys "$bin")" -S = -- "$cur"))
            compopt -o nospace -o filenames 2>/dev/null
        fi
        ;;
    partition)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$(_fedhet_options "$bin" partition)" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$(_fedhet_partition_keys "$bin") fashion-mnist" -- "$cur") $(compgen -f -- "$cur"))
            compopt -o nospace -o filenames 2>/dev/null
        fi
        ;;
    methods)
        COMPREPLY=($(compgen -W "$("$bin" methods 2>/dev/null | awk 'NR > 1 && NF == 0 { exit } NR > 1 { print $1 }') --help" -- "$cur"))
        ;;
    *)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$(_fedhet_options "$bin" "$cmd")" -- "$cur"))
        else
            COMPREPLY=($(compgen -f -- "$cur"))
            compopt -o filenames 2>/dev/null
        fi
        ;;
    esac
}
complete -F _fedhet fedhet
