/* echo_client: sends requests to an echo server and checks the answers.
 *
 *   echo_client HOST:PORT [COUNT] [SIZE]
 *
 * HOST:PORT is "127.0.0.1:4000", "[::1]:4000" or "name:4000".  Prints the
 * median and 99th-percentile round-trip time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <homa/homa.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: echo_client HOST:PORT [COUNT] [SIZE]\n");
        return 2;
    }
    int count = argc > 2 ? atoi(argv[2]) : 1000;
    size_t size = argc > 3 ? (size_t)atol(argv[3]) : 100;
    if (count < 1) count = 1;
    homa_endpoint server;
    if (homa_endpoint_parse(argv[1], &server) != 0) {
        fprintf(stderr, "echo_client: cannot parse address %s\n", argv[1]);
        return 2;
    }
    homa_socket *s;
    int rc = homa_socket_open(NULL, 0, &s); /* ephemeral client port */
    if (rc != 0) {
        fprintf(stderr, "echo_client: %s\n", homa_strerror(rc));
        return 1;
    }
    char *buf = malloc(size ? size : 1);
    uint64_t *rtt = malloc(sizeof(*rtt) * (size_t)count);
    for (int i = 0; i < count; i++) {
        memset(buf, 'a' + i % 26, size);
        uint64_t t0 = now_ns();
        homa_msg resp;
        rc = homa_call(s, &server, buf, size, 5000000000ll /* 5 s */, &resp);
        if (rc != 0) {
            fprintf(stderr, "echo_client: request %d: %s\n", i, homa_strerror(rc));
            return 1;
        }
        rtt[i] = now_ns() - t0;
        int ok = resp.length == size && memcmp(resp.data, buf, size) == 0;
        homa_release(s, &resp);
        if (!ok) {
            fprintf(stderr, "echo_client: request %d: wrong answer\n", i);
            return 1;
        }
    }
    qsort(rtt, (size_t)count, sizeof(*rtt), cmp_u64);
    printf("%d x %zu bytes: median %.1f us, p99 %.1f us\n", count, size, rtt[count / 2] / 1e3,
           rtt[count * 99 / 100] / 1e3);
    homa_socket_close(s);
    free(buf);
    free(rtt);
    return 0;
}
