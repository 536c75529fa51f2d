/* vnet: event core, hosts, switches and faults.  See vnet.h for the model.
 *
 * Steady-state operation does no malloc: events live in a slot array with a
 * free stack, packets in pooled descriptors, payloads in per-size-class free
 * lists.  Everything grows geometrically to the run's peak and is reused. */
#include "vnet.h"

#include "io/fault_class.h"

_Static_assert(VNET_FAULT_CLASSES == HOMA_FAULT_CLASS_COUNT, "vnet classes are Homa's");

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Event core ----
 * Events are ordered by (time, insertion order), which makes runs exactly
 * reproducible.  Two structures hold them:
 *  - a timing wheel of 2^16 one-nanosecond buckets covering the window
 *    [base, base + 2^16), base being the time of the last event run.  A
 *    bucket holds events of exactly one time in a FIFO list, so FIFO order
 *    is insertion order; a three-level bitmap finds the next nonempty
 *    bucket in O(1).  Nearly all events (packet hops, port wake-ups) land
 *    here, at O(1) per insert and pop.
 *  - a 4-ary min-heap for events beyond the window (timers), keyed by time
 *    and a 40-bit insertion sequence packed above the 24-bit slot index.
 *    Whenever base advances, heap events that entered the window move into
 *    the wheel in (time, sequence) order, before anything else can be
 *    inserted at those times, so bucket FIFOs stay in insertion order.
 * Limits (2^40 far events per run, 2^24 pending events) are checked. */

#define SLOT_BITS 24
#define SLOT_MASK ((UINT64_C(1) << SLOT_BITS) - 1)
#define MAX_SLOTS (UINT64_C(1) << SLOT_BITS)
#define MAX_SEQ (UINT64_C(1) << (64 - SLOT_BITS))
#define WHEEL_BITS 16
#define WHEEL_SIZE (UINT32_C(1) << WHEEL_BITS)
#define WHEEL_MASK (WHEEL_SIZE - 1)
#define WHEEL_L0 (WHEEL_SIZE / 64)
#define WHEEL_L1 (WHEEL_L0 / 64)
#define NIL UINT32_MAX

enum ev_kind {
    EVK_FREE,
    EVK_USER,
    EVK_CANCELLED,
    EVK_NIC,    /* arg: struct host; NIC may pull */
    EVK_ARRIVE, /* arg: struct pbuf; last bit reached the next node */
    EVK_WAKE,   /* arg: struct port; port finished a packet, queue nonempty */
};

struct ev_slot {
    vnet_event_fn fn;
    void *arg;
    uint32_t gen;  /* bumped on free/cancel so stale handles never match */
    uint32_t next; /* wheel bucket FIFO link */
    uint8_t kind;
};

struct heap_ent {
    uint64_t time;
    uint64_t key;
};

/* ---- Packets ----
 * Payload buffers come in power-of-two size classes 128 B .. 64 KiB plus a
 * last class of exactly VNET_MAX_PKT.  pull writes into a last-class
 * scratch buffer; a large packet adopts the scratch buffer (no second
 * copy), a small one is copied into a right-sized buffer so memory in
 * flight stays proportional to bytes in flight. */

#define NUM_CLASSES 11
#define LAST_CLASS (NUM_CLASSES - 1)
#define ADOPT_MIN_LEN 32768
#define PBUF_CHUNK 256

struct vnet_switch;

struct pbuf {
    struct pbuf *next; /* queue or free list */
    uint8_t *data;
    struct vnet_switch *at; /* switch it arrives at next; NULL: dst host */
    uint32_t len;
    uint32_t wire; /* len + overhead: what links and buffers account */
    int32_t src, dst;
    uint8_t prio, cls;
};

struct pchunk {
    struct pchunk *next;
    struct pbuf p[PBUF_CHUNK];
};

struct bufnode {
    struct bufnode *next;
};

/* ---- Switch ports ---- */

struct pqueue {
    struct pbuf *head, *tail;
};

struct port {
    struct pqueue q[VNET_NUM_PRIOS];
    uint32_t mask; /* bit p set iff q[p] nonempty */
    bool wake_pending;
    uint64_t bps, delay_ns, carry;
    uint64_t busy_until; /* last bit of the current packet leaves */
    uint64_t cur_wire;   /* wire bytes of that packet */
    uint64_t queued_wire;
    uint64_t buffer;          /* 0: unlimited */
    struct vnet_switch *peer; /* NULL: leads to a host */
    uint64_t tx_pkts, tx_bytes, drops, drop_bytes, busy_ns, max_occ;
    uint64_t queued[VNET_NUM_PRIOS];
};

struct vnet_switch {
    int rack;   /* ToR: its rack; spine: -1 */
    int n_down; /* ToR: ports leading to hosts (come first) */
    int nports, cap;
    struct port **ports;
};

/* ---- Hosts ---- */

enum nic_state {
    NIC_IDLE,    /* asleep until kicked */
    NIC_PENDING, /* an EVK_NIC event is scheduled */
    NIC_PULLING, /* inside the host's pull callback */
};

/* A packet held back by reorder_depth until enough later ones have left. */
struct held {
    struct held *next;
    struct pbuf *p;
    uint32_t wait;       /* later packets of the host still to leave */
    vnet_event_id timer; /* reorder_max_ns bound; 0 = none */
    struct vnet *net;
    struct host *h;
};

struct host {
    struct vnet_host_ops ops;
    void *ctx;
    int idx, rack, slot;
    bool up;
    uint8_t nic;
    bool rekick; /* kicked while pulling */
    struct vnet_switch *tor;
    uint64_t carry, tx_free_at;
    struct vnet_host_stats st;
    bool ge_bad;       /* burst loss: this host's chain is in the bad state */
    struct held *held; /* reorder_depth, oldest first */
};

