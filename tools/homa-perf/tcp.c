/* homa-perf: the TCP transport.
 *
 * Messages are framed as a 4-byte big-endian length followed by the payload
 * and carried over persistent connections with TCP_NODELAY.  The server
 * echoes every request frame byte for byte (the response is the request).
 *
 * Client: one thread drives `conns` connections with epoll.  In closed-loop
 * tests (rtt, tput) slot i always uses connection i % conns and the driver
 * keeps at most one RPC per slot, so --outstanding N means N connections with
 * one RPC in flight each (no pipelining).  Open-loop workloads (slot -1)
 * pipeline requests over a fixed pool of connections, choosing the one with
 * the fewest bytes in flight; responses come back in order per connection,
 * so head-of-line blocking is part of what is measured.
 *
 * Server: an acceptor thread hands connections round-robin to `threads`
 * worker threads, each running its own epoll loop.
 *
 * Both sides take the cheapest path when there is only one connection to
 * serve and nothing queued for sending: a blocking recv() (2 system calls per
 * request instead of 3), so TCP is measured at its best.  Sockets stay in
 * blocking mode and every other call passes MSG_DONTWAIT.
 *
 * Busy polling (spin_ns > 0, from --busy-poll): before blocking, a thread
 * keeps polling without sleeping (recv or epoll_wait with MSG_DONTWAIT / a
 * zero timeout) for up to spin_ns since it last had work, as the Homa
 * runtime does in homa_recv(). */
#include "bytebuf.h"
#include "perf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define FRAME_HDR 4
#define READ_CHUNK (256 * 1024)
#define MAX_FRAME (1u << 30)
#define BLOCK_STEP_MS 10

/* Byte buffers: bytebuf.h */

static size_t frame_need(const tbuf *b)
{
    size_t have = tbuf_avail(b);
    if (have < FRAME_HDR) return FRAME_HDR - have;
    size_t total = FRAME_HDR + (size_t)get_be32(b->p + b->off);
    return total > have ? total - have : 1;
}

/* Sends the queued bytes of `out`.  Returns 0 when empty, 1 if bytes remain
 * (socket full), -errno on error. */
static int flush_out(int fd, tbuf *out)
{
    while (tbuf_avail(out)) {
        ssize_t r = send(fd, out->p + out->off, tbuf_avail(out), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
            return -errno;
        }
        out->off += (size_t)r;
    }
    out->off = out->len = 0;
    return 0;
}

static void set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void set_rcvtimeo(int fd, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* ---- Client ---------------------------------------------------------- */

typedef struct cconn {
    int fd;
    int want_out; /* EPOLLOUT registered */
    int frozen;   /* completions of this poll point into `in` */
    tbuf in, out;
    /* Zero-copy send (send_buf): the rest of a frame body still to be sent
     * from the caller's buffer, after whatever is in `out`. */
    const uint8_t *ext;
    size_t ext_len;
    reqfifo ring; /* requests in flight, oldest first */
    uint64_t inflight_bytes;
} cconn;

typedef struct tcp_client {
    pt_client base;
    uint64_t spin_ns;
    int epfd;
    int nconns;
    cconn *conns;
    uint8_t **slot_buf; /* get_buf: one request buffer per closed-loop slot */
    size_t *slot_cap;
    int nslots;
} tcp_client;

static int conn_has_out(const cconn *c)
{
    return tbuf_avail(&c->out) != 0 || c->ext_len != 0;
}

/* Sends what is queued on c: `out`, then the rest of a zero-copy body.
 * Returns 0 when all is sent, 1 if bytes remain, -errno on error. */
static int client_flush(cconn *c)
{
    int r = flush_out(c->fd, &c->out);
    if (r != 0) return r;
    while (c->ext_len) {
        ssize_t w = send(c->fd, c->ext, c->ext_len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
            return -errno;
        }
        c->ext += w;
        c->ext_len -= (size_t)w;
    }
    return 0;
}

static int conn_interest(int epfd, cconn *c, int want_out)
{
    if (c->want_out == want_out) return 0;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0) return -errno;
    c->want_out = want_out;
    return 0;
}

/* Sends one frame on the connection of `slot`.  With `ref` the unsent rest
 * of the body is sent later straight from buf (which the caller keeps
 * valid until the RPC completes) instead of being copied. */
