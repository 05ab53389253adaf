#!/usr/bin/env bash
# Image sources of `fedhet partition` (docs/data.md): a small IDX set written out by make_images.py as a PNG
# image folder tree, a CSV + PNGs, .npz (uint8 NHWC stored, float32 NCHW compressed) and .npy files gives
# the IDX path's partition file bit for bit; a JPEG tree decodes as PIL does; resizing is torchvision's;
# natural partitions and the domain holdout put exactly the right rows where they belong; bad files and tables are exit 2 naming the
# file (and line), or a counted skip; a failed run leaves nothing and --force never loses the old file;
# memory stays flat with the data set's size; the three seed configs (inputs/isic2019.ini, rsna-ich.ini,
# officehome.ini) each run one round on a tiny tree of their layout.
# usage: tests/mpi/test_sources.sh [test_name]      (last line: "N passed, N failed"; exit 1 when any failed)
source "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
MK=$HERE/make_images.py
SAME=$HERE/same_partition.py

setup()
{
    $PY "$HERE/make_idx.py" "$WORK/idx" 240 60 8 4 >/dev/null || return 1
}

# same A.h5 B.h5 WHAT: the two partition files agree bit for bit
same()
{
    local why
    why=$($PY "$SAME" "$1" "$2" 2>&1) || fail "$3: differs from the IDX path's file: $why"
}

PART=(scheme=dirichlet alpha=0.5 clients=4 min_size=2 partition_seed=7)

# 1. PNG image folder tree, CSV + PNGs, .npz (two kinds) and .npy: the IDX path's file bit for bit
test_same_as_idx()
{
    $PY "$MK" folder "$WORK/idx" "$WORK/tree" || { fail "make_images folder"; return; }
    fx ref partition "$WORK/tree-order" "$WORK/ref-tree.h5" "${PART[@]}" classes=4
    expect_rc "IDX (tree order)" 0 || return
    fx tree partition "$WORK/tree" "$WORK/tree.h5" "${PART[@]}"
    expect_rc "PNG tree" 0 && same "$WORK/ref-tree.h5" "$WORK/tree.h5" "PNG image folder tree"
    grep -q "(imagefolder)" "$WORK/tree.out" || fail "the tree was not read as an image folder: $(head -1 "$WORK/tree.out")"

    fx ref2 partition "$WORK/idx" "$WORK/ref.h5" "${PART[@]}" classes=4
    expect_rc "IDX" 0 || return
    # fedhet compresses whole chunks with libdeflate and writes them itself: h5py reads them through zlib as the
    # rows written uncompressed (tests/unit/test_files.c deflated_chunks: a part-filled last chunk)
    fx raw partition "$WORK/idx" "$WORK/raw.h5" "${PART[@]}" classes=4 deflate=0
    expect_rc "IDX, deflate=0" 0 && same "$WORK/raw.h5" "$WORK/ref.h5" "IDX at deflate 0 and at the default"
    $PY -c 'import h5py, sys; assert h5py.File(sys.argv[1])["clients/images"].compression == "gzip"' "$WORK/ref.h5" \
        2>"$WORK/chunks.err" || fail "the default partition is not gzip: $(tail -1 "$WORK/chunks.err")"
    $PY "$MK" csv "$WORK/idx" "$WORK/csv" || { fail "make_images csv"; return; }
    fx csv partition "$WORK/csv/labels.csv" "$WORK/csv.h5" "${PART[@]}" split_column=split
    expect_rc "CSV + PNG" 0 && same "$WORK/ref.h5" "$WORK/csv.h5" "CSV + PNG files"
    local kind
    for kind in npz npz-f32 npy; do
        $PY "$MK" $kind "$WORK/idx" "$WORK/$kind" || { fail "make_images $kind"; continue; }
        local src=$WORK/$kind
        [ -e "$src.npz" ] && src=$src.npz
        fx $kind partition "$src" "$WORK/$kind.h5" "${PART[@]}"
        expect_rc "$kind" 0 && same "$WORK/ref.h5" "$WORK/$kind.h5" "$kind"
    done
}

