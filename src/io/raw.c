/* The raw IP driver: Homa packets directly over IP protocol 146, the way the
 * Linux kernel module sends them, so a libhoma process and a host running
 * kernel Homa can exchange RPCs.  docs/wire.md has the facts this follows.
 *
 * A raw socket sees every protocol-146 packet of the host, so one driver
 * socket is two raw sockets (IPv4 and IPv6, or one of them when bound to an
 * address of that family) whose classic-BPF filter keeps only packets for
 * our Homa port: unrelated packets are dropped in the kernel and cost this
 * process nothing.  Nothing in IP reserves a Homa port, so a UDP socket
 * bound to the same port number stands in for that: two libhoma processes
 * on a host cannot take the same port, whichever driver they use.
 *
 * What the kernel needs (homa_plumbing.c, homa_incoming.c): a header as
 * long as the type's, nothing else is checked; the checksum is not verified
 * on receipt.  We still send what the kernel sends: flags 0x06, urgent
 * 0xb97d, a TCP-style checksum (pseudo-header with protocol 6), the
 * priority in the TOS / traffic class byte.
 *
 * ICMP errors (IP_RECVERR / IPV6_RECVERR) come back as homa_io_rx entries
 * with `unreach` set so the runtime fails the RPCs at once (errqueue.c, as
 * for the UDP driver).
 *
 * Fault injection works as in the UDP driver, on send and receive: drop,
 * duplicate, and delay, jitter and reorder through the queue of held
 * packets (faultq.c), which flush() and next_deadline() drive.  The
 * address helpers, buffer sizing and the garbage filter are common.c's. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/wire.h"
#include "io/common.h"
#include "io/errqueue.h"
#include "io/faultq.h"
#include "io/io.h"

#define RX_BATCH 16
#define RX_BUF_SIZE 65536 /* an IP packet (IPv4 header included) is at most 64 KB */
#define TX_BATCH 32
#define ERR_BATCH 16  /* error-queue entries read per drain */
#define HOLD_MAX 4096 /* packets held back by fault injection, per direction */
/* A refill: a batch (each packet possibly duplicated), the held packets
 * released (those held before it and those of the batch), error reports. */
#define RX_OUT_CAP (RX_BATCH * 2 + ERR_BATCH * 2 + HOLD_MAX + RX_BATCH)
#define CTRL_SIZE 128
#define SRC_CACHE 64 /* destinations whose source address we remember */

#define CTR_ADD(s, field, n) HOMA_IO_CTR_ADD(&(s)->ctr, field, n)

struct src_entry {
    homa_addr dst;
    homa_addr src;
    int valid;
};

struct tx_slot {
    union {
        struct sockaddr_in v4;
        struct sockaddr_in6 v6;
    } sa;
    struct iovec iov[2];
    uint8_t hdr[HOMA_MAX_HDR_LEN];
    union {
        char buf[CTRL_SIZE];
        struct cmsghdr align;
    } ctrl;
};

struct homa_io_sock {
    int fd4, fd6; /* raw sockets, -1 when that family is not served */
    int resv;     /* UDP socket holding the port number */
    int epfd;     /* what fd() returns: readable when fd4 or fd6 is */
    homa_endpoint local;
    homa_pcap *pcap;
    homa_driver_counters ctr;
    int err_pending; /* a send or receive reported an ICMP error: drain (atomic) */

    /* Transmit (one sender at a time). */
    homa_fault_state txf;
    struct mmsghdr tx4[TX_BATCH], tx6[TX_BATCH];
    struct tx_slot slot4[TX_BATCH], slot6[TX_BATCH];
    int n4, n6;
    struct src_entry srcs[SRC_CACHE];
    /* Delayed or reordered, not yet sent; released copies are referenced
     * by the batches until both are flushed. */
    homa_faultq txq;

    /* Receive (one receiver at a time). */
    homa_fault_state rxf;
    uint8_t *rx_buf;
    struct mmsghdr rx_mm[RX_BATCH];
    struct iovec rx_iov[RX_BATCH];
    union {
        struct sockaddr_in v4;
        struct sockaddr_in6 v6;
    } rx_sa[RX_BATCH];
    union {
        char buf[CTRL_SIZE];
        struct cmsghdr align;
    } rx_ctrl[RX_BATCH];
    homa_io_rx rx_out[RX_OUT_CAP];
    int rx_out_n, rx_out_pos;
    homa_faultq rxq; /* released copies are freed at the next refill */
    int turn;        /* which family is read first (fairness) */
};

