/* homad: the host's single Homa engine, shared by its processes
 * (docs/homad.md, homad(8)).
 *
 * One thread does everything: it reads the processes' command rings, runs
 * the commands on the runtime, drives the engine itself (src/rt/driven.h:
 * the runtime has no thread of its own; this one reads the UDP sockets,
 * runs the timers and the pacer), and moves received messages into the
 * processes' RX slots.  A message from one local process to another thus
 * crosses no thread inside homad.  It busy-polls for busy_poll_us after
 * the last piece of work, then sleeps in epoll on the listening socket,
 * the processes' unix sockets (hang-up = the process died), their command
 * eventfds and the Homa sockets' UDP fds, until the engine's next
 * deadline. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <homa/homa.h>

#include "homad.h"
#include "rt/driven.h"
#include "rt/homad_proto.h"

enum { EV_LISTEN = 1, EV_CONN, EV_CMD };

/* A Homa socket's UDP fd in the epoll set: data.u64 is UDP_EV | port (no
 * pointer: the socket may be closed before the event is looked at).  User
 * space pointers never have the top bit set. */
#define UDP_EV (1ull << 63)

#define HANDSHAKE_NS 1000000000ull /* a new connection has 1 s to say HELLO */

struct evsrc {
    int type;
    void *p;
};

struct client;

struct dsock {
    homa_socket *s;
    struct client *c;
    uint16_t port;
    uint32_t rpcs; /* client RPCs in flight on this socket */
    int efd;       /* homa_socket_fd() of the process (-1 until asked for) */
    int ready;     /* the engine said a message or failure is ready */
    struct dsock *next;
};

struct linger_req {
    struct linger_req *next;
    uint16_t port;
    uint64_t tag;
    uint64_t deadline;
};

struct client {
    struct evsrc ev_conn, ev_cmd;
    int fd;
    pid_t pid;
    uid_t uid;
    gid_t gid;
    int ready;          /* handshake done */
    uint64_t connected; /* when it connected (the handshake has a deadline) */
    int dead;
    void *base;
    size_t bytes;
    struct homad_hdr hdr; /* private copy: the region's is never read back */
    struct homad_view v;
    int cmd_efd, cq_efd;
    uint32_t cmd_tail, cq_head, cq_seen;
    int pushed;     /* completions pushed since the last wake-up check */
    int cq_blocked; /* stopped for lack of completion-ring room */
    struct homad_rxmap rx;
    struct homad_proc_counters pc;
    struct dsock *socks;
    uint32_t rpcs, nports;
    struct linger_req *lingers;
    struct client *next;
};

static struct homad_opts opts;
static homa_runtime *rt;
static int epfd = -1;
static struct client *clients;
static uint32_t nclients;
static volatile sig_atomic_t stop_flag;
static struct evsrc listen_ev = {EV_LISTEN, NULL};
static struct dsock *by_port[65536]; /* the engine's ports are unique */

/* Ports to read in this pass: those epoll found readable.  (What a command
 * sends to another local socket over loopback never reaches the kernel:
 * the runtime hands it back to the engine, tx_local in src/rt/tx.c.
 * With fault injection or a capture it does go through the kernel, and
 * the next epoll_wait, without sleep since there was work, sees it.) */
static uint16_t rd_ports[128];
static int n_rd_ports;

static void read_port(uint16_t port)
{
    for (int i = 0; i < n_rd_ports; i++)
        if (rd_ports[i] == port) return;
    if (n_rd_ports < (int)(sizeof(rd_ports) / sizeof(rd_ports[0]))) rd_ports[n_rd_ports++] = port;
}

/* rt/driven.h: the engine has something for `port` (runtime lock held). */
static void on_ready(void *ctx, uint16_t port)
{
    (void)ctx;
    if (by_port[port] != NULL) by_port[port]->ready = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

/* ------------------------------------------------------------- clients */

static void close_dsock(struct client *c, struct dsock *d)
{
    for (struct dsock **pp = &c->socks; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == d) {
            *pp = d->next;
            break;
        }
    }
    by_port[d->port] = NULL;
    epoll_ctl(epfd, EPOLL_CTL_DEL, homa_rt_socket_fd(d->s), NULL);
    /* Closing aborts the socket's RPCs and frees its messages. */
    homa_socket_close(d->s);
    if (d->efd >= 0) close(d->efd);
    c->rpcs -= d->rpcs;
    c->nports--;
    free(d);
}

