/* Unit tests for src/core/input.c, chiefly the malformed-packet corpus:
 * every field out of range and truncation at every byte of every type must
 * be dropped, counted under the right reason, and leave no state behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"

#define PORT 7
#define CLIENT_PORT 9

static homa_addr peer = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}};

static homa_engine *make(void)
{
    homa_engine *e;
    assert_int_equal(homa_engine_create(NULL, NULL, &e), 0);
    assert_int_equal(homa_engine_port_open(e, PORT), 0);
    assert_int_equal(homa_engine_port_open(e, CLIENT_PORT), 0);
    return e;
}

static size_t build(uint8_t type, uint8_t *buf)
{
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.type = type;
    p.sport = 1000;
    p.dport = PORT;
    p.sender_id = 100;
    switch (type) {
    case HOMA_PKT_DATA:
        p.u.data.message_length = 500;
        p.u.data.incoming = 500;
        p.u.data.cutoff_version = 1;
        break;
    case HOMA_PKT_GRANT:
        p.u.grant.offset = 10;
        break;
    case HOMA_PKT_RESEND:
        p.u.resend.length = 10;
        break;
    case HOMA_PKT_ACK:
        p.u.ack.num_acks = 1;
        p.u.ack.acks[0].client_id = 4;
        break;
    case HOMA_PKT_CUTOFFS:
        p.u.cutoffs.version = 2;
        break;
    default:
        break;
    }
    size_t hl = homa_wire_encode(&p, buf);
    if (type == HOMA_PKT_DATA) {
        memset(buf + hl, 0x5a, 500);
        hl += 500;
    }
    return hl;
}

static uint64_t counter(homa_engine *e, const char *name)
{
    homa_counters c;
    homa_engine_counters(e, &c);
    const uint64_t *v = (const uint64_t *)&c;
    for (size_t i = 0; i < homa_counter_count(); i++)
        if (strcmp(homa_counter_name(i), name) == 0) return v[i];
    fail_msg("no counter %s", name);
    return 0;
}

static void homa_engine_input__truncation_at_every_byte(void **state)
{
    (void)state;
    homa_engine *e = make();
    uint8_t buf[1000];
    uint64_t shorts = 0, truncs = 0;
    for (uint8_t t = HOMA_PKT_TYPE_MIN; t <= HOMA_PKT_TYPE_MAX; t++) {
        size_t full = build(t, buf);
        size_t hdr = homa_wire_hdr_len(t);
        assert_true(hdr >= HOMA_COMMON_HDR_LEN && hdr <= full);
        for (size_t len = 0; len < hdr; len++) {
            /* a fresh heap copy of exactly len bytes so ASan sees overreads */
            uint8_t *copy = malloc(len ? len : 1);
            memcpy(copy, buf, len);
            int r = homa_engine_input(e, 0, &peer, copy, len);
            free(copy);
            if (len < HOMA_COMMON_HDR_LEN) {
                assert_int_equal(r, HOMA_DROP_SHORT);
                shorts++;
            } else {
                assert_int_equal(r, HOMA_DROP_TRUNCATED);
                truncs++;
            }
        }
    }
    assert_int_equal(counter(e, "drop_short"), shorts);
    assert_int_equal(counter(e, "drop_truncated"), truncs);
    assert_int_equal(counter(e, "pkts_in"), 0);
    assert_int_equal(counter(e, "rpcs_live"), 0);
    assert_int_equal(counter(e, "rx_bytes_in_use"), 0);
    homa_engine_destroy(e);
}

