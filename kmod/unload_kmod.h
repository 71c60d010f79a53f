/* SPDX-License-Identifier: GPL-2.0 */
/*
 * unload.ko internals shared by its files: main.c (module, device, file ops),
 * sysfs.c (tunables, control page, statistics), session.c (sessions, QPs, regions,
 * arenas) and copy.c (the direct copy engine).
 */
#ifndef UNLOAD_KMOD_H
#define UNLOAD_KMOD_H

#include <linux/completion.h>
#include <linux/cred.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/rculist.h>
#include <linux/refcount.h>
#include <linux/slab.h>
#include <linux/types.h>
#include <linux/xarray.h>
#include <rdma/ib_verbs.h>

#include "unload.h"

/* The statistics folded from the counters pages: writes[4], bytes[4], fences. */
#define UNLOAD_FOLD_WRITES	0
#define UNLOAD_FOLD_BYTES	UNLOAD_PATH_COUNT
#define UNLOAD_FOLD_FENCES	(2 * UNLOAD_PATH_COUNT)
#define UNLOAD_NR_FOLDED	(2 * UNLOAD_PATH_COUNT + 1)

/* One open of /dev/unload. */
struct unload_session {
	struct kref ref;		/* the file's, plus one per submitter using it as
					 * a peer; the last put frees it after RCU */
	struct rcu_head rcu;
	u64 id;				/* unique, for logs and hello */
	struct pid *owner;		/* thread group of the opener */
	const struct cred *cred;	/* the opener's credentials (file->f_cred) */
	struct mm_struct *mm;		/* the opener's mm (mmgrab'd): pins come from it
					 * and are charged to it */
	struct page *counters_page;	/* the counters page, mapped RW by userspace */
	struct unload_counters *counters;	/* its kernel address */
	u64 snap[UNLOAD_NR_FOLDED];	/* counters at the last stats reset;
					 * guarded by unload_sessions_lock */
	struct list_head node;		/* in unload_sessions, under unload_sessions_lock */

	struct mutex lock;		/* guards hello, dead, qps, arenas and the
					 * writers of regions */
	bool hello;			/* UNLOAD_IOC_HELLO succeeded */
	bool dead;			/* being released: no new registrations */
	struct list_head qps;		/* struct unload_qp.snode */
	struct xarray regions;		/* rkey -> struct unload_region; readers RCU */
	struct xarray arenas;		/* arena id -> struct unload_arena_obj */
};

/* A QP registered by a session; hashed by qpn for peer lookups. */
struct unload_qp {
	struct hlist_node hnode;	/* in unload_qp_hash (RCU; unload_qp_lock) */
	struct list_head snode;		/* in sess->qps (sess->lock) */
	struct unload_session *sess;	/* no reference: unhashed before sess dies */
	struct ib_device *dev;		/* reference from ib_device_get_by_name */
	u32 qpn;
	struct rcu_head rcu;
};

/* A memory region registered by a session, pinned by the module. */
struct unload_region {
	struct rcu_head rcu;
	refcount_t users;		/* 1 while published, +1 per copy in flight */
	struct completion idle;		/* completed when users reaches 0 */
	u64 addr;			/* user address of the first byte */
	u64 length;			/* bytes */
	u32 rkey;
	u32 access;			/* UNLOAD_ACCESS_* */
	u32 pd_handle;			/* ibv_pd->handle of its PD */
	unsigned long npages;		/* pages pinned */
	struct page **pages;		/* the pinned pages, in address order */
};

/* A staging arena: zeroed kernel pages userspace maps and registers. */
struct unload_arena_obj {
	u32 id;
	unsigned long npages;
	struct page **pages;
};

/* main.c */
extern struct kmem_cache *unload_session_cache;
extern struct kmem_cache *unload_qp_cache;
extern struct kmem_cache *unload_region_cache;
extern struct kmem_cache *unload_arena_cache;

/* sysfs.c: the control page and statistics */
extern struct unload_control *unload_ctl;	/* the control page */
extern atomic64_t unload_denied[UNLOAD_DENY_COUNT];
extern atomic64_t unload_pinned_pages;
extern atomic_t unload_nr_sessions;
int unload_sysfs_init(void);
void unload_sysfs_exit(void);

/* session.c */
extern struct mutex unload_sessions_lock;
extern struct list_head unload_sessions;
extern u64 unload_folded_base[UNLOAD_NR_FOLDED];
struct unload_session *unload_session_create(struct file *file);
void unload_session_release(struct unload_session *sess);
void unload_session_put(struct unload_session *sess);
u64 unload_folded_read(unsigned int idx);
void unload_folded_reset(void);
long unload_ioctl_reg_qp(struct unload_session *sess, void __user *arg);
long unload_ioctl_unreg_qp(struct unload_session *sess, void __user *arg);
void unload_device_removed(struct ib_device *dev);
long unload_ioctl_reg_region(struct unload_session *sess, struct file *file,
			     void __user *arg);
long unload_ioctl_dereg_region(struct unload_session *sess, void __user *arg);
long unload_ioctl_arena_alloc(struct unload_session *sess, struct file *file,
			      void __user *arg);
long unload_ioctl_arena_free(struct unload_session *sess, void __user *arg);
int unload_arena_mmap(struct unload_session *sess, struct vm_area_struct *vma, u32 id);
struct unload_session *unload_peer_get(u32 qpn, const union ib_gid *dgid,
				       struct ib_device **pdev);
bool unload_gid_is_local(struct ib_device *dev, const union ib_gid *gid);

/* What the RDMA core says of a QP (unload_qp_inspect). */
struct unload_qp_info {
	bool owned;			/* a user QP created by the session's process */
	bool has_dgid;			/* dgid is valid (the AV has a GRH) */
	enum ib_qp_type type;
	enum ib_qp_state state;
	u32 dest_qpn;
	u32 pd_handle;			/* ibv_pd->handle of its PD, U32_MAX if none */
	union ib_gid dgid;		/* destination GID */
};
int unload_qp_inspect(struct unload_session *owner, struct ib_device *dev, u32 qpn,
		      struct unload_qp_info *info);
bool unload_session_has_qp(struct unload_session *sess, struct ib_device **dev, u32 qpn);
struct unload_region *unload_region_get(struct unload_session *sess, u32 rkey);
void unload_region_put(struct unload_region *r);
void unload_qp_hash_init(void);

/* copy.c */
long unload_ioctl_submit(struct unload_session *sess, void __user *arg);
int unload_submit_batch(struct unload_session *sess, u64 ureqs, u32 count, u32 *done,
			u32 *accepted);

#endif /* UNLOAD_KMOD_H */
