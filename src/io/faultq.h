/* The queue of packets held back by fault injection (delay, jitter,
 * reorder), shared by the UDP and raw drivers on both the send and the
 * receive path.
 *
 * The queue owns a copy of each held packet.  A packet leaves when its due
 * time has come or, if it was reordered, when `depth` later packets have
 * passed (whichever is first); packets released together leave oldest
 * first, so a reordered packet is overtaken only by the packets that
 * passed, not by younger held ones.  A released copy is handed to the
 * caller's emit function and stays valid until homa_faultq_reclaim(): a
 * driver keeps it while a batch being built (or packets returned by
 * recv()) still point at its bytes.
 *
 * One thread owns a queue (the sender or the receiver); only
 * homa_faultq_next_deadline() may be called from other threads. */
#ifndef HOMA_IO_FAULTQ_H
#define HOMA_IO_FAULTQ_H

#include <stddef.h>
#include <stdint.h>

#include <homa/homa.h>

/* A held packet: where it goes (or came from) and its bytes. */
typedef struct homa_faultq_pkt {
    struct homa_faultq_pkt *next;
    uint64_t due;     /* released at this time (caller's clock, ns) at the latest */
    uint32_t wait;    /* reordered: packets still to pass; 0 = held by time only */
    homa_addr addr;   /* destination (send) or source (receive) */
    uint16_t port;    /* its Homa port */
    uint8_t tos;      /* IP TOS / traffic class */
    uint32_t hdr_len; /* the first part's length at hold time (a header) */
    uint32_t len;     /* bytes in data */
    uint8_t data[];
} homa_faultq_pkt;

typedef struct homa_faultq {
    homa_faultq_pkt *held;     /* oldest first */
    homa_faultq_pkt *released; /* handed out, freed by reclaim */
    int n;                     /* packets in held */
    int max_pkts;              /* bound on n */
    size_t bytes;              /* packet bytes in held */
    size_t max_bytes;          /* bound on bytes; 0 = none */
    uint64_t due;              /* earliest due time in held (atomic) */
} homa_faultq;

/* Called for each released packet, in release order. */
typedef void (*homa_faultq_emit_fn)(void *ctx, const homa_faultq_pkt *p);

/* An empty queue holding at most max_pkts packets and (if max_bytes is
 * not 0) max_bytes bytes of packets. */
void homa_faultq_init(homa_faultq *q, int max_pkts, size_t max_bytes);
/* Holds a copy of the packet a[0..alen) + b[0..blen) (b may be NULL when
 * blen is 0) until `due`, or, if depth > 0, until depth later packets have
 * passed (homa_faultq_release with after_pass), whichever comes first.
 * Returns 0, or HOMA_ERR_NOMEM when the queue is at its bound or the copy
 * cannot be allocated: the caller then sends the packet on unheld. */
int homa_faultq_hold(homa_faultq *q, uint64_t due, uint32_t depth, const homa_addr *addr,
                     uint16_t port, uint8_t tos, const uint8_t *a, size_t alen, const uint8_t *b,
                     size_t blen);
/* Releases, oldest first, what is due at `now` and, if after_pass (one
 * packet has just passed), the reordered packets that have now been
 * overtaken by enough packets.  Each goes to emit(ctx, p) and then to the
 * released list.  emit may call homa_faultq_reclaim() (the packet being
 * emitted is not on the list yet) but nothing else on q.  Returns the
 * number released. */
int homa_faultq_release(homa_faultq *q, uint64_t now, int after_pass, homa_faultq_emit_fn emit,
                        void *ctx);
/* The earliest due time of a held packet; UINT64_MAX if none.  Any thread. */
uint64_t homa_faultq_next_deadline(const homa_faultq *q);
/* The number of packets held. */
static inline int homa_faultq_count(const homa_faultq *q)
{
    return q->n;
}
/* Frees the released copies (their bytes are no longer referenced). */
void homa_faultq_reclaim(homa_faultq *q);
/* Frees everything, held and released; q is empty afterwards. */
void homa_faultq_free(homa_faultq *q);

#endif
