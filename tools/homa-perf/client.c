/* homa-perf: the client driver, identical for both transports.
 *
 * Every client thread owns one transport client (a Homa socket, or its TCP
 * connections) and runs the test on it; results are merged at the end.
 *
 * Timing: an RPC's latency is CLOCK_MONOTONIC at the return of the poll that
 * delivered its response minus CLOCK_MONOTONIC just before its send call.
 *
 * Measurement window: a run lasts warmup + seconds.  An RPC is measured if
 * it was sent (closed loop) or scheduled (open loop) after the warmup and
 * before the end; measured RPCs still in flight at the end are waited for
 * (up to --drain seconds; those that never finish count as errors).  Rates
 * divide by the window: from the end of the warmup to the end of the run, or
 * to the last measured completion if that is later. */
#include "perf.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include <homa/errors.h>

#include "pattern.h"
#include "wlgen.h"

#define POLL_BATCH 64

typedef struct tctx {
    const perf_opts *o;
    const perf_addr *addr;
    const wlgen *g;
    const perf_result *cal; /* calibration (workload) */
    int index;
    pthread_t thread;
    perf_result res;
    uint64_t window_ns;
} tctx;

static uint64_t seq_of(int thread, uint64_t n)
{
    return ((uint64_t)thread << 44) | n;
}

/* Records the first fatal error of the thread with a readable reason. */
static void fatal_tp(perf_result *r, int proto, const char *what, int err)
{
    if (!r->fatal[0]) snprintf(r->fatal, sizeof(r->fatal), "%s: %s", what, pt_strerror(proto, err));
}

/* ---- Closed loop: rtt and tput --------------------------------------- */

/* The request of slot i: the transport's own buffer when it can send
 * without copying (get_buf), else the shared one; the pattern with
 * --verify.  NULL if out of memory. */
/* Zero-copy sends (get_buf/send_buf) recycle each response as the next
 * request of its slot: only for echoes, whose responses are as long. */
static int zero_copy(const pt_client *c)
{
    return c->ops->get_buf && c->ops->send_buf && perf_reply_size < 0;
}

static uint8_t *closed_fill(const perf_opts *o, pt_client *c, int i, uint64_t seq, uint8_t *shared)
{
    uint8_t *b = zero_copy(c) ? c->ops->get_buf(c, i, o->size) : shared;
    if (b && o->verify) pattern_fill(b, o->size, seq);
    return b;
}

static int closed_send(const perf_opts *o, pt_client *c, int i, uint8_t *b)
{
    if (zero_copy(c)) return c->ops->send_buf(c, i, (uint64_t)i, b, o->size);
    return c->ops->send(c, i, (uint64_t)i, b, o->size);
}

static void closed_loop(tctx *t, pt_client *c)
{
    const perf_opts *o = t->o;
    perf_result *r = &t->res;
    int n = o->outstanding;
    size_t size = o->size;
    /* the response length: an echo, or --reply-size */
    size_t reply = perf_reply_size >= 0 ? (size_t)perf_reply_size : size;
    uint64_t *seq = calloc((size_t)n, sizeof(uint64_t));
    uint64_t *t_send = calloc((size_t)n, sizeof(uint64_t));
    uint8_t *buf = malloc(size ? size : 1);
    if (buf) memset(buf, 0x5a, size); /* the bytes get_buf gives a new buffer */
    pt_completion comp[POLL_BATCH];
    if (!seq || !t_send || !buf) {
        snprintf(r->fatal, sizeof(r->fatal), "out of memory");
        goto out;
    }
    memset(buf, 0x5a, size);
    uint64_t count = 0;
    uint64_t start = perf_now_ns();
    uint64_t warm_end = start + (uint64_t)(o->warmup * 1e9);
    uint64_t end = warm_end + (uint64_t)(o->seconds * 1e9);
    uint64_t drain_end = end + (uint64_t)(o->drain * 1e9);
    uint64_t last_done = end;
    int inflight = 0;
    for (int i = 0; i < n; i++) {
        seq[i] = seq_of(t->index, count++);
        uint8_t *b = closed_fill(o, c, i, seq[i], buf);
        t_send[i] = perf_now_ns();
        int rc = b ? closed_send(o, c, i, b) : -ENOMEM;
        if (rc < 0) {
            fatal_tp(r, o->proto, "send", rc);
            goto out;
        }
        inflight++;
    }
    while (inflight > 0) {
        uint64_t now = perf_now_ns();
        uint64_t deadline = now < end ? end : drain_end;
        int got = c->ops->poll(c, deadline, comp, POLL_BATCH < n ? POLL_BATCH : n);
        now = perf_now_ns();
        if (got < 0) {
            fatal_tp(r, o->proto, "poll", got);
            break;
        }
        for (int k = 0; k < got; k++) {
            int i = (int)comp[k].cookie;
            if (i < 0 || i >= n) {
                snprintf(r->fatal, sizeof(r->fatal), "response with unknown cookie %llu",
                         (unsigned long long)comp[k].cookie);
                goto out;
            }
            inflight--;
            int measured = t_send[i] >= warm_end && t_send[i] < end;
            if (comp[k].error) {
                perf_result_fail(r, comp[k].error, 1);
            } else if (o->verify && perf_reply_size < 0 &&
                       (comp[k].len != size || !pattern_check(comp[k].data, size, seq[i]))) {
                r->mismatches++;
            } else if (comp[k].len != reply) {
                r->mismatches++;
            } else if (measured) {
                r->rpcs++;
                r->bytes += (uint64_t)size + reply;
                hist_record(&r->lat, now - t_send[i]);
                if (now > last_done) last_done = now;
            }
            if (now < end) {
                /* The response is done with: the next request may reuse its
                 * memory (get_buf). */
                seq[i] = seq_of(t->index, count++);
                uint8_t *b = closed_fill(o, c, i, seq[i], buf);
                t_send[i] = perf_now_ns();
                int rc = b ? closed_send(o, c, i, b) : -ENOMEM;
                if (rc < 0) {
                    fatal_tp(r, o->proto, "send", rc);
                    goto out;
                }
                inflight++;
            }
        }
        if (got == 0 && perf_now_ns() >= drain_end) break;
    }
    r->unfinished += (uint64_t)inflight;
    t->window_ns = last_done - warm_end;
out:
    free(seq);
    free(t_send);
    free(buf);
}

