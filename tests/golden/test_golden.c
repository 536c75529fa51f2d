/* Golden tests: real packets of the Linux Homa module (two kernel-Homa VMs,
 * captured on their bridge; see tests/golden/README.md), decoded by
 * libhoma.  Every Homa packet must be accepted by homa_wire_decode, carry
 * the fields docs/wire.md says the kernel sends, and the DATA of each
 * captured message must reassemble into exactly the bytes the sender wrote.
 *
 * The pcap files are read by hand (24-byte file header, 16-byte record
 * headers; Ethernet or raw IP link type) to need no libpcap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/wire.h"
#include "io/io.h"

#ifndef HOMA_GOLDEN_DIR
#define HOMA_GOLDEN_DIR "tests/golden"
#endif

/* The payload of the interop peer's messages (scripts/interop/khoma_peer.c):
 * byte i of a message of length len. */
static uint8_t hx_pattern(uint32_t len, uint32_t i)
{
    uint32_t v = (i / 4) * 2654435761u ^ (len * 40503u + 0x9e37u);
    return (uint8_t)(v >> (8 * (i % 4)));
}

struct msg {
    homa_addr src;
    uint64_t id;
    uint32_t length;
    uint32_t got; /* distinct bytes received (duplicates not counted) */
    uint8_t *data;
    uint8_t *have;
};

struct stats {
    int pkts, homa, decoded, by_type[HOMA_PKT_TYPE_COUNT];
    int look_alike, doff_ok, csum_full, csum_partial, tos_ok, ctl_e0;
    int data_seq_offset, data_seg_offset, acks_without_records;
    int unknown_family;
    int no_reassembly; /* decode-only (large captures) */
    struct msg msgs[256];
    int nmsgs;
};

static uint32_t rd32(const uint8_t *p, int swap)
{
    uint32_t v;
    memcpy(&v, p, 4);
    if (swap) v = __builtin_bswap32(v);
    return v;
}

static struct msg *msg_for(struct stats *st, const homa_addr *src, uint64_t id, uint32_t len)
{
    for (int i = 0; i < st->nmsgs; i++)
        if (st->msgs[i].id == id && memcmp(&st->msgs[i].src, src, sizeof(*src)) == 0)
            return &st->msgs[i];
    if (st->nmsgs == (int)(sizeof(st->msgs) / sizeof(st->msgs[0]))) return NULL;
    struct msg *m = &st->msgs[st->nmsgs++];
    m->src = *src;
    m->id = id;
    m->length = len;
    m->got = 0;
    m->data = calloc(1, len ? len : 1);
    m->have = calloc(1, len ? len : 1);
    assert_non_null(m->data);
    assert_non_null(m->have);
    return m;
}

