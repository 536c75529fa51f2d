/* Transmission: the sender side of SRPT and the pull interface.
 *
 * Outgoing messages that may send something right now (granted bytes not yet
 * sent, or ranges a RESEND asked for) sit in eng->sendq, sorted by bytes
 * left to transmit, shortest first.  A pull walks it from its head, so the
 * decision of what goes next is made at the moment the driver has room.  A
 * message that sent a packet moves if it now has fewer bytes left than the
 * one before it (homa_out_update).
 *
 * Ranges a RESEND asked for go before all of that (eng->resending, oldest
 * first): the receiver granted them and is waiting.  Under SRPT alone a
 * lost packet of a long message would wait behind every shorter message the
 * sender has, at 90 % load for longer than the receiver's timeout.
 *
 * A share of the bytes (grant_fifo_permille, as for the receiver's grants)
 * goes to the oldest message that can send instead (eng->send_fifo, in the
 * order messages started): under SRPT alone a long message waits as long
 * as shorter ones keep coming, and the receiver's FIFO grants cannot help
 * a message whose first byte never left (through homad, one process's
 * stream of 100 KB RPCs held another's 1 MB RPC for over 3 s). */
#include <string.h>

#include "internal.h"

static inline uint32_t remaining(const struct homa_msgout *m)
{
    return m->length - m->next_xmit;
}

bool homa_out_done(const struct homa_msgout *m)
{
    return m->next_xmit >= m->length && !m->empty_pending && m->num_rtx == 0;
}

static bool can_send(const struct homa_msgout *m)
{
    return m->active && (m->num_rtx > 0 || m->empty_pending ||
                         (m->next_xmit < m->granted && m->next_xmit < m->length));
}

uint8_t homa_unsched_prio(const struct homa_engine *eng, const uint32_t *cutoffs, uint32_t length)
{
    for (int i = (int)eng->cfg.num_priorities - 1; i > 0; i--)
        if (cutoffs[i] >= length) return (uint8_t)i;
    return 0;
}

/* True if o goes before rpc in SRPT order (fewer bytes left, then older). */
static bool sends_before(const struct homa_rpc *o, const struct homa_rpc *rpc, uint32_t rem)
{
    uint32_t orem = remaining(&o->out);
    return orem < rem || (orem == rem && o->birth <= rpc->birth);
}

/* The send queue.  One sorted list would cost a walk through it for every
 * insert: with thousands of requests waiting (a client behind its offered
 * load, a burst of retransmissions) those walks ate half the client's CPU,
 * which made the backlog grow faster: a collapse that fed itself.  So the
 * queue is bucketed by bytes left, log-linear (exact below 1,024 bytes,
 * where most messages of W1 and W2 are; 32 buckets per power of two above),
 * each bucket sorted, with a bit per non-empty bucket: an insert searches
 * one bucket of near-equal sizes (the youngest goes last, an old restarted
 * request first: both found in a step), and finding the next message is a
 * find-first-set. */
static inline unsigned sendq_bucket(const struct homa_rpc *rpc, uint32_t rem)
{
    unsigned base = (HOMA_SCHED_CLASSES - 1u - rpc->sched_class) * HOMA_SENDQ_CLASS_BUCKETS;
    if (rem < 1024) return base + rem;
    unsigned e = 31u - (unsigned)__builtin_clz(rem); /* 10..31 */
    return base + 1024u + (e - 10u) * 32u + ((rem >> (e - 5u)) & 31u);
}

/* The first queued message in bucket b or a later one, or NULL. */
static struct homa_rpc *sendq_first_from(const struct homa_engine *eng, unsigned b)
{
    for (unsigned w = b / 64; w < HOMA_SENDQ_BUCKETS / 64; w++) {
        uint64_t bits = eng->sendq_bits[w];
        if (w == b / 64) bits &= ~0ull << (b % 64);
        if (bits) {
            unsigned i = w * 64 + (unsigned)__builtin_ctzll(bits);
            return HOMA_CONTAINER(eng->sendq[i].next, struct homa_rpc, send_node);
        }
    }
    return NULL;
}

static struct homa_rpc *sendq_next(const struct homa_engine *eng, const struct homa_rpc *rpc)
{
    const struct hlist *n = rpc->send_node.next;
    if (n != &eng->sendq[rpc->send_bucket]) return HOMA_CONTAINER(n, struct homa_rpc, send_node);
    return sendq_first_from(eng, rpc->send_bucket + 1u);
}

