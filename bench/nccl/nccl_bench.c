/* nccl_bench: a ring allreduce (float sum) across forked processes on
 * loopback, over libnccl-net-homa's plugin API or over TCP sockets
 * organised as NCCL's socket transport (several sockets per connection,
 * the message cut into 64 KiB chunks dealt round-robin to them, its size
 * sent ahead on the first socket).  Reports, per size, the median over
 * runs of the time per allreduce, the algorithm bandwidth and NCCL's bus
 * bandwidth (algbw * 2(n-1)/n).  Every result is checked.
 *
 *   nccl_bench [--transport homa|tcp|both] [--ranks N] [--runs R]
 *              [--sizes b1,b2,...] [--socks S] [--quick] [--netns NAME]
 *
 * --netns NAME: rank i runs in network namespace NAME-h<i> (a cluster in a
 * box, scripts/homa-cluster) and uses that host's first IPv4 address that
 * is not loopback, instead of all ranks sharing 127.0.0.1.
 *
 * The ring is NCCL's: n-1 reduce-scatter steps, n-1 allgather steps, each
 * step's segment of the buffer sent as messages of at most 512 KiB (CHUNK),
 * up to 8 (WINDOW) in flight. */
#include "nccl/plugin_drv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (512u << 10)    /* largest message of a ring step */
#define WINDOW 8              /* messages in flight each way */
#define TCP_CHUNK (64u << 10) /* the TCP transport's unit per socket */
#define MAX_SOCKS 8
#define MAX_RANKS 8

static int g_rank;
static struct in_addr g_addr = {0}; /* this rank's address (network order); 0 = loopback */
#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, "rank %d: ", g_rank);                                                      \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        _exit(1);                                                                                  \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- transports -------------------------------------------------------- */

typedef struct xport {
    int (*isend)(struct xport *x, void *buf, size_t n, void **req); /* *req NULL: retry */
    int (*irecv)(struct xport *x, void *buf, size_t n, void **req);
    int (*test)(struct xport *x, void *req, int *done);
} xport;

/* Homa: the plugin, v11. */
typedef struct homa_x {
    xport x;
    drv d;
    void *s, *r, *smh, *rmh;
} homa_x;

static int hx_isend(xport *x, void *buf, size_t n, void **req)
{
    homa_x *h = (homa_x *)x;
    return drv_isend(&h->d, h->s, buf, n, 0, h->smh, req) == ncclSuccess ? 0 : -1;
}
static int hx_irecv(xport *x, void *buf, size_t n, void **req)
{
    homa_x *h = (homa_x *)x;
    return drv_irecv(&h->d, h->r, buf, n, 0, h->rmh, req) == ncclSuccess ? 0 : -1;
}
static int hx_test(xport *x, void *req, int *done)
{
    homa_x *h = (homa_x *)x;
    int sz;
    return drv_test(&h->d, req, done, &sz) == ncclSuccess ? 0 : -1;
}

/* TCP, as NCCL's socket transport: per direction S sockets; a request's
 * bytes are an 8-byte size on socket 0, then 64 KiB chunks, chunk c on
 * socket c % S.  Requests of a direction are served in posting order. */
typedef struct tcp_req {
    int used, is_send, done;
    uint8_t *buf;
    size_t n;
    uint64_t hdr;
    size_t pos[MAX_SOCKS]; /* bytes of this request's stream done on socket j */
} tcp_req;

typedef struct tcp_dir {
    int fd[MAX_SOCKS];
    tcp_req q[WINDOW];
    int head, count;
} tcp_dir;

typedef struct tcp_x {
    xport x;
    int ns;
    tcp_dir out, in;
} tcp_x;

/* Length of request r's stream on socket j. */
static size_t stream_len(const tcp_x *t, const tcp_req *r, int j)
{
    size_t chunks = (r->n + TCP_CHUNK - 1) / TCP_CHUNK, len = j == 0 ? 8 : 0;
    for (size_t c = (size_t)j; c < chunks; c += (size_t)t->ns)
        len += c + 1 == chunks ? r->n - c * TCP_CHUNK : TCP_CHUNK;
    return len;
}

