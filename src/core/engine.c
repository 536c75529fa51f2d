/* Engine object, tables (RPCs, peers, ports, tombstones), RPC lifecycle and
 * the application-facing entry points.  Packet handling is in input.c,
 * transmission in output.c, receiver scheduling in grant.c. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---------- hashing ---------- */

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t addr_hash(const homa_addr *a)
{
    uint64_t lo, hi;
    memcpy(&lo, a->bytes, 8);
    memcpy(&hi, a->bytes + 8, 8);
    return mix64(lo ^ mix64(hi));
}

static inline bool addr_eq(const homa_addr *a, const homa_addr *b)
{
    return memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

static uint64_t server_key(uint64_t id, const homa_addr *a, uint16_t port)
{
    return mix64(id ^ addr_hash(a) ^ ((uint64_t)port << 48));
}

/* Grows a chained table of struct homa_rpc (linked by hnext) when it gets full. */
static void rpc_tab_grow(struct homa_rpc ***tab, size_t *nb, bool server)
{
    size_t nnb = *nb * 2;
    struct homa_rpc **nt = calloc(nnb, sizeof(*nt));
    if (!nt) return; /* keep the old, longer chains */
    for (size_t i = 0; i < *nb; i++) {
        struct homa_rpc *r = (*tab)[i];
        while (r) {
            struct homa_rpc *next = r->hnext;
            uint64_t h = server ? server_key(r->id, &r->peer->addr, r->peer_port) : mix64(r->id);
            r->hnext = nt[h & (nnb - 1)];
            nt[h & (nnb - 1)] = r;
            r = next;
        }
    }
    free(*tab);
    *tab = nt;
    *nb = nnb;
}

static void rpc_tab_insert(struct homa_engine *eng, struct homa_rpc *rpc)
{
    bool server = rpc->id & 1;
    struct homa_rpc ***tab = server ? &eng->server_tab : &eng->client_tab;
    size_t *nb = server ? &eng->server_nb : &eng->client_nb;
    size_t *n = server ? &eng->server_n : &eng->client_n;
    if (*n >= *nb) rpc_tab_grow(tab, nb, server);
    uint64_t h = server ? server_key(rpc->id, &rpc->peer->addr, rpc->peer_port) : mix64(rpc->id);
    rpc->hnext = (*tab)[h & (*nb - 1)];
    (*tab)[h & (*nb - 1)] = rpc;
    (*n)++;
}

static void rpc_tab_remove(struct homa_engine *eng, struct homa_rpc *rpc)
{
    bool server = rpc->id & 1;
    struct homa_rpc **tab = server ? eng->server_tab : eng->client_tab;
    size_t nb = server ? eng->server_nb : eng->client_nb;
    uint64_t h = server ? server_key(rpc->id, &rpc->peer->addr, rpc->peer_port) : mix64(rpc->id);
    for (struct homa_rpc **pp = &tab[h & (nb - 1)]; *pp; pp = &(*pp)->hnext) {
        if (*pp == rpc) {
            *pp = rpc->hnext;
            if (server)
                eng->server_n--;
            else
                eng->client_n--;
            return;
        }
    }
}

struct homa_rpc *homa_find_client(struct homa_engine *eng, uint64_t id)
{
    for (struct homa_rpc *r = eng->client_tab[mix64(id) & (eng->client_nb - 1)]; r; r = r->hnext)
        if (r->id == id) {
            homa_timer_soon(eng, r);
            return r;
        }
    return NULL;
}

struct homa_rpc *homa_find_server(struct homa_engine *eng, uint64_t id, const homa_addr *addr,
                                  uint16_t peer_port)
{
    uint64_t h = server_key(id, addr, peer_port);
    for (struct homa_rpc *r = eng->server_tab[h & (eng->server_nb - 1)]; r; r = r->hnext)
        if (r->id == id && r->peer_port == peer_port && addr_eq(&r->peer->addr, addr)) {
            homa_timer_soon(eng, r);
            return r;
        }
    return NULL;
}

/* ---------- peers ---------- */

struct homa_peer *homa_peer_get(struct homa_engine *eng, const homa_addr *addr, bool create)
{
    uint64_t h = addr_hash(addr);
    for (struct homa_peer *p = eng->peer_tab[h & (eng->peer_nb - 1)]; p; p = p->hnext)
        if (addr_eq(&p->addr, addr)) return p;
    if (!create) return NULL;
    if (eng->peer_n >= eng->peer_nb) {
        size_t nnb = eng->peer_nb * 2;
        struct homa_peer **nt = calloc(nnb, sizeof(*nt));
        if (nt) {
            for (size_t i = 0; i < eng->peer_nb; i++) {
                struct homa_peer *p = eng->peer_tab[i];
                while (p) {
                    struct homa_peer *next = p->hnext;
                    uint64_t ph = addr_hash(&p->addr) & (nnb - 1);
                    p->hnext = nt[ph];
                    nt[ph] = p;
                    p = next;
                }
            }
            free(eng->peer_tab);
            eng->peer_tab = nt;
            eng->peer_nb = nnb;
        }
    }
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
    size_t b = h & (eng->peer_nb - 1);
    p->hnext = eng->peer_tab[b];
    eng->peer_tab[b] = p;
    eng->peer_n++;
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
    for (size_t i = 0; i < eng->peer_nb; i++) {
        for (struct homa_peer *p = eng->peer_tab[i]; p; p = p->hnext) {
            p->last_heard = forgive(p->last_heard, now, late);
            for (uint32_t k = 0; k < p->num_ports; k++)
                p->ports[k].last_heard = forgive(p->ports[k].last_heard, now, late);
        }
    }
}

static void peer_free(struct homa_engine *eng, struct homa_peer *peer)
{
    size_t b = addr_hash(&peer->addr) & (eng->peer_nb - 1);
    for (struct homa_peer **pp = &eng->peer_tab[b]; *pp; pp = &(*pp)->hnext) {
        if (*pp == peer) {
            *pp = peer->hnext;
            eng->peer_n--;
            hlist_del(&peer->waiting_node);
            free(peer->ports);
            free(peer);
            return;
        }
    }
}

/* Frees peers that have had no RPCs for a while; their pending acks are
 * not lost for good: a server that still waits asks again with NEED_ACK and
 * the client acks any id it does not know. */
static void peers_reap(struct homa_engine *eng, uint64_t now)
{
    uint64_t idle = (uint64_t)eng->cfg.timeout_ticks * eng->cfg.tick_ns;
    for (size_t i = 0; i < eng->peer_nb; i++) {
        struct homa_peer *p = eng->peer_tab[i];
        while (p) {
            struct homa_peer *next = p->hnext;
            if (p->num_rpcs == 0 && now - p->idle_since > idle) peer_free(eng, p);
            p = next;
        }
    }
}

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
    for (size_t i = 0; i < eng->peer_nb; i++)
        for (struct homa_peer *p = eng->peer_tab[i]; p; p = p->hnext)
            while (ack_flush(eng, p, num) > 0)
                pkts++;
    if (pkts > 0) homa_notify_tx(eng);
    return pkts;
}

