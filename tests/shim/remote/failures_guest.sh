#!/bin/bash
# Guest half of shim_remote_failures: remote writes from host A while host B's module is reloaded under them, and while B's server is killed, its module removed and its link cut; every outcome as the NIC's.
. "$(dirname "$0")/lib.sh"
env=UNLOAD_PATH=remote
# The reloads first: they need B's link up; the link cut is the failure cases' last.
. "$(dirname "$0")/reload.sh"
. "$(dirname "$0")/failures.sh"
finish
