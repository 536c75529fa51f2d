/* The homad backend (docs/homad.md): a runtime whose sockets live in the
 * host's homad.  One mutex per connection guards the private ring indexes
 * and the per-socket queues: the app is the single producer of the command
 * ring and the single consumer of the completion ring whatever its number
 * of threads.  Completions are sorted as they are read: a DONE wakes the
 * thread that issued the command (matched by tag), a message goes to its
 * socket's ready queue, where homa_recv() picks it by the rule of
 * src/core/readyq.h (or by id).  A waiting thread runs the one wait loop
 * (wait.h): it spins for busy_poll_us, then one of the waiting threads
 * (the "reader") sleeps in ppoll on the completion eventfd and the unix
 * socket (whose hang-up says the daemon died), the others on a condition
 * variable.  The backend's operations for the public API are at the end. */
#include "rt/homad_client.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/readyq.h"
#include "rt/homad_proto.h"
#include "rt/rt.h"

#define READER_NAP_NS 200000000ull /* a sleeping reader re-checks this often */

/* A delivered message not yet received, in its socket's ready queue. */
struct dc_qmsg {
    struct homa_readyq_node node;
    struct homad_cqe e;
};

/* A client RPC whose response is not yet received (the socket's ids
 * table): so that homa_recv by id finds its response, and a response to an
 * RPC nobody waits for (aborted) is dropped. */
struct dc_id {
    struct homa_hnode hn;
    uint64_t id;
    struct dc_qmsg *q; /* its response, delivered and queued; NULL before */
};

struct homa_dcsock {
    struct homa_dc *dc;
    uint16_t port;
    int closing;
    int users;               /* threads inside a call on this socket */
    struct homa_readyq q;    /* delivered messages not yet received */
    struct homa_htab ids;    /* struct dc_id by id */
    struct homa_reqtab reqs; /* unanswered requests (for homa_reply by id) */
    struct homa_dcsock *next;
    int efd; /* homa_socket_fd(), -1 until asked for */
};

struct dc_wait {
    struct dc_wait *next;
    uint64_t tag;
    uint8_t op;
    struct homa_dcsock *sock;
    int done;
    struct homad_cqe cqe;
};

struct homa_dc {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int fd, cmd_efd, cq_efd;
    void *base;
    size_t bytes;
    struct homad_hdr hdr;
    struct homad_view v;
    uint32_t cmd_head, cq_tail;
    uint64_t next_tag;
    struct dc_wait *waits;
    uint32_t *tx_free;
    uint32_t ntx_free;
    uint32_t *rel; /* RX slots to release, waiting for room in the command ring */
    uint32_t nrel;
    struct homa_dcsock **rx_owner; /* socket holding each RX slot */
    struct homa_dcsock *socks;
    int reader;
    int dead;
    uint64_t busy_ns;
    /* Adaptive spin budgets (rt/spin.h): one for a command's DONE,
     * which homad answers within microseconds when it is awake, one for
     * everything else (messages, ring room, TX slots). */
    struct homa_spin spin[2];
    struct homa_yield yield; /* whether spinning yields (rt/spin.h) */
};

#define now_ns homa_rt_now

