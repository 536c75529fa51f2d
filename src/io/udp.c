/* The UDP driver: Homa packets as UDP payloads on a dual-stack socket.
 *
 * Batching is what makes user-space Homa competitive: sendmmsg/recvmmsg move
 * many packets per system call, UDP GSO lets one send carry a run of
 * full-size DATA packets that the kernel (or NIC) cuts into datagrams, and
 * UDP GRO hands us many coalesced datagrams in one buffer.  GSO/GRO are
 * probed at run time and quietly switched off when the kernel refuses them.
 *
 * Fault injection and packet capture sit here, below the engine, so they
 * see exactly what crosses the wire.  What the raw driver (raw.c) does the
 * same way is shared with it: the address helpers, buffer sizing and the
 * garbage filter (common.c), the error-queue reader (errqueue.c) and the
 * queue of packets that delay and reorder faults hold back (faultq.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/wire.h"
#include "io/common.h"
#include "io/errqueue.h"
#include "io/faultq.h"
#include "io/io.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

#define RX_BATCH 16       /* datagrams per recvmmsg */
#define RX_BUF_SIZE 65536 /* a datagram or a GRO buffer is at most 64 KB */
#define RX_MAX_SEGS 64    /* Linux coalesces at most 64 datagrams (UDP_GRO_CNT_MAX) */
#define HOLD_MAX 4096     /* packets held back by fault injection, per direction */
#define RX_OUT_CAP (RX_BATCH * RX_MAX_SEGS * 2 + HOLD_MAX)
#define TX_BATCH 32         /* datagrams per sendmmsg */
#define GSO_MAX_SEGS 64     /* the kernel's oldest UDP_MAX_SEGMENTS */
#define GSO_MAX_BYTES 65000 /* one GSO send is one (large) UDP datagram */
#define TX_IOV_CAP (TX_BATCH * GSO_MAX_SEGS * 2)
#define CTRL_SIZE 192
_Static_assert(HOMA_IO_PLACED_HDR == HOMA_DATA_HDR_LEN, "placed packets carry the DATA header");
/* Direct receive: a DATA payload at least this long is worth a header peek
 * (one more system call) to have the kernel write it straight into the
 * message; below it the copy costs less than the call. */
#define DIRECT_MIN 16384
/* Leave direct mode after this many datagrams in a row that were not placed
 * (small or coalesced): they paid for a peek for nothing. */
#define DIRECT_IDLE 8
#define ENOTSUPP_KERNEL 524 /* what the kernel returns when the device can't do GSO */

#define CTR_ADD(s, field, n) HOMA_IO_CTR_ADD(&(s)->ctr, field, n)

/* Bookkeeping for one datagram (possibly a GSO run) being assembled. */
struct tx_meta {
    struct sockaddr_in6 sa;
    homa_addr addr;
    uint16_t port;
    uint8_t tos;
    int gso_ok;        /* DATA from the engine: may be part of a GSO run */
    int closed;        /* a short segment ended the run */
    uint32_t seg_size; /* size of every segment but the last */
    int segs;
    size_t bytes;
    int iov_start; /* 2 iovecs per segment (header, payload) */
    union {
        char buf[CTRL_SIZE];
        struct cmsghdr align;
    } ctrl;
};

struct homa_io_sock {
    int fd;
    homa_endpoint local;
    int wildcard; /* bound to the wildcard address */
    int gso;      /* send runs with UDP_SEGMENT */
    int gro;      /* UDP_GRO enabled */
    homa_pcap *pcap;
    homa_driver_counters ctr;

    /* Transmit side (one sender at a time). */
    homa_fault_state txf;
    struct mmsghdr tx_mm[TX_BATCH];
    struct tx_meta tx_meta[TX_BATCH];
    struct iovec tx_iov[TX_IOV_CAP];
    int tx_n;
    int tx_iov_n;
    /* Delayed or reordered, not yet sent; its released copies are
     * referenced by the batch being built until it is flushed. */
    homa_faultq txq;

    /* Receive side (one receiver at a time). */
    homa_fault_state rxf;
    uint8_t *rx_buf;
    struct mmsghdr rx_mm[RX_BATCH];
    struct iovec rx_iov[RX_BATCH];
    struct sockaddr_in6 rx_sa[RX_BATCH];
    union {
        char buf[CTRL_SIZE];
        struct cmsghdr align;
    } rx_ctrl[RX_BATCH];
    homa_io_rx *rx_out;
    int rx_out_n;
    int rx_out_pos;
    homa_faultq rxq;        /* released copies are freed at the next refill */
    homa_io_place_fn place; /* direct receive; NULL = off */
    void *place_ctx;
    int err_pending; /* an ICMP error was reported: read the error queue (atomic) */
    int direct;      /* peek at each datagram first (large DATA seen lately) */
    int direct_idle; /* datagrams in a row not placed while direct */
    uint8_t rx_hdr[HOMA_DATA_HDR_LEN]; /* header of the placed packet */
    /* Receive timestamps: CLOCK_REALTIME minus CLOCK_MONOTONIC, sampled at
     * each refill, and the monotonic arrival of the datagram being split
     * (0 = unknown). */
    int64_t rx_clock_off;
    uint64_t rx_arrived;
    uint32_t rx_ovfl; /* the kernel's running count of receive-buffer drops */