static void reclaim(struct client *c)
{
    while (c->socks != NULL)
        close_dsock(c, c->socks);
    while (c->lingers != NULL) {
        struct linger_req *l = c->lingers;
        c->lingers = l->next;
        free(l);
    }
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->cmd_efd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->cmd_efd, NULL);
        close(c->cmd_efd);
    }
    if (c->cq_efd >= 0) close(c->cq_efd);
    if (c->base != NULL) munmap(c->base, c->bytes);
    if (opts.verbose && c->ready)
        fprintf(stderr, "homad: process %d (uid %u) gone, reclaimed\n", (int)c->pid,
                (unsigned)c->uid);
    for (struct client **pp = &clients; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    nclients--;
    free(c);
}

static void send_welcome(int fd, int result, uint64_t bytes, const int *fds, int nfds)
{
    struct homad_welcome w = {
        .magic = HOMAD_MAGIC, .version = HOMAD_VERSION, .result = result, .region_bytes = bytes};
    struct iovec iov = {.iov_base = &w, .iov_len = sizeof(w)};
    char cbuf[CMSG_SPACE(3 * sizeof(int))];
    memset(cbuf, 0, sizeof(cbuf));
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        mh.msg_control = cbuf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
    }
    ssize_t r = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)r;
}

/* The handshake: a HELLO from the process, then its region and eventfds. */
static void handshake(struct client *c)
{
    struct homad_hello h;
    ssize_t n = recv(c->fd, &h, sizeof(h), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n != (ssize_t)sizeof(h) || h.magic != HOMAD_MAGIC || h.version != HOMAD_VERSION) {
        if (n > 0) send_welcome(c->fd, HOMA_ERR_INVAL, 0, NULL, 0);
        c->dead = 1;
        return;
    }
    int memfd = memfd_create("homad", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd < 0) goto fail;
    /* Sealed before it is shared: the process can neither shrink the
     * region under the daemon (SIGBUS) nor grow it. */
    if (ftruncate(memfd, (off_t)c->hdr.total) != 0 ||
        fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        goto fail_fd;
    c->base = mmap(NULL, c->hdr.total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (c->base == MAP_FAILED) {
        c->base = NULL;
        goto fail_fd;
    }
    c->bytes = c->hdr.total;
    memcpy(c->base, &c->hdr, sizeof(c->hdr));
    homad_view_init(&c->v, c->base, &c->hdr);
    c->cmd_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->cq_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->cmd_efd < 0 || c->cq_efd < 0) goto fail_fd;
    c->ev_cmd.type = EV_CMD;
    c->ev_cmd.p = c;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->ev_cmd};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->cmd_efd, &ev) != 0) goto fail_fd;
    int fds[3] = {memfd, c->cmd_efd, c->cq_efd};
    send_welcome(c->fd, 0, c->hdr.total, fds, 3);
    close(memfd);
    c->ready = 1;
    if (opts.verbose)
        fprintf(stderr, "homad: process %d (uid %u) connected\n", (int)c->pid, (unsigned)c->uid);
    return;

fail_fd:
    close(memfd);
fail:
    send_welcome(c->fd, HOMA_ERR_NOMEM, 0, NULL, 0);
    c->dead = 1;
}

static void accept_all(int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        struct ucred cr;
        socklen_t crlen = sizeof(cr);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) != 0 ||
            nclients >= opts.max_procs) {
            send_welcome(fd, HOMA_ERR_LIMIT, 0, NULL, 0);
            close(fd);
            continue;
        }
        struct client *c = calloc(1, sizeof(*c));
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->connected = now_ns();
        c->pid = cr.pid;
        c->uid = cr.uid;
        c->gid = cr.gid;
        c->cmd_efd = c->cq_efd = -1;
        homad_layout(&c->hdr, opts.cmd_ring, opts.cq_ring, opts.tx_slots, opts.rx_slots,
                     opts.slot_size);
        c->hdr.cfg = *homa_runtime_config(rt);
        c->hdr.max_rpcs = opts.max_rpcs;
        c->hdr.max_ports = opts.max_ports;
        homad_rx_init(&c->rx, opts.rx_slots);
        c->ev_conn.type = EV_CONN;
        c->ev_conn.p = c;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = &c->ev_conn};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(c);
            continue;
        }
        c->next = clients;
        clients = c;
        nclients++;
    }
}