static void kick(struct homa_dc *dc)
{
    /* Pairs with the daemon's fence between setting daemon_sleeping and
     * re-checking the ring: one of us sees the other's store. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&dc->v.ctrl->daemon_sleeping, __ATOMIC_RELAXED)) {
        uint64_t one = 1;
        ssize_t r = write(dc->cmd_efd, &one, sizeof(one));
        (void)r;
    }
}

/* Pushes deferred RELEASEs while there is room.  Lock held. */
static void flush_releases(struct homa_dc *dc)
{
    int pushed = 0;
    while (dc->nrel > 0 && homad_cmd_space(&dc->v, dc->cmd_head) > 0) {
        struct homad_cmd c;
        memset(&c, 0, sizeof(c));
        c.op = HOMAD_OP_RELEASE;
        c.slot = dc->rel[--dc->nrel];
        homad_cmd_push(&dc->v, dc->cmd_head++, &c);
        pushed = 1;
    }
    if (pushed) kick(dc);
}

static void release_slot(struct homa_dc *dc, uint32_t slot)
{
    if (slot >= dc->v.nrx || dc->nrel >= dc->v.nrx) return;
    dc->rx_owner[slot] = NULL;
    dc->rel[dc->nrel++] = slot;
}

static uint64_t id_key(const struct homa_hnode *n)
{
    return homa_mix64(HOMA_CONTAINER(n, struct dc_id, hn)->id);
}

static struct dc_id *id_find(const struct homa_dcsock *s, uint64_t id)
{
    for (struct homa_hnode *n = homa_htab_first(&s->ids, homa_mix64(id)); n; n = n->next) {
        struct dc_id *d = HOMA_CONTAINER(n, struct dc_id, hn);
        if (d->id == id) return d;
    }
    return NULL;
}

static void id_add(struct homa_dcsock *s, uint64_t id)
{
    struct dc_id *d = malloc(sizeof(*d));
    if (d == NULL) return;
    d->id = id;
    d->q = NULL;
    homa_htab_grow_if_full(&s->ids, id_key);
    homa_htab_add(&s->ids, &d->hn, homa_mix64(id));
}

static int id_remove(struct homa_dcsock *s, uint64_t id)
{
    struct dc_id *d = id_find(s, id);
    if (d == NULL) return 0;
    homa_htab_del(&s->ids, &d->hn, homa_mix64(id));
    free(d);
    return 1;
}

static int id_known(const struct homa_dcsock *s, uint64_t id)
{
    return id_find(s, id) != NULL;
}

static void ids_destroy(struct homa_dcsock *s)
{
    for (size_t i = 0; i < s->ids.nb; i++) {
        while (s->ids.b[i] != NULL) {
            struct dc_id *d = HOMA_CONTAINER(s->ids.b[i], struct dc_id, hn);
            s->ids.b[i] = d->hn.next;
            free(d);
        }
    }
    homa_htab_destroy(&s->ids);
}

static struct homa_dcsock *sock_by_port(struct homa_dc *dc, uint16_t port)
{
    for (struct homa_dcsock *s = dc->socks; s != NULL; s = s->next)
        if (s->port == port && !s->closing) return s;
    return NULL;
}

/* Reads every waiting completion and sorts it.  Lock held. */
static int drain(struct homa_dc *dc)
{
    uint32_t n = homad_cq_avail(&dc->v, dc->cq_tail);
    for (uint32_t i = 0; i < n; i++) {
        struct homad_cqe e;
        homad_cq_copy(&dc->v, dc->cq_tail++, &e);
        if (e.kind == HOMAD_CQ_DONE) {
            for (struct dc_wait *w = dc->waits; w != NULL; w = w->next) {
                if (w->tag != e.tag) continue;
                w->cqe = e;
                w->done = 1;
                /* Known before its response can be sorted (it may be
                 * next in this very batch). */
                if (w->op == HOMAD_OP_SEND && e.result == 0) id_add(w->sock, e.id);
                break;
            }
            continue;
        }
        int has_slot = e.kind == HOMAD_CQ_MSG;
        if (has_slot && e.slot >= dc->v.nrx) continue; /* not from a sane daemon */
        struct homa_dcsock *s = sock_by_port(dc, e.port);
        /* Responses nobody waits for any more (aborted RPCs) are dropped. */
        struct dc_id *d = s != NULL && !e.is_request ? id_find(s, e.id) : NULL;
        if (s == NULL || (!e.is_request && d == NULL)) {
            if (has_slot) release_slot(dc, e.slot);
            continue;
        }
        struct dc_qmsg *q = malloc(sizeof(*q));
        if (q == NULL) {
            if (has_slot) release_slot(dc, e.slot);
            continue;
        }
        q->e = e;
        homa_readyq_push(&s->q, &q->node, e.is_request != 0);
        if (d != NULL && d->q == NULL) d->q = q;
        if (has_slot) dc->rx_owner[e.slot] = s;
    }
    if (n > 0) {
        homad_cq_consumed(&dc->v, dc->cq_tail);
        pthread_cond_broadcast(&dc->cond);
    }
    flush_releases(dc);
    return (int)n;
}

/* After the handshake homad only sends eventfds (homa_dc_fd, which reads
 * them itself): readable with nothing to read, or a hang-up, means homad is
 * gone. */
static int unix_dead(struct homa_dc *dc, short revents)
{
    if (revents & (POLLHUP | POLLERR)) return 1;
    if (!(revents & POLLIN)) return 0;
    char b;
    ssize_t n = recv(dc->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

static void check_alive(struct homa_dc *dc, int block_ms)
{
    struct pollfd p = {.fd = dc->fd, .events = POLLIN};
    if (poll(&p, 1, block_ms) > 0 && unix_dead(dc, p.revents)) {
        dc->dead = 1;
        pthread_cond_broadcast(&dc->cond);
    }
}

typedef int (*dc_pred)(struct homa_dc *dc, void *arg);

static void cond_wait_until(struct homa_dc *dc, uint64_t until)
{
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                          .tv_nsec = (long)(until % 1000000000ull)};
    pthread_cond_timedwait(&dc->cond, &dc->lock, &ts);
}

/* A thread's wait on the one wait loop (wait.h): for pred(dc, arg). */
struct dc_waitctx {
    struct homa_dc *dc;
    dc_pred pred;
    void *arg;
};

static int dc_wait_poll(void *ctx)
{
    return drain(((struct dc_waitctx *)ctx)->dc);
}

static bool dc_wait_done(void *ctx)
{
    struct dc_waitctx *w = ctx;
    return w->pred(w->dc, w->arg) != 0;
}

static int dc_wait_error(void *ctx)
{
    return ((struct dc_waitctx *)ctx)->dc->dead ? HOMA_ERR_SHUTDOWN : 0;
}

/* Between two looks while spinning: yield the CPU when the host has room
 * for it (homa_yield in spin.h), else a short pause; the lock is dropped
 * either way so that homad's completions can be read by whoever holds it. */
static void dc_wait_spin(void *ctx, uint64_t now)
{
    struct homa_dc *dc = ((struct dc_waitctx *)ctx)->dc;
    int yield = homa_yield_allowed(&dc->yield, now);
    pthread_mutex_unlock(&dc->lock);
    if (yield) {
        sched_yield();
    } else {
        for (int i = 0; i < 64; i++)
            __asm__ volatile("" ::: "memory");
    }
    pthread_mutex_lock(&dc->lock);
    if (yield) {
        uint64_t t = now_ns();
        homa_yield_took(&dc->yield, t, t - now);
    }
}

/* One waiting thread (the reader) sleeps in ppoll on the completion
 * eventfd and the unix socket, the others on the condition variable; all
 * look again at least every READER_NAP_NS. */
static void dc_wait_sleep(void *ctx, uint64_t deadline)
{
    struct dc_waitctx *w = ctx;
    struct homa_dc *dc = w->dc;
    uint64_t now = now_ns();
    uint64_t until = deadline - now > READER_NAP_NS ? now + READER_NAP_NS : deadline;
    if (dc->reader) {
        cond_wait_until(dc, until);
        return;
    }
    dc->reader = 1;
    __atomic_store_n(&dc->v.ctrl->app_sleeping, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (drain(dc) == 0 && !w->pred(dc, w->arg)) {
        pthread_mutex_unlock(&dc->lock);
        struct pollfd p[2] = {{.fd = dc->cq_efd, .events = POLLIN},
                              {.fd = dc->fd, .events = POLLIN}};
        uint64_t d = until > now ? until - now : 0;
        struct timespec ts = {.tv_sec = (time_t)(d / 1000000000ull),
                              .tv_nsec = (long)(d % 1000000000ull)};
        int r = ppoll(p, 2, &ts, NULL);
        pthread_mutex_lock(&dc->lock);
        if (r > 0 && (p[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t rr = read(dc->cq_efd, &v, sizeof(v));
            (void)rr;
        }
        if (r > 0 && unix_dead(dc, p[1].revents)) dc->dead = 1;
    }
    __atomic_store_n(&dc->v.ctrl->app_sleeping, 0, __ATOMIC_RELAXED);
    dc->reader = 0;
    pthread_cond_broadcast(&dc->cond);
}

static const struct homa_wait_ops dc_wait_ops = {
    .poll = dc_wait_poll,
    .done = dc_wait_done,
    .error = dc_wait_error,
    .spin = dc_wait_spin,
    .sleep = dc_wait_sleep,
};

static int pred_done(struct homa_dc *dc, void *arg);

/* Waits (lock held) until pred holds: 0; HOMA_ERR_AGAIN at the deadline
 * (UINT64_MAX = none); HOMA_ERR_SHUTDOWN if the daemon is gone. */
static int wait_until(struct homa_dc *dc, dc_pred pred, void *arg, uint64_t deadline)
{
    struct dc_waitctx w = {.dc = dc, .pred = pred, .arg = arg};
    struct homa_wait wt = {
        .ops = &dc_wait_ops, .ctx = &w, .spin = &dc->spin[pred == pred_done ? 0 : 1]};
    return homa_wait_run(&wt, deadline);
}

static int pred_cmd_space(struct homa_dc *dc, void *arg)
{
    (void)arg;
    return homad_cmd_space(&dc->v, dc->cmd_head) > 0;
}

static int pred_done(struct homa_dc *dc, void *arg)
{
    (void)dc;
    return ((struct dc_wait *)arg)->done;
}

static int pred_tx_slot(struct homa_dc *dc, void *arg)
{
    (void)arg;
    return dc->ntx_free > 0;
}

/* Issues a command and waits for its DONE.  Lock held.  Returns the
 * command's result, or HOMA_ERR_SHUTDOWN if the daemon is gone. */
static int do_cmd(struct homa_dc *dc, struct homad_cmd *c, struct homa_dcsock *s,
                  struct homad_cqe *out)
{
    if (dc->dead) return HOMA_ERR_SHUTDOWN;
    int rc = wait_until(dc, pred_cmd_space, NULL, UINT64_MAX);
    if (rc != 0) return rc;
    struct dc_wait w;
    memset(&w, 0, sizeof(w));
    w.tag = c->tag = ++dc->next_tag;
    w.op = c->op;
    w.sock = s;
    w.next = dc->waits;
    dc->waits = &w;
    homad_cmd_push(&dc->v, dc->cmd_head++, c);
    kick(dc);
    rc = wait_until(dc, pred_done, &w, UINT64_MAX);
    for (struct dc_wait **pp = &dc->waits; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == &w) {
            *pp = w.next;
            break;
        }
    }
    if (rc != 0) return rc;
    if (out != NULL) *out = w.cqe;
    return w.cqe.result;
}

/* ------------------------------------------------------------ connection */

static int recv_welcome(int fd, struct homad_welcome *wel, int fds[3])
{
    char cbuf[CMSG_SPACE(3 * sizeof(int))];
    struct iovec iov = {.iov_base = wel, .iov_len = sizeof(*wel)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    ssize_t n;
    do {
        n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    int nfds = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int f;
            memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (nfds < 3)
                fds[nfds++] = f;
            else
                close(f);
        }
    }
    if (n != (ssize_t)sizeof(*wel) || wel->magic != HOMAD_MAGIC || wel->version != HOMAD_VERSION) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return HOMA_ERR_INVAL;
    }
    if (wel->result != 0) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return wel->result < 0 ? wel->result : HOMA_ERR_INVAL;
    }
    if (nfds != 3) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return HOMA_ERR_INVAL;
    }
    return 0;
}

int homa_dc_connect(const char *path, uint64_t busy_poll_ns, struct homa_dc **out, homa_config *cfg)
{
    struct sockaddr_un sa;
    if (path == NULL || strlen(path) >= sizeof(sa.sun_path) || out == NULL) return HOMA_ERR_INVAL;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return HOMA_ERR_IO;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return HOMA_ERR_IO;
    }
    struct homad_hello hello = {.magic = HOMAD_MAGIC, .version = HOMAD_VERSION};
    if (send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello)) {
        close(fd);
        return HOMA_ERR_IO;
    }
    struct homad_welcome wel;
    int fds[3] = {-1, -1, -1};
    int rc = recv_welcome(fd, &wel, fds);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    struct homa_dc *dc = calloc(1, sizeof(*dc));
    struct stat st;
    void *base = MAP_FAILED;
    rc = HOMA_ERR_INVAL;
    if (dc == NULL) {
        rc = HOMA_ERR_NOMEM;
        goto fail;
    }
    if (fstat(fds[0], &st) != 0 || (uint64_t)st.st_size != wel.region_bytes ||
        wel.region_bytes < HOMAD_HDR_BYTES)
        goto fail;
    base = mmap(NULL, wel.region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    if (base == MAP_FAILED) {
        rc = HOMA_ERR_NOMEM;
        goto fail;
    }
    memcpy(&dc->hdr, base, sizeof(dc->hdr));
    if (homad_hdr_check(&dc->hdr, wel.region_bytes) != 0) goto fail;
    homad_view_init(&dc->v, base, &dc->hdr);
    dc->tx_free = malloc(dc->v.ntx * sizeof(*dc->tx_free));
    dc->rel = malloc(dc->v.nrx * sizeof(*dc->rel));
    dc->rx_owner = calloc(dc->v.nrx, sizeof(*dc->rx_owner));
    if (dc->tx_free == NULL || dc->rel == NULL || dc->rx_owner == NULL) {
        rc = HOMA_ERR_NOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < dc->v.ntx; i++)
        dc->tx_free[i] = dc->v.ntx - 1 - i;
    dc->ntx_free = dc->v.ntx;
    close(fds[0]);
    dc->fd = fd;
    dc->cmd_efd = fds[1];
    dc->cq_efd = fds[2];
    dc->base = base;
    dc->bytes = wel.region_bytes;
    dc->busy_ns = busy_poll_ns;
    homa_spin_init(&dc->spin[0], busy_poll_ns);
    homa_spin_init(&dc->spin[1], busy_poll_ns);
    homa_yield_init(&dc->yield);
    /* Our indexes start where the daemon's do (a fresh region: zero). */
    dc->cmd_head = __atomic_load_n(&dc->v.ctrl->cmd_head, __ATOMIC_ACQUIRE);
    dc->cq_tail = __atomic_load_n(&dc->v.ctrl->cq_tail, __ATOMIC_ACQUIRE);
    pthread_mutex_init(&dc->lock, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&dc->cond, &a);
    pthread_condattr_destroy(&a);
    if (cfg != NULL) *cfg = dc->hdr.cfg;
    *out = dc;
    return 0;

fail:
    if (base != MAP_FAILED) munmap(base, wel.region_bytes);
    if (dc != NULL) {
        free(dc->tx_free);
        free(dc->rel);
        free(dc->rx_owner);
        free(dc);
    }
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    close(fd);
    return rc;
}

