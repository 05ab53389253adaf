#!/usr/bin/env bash
# Image source benchmark: N 224 x 224 RGB JPEGs (an image folder tree of 8 classes) decoded, resized to SIZE
# and written into a partition file, on one core, by `fedhet partition` and by PIL + h5py doing the same
# job in one Python run (decode, convert to RGB, bilinear resize, centre crop, CHW uint8 rows written in
# blocks to a chunked HDF5 dataset), each without compression (deflate 0) and with gzip level 4 (fedhet's
# default). Reports images per CPU second (user + system, from /usr/bin/time: steadier than wall time on a
# shared machine) and per wall second, and the ratio of CPU seconds (target >= 2x).
# Not run by the tests. Knobs: N (default 2000), SIZES (default "224 160 112"), DEFLATES (default "0 4"),
# FEDHET (default bin/fedhet), BENCH_OUT (default outputs/bench), CORE (the core both run on, default 0).
set -euo pipefail
cd "$(dirname "$0")/../.."
fedhet=${FEDHET:-bin/fedhet}
out=${BENCH_OUT:-outputs/bench}
n=${N:-2000}
sizes=${SIZES:-224 160 112}
deflates=${DEFLATES:-0 4}
core=${CORE:-0}
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
echo "size,deflate,images,fedhet_cpu_s,fedhet_wall_s,pil_h5py_cpu_s,pil_h5py_wall_s,cpu_ratio,cpu" >"$csv"
echo "$n JPEGs 224x224 ($((kib / 1024)) MiB) on one core ($cpu); fedhet partition vs PIL + h5py (target >= 2x)"
for deflate in $deflates; do
    for size in $sizes; do
        cat "$tmp"/tree/*/* >/dev/null # both read from the page cache
        /usr/bin/time -f "%U %S %e" -o "$tmp/t1" taskset -c "$core" "$fedhet" partition "$tmp/tree" "$tmp/fedhet.h5" \
            scheme=iid clients=1 test_fraction=0 size="$size" resize=shorter crop=center channels=3 deflate="$deflate" \
            --force >"$tmp/fedhet.log"
        /usr/bin/time -f "%U %S %e" -o "$tmp/t2" taskset -c "$core" $py "$tmp/pil.py" "$tmp/tree" "$tmp/pil.h5" "$size" \
            "$deflate"
        read -r u1 s1 w1 <"$tmp/t1"
        read -r u2 s2 w2 <"$tmp/t2"
        awk -v n="$n" -v z="$size" -v d="$deflate" -v u1="$u1" -v s1="$s1" -v w1="$w1" -v u2="$u2" -v s2="$s2" \
            -v w2="$w2" -v cpu="$cpu" -v csv="$csv" 'BEGIN {
            c1 = u1 + s1; c2 = u2 + s2
            printf "size %3d deflate %d: fedhet %5.0f images/CPU s (%5.0f /wall s)   PIL + h5py %5.0f images/CPU s (%5.0f /wall s)   ratio %.2fx\n",
                   z, d, n / c1, n / w1, n / c2, n / w2, c2 / c1
            printf "%d,%d,%d,%.2f,%.2f,%.2f,%.2f,%.2f,\"%s\"\n", z, d, n, c1, w1, c2, w2, c2 / c1, cpu >> csv }'
    done
done
echo "wrote $csv"