static struct dsock *find_sock(struct client *c, uint16_t port)
{
    for (struct dsock *d = c->socks; d != NULL; d = d->next)
        if (d->port == port) return d;
    return NULL;
}

static int cmd_open(struct client *c, const struct homad_cmd *cmd, struct homad_cqe *e)
{
    if (cmd->port != 0 && !homad_policy_allows(&opts, c->uid, cmd->port)) {
        c->pc.perm_refusals++;
        return HOMA_ERR_PERM;
    }
    if (c->nports >= opts.max_ports) {
        c->pc.quota_refusals++;
        return HOMA_ERR_LIMIT;
    }
    struct dsock *d = calloc(1, sizeof(*d));
    if (d == NULL) return HOMA_ERR_NOMEM;
    d->efd = -1;
    /* The process's choice of local address (the kernel checks it). */
    homa_endpoint local = {.addr = cmd->addr, .port = cmd->port};
    int rc = homa_socket_bind(rt, &local, &d->s);
    if (rc != 0) {
        free(d);
        return rc;
    }
    d->port = homa_socket_port(d->s);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UDP_EV | d->port};
    int fd = homa_rt_socket_fd(d->s);
    if (fd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        homa_socket_close(d->s);
        free(d);
        return HOMA_ERR_IO;
    }
    d->c = c;
    by_port[d->port] = d;
    d->next = c->socks;
    c->socks = d;
    c->nports++;
    e->port = d->port;
    return 0;
}

/* Runs one command (copied out of the ring).  Returns 1 if *e is a
 * completion to push. */
