/* Tests of the virtual network: event core, PRNG, links, switches, faults.
 * Most expectations are exact known answers computed from link rates and
 * delays; statistical ones (faults, spraying) use bounds of several
 * standard deviations with fixed seeds. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vnet.h"

/* ---- A scriptable test host ---- */

struct txent {
    int dst, prio;
    uint32_t len, tag;
};

struct rxrec {
    uint64_t t;
    int src, prio;
    uint32_t len, tag;
};

struct th {
    struct vnet *net;
    int idx;
    struct txent *tx;
    size_t txn, txhead, txcap;
    struct rxrec *rx;
    size_t rxn, rxcap;
    int pulls, empty_pulls;
    bool own_data; /* hand vnet a pointer to our own buffer */
    uint8_t *ownbuf;
    uint64_t *hash; /* optional: fold deliveries into it */
};

static uint8_t pat(uint32_t tag, size_t i)
{
    return (uint8_t)(tag * 31u + (uint32_t)i * 7u);
}

static void fill(uint8_t *d, uint32_t tag, size_t len)
{
    memcpy(d, &tag, sizeof(tag));
    for (size_t i = 4; i < len; i++)
        d[i] = pat(tag, i);
}

static int th_pull(void *ctx, uint64_t now, struct vnet_pkt *pkt)
{
    struct th *h = ctx;
    (void)now;
    h->pulls++;
    if (h->txhead == h->txn) {
        h->empty_pulls++;
        return 0;
    }
    struct txent *e = &h->tx[h->txhead++];
    pkt->dst = e->dst;
    pkt->priority = e->prio;
    pkt->len = e->len;
    if (h->own_data) {
        fill(h->ownbuf, e->tag, e->len);
        pkt->data = h->ownbuf;
    } else {
        fill(pkt->data, e->tag, e->len);
    }
    return 1;
}

static void fnv(uint64_t *h, uint64_t v)
{
    *h ^= v;
    *h *= 1099511628211ull;
}

static void th_deliver(void *ctx, uint64_t now, int src, const uint8_t *data, size_t len, int prio)
{
    struct th *h = ctx;
    uint32_t tag;
    assert_true(len >= 4);
    memcpy(&tag, data, sizeof(tag));
    for (size_t i = 4; i < len; i++)
        if (data[i] != pat(tag, i)) fail_msg("payload corrupted at byte %zu of tag %u", i, tag);
    if (h->rxn == h->rxcap) {
        h->rxcap = h->rxcap ? 2 * h->rxcap : 64;
        h->rx = realloc(h->rx, h->rxcap * sizeof(*h->rx));
    }
    h->rx[h->rxn++] = (struct rxrec){now, src, prio, (uint32_t)len, tag};
    if (h->hash) {
        fnv(h->hash, now);
        fnv(h->hash, (uint64_t)src);
        fnv(h->hash, (uint64_t)h->idx);
        fnv(h->hash, tag);
    }
}

static const struct vnet_host_ops th_ops = {.pull = th_pull, .deliver = th_deliver};

/* Queue a packet (no kick). */
static void th_queue(struct th *h, int dst, int prio, uint32_t len, uint32_t tag)
{
    if (h->txn == h->txcap) {
        h->txcap = h->txcap ? 2 * h->txcap : 64;
        h->tx = realloc(h->tx, h->txcap * sizeof(*h->tx));
    }
    h->tx[h->txn++] = (struct txent){dst, prio, len, tag};
}

static void th_send(struct th *h, int dst, int prio, uint32_t len, uint32_t tag)
{
    th_queue(h, dst, prio, len, tag);
    vnet_host_kick(h->net, h->idx);
}

#define MAXH 64

struct fx {
    struct vnet *net;
    struct th h[MAXH];
    int n;
};

static void fx_init(struct fx *f, const struct vnet_config *cfg, int nhosts)
{
    memset(f, 0, sizeof(*f));
    f->net = vnet_create(cfg);
    assert_non_null(f->net);
    f->n = nhosts;
    for (int i = 0; i < nhosts; i++) {
        f->h[i].net = f->net;
        f->h[i].idx = vnet_add_host(f->net, &th_ops, &f->h[i]);
        assert_int_equal(f->h[i].idx, i);
        f->h[i].ownbuf = malloc(VNET_MAX_PKT);
    }
}

static void fx_free(struct fx *f)
{
    vnet_destroy(f->net);
    for (int i = 0; i < f->n; i++) {
        free(f->h[i].tx);
        free(f->h[i].rx);
        free(f->h[i].ownbuf);
    }
}

/* Star, 10 Gb/s: 1250 bytes take exactly 1000 ns per hop. */
static void star_cfg(struct vnet_config *c)
{
    vnet_config_default(c);
    c->host_bps = 10000000000ull;
    c->host_delay_ns = 100;
    c->switch_delay_ns = 0;
    c->overhead_bytes = 0;
    c->port_buffer_bytes = 0;
}

static void port_stats(struct vnet *net, int sw, int port, struct vnet_port_stats *ps)
{
    assert_int_equal(vnet_get_port_stats(net, sw, port, ps), 0);
}

static void downlink_stats(struct vnet *net, int host, struct vnet_port_stats *ps)
{
    port_stats(net, vnet_host_tor(net, host), vnet_host_port(net, host), ps);
}

/* ---- PRNG ---- */

static void rng__deterministic_and_in_range(void **state)
{
    (void)state;
    struct vnet_rng a, b, c;
    vnet_rng_seed(&a, 7);
    vnet_rng_seed(&b, 7);
    vnet_rng_seed(&c, 8);
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = vnet_rng_next(&a);
        assert_true(x == vnet_rng_next(&b));
        differ += x != vnet_rng_next(&c);
    }
    assert_true(differ > 990);

    double sum = 0, esum = 0;
    uint64_t hist[10] = {0};
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double u = vnet_rng_uniform(&a);
        assert_true(u >= 0 && u < 1);
        sum += u;
        double e = vnet_rng_exp(&a, 5.0);
        assert_true(e >= 0);
        esum += e;
        uint64_t k = vnet_rng_below(&a, 10);
        assert_true(k < 10);
        hist[k]++;
    }
    assert_true(fabs(sum / n - 0.5) < 0.005);
    assert_true(fabs(esum / n - 5.0) < 0.1);
    for (int k = 0; k < 10; k++)
        assert_true(hist[k] > n / 10 - 600 && hist[k] < n / 10 + 600);
    assert_int_equal(vnet_rng_below(&a, 0), 0);
    assert_int_equal(vnet_rng_below(&a, 1), 0);
}

