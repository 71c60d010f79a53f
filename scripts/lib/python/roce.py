"""RoCE v2 on the wire: read pcaps, dissect RC packets, check and compute the ICRC, and
write packets of our own (for the comparison tool's tests).

Only what the comparison needs: Ethernet (optionally 802.1Q), IPv4 or IPv6, UDP to port
4791, the BTH and the RC extended headers (RETH, ImmDt, AETH, AtomicETH, AtomicAckETH,
IETH). The ICRC is the RoCE v2 annex's: CRC-32 over eight 0xff bytes standing in for the
LRH, the IP and UDP headers and the BTH with their variant fields set to ones (IPv4 TOS,
TTL and checksum; IPv6 traffic class, flow label and hop limit; UDP checksum; the BTH's
reserved byte before the destination QP), then the rest of the packet.
"""

import struct
import zlib

ROCE_PORT = 4791

# RC opcodes: name, extended headers in order.
RC_OPCODES = {
    0x00: ("SEND_FIRST", ()),
    0x01: ("SEND_MIDDLE", ()),
    0x02: ("SEND_LAST", ()),
    0x03: ("SEND_LAST_IMM", ("imm",)),
    0x04: ("SEND_ONLY", ()),
    0x05: ("SEND_ONLY_IMM", ("imm",)),
    0x06: ("WRITE_FIRST", ("reth",)),
    0x07: ("WRITE_MIDDLE", ()),
    0x08: ("WRITE_LAST", ()),
    0x09: ("WRITE_LAST_IMM", ("imm",)),
    0x0A: ("WRITE_ONLY", ("reth",)),
    0x0B: ("WRITE_ONLY_IMM", ("reth", "imm")),
    0x0C: ("READ_REQUEST", ("reth",)),
    0x0D: ("READ_RESPONSE_FIRST", ("aeth",)),
    0x0E: ("READ_RESPONSE_MIDDLE", ()),
    0x0F: ("READ_RESPONSE_LAST", ("aeth",)),
    0x10: ("READ_RESPONSE_ONLY", ("aeth",)),
    0x11: ("ACK", ("aeth",)),
    0x12: ("ATOMIC_ACK", ("aeth", "atomicack")),
    0x13: ("CMP_SWAP", ("atomic",)),
    0x14: ("FETCH_ADD", ("atomic",)),
    0x16: ("SEND_LAST_INV", ("ieth",)),
    0x17: ("SEND_ONLY_INV", ("ieth",)),
}
EXT_LEN = {"reth": 16, "imm": 4, "aeth": 4, "atomic": 28, "atomicack": 8, "ieth": 4}
RESPONSES = {0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12}
FIRST = {0x00, 0x06}
MIDDLE = {0x01, 0x07}
LAST = {0x02, 0x03, 0x08, 0x09, 0x16}
ONLY = {0x04, 0x05, 0x0A, 0x0B, 0x17}


def opcode_name(op):
    return RC_OPCODES.get(op, ("OPCODE_%#04x" % op, ()))[0]


class Packet:
    """One RoCE v2 packet. Fields of absent headers are None."""

    __slots__ = ("index", "time", "src", "dst", "sport", "tos", "ttl", "opcode", "se", "m",
                 "pad", "tver", "pkey", "destqp", "ackreq", "psn", "reth", "imm", "aeth",
                 "atomic", "atomicack", "ieth", "payload", "icrc", "icrc_ok")

    def __init__(self):
        for s in self.__slots__:
            setattr(self, s, None)

    @property
    def name(self):
        return opcode_name(self.opcode)

    @property
    def is_response(self):
        return self.opcode in RESPONSES


def read_pcap(path):
    """[(time, frame bytes)] of a classic pcap with Ethernet frames."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        raise ValueError("%s: not a pcap (too short)" % path)
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    else:
        raise ValueError("%s: not a pcap (magic %s)" % (path, magic.hex()))
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    linktype = struct.unpack(e + "I", data[20:24])[0]
    if linktype != 1:
        raise ValueError("%s: link type %d, not Ethernet" % (path, linktype))
    frames, off = [], 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack(e + "IIII", data[off:off + 16])
        off += 16
        frames.append((sec + frac / (1e9 if nano else 1e6), data[off:off + incl]))
        off += incl
    return frames


def write_pcap(path, frames):
    """Write Ethernet frames (bytes) as a microsecond pcap, 1 ms apart."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", i // 1000, (i % 1000) * 1000, len(fr), len(fr)))
            f.write(fr)


def icrc(l3):
    """The ICRC of a RoCE v2 packet given from its IP header up to, excluding, the ICRC."""
    b = bytearray(l3)
    version = b[0] >> 4
    if version == 4:
        ihl = (b[0] & 0x0F) * 4
        b[1] = 0xFF  # TOS
        b[8] = 0xFF  # TTL
        b[10:12] = b"\xff\xff"  # header checksum
    else:
        ihl = 40
        b[0] |= 0x0F  # traffic class (low half of byte 0) ...
        b[1:4] = b"\xff\xff\xff"  # ... and the rest of it with the flow label
        b[7] = 0xFF  # hop limit
    b[ihl + 6:ihl + 8] = b"\xff\xff"  # UDP checksum
    b[ihl + 8 + 4] = 0xFF  # BTH reserved byte before the destination QP
    return zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF


