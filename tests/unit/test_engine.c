/* Engine unit tests: two engines wired back to back by tests/support/pair.c,
 * time advanced by hand.  Names follow function__case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
#include "support/pair.h"

#define CPORT 4000
#define SPORT 99
#define MS 1000000ull

static void fill(uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 7 + seed + (i >> 8));
}

static void setup_pair(struct pair *p, const homa_config *cfg)
{
    assert_int_equal(pair_init(p, cfg), 0);
    assert_int_equal(homa_engine_port_open(p->e[0], CPORT), 0);
    assert_int_equal(homa_engine_port_open(p->e[1], SPORT), 0);
}

/* Receives on engine `side`'s port (any message, or response `id`),
 * advancing time a tick at a time; fails the test after max_ticks.
 * Returns the ticks it took. */
static int recv_within(struct pair *p, int side, uint16_t port, uint64_t id, homa_msg *m,
                       int max_ticks)
{
    int ticks = 0;
    while (homa_engine_recv(p->e[side], port, HOMA_RECV_ANY, id, m) == HOMA_ERR_AGAIN) {
        pair_advance(p, MS);
        assert_true(++ticks <= max_ticks);
    }
    return ticks;
}

/* Runs one echo RPC of len bytes; returns 0 when the response matches. */
static void echo_rpc(struct pair *p, size_t len)
{
    uint8_t *req = malloc(len ? len : 1);
    fill(req, len, (unsigned)len);
    uint64_t id = 0;
    assert_int_equal(
        homa_engine_send_request(p->e[0], p->now, CPORT, &p->addr[1], SPORT, req, len, 42, &id), 0);
    assert_true(id != 0 && (id & 1) == 0);
    pair_settle(p);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p->e[1], SPORT, HOMA_RECV_REQUEST, 0, &m), 0);
    assert_true(m.is_request);
    assert_int_equal(m.id, id ^ 1);
    assert_int_equal(m.length, len);
    if (len) assert_memory_equal(m.data, req, len);
    assert_int_equal(homa_engine_send_reply(p->e[1], p->now, SPORT, &m.peer, m.peer_port, m.id,
                                            m.data, m.length),
                     0);
    homa_engine_release(p->e[1], &m);
    pair_settle(p);
    homa_msg r;
    assert_int_equal(homa_engine_recv(p->e[0], CPORT, HOMA_RECV_RESPONSE, 0, &r), 0);
    assert_int_equal(r.id, id);
    assert_int_equal(r.cookie, 42);
    assert_int_equal(r.error, 0);
    assert_int_equal(r.length, len);
    if (len) assert_memory_equal(r.data, req, len);
    homa_engine_release(p->e[0], &r);
    free(req);
}

static void homa_config_validate__defaults_ok(void **state)
{
    (void)state;
    homa_config c;
    homa_config_default(&c);
    const char *why;
    assert_int_equal(homa_config_validate(&c, &why), 0);
    c.num_priorities = 9;
    assert_int_equal(homa_config_validate(&c, &why), HOMA_ERR_INVAL);
    assert_non_null(why);
    homa_config_default(&c);
    c.timeout_ticks = c.resend_ticks;
    assert_int_equal(homa_config_validate(&c, NULL), HOMA_ERR_INVAL);
    homa_config_default(&c);
    c.num_priorities = 4; /* cutoffs at 4..7 must then be cleared */
    assert_int_equal(homa_config_validate(&c, NULL), HOMA_ERR_INVAL);
    homa_engine *e = NULL;
    assert_int_equal(homa_engine_create(&c, NULL, &e), HOMA_ERR_INVAL);
    assert_null(e);
}

static void homa_counter_name__all_named(void **state)
{
    (void)state;
    size_t n = homa_counter_count();
    assert_int_equal(n * sizeof(uint64_t), sizeof(homa_counters));
    for (size_t i = 0; i < n; i++) {
        assert_non_null(homa_counter_name(i));
        assert_non_null(homa_counter_desc(i));
    }
    assert_null(homa_counter_name(n));
    for (int r = 0; r < HOMA_DROP__COUNT; r++)
        assert_non_null(homa_drop_reason_name(r));
}

static void homa_engine_port_open__errors(void **state)
{
    (void)state;
    homa_engine *e;
    assert_int_equal(homa_engine_create(NULL, NULL, &e), 0);
    assert_int_equal(homa_engine_port_open(e, 0), HOMA_ERR_INVAL);
    assert_int_equal(homa_engine_port_open(e, 5), 0);
    assert_int_equal(homa_engine_port_open(e, 5), HOMA_ERR_PORT_IN_USE);
    assert_int_equal(homa_engine_port_close(e, 0, 6), HOMA_ERR_NO_PORT);
    homa_addr a = {{0}};
    uint64_t id;
    assert_int_equal(homa_engine_send_request(e, 0, 6, &a, 1, "x", 1, 0, &id), HOMA_ERR_NO_PORT);
    assert_int_equal(homa_engine_send_request(e, 0, 5, &a, 1, NULL, 5, 0, &id), HOMA_ERR_INVAL);
    assert_int_equal(homa_engine_send_request(e, 0, 5, &a, 1, "x", 1000001, 0, &id),
                     HOMA_ERR_MSGSIZE);
    homa_msg m;
    assert_int_equal(homa_engine_recv(e, 5, HOMA_RECV_ANY, 0, &m), HOMA_ERR_AGAIN);
    assert_int_equal(homa_engine_recv(e, 6, HOMA_RECV_ANY, 0, &m), HOMA_ERR_NO_PORT);
    assert_int_equal(homa_engine_recv(e, 5, HOMA_RECV_ANY, 12, &m), HOMA_ERR_NOT_FOUND);
    assert_int_equal(homa_engine_abort(e, 0, 5, 12), HOMA_ERR_NOT_FOUND);
    assert_int_equal(homa_engine_send_reply(e, 0, 5, &a, 1, 13, "x", 1), HOMA_ERR_NOT_FOUND);
    assert_int_equal(homa_engine_port_close(e, 0, 5), 0);
    homa_engine_destroy(e);
}

/* A port's live RPCs: the client's until its response is released, the
 * server's until the client acknowledges the reply (NEED_ACK -> ACK). */
static void homa_engine_port_rpcs__counts_until_acked(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    assert_int_equal(homa_engine_port_rpcs(p.e[0], 12345), HOMA_ERR_NO_PORT);
    assert_int_equal(homa_engine_port_rpcs(NULL, CPORT), HOMA_ERR_INVAL);
    assert_int_equal(homa_engine_port_rpcs(p.e[0], CPORT), 0);
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "abc", 3, 0, &id), 0);
    assert_int_equal(homa_engine_port_rpcs(p.e[0], CPORT), 1);
    pair_settle(&p);
    assert_int_equal(homa_engine_port_rpcs(p.e[1], SPORT), 1);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &m), 0);
    assert_int_equal(
        homa_engine_send_reply(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id, "d", 1), 0);
    homa_engine_release(p.e[1], &m);
    pair_settle(&p);
    homa_msg r;
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_RESPONSE, 0, &r), 0);
    assert_int_equal(homa_engine_port_rpcs(p.e[0], CPORT), 1); /* not released yet */
    homa_engine_release(p.e[0], &r);
    assert_int_equal(homa_engine_port_rpcs(p.e[0], CPORT), 0);
    /* the reply is not acknowledged yet: the server keeps it */
    assert_int_equal(homa_engine_port_rpcs(p.e[1], SPORT), 1);
    for (int i = 0; i < 10 && homa_engine_port_rpcs(p.e[1], SPORT) > 0; i++)
        pair_advance(&p, MS);
    assert_int_equal(homa_engine_port_rpcs(p.e[1], SPORT), 0);
    pair_destroy(&p);
}

