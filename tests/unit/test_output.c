/* Unit tests for src/core/output.c: sender SRPT through the pull interface,
 * control packets first, unscheduled priorities from the peer's cutoffs,
 * the pacer, zero-length messages. */
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

static uint8_t big[200000];
static homa_addr peer = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}};

static homa_engine *make(homa_config *cfg)
{
    homa_engine *e;
    assert_int_equal(homa_engine_create(cfg, NULL, &e), 0);
    assert_int_equal(homa_engine_port_open(e, PORT), 0);
    return e;
}

/* Strict SRPT: no share of the bytes for the oldest message
 * (grant_fifo_permille 0), for the tests of the order itself. */
static homa_engine *make_srpt(void)
{
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.grant_fifo_permille = 0;
    return make(&cfg);
}

static uint64_t send(homa_engine *e, uint64_t now, size_t len)
{
    uint64_t id;
    assert_int_equal(homa_engine_send_request(e, now, PORT, &peer, 80, big, len, 0, &id), 0);
    return id;
}

static void decode(const homa_pkt_out *o, struct homa_wire_pkt *p)
{
    uint8_t buf[HOMA_MAX_HDR_LEN];
    memcpy(buf, o->hdr, o->hdr_len);
    assert_int_equal(homa_wire_decode(buf, o->hdr_len, p), 0);
}

static void homa_engine_pull__srpt_order(void **state)
{
    (void)state;
    homa_engine *e = make(NULL);
    uint64_t a = send(e, 0, 30000);
    uint64_t b = send(e, 0, 3000);
    uint64_t c = send(e, 0, 10000);
    homa_pkt_out out[64];
    int n = homa_engine_pull(e, 0, out, 64);
    /* 3 + 8 + 22 packets of at most 1,400 bytes, all unscheduled */
    assert_int_equal(n, 3 + 8 + 22);
    uint64_t order[64];
    for (int i = 0; i < n; i++) {
        struct homa_wire_pkt p;
        decode(&out[i], &p);
        assert_int_equal(p.type, HOMA_PKT_DATA);
        order[i] = p.sender_id;
        assert_true(out[i].payload_len <= 1400);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(order[i], b);
    for (int i = 3; i < 11; i++)
        assert_int_equal(order[i], c);
    for (int i = 11; i < n; i++)
        assert_int_equal(order[i], a);
    homa_engine_pull_done(e);
    assert_int_equal(homa_engine_pull(e, 0, out, 64), 0);
    homa_engine_destroy(e);
}

/* Scheduling classes: every message of a port of a higher class goes
 * before any message of a lower one, SRPT within a class; the class is
 * the port's when the RPC starts (a later change leaves it). */
static void homa_engine_pull__higher_class_first(void **state)
{
    (void)state;
    homa_engine *e = make_srpt();
    assert_int_equal(homa_engine_port_open(e, PORT + 1), 0);
    assert_int_equal(homa_engine_port_set_class(e, PORT + 1, 2), 0);
    assert_int_equal(homa_engine_port_set_class(e, PORT + 1, HOMA_SCHED_CLASSES), HOMA_ERR_INVAL);
    assert_int_equal(homa_engine_port_set_class(e, PORT + 1, -1), HOMA_ERR_INVAL);
    assert_int_equal(homa_engine_port_set_class(e, PORT + 2, 1), HOMA_ERR_NO_PORT);
    uint64_t small0 = send(e, 0, 500); /* class 0 */
    uint64_t id[3];
    size_t lens[3] = {30000, 2000, 0};
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            homa_engine_send_request(e, 0, PORT + 1, &peer, 80, big, lens[i], 0, &id[i]), 0);
    assert_int_equal(homa_engine_port_set_class(e, PORT + 1, 0), 0); /* new RPCs only */
    uint64_t late = 0;
    assert_int_equal(homa_engine_send_request(e, 0, PORT + 1, &peer, 80, big, 100, 0, &late), 0);
    homa_pkt_out out[64];
    int n = homa_engine_pull(e, 0, out, 64);
    /* class 2: the empty request, 2,000 B (2 packets), 30,000 B (22); then
     * class 0: 100 B, 500 B */
    assert_int_equal(n, 1 + 2 + 22 + 1 + 1);
    uint64_t want[27];
    int k = 0;
    want[k++] = id[2];
    for (int i = 0; i < 2; i++)
        want[k++] = id[1];
    for (int i = 0; i < 22; i++)
        want[k++] = id[0];
    want[k++] = late;
    want[k++] = small0;
    for (int i = 0; i < n; i++) {
        struct homa_wire_pkt p;
        decode(&out[i], &p);
        assert_int_equal(p.sender_id, want[i]);
    }
    homa_engine_pull_done(e);
    homa_engine_destroy(e);
}

