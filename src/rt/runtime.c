/* The runtime: one protocol engine, its UDP sockets, and the threads that
 * drive them (see docs/api.md for the threading contract).
 *
 * Latency comes from avoiding thread hand-offs on the fast path:
 *   - a thread that sends (homa_send, homa_reply) pulls packets from the
 *     engine and transmits them itself;
 *   - a thread blocked in homa_recv() reads the UDP sockets itself: it holds
 *     the "poll token", spins for busy_poll_us, then sleeps in epoll;
 *   - the background thread runs the engine's timers and, when no
 *     application thread has held the poll token for a tick (or when the
 *     application waits on the socket's eventfd instead of in homa_recv),
 *     takes the token so grants and resends keep flowing while the
 *     application computes.
 * Only one thread at a time holds the poll token, so driver receive buffers
 * need no locking; other receivers sleep on their own condition variable and
 * are woken when their message is ready or the token is passed to them.
 * Only one thread at a time transmits (tx_busy); others that produce packets
 * leave them in the engine, and the transmitting thread pulls until empty. */
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <homa/homa.h>

#include "core/wire.h"
#include "io/io.h"
#include "rt/daemon_client.h"
#include "rt/driven.h"
#include "rt/spin.h"

#define TX_PULL 64 /* packets per homa_engine_pull */
/* Payload bytes one transmission may send before it returns.  A thread
 * inside homa_send/homa_reply (or release, recv) stops after TX_APP_BUDGET
 * and leaves the rest to the poll token holder or the background thread,
 * so sending a huge message does not hold the application for the whole
 * message; a poller transmits TX_POLL_BUDGET per pass so that it keeps
 * reading packets in between. */
#define TX_APP_BUDGET (256u << 10)
#define TX_POLL_BUDGET (1u << 20)
#define RX_CHUNK 64                /* packets per driver recv */
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

enum { POLLER_NONE = 0, POLLER_APP, POLLER_BG };

struct waiter {
    struct waiter *next;
    struct waiter *prev;
    homa_socket *sock;
    pthread_cond_t cond;
    int sleeping; /* waiting on cond */
};

/* An unanswered request: homa_reply(id) needs the client's address because
 * server RPC ids are only unique per client. */
struct pending_req {
    struct pending_req *next;
    uint64_t id;
    homa_addr peer;
    uint16_t peer_port;
};

struct homa_socket {
    homa_runtime *rt;
    struct pending_req **reqs; /* hash by id; under rt->lock */
    size_t reqs_buckets;
    size_t reqs_count;
    homa_io_sock *io;
    homa_endpoint local;
    uint16_t port;
    int closing;
    int users;          /* threads inside homa_recv on this socket */
    uint64_t ready_gen; /* bumped whenever the engine reports a ready message */
    int efd;            /* eventfd for homa_socket_fd(), -1 until asked for */
    int efd_armed;      /* efd currently readable */
    homa_socket *next;
    struct homa_dcsock *dcs; /* daemon mode: the socket's client state */
};

struct homa_runtime {
    pthread_mutex_t lock;
    homa_engine *eng;
    homa_config cfg;
    const homa_io_ops *io;
    int no_unreach; /* HOMA_RT_NO_UNREACH */
    homa_io_opts io_opts;
    homa_faults faults;
    homa_pcap *pcap;
    uint64_t busy_poll_ns;
    struct homa_spin spin; /* adaptive spin budget (rt/spin.h), full = busy_poll_ns */
    uint64_t grace_ns;     /* app idle this long before the bg thread polls */

    homa_socket *socks;
    homa_socket **port_map; /* 65,536 entries */
    int nsocks;
    int nexported; /* sockets whose eventfd was handed out */
    uint64_t sockets_opened;
    uint64_t socks_gen; /* bumped when the socket set changes */
    int epfd;
    int wake_efd; /* wakes whichever thread sleeps in epoll */

    /* Poll token. */
    int poller;              /* POLLER_* */
    struct waiter *poller_w; /* the app waiter holding the token */
    int poller_sleeping;     /* token holder is in epoll_wait */
    uint64_t poller_gen;     /* socks_gen the token holder works with */
    int token_waiters;       /* threads waiting for the token */
    uint64_t last_app_poll;
    struct waiter *waiters;

    /* Transmit. */
    int tx_busy;
    int tx_wanted; /* the engine called want_tx since the last pull */
    int tx_more;   /* a transmission stopped at its budget with packets left */
    /* When a poll pass last left every socket empty. */
    uint64_t last_drain;
    /* When a socket was last read (or found empty by the caller's epoll):
     * what peers sent after it is unseen. */
    uint64_t last_read;
    uint64_t test_read_stall_ns; /* homa_rt_test_stall_read */
    homa_pkt_out tx_pkts[TX_PULL];

    /* Close / destroy wait here for the token holder and transmitter. */
    pthread_cond_t state_cond;
    int state_waiters;

    /* Background thread. */
    pthread_t bg;
    int bg_started;
    pthread_cond_t bg_cond;
    uint64_t bg_armed; /* when bg will next look (0 = awake) */
    int stop;

    /* Token holder's scratch. */
    homa_io_sock *poll_io[64];
    homa_io_sock **poll_list;
    int poll_n;
    int poll_cap;
    homa_io_rx rx[RX_CHUNK];

    homa_driver_counters extra; /* runtime-level, and closed sockets' */

    /* Path payloads per peer (PATH_SETS x PATH_WAYS; see path_prepare);
     * NULL when every peer gets cfg.max_payload. */
    struct path_entry *paths;

    struct homa_dc *dc; /* daemon mode (docs/homad.md): everything goes to homad */

    /* Driven mode (rt/driven.h): no background thread; one caller thread
     * runs the receive path, the timers and the pacer. */
    int driven;
    homa_rt_ready_fn ready_fn;
    void *ready_ctx;
    uint8_t *local_buf; /* a packet to one of our own loopback ports (tx_local) */
    size_t local_cap;
};

#define RT_CTR_ADD(rt, field, n)                                                                   \
    __atomic_fetch_add(&(rt)->extra.field, (uint64_t)(n), __ATOMIC_RELAXED)

static void path_prepare(homa_runtime *rt, const homa_addr *addr, uint64_t now);
static void path_prepare_rx(homa_runtime *rt, const homa_addr *src, const uint8_t *pkt,
                            size_t avail, size_t len, uint64_t now);

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static void abs_timespec(uint64_t t, struct timespec *ts)
{
    ts->tv_sec = (time_t)(t / 1000000000ull);
    ts->tv_nsec = (long)(t % 1000000000ull);
}

/* Waits on cond until signalled or monotonic time `until` (UINT64_MAX = no
 * limit).  The condition variables use CLOCK_MONOTONIC. */
static void cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, uint64_t until)
{
    if (until == UINT64_MAX) {
        pthread_cond_wait(c, m);
    } else {
        struct timespec ts;
        abs_timespec(until, &ts);
        pthread_cond_timedwait(c, m, &ts);
    }
}

static void cond_init_mono(pthread_cond_t *c)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
}

static void wake_poller(homa_runtime *rt)
{
    uint64_t one = 1;
    RT_CTR_ADD(rt, wakeups, 1);
    ssize_t r = write(rt->wake_efd, &one, sizeof(one));
    (void)r;
}

static void drain_efd(int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof(v));
    (void)r;
}

/* Wakes a thread sleeping in homa_recv.  Clearing `sleeping` here (not
 * when it wakes) keeps pass_token from picking a thread that is already on
 * its way: that thread might find its message and leave without ever
 * taking the token, stranding the others. */
static void wake_waiter(struct waiter *w)
{
    w->sleeping = 0;
    pthread_cond_signal(&w->cond);
}

/* --------------------------------------------------------- engine hooks */

static uint64_t rt_random(void *ctx)
{
    (void)ctx;
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) v = now_ns() * 0x9E3779B97F4A7C15ull;
    return v;
}

/* The engine has packets to send (called under rt->lock).  Paths that
 * always transmit after an engine call ignore this; the others (release,
 * recv, close) transmit only when it was set. */
static void rt_want_tx(void *ctx)
{
    homa_runtime *rt = ctx;
    rt->tx_wanted = 1;
}

/* Called by the engine (so under rt->lock) when a message or a failure is
 * ready on `port`. */
