#!/usr/bin/env bash
# shim_remote: the shim's remote path between two hosts (module on both): perftest with UNLOAD_PATH=remote, and a parity program run on the NIC and on the remote path.
#
#   run.sh FLAVOUR KMOD     (ctest runs it, with UNLOAD_BUILD_DIR set)
# One two-host sandbox; the guests print their checks (prefixed "A| ", "B| "); this is the
# verdict of both, and of the sandbox's own (both modules unloaded, no kernel report).
set -uo pipefail
flavour=${1:?kernel flavour} kmod=${2:?module}
src=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=tests/support/check.sh
. "$src/tests/support/check.sh"
guest=$src/tests/shim/remote/guest.sh
"$src/scripts/sandbox" --kernel "$flavour" --hosts 2 --kmod "$kmod" --timeout 900 -- "$guest" :: "$guest"
rc=$?
[ "$rc" -ne 77 ] || skip "the guests cannot run the test (their skip: lines above say why)"
expect "both hosts: every check held" "$([ "$rc" -eq 0 ] && echo 1)" "sandbox exit $rc"
echo "(shim_remote: ${SECONDS} s)"
finish
