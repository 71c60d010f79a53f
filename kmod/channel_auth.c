// SPDX-License-Identifier: GPL-2.0
/*
 * Who may talk to us over the channel (docs/security.md, "The channel's key"): the modules
 * that hold the cluster's key, which root installs on every host (channel/key, write-only).
 * Each side of a new connection proves the key by answering the other's fresh nonce with
 * an HMAC-SHA256 over both nonces, both GIDs and both ports, under a label naming its role
 * (so a proof can be neither replayed on another connection nor reflected back as the
 * other side's). The passive side proves first, in its accept; the active side, which
 * checked that proof, answers with an AUTH message before any other; the passive side
 * acts on nothing before it has checked that answer. Modelled on NVMe-oF's in-band
 * DH-HMAC-CHAP, without its Diffie-Hellman part: no session key is derived, since the
 * channel carries no secret and RoCE offers no encryption to key.
 *
 * Without a key the channel is closed (channel.c stops listening and opens no connection)
 * unless root set channel/auth to "none": a closed test fabric, where anything that
 * reaches port 18520 is trusted, as before this file existed.
 */
#include <crypto/hash.h>
#include <crypto/algapi.h>
#include <linux/kernel.h>
#include <linux/random.h>
#include <linux/string.h>

#include "unload_channel.h"

#define UNLOAD_CHAN_KEY_MIN	16	/* bytes: 128 bits at least */
#define UNLOAD_CHAN_KEY_MAX	64	/* SHA-256's block: a longer key is hashed anyway */

/*
 * Guards unload_chan_key_tfm: replaced whole by a key write, used by each proof. A proof
 * digests under it (microseconds, no sleep on the network), so a key write never races a
 * digest on the transform it frees.
 */
static DEFINE_MUTEX(unload_chan_key_lock);
static struct crypto_shash *unload_chan_key_tfm;	/* hmac(sha256) keyed; NULL: no key */
static bool unload_chan_auth_off;	/* channel/auth = none: trust the fabric */

static const char unload_chan_label_responder[] = "unload channel v3 responder";
static const char unload_chan_label_initiator[] = "unload channel v3 initiator";

bool unload_chan_auth_required(void)
{
	return !READ_ONCE(unload_chan_auth_off);
}

bool unload_chan_auth_key_installed(void)
{
	bool installed;

	mutex_lock(&unload_chan_key_lock);
	installed = unload_chan_key_tfm;
	mutex_unlock(&unload_chan_key_lock);
	return installed;
}

/* May the channel carry anything: a key to prove, or a fabric root said to trust. */
bool unload_chan_auth_open(void)
{
	return !unload_chan_auth_required() || unload_chan_auth_key_installed();
}

void unload_chan_auth_set_required(bool required)
{
	WRITE_ONCE(unload_chan_auth_off, !required);
}

/*
 * Install a key given as hex digits (a trailing newline allowed), or remove it with
 * "none". -EINVAL for anything else, and the key in force stays.
 */
int unload_chan_auth_set_key(const char *buf, size_t count)
{
	struct crypto_shash *tfm, *old;
	u8 key[UNLOAD_CHAN_KEY_MAX];
	size_t len = count;
	int ret;

	if (len && buf[len - 1] == '\n')
		len--;
	if (len == 4 && !memcmp(buf, "none", 4)) {
		tfm = NULL;
		goto swap;
	}
	if (len % 2 || len / 2 < UNLOAD_CHAN_KEY_MIN || len / 2 > UNLOAD_CHAN_KEY_MAX)
		return -EINVAL;
	if (hex2bin(key, buf, len / 2)) {
		ret = -EINVAL;
		goto out_wipe;
	}
	tfm = crypto_alloc_shash("hmac(sha256)", 0, 0);
	if (IS_ERR(tfm)) {
		ret = PTR_ERR(tfm);
		goto out_wipe;
	}
	ret = crypto_shash_setkey(tfm, key, len / 2);
	if (ret) {
		crypto_free_shash(tfm);
		goto out_wipe;
	}
	memzero_explicit(key, sizeof(key));
swap:
	mutex_lock(&unload_chan_key_lock);
	old = unload_chan_key_tfm;
	unload_chan_key_tfm = tfm;
	mutex_unlock(&unload_chan_key_lock);
	crypto_free_shash(old);		/* NULL-safe; zeroes its key context */
	return 0;

out_wipe:
	memzero_explicit(key, sizeof(key));
	return ret;
}

/* A new nonce, from the kernel's CSPRNG. */
void unload_chan_auth_nonce(u8 *nonce)
{
	get_random_bytes(nonce, UNLOAD_CHAN_NONCE_LEN);
}

/*
 * The proof of `role` on connection c: HMAC(key, label, initiator's nonce, responder's
 * nonce, initiator's GID and port, responder's GID and port). -ENOKEY without a key.
 */
static int unload_chan_auth_digest(bool responder, const struct unload_chan_auth_ctx *c,
				   u8 *proof)
{
	const char *label = responder ? unload_chan_label_responder : unload_chan_label_initiator;
	__be16 ports[2] = { c->init_port, c->resp_port };
	int ret = -ENOKEY;

	mutex_lock(&unload_chan_key_lock);
	if (unload_chan_key_tfm) {
		SHASH_DESC_ON_STACK(desc, unload_chan_key_tfm);

		desc->tfm = unload_chan_key_tfm;
		ret = crypto_shash_init(desc) ?:
		      crypto_shash_update(desc, label, strlen(label) + 1) ?:
		      crypto_shash_update(desc, c->init_nonce, UNLOAD_CHAN_NONCE_LEN) ?:
		      crypto_shash_update(desc, c->resp_nonce, UNLOAD_CHAN_NONCE_LEN) ?:
		      crypto_shash_update(desc, c->init_gid, 16) ?:
		      crypto_shash_update(desc, c->resp_gid, 16) ?:
		      crypto_shash_update(desc, (const u8 *)ports, sizeof(ports)) ?:
		      crypto_shash_final(desc, proof);
		shash_desc_zero(desc);
	}
	mutex_unlock(&unload_chan_key_lock);
	return ret;
}

/* Our proof for c, as the responder (passive) or the initiator (active) side. */
int unload_chan_auth_prove(bool responder, const struct unload_chan_auth_ctx *c, u8 *proof)
{
	if (!unload_chan_auth_required()) {
		memset(proof, 0, UNLOAD_CHAN_PROOF_LEN);	/* nobody checks it */
		return 0;
	}
	return unload_chan_auth_digest(responder, c, proof);
}

/*
 * Does the peer's proof hold, it being the responder or the initiator of c? 0, or
 * -EKEYREJECTED (the caller counts it). With channel/auth = none every proof holds.
 */
int unload_chan_auth_check(bool responder, const struct unload_chan_auth_ctx *c,
			   const u8 *proof)
{
	u8 want[UNLOAD_CHAN_PROOF_LEN];
	int ret;

	if (!unload_chan_auth_required())
		return 0;
	ret = unload_chan_auth_digest(responder, c, want);
	if (!ret && crypto_memneq(want, proof, UNLOAD_CHAN_PROOF_LEN))
		ret = -EKEYREJECTED;
	memzero_explicit(want, sizeof(want));
	return ret ? -EKEYREJECTED : 0;
}

void unload_chan_auth_exit(void)
{
	mutex_lock(&unload_chan_key_lock);
	crypto_free_shash(unload_chan_key_tfm);
	unload_chan_key_tfm = NULL;
	mutex_unlock(&unload_chan_key_lock);
}
