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
#include "support/engine_test.h"

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

/* ---- on two engines wired back to back (tests/support/pair.c) ---- */

static void homa_engine_input__duplicate_request_after_ack_not_redelivered(void **state)
{
    (void)state;
    struct pair p;
    struct capture cap;
    setup_capturing_pair(&p, &cap);
    echo_rpc(&p, 100);
    pair_advance(&p, 3 * MS); /* NEED_ACK -> ACK -> server state freed */
    homa_counters c;
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.rpcs_live, 0);
    assert_int_equal(c.server_acked, 1);
    assert_true(cap.len > 0);
    assert_int_equal(homa_engine_input(p.e[1], p.now, &p.addr[0], cap.data, cap.len),
                     HOMA_DROP_COMPLETED);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_ANY, 0, &m), HOMA_ERR_AGAIN);
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.drop_completed, 1);
    assert_int_equal(c.server_requests, 1);
    pair_destroy(&p);
}

static void homa_engine_input__rpc_unknown_restarts_request(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    /* lose every packet of the first transmission */
    struct drop_nth d = {0, 0, 0, HOMA_PKT_DATA};
    p.filter = drop_nth_filter;
    p.filter_arg = &d;
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "abc", 3, 0, &id), 0);
    pair_settle(&p);
    for (int i = 0; i < 6; i++)
        pair_advance(&p, MS);
    homa_counters c;
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.client_restarts, 1);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_ANY, 0, &m), 0);
    assert_int_equal(m.length, 3);
    homa_engine_release(p.e[1], &m);
    pair_destroy(&p);
}

/* A server at its cap on live RPCs (max_rpcs): cap 4, n one-byte requests
 * from one client; the application holds what it gets for hold_ms, then
 * answers one request every `every` ms (0: each as it comes).  Returns the
 * responses that came without error, those that failed with a timeout,
 * the client's restarts and the BUSYs it heard.  Every RPC must end,
 * once, and no request may be delivered twice. */
struct cap_run {
    int ok, timeouts, restarts, busy;
};

static void cap_collect(struct pair *p, const uint64_t *ids, int *got, int n, struct cap_run *out,
                        int *finished)
{
    homa_msg m;
    while (homa_engine_recv(p->e[0], CPORT, HOMA_RECV_RESPONSE, 0, &m) == 0) {
        int i = (int)m.cookie;
        assert_true(i >= 0 && i < n && m.id == ids[i] && !got[i]);
        got[i] = 1;
        (*finished)++;
        if (m.error == 0) {
            assert_int_equal(m.length, 1);
            out->ok++;
        } else {
            assert_int_equal(m.error, HOMA_ERR_TIMEOUT);
            out->timeouts++;
        }
        homa_engine_release(p->e[0], &m);
    }
}

static struct cap_run rpc_cap_run(int n, int hold_ms, int every)
{
    struct pair p;
    setup_pair(&p, NULL);
    p.e[1]->cfg.max_rpcs = 4;
    uint64_t ids[64];
    int got[64] = {0};
    assert_true(n <= 64);
    for (int i = 0; i < n; i++)
        assert_int_equal(homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "q", 1,
                                                  (uint64_t)i, &ids[i]),
                         0);
    pair_settle(&p);
    homa_msg held[64], m;
    int nheld = 0, finished = 0;
    while (homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &m) == 0)
        held[nheld++] = m;
    assert_int_equal(nheld, 4);
    struct cap_run out = {0, 0, 0, 0};
    for (int t = 0; t < hold_ms; t++) {
        pair_advance(&p, MS);
        cap_collect(&p, ids, got, n, &out, &finished);
    }
    for (int t = 0; t < 20000 && finished < n; t++) {
        if (nheld > 0 && (every == 0 || t % every == 0)) {
            m = held[0];
            memmove(held, held + 1, (size_t)--nheld * sizeof(held[0]));
            assert_int_equal(
                homa_engine_send_reply(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id, "r", 1),
                0);
            homa_engine_release(p.e[1], &m);
            if (every == 0) continue;
        }
        pair_advance(&p, MS);
        while (nheld < 64 && homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &m) == 0)
            held[nheld++] = m;
        cap_collect(&p, ids, got, n, &out, &finished);
    }
    assert_int_equal(finished, n); /* none hangs */
    homa_counters c;
    homa_engine_counters(p.e[0], &c);
    out.restarts = (int)c.client_restarts;
    out.busy = (int)c.busy_in;
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.server_requests, out.ok); /* each delivered once */
    pair_destroy(&p);
    return out;
}

/* Overloaded is not dead: the application answers one request every 40
 * ms (or every 90, just under the timeout), so a slot frees now and then
 * while up to 36 requests wait at the cap for 1-2 s.  They wait at their
 * client (BUSY) and complete.  Refused with RPC_UNKNOWN (before), they
 * were restarted into the same refusal and failed as "not responding"
 * after 16 restarts and a timeout (31 of the 40, 546 restarts); without
 * the per-tick limit on RPC_UNKNOWNs (every waiting client's next RESEND
 * restarted it for one slot), 28 failed after 519 restarts. */
static void homa_engine_input__rpc_cap_is_not_death(void **state)
{
    (void)state;
    struct cap_run r = rpc_cap_run(40, 0, 40);
    print_message("40 at cap 4, one served per 40 ms: %d ok, %d timeouts, %d restarts, %d BUSY\n",
                  r.ok, r.timeouts, r.restarts, r.busy);
    assert_int_equal(r.ok, 40);
    assert_true(r.busy >= 36);
    assert_true(r.restarts <= 40);
    r = rpc_cap_run(16, 0, 90);
    print_message("16 at cap 4, one served per 90 ms: %d ok, %d timeouts, %d restarts, %d BUSY\n",
                  r.ok, r.timeouts, r.restarts, r.busy);
    assert_int_equal(r.ok, 16);
    assert_true(r.restarts <= 16);
}

