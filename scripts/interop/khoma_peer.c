// SPDX-License-Identifier: MIT
// khoma_peer: the kernel side of libhoma's interop tests. Runs inside the
// peer VM on the Linux Homa module's socket API (its uapi homa.h) and speaks
// the payload convention of tests/interop: byte i of a message of length L
// is hx_pattern(L, i), so either side can verify any message without a
// header.
//
//   khoma_peer server [--port P] [--resp N] [--delay-ms D] [--lose N]
//                     echo (or answer N bytes), D ms after the request;
//                     SIGUSR1 prints "khoma_peer: info num_rpcs N" (the
//                     socket's live RPCs, from HOMAIOCINFO); --lose N: the
//                     first N requests are lost: the socket is closed (which
//                     frees its RPCs) and at once opened again on the port
//   khoma_peer client --server A:P --lens L1,L2,... [--count N]
//                     [--inflight K] [--seconds S] [--timeout-ok] [--stall-s T]
//                     --stall-s T: when no RPC completes for T seconds, print
//                     the socket's RPCs (HOMAIOCINFO) and stop with FAIL
//                     instead of waiting for ever
//
//   khoma_peer tcp-server [--port P]
//   khoma_peer tcp-client --server A:P --lens ... [--count N] [--seconds S]
//                     the same RPCs over TCP (a 4-byte length, then the
//                     bytes; the server echoes), for speed comparisons
//
// The client prints one line per length, then "khoma_peer: ok ..." or
// "khoma_peer: FAIL ..." and exits 0 only when every response verified.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "homa.h"

#define REGION_BYTES (2000UL * HOMA_BPAGE_SIZE)
#define MAX_LENS 64
#define MAX_INFLIGHT 64

static uint8_t hx_pattern(uint32_t len, uint32_t i)
{
    // A per-word hash of the offset and the length: a segment placed at the
    // wrong offset, or a message of the wrong length, shows.
    uint32_t v = (i / 4) * 2654435761u ^ (len * 40503u + 0x9e37u);
    return (uint8_t)(v >> (8 * (i % 4)));
}

static char *region;
static volatile sig_atomic_t want_info;

static void on_usr1(int sig)
{
    (void)sig;
    want_info = 1;
}

static volatile sig_atomic_t alarm_fired;
static void on_alarm(int sig)
{
    (void)sig;
    alarm_fired = 1;
}

// Every live RPC of the socket as the module sees it (for a stalled client).
static void print_rpcs(int fd)
{
    static struct homa_rpc_info rpcs[MAX_INFLIGHT];
    struct homa_info info;
    memset(&info, 0, sizeof(info));
    info.rpc_info = (uintptr_t)rpcs;
    info.rpc_info_length = sizeof(rpcs);
    if (ioctl(fd, HOMAIOCINFO, &info) < 0) {
        printf("khoma_peer: HOMAIOCINFO: %s\n", strerror(errno));
        fflush(stdout);
        return;
    }
    printf("khoma_peer: stalled: %u live RPCs, bpool_avail_bytes %llu\n", info.num_rpcs,
           (unsigned long long)info.bpool_avail_bytes);
    for (unsigned i = 0; i < info.num_rpcs && i < MAX_INFLIGHT; i++) {
        const struct homa_rpc_info *r = &rpcs[i];
        printf("khoma_peer: rpc id %llu cookie %llu tx len %d sent %u granted %u prio %u"
               " rx len %d remaining %u gaps %u gap_bytes %u granted %u flags 0x%x\n",
               (unsigned long long)r->id, (unsigned long long)r->completion_cookie,
               r->tx_length, r->tx_sent, r->tx_granted, r->tx_prio, r->rx_length,
               r->rx_remaining, r->rx_gaps, r->rx_gap_bytes, r->rx_granted, r->flags);
    }
    fflush(stdout);
}

static void print_info(int fd)
{
    struct homa_info info;
    memset(&info, 0, sizeof(info));
    if (ioctl(fd, HOMAIOCINFO, &info) < 0)
        printf("khoma_peer: HOMAIOCINFO: %s\n", strerror(errno));
    else
        printf("khoma_peer: info num_rpcs %u\n", info.num_rpcs);
    fflush(stdout);
}
static uint8_t *sendbuf;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int open_sock(int port)
{
    int fd = socket(AF_INET, SOCK_DGRAM, IPPROTO_HOMA);
    if (fd < 0) {
        perror("khoma_peer: socket(IPPROTO_HOMA)");
        return -1;
    }
    if (port > 0) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
            perror("khoma_peer: bind");
            return -1;
        }
    }
    region = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) {
        perror("khoma_peer: mmap");
        return -1;
    }
    struct homa_rcvbuf_args rb = {.start = (uintptr_t)region, .length = REGION_BYTES};
    if (setsockopt(fd, IPPROTO_HOMA, SO_HOMA_RCVBUF, &rb, sizeof(rb)) < 0) {
        perror("khoma_peer: SO_HOMA_RCVBUF");
        return -1;
    }
    sendbuf = malloc(HOMA_MAX_MESSAGE_LENGTH);
    return sendbuf ? fd : -1;
}

