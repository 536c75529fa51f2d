/* Receiver-computed unscheduled priority cutoffs.
 *
 * The receiver decides every priority.  With adaptive cutoffs on, it keeps
 * a histogram of the lengths of the messages it receives (recent ones count
 * more: the histogram is halved at every update) and periodically splits
 * the priority levels the way the Homa paper does:
 *   - levels are divided between unscheduled and scheduled traffic in
 *     proportion to the bytes of each kind (at least one of each when both
 *     exist);
 *   - the unscheduled levels share the unscheduled bytes evenly, shortest
 *     messages on the highest level.
 * A change bumps the cutoff version; senders still using an older version
 * are sent the new cutoffs with their next DATA packet (input.c). */
#include <string.h>

#include "internal.h"

/* Bucket b covers lengths in (bound(b-1), bound(b)]: 8 buckets per power of
 * two, so a cutoff is within 12.5 % of the exact quantile. */
static uint32_t bucket_of(uint32_t len)
{
    if (len <= 8) return len;
    int lg = 31 - __builtin_clz(len - 1); /* len-1 in [2^lg, 2^(lg+1)) */
    uint32_t sub = ((len - 1) >> (lg - 3)) & 7;
    uint32_t b = 9 + (uint32_t)(lg - 3) * 8 + sub;
    return b < HOMA_CUTOFF_BUCKETS ? b : HOMA_CUTOFF_BUCKETS - 1;
}

static uint32_t bucket_bound(uint32_t b)
{
    if (b <= 8) return b;
    uint32_t lg = (b - 9) / 8 + 3, sub = (b - 9) % 8;
    uint64_t v = ((uint64_t)(8 + sub + 1) << (lg - 3));
    return v > 0x7fffffff ? 0x7fffffff : (uint32_t)v;
}

void homa_cutoffs_init(struct homa_engine *eng)
{
    memcpy(eng->cutoffs, eng->cfg.unsched_cutoffs, sizeof(eng->cutoffs));
    eng->max_sched_prio = homa_cutoffs_max_sched(eng->cutoffs, eng->cfg.num_priorities);
    eng->cutoff_version = 1;
    eng->hist_msgs = 0;
    memset(eng->hist_count, 0, sizeof(eng->hist_count));
}

uint8_t homa_cutoffs_max_sched(const uint32_t *cutoffs, uint32_t num_priorities)
{
    for (uint32_t i = 1; i < num_priorities; i++)
        if (cutoffs[i] > 0) return (uint8_t)(i - 1);
    return (uint8_t)(num_priorities - 1);
}

/* Recomputes the cutoffs from the histogram; bumps the version on change. */
static void recompute(struct homa_engine *eng)
{
    const uint32_t P = eng->cfg.num_priorities;
    const uint64_t unsched = eng->cfg.unsched_bytes;
    if (P < 2) return;
    double u_bytes = 0, s_bytes = 0;
    for (uint32_t b = 0; b < HOMA_CUTOFF_BUCKETS; b++) {
        double len = bucket_bound(b), n = eng->hist_count[b];
        double u = len < (double)unsched ? len : (double)unsched;
        u_bytes += n * u;
        s_bytes += n * (len - u);
    }
    if (u_bytes <= 0) return;
    uint32_t levels = (uint32_t)(P * u_bytes / (u_bytes + s_bytes) + 0.5);
    if (levels < 1) levels = 1;
    if (s_bytes > 0 && levels > P - 1) levels = P - 1;
    if (levels > P) levels = P;

    uint32_t cut[HOMA_NUM_PRIORITIES] = {0};
    /* Walk lengths upwards; each unscheduled level takes an equal share. */
    double share = u_bytes / levels, acc = 0;
    uint32_t level = P - 1, lowest = P - levels;
    for (uint32_t b = 0; b < HOMA_CUTOFF_BUCKETS && level > lowest; b++) {
        double len = bucket_bound(b), n = eng->hist_count[b];
        acc += n * (len < (double)unsched ? len : (double)unsched);
        if (n > 0 && acc >= share * (double)(P - level)) {
            cut[level] = bucket_bound(b);
            level--;
        }
    }
    /* The lowest unscheduled level (and any level the walk did not reach)
     * takes every longer message; entry 0 is always "everything". */
    for (uint32_t l = level; l >= lowest && l < HOMA_NUM_PRIORITIES; l--) {
        cut[l] = 0x7fffffff;
        if (l == 0) break;
    }
    cut[0] = 0x7fffffff;
    /* Levels must not repeat a cutoff (a level with the same bound as the
     * one above it would never be chosen); keep them strictly increasing
     * downwards. */
    for (uint32_t l = P - 1; l > lowest; l--)
        if (cut[l - 1] <= cut[l]) cut[l - 1] = cut[l] + 1 > 0x7fffffff ? 0x7fffffff : cut[l] + 1;
    if (memcmp(cut, eng->cutoffs, sizeof(cut)) != 0) {
        memcpy(eng->cutoffs, cut, sizeof(cut));
        eng->max_sched_prio = homa_cutoffs_max_sched(cut, P);
        eng->cutoff_version++;
        if (eng->cutoff_version == 0) eng->cutoff_version = 1;
        eng->ctr.cutoff_updates++;
    }
}

void homa_cutoffs_observe(struct homa_engine *eng, uint32_t length)
{
    if (!eng->cfg.adaptive_cutoffs) return;
    eng->hist_count[bucket_of(length)] += 1;
    eng->hist_msgs++;
    /* A first update early so that short runs adapt too, then one every
     * cutoff_update_msgs messages, after which the counts are halved so the
     * cutoffs follow a changing workload. */
    bool early = eng->hist_msgs == 100;
    if (!early && ++eng->since_update < eng->cfg.cutoff_update_msgs) return;
    recompute(eng);
    if (early) return;
    eng->since_update = 0;
    for (uint32_t b = 0; b < HOMA_CUTOFF_BUCKETS; b++)
        eng->hist_count[b] /= 2;
}

void homa_engine_cutoffs(const homa_engine *eng, homa_cutoffs *out)
{
    memset(out, 0, sizeof(*out));
    _Static_assert(sizeof(out->unsched) == sizeof(eng->cutoffs), "eight levels");
    memcpy(out->unsched, eng->cutoffs, sizeof(out->unsched));
    out->version = eng->cutoff_version;
    out->num_priorities = (uint8_t)eng->cfg.num_priorities;
    out->max_sched_prio = eng->max_sched_prio;
}
