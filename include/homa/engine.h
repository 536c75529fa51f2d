/* libhoma protocol engine: a sans-I/O implementation of Homa.
 *
 * The engine owns protocol state only.  It never reads a clock, touches a
 * socket, starts a thread or draws a random number by itself:
 *   - every entry point takes `now`, a monotonic time in nanoseconds chosen
 *     by the caller (a real clock in the runtime, virtual time in tests);
 *   - packets come in through homa_engine_input() and go out when the caller
 *     pulls them with homa_engine_pull() (so SRPT and pacing are decided at
 *     the moment the link has room);
 *   - timers run when the caller calls homa_engine_timer() at or after
 *     homa_engine_next_deadline();
 *   - randomness and notifications go through caller-supplied callbacks.
 *
 * One engine serves many local ports; SRPT, grants and memory caps are
 * engine-wide.  An engine is not thread-safe: the caller serialises calls.
 *
 * Errors: negative HOMA_ERR_* values (homa/errors.h). */
#ifndef HOMA_ENGINE_H
#define HOMA_ENGINE_H

#include <homa/export.h>

#include <stddef.h>
#include <stdint.h>

#include <homa/errors.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct homa_engine homa_engine;

/* A peer host's address: 16 opaque bytes (the runtime stores an IPv6 or
 * IPv4-mapped address; the virtual network a host number).  The engine only
 * hashes and compares them. */
typedef struct homa_addr {
    uint8_t bytes[16];
} homa_addr;

/* All protocol parameters.  homa_config_default() fills the defaults of the
 * Linux implementation; homa_engine_create() validates. */
typedef struct homa_config {
    uint32_t max_message_length;   /* default 1,000,000; up to 2^31-1 */
    uint32_t max_payload;          /* payload bytes per DATA packet; default 1,400 */
    uint32_t unsched_bytes;        /* sent without grants; default 40,000 */
    uint32_t grant_window;         /* granted-ahead bytes per message; default = unsched_bytes */
    uint32_t max_incoming;         /* cap on granted-but-unreceived bytes; default 400,000 */
    uint32_t max_overcommit;       /* messages granted at once; default 8 */
    uint32_t grant_fifo_permille;  /* share of grants to the oldest message, and of a sender's
                                      DATA bytes to its oldest sendable one; default 50 (5 %) */
    uint32_t fifo_grant_increment; /* bytes per fifo grant; default 50,000 */
    uint32_t num_priorities;       /* 1..8; default 8 */
    /* unsched_cutoffs[i]: largest message length that may use priority i for
     * its unscheduled bytes (receiver-side, announced in CUTOFFS); entries
     * not used for unscheduled traffic are 0; entry 0 is "everything". */
    uint32_t unsched_cutoffs[8];
    uint64_t tick_ns;            /* timer tick; default 1 ms */
    uint32_t resend_ticks;       /* silence before the first RESEND; default 5 */
    uint32_t resend_interval;    /* ticks between RESENDs; default 5 */
    uint32_t timeout_ticks;      /* silence before an RPC is aborted; default 100 */
    uint32_t need_ack_ticks;     /* server waits this long for an ack; default 2 */
    uint64_t link_bps;           /* pacer link rate in bit/s; 0 = no pacing (default) */
    uint32_t max_nic_queue_ns;   /* pacer: max estimated NIC backlog; default 5,000 */
    uint32_t pacer_bypass_bytes; /* messages shorter than this are never paced; default 1,000 */
    /* Cap on memory for incoming messages; default 256 MiB.  A request or
     * response that finds it spent waits (its sender hears BUSY) and is
     * served first come first served as memory frees.  Refused are only a
     * message longer than the cap (a response: HOMA_ERR_NOMEM) and a
     * response that cannot fit beside the messages the application holds
     * (received, not yet released) while none is released for a timeout
     * (HOMA_ERR_NOMEM). */
    uint64_t max_rx_bytes;
    uint32_t max_rpcs;        /* cap on live RPCs (client + server); default 100,000 */
    uint32_t max_ports;       /* cap on open ports; default 1,024 */
    uint32_t tombstone_ticks; /* completed server RPC ids remembered this long; default 2*timeout */
    uint32_t max_tombstones;  /* cap on remembered completed server RPC ids; default 65,536 */
    /* A hole in an incoming message older than this many ticks is asked for
     * again even while other data keeps arriving (default 1; 0 = only after
     * resend_ticks of silence, as in Linux). */
    uint32_t gap_resend_ticks;
    /* Receiver computes its unscheduled cutoffs from the lengths of the
     * messages it receives and announces them (default 1); 0 = always
     * announce unsched_cutoffs as configured. */
    uint32_t adaptive_cutoffs;
    uint32_t cutoff_update_msgs; /* messages between recomputations; default 1,000 */
    /* Bytes each packet occupies on the link besides the Homa header and
     * payload (IP and UDP headers, link framing); the pacer counts them.
     * Default 0; the runtime sets 86 (IPv6 40 + UDP 8 + Ethernet 38, i.e.
     * header, FCS, preamble and gap) when left at 0.  At most 1,000. */
    uint32_t pkt_overhead;
} homa_config;

