/* Packet input and timers: the protocol's reactions to what arrives and to
 * silence. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct homa_rpc *homa_rpc_new_server(struct homa_engine *eng, uint64_t id, struct homa_port *port,
                                     struct homa_peer *peer, uint16_t peer_port);

static int drop(struct homa_engine *eng, int reason)
{
    switch (reason) {
    case HOMA_DROP_SHORT:
        eng->ctr.drop_short++;
        break;
    case HOMA_DROP_BAD_TYPE:
        eng->ctr.drop_bad_type++;
        break;
    case HOMA_DROP_TRUNCATED:
        eng->ctr.drop_truncated++;
        break;
    case HOMA_DROP_ZERO_ID:
        eng->ctr.drop_zero_id++;
        break;
    case HOMA_DROP_BAD_RANGE:
        eng->ctr.drop_bad_range++;
        break;
    case HOMA_DROP_BAD_PRIORITY:
        eng->ctr.drop_bad_priority++;
        break;
    case HOMA_DROP_BAD_ACKS:
        eng->ctr.drop_bad_acks++;
        break;
    case HOMA_DROP_MSG_TOO_LONG:
        eng->ctr.drop_msg_too_long++;
        break;
    case HOMA_DROP_BAD_GRANT:
        eng->ctr.drop_bad_grant++;
        break;
    case HOMA_DROP_INCONSISTENT:
        eng->ctr.drop_inconsistent++;
        break;
    case HOMA_DROP_NO_PORT:
        eng->ctr.drop_no_port++;
        break;
    case HOMA_DROP_NO_RPC:
        eng->ctr.drop_no_rpc++;
        break;
    case HOMA_DROP_NO_MEMORY:
        eng->ctr.drop_no_memory++;
        break;
    case HOMA_DROP_DUPLICATE:
        eng->ctr.drop_duplicate++;
        break;
    case HOMA_DROP_COMPLETED:
        eng->ctr.drop_completed++;
        break;
    default:
        break;
    }
    return reason;
}

static int wire_to_drop(int werr)
{
    switch (werr) {
    case HOMA_WIRE_SHORT:
        return HOMA_DROP_SHORT;
    case HOMA_WIRE_BAD_TYPE:
        return HOMA_DROP_BAD_TYPE;
    case HOMA_WIRE_TRUNCATED:
        return HOMA_DROP_TRUNCATED;
    case HOMA_WIRE_ZERO_ID:
        return HOMA_DROP_ZERO_ID;
    case HOMA_WIRE_BAD_RANGE:
        return HOMA_DROP_BAD_RANGE;
    case HOMA_WIRE_BAD_PRIORITY:
        return HOMA_DROP_BAD_PRIORITY;
    case HOMA_WIRE_BAD_ACKS:
        return HOMA_DROP_BAD_ACKS;
    default:
        return HOMA_DROP_BAD_TYPE;
    }
}

/* Sends a header-only control packet of `type` about local id `id`. */
static void send_simple(struct homa_engine *eng, uint8_t type, uint64_t id, const homa_addr *dst,
                        uint16_t sport, uint16_t dport)
{
    struct homa_wire_pkt pkt;
    memset(&pkt, 0, sizeof(pkt));
    pkt.type = type;
    pkt.sender_id = id;
    homa_ctl_queue(eng, NULL, dst, sport, dport, &pkt);
}

static void send_cutoffs(struct homa_engine *eng, struct homa_peer *peer, uint64_t id,
                         uint16_t sport, uint16_t dport)
{
    struct homa_wire_pkt pkt;
    memset(&pkt, 0, sizeof(pkt));
    pkt.type = HOMA_PKT_CUTOFFS;
    pkt.sender_id = id;
    memcpy(pkt.u.cutoffs.cutoffs, eng->cutoffs, sizeof(pkt.u.cutoffs.cutoffs));
    pkt.u.cutoffs.version = eng->cutoff_version;
    homa_ctl_queue(eng, NULL, &peer->addr, sport, dport, &pkt);
    peer->cutoffs_sent_once = true;
    peer->cutoffs_sent_at = eng->now;
}

/* Priority a RESEND asks the sender to use.  A hole behind data that did
 * arrive is a loss: ours for that part of the message.  After silence the
 * data may as well be queued in the network behind higher priorities (SRPT
 * starves a long message's packets in a switch for as long as shorter ones
 * keep coming): then only the highest level gets through, and without an
 * answer the peer would be declared dead.  Linux asks for the highest
 * level for every RESEND. */
static uint8_t resend_prio(struct homa_engine *eng, struct homa_rpc *rpc, uint32_t offset,
                           bool silent)
{
    if (silent) return (uint8_t)(eng->cfg.num_priorities - 1);
    if (offset < eng->cfg.unsched_bytes || rpc->in.prio == HOMA_PRIO_NONE)
        return homa_unsched_prio(eng, eng->cutoffs, rpc->in.length);
    return rpc->in.prio;
}

static void send_resend(struct homa_engine *eng, struct homa_rpc *rpc, uint32_t offset,
                        uint32_t length, uint8_t prio)
{
    struct homa_wire_pkt pkt;
    memset(&pkt, 0, sizeof(pkt));
    pkt.type = HOMA_PKT_RESEND;
    pkt.sender_id = rpc->id;
    pkt.u.resend.offset = offset;
    pkt.u.resend.length = length;
    pkt.u.resend.priority = prio;
    rpc->last_told = eng->now;
    rpc->asked = true;
    if (!rpc->ask_at) rpc->ask_at = eng->now;
    eng->ctr.resend_bytes_asked += length;
    homa_ctl_queue(eng, rpc, &rpc->peer->addr, rpc->port ? rpc->port->num : 0, rpc->peer_port,
                   &pkt);
}

/* A smoothed time with gain 1/8 after sample t (avg 0: no sample yet). */
static uint64_t smooth8(uint64_t avg, uint64_t t)
{
    return avg ? avg - avg / 8 + t / 8 : t;
}

/* The peer showed progress on rpc (or that it holds it): not silent. */
static void rpc_heard(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t now)
{
    homa_rpc_heard(eng, rpc, now);
    if (rpc->ask_at) {
        rpc->peer->ask_rtt = smooth8(rpc->peer->ask_rtt, now - rpc->ask_at);
        rpc->ask_at = 0;
    }
    rpc->probes = 0;
    rpc->confirmed = true;
    homa_peer_heard(rpc->peer, rpc->peer_port, now);
}

/* An ack record from `src` (carried by a packet from its port client_port). */
static void handle_ack(struct homa_engine *eng, const homa_addr *src, uint16_t client_port,
                       const struct homa_wire_ack *ack)
{
    if (ack->client_id == 0) return;
    struct homa_rpc *rpc = homa_find_server(eng, ack->client_id ^ 1, src, client_port);
    if (!rpc || !rpc->port || rpc->port->num != ack->server_port) return;
    if (rpc->state != RPC_SERVER_OUTGOING) return; /* nothing to ack yet */
    eng->ctr.server_acked++;
    homa_rpc_free(eng, rpc);
}

/* Restart a client request after the server said it does not know it. */
static void client_restart(struct homa_engine *eng, struct homa_rpc *rpc)
{
    if (rpc->in.active) {
        homa_grant_remove(eng, rpc);
        eng->ctr.incoming_bytes -= homa_in_outstanding(&rpc->in);
        homa_rx_mem_release(eng, rpc);
        homa_in_destroy(eng, rpc);
    }
    homa_mem_wait_leave(rpc); /* its response will come afresh */
    struct homa_msgout *m = &rpc->out;
    homa_out_restart(eng, rpc);
    /* The restarted request is sent afresh under the peer's current cutoffs
     * (its DATA carries their version), so its priority must follow them. */
    m->unsched_prio = homa_unsched_prio(eng, rpc->peer->cutoffs, m->length);
    rpc->confirmed = false;
    rpc->probes = 0;
    rpc->asked = false;
    rpc->ask_at = 0;
    if (rpc->unknowns == 0) rpc->unknown_since = eng->now;
    if (rpc->unknowns < UINT8_MAX) rpc->unknowns++;
    eng->ctr.client_restarts++;
    rpc->restarted = true;
    rpc->req_out_at = 0;
    homa_out_update(eng, rpc);
}