def parse_frame(frame):
    """A Packet for a RoCE v2 frame, or None for any other frame."""
    if len(frame) < 14:
        return None
    etype, off = struct.unpack(">H", frame[12:14])[0], 14
    if etype == 0x8100 and len(frame) >= 18:
        etype, off = struct.unpack(">H", frame[16:18])[0], 18
    l3 = frame[off:]
    if etype == 0x0800 and len(l3) >= 20 and l3[0] >> 4 == 4:
        ihl = (l3[0] & 0x0F) * 4
        if l3[9] != 17:
            return None
        total = struct.unpack(">H", l3[2:4])[0]
        src, dst = ".".join(map(str, l3[12:16])), ".".join(map(str, l3[16:20]))
        tos, ttl = l3[1], l3[8]
    elif etype == 0x86DD and len(l3) >= 40:
        ihl = 40
        if l3[6] != 17:
            return None
        total = 40 + struct.unpack(">H", l3[4:6])[0]
        src, dst = l3[8:24].hex(), l3[24:40].hex()
        tos, ttl = ((l3[0] & 0x0F) << 4) | (l3[1] >> 4), l3[7]
    else:
        return None
    l3 = l3[:total]  # drop Ethernet padding
    udp = l3[ihl:]
    if len(udp) < 8 + 12 + 4:
        return None
    sport, dport = struct.unpack(">HH", udp[:4])
    if dport != ROCE_PORT:
        return None
    p = Packet()
    p.src, p.dst, p.sport, p.tos, p.ttl = src, dst, sport, tos, ttl
    bth = udp[8:20]
    p.opcode = bth[0]
    p.se, p.m, p.pad, p.tver = bth[1] >> 7, (bth[1] >> 6) & 1, (bth[1] >> 4) & 3, bth[1] & 0x0F
    p.pkey = struct.unpack(">H", bth[2:4])[0]
    p.destqp = struct.unpack(">I", bth[4:8])[0] & 0xFFFFFF
    word = struct.unpack(">I", bth[8:12])[0]
    p.ackreq, p.psn = word >> 31, word & 0xFFFFFF
    rest, pos = udp[20:-4], 0
    exts = RC_OPCODES.get(p.opcode, ("", ()))[1] if p.opcode < 0x20 else ()
    for ext in exts:
        h = rest[pos:pos + EXT_LEN[ext]]
        pos += EXT_LEN[ext]
        if ext == "reth":
            setattr(p, ext, struct.unpack(">QII", h))
        elif ext in ("imm", "ieth"):
            setattr(p, ext, struct.unpack(">I", h)[0])
        elif ext == "aeth":
            w = struct.unpack(">I", h)[0]
            p.aeth = (w >> 24, w & 0xFFFFFF)
        else:
            setattr(p, ext, bytes(h))
    payload = rest[pos:]
    p.payload = bytes(payload[:len(payload) - p.pad]) if p.pad else bytes(payload)
    p.icrc = struct.unpack("<I", udp[-4:])[0]
    p.icrc_ok = icrc(l3[:-4]) == p.icrc
    return p


def read_roce(path):
    """The RoCE v2 packets of a pcap, numbered by frame (1-based, as tshark numbers)."""
    out = []
    for i, (t, fr) in enumerate(read_pcap(path), 1):
        p = parse_frame(fr)
        if p:
            p.index, p.time = i, t
            out.append(p)
    return out


def build_frame(src, dst, destqp, psn, opcode, payload=b"", reth=None, imm=None, aeth=None,
                ackreq=0, se=0, sport=49152, pkey=0xFFFF, ttl=64, corrupt_icrc=False):
    """An Ethernet + IPv4 + UDP + RoCE v2 frame with a correct ICRC (or a wrong one)."""
    pad = (4 - len(payload) % 4) % 4
    bth = struct.pack(">BBHII", opcode, (se << 7) | (pad << 4), pkey, destqp & 0xFFFFFF,
                      (ackreq << 31) | (psn & 0xFFFFFF))
    ext = b""
    if reth is not None:
        ext += struct.pack(">QII", *reth)
    if imm is not None:
        ext += struct.pack(">I", imm)
    if aeth is not None:
        ext += struct.pack(">I", (aeth[0] << 24) | aeth[1])
    body = bth + ext + payload + b"\0" * pad
    udp = struct.pack(">HHHH", sport, ROCE_PORT, 8 + len(body) + 4, 0) + body
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp) + 4, 0, 0x4000, ttl, 17, 0,
                     bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))))
    csum = sum(struct.unpack(">10H", ip))
    while csum >> 16:
        csum = (csum & 0xFFFF) + (csum >> 16)
    ip = ip[:10] + struct.pack(">H", ~csum & 0xFFFF) + ip[12:]
    crc = icrc(ip + udp)
    if corrupt_icrc:
        crc ^= 1
    eth = b"\x52\x54\x00\x00\x02\x02" + b"\x52\x54\x00\x00\x02\x01" + b"\x08\x00"
    return eth + ip + udp + struct.pack("<I", crc)