/* Acks owed go out at once on request: 7 RPCs in flight together, all
 * answered, leave 7 acks owed (no later request to carry them); a flush
 * sends them in two ACK packets (5 + 2) and the server frees all 7 at
 * once instead of on its NEED_ACK; nothing is left to flush afterwards; a
 * port that is not open is refused. */
static void homa_engine_port_flush_acks__server_frees_at_once(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.need_ack_ticks = 1000; /* the server would not ask for a second */
    struct pair p;
    setup_pair(&p, &cfg);
    assert_int_equal(homa_engine_port_flush_acks(NULL, p.now, CPORT), HOMA_ERR_INVAL);
    assert_int_equal(homa_engine_port_flush_acks(p.e[0], p.now, 12345), HOMA_ERR_NO_PORT);
    assert_int_equal(homa_engine_port_flush_acks(p.e[0], p.now, CPORT), 0);
    uint64_t id;
    for (int i = 0; i < 7; i++)
        assert_int_equal(
            homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "abc", 3, 0, &id), 0);
    pair_settle(&p);
    homa_msg m;
    for (int i = 0; i < 7; i++) {
        assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &m), 0);
        assert_int_equal(
            homa_engine_send_reply(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id, "d", 1), 0);
        homa_engine_release(p.e[1], &m);
    }
    pair_settle(&p);
    for (int i = 0; i < 7; i++) {
        assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_RESPONSE, 0, &m), 0);
        homa_engine_release(p.e[0], &m);
    }
    pair_advance(&p, 5 * MS);
    assert_int_equal(homa_engine_port_rpcs(p.e[1], SPORT), 7);
    assert_int_equal(homa_engine_port_flush_acks(p.e[0], p.now, CPORT), 2);
    assert_int_equal(homa_engine_port_flush_acks(p.e[0], p.now, CPORT), 0);
    pair_settle(&p);
    assert_int_equal(homa_engine_port_rpcs(p.e[1], SPORT), 0);
    homa_counters c;
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.server_acked, 7);
    pair_destroy(&p);
}

/* Freed large buffers are reused for messages of about their size; small
 * or far-off sizes go to malloc; the cache stays within its bounds. */
static void homa_buf_get__reuses_close_fit(void **state)
{
    (void)state;
    homa_engine *e;
    assert_int_equal(homa_engine_create(NULL, NULL, &e), 0);
    uint32_t mb = 1u << 20;
    uint8_t *a = homa_buf_get(e, mb);
    assert_non_null(a);
    a[mb - 1] = 1;
    homa_buf_put(e, a, mb);
    assert_int_equal(e->bufcache_n, 1);
    /* much smaller: not this buffer */
    uint8_t *small = homa_buf_get(e, mb / 2);
    assert_ptr_not_equal(small, a);
    free(small);
    /* larger than the buffer: not it either */
    uint8_t *big = homa_buf_get(e, mb + 1);
    assert_ptr_not_equal(big, a);
    free(big);
    /* a close fit: reused */
    assert_ptr_equal(homa_buf_get(e, mb - 100), a);
    assert_int_equal(e->bufcache_n, 0);
    assert_int_equal(e->bufcache_bytes, 0);
    homa_buf_put(e, a, mb);
    /* small buffers are not kept */
    homa_buf_put(e, malloc(1000), 1000);
    assert_int_equal(e->bufcache_n, 1);
    /* bounded in slots and bytes; the oldest go first */
    for (int i = 0; i < 3 * HOMA_BUFCACHE_SLOTS; i++)
        homa_buf_put(e, malloc(3 * mb), 3 * mb);
    assert_true(e->bufcache_n <= HOMA_BUFCACHE_SLOTS);
    assert_true(e->bufcache_bytes <= HOMA_BUFCACHE_BYTES);
    for (uint32_t i = 0; i < e->bufcache_n; i++)
        assert_int_equal(e->bufcache[i].cap, 3 * mb);
    homa_engine_destroy(e); /* frees what is cached (ASan checks) */
}

/* Messages of the same length reuse one another's buffers: an echo of 1 MB
 * RPCs allocates once per side and length, then takes from the cache. */
static void homa_engine_send_request__large_buffers_recycled(void **state)
{
    (void)state;
    struct pair p;
    homa_config c;
    homa_config_default(&c);
    setup_pair(&p, &c);
    for (int i = 0; i < 4; i++)
        echo_rpc(&p, 500000);
    assert_true(p.e[0]->bufcache_n >= 1 && p.e[1]->bufcache_n >= 1);
    assert_true(p.e[0]->bufcache_bytes <= HOMA_BUFCACHE_BYTES);
    pair_destroy(&p);
}

/* queue stats: a long request is unsent and sendable at its sender; once
 * its unscheduled bytes arrive it waits for grants at the receiver. */
static void homa_engine_queue_stats__counts_both_sides(void **state)
{
    (void)state;
    struct pair p;
    homa_config c;
    homa_config_default(&c);
    setup_pair(&p, &c);
    homa_queue_stats st;
    homa_engine_queue_stats(p.e[0], &st);
    assert_int_equal(st.tx_msgs + st.tx_ready + st.rx_grantable + st.rx_grantable_peers, 0);
    size_t len = 900000;
    uint8_t *req = calloc(1, len);
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, req, len, 1, &id), 0);
    homa_engine_queue_stats(p.e[0], &st);
    assert_int_equal(st.tx_msgs, 1);
    assert_int_equal(st.tx_ready, 1);
    homa_addr peers[4];
    assert_int_equal(homa_engine_unsent_peers(p.e[0], peers, 4), 1);
    assert_memory_equal(&peers[0], &p.addr[1], sizeof(homa_addr));
    assert_int_equal(homa_engine_unsent_peers(p.e[0], peers, 0), 0);
    assert_int_equal(homa_engine_unsent_peers(p.e[1], peers, 4), 0);
    assert_int_equal(homa_engine_unsent_peers(NULL, peers, 4), 0);
    homa_engine_queue_stats(NULL, &st);
    assert_int_equal(st.tx_msgs, 0);
    homa_engine_queue_stats(p.e[0], NULL); /* ignored */
    /* the first packet reaches the receiver: grants needed from one sender */
    assert_true(pair_step(&p, 0) > 0);
    homa_engine_queue_stats(p.e[1], &st);
    assert_int_equal(st.rx_grantable, 1);
    assert_int_equal(st.rx_grantable_peers, 1);
    pair_settle(&p);
    homa_engine_queue_stats(p.e[0], &st);
    assert_int_equal(st.tx_msgs, 0);
    assert_int_equal(homa_engine_unsent_peers(p.e[0], peers, 4), 0);
    homa_engine_queue_stats(p.e[1], &st);
    assert_int_equal(st.rx_grantable, 0);
    free(req);
    pair_destroy(&p);
}

static void homa_engine_send_request__sizes(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    size_t sizes[] = {0, 1, 1399, 1400, 1401, 40000, 40001, 100000, 1000000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        echo_rpc(&p, sizes[i]);
    homa_counters c;
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.client_completed, 9);
    assert_int_equal(c.client_timeouts, 0);
    assert_int_equal(c.resend_out, 0);
    /* the server frees its RPCs once acked (acks ride on later requests or
     * answer NEED_ACK) */
    pair_advance(&p, 3 * MS);
    homa_counters s;
    homa_engine_counters(p.e[1], &s);
    assert_int_equal(s.rpcs_live, 0);
    assert_int_equal(s.server_acked, 9);
    assert_int_equal(s.rx_bytes_in_use, 0);
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.rpcs_live, 0);
    assert_int_equal(c.rx_bytes_in_use, 0);
    assert_int_equal(c.incoming_bytes, 0);
    assert_int_equal(s.incoming_bytes, 0);
    pair_destroy(&p);
}

