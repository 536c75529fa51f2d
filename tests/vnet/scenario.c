#include "scenario.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Byte i of RPC idx's request.  The first 4 bytes carry idx so the server
 * can tell which RPC it got (every scenario message is >= 4 bytes or the
 * server trusts the client-side record). */
static inline uint8_t pattern(int idx, uint32_t i)
{
    uint32_t x = (uint32_t)idx * 2654435761u + i * 40503u;
    return (uint8_t)(x ^ (x >> 13) ^ (i >> 7));
}

void sc_fill(uint8_t *buf, uint32_t len, int idx)
{
    for (uint32_t i = 0; i < len; i++)
        buf[i] = pattern(idx, i);
    if (len >= 4) memcpy(buf, &idx, 4);
}

static bool check(const uint8_t *buf, uint32_t len, int idx)
{
    if (len >= 4) {
        int got;
        memcpy(&got, buf, 4);
        if (got != idx) return false;
    }
    for (uint32_t i = 4; i < len; i++)
        if (buf[i] != pattern(idx, i)) return false;
    if (len < 4)
        for (uint32_t i = 0; i < len; i++)
            if (buf[i] != pattern(idx, i)) return false;
    return true;
}

static uint8_t *scratch(uint32_t len)
{
    static uint8_t *buf;
    static uint32_t cap;
    if (len > cap) {
        free(buf);
        cap = len;
        buf = malloc(cap ? cap : 1);
    }
    return buf;
}

static void on_ready(struct vhost *h, uint16_t port, void *app)
{
    struct scenario *sc = app;
    uint64_t now = vnet_now(h->net);
    homa_msg m;
    if (port == SC_SERVER_PORT) {
        while (homa_engine_recv(h->eng, port, HOMA_RECV_REQUEST, 0, &m) == 0) {
            int idx = -1;
            if (m.length >= 4) {
                memcpy(&idx, m.data, 4);
            } else {
                /* too short to carry its index: match it by source and length */
                int src = vhost_index(&m.peer);
                for (int i = 0; i < sc->nrpcs && idx < 0; i++) {
                    struct sc_rpc *r = &sc->rpcs[i];
                    if (r->src == src && r->dst == h->index && r->len == m.length &&
                        r->server_deliveries == 0 && r->id)
                        idx = i;
                }
            }
            if (idx < 0 || idx >= sc->nrpcs || !check(m.data, (uint32_t)m.length, idx) ||
                m.length != sc->rpcs[idx].len) {
                sc->bad_deliveries++;
                idx = -1;
            } else {
                sc->rpcs[idx].server_deliveries++;
                sc->rpcs[idx].server_at = now;
            }
            const uint8_t *reply = m.data;
            size_t rlen = m.length;
            if (sc->reply_len >= 0) {
                rlen = (size_t)sc->reply_len;
                reply = scratch((uint32_t)rlen);
                sc_fill((uint8_t *)reply, (uint32_t)rlen, idx);
            }
            homa_engine_send_reply(h->eng, now, port, &m.peer, m.peer_port, m.id, reply, rlen);
            homa_engine_release(h->eng, &m);
        }
    } else {
        while (homa_engine_recv(h->eng, port, HOMA_RECV_RESPONSE, 0, &m) == 0) {
            int idx = (int)m.cookie;
            struct sc_rpc *r = &sc->rpcs[idx];
            r->completions++;
            r->done = now;
            r->err = m.error;
            if (m.error) {
                sc->failed++;
            } else {
                sc->completed++;
                uint32_t want = sc->reply_len >= 0 ? (uint32_t)sc->reply_len : r->len;
                int who = (sc->reply_len >= 0 && r->len < 4) ? -1 : idx;
                r->verified = m.length == want && (who < 0 || check(m.data, want, idx));
                if (!r->verified) sc->verify_errors++;
            }
            homa_engine_release(h->eng, &m);
        }
    }
}

