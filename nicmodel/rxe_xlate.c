// SPDX-License-Identifier: GPL-2.0
/*
 * unload's NIC model: the translation cache of rxe_xlate.h.
 *
 * The parameters (rdma_rxe.xlate_entries, rdma_rxe.xlate_miss_ns) are read when a
 * device is created (entries) and at every miss (the penalty); 0 entries, the default,
 * leaves rxe as Debian ships it. Hits and misses count in the port's hw_counters
 * (xlate_hits, xlate_misses), so a test sees the model work without timing anything.
 */
#include <linux/delay.h>
#include <linux/hash.h>
#include <linux/log2.h>
#include <linux/moduleparam.h>
#include <linux/slab.h>
#include <linux/spinlock.h>

#include "rxe.h"
#include "rxe_xlate.h"

#define XLATE_WAYS		8
#define XLATE_ENTRIES_MAX	(1U << 20)
/* 2 ms: a sandbox's scale, where a NIC write itself takes 200 us (docs/perf/nic-model.md). */
#define XLATE_MISS_NS_MAX	2000000U

struct rxe_xlate_way {
	u64 key;	/* MR index and page, + 1 (0: empty) */
	u64 used;	/* the cache's clock at the last touch */
};

struct rxe_xlate {
	spinlock_t lock;	/* guards every set: the responder and requester tasks of
				 * several QPs translate at once */
	u32 set_bits;
	u64 clock;
	struct rxe_xlate_way way[];	/* (1 << set_bits) sets of XLATE_WAYS */
};

static unsigned int xlate_entries;
static unsigned int xlate_miss_ns;

static int xlate_param_set(const char *val, const struct kernel_param *kp, unsigned int min,
			   unsigned int max)
{
	unsigned int v;
	int ret = kstrtouint(val, 0, &v);

	if (ret)
		return ret;
	if (v && (v < min || v > max))
		return -ERANGE;
	WRITE_ONCE(*(unsigned int *)kp->arg, v);
	return 0;
}

static int xlate_entries_set(const char *val, const struct kernel_param *kp)
{
	return xlate_param_set(val, kp, XLATE_WAYS, XLATE_ENTRIES_MAX);
}

static int xlate_miss_ns_set(const char *val, const struct kernel_param *kp)
{
	return xlate_param_set(val, kp, 1, XLATE_MISS_NS_MAX);
}

static const struct kernel_param_ops xlate_entries_ops = {
	.set = xlate_entries_set,
	.get = param_get_uint,
};

static const struct kernel_param_ops xlate_miss_ns_ops = {
	.set = xlate_miss_ns_set,
	.get = param_get_uint,
};

module_param_cb(xlate_entries, &xlate_entries_ops, &xlate_entries, 0644);
MODULE_PARM_DESC(xlate_entries,
		 "unload NIC model: translation cache entries of devices created from now on (0 off, else 8..1048576, rounded down to a power of two)");
module_param_cb(xlate_miss_ns, &xlate_miss_ns_ops, &xlate_miss_ns, 0644);
MODULE_PARM_DESC(xlate_miss_ns, "unload NIC model: busy wait per translation miss, ns (0..2000000)");

int rxe_xlate_init(struct rxe_dev *rxe)
{
	unsigned int entries = READ_ONCE(xlate_entries);
	struct rxe_xlate *x;
	u32 sets;

	rxe->xlate = NULL;
	if (!entries)
		return 0;
	sets = rounddown_pow_of_two(entries) / XLATE_WAYS;
	x = kvzalloc(struct_size(x, way, (size_t)sets * XLATE_WAYS), GFP_KERNEL);
	if (!x)
		return -ENOMEM;
	spin_lock_init(&x->lock);
	x->set_bits = ilog2(sets);
	rxe->xlate = x;
	pr_info("unload NIC model: %u translation entries, %u ns a miss\n", sets * XLATE_WAYS,
		READ_ONCE(xlate_miss_ns));
	return 0;
}

void rxe_xlate_cleanup(struct rxe_dev *rxe)
{
	kvfree(rxe->xlate);
	rxe->xlate = NULL;
}

/* Whether (MR, page) was cached; it is afterwards, in its set's least recently used way. */
static bool rxe_xlate_lookup(struct rxe_xlate *x, u64 key)
{
	struct rxe_xlate_way *set, *victim;
	unsigned long flags;
	bool hit = false;
	int w;

	set = x->way + (size_t)(x->set_bits ? hash_64(key, x->set_bits) : 0) * XLATE_WAYS;
	spin_lock_irqsave(&x->lock, flags);
	victim = set;
	for (w = 0; w < XLATE_WAYS; w++) {
		if (set[w].key == key) {
			victim = &set[w];
			hit = true;
			break;
		}
		if (set[w].used < victim->used)
			victim = &set[w];
	}
	victim->key = key;
	victim->used = ++x->clock;
	spin_unlock_irqrestore(&x->lock, flags);
	return hit;
}

void rxe_xlate_touch(struct rxe_mr *mr, u64 page)
{
	struct rxe_dev *rxe = to_rdev(mr->ibmr.device);
	struct rxe_xlate *x = rxe->xlate;
	unsigned int ns;

	if (!x)
		return;
	/* An MR index is reused after deregistration: a stale hit then, as a NIC whose
	 * invalidation lags. */
	if (rxe_xlate_lookup(x, ((u64)mr->elem.index << 40 | (page & GENMASK_ULL(39, 0))) + 1)) {
		rxe_counter_inc(rxe, RXE_CNT_XLATE_HIT);
		return;
	}
	rxe_counter_inc(rxe, RXE_CNT_XLATE_MISS);
	ns = READ_ONCE(xlate_miss_ns);
	/* The fetch over PCIe, outside the lock: misses of different QPs overlap, as DMA
	 * reads do. */
	if (ns >= 1000)
		udelay(ns / 1000);
	ndelay(ns % 1000);
}
