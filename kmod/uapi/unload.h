/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR MIT) */
/*
 * unload: the ABI between the kernel module (unload.ko, /dev/unload) and userspace
 * (libunload). This is the one header both sides include.
 *
 * Rules: fixed-width types only, user pointers travel as __u64, every struct has
 * explicit reserved fields that must be zero on input (the module rejects non-zero
 * reserved fields with -EINVAL so they can gain a meaning later), every ioctl is
 * _IOWR. Unknown commands return -ENOTTY.
 *
 * Using it:
 *   fd = open("/dev/unload", O_RDWR | O_CLOEXEC);     one session per open; EMFILE
 *                                                        over user_sessions_max
 *   ioctl(fd, UNLOAD_IOC_HELLO, &hello)                  must come first; checks
 *                                                        UNLOAD_ABI_VERSION
 *   ctl = mmap(NULL, hello.control_size, PROT_READ, MAP_SHARED, fd,
 *              UNLOAD_MMAP_CONTROL)                      tunables (read-only)
 *   cnt = mmap(NULL, hello.counters_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
 *              UNLOAD_MMAP_COUNTERS)                     this session's counters
 *                                                        (its claims: reported/)
 *   ioctl(fd, UNLOAD_IOC_REG_QP / REG_REGION / ...)      register QPs and regions
 *   ioctl(fd, UNLOAD_IOC_SUBMIT, &batch) or an io_uring IORING_OP_URING_CMD with
 *   cmd_op UNLOAD_URING_SUBMIT                           direct copies
 *   ioctl(fd, UNLOAD_IOC_MAP, &map), mmap it              a peer's region mapped: the
 *                                                        mapped path's copies
 *   close(fd)                                            releases everything
 */
#ifndef _UAPI_LINUX_UNLOAD_H
#define _UAPI_LINUX_UNLOAD_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* Bumped on every incompatible change of this file. */
#define UNLOAD_ABI_VERSION 7

#define UNLOAD_DEVICE_PATH "/dev/unload"
#define UNLOAD_SYSFS_ROOT "/sys/kernel/unload"

/* Path indices: index the per-path arrays below and the sysfs statistics. */
enum unload_path {
	UNLOAD_PATH_OFFLOAD = 0,	/* the NIC does everything */
	UNLOAD_PATH_INLINE = 1,		/* payload copied into the WR (IBV_SEND_INLINE) */
	UNLOAD_PATH_STAGE = 2,		/* payload copied into a pinned staging slot */
	UNLOAD_PATH_DIRECT = 3,		/* the module copies into the peer's region */
	UNLOAD_PATH_REMOTE = 4,		/* the peer host's module places it (ABI 6) */
	UNLOAD_PATH_COUNT = 5,
};

/* Values of the `mode` tunable; equal to unload::policy::Mode. */
enum unload_mode {
	UNLOAD_MODE_OFFLOAD = 0,	/* always the NIC */
	UNLOAD_MODE_UNLOAD = 1,		/* always the cheapest eligible CPU path */
	UNLOAD_MODE_THRESHOLD = 2,	/* unload when length <= threshold_bytes */
	UNLOAD_MODE_ADAPTIVE = 3,	/* learn per write class */
	UNLOAD_MODE_COUNT = 4,
	UNLOAD_MODE_DEFAULT = UNLOAD_MODE_ADAPTIVE,	/* the module's mode at load */
};

/*
 * mmap offsets (the `offset` argument of mmap on /dev/unload). All mappings are
 * MAP_SHARED. Staging arenas are mapped at the offset UNLOAD_IOC_ARENA_ALLOC returns.
 */
#define UNLOAD_MMAP_CONTROL	0x0ULL		/* control page, PROT_READ only */
#define UNLOAD_MMAP_COUNTERS	0x100000ULL	/* this session's counters page, RW */
#define UNLOAD_MMAP_STATUS	0x200000ULL	/* this session's status page, PROT_READ only */
#define UNLOAD_MMAP_BUSY	0x300000ULL	/* this session's busy page, RW */
#define UNLOAD_MMAP_ARENA_BASE	0x100000000ULL	/* arena n at BASE + n * ARENA_STRIDE */
#define UNLOAD_MMAP_ARENA_STRIDE 0x100000000ULL
/* Mappings: at the mmap_offset UNLOAD_IOC_MAP returns (BASE + id * STRIDE). */
#define UNLOAD_MMAP_MAP_BASE	(1ULL << 56)
#define UNLOAD_MMAP_MAP_STRIDE	(1ULL << 36)
/* A mapping's view of its responder's busy page: at the busy_offset UNLOAD_IOC_MAP returns. */
#define UNLOAD_MMAP_BUSY_VIEW_BASE (1ULL << 55)

/*
 * The tunables, in the order and encoding of unload::policy::Tunables (so userspace
 * may copy this struct into one). Field names are the sysfs file names; ranges and
 * defaults are in docs/sysfs.md.
 */
struct unload_tunables {
	__u32 enabled;		/* 0: every write takes the NIC, whatever the mode */
	__u32 mode;		/* an enum unload_mode value */
	__u32 threshold_bytes;	/* threshold mode: unload writes of at most this length */
	__u32 inline_max;	/* longest write the inline path may take (0: path off) */
	__u32 stage_max;	/* longest write the stage path may take (0: path off) */
	__u32 direct_max;	/* longest write the direct path may take (0: path off) */
	__u32 explore_shift;	/* adaptive explores at rate 2^-explore_shift (0: never) */
	__u32 hysteresis_pct;	/* adaptive switches only for a gain above this */
	__u32 cpu_budget_pct;	/* share of wall time CPU paths may copy (100: no cap) */
	__u32 target_xlate_pages; /* target NICs' translation cache, pages (0: unknown) */
};

/*
 * The numeric tunables' ranges and defaults, as the module enforces them on a sysfs
 * write: X(name, min, max, default) once each, in struct unload_tunables order. The one
 * list the module, unloadctl and the runtime's defaults are checked against. `mode` is a
 * word (enum unload_mode), default UNLOAD_MODE_DEFAULT.
 */
