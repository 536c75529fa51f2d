/* The collective algorithms, on top of the message loop of comm.c.
 *
 *   allreduce     recursive doubling (extra ranks of a non-power-of-two
 *                 count folded in first) up to small_bytes; above, a ring:
 *                 reduce-scatter then allgather, every segment cut in
 *                 chunks that travel the ring independently (pipelined).
 *   broadcast     binomial tree up to small_bytes, a pipelined chain above.
 *   allgather     pipelined ring.
 *   reduce-scatter pipelined ring.
 *   barrier       dissemination (ceil(log2 n) rounds of empty messages).
 *
 * Every handler consumes a message as soon as its data can be used, and
 * data to forward goes either into a fresh buffer (reduced directly from
 * the received message) or into the caller's receive buffer, never into
 * anything that waits for sending room: a rank can always take what its
 * neighbour sends, so the ring cannot deadlock with full windows. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll_internal.h"

static inline int mod(int a, int n)
{
    a %= n;
    return a < 0 ? a + n : a;
}

/* The arguments every rank must agree on. */
static int same_call(const struct coll_run *r, const struct coll_hdr *h)
{
    return h->kind == r->kind && h->dtype == r->dtype && h->op == r->op && h->count == r->count &&
           h->root == r->root;
}

/* Element range [*start, *start + *len) of chunk `chunk` of a region of
 * `elems` elements (empty for chunks past a short region's end). */
static void chunk_range(const struct coll_run *r, uint64_t elems, uint32_t chunk, uint64_t *start,
                        uint64_t *len)
{
    uint64_t s = (uint64_t)chunk * r->chunk_elems;
    if (s > elems) s = elems;
    uint64_t e = s + r->chunk_elems;
    if (e > elems) e = elems;
    *start = s;
    *len = e - s;
}

static int alloc_seen(struct coll_run *r, uint32_t nsteps, uint32_t nchunks)
{
    r->nsteps = nsteps;
    r->nchunks = nchunks;
    uint64_t bits = (uint64_t)nsteps * nchunks;
    r->seen = calloc((size_t)(bits / 8 + 1), 1);
    return r->seen ? 0 : HOMA_ERR_NOMEM;
}

/* Message size of the pipelined algorithms (rings, chain), for a region of
 * `elems` elements that crosses every link: a sixteenth of it, so that
 * filling and draining the pipeline costs little, but at least 64 KiB, so
 * that per-message costs stay small, and at most chunk_bytes.  Depends only
 * on arguments every rank shares. */
static void pipeline_chunk(struct coll_run *r, uint64_t elems)
{
    uint64_t want = elems * r->esize / 16;
    if (want < (64u << 10)) want = 64u << 10;
    uint64_t e = want / r->esize;
    if (e < r->chunk_elems) r->chunk_elems = (size_t)e;
}

/* A header's placement must be exactly what this rank computed. */
static int placed(const struct coll_hdr *h, uint64_t off, uint64_t len)
{
    return h->offset == off && h->length == len;
}

static uint8_t *new_out(size_t len)
{
    return malloc(COLL_HDR_SIZE + len);
}

/* ------------------------------------------------------ ring allreduce */

/* Segment i of the buffer: count/n elements, the first count%n one more. */
static uint64_t seg_start(const struct coll_run *r, int i)
{
    uint64_t n = (uint64_t)r->c->nranks, q = r->count / n, m = r->count % n;
    return (uint64_t)i * q + ((uint64_t)i < m ? (uint64_t)i : m);
}

static uint64_t seg_len(const struct coll_run *r, int i)
{
    uint64_t n = (uint64_t)r->c->nranks;
    return r->count / n + ((uint64_t)i < r->count % n ? 1 : 0);
}

/* Steps 0..n-2 reduce-scatter (receive segment rank-k-1), steps
 * n-1..2n-3 allgather (receive segment rank-(k-(n-1))). */
static int ring_recv_seg(const struct coll_run *r, uint32_t k)
{
    int n = r->c->nranks, rank = r->c->rank;
    return k < (uint32_t)(n - 1) ? mod(rank - (int)k - 1, n) : mod(rank - ((int)k - (n - 1)), n);
}

