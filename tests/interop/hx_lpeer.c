/* hx_lpeer: libhoma's side of the kernel interop tests (docs/interop.md).
 * The counterpart of scripts/interop/khoma_peer.c, with the same payload
 * rule: byte i of a message of length L is hx_pattern(L, i).
 *
 *   hx_lpeer server [--port P] [--seconds S] [--zero-reply N]
 *   hx_lpeer client --server A:P --lens L1,L2,... [--count N] [--inflight K]
 *                   [--seconds S] [--timeout-ms T] [--expect-error]
 *   common: [--port P] [--mtu M] [--udp] [--counters] [--timeout-ticks N]
 *
 * --timeout-ticks sets the engine's timeout_ticks (1 ms ticks; default here
 * 1000, libhoma's own default is 100): a kernel in an emulated VM can stall
 * for more than 100 ms, which is not what these tests are about.
 * --expect-error: the client passes when every RPC failed (or got no
 * response within --timeout-ms) and none succeeded.
 *
 * The raw IP driver is used unless --udp.  At the end it prints
 * "hx_lpeer: ok ..." or "hx_lpeer: FAIL ...", and with --counters every
 * non-zero engine and driver counter as "hx_lpeer: counter NAME VALUE".
 * The server stops after --seconds (default 60) or on SIGTERM/SIGINT. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <homa/engine.h>
#include <homa/errors.h>
#include <homa/homa.h>

#define MAX_LENS 64
#define MAX_INFLIGHT 64
#define MAX_LEN 1000000u

static uint8_t hx_pattern(uint32_t len, uint32_t i)
{
    uint32_t v = (i / 4) * 2654435761u ^ (len * 40503u + 0x9e37u);
    return (uint8_t)(v >> (8 * (i % 4)));
}

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long verify(const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != hx_pattern((uint32_t)len, (uint32_t)i)) return (long)i;
    return -1;
}

static void print_counters(homa_runtime *rt)
{
    homa_counters c;
    homa_driver_counters d;
    homa_runtime_counters(rt, &c, &d);
    const uint64_t *cv = (const uint64_t *)&c;
    for (size_t i = 0; homa_counter_name(i); i++)
        if (cv[i])
            printf("hx_lpeer: counter %s %llu\n", homa_counter_name(i), (unsigned long long)cv[i]);
    const uint64_t *dv = (const uint64_t *)&d;
    for (size_t i = 0; i < homa_driver_counter_count(); i++)
        if (dv[i])
            printf("hx_lpeer: counter driver.%s %llu\n", homa_driver_counter_name(i),
                   (unsigned long long)dv[i]);
    homa_cutoffs k;
    homa_runtime_cutoffs(rt, &k);
    printf("hx_lpeer: cutoffs version %u:", k.version);
    for (int i = 7; i >= 0; i--)
        printf(" %u", k.unsched[i]);
    printf("\n");
}

struct opts {
    int server;
    uint16_t port;
    const char *target;
    uint32_t lens[MAX_LENS];
    int nlens;
    long count;
    int inflight;
    double seconds;
    long timeout_ms;
    uint32_t mtu;
    int udp;
    int counters;
    int expect_error;
    long zero_reply;
    long timeout_ticks;
};

static int run_server(homa_socket *s, const struct opts *o, uint8_t *buf)
{
    unsigned long n = 0, bad = 0, errs = 0;
    double t0 = now_s();
    double limit = o->seconds > 0 ? o->seconds : 60;
    printf("hx_lpeer: server on port %u\n", homa_socket_port(s));
    fflush(stdout);
    while (!stop && now_s() - t0 < limit) {
        homa_msg m;
        int r = homa_recv(s, HOMA_RECV_REQUEST, 0, 200 * 1000 * 1000LL, &m);
        if (r == HOMA_ERR_AGAIN) continue;
        if (r != 0) {
            printf("hx_lpeer: recv: %s\n", homa_strerror(r));
            errs++;
            continue;
        }
        n++;
        long at = verify(m.data, m.length);
        if (at >= 0) {
            bad++;
            printf("hx_lpeer: request id %llu len %zu bad at %ld\n", (unsigned long long)m.id,
                   m.length, at);
        }
        size_t rlen = m.length;
        if (rlen == 0 && o->zero_reply >= 0) rlen = (size_t)o->zero_reply;
        for (size_t i = 0; i < rlen; i++)
            buf[i] = hx_pattern((uint32_t)rlen, (uint32_t)i);
        r = homa_reply_msg(s, &m, buf, rlen);
        homa_release(s, &m);
        if (r != 0) {
            printf("hx_lpeer: reply: %s\n", homa_strerror(r));
            errs++;
        }
        fflush(stdout);
    }
    printf("hx_lpeer: %s server requests=%lu bad=%lu errors=%lu\n", bad || errs ? "FAIL" : "ok", n,
           bad, errs);
    return bad || errs ? 1 : 0;
}

static int run_client(homa_socket *s, const struct opts *o, uint8_t *buf)
{
    homa_endpoint dst;
    int r = homa_endpoint_parse(o->target, &dst);
    if (r != 0) {
        fprintf(stderr, "hx_lpeer: bad --server %s: %s\n", o->target, homa_strerror(r));
        return 2;
    }
    struct {
        uint32_t len;
        int busy;
    } slot[MAX_INFLIGHT];
    memset(slot, 0, sizeof(slot));
    long per_len[MAX_LENS] = {0};
    unsigned long ok = 0, bad = 0, errs = 0, sent = 0, failed = 0;
    unsigned long long bytes = 0;
    long next = 0;
    int outstanding = 0;
    int last_error = 0;
    double t0 = now_s();
    for (;;) {
        int more = o->seconds > 0 ? now_s() - t0 < o->seconds : next < o->count * o->nlens;
        while (more && !stop && outstanding < o->inflight) {
            int k = 0;
            while (slot[k].busy)
                k++;
            uint32_t len = o->lens[next % o->nlens];
            for (uint32_t i = 0; i < len; i++)
                buf[i] = hx_pattern(len, i);
            r = homa_send(s, &dst, buf, len, (uint64_t)k + 1, NULL);
            if (r != 0) {
                printf("hx_lpeer: send len %u: %s\n", len, homa_strerror(r));
                errs++;
                break;
            }
            slot[k].busy = 1;
            slot[k].len = len;
            outstanding++;
            sent++;
            next++;
            more = o->seconds > 0 ? 1 : next < o->count * o->nlens;
        }
        if (outstanding == 0) break;
        homa_msg m;
        r = homa_recv(s, HOMA_RECV_RESPONSE, 0, (int64_t)o->timeout_ms * 1000000LL, &m);
        if (r == HOMA_ERR_AGAIN) {
            printf("hx_lpeer: no response within %ld ms (%d outstanding)\n", o->timeout_ms,
                   outstanding);
            if (o->expect_error)
                failed += (unsigned long)outstanding;
            else
                errs++;
            break;
        }
        uint64_t c = m.cookie;
        if (c < 1 || c > MAX_INFLIGHT || !slot[c - 1].busy) {
            printf("hx_lpeer: recv: %s, unknown cookie %llu\n", homa_strerror(r),
                   (unsigned long long)c);
            homa_release(s, &m);
            errs++;
            break;
        }
        slot[c - 1].busy = 0;
        outstanding--;
        uint32_t want = slot[c - 1].len;
        if (r != 0) {
            printf("hx_lpeer: rpc len %u failed: %s\n", want, homa_strerror(r));
            last_error = r;
            failed++;
            continue;
        }
        long at = m.length == want ? verify(m.data, m.length) : 0;
        if (at >= 0) {
            bad++;
            printf("hx_lpeer: response len %zu (want %u) bad at %ld\n", m.length, want, at);
        } else {
            ok++;
            bytes += m.length;
            for (int i = 0; i < o->nlens; i++)
                if (o->lens[i] == want) per_len[i]++;
        }
        homa_release(s, &m);
    }
    double dt = now_s() - t0;
    for (int i = 0; i < o->nlens; i++)
        printf("hx_lpeer: len %u ok %ld\n", o->lens[i], per_len[i]);
    int fail;
    if (o->expect_error)
        fail = !(failed == sent && ok == 0 && bad == 0);
    else
        fail = bad || errs || failed || ok != sent;
    printf("hx_lpeer: %s rpcs=%lu sent=%lu bad=%lu errors=%lu failed=%lu last_error=%s bytes=%llu "
           "seconds=%.2f\n",
           fail ? "FAIL" : "ok", ok, sent, bad, errs, failed,
           last_error ? homa_strerror(last_error) : "none", bytes, dt);
    return fail;
}

static int parse(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof(*o));
    o->count = 1;
    o->inflight = 1;
    o->timeout_ms = 30000;
    o->mtu = 1500;
    o->zero_reply = -1;
    o->timeout_ticks = 1000;
    if (argc < 2) return -1;
    if (!strcmp(argv[1], "server"))
        o->server = 1;
    else if (strcmp(argv[1], "client"))
        return -1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--udp")) {
            o->udp = 1;
            continue;
        }
        if (!strcmp(a, "--counters")) {
            o->counters = 1;
            continue;
        }
        if (!strcmp(a, "--expect-error")) {
            o->expect_error = 1;
            continue;
        }
        if (i + 1 >= argc) return -1;
        const char *v = argv[++i];
        if (!strcmp(a, "--port"))
            o->port = (uint16_t)atoi(v);
        else if (!strcmp(a, "--server"))
            o->target = v;
        else if (!strcmp(a, "--count"))
            o->count = atol(v);
        else if (!strcmp(a, "--inflight"))
            o->inflight = atoi(v);
        else if (!strcmp(a, "--seconds"))
            o->seconds = atof(v);
        else if (!strcmp(a, "--timeout-ms"))
            o->timeout_ms = atol(v);
        else if (!strcmp(a, "--mtu"))
            o->mtu = (uint32_t)atol(v);
        else if (!strcmp(a, "--timeout-ticks"))
            o->timeout_ticks = atol(v);
        else if (!strcmp(a, "--zero-reply"))
            o->zero_reply = atol(v);
        else if (!strcmp(a, "--lens")) {
            char *copy = strdup(v), *save = NULL;
            if (!copy) return -1;
            for (char *t = strtok_r(copy, ",", &save); t && o->nlens < MAX_LENS;
                 t = strtok_r(NULL, ",", &save))
                o->lens[o->nlens++] = (uint32_t)strtoul(t, NULL, 0);
            free(copy);
        } else
            return -1;
    }
    if (o->inflight < 1 || o->inflight > MAX_INFLIGHT || o->zero_reply > (long)MAX_LEN) return -1;
    for (int i = 0; i < o->nlens; i++)
        if (o->lens[i] > MAX_LEN) return -1;
    if (!o->server && (!o->target || o->nlens == 0)) return -1;
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: hx_lpeer server|client [options] (see the source)\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    homa_runtime_options ro;
    homa_runtime_options_default(&ro);
    ro.mtu = o.mtu;
    if (o.timeout_ticks > 0) ro.config.timeout_ticks = (uint32_t)o.timeout_ticks;
    if (!o.udp) ro.flags |= HOMA_RT_RAW;
    homa_runtime *rt;
    int r = homa_runtime_create(&ro, &rt);
    if (r != 0) {
        fprintf(stderr, "hx_lpeer: runtime: %s\n", homa_strerror(r));
        return 1;
    }
    homa_socket *s;
    r = homa_socket_open(rt, o.port, &s);
    if (r != 0) {
        fprintf(stderr, "hx_lpeer: socket on port %u: %s\n", o.port, homa_strerror(r));
        homa_runtime_destroy(rt);
        return 1;
    }
    uint8_t *buf = malloc(MAX_LEN);
    if (!buf) return 1;
    int rc = o.server ? run_server(s, &o, buf) : run_client(s, &o, buf);
    homa_socket_linger(s, 2000LL * 1000 * 1000);
    if (o.counters) print_counters(rt);
    homa_socket_close(s);
    homa_runtime_destroy(rt);
    free(buf);
    return rc;
}
