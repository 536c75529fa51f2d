/* Engine internals shared by the files of src/core.  Nothing here is public.
 *
 * The engine's files, one concept each:
 *   engine.c   the engine object and the application's calls
 *   rpc.c      RPC table, lifecycle and tombstones (states: rpc.h)
 *   peer.c     peer table: liveness per remote port, pending acks
 *   port.c     local ports and their ready queues
 *   buf.c      message buffers: the cache of large ones, pinned ones
 *   ctl.c      the queue of control packets we send
 *   input.c    packets that arrive (copied or placed), admission
 *   timer.c    timers: loss recovery, liveness prods, timeouts
 *   grant.c    receiver scheduling (SRPT grants, overcommitment)
 *   output.c   sender scheduling (SRPT send queue, pacer, pull)
 *   msgin.c    reassembly of incoming messages
 *   cutoffs.c  unscheduled priority cutoffs
 *   wire.c     encode/decode of every packet type
 *   config.c   defaults, validation, counter names
 *   hash.c     the one hash table */
#ifndef HOMA_CORE_INTERNAL_H
#define HOMA_CORE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <homa/engine.h>

#include "hash.h"
#include "list.h"
#include "msg.h"
#include "rpc.h"
#include "wire.h"

#define HOMA_WHEEL_SLOTS 1024 /* power of two */
/* Send queue buckets (output.c): one per byte count below 1,024 bytes left,
 * then 32 per power of two up to 2^32 (1,728, a multiple of 64). */
#define HOMA_SENDQ_CLASS_BUCKETS 1728
/* One run of buckets per scheduling class, the highest class first, so a
 * find-first-set over all of them serves classes in order. */
#define HOMA_SENDQ_BUCKETS (HOMA_SENDQ_CLASS_BUCKETS * HOMA_SCHED_CLASSES)

/* ---- peers (peer.c) and ports (port.c) ---- */
#define HOMA_PEER_MAX_ACKS 32

struct homa_pending_ack {
    uint64_t client_id;
    uint16_t server_port;
    uint16_t client_port;
};

/* Classes of timer traffic with a per-peer budget (input.c). */
enum {
    HOMA_BUDGET_NEED_ACK, /* NEED_ACK: server waiting for the ack */
    HOMA_BUDGET_PROD,     /* BUSY, RESEND to a server known to work on it */
    HOMA_BUDGET_DOUBT,    /* the same to a port quiet for a quarter timeout */
    HOMA_BUDGET_RECOVER,  /* RESEND for a request the server never confirmed */
    HOMA_BUDGET_CLASSES
};

/* Liveness of one remote Homa port of a peer.  A host's Homa ports belong
 * to different processes (each with its own engine), so a dead process on
 * a live host is only seen as silence of its own ports. */
struct homa_peer_port {
    uint16_t port;
    uint64_t last_heard;
    uint64_t doubt_scanned; /* 1 + last_heard when its queued prods last moved to DOUBT */
};
#define HOMA_PEER_MAX_PORTS 256