/* rpc's incoming message gets its buffer (len bytes, of which the sender
 * sends `incoming` unscheduled) and joins the grant scheduler. */
static void msgin_start(struct homa_engine *eng, struct homa_rpc *rpc, uint8_t *buf, uint32_t len,
                        uint32_t incoming)
{
    struct homa_msgin *m = &rpc->in;
    homa_msgin_init_buf(m, buf, len, incoming);
    rpc->in_progress = eng->now;
    rpc->asks = 0;
    eng->ctr.rx_bytes_in_use += len;
    homa_gauge_max(&eng->ctr.rx_bytes_peak, eng->ctr.rx_bytes_in_use);
    eng->ctr.incoming_bytes += homa_in_outstanding(m);
    homa_gauge_max(&eng->ctr.incoming_peak, eng->ctr.incoming_bytes);
    m->prio = HOMA_PRIO_NONE;
    homa_cutoffs_observe(eng, len);
    homa_grant_add(eng, rpc);
}

static uint64_t request_missing(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t now,
                                bool silent);
static void send_receiver_busy(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t now);

/* Messages waiting for max_rx_bytes (requests and responses alike) get
 * their buffers, first come first served (a long one at the head holds
 * back shorter ones behind it, but none waits forever), and ask again for
 * what their senders sent unscheduled: it was dropped while they waited. */
static void mem_wait_serve(struct homa_engine *eng, uint64_t now)
{
    bool served = false;
    while (!hlist_empty(&eng->mem_waitq)) {
        struct homa_rpc *rpc = HOMA_CONTAINER(eng->mem_waitq.next, struct homa_rpc, mem_node);
        if (eng->ctr.rx_bytes_in_use + rpc->mem_len > eng->cfg.max_rx_bytes) break;
        uint8_t *buf = homa_buf_get(eng, rpc->mem_len);
        if (!buf) break;
        homa_mem_wait_leave(rpc);
        msgin_start(eng, rpc, buf, rpc->mem_len, rpc->mem_incoming);
        request_missing(eng, rpc, now, true);
        rpc->last_prodded = now;
        homa_timer_soon(eng, rpc);
        served = true;
    }
    if (served) homa_grant_check(eng);
}

/* A new incoming message of len bytes waits for memory: none is left, or
 * others wait for it first (served in order). */
static bool must_wait_for_mem(const struct homa_engine *eng, uint32_t len)
{
    return len > 0 && (!hlist_empty(&eng->mem_waitq) ||
                       eng->ctr.rx_bytes_in_use + len > eng->cfg.max_rx_bytes);
}

/* rpc's incoming message (its first DATA is pkt) has to wait for memory. */
static void mem_wait_enter(struct homa_engine *eng, struct homa_rpc *rpc,
                           const struct homa_wire_pkt *pkt)
{
    rpc->mem_wait = true;
    rpc->mem_len = pkt->u.data.message_length;
    rpc->mem_incoming = pkt->u.data.incoming;
    rpc->mem_since = eng->now;
    hlist_add_tail(&eng->mem_waitq, &rpc->mem_node);
    eng->mem_waits++;
}

/* DATA for rpc, which waits for memory: dropped.  Its turn comes from
 * mem_wait_serve, in order; meanwhile the DATA shows the peer is alive. */
static struct homa_rpc *mem_waiting(struct homa_engine *eng, struct homa_rpc *rpc, int *reason)
{
    homa_rpc_heard(eng, rpc, eng->now);
    homa_peer_heard(rpc->peer, rpc->peer_port, eng->now);
    *reason = HOMA_DROP_NO_MEMORY;
    return NULL;
}

/* Busy serving, at the RPC cap: server RPCs hold at least half of it,
 * and one was freed within a timeout (or the cap was reached less than a
 * timeout ago).  Then this host is behind on requests it took, and its
 * own progress makes room, so a request refused now is told BUSY (come
 * back later).  Otherwise the refusal stays silent (RPC_UNKNOWN to a
 * RESEND) and its client fails it after a timeout: a cap filled by our
 * own client RPCs is not made room by serving (two engines full of
 * requests to each other would say BUSY forever), and neither is one
 * whose server RPCs stopped finishing (an application that holds its
 * requests, or whose handlers wait on RPCs to a peer that waits on us),
 * as a response waiting for memory fails when nothing was released for a
 * timeout. */
static bool busy_serving(const struct homa_engine *eng)
{
    const homa_config *c = &eng->cfg;
    if (eng->server_rpcs == 0 || 2 * (uint64_t)eng->server_rpcs < c->max_rpcs) return false;
    uint64_t timeout = (uint64_t)c->timeout_ticks * c->tick_ns;
    uint64_t progress =
        eng->server_freed_at > eng->cap_full_at ? eng->server_freed_at : eng->cap_full_at;
    return eng->now - progress < timeout;
}

static bool rpc_cap_full(const struct homa_engine *eng)
{
    return eng->ctr.rpcs_live >= eng->cfg.max_rpcs;
}

/* A request refused (or asked about) at the RPC cap: the first since a
 * server RPC was freed starts the timeout within which one must be. */
static void cap_refusal(struct homa_engine *eng)
{
    if (eng->cap_full_at <= eng->server_freed_at) eng->cap_full_at = eng->now;
}

/* Answer to a RESEND about a request we have no RPC (nor tombstone) for:
 * RPC_UNKNOWN brings its restart.  While busy serving, only as many a
 * tick as there are free slots (a restart that finds the cap full again
 * counts towards "forgotten": without the limit, every client waiting for
 * room restarted when one slot freed); the others hear BUSY and ask again
 * later. */
static uint8_t unknown_request_answer(struct homa_engine *eng)
{
    const homa_config *c = &eng->cfg;
    if (rpc_cap_full(eng)) cap_refusal(eng);
    if (!busy_serving(eng)) return HOMA_PKT_RPC_UNKNOWN;
    uint64_t tick = eng->now / c->tick_ns;
    if (tick != eng->cap_tick) {
        eng->cap_tick = tick;
        eng->cap_unknowns = 0;
    }
    if ((uint64_t)eng->ctr.rpcs_live + eng->cap_unknowns >= c->max_rpcs) return HOMA_PKT_BUSY;
    eng->cap_unknowns++;
    return HOMA_PKT_RPC_UNKNOWN;
}

/* Finds the RPC a DATA packet belongs to (creating a server RPC for the
 * first packet of a request) and sets up its incoming message.  Returns it,
 * or NULL with *reason set (not yet counted).  With `probe` (direct receive
 * asking before the packet is read) a packet that would make the RPC fail
 * is refused instead: homa_engine_input then does the failing. */
