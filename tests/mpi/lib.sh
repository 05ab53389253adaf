# Shared by the MPI test scripts (tests/mpi/test_*.sh): a temporary work folder, `fh` to run
# `mpirun -np N fedhet run`, comparisons of run outputs, and the runner that calls test_<name> for each
# name in TESTS and prints "N passed, N failed, N skipped" (a test that sets SKIP_WHY is skipped, never
# passed). A script sources this file, defines setup() and its
# test_* functions and TESTS, then calls run_tests "$@".
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
ROOT=$PWD
FEDHET=$ROOT/bin/fedhet
HERE=$ROOT/tests/mpi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# A sanitized build (make DEBUG=1) runs here with AddressSanitizer and UBSan but without leak detection:
# Open MPI 4.1 never frees what MPI_Init allocates and unloads its plug-ins at MPI_Finalize, so those
# leaks point into unnamed modules that no suppression can match. The unit tests keep leak detection.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
# one run may not take longer than this (a hang is a failure, not a stuck test)
RUN_LIMIT=${FEDHET_MPI_TEST_LIMIT:-120}

SELECT=${1:-}
PASSED=0 FAILED=0 SKIPPED=0
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fedhet-mpi.XXXXXX") || { echo "cannot make a temporary folder"; echo "0 passed, 1 failed"; exit 1; }
BG_PIDS=()
T_START=$(date +%s.%N)

cleanup()
{
    # background jobs this script started, and the rank processes of its runs, grids and landscapes (their
    # command lines name a file inside $WORK, so nothing else matches)
    local p
    for p in "${BG_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for p in $(pgrep -f -- "^$FEDHET (run|grid|landscape) .*$WORK" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    if [ -n "${FEDHET_MPI_TEST_KEEP:-}" ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- helpers -------------------------------------------------------------------------------------------

REASONS=() NOTES=() SKIP_WHY=""
fail() { REASONS+=("$*"); }
note() { NOTES+=("$*"); }

# fh NP TAG ARGS...: mpirun -np NP fedhet run ARGS; stdout/stderr in $WORK/TAG.out/.err; sets RC.
# MPI_X (array) adds mpirun options such as -x VAR.
MPI_X=()
fh()
{
    local np=$1 tag=$2
    LAST_TAG=$tag
    shift 2
    timeout -k 5 "$RUN_LIMIT" mpirun --oversubscribe "${MPI_X[@]}" -np "$np" "$FEDHET" run "$@" \
        >"$WORK/$tag.out" 2>"$WORK/$tag.err"
    RC=$?
    [ "$RC" -eq 124 ] && note "$tag: timed out after $RUN_LIMIT s"
    return 0
}

# fx TAG CMD ARGS...: fedhet CMD ARGS on one process (no mpirun); output in $WORK/TAG.out/.err; sets RC
fx()
{
    local tag=$1
    LAST_TAG=$tag
    shift
    timeout -k 5 "$RUN_LIMIT" "$FEDHET" "$@" >"$WORK/$tag.out" 2>"$WORK/$tag.err"
    RC=$?
}

# fg NP TAG ARGS...: fedhet grid ARGS on NP ranks (NP 1: without mpirun, unless MPI_X is set); output in
# $WORK/TAG.out/.err; sets RC
fg()
{
    local np=$1 tag=$2
    LAST_TAG=$tag
    shift 2
    if [ "$np" = 1 ] && [ ${#MPI_X[@]} -eq 0 ]; then
        timeout -k 5 "$RUN_LIMIT" "$FEDHET" grid "$@" >"$WORK/$tag.out" 2>"$WORK/$tag.err"
    else
        timeout -k 5 "$RUN_LIMIT" mpirun --oversubscribe "${MPI_X[@]}" -np "$np" "$FEDHET" grid "$@" \
            >"$WORK/$tag.out" 2>"$WORK/$tag.err"
    fi
    RC=$?
    [ "$RC" -eq 124 ] && note "$tag: timed out after $RUN_LIMIT s"
    return 0
}

# member_state GRID_DIR MEMBER: its state in members.csv
member_state()
{
    awk -F, -v m="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "state") c = i; next } $2 == m { print $c }' \
        "$1/members.csv" 2>/dev/null
}

# the first line of a run's error message (stderr), for failure reasons
errline() { grep -m1 -E 'error|Error' "$WORK/$1.err" 2>/dev/null | cut -c1-300; }

# expect_rc WHAT RC_WANTED: records a failure (with the last run's first error line) when RC differs
expect_rc()
{
    if [ "$RC" -ne "$2" ]; then
        fail "$1: exit $RC, expected $2 ($(errline "$LAST_TAG"))"
        return 1
    fi
    return 0
}

# dump_global FILE.h5 OUT.bin: the /server/global dataset as little-endian float32 bytes
dump_global()
{
    rm -f "$2"
    h5dump -d /server/global -b LE -o "$2" "$1" >/dev/null 2>&1 && [ -s "$2" ]
}

# same_global A.h5 B.h5 WHAT: bit-identical /server/global
same_global()
{
    local a=$WORK/ga.$$.bin b=$WORK/gb.$$.bin
    if ! dump_global "$1" "$a"; then fail "$3: cannot read /server/global of $1"; return 1; fi
    if ! dump_global "$2" "$b"; then fail "$3: cannot read /server/global of $2"; return 1; fi
    if ! cmp -s "$a" "$b"; then fail "$3: /server/global differs ($(cmp "$a" "$b" 2>&1 | head -1))"; return 1; fi
    return 0
}

# untimed CSV: every column except the timing ones (t_*, seconds, cum_seconds), chosen by header name
untimed()
{
    awk -F, '
        NR == 1 { for (i = 1; i <= NF; i++) keep[i] = ($i !~ /^t_/ && $i != "seconds" && $i != "cum_seconds") }
        { out = ""; n = 0
          for (i = 1; i <= NF; i++) if (keep[i]) { out = out (n++ ? "," : "") $i }
          print out }' "$1"
}

# column FILE NAME: the values of one CSV column, by header name
column()
{
    awk -F, -v name="$2" '
        NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; if (!c) exit 1; next }
        { print $c }' "$1"
}

# close A B TOL: |A - B| <= TOL
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= t) }'; }

