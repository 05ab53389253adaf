#!/usr/bin/env bash
# The portable build (Makefile ARCH, default x86-64-v2): unless the build asked for `make ARCH=native` (or
# another -march with AVX), bin/fedhet and libfedhet.a hold no AVX or AVX-512 instruction, so that a binary built
# on a cluster's login node runs on any x86-64 compute node (SSE4.2 and POPCNT, 2009 on). The flags the
# objects were built with are in build/flags.
# usage: tests/system/test_portable.sh      (last line: "N passed, N failed, N skipped")
cd "$(dirname "$0")/../.."
passed=0 failed=0 skipped=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "  $1 ok"; else failed=$((failed + 1)); echo "  $1 FAILED: $3"; fi; }
flags=$(cat build/flags 2>/dev/null)
march=$(printf '%s\n' "$flags" | grep -o -- '-march=[^ ]*' | tail -1)
echo "  built with: ${march:-no -march, the compiler default x86-64 baseline}"
case "$march" in
-march=native | -march=x86-64-v3 | -march=x86-64-v4 | -march=*avx* | -march=skylake* | -march=icelake* | -march=znver*)
    echo "  the build asked for $march: AVX instructions are expected (make ARCH=native)"
    skipped=$((skipped + 1))
    ;;
*)
    for f in bin/fedhet build/libfedhet.a; do
        if [ ! -f "$f" ]; then check "$f exists" false "missing: run make"; continue; fi
        n=$(objdump -d --no-show-raw-insn "$f" 2>/dev/null | grep -c -E '%[yz]mm[0-9]')
        check "$f has no AVX instruction" '[ "$n" -eq 0 ]' "$n instructions use ymm/zmm registers ($march)"
    done
    ;;
esac
# the default the Makefile promises
def=$(sed -n 's/^ARCH *?= *//p' Makefile | head -1)
check "Makefile default ARCH is portable" '[ "$def" = x86-64-v2 ]' "ARCH defaults to '${def:-unset}'"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
