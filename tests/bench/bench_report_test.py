#!/usr/bin/env python3
"""scripts/lib/python/bench_report.py's shim-overhead figures: the median of the pairs' ratios,
its distribution-free interval, the baseline shim's comparison, failed runs left out;
adaptive against the best path, run by run; a run of a few sizes (scripts/bench's default)
tabled and plotted at those sizes alone; the policy's repetitions named.

  bench_report_test.py SOURCE_DIR
"""

import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(sys.argv[1], "scripts", "lib", "python"))
import bench_report as br  # noqa: E402

from checks import check, finish  # noqa: E402


def binom_below(n, k):
    """P(Binomial(n, 1/2) < k), summed directly."""
    return sum(math.comb(n, i) for i in range(k)) / 2 ** n


# The interval's order statistics are the widest-k ones that keep 2.5 % in each tail.
for n in range(1, 41):
    xs = [float(i) for i in range(1, n + 1)]
    ci = br.median_ci(xs[::-1])  # unsorted input
    best = max((k for k in range(1, n // 2 + 1) if binom_below(n, k) <= 0.025), default=0)
    want = (xs[best - 1], xs[n - best]) if best else None
    if ci != want:
        check(False, f"median_ci n={n}: {ci}, want {want}")
        break
else:
    check(True, "median_ci takes order statistics (k, n+1-k) with the binomial tail <= 2.5 % (n = 1..40)")
check(br.median_ci([1.0] * 5) is None, "no interval from 5 values (none reaches 95 %)")
check(br.median_ci([3.0, 1.0, 2.0, 9.0, 5.0, 4.0, 7.0, 8.0, 6.0, 10.0]) == (2.0, 9.0),
      "10 values: the 2nd and 9th smallest")

# Adaptive against direct run by run: a run pairs with the same repetition and alternation,
# a NIC path's one run a repetition with each alternation, and unpaired runs are left out.
def bench(run, ns):
    return {"_run": run, "median_ns": ns}


direct = [bench("1", 100.0), bench("1.2", 140.0), bench("2", 140.0), bench("2.2", 100.0)]
adaptive = [bench("1", 103.0), bench("1.2", 144.2), bench("2", 144.2), bench("2.2", 103.0),
            bench("3", 50.0)]
r = br.paired_ratios(adaptive, direct)
check(len(r) == 4 and all(abs(x - 1.03) < 1e-9 for x in r),
      f"paired: each run against its own pair, the unpaired one left out ({r})")
check(abs(br.med(adaptive_ns := [b["median_ns"] for b in adaptive[:4]]) / br.med(
    [b["median_ns"] for b in direct]) - 1.03) < 1e-9 and len(adaptive_ns) == 4,
      "the fixture's medians agree when both land in the same mode")
offload = [bench("1", 400.0), bench("2", 800.0)]
r = br.paired_ratios(direct, offload)
check(sorted(r) == [0.125, 0.175, 0.25, 0.35],
      f"paired: a variant run once a repetition stands for each alternation ({sorted(r)})")

# A results directory: 10 repetitions of three variants at 8 B, 3 at 64 B, failed runs.
with tempfile.TemporaryDirectory() as d:
    rows = []
    for r in range(1, 11):
        no = 10.0 + (r % 2) * 2  # the bimodal guest: 10 or 12 us
        rows += [(r, 8, "noshim", no), (r, 8, "shim", no * (1 + r / 1000)),
                 (r, 8, "baseline", no * (1 + r / 500))]
    rows += [(r, 64, v, 20.0) for r in range(1, 4) for v in ("noshim", "shim")]
    rows += [(11, 8, "shim", float("inf")), (12, 8, "noshim", float("nan"))]
    with open(os.path.join(d, "write_lat.tsv"), "w") as f:
        f.writelines("%d\t%d\t%s\t%s\n" % row for row in rows)
    ovh = {o["bytes"]: o for o in br.overhead(d)}
    o8, o64 = ovh.get(8, {}), ovh.get(64, {})
    check(o8.get("pairs") == 10, f"8 B: 10 pairs, the failed runs left out ({o8.get('pairs')})")
    check(abs(o8.get("overhead_pct", 0) - 0.55) < 1e-9,
          f"8 B: overhead is the median ratio, +0.55 % ({o8.get('overhead_pct')})")
    lo, hi = o8.get("overhead_ci_pct", (None, None))
    check(lo is not None and abs(lo - 0.2) < 1e-9 and abs(hi - 0.9) < 1e-9,
          f"8 B: interval [+0.2, +0.9] % ({lo}, {hi})")
    check(abs(o8.get("baseline_overhead_pct", 0) - 1.1) < 1e-9, "8 B: the baseline's own overhead, +1.1 %")
    vs = o8.get("vs_baseline_pct")
    want = sorted((1 + r / 1000) / (1 + r / 500) for r in range(1, 11))
    check(vs is not None and abs(vs - ((want[4] + want[5]) / 2 - 1) * 100) < 1e-9,
          f"8 B: this shim against the baseline, pair by pair ({vs})")
    check("vs_baseline_ci_pct" in o8 and o8["vs_baseline_ci_pct"][1] < 0,
          "8 B: this shim against the baseline has an interval, below zero here")
    check(o64.get("pairs") == 3 and "overhead_ci_pct" not in o64 and "baseline_us" not in o64,
          "64 B: 3 pairs, no interval, no baseline")
    text = br.table([], list(ovh.values()))
    check("+0.6% [+0.2, +0.9] (10 pairs)" in text, "the table prints the interval:\n" + text)

# A results directory of the default run: three sizes, two repetitions, every path, and
# bench_policy's three repetitions.
def bench_json(variant, sizes):
    benches = [{"name": "BM_Floor_Syscall/iterations:20000/manual_time", "run_type": "iteration",
                "median_ns": 500.0, "p99_ns": 900.0}]
    for size in sizes:
        ns = 1000.0 + size / 10 + VARIANT_NS[variant]
        for workload in ("PostToCompletion", "PingPong"):
            benches.append({"name": f"BM_Write_{workload}/bytes:{size}/iterations:100/manual_time",
                            "run_type": "iteration", "median_ns": ns, "p99_ns": 2 * ns,
                            "share_direct": 1.0 if variant in ("direct", "adaptive") else 0.0})
        benches.append({"name": f"BM_Write_Bandwidth/bytes:{size}/depth:128/iterations:10/manual_time",
                        "run_type": "iteration", "median_ns": ns / 4, "p99_ns": ns})
        for depth in (1, 16):  # the event-driven rows: a workload per depth
            benches.append({"name": f"BM_Write_Event/bytes:{size}/depth:{depth}/iterations:10/manual_time",
                            "run_type": "iteration", "median_ns": ns / depth, "p99_ns": ns})
        benches.append({"name": f"BM_Floor_Memcpy/bytes:{size}/iterations:100/manual_time",
                        "run_type": "iteration", "median_ns": size / 8, "p99_ns": size / 4})
    return {"context": {"kernel": "test"}, "benchmarks": benches}


VARIANT_NS = {"noshim": 0.0, "offload": 10.0, "inline": 5.0, "stage": 8.0, "direct": -900.0, "adaptive": -890.0}
check([br.size_label(n) for n in (8, 64, 1000, 4096, 65536, 1 << 20)] ==
      ["8 B", "64 B", "1000 B", "4 KiB", "64 KiB", "1 MiB"], "size labels: B, KiB, MiB")
with tempfile.TemporaryDirectory() as d:
    os.mkdir(os.path.join(d, "raw"))
    sizes = [8, 4096, 65536]
    for run in ("1", "2"):
        for v in VARIANT_NS:
            with open(os.path.join(d, "raw", f"{v}.{run}.json"), "w") as f:
                json.dump(bench_json(v, sizes), f)
    with open(os.path.join(d, "policy.json"), "w") as f:
        json.dump({"benchmarks": [{"run_name": "BM_Policy_Decide/mode:0", "aggregate_name": "median",
                                   "real_time": 4.5, "repetitions": 3}]}, f)
    runs, floors, _ = br.load(d)
    rows = br.summarise(runs, floors)
    for workload in ("PostToCompletion", "PingPong", "Bandwidth", "Event1", "Event16"):
        got = [r["bytes"] for r in rows if r["workload"] == workload]
        check(got == sizes, f"{workload}: a row for each size run and no other ({got})")
    check(all(len(r["paths"]) == 6 and all(e["reps"] == 2 for e in r["paths"].values()) for r in rows),
          "every row has the six paths, two repetitions each")
    ptc = [r for r in rows if r["workload"] == "PostToCompletion"]
    check([r.get("adaptive_chose") for r in ptc] == ["direct"] * 3, "adaptive chose direct at each size")
    check(all("direct_vs_floor" in r for r in ptc), "the direct floor at each size run")
    pol, reps = br.policy_costs(d)
    check(pol == {"BM_Policy_Decide/mode:0": 4.5} and reps == 3, f"policy: the median and its repetitions ({reps})")
    text = br.table(rows, [], pol, None, reps)
    lines = text.splitlines()
    for workload in ("PostToCompletion", "PingPong"):
        at = lines.index(next(l for l in lines if l.startswith(workload)))
        got = [int(l.split()[0]) for l in lines[at + 2:at + 5]]
        check(got == sizes and not lines[at + 5].strip(), f"{workload} table: the three sizes, in order ({got})")
    check("median of 3" in text, "the policy's table names its 3 repetitions")
    ev16 = [r for r in rows if r["workload"] == "Event16"]
    check([round(r["adaptive_vs_noshim_paired"], 4) for r in ev16] ==
          [round((1000.0 + s / 10 - 890.0) / (1000.0 + s / 10), 4) for s in sizes],
          "event rows, 16 in flight: adaptive against no shim, paired, at each size")
    at = lines.index(next(l for l in lines if l.startswith("Event-driven, 16 writes in flight")))
    got = [int(l.split()[0]) for l in lines[at + 2:at + 5]]
    check(got == sizes, f"the 16-in-flight event table: the three sizes, in order ({got})")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("skip: plot of three sizes: matplotlib missing in " + sys.executable)
    else:
        br.plot(rows, d)
        check(all(os.path.getsize(os.path.join(d, f"latency.{e}")) > 0 for e in ("png", "svg")),
              "plot of three sizes: latency.png and latency.svg written")

finish()
