/* The driven runtime (src/rt/driven.h) that homad runs: no background
 * thread; the test's thread reads the UDP sockets, runs the timers and
 * takes the messages the ready callback names, as homad's main loop does.
 * Loopback only. */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "rt/driven.h"

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct ready_log {
    int calls;
    uint16_t last;
    unsigned seen[4];
    uint16_t ports[4];
};

static void on_ready(void *ctx, uint16_t port)
{
    struct ready_log *l = ctx;
    l->calls++;
    l->last = port;
    for (int i = 0; i < 4; i++)
        if (l->ports[i] == port) l->seen[i]++;
}

static homa_runtime *make(struct ready_log *log)
{
    homa_runtime_options o;
    homa_runtime_options_default(&o);
    o.flags |= HOMA_RT_IGNORE_ENV;
    homa_runtime *rt = NULL;
    assert_int_equal(homa_rt_create_driven(&o, on_ready, log, &rt), 0);
    return rt;
}

/* 0: drive every socket when the runtime's epoll fd is readable (as
 * homa_rt_drive); 1: only the sockets whose own fd is readable (as homad,
 * homa_rt_drive_ports). */
static int by_ports;
static homa_socket *socks[2];

/* A server and a client socket on rt (socks[0], socks[1]; their ports in
 * log) and the server's loopback endpoint. */
static void open_pair(homa_runtime *rt, struct ready_log *log, homa_socket **srv, homa_socket **cli,
                      homa_endpoint *dst)
{
    assert_int_equal(homa_socket_open(rt, 0, srv), 0);
    assert_int_equal(homa_socket_open(rt, 0, cli), 0);
    socks[0] = *srv;
    socks[1] = *cli;
    log->ports[0] = homa_socket_port(*srv);
    log->ports[1] = homa_socket_port(*cli);
    assert_int_equal(homa_endpoint_from_host("127.0.0.1", homa_socket_port(*srv), dst), 0);
}

/* Drives the runtime until the socket has a message for us (or 5 s). */
static int drive_until(homa_runtime *rt, struct ready_log *log, int idx, homa_socket *s,
                       homa_msg *m)
{
    uint64_t end = mono_ns() + 5000000000ull;
    while (mono_ns() < end) {
        if (log->seen[idx] > 0) {
            int rc = homa_recv(s, HOMA_RECV_ANY, 0, HOMA_NONBLOCK, m);
            if (rc != HOMA_ERR_AGAIN) return rc;
            log->seen[idx] = 0;
        }
        struct pollfd p[2] = {{.fd = homa_rt_drive_fd(rt), .events = POLLIN}};
        int np = 1;
        if (by_ports) {
            for (int i = 0; i < 2; i++) {
                p[i].fd = homa_rt_socket_fd(socks[i]);
                p[i].events = POLLIN;
                assert_true(p[i].fd >= 0);
            }
            np = 2;
        }
        uint64_t due = homa_rt_drive_deadline(rt);
        uint64_t now = mono_ns();
        int ms = due == UINT64_MAX ? 100 : due <= now ? 0 : (int)((due - now) / 1000000 + 1);
        if (ms > 100) ms = 100;
        poll(p, (nfds_t)np, ms);
        if (by_ports) {
            uint16_t ports[2];
            int n = 0;
            for (int i = 0; i < 2; i++)
                if (p[i].revents & POLLIN) ports[n++] = homa_socket_port(socks[i]);
            assert_true(homa_rt_drive_ports(rt, ports, n) >= 0);
        } else {
            homa_rt_drive(rt);
        }
        if (log->seen[idx] > 0) {
            int rc = homa_recv(s, HOMA_RECV_ANY, 0, HOMA_NONBLOCK, m);
            if (rc != HOMA_ERR_AGAIN) return rc;
            log->seen[idx] = 0;
        }
    }
    return HOMA_ERR_AGAIN;
}

