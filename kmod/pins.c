// SPDX-License-Identifier: GPL-2.0
/*
 * A process's pins: the pages the module holds pinned for its regions. One pin per page
 * range (and write access), however many of the process's sessions or regions name it,
 * charged once, before pinning, to the process's account: at most RLIMIT_MEMLOCK (unless
 * the opener has CAP_IPC_LOCK). An MR's own pages were charged to pinned_vm by the RDMA
 * core already, so this bound is the module's own; it is per process, not per session,
 * because a region's address is the owner's word (it need not be the MR's pages) and a
 * process may open any number of sessions. Pages of a staging arena mapped there are
 * charged as the arena: the pin holds the arena (and its charge) instead.
 */
#include <linux/hash.h>
#include <linux/hashtable.h>
#include <linux/mm.h>
#include <linux/sched/signal.h>

#include "unload_kmod.h"

#define UNLOAD_PIN_HASH_BITS	8

/* One process's pins, shared by its sessions. */
struct unload_acct {
	struct list_head node;		/* in unload_accts (unload_accts_lock) */
	struct mm_struct *mm;		/* compared only: its sessions hold it (mmgrab) */
	unsigned int sessions;		/* its sessions; under unload_accts_lock */
	struct mutex lock;		/* guards pins and pinned; never held while
					 * pinning (user memory may not fault in) */
	unsigned long pinned;		/* charged pages: pins, and pins under way */
	DECLARE_HASHTABLE(pins, UNLOAD_PIN_HASH_BITS);	/* by (start, npages, write) */
};

/* Every process with a session, by mm; few and short-held. */
static LIST_HEAD(unload_accts);
static DEFINE_MUTEX(unload_accts_lock);	/* guards unload_accts and each acct's sessions */

struct unload_acct *unload_acct_get(struct mm_struct *mm)
{
	struct unload_acct *acct;

	mutex_lock(&unload_accts_lock);
	list_for_each_entry(acct, &unload_accts, node)
		if (acct->mm == mm) {
			acct->sessions++;
			goto out_unlock;
		}
	acct = kzalloc(sizeof(*acct), GFP_KERNEL_ACCOUNT);
	if (acct) {
		acct->mm = mm;
		acct->sessions = 1;
		mutex_init(&acct->lock);
		hash_init(acct->pins);
		list_add(&acct->node, &unload_accts);
	}
out_unlock:
	mutex_unlock(&unload_accts_lock);
	return acct;
}

/* A session of acct's process is gone (its regions, hence its pins, went before). */
void unload_acct_put(struct unload_acct *acct)
{
	mutex_lock(&unload_accts_lock);
	if (--acct->sessions) {
		mutex_unlock(&unload_accts_lock);
		return;
	}
	list_del(&acct->node);
	mutex_unlock(&unload_accts_lock);
	mutex_destroy(&acct->lock);
	kfree(acct);
}

static u32 unload_pin_hash(u64 start, unsigned long npages, bool write)
{
	return hash_64(start ^ ((u64)npages << 1) ^ write, UNLOAD_PIN_HASH_BITS);
}

static struct unload_pin *unload_pin_find(struct unload_acct *acct, u64 start,
					  unsigned long npages, bool write)
{
	struct unload_pin *pin;

	lockdep_assert_held(&acct->lock);
	hash_for_each_possible(acct->pins, pin, node, unload_pin_hash(start, npages, write))
		if (pin->start == start && pin->npages == npages && pin->write == write)
			return pin;
	return NULL;
}

/* Pin pin's pages from the caller's (the process's own) address space. */
static int unload_pin_pages(struct unload_pin *pin)
{
	unsigned int gup = FOLL_LONGTERM | (pin->write ? FOLL_WRITE : 0);
	unsigned long done = 0;
	long ret;

	pin->pages = kvmalloc_array(pin->npages, sizeof(*pin->pages),
				    GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	if (!pin->pages)
		return -ENOMEM;
	while (done < pin->npages) {
		unsigned long n = min_t(unsigned long, pin->npages - done,
					PAGE_SIZE / sizeof(struct page *));

		ret = pin_user_pages_fast(pin->start + done * PAGE_SIZE, n, gup,
					  pin->pages + done);
		if (ret <= 0) {
			ret = ret ? ret : -EFAULT;
			goto err_unpin;
		}
		done += ret;
		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			goto err_unpin;
		}
		cond_resched();
	}
	return 0;

err_unpin:
	unpin_user_pages(pin->pages, done);
	kvfree(pin->pages);
	return ret;
}

static void unload_pin_free(struct unload_pin *pin)
{
	unpin_user_pages_dirty_lock(pin->pages, pin->npages, pin->write);
	atomic64_sub(pin->npages, &unload_pinned_pages);
	if (pin->arena)
		unload_arena_put(pin->arena);
	kvfree(pin->pages);
	kfree(pin);
}

/*
 * The pin of npages pages from start (page-aligned), for writing or not: the process's
 * own if it has it, else charged (-ENOMEM past RLIMIT_MEMLOCK, unless ipc_lock) and
 * then pinned. Put it with unload_pin_put.
 */
struct unload_pin *unload_pin_get(struct unload_acct *acct, u64 start, unsigned long npages,
				  bool write, bool ipc_lock)
{
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT, charged;
	struct unload_pin *pin, *had;
	int ret;

	mutex_lock(&acct->lock);
	pin = unload_pin_find(acct, start, npages, write);
	if (pin) {
		pin->users++;
		mutex_unlock(&acct->lock);
		return pin;
	}
	if (!ipc_lock && (npages > limit || acct->pinned > limit - npages)) {
		mutex_unlock(&acct->lock);
		return ERR_PTR(-ENOMEM);
	}
	acct->pinned += npages;		/* charged before pinning */
	mutex_unlock(&acct->lock);
	charged = npages;

	ret = -ENOMEM;
	pin = kzalloc(sizeof(*pin), GFP_KERNEL_ACCOUNT);
	if (!pin)
		goto err_uncharge;
	pin->acct = acct;
	pin->start = start;
	pin->npages = npages;
	pin->write = write;
	pin->users = 1;
	ret = unload_pin_pages(pin);
	if (ret)
		goto err_free_pin;
	atomic64_add(npages, &unload_pinned_pages);
	/* An arena's own pages: charged as the arena, which the pin now keeps. */
	pin->arena = unload_arena_of_pages(current->mm, start, npages, pin->pages);

	mutex_lock(&acct->lock);
	if (pin->arena) {
		acct->pinned -= charged;
		charged = 0;
	}
	had = unload_pin_find(acct, start, npages, write);	/* pinned meanwhile */
	if (had) {
		had->users++;
		acct->pinned -= charged;
		mutex_unlock(&acct->lock);
		unload_pin_free(pin);
		return had;
	}
	if (!pin->arena)
		hash_add(acct->pins, &pin->node, unload_pin_hash(start, npages, write));
	else
		INIT_HLIST_NODE(&pin->node);	/* never shared: its charge is the arena's */
	mutex_unlock(&acct->lock);
	return pin;

err_free_pin:
	kfree(pin);
err_uncharge:
	mutex_lock(&acct->lock);
	acct->pinned -= charged;
	mutex_unlock(&acct->lock);
	return ERR_PTR(ret);
}

void unload_pin_put(struct unload_pin *pin)
{
	struct unload_acct *acct = pin->acct;
	bool last;

	mutex_lock(&acct->lock);
	last = !--pin->users;
	if (last && !pin->arena) {
		hash_del(&pin->node);
		acct->pinned -= pin->npages;
	}
	mutex_unlock(&acct->lock);
	if (last)
		unload_pin_free(pin);
}
