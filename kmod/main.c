// SPDX-License-Identifier: GPL-2.0
/*
 * unload.ko: the kernel half of unload (docs/design.md, section 4). /dev/unload (one session
 * per open: ioctls, mmap of the control and counters pages and staging arenas,
 * io_uring uring_cmd for batched copies) and /sys/kernel/unload/.
 */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/uaccess.h>

#include "unload_kmod.h"
#include "unload_channel.h"
#include "compat.h"
#include "version.h"

struct kmem_cache *unload_session_cache;
struct kmem_cache *unload_qp_cache;
struct kmem_cache *unload_region_cache;
struct kmem_cache *unload_arena_cache;

static int unload_open(struct inode *inode, struct file *file)
{
	struct unload_session *sess = unload_session_open(file);

	if (IS_ERR(sess))
		return PTR_ERR(sess);
	file->private_data = sess;
	return 0;
}

static int unload_release(struct inode *inode, struct file *file)
{
	unload_session_close(file->private_data);
	return 0;
}

static long unload_ioctl_hello(struct unload_session *sess, void __user *arg)
{
	struct unload_hello h __uninitialized;	/* read in whole; inlined in every ioctl's */
	u32 theirs;
	long ret = 0;

	if (copy_from_user(&h, arg, sizeof(h)))
		return -EFAULT;
	if (h.page_size || h.control_size || h.counters_size || h.max_batch || h.max_iov ||
	    h.session_id || h.reserved[0] || h.reserved[1] || h.reserved[2] || h.reserved[3])
		return -EINVAL;
	theirs = h.abi_version;
	h.abi_version = UNLOAD_ABI_VERSION;
	h.page_size = PAGE_SIZE;
	h.control_size = PAGE_SIZE;
	h.counters_size = PAGE_SIZE;
	h.max_batch = UNLOAD_MAX_BATCH;
	h.max_iov = UNLOAD_MAX_IOV;
	h.session_id = sess->id;
	if (theirs != UNLOAD_ABI_VERSION)
		ret = -EPROTO;
	if (copy_to_user(arg, &h, sizeof(h)))
		return -EFAULT;
	if (!ret)
		smp_store_release(&sess->hello, 1);	/* set once; read without a lock */
	return ret;
}

static bool unload_said_hello(struct unload_session *sess)
{
	return smp_load_acquire(&sess->hello);
}

static long unload_ioctl(struct file *file, unsigned int cmd, unsigned long uarg)
{
	struct unload_session *sess = file->private_data;
	void __user *arg = (void __user *)uarg;

	switch (cmd) {
	case UNLOAD_IOC_HELLO:
		return unload_ioctl_hello(sess, arg);
	case UNLOAD_IOC_REG_QP:
	case UNLOAD_IOC_UNREG_QP:
	case UNLOAD_IOC_REG_REGION:
	case UNLOAD_IOC_DEREG_REGION:
	case UNLOAD_IOC_ARENA_ALLOC:
	case UNLOAD_IOC_ARENA_FREE:
	case UNLOAD_IOC_SUBMIT:
	case UNLOAD_IOC_MAP:
	case UNLOAD_IOC_UNMAP:
	case UNLOAD_IOC_QP_CHANGED:
	case UNLOAD_IOC_LIST_SESSIONS:
	case UNLOAD_IOC_CHANNEL_PROBE:
		break;
	default:
		return -ENOTTY;
	}
	if (!unload_said_hello(sess))
		return -EPROTO;

	switch (cmd) {
	case UNLOAD_IOC_REG_QP:
		return unload_ioctl_reg_qp(sess, arg);
	case UNLOAD_IOC_UNREG_QP:
		return unload_ioctl_unreg_qp(sess, arg);
	case UNLOAD_IOC_REG_REGION:
		return unload_ioctl_reg_region(sess, arg);
	case UNLOAD_IOC_DEREG_REGION:
		return unload_ioctl_dereg_region(sess, arg);
	case UNLOAD_IOC_ARENA_ALLOC:
		return unload_ioctl_arena_alloc(sess, file, arg);
	case UNLOAD_IOC_ARENA_FREE:
		return unload_ioctl_arena_free(sess, arg);
	case UNLOAD_IOC_SUBMIT:
		return unload_ioctl_submit(sess, arg);
	case UNLOAD_IOC_MAP:
		return unload_ioctl_map(sess, file, arg);
	case UNLOAD_IOC_UNMAP:
		return unload_ioctl_unmap(sess, arg);
	case UNLOAD_IOC_QP_CHANGED:
		return unload_ioctl_qp_changed(sess, arg);
	case UNLOAD_IOC_LIST_SESSIONS:
		return unload_ioctl_list_sessions(sess, file, arg);
	case UNLOAD_IOC_CHANNEL_PROBE:
		return unload_ioctl_channel_probe(sess, arg);
	}
	return -ENOTTY;
}