/* ---------- ports ---------- */

struct homa_port *homa_port_find(struct homa_engine *eng, uint16_t num)
{
    for (struct homa_port *p = eng->port_tab[num & 63]; p; p = p->hnext)
        if (p->num == num) return p;
    return NULL;
}

int homa_engine_port_open(homa_engine *eng, uint16_t num)
{
    if (!eng || num == 0) return HOMA_ERR_INVAL;
    if (homa_port_find(eng, num)) return HOMA_ERR_PORT_IN_USE;
    if (eng->num_ports >= eng->cfg.max_ports) return HOMA_ERR_LIMIT;
    struct homa_port *p = calloc(1, sizeof(*p));
    if (!p) return HOMA_ERR_NOMEM;
    p->num = num;
    hlist_init(&p->ready);
    p->hnext = eng->port_tab[num & 63];
    eng->port_tab[num & 63] = p;
    eng->num_ports++;
    return 0;
}

int homa_engine_port_rpcs(const homa_engine *eng, uint16_t num)
{
    if (!eng) return HOMA_ERR_INVAL;
    struct homa_port *port = homa_port_find((struct homa_engine *)eng, num);
    if (!port) return HOMA_ERR_NO_PORT;
    return port->num_rpcs > INT32_MAX ? INT32_MAX : (int)port->num_rpcs;
}

int homa_engine_port_set_class(homa_engine *eng, uint16_t num, int sched_class)
{
    if (!eng || sched_class < 0 || sched_class >= HOMA_SCHED_CLASSES) return HOMA_ERR_INVAL;
    struct homa_port *port = homa_port_find(eng, num);
    if (!port) return HOMA_ERR_NO_PORT;
    port->sched_class = (uint8_t)sched_class;
    return 0;
}

int homa_engine_port_close(homa_engine *eng, uint64_t now, uint16_t num)
{
    if (!eng) return HOMA_ERR_INVAL;
    struct homa_port *port = homa_port_find(eng, num);
    if (!port) return HOMA_ERR_NO_PORT;
    eng->now = now;
    struct hlist *n = eng->rpcs.next;
    while (n != &eng->rpcs) {
        struct homa_rpc *r = HOMA_CONTAINER(n, struct homa_rpc, all_node);
        n = n->next;
        if (r->port == port) homa_rpc_free(eng, r);
    }
    /* zombies of this port keep a dangling port pointer: clear it */
    for (struct hlist *z = eng->zombies.next; z != &eng->zombies; z = z->next)
        HOMA_CONTAINER(z, struct homa_rpc, all_node)->port = NULL;
    for (struct homa_port **pp = &eng->port_tab[num & 63]; *pp; pp = &(*pp)->hnext) {
        if (*pp == port) {
            *pp = port->hnext;
            break;
        }
    }
    free(port);
    eng->num_ports--;
    homa_notify_tx(eng);
    return 0;
}

/* ---------- tombstones ---------- */

static uint32_t tomb_bucket(const struct homa_engine *eng, uint64_t id, const homa_addr *a,
                            uint16_t port)
{
    return (uint32_t)(server_key(id, a, port) & (eng->tomb_nb - 1));
}

bool homa_tomb_find(struct homa_engine *eng, uint64_t id, const homa_addr *addr, uint16_t port)
{
    uint64_t last = 0;
    bool hit = false;
    for (int32_t i = eng->tomb_buckets[tomb_bucket(eng, id, addr, port)]; i >= 0;
         i = eng->tombs[i].hnext) {
        struct homa_tomb *t = &eng->tombs[i];
        if (t->id == id && t->port == port && addr_eq(&t->addr, addr)) {
            hit = true;
            if (t->expires > last) last = t->expires;
        }
    }
    /* A client still asking about the RPC is alive (it survived the
     * silence that made us give up, e.g. descheduled, and restarts the
     * request after each RPC_UNKNOWN until it fails): the tombstone must
     * outlive its asking, or the request would run twice.  So a hit past
     * half its life adds a fresh one (the ring stays ordered by expiry;
     * the old entry expires on its own). */
    if (hit) {
        uint32_t ticks =
            eng->cfg.tombstone_ticks ? eng->cfg.tombstone_ticks : 2 * eng->cfg.timeout_ticks;
        uint64_t life = (uint64_t)ticks * eng->cfg.tick_ns;
        if (last < eng->now + life / 2) homa_tomb_add(eng, id, addr, port);
    }
    return hit;
}