static void driven__echo_through_one_thread(void **state)
{
    by_ports = *state != NULL;
    struct ready_log log;
    memset(&log, 0, sizeof(log));
    homa_runtime *rt = make(&log);
    assert_true(homa_rt_drive_fd(rt) >= 0);
    /* Nothing to do: no deadline, no work. */
    assert_int_equal(homa_rt_drive(rt), 0);
    assert_true(homa_rt_drive_deadline(rt) == UINT64_MAX);

    homa_socket *srv, *cli;
    homa_endpoint dst;
    open_pair(rt, &log, &srv, &cli, &dst);

    /* Nobody else drives the engine: a blocking or timed wait is refused. */
    homa_msg m;
    assert_int_equal(homa_recv(srv, HOMA_RECV_ANY, 0, HOMA_FOREVER, &m), HOMA_ERR_STATE);
    assert_int_equal(homa_recv(srv, HOMA_RECV_ANY, 0, 1000, &m), HOMA_ERR_STATE);
    assert_int_equal(homa_socket_linger(srv, HOMA_FOREVER), HOMA_ERR_STATE);
    /* A non-blocking recv never reads the sockets in this mode. */
    assert_int_equal(homa_recv(srv, HOMA_RECV_ANY, 0, HOMA_NONBLOCK, &m), HOMA_ERR_AGAIN);

    for (size_t len = 1; len <= 1000000; len *= 100) {
        uint8_t *buf = malloc(len);
        assert_non_null(buf);
        for (size_t i = 0; i < len; i++)
            buf[i] = (uint8_t)(i * 7 + len);
        homa_driver_counters d0, d1;
        homa_runtime_counters(rt, NULL, &d0);
        log.seen[0] = log.seen[1] = 0;
        uint64_t id = 0;
        assert_int_equal(homa_send(cli, &dst, buf, len, 42, &id), 0);
        /* A live RPC: the engine's timers now have a deadline. */
        assert_true(homa_rt_drive_deadline(rt) != UINT64_MAX);
        if (len <= 10000) {
            /* From one of our sockets to another over 127.0.0.1: the
             * packet went straight back into the engine inside homa_send
             * (tx_local), and the request is complete at once. */
            assert_true(log.seen[0] > 0);
            assert_int_equal(homa_recv(srv, HOMA_RECV_ANY, 0, HOMA_NONBLOCK, &m), 0);
        } else {
            /* 1 MB: the rest follows the grants, as the caller drives. */
            assert_int_equal(drive_until(rt, &log, 0, srv, &m), 0);
        }
        assert_true(m.is_request);
        assert_int_equal(m.length, len);
        assert_memory_equal(m.data, buf, len);
        assert_int_equal(homa_reply_msg(srv, &m, m.data, m.length), 0);
        homa_release(srv, &m);
        homa_msg r;
        assert_int_equal(drive_until(rt, &log, 1, cli, &r), 0);
        assert_false(r.is_request);
        assert_int_equal(r.id, id);
        assert_int_equal(r.cookie, 42);
        assert_int_equal(r.length, len);
        assert_memory_equal(r.data, buf, len);
        homa_release(cli, &r);
        /* Not one datagram went through the kernel. */
        homa_runtime_counters(rt, NULL, &d1);
        assert_int_equal(d1.send_syscalls, d0.send_syscalls);
        free(buf);
    }
    assert_true(log.calls >= 6);

    /* A request to a port nobody has fails through the same callback. */
    homa_endpoint nobody = dst;
    homa_socket *tmp;
    assert_int_equal(homa_socket_open(rt, 0, &tmp), 0);
    nobody.port = homa_socket_port(tmp);
    homa_socket_close(tmp);
    uint64_t id = 0;
    assert_int_equal(homa_send(cli, &nobody, "x", 1, 0, &id), 0);
    log.seen[1] = 0;
    int rc = drive_until(rt, &log, 1, cli, &m);
    assert_true(rc != 0 && rc != HOMA_ERR_AGAIN);
    assert_int_equal(m.id, id);
    /* A port with no socket (closed since epoll saw it) is skipped. */
    assert_true(homa_rt_drive_ports(rt, &nobody.port, 1) >= 0);

    homa_socket_close(srv);
    homa_socket_close(cli);
    homa_runtime_destroy(rt);
}

/* With fault injection the packets go through the driver (and the kernel)
 * as before, the faults apply, and the driver's held packets give the
 * caller deadlines to drive at. */
static void driven__faults_go_through_the_kernel(void **state)
{
    by_ports = *state != NULL;
    struct ready_log log;
    memset(&log, 0, sizeof(log));
    homa_runtime_options o;
    homa_runtime_options_default(&o);
    o.flags |= HOMA_RT_IGNORE_ENV;
    o.faults.delay = 1.0; /* every packet held back 300 us on send */
    o.faults.delay_us = 300;
    o.faults.dirs = HOMA_FAULT_TX;
    homa_runtime *rt = NULL;
    assert_int_equal(homa_rt_create_driven(&o, on_ready, &log, &rt), 0);
    homa_socket *srv, *cli;
    homa_endpoint dst;
    open_pair(rt, &log, &srv, &cli, &dst);
    homa_driver_counters d0, d1;
    homa_runtime_counters(rt, NULL, &d0);
    uint64_t t0 = mono_ns();
    uint64_t id = 0;
    assert_int_equal(homa_send(cli, &dst, "hello", 5, 0, &id), 0);
    /* Held by the driver, not handed back to the engine. */
    assert_int_equal(log.seen[0], 0);
    assert_true(homa_rt_drive_deadline(rt) <= mono_ns() + 1000000);
    homa_msg m;
    assert_int_equal(drive_until(rt, &log, 0, srv, &m), 0);
    assert_true(mono_ns() - t0 >= 200000);
    assert_int_equal(m.length, 5);
    assert_int_equal(homa_reply_msg(srv, &m, "world", 5), 0);
    homa_release(srv, &m);
    homa_msg r;
    assert_int_equal(drive_until(rt, &log, 1, cli, &r), 0);
    assert_int_equal(r.id, id);
    assert_memory_equal(r.data, "world", 5);
    homa_release(cli, &r);
    homa_runtime_counters(rt, NULL, &d1);
    assert_true(d1.send_syscalls >= d0.send_syscalls + 2);
    homa_socket_close(srv);
    homa_socket_close(cli);
    homa_runtime_destroy(rt);
}

