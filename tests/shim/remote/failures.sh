# shellcheck shell=bash
# The failure cases of shim_remote_failures (issue 27), sourced by failures_guest.sh: a
# stream of writes from A (remote_parity stream-client) with writes outstanding when host B
#   kill:  SIGKILLs the server,
#   rmmod: SIGKILLs it and removes B's module (then loads it again),
#   link:  takes B's link down (then up again), last,
# each run on the NIC (no shim) and remote (both hosts under the shim, UNLOAD_PATH=remote).
# The client's "R " lines are the shape, not the counts (how many writes succeed before
# the failure is timing): statuses in order, each wr_id once and in order, the next
# write's fate, the QP's state; NIC and remote must print the same. On the remote run, B's
# module must have placed at least the client's successes and at most one more (the one
# that may have been placed unanswered): none lost, none placed twice. A gives up on a
# remote write's ack where its NIC would, after the QP's ACK timeout and retries (at least
# 1 s), not at the channel's 15 s: A's channel/expired counts the one write of the link case,
# and none of the others (their target answered, or said goodbye).
# Uses failures_guest.sh's RP and S; cost: about 30 s on the NIC, 30 s remote.

# The module's path in this guest (scripts/lib/guest/sandbox-guest's config).
# shellcheck disable=SC1091
KO=$(. /run/sandbox/config 2>/dev/null && echo "${KMOD:-}")
# shellcheck disable=SC1091
KO_ARGS=$(. /run/sandbox/config 2>/dev/null && echo "${KMOD_ARGS:-}")
# The channel key again after a reload: a module loaded anew has none (scripts/sandbox
# --chan-key keeps it, root's alone, in UNLOAD_CHAN_KEY_FILE).
install_chan_key() { [ -z "${UNLOAD_CHAN_KEY_FILE:-}" ] || cat "$UNLOAD_CHAN_KEY_FILE" >/sys/kernel/unload/channel/key; }
# The link to the other host: the interface holding this host's address.
LINK=$(ip -o -4 addr show | awk -v a="${UNLOAD_HOST_ADDR:-}/" 'index($4, a) == 1 { print $2; exit }')

# fail_run NAME ACTION nic|remote: one stream, B acting mid-stream (ACTION: kill, rmmod,
# link). On A returns 0 when the client ran to its end; the checks are fail_case's.
fail_run() {
	local name=$1 act=$2 mode=$3 envs=() s rc=0 p0 p1 gone=0 refused=-
	if [ "$mode" = remote ]; then
		envs=(LD_PRELOAD="$SHIM" UNLOAD_PATH=remote)
		[ "$ME" = A ] && envs+=(UNLOAD_STATS_FILE="$WORK/$name.stats")
	fi
	if [ "$ME" = A ]; then
		rm -f "$WORK/$name.stats"
		wait_file "$P/$name.ready" 200 || return 1
		env "${envs[@]}" timeout 150 "$RP" stream-client "$PEER_ADDR" "$name" "$P/$name.mid" \
			>"$WORK/$name.cli" 2>&1 || rc=$?
		put "$P/$name.cdone" "$rc"
		wait_file "$P/$name.B" 300 || return 1
		cp "$P/$name.srv" "$WORK/$name.srv"
		return "$rc"
	fi
	p0=$(cat "$S/stats/remote_placed_writes")
	# env execs the program: $! is remote_parity itself, which the SIGKILL must reach.
	env "${envs[@]}" "$RP" stream-server "$name" "$P/$name.cdone" >"$WORK/$name.srv" 2>&1 &
	s=$!
	listening "$RP" "$s"
	: >"$P/$name.ready"
	wait_file "$P/$name.mid" 200
	case $act in
	kill) kill -KILL "$s" ;;
	rmmod)
		# rmmod is refused while a process has /dev/unload open (its session holds the
		# module): the remote run's server, under the shim, has it open.
		if [ "$mode" = remote ]; then
			refused=1
			rmmod unload 2>/dev/null && refused=0
		fi
		kill -KILL "$s"
		wait "$s" 2>/dev/null  # (no "Killed" from the shell)
		p1=$(cat "$S/stats/remote_placed_writes")
		# Only now that the server is gone can the module go. A reap leaves nothing
		# open, so this is at most a short wait for the last fput.
		for _ in $(seq 50); do
			rmmod unload 2>/dev/null && { gone=1; break; }
			sleep 0.1
		done
		;;
	link) ip link set "$LINK" down ;;
	esac
	wait_file "$P/$name.cdone" 300 2>/dev/null  # (no "Killed" from the shell)
	case $act in
	rmmod)
		# shellcheck disable=SC2086
		[ "$gone" = 1 ] && insmod "$KO" $KO_ARGS && chmod 0666 /dev/unload && install_chan_key && gone=2
		;;
	link) ip link set "$LINK" up ;;
	esac
	wait "$s" 2>/dev/null
	rc=$?
	[ "$act" = rmmod ] || p1=$(cat "$S/stats/remote_placed_writes")
	cp "$WORK/$name.srv" "$P/$name.srv"
	put "$P/$name.B" "$rc $((p1 - p0)) $gone $refused"
	return 0
}

