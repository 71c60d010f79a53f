// SPDX-License-Identifier: GPL-2.0
/*
 * /sys/kernel/unload/: the tunables (published to every process through the control
 * page), stats/ (what the module itself counted) and reported/ (what sessions claim in
 * their counters pages, which their own users write). Documented in docs/sysfs.md.
 */
#include <linux/kobject.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/string.h>
#include <linux/sysfs.h>

#include "unload_kmod.h"
#include "unload_channel.h"

struct unload_control *unload_ctl;

/* Serialises writers of the control page (readers use its sequence counter). */
static DEFINE_MUTEX(unload_tunables_lock);

static struct kobject *unload_kobj;

static const char *const unload_mode_names[UNLOAD_MODE_COUNT] = {
	[UNLOAD_MODE_OFFLOAD] = "offload",
	[UNLOAD_MODE_UNLOAD] = "unload",
	[UNLOAD_MODE_THRESHOLD] = "threshold",
	[UNLOAD_MODE_ADAPTIVE] = "adaptive",
};

/*
 * A numeric tunable and its range: a slot of struct unload_tunables in the control page,
 * or, for the module's own (UNLOAD_MODULE_TUNABLE_RANGES), a word no process maps.
 */
struct unload_tunable_attr {
	struct kobj_attribute kattr;
	size_t offset;		/* offsetof(struct unload_tunables, field) */
	u32 *word;		/* the module's own: its word (offset unused) */
	u32 min;
	u32 max;
	u32 def;		/* the value at load */
};

#define to_tunable(a) container_of(a, struct unload_tunable_attr, kattr)

static u32 *unload_tunable_slot(size_t offset)
{
	return (u32 *)((char *)&unload_ctl->tunables + offset);
}

static u32 *unload_tunable_value(const struct unload_tunable_attr *t)
{
	return t->word ?: unload_tunable_slot(t->offset);
}

/* Publish one new value under the control page's sequence counter. */
static void unload_tunable_publish(size_t offset, u32 val)
{
	mutex_lock(&unload_tunables_lock);
	WRITE_ONCE(unload_ctl->seq, unload_ctl->seq + 1);	/* odd: being written */
	smp_wmb();
	WRITE_ONCE(*unload_tunable_slot(offset), val);
	WRITE_ONCE(unload_ctl->generation, unload_ctl->generation + 1);
	smp_wmb();
	WRITE_ONCE(unload_ctl->seq, unload_ctl->seq + 1);	/* even: stable */
	mutex_unlock(&unload_tunables_lock);
}

static ssize_t tunable_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", READ_ONCE(*unload_tunable_value(to_tunable(attr))));
}

static ssize_t tunable_store(struct kobject *kobj, struct kobj_attribute *attr,
			     const char *buf, size_t count)
{
	struct unload_tunable_attr *t = to_tunable(attr);
	u32 val;

	if (kstrtou32(buf, 10, &val))	/* decimal only, as docs/sysfs.md says */
		return -EINVAL;
	if (val < t->min || val > t->max)
		return -EINVAL;
	if (t->word)
		WRITE_ONCE(*t->word, val);	/* a lone word: its readers need no more */
	else
		unload_tunable_publish(t->offset, val);
	return count;
}

static ssize_t mode_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	u32 mode = READ_ONCE(unload_ctl->tunables.mode);

	return sysfs_emit(buf, "%s\n", mode < UNLOAD_MODE_COUNT ? unload_mode_names[mode] : "?");
}

static ssize_t mode_store(struct kobject *kobj, struct kobj_attribute *attr,
			  const char *buf, size_t count)
{
	int mode = sysfs_match_string(unload_mode_names, buf);

	if (mode < 0)
		return -EINVAL;
	unload_tunable_publish(offsetof(struct unload_tunables, mode), mode);
	return count;
}