/* A server whose application holds the 4 requests it has for 4 timeouts
 * frees nothing: not busy serving but stuck, so the 8 requests over the
 * cap fail with a timeout (as a response waiting for memory fails when
 * nothing was released), and the 4 it holds complete once answered. */
static void homa_engine_input__rpc_cap_of_stuck_server_fails(void **state)
{
    (void)state;
    struct cap_run r = rpc_cap_run(12, 400, 0);
    print_message("12 at cap 4, held 400 ms: %d ok, %d timeouts, %d restarts\n", r.ok, r.timeouts,
                  r.restarts);
    assert_int_equal(r.ok, 4);
    assert_int_equal(r.timeouts, 8);
}

/* Two engines whose caps (4, then 1) are full of their own requests to
 * each other: serving cannot make room on either, so refusals stay
 * RPC_UNKNOWN and every RPC fails with a timeout (BUSY here would keep
 * both waiting forever: with BUSY at any full cap none of the 8 finished
 * in 5 s). */
static void homa_engine_input__rpc_cap_of_own_requests_fails(void **state)
{
    (void)state;
    for (int cap = 4; cap >= 1; cap -= 3) {
        struct pair p;
        setup_pair(&p, NULL);
        p.e[0]->cfg.max_rpcs = (uint32_t)cap;
        p.e[1]->cfg.max_rpcs = (uint32_t)cap;
        uint64_t id;
        for (int i = 0; i < cap; i++) {
            assert_int_equal(
                homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "a", 1, 0, &id),
                0);
            assert_int_equal(
                homa_engine_send_request(p.e[1], p.now, SPORT, &p.addr[0], CPORT, "b", 1, 0, &id),
                0);
        }
        int failed = 0;
        homa_msg m;
        for (int t = 0; t < 5000 && failed < 2 * cap; t++) {
            pair_advance(&p, MS);
            for (int side = 0; side < 2; side++)
                while (homa_engine_recv(p.e[side], side ? SPORT : CPORT, HOMA_RECV_RESPONSE, 0,
                                        &m) == 0) {
                    assert_int_equal(m.error, HOMA_ERR_TIMEOUT);
                    homa_engine_release(p.e[side], &m);
                    failed++;
                }
        }
        assert_int_equal(failed, 2 * cap);
        homa_counters c;
        homa_engine_counters(p.e[1], &c);
        assert_int_equal(c.server_requests, 0);
        pair_destroy(&p);
    }
}

/* Drops the client's first DATA packet and records the priority of the
 * client's later ones. */
struct restart_watch {
    int seen;
    int last_prio;
};

static int restart_watch_filter(void *arg, int from, const struct pair_pkt *pk)
{
    struct restart_watch *w = arg;
    if (from != 0 || pk->type != HOMA_PKT_DATA) return 0;
    if (w->seen++ == 0) return 1;
    w->last_prio = pk->priority;
    return 0;
}

/* CUTOFFS that arrive between a request's first transmission and its
 * restart after RPC_UNKNOWN: the restarted DATA carries their version, so
 * it must also use their priority (a kernel peer checks neither, but a
 * capture shows the two disagree). */
static void homa_engine_input__restart_uses_current_cutoffs(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    struct restart_watch w = {0, -1};
    p.filter = restart_watch_filter;
    p.filter_arg = &w;
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "abc", 3, 0, &id), 0);
    /* the server announces cutoffs that put a 3-byte message at level 3 */
    struct homa_wire_pkt c;
    memset(&c, 0, sizeof(c));
    c.type = HOMA_PKT_CUTOFFS;
    c.sport = SPORT;
    c.dport = CPORT;
    c.sender_id = id ^ 1;
    c.u.cutoffs.cutoffs[0] = 0x7fffffff;
    c.u.cutoffs.cutoffs[3] = 2000;
    c.u.cutoffs.version = 9;
    uint8_t buf[HOMA_MAX_HDR_LEN];
    size_t n = homa_wire_encode(&c, buf);
    assert_int_equal(homa_engine_input(p.e[0], p.now, &p.addr[1], buf, n), 0);
    pair_settle(&p);
    for (int i = 0; i < 6; i++)
        pair_advance(&p, MS);
    homa_counters ctr;
    homa_engine_counters(p.e[0], &ctr);
    assert_int_equal(ctr.client_restarts, 1);
    assert_int_equal(w.last_prio, 3);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_ANY, 0, &m), 0);
    homa_engine_release(p.e[1], &m);
    pair_destroy(&p);
}

/* The same, with a client that keeps restarting the request for longer
 * than a tombstone lives (a client descheduled past the server's timeout
 * forgives its own stall and carries on; each RPC_UNKNOWN restarts the
 * request): while the client keeps coming back the tombstone must stay,
 * or the request runs a second time once it expires (seen in homa-perf
 * soak on a loaded host). */
static void homa_engine_input__restarted_request_keeps_tombstone(void **state)
{
    (void)state;
    struct pair p;
    struct capture cap;
    server_times_out_silent_client(&p, &cap);
    homa_counters c;
    homa_msg m;
    /* The request again every 10 ms for 4 tombstone lifetimes (2 x 100
     * ticks each). */
    for (int t = 0; t < 800; t++) {
        p.now += MS;
        homa_engine_timer(p.e[1], p.now);
        pair_step(&p, 1);
        if (t % 10 == 0) homa_engine_input(p.e[1], p.now, &p.addr[0], cap.data, cap.len);
        assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &m), HOMA_ERR_AGAIN);
    }
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.server_requests, 1);
    assert_int_equal(c.drop_completed, 80);
    /* Once the client has stopped for a tombstone's life, it is forgotten. */
    for (int t = 0; t < 202; t++) {
        p.now += MS;
        homa_engine_timer(p.e[1], p.now);
    }
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.tombstones, 0);
    pair_destroy(&p);
}

