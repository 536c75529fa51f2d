/* Engine internals shared by the files of src/core.  Nothing here is public. */
#ifndef HOMA_CORE_INTERNAL_H
#define HOMA_CORE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <homa/engine.h>

#include "wire.h"

/* ---- intrusive circular doubly linked lists ---- */
struct hlist {
    struct hlist *next, *prev;
};

static inline void hlist_init(struct hlist *h)
{
    h->next = h->prev = h;
}
static inline bool hlist_empty(const struct hlist *h)
{
    return h->next == h;
}
static inline bool hlist_linked(const struct hlist *n)
{
    return n->next != NULL && n->next != n;
}
static inline void hlist_insert_before(struct hlist *pos, struct hlist *n)
{
    n->prev = pos->prev;
    n->next = pos;
    pos->prev->next = n;
    pos->prev = n;
}
static inline void hlist_add_tail(struct hlist *h, struct hlist *n)
{
    hlist_insert_before(h, n);
}
static inline void hlist_del(struct hlist *n)
{
    if (!hlist_linked(n)) return;
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = n;
}
#define HOMA_CONTAINER(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- incoming message reassembly (msgin.c) ---- */
struct homa_gap {
    uint32_t start, end; /* missing bytes [start, end) */
    uint64_t at;         /* when it opened or was last asked for again */
};

#define HOMA_PRIO_NONE 0xff
#define HOMA_MAX_GAPS 4096 /* a sender fragmenting more than this is refused */

struct homa_msgin {
    uint8_t *buf;
    uint32_t length;
    uint32_t received; /* distinct bytes received */
    uint32_t recv_end; /* one past the highest byte received */
    uint32_t granted;  /* the sender may send below this */
    uint32_t seg_size; /* largest payload seen: grants are rounded to it */
    uint32_t num_gaps, cap_gaps;
    struct homa_gap *gaps; /* sorted, disjoint, all below recv_end */
    uint8_t prio;          /* priority of our latest grant, or HOMA_PRIO_NONE */
    bool active;           /* length known, buffer allocated */
    bool taken;            /* the application took buf (homa_engine_msg_take) */
};

/* Result of homa_msgin_add. */
enum { HOMA_MSGIN_NEW = 0, HOMA_MSGIN_DUP = 1, HOMA_MSGIN_NOMEM = 2 };

/* Initialises for a message of `length` bytes (allocates the buffer). */
int homa_msgin_init(struct homa_msgin *m, uint32_t length, uint32_t granted);
/* As homa_msgin_init with buf (length bytes, malloc()ed) supplied. */
void homa_msgin_init_buf(struct homa_msgin *m, uint8_t *buf, uint32_t length, uint32_t granted);
void homa_msgin_destroy(struct homa_msgin *m);
/* Copies the new bytes of [offset, offset+len) and updates the gaps.  The
 * caller has checked offset + len <= length.  *added gets the new byte count. */
int homa_msgin_add(struct homa_msgin *m, uint64_t now, uint32_t offset, const uint8_t *data,
                   uint32_t len, uint32_t *added);
/* True if no byte of [offset, offset+len) has arrived (len > 0, inside the
 * message): a payload may then be written there before it is accepted. */
bool homa_msgin_missing(const struct homa_msgin *m, uint32_t offset, uint32_t len);
static inline bool homa_msgin_complete(const struct homa_msgin *m)
{
    return m->active && m->received == m->length;
}
/* First range the receiver is waiting for below `limit`; false if none. */
bool homa_msgin_first_missing(const struct homa_msgin *m, uint32_t limit, uint32_t *start,
                              uint32_t *end);

/* ---- outgoing messages ---- */
/* Ranges a sender keeps to retransmit; a RESEND beyond them is ignored (the
 * receiver asks again), never merged into a wider range. */
#define HOMA_MAX_RTX 32

struct homa_rtx {
    uint32_t start, end;
    uint8_t prio;
};

/* When a message's bytes left (first transmissions and retransmissions), so
 * that a RESEND that arrived before some of them were sent does not have
 * them sent again: its sender wrote it before it could have seen them. */