struct vnet {
    struct vnet_config cfg;
    struct vnet_rng rng;
    double ge_p_bad, ge_p_good; /* burst loss transitions */
    bool class_faults;          /* loss_types or class_loss set: classify packets */
    uint64_t now;
    bool stopped, running;

    uint64_t base; /* wheel window start; <= now */
    uint32_t *whead, *wtail;
    size_t wcount;
    uint64_t wl0[WHEEL_L0]; /* bit b: bucket b nonempty */
    uint64_t wl1[WHEEL_L1]; /* bit w: wl0[w] nonzero */
    uint64_t wl2;           /* bit i: wl1[i] nonzero */
    struct heap_ent *heap;
    size_t hn, hcap;
    struct ev_slot *slots;
    uint32_t *free_slots;
    uint32_t nslots, nfree, slotcap;
    uint64_t seq;
    uint64_t events_total, events_at_reset;

    struct host **hosts;
    int nhosts, hostcap, maxhosts;
    struct vnet_switch **sw;
    int nsw;

    struct pbuf *free_pbufs;
    struct pchunk *chunks;
    struct bufnode *free_bufs[NUM_CLASSES];
    uint8_t *scratch;

    struct vnet_stats st;
    vnet_trace_fn trace;
    void *trace_arg;
};

static void fatal(const char *msg)
{
    fprintf(stderr, "vnet: fatal: %s\n", msg);
    abort();
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) fatal("out of memory");
    return p;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n, sz);
    if (!p) fatal("out of memory");
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n);
    if (!p) fatal("out of memory");
    return p;
}

/* ---- Event core implementation ---- */

static inline bool ent_less(uint64_t time, uint64_t key, const struct heap_ent *b)
{
    return time < b->time || (time == b->time && key < b->key);
}