/* ------------------------------------------------------------ helpers */

/* One's-complement sums (RFC 1071) are computed on 16-bit words in memory
 * order, eight bytes per step: the sum of native-order words, folded, is
 * the byte-swapped sum of big-endian words (RFC 1071, "byte order
 * independence"), so one ntohs() at the end gives the wire value.  Every
 * piece summed starts at an even offset of the checksummed bytes. */
static uint64_t csum_add(uint64_t sum, const uint8_t *p, size_t len)
{
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        sum += (v & 0xffffffffu) + (v >> 32);
        p += 8;
        len -= 8;
    }
    while (len >= 2) {
        uint16_t w;
        memcpy(&w, p, 2);
        sum += w;
        p += 2;
        len -= 2;
    }
    if (len) {
        uint8_t b[2] = {p[0], 0};
        uint16_t w;
        memcpy(&w, b, 2);
        sum += w;
    }
    return sum;
}

static uint16_t csum_fold(uint64_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)sum;
}

/* The pseudo-header's sum, native order, not folded. */
static uint64_t pseudo_native(const homa_addr *src, const homa_addr *dst, uint32_t len)
{
    uint64_t sum = 0;
    uint8_t w[8];
    if (homa_io_addr_is_v4(src) && homa_io_addr_is_v4(dst)) {
        /* tcp_v4_check(): saddr, daddr, zero, protocol 6, 16-bit length */
        sum = csum_add(sum, src->bytes + 12, 4);
        sum = csum_add(sum, dst->bytes + 12, 4);
        w[0] = 0;
        w[1] = 6;
        w[2] = (uint8_t)(len >> 8);
        w[3] = (uint8_t)len;
        return csum_add(sum, w, 4);
    }
    /* tcp_v6_check(): saddr, daddr, 32-bit length, zeros, next header 6 */
    sum = csum_add(sum, src->bytes, 16);
    sum = csum_add(sum, dst->bytes, 16);
    w[0] = (uint8_t)(len >> 24);
    w[1] = (uint8_t)(len >> 16);
    w[2] = (uint8_t)(len >> 8);
    w[3] = (uint8_t)len;
    w[4] = w[5] = w[6] = 0;
    w[7] = 6;
    return csum_add(sum, w, 8);
}

uint16_t homa_raw_pseudo_sum(const homa_addr *src, const homa_addr *dst, uint32_t len)
{
    return ntohs(csum_fold(pseudo_native(src, dst, len)));
}

uint16_t homa_raw_checksum(const homa_addr *src, const homa_addr *dst, const uint8_t *hdr,
                           size_t hdr_len, const uint8_t *payload, size_t payload_len)
{
    uint64_t sum = pseudo_native(src, dst, (uint32_t)(hdr_len + payload_len));
    /* The checksum field (bytes 16-17) counts as zero.  hdr_len is even for
     * every Homa header except GRANT (33) and RESEND (37), which never have
     * a payload; an odd header with payload pairs its last byte with the
     * payload's first. */
    sum = csum_add(sum, hdr, hdr_len < 16 ? hdr_len : 16);
    if (hdr_len > 18) {
        if (hdr_len % 2 == 0 || payload_len == 0) {
            sum = csum_add(sum, hdr + 18, hdr_len - 18);
            if (payload_len) sum = csum_add(sum, payload, payload_len);
        } else {
            sum = csum_add(sum, hdr + 18, hdr_len - 19);
            uint8_t b[2] = {hdr[hdr_len - 1], payload[0]};
            sum = csum_add(sum, b, 2);
            sum = csum_add(sum, payload + 1, payload_len - 1);
        }
    }
    return ntohs((uint16_t)~csum_fold(sum));
}

int homa_raw_strip_ipv4(const uint8_t *d, size_t len, size_t *hdr_len, uint8_t *tos, homa_addr *src,
                        homa_addr *dst)
{
    if (len < 20 || (d[0] >> 4) != 4) return -1;
    size_t ihl = (size_t)(d[0] & 0x0f) * 4;
    if (ihl < 20 || ihl > len) return -1;
    size_t total = (size_t)d[2] << 8 | d[3];
    /* The kernel hands us the reassembled packet with the length it had on
     * the wire; a total length that disagrees means a mangled header. */
    if (total != len) return -1;
    *hdr_len = ihl;
    if (tos) *tos = d[1];
    if (src) homa_io_addr_from_v4(src, d + 12);
    if (dst) homa_io_addr_from_v4(dst, d + 16);
    return 0;
}

