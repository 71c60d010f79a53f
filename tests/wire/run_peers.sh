#!/usr/bin/env bash
# wire_peers: unmodified peers without unload (no shim, no module on host B) against host A under the shim in every mode.
#
#   run_peers.sh FLAVOUR KMOD     (ctest runs it, with UNLOAD_BUILD_DIR set)
set -uo pipefail
flavour=${1:?kernel flavour} kmod=${2:?module}
src=$(cd "$(dirname "$0")/../.." && pwd)
guest=$src/tests/wire/peers_guest.sh
exec "$src/scripts/sandbox" --kernel "$flavour" --hosts 2 --kmod "$kmod" --kmod-on A \
	--timeout 1200 -- "$guest" :: "$guest"
