/* SPDX-License-Identifier: GPL-2.0 */
/*
 * unload.ko internals shared by its files (docs/design.md, section 4, has the table).
 */
#ifndef UNLOAD_KMOD_H
#define UNLOAD_KMOD_H

#include <linux/completion.h>
#include <linux/cred.h>
#include <linux/hashtable.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mm_types.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/rculist.h>
#include <linux/refcount.h>
#include <linux/slab.h>
#include <linux/types.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>
#include <rdma/ib_verbs.h>

#include "unload.h"

/* The pages of a session's status words (UNLOAD_STATUS_SIZE, uapi/unload.h). */
#define UNLOAD_STATUS_PAGES	DIV_ROUND_UP(UNLOAD_STATUS_SIZE, PAGE_SIZE)

/*
 * The statistics folded from the counters pages: writes[5], bytes[5], fences,
 * why_not[UNLOAD_WHY_COUNT], in the page's own order; then the page's writes and bytes of
 * the direct path, which are the mapped engine's claims (the module's own direct counts
 * stand at the direct indices).
 */
#define UNLOAD_FOLD_WRITES	0
#define UNLOAD_FOLD_BYTES	UNLOAD_PATH_COUNT
#define UNLOAD_FOLD_FENCES	(2 * UNLOAD_PATH_COUNT)
#define UNLOAD_FOLD_WHY		(2 * UNLOAD_PATH_COUNT + 1)
#define UNLOAD_FOLD_MAPPED_WRITES	(UNLOAD_FOLD_WHY + UNLOAD_WHY_COUNT)
#define UNLOAD_FOLD_MAPPED_BYTES	(UNLOAD_FOLD_MAPPED_WRITES + 1)
#define UNLOAD_NR_FOLDED	(UNLOAD_FOLD_MAPPED_BYTES + 1)

/* Buckets of a session's region tables (by (device, rkey) and by (device, lkey)). */
#define UNLOAD_REGION_HASH_BITS	6

struct unload_acct;
struct unload_user;

/* One open of /dev/unload. */
struct unload_session {
	struct kref ref;		/* the file's, plus one per submitter using it as
					 * a peer; the last put frees it after RCU */
	struct rcu_head rcu;
	u64 id;				/* unique, for logs and hello */
	struct pid *owner;		/* thread group of the opener */
	const struct cred *cred;	/* the opener's credentials (file->f_cred) */
	bool ipc_lock;			/* the opener had CAP_IPC_LOCK (unbounded pins) */
	struct mm_struct *mm;		/* the opener's mm (mmgrab'd): pins come from it
					 * and arenas are charged to it */
	struct unload_acct *acct;	/* its process's pins (pins.c), shared */
	struct unload_user *user;	/* the opener's euid's counts (users.c) */
	bool user_bounded;		/* the user_*_max bounds apply: the opener had
					 * no CAP_SYS_ADMIN */
	struct page *counters_page;	/* the counters page, mapped RW by userspace */
	struct unload_counters *counters;	/* its kernel address */
	struct page *status_pages[UNLOAD_STATUS_PAGES];	/* the mappings' validity words,
							 * mapped read-only */
	u64 *status;			/* their kernel view (vmap); written under
					 * unload_maps_lock with smp_store_release */
	DECLARE_BITMAP(map_slots, UNLOAD_MAX_MAPPINGS);	/* words in use (unload_maps_lock) */
	struct page *busy_page;		/* its QPs' busy bytes, mapped RW by userspace */
	u8 *busy;			/* its kernel address; the module writes a byte
					 * with WRITE_ONCE under lock, the owner at will */
	DECLARE_BITMAP(busy_slots, UNLOAD_MAX_QPS);	/* bytes in use (lock) */
	u32 busy_next;			/* where the next byte is looked for (lock) */
	unsigned int nr_maps;		/* its mappings alive, revoked ones still mapped
					 * included (unload_maps_lock); a mapping never
					 * outlives the session: its VMAs hold the file */
	atomic64_t direct_writes;	/* the module's own count of direct copies: not in
					 * the page userspace can write */
	atomic64_t direct_bytes;
	u64 snap[UNLOAD_NR_FOLDED];	/* counters at the last stats reset;
					 * guarded by unload_sessions_lock */
	struct list_head node;		/* in unload_sessions, under unload_sessions_lock */

