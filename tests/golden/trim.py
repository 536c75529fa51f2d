#!/usr/bin/env python3
"""Cuts a small golden capture out of a large one (how tests/golden/*.pcap
were made from the interop captures; see tests/golden/README.md).

    trim.py IN.pcap OUT.pcap --stop-at-length N     packets until the first
                                                    DATA of a message >= N bytes
    trim.py IN.pcap OUT.pcap --range FIRST COUNT    packets FIRST..FIRST+COUNT-1

Only pcap (not pcapng) with Ethernet or raw-IP link types is understood."""
import struct
import sys


def records(data):
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[off + 8:off + 12])[0]
        yield linktype, data[off:off + 16 + incl], data[off + 16:off + 16 + incl]
        off += 16 + incl


def homa_bytes(linktype, pkt):
    if linktype == 1:
        etype = struct.unpack(">H", pkt[12:14])[0]
        pkt = pkt[14:]
        if etype not in (0x0800, 0x86DD):
            return None
    if not pkt:
        return None
    if pkt[0] >> 4 == 4 and pkt[9] == 146:
        return pkt[(pkt[0] & 15) * 4:]
    if pkt[0] >> 4 == 6 and pkt[6] == 146:
        return pkt[40:]
    return None


def main():
    src, dst, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode not in ("--stop-at-length", "--range"):
        sys.exit(f"trim.py: unknown mode {mode} (--stop-at-length N or --range FIRST COUNT)")
    data = open(src, "rb").read()
    out = [data[:24]]
    for i, (lt, rec, pkt) in enumerate(records(data)):
        h = homa_bytes(lt, pkt)
        if mode == "--stop-at-length":
            if h is not None and len(h) >= 32 and h[11] == 0x10:
                if struct.unpack(">I", h[28:32])[0] >= int(sys.argv[4]):
                    break
            out.append(rec)
        else:
            first, count = int(sys.argv[4]), int(sys.argv[5])
            if first <= i < first + count:
                out.append(rec)
    open(dst, "wb").write(b"".join(out))
    print(f"{dst}: {len(out) - 1} packets, {sum(map(len, out))} bytes")


if __name__ == "__main__":
    main()
