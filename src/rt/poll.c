/* The receive path of the embedded runtime, and who runs it.
 *
 * Latency comes from avoiding thread hand-offs on the fast path:
 *   - a thread blocked in homa_recv() reads the driver sockets itself: it
 *     holds the "poll token", spins for busy_poll_us, then sleeps in epoll
 *     (rt_app_poll, on the one wait loop of wait.h);
 *   - the background thread runs the engine's timers and, when no
 *     application thread has held the poll token for a tick (or when the
 *     application waits on the socket's eventfd instead of in homa_recv),
 *     takes the token so grants and resends keep flowing while the
 *     application computes (rt_bg_main).
 * Only one thread at a time holds the poll token, so driver receive buffers
 * need no locking; other receivers sleep on their own condition variable
 * and are woken when their message is ready or the token is passed to
 * them (embedded.c's recv). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "rt/rt.h"

#define RX_BUDGET 256              /* packets per socket per poll pass (fairness) */
#define RX_BYTES_BUDGET (1u << 20) /* bytes per socket per poll pass */
#define RX_TX_BYTES (128u << 10)   /* bytes read in place before transmitting */
#define MAX_EVENTS 16
#ifndef TIMER_DEFER_TICKS
/* Engine timers wait at most this long for the input to be read; the
 * engine forgives lateness beyond one tick, so a longer wait would stretch
 * every timeout while the input is never quite drained. */
#define TIMER_DEFER_TICKS 1u
#endif
#define IDLE_AFTER_NS 1000000000ull /* background thread stops ticking after 1 s idle */

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void abs_timespec(uint64_t t, struct timespec *ts)
{
    ts->tv_sec = (time_t)(t / 1000000000ull);
    ts->tv_nsec = (long)(t % 1000000000ull);
}

/* Waits on cond until signalled or monotonic time `until` (UINT64_MAX = no
 * limit).  The condition variables use CLOCK_MONOTONIC. */
void rt_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, uint64_t until)
{
    if (until == UINT64_MAX) {
        pthread_cond_wait(c, m);
    } else {
        struct timespec ts;
        abs_timespec(until, &ts);
        pthread_cond_timedwait(c, m, &ts);
    }
}

void rt_cond_init_mono(pthread_cond_t *c)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
}

void rt_wake_poller(homa_runtime *rt)
{
    uint64_t one = 1;
    RT_CTR_ADD(rt, wakeups, 1);
    ssize_t r = write(rt->wake_efd, &one, sizeof(one));
    (void)r;
}

void rt_drain_efd(int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof(v));
    (void)r;
}

/* Wakes a thread sleeping in homa_recv.  Clearing `sleeping` here (not
 * when it wakes) keeps pass_token from picking a thread that is already on
 * its way: that thread might find its message and leave without ever
 * taking the token, stranding the others. */
void rt_wake_waiter(struct waiter *w)
{
    w->sleeping = 0;
    pthread_cond_signal(&w->cond);
}

/* ---------------------------------------------------------- engine hooks */

uint64_t rt_random(void *ctx)
{
    (void)ctx;
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
        v = homa_rt_now() * 0x9E3779B97F4A7C15ull;
    return v;
}

/* The engine has packets to send (called under rt->lock).  Paths that
 * always transmit after an engine call ignore this; the others (release,
 * recv, close) transmit only when it was set. */
void rt_want_tx(void *ctx)
{
    homa_runtime *rt = ctx;
    rt->tx_wanted = 1;
}

/* Called by the engine (so under rt->lock) when a message or a failure is
 * ready on `port`. */
void rt_ready(void *ctx, uint16_t port)
{
    homa_runtime *rt = ctx;
    homa_socket *s = rt->port_map[port];
    if (s == NULL) return;
    s->ready_gen++;
    if (rt->ready_fn != NULL) rt->ready_fn(rt->ready_ctx, port);
    for (struct waiter *w = rt->waiters; w != NULL; w = w->next) {
        if (w->sock != s) continue;
        if (w->sleeping)
            rt_wake_waiter(w);
        else if (rt->poller_w == w && rt->poller_sleeping)
            rt_wake_poller(rt); /* e.g. a timeout found by the bg thread */
    }
    if (s->efd >= 0 && !s->efd_armed) {
        uint64_t one = 1;
        ssize_t r = write(s->efd, &one, sizeof(one));
        (void)r;
        s->efd_armed = 1;
    }
}

