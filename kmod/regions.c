// SPDX-License-Identifier: GPL-2.0
/*
 * Regions: the MRs a session registers, found again on every request by their restrack
 * id and checked against what was registered, and for a target the pages the module
 * pinned. Lookup by (device, key) for requests; pin and publish at REG_REGION; unpublish
 * and retire for lifecycle.c, which orders them with the pairs that keep their MRs.
 */
#include <linux/hashtable.h>
#include <linux/mm.h>
#include <linux/sched/signal.h>
#include <linux/uaccess.h>
#include <rdma/restrack.h>

#include "unload_kmod.h"

/* Largest region: keeps page arrays well inside kvmalloc's limits. */
#define UNLOAD_MAX_REGION	(1ULL << 34)

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
 * Find the restrack id of the caller's MR (dev, lkey, rkey, addr, length). The RDMA core
 * numbers MRs per device cyclically and offers lookups by id only. The shim registers a
 * region right after its MR, so the MR sits just below the id the core hands out next:
 * the module takes that id with an MR of its own, frees it, and probes downwards, past
 * only the MRs others registered in those microseconds (UNLOAD_MR_NEAR_MAX at most).
 * Another user's churn, however long, cannot push ours out of reach. An MR registered
 * long before (or a device that cannot allocate the probe) is looked for outwards from
 * the device's last find instead, one id above and one below in turn, for
 * UNLOAD_MR_SCAN_MAX probes: an MR not found is never a direct source or target (its
 * writes take the NIC). Only registrations pay for this, never requests.
 */
#define UNLOAD_MR_NEAR_MAX	4096U
#define UNLOAD_MR_SCAN_MAX	(1U << 20)

/* Probe one id: is it the MR? */
static bool unload_mr_probe(struct unload_session *sess, struct ib_device *dev,
			    const struct unload_region_reg *req, u32 id)
{
	struct rdma_restrack_entry *res = rdma_restrack_get_byid(dev, RDMA_RESTRACK_MR, id);
	bool match;

	atomic64_inc(&unload_mr_probes);
	if (IS_ERR(res))
		return false;
	match = unload_mr_matches(sess, res, req->lkey, req->rkey, req->iova, req->length);
	rdma_restrack_put(res);
	return match;
}

/*
 * The MR id dev's RDMA core hands out next, in *next: the id of an MR allocated and freed
 * now (on a PD of its own, so no user object is touched). The caller holds dev.
 */
static int unload_mr_next_id(struct ib_device *dev, u32 *next)
{
	struct ib_pd *pd;
	struct ib_mr *mr;
	int ret = 0;

	pd = ib_alloc_pd(dev, 0);
	if (IS_ERR(pd))
		return PTR_ERR(pd);
	mr = ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, 1);
	if (IS_ERR(mr)) {
		ret = PTR_ERR(mr);
		goto out_dealloc_pd;
	}
	*next = mr->res.id;
	ib_dereg_mr(mr);
out_dealloc_pd:
	ib_dealloc_pd(pd);
	return ret;
}

static int unload_mr_find(struct unload_session *sess, struct ib_device *dev,
			  const struct unload_region_reg *req, u32 *id)
{
	u32 hint, next, cand, k, probes = 0;
	bool up, down;
	int ret;

	if (!unload_mr_next_id(dev, &next)) {
		for (k = 1; k <= UNLOAD_MR_NEAR_MAX && k <= next; k++) {
			cand = next - k;
			if (unload_mr_probe(sess, dev, req, cand))
				goto found;
		}
	}
	ret = unload_device_mr_hint(dev, &hint);
	if (ret)
		return ret;
	for (k = 0; probes < UNLOAD_MR_SCAN_MAX; k++) {
		up = hint + k >= hint;		/* not past U32_MAX */
		down = k && k <= hint;
		if (!up && !down)
			break;
		cand = hint + k;
		if (up && unload_mr_probe(sess, dev, req, cand))
			goto found;
		cand = hint - k;
		if (down && unload_mr_probe(sess, dev, req, cand))
			goto found;
		probes += up + down;
		if (!(k & 511)) {
			if (fatal_signal_pending(current))
				return -EINTR;
			cond_resched();
		}
	}
	return -ESRCH;

found:
	*id = cand;
	unload_device_mr_found(dev, cand);
	return 0;
}

