#!/usr/bin/env bash
# Build the NIC model: rdma_rxe from the sandbox kernel's own Debian source, with our
# translation cache (rxe_xlate.[ch]) and the patch that calls it (rxe-<series>.patch).
#
#   nicmodel/build.sh SERIES KDIR OUT    # e.g. 6.1 /usr/src/linux-headers-6.1.0-56-amd64 build/nicmodel
#
# The source is linux-source-SERIES (scripts/setup installs the version of the sandbox
# kernel); a different version than KDIR's kernel is refused, as its rxe would not be
# the rxe that kernel ships. Writes OUT/rdma_rxe.ko; exit 1 with the reason otherwise.
set -euo pipefail
series=${1:?series} kdir=${2:?kernel build dir} out=${3:?output dir}
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "nicmodel: $*" >&2; exit 1; }

tarball=/usr/src/linux-source-$series.tar.xz
[ -f "$tarball" ] || die "no $tarball: scripts/setup installs linux-source-$series"
[ -f "$here/rxe-$series.patch" ] || die "no patch for the $series series"
abi=$(basename "$kdir"); abi=${abi#linux-headers-}
want=$(dpkg-query -W -f='${Version}' "linux-headers-$abi" 2>/dev/null) || die "no package for $kdir"
have=$(dpkg-query -W -f='${Version}' "linux-source-$series" 2>/dev/null) || die "linux-source-$series is not installed"
[ "$want" = "$have" ] || die "linux-source-$series is $have, the kernel $abi is $want: rerun scripts/setup"

rm -rf "$out"
mkdir -p "$out"
tar -xJf "$tarball" -C "$out" --strip-components=5 --wildcards "linux-source-$series/drivers/infiniband/sw/rxe/*"
patch -s -p1 -d "$out" <"$here/rxe-$series.patch"
cp "$here/rxe_xlate.c" "$here/rxe_xlate.h" "$out/"
make -s -C "$kdir" M="$out" modules 2>&1 | grep -v '^Skipping BTF generation' || true
[ -f "$out/rdma_rxe.ko" ] || die "the build left no rdma_rxe.ko"