# fail_case ACTION: the stream on the NIC, then remote; on A, the checks.
fail_case() {
	local act=$1 nic=fail_$1_nic rem=fail_$1_remote b placed gone refused succ w held=0 e0=0 e
	check "failure $act, on the NIC (the reference): the client ran to its end" fail_run "$nic" "$act" nic
	[ "$ME" = A ] && e0=$(cat "$S/channel/expired")
	check "failure $act, remote: the client ran to its end" fail_run "$rem" "$act" remote
	[ "$ME" = A ] || return 0
	e=$(($(cat "$S/channel/expired") - e0))
	if [ "$act" = link ]; then
		check "failure link, remote: A gave up on the unanswered write at its QP's ACK timeout and retries, as its NIC would (channel/expired +$e)" [ "$e" -eq 1 ]
	else
		check "failure $act, remote: no write waited out its QP's ACK timeout (channel/expired +$e)" [ "$e" -eq 0 ]
	fi
	# A killed server's QP goes after its MR, or before: a write between the two meets the
	# responder's remote access error, one after, no answer (retries exceeded). Either is
	# the NIC's outcome, on the NIC and remote alike (a refused write takes the NIC).
	local either='s/: success, \(remote access error\|transport retry counter exceeded\),/: success, the target gone (retries exceeded or remote access error),/'
	[ "$act" = link ] && either=
	grep '^R ' "$WORK/$nic.cli" | sed "s/^R $nic:/R $act:/; $either" >"$WORK/$nic.r"
	grep '^R ' "$WORK/$rem.cli" | sed "s/^R $rem:/R $act:/; $either" >"$WORK/$rem.r"
	grep "^R " "$WORK/$nic.cli" | sed 's/^/    nic:    /'
	grep "^R " "$WORK/$rem.cli" | sed 's/^/    remote: /'
	grep -h 'successes' "$WORK/$nic.cli" "$WORK/$rem.cli" | sed 's/^/    /'
	check "failure $act: the reference's shape: successes, the failure, flushes" \
		grep -Eq "statuses in order: success, (transport retry counter exceeded|the target gone .*), Work Request Flushed Error$" "$WORK/$nic.r"
	grep -q 'every wr_id completed once, in order' "$WORK/$nic.r" || echo "    (the reference lost or doubled a completion)"
	check "failure $act: the client's completions, wr_ids and QP state identical on the NIC and remote" \
		diff -u "$WORK/$nic.r" "$WORK/$rem.r"
	read -r _ placed gone refused <"$P/$rem.B"
	succ=$(sed -n 's/.* \([0-9]*\) successes,.*/\1/p' "$WORK/$rem.cli")
	w=$(stat "$WORK/$rem.stats" writes_remote)
	check "failure $act: A's writes went remote ($w)" [ "$w" -gt 0 ]
	# writes_remote counts the writes the module placed (result 0) and the one it may have
	# placed unanswered (-ECOMM). A write the target refused took the NIC, which may have
	# placed it (a dying server's QP can outlive its registration): a success, not B's count.
	[ -n "$succ" ] && [ "$placed" -ge $((w - 1)) ] && [ "$placed" -le "$w" ] &&
		[ "$placed" -le $((succ + 1)) ] && held=1
	expect "failure $act: B's module placed $placed, A sent $w remote and saw ${succ:-?} succeed: none lost, none twice" "$held"
	if [ "$act" = rmmod ]; then
		check "failure rmmod: B's rmmod refused while the server had /dev/unload open" [ "$refused" = 1 ]
		check "failure rmmod: B's module went once its process was gone, and came back" [ "$gone" = 2 ]
	fi
	if [ "$act" = link ]; then
		read -r b _ <"$P/$rem.B"
		held=0
		grep -q "server QP RTS" "$WORK/$nic.srv" && grep -q "server QP RTS" "$WORK/$rem.srv" && held=1
		expect "failure link: B's server kept its QP in RTS, on the NIC and remote (exit $b)" "$held"
	fi
}

if [ -z "$KO" ] || [ -z "$LINK" ]; then
	[ "$ME" = A ] && skip_check "failure cases" "no module path ($KO) or link ($LINK) in this guest"
else
	t0=$SECONDS
	fail_case kill
	fail_case rmmod
	fail_case link
	[ "$ME" = A ] && echo "    (failure cases: $((SECONDS - t0)) s)"
fi
