/* The engine's one hash table: chained, intrusive (an element embeds a
 * struct homa_hnode), a power-of-two number of buckets, the caller's
 * 64-bit hash picks the bucket.  Every table of the engine uses it: client
 * and server RPCs (rpc.c), peers (peer.c), ports (port.c) and tombstones
 * (rpc.c).  The table never compares keys: a lookup walks the bucket of
 * the hash and the caller checks each element it meets, so one element
 * type may carry any key.
 *
 * Order is part of the contract: an element joins the head of its bucket,
 * and growing walks the old buckets in order, each from head to tail,
 * pushing every element onto the head of its new bucket.  A walk over the
 * whole table (buckets b[0..nb-1], each by ->next) therefore visits
 * elements in an order that
 * depends only on the sequence of inserts and removals, which keeps the
 * engine deterministic (the simulator's output is byte-identical for a
 * seed). */
#ifndef HOMA_CORE_HASH_H
#define HOMA_CORE_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <homa/engine.h>

struct homa_hnode {
    struct homa_hnode *next;
};

struct homa_htab {
    struct homa_hnode **b;
    size_t nb; /* buckets, a power of two */
    size_t n;  /* elements */
};

/* Allocates nb buckets (a power of two).  0 or HOMA_ERR_NOMEM. */
int homa_htab_init(struct homa_htab *t, size_t nb);
/* Frees the bucket array (not the elements). */
void homa_htab_destroy(struct homa_htab *t);
/* The first element of hash h's bucket (NULL if empty); walk on with ->next. */
static inline struct homa_hnode *homa_htab_first(const struct homa_htab *t, uint64_t h)
{
    return t->b[h & (t->nb - 1)];
}
/* Inserts n under hash h (at the head of its bucket). */
static inline void homa_htab_add(struct homa_htab *t, struct homa_hnode *n, uint64_t h)
{
    struct homa_hnode **head = &t->b[h & (t->nb - 1)];
    n->next = *head;
    *head = n;
    t->n++;
}

/* Removes n, inserted under hash h; false if it is not there. */
static inline bool homa_htab_del(struct homa_htab *t, struct homa_hnode *n, uint64_t h)
{
    for (struct homa_hnode **pp = &t->b[h & (t->nb - 1)]; *pp; pp = &(*pp)->next) {
        if (*pp == n) {
            *pp = n->next;
            t->n--;
            return true;
        }
    }
    return false;
}

/* Doubles the buckets (key(n) gives an element's hash); out of memory,
 * the table stays as it is (longer chains). */
void homa_htab_grow(struct homa_htab *t, uint64_t (*key)(const struct homa_hnode *n));

/* Grows the table when it holds as many elements as buckets: call before
 * an insert. */
static inline void homa_htab_grow_if_full(struct homa_htab *t,
                                          uint64_t (*key)(const struct homa_hnode *n))
{
    if (t->n >= t->nb) homa_htab_grow(t, key);
}

/* ---- hash functions of the engine's keys ---- */
static inline uint64_t homa_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static inline uint64_t homa_addr_hash(const homa_addr *a)
{
    uint64_t lo, hi;
    memcpy(&lo, a->bytes, 8);
    memcpy(&hi, a->bytes + 8, 8);
    return homa_mix64(lo ^ homa_mix64(hi));
}

static inline bool homa_addr_eq(const homa_addr *a, const homa_addr *b)
{
    return memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

/* A server RPC (and its tombstone) is known by id, client address and
 * client port: server ids are unique per client only. */
static inline uint64_t homa_server_key(uint64_t id, const homa_addr *a, uint16_t port)
{
    return homa_mix64(id ^ homa_addr_hash(a) ^ ((uint64_t)port << 48));
}

#endif
