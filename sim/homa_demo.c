/* homa-demo: Homa on a virtual datacenter network, in a few seconds.
 *
 * Every host runs the real libhoma engine (sim/vhost.c) on the
 * deterministic virtual network (sim/vnet.c): 16 hosts on one switch with
 * 8 strict-priority queues, 10 Gb/s links.  Part 1 offers a Poisson W4
 * workload at 70 % load with 1 % packet loss and prints per-size latency and
 * slowdown, first with Homa's 8 priority levels, then with a single level,
 * from the same seed.  Part 2 shows a one-packet message overtaking a 10 MB
 * transfer to the same receiver.
 *
 * Usage: homa-demo [--workload wN] [--load F] [--hosts N] [--ms T]
 *                  [--loss P] [--seed S] [--data DIR]
 * Part 2 repeats part 1a with 1 % loss to show recovery. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <homa/engine.h>
#include <homa/workload.h>

#include "vhost.h"
#include "vnet.h"

#define SERVER_PORT 100
#define CLIENT_PORT 200
#define MAX_HOSTS 64
#define REPLY_LEN 100

struct rec {
    uint32_t len;
    uint64_t start, done;
    int err;
};

struct demo {
    struct vnet *net;
    struct vhost *h[MAX_HOSTS];
    int n;
    uint64_t link_bps;
    struct rec *recs;
    int nrecs, cap;
    int done, failed;
    uint8_t *buf;
};

struct opts {
    const char *workload;
    double load;
    int hosts;
    double ms;
    double loss;
    uint64_t seed;
    const char *data;
};

static void on_ready(struct vhost *h, uint16_t port, void *app)
{
    struct demo *d = app;
    uint64_t now = vnet_now(d->net);
    homa_msg m;
    if (port == SERVER_PORT) {
        while (homa_engine_recv(h->eng, port, HOMA_RECV_REQUEST, 0, &m) == 0) {
            homa_engine_send_reply(h->eng, now, port, &m.peer, m.peer_port, m.id, d->buf,
                                   REPLY_LEN);
            homa_engine_release(h->eng, &m);
        }
        return;
    }
    while (homa_engine_recv(h->eng, port, HOMA_RECV_RESPONSE, 0, &m) == 0) {
        struct rec *r = &d->recs[m.cookie];
        r->done = now;
        r->err = m.error;
        if (m.error)
            d->failed++;
        else
            d->done++;
        homa_engine_release(h->eng, &m);
    }
}

struct start {
    struct demo *d;
    int idx, src, dst;
};

static void start_rpc(void *arg, uint64_t now)
{
    struct start *s = arg;
    struct demo *d = s->d;
    struct rec *r = &d->recs[s->idx];
    homa_addr dst = vhost_addr(s->dst);
    uint64_t id;
    r->start = now;
    int err = homa_engine_send_request(d->h[s->src]->eng, now, CLIENT_PORT, &dst, SERVER_PORT,
                                       d->buf, r->len, (uint64_t)s->idx, &id);
    if (err) {
        r->err = err;
        d->failed++;
    }
    vhost_poke(d->h[s->src]);
    free(s);
}

static int add_rpc(struct demo *d, uint64_t t, int src, int dst, uint32_t len)
{
    if (d->nrecs == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 1024;
        d->recs = realloc(d->recs, (size_t)d->cap * sizeof(*d->recs));
    }
    int idx = d->nrecs++;
    memset(&d->recs[idx], 0, sizeof(d->recs[idx]));
    d->recs[idx].len = len;
    struct start *s = malloc(sizeof(*s));
    *s = (struct start){d, idx, src, dst};
    vnet_at(d->net, t, start_rpc, s);
    return idx;
}

static void demo_init(struct demo *d, int n, uint64_t seed, double loss, int prios,
                      uint32_t max_len)
{
    memset(d, 0, sizeof(*d));
    struct vnet_config nc;
    vnet_config_default(&nc);
    nc.seed = seed;
    nc.host_bps = 10000000000ull;
    nc.host_delay_ns = 250;
    nc.switch_delay_ns = 250;
    nc.port_buffer_bytes = 1000000;
    nc.faults.loss = loss;
    d->net = vnet_create(&nc);
    d->link_bps = nc.host_bps;
    homa_config hc;
    homa_config_default(&hc);
    hc.max_message_length = max_len;
    if (prios == 1) {
        memset(hc.unsched_cutoffs, 0, sizeof(hc.unsched_cutoffs));
        hc.unsched_cutoffs[0] = 0x7fffffff;
        hc.num_priorities = 1;
    }
    d->n = n;
    d->buf = calloc(max_len, 1);
    for (int i = 0; i < n; i++) {
        d->h[i] = vhost_create(d->net, &hc, on_ready, d);
        homa_engine_port_open(d->h[i]->eng, SERVER_PORT);
        homa_engine_port_open(d->h[i]->eng, CLIENT_PORT);
    }
}

static void demo_free(struct demo *d)
{
    for (int i = 0; i < d->n; i++) vhost_destroy(d->h[i]);
    vnet_destroy(d->net);
    free(d->recs);
    free(d->buf);
}

/* Best possible RPC time on the idle network: request and reply each cross
 * two links store-and-forward. */
