#!/usr/bin/env python3
"""The shim's instructions a write, from scripts/lib/guest/bench-count's callgrind dumps.

    count_report.py DIR [--check RECORDED] [--tolerance PCT] [--record RECORDED]

Each DIR/count/ROW/K/ (repetition K) holds bench_write_count's three dumps (post, poll, empty: found by
the client request that made them) and its counts. In each dump, the shim's instructions
are everything collected but the provider's (each call from outside the provider into
libibverbs or a provider library, with all it called) and the program's own few around
the calls. Per row:
    post     the shim's instructions in the post pass / writes
    poll     the poll pass's, less its empty polls at the empty pass's rate, / writes
    empty    the shim's instructions in one poll of a quiet CQ
    total    post + poll: what the shim adds to a write and its completion
Where a repetition also holds `kernel` (bench_write_count --kernel: one pass run without
valgrind), a second table gives what a write cost outside the process: the system calls
it entered, its context switches and the packets the device sent, per write.
A row's figures are those of its repetition with the least total (the default mode's
counts move with what its policy measured: more writes sampled cost more), and its
spread is the greatest total over the least.
Writes DIR/count.tsv and DIR/count.txt and prints the table, with each row's goal (issue 55's
budgets: RECORDED's "goal"; a row at 1024 QPs or 16 processes, within 10 % of its row at one
QP) and whether it is met, by the total as printed (offload's 40.04 is 40: the batch to the
module's counters every 32 writes is its fraction). With --check, each row's total is held against RECORDED's
figure for it ("recorded"); the exit status is 1 when one rose more than PCT per cent
(default 15; RECORDED's "tolerance_pct" may set a row's own) or a recorded row is missing;
RECORDED's "recorded_poll" holds some rows' poll alone the same way (a cost the total's
tolerance would hide: the poll of a completion no tag names).
--record writes the totals as RECORDED, keeping the rest of the file --check read.
Offload's and mapped's counts are the same every run, so a rise is the code's; the default
mode's move with what its policy measured, which a loaded host changes: hence their own
tolerances.
"""
import json
import os
import re
import sys

PROVIDER = re.compile(r"(^|/)(libibverbs\.so[^/]*|libibverbs/[^/]+\.so[^/]*|lib\w+-rdmav\d+\.so[^/]*)$")


class Dump:
    """One callgrind dump: what it collected in all, the provider's part, the program's part."""

    def __init__(self, path, program):
        self.trigger = ""
        self.total = 0
        self.provider = 0
        self.program = 0
        names = {}
        ob = cob = ""
        in_call = False
        with open(path) as f:
            for line in f:
                line = line.rstrip("\n")
                if not line:
                    continue
                c = line[0]
                if c.isdigit() or c in "+-*":
                    parts = line.split()
                    cost = int(parts[1]) if len(parts) > 1 else 0
                    if in_call:
                        caller = ob
                        callee = cob if cob else ob
                        if PROVIDER.search(callee) and not PROVIDER.search(caller):
                            self.provider += cost
                        in_call = False
                        cob = ""
                    elif os.path.basename(ob) == program:
                        self.program += cost
                    continue
                key, _, value = line.partition("=")
                if key in ("ob", "cob"):
                    name = self._name(names, value)
                    if key == "ob":
                        ob = name
                    else:
                        cob = name
                elif key == "fn":
                    cob = ""
                elif key == "calls":
                    in_call = True
                elif line.startswith("desc: Trigger:"):
                    self.trigger = line.split(":", 2)[2].strip()
                elif line.startswith("summary:") or line.startswith("totals:"):
                    self.total = int(line.split(":", 1)[1].split()[0])

    @staticmethod
    def _name(table, value):
        m = re.match(r"\((\d+)\)(?: (.*))?$", value.strip())
        if not m:
            return value.strip()
        if m.group(2) is not None:
            table[m.group(1)] = m.group(2)
        return table.get(m.group(1), "")

    @property
    def shim(self):
        return self.total - self.provider - self.program


def read_counts(path):
    counts = {}
    for line in open(path):
        k, _, v = line.strip().partition(" ")
        counts[k] = int(v) if v.isdigit() else v
    return counts


def row_figures(d):
    """{post, poll, empty, total, writes} for one row's folder, or None when incomplete."""
    counts_path = os.path.join(d, "counts")
    if not os.path.exists(counts_path):
        return None
    counts = read_counts(counts_path)
    dumps = {}
    for name in os.listdir(d):
        if not name.startswith("cg.out"):
            continue
        dump = Dump(os.path.join(d, name), "bench_write_count")
        for label in ("post", "poll", "empty"):
            if dump.trigger.endswith(label):
                dumps[label] = dump
    if set(dumps) != {"post", "poll", "empty"} or not counts.get("writes"):
        return None
    w = counts["writes"]
    empty = dumps["empty"].shim / max(1, counts["empty_calls"])
    poll = (dumps["poll"].shim - counts["poll_empty"] * empty) / w
    post = dumps["post"].shim / w
    fig = {"post": post, "poll": poll, "empty": empty, "total": post + poll, "writes": w,
           "empty_polls": counts["poll_empty"]}
    fig.update(kernel_figures(os.path.join(d, "kernel")))
    return fig


