// SPDX-License-Identifier: GPL-2.0
/*
 * The channel's send side and state (docs/design.md, "The channel"): the one way a
 * channel goes down (unload_chan_fail), credits spent and returned, a message segmented
 * into send slots, our requests admitted within the bounds the peer holds us to and
 * waiting for their acks. The receive side is channel_rx.c.
 */
#include <linux/delay.h>
#include <linux/mm.h>
#include <linux/slab.h>

#include "unload_channel.h"

atomic64_t unload_chan_stats[UNLOAD_CHAN_STAT_COUNT];
atomic_t unload_chans_open;
struct workqueue_struct *unload_chan_wq;
static u64 *unload_chan_up_word;	/* the control page's channels_up (unload_chan_io_init) */

/* Receives posted again before we return them in a message of their own, when no data
 * message of ours carries them sooner. */
#define UNLOAD_CHAN_CREDIT_BATCH	(UNLOAD_CHAN_RING / 2)

/*
 * A data slot's send asks for a completion only once in this many, or when it takes the
 * last free slot. RC completes sends in order, so a signaled completion gives back every
 * slot posted before it; each completion saved is a work item less on the CPU that the
 * next write's driver needs (on the target, one came after every write's ack).
 */
#define UNLOAD_CHAN_SIGNAL_EVERY	(UNLOAD_CHAN_RING / 2)

void unload_chan_count(enum unload_chan_stat s, u64 n)
{
	atomic64_add(n, &unload_chan_stats[s]);
}

static void unload_chan_release(struct kref *ref)
{
	kfree(container_of(ref, struct unload_chan, ref));
}

void unload_chan_put(struct unload_chan *chan)
{
	kref_put(&chan->ref, unload_chan_release);
}

void unload_chan_req_put(struct unload_chan_req *req)
{
	if (refcount_dec_and_test(&req->ref)) {
		kvfree(req->resp);
		kfree(req);
	}
}

int unload_chan_state(struct unload_chan *chan, int *err)
{
	int state;

	spin_lock_bh(&chan->lock);
	state = chan->state;
	if (err)
		*err = chan->err;
	spin_unlock_bh(&chan->lock);
	return state;
}

/*
 * The channel goes down: every pending request completes with err, every waiter wakes,
 * and the teardown is queued (it must not run here: we may be in the rdma_cm handler or
 * the CQ's work, both of which the teardown waits for). If only_connecting, only a
 * channel still connecting goes (a caller that gave up waiting must not take down a
 * channel that came up meanwhile).
 */
static bool __unload_chan_fail(struct unload_chan *chan, int err, bool only_connecting)
{
	struct unload_chan_req *req, *tmp;
	LIST_HEAD(gone);

	spin_lock_bh(&chan->lock);
	if (chan->state == UNLOAD_CHAN_DOWN ||
	    (only_connecting && chan->state != UNLOAD_CHAN_CONNECTING)) {
		spin_unlock_bh(&chan->lock);
		return false;
	}
	chan->state = UNLOAD_CHAN_DOWN;
	chan->err = err;
	list_for_each_entry_safe(req, tmp, &chan->reqs, node) {
		req->status = err;
		req->done = true;
		list_move(&req->node, &gone);
	}
	chan->out_reqs = 0;
	chan->out_bytes = 0;
	spin_unlock_bh(&chan->lock);

	/* armed is settled: a poster arms only a request not done */
	list_for_each_entry_safe(req, tmp, &gone, node) {
		list_del_init(&req->node);
		if (req->armed)
			req->done_fn(req);
		unload_chan_req_put(req);	/* the pending list's */
	}
	if (err == -ECONNABORTED)
		unload_chan_count(UNLOAD_CHAN_STAT_GOODBYES, 1);
	else if (err != -ESHUTDOWN)
		unload_chan_count(UNLOAD_CHAN_STAT_ERRORS, 1);
	wake_up_all(&chan->wq);
	kref_get(&chan->ref);			/* the teardown's */
	queue_work(unload_chan_wq, &chan->teardown);
	return true;
}

void unload_chan_fail(struct unload_chan *chan, int err)
{
	__unload_chan_fail(chan, err, false);
}

bool unload_chan_give_up(struct unload_chan *chan, int err)
{
	return __unload_chan_fail(chan, err, true);
}