/* A request that finds max_rx_bytes spent waits for memory without a
 * buffer; its client hears BUSY (not RPC_UNKNOWN), so it neither fails nor
 * restarts while the server is alive, however long the wait.  (Before, the
 * server refused it and a live server's requests failed with a timeout.) */
static void homa_engine_input__memory_cap_makes_new_requests_wait(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.max_rx_bytes = 150000;
    cfg.timeout_ticks = 20;
    struct pair p;
    setup_pair(&p, &cfg);
    static uint8_t big1[100000], big2[100000];
    fill(big1, sizeof(big1), 1);
    fill(big2, sizeof(big2), 2);
    uint64_t id1, id2;
    assert_int_equal(homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, big1,
                                              sizeof(big1), 0, &id1),
                     0);
    assert_int_equal(homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, big2,
                                              sizeof(big2), 0, &id2),
                     0);
    pair_settle(&p);
    homa_counters c;
    homa_engine_counters(p.e[1], &c);
    assert_true(c.drop_no_memory > 0);
    assert_true(c.rx_bytes_peak <= 150000);
    assert_int_equal(c.rpcs_live, 2); /* the second one waits */
    assert_int_equal(p.e[1]->mem_waits, 1);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_ANY, 0, &m), 0);
    assert_int_equal(m.length, sizeof(big1));
    assert_memory_equal(m.data, big1, sizeof(big1));
    /* Hold the first request for 10 timeouts: the memory stays in use, the
     * second waits, and nothing fails on either side. */
    homa_msg r;
    for (int t = 0; t < 200; t++) {
        pair_advance(&p, MS);
        assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_ANY, 0, &r), HOMA_ERR_AGAIN);
    }
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.client_timeouts, 0);
    assert_int_equal(c.client_restarts, 0);
    assert_true(c.busy_in > 0);
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.rx_bytes_in_use, sizeof(big1));
    /* Answer and release the first: its memory goes to the second, which
     * asks for its data again and arrives whole. */
    assert_int_equal(
        homa_engine_send_reply(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id, "1", 1), 0);
    homa_engine_release(p.e[1], &m);
    recv_within(&p, 1, SPORT, 0, &m, 9);
    assert_int_equal(m.length, sizeof(big2));
    assert_memory_equal(m.data, big2, sizeof(big2));
    assert_int_equal(
        homa_engine_send_reply(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id, "2", 1), 0);
    homa_engine_release(p.e[1], &m);
    pair_settle(&p);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_ANY, 0, &r), 0);
        assert_int_equal(r.error, 0);
        assert_true(r.id == id1 || r.id == id2);
        assert_int_equal(r.data[0], r.id == id1 ? '1' : '2');
        homa_engine_release(p.e[0], &r);
    }
    pair_destroy(&p);
}

/* Waiting requests get memory in arrival order, and one whose client goes
 * away is given up after a timeout like any other. */
static int drop_client_of(void *arg, int from, const struct pair_pkt *pk)
{
    (void)pk;
    return from == 0 && *(int *)arg;
}

static void homa_engine_input__memory_waiters_fifo_and_dead_client(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.max_rx_bytes = 100000;
    cfg.timeout_ticks = 20;
    struct pair p;
    setup_pair(&p, &cfg);
    homa_msg m2;
    static uint8_t a[70000], b[50000], d[20000];
    uint64_t ids[3];
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, a, sizeof(a), 0, &ids[0]),
        0);
    pair_settle(&p);
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, b, sizeof(b), 0, &ids[1]),
        0);
    pair_settle(&p);
    /* d would fit next to a, but b came first */
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, d, sizeof(d), 0, &ids[2]),
        0);
    pair_settle(&p);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_ANY, 0, &m), 0);
    assert_int_equal(m.length, sizeof(a));
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_ANY, 0, &m2), HOMA_ERR_AGAIN);
    assert_int_equal(p.e[1]->mem_waits, 2);
    homa_engine_release(p.e[1], &m); /* frees a's memory: b and d both fit */
    homa_msg got[2];
    for (int i = 0; i < 2; i++)
        recv_within(&p, 1, SPORT, 0, &got[i], 9);
    assert_int_equal(got[0].length + got[1].length, sizeof(b) + sizeof(d));
    int bi = got[0].length == sizeof(b) ? 0 : 1;
    m2 = got[bi];
    homa_engine_release(p.e[1], &got[1 - bi]);
    /* A fourth waits behind b (held); then its client falls silent. */
    static uint8_t e4[60000];
    uint64_t id4;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, e4, sizeof(e4), 0, &id4),
        0);
    pair_settle(&p);
    homa_counters c;
    homa_engine_counters(p.e[1], &c);
    uint64_t live = c.rpcs_live;
    int cut = 1;
    p.filter = drop_client_of;
    p.filter_arg = &cut;
    for (int t = 0; t < 3 * 20; t++)
        pair_advance(&p, MS);
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.rpcs_live, live - 1); /* the waiter is gone, memory bounded */
    assert_true(hlist_empty(&p.e[1]->mem_waitq));
    homa_engine_release(p.e[1], &m2);
    pair_destroy(&p);
}

