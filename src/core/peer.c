/* Peers: one entry per remote host we exchange RPCs with, found by
 * address.  A peer keeps the unscheduled cutoffs it announced, the payload
 * that fits the path to it, when each of its Homa ports was last heard
 * from (liveness: timer.c), its prod budgets, and the acks it is owed. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static uint64_t peer_key(const struct homa_hnode *n)
{
    return homa_addr_hash(&HOMA_CONTAINER(n, struct homa_peer, hnode)->addr);
}

int homa_peer_table_init(struct homa_engine *eng)
{
    return homa_htab_init(&eng->peers, 64);
}

void homa_peer_table_destroy(struct homa_engine *eng)
{
    for (size_t i = 0; i < eng->peers.nb; i++) {
        while (eng->peers.b[i]) {
            struct homa_peer *p = HOMA_CONTAINER(eng->peers.b[i], struct homa_peer, hnode);
            eng->peers.b[i] = p->hnode.next;
            free(p->ports);
            free(p);
        }
    }
    homa_htab_destroy(&eng->peers);
}

struct homa_peer *homa_peer_get(struct homa_engine *eng, const homa_addr *addr, bool create)
{
    uint64_t h = homa_addr_hash(addr);
    for (struct homa_hnode *n = homa_htab_first(&eng->peers, h); n; n = n->next) {
        struct homa_peer *p = HOMA_CONTAINER(n, struct homa_peer, hnode);
        if (homa_addr_eq(&p->addr, addr)) return p;
    }
    if (!create) return NULL;
    homa_htab_grow_if_full(&eng->peers, peer_key);
    struct homa_peer *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->addr = *addr;
    /* Until the peer announces its cutoffs, assume it uses our defaults. */
    memcpy(p->cutoffs, eng->cfg.unsched_cutoffs, sizeof(p->cutoffs));
    p->cutoff_version = 0;
    p->idle_since = eng->now;
    p->last_heard = eng->now;
    for (int c = 0; c < HOMA_BUDGET_CLASSES; c++)
        hlist_init(&p->budget_wait[c]);
    hlist_init(&p->waiting_node);
    /* Packets must fit the path: a datagram above its MTU is sent as IP
     * fragments, and losing any one of them loses the whole packet. */
    uint32_t pl = eng->ops.path_payload ? eng->ops.path_payload(eng->ops.ctx, addr) : 0;
    p->max_payload = pl > 0 && pl < eng->cfg.max_payload ? pl : eng->cfg.max_payload;
    homa_htab_add(&eng->peers, &p->hnode, h);
    return p;
}

void homa_peer_heard(struct homa_peer *peer, uint16_t port, uint64_t now)
{
    peer->last_heard = now;
    /* Packets come in runs from one port: try the last one found first. */
    uint32_t h = peer->port_hint;
    if (h < peer->num_ports && peer->ports[h].port == port) {
        peer->ports[h].last_heard = now;
        return;
    }
    uint32_t oldest = 0;
    for (uint32_t i = 0; i < peer->num_ports; i++) {
        if (peer->ports[i].port == port) {
            peer->ports[i].last_heard = now;
            peer->port_hint = i;
            return;
        }
        if (peer->ports[i].last_heard < peer->ports[oldest].last_heard) oldest = i;
    }
    if (peer->num_ports == peer->cap_ports && peer->cap_ports < HOMA_PEER_MAX_PORTS) {
        uint32_t cap = peer->cap_ports ? peer->cap_ports * 2 : 4;
        struct homa_peer_port *np = realloc(peer->ports, cap * sizeof(*np));
        if (np) {
            peer->ports = np;
            peer->cap_ports = cap;
        }
    }
    /* Full (or out of memory): forget the port heard from longest ago; its
     * RPCs then count as unheard from, which only makes a timeout possible
     * after their own silence, never earlier. */
    uint32_t i = peer->num_ports < peer->cap_ports ? peer->num_ports++ : oldest;
    if (i >= peer->cap_ports) return; /* no memory at all: peer-wide liveness only */
    peer->ports[i].port = port;
    peer->ports[i].last_heard = now;
    peer->ports[i].doubt_scanned = 0;
    peer->port_hint = i;
}

uint64_t homa_peer_port_heard(const struct homa_peer *peer, uint16_t port)
{
    uint32_t h = peer->port_hint;
    if (h < peer->num_ports && peer->ports[h].port == port) return peer->ports[h].last_heard;
    for (uint32_t i = 0; i < peer->num_ports; i++)
        if (peer->ports[i].port == port) return peer->ports[i].last_heard;
    return 0;
}

