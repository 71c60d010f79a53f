#!/usr/bin/env bash
# shim_remote, shim_remote_failures and shim_remote_three: the shim's remote path between two hosts (module on both): perftest with UNLOAD_PATH=remote, a parity program on the NIC and remote, every stream on the link valid; then failures; then from one host to two at once.
#
#   run.sh FLAVOUR KMOD [failures|three]     (ctest runs it, with UNLOAD_BUILD_DIR set)
# One two-host sandbox; the guests print their checks (prefixed "A| ", "B| "); this is the
# verdict of both, and of the sandbox's own (both modules unloaded, no kernel report).
# With `three` (three_guest.sh) three hosts, module on each: A's parity clients to B and
# to C at once, on the NIC and remote; nothing captured (--capture is for two hosts).
# Without `failures` (guest.sh) the link is captured: every connection on it, the
# programs' and the modules' channel, must be valid by scripts/wirecmp (ICRC, PSN
# continuity, message structure). With it (failures_guest.sh: reloads, kills, a cut link)
# nothing is captured: under those, rxe's own streams have gaps it retransmits.
# UNLOAD_WIRE_KEEP=DIR keeps the capture there.
set -uo pipefail
flavour=${1:?kernel flavour} kmod=${2:?module} part=${3:-}
src=$(cd "$(dirname "$0")/../../.." && pwd)
tmp=$(mktemp -d /tmp/unload-remote.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
[ -z "${UNLOAD_WIRE_KEEP:-}" ] || trap 'cp "$tmp/link.pcap" "$UNLOAD_WIRE_KEEP/" 2>/dev/null; rm -rf "$tmp"' EXIT
# shellcheck source=tests/support/check.sh
. "$src/tests/support/check.sh"
guest=$src/tests/shim/remote/guest.sh capture=(--capture "$tmp/link.pcap")
[ "$part" != failures ] || { guest=$src/tests/shim/remote/failures_guest.sh; capture=(); }
if [ "$part" = three ]; then
	# Three TCG guests on the host's two cores: a generous limit.
	"$src/scripts/sandbox" --kernel "$flavour" --hosts 3 --kmod "$kmod" --timeout 1400 -- \
		"$src/tests/shim/remote/three_guest.sh" :: "$src/tests/shim/remote/three_guest.sh" :: \
		"$src/tests/shim/remote/three_guest.sh"
else
	"$src/scripts/sandbox" --kernel "$flavour" --hosts 2 --kmod "$kmod" "${capture[@]}" \
		--timeout 900 -- "$guest" :: "$guest"
fi
rc=$?
[ "$rc" -ne 77 ] || skip "the guests cannot run the test (their skip: lines above say why)"
every="both hosts"
[ "$part" != three ] || every="all three hosts"
expect "$every: every check held" "$([ "$rc" -eq 0 ] && echo 1)" "sandbox exit $rc"

# Every connection checked on its own (scripts/wirecmp without @N).
if [ "$part" = failures ] || [ "$part" = three ]; then
	:
elif [ -s "$tmp/link.pcap" ]; then
	out=$("$src/scripts/wirecmp" "$tmp/link.pcap")
	r=$?
	n=$(echo "$out" | grep -c '^/')
	bad=$(echo "$out" | grep -c INVALID)
	echo "$out" | grep -B1 -A3 INVALID | sed 's/^/    /'
	expect "the wire: all $n connections valid (ICRC, PSN continuity, messages)" \
		"$([ "$r" -eq 0 ] && [ "$n" -gt 0 ] && [ "$bad" -eq 0 ] && echo 1)" "wirecmp exit $r, $bad invalid"
else
	fail "the wire: a capture of the link" "none written"
fi
echo "(shim_remote${part:+_$part}: ${SECONDS} s)"
finish