static void rt_ready(void *ctx, uint16_t port)
{
    homa_runtime *rt = ctx;
    homa_socket *s = rt->port_map[port];
    if (s == NULL) return;
    s->ready_gen++;
    if (rt->ready_fn != NULL) rt->ready_fn(rt->ready_ctx, port);
    for (struct waiter *w = rt->waiters; w != NULL; w = w->next) {
        if (w->sock != s) continue;
        if (w->sleeping)
            wake_waiter(w);
        else if (rt->poller_w == w && rt->poller_sleeping)
            wake_poller(rt); /* e.g. a timeout found by the bg thread */
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
static uint8_t *rt_place(void *ctx, uint64_t now, const homa_addr *src, const uint8_t *hdr,
                         uint32_t hdr_len, uint32_t pkt_len)
{
    homa_runtime *rt = ctx;
    uint8_t *dst = NULL;
    pthread_mutex_lock(&rt->lock);
    path_prepare_rx(rt, src, hdr, hdr_len, pkt_len, now);
    if (homa_engine_place_begin(rt->eng, now, src, hdr, hdr_len, pkt_len, &dst) != 0) dst = NULL;
    pthread_mutex_unlock(&rt->lock);
    return dst;
}

/* Tells the background thread if the engine now needs it earlier than it
 * planned to wake. */
static uint64_t driver_deadline(homa_runtime *rt);

static void check_deadline(homa_runtime *rt)
{
    if (rt->bg_armed != 0 &&
        min_u64(homa_engine_next_deadline(rt->eng), driver_deadline(rt)) < rt->bg_armed) {
        rt->bg_armed = 0;
        pthread_cond_signal(&rt->bg_cond);
    }
}

static void notify_state(homa_runtime *rt)
{
    if (rt->state_waiters > 0) pthread_cond_broadcast(&rt->state_cond);
}

/* ------------------------------------------------------------- transmit */

static uint64_t driver_deadline(homa_runtime *rt)
{
    uint64_t d = UINT64_MAX;
    if (rt->io_opts.faults == NULL) return d; /* only fault injection holds packets back */
    for (homa_socket *s = rt->socks; s != NULL; s = s->next)
        d = min_u64(d, rt->io->next_deadline(s->io));
    return d;
}

/* Sends packets that fault injection delayed and whose time has come.
 * Called from tx_run (tx_busy set, lock held; dropped around the sends). */
static void tx_flush_held(homa_runtime *rt)
{
    uint64_t now = now_ns();
    homa_io_sock *due[64];
    int n = 0;
    for (homa_socket *s = rt->socks; s != NULL && n < 64; s = s->next)
        if (rt->io->next_deadline(s->io) <= now) due[n++] = s->io;
    if (n == 0) return;
    pthread_mutex_unlock(&rt->lock);
    for (int i = 0; i < n; i++)
        rt->io->flush(due[i], now);
    pthread_mutex_lock(&rt->lock);
}

/* A transmission stopped at its budget with packets left: the poll token
 * holder sends them in its next pass, else the background thread does.
 * Lock held. */
static void tx_handoff(homa_runtime *rt)
{
    RT_CTR_ADD(rt, tx_handoffs, 1);
    if (rt->poller != POLLER_NONE) {
        if (rt->poller_sleeping) wake_poller(rt);
        return;
    }
    rt->bg_armed = 0;
    pthread_cond_signal(&rt->bg_cond);
}

/* ------------------------------------------------------------ loopback */

static int addr_is(const homa_addr *a, const uint8_t *b)
{
    return memcmp(a->bytes, b, 16) == 0;
}

static const uint8_t v6_any[16];
static const uint8_t v4_any[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0};
static const uint8_t v6_lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
static const uint8_t v4_lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};

/* Would the kernel deliver a datagram from socket s to `dst` (127.0.0.1
 * or ::1), and does it see it coming from `dst` (a socket bound to the
 * wildcard, or to dst itself)? */
static int loop_ok(const homa_socket *s, const homa_addr *dst)
{
    const homa_addr *a = &s->local.addr;
    return addr_is(a, v6_any) || addr_is(a, dst->bytes) ||
           (addr_is(a, v4_any) && addr_is(dst, v4_lo));
}

/* Driven mode: a packet from one of our sockets to another over loopback
 * (homad: one local process to another) goes straight back into the
 * engine, as the kernel would have delivered it, without the two system
 * calls and two kernel copies.  Not with fault injection or a capture,
 * which act in the driver.  Lock held. */
static homa_socket *tx_local_dst(homa_runtime *rt, const homa_pkt_out *p)
{
    if (!rt->driven || rt->pcap != NULL || rt->io_opts.faults != NULL || rt->io != &homa_udp_ops)
        return NULL;
    if (!addr_is(&p->dst, v4_lo) && !addr_is(&p->dst, v6_lo)) return NULL;
    homa_socket *from = rt->port_map[p->sport], *to = rt->port_map[p->dport];
    if (from == NULL || to == NULL || !loop_ok(from, &p->dst) || !loop_ok(to, &p->dst)) return NULL;
    return to;
}

/* Hands a pulled packet to the engine as received (before
 * homa_engine_pull_done: its payload is still valid).  A DATA payload is
 * placed straight into its message (one copy) when the engine can.
 * Lock held. */
static void tx_local(homa_runtime *rt, uint64_t now, const homa_pkt_out *p)
{
    size_t len = (size_t)p->hdr_len + p->payload_len;
    homa_addr src = p->dst; /* the kernel's source for 127.0.0.1 / ::1 */
    if (p->payload_len > 0 && p->hdr_len == HOMA_IO_PLACED_HDR) {
        uint8_t *dst = NULL;
        if (homa_engine_place_begin(rt->eng, now, &src, p->hdr, p->hdr_len, len, &dst) == 0) {
            memcpy(dst, p->payload, p->payload_len);
            homa_engine_place_end(rt->eng, now, p->hdr, p->hdr_len, len);
            return;
        }
    }
    if (len > rt->local_cap) {
        uint8_t *b = realloc(rt->local_buf, len);
        if (b == NULL) return; /* lost, as on a full socket: the engine resends */
        rt->local_buf = b;
        rt->local_cap = len;
    }
    memcpy(rt->local_buf, p->hdr, p->hdr_len);
    if (p->payload_len > 0) memcpy(rt->local_buf + p->hdr_len, p->payload, p->payload_len);
    homa_engine_input_at(rt->eng, now, now, &src, rt->local_buf, len);
}

/* Pulls packets from the engine and transmits them until it has nothing
 * more to send now or `budget` bytes went out (then tx_more is set).
 * Called with rt->lock held; drops it around the system calls.  If another
 * thread is already transmitting, it will pull whatever we added, so we
 * return at once. */
static void tx_run(homa_runtime *rt, uint64_t budget)
{
    if (rt->tx_busy) return;
    rt->tx_busy = 1;
    uint64_t sent = 0;
    uint32_t per_pkt = rt->cfg.max_payload ? rt->cfg.max_payload : 1;
    for (;;) {
        if (sent >= budget) {
            rt->tx_more = 1;
            break;
        }
        rt->tx_wanted = 0;
        uint64_t now = now_ns();
        /* Whole packets up to the budget (at least one). */
        uint64_t fit = (budget - sent + per_pkt - 1) / per_pkt;
        int max = fit < TX_PULL ? (int)fit : TX_PULL;
        int n = homa_engine_pull(rt->eng, now, rt->tx_pkts, max);
        if (n <= 0) {
            rt->tx_more = 0;
            break;
        }
        /* Resolve each run of packets to its socket while locked: the
         * socket can't go away until tx_busy is cleared. */
        homa_io_sock *ios[TX_PULL];
        uint8_t local[TX_PULL];
        int nlocal = 0;
        for (int i = 0; i < n; i++) {
            homa_socket *s = rt->port_map[rt->tx_pkts[i].sport];
            ios[i] = s ? s->io : NULL;
            local[i] = ios[i] != NULL && tx_local_dst(rt, &rt->tx_pkts[i]) != NULL;
            if (local[i]) {
                ios[i] = NULL; /* not sent */
                nlocal++;
            }
            sent += rt->tx_pkts[i].payload_len + rt->tx_pkts[i].hdr_len;
        }
        pthread_mutex_unlock(&rt->lock);
        int i = 0;
        while (i < n) {
            int j = i + 1;
            while (j < n && ios[j] == ios[i])
                j++;
            if (ios[i] != NULL) rt->io->send(ios[i], now, &rt->tx_pkts[i], j - i);
            i = j;
        }
        pthread_mutex_lock(&rt->lock);
        for (int k = 0; k < n && nlocal > 0; k++)
            if (local[k]) tx_local(rt, now, &rt->tx_pkts[k]);
        homa_engine_pull_done(rt->eng);
    }
    if (rt->io_opts.faults != NULL) tx_flush_held(rt);
    rt->tx_busy = 0;
    notify_state(rt);
}

/* Transmission by an application call (send, reply, abort, release,
 * recv): bounded, the rest handed off.  Lock held. */
static void tx_app(homa_runtime *rt)
{
    tx_run(rt, TX_APP_BUDGET);
    if (rt->tx_more) tx_handoff(rt);
}

/* Transmits if the engine asked for it.  Lock held. */
static void tx_if_wanted(homa_runtime *rt)
{
    if (rt->tx_wanted) {
        tx_app(rt);
        check_deadline(rt);
    }
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
    uint64_t now = now_ns();
    uint64_t wait = timers_wait(rt, due, now);
    return wait ? now + wait : due;
}

/* Runs due engine timers and due fault-injection releases. */
static void run_timers(homa_runtime *rt, uint64_t now)
{
    uint64_t due = homa_engine_next_deadline(rt->eng);
    if (timers_wait(rt, due, now)) {
        /* An RPC that looks silent may have its answer among the unread
         * packets: the timers wait for the input (one tick at most).
         * Transmission goes on. */
        tx_run(rt, TX_POLL_BUDGET);
    } else if (due <= now) {
        homa_engine_timer(rt->eng, now);
        tx_run(rt, TX_POLL_BUDGET);
    } else if (driver_deadline(rt) <= now || (rt->tx_more && !rt->tx_busy)) {
        /* due held packets, or what an earlier transmission left */
        tx_run(rt, TX_POLL_BUDGET);
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
    notify_state(rt);
}

/* One pass over every socket: reads what is there without blocking, feeds
 * the engine, transmits what that produced.  Called by the token holder
 * with rt->lock held (dropped around system calls).  Returns the number of
 * packets received. */
static int poll_socks(homa_runtime *rt, homa_io_sock *const *list, int n_socks);

static int poll_pass(homa_runtime *rt)
{
    poll_snapshot(rt);
    return poll_socks(rt, rt->poll_list, rt->poll_n);
}

/* The same over the sockets of `list` only (driven mode: those that epoll
 * said are readable, the others being empty). */
static int poll_socks(homa_runtime *rt, homa_io_sock *const *list, int n_socks)
{
    int total = 0;
    int backlog = 0;
    for (int k = 0; k < n_socks; k++) {
        homa_io_sock *io = list[k];
        int got = 0;
        uint64_t bytes = 0, untx = 0;
        while (got < RX_BUDGET && bytes < RX_BYTES_BUDGET) {
            uint64_t stall = rt->test_read_stall_ns;
            if (stall) rt->test_read_stall_ns = 0;
            pthread_mutex_unlock(&rt->lock);
            if (stall) sleep_ns(stall);
            uint64_t now = now_ns();
            int n = rt->io->recv(io, now, rt->rx, RX_CHUNK);
            pthread_mutex_lock(&rt->lock);
            rt->last_read = now;
            if (n <= 0) break;
            /* New peers' paths first (the lock is dropped to probe them). */
            for (int i = 0; i < n; i++) {
                const homa_io_rx *p = &rt->rx[i];
                if (!p->unreach && !p->placed)
                    path_prepare_rx(rt, &p->src, p->data, p->len, p->len, now);
            }
            int placed = 0;
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
            tx_run(rt, TX_POLL_BUDGET);
            untx = 0;
            if (n < RX_CHUNK && !placed) break;
        }
        if (untx > 0) tx_run(rt, TX_POLL_BUDGET);
        if (got >= RX_BUDGET || bytes >= RX_BYTES_BUDGET) backlog = 1;
        total += got;
    }
    if (!backlog) rt->last_drain = now_ns();
    /* Packets left by a transmission that reached its budget count as
     * work: the caller must not go to sleep on them. */
    if (rt->tx_more && !rt->tx_busy) {
        tx_run(rt, TX_POLL_BUDGET);
        if (rt->tx_more) total++;
    }
    if (total > 0) check_deadline(rt);
    return total;
}

/* Sleeps in epoll until a socket is readable, the wake eventfd fires, or
 * monotonic time `until`.  Lock held on entry and exit. */
static void poll_sleep(homa_runtime *rt, uint64_t until)
{
    uint64_t now = now_ns();
    if (until <= now) return;
    rt->poller_sleeping = 1;
    notify_state(rt);
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
        if (ev[i].data.ptr == NULL) drain_efd(rt->wake_efd);
    pthread_mutex_lock(&rt->lock);
    rt->poller_sleeping = 0;
}

/* If the token is free and threads wait for it, wakes one of them (unless
 * one is already awake and about to take it).  Lock held. */
static void offer_token(homa_runtime *rt)
{
    if (rt->poller != POLLER_NONE || rt->token_waiters == 0) return;
    int sleeping = 0;
    for (struct waiter *w = rt->waiters; w != NULL; w = w->next)
        sleeping += w->sleeping;
    if (sleeping < rt->token_waiters) return; /* someone already woken will look at the token */
    for (struct waiter *w = rt->waiters; w != NULL; w = w->next) {
        if (w->sleeping) {
            wake_waiter(w);
            return;
        }
    }
}

/* Hands the poll token to a thread waiting for it, if any.  Lock held. */
static void pass_token(homa_runtime *rt)
{
    rt->poller = POLLER_NONE;
    rt->poller_w = NULL;
    notify_state(rt);
    offer_token(rt);
}

/* The token holder's loop inside homa_recv: polls until a message may be
 * ready for w's socket, the deadline passes, or the socket closes. */
static void app_poll(homa_runtime *rt, struct waiter *w, uint64_t deadline)
{
    homa_socket *s = w->sock;
    uint64_t gen0 = s->ready_gen;
    uint64_t budget = homa_spin_budget(&rt->spin);
    uint64_t spin_end = now_ns() + budget;
    uint64_t prev = 0;
    int slept = 0;
    /* Not spinning: a read now would find nothing (the answer to what we
     * just sent takes a while) and epoll, level-triggered, returns at once
     * if a socket is readable; so sleep first and save a system call. */
    int sleep_first = budget == 0 && !rt->tx_more;
    for (;;) {
        int n = 0;
        if (!sleep_first) {
            n = poll_pass(rt);
            if (s->ready_gen != gen0 || s->closing || rt->stop) break;
        }
        uint64_t now = now_ns();
        run_timers(rt, now);
        if (s->ready_gen != gen0) break;
        if (now >= deadline) return;
        if (n > 0) {
            if (!slept && budget > 0) homa_spin_result(&rt->spin, 1);
            spin_end = now + budget;
            prev = now;
            continue;
        }
        /* No sched_yield() while spinning: under the EEVDF scheduler a
         * yield pushes the spinner's deadline far back, and on a loaded
         * host the token holder then starved the whole runtime for tens of
         * milliseconds (RPC timeouts in the stress test).  But an empty
         * pass takes a few microseconds: a much longer gap since the last
         * one means we were preempted, i.e. the CPUs are oversubscribed and
         * our spinning delays the peer we are waiting for: stop at once. */
        if (now < spin_end && !sleep_first) {
            if (prev == 0 || now - prev < HOMA_SPIN_PREEMPTED_NS) {
                prev = now;
                continue;
            }
            homa_spin_preempted(&rt->spin);
            RT_CTR_ADD(rt, spin_preempted, 1);
            slept = 1;
        }
        if (budget > 0 && !slept) homa_spin_result(&rt->spin, 0);
        slept = 1;
        sleep_first = 0;
        /* Engine timers are the background thread's job; we only wake for
         * our own deadline and for packets held by fault injection. */
        poll_sleep(rt, min_u64(deadline, driver_deadline(rt)));
        if (s->ready_gen != gen0) return;
        budget = homa_spin_budget(&rt->spin);
        spin_end = now_ns() + budget;
        prev = 0;
    }
    if (!slept && budget > 0) homa_spin_result(&rt->spin, 1);
}

/* ---------------------------------------------------- background thread */

static void bg_poll(homa_runtime *rt)
{
    for (;;) {
        int n = poll_pass(rt);
        if (rt->stop || rt->token_waiters > 0) return;
        uint64_t now = now_ns();
        run_timers(rt, now);
        if (rt->nexported == 0 && rt->last_app_poll + rt->grace_ns > now)
            return; /* an application thread polled recently: let it */
        if (n > 0) continue;
        uint64_t until = min_u64(timer_deadline(rt), driver_deadline(rt));
        poll_sleep(rt, until);
        if (rt->stop || rt->token_waiters > 0) return;
    }
}

static void *bg_main(void *arg)
{
    homa_runtime *rt = arg;
    /* Timer and pacer deadlines are microseconds apart: don't let the
     * kernel's default 50 us timer slack blur them. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    pthread_mutex_lock(&rt->lock);
    while (!rt->stop) {
        uint64_t now = now_ns();
        run_timers(rt, now);
        if (rt->tx_more && !rt->tx_busy && rt->poller == POLLER_NONE) {
            /* an application thread left packets to us (tx_handoff) */
            tx_run(rt, TX_POLL_BUDGET);
            continue;
        }
        offer_token(rt); /* safety net: never leave waiters without a poller */
        int app_recent = rt->last_app_poll + rt->grace_ns > now;
        if (rt->poller == POLLER_NONE && rt->nsocks > 0 && rt->token_waiters == 0 &&
            (rt->nexported > 0 || !app_recent)) {
            rt->poller = POLLER_BG;
            bg_poll(rt);
            pass_token(rt);
            continue;
        }
        uint64_t wake = min_u64(timer_deadline(rt), driver_deadline(rt));
        /* While the application is active, look every tick whether it has
         * stopped polling; after a second of idleness sleep until the
         * engine needs us (homa_recv's exit signals us then). */
        if (rt->nsocks > 0 && (rt->poller == POLLER_APP || now - rt->last_app_poll < IDLE_AFTER_NS))
            wake =
                min_u64(wake, (rt->poller == POLLER_NONE ? rt->last_app_poll : now) + rt->grace_ns);
        rt->bg_armed = wake == 0 ? 1 : wake;
        cond_wait_until(&rt->bg_cond, &rt->lock, wake);
        rt->bg_armed = 0;
    }
    pthread_mutex_unlock(&rt->lock);
    return NULL;
}

