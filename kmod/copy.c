// SPDX-License-Identifier: GPL-2.0
/*
 * The direct copy engine: a write request is checked against authoritative kernel
 * state (the RDMA core's QPs, the sessions and the regions they registered) and, if
 * every check passes, its payload is copied from the submitter's memory into the
 * peer's pinned pages: ascending, the last 8 bytes last, with release semantics.
 */
#include <linux/highmem.h>
#include <linux/sched.h>
#include <linux/uaccess.h>
#include <linux/uio.h>

#include "unload_kmod.h"

/* The resolution of one sender QP, kept across consecutive requests of a batch. */
struct unload_route {
	u32 qpn;			/* sender QP; 0 when nothing is resolved */
	u32 deny;			/* UNLOAD_DENY_* for this QP, or NONE */
	struct ib_device *dev;		/* sender QP's device (a reference) */
	struct unload_session *peer;	/* the peer's session (a reference) */
	struct ib_device *peer_dev;	/* the peer QP's device (a reference) */
	u32 peer_pd_handle;		/* the peer QP's PD */
};

static void unload_route_drop(struct unload_route *rt)
{
	if (rt->peer_dev)
		ib_device_put(rt->peer_dev);
	if (rt->peer)
		unload_session_put(rt->peer);
	if (rt->dev)
		ib_device_put(rt->dev);
	memset(rt, 0, sizeof(*rt));
}

/* Resolve the sender QP and its paired peer from the RDMA core. */
static void unload_route_resolve(struct unload_session *sess, struct unload_route *rt,
				 u32 qpn)
{
	struct unload_qp_info info, pinfo;

	unload_route_drop(rt);
	rt->qpn = qpn;
	if (!unload_session_has_qp(sess, &rt->dev, qpn)) {
		rt->deny = UNLOAD_DENY_QP_UNREGISTERED;
		return;
	}
	/* Ownership is the opener's: sess->owner, whoever submits. */
	if (unload_qp_inspect(sess, rt->dev, qpn, &info) || !info.owned) {
		rt->deny = UNLOAD_DENY_QP_NOT_OWNED;
		return;
	}
	if (info.type != IB_QPT_RC || info.state != IB_QPS_RTS || !info.has_dgid) {
		rt->deny = UNLOAD_DENY_QP_STATE;
		return;
	}
	rt->peer = unload_peer_get(info.dest_qpn, &info.dgid, &rt->peer_dev);
	if (!rt->peer) {
		rt->deny = UNLOAD_DENY_PEER_UNKNOWN;
		return;
	}
	/* The peer QP must be its session's, alive, and connected back to us. */
	if (unload_qp_inspect(rt->peer, rt->peer_dev, info.dest_qpn, &pinfo) ||
	    !pinfo.owned) {
		rt->deny = UNLOAD_DENY_PEER_UNKNOWN;
		return;
	}
	if (pinfo.type != IB_QPT_RC || pinfo.dest_qpn != qpn || !pinfo.has_dgid ||
	    (pinfo.state != IB_QPS_RTR && pinfo.state != IB_QPS_RTS) ||
	    !unload_gid_is_local(rt->dev, &pinfo.dgid)) {
		rt->deny = UNLOAD_DENY_PEER_UNPAIRED;
		return;
	}
	rt->peer_pd_handle = pinfo.pd_handle;
	rt->deny = UNLOAD_DENY_NONE;
}

/*
 * The local source of a request, as an iov_iter over the submitter's memory: a fault
 * stops the copy short without zero-filling the target (copy_from_user would).
 */
struct unload_src {
	struct unload_iov uiov[UNLOAD_MAX_IOV];
	struct iovec kiov[UNLOAD_MAX_IOV];
	struct iov_iter iter;
};

