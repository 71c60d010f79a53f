/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The channel's wire format (docs/design.md, "The channel"): what the unload modules of
 * two hosts send each other over their RC connection. Every field is fixed-width and
 * little-endian; reserved fields are sent as zero and a message with one set is refused,
 * so they can gain a meaning in a later version (negotiated in the hello, not guessed).
 *
 * A connection starts with the hello as the rdma_cm private data of the connect request
 * (with the initiator's nonce) and of its accept (with the responder's nonce and proof,
 * struct unload_chan_hello_reply). The initiator's first message is UNLOAD_CHAN_AUTH, its
 * own proof (channel_auth.c); the responder acts on no other message before it. Then
 * every message is one send into one of the peer's receive
 * buffers: a header and at most UNLOAD_CHAN_SEG_MAX payload bytes. A message longer than
 * that is sent as consecutive segments (seg_off ascending, no other data message of the
 * same direction between them; credit messages may come between).
 */
#ifndef UNLOAD_CHANNEL_WIRE_H
#define UNLOAD_CHANNEL_WIRE_H

#include <linux/types.h>

#define UNLOAD_CHAN_MAGIC	0x4c55		/* "UL" */
#define UNLOAD_CHAN_VERSION	3	/* 2: the goodbye; 3: the key's proofs */

/* Receive buffers each side posts, and their size: the same on both sides in version 1. */
#define UNLOAD_CHAN_RING	32
#define UNLOAD_CHAN_BUF		4096

#define UNLOAD_CHAN_NONCE_LEN	32
#define UNLOAD_CHAN_PROOF_LEN	32	/* HMAC-SHA256 */

/* The connect request's private data (48 of the 56 bytes rdma_cm leaves a request). */
struct unload_chan_hello {
	__le16 magic;		/* UNLOAD_CHAN_MAGIC */
	__u8 version;		/* UNLOAD_CHAN_VERSION */
	__u8 reserved0;		/* zero */
	__le16 ring;		/* receive buffers posted: UNLOAD_CHAN_RING, the initial credits */
	__le16 buf_size;	/* bytes each: UNLOAD_CHAN_BUF */
	__le32 reserved[2];	/* zero */
	__u8 nonce[UNLOAD_CHAN_NONCE_LEN];	/* fresh for this connection */
};

/* The accept's private data: the responder's hello and its proof of the key. */
struct unload_chan_hello_reply {
	struct unload_chan_hello hello;
	__u8 proof[UNLOAD_CHAN_PROOF_LEN];
};

enum unload_chan_type {
	UNLOAD_CHAN_CREDIT = 1,	/* only returns credits: no id, no payload */
	UNLOAD_CHAN_ECHO = 2,	/* a request: send the payload back in the ack */
	UNLOAD_CHAN_ACK = 3,	/* a request's outcome: status, and its payload if any */
	UNLOAD_CHAN_WRITE = 4,	/* a request: place an RDMA WRITE (struct unload_chan_write
				 * and its bytes); the ack carries struct
				 * unload_chan_write_ack */
	UNLOAD_CHAN_BYE = 5,	/* the sender's module is going: every request of yours it
				 * received before this was answered before it, and none
				 * after it will be (so none still pending was handled);
				 * no id, no payload */
	UNLOAD_CHAN_AUTH = 6,	/* the initiator's first message, and only then: its proof
				 * (UNLOAD_CHAN_PROOF_LEN bytes), no id, no credits */
};

/*
 * A remote write: what the sender's module vouches for (the sender QP is its submitter's,
 * RC, in RTS, connected to dst_qpn at this channel's peer; the bytes were read from that
 * submitter's registered memory on the QP's PD) and what the target's module checks
 * before it places a byte (docs/design.md, "The remote path"). `length` payload bytes
 * follow it in the same message.
 */
struct unload_chan_write {
	__le32 src_qpn;		/* the sender QP */
	__le32 dst_qpn;		/* the responder QP: the sender QP's destination */
	__le32 rkey;
	__le32 length;		/* 1 .. UNLOAD_CHAN_MSG_MAX - sizeof(this) */
	__le64 remote_addr;
	__le64 reserved;	/* zero */
};

/*
 * A remote write's verdict: placed or refused, no more (a responder NIC's ACK or NAK).
 * Why it was refused is counted at the target (stats/remote_refused_*), never sent.
 */
#define UNLOAD_CHAN_PLACED	0
#define UNLOAD_CHAN_REFUSED	1
struct unload_chan_write_ack {
	__le32 verdict;		/* UNLOAD_CHAN_PLACED or UNLOAD_CHAN_REFUSED */
	__le32 reserved;	/* zero */
};

struct unload_chan_hdr {
	__le16 magic;		/* UNLOAD_CHAN_MAGIC */
	__u8 version;		/* UNLOAD_CHAN_VERSION */
	__u8 type;		/* enum unload_chan_type */
	__le16 credits;		/* receive buffers the sender posted again since its last
				 * message: the receiver may send that many more */
	__le16 reserved0;	/* zero */
	__le64 id;		/* a request's id, chosen by its sender; its ack repeats it;
				 * zero in a credit message */
	__le32 total_len;	/* payload bytes of the whole message, all segments:
				 * at most UNLOAD_CHAN_MSG_MAX */
	__le32 seg_off;		/* this segment's first byte within the message */
	__le32 seg_len;		/* payload bytes after this header; non-zero unless the
				 * message is empty */
	__le32 status;		/* an ack's outcome: 0 or a negative errno (two's
				 * complement); zero in every other type */
	__le64 reserved1;	/* zero */
};

#define UNLOAD_CHAN_HDR_LEN	((u32)sizeof(struct unload_chan_hdr))
#define UNLOAD_CHAN_SEG_MAX	(UNLOAD_CHAN_BUF - UNLOAD_CHAN_HDR_LEN)
#define UNLOAD_CHAN_MSG_MAX	(1U << 20)

#endif /* UNLOAD_CHANNEL_WIRE_H */
