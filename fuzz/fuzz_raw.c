/* libFuzzer target for what the raw IP driver parses from the network
 * (src/io/raw.c): an IPv4 packet as a raw socket delivers it (IP header,
 * then the Homa bytes), the bounced packet of an ICMP error and the ICMP
 * classification shared by both drivers (src/io/errqueue.c), the garbage
 * filter both drivers apply (src/io/common.c), and the checksum over
 * arbitrary bytes.
 *
 * Input: the bytes of an IPv4 packet (also read as an error-queue message,
 * see check_errqueue).  Invariants abort() so libFuzzer records a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <linux/errqueue.h>
#include <netinet/in.h>

#include "core/wire.h"
#include "io/common.h"
#include "io/errqueue.h"
#include "io/io.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_raw: invariant failed at line %d: %s\n", __LINE__, #cond);       \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* RFC 1071 one byte pair at a time, for comparison. */
static uint16_t ref_sum(const uint8_t *d, size_t n, uint32_t acc)
{
    for (size_t i = 0; i < n; i += 2)
        acc += (uint32_t)d[i] << 8 | (i + 1 < n ? d[i + 1] : 0);
    while (acc >> 16)
        acc = (acc & 0xffff) + (acc >> 16);
    return (uint16_t)acc;
}

/* The same bytes as one MSG_ERRQUEUE message: byte 0 picks the cmsg
 * (IP_RECVERR, IPV6_RECVERR or another) and whether it is cut short, bytes
 * 1-3 the error's origin, type and code, byte 4 the address family and
 * byte 5 the address length; bytes 8.. are the address and then the
 * bounced packet. */