// Checks a received message against the pattern; returns the first bad
// offset or -1.
static long verify(const struct homa_recvmsg_args *ra, uint32_t len)
{
    uint32_t off = 0;
    for (uint32_t b = 0; b < ra->num_bpages && off < len; b++) {
        uint32_t n = len - off;
        if (n > HOMA_BPAGE_SIZE) n = HOMA_BPAGE_SIZE;
        const uint8_t *p = (const uint8_t *)region + ra->bpage_offsets[b];
        for (uint32_t i = 0; i < n; i++)
            if (p[i] != hx_pattern(len, off + i)) return (long)(off + i);
        off += n;
    }
    return off == len ? -1 : (long)off;
}

static void fill(uint32_t len)
{
    for (uint32_t i = 0; i < len; i++)
        sendbuf[i] = hx_pattern(len, i);
}

static ssize_t send_msg(int fd, const struct sockaddr_in *to, uint64_t id, uint32_t len,
                        uint64_t cookie, uint64_t *id_out)
{
    struct homa_sendmsg_args sa = {.id = id, .completion_cookie = cookie};
    struct iovec iov = {.iov_base = sendbuf, .iov_len = len};
    struct msghdr m = {.msg_name = (void *)to,
                       .msg_namelen = sizeof(*to),
                       .msg_iov = &iov,
                       .msg_iovlen = 1,
                       // The module reads the args from user space itself;
                       // a nonzero msg_controllen makes it refuse (EINVAL).
                       .msg_control = &sa,
                       .msg_controllen = 0};
    fill(len);
    ssize_t r = sendmsg(fd, &m, 0);
    if (id_out) *id_out = sa.id;
    return r;
}

static int run_server(int port, long resp, long delay_ms, long lose)
{
    int fd = open_sock(port);
    if (fd < 0) return 1;
    // No SA_RESTART: the signal interrupts recvmsg so the info comes out.
    struct sigaction sa = {.sa_handler = on_usr1};
    sigaction(SIGUSR1, &sa, NULL);
    struct homa_recvmsg_args ra;
    memset(&ra, 0, sizeof(ra));
    struct sockaddr_in src;
    unsigned long n = 0, bad = 0;
    printf("khoma_peer: server on port %d\n", port);
    fflush(stdout);
    for (;;) {
        struct msghdr m = {.msg_name = &src,
                           .msg_namelen = sizeof(src),
                           .msg_control = &ra,
                           .msg_controllen = sizeof(ra)};
        ra.id = 0;
        ssize_t len = recvmsg(fd, &m, 0);
        if (want_info) {
            want_info = 0;
            print_info(fd);
        }
        if (len < 0 && errno == EINTR) continue;
        if (len < 0) {
            printf("khoma_peer: recvmsg: %s\n", strerror(errno));
            fflush(stdout);
            continue;
        }
        long at = verify(&ra, (uint32_t)len);
        n++;
        if (lose > 0) {
            lose--;
            unsigned long long lost_id = (unsigned long long)ra.id;
            close(fd);
            munmap(region, REGION_BYTES);
            free(sendbuf);
            fd = open_sock(port);
            if (fd < 0) return 1;
            memset(&ra, 0, sizeof(ra));
            printf("khoma_peer: lost request id %llu len %zd (socket reopened)\n", lost_id, len);
            continue;
        }
        if (at >= 0) {
            bad++;
            printf("khoma_peer: request id %llu len %zd bad at %ld (%lu bad of %lu)\n",
                   (unsigned long long)ra.id, len, at, bad, n);
            fflush(stdout);
        }
        if (delay_ms > 0) usleep((useconds_t)delay_ms * 1000);
        uint32_t rlen = resp >= 0 ? (uint32_t)resp : (uint32_t)len;
        if (send_msg(fd, &src, ra.id, rlen, 0, NULL) < 0) {
            printf("khoma_peer: sendmsg reply: %s\n", strerror(errno));
            fflush(stdout);
        }
    }
}

struct slot {
    uint32_t len;
    int busy;
};