#define UNLOAD_TUNABLE_RANGES(X)				\
	X(enabled,		0, 1,		1)		\
	X(threshold_bytes,	0, 1U << 31,	1024)		\
	X(inline_max,		0, 1U << 16,	256)		\
	X(stage_max,		0, 1U << 30,	64 * 1024)	\
	X(direct_max,		0, 1U << 31,	1U << 30)	\
	X(explore_shift,	0, 31,		5)		\
	X(hysteresis_pct,	0, 1000,	10)		\
	X(cpu_budget_pct,	0, 100,		50)		\
	X(target_xlate_pages,	0, 16384,	0)

/*
 * The module's own tunables: sysfs files beside those above, read by the module alone,
 * so not in the control page. X(name, min, max, default), as above.
 *   pair_idle_ms: a sender's kept resolution of its peer (design.md, section 4) unused
 *   this long is dropped; the next write resolves afresh. It is also about the longest
 *   an ibv_destroy_qp or ibv_dereg_mr the shim did not see coming (a process's exit)
 *   waits for the module's references.
 *   user_sessions_max: open sessions per user (the opener's euid); the next open fails
 *   with EMFILE. user_registrations_max: QPs and regions registered per user, over all
 *   its sessions; the next REG_QP or REG_REGION fails with EDQUOT. Openers with
 *   CAP_SYS_ADMIN are counted but not bounded (docs/sysfs.md).
 *   channels_max: channels to other hosts' modules, both directions (each holds a QP and
 *   about 256 KiB of rings on both hosts); the next is refused, the write goes to the NIC.
 *   user_channels_max: of them, those a user's writes and probes opened (the channel is
 *   then shared by every user, and charged to its opener until it closes).
 */
#define UNLOAD_MODULE_TUNABLE_RANGES(X)				\
	X(pair_idle_ms,		1, 1000,	10)		\
	X(channel_idle_ms,	0, 86400000,	60000)		\
	X(user_sessions_max,	1, 1U << 20,	1024)		\
	X(user_registrations_max, 1, 1U << 24,	1U << 18)	\
	X(channels_max,		1, 1U << 16,	1024)		\
	X(user_channels_max,	1, 1U << 16,	256)

/*
 * The control page: one page, shared read-only by every session, rewritten by every
 * successful sysfs write of a tunable in UNLOAD_TUNABLE_RANGES or mode. Read it like a
 * seqcount:
 *
 *   do {
 *       s = __atomic_load_n(&ctl->seq, __ATOMIC_ACQUIRE);
 *       if (s & 1) continue;                 // being written
 *       t = ctl->tunables;                   // copy
 *       __atomic_thread_fence(__ATOMIC_ACQUIRE);
 *   } while (__atomic_load_n(&ctl->seq, __ATOMIC_RELAXED) != s);
 */
struct unload_control {
	__u32 seq;			/* sequence counter: odd while being written */
	__u32 abi_version;		/* UNLOAD_ABI_VERSION of the module */
	struct unload_tunables tunables;	/* the current tunables (its last word was reserved) */
	__u64 generation;		/* number of tunable changes since load */
	/*
	 * Channels to peer hosts' modules that came up since load (design.md, "The
	 * channel"): a shim that found no channel for a QP asks again once this moved. Zero
	 * from a module before it (the same ABI: it was reserved), where a shim never asks again.
	 */
	__u64 channels_up;
	__u64 reserved[15];		/* zero */
};

/*
 * Why a write did not take the path its mode prefers (the direct path in modes unload,
 * threshold and adaptive; the forced path under UNLOAD_PATH): one reason per such write,
 * the first that applies in this order, counted by userspace in its counters page and
 * folded into /sys/kernel/unload/stats/why_not_<name> (the lower-case suffix). Writes in
 * mode offload, or with enabled = 0, are where their mode wants them and count nothing.
 * docs/sysfs.md says what each means and what to do about it.
 */
enum unload_why {
	UNLOAD_WHY_NOT_RC = 0,		/* not an RC QP (UC, or a QP the shim does not track) */
	UNLOAD_WHY_PROGRAM_INLINE = 1,	/* the program asked IBV_SEND_INLINE: the NIC does it */
	UNLOAD_WHY_PATH_OFF = 2,	/* the path's *_max tunable is 0 */
	UNLOAD_WHY_NO_MODULE = 3,	/* stage and direct need the module */
	UNLOAD_WHY_REMOTE_PEER = 4,	/* the peer is on another host: direct cannot reach it */
	UNLOAD_WHY_UNREGISTERED = 5,	/* the module did not take the QP's registration */
	UNLOAD_WHY_UNPAIRED = 6,	/* the peer QP is not registered or not connected back */
	UNLOAD_WHY_POISONED = 7,	/* a request of the pair failed a responder check */
	UNLOAD_WHY_QP_ERROR = 8,	/* an error completion or a move to ERR was seen */
	UNLOAD_WHY_CQ = 9,		/* the send CQ cannot take the shim's completions */
	UNLOAD_WHY_QUEUE = 10,		/* the list may overflow the send queue, or earlier
					 * requests are stuck: the NIC must cut or order it */
	UNLOAD_WHY_FENCE = 11,		/* IBV_SEND_FENCE behind a READ/atomic (inline, stage),
					 * or the wait for earlier requests ran out (direct) */
	UNLOAD_WHY_SIZE = 12,		/* length 0, above the path's cap, or too many SGEs */
	UNLOAD_WHY_REGION = 13,		/* a source SGE outside regions registered through the
					 * shim on the QP's PD (the NIC judges it) */
	UNLOAD_WHY_NO_ROOM = 14,	/* no room: completion queue, staging arena or ring */
	UNLOAD_WHY_REFUSED = 15,	/* the module refused it (stats/direct_denied_*) */
	UNLOAD_WHY_POLICY = 16,		/* the mode's rule chose another path (threshold);
					 * adaptive says why with COLD .. COST */
	UNLOAD_WHY_WITH_IMM = 17,	/* WRITE_WITH_IMM: direct cannot make the responder's
					 * receive completion */
	UNLOAD_WHY_NIC_MEMORY = 18,	/* a source SGE in memory the CPU must not touch: an
					 * ODP or dma-buf MR, or one the module cannot pin
					 * (VM_IO/VM_PFNMAP, peer memory) */
	UNLOAD_WHY_WINDOW = 19,		/* the rkey is a memory window's: the NIC checks its
					 * binding */
	/* Adaptive kept a write off direct although direct could take it, because: */
	UNLOAD_WHY_COLD = 20,		/* another path's first samples (warm-up) */
	UNLOAD_WHY_EXPLORING = 21,	/* an exploration sample or a trial of another path */
	UNLOAD_WHY_BUDGET = 22,		/* the CPU budget (cpu_budget_pct) was spent */
	UNLOAD_WHY_COST = 23,		/* its estimates: another path is cheaper, or direct
					 * not by enough to pay the hysteresis and the fence */
	/* The remote path (taken only when UNLOAD_PATH=remote forces it): */
	UNLOAD_WHY_LOCAL_PEER = 24,	/* the peer is on this host: direct's job */
	UNLOAD_WHY_NO_CHANNEL = 25,	/* no channel to the peer host's module (it has
					 * none, it does not answer, or it refused our key) */
	UNLOAD_WHY_NO_KEY = 26,		/* this host's module has no channel key (channel/key)
					 * and channel/auth is "key": the channel is closed */
	UNLOAD_WHY_NO_MAPPING = 27,	/* the mapped path's write was placed by the module's
					 * copy: no mapping of its target was granted, or the
					 * responder was busy or the mapping revoked at the copy */
	UNLOAD_WHY_COUNT = 28,
};

