/* The raw IP driver (Homa over IP protocol 146) on loopback, and the ICMP
 * fail-fast path of both drivers.
 *
 * Needs CAP_NET_RAW: without it every raw test is skipped (exit 77) except
 * the privilege-error test, which needs root to drop to an unprivileged
 * user.  Between network namespaces the driver is tested by
 * raw_netns.sh (ctest raw_netns). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <homa/homa.h>

#include "core/wire.h"
#include "integration/rt_util.h"
#include "io/io.h"

#define SEC 1000000000ll

static int have_raw;

struct echo_server {
    homa_socket *sock;
    pthread_t thread;
    int stop;
};

static void *echo_main(void *arg)
{
    struct echo_server *e = arg;
    while (!__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) {
        homa_msg m;
        int rc = homa_recv(e->sock, HOMA_RECV_REQUEST, 0, 20000000, &m);
        if (rc == HOMA_ERR_SHUTDOWN) break;
        if (rc != 0) continue;
        homa_reply(e->sock, m.id, m.data, m.length);
        homa_release(e->sock, &m);
    }
    return NULL;
}

static homa_runtime *new_rt(unsigned flags)
{
    homa_runtime_options o;
    rt_test_options(&o, 0);
    o.flags |= flags;
    homa_runtime *rt = NULL;
    assert_int_equal(homa_runtime_create(&o, &rt), 0);
    return rt;
}

static void echo_start(struct echo_server *e, homa_runtime *rt, uint16_t port)
{
    memset(e, 0, sizeof(*e));
    assert_int_equal(homa_socket_open(rt, port, &e->sock), 0);
    assert_int_equal(pthread_create(&e->thread, NULL, echo_main, e), 0);
}

static void echo_stop(struct echo_server *e)
{
    __atomic_store_n(&e->stop, 1, __ATOMIC_RELEASE);
    pthread_join(e->thread, NULL);
    homa_socket_close(e->sock);
}

static void call_and_check(homa_socket *c, const homa_endpoint *dst, size_t len, uint64_t tag)
{
    uint8_t *buf = malloc(len ? len : 1);
    rt_fill(buf, len, tag);
    homa_msg resp;
    assert_int_equal(homa_call(c, dst, buf, len, 10 * SEC, &resp), 0);
    assert_int_equal(resp.length, len);
    if (len > 0) assert_memory_equal(resp.data, buf, len);
    homa_release(c, &resp);
    free(buf);
}

static void ep(const char *host, uint16_t port, homa_endpoint *out)
{
    char s[80];
    snprintf(s, sizeof(s), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
    assert_int_equal(homa_endpoint_parse(s, out), 0);
}

static void raw_echo__ipv4_ipv6_sizes(void **state)
{
    (void)state;
    if (!have_raw) skip();
    homa_runtime *srt = new_rt(HOMA_RT_RAW), *crt = new_rt(HOMA_RT_RAW);
    struct echo_server e;
    echo_start(&e, srt, 0);
    uint16_t port = homa_socket_port(e.sock);
    homa_socket *c;
    assert_int_equal(homa_socket_open(crt, 0, &c), 0);
    homa_endpoint v4, v6;
    ep("127.0.0.1", port, &v4);
    ep("::1", port, &v6);
    size_t sizes[] = {0, 1, 100, 1400, 5000, 65000, 65459, 65460, 200000, 1000000};
    int n = (int)(sizeof(sizes) / sizeof(sizes[0]));
    for (int i = 0; i < n; i++) {
        call_and_check(c, &v4, sizes[i], 100 + (uint64_t)i);
        call_and_check(c, &v6, sizes[i], 200 + (uint64_t)i);
    }
    homa_counters ec;
    homa_driver_counters dc;
    homa_runtime_counters(crt, &ec, &dc);
    assert_int_equal(ec.client_completed, 2 * n);
    assert_int_equal(dc.garbage_in, 0);
    assert_int_equal(dc.send_errors, 0);
    homa_socket_close(c);
    echo_stop(&e);
    homa_runtime_destroy(crt);
    homa_runtime_destroy(srt);
}

/* Bound to one address: only that family is served. */
static void raw_bind__one_address(void **state)
{
    (void)state;
    if (!have_raw) skip();
    homa_runtime *rt = new_rt(HOMA_RT_RAW);
    homa_endpoint local;
    ep("::1", 0, &local);
    homa_socket *srv, *c;
    assert_int_equal(homa_socket_bind(rt, &local, &srv), 0);
    uint16_t port = homa_socket_port(srv);
    struct echo_server e = {.sock = srv};
    assert_int_equal(pthread_create(&e.thread, NULL, echo_main, &e), 0);
    ep("::1", 0, &local);
    assert_int_equal(homa_socket_bind(rt, &local, &c), 0);
    homa_endpoint dst;
    ep("::1", port, &dst);
    call_and_check(c, &dst, 3000, 7);
    /* The same port again: taken. */
    homa_socket *dup;
    ep("::1", port, &local);
    assert_int_equal(homa_socket_bind(rt, &local, &dup), HOMA_ERR_PORT_IN_USE);
    homa_socket_close(c);
    echo_stop(&e);
    homa_runtime_destroy(rt);
}

