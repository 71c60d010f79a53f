// SPDX-License-Identifier: GPL-2.0
/*
 * The channel's receive side (docs/design.md, "The channel"): the ring of receive
 * buffers registered once, every received message checked field by field (it is the
 * peer's word: channel_wire.h says what may come), credits taken, segments reassembled,
 * acks matched to our requests, and the peer's requests answered: an echo with its bytes,
 * a remote write with the target's verdict (target.c). A message that breaks the format
 * takes the channel down and is counted; nothing in it is acted on. On a channel we
 * accepted, nothing is read before the peer's proof of the key (channel_auth.c).
 */
#include <linux/mm.h>
#include <linux/slab.h>

#include "unload_channel.h"
#include "unload_kmod.h"

/*
 * A peer's request we hold until its ack is on the wire: served here, or only its ack
 * left to send (type UNLOAD_CHAN_ACK: a write placed from the receive completion, whose
 * ack found no free slot).
 */
struct unload_chan_job {
	struct work_struct work;
	struct unload_chan *chan;	/* referenced */
	u8 type;
	u64 id;
	void *buf;
	u32 len;
	u32 verdict;			/* an ACK job's */
};

/* The types the peer sends us to be answered: they hold our buffers until answered. */
static bool unload_chan_is_request(u8 type)
{
	return type == UNLOAD_CHAN_ECHO || type == UNLOAD_CHAN_WRITE;
}