/* Two one-byte requests answered with 100,000 bytes each, to a client
 * whose max_rx_bytes (150,000) holds one: the client receives the first
 * response (held in m) and the second waits for memory. */
static void two_long_responses(struct pair *p, uint8_t *big1, uint8_t *big2, size_t len,
                               uint64_t ids[2], homa_msg *m)
{
    for (int i = 0; i < 2; i++) {
        assert_int_equal(homa_engine_send_request(p->e[0], p->now, CPORT, &p->addr[1], SPORT, "q",
                                                  1, 0, &ids[i]),
                         0);
        pair_settle(p);
        homa_msg req;
        assert_int_equal(homa_engine_recv(p->e[1], SPORT, HOMA_RECV_ANY, 0, &req), 0);
        assert_int_equal(homa_engine_send_reply(p->e[1], p->now, SPORT, &req.peer, req.peer_port,
                                                req.id, i ? big2 : big1, len),
                         0);
        homa_engine_release(p->e[1], &req);
        pair_settle(p);
    }
    assert_int_equal(homa_engine_recv(p->e[0], CPORT, HOMA_RECV_ANY, ids[0], m), 0);
    assert_int_equal(m->error, 0);
    assert_memory_equal(m->data, big1, len);
    homa_msg r;
    assert_int_equal(homa_engine_recv(p->e[0], CPORT, HOMA_RECV_ANY, ids[1], &r), HOMA_ERR_AGAIN);
    assert_int_equal(p->e[0]->mem_waits, 1);
}

/* A response that finds the client's max_rx_bytes spent waits for memory
 * (the server hears BUSY meanwhile) instead of failing with
 * HOMA_ERR_NOMEM: held for three of the server's timeouts, it neither
 * fails nor restarts, and once the first is released it arrives whole. */
static void homa_engine_input__memory_cap_makes_responses_wait(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.max_rx_bytes = 150000;
    struct pair p;
    setup_pair(&p, &cfg);
    p.e[1]->cfg.timeout_ticks = 20; /* the server gives up sooner than the client */
    static uint8_t big1[100000], big2[100000];
    fill(big1, sizeof(big1), 1);
    fill(big2, sizeof(big2), 2);
    uint64_t ids[2];
    homa_msg m, r;
    two_long_responses(&p, big1, big2, sizeof(big1), ids, &m);
    for (int t = 0; t < 60; t++) {
        pair_advance(&p, MS);
        assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_ANY, ids[1], &r),
                         HOMA_ERR_AGAIN);
    }
    homa_counters c;
    homa_engine_counters(p.e[0], &c);
    assert_true(c.rx_bytes_peak <= 150000);
    assert_true(c.busy_out > 0);
    homa_engine_release(p.e[0], &m);
    recv_within(&p, 0, CPORT, ids[1], &r, 9);
    assert_int_equal(r.error, 0);
    assert_int_equal(r.length, sizeof(big2));
    assert_memory_equal(r.data, big2, sizeof(big2));
    homa_engine_release(p.e[0], &r);
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.client_timeouts, 0);
    assert_int_equal(c.client_restarts, 0);
    assert_int_equal(p.e[0]->mem_fails, 0);
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.server_timeouts, 0);
    for (int t = 0; t < 10; t++) /* the server's NEED_ACKs draw our acks */
        pair_advance(&p, MS);
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.rpcs_live, 0);
    pair_destroy(&p);
}

/* A response the server sent whole (unscheduled) waits for the client's
 * memory: the server's NEED_ACKs draw BUSY, not RESENDs, so nothing is
 * retransmitted only to be dropped again; released, it arrives whole. */
static void homa_engine_input__waiting_response_not_resent(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.max_rx_bytes = 50000;
    struct pair p;
    setup_pair(&p, &cfg);
    static uint8_t s1[30000], s2[30000];
    fill(s1, sizeof(s1), 3);
    fill(s2, sizeof(s2), 4);
    uint64_t ids[2];
    homa_msg m, r;
    two_long_responses(&p, s1, s2, sizeof(s1), ids, &m);
    for (int t = 0; t < 60; t++)
        pair_advance(&p, MS);
    homa_counters c;
    homa_engine_counters(p.e[1], &c);
    assert_true(c.need_ack_out > 0);
    assert_int_equal(c.retransmit_bytes, 0);
    homa_engine_release(p.e[0], &m);
    recv_within(&p, 0, CPORT, ids[1], &r, 9);
    assert_int_equal(r.error, 0);
    assert_memory_equal(r.data, s2, sizeof(s2));
    homa_engine_release(p.e[0], &r);
    homa_engine_counters(p.e[1], &c);
    assert_true(c.retransmit_bytes <= sizeof(s2));
    pair_destroy(&p);
}

/* A response that cannot fit beside a message the application holds and
 * never releases fails with HOMA_ERR_NOMEM a timeout after it began to
 * wait (no memory was released since), not sooner, and leaves no RPC
 * behind on either side. */
static void homa_engine_input__response_waiting_on_held_memory_fails(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.max_rx_bytes = 150000;
    cfg.timeout_ticks = 20;
    struct pair p;
    setup_pair(&p, &cfg);
    static uint8_t big1[100000], big2[100000];
    uint64_t ids[2];
    homa_msg m, r;
    two_long_responses(&p, big1, big2, sizeof(big1), ids, &m);
    int ticks = recv_within(&p, 0, CPORT, ids[1], &r, 25);
    assert_true(ticks >= 19);
    assert_int_equal(r.error, HOMA_ERR_NOMEM);
    assert_int_equal(p.e[0]->mem_fails, 1);
    assert_true(hlist_empty(&p.e[0]->mem_waitq));
    homa_engine_release(p.e[0], &r);
    homa_engine_release(p.e[0], &m);
    for (int t = 0; t < 3 * 20; t++)
        pair_advance(&p, MS);
    homa_counters c;
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.rpcs_live, 0);
    assert_int_equal(c.rx_bytes_in_use, 0);
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.rpcs_live, 0);
    pair_destroy(&p);
}

