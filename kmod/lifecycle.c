// SPDX-License-Identifier: GPL-2.0
/*
 * What comes and goes: a session's open and close, a QP's registration and
 * unregistration, a region's deregistration, a device's removal. Every invalidation is
 * here, in one order: what goes is unpublished first (a QP unhashed, a region off its
 * session's tables, a device off the table), so no request or resolution takes it
 * again; then the pairs keeping references to it forget them (they would hold up the
 * RDMA core's destroy of the QP or MR); then QPs, and regions last (their retirement
 * waits for the copies in flight). Each object's own file does the rest: registry.c,
 * regions.c, pairs.c, arenas.c, session.c.
 */
#include <linux/uaccess.h>

#include "unload_kmod.h"

/* --- invalidation ------------------------------------------------------------------ */

/*
 * r is unpublished: drop the references any session's pairs keep on its MR, so the
 * program's ibv_dereg_mr (or rereg), which comes next, does not wait for the reaper.
 */
static void unload_forget_region_mr(struct unload_region *r)
{
	struct unload_session *other;

	mutex_lock(&unload_sessions_lock);
	list_for_each_entry(other, &unload_sessions, node)
		unload_pairs_forget_mr(other, r->dev, r->mr_id);
	mutex_unlock(&unload_sessions_lock);
}

/* Forget region r, which its session has unpublished: its MR in pairs, then its pins. */
static void unload_forget_region(struct unload_region *r)
{
	unload_forget_region_mr(r);
	unload_region_retire(r);
}

long unload_ioctl_dereg_region(struct unload_session *sess, void __user *arg)
{
	struct unload_region_dereg req;
	struct unload_region *r;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.reserved0 || req.reserved[0] || req.reserved[1])
		return -EINVAL;
	if (!req.handle || req.handle > UNLOAD_MAX_REGIONS)
		return -ENOENT;

	r = unload_region_take(sess, req.handle);	/* no new request finds it */
	if (!r)
		return -ENOENT;
	unload_forget_region(r);
	return 0;
}

long unload_ioctl_reg_qp(struct unload_session *sess, void __user *arg)
{
	struct unload_qp_reg req;
	struct ib_device *dev;
	long ret;

	ret = unload_qp_reg_copy_in(&req, arg);
	if (ret)
		return ret;
	dev = ib_device_get_by_name(req.ibdev, RDMA_DRIVER_UNKNOWN);
	if (!dev)
		return -ENODEV;
	ret = unload_qp_register(sess, dev, &req);
	if (ret)
		goto out_put_device;
	/* Report what the RDMA core says of the connection, as a request would see it. */
	req.peer_flags |= unload_pair_report(sess, req.qp_num, req.handle);
	ret = copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;

out_put_device:
	ib_device_put(dev);
	return ret;
}

long unload_ioctl_unreg_qp(struct unload_session *sess, void __user *arg)
{
	struct unload_session *other;
	struct unload_qp_reg req;
	struct ib_device *dev;
	long ret;

	ret = unload_qp_reg_copy_in(&req, arg);
	if (ret)
		return ret;
	dev = ib_device_get_by_name(req.ibdev, RDMA_DRIVER_UNKNOWN);
	if (!dev)
		return -ENODEV;
	ret = unload_qp_unregister(sess, dev, req.qp_num);
	/*
	 * Pairs kept on it, in any session, would hold up its destroy until the reaper. Only
	 * for a QP the caller had registered (its own: REG_QP checked): no one else's call
	 * drops a pair.
	 */
	if (!ret) {
		mutex_lock(&unload_sessions_lock);
		list_for_each_entry(other, &unload_sessions, node)
			unload_pairs_forget(other, dev, req.qp_num);
		mutex_unlock(&unload_sessions_lock);
	}
	ib_device_put(dev);
	return ret;
}

/*
 * The RDMA core is removing @dev (our ib_client's remove, before it waits for the
 * device's last reference): refuse new registrations on it, then forget every pair, QP
 * and region on it, so their references go. Their programs' direct writes are then
 * refused and take the NIC, which reports the device's loss itself.
 */
void unload_device_removed(struct ib_device *dev)
{
	struct unload_session *sess;

	unload_device_erase(dev);
	mutex_lock(&unload_sessions_lock);
	list_for_each_entry(sess, &unload_sessions, node) {
		unload_pairs_forget(sess, dev, 0);	/* their references on dev */
		mutex_lock(&sess->lock);
		unload_qps_remove(sess, dev);
		unload_regions_retire_device(sess, dev);
		mutex_unlock(&sess->lock);
	}
	mutex_unlock(&unload_sessions_lock);
}

/* --- sessions ---------------------------------------------------------------------- */

struct unload_session *unload_session_open(struct file *file)
{
	struct unload_session *sess = unload_session_alloc(file);
	int ret;

	if (IS_ERR(sess))
		return sess;
	/* Uncharged at close, not at the last put: a peer's pair may hold sess a while. */
	ret = -EMFILE;
	if (!unload_user_charge(sess->user, UNLOAD_USER_SESSIONS,
				unload_user_bound(sess, &unload_user_sessions_max)))
		goto err_put_session;
	ret = unload_pairs_init(sess);
	if (ret)
		goto err_uncharge_session;
	unload_session_publish(sess);
	return sess;

err_uncharge_session:
	unload_user_uncharge(sess->user, UNLOAD_USER_SESSIONS);
err_put_session:
	unload_session_put(sess);
	return ERR_PTR(ret);
}

/* The file is closed: release everything the session holds. */
void unload_session_close(struct unload_session *sess)
{
	struct unload_region *r;
	unsigned long idx;

	unload_pairs_release(sess);
	mutex_lock(&sess->lock);
	WRITE_ONCE(sess->dead, true);
	unload_qps_remove(sess, NULL);
	mutex_unlock(&sess->lock);

	/* Unpublish every region, then wait for its copies and unpin it. */
	xa_for_each(&sess->region_ids, idx, r) {
		r = unload_region_take(sess, idx);
		if (r)
			unload_forget_region(r);	/* the process's exit destroys the MR next */
	}
	unload_arenas_release(sess);
	unload_session_unpublish(sess);
	/* Off the list: no forget walks its pairs now, and no submission can come. */
	unload_pairs_free(sess);
	/* Its registrations were uncharged as they went, above (dead: no new ones). */
	unload_user_uncharge(sess->user, UNLOAD_USER_SESSIONS);
	unload_session_put(sess);
}