/* -------------------------------------------------------------- options */

void homa_runtime_options_default(homa_runtime_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    homa_config_default(&opts->config);
    opts->busy_poll_us = 50;
    opts->faults.delay_us = 1000;
}

/* Largest MTU among the interfaces that are up. */
static uint32_t host_mtu(void)
{
    uint32_t best = 0;
    struct if_nameindex *ifs = if_nameindex();
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (ifs != NULL && fd >= 0) {
        for (struct if_nameindex *i = ifs; i->if_index != 0; i++) {
            struct ifreq ifr;
            memset(&ifr, 0, sizeof(ifr));
            snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", i->if_name);
            if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0 || !(ifr.ifr_flags & IFF_UP)) continue;
            if (ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0 && (uint32_t)ifr.ifr_mtu > best)
                best = (uint32_t)ifr.ifr_mtu;
        }
    }
    if (fd >= 0) close(fd);
    if (ifs != NULL) if_freenameindex(ifs);
    return best ? best : 1500;
}

/* Payload per DATA packet for a path MTU: IPv6 (40) + UDP (8) + Homa DATA
 * header (56) per packet, and never more than the largest UDP datagram
 * IPv4 can carry (65,507 bytes). */
static uint32_t payload_for_mtu(uint32_t mtu)
{
    uint32_t p = mtu > 104 + 64 ? mtu - 104 : 64;
    if (p > 65507 - 56) p = 65507 - 56;
    return p;
}

/* The same over raw IP: no UDP header (IPv6's 40 bytes still assumed, so
 * one size fits both families), and at most an IPv4 packet's 65,535 bytes
 * with its 20-byte header.  At MTU 1500 that is 1,404 bytes (the kernel
 * module, which sizes per family, sends 1,424 over IPv4). */
static uint32_t raw_payload_for_mtu(uint32_t mtu)
{
    uint32_t p = mtu > 96 + 64 ? mtu - 96 : 64;
    if (p > 65535 - 20 - 56) p = 65535 - 20 - 56;
    return p;
}

/* The payload for the MTU of the route to addr, as the kernel sees it
 * (connect() on a UDP socket sends nothing); 0 if it cannot be found.  The runtime's
 * max_payload follows the largest MTU of the host (loopback's 65,536), so
 * that loopback peers get 64 KB packets while a peer behind a 1,500-byte
 * link gets packets that fit it instead of IP fragments. */
