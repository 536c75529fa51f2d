/* Unit tests for the wire codec (src/core/wire.c).
 *
 * The golden byte arrays below were written by hand from PROTOCOL.md section 2,
 * not produced by the encoder, so they check the encoder and the decoder
 * against the spec rather than against each other.  Field values are chosen
 * with distinct bytes so a swapped or misplaced field cannot go unnoticed. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/wire.h"
#include "homa/errors.h"

/* ---- golden packets ---- */

/* DATA: sport 0x1234, dport 0xABCD, id 0x0102030405060708, message_length
 * 0x12345, incoming 50000, ack {0x1122334455667788, 0x99AA}, cutoff_version
 * 0xBEEF, retransmit 1, offset 10000, payload "hello". */
static const uint8_t golden_data[] = {
    0x12, 0x34, 0xAB, 0xCD,                         /* sport, dport */
    0x00, 0x00, 0x27, 0x10,                         /* sequence = offset */
    0x00, 0x00, 0x00,                               /* unused */
    0x10,                                           /* type DATA */
    0xE0, 0x00,                                     /* doff (14 words), flags */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00,             /* window, checksum, urgent */
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* sender_id */
    0x00, 0x01, 0x23, 0x45,                         /* message_length */
    0x00, 0x00, 0xC3, 0x50,                         /* incoming */
    0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, /* ack.client_id */
    0x99, 0xAA,                                     /* ack.server_port */
    0xBE, 0xEF,                                     /* cutoff_version */
    0x01,                                           /* retransmit */
    0x00, 0x00, 0x00,                               /* pad */
    0x00, 0x00, 0x27, 0x10,                         /* offset */
    'h',  'e',  'l',  'l',  'o',                    /* payload */
};

/* GRANT: sport 4000, dport 99, id 0x8000000000000001, offset 100000, prio 5. */
static const uint8_t golden_grant[] = {
    0x0F, 0xA0, 0x00, 0x63,                         /* sport, dport */
    0x00, 0x00, 0x00, 0x00,                         /* sequence */
    0x00, 0x00, 0x00,                               /* unused */
    0x11,                                           /* type GRANT */
    0x50, 0x00,                                     /* doff, flags */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00,             /* window, checksum, urgent */
    0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, /* sender_id */
    0x00, 0x01, 0x86, 0xA0,                         /* offset */
    0x05,                                           /* priority */
};

/* RESEND: sport 0xFFFF, dport 1, id 0xFEDCBA9876543210, offset 0x12345678,
 * length HOMA_RESEND_ALL, priority 7. */
static const uint8_t golden_resend[] = {
    0xFF, 0xFF, 0x00, 0x01,                         /* sport, dport */
    0x00, 0x00, 0x00, 0x00,                         /* sequence */
    0x00, 0x00, 0x00,                               /* unused */
    0x12,                                           /* type RESEND */
    0x50, 0x00,                                     /* doff, flags */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00,             /* window, checksum, urgent */
    0xFE, 0xDC, 0xBA, 0x98, 0x76, 0x54, 0x32, 0x10, /* sender_id */
    0x12, 0x34, 0x56, 0x78,                         /* offset */
    0xFF, 0xFF, 0xFF, 0xFF,                         /* length */
    0x07,                                           /* priority */
};

/* The four header-only types: sport 0x0050, dport 0xC000, distinct ids. */
static const uint8_t golden_rpc_unknown[] = {
    0x00, 0x50, 0xC0, 0x00,                         /* sport, dport */
    0x00, 0x00, 0x00, 0x00,                         /* sequence */
    0x00, 0x00, 0x00,                               /* unused */
    0x13,                                           /* type RPC_UNKNOWN */
    0x50, 0x00,                                     /* doff, flags */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00,             /* window, checksum, urgent */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2A, /* sender_id 42 */
};
static const uint8_t golden_busy[] = {
    0x00, 0x50, 0xC0, 0x00,                         /* sport, dport */
    0x00, 0x00, 0x00, 0x00,                         /* sequence */
    0x00, 0x00, 0x00,                               /* unused */
    0x14,                                           /* type BUSY */
    0x50, 0x00,                                     /* doff, flags */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00,             /* window, checksum, urgent */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2B, /* sender_id 43 */
};
static const uint8_t golden_freeze[] = {
    0x00, 0x50, 0xC0, 0x00,                         /* sport, dport */
    0x00, 0x00, 0x00, 0x00,                         /* sequence */
    0x00, 0x00, 0x00,                               /* unused */
    0x16,                                           /* type FREEZE */
    0x50, 0x00,                                     /* doff, flags */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00,             /* window, checksum, urgent */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2C, /* sender_id 44 */
};
static const uint8_t golden_need_ack[] = {
    0x00, 0x50, 0xC0, 0x00,                         /* sport, dport */
    0x00, 0x00, 0x00, 0x00,                         /* sequence */
    0x00, 0x00, 0x00,                               /* unused */
    0x17,                                           /* type NEED_ACK */
    0x50, 0x00,                                     /* doff, flags */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00,             /* window, checksum, urgent */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2D, /* sender_id 45 */
};

/* CUTOFFS: sport 0x1111, dport 0x2222, id 1 << 32, version 0x0102. */
static const uint8_t golden_cutoffs[] = {
    0x11, 0x11, 0x22, 0x22,                         /* sport, dport */
    0x00, 0x00, 0x00, 0x00,                         /* sequence */
    0x00, 0x00, 0x00,                               /* unused */
    0x15,                                           /* type CUTOFFS */
    0x50, 0x00,                                     /* doff, flags */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00,             /* window, checksum, urgent */
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, /* sender_id */
    0x7F, 0xFF, 0xFF, 0xFF,                         /* cutoffs[0] */
    0x01, 0x02, 0x03, 0x04,                         /* cutoffs[1] */
    0x05, 0x06, 0x07, 0x08,                         /* cutoffs[2] */
    0x09, 0x0A, 0x0B, 0x0C,                         /* cutoffs[3] */
    0x00, 0x0F, 0x42, 0x40,                         /* cutoffs[4] = 1000000 */
    0x00, 0x00, 0x3A, 0x98,                         /* cutoffs[5] = 15000 */
    0x00, 0x00, 0x0A, 0xF0,                         /* cutoffs[6] = 2800 */
    0x00, 0x00, 0x00, 0xC8,                         /* cutoffs[7] = 200 */
    0x01, 0x02,                                     /* version */
};
static const uint32_t golden_cutoff_values[HOMA_NUM_PRIORITIES] = {
    0x7FFFFFFF, 0x01020304, 0x05060708, 0x090A0B0C, 1000000, 15000, 2800, 200,
};