static void homa_engine_send_request__large_when_max_raised(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.max_message_length = 64u << 20;
    cfg.max_payload = 60000;
    struct pair p;
    setup_pair(&p, &cfg);
    echo_rpc(&p, 10u << 20);
    echo_rpc(&p, 64u << 20);
    pair_destroy(&p);
}

/* Drops the n-th DATA packet from host `from`. */
struct drop_nth {
    int from;
    int n, seen;
    int type;
};
static int drop_nth_filter(void *arg, int from, const struct pair_pkt *pk)
{
    struct drop_nth *d = arg;
    if (from != d->from || pk->type != d->type) return 0;
    return d->seen++ == d->n;
}

/* Sends a 20,000 B request through `filter`, lets 6 ms of timers run and
 * checks that the request arrived whole. */
static void lossy_request(struct pair *p, int (*filter)(void *, int, const struct pair_pkt *),
                          void *arg)
{
    setup_pair(p, NULL);
    p->filter = filter;
    p->filter_arg = arg;
    uint8_t req[20000];
    fill(req, sizeof(req), 1);
    uint64_t id;
    assert_int_equal(homa_engine_send_request(p->e[0], p->now, CPORT, &p->addr[1], SPORT, req,
                                              sizeof(req), 0, &id),
                     0);
    pair_settle(p);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p->e[1], SPORT, HOMA_RECV_ANY, 0, &m), HOMA_ERR_AGAIN);
    for (int i = 0; i < 6; i++)
        pair_advance(p, MS);
    assert_int_equal(homa_engine_recv(p->e[1], SPORT, HOMA_RECV_ANY, 0, &m), 0);
    assert_memory_equal(m.data, req, sizeof(req));
    homa_engine_release(p->e[1], &m);
}

static void homa_engine_timer__resend_recovers_lost_data(void **state)
{
    (void)state;
    struct pair p;
    struct drop_nth d = {0, 3, 0, HOMA_PKT_DATA};
    lossy_request(&p, drop_nth_filter, &d);
    homa_counters c;
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.resend_out, 1);
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.retransmit_pkts, 1);
    pair_destroy(&p);
}

/* Loses the last DATA packet of the first transmission and records the
 * priority of every retransmitted DATA packet. */
struct tail_loss {
    int seen, last;
    int rtx_prio, rtx_pkts;
};
static int tail_loss_filter(void *arg, int from, const struct pair_pkt *pk)
{
    struct tail_loss *t = arg;
    if (from != 0 || pk->type != HOMA_PKT_DATA) return 0;
    struct homa_wire_pkt w;
    assert_int_equal(homa_wire_decode(pk->data, pk->len, &w), 0);
    if (w.u.data.retransmit) {
        t->rtx_prio = pk->priority;
        t->rtx_pkts++;
        return 0;
    }
    return t->seen++ == t->last;
}

/* After silence the missing data may be queued in the network behind
 * higher priorities, not lost: the RESEND asks for the highest level so
 * the answer gets through (the message's own unscheduled level here is 4). */
static void homa_engine_timer__silent_resend_at_top_priority(void **state)
{
    (void)state;
    struct pair p;
    struct tail_loss t = {0, 14, -1, 0}; /* 20,000 B: 15 packets */
    lossy_request(&p, tail_loss_filter, &t);
    assert_int_equal(t.seen, 15);
    assert_int_equal(t.rtx_pkts, 1);
    assert_int_equal(t.rtx_prio, 7);
    pair_destroy(&p);
}

/* Drops everything engine *(int *)arg sends (0 = client, 1 = server). */
static int client_side = 0, server_side = 1;
static int drop_all_from(void *arg, int from, const struct pair_pkt *pk)
{
    (void)pk;
    return from == *(const int *)arg;
}

static void homa_engine_timer__dead_server_times_out(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "hello", 5, 0, &id), 0);
    pair_settle(&p);
    /* the server dies: nothing it sends arrives any more */
    homa_engine_destroy(p.e[1]);
    homa_engine_create(NULL, NULL, &p.e[1]);
    p.filter = drop_all_from;
    p.filter_arg = &server_side;
    uint64_t start = p.now;
    homa_msg m;
    int ticks = 0;
    while (homa_engine_recv(p.e[0], CPORT, HOMA_RECV_ANY, 0, &m) == HOMA_ERR_AGAIN) {
        pair_advance(&p, MS);
        assert_true(++ticks <= 102);
    }
    assert_int_equal(m.error, HOMA_ERR_TIMEOUT);
    assert_int_equal(m.id, id);
    assert_true(p.now - start >= 100 * MS);
    assert_true(p.now - start <= 101 * MS);
    homa_engine_release(p.e[0], &m);
    homa_counters c;
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.client_timeouts, 1);
    assert_int_equal(c.rpcs_live, 0);
    pair_destroy(&p);
}

static void homa_engine_timer__local_stall_is_not_silence(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "hello", 5, 0, &id), 0);
    pair_settle(&p);
    homa_engine_timer(p.e[0], p.now);
    /* the client's timer does not run for 500 ms (its host was stalled):
     * when it runs again the server has not been silent that long */
    p.filter = drop_all_from;
    p.filter_arg = &server_side;
    p.now += 500 * MS;
    homa_engine_timer(p.e[0], p.now);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_ANY, 0, &m), HOMA_ERR_AGAIN);
    homa_counters c;
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.timer_stalls, 1);
    assert_int_equal(c.client_timeouts, 0);
    /* with the timer running on time, a server that stays silent is
     * declared dead after the usual timeout */
    int ticks = 0;
    while (homa_engine_recv(p.e[0], CPORT, HOMA_RECV_ANY, 0, &m) == HOMA_ERR_AGAIN) {
        p.now += MS;
        homa_engine_timer(p.e[0], p.now);
        pair_step(&p, 0);
        assert_true(++ticks <= 102);
    }
    assert_true(ticks >= 98);
    assert_int_equal(m.error, HOMA_ERR_TIMEOUT);
    homa_engine_release(p.e[0], &m);
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.timer_stalls, 1);
    pair_destroy(&p);
}

static void homa_engine_timer__prods_bounded_with_backlog(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    /* 200 requests wait at a server whose application is busy for a
     * second: the client's RESENDs and the server's BUSYs must not grow
     * with the backlog (one each per RPC every 5 ms would be 40,000), and
     * no RPC may time out, the server being alive. */
    enum { N = 200 };
    static uint8_t req[100];
    uint64_t ids[N];
    for (int i = 0; i < N; i++)
        assert_int_equal(homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, req,
                                                  sizeof(req), (uint64_t)i, &ids[i]),
                         0);
    pair_settle(&p);
    for (int t = 0; t < 1000; t++)
        pair_advance(&p, MS);
    homa_counters c0, c1;
    homa_engine_counters(p.e[0], &c0);
    homa_engine_counters(p.e[1], &c1);
    assert_int_equal(c0.client_timeouts, 0);
    assert_true(c0.resend_out > 0);
    assert_true(c0.resend_out <= 5000);
    assert_true(c1.busy_out <= 5000);
    /* now the server answers everything: all complete */
    homa_msg m;
    int served = 0;
    while (homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &m) == 0) {
        assert_int_equal(homa_engine_send_reply(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id,
                                                m.data, m.length),
                         0);
        homa_engine_release(p.e[1], &m);
        served++;
    }
    assert_int_equal(served, N);
    pair_settle(&p);
    int done = 0;
    while (homa_engine_recv(p.e[0], CPORT, HOMA_RECV_RESPONSE, 0, &m) == 0) {
        assert_int_equal(m.error, 0);
        homa_engine_release(p.e[0], &m);
        done++;
    }
    assert_int_equal(done, N);
    /* the server's RPCs wait for acks: NEED_ACKs are bounded too, and
     * once acknowledged everything is freed */
    for (int t = 0; t < 300; t++)
        pair_advance(&p, MS);
    homa_engine_counters(p.e[1], &c1);
    assert_int_equal(c1.rpcs_live, 0);
    assert_true(c1.need_ack_out <= 2000);
    pair_destroy(&p);
}

