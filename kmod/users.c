// SPDX-License-Identifier: GPL-2.0
/*
 * Per-user counts of sessions, registrations (QPs and regions) and the channels to other
 * hosts its callers opened, so that one user cannot crowd every other out of the module:
 * keyed by the opener's euid, bounded by the admin's user_*_max (the callers pass the
 * bound in). A leaf: session.c, lifecycle.c, registry.c, regions.c and channel.c use it;
 * it uses none.
 */
#include <linux/hashtable.h>
#include <linux/slab.h>
#include <linux/spinlock.h>

#include "unload_kmod.h"

struct unload_user {
	struct hlist_node node;		/* in unload_users */
	kuid_t uid;			/* the openers' euid */
	unsigned int refs;		/* sessions holding it, open or not yet freed, and
					 * channels charged to it */
	unsigned int count[UNLOAD_USER_NR];	/* charged: sessions, registrations, channels */
};

static DEFINE_HASHTABLE(unload_users, 6);
/*
 * Guards unload_users and every entry's refs and count[]. Innermost: taken under a
 * session's lock, unload_sessions_lock and unload_chans_lock, and nothing is taken or
 * called under it.
 */
static DEFINE_SPINLOCK(unload_users_lock);

static struct unload_user *unload_user_find(kuid_t uid)
{
	struct unload_user *u;

	lockdep_assert_held(&unload_users_lock);
	hash_for_each_possible(unload_users, u, node, __kuid_val(uid))
		if (uid_eq(u->uid, uid))
			return u;
	return NULL;
}

/* uid's entry, with a reference for the caller (a session); NULL without memory. */
struct unload_user *unload_user_get(kuid_t uid)
{
	struct unload_user *u, *fresh;

	/* Allocated before the lock (it spins), freed again if uid has an entry already. */
	fresh = kzalloc(sizeof(*fresh), GFP_KERNEL_ACCOUNT);
	spin_lock(&unload_users_lock);
	u = unload_user_find(uid);
	if (!u && fresh) {
		u = fresh;
		fresh = NULL;
		u->uid = uid;
		hash_add(unload_users, &u->node, __kuid_val(uid));
	}
	if (u)
		u->refs++;
	spin_unlock(&unload_users_lock);
	kfree(fresh);
	return u;
}

/* A reference more to u, which the caller holds one of (a channel charged to it). */
struct unload_user *unload_user_hold(struct unload_user *u)
{
	spin_lock(&unload_users_lock);
	u->refs++;
	spin_unlock(&unload_users_lock);
	return u;
}

void unload_user_put(struct unload_user *u)
{
	bool last;

	spin_lock(&unload_users_lock);
	last = !--u->refs;
	if (last) {
		/* Every holder uncharged what it charged before its last put. */
		WARN_ON_ONCE(u->count[UNLOAD_USER_SESSIONS] || u->count[UNLOAD_USER_REGS] ||
			     u->count[UNLOAD_USER_CHANNELS]);
		hash_del(&u->node);
	}
	spin_unlock(&unload_users_lock);
	if (last)
		kfree(u);
}

/* Charge one more of what to u if that keeps it within max: whether it did. */
bool unload_user_charge(struct unload_user *u, enum unload_user_count what, u32 max)
{
	bool ok;

	spin_lock(&unload_users_lock);
	ok = u->count[what] < max;
	if (ok)
		u->count[what]++;
	spin_unlock(&unload_users_lock);
	return ok;
}

void unload_user_uncharge(struct unload_user *u, enum unload_user_count what)
{
	spin_lock(&unload_users_lock);
	if (!WARN_ON_ONCE(!u->count[what]))
		u->count[what]--;
	spin_unlock(&unload_users_lock);
}
