/* Internals of the collectives layer (src/coll): the message header, the
 * reduction kernels and the per-call state shared by comm.c (transport loop,
 * communicator, rendezvous) and algo.c (the algorithms).  Only the public
 * API (homa/homa.h, homa/coll.h) is used below this layer. */
#ifndef HOMA_COLL_INTERNAL_H
#define HOMA_COLL_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <homa/coll.h>
#include <homa/homa.h>

/* ------------------------------------------------------------------------
 * float16 / bfloat16 conversion and reduction kernels (reduce.c)
 * ---------------------------------------------------------------------- */

/* IEEE binary16 <-> float32.  To-half rounds to nearest even; overflow
 * gives infinity, NaN stays NaN (made quiet, top payload bits kept). */
float homa_coll_f16_to_f32(uint16_t h);
uint16_t homa_coll_f32_to_f16(float f);
/* bfloat16 <-> float32, same rounding rules. */
float homa_coll_bf16_to_f32(uint16_t h);
uint16_t homa_coll_f32_to_bf16(float f);

/* dst[i] = a[i] op b[i] for i < n elements of dtype.  dst may be the same
 * pointer as a or b (but must not overlap them otherwise).  HOMA_AVG acts
 * as HOMA_SUM here: the division is homa_coll_avg_finish().  Pointers need
 * no alignment.  Integers wrap modulo 2^bits; float16/bfloat16 are combined
 * in float32 and rounded to nearest even; MAX/MIN return NaN if either
 * input is NaN.  Operand order matters only for NaN payloads and the sign
 * of zero in MAX/MIN, so callers pass the lower rank's value as a. */
void homa_coll_reduce(void *dst, const void *a, const void *b, size_t n, homa_dtype dtype,
                      homa_redop op);
/* 1: use only the portable kernels; 0: use CPU-specific ones (x86 F16C for
 * float16) when the CPU has them, the default.  For tests. */
void homa_coll_kernels_portable(int portable);
/* dst[i] = dst[i] / divisor: float types divide in float32 and round to
 * dtype; integers truncate toward zero. */
void homa_coll_avg_finish(void *dst, size_t n, homa_dtype dtype, uint32_t divisor);
/* 1 if dtype / op are valid enum values. */
int homa_coll_dtype_valid(int dtype);
int homa_coll_op_valid(int op);

/* ------------------------------------------------------------------------
 * Message header: every collective message is one Homa request of
 * COLL_HDR_SIZE header bytes followed by the payload; all fields
 * little-endian.
 *
 *   0 magic u32   4 version u8   5 kind u8   6 dtype u8   7 op u8
 *   8 comm_id u32   12 src u32 (sender rank)   16 seq u64
 *  24 count u64 (the call's count argument)   32 offset u64 (byte offset
 *  of the payload in the buffer it belongs to)   40 step u32   44 chunk u32
 *  48 length u32 (payload bytes)   52 root u32   56 nranks u32   60 zero u32
 * ---------------------------------------------------------------------- */

#define COLL_MAGIC 0x4c434d48u /* "HMCL" */
#define COLL_VERSION 1
#define COLL_HDR_SIZE 64

/* What a message belongs to; every rank picks the same algorithm from the
 * same arguments, so kind doubles as an agreement check. */
enum coll_kind {
    COLL_K_ALLREDUCE_RD = 1, /* recursive doubling */
    COLL_K_ALLREDUCE_RING = 2,
    COLL_K_BCAST_TREE = 3, /* binomial tree */
    COLL_K_BCAST_CHAIN = 4,
    COLL_K_ALLGATHER = 5,
    COLL_K_REDUCE_SCATTER = 6,
    COLL_K_BARRIER = 7,
    /* No payload: the sender's communicator broke during call `seq`; every
     * call from seq on fails (passed on to rank + 2^k, so all ranks learn
     * it within log2(n) hops and nobody waits out its timeout). */
    COLL_K_ABORT = 8,
};

struct coll_hdr {
    uint32_t magic;
    uint8_t version, kind, dtype, op;
    uint32_t comm_id, src;
    uint64_t seq, count, offset;
    uint32_t step, chunk, length, root, nranks, zero;
};

