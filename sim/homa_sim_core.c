/* homa-sim: building the network, driving the workload, measuring. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "data_dir.h"
#include "fabric.h"
#include "homa_sim.h"
#include "vhost.h"

/* The source tree's data/, when the build compiled it in; data_dir.h then
 * falls back to the installed data. */
#ifndef HOMA_DEFAULT_DATA_DIR
#define HOMA_DEFAULT_DATA_DIR NULL
#endif

/* RPC record flags */
enum {
    R_LIVE = 1,
    R_MEAS_REQ = 2,  /* request is measured */
    R_MEAS_RESP = 4, /* response is measured */
    R_REQ_DONE = 8,
    R_RESP_STARTED = 16,
};

struct rpcrec {
    uint64_t req_start, resp_start;
    uint64_t client_id;
    uint32_t req_len, resp_len;
    int32_t src, dst;
    int32_t script; /* index into s->script, or -1 */
    uint32_t next_free;
    uint8_t flags;
};

struct sample {
    uint32_t len;
    float slowdown;
    float lat_us;
};

struct script_ev;

struct script {
    uint64_t at;
    int src, dst;
    uint32_t req_len;
    int64_t resp_len;
    uint64_t req_lat, resp_lat;
    struct script_ev *ev; /* until it fires */
};

struct hhost {
    struct hsim *s;
    struct vhost *vh;
    struct vnet_rng rng; /* arrivals and sizes: independent of the network's draws */
    int idx;
};

/* (client host, client id) -> record, so the server side can find the
 * record of a request it received (open addressing, linear probing). */
struct hent {
    uint64_t id; /* 0 = empty (client ids are even and never 0) */
    int32_t host;
    uint32_t rec;
};

struct hsim {
    struct hsim_opts o;
    struct hsim_net_params np;
    homa_workload *w;
    uint32_t trunc; /* max size, 0 = none */
    uint32_t max_len;
    struct vnet *net;
    int n;
    struct hhost *h;
    homa_config cfg;
    int unsched_levels;
    double gap_ns; /* mean time between RPC starts per host */
    bool poisson;

    struct rpcrec *rec;
    uint32_t nrec, caprec, free_head;
    struct hent *tab;
    uint32_t tab_mask, tab_n;

    uint64_t t_start, t_end, t_stop; /* window start/end, hard stop */
    uint64_t pending;                /* measured messages not yet finished */
    struct sample *smp;
    uint64_t nsmp, capsmp;
    uint64_t failed_msgs, send_errors, unmatched, total_failures;
    struct hsim_failure fail[HSIM_MAX_FAILURES];
    int nfail;
    double offered_wire;       /* wire bytes of messages started in the window */
    double offered_grant_wire; /* ... and of the GRANTs they are expected to need */
    double started_bytes, done_bytes;
    struct qs_acc *qs; /* --queue-stats */

    struct script *script;
    int nscript, capscript;
    float *ideal_cache[2]; /* ideal ns by length for short lengths, per path kind */
    uint32_t ideal_cache_n;
};

#define NOREC UINT32_MAX

/* ---- small utilities ---- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static void oom(void)
{
    fprintf(stderr, "homa-sim: out of memory\n");
    abort();
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) oom();
    return q;
}

static uint32_t rec_alloc(struct hsim *s)
{
    uint32_t i;
    if (s->free_head != NOREC) {
        i = s->free_head;
        s->free_head = s->rec[i].next_free;
    } else {
        if (s->nrec == s->caprec) {
            s->caprec = s->caprec ? 2 * s->caprec : 4096;
            s->rec = xrealloc(s->rec, s->caprec * sizeof(*s->rec));
        }
        i = s->nrec++;
    }
    memset(&s->rec[i], 0, sizeof(s->rec[i]));
    s->rec[i].script = -1;
    s->rec[i].flags = R_LIVE;
    return i;
}

static void rec_free(struct hsim *s, uint32_t i)
{
    s->rec[i].flags = 0;
    s->rec[i].next_free = s->free_head;
    s->free_head = i;
}

static uint32_t slot_of(const struct hsim *s, int host, uint64_t id)
{
    return (uint32_t)mix64(id ^ ((uint64_t)(uint32_t)host << 40)) & s->tab_mask;
}

static void tab_insert(struct hsim *s, int host, uint64_t id, uint32_t rec)
{
    if ((s->tab_n + 1) * 2 > s->tab_mask + 1) {
        /* grow to keep the load factor under 1/2 */
        uint32_t old = s->tab_mask + 1;
        struct hent *ot = s->tab;
        s->tab_mask = old * 2 - 1;
        s->tab = calloc((size_t)old * 2, sizeof(*s->tab));
        if (!s->tab) oom();
        s->tab_n = 0;
        for (uint32_t k = 0; k < old; k++)
            if (ot[k].id) tab_insert(s, ot[k].host, ot[k].id, ot[k].rec);
        free(ot);
    }
    uint32_t k = slot_of(s, host, id);
    while (s->tab[k].id)
        k = (k + 1) & s->tab_mask;
    s->tab[k] = (struct hent){id, host, rec};
    s->tab_n++;
}