static struct homa_rpc *data_target(struct homa_engine *eng, const homa_addr *src,
                                    const struct homa_wire_pkt *pkt, bool probe, int *reason)
{
    uint64_t local = pkt->sender_id ^ 1;
    const uint32_t len = pkt->u.data.message_length;
    *reason = HOMA_DROP_NONE;
    if (len > eng->cfg.max_message_length) {
        *reason = HOMA_DROP_MSG_TOO_LONG;
        return NULL;
    }
    if (!hlist_empty(&eng->mem_waitq)) mem_wait_serve(eng, eng->now);
    struct homa_rpc *rpc;
    if (local & 1) {
        rpc = homa_find_server(eng, local, src, pkt->sport);
        if (!rpc) {
            struct homa_port *port = homa_port_find(eng, pkt->dport);
            if (!port) {
                *reason = HOMA_DROP_NO_PORT;
                return NULL;
            }
            if (homa_tomb_find(eng, local, src, pkt->sport)) {
                *reason = HOMA_DROP_COMPLETED;
                return NULL;
            }
            /* Refused for good, without an RPC (its client hears
             * RPC_UNKNOWN): a request that could never fit. */
            if (len > eng->cfg.max_rx_bytes) {
                *reason = HOMA_DROP_NO_MEMORY;
                return NULL;
            }
            /* At the RPC cap we are overloaded, not gone: refused without
             * state, and its client hears BUSY (for the first packet; a
             * RESEND about it too: unknown_request_answer) and asks
             * again later, restarting the request when we have room.
             * Refused with RPC_UNKNOWN, such requests were restarted and
             * refused again until their clients declared us dead (W1 at
             * 0.095 Gb/s without loss: 63,017 RPCs failed at once). */
            if (rpc_cap_full(eng)) {
                if (!probe) {
                    cap_refusal(eng);
                    if (pkt->u.data.offset == 0 && busy_serving(eng))
                        send_simple(eng, HOMA_PKT_BUSY, local, src, pkt->dport, pkt->sport);
                }
                *reason = HOMA_DROP_NO_MEMORY;
                return NULL;
            }
            struct homa_peer *peer = homa_peer_get(eng, src, true);
            if (peer) rpc = homa_rpc_new_server(eng, local, port, peer, pkt->sport);
            if (!rpc) {
                *reason = HOMA_DROP_NO_MEMORY;
                return NULL;
            }
            /* No memory now (or others wait for it first): the RPC waits
             * for its buffer, and its client hears BUSY, not RPC_UNKNOWN.
             * Refused outright, a live server's requests failed under load
             * (RPC_UNKNOWN restarts, refused again, for a timeout). */
            if (must_wait_for_mem(eng, len)) {
                mem_wait_enter(eng, rpc, pkt);
                *reason = HOMA_DROP_NO_MEMORY;
                return NULL;
            }
        } else if (rpc->state != RPC_SERVER_INCOMING) {
            *reason = HOMA_DROP_DUPLICATE;
            return NULL;
        } else if (rpc->mem_wait) {
            return mem_waiting(eng, rpc, reason);
        }
    } else {
        rpc = homa_find_client(eng, local);
        if (!rpc || memcmp(&rpc->peer->addr, src, sizeof(*src)) != 0 ||
            rpc->peer_port != pkt->sport || !rpc->port || rpc->port->num != pkt->dport) {
            *reason = HOMA_DROP_NO_RPC;
            return NULL;
        }
        if (rpc->state != RPC_CLIENT_ACTIVE) {
            *reason = HOMA_DROP_DUPLICATE;
            return NULL;
        }
        if (rpc->mem_wait) return mem_waiting(eng, rpc, reason);
        if (!rpc->in.active) {
            if (len > eng->cfg.max_rx_bytes) {
                if (!probe) homa_rpc_fail(eng, rpc, HOMA_ERR_NOMEM);
                *reason = HOMA_DROP_NO_MEMORY;
                return NULL;
            }
            /* The server is answering, so it has the whole request. */
            if (rpc->req_out_at && !rpc->restarted && eng->arrived > rpc->req_out_at) {
                struct homa_peer *peer = rpc->peer;
                uint64_t t = eng->arrived - rpc->req_out_at;
                peer->resp_time = smooth8(peer->resp_time, t);
            }
            homa_out_remove(eng, rpc);
            rpc->out.next_xmit = rpc->out.length;
            rpc->out.granted = rpc->out.length;
            /* No memory now (or others wait for it first): the response
             * waits for its buffer as a request does, and the server hears
             * BUSY from us.  Failed, a client with many long responses in
             * flight lost RPCs to its own cap (1,000 W4 RPCs in flight). */
            if (must_wait_for_mem(eng, len)) {
                mem_wait_enter(eng, rpc, pkt);
                return mem_waiting(eng, rpc, reason);
            }
        }
    }

    struct homa_msgin *m = &rpc->in;
    if (!m->active) {
        uint8_t *buf = homa_buf_get(eng, len);
        if (buf == NULL) {
            if (local & 1)
                homa_rpc_free(eng, rpc); /* fresh, nothing else refers to it */
            else if (!probe)
                homa_rpc_fail(eng, rpc, HOMA_ERR_NOMEM);
            *reason = HOMA_DROP_NO_MEMORY;
            return NULL;
        }
        msgin_start(eng, rpc, buf, len, pkt->u.data.incoming);
    } else if (m->length != len) {
        *reason = HOMA_DROP_INCONSISTENT;
        return NULL;
    }
    return rpc;
}

/* Takes the payload of a DATA packet for rpc (from data_target) into its
 * message and reacts: completion, grants, acks, cutoffs. */
static int data_accept(struct homa_engine *eng, uint64_t now, const homa_addr *src,
                       const struct homa_wire_pkt *pkt, struct homa_rpc *rpc)
{
    uint64_t local = pkt->sender_id ^ 1;
    struct homa_msgin *m = &rpc->in;
    rpc_heard(eng, rpc, now);

    /* The sender may have received grants we sent, or a RESEND raised its
     * budget: trust `incoming` only up to what we granted or the
     * unscheduled amount. */
    uint32_t before = homa_in_outstanding(m);
    uint32_t added;
    int res = homa_msgin_add(m, now, pkt->u.data.offset, pkt->u.data.payload,
                             pkt->u.data.payload_len, &added);
    uint32_t after = homa_in_outstanding(m);
    eng->ctr.incoming_bytes -= before - after;
    eng->ctr.bytes_in += added;
    eng->ctr.dup_bytes_in += pkt->u.data.payload_len - added;
    if (added > 0) {
        rpc->in_progress = now;
        rpc->asks = 0;
        rpc->unknowns = 0; /* the server has the request: restarts are over */
    }
    if (pkt->u.data.ack.client_id) handle_ack(eng, src, pkt->sport, &pkt->u.data.ack);

    /* A sender with old cutoffs gets ours (at most once per tick). */
    if (pkt->u.data.cutoff_version != eng->cutoff_version) {
        struct homa_peer *peer = rpc->peer;
        if (!peer->cutoffs_sent_once || now - peer->cutoffs_sent_at >= eng->cfg.tick_ns)
            send_cutoffs(eng, peer, rpc->id, rpc->port ? rpc->port->num : pkt->dport, pkt->sport);
    }
    if (res == HOMA_MSGIN_NOMEM) return drop(eng, HOMA_DROP_NO_MEMORY);
    if (res == HOMA_MSGIN_DUP && !homa_msgin_complete(m)) return drop(eng, HOMA_DROP_DUPLICATE);
    if (homa_msgin_complete(m)) {
        homa_grant_remove(eng, rpc);
        eng->ctr.incoming_bytes -= homa_in_outstanding(m);
        m->granted = m->length;
        if (local & 1) {
            homa_rpc_make_ready(eng, rpc);
        } else {
            eng->ctr.client_completed++;
            homa_out_remove(eng, rpc);
            homa_peer_queue_ack(eng, rpc->peer, rpc->id, rpc->peer_port, rpc->port->num);
            homa_rpc_make_ready(eng, rpc);
        }
    } else {
        homa_grant_update(eng, rpc);
    }
    homa_grant_check(eng);
    return 0;
}

static int handle_data(struct homa_engine *eng, uint64_t now, const homa_addr *src,
                       const struct homa_wire_pkt *pkt)
{
    int reason;
    struct homa_rpc *rpc = data_target(eng, src, pkt, false, &reason);
    if (!rpc) {
        /* Data for a message that is already complete was resent in vain. */
        if (reason == HOMA_DROP_DUPLICATE || reason == HOMA_DROP_COMPLETED)
            eng->ctr.dup_bytes_in += pkt->u.data.payload_len;
        return drop(eng, reason);
    }
    /* Bytes a driver is receiving in place right now count as arrived: a
     * copy of them must not be written under the driver's feet. */
    if (eng->placing && rpc == eng->place_rpc &&
        (uint64_t)pkt->u.data.offset < (uint64_t)eng->place_offset + eng->place_len &&
        (uint64_t)eng->place_offset < (uint64_t)pkt->u.data.offset + pkt->u.data.payload_len)
        return drop(eng, HOMA_DROP_DUPLICATE);
    return data_accept(eng, now, src, pkt, rpc);
}