/* ---- Open loop: workloads -------------------------------------------- */

typedef struct oslot {
    uint64_t seq;
    uint64_t t_send;
    uint32_t size;
    int measured;
    int next_free;
} oslot;

typedef struct slot_pool {
    oslot *s;
    int cap;
    int free_head;
} slot_pool;

static int pool_get(slot_pool *p)
{
    if (p->free_head < 0) {
        int ncap = p->cap ? 2 * p->cap : 256;
        oslot *s = realloc(p->s, (size_t)ncap * sizeof(*s));
        if (!s) return -1;
        for (int i = p->cap; i < ncap; i++)
            s[i].next_free = i + 1 < ncap ? i + 1 : -1;
        p->s = s;
        p->free_head = p->cap;
        p->cap = ncap;
    }
    int i = p->free_head;
    p->free_head = p->s[i].next_free;
    p->s[i].next_free = -2; /* in use */
    return i;
}

static void pool_put(slot_pool *p, int i)
{
    p->s[i].next_free = p->free_head;
    p->free_head = i;
}

static void record_workload(perf_result *r, const perf_result *cal, uint32_t size, uint64_t lat)
{
    hist_record(&r->lat, lat);
    int b = perf_bucket_of(r, size);
    hist_record(&r->buckets[b].lat, lat);
    double best = perf_best_ns(cal, size);
    if (best > 0) {
        double sd = (double)lat / best;
        uint64_t v = (uint64_t)(sd * 1000.0 + 0.5);
        hist_record(&r->slow, v);
        hist_record(&r->buckets[b].slow, v);
    }
}

