// SPDX-License-Identifier: GPL-2.0
/*
 * The channel's connections (docs/design.md, "The channel"): the module is an rdma_cm
 * consumer that listens on UNLOAD_CHANNEL_PORT and keeps one RC connection per (local
 * device and port, peer GID), made the first time a caller needs it and shared by every
 * caller; a peer may open it from its side as well. A channel goes down on a failed
 * connect, a disconnect, an error, its device's removal and the module's unload; a
 * teardown work item then destroys it, never the rdma_cm handler, which the RDMA core
 * runs under the id's handler lock and whose id it must not destroy.
 */
#include <linux/delay.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/kobject.h>
#include <linux/slab.h>
#include <linux/sysfs.h>
#include <net/net_namespace.h>
#include <rdma/ib_cm.h>

#include "unload_channel.h"
#include "unload_kmod.h"

/* Guards unload_chans, unload_chans_exiting and unload_chans_serial. */
static DEFINE_MUTEX(unload_chans_lock);
static LIST_HEAD(unload_chans);
static bool unload_chans_exiting = true;	/* until init is done, and from exit on */
static u64 unload_chans_serial;

/*
 * Guards unload_chan_listener and unload_chan_listen_ok: the listener is made and
 * destroyed under it, as the key and channel/auth come and go. Never taken by an rdma_cm
 * handler, which a listener's destruction waits for.
 */
static DEFINE_MUTEX(unload_chan_listen_lock);
static struct rdma_cm_id *unload_chan_listener;
static bool unload_chan_listen_ok;		/* between init and exit */

static void unload_chans_reap(struct work_struct *work);
static DECLARE_DELAYED_WORK(unload_chans_reaper, unload_chans_reap);

#define UNLOAD_CHAN_UNPROVEN_MAX 4	/* channels accepted and not yet proven: a peer
					 * without the key holds no more for UNLOAD_CHAN_AUTH_MS */
#define UNLOAD_CHAN_RESOLVE_MS	2000

static const u8 unload_v4mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

static bool unload_gid_to_sin(const u8 *gid, struct sockaddr_in *sin)
{
	if (memcmp(gid, unload_v4mapped_prefix, sizeof(unload_v4mapped_prefix)))
		return false;
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(UNLOAD_CHANNEL_PORT);
	memcpy(&sin->sin_addr.s_addr, gid + 12, 4);
	return true;
}