static void tomb_pop_oldest(struct homa_engine *eng)
{
    uint32_t idx = eng->tomb_head;
    struct homa_tomb *t = &eng->tombs[idx];
    uint32_t b = tomb_bucket(eng, t->id, &t->addr, t->port);
    for (int32_t *pp = &eng->tomb_buckets[b]; *pp >= 0; pp = &eng->tombs[*pp].hnext) {
        if (*pp == (int32_t)idx) {
            *pp = t->hnext;
            break;
        }
    }
    t->used = false;
    eng->tomb_head = (eng->tomb_head + 1) % eng->cfg.max_tombstones;
    eng->tomb_count--;
    eng->ctr.tombstones = eng->tomb_count;
}

void homa_tomb_add(struct homa_engine *eng, uint64_t id, const homa_addr *addr, uint16_t port)
{
    if (eng->tomb_count == eng->cfg.max_tombstones) tomb_pop_oldest(eng);
    uint32_t idx = (eng->tomb_head + eng->tomb_count) % eng->cfg.max_tombstones;
    struct homa_tomb *t = &eng->tombs[idx];
    uint32_t ticks =
        eng->cfg.tombstone_ticks ? eng->cfg.tombstone_ticks : 2 * eng->cfg.timeout_ticks;
    t->id = id;
    t->addr = *addr;
    t->port = port;
    t->expires = eng->now + (uint64_t)ticks * eng->cfg.tick_ns;
    t->used = true;
    uint32_t b = tomb_bucket(eng, id, addr, port);
    t->hnext = eng->tomb_buckets[b];
    eng->tomb_buckets[b] = (int32_t)idx;
    eng->tomb_count++;
    eng->ctr.tombstones = eng->tomb_count;
}

static void tombs_expire(struct homa_engine *eng, uint64_t now)
{
    while (eng->tomb_count > 0 && eng->tombs[eng->tomb_head].expires <= now)
        tomb_pop_oldest(eng);
}

/* ---------- control queue ---------- */

void homa_ctl_queue(struct homa_engine *eng, struct homa_rpc *rpc, const homa_addr *dst,
                    uint16_t sport, uint16_t dport, struct homa_wire_pkt *pkt)
{
    bool grant = pkt->type == HOMA_PKT_GRANT && rpc != NULL;
    if (grant && rpc->grant_ctl != 0 && rpc->grant_ctl - 1 >= eng->ctl_seq &&
        rpc->grant_ctl - 1 < eng->ctl_seq + eng->ctl_count) {
        /* A GRANT of this RPC is still waiting to be pulled: a grant only
         * moves forward, so the newer one replaces it (one packet where
         * reading several DATA packets in a row would queue several). */
        uint64_t k = rpc->grant_ctl - 1 - eng->ctl_seq;
        struct homa_ctl *c = &eng->ctl[(eng->ctl_head + k) % HOMA_MAX_CTL_QUEUE];
        if (c->type == HOMA_PKT_GRANT && c->sport == sport && c->dport == dport &&
            memcmp(&c->dst, dst, sizeof(*dst)) == 0) {
            pkt->sport = sport;
            pkt->dport = dport;
            c->hdr_len = (uint16_t)homa_wire_encode(pkt, c->hdr);
            eng->ctr.grants_merged++;
            return;
        }
    }
    if (eng->ctl_count == HOMA_MAX_CTL_QUEUE) {
        /* Bounded: under a flood the oldest control packet is dropped; the
         * protocol's timers recover from lost control packets anyway. */
        eng->ctl_head = (eng->ctl_head + 1) % HOMA_MAX_CTL_QUEUE;
        eng->ctl_count--;
        eng->ctl_seq++;
    }
    if (grant) rpc->grant_ctl = eng->ctl_seq + eng->ctl_count + 1;
    struct homa_ctl *c = &eng->ctl[(eng->ctl_head + eng->ctl_count) % HOMA_MAX_CTL_QUEUE];
    eng->ctl_count++;
    pkt->sport = sport;
    pkt->dport = dport;
    c->dst = *dst;
    c->sport = sport;
    c->dport = dport;
    c->type = pkt->type;
    c->hdr_len = (uint16_t)homa_wire_encode(pkt, c->hdr);
}

void homa_notify_tx(struct homa_engine *eng)
{
    if (eng->ops.want_tx && (eng->ctl_count > 0 || homa_out_queued(eng) > 0))
        eng->ops.want_tx(eng->ops.ctx);
}

/* ---------- RPC lifecycle ---------- */

static struct homa_rpc *rpc_new(struct homa_engine *eng, uint64_t id, struct homa_port *port,
                                struct homa_peer *peer, uint16_t peer_port)
{
    struct homa_rpc *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->id = id;
    r->port = port;
    r->peer = peer;
    r->peer_port = peer_port;
    r->birth = eng->now;
    r->sched_class = port->sched_class;
    homa_rpc_heard(eng, r, eng->now);
    r->last_prodded = eng->now;
    r->last_told = eng->now;
    hlist_init(&r->ready_node);
    hlist_init(&r->send_node);
    hlist_init(&r->rtx_node);
    hlist_init(&r->grant_node);
    hlist_init(&r->fifo_node);
    hlist_init(&r->timer_node);
    hlist_init(&r->wait_node);
    hlist_init(&r->mem_node);
    hlist_add_tail(&eng->rpcs, &r->all_node);
    homa_timer_soon(eng, r);
    rpc_tab_insert(eng, r);
    peer->num_rpcs++;
    port->num_rpcs++;
    eng->ctr.rpcs_live++;
    if (id & 1) eng->server_rpcs++;
    return r;
}