/* A partial sum travels on: reduce the rank's own data into the received
 * message itself and forward that buffer (no allocation; a fresh one only
 * if the bytes cannot be taken). */
static int reduce_forward(struct coll_run *r, homa_msg *m, uint32_t step, uint32_t chunk,
                          size_t off, uint64_t l, size_t len)
{
    homa_comm *c = r->c;
    const uint8_t *in = m->data + COLL_HDR_SIZE;
    uint8_t *out = homa_msg_take(c->sock, m);
    if (out != NULL) in = out + COLL_HDR_SIZE;
    else if ((out = new_out(len)) == NULL)
        return HOMA_ERR_NOMEM;
    homa_coll_reduce(out + COLL_HDR_SIZE, in, r->sbuf + off, (size_t)l, r->dtype, r->op);
    return coll_enqueue(r, mod(c->rank + 1, c->nranks), step, chunk, off, NULL, out, len);
}

static int ring_msg(struct coll_run *r, const struct coll_hdr *h, homa_msg *m)
{
    homa_comm *c = r->c;
    int n = c->nranks, rank = c->rank;
    if (!same_call(r, h) || h->src != (uint32_t)mod(rank - 1, n) || h->step >= r->nsteps ||
        h->chunk >= r->nchunks)
        return COLL_BAD;
    uint32_t k = h->step;
    int seg = ring_recv_seg(r, k);
    uint64_t s, l;
    chunk_range(r, seg_len(r, seg), h->chunk, &s, &l);
    size_t off = (size_t)((seg_start(r, seg) + s) * r->esize), len = (size_t)(l * r->esize);
    if (!placed(h, off, len) || coll_mark_seen(r, k, h->chunk) != 0) return COLL_BAD;
    const uint8_t *in = m->data + COLL_HDR_SIZE;
    int right = mod(rank + 1, n), rc = 0;
    if (k < (uint32_t)(n - 2)) {
        rc = reduce_forward(r, m, k + 1, h->chunk, off, l, len);
    } else if (k == (uint32_t)(n - 2)) {
        /* Last reduce-scatter step: this rank owns the final value. */
        homa_coll_reduce(r->rbuf + off, in, r->sbuf + off, (size_t)l, r->dtype, r->op);
        if (r->op == HOMA_AVG)
            homa_coll_avg_finish(r->rbuf + off, (size_t)l, r->dtype, (uint32_t)n);
        rc = coll_enqueue(r, right, k + 1, h->chunk, off, r->rbuf + off, NULL, len);
    } else {
        if (len > 0) memcpy(r->rbuf + off, in, len);
        if (k < r->nsteps - 1) {
            /* Forward the received buffer itself; the header is rewritten
             * when it is sent. */
            uint8_t *fwd = homa_msg_take(c->sock, m);
            rc = coll_enqueue(r, right, k + 1, h->chunk, off, fwd ? NULL : r->rbuf + off, fwd, len);
        }
    }
    if (rc != 0) return rc;
    if (++r->received == r->expected) r->recv_done = 1;
    return COLL_TAKEN;
}

static int ring_allreduce_start(struct coll_run *r)
{
    homa_comm *c = r->c;
    int n = c->nranks, rank = c->rank;
    r->kind = COLL_K_ALLREDUCE_RING;
    uint64_t segmax = (r->count + (uint64_t)n - 1) / (uint64_t)n;
    pipeline_chunk(r, segmax);
    uint32_t nch = coll_nchunks(r, segmax);
    int rc = alloc_seen(r, (uint32_t)(2 * n - 2), nch);
    if (rc != 0) return rc;
    r->expected = (uint64_t)nch * (uint64_t)(2 * n - 2);
    r->on_msg = ring_msg;
    for (uint32_t ch = 0; ch < nch && rc == 0; ch++) {
        uint64_t s, l;
        chunk_range(r, seg_len(r, rank), ch, &s, &l);
        size_t off = (size_t)((seg_start(r, rank) + s) * r->esize);
        rc = coll_enqueue(r, mod(rank + 1, n), 0, ch, off, r->sbuf + off, NULL,
                          (size_t)(l * r->esize));
    }
    return rc;
}

