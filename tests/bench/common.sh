# Shared by the benchmark scripts (sourced, from the repository root): statistics over alternations, CSV fields,
# and the OpenBLAS kernels both sides run with.

# field N LINE: the N-th comma-separated field of LINE
field() { cut -d, -f"$1" <<<"$2"; }

# median, min and max of the numbers on stdin, as "median,min,max" with DECIMALS decimals (default 1)
stats() {
    sort -g | awk -v d="${1:-1}" '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        f = "%." d "f"; printf f "," f "," f, m, v[1], v[NR] }'
}

# the median of the numbers on stdin, as awk prints it
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# "median [min-max]" of a stats triple
stats_text() { echo "$(field 1 "$1") [$(field 2 "$1")-$(field 3 "$1")]"; }

# median_col FILE COLUMN: the median of a metrics.csv column over rounds 2.. (round 1 is warm-up)
median_col() {
    local c
    c=$(head -1 "$1" | tr ',' '\n' | grep -nx "$2" | cut -d: -f1)
    tail -n +3 "$1" | cut -d, -f"$c" | median
}

# The machine line every table starts with.
cpu_line() { echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"; }

# Where Debian's OpenBLAS does not know the CPU it falls back to its oldest kernels (an AVX-512 Xeon run as
# "Prescott", a fifth of the speed): export OPENBLAS_CORETYPE as tools/openblas-coretype.sh says, for fedhet and
# PyTorch alike, and say so. BENCH_CORETYPE: "auto" (the default) as above, a family name to force one, "" to leave
# OpenBLAS's choice. Arguments: a program that loads the OpenBLAS in question (default: bin/fedhet --version).
bench_coretype() {
    local wanted
    if [ "${BENCH_CORETYPE-auto}" = auto ] && [ -z "${OPENBLAS_CORETYPE:-}" ]; then
        wanted=$(tools/openblas-coretype.sh "$@")
        if [ -n "$wanted" ]; then
            export OPENBLAS_CORETYPE=$wanted
            echo "OpenBLAS chose Prescott kernels for this CPU: both sides run with OPENBLAS_CORETYPE=$wanted"
        fi
    elif [ -n "${BENCH_CORETYPE:-}" ] && [ "$BENCH_CORETYPE" != auto ]; then
        export OPENBLAS_CORETYPE=$BENCH_CORETYPE
    fi
}
