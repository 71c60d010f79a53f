#!/usr/bin/env python3
"""Summarise a scripts/bench results directory: the size x path tables, summary.json, and
log-log plots of latency and bandwidth against size (PNG and SVG).

Every figure is a median over repetitions of a per-repetition median (or p99) of per-write
latencies; paths are compared as ratios measured in the same run, interleaved. Adaptive
against the best fixed path is also given as the median of run-by-run ratios (paired):
TCG puts whole processes in a slow mode at random, which a ratio of medians inherits.
Bandwidth rows are per write too: the median time per write over runs of 100 streamed writes, so
bytes/s and writes/s are bytes / median and 1 / median.

    bench_report.py RESULTS_DIR
"""
import glob
import json
import math
import os
import re
import statistics
import sys

# direct: every write submitted to the module; mapped: placed through the module's mapping
# of the peer's region (UNLOAD_PATH=mapped). "adaptive/best" is over PATHS.
VARIANTS = ["noshim", "offload", "inline", "stage", "direct", "mapped", "adaptive"]
WORKLOADS = ["PostToCompletion", "PingPong", "RandomTarget", "Bandwidth", "Event1", "Event16"]
# The event-driven rows (BM_Write_Event, a completion channel): per write, post to the
# program's wake and poll, at 1 and 16 writes in flight.
TITLES = {"Event1": "Event-driven, 1 write in flight (completion channel, ibv_get_cq_event), per write",
          "Event16": "Event-driven, 16 writes in flight (completion channel, ibv_get_cq_event), per write"}
PERFTEST_BW_VARIANTS = ["noshim", "offload", "unload"]
PATHS = ["offload", "inline", "stage", "direct", "mapped"]


def load(results):
    """{(variant, workload, bytes): [run, ...]}, floors {name/bytes: [run, ...]}, context."""
    runs, floors, context = {}, {}, {}
    for path in sorted(glob.glob(os.path.join(results, "raw", "*.json"))):
        variant = os.path.basename(path).split(".")[0]
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, json.JSONDecodeError):
            continue
        context = context or doc.get("context", {})
        for b in doc.get("benchmarks", []):
            if b.get("run_type") != "iteration" or b.get("error_occurred"):
                continue
            m = re.match(r"BM_(Write|Floor)_(\w+)(?:/bytes:(\d+))?(?:/depth:(\d+))?", b["name"])
            if not m or "median_ns" not in b:
                continue
            kind, name, size = m.group(1), m.group(2), int(m.group(3) or 0)
            if name == "Event":  # a workload per depth: Event1, Event16
                name += m.group(4) or ""
            b["_run"] = os.path.basename(path)[len(variant) + 1:-len(".json")]  # "3", "3.2"
            if kind == "Floor":
                floors.setdefault((name, size), []).append(b)
            else:
                runs.setdefault((variant, name, size), []).append(b)
    return runs, floors, context


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def median_ci(values, level=0.95):
    """A distribution-free interval for the median of values: the order statistics
    (k, n + 1 - k), k the largest with P(Binomial(n, 1/2) < k) <= (1 - level) / 2, so it
    covers the median with at least `level` whatever the distribution (the pairs' ratios
    are bimodal in TCG: no normal approximation). None when n is too small (n < 6 at 95 %)."""
    xs = sorted(v for v in values if v is not None)
    n, tail, k = len(xs), (1 - level) / 2, 0
    cdf = 0.0  # P(X <= k - 1) as k grows
    while k < n:
        cdf_next = cdf + math.comb(n, k) / 2 ** n
        if cdf_next > tail:
            break
        cdf, k = cdf_next, k + 1
    return (xs[k - 1], xs[n - k]) if k >= 1 else None


def paired_ratios(num, den):
    """num / den run by run, each run against the other variant's run of the same
    repetition and alternation ("3.2" with "3.2"; a variant run once a repetition, "3",
    stands for each of that repetition's alternations). TCG slows whole processes at
    random, so two variants' medians over runs can each land in a different mode; two cheap
    paths alike in that noise are compared by the median of these ratios instead."""
    by_run = {b["_run"]: b["median_ns"] for b in den if b.get("median_ns")}
    out = []
    for b in num:
        d = by_run.get(b["_run"]) or by_run.get(b["_run"].split(".")[0])
        if d and b.get("median_ns"):
            out.append(b["median_ns"] / d)
    return out


def pct(ratio):
    return (ratio - 1) * 100


