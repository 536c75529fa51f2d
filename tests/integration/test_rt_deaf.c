/* A local stall of the receive path is not the peer's silence.
 *
 * The client runtime's poller is stalled in the middle of its pass for three
 * timeouts (homa_rt_test_stall_read: the read sleeps with the lock
 * released, as a preempted thread would), while its background thread
 * keeps running: nobody reads the socket, the server's answers wait in it.
 * Seen for real on a loaded 2-core host (W1 with 20 % loss): no socket
 * read for 60-230 ms while the timers ran on time, and the live server was
 * declared dead.  Every RPC caught in the stall must complete, none fail. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <homa/homa.h>

#include "integration/rt_util.h"
#include "rt/driven.h"

#define WINDOW 8
#define MS (1000000ull * SANITIZER_SLOWDOWN) /* one protocol millisecond */
#define TIMEOUT_TICKS 100
#define TIMEOUT (TIMEOUT_TICKS * MS)

static void homa_rt_test_stall_read__deaf_poller_fails_nothing(void **state)
{
    (void)state;
    homa_runtime_options o;
    rt_test_options(&o, 0);
    o.config.tick_ns = MS;
    o.config.timeout_ticks = TIMEOUT_TICKS;
    homa_runtime *srt, *crt;
    assert_int_equal(homa_runtime_create(&o, &srt), 0);
    assert_int_equal(homa_runtime_create(&o, &crt), 0);
    homa_socket *ss, *cs;
    assert_int_equal(homa_socket_open(srt, 0, &ss), 0);
    pthread_t th;
    struct rt_echo echo = {.s = ss, .poll_ns = 20 * (int64_t)MS};
    pthread_create(&th, NULL, rt_echo_main, &echo);
    assert_int_equal(homa_socket_open(crt, 0, &cs), 0);
    homa_endpoint dst;
    assert_int_equal(homa_endpoint_from_host("127.0.0.1", homa_socket_port(ss), &dst), 0);

    uint64_t start = rt_now_ns(), stall_at = start + 200 * MS,
             end = stall_at + 3 * TIMEOUT + 300 * MS;
    int outstanding = 0, ok = 0, failed = 0, stalled = 0, ok_after = 0;
    uint64_t longest_recv = 0, cookie = 0;
    uint8_t req[64];
    for (;;) {
        uint64_t now = rt_now_ns();
        while (outstanding < WINDOW && now < end) {
            rt_fill(req, sizeof(req), cookie);
            assert_int_equal(homa_send(cs, &dst, req, sizeof(req), cookie++, NULL), 0);
            outstanding++;
        }
        if (outstanding == 0) break;
        if (!stalled && now >= stall_at) {
            /* This thread's next pass as the poller stalls: the socket
             * is not read for three timeouts. */
            homa_rt_test_stall_read(crt, 3 * TIMEOUT);
            stalled = 1;
        }
        homa_msg m;
        uint64_t t0 = rt_now_ns();
        int rc = homa_recv(cs, HOMA_RECV_RESPONSE, 0, 20 * (int64_t)TIMEOUT, &m);
        uint64_t t1 = rt_now_ns();
        if (t1 - t0 > longest_recv) longest_recv = t1 - t0;
        assert_true(rc != HOMA_ERR_AGAIN); /* no hang */
        outstanding--;
        if (rc == 0) {
            uint64_t tag = 0;
            assert_true(rt_check(m.data, m.length, &tag));
            ok++;
            if (stalled && t0 > stall_at + 3 * TIMEOUT) ok_after++;
            homa_release(cs, &m);
        } else {
            failed++;
            if (failed == 1) fprintf(stderr, "first failure: %s\n", homa_strerror(rc));
        }
    }
    homa_counters ec;
    homa_driver_counters dc;
    homa_runtime_counters(crt, &ec, &dc);
    fprintf(stderr,
            "poller stalled %llu ms (timeout %llu ms): longest recv %.1f ms, %d ok (%d after the "
            "stall), %d failed, client timeouts %llu, %.1f ms of local stalls forgiven\n",
            (unsigned long long)(3 * TIMEOUT / 1000000), (unsigned long long)(TIMEOUT / 1000000),
            (double)longest_recv / 1e6, ok, ok_after, failed,
            (unsigned long long)ec.client_timeouts, (double)ec.stalled_ns / 1e6);
    __atomic_store_n(&echo.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    homa_socket_close(ss);
    homa_socket_close(cs);
    homa_runtime_destroy(crt);
    homa_runtime_destroy(srt);
    /* The stall happened (one recv waited through most of it) ... */
    assert_true(longest_recv >= 2 * TIMEOUT);
    /* ... and cost nothing but time. */
    assert_int_equal(failed, 0);
    assert_int_equal(ec.client_timeouts, 0);
    assert_true(ok_after > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_rt_test_stall_read__deaf_poller_fails_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
