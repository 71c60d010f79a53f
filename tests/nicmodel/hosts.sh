#!/usr/bin/env bash
# nicmodel_hosts: scripts/bench --nic-model --hosts 2's guest half at its smallest, both hosts' rxe the NIC model (on): a row for each path and workload; remote writes all remote and untranslated by the target's NIC, NIC writes translated there; the paths interleaved, each block counted in its own mode.
#
#   hosts.sh KMOD NIC_MODEL     (ctest runs it, with UNLOAD_BUILD_DIR and UNLOAD_SOURCE_DIR set)
set -uo pipefail
kmod=${1:?module} model=${2:?NIC model}
src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/support/check.sh
. "$src/tests/support/check.sh"
guest=$src/tests/nicmodel/hosts_guest.sh
"$src/scripts/sandbox" --kernel 6.1 --hosts 2 --kmod "$kmod" --nic-model "$model" --timeout 500 \
	-- "$guest" :: "$guest"
rc=$?
[ "$rc" -ne 77 ] || skip "the guests cannot run the test (their skip: lines above say why)"
expect "both hosts: every check held" "$([ "$rc" -eq 0 ] && echo 1)" "sandbox exit $rc"
finish
