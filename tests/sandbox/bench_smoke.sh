#!/usr/bin/env bash
# The bench suite runs end to end (one small size, few iterations): every path yields a latency, a baseline shim joins the overhead rotation, the report and plots are written.
set -uo pipefail
. "$(dirname "$0")/../support/check.sh"
src=${UNLOAD_SOURCE_DIR:?} build=${UNLOAD_BUILD_DIR:?}
out=$(mktemp -d)
# The shim under test stands in as its own baseline: the rotation and report are what's checked.
"$src/scripts/lib/guest/bench-sweep" --out "$out" --build "$build" --reps 1 --profile quick \
	--baseline-shim "$build/shim/libunload_shim.so" || { fail "bench-sweep runs every path" "exit $?"; finish; }
/usr/bin/python3 "$src/scripts/lib/python/bench_report.py" "$out" >"$out/report.txt" ||
	{ fail "bench_report writes the report" "exit $?"; finish; }
sed 's/^/  | /' "$out/report.txt"
/usr/bin/python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
s = json.load(open(os.path.join(out, "summary.json")))
fails = 0
def check(what, ok):
    global fails
    print(("ok: " if ok else "FAIL: ") + what)
    fails += not ok
for workload in ("PostToCompletion", "PingPong"):
    rows = [r for r in s["rows"] if r["workload"] == workload]
    check(f"{workload}: rows for 8 and 4096 bytes", sorted(r["bytes"] for r in rows) == [8, 4096])
    for r in rows:
        for v in ("noshim", "offload", "inline", "stage", "direct", "mapped", "adaptive"):
            if v == "inline" and r["bytes"] > 1024:
                continue
            e = r["paths"].get(v, {})
            check(f"{workload} {r['bytes']} B {v}: a positive latency", (e.get("median_ns") or 0) > 0)
        for v in ("direct", "mapped"):  # the module placed direct's; the engine mapped's
            sh = r["paths"].get(v, {}).get("share", {})
            check(f"{workload} {r['bytes']} B: {v} went {v} (share {sh.get(v)})", (sh.get(v) or 0) > 0.5)
check("shim overhead measured with ib_write_lat", len(s["shim_overhead"]) > 0)
check("the baseline shim measured beside it", all("vs_baseline_pct" in o for o in s["shim_overhead"]))
for f in ("latency.png", "latency.svg", "table.txt"):
    check(f"{f} written", os.path.getsize(os.path.join(out, f)) > 0)
sys.exit(1 if fails else 0)
PY
