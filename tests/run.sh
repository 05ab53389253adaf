#!/usr/bin/env bash
# Runs every unit test program in build/tests, then every MPI test script tests/mpi/test_*.sh, the twins in
# lockstep (tests/twins/test_*.sh), the SLURM job tests tests/slurm/test_*.sh (on a one-node SLURM that
# tools/test-slurm.sh starts) and the fuzz targets (tests/fuzz/test_fuzz.sh: their seeds and kept crash
# inputs, a few seconds of fuzzing each), and adds up their "N passed, N failed[, N skipped]" lines (and prints each program's seconds). Skipped tests are
# counted apart, never as passed.
# One program alone: build/tests/test_layers_conv [test_name]; one script: tests/mpi/test_run.sh [test_name];
# some of them, added up: tests/run.sh build/tests/test_* tests/mpi/test_run.sh
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# On a CPU that OpenBLAS does not know, its oldest kernels would make the OpenBLAS-bound tests (test_models' epoch, the
# PyTorch side of test_onnx.sh) several times slower: the CPU's own kernels instead. No test's expectation depends
# on which kernels run.
coretype=$(tools/openblas-coretype.sh 2>/dev/null)
if [ -n "$coretype" ]; then
    export OPENBLAS_CORETYPE=$coretype
    echo "OpenBLAS would run its Prescott kernels on this CPU: OPENBLAS_CORETYPE=$coretype"
fi
passed=0 failed=0 skipped=0 broken=()
if [ $# -gt 0 ]; then all=("$@"); else all=(build/tests/test_* tests/system/test_*.sh tests/mpi/test_*.sh tests/twins/test_*.sh tests/slurm/test_*.sh tests/fuzz/test_*.sh); fi
for t in "${all[@]}"; do
    case "$t" in *.d) continue ;; esac
    [ -x "$t" ] || continue
    echo "== $(basename "$t")"
    start=$SECONDS
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    echo "   ($(basename "$t"): $((SECONDS - start)) s)"
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' | tail -n 1)
    if [ -z "$line" ]; then
        echo "   $(basename "$t") ended (exit $rc) without a summary line: counted as one failure"
        failed=$((failed + 1)); broken+=("$(basename "$t")"); continue
    fi
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
    k=0; case "$line" in *skipped) k=${line##*failed, }; k=${k%% skipped} ;; esac
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + k))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); broken+=("$(basename "$t")"); fi
    [ "$f" -gt 0 ] && broken+=("$(basename "$t")")
done
[ ${#broken[@]} -gt 0 ] && echo "failing programs: ${broken[*]}"
if [ $((passed + failed)) -eq 0 ]; then echo "no test ran"; echo "0 passed, 1 failed"; exit 1; fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
