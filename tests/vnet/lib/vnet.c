/* vnet: event core, packet pools, hosts and their NICs, creation.  See
 * vnet.h for the model and vnet_internal.h for the other parts (links and
 * switches in vnet_switch.c, faults in vnet_faults.c).
 *
 * Steady-state operation does no malloc: events live in a slot array with a
 * free stack, packets in pooled descriptors, payloads in per-size-class free
 * lists.  Everything grows geometrically to the run's peak and is reused. */
#include "vnet_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vn_fatal(const char *msg)
{
    fprintf(stderr, "vnet: fatal: %s\n", msg);
    abort();
}

void *vn_xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) vn_fatal("out of memory");
    return p;
}

void *vn_xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n, sz);
    if (!p) vn_fatal("out of memory");
    return p;
}

void *vn_xrealloc(void *p, size_t n)
{
    p = realloc(p, n);
    if (!p) vn_fatal("out of memory");
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
        net->heap = vn_xrealloc(net->heap, net->hcap * sizeof(*net->heap));
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
        if (net->slotcap >= MAX_SLOTS) vn_fatal("more than 2^24 pending events");
        net->slotcap = net->slotcap ? 2 * net->slotcap : 1024;
        net->slots = vn_xrealloc(net->slots, net->slotcap * sizeof(*net->slots));
        net->free_slots = vn_xrealloc(net->free_slots, net->slotcap * sizeof(*net->free_slots));
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

vnet_event_id vn_schedule(struct vnet *net, uint64_t time, uint8_t kind, vnet_event_fn fn,
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
        if (net->seq >= MAX_SEQ) vn_fatal("more than 2^40 far events scheduled");
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
    if (!fn) vn_fatal("vnet_at: NULL function");
    return vn_schedule(net, time < net->now ? net->now : time, EVK_USER, fn, arg);
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
    return vn_xmalloc(class_size(c));
}

static struct pbuf *pbuf_get(struct vnet *net)
{
    if (!net->free_pbufs) {
        struct pchunk *ch = vn_xmalloc(sizeof(*ch));
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
    vn_schedule(net, t, EVK_NIC, NULL, h);
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
        vn_fatal("pull returned an invalid packet (dst, len or priority out of range)");

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

    /* Faults (vnet_faults.c).  Random draws happen only for enabled
     * faults, so enabling one fault does not perturb runs that never use
     * the others. */
    bool faulty = false;
    int copies = 1;
    if (net->any_faults) {
        if (vn_fault_drop(net, h, now, &pkt, &faulty)) return;
        copies = vn_fault_copies(net, faulty);
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
        if (faulty && vn_fault_delay(net, h, p, faulty, &t)) continue;
        vn_schedule(net, t, EVK_ARRIVE, NULL, p);
        if (!passed) passed_at = t;
        passed = true;
    }
    /* This packet left: count it for the ones held behind later packets. */
    if (passed && h->held) vn_fault_release_held(net, h, passed_at);
}

/* ---- Run loop ---- */

static uint64_t run(struct vnet *net, uint64_t limit)
{
    uint64_t count = 0;
    if (net->running) vn_fatal("vnet_run called from inside an event");
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
                vn_switch_receive(net, p->at, p);
            else
                host_receive(net, p);
            break;
        }
        case EVK_WAKE:
            vn_port_wake(net, arg);
            break;
        case EVK_NIC:
            nic_pull(net, arg);
            break;
        case EVK_USER:
            fn(arg, time);
            break;
        default:
            vn_fatal("corrupt event queue");
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

struct vnet *vnet_create(const struct vnet_config *cfg)
{
    if (!cfg || cfg->host_bps == 0) return NULL;
    bool ls = cfg->topology == VNET_LEAF_SPINE;
    if (cfg->topology != VNET_STAR && !ls) return NULL;
    if (ls && (cfg->racks < 1 || cfg->hosts_per_rack < 1 || cfg->spines < 0 ||
               (cfg->racks > 1 && (cfg->spines < 1 || cfg->uplink_bps == 0))))
        return NULL;

    struct vnet *net = vn_xcalloc(1, sizeof(*net));
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
    net->whead = vn_xmalloc(WHEEL_SIZE * sizeof(*net->whead));
    net->wtail = vn_xmalloc(WHEEL_SIZE * sizeof(*net->wtail));
    memset(net->whead, 0xff, WHEEL_SIZE * sizeof(*net->whead)); /* all NIL */
    net->maxhosts = ls ? cfg->racks * cfg->hosts_per_rack : -1;

    vn_switches_create(net);
    return net;
}

void vnet_destroy(struct vnet *net)
{
    if (!net) return;
    /* Packets in flight are reachable only from their arrival events. */
    for (uint32_t i = 0; i < net->nslots; i++)
        if (net->slots[i].kind == EVK_ARRIVE) pbuf_free(net, net->slots[i].arg);
    vn_switches_destroy(net);
    for (int h = 0; h < net->nhosts; h++) {
        vn_fault_free_held(net, net->hosts[h]);
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
    if (!ops || !ops->pull || !ops->deliver)
        vn_fatal("vnet_add_host: pull and deliver are required");
    if (net->maxhosts >= 0 && net->nhosts >= net->maxhosts) return -1;
    if (net->nhosts == net->hostcap) {
        net->hostcap = net->hostcap ? 2 * net->hostcap : 16;
        net->hosts = vn_xrealloc(net->hosts, (size_t)net->hostcap * sizeof(*net->hosts));
    }
    struct host *h = vn_xcalloc(1, sizeof(*h));
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
        vn_switch_add_host_port(net, h->tor);
    }
    net->hosts[net->nhosts++] = h;
    return h->idx;
}

int vnet_num_hosts(const struct vnet *net)
{
    return net->nhosts;
}

struct host *vn_host_at(const struct vnet *net, int host)
{
    if (host < 0 || host >= net->nhosts) vn_fatal("bad host index");
    return net->hosts[host];
}

void vnet_host_kick(struct vnet *net, int host)
{
    struct host *h = vn_host_at(net, host);
    if (!h->up) return;
    if (h->nic == NIC_IDLE)
        nic_schedule(net, h, net->now);
    else if (h->nic == NIC_PULLING)
        h->rekick = true;
}

void vnet_host_set_down(struct vnet *net, int host, bool down)
{
    struct host *h = vn_host_at(net, host);
    bool was_up = h->up;
    h->up = !down;
    if (!down && !was_up) vnet_host_kick(net, host);
}

bool vnet_host_is_down(const struct vnet *net, int host)
{
    return !vn_host_at(net, host)->up;
}

uint64_t vnet_host_tx_free_at(const struct vnet *net, int host)
{
    return vn_host_at(net, host)->tx_free_at;
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

void vnet_reset_stats(struct vnet *net)
{
    memset(&net->st, 0, sizeof(net->st));
    net->events_at_reset = net->events_total;
    for (int h = 0; h < net->nhosts; h++)
        memset(&net->hosts[h]->st, 0, sizeof(net->hosts[h]->st));
    vn_ports_reset_stats(net);
}

void vnet_set_trace(struct vnet *net, vnet_trace_fn fn, void *arg)
{
    net->trace = fn;
    net->trace_arg = arg;
}
