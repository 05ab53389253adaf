#!/usr/bin/env bash
# The portable build (Makefile ARCH, default x86-64-v2): unless the build asked for `make ARCH=native` (or
# another -march with AVX), bin/fedhet and libfedhet.a hold no AVX or AVX-512 instruction outside the copies of
# src/nn/kernels_isa.c's loops made for those instruction sets (functions named *_avx2 and *_avx512, which run
# only where the CPU has them), so that a binary built on a cluster's login node runs on any x86-64 compute node
# (SSE4.2 and POPCNT, 2009 on). The flags the objects were built with are in build/flags.
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
        counts=$(objdump -d --no-show-raw-insn "$f" 2>/dev/null | awk '
            /^[0-9a-f]+ <[^>]*>:$/ { fn = $2; wide = fn ~ /_avx(2|512)([._>])/ }
            /%[yz]mm[0-9]/ { if (wide) w++; else { n++; if (!(fn in seen)) { seen[fn] = 1; names = names " " fn } } }
            END { printf "%d %d%s\n", n, w, names }')
        read -r n w names <<<"$counts"
        check "$f has no AVX instruction outside the _avx2/_avx512 copies" '[ "$n" -eq 0 ]' \
            "$n instructions use ymm/zmm registers ($march) in$names"
        check "$f holds the _avx2/_avx512 copies" '[ "$w" -gt 0 ]' "no wide copy of the kernels_isa.c loops"
    done
    ;;
esac
# the default the Makefile promises
def=$(sed -n 's/^ARCH *?= *//p' Makefile | head -1)
check "Makefile default ARCH is portable" '[ "$def" = x86-64-v2 ]' "ARCH defaults to '${def:-unset}'"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
