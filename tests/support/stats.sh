# shellcheck shell=bash
# Reading a UNLOAD_STATS_FILE (sourced): the shim's statistics, one block per process
# (shim/README.md, "Statistics file"). Builtins only: an awk per counter cost a second a
# program run under TCG.

# stat FILE KEY: the sum of KEY over every process block in FILE (0 without the file).
stat() {
	local k v _ s=0
	if [ -r "$1" ]; then
		while read -r k v _; do
			[ "$k" = "$2" ] && s=$((s + v))
		done <"$1"
	fi
	echo "$s"
}

# placed_here FILE: the writes placed at a peer on this host by the CPU, through the module's
# copy (writes_direct) or this process's mapping (writes_mapped).
placed_here() {
	echo $(($(stat "$1" writes_direct) + $(stat "$1" writes_mapped)))
}
