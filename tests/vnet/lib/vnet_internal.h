/* vnet's internals, shared by its three parts; see vnet.h for the model.
 *
 *   vnet.c         event core, packet pools, hosts and their NICs, creation
 *   vnet_switch.c  links and switches: egress ports with 8 strict-priority
 *                  queues, the star or leaf-spine wiring, port statistics
 *   vnet_faults.c  faults at host egress: loss (random, burst, per packet
 *                  type, blackouts), duplication, delay, reordering
 *
 * Not for vnet's users (tests and the simulator include vnet.h only). */
#ifndef VNET_INTERNAL_H
#define VNET_INTERNAL_H

#include "vnet.h"

/* ---- Event core (vnet.c) ----
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

/* ---- Switch ports (vnet_switch.c) ---- */

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
    bool any_faults;            /* some fault is set: nic_pull asks vnet_faults.c */
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

/* ---- Shared helpers ---- */

/* vnet.c */
void vn_fatal(const char *msg);
void *vn_xmalloc(size_t n);
void *vn_xcalloc(size_t n, size_t sz);
void *vn_xrealloc(void *p, size_t n);
/* Schedules an event of any kind (EVK_USER events come from vnet_at). */
vnet_event_id vn_schedule(struct vnet *net, uint64_t time, uint8_t kind, vnet_event_fn fn,
                          void *arg);
/* Host by index; fatal if out of range. */
struct host *vn_host_at(const struct vnet *net, int host);

/* vnet_switch.c */
/* A packet's last bit reached switch sw: route it to an egress port. */
void vn_switch_receive(struct vnet *net, struct vnet_switch *sw, struct pbuf *p);
/* A port finished its packet and has more queued: send the next one. */
void vn_port_wake(struct vnet *net, struct port *pt);
/* Creates the switches of net->cfg and, for a leaf-spine, all their ports. */
void vn_switches_create(struct vnet *net);
/* A star's switch gets a port for a new host. */
void vn_switch_add_host_port(struct vnet *net, struct vnet_switch *sw);
/* Frees the switches, their ports and the packets queued there. */
void vn_switches_destroy(struct vnet *net);
void vn_ports_reset_stats(struct vnet *net);

/* vnet_faults.c: the faults nic_pull (vnet.c) applies to a packet leaving
 * host h, in this order.  vn_fault_drop: the filter, then (for packets the
 * host masks select: *faulty) blackouts and losses; true if the packet is
 * gone (counted and traced).  vn_fault_copies: 2 if it is duplicated, else
 * 1.  vn_fault_delay, per copy: adds reordering or delay to *t, or holds p
 * back behind later packets (reorder_depth: returns true, p is then
 * scheduled by vn_fault_release_held when they have left, or by a timer). */
bool vn_fault_drop(struct vnet *net, struct host *h, uint64_t now, const struct vnet_pkt *pkt,
                   bool *faulty);
int vn_fault_copies(struct vnet *net, bool faulty);
bool vn_fault_delay(struct vnet *net, struct host *h, struct pbuf *p, bool faulty, uint64_t *t);
/* A later packet of h left, arriving at t: release what it completes. */
void vn_fault_release_held(struct vnet *net, struct host *h, uint64_t t);
/* Frees the packets h still holds back (vnet_destroy). */
void vn_fault_free_held(struct vnet *net, struct host *h);

/* ---- Inline helpers ---- */

static inline void buf_put(struct vnet *net, uint8_t *data, int c)
{
    struct bufnode *b = (struct bufnode *)(void *)data;
    b->next = net->free_bufs[c];
    net->free_bufs[c] = b;
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

#endif /* VNET_INTERNAL_H */