/* ACK: sport 0x4321, dport 0x8765, id 0x0A0B0C0D0E0F1011, 3 acks used, the
 * last two records zero. */
static const uint8_t golden_ack[] = {
    0x43, 0x21, 0x87, 0x65,                         /* sport, dport */
    0x00, 0x00, 0x00, 0x00,                         /* sequence */
    0x00, 0x00, 0x00,                               /* unused */
    0x18,                                           /* type ACK */
    0x50, 0x00,                                     /* doff, flags */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00,             /* window, checksum, urgent */
    0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, /* sender_id */
    0x00, 0x03,                                     /* num_acks */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, /* acks[0].client_id */
    0x00, 0x64,                                     /* acks[0].server_port */
    0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, /* acks[1].client_id */
    0x00, 0x65,                                     /* acks[1].server_port */
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE, /* acks[2].client_id */
    0xFF, 0xFF,                                     /* acks[2].server_port */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* acks[3] */
    0x00, 0x00,                                     /* */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* acks[4] */
    0x00, 0x00,                                     /* */
};

_Static_assert(sizeof(golden_data) == HOMA_DATA_HDR_LEN + 5, "golden DATA size");
_Static_assert(sizeof(golden_grant) == HOMA_GRANT_LEN, "golden GRANT size");
_Static_assert(sizeof(golden_resend) == HOMA_RESEND_LEN, "golden RESEND size");
_Static_assert(sizeof(golden_rpc_unknown) == HOMA_RPC_UNKNOWN_LEN, "golden RPC_UNKNOWN size");
_Static_assert(sizeof(golden_busy) == HOMA_BUSY_LEN, "golden BUSY size");
_Static_assert(sizeof(golden_freeze) == HOMA_FREEZE_LEN, "golden FREEZE size");
_Static_assert(sizeof(golden_need_ack) == HOMA_NEED_ACK_LEN, "golden NEED_ACK size");
_Static_assert(sizeof(golden_cutoffs) == HOMA_CUTOFFS_LEN, "golden CUTOFFS size");
_Static_assert(sizeof(golden_ack) == HOMA_ACK_LEN, "golden ACK size");

/* The same packets as structs (payload pointers are filled in by callers). */
static struct homa_wire_pkt pkt_data(void)
{
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.sport = 0x1234;
    p.dport = 0xABCD;
    p.type = HOMA_PKT_DATA;
    p.sender_id = 0x0102030405060708ull;
    p.u.data.message_length = 0x12345;
    p.u.data.incoming = 50000;
    p.u.data.ack.client_id = 0x1122334455667788ull;
    p.u.data.ack.server_port = 0x99AA;
    p.u.data.cutoff_version = 0xBEEF;
    p.u.data.retransmit = 1;
    p.u.data.offset = 10000;
    return p;
}

static struct homa_wire_pkt pkt_grant(void)
{
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.sport = 4000;
    p.dport = 99;
    p.type = HOMA_PKT_GRANT;
    p.sender_id = 0x8000000000000001ull;
    p.u.grant.offset = 100000;
    p.u.grant.priority = 5;
    return p;
}

static struct homa_wire_pkt pkt_resend(void)
{
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.sport = 0xFFFF;
    p.dport = 1;
    p.type = HOMA_PKT_RESEND;
    p.sender_id = 0xFEDCBA9876543210ull;
    p.u.resend.offset = 0x12345678;
    p.u.resend.length = HOMA_RESEND_ALL;
    p.u.resend.priority = 7;
    return p;
}

static struct homa_wire_pkt pkt_simple(uint8_t type, uint64_t id)
{
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.sport = 0x0050;
    p.dport = 0xC000;
    p.type = type;
    p.sender_id = id;
    return p;
}

static struct homa_wire_pkt pkt_cutoffs(void)
{
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.sport = 0x1111;
    p.dport = 0x2222;
    p.type = HOMA_PKT_CUTOFFS;
    p.sender_id = 1ull << 32;
    memcpy(p.u.cutoffs.cutoffs, golden_cutoff_values, sizeof(golden_cutoff_values));
    p.u.cutoffs.version = 0x0102;
    return p;
}

static struct homa_wire_pkt pkt_ack(void)
{
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.sport = 0x4321;
    p.dport = 0x8765;
    p.type = HOMA_PKT_ACK;
    p.sender_id = 0x0A0B0C0D0E0F1011ull;
    p.u.ack.num_acks = 3;
    p.u.ack.acks[0].client_id = 2;
    p.u.ack.acks[0].server_port = 100;
    p.u.ack.acks[1].client_id = 0x1000000000000004ull;
    p.u.ack.acks[1].server_port = 101;
    p.u.ack.acks[2].client_id = 0xFFFFFFFFFFFFFFFEull;
    p.u.ack.acks[2].server_port = 0xFFFF;
    return p;
}

/* One entry per packet type: golden bytes and the matching struct. */
struct golden {
    uint8_t type;
    const uint8_t *bytes;
    size_t len;
};

static const struct golden goldens[] = {
    {HOMA_PKT_DATA, golden_data, sizeof(golden_data)},
    {HOMA_PKT_GRANT, golden_grant, sizeof(golden_grant)},
    {HOMA_PKT_RESEND, golden_resend, sizeof(golden_resend)},
    {HOMA_PKT_RPC_UNKNOWN, golden_rpc_unknown, sizeof(golden_rpc_unknown)},
    {HOMA_PKT_BUSY, golden_busy, sizeof(golden_busy)},
    {HOMA_PKT_CUTOFFS, golden_cutoffs, sizeof(golden_cutoffs)},
    {HOMA_PKT_FREEZE, golden_freeze, sizeof(golden_freeze)},
    {HOMA_PKT_NEED_ACK, golden_need_ack, sizeof(golden_need_ack)},
    {HOMA_PKT_ACK, golden_ack, sizeof(golden_ack)},
};
#define NUM_GOLDENS (sizeof(goldens) / sizeof(goldens[0]))
_Static_assert(sizeof(goldens) / sizeof(goldens[0]) == HOMA_PKT_TYPE_COUNT, "one per type");

/* ---- helpers ---- */

