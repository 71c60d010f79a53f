// SPDX-License-Identifier: GPL-2.0
/*
 * The sender half of a remote write (docs/design.md, section 4, "The remote path"): a
 * request of a submission with UNLOAD_SUBMIT_REMOTE, checked as the requester RNIC checks
 * it (the sender QP the submitter's own, RC, in RTS; its segments in the submitter's
 * regions on that QP's PD), read into the kernel, and sent over the channel to the module
 * of the host its QP is connected to, which places it under the responder's checks
 * (target.c) and answers with its verdict.
 */
#include <linux/mm.h>

#include "unload_kmod.h"
#include "unload_channel.h"

atomic64_t unload_remote_denied;

/*
 * The sender QP of req, registered in sess and unpoisoned: a view of it with a reference
 * on its device in *devp. NONE, or the reason.
 */
static u32 unload_remote_sender(struct unload_session *sess, const struct unload_direct_req *req,
				struct ib_device **devp, struct unload_qp_view *v)
{
	const struct unload_qp *q;
	struct ib_device *dev = NULL;
	bool poisoned = false;

	rcu_read_lock();
	q = unload_qp_sender(sess, req->qp_num, req->qp_handle);
	if (q) {
		poisoned = READ_ONCE(q->poisoned);
		if (!poisoned && ib_device_try_get(q->dev))
			dev = q->dev;
	}
	rcu_read_unlock();
	if (poisoned)
		return UNLOAD_DENY_POISONED;
	if (!dev)
		return UNLOAD_DENY_QP_UNREGISTERED;
	if (unload_qp_view_get(sess, dev, req->qp_num, v)) {
		ib_device_put(dev);
		return UNLOAD_DENY_QP_NOT_OWNED;
	}
	if (v->type != IB_QPT_RC || v->state != IB_QPS_RTS || !v->has_grh) {
		unload_qp_view_put(v);
		ib_device_put(dev);
		return UNLOAD_DENY_QP_STATE;
	}
	*devp = dev;
	return UNLOAD_DENY_NONE;
}

/*
 * Resolve the segments of a request to held regions of sess, inside the live MR each
 * lkey names, on the sender QP's PD: what the requester RNIC checks before it sends.
 */
static u32 unload_remote_src(struct unload_session *sess, struct ib_device *dev,
			     const struct unload_qp_view *v, const struct unload_iov *uiov,
			     unsigned int nr, struct unload_src *src)
{
	unsigned int i;

	for (i = 0; i < nr; i++) {
		const struct unload_iov *io = &uiov[i];
		struct unload_region *r;
		struct ib_mr *mr;
		bool ok;

		r = unload_region_find(sess, false, dev, io->lkey);
		if (!r)
			return UNLOAD_DENY_SOURCE;
		src->seg[src->nr++] = (struct unload_seg){ r, io->addr - r->addr, io->len };
		mr = unload_region_mr_get(sess, r, dev);
		if (!mr)
			return UNLOAD_DENY_LKEY;
		ok = mr->pd == v->qp->pd && io->len <= r->length && io->addr >= r->addr &&
		     io->addr - r->addr <= r->length - io->len;
		unload_region_mr_put(mr);	/* the region's pin keeps the pages */
		if (!ok)
			return UNLOAD_DENY_LKEY;
	}
	return UNLOAD_DENY_NONE;
}

/*
 * How long the sender QP's NIC would go without an ack before failing this write: its local
 * ACK timeout (4.096 us << timeout) once and again for each retry; timeout 0 is no limit,
 * so the channel's own. At least UNLOAD_REMOTE_ACK_MIN_MS: a remote write crosses a worker
 * on each host, and a loaded host delays those far more than it delays a NIC.
 */
