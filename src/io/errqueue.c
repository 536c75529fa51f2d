/* The error-queue reader shared by the UDP and raw drivers (errqueue.h). */
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "io/errqueue.h"

int homa_io_errqueue_drain(int fd, int v4, int max_reads, homa_io_rx *out, int cap, uint64_t *reads)
{
    int n = 0;
    *reads = 0;
    for (int i = 0; i < max_reads && n < cap; i++) {
        /* The bounced packet's first bytes: its Homa header carries the
         * port a port-unreachable names. */
        uint8_t buf[64];
        union {
            struct sockaddr_in v4;
            struct sockaddr_in6 v6;
        } sa;
        union {
            char b[256];
            struct cmsghdr align;
        } ctrl;
        struct iovec iov = {buf, sizeof(buf)};
        struct msghdr mh = {.msg_name = &sa,
                            .msg_namelen = sizeof(sa),
                            .msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctrl.b,
                            .msg_controllen = sizeof(ctrl.b)};
        (*reads)++;
        ssize_t r = recvmsg(fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT);
        if (r < 0) break;
        if (homa_raw_parse_errqueue(&mh, buf, (size_t)r, v4, &out[n]) == 0) n++;
    }
    return n;
}
