// SPDX-License-Identifier: GPL-2.0
/*
 * The registry: the RDMA devices the module takes registrations on, and every QP a
 * session registered, hashed by qpn for the peer lookups of pairs.c. What is forgotten
 * when, and in which order with pairs and regions, is lifecycle.c's.
 */
#include <linux/hashtable.h>
#include <linux/uaccess.h>

#include "unload_kmod.h"

/* --- devices --------------------------------------------------------------------- */

/*
 * The RDMA devices the module may register QPs and regions on: added by our ib_client's
 * add, erased by its remove before it forgets their QPs and regions. Entries: index ->
 * struct unload_dev.
 */
struct unload_dev {
	struct ib_device *dev;		/* no reference: the entry lives between add/remove */
	u32 mr_hint;			/* restrack id of the last MR found (scan start);
					 * under unload_devs_lock */
	struct ib_event_handler events;	/* GID table changes (kept pairs read GIDs once) */
};

static DEFINE_XARRAY(unload_devs);
/*
 * Guards the writers of unload_devs and the life of its entries, so each entry's
 * mr_hint too. A registration checks its device live under it while holding its
 * session's lock: the device's removal, which erases the entry under it first and then
 * sweeps every session under that session's lock, either refuses it or finds it.
 */
static DEFINE_MUTEX(unload_devs_lock);

atomic_t unload_gid_generation = ATOMIC_INIT(0);

static void unload_dev_event(struct ib_event_handler *handler, struct ib_event *event)
{
	if (event->event == IB_EVENT_GID_CHANGE)
		atomic_inc(&unload_gid_generation);
}

static struct unload_dev *unload_dev_live(struct ib_device *dev)
{
	struct unload_dev *ud;

	lockdep_assert_held(&unload_devs_lock);
	ud = xa_load(&unload_devs, dev->index);
	return ud && ud->dev == dev ? ud : NULL;
}

int unload_device_added(struct ib_device *dev)
{
	struct unload_dev *ud = kzalloc(sizeof(*ud), GFP_KERNEL);
	int ret;

	if (!ud)
		return -ENOMEM;
	ud->dev = dev;
	INIT_IB_EVENT_HANDLER(&ud->events, dev, unload_dev_event);
	ib_register_event_handler(&ud->events);
	mutex_lock(&unload_devs_lock);
	ret = xa_insert(&unload_devs, dev->index, ud, GFP_KERNEL);
	mutex_unlock(&unload_devs_lock);
	if (ret)
		goto err_unregister_events;
	return 0;

err_unregister_events:
	ib_unregister_event_handler(&ud->events);
	kfree(ud);
	return ret;
}

/* The first step of dev's removal: no registration on it is taken after this. */
void unload_device_erase(struct ib_device *dev)
{
	struct unload_dev *ud;

	mutex_lock(&unload_devs_lock);
	ud = unload_dev_live(dev);
	if (ud)
		xa_erase(&unload_devs, dev->index);
	mutex_unlock(&unload_devs_lock);
	if (ud)
		ib_unregister_event_handler(&ud->events);
	kfree(ud);
}

/* Is dev taking registrations (added, its removal not begun)? */
bool unload_device_live(struct ib_device *dev)
{
	bool live;

	mutex_lock(&unload_devs_lock);
	live = unload_dev_live(dev);
	mutex_unlock(&unload_devs_lock);
	return live;
}

/* Where the last MR scan on dev found its MR (-ENODEV: dev is not live). */
int unload_device_mr_hint(struct ib_device *dev, u32 *hint)
{
	struct unload_dev *ud;

	mutex_lock(&unload_devs_lock);
	ud = unload_dev_live(dev);
	*hint = ud ? ud->mr_hint : 0;
	mutex_unlock(&unload_devs_lock);
	return ud ? 0 : -ENODEV;
}

void unload_device_mr_found(struct ib_device *dev, u32 id)
{
	struct unload_dev *ud;

	mutex_lock(&unload_devs_lock);
	ud = unload_dev_live(dev);
	if (ud)
		ud->mr_hint = id;
	mutex_unlock(&unload_devs_lock);
}

