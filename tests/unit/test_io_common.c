/* Tests of the helpers shared by the I/O drivers (src/io/common.c): the
 * garbage filter for every packet type at and below its minimum length
 * (and its agreement with both filters the drivers had before they shared
 * one), the address helpers, the fault decision for outgoing packets,
 * socket buffer sizing, the clock and the counter sum. */
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/wire.h"
#include "io/common.h"
#include "io/io.h"

/* The UDP driver's former filter: a table of minimum lengths by type. */
static int udp_filter_before(const uint8_t *d, size_t len)
{
    if (len < HOMA_COMMON_HDR_LEN) return 1;
    uint8_t type = d[11];
    if (type < HOMA_PKT_TYPE_MIN || type > HOMA_PKT_TYPE_MAX) return 1;
    static const uint8_t min_len[HOMA_PKT_TYPE_COUNT] = {
        HOMA_DATA_HDR_LEN, HOMA_GRANT_LEN,  HOMA_RESEND_LEN,   HOMA_RPC_UNKNOWN_LEN, HOMA_BUSY_LEN,
        HOMA_CUTOFFS_LEN,  HOMA_FREEZE_LEN, HOMA_NEED_ACK_LEN, HOMA_ACK_LEN};
    return len < min_len[type - HOMA_PKT_TYPE_MIN];
}

/* The raw driver's former filter: the wire module's header lengths. */
static int raw_filter_before(const uint8_t *d, size_t len)
{
    if (len < HOMA_COMMON_HDR_LEN) return 1;
    size_t need = homa_wire_hdr_len(d[11]);
    return need == 0 || len < need;
}

static const struct {
    uint8_t type;
    size_t min;
} types[] = {
    {HOMA_PKT_DATA, HOMA_DATA_HDR_LEN}, {HOMA_PKT_GRANT, HOMA_GRANT_LEN},
    {HOMA_PKT_RESEND, HOMA_RESEND_LEN}, {HOMA_PKT_RPC_UNKNOWN, HOMA_RPC_UNKNOWN_LEN},
    {HOMA_PKT_BUSY, HOMA_BUSY_LEN},     {HOMA_PKT_CUTOFFS, HOMA_CUTOFFS_LEN},
    {HOMA_PKT_FREEZE, HOMA_FREEZE_LEN}, {HOMA_PKT_NEED_ACK, HOMA_NEED_ACK_LEN},
    {HOMA_PKT_ACK, HOMA_ACK_LEN},
};

static void homa_io_is_garbage__every_type_at_and_below_minimum(void **state)
{
    (void)state;
    uint8_t pkt[200];
    memset(pkt, 0, sizeof(pkt));
    assert_int_equal(sizeof(types) / sizeof(types[0]), HOMA_PKT_TYPE_COUNT);
    for (size_t i = 0; i < HOMA_PKT_TYPE_COUNT; i++) {
        pkt[11] = types[i].type;
        assert_int_equal(homa_io_is_garbage(pkt, types[i].min), 0);
        assert_int_equal(homa_io_is_garbage(pkt, types[i].min + 1), 0);
        assert_int_equal(homa_io_is_garbage(pkt, sizeof(pkt)), 0);
        assert_int_equal(homa_io_is_garbage(pkt, types[i].min - 1), 1);
    }
    /* The exact minima, as the kernel module's header sizes. */
    pkt[11] = HOMA_PKT_GRANT;
    assert_int_equal(homa_io_is_garbage(pkt, 33), 0);
    assert_int_equal(homa_io_is_garbage(pkt, 32), 1);
    pkt[11] = HOMA_PKT_ACK;
    assert_int_equal(homa_io_is_garbage(pkt, 80), 0);
    assert_int_equal(homa_io_is_garbage(pkt, 79), 1);
    pkt[11] = HOMA_PKT_BUSY; /* common header only */
    assert_int_equal(homa_io_is_garbage(pkt, 28), 0);
    assert_int_equal(homa_io_is_garbage(pkt, 27), 1);
}