/* Finds and removes an entry; NOREC if absent. */
static uint32_t tab_take(struct hsim *s, int host, uint64_t id)
{
    uint32_t k = slot_of(s, host, id);
    while (s->tab[k].id && !(s->tab[k].id == id && s->tab[k].host == host))
        k = (k + 1) & s->tab_mask;
    if (!s->tab[k].id) return NOREC;
    uint32_t rec = s->tab[k].rec;
    /* backward-shift deletion keeps probe chains intact without tombstones */
    uint32_t hole = k;
    for (uint32_t j = (k + 1) & s->tab_mask; s->tab[j].id; j = (j + 1) & s->tab_mask) {
        uint32_t want = slot_of(s, s->tab[j].host, s->tab[j].id);
        /* move j into the hole if its home slot is not in (hole, j] */
        if (((j - want) & s->tab_mask) >= ((j - hole) & s->tab_mask)) {
            s->tab[hole] = s->tab[j];
            hole = j;
        }
    }
    s->tab[hole].id = 0;
    s->tab_n--;
    return rec;
}

static double ideal(struct hsim *s, uint32_t len, bool cross)
{
    if (len < s->ideal_cache_n) {
        float *c = s->ideal_cache[cross];
        if (c[len] == 0) c[len] = (float)hsim_ideal_ns(&s->np, len, cross);
        return c[len];
    }
    return hsim_ideal_ns(&s->np, len, cross);
}

static void add_sample(struct hsim *s, uint32_t len, int src, int dst, uint64_t lat)
{
    if (s->nsmp == s->capsmp) {
        s->capsmp = s->capsmp ? 2 * s->capsmp : 65536;
        s->smp = xrealloc(s->smp, s->capsmp * sizeof(*s->smp));
    }
    double id = ideal(s, len, hsim_fabric_cross_rack(&s->o, src, dst));
    s->smp[s->nsmp++] = (struct sample){len, (float)((double)lat / id), (float)(lat / 1e3)};
}

/* A message buffer handed to the engine (which frees it).  Contents do not
 * matter, and calloc of a large block returns untouched zero pages (see the
 * mmap threshold in homa_sim_main.c), so an unsent message costs almost no
 * memory: the engine only reads the pages as it transmits them. */
static void *msg_buf(uint32_t len)
{
    void *b = calloc(len ? len : 1, 1);
    if (!b) oom();
    return b;
}

static bool in_window(const struct hsim *s, uint64_t t)
{
    return t >= s->t_start && t < s->t_end;
}

/* --queue-stats: one sample of every host.  A downlink is idle when its
 * switch port holds nothing; a NIC when it has finished its last packet. */
#define QS_INTERVAL_NS 100000

struct qs_acc {
    uint64_t samples, rx_idle_pending, rx_idle_empty, tx_idle_unsent, tx_idle_empty;
    uint64_t both_idle; /* NIC idle, holding an unsent message for an idle downlink */
    uint64_t grantable, peers, tx_msgs;
};

static void qs_fire(void *arg, uint64_t now)
{
    struct hsim *s = arg;
    struct qs_acc *q = s->qs;
    if (now >= s->t_end) return;
    for (int i = 0; i < s->n; i++) {
        homa_queue_stats st;
        homa_engine_queue_stats(s->h[i].vh->eng, &st);
        q->samples++;
        q->grantable += st.rx_grantable;
        q->peers += st.rx_grantable_peers;
        q->tx_msgs += st.tx_msgs;
        if (hsim_fabric_downlink_bytes(s->net, i) == 0) {
            if (st.rx_grantable)
                q->rx_idle_pending++;
            else
                q->rx_idle_empty++;
        }
        if (vnet_host_tx_free_at(s->net, i) <= now) {
            if (st.tx_ready == 0 && st.tx_msgs > 0) {
                q->tx_idle_unsent++;
                /* Is one of those messages for a receiver that idles too?
                 * Then the protocol, not the traffic, wastes the pair. */
                homa_addr peers[64];
                size_t np = homa_engine_unsent_peers(s->h[i].vh->eng, peers, 64);
                for (size_t k = 0; k < np; k++) {
                    int d = vhost_index(&peers[k]);
                    if (hsim_fabric_downlink_bytes(s->net, d) == 0) {
                        q->both_idle++;
                        break;
                    }
                }
            } else if (st.tx_msgs == 0) {
                q->tx_idle_empty++;
            }
        }
    }
    vnet_at(s->net, now + QS_INTERVAL_NS, qs_fire, s);
}

static uint32_t draw_len(struct hsim *s, struct hhost *h)
{
    return homa_workload_sample(s->w, vnet_rng_uniform(&h->rng), s->trunc);
}

/* Expected GRANT wire bytes of a message under engine config c (0 if c is
 * NULL: GRANTs not counted). */
static double grant_wire(const homa_config *c, uint32_t len, uint32_t mp, uint32_t ovh)
{
    return c ? hsim_grant_wire_bytes(len, c->unsched_bytes, c->grant_window, mp, ovh) : 0;
}

/* Offered load of a message started in the window: its DATA and the GRANTs
 * it is expected to need (counted apart: the paper's load includes them). */
static void count_offered(struct hsim *s, uint32_t len)
{
    s->offered_wire += hsim_wire_bytes(len, s->np.max_payload, s->np.overhead_bytes);
    s->offered_grant_wire += grant_wire(&s->cfg, len, s->np.max_payload, s->np.overhead_bytes);
}

static void message_started(struct hsim *s, uint32_t len, bool measured)
{
    s->started_bytes += len;
    if (measured) s->pending++;
}

/* ---- the application ---- */