/* --- QPs -------------------------------------------------------------------------- */

/* Every registered QP by qpn; readers use RCU. */
static DEFINE_HASHTABLE(unload_qp_hash, 8);
/* Guards the writers of unload_qp_hash. */
static DEFINE_MUTEX(unload_qp_hash_lock);

static void unload_qp_free_rcu(struct rcu_head *head)
{
	struct unload_qp *q = container_of(head, struct unload_qp, rcu);

	/* Held until readers are gone: they dereference q->dev under RCU. */
	ib_device_put(q->dev);
	kmem_cache_free(unload_qp_cache, q);
}

/* Unhash and free a QP; the caller holds sess->lock and has it on sess->qps. */
static void unload_qp_remove(struct unload_qp *q)
{
	lockdep_assert_held(&q->sess->lock);
	mutex_lock(&unload_qp_hash_lock);
	hash_del_rcu(&q->hnode);
	mutex_unlock(&unload_qp_hash_lock);
	list_del(&q->snode);
	WRITE_ONCE(q->sess->busy[q->busy_slot], 1);
	clear_bit(q->busy_slot, q->sess->busy_slots);
	q->sess->nr_qps--;
	unload_user_uncharge(q->sess->user, UNLOAD_USER_REGS);
	call_rcu(&q->rcu, unload_qp_free_rcu);
}

static struct unload_qp *unload_qp_find(struct unload_session *sess,
					struct ib_device *dev, u32 qpn)
{
	struct unload_qp *q;

	lockdep_assert_held(&sess->lock);
	list_for_each_entry(q, &sess->qps, snode)
		if (q->qpn == qpn && q->dev == dev)
			return q;
	return NULL;
}

/* Forget sess's QPs on dev, or all of them with dev NULL; the caller holds sess->lock. */
void unload_qps_remove(struct unload_session *sess, struct ib_device *dev)
{
	struct unload_qp *q, *tmp;

	lockdep_assert_held(&sess->lock);
	list_for_each_entry_safe(q, tmp, &sess->qps, snode)
		if (!dev || q->dev == dev)
			unload_qp_remove(q);
}

/* Read a REG_QP or UNREG_QP request in and check its form. */
int unload_qp_reg_copy_in(struct unload_qp_reg *req, void __user *arg)
{
	if (copy_from_user(req, arg, sizeof(*req)))
		return -EFAULT;
	if (req->flags || req->state || req->dest_qp_num || req->handle ||
	    req->peer_flags || req->busy_slot || req->reserved0 || req->reserved[0] ||
	    req->reserved[1] || req->reserved[2])
		return -EINVAL;
	if (strnlen(req->ibdev, sizeof(req->ibdev)) == sizeof(req->ibdev))
		return -EINVAL;
	return 0;
}

/*
 * Register QP req->qp_num of dev (which the caller holds) in sess, or find it registered:
 * fills req's state, dest_qp_num, handle and the poison of its peer_flags.
 */
int unload_qp_register(struct unload_session *sess, struct ib_device *dev,
		       struct unload_qp_reg *req)
{
	struct unload_qp_view view;
	struct unload_qp *q;
	int ret;

	ret = unload_qp_view_get(sess, dev, req->qp_num, &view);
	if (ret)
		return ret;
	req->state = view.state;
	req->dest_qp_num = view.dest_qpn;
	unload_qp_view_put(&view);

