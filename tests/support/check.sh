# The test scripts' result vocabulary (sourced), the same as the C++ programs'
# (tests/support/check.hpp) and the one scripts/test parses:
#
#   ok: NAME[ — DETAIL]        a check that held
#   FAIL: NAME: REASON         a check that did not (the script then exits 1)
#   skip: NAME: REASON         a check that could not run here, and why (never a pass)
#
# Exit codes, for scripts and programs alike: 0 every check held, 1 a check failed,
# 2 set-up failed (die), 3 a watchdog fired (a hang), 77 the whole test cannot run here
# (skip, one "skip:" line with the reason).
UNLOAD_CHECK_FAILS=0

ok() { local name=$1; shift; echo "ok: $name${*:+ — $*}"; }
fail() { local name=$1; shift; echo "FAIL: $name: ${*:-failed}"; UNLOAD_CHECK_FAILS=$((UNLOAD_CHECK_FAILS + 1)); }
skip_check() { local name=$1; shift; echo "skip: $name: $*"; }

# check NAME COMMAND...: ok when COMMAND succeeds, FAIL (with its status) otherwise.
check() {
	local name=$1 rc=0; shift
	"$@" || rc=$?
	if [ "$rc" -eq 0 ]; then ok "$name"; else fail "$name" "exit $rc"; fi
}

# expect NAME COND DETAIL: ok when COND is 1 (the form a computed verdict takes).
expect() { if [ "$2" = 1 ]; then ok "$1" "${3:-}"; else fail "$1" "${3:-}"; fi; }

die() { echo "setup: $*" >&2; exit 2; }
skip() { echo "skip: $*"; exit 77; }

# finish: the script's exit status from its checks.
finish() { [ "$UNLOAD_CHECK_FAILS" -eq 0 ] || exit 1; exit 0; }
