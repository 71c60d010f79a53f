#!/usr/bin/env bash
# In the sandbox: the prefix installed and the module DKMS built by unloadctl_install_host.sh are installed by DKMS for the guest's kernel and loaded with modprobe; unloadctl's every command agrees with sysfs while a program runs under the shim; bad input fails and changes nothing.
#
# Runs in the sandbox as root, without --kmod: it loads (and unloads) the module itself.
# Steps print their time.
set -uo pipefail
BUILD=${UNLOAD_BUILD_DIR:?UNLOAD_BUILD_DIR is not set (run through ctest)}
SRC=${UNLOAD_SOURCE_DIR:?UNLOAD_SOURCE_DIR is not set (run through ctest)}
# shellcheck source=tests/support/check.sh
. "$SRC/tests/support/check.sh"
# wait_tcp, nap
. "$SRC/scripts/lib/guest/waiting.sh"
PREFIX=${UNLOAD_INSTALL_PREFIX:-}
BUILT=${UNLOAD_DKMS_BUILT:-}
if [ -z "$PREFIX" ] || [ -z "$BUILT" ]; then
	die "UNLOAD_INSTALL_PREFIX or UNLOAD_DKMS_BUILT is not set (run through unloadctl_install_host.sh)"
fi
DEV=${UNLOAD_TEST_DEV:-rxe0} GIDX=${UNLOAD_TEST_GID:-1} ADDR=${UNLOAD_TEST_ADDR:-192.0.2.1}
SYS=/sys/kernel/unload
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
T0=$SECONDS

step() { echo "--- [$((SECONDS - T0)) s] $*"; }
# rc EXPECTED CMD...: CMD exits with EXPECTED (its stdout kept in $WORK/out, stderr in $WORK/err).
rc() { local want=$1; shift; "$@" >"$WORK/out" 2>"$WORK/err"; local got=$?; [ "$got" -eq "$want" ] || { echo "    exit $got, wanted $want: $(cat "$WORK/err")"; return 1; }; }
# py EXPR-FILE: python3 assertions reading JSON documents; exits non-zero on the first failed one.
# The system's python3 (a pyenv shim in PATH costs seconds a call under TCG).
PY=/usr/bin/python3
[ -x $PY ] || PY=$(command -v python3)
py() { "$PY" - "$@"; }
# Every process started under TCG costs a fraction of a second, on a loaded host a second:
# files are read with builtins rather than cat, grep or bash -c.
# readv VAR FILE: VAR is FILE's first line.
readv() { IFS= read -r "$1" <"$2"; }
v='' before='' d='' d0='' d1=''
# is FILE VALUE: FILE's first line is VALUE.
is() { local v=; readv v "$1"; [ "$v" = "$2" ]; }
# has FILE TEXT: FILE contains TEXT.
has() { local c=; IFS= read -rd '' c <"$1"; [[ $c == *"$2"* ]]; }
lacks() { ! has "$@"; }
# has_line FILE ERE: a line of FILE starts with a match of ERE.
has_line() { local c=; IFS= read -rd '' c <"$1"; [[ $'\n'$c =~ $'\n'$2 ]]; }

for tool in dkms cmake setpriv ib_write_lat modprobe pkg-config; do
	command -v $tool >/dev/null || skip "no $tool here (scripts/setup installs it)"
done
KVER=$(uname -r)
ARCH=$(uname -m)
WORK=$(mktemp -d /tmp/unloadctl-test.XXXXXX)
VER=$(sed -n 's/^#define UNLOAD_MODULE_VERSION "\(.*\)"/\1/p' "$SRC/kmod/version.h")
ABI=$(sed -n 's/^#define UNLOAD_ABI_VERSION \([0-9]*\)$/\1/p' "$SRC/kmod/uapi/unload.h")
CTL=$PREFIX/bin/unloadctl
SHIM=$(PKG_CONFIG_PATH=$(dirname "$(find "$PREFIX" -name unload.pc | head -1)") pkg-config --variable=shim unload)
grep -q "^unload " /proc/modules && die "the unload module is loaded already"
[ -x "$CTL" ] || die "no unloadctl installed in $PREFIX"

