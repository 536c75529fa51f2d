/* libnccl-net-homa driven as NCCL's proxy thread drives a net plugin:
 * dlopen + dlsym of ncclNetPlugin_v8..v11, listen handles exchanged out of
 * band between forked processes (pipes), non-blocking connect/accept loops,
 * 8 outstanding sends per connection in 4 MiB buffers of 512 KiB steps,
 * sizes 0..4 MiB, tags, receives posted before and after their send,
 * test() polled newest first, every byte and the order checked; rings of
 * 2, 4 and 8 processes, with and without packet loss; refused closes.
 *
 * The plugin is only ever loaded in forked children: its runtime threads
 * would not survive a fork. */
#include "plugin_drv.h"
#include "support/pcap_levels.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef HOMA_NCCL_PLUGIN
#error "HOMA_NCCL_PLUGIN (the plugin's path) must be defined"
#endif

#define BUF_BYTES (4u << 20)
#define STEP_BYTES (512u << 10)
#define NSTEPS 8
/* Sanitizer builds run several times slower (and CI runs them on loaded
 * machines): fewer messages, more time. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SLOW 4
#else
#define SLOW 1
#endif
#define DEADLINE_S (40 * SLOW)

/* In children: print and exit (cmocka's asserts must not run there). */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: %s: ", g_rank, __FILE__, __LINE__, #cond);            \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

static int g_rank;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        CHECK(w > 0, "write: %s", strerror(errno));
        b += w;
        n -= (size_t)w;
    }
}

static void read_all(int fd, void *p, size_t n)
{
    char *b = p;
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR) continue;
        CHECK(r > 0, "read: %s", r ? strerror(errno) : "EOF");
        b += r;
        n -= (size_t)r;
    }
}

/* Forks n children running fn(rank, n, arg); 0 if all exit 0 in time. */
typedef void (*child_fn)(int rank, int n, int **pipes, const void *arg);

static int run_children(int n, child_fn fn, const void *arg)
{
    int *pipes[8];
    int fds[8][2];
    for (int i = 0; i < n; i++) {
        if (pipe(fds[i]) != 0) return -1;
        pipes[i] = fds[i];
    }
    pid_t pids[8];
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            g_rank = i;
            alarm(DEADLINE_S + 20); /* the last resort against a hang */
            fn(i, n, pipes, arg);
            _exit(0);
        }
    }
    for (int i = 0; i < n; i++) {
        close(fds[i][0]);
        close(fds[i][1]);
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int st = 0;
        if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "child %d failed (status 0x%x)\n", i, st);
            bad = 1;
        }
    }
    return bad ? -1 : 0;
}

static void open_plugin_tc(drv *d, int ver, int tc)
{
    setenv("NCCL_HOMA_ADDRS", "127.0.0.1", 1);
    CHECK(drv_open(d, HOMA_NCCL_PLUGIN, ver) == 0, "cannot load v%d", ver);
    d->tc = tc;
    CHECK(drv_init(d) == ncclSuccess, "init v%d", ver);
}

static void open_plugin(drv *d, int ver)
{
    open_plugin_tc(d, ver, NCCL_NET_TRAFFIC_CLASS_UNDEF);
}

/* Connects to the handle `next` and accepts on l, both non-blocking and
 * interleaved, as the proxy does. */
static void connect_accept(drv *d, void *next, void *l, void **s, void **r)
{
    *s = *r = NULL;
    double end = now_s() + DEADLINE_S;
    int spins = 0;
    while (!*s || !*r) {
        if (!*s) CHECK(drv_connect(d, 0, next, s) == ncclSuccess, "connect");
        if (!*r) CHECK(drv_accept(d, l, r) == ncclSuccess, "accept");
        if (!*s || !*r) spins++;
        CHECK(now_s() < end, "connection setup timed out");
    }
    (void)spins;
}

/* A failure acknowledged after its send was done (the default, eager
 * completion) shows on later calls: sends zero-byte messages until one
 * fails with want. */
