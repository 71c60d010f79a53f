#!/bin/bash
# Host B's side of the reload step: a perftest server, and this host's module removed and loaded again twice while it serves.
#
#   reload_server.sh SECONDS_BEFORE_EACH CMD...
# The server runs without the shim, so nothing here holds /dev/unload and rmmod may go.
# Exits with the server's status, or 3 when a reload failed.
wait_s=${1:?seconds}
shift
"$@" &
srv=$!
rc=0
for round in 1 2; do
	sleep "$wait_s"
	# A goodbye needs a channel: on a loaded host A's writes may take a while to open the
	# next one (at most 30 s more; without it the goodbye check fails, saying so).
	for _ in $(seq 300); do
		[ "$(cat /sys/kernel/unload/channel/open 2>/dev/null || echo 0)" -ge 1 ] && break
		sleep 0.1
	done
	if ! rmmod unload; then echo "reload $round: rmmod failed"; rc=3; break; fi
	sleep 2
	if ! insmod "${UNLOAD_KMOD:?the sandbox names the module}"; then echo "reload $round: insmod failed"; rc=3; break; fi
	# A module loaded anew has no channel key: the sandbox's again (scripts/sandbox --chan-key).
	if [ -n "${UNLOAD_CHAN_KEY_FILE:-}" ] && ! cat "$UNLOAD_CHAN_KEY_FILE" >/sys/kernel/unload/channel/key; then
		echo "reload $round: the channel key was refused"; rc=3; break
	fi
	echo "reload $round: done"
done
wait $srv || exit $?
exit $rc