/* ----------------------------------------- recursive doubling allreduce */

/* Steps: 0 = ranks p2.. fold their data into rank - p2; 1..levels =
 * exchange with rank ^ 2^(step-1); levels+1 = the folded ranks get the
 * result back. */

static int rd_send_copy(struct coll_run *r, int dst, uint32_t step, const uint8_t *from)
{
    for (uint32_t ch = 0; ch < r->nchunks; ch++) {
        uint64_t s, l;
        chunk_range(r, r->count, ch, &s, &l);
        size_t off = (size_t)(s * r->esize), len = (size_t)(l * r->esize);
        /* A copy now: the buffer is reduced into before this is sent. */
        uint8_t *out = new_out(len);
        if (out == NULL) return HOMA_ERR_NOMEM;
        if (len > 0) memcpy(out + COLL_HDR_SIZE, from + off, len);
        int rc = coll_enqueue(r, dst, step, ch, off, NULL, out, len);
        if (rc != 0) return rc;
    }
    return 0;
}

static int rd_msg(struct coll_run *r, const struct coll_hdr *h, homa_msg *m)
{
    homa_comm *c = r->c;
    int rank = c->rank;
    if (!same_call(r, h) || h->chunk >= r->nchunks || h->step >= r->nsteps) return COLL_BAD;
    uint32_t st = h->step;
    int src = (int)h->src;
    uint64_t s, l;
    chunk_range(r, r->count, h->chunk, &s, &l);
    size_t off = (size_t)(s * r->esize), len = (size_t)(l * r->esize);
    if (!placed(h, off, len)) return COLL_BAD;
    const uint8_t *in = m->data + COLL_HDR_SIZE;
    if (rank >= r->p2) { /* a folded rank: only the result comes back */
        if (src != rank - r->p2 || st != (uint32_t)r->levels + 1) return COLL_BAD;
        if (coll_mark_seen(r, st, h->chunk) != 0) return COLL_BAD;
        if (len > 0) memcpy(r->rbuf + off, in, len);
        if (++r->received == r->expected) r->recv_done = 1;
        return COLL_TAKEN;
    }
    if (st == 0) {
        if (rank >= r->extra || src != rank + r->p2) return COLL_BAD;
    } else if (st <= (uint32_t)r->levels) {
        if (src != (rank ^ (1 << (st - 1)))) return COLL_BAD;
    } else {
        return COLL_BAD;
    }
    if ((int)st > r->cur_step) return COLL_HOLD; /* partner is a step ahead */
    if (coll_mark_seen(r, st, h->chunk) != 0) return COLL_BAD;
    /* Lower rank's value first, so both partners compute the same bits. */
    if (rank < src)
        homa_coll_reduce(r->rbuf + off, r->rbuf + off, in, (size_t)l, r->dtype, r->op);
    else
        homa_coll_reduce(r->rbuf + off, in, r->rbuf + off, (size_t)l, r->dtype, r->op);
    r->received++;
    return COLL_TAKEN;
}

static int rd_advance(struct coll_run *r)
{
    homa_comm *c = r->c;
    int rank = c->rank;
    if (rank >= r->p2) return 0;
    while (r->cur_step <= r->levels && r->received == r->nchunks) {
        r->cur_step++;
        r->received = 0;
        r->dirty = 1;
        if (r->cur_step <= r->levels) {
            int rc =
                rd_send_copy(r, rank ^ (1 << (r->cur_step - 1)), (uint32_t)r->cur_step, r->rbuf);
            if (rc != 0) return rc;
            continue;
        }
        if (r->op == HOMA_AVG)
            homa_coll_avg_finish(r->rbuf, (size_t)r->count, r->dtype, (uint32_t)c->nranks);
        if (rank < r->extra) {
            /* The result no longer changes: copied when sent. */
            for (uint32_t ch = 0; ch < r->nchunks; ch++) {
                uint64_t s, l;
                chunk_range(r, r->count, ch, &s, &l);
                size_t off = (size_t)(s * r->esize);
                int rc = coll_enqueue(r, rank + r->p2, (uint32_t)r->levels + 1, ch, off,
                                      r->rbuf + off, NULL, (size_t)(l * r->esize));
                if (rc != 0) return rc;
            }
        }
        r->recv_done = 1;
    }
    return 0;
}