static uint32_t path_probe(const homa_runtime *rt, const homa_addr *addr)
{
    homa_endpoint ep = {.addr = *addr, .port = 9};
    struct sockaddr_storage ss;
    socklen_t len;
    int v4 = homa_endpoint_is_ipv4(&ep);
    memset(&ss, 0, sizeof(ss));
    if (v4) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(9);
        memcpy(&s4->sin_addr, addr->bytes + 12, 4);
        len = sizeof(*s4);
    } else {
        len = (socklen_t)homa_endpoint_to_sockaddr(&ep, (struct sockaddr *)&ss, sizeof(ss));
    }
    int fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    int mtu = 0;
    socklen_t ml = sizeof(mtu);
    if (connect(fd, (struct sockaddr *)&ss, len) != 0 ||
        getsockopt(fd, v4 ? IPPROTO_IP : IPPROTO_IPV6, v4 ? IP_MTU : IPV6_MTU, &mtu, &ml) != 0)
        mtu = 0;
    close(fd);
    if (mtu <= 0) return 0;
    if (rt->io != &homa_raw_ops) return payload_for_mtu((uint32_t)mtu);
    /* Over raw IP the family is known per peer: an IPv4 peer's packets
     * lose only 20 bytes to IP, as the kernel module's do (1,424 bytes of
     * payload at MTU 1500). */
    return raw_payload_for_mtu((uint32_t)mtu + (v4 ? 20u : 0u));
}

/* The engine asks homa_engine_ops.path_payload when it first meets a peer,
 * with rt->lock held, and finding the path MTU takes system calls, which
 * must not run under the lock.  So the runtime probes a peer's path before
 * each engine call that may meet a new peer (a request's destination, a
 * DATA packet's source), dropping the lock for the probe, and
 * rt_path_payload only reads this cache.  Two threads may probe the same
 * peer at once: the later insert finds the entry and overwrites it.  An
 * entry older than PATH_TTL_NS is still answered but probed again by the
 * next path_prepare (routes change).  A peer that is not cached (evicted
 * between probe and use, only with more than PATH_WAYS new peers per set
 * in that window) gets cfg.max_payload, as when a probe fails. */
#define PATH_SETS 256
#define PATH_WAYS 4
#define PATH_TTL_NS (10ull * 1000000000ull)

struct path_entry {
    homa_addr addr;
    uint32_t payload; /* path_probe's answer (0: unknown) */
    int valid;
    uint64_t probed; /* now_ns() of the probe */
};

/* All of the path_* functions: rt->lock held. */
static struct path_entry *path_set(homa_runtime *rt, const homa_addr *a)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < sizeof(a->bytes); i++)
        h = (h ^ a->bytes[i]) * 16777619u;
    return &rt->paths[(h % PATH_SETS) * PATH_WAYS];
}

static struct path_entry *path_find(homa_runtime *rt, const homa_addr *a)
{
    struct path_entry *set = path_set(rt, a);
    for (int i = 0; i < PATH_WAYS; i++)
        if (set[i].valid && memcmp(&set[i].addr, a, sizeof(*a)) == 0) return &set[i];
    return NULL;
}

static void path_insert(homa_runtime *rt, const homa_addr *a, uint32_t payload, uint64_t now)
{
    struct path_entry *e = path_find(rt, a);
    if (e == NULL) {
        struct path_entry *set = path_set(rt, a);
        e = &set[0];
        for (int i = 0; i < PATH_WAYS && e->valid; i++)
            if (!set[i].valid || set[i].probed < e->probed) e = &set[i];
        e->addr = *a;
        e->valid = 1;
    }
    e->payload = payload;
    e->probed = now;
}

/* Makes sure addr's path is cached (and fresh).  Drops rt->lock around a
 * probe: the caller must not rely on what it read under the lock before. */
static void path_prepare(homa_runtime *rt, const homa_addr *addr, uint64_t now)
{
    if (rt->paths == NULL) return;
    const struct path_entry *e = path_find(rt, addr);
    if (e != NULL && now - e->probed < PATH_TTL_NS) return;
    homa_addr a = *addr;
    pthread_mutex_unlock(&rt->lock);
    uint32_t payload = path_probe(rt, &a);
    pthread_mutex_lock(&rt->lock);
    path_insert(rt, &a, payload, now);
}

/* The same for the source of a received packet (avail of its len bytes at
 * pkt): only a DATA packet can make the engine meet a new peer, and only
 * such a packet from an uncached source is worth a probe. */
static void path_prepare_rx(homa_runtime *rt, const homa_addr *src, const uint8_t *pkt,
                            size_t avail, size_t len, uint64_t now)
{
    if (rt->paths == NULL) return;
    const struct path_entry *e = path_find(rt, src);
    if (e != NULL && now - e->probed < PATH_TTL_NS) return;
    struct homa_wire_pkt w;
    if (homa_wire_decode_hdr(pkt, avail, len, &w) != HOMA_WIRE_OK || w.type != HOMA_PKT_DATA)
        return;
    path_prepare(rt, src, now);
}

/* homa_engine_ops.path_payload: the largest payload for the path to addr
 * (path_prepare probed it); 0, for cfg.max_payload, if it is not cached. */
static uint32_t rt_path_payload(void *ctx, const homa_addr *addr)
{
    homa_runtime *rt = ctx;
    const struct path_entry *e = path_find(rt, addr);
    return e != NULL ? e->payload : 0;
}

static int env_options(homa_runtime_options *o)
{
    const char *v = getenv("HOMA_FAULTS");
    if (v != NULL && v[0] != '\0') {
        char err[160];
        if (homa_faults_parse(v, &o->faults, err, sizeof(err)) != 0) {
            fprintf(stderr, "libhoma: HOMA_FAULTS=\"%s\": %s\n", v, err);
            return HOMA_ERR_INVAL;
        }
    }
    v = getenv("HOMA_PCAP");
    if (v != NULL && v[0] != '\0') o->pcap_path = v;
    v = getenv("HOMA_BUSY_POLL_US");
    if (v != NULL && v[0] != '\0') {
        char *end;
        unsigned long us = strtoul(v, &end, 10);
        if (*end != '\0' || us > 1000000) {
            fprintf(stderr, "libhoma: HOMA_BUSY_POLL_US=\"%s\": expected 0..1000000\n", v);
            return HOMA_ERR_INVAL;
        }
        o->busy_poll_us = (uint32_t)us;
    }
    v = getenv("HOMA_DRIVER");
    if (v != NULL && v[0] != '\0') {
        if (strcmp(v, "raw") == 0) {
            o->flags |= HOMA_RT_RAW;
        } else if (strcmp(v, "udp") == 0) {
            o->flags &= ~HOMA_RT_RAW;
        } else {
            fprintf(stderr, "libhoma: HOMA_DRIVER=\"%s\": expected udp or raw\n", v);
            return HOMA_ERR_INVAL;
        }
    }
    v = getenv("HOMA_MTU");
    if (v != NULL && v[0] != '\0' && o->mtu == 0) {
        char *end;
        unsigned long m = strtoul(v, &end, 10);
        if (*end != '\0' || m < 576 || m > 65536) {
            fprintf(stderr, "libhoma: HOMA_MTU=\"%s\": expected a number in 576..65536\n", v);
            return HOMA_ERR_INVAL;
        }
        o->mtu = (uint32_t)m;
    }
    return 0;
}

/* -------------------------------------------------------------- runtime */

/* A daemon-mode runtime: no engine, no thread; the sockets live in homad. */
static int rt_connect(const char *path, uint32_t busy_poll_us, homa_runtime **out)
{
    if (path == NULL || out == NULL) return HOMA_ERR_INVAL;
    homa_runtime *rt = calloc(1, sizeof(*rt));
    if (rt == NULL) return HOMA_ERR_NOMEM;
    int rc = homa_dc_connect(path, (uint64_t)busy_poll_us * 1000u, &rt->dc, &rt->cfg);
    if (rc != 0) {
        free(rt);
        return rc;
    }
    pthread_mutex_init(&rt->lock, NULL);
    *out = rt;
    return 0;
}

int homa_runtime_connect(const char *socket_path, homa_runtime **out)
{
    return rt_connect(socket_path, 50, out);
}

static int rt_create(const homa_runtime_options *opts_in, int driven, homa_runtime **out);

int homa_runtime_create(const homa_runtime_options *opts_in, homa_runtime **out)
{
    return rt_create(opts_in, 0, out);
}

int homa_rt_create_driven(const homa_runtime_options *opts, homa_rt_ready_fn ready, void *ctx,
                          homa_runtime **out)
{
    homa_runtime_options o;
    if (opts != NULL)
        o = *opts;
    else
        homa_runtime_options_default(&o);
    o.flags |= HOMA_RT_EMBEDDED;
    int rc = rt_create(&o, 1, out);
    if (rc == 0) {
        (*out)->ready_fn = ready;
        (*out)->ready_ctx = ctx;
    }
    return rc;
}