    /* Live fault changes (set_faults): the new spec waits here and the
     * sender and the receiver each pick it up at their next call, so
     * neither injector is touched by another thread. */
    pthread_mutex_t fault_lock;
    homa_faults fault_next;
    uint64_t fault_origin; /* blackouts count from the change */
    unsigned fault_gen;    /* bumped per change (atomic) */
    unsigned tx_fault_gen, rx_fault_gen;
    uint64_t fault_salt;
    homa_io_place_fn place_opt; /* direct receive as opened (before rx faults) */
};

static int probe_opt(int level, int opt, int val)
{
    int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    int ok = setsockopt(fd, level, opt, &val, sizeof(val)) == 0;
    close(fd);
    return ok;
}

static int gso_cached = -1, gro_cached = -1;

int homa_udp_gso_supported(void)
{
    int v = __atomic_load_n(&gso_cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = probe_opt(SOL_UDP, UDP_SEGMENT, 1400);
        __atomic_store_n(&gso_cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

int homa_udp_gro_supported(void)
{
    int v = __atomic_load_n(&gro_cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = probe_opt(SOL_UDP, UDP_GRO, 1);
        __atomic_store_n(&gro_cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

int homa_udp_uses_gso(const homa_io_sock *s)
{
    return __atomic_load_n(&s->gso, __ATOMIC_RELAXED);
}

int homa_udp_uses_gro(const homa_io_sock *s)
{
    return s->gro;
}

static int udp_open(const homa_endpoint *local, const homa_io_opts *opts, homa_io_sock **out)
{
    homa_io_sock *s = calloc(1, sizeof(*s));
    if (s == NULL) return HOMA_ERR_NOMEM;
    s->rx_buf = malloc((size_t)RX_BATCH * RX_BUF_SIZE);
    s->rx_out = malloc(sizeof(homa_io_rx) * RX_OUT_CAP);
    if (s->rx_buf == NULL || s->rx_out == NULL) {
        free(s->rx_buf);
        free(s->rx_out);
        free(s);
        return HOMA_ERR_NOMEM;
    }
    homa_faultq_init(&s->txq, HOLD_MAX, 0);
    homa_faultq_init(&s->rxq, HOLD_MAX, 0);
    s->fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s->fd < 0) goto io_err;
    int off = 0, on = 1;
    /* Dual stack: IPv4 peers appear as IPv4-mapped IPv6 addresses. */
    setsockopt(s->fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    struct sockaddr_in6 sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(local->port);
    memcpy(&sa.sin6_addr, local->addr.bytes, 16);
    if (bind(s->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int e = errno;
        close(s->fd);
        free(s->rx_buf);
        free(s->rx_out);
        free(s);
        return e == EADDRINUSE                             ? HOMA_ERR_PORT_IN_USE
               : (e == EADDRNOTAVAIL || e == EAFNOSUPPORT) ? HOMA_ERR_ADDR
                                                           : HOMA_ERR_IO;
    }
    socklen_t slen = sizeof(sa);
    if (getsockname(s->fd, (struct sockaddr *)&sa, &slen) != 0) goto io_err;
    s->local.port = ntohs(sa.sin6_port);
    s->local.addr = local->addr;
    s->wildcard = homa_io_addr_is_zero(&local->addr);

    homa_io_set_bufs(s->fd, opts);
    /* Received TOS is only needed for captures and tests, but asking for it
     * always costs one small cmsg and keeps the code path uniform. */
    setsockopt(s->fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof(on));
    setsockopt(s->fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &on, sizeof(on));
    /* ICMP errors (port unreachable) queued for us: RPCs to a port nobody
     * listens on fail at once instead of at the timeout. */
    setsockopt(s->fd, IPPROTO_IP, IP_RECVERR, &on, sizeof(on));
    setsockopt(s->fd, IPPROTO_IPV6, IPV6_RECVERR, &on, sizeof(on));
    /* When each datagram reached the socket: a RESEND that waited in the
     * queue while we sent what it asks for is not answered again (see
     * homa_engine_input_at).  And the kernel's count of datagrams dropped
     * for a full receive buffer, losses that fault injection did not make. */
    setsockopt(s->fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on));
    setsockopt(s->fd, SOL_SOCKET, SO_RXQ_OVFL, &on, sizeof(on));
    unsigned flags = opts ? opts->flags : 0;
    if (!(flags & HOMA_IO_NO_GRO))
        s->gro = setsockopt(s->fd, SOL_UDP, UDP_GRO, &on, sizeof(on)) == 0;
    if (!(flags & HOMA_IO_NO_GSO)) s->gso = homa_udp_gso_supported();
    s->pcap = opts ? opts->pcap : NULL;
    if (s->pcap != NULL) {
        /* The capture wants the destination address of received packets,
         * which a wildcard-bound socket only learns from PKTINFO. */
        setsockopt(s->fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof(on));
    }
    const homa_faults *f = opts ? opts->faults : NULL;
    uint64_t salt = opts ? opts->fault_salt : 0;
    /* The runtime's clock is CLOCK_MONOTONIC too: blackout windows count
     * from the moment the socket opened. */
    uint64_t opened = homa_io_monotonic_ns();
    homa_fault_init(&s->txf, f, HOMA_FAULT_TX, salt, opened);
    homa_fault_init(&s->rxf, f, HOMA_FAULT_RX, salt, opened);
    /* Fault injection on receive holds and duplicates packets in driver
     * memory, which a payload already in the message cannot take part in. */
    s->fault_salt = salt;
    pthread_mutex_init(&s->fault_lock, NULL);
    if (opts && opts->place) {
        s->place_opt = opts->place;
        s->place_ctx = opts->place_ctx;
        if (!s->rxf.active) s->place = opts->place;
    }

    for (int i = 0; i < RX_BATCH; i++) {
        s->rx_iov[i].iov_base = s->rx_buf + (size_t)i * RX_BUF_SIZE;
        s->rx_iov[i].iov_len = RX_BUF_SIZE;
    }
    *out = s;
    return 0;

io_err:
    if (s->fd >= 0) close(s->fd);
    free(s->rx_buf);
    free(s->rx_out);
    free(s);
    return HOMA_ERR_IO;
}

/* Takes the pending fault spec into one direction's injector.  Called by
 * the sender or the receiver itself (they own txf / rxf). */
static void fault_pickup(homa_io_sock *s, unsigned dir, unsigned gen)
{
    pthread_mutex_lock(&s->fault_lock);
    homa_fault_state *st = dir == HOMA_FAULT_TX ? &s->txf : &s->rxf;
    homa_fault_init(st, &s->fault_next, dir, s->fault_salt, s->fault_origin);
    pthread_mutex_unlock(&s->fault_lock);
    if (dir == HOMA_FAULT_TX) {
        s->tx_fault_gen = gen;
    } else {
        s->rx_fault_gen = gen;
        /* Receive faults copy packets aside, which a payload already
         * written into its message cannot take part in. */
        s->place = s->rxf.active ? NULL : s->place_opt;
        if (s->place == NULL) s->direct = 0;
    }
}

static void udp_set_faults(homa_io_sock *s, const homa_faults *f, uint64_t now)
{
    pthread_mutex_lock(&s->fault_lock);
    if (f != NULL)
        s->fault_next = *f;
    else
        memset(&s->fault_next, 0, sizeof(s->fault_next));
    s->fault_origin = now;
    __atomic_fetch_add(&s->fault_gen, 1u, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->fault_lock);
}

static void udp_close(homa_io_sock *s)
{
    if (s == NULL) return;
    close(s->fd);
    homa_faultq_free(&s->txq);
    homa_faultq_free(&s->rxq);
    free(s->rx_buf);
    free(s->rx_out);
    pthread_mutex_destroy(&s->fault_lock);
    free(s);
}

static int udp_fd(const homa_io_sock *s)
{
    return s->fd;
}

static void udp_local(const homa_io_sock *s, homa_endpoint *out)
{
    *out = s->local;
}

/* ---------------------------------------------------------------- send */

static void tx_account(homa_io_sock *s, const struct tx_meta *m)
{
    CTR_ADD(s, datagrams_out, m->segs);
    CTR_ADD(s, bytes_out, m->bytes);
    if (m->segs > 1) {
        CTR_ADD(s, gso_sends, 1);
        CTR_ADD(s, gso_segments, m->segs);
    }
}

/* Sends the segments of a GSO run one datagram each (after the kernel
 * refused the GSO send). */
static void tx_unbatch(homa_io_sock *s, struct tx_meta *m)
{
    for (int k = 0; k < m->segs; k++) {
        struct msghdr mh;
        memset(&mh, 0, sizeof(mh));
        mh.msg_name = &m->sa;
        mh.msg_namelen = sizeof(m->sa);
        mh.msg_iov = &s->tx_iov[m->iov_start + 2 * k];
        mh.msg_iovlen = 2;
        /* Keep only the TOS cmsg (the first one, when there is one). */
        if (m->tos != 0) {
            mh.msg_control = m->ctrl.buf;
            mh.msg_controllen = CMSG_SPACE(sizeof(int));
        }
        CTR_ADD(s, send_syscalls, 1);
        size_t len = mh.msg_iov[0].iov_len + mh.msg_iov[1].iov_len;
        int r = (int)sendmsg(s->fd, &mh, 0);
        if (r < 0 && (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH)) {
            /* a pending ICMP error, not this datagram's: once more */
            __atomic_store_n(&s->err_pending, 1, __ATOMIC_RELAXED);
            r = (int)sendmsg(s->fd, &mh, 0);
        }
        if (r < 0) {
            CTR_ADD(s, send_errors, 1);
        } else {
            CTR_ADD(s, datagrams_out, 1);
            CTR_ADD(s, bytes_out, len);
        }
    }
}

static void tx_finish_meta(struct tx_meta *m, struct mmsghdr *mm, struct iovec *iov)
{
    memset(&mm->msg_hdr, 0, sizeof(mm->msg_hdr));
    mm->msg_hdr.msg_name = &m->sa;
    mm->msg_hdr.msg_namelen = sizeof(m->sa);
    mm->msg_hdr.msg_iov = iov + m->iov_start;
    mm->msg_hdr.msg_iovlen = (size_t)m->segs * 2;
    /* The socket's own TOS is 0 (priority 0): a datagram of that priority
     * needs no control message, and a whole batch of one segment none. */
    int tos = m->tos;
    size_t clen = (tos != 0 ? CMSG_SPACE(sizeof(int)) : 0) +
                  (m->segs > 1 ? CMSG_SPACE(sizeof(uint16_t)) : 0);
    if (clen == 0) {
        mm->msg_hdr.msg_control = NULL;
        mm->msg_hdr.msg_controllen = 0;
        return;
    }
    memset(m->ctrl.buf, 0, clen);
    mm->msg_hdr.msg_control = m->ctrl.buf;
    mm->msg_hdr.msg_controllen = clen;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mm->msg_hdr);
    if (tos != 0) {
        /* An IPv4-mapped destination goes through the kernel's IPv4 path,
         * which only honours IP_TOS; a real IPv6 one only IPV6_TCLASS. */
        if (homa_io_addr_is_v4(&m->addr)) {
            c->cmsg_level = IPPROTO_IP;
            c->cmsg_type = IP_TOS;
        } else {
            c->cmsg_level = IPPROTO_IPV6;
            c->cmsg_type = IPV6_TCLASS;
        }
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &tos, sizeof(tos));
        c = CMSG_NXTHDR(&mm->msg_hdr, c);
    }
    if (m->segs > 1) {
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t seg = (uint16_t)m->seg_size;
        memcpy(CMSG_DATA(c), &seg, sizeof(seg));
    }
}

static void tx_flush_batch(homa_io_sock *s)
{
    for (int i = 0; i < s->tx_n; i++)
        tx_finish_meta(&s->tx_meta[i], &s->tx_mm[i], s->tx_iov);
    int done = 0, retried = -1;
    while (done < s->tx_n) {
        CTR_ADD(s, send_syscalls, 1);
        int r = sendmmsg(s->fd, &s->tx_mm[done], (unsigned)(s->tx_n - done), 0);
        if (r > 0) {
            for (int i = done; i < done + r; i++)
                tx_account(s, &s->tx_meta[i]);
            done += r;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        /* The datagram at `done` failed.  A GSO failure means the route's
         * device can't segment it: stop using GSO and send it unbatched. */
        int e = errno;
        struct tx_meta *m = &s->tx_meta[done];
        if (m->segs > 1 && (e == EIO || e == EINVAL || e == EOPNOTSUPP || e == ENOPROTOOPT ||
                            e == ENOTSUPP_KERNEL)) {
            __atomic_store_n(&s->gso, 0, __ATOMIC_RELAXED);
            tx_unbatch(s, m);
        } else {
            /* A pending ICMP error (IP_RECVERR), about any earlier packet,
             * is reported by (and cleared from) the next send, which then
             * sent nothing: note it for the error queue and send that
             * datagram again, once. */
            if (e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH) {
                __atomic_store_n(&s->err_pending, 1, __ATOMIC_RELAXED);
                if (retried != done) {
                    retried = done;
                    continue;
                }
            }
            CTR_ADD(s, send_errors, m->segs);
        }
        done++;
    }
    s->tx_n = 0;
    s->tx_iov_n = 0;
    homa_faultq_reclaim(&s->txq); /* the released copies it referenced */
}

/* Adds one packet (a + b) to the batch, extending the previous datagram's
 * GSO run when possible. */
static void tx_emit(homa_io_sock *s, const homa_addr *addr, uint16_t port, uint8_t tos,
                    const uint8_t *a, size_t alen, const uint8_t *b, size_t blen, int gso_ok)
{
    size_t len = alen + blen;
    if (s->pcap != NULL) {
        homa_addr src = s->local.addr;
        if (s->wildcard) homa_pcap_source_for(s->pcap, addr, &src);
        homa_pcap_write(s->pcap, &src, s->local.port, addr, port, tos, a, alen, b, blen);
        CTR_ADD(s, pcap_records, 1);
    }
    struct tx_meta *m = s->tx_n > 0 ? &s->tx_meta[s->tx_n - 1] : NULL;
    if (m != NULL && gso_ok && m->gso_ok && s->gso && !m->closed && len <= m->seg_size &&
        m->segs < GSO_MAX_SEGS && m->bytes + len <= GSO_MAX_BYTES && m->port == port &&
        m->tos == tos && memcmp(&m->addr, addr, sizeof(*addr)) == 0 &&
        m->iov_start + 2 * m->segs + 2 <= TX_IOV_CAP) {
        /* The kernel cuts a GSO send every seg_size bytes; only the last
         * segment may be shorter, so a short packet closes the run. */
        if (len < m->seg_size) m->closed = 1;
    } else {
        if (s->tx_n == TX_BATCH || s->tx_iov_n + 2 > TX_IOV_CAP) tx_flush_batch(s);
        m = &s->tx_meta[s->tx_n++];
        memset(&m->sa, 0, sizeof(m->sa));
        m->sa.sin6_family = AF_INET6;
        m->sa.sin6_port = htons(port);
        memcpy(&m->sa.sin6_addr, addr->bytes, 16);
        m->addr = *addr;
        m->port = port;
        m->tos = tos;
        m->gso_ok = gso_ok;
        m->closed = 0;
        m->seg_size = (uint32_t)len;
        m->segs = 0;
        m->bytes = 0;
        m->iov_start = s->tx_iov_n;
    }
    struct iovec *iov = &s->tx_iov[s->tx_iov_n];
    iov[0].iov_base = (void *)a;
    iov[0].iov_len = alen;
    iov[1].iov_base = (void *)b;
    iov[1].iov_len = blen;
    s->tx_iov_n += 2;
    m->segs++;
    m->bytes += len;
}

/* A copy released by the send queue joins the batch (homa_faultq_emit_fn). */
static void tx_emit_held(void *ctx, const homa_faultq_pkt *h)
{
    homa_io_sock *s = ctx;
    /* The copy must outlive the batch that references it: the queue puts
     * it among the released copies only after this returns, so a flush
     * here (making room, as tx_emit would) reclaims only the older copies,
     * which the flushed batch referenced; this one goes with the next. */
    if (s->tx_n == TX_BATCH || s->tx_iov_n + 2 > TX_IOV_CAP) tx_flush_batch(s);
    tx_emit(s, &h->addr, h->port, h->tos, h->data, h->len, NULL, 0, 0);
}

/* Emits reordered packets (after a packet that passed) and delayed ones
 * that are due. */
static void tx_release(homa_io_sock *s, uint64_t now, int after_pass)
{
    homa_faultq_release(&s->txq, now, after_pass, tx_emit_held, s);
}

static int udp_send(homa_io_sock *s, uint64_t now, const homa_pkt_out *pkts, int n)
{
    unsigned gen = __atomic_load_n(&s->fault_gen, __ATOMIC_ACQUIRE);
    if (gen != s->tx_fault_gen) fault_pickup(s, HOMA_FAULT_TX, gen);
    for (int i = 0; i < n; i++) {
        const homa_pkt_out *p = &pkts[i];
        uint8_t tos = (uint8_t)((p->priority & 7) << 5);
        int copies = homa_io_fault_send(&s->txf, &s->txq, &s->ctr, now, p, tos);
        if (copies == 0) continue; /* dropped, or held to leave later */
        int gso_ok = p->type == HOMA_PKT_DATA;
        for (int k = 0; k < copies; k++)
            tx_emit(s, &p->dst, p->dport, tos, p->hdr, p->hdr_len, p->payload, p->payload_len,
                    gso_ok);
        if (homa_faultq_count(&s->txq) > 0) tx_release(s, now, 1);
    }
    if (homa_faultq_count(&s->txq) > 0) tx_release(s, now, 0);
    if (s->tx_n > 0) tx_flush_batch(s);
    return n;
}

static void udp_flush(homa_io_sock *s, uint64_t now)
{
    if (homa_faultq_count(&s->txq) == 0) return;
    tx_release(s, now, 0);
    if (s->tx_n > 0) tx_flush_batch(s);
}

/* ---------------------------------------------------------------- receive */

static void rx_push(homa_io_sock *s, const homa_addr *src, uint16_t sport, uint8_t tos,
                    const uint8_t *d, uint32_t len, uint64_t arrived)
{
    if (s->rx_out_n >= RX_OUT_CAP) {
        CTR_ADD(s, garbage_in, 1); /* cannot happen with Linux's GRO limits */
        return;
    }
    homa_io_rx *r = &s->rx_out[s->rx_out_n++];
    r->src = *src;
    r->sport = sport;
    r->tos = tos;
    r->placed = 0;
    r->unreach = 0;
    r->len = len;
    r->data = d;
    r->arrived = arrived;
}

/* A copy released by the receive queue (homa_faultq_emit_fn); it stays
 * valid until the next refill. */
static void rx_push_held(void *ctx, const homa_faultq_pkt *h)
{
    homa_io_sock *s = ctx;
    rx_push(s, &h->addr, h->port, h->tos, h->data, h->len, 0); /* arrives now */
}

static void rx_release(homa_io_sock *s, uint64_t now, int after_pass)
{
    homa_faultq_release(&s->rxq, now, after_pass, rx_push_held, s);
}

static void rx_segment(homa_io_sock *s, uint64_t now, const homa_addr *src, uint16_t sport,
                       const homa_addr *dst, uint8_t tos, const uint8_t *d, uint32_t len)
{
    CTR_ADD(s, datagrams_in, 1);
    CTR_ADD(s, bytes_in, len);
    if (s->pcap != NULL) {
        homa_pcap_write(s->pcap, src, sport, dst, s->local.port, tos, d, len, NULL, 0);
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
    if ((act == HOMA_FAULT_DELAY || act == HOMA_FAULT_REORDER) &&
        homa_faultq_hold(&s->rxq, now + hold, act == HOMA_FAULT_REORDER ? wait : 0, src, sport, tos,
                         d, len, NULL, 0) == 0) {
        CTR_ADD(s, fault_delays, act == HOMA_FAULT_DELAY);
        CTR_ADD(s, fault_reorders, act == HOMA_FAULT_REORDER);
        return;
    }
    rx_push(s, src, sport, tos, d, len, s->rx_arrived);
    if (act == HOMA_FAULT_DUP) {
        CTR_ADD(s, fault_dups, 1);
        rx_push(s, src, sport, tos, d, len, s->rx_arrived);
    }
    if (homa_faultq_count(&s->rxq) > 0) rx_release(s, now, 1);
}

static int64_t ts_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000ll + t->tv_nsec;
}

/* CLOCK_REALTIME (the kernel's receive timestamps) minus CLOCK_MONOTONIC
 * (ours), from the tightest of a few samples: a preemption between the
 * reads would skew every timestamp of the batch. */
static int64_t clock_offset(void)
{
    int64_t best = 0, best_gap = INT64_MAX;
    for (int i = 0; i < 3; i++) {
        struct timespec m1, r, m2;
        clock_gettime(CLOCK_MONOTONIC, &m1);
        clock_gettime(CLOCK_REALTIME, &r);
        clock_gettime(CLOCK_MONOTONIC, &m2);
        int64_t gap = ts_ns(&m2) - ts_ns(&m1);
        if (gap < best_gap) {
            best_gap = gap;
            best = ts_ns(&r) - (ts_ns(&m1) + gap / 2);
        }
        if (gap < 2000) break;
    }
    return best;
}

/* Reads the control messages of a received datagram. */
static void rx_cmsgs(homa_io_sock *s, struct msghdr *mh, int *gro, uint8_t *tos, homa_addr *dst)
{
    *gro = 0;
    *tos = 0;
    *dst = s->local.addr;
    s->rx_arrived = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c != NULL; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof(ts));
            s->rx_arrived = (uint64_t)(ts_ns(&ts) - s->rx_clock_off);
        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
            uint32_t n;
            memcpy(&n, CMSG_DATA(c), sizeof(n));
            /* a running count: what it grew by since the last datagram */
            if (n != s->rx_ovfl) CTR_ADD(s, rx_overflows, n - s->rx_ovfl);
            s->rx_ovfl = n;
        } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            memcpy(gro, CMSG_DATA(c), sizeof(*gro));
        } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
            *tos = *(const uint8_t *)CMSG_DATA(c);
        } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
            int tc;
            memcpy(&tc, CMSG_DATA(c), sizeof(tc));
            *tos = (uint8_t)tc;
        } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
            struct in6_pktinfo pi;
            memcpy(&pi, CMSG_DATA(c), sizeof(pi));
            memcpy(dst->bytes, &pi.ipi6_addr, 16);
        }
    }
}