static void start_rpc(struct hsim *s, uint64_t now, int src, int dst, uint32_t req_len,
                      int64_t resp_len, bool measure, int script)
{
    uint32_t r = rec_alloc(s);
    struct rpcrec *rc = &s->rec[r];
    rc->req_start = now;
    rc->req_len = req_len;
    rc->resp_len = (uint32_t)resp_len;
    rc->src = src;
    rc->dst = dst;
    rc->script = script;
    /* A response is measured if it is a workload message started in the
     * window (decided when it starts) or part of a scripted RPC. */
    if (measure) rc->flags |= R_MEAS_REQ;
    homa_addr dst_addr = vhost_addr(dst);
    struct vhost *vh = s->h[src].vh;
    uint64_t id;
    void *buf = msg_buf(req_len);
    int err = homa_engine_send_request_owned(vh->eng, now, HSIM_CLIENT_PORT, &dst_addr,
                                             HSIM_SERVER_PORT, buf, req_len, r, &id);
    if (err) {
        free(buf);
        s->send_errors++;
        if (measure) s->failed_msgs++;
        rec_free(s, r);
        return;
    }
    rc = &s->rec[r];
    rc->client_id = id;
    tab_insert(s, src, id, r);
    if (in_window(s, now)) count_offered(s, req_len);
    message_started(s, req_len, measure);
    vhost_poke(vh);
}

static void on_ready(struct vhost *vh, uint16_t port, void *app)
{
    struct hsim *s = app;
    uint64_t now = vnet_now(s->net);
    homa_msg m;
    if (port == HSIM_SERVER_PORT) {
        while (homa_engine_recv(vh->eng, port, HOMA_RECV_REQUEST, 0, &m) == 0) {
            int client = vhost_index(&m.peer);
            uint32_t r = tab_take(s, client, m.id ^ 1);
            uint32_t resp_len = 0;
            if (r == NOREC) {
                s->unmatched++; /* cannot happen unless a request is delivered twice */
            } else {
                struct rpcrec *rc = &s->rec[r];
                rc->flags |= R_REQ_DONE;
                s->done_bytes += rc->req_len;
                uint64_t lat = now - rc->req_start;
                if (rc->flags & R_MEAS_REQ) {
                    add_sample(s, rc->req_len, rc->src, rc->dst, lat);
                    s->pending--;
                }
                if (rc->script >= 0) s->script[rc->script].req_lat = lat;
                resp_len = rc->resp_len;
                rc->resp_start = now;
                rc->flags |= R_RESP_STARTED;
                bool meas = rc->script >= 0 || (s->o.reply_bytes < 0 && in_window(s, now));
                if (meas) rc->flags |= R_MEAS_RESP;
                if (in_window(s, now)) count_offered(s, resp_len);
                message_started(s, resp_len, meas);
            }
            void *buf = msg_buf(resp_len);
            if (homa_engine_send_reply_owned(vh->eng, now, port, &m.peer, m.peer_port, m.id, buf,
                                             resp_len) != 0) {
                free(buf);
                s->send_errors++;
            }
            homa_engine_release(vh->eng, &m);
        }
        return;
    }
    while (homa_engine_recv(vh->eng, port, HOMA_RECV_RESPONSE, 0, &m) == 0) {
        uint32_t r = (uint32_t)m.cookie;
        struct rpcrec *rc = &s->rec[r];
        if (m.error) {
            /* The RPC failed: whatever of it was still on its way is lost. */
            if (s->nfail < HSIM_MAX_FAILURES)
                s->fail[s->nfail++] = (struct hsim_failure){(double)rc->req_start / 1e6,
                                                            (double)now / 1e6,
                                                            rc->req_len,
                                                            rc->resp_len,
                                                            rc->src,
                                                            rc->dst,
                                                            (rc->flags & R_REQ_DONE) != 0,
                                                            m.error};
            s->total_failures++;
            if (!(rc->flags & R_REQ_DONE)) {
                tab_take(s, rc->src, rc->client_id);
                s->done_bytes += rc->req_len;
                if (rc->flags & R_MEAS_REQ) {
                    s->failed_msgs++;
                    s->pending--;
                }
            } else {
                s->done_bytes += rc->resp_len;
                if (rc->flags & R_MEAS_RESP) {
                    s->failed_msgs++;
                    s->pending--;
                }
            }
        } else {
            uint64_t lat = now - rc->resp_start;
            s->done_bytes += rc->resp_len;
            if (rc->flags & R_MEAS_RESP) {
                add_sample(s, rc->resp_len, rc->dst, rc->src, lat);
                s->pending--;
            }
            if (rc->script >= 0) s->script[rc->script].resp_lat = lat;
        }
        homa_engine_release(vh->eng, &m);
        rec_free(s, r);
    }
}

/* Poisson arrivals: each host's next RPC start is one event. */
static void arrival(void *arg, uint64_t now)
{
    struct hhost *h = arg;
    struct hsim *s = h->s;
    if (now >= s->t_stop) return;
    int dst = (int)vnet_rng_below(&h->rng, (uint64_t)s->n - 1);
    if (dst >= h->idx) dst++;
    uint32_t req = draw_len(s, h);
    int64_t resp = s->o.reply_bytes >= 0 ? s->o.reply_bytes : (int64_t)draw_len(s, h);
    start_rpc(s, now, h->idx, dst, req, resp, in_window(s, now), -1);
    double gap = vnet_rng_exp(&h->rng, s->gap_ns);
    vnet_at(s->net, now + (uint64_t)llround(gap), arrival, h);
}

struct script_ev {
    struct hsim *s;
    int idx;
};

static void script_fire(void *arg, uint64_t now)
{
    struct script_ev *e = arg;
    struct hsim *s = e->s;
    struct script *sc = &s->script[e->idx];
    int64_t resp = sc->resp_len >= 0 ? sc->resp_len : s->o.reply_bytes >= 0 ? s->o.reply_bytes : 0;
    /* counted as pending when added */
    s->pending--;
    sc->ev = NULL;
    free(e);
    start_rpc(s, now, sc->src, sc->dst, sc->req_len, resp, true, (int)(sc - s->script));
}

