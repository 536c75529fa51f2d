/* Unit tests for src/core/peer.c: peers, their liveness per port, and the
 * acks they are owed.  Names follow function__case. */
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

static homa_addr addr_n(uint8_t n)
{
    homa_addr a;
    memset(&a, 0, sizeof(a));
    a.bytes[15] = n;
    return a;
}

static void homa_peer_get__created_once_found_after(void **state)
{
    (void)state;
    homa_engine *e;
    assert_int_equal(homa_engine_create(NULL, NULL, &e), 0);
    homa_addr a[200];
    for (int i = 0; i < 200; i++) {
        a[i] = addr_n((uint8_t)i);
        a[i].bytes[0] = (uint8_t)(i >> 8) + 1;
        assert_null(homa_peer_get(e, &a[i], false));
        assert_non_null(homa_peer_get(e, &a[i], true));
    }
    assert_int_equal(e->peers.n, 200);
    assert_true(e->peers.nb >= 200); /* grew past its first 64 buckets */
    for (int i = 0; i < 200; i++) {
        struct homa_peer *p = homa_peer_get(e, &a[i], false);
        assert_non_null(p);
        assert_memory_equal(&p->addr, &a[i], sizeof(a[i]));
        assert_ptr_equal(homa_peer_get(e, &a[i], true), p);
    }
    homa_engine_destroy(e);
}

static void homa_peer_heard__ports_bounded_oldest_forgotten(void **state)
{
    (void)state;
    homa_engine *e;
    assert_int_equal(homa_engine_create(NULL, NULL, &e), 0);
    homa_addr a = addr_n(9);
    struct homa_peer *p = homa_peer_get(e, &a, true);
    for (uint16_t port = 1; port <= HOMA_PEER_MAX_PORTS + 10; port++)
        homa_peer_heard(p, port, 1000 + port);
    assert_int_equal(p->num_ports, HOMA_PEER_MAX_PORTS);
    /* the ten heard from longest ago made room for the last ten */
    for (uint16_t port = 1; port <= 10; port++)
        assert_int_equal(homa_peer_port_heard(p, port), 0);
    assert_int_equal(homa_peer_port_heard(p, 11), 1011);
    assert_int_equal(homa_peer_port_heard(p, HOMA_PEER_MAX_PORTS + 10),
                     1000 + HOMA_PEER_MAX_PORTS + 10);
    assert_int_equal(p->last_heard, 1000 + HOMA_PEER_MAX_PORTS + 10);
    homa_engine_destroy(e);
}

static void homa_peers_forgive__moves_heard_later_not_past_now(void **state)
{
    (void)state;
    homa_engine *e;
    assert_int_equal(homa_engine_create(NULL, NULL, &e), 0);
    homa_addr a = addr_n(9);
    struct homa_peer *p = homa_peer_get(e, &a, true);
    homa_peer_heard(p, 5, 1000);
    homa_peer_heard(p, 6, 9000);
    homa_peers_forgive(e, 10000, 3000);
    assert_int_equal(homa_peer_port_heard(p, 5), 4000);  /* 1000 + 3000 */
    assert_int_equal(homa_peer_port_heard(p, 6), 10000); /* capped at now */
    assert_int_equal(p->last_heard, 10000);
    homa_engine_destroy(e);
}

static void homa_peers_reap__idle_for_a_timeout(void **state)
{
    (void)state;
    homa_engine *e;
    assert_int_equal(homa_engine_create(NULL, NULL, &e), 0);
    uint64_t timeout = (uint64_t)e->cfg.timeout_ticks * e->cfg.tick_ns;
    homa_addr a = addr_n(9), b = addr_n(10);
    e->now = 1000;
    struct homa_peer *pa = homa_peer_get(e, &a, true);
    e->now = 5000;
    homa_peer_get(e, &b, true);
    pa->num_rpcs = 1; /* busy: never reaped */
    homa_peers_reap(e, 1000 + timeout + 1);
    assert_non_null(homa_peer_get(e, &a, false));
    assert_non_null(homa_peer_get(e, &b, false));
    homa_peers_reap(e, 5000 + timeout + 1);
    assert_non_null(homa_peer_get(e, &a, false));
    assert_null(homa_peer_get(e, &b, false));
    pa->num_rpcs = 0;
    homa_peers_reap(e, 5000 + timeout + 1);
    assert_null(homa_peer_get(e, &a, false));
    assert_int_equal(e->peers.n, 0);
    homa_engine_destroy(e);
}

static void homa_peer_queue_ack__full_flushes_oldest_port(void **state)
{
    (void)state;
    homa_engine *e;
    assert_int_equal(homa_engine_create(NULL, NULL, &e), 0);
    homa_addr a = addr_n(9);
    struct homa_peer *p = homa_peer_get(e, &a, true);
    for (uint64_t i = 0; i < HOMA_PEER_MAX_ACKS; i++)
        homa_peer_queue_ack(e, p, 2 * i + 2, 99, (uint16_t)(i & 1 ? 4001 : 4000));
    assert_int_equal(p->num_acks, HOMA_PEER_MAX_ACKS);
    assert_int_equal(e->ctl_count, 0);
    homa_peer_queue_ack(e, p, 1000, 99, 4000);
    /* one ACK packet with the oldest port's first HOMA_MAX_ACKS_PER_PKT */
    assert_int_equal(e->ctl_count, 1);
    assert_int_equal(p->num_acks, HOMA_PEER_MAX_ACKS + 1 - HOMA_MAX_ACKS_PER_PKT);
    struct homa_wire_pkt pkt;
    memset(&pkt, 0, sizeof(pkt));
    homa_peer_take_acks(p, 4001, 0, &pkt);
    assert_int_equal(pkt.u.ack.num_acks, HOMA_MAX_ACKS_PER_PKT);
    assert_int_equal(pkt.u.ack.acks[0].client_id, 4); /* port 4001's oldest */
    homa_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_engine_port_flush_acks__server_frees_at_once),
        cmocka_unit_test(homa_peer_get__created_once_found_after),
        cmocka_unit_test(homa_peer_heard__ports_bounded_oldest_forgotten),
        cmocka_unit_test(homa_peers_forgive__moves_heard_later_not_past_now),
        cmocka_unit_test(homa_peers_reap__idle_for_a_timeout),
        cmocka_unit_test(homa_peer_queue_ack__full_flushes_oldest_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
