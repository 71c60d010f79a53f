#!/bin/bash
# The NIC model (nicmodel/): bad parameters refused and nothing changed; off, rxe as shipped (no translation counted); on, a working set inside its entries hits and a footprint far beyond them misses; the bench's rows under it run.
. "$(dirname "$0")/../support/check.sh"
P=/sys/module/rdma_rxe/parameters
C=/sys/class/infiniband/rxe0/ports/1/hw_counters
BIN=$UNLOAD_BUILD_DIR/tests/nicmodel/nicmodel_xlate_writes
[ -w $P/xlate_entries ] || skip "rxe here is not the NIC model (scripts/sandbox --nic-model)"
[ -x "$BIN" ] || die "no $BIN"

# A refused write leaves the value as it was.
for bad in "xlate_entries 5" "xlate_entries 2000000" "xlate_entries abc" "xlate_miss_ns 2000001" "xlate_miss_ns -1"; do
	set -- $bad
	before=$(cat "$P/$1")
	if echo "$2" >"$P/$1" 2>/dev/null; then
		fail "$1=$2 refused" "accepted"
	else
		expect "$1=$2 refused, the value unchanged" "$([ "$(cat "$P/$1")" = "$before" ] && echo 1)" "$before -> $(cat "$P/$1")"
	fi
done

# with_entries N: rxe0 made again on d0 with an N-entry cache (read when a device is created).
with_entries() {
	rdma link delete rxe0 || die "rdma link delete rxe0"
	echo "$1" >$P/xlate_entries || die "xlate_entries=$1"
	rdma link add rxe0 type rxe netdev d0 || die "rdma link add rxe0"
}
# run NAME PAGES COUNT: the writes, then "hits misses" of the device in $hits $misses.
run() {
	"$BIN" "$2" "$3" | sed "s/^/    $1 | /"
	[ "${PIPESTATUS[0]}" -eq 0 ] || { fail "$1: the writes" "exit ${PIPESTATUS[0]}"; hits=0 misses=0; return 1; }
	hits=$(cat $C/xlate_hits) misses=$(cat $C/xlate_misses)
	echo "    $1: $hits hits, $misses misses"
}

count=20000
with_entries 0
if run off 256 $count; then
	expect "off: nothing translated through the model" "$([ "$hits" -eq 0 ] && [ "$misses" -eq 0 ] && echo 1)" "$hits hits, $misses misses"
fi

# Each 64 B write translates two pages: its source's at the requester, its target's at
# the responder (more if rxe retransmits).
echo 1000 >$P/xlate_miss_ns || die "xlate_miss_ns=1000"
with_entries 1024
if run fits 256 $count; then
	touches=$((hits + misses))
	expect "fits: every page translated" "$([ "$touches" -ge $((2 * count)) ] && echo 1)" "$touches of at least $((2 * count))"
	expect "fits: 257 pages in 1024 entries miss under 5 %" "$([ $((misses * 20)) -lt "$touches" ] && echo 1)" "$misses of $touches"
fi
with_entries 1024
if run spills 16384 $count; then
	touches=$((hits + misses))
	expect "spills: every page translated" "$([ "$touches" -ge $((2 * count)) ] && echo 1)" "$touches of at least $((2 * count))"
	# Random targets over 16384 pages: about 15 of 16 target translations miss.
	expect "spills: 16385 pages in 1024 entries miss over 40 %" "$([ $((misses * 10)) -gt $((touches * 4)) ] && echo 1)" "$misses of $touches"
fi
echo 0 >$P/xlate_miss_ns

# scripts/bench --nic-model's guest half, at its smallest: a row for each model state,
# path and workload, or it has rotted.
out=$(mktemp -d)
if "$UNLOAD_SOURCE_DIR/scripts/lib/guest/bench-nic-model" --out "$out" --build "$UNLOAD_BUILD_DIR" \
	--reps 1 --footprints 2 >"$out/log" 2>&1; then
	rows=$(wc -l <"$out/nic_model.tsv")
	expect "bench-nic-model: a row per model state, path and workload" "$([ "$rows" -eq 12 ] && echo 1)" "$rows of 12"
	expect "bench-nic-model: its table labelled as the model's" "$(grep -q '^UNDER THE NIC MODEL' "$out/nic_model.txt" && echo 1)"
else
	fail "bench-nic-model" "failed"
	tail -5 "$out/log" | sed 's/^/    /'
fi
finish
