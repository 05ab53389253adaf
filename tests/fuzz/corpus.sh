# Sourced by tests/fuzz/fuzz.sh and tests/fuzz/test_fuzz.sh: the targets and their seed corpora.
# Seeds: build-fuzz/seeds/<target>, written by build-fuzz/fuzz_seeds (the project's own writers), plus the
# run configs of inputs/ for the config target and the grid files of inputs/ for the grid target.
FUZZ_BUILD=build-fuzz
FUZZ_ALL="config grid idx cifar partfile checkpoint onnx"
FUZZ_SEEDS=$FUZZ_BUILD/seeds
FUZZ_CRASHES=tests/fuzz/crashes

fuzz_make_seeds() {
    rm -rf "$FUZZ_SEEDS"
    # fuzz_seeds calls MPI_Init/MPI_Finalize, whose start-up allocations Open MPI never frees
    ASAN_OPTIONS=detect_leaks=0 "$FUZZ_BUILD/fuzz_seeds" "$FUZZ_SEEDS" || return 1
    mkdir -p "$FUZZ_SEEDS/config" "$FUZZ_SEEDS/grid"
    cp inputs/*.ini "$FUZZ_SEEDS/config/"
    grep -l '^\[grid\]' inputs/*.ini | xargs -r cp -t "$FUZZ_SEEDS/grid/"
    for t in $FUZZ_ALL; do mkdir -p "$FUZZ_SEEDS/$t" "$FUZZ_CRASHES/$t"; done
}
