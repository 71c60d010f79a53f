#!/usr/bin/env python3
"""This build against another, from scripts/lib/guest/bench-against's rounds.

    against_report.py DIR

Reads DIR/raw/ROUND.VARIANT.json (Google Benchmark's JSON; variants other, this, mapped)
and writes DIR/against.tsv (round, variant, benchmark, median ns) and DIR/against.txt: for
each benchmark, each variant's median over the rounds, then this build against the other,
the median of the per-round ratios (both ran in the same round, one after the other) and
the ratio of the minima, through the module and with the mapped engine. A round that lacks
a benchmark on either side is left out of its ratios. No rows is an error.
"""
import glob
import json
import os
import statistics
import sys
from collections import defaultdict

VARIANTS = ("other", "this", "mapped")


def load(raw):
    """{(benchmark, variant): {round: median ns}} from the raw JSON files."""
    cells = defaultdict(dict)
    for path in glob.glob(os.path.join(raw, "*.json")):
        name = os.path.basename(path)[: -len(".json")]
        rnd, _, variant = name.partition(".")
        if not rnd.isdigit() or variant not in VARIANTS:
            continue
        try:
            doc = json.load(open(path))
        except (OSError, ValueError):
            continue  # a failed run: its .err says why
        for b in doc.get("benchmarks", []):
            if b.get("run_type") != "iteration" or not b.get("median_ns"):
                continue
            bench = b["name"].split("/iterations")[0]
            cells[(bench, variant)][int(rnd)] = float(b["median_ns"])
    return cells


def ratios(cells, bench, variant):
    """Median of per-round ratios and ratio of minima of variant against other, or None."""
    a, b = cells.get((bench, variant), {}), cells.get((bench, "other"), {})
    rounds = sorted(set(a) & set(b))
    if not rounds:
        return None
    per_round = [a[r] / b[r] for r in rounds]
    return statistics.median(per_round), min(a[r] for r in rounds) / min(b[r] for r in rounds), len(rounds)


def main(argv):
    if len(argv) != 1:
        sys.exit(__doc__)
    out = argv[0]
    cells = load(os.path.join(out, "raw"))
    if not cells:
        print("against_report: no rows in", os.path.join(out, "raw"))
        return 1
    with open(os.path.join(out, "against.tsv"), "w") as tsv:
        for (bench, variant), by_round in sorted(cells.items()):
            for rnd, ns in sorted(by_round.items()):
                tsv.write("%d\t%s\t%s\t%.0f\n" % (rnd, variant, bench, ns))
    benches = sorted({b for b, _ in cells})
    lines = ["This build against the other (direct, one boot, rounds in turned order): median ns "
             "over the rounds; this/other and mapped/other as the median of per-round ratios "
             "(ratio of the minima), n rounds",
             "%-44s %10s %10s %10s  %-22s %-22s" % ("benchmark", "other", "this", "mapped",
                                                    "this/other", "mapped/other")]
    for bench in benches:
        meds = []
        for v in VARIANTS:
            by_round = cells.get((bench, v))
            meds.append("%10.0f" % statistics.median(by_round.values()) if by_round else "%10s" % "-")
        cols = []
        for v in ("this", "mapped"):
            r = ratios(cells, bench, v)
            cols.append("%-22s" % ("%.3f (%.3f) n=%d" % r if r else "-"))
        lines.append("%-44s %s  %s" % (bench, " ".join(meds), " ".join(cols)))
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, "against.txt"), "w").write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
