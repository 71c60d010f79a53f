#!/usr/bin/env python3
"""scripts/lib/python/against_report.py: per-round ratios against the other build, their
median and the ratio of the minima; a round missing one side left out of the ratio; files
that are not rounds ignored; no rows an error.

  against_report_test.py SOURCE_DIR
"""

import json
import os
import subprocess
import sys
import tempfile

script = os.path.join(sys.argv[1], "scripts", "lib", "python", "against_report.py")
from checks import check, finish  # noqa: E402


def write_round(raw, rnd, variant, medians):
    doc = {"benchmarks": [{"name": "%s/iterations:10/manual_time" % b, "run_type": "iteration",
                           "median_ns": ns} for b, ns in medians.items()]}
    json.dump(doc, open(os.path.join(raw, "%d.%s.json" % (rnd, variant)), "w"))


def run(d):
    p = subprocess.run([sys.executable, script, d], capture_output=True, text=True)
    return p.returncode, p.stdout


with tempfile.TemporaryDirectory() as d:
    raw = os.path.join(d, "raw")
    os.makedirs(raw)
    rc, out = run(d)
    check(rc == 1 and "no rows" in out, "an empty raw/ is an error")

    P8 = "BM_Write_PostToCompletion/bytes:8"
    # Three rounds. this/other per round: 1.10, 1.00, 1.05 (median 1.05); the minima 110
    # and 100 (ratio 1.100). mapped/other: 0.30 each round.
    for rnd, (other, this) in enumerate([(100, 110), (120, 120), (200, 210)], 1):
        write_round(raw, rnd, "other", {P8: other})
        write_round(raw, rnd, "this", {P8: this})
        write_round(raw, rnd, "mapped", {P8: other * 0.3})
    # A fourth round with no "other": its "this" counts in the medians, not in the ratios.
    write_round(raw, 4, "this", {P8: 50})
    open(os.path.join(raw, "4.other.json"), "w").write("{not json")
    open(os.path.join(raw, "notes.json"), "w").write("{}")
    rc, out = run(d)
    row = [line for line in out.splitlines() if line.startswith(P8)]
    check(rc == 0 and len(row) == 1, "one row for the benchmark (rc %d)" % rc)
    cols = row[0].split() if row else []
    check(cols[1:4] == ["120", "115", "36"], "each variant's median over its rounds: %s" % cols[1:4])
    check("1.050 (1.100) n=3" in row[0] if row else False,
          "this/other: the median of the per-round ratios, the ratio of the minima, 3 rounds")
    check("0.300 (0.300) n=3" in row[0] if row else False, "mapped/other likewise")
    tsv = open(os.path.join(d, "against.tsv")).read().splitlines()
    check(len(tsv) == 10 and "4\tthis\t%s\t50" % P8 in tsv,
          "against.tsv has every round's cell (%d lines)" % len(tsv))
    check(os.path.exists(os.path.join(d, "against.txt")), "against.txt written")

finish()