static void homa_io_is_garbage__truncated_common_header(void **state)
{
    (void)state;
    uint8_t pkt[HOMA_COMMON_HDR_LEN];
    memset(pkt, 0, sizeof(pkt));
    for (size_t i = 0; i < HOMA_PKT_TYPE_COUNT; i++) {
        pkt[11] = types[i].type;
        for (size_t len = 0; len < HOMA_COMMON_HDR_LEN; len++)
            assert_int_equal(homa_io_is_garbage(pkt, len), 1);
    }
    /* Too short to hold even the type byte: not read at all. */
    assert_int_equal(homa_io_is_garbage(NULL, 0), 1);
    assert_int_equal(homa_io_is_garbage(pkt, 11), 1);
}

static void homa_io_is_garbage__unknown_types(void **state)
{
    (void)state;
    uint8_t pkt[200];
    memset(pkt, 0, sizeof(pkt));
    for (int t = 0; t < 256; t++) {
        if (t >= HOMA_PKT_TYPE_MIN && t <= HOMA_PKT_TYPE_MAX) continue;
        pkt[11] = (uint8_t)t;
        assert_int_equal(homa_io_is_garbage(pkt, sizeof(pkt)), 1);
        assert_int_equal(homa_io_is_garbage(pkt, HOMA_COMMON_HDR_LEN), 1);
    }
    pkt[11] = HOMA_PKT_TYPE_MIN - 1;
    assert_int_equal(homa_io_is_garbage(pkt, HOMA_MAX_HDR_LEN), 1);
    pkt[11] = HOMA_PKT_TYPE_MAX + 1;
    assert_int_equal(homa_io_is_garbage(pkt, HOMA_MAX_HDR_LEN), 1);
}

/* The proof that sharing one filter changed neither driver: every type
 * byte at every length up to past the largest header (the verdict does
 * not depend on other bytes, nor on lengths beyond the largest header),
 * against both former filters. */
static void homa_io_is_garbage__same_as_both_former_filters(void **state)
{
    (void)state;
    uint8_t pkt[HOMA_MAX_HDR_LEN + 8];
    int checked = 0;
    for (int t = 0; t < 256; t++) {
        for (int fill = 0; fill < 2; fill++) {
            memset(pkt, fill ? 0xff : 0, sizeof(pkt));
            pkt[11] = (uint8_t)t;
            for (size_t len = 0; len <= sizeof(pkt); len++) {
                int g = homa_io_is_garbage(pkt, len);
                assert_int_equal(g, udp_filter_before(pkt, len));
                assert_int_equal(g, raw_filter_before(pkt, len));
                checked++;
            }
        }
    }
    assert_int_equal(checked, 256 * 2 * (HOMA_MAX_HDR_LEN + 9));
}

static void homa_io_addr__v4_zero_from_v4(void **state)
{
    (void)state;
    homa_addr a;
    const uint8_t ip[4] = {192, 0, 2, 7};
    memset(&a, 0x55, sizeof(a));
    homa_io_addr_from_v4(&a, ip);
    const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7};
    assert_memory_equal(a.bytes, want, 16);
    assert_int_equal(homa_io_addr_is_v4(&a), 1);
    assert_int_equal(homa_io_addr_is_zero(&a), 0);
    homa_addr z;
    memset(&z, 0, sizeof(z));
    assert_int_equal(homa_io_addr_is_zero(&z), 1);
    assert_int_equal(homa_io_addr_is_v4(&z), 0); /* :: is IPv6 */
    homa_addr loop6;
    memset(&loop6, 0, sizeof(loop6));
    loop6.bytes[15] = 1; /* ::1 */
    assert_int_equal(homa_io_addr_is_v4(&loop6), 0);
    assert_int_equal(homa_io_addr_is_zero(&loop6), 0);
    homa_addr any4;
    const uint8_t zero4[4] = {0, 0, 0, 0};
    homa_io_addr_from_v4(&any4, zero4); /* ::ffff:0.0.0.0: IPv4, not all zero */
    assert_int_equal(homa_io_addr_is_v4(&any4), 1);
    assert_int_equal(homa_io_addr_is_zero(&any4), 0);
    a.bytes[11] = 0xfe;
    assert_int_equal(homa_io_addr_is_v4(&a), 0);
}

