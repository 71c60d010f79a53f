// SPDX-License-Identifier: GPL-2.0
/*
 * The direct copy engine: each write request is checked, at that moment, against the
 * RDMA core's own objects (both QPs, both MRs: every check a responder RNIC makes and
 * the local SGE checks of the requester) and, if every check passes, its payload is
 * copied from the submitter's source regions into the peer's target region, both
 * pinned since registration (place.c). A refusal places nothing; the caller then posts
 * the request to the NIC, which produces the NIC's own outcome.
 */
#include <linux/highmem.h>
#include <linux/sched.h>
#include <linux/uaccess.h>
#include <linux/uio.h>

#include "unload_kmod.h"

/*
 * Resolve segments to held regions: each inside the live MR its lkey names, on the
 * sender QP's PD (what an RNIC checks of a local SGE before it sends anything). Segments
 * are process addresses: the region maps them one to one onto the MR's iova range, so
 * the bounds are the region's. On a refusal the caller still puts what was resolved.
 */
static u32 unload_src_resolve(struct unload_session *sess, struct unload_pair_slot *slot,
			      const struct unload_iov *uiov, unsigned int nr,
			      struct unload_src *src)
{
	const struct unload_pair *pr = &slot->pr;
	unsigned int i;

	for (i = 0; i < nr; i++) {
		const struct unload_iov *v = &uiov[i];
		struct unload_region *r;
		struct ib_mr *mr;

		r = unload_region_find(sess, false, pr->dev, v->lkey);
		if (!r)
			return UNLOAD_DENY_SOURCE;
		src->seg[src->nr++] = (struct unload_seg){ r, v->addr - r->addr, v->len };
		mr = unload_kept_mr_get(&slot->src, sess, r, pr->dev);
		if (!mr)
			return UNLOAD_DENY_LKEY;
		if (mr->pd != pr->s.qp->pd || v->len > r->length || v->addr < r->addr ||
		    v->addr - r->addr > r->length - v->len)
			return UNLOAD_DENY_LKEY;	/* (r's length is the MR's, checked) */
	}
	return UNLOAD_DENY_NONE;
}

/*
 * The responder's checks on the peer's side, with the target MR held by the slot (so
 * ib_dereg_mr waits for the copy): on NONE *off is the offset into r.
 */
static u32 unload_target_check(struct unload_pair_slot *slot, struct unload_region *r,
			       const struct unload_direct_req *req, u64 *off)
{
	const struct unload_pair *pr = &slot->pr;
	struct ib_mr *mr;

	mr = unload_kept_mr_get(&slot->dst, pr->peer, r, pr->peer_dev);
	if (!mr)
		return UNLOAD_DENY_RKEY;	/* deregistered or replaced: an invalid rkey */
	if (mr->pd != pr->p.qp->pd)
		return UNLOAD_DENY_PD;
	if (!(r->access & UNLOAD_ACCESS_REMOTE_WRITE))
		return UNLOAD_DENY_ACCESS;
	/*
	 * [remote_addr, remote_addr + length) inside [iova, iova + length) of the MR, and
	 * of the pinned range (the same, as registered): no overflow on any input.
	 */
	if (req->length > mr->length || req->remote_addr < mr->iova ||
	    req->remote_addr - mr->iova > mr->length - req->length)
		return UNLOAD_DENY_BOUNDS;
	if (req->length > r->length || req->remote_addr < r->iova ||
	    req->remote_addr - r->iova > r->length - req->length)
		return UNLOAD_DENY_BOUNDS;
	*off = req->remote_addr - r->iova;
	return UNLOAD_DENY_NONE;
}

/*
 * Check and run one request; returns its reason (NONE: placed). `list` is its segment
 * list as read in (NULL: none, or the read faulted), `inl` an inline request's bytes as
 * read in (NULL: the read faulted), `seg` room for UNLOAD_MAX_IOV resolved segments;
 * `hold` the submission's hold on its pair.
 */