static int run_client(const char *server, const uint32_t *lens, int nlens, long count, int inflight,
                      double seconds, int timeout_ok, int stall_s)
{
    struct sockaddr_in to = {.sin_family = AF_INET};
    char host[64];
    const char *colon = strchr(server, ':');
    if (!colon || (size_t)(colon - server) >= sizeof(host)) {
        fprintf(stderr, "khoma_peer: --server ADDR:PORT\n");
        return 2;
    }
    memcpy(host, server, (size_t)(colon - server));
    host[colon - server] = 0;
    if (inet_pton(AF_INET, host, &to.sin_addr) != 1) {
        fprintf(stderr, "khoma_peer: bad address %s\n", host);
        return 2;
    }
    to.sin_port = htons((uint16_t)atoi(colon + 1));
    int fd = open_sock(0);
    if (fd < 0) return 1;
    struct slot slots[MAX_INFLIGHT];
    memset(slots, 0, sizeof(slots));
    struct homa_recvmsg_args ra;
    memset(&ra, 0, sizeof(ra));
    unsigned long ok = 0, bad = 0, errs = 0, sent = 0;
    unsigned long long bytes = 0;
    double t0 = now_s();
    long per_len[MAX_LENS] = {0};
    long next = 0; // index of the next request: lens[next % nlens]
    int outstanding = 0, stalled = 0;
    double last_done = t0;
    if (stall_s > 0) {
        // No SA_RESTART: the alarm interrupts recvmsg once a second.
        struct sigaction al = {.sa_handler = on_alarm};
        sigaction(SIGALRM, &al, NULL);
        struct itimerval it = {{1, 0}, {1, 0}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
    for (;;) {
        int more = seconds > 0 ? now_s() - t0 < seconds : next < count * nlens;
        while (more && outstanding < inflight) {
            int s = 0;
            while (slots[s].busy)
                s++;
            uint32_t len = lens[next % nlens];
            uint64_t id;
            if (send_msg(fd, &to, 0, len, (uint64_t)s + 1, &id) < 0) {
                printf("khoma_peer: sendmsg len %u: %s\n", len, strerror(errno));
                errs++;
                break;
            }
            slots[s].busy = 1;
            slots[s].len = len;
            outstanding++;
            sent++;
            next++;
            more = seconds > 0 ? 1 : next < count * nlens;
        }
        if (outstanding == 0) break;
        struct msghdr m = {.msg_control = &ra, .msg_controllen = sizeof(ra)};
        ra.id = 0;
        ssize_t len = recvmsg(fd, &m, 0);
        if (len < 0 && errno == EINTR) {
            alarm_fired = 0;
            if (stall_s > 0 && now_s() - last_done > stall_s) {
                printf("khoma_peer: no RPC completed for %d s with %d outstanding\n", stall_s,
                       outstanding);
                print_rpcs(fd);
                stalled = 1;
                break;
            }
            continue;
        }
        last_done = now_s();
        uint64_t c = ra.completion_cookie;
        if (c < 1 || c > MAX_INFLIGHT || !slots[c - 1].busy) {
            printf("khoma_peer: recvmsg: unknown cookie %llu (%s)\n", (unsigned long long)c,
                   len < 0 ? strerror(errno) : "ok");
            errs++;
            if (errs > 100) break;
            continue;
        }
        struct slot *sl = &slots[c - 1];
        sl->busy = 0;
        outstanding--;
        if (len < 0) {
            printf("khoma_peer: rpc len %u failed: %s\n", sl->len, strerror(errno));
            if (!(timeout_ok && errno == ETIMEDOUT)) errs++;
            continue;
        }
        long at = (uint32_t)len == sl->len ? verify(&ra, sl->len) : 0;
        if (at >= 0) {
            bad++;
            printf("khoma_peer: response len %zd (want %u) bad at %ld\n", len, sl->len, at);
            continue;
        }
        ok++;
        bytes += (unsigned long long)len;
        for (int i = 0; i < nlens; i++)
            if (lens[i] == sl->len) per_len[i]++;
    }
    if (stall_s > 0) {
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &off, NULL);
    }
    double dt = now_s() - t0;
    for (int i = 0; i < nlens; i++)
        printf("khoma_peer: len %u ok %ld\n", lens[i], per_len[i]);
    printf("khoma_peer: %s rpcs=%lu sent=%lu bad=%lu errors=%lu bytes=%llu seconds=%.2f\n",
           bad || errs || stalled || ok != sent ? "FAIL" : "ok", ok, sent, bad, errs, bytes, dt);
    return bad || errs || stalled || ok != sent ? 1 : 0;
}

static int full_io(int fd, void *buf, size_t n, int wr)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = wr ? write(fd, p, n) : read(fd, p, n);
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int run_tcp_server(int port)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, 8) != 0) {
        perror("khoma_peer: tcp listen");
        return 1;
    }
    sendbuf = malloc(HOMA_MAX_MESSAGE_LENGTH);
    if (!sendbuf) return 1;
    printf("khoma_peer: tcp server on port %d\n", port);
    for (;;) {
        int c = accept(ls, NULL, NULL);
        if (c < 0) continue;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        uint32_t len;
        while (full_io(c, &len, 4, 0) == 0 && len <= HOMA_MAX_MESSAGE_LENGTH &&
               full_io(c, sendbuf, len, 0) == 0 && full_io(c, &len, 4, 1) == 0 &&
               full_io(c, sendbuf, len, 1) == 0)
            ;
        close(c);
    }
}

