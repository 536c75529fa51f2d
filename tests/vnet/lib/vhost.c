#include "vhost.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t vhost_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

homa_addr vhost_addr(int index)
{
    homa_addr a;
    memset(&a, 0, sizeof(a));
    uint32_t v = (uint32_t)index + 1;
    a.bytes[12] = (uint8_t)(v >> 24);
    a.bytes[13] = (uint8_t)(v >> 16);
    a.bytes[14] = (uint8_t)(v >> 8);
    a.bytes[15] = (uint8_t)v;
    return a;
}

int vhost_index(const homa_addr *a)
{
    uint32_t v = ((uint32_t)a->bytes[12] << 24) | ((uint32_t)a->bytes[13] << 16) |
                 ((uint32_t)a->bytes[14] << 8) | a->bytes[15];
    return (int)v - 1;
}

static void timer_fire(void *arg, uint64_t now);

static void arm_timer(struct vhost *h)
{
    uint64_t d = homa_engine_next_deadline(h->eng);
    if (d == h->timer_at && h->timer_ev) return;
    if (h->timer_ev) vnet_cancel(h->net, h->timer_ev);
    h->timer_ev = 0;
    h->timer_at = d;
    if (d != UINT64_MAX) h->timer_ev = vnet_at(h->net, d, timer_fire, h);
}

static void timer_fire(void *arg, uint64_t now)
{
    struct vhost *h = arg;
    h->timer_ev = 0;
    h->timer_at = UINT64_MAX;
    uint64_t t0 = h->timing ? vhost_clock_ns() : 0;
    homa_engine_timer(h->eng, now);
    if (h->timing) h->eng_ns += vhost_clock_ns() - t0;
    vnet_host_kick(h->net, h->index); /* the pacer or timers may have made packets */
    arm_timer(h);
}

static int pull(void *ctx, uint64_t now, struct vnet_pkt *pkt)
{
    struct vhost *h = ctx;
    homa_pkt_out o;
    uint64_t t0 = h->timing ? vhost_clock_ns() : 0;
    int n = homa_engine_pull(h->eng, now, &o, 1);
    if (h->timing) h->eng_ns += vhost_clock_ns() - t0;
    if (n == 0) {
        arm_timer(h); /* the pacer may want a wake-up */
        return 0;
    }
    memcpy(pkt->data, o.hdr, o.hdr_len);
    if (o.payload_len) memcpy(pkt->data + o.hdr_len, o.payload, o.payload_len);
    pkt->len = (size_t)o.hdr_len + o.payload_len;
    pkt->priority = o.priority;
    pkt->dst = vhost_index(&o.dst);
    homa_engine_pull_done(h->eng);
    h->pkts_out++;
    return 1;
}

static void engine_input(struct vhost *h, uint64_t now, int src, const uint8_t *data, size_t len)
{
    homa_addr a = vhost_addr(src);
    uint64_t t0 = h->timing ? vhost_clock_ns() : 0;
    homa_engine_input(h->eng, now, &a, data, len);
    if (h->timing) h->eng_ns += vhost_clock_ns() - t0;
}

/* ---- receive delay ----
 * The delay is the same for every packet, so the waiting packets form a
 * FIFO ordered by due time and one pending event (for the head) suffices.
 * Entries keep their buffers when recycled, so steady state does not
 * allocate. */

struct rxq_ent {
    uint64_t due;
    int src;
    uint32_t len, cap;
    uint8_t *data;
};

struct vhost_rxq {
    struct rxq_ent *e;
    uint32_t cap, head, count; /* ring; cap is a power of two */
    vnet_event_id ev;
};

static void rxq_fire(void *arg, uint64_t now);

static struct rxq_ent *rxq_push(struct vhost_rxq *q)
{
    if (q->count == q->cap) {
        uint32_t ncap = q->cap ? 2 * q->cap : 64;
        struct rxq_ent *ne = calloc(ncap, sizeof(*ne));
        if (!ne) return NULL;
        /* Unroll the ring into the new array; the spare slots of the old one
         * (none: it is full) carry no buffers. */
        for (uint32_t i = 0; i < q->count; i++)
            ne[i] = q->e[(q->head + i) & (q->cap - 1)];
        free(q->e);
        q->e = ne;
        q->cap = ncap;
        q->head = 0;
    }
    return &q->e[(q->head + q->count++) & (q->cap - 1)];
}

