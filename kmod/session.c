// SPDX-License-Identifier: GPL-2.0
/*
 * Sessions (one per open of /dev/unload), the QPs and regions they register, and the
 * folding of their counters pages into the statistics.
 */
#include <linux/capability.h>
#include <linux/hashtable.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>
#include <rdma/ib_cache.h>
#include <rdma/restrack.h>

#include "unload_kmod.h"
#include "compat.h"

/* Guards unload_sessions, every session's snap[] and unload_folded_base[]. */
DEFINE_MUTEX(unload_sessions_lock);
LIST_HEAD(unload_sessions);
u64 unload_folded_base[UNLOAD_NR_FOLDED];	/* closed sessions since the last reset */

static atomic64_t unload_next_session_id = ATOMIC64_INIT(0);

/* Largest region: keeps page arrays well inside kvmalloc's limits. */
#define UNLOAD_MAX_REGION	(1ULL << 34)

/* --- statistics folding ---------------------------------------------------------- */

static u64 unload_counter_read(struct unload_session *sess, unsigned int idx)
{
	const u64 *c = (const u64 *)sess->counters;

	/* The direct path's counts are the module's own, kept out of userspace's reach. */
	if (idx == UNLOAD_FOLD_WRITES + UNLOAD_PATH_DIRECT)
		return atomic64_read(&sess->direct_writes);
	if (idx == UNLOAD_FOLD_BYTES + UNLOAD_PATH_DIRECT)
		return atomic64_read(&sess->direct_bytes);
	/* writes[4], bytes[4], fences, why_not[] are laid out in fold order. */
	BUILD_BUG_ON(offsetof(struct unload_counters, why_not) != UNLOAD_FOLD_WHY * sizeof(u64));
	return READ_ONCE(c[idx]);
}

u64 unload_folded_read(unsigned int idx)
{
	struct unload_session *sess;
	u64 sum;

	mutex_lock(&unload_sessions_lock);
	sum = unload_folded_base[idx];
	list_for_each_entry(sess, &unload_sessions, node)
		sum += unload_counter_read(sess, idx) - sess->snap[idx];
	mutex_unlock(&unload_sessions_lock);
	return sum;
}

void unload_folded_reset(void)
{
	struct unload_session *sess;
	unsigned int i;

	mutex_lock(&unload_sessions_lock);
	for (i = 0; i < UNLOAD_NR_FOLDED; i++)
		unload_folded_base[i] = 0;
	list_for_each_entry(sess, &unload_sessions, node)
		for (i = 0; i < UNLOAD_NR_FOLDED; i++)
			sess->snap[i] = unload_counter_read(sess, i);
	mutex_unlock(&unload_sessions_lock);
}

/* --- memlock accounting (of arenas), as ib_umem does -------------------------------- */

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

void unload_session_uncharge(struct unload_session *sess, unsigned long npages)
{
	atomic64_sub(npages, &sess->mm->pinned_vm);
	atomic64_sub(npages, &unload_pinned_pages);
}

/* --- devices --------------------------------------------------------------------- */

/*
 * The RDMA devices the module may register QPs and regions on: added by our ib_client's
 * add, erased by its remove before it forgets their QPs and regions. Writers hold
 * unload_qp_lock, so a registration that found its device here (under that lock) is
 * seen by the removal's sweep. Entries: index -> struct unload_dev.
 */
struct unload_dev {
	struct ib_device *dev;		/* no reference: the entry lives between add/remove */
	u32 mr_hint;			/* restrack id of the last MR found (scan start);
					 * under unload_qp_lock */
	struct ib_event_handler events;	/* GID table changes (kept pairs read GIDs once) */
};

atomic_t unload_gid_generation = ATOMIC_INIT(0);

static void unload_dev_event(struct ib_event_handler *handler, struct ib_event *event)
{
	if (event->event == IB_EVENT_GID_CHANGE)
		atomic_inc(&unload_gid_generation);
}
static DEFINE_XARRAY(unload_devs);

/* Every registered QP by qpn; writers hold unload_qp_lock, readers RCU. */
static DEFINE_HASHTABLE(unload_qp_hash, 8);
/* Guards the writers of unload_qp_hash and unload_devs, and unload_dev.mr_hint. */
static DEFINE_MUTEX(unload_qp_lock);

static struct unload_dev *unload_dev_live(struct ib_device *dev)
{
	struct unload_dev *ud;

	lockdep_assert_held(&unload_qp_lock);
	ud = xa_load(&unload_devs, dev->index);
	return ud && ud->dev == dev ? ud : NULL;
}

int unload_device_added(struct ib_device *dev)
{
	struct unload_dev *ud = kzalloc(sizeof(*ud), GFP_KERNEL);
	int ret;

	if (!ud)
		return -ENOMEM;
	ud->dev = dev;
	INIT_IB_EVENT_HANDLER(&ud->events, dev, unload_dev_event);
	ib_register_event_handler(&ud->events);
	mutex_lock(&unload_qp_lock);
	ret = xa_insert(&unload_devs, dev->index, ud, GFP_KERNEL);
	mutex_unlock(&unload_qp_lock);
	if (ret)
		goto err_unregister_events;
	return 0;

err_unregister_events:
	ib_unregister_event_handler(&ud->events);
	kfree(ud);
	return ret;
}

/* --- regions ---------------------------------------------------------------------- */

static void unload_region_free_rcu(struct rcu_head *head)
{
	kmem_cache_free(unload_region_cache, container_of(head, struct unload_region, rcu));
}

static u32 unload_region_hash(struct ib_device *dev, u32 key)
{
	return hash_32(key ^ (dev->index * 0x9e3779b9U), UNLOAD_REGION_HASH_BITS);
}

