// SPDX-License-Identifier: GPL-2.0
/*
 * Pairs: a sender QP and the peer QP its writes land on, one name for all it takes.
 * Resolution (unload_pair_get) finds the peer among the registered QPs and checks both
 * as a responder NIC would; a slot keeps a resolution from one submission to the next,
 * with the MRs its last requests named; the reaper drops idle and dying slots; a
 * submission holds its pair's slot (struct unload_pair_hold) across the requests of one
 * sender QP. Below it are QP views (qp_view.c), the registry and regions; what forgets
 * pairs, and when, is lifecycle.c's.
 *
 * Resolving a sender QP and
 * its peer from the RDMA core (unload_pair_get) takes restrack, device and session
 * references and reads both source GIDs: about half of a small direct write under TCG
 * (docs/perf/direct-profile.md). A slot keeps one accepted resolution. The next
 * submission of that QP reads both QPs again (state, access and AV: what may change
 * while the objects stay) and both registrations (unload_pair_still), and resolves from
 * scratch when anything a resolution depends on moved. So every submission is still
 * checked against the RDMA core's state at that moment; what is kept are the objects'
 * identities and the source GIDs, whose table changes are counted
 * (unload_gid_generation). A slot also keeps the last source and target MR it checked
 * (unload_kept_mr): a request naming the same one reads its fields again instead of
 * looking it up in restrack.
 *
 * Kept references must not hold up the RDMA core: a QP's destroy (rdma_restrack_begin_del)
 * and an MR's (rdma_restrack_del), a process's exit and a device's removal wait for every
 * reference on the QP or MR. So a slot is dropped, in every session, when either of its
 * QPs is unregistered (the shim does so before ibv_destroy_qp), when a device of it goes,
 * when a submission finds one of its QPs or MRs deleted, and by the reaper, which runs
 * while any slot is kept and drops those idle for pair_idle_ms (a sysfs tunable) or with
 * a QP or MR being deleted or drained, however busy: a destroy the program did not
 * announce waits about that long. A kept MR alone goes when its region is unregistered
 * (before ibv_dereg_mr or a rereg) or is no longer the one a request names.
 */
#include <linux/hash.h>
#include <linux/jiffies.h>
#include <linux/workqueue.h>
#include <rdma/ib_cache.h>

#include "unload_kmod.h"

/* --- resolution ---------------------------------------------------------------- */

/* Is gid one of dev's GIDs (RoCE v2 or v1/IB)? */
static bool unload_gid_is_local(struct ib_device *dev, const union ib_gid *gid)
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
 * Does the responder expect a PSN the sender has not sent yet? Then a NIC would take the
 * sender's next request for a duplicate and not place it (rxe never completes it). That
 * happens only when the responder was brought back to RTR with a receive PSN ahead of the
 * sender's (a reset and reconnect between writes). The reverse, a responder behind, is
 * also what rxe shows for a moment after a READ (its responder advances the expected PSN
 * only after sending the last response), so it is not judged. PSNs are 24 bits and
 * wrap: "ahead" is a distance in (0, 2^23).
 */
static bool unload_responder_ahead(const struct unload_qp_view *s,
				   const struct unload_qp_view *p)
{
	u32 d = (p->rq_psn - s->sq_psn) & UNLOAD_PSN_MASK;

	return d != 0 && d < (UNLOAD_PSN_MASK + 1) / 2;
}

/*
 * Would view p (a candidate peer) take a write from the sender view s now, as a
 * responder NIC judges its connection: receiving (RTR or RTS), naming s back exactly,
 * and not expecting a PSN s has not sent?
 */
static bool unload_views_paired(const struct unload_qp_view *s, u32 qpn,
				const struct unload_qp_view *p, u32 peer_qpn)
{
	return (p->state == IB_QPS_RTR || p->state == IB_QPS_RTS) &&
	       s->has_grh && p->has_grh && s->dest_qpn == peer_qpn && p->dest_qpn == qpn &&
	       !memcmp(&p->sgid, &s->dgid, sizeof(p->sgid)) &&
	       !memcmp(&p->dgid, &s->sgid, sizeof(p->dgid)) &&
	       !unload_responder_ahead(s, p);
}

