/* An RPC inside the engine: its states, the transitions between them, and
 * the flags that qualify a state.  This is the one place that says which
 * transition is allowed: homa_rpc_set_state() is the only code that
 * changes rpc->state, and builds with HOMA_CHECKS (Debug and sanitizer
 * builds) abort on a transition this header does not list.
 *
 * Ids.  A client RPC has an even local id that we chose; the server's RPC
 * for it has the odd id client_id ^ 1 and is known by (id, client address,
 * client port), since server ids are unique per client only (rpc.c keeps
 * one table of each kind).
 *
 * States and transitions (what causes each, and where it happens):
 *
 *   client                                  server
 *   ------                                  ------
 *   (none) -> CLIENT_ACTIVE                  (none) -> SERVER_INCOMING
 *      homa_engine_send_request (engine.c)      first DATA of a request
 *                                               (input.c, data_target)
 *   CLIENT_ACTIVE -> CLIENT_READY            SERVER_INCOMING -> SERVER_READY
 *      whole response received (input.c),       whole request received
 *      or failed: timeout (timer.c), out of     (input.c)
 *      memory, ICMP unreachable (rpc.c,
 *      homa_rpc_fail); rpc->error says which
 *   CLIENT_READY -> CLIENT_DELIVERED         SERVER_READY -> SERVER_IN_SERVICE
 *      homa_engine_recv hands it over           homa_engine_recv hands it over
 *      (engine.c)                               (engine.c)
 *                                            SERVER_IN_SERVICE -> SERVER_OUTGOING
 *                                               homa_engine_send_reply (engine.c)
 *
 * Nothing else: a state never goes back (a request restarted after
 * RPC_UNKNOWN stays CLIENT_ACTIVE and starts its message over, output.c),
 * and no state is skipped.  An RPC leaves the engine from any state by
 * homa_rpc_free (rpc.c):
 *   - a client RPC when the application releases its response, aborts it,
 *     or closes the port;
 *   - a server RPC when its client acks the response (SERVER_OUTGOING),
 *     says it forgot the RPC (RPC_UNKNOWN), is silent for a timeout
 *     (timer.c), or the port closes.  A server RPC freed after its request
 *     reached the application (SERVER_IN_SERVICE or SERVER_OUTGOING)
 *     leaves a tombstone, so a late copy of the request is never served
 *     twice.
 * Freed while the application still holds its message (app_holds), the
 * RPC becomes a zombie instead: unlinked from every table and list, in no
 * state that matters, until homa_engine_release frees it.
 *
 * Where each RPC sits, by state:
 *   CLIENT_ACTIVE     the send queue while its request has bytes to send
 *                     (output.c), the grant list while its response needs
 *                     grants (grant.c), the timer wheel (timer.c), maybe the
 *                     memory queue (mem_wait)
 *   *_READY           its port's ready queue (ready; readyq.h says which
 *                     message a receive takes)
 *   CLIENT_DELIVERED  nowhere but the RPC table: the application holds it
 *   SERVER_INCOMING   the grant list, the timer wheel, maybe the memory queue
 *   SERVER_IN_SERVICE the RPC table; the application computes the reply
 *   SERVER_OUTGOING   the send queue until the response is out, then the
 *                     timer wheel (NEED_ACK) until the client acks
 *
 * Flags, and the states in which each can be set:
 *   app_holds   the application holds a homa_msg pointing at this RPC:
 *               CLIENT_DELIVERED, SERVER_IN_SERVICE, SERVER_OUTGOING (a
 *               server's request may be held while its reply goes out)
 *   mem_held    in.length is counted in eng->held_bytes (delivered, not yet
 *               released or taken): with app_holds
 *   zombie      freed while app_holds: off every table and list
 *   error       the failure a CLIENT_READY RPC reports (0: success)
 *   confirmed   CLIENT_ACTIVE: the server said something about the request
 *               since it was (re)started, so it has it; until then a
 *               RESEND is loss recovery, not a liveness prod
 *   asked       CLIENT_ACTIVE: a RESEND went out since the (re)start; an
 *               RPC_UNKNOWN without one is a duplicate and restarts nothing
 *   restarted   CLIENT_ACTIVE: the request was restarted at least once (its
 *               response time is then no sample for the peer's average)
 *   unknowns    CLIENT_ACTIVE: RPC_UNKNOWN answers since the server last had
 *               the request (HOMA_UNKNOWNS_FATAL of them for a timeout fail
 *               it, timer.c)
 *   mem_wait    CLIENT_ACTIVE or SERVER_INCOMING: the incoming message waits
 *               in eng->mem_waitq for max_rx_bytes, without a buffer
 *   prio_limit  client: DATA priorities limited by the application
 *   in.active   the incoming message's length is known and its buffer
 *               allocated: CLIENT_ACTIVE (response started), SERVER_INCOMING,
 *               *_READY, CLIENT_DELIVERED, SERVER_IN_SERVICE until release
 *   in.taken    the application took the buffer (homa_engine_msg_take)
 *   out.active  the outgoing message exists: CLIENT_ACTIVE (the request),
 *               SERVER_OUTGOING (the response)
 *   waiting, granted, wanted
 *               the timer's bookkeeping of prod budgets (timer.c)
 */
