#!/usr/bin/env bash
# scripts/sandbox --hosts 2, one behaviour per case: the link and both statuses, a warning on either host, a boot fault, a panic.
#
#   two_hosts.sh FLAVOUR link|warning|boot_fault|panic
#
# Each case is its own ctest test: four two-guest boots in one test left too little of
# its time limit for a machine busy with other sandbox tests. Every sandbox run here has
# a --timeout below the test's, so a hang ends with the sandbox's report, not ctest's kill.
set -uo pipefail
flavour=${1:?kernel flavour}
case=${2:?case: link, warning, boot_fault or panic}
sandbox=$(dirname "$0")/../../scripts/sandbox
limit=200
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
pair() { "$sandbox" --kernel "$flavour" --hosts 2 --timeout "$limit" "$@"; }

case $case in
link)
	logs=$(mktemp -d)
	trap 'rm -rf "$logs"' EXIT
	show='rdma link show; ip -4 -br addr; echo "host $UNLOAD_HOST peer $UNLOAD_PEER_ADDR"'
	out=$(pair --logs "$logs" -- bash -c "$show; exit 0" :: bash -c "$show; exit 4" 2>&1)
	rc=$?
	echo "$out" | sed 's/^/  | /'
	[ "$rc" -eq 4 ] && ok "A exit 0, B exit 4 -> sandbox exit 4" || bad "A 0, B 4 -> sandbox exit $rc"
	echo "$out" | grep -q 'host A exit 0, host B exit 4' && ok "both statuses reported" || bad "no status line"
	for h in A:192.0.2.1:192.0.2.2 B:192.0.2.2:192.0.2.1; do
		IFS=: read -r name me peer <<<"$h"
		grep -q "rxe0.*ACTIVE" "$logs/$name.log" && ok "$name: rxe0 active on the link" || bad "$name: no active rxe0"
		grep -q "$me/24" "$logs/$name.log" && grep -q "host $name peer $peer" "$logs/$name.log" &&
			ok "$name: $me, peer $peer" || bad "$name: addresses"
	done
	;;
warning)
	for h in A B; do
		warn='echo "WARNING: two-host self-test" >/dev/kmsg'
		if [ "$h" = A ]; then args=(sh -c "$warn" :: true); else args=(true :: sh -c "$warn"); fi
		out=$(pair -- "${args[@]}" 2>&1)
		rc=$?
		[ "$rc" -eq 126 ] && ok "a kernel WARNING on $h -> sandbox exit 126" ||
			{ bad "WARNING on $h -> sandbox exit $rc"; echo "$out" | tail -n 10 | sed 's/^/  | /'; }
	done
	;;
boot_fault)
	# B faulting while booting boots both again; the run passes.
	out=$(UNLOAD_SANDBOX_SELFTEST=boot-fault pair -- true :: true 2>&1)
	rc=$?
	[ "$rc" -eq 0 ] && echo "$out" | grep -q 'booting again (attempt 2 of 3)' &&
		ok "B faults while booting -> both booted again, exit 0" ||
		{ bad "B faults while booting -> sandbox exit $rc"; echo "$out" | tail -n 10 | sed 's/^/  | /'; }
	;;
panic)
	# A guest that panics powers its peer off instead of leaving it to wait for the timeout:
	# not 124, A did not sleep into it. The crash fails the run: 126 when the guest got its
	# report onto the console, else 125, no status.
	out=$(pair -- sleep 600 :: sh -c 'echo c >/proc/sysrq-trigger' 2>&1)
	rc=$?
	{ [ "$rc" -eq 125 ] || [ "$rc" -eq 126 ]; } && ok "B crashes -> A powered off, the run fails with $rc" ||
		{ bad "B panics -> sandbox exit $rc"; echo "$out" | tail -n 10 | sed 's/^/  | /'; }
	;;
*)
	echo "two_hosts.sh: unknown case '$case'" >&2
	exit 2
	;;
esac
echo "($case: ${SECONDS} s)"
exit $fail