/* Field-by-field comparison (structs have padding, so no memcmp). */
static void assert_pkt_equal(const struct homa_wire_pkt *a, const struct homa_wire_pkt *b)
{
    assert_int_equal(a->sport, b->sport);
    assert_int_equal(a->dport, b->dport);
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->sender_id, b->sender_id);
    switch (a->type) {
    case HOMA_PKT_DATA:
        assert_int_equal(a->u.data.message_length, b->u.data.message_length);
        assert_int_equal(a->u.data.incoming, b->u.data.incoming);
        assert_int_equal(a->u.data.ack.client_id, b->u.data.ack.client_id);
        assert_int_equal(a->u.data.ack.server_port, b->u.data.ack.server_port);
        assert_int_equal(a->u.data.cutoff_version, b->u.data.cutoff_version);
        assert_int_equal(a->u.data.retransmit, b->u.data.retransmit);
        assert_int_equal(a->u.data.offset, b->u.data.offset);
        assert_int_equal(a->u.data.payload_len, b->u.data.payload_len);
        if (a->u.data.payload_len > 0)
            assert_memory_equal(a->u.data.payload, b->u.data.payload, a->u.data.payload_len);
        break;
    case HOMA_PKT_GRANT:
        assert_int_equal(a->u.grant.offset, b->u.grant.offset);
        assert_int_equal(a->u.grant.priority, b->u.grant.priority);
        break;
    case HOMA_PKT_RESEND:
        assert_int_equal(a->u.resend.offset, b->u.resend.offset);
        assert_int_equal(a->u.resend.length, b->u.resend.length);
        assert_int_equal(a->u.resend.priority, b->u.resend.priority);
        break;
    case HOMA_PKT_CUTOFFS:
        for (int i = 0; i < HOMA_NUM_PRIORITIES; i++)
            assert_int_equal(a->u.cutoffs.cutoffs[i], b->u.cutoffs.cutoffs[i]);
        assert_int_equal(a->u.cutoffs.version, b->u.cutoffs.version);
        break;
    case HOMA_PKT_ACK:
        assert_int_equal(a->u.ack.num_acks, b->u.ack.num_acks);
        for (int i = 0; i < HOMA_MAX_ACKS_PER_PKT; i++) {
            assert_int_equal(a->u.ack.acks[i].client_id, b->u.ack.acks[i].client_id);
            assert_int_equal(a->u.ack.acks[i].server_port, b->u.ack.acks[i].server_port);
        }
        break;
    default:
        break;
    }
}

/* Decodes a heap copy of exactly len bytes, so a read past the end shows up
 * under AddressSanitizer instead of silently hitting the rest of a static
 * array. */
static int decode_exact(const uint8_t *bytes, size_t len, struct homa_wire_pkt *out)
{
    uint8_t *copy = malloc(len > 0 ? len : 1);
    assert_non_null(copy);
    if (len > 0) memcpy(copy, bytes, len);
    int rc = homa_wire_decode(copy, len, out);
    free(copy);
    /* out->u.data.payload would dangle now; callers of this helper only look
     * at the return code and scalar fields. */
    return rc;
}

/* Encodes p and checks the bytes against golden[0..hdr_len); also checks
 * that exactly hdr_len bytes were written (canary after them) and that stale
 * buffer contents cannot leak into unused fields. */
static void check_encode(const struct homa_wire_pkt *p, const uint8_t *golden, size_t hdr_len)
{
    uint8_t buf[HOMA_MAX_HDR_LEN + 16];
    memset(buf, 0xA5, sizeof(buf));
    assert_int_equal(homa_wire_encode(p, buf), hdr_len);
    assert_memory_equal(buf, golden, hdr_len);
    for (size_t i = hdr_len; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 0xA5);
}

/* ---- golden encode tests ---- */

static void homa_wire_encode__data_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt p = pkt_data();
    /* The encoder writes only the header; payload fields are ignored. */
    p.u.data.payload = golden_data + HOMA_DATA_HDR_LEN;
    p.u.data.payload_len = 5;
    check_encode(&p, golden_data, HOMA_DATA_HDR_LEN);
}

static void homa_wire_encode__grant_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt p = pkt_grant();
    check_encode(&p, golden_grant, sizeof(golden_grant));
}

static void homa_wire_encode__resend_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt p = pkt_resend();
    check_encode(&p, golden_resend, sizeof(golden_resend));
}

static void homa_wire_encode__rpc_unknown_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt p = pkt_simple(HOMA_PKT_RPC_UNKNOWN, 42);
    check_encode(&p, golden_rpc_unknown, sizeof(golden_rpc_unknown));
}

static void homa_wire_encode__busy_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt p = pkt_simple(HOMA_PKT_BUSY, 43);
    check_encode(&p, golden_busy, sizeof(golden_busy));
}

static void homa_wire_encode__freeze_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt p = pkt_simple(HOMA_PKT_FREEZE, 44);
    check_encode(&p, golden_freeze, sizeof(golden_freeze));
}

static void homa_wire_encode__need_ack_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt p = pkt_simple(HOMA_PKT_NEED_ACK, 45);
    check_encode(&p, golden_need_ack, sizeof(golden_need_ack));
}

static void homa_wire_encode__cutoffs_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt p = pkt_cutoffs();
    check_encode(&p, golden_cutoffs, sizeof(golden_cutoffs));
}

static void homa_wire_encode__ack_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt p = pkt_ack();
    check_encode(&p, golden_ack, sizeof(golden_ack));
}

/* ---- golden decode tests ---- */

static void homa_wire_decode__data_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt got;
    assert_int_equal(homa_wire_decode(golden_data, sizeof(golden_data), &got), HOMA_WIRE_OK);
    assert_int_equal(got.sport, 0x1234);
    assert_int_equal(got.dport, 0xABCD);
    assert_int_equal(got.type, HOMA_PKT_DATA);
    assert_int_equal(got.sender_id, 0x0102030405060708ull);
    assert_int_equal(got.u.data.message_length, 0x12345);
    assert_int_equal(got.u.data.incoming, 50000);
    assert_int_equal(got.u.data.ack.client_id, 0x1122334455667788ull);
    assert_int_equal(got.u.data.ack.server_port, 0x99AA);
    assert_int_equal(got.u.data.cutoff_version, 0xBEEF);
    assert_int_equal(got.u.data.retransmit, 1);
    assert_int_equal(got.u.data.offset, 10000);
    assert_ptr_equal(got.u.data.payload, golden_data + HOMA_DATA_HDR_LEN);
    assert_int_equal(got.u.data.payload_len, 5);
    assert_memory_equal(got.u.data.payload, "hello", 5);
}

