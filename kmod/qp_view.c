// SPDX-License-Identifier: GPL-2.0
/*
 * QP views: what the RDMA core says of a QP now (state, destination, access, AV, PSNs),
 * read under a restrack reference that keeps the QP comparable until the view is put.
 */
#include <rdma/ib_cache.h>
#include <rdma/restrack.h>

#include "unload_kmod.h"

void unload_qp_view_put(struct unload_qp_view *v)
{
	if (v->res)
		rdma_restrack_put(v->res);
	memset(v, 0, sizeof(*v));
}

/* The GID at (port, index) of dev, or false. */
static bool unload_gid_at(struct ib_device *dev, u32 port, u32 index, union ib_gid *gid)
{
	return port && !rdma_query_gid(dev, port, index, gid);
}

/*
 * Read v's QP from the RDMA core now: state, destination, access, AV, PSNs and ACK
 * timeout; the AV's source GID from the device's table only when read_gid (the AV
 * changed, or a first reading).
 */
static int unload_qp_view_read(struct unload_qp_view *v, bool read_gid)
{
	struct ib_qp_init_attr init_attr __uninitialized;	/* filled, never read */
	struct ib_qp_attr attr;
	int ret;

	/* attr's fields read below are zeroed, for a driver that leaves some unset. */
	memset(&attr, 0, sizeof(attr));
	ret = ib_query_qp(v->qp, &attr, IB_QP_STATE | IB_QP_DEST_QPN | IB_QP_AV |
			  IB_QP_ACCESS_FLAGS | IB_QP_SQ_PSN | IB_QP_RQ_PSN | IB_QP_TIMEOUT |
			  IB_QP_RETRY_CNT, &init_attr);
	if (ret)
		return ret;
	v->state = attr.qp_state;
	v->sq_psn = attr.sq_psn & UNLOAD_PSN_MASK;
	v->rq_psn = attr.rq_psn & UNLOAD_PSN_MASK;
	v->dest_qpn = attr.dest_qp_num;
	v->access = attr.qp_access_flags;
	v->timeout = attr.timeout;
	v->retry_cnt = attr.retry_cnt;
	if (rdma_ah_get_ah_flags(&attr.ah_attr) & IB_AH_GRH) {
		const struct ib_global_route *grh = rdma_ah_read_grh(&attr.ah_attr);
		u32 port = rdma_ah_get_port_num(&attr.ah_attr);

		v->port = port ? port : v->qp->port;
		v->sgid_index = grh->sgid_index;
		v->dgid = grh->dgid;
		if (read_gid)
			v->has_grh = unload_gid_at(v->qp->device, v->port, v->sgid_index,
						   &v->sgid);
	} else {
		v->has_grh = false;
	}
	return 0;
}

/*
 * A view of QP qpn of dev, if it is a live user QP created by a thread of owner's
 * process: -ESRCH when there is no such QP or it is being destroyed, -EPERM when it is
 * a kernel QP or another process's. The driver is queried only after these checks: a
 * QP nobody registered it for is never handed to it.
 */
int unload_qp_view_get(struct unload_session *owner, struct ib_device *dev, u32 qpn,
		       struct unload_qp_view *v)
{
	struct rdma_restrack_entry *res;
	struct ib_qp *qp;
	int ret;

	memset(v, 0, sizeof(*v));
	res = rdma_restrack_get_byid(dev, RDMA_RESTRACK_QP, qpn);
	if (IS_ERR(res))
		return -ESRCH;
	qp = container_of(res, struct ib_qp, res);
	ret = -EPERM;
	if (rdma_is_kernel_res(res) || !qp->uobject || !res->task ||
	    task_tgid(res->task) != owner->owner)
		goto err_put;
	ret = -ESRCH;
	if (!READ_ONCE(res->valid))
		goto err_put;
	v->res = res;
	v->qp = qp;
	v->type = qp->qp_type;
	ret = unload_qp_view_read(v, true);
	if (ret)
		unload_qp_view_put(v);
	return ret;

err_put:
	rdma_restrack_put(res);
	return ret;
}

/*
 * Is v's QP being drained for its destroy? The RDMA core drains a QP before its driver
 * destroys it (rdma_restrack_begin_del: its id stops resolving, then the destroy waits
 * for every reference, v's included) and clears res->valid only after; so a reference
 * kept across submissions must be let go when the id no longer names it.
 */
bool unload_qp_view_draining(const struct unload_qp_view *v)
{
	struct rdma_restrack_entry *now;

	now = rdma_restrack_get_byid(v->qp->device, RDMA_RESTRACK_QP, v->res->id);
	if (IS_ERR(now))
		return true;
	rdma_restrack_put(now);	/* v holds another reference when now == v->res */
	return now != v->res;
}

/*
 * Read a held view's QP again. *same_av: its AV (destination QPN, destination GID,
 * source GID index, port, GRH) is what it was, so the source GID read then still
 * stands unless the GID table changed (which the caller checks by generation).
 */
int unload_qp_view_reread(struct unload_qp_view *v, bool *same_av)
{
	const struct unload_qp_view was = *v;
	int ret;

	/* Being destroyed: the driver may be freeing its state already. */
	if (!READ_ONCE(v->res->valid)) {
		*same_av = false;
		return -ESRCH;
	}
	ret = unload_qp_view_read(v, false);
	*same_av = !ret && v->has_grh == was.has_grh && v->dest_qpn == was.dest_qpn &&
		   v->port == was.port && v->sgid_index == was.sgid_index &&
		   !memcmp(&v->dgid, &was.dgid, sizeof(v->dgid));
	return ret;
}
