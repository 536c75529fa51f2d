/* incast: the programs of bench/homad/homad-incast.sh (8-to-1 incast onto one host),
 * plain libhoma API, embedded or through homad as HOMA_DAEMON says.
 *
 *   incast sink --port P --rounds R --per-round N
 *       answers R x N requests with 8 bytes each; prints, per round, when
 *       its first and last request of the round arrived (CLOCK_REALTIME,
 *       ns), then the engine counters incoming_peak and drop counts (in
 *       daemon mode these are homad's, host-wide)
 *   incast burst --server A:P --size S --start NS --rounds R --gap-ms G
 *       round r: at NS + r * G ms sends one request of S bytes and waits
 *       for its reply; prints "burst round r done NS" (the reply's arrival)
 *
 * Exit 0 when every RPC completed. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <homa/homa.h>

static uint64_t now_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

static const char *arg(int argc, char **argv, const char *name)
{
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return NULL;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "incast: %s: %s\n", what, homa_strerror(rc));
    return 1;
}

static int sink(homa_runtime *rt, int argc, char **argv)
{
    const char *p = arg(argc, argv, "--port"), *r = arg(argc, argv, "--rounds"),
               *n = arg(argc, argv, "--per-round");
    if (!p || !r || !n) return 2;
    int rounds = atoi(r), per = atoi(n);
    homa_socket *s;
    int rc = homa_socket_open(rt, (uint16_t)atoi(p), &s);
    if (rc != 0) return fail("socket", rc);
    printf("incast: sink ready\n");
    fflush(stdout);
    static const char reply[8] = "incastok";
    for (int k = 0; k < rounds; k++) {
        uint64_t first = 0, last = 0;
        for (int i = 0; i < per; i++) {
            homa_msg m;
            rc = homa_recv(s, HOMA_RECV_REQUEST, 0, 30 * 1000000000ll, &m);
            if (rc != 0) return fail("recv", rc);
            last = now_real();
            if (i == 0) first = last;
            rc = homa_reply_msg(s, &m, reply, sizeof(reply));
            homa_release(s, &m);
            if (rc != 0) return fail("reply", rc);
        }
        printf("sink round %d first %llu last %llu\n", k, (unsigned long long)first,
               (unsigned long long)last);
    }
    homa_socket_linger(s, 2 * 1000000000ll);
    homa_counters c;
    homa_runtime_counters(rt, &c, NULL);
    printf("sink incoming_peak %llu rx_bytes_peak %llu\n", (unsigned long long)c.incoming_peak,
           (unsigned long long)c.rx_bytes_peak);
    homa_socket_close(s);
    return 0;
}

static int burst(homa_runtime *rt, int argc, char **argv)
{
    const char *sv = arg(argc, argv, "--server"), *sz = arg(argc, argv, "--size"),
               *st = arg(argc, argv, "--start"), *r = arg(argc, argv, "--rounds"),
               *g = arg(argc, argv, "--gap-ms");
    if (!sv || !sz || !st || !r || !g) return 2;
    homa_endpoint dst;
    if (homa_endpoint_parse(sv, &dst) != 0) return 2;
    size_t size = strtoul(sz, NULL, 0);
    uint64_t start = strtoull(st, NULL, 0), gap = strtoull(g, NULL, 0) * 1000000ull;
    int rounds = atoi(r);
    char *buf = calloc(1, size ? size : 1);
    homa_socket *s;
    int rc = homa_socket_open(rt, 0, &s);
    if (rc != 0 || !buf) return fail("socket", rc);
    int bad = 0;
    for (int k = 0; k < rounds; k++) {
        sleep_until(start + (uint64_t)k * gap);
        homa_msg m;
        rc = homa_call(s, &dst, buf, size, 10 * 1000000000ll, &m);
        uint64_t done = now_real();
        if (rc != 0) {
            fprintf(stderr, "incast: round %d: %s\n", k, homa_strerror(rc));
            bad++;
            continue;
        }
        homa_release(s, &m);
        printf("burst round %d done %llu\n", k, (unsigned long long)done);
    }
    homa_socket_close(s);
    free(buf);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: incast sink|burst ...\n");
        return 2;
    }
    homa_runtime *rt;
    int rc = homa_runtime_default(&rt);
    if (rc != 0) return fail("runtime", rc);
    int r = !strcmp(argv[1], "sink")    ? sink(rt, argc, argv)
            : !strcmp(argv[1], "burst") ? burst(rt, argc, argv)
                                        : 2;
    if (r == 2) fprintf(stderr, "incast: bad arguments (see the source's header)\n");
    homa_runtime_destroy(rt);
    return r;
}