/* Direct receive (homa_io_place_fn): the driver, about to read a large DATA
 * datagram, asks where its payload goes.  Called by the token holder while
 * it has dropped the lock for its read. */
uint8_t *rt_place(void *ctx, uint64_t now, const homa_addr *src, const uint8_t *hdr,
                  uint32_t hdr_len, uint32_t pkt_len)
{
    homa_runtime *rt = ctx;
    uint8_t *dst = NULL;
    pthread_mutex_lock(&rt->lock);
    rt_path_prepare_rx(rt, src, hdr, hdr_len, pkt_len, now);
    if (homa_engine_place_begin(rt->eng, now, src, hdr, hdr_len, pkt_len, &dst) != 0) dst = NULL;
    pthread_mutex_unlock(&rt->lock);
    return dst;
}

/* Tells the background thread if the engine now needs it earlier than it
 * planned to wake. */
void rt_check_deadline(homa_runtime *rt)
{
    if (rt->bg_armed != 0 &&
        rt_min_u64(homa_engine_next_deadline(rt->eng), rt_driver_deadline(rt)) < rt->bg_armed) {
        rt->bg_armed = 0;
        pthread_cond_signal(&rt->bg_cond);
    }
}

void rt_notify_state(homa_runtime *rt)
{
    if (rt->state_waiters > 0) pthread_cond_broadcast(&rt->state_cond);
}

/* How long the engine timers, due since `due`, may still wait for the
 * input (0: run them now).  Nobody has read every socket empty since they
 * fell due, so packets may be waiting there (a loaded host: the poller is
 * behind or preempted): up to TIMER_DEFER_TICKS.  Nobody has read any
 * socket since: the host is deaf, and the timers would count our own
 * deafness as the peers' silence.  Seen on loopback at 2 cores overloaded
 * (W1 with 20 % loss): no socket read for 60-230 ms while the background
 * thread ran the timers on time, and the client declared the live server
 * dead.  A timer run that waits is late, and the engine forgives lateness
 * beyond a tick, so the deaf time no longer counts as silence.  (Driven,
 * the one caller thread reads whenever its epoll says so and runs the
 * timers itself: its own stalls make them late.) */
static uint64_t timers_wait(homa_runtime *rt, uint64_t due, uint64_t now)
{
    if (due > now || rt->nsocks == 0) return 0;
    int deaf = !rt->driven && rt->last_read < due;
    if (rt->poller_sleeping) {
        /* A sleeping poller listens (the kernel wakes it), unless input
         * is already waiting: then it was woken and has not run yet
         * (seen with busy polling off on the loaded host). */
        struct epoll_event ev;
        if (epoll_wait(rt->epfd, &ev, 1, 0) <= 0) return 0;
        deaf = 1;
    }
    uint64_t tick = rt->cfg.tick_ns, waited = now - due;
    /* Deaf: up to half a timeout per run (a run that waited forgives all
     * but a tick or two of it); only a bound for safety, a poller reads
     * within a tick or two unless it was preempted. */
    uint64_t max = deaf                   ? (uint64_t)rt->cfg.timeout_ticks / 2 * tick
                   : rt->last_drain < due ? TIMER_DEFER_TICKS * tick
                                          : 0;
    return waited < max ? max - waited : 0;
}

/* When the engine timers are to run next (later than due while they wait
 * for the input: a sleeper must not spin on a deadline already past). */
static uint64_t timer_deadline(homa_runtime *rt)
{
    uint64_t due = homa_engine_next_deadline(rt->eng);
    uint64_t now = homa_rt_now();
    uint64_t wait = timers_wait(rt, due, now);
    return wait ? now + wait : due;
}

/* Runs due engine timers and due fault-injection releases. */
void rt_run_timers(homa_runtime *rt, uint64_t now)
{
    uint64_t due = homa_engine_next_deadline(rt->eng);
    if (timers_wait(rt, due, now)) {
        /* An RPC that looks silent may have its answer among the unread
         * packets: the timers wait for the input (one tick at most).
         * Transmission goes on. */
        rt_tx_run(rt, RT_TX_POLL_BUDGET);
    } else if (due <= now) {
        homa_engine_timer(rt->eng, now);
        rt_tx_run(rt, RT_TX_POLL_BUDGET);
    } else if (rt_driver_deadline(rt) <= now || (rt->tx_more && !rt->tx_busy)) {
        /* due held packets, or what an earlier transmission left */
        rt_tx_run(rt, RT_TX_POLL_BUDGET);
    }
}