static void homa_wire_decode__grant_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt got;
    assert_int_equal(homa_wire_decode(golden_grant, sizeof(golden_grant), &got), HOMA_WIRE_OK);
    assert_int_equal(got.sport, 4000);
    assert_int_equal(got.dport, 99);
    assert_int_equal(got.type, HOMA_PKT_GRANT);
    assert_int_equal(got.sender_id, 0x8000000000000001ull);
    assert_int_equal(got.u.grant.offset, 100000);
    assert_int_equal(got.u.grant.priority, 5);
}

static void homa_wire_decode__resend_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt got;
    assert_int_equal(homa_wire_decode(golden_resend, sizeof(golden_resend), &got), HOMA_WIRE_OK);
    assert_int_equal(got.sport, 0xFFFF);
    assert_int_equal(got.dport, 1);
    assert_int_equal(got.type, HOMA_PKT_RESEND);
    assert_int_equal(got.sender_id, 0xFEDCBA9876543210ull);
    assert_int_equal(got.u.resend.offset, 0x12345678);
    assert_int_equal(got.u.resend.length, HOMA_RESEND_ALL);
    assert_int_equal(got.u.resend.priority, 7);
}

static void check_decode_simple(const uint8_t *bytes, size_t len, uint8_t type, uint64_t id)
{
    struct homa_wire_pkt got;
    assert_int_equal(homa_wire_decode(bytes, len, &got), HOMA_WIRE_OK);
    assert_int_equal(got.sport, 0x0050);
    assert_int_equal(got.dport, 0xC000);
    assert_int_equal(got.type, type);
    assert_int_equal(got.sender_id, id);
}

static void homa_wire_decode__rpc_unknown_golden(void **state)
{
    (void)state;
    check_decode_simple(golden_rpc_unknown, sizeof(golden_rpc_unknown), HOMA_PKT_RPC_UNKNOWN, 42);
}

static void homa_wire_decode__busy_golden(void **state)
{
    (void)state;
    check_decode_simple(golden_busy, sizeof(golden_busy), HOMA_PKT_BUSY, 43);
}

static void homa_wire_decode__freeze_golden(void **state)
{
    (void)state;
    check_decode_simple(golden_freeze, sizeof(golden_freeze), HOMA_PKT_FREEZE, 44);
}

static void homa_wire_decode__need_ack_golden(void **state)
{
    (void)state;
    check_decode_simple(golden_need_ack, sizeof(golden_need_ack), HOMA_PKT_NEED_ACK, 45);
}

static void homa_wire_decode__cutoffs_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt got;
    assert_int_equal(homa_wire_decode(golden_cutoffs, sizeof(golden_cutoffs), &got), HOMA_WIRE_OK);
    assert_int_equal(got.sport, 0x1111);
    assert_int_equal(got.dport, 0x2222);
    assert_int_equal(got.type, HOMA_PKT_CUTOFFS);
    assert_int_equal(got.sender_id, 1ull << 32);
    for (int i = 0; i < HOMA_NUM_PRIORITIES; i++)
        assert_int_equal(got.u.cutoffs.cutoffs[i], golden_cutoff_values[i]);
    assert_int_equal(got.u.cutoffs.version, 0x0102);
}

static void homa_wire_decode__ack_golden(void **state)
{
    (void)state;
    struct homa_wire_pkt got;
    assert_int_equal(homa_wire_decode(golden_ack, sizeof(golden_ack), &got), HOMA_WIRE_OK);
    assert_int_equal(got.sport, 0x4321);
    assert_int_equal(got.dport, 0x8765);
    assert_int_equal(got.type, HOMA_PKT_ACK);
    assert_int_equal(got.sender_id, 0x0A0B0C0D0E0F1011ull);
    assert_int_equal(got.u.ack.num_acks, 3);
    assert_int_equal(got.u.ack.acks[0].client_id, 2);
    assert_int_equal(got.u.ack.acks[0].server_port, 100);
    assert_int_equal(got.u.ack.acks[1].client_id, 0x1000000000000004ull);
    assert_int_equal(got.u.ack.acks[1].server_port, 101);
    assert_int_equal(got.u.ack.acks[2].client_id, 0xFFFFFFFFFFFFFFFEull);
    assert_int_equal(got.u.ack.acks[2].server_port, 0xFFFF);
    for (int i = 3; i < HOMA_MAX_ACKS_PER_PKT; i++) {
        assert_int_equal(got.u.ack.acks[i].client_id, 0);
        assert_int_equal(got.u.ack.acks[i].server_port, 0);
    }
}

/* ---- round trips ---- */

/* Small deterministic PRNG (xorshift64*) so failures reproduce. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* Fills every field the wire can carry for p->type with random valid values. */
static void random_pkt(uint8_t type, struct homa_wire_pkt *p)
{
    memset(p, 0, sizeof(*p));
    p->type = type;
    p->sport = (uint16_t)rnd();
    p->dport = (uint16_t)rnd();
    p->sender_id = rnd() | 1; /* never zero */
    switch (type) {
    case HOMA_PKT_DATA:
        p->u.data.message_length = (uint32_t)rnd();
        p->u.data.incoming = (uint32_t)rnd();
        p->u.data.ack.client_id = rnd();
        p->u.data.ack.server_port = (uint16_t)rnd();
        p->u.data.cutoff_version = (uint16_t)rnd();
        p->u.data.retransmit = (uint8_t)rnd();
        /* leave room for the test's payload of up to 64 bytes */
        p->u.data.message_length |= 64;
        p->u.data.offset = (uint32_t)(rnd() % (p->u.data.message_length - 63));
        break;
    case HOMA_PKT_GRANT:
        p->u.grant.offset = (uint32_t)rnd();
        p->u.grant.priority = (uint8_t)(rnd() % HOMA_NUM_PRIORITIES);
        break;
    case HOMA_PKT_RESEND:
        p->u.resend.offset = (uint32_t)rnd();
        p->u.resend.length = (uint32_t)rnd();
        p->u.resend.priority = (uint8_t)(rnd() % HOMA_NUM_PRIORITIES);
        break;
    case HOMA_PKT_CUTOFFS:
        for (int i = 0; i < HOMA_NUM_PRIORITIES; i++)
            p->u.cutoffs.cutoffs[i] = (uint32_t)rnd();
        p->u.cutoffs.version = (uint16_t)rnd();
        break;
    case HOMA_PKT_ACK:
        p->u.ack.num_acks = (uint16_t)(rnd() % (HOMA_MAX_ACKS_PER_PKT + 1));
        for (int i = 0; i < HOMA_MAX_ACKS_PER_PKT; i++) {
            p->u.ack.acks[i].client_id = rnd();
            p->u.ack.acks[i].server_port = (uint16_t)rnd();
        }
        break;
    default:
        break;
    }
}

