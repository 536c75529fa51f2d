/* homa-perf: workload generation (message sizes, Poisson arrivals, size
 * buckets) and the best-case RTT curve used for slowdown. */
#ifndef HOMA_PERF_WLGEN_H
#define HOMA_PERF_WLGEN_H

#include <stdint.h>

#include <homa/workload.h>

#include "perf.h"

/* splitmix64 generator: deterministic per (seed, thread). */
typedef struct perf_rng {
    uint64_t state;
} perf_rng;

void rng_seed(perf_rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(perf_rng *r);
/* Uniform in [0, 1). */
double rng_uniform(perf_rng *r);
/* Exponentially distributed with the given mean. */
double rng_exp(perf_rng *r, double mean);

typedef struct wlgen {
    homa_workload *w;
    uint32_t max_size; /* effective clamp (never 0) */
    double mean;       /* mean length after clamping */
} wlgen;

/* Loads workload `name` (w1..w5, a file stem or a path) with lengths clamped
 * to max_size.  Returns 0 or -1 with err set. */
int wlgen_open(wlgen *g, const char *name, const char *data_dir, uint32_t max_size, char *err,
               size_t errlen);
void wlgen_close(wlgen *g);
uint32_t wlgen_sample(const wlgen *g, perf_rng *r);

/* Fills r->buckets with the workload's size deciles: bucket k holds lengths
 * in (q((k-1)/10), q(k/10)] where q is the quantile function; deciles that
 * coincide (many messages of one length) are merged, so there may be fewer
 * than 10 buckets. */
void wlgen_make_buckets(const wlgen *g, perf_result *r);
/* Index of the bucket holding `size` (buckets as made above). */
int perf_bucket_of(const perf_result *r, uint32_t size);

/* Sizes to calibrate: the smallest length, every bucket's upper bound and a
 * geometric grid (x4) in between, sorted, at most PERF_MAX_CAL.  Stores them
 * in r->cal[].size and sets r->ncal. */
void wlgen_cal_sizes(const wlgen *g, perf_result *r);

/* Best-case RTT in ns for a message of `size` bytes: piecewise-linear
 * interpolation of the calibrated minimum RTTs (made non-decreasing in size
 * by taking, for each point, the minimum over it and all larger sizes);
 * linear extrapolation past the last point, flat below the first. */
double perf_best_ns(const perf_result *r, uint32_t size);

#endif
