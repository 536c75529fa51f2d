/* Packet input: the protocol's reactions to what arrives, whether the
 * driver hands the whole packet over (homa_engine_input) or receives a DATA
 * payload straight into its message (direct receive, homa_engine_place_*),
 * and the admission of new incoming messages under the memory cap
 * (max_rx_bytes: a FIFO of messages waiting for a buffer) and the RPC cap
 * (max_rpcs: refusal, BUSY while busy serving).  What the engine does
 * about silence is in timer.c. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

/* Messages waiting for max_rx_bytes (requests and responses alike) get
 * their buffers, first come first served (a long one at the head holds
 * back shorter ones behind it, but none waits forever), and ask again for
 * what their senders sent unscheduled: it was dropped while they waited. */
void homa_mem_wait_serve(struct homa_engine *eng, uint64_t now)
{
    bool served = false;
    while (!hlist_empty(&eng->mem_waitq)) {
        struct homa_rpc *rpc = HOMA_CONTAINER(eng->mem_waitq.next, struct homa_rpc, mem_node);
        if (eng->ctr.rx_bytes_in_use + rpc->mem_len > eng->cfg.max_rx_bytes) break;
        uint8_t *buf = homa_buf_get(eng, rpc->mem_len);
        if (!buf) break;
        homa_mem_wait_leave(rpc);
        msgin_start(eng, rpc, buf, rpc->mem_len, rpc->mem_incoming);
        homa_request_missing(eng, rpc, now, true);
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
    if (!hlist_empty(&eng->mem_waitq)) homa_mem_wait_serve(eng, eng->now);
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
                        homa_ctl_simple(eng, HOMA_PKT_BUSY, local, src, pkt->dport, pkt->sport);
                }
                *reason = HOMA_DROP_NO_MEMORY;
                return NULL;
            }
            struct homa_peer *peer = homa_peer_get(eng, src, true);
            if (peer) rpc = homa_rpc_new(eng, local, port, peer, pkt->sport, RPC_SERVER_INCOMING);
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
    /* In a batch (homa_engine_input_begin) the grants are decided once, at
     * its end, for all the packets it brought. */
    if (eng->in_batch)
        eng->batch_grants = true;
    else
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
    if (!eng->in_batch) homa_notify_tx(eng);
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
        homa_ctl_simple(eng, HOMA_PKT_BUSY, rpc->id, &rpc->peer->addr, rpc->port->num,
                        rpc->peer_port);
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
            homa_ctl_simple(eng, HOMA_PKT_BUSY, rpc->id, &rpc->peer->addr, rpc->port->num,
                            rpc->peer_port);
        }
    } else {
        /* Not sent yet: we are deliberately sending something shorter. */
        homa_out_update(eng, rpc);
        homa_ctl_simple(eng, HOMA_PKT_BUSY, rpc->id, &rpc->peer->addr, rpc->port->num,
                        rpc->peer_port);
    }
    return 0;
}

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
        if (now - rpc->last_told >= eng->cfg.tick_ns) homa_send_receiver_busy(eng, rpc, now);
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
            homa_request_missing(eng, rpc, now, true);
        else
            homa_resend_response_start(eng, rpc);
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
            homa_ctl_simple(eng, answer, local, src, pkt.dport, pkt.sport);
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
    if (!eng->in_batch) homa_notify_tx(eng);
    return ret;
}

void homa_engine_input_begin(homa_engine *eng)
{
    if (eng) eng->in_batch = true;
}

void homa_engine_input_end(homa_engine *eng, uint64_t now)
{
    if (!eng || !eng->in_batch) return;
    eng->in_batch = false;
    eng->now = now;
    if (eng->batch_grants) {
        eng->batch_grants = false;
        homa_grant_check(eng);
    }
    homa_notify_tx(eng);
}
