/* homa-perf cluster: the TCP client of the cluster agents.
 *
 * The same protocol as homa-perf's TCP transport (tcp.c): persistent
 * connections with TCP_NODELAY, messages framed as a 4-byte big-endian
 * length and the payload, the server (tcp_server_start) echoing every frame.
 * The difference is that one client reaches every other host: it keeps
 * `conns` connections to each, all driven by one thread with one epoll set,
 * as the Homa client drives one socket that reaches every host.  A request
 * goes to the connection to its destination with the fewest bytes in
 * flight; responses on a connection come back in order (head-of-line
 * blocking behind long messages is part of what TCP is measured with).
 *
 * With a listening port the same thread and epoll set also run the host's
 * echo server (accepted connections, every complete frame sent back), as
 * the Homa client's thread answers requests arriving on its socket.
 * Connections to the peers are opened by the first start() call. */
#include "bytebuf.h"
#include "cluster.h"

#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FRAME_HDR 4
#define READ_CHUNK (256 * 1024)
#define MAX_FRAME (1u << 30)

enum { T_CLIENT, T_SERVER, T_LISTEN };

typedef struct tconn {
    int kind;
    int fd;
    int want_out;
    int frozen; /* completions handed out by the last poll point into `in` */
    tbuf in, out;
    reqfifo q;      /* requests in flight, oldest first */
    uint64_t bytes; /* request bytes in flight */
} tconn;

typedef struct ctcp {
    cluster_client base;
    uint64_t spin_ns;
    int epfd;
    int self;
    int ndst, conns;
    int connected;
    perf_addr peers[CLUSTER_MAX_HOSTS];
    tconn *c; /* ndst * conns; destination d uses c[d*conns ..] */
    tconn listener;
    tconn **srv; /* accepted connections */
    int nsrv, srvcap;
} ctcp;

static int set_interest(int epfd, tconn *c, int want_out)
{
    if (c->want_out == want_out) return 0;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0) return -errno;
    c->want_out = want_out;
    return 0;
}

static int flush(int fd, tbuf *b)
{
    while (b->len > b->off) {
        ssize_t r = send(fd, b->p + b->off, b->len - b->off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
            return -errno;
        }
        b->off += (size_t)r;
    }
    b->off = b->len = 0;
    return 0;
}

static int ctcp_send(cluster_client *base, int dst, uint64_t cookie, const void *data, size_t len)
{
    ctcp *t = (ctcp *)base;
    if (dst < 0 || dst >= t->ndst || len > MAX_FRAME) return -EINVAL;
    tconn *c = &t->c[dst * t->conns];
    for (int i = 1; i < t->conns; i++)
        if (t->c[dst * t->conns + i].bytes < c->bytes) c = &t->c[dst * t->conns + i];
    if (c->fd < 0) return -ENOTCONN;
    uint8_t hdr[FRAME_HDR] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                              (uint8_t)len};
    size_t sent = 0;
    if (c->out.len == c->out.off) {
        struct iovec iov[2] = {{hdr, FRAME_HDR}, {(void *)data, len}};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        for (;;) {
            ssize_t r = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (r >= 0) {
                sent = (size_t)r;
                break;
            }
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            return -errno;
        }
    }
    if (sent < FRAME_HDR) {
        if (tbuf_append(&c->out, hdr + sent, FRAME_HDR - sent) < 0) return -ENOMEM;
        sent = FRAME_HDR;
    }
    if (sent - FRAME_HDR < len && tbuf_append(&c->out, (const uint8_t *)data + (sent - FRAME_HDR),
                                              len - (sent - FRAME_HDR)) < 0)
        return -ENOMEM;
    if (c->out.len > c->out.off) {
        int r = set_interest(t->epfd, c, 1);
        if (r < 0) return r;
    }
    if (reqfifo_push(&c->q, cookie, len) < 0) return -ENOMEM;
    c->bytes += len;
    return 0;
}

/* Complete frames of c into out[]. */
static int parse(tconn *c, pt_completion *out, int max)
{
    int n = 0;
    while (n < max && c->in.len - c->in.off >= FRAME_HDR) {
        uint32_t len = get_be32(c->in.p + c->in.off);
        if (c->in.len - c->in.off < FRAME_HDR + (size_t)len) break;
        reqfifo_entry p;
        if (reqfifo_pop(&c->q, &p) < 0) return -EPROTO;
        c->bytes -= p.len;
        out[n].cookie = p.cookie;
        out[n].data = c->in.p + c->in.off + FRAME_HDR;
        out[n].len = len;
        out[n].error = 0;
        c->in.off += FRAME_HDR + len;
        c->frozen = 1;
        n++;
    }
    return n;
}

