/* The runtime's one wait loop (wait.h). */
#include "rt/wait.h"

#include <time.h>

#include <homa/errors.h>

uint64_t homa_rt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int homa_wait_run(const struct homa_wait *w, uint64_t deadline)
{
    const struct homa_wait_ops *ops = w->ops;
    /* The budget is read when the wait starts if it decides whether to
     * sleep first, else at the first pass that finds nothing (a wait that
     * ends at its first look neither spun nor learned anything). */
    uint64_t budget = 0, spin_end = 0, prev = 0;
    int budget_read = 0;
    /* The spin budget learns from the first spin of a wait only: after a
     * sleep the answer came from the sleep, not the spin. */
    int slept = 0;
    int skip_poll = 0;
    if (w->flags & HOMA_WAIT_SLEEP_FIRST) {
        budget = w->spin ? homa_spin_budget(w->spin) : 0;
        spin_end = homa_rt_now() + budget;
        budget_read = 1;
        skip_poll = budget == 0;
    }
    for (;;) {
        int n = 0;
        if (!skip_poll) {
            n = ops->poll(w->ctx);
            if (ops->done(w->ctx)) break;
        }
        int err = ops->error ? ops->error(w->ctx) : 0;
        if (err != 0) return err;
        uint64_t now = homa_rt_now();
        if (ops->after) {
            ops->after(w->ctx, now);
            if (ops->done(w->ctx)) break;
        }
        if (now >= deadline) return HOMA_ERR_AGAIN;
        if (!budget_read) {
            budget = w->spin ? homa_spin_budget(w->spin) : 0;
            spin_end = now + budget;
            budget_read = 1;
        }
        if (n > 0 && (w->flags & HOMA_WAIT_EXTEND)) {
            if (!slept && budget > 0) homa_spin_result(w->spin, 1);
            spin_end = now + budget;
            prev = now;
            continue;
        }
        /* No sched_yield() by default while spinning: under the EEVDF
         * scheduler a yield pushes the spinner's deadline far back (the
         * homad client opts in through ops->spin, gated by spin.h's
         * homa_yield).  But an empty pass takes a few microseconds: a much
         * longer gap since the last one means we were preempted, i.e. the
         * CPUs are oversubscribed and our spinning delays the peer we are
         * waiting for: stop at once. */
        if (now < spin_end && !skip_poll) {
            if (prev == 0 || now - prev < HOMA_SPIN_PREEMPTED_NS) {
                prev = now;
                if (ops->spin) ops->spin(w->ctx, now);
                continue;
            }
            homa_spin_preempted(w->spin);
            if (ops->preempted) ops->preempted(w->ctx);
            slept = 1;
        }
        if (budget > 0 && !slept) homa_spin_result(w->spin, 0);
        slept = 1;
        skip_poll = 0;
        ops->sleep(w->ctx, deadline);
        if (ops->done(w->ctx)) return 0;
        if (w->flags & HOMA_WAIT_RESPIN) {
            budget = w->spin ? homa_spin_budget(w->spin) : 0;
            spin_end = homa_rt_now() + budget;
        } else {
            spin_end = 0;
        }
        prev = 0;
    }
    if (!slept && budget > 0) homa_spin_result(w->spin, 1);
    return 0;
}
