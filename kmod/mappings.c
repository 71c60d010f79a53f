// SPDX-License-Identifier: GPL-2.0
/*
 * Mappings: a responder region's pinned pages mapped into a sender's address space, so
 * that its shim places a same-host write with one copy and no system call (design.md,
 * section 4, "The mapped path"). lifecycle.c grants one after checking the pair as a
 * submission would; this file keeps them, maps them, and revokes them.
 *
 * Revocation is what makes the mapping safe: it clears the mapping's validity word in the
 * sender's status words, then zaps every PTE of it (unmap_mapping_range, which flushes the
 * TLBs), all before it returns, and lifecycle.c revokes before anything the mapping shows
 * is let go (a region is unpinned only after its mappings are revoked). A touch after the
 * zap faults, and the fault of a revoked mapping inserts its sink page: a write racing a
 * revocation lands there, never in memory the region no longer holds.
 *
 * What no call of ours announces, an MR deregistered or a QP destroyed past the shim, or a
 * process's exit, a live mapping holds up: it keeps restrack references on both QPs and
 * the MR, so the RDMA core's deletion waits for them (before the driver's destroy, while
 * a NIC would still take the write), and a reaper revokes within pair_idle_ms a mapping
 * whose QP or MR is being deleted or whose session is no longer live, letting it go on.
 *
 * Locks, in order: a pair slot's lock (pairs.c poisons under it), unload_maps_lock, a
 * mapping's lock, then the address space's i_mmap_rwsem (unmap_mapping_range). The fault
 * handler runs under the faulting process's mmap_lock and takes only a mapping's lock;
 * nothing here takes an mmap_lock, so a revocation never waits for another process's
 * address space, and never for more than a batch of a fault's PTE insertions (64).
 */
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mount.h>
#include <linux/xarray.h>
#include <rdma/restrack.h>

#include "unload_kmod.h"
#include "compat.h"

/* Guards unload_maps, every session's map_slots and status words, and each mapping's node. */
static DEFINE_MUTEX(unload_maps_lock);
static LIST_HEAD(unload_maps);		/* live (unrevoked) mappings */
/* Live and revoked mappings by id, for mmap; ids make their mmap offsets unique. */
static DEFINE_XARRAY_ALLOC(unload_map_ids);
static atomic64_t unload_map_cookies = ATOMIC64_INIT(0);
static void unload_maps_reap(struct work_struct *work);
static DECLARE_DELAYED_WORK(unload_maps_reaper, unload_maps_reap);

struct unload_mapping {
	struct list_head node;		/* in unload_maps while live (unload_maps_lock) */
	bool live;			/* not revoked; under unload_maps_lock */
	struct list_head reap;		/* a revocation's list of references to put */
	struct kref ref;		/* while live, plus one per VMA */
	u32 id;				/* in unload_map_ids: its mmap offset */
	struct unload_session *sess;	/* the sender's: compared only (its close revokes) */
	u32 slot;			/* its word in sess's status words, while live */
	u64 cookie;			/* the word's value while live (unique) */
	/* What it was granted on: compared only, by the revocations. */
	struct ib_device *dev;		/* the sender QP's device */
	u32 qpn;
	struct ib_device *peer_dev;	/* the responder QP's (and region's) device */
	u32 peer_qpn;
	struct unload_session *peer;
	struct unload_region *region;
	struct address_space *as;	/* the sender file's: where its PTEs are */
	/* Restrack references while live: a deletion past us waits for the reaper. */
	struct ib_mr *mr;
	struct rdma_restrack_entry *qp_res[2];	/* the sender's, the responder's */
	unsigned long npages;		/* the region's pinned pages, all mapped */
	struct page *sink;		/* what a revoked mapping's faults insert */
	struct page *busy_page;		/* the responder session's busy page (a reference),
					 * shown read-only by the view while live */
	u32 busy_slot;			/* the responder QP's byte in it */
	struct mutex lock;		/* guards pages; held while a fault inserts PTEs
					 * (a batch) and while a revocation clears pages
					 * and zaps */
	struct page **pages;		/* the region's pinned pages; NULL once revoked */
};

