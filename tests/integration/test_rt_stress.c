/* Stress: 10,000 RPCs of random sizes up to 1 MB (log-uniform, both ways)
 * from 4 client threads to 2 server sockets, one reached over IPv4 and one
 * over IPv6, with HOMA_FAULTS dropping 5 % of packets on every send and
 * every receive.  Every RPC must complete and every byte is checked.
 *
 * Payloads are ranges of one random pattern buffer, so producing and
 * checking them is memcpy/memcmp: cheap even under the sanitizers.
 *
 * HOMA_STRESS_RPCS overrides the RPC count (for quick local runs). */
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

#define CLIENTS 4
#define SERVERS 2
#define THREADS_PER_SERVER 2
#define WINDOW 4 /* outstanding RPCs per client thread */
#define MAX_LEN 1000000u
#define PATTERN_LEN (2u * MAX_LEN)
#define REQ_HDR 12 /* tag (8) + response length (4) */

static uint8_t *pattern;
static homa_endpoint server_ep[SERVERS];
static int total_rpcs = 10000;

static uint32_t req_off(uint64_t tag)
{
    return (uint32_t)(rt_mix(tag) % MAX_LEN);
}

static uint32_t resp_off(uint64_t tag)
{
    return (uint32_t)(rt_mix(tag ^ 0xabcdef) % MAX_LEN);
}

/* Log-uniform length in [min, MAX_LEN]. */
static uint32_t pick_len(uint64_t *rng, uint32_t min)
{
    *rng = rt_mix(*rng + 1);
    double u = (double)(*rng >> 11) * 0x1.0p-53;
    double l = (double)min * __builtin_exp(u * __builtin_log((double)MAX_LEN / min));
    uint32_t v = (uint32_t)l;
    return v < min ? min : v > MAX_LEN ? MAX_LEN : v;
}

struct server_thread {
    homa_socket *sock;
    int bad;
    int served;
};

static void *server_main(void *arg)
{
    struct server_thread *st = arg;
    uint8_t *resp = malloc(MAX_LEN);
    for (;;) {
        homa_msg m;
        int rc = homa_recv(st->sock, HOMA_RECV_REQUEST, 0, HOMA_FOREVER, &m);
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
        if (rlen < 8 || rlen > MAX_LEN ||
            memcmp(m.data + REQ_HDR, pattern + req_off(tag), m.length - REQ_HDR) != 0) {
            st->bad++;
            homa_release(st->sock, &m);
            continue;
        }
        memcpy(resp, &tag, 8);
        memcpy(resp + 8, pattern + resp_off(tag), rlen - 8);
        rc = homa_reply_msg(st->sock, &m, resp, rlen);
        homa_release(st->sock, &m);
        if (rc == 0) st->served++;
    }
    free(resp);
    return NULL;
}

struct slot {
    int used;
    uint64_t tag;
    uint32_t resp_len;
};

struct client_thread {
    homa_runtime *rt;
    int index;
    int quota;
    int completed;
    int bad;
    int errors;
    int first_error;
};

static void *client_main(void *arg)
{
    struct client_thread *ct = arg;
    homa_socket *s;
    if (homa_socket_open(ct->rt, 0, &s) != 0) {
        ct->errors = ct->quota;
        return NULL;
    }
    uint8_t *req = malloc(MAX_LEN);
    struct slot slots[WINDOW];
    memset(slots, 0, sizeof(slots));
    uint64_t rng = 1000 + (uint64_t)ct->index;
    int sent = 0, outstanding = 0;
    while (ct->completed + ct->errors < ct->quota) {
        while (outstanding < WINDOW && sent < ct->quota) {
            int k = 0;
            while (slots[k].used)
                k++;
            uint64_t tag = ((uint64_t)ct->index << 32) | (uint64_t)sent;
            uint32_t qlen = pick_len(&rng, REQ_HDR);
            uint32_t rlen = pick_len(&rng, 8);
            memcpy(req, &tag, 8);
            memcpy(req + 8, &rlen, 4);
            memcpy(req + REQ_HDR, pattern + req_off(tag), qlen - REQ_HDR);
            const homa_endpoint *dst = &server_ep[sent % SERVERS];
            int rc = homa_send(s, dst, req, qlen, (uint64_t)k, NULL);
            sent++;
            if (rc != 0) {
                ct->errors++;
                if (!ct->first_error) ct->first_error = rc;
                continue;
            }
            slots[k].used = 1;
            slots[k].tag = tag;
            slots[k].resp_len = rlen;
            outstanding++;
        }
        homa_msg m;
        int rc = homa_recv(s, HOMA_RECV_RESPONSE, 0, 60ll * 1000000000, &m);
        if (rc == HOMA_ERR_AGAIN) {
            ct->errors += outstanding; /* a hang: give up */
            ct->first_error = rc;
            break;
        }
        if (m.id == 0) continue;
        struct slot *sl = &slots[m.cookie % WINDOW];
        if (rc != 0) {
            ct->errors++;
            if (!ct->first_error) ct->first_error = rc;
        } else {
            uint64_t tag;
            memcpy(&tag, m.data, 8);
            if (m.length != sl->resp_len || tag != sl->tag ||
                memcmp(m.data + 8, pattern + resp_off(tag), m.length - 8) != 0)
                ct->bad++;
            ct->completed++;
            homa_release(s, &m);
        }
        sl->used = 0;
        outstanding--;
    }
    free(req);
    homa_socket_close(s);
    return NULL;
}

