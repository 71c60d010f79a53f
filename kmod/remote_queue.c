// SPDX-License-Identifier: GPL-2.0
/*
 * Remote writes submitted without waiting (UNLOAD_URING_REMOTE, docs/design.md, "A remote
 * write's walk"): each is an io_uring command, checked and read in at issue by remote.c in
 * the submitter's context, then queued behind the earlier ones of its sender QP. The
 * queue's head is posted on the channel from the submitter's own issue when it can go at
 * once, else by the queue's worker, which may wait (to connect, for room); nobody sleeps
 * for its verdict: the channel's completion handling completes the command through
 * io_uring with it (unload_rq_answered) and hands the queue's next write to the worker.
 *
 * One write per QP on the wire keeps what the target relies on (its writes arrive in order,
 * and a refusal is seen before the next is sent) and what the NIC does after a failure: the
 * rest of the epoch is cancelled unsent (uapi/unload.h), so the submitter can hand the
 * failed write and those behind it to the NIC in order.
 */
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>

#include "compat.h"
#include "unload_kmod.h"

/* One sender QP's queued writes (sess->remote_queues). */
struct unload_rq {
	struct unload_session *sess;	/* which outlives it: freed at the session's close */
	struct work_struct work;	/* posts the queue's writes when that may wait */
	spinlock_t lock;		/* guards jobs, running, failed and failed_epoch; _bh:
					 * a verdict comes from the channel's softirq */
	struct list_head jobs;		/* struct unload_rq_job.node, oldest first */
	bool running;			/* someone owns the head: posting it, its verdict
					 * awaited, or the work queued; a new job waits */
	bool failed;			/* a write of failed_epoch was not placed */
	u32 failed_epoch;
};

/* One queued write: a prepared message, or a verdict reached at issue (msg.msg NULL). */
struct unload_rq_job {
	struct list_head node;
	struct io_uring_cmd *ioucmd;
	u32 qpn, handle;		/* its sender QP's registration, as at issue */
	u32 epoch;
	int result;			/* the verdict at issue, when nothing is to be sent */
	u32 bytes;			/* its share of sess->remote_queued_bytes */
	struct unload_remote_msg msg;
	struct unload_rq *q;		/* its queue, while its verdict is awaited */
};

static struct workqueue_struct *unload_rq_wq;

/* The command's result, kept in its free area until the submitter's task posts it. */
static void unload_rq_post(struct io_uring_cmd *ioucmd, unsigned int issue_flags)
{
	unload_uring_cmd_done(ioucmd, *(int *)ioucmd->pdu, issue_flags);
}

/*
 * The CQE is posted from the submitter's task (as drivers complete commands from other
 * contexts): io_uring may require it of a ring set up for a single issuer.
 */
static void unload_rq_complete(struct unload_session *sess, struct unload_rq_job *job,
			       int result)
{
	struct io_uring_cmd *ioucmd = job->ioucmd;

	BUILD_BUG_ON(sizeof(ioucmd->pdu) < sizeof(int));
	atomic_dec(&sess->remote_queued);
	atomic64_sub(job->bytes, &sess->remote_queued_bytes);
	kvfree(job->msg.msg);
	kfree(job);
	*(int *)ioucmd->pdu = result;
	io_uring_cmd_complete_in_task(ioucmd, unload_rq_post);
}

/*
 * Is the submitter's process going (exit, exec, a fatal signal)? Its queued writes then go
 * unsent: each would wait on the network (up to its QP's ACK timeout, or a connect's), and
 * the exit waits for every command, so 1024 of them could hold it for hours. The NIC flushes
 * a dying process's requests as its QPs are destroyed; here they complete -ECANCELED.
 */
static bool unload_rq_owner_going(struct unload_session *sess)
{
	struct task_struct *t;
	bool going = true;

	rcu_read_lock();
	t = pid_task(sess->owner, PIDTYPE_TGID);
	if (t)
		going = (READ_ONCE(t->signal->flags) & SIGNAL_GROUP_EXIT) ||
			READ_ONCE(t->signal->group_exec_task) || fatal_signal_pending(t);
	rcu_read_unlock();
	return going;
}

/*
 * Is job's sender QP still the one registered at issue? Destroyed (unregistered, or a new
 * QP of that number since), its unsent writes are flushed, as a NIC flushes a destroyed
 * QP's requests: none may land after the program was told the QP is gone.
 */
static bool unload_rq_sender_gone(struct unload_session *sess, const struct unload_rq_job *job)
{
	bool gone;

	rcu_read_lock();
	gone = !unload_qp_sender(sess, job->qpn, job->handle);
	rcu_read_unlock();
	return gone;
}

/* A write not placed ends its epoch: the rest of it is cancelled (unload_rq_next). */
static void unload_rq_failed(struct unload_rq *q, const struct unload_rq_job *job, int result)
{
	lockdep_assert_held(&q->lock);
	if (result) {
		q->failed = true;
		q->failed_epoch = job->epoch;
	}
}

