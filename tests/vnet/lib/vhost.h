/* vhost: runs one real libhoma engine inside one vnet host.
 *
 * The adapter is the virtual network's "driver": the NIC pulls one packet
 * at a time from the engine (so sender SRPT decides at the last moment, as
 * with a real NIC queue of depth one), arriving packets go to
 * homa_engine_input, and the engine's timer is an event re-armed at
 * homa_engine_next_deadline after every interaction.  Used by the engine's
 * scenario tests, the demo and homa-sim, so all of them drive the same code
 * the library ships. */
#ifndef HOMA_SIM_VHOST_H
#define HOMA_SIM_VHOST_H

#include <stdbool.h>
#include <stdint.h>

#include <homa/engine.h>

#include "vnet.h"

struct vhost;

/* Called when a message became receivable on port (from inside the event
 * loop; the callback may call homa_engine_* and vhost_* functions). */
typedef void (*vhost_ready_fn)(struct vhost *h, uint16_t port, void *app);

struct vhost {
    struct vnet *net;
    int index;
    homa_engine *eng;
    homa_addr addr;
    vnet_event_id timer_ev;
    uint64_t timer_at;
    vhost_ready_fn on_ready;
    void *app;
    uint64_t pkts_in, pkts_out;
    /* When timing is set, eng_ns accumulates the wall time spent inside the
     * engine calls this adapter makes (for engine cost measurements). */
    bool timing;
    uint64_t eng_ns;
    /* Host software delay: when nonzero, each arriving packet reaches the
     * engine rx_delay_ns after the network delivered it, in arrival order
     * (the host's receive path as a fixed-latency pipeline).  Set it after
     * vhost_create and before traffic starts; 0 (the default) hands packets
     * to the engine at once, as before. */
    uint64_t rx_delay_ns;
    struct vhost_rxq *rxq; /* private: packets waiting out rx_delay_ns */
};

/* CLOCK_MONOTONIC in ns (for timing engine calls). */
uint64_t vhost_clock_ns(void);

/* The engine address of host i (host index in the last four bytes). */
homa_addr vhost_addr(int index);
int vhost_index(const homa_addr *a);

/* Creates an engine with cfg (NULL = defaults) and attaches it as a new
 * vnet host.  Returns NULL on error. */
struct vhost *vhost_create(struct vnet *net, const homa_config *cfg, vhost_ready_fn on_ready,
                           void *app);
void vhost_destroy(struct vhost *h);
/* Call after any homa_engine_* call made from outside vhost callbacks (an
 * application sending a request, replying...): kicks the NIC and re-arms
 * the engine timer. */
void vhost_poke(struct vhost *h);

#endif
