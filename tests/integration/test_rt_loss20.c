/* Heavy loss with a deep window: one client socket keeps 1,000 RPCs
 * outstanding at once to one server socket while every packet has a 20 %
 * chance of being lost.  The faults are set on each runtime for its
 * transmissions only (dir=tx), so each packet crosses exactly one 20 %
 * filter (with dir=both on both runtimes it would cross two: 36 %).
 *
 * Every byte of every request and response is checked, and the server
 * counts deliveries per request id (carried in the payload): every RPC must
 * complete, none may fail, and none may be delivered twice.
 *
 * HOMA_LOSS20_RPCS overrides the RPC count (default 3,000);
 * HOMA_LOSS20_VERBOSE=1 prints every non-zero engine counter of both sides.
 * It prints retransmitted bytes / bytes dropped by fault injection per side
 * (the goal is at most 1.5; on a loaded host packets that wait in a queue
 * rather than being lost push it up, so it is reported, not asserted). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <homa/homa.h>

#include "integration/rt_util.h"

#define WINDOW 1000
#define MAX_LEN 100000u
#define PATTERN_LEN (2u * MAX_LEN)
#define REQ_HDR 12 /* request id (8) + response length (4) */
#define SERVER_THREADS 2

static uint8_t *pattern;
static int total_rpcs = 3000;
static unsigned char *deliveries; /* per request id, written by server threads */
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t req_off(uint64_t tag)
{
    return (uint32_t)(rt_mix(tag) % MAX_LEN);
}

static uint32_t resp_off(uint64_t tag)
{
    return (uint32_t)(rt_mix(tag ^ 0x5151) % MAX_LEN);
}

/* Mostly short messages (one packet) with some multi-packet ones, so both
 * the unscheduled and the granted paths lose packets. */
static uint32_t pick_len(uint64_t *rng, uint32_t min)
{
    *rng = rt_mix(*rng + 1);
    uint32_t r = (uint32_t)(*rng >> 40);
    uint32_t v = (r & 7) == 0 ? (uint32_t)(*rng % MAX_LEN) : (uint32_t)(*rng % 2000);
    return v < min ? min : v;
}

struct server_thread {
    homa_socket *sock;
    int bad;
};

/* Set when the client is done: the server threads leave their loop, and
 * only then is their socket closed (a socket must not be used after
 * homa_socket_close: a thread still between homa_recv and homa_release
 * when it closed crashed the test, about once in 20 runs). */
static int server_stop;

static void *server_main(void *arg)
{
    struct server_thread *st = arg;
    uint8_t *resp = malloc(MAX_LEN);
    while (!__atomic_load_n(&server_stop, __ATOMIC_ACQUIRE)) {
        homa_msg m;
        int rc = homa_recv(st->sock, HOMA_RECV_REQUEST, 0, 20000000, &m);
        if (rc == HOMA_ERR_SHUTDOWN) break;
        if (rc != 0) continue;
        uint64_t tag;
        uint32_t rlen;
        if (m.length < REQ_HDR) {
            st->bad++;
            homa_release(st->sock, &m);
            continue;
        }
        memcpy(&tag, m.data, 8);
        memcpy(&rlen, m.data + 8, 4);
        if (tag >= (uint64_t)total_rpcs || rlen < 8 || rlen > MAX_LEN ||
            memcmp(m.data + REQ_HDR, pattern + req_off(tag), m.length - REQ_HDR) != 0) {
            st->bad++;
            homa_release(st->sock, &m);
            continue;
        }
        pthread_mutex_lock(&count_lock);
        if (deliveries[tag] < 255) deliveries[tag]++;
        pthread_mutex_unlock(&count_lock);
        memcpy(resp, &tag, 8);
        memcpy(resp + 8, pattern + resp_off(tag), rlen - 8);
        homa_reply_msg(st->sock, &m, resp, rlen);
        homa_release(st->sock, &m);
    }
    free(resp);
    return NULL;
}

