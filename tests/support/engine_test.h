/* Helpers shared by the engine unit tests (tests/unit/test_*.c): two
 * engines wired back to back (pair.h), the ports they use, packet filters
 * and capture, and RPC drivers that assert with cmocka. */
#ifndef HOMA_TEST_ENGINE_TEST_H
#define HOMA_TEST_ENGINE_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "support/pair.h"

#define CPORT 4000 /* the client engine's port (pair host 0) */
#define SPORT 99   /* the server engine's port (pair host 1) */
#define MS 1000000ull

void fill(uint8_t *b, size_t n, unsigned seed);

void setup_pair(struct pair *p, const homa_config *cfg);

/* Receives on engine `side`'s port (any message, or response `id`),
 * advancing time a tick at a time; fails the test after max_ticks.
 * Returns the ticks it took. */
int recv_within(struct pair *p, int side, uint16_t port, uint64_t id, homa_msg *m, int max_ticks);

/* Runs one echo RPC of len bytes and checks the response. */
void echo_rpc(struct pair *p, size_t len);

/* Drops the n-th DATA packet from host `from`. */
struct drop_nth {
    int from;
    int n, seen;
    int type;
};

int drop_nth_filter(void *arg, int from, const struct pair_pkt *pk);

extern int client_side, server_side; /* filter args: which engine */

int drop_all_from(void *arg, int from, const struct pair_pkt *pk);

/* Captures the first DATA packet from the client to replay it later. */
struct capture {
    uint8_t data[2000];
    size_t len;
};

int capture_filter(void *arg, int from, const struct pair_pkt *pk);

/* A pair whose first client DATA packet is kept in *cap. */
void setup_capturing_pair(struct pair *p, struct capture *cap);

/* The start of the tombstone tests: a request reaches the server
 * application, which answers with a response that needs grants; the
 * client's grants never arrive (everything it sends is dropped), and after
 * 102 ms of ticks the server gives up on it.  cap holds the request's
 * first packet. */
void server_times_out_silent_client(struct pair *p, struct capture *cap);

/* Encodes a DATA packet of the request `id` (even, the client's id) from
 * CPORT to SPORT into buf; returns its length. */
size_t data_pkt(uint8_t *buf, uint64_t id, uint32_t msg_len, uint32_t offset,
                const uint8_t *payload, uint32_t plen);

#endif