static int exec_cmd(struct client *c, const struct homad_cmd *cmd, struct homad_cqe *e)
{
    memset(e, 0, sizeof(*e));
    e->kind = HOMAD_CQ_DONE;
    e->tag = cmd->tag;
    c->pc.commands++;
    int rc = homad_cmd_check(&c->v, cmd);
    if (rc != 0) {
        c->pc.bad_commands++;
        if (cmd->op == HOMAD_OP_RELEASE) return 0;
        e->result = rc;
        return 1;
    }
    struct dsock *d = NULL;
    if (cmd->op != HOMAD_OP_OPEN && cmd->op != HOMAD_OP_RELEASE && cmd->op != HOMAD_OP_COUNTERS &&
        cmd->op != HOMAD_OP_STATS) {
        /* A port belongs to the process that bound it. */
        d = find_sock(c, cmd->port);
        if (d == NULL) {
            c->pc.bad_commands++;
            e->result = HOMA_ERR_NO_PORT;
            return 1;
        }
    }
    const uint8_t *slot = c->v.tx + (uint64_t)cmd->slot * c->v.slot_size;
    switch (cmd->op) {
    case HOMAD_OP_OPEN:
        e->result = cmd_open(c, cmd, e);
        return 1;
    case HOMAD_OP_CLOSE:
        close_dsock(c, d);
        return 1;
    case HOMAD_OP_SEND: {
        if (c->rpcs >= opts.max_rpcs) {
            c->pc.quota_refusals++;
            e->result = HOMA_ERR_LIMIT;
            return 1;
        }
        homa_endpoint dst = {.addr = cmd->addr, .port = cmd->peer_port};
        uint64_t id = 0;
        /* The slot is the app's memory: homa_sendx copies it (no OWNED). */
        unsigned fl = 0;
        if (cmd->flags & HOMAD_SEND_PRIO_ON)
            fl = HOMA_SEND_PRIO(HOMAD_SEND_PRIO_LO(cmd->flags), HOMAD_SEND_PRIO_HI(cmd->flags));
        e->result = homa_sendx(d->s, &dst, (void *)slot, cmd->len, cmd->cookie, fl, &id);
        if (e->result == 0) {
            e->id = id;
            e->port = d->port;
            c->rpcs++;
            d->rpcs++;
            c->pc.requests_sent++;
            c->pc.bytes_sent += cmd->len;
        }
        return 1;
    }
    case HOMAD_OP_REPLY: {
        homa_endpoint peer = {.addr = cmd->addr, .port = cmd->peer_port};
        e->result = homa_reply_to(d->s, &peer, cmd->id, slot, cmd->len);
        if (e->result == 0) {
            c->pc.replies_sent++;
            c->pc.bytes_sent += cmd->len;
        }
        return 1;
    }
    case HOMAD_OP_ABORT:
        e->result = homa_abort(d->s, cmd->id);
        if (e->result == 0 && (cmd->id & 1) == 0 && d->rpcs > 0) {
            d->rpcs--;
            c->rpcs--;
        }
        return 1;
    case HOMAD_OP_RELEASE:
        if (homad_rx_release(&c->rx, cmd->slot) != 0) c->pc.bad_commands++;
        return 0;
    case HOMAD_OP_COUNTERS: {
        struct homad_ctrs *k = c->v.ctrs;
        homa_runtime_counters(rt, &k->engine, &k->driver);
        homa_runtime_cutoffs(rt, &k->cutoffs);
        c->pc.ports_open = c->nports;
        c->pc.rpcs_live = c->rpcs;
        c->pc.rx_slots_held = c->rx.held;
        memcpy(&k->proc, &c->pc, sizeof(c->pc));
        k->processes = nclients;
        return 1;
    }
    case HOMAD_OP_STATS: {
        /* Other users' processes are shown to root only. */
        int slot = homad_rx_take(&c->rx);
        if (slot < 0) {
            e->result = HOMA_ERR_AGAIN;
            return 1;
        }
        uint8_t *out = c->v.rx + (uint64_t)slot * c->v.slot_size;
        size_t len = 0;
        for (struct client *o = clients; o != NULL; o = o->next) {
            if (!o->ready || (c->uid != 0 && o->uid != c->uid)) continue;
            if (len + sizeof(struct homad_proc_row) > c->v.slot_size) break;
            struct homad_proc_row r = {.pid = (int32_t)o->pid, .uid = (uint32_t)o->uid};
            r.pc = o->pc;
            r.pc.ports_open = o->nports;
            r.pc.rpcs_live = o->rpcs;
            r.pc.rx_slots_held = o->rx.held;
            memcpy(out + len, &r, sizeof(r));
            len += sizeof(r);
        }
        e->slot = (uint32_t)slot;
        e->len = (uint32_t)len;
        return 1;
    }
    case HOMAD_OP_FD: {
        if (d->efd < 0) d->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (d->efd < 0) {
            e->result = HOMA_ERR_IO;
            return 1;
        }
        /* The eventfd travels on the unix socket, ahead of the DONE. */
        struct homad_fdmsg fm = {.magic = HOMAD_MAGIC, .port = d->port};
        struct iovec iov = {.iov_base = &fm, .iov_len = sizeof(fm)};
        char cbuf[CMSG_SPACE(sizeof(int))];
        memset(cbuf, 0, sizeof(cbuf));
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &d->efd, sizeof(int));
        e->result = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(fm)
                        ? 0
                        : HOMA_ERR_IO;
        return 1;
    }
    case HOMAD_OP_CLASS:
        if (!homad_class_allows(&opts, c->uid, cmd->len)) {
            c->pc.perm_refusals++;
            e->result = HOMA_ERR_PERM;
            return 1;
        }
        e->result = homa_socket_set_class(d->s, (int)cmd->len);
        return 1;
    case HOMAD_OP_LINGER: {
        rc = homa_socket_linger(d->s, HOMA_NONBLOCK);
        if (rc != HOMA_ERR_AGAIN || cmd->id == 0) {
            e->result = rc;
            return 1;
        }
        struct linger_req *l = calloc(1, sizeof(*l));
        if (l == NULL) {
            e->result = HOMA_ERR_NOMEM;
            return 1;
        }
        l->port = cmd->port;
        l->tag = cmd->tag;
        l->deadline = cmd->id == UINT64_MAX ? UINT64_MAX : now_ns() + cmd->id;
        l->next = c->lingers;
        c->lingers = l;
        return 0;
    }
    default:
        e->result = HOMA_ERR_INVAL;
        return 1;
    }
}

