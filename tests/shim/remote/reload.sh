# shellcheck shell=bash
# Sourced by failures_guest.sh: 64 QPs write remote for 60 s while host B's module is removed and
# loaded again twice. B's server runs without the shim, so B's module refuses each write
# (its QP is not registered) and A gives it to the NIC: what is stressed is the channel
# going and coming under load. Every write must still complete as on the NIC: B's
# goodbye tells A that the requests it had not answered were never handled, so none is
# failed as unanswered (IBV_WC_RETRY_EXC_ERR would end perftest).
reload_bw=(ib_write_bw -d "$DEV" -x "$GIDX" -q 64 -D 60 -s 1024)
g0=$(cat "$S/channel/goodbyes")
e0=$(cat "$S/channel/expired")
check "ib_write_bw -q 64 -D 60, shim client A (remote), B's module reloaded twice" \
	step reload B "$env" -- "$(dirname "${BASH_SOURCE[0]}")/reload_server.sh" 15 "${reload_bw[@]}" \
	-- "${reload_bw[@]}" "$PEER_ADDR"
if [ "$ME" = A ]; then
	f=$WORK/reload.stats
	show_stats reload
	grep -o 'reload [12]: [a-z].*' "$WORK/reload.srv" | sed 's/^/    B: /'
	check "reload: B's module was reloaded twice" [ "$(grep -o 'reload [12]: done' "$WORK/reload.srv" | wc -l)" -eq 2 ]
	check "reload: every write tried remote, refused there, placed by the NIC ($(stat "$f" why_not_refused) refused)" \
		[ "$(stat "$f" writes_remote)" -eq 0 -a "$(stat "$f" why_not_refused)" -gt 0 ]
	# Two removals a run; perftest's clock may have made the step run again (STEP_RUNS).
	check "reload: B said goodbye at each removal (channel/goodbyes +$(($(cat "$S/channel/goodbyes") - g0)), $STEP_RUNS run(s))" \
		[ $(($(cat "$S/channel/goodbyes") - g0)) -eq $((2 * STEP_RUNS)) ]
	e=$(($(cat "$S/channel/expired") - e0))
	check "reload: no write waited out its QP's ACK timeout while B was up (channel/expired +$e)" [ "$e" -eq 0 ]
	check "reload: A's sessions and pinned pages back to 0" \
		[ "$(cat "$S/stats/sessions")" -eq 0 -a "$(cat "$S/stats/pinned_pages")" -eq 0 ]
fi
