/* Blackouts on real sockets (loopback): for a while every packet to and from
 * the client is lost (fault injection on the client runtime, both
 * directions), then the path comes back.
 *
 *   - shorter than the timeout: nothing fails; the RPCs caught in it finish
 *     once the path is back;
 *   - longer than the timeout: the RPCs caught in it, and those started
 *     during it, fail with HOMA_ERR_TIMEOUT within the timeout plus one
 *     tick of the moment the server was last heard (the blackout's start,
 *     or the RPC's own start if later), plus what the engine forgave as
 *     local stalls (its timer running late: counter stalled_ns) and the
 *     wake-up slack of a loaded host; RPCs started after it succeed again.
 *
 * A closed loop keeps WINDOW small RPCs in flight all the time.  Protocol
 * time (ticks, timeout, blackout) is stretched under sanitizers. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <homa/homa.h>

#include "integration/rt_util.h"

#define WINDOW 8
#define MAX_RPCS 200000
#define MS (1000000ull * SANITIZER_SLOWDOWN) /* one protocol millisecond */
#define TICK MS
#define TIMEOUT_TICKS 200
#define TIMEOUT (TIMEOUT_TICKS * TICK)
#define BLACKOUT_START (300 * MS) /* after the client socket opened */
/* Wake-up latency of a loaded host between the engine failing an RPC and
 * homa_recv returning it (not protocol time). */
#define SLACK (50ull * 1000000 * SANITIZER_SLOWDOWN)

struct rpc_rec {
    uint64_t id, sent, done;
    int rc;
};

struct result {
    int ok, failed, other_errors, ok_after;
    uint64_t worst_late;            /* latest failure beyond its bound (0 = none) */
    uint64_t worst_early;           /* earliest failure before timeout - 2 ticks */
    int64_t min_excess, max_excess; /* failure time - last heard - timeout */
    uint64_t opened, blackout_end;
    homa_driver_counters drv;
    uint64_t stalled; /* timer lateness the client engine forgave (local stalls) */
};

/* Runs the closed loop from the client socket's opening until `run_ns`
 * later with a blackout of `blackout_ns` from BLACKOUT_START. */