/* The oldest message that can send gets a share of the packets
 * (grant_fifo_permille, 5 % by default) even while shorter messages keep
 * coming: a 150 KB request started first, then 10 KB requests, always 4
 * queued.  Under SRPT alone the long request sends nothing; with the share
 * about 1 packet in 20 is its (its 40 KB unscheduled are 29 packets). */
static void homa_engine_pull__oldest_gets_a_share(void **state)
{
    (void)state;
    for (int strict = 0; strict < 2; strict++) {
        homa_engine *e = strict ? make_srpt() : make(NULL);
        uint64_t now = 1;
        uint64_t big_id = send(e, now++, 150000);
        uint64_t small[4];
        uint32_t left[4];
        for (int i = 0; i < 4; i++) {
            small[i] = send(e, now++, 10000);
            left[i] = 10000;
        }
        int big_pkts = 0, first_big = -1;
        homa_pkt_out out[1];
        for (int k = 0; k < 400; k++) {
            assert_int_equal(homa_engine_pull(e, now++, out, 1), 1);
            struct homa_wire_pkt p;
            decode(&out[0], &p);
            if (p.sender_id == big_id) {
                if (first_big < 0) first_big = k;
                big_pkts++;
            } else {
                for (int i = 0; i < 4; i++)
                    if (small[i] == p.sender_id && (left[i] -= out[0].payload_len) == 0) {
                        small[i] = send(e, now++, 10000); /* another one comes */
                        left[i] = 10000;
                    }
            }
            homa_engine_pull_done(e);
        }
        print_message("%s: the 150 KB request sent %d of 400 packets, first at %d\n",
                      strict ? "strict SRPT" : "default", big_pkts, first_big);
        assert_int_equal(e->fifo_xmits, (uint64_t)big_pkts); /* all by that rule */
        if (strict) {
            assert_int_equal(big_pkts, 0);
        } else {
            assert_true(big_pkts >= 15 && big_pkts <= 25);
            assert_true(first_big >= 15); /* a period of SRPT first */
        }
        homa_engine_destroy(e);
    }
}

/* A request restarted after RPC_UNKNOWN starts over, and so does its
 * place among the oldest messages: it still gets the FIFO share while
 * shorter messages keep coming (left out of that list, a long restarted
 * request waited for as long as they came). */
static void homa_engine_pull__restarted_request_keeps_a_share(void **state)
{
    (void)state;
    homa_engine *e = make(NULL);
    uint64_t now = 1;
    uint64_t big_id = send(e, now++, 150000);
    homa_pkt_out out[64];
    while (homa_engine_pull(e, now, out, 64) > 0) /* its unscheduled bytes */
        homa_engine_pull_done(e);
    homa_counters c;
    uint64_t t = now;
    do { /* the server is silent: a RESEND about it */
        t += 1000000ull;
        homa_engine_timer(e, t);
        while (homa_engine_pull(e, t, out, 64) > 0)
            homa_engine_pull_done(e);
        homa_engine_counters(e, &c);
    } while (c.resend_out == 0 && t < now + 50 * 1000000ull);
    assert_true(c.resend_out > 0);
    now = t + 1;
    struct homa_wire_pkt u;
    memset(&u, 0, sizeof(u));
    u.type = HOMA_PKT_RPC_UNKNOWN;
    u.sport = 80;
    u.dport = PORT;
    u.sender_id = big_id ^ 1;
    uint8_t buf[HOMA_MAX_HDR_LEN];
    size_t hl = homa_wire_encode(&u, buf);
    assert_int_equal(homa_engine_input(e, now, &peer, buf, hl), 0);
    homa_engine_counters(e, &c);
    assert_int_equal(c.client_restarts, 1);
    uint64_t small[4];
    uint32_t left[4];
    for (int i = 0; i < 4; i++) {
        small[i] = send(e, now++, 10000);
        left[i] = 10000;
    }
    int big_pkts = 0;
    uint64_t fifo0 = e->fifo_xmits;
    for (int k = 0; k < 400; k++) {
        assert_int_equal(homa_engine_pull(e, now++, out, 1), 1);
        struct homa_wire_pkt p;
        decode(&out[0], &p);
        if (p.sender_id == big_id) {
            big_pkts++;
        } else {
            for (int i = 0; i < 4; i++)
                if (small[i] == p.sender_id && (left[i] -= out[0].payload_len) == 0) {
                    small[i] = send(e, now++, 10000);
                    left[i] = 10000;
                }
        }
        homa_engine_pull_done(e);
    }
    /* its unscheduled bytes again, by the FIFO rule (20 turns in 400) */
    assert_true(big_pkts >= 10);
    assert_int_equal(e->fifo_xmits - fifo0, (uint64_t)big_pkts);
    homa_engine_destroy(e);
}