/*
 * The counters page of a session: one page, mapped read-write by its session only.
 * Userspace adds to writes[]/bytes[] of the offload, inline, stage and remote paths, to
 * fences and to why_not[] with relaxed atomic adds (__atomic_fetch_add(..,
 * __ATOMIC_RELAXED)). writes[UNLOAD_PATH_DIRECT] and bytes[UNLOAD_PATH_DIRECT] are the
 * direct writes the process placed itself, through mappings (UNLOAD_IOC_MAP), shown as
 * reported/writes_mapped and bytes_mapped: the module counts its own copies itself, in the
 * kernel, and shows them in /sys/kernel/unload/stats/. It folds the rest into /sys/kernel/unload/reported/ (what
 * sessions claim: any process can write its own page) when they are read and when the
 * session closes. Counters only grow; a stats reset does not touch the page.
 */
struct unload_counters {
	__u64 writes[UNLOAD_PATH_COUNT];	/* writes per path (enum unload_path) */
	__u64 bytes[UNLOAD_PATH_COUNT];		/* payload bytes per path */
	__u64 fences;				/* fences waited before a direct write */
	__u64 why_not[UNLOAD_WHY_COUNT];	/* writes off their preferred path, per
						 * enum unload_why (userspace adds) */
	__u64 reserved[1];			/* zero; the page is 4 KiB anyway */
};

/* --- ioctls ------------------------------------------------------------------ */

/*
 * 0xE7 is free in Documentation/userspace-api/ioctl/ioctl-number.rst (checked against
 * 6.1 and later lists); 0xB5, used before ABI 2, is uapi/linux/rpmsg.h's.
 */
#define UNLOAD_IOC_MAGIC 0xE7

/*
 * UNLOAD_IOC_HELLO: the handshake, required before any other command of the session
 * (they fail with -EPROTO until it succeeded). In: abi_version. Out: everything else.
 * Fails with -EPROTO (after filling the out fields) when abi_version differs from the
 * module's UNLOAD_ABI_VERSION.
 */
struct unload_hello {
	__u32 abi_version;	/* in: the UNLOAD_ABI_VERSION userspace was built with;
				 * out: the module's */
	__u32 page_size;	/* out: PAGE_SIZE */
	__u32 control_size;	/* out: bytes to mmap at UNLOAD_MMAP_CONTROL */
	__u32 counters_size;	/* out: bytes to mmap at UNLOAD_MMAP_COUNTERS */
	__u32 max_batch;	/* out: most requests per UNLOAD_IOC_SUBMIT */
	__u32 max_iov;		/* out: most iovec entries per request */
	__u64 session_id;	/* out: unique id of this session (for logs) */
	__u64 reserved[4];	/* in: zero; out: zero */
};

/* Largest device name (IB_DEVICE_NAME_MAX). */
#define UNLOAD_IBDEV_NAME_MAX 64

/*
 * UNLOAD_IOC_REG_QP: register a QP of the caller with the session, so that it may
 * send direct writes and receive them. The module looks the QP up in the RDMA core
 * by (device, qp_num) and refuses it (-ESRCH) when it does not exist or (-EPERM) when
 * it was not created by the process that opened this session. It also reports what
 * the RDMA core knows of its connection. Registering the same QP again refreshes the
 * report (call it after the QP reaches RTS) and revokes every mapping (UNLOAD_IOC_MAP)
 * that names it. Everything is checked again on every
 * request (pairing both ways, states, access flags). At most UNLOAD_MAX_QPS per
 * session (-ENOSPC), and user_registrations_max QPs and regions per user (-EDQUOT;
 * registering a registered QP again charges nothing).
 */
struct unload_qp_reg {
	char ibdev[UNLOAD_IBDEV_NAME_MAX];	/* in: device name (ibv_get_device_name),
						 * NUL-terminated */
	__u32 qp_num;		/* in: the QP's number (ibv_qp->qp_num) */
	__u32 flags;		/* in: zero */
	__u32 state;		/* out: enum ib_qp_state (IBV_QPS_*) now */
	__u32 dest_qp_num;	/* out: the connected peer's QPN (RC, >= RTR), else 0 */
	__u32 handle;		/* in: zero; out: the registration's handle in this
				 * session (non-zero, stable while registered): name
				 * the sender QP by it in unload_direct_req */
	__u32 peer_flags;	/* out: UNLOAD_PEER_* */
	__u32 busy_slot;	/* in: zero; out: the QP's byte in the busy page */
	__u32 reserved0;	/* in: zero; out: zero */
	__u64 reserved[3];	/* in: zero; out: zero */
};