/* ---------- direct receive ---------- */

int homa_engine_place_begin(homa_engine *eng, uint64_t now, const homa_addr *src,
                            const uint8_t *hdr, size_t hdr_len, size_t pkt_len, uint8_t **dst)
{
    if (!eng || !src || !hdr || !dst) return HOMA_ERR_INVAL;
    *dst = NULL;
    if (eng->placing) return HOMA_ERR_STATE;
    struct homa_wire_pkt pkt;
    if (homa_wire_decode_hdr(hdr, hdr_len, pkt_len, &pkt) != HOMA_WIRE_OK ||
        pkt.type != HOMA_PKT_DATA || pkt.u.data.payload_len == 0)
        return HOMA_ERR_AGAIN;
    eng->now = now;
    int reason;
    struct homa_rpc *rpc = data_target(eng, src, &pkt, true, &reason);
    /* Only bytes that never arrived may be written before the packet is
     * accepted: a duplicate or overlapping packet must not overwrite what
     * the message already holds, whatever it carries. */
    if (!rpc || !homa_msgin_missing(&rpc->in, pkt.u.data.offset, pkt.u.data.payload_len))
        return HOMA_ERR_AGAIN;
    eng->placing = true;
    eng->place_rpc = rpc;
    eng->place_offset = pkt.u.data.offset;
    eng->place_len = pkt.u.data.payload_len;
    memcpy(eng->place_hdr, hdr, HOMA_DATA_HDR_LEN);
    eng->place_src = *src;
    *dst = rpc->in.buf + pkt.u.data.offset;
    return 0;
}

static void place_clear(struct homa_engine *eng)
{
    eng->placing = false;
    eng->place_rpc = NULL;
    free(eng->place_orphan);
    eng->place_orphan = NULL;
}

void homa_engine_place_cancel(homa_engine *eng)
{
    if (eng) place_clear(eng);
}

int homa_engine_place_end(homa_engine *eng, uint64_t now, const uint8_t *hdr, size_t hdr_len,
                          size_t pkt_len)
{
    if (!eng || !eng->placing) return HOMA_DROP_NO_RPC;
    eng->now = now;
    eng->ctr.data_in++;
    struct homa_rpc *rpc = eng->place_rpc;
    bool same = hdr && hdr_len >= HOMA_DATA_HDR_LEN &&
                pkt_len == (size_t)HOMA_DATA_HDR_LEN + eng->place_len &&
                memcmp(hdr, eng->place_hdr, HOMA_DATA_HDR_LEN) == 0;
    struct homa_wire_pkt pkt;
    homa_wire_decode_hdr(eng->place_hdr, HOMA_DATA_HDR_LEN, HOMA_DATA_HDR_LEN + eng->place_len,
                         &pkt);
    homa_addr src = eng->place_src;
    place_clear(eng);
    /* The RPC went away while the payload was being received (its buffer
     * was kept until now), or the packet read is not the one announced: the
     * bytes written into the message are not accepted. */
    if (!rpc) return drop(eng, HOMA_DROP_NO_RPC);
    if (!same) return drop(eng, HOMA_DROP_INCONSISTENT);
    pkt.u.data.payload = rpc->in.buf + pkt.u.data.offset;
    int ret = data_accept(eng, now, &src, &pkt, rpc);
    if (ret == 0) {
        eng->ctr.pkts_in++;
        eng->ctr.data_placed++;
    }
    homa_notify_tx(eng);
    return ret;
}

static int handle_grant(struct homa_engine *eng, uint64_t now, struct homa_rpc *rpc,
                        const struct homa_wire_pkt *pkt)
{
    struct homa_msgout *m = &rpc->out;
    if (!m->active) return drop(eng, HOMA_DROP_NO_RPC);
    if (pkt->u.grant.offset > m->length) return drop(eng, HOMA_DROP_BAD_GRANT);
    rpc_heard(eng, rpc, now);
    if (pkt->u.grant.offset > m->granted) m->granted = pkt->u.grant.offset;
    m->sched_prio = pkt->u.grant.priority;
    homa_out_update(eng, rpc);
    return 0;
}

static int handle_resend(struct homa_engine *eng, uint64_t now, struct homa_rpc *rpc,
                         const struct homa_wire_pkt *pkt)
{
    struct homa_msgout *m = &rpc->out;
    rpc_heard(eng, rpc, now);
    if (!m->active || ((rpc->id & 1) && rpc->state != RPC_SERVER_OUTGOING)) {
        /* Still receiving or computing: we are alive, nothing to resend. */
        send_simple(eng, HOMA_PKT_BUSY, rpc->id, &rpc->peer->addr, rpc->port->num, rpc->peer_port);
        return 0;
    }
    uint64_t start = pkt->u.resend.offset;
    uint64_t end =
        pkt->u.resend.length == HOMA_RESEND_ALL ? m->next_xmit : start + pkt->u.resend.length;
    if (end > m->length) end = m->length;
    if (m->length == 0) {
        homa_out_add_rtx(eng, rpc, 0, 0, pkt->u.resend.priority);
        return 0;
    }
    if (start >= end) return 0;
    if (end > m->granted) {
        /* A RESEND implies a grant (our copy of a GRANT may have been lost);
         * its priority is for the retransmission only, not a rank. */
        m->granted = (uint32_t)end;
    }
    uint32_t sent_end = end < m->next_xmit ? (uint32_t)end : m->next_xmit;
    if (start < sent_end) {
        /* The peer wrote this RESEND before it could have seen what left
         * after it reached us: that is on its way, not lost. */
        if (homa_out_resend(eng, rpc, (uint32_t)start, sent_end, pkt->u.resend.priority,
                            eng->arrived) > 0) {
            eng->ctr.resend_answered++;
        } else {
            /* It asked whether we have the RPC: yes, and what it wants is
             * on its way.  BUSY says so (keeps it from asking again soon). */
            eng->ctr.resend_stale++;
            send_simple(eng, HOMA_PKT_BUSY, rpc->id, &rpc->peer->addr, rpc->port->num,
                        rpc->peer_port);
        }
    } else {
        /* Not sent yet: we are deliberately sending something shorter. */
        homa_out_update(eng, rpc);
        send_simple(eng, HOMA_PKT_BUSY, rpc->id, &rpc->peer->addr, rpc->port->num, rpc->peer_port);
    }
    return 0;
}

static void resend_response_start(struct homa_engine *eng, struct homa_rpc *rpc);

