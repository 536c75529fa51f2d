/* homa-perf cluster: the Homa transport of the cluster agents.
 *
 * Unlike `homa-perf server` / `client` (homa_tp.c), where server and
 * clients have separate runtimes, an agent is one host: its echo server and
 * its client sockets share one runtime, so one engine does SRPT, grants and
 * pacing for everything the host sends and receives, as the kernel module
 * does for all sockets of a machine.  The runtime is configured for the
 * emulated link: max_payload from the link MTU, pacer at the link rate. */
#include "cluster.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HELD_MAX 256
#define SERVER_POLL_NS 50000000ll
/* IPv4 + UDP + Homa DATA header. */
#define DATA_OVERHEAD (20u + 8u + 56u)

/* ---- Engine tuning ---------------------------------------------------- */

int cluster_homa_apply(const char *spec, homa_config *cfg, char *err, size_t errlen)
{
    if (!spec || !*spec) return 0;
    char buf[1100];
    snprintf(buf, sizeof(buf), "%s", spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            snprintf(err, errlen, "--homa-config: '%s' is not key=value", item);
            return -1;
        }
        *eq = '\0';
        char *end;
        errno = 0;
        unsigned long long v = strtoull(eq + 1, &end, 10);
        if (errno || end == eq + 1 || *end || v > 0xffffffffull) {
            snprintf(err, errlen, "--homa-config: bad value for %s", item);
            return -1;
        }
        uint32_t u = (uint32_t)v;
        if (strcmp(item, "unsched_bytes") == 0)
            cfg->unsched_bytes = u;
        else if (strcmp(item, "grant_window") == 0)
            cfg->grant_window = u;
        else if (strcmp(item, "max_incoming") == 0)
            cfg->max_incoming = u;
        else if (strcmp(item, "max_overcommit") == 0)
            cfg->max_overcommit = u;
        else if (strcmp(item, "grant_fifo_permille") == 0)
            cfg->grant_fifo_permille = u;
        else if (strcmp(item, "num_priorities") == 0) {
            cfg->num_priorities = u;
            /* Levels that no longer exist carry no unscheduled traffic. */
            for (uint32_t i = u; i < 8; i++)
                cfg->unsched_cutoffs[i] = 0;
        } else if (strcmp(item, "adaptive_cutoffs") == 0)
            cfg->adaptive_cutoffs = u;
        else if (strcmp(item, "cutoff_update_msgs") == 0)
            cfg->cutoff_update_msgs = u;
        else if (strcmp(item, "resend_ticks") == 0)
            cfg->resend_ticks = u;
        else if (strcmp(item, "resend_interval") == 0)
            cfg->resend_interval = u;
        else if (strcmp(item, "timeout_ticks") == 0)
            cfg->timeout_ticks = u;
        else if (strcmp(item, "tick_us") == 0)
            cfg->tick_ns = (uint64_t)u * 1000;
        else if (strcmp(item, "max_nic_queue_ns") == 0)
            cfg->max_nic_queue_ns = u;
        else if (strcmp(item, "pacer_bypass_bytes") == 0)
            cfg->pacer_bypass_bytes = u;
        else if (strcmp(item, "gap_resend_ticks") == 0)
            cfg->gap_resend_ticks = u;
        else if (strcmp(item, "link_mbps") == 0)
            cfg->link_bps = (uint64_t)u * 1000000; /* pacer rate */
        else {
            snprintf(err, errlen, "--homa-config: unknown key '%s'", item);
            return -1;
        }
    }
    return 0;
}

int cluster_homa_runtime(const cluster_homa_rt_opts *o, homa_runtime **out, char *err,
                         size_t errlen)
{
    homa_runtime_options ro;
    homa_runtime_options_default(&ro);
    ro.mtu = o->mtu;
    ro.max_payload = o->mtu > DATA_OVERHEAD + 64 ? o->mtu - DATA_OVERHEAD : 64;
    ro.link_bps = o->link_bps;
    if (o->busy_poll_us >= 0) ro.busy_poll_us = (uint32_t)o->busy_poll_us;
    if (!o->gso) ro.flags |= HOMA_RT_NO_GSO;
    if (o->max_message > ro.config.max_message_length)
        ro.config.max_message_length = o->max_message;
    if (cluster_homa_apply(o->tuning, &ro.config, err, errlen) < 0) return HOMA_ERR_INVAL;
    const char *why = NULL;
    homa_config check = ro.config;
    check.max_payload = ro.max_payload;
    if (homa_config_validate(&check, &why) < 0) {
        snprintf(err, errlen, "homa config: %s", why ? why : "invalid");
        return HOMA_ERR_INVAL;
    }
    int rc = homa_runtime_create(&ro, out);
    if (rc < 0) snprintf(err, errlen, "homa_runtime_create: %s", homa_strerror(rc));
    return rc;
}

/* ---- Client ---------------------------------------------------------- */

typedef struct chclient {
    cluster_client base;
    homa_socket *sock;
    int serve;
    int npeers;
    homa_endpoint dst[CLUSTER_MAX_HOSTS];
    homa_msg held[HELD_MAX]; /* returned by the last poll, released by the next */
    int nheld;
} chclient;

static int chclient_send(cluster_client *base, int dst, uint64_t cookie, const void *buf,
                         size_t len)
{
    chclient *c = (chclient *)base;
    if (dst < 0 || dst >= c->npeers) return HOMA_ERR_INVAL;
    return homa_send(c->sock, &c->dst[dst], buf, len, cookie, NULL);
}

static void chclient_release(chclient *c)
{
    for (int i = 0; i < c->nheld; i++)
        homa_release(c->sock, &c->held[i]);
    c->nheld = 0;
}