/* ------------------------------------------------------------- receive */

/* Refreshes the token holder's list of driver sockets.  Lock held. */
static void poll_snapshot(homa_runtime *rt)
{
    if (rt->poller_gen == rt->socks_gen && rt->poll_list != NULL) return;
    if (rt->nsocks > rt->poll_cap) {
        int cap = rt->nsocks * 2;
        homa_io_sock **l = rt->poll_list == rt->poll_io ? NULL : rt->poll_list;
        l = realloc(l, sizeof(*l) * (size_t)cap);
        if (l == NULL) return; /* keep the old (smaller) list; retry next pass */
        rt->poll_list = l;
        rt->poll_cap = cap;
    } else if (rt->poll_list == NULL) {
        rt->poll_list = rt->poll_io;
        rt->poll_cap = (int)(sizeof(rt->poll_io) / sizeof(rt->poll_io[0]));
    }
    int n = 0;
    for (homa_socket *s = rt->socks; s != NULL && n < rt->poll_cap; s = s->next)
        rt->poll_list[n++] = s->io;
    rt->poll_n = n;
    rt->poller_gen = rt->socks_gen;
    rt_notify_state(rt);
}

/* One pass over every socket: reads what is there without blocking, feeds
 * the engine, transmits what that produced.  Called by the token holder
 * with rt->lock held (dropped around system calls).  Returns the number of
 * packets received. */

int rt_poll_pass(homa_runtime *rt)
{
    poll_snapshot(rt);
    return rt_poll_socks(rt, rt->poll_list, rt->poll_n);
}

/* The same over the sockets of `list` only (driven mode: those that epoll
 * said are readable, the others being empty). */
int rt_poll_socks(homa_runtime *rt, homa_io_sock *const *list, int n_socks)
{
    int total = 0;
    int backlog = 0;
    for (int k = 0; k < n_socks; k++) {
        homa_io_sock *io = list[k];
        int got = 0, batch = 0;
        uint64_t bytes = 0, untx = 0;
        while (got < RX_BUDGET && bytes < RX_BYTES_BUDGET) {
            uint64_t stall = rt->test_read_stall_ns;
            if (stall) rt->test_read_stall_ns = 0;
            pthread_mutex_unlock(&rt->lock);
            if (stall) sleep_ns(stall);
            uint64_t now = homa_rt_now();
            int n = rt->io->recv(io, now, rt->rx, RT_RX_CHUNK);
            pthread_mutex_lock(&rt->lock);
            rt->last_read = now;
            if (n <= 0) break;
            /* New peers' paths first (the lock is dropped to probe them). */
            for (int i = 0; i < n; i++) {
                const homa_io_rx *p = &rt->rx[i];
                if (!p->unreach && !p->placed)
                    rt_path_prepare_rx(rt, &p->src, p->data, p->len, p->len, now);
            }
            int placed = 0;
            /* One batch for what one read brought (or a run of placed
             * packets): the engine decides grants once for all of it. */
            if (!batch) homa_engine_input_begin(rt->eng);
            batch = 1;
            for (int i = 0; i < n; i++) {
                homa_io_rx *p = &rt->rx[i];
                bytes += p->len;
                untx += p->len;
                if (p->unreach) {
                    /* ICMP unreachable: fail the RPCs now, not at the timeout. */
                    if (!rt->no_unreach)
                        homa_engine_peer_unreachable(rt->eng, now, &p->src, p->sport);
                } else if (!p->placed) {
                    homa_engine_input_at(rt->eng, now, p->arrived, &p->src, p->data, p->len);
                } else if (p->len > 0) {
                    homa_engine_place_end(rt->eng, now, p->data, HOMA_IO_PLACED_HDR, p->len);
                    placed = 1;
                } else {
                    homa_engine_place_cancel(rt->eng);
                }
            }
            got += n;
            /* A placed packet comes alone and more usually follow: read
             * on, and send what they produced (grants, merged per RPC) once
             * RX_TX_BYTES have come in or the socket is empty. */
            if (placed && n == 1 && untx < RX_TX_BYTES) continue;
            homa_engine_input_end(rt->eng, homa_rt_now());
            batch = 0;
            rt_tx_run(rt, RT_TX_POLL_BUDGET);
            untx = 0;
            if (n < RT_RX_CHUNK && !placed) break;
        }
        if (batch) {
            homa_engine_input_end(rt->eng, homa_rt_now());
            batch = 0;
        }
        if (untx > 0) rt_tx_run(rt, RT_TX_POLL_BUDGET);
        if (got >= RX_BUDGET || bytes >= RX_BYTES_BUDGET) backlog = 1;
        total += got;
    }
    if (!backlog) rt->last_drain = homa_rt_now();
    /* Packets left by a transmission that reached its budget count as
     * work: the caller must not go to sleep on them. */
    if (rt->tx_more && !rt->tx_busy) {
        rt_tx_run(rt, RT_TX_POLL_BUDGET);
        if (rt->tx_more) total++;
    }
    if (total > 0) rt_check_deadline(rt);
    return total;
}

