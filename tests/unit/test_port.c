/* Unit tests for src/core/port.c: opening, counting and closing ports.  Names follow
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_engine_port_open__errors),
        cmocka_unit_test(homa_engine_port_rpcs__counts_until_acked),
        cmocka_unit_test(homa_engine_port_close__messages_stay_valid_until_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
