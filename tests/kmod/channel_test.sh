#!/usr/bin/env bash
# kmod_channel: the channel between two hosts' modules, probed both ways, past its credits, against a peer whose module is gone and back; and the remote writes it carries.
#
#   channel_test.sh FLAVOUR KMOD PROGRAM REMOTE     (ctest runs it, with UNLOAD_BUILD_DIR set)
# One two-host sandbox runs REMOTE (kmod_remote: writes placed by the other host's
# module) and then PROGRAM (kmod_channel, which ends by deleting A's device; or true: the
# remote writes alone); the guests
# print their checks (prefixed "A| ", "B| "); this is the
# verdict of both, and of the sandbox's own: rmmod of the module on both hosts at the end,
# no kernel WARNING, BUG or leak report on either.
set -uo pipefail
flavour=${1:?kernel flavour} kmod=${2:?module} prog=${3:?kmod_channel} remote=${4:?kmod_remote}
src=$(cd "$(dirname "$0")/../.." && pwd)
# Both programs whatever the first's verdict; the guest's status is the first failure's.
# shellcheck disable=SC2016
both='"$1"; a=$?; "$2" "$3"; b=$?; [ "$a" -ne 0 ] && [ "$a" -ne 77 ] && exit "$a"; exit "$b"'
# shellcheck source=tests/support/check.sh
. "$src/tests/support/check.sh"
"$src/scripts/sandbox" --kernel "$flavour" --hosts 2 --kmod "$kmod" --timeout 800 \
	-- bash -c "$both" _ "$remote" "$prog" "$kmod" :: bash -c "$both" _ "$remote" "$prog" "$kmod"
rc=$?
[ "$rc" -ne 77 ] || skip "the guests cannot run the test (their skip: lines above say why)"
expect "both hosts: every check held, both modules unloaded, no kernel report" \
	"$([ "$rc" -eq 0 ] && echo 1)" "sandbox exit $rc"
echo "(channel: ${SECONDS} s)"
finish