HOMA_API void homa_config_default(homa_config *cfg);
/* Returns 0 or HOMA_ERR_INVAL; *why (optional) gets a static explanation. */
HOMA_API int homa_config_validate(const homa_config *cfg, const char **why);

/* Caller-supplied hooks.  Every member is optional (NULL). */
typedef struct homa_engine_ops {
    void *ctx;
    /* Random 64-bit value (used for the first client id). */
    uint64_t (*random)(void *ctx);
    /* The engine has packets to send: the caller should pull soon. */
    void (*want_tx)(void *ctx);
    /* A message or a failed RPC became receivable on `port`. */
    void (*ready)(void *ctx, uint16_t port);
    /* The largest DATA payload that fits the path to `addr` (its MTU less
     * the IP, UDP and DATA headers), asked once when the engine first
     * talks to a peer; 0 or above max_payload: max_payload.  NULL: every
     * peer gets max_payload. */
    uint32_t (*path_payload)(void *ctx, const homa_addr *addr);
} homa_engine_ops;

/* Creates an engine.  cfg may be NULL for defaults.  Returns 0, HOMA_ERR_INVAL
 * or HOMA_ERR_NOMEM. */
HOMA_API int homa_engine_create(const homa_config *cfg, const homa_engine_ops *ops,
                                homa_engine **out);
/* Frees the engine and everything it holds, including unreleased messages. */
HOMA_API void homa_engine_destroy(homa_engine *eng);
HOMA_API const homa_config *homa_engine_config(const homa_engine *eng);

/* Opens local port `port` (1..65535).  HOMA_ERR_PORT_IN_USE, HOMA_ERR_LIMIT. */
HOMA_API int homa_engine_port_open(homa_engine *eng, uint16_t port);
/* Closes a port: aborts its RPCs and frees its unreleased messages. */
HOMA_API int homa_engine_port_close(homa_engine *eng, uint64_t now, uint16_t port);
/* Live RPCs of a port: client RPCs not yet completed and released, server
 * RPCs whose reply the client has not acknowledged yet.  Returns the count
 * or HOMA_ERR_NO_PORT / HOMA_ERR_INVAL. */
HOMA_API int homa_engine_port_rpcs(const homa_engine *eng, uint16_t port);
/* Sends now, in ACK packets, the acknowledgements the port owes servers
 * for responses it received (normally they ride on later requests, or
 * answer the server's NEED_ACK).  For a port about to go away: its servers
 * can free those RPCs at once instead of after a timeout.  Returns the
 * number of ACK packets queued, or HOMA_ERR_NO_PORT / HOMA_ERR_INVAL. */
HOMA_API int homa_engine_port_flush_acks(homa_engine *eng, uint64_t now, uint16_t port);

/* Starts a client RPC from local `port` to (dst, dport).  The engine copies
 * buf.  On success stores the RPC id (even) in *id.  Errors: HOMA_ERR_NO_PORT,
 * HOMA_ERR_MSGSIZE, HOMA_ERR_LIMIT, HOMA_ERR_NOMEM, HOMA_ERR_INVAL. */
