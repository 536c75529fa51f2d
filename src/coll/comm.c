/* Communicators, the file rendezvous and the message loop that every
 * collective runs on (see docs/collectives.md).
 *
 * Transport model: each data transfer is one Homa request (header +
 * payload) to the peer's communicator socket; the peer answers with an
 * empty response once it has consumed the data.  A sender keeps at most
 * `window` unanswered requests per peer, so a receiver that is behind
 * holds at most `window` requests per peer, unanswered, until it catches
 * up: memory stays bounded without any extra flow control.  Requests are
 * consumed as soon as the algorithm can use them; the algorithms are
 * written so that consuming never waits for sending room, which keeps
 * rings free of buffer deadlocks. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coll/coll_internal.h"

#define COLL_MAX_RANKS 4096
#define COLL_MAX_WINDOW 1024
/* A request may belong to a later call than the current one (a peer that
 * finished sooner); anything further ahead than this is garbage. */
#define COLL_MAX_AHEAD 1024
/* Longest single wait in homa_recv, so the no-progress clock is checked. */
#define COLL_WAIT_STEP_NS 100000000ll
#define COLL_RDV_MAX_FILE (4u << 20)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- header */

static inline void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}
static inline uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

void coll_hdr_encode(uint8_t *b, const struct coll_hdr *h)
{
    put32(b + 0, h->magic);
    b[4] = h->version;
    b[5] = h->kind;
    b[6] = h->dtype;
    b[7] = h->op;
    put32(b + 8, h->comm_id);
    put32(b + 12, h->src);
    put64(b + 16, h->seq);
    put64(b + 24, h->count);
    put64(b + 32, h->offset);
    put32(b + 40, h->step);
    put32(b + 44, h->chunk);
    put32(b + 48, h->length);
    put32(b + 52, h->root);
    put32(b + 56, h->nranks);
    put32(b + 60, h->zero);
}

void coll_hdr_decode(const uint8_t *b, struct coll_hdr *h)
{
    h->magic = get32(b + 0);
    h->version = b[4];
    h->kind = b[5];
    h->dtype = b[6];
    h->op = b[7];
    h->comm_id = get32(b + 8);
    h->src = get32(b + 12);
    h->seq = get64(b + 16);
    h->count = get64(b + 24);
    h->offset = get64(b + 32);
    h->step = get32(b + 40);
    h->chunk = get32(b + 44);
    h->length = get32(b + 48);
    h->root = get32(b + 52);
    h->nranks = get32(b + 56);
    h->zero = get32(b + 60);
}

/* ---------------------------------------------------------- communicator */

void homa_comm_options_default(homa_comm_options *opts)
{
    if (opts == NULL) return;
    memset(opts, 0, sizeof(*opts));
    opts->timeout_ms = 30000;
    opts->chunk_bytes = 1u << 20;
    opts->window = 4;
    opts->small_bytes = 64u << 10;
    opts->runtime = NULL;
}

static int opts_valid(const homa_comm_options *o)
{
    return o->timeout_ms >= 1 && o->chunk_bytes >= 8 && o->window >= 1 &&
           o->window <= COLL_MAX_WINDOW;
}

static int ep_cmp(const void *a, const void *b)
{
    const homa_endpoint *x = a, *y = b;
    int c = memcmp(&x->addr, &y->addr, sizeof(x->addr));
    if (c != 0) return c;
    return (int)x->port - (int)y->port;
}

/* FNV-1a over the rank count and the endpoints: ranks built from the same
 * list agree on it, so requests of another job or communicator are told
 * apart. */
static uint32_t comm_hash(int nranks, const homa_endpoint *eps)
{
    uint32_t h = 2166136261u;
    uint8_t b[4];
    put32(b, (uint32_t)nranks);
    for (int i = 0; i < 4; i++)
        h = (h ^ b[i]) * 16777619u;
    for (int r = 0; r < nranks; r++) {
        for (int i = 0; i < 16; i++)
            h = (h ^ eps[r].addr.bytes[i]) * 16777619u;
        h = (h ^ (eps[r].port & 0xffu)) * 16777619u;
        h = (h ^ (eps[r].port >> 8)) * 16777619u;
    }
    return h;
}

/* Checks rank/nranks and fills *o from opts (NULL = defaults); 0 if
 * any of it is invalid. */