/* Reads protocol-146 packets seen by a raw socket of our own for up to
 * ms, checking each against what the kernel sends; returns how many. */
struct seen {
    int pkts, data, ctl;
    int data_tos_ok, ctl_tos_ok, look_alike_ok, csum_ok;
    uint8_t data_tos_min, data_tos_max;
};

static void check_packet(const uint8_t *d, size_t len, struct seen *sn, uint16_t port)
{
    size_t ihl;
    uint8_t tos;
    homa_addr src, dst;
    if (homa_raw_strip_ipv4(d, len, &ihl, &tos, &src, &dst) != 0) return;
    const uint8_t *h = d + ihl;
    size_t hl = len - ihl;
    if (hl < HOMA_COMMON_HDR_LEN) return;
    uint16_t sport = (uint16_t)(h[0] << 8 | h[1]), dport = (uint16_t)(h[2] << 8 | h[3]);
    if (sport != port && dport != port) return;
    sn->pkts++;
    if ((tos & 0x1f) == 0) {
        if (h[11] == HOMA_PKT_DATA) {
            sn->data++;
            sn->data_tos_ok++;
            if (sn->data == 1 || tos < sn->data_tos_min) sn->data_tos_min = tos;
            if (tos > sn->data_tos_max) sn->data_tos_max = tos;
        } else {
            sn->ctl++;
            if (tos == 0xe0) sn->ctl_tos_ok++;
        }
    }
    if (h[13] == 0x06 && h[18] == 0xb9 && h[19] == 0x7d &&
        h[12] == (h[11] == HOMA_PKT_DATA ? 0xe0 : 0x50))
        sn->look_alike_ok++;
    size_t hdr = homa_wire_hdr_len(h[11]);
    if (hdr == 0 || hdr > hl) return;
    uint8_t copy[HOMA_MAX_HDR_LEN];
    memcpy(copy, h, hdr);
    copy[16] = copy[17] = 0;
    uint16_t want = homa_raw_checksum(&src, &dst, copy, hdr, h + hdr, hl - hdr);
    if ((uint16_t)(h[16] << 8 | h[17]) == want) sn->csum_ok++;
}

struct sniffer {
    int fd;
    uint16_t port;
    int stop;
    struct seen sn;
    pthread_t thread;
};

static void *sniff_main(void *arg)
{
    struct sniffer *s = arg;
    static uint8_t buf[65536];
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (poll(&p, 1, 10) <= 0) continue;
        ssize_t r = recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r > 0) check_packet(buf, (size_t)r, &s->sn, s->port);
    }
    return NULL;
}

/* Starts a thread reading protocol 146 (IPv4) for packets of port. */
static void sniff_start(struct sniffer *sf, uint16_t port)
{
    *sf = (struct sniffer){.port = port};
    sf->fd = socket(AF_INET, SOCK_RAW, HOMA_IPPROTO);
    assert_true(sf->fd >= 0);
    assert_int_equal(pthread_create(&sf->thread, NULL, sniff_main, sf), 0);
}

