#!/usr/bin/env bash
# Partition benchmark: all of Fashion-MNIST (60,000 + 10,000 images) into 100 clients with Dirichlet(0.1),
# and the same with a Gaussian-noise quality shift on 20 % of the clients. Reports wall seconds, peak
# resident memory against the size of one copy of the data, and the file size.
# Target (issue "Data"): under 10 s, at most two copies of the data in memory.
# Knobs: FEDHET (binary, default bin/fedhet), BENCH_OUT (default outputs/bench), SRC (default fashion-mnist).
set -euo pipefail
cd "$(dirname "$0")/../.."
fedhet=${FEDHET:-bin/fedhet}
out=${BENCH_OUT:-outputs/bench}
src=${SRC:-fashion-mnist}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
data_mib=$(awk 'BEGIN { printf "%.1f", (60000 + 10000) * 784 / 1048576 }')
csv=$out/partition.csv
echo "case,seconds,peak_rss_mib,data_copy_mib,copies,file_mib" >"$csv"
run_case() {
    local name=$1; shift
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$fedhet" partition "$src" "$tmp/$name.h5" "$@" >"$tmp/$name.log"
    read -r secs rss_kib <"$tmp/time"
    local rss_mib file_mib copies
    rss_mib=$(awk -v k="$rss_kib" 'BEGIN { printf "%.1f", k / 1024 }')
    copies=$(awk -v r="$rss_mib" -v d="$data_mib" 'BEGIN { printf "%.2f", r / d }')
    file_mib=$(awk -v b="$(stat -c %s "$tmp/$name.h5")" 'BEGIN { printf "%.1f", b / 1048576 }')
    echo "$name,$secs,$rss_mib,$data_mib,$copies,$file_mib" >>"$csv"
    printf "%-28s %6.2f s   peak RSS %7.1f MiB = %4.2f x one copy of the data (%s MiB)   file %s MiB\n" \
        "$name" "$secs" "$rss_mib" "$copies" "$data_mib" "$file_mib"
}
echo "fedhet partition $src, 100 clients (target: < 10 s, <= 2 copies of the data; peak RSS includes the process itself)"
run_case dirichlet0.1 scheme=dirichlet alpha=0.1 clients=100
run_case dirichlet0.1_noise scheme=dirichlet alpha=0.1 clients=100 corruption=gaussian_noise
run_case dirichlet0.1_blur scheme=dirichlet alpha=0.1 clients=100 corruption=motion_blur
run_case pathological2 scheme=pathological classes_per_client=2 clients=100
echo "wrote $csv"