struct homa_rpc *homa_rpc_new_server(struct homa_engine *eng, uint64_t id, struct homa_port *port,
                                     struct homa_peer *peer, uint16_t peer_port);
struct homa_rpc *homa_rpc_new_server(struct homa_engine *eng, uint64_t id, struct homa_port *port,
                                     struct homa_peer *peer, uint16_t peer_port)
{
    struct homa_rpc *r = rpc_new(eng, id, port, peer, peer_port);
    if (r) r->state = RPC_SERVER_INCOMING;
    return r;
}

uint8_t *homa_buf_get(struct homa_engine *eng, uint32_t len)
{
    if (len >= HOMA_BUFCACHE_MIN) {
        /* Newest first (warmest); a close fit only, so a small message
         * does not pin a large buffer. */
        for (uint32_t i = eng->bufcache_n; i-- > 0;) {
            uint32_t cap = eng->bufcache[i].cap;
            if (cap < len || cap - len > len / 8) continue;
            uint8_t *b = eng->bufcache[i].buf;
            eng->bufcache_bytes -= cap;
            eng->bufcache[i] = eng->bufcache[--eng->bufcache_n];
            return b;
        }
    }
    return malloc(len ? len : 1);
}

void homa_buf_put(struct homa_engine *eng, uint8_t *buf, uint32_t cap)
{
    if (!buf) return;
    if (cap < HOMA_BUFCACHE_MIN || cap > HOMA_BUFCACHE_BYTES / 2) {
        free(buf);
        return;
    }
    /* Full: drop the oldest entry. */
    while (eng->bufcache_n > 0 && (eng->bufcache_n == HOMA_BUFCACHE_SLOTS ||
                                   eng->bufcache_bytes + cap > HOMA_BUFCACHE_BYTES)) {
        free(eng->bufcache[0].buf);
        eng->bufcache_bytes -= eng->bufcache[0].cap;
        memmove(&eng->bufcache[0], &eng->bufcache[1], --eng->bufcache_n * sizeof(eng->bufcache[0]));
    }
    eng->bufcache[eng->bufcache_n].buf = buf;
    eng->bufcache[eng->bufcache_n].cap = cap;
    eng->bufcache_n++;
    eng->bufcache_bytes += cap;
}

void homa_free_outbuf(struct homa_engine *eng, uint8_t *buf, uint32_t cap)
{
    if (!buf) return;
    if (eng->tx_pins == 0) {
        homa_buf_put(eng, buf, cap);
        return;
    }
    if (eng->deferred_n == eng->deferred_cap) {
        size_t cap = eng->deferred_cap ? eng->deferred_cap * 2 : 16;
        void **d = realloc(eng->deferred, cap * sizeof(*d));
        if (!d) {
            /* Cannot defer: leak-free fallback is impossible without risking
             * a use-after-free in the driver, so keep the buffer until destroy. */
            return;
        }
        eng->deferred = d;
        eng->deferred_cap = cap;
    }
    eng->deferred[eng->deferred_n++] = buf;
}

void homa_in_destroy(struct homa_engine *eng, struct homa_rpc *rpc)
{
    if (eng->placing && eng->place_rpc == rpc) {
        /* A driver may be writing into the buffer right now: keep it until
         * homa_engine_place_end/cancel, which then drops the packet. */
        eng->place_rpc = NULL;
        eng->place_orphan = rpc->in.buf;
        rpc->in.buf = NULL;
    }
    homa_buf_put(eng, rpc->in.buf, rpc->in.length);
    rpc->in.buf = NULL;
    homa_msgin_destroy(&rpc->in);
}

static void rpc_release_in(struct homa_engine *eng, struct homa_rpc *rpc)
{
    if (!rpc->in.active) return;
    homa_grant_remove(eng, rpc);
    eng->ctr.incoming_bytes -= homa_in_outstanding(&rpc->in);
    if (!rpc->in.taken) homa_rx_mem_release(eng, rpc); /* a taken one was released then */
    homa_in_destroy(eng, rpc);
}

/* Unlinks an RPC from every table and list and frees it (or leaves it as a
 * zombie while the application still holds its message). */
static void rpc_free(struct homa_engine *eng, struct homa_rpc *rpc, bool tomb)
{
    if (rpc->zombie) return;
    if (tomb && (rpc->id & 1) &&
        (rpc->state == RPC_SERVER_IN_SERVICE || rpc->state == RPC_SERVER_OUTGOING))
        homa_tomb_add(eng, rpc->id, &rpc->peer->addr, rpc->peer_port);
    rpc_tab_remove(eng, rpc);
    hlist_del(&rpc->all_node);
    hlist_del(&rpc->ready_node);
    homa_mem_wait_leave(rpc);
    homa_timer_forget(rpc);
    homa_out_remove(eng, rpc);
    homa_free_outbuf(eng, rpc->out.buf, rpc->out.length);
    rpc->out.buf = NULL;
    rpc->out.active = false;
    rpc->peer->num_rpcs--;
    if (rpc->peer->num_rpcs == 0) rpc->peer->idle_since = eng->now;
    if (rpc->port) rpc->port->num_rpcs--;
    eng->ctr.rpcs_live--;
    if (rpc->id & 1) {
        eng->server_rpcs--;
        eng->server_freed_at = eng->now;
    }
    if (rpc->app_holds) {
        /* The application's homa_msg still points at in.buf; keep it (its
         * memory stays counted) until homa_engine_release. */
        homa_grant_remove(eng, rpc);
        rpc->zombie = true;
        hlist_add_tail(&eng->zombies, &rpc->all_node);
        return;
    }
    rpc_release_in(eng, rpc);
    free(rpc);
}

