/* Unit tests for src/core/timer.c: loss recovery, liveness prods and timeouts, on two
 * engines wired back to back (tests/support/pair.c), time advanced by hand.  Names follow
 * function__case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
#include "support/engine_test.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_engine_timer__resend_recovers_lost_data),
        cmocka_unit_test(homa_engine_timer__dead_server_times_out),
        cmocka_unit_test(homa_engine_timer__local_stall_is_not_silence),
        cmocka_unit_test(homa_engine_timer__prods_bounded_with_backlog),
        cmocka_unit_test(homa_engine_timer__cost_follows_due_rpcs),
        cmocka_unit_test(homa_engine_timer__silent_resend_at_top_priority),
        cmocka_unit_test(homa_engine_timer__server_timeout_leaves_tombstone),
        cmocka_unit_test(homa_engine_timer__trickle_keeps_sender_alive),
        cmocka_unit_test(homa_timer_run__first_resend_waits_for_slow_server),
        cmocka_unit_test(homa_timer_run__recovery_resends_spaced_for_slow_server),
        cmocka_unit_test(homa_timer_run__prods_spaced_for_slow_server),
        cmocka_unit_test(homa_timer_run__asks_counted_per_answer_time),
        cmocka_unit_test(homa_engine_timer__unknowns_fail_only_after_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
