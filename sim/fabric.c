/* homa-sim's fabric: its leaf-spine on the virtual network, the ideal
 * times of its paths, its link measurements (see fabric.h). */
#include "fabric.h"

#include <stdio.h>

/* ---- layout and configuration ---- */

int hsim_fabric_layout(struct hsim_opts *o, char *err, size_t errlen)
{
    if (o->hosts_per_rack <= 0) o->hosts_per_rack = 16;
    if (o->racks <= 0) {
        if (o->hosts <= o->hosts_per_rack) {
            o->racks = 1;
            o->hosts_per_rack = o->hosts;
        } else if (o->hosts % o->hosts_per_rack == 0) {
            o->racks = o->hosts / o->hosts_per_rack;
        } else {
            snprintf(err, errlen, "--hosts %d is not a multiple of --hosts-per-rack %d", o->hosts,
                     o->hosts_per_rack);
            return -1;
        }
    } else if (o->racks * o->hosts_per_rack != o->hosts) {
        /* --racks given: it wins over --hosts-per-rack */
        if (o->hosts % o->racks != 0) {
            snprintf(err, errlen, "--hosts %d is not a multiple of --racks %d", o->hosts, o->racks);
            return -1;
        }
        o->hosts_per_rack = o->hosts / o->racks;
    }
    return 0;
}

struct hsim_net_params hsim_fabric_params(const struct hsim_opts *o)
{
    return (struct hsim_net_params){
        o->host_bps,        o->uplink_bps,      o->host_link_delay_ns,
        o->uplink_delay_ns, o->switch_delay_ns, o->overhead_bytes,
        o->max_payload,     o->rx_delay_ns,     o->racks > 1 ? o->spines : 0};
}

struct vnet *hsim_fabric_create(const struct hsim_opts *o)
{
    struct vnet_config nc;
    vnet_config_default(&nc);
    nc.seed = o->seed;
    nc.topology = VNET_LEAF_SPINE;
    nc.racks = o->racks;
    nc.hosts_per_rack = o->hosts_per_rack;
    nc.spines = o->racks > 1 ? o->spines : 0;
    nc.host_bps = o->host_bps;
    nc.uplink_bps = o->uplink_bps;
    nc.host_delay_ns = o->host_link_delay_ns;
    nc.uplink_delay_ns = o->uplink_delay_ns;
    nc.switch_delay_ns = o->switch_delay_ns;
    nc.overhead_bytes = o->overhead_bytes;
    nc.port_buffer_bytes = o->port_buffer_bytes;
    nc.faults.loss = o->loss;
    return vnet_create(&nc);
}

bool hsim_fabric_cross_rack(const struct hsim_opts *o, int a, int b)
{
    int hpr = o->hosts_per_rack;
    return a / hpr != b / hpr;
}

int hsim_fabric_uplinks(const struct hsim_opts *o)
{
    return o->racks > 1 ? o->racks * o->spines : 0;
}

/* ---- ideal times on an idle fabric ---- */

struct hop {
    double bps, delay; /* delay after the last bit: propagation (+ switch) */
};

static int path_hops(const struct hsim_net_params *p, bool cross, struct hop *h)
{
    double sw = (double)p->switch_delay_ns;
    int n = 0;
    h[n++] = (struct hop){(double)p->host_bps, (double)p->host_link_delay_ns + sw};
    if (cross) {
        h[n++] = (struct hop){(double)p->uplink_bps, (double)p->uplink_delay_ns + sw};
        h[n++] = (struct hop){(double)p->uplink_bps, (double)p->uplink_delay_ns + sw};
    }
    h[n++] = (struct hop){(double)p->host_bps, (double)p->host_link_delay_ns};
    return n;
}

/* Store-and-forward pipeline of `npk` packets sent back to back, all of
 * `full` wire bytes except the last (`last`).  Packet i starts on hop k
 * once it has fully arrived there and hop k has finished packet i-1, so
 * the arrival of the last bit is the longest path through the grid of
 * (packet, hop) transmission times (every path also crosses each hop's
 * delay once).  With identical packets the longest path takes all its
 * "next packet" steps at one hop j for the full packets and enters the
 * last packet's row at a hop j' >= j, so O(hops^2) work covers any size. */
static double pipeline_ns(const struct hop *h, int nh, uint64_t npk, double full, double last)
{
    double F[4], L[4], delays = 0;
    for (int k = 0; k < nh; k++) {
        F[k] = full * 8e9 / h[k].bps;
        L[k] = last * 8e9 / h[k].bps;
        delays += h[k].delay;
    }
    double best = 0;
    if (npk == 1) {
        for (int k = 0; k < nh; k++)
            best += L[k];
        return best + delays;
    }
    for (int j = 0; j < nh; j++)
        for (int jj = j; jj < nh; jj++) {
            double t = 0;
            for (int m = 0; m <= j; m++)
                t += F[m];                 /* packet 1 up to hop j */
            t += (double)(npk - 2) * F[j]; /* packets 2..n-1 at hop j */
            for (int m = j + 1; m <= jj; m++)
                t += F[m]; /* packet n-1 on to hop j' */
            for (int m = jj; m < nh; m++)
                t += L[m]; /* the last packet from hop j' */
            if (t > best) best = t;
        }
    return best + delays;
}

