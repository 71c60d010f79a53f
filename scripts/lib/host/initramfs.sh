# Build the sandbox's initramfs for one kernel ABI: static busybox, our stage-1 init,
# and just the modules needed to mount the host root (virtio-pci, 9p, overlay), in
# dependency order and decompressed (busybox insmod takes plain .ko files only).
#
#   initramfs_build <abi> <output.cpio.gz>

initramfs_modules="virtio_pci 9pnet_virtio 9p overlay"

# Dependency closure of a module, deepest first, from the kernel's modules.dep.
initramfs_closure() {
	local dep=$1 name=$2 path deps d
	path=$(grep -E "(^|/)${name}\.ko(\.[a-z]+)?:" "$dep" | head -n1 | cut -d: -f1)
	[ -n "$path" ] || return 0
	deps=$(grep -E "^${path}:" "$dep" | cut -d: -f2-)
	for d in $deps; do
		initramfs_closure "$dep" "$(basename "${d%%.ko*}")"
	done
	echo "$path"
}

initramfs_build() {
	local abi=$1 out=$2 kdir root mods m list=()
	kdir=$(kernel_dir "$abi")
	mods=$kdir/lib/modules/$abi
	root=$(mktemp -d)
	mkdir -p "$root"/{bin,dev,proc,sys,modules,host,newroot,rw}
	cp /bin/busybox "$root/bin/busybox"
	cp "$(dirname "${BASH_SOURCE[0]}")/../guest/sandbox-init" "$root/init"
	chmod +x "$root/init"
	for m in $initramfs_modules; do
		while read -r p; do
			case " ${list[*]} " in *" $p "*) continue ;; esac
			list+=("$p")
		done < <(initramfs_closure "$mods/modules.dep" "$m")
	done
	for p in "${list[@]}"; do
		local base
		base=$(basename "${p%%.ko*}").ko
		case "$p" in
		*.ko.xz) xz -dc "$mods/$p" >"$root/modules/$base" ;;
		*.ko.zst) zstd -qdc "$mods/$p" >"$root/modules/$base" ;;
		*.ko.gz) gzip -dc "$mods/$p" >"$root/modules/$base" ;;
		*) cp "$mods/$p" "$root/modules/$base" ;;
		esac
		echo "$base" >>"$root/modules/order"
	done
	# Sandboxes of one kernel may start together (ctest -j): each builds into its own
	# file and renames it into place, so none boots a half-written archive.
	local tmp
	tmp=$(mktemp "$out.XXXXXX")
	(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$tmp"
	mv "$tmp" "$out"
	rm -rf "$root"
}