static int client_send(tcp_client *tc, int slot, uint64_t cookie, const void *buf, size_t len,
                       int ref)
{
    if (len > MAX_FRAME) return -EMSGSIZE;
    cconn *c;
    if (slot >= 0) {
        c = &tc->conns[slot % tc->nconns];
    } else {
        c = &tc->conns[0];
        for (int i = 1; i < tc->nconns; i++)
            if (tc->conns[i].inflight_bytes < c->inflight_bytes) c = &tc->conns[i];
    }
    if (c->ext_len) {
        /* Frames must leave in order: copy the pending zero-copy rest. */
        if (tbuf_append(&c->out, c->ext, c->ext_len) < 0) return -ENOMEM;
        c->ext_len = 0;
        ref = 0;
    }
    uint8_t hdr[FRAME_HDR] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                              (uint8_t)len};
    size_t sent = 0;
    if (tbuf_avail(&c->out) == 0) {
        struct iovec iov[2] = {{hdr, FRAME_HDR}, {(void *)buf, len}};
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
    } else {
        ref = 0;
    }
    if (sent < FRAME_HDR) {
        if (tbuf_append(&c->out, hdr + sent, FRAME_HDR - sent) < 0) return -ENOMEM;
        sent = FRAME_HDR;
    }
    size_t body_sent = sent - FRAME_HDR;
    if (body_sent < len) {
        if (ref) {
            c->ext = (const uint8_t *)buf + body_sent;
            c->ext_len = len - body_sent;
        } else if (tbuf_append(&c->out, (const uint8_t *)buf + body_sent, len - body_sent) < 0) {
            return -ENOMEM;
        }
    }
    if (conn_has_out(c)) {
        int r = conn_interest(tc->epfd, c, 1);
        if (r < 0) return r;
    }
    if (reqfifo_push(&c->ring, cookie, len) < 0) return -ENOMEM;
    c->inflight_bytes += len;
    return 0;
}

static int tcp_client_send(pt_client *base, int slot, uint64_t cookie, const void *buf, size_t len)
{
    return client_send((tcp_client *)base, slot, cookie, buf, len, 0);
}

static void *tcp_client_get_buf(pt_client *base, int slot, size_t len)
{
    tcp_client *tc = (tcp_client *)base;
    if (slot < 0) return NULL;
    if (slot >= tc->nslots) {
        int n = tc->nslots ? tc->nslots : 8;
        while (n <= slot)
            n *= 2;
        uint8_t **b = realloc(tc->slot_buf, (size_t)n * sizeof(*b));
        if (!b) return NULL;
        tc->slot_buf = b;
        size_t *cap = realloc(tc->slot_cap, (size_t)n * sizeof(*cap));
        if (!cap) return NULL;
        tc->slot_cap = cap;
        for (int i = tc->nslots; i < n; i++) {
            tc->slot_buf[i] = NULL;
            tc->slot_cap[i] = 0;
        }
        tc->nslots = n;
    }
    if (tc->slot_cap[slot] < len || !tc->slot_buf[slot]) {
        uint8_t *b = realloc(tc->slot_buf[slot], len ? len : 1);
        if (!b) return NULL;
        /* The bytes the copying path would send. */
        memset(b, 0x5a, len);
        tc->slot_buf[slot] = b;
        tc->slot_cap[slot] = len ? len : 1;
    }
    return tc->slot_buf[slot];
}

static int tcp_client_send_buf(pt_client *base, int slot, uint64_t cookie, void *buf, size_t len)
{
    return client_send((tcp_client *)base, slot, cookie, buf, len, 1);
}