static int create_args(int rank, int nranks, const homa_comm_options *opts, homa_comm_options *o)
{
    if (nranks < 1 || nranks > COLL_MAX_RANKS || rank < 0 || rank >= nranks) return 0;
    if (opts != NULL)
        *o = *opts;
    else
        homa_comm_options_default(o);
    return opts_valid(o);
}

int homa_comm_create(homa_socket *self, int rank, int nranks, const homa_endpoint *endpoints,
                     const homa_comm_options *opts, homa_comm **out)
{
    if (out != NULL) *out = NULL;
    homa_comm_options o;
    if (self == NULL || endpoints == NULL || out == NULL || !create_args(rank, nranks, opts, &o))
        return HOMA_ERR_INVAL;
    if (endpoints[rank].port != homa_socket_port(self)) return HOMA_ERR_INVAL;
    for (int i = 0; i < nranks; i++)
        if (endpoints[i].port == 0) return HOMA_ERR_INVAL;

    /* Messages must fit the engine's largest message. */
    const homa_config *cfg = homa_runtime_config(homa_socket_runtime(self));
    uint32_t chunk = o.chunk_bytes;
    if (cfg != NULL && cfg->max_message_length < (uint64_t)chunk + COLL_HDR_SIZE)
        chunk =
            cfg->max_message_length > COLL_HDR_SIZE ? cfg->max_message_length - COLL_HDR_SIZE : 0;
    chunk &= ~7u; /* a whole number of elements of every dtype */
    if (chunk < 8) return HOMA_ERR_INVAL;

    homa_comm *c = calloc(1, sizeof(*c));
    if (c == NULL) return HOMA_ERR_NOMEM;
    c->eps = malloc((size_t)nranks * sizeof(*c->eps));
    c->peers = calloc((size_t)nranks, sizeof(*c->peers));
    c->active = malloc((size_t)nranks * sizeof(*c->active));
    c->held_per_src = calloc((size_t)nranks, sizeof(*c->held_per_src));
    homa_endpoint *sorted = malloc((size_t)nranks * sizeof(*sorted));
    int rc = 0;
    if (c->eps == NULL || c->peers == NULL || c->active == NULL || c->held_per_src == NULL ||
        sorted == NULL) {
        rc = HOMA_ERR_NOMEM;
        goto fail;
    }
    memcpy(c->eps, endpoints, (size_t)nranks * sizeof(*c->eps));
    /* Two ranks on one endpoint could never be told apart. */
    memcpy(sorted, endpoints, (size_t)nranks * sizeof(*sorted));
    qsort(sorted, (size_t)nranks, sizeof(*sorted), ep_cmp);
    for (int i = 1; i < nranks; i++)
        if (ep_cmp(&sorted[i - 1], &sorted[i]) == 0) rc = HOMA_ERR_INVAL;
    free(sorted);
    sorted = NULL;
    if (rc != 0) goto fail;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        rc = HOMA_ERR_NOMEM;
        goto fail;
    }
    c->sock = self;
    c->rank = rank;
    c->nranks = nranks;
    c->comm_id = comm_hash(nranks, endpoints);
    c->timeout_ms = o.timeout_ms;
    c->chunk_bytes = chunk;
    c->window = o.window;
    c->small_bytes = o.small_bytes;
    c->seq = 1;
    *out = c;
    return 0;
fail:
    free(sorted);
    free(c->eps);
    free(c->peers);
    free(c->active);
    free(c->held_per_src);
    free(c);
    return rc;
}

/* Gives up every request in flight, every queued send and every held
 * request: used when the communicator breaks and on destroy. */
static void comm_abandon(homa_comm *c)
{
    for (size_t i = 0; i < c->nrpcs; i++)
        homa_abort(c->sock, c->rpcs[i]);
    c->nrpcs = 0;
    for (int p = 0; p < c->nranks; p++) {
        struct coll_peer *pe = &c->peers[p];
        for (size_t i = 0; i < pe->n; i++)
            free(pe->q[(pe->head + i) % pe->cap].owned);
        pe->head = pe->n = 0;
        pe->inflight = 0;
        pe->listed = 0;
    }
    c->nactive = 0;
    for (size_t i = 0; i < c->nheld; i++) {
        /* Never answered: the sender sees its peer give up, not success. */
        homa_abort(c->sock, c->held[i].msg.id);
        homa_release(c->sock, &c->held[i].msg);
        c->held_per_src[c->held[i].hdr.src] = 0;
    }
    c->nheld = 0;
}