/* SRPT order holds across the send queue's buckets: 2,000 requests of
 * sizes below 1,024 bytes (one bucket each), repeated sizes and long ones
 * (partly sent, they move to shorter buckets), more arriving while the
 * queue drains, pulled one packet at a time.  Each packet must come from
 * the message with the fewest bytes left of those that may send (then the
 * oldest), and an insert must cost a few steps, not a walk through the
 * queue (the sorted list it replaced stepped past 5-35 entries per insert
 * with 1,300-13,000 queued, measured in W1 under loss). */
#define SQ_N 2000
static void homa_engine_pull__srpt_order_across_buckets(void **state)
{
    (void)state;
    homa_engine *e = make_srpt();
    static uint32_t len[SQ_N], sent[SQ_N];
    static uint64_t ids[SQ_N];
    uint32_t x = 12345;
    int queued = 0;
    uint64_t now = 1;
    homa_pkt_out out[1];
    int packets = 0;
    for (;;) {
        /* 40 new requests every 25 packets until all are queued */
        if (packets % 25 == 0)
            for (int k = 0; k < 40 && queued < SQ_N; k++, queued++) {
                x = x * 1103515245u + 12345u;
                uint32_t r = (x >> 8) % 100;
                len[queued] = r < 40   ? 1 + (x >> 12) % 1023
                              : r < 60 ? 500
                                       : 1024 + (x >> 12) % 150000;
                ids[queued] = send(e, now++, len[queued]);
            }
        int n = homa_engine_pull(e, now++, out, 1);
        if (n == 0) break;
        struct homa_wire_pkt p;
        decode(&out[0], &p);
        assert_int_equal(p.type, HOMA_PKT_DATA);
        int best = -1, got = -1;
        for (int i = 0; i < queued; i++) {
            uint32_t can = len[i] < 40000 ? len[i] : 40000; /* unscheduled */
            if (ids[i] == p.sender_id) got = i;
            if (sent[i] >= can) continue;
            if (best < 0 || len[i] - sent[i] < len[best] - sent[best]) best = i;
        }
        assert_true(got >= 0);
        assert_int_equal(got, best); /* ties: the older (lower index) wins */
        sent[got] += out[0].payload_len;
        homa_engine_pull_done(e);
        packets++;
    }
    assert_int_equal(queued, SQ_N);
    for (int i = 0; i < SQ_N; i++)
        assert_int_equal(sent[i], len[i] < 40000 ? len[i] : 40000);
    /* W1-like: 20,000 queued requests of sizes below 1,024 bytes */
    homa_engine_destroy(e);
    e = make(NULL);
    uint64_t s0 = e->sendq_steps;
    for (int i = 0; i < 20000; i++) {
        x = x * 1103515245u + 12345u;
        send(e, now++, 8 + (x >> 12) % 1000);
    }
    uint64_t steps = e->sendq_steps - s0;
    print_message("20,000 inserts stepped past %llu entries\n", (unsigned long long)steps);
    assert_true(steps <= 2 * 20000);
    homa_engine_destroy(e);
}

/* Requests restarted after RPC_UNKNOWN, in an order unrelated to their age,
 * while hundreds of their size wait to be sent (a client behind its offered
 * load, at 20 % loss): each goes to the front of its size's bucket in a
 * step.  Placed by age among the others they cost a walk each (here
 * 2 x 800 requests of one size: about 160,000 steps).  Every restarted
 * request goes out once, before the fresh ones, and the fresh ones keep
 * their order. */