/* Moves bytes on every socket of a direction; non-blocking. */
static void tcp_progress_dir(tcp_x *t, tcp_dir *d)
{
    for (int j = 0; j < t->ns; j++) {
        for (int k = 0; k < d->count; k++) {
            tcp_req *r = &d->q[(d->head + k) % WINDOW];
            size_t len = stream_len(t, r, j);
            if (r->pos[j] >= len) continue; /* this socket is done with r */
            for (;;) {
                size_t p = r->pos[j];
                if (p >= len) break;
                uint8_t *ptr;
                size_t avail;
                if (j == 0 && p < 8) {
                    ptr = (uint8_t *)&r->hdr + p;
                    avail = 8 - p;
                } else {
                    size_t q = p - (j == 0 ? 8 : 0);
                    size_t c = (size_t)j + (size_t)t->ns * (q / TCP_CHUNK);
                    size_t off = c * TCP_CHUNK + q % TCP_CHUNK;
                    size_t end = (c + 1) * TCP_CHUNK < r->n ? (c + 1) * TCP_CHUNK : r->n;
                    ptr = r->buf + off;
                    avail = end - off;
                }
                ssize_t m = r->is_send ? send(d->fd[j], ptr, avail, MSG_DONTWAIT | MSG_NOSIGNAL)
                                       : recv(d->fd[j], ptr, avail, MSG_DONTWAIT);
                if (m < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
                if (m <= 0) DIE("tcp %s: %s", r->is_send ? "send" : "recv", strerror(errno));
                r->pos[j] += (size_t)m;
                if (!r->is_send && j == 0 && r->pos[0] == 8 && r->hdr > r->n)
                    DIE("tcp: %llu bytes sent, %zu posted", (unsigned long long)r->hdr, r->n);
            }
            break; /* a socket's stream is sequential: later requests wait */
        }
    }
    for (int k = 0; k < d->count; k++) {
        tcp_req *r = &d->q[(d->head + k) % WINDOW];
        int all = 1;
        for (int j = 0; j < t->ns; j++)
            all &= r->pos[j] >= stream_len(t, r, j);
        r->done = all;
    }
}

static int tcp_post(tcp_x *t, tcp_dir *d, int is_send, void *buf, size_t n, void **req)
{
    *req = NULL;
    if (d->count == WINDOW) return 0;
    tcp_req *r = &d->q[(d->head + d->count) % WINDOW];
    memset(r, 0, sizeof(*r));
    r->used = 1;
    r->is_send = is_send;
    r->buf = buf;
    r->n = n;
    r->hdr = n;
    d->count++;
    *req = r;
    tcp_progress_dir(t, d);
    return 0;
}

static int tx_isend(xport *x, void *buf, size_t n, void **req)
{
    tcp_x *t = (tcp_x *)x;
    return tcp_post(t, &t->out, 1, buf, n, req);
}
static int tx_irecv(xport *x, void *buf, size_t n, void **req)
{
    tcp_x *t = (tcp_x *)x;
    return tcp_post(t, &t->in, 0, buf, n, req);
}
static int tx_test(xport *x, void *req, int *done)
{
    tcp_x *t = (tcp_x *)x;
    tcp_req *r = req;
    tcp_dir *d = r->is_send ? &t->out : &t->in;
    tcp_progress_dir(t, d);
    *done = 0;
    /* In posting order, as the socket transport. */
    if (d->count && &d->q[d->head] == r && r->done) {
        r->used = 0;
        d->head = (d->head + 1) % WINDOW;
        d->count--;
        *done = 1;
    }
    return 0;
}

/* ---- set-up ------------------------------------------------------------ */

typedef struct shared {
    pthread_barrier_t bar;
    double times[64]; /* rank 0's results */
} shared;

static void write_all(int fd, const void *p, size_t n)
{
    if (write(fd, p, n) != (ssize_t)n) DIE("pipe write");
}
static void read_all(int fd, void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)p + got, n - got);
        if (r <= 0) DIE("pipe read");
        got += (size_t)r;
    }
}