int hsim_add_rpc(struct hsim *s, uint64_t t, int src, int dst, uint32_t req_len, int64_t resp_len)
{
    if (src < 0 || dst < 0 || src >= s->n || dst >= s->n || src == dst) return -1;
    if (s->nscript == s->capscript) {
        s->capscript = s->capscript ? 2 * s->capscript : 64;
        s->script = xrealloc(s->script, (size_t)s->capscript * sizeof(*s->script));
    }
    int idx = s->nscript++;
    struct script_ev *e = malloc(sizeof(*e));
    if (!e) return -1;
    s->script[idx] = (struct script){t, src, dst, req_len, resp_len, 0, 0, e};
    e->s = s;
    e->idx = idx;
    s->pending++; /* keeps the run going until it has started */
    vnet_at(s->net, t, script_fire, e);
    return idx;
}

uint64_t hsim_rpc_latency(const struct hsim *s, int idx, bool response)
{
    if (idx < 0 || idx >= s->nscript) return 0;
    return response ? s->script[idx].resp_lat : s->script[idx].req_lat;
}

/* ---- setup ---- */

/* Mean wire bytes of a message; with c, its expected GRANTs count too. */
static double mean_wire(const homa_workload *w, uint32_t trunc, uint32_t mp, uint32_t ovh,
                        const homa_config *c)
{
    size_t np = homa_workload_points(w);
    double prev = 0, sum = 0;
    for (size_t i = 0; i < np; i++) {
        uint32_t L;
        double f;
        homa_workload_point(w, i, &L, &f);
        if (trunc && L > trunc) L = trunc;
        sum += (f - prev) * (hsim_wire_bytes(L, mp, ovh) + grant_wire(c, L, mp, ovh));
        prev = f;
    }
    return sum;
}

/* Default run lengths (simulated ms): long enough for a few thousand short
 * messages and for the backlog of long messages to settle, short enough
 * that `homa-sim reproduce` fits in 30 minutes on 2 cores. */
static void default_times(const char *wl, double *warm, double *meas, double *drain)
{
    /* warm-up, window, drain.  W1/W2 settle within a millisecond and have
     * millions of messages per simulated second; W3-W5 carry most bytes in
     * multi-megabyte messages whose backlog takes 100+ ms to build up, and
     * W5 has only ~55,000 messages per simulated second.  `reproduce` with
     * these takes about 8 minutes on 2 cores. */
    static const double t[5][3] = {
        {2, 10, 2}, {2, 15, 5}, {50, 100, 30}, {200, 300, 50}, {100, 300, 50},
    };
    int k = 3;
    if (wl && (wl[0] == 'w' || wl[0] == 'W') && wl[1] >= '1' && wl[1] <= '5') k = wl[1] - '1';
    *warm = t[k][0];
    *meas = t[k][1];
    *drain = t[k][2];
}

struct hsim *hsim_create(const struct hsim_opts *oin, char *err, size_t errlen)
{
    struct hsim *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->o = *oin;
    struct hsim_opts *o = &s->o;
    s->free_head = NOREC;

    /* topology */
    if (hsim_fabric_layout(o, err, errlen) != 0) goto fail;
    s->n = o->hosts;
    s->np = hsim_fabric_params(o);

    /* workload */
    if (o->workload && *o->workload) {
        /* looks in data_dir, then $HOMA_DATA_DIR, then the source tree or
         * the installed data */
        char dbuf[4096];
        const char *def = homa_tool_data_dir(HOMA_DEFAULT_DATA_DIR, dbuf, sizeof(dbuf));
        int e = homa_workload_load(o->workload, o->data_dir, def, &s->w);
        if (e) {
            snprintf(err, errlen, "workload %s: %s", o->workload, homa_workload_errmsg());
            goto fail;
        }
    }
    s->trunc = o->truncate_1mb ? HOMA_WORKLOAD_LINUX_MAX : 0;
    s->poisson = s->w && o->load > 0;
    /* scripted runs (no workload) may send anything the engine accepts */
    s->max_len = 0x7fffffff;
    if (s->w) {
        uint32_t m = homa_workload_max_size(s->w);
        if (s->trunc && m > s->trunc) m = s->trunc;
        s->max_len = m > 1000000 ? m : 1000000;
    }
    if (o->reply_bytes > (int64_t)s->max_len) s->max_len = (uint32_t)o->reply_bytes;

