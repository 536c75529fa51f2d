/* Unit tests for src/core/rpc.c (RPC table, lifecycle, tombstones) and the
 * state machine of src/core/rpc.h.  Names follow function__case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"

#define PORT 7

static homa_addr addr_n(uint8_t n)
{
    homa_addr a;
    memset(&a, 0, sizeof(a));
    a.bytes[15] = n;
    return a;
}

static struct homa_engine *make(const homa_config *cfg)
{
    homa_engine *e;
    assert_int_equal(homa_engine_create(cfg, NULL, &e), 0);
    assert_int_equal(homa_engine_port_open(e, PORT), 0);
    return e;
}

static void homa_rpc_transition_ok__only_the_listed_ones(void **state)
{
    (void)state;
    /* from -> to, as rpc.h lists them (0: a new RPC) */
    static const uint8_t allowed[][2] = {
        {0, RPC_CLIENT_ACTIVE},
        {0, RPC_SERVER_INCOMING},
        {RPC_CLIENT_ACTIVE, RPC_CLIENT_READY},
        {RPC_CLIENT_READY, RPC_CLIENT_DELIVERED},
        {RPC_SERVER_INCOMING, RPC_SERVER_READY},
        {RPC_SERVER_READY, RPC_SERVER_IN_SERVICE},
        {RPC_SERVER_IN_SERVICE, RPC_SERVER_OUTGOING},
    };
    int ok = 0;
    for (uint8_t from = 0; from <= RPC_SERVER_OUTGOING + 1; from++) {
        for (uint8_t to = 0; to <= RPC_SERVER_OUTGOING + 1; to++) {
            bool want = false;
            for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
                want |= allowed[i][0] == from && allowed[i][1] == to;
            assert_int_equal(homa_rpc_transition_ok(from, to), want);
            ok += want;
        }
    }
    assert_int_equal(ok, 7);
}

static void homa_rpc_new__found_by_kind_until_freed(void **state)
{
    (void)state;
    struct homa_engine *e = make(NULL);
    homa_addr a = addr_n(5), b = addr_n(6);
    struct homa_port *port = homa_port_find(e, PORT);
    struct homa_peer *pa = homa_peer_get(e, &a, true), *pb = homa_peer_get(e, &b, true);
    /* 300 of each kind: both tables grow past their first 64 buckets */
    struct homa_rpc *c[300], *s[300];
    for (int i = 0; i < 300; i++) {
        c[i] = homa_rpc_new(e, 2 * (uint64_t)i + 2, port, pa, 1000, RPC_CLIENT_ACTIVE);
        /* server ids are unique per client only: the same id from two */
        s[i] =
            homa_rpc_new(e, 2 * (uint64_t)i + 3, port, i & 1 ? pa : pb, 1000, RPC_SERVER_INCOMING);
        assert_non_null(c[i]);
        assert_non_null(s[i]);
    }
    assert_int_equal(e->ctr.rpcs_live, 600);
    assert_int_equal(e->server_rpcs, 300);
    assert_true(e->client_table.nb >= 300 && e->server_table.nb >= 300);
    for (int i = 0; i < 300; i++) {
        assert_ptr_equal(homa_find_client(e, c[i]->id), c[i]);
        const homa_addr *from = i & 1 ? &a : &b;
        assert_ptr_equal(homa_find_server(e, s[i]->id, from, 1000), s[i]);
        assert_null(homa_find_server(e, s[i]->id, from, 1001));
        assert_null(homa_find_server(e, s[i]->id, i & 1 ? &b : &a, 1000));
    }
    assert_int_equal(c[7]->state, RPC_CLIENT_ACTIVE);
    assert_int_equal(s[7]->state, RPC_SERVER_INCOMING);
    homa_rpc_free(e, c[7]);
    homa_rpc_free(e, s[8]);
    assert_null(homa_find_client(e, 16));
    assert_null(homa_find_server(e, 19, &b, 1000));
    assert_int_equal(e->ctr.rpcs_live, 598);
    /* a server RPC freed before its request reached the application
     * leaves no tombstone */
    assert_int_equal(e->tomb_count, 0);
    homa_engine_destroy(e);
}

/* The lookups remember the last RPC found: a freed one must not be
 * found again through that memory. */
static void homa_find_client__remembered_rpc_forgotten_when_freed(void **state)
{
    (void)state;
    struct homa_engine *e = make(NULL);
    homa_addr a = addr_n(5);
    struct homa_port *port = homa_port_find(e, PORT);
    struct homa_peer *p = homa_peer_get(e, &a, true);
    struct homa_rpc *c = homa_rpc_new(e, 10, port, p, 1000, RPC_CLIENT_ACTIVE);
    struct homa_rpc *s = homa_rpc_new(e, 11, port, p, 1000, RPC_SERVER_INCOMING);
    assert_ptr_equal(homa_find_client(e, 10), c);
    assert_ptr_equal(homa_find_client(e, 10), c); /* the remembered one */
    assert_ptr_equal(homa_find_server(e, 11, &a, 1000), s);
    assert_null(homa_find_server(e, 11, &a, 1001)); /* remembered, but not this key */
    homa_rpc_free(e, c);
    homa_rpc_free(e, s);
    assert_null(homa_find_client(e, 10));
    assert_null(homa_find_server(e, 11, &a, 1000));
    homa_engine_destroy(e);
}