/* One page the module writes and userspace only reads (the control page). */
static int unload_mmap_read_only(struct vm_area_struct *vma, struct page *page)
{
	if (vma->vm_end - vma->vm_start != PAGE_SIZE)
		return -EINVAL;
	if (vma->vm_flags & VM_WRITE)
		return -EPERM;
	unload_vm_flags_clear(vma, VM_MAYWRITE);
	unload_vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	return vm_insert_page(vma, vma->vm_start, page);
}

/* The session's status words, all of them, read-only. */
static int unload_mmap_status(struct vm_area_struct *vma, struct unload_session *sess)
{
	unsigned long n = UNLOAD_STATUS_PAGES;

	if (vma->vm_end - vma->vm_start != UNLOAD_STATUS_PAGES * PAGE_SIZE)
		return -EINVAL;
	if (vma->vm_flags & VM_WRITE)
		return -EPERM;
	unload_vm_flags_clear(vma, VM_MAYWRITE);
	unload_vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	return vm_insert_pages(vma, vma->vm_start, sess->status_pages, &n);
}

static int unload_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct unload_session *sess = file->private_data;
	unsigned long size = vma->vm_end - vma->vm_start;
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT;

	if (!unload_said_hello(sess))
		return -EPROTO;
	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;

	if (off == UNLOAD_MMAP_CONTROL)
		return unload_mmap_read_only(vma, virt_to_page(unload_ctl));
	if (off == UNLOAD_MMAP_STATUS)
		return unload_mmap_status(vma, sess);
	if (off == UNLOAD_MMAP_COUNTERS) {
		if (size != PAGE_SIZE)
			return -EINVAL;
		unload_vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
		return vm_insert_page(vma, vma->vm_start, sess->counters_page);
	}
	if (off == UNLOAD_MMAP_BUSY) {
		/* The owner's shim writes it; nobody else's process maps it. */
		if (size != PAGE_SIZE || vma->vm_mm != sess->mm)
			return -EINVAL;
		unload_vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
		return vm_insert_page(vma, vma->vm_start, sess->busy_page);
	}
	if (off >= UNLOAD_MMAP_BUSY_VIEW_BASE && off < UNLOAD_MMAP_MAP_BASE) {
		u64 id = (off - UNLOAD_MMAP_BUSY_VIEW_BASE) >> PAGE_SHIFT;

		if (id >= UNLOAD_MAX_MAP_IDS)
			return -EINVAL;
		return unload_map_mmap(sess, vma, id, true);
	}
	if (off >= UNLOAD_MMAP_MAP_BASE) {
		u64 id = (off - UNLOAD_MMAP_MAP_BASE) / UNLOAD_MMAP_MAP_STRIDE;

		if ((off - UNLOAD_MMAP_MAP_BASE) % UNLOAD_MMAP_MAP_STRIDE || id >= UNLOAD_MAX_MAP_IDS)
			return -EINVAL;
		return unload_map_mmap(sess, vma, id, false);
	}
	if (off >= UNLOAD_MMAP_ARENA_BASE &&
	    (off - UNLOAD_MMAP_ARENA_BASE) % UNLOAD_MMAP_ARENA_STRIDE == 0) {
		u64 id = (off - UNLOAD_MMAP_ARENA_BASE) / UNLOAD_MMAP_ARENA_STRIDE;

		if (id > U32_MAX)
			return -EINVAL;
		return unload_arena_mmap(sess, vma, id);
	}
	return -EINVAL;
}

/*
 * io_uring: IORING_OP_URING_CMD with cmd_op UNLOAD_URING_SUBMIT, or UNLOAD_URING_REMOTE
 * (remote_queue.c: one remote write, completed when its target answers). Small batches run at
 * issue; larger ones are handed to io_uring's workers (-EAGAIN under NONBLOCK), which
 * run in the submitting process, so the submitter's ring is not held up by the copy.
 */
#define UNLOAD_URING_INLINE_BATCH 16

static int unload_uring_cmd(struct io_uring_cmd *ioucmd, unsigned int issue_flags)
{
	struct unload_session *sess = ioucmd->file->private_data;
	const struct unload_uring_submit *p;
	u32 count, flags, done, accepted;
	u64 reqs;
	int ret;

	if (ioucmd->cmd_op == UNLOAD_URING_REMOTE)
		return unload_said_hello(sess) ? unload_remote_issue(sess, ioucmd) : -EPROTO;
	if (ioucmd->cmd_op != UNLOAD_URING_SUBMIT)
		return -ENOTTY;
	p = unload_uring_cmd_payload(ioucmd);
	reqs = READ_ONCE(p->reqs);
	count = READ_ONCE(p->count);
	flags = READ_ONCE(p->flags);
	if (flags & ~UNLOAD_SUBMIT_FLAGS)
		return -EINVAL;
	if (!unload_said_hello(sess))
		return -EPROTO;
	if (count > UNLOAD_URING_INLINE_BATCH && (issue_flags & IO_URING_F_NONBLOCK))
		return -EAGAIN;
	ret = unload_submit_batch(sess, reqs, count, flags, &done, &accepted);
	/*
	 * Complete here, in whatever context io_uring issued us: 6.1 posts no CQE for a
	 * positive return from io-wq, so the count always goes through cmd_done.
	 */
	unload_uring_cmd_done(ioucmd, ret ? ret : done, issue_flags);
	return -EIOCBQUEUED;
}