/* The source address the kernel picks toward dst: a connected UDP socket
 * asks the routing table without sending anything.  Cached per socket. */
static void source_for(homa_io_sock *s, const homa_addr *dst, homa_addr *src)
{
    if (!homa_io_addr_is_zero(&s->local.addr)) {
        *src = s->local.addr;
        return;
    }
    uint32_t h = 2166136261u;
    for (int i = 0; i < 16; i++)
        h = (h ^ dst->bytes[i]) * 16777619u;
    struct src_entry *e = &s->srcs[h % SRC_CACHE];
    if (e->valid && memcmp(&e->dst, dst, sizeof(*dst)) == 0) {
        *src = e->src;
        return;
    }
    memset(src, 0, sizeof(*src));
    int v4 = homa_io_addr_is_v4(dst);
    int fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        union {
            struct sockaddr_in v4;
            struct sockaddr_in6 v6;
        } sa;
        memset(&sa, 0, sizeof(sa));
        socklen_t sl;
        if (v4) {
            sa.v4.sin_family = AF_INET;
            sa.v4.sin_port = htons(9);
            memcpy(&sa.v4.sin_addr, dst->bytes + 12, 4);
            sl = sizeof(sa.v4);
        } else {
            sa.v6.sin6_family = AF_INET6;
            sa.v6.sin6_port = htons(9);
            memcpy(&sa.v6.sin6_addr, dst->bytes, 16);
            sl = sizeof(sa.v6);
        }
        if (connect(fd, (struct sockaddr *)&sa, sl) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &sl) == 0) {
            if (v4)
                homa_io_addr_from_v4(src, &sa.v4.sin_addr);
            else
                memcpy(src->bytes, &sa.v6.sin6_addr, 16);
        }
        close(fd);
    }
    e->dst = *dst;
    e->src = *src;
    e->valid = 1;
}

/* Keeps only packets whose Homa dport is ours.  IPv4 raw sockets see the
 * IP header first (its length from the IHL nibble); IPv6 ones start at the
 * Homa header.  A packet too short to have a dport fails the load and is
 * dropped too. */
static int attach_filter(int fd, int v4, uint16_t port)
{
    struct sock_filter f4[] = {
        BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 0),
        BPF_STMT(BPF_LD | BPF_H | BPF_IND, 2),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, port, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, 0xffffffffu),
        BPF_STMT(BPF_RET | BPF_K, 0),
    };
    struct sock_filter f6[] = {
        BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 2),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, port, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, 0xffffffffu),
        BPF_STMT(BPF_RET | BPF_K, 0),
    };
    struct sock_fprog prog;
    prog.len = v4 ? (unsigned short)(sizeof(f4) / sizeof(f4[0]))
                  : (unsigned short)(sizeof(f6) / sizeof(f6[0]));
    prog.filter = v4 ? f4 : f6;
    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog));
}

static void raw_close(homa_io_sock *s)
{
    if (s == NULL) return;
    if (s->fd4 >= 0) close(s->fd4);
    if (s->fd6 >= 0) close(s->fd6);
    if (s->resv >= 0) close(s->resv);
    if (s->epfd >= 0) close(s->epfd);
    homa_faultq_free(&s->txq);
    homa_faultq_free(&s->rxq);
    free(s->rx_buf);
    free(s);
}

/* Opens the raw socket of one family, bound to local's address unless it
 * is the wildcard.  Returns the descriptor or a negative HOMA_ERR_*. */
