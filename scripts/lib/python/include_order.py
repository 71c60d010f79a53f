#!/usr/bin/env python3
"""A folder's written order held against its includes: each file (a .cpp with its header,
or a header alone) may include only files listed below it in the order table of the
folder's README.md (its first table whose rows start with a file name in backticks).

  include_order.py FOLDER     prints each include that runs up, each file the table does not
                              list and each row that names no file; exits 1 if any

The table's rows name files as `name.cpp`, `name.hpp/.cpp` or `name.hpp`; one room a stem,
so a header and its .cpp (in src/ or include/) are one row.
"""

import os
import re
import sys

SOURCE = (".cpp", ".hpp", ".h")
ROW = re.compile(r"^\|\s*`([A-Za-z0-9_]+)[^`]*`\s*\|")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def read_order(folder):
    """The rooms in the README's order table, top first."""
    rows = []
    with open(os.path.join(folder, "README.md")) as f:
        for line in f:
            m = ROW.match(line)
            if m:
                rows.append(m.group(1))
    return rows


def sources(folder):
    for d, _, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith(SOURCE):
                yield os.path.join(d, name)


def problems(folder):
    """Every disagreement between the table and the code, one line each."""
    order = read_order(folder)
    out = []
    if not order:
        return ["%s/README.md: no order table" % folder]
    rank = {room: i for i, room in enumerate(order)}
    files = list(sources(folder))
    rooms = {stem(p) for p in files}
    for room in order:
        if room not in rooms:
            out.append("the table lists %s, which no file of %s is" % (room, folder))
    for room in sorted(rooms - set(order)):
        out.append("%s is not in the table" % room)
    for p in files:
        here = stem(p)
        if here not in rank:
            continue
        with open(p) as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            there = stem(inc)
            if there == here or there not in rank:
                continue  # its own header, or outside the folder
            if rank[there] < rank[here]:
                out.append("%s includes %s, which the table lists above it" %
                           (os.path.relpath(p, folder), inc))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    found = problems(sys.argv[1])
    for line in found:
        print(line)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
