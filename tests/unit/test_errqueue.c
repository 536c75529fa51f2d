/* Tests of the error-queue reader shared by the drivers (src/io/errqueue.c):
 * the ICMP unreachable classification, the parser of one MSG_ERRQUEUE
 * message (built by hand here), and the drain loop on real UDP sockets
 * over loopback (an empty queue, then a port unreachable). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <linux/errqueue.h>
#include <netinet/icmp6.h>
#include <netinet/ip_icmp.h>

#include <cmocka.h>

#include "io/errqueue.h"
#include "io/io.h"

static void homa_io_icmp_unreach__classifies(void **state)
{
    (void)state;
    const uint8_t hdr[4] = {0x80, 0x01, 0x0f, 0xa0}; /* sport 32769, dport 4000 */
    uint16_t port;
    assert_int_equal(homa_io_icmp_unreach(1, ICMP_DEST_UNREACH, ICMP_PROT_UNREACH, hdr, 4, &port),
                     1);
    assert_int_equal(port, 0);
    assert_int_equal(homa_io_icmp_unreach(1, ICMP_DEST_UNREACH, ICMP_PORT_UNREACH, hdr, 4, &port),
                     1);
    assert_int_equal(port, 4000);
    /* Too little of the bounced packet to name a port: the whole host. */
    assert_int_equal(homa_io_icmp_unreach(1, ICMP_DEST_UNREACH, ICMP_PORT_UNREACH, hdr, 3, &port),
                     1);
    assert_int_equal(port, 0);
    assert_int_equal(homa_io_icmp_unreach(1, ICMP_DEST_UNREACH, ICMP_HOST_UNREACH, hdr, 4, &port),
                     1);
    assert_int_equal(homa_io_icmp_unreach(1, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, hdr, 4, &port),
                     0);
    assert_int_equal(homa_io_icmp_unreach(1, ICMP_TIME_EXCEEDED, 0, hdr, 4, &port), 0);
    assert_int_equal(
        homa_io_icmp_unreach(0, ICMP6_DST_UNREACH, ICMP6_DST_UNREACH_NOPORT, hdr, 4, &port), 1);
    assert_int_equal(port, 4000);
    assert_int_equal(
        homa_io_icmp_unreach(0, ICMP6_PARAM_PROB, ICMP6_PARAMPROB_NEXTHEADER, hdr, 4, &port), 1);
    assert_int_equal(port, 0);
    assert_int_equal(homa_io_icmp_unreach(0, ICMP6_PARAM_PROB, 0, hdr, 4, &port), 0);
    assert_int_equal(homa_io_icmp_unreach(0, ICMP6_PACKET_TOO_BIG, 0, hdr, 4, &port), 0);
}

static void build_err(struct msghdr *mh, void *ctrl, size_t clen, void *name, socklen_t nlen,
                      uint8_t origin, uint8_t type, uint8_t code, int level, int ctype)
{
    memset(mh, 0, sizeof(*mh));
    mh->msg_name = name;
    mh->msg_namelen = nlen;
    mh->msg_control = ctrl;
    mh->msg_controllen = clen;
    struct cmsghdr *c = CMSG_FIRSTHDR(mh);
    c->cmsg_level = level;
    c->cmsg_type = ctype;
    c->cmsg_len = CMSG_LEN(sizeof(struct sock_extended_err));
    struct sock_extended_err ee;
    memset(&ee, 0, sizeof(ee));
    ee.ee_origin = origin;
    ee.ee_type = type;
    ee.ee_code = code;
    memcpy(CMSG_DATA(c), &ee, sizeof(ee));
    mh->msg_controllen = CMSG_SPACE(sizeof(ee));
}