#define UNLOAD_TUNABLE(_name, _min, _max, _def)					\
	static struct unload_tunable_attr unload_attr_##_name = {		\
		.kattr = __ATTR(_name, 0644, tunable_show, tunable_store),	\
		.offset = offsetof(struct unload_tunables, _name),		\
		.min = _min, .max = _max, .def = _def,				\
	};

/* Ranges and defaults: the UAPI's list (documented in docs/sysfs.md). */
UNLOAD_TUNABLE_RANGES(UNLOAD_TUNABLE)

#define UNLOAD_MODULE_TUNABLE(_name, _min, _max, _def)				\
	u32 unload_##_name = _def;						\
	static struct unload_tunable_attr unload_attr_##_name = {		\
		.kattr = __ATTR(_name, 0644, tunable_show, tunable_store),	\
		.word = &unload_##_name,					\
		.min = _min, .max = _max, .def = _def,				\
	};

UNLOAD_MODULE_TUNABLE_RANGES(UNLOAD_MODULE_TUNABLE)

static struct kobj_attribute unload_attr_mode = __ATTR(mode, 0644, mode_show, mode_store);

#define UNLOAD_TUNABLE_REF(_name, _min, _max, _def) &unload_attr_##_name,
static struct unload_tunable_attr *const unload_tunables[] = {
	UNLOAD_TUNABLE_RANGES(UNLOAD_TUNABLE_REF)
};

#define UNLOAD_TUNABLE_FILE(_name, _min, _max, _def) &unload_attr_##_name.kattr.attr,
static struct attribute *unload_tunable_attrs[] = {
	&unload_attr_mode.attr,
	UNLOAD_TUNABLE_RANGES(UNLOAD_TUNABLE_FILE)
	UNLOAD_MODULE_TUNABLE_RANGES(UNLOAD_TUNABLE_FILE)
	NULL,
};

static const struct attribute_group unload_tunable_group = {
	.attrs = unload_tunable_attrs,
};

/* --- statistics --------------------------------------------------------------- */

/*
 * A folded statistic: its index in the fold. writes_direct and bytes_direct are the
 * module's own counts (stats/); the others are the sessions' pages (reported/).
 */
struct unload_fold_attr {
	struct kobj_attribute kattr;
	unsigned int idx;
};

static ssize_t fold_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%llu\n",
			  unload_folded_read(container_of(attr, struct unload_fold_attr,
							  kattr)->idx));
}

#define UNLOAD_FOLD(_name, _idx)						\
	static struct unload_fold_attr unload_stat_##_name = {			\
		.kattr = __ATTR(_name, 0444, fold_show, NULL),			\
		.idx = _idx,							\
	}

UNLOAD_FOLD(writes_offload, UNLOAD_FOLD_WRITES + UNLOAD_PATH_OFFLOAD);
UNLOAD_FOLD(writes_inline, UNLOAD_FOLD_WRITES + UNLOAD_PATH_INLINE);
UNLOAD_FOLD(writes_stage, UNLOAD_FOLD_WRITES + UNLOAD_PATH_STAGE);
UNLOAD_FOLD(writes_direct, UNLOAD_FOLD_WRITES + UNLOAD_PATH_DIRECT);
UNLOAD_FOLD(writes_remote, UNLOAD_FOLD_WRITES + UNLOAD_PATH_REMOTE);
UNLOAD_FOLD(bytes_offload, UNLOAD_FOLD_BYTES + UNLOAD_PATH_OFFLOAD);
UNLOAD_FOLD(bytes_inline, UNLOAD_FOLD_BYTES + UNLOAD_PATH_INLINE);
UNLOAD_FOLD(bytes_stage, UNLOAD_FOLD_BYTES + UNLOAD_PATH_STAGE);
UNLOAD_FOLD(bytes_direct, UNLOAD_FOLD_BYTES + UNLOAD_PATH_DIRECT);
UNLOAD_FOLD(bytes_remote, UNLOAD_FOLD_BYTES + UNLOAD_PATH_REMOTE);
UNLOAD_FOLD(fences, UNLOAD_FOLD_FENCES);
UNLOAD_FOLD(writes_mapped, UNLOAD_FOLD_MAPPED_WRITES);
UNLOAD_FOLD(bytes_mapped, UNLOAD_FOLD_MAPPED_BYTES);