/* The timer's cost follows what is due, not what is live: 2,000 requests
 * wait at a server whose application is busy for a second.  Checking every
 * live RPC each tick (as before the timer wheel) would look at 4,000 per
 * tick; the wheel looks at those with a deadline or a turn for a prod. */
static void homa_engine_timer__cost_follows_due_rpcs(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    enum { N = 2000, TICKS = 1000 };
    static uint8_t req[100];
    for (int i = 0; i < N; i++)
        assert_int_equal(homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, req,
                                                  sizeof(req), (uint64_t)i, NULL),
                         0);
    pair_settle(&p);
    homa_counters a1, c0, c1;
    homa_engine_counters(p.e[1], &a1);
    uint64_t k0 = p.e[0]->timer_checks, k1 = p.e[1]->timer_checks;
    for (int t = 0; t < TICKS; t++)
        pair_advance(&p, MS);
    homa_engine_counters(p.e[0], &c0);
    homa_engine_counters(p.e[1], &c1);
    k0 = p.e[0]->timer_checks - k0;
    k1 = p.e[1]->timer_checks - k1;
    assert_int_equal(c0.rpcs_live, N);
    assert_int_equal(c0.client_timeouts, 0);
    /* requests waiting for the server's application need no timer: it
     * looks at one only after a packet about it (the client's prods) */
    print_message("server timer checks %llu, RESENDs in %llu\n", (unsigned long long)k1,
                  (unsigned long long)(c1.resend_in - a1.resend_in));
    assert_true(k1 <= c1.resend_in - a1.resend_in + N);
    /* the client's: a look a timeout (100 ticks) at most, and prods */
    uint64_t per_tick = k0 / TICKS;
    print_message("client timer checks per tick with %d waiting: %llu\n", N,
                  (unsigned long long)per_tick);
    assert_true(per_tick <= N / 40);
    pair_destroy(&p);
}

/* Captures the first DATA packet from the client to replay it later. */
struct capture {
    uint8_t data[2000];
    size_t len;
};
static int capture_filter(void *arg, int from, const struct pair_pkt *pk)
{
    struct capture *c = arg;
    if (from == 0 && pk->type == HOMA_PKT_DATA && c->len == 0) {
        memcpy(c->data, pk->data, pk->len);
        c->len = pk->len;
    }
    return 0;
}

/* A pair whose first client DATA packet is kept in *cap. */
static void setup_capturing_pair(struct pair *p, struct capture *cap)
{
    setup_pair(p, NULL);
    cap->len = 0;
    p->filter = capture_filter;
    p->filter_arg = cap;
}

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

/* Drops the client's DATA while *(int *)arg is set. */
static int drop_client_data(void *arg, int from, const struct pair_pkt *pk)
{
    return from == 0 && pk->type == HOMA_PKT_DATA && *(int *)arg;
}

/* n one-byte RPCs, each answered 10 ms after the server received it. */
static void slow_server_rpcs(struct pair *q, int n)
{
    for (int i = 0; i < n; i++) {
        uint64_t id;
        assert_int_equal(
            homa_engine_send_request(q->e[0], q->now, CPORT, &q->addr[1], SPORT, "q", 1, 0, &id),
            0);
        pair_settle(q);
        homa_msg m;
        assert_int_equal(homa_engine_recv(q->e[1], SPORT, HOMA_RECV_ANY, 0, &m), 0);
        for (int t = 0; t < 10; t++)
            pair_advance(q, MS);
        assert_int_equal(
            homa_engine_send_reply(q->e[1], q->now, SPORT, &m.peer, m.peer_port, m.id, "r", 1), 0);
        homa_engine_release(q->e[1], &m);
        pair_settle(q);
        homa_msg r;
        assert_int_equal(homa_engine_recv(q->e[0], CPORT, HOMA_RECV_ANY, id, &r), 0);
        assert_int_equal(r.error, 0);
        homa_engine_release(q->e[0], &r);
    }
}

/* A server that takes 10 ms to answer each request: once the client has
 * seen that, it no longer asks again (RESEND, answered BUSY) at 5 ms for
 * requests the server has, but a lost request is still found and
 * restarted, within a quarter of the timeout. */
static void homa_timer_run__first_resend_waits_for_slow_server(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    homa_counters c;
    slow_server_rpcs(&p, 8);
    homa_engine_counters(p.e[0], &c);
    uint64_t warm_resends = c.resend_out;
    slow_server_rpcs(&p, 16);
    homa_engine_counters(p.e[0], &c);
    /* the first requests drew RESENDs at 5 ms; the last 16 none */
    assert_true(warm_resends > 0);
    assert_int_equal(c.resend_out, warm_resends);
    /* a lost request: asked about after 2 x 10 ms, restarted, served */
    int lose = 1;
    p.filter = drop_client_data;
    p.filter_arg = &lose;
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "q", 1, 0, &id), 0);
    pair_settle(&p);
    lose = 0;
    homa_msg m;
    /* within timeout / 4 and a tick or two, not at 5 ticks */
    assert_true(recv_within(&p, 1, SPORT, 0, &m, 27) >= 15);
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.client_restarts, 1);
    homa_engine_release(p.e[1], &m);
    pair_destroy(&p);
}

/* Drops every packet of one client RPC (arg: struct lost_rpc) while
 * `on`, counting its RESENDs. */
struct lost_rpc {
    uint64_t id;
    int on, resends;
};

static int drop_one_rpc(void *arg, int from, const struct pair_pkt *pk)
{
    struct lost_rpc *l = arg;
    struct homa_wire_pkt w;
    if (from != 0 || homa_wire_decode(pk->data, pk->len, &w) != 0 || w.sender_id != l->id) return 0;
    if (w.type == HOMA_PKT_RESEND) l->resends++;
    return l->on;
}

/* A server whose input backlog holds what the client sends for longer and
 * longer, growing from nothing at `start` by half a millisecond per
 * millisecond up to `lag` (a packet reaches the server with the time it
 * left, as a kernel receive queue gives it); the server's packets reach
 * the client at once.  `drops` copies of the offset-0 DATA of
 * response `drop_id` are lost, and every BUSY about it. */
#define LAGQ_MAX 4096
struct lagq {
    struct pair *p;
    uint64_t start, lag;
    int head, tail;
    struct {
        uint64_t at, due;
        size_t len;
        uint8_t *buf;
    } q[LAGQ_MAX];
    uint64_t drop_id;
    int drops;
};