/* The peer's GID as the channels are keyed: IPv4 addresses mapped, as RoCE v2 does. */
static void unload_addr_to_gid(const struct sockaddr *sa, u8 *gid)
{
	memset(gid, 0, 16);
	if (sa->sa_family == AF_INET) {
		memcpy(gid, unload_v4mapped_prefix, sizeof(unload_v4mapped_prefix));
		memcpy(gid + 12, &((const struct sockaddr_in *)sa)->sin_addr.s_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(gid, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

static __be16 unload_addr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_port;
	if (sa->sa_family == AF_INET6)
		return ((const struct sockaddr_in6 *)sa)->sin6_port;
	return 0;
}

static void unload_hello_fill(struct unload_chan_hello *h, const u8 *nonce)
{
	memset(h, 0, sizeof(*h));
	h->magic = cpu_to_le16(UNLOAD_CHAN_MAGIC);
	h->version = UNLOAD_CHAN_VERSION;
	h->ring = cpu_to_le16(UNLOAD_CHAN_RING);
	h->buf_size = cpu_to_le16(UNLOAD_CHAN_BUF);
	memcpy(h->nonce, nonce, sizeof(h->nonce));
}

/*
 * The peer's hello: the private data of its request or its accept, untrusted; `need`
 * bytes of it at least (the accept's carries a proof as well).
 */
static int unload_hello_check(const void *data, u8 len, size_t need)
{
	const struct unload_chan_hello *h = data;

	if (!data || len < need)
		return -EPROTO;
	if (le16_to_cpu(h->magic) != UNLOAD_CHAN_MAGIC || h->version != UNLOAD_CHAN_VERSION ||
	    h->reserved0 || h->reserved[0] || h->reserved[1] ||
	    le16_to_cpu(h->ring) != UNLOAD_CHAN_RING || le16_to_cpu(h->buf_size) != UNLOAD_CHAN_BUF)
		return -EPROTO;
	return 0;
}

static void unload_chan_teardown_work(struct work_struct *work);

/* A peer that connected and has not proven the key in UNLOAD_CHAN_AUTH_MS is let go. */
static void unload_chan_auth_timeout_work(struct work_struct *work)
{
	struct unload_chan *chan = container_of(to_delayed_work(work), struct unload_chan,
						auth_timeout);

	if (unload_chan_give_up(chan, -ETIMEDOUT))
		unload_chan_count(UNLOAD_CHAN_STAT_AUTH_REFUSED, 1);
}

static struct unload_chan *unload_chan_alloc(const char *devname, u32 port, const u8 *gid)
{
	struct unload_chan *chan = kzalloc(sizeof(*chan), GFP_KERNEL);

	if (!chan)
		return NULL;
	INIT_LIST_HEAD(&chan->node);
	INIT_LIST_HEAD(&chan->sweep);
	kref_init(&chan->ref);
	strscpy(chan->devname, devname, sizeof(chan->devname));
	chan->port = port;
	memcpy(chan->peer_gid, gid, sizeof(chan->peer_gid));
	INIT_WORK(&chan->teardown, unload_chan_teardown_work);
	INIT_DELAYED_WORK(&chan->auth_timeout, unload_chan_auth_timeout_work);
	INIT_DELAYED_WORK(&chan->expire, unload_chan_expire_work);
	INIT_WORK(&chan->rx_work, unload_chan_rx_work);
	INIT_LIST_HEAD(&chan->rx_backlog);
	init_waitqueue_head(&chan->wq);
	mutex_init(&chan->tx_mutex);
	spin_lock_init(&chan->lock);
	chan->state = UNLOAD_CHAN_CONNECTING;
	chan->last_used = jiffies;
	INIT_LIST_HEAD(&chan->tx_free);
	INIT_LIST_HEAD(&chan->tx_posted);
	INIT_LIST_HEAD(&chan->reqs);
	return chan;
}

/* Undoes unload_chan_setup, whole or in part; drain only a QP that may be connected. */
static void unload_chan_release(struct unload_chan *chan, bool drain)
{
	if (chan->qp) {
		if (drain)
			ib_drain_qp(chan->qp);
		/*
		 * Drained, no receive is deferred any more (the rest complete flushed); one
		 * deferred before may still be posting again on the QP: done before it goes.
		 */
		cancel_work_sync(&chan->rx_work);
		rdma_destroy_qp(chan->cm_id);
		chan->qp = NULL;
	}
	if (chan->cq) {
		ib_free_cq(chan->cq);	/* no completion handler runs after this */
		chan->cq = NULL;
	}
	unload_chan_ring_destroy(chan);
	if (chan->pd) {
		ib_dealloc_pd(chan->pd);
		chan->pd = NULL;
	}
}

/* PD, CQ, QP and the ring on the id's device; on failure the caller releases. */
static int unload_chan_setup(struct unload_chan *chan, struct rdma_cm_id *id)
{
	struct ib_qp_init_attr qpa = {};
	struct ib_pd *pd;
	struct ib_cq *cq;
	int ret;

	chan->dev = id->device;
	pd = ib_alloc_pd(id->device, 0);
	if (IS_ERR(pd))
		return PTR_ERR(pd);
	chan->pd = pd;
	/* Every receive and send slot, and the two drain markers. */
	cq = ib_alloc_cq(id->device, chan, 2 * UNLOAD_CHAN_RING + 3, 0, IB_POLL_SOFTIRQ);
	if (IS_ERR(cq))
		return PTR_ERR(cq);
	chan->cq = cq;
	qpa.qp_context = chan;
	qpa.send_cq = cq;
	qpa.recv_cq = cq;
	qpa.qp_type = IB_QPT_RC;
	qpa.sq_sig_type = IB_SIGNAL_REQ_WR;	/* data slots signal one in a batch */
	/* Room for ib_drain_qp's marker on each queue beside every slot and receive. */
	qpa.cap.max_send_wr = UNLOAD_CHAN_RING + 2;
	qpa.cap.max_recv_wr = UNLOAD_CHAN_RING + 1;
	qpa.cap.max_send_sge = 1;
	qpa.cap.max_recv_sge = 1;
	ret = rdma_create_qp(id, pd, &qpa);
	if (ret)
		return ret;
	chan->qp = id->qp;
	return unload_chan_ring_create(chan);
}

static void unload_chan_teardown_work(struct work_struct *work)
{
	struct unload_chan *chan = container_of(work, struct unload_chan, teardown);
	bool listed;

	/* Unlisted first: unload_chans_close reads the id of every listed channel. */
	mutex_lock(&unload_chans_lock);
	listed = !list_empty(&chan->node);
	list_del_init(&chan->node);
	mutex_unlock(&unload_chans_lock);
	cancel_delayed_work_sync(&chan->auth_timeout);
	cancel_delayed_work_sync(&chan->expire);	/* down: it arms no more */
	/* Whoever was posting saw the channel down and left; nobody posts after this. */
	mutex_lock(&chan->tx_mutex);
	mutex_unlock(&chan->tx_mutex);
	/* A handler making resources has returned; later ones find the channel down. */
	rdma_lock_handler(chan->cm_id);
	rdma_unlock_handler(chan->cm_id);
	if (chan->qp)
		rdma_disconnect(chan->cm_id);	/* fails harmlessly if never connected */
	unload_chan_release(chan, true);
	rdma_destroy_id(chan->cm_id);
	if (listed) {
		atomic_dec(&unload_chans_open);
		if (chan->charged) {
			unload_user_uncharge(chan->charged, UNLOAD_USER_CHANNELS);
			unload_user_put(chan->charged);
			chan->charged = NULL;
		}
		unload_chan_put(chan);		/* the list's */
	}
	unload_chan_put(chan);			/* the teardown's */
}

/* The route landed where the caller asked, or the channel is not the one it named. */
static int unload_chan_check_device(struct unload_chan *chan, struct rdma_cm_id *id)
{
	if (strcmp(dev_name(&id->device->dev), chan->devname) || id->port_num != chan->port)
		return -ENETUNREACH;
	return 0;
}

static int unload_chan_connect(struct unload_chan *chan, struct rdma_cm_id *id)
{
	struct rdma_conn_param param = {};
	struct unload_chan_hello hello;
	int ret;

	ret = unload_chan_setup(chan, id);
	if (ret)
		return ret;	/* the teardown releases what was made */
	memcpy(chan->auth.init_gid, chan->local_gid, 16);
	memcpy(chan->auth.resp_gid, chan->peer_gid, 16);
	chan->auth.init_port = unload_addr_port((struct sockaddr *)&id->route.addr.src_addr);
	chan->auth.resp_port = unload_addr_port((struct sockaddr *)&id->route.addr.dst_addr);
	unload_chan_auth_nonce(chan->auth.init_nonce);
	unload_hello_fill(&hello, chan->auth.init_nonce);
	param.private_data = &hello;
	param.private_data_len = sizeof(hello);
	param.flow_control = 1;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	return rdma_connect_locked(id, &param);
}

/*
 * The initiator's side once connected: the responder's proof in its accept checked, then
 * ours sent as the first message, the channel up only with it on the wire.
 */
static int unload_chan_established(struct unload_chan *chan, struct rdma_cm_event *ev)
{
	const struct unload_chan_hello_reply *reply = ev->param.conn.private_data;
	u8 proof[UNLOAD_CHAN_PROOF_LEN];
	int ret;

	ret = unload_hello_check(reply, ev->param.conn.private_data_len, sizeof(*reply));
	if (ret)
		return ret;
	memcpy(chan->auth.resp_nonce, reply->hello.nonce, UNLOAD_CHAN_NONCE_LEN);
	ret = unload_chan_auth_check(true, &chan->auth, reply->proof);
	if (!ret)
		ret = unload_chan_auth_prove(false, &chan->auth, proof);
	if (ret) {
		unload_chan_count(UNLOAD_CHAN_STAT_AUTH_REFUSED, 1);
		return -EKEYREJECTED;
	}
	mutex_lock(&chan->tx_mutex);
	unload_chan_mark_up(chan);
	ret = unload_chan_send_auth(chan, proof);
	mutex_unlock(&chan->tx_mutex);
	memzero_explicit(proof, sizeof(proof));
	return ret;
}

/* Room for one more channel accepted from a peer: counted in unload_chans_open now. */
static int unload_chan_admit_passive(void)
{
	struct unload_chan *chan;
	int unproven = 0, ret = 0;

	mutex_lock(&unload_chans_lock);
	list_for_each_entry(chan, &unload_chans, node)
		if (chan->passive && unload_chan_state(chan, NULL) == UNLOAD_CHAN_CONNECTING)
			unproven++;
	if (unload_chans_exiting)
		ret = -ESHUTDOWN;
	else if (atomic_read(&unload_chans_open) >= READ_ONCE(unload_channels_max) ||
		 unproven >= UNLOAD_CHAN_UNPROVEN_MAX)
		ret = -EBUSY;
	else
		atomic_inc(&unload_chans_open);
	mutex_unlock(&unload_chans_lock);
	return ret;
}

/*
 * A peer's connect request, on a new id the RDMA core made for it. A non-zero return
 * makes the RDMA core destroy that id (and reject); so on failure nothing of ours may
 * refer to it any more. The peer's address is only what it claims until it proves the
 * key: the channel carries nothing before that (channel_rx.c), and no caller finds it.
 */
static int unload_chan_accept(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	const struct unload_chan_hello *req = ev->param.conn.private_data;
	struct rdma_conn_param param = {};
	struct unload_chan_hello_reply reply;
	struct unload_chan *chan;
	bool listed;
	u8 gid[16];
	int ret;

	ret = unload_hello_check(req, ev->param.conn.private_data_len, sizeof(*req));
	if (ret)
		goto err_reject;
	if (!unload_chan_auth_open()) {
		unload_chan_count(UNLOAD_CHAN_STAT_NO_KEY, 1);
		ret = -ENOKEY;
		goto err_reject;
	}
	ret = unload_chan_admit_passive();
	if (ret)
		goto err_reject;
	unload_addr_to_gid((struct sockaddr *)&id->route.addr.dst_addr, gid);
	chan = unload_chan_alloc(dev_name(&id->device->dev), id->port_num, gid);
	if (!chan) {
		ret = -ENOMEM;
		goto err_unadmit;
	}
	chan->passive = true;
	chan->cm_id = id;
	unload_addr_to_gid((struct sockaddr *)&id->route.addr.src_addr, chan->local_gid);
	memcpy(chan->auth.init_gid, chan->peer_gid, 16);
	memcpy(chan->auth.resp_gid, chan->local_gid, 16);
	chan->auth.init_port = unload_addr_port((struct sockaddr *)&id->route.addr.dst_addr);
	chan->auth.resp_port = unload_addr_port((struct sockaddr *)&id->route.addr.src_addr);
	memcpy(chan->auth.init_nonce, req->nonce, UNLOAD_CHAN_NONCE_LEN);
	unload_chan_auth_nonce(chan->auth.resp_nonce);
	unload_hello_fill(&reply.hello, chan->auth.resp_nonce);
	ret = unload_chan_auth_prove(true, &chan->auth, reply.proof);
	if (ret)
		goto err_free_chan;	/* the key went meanwhile */
	ret = unload_chan_setup(chan, id);
	if (ret)
		goto err_release;
	param.private_data = &reply;
	param.private_data_len = sizeof(reply);
	param.rnr_retry_count = 7;
	ret = rdma_set_ack_timeout(id, UNLOAD_CHAN_ACK_TIMEOUT);	/* our QP's, not the peer's */
	if (ret)
		goto err_release;
	id->context = chan;
	ret = rdma_accept(id, &param);
	if (ret)
		goto err_unhook;

	/*
	 * Connected now: the peer's first message may already have failed it, and its
	 * teardown (which owns the id from then on) unlists and cancels under this lock. So
	 * listed, with its deadline, only if it is not down; else never listed nor counted.
	 */
	mutex_lock(&unload_chans_lock);
	listed = unload_chan_state(chan, NULL) != UNLOAD_CHAN_DOWN;
	if (listed) {
		chan->serial = ++unload_chans_serial;
		list_add_tail(&chan->node, &unload_chans);	/* the list's reference */
		queue_delayed_work(unload_chan_wq, &chan->auth_timeout,
				   msecs_to_jiffies(UNLOAD_CHAN_AUTH_MS));
	}
	mutex_unlock(&unload_chans_lock);
	if (!listed) {
		atomic_dec(&unload_chans_open);
		unload_chan_put(chan);		/* the list's, never used */
	}
	return 0;

err_unhook:
	id->context = NULL;
err_release:
	unload_chan_release(chan, false);
err_free_chan:
	kfree(chan);
err_unadmit:
	atomic_dec(&unload_chans_open);
err_reject:
	rdma_reject(id, NULL, 0, IB_CM_REJ_CONSUMER_DEFINED);
	return ret;
}

static int unload_chan_cm_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct unload_chan *chan = id->context;
	int ret = 0;

	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
		return unload_chan_accept(id, ev);
	/* The listener's own events, or a channel the teardown owns now. */
	if (!chan || unload_chan_state(chan, NULL) == UNLOAD_CHAN_DOWN)
		return 0;
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		ret = unload_chan_check_device(chan, id);
		if (!ret)
			ret = rdma_resolve_route(id, UNLOAD_CHAN_RESOLVE_MS);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		unload_addr_to_gid((struct sockaddr *)&id->route.addr.src_addr, chan->local_gid);
		ret = unload_chan_connect(chan, id);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		/* A passive channel is up once the peer's proof arrives (channel_rx.c). */
		if (!chan->passive)
			ret = unload_chan_established(chan, ev);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		ret = -EHOSTUNREACH;
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
		ret = ev->status == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH;
		break;
	case RDMA_CM_EVENT_REJECTED:
		ret = -ECONNREFUSED;	/* no module listening there, or it refused us */
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_DISCONNECTED:
		/* A channel we said goodbye on: the peer read it and hung up. */
		ret = READ_ONCE(chan->retiring) ? -ESHUTDOWN : -ECONNRESET;
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		ret = -ENODEV;
		break;
	case RDMA_CM_EVENT_ADDR_CHANGE:
		ret = -ENETRESET;
		break;
	default:
		break;
	}
	if (ret)
		unload_chan_fail(chan, ret);
	return 0;	/* never destroys the id: the teardown does, from its work */
}

/*
 * Of two channels up to the same peer, the one both hosts keep: the one the host with the
 * lower GID opened when they opened one each at once (each side's rule picks the same
 * connection), else the newer (the peer opened it again: it lost the old one).
 */
static bool unload_chan_keeps(const struct unload_chan *a, const struct unload_chan *b)
{
	if (a->passive != b->passive)
		return a->passive == (memcmp(a->local_gid, a->peer_gid, 16) > 0);
	return a->serial > b->serial;
}

/*
 * The channel to (devname, port, gid) callers use: one up, else one of ours connecting.
 * A channel accepted from the peer counts only once the peer proved the key. Of two up,
 * the one not kept is let go once neither side has a request on it (a request of the
 * peer's still arriving on it would otherwise be lost).
 */
static struct unload_chan *unload_chan_find(const char *devname, u32 port, const u8 *gid)
{
	struct unload_chan *chan, *up = NULL, *connecting = NULL, *spare;
	bool idle;

	lockdep_assert_held(&unload_chans_lock);
	list_for_each_entry(chan, &unload_chans, node) {
		if (chan->port != port || memcmp(chan->peer_gid, gid, 16) ||
		    strcmp(chan->devname, devname))
			continue;
		if (READ_ONCE(chan->retiring))
			continue;
		switch (unload_chan_state(chan, NULL)) {
		case UNLOAD_CHAN_CONNECTING:
			if (!chan->passive && !connecting)
				connecting = chan;
			continue;
		case UNLOAD_CHAN_UP:
			break;
		default:
			continue;
		}
		if (!up) {
			up = chan;
			continue;
		}
		spare = unload_chan_keeps(chan, up) ? up : chan;
		up = spare == up ? chan : up;
		spin_lock_bh(&spare->lock);
		idle = !spare->out_reqs && !spare->in_reqs;
		spin_unlock_bh(&spare->lock);
		if (idle) {
			unload_chan_count(UNLOAD_CHAN_STAT_REPLACED, 1);
			unload_chan_fail(spare, -ECONNRESET);
		}
	}
	chan = up ?: connecting;
	if (chan)
		kref_get(&chan->ref);
	return chan;
}

/*
 * A new active channel, listed and resolving, charged to the caller's user (sess's) until
 * its teardown; the caller's reference. -EBUSY past channels_max, -EDQUOT past the user's
 * user_channels_max.
 */
static struct unload_chan *unload_chan_open(const char *devname, u32 port, const u8 *gid,
					    const struct sockaddr_in *dst,
					    struct unload_session *sess)
{
	struct rdma_cm_id *id;
	struct unload_chan *chan;
	int ret;

	lockdep_assert_held(&unload_chans_lock);
	if (unload_chans_exiting)
		return ERR_PTR(-ESHUTDOWN);
	if (atomic_read(&unload_chans_open) >= READ_ONCE(unload_channels_max))
		return ERR_PTR(-EBUSY);
	chan = unload_chan_alloc(devname, port, gid);
	if (!chan)
		return ERR_PTR(-ENOMEM);
	id = rdma_create_id(&init_net, unload_chan_cm_handler, chan, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(id)) {
		ret = PTR_ERR(id);
		goto err_free_chan;
	}
	/* Before route resolution, which derives the QP's timeout from it on RoCE. */
	ret = rdma_set_ack_timeout(id, UNLOAD_CHAN_ACK_TIMEOUT);
	if (ret)
		goto err_destroy_id;
	if (!unload_user_charge(sess->user, UNLOAD_USER_CHANNELS,
				unload_user_bound(sess, &unload_user_channels_max))) {
		ret = -EDQUOT;
		goto err_destroy_id;
	}
	chan->charged = unload_user_hold(sess->user);	/* uncharged at the teardown */
	chan->cm_id = id;
	chan->serial = ++unload_chans_serial;
	list_add_tail(&chan->node, &unload_chans);	/* the list's reference */
	atomic_inc(&unload_chans_open);
	kref_get(&chan->ref);				/* the caller's */
	/* A teardown waits for this to be issued before it destroys the id. */
	mutex_lock(&chan->tx_mutex);
	mutex_unlock(&unload_chans_lock);
	ret = rdma_resolve_addr(id, NULL, (struct sockaddr *)dst, UNLOAD_CHAN_RESOLVE_MS);
	mutex_unlock(&chan->tx_mutex);
	mutex_lock(&unload_chans_lock);
	if (ret)
		unload_chan_fail(chan, ret);
	return chan;

err_destroy_id:
	rdma_destroy_id(id);
err_free_chan:
	kfree(chan);
	return ERR_PTR(ret);
}

/*
 * The channel to peer_gid from (devname, port), connected now if it was not: a
 * reference, or a negative errno (the connect's outcome; -ETIMEDOUT after
 * UNLOAD_CHAN_CONNECT_MS).
 */
struct unload_chan *unload_chan_get(const char *devname, u32 port, const u8 *peer_gid,
				    struct unload_session *sess)
{
	struct sockaddr_in dst;
	struct unload_chan *chan;
	int state, err;
	long left;

	if (!unload_gid_to_sin(peer_gid, &dst))
		return ERR_PTR(-EAFNOSUPPORT);
	if (!unload_chan_auth_open()) {
		unload_chan_count(UNLOAD_CHAN_STAT_NO_KEY, 1);
		return ERR_PTR(-ENOKEY);
	}
	mutex_lock(&unload_chans_lock);
	chan = unload_chan_find(devname, port, peer_gid);
	if (!chan)
		chan = unload_chan_open(devname, port, peer_gid, &dst, sess);
	mutex_unlock(&unload_chans_lock);
	if (IS_ERR(chan))
		return chan;

	left = wait_event_killable_timeout(chan->wq,
		unload_chan_state(chan, NULL) != UNLOAD_CHAN_CONNECTING,
		msecs_to_jiffies(UNLOAD_CHAN_CONNECT_MS));
	if (left < 0) {
		unload_chan_put(chan);
		return ERR_PTR(-EINTR);
	}
	if (!left)
		unload_chan_give_up(chan, -ETIMEDOUT);
	state = unload_chan_state(chan, &err);
	if (state != UNLOAD_CHAN_UP) {
		unload_chan_put(chan);
		return ERR_PTR(err ?: -ENOTCONN);
	}
	return chan;
}

/*
 * The channel to peer_gid from (devname, port) if one is up now: a reference, or
 * -ENOTCONN. Never connects, so it puts nothing on the wire.
 */
struct unload_chan *unload_chan_get_up(const char *devname, u32 port, const u8 *peer_gid)
{
	struct unload_chan *chan;

	if (!unload_chan_auth_open())
		return ERR_PTR(-ENOKEY);
	mutex_lock(&unload_chans_lock);
	chan = unload_chan_find(devname, port, peer_gid);
	mutex_unlock(&unload_chans_lock);
	if (chan && unload_chan_state(chan, NULL) != UNLOAD_CHAN_UP) {
		unload_chan_put(chan);
		chan = NULL;
	}
	return chan ?: ERR_PTR(-ENOTCONN);
}

/* Down with every channel that matches (all if dev is NULL), and wait for their teardown. */
static void unload_chans_close(struct ib_device *dev, int err)
{
	struct unload_chan *chan;

	mutex_lock(&unload_chans_lock);
	/* Before init and after exit there are no channels, nor a workqueue. */
	if (dev && unload_chans_exiting) {
		mutex_unlock(&unload_chans_lock);
		return;
	}
	list_for_each_entry(chan, &unload_chans, node) {
		if (!dev || READ_ONCE(chan->dev) == dev || READ_ONCE(chan->cm_id->device) == dev)
			unload_chan_fail(chan, err);
	}
	mutex_unlock(&unload_chans_lock);
	flush_workqueue(unload_chan_wq);
}

/*
 * Before the module goes, each peer learns which of its requests were handled: none of
 * its callers is then left with a write that may or may not have landed (-ECOMM), which
 * it could only fail as a lost peer. Stop serving everywhere, let the responders answer
 * what they hold, then say goodbye on each channel still up. Nothing is held while
 * sending: the channels are referenced, the list lock dropped.
 */
static void unload_chans_goodbye(void)
{
	struct unload_chan *chan, *next;
	LIST_HEAD(up);

	mutex_lock(&unload_chans_lock);
	list_for_each_entry(chan, &unload_chans, node) {
		unload_chan_stop_serving(chan);
		kref_get(&chan->ref);
		list_add_tail(&chan->sweep, &up);
	}
	mutex_unlock(&unload_chans_lock);
	flush_workqueue(unload_chan_wq);	/* the jobs queued before: answered */
	list_for_each_entry_safe(chan, next, &up, sweep) {
		list_del_init(&chan->sweep);
		unload_chan_say_goodbye(chan);
		unload_chan_put(chan);
	}
}

/* How often the reaper looks: a quarter of the idle time, from 100 ms to 5 s. */
static unsigned long unload_chans_reap_period(void)
{
	return msecs_to_jiffies(clamp_t(u32, READ_ONCE(unload_channel_idle_ms) / 4, 100, 5000));
}

/*
 * Close, with a goodbye, each channel up that carried nothing for channel_idle_ms and holds
 * no request either way: it keeps a slot of channels_max, a ring and a QP on both hosts
 * for nothing, and the next caller opens another. A peer's request crossing the goodbye is
 * dropped unanswered, which the goodbye tells the peer (its write goes to its NIC); a caller
 * here that found the channel before it retired is refused before sending (the same).
 */
static void unload_chans_reap(struct work_struct *work)
{
	unsigned long idle = msecs_to_jiffies(READ_ONCE(unload_channel_idle_ms));
	struct unload_chan *chan, *next;
	LIST_HEAD(gone);

	mutex_lock(&unload_chans_lock);
	list_for_each_entry(chan, &unload_chans, node) {
		if (!idle)
			break;
		spin_lock_bh(&chan->lock);
		if (chan->state == UNLOAD_CHAN_UP && !chan->retiring && !chan->out_reqs &&
		    !chan->in_reqs && time_after(jiffies, READ_ONCE(chan->last_used) + idle)) {
			WRITE_ONCE(chan->retiring, true);
			kref_get(&chan->ref);
			list_add_tail(&chan->sweep, &gone);
		}
		spin_unlock_bh(&chan->lock);
	}
	mutex_unlock(&unload_chans_lock);

	list_for_each_entry_safe(chan, next, &gone, sweep) {
		list_del_init(&chan->sweep);
		unload_chan_stop_serving(chan);
		unload_chan_count(UNLOAD_CHAN_STAT_REAPED, 1);
		unload_chan_say_goodbye(chan);
		unload_chan_fail(chan, -ESHUTDOWN);	/* a peer that did not hang up in time */
		unload_chan_put(chan);
	}

	mutex_lock(&unload_chans_lock);
	if (!unload_chans_exiting)
		queue_delayed_work(unload_chan_wq, &unload_chans_reaper, unload_chans_reap_period());
	mutex_unlock(&unload_chans_lock);
}

/*
 * The ib_client's removal, which the RDMA core runs before rdma_cm's own: our channels on
 * dev go first. One still resolving, not yet on dev, gets rdma_cm's DEVICE_REMOVAL.
 */
void unload_channel_device_removed(struct ib_device *dev)
{
	unload_chans_close(dev, -ENODEV);
}

/* The listener, on every device's RoCE v2 IPv4 GIDs and those of devices added later. */
static struct rdma_cm_id *unload_chan_listen(void)
{
	struct sockaddr_in any = {
		.sin_family = AF_INET, .sin_port = htons(UNLOAD_CHANNEL_PORT),
	};
	struct rdma_cm_id *id;
	int ret;

	id = rdma_create_id(&init_net, unload_chan_cm_handler, NULL, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(id))
		return id;
	ret = rdma_bind_addr(id, (struct sockaddr *)&any);
	if (ret)
		goto err_destroy_id;
	ret = rdma_listen(id, 64);
	if (ret)
		goto err_destroy_id;
	return id;

err_destroy_id:
	rdma_destroy_id(id);
	return ERR_PTR(ret);
}

/*
 * Listen while the channel may carry anything (a key, or channel/auth = none), and not
 * otherwise: without a key no peer can prove anything, so nothing is accepted at all.
 * Closing also ends every channel: they were proven with a key that is gone.
 */
int unload_channel_listen_update(void)
{
	struct rdma_cm_id *gone = NULL, *id;
	bool open;
	int ret = 0;

	mutex_lock(&unload_chan_listen_lock);
	open = unload_chan_listen_ok && unload_chan_auth_open();
	if (open && !unload_chan_listener) {
		id = unload_chan_listen();
		if (IS_ERR(id))
			ret = PTR_ERR(id);
		else
			unload_chan_listener = id;
	} else if (!open && unload_chan_listener) {
		gone = unload_chan_listener;
		unload_chan_listener = NULL;
	}
	/* Under the lock: a second update waits, so listeners never overlap on the port. */
	if (gone)
		rdma_destroy_id(gone);	/* waits for a connect request being handled */
	mutex_unlock(&unload_chan_listen_lock);
	/* As at the module's exit: each peer learns which of its requests were handled. */
	if (gone && READ_ONCE(unload_chan_listen_ok)) {
		unload_chans_goodbye();
		unload_chans_close(NULL, -ENOKEY);
	}
	return ret;
}

bool unload_channel_listening(void)
{
	bool listening;

	mutex_lock(&unload_chan_listen_lock);
	listening = unload_chan_listener;
	mutex_unlock(&unload_chan_listen_lock);
	return listening;
}

/*
 * channel/key: the cluster's key, hex (16 to 64 bytes), or "none" to remove it. Write-only
 * (0200) and never shown back; the listener opens or closes to match.
 */
static ssize_t key_store(struct kobject *kobj, struct kobj_attribute *attr, const char *buf,
			 size_t count)
{
	int ret = unload_chan_auth_set_key(buf, count);

	if (ret)
		return ret;
	ret = unload_channel_listen_update();
	return ret ?: count;
}

static ssize_t key_installed_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n", unload_chan_auth_key_installed());
}

