/* Unit tests for src/core/ctl.c: the queue of control packets we send. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"

#define PORT 7

static homa_addr peer_addr = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}};

static struct homa_engine *make(void)
{
    homa_engine *e;
    assert_int_equal(homa_engine_create(NULL, NULL, &e), 0);
    assert_int_equal(homa_engine_port_open(e, PORT), 0);
    return e;
}

/* Pulls everything; decodes the i-th packet into *out if out != NULL. */
static int pull_all(struct homa_engine *e, int i, struct homa_wire_pkt *out)
{
    homa_pkt_out pk[64];
    int n = homa_engine_pull(e, e->now, pk, 64);
    if (out && i < n) {
        uint8_t buf[HOMA_MAX_HDR_LEN + 8];
        memcpy(buf, pk[i].hdr, pk[i].hdr_len);
        assert_int_equal(homa_wire_decode(buf, pk[i].hdr_len, out), HOMA_WIRE_OK);
    }
    homa_engine_pull_done(e);
    return n;
}

static void grant(struct homa_engine *e, struct homa_rpc *rpc, uint32_t offset)
{
    struct homa_wire_pkt pkt;
    memset(&pkt, 0, sizeof(pkt));
    pkt.type = HOMA_PKT_GRANT;
    pkt.sender_id = rpc->id;
    pkt.u.grant.offset = offset;
    homa_ctl_queue(e, rpc, &rpc->peer->addr, PORT, rpc->peer_port, &pkt);
}

static void homa_ctl_queue__newer_grant_replaces_queued_one(void **state)
{
    (void)state;
    struct homa_engine *e = make();
    struct homa_peer *p = homa_peer_get(e, &peer_addr, true);
    struct homa_rpc *r = homa_rpc_new(e, 11, homa_port_find(e, PORT), p, 1000, RPC_SERVER_INCOMING);
    grant(e, r, 10000);
    grant(e, r, 20000);
    assert_int_equal(e->ctl_count, 1);
    assert_int_equal(e->ctr.grants_merged, 1);
    struct homa_wire_pkt got;
    assert_int_equal(pull_all(e, 0, &got), 1);
    assert_int_equal(got.type, HOMA_PKT_GRANT);
    assert_int_equal(got.u.grant.offset, 20000);
    /* once pulled, a new GRANT is a new packet */
    grant(e, r, 30000);
    grant(e, r, 40000);
    assert_int_equal(pull_all(e, 0, &got), 1);
    assert_int_equal(got.u.grant.offset, 40000);
    homa_engine_destroy(e);
}

static void homa_ctl_queue__bounded_drops_the_oldest(void **state)
{
    (void)state;
    struct homa_engine *e = make();
    for (uint64_t i = 0; i < HOMA_MAX_CTL_QUEUE + 3; i++)
        homa_ctl_simple(e, HOMA_PKT_BUSY, 2 * i + 2, &peer_addr, PORT, 1000);
    assert_int_equal(e->ctl_count, HOMA_MAX_CTL_QUEUE);
    assert_int_equal(e->ctl_seq, 3);
    struct homa_wire_pkt got;
    assert_int_equal(pull_all(e, 0, &got), 64);
    assert_int_equal(got.type, HOMA_PKT_BUSY);
    assert_int_equal(got.sender_id, 2 * 3 + 2); /* the first three went */
    homa_engine_destroy(e);
}

static void count_want_tx(void *ctx)
{
    (*(int *)ctx)++;
}

static void homa_notify_tx__only_with_something_to_send(void **state)
{
    (void)state;
    int wanted = 0;
    homa_engine_ops ops = {.ctx = &wanted, .want_tx = count_want_tx};
    homa_engine *e;
    assert_int_equal(homa_engine_create(NULL, &ops, &e), 0);
    homa_notify_tx(e);
    assert_int_equal(wanted, 0);
    homa_ctl_simple(e, HOMA_PKT_BUSY, 2, &peer_addr, PORT, 1000);
    homa_notify_tx(e);
    assert_int_equal(wanted, 1);
    homa_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_ctl_queue__newer_grant_replaces_queued_one),
        cmocka_unit_test(homa_ctl_queue__bounded_drops_the_oldest),
        cmocka_unit_test(homa_notify_tx__only_with_something_to_send),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