static int open_raw(const homa_endpoint *local, int v4, const homa_io_opts *opts, int wildcard)
{
    int fd = socket(v4 ? AF_INET : AF_INET6, SOCK_RAW | SOCK_CLOEXEC, HOMA_IPPROTO);
    if (fd < 0) {
        if (errno == EPERM || errno == EACCES) return HOMA_ERR_PERM;
        return errno == EAFNOSUPPORT ? HOMA_ERR_ADDR : HOMA_ERR_IO;
    }
    int on = 1;
    if (!wildcard) {
        int rc;
        if (v4) {
            struct sockaddr_in sa = {.sin_family = AF_INET};
            memcpy(&sa.sin_addr, local->addr.bytes + 12, 4);
            rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        } else {
            struct sockaddr_in6 sa = {.sin6_family = AF_INET6};
            memcpy(&sa.sin6_addr, local->addr.bytes, 16);
            rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        }
        if (rc != 0) {
            close(fd);
            return HOMA_ERR_ADDR;
        }
    }
    if (v4) {
        setsockopt(fd, IPPROTO_IP, IP_RECVERR, &on, sizeof(on));
    } else {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
        setsockopt(fd, IPPROTO_IPV6, IPV6_RECVERR, &on, sizeof(on));
        setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &on, sizeof(on));
        setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof(on));
    }
    homa_io_set_bufs(fd, opts);
    return fd;
}

static int raw_open(const homa_endpoint *local, const homa_io_opts *opts, homa_io_sock **out)
{
    homa_io_sock *s = calloc(1, sizeof(*s));
    if (s == NULL) return HOMA_ERR_NOMEM;
    s->fd4 = s->fd6 = s->resv = s->epfd = -1;
    homa_faultq_init(&s->txq, HOLD_MAX, 0);
    homa_faultq_init(&s->rxq, HOLD_MAX, 0);
    s->rx_buf = malloc((size_t)RX_BATCH * RX_BUF_SIZE);
    if (s->rx_buf == NULL) {
        free(s);
        return HOMA_ERR_NOMEM;
    }
    int rc = HOMA_ERR_IO;
    int wildcard = homa_io_addr_is_zero(&local->addr);
    int want4 = wildcard || homa_io_addr_is_v4(&local->addr);
    int want6 = wildcard || !homa_io_addr_is_v4(&local->addr);

    /* The raw sockets first: without CAP_NET_RAW nothing else matters. */
    if (want4) {
        s->fd4 = open_raw(local, 1, opts, wildcard);
        if (s->fd4 < 0) {
            rc = s->fd4;
            goto fail;
        }
    }
    if (want6) {
        s->fd6 = open_raw(local, 0, opts, wildcard);
        if (s->fd6 < 0) {
            rc = s->fd6;
            /* A host without IPv6 still serves IPv4 on the wildcard. */
            if (!(wildcard && rc == HOMA_ERR_ADDR)) goto fail;
            s->fd6 = -1;
        }
    }

    /* The port: a UDP socket bound to it (on the same address) reserves
     * the number.  It never reads; a tiny buffer bounds what stray UDP
     * datagrams can pile up there. */
    s->resv = socket(want6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s->resv < 0 && want6 && wildcard) s->resv = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s->resv < 0) goto fail;
    int off = 0, small = 1;
    setsockopt(s->resv, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    {
        union {
            struct sockaddr_in v4;
            struct sockaddr_in6 v6;
        } sa;
        memset(&sa, 0, sizeof(sa));
        socklen_t sl;
        int fam = 0;
        socklen_t fl = sizeof(fam);
        getsockopt(s->resv, SOL_SOCKET, SO_DOMAIN, &fam, &fl);
        if (fam == AF_INET6) {
            setsockopt(s->resv, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
            sa.v6.sin6_family = AF_INET6;
            sa.v6.sin6_port = htons(local->port);
            memcpy(&sa.v6.sin6_addr, local->addr.bytes, 16);
            sl = sizeof(sa.v6);
        } else {
            sa.v4.sin_family = AF_INET;
            sa.v4.sin_port = htons(local->port);
            if (!wildcard) memcpy(&sa.v4.sin_addr, local->addr.bytes + 12, 4);
            sl = sizeof(sa.v4);
        }
        if (bind(s->resv, (struct sockaddr *)&sa, sl) != 0) {
            rc = errno == EADDRINUSE ? HOMA_ERR_PORT_IN_USE : HOMA_ERR_ADDR;
            goto fail;
        }
        sl = sizeof(sa);
        if (getsockname(s->resv, (struct sockaddr *)&sa, &sl) != 0) goto fail;
        s->local.port = ntohs(fam == AF_INET6 ? sa.v6.sin6_port : sa.v4.sin_port);
    }
    s->local.addr = local->addr;

    if ((s->fd4 >= 0 && attach_filter(s->fd4, 1, s->local.port) != 0) ||
        (s->fd6 >= 0 && attach_filter(s->fd6, 0, s->local.port) != 0))
        goto fail;

    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epfd < 0) goto fail;
    for (int k = 0; k < 2; k++) {
        int fd = k == 0 ? s->fd4 : s->fd6;
        if (fd < 0) continue;
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) goto fail;
    }

    s->pcap = opts ? opts->pcap : NULL;
    const homa_faults *f = opts ? opts->faults : NULL;
    uint64_t salt = opts ? opts->fault_salt : 0;
    uint64_t opened = homa_io_monotonic_ns();
    homa_fault_init(&s->txf, f, HOMA_FAULT_TX, salt, opened);
    homa_fault_init(&s->rxf, f, HOMA_FAULT_RX, salt, opened);
    for (int i = 0; i < RX_BATCH; i++) {
        s->rx_iov[i].iov_base = s->rx_buf + (size_t)i * RX_BUF_SIZE;
        s->rx_iov[i].iov_len = RX_BUF_SIZE;
    }
    *out = s;
    return 0;

