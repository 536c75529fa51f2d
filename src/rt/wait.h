/* The runtime's one wait loop: how a thread that waits for something
 * (a message, a command's completion, room in a ring) spends its time.  It
 * polls the backend's input without blocking; while the adaptive spin
 * budget (spin.h) lasts it polls again, and after that, or once the host
 * looks oversubscribed (a poll that came back late: we were preempted),
 * it sleeps in the kernel until input or a deadline.  Both backends wait
 * this way: the embedded runtime's application thread holding the poll
 * token and its background thread (poll.c), and the homad client's
 * threads (homad_client.c).  What differs is only what a poll reads, what
 * the thread waits for, how it sleeps, and the flags below. */
#ifndef HOMA_RT_WAIT_H
#define HOMA_RT_WAIT_H

#include <stdbool.h>
#include <stdint.h>

#include "rt/spin.h"

struct homa_wait_ops {
    /* One pass over the input without blocking (the caller's lock held);
     * returns how much it found. */
    int (*poll)(void *ctx);
    /* Optional: work after each pass (the embedded runtime's timers). */
    void (*after)(void *ctx, uint64_t now);
    /* What the thread waits for has happened, or it must stop waiting
     * (socket closing, runtime stopping): the wait returns 0. */
    bool (*done)(void *ctx);
    /* Optional: why the wait must fail (e.g. homad is gone); 0 = none. */
    int (*error)(void *ctx);
    /* Optional: between two polls while spinning (e.g. yield the CPU). */
    void (*spin)(void *ctx, uint64_t now);
    /* Optional: a spin was cut short because the thread was preempted. */
    void (*preempted)(void *ctx);
    /* Blocks until input may have come, something woke the thread, or
     * monotonic time `until` (UINT64_MAX: no limit); drops the caller's
     * lock inside. */
    void (*sleep)(void *ctx, uint64_t until);
};

/* Flags of homa_wait_run. */
enum {
    /* Without a spin budget, sleep before the first poll: a read right
     * after a send finds nothing, and epoll (level-triggered) returns at
     * once if input is already there. */
    HOMA_WAIT_SLEEP_FIRST = 1,
    /* A poll that found something restarts the spin budget. */
    HOMA_WAIT_EXTEND = 2,
    /* After a sleep, spin again (with a fresh budget) before the next
     * sleep; without it a wait spins only before its first sleep. */
    HOMA_WAIT_RESPIN = 4,
};

struct homa_wait {
    const struct homa_wait_ops *ops;
    void *ctx;
    struct homa_spin *spin; /* the budget, learned across waits; NULL: never spin */
    unsigned flags;
};

/* Waits until ops->done(ctx) (returns 0), ops->error(ctx) (returns it), or
 * monotonic time `deadline` (HOMA_ERR_AGAIN; UINT64_MAX: none).  The
 * caller holds its lock; ops run with it held. */
int homa_wait_run(const struct homa_wait *w, uint64_t deadline);

/* The monotonic clock in nanoseconds. */
uint64_t homa_rt_now(void);

#endif