static double ideal_ns(const struct demo *d, uint32_t len)
{
    const double payload = 1400, hdr = 56, hop = 250 * 2 + 250;
    double pkts = len ? ceil(len / payload) : 1;
    double wire = len + pkts * hdr;
    double last = (len ? fmin(payload, len - (pkts - 1) * payload) : 0) + hdr;
    double req = (wire + last) * 8e9 / (double)d->link_bps + hop;
    double rep = (REPLY_LEN + hdr) * 2 * 8e9 / (double)d->link_bps + hop;
    return req + rep;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
    if (n == 0) return 0;
    int i = (int)ceil(p * n) - 1;
    if (i < 0) i = 0;
    if (i >= n) i = n - 1;
    return v[i];
}

struct result {
    int rpcs, ok, failed;
    double short_p50, short_p99, short_sd99, all_sd50, all_sd99;
    double gbps;
    uint64_t retransmits, drops, events;
    double wall;
};

static struct result run_workload(const struct opts *o, const homa_workload *w, int prios,
                                  bool print)
{
    struct demo d;
    uint32_t maxlen = homa_workload_max_size(w);
    demo_init(&d, o->hosts, o->seed, o->loss, prios, maxlen < 1000 ? 1000 : maxlen);
    struct vnet_rng *rng = vnet_rng(d.net);
    double mean = homa_workload_mean(w, 0);
    /* per-host arrival rate so that each host's uplink carries `load` */
    double per_host_bps = o->load * (double)d.link_bps;
    double gap_ns = mean * 8 * 1e9 / per_host_bps;
    uint64_t end = (uint64_t)(o->ms * 1e6);
    for (int hst = 0; hst < o->hosts; hst++) {
        double t = vnet_rng_exp(rng, gap_ns);
        while (t < end) {
            int dst = (int)vnet_rng_below(rng, (uint64_t)o->hosts - 1);
            if (dst >= hst) dst++;
            add_rpc(&d, (uint64_t)t, hst, dst, homa_workload_sample(w, vnet_rng_uniform(rng), 0));
            t += vnet_rng_exp(rng, gap_ns);
        }
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* run the offered window plus time to drain */
    vnet_run_until(d.net, end + end / 2 + 200000000ull);
    clock_gettime(CLOCK_MONOTONIC, &t1);

    uint32_t short_cut = homa_workload_quantile(w, 0.10, 0);
    struct result r;
    memset(&r, 0, sizeof(r));
    r.rpcs = d.nrecs;
    r.ok = d.done;
    r.failed = d.failed;
    double *sd = malloc(sizeof(double) * (size_t)(d.nrecs + 1));
    double *sh = malloc(sizeof(double) * (size_t)(d.nrecs + 1));
    double *shsd = malloc(sizeof(double) * (size_t)(d.nrecs + 1));
    int nsd = 0, nsh = 0;
    double bytes = 0;
    /* buckets by size decile of the workload */
    enum { NB = 10 };
    uint32_t edges[NB];
    for (int b = 0; b < NB; b++) edges[b] = homa_workload_quantile(w, (b + 1) / (double)NB, 0);
    double *bv[NB];
    int bn[NB] = {0};
    for (int b = 0; b < NB; b++) bv[b] = malloc(sizeof(double) * (size_t)(d.nrecs + 1));
    for (int i = 0; i < d.nrecs; i++) {
        struct rec *x = &d.recs[i];
        if (!x->done || x->err) continue;
        double lat = (double)(x->done - x->start);
        double s = lat / ideal_ns(&d, x->len);
        sd[nsd++] = s;
        bytes += x->len;
        if (x->len <= short_cut) {
            sh[nsh] = lat / 1000.0;
            shsd[nsh++] = s;
        }
        int b = 0;
        while (b < NB - 1 && x->len > edges[b]) b++;
        bv[b][bn[b]++] = s;
    }
    qsort(sd, (size_t)nsd, sizeof(double), cmp_double);
    qsort(sh, (size_t)nsh, sizeof(double), cmp_double);
    qsort(shsd, (size_t)nsh, sizeof(double), cmp_double);
    r.short_p50 = pct(sh, nsh, 0.5);
    r.short_p99 = pct(sh, nsh, 0.99);
    r.short_sd99 = pct(shsd, nsh, 0.99);
    r.all_sd50 = pct(sd, nsd, 0.5);
    r.all_sd99 = pct(sd, nsd, 0.99);
    r.gbps = bytes * 8 / (o->ms * 1e6) / o->hosts;
    for (int i = 0; i < d.n; i++) {
        homa_counters c;
        homa_engine_counters(d.h[i]->eng, &c);
        r.retransmits += c.retransmit_pkts;
    }
    struct vnet_stats vs;
    vnet_get_stats(d.net, &vs);
    r.drops = vs.drops_loss + vs.drops_queue;
    r.events = vs.events;
    r.wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (print) {
        printf("  %-22s %8s %10s %10s %10s\n", "message size (bytes)", "rpcs", "slowdown",
               "p50", "p99");
        uint32_t lo = 0;
        for (int b = 0; b < NB; b++) {
            if (b > 0 && edges[b] == edges[b - 1]) continue;
            qsort(bv[b], (size_t)bn[b], sizeof(double), cmp_double);
            char range[64];
            snprintf(range, sizeof(range), "%u-%u", lo, edges[b]);
            printf("  %-22s %8d %10s %10.2f %10.2f\n", range, bn[b], "", pct(bv[b], bn[b], 0.5),
                   pct(bv[b], bn[b], 0.99));
            lo = edges[b] + 1;
        }
    }
    for (int b = 0; b < NB; b++) free(bv[b]);
    free(sd);
    free(sh);
    free(shsd);
    demo_free(&d);
    return r;
}

static uint64_t short_behind_long(bool with_long)
{
    struct demo d;
    demo_init(&d, 3, 1, 0, 8, 10000000);
    if (with_long) add_rpc(&d, 0, 0, 2, 10000000);
    int s = add_rpc(&d, 2000000, 1, 2, 100);
    vnet_run_until(d.net, 100000000);
    uint64_t lat = d.recs[s].done - d.recs[s].start;
    demo_free(&d);
    return lat;
}

static void usage(void)
{
    fprintf(stderr, "usage: homa-demo [--workload w1..w5] [--load 0.7] [--hosts 16] [--ms 50]\n"
                    "                 [--loss 0] [--seed 1] [--data DIR]\n");
}

int main(int argc, char **argv)
{
    struct opts o = {"w4", 0.7, 16, 50, 0.0, 1, NULL};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v && strcmp(a, "--help") != 0) {
            usage();
            return 2;
        }
        if (strcmp(a, "--workload") == 0)
            o.workload = v;
        else if (strcmp(a, "--load") == 0)
            o.load = atof(v);
        else if (strcmp(a, "--hosts") == 0)
            o.hosts = atoi(v);
        else if (strcmp(a, "--ms") == 0)
            o.ms = atof(v);
        else if (strcmp(a, "--loss") == 0)
            o.loss = atof(v);
        else if (strcmp(a, "--seed") == 0)
            o.seed = strtoull(v, NULL, 0);
        else if (strcmp(a, "--data") == 0)
            o.data = v;
        else {
            usage();
            return 2;
        }
    }
    if (o.hosts < 2 || o.hosts > MAX_HOSTS || o.load <= 0 || o.load >= 1.5 || o.ms <= 0 ||
        o.loss < 0 || o.loss >= 1) {
        fprintf(stderr, "homa-demo: hosts must be 2..%d, load in (0,1.5), ms > 0, loss in [0,1)\n",
                MAX_HOSTS);
        return 2;
    }
    homa_workload *w;
    int err = homa_workload_load(o.workload, o.data, HOMA_DEFAULT_DATA_DIR, &w);
    if (err) {
        fprintf(stderr, "homa-demo: %s: %s\n", homa_strerror(err), homa_workload_errmsg());
        return 1;
    }
    printf("libhoma demo: the real Homa engine on a virtual network\n");
    printf("%d hosts, one switch with 8 strict-priority queues, 10 Gb/s links, %.0f %% packet "
           "loss\n",
           o.hosts, o.loss * 100);
    printf("workload %s (mean %.0f B, shortest 10 %% <= %u B), Poisson arrivals at %.0f %% load "
           "for %.0f ms, 100-byte replies, seed %llu\n\n",
           o.workload, homa_workload_mean(w, 0), homa_workload_quantile(w, 0.1, 0), o.load * 100,
           o.ms, (unsigned long long)o.seed);

    printf("Part 1a: Homa, 8 priority levels.  Slowdown = RPC time / best time on an idle "
           "network\n");
    struct result a = run_workload(&o, w, 8, true);
    printf("\nPart 1b: the same RPCs with a single priority level (no switch priorities)\n");
    struct result b = run_workload(&o, w, 1, true);
    printf("\n  %-34s %14s %14s\n", "", "8 priorities", "1 priority");
    printf("  %-34s %14d %14d\n", "RPCs offered", a.rpcs, b.rpcs);
    printf("  %-34s %14d %14d\n", "completed", a.ok, b.ok);
    printf("  %-34s %14d %14d\n", "failed", a.failed, b.failed);
    printf("  %-34s %14.1f %14.1f\n", "short messages p50 latency (us)", a.short_p50,
           b.short_p50);
    printf("  %-34s %14.1f %14.1f\n", "short messages p99 latency (us)", a.short_p99,
           b.short_p99);
    printf("  %-34s %14.2f %14.2f\n", "short messages p99 slowdown", a.short_sd99, b.short_sd99);
    printf("  %-34s %14.2f %14.2f\n", "all messages p50 slowdown", a.all_sd50, b.all_sd50);
    printf("  %-34s %14.2f %14.2f\n", "all messages p99 slowdown", a.all_sd99, b.all_sd99);
    printf("  %-34s %14.2f %14.2f\n", "request goodput per host (Gb/s)", a.gbps, b.gbps);
    printf("  %-34s %14llu %14llu\n", "packets lost or dropped", (unsigned long long)a.drops,
           (unsigned long long)b.drops);
    printf("  %-34s %14llu %14llu\n", "packets retransmitted", (unsigned long long)a.retransmits,
           (unsigned long long)b.retransmits);
    printf("  %-34s %14.0f %14.0f\n", "simulator events per second", a.events / a.wall,
           b.events / b.wall);

    printf("\nPart 2: the same 8-priority run with 1 %% of all packets lost (seeded)\n");
    struct opts lossy = o;
    lossy.loss = 0.01;
    struct result c = run_workload(&lossy, w, 8, false);
    printf("  %d of %d RPCs completed, %d failed; %llu packets lost, %llu retransmitted\n"
           "  short messages p50 %.1f us, p99 %.1f us (a lost single-packet message waits\n"
           "  resend_ticks = 5 ms of silence before it is asked for again, as in Linux Homa)\n",
           c.ok, c.rpcs, c.failed, (unsigned long long)c.drops,
           (unsigned long long)c.retransmits, c.short_p50, c.short_p99);

    printf("\nPart 3: a 100-byte request while a 10 MB request to the same server is in "
           "flight\n");
    uint64_t idle = short_behind_long(false), busy = short_behind_long(true);
    printf("  100-byte RPC alone: %.2f us; behind the 10 MB transfer: %.2f us (%.2fx)\n",
           idle / 1e3, busy / 1e3, (double)busy / (double)idle);
    homa_workload_free(w);
    return (a.failed || b.failed || c.failed || c.ok != c.rpcs) ? 1 : 0;
}
