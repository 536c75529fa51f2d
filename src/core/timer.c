/* Timers: what the engine does about silence.  Every tick (homa_engine_timer)
 * the RPCs due are looked at (a wheel of ticks: a run costs what is due,
 * not what is live): loss recovery (RESEND for missing ranges, for a
 * response that never started), liveness prods under a per-peer budget
 * (BUSY, NEED_ACK, RESEND to a busy server), and timeouts (a client RPC
 * fails, a server RPC is given up).  A local stall (the timer runs late)
 * is forgiven: it is our silence, not the peers'. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

/* Bounds on what one RPC asks for per call: as many holes as the sender
 * keeps ranges to retransmit (HOMA_MAX_RTX), up to max_incoming bytes. */
#define HOMA_MAX_RESENDS_PER_TICK HOMA_MAX_RTX

/* Asks for the missing ranges of rpc's incoming message below what we
 * granted: the gaps old enough (all of them if `silent`) and, after
 * silence, the tail.  Returns when a gap not asked for now will be old
 * enough (UINT64_MAX: none). */
uint64_t homa_request_missing(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t now,
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
void homa_resend_response_start(struct homa_engine *eng, struct homa_rpc *rpc)
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
void homa_send_receiver_busy(struct homa_engine *eng, struct homa_rpc *rpc, uint64_t now)
{
    homa_ctl_simple(eng, HOMA_PKT_BUSY, rpc->id, &rpc->peer->addr, rpc->port->num, rpc->peer_port);
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
                homa_ctl_simple(eng, HOMA_PKT_NEED_ACK, rpc->id, &rpc->peer->addr, rpc->port->num,
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
            homa_send_receiver_busy(eng, rpc, now);
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
            homa_send_receiver_busy(eng, rpc, now);
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
                    homa_send_receiver_busy(eng, rpc, now);
                    told_at = now + resend_base + lag;
                }
            }
            if (told_at < quiet_at) at_least(next, told_at);
            /* Holes that persist while other data keeps flowing are asked
             * for without waiting for silence: a long message would
             * otherwise stall once its grant window is full of holes. */
            if (m->num_gaps > 0 && c->gap_resend_ticks > 0)
                at_least(next, homa_request_missing(eng, rpc, now, false));
        }
        return false;
    }
    if (m->active && (m->num_gaps > 0 || m->recv_end < m->granted)) {
        /* Data we granted is missing: loss recovery, not a liveness prod. */
        if (since_prod < resend_base) {
            at_least(next, rpc->last_prodded + resend_base + lag);
            return false;
        }
        homa_request_missing(eng, rpc, now, true);
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
        homa_resend_response_start(eng, rpc);
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
    if (!hlist_empty(&eng->mem_waitq)) homa_mem_wait_serve(eng, now);
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

/* ---------- the engine's timer entry points ---------- */

uint64_t homa_engine_next_deadline(const homa_engine *eng)
{
    uint64_t d = UINT64_MAX;
    /* Tick only while there is protocol work: an idle engine must not wake
     * its host every millisecond.  Idle peers are reaped on a later tick. */
    if (!hlist_empty(&eng->rpcs)) {
        d = eng->next_tick;
    } else if (eng->tomb_count > 0) {
        uint64_t exp = eng->tombs[eng->tomb_head].expires;
        d = exp > eng->next_tick ? exp : eng->next_tick;
    }
    if (eng->pacer_blocked && eng->nic_free_at > eng->cfg.max_nic_queue_ns) {
        uint64_t p = eng->nic_free_at - eng->cfg.max_nic_queue_ns;
        if (p < d) d = p;
    }
    return d;
}

void homa_engine_timer(homa_engine *eng, uint64_t now)
{
    if (!eng) return;
    eng->now = now;
    if (now < eng->next_tick) return;
    /* Called more than a tick late: this host, not its peers, was stalled
     * (descheduled, or the caller's lock holder preempted), and what the
     * peers sent meanwhile may be waiting in our own receive queue.  That
     * time must not count as their silence, or a local stall of a
     * timeout's length fails every RPC with them. */
    uint64_t late = 0;
    if (eng->next_tick != 0 && now - eng->next_tick > eng->cfg.tick_ns) {
        late = now - eng->next_tick - eng->cfg.tick_ns;
        eng->ctr.timer_stalls++;
        eng->ctr.stalled_ns += late;
    }
    /* How long packets now wait in our receive path (socket, kernel
     * backlog) before we read them: the longest wait since the last run,
     * or the previous estimate decaying at half speed.  A peer's answer
     * may be that long on its way to us after it reached this host, so
     * the timers count silence and intervals without it. */
    uint64_t elapsed = eng->next_tick != 0 ? now - (eng->next_tick - eng->cfg.tick_ns) : 0;
    uint64_t decayed = eng->lag > elapsed / 2 ? eng->lag - elapsed / 2 : 0;
    eng->lag = eng->in_lag > decayed ? eng->in_lag : decayed;
    eng->in_lag = 0;
    uint64_t lag_max = (uint64_t)eng->cfg.timeout_ticks * eng->cfg.tick_ns / 4;
    if (eng->lag > lag_max) eng->lag = lag_max;
    if (eng->lag >= eng->cfg.tick_ns) eng->ctr.input_stalls++;
    eng->next_tick = now + eng->cfg.tick_ns;
    eng->ticks++;
    /* (homa_timer_run forgives the peers and their ports the lateness.) */
    homa_timer_run(eng, now, late);
    homa_tombs_expire(eng, now);
    homa_peers_reap(eng, now);
    homa_notify_tx(eng);
}