static int unload_chan_post_send(struct unload_chan *chan, struct unload_chan_buf *b, u32 len,
				 bool signaled)
{
	struct ib_sge sge = { .addr = b->dma, .length = len, .lkey = chan->pd->local_dma_lkey };
	struct ib_send_wr wr = {
		.wr_cqe = &b->cqe, .sg_list = &sge, .num_sge = 1,
		.opcode = IB_WR_SEND, .send_flags = signaled ? IB_SEND_SIGNALED : 0,
	};
	int ret;

	ib_dma_sync_single_for_device(chan->dev, b->dma, len, DMA_TO_DEVICE);
	ret = ib_post_send(chan->qp, &wr, NULL);
	if (!ret) {
		WRITE_ONCE(chan->last_used, jiffies);
		unload_chan_count(UNLOAD_CHAN_STAT_MSGS_TX, 1);
		unload_chan_count(UNLOAD_CHAN_STAT_BYTES_TX, len);
	}
	return ret;
}

static void unload_chan_hdr_fill(void *data, u8 type, u16 credits, u64 id, u32 total,
				 u32 off, u32 seg, int status)
{
	struct unload_chan_hdr *h = data;

	memset(h, 0, sizeof(*h));
	h->magic = cpu_to_le16(UNLOAD_CHAN_MAGIC);
	h->version = UNLOAD_CHAN_VERSION;
	h->type = type;
	h->credits = cpu_to_le16(credits);
	h->id = cpu_to_le64(id);
	h->total_len = cpu_to_le32(total);
	h->seg_off = cpu_to_le32(off);
	h->seg_len = cpu_to_le32(seg);
	h->status = cpu_to_le32((u32)status);
}

/*
 * An explicit credit message, when enough receives were posted again and no data message
 * of ours carried them. It may spend the last credit, which data messages leave for it:
 * it hands the peer at least a batch, so the peer can always answer.
 */
void unload_chan_return_credits(struct unload_chan *chan)
{
	struct unload_chan_buf *slot = &chan->tx[UNLOAD_CHAN_RING];
	u16 n = 0;

	spin_lock_bh(&chan->lock);
	if (chan->state == UNLOAD_CHAN_UP && !chan->credit_busy && chan->credits &&
	    chan->to_return >= UNLOAD_CHAN_CREDIT_BATCH) {
		chan->credit_busy = true;
		chan->credits--;
		n = chan->to_return;
		chan->to_return = 0;
	}
	spin_unlock_bh(&chan->lock);
	if (!n)
		return;
	unload_chan_hdr_fill(slot->data, UNLOAD_CHAN_CREDIT, n, 0, 0, 0, 0, 0);
	if (unload_chan_post_send(chan, slot, UNLOAD_CHAN_HDR_LEN, true))
		unload_chan_fail(chan, -EIO);
}

/*
 * The completion of data slot b: b and every unsignaled slot posted before it are free.
 * A flushed unsignaled slot completes on its own, after those before it.
 */
static void unload_chan_slots_done(struct unload_chan *chan, struct unload_chan_buf *b)
{
	struct unload_chan_buf *first;

	lockdep_assert_held(&chan->lock);
	if (!b->on_wire)
		return;
	do {
		first = list_first_entry(&chan->tx_posted, struct unload_chan_buf, link);
		first->on_wire = false;
		list_move(&first->link, &chan->tx_free);
	} while (first != b);
}

void unload_chan_send_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct unload_chan_buf *b = container_of(wc->wr_cqe, struct unload_chan_buf, cqe);
	struct unload_chan *chan = b->chan;
	bool credit_slot = b == &chan->tx[UNLOAD_CHAN_RING];

	spin_lock_bh(&chan->lock);
	if (credit_slot)
		chan->credit_busy = false;
	else
		unload_chan_slots_done(chan, b);
	spin_unlock_bh(&chan->lock);
	if (wc->status != IB_WC_SUCCESS) {
		if (wc->status != IB_WC_WR_FLUSH_ERR)
			unload_chan_fail(chan, -ECONNRESET);
		return;
	}
	wake_up_all(&chan->wq);
	if (credit_slot)
		unload_chan_return_credits(chan);
}

/*
 * A send slot and a credit for one data segment, with the receives to return on it.
 * -EAGAIN: wait (none free yet, or a passive channel not yet established).
 */
