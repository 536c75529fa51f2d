/* The adaptive busy-poll budget of a waiting thread, shared by the
 * embedded runtime (poll.c) and homad's client library
 * (homad_client.c).  Spinning only pays when the answer comes while we
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

/* Whether a spinning thread may sched_yield() between its looks instead
 * of pausing.  Yielding hands the core to the thread we wait for when the
 * CPUs are oversubscribed by cooperating spinners (an application, its
 * peer and homad on two cores: a 100 B round trip through homad went
 * from 35-44 us to 6-7 us), but under EEVDF every yield pushes the
 * yielder's deadline back by its time quantum, so beside a CPU-bound neighbour the
 * yielder is starved (322 us against 51).  The two cases tell themselves
 * apart by how long a yield takes: on the quiet machine 99.8 % of 16,406
 * yields returned within 32 us, beside two CPU-bound loops 42-78 % took
 * 32 us to 8 ms (docs/homad.md, Wakeups).  So a yield of HOMA_YIELD_HOG_NS, or HOMA_YIELD_MAX_LONG
 * yields of HOMA_YIELD_LONG_NS within HOMA_YIELD_WINDOW yields, turn yielding off for a hold-off
 * that doubles while the neighbour stays (up to HOMA_YIELD_OFF_MAX_NS) and returns to its minimum
 * after a calm window. Not thread-safe: the owner's lock protects it. */
#define HOMA_YIELD_LONG_NS 50000ull
#define HOMA_YIELD_HOG_NS 1000000ull
#define HOMA_YIELD_MAX_LONG 4u
#define HOMA_YIELD_WINDOW 64u
#define HOMA_YIELD_OFF_MIN_NS 50000000ull
#define HOMA_YIELD_OFF_MAX_NS 1600000000ull

struct homa_yield {
    uint64_t off_until; /* no yielding before this time */
    uint64_t off_ns;    /* the next hold-off */
    unsigned n, nlong;  /* yields and long yields in this window */
};

static inline void homa_yield_init(struct homa_yield *y)
{
    y->off_until = 0;
    y->off_ns = HOMA_YIELD_OFF_MIN_NS;
    y->n = y->nlong = 0;
}

static inline int homa_yield_allowed(const struct homa_yield *y, uint64_t now)
{
    return now >= y->off_until;
}

/* A yield that started at now - took_ns returned at now. */
static inline void homa_yield_took(struct homa_yield *y, uint64_t now, uint64_t took_ns)
{
    y->n++;
    if (took_ns >= HOMA_YIELD_LONG_NS) y->nlong++;
    if (took_ns >= HOMA_YIELD_HOG_NS || y->nlong >= HOMA_YIELD_MAX_LONG) {
        y->off_until = now + y->off_ns;
        y->off_ns = y->off_ns * 2 > HOMA_YIELD_OFF_MAX_NS ? HOMA_YIELD_OFF_MAX_NS : y->off_ns * 2;
        y->n = y->nlong = 0;
    } else if (y->n >= HOMA_YIELD_WINDOW) {
        y->off_ns = HOMA_YIELD_OFF_MIN_NS;
        y->n = y->nlong = 0;
    }
}

#endif