void homa_comm_destroy(homa_comm *comm)
{
    if (comm == NULL) return;
    /* After a clean finish, keep the socket open until our replies are
     * acknowledged: a peer whose last reply was lost asks again, and only
     * an open socket can answer (the engine retransmits it).  Not after a
     * failure or with unanswered messages held: those RPCs live until
     * their clients give up, so the wait would only run out. */
    int linger = !comm->broken && comm->nheld == 0;
    comm_abandon(comm);
    if (linger) {
        /* Bounded: a peer that closed first never acknowledges, and a lost
         * reply is asked for again within a few resend intervals. */
        uint32_t ms = comm->timeout_ms < 200 ? comm->timeout_ms : 200;
        (void)homa_socket_linger(comm->sock, (int64_t)ms * 1000000);
    }
    if (comm->owns_sock) homa_socket_close(comm->sock);
    for (int p = 0; p < comm->nranks; p++)
        free(comm->peers[p].q);
    pthread_mutex_destroy(&comm->lock);
    free(comm->eps);
    free(comm->peers);
    free(comm->active);
    free(comm->held_per_src);
    free(comm->held);
    free(comm->rpcs);
    free(comm);
}

int homa_comm_rank(const homa_comm *comm)
{
    return comm ? comm->rank : HOMA_ERR_INVAL;
}

int homa_comm_size(const homa_comm *comm)
{
    return comm ? comm->nranks : HOMA_ERR_INVAL;
}

homa_socket *homa_comm_socket(homa_comm *comm)
{
    return comm ? comm->sock : NULL;
}

/* ------------------------------------------------------------ rendezvous */

/* Parses the rendezvous file: lines "rank endpoint\n"; a last line without
 * its newline is still being written and is ignored.  Fills eps/have and
 * *nhave.  HOMA_ERR_INVAL for a malformed line, a rank out of range or a
 * rank listed twice. */
static int rdv_read(const char *path, int nranks, homa_endpoint *eps, uint8_t *have, int *nhave)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return HOMA_ERR_IO;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    int rc = 0;
    while (buf != NULL) {
        if (len == cap) {
            if (cap >= COLL_RDV_MAX_FILE) {
                rc = HOMA_ERR_INVAL;
                break;
            }
            char *nb = realloc(buf, cap * 2 + 1);
            if (nb == NULL) break;
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0) {
            if (errno == EINTR) continue;
            rc = HOMA_ERR_IO;
            break;
        }
        if (n == 0) break;
        len += (size_t)n;
    }
    close(fd);
    if (buf == NULL) return HOMA_ERR_NOMEM;
    if (rc != 0) {
        free(buf);
        return rc;
    }
    memset(have, 0, (size_t)nranks);
    *nhave = 0;
    size_t pos = 0;
    while (pos < len) {
        char *nl = memchr(buf + pos, '\n', len - pos);
        if (nl == NULL) break; /* partial line */
        *nl = '\0';
        char *line = buf + pos;
        pos = (size_t)(nl - buf) + 1;
        while (*line == ' ' || *line == '\t' || *line == '\r')
            line++;
        if (*line == '\0') continue;
        char *end;
        errno = 0;
        long rk = strtol(line, &end, 10);
        if (end == line || errno != 0 || (*end != ' ' && *end != '\t')) {
            rc = HOMA_ERR_INVAL;
            break;
        }
        while (*end == ' ' || *end == '\t')
            end++;
        char *tok = end;
        while (*end != '\0' && *end != ' ' && *end != '\t' && *end != '\r')
            end++;
        *end = '\0';
        homa_endpoint ep;
        if (rk < 0 || rk >= nranks || *tok == '\0' || homa_endpoint_parse(tok, &ep) != 0 ||
            ep.port == 0) {
            rc = HOMA_ERR_INVAL;
            break;
        }
        if (have[rk]) { /* two processes claim one rank */
            rc = HOMA_ERR_INVAL;
            break;
        }
        have[rk] = 1;
        eps[rk] = ep;
        (*nhave)++;
    }
    free(buf);
    return rc;
}