/* Moves complete response frames of c into out[]. */
static int client_parse(cconn *c, pt_completion *out, int max)
{
    int n = 0;
    while (n < max && tbuf_avail(&c->in) >= FRAME_HDR) {
        uint32_t len = get_be32(c->in.p + c->in.off);
        if (tbuf_avail(&c->in) < FRAME_HDR + (size_t)len) break;
        reqfifo_entry p;
        if (reqfifo_pop(&c->ring, &p) < 0) return -EPROTO;
        c->inflight_bytes -= p.len;
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

/* One recv into c->in (blocking if `block`).  Returns bytes read, 0 if
 * nothing was read, or a negative error (-EPIPE on end of stream). */
static int client_read(cconn *c, int block)
{
    size_t space;
    if (c->frozen) {
        space = c->in.cap - c->in.len;
        if (space == 0) return 0;
    } else {
        size_t need = frame_need(&c->in);
        if (tbuf_reserve(&c->in, need > READ_CHUNK ? need : READ_CHUNK) < 0) return -ENOMEM;
        space = c->in.cap - c->in.len;
    }
    ssize_t r = recv(c->fd, c->in.p + c->in.len, space, block ? 0 : MSG_DONTWAIT);
    if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
        return -errno;
    }
    if (r == 0) return -EPIPE;
    c->in.len += (size_t)r;
    return (int)(r > 0x7fffffff ? 0x7fffffff : r);
}

static int tcp_client_poll(pt_client *base, uint64_t deadline, pt_completion *out, int max)
{
    tcp_client *tc = (tcp_client *)base;
    int n = 0;
    for (int i = 0; i < tc->nconns; i++) {
        cconn *c = &tc->conns[i];
        c->frozen = 0;
        if (c->in.off > 0 && c->in.off == c->in.len) c->in.off = c->in.len = 0;
    }
    for (int i = 0; i < tc->nconns && n < max; i++) {
        int r = client_parse(&tc->conns[i], out + n, max - n);
        if (r < 0) return r;
        n += r;
    }
    if (n > 0) return n;
    struct epoll_event evs[64];
    uint64_t spin_end = perf_now_ns() + tc->spin_ns;
    for (;;) {
        uint64_t now = perf_now_ns();
        if (now >= deadline) return 0;
        int spinning = now < spin_end;
        cconn *c0 = &tc->conns[0];
        if (tc->nconns == 1 && c0->ring.count > 0 && !conn_has_out(c0) &&
            deadline - now > 2ull * BLOCK_STEP_MS * 1000000ull) {
            int r = client_read(c0, !spinning);
            if (r < 0) return r;
            r = client_parse(c0, out, max);
            if (r != 0) return r;
            continue;
        }
        uint64_t left = spinning ? 0 : deadline - now;
        struct timespec ts = {.tv_sec = (time_t)(left / 1000000000ull),
                              .tv_nsec = (long)(left % 1000000000ull)};
        int nev = epoll_pwait2(tc->epfd, evs, 64, &ts, NULL);
        if (nev < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        for (int e = 0; e < nev; e++) {
            cconn *c = evs[e].data.ptr;
            if (evs[e].events & EPOLLOUT) {
                int r = client_flush(c);
                if (r < 0) return r;
                if (r == 0 && (r = conn_interest(tc->epfd, c, 0)) < 0) return r;
            }
            if (evs[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                int r = client_read(c, 0);
                if (r < 0) return r;
                if (n < max) {
                    r = client_parse(c, out + n, max - n);
                    if (r < 0) return r;
                    n += r;
                }
            }
        }
        if (n > 0) return n;
    }
}

static void tcp_client_destroy(pt_client *base)
{
    tcp_client *tc = (tcp_client *)base;
    for (int i = 0; i < tc->nconns; i++) {
        cconn *c = &tc->conns[i];
        if (c->fd >= 0) close(c->fd);
        tbuf_free(&c->in);
        tbuf_free(&c->out);
        reqfifo_free(&c->ring);
    }
    free(tc->conns);
    for (int i = 0; i < tc->nslots; i++)
        free(tc->slot_buf[i]);
    free(tc->slot_buf);
    free(tc->slot_cap);
    if (tc->epfd >= 0) close(tc->epfd);
    free(tc);
}

static const pt_client_ops tcp_client_ops = {
    .send = tcp_client_send,
    .get_buf = tcp_client_get_buf,
    .send_buf = tcp_client_send_buf,
    .poll = tcp_client_poll,
    .destroy = tcp_client_destroy,
};

int tcp_client_create(const perf_addr *addr, int conns, uint64_t spin_ns, pt_client **out,
                      char *err, size_t errlen)
{
    if (conns < 1) conns = 1;
    tcp_client *tc = calloc(1, sizeof(*tc));
    if (!tc) return -ENOMEM;
    tc->base.ops = &tcp_client_ops;
    tc->spin_ns = spin_ns;
    tc->nconns = conns;
    tc->conns = calloc((size_t)conns, sizeof(cconn));
    if (!tc->conns) tc->nconns = 0;
    for (int i = 0; i < tc->nconns; i++)
        tc->conns[i].fd = -1;
    tc->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!tc->conns || tc->epfd < 0) {
        snprintf(err, errlen, "tcp client: %s", strerror(tc->conns ? errno : ENOMEM));
        tcp_client_destroy(&tc->base);
        return -ENOMEM;
    }
    for (int i = 0; i < conns; i++) {
        cconn *c = &tc->conns[i];
        c->fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0 || connect(c->fd, (const struct sockaddr *)&addr->ss, addr->len) < 0) {
            int e = errno;
            snprintf(err, errlen, "tcp connect to %s:%u: %s", addr->host, addr->port, strerror(e));
            tcp_client_destroy(&tc->base);
            return -e;
        }
        set_nodelay(c->fd);
        set_rcvtimeo(c->fd, BLOCK_STEP_MS);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(tc->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
            int e = errno;
            snprintf(err, errlen, "epoll_ctl: %s", strerror(e));
            tcp_client_destroy(&tc->base);
            return -e;
        }
    }
    *out = &tc->base;
    return 0;
}

/* ---- Server ---------------------------------------------------------- */

typedef struct sconn {
    int fd;
    int want_out;
    tbuf in, out;
    struct sconn *next, *prev;
} sconn;

typedef struct worker {
    struct tcp_server *srv;
    pthread_t thread;
    int started;
    int epfd;
    int evfd; /* new connections and stop */
    pthread_mutex_t lock;
    int *newfds;
    size_t nnew, capnew;
    atomic_int has_new;
    sconn *conns;
    int nconns;
} worker;

typedef struct tcp_server {
    pt_server base;
    uint64_t spin_ns;
    int lfd;
    int stopfd;
    uint16_t port;
    atomic_int stop;
    int nworkers;
    worker *workers;
    pthread_t acceptor;
    int acceptor_started;
} tcp_server;

static void sconn_close(worker *w, sconn *c)
{
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    tbuf_free(&c->in);
    tbuf_free(&c->out);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    w->nconns--;
    free(c);
}

static int sconn_interest(worker *w, sconn *c, int want_out)
{
    if (c->want_out == want_out) return 0;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0) return -1;
    c->want_out = want_out;
    return 0;
}

