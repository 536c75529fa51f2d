/* libhoma collectives: allreduce, broadcast, allgather, reduce-scatter and
 * barrier among N ranks, built only on the public RPC API (homa/homa.h).
 *
 * A communicator holds one Homa socket per rank and the endpoints of all
 * ranks.  Ranks exchange data as Homa requests (a small header naming the
 * collective's sequence number, step and chunk, then the payload); the
 * receiver answers each with an empty response, so a lost packet is
 * recovered by Homa and a dead peer shows up as HOMA_ERR_TIMEOUT.
 *
 * Rules, as in MPI/NCCL:
 *   - every rank calls the same collectives in the same order with the same
 *     count, dtype, op and root;
 *   - a communicator runs one collective at a time: calls on one
 *     communicator from several threads are serialised (the second waits);
 *   - buffers belong to the caller and are only used during the call;
 *     sendbuf == recvbuf (in place) is allowed where noted;
 *   - a call with count 0 returns at once and does not count (it need not
 *     be matched on other ranks); with one rank every call is a copy.
 *
 * Failure: if a peer dies or stops participating, every call that needs it
 * returns HOMA_ERR_TIMEOUT within opts.timeout_ms (never hangs).  After any
 * error other than HOMA_ERR_INVAL the communicator is broken: later calls
 * return HOMA_ERR_STATE at once, and the only valid call is
 * homa_comm_destroy().  A rank whose communicator breaks tells the others,
 * whose current call then fails at once (HOMA_ERR_TIMEOUT) instead of
 * waiting out its timeout.
 *
 * Rendezvous: homa_comm_create() takes the endpoint of every rank, listed in
 * rank order (a launcher knows them, or they were exchanged through some
 * store).  homa_comm_create_file() does the exchange itself through a file
 * on a shared file system: each rank appends "rank endpoint" and waits until
 * all ranks are present; the file must be empty or absent before a job
 * starts (use a fresh path per job).
 *
 * Errors: negative HOMA_ERR_* (homa/errors.h). */
#ifndef HOMA_COLL_H
#define HOMA_COLL_H

#include <homa/export.h>

#include <stddef.h>
#include <stdint.h>

#include <homa/homa.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct homa_comm homa_comm;

typedef enum homa_dtype {
    HOMA_FLOAT32 = 0,
    HOMA_FLOAT16 = 1,  /* IEEE 754 binary16; reduced in float32, rounded to nearest even */
    HOMA_BFLOAT16 = 2, /* bfloat16; reduced in float32, rounded to nearest even */
    HOMA_INT32 = 3,
    HOMA_INT64 = 4,
} homa_dtype;

typedef enum homa_redop {
    HOMA_SUM = 0,
    HOMA_AVG = 1, /* sum divided by the number of ranks (integers: truncated toward zero) */
    HOMA_MAX = 2,
    HOMA_MIN = 3,
} homa_redop;

/* Size of one element of dtype in bytes, or 0 if dtype is not valid. */
HOMA_API size_t homa_dtype_size(homa_dtype dtype);

typedef struct homa_comm_options {
    /* A call fails with HOMA_ERR_TIMEOUT when it has made no progress for
     * this long (a peer dead or not calling).  Default 30,000 ms. */
    uint32_t timeout_ms;
    /* Payload bytes per message; buffers are cut in chunks of at most this
     * size and several chunks are in flight at once.  Default 1 MiB.
     * Clamped below the engine's max_message_length (the default engine
     * config gives 999,936).  Pipelined algorithms use smaller chunks for
     * mid-size buffers.  Must be the same on all ranks (so must
     * small_bytes). */
    uint32_t chunk_bytes;
    /* Messages a rank keeps in flight to one peer.  Default 4. */
    uint32_t window;
    /* allreduce uses recursive doubling up to this many bytes, a ring
     * (reduce-scatter + allgather) above.  Default 64 KiB. */
    uint32_t small_bytes;
    /* Runtime for the communicator's socket; NULL = the default runtime. */
    homa_runtime *runtime;
} homa_comm_options;

/* Fills the defaults above. */
HOMA_API void homa_comm_options_default(homa_comm_options *opts);

/* Creates a communicator for rank `rank` of `nranks` (1..4096).  `self` is
 * the local socket, already open on the port that endpoints[rank] names;
 * the communicator uses it exclusively from now on but does not own it (close
 * it after homa_comm_destroy()).  endpoints[i] is rank i's endpoint (copied;
 * all distinct, port non-zero).  opts NULL = defaults; fields are taken
 * literally (timeout_ms >= 1, chunk_bytes >= 8, window 1..1024), so start
 * from homa_comm_options_default().  Does not contact the peers.  Errors:
 * HOMA_ERR_INVAL, HOMA_ERR_NOMEM. */
HOMA_API int homa_comm_create(homa_socket *self, int rank, int nranks,
                              const homa_endpoint *endpoints, const homa_comm_options *opts,
                              homa_comm **out);

/* Rendezvous through a shared file: opens a socket on `local` (port 0 =
 * ephemeral; its address should be one the other ranks can reach, e.g.
 * the host's address, not the wildcard), appends "rank endpoint\n" to
 * `path` and waits (up to opts->timeout_ms) until all nranks ranks have
 * written theirs.  The communicator owns that socket.  Errors:
 * HOMA_ERR_INVAL (bad arguments, duplicate rank in the file),
 * HOMA_ERR_TIMEOUT, HOMA_ERR_IO, plus those of homa_socket_bind(). */
HOMA_API int homa_comm_create_file(const char *path, int rank, int nranks,
                                   const homa_endpoint *local, const homa_comm_options *opts,
                                   homa_comm **out);

/* Destroys the communicator (closes its socket if it owns it).  Must not be
 * called while a collective is running on it.  After a clean finish it first
 * waits, at most min(timeout_ms, 200 ms), until the replies this rank sent are
 * acknowledged (homa_socket_linger()), so a peer whose last reply was lost
 * still completes; a broken communicator is destroyed at once. */
HOMA_API void homa_comm_destroy(homa_comm *comm);

HOMA_API int homa_comm_rank(const homa_comm *comm);
HOMA_API int homa_comm_size(const homa_comm *comm);
/* The communicator's socket (e.g. to print its endpoint). */
HOMA_API homa_socket *homa_comm_socket(homa_comm *comm);

/* recvbuf[i] = op over ranks of sendbuf[i], for i < count, on every rank.
 * In place allowed. */
HOMA_API int homa_allreduce(homa_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                            homa_dtype dtype, homa_redop op);

/* Copies root's buf (count elements) into buf on every rank. */
HOMA_API int homa_broadcast(homa_comm *comm, void *buf, size_t count, homa_dtype dtype, int root);

/* recvbuf (nranks * count elements) gets rank r's sendbuf at element
 * r * count.  In place allowed when sendbuf == recvbuf + rank * count. */
HOMA_API int homa_allgather(homa_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                            homa_dtype dtype);

/* sendbuf holds nranks * count elements; rank r's recvbuf (count elements)
 * gets op over ranks of block r of sendbuf.  recvbuf may equal sendbuf + r * count. */
HOMA_API int homa_reduce_scatter(homa_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                 homa_dtype dtype, homa_redop op);

/* Returns once every rank has entered the barrier. */
HOMA_API int homa_barrier(homa_comm *comm);

#ifdef __cplusplus
}
#endif
#endif