/* peer_flags */
#define UNLOAD_PEER_LOCAL	(1U << 0)	/* the destination GID is one of this host's */
#define UNLOAD_PEER_PAIRED	(1U << 1)	/* the peer QP is registered by a session whose
						 * QP names this one back: direct may work */
#define UNLOAD_PEER_POISONED	(1U << 2)	/* a request on this QP or its peer failed a
						 * check: it never goes direct again */

/*
 * UNLOAD_IOC_UNREG_QP: forget a registered QP. In: ibdev, qp_num. -ENOENT if unknown.
 * A registration holds its RDMA device: unregister when the QP is destroyed (QP numbers
 * are reused). When the RDMA core removes a device (rdma link delete, driver unload) the
 * module forgets its QPs by itself, and registering one fails with -ENODEV.
 */

/* Access bits of a region; equal to IBV_ACCESS_* / IB_ACCESS_*. */
#define UNLOAD_ACCESS_LOCAL_WRITE	(1U << 0)
#define UNLOAD_ACCESS_REMOTE_WRITE	(1U << 1)
#define UNLOAD_ACCESS_REMOTE_READ	(1U << 2)

/*
 * UNLOAD_IOC_REG_REGION: tell the module about a memory region the caller registered
 * (ibv_reg_mr: iova = addr; ibv_reg_mr_iova2: flag UNLOAD_REGION_IOVA and `iova`), so
 * that requests may name it: as the local source of a direct write (by lkey, the source
 * given by process address) and, when `access` has UNLOAD_ACCESS_REMOTE_WRITE, as its
 * target (by rkey, the target given by iova, as on the wire). The module finds the RDMA
 * core's MR on device `ibdev` with these keys and refuses the registration (-ESRCH)
 * unless it is a user MR created by the process that opened the session, whose iova and
 * length are exactly the iova and length given. The RDMA core keeps no process address
 * of a user MR that a module can read, so `addr` is the owner's word: the module pins
 * the owner's own pages there, so a wrong one can only misplace writes into memory the
 * owner could write anyway (docs/security.md).
 * Keys are per device. A target's pages are pinned by the module for writing; they are
 * the pages the MR has pinned and charged to RLIMIT_MEMLOCK already, so they are not
 * charged again (the module's own pins are bounded per process by RLIMIT_MEMLOCK, unless
 * the opener has CAP_IPC_LOCK; a page range registered in several sessions counts once). Every request re-resolves the MR and checks it again
 * (keys, PD, iova, length): a deregistered or re-registered MR is never written.
 * Access is what the caller declares (ibv_mr has none to read); the shim updates it
 * at ibv_rereg_mr by deregistering and registering again.
 * Errors: -EINVAL (length 0, overflow, unknown bits), -ENODEV (no such device), -ESRCH
 * (no such MR of the caller), -EEXIST (already registered), -ENOSPC (more than
 * UNLOAD_MAX_REGIONS), -EDQUOT (the user's user_registrations_max QPs and regions
 * registered already), -ENOMEM (also over the pin bound), -EFAULT.
 */
struct unload_region_reg {
	char ibdev[UNLOAD_IBDEV_NAME_MAX];	/* in: the MR's device name, NUL-terminated */
	__u64 addr;		/* in: start in the caller's address space (ibv_mr->addr) */
	__u64 length;		/* in: bytes (ibv_mr->length) */
	__u32 lkey;		/* in: ibv_mr->lkey */
	__u32 rkey;		/* in: ibv_mr->rkey */
	__u32 access;		/* in: UNLOAD_ACCESS_* the MR was registered with */
	__u32 flags;		/* in: zero or UNLOAD_REGION_IOVA */
	__u64 handle;		/* out: the region's handle in this session (non-zero) */
	__u64 pinned_pages;	/* out: pages pinned for it */
	__u64 iova;		/* in: with UNLOAD_REGION_IOVA, the MR's iova (the address
				 * requests name, ibv_reg_mr_iova2); else zero, and the
				 * iova is addr */
	__u64 reserved[1];	/* in: zero; out: zero */
};
/* flags: the MR's iova is `iova`, not `addr`. */
#define UNLOAD_REGION_IOVA	(1U << 0)

/* Most QPs and regions one session may register. */
#define UNLOAD_MAX_QPS		4096
#define UNLOAD_MAX_REGIONS	65536

/*
 * UNLOAD_IOC_DEREG_REGION: unpublish a region (no new request can find it), wait for
 * the copies in flight into it, then unpin. In: handle.
 */
struct unload_region_dereg {
	__u64 handle;		/* in: from UNLOAD_IOC_REG_REGION */
	__u32 flags;		/* in: zero */
	__u32 reserved0;	/* in: zero */
	__u64 reserved[2];	/* in: zero */
};

/*
 * UNLOAD_IOC_ARENA_ALLOC: allocate a staging arena of `length` bytes (rounded up to
 * pages) of zeroed, pinned kernel memory, charged to RLIMIT_MEMLOCK and to the memory
 * cgroup of the caller. Map it with
 * mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, mmap_offset), then
 * ibv_reg_mr it once. It stays allocated until UNLOAD_IOC_ARENA_FREE or close; its
 * pages, and their charge, live until the last mapping (and region) of them goes too.
 * Only the opener's process allocates and maps arenas (-EPERM).
 */
struct unload_arena {
	__u64 length;		/* in: bytes (1 .. 1 GiB); out: rounded to pages */
	__u32 id;		/* out (ALLOC) / in (FREE): the arena's id */
	__u32 flags;		/* in: zero */
	__u64 mmap_offset;	/* out: the mmap offset of the arena */
	__u64 reserved[2];	/* in: zero; out: zero */
};

/* One segment of a request's local source (an ibv_sge). */
struct unload_iov {
	__u64 addr;		/* user address in the submitter's address space */
	__u64 len;		/* bytes */
	__u32 lkey;		/* the segment's lkey: a region registered in this session */
	__u32 reserved;		/* zero */
};