/*
 * The verdict of the write at q's head, from the channel's completion handling or from
 * whatever took the channel down: its command completed, the queue's next write handed
 * to the worker (this context may not wait, nor take the channel list's lock: the
 * channel's end may hold it). q is touched only before the command completes: its last
 * completion may let the session, and q with it, go.
 */
static void unload_rq_answered(struct unload_remote_msg *m, u32 deny, int result)
{
	struct unload_rq_job *job = container_of(m, struct unload_rq_job, msg);
	struct unload_rq *q = job->q;
	struct unload_session *sess = q->sess;

	if (deny)
		atomic64_inc(&unload_remote_denied);
	spin_lock_bh(&q->lock);
	unload_rq_failed(q, job, result);
	if (list_empty(&q->jobs))
		q->running = false;
	else
		queue_work(unload_rq_wq, &q->work);
	spin_unlock_bh(&q->lock);
	unload_rq_complete(sess, job, result);
}

/*
 * Posts q's writes in order, from its head, until one is in flight (its verdict then
 * continues the queue) or none is left; the caller owns the head (q->running). A write not
 * placed ends its epoch: the writes of that epoch behind it are cancelled, as the NIC
 * flushes a QP's requests after an error, and a write of a later epoch starts afresh.
 * Once the submitter's process is going, or the QP is destroyed, nothing more of it is
 * sent: the write on the wire is all that may still land. Not may_wait (the submitter's
 * issue): a write that cannot go at once is left at the head for the worker.
 */
static void unload_rq_next(struct unload_rq *q, bool may_wait)
{
	struct unload_rq_job *job;
	bool cancel;
	int result, ret;

	for (;;) {
		spin_lock_bh(&q->lock);
		job = list_first_entry_or_null(&q->jobs, struct unload_rq_job, node);
		if (!job) {
			q->running = false;
			spin_unlock_bh(&q->lock);
			return;
		}
		list_del(&job->node);
		cancel = q->failed && q->failed_epoch == job->epoch;
		if (!cancel)
			q->failed = false;
		spin_unlock_bh(&q->lock);

		result = job->result;
		if (!cancel && job->msg.msg &&
		    (unload_rq_owner_going(q->sess) || unload_rq_sender_gone(q->sess, job))) {
			atomic64_inc(&unload_remote_denied);
			result = -ECANCELED;
		} else if (cancel) {
			result = -ECANCELED;
		} else if (job->msg.msg) {
			job->q = q;
			job->msg.done = unload_rq_answered;
			job->msg.result = job->result;
			ret = unload_remote_post(&job->msg, !may_wait);
			if (!ret)
				return;		/* in flight: unload_rq_answered goes on */
			if (ret == -EAGAIN && !may_wait) {
				spin_lock_bh(&q->lock);
				list_add(&job->node, &q->jobs);
				queue_work(unload_rq_wq, &q->work);
				spin_unlock_bh(&q->lock);
				return;
			}
			atomic64_inc(&unload_remote_denied);	/* not sent: the NIC's */
		}
		spin_lock_bh(&q->lock);
		if (!cancel)
			unload_rq_failed(q, job, result);
		spin_unlock_bh(&q->lock);
		unload_rq_complete(q->sess, job, result);
	}
}

static void unload_rq_work(struct work_struct *work)
{
	unload_rq_next(container_of(work, struct unload_rq, work), true);
}

/* The queue of sender QP qpn, created at its first write. NULL: no memory. */
static struct unload_rq *unload_rq_get(struct unload_session *sess, u32 qpn)
{
	struct unload_rq *q, *old;

	q = xa_load(&sess->remote_queues, qpn);
	if (q)
		return q;
	q = kzalloc(sizeof(*q), GFP_KERNEL_ACCOUNT);
	if (!q)
		return NULL;
	q->sess = sess;
	INIT_WORK(&q->work, unload_rq_work);
	spin_lock_init(&q->lock);
	INIT_LIST_HEAD(&q->jobs);
	old = xa_cmpxchg(&sess->remote_queues, qpn, NULL, q, GFP_KERNEL_ACCOUNT);
	if (old) {
		kfree(q);
		return xa_is_err(old) ? NULL : old;
	}
	return q;
}

/* Queue a job behind its QP's earlier ones; posted now if it is the head. */
static void unload_rq_queue(struct unload_rq *q, struct unload_rq_job *job)
{
	bool start;

	spin_lock_bh(&q->lock);
	list_add_tail(&job->node, &q->jobs);
	start = !q->running;
	q->running = true;
	spin_unlock_bh(&q->lock);
	if (start)
		unload_rq_next(q, false);
}

/* A request, its segment list and its inline bytes, read in; -EFAULT if the request is not. */
struct unload_rq_read {
	struct unload_direct_req req;
	struct unload_iov iov[UNLOAD_MAX_IOV];
	u8 inl[UNLOAD_MAX_INLINE];
	struct unload_seg seg[UNLOAD_MAX_IOV];
	bool list_ok, inl_ok;
};

