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