static void rng__seed_from_env(void **state)
{
    (void)state;
    unsetenv("VNET_SEED");
    assert_int_equal(vnet_seed_from_env(5), 5);
    setenv("VNET_SEED", "0x10", 1);
    assert_int_equal(vnet_seed_from_env(5), 16);
    setenv("VNET_SEED", "123", 1);
    assert_int_equal(vnet_seed_from_env(5), 123);
    setenv("VNET_SEED", "12x", 1);
    assert_int_equal(vnet_seed_from_env(5), 5);
    unsetenv("VNET_SEED");
}

/* ---- Event core ---- */

struct evlog {
    struct vnet *net;
    int ids[64];
    uint64_t times[64];
    int n;
};

struct evarg {
    struct evlog *log;
    int id;
    /* optional actions when run */
    bool stop;
    uint64_t sched_at;
    struct evarg *sched;
};

static void ev_cb(void *arg, uint64_t now)
{
    struct evarg *a = arg;
    assert_int_equal(now, vnet_now(a->log->net));
    a->log->ids[a->log->n] = a->id;
    a->log->times[a->log->n] = now;
    a->log->n++;
    if (a->stop) vnet_stop(a->log->net);
    if (a->sched) vnet_at(a->log->net, a->sched_at, ev_cb, a->sched);
}

static struct vnet *plain_net(uint64_t seed)
{
    struct vnet_config c;
    vnet_config_default(&c);
    c.seed = seed;
    struct vnet *net = vnet_create(&c);
    assert_non_null(net);
    return net;
}

static void evq__order_is_time_then_fifo(void **state)
{
    (void)state;
    struct evlog log = {.net = plain_net(1)};
    struct evarg a[8];
    for (int i = 0; i < 8; i++)
        a[i] = (struct evarg){.log = &log, .id = i};
    vnet_at(log.net, 30, ev_cb, &a[0]);
    vnet_at(log.net, 10, ev_cb, &a[1]);
    vnet_at(log.net, 20, ev_cb, &a[2]);
    vnet_at(log.net, 10, ev_cb, &a[3]);
    vnet_at(log.net, 10, ev_cb, &a[4]);
    vnet_at(log.net, 0, ev_cb, &a[5]);
    assert_int_equal(vnet_pending_events(log.net), 6);
    assert_int_equal(vnet_run(log.net), 6);
    int want[] = {5, 1, 3, 4, 2, 0};
    uint64_t wt[] = {0, 10, 10, 10, 20, 30};
    assert_int_equal(log.n, 6);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(log.ids[i], want[i]);
        assert_int_equal(log.times[i], wt[i]);
    }
    assert_int_equal(vnet_now(log.net), 30);
    assert_int_equal(vnet_events_processed(log.net), 6);
    assert_int_equal(vnet_pending_events(log.net), 0);
    vnet_destroy(log.net);
}

/* Far-future events (beyond the near-term window) must keep insertion
 * order against events scheduled later, when their time is near. */
static void evq__far_events_keep_fifo_order(void **state)
{
    (void)state;
    struct evlog log = {.net = plain_net(1)};
    struct evarg a[8];
    for (int i = 0; i < 8; i++)
        a[i] = (struct evarg){.log = &log, .id = i};
    const uint64_t T = 1000000;
    vnet_at(log.net, T, ev_cb, &a[0]);
    a[1].sched = &a[2]; /* at T - 10000, schedule a[2] at T */
    a[1].sched_at = T;
    vnet_at(log.net, T - 10000, ev_cb, &a[1]);
    vnet_at(log.net, T, ev_cb, &a[3]);
    vnet_at(log.net, 5 * T, ev_cb, &a[4]);
    vnet_at(log.net, 3 * T, ev_cb, &a[5]);
    vnet_at(log.net, 3 * T + 1, ev_cb, &a[6]);
    vnet_run(log.net);
    int want[] = {1, 0, 3, 2, 5, 6, 4};
    uint64_t wt[] = {T - 10000, T, T, T, 3 * T, 3 * T + 1, 5 * T};
    assert_int_equal(log.n, 7);
    for (int i = 0; i < 7; i++) {
        assert_int_equal(log.ids[i], want[i]);
        assert_int_equal(log.times[i], wt[i]);
    }
    vnet_destroy(log.net);
}

static void evq__cancel(void **state)
{
    (void)state;
    struct evlog log = {.net = plain_net(1)};
    struct evarg a[4];
    for (int i = 0; i < 4; i++)
        a[i] = (struct evarg){.log = &log, .id = i};
    vnet_event_id e0 = vnet_at(log.net, 10, ev_cb, &a[0]);
    vnet_event_id e1 = vnet_at(log.net, 20, ev_cb, &a[1]);
    vnet_event_id e2 = vnet_at(log.net, 30, ev_cb, &a[2]);
    vnet_event_id e3 = vnet_at(log.net, 10000000, ev_cb, &a[3]); /* far */
    assert_true(e0 && e1 && e2 && e3);
    assert_true(vnet_cancel(log.net, e1));
    assert_false(vnet_cancel(log.net, e1));
    assert_true(vnet_cancel(log.net, e3));
    assert_false(vnet_cancel(log.net, 0));
    assert_int_equal(vnet_run(log.net), 2);
    assert_int_equal(log.n, 2);
    assert_int_equal(log.ids[0], 0);
    assert_int_equal(log.ids[1], 2);
    assert_false(vnet_cancel(log.net, e0)); /* already ran */
    /* A stale handle must not cancel the event that reuses its slot. */
    vnet_event_id e4 = vnet_at(log.net, 40, ev_cb, &a[1]);
    assert_false(vnet_cancel(log.net, e2));
    assert_true(e4 != e2);
    vnet_run(log.net);
    assert_int_equal(log.n, 3);
    assert_int_equal(vnet_events_processed(log.net), 3);
    /* The queue may end with cancelled events, near or far; scheduling
     * afterwards must still work in order. */
    uint64_t t0 = vnet_now(log.net);
    assert_true(vnet_cancel(log.net, vnet_at(log.net, t0 + 100, ev_cb, &a[0])));
    assert_true(vnet_cancel(log.net, vnet_at(log.net, t0 + 5000000, ev_cb, &a[0])));
    assert_int_equal(vnet_run(log.net), 0);
    uint64_t t1 = vnet_now(log.net);
    assert_true(t1 >= t0 && t1 <= t0 + 5000000);
    vnet_after(log.net, 10, ev_cb, &a[1]);
    vnet_after(log.net, 5, ev_cb, &a[2]);
    vnet_after(log.net, 100000, ev_cb, &a[3]);
    vnet_run(log.net);
    assert_int_equal(log.n, 6);
    assert_int_equal(log.ids[3], 2);
    assert_int_equal(log.times[3], t1 + 5);
    assert_int_equal(log.ids[4], 1);
    assert_int_equal(log.times[4], t1 + 10);
    assert_int_equal(log.times[5], t1 + 100000);
    vnet_destroy(log.net);
}