static void homa_engine_pull__restarts_go_first_in_a_step(void **state)
{
    (void)state;
    enum { N = 800 };
    homa_engine *e = make_srpt();
    uint64_t old[N], fresh[N];
    homa_pkt_out out[64];
    uint64_t now = 1;
    for (int i = 0; i < N; i++) {
        old[i] = send(e, now++, 100);
        while (homa_engine_pull(e, now, out, 64) > 0)
            homa_engine_pull_done(e);
    }
    /* Their RESENDs (the servers are silent), then younger requests that
     * stay queued behind a pull nobody makes. */
    homa_counters c;
    uint64_t t = now;
    do {
        t += 1000000ull;
        homa_engine_timer(e, t);
        while (homa_engine_pull(e, t, out, 64) > 0)
            homa_engine_pull_done(e);
        homa_engine_counters(e, &c);
    } while (c.resend_out < N && t < now + 50 * 1000000ull);
    assert_true(c.resend_out >= N);
    now = t + 1;
    for (int i = 0; i < N; i++)
        fresh[i] = send(e, now++, 100);
    uint64_t s0 = e->sendq_steps;
    uint32_t x = 12345;
    for (int k = 0; k < N; k++) {
        x = x * 1103515245u + 12345u;
        int i = (int)((x >> 8) % N);
        while (old[i] == 0)
            i = (i + 1) % N;
        struct homa_wire_pkt p;
        memset(&p, 0, sizeof(p));
        p.type = HOMA_PKT_RPC_UNKNOWN;
        p.sport = 80;
        p.dport = PORT;
        p.sender_id = old[i] ^ 1;
        uint8_t buf[HOMA_MAX_HDR_LEN];
        size_t hl = homa_wire_encode(&p, buf);
        assert_int_equal(homa_engine_input(e, now, &peer, buf, hl), 0);
        old[i] = 0;
    }
    uint64_t steps = e->sendq_steps - s0;
    print_message("%d restarts among %d queued stepped past %llu entries\n", N, N,
                  (unsigned long long)steps);
    assert_true(steps <= N);
    homa_engine_counters(e, &c);
    assert_int_equal(c.client_restarts, N);
    /* Restarted first (N packets), then the fresh ones in their order. */
    int seen = 0, next_fresh = 0;
    for (;;) {
        int n = homa_engine_pull(e, now, out, 64);
        if (n == 0) break;
        for (int k = 0; k < n; k++) {
            struct homa_wire_pkt p;
            decode(&out[k], &p);
            if (p.type != HOMA_PKT_DATA) continue;
            if (seen++ < N) {
                for (int j = 0; j < N; j++)
                    assert_true(p.sender_id != fresh[j]);
            } else {
                assert_true(next_fresh < N);
                assert_int_equal(p.sender_id, fresh[next_fresh++]);
            }
        }
        homa_engine_pull_done(e);
    }
    assert_int_equal(seen, 2 * N);
    homa_engine_destroy(e);
}

/* A range the receiver asked for again goes before shorter messages: the
 * receiver granted it and waits, and under SRPT a long message's lost
 * packet could wait behind every shorter message for longer than the
 * receiver's timeout. */
static void homa_engine_pull__retransmission_before_srpt(void **state)
{
    (void)state;
    homa_engine *e = make(NULL);
    uint64_t a = send(e, 0, 100000);
    homa_pkt_out out[64];
    assert_int_equal(homa_engine_pull(e, 0, out, 64), 29); /* 40,000 unscheduled */
    homa_engine_pull_done(e);
    uint64_t b = send(e, 0, 3000);
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.type = HOMA_PKT_RESEND;
    p.sport = 80;
    p.dport = PORT;
    p.sender_id = a ^ 1;
    p.u.resend.offset = 1400;
    p.u.resend.length = 2800;
    p.u.resend.priority = 7;
    uint8_t buf[HOMA_MAX_HDR_LEN];
    size_t hl = homa_wire_encode(&p, buf);
    assert_int_equal(homa_engine_input(e, 0, &peer, buf, hl), 0);
    int n = homa_engine_pull(e, 0, out, 64);
    assert_int_equal(n, 2 + 3);
    for (int i = 0; i < n; i++) {
        decode(&out[i], &p);
        assert_int_equal(p.sender_id, i < 2 ? a : b);
        if (i < 2) {
            assert_int_equal(p.u.data.retransmit, 1);
            assert_int_equal(p.u.data.offset, 1400 + 1400 * (uint32_t)i);
            assert_int_equal(out[i].priority, 7);
        }
    }
    homa_engine_pull_done(e);
    homa_engine_destroy(e);
}