HOMA_API int homa_engine_send_request(homa_engine *eng, uint64_t now, uint16_t port,
                                      const homa_addr *dst, uint16_t dport, const void *buf,
                                      size_t len, uint64_t cookie, uint64_t *id);
/* Replies to the server RPC `id` (odd) received on `port` from (peer,
 * peer_port): server ids are only unique per client, so the request's peer
 * identifies it (all three are in the homa_msg of the request).  The engine
 * copies buf.  Errors: HOMA_ERR_NOT_FOUND (unknown, or the client gave up),
 * HOMA_ERR_STATE (already replied), HOMA_ERR_MSGSIZE, HOMA_ERR_NOMEM. */
HOMA_API int homa_engine_send_reply(homa_engine *eng, uint64_t now, uint16_t port,
                                    const homa_addr *peer, uint16_t peer_port, uint64_t id,
                                    const void *buf, size_t len);
/* Zero-copy variants: the engine takes ownership of buf, which must come
 * from malloc() (it is released with free()), instead of copying it.  On
 * error the caller keeps ownership. */
HOMA_API int homa_engine_send_request_owned(homa_engine *eng, uint64_t now, uint16_t port,
                                            const homa_addr *dst, uint16_t dport, void *buf,
                                            size_t len, uint64_t cookie, uint64_t *id);
HOMA_API int homa_engine_send_reply_owned(homa_engine *eng, uint64_t now, uint16_t port,
                                          const homa_addr *peer, uint16_t peer_port, uint64_t id,
                                          void *buf, size_t len);
/* Aborts the client RPC `id` (even) of `port`: it is freed at once and never
 * reported by recv.  HOMA_ERR_NOT_FOUND if unknown; HOMA_ERR_STATE if its
 * response was already received by the application (release it instead). */
HOMA_API int homa_engine_abort(homa_engine *eng, uint64_t now, uint16_t port, uint64_t id);

/* Limits the priorities of the DATA packets of client RPC `id` (even) of
 * `port` to lo..hi (0 <= lo <= hi < num_priorities; 0 lowest): first
 * transmissions, retransmissions and a restarted request alike.  Within the
 * range the usual choice stands (the receiver's cutoffs for unscheduled
 * bytes, its grants for scheduled ones); outside it the nearer end is used.
 * lo = hi pins one level, e.g. a class of traffic the network should keep
 * apart.  Call it right after homa_engine_send_request*, before the next
 * homa_engine_pull, for the first packets to obey; a later call governs the
 * packets sent after it.  Errors: HOMA_ERR_INVAL (bad range),
 * HOMA_ERR_NO_PORT, HOMA_ERR_NOT_FOUND (no such client RPC). */
HOMA_API int homa_engine_request_priority(homa_engine *eng, uint16_t port, uint64_t id, int lo,
                                          int hi);

/* Scheduling classes of a port: 0 (the default) .. HOMA_SCHED_CLASSES - 1.
 * The engine serves every message of a higher class before any message of
 * a lower one, SRPT within a class, at both ends: its send queue (a
 * request takes the class of the port that sends it, a response that of
 * the server's port) and its grants (an incoming request or response is
 * granted at the class of the port it arrives at).  The class stays
 * inside this engine (nothing on the wire); a host engine shared by many
 * processes (homad) is where it matters: it lets one application's
 * messages go before another's whatever their lengths.  The shares for
 * the oldest message (grant_fifo_permille: of the grants, and of the
 * sender's bytes) ignore classes, so a lower class is slowed, not
 * starved.  A change applies to RPCs created after it.  Errors:
 * HOMA_ERR_INVAL (class out of range), HOMA_ERR_NO_PORT. */
#define HOMA_SCHED_CLASSES 4
HOMA_API int homa_engine_port_set_class(homa_engine *eng, uint16_t port, int sched_class);

/* The network said `peer` cannot be reached (ICMP unreachable, reported
 * by the driver): every client RPC still waiting for it, on its Homa port
 * `port` (0 = any port), fails at once with HOMA_ERR_UNREACHABLE instead
 * of after the timeout.  Returns the number of RPCs failed, or
 * HOMA_ERR_INVAL. */
HOMA_API int homa_engine_peer_unreachable(homa_engine *eng, uint64_t now, const homa_addr *peer,
                                          uint16_t port);

