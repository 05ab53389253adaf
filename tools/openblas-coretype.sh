#!/usr/bin/env bash
# Prints the OPENBLAS_CORETYPE under which OpenBLAS runs this CPU's own kernels, where it would otherwise not: Debian's
# OpenBLAS 0.3.21 does not know newer CPUs (an Emerald Rapids Xeon) and falls back to its oldest kernels,
# "Prescott", at about a fifth of the speed of an AVX-512 core. Prints SkylakeX (AVX-512) or Haswell (AVX2) then,
# and nothing where OpenBLAS chose other kernels or OPENBLAS_CORETYPE is already set. OpenBLAS reads the variable
# when it loads, so it must be set before the program starts.
# usage: tools/openblas-coretype.sh [PROGRAM ARGS...]   a program that loads OpenBLAS (default: bin/fedhet --version)
set -u
cd "$(dirname "$0")/.."
[ -n "${OPENBLAS_CORETYPE:-}" ] && exit 0
[ $# -gt 0 ] || set -- bin/fedhet --version
detected=$(OPENBLAS_VERBOSE=2 "$@" 2>&1 | sed -n 's/^Core: //p' | head -1)
[ "$detected" = Prescott ] || exit 0
if grep -qw avx512f /proc/cpuinfo; then echo SkylakeX
elif grep -qw avx2 /proc/cpuinfo; then echo Haswell
fi