step "no module loaded: every command says so"
check "status: exit 1, 'not loaded'" rc 1 "$CTL" status
check "status text says 'not loaded'" has "$WORK/out" "not loaded"
check "status -j: exit 1" rc 1 "$CTL" -j status
check "status -j: {\"loaded\": false}" py "$WORK/out" <<<'import json,sys; assert json.load(open(sys.argv[1])) == {"loaded": False}'
for c in stat ps "set mode unload"; do
	# shellcheck disable=SC2086
	check "$c: exit 1 naming modprobe" rc 1 "$CTL" $c
	check "$c: the error says how to load the module" has "$WORK/err" "modprobe unload"
done
check "set mode bogus: exit 2 before looking for the module" rc 2 "$CTL" set mode bogus

step "dkms install for $KVER of the module DKMS built on the host"
# The guest's /dev is a bare devtmpfs: dkms needs /dev/fd for its <(...) redirections.
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
# Where an admin's dkms add + build would have left them: the tree in /var/lib/dkms (the
# guest's tmpfs overlay), its source link to the copy of the source in /usr/src.
HOSTKO=$BUILT/tree/unload/$VER/$KVER/$ARCH/module/unload.ko
check "the host's DKMS build is for this kernel ($KVER)" test -f "$HOSTKO"
mkdir -p /var/lib/dkms
if ! { cp -a "$BUILT/tree/unload" /var/lib/dkms/ && cp -a "$BUILT/src/unload-$VER" /usr/src/ &&
	ln -sfn "/usr/src/unload-$VER" "/var/lib/dkms/unload/$VER/source"; }; then
	die "copying the DKMS tree into /var/lib/dkms"
fi
# depmod here reads the kernel's 4000 modules through 9p under TCG (150-210 s, twice):
# dkms runs without it, and the index depmod made on the host for this very tree (the
# kernel's modules plus this unload.ko in updates/dkms) goes in its place. The index
# before, kept here, is what depmod after dkms remove would make again.
LIBMOD=/lib/modules/$KVER
mkdir -p "$WORK/index.orig"
for f in "$BUILT"/index/modules.*; do
	[ ! -e "$LIBMOD/$(basename "$f")" ] || cp "$LIBMOD/$(basename "$f")" "$WORK/index.orig/"
done
t=$SECONDS
# What follows needs the module installed: a failed install ends the test.
dkms install --no-depmod "unload/$VER" -k "$KVER" >"$WORK/dkms.log" 2>&1 ||
	{ cat "$WORK/dkms.log"; fail "dkms install unload/$VER -k $KVER" "failed (its output above)"; finish; }
echo "    dkms install: $((SECONDS - t)) s"
sed 's/^/    /' "$WORK/dkms.log"
check "dkms install built nothing: no 'Building module' in its output" lacks "$WORK/dkms.log" "Building module"
check "the installed module is the host's DKMS build, byte for byte" cmp -s "$HOSTKO" "$LIBMOD/updates/dkms/unload.ko"
check "dkms status: unload/$VER installed for $KVER" \
	bash -c "dkms status unload/$VER -k $KVER | grep -qx 'unload/$VER, $KVER, $ARCH: installed'"
cp "$BUILT"/index/modules.* "$LIBMOD/" || die "copying the host's depmod index into $LIBMOD"
check "the module DKMS installed is the one modprobe finds" bash -c "modinfo -n unload | grep -q '/updates/dkms/unload.ko'"
check "modinfo finds the DKMS module, version $VER" bash -c "modinfo -F version unload | grep -qx '$VER'"
check "modprobe unload" modprobe unload
check "/sys/kernel/unload and /dev/unload exist" test -d $SYS -a -c /dev/unload
check "/dev/unload is 0666 (as uverbs*)" bash -c '[ "$(stat -c %a /dev/unload)" = 666 ]'

