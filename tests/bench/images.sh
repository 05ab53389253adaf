#!/usr/bin/env bash
# Image source benchmark: N 224 x 224 RGB JPEGs (an image folder tree of 8 classes) decoded, resized to SIZE
# and written into a partition file, on one core, by `fedhet partition` and by PIL + h5py doing the same
# job in one Python run (decode, convert to RGB, bilinear resize, centre crop, CHW uint8 rows written in
# blocks to a chunked HDF5 dataset), each without compression (deflate 0) and with gzip level 4 (fedhet's
# default). Reports images per CPU second (user + system, from /usr/bin/time: steadier than wall time on a
# shared machine), the two alternating BENCH_ALTERNATIONS times per row: medians with [min-max] ranges, and the
# ratio of the median CPU seconds (target >= 2x); the CSV adds the median wall seconds.
# Not run by the tests. Knobs: N (default 2000), SIZES (default "224 160 112"), DEFLATES (default "0 4"),
# BENCH_ALTERNATIONS (default 5), FEDHET (default bin/fedhet), BENCH_OUT (default outputs/bench), CORE (the core
# both run on, default 0).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/common.sh
fedhet=${FEDHET:-bin/fedhet}
out=${BENCH_OUT:-outputs/bench}
n=${N:-2000}
sizes=${SIZES:-224 160 112}
deflates=${DEFLATES:-0 4}
core=${CORE:-0}
alternations=${BENCH_ALTERNATIONS:-5}
py=/usr/bin/python3
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/make.py" <<'PYEOF'
import os, sys
import numpy as np
from PIL import Image
root, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
base = rng.integers(0, 256, (8, 28, 28, 3), dtype=np.uint8)
for i in range(n):
    k = i % 8
    d = os.path.join(root, "class%d" % k)
    os.makedirs(d, exist_ok=True)
    # a smooth picture with noise: a JPEG of realistic size (about 20-30 KiB)
    img = Image.fromarray(base[k]).resize((224, 224), Image.BICUBIC)
    a = np.asarray(img).astype(np.int16) + rng.integers(-20, 21, (224, 224, 3))
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(os.path.join(d, "%06d.jpg" % i), quality=90)
PYEOF

cat >"$tmp/pil.py" <<'PYEOF'
import os, sys
import h5py
import numpy as np
from PIL import Image
root, dst, size, deflate = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
files = [os.path.join(root, c, f) for c in sorted(os.listdir(root)) for f in sorted(os.listdir(os.path.join(root, c)))]
labels = np.array([int(os.path.basename(os.path.dirname(p))[5:]) for p in files], np.int32)
block = 256
with h5py.File(dst, "w") as h:
    rows = max(1, (64 << 10) // (3 * size * size))
    opts = dict(compression="gzip", compression_opts=deflate) if deflate else {}
    images = h.create_dataset("images", (len(files), 3, size, size), np.uint8, chunks=(rows, 3, size, size), **opts)
    h.create_dataset("labels", data=labels)
    buf = np.empty((block, 3, size, size), np.uint8)
    for first in range(0, len(files), block):
        chunk = files[first:first + block]
        for i, p in enumerate(chunk):
            img = Image.open(p).convert("RGB")
            w, hh = img.size
            s = size / min(w, hh)
            if s != 1:
                img = img.resize((max(size, round(w * s)), max(size, round(hh * s))), Image.BILINEAR)
            l, t = (img.size[0] - size) // 2, (img.size[1] - size) // 2
            buf[i] = np.asarray(img.crop((l, t, l + size, t + size))).transpose(2, 0, 1)
        images[first:first + len(chunk)] = buf[:len(chunk)]
PYEOF

$py "$tmp/make.py" "$tmp/tree" "$n"
kib=$(du -sk "$tmp/tree" | cut -f1)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
csv=$out/images.csv
echo "size,deflate,images,alternations,fedhet_cpu_s,fedhet_cpu_s_min,fedhet_cpu_s_max,fedhet_wall_s,pil_h5py_cpu_s,pil_h5py_cpu_s_min,pil_h5py_cpu_s_max,pil_h5py_wall_s,cpu_ratio,cpu" >"$csv"
echo "$n JPEGs 224x224 ($((kib / 1024)) MiB) on one core ($cpu); fedhet partition vs PIL + h5py (target >= 2x);"
echo "$alternations alternations per row: images per CPU second, median [min-max]; ratio of the median CPU seconds"
# images per CPU second of "CPU_SECONDS" lines on stdin: "median [min-max]" (the fastest run is the max)
rate_text() { awk -v n="$n" '{ printf "%.0f\n", n / $1 }' | stats 0 | { read -r t; stats_text "$t"; }; }
for deflate in $deflates; do
    for size in $sizes; do
        : >"$tmp/c1"
        : >"$tmp/c2"
        : >"$tmp/w1"
        : >"$tmp/w2"
        for ((a = 0; a < alternations; a++)); do
            cat "$tmp"/tree/*/* >/dev/null # both read from the page cache
            /usr/bin/time -f "%U %S %e" -o "$tmp/t1" taskset -c "$core" "$fedhet" partition "$tmp/tree" "$tmp/fedhet.h5" \
                scheme=iid clients=1 test_fraction=0 size="$size" resize=shorter crop=center channels=3 deflate="$deflate" \
                --force >"$tmp/fedhet.log"
            /usr/bin/time -f "%U %S %e" -o "$tmp/t2" taskset -c "$core" $py "$tmp/pil.py" "$tmp/tree" "$tmp/pil.h5" "$size" \
                "$deflate"
            awk '{ print $1 + $2 }' "$tmp/t1" >>"$tmp/c1"
            awk '{ print $1 + $2 }' "$tmp/t2" >>"$tmp/c2"
            awk '{ print $3 }' "$tmp/t1" >>"$tmp/w1"
            awk '{ print $3 }' "$tmp/t2" >>"$tmp/w2"
        done
        c1=$(stats 2 <"$tmp/c1") c2=$(stats 2 <"$tmp/c2")
        w1=$(median <"$tmp/w1") w2=$(median <"$tmp/w2")
        ratio=$(awk -v a="$(field 1 "$c1")" -v b="$(field 1 "$c2")" 'BEGIN { printf "%.2f", b / a }')
        printf "size %3d deflate %d: fedhet %s images/CPU s   PIL + h5py %s images/CPU s   ratio %sx\n" "$size" "$deflate" \
            "$(rate_text <"$tmp/c1")" "$(rate_text <"$tmp/c2")" "$ratio"
        echo "$size,$deflate,$n,$alternations,$c1,$w1,$c2,$w2,$ratio,\"$cpu\"" >>"$csv"
    done
done
echo "wrote $csv"