static unsigned int unload_remote_ack_ms(const struct unload_qp_view *v)
{
	u64 try_ns, ms;

	if (!v->timeout)
		return UNLOAD_CHAN_WAIT_MS;
	/* 5 and 3 bits on the wire: at most 2^43 ns a try, 8 tries */
	try_ns = 4096ULL << min_t(u8, v->timeout, 31);
	ms = DIV_ROUND_UP_ULL(try_ns * (min_t(u8, v->retry_cnt, 7) + 1), NSEC_PER_MSEC);
	return clamp_t(u64, ms, UNLOAD_REMOTE_ACK_MIN_MS, UNLOAD_CHAN_WAIT_MS);
}

/*
 * Send one checked request to the target host and wait for its verdict (at most ack_ms:
 * then the write failed as unanswered, the channel with it). *result: 0
 * placed, -EACCES refused before anything reached the target's memory (the caller asks
 * the NIC), or -ECOMM when the write left and no verdict came back: it may have been
 * placed, so it must not be sent again (the caller completes it as the NIC completes a
 * write to a peer that stopped answering).
 */
/*
 * A sent write's verdict from its request's outcome (ret, and the ack if 0): the target's
 * reason stays there (a NIC's NAK names none); the NIC, given the write next, answers as
 * it would. An answer out of the format is network input too. whole: the message was
 * wholly posted.
 */
static u32 unload_remote_verdict(int ret, const struct unload_chan_write_ack *ack, bool whole,
				 int *result)
{
	if (ret) {
		/*
		 * The target places a message only once it has all of it: one not wholly
		 * posted was never placed (its channel went down with it). A whole one may
		 * have been, unless the target's goodbye said it was not handled.
		 */
		if (ret != -ECONNABORTED && whole)
			*result = -ECOMM;
		return UNLOAD_DENY_PEER_UNKNOWN;
	}
	if (le32_to_cpu(ack->verdict) != UNLOAD_CHAN_PLACED || ack->reserved)
		return UNLOAD_DENY_PEER_REFUSED;
	*result = 0;
	return UNLOAD_DENY_NONE;
}

static u32 unload_remote_send(const struct unload_remote_msg *m, int *result)
{
	struct unload_chan_write_ack *ack = NULL;
	struct unload_chan *chan;
	u32 deny, segments = 0;
	int ret;

	chan = unload_chan_get(m->devname, m->port, m->dgid.raw, m->sess);
	if (IS_ERR(chan))
		return UNLOAD_DENY_PEER_UNKNOWN;	/* no channel: nothing left */
	ret = unload_chan_call(chan, UNLOAD_CHAN_WRITE, m->msg, m->len, (void **)&ack,
			       sizeof(*ack), &segments, m->ack_ms);
	unload_chan_put(chan);
	deny = unload_remote_verdict(ret, ack, segments == DIV_ROUND_UP(m->len, UNLOAD_CHAN_SEG_MAX),
				     result);
	kvfree(ack);
	return deny;
}

/* A posted write's ack, or the end of its channel (req->ctx is its message). */
static void unload_remote_answered(struct unload_chan_req *req)
{
	struct unload_remote_msg *m = req->ctx;
	int ret = unload_chan_req_answer(req), result = m->result;
	u32 deny;

	deny = unload_remote_verdict(ret, ret ? NULL : req->resp, true, &result);
	m->done(m, deny, result);
}

/*
 * Send a prepared message without waiting for its verdict: 0 once it is wholly posted,
 * and m->done then gets the verdict (from the channel's completion handling, or from
 * whatever takes the channel down; as unload_remote_send's), with m->result the one it
 * has until then. Otherwise m->done is not called and the write was not placed: with
 * nonblock always -EAGAIN (it would have had to wait, for a channel, room or a slot, or
 * failed: post it again from a context that may wait), else a verdict of PEER_UNKNOWN.
 * The message stays the caller's.
 */