void homa_dc_destroy(struct homa_dc *dc)
{
    if (dc == NULL) return;
    close(dc->fd); /* the daemon reclaims whatever is left */
    close(dc->cmd_efd);
    close(dc->cq_efd);
    munmap(dc->base, dc->bytes);
    pthread_cond_destroy(&dc->cond);
    pthread_mutex_destroy(&dc->lock);
    free(dc->tx_free);
    free(dc->rel);
    free(dc->rx_owner);
    free(dc);
}

int homa_dc_counters(struct homa_dc *dc, homa_counters *engine, homa_driver_counters *driver)
{
    struct homad_cmd c;
    memset(&c, 0, sizeof(c));
    c.op = HOMAD_OP_COUNTERS;
    pthread_mutex_lock(&dc->lock);
    int rc = do_cmd(dc, &c, NULL, NULL);
    if (rc == 0) {
        if (engine != NULL) memcpy(engine, &dc->v.ctrs->engine, sizeof(*engine));
        if (driver != NULL) memcpy(driver, &dc->v.ctrs->driver, sizeof(*driver));
    }
    pthread_mutex_unlock(&dc->lock);
    return rc;
}

long homa_dc_stats(struct homa_dc *dc, void *buf, size_t cap)
{
    struct homad_cmd c;
    memset(&c, 0, sizeof(c));
    c.op = HOMAD_OP_STATS;
    struct homad_cqe e;
    pthread_mutex_lock(&dc->lock);
    long rc = do_cmd(dc, &c, NULL, &e);
    if (rc == 0) {
        if (e.slot < dc->v.nrx && e.len <= dc->v.slot_size) {
            size_t n = e.len < cap ? e.len : cap;
            memcpy(buf, dc->v.rx + (uint64_t)e.slot * dc->v.slot_size, n);
            rc = (long)n;
            release_slot(dc, e.slot);
            flush_releases(dc);
        } else {
            rc = HOMA_ERR_INVAL;
        }
    }
    pthread_mutex_unlock(&dc->lock);
    return rc;
}

