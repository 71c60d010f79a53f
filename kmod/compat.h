/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The few kernel API differences between the kernels unload.ko is built for
 * (Debian 12's 6.1 and 6.12). Everything else uses the API of both directly.
 */
#ifndef UNLOAD_COMPAT_H
#define UNLOAD_COMPAT_H

#include <linux/version.h>
#include <linux/mm.h>

#if __has_include(<linux/io_uring/cmd.h>)
#include <linux/io_uring/cmd.h>		/* 6.7+: struct io_uring_cmd moved here */
#define UNLOAD_HAVE_URING_CMD 1
#else
#include <linux/io_uring.h>		/* 6.1: struct io_uring_cmd is here */
#define UNLOAD_HAVE_URING_CMD 1
#endif

/* The command area of the SQE: 6.1 stores a pointer to it, 6.12 the SQE. */
static inline const void *unload_uring_cmd_payload(const struct io_uring_cmd *ioucmd)
{
#if __has_include(<linux/io_uring/cmd.h>)
	return io_uring_sqe_cmd(ioucmd->sqe);
#else
	return ioucmd->cmd;
#endif
}

/*
 * Post a uring_cmd's completion: res2 is ssize_t on 6.1, u64 on 6.12; Debian's 6.1
 * already has the issue_flags argument of later kernels.
 */
static inline void unload_uring_cmd_done(struct io_uring_cmd *ioucmd, ssize_t ret,
					 unsigned int issue_flags)
{
	io_uring_cmd_done(ioucmd, ret, 0, issue_flags);
}

/* vm_flags became read-only behind vm_flags_set() in 6.3. */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 3, 0)
static inline void unload_vm_flags_set(struct vm_area_struct *vma, unsigned long flags)
{
	vma->vm_flags |= flags;
}

static inline void unload_vm_flags_clear(struct vm_area_struct *vma, unsigned long flags)
{
	vma->vm_flags &= ~flags;
}
#else
static inline void unload_vm_flags_set(struct vm_area_struct *vma, unsigned long flags)
{
	vm_flags_set(vma, flags);
}

static inline void unload_vm_flags_clear(struct vm_area_struct *vma, unsigned long flags)
{
	vm_flags_clear(vma, flags);
}
#endif

#endif /* UNLOAD_COMPAT_H */