static void heap_push(struct vnet *net, uint64_t time, uint64_t key)
{
    if (net->hn == net->hcap) {
        net->hcap = net->hcap ? 2 * net->hcap : 1024;
        net->heap = xrealloc(net->heap, net->hcap * sizeof(*net->heap));
    }
    struct heap_ent *h = net->heap;
    size_t i = net->hn++;
    while (i > 0) {
        size_t parent = (i - 1) >> 2;
        if (!ent_less(time, key, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i].time = time;
    h[i].key = key;
}

/* Remove the root (caller has read it). */
static void heap_pop(struct vnet *net)
{
    struct heap_ent *h = net->heap;
    size_t n = --net->hn;
    if (n == 0) return;
    struct heap_ent last = h[n];
    size_t i = 0;
    for (;;) {
        size_t c = 4 * i + 1;
        if (c >= n) break;
        size_t end = c + 4 < n ? c + 4 : n;
        size_t best = c;
        for (size_t j = c + 1; j < end; j++)
            if (ent_less(h[j].time, h[j].key, &h[best])) best = j;
        if (!ent_less(h[best].time, h[best].key, &last)) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = last;
}

static void wheel_insert(struct vnet *net, uint64_t time, uint32_t s)
{
    uint32_t b = (uint32_t)time & WHEEL_MASK;
    net->slots[s].next = NIL;
    if (net->whead[b] == NIL) {
        net->whead[b] = s;
        uint32_t w = b >> 6;
        net->wl0[w] |= UINT64_C(1) << (b & 63);
        net->wl1[w >> 6] |= UINT64_C(1) << (w & 63);
        net->wl2 |= UINT64_C(1) << (w >> 6);
    } else {
        net->slots[net->wtail[b]].next = s;
    }
    net->wtail[b] = s;
    net->wcount++;
}

/* First nonempty bucket >= pos, or NIL. */
static uint32_t wheel_find_from(const struct vnet *net, uint32_t pos)
{
    uint32_t w = pos >> 6;
    uint64_t m = net->wl0[w] & (~UINT64_C(0) << (pos & 63));
    if (m) return (w << 6) | (uint32_t)__builtin_ctzll(m);
    uint32_t x = w + 1;
    if (x >= WHEEL_L0) return NIL;
    uint32_t i = x >> 6;
    m = net->wl1[i] & (~UINT64_C(0) << (x & 63));
    if (!m) {
        if (i + 1 >= WHEEL_L1) return NIL;
        uint64_t m2 = net->wl2 & (~UINT64_C(0) << (i + 1));
        if (!m2) return NIL;
        i = (uint32_t)__builtin_ctzll(m2);
        m = net->wl1[i];
    }
    w = (i << 6) | (uint32_t)__builtin_ctzll(m);
    return (w << 6) | (uint32_t)__builtin_ctzll(net->wl0[w]);
}

/* Unlink the head of bucket b (nonempty). */
static uint32_t wheel_take(struct vnet *net, uint32_t b)
{
    uint32_t s = net->whead[b];
    net->whead[b] = net->slots[s].next;
    if (net->whead[b] == NIL) {
        uint32_t w = b >> 6;
        net->wl0[w] &= ~(UINT64_C(1) << (b & 63));
        if (!net->wl0[w]) {
            net->wl1[w >> 6] &= ~(UINT64_C(1) << (w & 63));
            if (!net->wl1[w >> 6]) net->wl2 &= ~(UINT64_C(1) << (w >> 6));
        }
    }
    net->wcount--;
    return s;
}

/* Move heap events that entered the window into the wheel, in order. */
static void wheel_migrate(struct vnet *net)
{
    while (net->hn && net->heap[0].time - net->base < WHEEL_SIZE) {
        struct heap_ent top = net->heap[0];
        heap_pop(net);
        wheel_insert(net, top.time, (uint32_t)(top.key & SLOT_MASK));
    }
}

static uint32_t slot_alloc(struct vnet *net)
{
    if (net->nfree) return net->free_slots[--net->nfree];
    if (net->nslots == net->slotcap) {
        if (net->slotcap >= MAX_SLOTS) fatal("more than 2^24 pending events");
        net->slotcap = net->slotcap ? 2 * net->slotcap : 1024;
        net->slots = xrealloc(net->slots, net->slotcap * sizeof(*net->slots));
        net->free_slots = xrealloc(net->free_slots, net->slotcap * sizeof(*net->free_slots));
    }
    uint32_t s = net->nslots++;
    net->slots[s].gen = 1;
    return s;
}

static inline void gen_bump(struct ev_slot *e)
{
    if (++e->gen == 0) e->gen = 1; /* handles are never 0 */
}

static void slot_free(struct vnet *net, uint32_t s)
{
    struct ev_slot *e = &net->slots[s];
    gen_bump(e);
    e->kind = EVK_FREE;
    net->free_slots[net->nfree++] = s;
}

static vnet_event_id ev_schedule(struct vnet *net, uint64_t time, uint8_t kind, vnet_event_fn fn,
                                 void *arg)
{
    uint32_t s = slot_alloc(net);
    struct ev_slot *e = &net->slots[s];
    e->fn = fn;
    e->arg = arg;
    e->kind = kind;
    /* time >= now >= base, so the subtraction cannot wrap. */
    if (time - net->base < WHEEL_SIZE) {
        wheel_insert(net, time, s);
    } else {
        if (net->seq >= MAX_SEQ) fatal("more than 2^40 far events scheduled");
        heap_push(net, time, (net->seq++ << SLOT_BITS) | s);
    }
    return ((uint64_t)e->gen << 32) | s;
}

uint64_t vnet_now(const struct vnet *net)
{
    return net->now;
}

vnet_event_id vnet_at(struct vnet *net, uint64_t time, vnet_event_fn fn, void *arg)
{
    if (!fn) fatal("vnet_at: NULL function");
    return ev_schedule(net, time < net->now ? net->now : time, EVK_USER, fn, arg);
}

vnet_event_id vnet_after(struct vnet *net, uint64_t delay, vnet_event_fn fn, void *arg)
{
    uint64_t t = net->now + delay;
    return vnet_at(net, t < net->now ? UINT64_MAX : t, fn, arg);
}

bool vnet_cancel(struct vnet *net, vnet_event_id id)
{
    uint32_t s = (uint32_t)(id & 0xffffffffu);
    uint32_t gen = (uint32_t)(id >> 32);
    if (gen == 0 || s >= net->nslots) return false;
    struct ev_slot *e = &net->slots[s];
    if (e->gen != gen || e->kind != EVK_USER) return false;
    /* Lazy removal: the queued entry stays and is skipped when reached. */
    e->kind = EVK_CANCELLED;
    gen_bump(e);
    return true;
}

void vnet_stop(struct vnet *net)
{
    net->stopped = true;
}

uint64_t vnet_events_processed(const struct vnet *net)
{
    return net->events_total;
}

size_t vnet_pending_events(const struct vnet *net)
{
    return net->wcount + net->hn;
}

/* ---- Packet pools ---- */

static inline size_t class_size(int c)
{
    return c == LAST_CLASS ? VNET_MAX_PKT : (size_t)128 << c;
}

static inline int class_of(size_t len)
{
    if (len <= 128) return 0;
    int c = 64 - __builtin_clzll((unsigned long long)(len - 1)) - 7;
    return c > LAST_CLASS ? LAST_CLASS : c;
}

static uint8_t *buf_get(struct vnet *net, int c)
{
    struct bufnode *b = net->free_bufs[c];
    if (b) {
        net->free_bufs[c] = b->next;
        return (uint8_t *)b;
    }
    return xmalloc(class_size(c));
}

static inline void buf_put(struct vnet *net, uint8_t *data, int c)
{
    struct bufnode *b = (struct bufnode *)(void *)data;
    b->next = net->free_bufs[c];
    net->free_bufs[c] = b;
}

static struct pbuf *pbuf_get(struct vnet *net)
{
    if (!net->free_pbufs) {
        struct pchunk *ch = xmalloc(sizeof(*ch));
        ch->next = net->chunks;
        net->chunks = ch;
        for (int i = 0; i < PBUF_CHUNK; i++) {
            ch->p[i].next = net->free_pbufs;
            net->free_pbufs = &ch->p[i];
        }
    }
    struct pbuf *p = net->free_pbufs;
    net->free_pbufs = p->next;
    return p;
}

static inline void pbuf_free(struct vnet *net, struct pbuf *p)
{
    buf_put(net, p->data, p->cls);
    p->next = net->free_pbufs;
    net->free_pbufs = p;
}

#define TRACE(net, kind, p)                                                                        \
    do {                                                                                           \
        if ((net)->trace)                                                                          \
            (net)->trace((net)->trace_arg, (net)->now, (kind), (p)->src, (p)->dst, (p)->data,      \
                         (p)->len, (p)->prio);                                                     \
    } while (0)

/* Serialisation time of `wire` bytes; the sub-nanosecond remainder is kept
 * per link and added to the next packet, so a busy link runs at exactly its
 * rate over time. */
static inline uint64_t tx_time(uint64_t wire, uint64_t bps, uint64_t *carry)
{
    uint64_t num = wire * UINT64_C(8000000000) + *carry;
    *carry = num % bps;
    return num / bps;
}

/* ---- Switches ---- */

static void port_transmit(struct vnet *net, struct port *pt, struct pbuf *p)
{
    uint64_t tx = tx_time(p->wire, pt->bps, &pt->carry);
    pt->busy_until = net->now + tx;
    pt->cur_wire = p->wire;
    pt->tx_pkts++;
    pt->tx_bytes += p->len;
    pt->busy_ns += tx;
    p->at = pt->peer;
    uint64_t t = pt->busy_until + pt->delay_ns + (pt->peer ? net->cfg.switch_delay_ns : 0);
    ev_schedule(net, t, EVK_ARRIVE, NULL, p);
}

static inline uint64_t port_occupancy(const struct port *pt, uint64_t now)
{
    return pt->queued_wire + (pt->busy_until > now ? pt->cur_wire : 0);
}

static void port_enqueue(struct vnet *net, struct port *pt, struct pbuf *p)
{
    uint64_t occ = port_occupancy(pt, net->now) + p->wire;
    if (pt->buffer && occ > pt->buffer) {
        pt->drops++;
        pt->drop_bytes += p->len;
        net->st.drops_queue++;
        TRACE(net, VNET_TR_DROP_QUEUE, p);
        pbuf_free(net, p);
        return;
    }
    if (occ > pt->max_occ) pt->max_occ = occ;
    if (pt->busy_until <= net->now && pt->mask == 0) {
        port_transmit(net, pt, p);
        return;
    }
    struct pqueue *q = &pt->q[p->prio];
    p->next = NULL;
    if (q->tail)
        q->tail->next = p;
    else
        q->head = p;
    q->tail = p;
    pt->mask |= 1u << p->prio;
    pt->queued_wire += p->wire;
    pt->queued[p->prio]++;
    /* One wake per port at a time: the next packet is chosen only when the
     * link frees, so later high-priority arrivals can still overtake. */
    if (!pt->wake_pending) {
        pt->wake_pending = true;
        ev_schedule(net, pt->busy_until, EVK_WAKE, NULL, pt);
    }
}

static void port_wake(struct vnet *net, struct port *pt)
{
    pt->wake_pending = false;
    if (!pt->mask) return;
    int prio = 31 - __builtin_clz(pt->mask);
    struct pqueue *q = &pt->q[prio];
    struct pbuf *p = q->head;
    q->head = p->next;
    if (!q->head) {
        q->tail = NULL;
        pt->mask &= ~(1u << prio);
    }
    pt->queued_wire -= p->wire;
    pt->queued[prio]--;
    port_transmit(net, pt, p);
    if (pt->mask) {
        pt->wake_pending = true;
        ev_schedule(net, pt->busy_until, EVK_WAKE, NULL, pt);
    }
}

static void switch_receive(struct vnet *net, struct vnet_switch *sw, struct pbuf *p)
{
    const struct host *dh = net->hosts[p->dst];
    struct port *pt;
    if (sw->rack < 0) {
        pt = sw->ports[dh->rack];
    } else if (dh->rack == sw->rack) {
        pt = sw->ports[dh->slot];
    } else {
        /* Packet spraying: uniform spine per packet. */
        int nup = sw->nports - sw->n_down;
        int u = nup == 1 ? 0 : (int)vnet_rng_below(&net->rng, (uint64_t)nup);
        pt = sw->ports[sw->n_down + u];
    }
    port_enqueue(net, pt, p);
}

static struct port *port_new(uint64_t bps, uint64_t delay, uint64_t buffer,
                             struct vnet_switch *peer)
{
    struct port *pt = xcalloc(1, sizeof(*pt));
    pt->bps = bps;
    pt->delay_ns = delay;
    pt->buffer = buffer;
    pt->peer = peer;
    return pt;
}

static void switch_add_port(struct vnet_switch *sw, struct port *pt)
{
    if (sw->nports == sw->cap) {
        sw->cap = sw->cap ? 2 * sw->cap : 16;
        sw->ports = xrealloc(sw->ports, (size_t)sw->cap * sizeof(*sw->ports));
    }
    sw->ports[sw->nports++] = pt;
}

/* ---- Hosts ---- */

static void host_receive(struct vnet *net, struct pbuf *p)
{
    struct host *h = net->hosts[p->dst];
    if (!h->up) {
        h->st.rx_dropped_down++;
        net->st.drops_down++;
        TRACE(net, VNET_TR_DROP_DOWN, p);
        pbuf_free(net, p);
        return;
    }
    h->st.rx_pkts++;
    h->st.rx_bytes += p->len;
    net->st.pkts_delivered++;
    net->st.bytes_delivered += p->len;
    TRACE(net, VNET_TR_DELIVER, p);
    h->ops.deliver(h->ctx, net->now, p->src, p->data, p->len, p->prio);
    pbuf_free(net, p);
}

static void nic_schedule(struct vnet *net, struct host *h, uint64_t t)
{
    h->nic = NIC_PENDING;
    ev_schedule(net, t, EVK_NIC, NULL, h);
}

static bool host_in(uint64_t mask, int host)
{
    return mask == 0 || (host < 64 && (mask >> host & 1u) != 0);
}

/* Blackout, per-class loss and (burst) loss, in that order; counts the drop. */
static bool fault_decide(struct vnet *net, struct host *h, uint64_t now, const struct vnet_pkt *pkt)
{
    const struct vnet_faults *f = &net->cfg.faults;
    if (f->blackout_ns > 0 && now >= f->blackout_start_ns) {
        uint64_t t = now - f->blackout_start_ns;
        if (f->blackout_every_ns != 0) t %= f->blackout_every_ns;
        if (t < f->blackout_ns) {
            net->st.drops_blackout++;
            return true;
        }
    }
    unsigned cls = 0;
    if (net->class_faults) {
        cls = homa_fault_classify(pkt->data, pkt->len);
        for (unsigned m = cls; m != 0; m &= m - 1) {
            int c = __builtin_ctz(m);
            if (f->class_loss[c] > 0 && vnet_rng_uniform(&net->rng) < f->class_loss[c]) {
                net->st.drops_type++;
                return true;
            }
        }
    }
    if (f->loss <= 0 || (f->loss_types != 0 && (cls & f->loss_types) == 0)) return false;
    bool lost;
    if (f->burst > 0) {
        double u = vnet_rng_uniform(&net->rng);
        h->ge_bad = h->ge_bad ? !(u < net->ge_p_good) : u < net->ge_p_bad;
        lost = h->ge_bad;
    } else {
        lost = vnet_rng_uniform(&net->rng) < f->loss;
    }
    if (lost) net->st.drops_loss++;
    return lost;
}

static bool fault_lost(struct vnet *net, struct host *h, uint64_t now, const struct vnet_pkt *pkt)
{
    if (!fault_decide(net, h, now, pkt)) return false;
    if (homa_fault_classify(pkt->data, pkt->len) & (1u << HOMA_FAULT_CLASS_DATA))
        net->st.lost_data_bytes += pkt->len - HOMA_DATA_HDR_LEN;
    return true;
}

static void held_unlink(struct host *h, struct held *hd)
{
    for (struct held **pp = &h->held; *pp != NULL; pp = &(*pp)->next)
        if (*pp == hd) {
            *pp = hd->next;
            return;
        }
}

/* reorder_max_ns passed before enough later packets did: let it go. */
static void held_timeout(void *arg, uint64_t now)
{
    struct held *hd = arg;
    struct vnet *net = hd->net;
    held_unlink(hd->h, hd);
    ev_schedule(net, now + net->cfg.host_delay_ns + net->cfg.switch_delay_ns, EVK_ARRIVE, NULL,
                hd->p);
    free(hd);
}

/* Holds p at its source (reorder_depth); false if out of memory (then it
 * takes the random extra delay instead). */
static bool hold_back(struct vnet *net, struct host *h, struct pbuf *p)
{
    struct held *hd = calloc(1, sizeof(*hd));
    if (hd == NULL) return false;
    hd->p = p;
    hd->wait = net->cfg.faults.reorder_depth;
    hd->net = net;
    hd->h = h;
    if (net->cfg.faults.reorder_max_ns > 0)
        hd->timer = vnet_after(net, net->cfg.faults.reorder_max_ns, held_timeout, hd);
    struct held **pp = &h->held;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = hd;
    return true;
}

/* A later packet of h left, arriving at t: the held packets it completes
 * arrive right behind it (same time, scheduled after), oldest first. */
static void release_counted(struct vnet *net, struct host *h, uint64_t t)
{
    struct held **pp = &h->held;
    while (*pp != NULL) {
        struct held *hd = *pp;
        if (--hd->wait == 0) {
            *pp = hd->next;
            if (hd->timer) vnet_cancel(net, hd->timer);
            ev_schedule(net, t, EVK_ARRIVE, NULL, hd->p);
            free(hd);
        } else {
            pp = &hd->next;
        }
    }
}

static void nic_pull(struct vnet *net, struct host *h)
{
    h->nic = NIC_IDLE;
    if (!h->up) return;
    struct vnet_pkt pkt = {.dst = -1, .priority = 0, .len = 0, .data = net->scratch};
    h->nic = NIC_PULLING;
    h->rekick = false;
    int got = h->ops.pull(h->ctx, net->now, &pkt);
    h->nic = NIC_IDLE;
    if (!got) {
        if (h->rekick && h->up) nic_schedule(net, h, net->now);
        return;
    }
    if (pkt.dst < 0 || pkt.dst >= net->nhosts || pkt.len == 0 || pkt.len > VNET_MAX_PKT ||
        pkt.priority < 0 || pkt.priority >= VNET_NUM_PRIOS || !pkt.data)
        fatal("pull returned an invalid packet (dst, len or priority out of range)");

    uint64_t now = net->now;
    uint64_t wire = pkt.len + net->cfg.overhead_bytes;
    uint64_t tx = tx_time(wire, net->cfg.host_bps, &h->carry);
    h->tx_free_at = now + tx;
    h->st.tx_pkts++;
    h->st.tx_bytes += pkt.len;
    h->st.tx_busy_ns += tx;
    net->st.pkts_sent++;
    net->st.bytes_sent += pkt.len;
    nic_schedule(net, h, now + tx);
    if (net->trace)
        net->trace(net->trace_arg, now, VNET_TR_SEND, h->idx, pkt.dst, pkt.data, pkt.len,
                   pkt.priority);

    /* Faults.  Random draws happen only for enabled faults, so enabling
     * one fault does not perturb runs that never use the others. */
    const struct vnet_faults *f = &net->cfg.faults;
    if (f->filter && f->filter(f->filter_arg, h->idx, pkt.dst, pkt.data, pkt.len)) {
        net->st.drops_filter++;
        if (net->trace)
            net->trace(net->trace_arg, now, VNET_TR_DROP_FILTER, h->idx, pkt.dst, pkt.data, pkt.len,
                       pkt.priority);
        return;
    }
    bool faulty = host_in(f->src_mask, h->idx) && host_in(f->dst_mask, pkt.dst);
    if (faulty && fault_lost(net, h, now, &pkt)) {
        if (net->trace)
            net->trace(net->trace_arg, now, VNET_TR_DROP_LOSS, h->idx, pkt.dst, pkt.data, pkt.len,
                       pkt.priority);
        return;
    }
    int copies = 1;
    if (faulty && f->dup > 0 && vnet_rng_uniform(&net->rng) < f->dup) {
        copies = 2;
        net->st.dups++;
    }

    uint64_t arrive = now + tx + net->cfg.host_delay_ns + net->cfg.switch_delay_ns;
    const uint8_t *src_data = pkt.data;
    bool passed = false;
    uint64_t passed_at = 0;
    for (int c = 0; c < copies; c++) {
        struct pbuf *p = pbuf_get(net);
        p->len = (uint32_t)pkt.len;
        p->wire = (uint32_t)wire;
        p->src = h->idx;
        p->dst = pkt.dst;
        p->prio = (uint8_t)pkt.priority;
        p->at = h->tor;
        if (c == 0 && pkt.data == net->scratch && pkt.len >= ADOPT_MIN_LEN) {
            p->cls = LAST_CLASS;
            p->data = net->scratch;
            net->scratch = buf_get(net, LAST_CLASS);
        } else {
            p->cls = (uint8_t)class_of(pkt.len);
            p->data = buf_get(net, p->cls);
            memcpy(p->data, src_data, pkt.len);
        }
        src_data = p->data;
        if (c == 1) TRACE(net, VNET_TR_DUP, p);
        uint64_t t = arrive;
        if (faulty && f->reorder > 0 && vnet_rng_uniform(&net->rng) < f->reorder) {
            net->st.reorders++;
            if (f->reorder_depth > 0 && hold_back(net, h, p)) continue;
            t += vnet_rng_below(&net->rng, f->reorder_max_ns + 1);
        } else if (faulty && f->delay > 0 && vnet_rng_uniform(&net->rng) < f->delay) {
            net->st.delays++;
            t += f->delay_ns - f->jitter_ns;
            if (f->jitter_ns > 0) t += vnet_rng_below(&net->rng, 2 * f->jitter_ns + 1);
        }
        ev_schedule(net, t, EVK_ARRIVE, NULL, p);
        if (!passed) passed_at = t;
        passed = true;
    }
    /* This packet left: count it for the ones held behind later packets. */
    if (passed && h->held) release_counted(net, h, passed_at);
}

/* ---- Run loop ---- */

static uint64_t run(struct vnet *net, uint64_t limit)
{
    uint64_t count = 0;
    if (net->running) fatal("vnet_run called from inside an event");
    net->running = true;
    net->stopped = false;
    while (!net->stopped) {
        if (net->wcount == 0) {
            /* Jump over the idle gap to the next far event. */
            if (net->hn == 0 || net->heap[0].time > limit) break;
            net->base = net->heap[0].time;
            wheel_migrate(net);
        }
        uint32_t b0 = (uint32_t)net->base & WHEEL_MASK;
        uint32_t b = wheel_find_from(net, b0);
        if (b == NIL) b = wheel_find_from(net, 0);
        uint64_t time = net->base + ((b - b0) & WHEEL_MASK);
        if (time > limit) break;
        uint32_t s = wheel_take(net, b);
        if (time != net->base) {
            net->base = time;
            wheel_migrate(net);
        }
        struct ev_slot *e = &net->slots[s];
        uint8_t kind = e->kind;
        void *arg = e->arg;
        vnet_event_fn fn = e->fn;
        /* Free first: the handler may schedule and reuse the slot. */
        slot_free(net, s);
        /* The clock follows even a cancelled event: base <= now must hold
         * so that anything scheduled at now still fits the wheel window. */
        net->now = time;
        if (kind == EVK_CANCELLED) continue;
        count++;
        net->events_total++;
        switch (kind) {
        case EVK_ARRIVE: {
            struct pbuf *p = arg;
            if (p->at)
                switch_receive(net, p->at, p);
            else
                host_receive(net, p);
            break;
        }
        case EVK_WAKE:
            port_wake(net, arg);
            break;
        case EVK_NIC:
            nic_pull(net, arg);
            break;
        case EVK_USER:
            fn(arg, time);
            break;
        default:
            fatal("corrupt event queue");
        }
    }
    net->running = false;
    return count;
}

uint64_t vnet_run_until(struct vnet *net, uint64_t t)
{
    uint64_t n = run(net, t);
    if (!net->stopped && net->now < t) net->now = t;
    return n;
}

uint64_t vnet_run(struct vnet *net)
{
    return run(net, UINT64_MAX);
}

/* ---- Creation ---- */

void vnet_config_default(struct vnet_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->seed = 1;
    cfg->topology = VNET_STAR;
    cfg->racks = 1;
    cfg->hosts_per_rack = 0;
    cfg->spines = 0;
    cfg->host_bps = UINT64_C(10000000000);
    cfg->host_delay_ns = 100;
    cfg->uplink_bps = UINT64_C(40000000000);
    cfg->uplink_delay_ns = 100;
}

static double clamp01(double x)
{
    /* !(x > 0) also maps NaN to 0. */
    return !(x > 0) ? 0 : x > 1 ? 1 : x;
}

static struct vnet_switch *switch_new(int rack)
{
    struct vnet_switch *sw = xcalloc(1, sizeof(*sw));
    sw->rack = rack;
    return sw;
}

struct vnet *vnet_create(const struct vnet_config *cfg)
{
    if (!cfg || cfg->host_bps == 0) return NULL;
    bool ls = cfg->topology == VNET_LEAF_SPINE;
    if (cfg->topology != VNET_STAR && !ls) return NULL;
    if (ls && (cfg->racks < 1 || cfg->hosts_per_rack < 1 || cfg->spines < 0 ||
               (cfg->racks > 1 && (cfg->spines < 1 || cfg->uplink_bps == 0))))
        return NULL;

    struct vnet *net = xcalloc(1, sizeof(*net));
    net->cfg = *cfg;
    if (!ls) {
        net->cfg.racks = 1;
        net->cfg.hosts_per_rack = 0;
        net->cfg.spines = 0;
    } else if (cfg->racks == 1) {
        net->cfg.spines = 0; /* one rack never leaves its ToR */
    }
    vnet_set_faults(net, &cfg->faults);
    vnet_rng_seed(&net->rng, cfg->seed);
    net->scratch = buf_get(net, LAST_CLASS);
    net->whead = xmalloc(WHEEL_SIZE * sizeof(*net->whead));
    net->wtail = xmalloc(WHEEL_SIZE * sizeof(*net->wtail));
    memset(net->whead, 0xff, WHEEL_SIZE * sizeof(*net->whead)); /* all NIL */
    net->maxhosts = ls ? cfg->racks * cfg->hosts_per_rack : -1;

    int R = net->cfg.racks, U = net->cfg.spines;
    net->nsw = R + U;
    net->sw = xcalloc((size_t)net->nsw, sizeof(*net->sw));
    for (int r = 0; r < R; r++)
        net->sw[r] = switch_new(r);
    for (int u = 0; u < U; u++)
        net->sw[R + u] = switch_new(-1);
    if (ls) {
        const struct vnet_config *c = &net->cfg;
        for (int r = 0; r < R; r++) {
            struct vnet_switch *tor = net->sw[r];
            for (int i = 0; i < c->hosts_per_rack; i++)
                switch_add_port(
                    tor, port_new(c->host_bps, c->host_delay_ns, c->port_buffer_bytes, NULL));
            tor->n_down = c->hosts_per_rack;
            for (int u = 0; u < U; u++)
                switch_add_port(tor, port_new(c->uplink_bps, c->uplink_delay_ns,
                                              c->port_buffer_bytes, net->sw[R + u]));
        }
        for (int u = 0; u < U; u++)
            for (int r = 0; r < R; r++)
                switch_add_port(net->sw[R + u], port_new(c->uplink_bps, c->uplink_delay_ns,
                                                         c->port_buffer_bytes, net->sw[r]));
    }
    return net;
}

static void port_free_queues(struct vnet *net, struct port *pt)
{
    for (int p = 0; p < VNET_NUM_PRIOS; p++) {
        struct pbuf *b = pt->q[p].head;
        while (b) {
            struct pbuf *next = b->next;
            pbuf_free(net, b);
            b = next;
        }
    }
}

void vnet_destroy(struct vnet *net)
{
    if (!net) return;
    /* Packets in flight are reachable only from their arrival events. */
    for (uint32_t i = 0; i < net->nslots; i++)
        if (net->slots[i].kind == EVK_ARRIVE) pbuf_free(net, net->slots[i].arg);
    for (int s = 0; s < net->nsw; s++) {
        struct vnet_switch *sw = net->sw[s];
        for (int p = 0; p < sw->nports; p++) {
            port_free_queues(net, sw->ports[p]);
            free(sw->ports[p]);
        }
        free(sw->ports);
        free(sw);
    }
    free(net->sw);
    for (int h = 0; h < net->nhosts; h++) {
        while (net->hosts[h]->held) {
            struct held *hd = net->hosts[h]->held;
            net->hosts[h]->held = hd->next;
            pbuf_free(net, hd->p);
            free(hd);
        }
        free(net->hosts[h]);
    }
    free(net->hosts);
    for (int c = 0; c < NUM_CLASSES; c++) {
        struct bufnode *b = net->free_bufs[c];
        while (b) {
            struct bufnode *next = b->next;
            free(b);
            b = next;
        }
    }
    free(net->scratch);
    while (net->chunks) {
        struct pchunk *next = net->chunks->next;
        free(net->chunks);
        net->chunks = next;
    }
    free(net->heap);
    free(net->whead);
    free(net->wtail);
    free(net->slots);
    free(net->free_slots);
    free(net);
}

const struct vnet_config *vnet_get_config(const struct vnet *net)
{
    return &net->cfg;
}

uint64_t vnet_seed(const struct vnet *net)
{
    return net->cfg.seed;
}

struct vnet_rng *vnet_rng(struct vnet *net)
{
    return &net->rng;
}

/* ---- Host API ---- */

int vnet_add_host(struct vnet *net, const struct vnet_host_ops *ops, void *ctx)
{
    if (!ops || !ops->pull || !ops->deliver) fatal("vnet_add_host: pull and deliver are required");
    if (net->maxhosts >= 0 && net->nhosts >= net->maxhosts) return -1;
    if (net->nhosts == net->hostcap) {
        net->hostcap = net->hostcap ? 2 * net->hostcap : 16;
        net->hosts = xrealloc(net->hosts, (size_t)net->hostcap * sizeof(*net->hosts));
    }
    struct host *h = xcalloc(1, sizeof(*h));
    h->ops = *ops;
    h->ctx = ctx;
    h->idx = net->nhosts;
    h->up = true;
    h->nic = NIC_IDLE;
    if (net->cfg.topology == VNET_LEAF_SPINE) {
        h->rack = h->idx / net->cfg.hosts_per_rack;
        h->slot = h->idx % net->cfg.hosts_per_rack;
        h->tor = net->sw[h->rack];
    } else {
        h->rack = 0;
        h->slot = h->idx;
        h->tor = net->sw[0];
        switch_add_port(h->tor, port_new(net->cfg.host_bps, net->cfg.host_delay_ns,
                                         net->cfg.port_buffer_bytes, NULL));
        h->tor->n_down = h->tor->nports;
    }
    net->hosts[net->nhosts++] = h;
    return h->idx;
}

int vnet_num_hosts(const struct vnet *net)
{
    return net->nhosts;
}

static struct host *host_at(const struct vnet *net, int host)
{
    if (host < 0 || host >= net->nhosts) fatal("bad host index");
    return net->hosts[host];
}

void vnet_host_kick(struct vnet *net, int host)
{
    struct host *h = host_at(net, host);
    if (!h->up) return;
    if (h->nic == NIC_IDLE)
        nic_schedule(net, h, net->now);
    else if (h->nic == NIC_PULLING)
        h->rekick = true;
}

void vnet_host_set_down(struct vnet *net, int host, bool down)
{
    struct host *h = host_at(net, host);
    bool was_up = h->up;
    h->up = !down;
    if (!down && !was_up) vnet_host_kick(net, host);
}

bool vnet_host_is_down(const struct vnet *net, int host)
{
    return !host_at(net, host)->up;
}

uint64_t vnet_host_tx_free_at(const struct vnet *net, int host)
{
    return host_at(net, host)->tx_free_at;
}

/* ---- Faults ---- */

void vnet_set_faults(struct vnet *net, const struct vnet_faults *faults)
{
    struct vnet_faults *f = &net->cfg.faults;
    *f = *faults;
    f->loss = clamp01(f->loss);
    f->dup = clamp01(f->dup);
    f->reorder = clamp01(f->reorder);
    if (f->reorder_max_ns == UINT64_MAX) f->reorder_max_ns--; /* +1 in the draw must not wrap */
    f->delay = clamp01(f->delay);
    if (f->jitter_ns > f->delay_ns) f->jitter_ns = f->delay_ns;
    if (f->jitter_ns > UINT64_MAX / 4) f->jitter_ns = UINT64_MAX / 4; /* 2j + 1 must not wrap */
    /* Overlapping windows: one long blackout. */
    if (f->blackout_every_ns != 0 && f->blackout_every_ns < f->blackout_ns)
        f->blackout_ns = f->blackout_every_ns;
    net->class_faults = f->loss_types != 0;
    for (int c = 0; c < VNET_FAULT_CLASSES; c++) {
        f->class_loss[c] = clamp01(f->class_loss[c]);
        if (f->class_loss[c] > 0) net->class_faults = true;
    }
    if (!(f->burst >= 1.0)) f->burst = f->burst > 0 ? 1.0 : 0.0; /* NaN: no bursts */
    if (f->burst > 0) homa_fault_ge(f->loss, f->burst, &net->ge_p_bad, &net->ge_p_good);
}

const struct vnet_faults *vnet_get_faults(const struct vnet *net)
{
    return &net->cfg.faults;
}

/* ---- Switch and port queries ---- */

int vnet_num_switches(const struct vnet *net)
{
    return net->nsw;
}

int vnet_num_ports(const struct vnet *net, int sw)
{
    return sw >= 0 && sw < net->nsw ? net->sw[sw]->nports : -1;
}

int vnet_host_tor(const struct vnet *net, int host)
{
    return host_at(net, host)->rack;
}

int vnet_host_port(const struct vnet *net, int host)
{
    return host_at(net, host)->slot;
}

int vnet_tor_uplink_port(const struct vnet *net, int tor, int spine)
{
    if (tor < 0 || tor >= net->cfg.racks || spine < 0 || spine >= net->cfg.spines) return -1;
    return net->sw[tor]->n_down + spine;
}

static struct port *port_at(const struct vnet *net, int sw, int port)
{
    if (sw < 0 || sw >= net->nsw || port < 0 || port >= net->sw[sw]->nports) return NULL;
    return net->sw[sw]->ports[port];
}

int vnet_set_port_buffer(struct vnet *net, int sw, int port, uint64_t bytes)
{
    struct port *pt = port_at(net, sw, port);
    if (!pt) return -1;
    pt->buffer = bytes;
    return 0;
}

/* ---- Statistics ---- */

void vnet_get_stats(const struct vnet *net, struct vnet_stats *out)
{
    *out = net->st;
    out->events = net->events_total - net->events_at_reset;
}

int vnet_get_host_stats(const struct vnet *net, int host, struct vnet_host_stats *out)
{
    if (host < 0 || host >= net->nhosts) return -1;
    *out = net->hosts[host]->st;
    return 0;
}

int vnet_get_port_stats(const struct vnet *net, int sw, int port, struct vnet_port_stats *out)
{
    const struct port *pt = port_at(net, sw, port);
    if (!pt) return -1;
    memset(out, 0, sizeof(*out));
    out->tx_pkts = pt->tx_pkts;
    out->tx_bytes = pt->tx_bytes;
    out->drops = pt->drops;
    out->drop_bytes = pt->drop_bytes;
    out->busy_ns = pt->busy_ns;
    out->max_occupancy = pt->max_occ;
    out->occupancy = port_occupancy(pt, net->now);
    memcpy(out->queued, pt->queued, sizeof(out->queued));
    return 0;
}

void vnet_reset_stats(struct vnet *net)
{
    memset(&net->st, 0, sizeof(net->st));
    net->events_at_reset = net->events_total;
    for (int h = 0; h < net->nhosts; h++)
        memset(&net->hosts[h]->st, 0, sizeof(net->hosts[h]->st));
    for (int s = 0; s < net->nsw; s++) {
        struct vnet_switch *sw = net->sw[s];
        for (int p = 0; p < sw->nports; p++) {
            struct port *pt = sw->ports[p];
            pt->tx_pkts = pt->tx_bytes = pt->drops = pt->drop_bytes = pt->busy_ns = 0;
            pt->max_occ = port_occupancy(pt, net->now);
        }
    }
}

void vnet_set_trace(struct vnet *net, vnet_trace_fn fn, void *arg)
{
    net->trace = fn;
    net->trace_arg = arg;
}