/* A request longer than max_rx_bytes can never fit: refused at once, and
 * its client fails it within a timeout (RPC_UNKNOWN to every restart). */
static void homa_engine_input__request_above_memory_cap_fails(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.max_rx_bytes = 150000;
    cfg.timeout_ticks = 20;
    struct pair p;
    setup_pair(&p, &cfg);
    static uint8_t big[200000];
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, big, sizeof(big), 0, &id),
        0);
    homa_msg r;
    recv_within(&p, 0, CPORT, id, &r, 199);
    assert_int_equal(r.error, HOMA_ERR_TIMEOUT);
    homa_engine_release(p.e[0], &r);
    homa_counters c;
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.rpcs_live, 0);
    assert_int_equal(p.e[1]->mem_waits, 0);
    pair_destroy(&p);
}

/* What a driver does: begin with the header, write the payload where told,
 * end.  Returns place_begin's result (and place_end's in *end_rc). */
static int place(homa_engine *e, uint64_t now, const homa_addr *src, const uint8_t *pkt, size_t len,
                 int *end_rc)
{
    uint8_t *dst = (uint8_t *)1;
    int rc = homa_engine_place_begin(e, now, src, pkt, HOMA_DATA_HDR_LEN, len, &dst);
    if (rc != 0) {
        assert_null(dst);
        return rc;
    }
    memcpy(dst, pkt + HOMA_DATA_HDR_LEN, len - HOMA_DATA_HDR_LEN);
    int r = homa_engine_place_end(e, now, pkt, HOMA_DATA_HDR_LEN, len);
    if (end_rc) *end_rc = r;
    return 0;
}

static void homa_engine_place__echo_sizes_in_place(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    p.place = 1;
    size_t sizes[] = {1, 1399, 1400, 1401, 40000, 100000, 333333};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        echo_rpc(&p, sizes[i]);
    homa_counters c0, c1;
    homa_engine_counters(p.e[0], &c0);
    homa_engine_counters(p.e[1], &c1);
    /* every DATA packet was placed (no loss, no duplicates) */
    assert_true(p.placed > 0);
    assert_int_equal(c0.data_placed + c1.data_placed, p.placed);
    assert_int_equal(c0.data_placed, c0.data_in);
    assert_int_equal(c1.data_placed, c1.data_in);
    assert_int_equal(c1.drop_duplicate + c1.drop_inconsistent + c1.drop_no_rpc, 0);
    pair_destroy(&p);
}

static int drop_every_third(void *arg, int from, const struct pair_pkt *pk)
{
    (void)from;
    int *n = arg;
    return pk->type == HOMA_PKT_DATA && (++*n % 3) == 0;
}

static void homa_engine_place__loss_recovery_in_place(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    p.place = 1;
    int n = 0;
    p.filter = drop_every_third;
    p.filter_arg = &n;
    uint8_t *req = malloc(200000);
    fill(req, 200000, 9);
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, req, 200000, 0, &id), 0);
    homa_msg m;
    int got = HOMA_ERR_AGAIN;
    for (int i = 0; i < 200 && got != 0; i++) {
        pair_advance(&p, MS);
        got = homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &m);
    }
    assert_int_equal(got, 0);
    assert_int_equal(m.length, 200000);
    assert_memory_equal(m.data, req, 200000);
    homa_engine_release(p.e[1], &m);
    /* Most packets came in place, retransmissions included (143 are
     * needed); any overlapping bytes already there (a retransmission cut
     * differently from the original) would go through the copying path. */
    homa_counters c0, c1;
    homa_engine_counters(p.e[0], &c0);
    homa_engine_counters(p.e[1], &c1);
    assert_true(c0.retransmit_pkts > 0);
    assert_true(c1.data_placed > 120);
    assert_true(c1.data_placed <= c1.data_in);
    free(req);
    pair_destroy(&p);
}

