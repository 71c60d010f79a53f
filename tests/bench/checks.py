"""The bench report tests' one result vocabulary: check() prints ok: or FAIL: per check,
finish() exits 1 if any failed."""
import sys

_fails = 0


def check(ok, what):
    global _fails
    print("%s: %s" % ("ok" if ok else "FAIL", what))
    _fails += not ok


def finish():
    sys.exit(1 if _fails else 0)