static void unload_pair_put(struct unload_pair *pr)
{
	unload_qp_view_put(&pr->p);
	if (pr->peer_dev)
		ib_device_put(pr->peer_dev);
	if (pr->peer)
		unload_session_put(pr->peer);
	unload_qp_view_put(&pr->s);
	if (pr->dev)
		ib_device_put(pr->dev);
	memset(pr, 0, sizeof(*pr));
}

/*
 * The peer of a sender view: the registered QP (of any live session) whose number is
 * the sender's destination and whose own view names the sender back exactly (QPNs and
 * both GIDs, hence the device and port). Takes references into pr; returns a reason.
 */
static u32 unload_peer_resolve(struct unload_pair *pr)
{
	struct unload_session *cand_sess;
	struct ib_device *cand_dev;
	u32 seen = 0, deny = UNLOAD_DENY_PEER_UNKNOWN;

	/* Each candidate by qpn in turn: references taken under RCU, checked after. */
	while (unload_qp_candidate(pr->s.dest_qpn, &seen, &cand_sess, &cand_dev)) {
		if (!unload_qp_view_get(cand_sess, cand_dev, pr->s.dest_qpn, &pr->p)) {
			if (pr->p.type == IB_QPT_RC &&
			    unload_views_paired(&pr->s, pr->qpn, &pr->p, pr->s.dest_qpn)) {
				pr->peer = cand_sess;
				pr->peer_dev = cand_dev;
				pr->peer_qpn = pr->s.dest_qpn;
				return UNLOAD_DENY_NONE;
			}
			deny = UNLOAD_DENY_PEER_UNPAIRED;
			unload_qp_view_put(&pr->p);
		}
		ib_device_put(cand_dev);
		unload_session_put(cand_sess);
	}
	return deny;
}

/*
 * Resolve a request's sender QP and its peer from the RDMA core, now. On NONE pr holds
 * references on both QPs, their devices and the peer session (unload_pair_put);
 * otherwise it may hold some.
 */
static u32 unload_pair_get(struct unload_session *sess, u32 qpn, u32 handle,
			   struct unload_pair *pr)
{
	const struct unload_qp *q;
	struct ib_device *dev;
	bool poisoned = false;
	u32 deny;

	memset(pr, 0, sizeof(*pr));
	pr->qpn = qpn;
	rcu_read_lock();
	q = unload_qp_sender(sess, qpn, handle);
	dev = q ? q->dev : NULL;
	if (q) {
		poisoned = READ_ONCE(q->poisoned);
		pr->s_gen = atomic_read(&q->gen);
	}
	if (dev && !ib_device_try_get(dev))
		dev = NULL;
	rcu_read_unlock();
	if (!dev)
		return UNLOAD_DENY_QP_UNREGISTERED;
	pr->dev = dev;
	if (poisoned)
		return UNLOAD_DENY_POISONED;

	/* The view after the gen: a modify it misses is one a later gen shows. */
	smp_rmb();
	/* Ownership is the opener's: sess->owner, whoever submits. */
	if (unload_qp_view_get(sess, dev, qpn, &pr->s))
		return UNLOAD_DENY_QP_NOT_OWNED;
	if (pr->s.type != IB_QPT_RC || pr->s.state != IB_QPS_RTS || !pr->s.has_grh)
		return UNLOAD_DENY_QP_STATE;
	deny = unload_peer_resolve(pr);
	if (deny)
		return deny;
	/* The peer's registration may carry the poison of an earlier violation. */
	rcu_read_lock();
	unload_qp_registered(pr->peer, pr->peer_dev, pr->peer_qpn, &poisoned);
	rcu_read_unlock();
	return poisoned ? UNLOAD_DENY_POISONED : UNLOAD_DENY_NONE;
}

/*
 * Would unload_pair_get accept pr's pair now? pr holds the references of an accepted
 * resolution, and the caller has seen neither QP being deleted, so both are the same
 * objects: read the peer again (what a responder NIC checks is never taken on trust),
 * check both registrations, and require the AVs unchanged, so the pairing (and the
 * source GIDs read then) still stands. False: resolve again.
 *
 * The sender is read again only when it may have moved. It is the submitter's own QP,
 * so its state is a question of its own program's semantics, never of the peer's
 * protection: a modify registers it again (its gen), and the RDMA core moves it by
 * itself only for a NIC request of its own or of its peer (each QP's busy byte) failing.
 * With both quiet and no registration since it was read, it is as read.
 */