static void homa_engine_place__refuses_bad_and_received_ranges(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    struct pair p;
    setup_pair(&p, &cfg);
    homa_engine *e = p.e[1];
    const homa_addr *src = &p.addr[0];
    static uint8_t pl[3000], pk[4000];
    fill(pl, sizeof(pl), 1);
    uint64_t id = 1000;
    uint8_t *dst;
    homa_counters before, after;
    homa_engine_counters(e, &before);

    /* not DATA, too short, no payload, header cut short, bad range,
     * offset overflow, message too long: never placed, never counted */
    struct homa_wire_pkt g;
    memset(&g, 0, sizeof(g));
    g.type = HOMA_PKT_GRANT;
    g.sender_id = id;
    g.sport = CPORT;
    g.dport = SPORT;
    size_t gl = homa_wire_encode(&g, pk);
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, gl, 60000, &dst), HOMA_ERR_AGAIN);
    size_t len = data_pkt(pk, id, 3000, 0, pl, 1000);
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, 20, len, &dst), HOMA_ERR_AGAIN);
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, 55, len, &dst), HOMA_ERR_AGAIN);
    assert_int_equal(
        homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, HOMA_DATA_HDR_LEN, &dst),
        HOMA_ERR_AGAIN);
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, 10, &dst),
                     HOMA_ERR_AGAIN);
    len = data_pkt(pk, id, 3000, 2500, pl, 1000); /* ends at 3500 > 3000 */
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, len, &dst),
                     HOMA_ERR_AGAIN);
    len = data_pkt(pk, id, 3000, 0xfffffff0u, pl, 1000);
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, len, &dst),
                     HOMA_ERR_AGAIN);
    len = data_pkt(pk, id, 3000, 0, pl, 1000);
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN,
                                             (size_t)cfg.max_message_length + 100, &dst),
                     HOMA_ERR_AGAIN);
    len = data_pkt(pk, id, cfg.max_message_length + 1, 0, pl, 1000);
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, len, &dst),
                     HOMA_ERR_AGAIN);
    homa_engine_counters(e, &after);
    assert_int_equal(after.pkts_in, before.pkts_in);
    assert_int_equal(after.data_in, before.data_in);
    assert_int_equal(after.rpcs_live, 0);

    /* [1000, 2000) arrives normally */
    len = data_pkt(pk, id, 3000, 1000, pl + 1000, 1000);
    assert_int_equal(homa_engine_input(e, p.now, src, pk, len), 0);
    /* a duplicate, and packets overlapping it by one byte, must not be
     * written into the message: they go through homa_engine_input */
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, len, &dst),
                     HOMA_ERR_AGAIN);
    len = data_pkt(pk, id, 3000, 1, pl + 1, 1000); /* [1, 1001) */
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, len, &dst),
                     HOMA_ERR_AGAIN);
    len = data_pkt(pk, id, 3000, 1999, pl + 1999, 2); /* [1999, 2001) */
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, len, &dst),
                     HOMA_ERR_AGAIN);
    /* a different message length for the same RPC */
    len = data_pkt(pk, id, 5000, 0, pl, 1000);
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, len, &dst),
                     HOMA_ERR_AGAIN);
    /* the holes on both sides are placeable; only one placement at a time */
    len = data_pkt(pk, id, 3000, 0, pl, 1000);
    int end_rc = -1;
    uint8_t *d0;
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, len, &d0), 0);
    size_t len2 = data_pkt(pk + 2000, id, 3000, 2000, pl + 2000, 1000);
    assert_int_equal(
        homa_engine_place_begin(e, p.now, src, pk + 2000, HOMA_DATA_HDR_LEN, len2, &dst),
        HOMA_ERR_STATE);
    memcpy(d0, pl, 1000);
    assert_int_equal(homa_engine_place_end(e, p.now, pk, HOMA_DATA_HDR_LEN, len), 0);
    assert_int_equal(place(e, p.now, src, pk + 2000, len2, &end_rc), 0);
    assert_int_equal(end_rc, 0);
    homa_msg m;
    assert_int_equal(homa_engine_recv(e, SPORT, HOMA_RECV_REQUEST, 0, &m), 0);
    assert_int_equal(m.length, 3000);
    assert_memory_equal(m.data, pl, 3000);
    homa_engine_release(e, &m);
    homa_engine_counters(e, &after);
    assert_int_equal(after.data_placed, 2);
    /* a completed message takes nothing more */
    assert_int_equal(place(e, p.now, src, pk, len, NULL), HOMA_ERR_AGAIN);
    pair_destroy(&p);
}

static void homa_engine_place__end_checks_the_packet_read(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    homa_engine *e = p.e[1];
    const homa_addr *src = &p.addr[0];
    static uint8_t pl[2000], pk[2200], other[2200];
    fill(pl, sizeof(pl), 2);
    size_t len = data_pkt(pk, 2000, 2000, 0, pl, 1000);
    uint8_t *dst;
    /* the datagram read differs from the one peeked (header or length):
     * dropped, and the bytes written are not taken as received */
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, len, &dst), 0);
    memset(dst, 0xee, 1000);
    data_pkt(other, 2000, 2000, 1000, pl, 1000);
    assert_int_equal(homa_engine_place_end(e, p.now, other, HOMA_DATA_HDR_LEN, len),
                     HOMA_DROP_INCONSISTENT);
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, len, &dst), 0);
    assert_int_equal(homa_engine_place_end(e, p.now, pk, HOMA_DATA_HDR_LEN, len - 1),
                     HOMA_DROP_INCONSISTENT);
    /* a read that failed: cancel; nothing received */
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, len, &dst), 0);
    homa_engine_place_cancel(e);
    /* end without begin */
    assert_int_equal(homa_engine_place_end(e, p.now, pk, HOMA_DATA_HDR_LEN, len), HOMA_DROP_NO_RPC);
    /* the real packets still complete the message, with the right bytes */
    int end_rc = -1;
    assert_int_equal(place(e, p.now, src, pk, len, &end_rc), 0);
    assert_int_equal(end_rc, 0);
    len = data_pkt(pk, 2000, 2000, 1000, pl + 1000, 1000);
    assert_int_equal(homa_engine_input(e, p.now, src, pk, len), 0);
    homa_msg m;
    assert_int_equal(homa_engine_recv(e, SPORT, HOMA_RECV_REQUEST, 0, &m), 0);
    assert_memory_equal(m.data, pl, 2000);
    homa_engine_release(e, &m);
    homa_counters c;
    homa_engine_counters(e, &c);
    assert_int_equal(c.drop_inconsistent, 2);
    assert_int_equal(c.data_placed, 1);
    pair_destroy(&p);
}

