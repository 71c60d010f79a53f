#!/usr/bin/env bash
# Host half of unloadctl_install: install into a fresh prefix, have DKMS build that installed tree for the sandbox kernel here, then boot the sandbox to install, load and drive it.
#
#   unloadctl_install_host.sh FLAVOUR BUDGET_S
#
# Under TCG gcc runs ~10x slower, and the module's compile was most of the test's 13 min.
# The build stays a DKMS build of the installed dkms.conf for the guest's kernel: dkms
# add + build, with private trees under a temp dir in the build tree (never the host's
# /var/lib/dkms, /usr/src or /lib/modules), against the headers of the guest's kernel.
# The guest (unloadctl_install.sh) copies the built tree into its own /var/lib/dkms, where
# `dkms install` finds the module built and only installs it; depmod's index for that
# tree is made here too (see below).
# BUDGET_S bounds the whole run; the guest gets what the host part leaves of it.
set -uo pipefail
BUILD=${UNLOAD_BUILD_DIR:?UNLOAD_BUILD_DIR is not set (run through ctest)}
SRC=${UNLOAD_SOURCE_DIR:?UNLOAD_SOURCE_DIR is not set (run through ctest)}
FLAVOUR=${1:?usage: unloadctl_install_host.sh FLAVOUR BUDGET_S}
BUDGET=${2:?usage: unloadctl_install_host.sh FLAVOUR BUDGET_S}
# shellcheck source=tests/support/check.sh
. "$SRC/tests/support/check.sh"
# shellcheck source=scripts/lib/host/kernels.sh
. "$SRC/scripts/lib/host/kernels.sh"

for tool in dkms cmake pkg-config modinfo; do
	command -v $tool >/dev/null || skip "no $tool here (scripts/setup installs it)"
done
[ "$(id -u)" -eq 0 ] || skip "dkms add wants root"
KVER=$(kernel_abi_cached "$FLAVOUR") || skip "kernel $FLAVOUR is not set up (scripts/setup)"
KSRC=/usr/src/linux-headers-$KVER
[ -f "$KSRC/Makefile" ] || skip "no headers for $KVER in /usr/src (scripts/setup installs them)"
ARCH=$(uname -m)
VER=$(sed -n 's/^#define UNLOAD_MODULE_VERSION "\(.*\)"/\1/p' "$SRC/kmod/version.h")

