#!/bin/bash
# Guest half of shim_remote_three: host A writes to hosts B and C at once, module on all three: two remote_parity clients side by side, without the shim and then with UNLOAD_PATH=remote, each to its own host over its own channel; every line as the NIC's, each target's module placing its own client's writes.
#
# Each host runs it (scripts/sandbox --hosts 3). B and C each run `remote_parity server`
# twice, a round each: without the shim (the NIC's reference), then under the shim with
# UNLOAD_PATH=remote (a remote target must be registered with its module), as guest.sh's
# par_nic and par_remote steps. A runs `remote_parity client B` and `client C` at the same
# time in each round, with no preload and then under the shim, UNLOAD_PATH=remote. B and C
# publish their logs, statuses and counters in $UNLOAD_PAIR_DIR; host A judges.
# shellcheck source=tests/shim/remote/lib.sh
. "$(dirname "$0")/lib.sh"

# The targets and their addresses, from A (UNLOAD_PEER_ADDRS: B's, then C's).
read -r ADDR_B ADDR_C <<<"${UNLOAD_PEER_ADDRS:?not in a three-host sandbox}"
[ -n "$ADDR_C" ] || die "three hosts wanted, UNLOAD_PEER_ADDRS is '$UNLOAD_PEER_ADDRS'"
TARGETS=(B C)
addr_of() { if [ "$1" = B ]; then echo "$ADDR_B"; else echo "$ADDR_C"; fi; }
# sysfs NAME: one of this host's module's files, by a builtin.
sysfs() { local v; read -r v <"$S/$1" && echo "$v"; }
# Channels stay up until the run ends: one idle for channel_idle_ms (60 s) would be closed
# while the other client still runs on a slow host, and the count after both read one.
echo 0 >"$S/channel_idle_ms" || die "cannot set channel_idle_ms"