static void wait_comm_error(drv *d, void *s, void *mh, ncclResult_t want)
{
    double end = now_s() + DEADLINE_S;
    for (;;) {
        void *req = NULL;
        ncclResult_t rc = drv_isend(d, s, NULL, 0, 9, mh, &req);
        int done = 0, sz;
        while (rc == ncclSuccess && req && !done)
            rc = drv_test(d, req, &done, &sz);
        if (rc != ncclSuccess) {
            CHECK(rc == want, "comm error %d, not %d", rc, want);
            return;
        }
        CHECK(now_s() < end, "the failure never showed");
    }
}

/* ---- the ring exchange -------------------------------------------------- */

typedef struct ring_args {
    int ver;
    int iters;
    const char *faults;
    const char *send_done; /* NCCL_HOMA_SEND_DONE, NULL = default */
    const char *tc_prio;   /* NCCL_HOMA_TC_PRIO, NULL = unset */
    int tc;                /* the comms' traffic class (v10+) */
    const char *pcap_dir;  /* HOMA_PCAP=pcap_dir/RANK.pcap, NULL = none */
} ring_args;

/* Size of message it; every 16th is a whole 4 MiB buffer. */
static size_t msg_size(int it)
{
    static const size_t sizes[] = {0,          1,     100,    4096,  65432, 65433,  200000, 524288,
                                   524288 - 1, 12345, 300000, 65536, 7,     131072, 400000, 524288};
    if (it % 16 == 15) return BUF_BYTES;
    return sizes[it % 16];
}

static int msg_tag(int it)
{
    return it % 5;
}

static void fill(uint8_t *p, size_t n, int src, int it)
{
    uint64_t x = ((uint64_t)src << 48) ^ ((uint64_t)it << 20) ^ 0x9e3779b97f4a7c15ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        memcpy(p + i, &x, 8);
    }
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    for (; i < n; i++)
        p[i] = (uint8_t)(x >> (8 * (i % 8)));
}

typedef struct pending {
    void *req;
    int it;
} pending;