/* Most iovec entries per request, most requests per batch. */
#define UNLOAD_MAX_IOV		32
#define UNLOAD_MAX_BATCH	256
/* Longest UNLOAD_REQ_INLINE request: above every RNIC's max_inline_data. */
#define UNLOAD_MAX_INLINE	1024

/*
 * Why the module refused a direct write. Userspace is never told (every refusal is
 * result -EACCES, so that a peer cannot probe keys or bounds); root reads the count of
 * each in /sys/kernel/unload/stats/direct_denied_<name> (0400), with <name> the
 * lower-case suffix. A refused request placed nothing. The reasons marked (violation)
 * are what an RNIC answers with a NAK or a local error: after one, the sender QP (and,
 * when the responder fails it, its peer) is poisoned and never goes direct again.
 */
enum unload_deny {
	UNLOAD_DENY_NONE = 0,		/* accepted (result 0) */
	UNLOAD_DENY_DISABLED = 1,	/* enabled = 0 or direct_max = 0 */
	UNLOAD_DENY_INVALID = 2,	/* malformed request (flags, iov, reserved) */
	UNLOAD_DENY_QP_UNREGISTERED = 3,/* sender QP not registered here (or ambiguous) */
	UNLOAD_DENY_QP_NOT_OWNED = 4,	/* sender QP gone or not the opener's */
	UNLOAD_DENY_QP_STATE = 5,	/* sender QP not an RC QP in RTS with a GRH */
	UNLOAD_DENY_PEER_UNKNOWN = 6,	/* no live session registered the peer QP */
	UNLOAD_DENY_PEER_UNPAIRED = 7,	/* the peer QP is not connected back exactly */
	UNLOAD_DENY_RKEY = 8,		/* no live target MR the module knows with this rkey
					 * (a memory window, say): the NIC judges it */
	UNLOAD_DENY_PD = 9,		/* (violation) MR's PD is not the peer QP's PD */
	UNLOAD_DENY_ACCESS = 10,	/* (violation) MR or peer QP lacks remote write */
	UNLOAD_DENY_BOUNDS = 11,	/* (violation) target range not inside the MR */
	UNLOAD_DENY_LENGTH = 12,	/* length 0, or above direct_max */
	UNLOAD_DENY_FAULT = 13,		/* the segment list or inline data could not be
					 * read */
	UNLOAD_DENY_LKEY = 14,		/* (violation, the sender's only) a source segment
					 * outside its lkey's live MR, or on another PD than
					 * the sender QP's */
	UNLOAD_DENY_SOURCE = 15,	/* a source lkey not registered here (the NIC judges) */
	UNLOAD_DENY_POISONED = 16,	/* the pair failed a check before */
	UNLOAD_DENY_PEER_REFUSED = 17,	/* (remote, the sender's) the target host's module
					 * refused it: its reason is counted there, in
					 * stats/remote_refused_<name>, and never sent */
	UNLOAD_DENY_COUNT = 18,
};

/*
 * One direct write: place `length` bytes from the local source at remote_addr of the
 * region `rkey` names in the session of the sender QP's connected peer.
 * Local source: if iov_count is 0, `iov` is the address of `length` contiguous bytes
 * of the region `lkey` names; otherwise `iov` points to iov_count struct unload_iov
 * whose lengths add up to `length` (and `lkey` is zero). Every check an RNIC makes is
 * made on this request, at this moment; the source is pinned before anything of the
 * peer is looked at. Placement is in ascending address order, the last 8 bytes last,
 * stored with release semantics.
 */
struct unload_direct_req {
	__u32 qp_num;		/* in: the sender's QP (registered in this session) */
	__u32 rkey;		/* in: the peer's rkey */
	__u64 remote_addr;	/* in: target address in the peer's region */
	__u64 length;		/* in: bytes */
	__u64 iov;		/* in: source address or struct unload_iov array */
	__u32 iov_count;	/* in: 0 (contiguous) .. UNLOAD_MAX_IOV */
	__u32 lkey;		/* in: the source's lkey when iov_count is 0, else zero */
	__s32 result;		/* out: 0 placed; -EACCES refused (any reason: the caller
				 * posts the request to the NIC, which reports its own
				 * error); -EINVAL malformed */
	__u32 flags;		/* in: zero or UNLOAD_REQ_INLINE */
	__u32 qp_handle;	/* in: the sender QP's handle from UNLOAD_IOC_REG_QP
				 * (QPNs are per device), or 0: the session's only
				 * registered QP numbered qp_num */
	__u32 reserved;		/* in: zero */
};

/*
 * The program posted the write with IBV_SEND_INLINE: its source is `length` (at most
 * UNLOAD_MAX_INLINE) bytes of the submitter's memory at `iov`, registered or not
 * (iov_count and lkey zero), read in with the batch before any request runs, as the NIC
 * reads inline data at post time: no lkey is checked, and the buffer is free when the
 * submission returns.
 */
#define UNLOAD_REQ_INLINE	(1U << 0)
#define UNLOAD_REQ_FLAGS	UNLOAD_REQ_INLINE

/*
 * UNLOAD_IOC_SUBMIT: run `count` requests of the array at `reqs` in order, each
 * independently; writes the result of each. The ioctl returns 0 and sets
 * `done` to the number of requests processed (all of them, unless it failed reading
 * or writing the array: then -EFAULT and `done` tells how far it got; or
 * UNLOAD_SUBMIT_STOP ended it). At most UNLOAD_MAX_BATCH per call.
 */
struct unload_submit {
	__u64 reqs;		/* in: struct unload_direct_req array */
	__u32 count;		/* in: entries (0 .. UNLOAD_MAX_BATCH) */
	__u32 flags;		/* in: UNLOAD_SUBMIT_* */
	__u32 done;		/* out: entries processed */
	__u32 accepted;		/* out: entries with result 0 */
	__u64 reserved[2];	/* in: zero */
};

/*
 * Stop after the first request that is not placed: it counts in `done`, the ones after
 * it are not looked at. A post list's writes keep their order this way: the caller
 * sends the refused one to the NIC, and what follows it waits for the NIC's turn.
 */
