#!/bin/bash
# With the module loaded: every way a process ends leaves its statistics block (exit, _exit, _Exit, quick_exit, abort, SIGTERM and SIGINT at SIG_DFL, exec, a failed exec, a forked child's _exit; a vfork child's exec none of its parent's) and the program sees the dispositions it set, unloadctl ps shows a forked child's own session, and an UNLOAD_* tunable either narrows the module's value or is named on stderr.
. "$(dirname "$0")/lib.sh"
need_shim
[ -e /dev/unload ] || skip "the kernel module is not loaded"
CTL=$BUILD/tools/unloadctl/unloadctl
W=10

# blocks FILE: one line per process block of FILE, "PID WRITES" (writes over every path).
blocks() {
	local k v pid='' sum=0
	while read -r k v; do
		case $k in
		pid) [ -n "$pid" ] && echo "$pid $sum"; pid=$v; sum=0 ;;
		writes_offload | writes_inline | writes_stage | writes_direct | writes_mapped | writes_remote) sum=$((sum + v)) ;;
		esac
	done <"$1"
	[ -n "$pid" ] && echo "$pid $sum"
}
# ends_as HOW WANT_RC: sem_ends HOW under the shim (unload mode), its status WANT_RC; sets
# pid to the process's (a failure is a FAIL line and status 1).
ends_as() {
	local rc
	under unload "end_$1" "$BIN/sem_ends" "$1" $W >/dev/null
	rc=$?
	[ $rc -eq "$2" ] || { fail "sem_ends $1" "ended rc=$rc, not $2"; indent "    err ! " "$WORK/end_$1.err"; return 1; }
	pid=$(while read -r k v; do if [ "$k" = pid ]; then echo "$v"; fi; done <"$WORK/end_$1.out")
	[ -n "$pid" ] || { fail "sem_ends $1" "printed no pid"; return 1; }
}

# One process, one block with its pid and every write, whichever way it ended.
for how in exit _exit _Exit quick_exit abort exec execl; do
	want=0; [ $how = abort ] && want=134  # killed by SIGABRT
	ends_as $how $want || continue
	check "$how: one block, this process's, with its $W writes" [ "$(blocks "$WORK/end_$how.stats")" = "$pid $W" ]
done
# Killed by a signal the program left at SIG_DFL: the block, and the death SIG_DFL gives.
# What the program sees of its dispositions is what it sees without the shim.
for how in term int; do
	want=143; [ $how = int ] && want=130
	ends_as $how $want || continue
	check "$how: killed by the signal, one block, this process's, with its $W writes" \
		[ "$(blocks "$WORK/end_$how.stats")" = "$pid $W" ]
done
timeout 60 "$BIN/sem_ends" term $W >"$WORK/term.ref" 2>"$WORK/term.ref.err"
check "term without the shim: killed by SIGTERM" [ $? -eq 143 ]
grep '^view' "$WORK/term.ref" >"$WORK/term.ref.view"
grep '^view' "$WORK/end_term.out" >"$WORK/term.view"
# nine_same REF OUT: REF has the program's 9 view lines and OUT the same.
nine_same() { [ "$(grep -c . "$1")" -eq 9 ] && same_file "$1" "$2"; }
check "term: the dispositions the program sees are the ones it sees without the shim ($(grep -c . "$WORK/term.ref.view") of 9 lines)" \
	nine_same "$WORK/term.ref.view" "$WORK/term.view"
indent "    " "$WORK/term.view"
# A failed exec wrote a block of what came before; the exit one of what came after.
if ends_as exec_fail 0; then
	check "exec_fail: a block before the exec and one after, $W writes each" \
		[ "$(blocks "$WORK/end_exec_fail.stats" | tr '\n' ' ')" = "$pid $W $pid $W " ]
fi
# A forked child's _exit: its own block, none of the parent's writes in it.
if ends_as fork_exit 0; then
	# child_and_parent BLOCKS PARENT: two blocks, PARENT's with W writes, another pid's with 7.
	child_and_parent() { [ "$(grep -c . <<<"$1")" -eq 2 ] && grep -qx "$2 $W" <<<"$1" && grep -Eq "^[0-9]+ 7$" <<<"$1" && ! grep -q "^$2 7$" <<<"$1"; }
	check "fork_exit: the child's block (7 writes, its own pid) and the parent's ($W)" \
		child_and_parent "$(blocks "$WORK/end_fork_exit.stats")" "$pid"
	show_stats end_fork_exit