	mutex_lock(&sess->lock);
	if (sess->dead) {
		ret = -ENODEV;
		goto out_unlock;
	}
	q = unload_qp_find(sess, dev, req->qp_num);
	if (!q) {
		ret = -ENOSPC;
		if (sess->nr_qps >= UNLOAD_MAX_QPS)
			goto out_unlock;
		ret = -EDQUOT;
		if (!unload_user_charge(sess->user, UNLOAD_USER_REGS,
					unload_user_bound(sess, &unload_user_registrations_max)))
			goto out_unlock;
		ret = -ENOMEM;
		q = kmem_cache_zalloc(unload_qp_cache, GFP_KERNEL_ACCOUNT);
		if (!q)
			goto out_uncharge;
		q->sess = sess;
		q->dev = dev;
		q->qpn = req->qp_num;
		q->handle = ++sess->next_qp_handle ? sess->next_qp_handle :
			    ++sess->next_qp_handle;	/* never 0, even after a wrap */
		/*
		 * One per registered QP: nr_qps < UNLOAD_MAX_QPS leaves one free. Taken in
		 * turn around the page, so a freed byte is reused last: a shim thread that
		 * read a QP's byte just before the QP's unregistration may still lower it.
		 */
		q->busy_slot = find_next_zero_bit(sess->busy_slots, UNLOAD_MAX_QPS, sess->busy_next);
		if (q->busy_slot >= UNLOAD_MAX_QPS)
			q->busy_slot = find_first_zero_bit(sess->busy_slots, UNLOAD_MAX_QPS);
		sess->busy_next = (q->busy_slot + 1) % UNLOAD_MAX_QPS;
		set_bit(q->busy_slot, sess->busy_slots);
		/*
		 * Under sess->lock: either the device's removal has not erased it from
		 * unload_devs yet, and its sweep (after) will see q on sess->qps, or q is
		 * refused here.
		 */
		if (!unload_device_live(dev)) {
			clear_bit(q->busy_slot, sess->busy_slots);
			kmem_cache_free(unload_qp_cache, q);
			ret = -ENODEV;
			goto out_uncharge;
		}
		ib_device_try_get(dev);	/* q's own reference; the caller holds one */
		mutex_lock(&unload_qp_hash_lock);
		hash_add_rcu(unload_qp_hash, &q->hnode, q->qpn);
		mutex_unlock(&unload_qp_hash_lock);
		list_add(&q->snode, &sess->qps);
		sess->nr_qps++;
	}
	if (READ_ONCE(q->poisoned))
		req->peer_flags |= UNLOAD_PEER_POISONED;
	req->handle = q->handle;
	req->busy_slot = q->busy_slot;
	/*
	 * Its state changed: what a pair read of it is stale (gen), and it is busy until its
	 * shim, which knows its send queue, says otherwise.
	 */
	atomic_inc(&q->gen);
	WRITE_ONCE(sess->busy[q->busy_slot], 1);
	mutex_unlock(&sess->lock);
	return 0;

out_uncharge:
	unload_user_uncharge(sess->user, UNLOAD_USER_REGS);
out_unlock:
	mutex_unlock(&sess->lock);
	return ret;
}

/*
 * QP (dev, qpn) changed behind its registrations (a forked child of its owner modified
 * it): each registration by a session of by's user reads as after a REG_QP (its gen
 * moves, its byte rises). Returns how many there were.
 */
int unload_qp_changed(struct unload_session *by, struct ib_device *dev, u32 qpn)
{
	struct unload_qp *q;
	int n = 0;

	/* Hashed under this lock, q's session has not been released: its busy page lives. */
	mutex_lock(&unload_qp_hash_lock);
	hash_for_each_possible(unload_qp_hash, q, hnode, qpn)
		if (q->dev == dev && q->qpn == qpn &&
		    uid_eq(q->sess->cred->euid, by->cred->euid)) {
			atomic_inc(&q->gen);
			WRITE_ONCE(q->sess->busy[q->busy_slot], 1);
			n++;
		}
	mutex_unlock(&unload_qp_hash_lock);
	return n;
}

/* Forget sess's registration of QP (dev, qpn): 0, or -ENOENT when there is none. */
int unload_qp_unregister(struct unload_session *sess, struct ib_device *dev, u32 qpn)
{
	struct unload_qp *q;

	mutex_lock(&sess->lock);
	q = unload_qp_find(sess, dev, qpn);
	if (q)
		unload_qp_remove(q);
	mutex_unlock(&sess->lock);
	return q ? 0 : -ENOENT;
}

/* --- lookups, for pairs.c ---------------------------------------------------------- */