static int lagq_filter(void *arg, int from, const struct pair_pkt *pk)
{
    struct lagq *l = arg;
    if (from == 0) {
        assert_true(l->tail - l->head < LAGQ_MAX);
        int i = l->tail++ % LAGQ_MAX;
        uint64_t now = l->p->now, lag = (now - l->start) / 2;
        l->q[i].at = now;
        l->q[i].due = now + (lag < l->lag ? lag : l->lag);
        l->q[i].len = pk->len;
        l->q[i].buf = malloc(pk->len);
        memcpy(l->q[i].buf, pk->data, pk->len);
        return 1;
    }
    struct homa_wire_pkt w;
    if (!l->drop_id || homa_wire_decode(pk->data, pk->len, &w) != 0 || w.sender_id != l->drop_id)
        return 0;
    if (w.type == HOMA_PKT_BUSY) return 1;
    if (l->drops > 0 && w.type == HOMA_PKT_DATA && w.u.data.offset == 0) {
        l->drops--;
        return 1;
    }
    return 0;
}

/* One millisecond: the client's packets that have waited `lag` reach the
 * server, timers run, the server answers every request at once (a 3,000-byte
 * response to "L", one byte otherwise), the client takes its responses
 * (counting failures; *target set when response `target_id` comes). */
static void lagq_ms(struct lagq *l, uint64_t target_id, int *target, int *failed, int *done)
{
    struct pair *p = l->p;
    p->now += MS;
    while (l->head < l->tail && l->q[l->head % LAGQ_MAX].due <= p->now) {
        int i = l->head++ % LAGQ_MAX;
        homa_engine_input_at(p->e[1], p->now, l->q[i].at, &p->addr[0], l->q[i].buf, l->q[i].len);
        free(l->q[i].buf);
    }
    homa_engine_timer(p->e[0], p->now);
    homa_engine_timer(p->e[1], p->now);
    pair_settle(p);
    static uint8_t big[3000];
    homa_msg m;
    while (homa_engine_recv(p->e[1], SPORT, HOMA_RECV_REQUEST, 0, &m) == 0) {
        bool l3k = m.length == 1 && ((const uint8_t *)m.data)[0] == 'L';
        assert_int_equal(homa_engine_send_reply(p->e[1], p->now, SPORT, &m.peer, m.peer_port, m.id,
                                                l3k ? big : (const uint8_t *)"r",
                                                l3k ? sizeof(big) : 1),
                         0);
        homa_engine_release(p->e[1], &m);
    }
    pair_settle(p);
    while (homa_engine_recv(p->e[0], CPORT, HOMA_RECV_RESPONSE, 0, &m) == 0) {
        if (m.error)
            (*failed)++;
        else
            (*done)++;
        if (m.id == target_id) *target = m.error ? -1 : 1;
        homa_engine_release(p->e[0], &m);
    }
}

/* A live server 250 ms behind on its input (2.5 timeouts), answering a
 * steady stream of requests, loses the first packet of one response, then
 * the first copy it resends, and every BUSY about it.  The client asks at
 * the RESEND interval but counts a round of asks only once per answer
 * time of that server (learned from its late BUSYs about other requests),
 * so the response is completed (about 750 ms after the request left: two
 * 250 ms answer times and the backlog the request itself waited in), and
 * not given up as "asked 16 times, nothing new" 100 ms after its gap. */
static void homa_timer_run__asks_counted_per_answer_time(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    struct lagq *l = calloc(1, sizeof(*l));
    l->p = &p;
    l->start = p.now;
    l->lag = 250 * MS;
    p.filter = lagq_filter;
    p.filter_arg = l;
    int target = 0, failed = 0, done = 0, sent = 0;
    uint64_t id, target_id = 0;
    /* 1.6 s of background requests, one every 2 ms; the target at 800 ms,
     * when the backlog has held 250 ms for 300 ms */
    uint64_t t_sent = 0;
    for (int t = 0; t < 2000 && target == 0; t++) {
        if (t < 1600 && t % 2 == 0) {
            assert_int_equal(
                homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "b", 1, 0, &id),
                0);
            sent++;
        }
        if (t == 800) {
            assert_int_equal(homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "L",
                                                      1, 0, &target_id),
                             0);
            l->drop_id = target_id ^ 1;
            l->drops = 2;
            t_sent = p.now;
        }
        lagq_ms(l, target_id, &target, &failed, &done);
    }
    /* the target's response came whole, after the two losses */
    assert_int_equal(target, 1);
    assert_int_equal(l->drops, 0);
    assert_true(p.now - t_sent >= 700 * MS);
    /* and nothing else failed */
    for (int t = 0; t < 1000 && done < sent; t++)
        lagq_ms(l, target_id, &target, &failed, &done);
    assert_int_equal(failed, 0);
    assert_int_equal(done, sent);
    homa_counters c;
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.client_timeouts, 0);
    p.filter = NULL;
    while (l->head < l->tail)
        free(l->q[l->head++ % LAGQ_MAX].buf);
    free(l);
    pair_destroy(&p);
}

/* A server that takes 10 ms to answer: once the client knows it, a request
 * that goes unanswered while the server's port is heard (it answers the
 * client's prods about another request it holds) is asked about (RESEND,
 * recovery) every 2 x 10 ms, not every 5 ms: a server that is behind has
 * it in its backlog.  The request and its first RESENDs are lost here;
 * once the path is back it is restarted and served. */
static void homa_timer_run__recovery_resends_spaced_for_slow_server(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    slow_server_rpcs(&p, 16);
    /* A request the server holds (its port keeps answering BUSY) ... */
    uint64_t held_id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "h", 1, 0, &held_id), 0);
    pair_settle(&p);
    homa_msg held;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_ANY, 0, &held), 0);
    /* ... and one lost, with its RESENDs, for 70 ms. */
    struct lost_rpc lost = {.on = 1};
    p.filter = drop_one_rpc;
    p.filter_arg = &lost;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "q", 1, 0, &lost.id), 0);
    for (int t = 0; t < 70; t++)
        pair_advance(&p, MS);
    /* at about 20, 40 and 60 ms (at 5-ms intervals after the first: 11) */
    assert_true(lost.resends >= 2);
    assert_true(lost.resends <= 4);
    lost.on = 0;
    homa_msg m;
    assert_true(recv_within(&p, 1, SPORT, 0, &m, 30) >= 0);
    assert_int_equal(m.id, lost.id ^ 1);
    homa_engine_release(p.e[1], &m);
    homa_engine_release(p.e[1], &held);
    homa_counters c;
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.client_timeouts, 0);
    pair_destroy(&p);
}

/* The same server holding a request it confirmed (its BUSY answers the
 * first RESEND): the client's liveness prods come no more often than the
 * server usually answers either, while its port is heard (one every 5 ms
 * only fed a backlog: W2 at 0.20 Gb/s on loopback drew 0.98 RESENDs and
 * 0.64 BUSYs per RPC without a single loss). */
static void homa_timer_run__prods_spaced_for_slow_server(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    slow_server_rpcs(&p, 16);
    homa_counters c;
    homa_engine_counters(p.e[1], &c);
    uint64_t busy0 = c.busy_out;
    struct lost_rpc held = {.on = 0};
    p.filter = drop_one_rpc; /* counts its RESENDs, drops nothing */
    p.filter_arg = &held;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "h", 1, 0, &held.id), 0);
    pair_settle(&p);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_ANY, 0, &m), 0);
    for (int t = 0; t < 90; t++)
        pair_advance(&p, MS);
    /* at about 20, 40, 60 and 80 ms (at 5-ms intervals after the first: 15) */
    assert_true(held.resends >= 3);
    assert_true(held.resends <= 5);
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.busy_out - busy0, (uint64_t)held.resends);
    assert_int_equal(
        homa_engine_send_reply(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id, "r", 1), 0);
    homa_engine_release(p.e[1], &m);
    homa_msg r;
    assert_true(recv_within(&p, 0, CPORT, held.id, &r, 5) >= 0);
    assert_int_equal(r.error, 0);
    homa_engine_release(p.e[0], &r);
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.client_timeouts, 0);
    pair_destroy(&p);
}