fi
# A vfork child shares its parent's memory: its exec must write nothing of the parent's.
if ends_as vfork_exec 0; then
	check "vfork_exec: one block, the parent's, with its $W writes" [ "$(blocks "$WORK/end_vfork_exec.stats")" = "$pid $W" ]
fi

# unloadctl ps: a forked child's own session beside its parent's, while both live.
rel=$WORK/release
(
	export LD_PRELOAD="$SHIM" UNLOAD_MODE=unload UNLOAD_MAPPED=0 UNLOAD_STATS_FILE="$WORK/hold.stats"
	exec timeout 120 "$BIN/sem_ends" hold $W "$rel" >"$WORK/hold.out" 2>"$WORK/hold.err"
) &
hold=$!
for ((i = 0; i < 600; i++)); do file_has "$WORK/hold.out" child && break; kill -0 $hold 2>/dev/null || break; nap 0.1; done
read -r _ ppid < <(grep '^parent ' "$WORK/hold.out")
read -r _ cpid < <(grep '^child ' "$WORK/hold.out")
"$CTL" -j ps >"$WORK/ps.json" 2>&1
: >"$rel"
wait $hold
check "hold: the parent and its forked child ran to the end" [ $? -eq 0 -a -n "${cpid:-}" -a -n "${ppid:-}" ]
check "unloadctl ps: the forked child's own session (2 QPs, its 7 direct writes) beside its parent's ($W)" \
	python3 - "$WORK/ps.json" "${ppid:-0}" "${cpid:-0}" $W <<'PY'
import json, sys
ps = json.load(open(sys.argv[1]))
ppid, cpid, w = map(int, sys.argv[2:])
mine = {s["pid"]: s for s in ps if s["pid"] in (ppid, cpid)}
assert set(mine) == {ppid, cpid}, ps
assert mine[cpid]["session"] != mine[ppid]["session"], mine
assert mine[cpid]["qps"] == 2 and mine[cpid]["writes"]["direct"] == 7, mine[cpid]
assert mine[ppid]["writes"]["direct"] == w, mine[ppid]
PY
sed 's/^/    ps: /' "$WORK/ps.json"

# Tunables: the module's page holds them; a process's limit narrows it, the rest are named.
check "mt_post unload, module's tunables: ran" under unload tun_base "$BIN/sem_mt_post" 1 1 50
check "module's tunables: the 50 writes went direct" [ "$(placed_here "$WORK/tun_base.stats")" -eq 50 ]
UNLOAD_DIRECT_MAX=0 under unload tun_dmax "$BIN/sem_mt_post" 1 1 50
check "UNLOAD_DIRECT_MAX=0 with the module: no write direct, all 50 on another path" \
	[ "$(placed_here "$WORK/tun_dmax.stats")" -eq 0 -a "$(total_writes "$WORK/tun_dmax.stats")" -eq 50 ]
check "UNLOAD_DIRECT_MAX=0 took effect: nothing said" [ ! -s "$WORK/tun_dmax.err" ]
# A limit above root's cannot widen it: the module's value holds, and stderr says so.
UNLOAD_INLINE_MAX=$(($(cat /sys/kernel/unload/inline_max) + 1)) under unload tun_imax "$BIN/sem_mt_post" 1 1 50
check "UNLOAD_INLINE_MAX above the module's: one line naming it and the module's file" \
	[ "$(grep -c 'UNLOAD_INLINE_MAX=.* does not apply now.*/sys/kernel/unload/inline_max' "$WORK/tun_imax.err")" -eq 1 ]
# Not a limit: the module's value holds, and stderr names the variable and where it comes from.
UNLOAD_EXPLORE_SHIFT=3 under unload tun_explore "$BIN/sem_mt_post" 1 1 50
check "UNLOAD_EXPLORE_SHIFT with the module: one line, ignored, from /sys/kernel/unload/explore_shift" \
	[ "$(grep -c 'UNLOAD_EXPLORE_SHIFT=3 ignored: .*/sys/kernel/unload/explore_shift' "$WORK/tun_explore.err")" -eq 1 ]
finish
