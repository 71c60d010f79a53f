/* SPDX-License-Identifier: GPL-2.0 */
/*
 * unload's NIC model: a translation cache for rxe, which has none. A hardware RNIC
 * translates each page a request touches through an on-chip cache of its memory
 * translation table and, on a miss, fetches the entry over PCIe; this models the
 * cache (entries, set-associative, LRU) and the fetch (a busy wait), per device.
 */
#ifndef RXE_XLATE_H
#define RXE_XLATE_H

#include <linux/types.h>

struct rxe_dev;
struct rxe_mr;

int rxe_xlate_init(struct rxe_dev *rxe);
void rxe_xlate_cleanup(struct rxe_dev *rxe);
void rxe_xlate_touch(struct rxe_mr *mr, u64 page);

#endif /* RXE_XLATE_H */