def summarise(runs, floors):
    rows = []
    syscall = med(b["median_ns"] for b in floors.get(("Syscall", 0), []))
    # An empty submission to the module: the part of the floor no direct write escapes.
    submit = med(b["median_ns"] for b in floors.get(("Submit", 0), []))
    for workload in WORKLOADS:
        sizes = sorted({s for (v, w, s) in runs if w == workload})
        for size in sizes:
            row = {"workload": workload, "bytes": size, "paths": {}}
            for v in VARIANTS:
                rs = runs.get((v, workload, size))
                if not rs:
                    continue
                entry = {"median_ns": med(b["median_ns"] for b in rs),
                         "p99_ns": med(b["p99_ns"] for b in rs),
                         "reps": len(rs)}
                if workload == "Bandwidth" and entry["median_ns"]:
                    entry["bytes_per_s"] = size * 1e9 / entry["median_ns"]
                    entry["writes_per_s"] = 1e9 / entry["median_ns"]
                    entry["depth"] = med(b.get("depth") for b in rs)
                shares = {p: med(b.get("share_" + p) for b in rs) for p in PATHS}
                if any(x is not None for x in shares.values()):
                    entry["share"] = shares
                row["paths"][v] = entry
            base = row["paths"].get("offload", {}).get("median_ns")
            for entry in row["paths"].values():
                if base and entry["median_ns"]:
                    entry["speedup_vs_offload"] = base / entry["median_ns"]
            ad = row["paths"].get("adaptive", {}).get("share")
            if ad:
                row["adaptive_chose"] = max(PATHS, key=lambda p: ad.get(p) or 0)
            # Adaptive against the best fixed path of this row: the "within 5 %".
            fixed = [v for v in PATHS if row["paths"].get(v, {}).get("median_ns")]
            a = row["paths"].get("adaptive", {}).get("median_ns")
            if a and fixed:
                best = min(fixed, key=lambda v: row["paths"][v]["median_ns"])
                row["adaptive_vs_best"] = a / row["paths"][best]["median_ns"]
                pairs = paired_ratios(runs.get(("adaptive", workload, size), []),
                                      runs.get((best, workload, size), []))
                if pairs:
                    row["adaptive_vs_best_paired"] = med(pairs)
                    row["adaptive_vs_best_pairs"] = len(pairs)
                    ci = median_ci(pairs)
                    if ci:
                        row["adaptive_vs_best_paired_ci"] = list(ci)
            # Against no shim at all (issue 54: no program slower than without the shim).
            pairs = paired_ratios(runs.get(("adaptive", workload, size), []),
                                  runs.get(("noshim", workload, size), []))
            if pairs:
                row["adaptive_vs_noshim_paired"] = med(pairs)
            copy = med(b["median_ns"] for b in floors.get(("Memcpy", size), []))
            if syscall is not None and copy is not None:
                row["direct_floor_ns"] = syscall + copy
                d = row["paths"].get("direct", {}).get("median_ns")
                if d:
                    row["direct_vs_floor"] = d / row["direct_floor_ns"]
                if submit is not None:
                    row["direct_entry_ns"] = submit + copy
                    if d:
                        row["direct_vs_entry"] = d / row["direct_entry_ns"]
            rows.append(row)
    return rows


def overhead(results):
    """Shim overhead in ib_write_lat (mode=offload): median t_typical per size, and the
    median of the per-repetition ratios (each pair ran back to back, so drift cancels)."""
    path = os.path.join(results, "write_lat.tsv")
    data = {}
    if os.path.exists(path):
        for line in open(path):
            parts = line.split()
            # perftest prints inf or nothing when a run failed: such a run has no figure.
            if len(parts) == 4 and math.isfinite(float(parts[3])):
                data[(int(parts[0]), int(parts[1]), parts[2])] = float(parts[3])
    out = []
    for size in sorted({s for (_, s, _) in data}):
        at = {v: {r: t for (r, s, vv), t in data.items() if s == size and vv == v}
              for v in ("noshim", "shim", "baseline")}

        def ratios(num, den):
            return [at[num][r] / at[den][r] for r in sorted(at[num]) if r in at[den]]

        shim_r = ratios("shim", "noshim")
        if not shim_r:
            continue
        o = {"bytes": size, "noshim_us": med(at["noshim"].values()),
             "shim_us": med(at["shim"].values()), "pairs": len(shim_r),
             "overhead_pct": pct(med(shim_r))}
        ci = median_ci(shim_r)
        if ci:
            o["overhead_ci_pct"] = [pct(ci[0]), pct(ci[1])]
        # A second shim in the same rotation (--baseline-shim): its own overhead, and this
        # shim against it, pair by pair.
        base_r, vs_r = ratios("baseline", "noshim"), ratios("shim", "baseline")
        if at["baseline"] and base_r and vs_r:
            o["baseline_us"] = med(at["baseline"].values())
            o["baseline_overhead_pct"] = pct(med(base_r))
            o["vs_baseline_pct"] = pct(med(vs_r))
            ci = median_ci(vs_r)
            if ci:
                o["vs_baseline_ci_pct"] = [pct(ci[0]), pct(ci[1])]
        out.append(o)
    return out


