/* Packets follow the path MTU of each peer (run by path_mtu.sh in two
 * network namespaces joined by a veth pair with MTU 1500):
 *
 *   test_rt_path_mtu server PORT      echo server on the veth address
 *   test_rt_path_mtu client HOST:PORT the checks
 *
 * The client's runtime has one socket and talks to two peers: the server
 * in the other namespace, behind the 1,500-byte link, and an echo thread of
 * its own on 127.0.0.1 (loopback, MTU 65,536).  RPCs of 0 B to 1 MB to the
 * first must go in datagrams that fit 1,500 bytes (no IP fragments), those
 * to the second in 64 KB ones: the packet size is chosen per peer.  The
 * server's responses, to a peer it first met by a request, must fit too. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_util.h"

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "test_rt_path_mtu: " __VA_ARGS__);                                         \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

static const size_t sizes[] = {0, 1, 1400, 1452, 1453, 100000, 1000000};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void serve(homa_socket *s, int count)
{
    for (int i = 0; count < 0 || i < count; i++) {
        homa_msg m;
        int rc = homa_recv(s, HOMA_RECV_REQUEST, 0, HOMA_FOREVER, &m);
        if (rc == HOMA_ERR_SHUTDOWN) return;
        if (rc != 0) FAIL("server recv: %s", homa_strerror(rc));
        rc = homa_reply(s, m.id, m.data, m.length);
        homa_release(s, &m);
        if (rc != 0) FAIL("reply: %s", homa_strerror(rc));
    }
}

/* Serves the NSIZES loopback calls, then returns: the socket is closed only
 * after the join (closing it under a thread still in homa_release() was a
 * use after free). */
static void *loop_server(void *arg)
{
    serve(arg, (int)NSIZES);
    return NULL;
}

/* RPCs of every size to dst; returns the UDP payload bytes per datagram
 * the client sent meanwhile. */
static double calls(homa_runtime *rt, homa_socket *s, const homa_endpoint *dst)
{
    homa_driver_counters a, b;
    homa_runtime_counters(rt, NULL, &a);
    static uint8_t buf[1000000];
    for (size_t i = 0; i < NSIZES; i++) {
        rt_fill(buf, sizes[i], 1000 + i);
        homa_msg r;
        int rc = homa_call(s, dst, buf, sizes[i], 20ll * 1000000000, &r);
        if (rc != 0) FAIL("call of %zu B: %s", sizes[i], homa_strerror(rc));
        uint64_t tag = 1000 + i;
        if (r.length != sizes[i] || !rt_check(r.data, r.length, &tag))
            FAIL("response of %zu B wrong (%u B)", sizes[i], (unsigned)r.length);
        homa_release(s, &r);
    }
    homa_runtime_counters(rt, NULL, &b);
    return (double)(b.bytes_out - a.bytes_out) / (double)(b.datagrams_out - a.datagrams_out);
}

int main(int argc, char **argv)
{
    if (argc != 3) FAIL("usage: test_rt_path_mtu server PORT | client HOST:PORT");
    homa_runtime *rt;
    int rc = homa_runtime_create(NULL, &rt);
    if (rc != 0) FAIL("runtime: %s", homa_strerror(rc));
    if (strcmp(argv[1], "server") == 0) {
        homa_socket *s;
        rc = homa_socket_open(rt, (uint16_t)atoi(argv[2]), &s);
        if (rc != 0) FAIL("open: %s", homa_strerror(rc));
        printf("ready\n");
        fflush(stdout);
        serve(s, (int)NSIZES);
        homa_socket_linger(s, 5ll * 1000000000);
        /* The server met the client by its requests (a new peer on input):
         * its responses must fit the 1,500-byte path too. */
        homa_driver_counters d;
        homa_runtime_counters(rt, NULL, &d);
        double per = (double)d.bytes_out / (double)(d.datagrams_out ? d.datagrams_out : 1);
        printf("server: %.0f bytes per datagram\n", per);
        if (per > 1472) FAIL("server datagrams to the 1,500-byte path average %.0f B", per);
        homa_socket_close(s);
        homa_runtime_destroy(rt);
        return 0;
    }
    homa_endpoint far, near = {{{0}}, 0};
    if (homa_endpoint_parse(argv[2], &far) != 0) FAIL("bad endpoint %s", argv[2]);
    homa_socket *s, *ls;
    homa_endpoint lo;
    if (homa_endpoint_parse("127.0.0.1:0", &lo) != 0 || homa_socket_open(rt, 0, &s) != 0 ||
        homa_socket_bind(rt, &lo, &ls) != 0)
        FAIL("sockets");
    homa_socket_local(ls, &near);
    pthread_t th;
    pthread_create(&th, NULL, loop_server, ls);
    double far_per = calls(rt, s, &far);
    double near_per = calls(rt, s, &near);
    printf("bytes per datagram: %.0f to the peer behind MTU 1500, %.0f over loopback\n", far_per,
           near_per);
    /* 1,500 less 20 (IPv4) and 8 (UDP) */
    if (far_per > 1472) FAIL("datagrams to the 1,500-byte path average %.0f B: fragments", far_per);
    if (near_per < 8000) FAIL("loopback datagrams average only %.0f B", near_per);
    pthread_join(th, NULL);
    homa_socket_close(ls);
    homa_socket_close(s);
    homa_runtime_destroy(rt);
    printf("test_rt_path_mtu: ok\n");
    return 0;
}