struct homa_peer {
    homa_addr addr;
    uint32_t max_payload;                  /* DATA payload per packet on the path to it */
    struct homa_hnode hnode;               /* eng->peers (peer.c) */
    uint32_t cutoffs[HOMA_NUM_PRIORITIES]; /* the peer's, for our unscheduled data */
    uint16_t cutoff_version;
    bool cutoffs_sent_once;
    uint64_t cutoffs_sent_at;
    uint32_t num_rpcs;
    uint64_t idle_since;
    uint64_t last_heard; /* last packet from it that found one of our RPCs */
    /* Smoothed time (ns, 1/8 gain) from our request's last byte out to
     * the first byte of its response, over requests sent once: how long
     * this server takes.  A first RESEND for an unanswered request waits
     * at least twice that, so a server that is only behind is not asked
     * again and again for what it has (0 = no sample yet). */
    uint64_t resp_time;
    /* Smoothed time (ns, 1/8 gain) from the first unanswered RESEND about
     * one of our incoming messages to the next packet about it: how long
     * this peer takes to answer a RESEND, its input backlog included.  An
     * ask is not counted against a message (HOMA_ASKS_FATAL) sooner than
     * that after the last one counted (0 = no sample yet). */
    uint64_t ask_rtt;
    struct homa_peer_port *ports; /* liveness per remote port, unordered */
    uint32_t num_ports, cap_ports;
    uint32_t port_hint; /* index of the port last heard from (checked first) */
    /* Budgets for prods to it, one token bucket per class (GCRA: the time
     * at which the bucket is full again), and FIFO queues of the RPCs
     * waiting for a token; while any waits, the peer is on eng->waiting. */
    uint64_t budget_tat[HOMA_BUDGET_CLASSES];
    struct hlist budget_wait[HOMA_BUDGET_CLASSES];
    struct hlist waiting_node;
    uint32_t num_acks;
    struct homa_pending_ack acks[HOMA_PEER_MAX_ACKS];
};

struct homa_port {
    uint16_t num;
    struct homa_hnode hnode;  /* eng->ports (port.c) */
    struct homa_readyq ready; /* RPCs ready for homa_engine_recv (readyq.h) */
    uint32_t num_rpcs;
    uint8_t sched_class; /* given to its new RPCs */
};

/* ---- control packet queue ---- */
struct homa_ctl {
    homa_addr dst;
    uint16_t hdr_len;
    uint8_t type;
    uint8_t hdr[HOMA_MAX_HDR_LEN];
    uint16_t sport, dport;
};

#define HOMA_MAX_CTL_QUEUE 16384

/* ---- tombstones: completed server RPCs, for at-most-once ---- */
struct homa_tomb {
    uint64_t id;
    homa_addr addr;
    uint16_t port;
    uint64_t expires;
    struct homa_hnode hnode; /* eng->tomb_tab */
};

/* ---- the engine ---- */
#define HOMA_BUFCACHE_SLOTS 8
#define HOMA_BUFCACHE_MIN (64u * 1024)          /* smaller buffers: malloc does well */
#define HOMA_BUFCACHE_BYTES (16u * 1024 * 1024) /* bound on the cached bytes */
#define HOMA_CUTOFF_BUCKETS 240

struct homa_engine {
    homa_config cfg;
    homa_engine_ops ops;
    homa_counters ctr;
    /* our unscheduled cutoffs as announced in CUTOFFS (cutoffs.c) */
    uint32_t cutoffs[HOMA_NUM_PRIORITIES];
    uint8_t max_sched_prio; /* highest priority for scheduled data */
    uint16_t cutoff_version;
    uint32_t hist_count[HOMA_CUTOFF_BUCKETS]; /* incoming lengths, aged */
    uint64_t hist_msgs;
    uint32_t since_update;

    uint64_t next_client_id;
    uint64_t next_tick;
    uint64_t ticks;           /* timer runs so far */
    uint64_t now;             /* latest time seen */
    uint64_t arrived;         /* when the packet being handled reached this host */
    uint64_t in_lag;          /* longest wait of a packet read since the last timer run */
    uint64_t lag;             /* estimated wait of packets in our receive path (timer) */
    uint64_t forgiven;        /* sum of the local stalls forgiven (timer runs late) */
    uint32_t server_rpcs;     /* live server RPCs (of ctr.rpcs_live) */
    uint64_t server_freed_at; /* when a server RPC was last freed */
    uint64_t cap_full_at;     /* first refusal at the RPC cap since then */
    /* RPC_UNKNOWNs answered in tick cap_tick to RESENDs about requests we
     * have no trace of while busy serving at the RPC cap (each may bring a
     * restart: no more a tick than there are free slots) */
    uint32_t cap_unknowns;
    uint64_t cap_tick;
    uint64_t timer_checks; /* RPCs the timer looked at (tests: cost follows what is due) */
    uint64_t sendq_steps;  /* entries send queue inserts stepped past (tests) */