static void evq__run_until_and_stop(void **state)
{
    (void)state;
    struct evlog log = {.net = plain_net(1)};
    struct evarg a[4];
    for (int i = 0; i < 4; i++)
        a[i] = (struct evarg){.log = &log, .id = i};
    vnet_at(log.net, 50, ev_cb, &a[0]);
    vnet_at(log.net, 150, ev_cb, &a[1]);
    assert_int_equal(vnet_run_until(log.net, 100), 1);
    assert_int_equal(vnet_now(log.net), 100);
    /* An event in the past runs now. */
    vnet_at(log.net, 20, ev_cb, &a[2]);
    a[2].stop = true;
    assert_int_equal(vnet_run(log.net), 1);
    assert_int_equal(log.times[1], 100);
    assert_int_equal(vnet_now(log.net), 100);
    assert_int_equal(vnet_run_until(log.net, 1000), 1);
    assert_int_equal(log.ids[2], 1);
    assert_int_equal(vnet_now(log.net), 1000);
    /* vnet_after is relative to now. */
    vnet_after(log.net, 5, ev_cb, &a[3]);
    vnet_run(log.net);
    assert_int_equal(log.times[3], 1005);
    /* Idle gaps far beyond the near-term window are crossed directly. */
    vnet_run_until(log.net, 50000000000ull);
    assert_int_equal(vnet_now(log.net), 50000000000ull);
    vnet_after(log.net, 7, ev_cb, &a[0]);
    vnet_run(log.net);
    assert_int_equal(log.times[4], 50000000007ull);
    vnet_destroy(log.net);
}

struct rand_ev {
    struct rand_state *st;
    uint64_t time;
    uint32_t id; /* insertion order */
};

struct rand_state {
    struct vnet *net;
    struct vnet_rng r;
    struct rand_ev *ev;
    uint32_t n, cap, ran;
    uint64_t last_time;
    uint32_t last_id;
};

static void rand_cb(void *arg, uint64_t now);

static void rand_schedule(struct rand_state *s, uint64_t t)
{
    if (s->n == s->cap) return;
    struct rand_ev *e = &s->ev[s->n];
    e->st = s;
    e->time = t;
    e->id = s->n++;
    vnet_at(s->net, t, rand_cb, e);
}

/* Mostly near-term times with collisions, sometimes far ones. */
static uint64_t rand_time(struct rand_state *s, uint64_t now)
{
    switch (vnet_rng_below(&s->r, 4)) {
    case 0:
        return now + vnet_rng_below(&s->r, 5000000);
    case 1:
        return now + vnet_rng_below(&s->r, 70000);
    default:
        return now + vnet_rng_below(&s->r, 300);
    }
}

static void rand_cb(void *arg, uint64_t now)
{
    struct rand_ev *e = arg;
    struct rand_state *s = e->st;
    assert_int_equal(now, e->time);
    assert_true(now >= s->last_time);
    if (now == s->last_time && s->ran > 0)
        assert_true(e->id > s->last_id); /* same time: insertion order */
    s->last_time = now;
    s->last_id = e->id;
    s->ran++;
    /* Schedule more from inside, including at the current time. */
    int k = (int)vnet_rng_below(&s->r, 3);
    for (int i = 0; i < k; i++)
        rand_schedule(s, i == 0 && vnet_rng_below(&s->r, 8) == 0 ? now : rand_time(s, now));
}

static void evq__many_events_sorted(void **state)
{
    (void)state;
    struct rand_state s = {.net = plain_net(3), .cap = 200000};
    s.ev = calloc(s.cap, sizeof(*s.ev));
    vnet_rng_seed(&s.r, 99);
    for (int i = 0; i < 5000; i++)
        rand_schedule(&s, rand_time(&s, 0));
    vnet_run(s.net);
    assert_int_equal(s.ran, s.n);
    assert_true(s.n > 100000);
    assert_int_equal(vnet_events_processed(s.net), s.n);
    free(s.ev);
    vnet_destroy(s.net);
}

/* ---- Star topology: exact timing ---- */

static void star__single_packet_latency(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    c.switch_delay_ns = 50;
    struct fx f;
    fx_init(&f, &c, 2);
    th_send(&f.h[0], 1, 3, 1250, 1);
    vnet_run(f.net);
    assert_int_equal(f.h[1].rxn, 1);
    /* 1000 (host tx) + 100 + 50 (switch) + 1000 (switch tx) + 100 */
    assert_int_equal(f.h[1].rx[0].t, 2250);
    assert_int_equal(f.h[1].rx[0].src, 0);
    assert_int_equal(f.h[1].rx[0].prio, 3);
    assert_int_equal(f.h[1].rx[0].len, 1250);
    fx_free(&f);

    /* Per-packet overhead counts on every link: 1300 wire bytes = 1040 ns. */
    c.overhead_bytes = 50;
    fx_init(&f, &c, 2);
    th_send(&f.h[0], 1, 0, 1250, 1);
    vnet_run(f.net);
    assert_int_equal(f.h[1].rx[0].t, 2330);
    struct vnet_host_stats hs;
    vnet_get_host_stats(f.net, 0, &hs);
    assert_int_equal(hs.tx_busy_ns, 1040);
    assert_int_equal(hs.tx_bytes, 1250);
    fx_free(&f);
}