static u32 unload_direct_one(struct unload_session *sess,
			     const struct unload_direct_req *req, const struct unload_iov *list,
			     const u8 *inl, struct unload_seg *seg, struct unload_pair_hold *hold,
			     int *result)
{
	struct unload_src src = { .nr = 0 };
	const struct unload_iov *uiov;
	struct unload_region *r = NULL;
	struct unload_iov one;
	struct unload_pair *pr;
	u32 deny;
	u64 off = 0;

	deny = unload_req_begin(req, U64_MAX, list, inl, seg, &one, &src, &uiov, result);
	if (deny)
		return deny;

	pr = unload_pair_hold_get(sess, hold, req->qp_num, req->qp_handle, &deny);
	if (!pr)
		return deny;	/* the slot is dropped and nothing else is held */
	if (!src.inl) {
		deny = unload_src_resolve(sess, hold->slot, uiov,
					  req->iov_count ? req->iov_count : 1, &src);
		if (deny)
			goto out_put_src;
	}
	deny = UNLOAD_DENY_RKEY;
	r = unload_region_find(pr->peer, true, pr->peer_dev, req->rkey);
	if (!r)
		goto out_put_src;
	deny = unload_target_check(hold->slot, r, req, &off);
	if (deny)
		goto out_put_region;

	unload_place(r, off, req->length, &src);
	*result = 0;
	/* The module counts its own copies, where userspace cannot write. */
	atomic64_inc(&sess->direct_writes);
	atomic64_add(req->length, &sess->direct_bytes);

out_put_region:
	unload_region_put(r);
out_put_src:
	unload_src_put(&src);
	if (deny)
		unload_pair_hold_refuse(sess, hold, deny);
	return deny;
}

/*
 * A submission as read in whole before any pair is held: user memory is touched only
 * with no slot locked, so a request array or segment list on a page that never faults
 * in (userfaultfd, a FUSE mount that never answers) stalls its submitter alone, never
 * the teardown that locks every slot.
 */
/*
 * A batch of a few requests, the latency-bound case, is read into the batch itself (on
 * the submitter's stack): an allocation and its memcg charge per submission were about
 * as costly as the copy of a small write.
 */
#define UNLOAD_BATCH_SMALL		4
#define UNLOAD_BATCH_SMALL_INLINE	64

struct unload_batch {
	struct unload_direct_req *req;		/* count requests; results written here */
	struct unload_iov *iov;			/* the segment lists, back to back, or NULL */
	u8 *inl;				/* inline requests' bytes, back to back, or NULL */
	struct unload_seg *seg;			/* resolved segments of one request */
	unsigned long faulted[BITS_TO_LONGS(UNLOAD_MAX_BATCH)]; /* list or inline data
								 * unreadable */
	struct unload_direct_req req_small[UNLOAD_BATCH_SMALL];	/* req, when it fits */
	u8 inl_small[UNLOAD_BATCH_SMALL_INLINE];		/* inl, when it fits */
};

/*
 * Bytes placed under one hold of a pair's slot before it is released and acquired
 * again, so a teardown waits for at most this much copying, not a whole batch's.
 */
#define UNLOAD_HOLD_BYTES (1U << 20)

/* Most batches allocate nothing: no call for them. */
static void unload_batch_free(struct unload_batch *b)
{
	if (b->seg)
		kfree(b->seg);
	if (b->inl && b->inl != b->inl_small)
		kvfree(b->inl);
	if (b->iov)
		kvfree(b->iov);
	if (b->req && b->req != b->req_small)
		kvfree(b->req);
}

/* Read the inline requests' bytes in, back to back; a request whose read faults is refused. */
static int unload_batch_read_inline(struct unload_batch *b, u32 count)
{
	size_t bytes = 0, at = 0;
	u32 i;

	for (i = 0; i < count; i++)
		if (unload_req_inline(&b->req[i]))
			bytes += b->req[i].length;	/* <= 256 * 1024: no overflow */
	if (!bytes)
		return 0;
	b->inl = bytes <= sizeof(b->inl_small) ? b->inl_small : kvmalloc(bytes, GFP_KERNEL_ACCOUNT);
	if (!b->inl)
		return -ENOMEM;
	for (i = 0; i < count; i++) {
		const struct unload_direct_req *req = &b->req[i];

		if (!unload_req_inline(req))
			continue;
		if (copy_from_user(b->inl + at, u64_to_user_ptr(req->iov), req->length))
			__set_bit(i, b->faulted);
		at += req->length;
	}
	return 0;
}

/*
 * Read the requests, their segment lists and inline bytes in; -EFAULT if the array itself
 * faults.
 */