static void test_loss20__window_1000(void **state)
{
    (void)state;
    const char *n = getenv("HOMA_LOSS20_RPCS");
    if (n != NULL && atoi(n) > 0) total_rpcs = atoi(n);
    pattern = malloc(PATTERN_LEN);
    rt_fill(pattern, PATTERN_LEN, 2020);
    deliveries = calloc((size_t)total_rpcs, 1);

    homa_runtime_options o;
    rt_test_options(&o, 0);
    assert_int_equal(homa_faults_parse("drop=0.2,dir=tx,seed=15", &o.faults, NULL, 0), 0);
    homa_runtime *srt, *crt;
    assert_int_equal(homa_runtime_create(&o, &srt), 0);
    o.faults.seed = 16;
    assert_int_equal(homa_runtime_create(&o, &crt), 0);

    homa_socket *ss, *cs;
    assert_int_equal(homa_socket_open(srt, 0, &ss), 0);
    assert_int_equal(homa_socket_open(crt, 0, &cs), 0);
    homa_endpoint dst;
    assert_int_equal(homa_endpoint_from_host("127.0.0.1", homa_socket_port(ss), &dst), 0);
    struct server_thread st[SERVER_THREADS];
    pthread_t sth[SERVER_THREADS];
    for (int i = 0; i < SERVER_THREADS; i++) {
        st[i] = (struct server_thread){.sock = ss};
        pthread_create(&sth[i], NULL, server_main, &st[i]);
    }

    uint32_t *resp_len = calloc((size_t)total_rpcs, sizeof(uint32_t));
    uint8_t *req = malloc(MAX_LEN);
    uint64_t rng = 77;
    int sent = 0, outstanding = 0, completed = 0, errors = 0, bad = 0, max_out = 0;
    int first_error = 0;
    uint64_t t0 = rt_now_ns();
    while (completed + errors < total_rpcs) {
        while (outstanding < WINDOW && sent < total_rpcs) {
            uint64_t tag = (uint64_t)sent;
            uint32_t qlen = pick_len(&rng, REQ_HDR);
            uint32_t rlen = pick_len(&rng, 8);
            memcpy(req, &tag, 8);
            memcpy(req + 8, &rlen, 4);
            memcpy(req + REQ_HDR, pattern + req_off(tag), qlen - REQ_HDR);
            resp_len[sent] = rlen;
            int rc = homa_send(cs, &dst, req, qlen, tag, NULL);
            sent++;
            if (rc != 0) {
                errors++;
                if (!first_error) first_error = rc;
                continue;
            }
            outstanding++;
        }
        if (outstanding > max_out) max_out = outstanding;
        homa_msg m;
        int rc = homa_recv(cs, HOMA_RECV_RESPONSE, 0, 60ll * 1000000000, &m);
        if (rc == HOMA_ERR_AGAIN) {
            errors += outstanding; /* a hang: give up */
            first_error = rc;
            break;
        }
        if (m.id == 0) continue;
        if (rc != 0) {
            errors++;
            if (!first_error) first_error = rc;
        } else {
            uint64_t tag;
            memcpy(&tag, m.data, 8);
            if (tag != m.cookie || tag >= (uint64_t)total_rpcs || m.length != resp_len[tag] ||
                memcmp(m.data + 8, pattern + resp_off(tag), m.length - 8) != 0)
                bad++;
            completed++;
            homa_release(cs, &m);
        }
        outstanding--;
    }
    double secs = (double)(rt_now_ns() - t0) / 1e9;

    homa_counters cc, sc;
    homa_driver_counters cd, sd;
    homa_runtime_counters(crt, &cc, &cd);
    homa_runtime_counters(srt, &sc, &sd);
    __atomic_store_n(&server_stop, 1, __ATOMIC_RELEASE);
    int sbad = 0;
    for (int i = 0; i < SERVER_THREADS; i++) {
        pthread_join(sth[i], NULL);
        sbad += st[i].bad;
    }
    homa_socket_close(ss);
    int dups = 0, missing = 0;
    for (int i = 0; i < total_rpcs; i++) {
        if (deliveries[i] > 1) dups += deliveries[i] - 1;
        if (deliveries[i] == 0) missing++;
    }
    fprintf(stderr,
            "loss20: %d/%d RPCs in %.2f s, max %d outstanding, %d failed (first %s), %d bad, "
            "%d duplicate deliveries, %d never delivered; drops client %lu server %lu of %lu "
            "pkts; retransmit bytes client %lu server %lu; restarts %lu timeouts %lu\n",
            completed, total_rpcs, secs, max_out, errors,
            first_error ? homa_strerror(first_error) : "-", bad + sbad, dups, missing,
            (unsigned long)cd.fault_drops, (unsigned long)sd.fault_drops,
            (unsigned long)(cd.datagrams_out + sd.datagrams_out),
            (unsigned long)cc.retransmit_bytes, (unsigned long)sc.retransmit_bytes,
            (unsigned long)cc.client_restarts, (unsigned long)cc.client_timeouts);
    fprintf(stderr,
            "loss20: dropped data bytes client %lu server %lu (receive-buffer drops %lu %lu); "
            "retransmitted/dropped client %.2f server %.2f; resends out client %lu (asking %lu "
            "B) server %lu (asking %lu B); answered client %lu server %lu, stale client %lu "
            "server %lu; duplicate bytes in client %lu server %lu\n",
            (unsigned long)cd.fault_drop_bytes, (unsigned long)sd.fault_drop_bytes,
            (unsigned long)cd.rx_overflows, (unsigned long)sd.rx_overflows,
            (double)cc.retransmit_bytes / (double)(cd.fault_drop_bytes ? cd.fault_drop_bytes : 1),
            (double)sc.retransmit_bytes / (double)(sd.fault_drop_bytes ? sd.fault_drop_bytes : 1),
            (unsigned long)cc.resend_out, (unsigned long)cc.resend_bytes_asked,
            (unsigned long)sc.resend_out, (unsigned long)sc.resend_bytes_asked,
            (unsigned long)cc.resend_answered, (unsigned long)sc.resend_answered,
            (unsigned long)cc.resend_stale, (unsigned long)sc.resend_stale,
            (unsigned long)cc.dup_bytes_in, (unsigned long)sc.dup_bytes_in);
    if (getenv("HOMA_LOSS20_VERBOSE") != NULL) {
        const uint64_t *cv = (const uint64_t *)&cc, *sv = (const uint64_t *)&sc;
        for (size_t i = 0; i < homa_counter_count(); i++)
            if (cv[i] || sv[i])
                fprintf(stderr, "  %-22s client %12lu server %12lu\n", homa_counter_name(i),
                        (unsigned long)cv[i], (unsigned long)sv[i]);
    }
    homa_socket_close(cs);
    homa_runtime_destroy(crt);
    homa_runtime_destroy(srt);
    free(req);
    free(resp_len);
    free(deliveries);
    free(pattern);

    assert_int_equal(errors, 0);
    assert_int_equal(bad, 0);
    assert_int_equal(sbad, 0);
    assert_int_equal(dups, 0);
    assert_int_equal(missing, 0);
    assert_int_equal(completed, total_rpcs);
    assert_true(max_out >= (total_rpcs < WINDOW ? total_rpcs : WINDOW));
    assert_true(cd.fault_drops > 0 && sd.fault_drops > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss20__window_1000),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