static u64 unload_map_offset(u32 id)
{
	return UNLOAD_MMAP_MAP_BASE + (u64)id * UNLOAD_MMAP_MAP_STRIDE;
}

static u64 unload_busy_view_offset(u32 id)
{
	return UNLOAD_MMAP_BUSY_VIEW_BASE + ((u64)id << PAGE_SHIFT);
}

static void unload_map_free(struct kref *ref)
{
	struct unload_mapping *m = container_of(ref, struct unload_mapping, ref);

	/* Under the lock an mmap looks ids up with: it never finds a freed mapping. */
	mutex_lock(&unload_maps_lock);
	m->sess->nr_maps--;
	xa_erase(&unload_map_ids, m->id);
	mutex_unlock(&unload_maps_lock);
	put_page(m->busy_page);
	__free_page(m->sink);
	mutex_destroy(&m->lock);
	kfree(m);
}

static void unload_map_put(struct unload_mapping *m)
{
	kref_put(&m->ref, unload_map_free);
}

/* --- revocation ------------------------------------------------------------------- */

/*
 * Take m off the live list and its slot, clear its word, and zap its PTEs: once this
 * returns, no CPU writes the region through m. The caller holds unload_maps_lock and
 * puts the live reference after dropping it.
 */
static void unload_map_revoke_locked(struct unload_mapping *m)
{
	lockdep_assert_held(&unload_maps_lock);
	list_del(&m->node);
	m->live = false;
	/* The word first: a shim that sees it cleared does not trust the copy it made. */
	smp_store_release(&m->sess->status[m->slot], 0);
	clear_bit(m->slot, m->sess->map_slots);
	mutex_lock(&m->lock);
	m->pages = NULL;
	unmap_mapping_range(m->as, unload_map_offset(m->id), m->npages << PAGE_SHIFT, 1);
	unmap_mapping_range(m->as, unload_busy_view_offset(m->id), PAGE_SIZE, 1);
	mutex_unlock(&m->lock);
}

/* The references a revoked mapping held; after unload_maps_lock is dropped. */
static void unload_map_let_go(struct unload_mapping *m)
{
	unload_region_mr_put(m->mr);
	rdma_restrack_put(m->qp_res[0]);
	rdma_restrack_put(m->qp_res[1]);
	m->mr = NULL;
}

/* Revoke every live mapping match() selects. */
static void unload_maps_revoke(bool (*match)(const struct unload_mapping *m, const void *arg),
			       const void *arg)
{
	struct unload_mapping *m, *tmp;
	LIST_HEAD(gone);

	mutex_lock(&unload_maps_lock);
	list_for_each_entry_safe(m, tmp, &unload_maps, node)
		if (match(m, arg)) {
			unload_map_revoke_locked(m);
			list_add(&m->reap, &gone);
		}
	mutex_unlock(&unload_maps_lock);
	list_for_each_entry_safe(m, tmp, &gone, reap) {
		unload_map_let_go(m);
		unload_map_put(m);	/* the live reference */
	}
}

/* Is res's object being deleted, or replaced under its id (drained for its destroy)? */
static bool unload_res_dying(struct ib_device *dev, enum rdma_restrack_type type,
			     struct rdma_restrack_entry *res)
{
	struct rdma_restrack_entry *now;

	if (!READ_ONCE(res->valid))
		return true;
	now = rdma_restrack_get_byid(dev, type, res->id);
	if (IS_ERR(now))
		return true;
	rdma_restrack_put(now);
	return now != res;
}

static bool unload_map_dying(const struct unload_mapping *m, const void *arg)
{
	return unload_res_dying(m->peer_dev, RDMA_RESTRACK_MR, &m->mr->res) ||
	       unload_res_dying(m->dev, RDMA_RESTRACK_QP, m->qp_res[0]) ||
	       unload_res_dying(m->peer_dev, RDMA_RESTRACK_QP, m->qp_res[1]) ||
	       !unload_session_live(m->sess) || !unload_session_live(m->peer);
}

static void unload_maps_reap(struct work_struct *work)
{
	bool live;

	unload_maps_revoke(unload_map_dying, NULL);
	mutex_lock(&unload_maps_lock);
	live = !list_empty(&unload_maps);
	mutex_unlock(&unload_maps_lock);
	if (live)
		schedule_delayed_work(&unload_maps_reaper,
				      msecs_to_jiffies(READ_ONCE(unload_pair_idle_ms)));
}