static xport *homa_setup(int rank, int n, int (*pipes)[2])
{
    homa_x *h = calloc(1, sizeof(*h));
    char astr[INET_ADDRSTRLEN] = "127.0.0.1";
    if (g_addr.s_addr) inet_ntop(AF_INET, &g_addr, astr, sizeof(astr));
    setenv("NCCL_HOMA_ADDRS", astr, g_addr.s_addr != 0);
    if (drv_open(&h->d, HOMA_NCCL_PLUGIN, 11) != 0 || drv_init(&h->d) != ncclSuccess)
        DIE("plugin init");
    char mine[NCCL_NET_HANDLE_MAXSIZE], next[NCCL_NET_HANDLE_MAXSIZE];
    void *l;
    if (drv_listen(&h->d, 0, mine, &l) != ncclSuccess) DIE("listen");
    write_all(pipes[(rank + n - 1) % n][1], mine, sizeof(mine));
    read_all(pipes[rank][0], next, sizeof(next));
    double end = now_s() + 30;
    while (!h->s || !h->r) {
        if (!h->s && drv_connect(&h->d, 0, next, &h->s) != ncclSuccess) DIE("connect");
        if (!h->r && drv_accept(&h->d, l, &h->r) != ncclSuccess) DIE("accept");
        if (now_s() > end) DIE("connection timed out");
    }
    drv_regmr(&h->d, h->s, NULL, 0, NCCL_PTR_HOST, &h->smh);
    drv_regmr(&h->d, h->r, NULL, 0, NCCL_PTR_HOST, &h->rmh);
    h->x = (xport){hx_isend, hx_irecv, hx_test};
    return &h->x;
}

static xport *tcp_setup(int rank, int n, int (*pipes)[2], int ns)
{
    tcp_x *t = calloc(1, sizeof(*t));
    t->ns = ns;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr =
                                g_addr.s_addr ? g_addr.s_addr : htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 64) ||
        getsockname(lfd, (struct sockaddr *)&a, &al))
        DIE("tcp listen: %s", strerror(errno));
    write_all(pipes[(rank + n - 1) % n][1], &a, sizeof(a));
    struct sockaddr_in b;
    read_all(pipes[rank][0], &b, sizeof(b));
    for (int j = 0; j < ns; j++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&b, sizeof(b)) != 0)
            DIE("tcp connect: %s", strerror(errno));
        uint8_t idx = (uint8_t)j;
        write_all(fd, &idx, 1); /* which socket of the connection this is */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        t->out.fd[j] = fd;
    }
    for (int j = 0; j < ns; j++) {
        int fd = accept(lfd, NULL, NULL);
        uint8_t idx;
        if (fd < 0 || read(fd, &idx, 1) != 1 || idx >= ns) DIE("tcp accept");
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        t->in.fd[idx] = fd;
    }
    close(lfd);
    t->x = (xport){tx_isend, tx_irecv, tx_test};
    return &t->x;
}

/* ---- the ring allreduce ------------------------------------------------ */

/* Sends [sbuf, +slen) to the next rank while receiving rlen bytes into
 * rbuf from the previous one, in CHUNK-sized messages, WINDOW of each in
 * flight. */
static void exchange(xport *x, uint8_t *sbuf, size_t slen, uint8_t *rbuf, size_t rlen)
{
    size_t ns = slen ? (slen + CHUNK - 1) / CHUNK : 1, nr = rlen ? (rlen + CHUNK - 1) / CHUNK : 1;
    void *sq[WINDOW], *rq[WINDOW];
    size_t sp = 0, sd = 0, rp = 0, rd = 0;
    double end = now_s() + 60;
    while (sd < ns || rd < nr) {
        while (sp < ns && sp - sd < WINDOW) {
            size_t off = sp * CHUNK, len = slen - off < CHUNK ? slen - off : CHUNK;
            void *req = NULL;
            if (x->isend(x, sbuf + off, slen ? len : 0, &req) != 0) DIE("isend");
            if (!req) break;
            sq[sp++ % WINDOW] = req;
        }
        while (rp < nr && rp - rd < WINDOW) {
            size_t off = rp * CHUNK, len = rlen - off < CHUNK ? rlen - off : CHUNK;
            void *req = NULL;
            if (x->irecv(x, rbuf + off, rlen ? len : 0, &req) != 0) DIE("irecv");
            if (!req) break;
            rq[rp++ % WINDOW] = req;
        }
        int done = 0;
        if (sd < sp) {
            if (x->test(x, sq[sd % WINDOW], &done) != 0) DIE("test");
            if (done) sd++;
        }
        if (rd < rp) {
            if (x->test(x, rq[rd % WINDOW], &done) != 0) DIE("test");
            if (done) rd++;
        }
        if (now_s() > end) DIE("exchange timed out");
        /* NCCL's proxy spins on a core of its own; here the ranks share
         * few cores, so a rank that waits lets the others run. */
        if (!done) sched_yield();
    }
}