static void handle_need_ack(struct homa_engine *eng, uint64_t now, const homa_addr *src,
                            const struct homa_wire_pkt *pkt)
{
    uint64_t local = pkt->sender_id ^ 1;
    if (local & 1) return; /* only servers ask, only clients answer */
    struct homa_rpc *rpc = homa_find_client(eng, local);
    if (rpc && (memcmp(&rpc->peer->addr, src, sizeof(*src)) != 0 || !rpc->port ||
                rpc->port->num != pkt->dport || rpc->peer_port != pkt->sport))
        rpc = NULL;
    if (rpc && rpc->state == RPC_CLIENT_ACTIVE && rpc->mem_wait) {
        /* The response waits for our memory: what the server resent
         * would be dropped again (W5 with 1,000 in flight retransmitted
         * 0.7 bytes per byte delivered).  Tell it we are alive instead. */
        rpc_heard(eng, rpc, now);
        if (now - rpc->last_told >= eng->cfg.tick_ns) send_receiver_busy(eng, rpc, now);
        return;
    }
    if (rpc && rpc->state == RPC_CLIENT_ACTIVE) {
        /* The server has sent the whole response and we lack part of it:
         * the missing part was lost.  Ask for it now; waiting for our own
         * timer would leave the server believing we went away. */
        uint64_t tick = eng->cfg.tick_ns;
        /* Unless data is still arriving (the rest may be in flight) or we
         * asked within the last tick (the retransmission may be). */
        bool wait =
            (rpc->in.active && now - rpc->last_heard < tick) || now - rpc->last_prodded < tick;
        rpc_heard(eng, rpc, now);
        if (wait) return;
        if (rpc->in.active)
            request_missing(eng, rpc, now, true);
        else
            resend_response_start(eng, rpc);
        rpc->last_prodded = now;
        return;
    }
    struct homa_wire_pkt ack;
    memset(&ack, 0, sizeof(ack));
    ack.type = HOMA_PKT_ACK;
    ack.sender_id = local;
    ack.u.ack.acks[0].client_id = local;
    ack.u.ack.acks[0].server_port = pkt->sport;
    ack.u.ack.num_acks = 1;
    struct homa_peer *peer = homa_peer_get(eng, src, false);
    if (peer) {
        /* Take the chance to flush other acks for this peer from this port. */
        homa_peer_take_acks(peer, pkt->dport, local, &ack);
    }
    homa_ctl_queue(eng, NULL, src, pkt->dport, pkt->sport, &ack);
}

int homa_engine_input(homa_engine *eng, uint64_t now, const homa_addr *src, const uint8_t *buf,
                      size_t len)
{
    return homa_engine_input_at(eng, now, now, src, buf, len);
}

int homa_engine_input_at(homa_engine *eng, uint64_t now, uint64_t arrived, const homa_addr *src,
                         const uint8_t *buf, size_t len)
{
    if (!eng || !src || (!buf && len)) return HOMA_DROP_SHORT;
    eng->now = now;
    eng->arrived = arrived != 0 && arrived < now ? arrived : now;
    if (now - eng->arrived > eng->in_lag) eng->in_lag = now - eng->arrived;
    struct homa_wire_pkt pkt;
    int werr = homa_wire_decode(buf, len, &pkt);
    if (werr != HOMA_WIRE_OK) return drop(eng, wire_to_drop(werr));
    uint64_t local = pkt.sender_id ^ 1;
    int ret = 0;
    struct homa_rpc *rpc = NULL;
    if (pkt.type != HOMA_PKT_DATA && pkt.type != HOMA_PKT_ACK && pkt.type != HOMA_PKT_CUTOFFS &&
        pkt.type != HOMA_PKT_FREEZE && pkt.type != HOMA_PKT_NEED_ACK) {
        rpc = (local & 1) ? homa_find_server(eng, local, src, pkt.sport)
                          : homa_find_client(eng, local);
        if (rpc && (memcmp(&rpc->peer->addr, src, sizeof(*src)) != 0 || !rpc->port ||
                    rpc->port->num != pkt.dport))
            rpc = NULL;
        /* Anything about one of our RPCs shows the peer (that port of it)
         * is alive, even RPC_UNKNOWN. */
        if (rpc) homa_peer_heard(rpc->peer, rpc->peer_port, now);
    }
    switch (pkt.type) {
    case HOMA_PKT_DATA:
        eng->ctr.data_in++;
        ret = handle_data(eng, now, src, &pkt);
        break;
    case HOMA_PKT_GRANT:
        eng->ctr.grant_in++;
        ret = rpc ? handle_grant(eng, now, rpc, &pkt) : drop(eng, HOMA_DROP_NO_RPC);
        break;
    case HOMA_PKT_RESEND:
        eng->ctr.resend_in++;
        if (rpc) {
            ret = handle_resend(eng, now, rpc, &pkt);
        } else if (homa_port_find(eng, pkt.dport)) {
            /* We have no such RPC: say so, so the peer can restart or clean up.
             * (A client asking about one we gave up on renews its tombstone.)
             * At our RPC cap, a request we have no trace of was refused
             * there (or lost): BUSY, so that its client asks again later
             * instead of restarting it into the same refusal. */
            bool tomb = (local & 1) && homa_tomb_find(eng, local, src, pkt.sport);
            uint8_t answer =
                (local & 1) && !tomb ? unknown_request_answer(eng) : HOMA_PKT_RPC_UNKNOWN;
            send_simple(eng, answer, local, src, pkt.dport, pkt.sport);
            ret = drop(eng, HOMA_DROP_NO_RPC);
        } else {
            ret = drop(eng, HOMA_DROP_NO_PORT);
        }
        break;
    case HOMA_PKT_RPC_UNKNOWN:
        eng->ctr.unknown_in++;
        if (!rpc) {
            ret = drop(eng, HOMA_DROP_NO_RPC);
        } else if (local & 1) {
            /* the client forgot this RPC (aborted): free our side */
            homa_rpc_free(eng, rpc);
            homa_grant_check(eng);
        } else if (rpc->state == RPC_CLIENT_ACTIVE && rpc->asked) {
            /* Deliberately not refreshing last_heard: a server that keeps
             * answering RPC_UNKNOWN (e.g. every restart of the request is
             * lost on the way) must still lead to a timeout.  Only one
             * restart per RESEND: a duplicated RESEND or RPC_UNKNOWN must
             * not count twice. */
            client_restart(eng, rpc);
        }
        break;
    case HOMA_PKT_BUSY:
        eng->ctr.busy_in++;
        if (rpc) {
            rpc_heard(eng, rpc, now);
            /* The sender is deliberately sending something else, or (a
             * server at its RPC cap) will take our request when it has
             * room.  Not a reset of the RPC_UNKNOWN count: a server that
             * holds a request whose last packet never gets through says
             * BUSY too, gives it up, and must not be restarted forever. */
            rpc->in_progress = now;
            rpc->asks = 0;
        } else
            ret = drop(eng, HOMA_DROP_NO_RPC);
        break;
    case HOMA_PKT_CUTOFFS: {
        eng->ctr.cutoffs_in++;
        struct homa_peer *peer = homa_peer_get(eng, src, false);
        if (peer) {
            memcpy(peer->cutoffs, pkt.u.cutoffs.cutoffs, sizeof(peer->cutoffs));
            for (uint32_t i = eng->cfg.num_priorities; i < HOMA_NUM_PRIORITIES; i++)
                peer->cutoffs[i] = 0;
            peer->cutoff_version = pkt.u.cutoffs.version;
        } else {
            ret = drop(eng, HOMA_DROP_NO_RPC);
        }
        break;
    }
    case HOMA_PKT_FREEZE:
        eng->ctr.freeze_in++;
        break;
    case HOMA_PKT_NEED_ACK:
        eng->ctr.need_ack_in++;
        handle_need_ack(eng, now, src, &pkt);
        break;
    case HOMA_PKT_ACK:
        eng->ctr.ack_in++;
        /* Like the Linux module, an ACK from a client (even sender_id) also
         * ends the RPC its common header names; the kernel sends such
         * ACKs with num_acks 0.  Ours repeat that RPC in acks[0], whose
         * second handling finds nothing. */
        if (!(pkt.sender_id & 1)) {
            struct homa_wire_ack self = {.client_id = pkt.sender_id, .server_port = pkt.dport};
            handle_ack(eng, src, pkt.sport, &self);
        }
        for (uint32_t i = 0; i < pkt.u.ack.num_acks; i++)
            handle_ack(eng, src, pkt.sport, &pkt.u.ack.acks[i]);
        break;
    default:
        ret = drop(eng, HOMA_DROP_BAD_TYPE);
        break;
    }
    if (ret == 0) eng->ctr.pkts_in++;
    homa_notify_tx(eng);
    return ret;
}

/* ---------- timers ---------- */

/* Bounds on what one RPC asks for per call: as many holes as the sender
 * keeps ranges to retransmit (HOMA_MAX_RTX), up to max_incoming bytes. */
