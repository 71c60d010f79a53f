#!/usr/bin/env python3
"""scripts/wirecmp finds planted differences (payload byte, PSN gap, bad ICRC) and nothing else.

Captures are built here with scripts/lib/python/roce.py's packet writer; the ICRC computation is
first checked against a frame rxe sent in the two-host sandbox (rxe drops a packet whose
ICRC it does not agree with, so every frame it sent and its peer acked has a valid one).

  wirecmp_test.py SOURCE_DIR
"""

import os
import subprocess
import sys
import tempfile

src = sys.argv[1]
sys.path.insert(0, os.path.join(src, "scripts", "lib", "python"))
import roce  # noqa: E402

WIRECMP = os.path.join(src, "scripts", "wirecmp")
A, B = "192.0.2.1", "192.0.2.2"
fails = 0


def check(ok, what):
    global fails
    print("%s: %s" % ("ok" if ok else "FAIL", what))
    fails += not ok


# A WRITE_ONLY of 64 bytes and the ACK that answered it, as rxe put them on the link
# (scripts/sandbox --hosts 2 --capture, wire_workload; Ethernet frames).
RXE_WRITE = bytes.fromhex(
    "52540000020252540000020108004500007c3b57400040117b16c0000201c0000202c121"
    "12b7006800000a00ffff000000118000100800002000000002000000026e00000040181f"
    "262d343b424950575e656c737a81888f969da4abb2b9c0c7ced5dce3eaf1f8ff060d141b"
    "222930373e454c535a61686f767d848b9299a0a7aeb5bcc3cad106531dd3")
RXE_ACK = bytes.fromhex(
    "525400000201525400000202080045000030f40c40004011c2acc0000202c0000201c121"
    "12b7001c00001100ffff00000011000010001f000001e4c8ba6a")


def real_frames():
    for name, fr, op in (("WRITE_ONLY", RXE_WRITE, 0x0A), ("ACK", RXE_ACK, 0x11)):
        p = roce.parse_frame(fr)
        check(p is not None and p.opcode == op, "a real rxe %s frame parses as one" % name)
        check(p is not None and p.icrc_ok, "our ICRC agrees with rxe's on its %s frame" % name)
        # Flipping any bit the ICRC covers must make it fail.
        bad = bytearray(fr)
        bad[-10] ^= 0x01
        q = roce.parse_frame(bytes(bad))
        check(q is not None and not q.icrc_ok, "a flipped bit in rxe's %s frame fails the ICRC" % name)


def workload(qa=0x11, qb=0x12, psn=0x1000, sport=49152, rkey=0x1234, mutate=None):
    """A small RDMA WRITE conversation from A to B: a 3-packet write, an immediate, ACKs."""
    pay = bytes((i * 7) & 0xFF for i in range(2500))
    req = [  # (opcode, psn offset, payload, reth, imm, ackreq)
        (0x06, 0, pay[:1024], (0x200000000000, rkey, 2500), None, 0),
        (0x07, 1, pay[1024:2048], None, None, 0),
        (0x08, 2, pay[2048:], None, None, 1),
        (0x0B, 3, pay[:5], (0x200000001000, rkey, 5), 0x5A000001, 1),
        (0x0A, 4, b"", (0x200000002000, rkey, 0), None, 1),
    ]
    frames = []
    for i, (op, off, p, reth, imm, ack) in enumerate(req):
        corrupt = False
        if mutate:
            op, off, p, corrupt = mutate(i, op, off, p)
        frames.append(roce.build_frame(A, B, qb, psn + off, op, p, reth=reth, imm=imm,
                                       ackreq=ack, sport=sport, corrupt_icrc=corrupt))
        if ack:
            frames.append(roce.build_frame(B, A, qa, psn + off, 0x11, aeth=(0x1F, i),
                                           sport=sport + 1))
    return frames


