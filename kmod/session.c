// SPDX-License-Identifier: GPL-2.0
/*
 * Sessions (one per open of /dev/unload), the QPs and regions they register, their
 * staging arenas, and the folding of their counters pages into the statistics.
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

/* Every registered QP by qpn; writers hold unload_qp_lock, readers RCU. */
static DEFINE_HASHTABLE(unload_qp_hash, 8);
/* Guards the writers of unload_qp_hash. */
static DEFINE_MUTEX(unload_qp_lock);

static atomic64_t unload_next_session_id = ATOMIC64_INIT(0);

/* Largest region and arena: keeps page arrays well inside kvmalloc's limits. */
#define UNLOAD_MAX_REGION	(1ULL << 34)
#define UNLOAD_MAX_ARENA	(1ULL << 30)

/* --- statistics folding ---------------------------------------------------------- */

static u64 unload_counter_read(struct unload_session *sess, unsigned int idx)
{
	const u64 *c = (const u64 *)sess->counters;

	/* writes[4], bytes[4], fences are laid out in fold order. */
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

/* --- memlock accounting, as ib_umem does ------------------------------------------- */

static int unload_charge(struct unload_session *sess, struct file *file,
			 unsigned long npages)
{
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	u64 pinned = atomic64_add_return(npages, &sess->mm->pinned_vm);

	if (pinned > limit && !file_ns_capable(file, &init_user_ns, CAP_IPC_LOCK)) {
		atomic64_sub(npages, &sess->mm->pinned_vm);
		return -ENOMEM;
	}
	atomic64_add(npages, &unload_pinned_pages);
	return 0;
}

static void unload_uncharge(struct unload_session *sess, unsigned long npages)
{
	atomic64_sub(npages, &sess->mm->pinned_vm);
	atomic64_sub(npages, &unload_pinned_pages);
}

/* --- regions ---------------------------------------------------------------------- */

static void unload_region_free_rcu(struct rcu_head *head)
{
	kmem_cache_free(unload_region_cache, container_of(head, struct unload_region, rcu));
}

struct unload_region *unload_region_get(struct unload_session *sess, u32 rkey)
{
	struct unload_region *r;

	rcu_read_lock();
	r = xa_load(&sess->regions, rkey);
	if (r && !refcount_inc_not_zero(&r->users))
		r = NULL;
	rcu_read_unlock();
	return r;
}

void unload_region_put(struct unload_region *r)
{
	if (refcount_dec_and_test(&r->users))
		complete(&r->idle);
}

/*
 * Retire a region already erased from sess->regions: drop the published reference,
 * wait for the copies in flight, unpin, uncharge, free after RCU readers.
 */
static void unload_region_retire(struct unload_session *sess, struct unload_region *r)
{
	unload_region_put(r);
	wait_for_completion(&r->idle);
	unpin_user_pages_dirty_lock(r->pages, r->npages, true);
	unload_uncharge(sess, r->npages);
	kvfree(r->pages);
	call_rcu(&r->rcu, unload_region_free_rcu);
}

long unload_ioctl_reg_region(struct unload_session *sess, struct file *file,
			     void __user *arg)
{
	struct unload_region_reg req;
	struct unload_region *r;
	unsigned long npages, pinned = 0;
	u64 start, end;
	long ret;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.reserved[0] || req.reserved[1] || req.handle ||
	    req.pinned_pages)
		return -EINVAL;
	if (req.access & ~(UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE |
			   UNLOAD_ACCESS_REMOTE_READ))
		return -EINVAL;
	if (!req.length || req.length > UNLOAD_MAX_REGION ||
	    check_add_overflow(req.addr, req.length, &end))
		return -EINVAL;
	if (!access_ok(u64_to_user_ptr(req.addr), req.length))
		return -EFAULT;
	/* A process pins only its own memory. */
	if (current->mm != sess->mm)
		return -EPERM;

	start = req.addr & PAGE_MASK;
	npages = (PAGE_ALIGN(end) - start) >> PAGE_SHIFT;

	r = kmem_cache_zalloc(unload_region_cache, GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	refcount_set(&r->users, 1);
	init_completion(&r->idle);
	r->addr = req.addr;
	r->length = req.length;
	r->rkey = req.rkey;
	r->access = req.access;
	r->pd_handle = req.pd_handle;

	ret = unload_charge(sess, file, npages);
	if (ret)
		goto err_free_region;
	r->pages = kvmalloc_array(npages, sizeof(*r->pages), GFP_KERNEL | __GFP_NOWARN);
	if (!r->pages) {
		ret = -ENOMEM;
		goto err_uncharge;
	}
	while (pinned < npages) {
		unsigned long n = min_t(unsigned long, npages - pinned,
					PAGE_SIZE / sizeof(struct page *));

		ret = pin_user_pages_fast(start + pinned * PAGE_SIZE, n,
					  FOLL_WRITE | FOLL_LONGTERM, r->pages + pinned);
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

	mutex_lock(&sess->lock);
	ret = sess->dead ? -ENODEV : xa_insert(&sess->regions, req.rkey, r, GFP_KERNEL);
	mutex_unlock(&sess->lock);
	if (ret)
		goto err_unpin;

	req.handle = (1ULL << 32) | req.rkey;
	req.pinned_pages = npages;
	if (copy_to_user(arg, &req, sizeof(req))) {
		/* Registered all the same: close or DEREG_REGION by rkey releases it. */
		return -EFAULT;
	}
	return 0;

err_unpin:
	unpin_user_pages(r->pages, pinned);
	kvfree(r->pages);
err_uncharge:
	unload_uncharge(sess, npages);
err_free_region:
	kmem_cache_free(unload_region_cache, r);
	return ret;
}

long unload_ioctl_dereg_region(struct unload_session *sess, void __user *arg)
{
	struct unload_region_dereg req;
	struct unload_region *r;
	u32 rkey;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.reserved[0] || req.reserved[1])
		return -EINVAL;
	if (req.handle) {
		if (req.handle >> 32 != 1)
			return -EINVAL;
		rkey = (u32)req.handle;
	} else {
		rkey = req.rkey;
	}

	mutex_lock(&sess->lock);
	r = xa_erase(&sess->regions, rkey);	/* unpublished: no new copy finds it */
	mutex_unlock(&sess->lock);
	if (!r)
		return -ENOENT;
	unload_region_retire(sess, r);
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
	mutex_lock(&unload_qp_lock);
	hash_del_rcu(&q->hnode);
	mutex_unlock(&unload_qp_lock);
	list_del(&q->snode);
	call_rcu(&q->rcu, unload_qp_free_rcu);
}

static struct unload_qp *unload_qp_find(struct unload_session *sess,
					struct ib_device *dev, u32 qpn)
{
	struct unload_qp *q;

	lockdep_assert_held(&sess->lock);
	list_for_each_entry(q, &sess->qps, snode)
		if (q->qpn == qpn && (!dev || q->dev == dev))
			return q;
	return NULL;
}

/*
 * The sender side of a submit: is qpn registered in this session? Returns its device
 * with a reference in *dev.
 */
bool unload_session_has_qp(struct unload_session *sess, struct ib_device **dev, u32 qpn)
{
	struct unload_qp *q;
	bool found = false;

	mutex_lock(&sess->lock);
	q = unload_qp_find(sess, NULL, qpn);
	if (q && ib_device_try_get(q->dev)) {
		*dev = q->dev;
		found = true;
	}
	mutex_unlock(&sess->lock);
	return found;
}

/* Is gid one of dev's GIDs (RoCE v2 or v1/IB)? */
bool unload_gid_is_local(struct ib_device *dev, const union ib_gid *gid)
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

/*
 * The peer side: a live session that registered QP qpn on a device that owns dgid
 * (the sender's destination GID). Returns the session with a reference and its
 * device with one in *pdev.
 */
struct unload_session *unload_peer_get(u32 qpn, const union ib_gid *dgid,
				       struct ib_device **pdev)
{
	struct unload_session *found = NULL;
	struct unload_qp *q;

	rcu_read_lock();
	hash_for_each_possible_rcu(unload_qp_hash, q, hnode, qpn) {
		if (q->qpn != qpn || !unload_gid_is_local(q->dev, dgid))
			continue;
		if (!kref_get_unless_zero(&q->sess->ref))
			continue;
		if (!ib_device_try_get(q->dev)) {
			unload_session_put(q->sess);
			continue;
		}
		found = q->sess;
		*pdev = q->dev;
		break;
	}
	rcu_read_unlock();
	return found;
}

int unload_qp_inspect(struct unload_session *owner, struct ib_device *dev, u32 qpn,
		      struct unload_qp_info *info)
{
	struct rdma_restrack_entry *res;
	struct ib_qp_init_attr init_attr;
	struct ib_qp_attr attr;
	struct ib_qp *qp;
	int ret;

	memset(info, 0, sizeof(*info));
	res = rdma_restrack_get_byid(dev, RDMA_RESTRACK_QP, qpn);
	if (IS_ERR(res))
		return -ESRCH;
	qp = container_of(res, struct ib_qp, res);
	/* A user QP created by a thread of the opener's process. */
	info->owned = qp->uobject && res->task && task_tgid(res->task) == owner->owner;
	info->type = qp->qp_type;
	info->pd_handle = qp->pd && qp->pd->uobject ? qp->pd->uobject->id : U32_MAX;

	memset(&attr, 0, sizeof(attr));
	memset(&init_attr, 0, sizeof(init_attr));
	ret = ib_query_qp(qp, &attr, IB_QP_STATE | IB_QP_DEST_QPN | IB_QP_AV, &init_attr);
	if (!ret) {
		info->state = attr.qp_state;
		info->dest_qpn = attr.dest_qp_num;
		if (rdma_ah_get_ah_flags(&attr.ah_attr) & IB_AH_GRH) {
			info->dgid = rdma_ah_read_grh(&attr.ah_attr)->dgid;
			info->has_dgid = true;
		}
	}
	rdma_restrack_put(res);
	return ret;
}

static int unload_qp_reg_copy_in(struct unload_qp_reg *req, void __user *arg)
{
	if (copy_from_user(req, arg, sizeof(*req)))
		return -EFAULT;
	if (req->flags || req->state || req->dest_qp_num || req->pd_handle ||
	    req->peer_flags || req->reserved[0] || req->reserved[1] || req->reserved[2] ||
	    req->reserved[3])
		return -EINVAL;
	if (strnlen(req->ibdev, sizeof(req->ibdev)) == sizeof(req->ibdev))
		return -EINVAL;
	return 0;
}

long unload_ioctl_reg_qp(struct unload_session *sess, void __user *arg)
{
	struct unload_qp_info info, pinfo;
	struct unload_session *peer;
	struct unload_qp_reg req;
	struct ib_device *dev, *pdev;
	struct unload_qp *q;
	bool added;
	long ret;

	ret = unload_qp_reg_copy_in(&req, arg);
	if (ret)
		return ret;
	dev = ib_device_get_by_name(req.ibdev, RDMA_DRIVER_UNKNOWN);
	if (!dev)
		return -ENODEV;
	ret = unload_qp_inspect(sess, dev, req.qp_num, &info);
	if (ret)
		goto out_put_device;
	if (!info.owned) {
		ret = -EPERM;
		goto out_put_device;
	}

	mutex_lock(&sess->lock);
	if (sess->dead) {
		ret = -ENODEV;
		goto out_unlock;
	}
	q = unload_qp_find(sess, dev, req.qp_num);
	added = !q;
	if (!q) {
		q = kmem_cache_zalloc(unload_qp_cache, GFP_KERNEL);
		if (!q) {
			ret = -ENOMEM;
			goto out_unlock;
		}
		q->sess = sess;
		q->dev = dev;
		ib_device_try_get(dev);	/* q's own reference; we hold one already */
		q->qpn = req.qp_num;
		list_add(&q->snode, &sess->qps);
		mutex_lock(&unload_qp_lock);
		hash_add_rcu(unload_qp_hash, &q->hnode, q->qpn);
		mutex_unlock(&unload_qp_lock);
	}
	mutex_unlock(&sess->lock);

	/*
	 * The RDMA core may be removing the device: unload_device_removed() forgets its QPs,
	 * but it may have run before q was added. It runs only once the device can no longer
	 * be found by name, so if the name still finds it now, it will run later and see q.
	 */
	if (added) {
		pdev = ib_device_get_by_name(req.ibdev, RDMA_DRIVER_UNKNOWN);
		if (pdev)
			ib_device_put(pdev);
		if (pdev != dev) {
			mutex_lock(&sess->lock);
			q = unload_qp_find(sess, dev, req.qp_num);	/* may be gone already */
			if (q)
				unload_qp_remove(q);
			mutex_unlock(&sess->lock);
			ret = -ENODEV;
			goto out_put_device;
		}
	}

	/* Report what the RDMA core says of the connection. */
	req.state = info.state;
	req.dest_qp_num = info.dest_qpn;
	req.pd_handle = info.pd_handle;
	req.peer_flags = 0;
	if (info.has_dgid && unload_gid_is_local(dev, &info.dgid)) {
		req.peer_flags |= UNLOAD_PEER_LOCAL;
		peer = unload_peer_get(info.dest_qpn, &info.dgid, &pdev);
		if (peer) {
			if (!unload_qp_inspect(peer, pdev, info.dest_qpn, &pinfo) &&
			    pinfo.owned && pinfo.dest_qpn == req.qp_num)
				req.peer_flags |= UNLOAD_PEER_PAIRED;
			ib_device_put(pdev);
			unload_session_put(peer);
		}
	}
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
 * device's last reference): forget every QP registered on it, so their references go.
 * Their programs' direct writes are then refused as to an unknown QP and take the NIC,
 * which reports the device's loss itself.
 */
void unload_device_removed(struct ib_device *dev)
{
	struct unload_session *sess;
	struct unload_qp *q, *tmp;

	mutex_lock(&unload_sessions_lock);
	list_for_each_entry(sess, &unload_sessions, node) {
		mutex_lock(&sess->lock);
		list_for_each_entry_safe(q, tmp, &sess->qps, snode)
			if (q->dev == dev)
				unload_qp_remove(q);
		mutex_unlock(&sess->lock);
	}
	mutex_unlock(&unload_sessions_lock);
}

long unload_ioctl_unreg_qp(struct unload_session *sess, void __user *arg)
{
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
	ib_device_put(dev);
	return q ? 0 : -ENOENT;
}

/* --- staging arenas ----------------------------------------------------------------- */

static void unload_arena_destroy(struct unload_session *sess, struct unload_arena_obj *a)
{
	unsigned long i;

	/* Mappings hold their own page references: the pages outlive us if mapped. */
	for (i = 0; i < a->npages; i++)
		put_page(a->pages[i]);
	unload_uncharge(sess, a->npages);
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

	a = kmem_cache_zalloc(unload_arena_cache, GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	ret = unload_charge(sess, file, npages);
	if (ret)
		goto err_free_arena;
	a->pages = kvcalloc(npages, sizeof(*a->pages), GFP_KERNEL | __GFP_NOWARN);
	if (!a->pages) {
		ret = -ENOMEM;
		goto err_uncharge;
	}
	for (i = 0; i < npages; i++) {
		a->pages[i] = alloc_page(GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN);
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
	unload_uncharge(sess, npages);
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

/* --- sessions ----------------------------------------------------------------------- */

static void unload_session_free_rcu(struct rcu_head *head)
{
	kmem_cache_free(unload_session_cache,
			container_of(head, struct unload_session, rcu));
}

static void unload_session_destroy(struct kref *ref)
{
	struct unload_session *sess = container_of(ref, struct unload_session, ref);

	put_page(sess->counters_page);
	mmdrop(sess->mm);
	put_cred(sess->cred);
	put_pid(sess->owner);
	xa_destroy(&sess->regions);
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
	if (!sess->counters_page) {
		kmem_cache_free(unload_session_cache, sess);
		return ERR_PTR(-ENOMEM);
	}
	sess->counters = page_address(sess->counters_page);
	kref_init(&sess->ref);
	mutex_init(&sess->lock);
	INIT_LIST_HEAD(&sess->qps);
	xa_init(&sess->regions);
	xa_init_flags(&sess->arenas, XA_FLAGS_ALLOC);
	sess->id = atomic64_inc_return(&unload_next_session_id);
	sess->owner = get_pid(task_tgid(current));
	sess->cred = get_cred(file->f_cred);
	sess->mm = current->mm;
	mmgrab(sess->mm);

	mutex_lock(&unload_sessions_lock);
	list_add_tail(&sess->node, &unload_sessions);
	mutex_unlock(&unload_sessions_lock);
	atomic_inc(&unload_nr_sessions);
	return sess;
}

/* The file is closed: release everything the session holds. */
void unload_session_release(struct unload_session *sess)
{
	struct unload_arena_obj *a;
	struct unload_region *r;
	struct unload_qp *q, *tmp;
	unsigned long idx;
	unsigned int i;

	mutex_lock(&sess->lock);
	sess->dead = true;
	list_for_each_entry_safe(q, tmp, &sess->qps, snode)
		unload_qp_remove(q);
	mutex_unlock(&sess->lock);

	/* Unpublish every region, then wait for its copies and unpin it. */
	xa_for_each(&sess->regions, idx, r) {
		mutex_lock(&sess->lock);
		r = xa_erase(&sess->regions, idx);
		mutex_unlock(&sess->lock);
		if (r)
			unload_region_retire(sess, r);
	}
	xa_for_each(&sess->arenas, idx, a) {
		mutex_lock(&sess->lock);
		a = xa_erase(&sess->arenas, idx);
		mutex_unlock(&sess->lock);
		if (a)
			unload_arena_destroy(sess, a);
	}

	mutex_lock(&unload_sessions_lock);
	for (i = 0; i < UNLOAD_NR_FOLDED; i++)
		unload_folded_base[i] += unload_counter_read(sess, i) - sess->snap[i];
	list_del(&sess->node);
	mutex_unlock(&unload_sessions_lock);
	atomic_dec(&unload_nr_sessions);
	unload_session_put(sess);
}