static int unload_rq_read(struct unload_rq_read *rd, u64 ureq)
{
	struct unload_direct_req *req = &rd->req;

	if (copy_from_user(req, u64_to_user_ptr(ureq), sizeof(*req)))
		return -EFAULT;
	rd->list_ok = req->iov_count && req->iov_count <= UNLOAD_MAX_IOV &&
		      !copy_from_user(rd->iov, u64_to_user_ptr(req->iov),
				      array_size(req->iov_count, sizeof(*rd->iov)));
	rd->inl_ok = unload_req_inline(req) &&
		     !copy_from_user(rd->inl, u64_to_user_ptr(req->iov), req->length);
	return 0;
}

/*
 * UNLOAD_URING_REMOTE at issue (main.c): read and check the write, then queue it, or its
 * verdict, behind its QP's earlier ones. -EIOCBQUEUED, or an error io_uring posts as the
 * CQE's res at once (nothing queued: no QP to order it on).
 */
int unload_remote_issue(struct unload_session *sess, struct io_uring_cmd *ioucmd)
{
	const struct unload_uring_remote *p = unload_uring_cmd_payload(ioucmd);
	struct unload_rq_read *rd;
	struct unload_rq_job *job;
	struct unload_rq *q;
	u64 ureq = READ_ONCE(p->req);
	u32 epoch = READ_ONCE(p->epoch);
	const struct unload_qp *known;
	u32 deny, handle;
	bool over;
	int ret;

	if (READ_ONCE(p->reserved))
		return -EINVAL;
	/* The source is the submitter's memory: only the opener's process submits. */
	if (current->mm != sess->mm)
		return -EPERM;
	rd = kmalloc(sizeof(*rd), GFP_KERNEL);
	if (!rd)
		return -ENOMEM;
	ret = unload_rq_read(rd, ureq);
	if (ret)
		goto out_free_read;
	/*
	 * A queue only for a QP the session registered (at most UNLOAD_MAX_QPS of them): any
	 * other number is refused now, with nothing to order it behind, as the synchronous
	 * submission refuses it.
	 */
	rcu_read_lock();
	known = unload_qp_sender(sess, rd->req.qp_num, rd->req.qp_handle);
	handle = known ? known->handle : 0;	/* never 0 for a registration */
	rcu_read_unlock();
	if (!handle) {
		atomic64_inc(&unload_remote_denied);
		ret = -EACCES;
		goto out_free_read;
	}
	ret = -ENOMEM;
	q = unload_rq_get(sess, rd->req.qp_num);
	if (!q)
		goto out_free_read;
	job = kzalloc(sizeof(*job), GFP_KERNEL_ACCOUNT);
	if (!job)
		goto out_free_read;
	job->ioucmd = ioucmd;
	job->qpn = rd->req.qp_num;
	job->handle = handle;
	job->epoch = epoch;
	job->bytes = rd->req.length <= UNLOAD_REMOTE_MAX_LEN ? rd->req.length : 0;
	/* Both counted whatever the verdict: unload_rq_complete takes both back. */
	over = atomic_inc_return(&sess->remote_queued) > UNLOAD_REMOTE_QUEUE_MAX;
	over |= atomic64_add_return(job->bytes, &sess->remote_queued_bytes) >
		UNLOAD_REMOTE_QUEUE_BYTES;
	if (over) {
		job->result = -EBUSY;
	} else {
		deny = unload_remote_prepare(sess, &rd->req, rd->list_ok ? rd->iov : NULL,
					     rd->inl_ok ? rd->inl : NULL, rd->seg, &job->msg,
					     &job->result);
		if (deny)
			atomic64_inc(&unload_remote_denied);
	}
	kfree(rd);
	unload_rq_queue(q, job);
	return -EIOCBQUEUED;

out_free_read:
	kfree(rd);
	return ret;
}

/* The session's close: every command completed (each held the file), so only the queues. */
void unload_remote_queues_free(struct unload_session *sess)
{
	struct unload_rq *q;
	unsigned long qpn;

	xa_for_each(&sess->remote_queues, qpn, q) {
		flush_work(&q->work);	/* a worker may still be returning from its last */
		WARN_ON_ONCE(!list_empty(&q->jobs));
		kfree(q);
	}
	xa_destroy(&sess->remote_queues);
}

int unload_remote_queue_init(void)
{
	/*
	 * Its workers wait on the network: a queue of their own, not the channel's. Unbound:
	 * a per-CPU worker ran on the submitter's CPU, which the program busy-polls (one QP's
	 * ib_write_bw went 0.59x the waiting submission in the sandbox, 0.88x unbound).
	 */
	unload_rq_wq = alloc_workqueue("unload_remote", WQ_UNBOUND, 0);
	return unload_rq_wq ? 0 : -ENOMEM;
}

void unload_remote_queue_exit(void)
{
	destroy_workqueue(unload_rq_wq);
}
