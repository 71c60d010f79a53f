#!/usr/bin/env python3
"""scripts/lib/python/nic_model_report.py: a table per workload labelled as the NIC model's,
each cell the median over repetitions, the model's effect on the NIC path and adaptive
against the better path, also paired within each repetition (the median, and each repetition's
own under the table); a missing cell shown as such;
the remote path and the target's misses for two hosts; the ratio of a miss to a NIC write
heading the tables; no rows an error.

  nic_model_report_test.py SOURCE_DIR
"""

import os
import subprocess
import sys
import tempfile

script = os.path.join(sys.argv[1], "scripts", "lib", "python", "nic_model_report.py")
from checks import check, finish  # noqa: E402


def report(rows, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as f:
        f.write("".join("\t".join(str(x) for x in r) + "\n" for r in rows))
    try:
        p = subprocess.run([sys.executable, script, *args, f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    return p.returncode, p.stdout


rows = []
# Three repetitions; medians: offload off 20, on 30 (one slow run); direct 5 both; adaptive 6 on.
for rep, (off, on, ad) in enumerate([(20000, 30000, 6000), (21000, 29000, 5500), (19000, 45000, 7000)], 1):
    rows += [(rep, "off", 16, "offload", "RandomTarget", off, off * 3, "0.00"),
             (rep, "on", 16, "offload", "RandomTarget", on, on * 3, "0.00"),
             (rep, "off", 16, "direct", "RandomTarget", 5000, 9000, "1.00"),
             (rep, "on", 16, "direct", "RandomTarget", 5000, 9000, "1.00"),
             (rep, "on", 16, "adaptive", "RandomTarget", ad, 9000, "0.98")]
rows.append((1, "on", 1, "offload", "HotSet", 21000, 60000, "0.00"))
rc, out = report(rows)
lines = out.splitlines()
check(rc == 0, f"a table from the rows (exit {rc})")
check(sum(l.startswith("UNDER THE NIC MODEL") for l in lines) == 2, "one table per workload, each labelled as the model's")
row16 = next((l.split() for l in lines if l.split()[:1] == ["16"]), [])
# MiB, offload/direct/adaptive off, offload/direct/adaptive on, on/off, adaptive/best off
# (no adaptive run with the model off) and on, share, paired (1.2, 1.1 and 1.4 a repetition)
want = ["16", "20.0", "5.0", "-", "30.0", "5.0", "6.0", "1.50", "-", "1.20", "0.98", "1.20"]
check(row16 == want, f"the 16 MiB row is the medians and their ratios: {row16}")
row1 = next((l.split() for l in lines if l.split()[:1] == ["1"]), [])
check(row1[-5:] == ["-", "-", "-", "-", "-"], f"a footprint missing a cell has no ratios: {row1}")

# Two hosts: remote the CPU path, the target's misses a write in a ninth column, the mean
# in a tenth (here the NIC's mean 1000 us, remote's 650, adaptive's 715).
hosts = []
for m, (nic, rem, ad, miss) in {"off": (200000, 600000, 210000, "0.00"), "on": (900000, 600000, 610000, "0.93")}.items():
    hosts += [(1, m, 64, "offload", "RandomTarget", nic, nic * 2, "0.00", miss, 1000000),
              (1, m, 64, "remote", "RandomTarget", rem, rem * 2, "1.00", "0.00", 650000),
              (1, m, 64, "adaptive", "RandomTarget", ad, ad * 2, "0.97", "0.03", 715000)]
rc, out = report(hosts, "--cpu", "remote")
lines = out.splitlines()
head = next((l for l in lines if "MiB" in l), "")
check(rc == 0 and "remote on" in head and "NIC misses/write on" in head and "means" in head,
      f"two hosts: remote's columns ({head})")
row64 = next((l.split() for l in lines if l.split()[:1] == ["64"]), [])
want = ["64", "200.0", "600.0", "210.0", "900.0", "600.0", "610.0", "4.50", "1.05", "1.02", "0.97", "0.93", "1.10",
        "1.02"]
check(row64 == want, f"two hosts: adaptive against the better path each way, the target's misses: {row64}")

# Paired: each repetition's slow spell shared by its paths (interleaved runs). Adaptive is
# 1.1x remote in two of three repetitions and 0.4x in the third; across repetitions its
# median (8 ms) is 0.80 of remote's (10 ms), within each the median ratio is 1.10.
spells = []
for rep, (rem, ad) in enumerate([(5000000, 5500000), (10000000, 11000000), (20000000, 8000000)], 1):
    spells += [(rep, "on", 4, "offload", "RandomTarget", 90000000, 1, "0.00", "0.00", 1),
               (rep, "on", 4, "remote", "RandomTarget", rem, 1, "1.00", "0.00", 1),
               (rep, "on", 4, "adaptive", "RandomTarget", ad, 1, "0.90", "0.00", 1)]
rc, out = report(spells, "--cpu", "remote")
row4 = next((l.split() for l in out.splitlines() if l.split()[:1] == ["4"]), [])
check(row4[9:10] == ["0.80"] and row4[-1:] == ["1.10"],
      f"paired: the median of each repetition's own ratio, not the ratio of medians: {row4}")
each = next((l for l in out.splitlines() if l.startswith("adaptive/best on, paired, each repetition")), "")
check(each.endswith(": 4 MiB 1.10 1.10 0.40"), f"paired: every repetition's own ratio under the table: {each!r}")
# The ratio measured at: a miss over the NIC path's median with the model off (200 us).
rc, out = report(hosts, "--cpu", "remote", "--miss-ns", "200000")
first = out.splitlines()[0] if out else ""
check(rc == 0 and first.startswith("a miss at the target's NIC: 200.0 us, 1.00x a NIC write here") and
      "200.0 us: RandomTarget, 64 MiB" in first, f"the ratio heads the tables: {first!r}")
rc, out = report(spells, "--miss-ns", "2000000", "--cpu", "remote")
first = out.splitlines()[0] if out else ""
check(rc == 0 and "2000.0 us (no NIC run with the model off" in first, f"no model-off NIC run: the miss alone: {first!r}")
rc, out = report(spells, "--miss-ns", "300000", "--write-ns", "250000", "--cpu", "remote")
first = out.splitlines()[0] if out else ""
check(rc == 0 and first.startswith("a miss at the target's NIC: 300.0 us, 1.20x a NIC write here (the write it was"
                                   " calibrated by, 250.0 us"), f"a calibrated miss: its write's ratio: {first!r}")
rc, _ = report(hosts, "--write-ns", "250000")
check(rc != 0, f"a write without a miss: an error (exit {rc})")
rc, _ = report(hosts, "--miss-ns", "2ms")
check(rc != 0, f"a miss that is not a number of ns: an error (exit {rc})")
rc, _ = report(hosts, "--cpu", "mapped")
check(rc != 0, f"an unknown CPU path: an error (exit {rc})")
rc, out = report([])
check(rc == 1, f"no rows: an error (exit {rc})")
finish()