    /* engine configuration */
    homa_config *c = &s->cfg;
    homa_config_default(c);
    c->max_message_length = s->max_len;
    c->max_payload = o->max_payload;
    uint32_t unsched = o->unsched_bytes ? o->unsched_bytes : hsim_default_unsched(o);
    if (o->sender_driven) unsched = s->max_len; /* nothing ever needs a grant */
    c->unsched_bytes = unsched;
    /* The paper keeps one RTT of bytes granted ahead; the engine grants in
     * batches of a quarter window, so the default window is the smallest
     * that still covers a round trip between batches. */
    c->grant_window = o->sender_driven  ? 0
                      : o->grant_window ? o->grant_window
                                        : hsim_default_window(o);
    if (o->max_incoming) c->max_incoming = o->max_incoming;
    if (o->grant_fifo_permille != UINT32_MAX) c->grant_fifo_permille = o->grant_fifo_permille;
    c->max_rx_bytes = o->max_rx_bytes ? o->max_rx_bytes : (16ull << 30);
    c->link_bps = o->link_bps_pacer;
    if (o->tick_ns) c->tick_ns = o->tick_ns;
    if (o->resend_ticks != UINT32_MAX) c->resend_ticks = o->resend_ticks;
    if (o->resend_interval != UINT32_MAX) c->resend_interval = o->resend_interval;
    if (o->gap_resend_ticks != UINT32_MAX) c->gap_resend_ticks = o->gap_resend_ticks;
    if (o->timeout_ticks != UINT32_MAX) c->timeout_ticks = o->timeout_ticks;
    /* Tombstones and RPC caps sized for the run's rates (defaults suffice
     * for 144 hosts; kept explicit for clarity). */
    if (o->explicit_cutoffs) {
        c->num_priorities = (uint32_t)o->priorities;
        memcpy(c->unsched_cutoffs, o->cutoffs, sizeof(c->unsched_cutoffs));
        s->unsched_levels = 0;
        for (int i = 1; i < o->priorities; i++)
            if (c->unsched_cutoffs[i]) s->unsched_levels++;
    } else if (s->w) {
        s->unsched_levels =
            hsim_compute_cutoffs(s->w, s->trunc, unsched, o->priorities, o->unsched_levels, c);
    } else {
        memset(c->unsched_cutoffs, 0, sizeof(c->unsched_cutoffs));
        c->num_priorities = (uint32_t)o->priorities;
        c->unsched_cutoffs[0] = 0x7fffffff;
        if (o->priorities > 1) c->unsched_cutoffs[o->priorities - 1] = 0x7fffffff;
        s->unsched_levels = 1;
    }
    int sched_levels = o->priorities - s->unsched_levels;
    if (sched_levels < 1) sched_levels = 1;
    if (o->overcommit > 0)
        c->max_overcommit = (uint32_t)o->overcommit;
    else
        c->max_overcommit =
            (uint32_t)(s->w ? hsim_default_overcommit(homa_workload_name(s->w)) : sched_levels);
    if (o->fixed_cutoffs || o->explicit_cutoffs) c->adaptive_cutoffs = 0;
    const char *why;
    if (homa_config_validate(c, &why) != 0) {
        snprintf(err, errlen, "engine configuration: %s", why);
        goto fail;
    }

    /* run lengths */
    double dw, dm, dd;
    default_times(s->w ? homa_workload_name(s->w) : NULL, &dw, &dm, &dd);
    if (!s->poisson) dw = dm = 0, dd = 1000;
    if (o->warmup_ms < 0) o->warmup_ms = dw;
    if (o->measure_ms < 0) o->measure_ms = dm;
    if (o->drain_ms < 0) o->drain_ms = dd;
    s->t_start = (uint64_t)llround(o->warmup_ms * 1e6);
    s->t_end = s->t_start + (uint64_t)llround(o->measure_ms * 1e6);
    s->t_stop = s->t_end + (uint64_t)llround(o->drain_ms * 1e6);

    /* network */
    s->net = hsim_fabric_create(o);
    if (!s->net) {
        snprintf(err, errlen, "invalid network configuration");
        goto fail;
    }
    s->h = calloc((size_t)s->n, sizeof(*s->h));
    s->tab_mask = 4095;
    s->tab = calloc(4096, sizeof(*s->tab));
    s->ideal_cache_n = 1u << 16;
    s->ideal_cache[0] = calloc(s->ideal_cache_n, sizeof(float));
    s->ideal_cache[1] = calloc(s->ideal_cache_n, sizeof(float));
    if (!s->h || !s->tab || !s->ideal_cache[0] || !s->ideal_cache[1]) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    for (int i = 0; i < s->n; i++) {
        struct hhost *h = &s->h[i];
        h->s = s;
        h->idx = i;
        /* a stream per host, so traffic does not depend on network draws */
        vnet_rng_seed(&h->rng, mix64(o->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i + 1));
        h->vh = vhost_create(s->net, c, on_ready, s);
        if (!h->vh) {
            snprintf(err, errlen, "cannot create host %d", i);
            goto fail;
        }
        h->vh->rx_delay_ns = o->rx_delay_ns;
        if (homa_engine_port_open(h->vh->eng, HSIM_SERVER_PORT) ||
            homa_engine_port_open(h->vh->eng, HSIM_CLIENT_PORT)) {
            snprintf(err, errlen, "cannot open ports");
            goto fail;
        }
    }
    if (o->queue_stats) {
        s->qs = calloc(1, sizeof(*s->qs));
        if (!s->qs) oom();
        vnet_at(s->net, s->t_start, qs_fire, s);
    }
    if (s->poisson) {
        const homa_config *gc = o->load_counts_grants ? &s->cfg : NULL;
        double per_rpc = mean_wire(s->w, s->trunc, o->max_payload, o->overhead_bytes, gc);
        if (o->reply_bytes >= 0) {
            uint32_t rb = (uint32_t)o->reply_bytes;
            per_rpc += hsim_wire_bytes(rb, o->max_payload, o->overhead_bytes) +
                       grant_wire(gc, rb, o->max_payload, o->overhead_bytes);
        } else {
            per_rpc *= 2;
        }
        /* each host starts RPCs at rate lambda; each RPC puts per_rpc wire
         * bytes on host uplinks (request at the client, response at the
         * server), so every uplink carries lambda * per_rpc on average */
        double lambda = o->load * (double)o->host_bps / 8.0 / per_rpc;
        s->gap_ns = 1e9 / lambda;
        for (int i = 0; i < s->n; i++) {
            struct hhost *h = &s->h[i];
            double t = vnet_rng_exp(&h->rng, s->gap_ns);
            vnet_at(s->net, (uint64_t)llround(t), arrival, h);
        }
    }
    return s;
fail:
    hsim_destroy(s);
    return NULL;
}