static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A DATA packet of payload_len bytes at offset off of a msg_len message. */
static void data_out(homa_pkt_out *p, uint8_t *payload, uint32_t payload_len, uint32_t msg_len,
                     uint32_t off)
{
    memset(p, 0, sizeof(*p));
    p->type = HOMA_PKT_DATA;
    p->hdr_len = HOMA_DATA_HDR_LEN;
    p->hdr[11] = HOMA_PKT_DATA;
    wr32(p->hdr + 28, msg_len);
    wr32(p->hdr + 52, off);
    memset(payload, 0, payload_len);
    p->payload = payload;
    p->payload_len = payload_len;
}

static void homa_io_fault_decide_out__inactive_passes(void **state)
{
    (void)state;
    homa_fault_state st;
    homa_fault_init(&st, NULL, HOMA_FAULT_TX, 0, 0);
    assert_int_equal(st.active, 0);
    uint8_t payload[100];
    homa_pkt_out p;
    data_out(&p, payload, 100, 100, 0);
    uint64_t hold = 5;
    uint32_t wait = 6;
    assert_int_equal(homa_io_fault_decide_out(&st, 0, &p, &hold, &wait), HOMA_FAULT_PASS);
    assert_true(hold == 5 && wait == 6); /* untouched */
}

/* The same draws, in the same order, as homa_fault_decide on the packet's
 * bytes: a driver's random stream is that of the decision function. */
static void homa_io_fault_decide_out__same_stream_as_decide(void **state)
{
    (void)state;
    homa_faults f;
    assert_int_equal(homa_faults_parse("drop=0.2,dup=0.1,reorder=0.2,reorder_depth=3,delay=0.2,"
                                       "delay_us=100,jitter_us=50,drop_last_data=0.3,seed=17",
                                       &f, NULL, 0),
                     0);
    homa_fault_state a, b;
    homa_fault_init(&a, &f, HOMA_FAULT_TX, 3, 0);
    homa_fault_init(&b, &f, HOMA_FAULT_TX, 3, 0);
    static uint8_t payload[1000];
    uint8_t whole[HOMA_DATA_HDR_LEN + sizeof(payload)];
    for (uint32_t i = 0; i < 2000; i++) {
        homa_pkt_out p;
        uint32_t len = 1 + i % 1000;
        data_out(&p, payload, len, 5000, (i * 37) % 5000);
        memcpy(whole, p.hdr, HOMA_DATA_HDR_LEN);
        memcpy(whole + HOMA_DATA_HDR_LEN, payload, len);
        uint64_t ha = 0, hb = 0;
        uint32_t wa = 1, wb = 1;
        int ra = homa_io_fault_decide_out(&a, i, &p, &ha, &wa);
        int rb = homa_fault_decide(&b, i, whole, HOMA_DATA_HDR_LEN + len, &hb, &wb);
        assert_int_equal(ra, rb);
        assert_true(ha == hb && wa == wb);
    }
    assert_true(a.rng == b.rng);
    assert_true(a.drops_class > 0);
}

/* A header shorter than DATA's with a payload behind it is joined for the
 * classifier, which then sees only the joined bytes (the UDP driver's
 * rule, kept): here the last DATA packet of a message is not seen as the
 * last, since its payload length reads as 0. */
static void homa_io_fault_decide_out__split_header(void **state)
{
    (void)state;
    homa_faults f;
    assert_int_equal(homa_faults_parse("drop_last_data=1,seed=1", &f, NULL, 0), 0);
    homa_fault_state st;
    homa_fault_init(&st, &f, HOMA_FAULT_TX, 0, 0);
    uint8_t payload[400];
    homa_pkt_out p;
    data_out(&p, payload, 400, 1000, 600); /* bytes 600..999: the last */
    assert_int_equal(homa_io_fault_decide_out(&st, 0, &p, NULL, NULL), HOMA_FAULT_DROP);
    data_out(&p, payload, 100, 1000, 600); /* not the last */
    assert_int_equal(homa_io_fault_decide_out(&st, 0, &p, NULL, NULL), HOMA_FAULT_PASS);
    /* The same last packet cut after 30 header bytes. */
    static uint8_t joined[26 + 400];
    data_out(&p, payload, 400, 1000, 600);
    memcpy(joined, p.hdr + 30, 26);
    memset(joined + 26, 0, 400);
    p.hdr_len = 30;
    p.payload = joined;
    p.payload_len = sizeof(joined);
    assert_int_equal(homa_io_fault_decide_out(&st, 0, &p, NULL, NULL), HOMA_FAULT_PASS);
}