	int hello;			/* UNLOAD_IOC_HELLO succeeded: set once with
					 * smp_store_release, read with smp_load_acquire */
	struct mutex lock;		/* guards dead, qps, nr_qps, arenas, region_ids,
					 * region_pages and the writers of the region
					 * tables */
	bool dead;			/* being released: no new registrations (set
					 * under lock with WRITE_ONCE; peer lookups
					 * read it with READ_ONCE) */
	struct list_head qps;		/* struct unload_qp.snode */
	unsigned int nr_qps;		/* entries of qps (<= UNLOAD_MAX_QPS) */
	u32 next_qp_handle;		/* last handle given to a QP registration */
	struct xarray region_ids;	/* handle -> struct unload_region (the owner) */
	unsigned long region_pages;	/* pages its regions span (their pins may be
					 * shared with the process's other regions) */
	DECLARE_HASHTABLE(targets, UNLOAD_REGION_HASH_BITS);	/* by (dev, rkey); RCU */
	DECLARE_HASHTABLE(sources, UNLOAD_REGION_HASH_BITS);	/* by (dev, lkey); RCU */
	struct xarray arenas;		/* arena id -> struct unload_arena_obj */

	struct unload_pair_slot *pairs;	/* UNLOAD_PAIR_SLOTS, by sender qpn (pairs.c) */
	struct delayed_work pair_reaper;	/* drops idle or dying pairs */

	struct xarray remote_queues;	/* sender qpn -> struct unload_rq (remote_queue.c):
					 * created at a QP's first queued write, freed at
					 * close; its lock guards inserts */
	atomic_t remote_queued;		/* writes in those queues, not yet completed */
	atomic64_t remote_queued_bytes;
};

/* A QP registered by a session; hashed by qpn for peer lookups. */
struct unload_qp {
	struct hlist_node hnode;	/* in unload_qp_hash (RCU; unload_qp_hash_lock) */
	struct list_head snode;		/* in sess->qps (sess->lock) */
	struct unload_session *sess;	/* no reference: unhashed before sess dies */
	struct ib_device *dev;		/* reference from ib_device_get_by_name */
	u32 qpn;
	u32 handle;			/* in its session, non-zero, set before hashing */
	u32 busy_slot;			/* its byte in sess->busy; set before hashing */
	atomic_t gen;			/* its changes since its registration: each modify
					 * through its shim (REG_QP again) or a child's
					 * (QP_CHANGED) */
	bool poisoned;			/* a request of this QP or to it failed a check
					 * an RNIC makes: never direct again (set once,
					 * WRITE_ONCE/READ_ONCE) */
	struct rcu_head rcu;
};

/*
 * May sess's QPs be handed to their driver as someone's peer? Not once it is closing,
 * nor once its process has left its mm (exit or exec). Exit closes the verbs file without
 * the shim's unregistration, and its cleanup runs the driver's destroy of each QP before
 * the RDMA core marks it deleted (res->valid); exit_mm comes before exit_files, so a dying
 * owner shows here first.
 */
static inline bool unload_session_live(const struct unload_session *sess)
{
	return !READ_ONCE(sess->dead) && atomic_read(&sess->mm->mm_users) > 0;
}

/*
 * Does q's shim say that no NIC request of q is in flight or has failed (its busy byte
 * is 0, kmod/uapi/unload.h)? Then the RDMA core cannot have moved q by itself: its
 * state changes only through a modify, which registers it again. The caller holds a
 * reference on q->sess.
 */
static inline bool unload_qp_quiet(const struct unload_qp *q)
{
	return !READ_ONCE(q->sess->busy[q->busy_slot]);
}

/*
 * A memory region registered by a session: the RDMA core's MR (found again on every
 * request by its restrack id and checked against these fields), and for a target the
 * pages the module pinned for writing.
 */