#define UNLOAD_SUBMIT_STOP	(1U << 0)
/*
 * Every request goes to the host its sender QP is connected to: this module checks the
 * sender's side, the module there checks the responder's and places it (the remote path,
 * docs/design.md). A request's result: 0 placed; -EACCES refused with nothing placed
 * (post it to the NIC, which gives the responder's own verdict); -ECOMM sent and not
 * answered: it may have been placed, so it must not be sent again (complete it as the NIC
 * completes a write to a peer that stopped answering); -EINVAL malformed.
 */
#define UNLOAD_SUBMIT_REMOTE	(1U << 1)
/* The longest remote request: one channel message (1 MiB) less its write header. */
#define UNLOAD_REMOTE_MAX_LEN	((1U << 20) - 32)
#define UNLOAD_SUBMIT_FLAGS	(UNLOAD_SUBMIT_STOP | UNLOAD_SUBMIT_REMOTE)

/*
 * io_uring: IORING_OP_URING_CMD on the /dev/unload fd with cmd_op UNLOAD_URING_SUBMIT
 * and this struct in the SQE's command area (16 bytes: fits a 64-byte SQE). The
 * completion's res is the number of requests processed, or a negative errno; the
 * per-request results are written into the array as for UNLOAD_IOC_SUBMIT.
 */
struct unload_uring_submit {
	__u64 reqs;		/* struct unload_direct_req array */
	__u32 count;		/* entries (0 .. UNLOAD_MAX_BATCH) */
	__u32 flags;		/* UNLOAD_SUBMIT_* */
};
#define UNLOAD_URING_SUBMIT	0x5501

/*
 * io_uring: IORING_OP_URING_CMD with cmd_op UNLOAD_URING_REMOTE submits one remote write
 * (the request as UNLOAD_SUBMIT_REMOTE takes it, its result field zero) without waiting
 * for the network. The request, its segment list and its bytes are read and checked at
 * issue; the write is then queued behind its sender QP's earlier ones, which the module
 * sends one at a time, and its CQE's res is its result once the target answered:
 *   0            placed;
 *   -EACCES      refused, nothing placed (post it to the NIC, which gives its verdict);
 *   -ECOMM       sent and not answered: it may have been placed (complete it as the NIC
 *                completes a write to a peer that stopped answering);
 *   -ECANCELED   not sent: an earlier write of the same epoch on its QP was not placed
 *                (post it to the NIC after that one);
 *   -EBUSY       not sent: the session has UNLOAD_REMOTE_QUEUE_MAX writes or
 *                UNLOAD_REMOTE_QUEUE_BYTES bytes queued (as -ECANCELED, for those after);
 *   -EINVAL      malformed; -EFAULT the request could not be read; -EPERM not the
 *                opener's process.
 * Every result but 0 ends the epoch on that QP: its later writes of the same epoch are
 * cancelled unsent, in order, so none is placed ahead of one the NIC has still to carry.
 * The submitter takes a new epoch once it has handed the failed one's writes to the NIC.
 */
struct unload_uring_remote {
	__u64 req;		/* struct unload_direct_req */
	__u32 epoch;		/* the submitter's, per QP */
	__u32 reserved;		/* zero */
};
#define UNLOAD_URING_REMOTE	0x5502
#define UNLOAD_REMOTE_QUEUE_MAX		1024
#define UNLOAD_REMOTE_QUEUE_BYTES	(64U << 20)

#define UNLOAD_IOC_HELLO	_IOWR(UNLOAD_IOC_MAGIC, 0x00, struct unload_hello)
#define UNLOAD_IOC_REG_QP	_IOWR(UNLOAD_IOC_MAGIC, 0x01, struct unload_qp_reg)
#define UNLOAD_IOC_UNREG_QP	_IOWR(UNLOAD_IOC_MAGIC, 0x02, struct unload_qp_reg)
#define UNLOAD_IOC_REG_REGION	_IOWR(UNLOAD_IOC_MAGIC, 0x03, struct unload_region_reg)
#define UNLOAD_IOC_DEREG_REGION	_IOWR(UNLOAD_IOC_MAGIC, 0x04, struct unload_region_dereg)
#define UNLOAD_IOC_ARENA_ALLOC	_IOWR(UNLOAD_IOC_MAGIC, 0x05, struct unload_arena)
#define UNLOAD_IOC_ARENA_FREE	_IOWR(UNLOAD_IOC_MAGIC, 0x06, struct unload_arena)
#define UNLOAD_IOC_SUBMIT	_IOWR(UNLOAD_IOC_MAGIC, 0x07, struct unload_submit)

/* --- tools (unloadctl) ----------------------------------------------------------- */

/* The longest command name the module reports (TASK_COMM_LEN). */
#define UNLOAD_COMM_LEN 16

/*
 * One live session as UNLOAD_IOC_LIST_SESSIONS reports it, for display (unloadctl ps).
 * writes[]/bytes[] of the offload, inline, stage and remote paths and fences are what the
 * session's process added to its counters page: its own report, which the module
 * never uses for anything but this display and the statistics; the direct path's are
 * the module's own count. pinned_pages: pages the module holds pinned for the session
 * (regions and staging arenas).
 */
struct unload_session_info {
	__u64 session_id;	/* as UNLOAD_IOC_HELLO reported it to its process */
	__u32 pid;		/* the opener's process, in the caller's pid namespace */
	__u32 uid;		/* the opener's euid, in the caller's user namespace */
	char comm[UNLOAD_COMM_LEN];	/* the opener's command name now, NUL-terminated */
	__u32 qps;		/* QPs registered */
	__u32 regions;		/* regions registered */
	__u64 pinned_pages;	/* pages pinned for it */
	__u64 writes[UNLOAD_PATH_COUNT];	/* writes per path (enum unload_path) */
	__u64 bytes[UNLOAD_PATH_COUNT];		/* payload bytes per path */
	__u64 fences;		/* fences its process waited */
	__u64 reserved[4];	/* zero */
};

/* Most sessions one UNLOAD_IOC_LIST_SESSIONS reports (more are counted in `total`). */
#define UNLOAD_MAX_LIST_SESSIONS 4096