/* Sizing as the drivers did it by hand: the FORCE option, else the plain
 * one; the defaults when opts is NULL or says 0. */
static void expect_like_by_hand(const homa_io_opts *opts, uint32_t rcv, uint32_t snd)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0), ref = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0 && ref >= 0);
    homa_io_set_bufs(fd, opts);
    int v = (int)rcv;
    if (setsockopt(ref, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) != 0)
        setsockopt(ref, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    v = (int)snd;
    if (setsockopt(ref, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) != 0)
        setsockopt(ref, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    for (int k = 0; k < 2; k++) {
        int opt = k == 0 ? SO_RCVBUF : SO_SNDBUF;
        int got = 0, want = 0;
        socklen_t l = sizeof(got);
        assert_int_equal(getsockopt(fd, SOL_SOCKET, opt, &got, &l), 0);
        l = sizeof(want);
        assert_int_equal(getsockopt(ref, SOL_SOCKET, opt, &want, &l), 0);
        assert_int_equal(got, want);
    }
    close(fd);
    close(ref);
}

static void homa_io_set_bufs__sizes_and_defaults(void **state)
{
    (void)state;
    expect_like_by_hand(NULL, HOMA_IO_RCVBUF_DEFAULT, HOMA_IO_SNDBUF_DEFAULT);
    homa_io_opts o;
    memset(&o, 0, sizeof(o));
    expect_like_by_hand(&o, HOMA_IO_RCVBUF_DEFAULT, HOMA_IO_SNDBUF_DEFAULT);
    o.rcvbuf = 300000;
    o.sndbuf = 200000;
    expect_like_by_hand(&o, 300000, 200000);
    assert_int_equal(HOMA_IO_RCVBUF_DEFAULT, 16u << 20);
    assert_int_equal(HOMA_IO_SNDBUF_DEFAULT, 4u << 20);
}

static void homa_io_monotonic_ns__follows_clock(void **state)
{
    (void)state;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t before = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint64_t t = homa_io_monotonic_ns();
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t after = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    assert_true(before <= t && t <= after);
}

static void homa_io_counters_add__every_field(void **state)
{
    (void)state;
    homa_driver_counters c, sum;
    memset(&c, 0, sizeof(c));
    memset(&sum, 0, sizeof(sum));
    uint64_t k = 1;
#define SET_CTR(name, desc) c.name = k++;
    HOMA_DRIVER_COUNTER_LIST(SET_CTR)
#undef SET_CTR
    homa_io_counters_add(&c, &sum);
    homa_io_counters_add(&c, &sum);
    k = 1;
#define CHECK_CTR(name, desc) assert_true(sum.name == 2 * k++);
    HOMA_DRIVER_COUNTER_LIST(CHECK_CTR)
#undef CHECK_CTR
    HOMA_IO_CTR_ADD(&sum, garbage_in, 5);
    assert_true(sum.garbage_in == 2 * c.garbage_in + 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_io_is_garbage__every_type_at_and_below_minimum),
        cmocka_unit_test(homa_io_is_garbage__truncated_common_header),
        cmocka_unit_test(homa_io_is_garbage__unknown_types),
        cmocka_unit_test(homa_io_is_garbage__same_as_both_former_filters),
        cmocka_unit_test(homa_io_addr__v4_zero_from_v4),
        cmocka_unit_test(homa_io_fault_decide_out__inactive_passes),
        cmocka_unit_test(homa_io_fault_decide_out__same_stream_as_decide),
        cmocka_unit_test(homa_io_fault_decide_out__split_header),
        cmocka_unit_test(homa_io_set_bufs__sizes_and_defaults),
        cmocka_unit_test(homa_io_monotonic_ns__follows_clock),
        cmocka_unit_test(homa_io_counters_add__every_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
