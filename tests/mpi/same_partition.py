#!/usr/bin/python3
"""Exits 0 when two partition files hold the same images, labels, client rows, label counts, statistics and
channel mean/std (bit for bit), else 1 naming the first difference. usage: same_partition.py A.h5 B.h5 [--no-test]"""
import sys

import h5py
import numpy as np

NAMES = ["clients/images", "clients/labels", "clients/offsets", "clients/label_counts", "clients/source_index",
         "clients/corruption", "stats/label_entropy", "stats/effective_classes", "stats/tv_to_global",
         "stats/emd_to_global", "test/images", "test/labels"]
ATTRS = ["classes", "shape", "mean", "std", "n_clients"]


def main():
    a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
    names = [n for n in NAMES if not ("--no-test" in sys.argv and n.startswith("test/"))]
    for n in names:
        if (n in a) != (n in b):
            sys.exit("%s: in one file only" % n)
        if n in a and not np.array_equal(a[n][()], b[n][()]):
            sys.exit("%s differs" % n)
    for n in ATTRS:
        if not np.array_equal(a.attrs[n], b.attrs[n]):
            sys.exit("attribute %s differs: %s vs %s" % (n, a.attrs[n], b.attrs[n]))
    if not np.array_equal(a["stats"].attrs["size_gini"], b["stats"].attrs["size_gini"]):
        sys.exit("size_gini differs")


if __name__ == "__main__":
    main()
