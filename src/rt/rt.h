/* The runtime's internals: what stands behind homa_runtime and homa_socket.
 *
 * The public API (api.c) checks its arguments and calls one of three
 * backends through a small table of operations (struct homa_rt_backend):
 *
 *   embedded  the engine runs in this process (embedded.c): sockets of an
 *             I/O driver (src/io), the transmit path (tx.c), the receive
 *             path with its poll token and background thread (poll.c), and
 *             the payload per path MTU (path.c);
 *   driven    the same engine without the background thread, driven by
 *             one caller thread (homad; driven.h, driven.c);
 *   homad     the host's engine runs in homad: the sockets live there and
 *             this process talks to it through shared memory
 *             (homad_client.c, docs/homad.md).
 *
 * Every blocking wait, in every backend, is the one loop of wait.h; every
 * receive picks its message by the one rule of src/core/readyq.h; the
 * unanswered requests of a socket are one table (reqtab.h). */
#ifndef HOMA_RT_RT_H
#define HOMA_RT_RT_H

#include <pthread.h>
#include <stdint.h>

#include <homa/homa.h>

#include "io/io.h"
#include "rt/driven.h"
#include "rt/reqtab.h"
#include "rt/spin.h"
#include "rt/wait.h"

/* A backend: what each public call does once its arguments are checked.
 * Every operation returns what the public call returns (docs in homa.h). */
struct homa_rt_backend {
    const char *name;
    void (*destroy)(homa_runtime *rt);
    void (*counters)(homa_runtime *rt, homa_counters *engine, homa_driver_counters *driver);
    void (*cutoffs)(homa_runtime *rt, homa_cutoffs *out);
    int (*set_faults)(homa_runtime *rt, const homa_faults *f);
    /* Opens s (s->rt set) on local: sets s->port and s->local and makes s
     * one of rt's sockets. */
    int (*open)(homa_socket *s, const homa_endpoint *local);
    /* Closes s: afterwards no thread uses it and it is no longer rt's. */
    void (*close)(homa_socket *s);
    int (*linger)(homa_socket *s, int64_t timeout_ns);
    int (*set_class)(homa_socket *s, int sched_class);
    int (*fd)(homa_socket *s);
    /* prio: -1, or a priority range lo | hi << 4 (0..7, checked).  Either
     * buf or owned (a malloc()ed buffer the backend then owns on success). */
    int (*send)(homa_socket *s, const homa_endpoint *dst, const void *buf, void *owned, size_t len,
                uint64_t cookie, int prio, uint64_t *id);
    /* peer NULL: the client of the one unanswered request `id`. */
    int (*reply)(homa_socket *s, const homa_addr *peer, uint16_t peer_port, uint64_t id,
                 const void *buf, void *owned, size_t len);
    /* msg cleared; flags and id checked (id != 0 or flags & HOMA_RECV_ANY). */
    int (*recv)(homa_socket *s, unsigned flags, uint64_t id, int64_t timeout_ns, homa_msg *msg);
    void (*release)(homa_socket *s, homa_msg *msg);
    void *(*msg_take)(homa_socket *s, homa_msg *msg);
    int (*abort)(homa_socket *s, uint64_t id);
};

extern const struct homa_rt_backend homa_rt_embedded;
extern const struct homa_rt_backend homa_rt_driven;
extern const struct homa_rt_backend homa_rt_homad;

struct homa_dc;
struct homa_dcsock;

/* ---------------------------------------------------------------- sockets */

/* A thread waiting in homa_recv (embedded backend). */
struct waiter {
    struct waiter *next;
    struct waiter *prev;
    homa_socket *sock;
    pthread_cond_t cond;
    int sleeping; /* waiting on cond */
};

struct homa_socket {
    homa_runtime *rt;
    homa_endpoint local;
    uint16_t port;
    int closing;
    homa_socket *next; /* rt->socks, under rt->lock */
    /* embedded and driven: */
    homa_io_sock *io;
    struct homa_reqtab reqs; /* unanswered requests; under rt->lock */
    int users;               /* threads inside homa_recv on this socket */
    uint64_t ready_gen;      /* bumped whenever the engine reports a ready message */
    int efd;                 /* eventfd for homa_socket_fd(), -1 until asked for */
    int efd_armed;           /* efd currently readable */
    /* homad: */
    struct homa_dcsock *dcs;
};

/* --------------------------------------------------------------- runtime */

enum { POLLER_NONE = 0, POLLER_APP, POLLER_BG };

/* Packets per homa_engine_pull: enough for several whole GSO batches (44
 * packets of 1,452 bytes at MTU 1500 fill one 64 KB datagram). */
#define RT_TX_PULL 256
#define RT_RX_CHUNK 64 /* packets per driver recv */

struct homa_runtime {
    const struct homa_rt_backend *be;
    pthread_mutex_t lock;
    homa_config cfg;
    homa_socket *socks;
    int nsocks;

    /* Everything below is the embedded and driven backends'. */
    homa_engine *eng;
    const homa_io_ops *io;
    int no_unreach; /* HOMA_RT_NO_UNREACH */
    homa_io_opts io_opts;
    homa_faults faults;
    homa_pcap *pcap;
    uint64_t busy_poll_ns;
    struct homa_spin spin; /* adaptive spin budget (rt/spin.h), full = busy_poll_ns */
    uint64_t grace_ns;     /* app idle this long before the bg thread polls */

