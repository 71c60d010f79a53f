#!/usr/bin/env bash
# The sandbox boots the given kernel, shows an rxe device, returns the guest's status, retries a boot fault.
set -uo pipefail
flavour=${1:?kernel flavour}
sandbox=$(dirname "$0")/../../scripts/sandbox
fail=0

out=$("$sandbox" --kernel "$flavour" -- sh -c 'ibv_devinfo; uname -r; exit 3' 2>&1)
rc=$?
echo "$out" | sed 's/^/  | /'
if [ "$rc" -eq 3 ]; then echo "ok: guest exit 3 -> sandbox exit 3"; else echo "FAIL: guest exit 3 -> sandbox exit $rc"; fail=1; fi
if echo "$out" | grep -q 'hca_id:.*rxe0'; then echo "ok: ibv_devinfo shows rxe0"; else echo "FAIL: no rxe device"; fail=1; fi
if echo "$out" | grep -q "^$flavour\."; then echo "ok: kernel $flavour booted"; else echo "FAIL: not kernel $flavour"; fail=1; fi

out=$("$sandbox" --kernel "$flavour" -- true 2>&1)
rc=$?
if [ "$rc" -eq 0 ]; then echo "ok: guest exit 0 -> sandbox exit 0"; else echo "FAIL: guest exit 0 -> sandbox exit $rc"; echo "$out" | tail -n 30 | sed 's/^/  | /'; fail=1; fi

# A kernel warning in the guest fails the run even when the command succeeds.
"$sandbox" --kernel "$flavour" -- sh -c 'echo "WARNING: sandbox self-test" >/dev/kmsg' >/dev/null 2>&1
rc=$?
if [ "$rc" -eq 126 ]; then echo "ok: a guest kernel WARNING -> sandbox exit 126"; else echo "FAIL: guest kernel WARNING -> sandbox exit $rc"; fail=1; fi

# A fault while booting, before the module or the command, boots again; the run passes.
out=$(UNLOAD_SANDBOX_SELFTEST=boot-fault "$sandbox" --kernel "$flavour" -- sh -c 'echo ran' 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && echo "$out" | grep -q 'booting again (attempt 2 of 3)' && [ "$(echo "$out" | grep -c '^ran')" -eq 1 ]; then
	echo "ok: a fault while booting -> booted again, the command ran once, exit 0"
else
	echo "FAIL: a fault while booting -> sandbox exit $rc"; echo "$out" | tail -n 10 | sed 's/^/  | /'; fail=1
fi
exit $fail