/* One captured IP packet: checks its Homa bytes. */
static void check_ip(struct stats *st, const uint8_t *ip, size_t len)
{
    homa_addr src, dst;
    uint8_t tos;
    const uint8_t *h;
    size_t hl;
    if (len >= 20 && (ip[0] >> 4) == 4) {
        if (ip[9] != HOMA_IPPROTO) return; /* ICMP and others */
        size_t ihl;
        assert_int_equal(homa_raw_strip_ipv4(ip, len, &ihl, &tos, &src, &dst), 0);
        h = ip + ihl;
        hl = len - ihl;
    } else if (len >= 40 && (ip[0] >> 4) == 6) {
        if (ip[6] != HOMA_IPPROTO) return;
        tos = (uint8_t)((ip[0] << 4) | (ip[1] >> 4));
        memcpy(src.bytes, ip + 8, 16);
        memcpy(dst.bytes, ip + 24, 16);
        h = ip + 40;
        hl = len - 40;
    } else {
        st->unknown_family++;
        return;
    }
    st->homa++;
    struct homa_wire_pkt p;
    int rc = homa_wire_decode(h, hl, &p);
    if (rc != HOMA_WIRE_OK)
        print_message("packet %d (%zu bytes, type 0x%02x) rejected: %d\n", st->pkts, hl,
                      hl > 11 ? h[11] : 0, rc);
    assert_int_equal(rc, HOMA_WIRE_OK);
    st->decoded++;
    st->by_type[p.type - HOMA_PKT_TYPE_MIN]++;
    if (h[13] == HOMA_RAW_FLAGS && h[18] == (HOMA_RAW_URGENT >> 8) &&
        h[19] == (HOMA_RAW_URGENT & 0xff))
        st->look_alike++;
    /* DATA: 14 words; 13 in a packet cut from a multi-segment GSO skb
     * (homa_outgoing.c: the replicated header then lacks the 4-byte
     * segment header).  Every other type claims 5 words. */
    if (p.type == HOMA_PKT_DATA ? (h[12] == 0xE0 || h[12] == 0xD0) : h[12] == 0x50) st->doff_ok++;
    /* The checksum: complete (as a NIC or software fills it), or only the
     * pseudo-header sum the kernel leaves for a NIC to finish (virtio). */
    size_t hdr = homa_wire_hdr_len(p.type);
    uint8_t copy[HOMA_MAX_HDR_LEN];
    memcpy(copy, h, hdr);
    copy[16] = copy[17] = 0;
    uint16_t field = (uint16_t)(h[16] << 8 | h[17]);
    if (field == homa_raw_checksum(&src, &dst, copy, hdr, h + hdr, hl - hdr))
        st->csum_full++;
    else if (field == homa_raw_pseudo_sum(&src, &dst, (uint32_t)hl))
        st->csum_partial++;
    if ((tos & 0x1f) == 0) st->tos_ok++;
    if (p.type != HOMA_PKT_DATA && tos == 0xe0) st->ctl_e0++;
    if (p.type == HOMA_PKT_ACK && p.u.ack.num_acks == 0) st->acks_without_records++;
    if (p.type != HOMA_PKT_DATA) return;
    uint32_t seg = (uint32_t)h[52] << 24 | (uint32_t)h[53] << 16 | (uint32_t)h[54] << 8 | h[55];
    if (seg == HOMA_DATA_OFFSET_IN_SEQ)
        st->data_seq_offset++;
    else
        st->data_seg_offset++;
    if (st->no_reassembly) return;
    struct msg *m = msg_for(st, &src, p.sender_id, p.u.data.message_length);
    if (m == NULL) return;
    assert_int_equal(m->length, p.u.data.message_length);
    for (uint32_t i = 0; i < p.u.data.payload_len; i++) {
        uint32_t at = p.u.data.offset + i;
        if (m->have[at]) {
            assert_int_equal(m->data[at], p.u.data.payload[i]); /* a resend: same bytes */
            continue;
        }
        m->have[at] = 1;
        m->data[at] = p.u.data.payload[i];
        m->got++;
    }
}