/* Across a spine layer with several spines: the two middle hops add delay
 * but no queueing between the message's own packets (each may take its own
 * spine), and the receiver's downlink serves packets in arrival order, so
 * a short last packet may go before the full one sent just ahead of it. */
static double sprayed_ns(const struct hop *h, uint64_t npk, double full, double last)
{
    double F0 = full * 8e9 / h[0].bps, L0 = last * 8e9 / h[0].bps;
    double F3 = full * 8e9 / h[3].bps, L3 = last * 8e9 / h[3].bps;
    double mid = h[0].delay + h[1].delay + h[2].delay;
    double midF = full * 8e9 / h[1].bps + full * 8e9 / h[2].bps + mid;
    double midL = last * 8e9 / h[1].bps + last * 8e9 / h[2].bps + mid;
    uint64_t nf = npk - 1; /* full packets before the last one */
    double an = (double)nf * F0 + L0 + midL;
    double fin = 0;
    bool last_done = false;
    /* Full packets reach the downlink every F0; once F3 <= F0 none of them
     * queues behind another, so only the tail needs stepping through. */
    uint64_t first = 1;
    if (F3 <= F0 && nf > 4 && 4 * F0 > midF - midL) {
        first = nf - 3;
        fin = (double)(first - 1) * F0 + midF + F3;
    }
    for (uint64_t i = first; i <= nf; i++) {
        double ai = (double)i * F0 + midF;
        if (!last_done && an < ai) {
            fin = (fin > an ? fin : an) + L3;
            last_done = true;
        }
        fin = (fin > ai ? fin : ai) + F3;
    }
    if (!last_done) fin = (fin > an ? fin : an) + L3;
    return fin + h[3].delay;
}

double hsim_ideal_ns(const struct hsim_net_params *p, uint32_t len, bool cross)
{
    struct hop h[4];
    int nh = path_hops(p, cross, h);
    uint64_t npk = hsim_packets(len, p->max_payload);
    double ovh = HSIM_DATA_HDR + (double)p->overhead_bytes;
    double full = p->max_payload + ovh;
    double last = (double)len - (double)(npk - 1) * p->max_payload + ovh;
    double t = cross && p->spines >= 2 ? sprayed_ns(h, npk, full, last)
                                       : pipeline_ns(h, nh, npk, full, last);
    return t + (double)p->rx_delay_ns;
}

double hsim_rtt_ns(const struct hsim_net_params *p, bool cross)
{
    struct hop h[4];
    int nh = path_hops(p, cross, h);
    double grant = HSIM_GRANT_HDR + (double)p->overhead_bytes;
    return hsim_ideal_ns(p, p->max_payload, cross) + pipeline_ns(h, nh, 1, grant, grant) +
           (double)p->rx_delay_ns;
}

/* ---- link measurements ---- */

uint64_t hsim_fabric_downlink_bytes(const struct vnet *net, int host)
{
    struct vnet_port_stats ps;
    vnet_get_port_stats(net, vnet_host_tor(net, host), vnet_host_port(net, host), &ps);
    return ps.occupancy;
}

void hsim_fabric_port_busy(const struct vnet *net, const struct hsim_opts *o, uint64_t *down,
                           uint64_t *up, uint64_t *max_any, uint64_t *max_down)
{
    struct vnet_port_stats ps;
    *down = *up = 0;
    if (max_any) *max_any = 0;
    if (max_down) *max_down = 0;
    for (int i = 0; i < o->hosts; i++) {
        vnet_get_port_stats(net, vnet_host_tor(net, i), vnet_host_port(net, i), &ps);
        *down += ps.busy_ns;
        if (max_down && ps.max_occupancy > *max_down) *max_down = ps.max_occupancy;
    }
    int R = o->racks, U = R > 1 ? o->spines : 0;
    for (int r = 0; r < R; r++)
        for (int u = 0; u < U; u++) {
            vnet_get_port_stats(net, r, vnet_tor_uplink_port(net, r, u), &ps);
            *up += ps.busy_ns;
        }
    if (max_any)
        for (int sw = 0; sw < vnet_num_switches(net); sw++)
            for (int p = 0; p < vnet_num_ports(net, sw); p++) {
                vnet_get_port_stats(net, sw, p, &ps);
                if (ps.max_occupancy > *max_any) *max_any = ps.max_occupancy;
            }
}