/* Gives the last packets settle_us to arrive, then stops the thread. */
static void sniff_stop(struct sniffer *sf, useconds_t settle_us)
{
    usleep(settle_us);
    __atomic_store_n(&sf->stop, 1, __ATOMIC_RELEASE);
    pthread_join(sf->thread, NULL);
    close(sf->fd);
}

/* Priorities travel in the TOS byte (prio << 5; control packets at 7),
 * with the kernel's TCP look-alike fields and a valid checksum. */
static void raw_wire__tos_flags_checksum(void **state)
{
    (void)state;
    if (!have_raw) skip();
    homa_runtime *srt = new_rt(HOMA_RT_RAW), *crt = new_rt(HOMA_RT_RAW);
    struct echo_server e;
    echo_start(&e, srt, 0);
    uint16_t port = homa_socket_port(e.sock);
    struct sniffer sf;
    sniff_start(&sf, port);
    homa_socket *c;
    assert_int_equal(homa_socket_open(crt, 0, &c), 0);
    homa_endpoint v4;
    ep("127.0.0.1", port, &v4);
    call_and_check(c, &v4, 100, 1);    /* short: unscheduled, highest level */
    call_and_check(c, &v4, 500000, 2); /* long: granted, lower levels */
    sniff_stop(&sf, 50000);
    struct seen *sn = &sf.sn;
    print_message("sniffed %d packets: %d DATA (TOS 0x%02x..0x%02x), %d control\n", sn->pkts,
                  sn->data, sn->data_tos_min, sn->data_tos_max, sn->ctl);
    assert_true(sn->pkts > 4);
    assert_int_equal(sn->data + sn->ctl, sn->pkts); /* every TOS is prio << 5 */
    assert_int_equal(sn->ctl_tos_ok, sn->ctl);
    assert_true(sn->ctl > 0);
    assert_true(sn->data_tos_max > sn->data_tos_min); /* several levels used */
    assert_int_equal(sn->look_alike_ok, sn->pkts);
    assert_int_equal(sn->csum_ok, sn->pkts);
    homa_socket_close(c);
    echo_stop(&e);
    homa_runtime_destroy(crt);
    homa_runtime_destroy(srt);
}

/* Two processes with different ports on one host: each sees only its own
 * packets (the BPF filter), although both raw sockets get every packet. */
static void raw_demux__two_processes(void **state)
{
    (void)state;
    if (!have_raw) skip();
    int to_child[2], to_parent[2];
    assert_int_equal(pipe(to_child), 0);
    assert_int_equal(pipe(to_parent), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* A bystander on its own port. */
        homa_runtime *rt = new_rt(HOMA_RT_RAW);
        homa_socket *s;
        if (homa_socket_open(rt, 0, &s) != 0) _exit(2);
        uint16_t port = homa_socket_port(s);
        if (write(to_parent[1], &port, sizeof(port)) != sizeof(port)) _exit(3);
        char go;
        if (read(to_child[0], &go, 1) != 1) _exit(4);
        homa_driver_counters dc;
        homa_runtime_counters(rt, NULL, &dc);
        uint64_t in = dc.datagrams_in + dc.garbage_in;
        if (write(to_parent[1], &in, sizeof(in)) != sizeof(in)) _exit(5);
        homa_socket_close(s);
        homa_runtime_destroy(rt);
        _exit(0);
    }
    uint16_t other;
    assert_int_equal(read(to_parent[0], &other, sizeof(other)), sizeof(other));
    homa_runtime *srt = new_rt(HOMA_RT_RAW), *crt = new_rt(HOMA_RT_RAW);
    struct echo_server e;
    echo_start(&e, srt, 0);
    uint16_t port = homa_socket_port(e.sock);
    assert_true(port != other);
    homa_socket *c;
    assert_int_equal(homa_socket_open(crt, 0, &c), 0);
    homa_endpoint v4, v6;
    ep("127.0.0.1", port, &v4);
    ep("::1", port, &v6);
    for (int i = 0; i < 20; i++) {
        call_and_check(c, &v4, 2000 + 1000 * (size_t)i, (uint64_t)i);
        call_and_check(c, &v6, 2000 + 1000 * (size_t)i, (uint64_t)i + 50);
    }
    assert_int_equal(write(to_child[1], "g", 1), 1);
    uint64_t child_in = 99;
    assert_int_equal(read(to_parent[0], &child_in, sizeof(child_in)), sizeof(child_in));
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(child_in, 0); /* saw none of our traffic */
    homa_driver_counters sc, cc;
    homa_counters se, ce;
    homa_runtime_counters(srt, &se, &sc);
    homa_runtime_counters(crt, &ce, &cc);
    /* Neither saw the other's packets: nothing arrived for a port it lacks. */
    assert_int_equal(se.drop_no_port, 0);
    assert_int_equal(ce.drop_no_port, 0);
    assert_int_equal(sc.garbage_in + cc.garbage_in, 0);
    assert_true(sc.datagrams_in >= 40 && cc.datagrams_in >= 40);
    homa_socket_close(c);
    echo_stop(&e);
    homa_runtime_destroy(crt);
    homa_runtime_destroy(srt);
}