struct unload_region {
	struct hlist_node tnode;	/* in sess->targets if target (RCU; sess->lock) */
	struct hlist_node snode;	/* in sess->sources (RCU; sess->lock) */
	struct rcu_head rcu;
	refcount_t users;		/* 1 while published, +1 per copy in flight */
	struct completion idle;		/* completed when users reaches 0 */
	struct ib_device *dev;		/* the MR's device; compared only (requests look
					 * the MR up on a device they hold) */
	u32 mr_id;			/* the MR's restrack id on dev */
	u32 handle;			/* in sess->region_ids */
	u64 addr;			/* user address of the first byte */
	u64 iova;			/* the MR's iova: what requests name as target */
	u64 length;			/* bytes = the MR's length */
	u32 lkey;
	u32 rkey;
	u32 access;			/* UNLOAD_ACCESS_* */
	bool target;			/* remote-write target: in targets */
	bool retired;			/* unpublished (WRITE_ONCE under the owner's lock;
					 * a mapping's grant reads it, mappings.c) */
	unsigned long npages;		/* pages pinned, from addr's page */
	struct page **pages;		/* the pinned pages, in address order: pin's */
	struct unload_pin *pin;		/* the process's pin of them (pins.c) */
};

/*
 * A staging arena: zeroed kernel pages userspace maps and registers. Charged to its
 * opener's RLIMIT_MEMLOCK for as long as its pages live: the session's reference (until
 * ARENA_FREE or close), one per mapping, one per pin of its pages; the last put
 * uncharges.
 */
struct unload_arena_obj {
	u32 id;
	unsigned long npages;
	struct page **pages;
	struct kref ref;
	struct mm_struct *mm;		/* charged (mmgrab'd until the last put) */
};

/* Pages a process's regions pin (pins.c): one per range, shared by its sessions. */
struct unload_pin {
	struct hlist_node node;		/* in its account's pins (the account's lock) */
	struct unload_acct *acct;
	u64 start;			/* page-aligned */
	unsigned long npages;
	bool write;
	unsigned int users;		/* regions on it; under the account's lock */
	struct unload_arena_obj *arena;	/* the arena its pages are (holds its charge), or
					 * NULL: charged to the account */
	struct page **pages;
};

/*
 * The files, each one concept, listed so that each calls only those after it: main.c,
 * lifecycle.c, list.c, copy.c, probe.c, remote_queue.c, remote.c, channel.c, channel_rx.c, target.c,
 * place.c, pairs.c, mappings.c, regions.c, registry.c, qp_view.c, arenas.c, sysfs.c,
 * channel_io.c, session.c, users.c.
 */

/* main.c: the module, /dev/unload's file operations, the ib_client */
extern struct kmem_cache *unload_session_cache;
extern struct kmem_cache *unload_qp_cache;
extern struct kmem_cache *unload_region_cache;
extern struct kmem_cache *unload_arena_cache;

/* lifecycle.c: open and close, and every invalidation in one order */
struct unload_session *unload_session_open(struct file *file);
void unload_session_close(struct unload_session *sess);
long unload_ioctl_reg_qp(struct unload_session *sess, void __user *arg);
long unload_ioctl_unreg_qp(struct unload_session *sess, void __user *arg);
long unload_ioctl_qp_changed(struct unload_session *sess, void __user *arg);
long unload_ioctl_dereg_region(struct unload_session *sess, void __user *arg);
long unload_ioctl_map(struct unload_session *sess, struct file *file, void __user *arg);
void unload_device_removed(struct ib_device *dev);

/* list.c: the sessions list for tools */
long unload_ioctl_list_sessions(struct unload_session *self, struct file *file,
				void __user *arg);