static void star__stream_reaches_line_rate(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    struct fx f;
    fx_init(&f, &c, 2);
    for (uint32_t i = 0; i < 1000; i++)
        th_queue(&f.h[0], 1, 0, 1250, i);
    vnet_host_kick(f.net, 0);
    vnet_run(f.net);
    assert_int_equal(f.h[1].rxn, 1000);
    /* Back to back: packet i leaves the host at (i+1) us, and the switch
     * port is free exactly when it arrives. */
    for (uint32_t i = 0; i < 1000; i++) {
        assert_int_equal(f.h[1].rx[i].tag, i);
        assert_int_equal(f.h[1].rx[i].t, (i + 1) * 1000 + 1200);
    }
    assert_int_equal(f.h[0].pulls, 1001);
    assert_int_equal(f.h[0].empty_pulls, 1);
    struct vnet_port_stats ps;
    downlink_stats(f.net, 1, &ps);
    assert_int_equal(ps.busy_ns, 1000000);
    assert_int_equal(ps.tx_pkts, 1000);
    assert_int_equal(ps.tx_bytes, 1250000);
    assert_int_equal(ps.max_occupancy, 1250);
    fx_free(&f);

    /* Fractional serialisation times (1538 B at 40 Gb/s = 307.6 ns) still
     * add up to the exact line rate. */
    c.host_bps = 40000000000ull;
    fx_init(&f, &c, 2);
    for (uint32_t i = 0; i < 10000; i++)
        th_queue(&f.h[0], 1, 0, 1538, i);
    vnet_host_kick(f.net, 0);
    vnet_run(f.net);
    assert_int_equal(f.h[1].rxn, 10000);
    struct vnet_host_stats hs;
    vnet_get_host_stats(f.net, 0, &hs);
    assert_int_equal(hs.tx_busy_ns, 3076000);
    downlink_stats(f.net, 1, &ps);
    assert_int_equal(ps.busy_ns, 3076000);
    uint64_t last = f.h[1].rx[9999].t;
    assert_true(last >= 3076000 + 100 + 307 + 100 && last <= 3076000 + 100 + 308 + 100);
    fx_free(&f);
}

static void star__two_senders_share_downlink(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    struct fx f;
    fx_init(&f, &c, 3);
    for (uint32_t i = 0; i < 500; i++) {
        th_queue(&f.h[0], 2, 0, 1250, i);
        th_queue(&f.h[1], 2, 0, 1250, 1000 + i);
    }
    vnet_host_kick(f.net, 0);
    vnet_host_kick(f.net, 1);
    vnet_run(f.net);
    struct th *r = &f.h[2];
    assert_int_equal(r->rxn, 1000);
    /* The downlink is the bottleneck: busy from the first arrival (1100)
     * to the end, one packet per microsecond. */
    int from0 = 0;
    for (size_t k = 0; k < r->rxn; k++) {
        assert_int_equal(r->rx[k].t, 1100 + k * 1000 + 1100);
        from0 += r->rx[k].src == 0;
        if (k < 500) /* fair interleaving while both are sending */
            assert_true(abs(from0 - (int)(k + 1) / 2) <= 1);
    }
    assert_int_equal(from0, 500);
    struct vnet_port_stats ps;
    downlink_stats(f.net, 2, &ps);
    uint64_t span = r->rx[999].t - 100 - 1100;
    assert_true(ps.busy_ns * 100 >= span * 90);
    assert_int_equal(ps.busy_ns, 1000000);
    /* Arrivals at 2/us, departures at 1/us for 500 us: ~500 packets. */
    assert_true(ps.max_occupancy >= 490 * 1250 && ps.max_occupancy <= 510 * 1250);
    assert_int_equal(ps.occupancy, 0);
    fx_free(&f);
}

static void hi_send(void *arg, uint64_t now)
{
    (void)now;
    th_send(arg, 2, 7, 1250, 9999);
}

static void star__strict_priority_overtakes(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    struct fx f;
    fx_init(&f, &c, 4);
    for (uint32_t i = 0; i < 100; i++) {
        th_queue(&f.h[0], 2, 0, 1250, i);
        th_queue(&f.h[1], 2, 1, 1250, 1000 + i);
    }
    vnet_host_kick(f.net, 0);
    vnet_host_kick(f.net, 1);
    /* Host 3 sends one priority-7 packet at 50.05 us; it reaches the
     * switch at 51.15 us, mid-way through a packet that ends at 52.1 us. */
    vnet_at(f.net, 50050, hi_send, &f.h[3]);
    vnet_run_until(f.net, 51500);
    struct vnet_port_stats ps;
    downlink_stats(f.net, 2, &ps);
    assert_int_equal(ps.queued[7], 1);
    assert_true(ps.queued[0] + ps.queued[1] > 20);
    vnet_run(f.net);
    struct th *r = &f.h[2];
    assert_int_equal(r->rxn, 201);
    size_t pos = 0;
    for (size_t k = 0; k < r->rxn; k++)
        if (r->rx[k].tag == 9999) pos = k;
    assert_int_equal(r->rx[pos].t, 53200);
    assert_int_equal(r->rx[pos].prio, 7);
    assert_true(r->rxn - pos - 1 > 40); /* older low-priority packets follow */
    /* Between the two low priorities, 1 goes first once both are queued. */
    size_t last1 = 0, last0 = 0;
    for (size_t k = 0; k < r->rxn; k++) {
        if (r->rx[k].prio == 1) last1 = k;
        if (r->rx[k].prio == 0) last0 = k;
    }
    assert_true(last1 < last0);
    fx_free(&f);
}