/* Without CAP_NET_RAW the socket fails with a clear error. */
static void raw_perm__unprivileged_user(void **state)
{
    (void)state;
    if (geteuid() != 0) skip(); /* cannot become another user */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
        homa_runtime_options o;
        rt_test_options(&o, 0);
        o.flags |= HOMA_RT_RAW;
        homa_runtime *rt;
        if (homa_runtime_create(&o, &rt) != 0) _exit(11);
        homa_socket *s;
        int rc = homa_socket_open(rt, 0, &s);
        if (rc != HOMA_ERR_PERM) _exit(12);
        if (strstr(homa_strerror(rc), "CAP_NET_RAW") == NULL) _exit(13);
        /* The UDP driver needs no privilege. */
        homa_runtime_destroy(rt);
        o.flags &= ~HOMA_RT_RAW;
        if (homa_runtime_create(&o, &rt) != 0) _exit(14);
        if (homa_socket_open(rt, 0, &s) != 0) _exit(15);
        homa_socket_close(s);
        homa_runtime_destroy(rt);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* A UDP port nobody listens on: the kernel answers ICMP port unreachable
 * and the RPC fails within milliseconds, not after the timeout. */
static void udp_unreach__closed_port_fails_fast(void **state)
{
    (void)state;
    homa_runtime_options o;
    rt_test_options(&o, 0);
    o.config.timeout_ticks = 5000; /* 5 s: a timeout would be obvious */
    homa_runtime *rt;
    assert_int_equal(homa_runtime_create(&o, &rt), 0);
    homa_socket *c;
    assert_int_equal(homa_socket_open(rt, 0, &c), 0);
    const char *hosts[] = {"127.0.0.1", "::1"};
    for (int h = 0; h < 2; h++) {
        /* A port that was free a moment ago. */
        int fd = socket(h ? AF_INET6 : AF_INET, SOCK_DGRAM, 0);
        assert_true(fd >= 0);
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof(ss));
        ss.ss_family = (sa_family_t)(h ? AF_INET6 : AF_INET);
        socklen_t sl = h ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        assert_int_equal(bind(fd, (struct sockaddr *)&ss, sl), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&ss, &sl), 0);
        uint16_t port = ntohs(h ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                : ((struct sockaddr_in *)&ss)->sin_port);
        close(fd);
        homa_endpoint dst;
        ep(hosts[h], port, &dst);
        uint64_t t0 = rt_now_ns();
        homa_msg resp;
        int rc = homa_call(c, &dst, "hello", 5, 10 * SEC, &resp);
        uint64_t took = rt_now_ns() - t0;
        print_message("%s: rc %d (%s) after %.2f ms\n", hosts[h], rc, homa_strerror(rc),
                      (double)took / 1e6);
        assert_int_equal(rc, HOMA_ERR_UNREACHABLE);
        assert_true(took < 500000000ull * SANITIZER_SLOWDOWN); /* the timeout is 5 s */
    }
    homa_driver_counters dc;
    homa_runtime_counters(rt, NULL, &dc);
    assert_true(dc.icmp_unreach >= 2);
    /* A pending ICMP error fails the next send (whatever its destination)
     * without sending it; the driver sends that packet again. */
    assert_int_equal(dc.send_errors, 0);
    homa_socket_close(c);
    homa_runtime_destroy(rt);
}