static void open_loop(tctx *t, pt_client *c)
{
    const perf_opts *o = t->o;
    perf_result *r = &t->res;
    const wlgen *g = t->g;
    slot_pool pool = {NULL, 0, -1};
    pt_completion comp[POLL_BATCH];
    uint8_t *buf = malloc(g->max_size ? g->max_size : 1);
    if (!buf) {
        snprintf(r->fatal, sizeof(r->fatal), "out of memory");
        return;
    }
    memset(buf, 0x5a, g->max_size);
    perf_rng rng;
    rng_seed(&rng, o->seed, (uint64_t)t->index);
    /* Per-thread request rate: offered bits/s of requests over mean bits. */
    double rate = o->gbps * 1e9 / 8.0 / g->mean / (double)o->threads;
    double mean_gap_ns = 1e9 / rate;
    uint64_t count = 0;
    uint64_t start = perf_now_ns();
    uint64_t warm_end = start + (uint64_t)(o->warmup * 1e9);
    uint64_t end = warm_end + (uint64_t)(o->seconds * 1e9);
    uint64_t drain_end = end + (uint64_t)(o->drain * 1e9);
    uint64_t last_done = end;
    double next_arrival = (double)start + rng_exp(&rng, mean_gap_ns);
    int inflight = 0;
    int issuing = 1;
    for (;;) {
        uint64_t now = perf_now_ns();
        /* Issue every arrival that is due. */
        while (issuing && (double)now >= next_arrival) {
            uint64_t sched = (uint64_t)next_arrival;
            if (sched >= end) {
                issuing = 0;
                break;
            }
            int i = pool_get(&pool);
            if (i < 0) {
                snprintf(r->fatal, sizeof(r->fatal), "out of memory");
                goto out;
            }
            oslot *s = &pool.s[i];
            s->seq = seq_of(t->index, count++);
            s->size = wlgen_sample(g, &rng);
            s->measured = sched >= warm_end;
            if (o->verify) pattern_fill(buf, s->size, s->seq);
            s->t_send = perf_now_ns();
            if (s->measured) hist_record(&r->lag, s->t_send - sched);
            int rc = c->ops->send(c, -1, (uint64_t)i, buf, s->size);
            if (rc < 0 && o->proto == PERF_HOMA && (rc == HOMA_ERR_LIMIT || rc == HOMA_ERR_NOMEM)) {
                /* Overload: the RPC is refused, the run goes on. */
                perf_result_fail(r, rc, 1);
                pool_put(&pool, i);
                next_arrival += rng_exp(&rng, mean_gap_ns);
                now = perf_now_ns();
                continue;
            }
            if (rc < 0) {
                fatal_tp(r, o->proto, "send", rc);
                goto out;
            }
            inflight++;
            next_arrival += rng_exp(&rng, mean_gap_ns);
            now = perf_now_ns();
        }
        if (now >= end) issuing = 0;
        if (!issuing && inflight == 0) break;
        if (!issuing && now >= drain_end) break;
        uint64_t deadline = issuing ? (uint64_t)next_arrival : drain_end;
        if (issuing && deadline > end) deadline = end;
        int got = c->ops->poll(c, deadline, comp, POLL_BATCH);
        now = perf_now_ns();
        if (got < 0) {
            fatal_tp(r, o->proto, "poll", got);
            break;
        }
        for (int k = 0; k < got; k++) {
            int i = (int)comp[k].cookie;
            if (i < 0 || i >= pool.cap || pool.s[i].next_free != -2) {
                snprintf(r->fatal, sizeof(r->fatal), "response with unknown cookie %llu",
                         (unsigned long long)comp[k].cookie);
                goto out;
            }
            oslot *s = &pool.s[i];
            inflight--;
            if (comp[k].error) {
                perf_result_fail(r, comp[k].error, 1);
            } else if (comp[k].len != s->size ||
                       (o->verify && !pattern_check(comp[k].data, s->size, s->seq))) {
                r->mismatches++;
            } else if (s->measured) {
                r->rpcs++;
                r->bytes += 2 * (uint64_t)s->size;
                record_workload(r, t->cal, s->size, now - s->t_send);
                if (now > last_done) last_done = now;
            }
            pool_put(&pool, i);
        }
    }
    r->unfinished += (uint64_t)inflight;
    t->window_ns = last_done - warm_end;
out:
    free(pool.s);
    free(buf);
}

/* ---- Calibration (workload slowdown) --------------------------------- */

#define CAL_MAX_SAMPLES 200
#define CAL_MIN_SAMPLES 5
#define CAL_TIME_NS 40000000ull

/* Measures the unloaded (one RPC at a time) minimum RTT of every size in
 * r->cal[] on a fresh client (one connection for TCP). */
static int calibrate(const perf_opts *o, const perf_addr *addr, perf_result *r)
{
    char err[256] = "";
    pt_client *c;
    int rc = pt_client_create(o, addr, 1, &c, err, sizeof(err));
    if (rc < 0) {
        snprintf(r->fatal, sizeof(r->fatal), "calibration: %.200s", err);
        return -1;
    }
    uint32_t maxs = 0;
    for (int i = 0; i < r->ncal; i++)
        if (r->cal[i].size > maxs) maxs = r->cal[i].size;
    uint8_t *buf = calloc(1, maxs ? maxs : 1);
    if (!buf) {
        c->ops->destroy(c);
        snprintf(r->fatal, sizeof(r->fatal), "out of memory");
        return -1;
    }
    pt_completion comp[4];
    /* Warm up the path with a few small RPCs first. */
    for (int pass = -1; pass < r->ncal && !r->fatal[0]; pass++) {
        uint32_t size = pass < 0 ? r->cal[0].size : r->cal[pass].size;
        uint64_t best = UINT64_MAX, samples = 0;
        uint64_t t_end = perf_now_ns() + CAL_TIME_NS;
        while (samples < CAL_MIN_SAMPLES || (samples < CAL_MAX_SAMPLES && perf_now_ns() < t_end)) {
            uint64_t t0 = perf_now_ns();
            rc = c->ops->send(c, 0, 0, buf, size);
            if (rc < 0) {
                fatal_tp(r, o->proto, "calibration send", rc);
                break;
            }
            double limit = o->drain > 5.0 ? o->drain : 5.0;
            int got = c->ops->poll(c, t0 + (uint64_t)(limit * 1e9), comp, 4);
            uint64_t t1 = perf_now_ns();
            if (got <= 0 || comp[0].error) {
                fatal_tp(r, o->proto, "calibration RPC",
                         got < 0    ? got
                         : got == 0 ? -ETIMEDOUT
                                    : comp[0].error);
                break;
            }
            if (t1 - t0 < best) best = t1 - t0;
            samples++;
        }
        if (pass >= 0) {
            r->cal[pass].min_ns = best;
            r->cal[pass].samples = samples;
        }
    }
    free(buf);
    c->ops->destroy(c);
    return r->fatal[0] ? -1 : 0;
}