KERNEL = (("syscalls", "kernel_syscalls"), ("switches", "kernel_switches"), ("packets", "kernel_packets"))


def kernel_figures(path):
    """What a write cost outside the process (bench_write_count --kernel), per write: the
    system calls, context switches and packets sent that the file holds."""
    if not os.path.exists(path):
        return {}
    counts = read_counts(path)
    w = counts.get("writes")
    if not isinstance(w, int) or w <= 0:
        return {}
    return {name: counts[key] / w for name, key in KERNEL if isinstance(counts.get(key), int)}


def goal_of(row, rows, goals):
    """A row's goal: its own, or for ROW.qN and ROW.pN within 10 % of ROW's count."""
    if row in goals:
        return float(goals[row])
    base = row.split(".")[0]
    if base != row and base in rows:
        return rows[base]["total"] * 1.10
    return None


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    root = argv[1]
    check = record = None
    tolerance = 15.0
    i = 2
    while i < len(argv):
        if argv[i] == "--check" and i + 1 < len(argv):
            check = argv[i + 1]
        elif argv[i] == "--record" and i + 1 < len(argv):
            record = argv[i + 1]
        elif argv[i] == "--tolerance" and i + 1 < len(argv):
            tolerance = float(argv[i + 1])
        else:
            print("count_report: unknown argument %s" % argv[i])
            return 2
        i += 2
    base = os.path.join(root, "count")
    rows = {}
    for row in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        reps = []
        for rep in sorted(os.listdir(os.path.join(base, row))):
            d = os.path.join(base, row, rep)
            fig = row_figures(d) if os.path.isdir(d) else None
            if fig:
                reps.append(fig)
        if reps:
            least = min(reps, key=lambda f: f["total"])
            top = max(f["total"] for f in reps)
            least["spread"] = top / least["total"] if least["total"] else 1.0
            least["reps"] = len(reps)
            rows[row] = least
    if not rows:
        print("count_report: no rows in %s" % base)
        return 1
    recorded, goals, tolerances, doc = {}, {}, {}, {}
    if check:
        doc = json.load(open(check))
        recorded, goals = doc.get("recorded", {}), doc.get("goal", {})
        tolerances = doc.get("tolerance_pct", {})
    lines = ["%-16s %8s %8s %8s %8s %7s %9s %8s" % ("row", "post", "poll", "empty", "total", "spread",
                                                      "recorded", "goal")]
    for row, f in rows.items():
        goal = goal_of(row, rows, goals)
        lines.append("%-16s %8.0f %8.0f %8.0f %8.0f %7.2f %9s %8s%s" % (
            row, f["post"], f["poll"], f["empty"], f["total"], f["spread"], recorded.get(row, "-"),
            "-" if goal is None else "%.0f" % goal,
            "" if goal is None else ("  met" if round(f["total"]) <= goal else "  over")))
    if any(name in f for f in rows.values() for name, _ in KERNEL):
        lines.append("")
        lines.append("outside the process, a write (its post and busy-poll, one pass without valgrind):")
        lines.append("%-16s %9s %9s %9s" % ("row", "syscalls", "switches", "packets"))
        for row, f in rows.items():
            lines.append("%-16s %9s %9s %9s" % ((row,) + tuple(
                "%.2f" % f[name] if name in f else "-" for name, _ in KERNEL)))
    with open(os.path.join(root, "count.tsv"), "w") as t:
        t.write("row\tpost\tpoll\tempty\ttotal\twrites\tempty_polls\treps\tspread\n")
        for row, f in rows.items():
            t.write("%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t%.3f\n" % (
                row, f["post"], f["poll"], f["empty"], f["total"], f["writes"], f["empty_polls"],
                f["reps"], f["spread"]))
    status = 0
    if check:
        lines.append("")
        lines.append("against the recorded figures (a rise over %.0f %% fails, or over a row's own"
                     " tolerance):" % tolerance)
        held = [(row, "total", was) for row, was in sorted(recorded.items())]
        held += [(row, "poll", was) for row, was in sorted(doc.get("recorded_poll", {}).items())]
        for row, part, was in held:
            name = row if part == "total" else row + " poll"
            now = rows.get(row)
            if now is None:
                lines.append("FAIL: %s: not counted" % name)
                status = 1
                continue
            pct = float(tolerances.get(row, tolerance))
            limit = was * (1 + pct / 100) + 5  # +5: a row near zero may move by a few
            verdict = "ok" if now[part] <= limit else "FAIL"
            if verdict == "FAIL":
                status = 1
            lines.append("%s: %s: %.0f, recorded %.0f (%+.1f %%, limit %+.0f %%)" % (
                verdict, name, now[part], was, 100.0 * (now[part] - was) / was if was else 0.0, pct))
    text = "\n".join(lines) + "\n"
    open(os.path.join(root, "count.txt"), "w").write(text)
    sys.stdout.write(text)
    if record:
        polls = {row: round(rows[row]["poll"]) for row in doc.get("recorded_poll", {}) if row in rows}
        doc = dict(doc, recorded={row: round(f["total"]) for row, f in rows.items()}, goal=goals,
                   tolerance_pct=tolerances)
        if polls:
            doc["recorded_poll"] = polls
        with open(record, "w") as r:
            json.dump(doc, r, indent=1, sort_keys=True)
            r.write("\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