static void violation(struct client *c, const char *what)
{
    fprintf(stderr, "homad: process %d (uid %u): %s; disconnected\n", (int)c->pid, (unsigned)c->uid,
            what);
    c->dead = 1;
}

static void push(struct client *c, const struct homad_cqe *e)
{
    homad_cq_push(&c->v, c->cq_head++, e);
    c->pushed = 1;
}

/* Runs the process's waiting commands.  Returns the number run. */
static int run_commands(struct client *c)
{
    int n = homad_cmd_avail(&c->v, c->cmd_tail);
    if (n < 0) {
        violation(c, "impossible command-ring head");
        return 0;
    }
    int space = homad_cq_space(&c->v, c->cq_head, &c->cq_seen);
    if (space < 0) {
        violation(c, "impossible completion-ring tail");
        return 0;
    }
    int done = 0;
    for (; done < n && !c->dead; done++) {
        if (space == 0) {
            c->cq_blocked = 1;
            break;
        }
        struct homad_cmd cmd;
        homad_cmd_copy(&c->v, c->cmd_tail, &cmd);
        c->cmd_tail++;
        struct homad_cqe e;
        if (exec_cmd(c, &cmd, &e)) {
            push(c, &e);
            space--;
        }
    }
    if (done > 0) homad_cmd_consumed(&c->v, c->cmd_tail);
    return done;
}

/* Moves received messages into free RX slots.  Returns the number moved. */
static int deliver(struct client *c)
{
    int space = homad_cq_space(&c->v, c->cq_head, &c->cq_seen);
    if (space < 0) {
        violation(c, "impossible completion-ring tail");
        return 0;
    }
    int moved = 0;
    for (struct dsock *d = c->socks; d != NULL; d = d->next) {
        while (d->ready && space > 0 && c->rx.held < c->rx.n) {
            homa_msg m;
            int rc = homa_recv(d->s, HOMA_RECV_ANY, 0, HOMA_NONBLOCK, &m);
            if (rc != 0 && m.id == 0) {
                d->ready = 0; /* nothing more (or closing) */
                break;
            }
            struct homad_cqe e;
            memset(&e, 0, sizeof(e));
            e.port = d->port;
            e.id = m.id;
            e.cookie = m.cookie;
            e.peer = m.peer;
            e.peer_port = m.peer_port;
            e.is_request = (uint8_t)(m.is_request != 0);
            if (rc != 0) {
                e.kind = HOMAD_CQ_RPC_ERR;
                e.result = rc;
                c->pc.rpc_errors++;
            } else {
                int slot = homad_rx_take(&c->rx);
                /* Checked above; the engine's maximum fits in a slot. */
                memcpy(c->v.rx + (uint64_t)slot * c->v.slot_size, m.data, m.length);
                e.kind = HOMAD_CQ_MSG;
                e.slot = (uint32_t)slot;
                e.len = (uint32_t)m.length;
                homa_release(d->s, &m);
                c->pc.msgs_delivered++;
                c->pc.bytes_delivered += e.len;
            }
            if (!e.is_request && d->rpcs > 0) {
                d->rpcs--;
                c->rpcs--;
            }
            push(c, &e);
            space--;
            moved++;
            if (d->efd >= 0) {
                uint64_t one = 1;
                ssize_t w = write(d->efd, &one, sizeof(one));
                (void)w;
            }
        }
        if (space == 0 && d->ready) c->cq_blocked = 1;
    }
    return moved;
}