static void star__buffer_overflow_drops_counted(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    c.port_buffer_bytes = 10 * 1250;
    struct fx f;
    fx_init(&f, &c, 3);
    for (uint32_t i = 0; i < 200; i++) {
        th_queue(&f.h[0], 2, 0, 1250, i);
        th_queue(&f.h[1], 2, 0, 1250, 1000 + i);
    }
    vnet_host_kick(f.net, 0);
    vnet_host_kick(f.net, 1);
    vnet_run(f.net);
    struct vnet_stats st;
    vnet_get_stats(f.net, &st);
    struct vnet_port_stats ps;
    downlink_stats(f.net, 2, &ps);
    assert_int_equal(st.pkts_sent, 400);
    assert_int_equal(st.pkts_delivered + st.drops_queue, 400);
    assert_int_equal(ps.drops, st.drops_queue);
    assert_int_equal(ps.drop_bytes, st.drops_queue * 1250);
    assert_int_equal(f.h[2].rxn, st.pkts_delivered);
    assert_true(ps.max_occupancy <= c.port_buffer_bytes);
    assert_int_equal(ps.max_occupancy, c.port_buffer_bytes);
    assert_true(st.pkts_delivered >= 200 && st.pkts_delivered <= 212);
    /* Other ports saw nothing. */
    downlink_stats(f.net, 0, &ps);
    assert_int_equal(ps.drops + ps.tx_pkts, 0);

    /* A runtime change of one port's buffer applies immediately. */
    assert_int_equal(vnet_set_port_buffer(f.net, 0, vnet_host_port(f.net, 2), 0), 0);
    assert_int_equal(vnet_set_port_buffer(f.net, 0, 99, 0), -1);
    for (uint32_t i = 0; i < 200; i++) {
        th_queue(&f.h[0], 2, 0, 1250, i);
        th_queue(&f.h[1], 2, 0, 1250, 1000 + i);
    }
    vnet_host_kick(f.net, 0);
    vnet_host_kick(f.net, 1);
    uint64_t before = st.drops_queue;
    vnet_run(f.net);
    vnet_get_stats(f.net, &st);
    assert_int_equal(st.drops_queue, before);
    assert_int_equal(st.pkts_delivered + st.drops_queue, 800);
    fx_free(&f);
}

static void star__large_packets_intact(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    struct fx f;
    fx_init(&f, &c, 3);
    uint32_t lens[] = {4, 100, 128, 129, 1500, 32767, 32768, 40000, 65536, VNET_MAX_PKT};
    for (uint32_t i = 0; i < 10; i++) {
        th_queue(&f.h[0], 2, i % 8, lens[i], i);
        th_queue(&f.h[1], 2, 7 - i % 8, lens[9 - i], 100 + i);
    }
    f.h[1].own_data = true; /* host 1 hands out its own buffer */
    vnet_host_kick(f.net, 0);
    vnet_host_kick(f.net, 1);
    vnet_run(f.net);
    assert_int_equal(f.h[2].rxn, 20); /* payloads checked in th_deliver */
    uint64_t bytes = 0;
    for (int i = 0; i < 10; i++)
        bytes += 2 * lens[i];
    struct vnet_host_stats hs;
    vnet_get_host_stats(f.net, 2, &hs);
    assert_int_equal(hs.rx_bytes, bytes);
    assert_int_equal(hs.rx_pkts, 20);
    fx_free(&f);
}

/* ---- Kicks and host failure ---- */

static void host__kick_pulls_until_empty(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    struct fx f;
    fx_init(&f, &c, 2);
    th_queue(&f.h[0], 1, 0, 1250, 1);
    th_queue(&f.h[0], 1, 0, 1250, 2);
    th_queue(&f.h[0], 1, 0, 1250, 3);
    vnet_run(f.net); /* not kicked: nothing happens */
    assert_int_equal(f.h[0].pulls, 0);
    vnet_host_kick(f.net, 0);
    vnet_host_kick(f.net, 0);          /* idempotent */
    assert_int_equal(f.h[0].pulls, 0); /* pulls happen from the loop */
    vnet_run(f.net);
    assert_int_equal(f.h[0].pulls, 4);
    assert_int_equal(f.h[1].rxn, 3);
    /* More data without a kick stays put; a kick while busy is harmless. */
    th_queue(&f.h[0], 1, 0, 1250, 4);
    vnet_run(f.net);
    assert_int_equal(f.h[1].rxn, 3);
    vnet_host_kick(f.net, 0);
    vnet_run_until(f.net, vnet_now(f.net) + 10);
    th_queue(&f.h[0], 1, 0, 1250, 5);
    vnet_host_kick(f.net, 0);
    uint64_t t0 = vnet_now(f.net);
    vnet_run(f.net);
    assert_int_equal(f.h[1].rxn, 5);
    assert_int_equal(f.h[1].rx[4].t, f.h[1].rx[3].t + 1000);
    assert_true(vnet_host_tx_free_at(f.net, 0) == t0 - 10 + 2000);
    fx_free(&f);
}

static void host__down_neither_sends_nor_receives(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    struct fx f;
    fx_init(&f, &c, 3);
    vnet_host_set_down(f.net, 2, true);
    assert_true(vnet_host_is_down(f.net, 2));
    for (uint32_t i = 0; i < 5; i++) {
        th_queue(&f.h[0], 2, 0, 1250, i);
        th_queue(&f.h[2], 1, 0, 1250, 100 + i);
    }
    vnet_host_kick(f.net, 0);
    vnet_host_kick(f.net, 2);
    vnet_run(f.net);
    assert_int_equal(f.h[2].pulls, 0);
    assert_int_equal(f.h[2].rxn, 0);
    assert_int_equal(f.h[1].rxn, 0);
    struct vnet_stats st;
    vnet_get_stats(f.net, &st);
    assert_int_equal(st.drops_down, 5);
    struct vnet_host_stats hs;
    vnet_get_host_stats(f.net, 2, &hs);
    assert_int_equal(hs.rx_dropped_down, 5);
    assert_int_equal(hs.tx_pkts, 0);

    /* Back up: it is kicked and sends what it had queued, and receives. */
    vnet_host_set_down(f.net, 2, false);
    th_send(&f.h[0], 2, 0, 1250, 50);
    vnet_run(f.net);
    assert_int_equal(f.h[1].rxn, 5);
    assert_int_equal(f.h[2].rxn, 1);

    /* Going down with packets in flight towards it: they vanish. */
    th_send(&f.h[0], 2, 0, 1250, 51);
    vnet_run_until(f.net, vnet_now(f.net) + 1500); /* at the switch */
    vnet_host_set_down(f.net, 2, true);
    vnet_run(f.net);
    assert_int_equal(f.h[2].rxn, 1);
    vnet_get_stats(f.net, &st);
    assert_int_equal(st.drops_down, 6);
    fx_free(&f);
}

/* ---- Leaf-spine ---- */

static void ls_cfg(struct vnet_config *c, int racks, int hpr, int spines)
{
    vnet_config_default(c);
    c->topology = VNET_LEAF_SPINE;
    c->racks = racks;
    c->hosts_per_rack = hpr;
    c->spines = spines;
    c->host_bps = 10000000000ull;
    c->uplink_bps = 40000000000ull;
    c->host_delay_ns = 100;
    c->uplink_delay_ns = 200;
    c->switch_delay_ns = 0;
}

