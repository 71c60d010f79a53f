#!/usr/bin/env bash
# scripts/sandbox --hosts 2, one behaviour per case: the link and both statuses, a warning on either host, a boot fault, a stalled link, a silent link, a panic.
#
#   two_hosts.sh FLAVOUR link|warning|boot_fault|link_stall|link_silent|panic
#
# Each case is its own ctest test: four two-guest boots in one test left too little of
# its time limit for a machine busy with other sandbox tests. Every sandbox run here has
# a --timeout below the test's, so a hang ends with the sandbox's report, not ctest's kill.
set -uo pipefail
here=$(dirname "$0")
# shellcheck source=tests/support/check.sh
. "$here/../support/check.sh"
flavour=${1:?kernel flavour}
case=${2:?case: link, warning, boot_fault, link_stall, link_silent or panic}
sandbox=$here/../../scripts/sandbox
# Two boots (a boot fault's retry) of two guests on a host loaded by others' sandboxes
# (load 8 on two cores) take minutes: the limit only ends a hang, so it is generous.
limit=400
pair() { "$sandbox" --kernel "$flavour" --hosts 2 --timeout "$limit" "$@"; }
# report: the sandbox's output, indented, for the reader of a failure.
report() { echo "$out" | sed 's/^/  | /'; }

case $case in
link)
	logs=$(mktemp -d)
	trap 'rm -rf "$logs"' EXIT
	show='rdma link show; ip -4 -br addr; echo "host $UNLOAD_HOST peer $UNLOAD_PEER_ADDR"'
	out=$(pair --logs "$logs" -- bash -c "$show; exit 0" :: bash -c "$show; exit 4" 2>&1)
	rc=$?
	report
	expect "A exit 0, B exit 4 -> sandbox exit 4" "$([ "$rc" -eq 4 ] && echo 1)" "exit $rc"
	expect "both statuses reported" "$(grep -q 'host A exit 0, host B exit 4' <<<"$out" && echo 1)" \
		"a status line for both hosts"
	for h in A:192.0.2.1:192.0.2.2 B:192.0.2.2:192.0.2.1; do
		IFS=: read -r name me peer <<<"$h"
		expect "$name: rxe0 active on the link" "$(grep -q 'rxe0.*ACTIVE' "$logs/$name.log" && echo 1)" \
			"rdma link show in $name's log"
		expect "$name: address $me, peer $peer" \
			"$(grep -q "$me/24" "$logs/$name.log" && grep -q "host $name peer $peer" "$logs/$name.log" && echo 1)" \
			"ip addr and UNLOAD_* in $name's log"
	done
	;;
warning)
	warn='echo "WARNING: two-host self-test" >/dev/kmsg'
	for h in A B; do
		if [ "$h" = A ]; then args=(sh -c "$warn" :: true); else args=(true :: sh -c "$warn"); fi
		out=$(pair -- "${args[@]}" 2>&1)
		rc=$?
		expect "a kernel WARNING on $h -> sandbox exit 126" "$([ "$rc" -eq 126 ] && echo 1)" "exit $rc"
		[ "$rc" -eq 126 ] || report
	done
	;;
boot_fault)
	# B faulting while booting boots both again; the run passes. B's command runs once, after
	# the retry; A's may have run in the faulted attempt too, and runs again in the new one.
	out=$(UNLOAD_SANDBOX_SELFTEST=boot-fault pair -- echo ran-A :: echo ran-B 2>&1)
	rc=$?
	expect "B faults while booting -> sandbox exit 0" "$([ "$rc" -eq 0 ] && echo 1)" "exit $rc"
	expect "both booted again" "$(grep -q 'booting again (attempt 2 of 3)' <<<"$out" && echo 1)" \
		"the retry said so on stderr"
	after=$(sed -n '/booting again/,$p' <<<"$out")
	expect "B's command ran once, both ran after the retry" \
		"$([ "$(grep -c '^B| ran-B' <<<"$out")" -eq 1 ] && grep -q '^B| ran-B' <<<"$after" &&
			grep -q '^A| ran-A' <<<"$after" && echo 1)" "ran-B once, ran-A and ran-B after the retry"
	;;