static int unload_chan_take_slot(struct unload_chan *chan, struct unload_chan_buf **slot,
				 u16 *credits, bool *signaled)
{
	int ret = -EAGAIN;

	spin_lock_bh(&chan->lock);
	if (chan->state == UNLOAD_CHAN_DOWN) {
		ret = chan->err;
	} else if (chan->state == UNLOAD_CHAN_UP && chan->credits > 1 &&
		   !list_empty(&chan->tx_free)) {
		/* Taken in post order: the caller holds tx_mutex until the post. */
		*slot = list_first_entry(&chan->tx_free, struct unload_chan_buf, link);
		list_move_tail(&(*slot)->link, &chan->tx_posted);
		(*slot)->on_wire = true;
		*signaled = list_empty(&chan->tx_free) ||
			    ++chan->tx_unsignaled >= UNLOAD_CHAN_SIGNAL_EVERY;
		if (*signaled)
			chan->tx_unsignaled = 0;
		chan->credits--;
		*credits = chan->to_return;
		chan->to_return = 0;
		ret = 0;
	}
	spin_unlock_bh(&chan->lock);
	return ret;
}

/* Post a taken slot; if the post fails the slot is free again (the channel goes down). */
static int unload_chan_post_slot(struct unload_chan *chan, struct unload_chan_buf *slot, u32 len,
				 bool signaled)
{
	int ret = unload_chan_post_send(chan, slot, len, signaled);

	if (ret) {
		/* The slots before it wait for the flush. */
		spin_lock_bh(&chan->lock);
		slot->on_wire = false;
		list_move(&slot->link, &chan->tx_free);
		spin_unlock_bh(&chan->lock);
	}
	return ret;
}

void unload_chan_share_return(struct unload_chan *chan, struct unload_chan_share *share)
{
	if (!share->held)
		return;
	spin_lock_bh(&chan->lock);
	chan->in_reqs--;
	chan->in_bytes -= share->bytes;
	spin_unlock_bh(&chan->lock);
	share->held = false;
}

/*
 * One message, segmented, its segments contiguous on the wire (tx_mutex). With share, it
 * is the ack of a peer's request whose share we give back just before the last segment
 * goes: the peer sends its next request only after that segment, so it never finds us
 * over the bound it keeps to.
 */
int unload_chan_send_msg(struct unload_chan *chan, u8 type, u64 id, int status,
			 const void *payload, u32 len, struct unload_chan_share *share,
			 u32 *segments)
{
	struct unload_chan_buf *slot;
	u32 off = 0, n = 0, seg;
	bool signaled;
	u16 credits;
	long left;
	int ret;

	if (mutex_lock_killable(&chan->tx_mutex))
		return -EINTR;
	do {
		seg = min_t(u32, len - off, UNLOAD_CHAN_SEG_MAX);
		/*
		 * Once a segment is out, the message is finished whatever happens to the
		 * caller: a message cut short would take down a channel others share.
		 */
		if (!n)
			left = wait_event_killable_timeout(chan->wq,
				(ret = unload_chan_take_slot(chan, &slot, &credits, &signaled)) != -EAGAIN,
				msecs_to_jiffies(UNLOAD_CHAN_WAIT_MS));
		else
			left = wait_event_timeout(chan->wq,
				(ret = unload_chan_take_slot(chan, &slot, &credits, &signaled)) != -EAGAIN,
				msecs_to_jiffies(UNLOAD_CHAN_WAIT_MS));
		if (left <= 0) {
			ret = left ? -EINTR : -ETIMEDOUT;
			break;
		}
		if (ret)
			break;
		unload_chan_hdr_fill(slot->data, type, credits, id, len, off, seg, status);
		if (seg)
			memcpy(slot->data + UNLOAD_CHAN_HDR_LEN, payload + off, seg);
		if (share && off + seg == len)
			unload_chan_share_return(chan, share);
		ret = unload_chan_post_slot(chan, slot, UNLOAD_CHAN_HDR_LEN + seg, signaled);
		if (ret)
			break;
		off += seg;
		n++;
	} while (off < len);
	mutex_unlock(&chan->tx_mutex);
	/* A message cut short leaves the peer mid-reassembly: the channel cannot go on. */
	if (ret && !(ret == -EINTR && !n))
		unload_chan_fail(chan, ret);
	if (segments)
		*segments = n;
	return ret;
}

