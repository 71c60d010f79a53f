#!/bin/bash
# With the module loaded, `rdma link delete` completes while a program that registered QPs with the module still runs, its device closed: through the shim (which unregisters at destroy) and by itself (the module's ib_client forgets the QP).
. "$(dirname "$0")/lib.sh"
need_shim
[ -e /dev/unload ] || skip "the kernel module is not loaded"
command -v rdma >/dev/null || skip "no rdma tool (iproute2)"
NETDEV=$(rdma link show "$DEV/1" 2>/dev/null | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
[ -n "$NETDEV" ] || skip "cannot tell the netdev of $DEV"

# rxe cannot disassociate a live verbs context, so the programs close their device first:
# what is tested is the module's hold on it.
for how in shim kmod; do
	rm -f "$WORK/linger_$how.out"
	if [ $how = shim ]; then
		env LD_PRELOAD="$SHIM" UNLOAD_MODE=unload timeout 120 "$BIN/sem_close_device" destroy 60 >"$WORK/linger_$how.out" 2>&1 &
	else
		timeout 120 "$BUILD/tests/kmod/kmod_lifecycle" linger >"$WORK/linger_$how.out" 2>&1 &
	fi
	pid=$!
	for _ in $(seq 300); do grep -q closed "$WORK/linger_$how.out" 2>/dev/null && break; sleep 0.1; done
	check "linger $how: the program registered QPs, used the device and closed it" grep -q closed "$WORK/linger_$how.out"
	# The module holds a device reference per registered QP: the delete waits for them.
	timeout 30 rdma link delete "$DEV"
	check "linger $how: rdma link delete $DEV returned while the program runs (rc $?)" [ $? -eq 0 ]
	check "linger $how: the program is still running" kill -0 $pid
	kill $pid 2>/dev/null; wait $pid 2>/dev/null
	rdma link add "$DEV" type rxe netdev "$NETDEV" || true
	check "linger $how: $DEV is back" rdma link show "$DEV/1"
done
finish