/*
 * A published region of sess by (dev, rkey) if target, else by (dev, lkey), with a
 * user reference (the caller puts it with unload_region_put).
 */
struct unload_region *unload_region_find(struct unload_session *sess, bool target,
					 struct ib_device *dev, u32 key)
{
	u32 b = unload_region_hash(dev, key);
	struct unload_region *r, *found = NULL;

	rcu_read_lock();
	if (target) {
		hlist_for_each_entry_rcu(r, &sess->targets[b], tnode)
			if (r->dev == dev && r->rkey == key) {
				found = r;
				break;
			}
	} else {
		hlist_for_each_entry_rcu(r, &sess->sources[b], snode)
			if (r->dev == dev && r->lkey == key) {
				found = r;
				break;
			}
	}
	if (found && !refcount_inc_not_zero(&found->users))
		found = NULL;
	rcu_read_unlock();
	return found;
}

void unload_region_put(struct unload_region *r)
{
	if (refcount_dec_and_test(&r->users))
		complete(&r->idle);
}

/*
 * Is this restrack entry the MR r was registered for, still as registered, a user MR
 * of owner's process? The caller holds a reference on res.
 */
static bool unload_mr_matches(struct unload_session *owner, struct rdma_restrack_entry *res,
			      u32 lkey, u32 rkey, u64 iova, u64 length)
{
	struct ib_mr *mr = container_of(res, struct ib_mr, res);

	return !rdma_is_kernel_res(res) && res->task && task_tgid(res->task) == owner->owner &&
	       mr->type == IB_MR_TYPE_USER && mr->uobject && mr->lkey == lkey &&
	       mr->rkey == rkey && mr->iova == iova && mr->length == length;
}

/*
 * The live MR behind r on dev (which the caller holds), with a restrack reference: while
 * it is held, ib_dereg_mr (and a rereg that replaces the MR) waits in rdma_restrack_del.
 * NULL when the MR is gone or no longer what was registered.
 */
struct ib_mr *unload_region_mr_get(struct unload_session *owner, struct unload_region *r,
				   struct ib_device *dev)
{
	struct rdma_restrack_entry *res;

	if (dev != r->dev)
		return NULL;
	res = rdma_restrack_get_byid(dev, RDMA_RESTRACK_MR, r->mr_id);
	if (IS_ERR(res))
		return NULL;
	if (!unload_mr_matches(owner, res, r->lkey, r->rkey, r->iova, r->length)) {
		rdma_restrack_put(res);
		return NULL;
	}
	return container_of(res, struct ib_mr, res);
}

/*
 * Is mr, on which the caller holds a restrack reference, still the live MR behind r, as
 * unload_region_mr_get would find it? A rereg in place may have changed what it checks.
 */
bool unload_region_mr_still(struct unload_session *owner, struct unload_region *r,
			    struct ib_mr *mr)
{
	return mr->device == r->dev && READ_ONCE(mr->res.valid) &&
	       unload_mr_matches(owner, &mr->res, r->lkey, r->rkey, r->iova, r->length);
}

void unload_region_mr_put(struct ib_mr *mr)
{
	rdma_restrack_put(&mr->res);
}

/*
 * r is unpublished: drop the references any session's pairs keep on its MR, so the
 * program's ibv_dereg_mr (or rereg), which comes next, does not wait for the reaper.
 */
void unload_region_mr_forget(struct unload_region *r)
{
	struct unload_session *other;

	mutex_lock(&unload_sessions_lock);
	list_for_each_entry(other, &unload_sessions, node)
		unload_pairs_forget_mr(other, r->dev, r->mr_id);
	mutex_unlock(&unload_sessions_lock);
}

/*
 * Find the restrack id of the caller's MR (dev, lkey, rkey, addr, length). The RDMA core
 * numbers MRs per device cyclically and offers lookups by id only, so this probes ids:
 * from the device's last find upwards until UNLOAD_MR_SCAN_GAP ids in a row are free (a
 * new MR comes after the last one found), then [0, hint). At most UNLOAD_MR_SCAN_MAX
 * probes: an MR not found is never a direct source or target (its writes take the NIC).
 * Only registrations pay for this, never requests.
 */
#define UNLOAD_MR_SCAN_GAP	4096U
#define UNLOAD_MR_SCAN_MAX	(1U << 20)

/* Probe one id: 1 if it is the MR, 0 if not, -ENOENT if the id is free. */
static int unload_mr_probe(struct unload_session *sess, struct ib_device *dev,
			   const struct unload_region_reg *req, u32 id)
{
	struct rdma_restrack_entry *res = rdma_restrack_get_byid(dev, RDMA_RESTRACK_MR, id);
	bool match;

	if (IS_ERR(res))
		return -ENOENT;
	match = unload_mr_matches(sess, res, req->lkey, req->rkey, req->iova, req->length);
	rdma_restrack_put(res);
	return match;
}