/*
 * A message of one segment sent now, or -EAGAIN if it would wait: another sender holds
 * the send side, or no slot or credit is free. For the receive work, which must not wait
 * (the slots and credits come back through the receive side), and a submitter's issue;
 * process context (tx_mutex), never the softirq. As unload_chan_send_msg otherwise (a
 * failed post takes the channel down).
 */
int unload_chan_send_now(struct unload_chan *chan, u8 type, u64 id, const void *payload,
			 u32 len, struct unload_chan_share *share)
{
	struct unload_chan_buf *slot;
	bool signaled;
	u16 credits;
	int ret;

	if (len > UNLOAD_CHAN_SEG_MAX)
		return -EMSGSIZE;
	if (!mutex_trylock(&chan->tx_mutex))
		return -EAGAIN;
	ret = unload_chan_take_slot(chan, &slot, &credits, &signaled);
	if (!ret) {
		unload_chan_hdr_fill(slot->data, type, credits, id, len, 0, len, 0);
		memcpy(slot->data + UNLOAD_CHAN_HDR_LEN, payload, len);
		if (share)
			unload_chan_share_return(chan, share);
		ret = unload_chan_post_slot(chan, slot, UNLOAD_CHAN_HDR_LEN + len, signaled);
	}
	mutex_unlock(&chan->tx_mutex);
	if (ret && ret != -EAGAIN)
		unload_chan_fail(chan, ret);
	return ret;
}

/*
 * The goodbye (channel_wire.h, UNLOAD_CHAN_BYE), once unload_chan_stop_serving has
 * stopped the peer's new requests: first every request we hold is answered (each holds
 * its share until its ack is posted; at most UNLOAD_CHAN_WAIT_MS, for one the peer never
 * finished sending, which is dropped unanswered).
 * Then we wait for the peer to disconnect, which it does once it has read the goodbye:
 * had we disconnected first, its rdma_cm could tell it before its receive queue did, and
 * its pending requests would fail as unanswered. A peer that does not disconnect in time
 * is left to that, as without a goodbye.
 */
void unload_chan_say_goodbye(struct unload_chan *chan)
{
	int waited;

	for (waited = 0; READ_ONCE(chan->in_reqs) && waited < UNLOAD_CHAN_WAIT_MS; waited += 10) {
		if (unload_chan_state(chan, NULL) != UNLOAD_CHAN_UP)
			return;
		msleep(10);
	}
	if (unload_chan_state(chan, NULL) != UNLOAD_CHAN_UP)
		return;
	if (unload_chan_send_msg(chan, UNLOAD_CHAN_BYE, 0, 0, NULL, 0, NULL, NULL))
		return;
	wait_event_timeout(chan->wq, unload_chan_state(chan, NULL) == UNLOAD_CHAN_DOWN,
			   msecs_to_jiffies(UNLOAD_CHAN_CONNECT_MS));
}

/*
 * The initiator's proof (channel_wire.h, UNLOAD_CHAN_AUTH): its first message. The caller
 * marked the channel up holding tx_mutex, and holds it still: every other sender waits
 * for that mutex (and the credit message needs credits the peer cannot have returned
 * before it read this), so the proof goes first.
 */
int unload_chan_send_auth(struct unload_chan *chan, const u8 *proof)
{
	struct unload_chan_buf *slot;
	bool signaled;
	u16 credits;
	int ret;

	lockdep_assert_held(&chan->tx_mutex);
	ret = unload_chan_take_slot(chan, &slot, &credits, &signaled);
	if (ret)
		return ret == -EAGAIN ? -EPROTO : ret;	/* a fresh ring has every slot */
	unload_chan_hdr_fill(slot->data, UNLOAD_CHAN_AUTH, credits, 0, UNLOAD_CHAN_PROOF_LEN, 0,
			     UNLOAD_CHAN_PROOF_LEN, 0);
	memcpy(slot->data + UNLOAD_CHAN_HDR_LEN, proof, UNLOAD_CHAN_PROOF_LEN);
	ret = unload_chan_post_send(chan, slot, UNLOAD_CHAN_HDR_LEN + UNLOAD_CHAN_PROOF_LEN,
				    signaled);
	if (ret) {
		spin_lock_bh(&chan->lock);
		slot->on_wire = false;
		list_move(&slot->link, &chan->tx_free);
		spin_unlock_bh(&chan->lock);
	}
	return ret;
}