void homa_rpc_free(struct homa_engine *eng, struct homa_rpc *rpc)
{
    rpc_free(eng, rpc, true);
}

void homa_rpc_abandon(struct homa_engine *eng, struct homa_rpc *rpc)
{
    rpc_free(eng, rpc, false);
}

void homa_rpc_make_ready(struct homa_engine *eng, struct homa_rpc *rpc)
{
    rpc->state = (rpc->id & 1) ? RPC_SERVER_READY : RPC_CLIENT_READY;
    if (rpc->port) {
        hlist_add_tail(&rpc->port->ready, &rpc->ready_node);
        if (eng->ops.ready) eng->ops.ready(eng->ops.ctx, rpc->port->num);
    }
}

/* A client RPC ends with an error: stop all protocol activity and report it. */
void homa_rpc_fail(struct homa_engine *eng, struct homa_rpc *rpc, int err)
{
    if (rpc->state != RPC_CLIENT_ACTIVE) return;
    rpc->error = err;
    homa_out_remove(eng, rpc);
    homa_mem_wait_leave(rpc); /* a response waiting for memory */
    rpc_release_in(eng, rpc);
    homa_rpc_make_ready(eng, rpc);
}

/* ---------- creation ---------- */

int homa_engine_create(const homa_config *cfg, const homa_engine_ops *ops, homa_engine **out)
{
    if (!out) return HOMA_ERR_INVAL;
    *out = NULL;
    homa_config def;
    if (!cfg) {
        homa_config_default(&def);
        cfg = &def;
    }
    int err = homa_config_validate(cfg, NULL);
    if (err) return err;
    struct homa_engine *eng = calloc(1, sizeof(*eng));
    if (!eng) return HOMA_ERR_NOMEM;
    eng->cfg = *cfg;
    if (eng->cfg.grant_window == 0) eng->cfg.grant_window = eng->cfg.unsched_bytes;
    if (eng->cfg.grant_window == 0) eng->cfg.grant_window = eng->cfg.max_payload;
    if (ops) eng->ops = *ops;
    if (eng->cfg.link_bps) eng->pacer_q16 = (8000000000ull << 16) / eng->cfg.link_bps;
    homa_cutoffs_init(eng);
    eng->client_nb = eng->server_nb = eng->peer_nb = 64;
    eng->client_tab = calloc(eng->client_nb, sizeof(*eng->client_tab));
    eng->server_tab = calloc(eng->server_nb, sizeof(*eng->server_tab));
    eng->peer_tab = calloc(eng->peer_nb, sizeof(*eng->peer_tab));
    eng->ctl = malloc(HOMA_MAX_CTL_QUEUE * sizeof(*eng->ctl));
    eng->tombs = calloc(eng->cfg.max_tombstones, sizeof(*eng->tombs));
    eng->tomb_nb = 64;
    while (eng->tomb_nb < eng->cfg.max_tombstones)
        eng->tomb_nb *= 2;
    eng->tomb_buckets = malloc(eng->tomb_nb * sizeof(*eng->tomb_buckets));
    if (!eng->client_tab || !eng->server_tab || !eng->peer_tab || !eng->ctl || !eng->tombs ||
        !eng->tomb_buckets) {
        homa_engine_destroy(eng);
        return HOMA_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < eng->tomb_nb; i++)
        eng->tomb_buckets[i] = -1;
    hlist_init(&eng->rpcs);
    for (int i = 0; i < HOMA_WHEEL_SLOTS; i++)
        hlist_init(&eng->wheel[i]);
    hlist_init(&eng->waiting);
    for (unsigned i = 0; i < HOMA_SENDQ_BUCKETS; i++)
        hlist_init(&eng->sendq[i]);
    hlist_init(&eng->resending);
    hlist_init(&eng->send_fifo);
    /* A full period of SRPT bytes before the first FIFO turn. */
    if (eng->cfg.grant_fifo_permille > 0) eng->send_fifo_credit = homa_send_fifo_period(eng);
    hlist_init(&eng->grantable);
    hlist_init(&eng->mem_waitq);
    hlist_init(&eng->zombies);
    uint64_t r = eng->ops.random ? eng->ops.random(eng->ops.ctx) : 0;
    /* Client ids are even; start at a random point so two processes on one
     * host are unlikely to reuse each other's ids towards a server. */
    eng->next_client_id = ((r & 0x0000ffffffffffffull) + 1) << 1;
    if (eng->cfg.grant_fifo_permille > 0)
        eng->nonfifo_left = (int64_t)eng->cfg.fifo_grant_increment *
                            (1000 - eng->cfg.grant_fifo_permille) / eng->cfg.grant_fifo_permille;
    *out = eng;
    return 0;
}

void homa_engine_destroy(homa_engine *eng)
{
    if (!eng) return;
    if (eng->rpcs.next) {
        while (!hlist_empty(&eng->rpcs)) {
            struct homa_rpc *r = HOMA_CONTAINER(eng->rpcs.next, struct homa_rpc, all_node);
            r->app_holds = false;
            homa_rpc_free(eng, r);
        }
        while (!hlist_empty(&eng->zombies)) {
            struct homa_rpc *r = HOMA_CONTAINER(eng->zombies.next, struct homa_rpc, all_node);
            hlist_del(&r->all_node);
            rpc_release_in(eng, r);
            free(r);
        }
    }
    for (size_t i = 0; i < 64; i++) {
        while (eng->port_tab[i]) {
            struct homa_port *p = eng->port_tab[i];
            eng->port_tab[i] = p->hnext;
            free(p);
        }
    }
    if (eng->peer_tab) {
        for (size_t i = 0; i < eng->peer_nb; i++) {
            while (eng->peer_tab[i]) {
                struct homa_peer *p = eng->peer_tab[i];
                eng->peer_tab[i] = p->hnext;
                free(p->ports);
                free(p);
            }
        }
    }
    for (size_t i = 0; i < eng->deferred_n; i++)
        free(eng->deferred[i]);
    free(eng->deferred);
    for (uint32_t i = 0; i < eng->bufcache_n; i++)
        free(eng->bufcache[i].buf);
    free(eng->place_orphan);
    free(eng->client_tab);
    free(eng->server_tab);
    free(eng->peer_tab);
    free(eng->ctl);
    free(eng->tombs);
    free(eng->tomb_buckets);
    free(eng);
}