/* Unpublish r from the session's tables; the caller holds sess->lock. */
static void unload_region_unpublish(struct unload_session *sess, struct unload_region *r)
{
	lockdep_assert_held(&sess->lock);
	WRITE_ONCE(r->retired, true);	/* before its mappings are revoked (mappings.c) */
	if (r->target)
		hlist_del_rcu(&r->tnode);
	hlist_del_rcu(&r->snode);
	xa_erase(&sess->region_ids, r->handle);
	sess->region_pages -= r->npages;
	unload_user_uncharge(sess->user, UNLOAD_USER_REGS);	/* once: off region_ids */
}

/*
 * Retire a region already unpublished: drop the published reference, wait for the
 * copies in flight, put its pin, free after RCU readers.
 */
void unload_region_retire(struct unload_region *r)
{
	unload_region_put(r);
	wait_for_completion(&r->idle);
	unload_pin_put(r->pin);
	call_rcu(&r->rcu, unload_region_free_rcu);
}

/*
 * Pin a region's pages from the caller's (the opener's) address space, as the RDMA core
 * pinned the MR's: for writing when the MR is writable, through the process's pins
 * (pins.c: charged once to the process, however many sessions register them). Requests
 * then copy between pinned pages only: nothing faults, nothing is pinned per write, and
 * a source is read from the pages the MR holds, as the NIC reads it, whatever the
 * process maps there now.
 */
static int unload_region_pin(struct unload_session *sess, struct unload_region *r)
{
	u64 start = r->addr & PAGE_MASK, end = r->addr + r->length;	/* no overflow:
									 * checked */
	bool write = r->access & (UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE);
	struct unload_pin *pin;

	pin = unload_pin_get(sess->acct, start, (PAGE_ALIGN(end) - start) >> PAGE_SHIFT,
			     write, sess->ipc_lock);
	if (IS_ERR(pin))
		return PTR_ERR(pin);
	r->pin = pin;
	r->pages = pin->pages;
	r->npages = pin->npages;
	return 0;
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
	r = kmem_cache_zalloc(unload_region_cache, GFP_KERNEL_ACCOUNT);
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

	/* Before the MR scan and the pin: a refusal costs nothing and changes nothing. */
	ret = -EDQUOT;
	if (!unload_user_charge(sess->user, UNLOAD_USER_REGS,
				unload_user_bound(sess, &unload_user_registrations_max)))
		goto err_free_region;
	ret = unload_mr_find(sess, dev, &req, &r->mr_id);
	if (ret)
		goto err_uncharge;
	ret = unload_region_pin(sess, r);
	if (ret)
		goto err_uncharge;

	mutex_lock(&sess->lock);
	ret = -ENODEV;
	if (sess->dead)
		goto err_unlock;
	/*
	 * As for QPs: a device whose removal has begun is no longer live here, and a removal
	 * that begins after this check sweeps sess (under sess->lock, after us) and finds r.
	 */
	if (!unload_device_live(dev))
		goto err_unlock;
	ret = unload_region_check_dup(sess, r);
	if (ret)
		goto err_unlock;
	ret = xa_alloc(&sess->region_ids, &handle, r, XA_LIMIT(1, UNLOAD_MAX_REGIONS),
		       GFP_KERNEL_ACCOUNT);
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
	unload_pin_put(r->pin);
err_uncharge:
	unload_user_uncharge(sess->user, UNLOAD_USER_REGS);
err_free_region:
	kmem_cache_free(unload_region_cache, r);
err_put_device:
	ib_device_put(dev);
	return ret;
}

/* Unpublish sess's region by handle: no new request finds it. NULL when there is none. */
struct unload_region *unload_region_take(struct unload_session *sess, u32 handle)
{
	struct unload_region *r;

	mutex_lock(&sess->lock);
	r = xa_load(&sess->region_ids, handle);
	if (r)
		unload_region_unpublish(sess, r);
	mutex_unlock(&sess->lock);
	return r;
}

/* Forget sess's regions on dev (its removal); the caller holds sess->lock. */
void unload_regions_retire_device(struct unload_session *sess, struct ib_device *dev)
{
	struct unload_region *r;
	unsigned long idx;

	lockdep_assert_held(&sess->lock);
	xa_for_each(&sess->region_ids, idx, r) {
		if (r->dev != dev)
			continue;
		unload_region_unpublish(sess, r);
		unload_region_retire(r);	/* waits for its copies: short */
	}
}
