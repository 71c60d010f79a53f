#!/bin/bash
# The shim loads nothing a verbs program does not: libc and the dynamic loader alone (not libibverbs, dlopened; not libm or libstdc++, each a library to map at every start).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../support/check.sh"
SHIM=${1:?usage: needed.sh LIBUNLOAD_SHIM_SO}
command -v readelf >/dev/null || skip "no readelf (binutils)"
[ -r "$SHIM" ] || die "no $SHIM"
needed=$(readelf -d "$SHIM" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
others=$(echo "$needed" | tr ' ' '\n' | grep -v -e '^libc\.so\.' -e '^ld-linux' -e '^$' | tr '\n' ' ')
expect "the shim needs only libc and the loader" "$([ -z "$others" ] && echo 1)" "NEEDED: $needed"
finish
