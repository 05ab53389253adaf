#!/usr/bin/env bash
# Image sources of `fedhet partition` (docs/data.md): a small IDX set written out by make_images.py as a PNG
# image folder tree, a CSV + PNGs, .npz (uint8 NHWC stored, float32 NCHW compressed) and .npy files gives
# the IDX path's partition file bit for bit; a JPEG tree decodes as PIL does; resizing is torchvision's;
# natural partitions and the domain holdout put exactly the right rows where they belong; every row maps back to
# its file, label and domain through source_index, source_path and the names; bad files and tables are exit 2 naming the
# file (and line), or a counted skip; label tables with a byte order mark, repeated images, negative integer labels
# and 200,000 classes; a failed run leaves nothing and --force never loses the old file;
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

# 2b. resizing and the centre crop against torchvision's Resize + CenterCrop on PIL images (bilinear, antialiased):
# PNGs and JPEGs of many sizes, among them every kind of crop offset (whole, .5 with an odd and with an even whole
# part), through size=32 with resize=shorter (shrink_on_load 0 and 1), exact and none. The crop is torchvision's
# exactly: resize=none crop=center gives its pixels bit for bit, and after a resize our image is nearer
# torchvision's crop than the same crop one pixel off in any direction. Resampling differs a little (libswscale's
# bilinear filter, PIL's): per image a mean difference of at most 0.5 (measured 0.11-0.43) and no pixel beyond
# 16 (measured 14); JPEGs decoded at a DCT scale (shrink_on_load=1) at most 6 (measured up to 4.8: that decode is
# PIL's draft() one, whose filter is not bilinear)
test_resize_like_torchvision()
{
    $PY - "$WORK/rz" <<'EOF' || { fail "making the resize tree"; return; }
import os, sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(1)
sizes = [(50, 37), (37, 50), (64, 64), (20, 30), (100, 75), (33, 33), (90, 200)]
sizes += [(int(w), int(h)) for w, h in rng.integers(33, 260, (41, 2))]
sizes += [(65, 48), (96, 160), (72, 40), (176, 64)]  # DCT scales 1/2, 1/4 (shrink_on_load) with .5 offsets
kinds = {}
for i, (w, h) in enumerate(sizes):
    d = os.path.join(sys.argv[1], "c%d" % (i % 2))
    os.makedirs(d, exist_ok=True)
    base = rng.integers(0, 256, (max(2, h // 6), max(2, w // 6), 3), dtype=np.uint8)
    img = np.asarray(Image.fromarray(base).resize((w, h), Image.BICUBIC)).astype(int) + rng.integers(-10, 11, (h, w, 3))
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    name = "%03d.%s" % (i, "jpg" if i % 3 == 2 else "png")
    im.save(os.path.join(d, name), quality=90)
    if w >= 32 and h >= 32:  # the tree of resize=none: only crops
        crop = os.path.join(sys.argv[1] + "-crop", "c%d" % (i % 2))
        os.makedirs(crop, exist_ok=True)
        os.link(os.path.join(d, name), os.path.join(crop, name))
    # the crop offset torchvision takes after Resize(32): its half-pixel cases round to the even neighbour
    s, l = min(w, h), max(w, h)
    e = (int(32 * l / s) - 32) / 2
    kinds[e % 1 and int(e) % 2 == 0] = kinds.get(e % 1 and int(e) % 2 == 0, 0) + 1
assert kinds.get(True, 0) >= 8, kinds   # offsets 0.5, 2.5, ... where rounding half away from zero is one off
EOF
    local mode sol why tree
    for mode in shorter:1 shorter:0 exact:1 none:0; do
        sol=${mode#*:} mode=${mode%:*} tree=$WORK/rz
        [ $mode = none ] && tree=$WORK/rz-crop
        fx rz_$mode$sol partition "$tree" "$WORK/rz-$mode$sol.h5" scheme=iid clients=1 test_fraction=0 size=32 \
            resize=$mode crop=center shrink_on_load=$sol
        expect_rc "resize=$mode shrink_on_load=$sol" 0 || continue
        why=$($PY - "$WORK/rz-$mode$sol.h5" "$tree" $mode <<'EOF' 2>&1
import os, sys
import h5py, numpy as np
from PIL import Image
import torchvision.transforms as T
import torchvision.transforms.functional as F
f = h5py.File(sys.argv[1], "r")
root, mode = sys.argv[2], sys.argv[3]
files = [os.path.join(root, c, n) for c in sorted(os.listdir(root)) for n in sorted(os.listdir(os.path.join(root, c)))]
resize = {"shorter": T.Resize(32), "exact": T.Resize((32, 32)), "none": lambda im: im}[mode]
for ours, i in zip(f["clients/images"][()].astype(int), f["clients/source_index"][()]):
    im = Image.open(files[i]).convert("RGB")
    big = resize(im)
    top, left = int(round((big.height - 32) / 2.0)), int(round((big.width - 32) / 2.0))
    crop = lambda dy, dx: np.asarray(F.crop(big, top + dy, left + dx, 32, 32)).transpose(2, 0, 1).astype(int)
    theirs = np.asarray(T.CenterCrop(32)(big)).transpose(2, 0, 1).astype(int)
    assert (theirs == crop(0, 0)).all()
    d = np.abs(ours - theirs)
    name = "%s %dx%d" % (files[i], im.width, im.height)
    if mode == "none":
        assert d.max() == 0, "%s: crop=center differs from CenterCrop(32) by up to %d" % (name, d.max())
        continue
    for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)):
        if 0 <= top + dy <= big.height - 32 and 0 <= left + dx <= big.width - 32:
            off = np.abs(ours - crop(dy, dx)).mean()
            assert d.mean() < off, "%s: nearer the crop at (%+d, %+d) from torchvision's: %.3f against %.3f" % (
                name, dy, dx, off, d.mean())
    if sys.argv[1].endswith("1.h5") and files[i].endswith(".jpg") and min(im.size) >= 64:
        assert d.mean() <= 6, "%s (DCT-scaled): mean difference %.3f" % (name, d.mean())
    else:
        assert d.mean() <= 0.5 and d.max() <= 16, "%s: mean difference %.3f, largest %d" % (name, d.mean(), d.max())
EOF
) || fail "resize=$mode shrink_on_load=$sol against torchvision: $why"
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

# 4b. provenance: /clients/source_index and /test/source_index are each row's index in the source's listing (the
# table's rows; the tree's images in reading order) whatever the test set and on_error=skip took out,
# /clients/source_path and /test/source_path its file, /class_names and /domain_names what the ids mean: every row
# maps back to its image, its label and its domain; `fedhet inspect` shows the names
test_provenance()
{
    [ -d "$WORK/dom" ] || $PY "$MK" domains "$WORK/idx" "$WORK/dom" || { fail "make_images domains"; return; }
    fx prov_dom partition "$WORK/dom" "$WORK/prov-dom.h5" scheme=natural holdout_domain=d2
    expect_rc "domain tree, holdout_domain=d2" 0 || return
    [ -d "$WORK/csv" ] || $PY "$MK" csv "$WORK/idx" "$WORK/csv" || { fail "make_images csv"; return; }
    # the table without its split column (test_fraction takes the test set), labels as names, and one unreadable
    # image that on_error=skip leaves out
    $PY - "$WORK/csv" <<'EOF' || { fail "writing the table"; return; }
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1] + "/labels.csv")))
rows.insert(37, {"image": "labels.csv", "label": "0", "client": "c1"})
with open(sys.argv[1] + "/named.csv", "w") as f:
    f.write("image,label,client\n")
    for r in rows:
        f.write("%s,%s,%s\n" % (r["image"], "class-" + "abcd"[int(r["label"])], r["client"]))