static void allreduce(xport *x, float *data, float *tmp, size_t count, int rank, int n)
{
    size_t base = count / (size_t)n;
#define CH_OFF(c) ((size_t)(c)*base)
#define CH_LEN(c) ((c) == n - 1 ? count - base * (size_t)(n - 1) : base)
    for (int s = 0; s < n - 1; s++) { /* reduce-scatter */
        int sc = ((rank - s) % n + n) % n, rc = ((rank - s - 1) % n + n) % n;
        exchange(x, (uint8_t *)(data + CH_OFF(sc)), CH_LEN(sc) * 4, (uint8_t *)tmp, CH_LEN(rc) * 4);
        float *dst = data + CH_OFF(rc);
        for (size_t i = 0; i < CH_LEN(rc); i++)
            dst[i] += tmp[i];
    }
    for (int s = 0; s < n - 1; s++) { /* allgather */
        int sc = ((rank + 1 - s) % n + n) % n, rc = ((rank - s) % n + n) % n;
        exchange(x, (uint8_t *)(data + CH_OFF(sc)), CH_LEN(sc) * 4, (uint8_t *)(data + CH_OFF(rc)),
                 CH_LEN(rc) * 4);
    }
}

typedef struct opts {
    int ranks, runs, socks, quick;
    const char *transport;
    const char *netns; /* NULL: loopback */
    size_t sizes[32];
    int nsizes;
} opts;

static void rank_main(int rank, const opts *o, int (*pipes)[2], shared *sh, int tcp)
{
    g_rank = rank;
    xport *x = tcp ? tcp_setup(rank, o->ranks, pipes, o->socks) : homa_setup(rank, o->ranks, pipes);
    size_t maxb = 0;
    for (int i = 0; i < o->nsizes; i++)
        if (o->sizes[i] > maxb) maxb = o->sizes[i];
    float *data = malloc(maxb + 64), *tmp = malloc(maxb + 64);
    if (!data || !tmp) DIE("malloc");
    for (int si = 0; si < o->nsizes; si++) {
        size_t count = o->sizes[si] / 4;
        if (count < (size_t)o->ranks) count = (size_t)o->ranks;
        /* Enough repetitions for ~50 ms a run, at least 2. */
        int reps = o->sizes[si] <= 65536        ? (o->quick ? 20 : 200)
                   : o->sizes[si] <= (4u << 20) ? 10
                                                : 3;
        if (o->quick && reps > 4 && o->sizes[si] > 65536) reps = 2;
        for (int run = 0; run < o->runs; run++) {
            for (size_t i = 0; i < count; i++)
                data[i] = (float)(rank + (int)(i % 7));
            pthread_barrier_wait(&sh->bar);
            double t0 = now_s();
            for (int k = 0; k < reps; k++)
                allreduce(x, data, tmp, count, rank, o->ranks);
            pthread_barrier_wait(&sh->bar);
            double dt = (now_s() - t0) / reps;
            if (rank == 0) sh->times[run] = dt;
            /* After reps allreduces of x: sum_r ... grows; check the first
             * element family only where the floats stay exact. */
            if (reps == 1 || run == 0) {
                /* recompute one allreduce from scratch and verify exactly */
                for (size_t i = 0; i < count; i++)
                    data[i] = (float)(rank + (int)(i % 7));
                allreduce(x, data, tmp, count, rank, o->ranks);
                float base = (float)(o->ranks * (o->ranks - 1) / 2);
                for (size_t i = 0; i < count; i++)
                    if (data[i] != base + (float)(o->ranks * (int)(i % 7)))
                        DIE("wrong sum at %zu of %zu: %g", i, count, data[i]);
            }
            pthread_barrier_wait(&sh->bar);
        }
        if (rank == 0) {
            double t[64];
            memcpy(t, sh->times, sizeof(double) * (size_t)o->runs);
            for (int i = 0; i < o->runs; i++) /* insertion sort */
                for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                    double z = t[j];
                    t[j] = t[j - 1];
                    t[j - 1] = z;
                }
            double med = o->runs % 2 ? t[o->runs / 2] : (t[o->runs / 2 - 1] + t[o->runs / 2]) / 2;
            double bytes = (double)count * 4;
            double alg = bytes / med / 1e9;
            double bus = alg * 2.0 * (o->ranks - 1) / o->ranks;
            printf("%-5s %2d ranks %11zu B  %10.1f us  algbw %7.3f GB/s  busbw %7.3f GB/s"
                   "  (min %.1f, max %.1f us, %d runs)\n",
                   tcp ? "tcp" : "homa", o->ranks, (size_t)bytes, med * 1e6, alg, bus, t[0] * 1e6,
                   t[o->runs - 1] * 1e6, o->runs);
            fflush(stdout);
        }
    }
    pthread_barrier_wait(&sh->bar);
}