/* Room for one more request of ours: -EAGAIN to wait. */
static int unload_chan_admit(struct unload_chan *chan, struct unload_chan_req *req)
{
	int ret = -EAGAIN;

	spin_lock_bh(&chan->lock);
	if (chan->state != UNLOAD_CHAN_UP) {
		ret = chan->err ?: -ENOTCONN;
	} else if (chan->retiring) {
		ret = -ECONNABORTED;	/* closing for idleness: never sent, so the NIC's */
	} else if (chan->out_reqs < UNLOAD_CHAN_MAX_REQS &&
		   req->len <= UNLOAD_CHAN_MAX_BYTES - chan->out_bytes) {
		req->id = ++chan->next_id;
		list_add_tail(&req->node, &chan->reqs);
		chan->out_reqs++;
		chan->out_bytes += req->len;
		ret = 0;
	}
	spin_unlock_bh(&chan->lock);
	return ret;
}

/* A request that never went out whole: off the pending list, its share back. */
static void unload_chan_forget(struct unload_chan *chan, struct unload_chan_req *req, int err)
{
	bool unlisted = false;

	spin_lock_bh(&chan->lock);
	if (!req->done) {
		req->done = true;
		req->status = err;
		list_del_init(&req->node);
		chan->out_reqs--;
		chan->out_bytes -= req->len;
		unlisted = true;
	}
	spin_unlock_bh(&chan->lock);
	if (unlisted)
		unload_chan_req_put(req);
}

/* A request of len payload bytes whose answer is resp_len bytes: the caller's reference. */
struct unload_chan_req *unload_chan_req_alloc(u32 len, u32 resp_len)
{
	struct unload_chan_req *req;

	req = kzalloc(sizeof(*req), GFP_KERNEL_ACCOUNT);	/* the caller's memory cgroup */
	if (!req)
		return NULL;
	refcount_set(&req->ref, 1);
	INIT_LIST_HEAD(&req->node);
	req->len = len;
	req->resp_cap = resp_len;
	if (resp_len) {
		req->resp = kvmalloc(resp_len, GFP_KERNEL_ACCOUNT);
		if (!req->resp) {
			kfree(req);
			return NULL;
		}
	}
	return req;
}

/*
 * Admit req and send it whole; the pending list's reference taken. nonblock: -EAGAIN
 * rather than wait for room, the send side, a slot or a credit (one segment only). On any
 * error req is off the list (done, with that status) and nothing of it was placed.
 */
static int unload_chan_send_req(struct unload_chan *chan, struct unload_chan_req *req, u8 type,
				const void *payload, bool nonblock, u32 *segments)
{
	long left;
	int ret;

	if (req->len > UNLOAD_CHAN_MSG_MAX)
		return -EMSGSIZE;
	if (nonblock && req->len > UNLOAD_CHAN_SEG_MAX)
		return -EAGAIN;
	refcount_inc(&req->ref);		/* the pending list's, once admitted */
	if (nonblock) {
		ret = unload_chan_admit(chan, req);
	} else {
		left = wait_event_killable_timeout(chan->wq,
			(ret = unload_chan_admit(chan, req)) != -EAGAIN,
			msecs_to_jiffies(UNLOAD_CHAN_WAIT_MS));
		if (left <= 0)
			ret = left ? -EINTR : -ETIMEDOUT;
	}
	if (ret) {
		if (list_empty(&req->node))
			refcount_dec(&req->ref);	/* never listed */
		else
			unload_chan_forget(chan, req, ret);
		return ret;
	}
	if (nonblock) {
		ret = unload_chan_send_now(chan, type, req->id, payload, req->len, NULL);
		if (segments)
			*segments = !ret;
	} else {
		ret = unload_chan_send_msg(chan, type, req->id, 0, payload, req->len, NULL, segments);
	}
	if (ret)
		unload_chan_forget(chan, req, ret);
	return ret;
}