uint32_t homa_out_queued(const struct homa_engine *eng)
{
    return eng->sendq_len;
}

static void sendq_del(struct homa_engine *eng, struct homa_rpc *rpc)
{
    if (!hlist_linked(&rpc->send_node)) return;
    unsigned b = rpc->send_bucket;
    hlist_del(&rpc->send_node);
    if (hlist_empty(&eng->sendq[b])) eng->sendq_bits[b / 64] &= ~(1ull << (b % 64));
    eng->sendq_len--;
}

/* Inserts rpc into one bucket's list in SRPT order, searching from both
 * ends at once: a new message is usually the youngest of its size (its
 * place is near the tail) or shorter than those queued (near the head). */
static void bucket_insert(struct homa_engine *eng, struct hlist *end, struct homa_rpc *rpc,
                          uint32_t rem)
{
    struct hlist *h = end->next, *t = end->prev;
    for (;; eng->sendq_steps++) {
        if (h == end || !sends_before(HOMA_CONTAINER(h, struct homa_rpc, send_node), rpc, rem)) {
            hlist_insert_before(h, &rpc->send_node);
            return;
        }
        if (sends_before(HOMA_CONTAINER(t, struct homa_rpc, send_node), rpc, rem)) {
            hlist_insert_before(t->next, &rpc->send_node);
            return;
        }
        h = h->next;
        t = t->prev;
    }
}

/* True if rpc would sit in an exact bucket (all of one size) and has sent
 * nothing yet: new, or starting over (a restarted request).  Such a message
 * is placed once, when it is queued, and does not move until it sends. */
static bool sendq_returning(const struct homa_rpc *rpc, uint32_t rem)
{
    return rem < 1024 && rpc->out.next_xmit == 0;
}

static void sendq_insert(struct homa_engine *eng, struct homa_rpc *rpc)
{
    uint32_t rem = remaining(&rpc->out);
    unsigned b = sendq_bucket(rpc, rem);
    struct hlist *q = &eng->sendq[b];
    /* Nothing left but retransmissions (or an empty message): all alike,
     * first come first served.  Ordered by birth, an old message asked
     * for a lost packet had to walk past every younger one. */
    if (rem == 0) {
        hlist_add_tail(q, &rpc->send_node);
    } else if (sendq_returning(rpc, rem) && !hlist_empty(q) &&
               !sends_before(HOMA_CONTAINER(q->prev, struct homa_rpc, send_node), rpc, rem)) {
        /* A request restarted after RPC_UNKNOWN goes before the others of
         * its size, which are younger or have waited less since their
         * start: it has already lost a round trip.  Placed by birth it
         * landed in the middle of its bucket, and a client behind its
         * offered load (thousands of requests of each W1 size waiting)
         * stepped past up to 13 entries per insert on average, each a
         * cache miss: 8 % of the CPU time of client and server together,
         * W1 at 0.10 Gb/s with 20 % loss. */
        hlist_insert_before(q->next, &rpc->send_node);
    } else {
        bucket_insert(eng, q, rpc, rem);
    }
    rpc->send_bucket = (uint16_t)b;
    eng->sendq_bits[b / 64] |= 1ull << (b % 64);
    eng->sendq_len++;
}

/* True if a queued message is no longer where SRPT order puts it: it sent
 * a packet, so it has fewer bytes left than its predecessor may have. */
static bool sendq_misplaced(const struct homa_engine *eng, const struct homa_rpc *rpc)
{
    uint32_t rem = remaining(&rpc->out);
    if (sendq_bucket(rpc, rem) != rpc->send_bucket) return true;
    if (rem == 0) return false;                  /* bucket 0 is FIFO */
    if (sendq_returning(rpc, rem)) return false; /* placed at insert, has not moved */
    const struct hlist *p = rpc->send_node.prev;
    return p != &eng->sendq[rpc->send_bucket] &&
           !sends_before(HOMA_CONTAINER(p, struct homa_rpc, send_node), rpc, rem);
}

/* Puts the RPC in or out of the send queue and the resending list to match
 * its state. */
void homa_out_update(struct homa_engine *eng, struct homa_rpc *rpc)
{
    bool want = can_send(&rpc->out);
    bool in = hlist_linked(&rpc->send_node);
    if (want && in && sendq_misplaced(eng, rpc)) {
        sendq_del(eng, rpc);
        in = false;
    }
    if (want && !in)
        sendq_insert(eng, rpc);
    else if (!want && in)
        sendq_del(eng, rpc);
    bool rtx = rpc->out.active && rpc->out.num_rtx > 0;
    if (rtx && !hlist_linked(&rpc->rtx_node))
        hlist_add_tail(&eng->resending, &rpc->rtx_node);
    else if (!rtx)
        hlist_del(&rpc->rtx_node);
}