def perftest_bandwidth(results):
    """ib_write_bw per size and variant: median over repetitions of its average MB/s and
    Mwrites/s, and each variant's median per-repetition ratio to the bare NIC."""
    path = os.path.join(results, "write_bw.tsv")
    data = {}
    if os.path.exists(path):
        for line in open(path):
            parts = line.split()
            if len(parts) == 5 and math.isfinite(float(parts[3])) and math.isfinite(float(parts[4])):
                data[(int(parts[0]), int(parts[1]), parts[2])] = (float(parts[3]), float(parts[4]))
    out = []
    for size in sorted({s for (_, s, _) in data}):
        reps = sorted({r for (r, s, _) in data if s == size})
        row = {"bytes": size, "variants": {}}
        for v in PERFTEST_BW_VARIANTS:
            got = [data[(r, size, v)] for r in reps if (r, size, v) in data]
            if not got:
                continue
            entry = {"mb_per_s": med(g[0] for g in got), "mwrites_per_s": med(g[1] for g in got),
                     "reps": len(got)}
            ratios = [data[(r, size, v)][0] / data[(r, size, "noshim")][0] for r in reps
                      if (r, size, v) in data and (r, size, "noshim") in data and data[(r, size, "noshim")][0]]
            if ratios:
                entry["vs_noshim"] = med(ratios)
            row["variants"][v] = entry
        out.append(row)
    return out


UCX_VARIANTS = ["posix", "sysv", "cma", "rc_verbs", "shim"]


def ucx_latency(results):
    """ucx_perftest put_lat per size and variant (UCX's same-host transports, rc_verbs
    without the shim and under it in the default mode): the median over repetitions of
    its average latency, the range, and the shim's median per-repetition ratio to each."""
    path = os.path.join(results, "ucx_put_lat.tsv")
    data, layouts = {}, {}
    if os.path.exists(path):
        for line in open(path):
            parts = line.split()
            if len(parts) == 5 and parts[4] != "nan" and math.isfinite(float(parts[4])):
                data[(int(parts[0]), int(parts[1]), parts[2])] = float(parts[4])
                layouts[(int(parts[1]), parts[2])] = parts[3]
    out = []
    for size in sorted({s for (_, s, _) in data}):
        reps = sorted({r for (r, s, _) in data if s == size})
        row = {"bytes": size, "variants": {}}
        for v in UCX_VARIANTS:
            got = [data[(r, size, v)] for r in reps if (r, size, v) in data]
            if got:
                row["variants"][v] = {"median_us": med(got), "min_us": min(got), "max_us": max(got),
                                      "layout": layouts.get((size, v)), "reps": len(got)}
        for v in UCX_VARIANTS[:-1]:
            ratios = [data[(r, size, "shim")] / data[(r, size, v)] for r in reps
                      if (r, size, "shim") in data and (r, size, v) in data and data[(r, size, v)]]
            if ratios:
                row.setdefault("shim_vs", {})[v] = med(ratios)
        out.append(row)
    return out


def ucx_table(ucx):
    lines = ["\nucx_perftest put_lat, average one-way latency, median (min-max) over repetitions, us;"
             " shim = rc_verbs under the shim in the default mode"]
    lines.append(f"{'bytes':>8} " + " ".join(f"{v:>26}" for v in UCX_VARIANTS) + "  shim / posix, sysv, cma")
    for row in ucx:
        cells = []
        for v in UCX_VARIANTS:
            e = row["variants"].get(v)
            cells.append(f"{e['median_us']:.2f} ({e['min_us']:.2f}-{e['max_us']:.2f}) {e['layout']}"
                         if e else "-")
        vs = row.get("shim_vs", {})
        ratios = ", ".join(f"{vs[v]:.2f}x" if v in vs else "-" for v in ("posix", "sysv", "cma"))
        lines.append(f"{row['bytes']:>8} " + " ".join(f"{c:>26}" for c in cells) + "  " + ratios)
    return lines