static void ring_child(int rank, int n, int **pipes, const void *arg)
{
    const ring_args *a = arg;
    if (a->faults) setenv("HOMA_FAULTS", a->faults, 1);
    if (a->send_done) setenv("NCCL_HOMA_SEND_DONE", a->send_done, 1);
    if (a->tc_prio) setenv("NCCL_HOMA_TC_PRIO", a->tc_prio, 1);
    if (a->pcap_dir) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%d.pcap", a->pcap_dir, rank);
        setenv("HOMA_PCAP", path, 1);
    }
    drv d;
    open_plugin_tc(&d, a->ver, a->tc_prio ? a->tc : NCCL_NET_TRAFFIC_CLASS_UNDEF);
    int ndev = 0;
    CHECK(drv_devices(&d, &ndev) == ncclSuccess && ndev >= 1, "devices");

    /* Out-of-band exchange: rank i reads the handle of rank i+1 from its
     * own pipe and writes its handle into the pipe of rank i-1. */
    char mine[NCCL_NET_HANDLE_MAXSIZE], next[NCCL_NET_HANDLE_MAXSIZE];
    void *l = NULL;
    CHECK(drv_listen(&d, 0, mine, &l) == ncclSuccess && l, "listen");
    write_all(pipes[(rank + n - 1) % n][1], mine, sizeof(mine));
    read_all(pipes[rank][0], next, sizeof(next));

    void *s, *r;
    connect_accept(&d, next, l, &s, &r);
    uint8_t *sbuf = malloc(BUF_BYTES), *rbuf = malloc(BUF_BYTES), *want = malloc(BUF_BYTES);
    CHECK(sbuf && rbuf && want, "malloc");
    void *smh = NULL, *rmh = NULL;
    CHECK(drv_regmr(&d, s, sbuf, BUF_BYTES, NCCL_PTR_HOST, &smh) == ncclSuccess, "regMr send");
    CHECK(drv_regmr(&d, r, rbuf, BUF_BYTES, NCCL_PTR_HOST, &rmh) == ncclSuccess, "regMr recv");

    int prev = (rank + n - 1) % n;
    pending sq[NSTEPS], rq[NSTEPS];
    int sh = 0, sn = 0, rh = 0, rn = 0; /* FIFO heads and counts */
    int sent = 0, recvd = 0, sdone = 0, rdone = 0;
    double end = now_s() + DEADLINE_S;
    double hold_send = 0, hold_recv = 0;
    while (sdone < a->iters || rdone < a->iters) {
        CHECK(now_s() < end, "transfer timed out (sent %d/%d done, received %d/%d done)", sdone,
              a->iters, rdone, a->iters);
        /* Post sends: a whole-buffer message waits for the pipeline to
         * drain; now and then the sender lags, so the receive is posted
         * long before its send. */
        while (sent < a->iters && sn < NSTEPS && now_s() >= hold_send) {
            size_t size = msg_size(sent);
            /* A whole-buffer message overlaps every step: alone in flight. */
            if ((size == BUF_BYTES || (sn && msg_size(sq[sh].it) == BUF_BYTES)) && sn) break;
            if (sent % 7 == 5 && hold_send == 0) {
                hold_send = now_s() + 0.002;
                break;
            }
            hold_send = 0;
            uint8_t *p = size == BUF_BYTES ? sbuf : sbuf + (size_t)(sent % NSTEPS) * STEP_BYTES;
            fill(p, size, rank, sent);
            void *req = NULL;
            CHECK(drv_isend(&d, s, p, size, msg_tag(sent), smh, &req) == ncclSuccess, "isend");
            if (!req) break; /* plugin busy: retry later, as NCCL does */
            sq[(sh + sn++) % NSTEPS] = (pending){req, sent++};
            if (size == BUF_BYTES) break;
        }
        /* Post receives of a full step (more than is sent); sometimes
         * late, so that the message arrives first. */
        while (recvd < a->iters && rn < NSTEPS && now_s() >= hold_recv) {
            size_t size = msg_size(recvd) == BUF_BYTES ? BUF_BYTES : STEP_BYTES;
            if ((size == BUF_BYTES || (rn && msg_size(rq[rh].it) == BUF_BYTES)) && rn) break;
            if (recvd % 5 == 3 && hold_recv == 0) {
                hold_recv = now_s() + 0.003;
                break;
            }
            hold_recv = 0;
            uint8_t *p = size == BUF_BYTES ? rbuf : rbuf + (size_t)(recvd % NSTEPS) * STEP_BYTES;
            void *req = NULL;
            CHECK(drv_irecv(&d, r, p, size, msg_tag(recvd), rmh, &req) == ncclSuccess, "irecv");
            if (!req) break;
            rq[(rh + rn++) % NSTEPS] = (pending){req, recvd++};
            if (size == BUF_BYTES) break;
        }
        /* Test newest first.  Completion is in posting order: once a
         * request is done, every older one of its comm must be too (and
         * says so at its first test). */
        for (int k = sn - 1; k >= 0; k--) {
            int done = 0, sz = -1, szk = -1;
            pending *p = &sq[(sh + k) % NSTEPS];
            CHECK(drv_test(&d, p->req, &done, &szk) == ncclSuccess, "test send %d", p->it);
            if (!done) continue;
            for (int j = 0; j <= k; j++) {
                pending *q = &sq[sh];
                if (j < k)
                    CHECK(drv_test(&d, q->req, &done, &sz) == ncclSuccess && done,
                          "send %d not done after send %d", q->it, p->it);
                else
                    sz = szk;
                CHECK(q->it == sdone, "send order");
                CHECK((size_t)sz == msg_size(q->it), "send %d: size %d", q->it, sz);
                sh = (sh + 1) % NSTEPS;
                sn--;
                sdone++;
            }
            break;
        }
        for (int k = rn - 1; k >= 0; k--) {
            int done = 0, sz = -1, szk = -1;
            pending *p = &rq[(rh + k) % NSTEPS];
            CHECK(drv_test(&d, p->req, &done, &szk) == ncclSuccess, "test recv %d", p->it);
            if (!done) continue;
            for (int j = 0; j <= k; j++) {
                pending *q = &rq[rh];
                if (j < k)
                    CHECK(drv_test(&d, q->req, &done, &sz) == ncclSuccess && done,
                          "recv %d not done after recv %d", q->it, p->it);
                else
                    sz = szk;
                CHECK(q->it == rdone, "recv order");
                size_t size = msg_size(q->it);
                CHECK((size_t)sz == size, "recv %d: %d bytes, %zu sent", q->it, sz, size);
                uint8_t *b =
                    size == BUF_BYTES ? rbuf : rbuf + (size_t)(q->it % NSTEPS) * STEP_BYTES;
                void *freq = (void *)1;
                CHECK(drv_iflush(&d, r, b, sz, rmh, &freq) == ncclSuccess && freq == NULL,
                      "iflush");
                fill(want, size, prev, q->it);
                CHECK(memcmp(b, want, size) == 0, "recv %d: bytes differ", q->it);
                rh = (rh + 1) % NSTEPS;
                rn--;
                rdone++;
            }
            break;
        }
        /* The proxy thread spins; here 8 of them share a few cores. */
        sched_yield();
    }
    CHECK(drv_deregmr(&d, s, smh) == ncclSuccess, "deregMr");
    CHECK(drv_deregmr(&d, r, rmh) == ncclSuccess, "deregMr");
    /* Let the peers finish before the comms go: a late receive must not
     * find its sender's comm gone (its reply would be lost with it). */
    char tok = 'x';
    write_all(pipes[(rank + n - 1) % n][1], &tok, 1);
    read_all(pipes[rank][0], &tok, 1);
    CHECK(drv_close_send(&d, s) == ncclSuccess, "closeSend");
    CHECK(drv_close_recv(&d, r) == ncclSuccess, "closeRecv");
    CHECK(drv_close_listen(&d, l) == ncclSuccess, "closeListen");
    CHECK(drv_finalize(&d) == ncclSuccess, "finalize");
    free(sbuf);
    free(rbuf);
    free(want);
    /* The runtime lives until _exit: write out the capture's buffer (a
     * record being written meanwhile may come out cut short). */
    if (a->pcap_dir) fflush(NULL);
}