    homa_socket **port_map; /* 65,536 entries */
    int nexported;          /* sockets whose eventfd was handed out */
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
    int tx_wanted;         /* the engine called want_tx since the last pull */
    int tx_more;           /* a transmission stopped at its budget with packets left */
    uint32_t tx_pkt_bytes; /* mean bytes per packet of the last pull (rt_tx_run) */
    /* When a poll pass last left every socket empty. */
    uint64_t last_drain;
    /* When a socket was last read (or found empty by the caller's epoll):
     * what peers sent after it is unseen. */
    uint64_t last_read;
    uint64_t test_read_stall_ns; /* homa_rt_test_stall_read */
    homa_pkt_out tx_pkts[RT_TX_PULL];

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
    homa_io_rx rx[RT_RX_CHUNK];

    homa_driver_counters extra; /* runtime-level, and closed sockets' */

    /* Path payloads per peer (path.c); NULL when every peer gets
     * cfg.max_payload. */
    struct path_entry *paths;
    homa_addr path_last;      /* the source last found fresh in paths ... */
    uint64_t path_last_until; /* ... and until when (rt_path_prepare_rx) */

    /* Driven (driven.h): no background thread; one caller thread runs the
     * receive path, the timers and the pacer. */
    int driven;
    homa_rt_ready_fn ready_fn;
    void *ready_ctx;
    uint8_t *local_buf; /* a packet to one of our own loopback ports (tx_local) */
    size_t local_cap;

    /* homad: the connection. */
    struct homa_dc *dc;
};

static inline uint64_t rt_min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

#define RT_CTR_ADD(rt, field, n)                                                                   \
    __atomic_fetch_add(&(rt)->extra.field, (uint64_t)(n), __ATOMIC_RELAXED)

/* ---- options.c ---- */
/* HOMA_FAULTS, HOMA_PCAP, HOMA_BUSY_POLL_US, HOMA_DRIVER, HOMA_MTU into o. */
int homa_rt_env_options(homa_runtime_options *o);
/* Largest MTU among the interfaces that are up (1500 if none). */
uint32_t homa_rt_host_mtu(void);
/* DATA payload per packet for a path MTU, over UDP and over raw IP. */
uint32_t homa_rt_payload_for_mtu(uint32_t mtu);
uint32_t homa_rt_raw_payload_for_mtu(uint32_t mtu);

/* ---- embedded.c ---- */
/* Creates an embedded runtime (driven: without the background thread). */
int homa_rt_embedded_create(const homa_runtime_options *o, int driven, homa_runtime **out);

/* ---- homad_client.c ---- */
int homa_rt_homad_connect(const char *path, uint32_t busy_poll_us, homa_runtime **out);

/* ---- tx.c (embedded; rt->lock held) ---- */
/* Pulls packets from the engine and transmits them until it has nothing
 * more to send now or `budget` bytes went out (then tx_more is set). */
void rt_tx_run(homa_runtime *rt, uint64_t budget);
/* Transmission by an application call: bounded, the rest handed off. */
void rt_tx_app(homa_runtime *rt);
/* Transmits if the engine asked for it. */
void rt_tx_if_wanted(homa_runtime *rt);
/* When the driver must run again for packets fault injection holds. */
uint64_t rt_driver_deadline(homa_runtime *rt);
#define RT_TX_POLL_BUDGET (1u << 20)

/* ---- poll.c (embedded; rt->lock held) ---- */
void rt_check_deadline(homa_runtime *rt);
void rt_notify_state(homa_runtime *rt);
void rt_wake_poller(homa_runtime *rt);
void rt_wake_waiter(struct waiter *w);
void rt_drain_efd(int fd);
void rt_cond_init_mono(pthread_cond_t *c);
void rt_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, uint64_t until);
void rt_run_timers(homa_runtime *rt, uint64_t now);
int rt_poll_pass(homa_runtime *rt);
int rt_poll_socks(homa_runtime *rt, homa_io_sock *const *list, int n_socks);
void rt_pass_token(homa_runtime *rt);
void rt_offer_token(homa_runtime *rt);
void rt_app_poll(homa_runtime *rt, struct waiter *w, uint64_t deadline);
void *rt_bg_main(void *arg);
/* Engine callbacks (homa_engine_ops, homa_io_opts.place). */
uint64_t rt_random(void *ctx);
void rt_want_tx(void *ctx);
void rt_ready(void *ctx, uint16_t port);
uint8_t *rt_place(void *ctx, uint64_t now, const homa_addr *src, const uint8_t *hdr,
                  uint32_t hdr_len, uint32_t pkt_len);

/* ---- path.c (embedded; rt->lock held) ---- */
int rt_path_init(homa_runtime *rt);
/* Makes sure addr's path is probed and fresh; drops rt->lock around a
 * probe: the caller must not rely on what it read under the lock before. */
void rt_path_prepare(homa_runtime *rt, const homa_addr *addr, uint64_t now);
/* The same for the source of a received packet (only DATA is worth it). */
void rt_path_prepare_rx(homa_runtime *rt, const homa_addr *src, const uint8_t *pkt, size_t avail,
                        size_t len, uint64_t now);
/* homa_engine_ops.path_payload. */
uint32_t rt_path_payload(void *ctx, const homa_addr *addr);

#endif