static int rt_create(const homa_runtime_options *opts_in, int driven, homa_runtime **out)
{
    homa_runtime_options o;
    if (opts_in != NULL)
        o = *opts_in;
    else
        homa_runtime_options_default(&o);
    if (!(o.flags & HOMA_RT_IGNORE_ENV)) {
        int rc = env_options(&o);
        if (rc != 0) return rc;
        const char *daemon = getenv("HOMA_DAEMON");
        if (daemon != NULL && daemon[0] != '\0' && !(o.flags & HOMA_RT_EMBEDDED)) {
            rc = rt_connect(daemon, o.busy_poll_us, out);
            if (rc != 0)
                fprintf(stderr, "libhoma: HOMA_DAEMON=%s: no homad there (%s)\n", daemon,
                        homa_strerror(rc));
            return rc;
        }
    }
    homa_runtime *rt = calloc(1, sizeof(*rt));
    if (rt == NULL) return HOMA_ERR_NOMEM;
    rt->port_map = calloc(65536, sizeof(*rt->port_map));
    if (rt->port_map == NULL) {
        free(rt);
        return HOMA_ERR_NOMEM;
    }
    rt->cfg = o.config;
    rt->cfg.max_payload = o.max_payload ? o.max_payload
                          : (o.flags & HOMA_RT_RAW)
                              ? raw_payload_for_mtu(o.mtu ? o.mtu : host_mtu())
                              : payload_for_mtu(o.mtu ? o.mtu : host_mtu());
    /* link_bps 0 leaves the config's rate (tools pass it as an engine key) */
    rt->cfg.link_bps = o.link_bps ? o.link_bps : o.config.link_bps;
    /* The pacer must count what really crosses the link, not only Homa's
     * bytes: IPv6 + UDP headers and Ethernet framing (IPv4 is 20 bytes
     * less: pacing it as IPv6 errs on the safe side). */
    if (rt->cfg.pkt_overhead == 0)
        rt->cfg.pkt_overhead = (o.flags & HOMA_RT_RAW) ? 40 + 38 : 40 + 8 + 38;
    /* The engine's defaults assume ~1,400-byte packets.  With loopback's
     * 64 KB packets a 40,000-byte unscheduled allowance and grant window are
     * less than one packet, so every packet of a long message would wait a
     * round trip for its grant.  Scale the allowance (only if left at its
     * default) to two packets; a grant_window of 0 follows it. */
    homa_config defaults;
    homa_config_default(&defaults);
    uint32_t two = 2 * rt->cfg.max_payload;
    if (rt->cfg.unsched_bytes == defaults.unsched_bytes && rt->cfg.unsched_bytes < two) {
        rt->cfg.unsched_bytes = two;
        /* With so few packets per window every DATA packet read triggers a
         * GRANT and every GRANT releases one packet: per-packet system
         * calls dominate (1 MB echo, loopback).  A window of four packets,
         * with the GRANTs of packets read back to back merged into one,
         * halves the GRANTs and lets the sender send two packets per call;
         * max_incoming follows so that three such windows can be open. */
        if (rt->cfg.grant_window == defaults.grant_window) rt->cfg.grant_window = 2 * two;
        if (rt->cfg.max_incoming == defaults.max_incoming && rt->cfg.max_incoming < 6 * two)
            rt->cfg.max_incoming = 6 * two;
    }

    rt->busy_poll_ns = (uint64_t)o.busy_poll_us * 1000u;
    homa_spin_init(&rt->spin, rt->busy_poll_ns);
    rt->grace_ns = rt->cfg.tick_ns > 100000 ? rt->cfg.tick_ns : 100000;
    rt->faults = o.faults;
    rt->io = (o.flags & HOMA_RT_RAW) ? &homa_raw_ops : &homa_udp_ops;
    rt->no_unreach = (o.flags & HOMA_RT_NO_UNREACH) != 0;
    rt->io_opts.flags = o.flags & (HOMA_IO_NO_GSO | HOMA_IO_NO_GRO);
    rt->io_opts.faults = homa_faults_none(&rt->faults) ? NULL : &rt->faults;
    rt->io_opts.place = (o.flags & HOMA_RT_NO_PLACE) ? NULL : rt_place;
    rt->io_opts.place_ctx = rt;
    rt->epfd = -1;
    rt->wake_efd = -1;
    rt->driven = driven;
    pthread_mutex_init(&rt->lock, NULL);
    cond_init_mono(&rt->bg_cond);
    cond_init_mono(&rt->state_cond);

    int rc;
    if (o.pcap_path != NULL) {
        rc = homa_pcap_open(o.pcap_path, &rt->pcap);
        if (rc != 0) {
            fprintf(stderr, "libhoma: cannot write pcap file %s: %s\n", o.pcap_path,
                    strerror(errno));
            goto fail;
        }
        rt->io_opts.pcap = rt->pcap;
    }
    homa_engine_ops ops = {
        .ctx = rt, .random = rt_random, .want_tx = rt_want_tx, .ready = rt_ready};
    /* A packet size the user chose applies to every peer. */
    if (o.mtu == 0 && o.max_payload == 0) {
        rc = HOMA_ERR_NOMEM;
        rt->paths = calloc(PATH_SETS * PATH_WAYS, sizeof(*rt->paths));
        if (rt->paths == NULL) goto fail;
        ops.path_payload = rt_path_payload;
    }
    rc = homa_engine_create(&rt->cfg, &ops, &rt->eng);
    if (rc != 0) goto fail;
    rt->cfg = *homa_engine_config(rt->eng);
    rt->epfd = epoll_create1(EPOLL_CLOEXEC);
    rt->wake_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    rc = HOMA_ERR_IO;
    if (rt->epfd < 0 || rt->wake_efd < 0) goto fail;
    if (driven) {
        /* The caller's epoll set holds rt->epfd: only input may make it
         * readable (nobody here sleeps on wake_efd). */
        *out = rt;
        return 0;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(rt->epfd, EPOLL_CTL_ADD, rt->wake_efd, &ev) != 0) goto fail;
    if (pthread_create(&rt->bg, NULL, bg_main, rt) != 0) goto fail;
    rt->bg_started = 1;
    *out = rt;
    return 0;

fail:
    if (rt->eng != NULL) homa_engine_destroy(rt->eng);
    if (rt->epfd >= 0) close(rt->epfd);
    if (rt->wake_efd >= 0) close(rt->wake_efd);
    homa_pcap_close(rt->pcap);
    pthread_cond_destroy(&rt->bg_cond);
    pthread_cond_destroy(&rt->state_cond);
    pthread_mutex_destroy(&rt->lock);
    free(rt->paths);
    free(rt->port_map);
    free(rt);
    return rc;
}

static homa_runtime *default_rt;
static int default_rc;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void default_init(void)
{
    default_rc = homa_runtime_create(NULL, &default_rt);
}

int homa_runtime_default(homa_runtime **out)
{
    pthread_once(&default_once, default_init);
    if (default_rc == 0) *out = default_rt;
    return default_rc;
}

const homa_config *homa_runtime_config(const homa_runtime *rt)
{
    return &rt->cfg;
}

void homa_runtime_destroy(homa_runtime *rt)
{
    if (rt == NULL) return;
    while (rt->socks != NULL)
        homa_socket_close(rt->socks);
    if (rt->dc != NULL) {
        homa_dc_destroy(rt->dc);
        pthread_mutex_destroy(&rt->lock);
        free(rt);
        return;
    }
    pthread_mutex_lock(&rt->lock);
    rt->stop = 1;
    pthread_cond_signal(&rt->bg_cond);
    wake_poller(rt);
    pthread_mutex_unlock(&rt->lock);
    if (rt->bg_started) pthread_join(rt->bg, NULL);
    homa_engine_destroy(rt->eng);
    close(rt->epfd);
    close(rt->wake_efd);
    if (rt->pcap != NULL) homa_pcap_close(rt->pcap);
    if (rt->poll_list != rt->poll_io) free(rt->poll_list);
    free(rt->local_buf);
    pthread_cond_destroy(&rt->bg_cond);
    pthread_cond_destroy(&rt->state_cond);
    pthread_mutex_destroy(&rt->lock);
    free(rt->paths);
    free(rt->port_map);
    free(rt);
}

void homa_runtime_counters(homa_runtime *rt, homa_counters *engine, homa_driver_counters *driver)
{
    if (rt->dc != NULL) {
        if (homa_dc_counters(rt->dc, engine, driver) != 0) {
            /* The daemon is gone: no counters to report. */
            if (engine != NULL) memset(engine, 0, sizeof(*engine));
            if (driver != NULL) memset(driver, 0, sizeof(*driver));
        }
        return;
    }
    pthread_mutex_lock(&rt->lock);
    if (engine != NULL) homa_engine_counters(rt->eng, engine);
    if (driver != NULL) {
        memset(driver, 0, sizeof(*driver));
#define HOMA_SUM_CTR(name, desc) driver->name = __atomic_load_n(&rt->extra.name, __ATOMIC_RELAXED);
        HOMA_DRIVER_COUNTER_LIST(HOMA_SUM_CTR)
#undef HOMA_SUM_CTR
        for (homa_socket *s = rt->socks; s != NULL; s = s->next)
            rt->io->counters(s->io, driver);
    }
    pthread_mutex_unlock(&rt->lock);
}

int homa_runtime_set_faults(homa_runtime *rt, const homa_faults *faults)
{
    if (rt == NULL) return HOMA_ERR_INVAL;
    homa_faults none;
    memset(&none, 0, sizeof(none));
    none.delay_us = 1000;
    const homa_faults *f = faults != NULL ? faults : &none;
    /* The checks homa_faults_parse() makes, for structs filled by hand. */
    double sum = f->drop + f->dup + f->reorder + f->delay;
    if (!(f->drop >= 0 && f->dup >= 0 && f->reorder >= 0 && f->delay >= 0) || sum > 1.0 + 1e-9 ||
        f->jitter_us > f->delay_us || f->reorder_depth > 1000 ||
        (f->blackout_every_ns != 0 && f->blackout_every_ns <= f->blackout_ns))
        return HOMA_ERR_INVAL;
    for (int c = 0; c < HOMA_FAULT_CLASS_COUNT; c++)
        if (!(f->drop_class[c] >= 0 && f->drop_class[c] <= 1)) return HOMA_ERR_INVAL;
    if (rt->io->set_faults == NULL) return HOMA_ERR_STATE;
    pthread_mutex_lock(&rt->lock);
    rt->faults = *f;
    /* Once faults were on, packets may still be held back: keep looking
     * for them (driver_deadline, tx_flush_held) even if the new spec has
     * none. */
    if (!homa_faults_none(f)) rt->io_opts.faults = &rt->faults;
    uint64_t now = now_ns();
    for (homa_socket *s = rt->socks; s != NULL; s = s->next)
        rt->io->set_faults(s->io, f, now);
    /* Held packets and blackouts change the driver's deadlines. */
    rt->bg_armed = 0;
    pthread_cond_signal(&rt->bg_cond);
    if (rt->poller_sleeping) wake_poller(rt);
    pthread_mutex_unlock(&rt->lock);
    return 0;
}

void homa_runtime_cutoffs(homa_runtime *rt, homa_cutoffs *out)
{
    if (rt->dc != NULL) {
        /* The host engine's, from homad; zeros if homad is gone. */
        if (homa_dc_cutoffs(rt->dc, out) != 0) memset(out, 0, sizeof(*out));
        return;
    }
    pthread_mutex_lock(&rt->lock);
    homa_engine_cutoffs(rt->eng, out);
    pthread_mutex_unlock(&rt->lock);
}

