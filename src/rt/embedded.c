/* The embedded backend: the engine runs in this process, over the sockets
 * of an I/O driver (src/io: UDP, or raw IP).  This file holds its
 * operations (struct homa_rt_backend): creating the runtime and its
 * engine, opening and closing sockets, and the application's calls; the
 * transmit path is tx.c, the receive path and the threads that run it
 * poll.c, the payload per path MTU path.c.  The driven variant (driven.c)
 * shares all of it but the blocking waits.
 *
 * Locking: rt->lock serialises the engine and the runtime's state; it is
 * dropped around system calls (sends, receives, sleeps), see docs/api.md
 * for the threading contract. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <homa/homa.h>

#include "rt/rt.h"

int homa_rt_embedded_create(const homa_runtime_options *opts, int driven, homa_runtime **out)
{
    homa_runtime_options o = *opts;
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
                              ? homa_rt_raw_payload_for_mtu(o.mtu ? o.mtu : homa_rt_host_mtu())
                              : homa_rt_payload_for_mtu(o.mtu ? o.mtu : homa_rt_host_mtu());
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
    rt->be = driven ? &homa_rt_driven : &homa_rt_embedded;
    pthread_mutex_init(&rt->lock, NULL);
    rt_cond_init_mono(&rt->bg_cond);
    rt_cond_init_mono(&rt->state_cond);

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
        if (rt_path_init(rt) != 0) goto fail;
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
    if (pthread_create(&rt->bg, NULL, rt_bg_main, rt) != 0) goto fail;
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

static void e_destroy(homa_runtime *rt)
{
    pthread_mutex_lock(&rt->lock);
    rt->stop = 1;
    pthread_cond_signal(&rt->bg_cond);
    rt_wake_poller(rt);
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

static void e_counters(homa_runtime *rt, homa_counters *engine, homa_driver_counters *driver)
{
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

static int e_set_faults(homa_runtime *rt, const homa_faults *f)
{
    if (rt->io->set_faults == NULL) return HOMA_ERR_STATE;
    pthread_mutex_lock(&rt->lock);
    rt->faults = *f;
    /* Once faults were on, packets may still be held back: keep looking
     * for them (driver_deadline, tx_flush_held) even if the new spec has
     * none. */
    if (!homa_faults_none(f)) rt->io_opts.faults = &rt->faults;
    uint64_t now = homa_rt_now();
    for (homa_socket *s = rt->socks; s != NULL; s = s->next)
        rt->io->set_faults(s->io, f, now);
    /* Held packets and blackouts change the driver's deadlines. */
    rt->bg_armed = 0;
    pthread_cond_signal(&rt->bg_cond);
    if (rt->poller_sleeping) rt_wake_poller(rt);
    pthread_mutex_unlock(&rt->lock);
    return 0;
}

static void e_cutoffs(homa_runtime *rt, homa_cutoffs *out)
{
    pthread_mutex_lock(&rt->lock);
    homa_engine_cutoffs(rt->eng, out);
    pthread_mutex_unlock(&rt->lock);
}