/* The module goes: no mapping is live (every session closed), the reaper may be pending. */
void unload_maps_exit(void)
{
	cancel_delayed_work_sync(&unload_maps_reaper);
}

static bool unload_map_on_region(const struct unload_mapping *m, const void *r)
{
	return m->region == r;
}

/* Region r is unpublished (r->retired set): revoke its mappings before it is unpinned. */
void unload_maps_revoke_region(struct unload_region *r)
{
	unload_maps_revoke(unload_map_on_region, r);
}

struct unload_map_qp {
	struct ib_device *dev;
	u32 qpn;
};

static bool unload_map_on_qp(const struct unload_mapping *m, const void *arg)
{
	const struct unload_map_qp *q = arg;

	return (m->dev == q->dev && m->qpn == q->qpn) ||
	       (m->peer_dev == q->dev && m->peer_qpn == q->qpn);
}

/* QP (dev, qpn) was unregistered, registered again (a state change) or poisoned. */
void unload_maps_revoke_qp(struct ib_device *dev, u32 qpn)
{
	struct unload_map_qp q = { .dev = dev, .qpn = qpn };

	unload_maps_revoke(unload_map_on_qp, &q);
}

static bool unload_map_on_device(const struct unload_mapping *m, const void *dev)
{
	return m->dev == dev || m->peer_dev == dev;
}

/* dev is being removed (no longer live): revoke what it carries. */
void unload_maps_revoke_device(struct ib_device *dev)
{
	unload_maps_revoke(unload_map_on_device, dev);
}

static bool unload_map_of_session(const struct unload_mapping *m, const void *sess)
{
	return m->sess == sess || m->peer == sess;
}

/* sess is closing: its own mappings and every mapping of its regions. */
void unload_maps_revoke_session(struct unload_session *sess)
{
	unload_maps_revoke(unload_map_of_session, sess);
}

struct unload_map_slot {
	struct unload_session *sess;
	u32 slot;
	u64 cookie;
};

static bool unload_map_is(const struct unload_mapping *m, const void *arg)
{
	const struct unload_map_slot *s = arg;

	return m->sess == s->sess && m->slot == s->slot && m->cookie == s->cookie;
}

/*
 * Revoke sess's mapping in slot with cookie, if it is live: UNMAP, or a grant whose answer
 * could not be written back. Revoked already (or never sess's): nothing is touched.
 */
void unload_map_withdraw(struct unload_session *sess, u32 slot, u64 cookie)
{
	struct unload_map_slot s = { .sess = sess, .slot = slot, .cookie = cookie };

	unload_maps_revoke(unload_map_is, &s);
}

long unload_ioctl_unmap(struct unload_session *sess, void __user *arg)
{
	struct unload_unmap req;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.reserved[0] || req.reserved[1])
		return -EINVAL;
	if (req.slot >= UNLOAD_MAX_MAPPINGS || !req.cookie)
		return -ENOENT;
	unload_map_withdraw(sess, req.slot, req.cookie);
	return 0;
}

/* --- the caller's proof: the responder's mem file ------------------------------------ */

/*
 * The f_op of procfs's /proc/<pid>/mem files, which a module cannot name: learnt once, at
 * load, by opening the loader's own mem file on a procfs mount of the module's own
 * (kern_mount: in no mount namespace, so nothing any namespace mounts over /proc is ever
 * looked at), and read-only after. A file with it and FMODE_WRITE was opened by a process
 * with ptrace attach rights over the process whose mm it holds (procfs's mem_open).
 */
static const struct file_operations *unload_proc_mem_fops __ro_after_init;

void __init unload_maps_init(void)
{
	struct file_system_type *proc_type = get_fs_type("proc");
	struct vfsmount *mnt;
	struct file *f;

	if (!proc_type)
		goto out_off;
	mnt = kern_mount(proc_type);
	module_put(proc_type->owner);	/* get_fs_type's reference: the mount holds its own */
	if (IS_ERR(mnt))
		goto out_off;
	f = file_open_root_mnt(mnt, "self/mem", O_RDONLY, 0);
	if (!IS_ERR(f)) {
		unload_proc_mem_fops = f->f_op;
		fput(f);
	}
	kern_unmount(mnt);
	if (unload_proc_mem_fops)
		return;
out_off:
	pr_warn("unload: procfs's mem file did not open: no mappings will be granted\n");
}

