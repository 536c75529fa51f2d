/* cluster_probe: UDP traffic for the cluster smoke test (cluster_smoke.sh).
 *
 *   cluster_probe echo PORT
 *       echo every datagram back to its sender, with the TOS it arrived with
 *   cluster_probe flood HOST PORT TOS MBITS SECONDS
 *       send 1,400-byte datagrams with TOS at MBITS Mbit/s for SECONDS
 *   cluster_probe ping HOST PORT TOS COUNT INTERVAL_US
 *       send COUNT 64-byte probes with TOS, one every INTERVAL_US, and print
 *       "sent N received R p50_us X p99_us Y max_us Z"
 *
 * IPv4 only; meant to run inside the namespaces of an emulated cluster. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int make_socket(const char *host, int port, int tos, struct sockaddr_in *dst)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        perror("socket");
        exit(1);
    }
    if (setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) < 0) perror("IP_TOS");
    memset(dst, 0, sizeof(*dst));
    dst->sin_family = AF_INET;
    dst->sin_port = htons((uint16_t)port);
    if (host && inet_pton(AF_INET, host, &dst->sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", host);
        exit(2);
    }
    return fd;
}

static int echo(int port)
{
    struct sockaddr_in a;
    int fd = make_socket(NULL, port, 0, &a);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    int on = 1;
    setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof(on));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        perror("bind");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    char buf[2048], cbuf[64];
    for (;;) {
        struct sockaddr_in from;
        struct iovec iov = {buf, sizeof(buf)};
        struct msghdr m = {.msg_name = &from,
                           .msg_namelen = sizeof(from),
                           .msg_iov = &iov,
                           .msg_iovlen = 1,
                           .msg_control = cbuf,
                           .msg_controllen = sizeof(cbuf)};
        ssize_t n = recvmsg(fd, &m, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            perror("recvmsg");
            return 1;
        }
        int tos = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
            if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS)
                tos = *(unsigned char *)CMSG_DATA(c);
        setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
        sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, sizeof(from));
    }
}

static int flood(const char *host, int port, int tos, double mbits, double seconds)
{
    struct sockaddr_in dst;
    int fd = make_socket(host, port, tos, &dst);
    int sndbuf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    char buf[1400];
    memset(buf, 0x33, sizeof(buf));
    double gap = sizeof(buf) * 8.0 / (mbits * 1e6) * 1e9; /* ns per datagram */
    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9);
    double next = (double)start;
    uint64_t sent = 0;
    for (;;) {
        uint64_t now = now_ns();
        if (now >= end) break;
        while ((double)now >= next) {
            /* Errors (queue full) are expected: the point is to fill it. */
            sendto(fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&dst, sizeof(dst));
            sent++;
            next += gap;
        }
        uint64_t wait = (uint64_t)next > now ? (uint64_t)next - now : 0;
        if (wait > 20000) {
            struct timespec ts = {0, (long)(wait - 10000)};
            nanosleep(&ts, NULL);
        }
    }
    printf("sent %llu\n", (unsigned long long)sent);
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int ping(const char *host, int port, int tos, int count, int interval_us)
{
    struct sockaddr_in dst;
    int fd = make_socket(host, port, tos, &dst);
    uint64_t *rtt = calloc((size_t)count, sizeof(uint64_t));
    if (!rtt) return 1;
    int got = 0;
    for (int i = 0; i < count; i++) {
        uint64_t msg[8] = {(uint64_t)i, now_ns()};
        sendto(fd, msg, sizeof(msg), 0, (struct sockaddr *)&dst, sizeof(dst));
        uint64_t deadline = now_ns() + (uint64_t)interval_us * 1000;
        for (;;) {
            uint64_t now = now_ns();
            if (now >= deadline) break;
            struct pollfd p = {fd, POLLIN, 0};
            int ms = (int)((deadline - now) / 1000000) + 1;
            if (poll(&p, 1, ms) <= 0) continue;
            uint64_t r[8];
            ssize_t n = recv(fd, r, sizeof(r), MSG_DONTWAIT);
            if (n == (ssize_t)sizeof(r) && got < count) rtt[got++] = now_ns() - r[1];
        }
    }
    qsort(rtt, (size_t)got, sizeof(uint64_t), cmp_u64);
    double p50 = got ? (double)rtt[(got - 1) / 2] / 1000 : -1;
    double p99 = got ? (double)rtt[(size_t)((got - 1) * 0.99)] / 1000 : -1;
    double mx = got ? (double)rtt[got - 1] / 1000 : -1;
    printf("sent %d received %d p50_us %.1f p99_us %.1f max_us %.1f\n", count, got, p50, p99, mx);
    free(rtt);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "echo") == 0) return echo(atoi(argv[2]));
    if (argc == 7 && strcmp(argv[1], "flood") == 0)
        return flood(argv[2], atoi(argv[3]), (int)strtol(argv[4], NULL, 0), atof(argv[5]),
                     atof(argv[6]));
    if (argc == 7 && strcmp(argv[1], "ping") == 0)
        return ping(argv[2], atoi(argv[3]), (int)strtol(argv[4], NULL, 0), atoi(argv[5]),
                    atoi(argv[6]));
    fprintf(stderr, "usage: cluster_probe echo PORT | flood HOST PORT TOS MBITS SECONDS |"
                    " ping HOST PORT TOS COUNT INTERVAL_US\n");
    return 2;
}
