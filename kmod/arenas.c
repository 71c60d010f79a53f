// SPDX-License-Identifier: GPL-2.0
/*
 * Staging arenas: zeroed kernel pages a session allocates, userspace maps (mmap at the
 * arena's offset) and registers as an MR; charged to the opener's RLIMIT_MEMLOCK.
 */
#include <linux/mm.h>
#include <linux/sched/signal.h>
#include <linux/uaccess.h>

#include "unload_kmod.h"
#include "compat.h"

/* Largest arena: keeps page arrays well inside kvmalloc's limits. */
#define UNLOAD_MAX_ARENA	(1ULL << 30)

static void unload_arena_destroy(struct unload_session *sess, struct unload_arena_obj *a)
{
	unsigned long i;

	/* Mappings hold their own page references: the pages outlive us if mapped. */
	for (i = 0; i < a->npages; i++)
		put_page(a->pages[i]);
	unload_session_uncharge(sess, a->npages);
	kvfree(a->pages);
	kmem_cache_free(unload_arena_cache, a);
}

long unload_ioctl_arena_alloc(struct unload_session *sess, struct file *file,
			      void __user *arg)
{
	struct unload_arena req;
	struct unload_arena_obj *a;
	unsigned long i, npages;
	u32 id;
	long ret;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.id || req.mmap_offset || req.reserved[0] || req.reserved[1])
		return -EINVAL;
	if (!req.length || req.length > UNLOAD_MAX_ARENA)
		return -EINVAL;
	npages = PAGE_ALIGN(req.length) >> PAGE_SHIFT;

	a = kmem_cache_zalloc(unload_arena_cache, GFP_KERNEL_ACCOUNT);
	if (!a)
		return -ENOMEM;
	ret = unload_session_charge(sess, npages);
	if (ret)
		goto err_free_arena;
	a->pages = kvcalloc(npages, sizeof(*a->pages), GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	if (!a->pages) {
		ret = -ENOMEM;
		goto err_uncharge;
	}
	for (i = 0; i < npages; i++) {
		/* Charged to the caller's memory cgroup, like the memlock above. */
		a->pages[i] = alloc_page(GFP_KERNEL_ACCOUNT | __GFP_ZERO | __GFP_NOWARN);
		if (!a->pages[i]) {
			ret = -ENOMEM;
			goto err_free_pages;
		}
		a->npages = i + 1;
		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			goto err_free_pages;
		}
	}

	mutex_lock(&sess->lock);
	ret = sess->dead ? -ENODEV :
		xa_alloc(&sess->arenas, &id, a, XA_LIMIT(0, 0xffff), GFP_KERNEL);
	if (!ret)
		a->id = id;
	mutex_unlock(&sess->lock);
	if (ret)
		goto err_free_pages;

	req.length = (u64)npages << PAGE_SHIFT;
	req.id = a->id;
	req.mmap_offset = UNLOAD_MMAP_ARENA_BASE + (u64)a->id * UNLOAD_MMAP_ARENA_STRIDE;
	return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;

err_free_pages:
	for (i = 0; i < a->npages; i++)
		__free_page(a->pages[i]);
	kvfree(a->pages);
err_uncharge:
	unload_session_uncharge(sess, npages);
err_free_arena:
	kmem_cache_free(unload_arena_cache, a);
	return ret;
}

long unload_ioctl_arena_free(struct unload_session *sess, void __user *arg)
{
	struct unload_arena req;
	struct unload_arena_obj *a;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.reserved[0] || req.reserved[1])
		return -EINVAL;
	mutex_lock(&sess->lock);
	a = xa_erase(&sess->arenas, req.id);
	mutex_unlock(&sess->lock);
	if (!a)
		return -ENOENT;
	unload_arena_destroy(sess, a);
	return 0;
}

int unload_arena_mmap(struct unload_session *sess, struct vm_area_struct *vma, u32 id)
{
	unsigned long size = vma->vm_end - vma->vm_start;
	struct unload_arena_obj *a;
	unsigned long i;
	int ret = 0;

	mutex_lock(&sess->lock);
	a = xa_load(&sess->arenas, id);
	if (!a || size > (a->npages << PAGE_SHIFT)) {
		ret = -EINVAL;
		goto out_unlock;
	}
	unload_vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	for (i = 0; i < size >> PAGE_SHIFT && !ret; i++)
		ret = vm_insert_page(vma, vma->vm_start + i * PAGE_SIZE, a->pages[i]);
out_unlock:
	mutex_unlock(&sess->lock);
	return ret;
}


/* The session is closing: free every arena (mapped pages outlive it in their mappings). */
void unload_arenas_release(struct unload_session *sess)
{
	struct unload_arena_obj *a;
	unsigned long idx;

	xa_for_each(&sess->arenas, idx, a) {
		mutex_lock(&sess->lock);
		a = xa_erase(&sess->arenas, idx);
		mutex_unlock(&sess->lock);
		if (a)
			unload_arena_destroy(sess, a);
	}
}
