# Sandbox kernel bookkeeping, shared by scripts/setup, scripts/sandbox and CMake.
#
# A "flavour" is what the user picks (6.1, 6.12); the ABI (6.1.0-NN-amd64) is what the
# archive has today, resolved from the meta-packages and remembered in the cache.

UNLOAD_CACHE=${UNLOAD_CACHE:-$HOME/.cache/unload}
UNLOAD_KERNEL_FLAVOURS=${UNLOAD_KERNEL_FLAVOURS:-"6.1 6.12"}

# Meta-package of a flavour: the default Debian 12 kernel, or a named newer series.
kernel_meta() {
	case "$1" in
	6.1) echo linux-image-amd64 ;;
	*) echo "linux-image-$1-amd64" ;;
	esac
}

# Ask apt which linux-image-<abi> the flavour's meta-package depends on today.
kernel_abi_resolve() {
	apt-cache depends "$(kernel_meta "$1")" 2>/dev/null |
		sed -n 's/^ *Depends: linux-image-\(.*\)$/\1/p' | grep -v unsigned | head -n1
}

kernel_abi_cached() {
	[ -r "$UNLOAD_CACHE/kernels/$1.abi" ] && cat "$UNLOAD_CACHE/kernels/$1.abi"
}

kernel_dir() { echo "$UNLOAD_CACHE/kernels/$1"; }

kernel_ready() {
	local d
	d=$(kernel_dir "$1")
	[ -f "$d/.complete" ] && [ -d "/usr/src/linux-headers-$1" ]
}

kernel_install() {
	local flavour=$1 abi=$2 d tmp
	d=$(kernel_dir "$abi")
	echo "setup: installing kernel $abi (headers + unpacked image)"
	${SUDO:-} apt-get install -y -qq --no-install-recommends "linux-headers-$abi" >/dev/null
	tmp=$(mktemp -d)
	chmod 755 "$tmp" # apt downloads as _apt
	(cd "$tmp" && apt-get download -qq "linux-image-$abi" >/dev/null)
	rm -rf "$d"
	mkdir -p "$d"
	dpkg -x "$tmp"/linux-image-"$abi"_*.deb "$d"
	rm -rf "$tmp"
	# The package ships no modules.dep (its postinst makes it): build it here.
	depmod -b "$d" "$abi"
	touch "$d/.complete"
	echo "$abi" >"$UNLOAD_CACHE/kernels/$flavour.abi"
}

# The headers (Kbuild) directory of a flavour, for -DUNLOAD_KDIR.
kernel_build_dir() {
	local abi
	abi=$(kernel_abi_cached "$1") || return 1
	echo "/usr/src/linux-headers-$abi"
}
