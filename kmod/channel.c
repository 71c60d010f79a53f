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
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/slab.h>
#include <net/net_namespace.h>
#include <rdma/ib_cm.h>

#include "unload_channel.h"

/* Guards unload_chans, unload_chans_exiting and unload_chans_serial. */
static DEFINE_MUTEX(unload_chans_lock);
static LIST_HEAD(unload_chans);
static bool unload_chans_exiting = true;	/* until the listener is up, and from exit on */
static u64 unload_chans_serial;
static struct rdma_cm_id *unload_chan_listener;

#define UNLOAD_CHAN_MAX		16	/* channels, both directions: a bound on a fabric's asks */
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

static void unload_hello_fill(struct unload_chan_hello *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = cpu_to_le16(UNLOAD_CHAN_MAGIC);
	h->version = UNLOAD_CHAN_VERSION;
	h->ring = cpu_to_le16(UNLOAD_CHAN_RING);
	h->buf_size = cpu_to_le16(UNLOAD_CHAN_BUF);
}

/* The peer's hello: the private data of its request or its accept, untrusted. */
static int unload_hello_check(const void *data, u8 len)
{
	const struct unload_chan_hello *h = data;

	if (!data || len < sizeof(*h))
		return -EPROTO;
	if (le16_to_cpu(h->magic) != UNLOAD_CHAN_MAGIC || h->version != UNLOAD_CHAN_VERSION ||
	    h->reserved0 || h->reserved[0] || h->reserved[1] ||
	    le16_to_cpu(h->ring) != UNLOAD_CHAN_RING || le16_to_cpu(h->buf_size) != UNLOAD_CHAN_BUF)
		return -EPROTO;
	return 0;
}

static void unload_chan_teardown_work(struct work_struct *work);

static struct unload_chan *unload_chan_alloc(const char *devname, u32 port, const u8 *gid)
{
	struct unload_chan *chan = kzalloc(sizeof(*chan), GFP_KERNEL);

	if (!chan)
		return NULL;
	INIT_LIST_HEAD(&chan->node);
	kref_init(&chan->ref);
	strscpy(chan->devname, devname, sizeof(chan->devname));
	chan->port = port;
	memcpy(chan->peer_gid, gid, sizeof(chan->peer_gid));
	INIT_WORK(&chan->teardown, unload_chan_teardown_work);
	init_waitqueue_head(&chan->wq);
	mutex_init(&chan->tx_mutex);
	spin_lock_init(&chan->lock);
	chan->state = UNLOAD_CHAN_CONNECTING;
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
	cq = ib_alloc_cq(id->device, chan, 2 * UNLOAD_CHAN_RING + 3, 0, IB_POLL_WORKQUEUE);
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