static void homa_engine_pull__unscheduled_limit_and_priorities(void **state)
{
    (void)state;
    homa_engine *e = make(NULL);
    send(e, 0, 100);    /* prio 7 (<= 200) */
    send(e, 0, 2000);   /* prio 6 (<= 2,800) */
    send(e, 0, 100000); /* prio 4; only 40,000 bytes unscheduled */
    homa_pkt_out out[128];
    int n = homa_engine_pull(e, 0, out, 128);
    uint32_t bytes_big = 0;
    for (int i = 0; i < n; i++) {
        struct homa_wire_pkt p;
        decode(&out[i], &p);
        uint32_t len = p.u.data.message_length;
        uint8_t want = len == 100 ? 7 : len == 2000 ? 6 : 4;
        assert_int_equal(out[i].priority, want);
        if (len == 100000) {
            bytes_big += out[i].payload_len;
            assert_int_equal(p.u.data.incoming, 40000);
        }
    }
    assert_int_equal(bytes_big, 40000);
    homa_engine_pull_done(e);
    homa_engine_destroy(e);
}

static void homa_engine_pull__control_first(void **state)
{
    (void)state;
    homa_engine *e = make(NULL);
    send(e, 0, 5000);
    /* a RESEND for an unknown RPC makes the engine queue RPC_UNKNOWN */
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.type = HOMA_PKT_RESEND;
    p.sport = 80;
    p.dport = PORT;
    p.sender_id = 12345;
    p.u.resend.length = 100;
    uint8_t buf[HOMA_MAX_HDR_LEN];
    size_t hl = homa_wire_encode(&p, buf);
    assert_int_equal(homa_engine_input(e, 0, &peer, buf, hl), HOMA_DROP_NO_RPC);
    homa_pkt_out out[8];
    int n = homa_engine_pull(e, 0, out, 8);
    assert_true(n >= 2);
    assert_int_equal(out[0].type, HOMA_PKT_RPC_UNKNOWN);
    assert_int_equal(out[0].priority, 7);
    decode(&out[0], &p);
    assert_int_equal(p.sender_id, 12344); /* our id for it: sender_id ^ 1 */
    assert_int_equal(out[1].type, HOMA_PKT_DATA);
    homa_engine_pull_done(e);
    homa_engine_destroy(e);
}

static void homa_engine_pull__cutoffs_from_peer_change_priority(void **state)
{
    (void)state;
    homa_engine *e = make(NULL);
    send(e, 0, 1); /* creates the peer */
    homa_pkt_out out[8];
    homa_engine_pull(e, 0, out, 8);
    homa_engine_pull_done(e);
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.type = HOMA_PKT_CUTOFFS;
    p.sport = 80;
    p.dport = PORT;
    p.sender_id = 1;
    uint32_t cut[8] = {0x7fffffff, 0, 0, 0, 0, 0, 1000, 10};
    memcpy(p.u.cutoffs.cutoffs, cut, sizeof(cut));
    p.u.cutoffs.version = 7;
    uint8_t buf[HOMA_MAX_HDR_LEN];
    size_t hl = homa_wire_encode(&p, buf);
    assert_int_equal(homa_engine_input(e, 0, &peer, buf, hl), 0);
    send(e, 0, 500);
    assert_int_equal(homa_engine_pull(e, 0, out, 8), 1);
    assert_int_equal(out[0].priority, 6);
    decode(&out[0], &p);
    assert_int_equal(p.u.data.cutoff_version, 7);
    homa_engine_pull_done(e);
    homa_engine_destroy(e);
}

static void homa_engine_pull__pacer_holds_long_messages(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.link_bps = 10000000000ull; /* 10 Gb/s: 1,456 B = 1,165 ns */
    homa_engine *e = make(&cfg);
    homa_engine_timer(e, 0);
    send(e, 0, 30000);
    homa_pkt_out out[64];
    int n = homa_engine_pull(e, 0, out, 64);
    /* backlog may reach 5 us: 5 packets fit (the 5th crosses the limit) */
    assert_true(n >= 4 && n <= 6);
    homa_engine_pull_done(e);
    uint64_t d = homa_engine_next_deadline(e);
    assert_true(d > 0 && d < 10000);
    /* a short message bypasses the pacer */
    send(e, 0, 500);
    assert_int_equal(homa_engine_pull(e, 0, out, 64), 1);
    assert_int_equal(out[0].payload_len, 500);
    homa_engine_pull_done(e);
    /* later, the long one resumes */
    n = homa_engine_pull(e, 100000, out, 64);
    assert_true(n >= 4);
    homa_engine_pull_done(e);
    homa_counters c;
    homa_engine_counters(e, &c);
    assert_true(c.pacer_stalls >= 1);
    homa_engine_destroy(e);
}

