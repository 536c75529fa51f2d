/* A server process killed mid-run: the client must see an error for every
 * RPC that was waiting on it (and for new ones), not hang: HOMA_ERR_TIMEOUT,
 * or HOMA_ERR_UNREACHABLE when the kernel answers the dead port's packets
 * with ICMP port unreachable (loopback does, at once).
 *
 * The server is a forked child (forked before the parent creates any
 * runtime, so the child starts from a single-threaded process).  The client
 * uses a short timeout (1 ms ticks, 200 ticks of silence) to keep this fast. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <homa/homa.h>

#include "integration/rt_util.h"

/* Child: serve forever; a request whose first byte is 1 is never answered
 * (the server "computes" until it is killed). */
static void child_main(int pipe_wr)
{
    homa_runtime_options o;
    rt_test_options(&o, 0);
    homa_runtime *rt;
    homa_socket *s;
    if (homa_runtime_create(&o, &rt) != 0 || homa_socket_open(rt, 0, &s) != 0) _exit(2);
    uint16_t port = homa_socket_port(s);
    if (write(pipe_wr, &port, sizeof(port)) != (ssize_t)sizeof(port)) _exit(3);
    for (;;) {
        homa_msg m;
        if (homa_recv(s, HOMA_RECV_REQUEST, 0, HOMA_FOREVER, &m) != 0) continue;
        if (m.length > 0 && m.data[0] == 1) {
            homa_release(s, &m);
            continue;
        }
        homa_reply_msg(s, &m, m.data, m.length);
        homa_release(s, &m);
    }
}

static void test_server_killed(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        child_main(fds[1]);
    }
    close(fds[1]);
    uint16_t port = 0;
    assert_int_equal(read(fds[0], &port, sizeof(port)), (ssize_t)sizeof(port));
    close(fds[0]);

    homa_runtime_options o;
    rt_test_options(&o, 0);
    /* 200 ms of silence (stretched under sanitizers): short enough for a
     * quick test, long enough that a live server on a loaded CI host is
     * not taken for dead. */
    o.config.tick_ns = 1000000ull * SANITIZER_SLOWDOWN;
    o.config.resend_ticks = 3;
    o.config.resend_interval = 3;
    o.config.timeout_ticks = 200;
    homa_runtime *rt;
    assert_int_equal(homa_runtime_create(&o, &rt), 0);
    homa_socket *c;
    assert_int_equal(homa_socket_open(rt, 0, &c), 0);
    homa_endpoint dst;
    assert_int_equal(homa_endpoint_from_host("127.0.0.1", port, &dst), 0);

    /* The server works. */
    static uint8_t buf[500000];
    rt_fill(buf, sizeof(buf), 1234);
    buf[0] = 0;
    for (int i = 0; i < 20; i++) {
        homa_msg m;
        assert_int_equal(homa_call(c, &dst, buf, 1000 + (size_t)i * 1000, 5000000000ll, &m), 0);
        homa_release(c, &m);
    }
    /* RPCs in flight when it dies: two it will never answer, then a big
     * one still being transferred. */
    uint64_t ids[3];
    uint8_t one = 1;
    assert_int_equal(homa_send(c, &dst, &one, 1, 0, &ids[0]), 0);
    assert_int_equal(homa_send(c, &dst, &one, 1, 0, &ids[1]), 0);
    usleep(20000);
    assert_int_equal(homa_send(c, &dst, buf, sizeof(buf), 0, &ids[2]), 0);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status));

    uint64_t t0 = rt_now_ns();
    int timeouts = 0, completed = 0;
    uint64_t latest = 0; /* the last failure, after the kill */
    for (int i = 0; i < 3; i++) {
        homa_msg m;
        int rc = homa_recv(c, HOMA_RECV_RESPONSE, ids[i], 10000000000ll, &m);
        assert_true(rc != HOMA_ERR_AGAIN); /* no hang */
        if (rc == HOMA_ERR_TIMEOUT || rc == HOMA_ERR_UNREACHABLE) latest = rt_now_ns() - t0;
        if (rc == 0) {
            completed++; /* the big echo may have finished before the kill */
            homa_release(c, &m);
        } else {
            assert_true(rc == HOMA_ERR_TIMEOUT || rc == HOMA_ERR_UNREACHABLE);
            assert_int_equal(m.id, ids[i]);
            assert_int_equal(m.error, rc);
            assert_null(m.data);
            timeouts++;
        }
    }
    assert_true(timeouts >= 2);
    /* A new RPC to the dead server fails the same way. */
    homa_msg m;
    int rc = homa_call(c, &dst, buf, 100, 10000000000ll, &m);
    assert_true(rc == HOMA_ERR_TIMEOUT || rc == HOMA_ERR_UNREACHABLE);
    double secs = (double)(rt_now_ns() - t0) / 1e9;
    assert_true(secs < 5.0 * SANITIZER_SLOWDOWN);

    homa_counters ec;
    homa_driver_counters dc;
    homa_runtime_counters(rt, &ec, &dc);
    /* Silence (timeouts) or one ICMP port unreachable report, which fails
     * every RPC to the port at once. */
    assert_true(ec.client_timeouts >= 3 || dc.icmp_unreach >= 1);
    /* The server was heard last before the kill, so every RPC waiting on
     * it fails within the timeout plus one tick of the kill, plus what the
     * engine forgave as local stalls (its own timer late) and the wake-up
     * slack of a loaded host. */
    uint64_t timeout = (uint64_t)o.config.timeout_ticks * o.config.tick_ns;
    uint64_t slack = 50000000ull * SANITIZER_SLOWDOWN;
    fprintf(stderr,
            "kill: %d failed + %d completed in %.3f s; the in-flight ones %.2f ms after the "
            "kill (timeout %.0f ms + tick %.0f ms; %.2f ms of local stalls forgiven; %llu ICMP "
            "reports)\n",
            timeouts + 1, completed, secs, (double)latest / 1e6, (double)timeout / 1e6,
            (double)o.config.tick_ns / 1e6, (double)ec.stalled_ns / 1e6,
            (unsigned long long)dc.icmp_unreach);
    assert_true(latest <= timeout + o.config.tick_ns + ec.stalled_ns + slack);
    homa_socket_close(c);
    homa_runtime_destroy(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_killed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
