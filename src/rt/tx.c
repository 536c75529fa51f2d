/* The transmit path of the embedded runtime.  A thread that sends
 * (homa_send, homa_reply) pulls packets from the engine and transmits them
 * itself; only one thread at a time transmits (tx_busy): others that
 * produce packets leave them in the engine, and the transmitting thread
 * pulls until it is empty.  A packet to one of our own sockets over
 * loopback goes straight back into the engine when driven (homad). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rt/rt.h"

/* Payload bytes one transmission by an application call may send before it
 * returns (TX_APP_BUDGET): a thread inside homa_send/homa_reply (or
 * release, recv) stops there and leaves the rest to the poll token holder
 * or the background thread, so sending a huge message does not hold the
 * application for the whole message; a poller transmits RT_TX_POLL_BUDGET
 * per pass so that it keeps reading packets in between. */
#define TX_APP_BUDGET (256u << 10)

uint64_t rt_driver_deadline(homa_runtime *rt)
{
    uint64_t d = UINT64_MAX;
    if (rt->io_opts.faults == NULL) return d; /* only fault injection holds packets back */
    for (homa_socket *s = rt->socks; s != NULL; s = s->next)
        d = rt_min_u64(d, rt->io->next_deadline(s->io));
    return d;
}

/* Sends packets that fault injection delayed and whose time has come.
 * Called from tx_run (tx_busy set, lock held; dropped around the sends). */
static void tx_flush_held(homa_runtime *rt)
{
    uint64_t now = homa_rt_now();
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
        if (rt->poller_sleeping) rt_wake_poller(rt);
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
void rt_tx_run(homa_runtime *rt, uint64_t budget)
{
    if (rt->tx_busy) return;
    rt->tx_busy = 1;
    uint64_t sent = 0;
    /* Packets are as large as their path allows: the runtime's max_payload
     * (the host's largest MTU: loopback's 64 KB) is the size of few of them
     * on a real link.  So the budget counts in the size of the packets the
     * last pull returned, and a pull of 1,500-byte packets fills whole GSO
     * batches instead of stopping at budget / 64 KB packets. */
    if (rt->tx_pkt_bytes == 0) rt->tx_pkt_bytes = rt->cfg.max_payload ? rt->cfg.max_payload : 1;
    for (;;) {
        if (sent >= budget) {
            rt->tx_more = 1;
            break;
        }
        rt->tx_wanted = 0;
        uint64_t now = homa_rt_now();
        /* Whole packets up to the budget (at least one). */
        uint64_t fit = (budget - sent + rt->tx_pkt_bytes - 1) / rt->tx_pkt_bytes;
        int max = fit < RT_TX_PULL ? (int)fit : RT_TX_PULL;
        int n = homa_engine_pull(rt->eng, now, rt->tx_pkts, max);
        if (n <= 0) {
            rt->tx_more = 0;
            break;
        }
        /* Resolve each run of packets to its socket while locked: the
         * socket can't go away until tx_busy is cleared. */
        homa_io_sock *ios[RT_TX_PULL];
        uint8_t local[RT_TX_PULL];
        int nlocal = 0;
        uint64_t pulled = 0;
        for (int i = 0; i < n; i++) {
            homa_socket *s = rt->port_map[rt->tx_pkts[i].sport];
            ios[i] = s ? s->io : NULL;
            local[i] = ios[i] != NULL && tx_local_dst(rt, &rt->tx_pkts[i]) != NULL;
            if (local[i]) {
                ios[i] = NULL; /* not sent */
                nlocal++;
            }
            pulled += rt->tx_pkts[i].payload_len + rt->tx_pkts[i].hdr_len;
        }
        sent += pulled;
        rt->tx_pkt_bytes = (uint32_t)(pulled / (uint64_t)n) + 1;
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
    rt_notify_state(rt);
}

/* Transmission by an application call (send, reply, abort, release,
 * recv): bounded, the rest handed off.  Lock held. */
void rt_tx_app(homa_runtime *rt)
{
    rt_tx_run(rt, TX_APP_BUDGET);
    if (rt->tx_more) tx_handoff(rt);
}

/* Transmits if the engine asked for it.  Lock held. */
void rt_tx_if_wanted(homa_runtime *rt)
{
    if (rt->tx_wanted) {
        rt_tx_app(rt);
        rt_check_deadline(rt);
    }
}