static int unload_mr_find(struct unload_session *sess, struct ib_device *dev,
			  const struct unload_region_reg *req, u32 *id)
{
	u32 hint, cand, gap = 0, probes = 0;
	struct unload_dev *ud;
	int ret = -ESRCH, p;

	mutex_lock(&unload_qp_lock);
	ud = unload_dev_live(dev);
	hint = ud ? ud->mr_hint : 0;
	mutex_unlock(&unload_qp_lock);
	if (!ud)
		return -ENODEV;

	for (cand = hint; gap < UNLOAD_MR_SCAN_GAP && probes < UNLOAD_MR_SCAN_MAX &&
	     cand >= hint; cand++, probes++) {
		p = unload_mr_probe(sess, dev, req, cand);
		gap = p == -ENOENT ? gap + 1 : 0;
		if (p == 1) {
			ret = 0;
			goto found;
		}
		if (!(probes & 1023)) {
			if (fatal_signal_pending(current))
				return -EINTR;
			cond_resched();
		}
	}
	for (cand = 0; cand < hint && probes < UNLOAD_MR_SCAN_MAX; cand++, probes++) {
		if (unload_mr_probe(sess, dev, req, cand) == 1) {
			ret = 0;
			goto found;
		}
		if (!(probes & 1023)) {
			if (fatal_signal_pending(current))
				return -EINTR;
			cond_resched();
		}
	}
	return ret;

found:
	*id = cand;
	mutex_lock(&unload_qp_lock);
	ud = unload_dev_live(dev);
	if (ud)
		ud->mr_hint = cand;
	mutex_unlock(&unload_qp_lock);
	return 0;
}

/* Unpublish r from the session's tables; the caller holds sess->lock. */
static void unload_region_unpublish(struct unload_session *sess, struct unload_region *r)
{
	lockdep_assert_held(&sess->lock);
	if (r->target)
		hlist_del_rcu(&r->tnode);
	hlist_del_rcu(&r->snode);
	xa_erase(&sess->region_ids, r->handle);
	sess->region_pages -= r->npages;
}

/*
 * Retire a region already unpublished: drop the published reference, wait for the
 * copies in flight, unpin, free after RCU readers.
 */
static void unload_region_retire(struct unload_region *r)
{
	unload_region_put(r);
	wait_for_completion(&r->idle);
	if (r->npages) {
		unpin_user_pages_dirty_lock(r->pages, r->npages, r->target);
		atomic64_sub(r->npages, &unload_pinned_pages);
	}
	kvfree(r->pages);
	call_rcu(&r->rcu, unload_region_free_rcu);
}

/*
 * Pin a region's pages from the caller's (the opener's) address space, as the RDMA core
 * pinned the MR's: for writing when the MR is writable. Requests then copy between
 * pinned pages only: nothing faults, nothing is pinned per write, and a source is read
 * from the pages the MR holds, as the NIC reads it, whatever the process maps there now.
 */
static int unload_region_pin(struct unload_region *r)
{
	unsigned int gup = FOLL_LONGTERM;
	u64 start = r->addr & PAGE_MASK, end = r->addr + r->length;	/* no overflow:
									 * checked */
	unsigned long npages = (PAGE_ALIGN(end) - start) >> PAGE_SHIFT, pinned = 0;
	long ret;

	if (r->access & (UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE))
		gup |= FOLL_WRITE;
	r->pages = kvmalloc_array(npages, sizeof(*r->pages), GFP_KERNEL | __GFP_NOWARN);
	if (!r->pages)
		return -ENOMEM;
	while (pinned < npages) {
		unsigned long n = min_t(unsigned long, npages - pinned,
					PAGE_SIZE / sizeof(struct page *));

		ret = pin_user_pages_fast(start + pinned * PAGE_SIZE, n, gup,
					  r->pages + pinned);
		if (ret <= 0) {
			ret = ret ? ret : -EFAULT;
			goto err_unpin;
		}
		pinned += ret;
		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			goto err_unpin;
		}
		cond_resched();
	}
	r->npages = npages;
	atomic64_add(npages, &unload_pinned_pages);
	return 0;

err_unpin:
	unpin_user_pages(r->pages, pinned);
	kvfree(r->pages);
	r->pages = NULL;
	return ret;
}

/* -EEXIST if sess has a region with r's (dev, rkey) target or (dev, lkey) source key. */
static int unload_region_check_dup(struct unload_session *sess, struct unload_region *r)
{
	struct unload_region *o;

	lockdep_assert_held(&sess->lock);
	if (r->target)
		hlist_for_each_entry(o, &sess->targets[unload_region_hash(r->dev, r->rkey)], tnode)
			if (o->dev == r->dev && o->rkey == r->rkey)
				return -EEXIST;
	hlist_for_each_entry(o, &sess->sources[unload_region_hash(r->dev, r->lkey)], snode)
		if (o->dev == r->dev && o->lkey == r->lkey)
			return -EEXIST;
	return 0;
}

