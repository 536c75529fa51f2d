/* vnet: a deterministic, packet-level discrete-event network simulator.
 *
 * vnet moves opaque packets (byte strings with a priority 0..7, 7 highest)
 * between hosts.  It knows nothing about Homa (except the packet types, for
 * per-type loss faults); the protocol engine (or any
 * other transport) plugs in through two callbacks per host: pull (the NIC is
 * free, hand me the next packet) and deliver (a packet arrived).
 *
 * What is modelled
 *  - Virtual time in nanoseconds.  Events are ordered by (time, insertion
 *    order), and every random decision (faults, spine choice, and anything
 *    the callers draw from vnet_rng()) comes from one seeded PRNG, so a run
 *    is an exact function of its seed and inputs.
 *  - Topologies: a star (every host on one switch) or a two-level
 *    leaf-spine (R racks of H hosts, every ToR linked to each of U spines).
 *    Routing: host -> ToR -> (same rack: host) or spine -> ToR -> host; the
 *    spine is drawn uniformly per packet (packet spraying).
 *  - Links: a rate (bit/s) and a propagation delay, full duplex; host links
 *    and ToR-spine links are configured separately.  Serialisation time is
 *    (len + overhead_bytes) * 8 / rate; fractions of a nanosecond carry over
 *    to the next packet on the same link, so long runs hit line rate exactly.
 *  - Store-and-forward switches with an optional fixed forwarding latency.
 *    Each egress port has 8 strict-priority FIFO queues and a finite byte
 *    buffer (the packet being serialised counts until its last bit leaves);
 *    a packet that does not fit is dropped and counted.
 *  - Host NICs have no queue: the NIC holds the one packet being serialised
 *    and pulls the next one from the host when it finishes, so packet order
 *    and pacing are decided by the host's own scheduler.
 *  - Faults at host egress (struct vnet_faults): random or burst loss,
 *    loss per Homa packet type, blackout windows, duplication, delay with
 *    jitter, reordering (extra random delay, or held behind N later
 *    packets), restricted to chosen source/destination hosts, and a filter
 *    callback that can drop chosen packets.  Hosts can be set down: a down
 *    host neither sends nor receives.
 *  - Counters per host, per switch port (bytes, drops, peak occupancy, busy
 *    time) and globally.
 *
 * What is not modelled
 *  - Link-level flow control (PFC), ECN marking, shared switch buffers,
 *    cut-through switching, header/CRC corruption, NIC segmentation
 *    offload, host CPU time (callbacks take zero virtual time), routing
 *    other than per-packet spraying, and link or switch failures.
 *
 * Threading: none; a vnet and its callbacks run on one thread.  Callbacks
 * may call any vnet function (schedule events, kick hosts, change faults). */
#ifndef VNET_H
#define VNET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest packet a host may send (a 64 KiB TSO frame plus headers). */
#define VNET_MAX_PKT 65600
#define VNET_NUM_PRIOS 8

struct vnet;

/* ---- Deterministic PRNG (xoshiro256**, seeded through splitmix64) ---- */

struct vnet_rng {
    uint64_t s[4];
};

void vnet_rng_seed(struct vnet_rng *rng, uint64_t seed);
uint64_t vnet_rng_next(struct vnet_rng *rng);
/* Uniform double in [0, 1) with 53 random bits. */
double vnet_rng_uniform(struct vnet_rng *rng);
/* Uniform integer in [0, n); n == 0 returns 0.  Unbiased. */
uint64_t vnet_rng_below(struct vnet_rng *rng, uint64_t n);
/* Exponential variate with the given mean (Poisson inter-arrival times). */
double vnet_rng_exp(struct vnet_rng *rng, double mean);

/* Seed from the environment variable VNET_SEED (decimal or 0x-hex) if set,
 * else dflt: lets anyone replay a failing run without recompiling. */
uint64_t vnet_seed_from_env(uint64_t dflt);

/* ---- Configuration ---- */

enum vnet_topology {
    VNET_STAR = 0,       /* one switch; hosts added without limit */
    VNET_LEAF_SPINE = 1, /* racks x hosts_per_rack hosts, spines spines */
};