static void homa_wire_encode__roundtrip_all_types(void **state)
{
    (void)state;
    for (int type = HOMA_PKT_TYPE_MIN; type <= HOMA_PKT_TYPE_MAX; type++) {
        for (int iter = 0; iter < 1000; iter++) {
            struct homa_wire_pkt p, got;
            uint8_t buf[HOMA_MAX_HDR_LEN + 64];
            random_pkt((uint8_t)type, &p);
            size_t n = homa_wire_encode(&p, buf);
            assert_int_equal(n, homa_wire_hdr_len((uint8_t)type));
            if (type == HOMA_PKT_DATA) {
                uint32_t plen = (uint32_t)(rnd() % 65);
                for (uint32_t i = 0; i < plen; i++)
                    buf[n + i] = (uint8_t)rnd();
                p.u.data.payload = buf + n;
                p.u.data.payload_len = plen;
                n += plen;
            }
            assert_int_equal(homa_wire_decode(buf, n, &got), HOMA_WIRE_OK);
            assert_pkt_equal(&p, &got);
            if (type == HOMA_PKT_DATA)
                assert_ptr_equal(got.u.data.payload, buf + HOMA_DATA_HDR_LEN);
        }
    }
}

/* Decoding the golden bytes and encoding again must give the golden header. */
static void homa_wire_decode__golden_reencodes_identically(void **state)
{
    (void)state;
    for (size_t g = 0; g < NUM_GOLDENS; g++) {
        struct homa_wire_pkt got;
        uint8_t buf[HOMA_MAX_HDR_LEN];
        size_t hdr_len = homa_wire_hdr_len(goldens[g].type);
        assert_int_equal(homa_wire_decode(goldens[g].bytes, goldens[g].len, &got), HOMA_WIRE_OK);
        assert_int_equal(homa_wire_encode(&got, buf), hdr_len);
        assert_memory_equal(buf, goldens[g].bytes, hdr_len);
    }
}

/* ---- truncation ---- */

static void homa_wire_decode__truncated_every_prefix(void **state)
{
    (void)state;
    for (size_t g = 0; g < NUM_GOLDENS; g++) {
        size_t hdr_len = homa_wire_hdr_len(goldens[g].type);
        struct homa_wire_pkt got;
        for (size_t len = 0; len < hdr_len; len++) {
            int want = len < HOMA_COMMON_HDR_LEN ? HOMA_WIRE_SHORT : HOMA_WIRE_TRUNCATED;
            assert_int_equal(decode_exact(goldens[g].bytes, len, &got), want);
        }
        /* Exactly the header is enough (DATA then has an empty payload). */
        assert_int_equal(decode_exact(goldens[g].bytes, hdr_len, &got), HOMA_WIRE_OK);
        /* ... and so is the whole golden packet. */
        assert_int_equal(decode_exact(goldens[g].bytes, goldens[g].len, &got), HOMA_WIRE_OK);
    }
}

static void homa_wire_decode__short_beats_bad_type(void **state)
{
    (void)state;
    uint8_t buf[HOMA_COMMON_HDR_LEN];
    memset(buf, 0xFF, sizeof(buf));
    struct homa_wire_pkt got;
    assert_int_equal(homa_wire_decode(buf, sizeof(buf) - 1, &got), HOMA_WIRE_SHORT);
    assert_int_equal(homa_wire_decode(buf, sizeof(buf), &got), HOMA_WIRE_BAD_TYPE);
    assert_int_equal(homa_wire_decode(NULL, 0, &got), HOMA_WIRE_SHORT);
}

static void homa_wire_decode__data_header_only_has_empty_payload(void **state)
{
    (void)state;
    struct homa_wire_pkt got;
    assert_int_equal(homa_wire_decode(golden_data, HOMA_DATA_HDR_LEN, &got), HOMA_WIRE_OK);
    assert_int_equal(got.u.data.payload_len, 0);
    assert_ptr_equal(got.u.data.payload, golden_data + HOMA_DATA_HDR_LEN);
}

/* ---- bad fields ---- */

static void homa_wire_decode__zero_id(void **state)
{
    (void)state;
    for (size_t g = 0; g < NUM_GOLDENS; g++) {
        uint8_t buf[128];
        struct homa_wire_pkt got;
        memcpy(buf, goldens[g].bytes, goldens[g].len);
        memset(buf + 20, 0, 8);
        assert_int_equal(homa_wire_decode(buf, goldens[g].len, &got), HOMA_WIRE_ZERO_ID);
        /* One nonzero byte anywhere in the id makes it valid again. */
        for (int i = 20; i < 28; i++) {
            buf[i] = 1;
            assert_int_equal(homa_wire_decode(buf, goldens[g].len, &got), HOMA_WIRE_OK);
            buf[i] = 0;
        }
    }
}

static void homa_wire_decode__zero_id_beats_field_checks(void **state)
{
    (void)state;
    uint8_t buf[sizeof(golden_grant)];
    struct homa_wire_pkt got;
    memcpy(buf, golden_grant, sizeof(buf));
    memset(buf + 20, 0, 8);
    buf[32] = 8; /* also a bad priority */
    assert_int_equal(homa_wire_decode(buf, sizeof(buf), &got), HOMA_WIRE_ZERO_ID);
}

static void homa_wire_decode__bad_type(void **state)
{
    (void)state;
    static const uint8_t bad[] = {0x00, 0x0F, 0x19, 0xFF};
    for (size_t i = 0; i < sizeof(bad); i++) {
        uint8_t buf[HOMA_MAX_HDR_LEN];
        struct homa_wire_pkt got;
        memset(buf, 0, sizeof(buf));
        memcpy(buf, golden_ack, sizeof(golden_ack));
        buf[11] = bad[i];
        /* Rejected whatever the length, as soon as the type byte is there. */
        assert_int_equal(homa_wire_decode(buf, HOMA_COMMON_HDR_LEN, &got), HOMA_WIRE_BAD_TYPE);
        assert_int_equal(homa_wire_decode(buf, sizeof(buf), &got), HOMA_WIRE_BAD_TYPE);
        assert_int_equal(got.type, bad[i]);
    }
}