static int run_tcp_client(const char *server, const uint32_t *lens, int nlens, long count,
                          double seconds)
{
    struct sockaddr_in to = {.sin_family = AF_INET};
    char host[64];
    const char *colon = strchr(server, ':');
    int one = 1;
    if (!colon || (size_t)(colon - server) >= sizeof(host)) return 2;
    memcpy(host, server, (size_t)(colon - server));
    host[colon - server] = 0;
    if (inet_pton(AF_INET, host, &to.sin_addr) != 1) return 2;
    to.sin_port = htons((uint16_t)atoi(colon + 1));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0) {
        perror("khoma_peer: tcp connect");
        return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sendbuf = malloc(HOMA_MAX_MESSAGE_LENGTH);
    uint8_t *rbuf = malloc(HOMA_MAX_MESSAGE_LENGTH);
    if (!sendbuf || !rbuf) return 1;
    unsigned long ok = 0, bad = 0;
    unsigned long long bytes = 0;
    double t0 = now_s();
    for (long k = 0; seconds > 0 ? now_s() - t0 < seconds : k < count * nlens; k++) {
        uint32_t len = lens[k % nlens], rlen;
        fill(len);
        if (full_io(fd, &len, 4, 1) || full_io(fd, sendbuf, len, 1) || full_io(fd, &rlen, 4, 0) ||
            rlen != len || full_io(fd, rbuf, rlen, 0)) {
            printf("khoma_peer: tcp exchange failed\n");
            return 1;
        }
        if (memcmp(rbuf, sendbuf, len) != 0)
            bad++;
        else
            ok++;
        bytes += len;
    }
    printf("khoma_peer: %s tcp rpcs=%lu bad=%lu bytes=%llu seconds=%.2f\n", bad ? "FAIL" : "ok", ok,
           bad, bytes, now_s() - t0);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: khoma_peer server|client [options]\n");
        return 2;
    }
    int port = 4000, inflight = 1, nlens = 0, timeout_ok = 0, stall_s = 0;
    long resp = -1, count = 1, delay_ms = 0, lose = 0;
    double seconds = 0;
    const char *server = NULL;
    uint32_t lens[MAX_LENS];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--timeout-ok")) {
            timeout_ok = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "khoma_peer: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--port"))
            port = atoi(v);
        else if (!strcmp(a, "--lose"))
            lose = atol(v);
        else if (!strcmp(a, "--delay-ms"))
            delay_ms = atol(v);
        else if (!strcmp(a, "--resp"))
            resp = atol(v);
        else if (!strcmp(a, "--count"))
            count = atol(v);
        else if (!strcmp(a, "--inflight"))
            inflight = atoi(v);
        else if (!strcmp(a, "--seconds"))
            seconds = atof(v);
        else if (!strcmp(a, "--stall-s"))
            stall_s = atoi(v);
        else if (!strcmp(a, "--server"))
            server = v;
        else if (!strcmp(a, "--lens")) {
            char *copy = strdup(v), *save = NULL;
            for (char *t = strtok_r(copy, ",", &save); t && nlens < MAX_LENS;
                 t = strtok_r(NULL, ",", &save))
                lens[nlens++] = (uint32_t)strtoul(t, NULL, 0);
            free(copy);
        } else {
            fprintf(stderr, "khoma_peer: unknown option %s\n", a);
            return 2;
        }
    }
    if (inflight < 1 || inflight > MAX_INFLIGHT || resp > HOMA_MAX_MESSAGE_LENGTH) {
        fprintf(stderr, "khoma_peer: bad --inflight or --resp\n");
        return 2;
    }
    for (int i = 0; i < nlens; i++)
        if (lens[i] > HOMA_MAX_MESSAGE_LENGTH) {
            fprintf(stderr, "khoma_peer: length %u too long\n", lens[i]);
            return 2;
        }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(argv[1], "server")) return run_server(port, resp, delay_ms, lose);
    if (!strcmp(argv[1], "tcp-server")) return run_tcp_server(port);
    if (!strcmp(argv[1], "tcp-client") && server && nlens > 0)
        return run_tcp_client(server, lens, nlens, count, seconds);
    if (!strcmp(argv[1], "client") && server && nlens > 0)
        return run_client(server, lens, nlens, count, inflight, seconds, timeout_ok, stall_s);
    fprintf(stderr, "khoma_peer: client needs --server and --lens\n");
    return 2;
}
