/* vnet: links and switches.  Store-and-forward switches whose egress ports
 * each have 8 strict-priority FIFO queues and a finite byte buffer; a star
 * (one switch) or a leaf-spine (racks of hosts under a ToR each, every ToR
 * linked to each spine, one spine drawn per packet).  See vnet.h for the
 * model and vnet_internal.h for the other parts. */
#include "vnet_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- Ports and routing ---- */

static void port_transmit(struct vnet *net, struct port *pt, struct pbuf *p)
{
    uint64_t tx = tx_time(p->wire, pt->bps, &pt->carry);
    pt->busy_until = net->now + tx;
    pt->cur_wire = p->wire;
    pt->tx_pkts++;
    pt->tx_bytes += p->len;
    pt->busy_ns += tx;
    p->at = pt->peer;
    uint64_t t = pt->busy_until + pt->delay_ns + (pt->peer ? net->cfg.switch_delay_ns : 0);
    vn_schedule(net, t, EVK_ARRIVE, NULL, p);
}

static inline uint64_t port_occupancy(const struct port *pt, uint64_t now)
{
    return pt->queued_wire + (pt->busy_until > now ? pt->cur_wire : 0);
}

static void port_enqueue(struct vnet *net, struct port *pt, struct pbuf *p)
{
    uint64_t occ = port_occupancy(pt, net->now) + p->wire;
    if (pt->buffer && occ > pt->buffer) {
        pt->drops++;
        pt->drop_bytes += p->len;
        net->st.drops_queue++;
        TRACE(net, VNET_TR_DROP_QUEUE, p);
        pbuf_free(net, p);
        return;
    }
    if (occ > pt->max_occ) pt->max_occ = occ;
    if (pt->busy_until <= net->now && pt->mask == 0) {
        port_transmit(net, pt, p);
        return;
    }
    struct pqueue *q = &pt->q[p->prio];
    p->next = NULL;
    if (q->tail)
        q->tail->next = p;
    else
        q->head = p;
    q->tail = p;
    pt->mask |= 1u << p->prio;
    pt->queued_wire += p->wire;
    pt->queued[p->prio]++;
    /* One wake per port at a time: the next packet is chosen only when the
     * link frees, so later high-priority arrivals can still overtake. */
    if (!pt->wake_pending) {
        pt->wake_pending = true;
        vn_schedule(net, pt->busy_until, EVK_WAKE, NULL, pt);
    }
}

void vn_port_wake(struct vnet *net, struct port *pt)
{
    pt->wake_pending = false;
    if (!pt->mask) return;
    int prio = 31 - __builtin_clz(pt->mask);
    struct pqueue *q = &pt->q[prio];
    struct pbuf *p = q->head;
    q->head = p->next;
    if (!q->head) {
        q->tail = NULL;
        pt->mask &= ~(1u << prio);
    }
    pt->queued_wire -= p->wire;
    pt->queued[prio]--;
    port_transmit(net, pt, p);
    if (pt->mask) {
        pt->wake_pending = true;
        vn_schedule(net, pt->busy_until, EVK_WAKE, NULL, pt);
    }
}

void vn_switch_receive(struct vnet *net, struct vnet_switch *sw, struct pbuf *p)
{
    const struct host *dh = net->hosts[p->dst];
    struct port *pt;
    if (sw->rack < 0) {
        pt = sw->ports[dh->rack];
    } else if (dh->rack == sw->rack) {
        pt = sw->ports[dh->slot];
    } else {
        /* Packet spraying: uniform spine per packet. */
        int nup = sw->nports - sw->n_down;
        int u = nup == 1 ? 0 : (int)vnet_rng_below(&net->rng, (uint64_t)nup);
        pt = sw->ports[sw->n_down + u];
    }
    port_enqueue(net, pt, p);
}

static struct port *port_new(uint64_t bps, uint64_t delay, uint64_t buffer,
                             struct vnet_switch *peer)
{
    struct port *pt = vn_xcalloc(1, sizeof(*pt));
    pt->bps = bps;
    pt->delay_ns = delay;
    pt->buffer = buffer;
    pt->peer = peer;
    return pt;
}

static void switch_add_port(struct vnet_switch *sw, struct port *pt)
{
    if (sw->nports == sw->cap) {
        sw->cap = sw->cap ? 2 * sw->cap : 16;
        sw->ports = vn_xrealloc(sw->ports, (size_t)sw->cap * sizeof(*sw->ports));
    }
    sw->ports[sw->nports++] = pt;
}

static struct vnet_switch *switch_new(int rack)
{
    struct vnet_switch *sw = vn_xcalloc(1, sizeof(*sw));
    sw->rack = rack;
    return sw;
}

