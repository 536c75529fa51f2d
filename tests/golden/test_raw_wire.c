/* The raw driver's packet helpers (src/io/raw.c), without sockets: the
 * checksum against a plain byte-by-byte reference and IPv4 header
 * stripping.  The ICMP classification and error-queue parsing, shared by
 * both drivers, are tested in tests/unit/test_errqueue.c. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "core/wire.h"
#include "io/io.h"

/* RFC 1071 the slow way: big-endian 16-bit words, one at a time. */
static uint16_t ref_sum(const uint8_t *d, size_t n, uint32_t acc)
{
    for (size_t i = 0; i < n; i += 2)
        acc += (uint32_t)d[i] << 8 | (i + 1 < n ? d[i + 1] : 0);
    while (acc >> 16)
        acc = (acc & 0xffff) + (acc >> 16);
    return (uint16_t)acc;
}

static uint16_t ref_checksum(const homa_addr *s, const homa_addr *d, const uint8_t *pkt, size_t n)
{
    uint8_t ph[40];
    size_t pl;
    if (s->bytes[10] == 0xff && s->bytes[11] == 0xff) {
        memcpy(ph, s->bytes + 12, 4);
        memcpy(ph + 4, d->bytes + 12, 4);
        ph[8] = 0;
        ph[9] = 6; /* TCP's number: the kernel uses tcp_v4_check() */
        ph[10] = (uint8_t)(n >> 8);
        ph[11] = (uint8_t)n;
        pl = 12;
    } else {
        memcpy(ph, s->bytes, 16);
        memcpy(ph + 16, d->bytes, 16);
        ph[32] = (uint8_t)(n >> 24);
        ph[33] = (uint8_t)(n >> 16);
        ph[34] = (uint8_t)(n >> 8);
        ph[35] = (uint8_t)n;
        ph[36] = ph[37] = ph[38] = 0;
        ph[39] = 6;
        pl = 40;
    }
    uint16_t a = ref_sum(ph, pl, 0);
    return (uint16_t)~ref_sum(pkt, n, a);
}

static void addr4(homa_addr *a, uint8_t x, uint8_t y, uint8_t z, uint8_t w)
{
    memset(a, 0, sizeof(*a));
    a->bytes[10] = a->bytes[11] = 0xff;
    a->bytes[12] = x;
    a->bytes[13] = y;
    a->bytes[14] = z;
    a->bytes[15] = w;
}

static void homa_raw_checksum__matches_reference(void **state)
{
    (void)state;
    srand(7);
    static uint8_t pkt[HOMA_DATA_HDR_LEN + 3000];
    homa_addr s4, d4, s6, d6;
    addr4(&s4, 10, 77, 0, 3);
    addr4(&d4, 10, 77, 0, 2);
    for (int i = 0; i < 16; i++) {
        s6.bytes[i] = (uint8_t)(0xfd + i * 3);
        d6.bytes[i] = (uint8_t)(0x20 + i * 5);
    }
    static const uint8_t types[] = {HOMA_PKT_DATA, HOMA_PKT_GRANT, HOMA_PKT_RESEND, HOMA_PKT_ACK,
                                    HOMA_PKT_BUSY};
    for (int round = 0; round < 400; round++) {
        uint8_t type = types[round % 5];
        size_t hl = homa_wire_hdr_len(type);
        size_t pl = type == HOMA_PKT_DATA ? (size_t)(rand() % 3000) : 0;
        for (size_t k = 0; k < hl + pl; k++)
            pkt[k] = (uint8_t)rand();
        pkt[11] = type;
        pkt[16] = pkt[17] = 0;
        int v6 = round & 1;
        const homa_addr *s = v6 ? &s6 : &s4, *d = v6 ? &d6 : &d4;
        uint16_t want = ref_checksum(s, d, pkt, hl + pl);
        assert_int_equal(homa_raw_checksum(s, d, pkt, hl, pkt + hl, pl), want);
        /* Bytes 16-17 are skipped whatever they hold. */
        pkt[16] = 0xab;
        pkt[17] = 0xcd;
        assert_int_equal(homa_raw_checksum(s, d, pkt, hl, pkt + hl, pl), want);
        /* With the checksum in place, the whole packet sums to 0xffff. */
        pkt[16] = (uint8_t)(want >> 8);
        pkt[17] = (uint8_t)want;
        assert_int_equal(ref_checksum(s, d, pkt, hl + pl), 0);
    }
    /* The pseudo-header sum alone: what the kernel leaves for the NIC. */
    static const uint8_t zeros[57];
    assert_int_equal(homa_raw_pseudo_sum(&s4, &d4, 57),
                     (uint16_t)~ref_checksum(&s4, &d4, zeros, 57));
    assert_int_equal(homa_raw_pseudo_sum(&s6, &d6, 57),
                     (uint16_t)~ref_checksum(&s6, &d6, zeros, 57));
}

static void homa_raw_strip_ipv4__validates(void **state)
{
    (void)state;
    uint8_t p[80];
    memset(p, 0, sizeof(p));
    p[0] = 0x45;
    p[1] = 0xc0;
    p[3] = 60;
    p[9] = 146;
    p[12] = 10;
    p[15] = 3;
    p[16] = 10;
    p[19] = 2;
    size_t ihl;
    uint8_t tos;
    homa_addr s, d;
    assert_int_equal(homa_raw_strip_ipv4(p, 60, &ihl, &tos, &s, &d), 0);
    assert_int_equal(ihl, 20);
    assert_int_equal(tos, 0xc0);
    assert_int_equal(s.bytes[15], 3);
    assert_int_equal(d.bytes[15], 2);
    assert_int_equal(s.bytes[10], 0xff);
    /* Options: IHL 6. */
    p[0] = 0x46;
    assert_int_equal(homa_raw_strip_ipv4(p, 60, &ihl, NULL, NULL, NULL), 0);
    assert_int_equal(ihl, 24);
    /* Bad: IHL < 5, IHL beyond the packet, wrong version, length mismatch, short. */
    p[0] = 0x44;
    assert_int_equal(homa_raw_strip_ipv4(p, 60, &ihl, NULL, NULL, NULL), -1);
    p[0] = 0x4f;
    assert_int_equal(homa_raw_strip_ipv4(p, 40, &ihl, NULL, NULL, NULL), -1);
    p[0] = 0x65;
    assert_int_equal(homa_raw_strip_ipv4(p, 60, &ihl, NULL, NULL, NULL), -1);
    p[0] = 0x45;
    assert_int_equal(homa_raw_strip_ipv4(p, 59, &ihl, NULL, NULL, NULL), -1);
    assert_int_equal(homa_raw_strip_ipv4(p, 19, &ihl, NULL, NULL, NULL), -1);
    assert_int_equal(homa_raw_strip_ipv4(p, 0, &ihl, NULL, NULL, NULL), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_raw_checksum__matches_reference),
        cmocka_unit_test(homa_raw_strip_ipv4__validates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