    /* hash tables (hash.h) */
    struct homa_htab client_table; /* by id (rpc.c) */
    struct homa_htab server_table; /* by id, client address and port (rpc.c) */
    struct homa_htab peers;        /* by address (peer.c) */
    struct homa_htab ports;        /* by number, 64 buckets, never grown (port.c) */

    struct hlist rpcs; /* every live RPC */
    /* Timer wheel: slot t % HOMA_WHEEL_SLOTS holds the RPCs the timer run
     * of tick t looks at (and those a multiple of the wheel later, which
     * it puts back), so a run costs what is due, not what is live. */
    struct hlist wheel[HOMA_WHEEL_SLOTS];
    struct hlist waiting; /* peers with RPCs queued for prod budget */
    /* Outgoing messages with something to send now, SRPT order: bucketed by
     * bytes left (output.c), a bit per non-empty bucket. */
    struct hlist sendq[HOMA_SENDQ_BUCKETS];
    uint64_t sendq_bits[HOMA_SENDQ_BUCKETS / 64];
    uint32_t sendq_len;
    struct hlist resending; /* outgoing messages with ranges to retransmit, oldest first */
    /* Outgoing messages with bytes never sent, in the order they started,
     * and the SRPT bytes still to send before the oldest of them that can
     * send gets a packet (grant_fifo_permille; output.c). */
    struct hlist send_fifo;
    int64_t send_fifo_credit;
    uint64_t fifo_xmits;    /* packets sent by that rule (tests) */
    struct hlist grantable; /* incoming messages needing grants, SRPT order */
    struct hlist zombies;   /* freed RPCs whose message the app still holds */
    struct hlist mem_waitq; /* RPCs waiting for max_rx_bytes, FIFO */
    /* Bytes of delivered messages the application holds (counted in
     * rx_bytes_in_use until released or taken), and the last time any rx
     * memory was freed: a client's response that waits for memory it
     * cannot get unless the application lets go (held_bytes plus its
     * length exceed max_rx_bytes) while none is freed for a timeout fails
     * with HOMA_ERR_NOMEM. */
    uint64_t held_bytes;
    uint64_t mem_freed_at;
    uint64_t mem_waits; /* RPCs that ever waited there (tests, diagnostics) */
    uint64_t mem_fails; /* responses failed for a wait that could not end */

    /* receiver scheduling */
    int64_t nonfifo_left;
    /* a batch of input (homa_engine_input_begin .. _end): grant decisions
     * and the want_tx notification wait for its end */
    bool in_batch;
    bool batch_grants;
    /* The last RPC each kind of lookup found (rpc.c): packets come in runs
     * for one RPC, so the next lookup usually needs no hashing. */
    struct homa_rpc *last_client, *last_server;

    /* control queue (ring) */
    struct homa_ctl *ctl;
    uint32_t ctl_head, ctl_count;
    uint64_t ctl_seq; /* sequence number of the entry at ctl_head */

    /* pacer */
    uint64_t nic_free_at;
    bool pacer_blocked;
    uint64_t pacer_q16; /* ns per link byte, 16.16 fixed point (no division per packet) */

    /* deferred frees of outgoing buffers while pulled payloads are pinned */
    uint32_t tx_pins;
    void **deferred;
    size_t deferred_n, deferred_cap;

    /* direct receive (homa_engine_place_*): the RPC whose message buffer a
     * driver is writing into, and the bytes it was given; if the RPC goes
     * away meanwhile its buffer is kept in place_orphan until the end */
    bool placing;
    struct homa_rpc *place_rpc;
    uint8_t *place_orphan;
    uint32_t place_offset, place_len;
    uint8_t place_hdr[HOMA_DATA_HDR_LEN];
    homa_addr place_src;

