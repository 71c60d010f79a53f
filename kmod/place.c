// SPDX-License-Identifier: GPL-2.0
/*
 * A write's bytes: where they come from (a request's source, checked and read from the
 * submitter's pinned regions, or bytes already in the kernel) and how they land in a
 * target region's pinned pages (ascending, the last 8 bytes last, with release
 * semantics). The direct submission (copy.c), the remote sender (remote.c) and the
 * remote target (target.c) share them, each with its own checks.
 */
#include <linux/highmem.h>
#include <linux/overflow.h>
#include <linux/sched.h>

#include "unload_kmod.h"

/*
 * Check a request's segments, its one (iov_count 0, filled from the request) or its list
 * as the batch read it in (`list`, NULL when that read faulted); *uiovp points at them.
 * Returns a reason, NONE when well formed.
 */
static u32 unload_src_load(const struct unload_direct_req *req, struct unload_iov *one,
			   const struct unload_iov *list, const struct unload_iov **uiovp)
{
	const struct unload_iov *uiov = one;
	unsigned int i, nr = 1;
	u64 total = 0, end;

	if (req->iov_count == 0) {
		one->addr = req->iov;
		one->len = req->length;
		one->lkey = req->lkey;
		one->reserved = 0;
	} else {
		if (req->iov_count > UNLOAD_MAX_IOV || req->lkey)
			return UNLOAD_DENY_INVALID;
		if (!list)
			return UNLOAD_DENY_FAULT;
		uiov = list;
		nr = req->iov_count;
	}
	for (i = 0; i < nr; i++)
		if (uiov[i].reserved || !uiov[i].len ||
		    check_add_overflow(total, uiov[i].len, &total) ||
		    check_add_overflow(uiov[i].addr, uiov[i].len, &end))
			return UNLOAD_DENY_INVALID;
	if (total != req->length)
		return UNLOAD_DENY_INVALID;
	*uiovp = uiov;
	return UNLOAD_DENY_NONE;
}

/*
 * The checks every request takes before its path's own: its shape, the module enabled,
 * its length within direct_max and the path's own max_len, and its source loaded (an
 * inline request's bytes as read in, or its segments well formed: `list` and `one` as
 * unload_src_load takes them, `seg` room for the resolved ones). On NONE, src is ready and
 * *uiovp names the segments to resolve (src->inl NULL). *result: -EINVAL for a malformed
 * request, else -EACCES (the caller asks the NIC).
 */
u32 unload_req_begin(const struct unload_direct_req *req, u64 max_len,
		     const struct unload_iov *list, const u8 *inl, struct unload_seg *seg,
		     struct unload_iov *one, struct unload_src *src,
		     const struct unload_iov **uiovp, int *result)
{
	const struct unload_tunables *t = &unload_ctl->tunables;
	u32 deny, direct_max;

	*result = -EINVAL;
	if ((req->flags && !unload_req_inline(req)) || req->reserved || req->result ||
	    req->iov_count > UNLOAD_MAX_IOV)
		return UNLOAD_DENY_INVALID;
	*result = -EACCES;	/* every refusal alike: the caller asks the NIC */
	direct_max = READ_ONCE(t->direct_max);
	if (!READ_ONCE(t->enabled) || !direct_max)
		return UNLOAD_DENY_DISABLED;
	if (!req->length || req->length > direct_max || req->length > max_len)
		return UNLOAD_DENY_LENGTH;
	if (req->flags) {
		if (!inl)
			return UNLOAD_DENY_FAULT;
		src->inl = inl;
		return UNLOAD_DENY_NONE;
	}
	deny = unload_src_load(req, one, list, uiovp);
	if (deny == UNLOAD_DENY_INVALID)
		*result = -EINVAL;
	src->seg = req->iov_count ? seg : src->one;
	return deny;
}

void unload_src_put(struct unload_src *src)
{
	while (src->nr)
		unload_region_put(src->seg[--src->nr].r);
}

/* A cursor over the source: segment seg, byte off in it. */
struct unload_src_pos {
	unsigned int seg;
	u64 off;
};

/* Copy n bytes from the source cursor to dst (a kernel mapping). */
static void unload_src_read(const struct unload_src *src, struct unload_src_pos *at,
			    u8 *dst, size_t n)
{
	if (src->inl) {
		memcpy(dst, src->inl + at->off, n);
		at->off += n;
		return;
	}
	while (n) {
		const struct unload_seg *sg = &src->seg[at->seg];
		u64 abs = offset_in_page(sg->r->addr) + sg->off + at->off;
		size_t chunk = min_t(u64, n, min_t(u64, PAGE_SIZE - offset_in_page(abs),
						 sg->len - at->off));
		void *s = kmap_local_page(sg->r->pages[abs >> PAGE_SHIFT]);

		memcpy(dst, s + offset_in_page(abs), chunk);
		kunmap_local(s);
		dst += chunk;
		n -= chunk;
		at->off += chunk;
		if (at->off == sg->len) {
			at->seg++;
			at->off = 0;
		}
	}
}

/*
 * Place len bytes of the source at byte offset off of region r: [0, len - tail)
 * ascending, then the last tail (<= 8) bytes, published with release semantics.
 * Nothing here faults: both sides are pinned regions.
 */
void unload_place(struct unload_region *r, u64 off, u64 len, const struct unload_src *src)
{
	u64 pos = offset_in_page(r->addr) + off;	/* from the first pinned page */
	u64 tail = min_t(u64, len, 8), body = len - tail;
	struct unload_src_pos at = {};
	u8 last[8];
	void *kaddr;
	u64 i;

	while (body) {
		unsigned int poff = offset_in_page(pos);
		size_t chunk = min_t(u64, body, PAGE_SIZE - poff);
		struct page *pg = r->pages[pos >> PAGE_SHIFT];

		kaddr = kmap_local_page(pg);
		unload_src_read(src, &at, kaddr + poff, chunk);
		kunmap_local(kaddr);
		flush_dcache_page(pg);
		pos += chunk;
		body -= chunk;
		cond_resched();
	}

	unload_src_read(src, &at, last, tail);
	if (tail == 8 && IS_ALIGNED(pos, 8) && offset_in_page(pos) <= PAGE_SIZE - 8) {
		struct page *pg = r->pages[pos >> PAGE_SHIFT];
		u64 v;

		memcpy(&v, last, 8);
		kaddr = kmap_local_page(pg);
		/* Everything before becomes visible no later than these 8 bytes. */
		smp_store_release((u64 *)(kaddr + offset_in_page(pos)), v);
		kunmap_local(kaddr);
		flush_dcache_page(pg);
		return;
	}
	smp_wmb();	/* the body before the tail */
	for (i = 0; i < tail; i++, pos++) {
		struct page *pg = r->pages[pos >> PAGE_SHIFT];
		u8 *p;

		kaddr = kmap_local_page(pg);
		p = kaddr + offset_in_page(pos);
		WRITE_ONCE(*p, last[i]);
		kunmap_local(kaddr);
		flush_dcache_page(pg);
	}
}

/* Read the whole source, len bytes, into buf (kernel memory): a remote write's payload. */
void unload_src_gather(const struct unload_src *src, u8 *buf, u64 len)
{
	struct unload_src_pos at = {};

	unload_src_read(src, &at, buf, len);
}

/*
 * Place len bytes at data (kernel memory: a remote write's payload as received) at byte
 * offset off of region r, as unload_place does; the caller checked the bounds and holds
 * r and its MR.
 */
void unload_place_bytes(struct unload_region *r, u64 off, const u8 *data, u64 len)
{
	struct unload_src src = { .inl = data };

	unload_place(r, off, len, &src);
}