/* Why writes left the path their mode prefers (enum unload_why; docs/sysfs.md). */
UNLOAD_FOLD(why_not_not_rc, UNLOAD_FOLD_WHY + UNLOAD_WHY_NOT_RC);
UNLOAD_FOLD(why_not_program_inline, UNLOAD_FOLD_WHY + UNLOAD_WHY_PROGRAM_INLINE);
UNLOAD_FOLD(why_not_path_off, UNLOAD_FOLD_WHY + UNLOAD_WHY_PATH_OFF);
UNLOAD_FOLD(why_not_no_module, UNLOAD_FOLD_WHY + UNLOAD_WHY_NO_MODULE);
UNLOAD_FOLD(why_not_remote_peer, UNLOAD_FOLD_WHY + UNLOAD_WHY_REMOTE_PEER);
UNLOAD_FOLD(why_not_unregistered, UNLOAD_FOLD_WHY + UNLOAD_WHY_UNREGISTERED);
UNLOAD_FOLD(why_not_unpaired, UNLOAD_FOLD_WHY + UNLOAD_WHY_UNPAIRED);
UNLOAD_FOLD(why_not_poisoned, UNLOAD_FOLD_WHY + UNLOAD_WHY_POISONED);
UNLOAD_FOLD(why_not_qp_error, UNLOAD_FOLD_WHY + UNLOAD_WHY_QP_ERROR);
UNLOAD_FOLD(why_not_cq, UNLOAD_FOLD_WHY + UNLOAD_WHY_CQ);
UNLOAD_FOLD(why_not_queue, UNLOAD_FOLD_WHY + UNLOAD_WHY_QUEUE);
UNLOAD_FOLD(why_not_fence, UNLOAD_FOLD_WHY + UNLOAD_WHY_FENCE);
UNLOAD_FOLD(why_not_size, UNLOAD_FOLD_WHY + UNLOAD_WHY_SIZE);
UNLOAD_FOLD(why_not_region, UNLOAD_FOLD_WHY + UNLOAD_WHY_REGION);
UNLOAD_FOLD(why_not_no_room, UNLOAD_FOLD_WHY + UNLOAD_WHY_NO_ROOM);
UNLOAD_FOLD(why_not_refused, UNLOAD_FOLD_WHY + UNLOAD_WHY_REFUSED);
UNLOAD_FOLD(why_not_policy, UNLOAD_FOLD_WHY + UNLOAD_WHY_POLICY);
UNLOAD_FOLD(why_not_with_imm, UNLOAD_FOLD_WHY + UNLOAD_WHY_WITH_IMM);
UNLOAD_FOLD(why_not_nic_memory, UNLOAD_FOLD_WHY + UNLOAD_WHY_NIC_MEMORY);
UNLOAD_FOLD(why_not_window, UNLOAD_FOLD_WHY + UNLOAD_WHY_WINDOW);
UNLOAD_FOLD(why_not_cold, UNLOAD_FOLD_WHY + UNLOAD_WHY_COLD);
UNLOAD_FOLD(why_not_exploring, UNLOAD_FOLD_WHY + UNLOAD_WHY_EXPLORING);
UNLOAD_FOLD(why_not_budget, UNLOAD_FOLD_WHY + UNLOAD_WHY_BUDGET);
UNLOAD_FOLD(why_not_cost, UNLOAD_FOLD_WHY + UNLOAD_WHY_COST);
UNLOAD_FOLD(why_not_local_peer, UNLOAD_FOLD_WHY + UNLOAD_WHY_LOCAL_PEER);
UNLOAD_FOLD(why_not_no_channel, UNLOAD_FOLD_WHY + UNLOAD_WHY_NO_CHANNEL);
UNLOAD_FOLD(why_not_no_key, UNLOAD_FOLD_WHY + UNLOAD_WHY_NO_KEY);
UNLOAD_FOLD(why_not_no_mapping, UNLOAD_FOLD_WHY + UNLOAD_WHY_NO_MAPPING);