static void homa_engine_pull__pacer_counts_link_overhead(void **state)
{
    (void)state;
    /* 1 Gb/s = 8 ns per byte; a packet costs header + payload +
     * pkt_overhead bytes of link time, control packets too. */
    for (uint32_t ovh = 0; ovh <= 86; ovh += 86) {
        homa_config cfg;
        homa_config_default(&cfg);
        cfg.link_bps = 1000000000ull;
        cfg.pkt_overhead = ovh;
        homa_engine *e = make(&cfg);
        send(e, 0, 500);
        homa_pkt_out out[4];
        assert_int_equal(homa_engine_pull(e, 0, out, 4), 1);
        homa_engine_pull_done(e);
        assert_int_equal(e->nic_free_at, (uint64_t)(HOMA_DATA_HDR_LEN + 500 + ovh) * 8);
        homa_engine_destroy(e);
    }
    /* odd rates: the fixed-point product stays within 1 ns per packet */
    uint64_t rates[] = {3000000000ull, 25000000000ull, 100000000000ull, 1000ull};
    for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
        homa_config cfg;
        homa_config_default(&cfg);
        cfg.link_bps = rates[i];
        homa_engine *e = make(&cfg);
        send(e, 0, 500);
        homa_pkt_out out[4];
        assert_int_equal(homa_engine_pull(e, 0, out, 4), 1);
        homa_engine_pull_done(e);
        double exact = (double)(HOMA_DATA_HDR_LEN + 500) * 8e9 / (double)rates[i];
        assert_true((double)e->nic_free_at <= exact + 1e-9 * exact + 1);
        assert_true((double)e->nic_free_at >= exact - 1e-4 * exact - 1);
        homa_engine_destroy(e);
    }
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.pkt_overhead = 1001;
    assert_int_equal(homa_config_validate(&cfg, NULL), HOMA_ERR_INVAL);
}

static void homa_engine_pull__zero_length_message(void **state)
{
    (void)state;
    homa_engine *e = make(NULL);
    send(e, 0, 0);
    homa_pkt_out out[8];
    assert_int_equal(homa_engine_pull(e, 0, out, 8), 1);
    assert_int_equal(out[0].payload_len, 0);
    assert_int_equal(out[0].hdr_len, HOMA_DATA_HDR_LEN);
    homa_engine_pull_done(e);
    assert_int_equal(homa_engine_pull(e, 0, out, 8), 0);
    homa_engine_destroy(e);
}

static void homa_engine_pull_done__defers_frees(void **state)
{
    (void)state;
    homa_engine *e = make(NULL);
    uint64_t id = send(e, 0, 5000);
    homa_pkt_out out[8];
    int n = homa_engine_pull(e, 0, out, 8);
    assert_true(n > 0);
    /* aborting while the driver still holds payload pointers must not free
     * them (ASan would catch the use below) */
    assert_int_equal(homa_engine_abort(e, 0, PORT, id), 0);
    unsigned sum = 0;
    for (uint32_t i = 0; i < out[0].payload_len; i++)
        sum += out[0].payload[i];
    (void)sum;
    homa_engine_pull_done(e);
    homa_engine_destroy(e);
}

#define MS 1000000ull

/* A RESEND from the peer for [offset, offset+len) of client RPC id, read at
 * now after it reached the host at arrived. */
static void resend_at(homa_engine *e, uint64_t now, uint64_t arrived, uint64_t id, uint32_t offset,
                      uint32_t len)
{
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.type = HOMA_PKT_RESEND;
    p.sport = 80;
    p.dport = PORT;
    p.sender_id = id ^ 1;
    p.u.resend.offset = offset;
    p.u.resend.length = len;
    p.u.resend.priority = 7;
    uint8_t buf[HOMA_MAX_HDR_LEN];
    size_t hl = homa_wire_encode(&p, buf);
    assert_int_equal(homa_engine_input_at(e, now, arrived, &peer, buf, hl), 0);
}

/* Pulls everything; returns the count, *rtx the retransmitted DATA packets
 * and *busy the BUSY packets among them. */
static int pull_all(homa_engine *e, uint64_t now, int *rtx, int *busy)
{
    homa_pkt_out out[64];
    int n = homa_engine_pull(e, now, out, 64);
    *rtx = *busy = 0;
    for (int i = 0; i < n; i++) {
        struct homa_wire_pkt p;
        decode(&out[i], &p);
        if (p.type == HOMA_PKT_DATA && p.u.data.retransmit) (*rtx)++;
        if (p.type == HOMA_PKT_BUSY) (*busy)++;
    }
    if (n > 0) homa_engine_pull_done(e);
    return n;
}