/* A received message (or a failed client RPC) handed to the application. */
typedef struct homa_msg {
    uint64_t id;         /* local RPC id: even = our request's response, odd = a request */
    uint64_t cookie;     /* the cookie given to send_request (responses only) */
    homa_addr peer;      /* the other host */
    uint16_t peer_port;  /* the other side's port */
    uint16_t port;       /* our port */
    int is_request;      /* 1: a request to reply to; 0: a response or failure */
    int error;           /* 0, or why the client RPC failed (HOMA_ERR_TIMEOUT...) */
    const uint8_t *data; /* message bytes, valid until homa_engine_release() */
    size_t length;
    void *handle; /* engine-private */
} homa_msg;

#define HOMA_RECV_REQUEST 1u
#define HOMA_RECV_RESPONSE 2u
#define HOMA_RECV_ANY 3u

/* Takes the next receivable message on `port` matching flags (or, if id is
 * non-zero, the response/failure of that client RPC).  Returns 0 and fills
 * *msg, or HOMA_ERR_AGAIN, HOMA_ERR_NO_PORT, HOMA_ERR_NOT_FOUND (id unknown).
 * The message must be given back with homa_engine_release(). */
HOMA_API int homa_engine_recv(homa_engine *eng, uint16_t port, unsigned flags, uint64_t id,
                              homa_msg *msg);
/* Takes the bytes of a received message out of the engine without copying:
 * returns a malloc()ed buffer of msg->length bytes (at least 1) that the
 * caller now owns (free() it, or hand it to a *_owned send, e.g. to echo it)
 * and clears msg->data.  The message must still be released.  NULL if there
 * is nothing to take (failed RPC, already taken). */
HOMA_API void *homa_engine_msg_take(homa_engine *eng, homa_msg *msg);
/* Gives a received message back.  For a response this frees the client RPC;
 * for a request it frees the request bytes (the RPC lives on until its reply
 * is acknowledged). */
HOMA_API void homa_engine_release(homa_engine *eng, homa_msg *msg);

/* One packet to transmit.  hdr holds the encoded Homa header; payload (DATA
 * only, else NULL) points into engine memory that stays valid until
 * homa_engine_pull_done().  Wire bytes = hdr[0..hdr_len) + payload. */
typedef struct homa_pkt_out {
    homa_addr dst;
    uint16_t dport; /* destination Homa port (also in hdr) */
    uint16_t sport;
    uint8_t priority; /* 0..7; 7 highest; IP TOS = priority << 5 */
    uint8_t type;
    uint16_t hdr_len;
    uint32_t payload_len;
    const uint8_t *payload;
    uint8_t hdr[80];
} homa_pkt_out;

/* Fills up to max packets that should be sent now, control packets first,
 * then data in SRPT order subject to grants and the pacer.  Returns the count
 * (0 = nothing to send now).  If the count is > 0 the caller must call
 * homa_engine_pull_done() once the payloads are no longer needed (before or
 * after other engine calls). */
HOMA_API int homa_engine_pull(homa_engine *eng, uint64_t now, homa_pkt_out *out, int max);
HOMA_API void homa_engine_pull_done(homa_engine *eng);

/* Hands one received packet to the engine.  Returns 0 if it was accepted or
 * a positive drop reason (enum homa_drop_reason) if it was dropped; either
 * way it is counted.  The engine does not keep a pointer to pkt. */
HOMA_API int homa_engine_input(homa_engine *eng, uint64_t now, const homa_addr *src,
                               const uint8_t *pkt, size_t len);
/* As homa_engine_input, for a packet that reached this host at `arrived`
 * (<= now; e.g. the socket's receive timestamp) and waited in a queue until
 * now.  A RESEND that arrived before the data it asks for was sent was
 * written before its sender could have seen that data: only data sent
 * before it arrived is retransmitted (else BUSY).  The timers do not count
 * how long packets wait in the receive path as silence of the peers.
 * arrived 0 or above now = now. */
HOMA_API int homa_engine_input_at(homa_engine *eng, uint64_t now, uint64_t arrived,
                                  const homa_addr *src, const uint8_t *pkt, size_t len);

