/* The engine object and the application's calls: create and destroy,
 * send a request or a reply, receive and release messages, abort, and the
 * queries (configuration, counters, queue statistics).  What an RPC is and
 * how its state moves: rpc.h. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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
    eng->ctl = malloc(HOMA_MAX_CTL_QUEUE * sizeof(*eng->ctl));
    if (homa_rpc_tables_init(eng) || homa_peer_table_init(eng) || homa_port_table_init(eng) ||
        !eng->ctl) {
        homa_engine_destroy(eng);
        return HOMA_ERR_NOMEM;
    }
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
    homa_rpc_tables_destroy(eng); /* first: freeing an RPC updates its peer and port */
    homa_port_table_destroy(eng);
    homa_peer_table_destroy(eng);
    homa_bufs_destroy(eng);
    free(eng->place_orphan);
    free(eng->ctl);
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
    struct homa_rpc *rpc = homa_rpc_new(eng, rid, port, peer, dport, RPC_CLIENT_ACTIVE);
    if (!rpc) {
        if (!owned) free(b);
        return HOMA_ERR_NOMEM;
    }
    eng->next_client_id += 2;
    if (eng->next_client_id == 0) eng->next_client_id = 2;
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
    homa_rpc_set_state(rpc, RPC_SERVER_OUTGOING);
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
    homa_readyq_remove(&rpc->ready);
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
        homa_rpc_set_state(rpc, RPC_SERVER_IN_SERVICE);
        eng->ctr.server_requests++;
    } else {
        homa_rpc_set_state(rpc, RPC_CLIENT_DELIVERED);
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
    struct homa_readyq_node *n = homa_readyq_first(&port->ready, flags);
    if (!n) return HOMA_ERR_AGAIN;
    deliver(eng, HOMA_CONTAINER(n, struct homa_rpc, ready), msg);
    return 0;
}

void homa_engine_release(homa_engine *eng, homa_msg *msg)
{
    if (!eng || !msg || !msg->handle) return;
    struct homa_rpc *rpc = msg->handle;
    msg->handle = NULL;
    msg->data = NULL;
    rpc->app_holds = false;
    if (rpc->zombie) {
        homa_rpc_destroy(eng, rpc);
        return;
    }
    if (rpc->id & 1) {
        /* The request bytes are no longer needed; the RPC lives on. */
        homa_rpc_release_in(eng, rpc);
    } else {
        homa_rpc_free(eng, rpc);
    }
}
