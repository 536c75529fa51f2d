/* Scenario scaffolding for virtual-network tests: N hosts running the real
 * engine on a vnet star, each with a server port (echo or fixed-size reply)
 * and a client port; RPCs are scheduled at virtual times and every byte of
 * every request and response is checked. */
#ifndef HOMA_TEST_SCENARIO_H
#define HOMA_TEST_SCENARIO_H

#include <stdbool.h>
#include <stdint.h>

#include <homa/engine.h>

#include "vhost.h"
#include "vnet.h"

#define SC_SERVER_PORT 100
#define SC_CLIENT_PORT 200
#define SC_MAX_HOSTS 64

struct sc_rpc {
    int src, dst;
    uint32_t len;
    uint64_t id;
    uint64_t start;         /* request handed to the engine */
    uint64_t server_at;     /* request delivered to the server application */
    uint64_t done;          /* response or error delivered to the client */
    int err;                /* 0 or HOMA_ERR_* */
    int server_deliveries;  /* how often the server application saw it */
    int completions;        /* how often the client saw an outcome */
    bool verified;
};

struct scenario {
    struct vnet *net;
    int n;
    struct vhost *h[SC_MAX_HOSTS];
    homa_config cfg;
    struct sc_rpc *rpcs;
    int nrpcs, cap;
    int reply_len; /* < 0: echo the request; else this many bytes */
    int completed, failed, verify_errors, bad_deliveries;
};

/* Creates n hosts on a star with the given vnet and engine configs. */
void sc_init(struct scenario *sc, const struct vnet_config *ncfg, const homa_config *hcfg, int n);
void sc_destroy(struct scenario *sc);
/* Schedules an RPC of len bytes from host src to host dst at time t.
 * Returns its index. */
int sc_add_rpc(struct scenario *sc, uint64_t t, int src, int dst, uint32_t len);
/* Runs until every RPC has an outcome or the virtual time limit passes.
 * Returns true if every RPC has an outcome. */
bool sc_run(struct scenario *sc, uint64_t limit_ns);
/* Fills a message with the pattern of RPC idx. */
void sc_fill(uint8_t *buf, uint32_t len, int idx);
/* Prints the seed and the engine counters that matter (on failure). */
void sc_dump(const struct scenario *sc);

#endif
