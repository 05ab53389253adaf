#!/usr/bin/env python3
"""Every relative link of README.md and docs/**/*.md resolves: the file (or folder) exists, and an anchor
(#name) names a heading of the target page (GitHub's rule: lower case, punctuation dropped, spaces to '-', a
repeated heading gets -1, -2, ...) or an explicit <a id="name">. Links inside code blocks and spans are not
links; http(s) and mailto links are not checked (no network).

usage: tools/check-links.py [FILE.md ...]      (default: README.md and every docs/**/*.md)
Prints one line per broken link (file:line: target: why) and exits 1 when there is any.
"""
import glob
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def strip_code(lines):
    """the lines with fenced blocks blanked and inline code spans removed (line numbers kept)"""
    out, fence = [], None
    for line in lines:
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            fence = None if fence and m.group(1)[0] == fence[0] else (fence or m.group(1))
            out.append("")
            continue
        out.append("" if fence else re.sub(r"`+[^`]*`+", "", line))
    return out


def anchors(path, cache={}):
    if path in cache:
        return cache[path]
    names, seen = set(), {}
    text = open(path, encoding="utf-8").read().split("\n")
    for line in strip_code(text):
        for m in re.finditer(r"<a\s+(?:id|name)=\"([^\"]+)\"", line):
            names.add(m.group(1))
    fence = None
    for line in text:
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            fence = None if fence else m.group(1)
            continue
        h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line) if not fence else None
        if not h:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h.group(1))  # a link's text
        slug = re.sub(r"[^\w\- ]", "", title.lower().replace("`", "")).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        names.add(slug if n == 0 else "%s-%d" % (slug, n))
    cache[path] = names
    return names


def check(md):
    bad = []
    lines = open(md, encoding="utf-8").read().split("\n")
    for lineno, line in enumerate(strip_code(lines), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            where = "%s:%d: %s" % (os.path.relpath(md, ROOT), lineno, target)
            if not os.path.exists(full):
                bad.append("%s: no such file %s" % (where, os.path.relpath(full, ROOT)))
                continue
            if anchor and full.endswith(".md") and anchor not in anchors(full):
                bad.append("%s: %s has no heading or anchor '%s'" % (where, os.path.relpath(full, ROOT), anchor))
    return bad


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    files = argv or [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"),
                                                                        recursive=True))
    bad = [b for f in files for b in check(os.path.abspath(f))]
    for b in bad:
        print(b)
    print("%d file(s) checked, %d broken link(s)" % (len(files), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