step "status"
check "status: exit 0" rc 0 "$CTL" status
cp "$WORK/out" "$WORK/status.txt"
check "status -j: exit 0" rc 0 "$CTL" -j status
cp "$WORK/out" "$WORK/status.json"
check "status -j agrees with sysfs: version, ABI, every tunable and its value" py "$WORK/status.json" "$SYS" "$VER" "$ABI" <<'PY'
import json, os, sys
s, root, ver, abi = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], int(sys.argv[4])
assert s["loaded"] is True and s["version"] == ver, s
assert s["abi"] == s["tool_abi"] == abi, s
files = sorted(f for f in os.listdir(root) if os.path.isfile(os.path.join(root, f)))
names = [t["name"] for t in s["tunables"]]
assert sorted(names) == files, (names, files)
for t in s["tunables"]:
    v = open(os.path.join(root, t["name"])).read().strip()
    assert str(t["value"]) == v, (t, v)
    assert ("min" in t and t["min"] <= t["value"] <= t["max"]) or v in t.get("values", []), t
PY
for f in $SYS/*; do
	[ -f "$f" ] || continue
	n=$(basename "$f")
	readv v "$f"
	check "status text shows $n = $v" has_line "$WORK/status.txt" "$n +$v "
done

step "set: the tool's ranges are the module's, bad values change nothing"
py "$WORK/status.json" >"$WORK/ranges" <<<'import json,sys
for t in json.load(open(sys.argv[1]))["tunables"]:
    if "min" in t: print(t["name"], t["min"], t["max"])'
check "status -j lists 15 numeric tunables" test "$(wc -l <"$WORK/ranges")" -eq 15
# refuses FILE VALUE: writing VALUE to FILE fails.
refuses() { ! { echo "$2" >"$1"; } 2>/dev/null; }
# set_reads NAME VALUE: unloadctl sets NAME to VALUE and sysfs reads it back.
set_reads() { rc 0 "$CTL" set "$1" "$2" && is "$SYS/$1" "$2"; }
while read -r name min max <&3; do
	readv before "$SYS/$name"
	check "set $name $((max + 1)): exit 2, unchanged" rc 2 "$CTL" set "$name" $((max + 1))
	check "$name unchanged after the refused set" is "$SYS/$name" "$before"
	check "set $name: the error names the range $min..$max" has "$WORK/err" "from $min to $max"
	check "the module refuses $name = $((max + 1)) too" refuses "$SYS/$name" $((max + 1))
	check "set $name $max: exit 0, sysfs reads $max" set_reads "$name" "$max"
	check "set $name $before: restored" rc 0 "$CTL" set "$name" "$before"
done 3<"$WORK/ranges"
for bad in "" -1 +5 0x10 12abc 4294967296 " 7"; do
	check "set cpu_budget_pct '$bad': exit 2, unchanged" rc 2 "$CTL" set cpu_budget_pct "$bad"
done
check "cpu_budget_pct unchanged by the refused values" is $SYS/cpu_budget_pct 50
check "set frobnicate 1: exit 2 (unknown tunable)" rc 2 "$CTL" set frobnicate 1
check "the error names the unknown tunable" has "$WORK/err" "unknown tunable 'frobnicate'"
check "set stats/reset 1: exit 2 (not a tunable)" rc 2 "$CTL" set stats/reset 1
check "set mode: exit 2 (missing value)" rc 2 "$CTL" set mode
check "set mode threshold -j: exit 0" rc 0 "$CTL" -j set mode threshold
check "set -j reports old and new" py "$WORK/out" <<<'import json,sys; d=json.load(open(sys.argv[1])); assert d=={"name":"mode","old":"adaptive","value":"threshold"}, d'
check "sysfs mode reads threshold" is $SYS/mode threshold
check "set mode unload as nobody: exit 1 (root only), unchanged" rc 1 "${NOBODY[@]}" "$CTL" set mode unload
check "mode still threshold" is $SYS/mode threshold
check "set mode unload" rc 0 "$CTL" set mode unload

step "a program under the installed shim: ib_write_lat server and client, mode unload"
export UNLOAD_MODE=unload
# Every write submitted to the module (UNLOAD_MAPPED=0): its own counts are what ps shows.
LD_PRELOAD=$SHIM UNLOAD_MAPPED=0 ib_write_lat -d "$DEV" -x "$GIDX" -s 64 -n 50000000 >"$WORK/srv.log" 2>&1 &
SPID=$!
wait_tcp 18515 $SPID
LD_PRELOAD=$SHIM UNLOAD_MAPPED=0 ib_write_lat -d "$DEV" -x "$GIDX" -s 64 -n 50000000 "$ADDR" >"$WORK/cli.log" 2>&1 &
CPID=$!
unset UNLOAD_MODE
for ((i = 0; i < 600; i++)); do readv d $SYS/stats/writes_direct && [ "$d" -gt 1000 ] && break; nap 0.1; done
kill -0 $SPID $CPID 2>/dev/null || { cat "$WORK/srv.log" "$WORK/cli.log"; fail "ib_write_lat server and client run under the shim" "one exited early"; finish; }
check "writes go direct: writes_direct = $(cat $SYS/stats/writes_direct)" test "$(cat $SYS/stats/writes_direct)" -gt 1000

step "ps"
readv d0 $SYS/stats/writes_direct
check "ps -j: exit 0" rc 0 "$CTL" -j ps
readv d1 $SYS/stats/writes_direct
cp "$WORK/out" "$WORK/ps.json"
check "ps -j: both ib_write_lat sessions, their pids, QPs, regions, direct writes within sysfs" \
	py "$WORK/ps.json" $SPID $CPID "$d0" "$d1" "$(cat $SYS/stats/sessions)" <<'PY'
import json, sys
ps = json.load(open(sys.argv[1]))
spid, cpid, d0, d1, nsess = map(int, sys.argv[2:])
assert len(ps) == nsess, (len(ps), nsess)  # every session (unloadctl's own is left out)
assert sorted(s["pid"] for s in ps) == sorted([spid, cpid]), ps
for s in ps:
    assert s["comm"] == "ib_write_lat" and s["uid"] == 0, s
    assert s["qps"] >= 1 and s["regions"] >= 1, s
    assert set(s["writes"]) == {"offload", "inline", "stage", "direct", "remote"}, s
    # Two counters read one after the other while copies go on: equal up to a few.
    assert abs(s["bytes"]["direct"] // 64 - s["writes"]["direct"]) <= max(2, s["writes"]["direct"] // 100), s
assert d0 <= sum(s["writes"]["direct"] for s in ps) <= d1, (d0, d1, ps)
PY
check "ps text: a line per session with its pid and command" \
	bash -c "'$CTL' ps | grep -E '^ +$SPID +0 ib_write_lat ' >/dev/null && '$CTL' ps | grep -E '^ +$CPID +0 ib_write_lat ' >/dev/null"
check "ps -j as nobody: exit 0, none of root's sessions" rc 0 "${NOBODY[@]}" "$CTL" -j ps
check "nobody sees []" is "$WORK/out" '[]'
check "ps extra: exit 2" rc 2 "$CTL" ps extra

step "stat"
snap() {
	local f n v
	for f in $SYS/stats/* $SYS/reported/*; do
		n=${f#$SYS/}
		[ "${f##*/}" = reset ] || { readv v "$f"; echo "${n#stats/} $v"; }
	done >"$1"
}
snap "$WORK/s0"
check "stat -j: exit 0" rc 0 "$CTL" -j stat
snap "$WORK/s1"
cp "$WORK/out" "$WORK/stat.json"
check "stat -j: every stats/ and reported/ file, each between sysfs before and after; direct's rate > 0" \
	py "$WORK/stat.json" "$WORK/s0" "$WORK/s1" <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