/* Drops every DATA packet from host *(int *)arg. */
static int drop_data_from(void *arg, int from, const struct pair_pkt *pk)
{
    return from == *(const int *)arg && pk->type == HOMA_PKT_DATA;
}

/* A path that loses every copy of the request while the server answers
 * each RESEND with RPC_UNKNOWN: the client restarts again and again, and
 * gives up only after timeout_ticks (here 1 s), not after a number of
 * restarts (16 of them took 80 ms, which failed live servers behind a
 * lossy path long before their timeout). */
static void homa_engine_timer__unknowns_fail_only_after_timeout(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.timeout_ticks = 1000;
    struct pair p;
    setup_pair(&p, &cfg);
    p.filter = drop_data_from;
    p.filter_arg = &client_side;
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "abc", 3, 0, &id), 0);
    pair_settle(&p);
    homa_msg m;
    homa_counters c;
    for (int t = 0; t < 500; t++)
        pair_advance(&p, MS);
    homa_engine_counters(p.e[0], &c);
    assert_true(c.client_restarts >= 16);
    assert_int_equal(c.client_timeouts, 0);
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_RESPONSE, id, &m), HOMA_ERR_AGAIN);
    for (int t = 0; t < 520; t++)
        pair_advance(&p, MS);
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.client_timeouts, 1);
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_RESPONSE, id, &m), 0);
    assert_int_equal(m.error, HOMA_ERR_TIMEOUT);
    homa_engine_release(p.e[0], &m);
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

/* The start of the tombstone tests: a request reaches the server
 * application, which answers with a response that needs grants; the
 * client's grants never arrive (everything it sends is dropped), and after
 * 102 ms of ticks the server gives up on it.  cap holds the request's
 * first packet. */
static void server_times_out_silent_client(struct pair *p, struct capture *cap)
{
    setup_capturing_pair(p, cap);
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p->e[0], p->now, CPORT, &p->addr[1], SPORT, "abc", 3, 0, &id), 0);
    pair_settle(p);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p->e[1], SPORT, HOMA_RECV_REQUEST, 0, &m), 0);
    static uint8_t big[200000];
    p->filter = drop_all_from;
    p->filter_arg = &client_side;
    assert_int_equal(homa_engine_send_reply(p->e[1], p->now, SPORT, &m.peer, m.peer_port, m.id, big,
                                            sizeof(big)),
                     0);
    homa_engine_release(p->e[1], &m);
    pair_step(p, 1);
    for (int t = 0; t < 102; t++) {
        p->now += MS;
        homa_engine_timer(p->e[1], p->now);
        pair_step(p, 1);
    }
    homa_counters c;
    homa_engine_counters(p->e[1], &c);
    assert_int_equal(c.server_timeouts, 1);
    assert_true(cap->len > 0);
}

/* A server that gives up on a silent client after the request reached the
 * application leaves a tombstone: if the client comes back and restarts
 * the request (same id), it is dropped as completed, never served twice;
 * the client then fails with a timeout instead. */
static void homa_engine_timer__server_timeout_leaves_tombstone(void **state)
{
    (void)state;
    struct pair p;
    struct capture cap;
    server_times_out_silent_client(&p, &cap);
    homa_counters c;
    homa_engine_counters(p.e[1], &c);
    homa_msg m;
    assert_int_equal(c.rpcs_live, 0);
    /* the request's first packet again, as after a client restart */
    homa_engine_input(p.e[1], p.now, &p.addr[0], cap.data, cap.len);
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &m), HOMA_ERR_AGAIN);
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.drop_completed, 1);
    assert_int_equal(c.server_requests, 1);
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

static void homa_engine_abort__frees_and_server_cleans_up(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "abc", 3, 0, &id), 0);
    pair_settle(&p);
    assert_int_equal(homa_engine_abort(p.e[0], p.now, CPORT, id), 0);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_ANY, id, &m), HOMA_ERR_NOT_FOUND);
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_ANY, 0, &m), 0);
    assert_int_equal(
        homa_engine_send_reply(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id, "x", 1), 0);
    assert_int_equal(
        homa_engine_send_reply(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id, "x", 1),
        HOMA_ERR_STATE);
    homa_engine_release(p.e[1], &m);
    pair_settle(&p);
    pair_advance(&p, 3 * MS); /* NEED_ACK for an unknown id is acked anyway */
    homa_counters c;
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.rpcs_live, 0);
    pair_destroy(&p);
}

/* Records the priorities of the client's DATA packets per request (by
 * sender id), first transmissions and retransmissions apart, and drops the
 * last packet of each request's first transmission so that recovery runs. */
struct prio_seen {
    uint64_t id[2];
    uint32_t length;
    int min[2][2], max[2][2], pkts[2][2]; /* [request][retransmit] */
    uint32_t dropped[2];
};
static int prio_filter(void *arg, int from, const struct pair_pkt *pk)
{
    struct prio_seen *s = arg;
    if (from != 0 || pk->type != HOMA_PKT_DATA) return 0;
    struct homa_wire_pkt w;
    assert_int_equal(homa_wire_decode(pk->data, pk->len, &w), 0);
    int r = w.sender_id == s->id[0] ? 0 : w.sender_id == s->id[1] ? 1 : -1;
    if (r < 0) return 0;
    int x = w.u.data.retransmit ? 1 : 0;
    if (s->pkts[r][x]++ == 0 || pk->priority < s->min[r][x]) s->min[r][x] = pk->priority;
    if (pk->priority > s->max[r][x]) s->max[r][x] = pk->priority;
    if (!x && w.u.data.offset + w.u.data.payload_len == s->length && !s->dropped[r]) {
        s->dropped[r] = 1;
        return 1;
    }
    return 0;
}

/* A request limited to levels 1..2 sends every DATA packet there: its
 * unscheduled bytes (level 4 by the cutoffs), its scheduled ones (granted
 * at level 0 with nothing else incoming) and the retransmission after
 * silence (level 7) are moved into the range; the same request without the
 * limit shows the levels it would have used. */
static void homa_engine_request_priority__limits_data_packets(void **state)
{
    (void)state;
    struct pair p;
    struct prio_seen s;
    memset(&s, 0, sizeof(s));
    setup_pair(&p, NULL);
    p.filter = prio_filter;
    p.filter_arg = &s;
    static uint8_t req[200000];
    fill(req, sizeof(req), 3);
    s.length = sizeof(req);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, req,
                                                  sizeof(req), 0, &s.id[r]),
                         0);
        if (r == 0) assert_int_equal(homa_engine_request_priority(p.e[0], CPORT, s.id[r], 1, 2), 0);
        pair_settle(&p);
        homa_msg m;
        recv_within(&p, 1, SPORT, 0, &m, 20);
        assert_int_equal(m.length, sizeof(req));
        assert_memory_equal(m.data, req, sizeof(req));
        assert_int_equal(
            homa_engine_send_reply(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id, "ok", 2), 0);
        homa_engine_release(p.e[1], &m);
        recv_within(&p, 0, CPORT, s.id[r], &m, 20);
        assert_int_equal(m.error, 0);
        homa_engine_release(p.e[0], &m);
    }
    for (int r = 0; r < 2; r++) {
        assert_int_equal(s.dropped[r], 1);
        assert_true(s.pkts[r][0] > 100);
        assert_true(s.pkts[r][1] >= 1);
    }
    /* limited: 1..2 and both ends used */
    assert_int_equal(s.min[0][0], 1);
    assert_int_equal(s.max[0][0], 2);
    assert_int_equal(s.min[0][1], 2);
    assert_int_equal(s.max[0][1], 2);
    /* unlimited: outside 1..2 on both sides */
    assert_int_equal(s.min[1][0], 0);
    assert_true(s.max[1][0] >= 3);
    assert_int_equal(s.max[1][1], 7);
    pair_destroy(&p);
}