/* A batch of input: a driver that reads many packets at once (recvmmsg,
 * GRO) brackets them with homa_engine_input_begin() and
 * homa_engine_input_end().  Each packet (homa_engine_input*, or placed) is
 * handled as it comes, but the receiver's grant decision and the want_tx
 * notification are made once, at the end, for all of them: fewer and
 * larger GRANTs, and one notification.  Batches do not nest; any other
 * engine call may come in between. */
HOMA_API void homa_engine_input_begin(homa_engine *eng);
HOMA_API void homa_engine_input_end(homa_engine *eng, uint64_t now);

/* The unscheduled priority cutoffs this engine, as a receiver, currently
 * tells its senders to use (fixed, or computed from the lengths it receives
 * when config.adaptive_cutoffs is on). */
typedef struct homa_cutoffs {
    /* unsched[i]: the longest message whose unscheduled bytes go at
     * priority i (7 highest); 0 = level i carries scheduled bytes only;
     * unsched[0] is "everything" (0x7fffffff).  Entries at or above
     * num_priorities are 0. */
    uint32_t unsched[8];
    uint16_t version;       /* bumped at every change (starts at 1) */
    uint8_t num_priorities; /* config.num_priorities */
    uint8_t max_sched_prio; /* highest priority this receiver grants scheduled bytes at */
} homa_cutoffs;

HOMA_API void homa_engine_cutoffs(const homa_engine *eng, homa_cutoffs *out);

/* Direct receive: lets a driver have a DATA payload written straight into
 * the message's memory (one copy, by the kernel) instead of into a receive
 * buffer that homa_engine_input() then copies from.  The driver reads only
 * the start of a datagram first (e.g. recvmsg with MSG_PEEK) and calls
 *
 *   homa_engine_place_begin(eng, now, src, hdr, hdr_len, pkt_len, &dst)
 *
 * with hdr = the first hdr_len bytes of a packet of pkt_len bytes.  If it
 * is a valid DATA packet whose whole payload (pkt_len - 56 bytes) falls on
 * bytes of its message that have not arrived yet, the engine sets up the
 * RPC and message buffer as homa_engine_input() would, keeps that buffer
 * alive, and returns 0 with *dst = where the payload goes (room for exactly
 * pkt_len - 56 bytes).  The driver then reads the datagram: its first 56
 * bytes anywhere, the rest to *dst; and calls homa_engine_place_end() with
 * the 56 header bytes read and the length read, which accepts the packet as
 * homa_engine_input() would (same return value), without copying.  If the
 * read failed, homa_engine_place_cancel() instead.  Other engine calls may
 * happen in between (the RPC may even be freed: then place_end drops the
 * packet).  One placement at a time per engine.
 *
 * place_begin returns HOMA_ERR_AGAIN when the packet cannot be placed (not
 * DATA, malformed, unknown RPC, bytes already received, ...): read it
 * normally and give it to homa_engine_input(), which counts and drops it if
 * it is bad.  HOMA_ERR_STATE: a placement is already in progress. */
HOMA_API int homa_engine_place_begin(homa_engine *eng, uint64_t now, const homa_addr *src,
                                     const uint8_t *hdr, size_t hdr_len, size_t pkt_len,
                                     uint8_t **dst);
HOMA_API int homa_engine_place_end(homa_engine *eng, uint64_t now, const uint8_t *hdr,
                                   size_t hdr_len, size_t pkt_len);
HOMA_API void homa_engine_place_cancel(homa_engine *eng);

/* Runs due timers (resends, timeouts, acks).  Call at or after
 * homa_engine_next_deadline(); calling early is harmless. */
HOMA_API void homa_engine_timer(homa_engine *eng, uint64_t now);
/* Earliest time the engine needs homa_engine_timer() or, if data is held
 * back by the pacer, homa_engine_pull().  UINT64_MAX if nothing is pending. */
HOMA_API uint64_t homa_engine_next_deadline(const homa_engine *eng);