#define HOMA_XMIT_MARKS 4
struct homa_xmit_mark {
    uint32_t off; /* first transmission: bytes >= off left at or after at */
    uint64_t at;
};
#define HOMA_RTX_SENT 4
struct homa_rtx_sent {
    uint32_t start, end; /* retransmitted at `at` (the latest of the run) */
    uint64_t at;
};

struct homa_msgout {
    uint8_t *buf;
    uint32_t length;
    uint32_t next_xmit; /* first byte never transmitted */
    uint32_t granted;   /* may transmit below this */
    uint32_t unsched;   /* bytes sent at the unscheduled priority */
    uint8_t unsched_prio;
    uint8_t sched_prio;
    bool active;
    bool empty_pending; /* a 0-byte message still owes its one packet */
    uint8_t num_rtx;
    struct homa_rtx rtx[HOMA_MAX_RTX];
    uint8_t num_marks, num_rsent; /* rings, oldest first */
    struct homa_xmit_mark marks[HOMA_XMIT_MARKS];
    struct homa_rtx_sent rsent[HOMA_RTX_SENT];
};

/* ---- RPCs ---- */
enum homa_rpc_state {
    RPC_CLIENT_ACTIVE = 1, /* request going out and/or response coming in */
    RPC_CLIENT_READY,      /* response complete or RPC failed; in the port's ready queue */
    RPC_CLIENT_DELIVERED,  /* handed to the application; freed on release */
    RPC_SERVER_INCOMING,   /* receiving the request */
    RPC_SERVER_READY,      /* request complete, in the ready queue */
    RPC_SERVER_IN_SERVICE, /* request handed to the application, no reply yet */
    RPC_SERVER_OUTGOING,   /* sending the response, then waiting for the ack */
};

struct homa_peer;
struct homa_port;

#define HOMA_WHEEL_SLOTS 1024 /* power of two */
/* Send queue buckets (output.c): one per byte count below 1,024 bytes left,
 * then 32 per power of two up to 2^32 (1,728, a multiple of 64). */
#define HOMA_SENDQ_CLASS_BUCKETS 1728
/* One run of buckets per scheduling class, the highest class first, so a
 * find-first-set over all of them serves classes in order. */
#define HOMA_SENDQ_BUCKETS (HOMA_SENDQ_CLASS_BUCKETS * HOMA_SCHED_CLASSES)