static void homa_engine_request_priority__errors(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    uint64_t id;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "abc", 3, 0, &id), 0);
    homa_engine *e = p.e[0];
    assert_int_equal(homa_engine_request_priority(NULL, CPORT, id, 0, 0), HOMA_ERR_INVAL);
    assert_int_equal(homa_engine_request_priority(e, CPORT, id, -1, 3), HOMA_ERR_INVAL);
    assert_int_equal(homa_engine_request_priority(e, CPORT, id, 3, 2), HOMA_ERR_INVAL);
    assert_int_equal(homa_engine_request_priority(e, CPORT, id, 0, 8), HOMA_ERR_INVAL);
    assert_int_equal(homa_engine_request_priority(e, CPORT + 1, id, 0, 7), HOMA_ERR_NO_PORT);
    assert_int_equal(homa_engine_request_priority(e, CPORT, id + 2, 0, 7), HOMA_ERR_NOT_FOUND);
    assert_int_equal(homa_engine_request_priority(e, CPORT, id | 1, 0, 7), HOMA_ERR_NOT_FOUND);
    assert_int_equal(homa_engine_request_priority(e, CPORT, id, 7, 7), 0);
    pair_destroy(&p);
    /* the range is checked against the configured levels */
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.num_priorities = 4;
    cfg.unsched_cutoffs[3] = 1000000;
    for (int i = 4; i < 8; i++)
        cfg.unsched_cutoffs[i] = 0;
    assert_int_equal(homa_config_validate(&cfg, NULL), 0);
    setup_pair(&p, &cfg);
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "abc", 3, 0, &id), 0);
    assert_int_equal(homa_engine_request_priority(p.e[0], CPORT, id, 0, 4), HOMA_ERR_INVAL);
    assert_int_equal(homa_engine_request_priority(p.e[0], CPORT, id, 0, 3), 0);
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

static void homa_engine_recv__flags_and_id(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    /* both engines use one port each; the server also sends a request back */
    assert_int_equal(homa_engine_port_open(p.e[1], CPORT), 0);
    uint64_t id1, id2;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "a", 1, 1, &id1), 0);
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "b", 1, 2, &id2), 0);
    pair_settle(&p);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_RESPONSE, 0, &m), HOMA_ERR_AGAIN);
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_ANY, id2, &m), HOMA_ERR_AGAIN);
    homa_msg a, b;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &a), 0);
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &b), 0);
    assert_int_equal(
        homa_engine_send_reply(p.e[1], p.now, SPORT, &a.peer, a.peer_port, a.id, "A", 1), 0);
    assert_int_equal(
        homa_engine_send_reply(p.e[1], p.now, SPORT, &b.peer, b.peer_port, b.id, "B", 1), 0);
    homa_engine_release(p.e[1], &a);
    homa_engine_release(p.e[1], &b);
    pair_settle(&p);
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_ANY, id2, &m), 0);
    assert_int_equal(m.cookie, 2);
    assert_int_equal(m.data[0], 'B');
    homa_engine_release(p.e[0], &m);
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_RESPONSE, 0, &m), 0);
    assert_int_equal(m.id, id1);
    homa_engine_release(p.e[0], &m);
    pair_destroy(&p);
}

static void homa_engine_port_close__messages_stay_valid_until_release(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    uint64_t id;
    uint8_t buf[3000];
    fill(buf, sizeof(buf), 9);
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, buf, sizeof(buf), 0, &id),
        0);
    pair_settle(&p);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_ANY, 0, &m), 0);
    assert_int_equal(homa_engine_port_close(p.e[1], p.now, SPORT), 0);
    assert_memory_equal(m.data, buf, sizeof(buf));
    homa_engine_release(p.e[1], &m);
    pair_destroy(&p);
}

static void homa_engine_msg_take__zero_copy_echo(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    size_t len = 50000;
    uint8_t *req = malloc(len);
    fill(req, len, 3);
    uint8_t *copy = malloc(len);
    memcpy(copy, req, len);
    uint64_t id;
    /* the engine adopts req: no copy, freed by the engine */
    assert_int_equal(
        homa_engine_send_request_owned(p.e[0], p.now, CPORT, &p.addr[1], SPORT, req, len, 0, &id),
        0);
    pair_settle(&p);
    homa_msg m;
    assert_int_equal(homa_engine_recv(p.e[1], SPORT, HOMA_RECV_REQUEST, 0, &m), 0);
    const uint8_t *data = m.data;
    uint8_t *buf = homa_engine_msg_take(p.e[1], &m);
    assert_ptr_equal(buf, data);
    assert_null(m.data);
    assert_null(homa_engine_msg_take(p.e[1], &m));
    homa_counters c;
    homa_engine_counters(p.e[1], &c);
    assert_int_equal(c.rx_bytes_in_use, 0);
    /* echo the very same buffer back */
    assert_int_equal(homa_engine_send_reply_owned(p.e[1], p.now, SPORT, &m.peer, m.peer_port, m.id,
                                                  buf, m.length),
                     0);
    homa_engine_release(p.e[1], &m);
    pair_settle(&p);
    homa_msg r;
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_RESPONSE, id, &r), 0);
    assert_int_equal(r.length, len);
    assert_memory_equal(r.data, copy, len);
    homa_engine_release(p.e[0], &r);
    /* a failed owned send leaves ownership with the caller */
    uint8_t *keep = malloc(10);
    assert_int_equal(
        homa_engine_send_request_owned(p.e[0], p.now, 999, &p.addr[1], SPORT, keep, 10, 0, &id),
        HOMA_ERR_NO_PORT);
    free(keep);
    free(copy);
    pair_destroy(&p);
}

/* ---------- direct receive (homa_engine_place_*) ---------- */

/* Encodes a DATA packet of the request `id` (even, the client's id) from
 * CPORT to SPORT into buf; returns its length. */