static int unload_chan_buf_map(struct unload_chan *chan, struct unload_chan_buf *b,
			       enum dma_data_direction dir,
			       void (*done)(struct ib_cq *cq, struct ib_wc *wc))
{
	b->chan = chan;
	b->cqe.done = done;
	INIT_LIST_HEAD(&b->link);
	b->data = kzalloc(UNLOAD_CHAN_BUF, GFP_KERNEL);
	if (!b->data)
		return -ENOMEM;
	b->dma = ib_dma_map_single(chan->dev, b->data, UNLOAD_CHAN_BUF, dir);
	if (ib_dma_mapping_error(chan->dev, b->dma)) {
		kfree(b->data);
		b->data = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void unload_chan_buf_unmap(struct unload_chan *chan, struct unload_chan_buf *b,
				  enum dma_data_direction dir)
{
	if (!b->data)
		return;
	ib_dma_unmap_single(chan->dev, b->dma, UNLOAD_CHAN_BUF, dir);
	kfree(b->data);
	b->data = NULL;
}

static int unload_chan_post_recv(struct unload_chan *chan, struct unload_chan_buf *b)
{
	struct ib_sge sge = {
		.addr = b->dma, .length = UNLOAD_CHAN_BUF, .lkey = chan->pd->local_dma_lkey,
	};
	struct ib_recv_wr wr = { .wr_cqe = &b->cqe, .sg_list = &sge, .num_sge = 1 };

	ib_dma_sync_single_for_device(chan->dev, b->dma, UNLOAD_CHAN_BUF, DMA_FROM_DEVICE);
	return ib_post_recv(chan->qp, &wr, NULL);
}

/* The peer's credits: never more than the receives it has, whatever it claims. */
static int unload_chan_take_credits(struct unload_chan *chan, u32 n)
{
	int ret = 0;

	if (!n)
		return 0;
	spin_lock_bh(&chan->lock);
	if (n > UNLOAD_CHAN_RING - chan->credits)
		ret = -EBADMSG;
	else
		chan->credits += n;
	spin_unlock_bh(&chan->lock);
	if (!ret)
		wake_up_all(&chan->wq);
	return ret;
}

static void unload_chan_rx_reset(struct unload_chan *chan)
{
	struct unload_chan_rx *rxm = &chan->rxm;

	if (rxm->req)
		unload_chan_req_put(rxm->req);
	if (unload_chan_is_request(rxm->type) && rxm->active) {
		kvfree(rxm->buf);
		spin_lock_bh(&chan->lock);
		chan->in_reqs--;
		chan->in_bytes -= rxm->total;
		spin_unlock_bh(&chan->lock);
	}
	memset(rxm, 0, sizeof(*rxm));
}

static int unload_chan_rx_start(struct unload_chan *chan, u8 type, u64 id, u32 total, u32 seg,
				int status)
{
	struct unload_chan_rx *rxm = &chan->rxm;
	struct unload_chan_req *req = NULL, *r;
	int ret = 0;

	spin_lock_bh(&chan->lock);
	if (unload_chan_is_request(type)) {
		/* What an honest peer never exceeds: it waits for our acks first. */
		if (chan->in_reqs >= UNLOAD_CHAN_MAX_REQS || total > UNLOAD_CHAN_MAX_BYTES - chan->in_bytes)
			ret = -EBADMSG;
		else {
			chan->in_reqs++;
			chan->in_bytes += total;
		}
	} else {
		list_for_each_entry(r, &chan->reqs, node) {
			if (r->id == id) {
				req = r;
				break;
			}
		}
		/* An ack names a request of ours; a success carries exactly its answer. */
		if (!req || (status ? total != 0 : total != req->resp_cap))
			ret = -EBADMSG;
		else
			refcount_inc(&req->ref);
	}
	spin_unlock_bh(&chan->lock);
	if (ret)
		return ret;
	rxm->active = true;
	rxm->type = type;
	rxm->id = id;
	rxm->total = total;
	rxm->got = 0;
	rxm->status = status;
	rxm->req = req;
	/* A request in one segment is read where it arrived (rxm->seg), not copied. */
	if (unload_chan_is_request(type) && total > seg) {
		rxm->buf = kvmalloc(total, GFP_KERNEL);
		if (!rxm->buf)
			return -ENOMEM;
	}
	return 0;
}

static void unload_chan_serve_work(struct work_struct *work);
static u32 unload_chan_write_place(struct unload_chan *chan, const u8 *buf, u32 len);

/* A request answered or handed to a job: the reassembly lets go of it, not of its share. */
static void unload_chan_rx_release(struct unload_chan *chan)
{
	kvfree(chan->rxm.buf);
	memset(&chan->rxm, 0, sizeof(chan->rxm));
}

/*
 * The peer's request, whole, in rx_work (process context: a placement may sleep). A
 * remote write is placed here and its ack sent at once when the send side is free, so one
 * work item stands between a write's arrival and its answer. An ack that would have to
 * wait (another sender, no slot or credit, which come back through the receive
 * completion and this work) goes to a job, as does an echo. The goodbye waits for every request whose share we hold
 * (unload_chan_say_goodbye), so no ack can follow it; one completed after
 * unload_chan_stop_serving is dropped unanswered, which the goodbye tells the peer.
 */
static int unload_chan_serve(struct unload_chan *chan)
{
	struct unload_chan_rx *rxm = &chan->rxm;
	struct unload_chan_share share = { .bytes = rxm->total, .held = true };
	const void *bytes = rxm->buf ?: rxm->seg;
	struct unload_chan_write_ack ack = {};
	struct unload_chan_job *job;
	bool closing;
	u32 deny;
	int ret;

	/* Taken first: a write placed must be answered, and its ack may need a job. */
	job = kzalloc(sizeof(*job), GFP_KERNEL);
	if (!job)
		return -ENOMEM;
	spin_lock_bh(&chan->lock);
	closing = chan->closing;
	spin_unlock_bh(&chan->lock);
	if (closing) {
		kfree(job);
		unload_chan_rx_reset(chan);	/* dropped unanswered: the peer knows */
		return 0;
	}
	job->type = rxm->type;
	job->id = rxm->id;
	job->len = rxm->total;
	if (rxm->type == UNLOAD_CHAN_WRITE) {
		/*
		 * A channel gone down since (the sender gave up on its acks, or went) has
		 * told its sender the write failed: it must not land after that.
		 */
		deny = unload_chan_state(chan, NULL) != UNLOAD_CHAN_UP ? UNLOAD_DENY_PEER_UNKNOWN :
		       unload_chan_write_place(chan, bytes, rxm->total);
		unload_target_count_refusal(deny);
		ack.verdict = cpu_to_le32(deny ? UNLOAD_CHAN_REFUSED : UNLOAD_CHAN_PLACED);
		ret = unload_chan_send_now(chan, UNLOAD_CHAN_ACK, rxm->id, &ack, sizeof(ack),
					   &share);
		if (ret != -EAGAIN) {
			unload_chan_share_return(chan, &share);	/* an ack that never went */
			kfree(job);
			unload_chan_rx_release(chan);
			return 0;
		}
		job->type = UNLOAD_CHAN_ACK;
		job->verdict = le32_to_cpu(ack.verdict);
	} else if (rxm->buf) {
		job->buf = rxm->buf;
		rxm->buf = NULL;
	} else if (rxm->total) {
		job->buf = kvmalloc(rxm->total, GFP_KERNEL);
		if (!job->buf) {
			kfree(job);
			return -ENOMEM;
		}
		memcpy(job->buf, rxm->seg, rxm->total);
	}
	INIT_WORK(&job->work, unload_chan_serve_work);
	kref_get(&chan->ref);
	job->chan = chan;
	queue_work(unload_chan_wq, &job->work);
	unload_chan_rx_release(chan);		/* the job holds the share */
	return 0;
}

static int unload_chan_rx_finish(struct unload_chan *chan)
{
	struct unload_chan_rx *rxm = &chan->rxm;
	struct unload_chan_req *req = rxm->req;
	bool unlisted = false, report = false;

	if (unload_chan_is_request(rxm->type))
		return unload_chan_serve(chan);
	spin_lock_bh(&chan->lock);
	if (!req->done) {
		req->done = true;
		req->status = rxm->status;
		req->resp_len = rxm->total;
		list_del_init(&req->node);
		chan->out_reqs--;
		chan->out_bytes -= req->len;
		unlisted = true;
		report = req->armed;
	}
	spin_unlock_bh(&chan->lock);
	wake_up_all(&chan->wq);
	if (report)
		req->done_fn(req);
	if (unlisted)
		unload_chan_req_put(req);	/* the pending list's */
	unload_chan_rx_reset(chan);		/* the reassembly's */
	return 0;
}

/*
 * A message on a channel not up yet: only the initiator's proof, on a channel we accepted,
 * exactly as channel_wire.h has it. Whatever else comes is refused unread, and the peer
 * that sent it let go: it proved nothing, so nothing of it is acted on.
 */
static int unload_chan_receive_proof(struct unload_chan *chan, const struct unload_chan_hdr *h,
				     u32 len)
{
	if (!chan->passive || unload_chan_state(chan, NULL) != UNLOAD_CHAN_CONNECTING ||
	    h->type != UNLOAD_CHAN_AUTH || len != UNLOAD_CHAN_HDR_LEN + UNLOAD_CHAN_PROOF_LEN ||
	    h->credits || h->id || h->status || h->seg_off ||
	    le32_to_cpu(h->total_len) != UNLOAD_CHAN_PROOF_LEN ||
	    le32_to_cpu(h->seg_len) != UNLOAD_CHAN_PROOF_LEN ||
	    unload_chan_auth_check(false, &chan->auth, (const u8 *)h + UNLOAD_CHAN_HDR_LEN)) {
		unload_chan_count(UNLOAD_CHAN_STAT_AUTH_REFUSED, 1);
		return -EKEYREJECTED;
	}
	unload_chan_mark_up(chan);
	return 0;
}

/* One received message, checked field by field before anything acts on it. */
static int unload_chan_receive(struct unload_chan *chan, const void *data, u32 len)
{
	const struct unload_chan_hdr *h = data;
	struct unload_chan_rx *rxm = &chan->rxm;
	u32 total, off, seg;
	int status, ret;
	u64 id;

	if (len < UNLOAD_CHAN_HDR_LEN || len > UNLOAD_CHAN_BUF)
		return -EBADMSG;
	if (le16_to_cpu(h->magic) != UNLOAD_CHAN_MAGIC || h->version != UNLOAD_CHAN_VERSION ||
	    h->reserved0 || h->reserved1)
		return -EBADMSG;
	/* The proof, and nothing before it; once up, a proof again is the peer's fault. */
	if (h->type == UNLOAD_CHAN_AUTH || unload_chan_state(chan, NULL) != UNLOAD_CHAN_UP)
		return unload_chan_receive_proof(chan, h, len);
	id = le64_to_cpu(h->id);
	total = le32_to_cpu(h->total_len);
	off = le32_to_cpu(h->seg_off);
	seg = le32_to_cpu(h->seg_len);
	status = (int)le32_to_cpu(h->status);
	if (seg != len - UNLOAD_CHAN_HDR_LEN)
		return -EBADMSG;
	ret = unload_chan_take_credits(chan, le16_to_cpu(h->credits));
	if (ret)
		return ret;
	switch (h->type) {
	case UNLOAD_CHAN_CREDIT:
		return id || total || off || seg || status ? -EBADMSG : 0;
	case UNLOAD_CHAN_BYE:
		/* Between a message's segments it would cut one short: the peer's fault. */
		if (id || total || off || seg || status || rxm->active)
			return -EBADMSG;
		return -ECONNABORTED;	/* our pending requests were never handled */
	case UNLOAD_CHAN_ECHO:
	case UNLOAD_CHAN_WRITE:
		if (status)
			return -EBADMSG;
		break;
	case UNLOAD_CHAN_ACK:
		if (status > 0 || status < -MAX_ERRNO)
			return -EBADMSG;
		WRITE_ONCE(chan->last_ack, jiffies);	/* the responder is answering */
		break;
	default:
		return -EBADMSG;
	}
	if (total > UNLOAD_CHAN_MSG_MAX || (total ? !seg : seg))
		return -EBADMSG;
	if (!rxm->active) {
		if (off)
			return -EBADMSG;
		ret = unload_chan_rx_start(chan, h->type, id, total, seg, status);
		if (ret)
			return ret;
	} else if (h->type != rxm->type || id != rxm->id || total != rxm->total ||
		   status != rxm->status || off != rxm->got) {
		return -EBADMSG;
	}
	if (seg > rxm->total - rxm->got)
		return -EBADMSG;
	if (seg && unload_chan_is_request(rxm->type) && !rxm->buf) {
		rxm->seg = data + UNLOAD_CHAN_HDR_LEN;	/* the whole request: read before reposting */
	} else if (seg && unload_chan_is_request(rxm->type)) {
		memcpy(rxm->buf + rxm->got, data + UNLOAD_CHAN_HDR_LEN, seg);
	} else if (seg) {
		/* Under the lock: a request completed by a teardown is its waiter's again. */
		spin_lock_bh(&chan->lock);
		if (!rxm->req->done)
			memcpy(rxm->req->resp + rxm->got, data + UNLOAD_CHAN_HDR_LEN, seg);
		spin_unlock_bh(&chan->lock);
	}
	rxm->got += seg;
	return rxm->got == rxm->total ? unload_chan_rx_finish(chan) : 0;
}

/* One received message acted on, its buffer posted again and the credit counted. */
static void unload_chan_consume(struct unload_chan *chan, struct unload_chan_buf *b)
{
	int ret;

	ret = b->with_imm ? -EBADMSG : unload_chan_receive(chan, b->data, b->byte_len);
	if (ret == -EBADMSG) {
		unload_chan_count(UNLOAD_CHAN_STAT_BAD_MSGS, 1);
		pr_notice_ratelimited("unload: channel %llu: a malformed message from the peer; closing it\n",
				      chan->serial);
		ret = -EPROTO;
	}
	if (!ret)
		ret = unload_chan_post_recv(chan, b);
	if (ret) {
		unload_chan_fail(chan, ret);
		return;
	}
	spin_lock_bh(&chan->lock);
	chan->to_return++;
	spin_unlock_bh(&chan->lock);
	unload_chan_return_credits(chan);
}

/*
 * Whether a received message needs process context: a request of the peer's (its
 * placement may sleep, its reassembly allocates, its ack waits on tx_mutex), a segment
 * or credit between a request's segments, and anything before the channel is up (the
 * proof's check). Acks, credits and the goodbye are acted on where they arrive. Under
 * chan->lock, from the receive completion, which alone reads rxm while not deferring.
 */
static bool unload_chan_needs_process(struct unload_chan *chan, const struct unload_chan_buf *b)
{
	const struct unload_chan_hdr *h = b->data;

	lockdep_assert_held(&chan->lock);
	if (chan->state != UNLOAD_CHAN_UP || b->byte_len < UNLOAD_CHAN_HDR_LEN || b->with_imm)
		return chan->state != UNLOAD_CHAN_UP;
	return unload_chan_is_request(h->type) || h->type == UNLOAD_CHAN_AUTH ||
	       (chan->rxm.active && unload_chan_is_request(chan->rxm.type));
}

/*
 * The channel's receive completion, in softirq (the CQ is IB_POLL_SOFTIRQ): an ack
 * reaches its waiter, or its callback, with no worker between (on a one-CPU host that
 * worker's wake-up was 35-55 us of a remote write's). A message that needs process
 * context goes to rx_work, and so does every message after it until rx_work has caught
 * up, so the receive side acts on them in the order they came.
 */
static void unload_chan_recv_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct unload_chan_buf *b = container_of(wc->wr_cqe, struct unload_chan_buf, cqe);
	struct unload_chan *chan = b->chan;
	bool defer;

	if (wc->status != IB_WC_SUCCESS) {
		if (wc->status != IB_WC_WR_FLUSH_ERR)
			unload_chan_fail(chan, -ECONNRESET);
		return;
	}
	if (unload_chan_state(chan, NULL) == UNLOAD_CHAN_DOWN)
		return;
	ib_dma_sync_single_for_cpu(chan->dev, b->dma, UNLOAD_CHAN_BUF, DMA_FROM_DEVICE);
	WRITE_ONCE(chan->last_used, jiffies);
	unload_chan_count(UNLOAD_CHAN_STAT_MSGS_RX, 1);
	unload_chan_count(UNLOAD_CHAN_STAT_BYTES_RX, wc->byte_len);
	b->byte_len = wc->byte_len;
	b->with_imm = wc->wc_flags & IB_WC_WITH_IMM;
	spin_lock_bh(&chan->lock);
	defer = chan->rx_deferring || unload_chan_needs_process(chan, b);
	if (defer) {
		chan->rx_deferring = true;
		list_add_tail(&b->link, &chan->rx_backlog);
	}
	spin_unlock_bh(&chan->lock);
	if (defer)
		queue_work(unload_chan_wq, &chan->rx_work);
	else
		unload_chan_consume(chan, b);
}

/*
 * The receives that need process context, in order, until none is left; then the
 * receive completion acts on messages itself again. The teardown cancels it after the CQ
 * is freed, so nothing is added to the backlog while it goes.
 */
void unload_chan_rx_work(struct work_struct *work)
{
	struct unload_chan *chan = container_of(work, struct unload_chan, rx_work);
	struct unload_chan_buf *b;

	for (;;) {
		spin_lock_bh(&chan->lock);
		b = list_first_entry_or_null(&chan->rx_backlog, struct unload_chan_buf, link);
		if (b)
			list_del_init(&b->link);
		else
			chan->rx_deferring = false;
		spin_unlock_bh(&chan->lock);
		if (!b)
			return;
		if (unload_chan_state(chan, NULL) != UNLOAD_CHAN_DOWN)
			unload_chan_consume(chan, b);
	}
}

/*
 * A remote write from the peer: its header checked (the peer's word), then the target's
 * checks and the copy (target.c). The channel names who sent it and where it arrived:
 * those the request cannot claim.
 */
static u32 unload_chan_write_place(struct unload_chan *chan, const u8 *buf, u32 len)
{
	const struct unload_chan_write *w = (const void *)buf;
	struct unload_target_write t = { .dev = chan->dev };

	if (len < sizeof(*w) || w->reserved || le32_to_cpu(w->length) != len - sizeof(*w))
		return UNLOAD_DENY_INVALID;
	memcpy(t.peer_gid.raw, chan->peer_gid, sizeof(t.peer_gid.raw));
	memcpy(t.local_gid.raw, chan->local_gid, sizeof(t.local_gid.raw));
	t.src_qpn = le32_to_cpu(w->src_qpn);
	t.dst_qpn = le32_to_cpu(w->dst_qpn);
	t.rkey = le32_to_cpu(w->rkey);
	t.length = le32_to_cpu(w->length);
	t.remote_addr = le64_to_cpu(w->remote_addr);
	t.data = buf + sizeof(*w);
	return unload_target_place(&t);
}

/*
 * From now on the peer's requests are dropped unanswered (unload_chan_serve); those
 * already taken are still answered. The module's exit and the reaper call this, then say
 * goodbye (unload_chan_say_goodbye), which waits for those answers.
 */
void unload_chan_stop_serving(struct unload_chan *chan)
{
	spin_lock_bh(&chan->lock);
	chan->closing = true;
	spin_unlock_bh(&chan->lock);
}

/* Answer one of the peer's requests, or send a placed write's ack (unload_chan_serve). */
static void unload_chan_serve_work(struct work_struct *work)
{
	struct unload_chan_job *job = container_of(work, struct unload_chan_job, work);
	struct unload_chan *chan = job->chan;
	struct unload_chan_share share = { .bytes = job->len, .held = true };
	struct unload_chan_write_ack ack = { .verdict = cpu_to_le32(job->verdict) };

	/* A write's ack is 8 bytes: its share is its request's length, not the ack's. */
	if (job->type == UNLOAD_CHAN_ACK)
		unload_chan_send_msg(chan, UNLOAD_CHAN_ACK, job->id, 0, &ack, sizeof(ack), &share,
				     NULL);
	else
		unload_chan_send_msg(chan, UNLOAD_CHAN_ACK, job->id, 0, job->buf, job->len, &share,
				     NULL);
	unload_chan_share_return(chan, &share);	/* an ack that never went */
	kvfree(job->buf);
	kfree(job);
	unload_chan_put(chan);
}

/*
 * The ring: receives and send slots mapped once, every receive posted (the peer's initial
 * credits). On failure the caller still destroys the QP and frees the CQ before
 * unload_chan_ring_destroy, as after success: posted receives name these buffers.
 */
int unload_chan_ring_create(struct unload_chan *chan)
{
	int i, ret;

	chan->rx = kcalloc(UNLOAD_CHAN_RING, sizeof(*chan->rx), GFP_KERNEL);
	chan->tx = kcalloc(UNLOAD_CHAN_RING + 1, sizeof(*chan->tx), GFP_KERNEL);
	if (!chan->rx || !chan->tx)
		return -ENOMEM;
	for (i = 0; i < UNLOAD_CHAN_RING; i++) {
		ret = unload_chan_buf_map(chan, &chan->rx[i], DMA_FROM_DEVICE, unload_chan_recv_done);
		if (ret)
			return ret;
	}
	for (i = 0; i <= UNLOAD_CHAN_RING; i++) {
		ret = unload_chan_buf_map(chan, &chan->tx[i], DMA_TO_DEVICE, unload_chan_send_done);
		if (ret)
			return ret;
		if (i < UNLOAD_CHAN_RING)
			list_add_tail(&chan->tx[i].link, &chan->tx_free);
	}
	chan->credits = UNLOAD_CHAN_RING;
	for (i = 0; i < UNLOAD_CHAN_RING; i++) {
		ret = unload_chan_post_recv(chan, &chan->rx[i]);
		if (ret)
			return ret;
	}
	return 0;
}

void unload_chan_ring_destroy(struct unload_chan *chan)
{
	int i;

	unload_chan_rx_reset(chan);
	for (i = 0; chan->rx && i < UNLOAD_CHAN_RING; i++)
		unload_chan_buf_unmap(chan, &chan->rx[i], DMA_FROM_DEVICE);
	for (i = 0; chan->tx && i <= UNLOAD_CHAN_RING; i++)
		unload_chan_buf_unmap(chan, &chan->tx[i], DMA_TO_DEVICE);
	INIT_LIST_HEAD(&chan->tx_free);
	INIT_LIST_HEAD(&chan->tx_posted);
	INIT_LIST_HEAD(&chan->rx_backlog);
	kfree(chan->rx);
	kfree(chan->tx);
	chan->rx = NULL;
	chan->tx = NULL;
}

