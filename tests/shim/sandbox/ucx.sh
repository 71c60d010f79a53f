#!/bin/bash
# UCX's ucx_perftest (uct over rc_verbs) unmodified in the default mode with the module loaded: its report as without the shim, >= 95 % of its writes direct, a counted reason for each other one.
. "$(dirname "$0")/lib.sh"
need_shim
command -v ucx_perftest >/dev/null || skip "no ucx_perftest (Debian's ucx-utils: scripts/setup installs it)"
[ -e /dev/unload ] || skip "no /dev/unload (module not loaded)"
ucx_info -d 2>/dev/null | grep -q "Transport: rc_verbs" || skip "UCX sees no rc_verbs transport"
export UCX_NET_DEVICES=$DEV:1 UCX_TLS=rc_verbs
N=2000

# report LOG: what a run's report says, without its measurements: the columns, the
# iteration count of the final line.
report() { sed -n 's/^Final: *\([0-9]*\) .*/Final \1 iterations/p; /^| *Stage /p' "$1"; }

# ucx NAME ARGS...: ucx_perftest ARGS as server and client, without the shim, then under
# it in the module's mode: both succeed with the same report; the writes took direct.
ucx() {
	local name=$1; shift
	local args=(-d "$DEV:1" -x rc_verbs "$@")
	if ! run_pair "$name.ref" none ucx_perftest "${args[@]}" -- ucx_perftest "$ADDR" "${args[@]}"; then
		fail "$name without the shim" "the reference run failed (logs above)"
		return
	fi
	if ! run_pair "$name" - ucx_perftest "${args[@]}" -- ucx_perftest "$ADDR" "${args[@]}"; then
		fail "$name in the default mode" "failed under the shim (logs above)"
		return
	fi
	report "$WORK/$name.ref.cli" >"$WORK/$name.ref.report"
	report "$WORK/$name.cli" >"$WORK/$name.report"
	check "$name: its report as without the shim ($(grep Final "$WORK/$name.report"))" \
		cmp -s "$WORK/$name.ref.report" "$WORK/$name.report"
	show_stats "$name"
	local f=$WORK/$name.stats all direct why k v
	all=$(total_writes "$f")
	direct=$(stat "$f" writes_direct)
	why=0
	while read -r k v _; do
		[[ $k == why_not_* ]] && why=$((why + v))
	done <"$f"
	check "$name: >= 95 % of $all writes direct ($direct)" [ "$all" -ge "$N" -a $((direct * 100)) -ge $((all * 95)) ]
	check "$name: a reason for each of the $((all - direct)) others ($why)" [ "$why" -eq $((all - direct)) ]
}

ucx put_lat_short_8 -t put_lat -D short -s 8 -n $N
ucx put_bw_zcopy_64k -t put_bw -D zcopy -s 65536 -n $N
finish
