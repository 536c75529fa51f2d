/* homa-perf: workload generation (see wlgen.h). */
#include "wlgen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_dir.h"

/* The source tree's data/ when the build compiled it in (data_dir.h). */
#ifndef HOMA_DATA_DIR
#define HOMA_DATA_DIR NULL
#endif

void rng_seed(perf_rng *r, uint64_t seed, uint64_t stream)
{
    r->state = seed ^ (stream * 0xd1342543de82ef95ull) ^ 0x2545f4914f6cdd1dull;
}

uint64_t rng_next(perf_rng *r)
{
    r->state += 0x9e3779b97f4a7c15ull;
    uint64_t z = r->state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double rng_uniform(perf_rng *r)
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double rng_exp(perf_rng *r, double mean)
{
    return -mean * log1p(-rng_uniform(r));
}

int wlgen_open(wlgen *g, const char *name, const char *data_dir, uint32_t max_size, char *err,
               size_t errlen)
{
    memset(g, 0, sizeof(*g));
    char dbuf[4096];
    const char *def = homa_tool_data_dir(HOMA_DATA_DIR, dbuf, sizeof(dbuf));
    int rc = homa_workload_load(name, data_dir, def, &g->w);
    if (rc < 0) {
        snprintf(err, errlen, "workload %s: %s", name, homa_workload_errmsg());
        return -1;
    }
    uint32_t wmax = homa_workload_max_size(g->w);
    g->max_size = (max_size == 0 || max_size > wmax) ? wmax : max_size;
    g->mean = homa_workload_mean(g->w, g->max_size);
    return 0;
}

void wlgen_close(wlgen *g)
{
    homa_workload_free(g->w);
    g->w = NULL;
}

uint32_t wlgen_sample(const wlgen *g, perf_rng *r)
{
    return homa_workload_sample(g->w, rng_uniform(r), g->max_size);
}

static double clamped_cdf(const wlgen *g, uint32_t size)
{
    return size >= g->max_size ? 1.0 : homa_workload_cdf(g->w, size);
}

void wlgen_make_buckets(const wlgen *g, perf_result *r)
{
    int n = 0;
    uint32_t prev = 0;
    double prev_cdf = 0.0;
    for (int k = 1; k <= 10 && n < PERF_MAX_BUCKETS; k++) {
        uint32_t hi = k == 10 ? g->max_size : homa_workload_quantile(g->w, k / 10.0, g->max_size);
        if (hi <= prev) continue;
        double c = clamped_cdf(g, hi);
        r->buckets[n].lo = prev;
        r->buckets[n].hi = hi;
        r->buckets[n].fraction = c - prev_cdf;
        prev = hi;
        prev_cdf = c;
        n++;
    }
    r->nbuckets = n;
}

int perf_bucket_of(const perf_result *r, uint32_t size)
{
    int lo = 0, hi = r->nbuckets - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (size <= r->buckets[mid].hi)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void wlgen_cal_sizes(const wlgen *g, perf_result *r)
{
    uint32_t s[4 * PERF_MAX_CAL];
    int n = 0;
    uint32_t lo = homa_workload_min_size(g->w);
    if (lo > g->max_size) lo = g->max_size;
    s[n++] = lo;
    for (int i = 0; i < r->nbuckets; i++)
        s[n++] = r->buckets[i].hi;
    for (uint64_t v = (uint64_t)lo * 4; v < g->max_size && n < 3 * PERF_MAX_CAL; v *= 4)
        s[n++] = (uint32_t)v;
    s[n++] = g->max_size;
    qsort(s, (size_t)n, sizeof(s[0]), cmp_u32);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || s[i] != s[m - 1]) s[m++] = s[i];
    /* Too many points (not the case for W1-W5): keep evenly spaced ones,
     * always including the first and the last. */
    int keep = m < PERF_MAX_CAL ? m : PERF_MAX_CAL;
    for (int j = 0; j < keep; j++) {
        int i = keep == m ? j : (int)(((int64_t)j * (m - 1)) / (keep - 1));
        r->cal[j].size = s[i];
        r->cal[j].min_ns = 0;
        r->cal[j].samples = 0;
    }
    r->ncal = keep;
}

double perf_best_ns(const perf_result *r, uint32_t size)
{
    int n = r->ncal;
    if (n == 0) return 0.0;
    double y[PERF_MAX_CAL];
    double run = INFINITY;
    for (int i = n - 1; i >= 0; i--) {
        double v = (double)r->cal[i].min_ns;
        if (v < run) run = v;
        y[i] = run;
    }
    if (size <= r->cal[0].size || n == 1) return y[0];
    int i = 1;
    while (i < n - 1 && r->cal[i].size < size)
        i++;
    double x0 = r->cal[i - 1].size, x1 = r->cal[i].size;
    double slope = (y[i] - y[i - 1]) / (x1 - x0);
    return y[i - 1] + slope * ((double)size - x0);
}