/*
 * A denial counter: its reason, at the sender (direct_denied_*, unload_denied) or at a
 * remote write's target (remote_refused_*, unload_remote_refused). Root only (0400): the
 * reasons are what a peer must not learn.
 */
struct unload_deny_attr {
	struct kobj_attribute kattr;
	atomic64_t *counts;
	unsigned int reason;
};

static ssize_t deny_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	const struct unload_deny_attr *a = container_of(attr, struct unload_deny_attr, kattr);

	return sysfs_emit(buf, "%lld\n", atomic64_read(&a->counts[a->reason]));
}

/* Every reason a check refuses a write for: X(file suffix, enum unload_deny). */
#define UNLOAD_DENY_REASONS(X)					\
	X(disabled, UNLOAD_DENY_DISABLED)			\
	X(invalid, UNLOAD_DENY_INVALID)				\
	X(qp_unregistered, UNLOAD_DENY_QP_UNREGISTERED)		\
	X(qp_not_owned, UNLOAD_DENY_QP_NOT_OWNED)		\
	X(qp_state, UNLOAD_DENY_QP_STATE)			\
	X(peer_unknown, UNLOAD_DENY_PEER_UNKNOWN)		\
	X(peer_unpaired, UNLOAD_DENY_PEER_UNPAIRED)		\
	X(rkey, UNLOAD_DENY_RKEY)				\
	X(pd, UNLOAD_DENY_PD)					\
	X(access, UNLOAD_DENY_ACCESS)				\
	X(bounds, UNLOAD_DENY_BOUNDS)				\
	X(length, UNLOAD_DENY_LENGTH)				\
	X(fault, UNLOAD_DENY_FAULT)				\
	X(lkey, UNLOAD_DENY_LKEY)				\
	X(source, UNLOAD_DENY_SOURCE)				\
	X(poisoned, UNLOAD_DENY_POISONED)

#define UNLOAD_DENY(_name, _reason)						\
	static struct unload_deny_attr unload_stat_direct_denied_##_name = {	\
		.kattr = __ATTR(direct_denied_##_name, 0400, deny_show, NULL),	\
		.counts = unload_denied, .reason = _reason,			\
	};									\
	static struct unload_deny_attr unload_stat_remote_refused_##_name = {	\
		.kattr = __ATTR(remote_refused_##_name, 0400, deny_show, NULL),	\
		.counts = unload_remote_refused, .reason = _reason,		\
	};
UNLOAD_DENY_REASONS(UNLOAD_DENY)

static ssize_t direct_submissions_show(struct kobject *kobj, struct kobj_attribute *attr,
				       char *buf)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read(&unload_direct_submissions));
}

static ssize_t pairs_resolved_show(struct kobject *kobj, struct kobj_attribute *attr,
				   char *buf)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read(&unload_pairs_resolved));
}

static ssize_t mr_probes_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read(&unload_mr_probes));
}

/* A module-owned count of the remote path, one file each (stats/remote_*). */
#define UNLOAD_REMOTE_COUNT(name, var)							\
static ssize_t name##_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)	\
{											\
	return sysfs_emit(buf, "%lld\n", atomic64_read(&var));				\
}											\
static struct kobj_attribute unload_stat_##name = __ATTR(name, 0444, name##_show, NULL)

UNLOAD_REMOTE_COUNT(remote_placed_writes, unload_remote_placed_writes);
UNLOAD_REMOTE_COUNT(remote_placed_bytes, unload_remote_placed_bytes);
UNLOAD_REMOTE_COUNT(remote_denied, unload_remote_denied);

static ssize_t sessions_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n", atomic_read(&unload_nr_sessions));
}

static ssize_t pinned_pages_show(struct kobject *kobj, struct kobj_attribute *attr,
				 char *buf)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read(&unload_pinned_pages));
}

