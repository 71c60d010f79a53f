#!/usr/bin/env bash
# The sandbox boots the given kernel, shows an rxe device, returns the guest's status; on the default kernel it also fails a run on a kernel warning and retries a boot fault, a stopped CPU and a stopped guest.
#
#   boot_rxe_status.sh FLAVOUR [default]
#
# The warning, the boot fault, the stopped CPU and the silent guest are the sandbox script's own logic, the same whatever the
# kernel: one kernel checks them (each a boot of about half a minute under TCG).
set -uo pipefail
. "$(dirname "$0")/../support/check.sh"
flavour=${1:?kernel flavour} default=${2:-}
# Each run bounded well inside ctest's limit, so a hang ends with the sandbox's report.
sandbox() { "$(dirname "$0")/../../scripts/sandbox" --timeout 150 "$@"; }

out=$(sandbox --kernel "$flavour" -- sh -c 'ibv_devinfo; uname -r; exit 3' 2>&1)
rc=$?
# The guest's console may end a line "\n\r": its carriage return then starts the next one.
out=${out//$'\r'/}
echo "$out" | sed 's/^/  | /'
expect "guest exit 3 -> sandbox exit 3" "$([ "$rc" -eq 3 ] && echo 1)" "sandbox exit $rc"
# Here-strings, not `echo | grep -q`: under pipefail grep's early exit can fail the echo.
expect "ibv_devinfo shows rxe0" "$(grep -q 'hca_id:.*rxe0' <<<"$out" && echo 1)"
expect "kernel $flavour booted" "$(grep -q "^${flavour//./\\.}\." <<<"$out" && echo 1)" \
	"uname -r: $(grep -m1 -E '^[0-9]+\.[0-9]+\.' <<<"$out")"

[ "$default" = default ] || finish

# A kernel warning in the guest fails the run even when the command succeeds.
sandbox --kernel "$flavour" -- sh -c 'echo "WARNING: sandbox self-test" >/dev/kmsg' >/dev/null 2>&1
rc=$?
expect "a guest kernel WARNING -> sandbox exit 126" "$([ "$rc" -eq 126 ] && echo 1)" "sandbox exit $rc"

# A fault while booting, before the module or the command, boots again; the run passes.
out=$(UNLOAD_SANDBOX_SELFTEST=boot-fault sandbox --kernel "$flavour" -- sh -c 'echo ran' 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && echo "$out" | grep -q 'booting again (attempt 2 of 3)' && [ "$(echo "$out" | grep -c '^ran')" -eq 1 ]; then
	ok "a fault while booting -> booted again, the command ran once, exit 0"
else
	fail "a fault while booting -> booted again, the command ran once, exit 0" "sandbox exit $rc"
	echo "$out" | tail -n 10 | sed 's/^/    | /'
fi

# A guest CPU the emulator stopped, once our part has started: the sandbox sees it on the
# console, powers the guest off and boots it again; the command runs once, in the second.
out=$(UNLOAD_SANDBOX_SELFTEST=vcpu-stall sandbox --kernel "$flavour" -- sh -c 'echo ran' 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && grep -q 'a guest CPU stopped, the emulator.s fault: booting it again (attempt 2 of 3)' <<<"$out" &&
	[ "$(grep -c '^ran' <<<"$out")" -eq 1 ]; then
	ok "a stopped guest CPU -> booted again, the command ran once, exit 0"
else
	fail "a stopped guest CPU -> booted again, the command ran once, exit 0" "sandbox exit $rc"
	echo "$out" | tail -n 10 | sed 's/^/    | /'
fi

# A guest that gives no sign of life once our part has started (every CPU stopped): the
# sandbox powers it off once it has been silent long enough and boots it again.
out=$(UNLOAD_SANDBOX_SELFTEST=guest-silent UNLOAD_SANDBOX_SILENT=20 sandbox --kernel "$flavour" -- sh -c 'echo ran' 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && grep -q 'the guest gave no sign of life for [0-9]* s' <<<"$out" &&
	grep -q 'the guest stopped, the emulator.s fault: booting it again (attempt 2 of 3)' <<<"$out" &&
	[ "$(grep -c '^ran' <<<"$out")" -eq 1 ]; then
	ok "a silent guest -> booted again, the command ran once, exit 0"
else
	fail "a silent guest -> booted again, the command ran once, exit 0" "sandbox exit $rc"
	echo "$out" | tail -n 10 | sed 's/^/    | /'
fi
finish