# 2. JPEG tree (RGB): every pixel within 1 of PIL's decode of the same file (both use libjpeg-turbo)
test_jpeg_like_pil()
{
    $PY "$MK" jpeg "$WORK/idx" "$WORK/jpg" || { fail "make_images jpeg"; return; }
    fx jpg partition "$WORK/jpg" "$WORK/jpg.h5" scheme=iid clients=1 test_fraction=0
    expect_rc "JPEG tree" 0 || return
    local why
    why=$($PY - "$WORK/jpg.h5" "$WORK/jpg.npy" <<'EOF' 2>&1
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
ours = f["clients/images"][()]                      # [n, 3, h, w] in partition order
pil = np.load(sys.argv[2]).transpose(0, 3, 1, 2)    # tree order
pil = pil[f["clients/source_index"][()]]
assert ours.shape == pil.shape, (ours.shape, pil.shape)
d = np.abs(ours.astype(int) - pil.astype(int)).max()
assert d <= 1, "largest difference %d" % d
print("max difference", d)
EOF
) || fail "JPEG tree against PIL: $why"
}

# 2b. resizing: non-square, shrunk and enlarged PNGs through size=32 (resize=shorter and exact, crop=center)
# against torchvision's Resize + CenterCrop on PIL images (bilinear, antialiased): mean difference per image at
# most 0.4 and no pixel beyond 8 (measured 0.14-0.26 and 3, 8 at a 6-fold anisotropic shrink)
test_resize_like_torchvision()
{
    $PY - "$WORK/rz" <<'EOF' || { fail "making the resize tree"; return; }
import os, sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(1)
for i, (w, h) in enumerate([(50, 37), (37, 50), (64, 64), (20, 30), (100, 75), (33, 33), (90, 200)]):
    d = os.path.join(sys.argv[1], "c%d" % (i % 2))
    os.makedirs(d, exist_ok=True)
    base = rng.integers(0, 256, (max(2, h // 6), max(2, w // 6), 3), dtype=np.uint8)
    img = np.asarray(Image.fromarray(base).resize((w, h), Image.BICUBIC)).astype(int) + rng.integers(-30, 31, (h, w, 3))
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(os.path.join(d, "%03d.png" % i))
EOF
    local mode why
    for mode in shorter exact; do
        fx rz_$mode partition "$WORK/rz" "$WORK/rz-$mode.h5" scheme=iid clients=1 test_fraction=0 size=32 \
            resize=$mode crop=center
        expect_rc "resize=$mode" 0 || continue
        why=$($PY - "$WORK/rz-$mode.h5" "$WORK/rz" $mode <<'EOF' 2>&1
import os, sys
import h5py, numpy as np
from PIL import Image
import torchvision.transforms as T
f = h5py.File(sys.argv[1], "r")
root = sys.argv[2]
files = [os.path.join(root, c, n) for c in sorted(os.listdir(root)) for n in sorted(os.listdir(os.path.join(root, c)))]
resize = T.Resize(32) if sys.argv[3] == "shorter" else T.Resize((32, 32))
fit = T.Compose([resize, T.CenterCrop(32)])
for ours, i in zip(f["clients/images"][()], f["clients/source_index"][()]):
    im = Image.open(files[i]).convert("RGB")
    d = np.abs(ours.astype(int) - np.asarray(fit(im)).transpose(2, 0, 1).astype(int))
    assert d.mean() <= 0.4 and d.max() <= 8, "%s %s: mean difference %.3f, largest %d" % (files[i], im.size, d.mean(), d.max())
EOF
) || fail "resize=$mode against torchvision: $why"
    done
}

# 3. natural partitions: client k holds exactly the rows whose client column is c<k>, in table order; with
# split_within = iid each of them is split in two
test_natural_rows()
{
    [ -d "$WORK/csv" ] || $PY "$MK" csv "$WORK/idx" "$WORK/csv" || { fail "make_images csv"; return; }
    fx nat partition "$WORK/csv/labels.csv" "$WORK/nat.h5" scheme=natural client_column=client split_column=split
    expect_rc "natural" 0 || return
    fx nat2 partition "$WORK/csv/labels.csv" "$WORK/nat2.h5" scheme=natural client_column=client split_column=split \
        split_within=iid split_clients=2
    expect_rc "natural split_within=iid" 0 || return
    local why
    why=$($PY - "$WORK/nat.h5" "$WORK/nat2.h5" "$WORK/csv/labels.csv" <<'EOF' 2>&1
import csv, sys, h5py, numpy as np
rows = [r for r in csv.DictReader(open(sys.argv[3])) if r["split"] == "train"]
for path, per in ((sys.argv[1], 1), (sys.argv[2], 2)):
    f = h5py.File(path, "r")
    off, src, lab = f["clients/offsets"][()], f["clients/source_index"][()], f["clients/labels"][()]
    assert len(off) == 4 * per + 1, off
    for g in range(4):
        mine = sorted(src[off[g * per]:off[(g + 1) * per]].tolist())
        want = [i for i, r in enumerate(rows) if r["client"] == "c%d" % g]
        assert mine == want, (path, g, mine[:5], want[:5])
    assert all(int(rows[s]["label"]) == l for s, l in zip(src, lab))
    names = f.attrs["domains"]
    names = names.decode() if isinstance(names, bytes) else names
    assert names == "c0\nc1\nc2\nc3\n", names
EOF
) || fail "natural partition rows: $why"
}

# 4. holdout_domain: the test set is exactly that domain's images (and its /test/domain says so); the
# other domains are one client each
test_holdout_domain()
{
    $PY "$MK" domains "$WORK/idx" "$WORK/dom" || { fail "make_images domains"; return; }
    fx hold partition "$WORK/dom" "$WORK/hold.h5" scheme=natural holdout_domain=d2
    expect_rc "holdout_domain=d2" 0 || return
    local why
    why=$($PY - "$WORK/hold.h5" "$WORK/dom" <<'EOF' 2>&1
import os, sys, h5py, numpy as np
from PIL import Image
f = h5py.File(sys.argv[1], "r")
d2 = sorted((k, n) for k in sorted(os.listdir(os.path.join(sys.argv[2], "d2")))
            for n in sorted(os.listdir(os.path.join(sys.argv[2], "d2", k))))
want = np.stack([np.asarray(Image.open(os.path.join(sys.argv[2], "d2", k, n))).transpose(2, 0, 1) for k, n in d2])
assert np.array_equal(f["test/images"][()], want), "test images are not d2's"
assert (f["test/domain"][()] == 2).all()
assert np.array_equal(f["test/labels"][()], [int(k[1:]) for k, n in d2])
assert f.attrs["n_clients"] == 3 and f["clients/offsets"][-1] == 180, f["clients/offsets"][()]
EOF
) || fail "holdout test set: $why"
    fx hold_bad partition "$WORK/dom" "$WORK/hold_bad.h5" scheme=natural holdout_domain=d9
    expect_rc "holdout_domain=d9" 1 && grep -q "no domain 'd9'" "$WORK/hold_bad.err" ||
        fail "an unknown holdout domain is not named: $(errline hold_bad)"
    # the message lists every domain, not only the first
    local d
    for d in $(ls "$WORK/dom"); do
        grep -q "domains: .*\b$d\b" "$WORK/hold_bad.err" || fail "the holdout message does not list domain $d: $(errline hold_bad)"
    done
}

# bad SRC DST NEEDLE [keys...]: exit 2, stderr names NEEDLE, DST not written
bad()
{
    local src=$1 dst=$2 needle=$3
    shift 3
    fx bad partition "$src" "$dst" scheme=iid clients=2 "$@"
    expect_rc "$needle" 2 || return 1
    grep -qF -- "$needle" "$WORK/bad.err" || fail "the message does not name \"$needle\": $(errline bad)"
    [ -e "$dst" ] && fail "$dst was written by a failed run"
    ls "$(dirname "$dst")" | grep -q '\.tmp-' && fail "a temporary file was left beside $dst"
    return 0
}

# 5. bad input: each a clear error naming the file (and line), exit 2, nothing written; skip counts them
test_bad_input()
{
    local t=$WORK/badtree
    mkdir -p "$t/a" "$t/b"
    $PY - "$t" <<'EOF'
import sys
from PIL import Image
for k, c in (("a", 40), ("b", 200)):
    for i in range(6):
        Image.new("L", (8, 8), c + i).save("%s/%s/%d.png" % (sys.argv[1], k, i))
EOF
    cp -r "$t" "$WORK/ok"
    fx ok partition "$WORK/ok" "$WORK/ok.h5" scheme=iid clients=2
    expect_rc "clean tree" 0 || return
    mkdir -p "$WORK/out"
    # corrupt: a PNG with its data scrambled
    cp -r "$WORK/ok" "$WORK/corrupt"
    $PY -c "import sys; d=bytearray(open(sys.argv[1],'rb').read()); d[40:60]=b'x'*20; open(sys.argv[1],'wb').write(d)" \
        "$WORK/corrupt/a/3.png"
    bad "$WORK/corrupt" "$WORK/out/c.h5" "corrupt/a/3.png"
    # truncated JPEG
    cp -r "$WORK/ok" "$WORK/trunc"
    $PY -c "from PIL import Image; Image.new('L',(8,8),9).save('$WORK/trunc/b/9.jpg')"
    head -c 150 "$WORK/trunc/b/9.jpg" >"$WORK/trunc/b/9.tmp" && mv "$WORK/trunc/b/9.tmp" "$WORK/trunc/b/9.jpg"
    bad "$WORK/trunc" "$WORK/out/t.h5" "trunc/b/9.jpg"
    # wrongly sized
    cp -r "$WORK/ok" "$WORK/size"
    $PY -c "from PIL import Image; Image.new('L',(9,8),9).save('$WORK/size/b/7.png')"
    bad "$WORK/size" "$WORK/out/s.h5" "size/b/7.png: 9x8"
    # not an image
    cp -r "$WORK/ok" "$WORK/text"
    echo "not an image" >"$WORK/text/a/notes.png"
    bad "$WORK/text" "$WORK/out/x.h5" "text/a/notes.png: neither a JPEG nor a PNG"
    # empty class folder
    cp -r "$WORK/ok" "$WORK/empty" && mkdir "$WORK/empty/c"
    bad "$WORK/empty" "$WORK/out/e.h5" "empty/c: empty class folder"
    # a class whose one entry is a symbolic link loop: the loop named, not an "empty class folder"
    cp -r "$WORK/ok" "$WORK/loop" && mkdir "$WORK/loop/c" && ln -s 0.png "$WORK/loop/c/0.png"
    bad "$WORK/loop" "$WORK/out/l.h5" "loop/c/0.png: symbolic link loop"
    # CSV: a missing column, an unknown label (line named)
    printf 'file,label\na/0.png,a\n' >"$WORK/ok/nocol.csv"
    bad "$WORK/ok/nocol.csv" "$WORK/out/n.h5" "nocol.csv: line 1: no column 'image'"
    printf 'image,label\na/0.png,a\nb/0.png,b\na/1.png,zebra\n' >"$WORK/ok/unknown.csv"
    bad "$WORK/ok/unknown.csv" "$WORK/out/u.h5" "unknown.csv: line 4: unknown label 'zebra'" class_names=a,b
    printf 'image,label\na/0.png,a\nb/0.png,b\nb/404.png,b\n' >"$WORK/ok/missing.csv"
    bad "$WORK/ok/missing.csv" "$WORK/out/m.h5" "b/404.png (line 4)" test_fraction=0

    # on_error=skip: counted and named, the rest written
    fx skip partition "$WORK/text" "$WORK/out/skip.h5" scheme=iid clients=2 on_error=skip
    expect_rc "on_error=skip" 0 &&
        { grep -q "skipped     1 unreadable images (on_error=skip): .*notes.png" "$WORK/skip.out" ||
              fail "the skip is not counted and named: $(grep skipped "$WORK/skip.out")"; }

    # --force over an existing file with a failing source: the old file stays
    cp "$WORK/ok.h5" "$WORK/out/keep.h5"
    fx force partition "$WORK/corrupt" "$WORK/out/keep.h5" scheme=iid clients=2 --force
    expect_rc "--force with a corrupt source" 2
    cmp -s "$WORK/ok.h5" "$WORK/out/keep.h5" || fail "--force lost the existing file to a failed run"

    # a partition key among the source options: its place named, nothing made
    printf '[data]\nsource = %s\npath = %s\nsource_options = split_within=iid\n' "$WORK/ok" "$WORK/out/so.h5" >"$WORK/so.ini"
    fx so run "$WORK/so.ini"
    expect_rc "split_within in source_options" 1 &&
        { grep -qF "split_within is a [data] key, not a source option: write 'split_within = iid' in [data]" "$WORK/so.err" ||
              fail "the message does not place split_within: $(errline so)"; }
    [ -e "$WORK/out/so.h5" ] && fail "a partition file was made from a refused config"
}

# 6. memory: ten times the images cost far less than ten times the bytes (the images are streamed)
test_memory_flat()
{
    $PY - "$WORK" <<'EOF' || { fail "writing the arrays"; return; }
import sys, numpy as np
rng = np.random.default_rng(1)
for name, n in (("small", 150), ("large", 1500)):
    x = rng.integers(0, 256, (n, 96, 96, 3), dtype=np.uint8)   # 1500 x 27 KiB = 40 MiB
    np.savez("%s/%s.npz" % (sys.argv[1], name), x_train=x, y_train=np.arange(n) % 3)
EOF
    local kind peak_small peak_large
    for kind in small large; do
        fx mem_$kind partition "$WORK/$kind.npz" "$WORK/$kind.h5" scheme=iid clients=3 deflate=0 test_fraction=0.1
        expect_rc "$kind npz" 0 || return
    done
    peak_small=$(sed -n 's/.*peak memory \([0-9.]*\) MiB.*/\1/p' "$WORK/mem_small.out")
    peak_large=$(sed -n 's/.*peak memory \([0-9.]*\) MiB.*/\1/p' "$WORK/mem_large.out")
    note "peak memory: 150 images (4 MiB) $peak_small MiB, 1500 images (40 MiB) $peak_large MiB"
    awk -v s="$peak_small" -v l="$peak_large" 'BEGIN { exit !(s > 0 && l - s < 16) }' ||
        fail "peak memory grows with the data: $peak_small MiB for 4 MiB of images, $peak_large MiB for 40 MiB"
}

# 7. the seed configs, each on a tiny tree of its layout, one round (model and sizes overridden small)
test_seed_configs()
{
    local isic=$WORK/isic rsna=$WORK/rsna office=$WORK/office
    $PY - "$isic" "$rsna" "$office" <<'EOF' || { fail "writing the trees"; return; }
import os, sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(2)
isic, rsna, office = sys.argv[1:4]
cols = "MEL,NV,BCC,AK,BKL,DF,VASC,SCC,UNK".split(",")
os.makedirs(isic + "/ISIC_2019_Training_Input")
with open(isic + "/ISIC_2019_Training_GroundTruth.csv", "w") as f:
    f.write("image," + ",".join(cols) + "\n")
    for i in range(160):
        k = i % 8
        name = "ISIC_%07d" % i
        Image.fromarray(rng.integers(0, 256, (30 + i % 5, 34, 3), dtype=np.uint8) // (k + 1)).save(
            "%s/ISIC_2019_Training_Input/%s.jpg" % (isic, name))
        f.write(name + "," + ",".join("1.0" if j == k else "0.0" for j in range(9)) + "\n")
for part, n in (("train", 60), ("test", 15)):
    for i in range(n):
        d = "%s/%s/%s" % (rsna, part, ["epidural", "intraparenchymal", "intraventricular", "subarachnoid", "subdural"][i % 5])
        os.makedirs(d, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (40, 40), dtype=np.uint8) // (i % 5 + 1)).save("%s/ID_%04d.png" % (d, i))
for dom in ("Art", "Clipart", "Product", "Real_World"):
    for i in range(24):
        d = "%s/%s/%s" % (office, dom, ["Alarm_Clock", "Backpack", "Batteries"][i % 3])
        os.makedirs(d, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (36 + i % 4, 40, 3), dtype=np.uint8) // (i % 3 + 1)).save("%s/%05d.jpg" % (d, i))
EOF
    local small=(model.name=mlp train.batch_size=8 fl.rounds=1 fl.checkpoint_every=1 output.dir="$WORK/runs")
    fh 1 isic "$ROOT/inputs/isic2019.ini" data.path="$WORK/isic.h5" data.source="$isic/ISIC_2019_Training_GroundTruth.csv" \
        "data.source_options=image_root=$isic/ISIC_2019_Training_Input image_suffix=.jpg label_columns=MEL,NV,BCC,AK,BKL,DF,VASC,SCC size=40 channels=3" \
        data.clients=4 data.corrupted=1 data.min_size=2 "${small[@]}"
    expect_rc "isic2019.ini" 0 && { grep -q "ISIC_2019_Training_GroundTruth.csv (csv): 128 train, 32 test, 3x40x40, 8 classes" \
        "$WORK/isic.out" || fail "isic2019.ini: unexpected source line: $(grep -h source "$WORK/isic.out" | head -1)"; }
    fh 1 rsna "$ROOT/inputs/rsna-ich.ini" data.path="$WORK/rsna.h5" data.source="$rsna" \
        "data.source_options=size=36 channels=3" data.clients=3 data.corrupted=1 data.min_size=2 "${small[@]}"
    expect_rc "rsna-ich.ini" 0 && { grep -q "(imagefolder): 60 train, 15 test, 3x36x36, 5 classes" "$WORK/rsna.out" ||
        fail "rsna-ich.ini: unexpected source line: $(grep -h source "$WORK/rsna.out" | head -1)"; }
    fh 2 office "$ROOT/inputs/officehome.ini" data.path="$WORK/office.h5" data.source="$office" \
        "data.source_options=holdout_domain=Product,Real_World size=34 channels=3" model.norm=bn "${small[@]}"
    expect_rc "officehome.ini" 0 || return
    head -1 "$WORK/runs/officehome/metrics.csv" | grep -q "test_accuracy_Product,test_accuracy_Real_World$" ||
        fail "officehome.ini: metrics.csv has no per-domain columns: $(head -1 "$WORK/runs/officehome/metrics.csv" | tr , '\n' | tail -2 | tr '\n' ' ')"
    # the per-domain columns across a stop: --resume to round 2 writes the rows of a straight 2-round run
    fh 2 office2 "$ROOT/inputs/officehome.ini" data.path="$WORK/office.h5" model.norm=bn "${small[@]}" fl.rounds=2 \
        output.name=officehome2
    expect_rc "officehome.ini, 2 rounds" 0 || return
    fh 2 office_resume --resume "$WORK/runs/officehome" fl.rounds=2
    expect_rc "officehome.ini, --resume to 2 rounds" 0 || return
    same_csv "$WORK/runs/officehome2/metrics.csv" "$WORK/runs/officehome/metrics.csv" "officehome.ini resumed"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "test_accuracy_Product") c = i; next }
        !c || $c == "" { bad = 1 } END { exit bad || NR != 3 }' "$WORK/runs/officehome/metrics.csv" ||
        fail "officehome.ini resumed: a round without its per-domain accuracy"
}

# 8. random-resized-crop + flip above 32 x 32: the same model on 1 and 3 ranks, and not the model of a run
# without augmentation
test_rrc_ranks()
{
    [ -d "$WORK/dom" ] || $PY "$MK" domains "$WORK/idx" "$WORK/dom" || { fail "make_images domains"; return; }
    fx rrc_part partition "$WORK/dom" "$WORK/rrc.h5" scheme=natural holdout_domain=d3 size=40 resize=exact
    expect_rc "partition at 40x40" 0 || return
    cat >"$WORK/rrc.ini" <<EOF
[data]
path = $WORK/rrc.h5
normalise = imagenet
eval_batch = 20
[model]
name = mlp
[train]
lr = 0.05
batch_size = 16
[fl]
rounds = 2
selection = all
seed = 3
[algo]
method = fedavg
[output]
dir = $WORK/rrc-runs
EOF
    fh 1 rrc1 "$WORK/rrc.ini" output.name=one
    expect_rc "1 rank" 0 || return
    fh 3 rrc3 "$WORK/rrc.ini" output.name=three
    expect_rc "3 ranks" 0 || return
    fh 1 rrc0 "$WORK/rrc.ini" output.name=off data.augment=off
    expect_rc "augment=off" 0 || return
    h5diff -q "$WORK/rrc-runs/one/run.h5" "$WORK/rrc-runs/three/run.h5" /model >/dev/null ||
        fail "random-resized-crop: 1 and 3 ranks give different models"
    h5diff -q "$WORK/rrc-runs/one/run.h5" "$WORK/rrc-runs/off/run.h5" /model >/dev/null &&
        fail "augment=off gives the augmented run's model: no augmentation happened"
    "$FEDHET" partition --help | grep -q "Peak memory" || fail "fedhet partition --help does not state the peak memory"
}

TESTS=(same_as_idx jpeg_like_pil resize_like_torchvision natural_rows holdout_domain bad_input memory_flat seed_configs rrc_ranks)
run_tests "$@"