void homa_out_remove(struct homa_engine *eng, struct homa_rpc *rpc)
{
    sendq_del(eng, rpc);
    hlist_del(&rpc->fifo_node);
    hlist_del(&rpc->rtx_node);
    rpc->out.num_rtx = 0;
    rpc->out.empty_pending = false;
}

/* A message with bytes never sent joins the FIFO of those (oldest first). */
static void fifo_join(struct homa_engine *eng, struct homa_rpc *rpc)
{
    if (rpc->out.length > 0) hlist_add_tail(&eng->send_fifo, &rpc->fifo_node);
}

void homa_out_restart(struct homa_engine *eng, struct homa_rpc *rpc)
{
    struct homa_msgout *m = &rpc->out;
    homa_out_remove(eng, rpc);
    m->next_xmit = 0;
    m->granted = m->unsched;
    m->num_marks = 0;
    m->num_rsent = 0;
    m->empty_pending = (m->length == 0);
    fifo_join(eng, rpc);
}

void homa_out_start(struct homa_engine *eng, struct homa_rpc *rpc, uint8_t *buf, uint32_t len)
{
    struct homa_msgout *m = &rpc->out;
    homa_out_remove(eng, rpc);
    homa_free_outbuf(eng, m->buf, m->length);
    memset(m, 0, sizeof(*m));
    m->buf = buf;
    m->length = len;
    m->unsched = len < eng->cfg.unsched_bytes ? len : eng->cfg.unsched_bytes;
    m->granted = m->unsched;
    m->unsched_prio = homa_unsched_prio(eng, rpc->peer->cutoffs, len);
    m->sched_prio = 0;
    m->active = true;
    m->empty_pending = (len == 0);
    fifo_join(eng, rpc);
    homa_out_update(eng, rpc);
}

/* Queues [start, end) for retransmission, merging with queued ranges. */
void homa_out_add_rtx(struct homa_engine *eng, struct homa_rpc *rpc, uint32_t start, uint32_t end,
                      uint8_t prio)
{
    struct homa_msgout *m = &rpc->out;
    if (m->length == 0) {
        m->empty_pending = true;
        homa_out_update(eng, rpc);
        return;
    }
    if (start >= end) return;
    for (uint32_t i = 0; i < m->num_rtx; i++) {
        struct homa_rtx *r = &m->rtx[i];
        if (start <= r->end && end >= r->start) {
            if (start < r->start) r->start = start;
            if (end > r->end) r->end = end;
            r->prio = prio;
            homa_out_update(eng, rpc);
            return;
        }
    }
    /* Full: ignore it.  Widening a range to take it in resent everything in
     * between (5 % loss on 1 MB messages: 5 bytes resent per byte lost); the
     * receiver asks again for what is still missing. */
    if (m->num_rtx == HOMA_MAX_RTX) return;
    m->rtx[m->num_rtx].start = start;
    m->rtx[m->num_rtx].end = end;
    m->rtx[m->num_rtx].prio = prio;
    m->num_rtx++;
    homa_out_update(eng, rpc);
}

/* Transmissions closer together than this share one mark (a RESEND that
 * arrives within one is treated as arriving after it: resent if asked). */
static uint64_t mark_gran(const struct homa_engine *eng)
{
    return eng->cfg.tick_ns / 2;
}

static void note_first_xmit(struct homa_engine *eng, struct homa_msgout *m, uint32_t start)
{
    uint64_t now = eng->now;
    if (m->num_marks > 0 && now - m->marks[m->num_marks - 1].at < mark_gran(eng)) return;
    if (m->num_marks == HOMA_XMIT_MARKS) {
        memmove(&m->marks[0], &m->marks[1], (HOMA_XMIT_MARKS - 1) * sizeof(m->marks[0]));
        m->num_marks--;
    }
    m->marks[m->num_marks].off = start;
    m->marks[m->num_marks].at = now;
    m->num_marks++;
}

