/* The homad shared-memory protocol (docs/homad.md): the layout of the region
 * one process shares with the daemon, the two rings, and the checks the
 * daemon applies to everything the process writes.  Pure code: no system
 * calls, so the fuzzer (fuzz/fuzz_homad.c) and the unit tests drive it on
 * ordinary memory. */
#ifndef HOMA_HOMAD_PROTO_H
#define HOMA_HOMAD_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include <homa/homa.h>

#define HOMAD_MAGIC 0x484f4d44u /* "HOMD" */
#define HOMAD_VERSION 1u
#define HOMAD_HDR_BYTES 4096u
#define HOMAD_CTRL_BYTES 4096u
#define HOMAD_CTRS_BYTES 8192u

/* Limits on what a daemon may configure (and a client accepts). */
#define HOMAD_MAX_RING 65536u
#define HOMAD_MAX_SLOTS 4096u
#define HOMAD_MAX_SLOT_SIZE (64u << 20)

/* Unix-socket handshake messages (SOCK_SEQPACKET). */
struct homad_hello {
    uint32_t magic;
    uint32_t version;
};
struct homad_welcome {
    uint32_t magic;
    uint32_t version;
    int32_t result; /* 0, or why the daemon refused (HOMA_ERR_*) */
    uint32_t pad;
    uint64_t region_bytes;
};

/* Sent with an eventfd (SCM_RIGHTS) in answer to HOMAD_OP_FD, before the
 * DONE: homad writes the eventfd whenever it delivers to that port. */
struct homad_fdmsg {
    uint32_t magic;
    uint16_t port;
    uint16_t pad;
};

/* Commands, app -> daemon. */
enum homad_op {
    HOMAD_OP_OPEN = 1, /* addr (0 = wildcard), port (0 = ephemeral) -> DONE: result, port */
    HOMAD_OP_CLOSE,    /* port -> DONE */
    HOMAD_OP_SEND,     /* port, addr:peer_port, slot, len, cookie -> DONE: result, id */
    HOMAD_OP_REPLY,    /* port, addr:peer_port, id, slot, len -> DONE */
    HOMAD_OP_ABORT,    /* port, id -> DONE */
    HOMAD_OP_RELEASE,  /* slot (an RX slot) -> nothing */
    HOMAD_OP_COUNTERS, /* -> counters area filled, then DONE */
    HOMAD_OP_LINGER,   /* port, id = timeout ns (UINT64_MAX forever) -> DONE when idle */
    HOMAD_OP_STATS,    /* -> DONE: slot, len = an RX slot of homad_proc_row (release it) */
    HOMAD_OP_FD,       /* port -> an eventfd on the unix socket (struct homad_fdmsg), DONE */
    HOMAD_OP_CLASS,    /* port, len = scheduling class -> DONE */
    HOMAD_OP__COUNT
};

/* One command: 64 bytes.  Fields a command does not use must be zero. */
struct homad_cmd {
    uint8_t op;
    uint8_t flags; /* 0; SEND: HOMAD_SEND_PRIO or 0 */
    uint16_t port;
    uint32_t slot;
    uint32_t len;
    uint32_t rsvd; /* 0 */
    uint64_t tag;  /* echoed in the DONE completion */
    uint64_t id;
    uint64_t cookie;
    homa_addr addr;
    uint16_t peer_port;
    uint8_t pad[6]; /* 0 */
};

/* SEND flags: the request's DATA packets use priorities lo..hi only
 * (homa_sendx's HOMA_SEND_PRIO).  Bit 6 is 0. */
#define HOMAD_SEND_PRIO_ON 0x80u
#define HOMAD_SEND_PRIO(lo, hi) ((uint8_t)(HOMAD_SEND_PRIO_ON | ((lo)&7u) | ((hi)&7u) << 3))
#define HOMAD_SEND_PRIO_LO(f) ((f)&7u)
#define HOMAD_SEND_PRIO_HI(f) (((f) >> 3) & 7u)

enum homad_kind {
    HOMAD_CQ_DONE = 1, /* a command finished: tag, result, port (OPEN), id (SEND) */
    HOMAD_CQ_MSG,      /* a message: port, id, cookie, peer, is_request, slot, len */
    HOMAD_CQ_RPC_ERR,  /* a client RPC failed: port, id, cookie, peer, result */
};

/* One completion: 64 bytes. */
struct homad_cqe {
    uint8_t kind;
    uint8_t is_request;
    uint16_t port;
    int32_t result;
    uint32_t slot;
    uint32_t len;
    uint64_t tag;
    uint64_t id;
    uint64_t cookie;
    homa_addr peer;
    uint16_t peer_port;
    uint8_t pad[6];
};

/* The region header, written by the daemon before the region is passed. */
struct homad_hdr {
    uint32_t magic;
    uint32_t version;
    uint32_t ncmd, ncq; /* ring entries, powers of two */
    uint32_t ntx, nrx;  /* slots */
    uint64_t slot_size;
    uint64_t off_ctrl, off_ctrs, off_cmd, off_cq, off_tx, off_rx, total;
    uint32_t max_rpcs, max_ports; /* this process's quotas */
    homa_config cfg;              /* the engine's configuration */
};

/* Ring indexes, each written by one side only. */
struct homad_ctrl {
    _Alignas(64) uint32_t cmd_head; /* app */
    _Alignas(64) uint32_t cmd_tail; /* daemon */
    uint32_t daemon_sleeping;       /* daemon: write cmd_efd to wake me */
    _Alignas(64) uint32_t cq_head;  /* daemon */
    _Alignas(64) uint32_t cq_tail;  /* app */
    uint32_t app_sleeping;          /* app: write cq_efd to wake me */
};

