#!/usr/bin/env python3
"""libunload's written order holds: no file includes one its README's table lists above it,
every file is in the table and every row is a file; a planted include up, an unlisted file
and a row with no file are each caught.

  order_test.py SOURCE_DIR
"""

import os
import shutil
import sys
import tempfile

src = sys.argv[1]
sys.path.insert(0, os.path.join(src, "scripts", "lib", "python"))
sys.path.insert(0, os.path.join(src, "tests", "bench"))
from checks import check, finish  # noqa: E402
from include_order import problems  # noqa: E402

folder = os.path.join(src, "libunload")
found = problems(folder)
for line in found:
    print("    " + line)
check(not found, "libunload: every include runs down its README's order, every file listed once")


def planted(change):
    """The problems of a copy of libunload that `change(copy)` altered."""
    with tempfile.TemporaryDirectory() as d:
        copy = os.path.join(d, "libunload")
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("*.o"))
        change(copy)
        return problems(copy)


def include_up(copy):
    with open(os.path.join(copy, "src", "stats.hpp"), "a") as f:
        f.write('#include "route.hpp"\n')


def unlisted(copy):
    with open(os.path.join(copy, "src", "stray.cpp"), "w") as f:
        f.write('#include "records.hpp"\n')


def row_without_file(copy):
    os.remove(os.path.join(copy, "src", "busy.hpp"))


up = planted(include_up)
check(any("stats.hpp includes route.hpp" in p for p in up), "an include up (stats.hpp of route.hpp) is caught")
check(any("stray is not in the table" in p for p in planted(unlisted)), "a file the table does not list is caught")
check(any("lists busy" in p for p in planted(row_without_file)), "a row that names no file is caught")
finish()