/*
 * fd's file, referenced (the caller fputs it), if it is a procfs mem file open for
 * writing; else NULL and *err says why not. No lock is taken, nothing is looked up by
 * path: a file reference and two compares.
 */
struct file *unload_mem_file_get(int fd, int *err)
{
	struct file *f;

	*err = -EPERM;
	if (fd < 0)
		return NULL;
	*err = -EOPNOTSUPP;
	if (!unload_proc_mem_fops)
		return NULL;
	*err = -EBADF;
	f = fget(fd);
	if (!f)
		return NULL;
	if (f->f_op == unload_proc_mem_fops && (f->f_mode & FMODE_WRITE))
		return f;
	fput(f);
	*err = -EPERM;
	return NULL;
}

/*
 * Is mem (from unload_mem_file_get) the mem file of mm? The file holds its mm (mmgrab) as
 * the caller's session holds mm: two live objects, compared only.
 */
bool unload_mem_file_of(const struct file *mem, const struct mm_struct *mm)
{
	return mem->private_data == mm;
}

/* --- granting ------------------------------------------------------------------- */

/*
 * Publish a mapping of region r (of the pair's peer) for sess, the pair checked by the
 * caller, who still holds the pair's slot and a user reference on r. Rechecked here,
 * under unload_maps_lock, is what a revocation that ran since the caller's checks would
 * have found nothing to revoke for: r still published, both devices live, both QPs
 * registered and unpoisoned. A revocation that comes later finds the mapping. mr: r's live
 * MR, with a restrack reference the mapping takes over when granted.
 */
int unload_map_grant(struct unload_session *sess, struct file *file,
		     const struct unload_pair *pr, struct unload_region *r, struct ib_mr *mr,
		     struct unload_map *out)
{
	struct unload_mapping *m;
	bool poisoned;
	int busy;
	u32 slot;
	int ret;

	m = kzalloc(sizeof(*m), GFP_KERNEL_ACCOUNT);
	if (!m)
		return -ENOMEM;
	m->sink = alloc_page(GFP_KERNEL_ACCOUNT | __GFP_ZERO);
	if (!m->sink) {
		ret = -ENOMEM;
		goto err_free_map;
	}
	kref_init(&m->ref);
	mutex_init(&m->lock);
	m->sess = sess;
	m->dev = pr->dev;
	m->qpn = pr->qpn;
	m->peer_dev = pr->peer_dev;
	m->peer_qpn = pr->peer_qpn;
	m->peer = pr->peer;
	m->region = r;
	m->as = file->f_mapping;
	m->npages = r->npages;
	m->pages = r->pages;
	m->mr = mr;
	m->qp_res[0] = pr->s.res;
	m->qp_res[1] = pr->p.res;
	m->cookie = atomic64_inc_return(&unload_map_cookies);
	ret = xa_alloc(&unload_map_ids, &m->id, m, XA_LIMIT(0, UNLOAD_MAX_MAP_IDS - 1),
		       GFP_KERNEL_ACCOUNT);
	if (ret) {
		ret = ret == -EBUSY ? -ENOSPC : ret;
		goto err_free_sink;
	}