EOF
    fx prov_csv partition "$WORK/csv/named.csv" "$WORK/prov-csv.h5" scheme=dirichlet alpha=0.5 clients=3 min_size=2 \
        on_error=skip test_fraction=0.3
    expect_rc "table with test_fraction and on_error=skip" 0 || return
    local why
    why=$($PY - "$WORK/prov-dom.h5" "$WORK/dom" "$WORK/prov-csv.h5" "$WORK/csv/named.csv" <<'EOF' 2>&1
import csv, os, sys
import h5py, numpy as np
from PIL import Image
text = lambda v: v.decode() if isinstance(v, bytes) else v
# the domain tree: its listing is the domains, their classes and their files, each in name order
f, root = h5py.File(sys.argv[1], "r"), sys.argv[2]
listing = [(d, k, os.path.join(root, d, k, n)) for d in sorted(os.listdir(root))
           for k in sorted(os.listdir(os.path.join(root, d))) for n in sorted(os.listdir(os.path.join(root, d, k)))]
classes, domains = [text(v) for v in f["class_names"]], [text(v) for v in f["domain_names"]]
assert classes == ["k0", "k1", "k2", "k3"] and domains == ["d0", "d1", "d2", "d3"], (classes, domains)
checked = 0
for group in ("clients", "test"):
    labels, index, paths = f[group + "/labels"][()], f[group + "/source_index"][()], f[group + "/source_path"][()]
    for r, (label, i, path) in enumerate(zip(labels, index, paths)):
        d, k, file = listing[i]
        assert text(path) == file, (group, r, path, file)
        assert classes[label] == k, (group, r, classes[label], k)
        assert group == "clients" or domains[f["test/domain"][r]] == d
        assert (f[group + "/images"][r] == np.asarray(Image.open(file)).transpose(2, 0, 1)).all(), (group, r, file)
        checked += 1
assert checked == len(listing), (checked, len(listing))
# the table: its listing is its rows, the unreadable one included
f = h5py.File(sys.argv[3], "r")
rows = list(csv.DictReader(open(sys.argv[4])))
classes = [text(v) for v in f["class_names"]]
seen = []
for group in ("clients", "test"):
    for label, i, path in zip(f[group + "/labels"][()], f[group + "/source_index"][()], f[group + "/source_path"][()]):
        assert rows[i]["label"] == classes[label], (group, i, rows[i], classes[label])
        assert text(path).endswith("/" + rows[i]["image"]), (path, rows[i])
        seen.append(i)
assert sorted(seen) == [i for i in range(len(rows)) if i != 37], "rows missing or twice"
EOF
) || fail "rows mapped back to the source: $why"
    fx prov_inspect inspect "$WORK/prov-dom.h5"
    expect_rc "inspect" 0 && { grep -q "^classes     4: k0, k1, k2, k3$" "$WORK/prov_inspect.out" &&
        grep -q "^domains     4: d0, d1, d2, d3$" "$WORK/prov_inspect.out" ||
        fail "inspect does not name the classes and domains: $(head -4 "$WORK/prov_inspect.out" | tr '\n' '|')"; }
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
    # the user's message alone: the source lines of the error chain only with FEDHET_TRACE=1
    grep -q "^  at .*\.c:[0-9]" "$WORK/skip.out" && fail "on_error=skip prints source lines: $(grep -m1 '^  at ' "$WORK/skip.out")"

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