/*
 * reset: write 1 to zero the counters, reported/'s too (not the gauges sessions and
 * pinned_pages).
 */
static ssize_t reset_store(struct kobject *kobj, struct kobj_attribute *attr,
			   const char *buf, size_t count)
{
	unsigned int i;
	u32 val;

	if (kstrtou32(buf, 10, &val) || val != 1)
		return -EINVAL;
	unload_folded_reset();
	for (i = 0; i < UNLOAD_DENY_COUNT; i++) {
		atomic64_set(&unload_denied[i], 0);
		atomic64_set(&unload_remote_refused[i], 0);
	}
	atomic64_set(&unload_direct_submissions, 0);
	atomic64_set(&unload_pairs_resolved, 0);
	atomic64_set(&unload_mr_probes, 0);
	atomic64_set(&unload_remote_placed_writes, 0);
	atomic64_set(&unload_remote_placed_bytes, 0);
	atomic64_set(&unload_remote_denied, 0);
	return count;
}

static struct kobj_attribute unload_stat_direct_submissions =
	__ATTR(direct_submissions, 0444, direct_submissions_show, NULL);
static struct kobj_attribute unload_stat_pairs_resolved =
	__ATTR(pairs_resolved, 0444, pairs_resolved_show, NULL);
static struct kobj_attribute unload_stat_mr_probes = __ATTR(mr_probes, 0444, mr_probes_show, NULL);
static struct kobj_attribute unload_stat_sessions = __ATTR(sessions, 0444, sessions_show, NULL);
static struct kobj_attribute unload_stat_pinned_pages =
	__ATTR(pinned_pages, 0444, pinned_pages_show, NULL);
static struct kobj_attribute unload_stat_reset = __ATTR(reset, 0200, NULL, reset_store);

/*
 * What the shims report: each session's counters page, which its process writes. A
 * user can inflate these; they are claims, never measurements (docs/security.md).
 */
static struct attribute *unload_reported_attrs[] = {
	&unload_stat_writes_offload.kattr.attr,
	&unload_stat_writes_inline.kattr.attr,
	&unload_stat_writes_stage.kattr.attr,
	&unload_stat_writes_remote.kattr.attr,
	&unload_stat_bytes_offload.kattr.attr,
	&unload_stat_bytes_inline.kattr.attr,
	&unload_stat_bytes_stage.kattr.attr,
	&unload_stat_bytes_remote.kattr.attr,
	&unload_stat_writes_mapped.kattr.attr,
	&unload_stat_bytes_mapped.kattr.attr,
	&unload_stat_fences.kattr.attr,
	&unload_stat_why_not_not_rc.kattr.attr,
	&unload_stat_why_not_program_inline.kattr.attr,
	&unload_stat_why_not_path_off.kattr.attr,
	&unload_stat_why_not_no_module.kattr.attr,
	&unload_stat_why_not_remote_peer.kattr.attr,
	&unload_stat_why_not_unregistered.kattr.attr,
	&unload_stat_why_not_unpaired.kattr.attr,
	&unload_stat_why_not_poisoned.kattr.attr,
	&unload_stat_why_not_qp_error.kattr.attr,
	&unload_stat_why_not_cq.kattr.attr,
	&unload_stat_why_not_queue.kattr.attr,
	&unload_stat_why_not_fence.kattr.attr,
	&unload_stat_why_not_size.kattr.attr,
	&unload_stat_why_not_region.kattr.attr,
	&unload_stat_why_not_no_room.kattr.attr,
	&unload_stat_why_not_refused.kattr.attr,
	&unload_stat_why_not_policy.kattr.attr,
	&unload_stat_why_not_with_imm.kattr.attr,
	&unload_stat_why_not_nic_memory.kattr.attr,
	&unload_stat_why_not_window.kattr.attr,
	&unload_stat_why_not_cold.kattr.attr,
	&unload_stat_why_not_exploring.kattr.attr,
	&unload_stat_why_not_budget.kattr.attr,
	&unload_stat_why_not_cost.kattr.attr,
	&unload_stat_why_not_local_peer.kattr.attr,
	&unload_stat_why_not_no_channel.kattr.attr,
	&unload_stat_why_not_no_key.kattr.attr,
	&unload_stat_why_not_no_mapping.kattr.attr,
	NULL,
};