long unload_ioctl_reg_region(struct unload_session *sess, void __user *arg)
{
	struct unload_region_reg req;
	struct unload_region *r;
	struct ib_device *dev;
	unsigned long limit;
	u64 end;
	u32 handle;
	long ret;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if ((req.flags & ~UNLOAD_REGION_IOVA) || req.reserved[0] || req.handle ||
	    req.pinned_pages || (!(req.flags & UNLOAD_REGION_IOVA) && req.iova))
		return -EINVAL;
	if (!(req.flags & UNLOAD_REGION_IOVA))
		req.iova = req.addr;
	if (strnlen(req.ibdev, sizeof(req.ibdev)) == sizeof(req.ibdev))
		return -EINVAL;
	if (req.access & ~(UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE |
			   UNLOAD_ACCESS_REMOTE_READ))
		return -EINVAL;
	if (!req.length || req.length > UNLOAD_MAX_REGION ||
	    check_add_overflow(req.addr, req.length, &end) ||
	    check_add_overflow(req.iova, req.length, &end))
		return -EINVAL;
	if (!access_ok(u64_to_user_ptr(req.addr), req.length))
		return -EFAULT;
	/* A process registers, and pins, only its own memory. */
	if (current->mm != sess->mm)
		return -EPERM;

	dev = ib_device_get_by_name(req.ibdev, RDMA_DRIVER_UNKNOWN);
	if (!dev)
		return -ENODEV;
	r = kmem_cache_zalloc(unload_region_cache, GFP_KERNEL);
	if (!r) {
		ret = -ENOMEM;
		goto err_put_device;
	}
	refcount_set(&r->users, 1);
	init_completion(&r->idle);
	r->dev = dev;
	r->addr = req.addr;
	r->iova = req.iova;
	r->length = req.length;
	r->lkey = req.lkey;
	r->rkey = req.rkey;
	r->access = req.access;
	r->target = req.access & UNLOAD_ACCESS_REMOTE_WRITE;

	ret = unload_mr_find(sess, dev, &req, &r->mr_id);
	if (ret)
		goto err_free_region;
	ret = unload_region_pin(r);
	if (ret)
		goto err_free_region;

	limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	mutex_lock(&sess->lock);
	ret = -ENODEV;
	if (sess->dead)
		goto err_unlock;
	/*
	 * As for QPs: a device whose removal has begun is no longer live here, and a removal
	 * that begins after this check sweeps sess (under sess->lock, after us) and finds r.
	 */
	mutex_lock(&unload_qp_lock);
	if (!unload_dev_live(dev)) {
		mutex_unlock(&unload_qp_lock);
		goto err_unlock;
	}
	mutex_unlock(&unload_qp_lock);
	/* The MR charged these pages; the module's own pins are bounded apart. */
	ret = -ENOMEM;
	if (!sess->ipc_lock && sess->region_pages + r->npages > limit)
		goto err_unlock;
	ret = unload_region_check_dup(sess, r);
	if (ret)
		goto err_unlock;
	ret = xa_alloc(&sess->region_ids, &handle, r, XA_LIMIT(1, UNLOAD_MAX_REGIONS),
		       GFP_KERNEL);
	if (ret) {
		ret = ret == -EBUSY ? -ENOSPC : ret;
		goto err_unlock;
	}
	r->handle = handle;
	sess->region_pages += r->npages;
	if (r->target)
		hlist_add_head_rcu(&r->tnode, &sess->targets[unload_region_hash(dev, r->rkey)]);
	hlist_add_head_rcu(&r->snode, &sess->sources[unload_region_hash(dev, r->lkey)]);
	mutex_unlock(&sess->lock);
	ib_device_put(dev);	/* r->dev is compared only; removal forgets r */

	req.handle = handle;
	req.pinned_pages = r->npages;
	if (copy_to_user(arg, &req, sizeof(req)))
		return -EFAULT;	/* registered all the same: close releases it */
	return 0;

err_unlock:
	mutex_unlock(&sess->lock);
	if (r->npages) {
		unpin_user_pages(r->pages, r->npages);
		atomic64_sub(r->npages, &unload_pinned_pages);
	}
	kvfree(r->pages);
err_free_region:
	kmem_cache_free(unload_region_cache, r);
err_put_device:
	ib_device_put(dev);
	return ret;
}

long unload_ioctl_dereg_region(struct unload_session *sess, void __user *arg)
{
	struct unload_region_dereg req;
	struct unload_region *r;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.reserved0 || req.reserved[0] || req.reserved[1])
		return -EINVAL;
	if (!req.handle || req.handle > UNLOAD_MAX_REGIONS)
		return -ENOENT;

	mutex_lock(&sess->lock);
	r = xa_load(&sess->region_ids, req.handle);
	if (r)
		unload_region_unpublish(sess, r);	/* no new request finds it */
	mutex_unlock(&sess->lock);
	if (!r)
		return -ENOENT;
	unload_region_mr_forget(r);
	unload_region_retire(r);
	return 0;
}

/* --- QPs -------------------------------------------------------------------------- */

static void unload_qp_free_rcu(struct rcu_head *head)
{
	struct unload_qp *q = container_of(head, struct unload_qp, rcu);

	/* Held until readers are gone: they dereference q->dev under RCU. */
	ib_device_put(q->dev);
	kmem_cache_free(unload_qp_cache, q);
}

/* Unhash and free a QP; the caller holds sess->lock and has it on sess->qps. */
static void unload_qp_remove(struct unload_qp *q)
{
	lockdep_assert_held(&q->sess->lock);
	mutex_lock(&unload_qp_lock);
	hash_del_rcu(&q->hnode);
	mutex_unlock(&unload_qp_lock);
	list_del(&q->snode);
	q->sess->nr_qps--;
	call_rcu(&q->rcu, unload_qp_free_rcu);
}

static struct unload_qp *unload_qp_find(struct unload_session *sess,
					struct ib_device *dev, u32 qpn)
{
	struct unload_qp *q;

	lockdep_assert_held(&sess->lock);
	list_for_each_entry(q, &sess->qps, snode)
		if (q->qpn == qpn && q->dev == dev)
			return q;
	return NULL;
}

/* Is gid one of dev's GIDs (RoCE v2 or v1/IB)? */
static bool unload_gid_is_local(struct ib_device *dev, const union ib_gid *gid)
{
	static const enum ib_gid_type types[] = {
		IB_GID_TYPE_ROCE_UDP_ENCAP, IB_GID_TYPE_IB,
	};
	const struct ib_gid_attr *attr;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(types); i++) {
		attr = rdma_find_gid(dev, gid, types[i], NULL);
		if (!IS_ERR(attr)) {
			rdma_put_gid_attr(attr);
			return true;
		}
	}
	return false;
}

void unload_qp_view_put(struct unload_qp_view *v)
{
	if (v->res)
		rdma_restrack_put(v->res);
	memset(v, 0, sizeof(*v));
}

/* The GID at (port, index) of dev, or false. */
static bool unload_gid_at(struct ib_device *dev, u32 port, u32 index, union ib_gid *gid)
{
	return port && !rdma_query_gid(dev, port, index, gid);
}