rd = lambda p: {l.split()[0]: int(l.split()[1]) for l in open(p)}
s0, s1 = rd(sys.argv[2]), rd(sys.argv[3])
got = dict(st["counters"])
for p in st["paths"]:
    src = "reported/" if p["reported"] else ""
    assert p["reported"] == (p["path"] != "direct"), p  # only direct is the module's own count
    got[src + "writes_" + p["path"]] = p["writes"]
    got[src + "bytes_" + p["path"]] = p["bytes"]
assert sorted(got) == sorted(s0), (sorted(got), sorted(s0))
for k, v in got.items():
    if k in ("sessions", "pinned_pages"):
        continue  # gauges: compared below
    assert s0[k] <= v <= s1[k], (k, s0[k], v, s1[k])
assert got["sessions"] == s0["sessions"] == 2, (got, s0)
assert got["pinned_pages"] in (s0["pinned_pages"], s1["pinned_pages"]), (got, s0, s1)
direct = [p for p in st["paths"] if p["path"] == "direct"][0]
assert direct["writes_per_s"] > 0 and st["interval_s"] > 0.5, st
assert st["unreadable"] == [], st
assert any(k.startswith("direct_denied_") for k in st["counters"]), st
PY
check "stat -w 0.5 -c 2: two reports, each with every path" \
	bash -c "'$CTL' stat -w 0.5 -c 2 >$WORK/w.txt && [ \$(grep -c '^unload statistics' $WORK/w.txt) = 2 ] && [ \$(grep -cE '^(offload|inline|stage|direct) ' $WORK/w.txt) = 8 ]"