static void homa_engine_place__input_overlapping_a_placement_dropped(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    homa_engine *e = p.e[1];
    const homa_addr *src = &p.addr[0];
    static uint8_t pl[3000], pk[2200], dup[2200];
    fill(pl, sizeof(pl), 3);
    size_t len = data_pkt(pk, 3000, 3000, 1000, pl + 1000, 1000);
    uint8_t *dst;
    assert_int_equal(homa_engine_place_begin(e, p.now, src, pk, HOMA_DATA_HDR_LEN, len, &dst), 0);
    /* while the driver writes [1000, 2000), a copy of [500, 1500) with
     * other bytes arrives: it must not land under the driver's feet */
    static uint8_t junk[1000];
    memset(junk, 0x77, sizeof(junk));
    size_t dl = data_pkt(dup, 3000, 3000, 500, junk, 1000);
    assert_int_equal(homa_engine_input(e, p.now, src, dup, dl), HOMA_DROP_DUPLICATE);
    /* a packet beside it is fine */
    dl = data_pkt(dup, 3000, 3000, 0, pl, 1000);
    assert_int_equal(homa_engine_input(e, p.now, src, dup, dl), 0);
    memcpy(dst, pl + 1000, 1000);
    assert_int_equal(homa_engine_place_end(e, p.now, pk, HOMA_DATA_HDR_LEN, len), 0);
    dl = data_pkt(dup, 3000, 3000, 2000, pl + 2000, 1000);
    assert_int_equal(homa_engine_input(e, p.now, src, dup, dl), 0);
    homa_msg m;
    assert_int_equal(homa_engine_recv(e, SPORT, HOMA_RECV_REQUEST, 0, &m), 0);
    assert_memory_equal(m.data, pl, 3000);
    homa_engine_release(e, &m);
    pair_destroy(&p);
}

static void homa_engine_place__rpc_freed_during_placement(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    /* client side: the application aborts the RPC whose response is being
     * received in place; the buffer stays valid until place_end, which
     * drops the packet (ASan: no use after free, no leak) */
    static uint8_t req[100];
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, req, sizeof(req), 0, &id),
        0);
    pair_settle(&p);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &m), 0);
    static uint8_t resp[5000];
    fill(resp, sizeof(resp), 4);
    assert_int_equal(homa_engine_send_reply(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id, resp,
                                            sizeof(resp)),
                     0);
    homa_engine_release(p.e[1], &m);
    homa_pkt_out out[8];
    int n = homa_engine_pull(p.e[1], p.now, out, 8);
    assert_true(n >= 1);
    assert_int_equal(out[0].type, HOMA_PKT_DATA);
    static uint8_t pk[2000];
    memcpy(pk, out[0].hdr, out[0].hdr_len);
    memcpy(pk + out[0].hdr_len, out[0].payload, out[0].payload_len);
    size_t len = out[0].hdr_len + out[0].payload_len;
    homa_engine_pull_done(p.e[1]);
    uint8_t *dst;
    assert_int_equal(
        homa_engine_place_begin(p.e[0], p.now, &p.addr[1], pk, HOMA_DATA_HDR_LEN, len, &dst), 0);
    assert_int_equal(homa_engine_abort(p.e[0], p.now, CPORT, id), 0);
    memcpy(dst, pk + HOMA_DATA_HDR_LEN, len - HOMA_DATA_HDR_LEN);
    assert_int_equal(homa_engine_place_end(p.e[0], p.now, pk, HOMA_DATA_HDR_LEN, len),
                     HOMA_DROP_NO_RPC);

    /* server side: the port closes during a placement; then the engine is
     * destroyed with a placement pending (its buffer freed) */
    static uint8_t pl[3000], pk2[1200];
    fill(pl, sizeof(pl), 5);
    len = data_pkt(pk2, 5000, 3000, 0, pl, 1000);
    assert_int_equal(
        homa_engine_place_begin(p.e[1], p.now, &p.addr[0], pk2, HOMA_DATA_HDR_LEN, len, &dst), 0);
    assert_int_equal(homa_engine_port_close(p.e[1], p.now, SPORT), 0);
    memcpy(dst, pl, 1000);
    assert_int_equal(homa_engine_place_end(p.e[1], p.now, pk2, HOMA_DATA_HDR_LEN, len),
                     HOMA_DROP_NO_RPC);
    assert_int_equal(homa_engine_port_open(p.e[1], SPORT), 0);
    assert_int_equal(
        homa_engine_place_begin(p.e[1], p.now, &p.addr[0], pk2, HOMA_DATA_HDR_LEN, len, &dst), 0);
    memcpy(dst, pl, 1000);
    pair_destroy(&p);
}

static int drop_from_client(void *arg, int from, const struct pair_pkt *pk)
{
    (void)arg;
    (void)pk;
    return from == 0;
}

/* The Linux module answers NEED_ACK with an ACK whose num_acks is 0: the
 * RPC it acknowledges is the one its common header names. */
static void homa_engine_input__ack_without_records_ends_named_rpc(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    uint64_t id = 0;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "ping", 4, 0, &id), 0);
    pair_settle(&p);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &m), 0);
    /* From now on nothing the client sends arrives (no piggybacked ack). */
    p.filter = drop_from_client;
    assert_int_equal(
        homa_engine_send_reply(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id, "pong", 4), 0);
    homa_engine_release(p.e[1], &m);
    pair_settle(&p);
    homa_counters c;
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.rpcs_live, 1); /* waiting for the ack */
    uint64_t acked = c.server_acked;

    struct homa_wire_pkt ack;
    memset(&ack, 0, sizeof(ack));
    ack.type = HOMA_PKT_ACK;
    ack.sport = CPORT;
    ack.dport = SPORT;
    ack.sender_id = id;
    ack.u.ack.num_acks = 0;
    uint8_t buf[HOMA_MAX_HDR_LEN];
    size_t n = homa_wire_encode(&ack, buf);
    buf[13] = 0x06; /* the kernel's look-alike fields change nothing */
    buf[18] = 0xb9;
    buf[19] = 0x7d;
    assert_int_equal(homa_engine_input(p.e[1], p.now, &p.addr[0], buf, n), 0);
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.rpcs_live, 0);
    assert_int_equal(c.server_acked, acked + 1);
    /* A second one finds nothing and harms nothing. */
    assert_int_equal(homa_engine_input(p.e[1], p.now, &p.addr[0], buf, n), 0);
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.server_acked, acked + 1);
    pair_destroy(&p);
}