static void homa_wire_decode__every_type_byte(void **state)
{
    (void)state;
    for (int t = 0; t < 256; t++) {
        uint8_t buf[HOMA_MAX_HDR_LEN];
        struct homa_wire_pkt got;
        memset(buf, 0, sizeof(buf));
        buf[11] = (uint8_t)t;
        buf[27] = 1; /* sender_id 1 */
        /* Exactly the header: an all-zero DATA header with payload would
         * fail the range check instead. */
        size_t len = homa_wire_hdr_len((uint8_t)t);
        int rc = homa_wire_decode(buf, len ? len : sizeof(buf), &got);
        if (t >= HOMA_PKT_TYPE_MIN && t <= HOMA_PKT_TYPE_MAX)
            assert_int_equal(rc, HOMA_WIRE_OK);
        else
            assert_int_equal(rc, HOMA_WIRE_BAD_TYPE);
    }
}

/* Builds a DATA packet with the given fields and payload length in buf and
 * returns its total length. */
static size_t make_data(uint8_t *buf, uint32_t message_length, uint32_t offset, size_t payload_len)
{
    struct homa_wire_pkt p = pkt_data();
    p.u.data.message_length = message_length;
    p.u.data.offset = offset;
    size_t n = homa_wire_encode(&p, buf);
    memset(buf + n, 0x5A, payload_len);
    return n + payload_len;
}

static void homa_wire_decode__data_bad_range(void **state)
{
    (void)state;
    static uint8_t buf[HOMA_DATA_HDR_LEN + 256];
    struct homa_wire_pkt got;
    /* Ends exactly at message_length: fine.  One byte more: not. */
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 1000, 900, 100), &got), HOMA_WIRE_OK);
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 1000, 900, 101), &got),
                     HOMA_WIRE_BAD_RANGE);
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 1000, 901, 100), &got),
                     HOMA_WIRE_BAD_RANGE);
    /* Empty payload: offset may equal but not exceed message_length. */
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 1000, 1000, 0), &got), HOMA_WIRE_OK);
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 1000, 1001, 0), &got),
                     HOMA_WIRE_BAD_RANGE);
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 0, 0, 0), &got), HOMA_WIRE_OK);
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 0, 0, 1), &got), HOMA_WIRE_BAD_RANGE);
    /* offset + payload_len wraps to a small value in 32 bits: must still be
     * rejected. */
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 0xFFFFFFFF, 0xFFFFFFFF, 1), &got),
                     HOMA_WIRE_BAD_RANGE);
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 100, 0xFFFFFFFF, 1), &got),
                     HOMA_WIRE_BAD_RANGE);
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 0xFFFFFFFF, 0xFFFFFFF0, 0x20), &got),
                     HOMA_WIRE_BAD_RANGE);
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 0x10, 0xFFFFFFF0, 0x20), &got),
                     HOMA_WIRE_BAD_RANGE);
    /* The top of the 32-bit range is reachable exactly. */
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 0xFFFFFFFF, 0xFFFFFFFF, 0), &got),
                     HOMA_WIRE_OK);
    assert_int_equal(homa_wire_decode(buf, make_data(buf, 0xFFFFFFFF, 0xFFFFFF00, 0xFF), &got),
                     HOMA_WIRE_OK);
    assert_int_equal(got.u.data.payload_len, 0xFF);
}

static void homa_wire_decode__data_payload(void **state)
{
    (void)state;
    uint8_t buf[HOMA_DATA_HDR_LEN + 1500];
    struct homa_wire_pkt got;
    size_t n = make_data(buf, 1000000, 5000, 1500);
    for (size_t i = 0; i < 1500; i++)
        buf[HOMA_DATA_HDR_LEN + i] = (uint8_t)(i * 7);
    assert_int_equal(homa_wire_decode(buf, n, &got), HOMA_WIRE_OK);
    assert_ptr_equal(got.u.data.payload, buf + HOMA_DATA_HDR_LEN);
    assert_int_equal(got.u.data.payload_len, 1500);
    assert_int_equal(got.u.data.offset, 5000);
    assert_int_equal(got.u.data.message_length, 1000000);
    for (size_t i = 0; i < 1500; i++)
        assert_int_equal(got.u.data.payload[i], (uint8_t)(i * 7));
}

static void check_priority(const uint8_t *golden, size_t len, size_t prio_off)
{
    uint8_t buf[HOMA_MAX_HDR_LEN];
    struct homa_wire_pkt got;
    memcpy(buf, golden, len);
    for (int prio = 0; prio < 256; prio++) {
        buf[prio_off] = (uint8_t)prio;
        int want = prio <= 7 ? HOMA_WIRE_OK : HOMA_WIRE_BAD_PRIORITY;
        assert_int_equal(homa_wire_decode(buf, len, &got), want);
    }
    buf[prio_off] = 8;
    assert_int_equal(homa_wire_decode(buf, len, &got), HOMA_WIRE_BAD_PRIORITY);
    buf[prio_off] = 255;
    assert_int_equal(homa_wire_decode(buf, len, &got), HOMA_WIRE_BAD_PRIORITY);
    buf[prio_off] = 7;
    assert_int_equal(homa_wire_decode(buf, len, &got), HOMA_WIRE_OK);
    assert_int_equal(got.type == HOMA_PKT_GRANT ? got.u.grant.priority : got.u.resend.priority, 7);
}

static void homa_wire_decode__grant_bad_priority(void **state)
{
    (void)state;
    check_priority(golden_grant, sizeof(golden_grant), 32);
}

static void homa_wire_decode__resend_bad_priority(void **state)
{
    (void)state;
    check_priority(golden_resend, sizeof(golden_resend), 36);
}

static void homa_wire_decode__ack_bad_num_acks(void **state)
{
    (void)state;
    uint8_t buf[HOMA_ACK_LEN];
    struct homa_wire_pkt got;
    memcpy(buf, golden_ack, sizeof(buf));
    static const struct {
        uint8_t hi, lo;
        int want;
    } cases[] = {
        {0x00, 0x00, HOMA_WIRE_OK},       {0x00, 0x05, HOMA_WIRE_OK},
        {0x00, 0x06, HOMA_WIRE_BAD_ACKS}, {0xFF, 0xFF, HOMA_WIRE_BAD_ACKS},
        {0x01, 0x00, HOMA_WIRE_BAD_ACKS}, /* 256: the high byte counts too */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        buf[28] = cases[i].hi;
        buf[29] = cases[i].lo;
        assert_int_equal(homa_wire_decode(buf, sizeof(buf), &got), cases[i].want);
        if (cases[i].want == HOMA_WIRE_OK) assert_int_equal(got.u.ack.num_acks, cases[i].lo);
    }
}

/* ---- lenient fields ---- */

/* sequence, unused, doff, flags, window, checksum, urgent and DATA's pad are
 * ignored by the decoder: garbage there must not change the result. */
