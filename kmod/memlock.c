// SPDX-License-Identifier: GPL-2.0
/*
 * The memlock charge, as ib_umem does it: pages the module itself pins or allocates
 * (arenas) are added to the owner's mm->pinned_vm, within RLIMIT_MEMLOCK unless the
 * opener had CAP_IPC_LOCK, and counted in the module's own total. A leaf: pins.c,
 * arenas.c and sysfs.c use it; it uses none of them.
 */
#include <linux/mm.h>
#include <linux/sched/signal.h>

#include "unload_kmod.h"

/* Every page the module holds pinned or allocated for users (stats/pinned_pages). */
atomic64_t unload_pinned_pages;

int unload_session_charge(struct unload_session *sess, unsigned long npages)
{
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	u64 pinned = atomic64_add_return(npages, &sess->mm->pinned_vm);

	if (pinned > limit && !sess->ipc_lock) {
		atomic64_sub(npages, &sess->mm->pinned_vm);
		return -ENOMEM;
	}
	atomic64_add(npages, &unload_pinned_pages);
	return 0;
}

/* Undo a charge of unload_session_charge to mm (which the caller keeps grabbed). */
void unload_mm_uncharge(struct mm_struct *mm, unsigned long npages)
{
	atomic64_sub(npages, &mm->pinned_vm);
	atomic64_sub(npages, &unload_pinned_pages);
}