/* Why a packet was dropped (counted in homa_counters.drop_*). */
enum homa_drop_reason {
    HOMA_DROP_NONE = 0,
    HOMA_DROP_SHORT,        /* shorter than the common header */
    HOMA_DROP_BAD_TYPE,     /* unknown type */
    HOMA_DROP_TRUNCATED,    /* shorter than the type's header */
    HOMA_DROP_ZERO_ID,      /* sender_id 0 */
    HOMA_DROP_BAD_RANGE,    /* DATA beyond message_length */
    HOMA_DROP_BAD_PRIORITY, /* priority > 7 */
    HOMA_DROP_BAD_ACKS,     /* num_acks > 5 */
    HOMA_DROP_MSG_TOO_LONG, /* message_length above the configured maximum */
    HOMA_DROP_BAD_GRANT,    /* grant beyond the message end */
    HOMA_DROP_INCONSISTENT, /* message_length differs from earlier packets of the RPC */
    HOMA_DROP_NO_PORT,      /* destination port not open */
    HOMA_DROP_NO_RPC,       /* no such RPC (stale or bogus) */
    HOMA_DROP_NO_MEMORY,    /* max_rx_bytes or max_rpcs reached: refused or waiting */
    HOMA_DROP_DUPLICATE,    /* DATA carrying no new bytes */
    HOMA_DROP_COMPLETED,    /* request of an RPC already completed (at-most-once) */
    HOMA_DROP__COUNT
};
HOMA_API const char *homa_drop_reason_name(int reason);

/* Counters.  X(name, description) for every field of homa_counters. */
#define HOMA_COUNTER_LIST(X)                                                                       \
    X(pkts_in, "packets accepted by homa_engine_input")                                            \
    X(pkts_out, "packets returned by homa_engine_pull")                                            \
    X(data_in, "DATA packets received")                                                            \
    X(data_out, "DATA packets sent (including retransmissions)")                                   \
    X(grant_in, "GRANT packets received")                                                          \
    X(grant_out, "GRANT packets sent")                                                             \
    X(resend_in, "RESEND packets received")                                                        \
    X(resend_out, "RESEND packets sent")                                                           \
    X(unknown_in, "RPC_UNKNOWN packets received")                                                  \
    X(unknown_out, "RPC_UNKNOWN packets sent")                                                     \
    X(busy_in, "BUSY packets received")                                                            \
    X(busy_out, "BUSY packets sent")                                                               \
    X(cutoffs_in, "CUTOFFS packets received")                                                      \
    X(cutoffs_out, "CUTOFFS packets sent")                                                         \
    X(freeze_in, "FREEZE packets received (ignored)")                                              \
    X(need_ack_in, "NEED_ACK packets received")                                                    \
    X(need_ack_out, "NEED_ACK packets sent")                                                       \
    X(ack_in, "ACK packets received")                                                              \
    X(ack_out, "ACK packets sent")                                                                 \
    X(bytes_in, "payload bytes received (new bytes only)")                                         \
    X(data_placed, "DATA packets received straight into message memory (place_*)")                 \
    X(bytes_out, "payload bytes sent (including retransmissions)")                                 \
    X(retransmit_pkts, "DATA packets sent because of a RESEND")                                    \
    X(retransmit_bytes, "payload bytes sent because of a RESEND")                                  \
    X(resend_bytes_asked, "bytes our RESENDs asked for")                                           \
    X(resend_answered, "RESENDs received that queued a retransmission")                            \
    X(resend_stale, "RESENDs answered BUSY: what they ask for was sent after they arrived")        \
    X(dup_bytes_in, "payload bytes received that had already arrived")                             \
    X(granted_bytes, "bytes granted by this host")                                                 \
    X(fifo_grants, "grants given to the oldest message (anti-starvation)")                         \
    X(fifo_skipped, "FIFO grant turns skipped: oldest's last one still on its way")                \
    X(grants_merged, "GRANTs folded into one of the same RPC still waiting to be sent")            \
    X(client_rpcs, "client RPCs started")                                                          \
    X(client_completed, "client RPCs completed with a response")                                   \
    X(client_timeouts, "client RPCs aborted after timeout_ticks of silence")                       \
    X(client_restarts, "client requests restarted after RPC_UNKNOWN")                              \
    X(client_aborts, "client RPCs aborted by the application")                                     \
    X(server_requests, "requests delivered to the application")                                    \
    X(server_replies, "responses started by the application")                                      \
    X(server_acked, "server RPCs freed after an ack")                                              \
    X(server_timeouts, "server RPCs freed after the client went silent")                           \
    X(peer_failures, "times a silent peer made all its RPCs fail")                                 \
    X(prods_deferred, "BUSY/NEED_ACK/RESEND prods put off: per-peer limit per tick")               \
    X(timer_stalls, "timer runs a tick late or more (local stall, not counted as silence)")        \
    X(input_stalls, "timer runs while received packets waited a tick or more to be read")          \
    X(stalled_ns, "ns of timer lateness forgiven as local stalls (timeouts stretch by as much)")   \
    X(acks_piggybacked, "acks carried in DATA packets")                                            \
    X(pacer_stalls, "pulls that held data back for the pacer")                                     \
    X(cutoff_updates, "times the adaptive unscheduled cutoffs changed")                            \
    X(drop_short, "dropped: shorter than the common header")                                       \
    X(drop_bad_type, "dropped: unknown type")                                                      \
    X(drop_truncated, "dropped: shorter than the type's header")                                   \
    X(drop_zero_id, "dropped: sender_id 0")                                                        \
    X(drop_bad_range, "dropped: DATA beyond message_length")                                       \
    X(drop_bad_priority, "dropped: priority above 7")                                              \
    X(drop_bad_acks, "dropped: num_acks above 5")                                                  \
    X(drop_msg_too_long, "dropped: message_length above the maximum")                              \
    X(drop_bad_grant, "dropped: grant beyond the message end")                                     \
    X(drop_inconsistent, "dropped: message_length differs from earlier packets")                   \
    X(drop_no_port, "dropped: destination port not open")                                          \
    X(drop_no_rpc, "dropped: no such RPC")                                                         \
    X(drop_no_memory, "dropped: message refused or waiting (memory or RPC cap)")                   \
    X(drop_duplicate, "dropped: DATA with no new bytes")                                           \
    X(drop_completed, "dropped: request of an already completed RPC")                              \
    X(rx_bytes_in_use, "gauge: bytes allocated for incoming messages")                             \
    X(rx_bytes_peak, "gauge: peak of rx_bytes_in_use")                                             \
    X(incoming_bytes, "gauge: granted-but-unreceived bytes (incl. unscheduled)")                   \
    X(incoming_peak, "gauge: peak of incoming_bytes")                                              \
    X(rpcs_live, "gauge: live RPCs")                                                               \
    X(tombstones, "gauge: remembered completed server RPC ids")

