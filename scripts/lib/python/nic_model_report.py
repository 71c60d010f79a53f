#!/usr/bin/env python3
"""The NIC model's rows (scripts/lib/guest/bench-nic-model) as one table per workload.

    nic_model_report.py nic_model.tsv

Each cell is the median over the repetitions of a run's median latency, in microseconds;
"NIC on/off" is the NIC path's with the model on over with it off (the model's effect),
"adaptive/best" adaptive's over the faster of the NIC and direct with the model on.
Every figure is labelled as measured under the model: it is rxe with a modelled
translation cache, not a NIC.
"""
import statistics
import sys
from collections import defaultdict

PATHS = ("offload", "direct", "adaptive")


def main(path):
    cells = defaultdict(list)
    share = defaultdict(list)
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) < 8:
            continue
        rep, model, fp, p, work, med, _p99, direct = f[:8]
        cells[(work, model, int(fp), p)].append(int(med) / 1000)
        share[(work, model, int(fp), p)].append(float(direct))
    if not cells:
        print("nic_model_report: no rows in", path)
        return 1
    med = {k: statistics.median(v) for k, v in cells.items()}
    reps = max(len(v) for v in cells.values())
    for work in sorted({k[0] for k in cells}):
        print(f"UNDER THE NIC MODEL (rxe with a modelled translation cache, not a NIC): {work}, 64 B,"
              f" median of {reps} runs' medians, us")
        head = ["MiB"] + [f"{p} {m}" for m in ("off", "on") for p in PATHS] + \
               ["NIC on/off", "adaptive/best on", "adaptive direct share on"]
        print("  ".join(f"{h:>14}" for h in head))
        for fp in sorted({k[2] for k in cells if k[0] == work}):
            row = [str(fp)]
            for m in ("off", "on"):
                row += [f"{med[(work, m, fp, p)]:.1f}" if (work, m, fp, p) in med else "-" for p in PATHS]
            try:
                on, off = med[(work, "on", fp, "offload")], med[(work, "off", fp, "offload")]
                best = min(on, med[(work, "on", fp, "direct")])
                row += [f"{on / off:.2f}", f"{med[(work, 'on', fp, 'adaptive')] / best:.2f}",
                        f"{statistics.median(share[(work, 'on', fp, 'adaptive')]):.2f}"]
            except KeyError:
                row += ["-", "-", "-"]
            print("  ".join(f"{c:>14}" for c in row))
        print()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
