/* Unit tests for the interop pcap reader (tests/interop/pcap_scan.c): a
 * capture built in memory with Ethernet, raw-IP and damaged records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/wire.h"
#include "interop/pcap_scan.h"

static uint8_t cap[8192];
static size_t cap_len;

static void put32(uint32_t v)
{
    memcpy(cap + cap_len, &v, 4);
    cap_len += 4;
}

static void file_header(uint32_t linktype)
{
    cap_len = 0;
    put32(0xa1b2c3d4u);
    put32(2 | (4u << 16)); /* version 2.4 */
    put32(0);
    put32(0);
    put32(65535);
    put32(linktype);
}

/* Appends a record: optional Ethernet header, IPv4 header with protocol
 * proto and TOS tos, then body; caplen_cut bytes are left off the capture. */
static void record(int ether, uint8_t proto, uint8_t tos, const uint8_t *body, size_t blen,
                   size_t caplen_cut)
{
    uint8_t pkt[2048];
    size_t n = 0;
    if (ether) {
        memset(pkt, 0x11, 12);
        pkt[12] = 0x08;
        pkt[13] = 0x00;
        n = 14;
    }
    size_t tot = 20 + blen;
    uint8_t ip[20] = {0x45,
                      tos,
                      (uint8_t)(tot >> 8),
                      (uint8_t)tot,
                      0,
                      0,
                      0,
                      0,
                      64,
                      proto,
                      0,
                      0,
                      10,
                      77,
                      0,
                      2,
                      10,
                      77,
                      0,
                      1};
    memcpy(pkt + n, ip, 20);
    n += 20;
    memcpy(pkt + n, body, blen);
    n += blen;
    put32(0);
    put32(0);
    put32((uint32_t)(n - caplen_cut));
    put32((uint32_t)n);
    memcpy(cap + cap_len, pkt, n - caplen_cut);
    cap_len += n - caplen_cut;
}

static size_t data_pkt(uint8_t *out, uint32_t payload)
{
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.sport = 40000;
    p.dport = 4000;
    p.type = HOMA_PKT_DATA;
    p.sender_id = 2;
    p.u.data.message_length = 1000;
    p.u.data.incoming = 1000;
    p.u.data.offset = 0;
    size_t n = homa_wire_encode(&p, out);
    memset(out + n, 0xab, payload);
    return n + payload;
}

static void pcap_scan__ethernet_counts_types_and_tos(void **state)
{
    (void)state;
    uint8_t b[256];
    file_header(1);
    size_t n = data_pkt(b, 100);
    record(1, 146, 0xc0, b, n, 0);
    record(1, 146, 0xc0, b, n, 0);
    record(1, 1, 0, b, 8, 0); /* ICMP: not Homa */
    struct hx_pcap_stats st;
    assert_int_equal(hx_pcap_scan(cap, cap_len, &st), 0);
    assert_int_equal(st.records, 3);
    assert_int_equal(st.homa, 2);
    assert_int_equal(st.other, 1);
    assert_int_equal(st.rejects, 0);
    assert_int_equal(st.nflows, 1);
    assert_int_equal(st.flows[0].by_type[0], 2);
    assert_int_equal(st.flows[0].tos[6], 2);
}

static void pcap_scan__rejects_are_counted_by_reason(void **state)
{
    (void)state;
    uint8_t b[256];
    file_header(101);
    size_t n = data_pkt(b, 10);
    b[11] = 0x42; /* unknown type */
    record(0, 146, 0, b, n, 0);
    record(0, 146, 0, b, 20, 0); /* shorter than the common header */
    struct hx_pcap_stats st;
    assert_int_equal(hx_pcap_scan(cap, cap_len, &st), 0);
    assert_int_equal(st.homa, 2);
    assert_int_equal(st.rejects, 2);
    assert_int_equal(st.flows[0].rejects[HOMA_WIRE_BAD_TYPE], 1);
    assert_int_equal(st.flows[0].rejects[HOMA_WIRE_SHORT], 1);
}

static void pcap_scan__truncated_and_damaged_records(void **state)
{
    (void)state;
    uint8_t b[256];
    file_header(1);
    size_t n = data_pkt(b, 100);
    record(1, 146, 0, b, n, 50); /* snaplen cut: the header is still checked */
    size_t keep = cap_len;
    record(1, 146, 0, b, n, 0);
    cap_len = keep + 16 + 10; /* the last record ends early */
    struct hx_pcap_stats st;
    assert_int_equal(hx_pcap_scan(cap, cap_len, &st), 0);
    assert_int_equal(st.truncated, 1);
    assert_int_equal(st.homa, 1);
    assert_int_equal(st.flows[0].by_type[0], 1);
    assert_int_equal(st.bad_records, 1);
    assert_int_equal(st.rejects, 0);
}

static void pcap_scan__not_a_pcap(void **state)
{
    (void)state;
    struct hx_pcap_stats st;
    uint8_t junk[40] = {1, 2, 3};
    assert_int_equal(hx_pcap_scan(junk, sizeof(junk), &st), -1);
    assert_int_equal(hx_pcap_scan(junk, 3, &st), -1);
    file_header(147); /* unsupported link type */
    assert_int_equal(hx_pcap_scan(cap, cap_len, &st), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pcap_scan__ethernet_counts_types_and_tos),
        cmocka_unit_test(pcap_scan__rejects_are_counted_by_reason),
        cmocka_unit_test(pcap_scan__truncated_and_damaged_records),
        cmocka_unit_test(pcap_scan__not_a_pcap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