/* --reply-size: answers each complete frame in c->in[start, end) with a
 * frame of perf_reply_size zero bytes.  Returns 0 or -1 (close). */
static int sconn_answer(worker *w, sconn *c, size_t start, size_t end)
{
    static const uint8_t zeros[READ_CHUNK];
    size_t n = (size_t)perf_reply_size;
    for (size_t at = start; at < end; at += FRAME_HDR + get_be32(c->in.p + at)) {
        uint8_t hdr[FRAME_HDR] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8),
                                  (uint8_t)n};
        if (tbuf_append(&c->out, hdr, FRAME_HDR) < 0) return -1;
        for (size_t left = n; left > 0;) {
            size_t k = left < sizeof(zeros) ? left : sizeof(zeros);
            if (tbuf_append(&c->out, zeros, k) < 0) return -1;
            left -= k;
        }
    }
    c->in.off = end;
    if (c->in.off == c->in.len) c->in.off = c->in.len = 0;
    if (flush_out(c->fd, &c->out) < 0) return -1;
    return sconn_interest(w, c, tbuf_avail(&c->out) != 0);
}

/* Echoes every complete frame in c->in.  Returns 0 or -1 (close). */
static int sconn_process(worker *w, sconn *c)
{
    size_t start = c->in.off, end = start;
    for (;;) {
        size_t have = c->in.len - end;
        if (have < FRAME_HDR) break;
        uint32_t len = get_be32(c->in.p + end);
        if (len > MAX_FRAME) return -1;
        if (have < FRAME_HDR + (size_t)len) break;
        end += FRAME_HDR + len;
    }
    if (end == start) return 0;
    if (perf_reply_size >= 0) return sconn_answer(w, c, start, end);
    size_t done = 0;
    if (tbuf_avail(&c->out) == 0) {
        while (done < end - start) {
            ssize_t r = send(c->fd, c->in.p + start + done, end - start - done,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
            if (r < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                return -1;
            }
            done += (size_t)r;
        }
    }
    if (done < end - start && tbuf_avail(&c->out) == 0 && end == c->in.len) {
        /* The socket is full and the receive buffer holds exactly the
         * frames to echo: it becomes the send buffer (no copy, as the Homa
         * server's homa_msg_take + homa_reply_msg_owned). */
        tbuf t = c->out;
        c->out = c->in;
        c->out.off = start + done;
        c->in = t;
        c->in.off = c->in.len = 0;
        if (flush_out(c->fd, &c->out) < 0) return -1;
        if (sconn_interest(w, c, tbuf_avail(&c->out) != 0) < 0) return -1;
        return 0;
    }
    if (done < end - start) {
        if (tbuf_append(&c->out, c->in.p + start + done, end - start - done) < 0) return -1;
        if (flush_out(c->fd, &c->out) < 0) return -1;
        if (sconn_interest(w, c, tbuf_avail(&c->out) != 0) < 0) return -1;
    }
    c->in.off = end;
    if (c->in.off == c->in.len) c->in.off = c->in.len = 0;
    return 0;
}

/* Reads what is available (blocking once if `block`), then echoes.
 * Returns the number of bytes read, or -1 (close the connection). */
static long sconn_input(worker *w, sconn *c, int block)
{
    long total = 0;
    for (;;) {
        size_t need = frame_need(&c->in);
        if (tbuf_reserve(&c->in, need > READ_CHUNK ? need : READ_CHUNK) < 0) return -1;
        size_t space = c->in.cap - c->in.len;
        ssize_t r = recv(c->fd, c->in.p + c->in.len, space, block ? 0 : MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            return -1;
        }
        if (r == 0) return -1;
        c->in.len += (size_t)r;
        total += (long)r;
        if ((size_t)r < space) break;
        block = 0;
    }
    if (sconn_process(w, c) < 0) return -1;
    return total;
}

static void worker_take_new(worker *w)
{
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < w->nnew; i++) {
        int fd = w->newfds[i];
        sconn *c = calloc(1, sizeof(*c));
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (!c || epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->next = w->conns;
        if (w->conns) w->conns->prev = c;
        w->conns = c;
        w->nconns++;
    }
    w->nnew = 0;
    atomic_store(&w->has_new, 0);
    pthread_mutex_unlock(&w->lock);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    tcp_server *s = w->srv;
    struct epoll_event evs[64];
    uint64_t last_work = perf_now_ns();
    while (!atomic_load(&s->stop)) {
        int spinning = s->spin_ns && perf_now_ns() - last_work < s->spin_ns;
        if (atomic_load(&w->has_new)) worker_take_new(w);
        sconn *only = w->nconns == 1 ? w->conns : NULL;
        if (only && tbuf_avail(&only->out) == 0) {
            /* One connection: block in recv (SO_RCVTIMEO bounds the wait so
             * new connections and stop are noticed). */
            long got = sconn_input(w, only, !spinning);
            if (got < 0)
                sconn_close(w, only);
            else if (got > 0)
                last_work = perf_now_ns();
            continue;
        }
        int nev = epoll_wait(w->epfd, evs, 64, spinning ? 0 : -1);
        if (nev > 0) last_work = perf_now_ns();
        for (int e = 0; e < nev; e++) {
            if (evs[e].data.ptr == NULL) {
                uint64_t v;
                if (read(w->evfd, &v, sizeof(v)) < 0) {
                    /* nothing to do: the flags are checked by the loop */
                }
                continue;
            }
            sconn *c = evs[e].data.ptr;
            int bad = 0;
            if (evs[e].events & EPOLLOUT) {
                int r = flush_out(c->fd, &c->out);
                bad = r < 0 || (r == 0 && sconn_interest(w, c, 0) < 0);
            }
            if (!bad && (evs[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                bad = sconn_input(w, c, 0) < 0;
            if (bad) sconn_close(w, c);
        }
    }
    while (w->conns)
        sconn_close(w, w->conns);
    return NULL;
}

static void *acceptor_main(void *arg)
{
    tcp_server *s = arg;
    int next = 0;
    while (!atomic_load(&s->stop)) {
        struct pollfd pf[2] = {{.fd = s->lfd, .events = POLLIN},
                               {.fd = s->stopfd, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0) continue;
        if (!(pf[0].revents & POLLIN)) continue;
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        set_nodelay(fd);
        set_rcvtimeo(fd, BLOCK_STEP_MS);
        worker *w = &s->workers[next];
        next = (next + 1) % s->nworkers;
        pthread_mutex_lock(&w->lock);
        if (w->nnew == w->capnew) {
            size_t ncap = w->capnew ? 2 * w->capnew : 8;
            int *p = realloc(w->newfds, ncap * sizeof(int));
            if (!p) {
                pthread_mutex_unlock(&w->lock);
                close(fd);
                continue;
            }
            w->newfds = p;
            w->capnew = ncap;
        }
        w->newfds[w->nnew++] = fd;
        atomic_store(&w->has_new, 1);
        pthread_mutex_unlock(&w->lock);
        uint64_t one = 1;
        if (write(w->evfd, &one, sizeof(one)) < 0) {
            /* the counter cannot overflow in practice */
        }
    }
    return NULL;
}

static uint16_t tcp_server_port(pt_server *base)
{
    return ((tcp_server *)base)->port;
}

static void tcp_server_stop(pt_server *base)
{
    tcp_server *s = (tcp_server *)base;
    atomic_store(&s->stop, 1);
    uint64_t one = 1;
    if (s->stopfd >= 0 && write(s->stopfd, &one, sizeof(one)) < 0) {
        /* ignore */
    }
    if (s->acceptor_started) pthread_join(s->acceptor, NULL);
    for (int i = 0; i < s->nworkers; i++) {
        worker *w = &s->workers[i];
        if (w->evfd >= 0 && write(w->evfd, &one, sizeof(one)) < 0) {
            /* ignore */
        }
        if (w->started) pthread_join(w->thread, NULL);
        for (size_t k = 0; k < w->nnew; k++)
            close(w->newfds[k]);
        free(w->newfds);
        if (w->epfd >= 0) close(w->epfd);
        if (w->evfd >= 0) close(w->evfd);
        pthread_mutex_destroy(&w->lock);
    }
    free(s->workers);
    if (s->lfd >= 0) close(s->lfd);
    if (s->stopfd >= 0) close(s->stopfd);
    free(s);
}

static const pt_server_ops tcp_server_ops = {
    .port = tcp_server_port,
    .stop = tcp_server_stop,
};

static int listen_socket(uint16_t port, char *err, size_t errlen)
{
    int one = 1, zero = 0;
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
        a6.sin6_addr = in6addr_any;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
        if (bind(fd, (struct sockaddr *)&a6, sizeof(a6)) == 0 && listen(fd, 1024) == 0) return fd;
        close(fd);
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons(port)};
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a4, sizeof(a4)) < 0 || listen(fd, 1024) < 0) {
        snprintf(err, errlen, "tcp listen on port %u: %s", port, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int tcp_server_start(uint16_t port, int threads, uint64_t spin_ns, pt_server **out, char *err,
                     size_t errlen)
{
    if (threads < 1) threads = 1;
    tcp_server *s = calloc(1, sizeof(*s));
    if (!s) return -ENOMEM;
    s->base.ops = &tcp_server_ops;
    s->spin_ns = spin_ns;
    s->lfd = -1;
    s->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    s->workers = calloc((size_t)threads, sizeof(worker));
    if (!s->workers || s->stopfd < 0) {
        snprintf(err, errlen, "tcp server: out of resources");
        tcp_server_stop(&s->base);
        return -ENOMEM;
    }
    s->nworkers = threads;
    for (int i = 0; i < threads; i++) {
        worker *w = &s->workers[i];
        w->srv = s;
        pthread_mutex_init(&w->lock, NULL);
        w->epfd = epoll_create1(EPOLL_CLOEXEC);
        w->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    }
    s->lfd = listen_socket(port, err, errlen);
    if (s->lfd < 0) {
        tcp_server_stop(&s->base);
        return -EADDRINUSE;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(s->lfd, (struct sockaddr *)&ss, &sl);
    s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    for (int i = 0; i < threads; i++) {
        worker *w = &s->workers[i];
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (w->epfd < 0 || w->evfd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev) < 0 ||
            pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            snprintf(err, errlen, "tcp server: cannot start worker %d", i);
            tcp_server_stop(&s->base);
            return -ENOMEM;
        }
        w->started = 1;
    }
    if (pthread_create(&s->acceptor, NULL, acceptor_main, s) != 0) {
        snprintf(err, errlen, "tcp server: cannot start acceptor");
        tcp_server_stop(&s->base);
        return -ENOMEM;
    }
    s->acceptor_started = 1;
    *out = &s->base;
    return 0;
}