/* Packet classes for per-type loss: the values of HOMA_FAULT_CLASS_* in
 * homa/homa.h (data, last_data, grant, resend, unknown, busy, cutoffs,
 * freeze, need_ack, ack).  The only place vnet looks into a packet: it reads
 * the Homa common header's type byte and, for DATA, the message length and
 * offset (bounds-checked; anything else is in no class). */
#define VNET_FAULT_CLASSES 10

/* Faults, applied to every packet as it leaves a host NIC, in this order:
 * filter; host masks (packets outside them skip every fault below);
 * blackout; class_loss; loss (with burst, loss_types); dup; then reorder
 * or delay.  All zero = no faults.  Random draws happen only for enabled
 * faults, so enabling one does not perturb runs that never use the others. */
struct vnet_faults {
    double loss;             /* probability a packet vanishes (long-run rate with burst) */
    double dup;              /* probability a packet is delivered twice */
    double reorder;          /* probability of an extra random delay... */
    uint64_t reorder_max_ns; /* ...uniform in [0, reorder_max_ns] */
    /* Optional: return nonzero to drop this packet (checked first). */
    int (*filter)(void *arg, int src, int dst, const uint8_t *data, size_t len);
    void *filter_arg;
    /* Burst loss (Gilbert-Elliott, one chain per source host): with burst >=
     * 1, `loss` is the long-run loss rate and burst the mean run of
     * consecutive losses among the host's packets that loss applies to;
     * transitions good->bad = loss / (burst (1 - loss)), bad->good = 1 /
     * burst.  Needs loss <= burst / (1 + burst); above that the chain sticks
     * at good->bad = 1 (a lower rate).  0 = independent losses. */
    double burst;
    /* Bit mask of 1u << class: loss (and burst) applies only to packets of
     * these classes; 0 = every packet. */
    unsigned loss_types;
    /* Extra independent loss per class, e.g. class_loss[2] (GRANT) = 1. */
    double class_loss[VNET_FAULT_CLASSES];
    /* Only packets from a host whose bit is set in src_mask and to a host
     * whose bit is set in dst_mask get faults (bit h = host h; hosts 64 and
     * up never match a nonzero mask); 0 = every host. */
    uint64_t src_mask, dst_mask;
    /* Blackouts, in virtual time: every packet leaving in [blackout_start_ns
     * + k * blackout_every_ns, ... + blackout_ns) is lost (k = 0 only if
     * blackout_every_ns is 0). */
    uint64_t blackout_ns;
    uint64_t blackout_every_ns; /* > blackout_ns, or 0 = one window */
    uint64_t blackout_start_ns;
    /* Delay with jitter: with probability `delay` a packet gets an extra
     * delay uniform in [delay_ns - jitter_ns, delay_ns + jitter_ns]
     * (jitter_ns is clamped to delay_ns). */
    double delay;
    uint64_t delay_ns, jitter_ns;
    /* Reordering by depth: if > 0, a packet picked by `reorder` is held at
     * its source until reorder_depth later packets of the same host have
     * left (it then arrives right behind the last of them) instead of the
     * random extra delay; reorder_max_ns > 0 bounds the hold. */
    uint32_t reorder_depth;
};

struct vnet_config {
    uint64_t seed;
    enum vnet_topology topology;
    int racks;          /* leaf-spine only */
    int hosts_per_rack; /* leaf-spine only */
    int spines;         /* leaf-spine only; >= 1 if racks > 1 */
    uint64_t host_bps;  /* host <-> ToR links, both directions */
    uint64_t host_delay_ns;
    uint64_t uplink_bps; /* ToR <-> spine links, both directions */
    uint64_t uplink_delay_ns;
    uint64_t switch_delay_ns;   /* forwarding latency after full reception */
    uint32_t overhead_bytes;    /* per-packet wire overhead (headers, gaps) */
    uint64_t port_buffer_bytes; /* per switch egress port; 0 = unlimited */
    struct vnet_faults faults;
};

/* Defaults: star, seed 1, 10 Gb/s host links, 40 Gb/s uplinks, 100 ns per
 * link, no switch latency, no overhead, unlimited buffers, no faults. */