static int fill(tconn *c)
{
    size_t space;
    if (c->frozen) {
        /* Data handed out must not move: read only into free space. */
        space = c->in.cap - c->in.len;
        if (space == 0) return 0;
    } else {
        size_t need = READ_CHUNK;
        size_t have = c->in.len - c->in.off;
        if (have >= FRAME_HDR) {
            size_t total = FRAME_HDR + (size_t)get_be32(c->in.p + c->in.off);
            if (total > have && total - have > need) need = total - have;
        }
        if (tbuf_reserve(&c->in, need) < 0) return -ENOMEM;
        space = c->in.cap - c->in.len;
    }
    ssize_t r = recv(c->fd, c->in.p + c->in.len, space, MSG_DONTWAIT);
    if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
    if (r == 0) return -EPIPE;
    c->in.len += (size_t)r;
    return 1;
}

static void tconn_free(tconn *c)
{
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    tbuf_free(&c->in);
    tbuf_free(&c->out);
    reqfifo_free(&c->q);
}

static void srv_close(ctcp *t, tconn *c)
{
    for (int i = 0; i < t->nsrv; i++)
        if (t->srv[i] == c) {
            t->srv[i] = t->srv[--t->nsrv];
            break;
        }
    epoll_ctl(t->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    tconn_free(c);
    free(c);
}

static void srv_accept(ctcp *t)
{
    for (;;) {
        int fd = accept4(t->listener.fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) return;
        if (t->nsrv == t->srvcap) {
            int cap = t->srvcap ? 2 * t->srvcap : 16;
            tconn **l = realloc(t->srv, (size_t)cap * sizeof(*l));
            if (!l) {
                close(fd);
                return;
            }
            t->srv = l;
            t->srvcap = cap;
        }
        tconn *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            return;
        }
        c->kind = T_SERVER;
        c->fd = fd;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            free(c);
            continue;
        }
        t->srv[t->nsrv++] = c;
    }
}

/* Echoes every complete request frame of a server connection. */
static int srv_input(ctcp *t, tconn *c)
{
    for (;;) {
        int r = fill(c);
        if (r < 0) return r;
        if (r == 0) break;
    }
    while (c->in.len - c->in.off >= FRAME_HDR) {
        size_t total = FRAME_HDR + (size_t)get_be32(c->in.p + c->in.off);
        if (c->in.len - c->in.off < total) break;
        if (tbuf_append(&c->out, c->in.p + c->in.off, total) < 0) return -ENOMEM;
        c->in.off += total;
    }
    if (c->in.off == c->in.len) c->in.off = c->in.len = 0;
    int r = flush(c->fd, &c->out);
    if (r < 0) return r;
    return set_interest(t->epfd, c, r == 1);
}

