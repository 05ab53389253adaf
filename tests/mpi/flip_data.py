#!/usr/bin/env python3
"""Flips one bit of a dataset's raw bytes inside an HDF5 file (uncompressed chunks), standard library only.
usage: flip_data.py FILE.h5 DUMP.bin [COPIES]
       flip_data.py --deflate FILE.h5 DUMP.bin
DUMP.bin is the dataset as `h5dump -b LE -o` wrote it. A window of its middle values that occurs exactly
COPIES times (default 1: once) in FILE.h5 is located and the lowest bit of the first byte of every
occurrence is flipped (COPIES > 1: files that store the same data twice); prints the first file offset.
Exits 1 when no such window is found (e.g. the data are compressed).
--deflate: the dataset's chunks are deflate-compressed; the first zlib stream in FILE.h5 that inflates to
a piece of DUMP.bin gets 32 bytes in its middle inverted, so that it no longer inflates; prints the offset."""
import sys
import zlib

def damage_deflate(path, dump):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    with open(dump, "rb") as f:
        values = f.read()
    for at in range(len(data) - 2):
        if data[at] != 0x78 or ((data[at] << 8) | data[at + 1]) % 31:
            continue
        d = zlib.decompressobj()
        try:
            out = d.decompress(bytes(data[at:]))
        except zlib.error:
            continue
        if not d.eof or len(out) < 64 or out not in values:
            continue
        size = len(data) - at - len(d.unused_data)
        mid = at + size // 2
        for i in range(mid, min(mid + 32, at + size - 4)):
            data[i] ^= 0xFF
        try:
            zlib.decompress(bytes(data[at:at + size]))
            return 1
        except zlib.error:
            pass
        with open(path, "r+b") as f:
            f.write(data)
        print(mid)
        return 0
    return 1

def main():
    if sys.argv[1] == "--deflate":
        return damage_deflate(sys.argv[2], sys.argv[3])
    path, dump = sys.argv[1], sys.argv[2]
    copies = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    with open(path, "rb") as f:
        data = f.read()
    with open(dump, "rb") as f:
        values = f.read()
    n = len(values) // 4
    if n == 0:
        return 1
    for width in (16, 8, 4):
        for step in range(0, n // 2):
            for i in (n // 2 + step, n // 2 - step):
                if i < 0 or (i + width // 4) > n:
                    continue
                window = values[4 * i:4 * i + width]
                found, at = [], data.find(window)
                while at >= 0 and len(found) <= copies:
                    found.append(at)
                    at = data.find(window, at + 1)
                if len(found) == copies:
                    with open(path, "r+b") as f:
                        for at in found:
                            f.seek(at)
                            f.write(bytes([data[at] ^ 0x01]))
                    print(found[0])
                    return 0
            if step >= 64:
                break
    return 1

sys.exit(main())