#ifndef HOMA_CORE_RPC_H
#define HOMA_CORE_RPC_H

#include <stdbool.h>
#include <stdint.h>

#include "hash.h"
#include "list.h"
#include "msg.h"
#include "readyq.h"

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

struct homa_rpc {
    uint64_t id;             /* local id: even for client RPCs, odd for server RPCs */
    struct homa_hnode hnode; /* eng->client_table or eng->server_table (rpc.c) */
    struct homa_peer *peer;
    struct homa_port *port;
    uint16_t peer_port;
    uint8_t state;  /* enum homa_rpc_state; changed only by homa_rpc_set_state */
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
    struct hlist all_node;         /* eng->rpcs */
    struct homa_readyq_node ready; /* port->ready (readyq.h) */
    struct hlist send_node;        /* eng->sendq[send_bucket] (sorted) */
    struct hlist rtx_node;         /* eng->resending (FIFO) while out.num_rtx > 0 */
    struct hlist grant_node;       /* eng->grantable (sorted) */
    struct hlist fifo_node;        /* eng->send_fifo while its message has bytes never sent */
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

/* True if an RPC may go from state `from` to state `to` (0 = a new RPC),
 * as listed above. */
static inline bool homa_rpc_transition_ok(uint8_t from, uint8_t to)
{
    switch (to) {
    case RPC_CLIENT_ACTIVE:
    case RPC_SERVER_INCOMING:
        return from == 0;
    case RPC_CLIENT_READY:
        return from == RPC_CLIENT_ACTIVE;
    case RPC_CLIENT_DELIVERED:
        return from == RPC_CLIENT_READY;
    case RPC_SERVER_READY:
        return from == RPC_SERVER_INCOMING;
    case RPC_SERVER_IN_SERVICE:
        return from == RPC_SERVER_READY;
    case RPC_SERVER_OUTGOING:
        return from == RPC_SERVER_IN_SERVICE;
    default:
        return false;
    }
}

/* Reports a transition the table does not allow and aborts (HOMA_CHECKS
 * builds only: an engine bug, never something a peer can cause). */
void homa_rpc_bad_transition(const struct homa_rpc *rpc, uint8_t to);

/* The one place rpc->state changes. */
static inline void homa_rpc_set_state(struct homa_rpc *rpc, uint8_t to)
{
#ifdef HOMA_CHECKS
    if (!homa_rpc_transition_ok(rpc->state, to)) homa_rpc_bad_transition(rpc, to);
#endif
    rpc->state = to;
}

static inline bool homa_rpc_is_server(const struct homa_rpc *rpc)
{
    return (rpc->id & 1) != 0;
}

#endif