/*
 * Read v's QP from the RDMA core now: state, destination, access, AV and PSNs; the AV's
 * source GID from the device's table only when read_gid (the AV changed, or a first
 * reading).
 */
static int unload_qp_view_read(struct unload_qp_view *v, bool read_gid)
{
	struct ib_qp_init_attr init_attr;
	struct ib_qp_attr attr;
	int ret;

	/* init_attr is only filled (never read here); attr's fields read below are zeroed. */
	memset(&attr, 0, sizeof(attr));
	ret = ib_query_qp(v->qp, &attr, IB_QP_STATE | IB_QP_DEST_QPN | IB_QP_AV |
			  IB_QP_ACCESS_FLAGS | IB_QP_SQ_PSN | IB_QP_RQ_PSN, &init_attr);
	if (ret)
		return ret;
	v->state = attr.qp_state;
	v->sq_psn = attr.sq_psn & UNLOAD_PSN_MASK;
	v->rq_psn = attr.rq_psn & UNLOAD_PSN_MASK;
	v->dest_qpn = attr.dest_qp_num;
	v->access = attr.qp_access_flags;
	if (rdma_ah_get_ah_flags(&attr.ah_attr) & IB_AH_GRH) {
		const struct ib_global_route *grh = rdma_ah_read_grh(&attr.ah_attr);
		u32 port = rdma_ah_get_port_num(&attr.ah_attr);

		v->port = port ? port : v->qp->port;
		v->sgid_index = grh->sgid_index;
		v->dgid = grh->dgid;
		if (read_gid)
			v->has_grh = unload_gid_at(v->qp->device, v->port, v->sgid_index,
						   &v->sgid);
	} else {
		v->has_grh = false;
	}
	return 0;
}

int unload_qp_view_get(struct unload_session *owner, struct ib_device *dev, u32 qpn,
		       struct unload_qp_view *v)
{
	struct rdma_restrack_entry *res;
	int ret;

	memset(v, 0, sizeof(*v));
	res = rdma_restrack_get_byid(dev, RDMA_RESTRACK_QP, qpn);
	if (IS_ERR(res))
		return -ESRCH;
	v->res = res;
	v->qp = container_of(res, struct ib_qp, res);
	/* A user QP created by a thread of the opener's process. */
	v->owned = v->qp->uobject && res->task && task_tgid(res->task) == owner->owner;
	v->type = v->qp->qp_type;
	ret = unload_qp_view_read(v, true);
	if (ret)
		unload_qp_view_put(v);
	return ret;
}

/*
 * Read a held view's QP again. *same_av: its AV (destination QPN, destination GID,
 * source GID index, port, GRH) is what it was, so the source GID read then still
 * stands unless the GID table changed (which the caller checks by generation).
 */
int unload_qp_view_reread(struct unload_qp_view *v, bool *same_av)
{
	const struct unload_qp_view was = *v;
	int ret;

	ret = unload_qp_view_read(v, false);
	*same_av = !ret && v->has_grh == was.has_grh && v->dest_qpn == was.dest_qpn &&
		   v->port == was.port && v->sgid_index == was.sgid_index &&
		   !memcmp(&v->dgid, &was.dgid, sizeof(v->dgid));
	return ret;
}

/*
 * Does the responder expect a PSN the sender has not sent yet? Then a NIC would take the
 * sender's next request for a duplicate and not place it (rxe never completes it). That
 * happens only when the responder was brought back to RTR with a receive PSN ahead of the
 * sender's (a reset and reconnect between writes). The reverse, a responder behind, is
 * also what rxe shows for a moment after a READ (its responder advances the expected PSN
 * only after sending the last response), so it is not judged. PSNs are 24 bits and
 * wrap: "ahead" is a distance in (0, 2^23).
 */
static bool unload_responder_ahead(const struct unload_qp_view *s,
				   const struct unload_qp_view *p)
{
	u32 d = (p->rq_psn - s->sq_psn) & UNLOAD_PSN_MASK;

	return d != 0 && d < (UNLOAD_PSN_MASK + 1) / 2;
}

/*
 * Would view p (a candidate peer) take a write from the sender view s now, as a
 * responder NIC judges its connection: receiving (RTR or RTS), naming s back exactly,
 * and not expecting a PSN s has not sent?
 */
static bool unload_views_paired(const struct unload_qp_view *s, u32 qpn,
				const struct unload_qp_view *p, u32 peer_qpn)
{
	return (p->state == IB_QPS_RTR || p->state == IB_QPS_RTS) &&
	       s->has_grh && p->has_grh && s->dest_qpn == peer_qpn && p->dest_qpn == qpn &&
	       !memcmp(&p->sgid, &s->dgid, sizeof(p->sgid)) &&
	       !memcmp(&p->dgid, &s->sgid, sizeof(p->dgid)) &&
	       !unload_responder_ahead(s, p);
}

void unload_pair_put(struct unload_pair *pr)
{
	unload_qp_view_put(&pr->p);
	if (pr->peer_dev)
		ib_device_put(pr->peer_dev);
	if (pr->peer)
		unload_session_put(pr->peer);
	unload_qp_view_put(&pr->s);
	if (pr->dev)
		ib_device_put(pr->dev);
	memset(pr, 0, sizeof(*pr));
}

/*
 * The peer of a sender view: the registered QP (of any live session) whose number is
 * the sender's destination and whose own view names the sender back exactly (QPNs and
 * both GIDs, hence the device and port). Takes references into pr; returns a reason.
 */
