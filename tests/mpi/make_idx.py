#!/usr/bin/env python3
"""Writes a tiny learnable IDX data set (MNIST layout) for the MPI tests, standard library only.
usage: make_idx.py DIR [n_train n_test side classes]
Each class lights a different quadrant-like band of the image; uniform noise on top."""
import os, random, struct, sys

def main():
    out = sys.argv[1]
    n_train = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    n_test = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    side = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    classes = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    os.makedirs(out, exist_ok=True)
    rng = random.Random(12345)

    def image(label):
        px = bytearray(side * side)
        for y in range(side):
            for x in range(side):
                # class c: rows band c of `classes` bands is bright
                band = y * classes // side
                base = 120 if band == label else 80
                v = base + rng.randint(-90, 90)
                px[y * side + x] = max(0, min(255, v))
        return bytes(px)

    def write(prefix, n):
        labels = [i % classes for i in range(n)]
        rng.shuffle(labels)
        with open(os.path.join(out, prefix + "-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 0x00000803, n, side, side))
            for l in labels:
                f.write(image(l))
        with open(os.path.join(out, prefix + "-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 0x00000801, n))
            f.write(bytes(labels))

    write("train", n_train)
    write("t10k", n_test)

main()
