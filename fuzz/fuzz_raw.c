/* libFuzzer target for what the raw IP driver parses from the network
 * (src/io/raw.c): an IPv4 packet as a raw socket delivers it (IP header,
 * then the Homa bytes), the bounced packet of an ICMP error, and the
 * checksum over arbitrary bytes.
 *
 * Input: the bytes of an IPv4 packet.  Invariants abort() so libFuzzer
 * records a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire.h"
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
        int r4 = homa_raw_icmp_unreach(1, data[0], data[1], data + 2, size - 2, &port);
        CHECK(r4 == 0 || r4 == 1);
        CHECK(port == 0 || (size >= 6 && port == (uint16_t)(data[4] << 8 | data[5])));
        int r6 = homa_raw_icmp_unreach(0, data[0], data[1], data + 2, size - 2, &port);
        CHECK(r6 == 0 || r6 == 1);
    }
    return 0;
}