# same_csv A B WHAT: identical apart from timing columns
same_csv()
{
    if [ ! -f "$1" ] || [ ! -f "$2" ]; then fail "$3: missing $( [ -f "$1" ] || echo "$1") $( [ -f "$2" ] || echo "$2")"; return 1; fi
    if ! diff <(untimed "$1") <(untimed "$2") >"$WORK/csvdiff" 2>&1; then
        fail "$3: $(basename "$1") differs in untimed columns: $(head -4 "$WORK/csvdiff" | tr '\n' ' ' | cut -c1-400)"
        return 1
    fi
    return 0
}

data_rows() { if [ -f "$1" ]; then echo $(($(wc -l <"$1") - 1)); else echo -1; fi; }

rounds_done() { h5dump -a /meta/rounds_done "$1" 2>/dev/null | sed -n 's/^ *(0): *\([0-9-]*\).*/\1/p' | head -1; }

# wait_rows CSV N SECONDS PID: until CSV has N data rows; 1 when PID ended first or time ran out
wait_rows()
{
    local csv=$1 n=$2 until=$(($(date +%s) + $3)) pid=$4
    while [ "$(date +%s)" -lt "$until" ]; do
        [ -f "$csv" ] && [ "$(data_rows "$csv")" -ge "$n" ] && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.02
    done
    return 1
}

ranks_of() { pgrep -f -- "^$FEDHET run $1" 2>/dev/null | tr '\n' ' '; }

elapsed_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# ---- fixtures and method checks ------------------------------------------------------------------------