static const struct attribute_group unload_reported_group = {
	.name = "reported",
	.attrs = unload_reported_attrs,
};

/* The module's own counts: nothing a session writes reaches them. */
#define UNLOAD_DENY_FILES(_name, _reason)		\
	&unload_stat_direct_denied_##_name.kattr.attr,	\
	&unload_stat_remote_refused_##_name.kattr.attr,

static struct attribute *unload_stat_attrs[] = {
	&unload_stat_writes_direct.kattr.attr,
	&unload_stat_bytes_direct.kattr.attr,
	UNLOAD_DENY_REASONS(UNLOAD_DENY_FILES)
	&unload_stat_direct_submissions.attr,
	&unload_stat_pairs_resolved.attr,
	&unload_stat_mr_probes.attr,
	&unload_stat_remote_placed_writes.attr,
	&unload_stat_remote_placed_bytes.attr,
	&unload_stat_remote_denied.attr,
	&unload_stat_sessions.attr,
	&unload_stat_pinned_pages.attr,
	&unload_stat_reset.attr,
	NULL,
};

static const struct attribute_group unload_stat_group = {
	.name = "stats",
	.attrs = unload_stat_attrs,
};

/* The channel's counts (unload_channel.h): the module's own, one value per file. */
struct unload_chan_stat_attr {
	struct kobj_attribute kattr;
	enum unload_chan_stat stat;
};

static ssize_t chan_stat_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	const struct unload_chan_stat_attr *a = container_of(attr, struct unload_chan_stat_attr, kattr);

	return sysfs_emit(buf, "%lld\n", atomic64_read(&unload_chan_stats[a->stat]));
}

#define UNLOAD_CHAN_STAT(_name, _stat)						\
	static struct unload_chan_stat_attr unload_chan_stat_##_name = {		\
		.kattr = __ATTR(_name, 0444, chan_stat_show, NULL),			\
		.stat = _stat,							\
	}
UNLOAD_CHAN_STAT(opened, UNLOAD_CHAN_STAT_OPENED);
UNLOAD_CHAN_STAT(messages_sent, UNLOAD_CHAN_STAT_MSGS_TX);
UNLOAD_CHAN_STAT(messages_received, UNLOAD_CHAN_STAT_MSGS_RX);
UNLOAD_CHAN_STAT(bytes_sent, UNLOAD_CHAN_STAT_BYTES_TX);
UNLOAD_CHAN_STAT(bytes_received, UNLOAD_CHAN_STAT_BYTES_RX);
UNLOAD_CHAN_STAT(errors, UNLOAD_CHAN_STAT_ERRORS);
UNLOAD_CHAN_STAT(bad_messages, UNLOAD_CHAN_STAT_BAD_MSGS);
UNLOAD_CHAN_STAT(goodbyes, UNLOAD_CHAN_STAT_GOODBYES);
UNLOAD_CHAN_STAT(expired, UNLOAD_CHAN_STAT_EXPIRED);
UNLOAD_CHAN_STAT(auth_refused, UNLOAD_CHAN_STAT_AUTH_REFUSED);
UNLOAD_CHAN_STAT(no_key, UNLOAD_CHAN_STAT_NO_KEY);
UNLOAD_CHAN_STAT(replaced, UNLOAD_CHAN_STAT_REPLACED);
UNLOAD_CHAN_STAT(reaped, UNLOAD_CHAN_STAT_REAPED);

static ssize_t chan_open_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n", atomic_read(&unload_chans_open));
}

static struct kobj_attribute unload_chan_stat_open = __ATTR(open, 0444, chan_open_show, NULL);