    /* Recently freed large message buffers, reused for new messages of
     * about the same length: freeing megabyte buffers to malloc lets it
     * return them to the kernel, and every page then faults in again on
     * the next message (15-20 % of a 16 MB allreduce's time). */
    struct {
        uint8_t *buf;
        uint32_t cap;
    } bufcache[HOMA_BUFCACHE_SLOTS];
    uint32_t bufcache_n;
    uint64_t bufcache_bytes;

    /* tombstones (rpc.c) */
    struct homa_tomb *tombs;        /* max_tombstones entries */
    struct homa_htab tomb_tab;      /* by id, client address and port */
    uint32_t tomb_head, tomb_count; /* FIFO ring over tombs[] */
};

/* ---- rpc.c ---- */
int homa_rpc_tables_init(struct homa_engine *eng);
/* Frees every RPC (zombies too), then the tables. */
void homa_rpc_tables_destroy(struct homa_engine *eng);
/* A new RPC in `state` (RPC_CLIENT_ACTIVE or RPC_SERVER_INCOMING), in the
 * tables and on the timer wheel; NULL when out of memory. */
struct homa_rpc *homa_rpc_new(struct homa_engine *eng, uint64_t id, struct homa_port *port,
                              struct homa_peer *peer, uint16_t peer_port, uint8_t state);
/* Lookups (a hit makes the next timer run look at the RPC). */
struct homa_rpc *homa_find_client(struct homa_engine *eng, uint64_t id);
struct homa_rpc *homa_find_server(struct homa_engine *eng, uint64_t id, const homa_addr *addr,
                                  uint16_t peer_port);
/* Unlinks rpc from every table and list and frees it, or leaves it a
 * zombie while the application holds its message (rpc.h). */
void homa_rpc_free(struct homa_engine *eng, struct homa_rpc *rpc);
/* Frees a zombie, or any RPC already unlinked from everything. */
void homa_rpc_destroy(struct homa_engine *eng, struct homa_rpc *rpc);
void homa_rpc_make_ready(struct homa_engine *eng, struct homa_rpc *rpc);
/* A client RPC ends with an error: stop all protocol activity and report it. */
void homa_rpc_fail(struct homa_engine *eng, struct homa_rpc *rpc, int err);
/* Frees rpc's incoming message and its accounting (grants, memory). */
void homa_rpc_release_in(struct homa_engine *eng, struct homa_rpc *rpc);
/* Frees rpc's incoming message (homa_msgin_destroy), keeping its buffer
 * alive if a driver is receiving into it (direct receive). */
void homa_in_destroy(struct homa_engine *eng, struct homa_rpc *rpc);
/* True if a tombstone for the server RPC exists; a hit renews it (the
 * client is still alive), see rpc.c. */
bool homa_tomb_find(struct homa_engine *eng, uint64_t id, const homa_addr *addr, uint16_t port);
void homa_tomb_add(struct homa_engine *eng, uint64_t id, const homa_addr *addr, uint16_t port);
void homa_tombs_expire(struct homa_engine *eng, uint64_t now);

/* ---- peer.c ---- */
int homa_peer_table_init(struct homa_engine *eng);
void homa_peer_table_destroy(struct homa_engine *eng);
struct homa_peer *homa_peer_get(struct homa_engine *eng, const homa_addr *addr, bool create);
/* A packet from remote port `port` of peer found one of our RPCs. */
void homa_peer_heard(struct homa_peer *peer, uint16_t port, uint64_t now);
/* When remote port `port` of peer was last heard from; 0 if never (or
 * forgotten, beyond HOMA_PEER_MAX_PORTS ports). */
uint64_t homa_peer_port_heard(const struct homa_peer *peer, uint16_t port);
/* The timer ran `late` ns late (a local stall): moves every peer's and
 * port's last-heard time that much later (at most to now), as for RPCs. */
void homa_peers_forgive(struct homa_engine *eng, uint64_t now, uint64_t late);
/* Frees peers without RPCs for a timeout. */
void homa_peers_reap(struct homa_engine *eng, uint64_t now);
/* Moves the acks peer is owed from local port cport (all but client id
 * skip, 0 for none) into ACK packet pkt, up to its capacity. */