void hsim_destroy(struct hsim *s)
{
    if (!s) return;
    if (s->h)
        for (int i = 0; i < s->n; i++)
            vhost_destroy(s->h[i].vh);
    /* scripted RPCs that never started still own their event argument */
    for (int i = 0; i < s->nscript; i++)
        free(s->script[i].ev);
    vnet_destroy(s->net);
    homa_workload_free(s->w);
    free(s->h);
    free(s->rec);
    free(s->tab);
    free(s->smp);
    free(s->script);
    free(s->ideal_cache[0]);
    free(s->ideal_cache[1]);
    free(s->qs);
    free(s);
}

struct vnet *hsim_net(struct hsim *s)
{
    return s->net;
}

homa_engine *hsim_engine(struct hsim *s, int host)
{
    return host >= 0 && host < s->n ? s->h[host].vh->eng : NULL;
}

const struct hsim_net_params *hsim_params(const struct hsim *s)
{
    return &s->np;
}

/* ---- running and measuring ---- */

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss / 1024.0; /* Linux reports KiB */
}

/* Current resident set in MB (0 if unknown). */
static double rss_mb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, res = 0;
    int n = fscanf(f, "%llu %llu", &size, &res);
    fclose(f);
    return n == 2 ? (double)res * (double)sysconf(_SC_PAGESIZE) / 1048576.0 : 0;
}

static void sum_counters(const struct hsim *s, homa_counters *tot)
{
    memset(tot, 0, sizeof(*tot));
    uint64_t *t = (uint64_t *)(void *)tot;
    size_t nf = sizeof(*tot) / sizeof(uint64_t);
    for (int i = 0; i < s->n; i++) {
        homa_counters c;
        homa_engine_counters(s->h[i].vh->eng, &c);
        const uint64_t *v = (const uint64_t *)(const void *)&c;
        for (size_t k = 0; k < nf; k++)
            t[k] += v[k];
    }
}

