/* bench_idle: one of N "idle-ish" processes for bench/homad/homad-idle-cpu.sh.
 * Not a ctest test: a measurement tool.
 *
 *   bench_idle BASE_PORT INDEX N INTERVAL_MS SECONDS
 *
 * Process INDEX binds BASE_PORT+INDEX, echoes every request it gets (a
 * thread blocked in homa_recv), and every INTERVAL_MS sends one 100-byte
 * RPC to the next process of the ring (BASE_PORT + (INDEX+1) % N), for
 * SECONDS.  It prints how many RPCs succeeded and failed.  The runtime is
 * the default one, so HOMA_DAEMON decides embedded or daemon mode. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <homa/homa.h>

#include "integration/rt_util.h"

static void *echo(void *arg)
{
    homa_socket *s = arg;
    for (;;) {
        homa_msg m;
        int rc = homa_recv(s, HOMA_RECV_REQUEST, 0, HOMA_FOREVER, &m);
        if (rc == HOMA_ERR_SHUTDOWN) return NULL;
        if (rc != 0) continue;
        homa_reply_msg(s, &m, m.data, m.length);
        homa_release(s, &m);
    }
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: bench_idle BASE_PORT INDEX N INTERVAL_MS SECONDS\n");
        return 2;
    }
    int base = atoi(argv[1]), idx = atoi(argv[2]), n = atoi(argv[3]);
    int interval_ms = atoi(argv[4]), seconds = atoi(argv[5]);
    if (base < 1024 || n < 1 || idx < 0 || idx >= n || base + n > 65535 || interval_ms < 1 ||
        seconds < 1) {
        fprintf(stderr, "bench_idle: bad arguments\n");
        return 2;
    }
    homa_runtime *rt;
    homa_socket *s;
    homa_endpoint dst;
    int rc = homa_runtime_create(NULL, &rt);
    if (rc == 0) rc = homa_socket_open(rt, (uint16_t)(base + idx), &s);
    if (rc == 0) rc = homa_endpoint_from_host("127.0.0.1", (uint16_t)(base + (idx + 1) % n), &dst);
    if (rc != 0) {
        fprintf(stderr, "bench_idle %d: setup: %s\n", idx, homa_strerror(rc));
        return 1;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, echo, s) != 0) return 1;
    char buf[100];
    memset(buf, idx, sizeof(buf));
    uint64_t end = rt_now_ns() + (uint64_t)seconds * 1000000000ull;
    long ok = 0, failed = 0;
    while (rt_now_ns() < end) {
        struct timespec ts = {interval_ms / 1000, (long)(interval_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        homa_msg m;
        rc = homa_call(s, &dst, buf, sizeof(buf), 1000000000ll, &m);
        if (rc == 0) {
            ok++;
            homa_release(s, &m);
        } else {
            failed++;
        }
    }
    printf("bench_idle %d: %ld RPCs, %ld failed\n", idx, ok, failed);
    fflush(stdout);
    /* The echo thread stays blocked; exiting ends it. */
    _exit(0);
}