static void ring_mode(int n, int ver, int iters, const char *faults, const char *send_done)
{
    iters = iters / SLOW < 16 ? 16 : iters / SLOW; /* 16 reaches the first 4 MiB message */
    ring_args a = {ver, iters, faults, send_done, NULL, 0, NULL};
    double t0 = now_s();
    assert_int_equal(run_children(n, ring_child, &a), 0);
    print_message("ring of %d, v%d, %d messages each%s%s%s%s: %.2f s\n", n, ver, iters,
                  faults ? ", HOMA_FAULTS=" : "", faults ? faults : "",
                  send_done ? ", NCCL_HOMA_SEND_DONE=" : "", send_done ? send_done : "",
                  now_s() - t0);
}

static void ring(int n, int ver, int iters, const char *faults)
{
    ring_mode(n, ver, iters, faults, NULL);
}

static void nccl_ring__pair_v8(void **state)
{
    (void)state;
    ring(2, 8, 64, NULL);
}
static void nccl_ring__pair_v9(void **state)
{
    (void)state;
    ring(2, 9, 64, NULL);
}
static void nccl_ring__pair_v10(void **state)
{
    (void)state;
    ring(2, 10, 64, NULL);
}
static void nccl_ring__pair_v11(void **state)
{
    (void)state;
    ring(2, 11, 64, NULL);
}
/* Sends done only once delivered: the other completion mode. */
static void nccl_ring__pair_sends_done_when_delivered(void **state)
{
    (void)state;
    ring_mode(2, 11, 64, NULL, "delivered");
}
static void nccl_ring__four_procs_loss_delivered(void **state)
{
    (void)state;
    ring_mode(4, 10, 32, "drop=0.02,seed=3", "delivered");
}
static void nccl_ring__four_procs(void **state)
{
    (void)state;
    ring(4, 11, 48, NULL);
}
static void nccl_ring__eight_procs(void **state)
{
    (void)state;
    ring(8, 10, 32, NULL);
}
static void nccl_ring__pair_with_loss(void **state)
{
    (void)state;
    ring(2, 11, 48, "drop=0.02");
}
static void nccl_ring__four_procs_with_loss(void **state)
{
    (void)state;
    ring(4, 9, 32, "drop=0.02,seed=7");
}

/* ---- traffic classes ----------------------------------------------------- */

