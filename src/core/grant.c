/* Receiver-side scheduling: which incoming messages get grants, how much,
 * and at what priority.
 *
 * Messages that still need grants sit in eng->grantable sorted by their
 * scheduling class (highest first, homa_engine_port_set_class), then by
 * bytes still to receive (SRPT), oldest first on ties.  The active set is the
 * first max_overcommit of them, taking at most one message per sender (a
 * sender can only transmit one message at a time at full speed, so granting
 * two of its messages would waste the overcommitment).  Each active message
 * is kept grant_window bytes ahead of the furthest byte that has arrived,
 * as long as the total
 * of granted-but-unreceived bytes stays within max_incoming.  A share of
 * grant_fifo_permille of the granted bytes goes to the oldest message so
 * that long messages cannot starve. */
#include <string.h>

#include "internal.h"

#define GRANT_SCAN_LIMIT 256 /* bound on list entries examined per check */

static inline uint32_t in_remaining(const struct homa_msgin *m)
{
    return m->length - m->received;
}

/* Higher scheduling class first, then SRPT, then older. */
static bool before(const struct homa_rpc *a, const struct homa_rpc *b)
{
    if (a->sched_class != b->sched_class) return a->sched_class > b->sched_class;
    uint32_t ra = in_remaining(&a->in), rb = in_remaining(&b->in);
    return ra < rb || (ra == rb && a->birth < b->birth);
}

void homa_grant_add(struct homa_engine *eng, struct homa_rpc *rpc)
{
    if (hlist_linked(&rpc->grant_node) || rpc->in.granted >= rpc->in.length) return;
    /* Search from the tail: new messages are usually long and go last. */
    struct hlist *pos = eng->grantable.prev;
    while (pos != &eng->grantable) {
        struct homa_rpc *o = HOMA_CONTAINER(pos, struct homa_rpc, grant_node);
        if (!before(rpc, o)) break;
        pos = pos->prev;
    }
    hlist_insert_before(pos->next, &rpc->grant_node);
}

void homa_grant_remove(struct homa_engine *eng, struct homa_rpc *rpc)
{
    (void)eng;
    hlist_del(&rpc->grant_node);
}

/* Data arrived for rpc: its remaining bytes shrank, so it can only move
 * towards the head. */
void homa_grant_update(struct homa_engine *eng, struct homa_rpc *rpc)
{
    if (!hlist_linked(&rpc->grant_node)) return;
    struct hlist *pos = rpc->grant_node.prev;
    if (pos == &eng->grantable) return;
    if (!before(rpc, HOMA_CONTAINER(pos, struct homa_rpc, grant_node))) return;
    hlist_del(&rpc->grant_node);
    while (pos != &eng->grantable && before(rpc, HOMA_CONTAINER(pos, struct homa_rpc, grant_node)))
        pos = pos->prev;
    hlist_insert_before(pos->next, &rpc->grant_node);
}

uint8_t homa_grant_prio_for_rank(const struct homa_engine *eng, int rank, int num_active)
{
    int max = eng->max_sched_prio;
    int prio = max - rank;
    /* With fewer active messages than levels, use the lowest levels and keep
     * the upper ones free for messages that arrive later and are shorter. */
    int extra = max + 1 - num_active;
    if (extra > 0) prio -= extra;
    return (uint8_t)(prio < 0 ? 0 : prio);
}

static void send_grant(struct homa_engine *eng, struct homa_rpc *rpc)
{
    struct homa_wire_pkt pkt;
    memset(&pkt, 0, sizeof(pkt));
    pkt.type = HOMA_PKT_GRANT;
    pkt.sender_id = rpc->id;
    pkt.u.grant.offset = rpc->in.granted;
    pkt.u.grant.priority = rpc->in.prio;
    rpc->last_told = eng->now;
    homa_ctl_queue(eng, rpc, &rpc->peer->addr, rpc->port ? rpc->port->num : 0, rpc->peer_port,
                   &pkt);
}

/* Raises rpc's grant by up to inc bytes; returns the bytes granted. */
static uint32_t grant_more(struct homa_engine *eng, struct homa_rpc *rpc, uint32_t inc,
                           uint8_t prio)
{
    struct homa_msgin *m = &rpc->in;
    if (inc > m->length - m->granted) inc = m->length - m->granted;
    if (inc == 0) return 0;
    /* While it had all we granted, the sender's silence was ours. */
    if (m->received >= m->granted) homa_rpc_heard(eng, rpc, eng->now);
    homa_timer_soon(eng, rpc);
    m->granted += inc;
    m->prio = prio;
    eng->ctr.incoming_bytes += inc;
    homa_gauge_max(&eng->ctr.incoming_peak, eng->ctr.incoming_bytes);
    eng->ctr.granted_bytes += inc;
    send_grant(eng, rpc);
    if (m->granted >= m->length) homa_grant_remove(eng, rpc);
    return inc;
}