static const struct file_operations unload_fops = {
	.owner = THIS_MODULE,	/* an open file pins the module: rmmod is refused */
	.open = unload_open,
	.release = unload_release,
	.unlocked_ioctl = unload_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = unload_mmap,
	.uring_cmd = unload_uring_cmd,
	.llseek = noop_llseek,
};

static struct miscdevice unload_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "unload",
	.fops = &unload_fops,
	.mode = 0666,		/* every check is per process: see docs/security.md */
};

/* Devices: registrations are taken on added ones; removal forgets them. */
static int unload_ib_add(struct ib_device *dev)
{
	return unload_device_added(dev);	/* remove() only for devices add() took */
}

static void unload_ib_remove(struct ib_device *dev, void *client_data)
{
	unload_channel_device_removed(dev);	/* before rdma_cm's removal, which waits for them */
	unload_device_removed(dev);
}

static struct ib_client unload_ib_client = {
	.name = "unload",
	.add = unload_ib_add,
	.remove = unload_ib_remove,
};

static int __init unload_init(void)
{
	int ret;

	unload_session_cache = KMEM_CACHE(unload_session, SLAB_ACCOUNT);
	if (!unload_session_cache)
		return -ENOMEM;
	unload_qp_cache = KMEM_CACHE(unload_qp, SLAB_ACCOUNT);
	if (!unload_qp_cache) {
		ret = -ENOMEM;
		goto err_destroy_session_cache;
	}
	unload_region_cache = KMEM_CACHE(unload_region, SLAB_ACCOUNT);
	if (!unload_region_cache) {
		ret = -ENOMEM;
		goto err_destroy_qp_cache;
	}
	unload_arena_cache = KMEM_CACHE(unload_arena_obj, SLAB_ACCOUNT);
	if (!unload_arena_cache) {
		ret = -ENOMEM;
		goto err_destroy_region_cache;
	}
	unload_maps_init();	/* without procfs's mem file, no mapping is granted */
	ret = unload_sysfs_init();
	if (ret)
		goto err_destroy_arena_cache;
	ret = ib_register_client(&unload_ib_client);
	if (ret)
		goto err_sysfs_exit;
	ret = unload_channel_init(&unload_ctl->channels_up);
	if (ret)
		goto err_unregister_client;
	ret = unload_remote_queue_init();
	if (ret)
		goto err_channel_exit;
	ret = misc_register(&unload_misc);
	if (ret)
		goto err_remote_queue_exit;
	pr_info("unload: loaded, version %s, ABI %d\n", UNLOAD_MODULE_VERSION, UNLOAD_ABI_VERSION);
	return 0;

err_remote_queue_exit:
	unload_remote_queue_exit();
err_channel_exit:
	unload_channel_exit();
err_unregister_client:
	ib_unregister_client(&unload_ib_client);
err_sysfs_exit:
	unload_sysfs_exit();
err_destroy_arena_cache:
	kmem_cache_destroy(unload_arena_cache);
err_destroy_region_cache:
	kmem_cache_destroy(unload_region_cache);
err_destroy_qp_cache:
	kmem_cache_destroy(unload_qp_cache);
err_destroy_session_cache:
	kmem_cache_destroy(unload_session_cache);
	return ret;
}

static void __exit unload_exit(void)
{
	misc_deregister(&unload_misc);
	unload_maps_exit();
	unload_remote_queue_exit();	/* idle: every session, and so every command, is gone */
	unload_channel_exit();
	ib_unregister_client(&unload_ib_client);
	unload_sysfs_exit();
	rcu_barrier();		/* the RCU frees of sessions, QPs and regions */
	kmem_cache_destroy(unload_arena_cache);
	kmem_cache_destroy(unload_region_cache);
	kmem_cache_destroy(unload_qp_cache);
	kmem_cache_destroy(unload_session_cache);
}

module_init(unload_init);
module_exit(unload_exit);

MODULE_LICENSE("GPL");
MODULE_AUTHOR("unload");
MODULE_DESCRIPTION("unload: kernel-assisted reversible RDMA offload");
MODULE_VERSION(UNLOAD_MODULE_VERSION);
