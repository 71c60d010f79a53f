// SPDX-License-Identifier: GPL-2.0
/*
 * Sessions, one per open of /dev/unload: the object (its references, the opener's
 * identity and mm), the list of live sessions, the module's own counters and the folding
 * of the sessions' counters pages into the statistics (the memlock charge is memlock.c's).
 * What a session holds is opened and closed, in order, by lifecycle.c.
 */
#include <linux/capability.h>
#include <linux/hashtable.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/vmalloc.h>

#include "unload_kmod.h"

/* Guards unload_sessions, every session's snap[] and unload_folded_base[]. */
DEFINE_MUTEX(unload_sessions_lock);
LIST_HEAD(unload_sessions);
u64 unload_folded_base[UNLOAD_NR_FOLDED];	/* closed sessions since the last reset */

static atomic64_t unload_next_session_id = ATOMIC64_INIT(0);

/* The module's own counters, shown under /sys/kernel/unload/stats/ (sysfs.c). */
atomic64_t unload_denied[UNLOAD_DENY_COUNT];
atomic64_t unload_direct_submissions;
atomic64_t unload_pairs_resolved;
atomic64_t unload_mr_probes;
atomic_t unload_nr_sessions;

/* --- statistics folding ---------------------------------------------------------- */

static u64 unload_counter_read(struct unload_session *sess, unsigned int idx)
{
	const u64 *c = (const u64 *)sess->counters;

	/* The direct path's counts are the module's own, kept out of userspace's reach. */
	if (idx == UNLOAD_FOLD_WRITES + UNLOAD_PATH_DIRECT)
		return atomic64_read(&sess->direct_writes);
	if (idx == UNLOAD_FOLD_BYTES + UNLOAD_PATH_DIRECT)
		return atomic64_read(&sess->direct_bytes);
	/* The page's direct fields: what its process placed through mappings, claimed. */
	if (idx == UNLOAD_FOLD_MAPPED_WRITES)
		return READ_ONCE(c[UNLOAD_FOLD_WRITES + UNLOAD_PATH_DIRECT]);
	if (idx == UNLOAD_FOLD_MAPPED_BYTES)
		return READ_ONCE(c[UNLOAD_FOLD_BYTES + UNLOAD_PATH_DIRECT]);
	/* writes[5], bytes[5], fences, why_not[] are laid out in fold order. */
	BUILD_BUG_ON(UNLOAD_MAX_QPS > PAGE_SIZE);	/* a byte each in the busy page */
	BUILD_BUG_ON(offsetof(struct unload_counters, why_not) != UNLOAD_FOLD_WHY * sizeof(u64));
	return READ_ONCE(c[idx]);
}

u64 unload_folded_read(unsigned int idx)
{
	struct unload_session *sess;
	u64 sum;

	mutex_lock(&unload_sessions_lock);
	sum = unload_folded_base[idx];
	list_for_each_entry(sess, &unload_sessions, node)
		sum += unload_counter_read(sess, idx) - sess->snap[idx];
	mutex_unlock(&unload_sessions_lock);
	return sum;
}

void unload_folded_reset(void)
{
	struct unload_session *sess;
	unsigned int i;

	mutex_lock(&unload_sessions_lock);
	for (i = 0; i < UNLOAD_NR_FOLDED; i++)
		unload_folded_base[i] = 0;
	list_for_each_entry(sess, &unload_sessions, node)
		for (i = 0; i < UNLOAD_NR_FOLDED; i++)
			sess->snap[i] = unload_counter_read(sess, i);
	mutex_unlock(&unload_sessions_lock);
}

/* --- sessions ----------------------------------------------------------------------- */

static void unload_session_free_rcu(struct rcu_head *head)
{
	kmem_cache_free(unload_session_cache,
			container_of(head, struct unload_session, rcu));
}

/*
 * The status words' pages, each charged to the opener, and one kernel view of them for the
 * module's stores (mappings.c). Process context: vmap may sleep.
 */
static int unload_status_alloc(struct unload_session *sess)
{
	unsigned int i;

	for (i = 0; i < UNLOAD_STATUS_PAGES; i++) {
		sess->status_pages[i] = alloc_page(GFP_KERNEL_ACCOUNT | __GFP_ZERO);
		if (!sess->status_pages[i])
			goto err_put_pages;
	}
	sess->status = vmap(sess->status_pages, UNLOAD_STATUS_PAGES, VM_MAP, PAGE_KERNEL);
	if (!sess->status)
		goto err_put_pages;
	return 0;

err_put_pages:
	while (i--)
		put_page(sess->status_pages[i]);
	return -ENOMEM;
}

static void unload_status_free(struct unload_session *sess)
{
	unsigned int i;

	vunmap(sess->status);
	for (i = 0; i < UNLOAD_STATUS_PAGES; i++)
		put_page(sess->status_pages[i]);
}

