/* RPCs: the tables that find them, their lifecycle (creation, readiness,
 * failure, freeing) and the tombstones that outlive completed server RPCs.
 * States and transitions are documented in rpc.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---------- tables ---------- */

static uint64_t rpc_key(const struct homa_rpc *r)
{
    return (r->id & 1) ? homa_server_key(r->id, &r->peer->addr, r->peer_port) : homa_mix64(r->id);
}

static uint64_t rpc_node_key(const struct homa_hnode *n)
{
    return rpc_key(HOMA_CONTAINER(n, struct homa_rpc, hnode));
}

static struct homa_htab *rpc_table(struct homa_engine *eng, const struct homa_rpc *rpc)
{
    return (rpc->id & 1) ? &eng->server_table : &eng->client_table;
}

static uint64_t tomb_node_key(const struct homa_hnode *n)
{
    const struct homa_tomb *t = HOMA_CONTAINER(n, struct homa_tomb, hnode);
    return homa_server_key(t->id, &t->addr, t->port);
}

int homa_rpc_tables_init(struct homa_engine *eng)
{
    hlist_init(&eng->rpcs);
    hlist_init(&eng->zombies);
    if (homa_htab_init(&eng->client_table, 64) || homa_htab_init(&eng->server_table, 64))
        return HOMA_ERR_NOMEM;
    eng->tombs = calloc(eng->cfg.max_tombstones, sizeof(*eng->tombs));
    size_t nb = 64;
    while (nb < eng->cfg.max_tombstones)
        nb *= 2;
    if (!eng->tombs || homa_htab_init(&eng->tomb_tab, nb)) return HOMA_ERR_NOMEM;
    return 0;
}

void homa_rpc_tables_destroy(struct homa_engine *eng)
{
    if (eng->rpcs.next) {
        while (!hlist_empty(&eng->rpcs)) {
            struct homa_rpc *r = HOMA_CONTAINER(eng->rpcs.next, struct homa_rpc, all_node);
            r->app_holds = false;
            homa_rpc_free(eng, r);
        }
        while (!hlist_empty(&eng->zombies))
            homa_rpc_destroy(eng, HOMA_CONTAINER(eng->zombies.next, struct homa_rpc, all_node));
    }
    homa_htab_destroy(&eng->client_table);
    homa_htab_destroy(&eng->server_table);
    homa_htab_destroy(&eng->tomb_tab);
    free(eng->tombs);
    eng->tombs = NULL;
}

struct homa_rpc *homa_find_client(struct homa_engine *eng, uint64_t id)
{
    struct homa_rpc *r = eng->last_client;
    if (r && r->id == id) {
        homa_timer_soon(eng, r);
        return r;
    }
    for (struct homa_hnode *n = homa_htab_first(&eng->client_table, homa_mix64(id)); n;
         n = n->next) {
        r = HOMA_CONTAINER(n, struct homa_rpc, hnode);
        if (r->id == id) {
            homa_timer_soon(eng, r);
            eng->last_client = r;
            return r;
        }
    }
    return NULL;
}

struct homa_rpc *homa_find_server(struct homa_engine *eng, uint64_t id, const homa_addr *addr,
                                  uint16_t peer_port)
{
    struct homa_rpc *r = eng->last_server;
    if (r && r->id == id && r->peer_port == peer_port && homa_addr_eq(&r->peer->addr, addr)) {
        homa_timer_soon(eng, r);
        return r;
    }
    uint64_t h = homa_server_key(id, addr, peer_port);
    for (struct homa_hnode *n = homa_htab_first(&eng->server_table, h); n; n = n->next) {
        r = HOMA_CONTAINER(n, struct homa_rpc, hnode);
        if (r->id == id && r->peer_port == peer_port && homa_addr_eq(&r->peer->addr, addr)) {
            homa_timer_soon(eng, r);
            eng->last_server = r;
            return r;
        }
    }
    return NULL;
}

/* ---------- lifecycle ---------- */