# setup_tiny: $WORK/p6.h5 (6 Dirichlet clients of a 4-class 8x8 synthetic set), $WORK/p1.h5 (one client),
# $WORK/base.ini (mlp, sgd momentum 0.9, 3 rounds, half the clients per round, fedavg) and $WORK/one.ini
setup_tiny()
{
    python3 "$HERE/make_idx.py" "$WORK/idx" 600 100 8 4 || return 1
    "$FEDHET" partition "$WORK/idx" "$WORK/p6.h5" scheme=dirichlet alpha=0.5 clients=6 min_size=5 partition_seed=1 classes=4 \
        >"$WORK/partition.out" 2>&1 || { cat "$WORK/partition.out"; return 1; }
    "$FEDHET" partition "$WORK/idx" "$WORK/p1.h5" scheme=iid clients=1 partition_seed=1 classes=4 \
        >"$WORK/partition1.out" 2>&1 || { cat "$WORK/partition1.out"; return 1; }
    cat >"$WORK/base.ini" <<EOF
; fedhet MPI tests: 6 Dirichlet clients of a 4-class 8x8 synthetic set
[data]
path = $WORK/p6.h5
eval_batch = 30            ; 4 test batches, spread over ranks

[model]
name = mlp

[train]
optimizer = sgd
lr = 0.05
momentum = 0.9
batch_size = 16
epochs = 1

[fl]
rounds = 3
selection = fraction
fraction = 0.5
seed = 3
checkpoint_every = 1

[algo]
method = fedavg

[output]
dir = $WORK/out
EOF
    sed -e "s#^path = .*#path = $WORK/p1.h5#" -e 's#^selection = .*#selection = all#' "$WORK/base.ini" >"$WORK/one.ini"
}

# client_state FILE.h5: the path of an HDF5 file with FILE's clients' persistent state as [K, n] datasets
# (/clients/vector_<i>, /clients/floats, /clients/has_state), written by fedhet inspect --client-state from the
# run folder's client-state.bin
client_state()
{
    local out=$WORK/cs.$(echo "$1" | cksum | cut -d' ' -f1).h5
    "$FEDHET" inspect "$1" --client-state "$out" >"$out.log" 2>&1 || { cat "$out.log" >&2; return 1; }
    echo "$out"
}

# dump_dataset FILE.h5 NAME OUT.bin: a dataset's raw little-endian bytes; a client's persistent state
# (/clients/vector_<i>, /clients/floats, /clients/has_state) comes from the run folder's store
dump_dataset()
{
    local f=$1
    rm -f "$3"
    case $2 in /clients/vector_* | /clients/floats | /clients/has_state) f=$(client_state "$1") || return 1 ;; esac
    h5dump -d "$2" -b LE -o "$3" "$f" >/dev/null 2>&1 && [ -s "$3" ]
}

