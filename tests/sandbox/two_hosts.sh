#!/usr/bin/env bash
# scripts/sandbox --hosts 2: both guests up with rxe0 on the link, both statuses and logs back, a kernel warning in either fails the run, a fault while booting boots both again.
set -uo pipefail
flavour=${1:?kernel flavour}
sandbox=$(dirname "$0")/../../scripts/sandbox
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

show='rdma link show; ip -4 -br addr; echo "host $UNLOAD_HOST peer $UNLOAD_PEER_ADDR"'
out=$("$sandbox" --kernel "$flavour" --hosts 2 --logs "$logs" -- bash -c "$show; exit 0" :: bash -c "$show; exit 4" 2>&1)
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

"$sandbox" --kernel "$flavour" --hosts 2 -- true :: sh -c 'echo "WARNING: two-host self-test" >/dev/kmsg' >/dev/null 2>&1
rc=$?
[ "$rc" -eq 126 ] && ok "a kernel WARNING on B -> sandbox exit 126" || bad "WARNING on B -> sandbox exit $rc"
# B faulting while booting boots both again; the run passes.
out=$(UNLOAD_SANDBOX_SELFTEST=boot-fault "$sandbox" --kernel "$flavour" --hosts 2 -- true :: true 2>&1)
rc=$?
[ "$rc" -eq 0 ] && echo "$out" | grep -q 'booting again (attempt 2 of 3)' &&
	ok "B faults while booting -> both booted again, exit 0" ||
	{ bad "B faults while booting -> sandbox exit $rc"; echo "$out" | tail -n 10 | sed 's/^/  | /'; }
# A guest that panics powers its peer off instead of leaving it to wait for the timeout.
out=$("$sandbox" --kernel "$flavour" --hosts 2 --timeout 280 -- sleep 600 :: sh -c 'echo c >/proc/sysrq-trigger' 2>&1)
rc=$?
# (Not 124: A did not sleep into the timeout. The crash fails the run: 126 when the guest
# got its report onto the console, else 125, no status.)
[ "$rc" -eq 125 ] || [ "$rc" -eq 126 ] && ok "B crashes -> A powered off, the run fails with $rc" ||
	{ bad "B panics -> sandbox exit $rc"; echo "$out" | tail -n 5 | sed 's/^/  | /'; }
exit $fail