static u32 unload_peer_resolve(struct unload_pair *pr)
{
	struct unload_session *cand_sess;
	struct ib_device *cand_dev;
	struct unload_qp *q;
	u32 seen = 0, deny = UNLOAD_DENY_PEER_UNKNOWN;

	for (;;) {
		u32 i = 0;

		cand_sess = NULL;
		/* The seen-th candidate by qpn: references taken under RCU, checked after. */
		rcu_read_lock();
		hash_for_each_possible_rcu(unload_qp_hash, q, hnode, pr->s.dest_qpn) {
			if (q->qpn != pr->s.dest_qpn || i++ < seen)
				continue;
			if (!kref_get_unless_zero(&q->sess->ref))
				continue;
			if (!ib_device_try_get(q->dev)) {
				unload_session_put(q->sess);
				continue;
			}
			cand_sess = q->sess;
			cand_dev = q->dev;
			break;
		}
		rcu_read_unlock();
		if (!cand_sess)
			return deny;
		seen = i;
		if (!unload_qp_view_get(cand_sess, cand_dev, pr->s.dest_qpn, &pr->p)) {
			if (pr->p.owned && pr->p.type == IB_QPT_RC &&
			    unload_views_paired(&pr->s, pr->qpn, &pr->p, pr->s.dest_qpn)) {
				pr->peer = cand_sess;
				pr->peer_dev = cand_dev;
				pr->peer_qpn = pr->s.dest_qpn;
				return UNLOAD_DENY_NONE;
			}
			deny = UNLOAD_DENY_PEER_UNPAIRED;
			unload_qp_view_put(&pr->p);
		}
		ib_device_put(cand_dev);
		unload_session_put(cand_sess);
	}
}

/*
 * The device of the sender's registration in sess (by handle, or by qpn when that is
 * unique in the session) and its poison; NULL when there is none. Under RCU: no
 * reference on the device.
 */
static struct ib_device *unload_sender_reg(struct unload_session *sess, u32 qpn, u32 handle,
					   bool *poisoned)
{
	struct ib_device *dev = NULL;
	struct unload_qp *q;
	unsigned int n = 0;

	hash_for_each_possible_rcu(unload_qp_hash, q, hnode, qpn) {
		if (q->sess != sess || q->qpn != qpn || (handle && q->handle != handle))
			continue;
		n++;
		dev = q->dev;
		*poisoned = READ_ONCE(q->poisoned);
	}
	/* Two devices may number QPs alike: a request does not say which, so neither. */
	return n == 1 ? dev : NULL;
}

/* Is pr's peer QP registered still (by its session, on its device)? *poisoned. RCU. */
static bool unload_peer_reg(const struct unload_pair *pr, bool *poisoned)
{
	struct unload_qp *q;
	bool found = false;

	*poisoned = false;
	hash_for_each_possible_rcu(unload_qp_hash, q, hnode, pr->peer_qpn)
		if (q->sess == pr->peer && q->dev == pr->peer_dev && q->qpn == pr->peer_qpn) {
			found = true;
			*poisoned |= READ_ONCE(q->poisoned);
		}
	return found;
}

/*
 * Resolve a request's sender QP and its peer from the RDMA core, now. On NONE pr holds
 * references on both QPs, their devices and the peer session (unload_pair_put);
 * otherwise it may hold some.
 */
u32 unload_pair_get(struct unload_session *sess, u32 qpn, u32 handle, struct unload_pair *pr)
{
	struct ib_device *dev;
	bool poisoned = false;
	u32 deny;

	memset(pr, 0, sizeof(*pr));
	pr->qpn = qpn;
	rcu_read_lock();
	dev = unload_sender_reg(sess, qpn, handle, &poisoned);
	if (dev && !ib_device_try_get(dev))
		dev = NULL;
	rcu_read_unlock();
	if (!dev)
		return UNLOAD_DENY_QP_UNREGISTERED;
	pr->dev = dev;
	if (poisoned)
		return UNLOAD_DENY_POISONED;

	/* Ownership is the opener's: sess->owner, whoever submits. */
	if (unload_qp_view_get(sess, dev, qpn, &pr->s) || !pr->s.owned)
		return UNLOAD_DENY_QP_NOT_OWNED;
	if (pr->s.type != IB_QPT_RC || pr->s.state != IB_QPS_RTS || !pr->s.has_grh)
		return UNLOAD_DENY_QP_STATE;
	deny = unload_peer_resolve(pr);
	if (deny)
		return deny;
	/* The peer's registration may carry the poison of an earlier violation. */
	rcu_read_lock();
	unload_peer_reg(pr, &poisoned);
	rcu_read_unlock();
	return poisoned ? UNLOAD_DENY_POISONED : UNLOAD_DENY_NONE;
}

/*
 * Would unload_pair_get accept pr's pair now? pr holds the references of an accepted
 * resolution, and the caller has seen neither QP being deleted, so both are the same
 * objects: read both again, check both registrations, and require the AVs unchanged, so
 * the pairing (and the source GIDs read then) still stands. False: resolve again.
 */
bool unload_pair_still(struct unload_session *sess, u32 handle, struct unload_pair *pr)
{
	bool poisoned = false, peer_poisoned, registered, same_s, same_p;
	struct ib_device *dev;

	rcu_read_lock();
	dev = unload_sender_reg(sess, pr->qpn, handle, &poisoned);
	registered = unload_peer_reg(pr, &peer_poisoned);
	rcu_read_unlock();
	if (dev != pr->dev || poisoned || !registered || peer_poisoned)
		return false;
	if (unload_qp_view_reread(&pr->s, &same_s) || unload_qp_view_reread(&pr->p, &same_p) ||
	    !same_s || !same_p)
		return false;
	return pr->s.state == IB_QPS_RTS &&
	       unload_views_paired(&pr->s, pr->qpn, &pr->p, pr->peer_qpn);
}

