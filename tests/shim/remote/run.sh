#!/usr/bin/env bash
# shim_remote: the shim's remote path between two hosts (module on both): perftest with UNLOAD_PATH=remote, a parity program run on the NIC and on the remote path, and every stream on the link valid.
#
#   run.sh FLAVOUR KMOD     (ctest runs it, with UNLOAD_BUILD_DIR set)
# One two-host sandbox; the guests print their checks (prefixed "A| ", "B| "); this is the
# verdict of both, and of the sandbox's own (both modules unloaded, no kernel report).
# The link is captured: every connection on it, the programs' and the modules' channel,
# must be valid by scripts/wirecmp (ICRC, PSN continuity, message structure).
# UNLOAD_WIRE_KEEP=DIR keeps the capture there.
set -uo pipefail
flavour=${1:?kernel flavour} kmod=${2:?module}
src=$(cd "$(dirname "$0")/../../.." && pwd)
tmp=$(mktemp -d /tmp/unload-remote.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
[ -z "${UNLOAD_WIRE_KEEP:-}" ] || trap 'cp "$tmp/link.pcap" "$UNLOAD_WIRE_KEEP/" 2>/dev/null; rm -rf "$tmp"' EXIT
# shellcheck source=tests/support/check.sh
. "$src/tests/support/check.sh"
guest=$src/tests/shim/remote/guest.sh
"$src/scripts/sandbox" --kernel "$flavour" --hosts 2 --kmod "$kmod" --capture "$tmp/link.pcap" \
	--timeout 900 -- "$guest" :: "$guest"
rc=$?
[ "$rc" -ne 77 ] || skip "the guests cannot run the test (their skip: lines above say why)"
expect "both hosts: every check held" "$([ "$rc" -eq 0 ] && echo 1)" "sandbox exit $rc"

# Every connection checked on its own (scripts/wirecmp without @N).
if [ -s "$tmp/link.pcap" ]; then
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
echo "(shim_remote: ${SECONDS} s)"
finish
