// SPDX-License-Identifier: GPL-2.0
/*
 * What comes and goes: a session's open and close, a QP's registration and
 * unregistration, a region's deregistration, a device's removal. Every invalidation is
 * here, in one order: what goes is unpublished first (a QP unhashed, a region off its
 * session's tables, a device off the table), so no request or resolution takes it
 * again; then the pairs keeping references to it forget them (they would hold up the
 * RDMA core's destroy of the QP or MR); then the mappings showing it are revoked; then
 * QPs, and regions last (their retirement waits for the copies in flight and unpins).
 * Each object's own file does the rest: registry.c, regions.c, pairs.c, mappings.c,
 * arenas.c, session.c. A mapping's grant is here too: it is what comes.
 */
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/pid.h>
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

/*
 * Forget region r, which its session has unpublished: its mappings (before anything of it
 * is let go), its MR in pairs, then its pins.
 */
static void unload_forget_region(struct unload_region *r)
{
	unload_maps_revoke_region(r);
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

/* A REG_QP-shaped request read in and checked, with its device held (the caller puts it). */
static long unload_qp_req_in(struct unload_qp_reg *req, void __user *arg, struct ib_device **dev)
{
	long ret = unload_qp_reg_copy_in(req, arg);

	if (ret)
		return ret;
	*dev = ib_device_get_by_name(req->ibdev, RDMA_DRIVER_UNKNOWN);
	return *dev ? 0 : -ENODEV;
}

long unload_ioctl_reg_qp(struct unload_session *sess, void __user *arg)
{
	struct unload_qp_reg req;
	struct ib_device *dev;
	long ret;

	ret = unload_qp_req_in(&req, arg, &dev);
	if (ret)
		return ret;
	ret = unload_qp_register(sess, dev, &req);
	if (ret)
		goto out_put_device;
	/* Registered again after a state change: what its mappings were granted on is gone. */
	unload_maps_revoke_qp(dev, req.qp_num);
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

	ret = unload_qp_req_in(&req, arg, &dev);
	if (ret)
		return ret;
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
		unload_maps_revoke_qp(dev, req.qp_num);
	}
	ib_device_put(dev);
	return ret;
}

long unload_ioctl_qp_changed(struct unload_session *sess, void __user *arg)
{
	struct unload_qp_reg req;
	struct ib_device *dev;
	long ret;

	ret = unload_qp_req_in(&req, arg, &dev);
	if (ret)
		return ret;
	ret = -ENOENT;
	if (unload_qp_changed(sess, dev, req.qp_num)) {
		/* What its mappings were granted on may be gone, as after a REG_QP. */
		unload_maps_revoke_qp(dev, req.qp_num);
		ret = 0;
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
	unload_maps_revoke_device(dev);	/* no grant on dev follows: it is not live */
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

/* --- mappings --------------------------------------------------------------------- */

static bool unload_map_in_zero(const struct unload_map *m)
{
	return !m->peer_pid && !m->slot && !m->cookie && !m->iova && !m->length &&
	       !m->mmap_offset && !m->mmap_length && !m->page_offset && !m->flags &&
	       !m->busy_slot && !m->busy_offset && !m->reserved[0];
}

/*
 * Would a responder NIC take a write to region r of pr's peer (its MR live, PD, access)?
 * Its MR, with a restrack reference, or NULL.
 */
static struct ib_mr *unload_map_target(const struct unload_pair *pr, struct unload_region *r)
{
	struct ib_mr *mr = unload_region_mr_get(pr->peer, r, pr->peer_dev);

	if (mr && (mr->pd != pr->p.qp->pd || !(r->access & UNLOAD_ACCESS_REMOTE_WRITE))) {
		unload_region_mr_put(mr);
		mr = NULL;
	}
	return mr;
}

long unload_ioctl_map(struct unload_session *sess, struct file *file, void __user *arg)
{
	struct unload_pair_hold hold = { .slot = NULL };
	const struct unload_pair *pr;
	struct unload_region *r;
	struct unload_map req;
	struct file *mem;
	struct ib_mr *mr;
	int mem_err;
	u32 deny;
	long ret;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (!unload_map_in_zero(&req))
		return -EINVAL;
	/* Mapped into the opener's process, whose rights over the peer are checked. */
	if (current->mm != sess->mm)
		return -EPERM;

	/*
	 * The caller's proof of ptrace rights, taken before the pair's slot is locked: a file
	 * reference and pointer compares, no path looked up and no user memory touched while
	 * the slot, which every unregistration waits for, is held.
	 */
	mem = unload_mem_file_get(req.mem_fd, &mem_err);
	pr = unload_pair_hold_check(sess, &hold, req.qp_num, req.qp_handle, &deny);
	if (!pr) {
		ret = -EACCES;
		goto out_put_mem;
	}
	req.peer_pid = pid_vnr(pr->peer->owner);
	ret = mem_err;
	if (!mem)
		goto out_release;
	ret = -EPERM;
	if (!unload_mem_file_of(mem, pr->peer->mm))
		goto out_release;
	ret = -EACCES;
	r = unload_region_find(pr->peer, true, pr->peer_dev, req.rkey);
	if (!r)
		goto out_release;
	mr = unload_map_target(pr, r);
	if (mr) {
		ret = unload_map_grant(sess, file, pr, r, mr, &req);
		if (ret)
			unload_region_mr_put(mr);	/* granted: the mapping's now */
	}
	unload_region_put(r);
out_release:
	unload_pair_hold_release(&hold);
out_put_mem:
	if (mem)
		fput(mem);
	/* Out fields with success, and the peer's pid with -EPERM. */
	if ((!ret || ret == -EPERM) && copy_to_user(arg, &req, sizeof(req))) {
		/* Its caller cannot know the slot, so could never unmap it: no grant. */
		if (!ret)
			unload_map_withdraw(sess, req.slot, req.cookie);
		return -EFAULT;
	}
	return ret;
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
	unload_remote_queues_free(sess);	/* every queued write was completed: idle */
	mutex_lock(&sess->lock);
	WRITE_ONCE(sess->dead, true);	/* its QPs are no longer registered for a grant */
	unload_qps_remove(sess, NULL);
	mutex_unlock(&sess->lock);
	unload_maps_revoke_session(sess);	/* its own, and those of its regions */

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
