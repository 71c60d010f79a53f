/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The channel between the unload modules of two hosts (docs/design.md, "The channel"):
 * one RC connection per (local device and port, peer GID). channel.c connects, accepts
 * and tears down; channel_rx.c receives (the ring, checks, reassembly, the responder);
 * channel_io.c sends and keeps the state; channel_auth.c holds the key and makes and
 * checks the proofs; probe.c is the first user. Calls go probe.c -> channel.c ->
 * channel_rx.c -> channel_io.c -> channel_auth.c, never back up.
 */
#ifndef UNLOAD_CHANNEL_KMOD_H
#define UNLOAD_CHANNEL_KMOD_H

#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#include "channel_wire.h"
#include "unload.h"

/* A channel's state: what UNLOAD_IOC_CHANNEL_PROBE reports. */
#define UNLOAD_CHAN_CONNECTING	UNLOAD_CHANNEL_CONNECTING
#define UNLOAD_CHAN_UP		UNLOAD_CHANNEL_UP
#define UNLOAD_CHAN_DOWN	UNLOAD_CHANNEL_DOWN

/* Bounds on what one direction of a channel has outstanding: the sender waits, the
 * receiver tears down a peer that goes past them. */
#define UNLOAD_CHAN_MAX_REQS	32
#define UNLOAD_CHAN_MAX_BYTES	(4U << 20)

/* How long a caller waits for a connection, a send slot or an ack before giving up on
 * the channel (a peer that stopped answering must never hang a caller). */
#define UNLOAD_CHAN_CONNECT_MS	5000
#define UNLOAD_CHAN_WAIT_MS	15000
/* How long a peer that connected to us has to prove the key before it is let go. */
#define UNLOAD_CHAN_AUTH_MS	UNLOAD_CHAN_CONNECT_MS
/* The least a remote write waits for its ack, whatever its QP's timeout (remote.c). */
#define UNLOAD_REMOTE_ACK_MIN_MS	1000
/*
 * The channel QP's own local ACK timeout (4.096 us << 16: 268 ms a try, 7 retries, so a
 * dead link after 2.1 s). rdma_cm's RoCE default on 6.1 is 19, 2.1 s a try: one lost
 * packet then kept the channel silent past a remote write's ack wait, failing the write
 * where the sender's own NIC, retrying every 67 ms, went on.
 */
#define UNLOAD_CHAN_ACK_TIMEOUT	16

/* One registered buffer: a receive of the ring or a send slot. */
struct unload_chan_buf {
	struct ib_cqe cqe;
	struct unload_chan *chan;
	void *data;			/* UNLOAD_CHAN_BUF bytes */
	u64 dma;
	struct list_head link;		/* a send slot: in chan->tx_free or chan->tx_posted;
					 * a receive: in chan->rx_backlog */
	bool on_wire;			/* in chan->tx_posted */
	u32 byte_len;			/* a receive's, as completed */
	bool with_imm;
};

/*
 * A request of ours waiting for its ack; freed by the last of its references (the
 * poster's, the pending list's, the reassembly's). Its poster either waits for it
 * (unload_chan_call) or is told by done_fn (unload_chan_post_req).
 */
struct unload_chan_req {
	refcount_t ref;
	struct list_head node;		/* in chan->reqs while pending */
	u64 id;
	u32 len;			/* request payload: also its share of out_bytes */
	void *resp;			/* the ack's payload lands here */
	u32 resp_cap;
	u32 resp_len;
	int status;
	bool done;
	/* An asynchronous request's: set before it is posted, then read-only. */
	void (*done_fn)(struct unload_chan_req *req);	/* its outcome, once, no lock held */
	void *ctx;			/* done_fn's */
	/* Under chan->lock, set once it is wholly posted: */
	bool armed;			/* done_fn is then whoever completes it */
	unsigned long sent;		/* jiffies: the expiry counts from here */
	unsigned long quiet;		/* the peer's silence that fails it */
};

/* The inbound message being reassembled: touched only by the receive completion, which
 * the CQ's single work item runs one at a time, and by the teardown after the CQ is
 * freed. */
struct unload_chan_rx {
	bool active;
	u8 type;
	u64 id;
	u32 total, got;
	int status;			/* an ack's, the same in every segment */
	void *buf;			/* a request of more than one segment, reassembled */
	const void *seg;		/* a request of one: in its receive buffer, until the
					 * completion that received it returns */
	struct unload_chan_req *req;	/* an ack's request, referenced */
};

/* What both proofs of one connection cover (channel_auth.c). */
struct unload_chan_auth_ctx {
	u8 init_nonce[UNLOAD_CHAN_NONCE_LEN];
	u8 resp_nonce[UNLOAD_CHAN_NONCE_LEN];
	u8 init_gid[16];
	u8 resp_gid[16];
	__be16 init_port;
	__be16 resp_port;
};