#define HOMA_DRV_NAME(name, desc) #name,
#define HOMA_DRV_DESC(name, desc) desc,
static const char *const drv_names[] = {HOMA_DRIVER_COUNTER_LIST(HOMA_DRV_NAME)};
static const char *const drv_descs[] = {HOMA_DRIVER_COUNTER_LIST(HOMA_DRV_DESC)};
#undef HOMA_DRV_NAME
#undef HOMA_DRV_DESC

size_t homa_driver_counter_count(void)
{
    return sizeof(drv_names) / sizeof(drv_names[0]);
}

const char *homa_driver_counter_name(size_t i)
{
    return i < homa_driver_counter_count() ? drv_names[i] : NULL;
}

const char *homa_driver_counter_desc(size_t i)
{
    return i < homa_driver_counter_count() ? drv_descs[i] : NULL;
}

/* ------------------------------------------------------- driven mode */

int homa_rt_drive_fd(homa_runtime *rt)
{
    return rt->driven ? rt->epfd : HOMA_ERR_STATE;
}

int homa_rt_drive(homa_runtime *rt)
{
    if (!rt->driven) return HOMA_ERR_STATE;
    pthread_mutex_lock(&rt->lock);
    /* The caller is the token holder for the length of the pass. */
    rt->poller = POLLER_BG;
    int n = poll_pass(rt);
    run_timers(rt, now_ns());
    if (rt->tx_more && !rt->tx_busy) n++;
    rt->poller = POLLER_NONE;
    pthread_mutex_unlock(&rt->lock);
    return n;
}

int homa_rt_drive_ports(homa_runtime *rt, const uint16_t *ports, int n)
{
    if (!rt->driven || n < 0) return HOMA_ERR_STATE;
    homa_io_sock *ios[64];
    int k = 0;
    pthread_mutex_lock(&rt->lock);
    rt->poller = POLLER_BG;
    int got = 0, passes = 0;
    for (int i = 0; i <= n; i++) {
        if (k == 64 || (i == n && k > 0)) {
            got += poll_socks(rt, ios, k);
            passes++;
            k = 0;
        }
        if (i == n) break;
        homa_socket *s = rt->port_map[ports[i]];
        if (s == NULL) continue; /* closed since */
        int dup = 0;
        for (int j = 0; j < k; j++)
            dup |= ios[j] == s->io;
        if (!dup) ios[k++] = s->io;
    }
    /* The caller's epoll found every other socket empty: the timers need
     * not wait for input (timers_wait). */
    if (passes == 0) rt->last_drain = rt->last_read = now_ns();
    if (n == 0 && rt->tx_more && !rt->tx_busy) tx_run(rt, TX_POLL_BUDGET);
    run_timers(rt, now_ns());
    if (rt->tx_more && !rt->tx_busy) got++;
    rt->poller = POLLER_NONE;
    pthread_mutex_unlock(&rt->lock);
    return got;
}

int homa_rt_socket_fd(homa_socket *s)
{
    return s->rt->driven ? s->rt->io->fd(s->io) : HOMA_ERR_STATE;
}

uint64_t homa_rt_drive_deadline(homa_runtime *rt)
{
    if (!rt->driven) return UINT64_MAX;
    pthread_mutex_lock(&rt->lock);
    /* The engine's own deadline, not timer_deadline(): the deferral there
     * waits for a reader to drain the sockets, and here the reader is the
     * caller, who drives only at this deadline (its epoll found nothing to
     * read; homa_rt_drive_ports then records the sockets as drained and the
     * timers decide).  Deferred, a due pacer deadline slept another tick:
     * homad paced 64 KB packets at 1 Gbit/s one per 1.4 ms instead of one
     * per 0.52 (0.32 instead of 0.87 Gbit/s of 1 MB echoes). */
    uint64_t d = rt->tx_more ? 0
                             : min_u64(homa_engine_next_deadline(rt->eng), driver_deadline(rt));
    pthread_mutex_unlock(&rt->lock);
    return d;
}

/* -------------------------------------------------------------- sockets */

static void req_free_all(homa_socket *s);

int homa_socket_bind(homa_runtime *rt, const homa_endpoint *local, homa_socket **out)
{
    if (local == NULL || out == NULL) return HOMA_ERR_INVAL;
    if (rt == NULL) {
        int rc = homa_runtime_default(&rt);
        if (rc != 0) return rc;
    }
    homa_socket *s = calloc(1, sizeof(*s));
    if (s == NULL) return HOMA_ERR_NOMEM;
    s->rt = rt;
    s->efd = -1;
    if (rt->dc != NULL) {
        int rc = homa_dc_open(rt->dc, local, &s->dcs, &s->port);
        if (rc != 0) {
            free(s);
            return rc;
        }
        s->local.addr = local->addr;
        s->local.port = s->port;
        pthread_mutex_lock(&rt->lock);
        s->next = rt->socks;
        rt->socks = s;
        rt->nsocks++;
        pthread_mutex_unlock(&rt->lock);
        *out = s;
        return 0;
    }
    pthread_mutex_lock(&rt->lock);
    homa_io_opts io_opts = rt->io_opts;
    io_opts.fault_salt = rt->sockets_opened++;
    /* A copy: homa_runtime_set_faults() may change rt->faults meanwhile. */
    homa_faults faults = rt->faults;
    if (io_opts.faults != NULL) io_opts.faults = &faults;
    pthread_mutex_unlock(&rt->lock);
    int rc = rt->io->open(local, &io_opts, &s->io);
    if (rc != 0) {
        free(s);
        return rc;
    }
    rt->io->local(s->io, &s->local);
    s->port = s->local.port;
    pthread_mutex_lock(&rt->lock);
    rc = rt->stop ? HOMA_ERR_SHUTDOWN : homa_engine_port_open(rt->eng, s->port);
    if (rc == 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
        if (epoll_ctl(rt->epfd, EPOLL_CTL_ADD, rt->io->fd(s->io), &ev) != 0) {
            homa_engine_port_close(rt->eng, now_ns(), s->port);
            rc = HOMA_ERR_IO;
        }
    }
    if (rc != 0) {
        pthread_mutex_unlock(&rt->lock);
        rt->io->close(s->io);
        free(s);
        return rc;
    }
    rt->port_map[s->port] = s;
    s->next = rt->socks;
    rt->socks = s;
    rt->nsocks++;
    rt->socks_gen++;
    /* A new socket may need the background thread as its poller. */
    pthread_cond_signal(&rt->bg_cond);
    pthread_mutex_unlock(&rt->lock);
    *out = s;
    return 0;
}

int homa_socket_open(homa_runtime *rt, uint16_t port, homa_socket **out)
{
    homa_endpoint any;
    memset(&any, 0, sizeof(any));
    any.port = port;
    return homa_socket_bind(rt, &any, out);
}