/* Moves this (single-threaded, just forked) rank into namespace NAME-h<i>
 * and finds its address there. */
static void enter_host(const char *name, int i)
{
    char path[256];
    snprintf(path, sizeof(path), "/var/run/netns/%s-h%d", name, i);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) DIE("enter %s: %s", path, strerror(errno));
    close(fd);
    struct ifaddrs *ifs, *p;
    if (getifaddrs(&ifs) != 0) DIE("getifaddrs: %s", strerror(errno));
    for (p = ifs; p != NULL; p = p->ifa_next)
        if (p->ifa_addr && p->ifa_addr->sa_family == AF_INET && (p->ifa_flags & IFF_UP) &&
            !(p->ifa_flags & IFF_LOOPBACK)) {
            g_addr = ((struct sockaddr_in *)p->ifa_addr)->sin_addr;
            break;
        }
    freeifaddrs(ifs);
    if (!g_addr.s_addr) DIE("no IPv4 address in %s", path);
}

static int run(const opts *o, int tcp)
{
    shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return -1;
    pthread_barrierattr_t ba;
    pthread_barrierattr_init(&ba);
    pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&sh->bar, &ba, (unsigned)o->ranks);
    int pipes[MAX_RANKS][2];
    for (int i = 0; i < o->ranks; i++)
        if (pipe(pipes[i])) return -1;
    pid_t pids[MAX_RANKS];
    for (int i = 0; i < o->ranks; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            alarm(600);
            g_rank = i;
            if (o->netns) enter_host(o->netns, i);
            rank_main(i, o, pipes, sh, tcp);
            _exit(0);
        }
    }
    int bad = 0;
    for (int i = 0; i < o->ranks; i++) {
        int st;
        if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) bad = 1;
    }
    munmap(sh, sizeof(*sh));
    return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
    opts o = {.ranks = 4, .runs = 5, .socks = 4, .transport = "both"};
    const char *sizes = "8,1024,65536,1048576,16777216,67108864";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--transport") && i + 1 < argc)
            o.transport = argv[++i];
        else if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
            o.ranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            o.runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--socks") && i + 1 < argc)
            o.socks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
            sizes = argv[++i];
        else if (!strcmp(argv[i], "--netns") && i + 1 < argc)
            o.netns = argv[++i];
        else if (!strcmp(argv[i], "--quick")) {
            o.quick = 1;
            o.runs = 3;
            sizes = "8,65536,4194304";
        } else {
            fprintf(stderr,
                    "usage: %s [--transport homa|tcp|both] [--ranks 2..8] [--runs R] "
                    "[--sizes b,...] [--socks 1..8] [--quick] [--netns CLUSTER]\n",
                    argv[0]);
            return 2;
        }
    }
    if (o.ranks < 2 || o.ranks > MAX_RANKS || o.runs < 1 || o.runs > 64 || o.socks < 1 ||
        o.socks > MAX_SOCKS) {
        fprintf(stderr, "nccl_bench: --ranks 2..8, --runs 1..64, --socks 1..8\n");
        return 2;
    }
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", sizes);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && o.nsizes < 32;
         tok = strtok_r(NULL, ",", &save)) {
        char *end;
        unsigned long long v = strtoull(tok, &end, 10);
        if (*end || v == 0 || v > (1ull << 30)) {
            fprintf(stderr, "nccl_bench: bad size \"%s\"\n", tok);
            return 2;
        }
        o.sizes[o.nsizes++] = (size_t)v;
    }
    int rc = 0;
    if (strcmp(o.transport, "tcp")) rc |= run(&o, 0);
    if (strcmp(o.transport, "homa")) rc |= run(&o, 1);
    if (rc) fprintf(stderr, "nccl_bench: FAILED\n");
    return rc ? 1 : 0;
}
