// SPDX-License-Identifier: GPL-2.0
/*
 * The target half of a remote write (docs/design.md, section 4, "The remote path"): a
 * write that arrived from another host's module over the channel, checked here as the
 * responder RNIC would check its packets, then copied into the target region's pinned
 * pages. Every field of the request is the network's: none is trusted (the channel only
 * proved that the peer is a module holding the key), and a refusal places nothing (the
 * sender's NIC then carries the write and meets the responder's own verdict: a violation
 * NAKed there moves both QPs to ERR, which every later write's checks here see). Its
 * reason is counted here and never sent: a NIC's NAK does not say which check failed.
 */
#include "unload_kmod.h"

atomic64_t unload_remote_placed_writes;
atomic64_t unload_remote_placed_bytes;
atomic64_t unload_remote_refused[UNLOAD_DENY_COUNT];	/* stats/remote_refused_* */

void unload_target_count_refusal(u32 deny)
{
	if (deny && deny < UNLOAD_DENY_COUNT)
		atomic64_inc(&unload_remote_refused[deny]);
}

/*
 * The responder QP dst_qpn of dev, registered here by a live session whose process owns
 * it, and connected back to exactly the request's sender: RC, receiving (RTR or RTS),
 * with a GRH naming the channel's peer GID as its destination and the channel's local
 * GID as its own, and the sender's QPN as its destination QP. On NONE the view and
 * references on the owner's session and device are the caller's.
 */
static u32 unload_target_responder(const struct unload_target_write *w,
				   struct unload_session **owner, struct ib_device **odev,
				   struct unload_qp_view *v)
{
	struct unload_session *sess;
	struct ib_device *dev;
	u32 seen = 0, deny = UNLOAD_DENY_PEER_UNKNOWN;
	bool registered, poisoned;

	while (unload_qp_candidate(w->dst_qpn, &seen, &sess, &dev)) {
		if (dev != w->dev)
			goto next;
		rcu_read_lock();
		registered = unload_qp_registered(sess, dev, w->dst_qpn, &poisoned);
		rcu_read_unlock();
		if (!registered)
			goto next;	/* unregistered since it was listed */
		if (poisoned) {
			deny = UNLOAD_DENY_POISONED;
			goto next;
		}
		if (unload_qp_view_get(sess, dev, w->dst_qpn, v))
			goto next;
		if (v->type == IB_QPT_RC && v->has_grh &&
		    (v->state == IB_QPS_RTR || v->state == IB_QPS_RTS) &&
		    v->dest_qpn == w->src_qpn &&
		    !memcmp(&v->dgid, &w->peer_gid, sizeof(v->dgid)) &&
		    !memcmp(&v->sgid, &w->local_gid, sizeof(v->sgid))) {
			*owner = sess;
			*odev = dev;
			return UNLOAD_DENY_NONE;
		}
		deny = UNLOAD_DENY_PEER_UNPAIRED;
		unload_qp_view_put(v);
next:
		ib_device_put(dev);
		unload_session_put(sess);
	}
	return deny;
}

/*
 * [remote_addr, remote_addr + length) inside both the MR as the RDMA core has it and the
 * region as pinned (the same, as registered): no overflow on any input.
 */
static bool unload_target_in_bounds(const struct unload_target_write *w,
				    const struct ib_mr *mr, const struct unload_region *r)
{
	return w->length <= mr->length && w->remote_addr >= mr->iova &&
	       w->remote_addr - mr->iova <= mr->length - w->length &&
	       w->length <= r->length && w->remote_addr >= r->iova &&
	       w->remote_addr - r->iova <= r->length - w->length;
}

/*
 * Check remote write w against everything a responder NIC checks and place its bytes.
 * Returns NONE when placed, else the first check it failed (UNLOAD_DENY_*). Sleeps (the
 * copy yields between pages): call from process context, holding no lock a submitter or
 * a teardown waits on. The caller holds w->dev.
 */
u32 unload_target_place(const struct unload_target_write *w)
{
	const struct unload_tunables *t = &unload_ctl->tunables;
	struct unload_session *owner;
	struct unload_region *r;
	struct unload_qp_view v;
	struct ib_device *dev;
	struct ib_mr *mr;
	u32 deny;

	if (!READ_ONCE(t->enabled) || !READ_ONCE(t->direct_max))
		return UNLOAD_DENY_DISABLED;
	if (!w->length || w->length > READ_ONCE(t->direct_max))
		return UNLOAD_DENY_LENGTH;
	deny = unload_target_responder(w, &owner, &dev, &v);
	if (deny)
		return deny;

	deny = UNLOAD_DENY_ACCESS;
	if (!(v.access & IB_ACCESS_REMOTE_WRITE))
		goto out_put_responder;
	deny = UNLOAD_DENY_RKEY;
	r = unload_region_find(owner, true, dev, w->rkey);
	if (!r)
		goto out_put_responder;
	/* Held across the copy: a deregistration waits for it in rdma_restrack_del. */
	mr = unload_region_mr_get(owner, r, dev);
	if (!mr)
		goto out_put_region;
	deny = UNLOAD_DENY_PD;
	if (mr->pd != v.qp->pd)
		goto out_put_mr;
	deny = UNLOAD_DENY_ACCESS;
	if (!(r->access & UNLOAD_ACCESS_REMOTE_WRITE))
		goto out_put_mr;
	deny = UNLOAD_DENY_BOUNDS;
	if (!unload_target_in_bounds(w, mr, r))
		goto out_put_mr;

	unload_place_bytes(r, w->remote_addr - r->iova, w->data, w->length);
	deny = UNLOAD_DENY_NONE;
	atomic64_inc(&unload_remote_placed_writes);
	atomic64_add(w->length, &unload_remote_placed_bytes);

out_put_mr:
	unload_region_mr_put(mr);
out_put_region:
	unload_region_put(r);
out_put_responder:
	unload_qp_view_put(&v);
	ib_device_put(dev);
	unload_session_put(owner);
	return deny;
}