static void run(uint64_t blackout_ns, uint64_t run_ns, struct result *res)
{
    memset(res, 0, sizeof(*res));
    homa_runtime_options so, co;
    rt_test_options(&so, 0);
    so.config.timeout_ticks = TIMEOUT_TICKS;
    co = so;
    char spec[160];
    snprintf(spec, sizeof(spec), "blackout_start_ms=%llu,blackout_ms=%llu,dir=both",
             (unsigned long long)(BLACKOUT_START / 1000000),
             (unsigned long long)(blackout_ns / 1000000));
    assert_int_equal(homa_faults_parse(spec, &co.faults, NULL, 0), 0);
    homa_runtime *srt, *crt;
    assert_int_equal(homa_runtime_create(&so, &srt), 0);
    assert_int_equal(homa_runtime_create(&co, &crt), 0);
    homa_socket *ss, *cs;
    assert_int_equal(homa_socket_open(srt, 0, &ss), 0);
    pthread_t th;
    /* The server thread stops before its socket closes (a socket must
     * not be used after homa_socket_close). */
    struct rt_echo echo = {.s = ss, .poll_ns = 20 * (int64_t)MS};
    pthread_create(&th, NULL, rt_echo_main, &echo);
    res->opened = rt_now_ns();
    assert_int_equal(homa_socket_open(crt, 0, &cs), 0);
    homa_endpoint dst;
    assert_int_equal(homa_endpoint_from_host("127.0.0.1", homa_socket_port(ss), &dst), 0);

    uint64_t bo_start = res->opened + BLACKOUT_START;
    res->blackout_end = bo_start + blackout_ns;
    uint64_t end = res->opened + run_ns;
    static struct rpc_rec recs[MAX_RPCS];
    int n = 0, outstanding = 0;
    uint8_t req[64];
    memset(req, 7, sizeof(req));
    for (;;) {
        uint64_t now = rt_now_ns();
        while (outstanding < WINDOW && now < end && n < MAX_RPCS) {
            recs[n].sent = rt_now_ns();
            assert_int_equal(homa_send(cs, &dst, req, sizeof(req), (uint64_t)n, &recs[n].id), 0);
            n++;
            outstanding++;
        }
        if (outstanding == 0) break;
        homa_msg m;
        int rc = homa_recv(cs, HOMA_RECV_RESPONSE, 0, 10000 * (int64_t)MS, &m);
        assert_true(rc != HOMA_ERR_AGAIN); /* no hang */
        uint64_t t = rt_now_ns();
        struct rpc_rec *r = &recs[m.cookie];
        r->done = t;
        r->rc = rc;
        outstanding--;
        if (rc == 0) {
            res->ok++;
            if (r->sent > res->blackout_end) res->ok_after++;
            homa_release(cs, &m);
            continue;
        }
        if (rc != HOMA_ERR_TIMEOUT) {
            res->other_errors++;
            continue;
        }
        res->failed++;
        /* The server was last heard at the blackout's start at the latest
         * (or never, for an RPC started during it). */
        uint64_t heard = r->sent > bo_start ? r->sent : bo_start;
        int64_t excess = (int64_t)(t - heard) - (int64_t)TIMEOUT;
        if (res->failed == 1 || excess > res->max_excess) res->max_excess = excess;
        if (res->failed == 1 || excess < res->min_excess) res->min_excess = excess;
        uint64_t bound = heard + TIMEOUT + TICK + SLACK;
        if (t > bound && t - bound > res->worst_late) res->worst_late = t - bound;
        uint64_t earliest = heard + TIMEOUT - 2 * TICK;
        if (t < earliest && earliest - t > res->worst_early) res->worst_early = earliest - t;
    }
    homa_counters ec;
    homa_runtime_counters(crt, &ec, &res->drv);
    res->stalled = ec.stalled_ns;
    __atomic_store_n(&echo.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    homa_socket_close(ss);
    homa_socket_close(cs);
    homa_runtime_destroy(crt);
    homa_runtime_destroy(srt);
}

static void test_blackout__shorter_than_timeout_fails_nothing(void **state)
{
    (void)state;
    struct result r;
    run(TIMEOUT / 2, BLACKOUT_START + TIMEOUT / 2 + 300 * MS, &r);
    fprintf(stderr,
            "blackout %llu ms (timeout %llu ms): %d ok (%d started after it), %d failed, "
            "%llu packets blacked out\n",
            (unsigned long long)(TIMEOUT / 2 / 1000000), (unsigned long long)(TIMEOUT / 1000000),
            r.ok, r.ok_after, r.failed, (unsigned long long)r.drv.fault_drops);
    assert_true(r.drv.fault_drops > 0);
    assert_int_equal(r.failed, 0);
    assert_int_equal(r.other_errors, 0);
    assert_true(r.ok_after > 0);
}

static void test_blackout__longer_than_timeout_fails_within_timeout_and_a_tick(void **state)
{
    (void)state;
    struct result r;
    uint64_t len = 3 * TIMEOUT;
    run(len, BLACKOUT_START + len + 300 * MS, &r);
    fprintf(stderr,
            "blackout %llu ms (timeout %llu ms): %d ok (%d started after it), %d failed with "
            "HOMA_ERR_TIMEOUT %.2f..%.2f ms after timeout (bound: 1 tick + %.2f ms of local "
            "stalls forgiven + %llu ms wake-up slack)\n",
            (unsigned long long)(len / 1000000), (unsigned long long)(TIMEOUT / 1000000), r.ok,
            r.ok_after, r.failed, (double)r.min_excess / 1e6, (double)r.max_excess / 1e6,
            (double)r.stalled / 1e6, (unsigned long long)(SLACK / 1000000));
    assert_true(r.drv.fault_drops > 0);
    assert_int_equal(r.other_errors, 0);
    assert_true(r.failed >= WINDOW); /* at least those caught at its start */
    /* The engine stretches a timeout by the time its own timer ran late
     * (this host stalled, not the peer): that much more is allowed. */
    assert_true(r.max_excess <= (int64_t)(TICK + SLACK + r.stalled));
    assert_true(r.worst_early == 0);
    assert_true(r.ok_after > 0); /* the path works again */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blackout__shorter_than_timeout_fails_nothing),
        cmocka_unit_test(test_blackout__longer_than_timeout_fails_within_timeout_and_a_tick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