def policy_costs(results):
    """Median ns per call of the policy's decide/observe per mode, from bench_policy, and
    the repetitions it is the median of (scripts/bench runs fewer for a quick look)."""
    path = os.path.join(results, "policy.json")
    out, reps = {}, None
    if os.path.exists(path):
        for b in json.load(open(path)).get("benchmarks", []):
            if b.get("aggregate_name") == "median":
                out[b["run_name"]] = b["real_time"]
                reps = b.get("repetitions", reps)
    return out, reps


def size_label(n):
    """8 -> "8 B", 4096 -> "4 KiB", 1048576 -> "1 MiB"; the plot's ticks are the sizes run."""
    for scale, unit in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def fmt_ns(v):
    if v is None:
        return "-"
    return f"{v / 1000:.1f}us" if v >= 10000 else f"{v:.0f}ns"


def fmt_ratio(v):
    return f"{v:.3f}x" if v else "-"


def fmt_rate(v, unit):
    if v is None:
        return "-"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:.3g}{prefix}{unit}"
    return f"{v:.3g}{unit}"


def bandwidth_table(sel):
    lines = ["\nBandwidth (depth 128, one completion per 100 writes): bytes/s and writes/s at the median"
             " time per write (speedup vs offload)"]
    lines.append(f"{'bytes':>8} " + " ".join(f"{v:>24}" for v in VARIANTS) +
                 "  adaptive chose  adaptive/best time per write (paired [95%])")
    for r in sel:
        cells = []
        for v in VARIANTS:
            e = r["paths"].get(v)
            if not e or not e.get("bytes_per_s"):
                cells.append(f"{'-':>24}")
                continue
            sp = e.get("speedup_vs_offload")
            text = fmt_rate(e["bytes_per_s"], "B/s") + " " + fmt_rate(e["writes_per_s"], "w/s")
            cells.append(f"{text + (f' ({sp:.2f}x)' if sp else ''):>24}")
        paired = r.get("adaptive_vs_best_paired")
        ci = r.get("adaptive_vs_best_paired_ci")
        ratio = f"{paired:.3f}x" if paired else "-"
        if ci:
            ratio += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
        lines.append(f"{r['bytes']:>8} " + " ".join(cells) + f"  {r.get('adaptive_chose', '-'):>14}  {ratio:>22}")
    return lines


