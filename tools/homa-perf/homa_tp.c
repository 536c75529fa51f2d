/* homa-perf: the Homa transport, on the runtime API of homa/homa.h.
 *
 * Client: one Homa socket per client thread; all RPCs of the thread (the
 * --outstanding ones in closed-loop tests, every open-loop arrival in
 * workloads) are in flight on that socket at once.  All client sockets of a
 * process share one runtime (as all sockets of a host share the Linux
 * module), created on first use and destroyed with the last client.
 *
 * Server: its own runtime and one socket; `threads` threads each loop on
 * homa_recv(requests) and answer with homa_reply() carrying the request's
 * bytes (an echo, like the TCP server). */
#include "perf.h"

#include "cluster/cluster.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <homa/homa.h>

#define HELD_MAX 256
/* Largest message the server accepts (the client sets what it needs). */
#define SERVER_MAX_MESSAGE (64u << 20)
/* How often server threads look at the stop flag. */
#define SERVER_POLL_NS 50000000ll

int homa_perf_counters;
const char *homa_perf_config;
unsigned homa_perf_rt_flags;
int homa_perf_sched_class;

/* --class: gives the socket its scheduling class (nothing to do for 0). */
static int apply_class(homa_socket *s, char *err, size_t errlen)
{
    int rc = homa_perf_sched_class > 0 ? homa_socket_set_class(s, homa_perf_sched_class) : 0;
    if (rc < 0)
        snprintf(err, errlen, "homa_socket_set_class(%d): %s", homa_perf_sched_class,
                 homa_strerror(rc));
    return rc;
}

/* busy_poll_us < 0 keeps the runtime's default. */
static void runtime_options(homa_runtime_options *ro, uint32_t max_message, int busy_poll_us)
{
    homa_runtime_options_default(ro);
    if (busy_poll_us >= 0) ro->busy_poll_us = (uint32_t)busy_poll_us;
    if (max_message > ro->config.max_message_length) ro->config.max_message_length = max_message;
    ro->flags |= homa_perf_rt_flags;
    /* Checked when the command line was parsed. */
    char err[160];
    if (homa_perf_config) cluster_homa_apply(homa_perf_config, &ro->config, err, sizeof(err));
}

/* ---- Counters (--counters) -------------------------------------------- */

/* Prints the runtime's non-zero engine and driver counters to stderr, each
 * also per RPC (per completed response for a client, per request for a
 * server): system calls and wake-ups per RPC show where small-RPC time goes. */
static void dump_counters(homa_runtime *rt, const char *who)
{
    if (!homa_perf_counters || !rt) return;
    homa_counters e;
    homa_driver_counters d;
    homa_runtime_counters(rt, &e, &d);
    double n = (double)(strcmp(who, "client") == 0 ? e.client_completed : e.server_requests);
    fprintf(stderr, "homa-perf: %s runtime counters (value, per RPC):\n", who);
    const uint64_t *dv = (const uint64_t *)&d;
    for (size_t i = 0; i < homa_driver_counter_count(); i++)
        if (dv[i])
            fprintf(stderr, "  driver.%-22s %14llu %12.3f\n", homa_driver_counter_name(i),
                    (unsigned long long)dv[i], n > 0 ? (double)dv[i] / n : 0.0);
    const uint64_t *ev = (const uint64_t *)&e;
    for (size_t i = 0; i < homa_counter_count(); i++)
        if (ev[i])
            fprintf(stderr, "  engine.%-22s %14llu %12.3f\n", homa_counter_name(i),
                    (unsigned long long)ev[i], n > 0 ? (double)ev[i] / n : 0.0);
}

/* ---- Shared client runtime ------------------------------------------- */

static pthread_mutex_t client_rt_lock = PTHREAD_MUTEX_INITIALIZER;
static homa_runtime *client_rt;
static int client_rt_refs;

static int client_rt_get(int busy_poll_us, homa_runtime **out, char *err, size_t errlen)
{
    pthread_mutex_lock(&client_rt_lock);
    int rc = 0;
    if (!client_rt) {
        homa_runtime_options ro;
        runtime_options(&ro, SERVER_MAX_MESSAGE, busy_poll_us);
        rc = homa_runtime_create(&ro, &client_rt);
        if (rc < 0) {
            snprintf(err, errlen, "homa_runtime_create: %s", homa_strerror(rc));
            client_rt = NULL;
        }
    }
    if (rc == 0) {
        client_rt_refs++;
        *out = client_rt;
    }
    pthread_mutex_unlock(&client_rt_lock);
    return rc;
}

static void client_rt_put(void)
{
    pthread_mutex_lock(&client_rt_lock);
    if (--client_rt_refs == 0) {
        dump_counters(client_rt, "client");
        homa_runtime_destroy(client_rt);
        client_rt = NULL;
    }
    pthread_mutex_unlock(&client_rt_lock);
}

/* ---- Client ---------------------------------------------------------- */