static void note_rtx(struct homa_engine *eng, struct homa_msgout *m, uint32_t start, uint32_t end)
{
    uint64_t now = eng->now;
    if (m->num_rsent > 0) {
        struct homa_rtx_sent *r = &m->rsent[m->num_rsent - 1];
        if (r->end == start && now - r->at < mark_gran(eng)) {
            r->end = end;
            r->at = now;
            return;
        }
    }
    if (m->num_rsent == HOMA_RTX_SENT) {
        memmove(&m->rsent[0], &m->rsent[1], (HOMA_RTX_SENT - 1) * sizeof(m->rsent[0]));
        m->num_rsent--;
    }
    m->rsent[m->num_rsent].start = start;
    m->rsent[m->num_rsent].end = end;
    m->rsent[m->num_rsent].at = now;
    m->num_rsent++;
}

/* The end of the bytes whose first transmission may have been at or
 * before `arrived` (a tie counts as before).  Where the marks cannot tell (a mark spans the moment,
 * or the history is gone), the bytes count as sent before: the cost of a wrong guess is a
 * retransmission too many, not a stall. */
static uint32_t sent_before(const struct homa_msgout *m, uint64_t arrived)
{
    if (m->num_marks == 0) return m->next_xmit;
    if (arrived < m->marks[0].at) return m->marks[0].off;
    uint32_t k = m->num_marks - 1;
    while (m->marks[k].at > arrived)
        k--;
    return k == (uint32_t)m->num_marks - 1 ? m->next_xmit : m->marks[k + 1].off;
}

/* Queues [start, end) less the ranges retransmitted after `arrived`
 * (rsent[from..]); returns the bytes queued. */
static uint32_t resend_unless_fresh(struct homa_engine *eng, struct homa_rpc *rpc, uint32_t start,
                                    uint32_t end, uint8_t prio, uint64_t arrived, uint32_t from)
{
    const struct homa_msgout *m = &rpc->out;
    if (start >= end) return 0;
    for (uint32_t i = from; i < m->num_rsent; i++) {
        const struct homa_rtx_sent *r = &m->rsent[i];
        if (r->at <= arrived || r->end <= start || r->start >= end) continue;
        uint32_t rs = r->start, re = r->end;
        return resend_unless_fresh(eng, rpc, start, rs > start ? rs : start, prio, arrived, i + 1) +
               resend_unless_fresh(eng, rpc, re < end ? re : end, end, prio, arrived, i + 1);
    }
    homa_out_add_rtx(eng, rpc, start, end, prio);
    return end - start;
}

uint32_t homa_out_resend(struct homa_engine *eng, struct homa_rpc *rpc, uint32_t start,
                         uint32_t end, uint8_t prio, uint64_t arrived)
{
    uint32_t b = sent_before(&rpc->out, arrived);
    if (end > b) end = b;
    return resend_unless_fresh(eng, rpc, start, end, prio, arrived, 0);
}

/* What a packet costs on the link: the IP/UDP headers and framing count as
 * much as the payload (a 1,500-byte MTU adds 6 % to small packets). */
static uint32_t wire_bytes(const struct homa_engine *eng, uint32_t hdr, uint32_t payload)
{
    return hdr + payload + eng->cfg.pkt_overhead;
}

static void pacer_account(struct homa_engine *eng, uint64_t now, uint32_t bytes)
{
    if (eng->cfg.link_bps == 0) return;
    /* bytes x ns-per-byte in 16.16 fixed point, split so it cannot
     * overflow: a multiply instead of a 64-bit division per packet. */
    uint64_t q = eng->pacer_q16;
    uint64_t t = (uint64_t)bytes * (q >> 16) + (((uint64_t)bytes * (q & 0xffff)) >> 16);
    if (eng->nic_free_at < now) eng->nic_free_at = now;
    eng->nic_free_at += t;
}

static bool pacer_blocks(const struct homa_engine *eng, uint64_t now)
{
    return eng->cfg.link_bps != 0 && eng->nic_free_at > now + eng->cfg.max_nic_queue_ns;
}

/* Takes one pending ack for the peer that belongs to local port `port`. */
static bool pop_ack(struct homa_peer *peer, uint16_t port, struct homa_wire_ack *ack)
{
    for (uint32_t i = 0; i < peer->num_acks; i++) {
        if (peer->acks[i].client_port == port) {
            ack->client_id = peer->acks[i].client_id;
            ack->server_port = peer->acks[i].server_port;
            peer->acks[i] = peer->acks[--peer->num_acks];
            return true;
        }
    }
    return false;
}

