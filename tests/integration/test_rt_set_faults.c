/* homa_runtime_set_faults(): faults changed on a live runtime take effect
 * on its existing sockets (and new ones), can be switched off again, and
 * bad specs are refused.  Two runtimes in one process over loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <homa/homa.h>

#include "integration/rt_util.h"

static int echo_once(homa_socket *srv, homa_socket *cli, const homa_endpoint *dst, size_t len,
                     int64_t timeout_ns)
{
    static uint8_t buf[200000];
    rt_fill(buf, len, len);
    uint64_t id;
    int rc = homa_send(cli, dst, buf, len, 0, &id);
    if (rc != 0) return rc;
    uint64_t until = rt_now_ns() + (uint64_t)timeout_ns;
    for (;;) {
        homa_msg m;
        if (homa_recv(srv, HOMA_RECV_REQUEST, 0, HOMA_NONBLOCK, &m) == 0) {
            homa_reply_msg(srv, &m, m.data, m.length);
            homa_release(srv, &m);
        }
        rc = homa_recv(cli, HOMA_RECV_RESPONSE, id, 1000000, &m);
        if (rc == 0) {
            uint64_t tag = 0;
            int ok = m.length == len && rt_check(m.data, m.length, &tag);
            homa_release(cli, &m);
            return ok ? 0 : HOMA_ERR_STATE;
        }
        if (rc != HOMA_ERR_AGAIN) return rc;
        if (rt_now_ns() > until) {
            homa_abort(cli, id);
            return HOMA_ERR_AGAIN;
        }
    }
}

static void test_set_faults__live_change(void **state)
{
    (void)state;
    homa_runtime_options o;
    rt_test_options(&o, 0);
    o.config.timeout_ticks = 2000; /* the blackout below must not fail the RPC */
    homa_runtime *srt, *crt;
    assert_int_equal(homa_runtime_create(&o, &srt), 0);
    assert_int_equal(homa_runtime_create(&o, &crt), 0);
    homa_socket *ss, *cs;
    assert_int_equal(homa_socket_open(srt, 0, &ss), 0);
    assert_int_equal(homa_socket_open(crt, 0, &cs), 0);
    homa_endpoint dst;
    assert_int_equal(homa_endpoint_from_host("127.0.0.1", homa_socket_port(ss), &dst), 0);

    homa_driver_counters d0, d1, d2;
    assert_int_equal(echo_once(ss, cs, &dst, 5000, 5000000000ll), 0);
    homa_runtime_counters(crt, NULL, &d0);
    assert_int_equal(d0.fault_drops, 0);

    /* Lose 30 % of what the client sends: still completes, drops counted. */
    homa_faults f;
    assert_int_equal(homa_faults_parse("drop=0.3,dir=tx,seed=3", &f, NULL, 0), 0);
    assert_int_equal(homa_runtime_set_faults(crt, &f), 0);
    for (int i = 0; i < 20; i++)
        assert_int_equal(echo_once(ss, cs, &dst, 150000, 10000000000ll), 0);
    homa_runtime_counters(crt, NULL, &d1);
    assert_true(d1.fault_drops > 0);

    /* A blackout counts from the change: nothing gets through at first,
     * then the RPC completes once it is over. */
    assert_int_equal(homa_faults_parse("blackout_ms=300,dir=tx", &f, NULL, 0), 0);
    assert_int_equal(homa_runtime_set_faults(crt, &f), 0);
    uint64_t t0 = rt_now_ns();
    assert_int_equal(echo_once(ss, cs, &dst, 100, 10000000000ll), 0);
    assert_true(rt_now_ns() - t0 >= 250000000ull);

    /* Off again (NULL): no more drops. */
    assert_int_equal(homa_runtime_set_faults(crt, NULL), 0);
    homa_runtime_counters(crt, NULL, &d1);
    for (int i = 0; i < 10; i++)
        assert_int_equal(echo_once(ss, cs, &dst, 150000, 5000000000ll), 0);
    homa_runtime_counters(crt, NULL, &d2);
    assert_int_equal(d2.fault_drops, d1.fault_drops);

    /* Sockets opened after a change get the new faults too. */
    assert_int_equal(homa_faults_parse("drop=1,dir=tx", &f, NULL, 0), 0);
    assert_int_equal(homa_runtime_set_faults(srt, &f), 0);
    homa_socket *ss2;
    assert_int_equal(homa_socket_open(srt, 0, &ss2), 0);
    homa_endpoint dst2;
    assert_int_equal(homa_endpoint_from_host("127.0.0.1", homa_socket_port(ss2), &dst2), 0);
    assert_int_equal(echo_once(ss2, cs, &dst2, 100, 300000000ll), HOMA_ERR_AGAIN);
    assert_int_equal(homa_runtime_set_faults(srt, NULL), 0);
    assert_int_equal(echo_once(ss2, cs, &dst2, 100, 5000000000ll), 0);

    /* Inconsistent specs are refused and change nothing. */
    memset(&f, 0, sizeof(f));
    f.delay_us = 1000;
    f.drop = 0.7;
    f.dup = 0.7;
    assert_int_equal(homa_runtime_set_faults(crt, &f), HOMA_ERR_INVAL);
    f.drop = -1;
    f.dup = 0;
    assert_int_equal(homa_runtime_set_faults(crt, &f), HOMA_ERR_INVAL);
    assert_int_equal(homa_runtime_set_faults(NULL, NULL), HOMA_ERR_INVAL);
    assert_int_equal(echo_once(ss, cs, &dst, 100, 5000000000ll), 0);

    homa_socket_close(ss2);
    homa_socket_close(ss);
    homa_socket_close(cs);
    homa_runtime_destroy(crt);
    homa_runtime_destroy(srt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_faults__live_change),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
