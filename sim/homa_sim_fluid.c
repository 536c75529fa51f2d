/* homa-sim fluid: the matching that Homa's schedulers aim for, without
 * packets.
 *
 * Every host sends one message at a time and receives one at a time, each
 * at the full link rate.  Whenever a message arrives or finishes, the pairs
 * are chosen again, greedily in one global order: for SRPT (what Homa's
 * senders and receivers both use) the message with the fewest remaining
 * bytes is served first if its sender and its receiver are both free, then
 * the next, and so on.  With the same key on both sides this greedy
 * matching is exactly the stable outcome of receivers granting their
 * shortest messages and senders sending their shortest granted ones.  No
 * headers, no round trips, no queues, no grants: what is left is the
 * matching itself, so load this model cannot carry is lost to the
 * scheduling order, not to packets.  (It is an idealization, not a strict
 * bound: a real sender may slip packets of a second message in while its
 * first waits for grants.)
 *
 * Between events the matching does not change (under SRPT a served message
 * only gets shorter, so it keeps its place ahead of the ones it blocks;
 * FIFO's order is fixed), and messages are kept sorted by the key with an
 * insertion pass after each event.  An order in which served messages could
 * fall behind waiting ones (longest first) would need events for those
 * crossings too, so it is not offered. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data_dir.h"
#include "homa_sim.h"

/* The source tree's data/ when the build compiled it in (data_dir.h). */
#ifndef HOMA_DEFAULT_DATA_DIR
#define HOMA_DEFAULT_DATA_DIR NULL
#endif

struct fmsg {
    double rem;   /* bytes left */
    double birth; /* arrival time, s */
    uint32_t size;
    int src, dst, id; /* id: index into the script, or -1 */
    bool served;
};

struct fluid {
    const struct hsim_fluid_opts *o;
    struct fmsg *m;
    size_t n, cap;
    unsigned char *tx_busy, *rx_busy, *rx_has;
    int *rx_nact;    /* overcommit: messages in each receiver's active set */
    int *rx_act_src; /* overcommit: their senders, K per receiver */
};

static double key(const struct fluid *f, const struct fmsg *m)
{
    return f->o->order == HSIM_FLUID_FIFO ? m->birth : m->rem;
}

static void sort_pass(struct fluid *f)
{
    for (size_t i = 1; i < f->n; i++) {
        struct fmsg x = f->m[i];
        double k = key(f, &x);
        size_t j = i;
        while (j > 0 && key(f, &f->m[j - 1]) > k) {
            f->m[j] = f->m[j - 1];
            j--;
        }
        f->m[j] = x;
    }
}

/* With an overcommit limit K, may m be served?  Only if it is among the K
 * first messages of its receiver in key order, at most one per sender: the
 * receiver's active set, the only messages it grants to, whether or not
 * their senders are free.  Called once per message in key order; admitting
 * m records its sender in the set. */
static bool admit_to_active_set(struct fluid *f, const struct fmsg *m)
{
    int K = f->o->overcommit;
    if (K <= 0) return true;
    int *srcs = &f->rx_act_src[(size_t)m->dst * (size_t)K];
    int n = f->rx_nact[m->dst];
    if (n >= K) return false;
    for (int i = 0; i < n; i++)
        if (srcs[i] == m->src) return false;
    srcs[n] = m->src;
    f->rx_nact[m->dst] = n + 1;
    return true;
}

/* Greedy matching in key order; returns the number of pairs. */
static int match(struct fluid *f)
{
    int H = f->o->hosts, pairs = 0;
    memset(f->tx_busy, 0, (size_t)H);
    memset(f->rx_busy, 0, (size_t)H);
    memset(f->rx_has, 0, (size_t)H);
    if (f->rx_nact) memset(f->rx_nact, 0, (size_t)H * sizeof(int));
    for (size_t i = 0; i < f->n; i++) {
        struct fmsg *m = &f->m[i];
        f->rx_has[m->dst] = 1;
        m->served = admit_to_active_set(f, m) && !f->tx_busy[m->src] && !f->rx_busy[m->dst];
        if (m->served) {
            f->tx_busy[m->src] = f->rx_busy[m->dst] = 1;
            pairs++;
        }
    }
    return pairs;
}

static int add_msg(struct fluid *f, double t, int src, int dst, uint32_t size, int id)
{
    if (f->n == f->cap) {
        size_t nc = f->cap ? 2 * f->cap : 1024;
        struct fmsg *nm = realloc(f->m, nc * sizeof(*nm));
        if (!nm) return -1;
        f->m = nm;
        f->cap = nc;
    }
    f->m[f->n++] = (struct fmsg){(double)size, t, size, src, dst, id, false};
    return 0;
}