/*
 * UNLOAD_IOC_LIST_SESSIONS: the live sessions the caller may see, in the order they
 * were opened. A caller whose opener had CAP_SYS_ADMIN sees every session whose
 * process is in its pid namespace; anyone else sees only the sessions opened with its
 * own euid. The caller's own session is left out. Writes up to `count` entries to the
 * array at `sessions` (count 0: just the total); `total` is how many it could see (ask
 * again with a larger array if total > filled). Errors: -EINVAL (flags, reserved,
 * entry_size not sizeof(struct unload_session_info), count above
 * UNLOAD_MAX_LIST_SESSIONS), -EFAULT, -ENOMEM.
 */
struct unload_session_list {
	__u64 sessions;		/* in: struct unload_session_info array */
	__u32 count;		/* in: its entries (0 .. UNLOAD_MAX_LIST_SESSIONS) */
	__u32 entry_size;	/* in: sizeof(struct unload_session_info) */
	__u32 flags;		/* in: zero */
	__u32 filled;		/* out: entries written */
	__u32 total;		/* out: sessions the caller may see */
	__u32 reserved0;	/* in: zero */
	__u64 reserved[2];	/* in: zero */
};

/* --- the mapped path ------------------------------------------------------------- */

/*
 * The status words: UNLOAD_STATUS_SIZE bytes per session, mapped read-only at
 * UNLOAD_MMAP_STATUS (that length exactly), one 64-bit validity word per mapping slot. A
 * mapping is valid while its word equals its cookie; the module sets the word when it
 * grants the mapping and clears it when it revokes it (then a slot may be reused, under a
 * new cookie). A writer through a mapping:
 *
 *   if (__atomic_load_n(&status[slot], __ATOMIC_ACQUIRE) != cookie) -> not mapped
 *   memcpy(map + page_offset + (remote_addr - iova), src, len);
 *   __atomic_thread_fence(__ATOMIC_SEQ_CST);
 *   if (__atomic_load_n(&status[slot], __ATOMIC_RELAXED) != cookie) -> revoked meanwhile:
 *       the copy may have landed in the region or in the sink; ask the checked path
 *
 * A revocation clears the word, then zaps the mapping's PTEs before it returns; a touch
 * after that maps a sink page of the mapping's own, never the region's memory.
 */
#define UNLOAD_MAX_MAPPINGS	2048	/* per session: a QP's mapping each for 1024 QPs, twice over */
#define UNLOAD_STATUS_SIZE	(UNLOAD_MAX_MAPPINGS * 8)	/* bytes to mmap at UNLOAD_MMAP_STATUS */

/*
 * The busy page: one page per session, mapped PROT_READ | PROT_WRITE at UNLOAD_MMAP_BUSY
 * by its owner, one byte per registered QP (unload_qp_reg.busy_slot; UNLOAD_MAX_QPS of
 * them, taken in turn: a freed byte is reused last). The module sets a QP's byte to 1 when it registers it (again) and when it
 * forgets it; the owner's shim stores 0 while it knows that the QP's send queue holds no
 * NIC request and that none failed, and stores 1 before it posts one. A sender writes
 * through a mapping of this QP's peer region only while the byte, which it reads through a
 * read-only view of the page (unload_map.busy_offset), is 0, before and after its copy:
 * rxe moves a QP to ERR by itself when a request of its own fails (or one from its peer
 * is bad, which only the peer's own request can be) and says so only in that request's
 * completion. The checked submission reads the peer QP and sees it; a mapped write would
 * not. The byte is the responder's advice about itself: a wrong 0 lets its own peers
 * write only what they could write anyway. The checked submission also reads a sender QP
 * again only while its byte or its peer's is 1 or when it was registered since: a wrong 0
 * there misleads only its own program about its own writes.
 */

/*
 * UNLOAD_IOC_MAP: map the target region `rkey` names, of the peer QP the sender QP is
 * connected to, into the caller (its session's opener process only: -EPERM), when both
 * hold: a responder NIC would take a write on the pair now (both QPs registered and
 * unpoisoned, in RTS and RTR/RTS, paired, the responder with remote write; the rkey a
 * live region of the peer on the responder QP's PD with REMOTE_WRITE), else -EACCES; and
 * the caller may write the peer's memory anyway: `mem_fd` is the peer process's
 * /proc/<peer_pid>/mem open for writing, which the kernel opens only for a process with
 * ptrace attach rights over it (the rule process_vm_writev applies), else -EPERM with
 * peer_pid filled in (in the caller's pid namespace; 0 when not known). Then map
 * mmap_length bytes at mmap_offset (PROT_READ | PROT_WRITE, MAP_SHARED, never PROT_EXEC):
 * the region's pinned pages, the byte at iova at page_offset; and one page at busy_offset
 * (PROT_READ only): the responder's busy page, its QP's byte at busy_slot. Neither is
 * inherited by a child (VM_DONTCOPY) nor can be pinned (an MR on them fails).
 * The module revokes a mapping (docs/design.md, section 4) when either QP is registered
 * again or unregistered or poisoned, the region is deregistered, either session closes,
 * or the device goes; UNLOAD_IOC_UNMAP revokes one at the caller's request. Revoking does
 * not unmap: the caller munmaps. Other errors: -EINVAL (flags, reserved or out fields
 * not zero), -ENOSPC (UNLOAD_MAX_MAPPINGS in use), -ENOMEM, -EFAULT, -EBADF (mem_fd),
 * -EOPNOTSUPP (the module cannot tell a /proc/<pid>/mem file here: /proc not mounted).
 */
struct unload_map {
	__u32 qp_num;		/* in: the sender QP (registered in this session) */
	__u32 qp_handle;	/* in: its handle from UNLOAD_IOC_REG_QP */
	__u32 rkey;		/* in: the peer's rkey */
	__s32 mem_fd;		/* in: the peer's /proc/<pid>/mem, O_RDWR, or -1 */
	__u32 peer_pid;		/* out: the peer's process (also with -EPERM) */
	__u32 slot;		/* out: the mapping's word in the status page */
	__u64 cookie;		/* out: the word's value while the mapping is valid */
	__u64 iova;		/* out: the region's iova (what requests name) */
	__u64 length;		/* out: the region's length */
	__u64 mmap_offset;	/* out: where to mmap it */
	__u64 mmap_length;	/* out: bytes to mmap (whole pages) */
	__u64 page_offset;	/* out: where the byte at iova is in the mapping */
	__u32 flags;		/* in: zero */
	__u32 busy_slot;	/* in: zero; out: the responder QP's byte in the view */
	__u64 busy_offset;	/* in: zero; out: where to mmap (PROT_READ, one page)
				 * the view of the responder's busy page */
	__u64 reserved[1];	/* in: zero */
};

