/* Unit tests for src/core/engine.c: the application's calls, on two engines wired back to
 * back (tests/support/pair.c), time advanced by hand.  Names follow function__case. */
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

static int drop_all(void *arg, int from, const struct pair_pkt *pk)
{
    (void)arg;
    (void)from;
    (void)pk;
    return 1;
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
        cmocka_unit_test(homa_engine_peer_unreachable__fails_client_rpcs),
        cmocka_unit_test(homa_engine_queue_stats__counts_both_sides),
        cmocka_unit_test(homa_engine_send_request__sizes),
        cmocka_unit_test(homa_engine_send_request__large_when_max_raised),
        cmocka_unit_test(homa_engine_abort__frees_and_server_cleans_up),
        cmocka_unit_test(homa_engine_request_priority__limits_data_packets),
        cmocka_unit_test(homa_engine_request_priority__errors),
        cmocka_unit_test(homa_engine_recv__flags_and_id),
        cmocka_unit_test(homa_engine_msg_take__zero_copy_echo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