int homa_comm_create_file(const char *path, int rank, int nranks, const homa_endpoint *local,
                          const homa_comm_options *opts, homa_comm **out)
{
    if (out != NULL) *out = NULL;
    homa_comm_options o;
    if (path == NULL || local == NULL || out == NULL || !create_args(rank, nranks, opts, &o))
        return HOMA_ERR_INVAL;
    /* Other ranks must be able to reach the address written to the file:
     * not the wildcard (:: or 0.0.0.0). */
    static const uint8_t any4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0};
    static const homa_addr any6;
    if (memcmp(&local->addr, &any6, sizeof(any6)) == 0 ||
        memcmp(local->addr.bytes, any4, sizeof(any4)) == 0)
        return HOMA_ERR_INVAL;

    homa_socket *s;
    int rc = homa_socket_bind(o.runtime, local, &s);
    if (rc != 0) return rc;
    homa_endpoint me;
    homa_socket_local(s, &me);
    char epstr[HOMA_ENDPOINT_STRLEN];
    char line[HOMA_ENDPOINT_STRLEN + 32];
    homa_endpoint *eps = calloc((size_t)nranks, sizeof(*eps));
    uint8_t *have = calloc((size_t)nranks, 1);
    if (eps == NULL || have == NULL) {
        rc = HOMA_ERR_NOMEM;
        goto out;
    }
    if (homa_endpoint_format(&me, epstr, sizeof(epstr)) < 0) {
        rc = HOMA_ERR_INVAL;
        goto out;
    }
    int len = snprintf(line, sizeof(line), "%d %s\n", rank, epstr);
    /* O_APPEND and one write() per line: concurrent ranks never interleave
     * their lines (a reader may see a line still incomplete, and skips it). */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = HOMA_ERR_IO;
        goto out;
    }
    ssize_t w;
    do
        w = write(fd, line, (size_t)len);
    while (w < 0 && errno == EINTR);
    if (close(fd) != 0 || w != len) {
        rc = HOMA_ERR_IO;
        goto out;
    }
    uint64_t deadline = now_ns() + (uint64_t)o.timeout_ms * 1000000ull;
    for (;;) {
        int nhave = 0;
        rc = rdv_read(path, nranks, eps, have, &nhave);
        if (rc != 0) goto out;
        if (nhave == nranks) break;
        if (now_ns() >= deadline) {
            rc = HOMA_ERR_TIMEOUT;
            goto out;
        }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    if (!homa_endpoint_equal(&eps[rank], &me)) {
        rc = HOMA_ERR_INVAL;
        goto out;
    }
    rc = homa_comm_create(s, rank, nranks, eps, &o, out);
    if (rc == 0) (*out)->owns_sock = 1;
out:
    free(eps);
    free(have);
    if (rc != 0) homa_socket_close(s);
    return rc;
}

/* ------------------------------------------------------------- transport */

static const uint8_t empty_reply;

/* Answers a request and gives its memory back.  The answer tells the
 * sender its data was taken (or that it was garbage: either way it must
 * not wait); reply errors only mean the sender already gave up. */
static void answer(homa_comm *c, homa_msg *m)
{
    homa_reply_msg(c->sock, m, &empty_reply, 0);
    homa_release(c->sock, m);
}

static void drop(homa_comm *c, homa_msg *m)
{
    c->dropped++;
    answer(c, m);
}