#define HOMA_MAX_RESENDS_PER_TICK HOMA_MAX_RTX

/* Asks for the missing ranges of rpc's incoming message below what we
 * granted: the gaps old enough (all of them if `silent`) and, after
 * silence, the tail.  Returns when a gap not asked for now will be old
 * enough (UINT64_MAX: none). */
static uint64_t request_missing(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t now,
                                bool silent)
{
    struct homa_msgin *m = &rpc->in;
    uint64_t age = (uint64_t)eng->cfg.gap_resend_ticks * eng->cfg.tick_ns;
    uint64_t next = UINT64_MAX;
    int sent = 0;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < m->num_gaps; i++) {
        struct homa_gap *g = &m->gaps[i];
        if (g->start >= m->granted) break;
        if (sent >= HOMA_MAX_RESENDS_PER_TICK || bytes >= eng->cfg.max_incoming) {
            next = now; /* the rest next tick */
            break;
        }
        if (!silent && (age == 0 || homa_less_lag(now - g->at, eng->lag) < age)) {
            if (age > 0 && g->at + age + eng->lag < next) next = g->at + age + eng->lag;
            continue;
        }
        uint32_t end = g->end < m->granted ? g->end : m->granted;
        send_resend(eng, rpc, g->start, end - g->start, resend_prio(eng, rpc, g->start, silent));
        g->at = now;
        if (age > 0 && now + age + eng->lag < next) next = now + age + eng->lag;
        bytes += end - g->start;
        sent++;
    }
    if (silent && m->recv_end < m->granted && sent < HOMA_MAX_RESENDS_PER_TICK) {
        send_resend(eng, rpc, m->recv_end, m->granted - m->recv_end,
                    resend_prio(eng, rpc, m->recv_end, true));
        sent++;
    }
    /* A round of asks is one answer time of the peer: a peer whose input
     * backlog holds our RESENDs for longer than the timeout answers them
     * all at once, late, and the copy it resends in answer to the first
     * may be lost again; counting every RESEND interval as a round would
     * give such a live peer up within a timeout.  Bounded, so that a
     * message whose data never gets through still fails in time. */
    if (sent == 0 || rpc->asks == UINT8_MAX) return next;
    uint64_t round = rpc->peer->ask_rtt;
    uint64_t round_max = 4 * (uint64_t)eng->cfg.timeout_ticks * eng->cfg.tick_ns;
    if (round > round_max) round = round_max;
    if (rpc->asks == 0 || now - rpc->ask_counted >= round) {
        rpc->asks++;
        rpc->ask_counted = now;
    }
    return next;
}

/* No byte of the response yet: ask for its start.  The server retransmits,
 * says BUSY, or says RPC_UNKNOWN (then we restart the request). */
static void resend_response_start(struct homa_engine *eng, struct homa_rpc *rpc)
{
    const homa_config *c = &eng->cfg;
    send_resend(eng, rpc, 0, c->unsched_bytes ? c->unsched_bytes : rpc->peer->max_payload,
                (uint8_t)(c->num_priorities - 1));
}

/* Liveness prods (BUSY from a receiver that is not granting, NEED_ACK,
 * RESEND for a response the server is known to be working on) say nothing
 * new; sent per RPC every interval, their number would grow with the
 * backlog (a client with 1,000 requests queued at a server: 200,000
 * RESENDs and as many BUSYs a second).  So each peer has a budget per class
 * of prod, HOMA_PRODS_PER_PEER per interval of that class (a token bucket).
 * An RPC due for a prod when its peer's bucket is empty waits in the peer's
 * FIFO queue for that class and goes when a token comes: no bursts, no
 * starvation, and the wait costs a list entry, not a visit per tick.  An
 * RPC's prods thus come every interval while few want them, and every
 * (number waiting / HOMA_PRODS_PER_PEER) intervals behind a backlog.
 *
 * Loss recovery is not a prod and is not stretched: missing ranges of a
 * message being received go at the plain resend interval, and the RESEND
 * of a client whose request the server has not confirmed yet (it may have
 * lost all of it) has a class of its own, HOMA_RESENDS_PER_PEER a tick, or
 * HOMA_RESENDS_PER_SILENT_PEER to a peer gone quiet (a dead server is not
 * flooded).  A port not heard from for a quarter of a timeout gets its
 * prods from a class of its own too, so that a live port queued behind
 * another port's backlog answers in time and only a dead one stays
 * silent. */
#define HOMA_PRODS_PER_PEER 16
#define HOMA_RESENDS_PER_PEER 1024
#define HOMA_RESENDS_PER_SILENT_PEER 64

/* A restarted request lost again draws another RPC_UNKNOWN, so one or two
 * prove nothing under loss; this many in a row (20 % loss: 7e-12), for at
 * least a timeout, do.  (A count alone is not enough: restarts come every
 * resend interval, so a path that loses long requests often, e.g. IP
 * fragments in a full queue, failed live servers in 16 intervals.) */
#define HOMA_UNKNOWNS_FATAL 16
/* RESEND rounds for a message that brought no new byte (20 % loss each
 * way: 0.36^16 = 8e-8). */
#define HOMA_ASKS_FATAL 16

#define NEVER UINT64_MAX

static void at_least(uint64_t *next, uint64_t t)
{
    if (t < *next) *next = t;
}

/* One token of class c from peer's bucket, if it has one (GCRA). */
static bool budget_token(struct homa_engine *eng, struct homa_peer *peer, int c, uint64_t now)
{
    const homa_config *cf = &eng->cfg;
    uint64_t burst = HOMA_PRODS_PER_PEER, interval;
    if (c == HOMA_BUDGET_NEED_ACK) {
        interval = (uint64_t)cf->need_ack_ticks * cf->tick_ns;
    } else if (c == HOMA_BUDGET_RECOVER) {
        /* A peer that answers (BUSY, RPC_UNKNOWN) lets lost requests be
         * found quickly; one that has gone quiet is not flooded. */
        uint64_t quiet = (uint64_t)cf->resend_interval * cf->tick_ns;
        burst =
            now - peer->last_heard < quiet ? HOMA_RESENDS_PER_PEER : HOMA_RESENDS_PER_SILENT_PEER;
        interval = cf->tick_ns;
    } else {
        interval = (uint64_t)cf->resend_interval * cf->tick_ns;
    }
    uint64_t step = interval / burst > 0 ? interval / burst : 1;
    uint64_t tat = peer->budget_tat[c] > now ? peer->budget_tat[c] : now;
    if (tat - now > step * (burst - 1)) return false;
    peer->budget_tat[c] = tat + step;
    return true;
}

/* rpc is due for a prod of class c: true if it may send it now; if not, it
 * waits in its peer's queue for c, and the timer looks at it again when its
 * turn comes. */
static bool take_budget(struct homa_engine *eng, struct homa_rpc *rpc, int c, uint64_t now)
{
    struct homa_peer *peer = rpc->peer;
    rpc->wanted = true;
    if (rpc->granted) {
        bool mine = rpc->granted == c + 1;
        rpc->granted = 0;
        if (mine) return true;
    }
    if (rpc->waiting == c + 1) return false;
    if (rpc->waiting) hlist_del(&rpc->wait_node);
    rpc->waiting = 0;
    if (hlist_empty(&peer->budget_wait[c]) && budget_token(eng, peer, c, now)) return true;
    hlist_add_tail(&peer->budget_wait[c], &rpc->wait_node);
    rpc->waiting = (uint8_t)(c + 1);
    if (!hlist_linked(&peer->waiting_node)) hlist_add_tail(&eng->waiting, &peer->waiting_node);
    eng->ctr.prods_deferred++;
    return false;
}

/* RPCs queued for the PROD budget whose port has now been quiet for a
 * quarter timeout move to the DOUBT queue.  Checked per port, and the
 * queue is walked once per quiet spell of a port (rare), not per tick. */