/* Worth placing: one whole (not coalesced) DATA datagram with a long payload. */
static int placeable(const uint8_t *d, uint32_t len, int gro)
{
    return len >= HOMA_DATA_HDR_LEN + DIRECT_MIN && d[11] == HOMA_PKT_DATA &&
           !(gro > 0 && (uint32_t)gro < len);
}

/* Splits one received datagram (possibly a GRO buffer) into packets. */
static void rx_datagram(homa_io_sock *s, uint64_t now, struct msghdr *mh,
                        const struct sockaddr_in6 *sa, const uint8_t *d, uint32_t len)
{
    if (mh->msg_flags & MSG_TRUNC) {
        CTR_ADD(s, datagrams_in, 1);
        CTR_ADD(s, garbage_in, 1);
        return;
    }
    int gro;
    uint8_t tos;
    homa_addr dst;
    rx_cmsgs(s, mh, &gro, &tos, &dst);
    /* A clock step between the two clocks' samples: no timestamp. */
    if (s->rx_arrived > now + 1000000000ull || s->rx_arrived + 10000000000ull < now)
        s->rx_arrived = 0;
    homa_addr src;
    memcpy(src.bytes, &sa->sin6_addr, 16);
    uint16_t sport = ntohs(sa->sin6_port);
    /* Large DATA packets are coming: from now on, peek first so the next
     * ones can be read in place. */
    if (s->place != NULL && placeable(d, len, gro)) {
        s->direct = 1;
        s->direct_idle = 0;
    }
    uint32_t seg = (gro > 0 && (uint32_t)gro < len) ? (uint32_t)gro : len;
    if (seg < len) {
        CTR_ADD(s, gro_buffers, 1);
        CTR_ADD(s, gro_segments, (len + seg - 1) / seg);
    }
    if (len == 0) {
        rx_segment(s, now, &src, sport, &dst, tos, d, 0);
        return;
    }
    /* A GRO buffer is a run of datagrams of gso_size bytes (the last
     * may be shorter), exactly as the sender's GSO cut them. */
    for (uint32_t off = 0; off < len; off += seg) {
        uint32_t l = len - off < seg ? len - off : seg;
        rx_segment(s, now, &src, sport, &dst, tos, d + off, l);
    }
}