/* Builds the next DATA packet of rpc into *p. */
static void build_data(struct homa_engine *eng, struct homa_rpc *rpc, homa_pkt_out *p)
{
    struct homa_msgout *m = &rpc->out;
    uint32_t start, end;
    uint32_t seg = rpc->peer->max_payload;
    uint8_t prio;
    bool rtx = false;
    if (m->empty_pending) {
        start = end = 0;
        prio = m->unsched_prio;
        m->empty_pending = false;
        if (m->next_xmit < m->length) m->next_xmit = m->length;
    } else if (m->num_rtx > 0) {
        struct homa_rtx *r = &m->rtx[0];
        start = r->start;
        end = r->end - r->start > seg ? start + seg : r->end;
        prio = r->prio;
        rtx = true;
        note_rtx(eng, m, start, end);
        r->start = end;
        if (r->start >= r->end) {
            memmove(&m->rtx[0], &m->rtx[1], (m->num_rtx - 1) * sizeof(m->rtx[0]));
            m->num_rtx--;
        }
    } else {
        start = m->next_xmit;
        uint32_t limit = m->granted < m->length ? m->granted : m->length;
        end = limit - start > seg ? start + seg : limit;
        prio = start < m->unsched ? m->unsched_prio : m->sched_prio;
        note_first_xmit(eng, m, start);
        m->next_xmit = end;
    }
    if (rpc->prio_limit) {
        if (prio < rpc->prio_lo) prio = rpc->prio_lo;
        if (prio > rpc->prio_hi) prio = rpc->prio_hi;
    }

    struct homa_wire_pkt pkt;
    memset(&pkt, 0, sizeof(pkt));
    pkt.type = HOMA_PKT_DATA;
    pkt.sport = rpc->port->num;
    pkt.dport = rpc->peer_port;
    pkt.sender_id = rpc->id;
    pkt.u.data.message_length = m->length;
    pkt.u.data.incoming = m->granted < m->length ? m->granted : m->length;
    pkt.u.data.cutoff_version = rpc->peer->cutoff_version;
    pkt.u.data.retransmit = rtx ? 1 : 0;
    pkt.u.data.offset = start;
    if (pop_ack(rpc->peer, rpc->port->num, &pkt.u.data.ack)) eng->ctr.acks_piggybacked++;

    p->dst = rpc->peer->addr;
    p->dport = rpc->peer_port;
    p->sport = rpc->port->num;
    p->priority = prio;
    p->type = HOMA_PKT_DATA;
    p->hdr_len = (uint16_t)homa_wire_encode(&pkt, p->hdr);
    p->payload = m->buf + start;
    p->payload_len = end - start;

    eng->ctr.data_out++;
    eng->ctr.bytes_out += end - start;
    if (rtx) {
        eng->ctr.retransmit_pkts++;
        eng->ctr.retransmit_bytes += end - start;
    }
}

/* Emits rpc's next DATA packet into *p and updates the lists it is on
 * (a caller walking one must take the next entry first). */
static void send_one(struct homa_engine *eng, struct homa_rpc *rpc, homa_pkt_out *p, uint64_t now)
{
    build_data(eng, rpc, p);
    if (rpc->out.next_xmit >= rpc->out.length) hlist_del(&rpc->fifo_node);
    pacer_account(eng, now, wire_bytes(eng, p->hdr_len, p->payload_len));
    homa_out_update(eng, rpc);
    if (rpc->state == RPC_SERVER_OUTGOING && homa_out_done(&rpc->out))
        rpc->last_prodded = now; /* the whole response is out: the ack clock starts */
    /* A client's silence counts from its last transmission: the server
     * cannot answer a request before it has it (while the request waits in
     * our own queue, the silence is ours). */
    if (rpc->state == RPC_CLIENT_ACTIVE) {
        homa_rpc_heard(eng, rpc, now);
        if (rpc->req_out_at == 0 && rpc->out.next_xmit >= rpc->out.length) rpc->req_out_at = now;
    }
    homa_timer_soon(eng, rpc);
}

#define SEND_FIFO_SCAN 64 /* bound on send_fifo entries looked at per turn */

/* The FIFO turn (see the top of this file): the oldest message that can
 * send now, if it is not `head`, the one SRPT picks; NULL when there is
 * none among the first SEND_FIFO_SCAN (then the turn waits for another
 * period).  Also charges the credit for the turn either way. */