static void budget_doubt(struct homa_engine *eng, struct homa_peer *peer, uint64_t now)
{
    uint64_t quarter = (uint64_t)eng->cfg.timeout_ticks * eng->cfg.tick_ns / 4;
    for (uint32_t k = 0; k < peer->num_ports; k++) {
        struct homa_peer_port *pp = &peer->ports[k];
        if (homa_less_lag(now - pp->last_heard, eng->lag) < quarter ||
            pp->doubt_scanned == pp->last_heard + 1)
            continue;
        pp->doubt_scanned = pp->last_heard + 1;
        struct hlist *q = &peer->budget_wait[HOMA_BUDGET_PROD], *e = q->next;
        while (e != q) {
            struct homa_rpc *r = HOMA_CONTAINER(e, struct homa_rpc, wait_node);
            e = e->next;
            if (r->peer_port != pp->port) continue;
            hlist_del(&r->wait_node);
            hlist_add_tail(&peer->budget_wait[HOMA_BUDGET_DOUBT], &r->wait_node);
            r->waiting = HOMA_BUDGET_DOUBT + 1;
        }
    }
}

/* Hands the tokens that came since the last run to the RPCs waiting for
 * them, oldest first; they are looked at in this run. */
static void budget_serve(struct homa_engine *eng, uint64_t now)
{
    struct hlist *n = eng->waiting.next;
    while (n != &eng->waiting) {
        struct homa_peer *peer = HOMA_CONTAINER(n, struct homa_peer, waiting_node);
        n = n->next;
        if (!hlist_empty(&peer->budget_wait[HOMA_BUDGET_PROD])) budget_doubt(eng, peer, now);
        bool more = false;
        for (int c = 0; c < HOMA_BUDGET_CLASSES; c++) {
            struct hlist *q = &peer->budget_wait[c];
            while (!hlist_empty(q) && budget_token(eng, peer, c, now)) {
                struct homa_rpc *r = HOMA_CONTAINER(q->next, struct homa_rpc, wait_node);
                hlist_del(&r->wait_node);
                r->waiting = 0;
                r->granted = (uint8_t)(c + 1);
                homa_timer_schedule(eng, r, eng->ticks);
            }
            if (!hlist_empty(q)) more = true;
        }
        if (!more) hlist_del(&peer->waiting_node);
    }
}

void homa_timer_schedule(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t tick)
{
    hlist_del(&rpc->timer_node);
    rpc->timer_tick = tick;
    hlist_add_tail(&eng->wheel[tick & (HOMA_WHEEL_SLOTS - 1)], &rpc->timer_node);
}

void homa_timer_forget(struct homa_rpc *rpc)
{
    hlist_del(&rpc->timer_node);
    hlist_del(&rpc->wait_node);
    rpc->waiting = rpc->granted = 0;
}

/* Puts rpc on the wheel for the first run at or after time `when`. */
static void schedule_at(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t now, uint64_t when)
{
    if (when == NEVER) {
        hlist_del(&rpc->timer_node);
        return;
    }
    uint64_t tick = eng->cfg.tick_ns;
    uint64_t ahead = when <= now ? 1 : (when - now + tick - 1) / tick;
    homa_timer_schedule(eng, rpc, eng->ticks + ahead);
}

/* BUSY from the receiving side: we are alive, the pause is ours. */
static void send_receiver_busy(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t now)
{
    send_simple(eng, HOMA_PKT_BUSY, rpc->id, &rpc->peer->addr, rpc->port->num, rpc->peer_port);
    rpc->last_told = now;
}

/* Per-RPC timer work; returns true if the RPC must fail (client) or be
 * given up (server).  Otherwise *next is when it next has something to do
 * unless a packet or call about it comes first (which looks at it on the
 * next tick); NEVER if only such an event can give it work.  Every
 * condition below reads "an interval of at least d since t", which first
 * holds at t + d + lag: the lag it has now. */