/* Runs a pair ring with a capture in each process; levels[] sums both
 * captures (each holds both directions). */
static void ring_levels(int ver, const char *tc_prio, int tc, uint64_t levels[8])
{
    char dir[] = "/tmp/homa-nccl-tc-XXXXXX";
    assert_non_null(mkdtemp(dir));
    ring_args a = {ver, 16, NULL, NULL, tc_prio, tc, dir};
    assert_int_equal(run_children(2, ring_child, &a), 0);
    memset(levels, 0, 8 * sizeof(levels[0]));
    for (int r = 0; r < 2; r++) {
        char path[64];
        uint64_t l[8];
        snprintf(path, sizeof(path), "%s/%d.pcap", dir, r);
        assert_int_equal(pcap_levels(path, l), 0);
        unlink(path);
        for (int i = 0; i < 8; i++)
            levels[i] += l[i];
    }
    rmdir(dir);
    print_message("v%d NCCL_HOMA_TC_PRIO=%s, class %d: large packets at levels 0..7: %llu %llu "
                  "%llu %llu %llu %llu %llu %llu\n",
                  ver, tc_prio ? tc_prio : "(unset)", tc, (unsigned long long)levels[0],
                  (unsigned long long)levels[1], (unsigned long long)levels[2],
                  (unsigned long long)levels[3], (unsigned long long)levels[4],
                  (unsigned long long)levels[5], (unsigned long long)levels[6],
                  (unsigned long long)levels[7]);
}

static uint64_t levels_sum(const uint64_t levels[8])
{
    return levels_outside(levels, 1, 0);
}

/* NCCL_HOMA_TC_PRIO maps a comm's traffic class (v10 connect config, v11
 * init config; "*" also the classless comms of v8/v9) to the levels its
 * messages use: every large packet of the ring lands there, while without
 * the map Homa's own levels (unscheduled level 0 for 4 MiB, 4 for 512 KiB,
 * granted levels for the rest) show up outside them. */
static void nccl_plugin__traffic_class_sets_levels(void **state)
{
    (void)state;
    uint64_t lv[8];
    ring_levels(10, NULL, 0, lv);
    assert_true(levels_sum(lv) > 100);
    assert_true(levels_outside(lv, 6, 6) > 0);
    assert_true(levels_outside(lv, 1, 2) > 0);
    ring_levels(10, "0:3,106:6", 106, lv);
    assert_true(levels_sum(lv) > 100);
    assert_int_equal(levels_outside(lv, 6, 6), 0);
    ring_levels(11, "106:6,*:1-2", 7, lv);
    assert_true(levels_sum(lv) > 100);
    assert_int_equal(levels_outside(lv, 1, 2), 0);
    ring_levels(8, "*:6", 0, lv);
    assert_true(levels_sum(lv) > 100);
    assert_int_equal(levels_outside(lv, 6, 6), 0);
}

/* A malformed NCCL_HOMA_TC_PRIO fails init (each in a fresh process: init
 * runs once per process). */
static void bad_tc_child(int rank, int n, int **pipes, const void *arg)
{
    (void)rank;
    (void)n;
    (void)pipes;
    setenv("NCCL_HOMA_ADDRS", "127.0.0.1", 1);
    setenv("NCCL_HOMA_TC_PRIO", arg, 1);
    drv d;
    CHECK(drv_open(&d, HOMA_NCCL_PLUGIN, 10) == 0, "cannot load");
    CHECK(drv_init(&d) == ncclInvalidArgument, "init accepted NCCL_HOMA_TC_PRIO=%s",
          (const char *)arg);
}

static void nccl_plugin__bad_traffic_class_map_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {"106",  "106:8", "106:3-2", "x:1",     "106:1,106:2",
                                      "1:1,", "-1:2",  "*:1-",    "1:1;2:2", "1234567890:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(run_children(1, bad_tc_child, bad[i]), 0);
}

/* ---- properties and bad input ------------------------------------------ */