/* Load and check the source; returns a reason, NONE when usable. */
static u32 unload_src_load(struct unload_src *src, const struct unload_direct_req *req)
{
	unsigned int i, nr;
	u64 total = 0;

	if (req->iov_count == 0) {
		src->uiov[0].addr = req->iov;
		src->uiov[0].len = req->length;
		nr = 1;
	} else {
		if (req->iov_count > UNLOAD_MAX_IOV)
			return UNLOAD_DENY_INVALID;
		if (copy_from_user(src->uiov, u64_to_user_ptr(req->iov),
				   req->iov_count * sizeof(src->uiov[0])))
			return UNLOAD_DENY_FAULT;
		nr = req->iov_count;
	}
	for (i = 0; i < nr; i++) {
		if (check_add_overflow(total, src->uiov[i].len, &total) ||
		    src->uiov[i].len > MAX_RW_COUNT)
			return UNLOAD_DENY_INVALID;
		if (!access_ok(u64_to_user_ptr(src->uiov[i].addr), src->uiov[i].len))
			return UNLOAD_DENY_FAULT;
		src->kiov[i].iov_base = u64_to_user_ptr(src->uiov[i].addr);
		src->kiov[i].iov_len = src->uiov[i].len;
	}
	if (total != req->length)
		return UNLOAD_DENY_INVALID;
	iov_iter_init(&src->iter, ITER_SOURCE, src->kiov, nr, total);
	return UNLOAD_DENY_NONE;
}

/*
 * Place len bytes of src at byte offset off of region r: [0, len - tail) ascending,
 * then the last tail (<= 8) bytes, published with release semantics.
 */
static int unload_place(struct unload_region *r, u64 off, u64 len, struct unload_src *src)
{
	u64 pos = offset_in_page(r->addr) + off;	/* from the first pinned page */
	u64 tail = min_t(u64, len, 8), body = len - tail;
	u8 last[8];
	void *kaddr;
	u64 i;

	while (body) {
		unsigned int poff = offset_in_page(pos);
		size_t chunk = min_t(u64, body, PAGE_SIZE - poff);

		/* Ascending, one page at a time, from the submitter's memory. */
		if (copy_page_from_iter(r->pages[pos >> PAGE_SHIFT], poff, chunk,
					&src->iter) != chunk)
			return -EFAULT;
		pos += chunk;
		body -= chunk;
		cond_resched();
	}

	if (copy_from_iter(last, tail, &src->iter) != tail)
		return -EFAULT;
	if (tail == 8 && IS_ALIGNED(pos, 8) && offset_in_page(pos) <= PAGE_SIZE - 8) {
		u64 v;

		memcpy(&v, last, 8);
		kaddr = kmap_local_page(r->pages[pos >> PAGE_SHIFT]);
		/* Everything before becomes visible no later than these 8 bytes. */
		smp_store_release((u64 *)(kaddr + offset_in_page(pos)), v);
		kunmap_local(kaddr);
		return 0;
	}
	smp_wmb();	/* the body before the tail */
	for (i = 0; i < tail; i++, pos++) {
		u8 *p;

		kaddr = kmap_local_page(r->pages[pos >> PAGE_SHIFT]);
		p = kaddr + offset_in_page(pos);
		WRITE_ONCE(*p, last[i]);
		kunmap_local(kaddr);
	}
	return 0;
}