static void leafspine__routing_and_latency(void **state)
{
    (void)state;
    struct vnet_config c;
    ls_cfg(&c, 2, 2, 2);
    struct fx f;
    fx_init(&f, &c, 4);
    assert_int_equal(vnet_add_host(f.net, &th_ops, NULL), -1); /* full */
    assert_int_equal(vnet_num_switches(f.net), 4);
    assert_int_equal(vnet_num_ports(f.net, 0), 4);
    assert_int_equal(vnet_num_ports(f.net, 2), 2);
    assert_int_equal(vnet_host_tor(f.net, 3), 1);
    assert_int_equal(vnet_host_port(f.net, 3), 1);
    assert_int_equal(vnet_tor_uplink_port(f.net, 1, 1), 3);
    assert_int_equal(vnet_tor_uplink_port(f.net, 1, 2), -1);

    /* Same rack: host -> ToR -> host, 1000 + 100 + 1000 + 100. */
    th_send(&f.h[0], 1, 0, 1250, 1);
    vnet_run(f.net);
    assert_int_equal(f.h[1].rx[0].t, 2200);
    for (int sw = 2; sw < 4; sw++)
        for (int p = 0; p < 2; p++) {
            struct vnet_port_stats ps;
            port_stats(f.net, sw, p, &ps);
            assert_int_equal(ps.tx_pkts, 0);
        }
    /* Cross rack: + 250 ns per 40 Gb/s hop and 200 ns per uplink. */
    uint64_t t0 = vnet_now(f.net);
    th_send(&f.h[1], 3, 0, 1250, 2);
    vnet_run(f.net);
    assert_int_equal(f.h[3].rx[0].t - t0, 1000 + 100 + 250 + 200 + 250 + 200 + 1000 + 100);
    assert_int_equal(f.h[3].rx[0].src, 1);
    /* It went up from ToR 0 and down a spine's port 1 to ToR 1. */
    uint64_t up = 0, down = 0;
    for (int u = 0; u < 2; u++) {
        struct vnet_port_stats ps;
        port_stats(f.net, 0, vnet_tor_uplink_port(f.net, 0, u), &ps);
        up += ps.tx_pkts;
        port_stats(f.net, 2 + u, 1, &ps);
        down += ps.tx_pkts;
    }
    assert_int_equal(up, 1);
    assert_int_equal(down, 1);
    fx_free(&f);

    /* Invalid shapes are refused. */
    ls_cfg(&c, 2, 2, 0);
    assert_null(vnet_create(&c));
    ls_cfg(&c, 0, 2, 1);
    assert_null(vnet_create(&c));
    /* One rack needs no spines. */
    ls_cfg(&c, 1, 3, 0);
    fx_init(&f, &c, 3);
    th_send(&f.h[2], 0, 0, 1250, 1);
    vnet_run(f.net);
    assert_int_equal(f.h[0].rxn, 1);
    fx_free(&f);
}

static void leafspine__spraying_uses_all_spines(void **state)
{
    (void)state;
    struct vnet_config c;
    ls_cfg(&c, 2, 1, 4);
    c.seed = 11;
    struct fx f;
    fx_init(&f, &c, 2);
    for (uint32_t i = 0; i < 4000; i++)
        th_queue(&f.h[0], 1, 0, 1250, i);
    vnet_host_kick(f.net, 0);
    vnet_run(f.net);
    assert_int_equal(f.h[1].rxn, 4000);
    uint64_t total = 0;
    for (int u = 0; u < 4; u++) {
        struct vnet_port_stats up, down;
        port_stats(f.net, 0, vnet_tor_uplink_port(f.net, 0, u), &up);
        port_stats(f.net, 2 + u, 1, &down);
        assert_int_equal(up.tx_pkts, down.tx_pkts);
        /* Binomial(4000, 1/4): mean 1000, sd 27. */
        assert_true(up.tx_pkts > 880 && up.tx_pkts < 1120);
        total += up.tx_pkts;
    }
    assert_int_equal(total, 4000);
    fx_free(&f);
}

static void leafspine__uplink_bottleneck_queues(void **state)
{
    (void)state;
    /* 4 hosts of rack 0 send to 4 hosts of rack 1 through one 10 Gb/s
     * spine link: the uplink is the bottleneck and is fully busy. */
    struct vnet_config c;
    ls_cfg(&c, 2, 4, 1);
    c.uplink_bps = 10000000000ull;
    struct fx f;
    fx_init(&f, &c, 8);
    for (int s = 0; s < 4; s++) {
        for (uint32_t i = 0; i < 100; i++)
            th_queue(&f.h[s], 4 + s, 0, 1250, i);
        vnet_host_kick(f.net, s);
    }
    vnet_run(f.net);
    struct vnet_port_stats ps;
    port_stats(f.net, 0, vnet_tor_uplink_port(f.net, 0, 0), &ps);
    assert_int_equal(ps.tx_pkts, 400);
    assert_int_equal(ps.busy_ns, 400000);
    assert_true(ps.max_occupancy > 250 * 1250);
    /* Last delivery: uplink busy from 1100 for 400 us, then 200 + 1000 +
     * 200 (spine) + 1000 + 100. */
    uint64_t last = 0;
    for (int d = 4; d < 8; d++) {
        assert_int_equal(f.h[d].rxn, 100);
        if (f.h[d].rx[99].t > last) last = f.h[d].rx[99].t;
    }
    assert_int_equal(last, 1100 + 400000 + 200 + 1000 + 200 + 1000 + 100);
    fx_free(&f);
}

/* ---- Faults ---- */

static void stream_small(struct fx *f, int n)
{
    for (int i = 0; i < n; i++)
        th_queue(&f->h[0], 1, 0, 100, (uint32_t)i);
    vnet_host_kick(f->net, 0);
    vnet_run(f->net);
}

static void faults__loss_rate(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    c.faults.loss = 0.1;
    struct fx f;
    fx_init(&f, &c, 2);
    stream_small(&f, 20000);
    struct vnet_stats st;
    vnet_get_stats(f.net, &st);
    assert_int_equal(st.pkts_sent, 20000);
    assert_int_equal(st.pkts_delivered + st.drops_loss, 20000);
    assert_true(st.drops_loss > 2000 - 250 && st.drops_loss < 2000 + 250); /* sd 42 */
    assert_int_equal(st.dups + st.reorders + st.drops_filter + st.drops_queue, 0);
    fx_free(&f);
}