static int cmp_sample(const void *a, const void *b)
{
    const struct sample *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    if (x->slowdown != y->slowdown) return x->slowdown < y->slowdown ? -1 : 1;
    return (x->lat_us > y->lat_us) - (x->lat_us < y->lat_us);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static double mean_of(const float *v, uint64_t n)
{
    double sum = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += v[i];
    return n ? sum / (double)n : 0;
}

/* DATA bytes received as they crossed the wire (payload, headers, framing):
 * what achieved load counts. */
static double data_wire(const homa_counters *c, const struct hsim_opts *o)
{
    return (double)c->bytes_in + (double)c->data_in * (HSIM_DATA_HDR + o->overhead_bytes);
}

static void progress(struct hsim *s, uint64_t wall0, uint64_t ev0)
{
    double el = (double)(wall_ns() - wall0) / 1e9;
    uint64_t now = vnet_now(s->net);
    double total = (double)s->t_end;
    double pct = total > 0 ? 100.0 * (double)now / total : 100;
    FILE *f = s->o.progress_out ? s->o.progress_out : stderr;
    fprintf(f,
            "%s%ssim %.2f ms of %.2f (%.0f%%%s), %.2f M events/s, %llu measured done, "
            "%llu pending, backlog %.1f MB, wall %.0f s, rss %.0f MB\n",
            s->o.tag ? s->o.tag : "", s->o.tag ? " " : "", (double)now / 1e6, total / 1e6,
            pct > 100 ? 100 : pct, now > s->t_end ? ", draining" : "",
            (double)(vnet_events_processed(s->net) - ev0) / el / 1e6, (unsigned long long)s->nsmp,
            (unsigned long long)s->pending, (s->started_bytes - s->done_bytes) / 1e6, el,
            peak_rss_mb());
    fflush(f);
}

int hsim_run(struct hsim *s, struct hsim_result *r)
{
    memset(r, 0, sizeof(*r));
    const struct hsim_opts *o = &s->o;
    struct vnet *net = s->net;
    uint64_t wall0 = wall_ns(), ev0 = vnet_events_processed(net);
    uint64_t next_prog = o->progress_s > 0 ? wall0 + (uint64_t)(o->progress_s * 1e9) : UINT64_MAX;
    uint64_t next_mem = wall0 + 1000000000ull;
    homa_counters c0, c1, c2;
    memset(&c0, 0, sizeof(c0));
    memset(&c1, 0, sizeof(c1));
    uint64_t down1 = 0, up1 = 0, pkts_before = 0;
    bool started = false, ended = false;
    int nb = 0;
    const int NBL = 20;
    double interval_b = 0; /* data_wire() at the start of the current interval */
    uint64_t meas_ns = s->t_end - s->t_start;
    const uint64_t chunk = 20000; /* 20 us of simulated time between checks */
    for (;;) {
        uint64_t now = vnet_now(net);
        if (!started && now >= s->t_start) {
            started = true;
            struct vnet_stats vs0;
            vnet_get_stats(net, &vs0);
            pkts_before = vs0.pkts_sent;
            vnet_reset_stats(net);
            sum_counters(s, &c0);
            interval_b = data_wire(&c0, o);
        }
        while (started && meas_ns > 0 && nb < NBL &&
               now >= s->t_start + meas_ns * (uint64_t)(nb + 1) / NBL) {
            r->backlog_mb[nb] = (s->started_bytes - s->done_bytes) / 1e6;
            homa_counters ck;
            sum_counters(s, &ck);
            double b = data_wire(&ck, o);
            uint64_t t0 = s->t_start + meas_ns * (uint64_t)nb / NBL;
            uint64_t t1 = s->t_start + meas_ns * (uint64_t)(nb + 1) / NBL;
            double interval_cap =
                (double)s->n * (double)o->host_bps / 8.0 * ((double)(t1 - t0) / 1e9);
            r->load_intervals[nb++] = interval_cap > 0 ? (b - interval_b) / interval_cap : 0;
            interval_b = b;
        }
        if (started && !ended && now >= s->t_end) {
            ended = true;
            sum_counters(s, &c1);
            hsim_fabric_port_busy(net, o, &down1, &up1, NULL, NULL);
        }
        if (ended && s->pending == 0) break;
        if (now >= s->t_stop) break;
        uint64_t target = now + chunk;
        if (!started && target > s->t_start) target = s->t_start;
        if (started && meas_ns > 0 && nb < NBL) {
            uint64_t ts = s->t_start + meas_ns * (uint64_t)(nb + 1) / NBL;
            if (target > ts) target = ts;
        }
        if (!ended && target > s->t_end) target = s->t_end;
        if (target > s->t_stop) target = s->t_stop;
        vnet_run_until(net, target);
        uint64_t w = wall_ns();
        if (o->progress_s > 0 && w >= next_prog) {
            progress(s, wall0, ev0);
            next_prog = w + (uint64_t)(o->progress_s * 1e9);
        }
        if (o->max_rss_mb > 0 && w >= next_mem) {
            /* Every started message is held by its sender's engine, so a
             * growing backlog grows memory; stop before the machine runs
             * out and report the window measured so far. */
            next_mem = w + 1000000000ull;
            if (rss_mb() > o->max_rss_mb) {
                uint64_t t = vnet_now(net);
                r->stopped_early = true;
                FILE *f = o->progress_out ? o->progress_out : stderr;
                fprintf(f, "%s%sresident memory above %.0f MB at %.2f ms simulated: stopping\n",
                        o->tag ? o->tag : "", o->tag ? " " : "", o->max_rss_mb, (double)t / 1e6);
                if (t < s->t_end) s->t_end = t > s->t_start ? t : s->t_start;
                meas_ns = s->t_end - s->t_start;
                s->t_stop = t;
            }
        }
    }
    uint64_t wall1 = wall_ns();
    uint64_t now = vnet_now(net);
    sum_counters(s, &c2);

    /* messages still on their way: counted with their time so far */
    for (uint32_t i = 0; i < s->nrec; i++) {
        struct rpcrec *rc = &s->rec[i];
        if (!(rc->flags & R_LIVE)) continue;
        if ((rc->flags & R_MEAS_REQ) && !(rc->flags & R_REQ_DONE)) {
            add_sample(s, rc->req_len, rc->src, rc->dst, now - rc->req_start);
            r->incomplete++;
        } else if ((rc->flags & R_MEAS_RESP) && (rc->flags & R_RESP_STARTED)) {
            add_sample(s, rc->resp_len, rc->dst, rc->src, now - rc->resp_start);
            r->incomplete++;
        }
    }

    /* configuration */
    s->o.measure_ms = (double)meas_ns / 1e6; /* shorter if stopped early */
    r->opts = s->o;
    snprintf(r->workload, sizeof(r->workload), "%s", s->w ? homa_workload_name(s->w) : "script");
    r->engine = s->cfg;
    r->unsched_levels = s->unsched_levels;
    r->rtt_ns = hsim_rtt_ns(&s->np, o->racks > 1);
    r->rtt_bytes = (uint32_t)llround(r->rtt_ns * (double)o->host_bps / 8e9);
    r->rpc_rate = s->poisson ? 1e9 / s->gap_ns : 0;
    if (s->w) {
        r->short_cutoff = homa_workload_quantile(s->w, 0.10, s->trunc);
        r->mean_msg_bytes = homa_workload_mean(s->w, s->trunc);
    }

    /* slowdowns */
    uint64_t n = s->nsmp;
    r->measured = n + s->failed_msgs;
    r->completed = n - r->incomplete;
    r->failed = s->failed_msgs;
    r->send_errors = s->send_errors;
    r->nfailures = s->nfail;
    memcpy(r->failures, s->fail, sizeof(s->fail));
    if (n > 0) qsort(s->smp, n, sizeof(*s->smp), cmp_sample);
    float *v = malloc((n ? n : 1) * sizeof(float));
    float *lat = malloc((n ? n : 1) * sizeof(float));
    if (!v || !lat) oom();
    for (uint64_t i = 0; i < n; i++)
        v[i] = s->smp[i].slowdown;
    qsort(v, n, sizeof(float), cmp_float);
    r->all_p50 = hsim_percentile(v, n, 0.50);
    r->all_p99 = hsim_percentile(v, n, 0.99);
    r->all_mean = mean_of(v, n);
    uint64_t ns = 0;
    while (ns < n && s->smp[ns].len <= r->short_cutoff)
        ns++;
    for (uint64_t i = 0; i < ns; i++) {
        v[i] = s->smp[i].slowdown;
        lat[i] = s->smp[i].lat_us;
    }
    qsort(v, ns, sizeof(float), cmp_float);
    qsort(lat, ns, sizeof(float), cmp_float);
    r->short_count = ns;
    r->short_p50 = hsim_percentile(v, ns, 0.50);
    r->short_p99 = hsim_percentile(v, ns, 0.99);
    r->short_mean = mean_of(v, ns);
    r->short_p50_us = hsim_percentile(lat, ns, 0.50);
    r->short_p99_us = hsim_percentile(lat, ns, 0.99);

    /* size buckets: equal-probability quantiles of the workload, merged
     * where a single length spans several */
    int nbk = o->buckets > 0 ? o->buckets : 1;
    if (nbk > HSIM_MAX_BUCKETS) nbk = HSIM_MAX_BUCKETS;
    uint32_t lo = s->w ? homa_workload_quantile(s->w, 0, s->trunc) : 0;
    uint64_t pos = 0;
    for (int b = 0; b < nbk; b++) {
        uint32_t hi =
            s->w ? homa_workload_quantile(s->w, (double)(b + 1) / nbk, s->trunc) : UINT32_MAX;
        if (b == nbk - 1) hi = UINT32_MAX;
        if (r->nbuckets > 0 && hi <= r->bucket[r->nbuckets - 1].max_bytes) continue;
        uint64_t first = pos;
        while (pos < n && s->smp[pos].len <= hi)
            pos++;
        struct hsim_bucket *bk = &r->bucket[r->nbuckets++];
        bk->min_bytes = r->nbuckets == 1 ? lo : r->bucket[r->nbuckets - 2].max_bytes + 1;
        bk->max_bytes = hi == UINT32_MAX ? (s->w ? s->max_len : 0) : hi;
        if (hi == UINT32_MAX && first < pos) bk->max_bytes = s->smp[pos - 1].len;
        if (bk->max_bytes < bk->min_bytes) bk->max_bytes = bk->min_bytes;
        bk->count = pos - first;
        for (uint64_t i = first; i < pos; i++)
            v[i - first] = s->smp[i].slowdown;
        qsort(v, bk->count, sizeof(float), cmp_float);
        bk->p50 = hsim_percentile(v, bk->count, 0.50);
        bk->p99 = hsim_percentile(v, bk->count, 0.99);
        bk->mean = mean_of(v, bk->count);
    }
    free(v);
    free(lat);

    /* network */
    double cap = (double)s->n * (double)o->host_bps / 8.0 * ((double)meas_ns / 1e9);
    if (meas_ns > 0 && ended) {
        double dbytes = data_wire(&c1, o) - data_wire(&c0, o);
        r->offered_load = s->offered_wire / cap;
        r->achieved_load = dbytes / cap;
        r->offered_load_grants = (s->offered_wire + s->offered_grant_wire) / cap;
        double gbytes = (double)(c1.grant_in - c0.grant_in) * (HSIM_GRANT_HDR + o->overhead_bytes);
        r->achieved_load_grants = (dbytes + gbytes) / cap;
        r->downlink_util = (double)down1 / ((double)s->n * (double)meas_ns);
        int links = hsim_fabric_uplinks(o);
        r->uplink_util = links ? (double)up1 / ((double)links * (double)meas_ns) : 0;
    }
    uint64_t down2, up2;
    hsim_fabric_port_busy(net, o, &down2, &up2, &r->max_port_bytes, &r->max_downlink_bytes);
    struct vnet_stats vs;
    vnet_get_stats(net, &vs);
    r->drops = vs.drops_queue;
    r->loss_drops = vs.drops_loss;
    r->resends = c2.resend_out - c0.resend_out;
    r->retransmits = c2.retransmit_pkts - c0.retransmit_pkts;
    r->grants = c2.grant_out - c0.grant_out;
    r->timeouts = c2.client_timeouts - c0.client_timeouts;
    r->engine_drops = c2.drop_no_memory - c0.drop_no_memory;
    r->cutoff_updates = c2.cutoff_updates - c0.cutoff_updates;

    /* backlog trend over the window */
    r->nbacklog = nb;
    if (nb > 1) {
        double sx = 0, sy = 0, sxx = 0, sxy = 0;
        for (int k = 0; k < nb; k++) {
            double x = (double)meas_ns * (k + 1) / NBL / 1e6, y = r->backlog_mb[k];
            sx += x;
            sy += y;
            sxx += x * x;
            sxy += x * y;
        }
        double den = nb * sxx - sx * sx;
        r->backlog_slope = den > 0 ? (nb * sxy - sx * sy) / den : 0;
    }
    r->backlog_end_mb = (s->started_bytes - s->done_bytes) / 1e6;
    if (s->qs && s->qs->samples > 0) {
        const struct qs_acc *q = s->qs;
        double k = (double)q->samples;
        r->has_queue_stats = true;
        r->qs_samples = q->samples;
        r->qs_rx_idle_pending = (double)q->rx_idle_pending / k;
        r->qs_rx_idle_empty = (double)q->rx_idle_empty / k;
        r->qs_tx_idle_unsent = (double)q->tx_idle_unsent / k;
        r->qs_tx_idle_empty = (double)q->tx_idle_empty / k;
        r->qs_both_idle = (double)q->both_idle / k;
        r->qs_rx_grantable = (double)q->grantable / k;
        r->qs_rx_peers = (double)q->peers / k;
        r->qs_tx_msgs = (double)q->tx_msgs / k;
    }
    if (nb >= 5) {
        double sum = 0;
        for (int k = nb - 5; k < nb; k++)
            sum += r->load_intervals[k];
        r->load_last_quarter = sum / 5;
    }

    r->sim_s = (double)now / 1e9;
    r->events = vnet_events_processed(net) - ev0;
    r->packets = pkts_before + vs.pkts_sent;
    r->wall_s = (double)(wall1 - wall0) / 1e9;
    r->events_per_s = r->wall_s > 0 ? (double)r->events / r->wall_s : 0;
    r->packets_per_s = r->wall_s > 0 ? (double)r->packets / r->wall_s : 0;
    r->peak_rss_mb = peak_rss_mb();
    if (o->progress_s > 0) progress(s, wall0, ev0);
    return 0;
}
