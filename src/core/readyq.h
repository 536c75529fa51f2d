/* Messages ready to be received, and the one rule that decides which of
 * them a receive takes.  The engine keeps one queue per port (port.c,
 * engine.c's homa_engine_recv); the homad client keeps one per socket for
 * the messages homad delivered (src/rt/homad_client.c).  Both pick with
 * homa_readyq_first, so a receive means the same in every mode:
 *
 *   - a receive for one RPC id takes that client RPC's response once it is
 *     ready (found through the RPC's own record, not through this queue);
 *   - otherwise it takes the oldest ready message among the kinds it asks
 *     for: HOMA_RECV_REQUEST, HOMA_RECV_RESPONSE, or both (HOMA_RECV_ANY),
 *     oldest meaning first to become ready.
 *
 * Requests and responses wait in two FIFOs and every message carries the
 * sequence number of its arrival, so taking the oldest of one kind or of
 * both is O(1), however many of the other kind wait. */
#ifndef HOMA_CORE_READYQ_H
#define HOMA_CORE_READYQ_H

#include <stdbool.h>
#include <stdint.h>

#include <homa/engine.h>

#include "list.h"

struct homa_readyq_node {
    struct hlist link; /* in q->fifo[0] (requests) or q->fifo[1] (responses) */
    uint64_t seq;
};

struct homa_readyq {
    struct hlist fifo[2];
    uint64_t next_seq;
};

static inline void homa_readyq_init(struct homa_readyq *q)
{
    hlist_init(&q->fifo[0]);
    hlist_init(&q->fifo[1]);
    q->next_seq = 0;
}

static inline void homa_readyq_node_init(struct homa_readyq_node *n)
{
    hlist_init(&n->link);
}

static inline bool homa_readyq_linked(const struct homa_readyq_node *n)
{
    return hlist_linked(&n->link);
}

/* Queues a message that became ready (at the tail of its kind). */
static inline void homa_readyq_push(struct homa_readyq *q, struct homa_readyq_node *n,
                                    bool is_request)
{
    n->seq = q->next_seq++;
    hlist_add_tail(&q->fifo[is_request ? 0 : 1], &n->link);
}

/* Takes n out of its queue (harmless if it is in none). */
static inline void homa_readyq_remove(struct homa_readyq_node *n)
{
    hlist_del(&n->link);
}

/* The message a receive with `flags` (HOMA_RECV_REQUEST, _RESPONSE or
 * _ANY) takes: the oldest of the kinds asked for; NULL if none waits. */
static inline struct homa_readyq_node *homa_readyq_first(const struct homa_readyq *q,
                                                         unsigned flags)
{
    struct homa_readyq_node *rq = NULL, *rs = NULL;
    if ((flags & HOMA_RECV_REQUEST) && !hlist_empty(&q->fifo[0]))
        rq = HOMA_CONTAINER(q->fifo[0].next, struct homa_readyq_node, link);
    if ((flags & HOMA_RECV_RESPONSE) && !hlist_empty(&q->fifo[1]))
        rs = HOMA_CONTAINER(q->fifo[1].next, struct homa_readyq_node, link);
    if (rq == NULL) return rs;
    if (rs == NULL) return rq;
    return rq->seq < rs->seq ? rq : rs;
}

#endif