static int ctcp_poll(cluster_client *base, uint64_t deadline, pt_completion *out, int max)
{
    ctcp *t = (ctcp *)base;
    int total = t->ndst * t->conns, n = 0;
    for (int i = 0; i < total; i++) {
        tconn *c = &t->c[i];
        c->frozen = 0;
        if (c->in.off > 0 && c->in.off == c->in.len) c->in.off = c->in.len = 0;
    }
    for (int i = 0; i < total && n < max; i++) {
        if (t->c[i].fd < 0) continue;
        int r = parse(&t->c[i], out + n, max - n);
        if (r < 0) return r;
        n += r;
    }
    if (n > 0) return n;
    struct epoll_event evs[64];
    uint64_t spin_end = perf_now_ns() + t->spin_ns;
    for (;;) {
        uint64_t now = perf_now_ns();
        if (now >= deadline) return 0;
        uint64_t left = now < spin_end ? 0 : deadline - now;
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        int nev = epoll_pwait2(t->epfd, evs, 64, &ts, NULL);
        if (nev < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        for (int e = 0; e < nev; e++) {
            tconn *c = evs[e].data.ptr;
            if (c->kind == T_LISTEN) {
                srv_accept(t);
                continue;
            }
            if (c->kind == T_SERVER) {
                int r = 0;
                if (evs[e].events & EPOLLOUT) {
                    r = flush(c->fd, &c->out);
                    if (r >= 0) r = set_interest(t->epfd, c, r == 1);
                }
                if (r >= 0 && (evs[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                    r = srv_input(t, c);
                if (r < 0) srv_close(t, c); /* the peer went away: not our failure */
                continue;
            }
            if (evs[e].events & EPOLLOUT) {
                int r = flush(c->fd, &c->out);
                if (r < 0) return r;
                if (r == 0 && (r = set_interest(t->epfd, c, 0)) < 0) return r;
            }
            if (evs[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                int r = fill(c);
                if (r < 0) return r;
                if (n < max) {
                    r = parse(c, out + n, max - n);
                    if (r < 0) return r;
                    n += r;
                }
            }
        }
        if (n > 0) return n;
    }
}

static void ctcp_destroy(cluster_client *base)
{
    ctcp *t = (ctcp *)base;
    if (t->c)
        for (int i = 0; i < t->ndst * t->conns; i++)
            tconn_free(&t->c[i]);
    free(t->c);
    for (int i = 0; i < t->nsrv; i++) {
        tconn_free(t->srv[i]);
        free(t->srv[i]);
    }
    free(t->srv);
    if (t->listener.fd >= 0) close(t->listener.fd);
    if (t->epfd >= 0) close(t->epfd);
    free(t);
}

/* Connects to every peer (once). */
static int ctcp_start(cluster_client *base, char *err, size_t errlen)
{
    ctcp *t = (ctcp *)base;
    if (t->connected) return 0;
    for (int d = 0; d < t->ndst; d++) {
        if (d == t->self) continue;
        const perf_addr *a = &t->peers[d];
        for (int k = 0; k < t->conns; k++) {
            tconn *c = &t->c[d * t->conns + k];
            c->kind = T_CLIENT;
            c->fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (c->fd < 0 || connect(c->fd, (const struct sockaddr *)&a->ss, a->len) < 0) {
                int e = errno;
                snprintf(err, errlen, "tcp connect to %s:%u: %s", a->host, a->port, strerror(e));
                return -e;
            }
            int one = 1;
            setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
            if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
                int e = errno;
                snprintf(err, errlen, "epoll_ctl: %s", strerror(e));
                return -e;
            }
        }
    }
    t->connected = 1;
    return 0;
}

static const cluster_client_ops ctcp_ops = {
    .start = ctcp_start,
    .send = ctcp_send,
    .poll = ctcp_poll,
    .destroy = ctcp_destroy,
};

int cluster_tcp_client(const perf_addr *peers, int npeers, int self, int conns, uint64_t spin_ns,
                       uint16_t listen_port, cluster_client **out, char *err, size_t errlen)
{
    if (conns < 1) conns = 1;
    if (npeers > CLUSTER_MAX_HOSTS) return -EINVAL;
    ctcp *t = calloc(1, sizeof(*t));
    if (!t) return -ENOMEM;
    t->base.ops = &ctcp_ops;
    t->spin_ns = spin_ns;
    t->self = self;
    t->ndst = npeers;
    t->conns = conns;
    t->listener.fd = -1;
    t->listener.kind = T_LISTEN;
    memcpy(t->peers, peers, (size_t)npeers * sizeof(perf_addr));
    t->c = calloc((size_t)npeers * (size_t)conns, sizeof(tconn));
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!t->c || t->epfd < 0) {
        snprintf(err, errlen, "tcp client: %s", strerror(t->c ? errno : ENOMEM));
        if (!t->c) t->ndst = 0;
        ctcp_destroy(&t->base);
        return -ENOMEM;
    }
    for (int i = 0; i < npeers * conns; i++)
        t->c[i].fd = -1;
    if (listen_port) {
        struct sockaddr_in6 sa;
        memset(&sa, 0, sizeof(sa));
        sa.sin6_family = AF_INET6;
        sa.sin6_port = htons(listen_port);
        int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        int one = 1, zero = 0;
        if (fd >= 0) {
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
        }
        t->listener.fd = fd;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &t->listener};
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0 ||
            epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            int e = errno;
            snprintf(err, errlen, "tcp server on port %u: %s", listen_port, strerror(e));
            ctcp_destroy(&t->base);
            return -e;
        }
    }
    *out = &t->base;
    return 0;
}
