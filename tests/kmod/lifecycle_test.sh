#!/bin/bash
# Lifecycle of unload.ko: own pin balance, kill -9 of either process mid-stream x100, rmmod refused while a session is open, reload x100 with sysfs and a session each time, a seeded fuzzer of ioctl/mmap/uring_cmd.
# Usage: lifecycle_test.sh <unload.ko> <kmod_lifecycle binary> [kill | rest]
# (kill: the kills alone, which ctest runs on two guest CPUs; rest: all but them; default all)
set -u
. "$(dirname "$0")/../support/check.sh"
KO=$1 BIN=$2 PART=${3:-all}
[ -e /dev/unload ] || skip "no /dev/unload (module not loaded)"

# Each run prints its own checks; its status is one more.
if [ "$PART" != rest ]; then
	check "kmod_lifecycle kill" "$BIN" kill "${UNLOAD_KILL_ROUNDS:-100}"
	[ "$PART" = kill ] && finish
fi
check "kmod_lifecycle pins" "$BIN" pins
check "kmod_lifecycle fuzz" "$BIN" fuzz "${UNLOAD_FUZZ_CALLS:-20000}" "${UNLOAD_FUZZ_SEED:-1}"

# rmmod is refused while a session is open, and works after.
exec 7</dev/unload
rmmod unload 2>/dev/null && r=0 || r=1
exec 7<&-
expect rmmod.refused_while_open $r "rmmod with an open session $([ $r = 1 ] && echo refused || echo succeeded)"
if [ $r = 0 ]; then insmod "$KO"; fi

# reload loop (sysfs read with builtins: under TCG an exec costs 50-150 ms)
n=${UNLOAD_RELOAD_ROUNDS:-100} bad=0 t0=$SECONDS mode= sessions=
for ((i = 0; i < n; i++)); do
	rmmod unload || { bad=$((bad + 1)); break; }
	insmod "$KO" || { bad=$((bad + 1)); break; }
	read -r mode </sys/kernel/unload/mode
	[ "$mode" = adaptive ] || bad=$((bad + 1))
	exec 7</dev/unload
	read -r sessions </sys/kernel/unload/stats/sessions
	[ "$sessions" = 1 ] || bad=$((bad + 1))
	exec 7<&-
done
chmod 0666 /dev/unload
expect reload.loop "$([ $bad = 0 ] && echo 1)" "$n reloads, $bad bad, $((SECONDS - t0))s"
finish