static uint64_t forgive(uint64_t heard, uint64_t now, uint64_t late)
{
    return now - heard > late ? heard + late : now;
}

void homa_peers_forgive(struct homa_engine *eng, uint64_t now, uint64_t late)
{
    for (size_t i = 0; i < eng->peers.nb; i++) {
        for (struct homa_hnode *n = eng->peers.b[i]; n; n = n->next) {
            struct homa_peer *p = HOMA_CONTAINER(n, struct homa_peer, hnode);
            p->last_heard = forgive(p->last_heard, now, late);
            for (uint32_t k = 0; k < p->num_ports; k++)
                p->ports[k].last_heard = forgive(p->ports[k].last_heard, now, late);
        }
    }
}

static void peer_free(struct homa_engine *eng, struct homa_peer *peer)
{
    if (!homa_htab_del(&eng->peers, &peer->hnode, homa_addr_hash(&peer->addr))) return;
    hlist_del(&peer->waiting_node);
    free(peer->ports);
    free(peer);
}

/* Frees peers that have had no RPCs for a while; their pending acks are
 * not lost for good: a server that still waits asks again with NEED_ACK and
 * the client acks any id it does not know. */
void homa_peers_reap(struct homa_engine *eng, uint64_t now)
{
    uint64_t idle = (uint64_t)eng->cfg.timeout_ticks * eng->cfg.tick_ns;
    for (size_t i = 0; i < eng->peers.nb; i++) {
        struct homa_hnode *n = eng->peers.b[i];
        while (n) {
            struct homa_hnode *next = n->next;
            struct homa_peer *p = HOMA_CONTAINER(n, struct homa_peer, hnode);
            if (p->num_rpcs == 0 && now - p->idle_since > idle) peer_free(eng, p);
            n = next;
        }
    }
}

/* ---------- acks ---------- */

void homa_peer_take_acks(struct homa_peer *peer, uint16_t cport, uint64_t skip,
                         struct homa_wire_pkt *pkt)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < peer->num_acks; i++) {
        struct homa_pending_ack *a = &peer->acks[i];
        if (a->client_id == skip) continue; /* already in pkt */
        if (a->client_port == cport && pkt->u.ack.num_acks < HOMA_MAX_ACKS_PER_PKT) {
            pkt->u.ack.acks[pkt->u.ack.num_acks].client_id = a->client_id;
            pkt->u.ack.acks[pkt->u.ack.num_acks].server_port = a->server_port;
            pkt->u.ack.num_acks++;
        } else {
            peer->acks[kept++] = *a;
        }
    }
    peer->num_acks = kept;
}

/* Sends, in one ACK packet, up to HOMA_MAX_ACKS_PER_PKT of the acks the
 * peer is owed from local port cport (the oldest first); keeps the rest.
 * Returns how many it sent. */
static uint32_t ack_flush(struct homa_engine *eng, struct homa_peer *peer, uint16_t cport)
{
    struct homa_wire_pkt pkt;
    memset(&pkt, 0, sizeof(pkt));
    pkt.type = HOMA_PKT_ACK;
    homa_peer_take_acks(peer, cport, 0, &pkt);
    if (pkt.u.ack.num_acks == 0) return 0;
    pkt.sender_id = pkt.u.ack.acks[0].client_id;
    homa_ctl_queue(eng, NULL, &peer->addr, cport, pkt.u.ack.acks[0].server_port, &pkt);
    return pkt.u.ack.num_acks;
}

void homa_peer_queue_ack(struct homa_engine *eng, struct homa_peer *peer, uint64_t client_id,
                         uint16_t server_port, uint16_t client_port)
{
    /* Full: flush the oldest five (of one port) in an ACK packet. */
    if (peer->num_acks == HOMA_PEER_MAX_ACKS) ack_flush(eng, peer, peer->acks[0].client_port);
    struct homa_pending_ack *a = &peer->acks[peer->num_acks++];
    a->client_id = client_id;
    a->server_port = server_port;
    a->client_port = client_port;
}

int homa_engine_port_flush_acks(homa_engine *eng, uint64_t now, uint16_t num)
{
    if (!eng) return HOMA_ERR_INVAL;
    if (!homa_port_find(eng, num)) return HOMA_ERR_NO_PORT;
    eng->now = now;
    int pkts = 0;
    for (size_t i = 0; i < eng->peers.nb; i++) {
        for (struct homa_hnode *n = eng->peers.b[i]; n; n = n->next) {
            struct homa_peer *p = HOMA_CONTAINER(n, struct homa_peer, hnode);
            while (ack_flush(eng, p, num) > 0)
                pkts++;
        }
    }
    if (pkts > 0) homa_notify_tx(eng);
    return pkts;
}