# state_mean FILE.h5 DATASET ROW SCALE WHAT: DATASET[ROW] == SCALE * sum_k /clients/vector_0[k] (within
# float rounding) and is not zero; SCALE is 1/K for a mean (SCAFFOLD's c = mean c_k) or 1 for a sum
# (FedDyn's S = sum H_k)
state_mean()
{
    local f=$1 ds=$2 row=$3 scale=$4 what=$5 out
    dump_dataset "$f" "$ds" "$WORK/srv.bin" || { fail "$what: cannot read $ds of $f"; return 1; }
    dump_dataset "$f" /clients/vector_0 "$WORK/cli.bin" || { fail "$what: cannot read /clients/vector_0 of $f"; return 1; }
    dump_dataset "$f" /clients/has_state "$WORK/has.bin" || { fail "$what: cannot read /clients/has_state"; return 1; }
    out=$(python3 - "$WORK/srv.bin" "$WORK/cli.bin" "$WORK/has.bin" "$row" "$scale" <<'EOF'
import struct, sys
def floats(path):
    b = open(path, "rb").read()
    return struct.unpack("<%df" % (len(b) // 4), b)
srv, cli, has = floats(sys.argv[1]), floats(sys.argv[2]), floats(sys.argv[3])
row, scale = int(sys.argv[4]), float(sys.argv[5])
K = len(has); P = len(cli) // K
s = srv[row * P:(row + 1) * P]
worst = big = 0.0
for j in range(P):
    ref = scale * sum(cli[k * P + j] for k in range(K))
    big = max(big, abs(ref), abs(s[j]))
    worst = max(worst, abs(s[j] - ref))
print("K=%d P=%d trained=%d max|x|=%.3g max|diff|=%.3g" % (K, P, sum(1 for h in has if h), big, worst))
sys.exit(0 if big > 0 and worst <= 1e-5 * big + 1e-7 else 1)
EOF
)
    [ $? -eq 0 ] || { fail "$what: $ds is not $scale x the sum of the clients' vectors ($out)"; return 1; }
    note "$what: $out"
    return 0
}

# same_state A.h5 B.h5 WHAT: bit-identical /server/* datasets and clients' persistent state (whichever A has)
same_state()
{
    local d a=$WORK/sa.$$.bin b=$WORK/sb.$$.bin cs
    cs=$(client_state "$1") || { fail "$3: cannot read the client state of $1"; return 1; }
    for d in $( (h5ls -r "$1"; h5ls -r "$cs") 2>/dev/null | awk '$2 == "Dataset" && ($1 ~ /^\/server\// || $1 ~ /^\/clients\/(vector|floats|has_state)/) { print $1 }'); do
        if ! dump_dataset "$1" "$d" "$a"; then fail "$3: cannot read $d of $1"; return 1; fi
        if ! dump_dataset "$2" "$d" "$b"; then fail "$3: $2 has no readable $d"; return 1; fi
        if ! cmp -s "$a" "$b"; then fail "$3: $d differs ($(cmp "$a" "$b" 2>&1 | head -1))"; return 1; fi
    done
    return 0
}

# equal_runs WHAT NP "ARGS A" "ARGS B": two runs of $WORK/base.ini with different overrides end with
# bit-identical global models and the same test accuracies
equal_runs()
{
    local what=$1 np=$2 tag
    tag=eq$(echo "$what" | tr -c 'a-zA-Z0-9' _)
    # shellcheck disable=SC2086
    fh "$np" "${tag}A" "$WORK/base.ini" output.name=${tag}A $3
    expect_rc "$what (A: $3)" 0 || return 1
    # shellcheck disable=SC2086
    fh "$np" "${tag}B" "$WORK/base.ini" output.name=${tag}B $4
    expect_rc "$what (B: $4)" 0 || return 1
    same_global "$WORK/out/${tag}A/run.h5" "$WORK/out/${tag}B/run.h5" "$what" || return 1
    diff <(column "$WORK/out/${tag}A/metrics.csv" test_accuracy) <(column "$WORK/out/${tag}B/metrics.csv" test_accuracy) \
        >/dev/null || { fail "$what: test_accuracy differs"; return 1; }
    return 0
}

# differ_runs WHAT NP "ARGS A" "ARGS B": the two runs end with different global models (a switch that
# must change something does)
differ_runs()
{
    local what=$1 np=$2 tag
    tag=df$(echo "$what" | tr -c 'a-zA-Z0-9' _)
    # shellcheck disable=SC2086
    fh "$np" "${tag}A" "$WORK/base.ini" output.name=${tag}A $3
    expect_rc "$what (A: $3)" 0 || return 1
    # shellcheck disable=SC2086
    fh "$np" "${tag}B" "$WORK/base.ini" output.name=${tag}B $4
    expect_rc "$what (B: $4)" 0 || return 1
    dump_global "$WORK/out/${tag}A/run.h5" "$WORK/dfa.bin" && dump_global "$WORK/out/${tag}B/run.h5" "$WORK/dfb.bin" ||
        { fail "$what: cannot read the models"; return 1; }
    cmp -s "$WORK/dfa.bin" "$WORK/dfb.bin" && { fail "$what: the two runs give the same model"; return 1; }
    return 0
}

# resume_identical WHAT ARGS: 4 rounds straight (3 ranks) == 2 rounds + --resume to 4 (2 ranks), server and
# client state included
resume_identical()
{
    local what=$1 tag
    tag=rs$(echo "$what" | tr -c 'a-zA-Z0-9' _)
    shift
    fh 3 "${tag}A" "$WORK/base.ini" output.name=${tag}A fl.rounds=4 "$@"
    expect_rc "$what: 4 rounds" 0 || return 1
    fh 3 "${tag}B" "$WORK/base.ini" output.name=${tag}B fl.rounds=2 "$@"
    expect_rc "$what: 2 rounds" 0 || return 1
    fh 2 "${tag}C" --resume "$WORK/out/${tag}B" fl.rounds=4
    expect_rc "$what: --resume to 4" 0 || return 1
    same_state "$WORK/out/${tag}A/run.h5" "$WORK/out/${tag}B/run.h5" "$what: straight vs resumed" || return 1
    same_csv "$WORK/out/${tag}A/metrics.csv" "$WORK/out/${tag}B/metrics.csv" "$what: straight vs resumed" || return 1
    return 0
}

# bad_key WHAT KEY OVERRIDES...: exit 1 and a message naming KEY, no run folder
bad_key()
{
    local what=$1 key=$2 tag
    tag=bad$(echo "$what" | tr -c 'a-zA-Z0-9' _)
    shift 2
    fh 3 "$tag" "$WORK/base.ini" output.name="$tag" "$@"
    expect_rc "$what" 1 || return 1
    grep -q -- "$key" "$WORK/$tag.err" || fail "$what: the message does not name $key: $(errline "$tag")"
    [ -e "$WORK/out/$tag" ] && fail "$what: the run folder was made"
    return 0
}

# folded_on_ranks "METHOD [OVERRIDES...]"...: each method's server step folds (the aggregation column of fedhet
# methods), and 2 rounds of it on 1 and on 3 ranks end with the same model, metrics.csv and clients.csv (the sums
# are exact: docs/architecture.md "Aggregation")
folded_on_ranks()
{
    local spec method tag agg np
    "$FEDHET" methods --format=tsv >"$WORK/methods.tsv" 2>&1 || { fail "fedhet methods --format=tsv failed"; return 1; }
    for spec in "$@"; do
        method=${spec%% *}
        agg=$(awk -F'\t' -v m="$method" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "aggregation") c = i; next }
                                         $1 == m { print $c }' "$WORK/methods.tsv")
        [ "$agg" = folded ] || fail "$method: fedhet methods says its aggregation is '$agg', not folded"
        tag=fold$(echo "$spec" | tr -c 'a-zA-Z0-9' _)
        for np in 1 3; do
            # shellcheck disable=SC2086
            fh "$np" "$tag$np" "$WORK/base.ini" output.name=$tag$np fl.rounds=2 algo.method=$spec
            expect_rc "$spec on $np ranks" 0 || continue 2
        done
        same_global "$WORK/out/${tag}1/run.h5" "$WORK/out/${tag}3/run.h5" "$spec: 1 vs 3 ranks" &&
            same_csv "$WORK/out/${tag}1/metrics.csv" "$WORK/out/${tag}3/metrics.csv" "$spec: 1 vs 3 ranks" &&
            same_csv "$WORK/out/${tag}1/clients.csv" "$WORK/out/${tag}3/clients.csv" "$spec: 1 vs 3 ranks"
    done
}

# metric_values RUN COLUMN: one column of a run's metrics.csv
metric_values() { column "$WORK/out/$1/metrics.csv" "$2"; }

# run_tests [name]: setup, then every test (or the one named); prints the summary line and exits
run_tests()
{

    if [ -n "$SELECT" ]; then
        found=0
        for t in "${TESTS[@]}"; do [ "$t" = "$SELECT" ] && found=1; done
        if [ "$found" = 0 ]; then
            echo "no test named '$SELECT'; tests: ${TESTS[*]}"
            echo "0 passed, 1 failed"
            exit 1
        fi
    fi

    if [ ! -x "$FEDHET" ]; then echo "  setup FAIL: $FEDHET is missing (make first)"; echo "0 passed, 1 failed"; exit 1; fi
    if ! setup >"$WORK/setup.log" 2>&1; then
        echo "  setup FAIL: $(tail -3 "$WORK/setup.log" | tr '\n' ' ')"
        echo "0 passed, 1 failed"
        exit 1
    fi

    for t in "${TESTS[@]}"; do
        [ -n "$SELECT" ] && [ "$SELECT" != "$t" ] && continue
        REASONS=() NOTES=() SKIP_WHY=""
        t0=$(date +%s.%N)
        "test_$t"
        took=$(elapsed_since "$t0")
        if [ ${#REASONS[@]} -gt 0 ]; then
            FAILED=$((FAILED + 1))
            echo "  $t FAIL: ${REASONS[0]}"
            for r in "${REASONS[@]:1}"; do echo "      also: $r"; done
        elif [ -n "$SKIP_WHY" ]; then
            SKIPPED=$((SKIPPED + 1))
            echo "  $t SKIP ($SKIP_WHY)"
        else
            PASSED=$((PASSED + 1))
            echo "  $t ok"
        fi
        for n in "${NOTES[@]}"; do echo "      note: $n"; done
        echo "      ($took s)"
    done

    echo "total $(elapsed_since "$T_START") s"
    echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
    [ "$FAILED" -eq 0 ]
}