/* The expiry queued for `end` at the latest (under chan->lock, the channel up). */
static void unload_chan_expire_by(struct unload_chan *chan, unsigned long end)
{
	unsigned long now = jiffies;

	lockdep_assert_held(&chan->lock);
	if (delayed_work_pending(&chan->expire) && !time_before(end, chan->expire_at))
		return;
	chan->expire_at = end;
	mod_delayed_work(unload_chan_wq, &chan->expire, time_after(end, now) ? end - now : 0);
}

/*
 * When req's ack is overdue: the peer silent for its quiet time since it was sent or
 * since the last ack the peer sent, or UNLOAD_CHAN_WAIT_MS after it was sent, whichever
 * is first. Silence, not the wait's length, is what fails a request: a NIC's retry timer
 * restarts at every ACK, so a loaded responder still answering the channel's other
 * requests is slow, not gone, and the NIC path would not fail the write either.
 */
static unsigned long unload_chan_ack_due(struct unload_chan *chan, unsigned long sent,
					 unsigned long quiet)
{
	const unsigned long last = sent + msecs_to_jiffies(UNLOAD_CHAN_WAIT_MS);
	unsigned long heard = READ_ONCE(chan->last_ack);

	if (time_before(heard, sent))
		heard = sent;
	return time_before(heard + quiet, last) ? heard + quiet : last;
}

/*
 * The channel's expiry: an armed request past its due time takes the channel down (every
 * request then completes with -ETIMEDOUT), as unload_chan_call's waiter does for its own;
 * otherwise it looks again at the earliest due time.
 */
void unload_chan_expire_work(struct work_struct *work)
{
	struct unload_chan *chan = container_of(to_delayed_work(work), struct unload_chan, expire);
	unsigned long now = jiffies, due, next = 0;
	bool overdue = false, counted = false, any = false;
	struct unload_chan_req *req;

	spin_lock_bh(&chan->lock);
	list_for_each_entry(req, &chan->reqs, node) {
		if (!req->armed || chan->state != UNLOAD_CHAN_UP)
			continue;
		due = unload_chan_ack_due(chan, req->sent, req->quiet);
		if (!time_before(now, due)) {
			overdue = true;
			counted = req->quiet < msecs_to_jiffies(UNLOAD_CHAN_WAIT_MS);
			break;
		}
		if (!any || time_before(due, next))
			next = due;
		any = true;
	}
	if (!overdue && any)
		unload_chan_expire_by(chan, next);
	spin_unlock_bh(&chan->lock);
	if (!overdue)
		return;
	if (counted)
		unload_chan_count(UNLOAD_CHAN_STAT_EXPIRED, 1);
	unload_chan_fail(chan, -ETIMEDOUT);
}

/*
 * Send an asynchronous request, req->done_fn and req->ctx set. Returns 0 once it is wholly
 * posted: done_fn then tells its outcome exactly once, from the ack's completion, from
 * whatever takes the channel down, or from here if the ack came first; an ack not back
 * while the peer stayed silent for ack_ms takes the channel down (the expiry), as in
 * unload_chan_call. Any other return: it was not wholly posted, so never placed, and
 * done_fn is not called. nonblock: -EAGAIN rather than wait (unload_chan_send_req).
 */
int unload_chan_post_req(struct unload_chan *chan, struct unload_chan_req *req, u8 type,
			 const void *payload, unsigned int ack_ms, bool nonblock, u32 *segments)
{
	bool report = false;
	int ret;

	ret = unload_chan_send_req(chan, req, type, payload, nonblock, segments);
	if (ret)
		return ret;
	spin_lock_bh(&chan->lock);
	req->sent = jiffies;
	req->quiet = msecs_to_jiffies(min_t(unsigned int, ack_ms, UNLOAD_CHAN_WAIT_MS));
	if (req->done) {
		report = true;		/* answered, or failed, already */
	} else {
		req->armed = true;
		if (chan->state == UNLOAD_CHAN_UP)
			unload_chan_expire_by(chan, req->sent + req->quiet);
	}
	spin_unlock_bh(&chan->lock);
	if (report)
		req->done_fn(req);
	return 0;
}

/* A completed request's outcome: 0 with its whole answer in req->resp, or why not. */
int unload_chan_req_answer(struct unload_chan_req *req)
{
	if (req->status)
		return req->status;
	return req->resp_len == req->resp_cap ? 0 : -EPROTO;
}

/*
 * Wait for req's ack until it is due (unload_chan_ack_due): > 0 answered, 0 not, < 0
 * killed.
 */
