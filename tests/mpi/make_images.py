#!/usr/bin/python3
"""Writes an IDX data set (train-/t10k- images and labels) out in the layouts of fedhet's image sources, for
tests/mpi/test_sources.sh. Debian's python3 with PIL and numpy.
usage: make_images.py LAYOUT IDX_DIR OUT [options]
  folder   OUT/{train,test}/CLASS/NNNNN.png     (and OUT-order/ : IDX files in the tree's class-major order)
  jpeg     OUT/CLASS/NNNNN.jpg (RGB, quality 90) and OUT.npy: PIL's decode of each, in tree order [n, h, w, 3]
  csv      OUT/labels.csv (image,label,client,split) + OUT/img/NNNNN.png; clients c0..c3 by row % 4
  onehot   OUT/truth.csv (image,A,B,C,...) one-hot columns + OUT/img/NNNNN.png (no extension in the column)
  npz      OUT.npz with x_train, y_train, x_test, y_test (uint8 NHWC); npz-f32 float32 NCHW in [0, 1],
           compressed
  npy      OUT/x_train.npy ... (uint8 [n, h, w])
  domains  OUT/DOMAIN/CLASS/NNNNN.png, DOMAIN d0..d3 by row % 4 (train rows only), RGB (3 channels)
"""
import os, struct, sys

import numpy as np
from PIL import Image


def read_idx(d, prefix):
    with open(os.path.join(d, prefix + "-images-idx3-ubyte"), "rb") as f:
        magic, n, h, w = struct.unpack(">IIII", f.read(16))
        x = np.frombuffer(f.read(), np.uint8).reshape(n, h, w)
    with open(os.path.join(d, prefix + "-labels-idx1-ubyte"), "rb") as f:
        magic, n = struct.unpack(">II", f.read(8))
        y = np.frombuffer(f.read(), np.uint8)
    return x, y


def write_idx(d, prefix, x, y):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, prefix + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, len(x), x.shape[1], x.shape[2]))
        f.write(x.tobytes())
    with open(os.path.join(d, prefix + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, len(y)))
        f.write(y.tobytes())


def class_major(x, y):
    """the order of an image folder tree: class folders in name order, files in name order (= row order)"""
    order = np.argsort(y, kind="stable")
    return x[order], y[order]


def main():
    layout, idx, out = sys.argv[1], sys.argv[2], sys.argv[3]
    xtr, ytr = read_idx(idx, "train")
    xte, yte = read_idx(idx, "t10k")
    if layout == "folder":
        for part, x, y in (("train", xtr, ytr), ("test", xte, yte)):
            for i in range(len(x)):
                d = os.path.join(out, part, str(int(y[i])))
                os.makedirs(d, exist_ok=True)
                Image.fromarray(x[i], "L").save(os.path.join(d, "%05d.png" % i))
            write_idx(out + "-order", "train" if part == "train" else "t10k", *class_major(x, y))
    elif layout == "jpeg":
        decoded = []
        for i in np.argsort(ytr, kind="stable"):
            d = os.path.join(out, str(int(ytr[i])))
            os.makedirs(d, exist_ok=True)
            rgb = np.stack([xtr[i], xtr[::-1][i], 255 - xtr[i]], axis=-1)
            path = os.path.join(d, "%05d.jpg" % i)
            Image.fromarray(rgb, "RGB").save(path, quality=90)
            decoded.append(np.asarray(Image.open(path).convert("RGB")))
        np.save(out + ".npy", np.stack(decoded))
    elif layout in ("csv", "onehot"):
        os.makedirs(os.path.join(out, "img"), exist_ok=True)
        classes = "ABCDEFGHIJKLMNOP"[: int(max(ytr.max(), yte.max())) + 1]
        with open(os.path.join(out, "labels.csv" if layout == "csv" else "truth.csv"), "w") as f:
            f.write("image,label,client,split\n" if layout == "csv" else "image," + ",".join(classes) + "\n")
            rows = [(x, y, "train") for x, y in zip(xtr, ytr)] + [(x, y, "test") for x, y in zip(xte, yte)]
            if layout == "onehot":
                rows = rows[: len(xtr)]
            for i, (x, y, split) in enumerate(rows):
                name = "%05d" % i
                Image.fromarray(x, "L").save(os.path.join(out, "img", name + ".png"))
                if layout == "csv":
                    f.write("img/%s.png,%d,c%d,%s\n" % (name, y, i % 4, split))
                else:
                    f.write(name + "," + ",".join("1.0" if k == y else "0.0" for k in range(len(classes))) + "\n")
    elif layout == "npz":
        np.savez(out + ".npz", x_train=xtr[..., None], y_train=ytr.astype(np.int64), x_test=xte[..., None],
                 y_test=yte.astype(np.int64))
    elif layout == "npz-f32":
        np.savez_compressed(out + ".npz", x_train=(xtr[:, None] / 255.0).astype(np.float32), y_train=ytr.astype(np.int32),
                            x_test=(xte[:, None] / 255.0).astype(np.float32), y_test=yte.astype(np.int32))
    elif layout == "npy":
        os.makedirs(out, exist_ok=True)
        for name, a in (("x_train", xtr), ("y_train", ytr), ("x_test", xte), ("y_test", yte)):
            np.save(os.path.join(out, name + ".npy"), a)
    elif layout == "domains":
        for i in range(len(xtr)):
            d = os.path.join(out, "d%d" % (i % 4), "k%d" % int(ytr[i]))
            os.makedirs(d, exist_ok=True)
            Image.fromarray(np.stack([xtr[i]] * 3, axis=-1), "RGB").save(os.path.join(d, "%05d.png" % i))
    else:
        sys.exit("unknown layout " + layout)


if __name__ == "__main__":
    main()