void vnet_config_default(struct vnet_config *cfg);

/* Returns NULL if the configuration is invalid or memory runs out. */
struct vnet *vnet_create(const struct vnet_config *cfg);
void vnet_destroy(struct vnet *net);
const struct vnet_config *vnet_get_config(const struct vnet *net);
/* The seed the net was created with (print it when a test fails). */
uint64_t vnet_seed(const struct vnet *net);
/* The net's PRNG; callers draw from it so one seed fixes the whole run. */
struct vnet_rng *vnet_rng(struct vnet *net);

/* ---- Event core ---- */

typedef void (*vnet_event_fn)(void *arg, uint64_t now);
/* Handle of a scheduled event; 0 is never a valid handle. */
typedef uint64_t vnet_event_id;

uint64_t vnet_now(const struct vnet *net);
/* Run fn(arg, time) at `time` (a time in the past means now).  Events at
 * the same time run in the order they were scheduled. */
vnet_event_id vnet_at(struct vnet *net, uint64_t time, vnet_event_fn fn, void *arg);
vnet_event_id vnet_after(struct vnet *net, uint64_t delay, vnet_event_fn fn, void *arg);
/* Returns true if the event was pending and now never runs; false if it
 * already ran, was already cancelled, or id is 0/stale.  Removal is lazy:
 * the entry is dropped when its time is reached (the clock may then move
 * to that time), so for a timeout reset on every packet prefer a periodic
 * tick or a deadline checked when a timer fires. */
bool vnet_cancel(struct vnet *net, vnet_event_id id);
/* Run every event with time <= t, then set the clock to t (unless stopped
 * early by vnet_stop).  Returns the number of events processed.  Not to be
 * called from inside an event. */
uint64_t vnet_run_until(struct vnet *net, uint64_t t);
/* Run until no events are left or vnet_stop is called. */
uint64_t vnet_run(struct vnet *net);
/* Make the current vnet_run/vnet_run_until return after this event. */
void vnet_stop(struct vnet *net);
/* Events processed since creation (cancelled events not counted). */
uint64_t vnet_events_processed(const struct vnet *net);
/* Events scheduled and not yet run (including cancelled ones not yet
 * reached in the queue). */
size_t vnet_pending_events(const struct vnet *net);

/* ---- Hosts ---- */

/* One packet handed over by pull.  On entry data points to a vnet-owned
 * buffer of VNET_MAX_PKT bytes: write the packet there, or point data at
 * your own bytes (vnet copies them before pull's caller returns). */
struct vnet_pkt {
    int dst;      /* destination host index */
    int priority; /* 0..7, 7 highest */
    size_t len;   /* 1..VNET_MAX_PKT */
    uint8_t *data;
};

struct vnet_host_ops {
    /* The NIC is idle: return 1 and fill *pkt to send a packet, or 0 if
     * nothing is ready (the NIC then sleeps until vnet_host_kick). */
    int (*pull)(void *ctx, uint64_t now, struct vnet_pkt *pkt);
    /* A packet arrived; data is valid only during the call. */
    void (*deliver)(void *ctx, uint64_t now, int src_host, const uint8_t *data, size_t len,
                    int priority);
};

/* Returns the new host's index (0, 1, ... in order) or -1 if the topology
 * is full.  Leaf-spine host h sits in rack h / hosts_per_rack. */
int vnet_add_host(struct vnet *net, const struct vnet_host_ops *ops, void *ctx);
int vnet_num_hosts(const struct vnet *net);
/* The host may have packets: if its NIC is idle, pull (at the current
 * time, from the event loop, never from inside this call). */
void vnet_host_kick(struct vnet *net, int host);
/* A down host's NIC stops pulling and packets reaching it vanish (counted);
 * bringing it back up kicks it. */
void vnet_host_set_down(struct vnet *net, int host, bool down);
bool vnet_host_is_down(const struct vnet *net, int host);
/* Time the host's NIC finishes its current packet (<= now if idle). */
uint64_t vnet_host_tx_free_at(const struct vnet *net, int host);

/* ---- Faults ---- */