static void props_child(int rank, int n, int **pipes, const void *arg)
{
    (void)rank;
    (void)n;
    (void)pipes;
    (void)arg;
    for (int ver = 8; ver <= 11; ver++) {
        drv d;
        open_plugin(&d, ver);
        CHECK(!strcmp(drv_name(&d), "Homa"), "name %s", drv_name(&d));
        int ndev = 0;
        CHECK(drv_devices(&d, &ndev) == ncclSuccess && ndev == 1, "devices %d", ndev);
        ncclNetProperties_v11_t p;
        CHECK(drv_props(&d, 0, &p) == ncclSuccess, "getProperties");
        CHECK(p.name && strstr(p.name, "127.0.0.1"), "name %s", p.name ? p.name : "NULL");
        CHECK(p.ptrSupport == NCCL_PTR_HOST, "ptrSupport %d", p.ptrSupport);
        CHECK(p.speed > 0, "speed %d", p.speed);
        CHECK(p.maxRecvs == 1 && p.maxComms >= 1024, "maxRecvs %d maxComms %d", p.maxRecvs,
              p.maxComms);
        CHECK(p.netDeviceType == NCCL_NET_DEVICE_HOST, "netDeviceType");
        if (ver >= 9) {
            CHECK(p.maxP2pBytes >= BUF_BYTES && p.maxCollBytes >= BUF_BYTES, "max bytes");
            CHECK(p.vProps.ndevs == 1 && p.vProps.devs[0] == 0, "vProps");
        }
        if (ver == 11) CHECK(p.maxMultiRequestSize == 1, "maxMultiRequestSize");
        CHECK(drv_props(&d, 1, &p) != ncclSuccess, "getProperties of a missing device");
        CHECK(drv_finalize(&d) == ncclSuccess, "finalize");
    }
    /* The configured speed is what a link without one reports. */
}

static void nccl_plugin__properties(void **state)
{
    (void)state;
    assert_int_equal(run_children(1, props_child, NULL), 0);
}

static void bad_input_child(int rank, int n, int **pipes, const void *arg)
{
    (void)rank;
    (void)n;
    (void)pipes;
    (void)arg;
    drv d;
    open_plugin(&d, 9);
    char h[NCCL_NET_HANDLE_MAXSIZE];
    memset(h, 0xab, sizeof(h));
    void *s = NULL, *l = NULL, *r = NULL;
    CHECK(drv_connect(&d, 0, h, &s) != ncclSuccess && !s, "connect to garbage");
    CHECK(drv_connect(&d, 5, h, &s) != ncclSuccess && !s, "connect on a missing device");
    CHECK(drv_listen(&d, 3, h, &l) != ncclSuccess, "listen on a missing device");
    CHECK(drv_listen(&d, 0, h, &l) == ncclSuccess, "listen");
    /* A listener that is gone refuses the connection. */
    char stale[NCCL_NET_HANDLE_MAXSIZE];
    memcpy(stale, h, sizeof(h));
    void *l2 = NULL;
    CHECK(drv_listen(&d, 0, h, &l2) == ncclSuccess, "listen 2");
    CHECK(drv_close_listen(&d, l2) == ncclSuccess, "closeListen");
    double end = now_s() + 10;
    ncclResult_t rc;
    while ((rc = drv_connect(&d, 0, h, &s)) == ncclSuccess && !s)
        CHECK(now_s() < end, "stale");
    CHECK(rc != ncclSuccess && !s, "connect to a closed listener");
    (void)stale;
    /* A real connection to ourselves. */
    CHECK(drv_listen(&d, 0, h, &l2) == ncclSuccess, "listen 3");
    connect_accept(&d, h, l2, &s, &r);
    char buf[64];
    void *mh = NULL, *req = (void *)1;
    CHECK(drv_regmr(&d, s, buf, sizeof(buf), NCCL_PTR_CUDA, &mh) != ncclSuccess,
          "regMr of CUDA memory");
    CHECK(drv_regmr_dmabuf(&d, s, buf, sizeof(buf), &mh) == ncclInternalError,
          "regMrDmaBuf unsupported");
    CHECK(drv_regmr(&d, s, buf, sizeof(buf), NCCL_PTR_HOST, &mh) == ncclSuccess, "regMr");
    void *bufs[2] = {buf, buf + 32};
    size_t sizes[2] = {32, 32};
    int tags[2] = {1, 2};
    void *mhs[2] = {mh, mh};
    CHECK(drv_irecv_n(&d, r, 2, bufs, sizes, tags, mhs, &req) != ncclSuccess,
          "irecv of 2 with maxRecvs 1");
    CHECK(drv_isend(&d, r, buf, 8, 0, mh, &req) != ncclSuccess, "isend on a recv comm");
    CHECK(drv_irecv(&d, s, buf, 8, 0, mh, &req) != ncclSuccess, "irecv on a send comm");
    CHECK(drv_test(&d, NULL, &(int){0}, NULL) != ncclSuccess, "test(NULL)");
    /* Sent more than posted: both sides fail, nothing overflows. */
    void *sreq = NULL, *rreq = NULL;
    CHECK(drv_irecv(&d, r, buf, 8, 3, mh, &rreq) == ncclSuccess && rreq, "irecv");
    CHECK(drv_isend(&d, s, buf, 16, 3, mh, &sreq) == ncclSuccess && sreq, "isend");
    int sd = 0, rd = 0, sz;
    ncclResult_t src = ncclSuccess, rrc = ncclSuccess;
    end = now_s() + 10;
    while (!sd || !rd) {
        if (!sd) src = drv_test(&d, sreq, &sd, &sz);
        if (!rd) rrc = drv_test(&d, rreq, &rd, &sz);
        CHECK(now_s() < end, "truncation never reported");
    }
    CHECK(rrc != ncclSuccess, "truncation not reported to the receiver");
    if (src == ncclSuccess) wait_comm_error(&d, s, mh, ncclInvalidUsage);
    CHECK(drv_close_send(&d, s) == ncclSuccess, "closeSend");
    CHECK(drv_close_recv(&d, r) == ncclSuccess, "closeRecv");
    CHECK(drv_close_listen(&d, l2) == ncclSuccess, "closeListen");
    CHECK(drv_close_listen(&d, l) == ncclSuccess, "closeListen");
}

