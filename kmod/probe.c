// SPDX-License-Identifier: GPL-2.0
/*
 * UNLOAD_IOC_CHANNEL_PROBE: the channel's first user. Is there an unload module at the
 * peer, and how long does a round trip through it take? The answer the policy will need
 * for "the peer host has no module", and `unloadctl probe`.
 */
#include <linux/ktime.h>
#include <linux/mm.h>
#include <linux/uaccess.h>

#include "unload_channel.h"
#include "unload_kmod.h"

/* Position-dependent, so a segment placed at the wrong offset shows. */
static u8 unload_probe_byte(u64 seed, u32 i)
{
	return (u8)(seed + i * 131u + (i >> 8) * 7u);
}

long unload_ioctl_channel_probe(struct unload_session *sess, void __user *arg)
{
	struct unload_channel_probe p;
	struct unload_chan *chan;
	void *req = NULL, *resp = NULL;
	u64 t0, seed;
	u32 i;
	long ret;

	if (copy_from_user(&p, arg, sizeof(p)))
		return -EFAULT;
	if ((p.flags & ~UNLOAD_PROBE_EXISTING) || p.reserved[0] || p.reserved[1] || p.reserved[2] ||
	    p.reserved[3] || p.length > UNLOAD_PROBE_MAX_LEN || !memchr(p.ibdev, 0, sizeof(p.ibdev)))
		return -EINVAL;
	p.state = UNLOAD_CHANNEL_NONE;
	p.rtt_ns = 0;
	p.channel_id = 0;
	p.segments = 0;
	p.passive = 0;

	chan = p.flags & UNLOAD_PROBE_EXISTING ? unload_chan_get_up(p.ibdev, p.port, p.peer_gid) :
						 unload_chan_get(p.ibdev, p.port, p.peer_gid, sess);
	if (IS_ERR(chan)) {
		ret = PTR_ERR(chan);
		goto out_copy;
	}
	p.channel_id = chan->serial;
	p.passive = chan->passive;
	if (p.length) {
		req = kvmalloc(p.length, GFP_KERNEL_ACCOUNT);	/* the caller's memory cgroup */
		if (!req) {
			ret = -ENOMEM;
			goto out_put;
		}
	}
	seed = ktime_get_ns();
	for (i = 0; i < p.length; i++)
		((u8 *)req)[i] = unload_probe_byte(seed, i);

	t0 = ktime_get_ns();
	ret = unload_chan_call(chan, UNLOAD_CHAN_ECHO, req, p.length, &resp, p.length, &p.segments,
			       UNLOAD_CHAN_WAIT_MS);
	if (!ret && p.length && memcmp(req, resp, p.length))
		ret = -EBADMSG;
	p.rtt_ns = ktime_get_ns() - t0;
	kvfree(resp);
	kvfree(req);
out_put:
	p.state = unload_chan_state(chan, NULL);
	unload_chan_put(chan);
out_copy:
	if (copy_to_user(arg, &p, sizeof(p)))
		return -EFAULT;
	return ret;
}