/*
 * UNLOAD_IOC_UNMAP: revoke the caller's mapping in `slot` if its cookie is `cookie`
 * (0 if it was revoked already); the caller munmaps it. -ENOENT: no such slot.
 */
struct unload_unmap {
	__u32 slot;		/* in */
	__u32 flags;		/* in: zero */
	__u64 cookie;		/* in: from UNLOAD_IOC_MAP */
	__u64 reserved[2];	/* in: zero */
};

#define UNLOAD_IOC_MAP		_IOWR(UNLOAD_IOC_MAGIC, 0x08, struct unload_map)
#define UNLOAD_IOC_UNMAP	_IOWR(UNLOAD_IOC_MAGIC, 0x09, struct unload_unmap)

/*
 * UNLOAD_IOC_QP_CHANGED: QP (ibdev, qp_num) was modified by the caller, which holds its
 * verbs objects but not its registration: a forked child whose parent registered it (the
 * uverbs file is inherited, a module session is not). Every registration of it by a
 * session of the caller's user then sees the change as after a REG_QP: the next request
 * reads it anew, its busy byte is raised and its mappings are revoked, before this call
 * returns. In: ibdev and qp_num, the rest zero (struct unload_qp_reg); nothing out.
 * -ENOENT: no session of the caller's user registered it. An older module: -ENOTTY.
 */
#define UNLOAD_IOC_QP_CHANGED	_IOWR(UNLOAD_IOC_MAGIC, 0x0a, struct unload_qp_reg)

/* 0x10 and up: commands of tools rather than of the shim's data path. */
#define UNLOAD_IOC_LIST_SESSIONS _IOWR(UNLOAD_IOC_MAGIC, 0x10, struct unload_session_list)

/*
 * The channel (docs/design.md, "The channel"): each module listens with the kernel's
 * rdma_cm (port space TCP, every address) on UNLOAD_CHANNEL_PORT and keeps one RC
 * connection per (local device and port, peer GID), shared by every process, to the
 * module of another host. Its messages carry at most UNLOAD_CHANNEL_SEGMENT payload bytes
 * each (one receive buffer); longer ones are segmented. The port is neither perftest's
 * (18515) nor NVMe-oF's (4420); a firewall between hosts must let it through.
 */
#define UNLOAD_CHANNEL_PORT	18520
#define UNLOAD_CHANNEL_SEGMENT	4056
#define UNLOAD_PROBE_MAX_LEN	(1U << 20)

/* A channel's state, as UNLOAD_IOC_CHANNEL_PROBE reports it. */
enum unload_channel_state {
	UNLOAD_CHANNEL_NONE = 0,	/* there was none: the connect failed */
	UNLOAD_CHANNEL_CONNECTING = 1,
	UNLOAD_CHANNEL_UP = 2,
	UNLOAD_CHANNEL_DOWN = 3,
};

/*
 * UNLOAD_IOC_CHANNEL_PROBE: is there an unload module at the peer, and how far? The
 * module connects to the peer's module over (ibdev, port) if it has no channel to it yet,
 * sends `length` bytes of a pattern it generates, which the peer's module sends back,
 * and checks them. 0 when every byte came back; else a negative errno, the figures
 * filled as far as the probe went: -ECONNREFUSED (no module listening there, or it
 * refused), -EHOSTUNREACH (no route, or no answer to the connect), -ETIMEDOUT (a connect
 * or an answer that did not come in time: seconds, never a hang), -ECONNRESET (the peer
 * went away), -ENETUNREACH (the route to the peer leaves by another device or port than
 * ibdev/port), -ENOKEY (this module has no channel key and channel/auth is "key"),
 * -EKEYREJECTED (the peer did not prove the key, or refused ours: a wrong key),
 * -EAFNOSUPPORT (peer_gid is not an IPv4-mapped GID), -EBADMSG (bytes came
 * back wrong), -EINVAL (length over UNLOAD_PROBE_MAX_LEN, an unknown flag, reserved
 * fields not zero, ibdev not NUL-terminated). Any user of /dev/unload may probe
 * (docs/security.md). With UNLOAD_PROBE_EXISTING it only asks a channel that is up
 * already, and never connects: -ENOTCONN when there is none, and nothing on the wire (what
 * the shim asks before ranking the remote path, so a peer without unload sees no change).
 */
#define UNLOAD_PROBE_EXISTING	(1U << 0)

struct unload_channel_probe {
	char ibdev[UNLOAD_IBDEV_NAME_MAX];	/* in: local device name, NUL-terminated */
	__u32 port;		/* in: its port (1..) */
	__u32 length;		/* in: payload bytes, 0 .. UNLOAD_PROBE_MAX_LEN */
	__u8 peer_gid[16];	/* in: the peer's GID: IPv4-mapped (::ffff:a.b.c.d), as RoCE
				 * v2 GIDs of IPv4 addresses are */
	__u32 flags;		/* in: UNLOAD_PROBE_EXISTING or zero */
	__u32 state;		/* out: enum unload_channel_state of the channel after it */
	__u64 rtt_ns;		/* out: send of the request to the check of its answer */
	__u64 channel_id;	/* out: the channel that carried it (unique per module load) */
	__u32 segments;		/* out: messages the request took */
	__u32 passive;		/* out: 1 when the peer opened the channel (we accepted it) */
	__u64 reserved[4];	/* in: zero; out: zero */
};

#define UNLOAD_IOC_CHANNEL_PROBE _IOWR(UNLOAD_IOC_MAGIC, 0x11, struct unload_channel_probe)

#endif /* _UAPI_LINUX_UNLOAD_H */