void coll_hdr_encode(uint8_t *buf, const struct coll_hdr *h);
void coll_hdr_decode(const uint8_t *buf, struct coll_hdr *h);

/* ------------------------------------------------------------------------
 * Communicator and per-call state (comm.c)
 * ---------------------------------------------------------------------- */

/* One message waiting to be sent to a peer.  Either `owned` (a malloc()ed
 * buffer with COLL_HDR_SIZE bytes of room before the payload, e.g. a
 * received message taken with homa_msg_take) or `src` (payload copied at
 * send time, so the queue holds no data). */
struct coll_send {
    uint32_t step, chunk;
    uint64_t offset;
    size_t len;
    const uint8_t *src;
    uint8_t *owned;
};

struct coll_peer {
    struct coll_send *q; /* FIFO ring */
    size_t head, n, cap;
    uint32_t inflight; /* requests sent whose response has not come back */
    int listed;        /* in comm->active */
};

/* A request kept unanswered because it is for a later step or call. */
struct coll_held {
    homa_msg msg;
    struct coll_hdr hdr;
};

struct homa_comm {
    homa_socket *sock;
    int owns_sock;
    int rank, nranks;
    homa_endpoint *eps;
    uint32_t comm_id;
    uint32_t timeout_ms, chunk_bytes, window, small_bytes;
    pthread_mutex_t lock; /* one collective at a time */
    uint64_t seq;         /* sequence number of the next collective */
    int broken;           /* an error happened: only destroy is valid */
    struct coll_peer *peers;
    int *active; /* ranks with queued sends */
    size_t nactive;
    uint64_t *rpcs; /* ids of requests in flight */
    size_t nrpcs, cap_rpcs;
    struct coll_held *held;
    size_t nheld, cap_held;
    uint32_t *held_per_src;
    uint64_t dropped; /* invalid requests answered and discarded */
};

/* Result of an algorithm's message handler. */
enum { COLL_TAKEN = 0, COLL_HOLD = 1, COLL_BAD = 2 };

struct coll_run;
typedef int (*coll_msg_fn)(struct coll_run *r, const struct coll_hdr *h, homa_msg *m);
/* Called after every event; may enqueue sends or finish.  <0 = error. */
typedef int (*coll_step_fn)(struct coll_run *r);

/* State of one collective call. */
struct coll_run {
    homa_comm *c;
    uint64_t seq;
    uint8_t kind, dtype, op;
    uint32_t root;
    uint64_t count;
    size_t esize;
    size_t chunk_elems; /* elements per message */
    coll_msg_fn on_msg;
    coll_step_fn advance;
    int recv_done; /* the algorithm needs no more messages */
    int dirty;     /* state changed: look at held messages again */
    uint8_t *seen; /* (step, chunk) bitmap against duplicates */
    uint32_t nchunks, nsteps;
    /* Algorithm state. */
    const uint8_t *sbuf;
    uint8_t *rbuf;
    uint64_t received, expected;
    int cur_step;
    int p2, extra, levels; /* recursive doubling */
    uint8_t *got;          /* barrier: rounds received */
    int parent;            /* broadcast: rank we receive from (-1 at the root) */
    int kids[16];          /* broadcast: ranks we forward to, in send order */
    int nkids;
};

/* Transport helpers used by the algorithms. */
int coll_enqueue(struct coll_run *r, int dst, uint32_t step, uint32_t chunk, uint64_t offset,
                 const uint8_t *src, uint8_t *owned, size_t len);
/* Marks (step, chunk) seen; 0 if it was new, -1 if a duplicate/out of range. */
int coll_mark_seen(struct coll_run *r, uint32_t step, uint32_t chunk);
/* Runs the call until the algorithm is done, all sends are answered, or an
 * error (which breaks the communicator). */
int coll_run_loop(struct coll_run *r);
/* Breaks the communicator (drops everything in flight) and returns err. */
int coll_fail(struct coll_run *r, int err);
/* Common argument checks and start of a call: locks the communicator. */
int coll_begin(homa_comm *c, struct coll_run *r);
void coll_end(struct coll_run *r);
/* Number of messages of `elems` elements in chunks of r->chunk_elems (>= 1). */
uint32_t coll_nchunks(const struct coll_run *r, uint64_t elems);

#endif