void homa_socket_close(homa_socket *s)
{
    if (s == NULL) return;
    homa_runtime *rt = s->rt;
    if (rt->dc != NULL) {
        pthread_mutex_lock(&rt->lock);
        for (homa_socket **pp = &rt->socks; *pp != NULL; pp = &(*pp)->next) {
            if (*pp == s) {
                *pp = s->next;
                break;
            }
        }
        rt->nsocks--;
        pthread_mutex_unlock(&rt->lock);
        homa_dc_close(s->dcs);
        free(s);
        return;
    }
    pthread_mutex_lock(&rt->lock);
    /* The acks the port owes go out while its socket can still send them
     * (best effort: a transmission in progress elsewhere may pull them
     * after the port is gone, and then the servers time out as before). */
    if (homa_engine_port_flush_acks(rt->eng, now_ns(), s->port) > 0) tx_if_wanted(rt);
    s->closing = 1;
    for (homa_socket **pp = &rt->socks; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    rt->nsocks--;
    rt->socks_gen++;
    rt->port_map[s->port] = NULL;
    if (s->efd >= 0) rt->nexported--;
    epoll_ctl(rt->epfd, EPOLL_CTL_DEL, rt->io->fd(s->io), NULL);
    homa_engine_port_close(rt->eng, now_ns(), s->port);
    tx_if_wanted(rt);
    for (struct waiter *w = rt->waiters; w != NULL; w = w->next)
        if (w->sock == s && w->sleeping) wake_waiter(w);
    /* Wait until nobody can still be using the driver socket: no thread in
     * homa_recv on it, no transmission in flight, and the token holder has
     * either picked up the new socket list or is asleep in epoll. */
    rt->state_waiters++;
    while (s->users > 0 || rt->tx_busy ||
           (rt->poller != POLLER_NONE && rt->poller_gen != rt->socks_gen && !rt->poller_sleeping)) {
        if (s->users > 0 && rt->poller != POLLER_NONE && rt->poller_sleeping)
            wake_poller(rt); /* the token holder may be a user of s */
        cond_wait_until(&rt->state_cond, &rt->lock, now_ns() + 10000000);
    }
    rt->state_waiters--;
    homa_driver_counters c;
    memset(&c, 0, sizeof(c));
    rt->io->counters(s->io, &c);
#define HOMA_KEEP_CTR(name, desc) RT_CTR_ADD(rt, name, c.name);
    HOMA_DRIVER_COUNTER_LIST(HOMA_KEEP_CTR)
#undef HOMA_KEEP_CTR
    pthread_mutex_unlock(&rt->lock);
    rt->io->close(s->io);
    if (s->efd >= 0) close(s->efd);
    req_free_all(s);
    free(s);
}

int homa_socket_linger(homa_socket *s, int64_t timeout_ns)
{
    if (s == NULL || (timeout_ns < 0 && timeout_ns != HOMA_FOREVER)) return HOMA_ERR_INVAL;
    homa_runtime *rt = s->rt;
    if (rt->dc != NULL) return homa_dc_linger(s->dcs, timeout_ns);
    if (rt->driven && timeout_ns != 0) return HOMA_ERR_STATE; /* rt/driven.h */
    uint64_t deadline = timeout_ns == HOMA_FOREVER ? UINT64_MAX : now_ns() + (uint64_t)timeout_ns;
    for (;;) {
        pthread_mutex_lock(&rt->lock);
        int n = s->closing ? HOMA_ERR_SHUTDOWN : homa_engine_port_rpcs(rt->eng, s->port);
        /* The acks the port owes go now, not on a request that may never
         * come (the process is about to exit): its servers free their RPCs
         * now instead of after a timeout, and one that lingers too stops
         * waiting (processes lingering in a ring wait on each other). */
        if (n >= 0 && homa_engine_port_flush_acks(rt->eng, now_ns(), s->port) > 0) tx_if_wanted(rt);
        pthread_mutex_unlock(&rt->lock);
        if (n <= 0) return n < 0 ? n : 0;
        uint64_t now = now_ns();
        if (now >= deadline) return HOMA_ERR_AGAIN;
        /* Acks come within a few ticks (NEED_ACK after need_ack_ticks); a
         * short sleep is simpler than a wakeup for this rare call. */
        uint64_t nap = deadline - now < 1000000 ? deadline - now : 1000000;
        struct timespec ts = {0, (long)nap};
        nanosleep(&ts, NULL);
    }
}

int homa_socket_set_class(homa_socket *s, int sched_class)
{
    if (s == NULL || sched_class < 0 || sched_class >= HOMA_SCHED_CLASSES) return HOMA_ERR_INVAL;
    homa_runtime *rt = s->rt;
    if (rt->dc != NULL) return homa_dc_set_class(s->dcs, sched_class);
    pthread_mutex_lock(&rt->lock);
    int rc = s->closing ? HOMA_ERR_SHUTDOWN
                        : homa_engine_port_set_class(rt->eng, s->port, sched_class);
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

uint16_t homa_socket_port(const homa_socket *s)
{
    return s->port;
}

void homa_socket_local(const homa_socket *s, homa_endpoint *out)
{
    *out = s->local;
}

homa_runtime *homa_socket_runtime(const homa_socket *s)
{
    return s->rt;
}

int homa_socket_fd(homa_socket *s)
{
    homa_runtime *rt = s->rt;
    if (rt->dc != NULL) return homa_dc_fd(s->dcs);
    pthread_mutex_lock(&rt->lock);
    if (s->efd < 0) {
        s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (s->efd >= 0) {
            /* Start readable: messages may already be waiting, and a
             * spurious wake-up only costs one HOMA_ERR_AGAIN. */
            uint64_t one = 1;
            ssize_t r = write(s->efd, &one, sizeof(one));
            (void)r;
            s->efd_armed = 1;
            rt->nexported++;
            /* From now on the background thread polls at once: this
             * application waits on the eventfd, not in homa_recv. */
            pthread_cond_signal(&rt->bg_cond);
        }
    }
    int fd = s->efd;
    pthread_mutex_unlock(&rt->lock);
    return fd < 0 ? HOMA_ERR_IO : fd;
}

/* ----------------------------------------------------------------- RPCs */

static size_t req_bucket(const homa_socket *s, uint64_t id)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 20) & (s->reqs_buckets - 1);
}

/* Remembers an unanswered request.  Lock held.  On allocation failure the
 * request can still be answered with homa_reply_msg(). */
static void req_remember(homa_socket *s, const homa_msg *m)
{
    if (s->reqs_count >= s->reqs_buckets) {
        size_t nb = s->reqs_buckets ? s->reqs_buckets * 2 : 64;
        struct pending_req **t = calloc(nb, sizeof(*t));
        if (t == NULL) return;
        size_t ob = s->reqs_buckets;
        struct pending_req **old = s->reqs;
        s->reqs = t;
        s->reqs_buckets = nb;
        for (size_t i = 0; i < ob; i++) {
            while (old[i] != NULL) {
                struct pending_req *r = old[i];
                old[i] = r->next;
                size_t b = req_bucket(s, r->id);
                r->next = t[b];
                t[b] = r;
            }
        }
        free(old);
    }
    struct pending_req *r = malloc(sizeof(*r));
    if (r == NULL) return;
    r->id = m->id;
    r->peer = m->peer;
    r->peer_port = m->peer_port;
    size_t b = req_bucket(s, m->id);
    r->next = s->reqs[b];
    s->reqs[b] = r;
    s->reqs_count++;
}

/* Finds (and with peer non-NULL, only that peer's) request id.  Returns the
 * number of matches (so 2 = ambiguous); *found gets the first.  Lock held. */
static int req_find(homa_socket *s, uint64_t id, const homa_addr *peer, uint16_t peer_port,
                    struct pending_req ***found)
{
    int n = 0;
    if (s->reqs_buckets == 0) return 0;
    for (struct pending_req **pp = &s->reqs[req_bucket(s, id)]; *pp != NULL; pp = &(*pp)->next) {
        struct pending_req *r = *pp;
        if (r->id != id) continue;
        if (peer != NULL &&
            (r->peer_port != peer_port || memcmp(&r->peer, peer, sizeof(*peer)) != 0))
            continue;
        if (n++ == 0) *found = pp;
    }
    return n;
}

static void req_forget(homa_socket *s, struct pending_req **pp)
{
    struct pending_req *r = *pp;
    *pp = r->next;
    free(r);
    s->reqs_count--;
}

static void req_free_all(homa_socket *s)
{
    for (size_t i = 0; i < s->reqs_buckets; i++)
        while (s->reqs[i] != NULL)
            req_forget(s, &s->reqs[i]);
    free(s->reqs);
    s->reqs = NULL;
    s->reqs_buckets = 0;
}

/* prio: -1, or lo | hi << 4 (a HOMA_SEND_PRIO range, already checked
 * against 0..7; the engine checks it against num_priorities). */
static int send_common(homa_socket *s, const homa_endpoint *dst, const void *buf, void *owned,
                       size_t len, uint64_t cookie, int prio, uint64_t *id)
{
    if (s == NULL || dst == NULL || (buf == NULL && owned == NULL && len > 0))
        return HOMA_ERR_INVAL;
    homa_runtime *rt = s->rt;
    if (rt->dc != NULL) {
        int rc = homa_dc_send(s->dcs, dst, owned ? owned : buf, len, cookie, prio, id);
        if (rc == 0) free(owned); /* written into the shared region: ours to free */
        return rc;
    }
    int lo = prio & 0xf, hi = prio >> 4;
    if (prio >= 0 && hi >= (int)homa_engine_config(rt->eng)->num_priorities) return HOMA_ERR_INVAL;
    uint64_t rid = 0;
    pthread_mutex_lock(&rt->lock);
    path_prepare(rt, &dst->addr, now_ns());
    int rc;
    if (s->closing)
        rc = HOMA_ERR_SHUTDOWN;
    else if (owned)
        rc = homa_engine_send_request_owned(rt->eng, now_ns(), s->port, &dst->addr, dst->port,
                                            owned, len, cookie, &rid);
    else
        rc = homa_engine_send_request(rt->eng, now_ns(), s->port, &dst->addr, dst->port, buf, len,
                                      cookie, &rid);
    /* Before tx_app: the first packets obey the range too. */
    if (rc == 0 && prio >= 0) homa_engine_request_priority(rt->eng, s->port, rid, lo, hi);
    if (rc == 0) {
        tx_app(rt);
        check_deadline(rt);
    }
    pthread_mutex_unlock(&rt->lock);
    if (rc == 0 && id != NULL) *id = rid;
    return rc;
}

int homa_send(homa_socket *s, const homa_endpoint *dst, const void *buf, size_t len,
              uint64_t cookie, uint64_t *id)
{
    return send_common(s, dst, buf, NULL, len, cookie, -1, id);
}

int homa_send_owned(homa_socket *s, const homa_endpoint *dst, void *buf, size_t len,
                    uint64_t cookie, uint64_t *id)
{
    if (buf == NULL) return HOMA_ERR_INVAL;
    return send_common(s, dst, NULL, buf, len, cookie, -1, id);
}

int homa_sendx(homa_socket *s, const homa_endpoint *dst, void *buf, size_t len, uint64_t cookie,
               unsigned flags, uint64_t *id)
{
    if (flags & ~(HOMA_SEND_OWNED | HOMA_SEND_PRIO(15, 15))) return HOMA_ERR_INVAL;
    int prio = -1;
    if (flags & HOMA_SEND_PRIO(0, 0)) {
        unsigned lo = (flags >> 8) & 0xfu, hi = (flags >> 12) & 0xfu;
        if (lo > hi || hi > 7) return HOMA_ERR_INVAL;
        prio = (int)(lo | hi << 4);
    } else if (flags & 0xff00u) {
        return HOMA_ERR_INVAL; /* a range without HOMA_SEND_PRIO */
    }
    if (flags & HOMA_SEND_OWNED) {
        if (buf == NULL) return HOMA_ERR_INVAL;
        return send_common(s, dst, NULL, buf, len, cookie, prio, id);
    }
    return send_common(s, dst, buf, NULL, len, cookie, prio, id);
}