/* remote.c: the sender half of a remote write */
struct unload_seg;
/* A checked remote write, its bytes read in: what goes to the host its QP is connected to. */
struct unload_remote_msg {
	char devname[IB_DEVICE_NAME_MAX];	/* the sender QP's device, port and peer */
	u32 port;
	union ib_gid dgid;
	unsigned int ack_ms;		/* how long its QP's NIC would wait for the ack */
	u8 *msg;			/* struct unload_chan_write and the bytes (kvmalloc) */
	u32 len;
	struct unload_session *sess;	/* its submitter's, which outlives it: a channel it
					 * opens is charged to that session's user */
	/* Posted without waiting (unload_remote_post): its verdict's, and the result it
	 * has until one comes (the verdict at issue) */
	void (*done)(struct unload_remote_msg *m, u32 deny, int result);
	int result;
};
u32 unload_remote_prepare(struct unload_session *sess, const struct unload_direct_req *req,
			  const struct unload_iov *list, const u8 *inl, struct unload_seg *seg,
			  struct unload_remote_msg *m, int *result);
int unload_remote_post(struct unload_remote_msg *m, bool nonblock);
u32 unload_remote_one(struct unload_session *sess, const struct unload_direct_req *req,
		      const struct unload_iov *list, const u8 *inl, struct unload_seg *seg,
		      int *result);
extern atomic64_t unload_remote_denied;	/* remote requests not placed */

/* remote_queue.c: remote writes submitted without waiting (UNLOAD_URING_REMOTE) */
struct io_uring_cmd;
int unload_remote_issue(struct unload_session *sess, struct io_uring_cmd *ioucmd);
void unload_remote_queues_free(struct unload_session *sess);
int unload_remote_queue_init(void);
void unload_remote_queue_exit(void);

/*
 * target.c: a remote write that arrived from another host's module, placed here under the
 * responder's checks. Every field is the network's but dev and the two GIDs, which are the
 * channel's own (the device it arrived on, who sent it, the address it arrived at).
 */
struct unload_target_write {
	struct ib_device *dev;
	union ib_gid peer_gid;
	union ib_gid local_gid;
	u32 src_qpn;			/* the sender QP the request names */
	u32 dst_qpn;			/* the responder QP */
	u32 rkey;
	u32 length;
	u64 remote_addr;
	const u8 *data;			/* length bytes */
};
u32 unload_target_place(const struct unload_target_write *w);
void unload_target_count_refusal(u32 deny);
extern atomic64_t unload_remote_refused[UNLOAD_DENY_COUNT];	/* at the target, per reason */
extern atomic64_t unload_remote_placed_writes;	/* remote writes placed here */
extern atomic64_t unload_remote_placed_bytes;

/* copy.c: submission */
long unload_ioctl_submit(struct unload_session *sess, void __user *arg);
long unload_ioctl_channel_probe(struct unload_session *sess, void __user *arg);	/* probe.c */
int unload_submit_batch(struct unload_session *sess, u64 ureqs, u32 count, u32 flags,
			u32 *done, u32 *accepted);

/* place.c: a write's bytes, from its source to a target region's pinned pages */
/*
 * The local source of a request: its segments, each a span of one of the submitter's
 * registered regions, held (a user reference) until the copy is done, or for an inline
 * request the bytes the batch read in. Regions are pinned at registration, so reading a
 * source faults nothing and pins nothing.
 */
struct unload_seg {
	struct unload_region *r;
	u64 off;			/* from the region's first byte */
	u64 len;
};

struct unload_src {
	const u8 *inl;			/* an inline request's bytes, or NULL */
	unsigned int nr;		/* segments resolved (and held) */
	struct unload_seg *seg;		/* one[], or the batch's */
	struct unload_seg one[1];
};
/* Is req an inline request (UNLOAD_REQ_INLINE) of a well-formed shape? */
static inline bool unload_req_inline(const struct unload_direct_req *req)
{
	return req->flags == UNLOAD_REQ_INLINE && !req->iov_count && !req->lkey &&
	       req->length && req->length <= UNLOAD_MAX_INLINE;
}
u32 unload_req_begin(const struct unload_direct_req *req, u64 max_len,
		     const struct unload_iov *list, const u8 *inl, struct unload_seg *seg,
		     struct unload_iov *one, struct unload_src *src,
		     const struct unload_iov **uiovp, int *result);