/* Sleeps in epoll until a socket is readable, the wake eventfd fires, or
 * monotonic time `until`.  Lock held on entry and exit. */
static void poll_sleep(homa_runtime *rt, uint64_t until)
{
    uint64_t now = homa_rt_now();
    if (until <= now) return;
    rt->poller_sleeping = 1;
    rt_notify_state(rt);
    pthread_mutex_unlock(&rt->lock);
    struct epoll_event ev[MAX_EVENTS];
    RT_CTR_ADD(rt, poll_syscalls, 1);
    int r;
    if (until == UINT64_MAX) {
        r = epoll_wait(rt->epfd, ev, MAX_EVENTS, -1);
    } else {
        uint64_t d = until - now;
        struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
        r = epoll_pwait2(rt->epfd, ev, MAX_EVENTS, &ts, NULL);
        if (r < 0 && errno == ENOSYS)
            r = epoll_wait(rt->epfd, ev, MAX_EVENTS, (int)((d + 999999) / 1000000));
    }
    for (int i = 0; i < r; i++)
        if (ev[i].data.ptr == NULL) rt_drain_efd(rt->wake_efd);
    pthread_mutex_lock(&rt->lock);
    rt->poller_sleeping = 0;
}

/* If the token is free and threads wait for it, wakes one of them (unless
 * one is already awake and about to take it).  Lock held. */
void rt_offer_token(homa_runtime *rt)
{
    if (rt->poller != POLLER_NONE || rt->token_waiters == 0) return;
    int sleeping = 0;
    for (struct waiter *w = rt->waiters; w != NULL; w = w->next)
        sleeping += w->sleeping;
    if (sleeping < rt->token_waiters) return; /* someone already woken will look at the token */
    for (struct waiter *w = rt->waiters; w != NULL; w = w->next) {
        if (w->sleeping) {
            rt_wake_waiter(w);
            return;
        }
    }
}

/* Hands the poll token to a thread waiting for it, if any.  Lock held. */
void rt_pass_token(homa_runtime *rt)
{
    rt->poller = POLLER_NONE;
    rt->poller_w = NULL;
    rt_notify_state(rt);
    rt_offer_token(rt);
}

/* ---------------------------------------------- the token holder's waits */

/* An application thread holding the token inside homa_recv: it polls
 * until a message may be ready for its socket, the deadline passes, or the
 * socket closes. */
struct app_wait {
    homa_runtime *rt;
    homa_socket *s;
    uint64_t gen0;
};

static int app_wait_poll(void *ctx)
{
    return rt_poll_pass(((struct app_wait *)ctx)->rt);
}

static void app_wait_after(void *ctx, uint64_t now)
{
    rt_run_timers(((struct app_wait *)ctx)->rt, now);
}

static bool app_wait_done(void *ctx)
{
    struct app_wait *a = ctx;
    return a->s->ready_gen != a->gen0 || a->s->closing || a->rt->stop;
}

static void app_wait_preempted(void *ctx)
{
    RT_CTR_ADD(((struct app_wait *)ctx)->rt, spin_preempted, 1);
}

/* Engine timers are the background thread's job; the token holder only
 * wakes for its own deadline and for packets held by fault injection. */
static void app_wait_sleep(void *ctx, uint64_t until)
{
    homa_runtime *rt = ((struct app_wait *)ctx)->rt;
    poll_sleep(rt, rt_min_u64(until, rt_driver_deadline(rt)));
}

static const struct homa_wait_ops app_wait_ops = {
    .poll = app_wait_poll,
    .after = app_wait_after,
    .done = app_wait_done,
    .preempted = app_wait_preempted,
    .sleep = app_wait_sleep,
};

