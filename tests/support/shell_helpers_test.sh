#!/usr/bin/env bash
# The guest scripts' builtin helpers on the host: lib.sh's file comparisons and copies, its timing figures and ratios, stats.sh's sum, waiting.sh's nap, socket-table reading and wait.
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

# perftest's and ucx_perftest's result lines as they print them (perftest 4.5, UCX 1.13).
cat >"$tmp/bw" <<'LOG'
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 4096       2000             43.69              40.16  		   0.010282
---------------------------------------------------------------------------------------
LOG
cat >"$tmp/lat" <<'LOG'
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       1000          3251.34        9987.29      4002.81  	       4082.99     	411.25 		6083.66 		9987.29
LOG
cat >"$tmp/ucx" <<'LOG'
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
[thread 0]              1941   1275.000  2580.992  2592.402       24.22      24.11         387         386
Final:                  2000   1275.000  2548.965  2591.121       24.52      24.12         399         386
LOG
expect "perftest_figure: ib_write_bw's BW average and MsgRate (a header name with a space)" \
	"$([ "$(perftest_figure "$tmp/bw" "BW average")" = 40.16 ] && [ "$(perftest_figure "$tmp/bw" MsgRate)" = 0.010282 ] && echo 1)" \
	"$(perftest_figure "$tmp/bw" "BW average") $(perftest_figure "$tmp/bw" MsgRate)"
expect "perftest_figure: ib_write_lat's t_typical and 99.9% percentile" \
	"$([ "$(perftest_figure "$tmp/lat" t_typical)" = 4002.81 ] && [ "$(perftest_figure "$tmp/lat" "99.9% percentile")" = 9987.29 ] && echo 1)" \
	"$(perftest_figure "$tmp/lat" t_typical) $(perftest_figure "$tmp/lat" "99.9% percentile")"
expect "perftest_figure: nothing for an absent column, a log without a result, a missing file" \
	"$([ -z "$(perftest_figure "$tmp/bw" t_typical)$(perftest_figure "$tmp/ucx" t_typical)$(perftest_figure "$tmp/none" t_typical)" ] && echo 1)"
expect "ucx_figure: the Final line's overall latency and bandwidth" \
	"$([ "$(ucx_figure "$tmp/ucx" lat)" = 2591.121 ] && [ "$(ucx_figure "$tmp/ucx" bw)" = 24.12 ] && [ -z "$(ucx_figure "$tmp/bw" lat)" ] && echo 1)" \
	"$(ucx_figure "$tmp/ucx" lat) $(ucx_figure "$tmp/ucx" bw)"

expect "paired_ratio higher: SHIM/NONE a pair, the median and the range" \
	"$([ "$(paired_ratio higher 10 20 10 5 10 30)" = "2.00 (pairs: 2.00 0.50 3.00, 0.50..3.00)" ] && echo 1)" \
	"$(paired_ratio higher 10 20 10 5 10 30)"
expect "paired_ratio lower: NONE/SHIM a pair; an even count's median the middle two's mean" \
	"$([ "$(paired_ratio lower 4 2 4 4 9 3 1 2)" = "1.50 (pairs: 2.00 1.00 3.00 0.50, 0.50..3.00)" ] && echo 1)" \
	"$(paired_ratio lower 4 2 4 4 9 3 1 2)"
expect "paired_ratio: a pair with a figure missing, zero or not a number shows as -, counts for nothing" \
	"$([ "$(paired_ratio higher 10 20 "" 5 10 0 inf 4 4 -1 2 1e3)" = "2.00 (pairs: 2.00 - - - - -, 2.00..2.00)" ] && [ "$(paired_ratio lower "" "")" = "n/a (no pair measured)" ] && echo 1)" \
	"$(paired_ratio higher 10 20 "" 5 10 0 inf 4 4 -1 2 1e3) / $(paired_ratio lower "" "")"

# interleave's order, with timed_pair replaced by a recorder (in a subshell: the real one stays).
order=$(
	# shellcheck disable=SC2317 # called by interleave
	timed_pair() { printf '%s:%s ' "$1" "$2"; [ "$1" != fails.none.2 ]; }
	interleave x 3 srv -- cli
	printf "| "
	: >"$WORK/y.us"
	interleave y 2 srv -- cli
	printf "| "
	interleave fails 3 srv -- cli || echo "returned 1"
)
expect "interleave: the shim first in odd pairs, none first in even ones; a timed NAME is pair 1's" \
	"$([ "$order" = "x:- x.none.1:none x.none.2:none x.shim.2:- x.shim.3:- x.none.3:none | y.none.1:none y.none.2:none y.shim.2:- | fails:- fails.none.1:none fails.none.2:none returned 1" ] && echo 1)" "$order"

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