# target ROUND [VAR=value...]: host B's or C's half of a round: its server, under the shim
# with those variables when there are any; its counters around it, its log and status
# published for A.
target() {
	local round=$1 rc=0 s
	shift
	local envs=()
	(($#)) && envs=(LD_PRELOAD="$SHIM" "$@")
	put "$P/$round.$ME.placed0" "$(sysfs stats/remote_placed_writes)"
	put "$P/$round.$ME.opened0" "$(sysfs channel/opened)"
	( ((${#envs[@]})) && export "${envs[@]}"; exec timeout 400 "$RP" server >"$WORK/$round.srv" 2>&1) &
	s=$!
	listening "$RP" $s
	: >"$P/$round.$ME.ready"
	wait $s || rc=$?
	copy_file "$WORK/$round.srv" "$P/$round.$ME.log"
	put "$P/$round.$ME.placed1" "$(sysfs stats/remote_placed_writes)"
	put "$P/$round.$ME.opened1" "$(sysfs channel/opened)"
	put "$P/$round.$ME.open" "$(sysfs channel/open)"
	put "$P/$round.$ME.rc" "$rc"
}

# clients ROUND [VAR=value...]: host A's half: a client to B and one to C, started
# together once both servers listen, each with its statistics in $WORK/ROUND.X.stats
# under the shim. A's channel/open is sampled while both run (printed, not checked: how
# long they overlap is timing) and read once both have ended; each side's log and status
# in $WORK/ROUND.X.{cli,srv,rc}.
clients() {
	local round=$1 x pids=() rc
	shift
	for x in "${TARGETS[@]}"; do
		wait_file "$P/$round.$x.ready" 600 || return 1
	done
	put "$WORK/$round.opened0" "$(sysfs channel/opened)"
	for x in "${TARGETS[@]}"; do
		local envs=()
		(($#)) && envs=(LD_PRELOAD="$SHIM" UNLOAD_STATS_FILE="$WORK/$round.$x.stats" "$@")
		: >"$WORK/$round.$x.stats"
		( ((${#envs[@]})) && export "${envs[@]}"; exec timeout 400 "$RP" client "$(addr_of "$x")" \
			>"$WORK/$round.$x.cli" 2>&1) &
		pids+=($!)
	done
	local most=0 o
	while kill -0 "${pids[0]}" 2>/dev/null && kill -0 "${pids[1]}" 2>/dev/null; do
		o=$(sysfs channel/open)
		((o > most)) && most=$o
		nap 0.2
	done
	for x in 0 1; do
		rc=0
		wait "${pids[x]}" || rc=$?
		put "$WORK/$round.${TARGETS[x]}.rc" "$rc"
	done
	put "$WORK/$round.open" "$(sysfs channel/open)"
	put "$WORK/$round.opened1" "$(sysfs channel/opened)"
	put "$WORK/$round.most" "$most"
	for x in "${TARGETS[@]}"; do
		wait_file "$P/$round.$x.rc" 600 || return 1
		copy_file "$P/$round.$x.log" "$WORK/$round.$x.srv"
	done
}

# ok_round ROUND: both pairs of the round exited 0; a failed pair's logs shown.
ok_round() {
	local x c s
	for x in "${TARGETS[@]}"; do
		read -r c <"$WORK/$1.$x.rc"
		read -r s <"$P/$1.$x.rc"
		if [ "$c" -eq 0 ] && [ "$s" -eq 0 ]; then
			ok "$1: client A to $x and $x's server exited 0"
		else
			fail "$1: client A to $x and $x's server exited 0" "client $c, server $s"
			echo "    --- client:"; indent "    " "$WORK/$1.$x.cli"
			echo "    --- server:"; indent "    " "$WORK/$1.$x.srv"
		fi
	done
}

# pub ROUND HOST NAME: what HOST published for ROUND.
pub() { local v; read -r v <"$P/$1.$2.$3" && echo "$v"; }

if [ "$ME" != A ]; then
	target nic
	target remote UNLOAD_PATH=remote
	# The module stays loaded (the channel A counts stays up) until A has read its counts.
	wait_file "$P/done" 1200 >/dev/null
	exit 0
fi
trap 'put "$P/done" 1; rm -rf "$WORK"' EXIT

# The NIC's reference: neither host under the shim.
clients nic || fail "nic: both rounds' servers" "B's or C's did not come up or report"
ok_round nic
for x in "${TARGETS[@]}"; do
	check "nic: $x's module placed nothing (no shim on either host)" \
		[ "$(pub nic "$x" placed1)" -eq "$(pub nic "$x" placed0)" ]
done
# Both hosts under the shim, A's writes remote, to two hosts at once.
clients remote UNLOAD_PATH=remote || fail "remote: both rounds' servers" "B's or C's did not come up or report"
ok_round remote

who() { [ "$1" = cli ] && echo "client A to $2: completions, statuses, wr_ids, QP states" ||
	echo "server $2: target bytes and QP states"; }
for x in "${TARGETS[@]}"; do
	for side in cli srv; do
		grep '^R ' "$WORK/nic.$x.$side" >"$WORK/nic.$x.R.$side"
		grep '^R ' "$WORK/remote.$x.$side" >"$WORK/remote.$x.R.$side"
		check "parity, $(who $side "$x"): $(wc -l <"$WORK/nic.$x.R.$side") lines, identical on the NIC and remote" \
			diff -u "$WORK/nic.$x.R.$side" "$WORK/remote.$x.R.$side"
	done
	check "parity, $x: the reference has the denied write, and the write after it flushed" \
		grep -Pzq 'wr_id 501 remote access error\n.*\n.*wr_id 502 Work Request Flushed Error' "$WORK/nic.$x.R.cli"
	f=$WORK/remote.$x.stats
	show_stats "remote.$x"
	w=$(stat "$f" writes_remote)
	placed=$(($(pub remote "$x" placed1) - $(pub remote "$x" placed0)))
	check "parity, $x: A's writes to it went remote ($w), $x's module placed them (+$placed)" \
		[ "$w" -gt 0 -a "$placed" -eq "$w" ]
	check "parity, $x: the denied writes went remote, were refused and took the NIC (why_not_refused $(stat "$f" why_not_refused))" \
		[ "$(stat "$f" why_not_refused)" -eq 3 ]
	check "parity, $x: the writes after each saw the failure (why_not_qp_error $(stat "$f" why_not_qp_error))" \
		[ "$(stat "$f" why_not_qp_error)" -eq 4 ]
done

# Two channels on A at once, one to each target: both in its list once both clients have
# ended (none is reaped: channel_idle_ms 0), each opened in this round; one on each target.
read -r open <"$WORK/remote.open"
read -r o0 <"$WORK/remote.opened0"
read -r o1 <"$WORK/remote.opened1"
read -r most <"$WORK/remote.most"
echo "measured: A's channel/open while both clients ran: at most $most"
check "channels: two on A at once after both clients (open $open), both opened in this round (+$((o1 - o0)))" \
	[ "$open" -eq 2 -a $((o1 - o0)) -eq 2 ]
for x in "${TARGETS[@]}"; do
	check "channels: one on $x (open $(pub remote "$x" open)), A's, accepted in this round (+$(($(pub remote "$x" opened1) - $(pub remote "$x" opened0))))" \
		[ "$(pub remote "$x" open)" -eq 1 -a $(($(pub remote "$x" opened1) - $(pub remote "$x" opened0))) -eq 1 ]
done
for x in "${TARGETS[@]}"; do
	indent "    $x| " "$WORK/remote.$x.R.cli"
done
finish