check "stat -j -w 0.5 -c 3: three JSON lines" \
	bash -c "'$CTL' -j stat -w 0.5 -c 3 | $PY -c 'import json,sys; l=[json.loads(x) for x in sys.stdin]; assert len(l)==3'"
check "stat -j as nobody: the refusal reasons are unreadable, not shown" rc 0 "${NOBODY[@]}" "$CTL" -j stat
check "nobody: direct_denied_* and remote_refused_* listed as unreadable" py "$WORK/out" <<<'import json,sys
s=json.load(open(sys.argv[1])); u=s["unreadable"]; r=("direct_denied_", "remote_refused_")
assert u and all(n.startswith(r) for n in u) and any(n.startswith(r[1]) for n in u), u
assert not any(k.startswith(r) for k in s["counters"]), s'
for bad in "-w" "-w abc" "-w 0" "-w -1" "-c 0" "-c x" "--frob" "extra"; do
	# shellcheck disable=SC2086
	check "stat $bad: exit 2" rc 2 "$CTL" stat $bad
done
check "unknown command: exit 2" rc 2 "$CTL" frobnicate

step "stop the program, unload, uninstall"
kill $SPID $CPID 2>/dev/null
wait $SPID $CPID 2>/dev/null
for _ in $(seq 100); do is $SYS/stats/sessions 0 && break; sleep 0.1; done
check "ps -j after the program: []" bash -c "[ \"\$('$CTL' -j ps)\" = '[]' ]"
check "set mode adaptive" rc 0 "$CTL" set mode adaptive
# As an admin unloads a driver: modprobe -r leaves ib_core (a dependency rxe still uses).
check "modprobe -r unload" modprobe -r unload
check "the module is gone, ib_core stays" bash -c "! grep -q '^unload ' /proc/modules && grep -q '^ib_core ' /proc/modules"
check "status after unload: exit 1" rc 1 "$CTL" status
check "dkms remove" bash -c "dkms remove --no-depmod unload/$VER --all >/dev/null 2>&1"
check "dkms removed the module file" test ! -e "$LIBMOD/updates/dkms/unload.ko"
for f in "$BUILT"/index/modules.*; do
	n=$(basename "$f")
	if [ -e "$WORK/index.orig/$n" ]; then cp "$WORK/index.orig/$n" "$LIBMOD/"; else rm -f "$LIBMOD/$n"; fi
done
check "modinfo no longer finds the module" bash -c "! modinfo unload >/dev/null 2>&1"
check "target uninstall" bash -c "cmake --build '$BUILD' --target uninstall >$WORK/uninstall.log 2>&1"
left=$(find "$PREFIX" -type f | wc -l)
check "nothing installed is left in the prefix ($left files)" test "$left" -eq 0
step "done"
rm -rf "$WORK"
finish