/* peer NULL: look the peer up by id alone. */
static int reply_common(homa_socket *s, const homa_addr *peer, uint16_t peer_port, uint64_t id,
                        const void *buf, void *owned, size_t len)
{
    if (s == NULL || (buf == NULL && owned == NULL && len > 0)) return HOMA_ERR_INVAL;
    homa_runtime *rt = s->rt;
    if (rt->dc != NULL) {
        int rc = homa_dc_reply(s->dcs, peer, peer_port, id, owned ? owned : buf, len);
        if (rc == 0) free(owned);
        return rc;
    }
    pthread_mutex_lock(&rt->lock);
    int rc;
    struct pending_req **pp = NULL;
    int n = req_find(s, id, peer, peer_port, &pp);
    if (s->closing) {
        rc = HOMA_ERR_SHUTDOWN;
    } else if (peer == NULL && n == 0) {
        rc = HOMA_ERR_NOT_FOUND;
    } else if (peer == NULL && n > 1) {
        rc = HOMA_ERR_STATE;
    } else {
        homa_addr a = peer ? *peer : (*pp)->peer;
        uint16_t p = peer ? peer_port : (*pp)->peer_port;
        rc = owned ? homa_engine_send_reply_owned(rt->eng, now_ns(), s->port, &a, p, id, owned, len)
                   : homa_engine_send_reply(rt->eng, now_ns(), s->port, &a, p, id, buf, len);
        /* Forget the request once answered, or once the engine says it can
         * never be answered. */
        if (n > 0 && (rc == 0 || rc == HOMA_ERR_NOT_FOUND || rc == HOMA_ERR_STATE))
            req_forget(s, pp);
        if (rc == 0) {
            tx_app(rt);
            check_deadline(rt);
        }
    }
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

int homa_reply(homa_socket *s, uint64_t id, const void *buf, size_t len)
{
    return reply_common(s, NULL, 0, id, buf, NULL, len);
}

int homa_reply_msg(homa_socket *s, const homa_msg *req, const void *buf, size_t len)
{
    if (req == NULL) return HOMA_ERR_INVAL;
    return reply_common(s, &req->peer, req->peer_port, req->id, buf, NULL, len);
}

int homa_reply_msg_owned(homa_socket *s, const homa_msg *req, void *buf, size_t len)
{
    if (req == NULL || buf == NULL) return HOMA_ERR_INVAL;
    return reply_common(s, &req->peer, req->peer_port, req->id, NULL, buf, len);
}

void *homa_msg_take(homa_socket *s, homa_msg *msg)
{
    if (s == NULL || msg == NULL || msg->handle == NULL) return NULL;
    homa_runtime *rt = s->rt;
    if (rt->dc != NULL) return homa_dc_msg_take(s->dcs, msg);
    pthread_mutex_lock(&rt->lock);
    void *buf = s->closing ? NULL : homa_engine_msg_take(rt->eng, msg);
    pthread_mutex_unlock(&rt->lock);
    return buf;
}

int homa_reply_to(homa_socket *s, const homa_endpoint *peer, uint64_t id, const void *buf,
                  size_t len)
{
    if (peer == NULL) return HOMA_ERR_INVAL;
    return reply_common(s, &peer->addr, peer->port, id, buf, NULL, len);
}

int homa_abort(homa_socket *s, uint64_t id)
{
    if (s == NULL) return HOMA_ERR_INVAL;
    homa_runtime *rt = s->rt;
    if (rt->dc != NULL) return homa_dc_abort(s->dcs, id);
    pthread_mutex_lock(&rt->lock);
    int rc;
    if (s->closing) {
        rc = HOMA_ERR_SHUTDOWN;
    } else if (id & 1) {
        /* The engine has no way to drop a server RPC early; forgetting it
         * here means no reply will ever be sent, and the engine frees it
         * when the client times out. */
        struct pending_req **pp = NULL;
        rc = req_find(s, id, NULL, 0, &pp) > 0 ? 0 : HOMA_ERR_NOT_FOUND;
        if (rc == 0) req_forget(s, pp);
    } else {
        rc = homa_engine_abort(rt->eng, now_ns(), s->port, id);
        if (rc == 0) tx_app(rt);
    }
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

void homa_release(homa_socket *s, homa_msg *msg)
{
    if (s == NULL || msg == NULL || msg->handle == NULL) return;
    homa_runtime *rt = s->rt;
    if (rt->dc != NULL) {
        homa_dc_release(s->dcs, msg);
        return;
    }
    pthread_mutex_lock(&rt->lock);
    if (!s->closing) {
        homa_engine_release(rt->eng, msg);
        tx_if_wanted(rt); /* freeing a message may let grants go to others */
    }
    pthread_mutex_unlock(&rt->lock);
    msg->handle = NULL;
    msg->data = NULL;
}

/* engine_recv plus the failure convention of homa_recv.  Lock held. */
static int try_recv(homa_runtime *rt, homa_socket *s, unsigned flags, uint64_t id, homa_msg *msg)
{
    int rc = homa_engine_recv(rt->eng, s->port, flags, id, msg);
    tx_if_wanted(rt);
    if (rc != 0) return rc;
    if (msg->is_request) req_remember(s, msg);
    if (msg->error != 0) {
        /* A failed RPC carries no data: free it now so callers that only
         * check the return value don't leak it. */
        int err = msg->error;
        homa_engine_release(rt->eng, msg);
        msg->handle = NULL;
        msg->data = NULL;
        msg->length = 0;
        return err;
    }
    return 0;
}

int homa_recv(homa_socket *s, unsigned flags, uint64_t id, int64_t timeout_ns, homa_msg *msg)
{
    if (s == NULL || msg == NULL || (id == 0 && (flags & HOMA_RECV_ANY) == 0))
        return HOMA_ERR_INVAL;
    homa_runtime *rt = s->rt;
    if (rt->dc != NULL) return homa_dc_recv(s->dcs, flags, id, timeout_ns, msg);
    if (rt->driven && timeout_ns != 0) return HOMA_ERR_STATE; /* rt/driven.h */
    memset(msg, 0, sizeof(*msg));
    uint64_t start = now_ns();
    uint64_t deadline = timeout_ns < 0 ? UINT64_MAX : start + (uint64_t)timeout_ns;

    pthread_mutex_lock(&rt->lock);
    if (s->closing) {
        pthread_mutex_unlock(&rt->lock);
        return HOMA_ERR_SHUTDOWN;
    }
    int rc = try_recv(rt, s, flags, id, msg);
    if (rc == HOMA_ERR_AGAIN && timeout_ns == 0 && rt->poller == POLLER_NONE && !rt->driven) {
        /* Non-blocking: one quick pass over the sockets if nobody else is
         * polling, so a caller that polls in a loop still makes progress. */
        struct waiter w = {.sock = s};
        rt->poller = POLLER_APP;
        rt->poller_w = &w;
        poll_pass(rt);
        run_timers(rt, now_ns());
        pass_token(rt);
        rt->last_app_poll = now_ns();
        rc = try_recv(rt, s, flags, id, msg);
    } else if (rc == HOMA_ERR_AGAIN && timeout_ns == 0 && rt->poller == POLLER_BG) {
        /* The background thread holds the token, most likely asleep in
         * epoll: every packet would then wait for that thread to be
         * scheduled before this caller could see it.  Mark the application
         * as polling, so bg_poll hands the token back after its next pass
         * and the caller's next non-blocking call reads the sockets itself. */
        rt->last_app_poll = now_ns();
    }
    if (rc != HOMA_ERR_AGAIN || timeout_ns == 0) {
        if (rc == HOMA_ERR_AGAIN && flags == HOMA_RECV_ANY && id == 0 && s->efd_armed) {
            drain_efd(s->efd);
            s->efd_armed = 0;
        }
        if (rc != 0 && rc != HOMA_ERR_AGAIN && id == 0 && msg->id == 0)
            memset(msg, 0, sizeof(*msg));
        pthread_mutex_unlock(&rt->lock);
        return rc;
    }

    struct waiter w;
    memset(&w, 0, sizeof(w));
    w.sock = s;
    cond_init_mono(&w.cond);
    w.next = rt->waiters;
    if (rt->waiters != NULL) rt->waiters->prev = &w;
    rt->waiters = &w;
    s->users++;

    for (;;) {
        if (s->closing || rt->stop) {
            rc = HOMA_ERR_SHUTDOWN;
            break;
        }
        rc = try_recv(rt, s, flags, id, msg);
        if (rc != HOMA_ERR_AGAIN) break;
        uint64_t now = now_ns();
        if (now >= deadline) break;
        if (rt->poller == POLLER_NONE) {
            rt->poller = POLLER_APP;
            rt->poller_w = &w;
            app_poll(rt, &w, deadline);
            /* Keep the token while we re-check for our message. */
            continue;
        }
        if (rt->poller_w == &w) {
            app_poll(rt, &w, deadline);
            continue;
        }
        /* Someone else polls: if it is the background thread, ask it to
         * hand the token over; either way sleep until our message is ready
         * or the token comes to us. */
        rt->token_waiters++;
        if (rt->poller == POLLER_BG && rt->poller_sleeping) wake_poller(rt);
        w.sleeping = 1;
        cond_wait_until(&w.cond, &rt->lock, deadline);
        w.sleeping = 0;
        rt->token_waiters--;
    }
    /* We may have been woken to take the token but are leaving instead. */
    if (rt->poller_w != &w) offer_token(rt);

    if (rt->poller_w == &w) {
        pass_token(rt);
        rt->last_app_poll = now_ns();
        /* The bg thread may be in a long sleep; it must take over polling
         * a tick from now if the application doesn't come back. */
        if (rt->bg_armed > rt->last_app_poll + 2 * rt->grace_ns) {
            rt->bg_armed = 0;
            pthread_cond_signal(&rt->bg_cond);
        }
    }
    if (w.prev != NULL)
        w.prev->next = w.next;
    else
        rt->waiters = w.next;
    if (w.next != NULL) w.next->prev = w.prev;
    s->users--;
    if (s->closing) notify_state(rt);
    pthread_mutex_unlock(&rt->lock);
    pthread_cond_destroy(&w.cond);
    if (rc != 0 && msg->id == 0) memset(msg, 0, sizeof(*msg));
    return rc;
}

int homa_call(homa_socket *s, const homa_endpoint *dst, const void *req, size_t len,
              int64_t timeout_ns, homa_msg *resp)
{
    uint64_t id;
    int rc = homa_send(s, dst, req, len, 0, &id);
    if (rc != 0) return rc;
    rc = homa_recv(s, HOMA_RECV_RESPONSE, id, timeout_ns, resp);
    if (rc == HOMA_ERR_AGAIN) homa_abort(s, id);
    return rc;
}

void homa_rt_test_stall_read(homa_runtime *rt, uint64_t ns)
{
    pthread_mutex_lock(&rt->lock);
    rt->test_read_stall_ns = ns;
    pthread_mutex_unlock(&rt->lock);
}