static int rd_allreduce_start(struct coll_run *r)
{
    homa_comm *c = r->c;
    int n = c->nranks, rank = c->rank;
    r->kind = COLL_K_ALLREDUCE_RD;
    r->p2 = 1;
    r->levels = 0;
    while (r->p2 * 2 <= n) {
        r->p2 *= 2;
        r->levels++;
    }
    r->extra = n - r->p2;
    uint32_t nch = coll_nchunks(r, r->count);
    int rc = alloc_seen(r, (uint32_t)r->levels + 2, nch);
    if (rc != 0) return rc;
    r->on_msg = rd_msg;
    r->advance = rd_advance;
    r->received = 0;
    if (rank >= r->p2) {
        r->expected = nch;
        return rd_send_copy(r, rank - r->p2, 0, r->sbuf);
    }
    if (r->rbuf != r->sbuf) memcpy(r->rbuf, r->sbuf, (size_t)(r->count * r->esize));
    if (rank < r->extra) {
        r->cur_step = 0; /* wait for the folded rank first */
        return 0;
    }
    /* No fold step: start exchanging at once (rd_advance sees step 0 done). */
    r->cur_step = 0;
    r->received = nch;
    return 0;
}

/* The checks every collective shares, then r filled and the call begun.
 * op NULL: the collective has no reduction.  per_rank: the receive buffer
 * holds count elements per rank (allgather, reduce-scatter). */
static int run_init(struct coll_run *r, homa_comm *comm, const void *sendbuf, void *recvbuf,
                    size_t count, homa_dtype dtype, const homa_redop *op, bool per_rank)
{
    if (comm == NULL || !homa_coll_dtype_valid((int)dtype) ||
        (op != NULL && !homa_coll_op_valid((int)*op)))
        return HOMA_ERR_INVAL;
    size_t es = homa_dtype_size(dtype);
    size_t mult = per_rank ? (size_t)comm->nranks : 1;
    if (count > 0 && (sendbuf == NULL || recvbuf == NULL)) return HOMA_ERR_INVAL;
    if (count > SIZE_MAX / es / mult / 2) return HOMA_ERR_INVAL;
    memset(r, 0, sizeof(*r));
    r->dtype = (uint8_t)dtype;
    r->op = op != NULL ? (uint8_t)*op : 0;
    r->count = count;
    r->esize = es;
    r->sbuf = sendbuf;
    r->rbuf = recvbuf;
    return coll_begin(comm, r);
}

int homa_allreduce(homa_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                   homa_dtype dtype, homa_redop op)
{
    struct coll_run r;
    int rc = run_init(&r, comm, sendbuf, recvbuf, count, dtype, &op, false);
    if (rc != 0) return rc;
    if (count > 0 && comm->nranks == 1) {
        if (recvbuf != sendbuf) memcpy(recvbuf, sendbuf, count * r.esize);
    } else if (count > 0) {
        if (count * r.esize <= comm->small_bytes)
            rc = rd_allreduce_start(&r);
        else
            rc = ring_allreduce_start(&r);
        rc = rc == 0 ? coll_run_loop(&r) : coll_fail(&r, rc);
    }
    coll_end(&r);
    return rc;
}

/* --------------------------------------------------------------- broadcast */

