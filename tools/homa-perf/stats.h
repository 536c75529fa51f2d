/* homa-perf: latency statistics.
 *
 * A log-linear histogram: values below 128 have their own bucket; above that
 * every power of two is split into 128 equal sub-buckets, so a reported value
 * (the middle of its bucket) is within 0.4 % of the recorded one.  Every
 * sample is counted; min, max and sum are exact.  Histograms of different
 * threads are merged with hist_merge(). */
#ifndef HOMA_PERF_STATS_H
#define HOMA_PERF_STATS_H

#include <stddef.h>
#include <stdint.h>

#define HIST_SUB_BITS 7
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS ((64 - HIST_SUB_BITS + 1) * HIST_SUB)

typedef struct hist {
    uint64_t count;
    uint64_t min;
    uint64_t max;
    double sum;
    uint64_t *buckets; /* HIST_BUCKETS counters, allocated on first record */
} hist;

void hist_init(hist *h);
void hist_free(hist *h);
/* Returns 0, or -1 if the bucket array could not be allocated. */
int hist_record(hist *h, uint64_t value);
int hist_merge(hist *dst, const hist *src);
/* Value at quantile q in [0, 1] (0 if empty): the smallest recorded value v
 * such that at least ceil(q * count) samples are <= v, to within 0.4 %. */
uint64_t hist_quantile(const hist *h, double q);
double hist_mean(const hist *h);

/* Bucket index of a value and the representative value of a bucket
 * (exposed for the unit checks in the smoke test). */
size_t hist_index(uint64_t value);
uint64_t hist_bucket_mid(size_t index);

/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC), used for every
 * measurement of both protocols. */
uint64_t perf_now_ns(void);

#endif