static const char *const unload_chan_auth_names[] = { "none", "key" };

/* channel/auth: "key" (a peer proves the key; the default) or "none" (a closed fabric). */
static ssize_t auth_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%s\n", unload_chan_auth_names[unload_chan_auth_required()]);
}

static ssize_t auth_store(struct kobject *kobj, struct kobj_attribute *attr, const char *buf,
			  size_t count)
{
	int v = sysfs_match_string(unload_chan_auth_names, buf);
	int ret;

	if (v < 0)
		return -EINVAL;
	unload_chan_auth_set_required(v);
	ret = unload_channel_listen_update();
	return ret ?: count;
}

static ssize_t listening_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n", unload_channel_listening());
}

static struct kobj_attribute unload_chan_key_attr = __ATTR_WO(key);
static struct kobj_attribute unload_chan_key_installed_attr = __ATTR_RO(key_installed);
static struct kobj_attribute unload_chan_auth_attr = __ATTR_RW(auth);
static struct kobj_attribute unload_chan_listening_attr = __ATTR_RO(listening);

static struct attribute *unload_chan_trust_attrs[] = {
	&unload_chan_key_attr.attr,
	&unload_chan_key_installed_attr.attr,
	&unload_chan_auth_attr.attr,
	&unload_chan_listening_attr.attr,
	NULL,
};