/* HOMA_DRIVER picks the driver (and is checked). */
static void raw_env__homa_driver(void **state)
{
    (void)state;
    homa_runtime_options o;
    rt_test_options(&o, 1);
    homa_runtime *rt;
    setenv("HOMA_DRIVER", "carrier-pigeon", 1);
    assert_int_equal(homa_runtime_create(&o, &rt), HOMA_ERR_INVAL);
    if (!have_raw) {
        unsetenv("HOMA_DRIVER");
        skip();
    }
    /* raw: the echo's packets are protocol 146 (seen by our own raw socket). */
    setenv("HOMA_DRIVER", "raw", 1);
    assert_int_equal(homa_runtime_create(&o, &rt), 0);
    unsetenv("HOMA_DRIVER");
    struct echo_server e;
    echo_start(&e, rt, 0);
    uint16_t port = homa_socket_port(e.sock);
    struct sniffer sf;
    sniff_start(&sf, port);
    homa_socket *c;
    assert_int_equal(homa_socket_open(rt, 0, &c), 0);
    homa_endpoint v4;
    ep("127.0.0.1", port, &v4);
    call_and_check(c, &v4, 10, 3);
    sniff_stop(&sf, 20000);
    assert_true(sf.sn.pkts >= 2);
    homa_socket_close(c);
    echo_stop(&e);
    homa_runtime_destroy(rt);
}

/* HOMA_RT_NO_UNREACH: the ICMP answer is ignored, the RPC times out. */
static void udp_unreach__ignored_with_no_unreach(void **state)
{
    (void)state;
    homa_runtime_options o;
    rt_test_options(&o, 0);
    o.config.timeout_ticks = 100;
    o.flags |= HOMA_RT_NO_UNREACH;
    homa_runtime *rt;
    assert_int_equal(homa_runtime_create(&o, &rt), 0);
    homa_socket *c, *dead;
    assert_int_equal(homa_socket_open(rt, 0, &c), 0);
    assert_int_equal(homa_socket_open(rt, 0, &dead), 0);
    homa_endpoint dst;
    ep("127.0.0.1", homa_socket_port(dead), &dst);
    homa_socket_close(dead);
    homa_msg resp;
    assert_int_equal(homa_call(c, &dst, "x", 1, 10 * SEC, &resp), HOMA_ERR_TIMEOUT);
    homa_driver_counters dc;
    homa_runtime_counters(rt, NULL, &dc);
    assert_true(dc.icmp_unreach >= 1); /* seen, and ignored */
    homa_socket_close(c);
    homa_runtime_destroy(rt);
}

int main(void)
{
    int fd = socket(AF_INET, SOCK_RAW, HOMA_IPPROTO);
    have_raw = fd >= 0;
    if (fd >= 0) close(fd);
    if (!have_raw) fprintf(stderr, "no CAP_NET_RAW: raw driver tests skipped\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(raw_echo__ipv4_ipv6_sizes),
        cmocka_unit_test(raw_bind__one_address),
        cmocka_unit_test(raw_wire__tos_flags_checksum),
        cmocka_unit_test(raw_demux__two_processes),
        cmocka_unit_test(raw_perm__unprivileged_user),
        cmocka_unit_test(udp_unreach__closed_port_fails_fast),
        cmocka_unit_test(udp_unreach__ignored_with_no_unreach),
        cmocka_unit_test(raw_env__homa_driver),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc == 0 && !have_raw) return 77;
    return rc;
}
