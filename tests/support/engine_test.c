/* Helpers shared by the engine unit tests (engine_test.h). */
#include "support/engine_test.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"

void fill(uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 7 + seed + (i >> 8));
}

void setup_pair(struct pair *p, const homa_config *cfg)
{
    assert_int_equal(pair_init(p, cfg), 0);
    assert_int_equal(homa_engine_port_open(p->e[0], CPORT), 0);
    assert_int_equal(homa_engine_port_open(p->e[1], SPORT), 0);
}

/* Receives on engine `side`'s port (any message, or response `id`),
 * advancing time a tick at a time; fails the test after max_ticks.
 * Returns the ticks it took. */
int recv_within(struct pair *p, int side, uint16_t port, uint64_t id, homa_msg *m, int max_ticks)
{
    int ticks = 0;
    while (homa_engine_recv(p->e[side], port, HOMA_RECV_ANY, id, m) == HOMA_ERR_AGAIN) {
        pair_advance(p, MS);
        assert_true(++ticks <= max_ticks);
    }
    return ticks;
}

/* Runs one echo RPC of len bytes; returns 0 when the response matches. */
void echo_rpc(struct pair *p, size_t len)
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

int drop_nth_filter(void *arg, int from, const struct pair_pkt *pk)
{
    struct drop_nth *d = arg;
    if (from != d->from || pk->type != d->type) return 0;
    return d->seen++ == d->n;
}

int client_side = 0, server_side = 1;

int drop_all_from(void *arg, int from, const struct pair_pkt *pk)
{
    (void)pk;
    return from == *(const int *)arg;
}

int capture_filter(void *arg, int from, const struct pair_pkt *pk)
{
    struct capture *c = arg;
    if (from == 0 && pk->type == HOMA_PKT_DATA && c->len == 0) {
        memcpy(c->data, pk->data, pk->len);
        c->len = pk->len;
    }
    return 0;
}

/* A pair whose first client DATA packet is kept in *cap. */
void setup_capturing_pair(struct pair *p, struct capture *cap)
{
    setup_pair(p, NULL);
    cap->len = 0;
    p->filter = capture_filter;
    p->filter_arg = cap;
}

/* The start of the tombstone tests: a request reaches the server
 * application, which answers with a response that needs grants; the
 * client's grants never arrive (everything it sends is dropped), and after
 * 102 ms of ticks the server gives up on it.  cap holds the request's
 * first packet. */
void server_times_out_silent_client(struct pair *p, struct capture *cap)
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

/* ---------- direct receive (homa_engine_place_*) ---------- */

/* Encodes a DATA packet of the request `id` (even, the client's id) from
 * CPORT to SPORT into buf; returns its length. */
size_t data_pkt(uint8_t *buf, uint64_t id, uint32_t msg_len, uint32_t offset,
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