struct unload_chan {
	struct list_head node;		/* in unload_chans, under unload_chans_lock */
	struct kref ref;		/* the list's, each caller's, each responder job's,
					 * the queued teardown's */
	u64 serial;
	char devname[IB_DEVICE_NAME_MAX];
	u32 port;
	u8 peer_gid[16];
	u8 local_gid[16];		/* the address the connection uses here: set before it
					 * is up, read by the target's checks after */
	bool passive;			/* accepted from the peer */
	struct unload_user *charged;	/* active: the user its opener's session charged one
					 * channel (a reference), until the teardown */
	struct list_head sweep;		/* in the reaper's or the exit's goodbye list, one at
					 * a time (the exit cancels the reaper first) */
	/* Both nonces, GIDs and ports: set before the connection can carry a message, read
	 * by the one proof each side checks (the accept's, or the AUTH message's). */
	struct unload_chan_auth_ctx auth;
	struct delayed_work auth_timeout;	/* passive: let go if not proven in time */

	struct rdma_cm_id *cm_id;
	struct ib_device *dev;		/* set with the resources below */
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *qp;
	struct unload_chan_buf *rx;	/* UNLOAD_CHAN_RING receives */
	struct unload_chan_buf *tx;	/* UNLOAD_CHAN_RING + 1 send slots (the last for credits) */
	struct work_struct teardown;
	struct work_struct rx_work;	/* the receives that need process context
					 * (channel_rx.c), in order */
	struct delayed_work expire;	/* fails the channel when the peer leaves an armed
					 * request unanswered too long (unload_chan_post_req) */
	wait_queue_head_t wq;		/* state, credits, send slots, acks */

	/*
	 * Held by a sender for all of one message's segments, so they go out contiguous,
	 * and by the creator while it starts address resolution; the teardown takes it
	 * once, after the channel is down, so nobody is posting when it destroys the QP.
	 */
	struct mutex tx_mutex;

	/* jiffies of the last ack the peer sent us: the receive completion writes it,
	 * waiters read it locklessly (a stale value only shortens a wait's restart) */
	unsigned long last_ack;
	/* jiffies of the last message either way (the idle reaper's; read locklessly) */
	unsigned long last_used;

	spinlock_t lock;		/* guards everything below; the receive completion
					 * runs in softirq, so taken with _bh elsewhere */
	int state;			/* UNLOAD_CHAN_* */
	int err;			/* why it went down */
	u32 credits;			/* sends the peer has receive buffers for */
	u32 to_return;			/* receives posted again, not yet advertised */
	bool credit_busy;		/* the credit slot is on the wire */
	bool closing;			/* saying goodbye: the peer's requests are dropped */
	bool retiring;			/* idle, being closed: no caller finds or uses it */
	struct list_head tx_free;	/* free send slots */
	struct list_head tx_posted;	/* data slots posted, in the order they went */
	u32 tx_unsignaled;		/* data slots posted since the last signaled one */
	struct list_head reqs;		/* our pending requests */
	u64 next_id;
	u32 out_reqs, out_bytes;	/* our requests outstanding */
	u32 in_reqs, in_bytes;		/* the peer's requests we hold */
	unsigned long expire_at;	/* jiffies the expiry is queued for, while pending */
	struct list_head rx_backlog;	/* receives rx_work has yet to act on */
	bool rx_deferring;		/* rx_work acts on every receive until it has none */

	struct unload_chan_rx rxm;
};

/* Counters shown in /sys/kernel/unload/channel/ (sysfs.c). */
enum unload_chan_stat {
	UNLOAD_CHAN_STAT_OPENED,	/* channels that came up */
	UNLOAD_CHAN_STAT_MSGS_TX,
	UNLOAD_CHAN_STAT_MSGS_RX,
	UNLOAD_CHAN_STAT_BYTES_TX,
	UNLOAD_CHAN_STAT_BYTES_RX,
	UNLOAD_CHAN_STAT_ERRORS,	/* channels that went down for an error */
	UNLOAD_CHAN_STAT_BAD_MSGS,	/* messages refused as malformed (the peer's fault) */
	UNLOAD_CHAN_STAT_GOODBYES,	/* channels the peer closed with a goodbye */
	UNLOAD_CHAN_STAT_EXPIRED,	/* requests unanswered while the peer sent no ack
					 * for their QP's ACK timeout and retries (the
					 * channel went with them) */
	UNLOAD_CHAN_STAT_AUTH_REFUSED,	/* connections let go for their proof: wrong,
					 * missing, late, or another message before it */
	UNLOAD_CHAN_STAT_NO_KEY,	/* connections not made or refused for want of a
					 * key here (channel/auth = key) */
	UNLOAD_CHAN_STAT_REPLACED,	/* channels to a peer that has another, proven one:
					 * one of the two let go (channel.c says which) */
	UNLOAD_CHAN_STAT_REAPED,	/* channels we closed, with a goodbye, for carrying
					 * nothing for channel_idle_ms */
	UNLOAD_CHAN_STAT_COUNT,
};
extern atomic64_t unload_chan_stats[UNLOAD_CHAN_STAT_COUNT];
extern atomic_t unload_chans_open;	/* channels in the list: connecting, up or going */