static int bcast_msg(struct coll_run *r, const struct coll_hdr *h, homa_msg *m)
{
    homa_comm *c = r->c;
    if (!same_call(r, h) || (int)h->src != r->parent || h->step != 0 || h->chunk >= r->nchunks)
        return COLL_BAD;
    uint64_t s, l;
    chunk_range(r, r->count, h->chunk, &s, &l);
    size_t off = (size_t)(s * r->esize), len = (size_t)(l * r->esize);
    if (!placed(h, off, len) || coll_mark_seen(r, 0, h->chunk) != 0) return COLL_BAD;
    if (len > 0) memcpy(r->rbuf + off, m->data + COLL_HDR_SIZE, len);
    for (int i = 0; i < r->nkids; i++) {
        /* The first child gets the received buffer itself. */
        uint8_t *fwd = i == 0 ? homa_msg_take(c->sock, m) : NULL;
        int rc =
            coll_enqueue(r, r->kids[i], 0, h->chunk, off, fwd ? NULL : r->rbuf + off, fwd, len);
        if (rc != 0) return rc;
    }
    if (++r->received == r->expected) r->recv_done = 1;
    return COLL_TAKEN;
}

int homa_broadcast(homa_comm *comm, void *buf, size_t count, homa_dtype dtype, int root)
{
    if (comm != NULL && (root < 0 || root >= comm->nranks)) return HOMA_ERR_INVAL;
    struct coll_run r;
    int rc = run_init(&r, comm, buf, buf, count, dtype, NULL, false);
    if (rc != 0) return rc;
    r.root = (uint32_t)root;
    size_t es = r.esize;
    int n = comm->nranks, rank = comm->rank;
    if (count == 0 || n == 1) {
        coll_end(&r);
        return 0;
    }
    int v = mod(rank - root, n); /* position relative to the root */
    r.nkids = 0;
    if (count * r.esize <= comm->small_bytes) {
        /* Binomial tree: v's children are v + 2^k for 2^k > v; the
         * largest subtree (smallest k) is served first. */
        r.kind = COLL_K_BCAST_TREE;
        int hb = 0;
        for (int k = 1; k <= v; k <<= 1)
            hb = k;
        r.parent = v == 0 ? -1 : mod(v - hb + root, n);
        for (int k = 1; k < n; k <<= 1)
            if (k > v && v + k < n) r.kids[r.nkids++] = mod(v + k + root, n);
    } else {
        r.kind = COLL_K_BCAST_CHAIN; /* a pipeline root -> root+1 -> ... */
        pipeline_chunk(&r, count);
        r.parent = v == 0 ? -1 : mod(rank - 1, n);
        if (v + 1 < n) r.kids[r.nkids++] = mod(rank + 1, n);
    }
    uint32_t nch = coll_nchunks(&r, count);
    rc = alloc_seen(&r, 1, nch);
    r.on_msg = bcast_msg;
    if (rc == 0 && v == 0) {
        for (uint32_t ch = 0; ch < nch && rc == 0; ch++) {
            uint64_t s, l;
            chunk_range(&r, count, ch, &s, &l);
            size_t off = (size_t)(s * es);
            for (int i = 0; i < r.nkids && rc == 0; i++)
                rc = coll_enqueue(&r, r.kids[i], 0, ch, off, r.rbuf + off, NULL, (size_t)(l * es));
        }
        r.recv_done = 1;
    } else {
        r.expected = nch;
    }
    rc = rc == 0 ? coll_run_loop(&r) : coll_fail(&r, rc);
    coll_end(&r);
    return rc;
}

/* --------------------------------------------------------------- allgather */

/* Checks a ring message from the left neighbour for allgather and
 * reduce-scatter: at step k it carries block rank-k-`shift` of count
 * elements per block.  Sets the chunk's first element and element count
 * within its block (*s, *l) and its byte range in the buffer (*off, *len);
 * COLL_BAD for a message that does not belong (or a duplicate). */