/* Who may use the channel: merged into sysfs.c's channel/ while the channel is up. */
static const struct attribute_group unload_chan_trust_group = {
	.name = "channel",
	.attrs = unload_chan_trust_attrs,
};

int unload_channel_init(u64 *channels_up)
{
	int ret;

	BUILD_BUG_ON(UNLOAD_CHAN_SEG_MAX != UNLOAD_CHANNEL_SEGMENT);
	BUILD_BUG_ON(UNLOAD_CHAN_MSG_MAX != UNLOAD_PROBE_MAX_LEN);
	BUILD_BUG_ON(sizeof(struct unload_chan_hello) > 56);	/* rdma_cm's request room */
	ret = unload_chan_io_init(channels_up);
	if (ret)
		return ret;
	mutex_lock(&unload_chans_lock);
	unload_chans_exiting = false;
	queue_delayed_work(unload_chan_wq, &unload_chans_reaper, unload_chans_reap_period());
	mutex_unlock(&unload_chans_lock);
	mutex_lock(&unload_chan_listen_lock);
	unload_chan_listen_ok = true;
	mutex_unlock(&unload_chan_listen_lock);
	ret = unload_channel_listen_update();
	if (ret)
		goto err_stop;
	ret = unload_sysfs_merge(&unload_chan_trust_group);
	if (ret)
		goto err_stop;
	return 0;

err_stop:
	mutex_lock(&unload_chan_listen_lock);
	unload_chan_listen_ok = false;
	mutex_unlock(&unload_chan_listen_lock);
	mutex_lock(&unload_chans_lock);
	unload_chans_exiting = true;
	mutex_unlock(&unload_chans_lock);
	cancel_delayed_work_sync(&unload_chans_reaper);
	unload_channel_listen_update();		/* closes the listener, if one opened */
	unload_chan_io_exit();
	return ret;
}

void unload_channel_exit(void)
{
	unload_sysfs_unmerge(&unload_chan_trust_group);	/* no key write after this */
	/* No connect request is being handled once this returns, and none comes after. */
	mutex_lock(&unload_chan_listen_lock);
	unload_chan_listen_ok = false;
	mutex_unlock(&unload_chan_listen_lock);
	unload_channel_listen_update();
	mutex_lock(&unload_chans_lock);
	unload_chans_exiting = true;
	mutex_unlock(&unload_chans_lock);
	cancel_delayed_work_sync(&unload_chans_reaper);	/* it queues itself again no more */
	unload_chans_goodbye();
	unload_chans_close(NULL, -ESHUTDOWN);
	if (!list_empty(&unload_chans))
		pr_err("unload: channels left at exit\n");
	unload_chan_io_exit();
	unload_chan_auth_exit();
}