static void rx_enqueue(struct vhost *h, uint64_t now, int src, const uint8_t *data, size_t len)
{
    if (!h->rxq) h->rxq = calloc(1, sizeof(*h->rxq));
    struct vhost_rxq *q = h->rxq;
    struct rxq_ent *e = q ? rxq_push(q) : NULL;
    if (e && e->cap < len) {
        uint8_t *nd = realloc(e->data, len);
        if (nd) {
            e->data = nd;
            e->cap = (uint32_t)len;
        } else {
            q->count--;
            e = NULL;
        }
    }
    if (!e) {
        /* Out of memory: deliver late rather than lose the packet. */
        engine_input(h, now, src, data, len);
        return;
    }
    e->due = now + h->rx_delay_ns;
    e->src = src;
    e->len = (uint32_t)len;
    memcpy(e->data, data, len);
    if (q->count == 1) q->ev = vnet_at(h->net, e->due, rxq_fire, h);
}

static void rxq_fire(void *arg, uint64_t now)
{
    struct vhost *h = arg;
    struct vhost_rxq *q = h->rxq;
    q->ev = 0;
    /* Hand over everything due; the engine may run application callbacks
     * that send, but they never add to this queue (only deliver does). */
    while (q->count > 0 && q->e[q->head].due <= now) {
        struct rxq_ent *e = &q->e[q->head];
        q->head = (q->head + 1) & (q->cap - 1);
        q->count--;
        engine_input(h, now, e->src, e->data, e->len);
    }
    if (q->count > 0) q->ev = vnet_at(h->net, q->e[q->head].due, rxq_fire, h);
    arm_timer(h);
}

static void rxq_free(struct vhost *h)
{
    struct vhost_rxq *q = h->rxq;
    if (!q) return;
    if (q->ev) vnet_cancel(h->net, q->ev);
    for (uint32_t i = 0; i < q->cap; i++)
        free(q->e[i].data);
    free(q->e);
    free(q);
    h->rxq = NULL;
}

static void deliver(void *ctx, uint64_t now, int src, const uint8_t *data, size_t len, int prio)
{
    (void)prio;
    struct vhost *h = ctx;
    h->pkts_in++;
    if (h->rx_delay_ns) {
        rx_enqueue(h, now, src, data, len);
        return;
    }
    engine_input(h, now, src, data, len);
    arm_timer(h);
}

static void want_tx(void *ctx)
{
    struct vhost *h = ctx;
    vnet_host_kick(h->net, h->index);
}

static void ready(void *ctx, uint16_t port)
{
    struct vhost *h = ctx;
    if (h->on_ready) h->on_ready(h, port, h->app);
}

static uint64_t rnd(void *ctx)
{
    struct vhost *h = ctx;
    return vnet_rng_next(vnet_rng(h->net));
}

struct vhost *vhost_create(struct vnet *net, const homa_config *cfg, vhost_ready_fn on_ready,
                           void *app)
{
    struct vhost *h = calloc(1, sizeof(*h));
    if (!h) return NULL;
    h->net = net;
    h->on_ready = on_ready;
    h->app = app;
    h->timer_at = UINT64_MAX;
    homa_engine_ops ops = {.ctx = h, .random = rnd, .want_tx = want_tx, .ready = ready};
    if (homa_engine_create(cfg, &ops, &h->eng) != 0) {
        free(h);
        return NULL;
    }
    static const struct vnet_host_ops hops = {pull, deliver};
    h->index = vnet_add_host(net, &hops, h);
    if (h->index < 0) {
        homa_engine_destroy(h->eng);
        free(h);
        return NULL;
    }
    h->addr = vhost_addr(h->index);
    return h;
}

void vhost_destroy(struct vhost *h)
{
    if (!h) return;
    if (h->timer_ev) vnet_cancel(h->net, h->timer_ev);
    rxq_free(h);
    homa_engine_destroy(h->eng);
    free(h);
}

void vhost_poke(struct vhost *h)
{
    vnet_host_kick(h->net, h->index);
    arm_timer(h);
}