const homa_config *homa_engine_config(const homa_engine *eng)
{
    return &eng->cfg;
}

void homa_engine_counters(const homa_engine *eng, homa_counters *out)
{
    *out = eng->ctr;
}

/* rpc has outgoing bytes not sent even once yet. */
static bool has_unsent(const struct homa_rpc *r)
{
    return r->out.active && r->out.next_xmit < r->out.length;
}

size_t homa_engine_unsent_peers(const homa_engine *eng, homa_addr *out, size_t max)
{
    size_t n = 0;
    if (!eng || !out) return 0;
    for (const struct hlist *p = eng->rpcs.next; p != &eng->rpcs && n < max; p = p->next) {
        const struct homa_rpc *r = HOMA_CONTAINER(p, struct homa_rpc, all_node);
        if (!has_unsent(r)) continue;
        bool dup = false;
        for (size_t i = 0; i < n && !dup; i++)
            dup = memcmp(&out[i], &r->peer->addr, sizeof(homa_addr)) == 0;
        if (!dup) out[n++] = r->peer->addr;
    }
    return n;
}

void homa_engine_queue_stats(const homa_engine *eng, homa_queue_stats *out)
{
    if (!out) return;
    memset(out, 0, sizeof(*out));
    if (!eng) return;
    for (const struct hlist *n = eng->rpcs.next; n != &eng->rpcs; n = n->next) {
        const struct homa_rpc *r = HOMA_CONTAINER(n, struct homa_rpc, all_node);
        if (has_unsent(r)) out->tx_msgs++;
    }
    out->tx_ready = homa_out_queued(eng);
    const struct homa_peer *seen[64];
    for (const struct hlist *n = eng->grantable.next; n != &eng->grantable; n = n->next) {
        const struct homa_rpc *r = HOMA_CONTAINER(n, struct homa_rpc, grant_node);
        out->rx_grantable++;
        bool dup = false;
        for (uint32_t i = 0; i < out->rx_grantable_peers && !dup; i++)
            dup = seen[i] == r->peer;
        if (!dup && out->rx_grantable_peers < 64) seen[out->rx_grantable_peers++] = r->peer;
    }
}

/* ---------- application calls ---------- */

/* Gets the engine's buffer for an outgoing message: the caller's own
 * malloc'd buffer when it hands one over (`owned`), else a copy of src.
 * Checks come first so that a failed call never takes ownership. */
static int message_buffer(homa_engine *eng, const void *src, void *owned, size_t len, uint8_t **out)
{
    if (len > eng->cfg.max_message_length) return HOMA_ERR_MSGSIZE;
    if (owned) {
        *out = owned;
        return 0;
    }
    if (len > 0 && !src) return HOMA_ERR_INVAL;
    uint8_t *b = homa_buf_get(eng, (uint32_t)len);
    if (!b) return HOMA_ERR_NOMEM;
    if (len && src) memcpy(b, src, len); /* src is only NULL when len is 0 */
    *out = b;
    return 0;
}

static int start_request(homa_engine *eng, uint64_t now, uint16_t port_num, const homa_addr *dst,
                         uint16_t dport, const void *src, void *owned, size_t len, uint64_t cookie,
                         uint64_t *id)
{
    if (!eng || !dst || dport == 0) return HOMA_ERR_INVAL;
    eng->now = now;
    struct homa_port *port = homa_port_find(eng, port_num);
    if (!port) return HOMA_ERR_NO_PORT;
    if (eng->ctr.rpcs_live >= eng->cfg.max_rpcs) return HOMA_ERR_LIMIT;
    if (len > eng->cfg.max_message_length) return HOMA_ERR_MSGSIZE;
    struct homa_peer *peer = homa_peer_get(eng, dst, true);
    if (!peer) return HOMA_ERR_NOMEM;
    uint8_t *b;
    int err = message_buffer(eng, src, owned, len, &b);
    if (err) return err;
    uint64_t rid = eng->next_client_id;
    struct homa_rpc *rpc = rpc_new(eng, rid, port, peer, dport);
    if (!rpc) {
        if (!owned) free(b);
        return HOMA_ERR_NOMEM;
    }
    eng->next_client_id += 2;
    if (eng->next_client_id == 0) eng->next_client_id = 2;
    rpc->state = RPC_CLIENT_ACTIVE;
    rpc->cookie = cookie;
    eng->ctr.client_rpcs++;
    homa_out_start(eng, rpc, b, (uint32_t)len);
    if (id) *id = rid;
    homa_notify_tx(eng);
    return 0;
}

int homa_engine_send_request(homa_engine *eng, uint64_t now, uint16_t port, const homa_addr *dst,
                             uint16_t dport, const void *buf, size_t len, uint64_t cookie,
                             uint64_t *id)
{
    return start_request(eng, now, port, dst, dport, buf, NULL, len, cookie, id);
}

