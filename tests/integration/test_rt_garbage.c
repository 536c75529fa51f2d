/* Garbage UDP datagrams sent to a server port while RPCs are in progress:
 * the RPCs are undisturbed and the garbage is counted (by the driver when
 * it is not structurally Homa, by the engine's drop counters otherwise). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <homa/homa.h>

#include "core/wire.h"
#include "integration/rt_util.h"

#define RPCS 300
#define GARBAGE 3000

static homa_socket *server;

static void *server_main(void *arg)
{
    (void)arg;
    for (;;) {
        homa_msg m;
        int rc = homa_recv(server, HOMA_RECV_REQUEST, 0, HOMA_FOREVER, &m);
        if (rc == HOMA_ERR_SHUTDOWN) break;
        if (rc != 0) continue;
        homa_reply_msg(server, &m, m.data, m.length);
        homa_release(server, &m);
    }
    return NULL;
}

struct garbage {
    uint16_t port;
    int invalid; /* structurally invalid: counted by the driver */
    int zero_id; /* well-formed GRANTs with sender_id 0: engine drop */
    int stray;   /* well-formed GRANTs for RPCs that don't exist */
};

static void *garbage_main(void *arg)
{
    struct garbage *g = arg;
    int fd4 = socket(AF_INET, SOCK_DGRAM, 0);
    int fd6 = socket(AF_INET6, SOCK_DGRAM, 0);
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons(g->port)};
    a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(g->port)};
    a6.sin6_addr = in6addr_loopback;
    uint64_t rng = 77;
    uint8_t buf[2000];
    for (int i = 0; i < GARBAGE; i++) {
        rng = rt_mix(rng + 1);
        size_t len;
        for (size_t k = 0; k < sizeof(buf); k++)
            buf[k] = (uint8_t)rt_mix(rng + k);
        switch (i % 5) {
        case 0: /* shorter than any header (including empty) */
            len = rng % HOMA_COMMON_HDR_LEN;
            g->invalid++;
            break;
        case 1: /* unknown type */
            len = HOMA_COMMON_HDR_LEN + rng % 1500;
            buf[11] = (uint8_t)(0x20 + rng % 0xd0);
            g->invalid++;
            break;
        case 2: /* known type, truncated header */
            buf[11] = HOMA_PKT_ACK;
            len = HOMA_COMMON_HDR_LEN + rng % (HOMA_ACK_LEN - HOMA_COMMON_HDR_LEN);
            g->invalid++;
            break;
        case 3: /* well formed, but sender_id 0 */
            buf[11] = HOMA_PKT_GRANT;
            buf[32] = 0;
            memset(buf + 20, 0, 8);
            len = HOMA_GRANT_LEN;
            g->zero_id++;
            break;
        default: /* well formed GRANT for an RPC nobody has */
            buf[11] = HOMA_PKT_GRANT;
            buf[2] = (uint8_t)(g->port >> 8);
            buf[3] = (uint8_t)g->port;
            buf[27] |= 1;
            buf[32] = 0;
            memset(buf + 28, 0, 2); /* small offset */
            len = HOMA_GRANT_LEN;
            g->stray++;
            break;
        }
        if (i & 1)
            sendto(fd4, buf, len, 0, (struct sockaddr *)&a4, sizeof(a4));
        else
            sendto(fd6, buf, len, 0, (struct sockaddr *)&a6, sizeof(a6));
        if (i % 100 == 0) usleep(1000);
    }
    close(fd4);
    close(fd6);
    return NULL;
}

static void test_garbage(void **state)
{
    (void)state;
    homa_runtime_options o;
    rt_test_options(&o, 0);
    homa_runtime *srt, *crt;
    assert_int_equal(homa_runtime_create(&o, &srt), 0);
    assert_int_equal(homa_runtime_create(&o, &crt), 0);
    assert_int_equal(homa_socket_open(srt, 0, &server), 0);
    pthread_t sth, gth;
    pthread_create(&sth, NULL, server_main, NULL);
    homa_socket *c;
    assert_int_equal(homa_socket_open(crt, 0, &c), 0);
    homa_endpoint dst;
    assert_int_equal(homa_endpoint_from_host("::1", homa_socket_port(server), &dst), 0);

    struct garbage g = {.port = homa_socket_port(server)};
    pthread_create(&gth, NULL, garbage_main, &g);
    static uint8_t req[200000];
    uint64_t rng = 5;
    for (int i = 0; i < RPCS; i++) {
        rng = rt_mix(rng + 1);
        size_t len = 8 + rng % (sizeof(req) - 8);
        rt_fill(req, len, (uint64_t)i);
        homa_msg m;
        assert_int_equal(homa_call(c, &dst, req, len, 10000000000ll, &m), 0);
        assert_int_equal(m.length, len);
        assert_memory_equal(m.data, req, len);
        homa_release(c, &m);
    }
    pthread_join(gth, NULL);
    usleep(100000); /* let the last garbage be read */

    homa_counters ec;
    homa_driver_counters dc;
    homa_runtime_counters(srt, &ec, &dc);
    fprintf(stderr,
            "garbage: driver garbage_in %lu of %d invalid; engine drop_zero_id %lu "
            "(%d sent), drop_no_rpc %lu (%d stray)\n",
            (unsigned long)dc.garbage_in, g.invalid, (unsigned long)ec.drop_zero_id, g.zero_id,
            (unsigned long)ec.drop_no_rpc, g.stray);
    /* Loopback rarely loses anything, but a datagram the kernel drops for
     * lack of buffer space is never seen: allow a small shortfall. */
    assert_true(dc.garbage_in <= (uint64_t)g.invalid);
    assert_true(dc.garbage_in >= (uint64_t)g.invalid * 9 / 10);
    assert_true(ec.drop_zero_id >= (uint64_t)g.zero_id * 9 / 10);
    assert_true(ec.drop_no_rpc >= (uint64_t)g.stray * 9 / 10);

    homa_socket_close(c);
    homa_socket_close(server);
    pthread_join(sth, NULL);
    homa_runtime_destroy(crt);
    homa_runtime_destroy(srt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_garbage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
