/* homa-perf: latency statistics (see stats.h). */
#include "stats.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void hist_init(hist *h)
{
    memset(h, 0, sizeof(*h));
    h->min = UINT64_MAX;
}

void hist_free(hist *h)
{
    free(h->buckets);
    hist_init(h);
}

size_t hist_index(uint64_t value)
{
    if (value < HIST_SUB) return (size_t)value;
    unsigned e = 63u - (unsigned)__builtin_clzll(value); /* e >= HIST_SUB_BITS */
    unsigned shift = e - HIST_SUB_BITS;
    size_t sub = (size_t)((value >> shift) & (HIST_SUB - 1));
    return (size_t)(shift + 1) * HIST_SUB + sub;
}

uint64_t hist_bucket_mid(size_t index)
{
    if (index < HIST_SUB) return index;
    unsigned shift = (unsigned)(index / HIST_SUB) - 1;
    uint64_t sub = index % HIST_SUB;
    uint64_t low = (HIST_SUB + sub) << shift;
    return low + ((1ull << shift) >> 1);
}

static int hist_alloc(hist *h)
{
    if (h->buckets) return 0;
    h->buckets = calloc(HIST_BUCKETS, sizeof(uint64_t));
    return h->buckets ? 0 : -1;
}

int hist_record(hist *h, uint64_t value)
{
    if (hist_alloc(h) < 0) return -1;
    h->buckets[hist_index(value)]++;
    h->count++;
    h->sum += (double)value;
    if (value < h->min) h->min = value;
    if (value > h->max) h->max = value;
    return 0;
}

int hist_merge(hist *dst, const hist *src)
{
    if (src->count == 0) return 0;
    if (hist_alloc(dst) < 0) return -1;
    for (size_t i = 0; i < HIST_BUCKETS; i++)
        dst->buckets[i] += src->buckets[i];
    dst->count += src->count;
    dst->sum += src->sum;
    if (src->min < dst->min) dst->min = src->min;
    if (src->max > dst->max) dst->max = src->max;
    return 0;
}

uint64_t hist_quantile(const hist *h, double q)
{
    if (h->count == 0 || !h->buckets) return 0;
    if (q < 0) q = 0;
    if (q > 1) q = 1;
    uint64_t rank = (uint64_t)((double)h->count * q);
    if ((double)rank < (double)h->count * q) rank++;
    if (rank < 1) rank = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            uint64_t v = hist_bucket_mid(i);
            if (v < h->min) v = h->min;
            if (v > h->max) v = h->max;
            return v;
        }
    }
    return h->max;
}

double hist_mean(const hist *h)
{
    return h->count ? h->sum / (double)h->count : 0.0;
}

uint64_t perf_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