typedef struct hclient {
    pt_client base;
    homa_socket *sock;
    homa_endpoint dst;
    homa_msg held[HELD_MAX]; /* returned by the last poll, released by the next */
    int nheld;
    /* Zero-copy closed loop (get_buf): each response's bytes are taken out
     * of libhoma (homa_msg_take) and become the next request of its slot
     * (homa_send_owned), so no payload is copied in user space. */
    int recycle;
    void **spare; /* per slot (= cookie): the last response, owned */
    size_t *spare_len;
    int nspare;
} hclient;

static int hclient_send(pt_client *base, int slot, uint64_t cookie, const void *buf, size_t len)
{
    (void)slot;
    hclient *c = (hclient *)base;
    return homa_send(c->sock, &c->dst, buf, len, cookie, NULL);
}

static int spare_grow(hclient *c, int slot)
{
    if (slot < c->nspare) return 0;
    int n = c->nspare ? c->nspare : 8;
    while (n <= slot)
        n *= 2;
    void **sp = realloc(c->spare, (size_t)n * sizeof(*sp));
    if (!sp) return -1;
    c->spare = sp;
    size_t *sl = realloc(c->spare_len, (size_t)n * sizeof(*sl));
    if (!sl) return -1;
    c->spare_len = sl;
    for (int i = c->nspare; i < n; i++) {
        c->spare[i] = NULL;
        c->spare_len[i] = 0;
    }
    c->nspare = n;
    return 0;
}

static void *hclient_get_buf(pt_client *base, int slot, size_t len)
{
    hclient *c = (hclient *)base;
    if (slot < 0 || spare_grow(c, slot) < 0) return NULL;
    c->recycle = 1;
    void *b = c->spare[slot];
    c->spare[slot] = NULL;
    if (b && c->spare_len[slot] == len) return b;
    free(b);
    /* A new buffer gets the bytes the copying path would send. */
    b = malloc(len ? len : 1);
    if (b) memset(b, 0x5a, len);
    return b;
}

static int hclient_send_buf(pt_client *base, int slot, uint64_t cookie, void *buf, size_t len)
{
    (void)slot;
    hclient *c = (hclient *)base;
    int rc = homa_send_owned(c->sock, &c->dst, buf, len, cookie, NULL);
    if (rc != 0) free(buf);
    return rc;
}

static void release_held(hclient *c)
{
    for (int i = 0; i < c->nheld; i++)
        homa_release(c->sock, &c->held[i]);
    c->nheld = 0;
}

static int hclient_poll(pt_client *base, uint64_t deadline, pt_completion *out, int max)
{
    hclient *c = (hclient *)base;
    release_held(c);
    if (max > HELD_MAX) max = HELD_MAX;
    int n = 0;
    while (n < max) {
        int64_t timeout = HOMA_NONBLOCK;
        if (n == 0) {
            uint64_t now = perf_now_ns();
            if (now >= deadline) break;
            timeout = (int64_t)(deadline - now);
        }
        homa_msg *m = &c->held[c->nheld];
        memset(m, 0, sizeof(*m));
        int rc = homa_recv(c->sock, HOMA_RECV_RESPONSE, 0, timeout, m);
        /* A slot that sent through get_buf has its spare entry already. */
        void *b = rc == 0 && c->recycle && m->cookie < (uint64_t)c->nspare
                      ? homa_msg_take(c->sock, m)
                      : NULL;
        if (b) {
            /* The bytes are ours now (they stay valid until the slot's next
             * get_buf): the message can go at once. */
            free(c->spare[m->cookie]);
            c->spare[m->cookie] = b;
            c->spare_len[m->cookie] = m->length;
            out[n].cookie = m->cookie;
            out[n].data = b;
            out[n].len = m->length;
            out[n].error = 0;
            homa_release(c->sock, m);
            n++;
        } else if (rc == 0) {
            c->nheld++;
            out[n].cookie = m->cookie;
            out[n].data = m->data;
            out[n].len = m->length;
            out[n].error = m->error;
            n++;
        } else if (m->id != 0) {
            /* A failed RPC: nothing to release. */
            out[n].cookie = m->cookie;
            out[n].data = NULL;
            out[n].len = 0;
            out[n].error = m->error ? m->error : rc;
            n++;
        } else if (rc == HOMA_ERR_AGAIN) {
            if (n > 0) break;
            if (perf_now_ns() >= deadline) break;
        } else {
            return n > 0 ? n : rc;
        }
    }
    return n;
}

static void hclient_destroy(pt_client *base)
{
    hclient *c = (hclient *)base;
    release_held(c);
    for (int i = 0; i < c->nspare; i++)
        free(c->spare[i]);
    free(c->spare);
    free(c->spare_len);
    homa_socket_close(c->sock);
    free(c);
    client_rt_put();
}

static const pt_client_ops hclient_ops = {
    .send = hclient_send,
    .get_buf = hclient_get_buf,
    .send_buf = hclient_send_buf,
    .poll = hclient_poll,
    .destroy = hclient_destroy,
};