	mutex_lock(&unload_maps_lock);
	/* Revoked mappings still mapped count too: each holds an id and a sink page. */
	ret = -ENOSPC;
	if (sess->nr_maps >= UNLOAD_MAX_SESSION_MAPS)
		goto err_unlock;
	ret = -EACCES;
	rcu_read_lock();
	if (READ_ONCE(r->retired) || !unload_device_live(pr->dev) ||
	    !unload_device_live(pr->peer_dev) ||
	    !unload_qp_registered(sess, pr->dev, pr->qpn, &poisoned) || poisoned ||
	    !unload_qp_registered(pr->peer, pr->peer_dev, pr->peer_qpn, &poisoned) || poisoned) {
		rcu_read_unlock();
		goto err_unlock;
	}
	busy = unload_qp_busy_slot(pr->peer, pr->peer_dev, pr->peer_qpn);
	rcu_read_unlock();
	if (busy < 0)
		goto err_unlock;
	m->busy_slot = busy;
	slot = find_first_zero_bit(sess->map_slots, UNLOAD_MAX_MAPPINGS);
	ret = -ENOSPC;
	if (slot >= UNLOAD_MAX_MAPPINGS)
		goto err_unlock;
	set_bit(slot, sess->map_slots);
	sess->nr_maps++;
	m->slot = slot;
	/* Both views' QPs are held by the caller's pair: these references are the mapping's. */
	if (!rdma_restrack_get(m->qp_res[0]))
		goto err_clear_slot;
	if (!rdma_restrack_get(m->qp_res[1]))
		goto err_put_sender_qp;
	/* The responder session lives while the pair is held: its page, for the view. */
	m->busy_page = pr->peer->busy_page;
	get_page(m->busy_page);
	list_add(&m->node, &unload_maps);
	m->live = true;
	smp_store_release(&sess->status[slot], m->cookie);
	mutex_unlock(&unload_maps_lock);
	schedule_delayed_work(&unload_maps_reaper, msecs_to_jiffies(READ_ONCE(unload_pair_idle_ms)));

	out->slot = slot;
	out->cookie = m->cookie;
	out->iova = r->iova;
	out->length = r->length;
	out->mmap_offset = unload_map_offset(m->id);
	out->mmap_length = (u64)r->npages << PAGE_SHIFT;
	out->page_offset = offset_in_page(r->addr);
	out->busy_slot = m->busy_slot;
	out->busy_offset = unload_busy_view_offset(m->id);
	return 0;

err_put_sender_qp:
	rdma_restrack_put(m->qp_res[0]);
err_clear_slot:
	ret = -EACCES;
	clear_bit(slot, sess->map_slots);
	sess->nr_maps--;
err_unlock:
	xa_erase(&unload_map_ids, m->id);
	mutex_unlock(&unload_maps_lock);
err_free_sink:
	__free_page(m->sink);
err_free_map:
	kfree(m);
	return ret;
}

/* --- the mapping in the sender's address space --------------------------------------- */

static void unload_map_vm_open(struct vm_area_struct *vma)
{
	struct unload_mapping *m = vma->vm_private_data;

	kref_get(&m->ref);
}

static void unload_map_vm_close(struct vm_area_struct *vma)
{
	unload_map_put(vma->vm_private_data);
}

/*
 * The window a fault maps at once (64 MiB at most, aligned in the region): a mapping
 * whose pages each faulted on first touch made a workload over many pages pay a trap for
 * thousands of writes, and the policy's first samples of the mapped path, on fresh pages,
 * dearer than the path is (adaptive then chose another for good). The pages are pinned
 * already; their PTEs cost a page-table page per 2 MiB.
 */
#define UNLOAD_MAP_WINDOW_PAGES	16384UL
/* PTEs inserted per hold of a mapping's lock: all a revocation waits for. */
#define UNLOAD_MAP_BATCH_PAGES	64UL

/*
 * The rest of the faulting page's window, a batch per hold of m's lock. A revocation
 * between batches cleared pages and zapped the VMA (linked since its mmap returned, so the
 * zap finds every PTE inserted before); the next batch sees pages cleared and stops.
 */
static void unload_map_fill_window(struct vm_fault *vmf, struct unload_mapping *m,
				   unsigned long idx)
{
	struct vm_area_struct *vma = vmf->vma;
	unsigned long base = unload_map_offset(m->id) >> PAGE_SHIFT;
	unsigned long lo = vma->vm_pgoff - base, hi = lo + vma_pages(vma);
	unsigned long first = round_down(idx, UNLOAD_MAP_WINDOW_PAGES);
	unsigned long i = max(first, lo), end = min3(first + UNLOAD_MAP_WINDOW_PAGES, hi, m->npages);
	unsigned long stop;

	for (; i < end; i = stop) {
		stop = min(i + UNLOAD_MAP_BATCH_PAGES, end);
		if (fatal_signal_pending(current))
			return;
		mutex_lock(&m->lock);
		if (!m->pages) {
			mutex_unlock(&m->lock);
			return;
		}
		for (; i < stop; i++) {
			unsigned long addr = vma->vm_start + ((i - lo) << PAGE_SHIFT);

			if (vmf_insert_pfn(vma, addr, page_to_pfn(m->pages[i])) != VM_FAULT_NOPAGE) {
				mutex_unlock(&m->lock);
				return;
			}
		}
		mutex_unlock(&m->lock);
		cond_resched();
	}
}