static int unload_batch_read(struct unload_batch *b, const struct unload_direct_req __user *u,
			     u32 count)
{
	size_t lists = 0, at = 0;
	u32 i;
	int ret;

	if (count <= ARRAY_SIZE(b->req_small)) {
		/* One request at a time: a copy of constant size skips usercopy's object walk. */
		b->req = b->req_small;
		for (i = 0; i < count; i++)
			if (copy_from_user(&b->req[i], &u[i], sizeof(*b->req)))
				return -EFAULT;
	} else {
		b->req = kvmalloc_array(count, sizeof(*b->req), GFP_KERNEL_ACCOUNT);
		if (!b->req)
			return -ENOMEM;
		if (copy_from_user(b->req, u, array_size(count, sizeof(*b->req))))
			return -EFAULT;
	}
	ret = unload_batch_read_inline(b, count);
	if (ret)
		return ret;
	for (i = 0; i < count; i++)
		if (b->req[i].iov_count <= UNLOAD_MAX_IOV)
			lists += b->req[i].iov_count;	/* <= 256 * 32: no overflow */
	if (!lists)
		return 0;
	b->iov = kvmalloc_array(lists, sizeof(*b->iov), GFP_KERNEL_ACCOUNT);
	b->seg = kmalloc_array(UNLOAD_MAX_IOV, sizeof(*b->seg), GFP_KERNEL_ACCOUNT);
	if (!b->iov || !b->seg)
		return -ENOMEM;
	for (i = 0; i < count; i++) {
		u32 n = b->req[i].iov_count;

		if (!n || n > UNLOAD_MAX_IOV)
			continue;
		if (copy_from_user(b->iov + at, u64_to_user_ptr(b->req[i].iov),
				   array_size(n, sizeof(*b->iov))))
			__set_bit(i, b->faulted);	/* that request is refused, not the batch */
		at += n;
	}
	return 0;
}

int unload_submit_batch(struct unload_session *sess, u64 ureqs, u32 count, u32 flags,
			u32 *done, u32 *accepted)
{
	struct unload_direct_req __user *u = u64_to_user_ptr(ureqs);
	struct unload_pair_hold hold = { .slot = NULL };
	/*
	 * Not zeroed at entry (the kernel's INIT_STACK_ALL_ZERO would clear 352 bytes a
	 * submission): its pointers and bitmap are set below, its arrays written before read.
	 */
	struct unload_batch b __uninitialized;
	u64 held = 0;
	size_t at = 0, inl_at = 0;
	u32 i, n, ok = 0;
	int ret;

	*done = 0;
	*accepted = 0;
	if (count > UNLOAD_MAX_BATCH || (flags & ~UNLOAD_SUBMIT_FLAGS))
		return -EINVAL;
	/* The source is the submitter's memory: only the opener's process submits. */
	if (current->mm != sess->mm)
		return -EPERM;
	if (!count)
		return 0;
	b.req = NULL;
	b.iov = NULL;
	b.inl = NULL;
	b.seg = NULL;
	bitmap_zero(b.faulted, count);
	ret = unload_batch_read(&b, u, count);
	if (ret)
		goto out_free;
	for (i = 0; i < count; i++) {
		struct unload_direct_req *req = &b.req[i];
		const struct unload_iov *list = NULL;
		const u8 *inl = NULL;
		int result;
		u32 deny;

		if (req->iov_count && req->iov_count <= UNLOAD_MAX_IOV) {
			if (!test_bit(i, b.faulted))
				list = b.iov + at;
			at += req->iov_count;
		}
		if (unload_req_inline(req)) {
			if (!test_bit(i, b.faulted))
				inl = b.inl + inl_at;
			inl_at += req->length;
		}
		if (held >= UNLOAD_HOLD_BYTES) {
			unload_pair_hold_release(&hold);
			held = 0;
		}
		if (flags & UNLOAD_SUBMIT_REMOTE)
			deny = unload_remote_one(sess, req, list, inl, b.seg, &result);
		else
			deny = unload_direct_one(sess, req, list, inl, b.seg, &hold, &result);
		req->result = result;	/* after: the request's own result field is an input too */
		if (deny) {
			atomic64_inc((flags & UNLOAD_SUBMIT_REMOTE) ? &unload_remote_denied :
				     &unload_denied[deny]);
		} else {
			ok++;
			held += req->length;
		}
		if ((deny && (flags & UNLOAD_SUBMIT_STOP)) || fatal_signal_pending(current)) {
			i++;
			break;
		}
	}
	unload_pair_hold_release(&hold);
	if (!(flags & UNLOAD_SUBMIT_REMOTE))
		atomic64_inc(&unload_direct_submissions);
	/* Results out with nothing held; a fault here leaves `done` at what was told. */
	for (n = 0; n < i; n++)
		if (put_user(b.req[n].result, &u[n].result)) {
			ret = -EFAULT;
			break;
		}
	*done = n;
	*accepted = ok;
out_free:
	unload_batch_free(&b);
	return ret;
}

long unload_ioctl_submit(struct unload_session *sess, void __user *arg)
{
	struct unload_submit s;
	int ret;

	if (copy_from_user(&s, arg, sizeof(s)))
		return -EFAULT;
	if ((s.flags & ~UNLOAD_SUBMIT_FLAGS) || s.done || s.accepted || s.reserved[0] ||
	    s.reserved[1])
		return -EINVAL;
	ret = unload_submit_batch(sess, s.reqs, s.count, s.flags, &s.done, &s.accepted);
	if (ret && ret != -EFAULT)
		return ret;
	if (copy_to_user(arg, &s, sizeof(s)))
		return -EFAULT;
	return ret;
}
