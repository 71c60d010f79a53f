// SPDX-License-Identifier: GPL-2.0
/*
 * The pairs a session keeps from one submission to the next. Resolving a sender QP and
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
 * Kept references must not hold up the RDMA core: rdma_restrack_del (ibv_destroy_qp,
 * ibv_dereg_mr, a process's exit, a device's removal) waits for every reference on the
 * QP or MR. So a slot is dropped, in every session, when either of its QPs is
 * unregistered (the shim does so before ibv_destroy_qp), when a device of it goes, when
 * a submission finds one of its QPs being deleted, and by the reaper, which runs while
 * any slot is kept and drops those idle for pair_idle_ms (a sysfs tunable) or with a QP
 * or MR being deleted: a destroy the program did not announce (its exit) waits at most
 * about that long. A kept MR alone goes when its region is unregistered (before
 * ibv_dereg_mr or a rereg) or is no longer the one a request names.
 */
#include <linux/hash.h>
#include <linux/jiffies.h>
#include <linux/workqueue.h>

#include "unload_kmod.h"

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
		    (time_after_eq(jiffies, slot->used + idle) || unload_pair_dying(slot)))
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

	sess->pairs = kcalloc(UNLOAD_PAIR_SLOTS, sizeof(*sess->pairs), GFP_KERNEL);
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
struct unload_pair_slot *unload_pair_acquire(struct unload_session *sess, u32 qpn,
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

/* A request on the pair was refused: the next one resolves again (and meets poison). */
void unload_pair_drop(struct unload_pair_slot *slot)
{
	unload_pair_drop_locked(slot);
}

void unload_pair_release(struct unload_pair_slot *slot)
{
	mutex_unlock(&slot->lock);
}