static struct homa_rpc *fifo_turn(struct homa_engine *eng, const struct homa_rpc *head)
{
    eng->send_fifo_credit += homa_send_fifo_period(eng);
    int scanned = 0;
    for (struct hlist *n = eng->send_fifo.next; n != &eng->send_fifo && scanned < SEND_FIFO_SCAN;
         n = n->next, scanned++) {
        struct homa_rpc *r = HOMA_CONTAINER(n, struct homa_rpc, fifo_node);
        if (!hlist_linked(&r->send_node)) continue; /* waiting for grants */
        return r == head ? NULL : r;
    }
    return NULL;
}

int homa_engine_pull(homa_engine *eng, uint64_t now, homa_pkt_out *out, int max)
{
    if (!eng || !out || max <= 0) return 0;
    eng->now = now;
    int n = 0;
    /* Control packets first: they are small and unblock other hosts. */
    while (n < max && eng->ctl_count > 0) {
        struct homa_ctl *c = &eng->ctl[eng->ctl_head];
        homa_pkt_out *p = &out[n++];
        p->dst = c->dst;
        p->dport = c->dport;
        p->sport = c->sport;
        p->priority = (uint8_t)(eng->cfg.num_priorities - 1);
        p->type = c->type;
        p->hdr_len = c->hdr_len;
        memcpy(p->hdr, c->hdr, c->hdr_len);
        p->payload = NULL;
        p->payload_len = 0;
        eng->ctl_head = (eng->ctl_head + 1) % HOMA_MAX_CTL_QUEUE;
        eng->ctl_count--;
        eng->ctl_seq++;
        pacer_account(eng, now, wire_bytes(eng, c->hdr_len, 0));
    }
    eng->pacer_blocked = false;
    struct hlist *pos = eng->resending.next;
    while (n < max && pos != &eng->resending) {
        struct homa_rpc *rpc = HOMA_CONTAINER(pos, struct homa_rpc, rtx_node);
        if (pacer_blocks(eng, now)) {
            eng->pacer_blocked = true;
            eng->ctr.pacer_stalls++;
            break;
        }
        struct hlist *next = pos->next;
        send_one(eng, rpc, &out[n++], now);
        if (!hlist_linked(&rpc->rtx_node)) pos = next;
    }
    struct homa_rpc *rpc = sendq_first_from(eng, 0);
    while (n < max && rpc) {
        struct homa_msgout *m = &rpc->out;
        if (pacer_blocks(eng, now) && m->length >= eng->cfg.pacer_bypass_bytes) {
            /* Short messages bypass the pacer; they sort first, so once we
             * meet a long one nothing further down may go either. */
            if (remaining(m) >= eng->cfg.pacer_bypass_bytes) {
                eng->pacer_blocked = true;
                eng->ctr.pacer_stalls++;
                break;
            }
            rpc = sendq_next(eng, rpc);
            continue;
        }
        if (eng->send_fifo_credit <= 0 && eng->cfg.grant_fifo_permille > 0 &&
            !pacer_blocks(eng, now)) {
            struct homa_rpc *old = fifo_turn(eng, rpc);
            if (old != NULL) {
                send_one(eng, old, &out[n++], now);
                eng->fifo_xmits++;
                continue; /* rpc is where it was: old came after it */
            }
        }
        struct homa_rpc *next = sendq_next(eng, rpc);
        send_one(eng, rpc, &out[n++], now);
        eng->send_fifo_credit -= out[n - 1].payload_len;
        /* Still queued: it goes on (it has the fewest bytes left of those
         * after it, and may have moved to an earlier bucket). */
        if (!hlist_linked(&rpc->send_node)) rpc = next;
    }
    if (n > 0) eng->tx_pins++;
    eng->ctr.pkts_out += (uint64_t)n;
    for (int i = 0; i < n; i++) {
        switch (out[i].type) {
        case HOMA_PKT_GRANT:
            eng->ctr.grant_out++;
            break;
        case HOMA_PKT_RESEND:
            eng->ctr.resend_out++;
            break;
        case HOMA_PKT_RPC_UNKNOWN:
            eng->ctr.unknown_out++;
            break;
        case HOMA_PKT_BUSY:
            eng->ctr.busy_out++;
            break;
        case HOMA_PKT_CUTOFFS:
            eng->ctr.cutoffs_out++;
            break;
        case HOMA_PKT_NEED_ACK:
            eng->ctr.need_ack_out++;
            break;
        case HOMA_PKT_ACK:
            eng->ctr.ack_out++;
            break;
        default:
            break;
        }
    }
    return n;
}
