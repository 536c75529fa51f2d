/* The adaptive busy-poll budget of a waiting thread, shared by the
 * embedded runtime (runtime.c) and homad's client library
 * (daemon_client.c).  Spinning only pays when the answer comes while we
 * spin; when the thread we wait for needs the CPU we are spinning on (more
 * runnable threads than cores) it only delays the answer by the whole
 * budget.  So every spin that ends in a sleep halves the budget, every
 * spin that sees the answer restores it, a spin that finds itself
 * preempted (one iteration took HOMA_SPIN_PREEMPTED_NS) zeroes it, and at
 * zero one wait in 64 probes with the full budget to notice that cores
 * became free.  (A quick wake-up after sleeping is no evidence: with a
 * starved peer the answer comes quickly precisely because we stopped
 * spinning.)  Not thread-safe: the owner's lock protects it. */
#ifndef HOMA_RT_SPIN_H
#define HOMA_RT_SPIN_H

#include <stdint.h>

#define HOMA_SPIN_PREEMPTED_NS 200000ull /* a spin iteration this long was preempted */

struct homa_spin {
    uint64_t full; /* the configured budget (busy_poll) */
    uint64_t ns;   /* the current one, <= full */
    unsigned probe;
};

static inline void homa_spin_init(struct homa_spin *s, uint64_t full_ns)
{
    s->full = full_ns;
    s->ns = full_ns;
    s->probe = 0;
}

/* The budget for the next wait. */
static inline uint64_t homa_spin_budget(struct homa_spin *s)
{
    if (s->ns == 0 && s->full > 0 && (++s->probe & 63) == 0) return s->full;
    return s->ns;
}

/* A spin ended: success = the answer came while spinning. */
static inline void homa_spin_result(struct homa_spin *s, int success)
{
    if (success)
        s->ns = s->full;
    else
        s->ns = s->ns >= 2000 ? s->ns / 2 : 0;
}

static inline void homa_spin_preempted(struct homa_spin *s)
{
    s->ns = 0;
}

#endif