# 5b. label tables: a byte order mark (Excel's "CSV UTF-8") is not part of the first column's name; an image
# listed twice is refused, with two labels or with one, naming the lines and the labels; integer labels are class
# ids, and a negative one is refused naming its line (it would have made the labels names in text order: -1, 0,
# 1, ... as classes 0, 1, 2, ...); 200,000 classes take seconds (a class lookup per row was a linear search)
test_label_tables()
{
    local t=$WORK/tables
    mkdir -p "$t/out"
    $PY - "$t" <<'EOF' || { fail "writing the images"; return; }
import sys
from PIL import Image
for i in range(8):
    Image.new("L", (4, 4), 30 * i).save("%s/%d.png" % (sys.argv[1], i))
EOF
    printf 'image,label\n0.png,a\n1.png,b\n2.png,a\n3.png,b\n4.png,a\n5.png,b\n' >"$t/plain.csv"
    printf '\xef\xbb\xbf' | cat - "$t/plain.csv" >"$t/bom.csv"
    fx plain partition "$t/plain.csv" "$t/plain.h5" scheme=iid clients=2 test_fraction=0
    expect_rc "a plain table" 0 || return
    fx bom partition "$t/bom.csv" "$t/bom.h5" scheme=iid clients=2 test_fraction=0
    expect_rc "a table with a byte order mark" 0 && same "$t/plain.h5" "$t/bom.h5" "the table with a byte order mark"
    printf 'image,label\n0.png,a\n1.png,b\n2.png,a\n1.png,a\n3.png,b\n' >"$t/twice.csv"
    bad "$t/twice.csv" "$t/out/twice.h5" "twice.csv: line 5: image $t/1.png again, labelled 'a' here and 'b' on line 3"
    printf 'image,label\n0.png,a\n1.png,b\n2.png,a\n3.png,b\n1.png,b\n' >"$t/same.csv"
    bad "$t/same.csv" "$t/out/same.h5" "same.csv: line 6: image $t/1.png again (line 3 lists it too, also labelled 'b')"
    printf 'image,label\n0.png,0\n1.png,-1\n2.png,1\n3.png,0\n4.png,-1\n5.png,1\n' >"$t/negative.csv"
    bad "$t/negative.csv" "$t/out/negative.h5" "negative.csv: line 3: label -1 is not a class id"
    # integers from 0 are the ids (a gap is a class without rows: an error naming it), names sort
    printf 'image,label\n0.png,1\n1.png,0\n2.png,1\n3.png,0\n' >"$t/ids.csv"
    fx ids partition "$t/ids.csv" "$t/ids.h5" scheme=iid clients=1 test_fraction=0
    expect_rc "integer labels" 0 &&
        { [ "$($PY -c 'import h5py,sys; f = h5py.File(sys.argv[1])
print(list(f["clients/labels"][()][f["clients/source_index"][()].argsort()]))' "$t/ids.h5")" = "[1, 0, 1, 0]" ] ||
              fail "integer labels are not the class ids"; }

    # 200,000 classes, an image each: 200,000 names through 448 links to one folder of 448 files (which keeps the
    # test's own file writes small)
    $PY - "$t/many" <<'EOF' || { fail "writing the large table"; return; }
import os, sys
from PIL import Image
d = sys.argv[1]
os.makedirs(d + "/files")
for k in range(448):
    Image.new("L", (2, 2), k % 256).save("%s/files/%03d.png" % (d, k))
    os.symlink("files", "%s/d%03d" % (d, k))
with open(d + "/labels.csv", "w") as f:
    f.write("image,label\n")
    for i in range(200000):
        f.write("d%03d/%03d.png,class%06d\n" % (i // 448, i % 448, (i * 7919) % 200000))
EOF
    local start=$SECONDS
    fx many partition "$t/many/labels.csv" "$t/many.h5" scheme=iid clients=2
    expect_rc "200,000 classes" 0 || return
    note "200,000 classes: fedhet partition took $((SECONDS - start)) s"
    [ $((SECONDS - start)) -le 30 ] || fail "200,000 classes took $((SECONDS - start)) s (at most 30)"
    grep -q "200000 train, 0 test, 1x2x2, 200000 classes" "$WORK/many.out" ||
        fail "200,000 classes: unexpected source line: $(grep -h '^source' "$WORK/many.out")"
}

# 5c. kinds of image: a header announcing more pixels than max_pixels is refused before decoding, naming the file,
# its size and the key; CMYK JPEGs (PIL's plain inverted CMYK, and YCCK as Photoshop writes it: build/tests/write_ycck)
# decode as PIL converts them; 16-bit PNGs keep
# their high byte (PIL's 16-bit RGB; its 16-bit grey is clipped at 255 instead), alpha and transparency are
# dropped (PIL's convert); channels=auto is colour when any image is, also when a grey one sorts first;
# exif_orientation=apply turns images upright as PIL's ImageOps.exif_transpose, every orientation of a PNG and a
# JPEG, and ignore keeps them as stored
test_image_kinds()
{
    local t=$WORK/kinds
    $PY - "$t" <<'EOF' || { fail "writing the images"; return; }
import os, struct, sys, zlib
import numpy as np
from PIL import Image
t = sys.argv[1]
rng = np.random.default_rng(4)
def png(path, w, h, depth, ctype, rows):
    chunk = lambda k, d: struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d) & 0xffffffff)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
# a header of 30000 x 30000 (its data one row long: nothing past the header may be read)
os.makedirs(t + "/huge/a"), os.makedirs(t + "/huge/b")
png(t + "/huge/a/huge.png", 30000, 30000, 8, 0, b"\0" * 30001)
for k in "ab":
    Image.new("L", (8, 8), 50).save("%s/huge/%s/small.png" % (t, k))
# PNG kinds and CMYK JPEGs, each against PIL's convert
os.makedirs(t + "/kinds/a"), os.makedirs(t + "/kinds/b")
v = rng.integers(0, 65536, (8, 8, 3)).astype(">u2")
png(t + "/kinds/a/rgb16.png", 8, 8, 16, 2, b"".join(b"\0" + v[y].tobytes() for y in range(8)))
png(t + "/kinds/a/grey16.png", 8, 8, 16, 0, b"".join(b"\0" + v[y, :, 0].tobytes() for y in range(8)))
np.save(t + "/grey16.npy", (v[..., 0].astype(np.uint16) >> 8).astype(np.uint8))
rgba = rng.integers(0, 256, (8, 8, 4), dtype=np.uint8)
Image.fromarray(rgba, "RGBA").save(t + "/kinds/a/rgba.png")
Image.fromarray(rgba[..., :2].copy(), "LA").save(t + "/kinds/b/la.png")
pal = Image.fromarray(rgba[..., :3].copy()).convert("P", palette=Image.ADAPTIVE, colors=16)
pal.info["transparency"] = 3
pal.save(t + "/kinds/b/palette.png", transparency=3)
for i in range(3):
    Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).convert("CMYK").save(
        "%s/kinds/b/cmyk%d.jpg" % (t, i), quality=90)
rng.integers(0, 256, (8, 8, 4), dtype=np.uint8).tofile(t + "/ycck.cmyk")   # made a YCCK JPEG below
# channels=auto: a grey image sorts first in a colour tree
os.makedirs(t + "/mixed/a"), os.makedirs(t + "/mixed/b")
Image.new("L", (8, 8), 77).save(t + "/mixed/a/0-grey.jpg")
for k in "ab":
    Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save("%s/mixed/%s/1-colour.png" % (t, k))
# EXIF orientations 1..8 on 12 x 7 PNGs and JPEGs, and a 64 x 32 JPEG turned a quarter (shrink-on-load)
os.makedirs(t + "/exif/a"), os.makedirs(t + "/exif/b"), os.makedirs(t + "/exif-big/a"), os.makedirs(t + "/exif-big/b")
for o in range(1, 9):
    for ext in ("png", "jpg"):
        exif = Image.Exif()
        exif[0x0112] = o
        im = Image.fromarray(rng.integers(0, 256, (7, 12, 3), dtype=np.uint8))
        im.save("%s/exif/%s/%d.%s" % (t, "ab"[o % 2], o, ext), exif=exif.tobytes(), quality=95)
for k, o in (("a", 6), ("b", 8)):
    exif = Image.Exif()
    exif[0x0112] = o
    base = rng.integers(0, 256, (4, 8, 3), dtype=np.uint8)
    Image.fromarray(base).resize((64, 32), Image.BICUBIC).save("%s/exif-big/%s/%d.jpg" % (t, k, o), exif=exif.tobytes())
EOF
    "$ROOT/build/tests/write_ycck" 8 8 "$t/ycck.cmyk" "$t/kinds/b/ycck.jpg" || { fail "write_ycck"; return; }
    [ "$($PY -c 'import sys; from PIL import Image; print(Image.open(sys.argv[1]).info.get("adobe_transform"))' \
        "$t/kinds/b/ycck.jpg")" = 2 ] || fail "write_ycck did not write a YCCK JPEG"
    # the pixel budget
    fx huge partition "$t/huge" "$t/huge.h5" scheme=iid clients=1 size=8
    expect_rc "a 30000 x 30000 header" 2 &&
        { grep -qF "huge/a/huge.png: 30000x30000 is 900000000 pixels, more than max_pixels = 178956970" "$WORK/huge.err" ||
              fail "the pixel budget is not named: $(errline huge)"; }
    fx small_budget partition "$t/kinds" "$t/budget.h5" scheme=iid clients=1 max_pixels=63
    expect_rc "max_pixels=63" 2 && { grep -qF "8x8 is 64 pixels, more than max_pixels = 63" "$WORK/small_budget.err" ||
        fail "max_pixels=63 does not refuse 8x8 images: $(errline small_budget)"; }
    # PNG kinds and CMYK against PIL, channels 3 and 1
    local c why
    for c in 3 1; do
        fx kinds$c partition "$t/kinds" "$t/kinds$c.h5" scheme=iid clients=1 test_fraction=0 channels=$c
        expect_rc "PNG kinds and CMYK, channels=$c" 0 || continue
        why=$($PY - "$t/kinds$c.h5" "$t" $c <<'EOF' 2>&1
import os, sys
import h5py, numpy as np
from PIL import Image
f, t, c = h5py.File(sys.argv[1], "r"), sys.argv[2], int(sys.argv[3])
for ours, path in zip(f["clients/images"][()], f["clients/source_path"][()]):
    path = path.decode()
    if path.endswith("grey16.png"):   # PIL clips 16-bit grey at 255; we keep the high byte
        want = np.load(t + "/grey16.npy")[None].repeat(c, 0)
    else:
        want = np.asarray(Image.open(path).convert("RGB" if c == 3 else "L")).reshape(8, 8, c).transpose(2, 0, 1)
    d = np.abs(ours.astype(int) - want)
    assert d.max() == 0, "%s: differs from PIL by up to %d" % (path, d.max())
EOF
) || fail "PNG kinds and CMYK, channels=$c: $why"
    done
    # channels=auto
    fx mixed partition "$t/mixed" "$t/mixed.h5" scheme=iid clients=1 test_fraction=0
    expect_rc "grey first, colour later" 0 && { grep -q "3x8x8" "$WORK/mixed.out" ||
        fail "channels=auto took the first (grey) image's channels: $(grep -h '^source' "$WORK/mixed.out")"; }
    # EXIF orientation
    local mode
    for mode in apply ignore; do
        fx exif_$mode partition "$t/exif" "$t/exif-$mode.h5" scheme=iid clients=1 test_fraction=0 size=7 resize=none \
            exif_orientation=$mode
        expect_rc "exif_orientation=$mode" 0 || continue
        fx exif_big_$mode partition "$t/exif-big" "$t/exif-big-$mode.h5" scheme=iid clients=1 test_fraction=0 size=16 \
            exif_orientation=$mode
        expect_rc "exif_orientation=$mode, shrink-on-load" 0 || continue
        why=$($PY - "$t/exif-$mode.h5" "$t/exif-big-$mode.h5" $mode <<'EOF' 2>&1
import sys
import h5py, numpy as np
from PIL import Image, ImageOps
import torchvision.transforms as T
for path, fit in ((sys.argv[1], T.CenterCrop(7)), (sys.argv[2], T.Compose([T.Resize(16), T.CenterCrop(16)]))):
    f = h5py.File(path, "r")
    for ours, name in zip(f["clients/images"][()], f["clients/source_path"][()]):
        im = Image.open(name.decode())
        if sys.argv[3] == "apply":
            im = ImageOps.exif_transpose(im)
        d = np.abs(ours.astype(int) - np.asarray(fit(im.convert("RGB"))).transpose(2, 0, 1).astype(int))
        limit = 0 if "big" not in path else 6   # the 64 x 32 JPEGs are decoded at a DCT scale of 1/2
        assert d.mean() <= limit, "%s %s: differs from PIL's by %.3f on average" % (path, name.decode(), d.mean())
EOF
) || fail "exif_orientation=$mode against PIL's exif_transpose: $why"
    done
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

TESTS=(same_as_idx jpeg_like_pil resize_like_torchvision natural_rows holdout_domain provenance bad_input label_tables image_kinds memory_flat seed_configs rrc_ranks)
run_tests "$@"
