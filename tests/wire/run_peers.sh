#!/usr/bin/env bash
# wire_peers: unmodified peers without unload (no shim, no module on host B) against host A under the shim in every mode.
#
#   run_peers.sh FLAVOUR KMOD     (ctest runs it, with UNLOAD_BUILD_DIR set)
# The guests print their checks (prefixed "A| ", "B| "); this is the verdict of both.
set -uo pipefail
flavour=${1:?kernel flavour} kmod=${2:?module}
src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/support/check.sh
. "$src/tests/support/check.sh"
guest=$src/tests/wire/peers_guest.sh
"$src/scripts/sandbox" --kernel "$flavour" --hosts 2 --kmod "$kmod" --kmod-on A \
	--timeout 1200 -- "$guest" :: "$guest"
rc=$?
[ "$rc" -ne 77 ] || skip "the guests cannot run the test (their skip: lines above say why)"
expect "both hosts: every check held" "$([ "$rc" -eq 0 ] && echo 1)" "sandbox exit $rc"
finish