/* A request of pr failed a check an RNIC makes: neither QP goes direct again. */
void unload_pair_poison(struct unload_session *sess, struct unload_pair *pr)
{
	struct unload_qp *q;

	rcu_read_lock();
	hash_for_each_possible_rcu(unload_qp_hash, q, hnode, pr->qpn)
		if (q->sess == sess && q->dev == pr->dev && q->qpn == pr->qpn)
			WRITE_ONCE(q->poisoned, true);
	if (pr->peer)
		hash_for_each_possible_rcu(unload_qp_hash, q, hnode, pr->peer_qpn)
			if (q->sess == pr->peer && q->dev == pr->peer_dev && q->qpn == pr->peer_qpn)
				WRITE_ONCE(q->poisoned, true);
	rcu_read_unlock();
}

static int unload_qp_reg_copy_in(struct unload_qp_reg *req, void __user *arg)
{
	if (copy_from_user(req, arg, sizeof(*req)))
		return -EFAULT;
	if (req->flags || req->state || req->dest_qp_num || req->handle ||
	    req->peer_flags || req->reserved[0] || req->reserved[1] || req->reserved[2] ||
	    req->reserved[3])
		return -EINVAL;
	if (strnlen(req->ibdev, sizeof(req->ibdev)) == sizeof(req->ibdev))
		return -EINVAL;
	return 0;
}

long unload_ioctl_reg_qp(struct unload_session *sess, void __user *arg)
{
	struct unload_qp_view view;
	struct unload_pair pr;
	struct unload_qp_reg req;
	struct ib_device *dev;
	struct unload_qp *q;
	u32 deny;
	long ret;

	ret = unload_qp_reg_copy_in(&req, arg);
	if (ret)
		return ret;
	dev = ib_device_get_by_name(req.ibdev, RDMA_DRIVER_UNKNOWN);
	if (!dev)
		return -ENODEV;
	ret = unload_qp_view_get(sess, dev, req.qp_num, &view);
	if (ret)
		goto out_put_device;
	req.state = view.state;
	req.dest_qp_num = view.dest_qpn;
	ret = view.owned ? 0 : -EPERM;
	unload_qp_view_put(&view);
	if (ret)
		goto out_put_device;

	mutex_lock(&sess->lock);
	if (sess->dead) {
		ret = -ENODEV;
		goto out_unlock;
	}
	q = unload_qp_find(sess, dev, req.qp_num);
	if (!q) {
		ret = -ENOSPC;
		if (sess->nr_qps >= UNLOAD_MAX_QPS)
			goto out_unlock;
		ret = -ENOMEM;
		q = kmem_cache_zalloc(unload_qp_cache, GFP_KERNEL);
		if (!q)
			goto out_unlock;
		q->sess = sess;
		q->dev = dev;
		q->qpn = req.qp_num;
		q->handle = ++sess->next_qp_handle ? sess->next_qp_handle :
			    ++sess->next_qp_handle;	/* never 0, even after a wrap */
		/*
		 * Under unload_qp_lock: either the device's removal has not erased it from
		 * unload_devs yet, and its sweep (after) will see q on sess->qps, or q is
		 * refused here.
		 */
		mutex_lock(&unload_qp_lock);
		if (!unload_dev_live(dev)) {
			mutex_unlock(&unload_qp_lock);
			kmem_cache_free(unload_qp_cache, q);
			ret = -ENODEV;
			goto out_unlock;
		}
		ib_device_try_get(dev);	/* q's own reference; we hold one already */
		hash_add_rcu(unload_qp_hash, &q->hnode, q->qpn);
		mutex_unlock(&unload_qp_lock);
		list_add(&q->snode, &sess->qps);
		sess->nr_qps++;
	}
	if (READ_ONCE(q->poisoned))
		req.peer_flags |= UNLOAD_PEER_POISONED;
	req.handle = q->handle;
	mutex_unlock(&sess->lock);

	/* Report what the RDMA core says of the connection, as a request would see it. */
	deny = unload_pair_get(sess, req.qp_num, req.handle, &pr);
	if (pr.s.has_grh && unload_gid_is_local(pr.dev, &pr.s.dgid))
		req.peer_flags |= UNLOAD_PEER_LOCAL;
	if (deny == UNLOAD_DENY_NONE)
		req.peer_flags |= UNLOAD_PEER_PAIRED | UNLOAD_PEER_LOCAL;
	else if (deny == UNLOAD_DENY_POISONED)
		req.peer_flags |= UNLOAD_PEER_POISONED;
	unload_pair_put(&pr);
	ret = copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
	goto out_put_device;

out_unlock:
	mutex_unlock(&sess->lock);
out_put_device:
	ib_device_put(dev);
	return ret;
}

/*
 * The RDMA core is removing @dev (our ib_client's remove, before it waits for the
 * device's last reference): refuse new registrations on it, then forget every QP and
 * region registered on it, so their references go. Their programs' direct writes are
 * then refused and take the NIC, which reports the device's loss itself.
 */
void unload_device_removed(struct ib_device *dev)
{
	struct unload_session *sess;
	struct unload_region *r;
	struct unload_qp *q, *tmp;
	struct unload_dev *ud;
	unsigned long idx;

	mutex_lock(&unload_qp_lock);
	ud = unload_dev_live(dev);
	if (ud)
		xa_erase(&unload_devs, dev->index);
	mutex_unlock(&unload_qp_lock);
	if (ud)
		ib_unregister_event_handler(&ud->events);
	kfree(ud);

	mutex_lock(&unload_sessions_lock);
	list_for_each_entry(sess, &unload_sessions, node) {
		unload_pairs_forget(sess, dev, 0);	/* their references on dev */
		mutex_lock(&sess->lock);
		list_for_each_entry_safe(q, tmp, &sess->qps, snode)
			if (q->dev == dev)
				unload_qp_remove(q);
		xa_for_each(&sess->region_ids, idx, r) {
			if (r->dev != dev)
				continue;
			unload_region_unpublish(sess, r);
			unload_region_retire(r);	/* waits for its copies: short */
		}
		mutex_unlock(&sess->lock);
	}
	mutex_unlock(&unload_sessions_lock);
}