/* channel_auth.c: the key and the proofs. */
bool unload_chan_auth_required(void);
bool unload_chan_auth_key_installed(void);
bool unload_chan_auth_open(void);
void unload_chan_auth_set_required(bool required);
int unload_chan_auth_set_key(const char *buf, size_t count);
void unload_chan_auth_nonce(u8 *nonce);
int unload_chan_auth_prove(bool responder, const struct unload_chan_auth_ctx *c, u8 *proof);
int unload_chan_auth_check(bool responder, const struct unload_chan_auth_ctx *c,
			   const u8 *proof);
void unload_chan_auth_exit(void);

/* channel_io.c: the send side, and the channel's state. */
int unload_chan_io_init(u64 *channels_up);
void unload_chan_io_exit(void);
extern struct workqueue_struct *unload_chan_wq;	/* teardowns and responder jobs */
void unload_chan_count(enum unload_chan_stat s, u64 n);
void unload_chan_put(struct unload_chan *chan);
void unload_chan_req_put(struct unload_chan_req *req);
void unload_chan_fail(struct unload_chan *chan, int err);
bool unload_chan_give_up(struct unload_chan *chan, int err);	/* only if still connecting */
int unload_chan_state(struct unload_chan *chan, int *err);
void unload_chan_mark_up(struct unload_chan *chan);
int unload_chan_send_auth(struct unload_chan *chan, const u8 *proof);	/* under tx_mutex */
void unload_chan_send_done(struct ib_cq *cq, struct ib_wc *wc);
void unload_chan_return_credits(struct unload_chan *chan);
void unload_chan_stop_serving(struct unload_chan *chan);	/* channel_rx.c */
void unload_chan_say_goodbye(struct unload_chan *chan);
/* A peer's request we hold: its share of the bound we keep the peer to (in_reqs, in_bytes). */
struct unload_chan_share {
	u32 bytes;			/* the request's payload, not its ack's */
	bool held;			/* not given back yet */
};
void unload_chan_share_return(struct unload_chan *chan, struct unload_chan_share *share);
int unload_chan_send_msg(struct unload_chan *chan, u8 type, u64 id, int status,
			 const void *payload, u32 len, struct unload_chan_share *share,
			 u32 *segments);
int unload_chan_send_now(struct unload_chan *chan, u8 type, u64 id, const void *payload,
			 u32 len, struct unload_chan_share *share);	/* never waits */
struct unload_chan_req *unload_chan_req_alloc(u32 len, u32 resp_len);
int unload_chan_post_req(struct unload_chan *chan, struct unload_chan_req *req, u8 type,
			 const void *payload, unsigned int ack_ms, bool nonblock, u32 *segments);
int unload_chan_req_answer(struct unload_chan_req *req);	/* done_fn's: 0 or why not */
void unload_chan_expire_work(struct work_struct *work);
int unload_chan_call(struct unload_chan *chan, u8 type, const void *payload, u32 len,
		     void **resp, u32 resp_len, u32 *segments, unsigned int ack_ms);

/* channel_rx.c: the receive side. */
int unload_chan_ring_create(struct unload_chan *chan);	/* map and post the receives */
void unload_chan_rx_work(struct work_struct *work);
void unload_chan_ring_destroy(struct unload_chan *chan);	/* after the CQ is freed */

/* channel.c: connections. */
/* Every channel that comes up increments *channels_up (the control page's word). */
int unload_channel_init(u64 *channels_up);
void unload_channel_exit(void);
void unload_channel_device_removed(struct ib_device *dev);
struct unload_session;
struct unload_chan *unload_chan_get(const char *devname, u32 port, const u8 *peer_gid,
				    struct unload_session *sess);	/* charged to its user */
struct unload_chan *unload_chan_get_up(const char *devname, u32 port, const u8 *peer_gid);
int unload_channel_listen_update(void);	/* after the key or channel/auth changed */
extern u32 unload_channel_idle_ms;	/* sysfs.c: a channel idle this long is closed; 0 never */
bool unload_channel_listening(void);

#endif /* UNLOAD_CHANNEL_KMOD_H */
