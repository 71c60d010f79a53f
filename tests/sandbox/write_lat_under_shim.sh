#!/usr/bin/env bash
# Unmodified perftest ib_write_lat (server and client on rxe0) passes under the shim, and its writes are counted.
set -uo pipefail
shim=${1:?path to libunload_shim.so}
command -v ib_write_lat >/dev/null || { echo "skip: perftest is not installed"; exit 77; }
stats=$(mktemp -d)
export UNLOAD_STATS_FILE=$stats/stats
iters=200

LD_PRELOAD=$shim ib_write_lat -d rxe0 -x 1 -s 64 -n $iters >"$stats/server.log" 2>&1 &
server=$!
# Until the server listens (a fixed sleep is not enough when guests share the cores).
for _ in $(seq 300); do
	ss -ltnH 'sport = :18515' | grep -q . && break
	sleep 0.1
done
LD_PRELOAD=$shim timeout 120 ib_write_lat -d rxe0 -x 1 -s 64 -n $iters 192.0.2.1 >"$stats/client.log" 2>&1
client_rc=$?
wait $server
server_rc=$?
sed 's/^/  client | /' "$stats/client.log"
fail=0
[ $client_rc -eq 0 ] && [ $server_rc -eq 0 ] && echo "ok: ib_write_lat passed under the shim" ||
	{ echo "FAIL: ib_write_lat client=$client_rc server=$server_rc"; sed 's/^/  server | /' "$stats/server.log"; fail=1; }

# Each side posts one write per iteration; the shim counts every one of them.
total=$(cat "$stats"/stats* 2>/dev/null | awk '$1 ~ /^writes_/ {n += $2} END {print n + 0}')
echo "writes counted by the shim: $total (expected >= $((2 * iters)))"
[ "$total" -ge $((2 * iters)) ] && echo "ok: writes counted" || { echo "FAIL: writes not counted"; fail=1; }
if [ -r /sys/kernel/unload/stats/writes_offload ]; then
	echo "module stats: writes_offload=$(cat /sys/kernel/unload/stats/writes_offload)"
fi
exit $fail