int homa_dc_cutoffs(struct homa_dc *dc, homa_cutoffs *out)
{
    /* COUNTERS also writes the cutoffs into the counters area. */
    struct homad_cmd c;
    memset(&c, 0, sizeof(c));
    c.op = HOMAD_OP_COUNTERS;
    pthread_mutex_lock(&dc->lock);
    int rc = do_cmd(dc, &c, NULL, NULL);
    if (rc == 0) memcpy(out, &dc->v.ctrs->cutoffs, sizeof(*out));
    pthread_mutex_unlock(&dc->lock);
    return rc;
}

/* --------------------------------------------------------------- sockets */

int homa_dc_open(struct homa_dc *dc, const homa_endpoint *local, struct homa_dcsock **out,
                 uint16_t *bound)
{
    struct homa_dcsock *s = calloc(1, sizeof(*s));
    if (s == NULL) return HOMA_ERR_NOMEM;
    s->dc = dc;
    s->efd = -1;
    homa_readyq_init(&s->q);
    if (homa_htab_init(&s->ids, 16) != 0) {
        free(s);
        return HOMA_ERR_NOMEM;
    }
    struct homad_cmd c;
    memset(&c, 0, sizeof(c));
    c.op = HOMAD_OP_OPEN;
    c.port = local->port;
    c.addr = local->addr;
    struct homad_cqe e;
    pthread_mutex_lock(&dc->lock);
    int rc = do_cmd(dc, &c, NULL, &e);
    if (rc == 0) {
        s->port = e.port;
        s->next = dc->socks;
        dc->socks = s;
    }
    pthread_mutex_unlock(&dc->lock);
    if (rc != 0) {
        ids_destroy(s);
        free(s);
        return rc;
    }
    *bound = s->port;
    *out = s;
    return 0;
}