static bool check_rpc(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t now, uint64_t *next)
{
    const homa_config *c = &eng->cfg;
    uint64_t lag = eng->lag;
    *next = NEVER;
    switch (rpc->state) {
    case RPC_CLIENT_READY:
    case RPC_CLIENT_DELIVERED:
    case RPC_SERVER_READY:
    case RPC_SERVER_IN_SERVICE:
        return false;
    default:
        break;
    }
    /* What peers sent may wait eng->lag in our receive path: not silence. */
    uint64_t silent = homa_less_lag(now - rpc->last_heard, lag);
    uint64_t since_prod = homa_less_lag(now - rpc->last_prodded, lag);
    uint64_t resend_after = (uint64_t)c->resend_ticks * c->tick_ns;
    uint64_t resend_base = (uint64_t)c->resend_interval * c->tick_ns;
    /* Dead: silent for a timeout, and so is the peer's port this RPC talks
     * to (every RPC with it: the process behind it is gone or cut off), or
     * the peer keeps answering RPC_UNKNOWN to our restarted request.  The
     * silence of one RPC alone proves nothing while its peer answers for
     * others: its prods and their answers may have been lost, or stretched
     * out behind a long backlog. */
    uint64_t timeout = (uint64_t)c->timeout_ticks * c->tick_ns;
    uint64_t port_heard = homa_peer_port_heard(rpc->peer, rpc->peer_port);
    uint64_t port_quiet = homa_less_lag(now - port_heard, lag);
    bool port_silent = port_quiet >= timeout;
    /* Prods waiting behind a backlog may come less than once a timeout; a
     * port not heard from for a quarter of one gets them from the DOUBT
     * budget, so that a live but busy port always answers in time. */
    bool port_doubt = port_quiet >= timeout / 4;
    int prod_class = port_doubt ? HOMA_BUDGET_DOUBT : HOMA_BUDGET_PROD;
    bool forgotten = rpc->unknowns >= HOMA_UNKNOWNS_FATAL && now - rpc->unknown_since >= timeout;
    bool dead = (silent >= timeout && port_silent) || forgotten;
    /* When it could die, and a look at least once a timeout in any case. */
    at_least(next, now + timeout);
    at_least(next, (rpc->last_heard > port_heard ? rpc->last_heard : port_heard) + timeout + lag);
    if (rpc->unknowns >= HOMA_UNKNOWNS_FATAL) at_least(next, rpc->unknown_since + timeout);
    struct homa_msgin *m = &rpc->in;

    if (rpc->state == RPC_SERVER_OUTGOING) {
        if (dead) return true;
        if (homa_out_done(&rpc->out)) {
            /* Also tells a client that lost part of the response to ask. */
            uint64_t every = (uint64_t)c->need_ack_ticks * c->tick_ns;
            if (since_prod < every) {
                at_least(next, rpc->last_prodded + every + lag);
            } else if (take_budget(eng, rpc, HOMA_BUDGET_NEED_ACK, now)) {
                send_simple(eng, HOMA_PKT_NEED_ACK, rpc->id, &rpc->peer->addr, rpc->port->num,
                            rpc->peer_port);
                rpc->last_prodded = now;
                at_least(next, now + every + lag);
            }
        }
        return false;
    }
    if (rpc->mem_wait && !(rpc->id & 1)) {
        /* Our response waits for max_rx_bytes (mem_wait_serve brings it
         * back): the pause is ours, so keep the server's RPC alive, for as
         * long as it takes (1,000 W5 RPCs in flight wait for seconds).
         * Given up only when it cannot fit unless the application lets go
         * of messages it holds, and none was let go for a timeout: then
         * the wait may never end (the application may be waiting for this
         * very response). */
        uint64_t since = rpc->mem_since > eng->mem_freed_at ? rpc->mem_since : eng->mem_freed_at;
        bool stuck = eng->held_bytes + rpc->mem_len > eng->cfg.max_rx_bytes;
        homa_rpc_heard(eng, rpc, now);
        if (stuck && homa_less_lag(now - since, lag) >= timeout) {
            eng->mem_fails++;
            homa_rpc_fail(eng, rpc, HOMA_ERR_NOMEM);
            *next = NEVER;
            return false;
        }
        *next = stuck ? since + timeout + lag : now + timeout;
        if (since_prod >= resend_base && take_budget(eng, rpc, prod_class, now)) {
            send_receiver_busy(eng, rpc, now);
            rpc->last_prodded = now;
        }
        at_least(next, rpc->last_prodded + resend_base + lag);
        return false;
    }
    /* Our own request is waiting behind shorter messages in our own queue
     * (sender SRPT): the silence is ours, not the server's, so it must not
     * count towards the timeout; the server hears from us once we send
     * (and each transmission restarts the silence and brings us back). */
    if (!(rpc->id & 1) && rpc->out.next_xmit < rpc->out.granted &&
        rpc->out.next_xmit < rpc->out.length) {
        homa_rpc_heard(eng, rpc, now);
        *next = NEVER;
        return false;
    }
    /* Client waiting for its response, or server receiving a request. */
    bool holding = m->active && m->received == m->granted && m->granted < m->length;
    if (holding) {
        /* We are the ones not granting: not silence (a grant restarts the
         * silence).  Keep the sender alive. */
        homa_rpc_heard(eng, rpc, now);
        *next = NEVER;
        if (since_prod < resend_base)
            at_least(next, rpc->last_prodded + resend_base + lag);
        else if (take_budget(eng, rpc, prod_class, now)) {
            send_receiver_busy(eng, rpc, now);
            rpc->last_prodded = now; /* no answer expected */
            at_least(next, now + resend_base + lag);
        }
        return false;
    }
    if (dead) return true;
    if (m->active && rpc->asks >= HOMA_ASKS_FATAL) {
        if (homa_less_lag(now - rpc->in_progress, lag) >= timeout)
            return true; /* asked again and again, nothing new came */
        at_least(next, rpc->in_progress + timeout + lag);
    }
    /* How long the server usually takes to answer (up to a quarter
     * timeout): an unanswered request is not asked about sooner. */
    uint64_t usual = 2 * rpc->peer->resp_time;
    if (usual > timeout / 4) usual = timeout / 4;
    if (!(rpc->id & 1) && !m->active && !rpc->confirmed && usual > resend_after)
        resend_after = usual;
    if (silent < resend_after) {
        uint64_t quiet_at = rpc->last_heard + resend_after + lag;
        at_least(next, quiet_at);
        if (m->active) {
            /* Data still arrives but we grant nothing more: what we
             * granted earlier trickles in, queued in the network behind
             * higher priorities.  The sender has sent all of it and hears
             * nothing from us, so tell it we are alive before it times us
             * out. */
            uint64_t told_at = rpc->last_told + resend_base + lag;
            if (now >= told_at) {
                told_at = NEVER; /* its turn in the queue brings it back */
                if (take_budget(eng, rpc, prod_class, now)) {
                    send_receiver_busy(eng, rpc, now);
                    told_at = now + resend_base + lag;
                }
            }
            if (told_at < quiet_at) at_least(next, told_at);
            /* Holes that persist while other data keeps flowing are asked
             * for without waiting for silence: a long message would
             * otherwise stall once its grant window is full of holes. */
            if (m->num_gaps > 0 && c->gap_resend_ticks > 0)
                at_least(next, request_missing(eng, rpc, now, false));
        }
        return false;
    }
    if (m->active && (m->num_gaps > 0 || m->recv_end < m->granted)) {
        /* Data we granted is missing: loss recovery, not a liveness prod. */
        if (since_prod < resend_base) {
            at_least(next, rpc->last_prodded + resend_base + lag);
            return false;
        }
        request_missing(eng, rpc, now, true);
        rpc->last_prodded = now;
        at_least(next, now + resend_base + lag);
    } else if (!m->active && !(rpc->id & 1)) {
        /* No response yet.  Unconfirmed, the request itself may be lost:
         * recovery.  Confirmed (the server said BUSY or asked for data),
         * the server is working on it: a liveness prod; a lost response is
         * also asked for when the server's NEED_ACK arrives. */
        bool recovery = !rpc->confirmed;
        /* RESENDs to a server that is behind come no more often than it
         * usually answers (as the first one, above): it has the request
         * in its backlog, or is working on it, and asking every interval
         * only adds to the backlog (W1 at 0.10 Gb/s with 20 % loss: 1.8-3.0
         * recovery RESENDs per RPC; W2 at 0.20 without loss: 0.98 prods
         * per RPC, each answered BUSY).  A prompt server is asked at the
         * plain interval, and so is a port we doubt (not heard for a
         * quarter timeout): then every attempt counts before the timeout
         * (the 16-host sweep at 20 % loss failed an RPC with the spacing
         * alone). */
        uint64_t every = !port_doubt && usual > resend_base ? usual : resend_base;
        if (since_prod < every) {
            at_least(next, rpc->last_prodded + every + lag);
            return false;
        }
        if (!take_budget(eng, rpc, recovery ? HOMA_BUDGET_RECOVER : prod_class, now)) return false;
        resend_response_start(eng, rpc);
        rpc->last_prodded = now;
        if (recovery && rpc->probes < UINT8_MAX) rpc->probes++;
        at_least(next, now + every + lag);
    }
    return false;
}

void homa_timer_run(struct homa_engine *eng, uint64_t now, uint64_t late)
{
    if (late) {
        /* A local stall: what peers said meanwhile may still wait in our
         * receive path, so every RPC's silence is shortened by it: summed
         * here, applied to an RPC when the timer next looks at it (a stall
         * costs O(1), not a walk through every RPC, which under overload,
         * when every run is late, was most of the CPU). */
        homa_peers_forgive(eng, now, late);
        eng->forgiven += late;
    }
    budget_serve(eng, now);
    if (!hlist_empty(&eng->mem_waitq)) mem_wait_serve(eng, now);
    /* This tick's slot, taken whole: what it schedules goes elsewhere. */
    struct hlist *slot = &eng->wheel[eng->ticks & (HOMA_WHEEL_SLOTS - 1)];
    struct hlist todo;
    hlist_init(&todo);
    if (!hlist_empty(slot)) {
        todo.next = slot->next;
        todo.prev = slot->prev;
        todo.next->prev = &todo;
        todo.prev->next = &todo;
        hlist_init(slot);
    }
    while (!hlist_empty(&todo)) {
        struct homa_rpc *r = HOMA_CONTAINER(todo.next, struct homa_rpc, timer_node);
        hlist_del(&r->timer_node);
        if (r->timer_tick > eng->ticks) {
            /* due a whole turn of the wheel (or more) later */
            homa_timer_schedule(eng, r, r->timer_tick);
            continue;
        }
        if (r->forgiven_seen != eng->forgiven) {
            uint64_t d = eng->forgiven - r->forgiven_seen;
            r->last_heard = now - r->last_heard > d ? r->last_heard + d : now;
            r->forgiven_seen = eng->forgiven;
        }
        r->wanted = false;
        eng->timer_checks++;
        uint64_t next;
        if (!check_rpc(eng, r, now, &next)) {
            /* Tokens and queue places of prods no longer wanted go. */
            if (!r->wanted) {
                if (r->waiting) hlist_del(&r->wait_node);
                r->waiting = r->granted = 0;
            }
            schedule_at(eng, r, now, next);
            continue;
        }
        if (r->state == RPC_CLIENT_ACTIVE) {
            eng->ctr.client_timeouts++;
            if (r->unknowns < HOMA_UNKNOWNS_FATAL) eng->ctr.peer_failures++;
            homa_rpc_fail(eng, r, HOMA_ERR_TIMEOUT);
        } else {
            /* Its client is gone.  homa_rpc_free leaves a tombstone if the
             * request reached the application, so a client that comes back
             * with the same id cannot have it served twice. */
            eng->ctr.server_timeouts++;
            homa_rpc_free(eng, r);
        }
    }
    homa_grant_check(eng);
}