static int e_open(homa_socket *s, const homa_endpoint *local)
{
    homa_runtime *rt = s->rt;
    pthread_mutex_lock(&rt->lock);
    homa_io_opts io_opts = rt->io_opts;
    io_opts.fault_salt = rt->sockets_opened++;
    /* A copy: homa_runtime_set_faults() may change rt->faults meanwhile. */
    homa_faults faults = rt->faults;
    if (io_opts.faults != NULL) io_opts.faults = &faults;
    pthread_mutex_unlock(&rt->lock);
    int rc = rt->io->open(local, &io_opts, &s->io);
    if (rc != 0) return rc;
    rt->io->local(s->io, &s->local);
    s->port = s->local.port;
    pthread_mutex_lock(&rt->lock);
    rc = rt->stop ? HOMA_ERR_SHUTDOWN : homa_engine_port_open(rt->eng, s->port);
    if (rc == 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
        if (epoll_ctl(rt->epfd, EPOLL_CTL_ADD, rt->io->fd(s->io), &ev) != 0) {
            homa_engine_port_close(rt->eng, homa_rt_now(), s->port);
            rc = HOMA_ERR_IO;
        }
    }
    if (rc != 0) {
        pthread_mutex_unlock(&rt->lock);
        rt->io->close(s->io);
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
    return 0;
}

static void e_close(homa_socket *s)
{
    homa_runtime *rt = s->rt;
    pthread_mutex_lock(&rt->lock);
    /* The acks the port owes go out while its socket can still send them
     * (best effort: a transmission in progress elsewhere may pull them
     * after the port is gone, and then the servers time out as before). */
    if (homa_engine_port_flush_acks(rt->eng, homa_rt_now(), s->port) > 0) rt_tx_if_wanted(rt);
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
    homa_engine_port_close(rt->eng, homa_rt_now(), s->port);
    rt_tx_if_wanted(rt);
    for (struct waiter *w = rt->waiters; w != NULL; w = w->next)
        if (w->sock == s && w->sleeping) rt_wake_waiter(w);
    /* Wait until nobody can still be using the driver socket: no thread in
     * homa_recv on it, no transmission in flight, and the token holder has
     * either picked up the new socket list or is asleep in epoll. */
    rt->state_waiters++;
    while (s->users > 0 || rt->tx_busy ||
           (rt->poller != POLLER_NONE && rt->poller_gen != rt->socks_gen && !rt->poller_sleeping)) {
        if (s->users > 0 && rt->poller != POLLER_NONE && rt->poller_sleeping)
            rt_wake_poller(rt); /* the token holder may be a user of s */
        rt_cond_wait_until(&rt->state_cond, &rt->lock, homa_rt_now() + 10000000);
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
    homa_reqtab_destroy(&s->reqs);
}

static int e_linger(homa_socket *s, int64_t timeout_ns)
{
    homa_runtime *rt = s->rt;
    uint64_t deadline =
        timeout_ns == HOMA_FOREVER ? UINT64_MAX : homa_rt_now() + (uint64_t)timeout_ns;
    for (;;) {
        pthread_mutex_lock(&rt->lock);
        int n = s->closing ? HOMA_ERR_SHUTDOWN : homa_engine_port_rpcs(rt->eng, s->port);
        /* The acks the port owes go now, not on a request that may never
         * come (the process is about to exit): its servers free their RPCs
         * now instead of after a timeout, and one that lingers too stops
         * waiting (processes lingering in a ring wait on each other). */
        if (n >= 0 && homa_engine_port_flush_acks(rt->eng, homa_rt_now(), s->port) > 0)
            rt_tx_if_wanted(rt);
        pthread_mutex_unlock(&rt->lock);
        if (n <= 0) return n < 0 ? n : 0;
        uint64_t now = homa_rt_now();
        if (now >= deadline) return HOMA_ERR_AGAIN;
        /* Acks come within a few ticks (NEED_ACK after need_ack_ticks); a
         * short sleep is simpler than a wakeup for this rare call. */
        uint64_t nap = deadline - now < 1000000 ? deadline - now : 1000000;
        struct timespec ts = {0, (long)nap};
        nanosleep(&ts, NULL);
    }
}

static int e_set_class(homa_socket *s, int sched_class)
{
    homa_runtime *rt = s->rt;
    pthread_mutex_lock(&rt->lock);
    int rc =
        s->closing ? HOMA_ERR_SHUTDOWN : homa_engine_port_set_class(rt->eng, s->port, sched_class);
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

static int e_fd(homa_socket *s)
{
    homa_runtime *rt = s->rt;
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

/* prio (a HOMA_SEND_PRIO range, already checked against 0..7): the engine
 * checks it against num_priorities. */
static int e_send(homa_socket *s, const homa_endpoint *dst, const void *buf, void *owned,
                  size_t len, uint64_t cookie, int prio, uint64_t *id)
{
    homa_runtime *rt = s->rt;
    int lo = prio & 0xf, hi = prio >> 4;
    if (prio >= 0 && hi >= (int)homa_engine_config(rt->eng)->num_priorities) return HOMA_ERR_INVAL;
    uint64_t rid = 0;
    pthread_mutex_lock(&rt->lock);
    rt_path_prepare(rt, &dst->addr, homa_rt_now());
    int rc;
    if (s->closing)
        rc = HOMA_ERR_SHUTDOWN;
    else if (owned)
        rc = homa_engine_send_request_owned(rt->eng, homa_rt_now(), s->port, &dst->addr, dst->port,
                                            owned, len, cookie, &rid);
    else
        rc = homa_engine_send_request(rt->eng, homa_rt_now(), s->port, &dst->addr, dst->port, buf,
                                      len, cookie, &rid);
    /* Before tx_app: the first packets obey the range too. */
    if (rc == 0 && prio >= 0) homa_engine_request_priority(rt->eng, s->port, rid, lo, hi);
    if (rc == 0) {
        rt_tx_app(rt);
        rt_check_deadline(rt);
    }
    pthread_mutex_unlock(&rt->lock);
    if (rc == 0 && id != NULL) *id = rid;
    return rc;
}

static int e_reply(homa_socket *s, const homa_addr *peer, uint16_t peer_port, uint64_t id,
                   const void *buf, void *owned, size_t len)
{
    homa_runtime *rt = s->rt;
    pthread_mutex_lock(&rt->lock);
    homa_addr a;
    uint16_t p = 0;
    int n;
    int rc = homa_reqtab_resolve(&s->reqs, id, peer, peer_port, &a, &p, &n);
    if (s->closing) {
        rc = HOMA_ERR_SHUTDOWN;
    } else if (rc == 0) {
        rc = owned ? homa_engine_send_reply_owned(rt->eng, homa_rt_now(), s->port, &a, p, id, owned,
                                                  len)
                   : homa_engine_send_reply(rt->eng, homa_rt_now(), s->port, &a, p, id, buf, len);
        if (n > 0 && homa_reqtab_done(rc)) homa_reqtab_forget(&s->reqs, id, &a, p);
        if (rc == 0) {
            rt_tx_app(rt);
            rt_check_deadline(rt);
        }
    }
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

static void *e_msg_take(homa_socket *s, homa_msg *msg)
{
    homa_runtime *rt = s->rt;
    pthread_mutex_lock(&rt->lock);
    void *buf = s->closing ? NULL : homa_engine_msg_take(rt->eng, msg);
    pthread_mutex_unlock(&rt->lock);
    return buf;
}

static int e_abort(homa_socket *s, uint64_t id)
{
    homa_runtime *rt = s->rt;
    pthread_mutex_lock(&rt->lock);
    int rc;
    if (s->closing) {
        rc = HOMA_ERR_SHUTDOWN;
    } else if (id & 1) {
        /* The engine has no way to drop a server RPC early; forgetting it
         * here means no reply will ever be sent, and the engine frees it
         * when the client times out. */
        rc = homa_reqtab_forget_id(&s->reqs, id) ? 0 : HOMA_ERR_NOT_FOUND;
    } else {
        rc = homa_engine_abort(rt->eng, homa_rt_now(), s->port, id);
        if (rc == 0) rt_tx_app(rt);
    }
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

static void e_release(homa_socket *s, homa_msg *msg)
{
    homa_runtime *rt = s->rt;
    pthread_mutex_lock(&rt->lock);
    if (!s->closing) {
        homa_engine_release(rt->eng, msg);
        rt_tx_if_wanted(rt); /* freeing a message may let grants go to others */
    }
    pthread_mutex_unlock(&rt->lock);
    msg->handle = NULL;
    msg->data = NULL;
}

/* engine_recv plus the failure convention of homa_recv.  Lock held. */
static int try_recv(homa_runtime *rt, homa_socket *s, unsigned flags, uint64_t id, homa_msg *msg)
{
    int rc = homa_engine_recv(rt->eng, s->port, flags, id, msg);
    rt_tx_if_wanted(rt);
    if (rc != 0) return rc;
    if (msg->is_request) homa_reqtab_add(&s->reqs, msg->id, &msg->peer, msg->peer_port);
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

static int e_recv(homa_socket *s, unsigned flags, uint64_t id, int64_t timeout_ns, homa_msg *msg)
{
    homa_runtime *rt = s->rt;
    uint64_t start = homa_rt_now();
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
        rt_poll_pass(rt);
        rt_run_timers(rt, homa_rt_now());
        rt_pass_token(rt);
        rt->last_app_poll = homa_rt_now();
        rc = try_recv(rt, s, flags, id, msg);
    } else if (rc == HOMA_ERR_AGAIN && timeout_ns == 0 && rt->poller == POLLER_BG) {
        /* The background thread holds the token, most likely asleep in
         * epoll: every packet would then wait for that thread to be
         * scheduled before this caller could see it.  Mark the application
         * as polling, so bg_poll hands the token back after its next pass
         * and the caller's next non-blocking call reads the sockets itself. */
        rt->last_app_poll = homa_rt_now();
    }
    if (rc != HOMA_ERR_AGAIN || timeout_ns == 0) {
        if (rc == HOMA_ERR_AGAIN && flags == HOMA_RECV_ANY && id == 0 && s->efd_armed) {
            rt_drain_efd(s->efd);
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
    rt_cond_init_mono(&w.cond);
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
        uint64_t now = homa_rt_now();
        if (now >= deadline) break;
        if (rt->poller == POLLER_NONE) {
            rt->poller = POLLER_APP;
            rt->poller_w = &w;
            rt_app_poll(rt, &w, deadline);
            /* Keep the token while we re-check for our message. */
            continue;
        }
        if (rt->poller_w == &w) {
            rt_app_poll(rt, &w, deadline);
            continue;
        }
        /* Someone else polls: if it is the background thread, ask it to
         * hand the token over; either way sleep until our message is ready
         * or the token comes to us. */
        rt->token_waiters++;
        if (rt->poller == POLLER_BG && rt->poller_sleeping) rt_wake_poller(rt);
        w.sleeping = 1;
        rt_cond_wait_until(&w.cond, &rt->lock, deadline);
        w.sleeping = 0;
        rt->token_waiters--;
    }
    /* We may have been woken to take the token but are leaving instead. */
    if (rt->poller_w != &w) rt_offer_token(rt);

    if (rt->poller_w == &w) {
        rt_pass_token(rt);
        rt->last_app_poll = homa_rt_now();
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
    if (s->closing) rt_notify_state(rt);
    pthread_mutex_unlock(&rt->lock);
    pthread_cond_destroy(&w.cond);
    if (rc != 0 && msg->id == 0) memset(msg, 0, sizeof(*msg));
    return rc;
}

/* ------------------------------------------------------------- backends */

/* Driven (driven.h): nobody else would drive the engine while a call
 * waits, so blocking and timed waits are refused. */
static int d_linger(homa_socket *s, int64_t timeout_ns)
{
    return timeout_ns != 0 ? HOMA_ERR_STATE : e_linger(s, timeout_ns);
}

static int d_recv(homa_socket *s, unsigned flags, uint64_t id, int64_t timeout_ns, homa_msg *msg)
{
    return timeout_ns != 0 ? HOMA_ERR_STATE : e_recv(s, flags, id, timeout_ns, msg);
}

/* The two tables differ only in the calls that may wait. */
#define EMBEDDED_OPS(name_, linger_, recv_)                                                        \
    {                                                                                              \
        .name = name_, .destroy = e_destroy, .counters = e_counters, .cutoffs = e_cutoffs,         \
        .set_faults = e_set_faults, .open = e_open, .close = e_close, .linger = linger_,           \
        .set_class = e_set_class, .fd = e_fd, .send = e_send, .reply = e_reply, .recv = recv_,     \
        .release = e_release, .msg_take = e_msg_take, .abort = e_abort,                            \
    }

const struct homa_rt_backend homa_rt_embedded = EMBEDDED_OPS("embedded", e_linger, e_recv);
const struct homa_rt_backend homa_rt_driven = EMBEDDED_OPS("driven", d_linger, d_recv);
