#!/usr/bin/env bash
# wire_proof: the NIC path and each CPU path that serves a remote peer put the same RoCE v2 stream on the wire; adaptive with mode flips keeps it valid.
#
#   run_proof.sh FLAVOUR KMOD     (ctest runs it, with UNLOAD_BUILD_DIR set)
# Boots two hosts (module on A), captures the link, runs tests/wire/proof_guest.sh on
# both, then compares the captured connections with scripts/wirecmp here on the host.
set -uo pipefail
flavour=${1:?kernel flavour} kmod=${2:?module}
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/unload-wire.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# UNLOAD_WIRE_KEEP=DIR keeps the capture there.
[ -z "${UNLOAD_WIRE_KEEP:-}" ] || trap 'cp "$tmp/link.pcap" "$UNLOAD_WIRE_KEEP/" 2>/dev/null; rm -rf "$tmp"' EXIT
# shellcheck source=tests/support/check.sh
. "$src/tests/support/check.sh"

guest=$src/tests/wire/proof_guest.sh
wirecmp=$src/scripts/wirecmp
# The bare NIC's connection (@0) is the reference: when rxe itself retransmitted with other
# contents (a host under load delays its ACKs), the capture runs again once, as semantics.sh
# reruns a reference the NIC's timing decided; a difference of ours repeats.
for attempt in 1 2; do
	rm -f "$tmp/link.pcap"
	"$src/scripts/sandbox" --kernel "$flavour" --hosts 2 --kmod "$kmod" --kmod-on A \
		--capture "$tmp/link.pcap" --timeout 900 -- "$guest" :: "$guest"
	rc=$?
	[ "$rc" -eq 0 ] && [ -s "$tmp/link.pcap" ] && [ "$attempt" -eq 1 ] || break
	ref=$("$wirecmp" "$tmp/link.pcap@0")
	echo "$ref" | grep -q INVALID || break
	echo "$ref" | sed 's/^/    reference | /'
	echo "    reference: the bare NIC's own stream is invalid (its timing under load); again"
done
[ "$rc" -ne 77 ] || skip "the guests cannot run the test (their skip: lines above say why)"
expect "both hosts: every check held" "$([ "$rc" -eq 0 ] && echo 1)" "sandbox exit $rc"
[ -s "$tmp/link.pcap" ] || { fail "capture" "no capture of the link"; finish; }

names=(noshim offload inline stage adaptive)
for i in 1 2 3; do
	out=$("$wirecmp" "$tmp/link.pcap@0" "$tmp/link.pcap@$i")
	r=$?
	echo "$out" | sed 's/^/    /'
	if [ $r -eq 0 ] && echo "$out" | grep -q '^EQUAL'; then
		ok "${names[$i]}: the stream equals the bare NIC's, field by field"
	else
		fail "${names[$i]}: the stream equals the bare NIC's" "it differs (wirecmp exit $r)"
	fi
done
out=$("$wirecmp" "$tmp/link.pcap@4")
r=$?
echo "$out" | sed 's/^/    /'
expect "adaptive with mode flips: ICRC, PSN continuity and messages valid" "$([ $r -eq 0 ] && echo 1)" "wirecmp exit $r"
out=$("$wirecmp" "$tmp/link.pcap@0" "$tmp/link.pcap@4" | tail -n 1)
echo "    $out"
case $out in EQUAL*) ok "adaptive: the stream equals the bare NIC's too" ;; *) fail "adaptive: the stream equals the bare NIC's too" "it differs" ;; esac
n=$("$wirecmp" "$tmp/link.pcap" | grep -c '^/')
expect "five connections captured" "$([ "$n" -eq 5 ] && echo 1)" "$n captured"
finish
