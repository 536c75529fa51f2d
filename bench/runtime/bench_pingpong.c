/* bench_pingpong: echo round-trip times over loopback, Homa vs TCP, between
 * two processes (the server is a forked child).  Not a ctest test: a quick
 * measurement tool.
 *
 *   bench_pingpong [SIZE] [COUNT] [homa|tcp|both] [ADDR]
 *
 * Defaults: 100 bytes, 20,000 round trips, both, 127.0.0.1.  The first 1,000
 * round trips are warm-up and not counted.  TCP uses TCP_NODELAY and one
 * connection; Homa uses a runtime with default options (busy-poll 50 us). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <homa/homa.h>

#include "integration/rt_util.h"

#define WARMUP 1000

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *name, size_t size, uint64_t *rtt, int n)
{
    qsort(rtt, (size_t)n, sizeof(*rtt), cmp_u64);
    printf("%-4s %8zu B x %d: min %7.1f  p50 %7.1f  p90 %7.1f  p99 %7.1f us\n", name, size, n,
           rtt[0] / 1e3, rtt[n / 2] / 1e3, rtt[n * 9 / 10] / 1e3, rtt[n * 99 / 100] / 1e3);
}

static int read_full(int fd, char *b, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const char *b, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t r = write(fd, b + put, n - put);
        if (r <= 0) return -1;
        put += (size_t)r;
    }
    return 0;
}

static void bench_tcp(size_t size, int count, const char *host)
{
    int one = 1;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, host, &a.sin_addr);
    if (bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, 1) != 0) {
        perror("tcp bind");
        return;
    }
    socklen_t alen = sizeof(a);
    getsockname(ls, (struct sockaddr *)&a, &alen);
    char *buf = calloc(1, size ? size : 1);
    pid_t pid = fork();
    if (pid == 0) {
        int c = accept(ls, NULL, NULL);
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        while (read_full(c, buf, size) == 0 && write_full(c, buf, size) == 0)
            ;
        _exit(0);
    }
    close(ls);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, (struct sockaddr *)&a, sizeof(a)) != 0) {
        perror("tcp connect");
        return;
    }
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint64_t *rtt = malloc(sizeof(*rtt) * (size_t)count);
    for (int i = 0; i < count + WARMUP; i++) {
        uint64_t t0 = rt_now_ns();
        if (write_full(c, buf, size) != 0 || read_full(c, buf, size) != 0) {
            fprintf(stderr, "tcp: connection failed\n");
            break;
        }
        if (i >= WARMUP) rtt[i - WARMUP] = rt_now_ns() - t0;
    }
    report("tcp", size, rtt, count);
    close(c);
    waitpid(pid, NULL, 0);
    free(rtt);
    free(buf);
}

static void bench_homa(size_t size, int count, const char *host)
{
    int fds[2];
    if (pipe(fds) != 0) return;
    /* Fork before any runtime exists: runtimes have threads. */
    pid_t pid = fork();
    if (pid == 0) {
        homa_runtime *rt;
        homa_socket *s;
        if (homa_runtime_create(NULL, &rt) != 0 || homa_socket_open(rt, 0, &s) != 0) _exit(1);
        uint16_t port = homa_socket_port(s);
        if (write(fds[1], &port, sizeof(port)) != (ssize_t)sizeof(port)) _exit(1);
        for (;;) {
            homa_msg m;
            if (homa_recv(s, HOMA_RECV_REQUEST, 0, HOMA_FOREVER, &m) != 0) continue;
            homa_reply_msg(s, &m, m.data, m.length);
            homa_release(s, &m);
        }
    }
    close(fds[1]); /* a server that fails to start then ends the read */
    uint16_t port = 0;
    if (read(fds[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
        fprintf(stderr, "homa: server failed to start\n");
        return;
    }
    homa_runtime *rt;
    homa_socket *s;
    homa_endpoint dst;
    if (homa_runtime_create(NULL, &rt) != 0 || homa_socket_open(rt, 0, &s) != 0 ||
        homa_endpoint_from_host(host, port, &dst) != 0) {
        fprintf(stderr, "homa: client setup failed\n");
        return;
    }
    char *buf = calloc(1, size ? size : 1);
    uint64_t *rtt = malloc(sizeof(*rtt) * (size_t)count);
    int done = 0;
    for (int i = 0; i < count + WARMUP; i++) {
        uint64_t t0 = rt_now_ns();
        homa_msg m;
        int rc = homa_call(s, &dst, buf, size, 5000000000ll, &m);
        if (rc != 0) {
            fprintf(stderr, "homa: %s\n", homa_strerror(rc));
            break;
        }
        homa_release(s, &m);
        if (i >= WARMUP) rtt[done++] = rt_now_ns() - t0;
    }
    if (done > 0) report("homa", size, rtt, done);
    homa_driver_counters dc;
    homa_runtime_counters(rt, NULL, &dc);
    printf("     client: %.2f send syscalls, %.2f recv syscalls, %.3f sleeps per RPC\n",
           (double)dc.send_syscalls / (count + WARMUP), (double)dc.recv_syscalls / (count + WARMUP),
           (double)dc.poll_syscalls / (count + WARMUP));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    homa_socket_close(s);
    homa_runtime_destroy(rt);
    free(rtt);
    free(buf);
}

int main(int argc, char **argv)
{
    size_t size = argc > 1 ? (size_t)atol(argv[1]) : 100;
    int count = argc > 2 ? atoi(argv[2]) : 20000;
    const char *which = argc > 3 ? argv[3] : "both";
    const char *host = argc > 4 ? argv[4] : "127.0.0.1";
    if (count < 10) count = 10;
    if (strcmp(which, "tcp") != 0) bench_homa(size, count, host);
    if (strcmp(which, "homa") != 0 && strchr(host, ':') == NULL) bench_tcp(size, count, host);
    return 0;
}
