#!/usr/bin/env bash
# scripts/sandbox --hosts 3: each host reaches the other two (ping, B and C through A's bridge), rxe0 active on its link, its address and peers in UNLOAD_*, every status reported.
#
#   three_hosts.sh FLAVOUR           (ctest; the host side)
#   three_hosts.sh FLAVOUR guest     (each guest's command)
#
# One boot of three guests, which only ping and print: cheap. The sandbox's --timeout is
# below the test's, so a hang ends with the sandbox's report, not ctest's kill.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/support/check.sh
. "$here/../support/check.sh"
flavour=${1:?kernel flavour}

if [ "${2:-}" = guest ]; then
	rdma link show
	ip -4 -br addr
	echo "host $UNLOAD_HOST peer $UNLOAD_PEER_ADDR peers $UNLOAD_PEER_ADDRS"
	# The others boot in parallel, and may come up a while after this host: a minute each.
	for a in $UNLOAD_PEER_ADDRS; do
		r=unreached
		for ((i = 0; i < 30; i++)); do
			busybox ping -c 1 -W 2 "$a" >/dev/null 2>&1 && { r=reached; break; }
		done
		echo "$r $a"
	done
	# Nobody powers off before every host has pinged it.
	: >"$UNLOAD_PAIR_DIR/$UNLOAD_HOST.done"
	for ((i = 0; i < 2000; i++)); do
		[ -e "$UNLOAD_PAIR_DIR/A.done" ] && [ -e "$UNLOAD_PAIR_DIR/B.done" ] && [ -e "$UNLOAD_PAIR_DIR/C.done" ] && break
		sleep 0.1
	done
	# A distinct status from C, which the run must report as its own.
	[ "$UNLOAD_HOST" != C ] || exit 5
	exit 0
fi

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
self=("$here/three_hosts.sh" "$flavour" guest)
out=$("$here/../../scripts/sandbox" --kernel "$flavour" --hosts 3 --timeout 400 --logs "$logs" -- \
	"${self[@]}" :: "${self[@]}" :: "${self[@]}" 2>&1)
rc=$?
while IFS= read -r l; do printf '  | %s\n' "$l"; done <<<"$out"
expect "A exit 0, B exit 0, C exit 5 -> sandbox exit 5" "$([ "$rc" -eq 5 ] && echo 1)" "exit $rc"
expect "every status reported" \
	"$(grep -q 'host A exit 0, host B exit 0, host C exit 5' <<<"$out" && echo 1)" "a status line for the three hosts"
for h in A:192.0.2.1:192.0.2.2:br0 B:192.0.2.2:192.0.2.1:eth0 C:192.0.2.3:192.0.2.1:eth0; do
	IFS=: read -r name me peer dev <<<"$h"
	log=$logs/$name.log
	sed -i 's/\r$//' "$log"	# the serial console's line ends
	peers=
	for a in 192.0.2.1 192.0.2.2 192.0.2.3; do [ "$a" = "$me" ] || peers="${peers:+$peers }$a"; done
	expect "$name: rxe0 active on $dev" "$(grep -q "rxe0/1 state ACTIVE .*netdev $dev" "$log" && echo 1)" \
		"rdma link show in $name's log"
	expect "$name: address $me, peer $peer, peers $peers" \
		"$(grep -q "$me/24" "$log" && grep -q "host $name peer $peer peers $peers\$" "$log" && echo 1)" \
		"ip addr and UNLOAD_* in $name's log"
	for a in $peers; do
		expect "$name reaches $a" "$(grep -q "^reached $a\$" "$log" && echo 1)" "ping in $name's log"
	done
done
echo "(three_hosts: ${SECONDS} s)"
finish
