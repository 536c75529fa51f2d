/* A small libhoma peer for the namespace tests (raw_netns.sh).  The driver
 * comes from HOMA_DRIVER (udp or raw), like any libhoma program.
 *
 *   raw_peer serve PORT SECONDS READYFILE
 *       echo server on PORT; writes READYFILE once listening; at the end
 *       (SECONDS, or SIGTERM) prints "served N in D garbage G no_port P"
 *   raw_peer call HOST PORT
 *       echo RPCs of 0 B .. 1 MB, each verified byte by byte; "ok N"
 *   raw_peer unreach HOST PORT
 *       one RPC that must fail with HOMA_ERR_UNREACHABLE well before the
 *       timeout; prints "unreachable after X ms"
 * Exit status 0 on success, 1 on a failed check, 2 on bad usage. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <homa/homa.h>

#include "integration/rt_util.h"

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

static homa_runtime *runtime(void)
{
    homa_runtime_options o;
    rt_test_options(&o, 1); /* HOMA_DRIVER, HOMA_MTU, HOMA_PCAP apply */
    o.config.timeout_ticks = 3000;
    homa_runtime *rt = NULL;
    int rc = homa_runtime_create(&o, &rt);
    if (rc != 0) {
        fprintf(stderr, "raw_peer: runtime: %s\n", homa_strerror(rc));
        exit(1);
    }
    return rt;
}

static int endpoint(const char *host, const char *port, homa_endpoint *out)
{
    char s[128];
    snprintf(s, sizeof(s), strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
    return homa_endpoint_parse(s, out);
}

static int serve(int argc, char **argv)
{
    if (argc != 5) return 2;
    signal(SIGTERM, on_term);
    homa_runtime *rt = runtime();
    homa_socket *s;
    int rc = homa_socket_open(rt, (uint16_t)atoi(argv[2]), &s);
    if (rc != 0) {
        fprintf(stderr, "raw_peer: open: %s\n", homa_strerror(rc));
        return 1;
    }
    FILE *f = fopen(argv[4], "w");
    if (f != NULL) fclose(f);
    uint64_t end = rt_now_ns() + (uint64_t)atoi(argv[3]) * 1000000000ull;
    int served = 0;
    while (!stop && rt_now_ns() < end) {
        homa_msg m;
        if (homa_recv(s, HOMA_RECV_REQUEST, 0, 20000000, &m) != 0) continue;
        if (homa_reply(s, m.id, m.data, m.length) == 0) served++;
        homa_release(s, &m);
    }
    homa_socket_linger(s, 200000000);
    homa_counters ec;
    homa_driver_counters dc;
    homa_runtime_counters(rt, &ec, &dc);
    printf("served %d in %llu garbage %llu no_port %llu\n", served,
           (unsigned long long)dc.datagrams_in, (unsigned long long)dc.garbage_in,
           (unsigned long long)ec.drop_no_port);
    homa_socket_close(s);
    homa_runtime_destroy(rt);
    return 0;
}

static int call(int argc, char **argv)
{
    if (argc != 4) return 2;
    homa_runtime *rt = runtime();
    homa_socket *c;
    homa_endpoint dst;
    if (endpoint(argv[2], argv[3], &dst) != 0 || homa_socket_open(rt, 0, &c) != 0) return 1;
    static const size_t sizes[] = {0, 1, 100, 1400, 1500, 5000, 65000, 200000, 1000000};
    int n = (int)(sizeof(sizes) / sizeof(sizes[0])), ok = 0;
    uint8_t *buf = malloc(1000000);
    for (int i = 0; i < n; i++) {
        rt_fill(buf, sizes[i], 1000 + (uint64_t)i);
        homa_msg r;
        int rc = homa_call(c, &dst, buf, sizes[i], 10000000000ll, &r);
        if (rc != 0) {
            fprintf(stderr, "raw_peer: %zu bytes: %s\n", sizes[i], homa_strerror(rc));
            continue;
        }
        if (r.length == sizes[i] && (sizes[i] == 0 || memcmp(r.data, buf, sizes[i]) == 0))
            ok++;
        else
            fprintf(stderr, "raw_peer: %zu bytes: wrong echo\n", sizes[i]);
        homa_release(c, &r);
    }
    free(buf);
    printf("ok %d of %d\n", ok, n);
    homa_socket_close(c);
    homa_runtime_destroy(rt);
    return ok == n ? 0 : 1;
}

static int unreach(int argc, char **argv)
{
    if (argc != 4) return 2;
    homa_runtime *rt = runtime();
    homa_socket *c;
    homa_endpoint dst;
    if (endpoint(argv[2], argv[3], &dst) != 0 || homa_socket_open(rt, 0, &c) != 0) return 1;
    uint64_t t0 = rt_now_ns();
    homa_msg r;
    int rc = homa_call(c, &dst, "anyone?", 7, 10000000000ll, &r);
    double ms = (double)(rt_now_ns() - t0) / 1e6;
    printf("%s after %.2f ms\n", rc == HOMA_ERR_UNREACHABLE ? "unreachable" : homa_strerror(rc),
           ms);
    if (rc == 0) homa_release(c, &r);
    homa_socket_close(c);
    homa_runtime_destroy(rt);
    /* The timeout is 3 s; the ICMP answer takes a round trip. */
    return rc == HOMA_ERR_UNREACHABLE && ms < 1000 ? 0 : 1;
}

int main(int argc, char **argv)
{
    int rc = 2;
    if (argc >= 2 && strcmp(argv[1], "serve") == 0) rc = serve(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "call") == 0) rc = call(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "unreach") == 0) rc = unreach(argc, argv);
    if (rc == 2)
        fprintf(stderr, "usage: raw_peer serve PORT SECONDS READYFILE | call HOST PORT | "
                        "unreach HOST PORT\n");
    return rc;
}