static void read_pcap(const char *name, struct stats *st)
{
    char path[512];
    if (name[0] == '/')
        snprintf(path, sizeof(path), "%s", name);
    else
        snprintf(path, sizeof(path), "%s/%s", HOMA_GOLDEN_DIR, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc((size_t)n);
    assert_non_null(d);
    assert_int_equal(fread(d, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    assert_true(n >= 24);
    uint32_t magic = rd32(d, 0);
    int swap = magic == 0xd4c3b2a1u || magic == 0x4d3cb2a1u;
    assert_true(swap || magic == 0xa1b2c3d4u || magic == 0xa1b23c4du);
    uint32_t linktype = rd32(d + 20, swap);
    assert_true(linktype == 1 || linktype == 101);
    size_t off = 24;
    while (off + 16 <= (size_t)n) {
        uint32_t incl = rd32(d + off + 8, swap), orig = rd32(d + off + 12, swap);
        assert_true(off + 16 + incl <= (size_t)n);
        assert_int_equal(incl, orig); /* whole packets */
        const uint8_t *pkt = d + off + 16;
        size_t len = incl;
        off += 16 + incl;
        st->pkts++;
        if (linktype == 1) {
            if (len < 14) continue;
            uint16_t et = (uint16_t)(pkt[12] << 8 | pkt[13]);
            if (et != 0x0800 && et != 0x86DD) continue;
            pkt += 14;
            len -= 14;
            /* Ethernet pads short frames: trust the IP length. */
            if (len >= 20 && (pkt[0] >> 4) == 4) {
                size_t tot = (size_t)pkt[2] << 8 | pkt[3];
                if (tot <= len) len = tot;
            } else if (len >= 40 && (pkt[0] >> 4) == 6) {
                size_t tot = 40 + ((size_t)pkt[4] << 8 | pkt[5]);
                if (tot <= len) len = tot;
            }
        }
        check_ip(st, pkt, len);
    }
    free(d);
}

static void report(const char *name, const struct stats *st)
{
    print_message("%s: %d packets, %d Homa, %d decoded; DATA %d (offset in sequence %d, in "
                  "segment %d), GRANT %d, RESEND %d, NEED_ACK %d, ACK %d (%d without records), "
                  "checksums %d complete + %d pseudo-header only, %d messages\n",
                  name, st->pkts, st->homa, st->decoded, st->by_type[0], st->data_seq_offset,
                  st->data_seg_offset, st->by_type[1], st->by_type[2], st->by_type[7],
                  st->by_type[8], st->acks_without_records, st->csum_full, st->csum_partial,
                  st->nmsgs);
}

/* The facts every kernel packet must show. */
static void check_common(const struct stats *st)
{
    assert_true(st->homa > 0);
    assert_int_equal(st->decoded, st->homa);
    assert_int_equal(st->look_alike, st->homa);
    assert_int_equal(st->doff_ok, st->homa);
    assert_int_equal(st->csum_full + st->csum_partial, st->homa);
    assert_int_equal(st->tos_ok, st->homa);
    int ctl = st->homa - st->by_type[0];
    assert_int_equal(st->ctl_e0, ctl);
}

static void free_msgs(struct stats *st)
{
    for (int i = 0; i < st->nmsgs; i++) {
        free(st->msgs[i].data);
        free(st->msgs[i].have);
    }
}

/* khoma_peer echo RPCs of 1, 1424, 1425, 40000 and 40001 bytes: requests
 * and responses reassemble into the sender's pattern. */
static void golden__k2k_sizes(void **state)
{
    (void)state;
    struct stats *st = calloc(1, sizeof(*st));
    read_pcap("k2k-sizes-small.pcap", st);
    report("k2k-sizes-small", st);
    check_common(st);
    assert_true(st->data_seq_offset > st->data_seg_offset); /* most carry -1 */
    static const uint32_t lens[] = {1, 1424, 1425, 40000, 40001};
    int found[5] = {0};
    for (int i = 0; i < st->nmsgs; i++) {
        const struct msg *m = &st->msgs[i];
        assert_int_equal(m->got, m->length); /* complete */
        for (uint32_t k = 0; k < m->length; k++)
            if (m->data[k] != hx_pattern(m->length, k))
                fail_msg("message %llu (%u bytes): byte %u differs", (unsigned long long)m->id,
                         m->length, k);
        for (int j = 0; j < 5; j++)
            if (m->length == lens[j]) found[j]++;
    }
    for (int j = 0; j < 5; j++)
        assert_int_equal(found[j], 2); /* request and response */
    free_msgs(st);
    free(st);
}

/* The module's own homa_test against its server: lengths 100 and 1424. */
static void golden__k2k_homa_test(void **state)
{
    (void)state;
    struct stats *st = calloc(1, sizeof(*st));
    read_pcap("k2k-homa-test-small.pcap", st);
    report("k2k-homa-test-small", st);
    check_common(st);
    for (int i = 0; i < st->nmsgs; i++)
        assert_int_equal(st->msgs[i].got, st->msgs[i].length);
    free_msgs(st);
    free(st);
}

/* 150 packets from the middle of 8 RPCs in flight (messages cut by the
 * range are incomplete; each byte present must match the pattern). */
static void golden__k2k_many_part(void **state)
{
    (void)state;
    struct stats *st = calloc(1, sizeof(*st));
    read_pcap("k2k-many-part.pcap", st);
    report("k2k-many-part", st);
    check_common(st);
    for (int i = 0; i < st->nmsgs; i++) {
        const struct msg *m = &st->msgs[i];
        for (uint32_t k = 0; k < m->length; k++)
            if (m->have[k] && m->data[k] != hx_pattern(m->length, k))
                fail_msg("message %llu: byte %u differs", (unsigned long long)m->id, k);
    }
    free_msgs(st);
    free(st);
}

/* An extra capture named on the command line (e.g. the full interop
 * captures, too big to commit): decode-only checks. */
static const char *extra;

static void golden__extra_file(void **state)
{
    (void)state;
    if (extra == NULL) skip();
    struct stats *st = calloc(1, sizeof(*st));
    st->no_reassembly = 1;
    read_pcap(extra, st);
    report(extra, st);
    check_common(st);
    free_msgs(st);
    free(st);
}

int main(int argc, char **argv)
{
    if (argc > 1) extra = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(golden__k2k_sizes),
        cmocka_unit_test(golden__k2k_homa_test),
        cmocka_unit_test(golden__k2k_many_part),
        cmocka_unit_test(golden__extra_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