void unload_src_put(struct unload_src *src);
void unload_src_gather(const struct unload_src *src, u8 *buf, u64 len);
void unload_place(struct unload_region *r, u64 off, u64 len, const struct unload_src *src);
void unload_place_bytes(struct unload_region *r, u64 off, const u8 *data, u64 len);

/*
 * qp_view.c: what the RDMA core says of a QP now (unload_qp_view_get), with a restrack reference
 * on it held until unload_qp_view_put: its PD pointer stays comparable meanwhile.
 */
#define UNLOAD_PSN_MASK		0xffffffU	/* PSNs are 24 bits (BTH) */

struct unload_qp_view {
	struct rdma_restrack_entry *res;	/* the reference */
	struct ib_qp *qp;
	bool has_grh;			/* sgid, dgid valid */
	enum ib_qp_type type;
	enum ib_qp_state state;
	u32 dest_qpn;
	int access;			/* IB_ACCESS_* of the QP (qp_access_flags) */
	u32 port;			/* of its AV (the QP's port when the AV names none) */
	u8 sgid_index;			/* of its AV */
	union ib_gid sgid;		/* this side's GID (port, sgid_index of its AV) */
	union ib_gid dgid;		/* destination GID */
	u32 sq_psn;			/* next PSN it sends */
	u32 rq_psn;			/* next PSN it expects */
	u8 timeout;			/* local ACK timeout (4.096 us << timeout; 0: none) */
	u8 retry_cnt;			/* retries after it: how long its NIC waits for an ack */
};
int unload_qp_view_get(struct unload_session *owner, struct ib_device *dev, u32 qpn,
		       struct unload_qp_view *v);
int unload_qp_view_reread(struct unload_qp_view *v, bool *same_av);
bool unload_qp_view_draining(const struct unload_qp_view *v);
void unload_qp_view_put(struct unload_qp_view *v);

/* pairs.c: the sender side of a request, its registered QP and the peer paired with it. */
struct unload_pair {
	struct ib_device *dev;		/* sender's device (a reference) */
	struct unload_qp_view s;	/* the sender QP */
	struct unload_session *peer;	/* the peer's session (a reference) */
	struct ib_device *peer_dev;	/* the peer QP's device (a reference) */
	struct unload_qp_view p;	/* the peer QP */
	u32 qpn, peer_qpn;
	int s_gen;			/* the sender registration's gen when s was read */
};

/*
 * A sender QP's pair, kept from one submission to the next (pairs.c): the references a
 * resolution took, and what was read then that a later submission need not read again.
 */
#define UNLOAD_PAIR_SLOTS	8

/*
 * An MR a slot keeps referenced from one request to the next, by its restrack id on the
 * pair's device: the lookup is saved, never the checks (unload_kept_mr_get).
 */
struct unload_kept_mr {
	struct ib_mr *mr;		/* a restrack reference, or NULL */
	u32 id;				/* mr's restrack id */
};

struct unload_pair_slot {
	struct mutex lock;		/* guards the rest; held while a submission uses
					 * the pair */
	bool valid;			/* pr holds its references */
	u32 qpn, handle;		/* the sender's, as its requests name it */
	int gid_generation;		/* unload_gid_generation when resolved */
	unsigned long used;		/* jiffies of the last use */
	struct unload_pair pr;
	struct unload_kept_mr src;	/* the last source MR, on pr.dev */
	struct unload_kept_mr dst;	/* the last target MR, on pr.peer_dev */
};

/* The pair a submission holds, locked, from one request to the next of its sender QP. */
struct unload_pair_hold {
	struct unload_pair_slot *slot;	/* locked while set */
};

/* pairs.c: resolution, slots, the reaper, kept MRs, the per-submission hold */
int unload_pairs_init(struct unload_session *sess);
void unload_pairs_release(struct unload_session *sess);
void unload_pairs_free(struct unload_session *sess);
void unload_pairs_forget(struct unload_session *sess, struct ib_device *dev, u32 qpn);
void unload_pairs_forget_mr(struct unload_session *sess, struct ib_device *dev, u32 mr_id);
u32 unload_pair_report(struct unload_session *sess, u32 qpn, u32 handle);
struct unload_pair *unload_pair_hold_check(struct unload_session *sess, struct unload_pair_hold *h,
					   u32 qpn, u32 handle, u32 *deny);