static int chclient_poll(cluster_client *base, uint64_t deadline, pt_completion *out, int max)
{
    chclient *c = (chclient *)base;
    chclient_release(c);
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
        int rc = homa_recv(c->sock, c->serve ? HOMA_RECV_ANY : HOMA_RECV_RESPONSE, 0, timeout, m);
        if (rc == 0 && m->is_request) {
            /* Serving: echo the request, then keep waiting. */
            homa_reply_msg(c->sock, m, m->data, m->length);
            homa_release(c->sock, m);
            continue;
        }
        if (rc == 0) {
            c->nheld++;
            out[n].cookie = m->cookie;
            out[n].data = m->data;
            out[n].len = m->length;
            out[n].error = m->error;
            n++;
        } else if (m->id != 0) {
            out[n].cookie = m->cookie;
            out[n].data = NULL;
            out[n].len = 0;
            out[n].error = m->error ? m->error : rc;
            n++;
        } else if (rc == HOMA_ERR_AGAIN) {
            if (n > 0 || perf_now_ns() >= deadline) break;
        } else {
            return n > 0 ? n : rc;
        }
    }
    return n;
}

static void chclient_destroy(cluster_client *base)
{
    chclient *c = (chclient *)base;
    chclient_release(c);
    free(c);
}

static int chclient_start(cluster_client *base, char *err, size_t errlen)
{
    (void)base;
    (void)err;
    (void)errlen;
    return 0;
}

static const cluster_client_ops chclient_ops = {
    .start = chclient_start,
    .send = chclient_send,
    .poll = chclient_poll,
    .destroy = chclient_destroy,
};

int cluster_homa_client(homa_socket *sock, const perf_addr *peers, int npeers, int serve,
                        cluster_client **out, char *err, size_t errlen)
{
    if (npeers > CLUSTER_MAX_HOSTS) return HOMA_ERR_INVAL;
    chclient *c = calloc(1, sizeof(*c));
    if (!c) return HOMA_ERR_NOMEM;
    c->base.ops = &chclient_ops;
    c->sock = sock;
    c->serve = serve;
    c->npeers = npeers;
    for (int i = 0; i < npeers; i++) {
        int rc = homa_endpoint_from_sockaddr((const struct sockaddr *)&peers[i].ss, peers[i].len,
                                             &c->dst[i]);
        if (rc < 0) {
            snprintf(err, errlen, "homa client: bad address %s: %s", peers[i].host,
                     homa_strerror(rc));
            free(c);
            return rc;
        }
    }
    *out = &c->base;
    return 0;
}

/* ---- Server ---------------------------------------------------------- */

typedef struct chserver {
    pt_server base;
    homa_socket *sock;
    atomic_int stop;
    int nthreads;
    pthread_t threads[64];
} chserver;

static void *chserver_main(void *arg)
{
    chserver *s = arg;
    while (!atomic_load(&s->stop)) {
        homa_msg m;
        memset(&m, 0, sizeof(m));
        int rc = homa_recv(s->sock, HOMA_RECV_REQUEST, 0, SERVER_POLL_NS, &m);
        if (rc == HOMA_ERR_SHUTDOWN) break;
        if (rc < 0) continue;
        homa_reply_msg(s->sock, &m, m.data, m.length);
        homa_release(s->sock, &m);
    }
    return NULL;
}

static uint16_t chserver_port(pt_server *base)
{
    return homa_socket_port(((chserver *)base)->sock);
}

static void chserver_stop(pt_server *base)
{
    chserver *s = (chserver *)base;
    atomic_store(&s->stop, 1);
    for (int i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    free(s);
}

static const pt_server_ops chserver_ops = {
    .port = chserver_port,
    .stop = chserver_stop,
};

int cluster_homa_server(homa_socket *sock, int threads, pt_server **out, char *err, size_t errlen)
{
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    chserver *s = calloc(1, sizeof(*s));
    if (!s) return -ENOMEM;
    s->base.ops = &chserver_ops;
    s->sock = sock;
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&s->threads[i], NULL, chserver_main, s) != 0) {
            snprintf(err, errlen, "homa server: cannot start thread %d", i);
            chserver_stop(&s->base);
            return -ENOMEM;
        }
        s->nthreads++;
    }
    *out = &s->base;
    return 0;
}

/* ---- Schedule ---------------------------------------------------------- */

long cluster_sched_make(const wlgen *g, uint64_t seed, int agent, int procs, int agents,
                        double req_bps, uint64_t end_ns, cluster_msg **out)
{
    *out = NULL;
    if (procs < 1 || agents < 2 * procs || req_bps <= 0) return 0;
    int first = agent / procs * procs; /* this host's first agent */
    perf_rng rng;
    /* Stream 1000 + agent: distinct from the client threads' streams. */
    rng_seed(&rng, seed, 1000u + (uint64_t)agent);
    double mean_gap = 1e9 / (req_bps / 8.0 / g->mean);
    size_t cap = 1024, n = 0;
    cluster_msg *m = malloc(cap * sizeof(*m));
    if (!m) return -1;
    double t = rng_exp(&rng, mean_gap);
    while (t < (double)end_ns) {
        if (n == cap) {
            cap *= 2;
            cluster_msg *nm = realloc(m, cap * sizeof(*m));
            if (!nm) {
                free(m);
                return -1;
            }
            m = nm;
        }
        uint32_t size = wlgen_sample(g, &rng);
        int d = (int)(rng_next(&rng) % (uint64_t)(agents - procs));
        if (d >= first) d += procs;
        m[n].t_ns = (uint64_t)t;
        m[n].size = size;
        m[n].dst = (uint16_t)d;
        m[n].pad = 0;
        n++;
        t += rng_exp(&rng, mean_gap);
    }
    *out = m;
    return (long)n;
}
