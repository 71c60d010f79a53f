// SPDX-License-Identifier: GPL-2.0
/*
 * Staging arenas: zeroed kernel pages a session allocates, userspace maps (mmap at the
 * arena's offset) and registers as an MR; charged to the opener's RLIMIT_MEMLOCK for as
 * long as the pages live (mapped, or pinned for a region), not just until ARENA_FREE.
 */
#include <linux/mm.h>
#include <linux/sched/signal.h>
#include <linux/uaccess.h>

#include "unload_kmod.h"
#include "compat.h"

/* Largest arena: keeps page arrays well inside kvmalloc's limits. */
#define UNLOAD_MAX_ARENA	(1ULL << 30)

/* The last reference: the pages go (a mapping's own page references went before). */
static void unload_arena_release(struct kref *ref)
{
	struct unload_arena_obj *a = container_of(ref, struct unload_arena_obj, ref);
	unsigned long i;

	for (i = 0; i < a->npages; i++)
		put_page(a->pages[i]);
	unload_mm_uncharge(a->mm, a->npages);
	mmdrop(a->mm);
	kvfree(a->pages);
	kmem_cache_free(unload_arena_cache, a);
}

void unload_arena_put(struct unload_arena_obj *a)
{
	kref_put(&a->ref, unload_arena_release);
}

/* Each mapping of an arena holds it: its charge lasts as long as the pages are mapped. */
static void unload_arena_vm_open(struct vm_area_struct *vma)
{
	struct unload_arena_obj *a = vma->vm_private_data;

	kref_get(&a->ref);
}

static void unload_arena_vm_close(struct vm_area_struct *vma)
{
	unload_arena_put(vma->vm_private_data);
}

static const struct vm_operations_struct unload_arena_vm_ops = {
	.open = unload_arena_vm_open,
	.close = unload_arena_vm_close,
};

/*
 * The arena whose pages [start, start + npages pages) of mm are, mapped there and equal
 * to pages (which the caller pinned), with a reference; else NULL. mm is the caller's.
 */
struct unload_arena_obj *unload_arena_of_pages(struct mm_struct *mm, u64 start,
					       unsigned long npages, struct page **pages)
{
	struct unload_arena_obj *a = NULL;
	struct vm_area_struct *vma;
	unsigned long first, i;

	mmap_read_lock(mm);
	vma = vma_lookup(mm, start);
	if (!vma || vma->vm_ops != &unload_arena_vm_ops ||
	    npages > (vma->vm_end - start) >> PAGE_SHIFT)
		goto out_unlock;
	first = (start - vma->vm_start) >> PAGE_SHIFT;	/* mappings start at page 0 */
	a = vma->vm_private_data;
	for (i = 0; i < npages; i++)
		if (pages[i] != a->pages[first + i]) {
			a = NULL;
			goto out_unlock;
		}
	kref_get(&a->ref);
out_unlock:
	mmap_read_unlock(mm);
	return a;
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
	/* Charged to the opener: only its process allocates (not a holder of the fd). */
	if (current->mm != sess->mm)
		return -EPERM;
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

	kref_init(&a->ref);	/* the session's, until ARENA_FREE or close */
	a->mm = sess->mm;
	mmgrab(a->mm);
	mutex_lock(&sess->lock);
	ret = sess->dead ? -ENODEV :
		xa_alloc(&sess->arenas, &id, a, XA_LIMIT(0, 0xffff), GFP_KERNEL_ACCOUNT);
	if (!ret)
		a->id = id;
	mutex_unlock(&sess->lock);
	if (ret) {
		unload_arena_put(a);
		return ret;
	}

	req.length = (u64)npages << PAGE_SHIFT;
	req.id = a->id;
	req.mmap_offset = UNLOAD_MMAP_ARENA_BASE + (u64)a->id * UNLOAD_MMAP_ARENA_STRIDE;
	return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;

err_free_pages:
	for (i = 0; i < a->npages; i++)
		__free_page(a->pages[i]);
	kvfree(a->pages);
err_uncharge:
	unload_mm_uncharge(sess->mm, npages);
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
	unload_arena_put(a);	/* the pages (and the charge) stay while mapped */
	return 0;
}

int unload_arena_mmap(struct unload_session *sess, struct vm_area_struct *vma, u32 id)
{
	unsigned long size = vma->vm_end - vma->vm_start;
	struct unload_arena_obj *a;
	unsigned long i;
	int ret = 0;

	/* Mapped by the opener's process only, whose memlock it is charged to. */
	if (vma->vm_mm != sess->mm)
		return -EPERM;
	mutex_lock(&sess->lock);
	a = xa_load(&sess->arenas, id);
	if (!a || size > (a->npages << PAGE_SHIFT)) {
		ret = -EINVAL;
		goto out_unlock;
	}
	unload_vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	for (i = 0; i < size >> PAGE_SHIFT && !ret; i++)
		ret = vm_insert_page(vma, vma->vm_start + i * PAGE_SIZE, a->pages[i]);
	if (!ret) {
		/* Only a complete mapping holds it: a failed mmap closes nothing. */
		vma->vm_private_data = a;
		vma->vm_ops = &unload_arena_vm_ops;
		kref_get(&a->ref);
	}
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
			unload_arena_put(a);
	}
}