static bool unload_pair_still(struct unload_session *sess, u32 handle,
			      struct unload_pair *pr)
{
	const struct unload_qp *sq, *pq;
	bool same_s = true, same_p, live, quiet;

	rcu_read_lock();
	sq = unload_qp_sender(sess, pr->qpn, handle);
	pq = unload_qp_lookup(pr->peer, pr->peer_dev, pr->peer_qpn);
	live = sq && sq->dev == pr->dev && !READ_ONCE(sq->poisoned) && pq &&
	       !READ_ONCE(pq->poisoned) && unload_session_live(pr->peer);
	quiet = live && atomic_read(&sq->gen) == pr->s_gen && unload_qp_quiet(sq) &&
		unload_qp_quiet(pq);
	if (live && !quiet)
		pr->s_gen = atomic_read(&sq->gen);
	rcu_read_unlock();
	if (!live)
		return false;
	smp_rmb();	/* the views after the gen and the busy bytes */
	if ((!quiet && unload_qp_view_reread(&pr->s, &same_s)) ||
	    unload_qp_view_reread(&pr->p, &same_p) || !same_s || !same_p)
		return false;
	/*
	 * A quiet sender may still have sent since it was read (its NIC requests completed):
	 * the peer's expected PSN moved on, its own is read again before judging.
	 */
	if (quiet && !unload_views_paired(&pr->s, pr->qpn, &pr->p, pr->peer_qpn) &&
	    (unload_qp_view_reread(&pr->s, &same_s) || !same_s))
		return false;
	return pr->s.state == IB_QPS_RTS &&
	       unload_views_paired(&pr->s, pr->qpn, &pr->p, pr->peer_qpn);
}

/*
 * A request of pr failed a check an RNIC makes: the sender never goes direct again, nor
 * the peer when the responder is the one that fails it (`responder`).
 */
static void unload_pair_poison(struct unload_session *sess, struct unload_pair *pr,
			       bool responder)
{
	unload_qp_poison(sess, pr->dev, pr->qpn);
	unload_maps_revoke_qp(pr->dev, pr->qpn);
	if (responder && pr->peer) {
		unload_qp_poison(pr->peer, pr->peer_dev, pr->peer_qpn);
		unload_maps_revoke_qp(pr->peer_dev, pr->peer_qpn);
	}
}

/*
 * What the RDMA core says of sender (qpn, handle)'s connection, as a request would see
 * it: UNLOAD_PEER_* flags for REG_QP's answer.
 */
u32 unload_pair_report(struct unload_session *sess, u32 qpn, u32 handle)
{
	struct unload_pair pr;
	u32 flags = 0, deny;

	deny = unload_pair_get(sess, qpn, handle, &pr);
	if (pr.s.has_grh && unload_gid_is_local(pr.dev, &pr.s.dgid))
		flags |= UNLOAD_PEER_LOCAL;
	if (deny == UNLOAD_DENY_NONE)
		flags |= UNLOAD_PEER_PAIRED | UNLOAD_PEER_LOCAL;
	else if (deny == UNLOAD_DENY_POISONED)
		flags |= UNLOAD_PEER_POISONED;
	unload_pair_put(&pr);
	return flags;
}

/* --- slots ---------------------------------------------------------------------- */

#define UNLOAD_PAIR_SLOT_BITS	3	/* 1 << bits == UNLOAD_PAIR_SLOTS */

static_assert(UNLOAD_PAIR_SLOTS == 1 << UNLOAD_PAIR_SLOT_BITS);

static void unload_kept_mr_put(struct unload_kept_mr *kept)
{
	if (kept->mr)
		unload_region_mr_put(kept->mr);
	kept->mr = NULL;
}

static bool unload_kept_mr_dying(const struct unload_kept_mr *kept)
{
	return kept->mr && !READ_ONCE(kept->mr->res.valid);
}

/*
 * The live MR behind region r of owner on dev, as unload_region_mr_get finds it, held by
 * kept (the caller does not put it): the last request's reference when it is the same
 * MR, still live and as registered, else a fresh lookup. The caller holds the slot.
 */
