#!/bin/bash
# The map ioctl from an unprivileged user + mount namespace with /proc over-mounted
# (kmod_mapped proc_ns): a tmpfs, then, on a freshly loaded module, a FUSE server that
# never answers. Each runs first after a load: the module once learnt procfs's mem file
# at its first grant, from whoever made it.
# Usage: mapped_ns_test.sh <unload.ko> <kmod_mapped binary>
set -u
. "$(dirname "$0")/../support/check.sh"
KO=$1 BIN=$2
[ -e /dev/unload ] || skip "no /dev/unload (module not loaded)"
# run HOW: kmod_mapped proc_ns HOW, its status as one more check.
run() {
	echo "== proc_ns $1"
	"$BIN" proc_ns "$1"
	case $? in
	0) ok "proc_ns_$1" ;;
	77) skip_check "proc_ns_$1" "kmod_mapped proc_ns $1 cannot run here (its skip line above)" ;;
	*) fail "proc_ns_$1" "kmod_mapped proc_ns $1 failed (its lines above)" ;;
	esac
}
run tmpfs
rmmod unload && insmod "$KO" && chmod 0666 /dev/unload || fail reload "rmmod and insmod of $KO"
modprobe fuse 2>/dev/null
run fuse
finish