void homa_peer_take_acks(struct homa_peer *peer, uint16_t cport, uint64_t skip,
                         struct homa_wire_pkt *pkt);
void homa_peer_queue_ack(struct homa_engine *eng, struct homa_peer *peer, uint64_t client_id,
                         uint16_t server_port, uint16_t client_port);

/* ---- port.c ---- */
int homa_port_table_init(struct homa_engine *eng);
void homa_port_table_destroy(struct homa_engine *eng);
struct homa_port *homa_port_find(struct homa_engine *eng, uint16_t num);

/* ---- buf.c ---- */
/* A malloc()ed buffer of at least len bytes (at least 1), from the cache
 * of freed large buffers when one fits; NULL when out of memory. */
uint8_t *homa_buf_get(struct homa_engine *eng, uint32_t len);
/* Frees buf (malloc()ed, at least cap bytes) or keeps it for reuse. */
void homa_buf_put(struct homa_engine *eng, uint8_t *buf, uint32_t cap);
/* homa_buf_put for an outgoing message's buffer, deferred while a driver
 * may still read pulled payloads from it (until homa_engine_pull_done). */
void homa_free_outbuf(struct homa_engine *eng, uint8_t *buf, uint32_t cap);
/* Frees the cache and the deferred buffers (engine destroy). */
void homa_bufs_destroy(struct homa_engine *eng);

/* ---- ctl.c ---- */
/* Queues control packet pkt (its type and fields set) for dst; rpc, if not
 * NULL, is the RPC it is about (a GRANT replaces its queued predecessor). */
void homa_ctl_queue(struct homa_engine *eng, struct homa_rpc *rpc, const homa_addr *dst,
                    uint16_t sport, uint16_t dport, struct homa_wire_pkt *pkt);
/* Queues a header-only control packet of `type` about local id `id`. */
void homa_ctl_simple(struct homa_engine *eng, uint8_t type, uint64_t id, const homa_addr *dst,
                     uint16_t sport, uint16_t dport);
/* Tells the driver (ops.want_tx) if there is anything to send. */
void homa_notify_tx(struct homa_engine *eng);

/* ---- input.c ---- */
/* Messages waiting for max_rx_bytes get their buffers, in order. */
void homa_mem_wait_serve(struct homa_engine *eng, uint64_t now);

/* ---- output.c ---- */
void homa_out_start(struct homa_engine *eng, struct homa_rpc *rpc, uint8_t *buf, uint32_t len);
/* Messages in the send queue (something to send now). */
uint32_t homa_out_queued(const struct homa_engine *eng);
void homa_out_update(struct homa_engine *eng, struct homa_rpc *rpc);
void homa_out_remove(struct homa_engine *eng, struct homa_rpc *rpc);
bool homa_out_done(const struct homa_msgout *m);
uint8_t homa_unsched_prio(const struct homa_engine *eng, const uint32_t *cutoffs, uint32_t length);
void homa_out_add_rtx(struct homa_engine *eng, struct homa_rpc *rpc, uint32_t start, uint32_t end,
                      uint8_t prio);
/* Queues for retransmission the part of [start, end) that had left before
 * `arrived` (when the RESEND asking for it reached us) and was not
 * retransmitted since; returns the bytes queued. */
uint32_t homa_out_resend(struct homa_engine *eng, struct homa_rpc *rpc, uint32_t start,
                         uint32_t end, uint8_t prio, uint64_t arrived);
/* The message starts over (a request restarted after RPC_UNKNOWN): off
 * every queue, its transmission history forgotten, and back in the FIFO
 * as a message starting now; the caller then calls homa_out_update. */
void homa_out_restart(struct homa_engine *eng, struct homa_rpc *rpc);