static void homa_io_parse_errqueue__reports(void **state)
{
    (void)state;
    union {
        char b[256];
        struct cmsghdr align;
    } ctrl;
    struct sockaddr_in sa4 = {.sin_family = AF_INET};
    sa4.sin_addr.s_addr = htonl(0x0a4d0002);
    const uint8_t hdr[4] = {0x80, 0x01, 0x0f, 0xa0};
    struct msghdr mh;
    homa_io_rx rx;
    build_err(&mh, ctrl.b, sizeof(ctrl.b), &sa4, sizeof(sa4), SO_EE_ORIGIN_ICMP, ICMP_DEST_UNREACH,
              ICMP_PROT_UNREACH, IPPROTO_IP, IP_RECVERR);
    assert_int_equal(homa_io_parse_errqueue(&mh, hdr, 4, 1, &rx), 0);
    assert_int_equal(rx.unreach, 1);
    assert_int_equal(rx.sport, 0);
    assert_int_equal(rx.src.bytes[10], 0xff);
    assert_int_equal(rx.src.bytes[15], 2);
    assert_int_equal(rx.len, 0);
    assert_null(rx.data);
    /* An IPv4 error on a dual-stack socket: IPv6 level, mapped address. */
    struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6};
    sa6.sin6_addr.s6_addr[10] = sa6.sin6_addr.s6_addr[11] = 0xff;
    sa6.sin6_addr.s6_addr[15] = 9;
    build_err(&mh, ctrl.b, sizeof(ctrl.b), &sa6, sizeof(sa6), SO_EE_ORIGIN_ICMP, ICMP_DEST_UNREACH,
              ICMP_PORT_UNREACH, IPPROTO_IPV6, IPV6_RECVERR);
    assert_int_equal(homa_io_parse_errqueue(&mh, hdr, 4, 0, &rx), 0);
    assert_int_equal(rx.sport, 4000);
    assert_int_equal(rx.src.bytes[15], 9);
    /* Not unreachable; local errors; no cmsg; no address. */
    build_err(&mh, ctrl.b, sizeof(ctrl.b), &sa4, sizeof(sa4), SO_EE_ORIGIN_ICMP, ICMP_DEST_UNREACH,
              ICMP_FRAG_NEEDED, IPPROTO_IP, IP_RECVERR);
    assert_int_equal(homa_io_parse_errqueue(&mh, hdr, 4, 1, &rx), -1);
    build_err(&mh, ctrl.b, sizeof(ctrl.b), &sa4, sizeof(sa4), SO_EE_ORIGIN_LOCAL, 0, 0, IPPROTO_IP,
              IP_RECVERR);
    assert_int_equal(homa_io_parse_errqueue(&mh, hdr, 4, 1, &rx), -1);
    build_err(&mh, ctrl.b, sizeof(ctrl.b), &sa4, sizeof(sa4), SO_EE_ORIGIN_ICMP, ICMP_DEST_UNREACH,
              ICMP_PROT_UNREACH, IPPROTO_IP, IP_TOS);
    assert_int_equal(homa_io_parse_errqueue(&mh, hdr, 4, 1, &rx), -1);
    build_err(&mh, ctrl.b, sizeof(ctrl.b), NULL, 0, SO_EE_ORIGIN_ICMP, ICMP_DEST_UNREACH,
              ICMP_PROT_UNREACH, IPPROTO_IP, IP_RECVERR);
    assert_int_equal(homa_io_parse_errqueue(&mh, hdr, 4, 1, &rx), -1);
}

/* A UDP socket on 127.0.0.1 with IP_RECVERR, as the UDP driver opens. */
static int udp_socket(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    int on = 1;
    assert_int_equal(setsockopt(fd, IPPROTO_IP, IP_RECVERR, &on, sizeof(on)), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static void homa_io_errqueue_drain__empty_queue(void **state)
{
    (void)state;
    uint16_t port;
    int fd = udp_socket(&port);
    homa_io_rx out[4];
    uint64_t reads = 99;
    assert_int_equal(homa_io_errqueue_drain(fd, 1, 16, out, 4, &reads), 0);
    assert_int_equal(reads, 1); /* one read found the queue empty */
    /* No room: nothing is read at all. */
    assert_int_equal(homa_io_errqueue_drain(fd, 1, 16, out, 0, &reads), 0);
    assert_int_equal(reads, 0);
    close(fd);
}

/* A datagram to a closed port on loopback comes back as ICMP port
 * unreachable; its Homa header names the port (bytes 2-3). */
static void homa_io_errqueue_drain__port_unreachable(void **state)
{
    (void)state;
    uint16_t port, dead;
    int fd = udp_socket(&port);
    int closed = udp_socket(&dead);
    close(closed); /* nobody listens on `dead` now */
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(dead)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    uint8_t pkt[28] = {0};
    pkt[0] = (uint8_t)(port >> 8);
    pkt[1] = (uint8_t)port;
    pkt[2] = (uint8_t)(dead >> 8);
    pkt[3] = (uint8_t)dead;
    assert_int_equal(sendto(fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&to, sizeof(to)),
                     (ssize_t)sizeof(pkt));
    /* The error is queued at once on loopback; POLLERR says so. */
    struct pollfd p = {.fd = fd, .events = 0};
    int waited = 0;
    while (poll(&p, 1, 100) == 0 && ++waited < 50)
        ;
    assert_true(p.revents & POLLERR);
    homa_io_rx out[4];
    uint64_t reads = 0;
    int n = homa_io_errqueue_drain(fd, 1, 16, out, 4, &reads);
    assert_int_equal(n, 1);
    assert_int_equal(reads, 2); /* the report, then an empty queue */
    assert_int_equal(out[0].unreach, 1);
    assert_int_equal(out[0].sport, dead);
    assert_int_equal(out[0].src.bytes[10], 0xff);
    assert_int_equal(out[0].src.bytes[12], 127);
    assert_int_equal(out[0].src.bytes[15], 1);
    assert_int_equal(out[0].len, 0);
    assert_null(out[0].data);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_io_icmp_unreach__classifies),
        cmocka_unit_test(homa_io_parse_errqueue__reports),
        cmocka_unit_test(homa_io_errqueue_drain__empty_queue),
        cmocka_unit_test(homa_io_errqueue_drain__port_unreachable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