static void nccl_plugin__bad_input_refused(void **state)
{
    (void)state;
    assert_int_equal(run_children(1, bad_input_child, NULL), 0);
}

/* ---- closing with requests in flight ------------------------------------ */

static void wait_done(drv *d, void *req, ncclResult_t want, int want_size)
{
    double end = now_s() + DEADLINE_S;
    int done = 0, sz = -1;
    ncclResult_t rc;
    while ((rc = drv_test(d, req, &done, &sz)) == ncclSuccess && !done)
        CHECK(now_s() < end, "request never done");
    CHECK(rc == want, "test returned %d, not %d", rc, want);
    if (want == ncclSuccess) CHECK(sz == want_size, "size %d, not %d", sz, want_size);
}

static void close_child(int rank, int n, int **pipes, const void *arg)
{
    (void)n;
    (void)arg;
    drv d;
    open_plugin(&d, 10);
    char h[NCCL_NET_HANDLE_MAXSIZE];
    void *l = NULL, *s = NULL, *r = NULL;
    char buf[256];
    void *mh = NULL, *req = NULL, *req2 = NULL;
    char tok = 0;
    if (rank == 0) { /* receiver */
        CHECK(drv_listen(&d, 0, h, &l) == ncclSuccess, "listen");
        write_all(pipes[1][1], h, sizeof(h));
        double end = now_s() + DEADLINE_S;
        while (!r) {
            CHECK(drv_accept(&d, l, &r) == ncclSuccess, "accept");
            CHECK(now_s() < end, "accept timed out");
        }
        CHECK(drv_regmr(&d, r, buf, sizeof(buf), NCCL_PTR_HOST, &mh) == ncclSuccess, "regMr");
        CHECK(drv_irecv(&d, r, buf, sizeof(buf), 9, mh, &req) == ncclSuccess && req, "irecv");
        CHECK(drv_close_recv(&d, r) != ncclSuccess, "closeRecv with a receive posted");
        write_all(pipes[1][1], "g", 1); /* sender: go */
        wait_done(&d, req, ncclSuccess, 100);
        CHECK(drv_irecv(&d, r, buf, sizeof(buf), 9, mh, &req) == ncclSuccess && req, "irecv 2");
        wait_done(&d, req, ncclSuccess, 200);
        CHECK(drv_close_recv(&d, r) == ncclSuccess, "closeRecv");
        write_all(pipes[1][1], "c", 1); /* closed */
        /* Keep polling (accept makes progress, as the proxy thread's
         * polling does) until the sender has seen its send refused. */
        fcntl(pipes[0][0], F_SETFL, O_NONBLOCK);
        end = now_s() + DEADLINE_S;
        while (read(pipes[0][0], &tok, 1) != 1) {
            void *extra = NULL;
            CHECK(drv_accept(&d, l, &extra) == ncclSuccess && !extra, "accept");
            CHECK(now_s() < end, "sender never finished");
        }
        CHECK(drv_close_listen(&d, l) == ncclSuccess, "closeListen");
    } else { /* sender */
        read_all(pipes[1][0], h, sizeof(h));
        double end = now_s() + DEADLINE_S;
        while (!s) {
            CHECK(drv_connect(&d, 0, h, &s) == ncclSuccess, "connect");
            CHECK(now_s() < end, "connect timed out");
        }
        CHECK(drv_regmr(&d, s, buf, sizeof(buf), NCCL_PTR_HOST, &mh) == ncclSuccess, "regMr");
        read_all(pipes[1][0], &tok, 1);
        memset(buf, 0x5a, sizeof(buf));
        CHECK(drv_isend(&d, s, buf, 100, 9, mh, &req) == ncclSuccess && req, "isend");
        CHECK(drv_isend(&d, s, buf, 200, 9, mh, &req2) == ncclSuccess && req2, "isend 2");
        CHECK(drv_close_send(&d, s) != ncclSuccess, "closeSend with sends in flight");
        /* Refused means intact: the sends still complete. */
        wait_done(&d, req2, ncclSuccess, 200);
        wait_done(&d, req, ncclSuccess, 100);
        read_all(pipes[1][0], &tok, 1);
        /* The receiver is gone: the send fails instead of hanging. */
        CHECK(drv_isend(&d, s, buf, 10, 9, mh, &req) == ncclSuccess && req, "isend 3");
        if (getenv("NCCL_HOMA_SEND_DONE")) {
            wait_done(&d, req, ncclRemoteError, 0);
        } else {
            /* Done at once; the failure shows on this or a later call. */
            int done = 0, sz;
            ncclResult_t rc;
            while ((rc = drv_test(&d, req, &done, &sz)) == ncclSuccess && !done) {
            }
            CHECK(rc == ncclSuccess || rc == ncclRemoteError, "test: %d", rc);
            if (rc == ncclSuccess) wait_comm_error(&d, s, mh, ncclRemoteError);
        }
        CHECK(drv_close_send(&d, s) == ncclSuccess, "closeSend");
        write_all(pipes[0][1], "d", 1);
    }
}