struct homa_rpc {
    uint64_t id; /* local id: even for client RPCs, odd for server RPCs */
    struct homa_rpc *hnext;
    struct homa_peer *peer;
    struct homa_port *port;
    uint16_t peer_port;
    uint8_t state;
    bool app_holds; /* the application holds a homa_msg pointing at us */
    bool mem_held;  /* in.length counted in eng->held_bytes */
    bool zombie;    /* unlinked from everything; freed at release */
    int error;
    uint64_t cookie;
    uint64_t birth;
    uint64_t last_heard;   /* last packet from the peer that showed progress/liveness */
    uint64_t last_prodded; /* last RESEND/BUSY/NEED_ACK we sent */
    uint64_t last_told;    /* last GRANT/RESEND/BUSY we sent as its receiver */
    uint64_t grant_ctl;    /* 1 + control-queue sequence number of our queued GRANT, 0 = none */
    /* Client RPC: the server has said something about this request since it
     * was (re)started (BUSY, GRANT, RESEND, DATA, NEED_ACK), so it has it;
     * until then a RESEND is loss recovery, not a liveness prod. */
    bool confirmed;
    /* RPC_UNKNOWN answers since the server last had the request, and when
     * the first of them came: a live server that keeps forgetting the
     * request (refusal, restart loop) fails it, but only after a timeout,
     * since on a lossy path a restarted request can be lost again and
     * again while the server is fine. */
    uint8_t unknowns;
    uint64_t unknown_since;
    /* Unanswered RESENDs for an unconfirmed request: each doubles the wait
     * before the next (a server too busy to answer is not flooded). */
    uint8_t probes;
    /* Client: when the request's last byte first left since it was
     * (re)started, and whether it was ever restarted (then its response
     * time is no sample: which copy was answered is unknown). */
    uint64_t req_out_at;
    bool restarted;
    /* Client: a RESEND went out since the request was (re)started; an
     * RPC_UNKNOWN without one is a duplicate and restarts nothing. */
    bool asked;
    /* Receiving side: when rpc->in last got new bytes (or its sender said
     * BUSY), and the RESEND rounds since.  A message that gets nothing for
     * a timeout although we asked HOMA_ASKS_FATAL times is given up even
     * while its sender answers for others (e.g. a packet that never gets
     * through). */
    uint64_t in_progress;
    uint8_t asks;
    /* When the first RESEND not yet answered left (0: none), and when an
     * ask was last counted in `asks`. */
    uint64_t ask_at, ask_counted;
    uint16_t send_bucket; /* while send_node is linked */
    /* An incoming message (a request, or a client's response) that arrived
     * when max_rx_bytes was spent waits in eng->mem_waitq (mem_node) for
     * its buffer, without one, since mem_since: its DATA is dropped
     * meanwhile (a server's request: a RESEND from its client draws BUSY;
     * a client's response: the client tells the server BUSY), and once
     * memory frees it gets a buffer and asks for its first mem_incoming
     * bytes (what the sender sends unscheduled) again. */
    bool mem_wait;
    uint32_t mem_len, mem_incoming;
    uint64_t mem_since;
    struct hlist mem_node;
    /* Client: the application limited the request's DATA packets to
     * priorities prio_lo..prio_hi (homa_engine_request_priority); kept on
     * the RPC, not in `out`, so that a restart keeps it. */
    bool prio_limit;
    uint8_t prio_lo, prio_hi;
    /* Scheduling class (homa_engine_port_set_class), its port's when it
     * was created: orders the send queue and the grants before SRPT. */
    uint8_t sched_class;
    struct homa_msgout out;
    struct homa_msgin in;
    struct hlist all_node;   /* eng->rpcs */
    struct hlist ready_node; /* port->ready */
    struct hlist send_node;  /* eng->sendq[send_bucket] (sorted) */
    struct hlist rtx_node;   /* eng->resending (FIFO) while out.num_rtx > 0 */
    struct hlist grant_node; /* eng->grantable (sorted) */
    struct hlist fifo_node;  /* eng->send_fifo while its message has bytes never sent */
    /* Timer: the wheel slot of the tick that next looks at this RPC
     * (timer_tick), and, while it waits for a share of its peer's prod
     * budget, its place in that peer's queue (waiting = class + 1;
     * granted = class + 1 once popped, spent by the next prod). */
    struct hlist timer_node;
    uint64_t timer_tick;
    struct hlist wait_node;
    uint8_t waiting, granted;
    bool wanted;            /* asked for budget in the current check */
    uint64_t forgiven_seen; /* eng->forgiven when last_heard was set */
};

/* ---- peers and ports ---- */
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
    uint32_t max_payload; /* DATA payload per packet on the path to it */
    struct homa_peer *hnext;
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
    struct homa_port *hnext;
    struct hlist ready; /* rpcs ready for recv, FIFO */
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
    int32_t hnext; /* index chain, -1 = end */
    bool used;
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

    /* hash tables */
    struct homa_rpc **client_tab;
    size_t client_nb, client_n;
    struct homa_rpc **server_tab;
    size_t server_nb, server_n;
    struct homa_peer **peer_tab;
    size_t peer_nb, peer_n;
    struct homa_port *port_tab[64];
    uint32_t num_ports;

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

    /* tombstones */
    struct homa_tomb *tombs;
    int32_t *tomb_buckets;
    uint32_t tomb_nb;
    uint32_t tomb_head, tomb_count; /* FIFO ring over tombs[] */
};

/* engine.c */
struct homa_rpc *homa_find_client(struct homa_engine *eng, uint64_t id);
struct homa_rpc *homa_find_server(struct homa_engine *eng, uint64_t id, const homa_addr *addr,
                                  uint16_t peer_port);
