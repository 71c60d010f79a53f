#!/usr/bin/env bash
# The guest scripts' builtin helpers on the host: lib.sh's file comparisons and copies, stats.sh's sum, waiting.sh's nap, socket-table reading and wait.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
export UNLOAD_BUILD_DIR=$tmp
# lib.sh makes its own WORK and trap; ours is cleaned after it.
# shellcheck source=tests/shim/sandbox/lib.sh
. "$root/tests/shim/sandbox/lib.sh"
trap 'rm -rf "$WORK" "$tmp"' EXIT

printf 'a\nb\n' >"$tmp/ab"
printf 'a\nb\n' >"$tmp/ab2"
printf 'a\nb' >"$tmp/ab_noeol"
: >"$tmp/empty1"
: >"$tmp/empty2"
printf 'x*[y]?\n' >"$tmp/glob"

check "same_file: the same text" same_file "$tmp/ab" "$tmp/ab2"
check "same_file: two empty files" same_file "$tmp/empty1" "$tmp/empty2"
expect "same_file: a final newline differs" "$(same_file "$tmp/ab" "$tmp/ab_noeol" || echo 1)"
expect "same_file: a missing file is never the same" "$(same_file "$tmp/ab" "$tmp/none" || echo 1)"

copy_file "$tmp/ab" "$tmp/copy"
copy_file "$tmp/ab_noeol" "$tmp/copy_noeol"
expect "copy_file: byte for byte" "$(cmp -s "$tmp/ab" "$tmp/copy" && cmp -s "$tmp/ab_noeol" "$tmp/copy_noeol" && echo 1)"

check "file_has: a string across lines" file_has "$tmp/ab" $'a\nb'
check "file_has: glob characters are literal" file_has "$tmp/glob" '*[y]?'
expect "file_has: a pattern is not a string" "$(file_has "$tmp/glob" 'x*y' || echo 1)"
expect "file_has: a missing file has nothing" "$(file_has "$tmp/none" a || echo 1)"

expect "indent: every line, the last without its newline too" \
	"$([ "$(indent '> ' "$tmp/ab_noeol")" = $'> a\n> b' ] && echo 1)" "$(indent '> ' "$tmp/ab_noeol" | tr '\n' '|')"

printf 'pid 10\nwrites_direct 3\nwrites_directly 100\npid 11\nwrites_direct 4 extra\n' >"$tmp/stats"
expect "stat: a counter summed over process blocks, whole names only" \
	"$([ "$(stat "$tmp/stats" writes_direct)" = 7 ] && echo 1)" "$(stat "$tmp/stats" writes_direct)"
expect "stat: a missing file or counter is 0" \
	"$([ "$(stat "$tmp/none" writes_direct)" = 0 ] && [ "$(stat "$tmp/stats" fences)" = 0 ] && echo 1)"

began=$EPOCHREALTIME
nap 0.2
took=$(((${EPOCHREALTIME/./} - ${began/./}) / 1000))
expect "nap 0.2 waits (at least 200 ms: a read that times out cannot end early)" \
	"$([ "$took" -ge 200 ] && echo 1)" "$took ms"

# A socket table as the kernel prints it: port 18515 (0x4853) listening (0A), 13337
# (0x3419) only connected (01).
cat >"$tmp/tcp" <<'TABLE'
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:4853 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:3419 0100007F:D2A8 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
TABLE
check "tcp_listening: a listener's port" tcp_listening 18515 "$tmp/tcp"
expect "tcp_listening: a connected socket is no listener" "$(tcp_listening 13337 "$tmp/tcp" || echo 1)"
expect "tcp_listening: an absent port" "$(tcp_listening 7174 "$tmp/tcp" || echo 1)"

sh -c 'exit 0' &
gone=$!
wait $gone
began=$SECONDS
expect "wait_tcp: a server gone is no listener, at once" \
	"$(! wait_tcp 1 "$gone" && [ $((SECONDS - began)) -lt 5 ] && echo 1)"
finish