/* Check and run one request; returns its reason (NONE: placed). */
static u32 unload_direct_one(struct unload_session *sess, struct unload_route *rt,
			     const struct unload_direct_req *req, int *result)
{
	const struct unload_tunables *t = &unload_ctl->tunables;
	struct unload_region *r;
	struct unload_src *src;
	u32 deny, direct_max;
	u64 off;

	*result = -EINVAL;
	if (req->flags || req->reserved || req->result || req->reason ||
	    req->iov_count > UNLOAD_MAX_IOV)
		return UNLOAD_DENY_INVALID;
	direct_max = READ_ONCE(t->direct_max);
	*result = -EPERM;
	if (!READ_ONCE(t->enabled) || !direct_max)
		return UNLOAD_DENY_DISABLED;
	*result = -EINVAL;
	if (!req->length || req->length > direct_max)
		return UNLOAD_DENY_LENGTH;

	if (rt->qpn != req->qp_num || !rt->qpn)
		unload_route_resolve(sess, rt, req->qp_num);
	if (rt->deny) {
		*result = rt->deny == UNLOAD_DENY_QP_STATE ? -EINVAL : -EPERM;
		return rt->deny;
	}

	*result = -EACCES;
	r = unload_region_get(rt->peer, req->rkey);
	if (!r)
		return UNLOAD_DENY_RKEY;
	deny = UNLOAD_DENY_PD;
	if (r->pd_handle != rt->peer_pd_handle)
		goto out_put_region;
	deny = UNLOAD_DENY_ACCESS;
	if (!(r->access & UNLOAD_ACCESS_REMOTE_WRITE))
		goto out_put_region;
	/* [remote_addr, remote_addr + length) inside [addr, addr + length), no overflow */
	deny = UNLOAD_DENY_BOUNDS;
	*result = -ERANGE;
	if (req->length > r->length || req->remote_addr < r->addr ||
	    req->remote_addr - r->addr > r->length - req->length)
		goto out_put_region;
	off = req->remote_addr - r->addr;

	*result = -ENOMEM;
	deny = UNLOAD_DENY_FAULT;
	src = kmalloc(sizeof(*src), GFP_KERNEL);
	if (!src)
		goto out_put_region;
	deny = unload_src_load(src, req);
	*result = deny == UNLOAD_DENY_FAULT ? -EFAULT : -EINVAL;
	if (deny)
		goto out_free_src;
	if (unload_place(r, off, req->length, src)) {
		deny = UNLOAD_DENY_FAULT;
		*result = -EFAULT;
		goto out_free_src;
	}
	*result = 0;
	deny = UNLOAD_DENY_NONE;
	/* The module counts its own copies in the submitter's counters page. */
	atomic64_inc((atomic64_t *)&sess->counters->writes[UNLOAD_PATH_DIRECT]);
	atomic64_add(req->length, (atomic64_t *)&sess->counters->bytes[UNLOAD_PATH_DIRECT]);

out_free_src:
	kfree(src);
out_put_region:
	unload_region_put(r);
	return deny;
}

int unload_submit_batch(struct unload_session *sess, u64 ureqs, u32 count, u32 *done,
			u32 *accepted)
{
	struct unload_direct_req __user *u = u64_to_user_ptr(ureqs);
	struct unload_route rt = {};
	struct unload_direct_req req;
	u32 i, ok = 0;
	int ret = 0;

	if (count > UNLOAD_MAX_BATCH)
		return -EINVAL;
	/* The source is the submitter's memory: only the opener's process submits. */
	if (current->mm != sess->mm)
		return -EPERM;
	for (i = 0; i < count; i++) {
		u32 deny;
		int result;

		if (copy_from_user(&req, &u[i], sizeof(req))) {
			ret = -EFAULT;
			break;
		}
		deny = unload_direct_one(sess, &rt, &req, &result);
		if (put_user(result, &u[i].result) || put_user(deny, &u[i].reason)) {
			ret = -EFAULT;
			break;
		}
		if (deny)
			atomic64_inc(&unload_denied[deny]);
		else
			ok++;
		if (fatal_signal_pending(current)) {
			i++;
			break;
		}
	}
	unload_route_drop(&rt);
	*done = i;
	*accepted = ok;
	return ret;
}

long unload_ioctl_submit(struct unload_session *sess, void __user *arg)
{
	struct unload_submit s;
	int ret;

	if (copy_from_user(&s, arg, sizeof(s)))
		return -EFAULT;
	if (s.flags || s.done || s.accepted || s.reserved[0] || s.reserved[1])
		return -EINVAL;
	ret = unload_submit_batch(sess, s.reqs, s.count, &s.done, &s.accepted);
	if (ret && ret != -EFAULT)
		return ret;
	if (copy_to_user(arg, &s, sizeof(s)))
		return -EFAULT;
	return ret;
}