static void unload_session_destroy(struct kref *ref)
{
	struct unload_session *sess = container_of(ref, struct unload_session, ref);

	put_page(sess->counters_page);
	unload_status_free(sess);
	put_page(sess->busy_page);
	unload_acct_put(sess->acct);
	unload_user_put(sess->user);
	mmdrop(sess->mm);
	put_cred(sess->cred);
	put_pid(sess->owner);
	xa_destroy(&sess->region_ids);
	xa_destroy(&sess->arenas);
	/* Peer lookups may still be reading sess->ref under RCU. */
	call_rcu(&sess->rcu, unload_session_free_rcu);
}

void unload_session_put(struct unload_session *sess)
{
	kref_put(&sess->ref, unload_session_destroy);
}

/*
 * A session for the opener of file, not yet published: its pairs are set up by the
 * caller before unload_session_publish makes it visible to every walk of the list.
 */
struct unload_session *unload_session_alloc(struct file *file)
{
	struct unload_session *sess;

	if (!current->mm)
		return ERR_PTR(-EINVAL);
	sess = kmem_cache_zalloc(unload_session_cache, GFP_KERNEL_ACCOUNT);
	if (!sess)
		return ERR_PTR(-ENOMEM);
	sess->acct = unload_acct_get(current->mm);
	if (!sess->acct)
		goto err_free_session;
	/* The opener's euid, whoever calls later (a child after fork included). */
	sess->user = unload_user_get(file->f_cred->euid);
	if (!sess->user)
		goto err_put_acct;
	sess->counters_page = alloc_page(GFP_KERNEL_ACCOUNT | __GFP_ZERO);
	if (!sess->counters_page)
		goto err_put_user;
	sess->counters = page_address(sess->counters_page);
	if (unload_status_alloc(sess))
		goto err_free_counters;
	sess->busy_page = alloc_page(GFP_KERNEL_ACCOUNT);
	if (!sess->busy_page)
		goto err_free_status;
	sess->busy = page_address(sess->busy_page);
	memset(sess->busy, 1, PAGE_SIZE);	/* no QP's byte is quiet until its shim says so */
	kref_init(&sess->ref);
	mutex_init(&sess->lock);
	INIT_LIST_HEAD(&sess->qps);
	xa_init_flags(&sess->region_ids, XA_FLAGS_ALLOC1);
	hash_init(sess->targets);
	hash_init(sess->sources);
	xa_init_flags(&sess->arenas, XA_FLAGS_ALLOC);
	xa_init(&sess->remote_queues);
	atomic_set(&sess->remote_queued, 0);
	atomic64_set(&sess->remote_queued_bytes, 0);
	atomic64_set(&sess->direct_writes, 0);
	atomic64_set(&sess->direct_bytes, 0);
	sess->id = atomic64_inc_return(&unload_next_session_id);
	sess->owner = get_pid(task_tgid(current));
	sess->cred = get_cred(file->f_cred);
	/* Decided by the opener's credentials, not by whoever calls later. */
	sess->ipc_lock = file_ns_capable(file, &init_user_ns, CAP_IPC_LOCK);
	/*
	 * The per-user bounds keep one user from crowding the others out; the admin who sets
	 * them could raise them anyway, and lowering them for users must not lock out root's
	 * own tools (unloadctl, services under the shim). Root is counted, not bounded.
	 */
	sess->user_bounded = !file_ns_capable(file, &init_user_ns, CAP_SYS_ADMIN);
	sess->mm = current->mm;
	mmgrab(sess->mm);
	return sess;

err_free_status:
	unload_status_free(sess);
err_free_counters:
	put_page(sess->counters_page);
err_put_user:
	unload_user_put(sess->user);
err_put_acct:
	unload_acct_put(sess->acct);
err_free_session:
	kmem_cache_free(unload_session_cache, sess);
	return ERR_PTR(-ENOMEM);
}

void unload_session_publish(struct unload_session *sess)
{
	mutex_lock(&unload_sessions_lock);
	list_add_tail(&sess->node, &unload_sessions);
	mutex_unlock(&unload_sessions_lock);
	atomic_inc(&unload_nr_sessions);
}

/* Fold sess's counters into the closed sessions' and take it off the list. */
void unload_session_unpublish(struct unload_session *sess)
{
	unsigned int i;

	mutex_lock(&unload_sessions_lock);
	for (i = 0; i < UNLOAD_NR_FOLDED; i++)
		unload_folded_base[i] += unload_counter_read(sess, i) - sess->snap[i];
	list_del(&sess->node);
	mutex_unlock(&unload_sessions_lock);
	atomic_dec(&unload_nr_sessions);
}