struct ib_mr *unload_kept_mr_get(struct unload_kept_mr *kept, struct unload_session *owner,
				 struct unload_region *r, struct ib_device *dev)
{
	if (kept->mr && kept->id == r->mr_id && dev == r->dev &&
	    unload_region_mr_still(owner, r, kept->mr))
		return kept->mr;
	unload_kept_mr_put(kept);
	kept->mr = unload_region_mr_get(owner, r, dev);
	kept->id = r->mr_id;
	return kept->mr;
}

/* Drop slot's references. The caller holds slot->lock. */
static void unload_pair_drop_locked(struct unload_pair_slot *slot)
{
	lockdep_assert_held(&slot->lock);
	unload_kept_mr_put(&slot->dst);
	unload_kept_mr_put(&slot->src);
	if (slot->valid)
		unload_pair_put(&slot->pr);
	slot->valid = false;
}

/* Is a QP or a kept MR of slot being deleted by the RDMA core (which waits for us)? */
static bool unload_pair_dying(const struct unload_pair_slot *slot)
{
	return !slot->pr.s.res || !READ_ONCE(slot->pr.s.res->valid) ||
	       !slot->pr.p.res || !READ_ONCE(slot->pr.p.res->valid) ||
	       unload_kept_mr_dying(&slot->src) || unload_kept_mr_dying(&slot->dst);
}

/*
 * Is a QP of slot being drained for its destroy (slot not dying: both views held)? Only
 * the reaper asks (a restrack lookup each): a submission sees a drained QP as alive,
 * which it is until the drain ends, and the reaper's drop lets the drain end while the
 * sender keeps submitting.
 */
static bool unload_pair_draining(const struct unload_pair_slot *slot)
{
	return unload_qp_view_draining(&slot->pr.s) || unload_qp_view_draining(&slot->pr.p);
}

static void unload_pair_reap(struct work_struct *work)
{
	struct unload_session *sess = container_of(to_delayed_work(work),
						   struct unload_session, pair_reaper);
	unsigned long idle = msecs_to_jiffies(READ_ONCE(unload_pair_idle_ms));
	bool kept = false;
	unsigned int i;

	for (i = 0; i < UNLOAD_PAIR_SLOTS; i++) {
		struct unload_pair_slot *slot = &sess->pairs[i];

		/* In use: not idle, and a stalled submission must not stall a kworker. */
		if (!mutex_trylock(&slot->lock)) {
			kept = true;
			continue;
		}
		if (slot->valid &&
		    (time_after_eq(jiffies, slot->used + idle) || unload_pair_dying(slot) ||
		     unload_pair_draining(slot)))
			unload_pair_drop_locked(slot);
		kept |= slot->valid;
		mutex_unlock(&slot->lock);
	}
	if (kept)
		schedule_delayed_work(&sess->pair_reaper, idle);
}

int unload_pairs_init(struct unload_session *sess)
{
	unsigned int i;

	sess->pairs = kcalloc(UNLOAD_PAIR_SLOTS, sizeof(*sess->pairs), GFP_KERNEL_ACCOUNT);
	if (!sess->pairs)
		return -ENOMEM;
	for (i = 0; i < UNLOAD_PAIR_SLOTS; i++)
		mutex_init(&sess->pairs[i].lock);
	INIT_DELAYED_WORK(&sess->pair_reaper, unload_pair_reap);
	return 0;
}

/* The file is closed: no submission can come; stop the reaper and drop every pair. */
void unload_pairs_release(struct unload_session *sess)
{
	unsigned int i;

	cancel_delayed_work_sync(&sess->pair_reaper);
	for (i = 0; i < UNLOAD_PAIR_SLOTS; i++) {
		mutex_lock(&sess->pairs[i].lock);
		unload_pair_drop_locked(&sess->pairs[i]);
		mutex_unlock(&sess->pairs[i].lock);
	}
}

/* The last reference to the session is gone (its pairs were dropped at release). */
void unload_pairs_free(struct unload_session *sess)
{
	unsigned int i;

	for (i = 0; i < UNLOAD_PAIR_SLOTS; i++)
		mutex_destroy(&sess->pairs[i].lock);
	kfree(sess->pairs);
}