void rt_app_poll(homa_runtime *rt, struct waiter *w, uint64_t deadline)
{
    struct app_wait a = {.rt = rt, .s = w->sock, .gen0 = w->sock->ready_gen};
    /* Not spinning, and no transmission left over: a read now would find
     * nothing (the answer to what we just sent takes a while), so sleep
     * first and save a system call. */
    struct homa_wait wt = {.ops = &app_wait_ops,
                           .ctx = &a,
                           .spin = &rt->spin,
                           .flags = HOMA_WAIT_EXTEND | HOMA_WAIT_RESPIN |
                                    (rt->tx_more ? 0 : HOMA_WAIT_SLEEP_FIRST)};
    homa_wait_run(&wt, deadline);
}

/* ---------------------------------------------------- background thread */

/* The background thread holding the token: polls and runs the timers
 * until it must hand the token over (a thread waits for it, or the
 * application polled recently) or the runtime stops. */
struct bg_wait {
    homa_runtime *rt;
    int timers_ran; /* since the last poll */
};

static int bg_wait_poll(void *ctx)
{
    struct bg_wait *b = ctx;
    b->timers_ran = 0;
    return rt_poll_pass(b->rt);
}

static void bg_wait_after(void *ctx, uint64_t now)
{
    struct bg_wait *b = ctx;
    rt_run_timers(b->rt, now);
    b->timers_ran = 1;
}

static bool bg_wait_done(void *ctx)
{
    struct bg_wait *b = ctx;
    homa_runtime *rt = b->rt;
    if (rt->stop || rt->token_waiters > 0) return true;
    /* an application thread polled recently: let it */
    return b->timers_ran && rt->nexported == 0 && rt->last_app_poll + rt->grace_ns > homa_rt_now();
}

static void bg_wait_sleep(void *ctx, uint64_t until)
{
    struct bg_wait *b = ctx;
    (void)until;
    b->timers_ran = 0;
    poll_sleep(b->rt, rt_min_u64(timer_deadline(b->rt), rt_driver_deadline(b->rt)));
}

static const struct homa_wait_ops bg_wait_ops = {
    .poll = bg_wait_poll,
    .after = bg_wait_after,
    .done = bg_wait_done,
    .sleep = bg_wait_sleep,
};

static void bg_poll(homa_runtime *rt)
{
    struct bg_wait b = {.rt = rt};
    struct homa_wait wt = {.ops = &bg_wait_ops, .ctx = &b, .flags = HOMA_WAIT_EXTEND};
    homa_wait_run(&wt, UINT64_MAX);
}

void *rt_bg_main(void *arg)
{
    homa_runtime *rt = arg;
    /* Timer and pacer deadlines are microseconds apart: don't let the
     * kernel's default 50 us timer slack blur them. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    pthread_mutex_lock(&rt->lock);
    while (!rt->stop) {
        uint64_t now = homa_rt_now();
        rt_run_timers(rt, now);
        if (rt->tx_more && !rt->tx_busy && rt->poller == POLLER_NONE) {
            /* an application thread left packets to us (tx_handoff) */
            rt_tx_run(rt, RT_TX_POLL_BUDGET);
            continue;
        }
        rt_offer_token(rt); /* safety net: never leave waiters without a poller */
        int app_recent = rt->last_app_poll + rt->grace_ns > now;
        if (rt->poller == POLLER_NONE && rt->nsocks > 0 && rt->token_waiters == 0 &&
            (rt->nexported > 0 || !app_recent)) {
            rt->poller = POLLER_BG;
            bg_poll(rt);
            rt_pass_token(rt);
            continue;
        }
        uint64_t wake = rt_min_u64(timer_deadline(rt), rt_driver_deadline(rt));
        /* While the application is active, look every tick whether it has
         * stopped polling; after a second of idleness sleep until the
         * engine needs us (homa_recv's exit signals us then). */
        if (rt->nsocks > 0 && (rt->poller == POLLER_APP || now - rt->last_app_poll < IDLE_AFTER_NS))
            wake = rt_min_u64(wake,
                              (rt->poller == POLLER_NONE ? rt->last_app_poll : now) + rt->grace_ns);
        rt->bg_armed = wake == 0 ? 1 : wake;
        rt_cond_wait_until(&rt->bg_cond, &rt->lock, wake);
        rt->bg_armed = 0;
    }
    pthread_mutex_unlock(&rt->lock);
    return NULL;
}