static int block_ring_range(struct coll_run *r, const struct coll_hdr *h, int shift, uint64_t *s,
                            uint64_t *l, size_t *off, size_t *len)
{
    int n = r->c->nranks, rank = r->c->rank;
    if (!same_call(r, h) || h->src != (uint32_t)mod(rank - 1, n) || h->step >= r->nsteps ||
        h->chunk >= r->nchunks)
        return COLL_BAD;
    int blk = mod(rank - (int)h->step - shift, n);
    chunk_range(r, r->count, h->chunk, s, l);
    *off = (size_t)(((uint64_t)blk * r->count + *s) * r->esize);
    *len = (size_t)(*l * r->esize);
    if (!placed(h, *off, *len) || coll_mark_seen(r, h->step, h->chunk) != 0) return COLL_BAD;
    return 0;
}

/* Step a: send block rank-a to the right, receive block rank-a-1. */
static int allgather_msg(struct coll_run *r, const struct coll_hdr *h, homa_msg *m)
{
    homa_comm *c = r->c;
    int n = c->nranks, rank = c->rank;
    uint64_t s, l;
    size_t off, len;
    if (block_ring_range(r, h, 1, &s, &l, &off, &len) != 0) return COLL_BAD;
    if (len > 0) memcpy(r->rbuf + off, m->data + COLL_HDR_SIZE, len);
    if (h->step + 1 < r->nsteps) {
        uint8_t *fwd = homa_msg_take(c->sock, m);
        int rc = coll_enqueue(r, mod(rank + 1, n), h->step + 1, h->chunk, off,
                              fwd ? NULL : r->rbuf + off, fwd, len);
        if (rc != 0) return rc;
    }
    if (++r->received == r->expected) r->recv_done = 1;
    return COLL_TAKEN;
}

int homa_allgather(homa_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                   homa_dtype dtype)
{
    struct coll_run r;
    int rc = run_init(&r, comm, sendbuf, recvbuf, count, dtype, NULL, true);
    if (rc != 0) return rc;
    r.kind = COLL_K_ALLGATHER;
    size_t es = r.esize;
    int n = comm->nranks, rank = comm->rank;
    size_t bytes = count * es;
    uint8_t *own = r.rbuf + (size_t)rank * bytes;
    if (count > 0 && own != r.sbuf) memcpy(own, r.sbuf, bytes);
    if (count == 0 || n == 1) {
        coll_end(&r);
        return 0;
    }
    pipeline_chunk(&r, count);
    uint32_t nch = coll_nchunks(&r, count);
    rc = alloc_seen(&r, (uint32_t)(n - 1), nch);
    r.expected = (uint64_t)nch * (uint64_t)(n - 1);
    r.on_msg = allgather_msg;
    for (uint32_t ch = 0; ch < nch && rc == 0; ch++) {
        uint64_t s, l;
        chunk_range(&r, count, ch, &s, &l);
        size_t off = (size_t)rank * bytes + (size_t)(s * es);
        rc = coll_enqueue(&r, mod(rank + 1, n), 0, ch, off, r.rbuf + off, NULL, (size_t)(l * es));
    }
    rc = rc == 0 ? coll_run_loop(&r) : coll_fail(&r, rc);
    coll_end(&r);
    return rc;
}

/* ---------------------------------------------------------- reduce-scatter */

/* Step k: send block rank-k-1 (partially reduced) to the right, receive
 * block rank-k-2; the last step (k = n-2) brings block rank. */
static int rs_msg(struct coll_run *r, const struct coll_hdr *h, homa_msg *m)
{
    int n = r->c->nranks;
    uint64_t s, l;
    size_t off, len;
    if (block_ring_range(r, h, 2, &s, &l, &off, &len) != 0) return COLL_BAD;
    if (h->step + 1 < r->nsteps) {
        int rc = reduce_forward(r, m, h->step + 1, h->chunk, off, l, len);
        if (rc != 0) return rc;
    } else {
        const uint8_t *in = m->data + COLL_HDR_SIZE;
        uint8_t *dst = r->rbuf + (size_t)(s * r->esize);
        homa_coll_reduce(dst, in, r->sbuf + off, (size_t)l, r->dtype, r->op);
        if (r->op == HOMA_AVG) homa_coll_avg_finish(dst, (size_t)l, r->dtype, (uint32_t)n);
    }
    if (++r->received == r->expected) r->recv_done = 1;
    return COLL_TAKEN;
}

