/* The error-queue reader shared by the UDP and raw drivers (errqueue.h):
 * ICMP unreachable classification, the parser of one error message, and
 * the drain loop. */
#include <time.h> /* struct timespec, which linux/errqueue.h uses */

#include <linux/errqueue.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <string.h>
#include <sys/socket.h>

#include "io/common.h"
#include "io/errqueue.h"

int homa_io_icmp_unreach(int v4, uint8_t type, uint8_t code, const uint8_t *payload, size_t plen,
                         uint16_t *port)
{
    *port = 0;
    if (v4) {
        if (type != ICMP_DEST_UNREACH) return 0;
        /* Fragmentation needed is path MTU discovery, not a dead peer. */
        if (code == ICMP_FRAG_NEEDED) return 0;
        if (code == ICMP_PORT_UNREACH && plen >= 4)
            *port = (uint16_t)(payload[2] << 8 | payload[3]);
        return 1;
    }
    if (type == ICMP6_DST_UNREACH) {
        if (code == ICMP6_DST_UNREACH_NOPORT && plen >= 4)
            *port = (uint16_t)(payload[2] << 8 | payload[3]);
        return 1;
    }
    /* Unknown next header: the host has no protocol 146. */
    return type == ICMP6_PARAM_PROB && code == ICMP6_PARAMPROB_NEXTHEADER;
}

int homa_io_parse_errqueue(const struct msghdr *mh, const uint8_t *payload, size_t plen, int v4,
                           homa_io_rx *out)
{
    memset(out, 0, sizeof(*out));
    const struct sock_extended_err *ee = NULL;
    struct sock_extended_err tmp;
    for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)mh); c != NULL;
         c = CMSG_NXTHDR((struct msghdr *)mh, c)) {
        if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR) ||
            (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR)) {
            if (c->cmsg_len < CMSG_LEN(sizeof(tmp))) continue;
            memcpy(&tmp, CMSG_DATA(c), sizeof(tmp));
            ee = &tmp;
        }
    }
    if (ee == NULL) return -1;
    int icmp4 = ee->ee_origin == SO_EE_ORIGIN_ICMP;
    if (!icmp4 && ee->ee_origin != SO_EE_ORIGIN_ICMP6) return -1;
    uint16_t port;
    if (!homa_io_icmp_unreach(icmp4, ee->ee_type, ee->ee_code, payload, plen, &port)) return -1;
    /* msg_name is the destination of the packet that bounced. */
    const struct sockaddr *sa = mh->msg_name;
    if (sa == NULL) return -1;
    if (sa->sa_family == AF_INET && mh->msg_namelen >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *a = mh->msg_name;
        homa_io_addr_from_v4(&out->src, &a->sin_addr);
    } else if (sa->sa_family == AF_INET6 && mh->msg_namelen >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *a = mh->msg_name;
        memcpy(out->src.bytes, &a->sin6_addr, 16);
    } else {
        return -1;
    }
    (void)v4;
    out->unreach = 1;
    out->sport = port;
    return 0;
}

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
        if (homa_io_parse_errqueue(&mh, buf, (size_t)r, v4, &out[n]) == 0) n++;
    }
    return n;
}
