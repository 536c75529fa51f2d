/* Helpers shared by the runtime tests: deterministic payloads that the
 * receiver can verify byte by byte, a clock, and runtime options for fast
 * tests. */
#ifndef HOMA_TESTS_RT_UTIL_H
#define HOMA_TESTS_RT_UTIL_H

#include <stdint.h>
#include <string.h>
#include <time.h>

#include <homa/homa.h>

static inline uint64_t rt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t rt_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Fills buf with a pattern determined by tag; the first 8 bytes (if room)
 * hold the tag itself so a receiver can regenerate the rest. */
static inline void rt_fill(uint8_t *buf, size_t len, uint64_t tag)
{
    size_t i = 0;
    if (len >= 8) {
        memcpy(buf, &tag, 8);
        i = 8;
    }
    uint64_t x = rt_mix(tag);
    for (; i < len; i++) {
        if ((i & 7) == 0) x = rt_mix(x + i);
        buf[i] = (uint8_t)(x >> ((i & 7) * 8));
    }
}

/* 1 if buf holds rt_fill(len, tag) (tag read from the buffer if len >= 8). */
static inline int rt_check(const uint8_t *buf, size_t len, uint64_t *tag_out)
{
    uint64_t tag = 0;
    if (len >= 8)
        memcpy(&tag, buf, 8);
    else if (tag_out != NULL)
        tag = *tag_out;
    size_t i = len >= 8 ? 8 : 0;
    uint64_t x = rt_mix(tag);
    for (; i < len; i++) {
        if ((i & 7) == 0) x = rt_mix(x + i);
        if (buf[i] != (uint8_t)(x >> ((i & 7) * 8))) return 0;
    }
    if (tag_out != NULL) *tag_out = tag;
    return 1;
}

/* How much slower than a plain build the tests run: timer-driven tests
 * stretch the protocol's clock by this factor under a sanitizer. */
#if defined(__SANITIZE_THREAD__)
#define SANITIZER_SLOWDOWN 10
#elif defined(__SANITIZE_ADDRESS__)
#define SANITIZER_SLOWDOWN 3
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SANITIZER_SLOWDOWN 10
#elif __has_feature(address_sanitizer)
#define SANITIZER_SLOWDOWN 3
#endif
#endif
#ifndef SANITIZER_SLOWDOWN
#define SANITIZER_SLOWDOWN 1
#endif

/* Options for tests: environment ignored unless asked; the protocol clock
 * stretched under sanitizers; and a 1 s silence limit instead of 100 ms,
 * because on a CI host where several test processes share two cores a
 * thread can wait tens of milliseconds to be scheduled, and a live peer
 * must not be declared dead (test_rt_kill checks timeouts with its own). */
static inline void rt_test_options(homa_runtime_options *o, int use_env)
{
    homa_runtime_options_default(o);
    if (!use_env) o->flags |= HOMA_RT_IGNORE_ENV;
    o->config.tick_ns = 1000000ull * SANITIZER_SLOWDOWN;
    o->config.timeout_ticks = 1000;
}

/* An echo server thread (pthread_create(..., rt_echo_main, &echo)):
 * answers every request on `s` with its own payload until `stop` is set
 * (with __ATOMIC_RELEASE) or the socket shuts down, looking at `stop`
 * every poll_ns.  Stop it before closing the socket. */
struct rt_echo {
    homa_socket *s;
    int64_t poll_ns;
    int stop;
};

static inline void *rt_echo_main(void *arg)
{
    struct rt_echo *e = (struct rt_echo *)arg;
    while (!__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) {
        homa_msg m;
        int rc = homa_recv(e->s, HOMA_RECV_REQUEST, 0, e->poll_ns, &m);
        if (rc == HOMA_ERR_SHUTDOWN) break;
        if (rc != 0) continue;
        homa_reply_msg(e->s, &m, m.data, m.length);
        homa_release(e->s, &m);
    }
    return NULL;
}

#endif