static void homa_wire_decode__ignores_unused_fields(void **state)
{
    (void)state;
    static const int ignored[] = {4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16, 17, 18, 19};
    for (size_t g = 0; g < NUM_GOLDENS; g++) {
        uint8_t buf[128];
        struct homa_wire_pkt want, got;
        memcpy(buf, goldens[g].bytes, goldens[g].len);
        assert_int_equal(homa_wire_decode(goldens[g].bytes, goldens[g].len, &want), HOMA_WIRE_OK);
        for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
            buf[ignored[i]] = 0xFF;
        if (goldens[g].type == HOMA_PKT_DATA) buf[49] = buf[50] = buf[51] = 0xFF;
        assert_int_equal(homa_wire_decode(buf, goldens[g].len, &got), HOMA_WIRE_OK);
        /* Compare against a decode of the original; payload pointers differ. */
        if (goldens[g].type == HOMA_PKT_DATA) want.u.data.payload = got.u.data.payload;
        assert_pkt_equal(&want, &got);
    }
}

static void homa_wire_decode__any_doff(void **state)
{
    (void)state;
    uint8_t buf[sizeof(golden_data)];
    struct homa_wire_pkt got;
    memcpy(buf, golden_data, sizeof(buf));
    for (int doff = 0; doff < 256; doff++) {
        buf[12] = (uint8_t)doff;
        assert_int_equal(homa_wire_decode(buf, sizeof(buf), &got), HOMA_WIRE_OK);
        assert_int_equal(got.u.data.payload_len, 5);
    }
}

static void homa_wire_decode__control_trailing_bytes_ignored(void **state)
{
    (void)state;
    for (size_t g = 0; g < NUM_GOLDENS; g++) {
        if (goldens[g].type == HOMA_PKT_DATA) continue;
        uint8_t buf[HOMA_MAX_HDR_LEN + 100];
        struct homa_wire_pkt want, got;
        memset(buf, 0xEE, sizeof(buf));
        memcpy(buf, goldens[g].bytes, goldens[g].len);
        assert_int_equal(homa_wire_decode(goldens[g].bytes, goldens[g].len, &want), HOMA_WIRE_OK);
        assert_int_equal(homa_wire_decode(buf, sizeof(buf), &got), HOMA_WIRE_OK);
        assert_pkt_equal(&want, &got);
    }
}

/* ---- encoder details ---- */

static void homa_wire_encode__doff_per_type(void **state)
{
    (void)state;
    for (int t = HOMA_PKT_TYPE_MIN; t <= HOMA_PKT_TYPE_MAX; t++) {
        struct homa_wire_pkt p;
        uint8_t buf[HOMA_MAX_HDR_LEN];
        random_pkt((uint8_t)t, &p);
        homa_wire_encode(&p, buf);
        assert_int_equal(buf[12], t == HOMA_PKT_DATA ? 0xE0 : 0x50);
        assert_int_equal(buf[11], t);
    }
}

static void homa_wire_encode__zeroes_unused_fields(void **state)
{
    (void)state;
    for (int t = HOMA_PKT_TYPE_MIN; t <= HOMA_PKT_TYPE_MAX; t++) {
        struct homa_wire_pkt p;
        uint8_t buf[HOMA_MAX_HDR_LEN];
        memset(buf, 0xFF, sizeof(buf));
        random_pkt((uint8_t)t, &p);
        homa_wire_encode(&p, buf);
        if (t != HOMA_PKT_DATA)
            for (int i = 4; i < 8; i++)
                assert_int_equal(buf[i], 0); /* sequence */
        for (int i = 8; i < 11; i++)
            assert_int_equal(buf[i], 0); /* unused */
        for (int i = 13; i < 20; i++)
            assert_int_equal(buf[i], 0); /* flags, window, checksum, urgent */
        if (t == HOMA_PKT_DATA) {
            for (int i = 49; i < 52; i++)
                assert_int_equal(buf[i], 0); /* pad */
            /* sequence mirrors offset */
            assert_memory_equal(buf + 4, buf + 52, 4);
        }
    }
}

static void homa_wire_encode__unknown_type(void **state)
{
    (void)state;
    struct homa_wire_pkt p = pkt_grant();
    uint8_t buf[HOMA_MAX_HDR_LEN];
    memset(buf, 0xA5, sizeof(buf));
    p.type = 0x19;
    assert_int_equal(homa_wire_encode(&p, buf), 0);
    for (size_t i = 0; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 0xA5);
}

/* ---- small functions ---- */

static void homa_wire_hdr_len__every_type(void **state)
{
    (void)state;
    static const size_t want[HOMA_PKT_TYPE_COUNT] = {
        56, 33, 37, 28, 28, 62, 28, 28, 80,
    };
    for (int t = 0; t < 256; t++) {
        if (t >= HOMA_PKT_TYPE_MIN && t <= HOMA_PKT_TYPE_MAX)
            assert_int_equal(homa_wire_hdr_len((uint8_t)t), want[t - HOMA_PKT_TYPE_MIN]);
        else
            assert_int_equal(homa_wire_hdr_len((uint8_t)t), 0);
    }
}

static void homa_wire_type_name__all(void **state)
{
    (void)state;
    static const char *const want[HOMA_PKT_TYPE_COUNT] = {
        "DATA", "GRANT", "RESEND", "RPC_UNKNOWN", "BUSY", "CUTOFFS", "FREEZE", "NEED_ACK", "ACK",
    };
    for (int t = 0; t < 256; t++) {
        const char *name = homa_wire_type_name((uint8_t)t);
        assert_non_null(name);
        if (t >= HOMA_PKT_TYPE_MIN && t <= HOMA_PKT_TYPE_MAX)
            assert_string_equal(name, want[t - HOMA_PKT_TYPE_MIN]);
        else
            assert_string_equal(name, "UNKNOWN");
    }
}

/* What the Linux module sends (docs/wire.md): most DATA packets carry
 * 0xFFFFFFFF as segment offset and the real offset in sequence, with the
 * TCP look-alike fields set.  Built by hand from those facts. */
static const uint8_t kernel_data[] = {
    0x80, 0x01, 0x0F, 0xA0,                         /* sport 32769, dport 4000 */
    0x00, 0x00, 0x05, 0x78,                         /* sequence = offset 1400 */
    0x00, 0x00, 0x00,                               /* unused */
    0x10,                                           /* type DATA */
    0xE0, 0x06,                                     /* doff, flags 0x06 */
    0x00, 0x00, 0x3C, 0x5A, 0xB9, 0x7D,             /* window, checksum, urgent 0xb97d */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x30, 0x3A, /* sender_id 12346 */
    0x00, 0x00, 0x0B, 0xB8,                         /* message_length 3000 */
    0x00, 0x00, 0x0B, 0xB8,                         /* incoming */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* ack.client_id */
    0x00, 0x00,                                     /* ack.server_port */
    0x00, 0x01,                                     /* cutoff_version */
    0x00,                                           /* retransmit */
    0x00, 0x00, 0x00,                               /* pad */
    0xFF, 0xFF, 0xFF, 0xFF,                         /* seg.offset = -1 */
    'a',  'b',  'c',                                /* payload */
};

