#!/usr/bin/env python3
"""The NIC model's rows (scripts/lib/guest/bench-nic-model, bench-nic-model-hosts) as one
table per workload.

    nic_model_report.py [--cpu direct|remote] [--miss-ns NS [--write-ns NS]] TSV

Each cell is the median over the repetitions of a run's median latency, in microseconds;
"NIC on/off" is the NIC path's with the model on over with it off (the model's effect),
"adaptive/best" adaptive's over the faster of the NIC and the CPU path (--cpu: direct on
one host, remote across two) with the model off and on, "adaptive CPU share" the share of
adaptive's writes that took the CPU path. A TSV of two hosts also gives the target NIC's
translation misses a write on the NIC path and adaptive against the better path by the
means (which adaptive weighs by: it learns from each write's cost). "paired" is the median over
the repetitions of each one's own ratio, adaptive's median over the better path's in the same
repetition: with interleaved runs (bench-nic-model-hosts --interleave) the paths of a
repetition share its slow spells, so this is the figure that resolves a few per cent; a line
under each table gives every repetition's own ratio, the spread behind the median. Every
figure is labelled as measured under the model: it is rxe with a modelled translation
cache, not a NIC. With --miss-ns (the model's wait per miss) the tables are headed by the
ratio they were measured at: a miss over a NIC write's cost here, --write-ns (the write the
miss was calibrated by) or else the NIC path's median with the model off in these rows
(random targets where run, at the smallest footprint). The seed paper's NIC misses at about
one write's cost.
"""
import statistics
import sys
from collections import defaultdict


def main(argv):
    cpu, miss_ns, write_ns = "direct", None, None
    while len(argv) > 1 and argv[0] in ("--cpu", "--miss-ns", "--write-ns"):
        if argv[0] == "--cpu" and argv[1] in ("direct", "remote"):
            cpu = argv[1]
        elif argv[0] == "--miss-ns" and argv[1].isdigit():
            miss_ns = int(argv[1])
        elif argv[0] == "--write-ns" and argv[1].isdigit() and int(argv[1]) > 0:
            write_ns = int(argv[1])
        else:
            sys.exit(__doc__)
        argv = argv[2:]
    if len(argv) != 1 or (write_ns is not None and miss_ns is None):
        sys.exit(__doc__)
    paths = ("offload", cpu, "adaptive")
    cells = defaultdict(list)
    share = defaultdict(list)
    misses = defaultdict(list)
    means = defaultdict(list)
    by_rep = defaultdict(dict)  # (work, model, fp) -> {(rep, path): median}
    for line in open(argv[0]):
        f = line.rstrip("\n").split("\t")
        if len(f) < 8:
            continue
        rep, model, fp, p, work, med, _p99, cpu_share = f[:8]
        key = (work, model, int(fp), p)
        cells[key].append(int(med) / 1000)
        by_rep[(work, model, int(fp))][(rep, p)] = int(med)
        share[key].append(float(cpu_share))
        if len(f) > 8:
            misses[key].append(float(f[8]))
        if len(f) > 9:
            means[key].append(int(f[9]) / 1000)
    if not cells:
        print("nic_model_report: no rows in", argv[0])
        return 1
    med = {k: statistics.median(v) for k, v in cells.items()}
    mean = {k: statistics.median(v) for k, v in means.items()}
    reps = max(len(v) for v in cells.values())

    def ratio_to_best(work, m, fp, of=med):
        best = min(of[(work, m, fp, "offload")], of[(work, m, fp, cpu)])
        return f"{of[(work, m, fp, 'adaptive')] / best:.2f}"

    def paired_each(work, m, fp):
        """Each repetition's own ratio, in repetition order."""
        runs = by_rep[(work, m, fp)]
        return [runs[(r, "adaptive")] / min(runs[(r, "offload")], runs[(r, cpu)])
                for r in sorted({r for r, _ in runs}, key=int)
                if all((r, p) in runs for p in paths)]

    def paired(work, m, fp):
        return f"{statistics.median(paired_each(work, m, fp)):.2f}"

    def cell(figure):
        """A derived figure, or "-" when a cell it needs is missing."""
        try:
            return figure()
        except (KeyError, statistics.StatisticsError):
            return "-"

    if miss_ns is not None:
        print(ratio_line(miss_ns, write_ns, med))
        print()
    for work in sorted({k[0] for k in cells}):
        print(f"UNDER THE NIC MODEL (rxe with a modelled translation cache, not a NIC): {work}, 64 B,"
              f" median of {reps} runs' medians, us")
        head = ["MiB"] + [f"{p} {m}" for m in ("off", "on") for p in paths] + \
               ["NIC on/off", "adaptive/best off", "adaptive/best on", f"adaptive {cpu} share on"]
        if misses:
            head.append("NIC misses/write on")
        if means:
            head.append("adaptive/best on, means")
        head.append("adaptive/best on, paired")
        print("  ".join(f"{h:>14}" for h in head))
        each = []  # the spread behind each paired median: whether a cell resolves a few per cent
        for fp in sorted({k[2] for k in cells if k[0] == work}):
            if ratios := paired_each(work, "on", fp):
                each.append(f"{fp} MiB " + " ".join(f"{x:.2f}" for x in ratios))
            row = [str(fp)]
            for m in ("off", "on"):
                row += [f"{med[(work, m, fp, p)]:.1f}" if (work, m, fp, p) in med else "-" for p in paths]
            row += [cell(lambda: f"{med[(work, 'on', fp, 'offload')] / med[(work, 'off', fp, 'offload')]:.2f}"),
                    cell(lambda: ratio_to_best(work, "off", fp)),
                    cell(lambda: ratio_to_best(work, "on", fp)),
                    cell(lambda: f"{statistics.median(share[(work, 'on', fp, 'adaptive')]):.2f}")]
            if misses:
                row.append(cell(lambda: f"{statistics.median(misses[(work, 'on', fp, 'offload')]):.2f}"))
            if means:
                row.append(cell(lambda: ratio_to_best(work, "on", fp, mean)))
            row.append(cell(lambda: paired(work, "on", fp)))
            print("  ".join(f"{c:>14}" for c in row))
        if each:
            print("adaptive/best on, paired, each repetition: " + "; ".join(each))
        print()
    return 0


def ratio_line(miss_ns, write_ns, med):
    """The ratio the tables were measured at: a miss over the NIC path's write, model off."""
    if write_ns is not None:
        return (f"a miss at the target's NIC: {miss_ns / 1000:.1f} us, {miss_ns / write_ns:.2f}x a NIC write here"
                f" (the write it was calibrated by, {write_ns / 1000:.1f} us: the NIC path's median, the model off,"
                f" measured first in the same boot)")
    nic = sorted(((fp, work != "RandomTarget"), work) for work, m, fp, p in med if p == "offload" and m == "off")
    if not nic:
        return f"a miss at the target's NIC: {miss_ns / 1000:.1f} us (no NIC run with the model off to weigh it by)"
    (fp, _), work = nic[0]
    write_us = med[(work, "off", fp, "offload")]
    return (f"a miss at the target's NIC: {miss_ns / 1000:.1f} us, {miss_ns / 1000 / write_us:.2f}x a NIC write here"
            f" (the NIC path's median with the model off, {write_us:.1f} us: {work}, {fp} MiB)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