int unload_remote_post(struct unload_remote_msg *m, bool nonblock)
{
	struct unload_chan_req *req;
	struct unload_chan *chan;
	int ret;

	chan = nonblock ? unload_chan_get_up(m->devname, m->port, m->dgid.raw) :
			  unload_chan_get(m->devname, m->port, m->dgid.raw, m->sess);
	if (IS_ERR(chan))
		return nonblock ? -EAGAIN : PTR_ERR(chan);
	ret = -ENOMEM;
	req = unload_chan_req_alloc(m->len, sizeof(struct unload_chan_write_ack));
	if (!req)
		goto out_put_chan;
	req->done_fn = unload_remote_answered;
	req->ctx = m;
	ret = unload_chan_post_req(chan, req, UNLOAD_CHAN_WRITE, m->msg, m->ack_ms, nonblock, NULL);
	unload_chan_req_put(req);
out_put_chan:
	unload_chan_put(chan);
	/* Nothing of a nonblocking post reached the wire, whatever stopped it. */
	return ret && nonblock ? -EAGAIN : ret;
}

/*
 * Check one remote request as the requester RNIC checks it and read its bytes into a
 * message (*m, kvfree m->msg after), in the submitter's context; returns its reason
 * (NONE: ready to send). `list` and `inl` are as unload_direct_one takes them; `seg` room
 * for UNLOAD_MAX_IOV resolved segments. Nothing of the sender is held after: its QP and
 * regions can go while the message waits or crosses the network.
 */
u32 unload_remote_prepare(struct unload_session *sess, const struct unload_direct_req *req,
			  const struct unload_iov *list, const u8 *inl, struct unload_seg *seg,
			  struct unload_remote_msg *m, int *result)
{
	struct unload_src src = { .nr = 0 };
	struct unload_chan_write *w;
	const struct unload_iov *uiov;
	struct unload_qp_view v;
	struct ib_device *dev;
	struct unload_iov one;
	u32 deny;

	BUILD_BUG_ON(UNLOAD_REMOTE_MAX_LEN != UNLOAD_CHAN_MSG_MAX - sizeof(*w));
	/* The whole write goes as one message, its header first. */
	deny = unload_req_begin(req, UNLOAD_REMOTE_MAX_LEN, list, inl, seg, &one, &src,
				&uiov, result);
	if (deny)
		return deny;

	deny = unload_remote_sender(sess, req, &dev, &v);
	if (deny)
		return deny;
	if (!src.inl) {
		deny = unload_remote_src(sess, dev, &v, uiov, req->iov_count ? req->iov_count : 1,
					 &src);
		if (deny)
			goto out_put_src;
	}
	deny = UNLOAD_DENY_FAULT;
	m->len = sizeof(*w) + req->length;
	m->msg = kvmalloc(m->len, GFP_KERNEL_ACCOUNT);
	if (!m->msg)
		goto out_put_src;
	w = (struct unload_chan_write *)m->msg;
	*w = (struct unload_chan_write){
		.src_qpn = cpu_to_le32(req->qp_num),
		.dst_qpn = cpu_to_le32(v.dest_qpn),	/* the QP's own, not the caller's */
		.rkey = cpu_to_le32(req->rkey),
		.length = cpu_to_le32(req->length),
		.remote_addr = cpu_to_le64(req->remote_addr),
	};
	unload_src_gather(&src, m->msg + sizeof(*w), req->length);
	strscpy(m->devname, dev_name(&dev->dev), sizeof(m->devname));
	m->port = v.port;
	m->dgid = v.dgid;
	m->ack_ms = unload_remote_ack_ms(&v);
	m->sess = sess;
	deny = UNLOAD_DENY_NONE;
out_put_src:
	unload_src_put(&src);
	unload_qp_view_put(&v);
	ib_device_put(dev);
	return deny;
}

/* Check, send and wait for one remote request: the synchronous submission's. */
u32 unload_remote_one(struct unload_session *sess, const struct unload_direct_req *req,
		      const struct unload_iov *list, const u8 *inl, struct unload_seg *seg,
		      int *result)
{
	struct unload_remote_msg m;
	u32 deny;

	deny = unload_remote_prepare(sess, req, list, inl, seg, &m, result);
	if (deny)
		return deny;
	deny = unload_remote_send(&m, result);
	kvfree(m.msg);
	return deny;
}