int homa_client_create(const perf_addr *addr, int busy_poll_us, pt_client **out, char *err,
                       size_t errlen)
{
    hclient *c = calloc(1, sizeof(*c));
    if (!c) return -ENOMEM;
    c->base.ops = &hclient_ops;
    int rc = homa_endpoint_from_sockaddr((const struct sockaddr *)&addr->ss, addr->len, &c->dst);
    if (rc < 0) {
        snprintf(err, errlen, "homa: bad server address %s: %s", addr->host, homa_strerror(rc));
        free(c);
        return rc;
    }
    homa_runtime *rt = NULL;
    rc = client_rt_get(busy_poll_us, &rt, err, errlen);
    if (rc < 0) {
        free(c);
        return rc;
    }
    rc = homa_socket_open(rt, 0, &c->sock);
    if (rc < 0) {
        snprintf(err, errlen, "homa_socket_open: %s", homa_strerror(rc));
        free(c);
        client_rt_put();
        return rc;
    }
    if ((rc = apply_class(c->sock, err, errlen)) < 0) {
        homa_socket_close(c->sock);
        free(c);
        client_rt_put();
        return rc;
    }
    *out = &c->base;
    return 0;
}

/* ---- Server ---------------------------------------------------------- */

typedef struct hserver {
    pt_server base;
    homa_runtime *rt;
    homa_socket *sock;
    atomic_int stop;
    int nthreads;
    pthread_t *threads;
    uint8_t *zeros; /* --reply-size bytes */
} hserver;

static void *hserver_main(void *arg)
{
    hserver *s = arg;
    while (!atomic_load(&s->stop)) {
        homa_msg m;
        memset(&m, 0, sizeof(m));
        int rc = homa_recv(s->sock, HOMA_RECV_REQUEST, 0, SERVER_POLL_NS, &m);
        if (rc == HOMA_ERR_SHUTDOWN) break;
        if (rc < 0) continue;
        if (perf_reply_size >= 0) {
            /* --reply-size: an answer of that length (zeros), not an echo. */
            homa_reply_msg(s->sock, &m, s->zeros, (size_t)perf_reply_size);
            homa_release(s->sock, &m);
            continue;
        }
        /* Echo without copying: the request's buffer becomes the reply. */
        void *buf = homa_msg_take(s->sock, &m);
        if (buf == NULL)
            homa_reply_msg(s->sock, &m, m.data, m.length);
        else if (homa_reply_msg_owned(s->sock, &m, buf, m.length) != 0)
            free(buf);
        homa_release(s->sock, &m);
    }
    return NULL;
}

static uint16_t hserver_port(pt_server *base)
{
    return homa_socket_port(((hserver *)base)->sock);
}

static void hserver_stop(pt_server *base)
{
    hserver *s = (hserver *)base;
    atomic_store(&s->stop, 1);
    for (int i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    free(s->threads);
    dump_counters(s->rt, "server");
    if (s->sock) homa_socket_close(s->sock);
    if (s->rt) homa_runtime_destroy(s->rt);
    free(s->zeros);
    free(s);
}

static const pt_server_ops hserver_ops = {
    .port = hserver_port,
    .stop = hserver_stop,
};

int homa_server_start(uint16_t port, int threads, int busy_poll_us, pt_server **out, char *err,
                      size_t errlen)
{
    if (threads < 1) threads = 1;
    hserver *s = calloc(1, sizeof(*s));
    if (!s) return -ENOMEM;
    s->base.ops = &hserver_ops;
    s->threads = calloc((size_t)threads, sizeof(pthread_t));
    if (perf_reply_size >= 0) s->zeros = calloc(1, (size_t)perf_reply_size + 1);
    if (!s->threads || (perf_reply_size >= 0 && !s->zeros)) {
        hserver_stop(&s->base);
        return -ENOMEM;
    }
    homa_runtime_options ro;
    runtime_options(&ro, SERVER_MAX_MESSAGE, busy_poll_us);
    int rc = homa_runtime_create(&ro, &s->rt);
    if (rc < 0) {
        snprintf(err, errlen, "homa_runtime_create: %s", homa_strerror(rc));
        s->rt = NULL;
        hserver_stop(&s->base);
        return rc;
    }
    rc = homa_socket_open(s->rt, port, &s->sock);
    if (rc < 0) {
        snprintf(err, errlen, "homa_socket_open(port %u): %s", port, homa_strerror(rc));
        s->sock = NULL;
        hserver_stop(&s->base);
        return rc;
    }
    if ((rc = apply_class(s->sock, err, errlen)) < 0) {
        hserver_stop(&s->base);
        return rc;
    }
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&s->threads[i], NULL, hserver_main, s) != 0) {
            snprintf(err, errlen, "homa server: cannot start thread %d", i);
            hserver_stop(&s->base);
            return -ENOMEM;
        }
        s->nthreads++;
    }
    *out = &s->base;
    return 0;
}

int homa_default_busy_poll_us(void)
{
    homa_runtime_options ro;
    homa_runtime_options_default(&ro);
    return (int)ro.busy_poll_us;
}
