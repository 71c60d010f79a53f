// SPDX-License-Identifier: GPL-2.0
/*
 * UNLOAD_IOC_LIST_SESSIONS: the live sessions, for tools (unloadctl ps). What a caller
 * sees is decided by the credentials of whoever opened its file, as every other check
 * of the module is.
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/pid_namespace.h>
#include <linux/sched.h>
#include <linux/sched/task.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/uidgid.h>

#include "unload_kmod.h"

/* Root (CAP_SYS_ADMIN at open) sees every session; anyone else the ones of its euid. */
static bool unload_list_visible(struct file *file, bool admin, struct unload_session *sess)
{
	return admin || uid_eq(sess->cred->euid, file->f_cred->euid);
}

/* One entry; the caller holds unload_sessions_lock, so sess stays on the list. */
static void unload_list_fill(struct unload_session *sess, struct file *file, pid_t pid,
			     struct unload_session_info *info)
{
	char comm[TASK_COMM_LEN] = "";
	struct unload_arena_obj *a;
	struct unload_region *r;
	struct task_struct *task;
	unsigned long idx, pages;
	unsigned int i;

	BUILD_BUG_ON(UNLOAD_COMM_LEN != TASK_COMM_LEN);
	info->session_id = sess->id;
	info->pid = pid;
	info->uid = from_kuid_munged(file->f_cred->user_ns, sess->cred->euid);
	task = get_pid_task(sess->owner, PIDTYPE_TGID);
	if (task) {
		get_task_comm(comm, task);
		put_task_struct(task);
	}
	memcpy(info->comm, comm, sizeof(info->comm));

	/*
	 * The offload, inline and stage counts and fences are the process's own report on
	 * its counters page: shown, never relied on. Direct is the module's count.
	 */
	for (i = 0; i < UNLOAD_PATH_COUNT; i++) {
		info->writes[i] = READ_ONCE(sess->counters->writes[i]);
		info->bytes[i] = READ_ONCE(sess->counters->bytes[i]);
	}
	info->writes[UNLOAD_PATH_DIRECT] = atomic64_read(&sess->direct_writes);
	info->bytes[UNLOAD_PATH_DIRECT] = atomic64_read(&sess->direct_bytes);
	info->fences = READ_ONCE(sess->counters->fences);

	mutex_lock(&sess->lock);
	info->qps = sess->nr_qps;
	pages = sess->region_pages;
	xa_for_each(&sess->region_ids, idx, r)
		info->regions++;	/* at most UNLOAD_MAX_REGIONS: no overflow */
	xa_for_each(&sess->arenas, idx, a)
		pages += a->npages;	/* bounded by what the session could pin */
	mutex_unlock(&sess->lock);
	info->pinned_pages = pages;
}

static int unload_list_copy_in(struct unload_session_list *req, void __user *arg)
{
	if (copy_from_user(req, arg, sizeof(*req)))
		return -EFAULT;
	if (req->flags || req->filled || req->total || req->reserved0 || req->reserved[0] ||
	    req->reserved[1])
		return -EINVAL;
	if (req->entry_size != sizeof(struct unload_session_info) ||
	    req->count > UNLOAD_MAX_LIST_SESSIONS)
		return -EINVAL;
	return 0;
}

long unload_ioctl_list_sessions(struct unload_session *self, struct file *file,
				void __user *arg)
{
	struct pid_namespace *pid_ns = task_active_pid_ns(current);
	struct unload_session_info *infos = NULL;
	struct unload_session_list req;
	struct unload_session *sess;
	u32 filled = 0, total = 0;
	bool admin;
	long ret;

	ret = unload_list_copy_in(&req, arg);
	if (ret)
		return ret;
	if (req.count) {
		infos = kvcalloc(req.count, sizeof(*infos), GFP_KERNEL);
		if (!infos)
			return -ENOMEM;
	}
	admin = file_ns_capable(file, &init_user_ns, CAP_SYS_ADMIN);

	/*
	 * Filled under the lock, copied out after it: a fault in copy_to_user may take
	 * mmap_lock, and unload_arena_mmap takes sess->lock under mmap_lock.
	 */
	mutex_lock(&unload_sessions_lock);
	list_for_each_entry(sess, &unload_sessions, node) {
		pid_t pid;

		if (sess == self || !unload_list_visible(file, admin, sess))
			continue;
		pid = pid_nr_ns(sess->owner, pid_ns);
		if (!pid)
			continue;	/* its process is outside the caller's namespace */
		if (filled < req.count)
			unload_list_fill(sess, file, pid, &infos[filled++]);
		total++;	/* at most the number of open files: fits */
	}
	mutex_unlock(&unload_sessions_lock);

	req.filled = filled;
	req.total = total;
	if (filled && copy_to_user(u64_to_user_ptr(req.sessions), infos,
				   array_size(filled, sizeof(*infos))))
		ret = -EFAULT;
	else if (copy_to_user(arg, &req, sizeof(req)))
		ret = -EFAULT;
	kvfree(infos);
	return ret;
}