static size_t data_pkt(uint8_t *buf, uint64_t id, uint32_t msg_len, uint32_t offset,
                       const uint8_t *payload, uint32_t plen)
{
    struct homa_wire_pkt pkt;
    memset(&pkt, 0, sizeof(pkt));
    pkt.type = HOMA_PKT_DATA;
    pkt.sport = CPORT;
    pkt.dport = SPORT;
    pkt.sender_id = id;
    pkt.u.data.message_length = msg_len;
    pkt.u.data.incoming = msg_len;
    pkt.u.data.offset = offset;
    size_t h = homa_wire_encode(&pkt, buf);
    if (plen) memcpy(buf + h, payload, plen);
    return h + plen;
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

/* Data that trickles in (queued in the network behind higher priorities)
 * while we grant nothing: the sender has sent all it may and would hear
 * nothing from us, so we tell it we are alive, once per resend interval. */
static void homa_engine_timer__trickle_keeps_sender_alive(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    homa_engine *e = p.e[1];
    static uint8_t payload[1400];
    uint8_t pkt[HOMA_MAX_HDR_LEN + sizeof(payload)];
    int busy = 0, resend = 0;
    for (int t = 0; t < 30; t++) {
        p.now += MS;
        size_t len = data_pkt(pkt, 2, 100 * 1400, (uint32_t)t * 1400, payload, 1400);
        assert_int_equal(homa_engine_input(e, p.now, &p.addr[0], pkt, len), 0);
        homa_engine_timer(e, p.now);
        homa_pkt_out out[16];
        int n = homa_engine_pull(e, p.now, out, 16);
        for (int i = 0; i < n; i++) {
            busy += out[i].type == HOMA_PKT_BUSY;
            resend += out[i].type == HOMA_PKT_RESEND;
        }
        homa_engine_pull_done(e);
    }
    assert_int_equal(resend, 0);
    assert_true(busy >= 5 && busy <= 6);
    pair_destroy(&p);
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

static int drop_all(void *arg, int from, const struct pair_pkt *pk)
{
    (void)arg;
    (void)from;
    (void)pk;
    return 1;
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

/* ICMP unreachable reported by the driver: the client RPCs to that peer
 * (and port) fail at once with HOMA_ERR_UNREACHABLE. */
static void homa_engine_peer_unreachable__fails_client_rpcs(void **state)
{
    (void)state;
    struct pair p;
    setup_pair(&p, NULL);
    p.filter = drop_all;
    uint64_t a = 0, b = 0;
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT, "a", 1, 1, &a), 0);
    assert_int_equal(
        homa_engine_send_request(p.e[0], p.now, CPORT, &p.addr[1], SPORT + 1, "b", 1, 2, &b), 0);
    pair_settle(&p);
    homa_msg r;
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_RESPONSE, 0, &r), HOMA_ERR_AGAIN);
    /* Another host, or another port of it: nothing fails. */
    assert_int_equal(homa_engine_peer_unreachable(p.e[0], p.now, &p.addr[0], 0), 0);
    assert_int_equal(homa_engine_peer_unreachable(p.e[0], p.now, &p.addr[1], SPORT + 2), 0);
    /* Port unreachable: only the RPC to that port. */
    assert_int_equal(homa_engine_peer_unreachable(p.e[0], p.now, &p.addr[1], SPORT), 1);
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_RESPONSE, 0, &r), 0);
    assert_int_equal(r.id, a);
    assert_int_equal(r.error, HOMA_ERR_UNREACHABLE);
    homa_engine_release(p.e[0], &r);
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_RESPONSE, 0, &r), HOMA_ERR_AGAIN);
    /* Port 0 (protocol unreachable): every RPC to the host. */
    assert_int_equal(homa_engine_peer_unreachable(p.e[0], p.now, &p.addr[1], 0), 1);
    assert_int_equal(homa_engine_recv(p.e[0], CPORT, HOMA_RECV_RESPONSE, 0, &r), 0);
    assert_int_equal(r.id, b);
    assert_int_equal(r.error, HOMA_ERR_UNREACHABLE);
    homa_engine_release(p.e[0], &r);
    assert_int_equal(homa_engine_peer_unreachable(NULL, 0, &p.addr[1], 0), HOMA_ERR_INVAL);
    homa_counters c;
    homa_engine_counters(p.e[0], &c);
    assert_int_equal(c.rpcs_live, 0);
    pair_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_config_validate__defaults_ok),
        cmocka_unit_test(homa_engine_input__ack_without_records_ends_named_rpc),
        cmocka_unit_test(homa_engine_peer_unreachable__fails_client_rpcs),
        cmocka_unit_test(homa_counter_name__all_named),
        cmocka_unit_test(homa_engine_port_open__errors),
        cmocka_unit_test(homa_engine_port_rpcs__counts_until_acked),
        cmocka_unit_test(homa_engine_port_flush_acks__server_frees_at_once),
        cmocka_unit_test(homa_buf_get__reuses_close_fit),
        cmocka_unit_test(homa_engine_send_request__large_buffers_recycled),
        cmocka_unit_test(homa_engine_queue_stats__counts_both_sides),
        cmocka_unit_test(homa_engine_send_request__sizes),
        cmocka_unit_test(homa_engine_send_request__large_when_max_raised),
        cmocka_unit_test(homa_engine_timer__resend_recovers_lost_data),
        cmocka_unit_test(homa_engine_timer__dead_server_times_out),
        cmocka_unit_test(homa_engine_timer__local_stall_is_not_silence),
        cmocka_unit_test(homa_engine_timer__prods_bounded_with_backlog),
        cmocka_unit_test(homa_engine_timer__cost_follows_due_rpcs),
        cmocka_unit_test(homa_engine_timer__silent_resend_at_top_priority),
        cmocka_unit_test(homa_engine_timer__server_timeout_leaves_tombstone),
        cmocka_unit_test(homa_engine_input__restarted_request_keeps_tombstone),
        cmocka_unit_test(homa_engine_timer__trickle_keeps_sender_alive),
        cmocka_unit_test(homa_engine_input__duplicate_request_after_ack_not_redelivered),
        cmocka_unit_test(homa_engine_input__rpc_unknown_restarts_request),
        cmocka_unit_test(homa_timer_run__first_resend_waits_for_slow_server),
        cmocka_unit_test(homa_timer_run__recovery_resends_spaced_for_slow_server),
        cmocka_unit_test(homa_timer_run__prods_spaced_for_slow_server),
        cmocka_unit_test(homa_timer_run__asks_counted_per_answer_time),
        cmocka_unit_test(homa_engine_input__restart_uses_current_cutoffs),
        cmocka_unit_test(homa_engine_timer__unknowns_fail_only_after_timeout),
        cmocka_unit_test(homa_engine_input__rpc_cap_is_not_death),
        cmocka_unit_test(homa_engine_input__rpc_cap_of_stuck_server_fails),
        cmocka_unit_test(homa_engine_input__rpc_cap_of_own_requests_fails),
        cmocka_unit_test(homa_engine_output__packets_follow_path_payload),
        cmocka_unit_test(homa_engine_abort__frees_and_server_cleans_up),
        cmocka_unit_test(homa_engine_request_priority__limits_data_packets),
        cmocka_unit_test(homa_engine_request_priority__errors),
        cmocka_unit_test(homa_engine_input__memory_cap_makes_new_requests_wait),
        cmocka_unit_test(homa_engine_input__memory_waiters_fifo_and_dead_client),
        cmocka_unit_test(homa_engine_input__request_above_memory_cap_fails),
        cmocka_unit_test(homa_engine_input__memory_cap_makes_responses_wait),
        cmocka_unit_test(homa_engine_input__response_waiting_on_held_memory_fails),
        cmocka_unit_test(homa_engine_input__waiting_response_not_resent),
        cmocka_unit_test(homa_engine_recv__flags_and_id),
        cmocka_unit_test(homa_engine_port_close__messages_stay_valid_until_release),
        cmocka_unit_test(homa_engine_msg_take__zero_copy_echo),
        cmocka_unit_test(homa_engine_place__echo_sizes_in_place),
        cmocka_unit_test(homa_engine_place__loss_recovery_in_place),
        cmocka_unit_test(homa_engine_place__refuses_bad_and_received_ranges),
        cmocka_unit_test(homa_engine_place__end_checks_the_packet_read),
        cmocka_unit_test(homa_engine_place__input_overlapping_a_placement_dropped),
        cmocka_unit_test(homa_engine_place__rpc_freed_during_placement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