/* A RESEND that reached us before the data it asks for left was written
 * before its sender could have seen that data (loopback under load: it
 * waited in our socket while we sent the response).  That data is on its
 * way, not lost: no retransmission, a BUSY instead.  Once the RESEND
 * arrived after the data left, it is answered. */
static void homa_engine_input_at__resend_older_than_data_not_answered(void **state)
{
    (void)state;
    homa_engine *e = make(NULL);
    uint64_t a = send(e, MS, 3000);
    int rtx, busy;
    assert_int_equal(pull_all(e, MS, &rtx, &busy), 3);
    resend_at(e, 3 * MS, MS / 2, a, 0, 1400);
    assert_int_equal(pull_all(e, 3 * MS, &rtx, &busy), 1);
    assert_int_equal(rtx, 0);
    assert_int_equal(busy, 1);
    homa_counters c;
    homa_engine_counters(e, &c);
    assert_int_equal(c.resend_stale, 1);
    assert_int_equal(c.retransmit_bytes, 0);
    resend_at(e, 4 * MS, 2 * MS, a, 0, 1400);
    assert_int_equal(pull_all(e, 4 * MS, &rtx, &busy), 1);
    assert_int_equal(rtx, 1);
    homa_engine_counters(e, &c);
    assert_int_equal(c.retransmit_bytes, 1400);
    assert_int_equal(c.resend_answered, 1);
    homa_engine_destroy(e);
}

/* Two RESENDs for one range: the second arrived before the answer to the
 * first left, so it is a copy of the same question (not a new loss) and
 * gets no second retransmission; one that arrives after the answer left is
 * answered again.  A RESEND overlapping the fresh retransmission gets only
 * the part not just resent. */
static void homa_engine_input_at__resend_not_repeated_for_fresh_retransmission(void **state)
{
    (void)state;
    homa_engine *e = make(NULL);
    uint64_t a = send(e, MS, 3000);
    int rtx, busy;
    assert_int_equal(pull_all(e, MS, &rtx, &busy), 3);
    resend_at(e, 10 * MS, 9 * MS, a, 0, 1400);
    assert_int_equal(pull_all(e, 10 * MS, &rtx, &busy), 1);
    assert_int_equal(rtx, 1);
    resend_at(e, 12 * MS, 9 * MS + MS / 2, a, 0, 1400);
    assert_int_equal(pull_all(e, 12 * MS, &rtx, &busy), 1);
    assert_int_equal(rtx, 0);
    assert_int_equal(busy, 1);
    resend_at(e, 13 * MS, 9 * MS + MS / 2, a, 0, 2800); /* [1400, 2800) is not fresh */
    homa_pkt_out out[64];
    assert_int_equal(homa_engine_pull(e, 13 * MS, out, 64), 1);
    struct homa_wire_pkt p;
    decode(&out[0], &p);
    assert_int_equal(p.u.data.offset, 1400);
    assert_int_equal(out[0].payload_len, 1400);
    homa_engine_pull_done(e);
    resend_at(e, 20 * MS, 19 * MS, a, 0, 1400);
    assert_int_equal(pull_all(e, 20 * MS, &rtx, &busy), 1);
    assert_int_equal(rtx, 1);
    homa_engine_destroy(e);
}

/* Runs the timer at t and returns the RESENDs it sent. */
static int resends_at(homa_engine *e, uint64_t t)
{
    int n = 0;
    homa_engine_timer(e, t);
    homa_pkt_out out[64];
    int k = homa_engine_pull(e, t, out, 64);
    for (int i = 0; i < k; i++)
        if (out[i].type == HOMA_PKT_RESEND) n++;
    if (k > 0) homa_engine_pull_done(e);
    return n;
}

/* Packets that waited 4 ms in our receive path before we read them say our
 * input is 4 ms behind: an answer to an RPC may be waiting there too, so
 * 4 ms of its silence are not the peer's.  The same RPC without that lag
 * asks after resend_ticks (5 ms); with it, once the lag has stopped
 * growing and begun to decay (9 ms). */