static void rx_prepare(homa_io_sock *s, int i)
{
    struct msghdr *mh = &s->rx_mm[i].msg_hdr;
    mh->msg_name = &s->rx_sa[i];
    mh->msg_namelen = sizeof(s->rx_sa[i]);
    mh->msg_iov = &s->rx_iov[i];
    mh->msg_iovlen = 1;
    mh->msg_control = s->rx_ctrl[i].buf;
    mh->msg_controllen = sizeof(s->rx_ctrl[i].buf);
    mh->msg_flags = 0;
}

/* Direct mode: peeks at each datagram's header.  A large DATA packet the
 * engine can place is read with its payload going straight into the
 * message (the kernel's copy is the only one) and returned alone; others
 * are read into the receive buffers as usual. */
static void rx_direct(homa_io_sock *s, uint64_t now)
{
    for (int i = 0; i < RX_BATCH; i++) {
        rx_prepare(s, i);
        struct msghdr *mh = &s->rx_mm[i].msg_hdr;
        uint8_t *d = s->rx_iov[i].iov_base;
        struct iovec peek_iov = {d, HOMA_DATA_HDR_LEN};
        mh->msg_iov = &peek_iov;
        CTR_ADD(s, recv_syscalls, 1);
        CTR_ADD(s, rx_peeks, 1);
        ssize_t r = recvmsg(s->fd, mh, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
        if (r < 0) { /* nothing there, or a pending ICMP error */
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                __atomic_store_n(&s->err_pending, 1, __ATOMIC_RELAXED);
            return;
        }
        uint32_t len = (uint32_t)r; /* MSG_TRUNC: the whole datagram's length */
        int gro;
        uint8_t tos;
        homa_addr dst;
        rx_cmsgs(s, mh, &gro, &tos, &dst);
        if (placeable(d, len, gro) && !(mh->msg_flags & MSG_CTRUNC)) {
            /* Placed packets go out alone, first of their batch, so the
             * caller finishes each placement before the next begins. */
            if (s->rx_out_n > 0) return;
            homa_addr src;
            memcpy(src.bytes, &s->rx_sa[i].sin6_addr, 16);
            uint16_t sport = ntohs(s->rx_sa[i].sin6_port);
            uint8_t *to = s->place(s->place_ctx, now, &src, d, HOMA_DATA_HDR_LEN, len);
            if (to != NULL) {
                struct iovec iov[2] = {{s->rx_hdr, HOMA_DATA_HDR_LEN},
                                       {to, len - HOMA_DATA_HDR_LEN}};
                struct msghdr rm = {.msg_iov = iov, .msg_iovlen = 2};
                CTR_ADD(s, recv_syscalls, 1);
                ssize_t got = recvmsg(s->fd, &rm, MSG_DONTWAIT);
                if (got < 0 || (rm.msg_flags & MSG_TRUNC)) got = 0;
                CTR_ADD(s, datagrams_in, 1);
                CTR_ADD(s, bytes_in, got);
                if (got > 0) CTR_ADD(s, rx_placed, 1);
                if (s->pcap != NULL && got >= HOMA_DATA_HDR_LEN) {
                    homa_pcap_write(s->pcap, &src, sport, &dst, s->local.port, tos, s->rx_hdr,
                                    HOMA_DATA_HDR_LEN, to, (size_t)got - HOMA_DATA_HDR_LEN);
                    CTR_ADD(s, pcap_records, 1);
                }
                homa_io_rx *o = &s->rx_out[s->rx_out_n++];
                o->src = src;
                o->sport = sport;
                o->tos = tos;
                o->placed = 1;
                o->unreach = 0;
                o->arrived = 0;
                o->len = (uint32_t)got;
                o->data = s->rx_hdr;
                s->direct_idle = 0;
                return;
            }
        }
        /* Read it normally (the peek told us nothing we keep). */
        rx_prepare(s, i);
        CTR_ADD(s, recv_syscalls, 1);
        r = recvmsg(s->fd, mh, MSG_DONTWAIT);
        if (r < 0) return;
        rx_datagram(s, now, mh, &s->rx_sa[i], d, (uint32_t)r);
        if (!placeable(d, len, gro) && ++s->direct_idle >= DIRECT_IDLE) {
            s->direct = 0;
            return;
        }
    }
    return;
}

/* Reads the error queue: each ICMP unreachable becomes an `unreach` entry. */
static void rx_errqueue(homa_io_sock *s)
{
    uint64_t reads;
    int n = homa_io_errqueue_drain(s->fd, 0, 16, &s->rx_out[s->rx_out_n], RX_OUT_CAP - s->rx_out_n,
                                   &reads);
    s->rx_out_n += n;
    CTR_ADD(s, recv_syscalls, reads);
    CTR_ADD(s, icmp_unreach, n);
}

static void rx_refill(homa_io_sock *s, uint64_t now)
{
    s->rx_clock_off = clock_offset();
    unsigned gen = __atomic_load_n(&s->fault_gen, __ATOMIC_ACQUIRE);
    if (gen != s->rx_fault_gen) fault_pickup(s, HOMA_FAULT_RX, gen);
    homa_faultq_reclaim(&s->rxq);
    s->rx_out_n = 0;
    s->rx_out_pos = 0;
    if (s->direct) {
        rx_direct(s, now);
    } else {
        for (int i = 0; i < RX_BATCH; i++)
            rx_prepare(s, i);
        CTR_ADD(s, recv_syscalls, 1);
        int r = recvmmsg(s->fd, s->rx_mm, RX_BATCH, MSG_DONTWAIT, NULL);
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            __atomic_store_n(&s->err_pending, 1, __ATOMIC_RELAXED);
        for (int i = 0; i < r; i++)
            rx_datagram(s, now, &s->rx_mm[i].msg_hdr, &s->rx_sa[i], s->rx_iov[i].iov_base,
                        s->rx_mm[i].msg_len);
    }
    if (homa_faultq_count(&s->rxq) > 0) rx_release(s, now, 0);
    if (__atomic_exchange_n(&s->err_pending, 0, __ATOMIC_RELAXED)) rx_errqueue(s);
}

static int udp_recv(homa_io_sock *s, uint64_t now, homa_io_rx *out, int max)
{
    if (s->rx_out_pos >= s->rx_out_n) rx_refill(s, now);
    int n = s->rx_out_n - s->rx_out_pos;
    if (n > max) n = max;
    if (n > 0) {
        memcpy(out, &s->rx_out[s->rx_out_pos], sizeof(*out) * (size_t)n);
        s->rx_out_pos += n;
    }
    return n;
}

static uint64_t udp_next_deadline(const homa_io_sock *s)
{
    uint64_t a = homa_faultq_next_deadline(&s->txq);
    uint64_t b = homa_faultq_next_deadline(&s->rxq);
    return a < b ? a : b;
}

static void udp_counters(const homa_io_sock *s, homa_driver_counters *sum)
{
    homa_io_counters_add(&s->ctr, sum);
}

const homa_io_ops homa_udp_ops = {
    .name = "udp",
    .open = udp_open,
    .close = udp_close,
    .fd = udp_fd,
    .local = udp_local,
    .send = udp_send,
    .flush = udp_flush,
    .recv = udp_recv,
    .next_deadline = udp_next_deadline,
    .counters = udp_counters,
    .set_faults = udp_set_faults,
};
