/* Driven mode (driven.h): the embedded engine without its background
 * thread, driven by one caller thread (homad) that polls the sockets when
 * its own epoll says so and at homa_rt_drive_deadline(). */
#include <pthread.h>
#include <stdint.h>

#include "rt/rt.h"

int homa_rt_create_driven(const homa_runtime_options *opts, homa_rt_ready_fn ready, void *ctx,
                          homa_runtime **out)
{
    homa_runtime_options o;
    if (opts != NULL)
        o = *opts;
    else
        homa_runtime_options_default(&o);
    o.flags |= HOMA_RT_EMBEDDED;
    if (!(o.flags & HOMA_RT_IGNORE_ENV)) {
        int rc = homa_rt_env_options(&o);
        if (rc != 0) return rc;
    }
    int rc = homa_rt_embedded_create(&o, 1, out);
    if (rc == 0) {
        (*out)->ready_fn = ready;
        (*out)->ready_ctx = ctx;
    }
    return rc;
}

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
    int n = rt_poll_pass(rt);
    rt_run_timers(rt, homa_rt_now());
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
            got += rt_poll_socks(rt, ios, k);
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
    if (passes == 0) rt->last_drain = rt->last_read = homa_rt_now();
    if (n == 0 && rt->tx_more && !rt->tx_busy) rt_tx_run(rt, RT_TX_POLL_BUDGET);
    rt_run_timers(rt, homa_rt_now());
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
    uint64_t d =
        rt->tx_more ? 0 : rt_min_u64(homa_engine_next_deadline(rt->eng), rt_driver_deadline(rt));
    pthread_mutex_unlock(&rt->lock);
    return d;
}

void homa_rt_test_stall_read(homa_runtime *rt, uint64_t ns)
{
    pthread_mutex_lock(&rt->lock);
    rt->test_read_stall_ns = ns;
    pthread_mutex_unlock(&rt->lock);
}