int homa_reduce_scatter(homa_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                        homa_dtype dtype, homa_redop op)
{
    struct coll_run r;
    int rc = run_init(&r, comm, sendbuf, recvbuf, count, dtype, &op, true);
    if (rc != 0) return rc;
    r.kind = COLL_K_REDUCE_SCATTER;
    size_t es = r.esize;
    int n = comm->nranks, rank = comm->rank;
    size_t bytes = count * es;
    if (count == 0 || n == 1) {
        if (count > 0 && recvbuf != sendbuf) memcpy(recvbuf, sendbuf, bytes);
        coll_end(&r);
        return 0;
    }
    pipeline_chunk(&r, count);
    uint32_t nch = coll_nchunks(&r, count);
    rc = alloc_seen(&r, (uint32_t)(n - 1), nch);
    r.expected = (uint64_t)nch * (uint64_t)(n - 1);
    r.on_msg = rs_msg;
    size_t first = (size_t)mod(rank - 1, n) * bytes;
    for (uint32_t ch = 0; ch < nch && rc == 0; ch++) {
        uint64_t s, l;
        chunk_range(&r, count, ch, &s, &l);
        size_t off = first + (size_t)(s * es);
        rc = coll_enqueue(&r, mod(rank + 1, n), 0, ch, off, r.sbuf + off, NULL, (size_t)(l * es));
    }
    rc = rc == 0 ? coll_run_loop(&r) : coll_fail(&r, rc);
    coll_end(&r);
    return rc;
}

/* ----------------------------------------------------------------- barrier */

/* Round j: tell rank+2^j, hear from rank-2^j.  Hearing in round j means
 * the sender had heard from 2^j - 1 ranks before it, so after the last
 * round every rank has (transitively) heard from all. */
static int barrier_msg(struct coll_run *r, const struct coll_hdr *h, homa_msg *m)
{
    (void)m;
    homa_comm *c = r->c;
    if (!same_call(r, h) || h->step >= r->nsteps || h->chunk != 0 || !placed(h, 0, 0))
        return COLL_BAD;
    if (h->src != (uint32_t)mod(c->rank - (1 << h->step), c->nranks)) return COLL_BAD;
    if (coll_mark_seen(r, h->step, 0) != 0) return COLL_BAD;
    r->got[h->step] = 1;
    return COLL_TAKEN;
}

static int barrier_advance(struct coll_run *r)
{
    homa_comm *c = r->c;
    while (r->cur_step < (int)r->nsteps && r->got[r->cur_step]) {
        r->cur_step++;
        if (r->cur_step < (int)r->nsteps) {
            int rc = coll_enqueue(r, mod(c->rank + (1 << r->cur_step), c->nranks),
                                  (uint32_t)r->cur_step, 0, 0, NULL, NULL, 0);
            if (rc != 0) return rc;
        } else {
            r->recv_done = 1;
        }
    }
    return 0;
}

int homa_barrier(homa_comm *comm)
{
    if (comm == NULL) return HOMA_ERR_INVAL;
    struct coll_run r;
    memset(&r, 0, sizeof(r));
    r.kind = COLL_K_BARRIER;
    r.esize = 1;
    int rc = coll_begin(comm, &r);
    if (rc != 0) return rc;
    int n = comm->nranks;
    if (n == 1) {
        coll_end(&r);
        return 0;
    }
    uint32_t rounds = 0;
    while ((1 << rounds) < n)
        rounds++;
    rc = alloc_seen(&r, rounds, 1);
    r.got = calloc(rounds, 1);
    if (rc == 0 && r.got == NULL) rc = HOMA_ERR_NOMEM;
    r.on_msg = barrier_msg;
    r.advance = barrier_advance;
    r.cur_step = 0;
    if (rc == 0) rc = coll_enqueue(&r, mod(comm->rank + 1, n), 0, 0, 0, NULL, NULL, 0);
    rc = rc == 0 ? coll_run_loop(&r) : coll_fail(&r, rc);
    coll_end(&r);
    return rc;
}