/*
 * Insert the PTE of one page: the region's while the mapping is live, else the sink; then
 * the rest of its window. The PTE is special (VM_PFNMAP): it holds no reference, which is
 * why a revocation zaps every PTE before the region may be unpinned, and the sink lives as
 * long as the last VMA.
 */
static vm_fault_t unload_map_fault(struct vm_fault *vmf)
{
	struct unload_mapping *m = vmf->vma->vm_private_data;
	unsigned long idx = vmf->pgoff - (unload_map_offset(m->id) >> PAGE_SHIFT);
	struct page *page;
	vm_fault_t ret;

	if (idx >= m->npages)
		return VM_FAULT_SIGBUS;
	mutex_lock(&m->lock);
	page = m->pages ? m->pages[idx] : m->sink;
	ret = vmf_insert_pfn(vmf->vma, vmf->address, page_to_pfn(page));
	mutex_unlock(&m->lock);
	if (ret == VM_FAULT_NOPAGE && page != m->sink)
		unload_map_fill_window(vmf, m, idx);
	return ret;
}

static const struct vm_operations_struct unload_map_vm_ops = {
	.open = unload_map_vm_open,
	.close = unload_map_vm_close,
	.fault = unload_map_fault,
};

/* The view of the responder's busy page while the mapping is live, else the sink. */
static vm_fault_t unload_busy_view_fault(struct vm_fault *vmf)
{
	struct unload_mapping *m = vmf->vma->vm_private_data;
	struct page *page;
	vm_fault_t ret;

	if (vmf->pgoff != unload_busy_view_offset(m->id) >> PAGE_SHIFT)
		return VM_FAULT_SIGBUS;
	mutex_lock(&m->lock);
	page = m->pages ? m->busy_page : m->sink;
	ret = vmf_insert_pfn(vmf->vma, vmf->address, page_to_pfn(page));
	mutex_unlock(&m->lock);
	return ret;
}

static const struct vm_operations_struct unload_busy_view_vm_ops = {
	.open = unload_map_vm_open,
	.close = unload_map_vm_close,
	.fault = unload_busy_view_fault,
};

/*
 * mmap of mapping id (view: its view of the responder's busy page, one page, read-only):
 * by its sender's session and process only, shared, never executable, whole; not copied
 * into a child, not dumped, not pinnable by anyone (VM_IO | VM_PFNMAP: an MR cannot be
 * registered on it).
 */
int unload_map_mmap(struct unload_session *sess, struct vm_area_struct *vma, u32 id, bool view)
{
	unsigned long size = vma->vm_end - vma->vm_start;
	struct unload_mapping *m;

	if (vma->vm_mm != sess->mm)
		return -EPERM;
	if (vma->vm_flags & (VM_EXEC | (view ? VM_WRITE : 0)))
		return -EPERM;
	mutex_lock(&unload_maps_lock);
	m = xa_load(&unload_map_ids, id);
	if (m && (m->sess != sess || !m->live || vma->vm_file->f_mapping != m->as ||
		  size != (view ? PAGE_SIZE : m->npages << PAGE_SHIFT)))
		m = NULL;
	if (m)
		kref_get(&m->ref);	/* the VMA's */
	mutex_unlock(&unload_maps_lock);
	if (!m)
		return -EINVAL;
	vma->vm_private_data = m;
	vma->vm_ops = view ? &unload_busy_view_vm_ops : &unload_map_vm_ops;
	unload_vm_flags_clear(vma, VM_MAYEXEC | (view ? VM_MAYWRITE : 0));
	unload_vm_flags_set(vma, VM_PFNMAP | VM_IO | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY);
	return 0;
}