void homa_dc_close(struct homa_dcsock *s)
{
    struct homa_dc *dc = s->dc;
    pthread_mutex_lock(&dc->lock);
    s->closing = 1;
    pthread_cond_broadcast(&dc->cond);
    /* A thread of s may be the one asleep in ppoll: wake it. */
    uint64_t one = 1;
    ssize_t wr = write(dc->cq_efd, &one, sizeof(one));
    (void)wr;
    struct homad_cmd c;
    memset(&c, 0, sizeof(c));
    c.op = HOMAD_OP_CLOSE;
    c.port = s->port;
    do_cmd(dc, &c, NULL, NULL);
    /* Threads still in a call on s see `closing` and leave; s is freed only
     * after the last one (also when the daemon is gone). */
    while (s->users > 0)
        cond_wait_until(dc, now_ns() + 1000000);
    for (struct homa_dcsock **pp = &dc->socks; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    for (struct homa_readyq_node *n; (n = homa_readyq_first(&s->q, HOMA_RECV_ANY)) != NULL;) {
        struct dc_qmsg *q = HOMA_CONTAINER(n, struct dc_qmsg, node);
        homa_readyq_remove(n);
        if (q->e.kind == HOMAD_CQ_MSG) release_slot(dc, q->e.slot);
        free(q);
    }
    for (uint32_t i = 0; i < dc->v.nrx; i++)
        if (dc->rx_owner[i] == s) release_slot(dc, i);
    flush_releases(dc);
    ids_destroy(s);
    homa_reqtab_destroy(&s->reqs);
    pthread_mutex_unlock(&dc->lock);
    if (s->efd >= 0) close(s->efd);
    free(s);
}

int homa_dc_fd(struct homa_dcsock *s)
{
    struct homa_dc *dc = s->dc;
    pthread_mutex_lock(&dc->lock);
    if (s->efd >= 0 || s->closing) {
        int fd = s->closing ? HOMA_ERR_SHUTDOWN : s->efd;
        pthread_mutex_unlock(&dc->lock);
        return fd;
    }
    struct homad_cmd c;
    memset(&c, 0, sizeof(c));
    c.op = HOMAD_OP_FD;
    c.port = s->port;
    int rc = do_cmd(dc, &c, s, NULL);
    if (rc == 0) {
        /* Sent before the DONE: it is waiting on the socket. */
        struct homad_fdmsg fm;
        char cbuf[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {.iov_base = &fm, .iov_len = sizeof(fm)};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        ssize_t n = recvmsg(dc->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        struct cmsghdr *cm = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL;
        int fd = -1;
        if (cm != NULL && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
            cm->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(&fd, CMSG_DATA(cm), sizeof(int));
        if (n != (ssize_t)sizeof(fm) || fm.magic != HOMAD_MAGIC || fm.port != s->port || fd < 0) {
            if (fd >= 0) close(fd);
            rc = HOMA_ERR_IO;
        } else {
            /* Start readable, as in embedded mode: messages may wait. */
            uint64_t one = 1;
            ssize_t w = write(fd, &one, sizeof(one));
            (void)w;
            s->efd = fd;
        }
    }
    int ret = rc == 0 ? s->efd : rc;
    pthread_mutex_unlock(&dc->lock);
    return ret;
}

/* A command about the socket's port that only waits for its DONE. */
static int port_cmd(struct homa_dcsock *s, uint8_t op, uint32_t len, uint64_t id)
{
    struct homad_cmd c;
    memset(&c, 0, sizeof(c));
    c.op = op;
    c.port = s->port;
    c.len = len;
    c.id = id;
    pthread_mutex_lock(&s->dc->lock);
    int rc = s->closing ? HOMA_ERR_SHUTDOWN : do_cmd(s->dc, &c, s, NULL);
    pthread_mutex_unlock(&s->dc->lock);
    return rc;
}

int homa_dc_linger(struct homa_dcsock *s, int64_t timeout_ns)
{
    return port_cmd(s, HOMAD_OP_LINGER, 0, timeout_ns < 0 ? UINT64_MAX : (uint64_t)timeout_ns);
}

int homa_dc_set_class(struct homa_dcsock *s, int sched_class)
{
    return port_cmd(s, HOMAD_OP_CLASS, (uint32_t)sched_class, 0);
}

/* ------------------------------------------------------------------ RPCs */

/* Sends a SEND or REPLY: the message is written once into a TX slot, which
 * is ours again when the DONE arrives.  Lock held. */
static int send_slot(struct homa_dcsock *s, struct homad_cmd *c, const void *buf, size_t len,
                     struct homad_cqe *e)
{
    struct homa_dc *dc = s->dc;
    if (len > dc->v.slot_size || len > dc->v.max_msg) return HOMA_ERR_MSGSIZE;
    int rc = wait_until(dc, pred_tx_slot, NULL, UINT64_MAX);
    if (rc != 0) return rc;
    uint32_t slot = dc->tx_free[--dc->ntx_free];
    /* The copy into the slot runs without the lock: the slot is ours. */
    s->users++;
    pthread_mutex_unlock(&dc->lock);
    if (len > 0) memcpy(dc->v.tx + (uint64_t)slot * dc->v.slot_size, buf, len);
    pthread_mutex_lock(&dc->lock);
    s->users--;
    c->slot = slot;
    c->len = (uint32_t)len;
    c->port = s->port;
    rc = s->closing ? HOMA_ERR_SHUTDOWN : do_cmd(dc, c, s, e);
    dc->tx_free[dc->ntx_free++] = slot;
    pthread_cond_broadcast(&dc->cond);
    return rc;
}

int homa_dc_send(struct homa_dcsock *s, const homa_endpoint *dst, const void *buf, size_t len,
                 uint64_t cookie, int prio, uint64_t *id)
{
    struct homad_cmd c;
    memset(&c, 0, sizeof(c));
    c.op = HOMAD_OP_SEND;
    if (prio >= 0) c.flags = HOMAD_SEND_PRIO(prio & 0xf, prio >> 4);
    c.addr = dst->addr;
    c.peer_port = dst->port;
    c.cookie = cookie;
    if (dst->port == 0) return HOMA_ERR_INVAL;
    struct homad_cqe e;
    pthread_mutex_lock(&s->dc->lock);
    int rc = s->closing ? HOMA_ERR_SHUTDOWN : send_slot(s, &c, buf, len, &e);
    pthread_mutex_unlock(&s->dc->lock);
    if (rc == 0 && id != NULL) *id = e.id;
    return rc;
}

int homa_dc_reply(struct homa_dcsock *s, const homa_addr *peer, uint16_t peer_port, uint64_t id,
                  const void *buf, size_t len)
{
    struct homa_dc *dc = s->dc;
    pthread_mutex_lock(&dc->lock);
    struct homad_cmd c;
    memset(&c, 0, sizeof(c));
    int n;
    int rc = homa_reqtab_resolve(&s->reqs, id, peer, peer_port, &c.addr, &c.peer_port, &n);
    if (s->closing) rc = HOMA_ERR_SHUTDOWN;
    if (rc == 0) {
        c.op = HOMAD_OP_REPLY;
        c.id = id;
        rc = send_slot(s, &c, buf, len, NULL);
        /* (send_slot dropped the lock: forget looks the entry up again) */
        if (n > 0 && homa_reqtab_done(rc)) homa_reqtab_forget(&s->reqs, id, &c.addr, c.peer_port);
    }
    pthread_mutex_unlock(&dc->lock);
    return rc;
}

struct recv_arg {
    struct homa_dcsock *s;
    unsigned flags;
    uint64_t id;
    struct dc_qmsg *found;
};

static int pred_msg(struct homa_dc *dc, void *argp)
{
    (void)dc;
    struct recv_arg *a = argp;
    struct homa_dcsock *s = a->s;
    if (s->closing) return 1;
    struct dc_qmsg *q = NULL;
    if (a->id != 0) {
        struct dc_id *d = id_find(s, a->id);
        q = d != NULL ? d->q : NULL;
    } else {
        struct homa_readyq_node *n = homa_readyq_first(&s->q, a->flags);
        q = n != NULL ? HOMA_CONTAINER(n, struct dc_qmsg, node) : NULL;
    }
    a->found = q;
    return q != NULL;
}

int homa_dc_recv(struct homa_dcsock *s, unsigned flags, uint64_t id, int64_t timeout_ns,
                 homa_msg *msg)
{
    struct homa_dc *dc = s->dc;
    memset(msg, 0, sizeof(*msg));
    uint64_t deadline = timeout_ns < 0 ? UINT64_MAX : now_ns() + (uint64_t)timeout_ns;
    struct recv_arg a = {.s = s, .flags = flags, .id = id};
    pthread_mutex_lock(&dc->lock);
    if (s->closing || dc->dead) {
        pthread_mutex_unlock(&dc->lock);
        return HOMA_ERR_SHUTDOWN;
    }
    drain(dc);
    if (id != 0 && !id_known(s, id)) {
        pthread_mutex_unlock(&dc->lock);
        return HOMA_ERR_NOT_FOUND;
    }
    s->users++;
    int rc = wait_until(dc, pred_msg, &a, deadline);
    s->users--;
    if (s->closing) {
        rc = HOMA_ERR_SHUTDOWN;
        pthread_cond_broadcast(&dc->cond);
    }
    if (rc == HOMA_ERR_AGAIN && timeout_ns == 0) check_alive(dc, 0);
    /* The eventfd stays readable until a non-blocking recv finds nothing. */
    if (rc == HOMA_ERR_AGAIN && timeout_ns == 0 && s->efd >= 0 && id == 0 &&
        flags == HOMA_RECV_ANY) {
        uint64_t v;
        ssize_t rr = read(s->efd, &v, sizeof(v));
        (void)rr;
        /* A delivery between our last look and the read: keep it readable. */
        drain(dc);
        if (pred_msg(dc, &a)) {
            v = 1;
            rr = write(s->efd, &v, sizeof(v));
        }
    }
    if (rc == HOMA_ERR_AGAIN && dc->dead) rc = HOMA_ERR_SHUTDOWN;
    if (rc == 0) {
        struct dc_qmsg *q = a.found;
        homa_readyq_remove(&q->node);
        const struct homad_cqe *e = &q->e;
        msg->id = e->id;
        msg->cookie = e->cookie;
        msg->peer = e->peer;
        msg->peer_port = e->peer_port;
        msg->port = s->port;
        msg->is_request = e->is_request;
        if (!e->is_request) id_remove(s, e->id);
        if (e->kind == HOMAD_CQ_RPC_ERR) {
            msg->error = e->result;
            rc = e->result != 0 ? e->result : HOMA_ERR_INVAL;
        } else {
            msg->data = dc->v.rx + (uint64_t)e->slot * dc->v.slot_size;
            msg->length = e->len <= dc->v.slot_size ? e->len : 0;
            msg->handle = (void *)(uintptr_t)(e->slot + 1u);
            if (e->is_request) homa_reqtab_add(&s->reqs, e->id, &e->peer, e->peer_port);
        }
        free(q);
    }
    pthread_mutex_unlock(&dc->lock);
    return rc;
}

void homa_dc_release(struct homa_dcsock *s, homa_msg *msg)
{
    struct homa_dc *dc = s->dc;
    uintptr_t h = (uintptr_t)msg->handle;
    pthread_mutex_lock(&dc->lock);
    if (h >= 1 && h <= dc->v.nrx && dc->rx_owner[h - 1] == s) {
        release_slot(dc, (uint32_t)(h - 1));
        flush_releases(dc);
    }
    pthread_mutex_unlock(&dc->lock);
    msg->handle = NULL;
    msg->data = NULL;
}

void *homa_dc_msg_take(struct homa_dcsock *s, homa_msg *msg)
{
    (void)s;
    if (msg->data == NULL) return NULL;
    void *buf = malloc(msg->length ? msg->length : 1);
    if (buf == NULL) return NULL;
    memcpy(buf, msg->data, msg->length);
    msg->data = NULL;
    return buf;
}

int homa_dc_abort(struct homa_dcsock *s, uint64_t id)
{
    struct homa_dc *dc = s->dc;
    pthread_mutex_lock(&dc->lock);
    int rc;
    if (s->closing) {
        rc = HOMA_ERR_SHUTDOWN;
    } else if (id & 1) {
        rc = homa_reqtab_forget_id(&s->reqs, id) ? 0 : HOMA_ERR_NOT_FOUND;
        if (rc == 0) {
            /* homad's socket forgets the request too (no reply will come). */
            struct homad_cmd c;
            memset(&c, 0, sizeof(c));
            c.op = HOMAD_OP_ABORT;
            c.port = s->port;
            c.id = id;
            if (do_cmd(dc, &c, s, NULL) == HOMA_ERR_SHUTDOWN) rc = HOMA_ERR_SHUTDOWN;
        }
    } else if (id_find(s, id) == NULL) {
        rc = HOMA_ERR_NOT_FOUND;
    } else {
        /* A response already here is dropped; otherwise the daemon aborts
         * the RPC (a response racing with the abort is dropped by drain). */
        struct dc_qmsg *q = id_find(s, id)->q;
        id_remove(s, id);
        rc = 0;
        if (q == NULL) {
            struct homad_cmd c;
            memset(&c, 0, sizeof(c));
            c.op = HOMAD_OP_ABORT;
            c.port = s->port;
            c.id = id;
            int r = do_cmd(dc, &c, s, NULL);
            if (r == HOMA_ERR_SHUTDOWN) rc = r;
        } else {
            homa_readyq_remove(&q->node);
            if (q->e.kind == HOMAD_CQ_MSG) release_slot(dc, q->e.slot);
            free(q);
            flush_releases(dc);
        }
    }
    pthread_mutex_unlock(&dc->lock);
    return rc;
}

/* ------------------------------------------- the backend's operations */

int homa_rt_homad_connect(const char *path, uint32_t busy_poll_us, homa_runtime **out)
{
    if (path == NULL || out == NULL) return HOMA_ERR_INVAL;
    homa_runtime *rt = calloc(1, sizeof(*rt));
    if (rt == NULL) return HOMA_ERR_NOMEM;
    int rc = homa_dc_connect(path, (uint64_t)busy_poll_us * 1000u, &rt->dc, &rt->cfg);
    if (rc != 0) {
        free(rt);
        return rc;
    }
    rt->be = &homa_rt_homad;
    pthread_mutex_init(&rt->lock, NULL);
    *out = rt;
    return 0;
}

static void hc_destroy(homa_runtime *rt)
{
    homa_dc_destroy(rt->dc);
    pthread_mutex_destroy(&rt->lock);
    free(rt);
}

static void hc_counters(homa_runtime *rt, homa_counters *engine, homa_driver_counters *driver)
{
    if (homa_dc_counters(rt->dc, engine, driver) != 0) {
        /* The daemon is gone: no counters to report. */
        if (engine != NULL) memset(engine, 0, sizeof(*engine));
        if (driver != NULL) memset(driver, 0, sizeof(*driver));
    }
}

static void hc_cutoffs(homa_runtime *rt, homa_cutoffs *out)
{
    /* The host engine's, from homad; zeros if homad is gone. */
    if (homa_dc_cutoffs(rt->dc, out) != 0) memset(out, 0, sizeof(*out));
}

/* Faults are injected by homad's own drivers (its HOMA_FAULTS). */
static int hc_set_faults(homa_runtime *rt, const homa_faults *f)
{
    (void)rt;
    (void)f;
    return HOMA_ERR_STATE;
}

static int hc_open(homa_socket *s, const homa_endpoint *local)
{
    homa_runtime *rt = s->rt;
    int rc = homa_dc_open(rt->dc, local, &s->dcs, &s->port);
    if (rc != 0) return rc;
    s->local.addr = local->addr;
    s->local.port = s->port;
    pthread_mutex_lock(&rt->lock);
    s->next = rt->socks;
    rt->socks = s;
    rt->nsocks++;
    pthread_mutex_unlock(&rt->lock);
    return 0;
}

static void hc_close(homa_socket *s)
{
    homa_runtime *rt = s->rt;
    pthread_mutex_lock(&rt->lock);
    for (homa_socket **pp = &rt->socks; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    rt->nsocks--;
    pthread_mutex_unlock(&rt->lock);
    homa_dc_close(s->dcs);
}

static int hc_linger(homa_socket *s, int64_t timeout_ns)
{
    return homa_dc_linger(s->dcs, timeout_ns);
}

static int hc_set_class(homa_socket *s, int sched_class)
{
    return homa_dc_set_class(s->dcs, sched_class);
}

static int hc_fd(homa_socket *s)
{
    return homa_dc_fd(s->dcs);
}

static int hc_send(homa_socket *s, const homa_endpoint *dst, const void *buf, void *owned,
                   size_t len, uint64_t cookie, int prio, uint64_t *id)
{
    int rc = homa_dc_send(s->dcs, dst, owned ? owned : buf, len, cookie, prio, id);
    if (rc == 0) free(owned); /* written into the shared region: ours to free */
    return rc;
}

static int hc_reply(homa_socket *s, const homa_addr *peer, uint16_t peer_port, uint64_t id,
                    const void *buf, void *owned, size_t len)
{
    int rc = homa_dc_reply(s->dcs, peer, peer_port, id, owned ? owned : buf, len);
    if (rc == 0) free(owned);
    return rc;
}

static int hc_recv(homa_socket *s, unsigned flags, uint64_t id, int64_t timeout_ns, homa_msg *msg)
{
    return homa_dc_recv(s->dcs, flags, id, timeout_ns, msg);
}

static void hc_release(homa_socket *s, homa_msg *msg)
{
    homa_dc_release(s->dcs, msg);
}

static void *hc_msg_take(homa_socket *s, homa_msg *msg)
{
    return homa_dc_msg_take(s->dcs, msg);
}

static int hc_abort(homa_socket *s, uint64_t id)
{
    return homa_dc_abort(s->dcs, id);
}

const struct homa_rt_backend homa_rt_homad = {
    .name = "homad",
    .destroy = hc_destroy,
    .counters = hc_counters,
    .cutoffs = hc_cutoffs,
    .set_faults = hc_set_faults,
    .open = hc_open,
    .close = hc_close,
    .linger = hc_linger,
    .set_class = hc_set_class,
    .fd = hc_fd,
    .send = hc_send,
    .reply = hc_reply,
    .recv = hc_recv,
    .release = hc_release,
    .msg_take = hc_msg_take,
    .abort = hc_abort,
};