typedef struct homa_counters {
#define HOMA_COUNTER_FIELD(name, desc) uint64_t name;
    HOMA_COUNTER_LIST(HOMA_COUNTER_FIELD)
#undef HOMA_COUNTER_FIELD
} homa_counters;

/* Copies the counters (a consistent snapshot). */
HOMA_API void homa_engine_counters(const homa_engine *eng, homa_counters *out);
/* What the two schedulers have to choose from right now; for simulators
 * and diagnostics (costs a walk over the live RPCs; a NULL eng gives zeros). */
typedef struct homa_queue_stats {
    uint32_t tx_msgs;            /* outgoing messages with bytes not yet sent */
    uint32_t tx_ready;           /* of those, sendable now (granted or asked for again) */
    uint32_t rx_grantable;       /* incoming messages still waiting for grants */
    uint32_t rx_grantable_peers; /* distinct senders of those (at most 64 counted) */
} homa_queue_stats;
HOMA_API void homa_engine_queue_stats(const homa_engine *eng, homa_queue_stats *out);
/* Fills out[0..max) with the distinct destinations of outgoing messages that
 * still have unsent bytes; returns how many were written. */
HOMA_API size_t homa_engine_unsent_peers(const homa_engine *eng, homa_addr *out, size_t max);

/* Name and description of counter i (0-based, in struct order); NULL past the end. */
HOMA_API const char *homa_counter_name(size_t i);
HOMA_API const char *homa_counter_desc(size_t i);
HOMA_API size_t homa_counter_count(void);

#ifdef __cplusplus
}
#endif
#endif