/* With the pacer on, a deadline that has passed stays passed until the
 * caller drives: the caller's epoll found nothing to read (here every
 * packet goes engine to engine, none through a socket), so nothing may
 * defer it.  Before, a due pacer deadline was pushed a tick out to wait
 * for input nobody would read: through homad 1 MB at 1 Gbit/s went one
 * 64 KB packet per 1.4 ms instead of per 0.52 ms. */
static void driven__pacer_deadline_kept(void **state)
{
    (void)state;
    by_ports = 1;
    struct ready_log log;
    memset(&log, 0, sizeof(log));
    homa_runtime_options o;
    homa_runtime_options_default(&o);
    o.flags |= HOMA_RT_IGNORE_ENV;
    /* 64 KB packets 5.2 ms apart, and timer ticks far apart, so the
     * deadlines are the pacer's and far enough apart to be slept to even
     * under ThreadSanitizer. */
    o.link_bps = 100000000ull;
    o.config.tick_ns = 50000000ull;
    homa_runtime *rt = NULL;
    assert_int_equal(homa_rt_create_driven(&o, on_ready, &log, &rt), 0);
    homa_socket *srv, *cli;
    homa_endpoint dst;
    open_pair(rt, &log, &srv, &cli, &dst);
    size_t len = 300000;
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    memset(buf, 7, len);
    uint64_t t0 = mono_ns(), id = 0;
    assert_int_equal(homa_send(cli, &dst, buf, len, 0, &id), 0);
    int checked = 0;
    homa_msg m;
    for (;;) {
        if (log.seen[0] > 0 && homa_recv(srv, HOMA_RECV_ANY, 0, HOMA_NONBLOCK, &m) == 0) break;
        assert_true(mono_ns() - t0 < 5000000000ull);
        uint64_t due = homa_rt_drive_deadline(rt);
        assert_true(due != UINT64_MAX); /* the RPC is live */
        uint64_t now = mono_ns();
        if (due > now) {
            struct timespec ts = {(time_t)((due - now) / 1000000000ull),
                                  (long)((due - now) % 1000000000ull)};
            nanosleep(&ts, NULL);
            now = mono_ns();
            /* Still due now that it has passed: nothing was read meanwhile. */
            assert_true(homa_rt_drive_deadline(rt) <= now);
            checked++;
        }
        assert_true(homa_rt_drive_ports(rt, NULL, 0) >= 0);
    }
    uint64_t took = mono_ns() - t0;
    print_message("300 KB at 100 Mbit/s through the pacer in %.1f ms (%d deadlines checked)\n",
                  (double)took / 1e6, checked);
    assert_true(checked > 0);
    assert_int_equal(m.length, len);
    homa_release(srv, &m);
    free(buf);
    homa_socket_close(srv);
    homa_socket_close(cli);
    homa_runtime_destroy(rt);
}

static void driven__not_on_a_threaded_runtime(void **state)
{
    (void)state;
    homa_runtime_options o;
    homa_runtime_options_default(&o);
    o.flags |= HOMA_RT_IGNORE_ENV;
    homa_runtime *rt;
    assert_int_equal(homa_runtime_create(&o, &rt), 0);
    assert_int_equal(homa_rt_drive_fd(rt), HOMA_ERR_STATE);
    assert_int_equal(homa_rt_drive(rt), HOMA_ERR_STATE);
    assert_int_equal(homa_rt_drive_ports(rt, NULL, 0), HOMA_ERR_STATE);
    assert_true(homa_rt_drive_deadline(rt) == UINT64_MAX);
    homa_runtime_destroy(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(driven__echo_through_one_thread, NULL),
        cmocka_unit_test_prestate(driven__echo_through_one_thread, (void *)1),
        cmocka_unit_test_prestate(driven__faults_go_through_the_kernel, NULL),
        cmocka_unit_test_prestate(driven__faults_go_through_the_kernel, (void *)1),
        cmocka_unit_test(driven__pacer_deadline_kept),
        cmocka_unit_test(driven__not_on_a_threaded_runtime),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