static void check_errqueue(const uint8_t *data, size_t size)
{
    union {
        char b[256];
        struct cmsghdr align;
    } ctrl;
    memset(&ctrl, 0, sizeof(ctrl));
    struct sock_extended_err ee;
    memset(&ee, 0, sizeof(ee));
    ee.ee_origin = data[1];
    ee.ee_type = data[2];
    ee.ee_code = data[3];
    union {
        struct sockaddr_in v4;
        struct sockaddr_in6 v6;
        uint8_t raw[sizeof(struct sockaddr_in6)];
    } sa;
    memset(&sa, 0, sizeof(sa));
    size_t alen = size - 8 < sizeof(sa.raw) ? size - 8 : sizeof(sa.raw);
    memcpy(sa.raw, data + 8, alen);
    sa.v4.sin_family = (data[4] & 3) == 0 ? AF_INET : (data[4] & 3) == 1 ? AF_INET6 : data[4];
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_name = (data[4] & 0x80) ? NULL : &sa;
    mh.msg_namelen = data[5] % (sizeof(sa) + 1);
    mh.msg_control = ctrl.b;
    mh.msg_controllen = CMSG_SPACE(sizeof(ee));
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    int pick = data[0] % 3;
    c->cmsg_level = pick == 0 ? IPPROTO_IP : pick == 1 ? IPPROTO_IPV6 : SOL_SOCKET;
    c->cmsg_type = pick == 0 ? IP_RECVERR : pick == 1 ? IPV6_RECVERR : 1;
    /* A cmsg too short for the error is skipped, not read past. */
    c->cmsg_len = (data[0] & 0x80) ? CMSG_LEN(sizeof(ee) - 1) : CMSG_LEN(sizeof(ee));
    memcpy(CMSG_DATA(c), &ee, sizeof(ee));
    const uint8_t *payload = data + 8 + alen;
    size_t plen = size - 8 - alen;
    homa_io_rx out;
    memset(&out, 0xa5, sizeof(out));
    int rc = homa_io_parse_errqueue(&mh, payload, plen, data[6] & 1, &out);
    CHECK(rc == 0 || rc == -1);
    if (rc == 0) {
        uint16_t port = 0;
        int icmp4 = ee.ee_origin == SO_EE_ORIGIN_ICMP;
        CHECK(pick != 2 && !(data[0] & 0x80));
        CHECK(icmp4 || ee.ee_origin == SO_EE_ORIGIN_ICMP6);
        CHECK(homa_io_icmp_unreach(icmp4, ee.ee_type, ee.ee_code, payload, plen, &port) == 1);
        CHECK(out.unreach == 1 && out.sport == port && out.len == 0 && out.data == NULL);
        CHECK(mh.msg_name != NULL);
        if (sa.v4.sin_family == AF_INET)
            CHECK(memcmp(out.src.bytes + 12, &sa.v4.sin_addr, 4) == 0 && out.src.bytes[10] == 0xff);
        else
            CHECK(sa.v6.sin6_family == AF_INET6 &&
                  memcmp(out.src.bytes, &sa.v6.sin6_addr, 16) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t ihl = 0;
    uint8_t tos = 0;
    homa_addr src, dst;
    if (homa_raw_strip_ipv4(data, size, &ihl, &tos, &src, &dst) == 0) {
        /* Accepted: a sane header that fits, and what follows is decoded
         * like any Homa packet. */
        CHECK(size >= 20 && (data[0] >> 4) == 4);
        CHECK(ihl >= 20 && ihl <= 60 && ihl <= size && ihl % 4 == 0);
        CHECK(((size_t)data[2] << 8 | data[3]) == size);
        CHECK(tos == data[1]);
        CHECK(memcmp(src.bytes + 12, data + 12, 4) == 0 && src.bytes[10] == 0xff);
        struct homa_wire_pkt pkt;
        int rc = homa_wire_decode(data + ihl, size - ihl, &pkt);
        CHECK(rc >= HOMA_WIRE_OK && rc <= HOMA_WIRE_BAD_ACKS);
        /* What the drivers' filter lets through has a whole header of a
         * known type; a packet the decoder takes is never garbage. */
        int garbage = homa_io_is_garbage(data + ihl, size - ihl);
        if (!garbage) {
            size_t need = homa_wire_hdr_len(data[ihl + 11]);
            CHECK(need >= HOMA_COMMON_HDR_LEN && size - ihl >= need);
        }
        if (rc == HOMA_WIRE_OK) CHECK(!garbage);
        if (rc == HOMA_WIRE_OK && pkt.type == HOMA_PKT_DATA)
            CHECK((uint64_t)pkt.u.data.offset + pkt.u.data.payload_len <=
                  pkt.u.data.message_length);
        /* The checksum agrees with the plain reference (header bytes 16-17
         * counted as zero) for whatever header length the type has. */
        size_t hl = size - ihl >= HOMA_COMMON_HDR_LEN ? homa_wire_hdr_len(data[ihl + 11]) : 0;
        if (hl > 0 && hl <= size - ihl && (hl % 2 == 0 || hl == size - ihl)) {
            uint8_t *copy = malloc(size - ihl);
            CHECK(copy != NULL);
            memcpy(copy, data + ihl, size - ihl);
            copy[16] = copy[17] = 0;
            uint8_t ph[12];
            memcpy(ph, src.bytes + 12, 4);
            memcpy(ph + 4, dst.bytes + 12, 4);
            ph[8] = 0;
            ph[9] = 6;
            ph[10] = (uint8_t)((size - ihl) >> 8);
            ph[11] = (uint8_t)(size - ihl);
            uint16_t want = (uint16_t)~ref_sum(copy, size - ihl, ref_sum(ph, 12, 0));
            CHECK(homa_raw_checksum(&src, &dst, copy, hl, copy + hl, size - ihl - hl) == want);
            free(copy);
        }
    }
    /* The same bytes as the start of a bounced packet in an ICMP error,
     * with the first two bytes as ICMP type and code. */
    if (size >= 2) {
        uint16_t port = 1;
        int r4 = homa_io_icmp_unreach(1, data[0], data[1], data + 2, size - 2, &port);
        CHECK(r4 == 0 || r4 == 1);
        CHECK(port == 0 || (size >= 6 && port == (uint16_t)(data[4] << 8 | data[5])));
        int r6 = homa_io_icmp_unreach(0, data[0], data[1], data + 2, size - 2, &port);
        CHECK(r6 == 0 || r6 == 1);
    }
    if (size >= 8) check_errqueue(data, size);
    return 0;
}