	mutex_lock(&unload_chans_lock);
	listed = !list_empty(&chan->node);
	list_del_init(&chan->node);
	mutex_unlock(&unload_chans_lock);
	if (listed) {
		atomic_dec(&unload_chans_open);
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
	unload_hello_fill(&hello);
	param.private_data = &hello;
	param.private_data_len = sizeof(hello);
	param.flow_control = 1;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	return rdma_connect_locked(id, &param);
}

/*
 * A peer's connect request, on a new id the RDMA core made for it. A non-zero return
 * makes the RDMA core destroy that id (and reject); so on failure nothing of ours may
 * refer to it any more.
 */
static int unload_chan_accept(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct rdma_conn_param param = {};
	struct unload_chan_hello hello;
	struct unload_chan *chan;
	u8 gid[16];
	int ret;

	ret = unload_hello_check(ev->param.conn.private_data, ev->param.conn.private_data_len);
	if (ret)
		goto err_reject;
	mutex_lock(&unload_chans_lock);
	ret = unload_chans_exiting ? -ESHUTDOWN :
		atomic_read(&unload_chans_open) >= UNLOAD_CHAN_MAX ? -EBUSY : 0;
	mutex_unlock(&unload_chans_lock);
	if (ret)
		goto err_reject;
	unload_addr_to_gid((struct sockaddr *)&id->route.addr.dst_addr, gid);
	chan = unload_chan_alloc(dev_name(&id->device->dev), id->port_num, gid);
	if (!chan) {
		ret = -ENOMEM;
		goto err_reject;
	}
	chan->passive = true;
	chan->cm_id = id;
	unload_addr_to_gid((struct sockaddr *)&id->route.addr.src_addr, chan->local_gid);
	ret = unload_chan_setup(chan, id);
	if (ret)
		goto err_release;
	unload_hello_fill(&hello);
	param.private_data = &hello;
	param.private_data_len = sizeof(hello);
	param.rnr_retry_count = 7;
	ret = rdma_set_ack_timeout(id, UNLOAD_CHAN_ACK_TIMEOUT);	/* our QP's, not the peer's */
	if (ret)
		goto err_release;
	id->context = chan;
	ret = rdma_accept(id, &param);
	if (ret)
		goto err_unhook;

	mutex_lock(&unload_chans_lock);
	chan->serial = ++unload_chans_serial;
	list_add_tail(&chan->node, &unload_chans);	/* the list's reference */
	atomic_inc(&unload_chans_open);
	mutex_unlock(&unload_chans_lock);
	return 0;

err_unhook:
	id->context = NULL;
err_release:
	unload_chan_release(chan, false);
	kfree(chan);
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
		if (!chan->passive)
			ret = unload_hello_check(ev->param.conn.private_data,
						 ev->param.conn.private_data_len);
		if (!ret)
			unload_chan_mark_up(chan);
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
		ret = -ECONNRESET;
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

static struct unload_chan *unload_chan_find(const char *devname, u32 port, const u8 *gid)
{
	struct unload_chan *chan;

	lockdep_assert_held(&unload_chans_lock);
	list_for_each_entry(chan, &unload_chans, node) {
		if (chan->port == port && !memcmp(chan->peer_gid, gid, 16) &&
		    !strcmp(chan->devname, devname) &&
		    unload_chan_state(chan, NULL) != UNLOAD_CHAN_DOWN) {
			kref_get(&chan->ref);
			return chan;
		}
	}
	return NULL;
}

/* A new active channel, listed and resolving; the caller's reference. */
static struct unload_chan *unload_chan_open(const char *devname, u32 port, const u8 *gid,
					    const struct sockaddr_in *dst)
{
	struct rdma_cm_id *id;
	struct unload_chan *chan;
	int ret;

	lockdep_assert_held(&unload_chans_lock);
	if (unload_chans_exiting)
		return ERR_PTR(-ESHUTDOWN);
	if (atomic_read(&unload_chans_open) >= UNLOAD_CHAN_MAX)
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
struct unload_chan *unload_chan_get(const char *devname, u32 port, const u8 *peer_gid)
{
	struct sockaddr_in dst;
	struct unload_chan *chan;
	int state, err;
	long left;

	if (!unload_gid_to_sin(peer_gid, &dst))
		return ERR_PTR(-EAFNOSUPPORT);
	mutex_lock(&unload_chans_lock);
	chan = unload_chan_find(devname, port, peer_gid);
	if (!chan)
		chan = unload_chan_open(devname, port, peer_gid, &dst);
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
	struct unload_chan *up[UNLOAD_CHAN_MAX], *chan;
	int n = 0, i;

	mutex_lock(&unload_chans_lock);
	list_for_each_entry(chan, &unload_chans, node) {
		unload_chan_stop_serving(chan);
		if (n < UNLOAD_CHAN_MAX) {
			kref_get(&chan->ref);
			up[n++] = chan;
		}
	}
	mutex_unlock(&unload_chans_lock);
	flush_workqueue(unload_chan_wq);	/* the requests queued before: answered */
	for (i = 0; i < n; i++) {
		unload_chan_say_goodbye(up[i]);
		unload_chan_put(up[i]);
	}
}

/*
 * The ib_client's removal, which the RDMA core runs before rdma_cm's own: our channels on
 * dev go first. One still resolving, not yet on dev, gets rdma_cm's DEVICE_REMOVAL.
 */
void unload_channel_device_removed(struct ib_device *dev)
{
	unload_chans_close(dev, -ENODEV);
}

int unload_channel_init(u64 *channels_up)
{
	struct sockaddr_in any = {
		.sin_family = AF_INET, .sin_port = htons(UNLOAD_CHANNEL_PORT),
	};
	struct rdma_cm_id *id;
	int ret;

	BUILD_BUG_ON(UNLOAD_CHAN_SEG_MAX != UNLOAD_CHANNEL_SEGMENT);
	BUILD_BUG_ON(UNLOAD_CHAN_MSG_MAX != UNLOAD_PROBE_MAX_LEN);
	ret = unload_chan_io_init(channels_up);
	if (ret)
		return ret;
	id = rdma_create_id(&init_net, unload_chan_cm_handler, NULL, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(id)) {
		ret = PTR_ERR(id);
		goto err_io_exit;
	}
	/* IPv4 wildcard: every device's RoCE v2 IPv4 GIDs, and devices added later. */
	ret = rdma_bind_addr(id, (struct sockaddr *)&any);
	if (ret)
		goto err_destroy_id;
	ret = rdma_listen(id, 64);
	if (ret)
		goto err_destroy_id;
	unload_chan_listener = id;
	mutex_lock(&unload_chans_lock);
	unload_chans_exiting = false;
	mutex_unlock(&unload_chans_lock);
	return 0;

err_destroy_id:
	rdma_destroy_id(id);
err_io_exit:
	unload_chan_io_exit();
	return ret;
}

void unload_channel_exit(void)
{
	/* No connect request is being handled once this returns, and none comes after. */
	rdma_destroy_id(unload_chan_listener);
	mutex_lock(&unload_chans_lock);
	unload_chans_exiting = true;
	mutex_unlock(&unload_chans_lock);
	unload_chans_goodbye();
	unload_chans_close(NULL, -ESHUTDOWN);
	if (!list_empty(&unload_chans))
		pr_err("unload: channels left at exit\n");
	unload_chan_io_exit();
}