/*
 * Drop sess's pairs with QP (dev, qpn) on either side (its unregistration: the program
 * is about to destroy it), or with qpn 0 every pair with either QP on dev (its removal).
 */
void unload_pairs_forget(struct unload_session *sess, struct ib_device *dev, u32 qpn)
{
	unsigned int i;

	for (i = 0; i < UNLOAD_PAIR_SLOTS; i++) {
		struct unload_pair_slot *slot = &sess->pairs[i];
		const struct unload_pair *pr = &slot->pr;

		mutex_lock(&slot->lock);
		if (slot->valid &&
		    (qpn ? ((pr->dev == dev && pr->qpn == qpn) ||
			    (pr->peer_dev == dev && pr->peer_qpn == qpn)) :
			   (pr->dev == dev || pr->peer_dev == dev)))
			unload_pair_drop_locked(slot);
		mutex_unlock(&slot->lock);
	}
}

/* Drop what sess's pairs keep of MR mr_id on dev (its region is going: dereg or rereg). */
void unload_pairs_forget_mr(struct unload_session *sess, struct ib_device *dev, u32 mr_id)
{
	unsigned int i;

	for (i = 0; i < UNLOAD_PAIR_SLOTS; i++) {
		struct unload_pair_slot *slot = &sess->pairs[i];

		mutex_lock(&slot->lock);
		if (slot->src.mr && slot->src.mr->device == dev && slot->src.id == mr_id)
			unload_kept_mr_put(&slot->src);
		if (slot->dst.mr && slot->dst.mr->device == dev && slot->dst.id == mr_id)
			unload_kept_mr_put(&slot->dst);
		mutex_unlock(&slot->lock);
	}
}

/*
 * The pair of sender (qpn, handle), checked now, in its slot, locked: *deny is NONE when
 * a responder NIC would take a write on it, else the reason (the slot then holds what
 * the refused resolution took: the caller drops it). The caller releases the slot when
 * its submission is done with the QP.
 */
static struct unload_pair_slot *unload_pair_acquire(struct unload_session *sess, u32 qpn,
						    u32 handle, u32 *deny)
{
	struct unload_pair_slot *slot = &sess->pairs[hash_32(qpn, UNLOAD_PAIR_SLOT_BITS)];
	/* Read before any GID is: a change meanwhile makes the next use resolve again. */
	int gid_generation = atomic_read(&unload_gid_generation);

	mutex_lock(&slot->lock);
	slot->used = jiffies;
	*deny = UNLOAD_DENY_NONE;
	if (!slot->valid || slot->qpn != qpn || slot->handle != handle ||
	    slot->gid_generation != gid_generation || unload_pair_dying(slot) ||
	    !unload_pair_still(sess, handle, &slot->pr)) {
		unload_pair_drop_locked(slot);
		atomic64_inc(&unload_pairs_resolved);
		*deny = unload_pair_get(sess, qpn, handle, &slot->pr);
		slot->valid = true;
		slot->qpn = qpn;
		slot->handle = handle;
		slot->gid_generation = gid_generation;
		if (!*deny)
			schedule_delayed_work(&sess->pair_reaper,
					      msecs_to_jiffies(READ_ONCE(unload_pair_idle_ms)));
	}
	if (!*deny && !(slot->pr.p.access & IB_ACCESS_REMOTE_WRITE))
		*deny = UNLOAD_DENY_ACCESS;	/* the responder QP must allow remote writes */
	return slot;
}

/*
 * The next request of a submission on a slot it holds: what a responder NIC checks on
 * every packet, read again (the peer QP live, registered and unpoisoned, receiving, with
 * remote write). NONE, or the reason; a move of the peer to ERR stops the very next one.
 */