def run(*caps):
    r = subprocess.run([sys.executable, WIRECMP] + list(caps), capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def planted(tmp):
    ref = os.path.join(tmp, "ref.pcap")
    roce.write_pcap(ref, workload())

    other = os.path.join(tmp, "other.pcap")
    roce.write_pcap(other, workload(qa=0x99, qb=0x77, psn=0xFFFFFE, sport=50000, rkey=0xBEEF))
    rc, out = run(ref, other)
    check(rc == 0 and "EQUAL" in out,
          "other QPNs, starting PSN (wrapping past 2^24), UDP port and rkey compare equal")
    if rc != 0:
        print(out)

    def payload_byte(i, op, off, p):
        if i == 1:
            p = p[:100] + bytes([p[100] ^ 0x40]) + p[101:]
        return op, off, p, False

    cap = os.path.join(tmp, "payload.pcap")
    roce.write_pcap(cap, workload(mutate=payload_byte))
    rc, out = run(ref, cap)
    check(rc == 1 and "payload byte 100" in out and "WRITE_MIDDLE" in out,
          "a changed payload byte is found: " + out.strip().splitlines()[-1])

    def gap(i, op, off, p):
        return op, off + (1 if i >= 3 else 0), p, False

    cap = os.path.join(tmp, "gap.pcap")
    roce.write_pcap(cap, workload(mutate=gap))
    rc, out = run(cap)
    check(rc == 1 and "gap" in out, "a PSN gap fails the check of one capture")
    rc, out = run(ref, cap)
    check(rc == 1 and "gap" in out and "DIFFERENT" in out,
          "a PSN gap fails the comparison: " + out.strip().splitlines()[-1])

    def bad_icrc(i, op, off, p):
        return op, off, p, i == 2

    cap = os.path.join(tmp, "icrc.pcap")
    roce.write_pcap(cap, workload(mutate=bad_icrc))
    rc, out = run(cap)
    check(rc == 1 and "bad ICRC" in out, "a bad ICRC fails the check")

    def short(i, op, off, p):
        return op, off, (p[:-1] if i == 2 else p), False

    cap = os.path.join(tmp, "short.pcap")
    roce.write_pcap(cap, workload(mutate=short))
    rc, out = run(cap)
    check(rc == 1 and "RETH said 2500" in out, "a message shorter than its RETH length fails")

    def opcode(i, op, off, p):
        return (0x0A if i == 3 else op), off, p, False

    cap = os.path.join(tmp, "opcode.pcap")
    roce.write_pcap(cap, workload(mutate=opcode))
    rc, out = run(ref, cap)
    check(rc == 1 and "opcode: WRITE_ONLY_IMM vs WRITE_ONLY" in out, "a changed opcode is found")

    # A retransmission of the same packets is timing, not a difference.
    fr = workload()
    cap = os.path.join(tmp, "retrans.pcap")
    roce.write_pcap(cap, fr[:4] + fr[:3] + fr[4:])
    rc, out = run(ref, cap)
    check(rc == 0 and "retransmission" in out, "an identical retransmission is set aside")

    # Two runs in one capture are connections @0 and @1.
    both = os.path.join(tmp, "both.pcap")
    roce.write_pcap(both, workload() + workload(qa=0x21, qb=0x22, psn=7, mutate=payload_byte))
    rc, out = run(both + "@0", ref)
    check(rc == 0, "connection @0 of a two-run capture equals the reference")
    rc, out = run(both + "@1", ref)
    check(rc == 1 and "payload byte 100" in out, "connection @1 carries the planted byte")
    rc, out = run(both + "@2")
    check(rc == 2, "a connection that is not there is a usage error")

    # tshark reads our frames and rxe's as we do (opcode, QP, PSN, RETH, AETH, immediate, ICRC).
    cap = os.path.join(tmp, "tshark.pcap")
    roce.write_pcap(cap, [RXE_WRITE, RXE_ACK] + workload())
    rc, out = run("--tshark-check", cap)
    check(rc == 0 and "agrees with tshark" in out, "tshark: " + out.strip().splitlines()[-1])


real_frames()
with tempfile.TemporaryDirectory() as tmp:
    planted(tmp)
print("%d check(s) failed" % fails if fails else "all checks passed")
sys.exit(1 if fails else 0)