static void homa_wire_decode__data_offset_in_sequence(void **state)
{
    (void)state;
    struct homa_wire_pkt got;
    assert_int_equal(homa_wire_decode(kernel_data, sizeof(kernel_data), &got), HOMA_WIRE_OK);
    assert_int_equal(got.type, HOMA_PKT_DATA);
    assert_int_equal(got.sport, 32769);
    assert_int_equal(got.dport, 4000);
    assert_int_equal(got.sender_id, 12346);
    assert_int_equal(got.u.data.message_length, 3000);
    assert_int_equal(got.u.data.offset, 1400);
    assert_int_equal(got.u.data.payload_len, 3);
    /* A real segment offset wins over sequence. */
    uint8_t buf[sizeof(kernel_data)];
    memcpy(buf, kernel_data, sizeof(buf));
    buf[52] = buf[53] = 0;
    buf[54] = 0x0B;
    buf[55] = 0xB0; /* 2992 */
    assert_int_equal(homa_wire_decode(buf, sizeof(buf), &got), HOMA_WIRE_OK);
    assert_int_equal(got.u.data.offset, 2992);
    /* The -1 rule still range-checks what sequence says. */
    memcpy(buf, kernel_data, sizeof(buf));
    buf[6] = 0x0B;
    buf[7] = 0xB6; /* 2998 + 3 > 3000 */
    assert_int_equal(homa_wire_decode(buf, sizeof(buf), &got), HOMA_WIRE_BAD_RANGE);
    memcpy(buf, kernel_data, sizeof(buf));
    buf[4] = buf[5] = buf[6] = buf[7] = 0xFF;
    assert_int_equal(homa_wire_decode(buf, sizeof(buf), &got), HOMA_WIRE_BAD_RANGE);
    /* The header-only decode (direct receive) follows the same rule. */
    assert_int_equal(
        homa_wire_decode_hdr(kernel_data, HOMA_DATA_HDR_LEN, sizeof(kernel_data), &got),
        HOMA_WIRE_OK);
    assert_int_equal(got.u.data.offset, 1400);
}

/* An ACK with no records (the kernel's answer to NEED_ACK) is valid. */
static void homa_wire_decode__ack_zero_records(void **state)
{
    (void)state;
    uint8_t buf[HOMA_ACK_LEN];
    memset(buf, 0, sizeof(buf));
    buf[0] = 0x80;
    buf[1] = 0x01;
    buf[2] = 0x0F;
    buf[3] = 0xA0;
    buf[11] = HOMA_PKT_ACK;
    buf[12] = 0x50;
    buf[13] = 0x06;
    buf[18] = 0xB9;
    buf[19] = 0x7D;
    buf[27] = 0x3A;
    struct homa_wire_pkt got;
    assert_int_equal(homa_wire_decode(buf, sizeof(buf), &got), HOMA_WIRE_OK);
    assert_int_equal(got.type, HOMA_PKT_ACK);
    assert_int_equal(got.sender_id, 0x3A);
    assert_int_equal(got.u.ack.num_acks, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_wire_decode__data_offset_in_sequence),
        cmocka_unit_test(homa_wire_decode__ack_zero_records),
        cmocka_unit_test(homa_wire_encode__data_golden),
        cmocka_unit_test(homa_wire_encode__grant_golden),
        cmocka_unit_test(homa_wire_encode__resend_golden),
        cmocka_unit_test(homa_wire_encode__rpc_unknown_golden),
        cmocka_unit_test(homa_wire_encode__busy_golden),
        cmocka_unit_test(homa_wire_encode__freeze_golden),
        cmocka_unit_test(homa_wire_encode__need_ack_golden),
        cmocka_unit_test(homa_wire_encode__cutoffs_golden),
        cmocka_unit_test(homa_wire_encode__ack_golden),
        cmocka_unit_test(homa_wire_decode__data_golden),
        cmocka_unit_test(homa_wire_decode__grant_golden),
        cmocka_unit_test(homa_wire_decode__resend_golden),
        cmocka_unit_test(homa_wire_decode__rpc_unknown_golden),
        cmocka_unit_test(homa_wire_decode__busy_golden),
        cmocka_unit_test(homa_wire_decode__freeze_golden),
        cmocka_unit_test(homa_wire_decode__need_ack_golden),
        cmocka_unit_test(homa_wire_decode__cutoffs_golden),
        cmocka_unit_test(homa_wire_decode__ack_golden),
        cmocka_unit_test(homa_wire_encode__roundtrip_all_types),
        cmocka_unit_test(homa_wire_decode__golden_reencodes_identically),
        cmocka_unit_test(homa_wire_decode__truncated_every_prefix),
        cmocka_unit_test(homa_wire_decode__short_beats_bad_type),
        cmocka_unit_test(homa_wire_decode__data_header_only_has_empty_payload),
        cmocka_unit_test(homa_wire_decode__zero_id),
        cmocka_unit_test(homa_wire_decode__zero_id_beats_field_checks),
        cmocka_unit_test(homa_wire_decode__bad_type),
        cmocka_unit_test(homa_wire_decode__every_type_byte),
        cmocka_unit_test(homa_wire_decode__data_bad_range),
        cmocka_unit_test(homa_wire_decode__data_payload),
        cmocka_unit_test(homa_wire_decode__grant_bad_priority),
        cmocka_unit_test(homa_wire_decode__resend_bad_priority),
        cmocka_unit_test(homa_wire_decode__ack_bad_num_acks),
        cmocka_unit_test(homa_wire_decode__ignores_unused_fields),
        cmocka_unit_test(homa_wire_decode__any_doff),
        cmocka_unit_test(homa_wire_decode__control_trailing_bytes_ignored),
        cmocka_unit_test(homa_wire_encode__doff_per_type),
        cmocka_unit_test(homa_wire_encode__zeroes_unused_fields),
        cmocka_unit_test(homa_wire_encode__unknown_type),
        cmocka_unit_test(homa_wire_hdr_len__every_type),
        cmocka_unit_test(homa_wire_type_name__all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