static void homa_engine_timer__receive_lag_is_not_silence(void **state)
{
    (void)state;
    homa_engine *plain = make(NULL), *lagged = make(NULL);
    homa_engine *both[2] = {plain, lagged};
    for (int i = 0; i < 2; i++) {
        send(both[i], 0, 100);
        int rtx, busy;
        assert_int_equal(pull_all(both[i], 0, &rtx, &busy), 1);
        homa_engine_timer(both[i], 0);
    }
    struct homa_wire_pkt f;
    memset(&f, 0, sizeof(f));
    f.type = HOMA_PKT_FREEZE;
    f.sport = 80;
    f.dport = PORT;
    f.sender_id = 12345;
    uint8_t buf[HOMA_MAX_HDR_LEN];
    size_t hl = homa_wire_encode(&f, buf);
    /* First RESEND of each engine (ms); packets read from 5 to 8 ms had
     * waited 4 ms. */
    uint64_t first[2] = {0, 0};
    for (uint64_t t = 1; t <= 30; t++) {
        if (t >= 5 && t <= 8) homa_engine_input_at(lagged, t * MS, (t - 4) * MS, &peer, buf, hl);
        for (int i = 0; i < 2; i++)
            if (resends_at(both[i], t * MS) > 0 && first[i] == 0) first[i] = t;
    }
    print_message("first RESEND: plain %lu ms, lagged %lu ms\n", (unsigned long)first[0],
                  (unsigned long)first[1]);
    assert_int_equal(first[0], 5); /* resend_ticks */
    /* 5 ms of silence less the 4 ms lag only at 9 ms (lag decayed to 3.5) */
    assert_int_equal(first[1], 9);
    homa_counters c;
    homa_engine_counters(lagged, &c);
    assert_true(c.input_stalls > 0);
    homa_engine_destroy(plain);
    homa_engine_destroy(lagged);
}

/* ---- on two engines wired back to back (tests/support/pair.c) ---- */

static uint32_t payload_1000(void *ctx, const homa_addr *addr)
{
    (void)ctx;
    (void)addr;
    return 1000;
}

/* Records the largest DATA packet each side sent. */
static int max_data_len(void *arg, int from, const struct pair_pkt *pk)
{
    size_t *max = arg;
    if (pk->type == HOMA_PKT_DATA && pk->len > max[from]) max[from] = pk->len;
    return 0;
}

/* ops.path_payload sets the packet size per peer: the client, told its
 * path to the server carries 1,000-byte payloads, sends no larger DATA;
 * the server (no hook) uses max_payload (1,400). */
static void homa_engine_output__packets_follow_path_payload(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    homa_engine_destroy(p.e[0]);
    homa_engine_ops ops = {.path_payload = payload_1000};
    assert_int_equal(homa_engine_create(NULL, &ops, &p.e[0]), 0);
    assert_int_equal(homa_engine_port_open(p.e[0], CPORT), 0);
    size_t max[2] = {0, 0};
    p.filter = max_data_len;
    p.filter_arg = max;
    echo_rpc(&p, 30000);
    assert_int_equal(max[0], HOMA_DATA_HDR_LEN + 1000);
    assert_int_equal(max[1], HOMA_DATA_HDR_LEN + 1400);
    pair_destroy(&p);
}

int main(void)
{
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)i;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_engine_pull__srpt_order),
        cmocka_unit_test(homa_engine_pull__srpt_order_across_buckets),
        cmocka_unit_test(homa_engine_pull__restarts_go_first_in_a_step),
        cmocka_unit_test(homa_engine_pull__retransmission_before_srpt),
        cmocka_unit_test(homa_engine_pull__unscheduled_limit_and_priorities),
        cmocka_unit_test(homa_engine_pull__control_first),
        cmocka_unit_test(homa_engine_pull__cutoffs_from_peer_change_priority),
        cmocka_unit_test(homa_engine_pull__pacer_holds_long_messages),
        cmocka_unit_test(homa_engine_pull__pacer_counts_link_overhead),
        cmocka_unit_test(homa_engine_pull__higher_class_first),
        cmocka_unit_test(homa_engine_pull__oldest_gets_a_share),
        cmocka_unit_test(homa_engine_pull__restarted_request_keeps_a_share),
        cmocka_unit_test(homa_engine_pull__zero_length_message),
        cmocka_unit_test(homa_engine_pull_done__defers_frees),
        cmocka_unit_test(homa_engine_input_at__resend_older_than_data_not_answered),
        cmocka_unit_test(homa_engine_input_at__resend_not_repeated_for_fresh_retransmission),
        cmocka_unit_test(homa_engine_timer__receive_lag_is_not_silence),
        cmocka_unit_test(homa_engine_output__packets_follow_path_payload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