fail:
    raw_close(s);
    return rc;
}

static int raw_fd(const homa_io_sock *s)
{
    return s->epfd;
}

static void raw_local(const homa_io_sock *s, homa_endpoint *out)
{
    *out = s->local;
}

/* ---------------------------------------------------------------- send */

static int is_icmp_errno(int e)
{
    return e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH || e == ENOPROTOOPT ||
           e == EPROTO || e == EACCES;
}

static void tx_flush(homa_io_sock *s, int fd, struct mmsghdr *mm, struct tx_slot *slot, int *np)
{
    int n = *np;
    int done = 0, retried = -1;
    while (done < n) {
        CTR_ADD(s, send_syscalls, 1);
        int r = sendmmsg(fd, &mm[done], (unsigned)(n - done), 0);
        if (r > 0) {
            for (int i = done; i < done + r; i++) {
                CTR_ADD(s, datagrams_out, 1);
                CTR_ADD(s, bytes_out, slot[i].iov[0].iov_len + slot[i].iov[1].iov_len);
            }
            done += r;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        /* A pending ICMP error, about any earlier packet, is reported by
         * (and cleared from) the next send, which then sent nothing: note
         * it for the error queue and send that packet again, once. */
        if (r < 0 && is_icmp_errno(errno)) {
            __atomic_store_n(&s->err_pending, 1, __ATOMIC_RELAXED);
            if (retried != done) {
                retried = done;
                continue;
            }
        }
        CTR_ADD(s, send_errors, 1);
        done++;
    }
    *np = 0;
}

/* Adds one packet (header hdr, payload referenced until the batch is
 * flushed) to the batch of its family. */
static void tx_emit(homa_io_sock *s, const homa_addr *dst, uint8_t tos, const uint8_t *hdr,
                    size_t hdr_len, const uint8_t *payload, size_t payload_len)
{
    int v4 = homa_io_addr_is_v4(dst);
    int fd = v4 ? s->fd4 : s->fd6;
    if (fd < 0 || hdr_len < HOMA_COMMON_HDR_LEN || hdr_len > HOMA_MAX_HDR_LEN) {
        CTR_ADD(s, send_errors, 1); /* no socket of that family (bound elsewhere) */
        return;
    }
    int *np = v4 ? &s->n4 : &s->n6;
    struct mmsghdr *mm = v4 ? s->tx4 : s->tx6;
    struct tx_slot *slot = v4 ? s->slot4 : s->slot6;
    if (*np == TX_BATCH) tx_flush(s, fd, mm, slot, np);
    struct tx_slot *t = &slot[*np];
    struct msghdr *mh = &mm[*np].msg_hdr;
    memset(mh, 0, sizeof(*mh));

    /* The header as the kernel sends it: TCP look-alike flags and urgent
     * pointer, then the checksum over pseudo-header, header and payload. */
    memcpy(t->hdr, hdr, hdr_len);
    t->hdr[13] = HOMA_RAW_FLAGS;
    t->hdr[18] = (uint8_t)(HOMA_RAW_URGENT >> 8);
    t->hdr[19] = (uint8_t)HOMA_RAW_URGENT;
    homa_addr src;
    source_for(s, dst, &src);
    uint16_t ck = homa_raw_checksum(&src, dst, t->hdr, hdr_len, payload, payload_len);
    t->hdr[16] = (uint8_t)(ck >> 8);
    t->hdr[17] = (uint8_t)ck;
    t->iov[0].iov_base = t->hdr;
    t->iov[0].iov_len = hdr_len;
    t->iov[1].iov_base = (void *)payload;
    t->iov[1].iov_len = payload_len;

    memset(&t->sa, 0, sizeof(t->sa));
    if (v4) {
        t->sa.v4.sin_family = AF_INET;
        memcpy(&t->sa.v4.sin_addr, dst->bytes + 12, 4);
        mh->msg_namelen = sizeof(t->sa.v4);
    } else {
        t->sa.v6.sin6_family = AF_INET6;
        memcpy(&t->sa.v6.sin6_addr, dst->bytes, 16);
        mh->msg_namelen = sizeof(t->sa.v6);
    }
    mh->msg_name = &t->sa;
    mh->msg_iov = t->iov;
    mh->msg_iovlen = payload_len ? 2 : 1;
    memset(t->ctrl.buf, 0, sizeof(t->ctrl.buf));
    mh->msg_control = t->ctrl.buf;
    mh->msg_controllen = CMSG_SPACE(sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(mh);
    int tos_int = tos;
    c->cmsg_level = v4 ? IPPROTO_IP : IPPROTO_IPV6;
    c->cmsg_type = v4 ? IP_TOS : IPV6_TCLASS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &tos_int, sizeof(tos_int));
    (*np)++;

    if (s->pcap != NULL) {
        homa_pcap_write_ip(s->pcap, &src, dst, tos, t->hdr, hdr_len, payload, payload_len);
        CTR_ADD(s, pcap_records, 1);
    }
}

/* Sends both batches, then frees the held copies they referenced. */
static void tx_flush_all(homa_io_sock *s)
{
    if (s->n4) tx_flush(s, s->fd4, s->tx4, s->slot4, &s->n4);
    if (s->n6) tx_flush(s, s->fd6, s->tx6, s->slot6, &s->n6);
    homa_faultq_reclaim(&s->txq);
}

/* A copy released by the send queue joins its batch (homa_faultq_emit_fn);
 * the copy stays until tx_flush_all. */
static void tx_emit_held(void *ctx, const homa_faultq_pkt *h)
{
    homa_io_sock *s = ctx;
    tx_emit(s, &h->addr, h->tos, h->data, h->hdr_len, h->data + h->hdr_len, h->len - h->hdr_len);
}

/* Emits reordered packets (after a packet that passed) and delayed ones
 * that are due. */
static void tx_release(homa_io_sock *s, uint64_t now, int after_pass)
{
    homa_faultq_release(&s->txq, now, after_pass, tx_emit_held, s);
}

static int raw_send(homa_io_sock *s, uint64_t now, const homa_pkt_out *pkts, int n)
{
    for (int i = 0; i < n; i++) {
        const homa_pkt_out *p = &pkts[i];
        /* The kernel's mapping (priority_map at its default): tos = prio << 5. */
        uint8_t tos = (uint8_t)((p->priority & 7) << 5);
        int copies = homa_io_fault_send(&s->txf, &s->txq, &s->ctr, now, p, tos);
        if (copies == 0) continue; /* dropped, or held to leave later */
        for (int k = 0; k < copies; k++)
            tx_emit(s, &p->dst, tos, p->hdr, p->hdr_len, p->payload, p->payload_len);
        if (homa_faultq_count(&s->txq) > 0) tx_release(s, now, 1);
    }
    if (homa_faultq_count(&s->txq) > 0) tx_release(s, now, 0);
    tx_flush_all(s);
    return n;
}

static void raw_flush(homa_io_sock *s, uint64_t now)
{
    if (homa_faultq_count(&s->txq) == 0) return;
    tx_release(s, now, 0);
    tx_flush_all(s);
}

/* ---------------------------------------------------------------- receive */

static void rx_push(homa_io_sock *s, const homa_addr *src, uint16_t sport, uint8_t tos,
                    const uint8_t *d, uint32_t len)
{
    if (s->rx_out_n >= RX_OUT_CAP) {
        CTR_ADD(s, garbage_in, 1); /* cannot happen: RX_OUT_CAP covers a refill */
        return;
    }
    homa_io_rx *r = &s->rx_out[s->rx_out_n++];
    memset(r, 0, sizeof(*r));
    r->src = *src;
    r->sport = sport;
    r->tos = tos;
    r->len = len;
    r->data = d;
}

/* A copy released by the receive queue (homa_faultq_emit_fn); it stays
 * valid until the next refill. */
static void rx_push_held(void *ctx, const homa_faultq_pkt *h)
{
    rx_push(ctx, &h->addr, h->port, h->tos, h->data, h->len);
}

static void rx_release(homa_io_sock *s, uint64_t now, int after_pass)
{
    homa_faultq_release(&s->rxq, now, after_pass, rx_push_held, s);
}

static void rx_packet(homa_io_sock *s, uint64_t now, const homa_addr *src, const homa_addr *dst,
                      uint8_t tos, const uint8_t *d, uint32_t len)
{
    CTR_ADD(s, datagrams_in, 1);
    CTR_ADD(s, bytes_in, len);
    if (s->pcap != NULL) {
        homa_pcap_write_ip(s->pcap, src, dst, tos, d, len, NULL, 0);
        CTR_ADD(s, pcap_records, 1);
    }
    /* Stray traffic on the port is counted here, never seen by the engine. */
    if (homa_io_is_garbage(d, len)) {
        CTR_ADD(s, garbage_in, 1);
        return;
    }
    uint64_t hold = 0;
    uint32_t wait = 1;
    int act = homa_fault_decide(&s->rxf, now, d, len, &hold, &wait);
    if (act == HOMA_FAULT_DROP) {
        CTR_ADD(s, fault_drops, 1);
        if (d[11] == HOMA_PKT_DATA) CTR_ADD(s, fault_drop_bytes, len - HOMA_DATA_HDR_LEN);
        return;
    }
    uint16_t sport = (uint16_t)(d[0] << 8 | d[1]);
    if ((act == HOMA_FAULT_DELAY || act == HOMA_FAULT_REORDER) &&
        homa_faultq_hold(&s->rxq, now + hold, act == HOMA_FAULT_REORDER ? wait : 0, src, sport, tos,
                         d, len, NULL, 0) == 0) {
        CTR_ADD(s, fault_delays, act == HOMA_FAULT_DELAY);
        CTR_ADD(s, fault_reorders, act == HOMA_FAULT_REORDER);
        return;
    }
    rx_push(s, src, sport, tos, d, len);
    if (act == HOMA_FAULT_DUP) {
        CTR_ADD(s, fault_dups, 1);
        rx_push(s, src, sport, tos, d, len);
    }
    if (homa_faultq_count(&s->rxq) > 0) rx_release(s, now, 1);
}

/* Reads the socket's error queue: each ICMP unreachable becomes an entry
 * with `unreach` set (src = the peer, sport = its Homa port or 0). */
static void rx_errqueue(homa_io_sock *s, int fd, int v4)
{
    uint64_t reads;
    int n = homa_io_errqueue_drain(fd, v4, ERR_BATCH, &s->rx_out[s->rx_out_n],
                                   RX_OUT_CAP - s->rx_out_n, &reads);
    s->rx_out_n += n;
    CTR_ADD(s, recv_syscalls, reads);
    CTR_ADD(s, icmp_unreach, n);
}

static void rx_read(homa_io_sock *s, uint64_t now, int v4)
{
    int fd = v4 ? s->fd4 : s->fd6;
    if (fd < 0) return;
    if (s->rx_out_n + RX_BATCH > RX_OUT_CAP) return;
    for (int i = 0; i < RX_BATCH; i++) {
        struct msghdr *mh = &s->rx_mm[i].msg_hdr;
        memset(mh, 0, sizeof(*mh));
        mh->msg_name = &s->rx_sa[i];
        mh->msg_namelen = sizeof(s->rx_sa[i]);
        mh->msg_iov = &s->rx_iov[i];
        mh->msg_iovlen = 1;
        mh->msg_control = s->rx_ctrl[i].buf;
        mh->msg_controllen = sizeof(s->rx_ctrl[i].buf);
    }
    /* Half the buffers each when both families are served. */
    int batch = (s->fd4 >= 0 && s->fd6 >= 0) ? RX_BATCH / 2 : RX_BATCH;
    int base = (s->fd4 >= 0 && s->fd6 >= 0 && !v4) ? RX_BATCH / 2 : 0;
    CTR_ADD(s, recv_syscalls, 1);
    int r = recvmmsg(fd, &s->rx_mm[base], (unsigned)batch, MSG_DONTWAIT, NULL);
    if (r < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            __atomic_store_n(&s->err_pending, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int k = base; k < base + r; k++) {
        struct msghdr *mh = &s->rx_mm[k].msg_hdr;
        const uint8_t *d = s->rx_iov[k].iov_base;
        uint32_t len = s->rx_mm[k].msg_len;
        if (mh->msg_flags & MSG_TRUNC) {
            CTR_ADD(s, datagrams_in, 1);
            CTR_ADD(s, garbage_in, 1);
            continue;
        }
        homa_addr src, dst;
        uint8_t tos = 0;
        if (v4) {
            size_t ihl;
            if (homa_raw_strip_ipv4(d, len, &ihl, &tos, &src, &dst) != 0) {
                CTR_ADD(s, datagrams_in, 1);
                CTR_ADD(s, garbage_in, 1);
                continue;
            }
            rx_packet(s, now, &src, &dst, tos, d + ihl, len - (uint32_t)ihl);
        } else {
            memcpy(src.bytes, &s->rx_sa[k].v6.sin6_addr, 16);
            dst = s->local.addr;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c != NULL; c = CMSG_NXTHDR(mh, c)) {
                if (c->cmsg_level != IPPROTO_IPV6) continue;
                if (c->cmsg_type == IPV6_TCLASS) {
                    int tc;
                    memcpy(&tc, CMSG_DATA(c), sizeof(tc));
                    tos = (uint8_t)tc;
                } else if (c->cmsg_type == IPV6_PKTINFO) {
                    struct in6_pktinfo pi;
                    memcpy(&pi, CMSG_DATA(c), sizeof(pi));
                    memcpy(dst.bytes, &pi.ipi6_addr, 16);
                }
            }
            rx_packet(s, now, &src, &dst, tos, d, len);
        }
    }
}

static int raw_recv(homa_io_sock *s, uint64_t now, homa_io_rx *out, int max)
{
    if (s->rx_out_pos >= s->rx_out_n) {
        homa_faultq_reclaim(&s->rxq);
        s->rx_out_n = 0;
        s->rx_out_pos = 0;
        if (__atomic_exchange_n(&s->err_pending, 0, __ATOMIC_RELAXED)) {
            if (s->fd4 >= 0) rx_errqueue(s, s->fd4, 1);
            if (s->fd6 >= 0) rx_errqueue(s, s->fd6, 0);
        }
        s->turn ^= 1;
        rx_read(s, now, s->turn);
        rx_read(s, now, !s->turn);
        if (homa_faultq_count(&s->rxq) > 0) rx_release(s, now, 0);
        /* A pending error made a read fail: report it in this round. */
        if (__atomic_exchange_n(&s->err_pending, 0, __ATOMIC_RELAXED)) {
            if (s->fd4 >= 0) rx_errqueue(s, s->fd4, 1);
            if (s->fd6 >= 0) rx_errqueue(s, s->fd6, 0);
        }
    }
    int n = s->rx_out_n - s->rx_out_pos;
    if (n > max) n = max;
    if (n > 0) {
        memcpy(out, &s->rx_out[s->rx_out_pos], sizeof(*out) * (size_t)n);
        s->rx_out_pos += n;
    }
    return n;
}

static uint64_t raw_next_deadline(const homa_io_sock *s)
{
    uint64_t a = homa_faultq_next_deadline(&s->txq);
    uint64_t b = homa_faultq_next_deadline(&s->rxq);
    return a < b ? a : b;
}

static void raw_counters(const homa_io_sock *s, homa_driver_counters *sum)
{
    homa_io_counters_add(&s->ctr, sum);
}

int homa_raw_supported(void)
{
    int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, HOMA_IPPROTO);
    if (fd < 0) return 0;
    close(fd);
    return 1;
}

const homa_io_ops homa_raw_ops = {
    .name = "raw",
    .open = raw_open,
    .close = raw_close,
    .fd = raw_fd,
    .local = raw_local,
    .send = raw_send,
    .flush = raw_flush,
    .recv = raw_recv,
    .next_deadline = raw_next_deadline,
    .counters = raw_counters,
};