static void test_stress(void **state)
{
    (void)state;
    const char *n = getenv("HOMA_STRESS_RPCS");
    if (n != NULL && atoi(n) > 0) total_rpcs = atoi(n);
    pattern = malloc(PATTERN_LEN);
    rt_fill(pattern, PATTERN_LEN, 99);

    /* Faults come from the environment, as a user would inject them. */
    setenv("HOMA_FAULTS", "drop=0.05,seed=20240607", 1);
    homa_runtime_options o;
    rt_test_options(&o, 1);
    /* rt_test_options stretches the protocol clock under sanitizers (or
     * timer-driven retransmissions feed on themselves on an oversubscribed
     * CPU) and allows 1 s of silence: this test is about loss recovery,
     * test_rt_kill is about timeouts. */
    homa_runtime *srt, *crt;
    assert_int_equal(homa_runtime_create(&o, &srt), 0);
    assert_int_equal(homa_runtime_create(&o, &crt), 0);
    unsetenv("HOMA_FAULTS");

    homa_socket *ss[SERVERS];
    struct server_thread st[SERVERS][THREADS_PER_SERVER];
    pthread_t sth[SERVERS][THREADS_PER_SERVER];
    for (int i = 0; i < SERVERS; i++) {
        assert_int_equal(homa_socket_open(srt, 0, &ss[i]), 0);
        assert_int_equal(homa_endpoint_from_host(i == 0 ? "127.0.0.1" : "::1",
                                                 homa_socket_port(ss[i]), &server_ep[i]),
                         0);
        for (int j = 0; j < THREADS_PER_SERVER; j++) {
            st[i][j] = (struct server_thread){.sock = ss[i]};
            pthread_create(&sth[i][j], NULL, server_main, &st[i][j]);
        }
    }

    uint64_t t0 = rt_now_ns();
    struct client_thread ct[CLIENTS];
    pthread_t cth[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        ct[i] = (struct client_thread){
            .rt = crt, .index = i, .quota = total_rpcs / CLIENTS + (i < total_rpcs % CLIENTS)};
        pthread_create(&cth[i], NULL, client_main, &ct[i]);
    }
    int completed = 0, bad = 0, errors = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(cth[i], NULL);
        completed += ct[i].completed;
        bad += ct[i].bad;
        errors += ct[i].errors;
        if (ct[i].first_error)
            fprintf(stderr, "client %d: first error %s\n", i, homa_strerror(ct[i].first_error));
    }
    double secs = (double)(rt_now_ns() - t0) / 1e9;

    homa_counters cc, sc;
    homa_driver_counters cd, sd;
    homa_runtime_counters(crt, &cc, &cd);
    homa_runtime_counters(srt, &sc, &sd);
    fprintf(stderr,
            "stress: %d RPCs in %.2f s; client: %lu pkts out, %lu fault drops, %lu resends "
            "out, %lu retransmits, %lu restarts, %lu timeouts; server: %lu fault drops, %lu "
            "resends out, %lu retransmits\n",
            completed, secs, (unsigned long)cd.datagrams_out, (unsigned long)cd.fault_drops,
            (unsigned long)cc.resend_out, (unsigned long)cc.retransmit_pkts,
            (unsigned long)cc.client_restarts, (unsigned long)cc.client_timeouts,
            (unsigned long)sd.fault_drops, (unsigned long)sc.resend_out,
            (unsigned long)sc.retransmit_pkts);

    for (int i = 0; i < SERVERS; i++)
        homa_socket_close(ss[i]);
    int sbad = 0;
    for (int i = 0; i < SERVERS; i++)
        for (int j = 0; j < THREADS_PER_SERVER; j++) {
            pthread_join(sth[i][j], NULL);
            sbad += st[i][j].bad;
        }
    homa_runtime_destroy(crt);
    homa_runtime_destroy(srt);
    free(pattern);

    assert_int_equal(errors, 0);
    assert_int_equal(bad, 0);
    assert_int_equal(sbad, 0);
    assert_int_equal(completed, total_rpcs);
    /* The faults really happened and were recovered from. */
    assert_true(cd.fault_drops > 0 && sd.fault_drops > 0);
    assert_true(cc.resend_out + sc.resend_out > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