struct unload_pair *unload_pair_hold_get(struct unload_session *sess, struct unload_pair_hold *h,
					 u32 qpn, u32 handle, u32 *deny);
void unload_pair_hold_refuse(struct unload_session *sess, struct unload_pair_hold *h, u32 deny);
void unload_pair_hold_release(struct unload_pair_hold *h);
struct ib_mr *unload_kept_mr_get(struct unload_kept_mr *kept, struct unload_session *owner,
				 struct unload_region *r, struct ib_device *dev);

/* mappings.c: regions mapped into senders (the mapped path), and their revocation */
#define UNLOAD_MAX_MAP_IDS	(1U << 24)	/* live or still mapped, over all sessions */
#define UNLOAD_MAX_SESSION_MAPS	(2 * UNLOAD_MAX_MAPPINGS)	/* the same, per session */
int unload_map_grant(struct unload_session *sess, struct file *file,
		     const struct unload_pair *pr, struct unload_region *r, struct ib_mr *mr,
		     struct unload_map *out);
void unload_maps_init(void);
void unload_maps_exit(void);
struct file *unload_mem_file_get(int fd, int *err);
bool unload_mem_file_of(const struct file *mem, const struct mm_struct *mm);
int unload_map_mmap(struct unload_session *sess, struct vm_area_struct *vma, u32 id, bool view);
void unload_map_withdraw(struct unload_session *sess, u32 slot, u64 cookie);
long unload_ioctl_unmap(struct unload_session *sess, void __user *arg);
void unload_maps_revoke_region(struct unload_region *r);
void unload_maps_revoke_qp(struct ib_device *dev, u32 qpn);
void unload_maps_revoke_device(struct ib_device *dev);
void unload_maps_revoke_session(struct unload_session *sess);

/* regions.c */
long unload_ioctl_reg_region(struct unload_session *sess, void __user *arg);
struct unload_region *unload_region_find(struct unload_session *sess, bool target,
					 struct ib_device *dev, u32 key);
void unload_region_put(struct unload_region *r);
struct ib_mr *unload_region_mr_get(struct unload_session *owner, struct unload_region *r,
				   struct ib_device *dev);
bool unload_region_mr_still(struct unload_session *owner, struct unload_region *r,
			    struct ib_mr *mr);
void unload_region_mr_put(struct ib_mr *mr);
void unload_region_retire(struct unload_region *r);
struct unload_region *unload_region_take(struct unload_session *sess, u32 handle);
void unload_regions_retire_device(struct unload_session *sess, struct ib_device *dev);

/* registry.c: devices and registered QPs */
extern atomic_t unload_gid_generation;	/* bumped by every GID table change */
int unload_device_added(struct ib_device *dev);
void unload_device_erase(struct ib_device *dev);
bool unload_device_live(struct ib_device *dev);
int unload_device_mr_hint(struct ib_device *dev, u32 *hint);
void unload_device_mr_found(struct ib_device *dev, u32 id);
int unload_qp_reg_copy_in(struct unload_qp_reg *req, void __user *arg);
int unload_qp_register(struct unload_session *sess, struct ib_device *dev,
		       struct unload_qp_reg *req);
int unload_qp_unregister(struct unload_session *sess, struct ib_device *dev, u32 qpn);
void unload_qps_remove(struct unload_session *sess, struct ib_device *dev);
int unload_qp_changed(struct unload_session *by, struct ib_device *dev, u32 qpn);
const struct unload_qp *unload_qp_sender(struct unload_session *sess, u32 qpn, u32 handle);
const struct unload_qp *unload_qp_lookup(struct unload_session *sess, struct ib_device *dev,
					 u32 qpn);
bool unload_qp_registered(struct unload_session *sess, struct ib_device *dev, u32 qpn,
			  bool *poisoned);