static void fifo_grant(struct homa_engine *eng)
{
    struct homa_rpc *oldest = NULL;
    int scanned = 0;
    for (struct hlist *n = eng->grantable.next; n != &eng->grantable && scanned < GRANT_SCAN_LIMIT;
         n = n->next, scanned++) {
        struct homa_rpc *r = HOMA_CONTAINER(n, struct homa_rpc, grant_node);
        if (!oldest || r->birth < oldest->birth) oldest = r;
    }
    if (!oldest) return;
    uint64_t charge = (uint64_t)eng->cfg.fifo_grant_increment *
                      (1000 - eng->cfg.grant_fifo_permille) / eng->cfg.grant_fifo_permille;
    if (oldest->in.granted - oldest->in.received >= eng->cfg.fifo_grant_increment) {
        /* A FIFO grant's worth of what we granted it has not arrived: its
         * sender is busy with shorter messages.  Granting more would pile
         * up bytes it cannot send now, hold max_incoming from the messages
         * that can, and, once it does send, flood our downlink.  This
         * turn's share is skipped. */
        eng->ctr.fifo_skipped++;
        eng->nonfifo_left += (int64_t)charge;
        return;
    }
    uint64_t room = eng->cfg.max_incoming > eng->ctr.incoming_bytes
                        ? eng->cfg.max_incoming - eng->ctr.incoming_bytes
                        : 0;
    /* Whole packets, as every grant: a partial last packet would end the
     * sender's GSO batch early and cost a packet of its own. */
    uint32_t seg = oldest->in.seg_size ? oldest->in.seg_size : oldest->peer->max_payload;
    uint32_t inc = (eng->cfg.fifo_grant_increment + seg - 1) / seg * seg;
    if (inc > room) return; /* try again when the pipe has drained */
    if (grant_more(eng, oldest, inc, eng->max_sched_prio) > 0) eng->ctr.fifo_grants++;
    eng->nonfifo_left += (int64_t)charge;
}

void homa_grant_check(struct homa_engine *eng)
{
    if (hlist_empty(&eng->grantable)) return;
    struct homa_rpc *active[64];
    int n_active = 0;
    int scanned = 0;
    for (struct hlist *n = eng->grantable.next;
         n != &eng->grantable && n_active < (int)eng->cfg.max_overcommit &&
         scanned < GRANT_SCAN_LIMIT;
         n = n->next, scanned++) {
        struct homa_rpc *r = HOMA_CONTAINER(n, struct homa_rpc, grant_node);
        bool dup = false;
        for (int i = 0; i < n_active; i++)
            if (active[i]->peer == r->peer) {
                dup = true;
                break;
            }
        if (!dup) active[n_active++] = r;
    }
    for (int rank = 0; rank < n_active; rank++) {
        struct homa_rpc *r = active[rank];
        struct homa_msgin *m = &r->in;
        uint8_t prio = homa_grant_prio_for_rank(eng, rank, n_active);
        uint32_t seg = m->seg_size ? m->seg_size : r->peer->max_payload;
        /* The window runs from the highest byte received, not from the
         * count received: lost packets (holes, repaired by RESEND) are not
         * in flight, and counting them would close the window after
         * grant_window bytes of losses and stall the message on timers. */
        uint64_t target = (uint64_t)m->recv_end + eng->cfg.grant_window;
        target = (target + seg - 1) / seg * seg; /* whole packets only */
        if (target > m->length) target = m->length;
        if (target <= m->granted) {
            /* HOMA_PRIO_NONE: no scheduled grant yet, so the sender is
             * still in its unscheduled bytes and ignores the priority. */
            if (prio != m->prio && m->prio != HOMA_PRIO_NONE) {
                /* rank changed: tell the sender its new priority */
                m->prio = prio;
                send_grant(eng, r);
            }
            continue;
        }
        uint64_t room = eng->cfg.max_incoming > eng->ctr.incoming_bytes
                            ? eng->cfg.max_incoming - eng->ctr.incoming_bytes
                            : 0;
        uint32_t inc = (uint32_t)(target - m->granted);
        /* Batch grants: a GRANT per DATA packet doubles the packet count
         * for little gain, so with a window of 16 packets or more wait until
         * a quarter of it can be granted (smaller windows would lose
         * throughput), unless this finishes the message or the
         * sender has nothing left to send (then it would go idle). */
        uint32_t batch = eng->cfg.grant_window >= 16 * seg ? eng->cfg.grant_window / 4 : seg;
        if (inc < batch && target < m->length && m->granted > m->received + seg) {
            if (prio != m->prio && m->prio != HOMA_PRIO_NONE) {
                m->prio = prio;
                send_grant(eng, r);
            }
            continue;
        }
        if (inc > room) {
            /* Partial grants smaller than a packet only add overhead. */
            if (room < seg) break;
            inc = (uint32_t)room;
        }
        uint32_t given = grant_more(eng, r, inc, prio);
        eng->nonfifo_left -= given;
    }
    if (eng->cfg.grant_fifo_permille > 0 && eng->nonfifo_left <= 0) fifo_grant(eng);
}