static long unload_chan_wait_ack(struct unload_chan *chan, struct unload_chan_req *req,
				 unsigned long sent, unsigned long quiet)
{
	unsigned long end, now;
	long left;

	for (;;) {
		end = unload_chan_ack_due(chan, sent, quiet);
		now = jiffies;
		if (!time_before(now, end))
			return READ_ONCE(req->done) ? 1 : 0;
		left = wait_event_killable_timeout(chan->wq, READ_ONCE(req->done), end - now);
		if (left)
			return left;
	}
}

/*
 * Send a request and wait for its ack. On success the ack's payload (exactly resp_len
 * bytes: each type's answer has one size) is *resp, the caller's to kvfree. A caller
 * killed while waiting leaves the request pending: its ack still releases it.
 *
 * An ack not back while the peer stayed silent for ack_ms (the wait at most
 * UNLOAD_CHAN_WAIT_MS) takes the channel down, so
 * the request can never be placed after its caller gave up on it: the channel would carry
 * it on once a cut link came back, and the write would land after its sender was told it
 * failed, perhaps over what the program wrote there since.
 */
int unload_chan_call(struct unload_chan *chan, u8 type, const void *payload, u32 len,
		     void **resp, u32 resp_len, u32 *segments, unsigned int ack_ms)
{
	struct unload_chan_req *req;
	long left;
	int ret;

	if (len > UNLOAD_CHAN_MSG_MAX)
		return -EMSGSIZE;
	req = unload_chan_req_alloc(len, resp_len);
	if (!req)
		return -ENOMEM;
	ret = unload_chan_send_req(chan, req, type, payload, false, segments);
	if (ret)
		goto out_put;
	ack_ms = min_t(unsigned int, ack_ms, UNLOAD_CHAN_WAIT_MS);
	left = unload_chan_wait_ack(chan, req, jiffies, msecs_to_jiffies(ack_ms));
	if (left < 0) {
		ret = -EINTR;
		goto out_put;
	}
	if (!left) {
		/* A peer that does not answer in time (the caller's, or never at all). */
		if (ack_ms < UNLOAD_CHAN_WAIT_MS)
			unload_chan_count(UNLOAD_CHAN_STAT_EXPIRED, 1);
		unload_chan_fail(chan, -ETIMEDOUT);
	}
	spin_lock_bh(&chan->lock);
	ret = unload_chan_req_answer(req);
	if (!ret) {
		*resp = req->resp;
		req->resp = NULL;
	}
	spin_unlock_bh(&chan->lock);
out_put:
	unload_chan_req_put(req);
	return ret;
}

/*
 * The control page's count of channels come up, which shims read without a lock: a
 * compare-and-exchange, since channels come up under their own locks alone, and a word
 * that went back could equal one a shim already saw.
 */
static void unload_chan_publish_up(void)
{
	u64 old;

	do {
		old = READ_ONCE(*unload_chan_up_word);
	} while (cmpxchg64(unload_chan_up_word, old, old + 1) != old);
}

void unload_chan_mark_up(struct unload_chan *chan)
{
	bool up = false;

	spin_lock_bh(&chan->lock);
	if (chan->state == UNLOAD_CHAN_CONNECTING) {
		chan->state = UNLOAD_CHAN_UP;
		up = true;
	}
	spin_unlock_bh(&chan->lock);
	if (!up)
		return;
	unload_chan_count(UNLOAD_CHAN_STAT_OPENED, 1);
	unload_chan_publish_up();
	wake_up_all(&chan->wq);
	unload_chan_return_credits(chan);
}

int unload_chan_io_init(u64 *channels_up)
{
	unload_chan_up_word = channels_up;
	/*
	 * Teardowns and responders sleep (on the RDMA core, on credits): their own queue.
	 * Per-CPU, not unbound: a responder then runs on the CPU whose completion handler
	 * queued it, where the request is cache-hot, rather than waking an idle one (that
	 * wake-up was a fifth of a 64 B remote write's time in the sandbox).
	 */
	unload_chan_wq = alloc_workqueue("unload_chan", WQ_MEM_RECLAIM, 0);
	return unload_chan_wq ? 0 : -ENOMEM;
}

void unload_chan_io_exit(void)
{
	destroy_workqueue(unload_chan_wq);
}