/* ---- grant.c ---- */
void homa_grant_add(struct homa_engine *eng, struct homa_rpc *rpc);
void homa_grant_remove(struct homa_engine *eng, struct homa_rpc *rpc);
void homa_grant_update(struct homa_engine *eng, struct homa_rpc *rpc);
void homa_grant_check(struct homa_engine *eng);
uint8_t homa_grant_prio_for_rank(const struct homa_engine *eng, int rank, int num_active);
static inline uint32_t homa_in_outstanding(const struct homa_msgin *m)
{
    return m->granted > m->received ? m->granted - m->received : 0;
}

/* ---- cutoffs.c ---- */
void homa_cutoffs_init(struct homa_engine *eng);
void homa_cutoffs_observe(struct homa_engine *eng, uint32_t length);
uint8_t homa_cutoffs_max_sched(const uint32_t *cutoffs, uint32_t num_priorities);

/* ---- timer.c ---- */
/* late: how much later than a tick after the previous run this one is (a
 * local stall, not counted as silence). */
void homa_timer_run(struct homa_engine *eng, uint64_t now, uint64_t late);
/* Asks for the missing ranges of rpc's incoming message (all of them and
 * the tail if `silent`); returns when a hole not asked for now will be old
 * enough to ask for (UINT64_MAX: none). */
uint64_t homa_request_missing(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t now,
                              bool silent);
/* No byte of the response yet: asks the server for its start. */
void homa_resend_response_start(struct homa_engine *eng, struct homa_rpc *rpc);
/* BUSY from the receiving side: we are alive, the pause is ours. */
void homa_send_receiver_busy(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t now);
/* Takes rpc off the timer wheel and out of any budget queue (freeing). */
void homa_timer_forget(struct homa_rpc *rpc);
void homa_timer_schedule(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t tick);
/* Something happened to rpc (a packet, a grant, a call, a transmission):
 * the next timer run looks at it, as if every RPC were checked each tick.
 * Between events the timer visits an RPC only when its next deadline
 * comes. */
static inline void homa_timer_soon(struct homa_engine *eng, struct homa_rpc *rpc)
{
    uint64_t t = eng->ticks + 1;
    if (rpc->timer_tick == t && hlist_linked(&rpc->timer_node)) return;
    homa_timer_schedule(eng, rpc, t);
}

/* ---- small helpers shared by several files ---- */
/* The peer showed life for rpc at `now` (or the silence since is ours). */
static inline void homa_rpc_heard(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t now)
{
    rpc->last_heard = now;
    rpc->forgiven_seen = eng->forgiven;
}
/* The SRPT bytes a sender sends per packet it gives its oldest message
 * (grant_fifo_permille > 0; output.c). */
static inline int64_t homa_send_fifo_period(const struct homa_engine *eng)
{
    uint32_t p = eng->cfg.grant_fifo_permille;
    return (int64_t)eng->cfg.max_payload * (1000 - p) / p;
}

/* rpc no longer waits in eng->mem_waitq (served, failed, restarted or
 * freed); harmless if it was not waiting. */
static inline void homa_mem_wait_leave(struct homa_rpc *rpc)
{
    hlist_del(&rpc->mem_node);
    rpc->mem_wait = false;
}

/* rpc's incoming buffer stops counting against max_rx_bytes (it is freed,
 * taken by the application, or discarded for a restart). */
static inline void homa_rx_mem_release(struct homa_engine *eng, struct homa_rpc *rpc)
{
    eng->ctr.rx_bytes_in_use -= rpc->in.length;
    eng->mem_freed_at = eng->now;
    if (rpc->mem_held) eng->held_bytes -= rpc->in.length;
    rpc->mem_held = false;
}

/* An interval d less the receive-path wait `lag` (not below 0). */
static inline uint64_t homa_less_lag(uint64_t d, uint64_t lag)
{
    return d > lag ? d - lag : 0;
}

static inline void homa_gauge_max(uint64_t *peak, uint64_t v)
{
    if (v > *peak) *peak = v;
}

#endif