uint32_t coll_nchunks(const struct coll_run *r, uint64_t elems)
{
    if (elems == 0) return 1;
    uint64_t n = (elems + r->chunk_elems - 1) / r->chunk_elems;
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

int coll_mark_seen(struct coll_run *r, uint32_t step, uint32_t chunk)
{
    if (step >= r->nsteps || chunk >= r->nchunks || r->seen == NULL) return -1;
    uint64_t bit = (uint64_t)step * r->nchunks + chunk;
    uint8_t mask = (uint8_t)(1u << (bit & 7));
    if (r->seen[bit >> 3] & mask) return -1;
    r->seen[bit >> 3] |= mask;
    return 0;
}

int coll_enqueue(struct coll_run *r, int dst, uint32_t step, uint32_t chunk, uint64_t offset,
                 const uint8_t *src, uint8_t *owned, size_t len)
{
    homa_comm *c = r->c;
    struct coll_peer *p = &c->peers[dst];
    if (p->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 16;
        struct coll_send *nq = malloc(ncap * sizeof(*nq));
        if (nq == NULL) {
            free(owned);
            return HOMA_ERR_NOMEM;
        }
        for (size_t i = 0; i < p->n; i++)
            nq[i] = p->q[(p->head + i) % p->cap];
        free(p->q);
        p->q = nq;
        p->cap = ncap;
        p->head = 0;
    }
    struct coll_send *e = &p->q[(p->head + p->n) % p->cap];
    e->step = step;
    e->chunk = chunk;
    e->offset = offset;
    e->len = len;
    e->src = src;
    e->owned = owned;
    p->n++;
    if (!p->listed) {
        p->listed = 1;
        c->active[c->nactive++] = dst;
    }
    return 0;
}

/* Sends one queued message.  The header is written here, into room the
 * buffer keeps in front of the payload, so forwarded messages (taken from
 * the engine) need no copy. */
static int issue(struct coll_run *r, int dst, struct coll_send *e)
{
    homa_comm *c = r->c;
    if (c->nrpcs == c->cap_rpcs) {
        size_t ncap = c->cap_rpcs ? c->cap_rpcs * 2 : 64;
        uint64_t *n = realloc(c->rpcs, ncap * sizeof(*n));
        if (n == NULL) return HOMA_ERR_NOMEM;
        c->rpcs = n;
        c->cap_rpcs = ncap;
    }
    uint8_t *buf = e->owned;
    if (buf == NULL) {
        buf = malloc(COLL_HDR_SIZE + e->len);
        if (buf == NULL) return HOMA_ERR_NOMEM;
        if (e->len > 0) memcpy(buf + COLL_HDR_SIZE, e->src, e->len);
    }
    struct coll_hdr h = {
        .magic = COLL_MAGIC,
        .version = COLL_VERSION,
        .kind = r->kind,
        .dtype = r->dtype,
        .op = r->op,
        .comm_id = c->comm_id,
        .src = (uint32_t)c->rank,
        .seq = r->seq,
        .count = r->count,
        .offset = e->offset,
        .step = e->step,
        .chunk = e->chunk,
        .length = (uint32_t)e->len,
        .root = r->root,
        .nranks = (uint32_t)c->nranks,
        .zero = 0,
    };
    coll_hdr_encode(buf, &h);
    uint64_t id = 0;
    int rc =
        homa_send_owned(c->sock, &c->eps[dst], buf, COLL_HDR_SIZE + e->len, (uint64_t)dst, &id);
    if (rc != 0) {
        /* On error the buffer is still ours; the queue entry must not
         * free it a second time. */
        free(buf);
        e->owned = NULL;
        return rc;
    }
    e->owned = NULL;
    c->rpcs[c->nrpcs++] = id;
    c->peers[dst].inflight++;
    return 0;
}

/* Sends what the windows allow, peer by peer. */
static int pump(struct coll_run *r)
{
    homa_comm *c = r->c;
    size_t i = 0;
    while (i < c->nactive) {
        int dst = c->active[i];
        struct coll_peer *p = &c->peers[dst];
        while (p->n > 0 && p->inflight < c->window) {
            struct coll_send *e = &p->q[p->head];
            int rc = issue(r, dst, e);
            if (rc != 0) return rc;
            p->head = (p->head + 1) % p->cap;
            p->n--;
        }
        if (p->n == 0) {
            p->listed = 0;
            c->active[i] = c->active[--c->nactive];
        } else {
            i++;
        }
    }
    return 0;
}

/* A response to one of our requests: the peer took the data. */
static int on_response(homa_comm *c, homa_msg *m)
{
    for (size_t i = 0; i < c->nrpcs; i++) {
        if (c->rpcs[i] != m->id) continue;
        c->rpcs[i] = c->rpcs[--c->nrpcs];
        if (m->cookie < (uint64_t)c->nranks && c->peers[m->cookie].inflight > 0)
            c->peers[m->cookie].inflight--;
        homa_release(c->sock, m);
        return 1;
    }
    homa_release(c->sock, m); /* not ours (an aborted RPC): ignore */
    return 0;
}

/* Checks everything in a request that does not depend on the algorithm's
 * state.  Returns 0 and fills *h if it may be ours. */
static int check_request(homa_comm *c, const homa_msg *m, struct coll_hdr *h)
{
    if (m->data == NULL || m->length < COLL_HDR_SIZE) return -1;
    coll_hdr_decode(m->data, h);
    if (h->magic != COLL_MAGIC || h->version != COLL_VERSION || h->comm_id != c->comm_id ||
        h->nranks != (uint32_t)c->nranks || h->zero != 0)
        return -1;
    if (h->src >= (uint32_t)c->nranks || h->src == (uint32_t)c->rank) return -1;
    /* The sender must be the socket of the rank it claims to be. */
    if (m->peer_port != c->eps[h->src].port) return -1;
    if ((uint64_t)h->length != m->length - COLL_HDR_SIZE) return -1;
    return 0;
}

static int hold(homa_comm *c, homa_msg *m, const struct coll_hdr *h)
{
    /* An honest sender has at most `window` unanswered requests to us. */
    if (c->held_per_src[h->src] >= c->window) return -1;
    if (c->nheld == c->cap_held) {
        size_t ncap = c->cap_held ? c->cap_held * 2 : 16;
        struct coll_held *n = realloc(c->held, ncap * sizeof(*n));
        if (n == NULL) return -1;
        c->held = n;
        c->cap_held = ncap;
    }
    c->held[c->nheld].msg = *m;
    c->held[c->nheld].hdr = *h;
    c->nheld++;
    c->held_per_src[h->src]++;
    return 0;
}

/* Handles one incoming request.  Returns 1 if it made progress, 0 if not,
 * <0 if the call must fail with that error (a local error, or a peer's
 * notice that its communicator broke). */
static int on_request(struct coll_run *r, homa_msg *m)
{
    homa_comm *c = r->c;
    struct coll_hdr h;
    if (check_request(c, m, &h) != 0) {
        drop(c, m);
        return 0;
    }
    if (h.kind == COLL_K_ABORT) {
        if (h.seq <= r->seq) { /* this call (or an earlier one) cannot complete */
            answer(c, m);
            return HOMA_ERR_TIMEOUT;
        }
        if (h.seq - r->seq <= COLL_MAX_AHEAD && hold(c, m, &h) == 0) return 0;
        drop(c, m);
        return 0;
    }
    if (h.seq == r->seq) {
        int res = r->on_msg(r, &h, m);
        if (res < 0) {
            homa_release(c->sock, m);
            return res;
        }
        if (res == COLL_TAKEN) {
            answer(c, m);
            r->dirty = 1;
            return 1;
        }
        if (res == COLL_HOLD && hold(c, m, &h) == 0) return 0;
        drop(c, m);
        return 0;
    }
    if (h.seq > r->seq && h.seq - r->seq <= COLL_MAX_AHEAD && hold(c, m, &h) == 0) return 0;
    drop(c, m);
    return 0;
}

/* Offers the held requests of this call to the algorithm again. */
static int scan_held(struct coll_run *r, int *progress)
{
    homa_comm *c = r->c;
    while (r->dirty) {
        r->dirty = 0;
        size_t i = 0;
        while (i < c->nheld) {
            struct coll_held *hd = &c->held[i];
            if (hd->hdr.kind == COLL_K_ABORT && hd->hdr.seq <= r->seq) {
                homa_msg m = hd->msg;
                c->held_per_src[hd->hdr.src]--;
                memmove(&c->held[i], &c->held[i + 1], (c->nheld - i - 1) * sizeof(*c->held));
                c->nheld--;
                answer(c, &m);
                return HOMA_ERR_TIMEOUT;
            }
            if (hd->hdr.seq != r->seq) {
                i++;
                continue;
            }
            int res = r->on_msg(r, &hd->hdr, &hd->msg);
            if (res == COLL_HOLD) {
                i++;
                continue;
            }
            homa_msg m = hd->msg;
            c->held_per_src[hd->hdr.src]--;
            memmove(&c->held[i], &c->held[i + 1], (c->nheld - i - 1) * sizeof(*c->held));
            c->nheld--;
            if (res < 0) {
                homa_release(c->sock, &m);
                return res;
            }
            if (res == COLL_TAKEN) {
                answer(c, &m);
                r->dirty = 1;
                *progress = 1;
            } else {
                drop(c, &m);
            }
        }
    }
    return 0;
}

/* Tells ranks rank + 2^k that this communicator broke during call seq.
 * Each rank that breaks does the same once, so the news reaches every rank
 * within log2(n) hops at a cost of log2(n) messages per rank.  The RPCs
 * stay listed so that homa_comm_destroy() aborts whatever is left. */
static void notify_abort(homa_comm *c, uint64_t seq)
{
    for (int k = 1; k < c->nranks; k <<= 1) {
        if (c->nrpcs == c->cap_rpcs) {
            size_t ncap = c->cap_rpcs ? c->cap_rpcs * 2 : 64;
            uint64_t *n = realloc(c->rpcs, ncap * sizeof(*n));
            if (n == NULL) return;
            c->rpcs = n;
            c->cap_rpcs = ncap;
        }
        uint8_t *buf = malloc(COLL_HDR_SIZE);
        if (buf == NULL) return;
        struct coll_hdr h = {
            .magic = COLL_MAGIC,
            .version = COLL_VERSION,
            .kind = COLL_K_ABORT,
            .comm_id = c->comm_id,
            .src = (uint32_t)c->rank,
            .seq = seq,
            .nranks = (uint32_t)c->nranks,
        };
        coll_hdr_encode(buf, &h);
        int dst = (c->rank + k) % c->nranks;
        uint64_t id = 0;
        if (homa_send_owned(c->sock, &c->eps[dst], buf, COLL_HDR_SIZE, (uint64_t)dst, &id) != 0) {
            free(buf);
            continue;
        }
        c->rpcs[c->nrpcs++] = id;
    }
}

int coll_fail(struct coll_run *r, int err)
{
    r->c->broken = 1;
    comm_abandon(r->c);
    notify_abort(r->c, r->seq);
    return err;
}

int coll_run_loop(struct coll_run *r)
{
    homa_comm *c = r->c;
    const uint64_t limit = (uint64_t)c->timeout_ms * 1000000ull;
    uint64_t last = now_ns();
    c->seq = r->seq + 1;
    r->dirty = 1;
    for (;;) {
        int rc = r->advance ? r->advance(r) : 0;
        if (rc == 0) rc = pump(r);
        int progress = 0;
        if (rc == 0) rc = scan_held(r, &progress);
        if (rc < 0) return coll_fail(r, rc);
        if (progress) {
            last = now_ns();
            continue;
        }
        if (r->recv_done && c->nactive == 0 && c->nrpcs == 0) return 0;
        uint64_t now = now_ns();
        if (now - last >= limit) return coll_fail(r, HOMA_ERR_TIMEOUT);
        int64_t wait = (int64_t)(last + limit - now);
        if (wait > COLL_WAIT_STEP_NS) wait = COLL_WAIT_STEP_NS;
        homa_msg m;
        rc = homa_recv(c->sock, HOMA_RECV_ANY, 0, wait, &m);
        if (rc == HOMA_ERR_AGAIN) continue;
        if (rc != 0) return coll_fail(r, rc); /* a failed RPC (m.id set) or the socket closed */
        if (!m.is_request) {
            if (on_response(c, &m)) last = now_ns();
            continue;
        }
        rc = on_request(r, &m);
        if (rc < 0) return coll_fail(r, rc);
        if (rc > 0) last = now_ns();
    }
}

int coll_begin(homa_comm *c, struct coll_run *r)
{
    pthread_mutex_lock(&c->lock);
    if (c->broken) {
        pthread_mutex_unlock(&c->lock);
        return HOMA_ERR_STATE;
    }
    r->c = c;
    /* Taken for good by coll_run_loop: a call that sends nothing (count 0,
     * one rank) does not count, so such calls need not match across ranks. */
    r->seq = c->seq;
    if (r->esize == 0) r->esize = 1;
    r->chunk_elems = c->chunk_bytes / r->esize;
    return 0;
}

void coll_end(struct coll_run *r)
{
    free(r->seen);
    free(r->got);
    r->seen = NULL;
    r->got = NULL;
    pthread_mutex_unlock(&r->c->lock);
}
