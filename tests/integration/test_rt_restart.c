/* A server process killed (SIGKILL) mid-run and restarted on the same
 * port: every in-flight RPC of the client either completes against the new
 * process (the engine restarts a request after RPC_UNKNOWN) or fails with
 * HOMA_ERR_TIMEOUT; none hangs; and no request runs twice within one server
 * process (each process counts deliveries per request id and writes one
 * byte to a pipe per duplicate it sees, so the report survives SIGKILL).
 *
 * Servers are forked before the parent creates any runtime. */
#include <fcntl.h>
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

#define RPCS 600
#define WINDOW 200
#define LEN 20000

static void server_main(uint16_t port, int port_wr, int dup_wr)
{
    homa_runtime_options o;
    rt_test_options(&o, 0);
    homa_runtime *rt;
    homa_socket *s;
    if (homa_runtime_create(&o, &rt) != 0 || homa_socket_open(rt, port, &s) != 0) _exit(2);
    port = homa_socket_port(s);
    if (write(port_wr, &port, sizeof(port)) != (ssize_t)sizeof(port)) _exit(3);
    static unsigned char seen[RPCS];
    for (;;) {
        homa_msg m;
        if (homa_recv(s, HOMA_RECV_REQUEST, 0, HOMA_FOREVER, &m) != 0) continue;
        uint64_t tag = 0;
        if (m.length >= 8 && rt_check(m.data, m.length, &tag) && tag < RPCS) {
            if (seen[tag]++) {
                char c = 'd';
                if (write(dup_wr, &c, 1) != 1) _exit(4);
            }
            homa_reply_msg(s, &m, m.data, m.length);
        }
        homa_release(s, &m);
    }
}

static pid_t start_server(uint16_t port, uint16_t *got, int dup_wr)
{
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        /* A fresh program, not a fork of a process with runtime threads
         * (undefined behaviour; ThreadSanitizer refuses it). */
        char a1[16], a2[16], a3[16];
        snprintf(a1, sizeof(a1), "%u", (unsigned)port);
        snprintf(a2, sizeof(a2), "%d", fds[1]);
        snprintf(a3, sizeof(a3), "%d", dup_wr);
        execl("/proc/self/exe", "test_rt_restart", "--server", a1, a2, a3, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    if (read(fds[0], got, sizeof(*got)) != (ssize_t)sizeof(*got)) pid = -1;
    close(fds[0]);
    return pid;
}

static void test_restart__same_port(void **state)
{
    (void)state;
    int dup[2];
    assert_int_equal(pipe(dup), 0);
    uint16_t port = 0, port2 = 0;
    pid_t pid = start_server(0, &port, dup[1]);
    assert_true(pid > 0);

    homa_runtime_options o;
    rt_test_options(&o, 0);
    o.config.tick_ns = 1000000ull * SANITIZER_SLOWDOWN;
    o.config.timeout_ticks = 300;
    /* While no process has the port the kernel answers ICMP port
     * unreachable; this test is about the engine's RPC_UNKNOWN restart, so
     * the client keeps retrying instead of failing fast. */
    o.flags |= HOMA_RT_NO_UNREACH;
    homa_runtime *rt;
    assert_int_equal(homa_runtime_create(&o, &rt), 0);
    homa_socket *c;
    assert_int_equal(homa_socket_open(rt, 0, &c), 0);
    homa_endpoint dst;
    assert_int_equal(homa_endpoint_from_host("127.0.0.1", port, &dst), 0);

    static uint8_t buf[LEN], back[LEN];
    int sent = 0, outstanding = 0, completed = 0, timeouts = 0, other = 0, bad = 0;
    int restarted = 0;
    uint64_t t0 = rt_now_ns();
    while (completed + timeouts + other < RPCS) {
        while (outstanding < WINDOW && sent < RPCS) {
            rt_fill(buf, LEN, (uint64_t)sent);
            int rc = homa_send(c, &dst, buf, LEN, (uint64_t)sent, NULL);
            sent++;
            if (rc != 0)
                other++;
            else
                outstanding++;
        }
        if (!restarted && completed >= 100) {
            /* Kill with a full window in flight, restart on the same port. */
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            pid = start_server(port, &port2, dup[1]);
            assert_true(pid > 0);
            assert_int_equal(port2, port);
            restarted = 1;
        }
        homa_msg m;
        int rc = homa_recv(c, HOMA_RECV_RESPONSE, 0, 10000000000ll, &m);
        assert_true(rc != HOMA_ERR_AGAIN); /* no hang */
        if (m.id == 0) continue;
        if (rc == 0) {
            uint64_t tag = m.cookie;
            memcpy(back, m.data, m.length);
            if (m.length != LEN || !rt_check(back, m.length, &tag) || tag != m.cookie) bad++;
            completed++;
            homa_release(c, &m);
        } else if (rc == HOMA_ERR_TIMEOUT) {
            timeouts++;
        } else {
            other++;
        }
        outstanding--;
    }
    double secs = (double)(rt_now_ns() - t0) / 1e9;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(dup[1]);
    int dups = 0;
    char ch;
    while (read(dup[0], &ch, 1) == 1)
        dups++;
    close(dup[0]);
    homa_counters ec;
    homa_runtime_counters(rt, &ec, NULL);
    fprintf(stderr,
            "restart: %d completed, %d timeouts, %d other errors, %d bad, %d duplicates in one "
            "process, %lu client restarts, in %.2f s\n",
            completed, timeouts, other, bad, dups, (unsigned long)ec.client_restarts, secs);
    homa_socket_close(c);
    homa_runtime_destroy(rt);
    assert_int_equal(other, 0);
    assert_int_equal(bad, 0);
    assert_int_equal(dups, 0);
    assert_int_equal(completed + timeouts, RPCS);
    assert_true(completed >= 100);
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--server") == 0) {
        server_main((uint16_t)atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restart__same_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