# In the build tree, which the guest sees at the same path (read-only, under its overlay).
WORK=$(mktemp -d "$BUILD/unloadctl-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix
T=$WORK/dkms

echo "--- install into a fresh prefix $PREFIX"
# Each step below needs the one before: a failed one ends the test.
cmake --install "$BUILD" --prefix "$PREFIX" >"$WORK/install.log" 2>&1 ||
	{ cat "$WORK/install.log"; fail "cmake --install" "failed (its output above)"; finish; }
CTL=$PREFIX/bin/unloadctl
PC=$(find "$PREFIX" -name unload.pc | head -1)
check "unloadctl installed" test -x "$CTL"
check "pkg-config file installed" test -n "$PC"
SHIM=$(PKG_CONFIG_PATH=$(dirname "$PC") pkg-config --variable=shim unload)
INC=$(PKG_CONFIG_PATH=$(dirname "$PC") pkg-config --variable=includedir unload)
check "pkg-config names the installed shim ($SHIM)" test -f "$SHIM"
check "pkg-config's includedir holds the UAPI header ($INC)" test -f "$INC/unload.h"
check "udev rule installed, mode 0666 for the misc device unload" \
	grep -q 'SUBSYSTEM=="misc", KERNEL=="unload", MODE="0666"' "$PREFIX/lib/udev/rules.d/60-unload.rules"
check "docs installed" test -f "$PREFIX/share/doc/unload/unloadctl.md"
check "DKMS source tree installed" test -f "$PREFIX/src/unload-$VER/dkms.conf"
check "unloadctl --help exits 0 and names every command" \
	bash -c "'$CTL' --help | grep -q 'set NAME VALUE' && '$CTL' --help | grep -q 'stat \[-w SECONDS\]'"

echo "--- dkms add and build for $KVER, on the host, private trees under $T"
DKMS=(--dkmstree "$T/tree" --sourcetree "$T/src" --installtree "$T/modules")
mkdir -p "$T/tree" "$T/src" "$T/modules"
# dkms signs what it builds, with a key it makes in /var/lib/dkms unless told: keep it here.
export mok_signing_key=$T/mok.key mok_certificate=$T/mok.pub
t=$SECONDS
dkms add "${DKMS[@]}" "$PREFIX/src/unload-$VER" >"$WORK/dkms.log" 2>&1 ||
	{ cat "$WORK/dkms.log"; fail "dkms add of the installed source tree" "failed (its output above)"; finish; }
dkms build "${DKMS[@]}" "unload/$VER" -k "$KVER" -a "$ARCH" --kernelsourcedir "$KSRC" >>"$WORK/dkms.log" 2>&1 ||
	{ cat "$WORK/dkms.log" "$T/tree/unload/$VER/build/make.log"; fail "dkms build for $KVER" "failed (its output above)"; finish; }
echo "    dkms add + build: $((SECONDS - t)) s"
sed 's/^/    /' "$WORK/dkms.log"
KO=$T/tree/unload/$VER/$KVER/$ARCH/module/unload.ko
check "dkms status: unload/$VER built for $KVER" \
	bash -c "dkms status ${DKMS[*]} unload/$VER -k $KVER | grep -qx 'unload/$VER, $KVER, $ARCH: built'"
check "the DKMS-built module's vermagic is $KVER's" bash -c "modinfo -F vermagic '$KO' | grep -q '^$KVER '"

echo "--- depmod of the guest kernel's modules with the DKMS-built one in updates/dkms"
# depmod reads every one of the kernel's 4000 modules: in the guest, through 9p under
# TCG, that is 150-210 s, paid by dkms install and again by dkms remove. So the guest runs
# both with --no-depmod and puts in place the index depmod makes here, for the same tree:
# the kernel's modules (a symlink farm of the sandbox's copy) plus this unload.ko where
# dkms install puts it. depmod replaces the farm's links to the index files with its own.
R=$WORK/depmod
KMODS=$(kernel_dir "$KVER")/lib/modules/$KVER
mkdir -p "$R/lib/modules"
cp -as "$KMODS" "$R/lib/modules/" || die "cannot link the modules of $KVER under $R"
mkdir -p "$R/lib/modules/$KVER/updates/dkms"
cp "$KO" "$R/lib/modules/$KVER/updates/dkms/unload.ko"
t=$SECONDS
depmod -b "$R" "$KVER" || die "depmod -b $R $KVER failed"
echo "    depmod: $((SECONDS - t)) s"
mkdir -p "$T/index"
find "$R/lib/modules/$KVER" -maxdepth 1 -type f -name 'modules.*' -exec cp {} "$T/index/" \;
check "the index names updates/dkms/unload.ko" grep -q '^updates/dkms/unload.ko:' "$T/index/modules.dep"
check "the sandbox's modules are untouched: their modules.dep does not name unload.ko" \
	bash -c "! grep -q unload.ko '$KMODS/modules.dep'"

# The guest finds the prefix, the built DKMS trees and the index here; it fails on its own
# when a check above did not hold (a missing file), so it runs regardless.
export UNLOAD_INSTALL_PREFIX=$PREFIX UNLOAD_DKMS_BUILT=$T
left=$((BUDGET - SECONDS))
[ "$left" -ge 60 ] || die "the host part took $SECONDS s of the ${BUDGET} s budget"
echo "--- the guest (host part: $SECONDS s)"
rc=0
"$SRC/scripts/sandbox" --kernel "$FLAVOUR" --timeout "$left" -- "$SRC/tests/tools/unloadctl_install.sh" || rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
finish