static void nccl_close__in_flight_refused(void **state)
{
    (void)state;
    assert_int_equal(run_children(2, close_child, NULL), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    /* NCCL_HOMA_TEST_FILTER=pattern runs only the matching tests. */
    if (getenv("NCCL_HOMA_TEST_FILTER")) cmocka_set_test_filter(getenv("NCCL_HOMA_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nccl_plugin__properties),
        cmocka_unit_test(nccl_plugin__bad_input_refused),
        cmocka_unit_test(nccl_plugin__traffic_class_sets_levels),
        cmocka_unit_test(nccl_plugin__bad_traffic_class_map_refused),
        cmocka_unit_test(nccl_close__in_flight_refused),
        cmocka_unit_test(nccl_ring__pair_v8),
        cmocka_unit_test(nccl_ring__pair_v9),
        cmocka_unit_test(nccl_ring__pair_v10),
        cmocka_unit_test(nccl_ring__pair_v11),
        cmocka_unit_test(nccl_ring__pair_sends_done_when_delivered),
        cmocka_unit_test(nccl_ring__four_procs_loss_delivered),
        cmocka_unit_test(nccl_ring__four_procs),
        cmocka_unit_test(nccl_ring__eight_procs),
        cmocka_unit_test(nccl_ring__pair_with_loss),
        cmocka_unit_test(nccl_ring__four_procs_with_loss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
