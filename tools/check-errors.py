#!/usr/bin/python3
"""Checks the error rule of docs/architecture.md ("Errors and cleanup") in every function of src/.

Per function:
  label   goto jumps only to `done`, and `done:` is the only label (switch's `default:` aside);
  mixed   a function that jumps to `done:` does not also chain `if (status == FH_OK)`;
  leak    between taking a resource into a local variable (memory, a FILE, a descriptor, an HDF5 or
          partition file, a config) and releasing it, the function does not leave by FH_CHECK, FH_FAIL
          or `return <expr>` unless that exit releases the resource first (within the three lines
          before it) or hands it out (`return v`);
  memory  an error whose message says "out of memory" carries FH_ERR_MEMORY (exit 6), the code of the
          exit-code table, not another.

Functions are read from the layout clang-format gives them (a `{` and a `}` alone in column 0), which
is the layout of every file in src/. Prints one line per finding; exit status 1 when there is any.
Usage: tools/check-errors.py [files...]   (default: src/**/*.c)
"""
import glob
import re
import sys

TAKE = (r'fh_calloc|fh_alloc_aligned|malloc|calloc|realloc|strdup|fopen|fdopen|opendir|open|fh_read_file|'
        r'fh_read_bytes|fh_h5_create|fh_h5_open|fh_atomic_open|data_partfile_open|fh_ini_parse|fl_config_load|'
        r'fh_config_load_text|fh_config_load_file|nn_zoo_build|png_create_read_struct|'
        r'H5[FDGSAPT]\w*(?:open|create|copy)|H5[DA]get_(?:space|type)')
TAKE_ASSIGN = re.compile(r'(?:^|[\s(,{;])(\w+)\s*=\s*(?:' + TAKE + r')\s*\(')
TAKE_ADDRESS = re.compile(r'\b(?:' + TAKE + r')\s*\(\s*&(\w+)\s*[,)]')
EXIT = re.compile(r'\b(?:FH_CHECK|FH_FAIL)\s*\(|\breturn\s+(?!status\s*;|FH_OK\s*;)([^;]*);')


def released(var, text):
    v = re.escape(var)
    return re.search(r'\b(?:free|fclose|closedir|close|H5[FDGSAPT]close)\s*\(\s*' + v + r'\s*\)|'
                     r'\b(?:fh_free|\w+_free|\w+_close|\w+_destroy|\w+_discard|\w+_commit|png_destroy_read_struct)'
                     r'\s*\(\s*&?\s*' + v + r'\b', text)


def functions(lines):
    i = 0
    while i < len(lines):
        if lines[i] == '{':
            j = i - 1
            while j > 0 and not re.match(r'[A-Za-z_]', lines[j]):
                j -= 1
            head = ' '.join(lines[j:i])
            name = re.search(r'(\w+)\s*\(', head)
            k = i + 1
            while k < len(lines) and lines[k] != '}':
                k += 1
            yield (name.group(1) if name else '?', i + 1, lines[i + 1:k])
            i = k
        i += 1


def is_local(var, body_text):
    # declared in the body: "Type *var", "Type var;", "Type a = 0, *var = NULL", ...
    return re.search(r'^\s+(?:const\s+|static\s+)*[A-Za-z_]\w*(?:\s*\*+\s*|\s+(?![=*])(?:[^;()]*?[\s*,]\s*\**)?)' +
                     re.escape(var) + r'\s*[=;,\[]', body_text, re.M) is not None


def check(path):
    """(findings, number of functions read)"""
    findings, count = [], 0
    lines = open(path, encoding='utf-8').read().split('\n')
    for name, line, body in functions(lines):
        count += 1
        text = '\n'.join(body)
        where = '%s:%d %s' % (path, line, name)
        gotos = re.findall(r'\bgoto\s+(\w+)', text)
        labels = [l for l in re.findall(r'^\s*(\w+):(?!:)', text, re.M) if l != 'default']
        if any(g != 'done' for g in gotos) or any(l != 'done' for l in labels):
            findings.append('%s: label: goto and labels serve only the cleanup at done:' % where)
        if gotos and re.search(r'if \(status == FH_OK\)', text):
            findings.append('%s: mixed: jumps to done: and chains status == FH_OK' % where)
        for k, raw in enumerate(body):
            m = re.search(r'\b(FH_ERR_\w+)\b[^;]*"out of memory', raw)
            if m and m.group(1) != 'FH_ERR_MEMORY':
                findings.append('%s: memory: line %d says "out of memory" with %s' % (where, line + k, m.group(1)))
        if gotos:
            continue
        held = {}  # variable -> line index where it was taken
        for n, l in enumerate(body):
            for m in list(TAKE_ASSIGN.finditer(l)) + list(TAKE_ADDRESS.finditer(l)):
                var = m.group(1)
                if var not in held and is_local(var, text):
                    held[var] = n
        for var, start in held.items():
            end = next((n for n in range(start + 1, len(body)) if released(var, body[n])), None)
            if end is None:
                continue  # handed out (to an out-parameter or a struct) rather than released here
            for n in range(start + 1, end):
                m = EXIT.search(body[n])
                if not m:
                    continue
                if m.group(1) is not None and m.group(1).strip() == var:
                    continue
                window = '\n'.join(body[max(start + 1, n - 3):n + 1])
                if released(var, window):
                    continue
                # the test of the acquisition itself ("if (!f) FH_FAIL(...)", "if (fd < 0) ..."), or passing up the
                # status of a taking that failed (and so holds nothing): "st = take(&x); FH_CHECK(st);"
                v = re.escape(var)
                if re.search(r'!\s*\(?\s*' + v + r'\b|\b' + v + r'\s*(?:==\s*NULL|<\s*0)', '\n'.join(body[max(start, n - 3 if n <= start + 3 else n - 1):n + 1])):
                    continue
                st = re.search(r'(\w+)\s*=\s*(?:' + TAKE + r')\s*\(\s*&?' + v + r'\b', body[start])
                if st and re.search(r'FH_CHECK\(\s*' + st.group(1) + r'\s*\)', body[n]) and not any(
                        re.search(r'\b' + st.group(1) + r'\s*=[^=]', body[i]) for i in range(start + 1, n)):
                    continue
                findings.append('%s: leak: line %d leaves while %s (taken at line %d) is held' %
                                (where, line + 1 + n, var, line + 1 + start))
    return findings, count


def main():
    files = sys.argv[1:] or sorted(glob.glob('src/**/*.c', recursive=True))
    results = [check(path) for path in files]
    findings = [f for found, _ in results for f in found]
    for f in findings:
        print(f)
    print('%d functions checked in %d files, %d findings' % (sum(n for _, n in results), len(files), len(findings)))
    return 1 if findings else 0


if __name__ == '__main__':
    sys.exit(main())