link_stall)
	# A's kernel reporting its link's transmit queue timed out (what a link QEMU stopped
	# carrying looks like) powers both off and boots both again; the rerun passes. A's
	# first command reports the stall once, then sleeps as a command on a dead link would.
	once=$(mktemp -d)
	trap 'rm -rf "$once"' EXIT
	stall="[ -e $once/stalled ] || { : >$once/stalled; echo '<2>virtio_net virtio3 eth0: NETDEV WATCHDOG: CPU: 0: transmit queue 0 timed out 5004 ms (self-test)' >/dev/kmsg; sleep 600; }; echo ran-A"
	out=$(pair --share "$once" -- sh -c "$stall" :: echo ran-B 2>&1)
	rc=$?
	expect "a stalled link -> both again, sandbox exit 0" "$([ "$rc" -eq 0 ] && echo 1)" "exit $rc"
	expect "the sandbox named the stall and the retry" \
		"$(grep -q "the link stalled: host A's virtio transmit queue timed out" <<<"$out" &&
			grep -q 'booting both again (attempt 2 of 5)' <<<"$out" && echo 1)" "both lines on stderr"
	after=$(sed -n '/booting both again/,$p' <<<"$out")
	expect "both commands ran after the retry" \
		"$(grep -q '^A| ran-A' <<<"$after" && grep -q '^B| ran-B' <<<"$after" && echo 1)" "ran-A and ran-B after it"
	[ "$rc" -eq 0 ] || report
	;;
link_silent)
	# A link that carries nothing, its transmit queue never full: A's link-watch hears
	# nothing from B for 15 s (B answers no ping in the first attempt, and A's command waits
	# as one on a dead link would), and both boot again. In the second, B finishes first and
	# A's command runs on for 45 s: a peer that finished is silent for a reason of its own,
	# and no third attempt follows.
	once=$(mktemp -d)
	trap 'rm -rf "$once"' EXIT
	mute="[ -e $once/b ] || { : >$once/b; sysctl -qw net.ipv4.icmp_echo_ignore_all=1; sleep 600; }; echo ran-B"
	wait_a="[ -e $once/a ] || { : >$once/a; sleep 600; }; sleep 45; echo ran-A"
	out=$(UNLOAD_SANDBOX_LINK_SILENT=15 pair --share "$once" -- sh -c "$wait_a" :: sh -c "$mute" 2>&1)
	rc=$?
	expect "a silent link -> both again, sandbox exit 0" "$([ "$rc" -eq 0 ] && echo 1)" "exit $rc"
	expect "the sandbox named the silence and the retry, once" \
		"$(grep -q "the link stalled: host A heard nothing from 192.0.2.2 for" <<<"$out" &&
			grep -q 'booting both again (attempt 2 of 5)' <<<"$out" &&
			! grep -q 'attempt 3 of 5' <<<"$out" && echo 1)" "the stall and one retry on stderr"
	after=$(sed -n '/booting both again/,$p' <<<"$out")
	expect "both commands ran after the retry" \
		"$(grep -q '^A| ran-A' <<<"$after" && grep -q '^B| ran-B' <<<"$after" && echo 1)" "ran-A and ran-B after it"
	[ "$rc" -eq 0 ] || report
	;;
panic)
	# A guest that panics powers its peer off instead of leaving it to wait for the timeout:
	# not 124, A did not sleep into it. The crash fails the run: 126 when the guest got its
	# report onto the console, else 125, no status.
	out=$(pair -- sleep 600 :: sh -c 'echo c >/proc/sysrq-trigger' 2>&1)
	rc=$?
	expect "B crashes -> A powered off, the run fails" "$([ "$rc" -eq 125 ] || [ "$rc" -eq 126 ] && echo 1)" \
		"exit $rc (125 or 126)"
	expect "the sandbox says why A stopped" \
		"$(grep -q 'host A was powered off: host B stopped without a status' <<<"$out" && echo 1)" \
		"A's verdict names B"
	;;
*)
	die "two_hosts.sh: unknown case '$case'"
	;;
esac
# The link case shows its output whatever the verdict; the others when a check failed.
[ "$case" = link ] || [ "$case" = warning ] || [ "$UNLOAD_CHECK_FAILS" -eq 0 ] || report
echo "($case: ${SECONDS} s)"
finish