static int run_lingers(struct client *c)
{
    int n = 0;
    uint64_t now = now_ns();
    for (struct linger_req **pp = &c->lingers; *pp != NULL;) {
        struct linger_req *l = *pp;
        struct dsock *d = find_sock(c, l->port);
        int rc = d == NULL ? HOMA_ERR_SHUTDOWN : homa_socket_linger(d->s, HOMA_NONBLOCK);
        if (rc == HOMA_ERR_AGAIN && now < l->deadline) {
            pp = &l->next;
            continue;
        }
        int space = homad_cq_space(&c->v, c->cq_head, &c->cq_seen);
        if (space <= 0) {
            if (space < 0) violation(c, "impossible completion-ring tail");
            break;
        }
        struct homad_cqe e;
        memset(&e, 0, sizeof(e));
        e.kind = HOMAD_CQ_DONE;
        e.tag = l->tag;
        e.result = rc;
        push(c, &e);
        *pp = l->next;
        free(l);
        n++;
    }
    return n;
}

static void wake_app(struct client *c)
{
    if (!c->pushed) return;
    c->pushed = 0;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&c->v.ctrl->app_sleeping, __ATOMIC_RELAXED)) {
        uint64_t one = 1;
        ssize_t r = write(c->cq_efd, &one, sizeof(one));
        (void)r;
    }
}

