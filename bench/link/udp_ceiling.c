/* udp_ceiling: the ceiling of the kernel's UDP path between two hosts, one
 * way, for bench/link/link-bench.sh: a sender of full GSO batches (as many
 * MTU-sized segments as one UDP datagram holds) on a connected socket, and
 * a receiver of GRO-coalesced batches through recvmmsg.  What libhoma's UDP
 * driver could move if each of its system calls carried as much.
 *
 *   udp_ceiling recv PORT SECONDS
 *   udp_ceiling send ADDR PORT SECONDS SEGMENT_BYTES
 *
 * The receiver counts the bytes of the SECONDS after its first datagram and
 * prints one line: "udp_ceiling recv bytes B seconds T gbps G calls C"; the
 * sender stops after SECONDS and prints the same for what it sent. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

#define BATCH 16        /* datagrams per sendmmsg / recvmmsg */
#define MAX_DGRAM 65507 /* the largest IPv4 UDP payload */
#define RX_BUF 65536

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int usage(void)
{
    fprintf(stderr, "usage: udp_ceiling recv PORT SECONDS\n"
                    "       udp_ceiling send ADDR PORT SECONDS SEGMENT_BYTES\n");
    return 2;
}

static int do_recv(int port, double seconds)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    int one = 1, big = 64 << 20;
    setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("udp_ceiling: bind");
        return 1;
    }
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    static uint8_t bufs[BATCH][RX_BUF];
    struct mmsghdr mm[BATCH];
    struct iovec iov[BATCH];
    double start = 0, last = 0;
    unsigned long long bytes = 0, calls = 0;
    for (;;) {
        for (int i = 0; i < BATCH; i++) {
            iov[i].iov_base = bufs[i];
            iov[i].iov_len = RX_BUF;
            memset(&mm[i].msg_hdr, 0, sizeof(mm[i].msg_hdr));
            mm[i].msg_hdr.msg_iov = &iov[i];
            mm[i].msg_hdr.msg_iovlen = 1;
        }
        int n = recvmmsg(fd, mm, BATCH, MSG_WAITFORONE, NULL);
        calls++;
        double t = now_s();
        if (n < 0) {
            if (start > 0 && t - last > 1.0) break; /* the sender stopped */
            if (start == 0 && calls > 300) break;   /* nothing ever came */
            continue;
        }
        if (start == 0) start = t;
        last = t;
        if (t - start > seconds) break;
        for (int i = 0; i < n; i++)
            bytes += mm[i].msg_len;
    }
    double dt = last > start ? last - start : 1e-9;
    printf("udp_ceiling recv bytes %llu seconds %.3f gbps %.3f calls %llu\n", bytes, dt,
           (double)bytes * 8 / dt / 1e9, calls);
    close(fd);
    return bytes > 0 ? 0 : 1;
}

static int do_send(const char *addr, int port, double seconds, int seg)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    int big = 64 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1 ||
        connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("udp_ceiling: connect");
        return 1;
    }
    if (seg < 64 || seg > MAX_DGRAM) return usage();
    /* One datagram of whole segments: as many as a UDP datagram holds. */
    int segs = MAX_DGRAM / seg;
    if (segs > 64) segs = 64;
    size_t dgram = (size_t)segs * (size_t)seg;
    if (segs > 1 && setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg)) != 0) {
        perror("udp_ceiling: UDP_SEGMENT");
        return 1;
    }
    uint8_t *buf = calloc(1, dgram);
    struct mmsghdr mm[BATCH];
    struct iovec iov[BATCH];
    for (int i = 0; i < BATCH; i++) {
        iov[i].iov_base = buf;
        iov[i].iov_len = dgram;
        memset(&mm[i], 0, sizeof(mm[i]));
        mm[i].msg_hdr.msg_iov = &iov[i];
        mm[i].msg_hdr.msg_iovlen = 1;
    }
    double start = now_s(), t = start;
    unsigned long long bytes = 0, calls = 0;
    while ((t = now_s()) - start < seconds) {
        int n = sendmmsg(fd, mm, BATCH, 0);
        calls++;
        if (n < 0) {
            if (errno == ENOBUFS || errno == EAGAIN || errno == ECONNREFUSED) continue;
            perror("udp_ceiling: sendmmsg");
            return 1;
        }
        bytes += (unsigned long long)n * dgram;
    }
    printf("udp_ceiling send bytes %llu seconds %.3f gbps %.3f calls %llu segments_per_send %d\n",
           bytes, t - start, (double)bytes * 8 / (t - start) / 1e9, calls, segs);
    free(buf);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "recv") == 0) return do_recv(atoi(argv[2]), atof(argv[3]));
    if (argc == 6 && strcmp(argv[1], "send") == 0)
        return do_send(argv[2], atoi(argv[3]), atof(argv[4]), atoi(argv[5]));
    return usage();
}