static void faults__dup_rate(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    c.faults.dup = 0.05;
    struct fx f;
    fx_init(&f, &c, 2);
    stream_small(&f, 20000);
    struct vnet_stats st;
    vnet_get_stats(f.net, &st);
    assert_int_equal(st.pkts_delivered, 20000 + st.dups);
    assert_true(st.dups > 1000 - 160 && st.dups < 1000 + 160); /* sd 31 */
    /* A duplicate follows its original directly. */
    int pairs = 0;
    for (size_t k = 1; k < f.h[1].rxn; k++)
        pairs += f.h[1].rx[k].tag == f.h[1].rx[k - 1].tag;
    assert_int_equal(pairs, st.dups);
    fx_free(&f);
}

static void faults__reorder_rate(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    c.faults.reorder = 0.1;
    c.faults.reorder_max_ns = 5000;
    struct fx f;
    fx_init(&f, &c, 2);
    stream_small(&f, 20000);
    struct vnet_stats st;
    vnet_get_stats(f.net, &st);
    assert_int_equal(st.pkts_delivered, 20000);
    assert_true(st.reorders > 2000 - 250 && st.reorders < 2000 + 250);
    /* Packets leave every 80 ns, so a delay of up to 5 us reorders most of
     * the delayed ones; count deliveries below the highest tag seen. */
    uint32_t maxtag = 0;
    int late = 0;
    for (size_t k = 0; k < f.h[1].rxn; k++) {
        if (k > 0 && f.h[1].rx[k].tag < maxtag) late++;
        if (f.h[1].rx[k].tag > maxtag) maxtag = f.h[1].rx[k].tag;
    }
    assert_true(late > 1500 && late <= (int)st.reorders);
    fx_free(&f);
}

struct filt {
    int calls;
    int dropped;
};

static int drop_first_tag0(void *arg, int src, int dst, const uint8_t *data, size_t len)
{
    struct filt *fl = arg;
    uint32_t tag;
    (void)src, (void)dst;
    assert_true(len >= 4);
    memcpy(&tag, data, 4);
    fl->calls++;
    if (tag == 0 && !fl->dropped) {
        fl->dropped = 1;
        return 1;
    }
    return 0;
}

static void faults__filter_drops_chosen_packet(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    struct filt fl = {0};
    c.faults.filter = drop_first_tag0;
    c.faults.filter_arg = &fl;
    struct fx f;
    fx_init(&f, &c, 2);
    stream_small(&f, 10);
    th_send(&f.h[0], 1, 0, 100, 0); /* a retransmission gets through */
    vnet_run(f.net);
    assert_int_equal(fl.calls, 11);
    assert_int_equal(f.h[1].rxn, 10);
    for (size_t k = 0; k < 9; k++)
        assert_int_equal(f.h[1].rx[k].tag, k + 1);
    assert_int_equal(f.h[1].rx[9].tag, 0);
    struct vnet_stats st;
    vnet_get_stats(f.net, &st);
    assert_int_equal(st.drops_filter, 1);
    fx_free(&f);
}

static void set_total_loss(void *arg, uint64_t now)
{
    struct vnet *net = arg;
    (void)now;
    struct vnet_faults fl = *vnet_get_faults(net);
    fl.loss = fl.loss > 0 ? 0 : 1.0;
    vnet_set_faults(net, &fl);
}

static void faults__change_at_runtime(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    struct fx f;
    fx_init(&f, &c, 2);
    /* Packet i is pulled at i us (1250 B take 1 us); loss is total from
     * 10.5 to 20.5 us, so packets pulled at 11..20 us (tags 11..20) vanish. */
    vnet_at(f.net, 10500, set_total_loss, f.net);
    vnet_at(f.net, 20500, set_total_loss, f.net);
    for (uint32_t i = 0; i < 40; i++)
        th_queue(&f.h[0], 1, 0, 1250, i);
    vnet_host_kick(f.net, 0);
    vnet_run(f.net);
    assert_int_equal(f.h[1].rxn, 30);
    for (size_t k = 0; k < 30; k++)
        assert_int_equal(f.h[1].rx[k].tag, k < 11 ? k : k + 10);
    struct vnet_stats st;
    vnet_get_stats(f.net, &st);
    assert_int_equal(st.drops_loss, 10);
    assert_true(vnet_get_faults(f.net)->loss == 0);
    fx_free(&f);
}

/* ---- Determinism ---- */

struct rnd_host {
    struct th th;
    int nhosts;
    int left;
};

static int rnd_pull(void *ctx, uint64_t now, struct vnet_pkt *pkt)
{
    struct rnd_host *h = ctx;
    (void)now;
    if (h->left == 0) return 0;
    h->left--;
    struct vnet_rng *r = vnet_rng(h->th.net);
    int dst = (int)vnet_rng_below(r, (uint64_t)h->nhosts - 1);
    pkt->dst = dst >= h->th.idx ? dst + 1 : dst;
    pkt->priority = (int)vnet_rng_below(r, 8);
    pkt->len = 64 + vnet_rng_below(r, 9000);
    fill(pkt->data, (uint32_t)h->left, pkt->len);
    return 1;
}

static void rnd_deliver(void *ctx, uint64_t now, int src, const uint8_t *data, size_t len, int prio)
{
    struct rnd_host *h = ctx;
    (void)prio;
    uint32_t tag;
    memcpy(&tag, data, 4);
    fnv(h->th.hash, now);
    fnv(h->th.hash, (uint64_t)src);
    fnv(h->th.hash, (uint64_t)h->th.idx);
    fnv(h->th.hash, tag);
    fnv(h->th.hash, len);
}

