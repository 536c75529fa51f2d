/* homa-sim's fabric: the datacenter network its options describe.
 *
 * A two-level leaf-spine: `racks` racks of `hosts_per_rack` hosts, each
 * rack under one ToR switch, every ToR linked to each of `spines` spine
 * switches (no spines in a one-rack fabric); host links at host_bps,
 * ToR-spine links at uplink_bps (the oversubscription is hosts_per_rack *
 * host_bps against spines * uplink_bps), each with its propagation delay, a
 * forwarding delay per switch, per-packet wire overhead and a buffer per
 * switch egress port.  Packets are sprayed over the spines.
 *
 * The packets move on the virtual network (tests/vnet/lib/vnet.h), which
 * this file configures; here are also the fabric's timing on an idle
 * network (the ideal times slowdowns are measured against, declared in
 * homa_sim.h) and the link measurements homa-sim reports. */
#ifndef HOMA_SIM_FABRIC_H
#define HOMA_SIM_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "homa_sim.h"
#include "vnet.h"

/* Fills in the layout's "auto" fields: racks from hosts and hosts_per_rack
 * (16 by default; one rack if hosts fit in it), or hosts_per_rack from
 * racks.  Returns 0, or -1 with a message in err if hosts do not divide. */
int hsim_fabric_layout(struct hsim_opts *o, char *err, size_t errlen);

/* The fabric's rates, delays and sizes, for the ideal-time model. */
struct hsim_net_params hsim_fabric_params(const struct hsim_opts *o);

/* The virtual network of a laid-out fabric (hosts are added by the
 * caller, host h in rack h / hosts_per_rack), with o->loss at every host's
 * egress.  NULL if the configuration is invalid. */
struct vnet *hsim_fabric_create(const struct hsim_opts *o);

/* Whether hosts a and b sit in different racks (their packets cross a
 * spine). */
bool hsim_fabric_cross_rack(const struct hsim_opts *o, int a, int b);

/* ToR-spine links, one direction (0 in a one-rack fabric). */
int hsim_fabric_uplinks(const struct hsim_opts *o);

/* Bytes held by the ToR port leading down to host (queued or being sent):
 * 0 when the host's downlink is idle. */
uint64_t hsim_fabric_downlink_bytes(const struct vnet *net, int host);

/* Busy time since the last statistics reset of every ToR->host port (down)
 * and every ToR->spine port (up); if asked, the peak occupancy of any
 * switch port (max_any) and of any ToR->host port (max_down). */
void hsim_fabric_port_busy(const struct vnet *net, const struct hsim_opts *o, uint64_t *down,
                           uint64_t *up, uint64_t *max_any, uint64_t *max_down);

#endif