int homa_engine_send_request_owned(homa_engine *eng, uint64_t now, uint16_t port,
                                   const homa_addr *dst, uint16_t dport, void *buf, size_t len,
                                   uint64_t cookie, uint64_t *id)
{
    if (!buf) return HOMA_ERR_INVAL;
    return start_request(eng, now, port, dst, dport, NULL, buf, len, cookie, id);
}

static int start_reply(homa_engine *eng, uint64_t now, uint16_t port_num, const homa_addr *peer,
                       uint16_t peer_port, uint64_t id, const void *src, void *owned, size_t len)
{
    if (!eng || !peer) return HOMA_ERR_INVAL;
    eng->now = now;
    struct homa_port *port = homa_port_find(eng, port_num);
    if (!port) return HOMA_ERR_NO_PORT;
    if (!(id & 1)) return HOMA_ERR_NOT_FOUND;
    struct homa_rpc *rpc = homa_find_server(eng, id, peer, peer_port);
    if (!rpc || rpc->port != port) return HOMA_ERR_NOT_FOUND;
    if (rpc->state != RPC_SERVER_IN_SERVICE) return HOMA_ERR_STATE;
    uint8_t *b;
    int err = message_buffer(eng, src, owned, len, &b);
    if (err) return err;
    rpc->state = RPC_SERVER_OUTGOING;
    /* The ack clock starts now, not when the request arrived. */
    homa_rpc_heard(eng, rpc, now);
    rpc->last_prodded = now;
    eng->ctr.server_replies++;
    homa_out_start(eng, rpc, b, (uint32_t)len);
    homa_notify_tx(eng);
    return 0;
}

int homa_engine_send_reply(homa_engine *eng, uint64_t now, uint16_t port, const homa_addr *peer,
                           uint16_t peer_port, uint64_t id, const void *buf, size_t len)
{
    return start_reply(eng, now, port, peer, peer_port, id, buf, NULL, len);
}

int homa_engine_send_reply_owned(homa_engine *eng, uint64_t now, uint16_t port,
                                 const homa_addr *peer, uint16_t peer_port, uint64_t id, void *buf,
                                 size_t len)
{
    if (!buf) return HOMA_ERR_INVAL;
    return start_reply(eng, now, port, peer, peer_port, id, NULL, buf, len);
}

void *homa_engine_msg_take(homa_engine *eng, homa_msg *msg)
{
    if (!eng || !msg || !msg->handle || !msg->data) return NULL;
    struct homa_rpc *rpc = msg->handle;
    /* A delivered message is complete, so a driver cannot be writing it. */
    if (eng->placing && eng->place_rpc == rpc) return NULL;
    void *buf = rpc->in.buf;
    rpc->in.buf = NULL;
    /* the memory no longer counts against max_rx_bytes */
    homa_rx_mem_release(eng, rpc);
    rpc->in.taken = true;
    msg->data = NULL;
    return buf;
}

int homa_engine_abort(homa_engine *eng, uint64_t now, uint16_t port_num, uint64_t id)
{
    if (!eng) return HOMA_ERR_INVAL;
    eng->now = now;
    struct homa_port *port = homa_port_find(eng, port_num);
    if (!port) return HOMA_ERR_NO_PORT;
    struct homa_rpc *rpc = (id & 1) ? NULL : homa_find_client(eng, id);
    if (!rpc || rpc->port != port) return HOMA_ERR_NOT_FOUND;
    if (rpc->state == RPC_CLIENT_DELIVERED) return HOMA_ERR_STATE;
    eng->ctr.client_aborts++;
    homa_rpc_free(eng, rpc);
    homa_grant_check(eng);
    homa_notify_tx(eng);
    return 0;
}

int homa_engine_request_priority(homa_engine *eng, uint16_t port_num, uint64_t id, int lo, int hi)
{
    if (!eng || lo < 0 || lo > hi || hi >= (int)eng->cfg.num_priorities) return HOMA_ERR_INVAL;
    struct homa_port *port = homa_port_find(eng, port_num);
    if (!port) return HOMA_ERR_NO_PORT;
    struct homa_rpc *rpc = (id & 1) ? NULL : homa_find_client(eng, id);
    if (!rpc || rpc->port != port || rpc->zombie) return HOMA_ERR_NOT_FOUND;
    rpc->prio_limit = true;
    rpc->prio_lo = (uint8_t)lo;
    rpc->prio_hi = (uint8_t)hi;
    return 0;
}

int homa_engine_peer_unreachable(homa_engine *eng, uint64_t now, const homa_addr *peer,
                                 uint16_t port)
{
    if (!eng || !peer) return HOMA_ERR_INVAL;
    eng->now = now;
    int failed = 0;
    struct hlist *n = eng->rpcs.next;
    while (n != &eng->rpcs) {
        struct homa_rpc *r = HOMA_CONTAINER(n, struct homa_rpc, all_node);
        n = n->next;
        /* Only client RPCs still waiting: a server RPC ends by itself, and
         * a finished one must keep its response. */
        if (r->state != RPC_CLIENT_ACTIVE) continue;
        if (memcmp(&r->peer->addr, peer, sizeof(*peer)) != 0) continue;
        if (port != 0 && r->peer_port != port) continue;
        homa_rpc_fail(eng, r, HOMA_ERR_UNREACHABLE);
        failed++;
    }
    if (failed) {
        homa_grant_check(eng);
        homa_notify_tx(eng);
    }
    return failed;
}