/* End of measurement interval i of 20 in [T0, T]; the last one ends at T
 * exactly, whatever the rounding of the others. */
static double interval_end(double T0, double T, int i)
{
    return i + 1 >= 20 ? T : T0 + (T - T0) * (i + 1) / 20;
}

int hsim_fluid_run(const struct hsim_fluid_opts *o, struct hsim_fluid_result *r, char *err,
                   size_t errlen)
{
    memset(r, 0, sizeof(*r));
    /* Times are doubles in seconds; an hour at most keeps a byte well above
     * their rounding at any link rate. */
    if (o->hosts < 2 || o->host_bps == 0 || !(o->seconds <= 3600) ||
        !(o->warmup_s >= 0 && o->seconds - o->warmup_s >= 1e-6) ||
        (!o->script && !(o->load > 0 && o->load <= 2)) ||
        (o->order != HSIM_FLUID_SRPT && o->order != HSIM_FLUID_FIFO) || o->nscript < 0 ||
        o->overcommit < 0 || o->overcommit > 64) {
        snprintf(err, errlen,
                 "fluid: need hosts >= 2, a link rate, 0 < load <= 2, order srpt or fifo, "
                 "overcommit 0-64, and a window of 1 us to 1 h after the warm-up");
        return -1;
    }
    for (int i = 0; o->script && i < o->nscript; i++) {
        double t = o->script[i].t;
        if (!(t >= 0 && t <= o->seconds) || (i > 0 && t < o->script[i - 1].t)) {
            snprintf(err, errlen, "fluid: script times must be sorted, within [0, %g] s",
                     o->seconds);
            return -1;
        }
    }
    homa_workload *w = NULL;
    uint32_t trunc = o->truncate_1mb ? HOMA_WORKLOAD_LINUX_MAX : 0;
    if (!o->script) {
        char dbuf[4096];
        const char *def = homa_tool_data_dir(HOMA_DEFAULT_DATA_DIR, dbuf, sizeof(dbuf));
        int e = homa_workload_load(o->workload, o->data_dir, def, &w);
        if (e) {
            snprintf(err, errlen, "%s", homa_workload_errmsg());
            return -1;
        }
    }
    struct timespec ts0;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    struct fluid f = {.o = o};
    int H = o->hosts;
    f.tx_busy = calloc((size_t)H, 1);
    f.rx_busy = calloc((size_t)H, 1);
    f.rx_has = calloc((size_t)H, 1);
    if (o->overcommit > 0) {
        f.rx_nact = calloc((size_t)H, sizeof(int));
        f.rx_act_src = calloc((size_t)H * (size_t)o->overcommit, sizeof(int));
    }
    int rc = -1;
    if (!f.tx_busy || !f.rx_busy || !f.rx_has ||
        (o->overcommit > 0 && (!f.rx_nact || !f.rx_act_src))) {
        snprintf(err, errlen, "fluid: out of memory");
        goto out;
    }

    const double rate = (double)o->host_bps / 8.0; /* bytes/s */
    const double T = o->seconds, T0 = o->warmup_s, win = T - T0;
    struct vnet_rng rng;
    vnet_rng_seed(&rng, o->seed);
    double lambda = 0; /* messages/s, all hosts */
    if (w) {
        r->mean_msg_bytes = homa_workload_mean(w, trunc);
        lambda = o->load * rate * H / r->mean_msg_bytes;
    }
    int next_script = 0;
    double next_arr = w ? vnet_rng_exp(&rng, 1.0 / lambda) : INFINITY;
    if (o->script) next_arr = o->nscript > 0 ? o->script[0].t : INFINITY;

    double t = 0, offered = 0;
    const int NS = 20;
    int iv = 0; /* next interval boundary to record */
    double idle_wait = 0, idle_empty = 0;
    for (;;) {
        int pairs = match(&f);
        double tc = INFINITY;
        size_t first = SIZE_MAX; /* the served message that finishes first */
        for (size_t i = 0; i < f.n; i++)
            if (f.m[i].served && f.m[i].rem / rate < tc) {
                tc = f.m[i].rem / rate;
                first = i;
            }
        double tn = fmin(fmin(next_arr, t + tc), T);
        /* an interval boundary splits the step so each interval gets its share */
        if (t < T0) tn = fmin(tn, T0);
        if (iv < NS) tn = fmin(tn, interval_end(T0, T, iv));
        bool finishes = first != SIZE_MAX && tn >= t + tc;
        double dt = tn - t;
        if (t >= T0 && dt > 0 && iv < NS) {
            int waiting = 0;
            for (int h = 0; h < H; h++)
                waiting += !f.rx_busy[h] && f.rx_has[h];
            idle_wait += waiting * dt;
            idle_empty += (H - pairs - waiting) * dt;
            r->load_intervals[iv] += pairs * rate * dt;
        }
        double moved = rate * dt;
        for (size_t i = 0; i < f.n; i++)
            if (f.m[i].served) f.m[i].rem -= moved;
        /* The step ended at that message's finish: it is done even if
         * rounding left a crumb (late in a long run t + tc can round to t,
         * and a crumb would then never drain). */
        if (finishes) f.m[first].rem = 0;
        t = tn;
        r->events++;
        /* finished messages (a tolerance of a millibyte absorbs rounding) */
        size_t k = 0;
        for (size_t i = 0; i < f.n; i++) {
            struct fmsg *m = &f.m[i];
            if (m->rem > 1e-3) {
                f.m[k++] = *m;
                continue;
            }
            r->completed++;
            if (m->id >= 0 && o->finish) o->finish[m->id] = t;
        }
        f.n = k;
        if (iv < NS && t >= interval_end(T0, T, iv)) {
            double b = 0;
            for (size_t i = 0; i < f.n; i++)
                b += f.m[i].rem;
            r->backlog_mb[iv++] = b / 1e6;
        }
        if (t >= T) break;
        while (t >= next_arr) {
            int src, dst;
            uint32_t size;
            int id = -1;
            if (o->script) {
                const struct hsim_fluid_msg *s = &o->script[next_script];
                src = s->src;
                dst = s->dst;
                size = s->bytes;
                id = next_script++;
                next_arr = next_script < o->nscript ? o->script[next_script].t : INFINITY;
                if (src < 0 || src >= H || dst < 0 || dst >= H || src == dst) {
                    snprintf(err, errlen, "fluid: script message %d has bad hosts", id);
                    goto out;
                }
            } else {
                size = homa_workload_sample(w, vnet_rng_uniform(&rng), trunc);
                src = (int)vnet_rng_below(&rng, (uint64_t)H);
                dst = (int)vnet_rng_below(&rng, (uint64_t)H - 1);
                if (dst >= src) dst++;
                next_arr = t + vnet_rng_exp(&rng, 1.0 / lambda);
            }
            if (size == 0) {
                r->completed++;
                if (id >= 0 && o->finish) o->finish[id] = t;
            } else if (add_msg(&f, t, src, dst, size, id) != 0) {
                snprintf(err, errlen, "fluid: out of memory at %zu messages", f.n);
                goto out;
            }
            r->arrivals++;
            if (t >= T0) offered += size;
        }
        sort_pass(&f);
        if (f.n > r->max_active) r->max_active = f.n;
    }
    double cap = rate * H * win;
    r->offered_load = offered / cap;
    double sum = 0;
    for (int i = 0; i < NS; i++) {
        sum += r->load_intervals[i];
        r->load_intervals[i] /= cap / NS;
    }
    r->achieved_load = sum / cap;
    r->load_last_quarter = 0;
    for (int i = NS - NS / 4; i < NS; i++)
        r->load_last_quarter += r->load_intervals[i] / (NS / 4);
    r->rx_idle_pending = idle_wait / (H * win);
    r->rx_idle_empty = idle_empty / (H * win);
    r->active_end = f.n;
    /* least-squares slope of the backlog over the intervals, MB per ms */
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < NS; i++) {
        double x = win * 1e3 * (i + 1) / NS;
        sx += x;
        sy += r->backlog_mb[i];
        sxx += x * x;
        sxy += x * r->backlog_mb[i];
    }
    double den = NS * sxx - sx * sx;
    r->backlog_slope = den > 0 ? (NS * sxy - sx * sy) / den : 0;
    struct timespec ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    r->wall_s = (double)(ts1.tv_sec - ts0.tv_sec) + (double)(ts1.tv_nsec - ts0.tv_nsec) / 1e9;
    rc = 0;
out:
    free(f.m);
    free(f.tx_busy);
    free(f.rx_busy);
    free(f.rx_has);
    free(f.rx_nact);
    free(f.rx_act_src);
    homa_workload_free(w);
    return rc;
}
