# shellcheck shell=bash
# The remote guests' common start (guest.sh, failures_guest.sh): the two-host helpers, the
# parity program, the shim and this host's module, or a skip saying which is missing.
. "$(dirname "${BASH_SOURCE[0]}")/../../wire/lib.sh"
RP=$BIN/remote_parity
[ -x "$RP" ] || skip "no remote_parity at $RP"
[ -e "$SHIM" ] || skip "no shim at $SHIM"
[ -e /dev/unload ] || skip "no module on host $ME"
S=/sys/kernel/unload