static void deliver(struct homa_engine *eng, struct homa_rpc *rpc, homa_msg *msg)
{
    hlist_del(&rpc->ready_node);
    memset(msg, 0, sizeof(*msg));
    msg->id = rpc->id;
    msg->cookie = rpc->cookie;
    msg->peer = rpc->peer->addr;
    msg->peer_port = rpc->peer_port;
    msg->port = rpc->port->num;
    msg->is_request = (rpc->id & 1) != 0;
    msg->error = rpc->error;
    if (rpc->in.active && !rpc->error) {
        msg->data = rpc->in.buf;
        msg->length = rpc->in.length;
    }
    if (rpc->in.active && !rpc->in.taken && !rpc->mem_held) {
        rpc->mem_held = true;
        eng->held_bytes += rpc->in.length;
    }
    msg->handle = rpc;
    rpc->app_holds = true;
    if (rpc->id & 1) {
        rpc->state = RPC_SERVER_IN_SERVICE;
        eng->ctr.server_requests++;
    } else {
        rpc->state = RPC_CLIENT_DELIVERED;
    }
}

int homa_engine_recv(homa_engine *eng, uint16_t port_num, unsigned flags, uint64_t id,
                     homa_msg *msg)
{
    if (!eng || !msg) return HOMA_ERR_INVAL;
    struct homa_port *port = homa_port_find(eng, port_num);
    if (!port) return HOMA_ERR_NO_PORT;
    if (id != 0) {
        struct homa_rpc *rpc = (id & 1) ? NULL : homa_find_client(eng, id);
        if (!rpc || rpc->port != port || rpc->state == RPC_CLIENT_DELIVERED)
            return HOMA_ERR_NOT_FOUND;
        if (rpc->state != RPC_CLIENT_READY) return HOMA_ERR_AGAIN;
        deliver(eng, rpc, msg);
        return 0;
    }
    if (!(flags & HOMA_RECV_ANY)) return HOMA_ERR_INVAL;
    for (struct hlist *n = port->ready.next; n != &port->ready; n = n->next) {
        struct homa_rpc *rpc = HOMA_CONTAINER(n, struct homa_rpc, ready_node);
        unsigned kind = (rpc->id & 1) ? HOMA_RECV_REQUEST : HOMA_RECV_RESPONSE;
        if (flags & kind) {
            deliver(eng, rpc, msg);
            return 0;
        }
    }
    return HOMA_ERR_AGAIN;
}

void homa_engine_release(homa_engine *eng, homa_msg *msg)
{
    if (!eng || !msg || !msg->handle) return;
    struct homa_rpc *rpc = msg->handle;
    msg->handle = NULL;
    msg->data = NULL;
    rpc->app_holds = false;
    if (rpc->zombie) {
        hlist_del(&rpc->all_node);
        rpc_release_in(eng, rpc);
        free(rpc);
        return;
    }
    if (rpc->id & 1) {
        /* The request bytes are no longer needed; the RPC lives on. */
        rpc_release_in(eng, rpc);
    } else {
        homa_rpc_free(eng, rpc);
    }
}

void homa_engine_pull_done(homa_engine *eng)
{
    if (!eng || eng->tx_pins == 0) return;
    if (--eng->tx_pins == 0) {
        for (size_t i = 0; i < eng->deferred_n; i++)
            free(eng->deferred[i]);
        eng->deferred_n = 0;
    }
}

uint64_t homa_engine_next_deadline(const homa_engine *eng)
{
    uint64_t d = UINT64_MAX;
    /* Tick only while there is protocol work: an idle engine must not wake
     * its host every millisecond.  Idle peers are reaped on a later tick. */
    if (!hlist_empty(&eng->rpcs)) {
        d = eng->next_tick;
    } else if (eng->tomb_count > 0) {
        uint64_t exp = eng->tombs[eng->tomb_head].expires;
        d = exp > eng->next_tick ? exp : eng->next_tick;
    }
    if (eng->pacer_blocked && eng->nic_free_at > eng->cfg.max_nic_queue_ns) {
        uint64_t p = eng->nic_free_at - eng->cfg.max_nic_queue_ns;
        if (p < d) d = p;
    }
    return d;
}

void homa_engine_timer(homa_engine *eng, uint64_t now)
{
    if (!eng) return;
    eng->now = now;
    if (now < eng->next_tick) return;
    /* Called more than a tick late: this host, not its peers, was stalled
     * (descheduled, or the caller's lock holder preempted), and what the
     * peers sent meanwhile may be waiting in our own receive queue.  That
     * time must not count as their silence, or a local stall of a
     * timeout's length fails every RPC with them. */
    uint64_t late = 0;
    if (eng->next_tick != 0 && now - eng->next_tick > eng->cfg.tick_ns) {
        late = now - eng->next_tick - eng->cfg.tick_ns;
        eng->ctr.timer_stalls++;
        eng->ctr.stalled_ns += late;
    }
    /* How long packets now wait in our receive path (socket, kernel
     * backlog) before we read them: the longest wait since the last run,
     * or the previous estimate decaying at half speed.  A peer's answer
     * may be that long on its way to us after it reached this host, so
     * the timers count silence and intervals without it. */
    uint64_t elapsed = eng->next_tick != 0 ? now - (eng->next_tick - eng->cfg.tick_ns) : 0;
    uint64_t decayed = eng->lag > elapsed / 2 ? eng->lag - elapsed / 2 : 0;
    eng->lag = eng->in_lag > decayed ? eng->in_lag : decayed;
    eng->in_lag = 0;
    uint64_t lag_max = (uint64_t)eng->cfg.timeout_ticks * eng->cfg.tick_ns / 4;
    if (eng->lag > lag_max) eng->lag = lag_max;
    if (eng->lag >= eng->cfg.tick_ns) eng->ctr.input_stalls++;
    eng->next_tick = now + eng->cfg.tick_ns;
    eng->ticks++;
    /* (homa_timer_run forgives the peers and their ports the lateness.) */
    homa_timer_run(eng, now, late);
    tombs_expire(eng, now);
    peers_reap(eng, now);
    homa_notify_tx(eng);
}