static void conn_event(struct client *c)
{
    if (!c->ready) {
        handshake(c);
        return;
    }
    /* After the handshake the process never writes to the socket: data or
     * a hang-up both end the connection. */
    char b;
    ssize_t n = recv(c->fd, &b, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
        c->dead = 1;
    else if (n > 0)
        violation(c, "unexpected data on the unix socket");
}

/* ------------------------------------------------------------------ main */

static int listen_on(const char *path)
{
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "homad: socket path too long: %s\n", path);
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    /* A socket file left by a homad that died: replace it (but never
     * remove anything that is not a socket). */
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            fprintf(stderr, "homad: another homad is serving %s\n", path);
            close(fd);
            return -1;
        }
        close(fd);
        unlink(path);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) return -1;
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || chmod(path, opts.socket_mode) != 0 ||
        listen(fd, 64) != 0) {
        fprintf(stderr, "homad: cannot listen on %s: %s\n", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int main(int argc, char **argv)
{
    int rc = homad_parse_args(&opts, argc, argv);
    if (rc != 0) return rc < 0 ? 2 : 0; /* rc > 0: --help or --version printed */
    if (opts.stats) return homad_stats(&opts);

    homa_runtime_options ro;
    homa_runtime_options_default(&ro);
    homad_engine_options(&opts, &ro);
    /* We are the daemon: an engine of our own (never a client of another
     * homad), driven by this thread. */
    rc = homa_rt_create_driven(&ro, on_ready, NULL, &rt);
    if (rc != 0) {
        fprintf(stderr, "homad: cannot create the engine: %s\n", homa_strerror(rc));
        return 1;
    }
    uint32_t max_msg = homa_runtime_config(rt)->max_message_length;
    if (opts.slot_size == 0) opts.slot_size = max_msg;
    struct homad_hdr probe;
    if (homad_layout(&probe, opts.cmd_ring, opts.cq_ring, opts.tx_slots, opts.rx_slots,
                     opts.slot_size) != 0 ||
        probe.slot_size < max_msg) {
        fprintf(stderr,
                "homad: bad region geometry (rings must be powers of two up to %u, "
                "1..%u slots, slot size >= max_message_length %u)\n",
                HOMAD_MAX_RING, HOMAD_MAX_SLOTS, max_msg);
        homa_runtime_destroy(rt);
        return 2;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    epfd = epoll_create1(EPOLL_CLOEXEC);
    int lfd = listen_on(opts.socket_path);
    if (epfd < 0 || lfd < 0) {
        homa_runtime_destroy(rt);
        return 1;
    }
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &listen_ev};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) != 0) {
        fprintf(stderr, "homad: epoll: %s\n", strerror(errno));
        close(lfd);
        unlink(opts.socket_path);
        homa_runtime_destroy(rt);
        return 1;
    }
    /* Timer and pacer deadlines are microseconds apart: don't let the
     * kernel's default 50 us timer slack blur them. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    fprintf(stderr, "homad: serving %s (region %llu bytes per process)\n", opts.socket_path,
            (unsigned long long)probe.total);

    uint64_t spin_ns = (uint64_t)opts.busy_poll_us * 1000u;
    uint64_t last_work = now_ns();
    while (!stop_flag) {
        uint64_t now = now_ns();
        /* When the engine needs us without input (timers, pacer, packets
         * a transmission left). */
        uint64_t due = homa_rt_drive_deadline(rt);
        int64_t timeout_ns = 0;
        if (now - last_work >= spin_ns && due > now) {
            /* Going to sleep: tell every process to wake us, then look
             * once more (see kick() in src/rt/homad_client.c). */
            int pending = 0, blocked = 0, handshaking = 0;
            for (struct client *c = clients; c != NULL; c = c->next) {
                if (!c->ready) {
                    handshaking = 1;
                    continue;
                }
                __atomic_store_n(&c->v.ctrl->daemon_sleeping, 1, __ATOMIC_RELAXED);
                blocked |= c->cq_blocked || c->lingers != NULL;
            }
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            for (struct client *c = clients; c != NULL && !pending; c = c->next)
                if (c->ready && homad_cmd_avail(&c->v, c->cmd_tail) != 0) pending = 1;
            /* A full completion ring frees up without telling us: look
             * again each millisecond, as for lingering sockets. */
            timeout_ns = pending ? 0 : blocked ? 1000000 : handshaking ? 100000000 : -1;
            if (!pending && due != UINT64_MAX &&
                (timeout_ns < 0 || due - now < (uint64_t)timeout_ns))
                timeout_ns = (int64_t)(due - now);
        }
        struct epoll_event evs[64];
        int n;
        if (timeout_ns <= 0) {
            n = epoll_wait(epfd, evs, 64, timeout_ns == 0 ? 0 : -1);
        } else {
            struct timespec ts = {(time_t)(timeout_ns / 1000000000),
                                  (long)(timeout_ns % 1000000000)};
            n = epoll_pwait2(epfd, evs, 64, &ts, NULL);
            if (n < 0 && errno == ENOSYS)
                n = epoll_wait(epfd, evs, 64, (int)((timeout_ns + 999999) / 1000000));
        }
        for (struct client *c = clients; c != NULL; c = c->next)
            if (c->ready) __atomic_store_n(&c->v.ctrl->daemon_sleeping, 0, __ATOMIC_RELAXED);
        n_rd_ports = 0;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 & UDP_EV) {
                read_port((uint16_t)evs[i].data.u64);
                continue;
            }
            struct evsrc *src = evs[i].data.ptr;
            if (src->type == EV_LISTEN) {
                accept_all(lfd);
            } else if (src->type == EV_CONN) {
                conn_event(src->p);
            } else if (src->type == EV_CMD) {
                uint64_t v;
                ssize_t r = read(((struct client *)src->p)->cmd_efd, &v, sizeof(v));
                (void)r;
            }
        }
        int work = 0, ran = 0;
        for (struct client *c = clients; c != NULL; c = c->next) {
            if (!c->ready || c->dead) continue;
            c->cq_blocked = 0;
            ran += run_commands(c);
        }
        work += ran;
        /* Only the sockets epoll found readable are read. */
        if (n_rd_ports > 0 || homa_rt_drive_deadline(rt) <= now_ns())
            work += homa_rt_drive_ports(rt, rd_ports, n_rd_ports);
        for (struct client *c = clients; c != NULL; c = c->next) {
            if (!c->ready || c->dead) continue;
            work += deliver(c);
            if (!c->dead && c->lingers != NULL) work += run_lingers(c);
            if (!c->dead) wake_app(c);
        }
        now = now_ns();
        for (struct client *c = clients, *next; c != NULL; c = next) {
            next = c->next;
            /* A connection that never says HELLO must not hold a place. */
            if (!c->ready && now - c->connected > HANDSHAKE_NS) c->dead = 1;
            if (c->dead) reclaim(c);
        }
        if (work > 0) last_work = now_ns();
    }
    while (clients != NULL)
        reclaim(clients);
    close(lfd);
    unlink(opts.socket_path);
    homa_runtime_destroy(rt);
    return 0;
}