int unload_qp_busy_slot(struct unload_session *sess, struct ib_device *dev, u32 qpn);
bool unload_qp_candidate(u32 qpn, u32 *seen, struct unload_session **sess,
			 struct ib_device **dev);
void unload_qp_poison(struct unload_session *sess, struct ib_device *dev, u32 qpn);

/* arenas.c */
long unload_ioctl_arena_alloc(struct unload_session *sess, struct file *file,
			      void __user *arg);
long unload_ioctl_arena_free(struct unload_session *sess, void __user *arg);
int unload_arena_mmap(struct unload_session *sess, struct vm_area_struct *vma, u32 id);
void unload_arenas_release(struct unload_session *sess);
struct unload_arena_obj *unload_arena_of_pages(struct mm_struct *mm, u64 start,
					       unsigned long npages, struct page **pages);
void unload_arena_put(struct unload_arena_obj *a);

/* pins.c */
struct unload_acct *unload_acct_get(struct mm_struct *mm);
void unload_acct_put(struct unload_acct *acct);
struct unload_pin *unload_pin_get(struct unload_acct *acct, u64 start, unsigned long npages,
				  bool write, bool ipc_lock);
void unload_pin_put(struct unload_pin *pin);

/* sysfs.c: the tunables, the control page, the statistics shown */
extern struct unload_control *unload_ctl;	/* the control page */
/* The module's own tunables (UNLOAD_MODULE_TUNABLE_RANGES); read them with READ_ONCE. */
extern u32 unload_pair_idle_ms;
extern u32 unload_user_sessions_max;
extern u32 unload_user_registrations_max;
extern u32 unload_channels_max;
extern u32 unload_user_channels_max;
int unload_sysfs_init(void);
void unload_sysfs_exit(void);
struct attribute_group;
int unload_sysfs_merge(const struct attribute_group *grp);	/* into a group of sysfs.c's */
void unload_sysfs_unmerge(const struct attribute_group *grp);

/* session.c: the session object and list, the module's counters and their folding */
extern struct mutex unload_sessions_lock;
extern struct list_head unload_sessions;
extern u64 unload_folded_base[UNLOAD_NR_FOLDED];
extern atomic64_t unload_denied[UNLOAD_DENY_COUNT];
extern atomic64_t unload_direct_submissions;	/* submissions that ran a request */
extern atomic64_t unload_pairs_resolved;	/* pairs resolved from scratch (pairs.c) */
extern atomic64_t unload_mr_probes;		/* restrack ids tried by MR scans (regions.c) */
extern atomic_t unload_nr_sessions;
struct unload_session *unload_session_alloc(struct file *file);
void unload_session_publish(struct unload_session *sess);
void unload_session_unpublish(struct unload_session *sess);
void unload_session_put(struct unload_session *sess);
u64 unload_folded_read(unsigned int idx);
void unload_folded_reset(void);

/* users.c: per-user counts of sessions, registrations and channels (a leaf) */
enum unload_user_count {
	UNLOAD_USER_SESSIONS,
	UNLOAD_USER_REGS,		/* QPs and regions registered */
	UNLOAD_USER_CHANNELS,		/* channels its callers opened (channel.c) */
	UNLOAD_USER_NR
};
struct unload_user *unload_user_get(kuid_t uid);
struct unload_user *unload_user_hold(struct unload_user *u);	/* another reference */
void unload_user_put(struct unload_user *u);
bool unload_user_charge(struct unload_user *u, enum unload_user_count what, u32 max);
void unload_user_uncharge(struct unload_user *u, enum unload_user_count what);

/* The bound a charge of sess's user is held to: max (a user_*_max), or none for root. */
static inline u32 unload_user_bound(const struct unload_session *sess, const u32 *max)
{
	return sess->user_bounded ? READ_ONCE(*max) : U32_MAX;
}

/* memlock.c: the memlock charge and the module's pinned-page total (a leaf) */
extern atomic64_t unload_pinned_pages;
int unload_session_charge(struct unload_session *sess, unsigned long npages);
void unload_mm_uncharge(struct mm_struct *mm, unsigned long npages);

#endif /* UNLOAD_KMOD_H */