static u32 unload_pair_recheck(struct unload_pair_slot *slot)
{
	struct unload_pair *pr = &slot->pr;
	bool poisoned, registered, same;

	lockdep_assert_held(&slot->lock);
	if (unload_pair_dying(slot))
		return UNLOAD_DENY_PEER_UNPAIRED;
	rcu_read_lock();
	registered = unload_qp_registered(pr->peer, pr->peer_dev, pr->peer_qpn, &poisoned);
	rcu_read_unlock();
	if (!registered)
		return UNLOAD_DENY_PEER_UNKNOWN;
	if (poisoned)
		return UNLOAD_DENY_POISONED;
	if (unload_qp_view_reread(&pr->p, &same) || !same ||
	    (pr->p.state != IB_QPS_RTR && pr->p.state != IB_QPS_RTS))
		return UNLOAD_DENY_PEER_UNPAIRED;
	if (!(pr->p.access & IB_ACCESS_REMOTE_WRITE))
		return UNLOAD_DENY_ACCESS;
	return UNLOAD_DENY_NONE;
}

/* A request on the pair was refused: the next one resolves again (and meets poison). */
static void unload_pair_drop(struct unload_pair_slot *slot)
{
	unload_pair_drop_locked(slot);
}

static void unload_pair_release(struct unload_pair_slot *slot)
{
	mutex_unlock(&slot->lock);
}

/* --- the per-submission hold --------------------------------------------------------- */

/*
 * Which QPs of the pair a refusal marks, as an RNIC's error would move them to ERR:
 * both for what a responder NAKs on a target the module knows (PD, access, bounds), the
 * sender alone for a bad local SGE (the requester's own error: the responder never sees
 * it). An rkey the module does not know (a memory window, an MR registered elsewhere or
 * gone) marks nothing: the NIC judges it, and answers with its own outcome.
 */
enum unload_mark { UNLOAD_MARK_NONE, UNLOAD_MARK_SENDER, UNLOAD_MARK_BOTH };

static enum unload_mark unload_deny_marks(u32 deny)
{
	switch (deny) {
	case UNLOAD_DENY_PD:
	case UNLOAD_DENY_ACCESS:
	case UNLOAD_DENY_BOUNDS:
		return UNLOAD_MARK_BOTH;
	case UNLOAD_DENY_LKEY:
		return UNLOAD_MARK_SENDER;
	default:
		return UNLOAD_MARK_NONE;
	}
}

/* Release the hold's slot, if any: a teardown waiting on it goes on. */
void unload_pair_hold_release(struct unload_pair_hold *h)
{
	if (h->slot)
		unload_pair_release(h->slot);
	h->slot = NULL;
}

/* A request on h's pair was refused: poison it on a violation, drop it, release it. */
void unload_pair_hold_refuse(struct unload_session *sess, struct unload_pair_hold *h, u32 deny)
{
	enum unload_mark mark = unload_deny_marks(deny);

	if (mark != UNLOAD_MARK_NONE)
		unload_pair_poison(sess, &h->slot->pr, mark == UNLOAD_MARK_BOTH);
	unload_pair_drop(h->slot);
	unload_pair_hold_release(h);
}

/*
 * The pair of sender (qpn, handle), checked, or kept from the hold's last request; NULL on
 * refusal (*deny: why; the slot is dropped and released).
 */
struct unload_pair *unload_pair_hold_get(struct unload_session *sess, struct unload_pair_hold *h,
					 u32 qpn, u32 handle, u32 *deny)
{
	const struct unload_pair_slot *slot = h->slot;

	*deny = UNLOAD_DENY_NONE;
	if (slot && slot->valid && slot->qpn == qpn && slot->handle == handle) {
		*deny = unload_pair_recheck(h->slot);	/* as a NIC does each packet */
	} else {
		unload_pair_hold_release(h);
		h->slot = unload_pair_acquire(sess, qpn, handle, deny);
	}
	if (*deny) {
		unload_pair_hold_refuse(sess, h, *deny);
		return NULL;
	}
	return &h->slot->pr;
}

/*
 * The pair of sender (qpn, handle) checked now, as a submission's first request of it is,
 * held in h; NULL on refusal, which only drops it: nothing was written, so nothing is
 * poisoned (a mapping's grant).
 */
struct unload_pair *unload_pair_hold_check(struct unload_session *sess, struct unload_pair_hold *h,
					   u32 qpn, u32 handle, u32 *deny)
{
	unload_pair_hold_release(h);
	h->slot = unload_pair_acquire(sess, qpn, handle, deny);
	if (*deny) {
		unload_pair_drop(h->slot);
		unload_pair_hold_release(h);
		return NULL;
	}
	return &h->slot->pr;
}