void sc_init(struct scenario *sc, const struct vnet_config *ncfg, const homa_config *hcfg, int n)
{
    memset(sc, 0, sizeof(*sc));
    sc->net = vnet_create(ncfg);
    if (!sc->net) abort();
    if (hcfg)
        sc->cfg = *hcfg;
    else
        homa_config_default(&sc->cfg);
    sc->n = n;
    sc->reply_len = -1;
    for (int i = 0; i < n; i++) {
        sc->h[i] = vhost_create(sc->net, &sc->cfg, on_ready, sc);
        if (!sc->h[i]) abort();
        homa_engine_port_open(sc->h[i]->eng, SC_SERVER_PORT);
        homa_engine_port_open(sc->h[i]->eng, SC_CLIENT_PORT);
    }
}

void sc_destroy(struct scenario *sc)
{
    for (int i = 0; i < sc->n; i++)
        vhost_destroy(sc->h[i]);
    vnet_destroy(sc->net);
    free(sc->rpcs);
}

struct start_ev {
    struct scenario *sc;
    int idx;
};

static void start_rpc(void *arg, uint64_t now)
{
    struct start_ev *ev = arg;
    struct scenario *sc = ev->sc;
    struct sc_rpc *r = &sc->rpcs[ev->idx];
    uint8_t *buf = scratch(r->len);
    sc_fill(buf, r->len, ev->idx);
    struct vhost *h = sc->h[r->src];
    homa_addr dst = vhost_addr(r->dst);
    r->start = now;
    int err = homa_engine_send_request(h->eng, now, SC_CLIENT_PORT, &dst, SC_SERVER_PORT, buf,
                                       r->len, (uint64_t)ev->idx, &r->id);
    if (err) {
        r->err = err;
        r->completions++;
        sc->failed++;
    }
    vhost_poke(h);
    free(ev);
}

int sc_add_rpc(struct scenario *sc, uint64_t t, int src, int dst, uint32_t len)
{
    if (sc->nrpcs == sc->cap) {
        sc->cap = sc->cap ? sc->cap * 2 : 64;
        sc->rpcs = realloc(sc->rpcs, (size_t)sc->cap * sizeof(*sc->rpcs));
    }
    int idx = sc->nrpcs++;
    memset(&sc->rpcs[idx], 0, sizeof(sc->rpcs[idx]));
    sc->rpcs[idx].src = src;
    sc->rpcs[idx].dst = dst;
    sc->rpcs[idx].len = len;
    struct start_ev *ev = malloc(sizeof(*ev));
    ev->sc = sc;
    ev->idx = idx;
    vnet_at(sc->net, t, start_rpc, ev);
    return idx;
}

static void check_done(void *arg, uint64_t now)
{
    struct scenario *sc = arg;
    (void)now;
    if (sc->completed + sc->failed >= sc->nrpcs)
        vnet_stop(sc->net);
    else
        vnet_after(sc->net, 100000, check_done, sc);
}

bool sc_run(struct scenario *sc, uint64_t limit_ns)
{
    vnet_after(sc->net, 0, check_done, sc);
    vnet_run_until(sc->net, limit_ns);
    return sc->completed + sc->failed >= sc->nrpcs;
}

void sc_dump(const struct scenario *sc)
{
    fprintf(stderr,
            "scenario: seed %llu (replay with VNET_SEED=%llu), %d rpcs: %d ok, %d failed, "
            "%d verify errors, %d bad deliveries, t=%.3f ms\n",
            (unsigned long long)vnet_seed(sc->net), (unsigned long long)vnet_seed(sc->net),
            sc->nrpcs, sc->completed, sc->failed, sc->verify_errors, sc->bad_deliveries,
            vnet_now(sc->net) / 1e6);
    homa_counters t;
    memset(&t, 0, sizeof(t));
    for (int i = 0; i < sc->n; i++) {
        homa_counters c;
        homa_engine_counters(sc->h[i]->eng, &c);
        uint64_t *dst = (uint64_t *)&t;
        const uint64_t *src = (const uint64_t *)&c;
        for (size_t k = 0; k < homa_counter_count(); k++)
            dst[k] += src[k];
    }
    const uint64_t *v = (const uint64_t *)&t;
    for (size_t k = 0; k < homa_counter_count(); k++)
        if (v[k]) fprintf(stderr, "  %-20s %llu\n", homa_counter_name(k), (unsigned long long)v[k]);
}