/*
 * The sender's registration in sess (by handle, or by qpn when that is unique in the
 * session), or NULL. The caller holds the RCU read lock: q lives until it drops it.
 */
const struct unload_qp *unload_qp_sender(struct unload_session *sess, u32 qpn, u32 handle)
{
	const struct unload_qp *found = NULL;
	struct unload_qp *q;
	unsigned int n = 0;

	hash_for_each_possible_rcu(unload_qp_hash, q, hnode, qpn) {
		if (q->sess != sess || q->qpn != qpn || (handle && q->handle != handle))
			continue;
		n++;
		found = q;
	}
	/* Two devices may number QPs alike: a request does not say which, so neither. */
	return n == 1 ? found : NULL;
}

/* QP (dev, qpn)'s registration in sess, or NULL; under RCU, as unload_qp_sender. */
const struct unload_qp *unload_qp_lookup(struct unload_session *sess, struct ib_device *dev,
					 u32 qpn)
{
	struct unload_qp *q;

	/* At most one: unload_qp_register finds a registration before it adds one. */
	hash_for_each_possible_rcu(unload_qp_hash, q, hnode, qpn)
		if (q->sess == sess && q->dev == dev && q->qpn == qpn)
			return q;
	return NULL;
}

/*
 * Is QP (dev, qpn) registered by sess, and sess live (unload_session_live)? *poisoned.
 * The caller holds the RCU read lock.
 */
bool unload_qp_registered(struct unload_session *sess, struct ib_device *dev, u32 qpn,
			  bool *poisoned)
{
	const struct unload_qp *q = unload_qp_lookup(sess, dev, qpn);

	*poisoned = q && READ_ONCE(q->poisoned);
	return q && unload_session_live(sess);
}

/* QP (dev, qpn)'s byte in sess's busy page, or -ENOENT; under RCU. */
int unload_qp_busy_slot(struct unload_session *sess, struct ib_device *dev, u32 qpn)
{
	const struct unload_qp *q = unload_qp_lookup(sess, dev, qpn);

	return q ? q->busy_slot : -ENOENT;
}

/*
 * The next registration of qpn (of any live session) after the *seen first ones:
 * references on its session and device in *sess and *dev (the caller checks the QP
 * after). False when there is none left.
 *
 * Under RCU only the session's memory is safe (it is freed after a grace period), not
 * its mm: the last put drops the mm's grab at once. So the references are taken first,
 * and the session's liveness, which reads its mm, is judged under the session's own
 * reference, which keeps that grab.
 */
bool unload_qp_candidate(u32 qpn, u32 *seen, struct unload_session **sess,
			 struct ib_device **dev)
{
	struct unload_session *s;
	struct ib_device *d;
	struct unload_qp *q;
	u32 i;

	for (;;) {
		s = NULL;
		d = NULL;
		i = 0;
		rcu_read_lock();
		hash_for_each_possible_rcu(unload_qp_hash, q, hnode, qpn) {
			if (q->qpn != qpn || i++ < *seen)
				continue;
			if (!kref_get_unless_zero(&q->sess->ref))
				continue;
			s = q->sess;
			d = ib_device_try_get(q->dev) ? q->dev : NULL;
			break;
		}
		rcu_read_unlock();
		*seen = i;
		if (!s)
			return false;
		/* A closing or exiting session's QPs are no one's peers: not queried. */
		if (d && unload_session_live(s)) {
			*sess = s;
			*dev = d;
			return true;
		}
		if (d)
			ib_device_put(d);
		unload_session_put(s);	/* outside RCU: the last put may free */
	}
}

/* Mark sess's registration of QP (dev, qpn) poisoned: it never goes direct again. */
void unload_qp_poison(struct unload_session *sess, struct ib_device *dev, u32 qpn)
{
	struct unload_qp *q;

	rcu_read_lock();
	hash_for_each_possible_rcu(unload_qp_hash, q, hnode, qpn)
		if (q->sess == sess && q->dev == dev && q->qpn == qpn)
			WRITE_ONCE(q->poisoned, true);
	rcu_read_unlock();
}