void vnet_set_faults(struct vnet *net, const struct vnet_faults *faults);
const struct vnet_faults *vnet_get_faults(const struct vnet *net);

/* ---- Switches and ports ----
 * Switch ids: ToRs are 0..racks-1 (a star has one switch, 0), spines are
 * racks..racks+spines-1.  ToR ports: 0..hosts_per_rack-1 lead to the rack's
 * hosts (a star: port h leads to host h), then one port per spine.  Spine
 * ports: port r leads to ToR r. */
int vnet_num_switches(const struct vnet *net);
int vnet_num_ports(const struct vnet *net, int sw);
int vnet_host_tor(const struct vnet *net, int host);
/* Port of the host's ToR whose link leads to the host. */
int vnet_host_port(const struct vnet *net, int host);
/* Port of ToR `tor` leading to spine number `spine` (0-based). */
int vnet_tor_uplink_port(const struct vnet *net, int tor, int spine);
/* Change one port's buffer (0 = unlimited).  Returns -1 on a bad port. */
int vnet_set_port_buffer(struct vnet *net, int sw, int port, uint64_t bytes);

/* ---- Statistics ---- */

struct vnet_stats {
    uint64_t events;    /* processed since the last reset */
    uint64_t pkts_sent; /* pulled from hosts */
    uint64_t bytes_sent;
    uint64_t pkts_delivered;
    uint64_t bytes_delivered;
    uint64_t drops_queue;    /* switch buffer overflow */
    uint64_t drops_loss;     /* random loss fault */
    uint64_t drops_filter;   /* fault filter */
    uint64_t drops_down;     /* destination host down */
    uint64_t dups;           /* extra copies created */
    uint64_t reorders;       /* packets given an extra delay or held back */
    uint64_t drops_blackout; /* blackout window */
    /* Payload bytes of the DATA packets that any fault above dropped: what
     * loss recovery has to resend at the least. */
    uint64_t lost_data_bytes;
    uint64_t drops_type; /* class_loss */
    uint64_t delays;     /* packets given the `delay` fault */
};

struct vnet_host_stats {
    uint64_t tx_pkts, tx_bytes; /* pulled from this host */
    uint64_t rx_pkts, rx_bytes; /* delivered to this host */
    uint64_t tx_busy_ns;        /* NIC serialisation time */
    uint64_t rx_dropped_down;   /* arrived while the host was down */
};

struct vnet_port_stats {
    uint64_t tx_pkts, tx_bytes;      /* bytes = packet lengths, no overhead */
    uint64_t drops, drop_bytes;      /* buffer overflow */
    uint64_t busy_ns;                /* serialisation time; / interval = load */
    uint64_t max_occupancy;          /* peak buffer use, wire bytes */
    uint64_t occupancy;              /* current buffer use, wire bytes */
    uint64_t queued[VNET_NUM_PRIOS]; /* packets waiting, per priority */
};

void vnet_get_stats(const struct vnet *net, struct vnet_stats *out);
int vnet_get_host_stats(const struct vnet *net, int host, struct vnet_host_stats *out);
int vnet_get_port_stats(const struct vnet *net, int sw, int port, struct vnet_port_stats *out);
/* Zero all counters (global, host, port; max_occupancy restarts from the
 * current occupancy) so a measurement can skip a warm-up. */
void vnet_reset_stats(struct vnet *net);

/* ---- Tracing (optional, for debugging and packet logs) ---- */

enum vnet_trace_kind {
    VNET_TR_SEND,        /* pulled from the source host */
    VNET_TR_DELIVER,     /* handed to the destination host */
    VNET_TR_DROP_FILTER, /* dropped by the fault filter */
    VNET_TR_DROP_LOSS,   /* dropped by the loss fault */
    VNET_TR_DROP_QUEUE,  /* dropped at a full switch port */
    VNET_TR_DROP_DOWN,   /* destination host down */
    VNET_TR_DUP,         /* an extra copy was made */
};

typedef void (*vnet_trace_fn)(void *arg, uint64_t now, enum vnet_trace_kind kind, int src, int dst,
                              const uint8_t *data, size_t len, int priority);
void vnet_set_trace(struct vnet *net, vnet_trace_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif /* VNET_H */