static void expect_drop(homa_engine *e, uint8_t *buf, size_t len, int reason, const char *ctr)
{
    uint64_t before = counter(e, ctr);
    assert_int_equal(homa_engine_input(e, 0, &peer, buf, len), reason);
    assert_int_equal(counter(e, ctr), before + 1);
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void homa_engine_input__fields_out_of_range(void **state)
{
    (void)state;
    homa_engine *e = make();
    uint8_t buf[1000];
    size_t len;

    /* unknown types */
    uint8_t bad_types[] = {0x00, 0x0f, 0x19, 0xff};
    for (size_t i = 0; i < sizeof(bad_types); i++) {
        len = build(HOMA_PKT_BUSY, buf);
        buf[11] = bad_types[i];
        expect_drop(e, buf, len, HOMA_DROP_BAD_TYPE, "drop_bad_type");
    }
    /* zero id, every type */
    for (uint8_t t = HOMA_PKT_TYPE_MIN; t <= HOMA_PKT_TYPE_MAX; t++) {
        len = build(t, buf);
        memset(buf + 20, 0, 8);
        expect_drop(e, buf, len, HOMA_DROP_ZERO_ID, "drop_zero_id");
    }
    /* DATA: offset + payload beyond message_length, including 32-bit wrap */
    uint32_t offsets[] = {1, 499, 0xffffffffu, 0xfffffe0cu};
    for (size_t i = 0; i < 4; i++) {
        len = build(HOMA_PKT_DATA, buf);
        put32(buf + 52, offsets[i]);
        /* 0xffffffff says "the offset is in sequence" (the kernel's rule):
         * a hostile sequence must be range-checked the same way. */
        if (offsets[i] == 0xffffffffu) put32(buf + 4, 0xfffffff0u);
        expect_drop(e, buf, len, HOMA_DROP_BAD_RANGE, "drop_bad_range");
    }
    /* DATA: message longer than the configured maximum (range itself fine) */
    len = build(HOMA_PKT_DATA, buf);
    put32(buf + 28, 1000001);
    expect_drop(e, buf, len, HOMA_DROP_MSG_TOO_LONG, "drop_msg_too_long");
    len = build(HOMA_PKT_DATA, buf);
    put32(buf + 28, 0xffffffffu);
    expect_drop(e, buf, len, HOMA_DROP_MSG_TOO_LONG, "drop_msg_too_long");
    /* GRANT / RESEND priority above 7 */
    len = build(HOMA_PKT_GRANT, buf);
    buf[32] = 8;
    expect_drop(e, buf, len, HOMA_DROP_BAD_PRIORITY, "drop_bad_priority");
    len = build(HOMA_PKT_RESEND, buf);
    buf[36] = 255;
    expect_drop(e, buf, len, HOMA_DROP_BAD_PRIORITY, "drop_bad_priority");
    /* ACK with too many records */
    len = build(HOMA_PKT_ACK, buf);
    buf[28] = 0;
    buf[29] = 6;
    expect_drop(e, buf, len, HOMA_DROP_BAD_ACKS, "drop_bad_acks");
    /* DATA to a port nobody opened */
    len = build(HOMA_PKT_DATA, buf);
    buf[2] = 0x12;
    expect_drop(e, buf, len, HOMA_DROP_NO_PORT, "drop_no_port");
    /* GRANT / BUSY for RPCs that do not exist */
    len = build(HOMA_PKT_GRANT, buf);
    expect_drop(e, buf, len, HOMA_DROP_NO_RPC, "drop_no_rpc");
    len = build(HOMA_PKT_BUSY, buf);
    expect_drop(e, buf, len, HOMA_DROP_NO_RPC, "drop_no_rpc");
    /* a response (odd sender id -> even local id) for no client RPC */
    len = build(HOMA_PKT_DATA, buf);
    buf[27] = 101;
    expect_drop(e, buf, len, HOMA_DROP_NO_RPC, "drop_no_rpc");
    assert_int_equal(counter(e, "rpcs_live"), 0);
    assert_int_equal(counter(e, "rx_bytes_in_use"), 0);

    /* a message whose length changes between packets */
    len = build(HOMA_PKT_DATA, buf);
    put32(buf + 28, 5000);
    put32(buf + 32, 5000);
    assert_int_equal(homa_engine_input(e, 0, &peer, buf, len), 0);
    put32(buf + 28, 6000);
    put32(buf + 52, 1000);
    put32(buf + 4, 1000);
    expect_drop(e, buf, len, HOMA_DROP_INCONSISTENT, "drop_inconsistent");
    /* and a plain duplicate */
    put32(buf + 28, 5000);
    put32(buf + 52, 0);
    put32(buf + 4, 0);
    expect_drop(e, buf, len, HOMA_DROP_DUPLICATE, "drop_duplicate");
    assert_int_equal(counter(e, "rpcs_live"), 1);
    assert_int_equal(counter(e, "rx_bytes_in_use"), 5000);
    homa_engine_destroy(e);
}

static void homa_engine_input__grant_beyond_message_end(void **state)
{
    (void)state;
    homa_engine *e = make();
    uint64_t id;
    uint8_t msg[3000] = {0};
    assert_int_equal(
        homa_engine_send_request(e, 0, CLIENT_PORT, &peer, 1000, msg, sizeof(msg), 0, &id), 0);
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.type = HOMA_PKT_GRANT;
    p.sport = 1000;
    p.dport = CLIENT_PORT;
    p.sender_id = id ^ 1;
    p.u.grant.offset = 3001;
    uint8_t buf[HOMA_MAX_HDR_LEN];
    size_t len = homa_wire_encode(&p, buf);
    expect_drop(e, buf, len, HOMA_DROP_BAD_GRANT, "drop_bad_grant");
    p.u.grant.offset = 3000;
    len = homa_wire_encode(&p, buf);
    assert_int_equal(homa_engine_input(e, 0, &peer, buf, len), 0);
    /* a GRANT from another host for the same id is not ours */
    homa_addr other = peer;
    other.bytes[15] = 6;
    uint64_t before = counter(e, "drop_no_rpc");
    assert_int_equal(homa_engine_input(e, 0, &other, buf, len), HOMA_DROP_NO_RPC);
    assert_int_equal(counter(e, "drop_no_rpc"), before + 1);
    homa_engine_destroy(e);
}

static void homa_engine_input__freeze_ignored_and_counted(void **state)
{
    (void)state;
    homa_engine *e = make();
    uint8_t buf[HOMA_MAX_HDR_LEN];
    size_t len = build(HOMA_PKT_FREEZE, buf);
    assert_int_equal(homa_engine_input(e, 0, &peer, buf, len), 0);
    assert_int_equal(counter(e, "freeze_in"), 1);
    homa_pkt_out o;
    assert_int_equal(homa_engine_pull(e, 0, &o, 1), 0);
    homa_engine_destroy(e);
}

static void homa_engine_input__random_garbage_never_crashes(void **state)
{
    (void)state;
    homa_engine *e = make();
    uint32_t x = 1;
    uint8_t buf[2000];
    for (int i = 0; i < 20000; i++) {
        size_t len = 0;
        x = x * 1664525u + 1013904223u;
        len = (x >> 8) % sizeof(buf);
        for (size_t j = 0; j < len; j++) {
            x = x * 1664525u + 1013904223u;
            buf[j] = (uint8_t)(x >> 24);
        }
        /* make a good share of them look like Homa */
        if (len > 12 && (i & 1)) buf[11] = (uint8_t)(0x10 + (x >> 4) % 9);
        homa_engine_input(e, (uint64_t)i * 1000, &peer, buf, len);
        if ((i & 255) == 0) homa_engine_timer(e, (uint64_t)i * 1000);
    }
    homa_counters c;
    homa_engine_counters(e, &c);
    assert_true(c.rx_bytes_in_use <= homa_engine_config(e)->max_rx_bytes);
    homa_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_engine_input__truncation_at_every_byte),
        cmocka_unit_test(homa_engine_input__fields_out_of_range),
        cmocka_unit_test(homa_engine_input__grant_beyond_message_end),
        cmocka_unit_test(homa_engine_input__freeze_ignored_and_counted),
        cmocka_unit_test(homa_engine_input__random_garbage_never_crashes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