struct homa_rpc *homa_rpc_new(struct homa_engine *eng, uint64_t id, struct homa_port *port,
                              struct homa_peer *peer, uint16_t peer_port, uint8_t state)
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
    homa_readyq_node_init(&r->ready);
    hlist_init(&r->send_node);
    hlist_init(&r->rtx_node);
    hlist_init(&r->grant_node);
    hlist_init(&r->fifo_node);
    hlist_init(&r->timer_node);
    hlist_init(&r->wait_node);
    hlist_init(&r->mem_node);
    hlist_add_tail(&eng->rpcs, &r->all_node);
    homa_timer_soon(eng, r);
    struct homa_htab *t = rpc_table(eng, r);
    homa_htab_grow_if_full(t, rpc_node_key);
    homa_htab_add(t, &r->hnode, rpc_key(r));
    peer->num_rpcs++;
    port->num_rpcs++;
    eng->ctr.rpcs_live++;
    if (id & 1) eng->server_rpcs++;
    homa_rpc_set_state(r, state);
    return r;
}

void homa_rpc_bad_transition(const struct homa_rpc *rpc, uint8_t to)
{
    fprintf(stderr, "libhoma: RPC %llu: state %u -> %u is not a transition of rpc.h\n",
            (unsigned long long)rpc->id, (unsigned)rpc->state, (unsigned)to);
    abort();
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

void homa_rpc_release_in(struct homa_engine *eng, struct homa_rpc *rpc)
{
    if (!rpc->in.active) return;
    homa_grant_remove(eng, rpc);
    eng->ctr.incoming_bytes -= homa_in_outstanding(&rpc->in);
    if (!rpc->in.taken) homa_rx_mem_release(eng, rpc); /* a taken one was released then */
    homa_in_destroy(eng, rpc);
}

void homa_rpc_free(struct homa_engine *eng, struct homa_rpc *rpc)
{
    if (rpc->zombie) return;
    if ((rpc->id & 1) && (rpc->state == RPC_SERVER_IN_SERVICE || rpc->state == RPC_SERVER_OUTGOING))
        homa_tomb_add(eng, rpc->id, &rpc->peer->addr, rpc->peer_port);
    homa_htab_del(rpc_table(eng, rpc), &rpc->hnode, rpc_key(rpc));
    if (eng->last_client == rpc) eng->last_client = NULL;
    if (eng->last_server == rpc) eng->last_server = NULL;
    hlist_del(&rpc->all_node);
    homa_readyq_remove(&rpc->ready);
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
    homa_rpc_release_in(eng, rpc);
    free(rpc);
}

void homa_rpc_destroy(struct homa_engine *eng, struct homa_rpc *rpc)
{
    hlist_del(&rpc->all_node);
    homa_rpc_release_in(eng, rpc);
    free(rpc);
}

void homa_rpc_make_ready(struct homa_engine *eng, struct homa_rpc *rpc)
{
    homa_rpc_set_state(rpc, (rpc->id & 1) ? RPC_SERVER_READY : RPC_CLIENT_READY);
    if (rpc->port) {
        homa_readyq_push(&rpc->port->ready, &rpc->ready, (rpc->id & 1) != 0);
        if (eng->ops.ready) eng->ops.ready(eng->ops.ctx, rpc->port->num);
    }
}

void homa_rpc_fail(struct homa_engine *eng, struct homa_rpc *rpc, int err)
{
    if (rpc->state != RPC_CLIENT_ACTIVE) return;
    rpc->error = err;
    homa_out_remove(eng, rpc);
    homa_mem_wait_leave(rpc); /* a response waiting for memory */
    homa_rpc_release_in(eng, rpc);
    homa_rpc_make_ready(eng, rpc);
}

/* ---------- tombstones ---------- */

bool homa_tomb_find(struct homa_engine *eng, uint64_t id, const homa_addr *addr, uint16_t port)
{
    uint64_t last = 0;
    bool hit = false;
    for (struct homa_hnode *n = homa_htab_first(&eng->tomb_tab, homa_server_key(id, addr, port)); n;
         n = n->next) {
        struct homa_tomb *t = HOMA_CONTAINER(n, struct homa_tomb, hnode);
        if (t->id == id && t->port == port && homa_addr_eq(&t->addr, addr)) {
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
    struct homa_tomb *t = &eng->tombs[eng->tomb_head];
    homa_htab_del(&eng->tomb_tab, &t->hnode, tomb_node_key(&t->hnode));
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
    homa_htab_add(&eng->tomb_tab, &t->hnode, homa_server_key(id, addr, port));
    eng->tomb_count++;
    eng->ctr.tombstones = eng->tomb_count;
}

void homa_tombs_expire(struct homa_engine *eng, uint64_t now)
{
    while (eng->tomb_count > 0 && eng->tombs[eng->tomb_head].expires <= now)
        tomb_pop_oldest(eng);
}
