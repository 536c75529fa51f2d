/* A two-engine harness for unit tests: packets are moved by hand between a
 * client engine (host 1) and a server engine (host 2), with optional drops,
 * and virtual time advances only when the test says so. */
#ifndef HOMA_TEST_PAIR_H
#define HOMA_TEST_PAIR_H

#include <stdint.h>
#include <string.h>

#include <homa/engine.h>

#define PAIR_MAX_PKT 70000

struct pair_pkt {
    homa_addr src, dst;
    uint8_t priority;
    uint8_t type;
    size_t len;
    uint8_t *data;
};

struct pair {
    homa_engine *e[2];
    homa_addr addr[2];
    uint64_t now;
    /* drop filter: return 1 to drop packet; NULL = keep all */
    int (*filter)(void *arg, int from, const struct pair_pkt *p);
    void *filter_arg;
    uint64_t moved[2];
    /* 1: deliver DATA packets as a driver doing direct receive would
     * (homa_engine_place_begin, copy the payload to where it says,
     * homa_engine_place_end), falling back to homa_engine_input */
    int place;
    uint64_t placed;
};

int pair_init(struct pair *p, const homa_config *cfg);
void pair_destroy(struct pair *p);
/* Pulls every packet engine `from` wants to send and feeds it to the other
 * engine.  Returns the number delivered. */
int pair_step(struct pair *p, int from);
/* Moves packets both ways until both engines are quiet (bounded). */
int pair_settle(struct pair *p);
/* Advances time by dt, running timers, and settles. */
void pair_advance(struct pair *p, uint64_t dt);

#endif