static uint64_t random_run(uint64_t seed, struct vnet_stats *st)
{
    struct vnet_config c;
    ls_cfg(&c, 3, 4, 2);
    c.seed = seed;
    c.port_buffer_bytes = 40000;
    c.faults.loss = 0.01;
    c.faults.dup = 0.01;
    c.faults.reorder = 0.02;
    c.faults.reorder_max_ns = 3000;
    struct vnet *net = vnet_create(&c);
    struct rnd_host hs[12];
    uint64_t hash = 1469598103934665603ull;
    const struct vnet_host_ops ops = {.pull = rnd_pull, .deliver = rnd_deliver};
    for (int i = 0; i < 12; i++) {
        memset(&hs[i], 0, sizeof(hs[i]));
        hs[i].th.net = net;
        hs[i].th.hash = &hash;
        hs[i].nhosts = 12;
        hs[i].left = 300;
        hs[i].th.idx = vnet_add_host(net, &ops, &hs[i]);
        vnet_host_kick(net, i);
    }
    vnet_run(net);
    vnet_get_stats(net, st);
    fnv(&hash, vnet_now(net));
    vnet_destroy(net);
    return hash;
}

static void determinism__same_seed_same_trace(void **state)
{
    (void)state;
    struct vnet_stats a, b, c;
    uint64_t h1 = random_run(42, &a);
    uint64_t h2 = random_run(42, &b);
    uint64_t h3 = random_run(43, &c);
    assert_true(h1 == h2);
    assert_memory_equal(&a, &b, sizeof(a));
    assert_true(h1 != h3);
    /* The run exercised every random path. */
    assert_true(a.drops_loss > 0 && a.dups > 0 && a.reorders > 0 && a.drops_queue > 0);
    assert_int_equal(a.pkts_sent, 3600);
    assert_int_equal(a.pkts_sent + a.dups, a.pkts_delivered + a.drops_loss + a.drops_queue +
                                               a.drops_filter + a.drops_down);
}

/* ---- Stats, tracing, lifecycle ---- */

struct trace_count {
    int n[VNET_TR_DUP + 1];
};

static void count_trace(void *arg, uint64_t now, enum vnet_trace_kind kind, int src, int dst,
                        const uint8_t *data, size_t len, int prio)
{
    struct trace_count *tc = arg;
    (void)now, (void)src, (void)dst, (void)data, (void)len, (void)prio;
    tc->n[kind]++;
}

static void stats__trace_and_reset(void **state)
{
    (void)state;
    struct vnet_config c;
    star_cfg(&c);
    c.faults.loss = 0.2;
    c.faults.dup = 0.2;
    struct fx f;
    fx_init(&f, &c, 2);
    struct trace_count tc = {{0}};
    vnet_set_trace(f.net, count_trace, &tc);
    stream_small(&f, 1000);
    struct vnet_stats st;
    vnet_get_stats(f.net, &st);
    assert_int_equal(tc.n[VNET_TR_SEND], 1000);
    assert_int_equal(tc.n[VNET_TR_DROP_LOSS], st.drops_loss);
    assert_int_equal(tc.n[VNET_TR_DUP], st.dups);
    assert_int_equal(tc.n[VNET_TR_DELIVER], st.pkts_delivered);
    assert_true(st.events > 0);
    assert_int_equal(st.events, vnet_events_processed(f.net));

    uint64_t ev = vnet_events_processed(f.net);
    vnet_reset_stats(f.net);
    vnet_get_stats(f.net, &st);
    assert_int_equal(st.events, 0);
    assert_int_equal(st.pkts_sent + st.pkts_delivered + st.drops_loss + st.dups, 0);
    assert_int_equal(vnet_events_processed(f.net), ev);
    struct vnet_host_stats hs;
    vnet_get_host_stats(f.net, 0, &hs);
    assert_int_equal(hs.tx_pkts, 0);
    struct vnet_port_stats ps;
    downlink_stats(f.net, 1, &ps);
    assert_int_equal(ps.tx_pkts + ps.busy_ns + ps.max_occupancy, 0);
    assert_int_equal(vnet_get_host_stats(f.net, 5, &hs), -1);
    assert_int_equal(vnet_get_port_stats(f.net, 1, 0, &ps), -1);
    assert_int_equal(vnet_seed(f.net), 1);
    fx_free(&f);
}

static void lifecycle__destroy_with_packets_in_flight(void **state)
{
    (void)state;
    /* Under ASan/valgrind this proves queued and in-flight packets and
     * pending events are all released. */
    struct vnet_config c;
    star_cfg(&c);
    c.faults.dup = 0.3;
    struct fx f;
    fx_init(&f, &c, 3);
    for (uint32_t i = 0; i < 50; i++) {
        th_queue(&f.h[0], 2, (int)(i % 8), 40000, i);
        th_queue(&f.h[1], 2, (int)(i % 8), 300, i);
    }
    vnet_host_kick(f.net, 0);
    vnet_host_kick(f.net, 1);
    struct evarg a = {0};
    vnet_at(f.net, 1000000000, ev_cb, &a); /* never runs */
    vnet_run_until(f.net, 200000);
    assert_true(vnet_pending_events(f.net) > 0);
    struct vnet_port_stats ps;
    downlink_stats(f.net, 2, &ps);
    assert_true(ps.occupancy > 0);
    fx_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rng__deterministic_and_in_range),
        cmocka_unit_test(rng__seed_from_env),
        cmocka_unit_test(evq__order_is_time_then_fifo),
        cmocka_unit_test(evq__far_events_keep_fifo_order),
        cmocka_unit_test(evq__cancel),
        cmocka_unit_test(evq__run_until_and_stop),
        cmocka_unit_test(evq__many_events_sorted),
        cmocka_unit_test(star__single_packet_latency),
        cmocka_unit_test(star__stream_reaches_line_rate),
        cmocka_unit_test(star__two_senders_share_downlink),
        cmocka_unit_test(star__strict_priority_overtakes),
        cmocka_unit_test(star__buffer_overflow_drops_counted),
        cmocka_unit_test(star__large_packets_intact),
        cmocka_unit_test(host__kick_pulls_until_empty),
        cmocka_unit_test(host__down_neither_sends_nor_receives),
        cmocka_unit_test(leafspine__routing_and_latency),
        cmocka_unit_test(leafspine__spraying_uses_all_spines),
        cmocka_unit_test(leafspine__uplink_bottleneck_queues),
        cmocka_unit_test(faults__loss_rate),
        cmocka_unit_test(faults__dup_rate),
        cmocka_unit_test(faults__reorder_rate),
        cmocka_unit_test(faults__filter_drops_chosen_packet),
        cmocka_unit_test(faults__change_at_runtime),
        cmocka_unit_test(determinism__same_seed_same_trace),
        cmocka_unit_test(stats__trace_and_reset),
        cmocka_unit_test(lifecycle__destroy_with_packets_in_flight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