static void homa_rpc_make_ready__queues_on_its_port(void **state)
{
    (void)state;
    struct homa_engine *e = make(NULL);
    homa_addr a = addr_n(5);
    struct homa_port *port = homa_port_find(e, PORT);
    struct homa_peer *p = homa_peer_get(e, &a, true);
    struct homa_rpc *c = homa_rpc_new(e, 10, port, p, 1000, RPC_CLIENT_ACTIVE);
    struct homa_rpc *s = homa_rpc_new(e, 11, port, p, 1000, RPC_SERVER_INCOMING);
    homa_rpc_make_ready(e, s);
    homa_rpc_fail(e, c, HOMA_ERR_TIMEOUT);
    assert_int_equal(s->state, RPC_SERVER_READY);
    assert_int_equal(c->state, RPC_CLIENT_READY);
    assert_int_equal(c->error, HOMA_ERR_TIMEOUT);
    /* failing twice does nothing: it is no longer active */
    homa_rpc_fail(e, c, HOMA_ERR_NOMEM);
    assert_int_equal(c->error, HOMA_ERR_TIMEOUT);
    homa_msg m;
    assert_int_equal(homa_engine_recv(e, PORT, HOMA_RECV_ANY, 0, &m), 0);
    assert_int_equal(m.id, 11); /* ready first */
    assert_int_equal(s->state, RPC_SERVER_IN_SERVICE);
    homa_engine_release(e, &m);
    assert_int_equal(homa_engine_recv(e, PORT, HOMA_RECV_ANY, 0, &m), 0);
    assert_int_equal(m.id, 10);
    assert_int_equal(m.error, HOMA_ERR_TIMEOUT);
    assert_int_equal(c->state, RPC_CLIENT_DELIVERED);
    homa_engine_release(e, &m);
    assert_int_equal(homa_engine_recv(e, PORT, HOMA_RECV_ANY, 0, &m), HOMA_ERR_AGAIN);
    homa_engine_destroy(e);
}

static void homa_tomb_add__ring_drops_the_oldest(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.max_tombstones = 4;
    struct homa_engine *e = make(&cfg);
    homa_addr a = addr_n(5);
    for (uint64_t id = 1; id <= 11; id += 2)
        homa_tomb_add(e, id, &a, 1000);
    assert_int_equal(e->tomb_count, 4);
    assert_int_equal(e->ctr.tombstones, 4);
    assert_false(homa_tomb_find(e, 1, &a, 1000));
    assert_false(homa_tomb_find(e, 3, &a, 1000));
    for (uint64_t id = 5; id <= 11; id += 2)
        assert_true(homa_tomb_find(e, id, &a, 1000));
    assert_false(homa_tomb_find(e, 5, &a, 1001)); /* another client port */
    homa_engine_destroy(e);
}

static void homa_tombs_expire__after_their_life(void **state)
{
    (void)state;
    struct homa_engine *e = make(NULL);
    homa_addr a = addr_n(5);
    uint64_t life = 2ull * e->cfg.timeout_ticks * e->cfg.tick_ns; /* tombstone_ticks 0 */
    if (e->cfg.tombstone_ticks) life = (uint64_t)e->cfg.tombstone_ticks * e->cfg.tick_ns;
    e->now = 1000;
    homa_tomb_add(e, 7, &a, 1000);
    homa_tombs_expire(e, 1000 + life - 1);
    assert_int_equal(e->tomb_count, 1);
    homa_tombs_expire(e, 1000 + life);
    assert_int_equal(e->tomb_count, 0);
    assert_false(homa_tomb_find(e, 7, &a, 1000));
    homa_engine_destroy(e);
}

static void homa_tomb_find__hit_late_in_life_renews(void **state)
{
    (void)state;
    struct homa_engine *e = make(NULL);
    homa_addr a = addr_n(5);
    uint64_t life = e->cfg.tombstone_ticks ? (uint64_t)e->cfg.tombstone_ticks * e->cfg.tick_ns
                                           : 2ull * e->cfg.timeout_ticks * e->cfg.tick_ns;
    e->now = 0;
    homa_tomb_add(e, 7, &a, 1000);
    e->now = life / 4; /* early: no renewal */
    assert_true(homa_tomb_find(e, 7, &a, 1000));
    assert_int_equal(e->tomb_count, 1);
    e->now = 3 * life / 4; /* past half its life: a fresh one */
    assert_true(homa_tomb_find(e, 7, &a, 1000));
    assert_int_equal(e->tomb_count, 2);
    homa_tombs_expire(e, life);
    assert_true(homa_tomb_find(e, 7, &a, 1000)); /* the fresh one lives on */
    homa_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_rpc_transition_ok__only_the_listed_ones),
        cmocka_unit_test(homa_rpc_new__found_by_kind_until_freed),
        cmocka_unit_test(homa_find_client__remembered_rpc_forgotten_when_freed),
        cmocka_unit_test(homa_rpc_make_ready__queues_on_its_port),
        cmocka_unit_test(homa_tomb_add__ring_drops_the_oldest),
        cmocka_unit_test(homa_tombs_expire__after_their_life),
        cmocka_unit_test(homa_tomb_find__hit_late_in_life_renews),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