/* Per-process counters kept by the daemon. */
#define HOMAD_PROC_COUNTER_LIST(X)                                                                 \
    X(commands, "commands executed")                                                               \
    X(bad_commands, "commands refused by validation")                                              \
    X(requests_sent, "client RPCs started")                                                        \
    X(replies_sent, "replies sent")                                                                \
    X(msgs_delivered, "messages delivered into RX slots")                                          \
    X(rpc_errors, "failed client RPCs delivered")                                                  \
    X(bytes_sent, "message bytes sent")                                                            \
    X(bytes_delivered, "message bytes delivered")                                                  \
    X(quota_refusals, "commands refused by a quota")                                               \
    X(perm_refusals, "port bindings and classes refused by the policy")                            \
    X(ports_open, "gauge: open ports")                                                             \
    X(rpcs_live, "gauge: client RPCs in flight")                                                   \
    X(rx_slots_held, "gauge: RX slots held by the process")

struct homad_proc_counters {
#define HOMAD_PC_FIELD(name, desc) uint64_t name;
    HOMAD_PROC_COUNTER_LIST(HOMAD_PC_FIELD)
#undef HOMAD_PC_FIELD
};

/* One process in a STATS table. */
struct homad_proc_row {
    int32_t pid;
    uint32_t uid;
    struct homad_proc_counters pc;
};

/* The counters area (COUNTERS fills it). */
struct homad_ctrs {
    homa_counters engine;
    homa_driver_counters driver;
    struct homad_proc_counters proc;
    uint64_t processes;   /* host-wide: connected processes */
    homa_cutoffs cutoffs; /* the host engine's (homa_runtime_cutoffs) */
};

/* Sizes a region.  Returns 0 or HOMA_ERR_INVAL (ring sizes not powers of
 * two, or out of the limits above). */
int homad_layout(struct homad_hdr *h, uint32_t ncmd, uint32_t ncq, uint32_t ntx, uint32_t nrx,
                 uint64_t slot_size);
/* A client's check of a header it mapped (region_bytes = what it mapped):
 * the same limits, offsets inside the region.  0 or HOMA_ERR_INVAL. */
int homad_hdr_check(const struct homad_hdr *h, uint64_t region_bytes);

/* A view of a mapped region, built from a checked header (values copied
 * into private memory: the header's copy is not read again). */
struct homad_view {
    uint8_t *base;
    struct homad_ctrl *ctrl;
    struct homad_ctrs *ctrs;
    struct homad_cmd *cmd;
    struct homad_cqe *cq;
    uint8_t *tx;
    uint8_t *rx;
    uint32_t ncmd, ncq, ntx, nrx;
    uint64_t slot_size;
    uint32_t max_msg;
};
void homad_view_init(struct homad_view *v, void *base, const struct homad_hdr *h);

/* ---- daemon side (the other side is untrusted) ---- */

/* Commands waiting, given the daemon's private tail: reads cmd_head once.
 * Returns the count (0..ncmd) or -1 if the head is impossible. */
int homad_cmd_avail(const struct homad_view *v, uint32_t tail);
/* Copies the entry at tail out of the ring. */
void homad_cmd_copy(const struct homad_view *v, uint32_t tail, struct homad_cmd *out);
/* Publishes the daemon's tail. */
void homad_cmd_consumed(const struct homad_view *v, uint32_t tail);
/* Checks a copied command's fields (op, zero fields, slot index, length).
 * The port-ownership and RX-slot checks need the daemon's state: see
 * homad_rx_*.  0 or HOMA_ERR_INVAL (or HOMA_ERR_MSGSIZE for a length over
 * the slot or the maximum message length). */
int homad_cmd_check(const struct homad_view *v, const struct homad_cmd *c);
/* Free completion entries, given the daemon's head and the last tail it
 * accepted (*tail_seen, updated): reads cq_tail once.  Returns 0..ncq, or -1
 * if the tail is impossible (behind the last one seen or past the head). */
int homad_cq_space(const struct homad_view *v, uint32_t head, uint32_t *tail_seen);
/* Writes a completion at head and publishes head + 1 (space checked). */
void homad_cq_push(const struct homad_view *v, uint32_t head, const struct homad_cqe *e);

/* RX slot ownership, daemon-private: a bitmap of slots the process holds. */
struct homad_rxmap {
    uint64_t bits[HOMAD_MAX_SLOTS / 64];
    uint32_t n;    /* slots */
    uint32_t held; /* slots in the process's hands */
};
void homad_rx_init(struct homad_rxmap *m, uint32_t n);
/* A free slot, marked held; -1 if none. */
int homad_rx_take(struct homad_rxmap *m);
/* Gives back slot `slot`: 0, or HOMA_ERR_INVAL if it is out of range or not
 * held (a forged or repeated RELEASE). */
int homad_rx_release(struct homad_rxmap *m, uint32_t slot);

/* ---- app side (the daemon is trusted, but indexes are still masked) ---- */

/* Free command entries for the app (its private head). */
uint32_t homad_cmd_space(const struct homad_view *v, uint32_t head);
void homad_cmd_push(const struct homad_view *v, uint32_t head, const struct homad_cmd *c);
/* Completions waiting for the app (its private tail). */
uint32_t homad_cq_avail(const struct homad_view *v, uint32_t tail);
void homad_cq_copy(const struct homad_view *v, uint32_t tail, struct homad_cqe *out);
void homad_cq_consumed(const struct homad_view *v, uint32_t tail);

#endif