/* ---- Threads and merging --------------------------------------------- */

static void *client_thread(void *arg)
{
    tctx *t = arg;
    const perf_opts *o = t->o;
    char err[256] = "";
    /* Wake up on time for open-loop arrivals (the default slack is 50 us). */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    pt_client *c;
    int conns = o->test == TEST_WORKLOAD ? o->conns : o->outstanding;
    int rc = pt_client_create(o, t->addr, conns, &c, err, sizeof(err));
    if (rc < 0) {
        snprintf(t->res.fatal, sizeof(t->res.fatal), "%s", err[0] ? err : "cannot create client");
        return NULL;
    }
    if (o->test == TEST_WORKLOAD)
        open_loop(t, c);
    else
        closed_loop(t, c);
    c->ops->destroy(c);
    return NULL;
}

int perf_run_client(const perf_opts *o, const perf_addr *addr, perf_result *res)
{
    wlgen g;
    memset(&g, 0, sizeof(g));
    res->proto = o->proto;
    res->test = o->test;
    res->size = o->test == TEST_WORKLOAD ? 0 : o->size;
    res->outstanding = o->test == TEST_WORKLOAD ? 0 : o->outstanding;
    res->threads = o->threads;
    res->conns = o->proto == PERF_TCP ? (o->test == TEST_WORKLOAD ? o->conns : o->outstanding) : 0;
    res->verify = o->verify;
    res->busy_poll_us = perf_busy_poll_us(o);
    if (o->test == TEST_WORKLOAD) {
        if (wlgen_open(&g, o->workload, o->data_dir, o->max_size, res->fatal, sizeof(res->fatal)) <
            0)
            return -1;
        snprintf(res->workload, sizeof(res->workload), "%s", homa_workload_name(g.w));
        res->max_size = g.max_size;
        res->mean_size = g.mean;
        res->offered_gbps = o->gbps;
        wlgen_make_buckets(&g, res);
        wlgen_cal_sizes(&g, res);
        if (o->calibrate && calibrate(o, addr, res) < 0) {
            wlgen_close(&g);
            return -1;
        }
        if (!o->calibrate) res->ncal = 0;
    }
    int n = o->threads;
    tctx *t = calloc((size_t)n, sizeof(*t));
    if (!t) {
        wlgen_close(&g);
        snprintf(res->fatal, sizeof(res->fatal), "out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        t[i].o = o;
        t[i].addr = addr;
        t[i].g = &g;
        t[i].cal = res;
        t[i].index = i;
        perf_result_init(&t[i].res);
        t[i].res.nbuckets = res->nbuckets;
        memcpy(t[i].res.buckets, res->buckets, sizeof(res->buckets));
    }
    int started = 0;
    for (; started < n; started++)
        if (pthread_create(&t[started].thread, NULL, client_thread, &t[started]) != 0) break;
    if (started < n)
        snprintf(res->fatal, sizeof(res->fatal), "cannot start client thread %d", started);
    uint64_t window = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(t[i].thread, NULL);
        perf_result_merge(res, &t[i].res);
        if (t[i].window_ns > window) window = t[i].window_ns;
        if (t[i].res.fatal[0] && !res->fatal[0])
            snprintf(res->fatal, sizeof(res->fatal), "thread %d: %.200s", i, t[i].res.fatal);
    }
    for (int i = 0; i < n; i++)
        perf_result_free(&t[i].res);
    free(t);
    wlgen_close(&g);
    res->window_s = (double)window / 1e9;
    res->errors = res->failed + res->mismatches + res->unfinished;
    return res->fatal[0] ? -1 : 0;
}