void vn_switches_create(struct vnet *net)
{
    bool ls = net->cfg.topology == VNET_LEAF_SPINE;
    int R = net->cfg.racks, U = net->cfg.spines;
    net->nsw = R + U;
    net->sw = vn_xcalloc((size_t)net->nsw, sizeof(*net->sw));
    for (int r = 0; r < R; r++)
        net->sw[r] = switch_new(r);
    for (int u = 0; u < U; u++)
        net->sw[R + u] = switch_new(-1);
    if (ls) {
        const struct vnet_config *c = &net->cfg;
        for (int r = 0; r < R; r++) {
            struct vnet_switch *tor = net->sw[r];
            for (int i = 0; i < c->hosts_per_rack; i++)
                switch_add_port(
                    tor, port_new(c->host_bps, c->host_delay_ns, c->port_buffer_bytes, NULL));
            tor->n_down = c->hosts_per_rack;
            for (int u = 0; u < U; u++)
                switch_add_port(tor, port_new(c->uplink_bps, c->uplink_delay_ns,
                                              c->port_buffer_bytes, net->sw[R + u]));
        }
        for (int u = 0; u < U; u++)
            for (int r = 0; r < R; r++)
                switch_add_port(net->sw[R + u], port_new(c->uplink_bps, c->uplink_delay_ns,
                                                         c->port_buffer_bytes, net->sw[r]));
    }
}

void vn_switch_add_host_port(struct vnet *net, struct vnet_switch *sw)
{
    switch_add_port(
        sw, port_new(net->cfg.host_bps, net->cfg.host_delay_ns, net->cfg.port_buffer_bytes, NULL));
    sw->n_down = sw->nports;
}

static void port_free_queues(struct vnet *net, struct port *pt)
{
    for (int p = 0; p < VNET_NUM_PRIOS; p++) {
        struct pbuf *b = pt->q[p].head;
        while (b) {
            struct pbuf *next = b->next;
            pbuf_free(net, b);
            b = next;
        }
    }
}

void vn_switches_destroy(struct vnet *net)
{
    for (int s = 0; s < net->nsw; s++) {
        struct vnet_switch *sw = net->sw[s];
        for (int p = 0; p < sw->nports; p++) {
            port_free_queues(net, sw->ports[p]);
            free(sw->ports[p]);
        }
        free(sw->ports);
        free(sw);
    }
    free(net->sw);
}

/* ---- Switch and port queries ---- */

int vnet_num_switches(const struct vnet *net)
{
    return net->nsw;
}

int vnet_num_ports(const struct vnet *net, int sw)
{
    return sw >= 0 && sw < net->nsw ? net->sw[sw]->nports : -1;
}

int vnet_host_tor(const struct vnet *net, int host)
{
    return vn_host_at(net, host)->rack;
}

int vnet_host_port(const struct vnet *net, int host)
{
    return vn_host_at(net, host)->slot;
}

int vnet_tor_uplink_port(const struct vnet *net, int tor, int spine)
{
    if (tor < 0 || tor >= net->cfg.racks || spine < 0 || spine >= net->cfg.spines) return -1;
    return net->sw[tor]->n_down + spine;
}

static struct port *port_at(const struct vnet *net, int sw, int port)
{
    if (sw < 0 || sw >= net->nsw || port < 0 || port >= net->sw[sw]->nports) return NULL;
    return net->sw[sw]->ports[port];
}

int vnet_set_port_buffer(struct vnet *net, int sw, int port, uint64_t bytes)
{
    struct port *pt = port_at(net, sw, port);
    if (!pt) return -1;
    pt->buffer = bytes;
    return 0;
}

/* ---- Port statistics ---- */

int vnet_get_port_stats(const struct vnet *net, int sw, int port, struct vnet_port_stats *out)
{
    const struct port *pt = port_at(net, sw, port);
    if (!pt) return -1;
    memset(out, 0, sizeof(*out));
    out->tx_pkts = pt->tx_pkts;
    out->tx_bytes = pt->tx_bytes;
    out->drops = pt->drops;
    out->drop_bytes = pt->drop_bytes;
    out->busy_ns = pt->busy_ns;
    out->max_occupancy = pt->max_occ;
    out->occupancy = port_occupancy(pt, net->now);
    memcpy(out->queued, pt->queued, sizeof(out->queued));
    return 0;
}

void vn_ports_reset_stats(struct vnet *net)
{
    for (int s = 0; s < net->nsw; s++) {
        struct vnet_switch *sw = net->sw[s];
        for (int p = 0; p < sw->nports; p++) {
            struct port *pt = sw->ports[p];
            pt->tx_pkts = pt->tx_bytes = pt->drops = pt->drop_bytes = pt->busy_ns = 0;
            pt->max_occ = port_occupancy(pt, net->now);
        }
    }
}