def table(rows, shim_overhead, policy=None, perftest_bw=None, policy_reps=None, ucx=None):
    lines = []
    for workload in WORKLOADS:
        sel = [r for r in rows if r["workload"] == workload]
        if not sel:
            continue
        if workload == "Bandwidth":
            lines += bandwidth_table(sel)
            continue
        lines.append(f"\n{TITLES.get(workload, workload)}: median / p99 (speedup vs offload)")
        head = (f"{'bytes':>8} " + " ".join(f"{v:>24}" for v in VARIANTS) +
                "  adaptive chose  adaptive/best  (paired [95%])  direct/floor  direct/entry"
                "  adaptive/noshim (paired)")
        lines.append(head)
        for r in sel:
            cells = []
            for v in VARIANTS:
                e = r["paths"].get(v)
                if not e:
                    cells.append(f"{'-':>24}")
                    continue
                sp = e.get("speedup_vs_offload")
                cells.append(f"{fmt_ns(e['median_ns']) + '/' + fmt_ns(e['p99_ns']) + (f' ({sp:.2f}x)' if sp else ''):>24}")
            floor = r.get("direct_vs_floor")
            entry = r.get("direct_vs_entry")
            best = r.get("adaptive_vs_best")
            paired = r.get("adaptive_vs_best_paired")
            ci = r.get("adaptive_vs_best_paired_ci")
            paired_s = (f"{paired:.3f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")) if paired else "-"
            lines.append(f"{r['bytes']:>8} " + " ".join(cells) +
                         f"  {r.get('adaptive_chose', '-'):>14}  {f'{best:.3f}x' if best else '-':>13}"
                         f"  {paired_s:>15}"
                         f"  {f'{floor:.2f}x' if floor else '-':>12}  {f'{entry:.2f}x' if entry else '-':>12}"
                         f"  {fmt_ratio(r.get('adaptive_vs_noshim_paired')):>15}")
    if shim_overhead:
        lines.append("\nShim overhead in perftest ib_write_lat (mode=offload), median t_typical; overhead is the"
                     " median of the back-to-back pairs' ratios, [its 95% interval] where there are 6 pairs or more:")

        def ci(o, key):
            return f" [{o[key][0]:+.1f}, {o[key][1]:+.1f}]" if key in o else ""

        for o in shim_overhead:
            line = (f"{o['bytes']:>8} B: {o['noshim_us']:.2f} us without, {o['shim_us']:.2f} us with:"
                    f" {o['overhead_pct']:+.1f}%{ci(o, 'overhead_ci_pct')} ({o['pairs']} pairs)")
            if "baseline_us" in o:
                line += (f"; baseline shim {o['baseline_us']:.2f} us: {o['baseline_overhead_pct']:+.1f}%,"
                         f" this shim against it {o['vs_baseline_pct']:+.1f}%{ci(o, 'vs_baseline_ci_pct')}")
            lines.append(line)
    if perftest_bw:
        lines.append("\nperftest ib_write_bw (defaults: tx depth 128, cq-mod 100), median MB/s and Mwrites/s"
                     " (median ratio to no shim):")
        for row in perftest_bw:
            cells = []
            for v in PERFTEST_BW_VARIANTS:
                e = row["variants"].get(v)
                if e:
                    ratio = f" ({e['vs_noshim']:.2f}x)" if "vs_noshim" in e else ""
                    cells.append(f"{v} {e['mb_per_s']:.1f} MB/s {fmt_rate(e['mwrites_per_s'] * 1e6, 'w/s')}{ratio}")
            lines.append(f"{row['bytes']:>8} B: " + ", ".join(cells))
    if ucx:
        lines += ucx_table(ucx)
    if policy:
        lines.append(f"\nPolicy cost per call (host CPU, median of {policy_reps or '?'}):")
        for name, ns in sorted(policy.items()):
            lines.append(f"  {name:<32} {ns:6.1f} ns")
    return "\n".join(lines)


def plot(rows, results):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        print("bench_report: matplotlib missing, no plot", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.5))
    for ax, workload in zip(axes, ["PostToCompletion", "PingPong", "Bandwidth"]):
        sel = [r for r in rows if r["workload"] == workload]
        bandwidth = workload == "Bandwidth"
        for v in VARIANTS:
            if bandwidth:
                pts = [(r["bytes"], r["paths"][v]["bytes_per_s"] / 1e6) for r in sel
                       if r["paths"].get(v, {}).get("bytes_per_s")]
            else:
                pts = [(r["bytes"], r["paths"][v]["median_ns"] / 1000) for r in sel if v in r["paths"]]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=v)
        ax.set_xscale("log", base=2)
        # Ticks at the sizes run, however few: a quick run's three sizes read as such.
        ticks = sorted({r["bytes"] for r in sel})
        if ticks:
            ax.set_xticks(ticks)
            ax.set_xticklabels([size_label(t) for t in ticks])
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_yscale("log")
        ax.set_xlabel("write size")
        ax.set_ylabel("MB/s at the median time per write" if bandwidth else "median latency (us)")
        ax.set_title("RDMA WRITE bandwidth (depth 128)" if bandwidth else f"RDMA WRITE {workload}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(results, f"latency.{ext}"), dpi=110)


def main():
    results = sys.argv[1]
    runs, floors, context = load(results)
    rows = summarise(runs, floors)
    ovh = overhead(results)
    pbw = perftest_bandwidth(results)
    ucx = ucx_latency(results)
    if not rows and not ovh and not pbw and not ucx:
        print("bench_report: no benchmark results in", results, file=sys.stderr)
        return 1
    pol, pol_reps = policy_costs(results)
    with open(os.path.join(results, "summary.json"), "w") as f:
        json.dump({"context": context, "rows": rows, "shim_overhead": ovh, "perftest_bandwidth": pbw,
                   "ucx_put_lat": ucx, "policy_ns": pol}, f, indent=1)
    text = table(rows, ovh, pol, pbw, pol_reps, ucx)
    with open(os.path.join(results, "table.txt"), "w") as f:
        f.write(text + "\n")
    print(text)
    if rows:
        plot(rows, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