static struct attribute *unload_chan_attrs[] = {
	&unload_chan_stat_open.attr,
	&unload_chan_stat_opened.kattr.attr,
	&unload_chan_stat_messages_sent.kattr.attr,
	&unload_chan_stat_messages_received.kattr.attr,
	&unload_chan_stat_bytes_sent.kattr.attr,
	&unload_chan_stat_bytes_received.kattr.attr,
	&unload_chan_stat_errors.kattr.attr,
	&unload_chan_stat_bad_messages.kattr.attr,
	&unload_chan_stat_goodbyes.kattr.attr,
	&unload_chan_stat_expired.kattr.attr,
	&unload_chan_stat_auth_refused.kattr.attr,
	&unload_chan_stat_no_key.kattr.attr,
	&unload_chan_stat_replaced.kattr.attr,
	&unload_chan_stat_reaped.kattr.attr,
	NULL,
};

static const struct attribute_group unload_chan_group = {
	.name = "channel",
	.attrs = unload_chan_attrs,
};

/* Files of a part below in the table (channel.c's key and auth) added to a group here. */
int unload_sysfs_merge(const struct attribute_group *grp)
{
	return sysfs_merge_group(unload_kobj, grp);
}

void unload_sysfs_unmerge(const struct attribute_group *grp)
{
	sysfs_unmerge_group(unload_kobj, grp);
}

int unload_sysfs_init(void)
{
	unsigned int i;
	int ret;

	BUILD_BUG_ON(sizeof(struct unload_control) > PAGE_SIZE);
	BUILD_BUG_ON(sizeof(struct unload_counters) > PAGE_SIZE);
	BUILD_BUG_ON(UNLOAD_WHY_COUNT != 28);	/* one why_not_* file each, above */
	BUILD_BUG_ON(UNLOAD_PATH_COUNT != 5);	/* writes_ and bytes_ of each, above */
	unload_ctl = (struct unload_control *)get_zeroed_page(GFP_KERNEL);
	if (!unload_ctl)
		return -ENOMEM;
	unload_ctl->abi_version = UNLOAD_ABI_VERSION;
	for (i = 0; i < ARRAY_SIZE(unload_tunables); i++)
		*unload_tunable_slot(unload_tunables[i]->offset) = unload_tunables[i]->def;
	unload_ctl->tunables.mode = UNLOAD_MODE_DEFAULT;

	unload_kobj = kobject_create_and_add("unload", kernel_kobj);
	if (!unload_kobj) {
		ret = -ENOMEM;
		goto err_free_control;
	}
	ret = sysfs_create_group(unload_kobj, &unload_tunable_group);
	if (ret)
		goto err_put_kobj;
	ret = sysfs_create_group(unload_kobj, &unload_stat_group);
	if (ret)
		goto err_remove_tunables;
	ret = sysfs_create_group(unload_kobj, &unload_reported_group);
	if (ret)
		goto err_remove_stats;
	ret = sysfs_create_group(unload_kobj, &unload_chan_group);
	if (ret)
		goto err_remove_reported;
	return 0;

err_remove_reported:
	sysfs_remove_group(unload_kobj, &unload_reported_group);
err_remove_stats:
	sysfs_remove_group(unload_kobj, &unload_stat_group);
err_remove_tunables:
	sysfs_remove_group(unload_kobj, &unload_tunable_group);
err_put_kobj:
	kobject_put(unload_kobj);
err_free_control:
	free_page((unsigned long)unload_ctl);
	return ret;
}

void unload_sysfs_exit(void)
{
	sysfs_remove_group(unload_kobj, &unload_chan_group);
	sysfs_remove_group(unload_kobj, &unload_reported_group);
	sysfs_remove_group(unload_kobj, &unload_stat_group);
	sysfs_remove_group(unload_kobj, &unload_tunable_group);
	kobject_put(unload_kobj);
	free_page((unsigned long)unload_ctl);
}