/* ---- input batches (homa_engine_input_begin/_end) ---- */

static void count_want_tx(void *ctx)
{
    (*(int *)ctx)++;
}

/* A DATA packet of a 500,000-byte request (client id 100) at offset off. */
static size_t batch_data(uint8_t *buf, uint32_t off)
{
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.type = HOMA_PKT_DATA;
    p.sport = 1000;
    p.dport = PORT;
    p.sender_id = 100;
    p.u.data.message_length = 500000;
    p.u.data.incoming = 40000;
    p.u.data.offset = off;
    p.u.data.cutoff_version = 1;
    size_t hl = homa_wire_encode(&p, buf);
    memset(buf + hl, 0xab, 1400);
    return hl + 1400;
}

static int grants_queued(homa_engine *e)
{
    homa_pkt_out out[64];
    int n = homa_engine_pull(e, e->now, out, 64), g = 0;
    for (int i = 0; i < n; i++) {
        struct homa_wire_pkt w;
        if (homa_wire_decode(out[i].hdr, out[i].hdr_len, &w) == HOMA_WIRE_OK &&
            w.type == HOMA_PKT_GRANT)
            g++;
    }
    homa_engine_pull_done(e);
    return g;
}

/* In a batch, the packets are taken as they come, but the grant decision
 * and the want_tx notification wait for its end: one GRANT and one
 * notification for the whole batch. */
static void homa_engine_input_end__grants_once_for_the_batch(void **state)
{
    (void)state;
    int wanted = 0;
    homa_engine_ops ops = {.ctx = &wanted, .want_tx = count_want_tx};
    homa_engine *e;
    assert_int_equal(homa_engine_create(NULL, &ops, &e), 0);
    assert_int_equal(homa_engine_port_open(e, PORT), 0);
    uint8_t buf[2000];
    homa_engine_input_begin(e);
    for (uint32_t off = 0; off < 20 * 1400; off += 1400) {
        size_t len = batch_data(buf, off);
        assert_int_equal(homa_engine_input(e, 1000, &peer, buf, len), 0);
    }
    assert_int_equal(wanted, 0);
    assert_int_equal(e->ctl_count, 0); /* no GRANT decided yet */
    homa_counters c;
    homa_engine_counters(e, &c);
    assert_int_equal(c.data_in, 20); /* but every packet was taken */
    homa_engine_input_end(e, 1000);
    assert_int_equal(wanted, 1);
    assert_int_equal(grants_queued(e), 1);
    homa_engine_input_end(e, 1000); /* not in a batch: nothing */
    assert_int_equal(wanted, 1);
    /* Outside a batch the same packets bring a decision each. */
    for (uint32_t off = 20 * 1400; off < 40 * 1400; off += 1400) {
        size_t len = batch_data(buf, off);
        assert_int_equal(homa_engine_input(e, 2000, &peer, buf, len), 0);
    }
    assert_true(wanted > 2); /* a notification with each packet once a GRANT waits */
    homa_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_engine_input_end__grants_once_for_the_batch),
        cmocka_unit_test(homa_engine_input__truncation_at_every_byte),
        cmocka_unit_test(homa_engine_input__fields_out_of_range),
        cmocka_unit_test(homa_engine_input__grant_beyond_message_end),
        cmocka_unit_test(homa_engine_input__freeze_ignored_and_counted),
        cmocka_unit_test(homa_engine_input__random_garbage_never_crashes),
        cmocka_unit_test(homa_engine_input__ack_without_records_ends_named_rpc),
        cmocka_unit_test(homa_engine_input__restarted_request_keeps_tombstone),
        cmocka_unit_test(homa_engine_input__duplicate_request_after_ack_not_redelivered),
        cmocka_unit_test(homa_engine_input__rpc_unknown_restarts_request),
        cmocka_unit_test(homa_engine_input__restart_uses_current_cutoffs),
        cmocka_unit_test(homa_engine_input__rpc_cap_is_not_death),
        cmocka_unit_test(homa_engine_input__rpc_cap_of_stuck_server_fails),
        cmocka_unit_test(homa_engine_input__rpc_cap_of_own_requests_fails),
        cmocka_unit_test(homa_engine_input__memory_cap_makes_new_requests_wait),
        cmocka_unit_test(homa_engine_input__memory_waiters_fifo_and_dead_client),
        cmocka_unit_test(homa_engine_input__request_above_memory_cap_fails),
        cmocka_unit_test(homa_engine_input__memory_cap_makes_responses_wait),
        cmocka_unit_test(homa_engine_input__response_waiting_on_held_memory_fails),
        cmocka_unit_test(homa_engine_input__waiting_response_not_resent),
        cmocka_unit_test(homa_engine_place__echo_sizes_in_place),
        cmocka_unit_test(homa_engine_place__loss_recovery_in_place),
        cmocka_unit_test(homa_engine_place__refuses_bad_and_received_ranges),
        cmocka_unit_test(homa_engine_place__end_checks_the_packet_read),
        cmocka_unit_test(homa_engine_place__input_overlapping_a_placement_dropped),
        cmocka_unit_test(homa_engine_place__rpc_freed_during_placement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