long unload_ioctl_unreg_qp(struct unload_session *sess, void __user *arg)
{
	struct unload_session *other;
	struct unload_qp_reg req;
	struct ib_device *dev;
	struct unload_qp *q;
	long ret;

	ret = unload_qp_reg_copy_in(&req, arg);
	if (ret)
		return ret;
	dev = ib_device_get_by_name(req.ibdev, RDMA_DRIVER_UNKNOWN);
	if (!dev)
		return -ENODEV;
	mutex_lock(&sess->lock);
	q = unload_qp_find(sess, dev, req.qp_num);
	if (q)
		unload_qp_remove(q);
	mutex_unlock(&sess->lock);
	/* Pairs kept on it, in any session, would hold up its destroy until the reaper. */
	mutex_lock(&unload_sessions_lock);
	list_for_each_entry(other, &unload_sessions, node)
		unload_pairs_forget(other, dev, req.qp_num);
	mutex_unlock(&unload_sessions_lock);
	ib_device_put(dev);
	return q ? 0 : -ENOENT;
}

/* --- sessions ----------------------------------------------------------------------- */

static void unload_session_free_rcu(struct rcu_head *head)
{
	kmem_cache_free(unload_session_cache,
			container_of(head, struct unload_session, rcu));
}

static void unload_session_destroy(struct kref *ref)
{
	struct unload_session *sess = container_of(ref, struct unload_session, ref);

	unload_pairs_free(sess);
	put_page(sess->counters_page);
	mmdrop(sess->mm);
	put_cred(sess->cred);
	put_pid(sess->owner);
	xa_destroy(&sess->region_ids);
	xa_destroy(&sess->arenas);
	/* Peer lookups may still be reading sess->ref under RCU. */
	call_rcu(&sess->rcu, unload_session_free_rcu);
}

void unload_session_put(struct unload_session *sess)
{
	kref_put(&sess->ref, unload_session_destroy);
}

struct unload_session *unload_session_create(struct file *file)
{
	struct unload_session *sess;

	if (!current->mm)
		return ERR_PTR(-EINVAL);
	sess = kmem_cache_zalloc(unload_session_cache, GFP_KERNEL);
	if (!sess)
		return ERR_PTR(-ENOMEM);
	sess->counters_page = alloc_page(GFP_KERNEL | __GFP_ZERO);
	if (!sess->counters_page)
		goto err_free_session;
	if (unload_pairs_init(sess))
		goto err_free_counters;
	sess->counters = page_address(sess->counters_page);
	kref_init(&sess->ref);
	mutex_init(&sess->lock);
	INIT_LIST_HEAD(&sess->qps);
	xa_init_flags(&sess->region_ids, XA_FLAGS_ALLOC1);
	hash_init(sess->targets);
	hash_init(sess->sources);
	xa_init_flags(&sess->arenas, XA_FLAGS_ALLOC);
	atomic64_set(&sess->direct_writes, 0);
	atomic64_set(&sess->direct_bytes, 0);
	sess->id = atomic64_inc_return(&unload_next_session_id);
	sess->owner = get_pid(task_tgid(current));
	sess->cred = get_cred(file->f_cred);
	/* Decided by the opener's credentials, not by whoever calls later. */
	sess->ipc_lock = file_ns_capable(file, &init_user_ns, CAP_IPC_LOCK);
	sess->mm = current->mm;
	mmgrab(sess->mm);

	mutex_lock(&unload_sessions_lock);
	list_add_tail(&sess->node, &unload_sessions);
	mutex_unlock(&unload_sessions_lock);
	atomic_inc(&unload_nr_sessions);
	return sess;

err_free_counters:
	put_page(sess->counters_page);
err_free_session:
	kmem_cache_free(unload_session_cache, sess);
	return ERR_PTR(-ENOMEM);
}

/* The file is closed: release everything the session holds. */
void unload_session_release(struct unload_session *sess)
{
	struct unload_region *r;
	struct unload_qp *q, *tmp;
	unsigned long idx;
	unsigned int i;

	unload_pairs_release(sess);
	mutex_lock(&sess->lock);
	sess->dead = true;
	list_for_each_entry_safe(q, tmp, &sess->qps, snode)
		unload_qp_remove(q);
	mutex_unlock(&sess->lock);

	/* Unpublish every region, then wait for its copies and unpin it. */
	xa_for_each(&sess->region_ids, idx, r) {
		mutex_lock(&sess->lock);
		r = xa_load(&sess->region_ids, idx);
		if (r)
			unload_region_unpublish(sess, r);
		mutex_unlock(&sess->lock);
		if (!r)
			continue;
		unload_region_mr_forget(r);	/* the process's exit destroys the MR next */
		unload_region_retire(r);
	}
	unload_arenas_release(sess);

	mutex_lock(&unload_sessions_lock);
	for (i = 0; i < UNLOAD_NR_FOLDED; i++)
		unload_folded_base[i] += unload_counter_read(sess, i) - sess->snap[i];
	list_del(&sess->node);
	mutex_unlock(&unload_sessions_lock);
	atomic_dec(&unload_nr_sessions);
	unload_session_put(sess);
}