struct homa_peer *homa_peer_get(struct homa_engine *eng, const homa_addr *addr, bool create);
/* A packet from remote port `port` of peer found one of our RPCs. */
void homa_peer_heard(struct homa_peer *peer, uint16_t port, uint64_t now);
/* When remote port `port` of peer was last heard from; 0 if never (or
 * forgotten, beyond HOMA_PEER_MAX_PORTS ports). */
uint64_t homa_peer_port_heard(const struct homa_peer *peer, uint16_t port);
/* The timer ran `late` ns late (a local stall): moves every peer's and
 * port's last-heard time that much later (at most to now), as for RPCs. */
void homa_peers_forgive(struct homa_engine *eng, uint64_t now, uint64_t late);
struct homa_port *homa_port_find(struct homa_engine *eng, uint16_t num);
void homa_rpc_free(struct homa_engine *eng, struct homa_rpc *rpc);
/* homa_rpc_free for a server RPC given up on (timeout): no tombstone, so a
 * client that is alive after all can restart the request under its id. */
void homa_rpc_abandon(struct homa_engine *eng, struct homa_rpc *rpc);
void homa_rpc_make_ready(struct homa_engine *eng, struct homa_rpc *rpc);
void homa_rpc_fail(struct homa_engine *eng, struct homa_rpc *rpc, int err);
void homa_ctl_queue(struct homa_engine *eng, struct homa_rpc *rpc, const homa_addr *dst,
                    uint16_t sport, uint16_t dport, struct homa_wire_pkt *pkt);
void homa_notify_tx(struct homa_engine *eng);
void homa_free_outbuf(struct homa_engine *eng, uint8_t *buf, uint32_t cap);
/* A malloc()ed buffer of at least len bytes (at least 1), from the cache
 * of freed large buffers when one fits; NULL when out of memory. */
uint8_t *homa_buf_get(struct homa_engine *eng, uint32_t len);
/* Frees buf (malloc()ed, at least cap bytes) or keeps it for reuse. */
void homa_buf_put(struct homa_engine *eng, uint8_t *buf, uint32_t cap);
/* True if a tombstone for the server RPC exists; a hit renews it (the
 * client is still alive), see engine.c. */
bool homa_tomb_find(struct homa_engine *eng, uint64_t id, const homa_addr *addr, uint16_t port);
void homa_tomb_add(struct homa_engine *eng, uint64_t id, const homa_addr *addr, uint16_t port);
/* Moves the acks peer is owed from local port cport (all but client id
 * skip, 0 for none) into ACK packet pkt, up to its capacity. */
void homa_peer_take_acks(struct homa_peer *peer, uint16_t cport, uint64_t skip,
                         struct homa_wire_pkt *pkt);
void homa_peer_queue_ack(struct homa_engine *eng, struct homa_peer *peer, uint64_t client_id,
                         uint16_t server_port, uint16_t client_port);
/* Frees rpc's incoming message (homa_msgin_destroy), keeping its buffer
 * alive if a driver is receiving into it (direct receive). */
void homa_in_destroy(struct homa_engine *eng, struct homa_rpc *rpc);

/* output.c */
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

/* grant.c */
void homa_grant_add(struct homa_engine *eng, struct homa_rpc *rpc);
void homa_grant_remove(struct homa_engine *eng, struct homa_rpc *rpc);
void homa_grant_update(struct homa_engine *eng, struct homa_rpc *rpc);
void homa_grant_check(struct homa_engine *eng);
uint8_t homa_grant_prio_for_rank(const struct homa_engine *eng, int rank, int num_active);
static inline uint32_t homa_in_outstanding(const struct homa_msgin *m)
{
    return m->granted > m->received ? m->granted - m->received : 0;
}

/* cutoffs.c */
void homa_cutoffs_init(struct homa_engine *eng);
void homa_cutoffs_observe(struct homa_engine *eng, uint32_t length);
uint8_t homa_cutoffs_max_sched(const uint32_t *cutoffs, uint32_t num_priorities);

/* input.c */
/* late: how much later than a tick after the previous run this one is (a
 * local stall, not counted as silence). */
void homa_timer_run(struct homa_engine *eng, uint64_t now, uint64_t late);
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
