/* homa-coll-bench: allreduce latency and bus bandwidth of the libhoma
 * collectives (docs/collectives.md).
 *
 * By default it forks --ranks processes on this host; they meet through a
 * rendezvous file and run allreduce over loopback for sizes from
 * --min-bytes to --max-bytes (x2 steps).  With --rank it runs one rank
 * only, for a job spread over hosts (every host passes the same
 * --rendezvous path on a shared file system and its own --host).
 *
 * Each iteration is timed on every rank between a barrier and the end of
 * its allreduce; the iteration's time is the slowest rank's.  Rank 0
 * prints the median and p99 over iterations and the bus bandwidth
 * 2 (n-1)/n * bytes / median (the bytes each rank's link must carry in a
 * ring allreduce, as in nccl-tests). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <homa/coll.h>
#include <homa/homa.h>

struct opts {
    int ranks;
    int rank; /* -1: fork all ranks here */
    size_t min_bytes, max_bytes;
    int iters, warmup;
    homa_dtype dtype;
    homa_redop op;
    uint32_t chunk_bytes, window, small_bytes, timeout_ms;
    uint32_t rpc_timeout_ms; /* engine silence timeout; 0 = runtime default */
    int busy_poll_us;        /* -1: 0 if the forked ranks outnumber the CPUs, else default */
    const char *host;
    const char *rendezvous;
    const char *json;
    int check;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno != 0) return -1;
    if (*end == 'k' || *end == 'K')
        v <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, end++;
    else if (*end == 'g' || *end == 'G')
        v <<= 30, end++;
    if (*end != '\0') return -1;
    *out = (size_t)v;
    return 0;
}

static const char *dtype_names[] = {"float32", "float16", "bfloat16", "int32", "int64"};
static const char *op_names[] = {"sum", "avg", "max", "min"};

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: homa-coll-bench [options]\n"
               "  --ranks N          ranks (default 4)\n"
               "  --min-bytes B      smallest buffer (default 4K; K/M/G suffixes)\n"
               "  --max-bytes B      largest buffer (default 64M)\n"
               "  --iters N          timed iterations per size (default 50; fewer for big\n"
               "                     sizes: at most 2 GB of buffer per size, at least 10)\n"
               "  --warmup N         untimed iterations per size (default 3)\n"
               "  --dtype T          float32 float16 bfloat16 int32 int64 (default float32)\n"
               "  --op OP            sum avg max min (default sum)\n"
               "  --chunk-bytes B    homa_comm_options.chunk_bytes (default 1M)\n"
               "  --window N         messages in flight per peer (default 4)\n"
               "  --small-bytes B    recursive doubling up to B (default 64K)\n"
               "  --timeout-ms N     communicator timeout (default 30000)\n"
               "  --rpc-timeout-ms N Homa RPC silence timeout of each rank's runtime\n"
               "                     (config.timeout_ticks; default 1000, 0 = the runtime's\n"
               "                     own default of 100 ms)\n"
               "  --busy-poll-us N   runtime busy_poll_us (default: 0 when the ranks forked\n"
               "                     here outnumber the CPUs, else the runtime's 50;\n"
               "                     HOMA_BUSY_POLL_US overrides)\n"
               "  --host ADDR        address of this host's ranks (default 127.0.0.1)\n"
               "  --rendezvous PATH  rendezvous file (default: a fresh temporary file)\n"
               "  --rank R           run only rank R (multi-host; needs --rendezvous)\n"
               "  --no-check         don't verify results\n"
               "  --json FILE        also write results as JSON (\"-\" = stdout)\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof(*o));
    o->ranks = 4;
    o->rank = -1;
    o->min_bytes = 4 << 10;
    o->max_bytes = 64 << 20;
    o->iters = 50;
    o->warmup = 3;
    o->dtype = HOMA_FLOAT32;
    o->op = HOMA_SUM;
    homa_comm_options d;
    homa_comm_options_default(&d);
    o->chunk_bytes = d.chunk_bytes;
    o->window = d.window;
    o->small_bytes = d.small_bytes;
    o->timeout_ms = d.timeout_ms;
    o->host = "127.0.0.1";
    o->check = 1;
    /* The runtime's 100 ms takes a rank that waits for a CPU on a crowded
     * host (4 ranks on 2 shared cores) for a dead one; 1 s as in the
     * runtime tests. */
    o->rpc_timeout_ms = 1000;
    o->busy_poll_us = -1;
    static const struct option lo[] = {
        {"ranks", required_argument, 0, 'n'},
        {"min-bytes", required_argument, 0, 'a'},
        {"max-bytes", required_argument, 0, 'b'},
        {"iters", required_argument, 0, 'i'},
        {"warmup", required_argument, 0, 'w'},
        {"dtype", required_argument, 0, 'd'},
        {"op", required_argument, 0, 'o'},
        {"chunk-bytes", required_argument, 0, 'c'},
        {"window", required_argument, 0, 'W'},
        {"small-bytes", required_argument, 0, 's'},
        {"timeout-ms", required_argument, 0, 't'},
        {"host", required_argument, 0, 'H'},
        {"rendezvous", required_argument, 0, 'r'},
        {"rank", required_argument, 0, 'R'},
        {"json", required_argument, 0, 'j'},
        {"no-check", no_argument, 0, 'N'},
        {"rpc-timeout-ms", required_argument, 0, 'T'},
        {"busy-poll-us", required_argument, 0, 'B'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    size_t v;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'n':
            o->ranks = atoi(optarg);
            break;
        case 'a':
            if (parse_size(optarg, &o->min_bytes)) return -1;
            break;
        case 'b':
            if (parse_size(optarg, &o->max_bytes)) return -1;
            break;
        case 'i':
            o->iters = atoi(optarg);
            break;
        case 'w':
            o->warmup = atoi(optarg);
            break;
        case 'd': {
            int t = lookup(optarg, dtype_names, 5);
            if (t < 0) return -1;
            o->dtype = (homa_dtype)t;
            break;
        }
        case 'o': {
            int t = lookup(optarg, op_names, 4);
            if (t < 0) return -1;
            o->op = (homa_redop)t;
            break;
        }
        case 'c':
            if (parse_size(optarg, &v) || v > UINT32_MAX) return -1;
            o->chunk_bytes = (uint32_t)v;
            break;
        case 'W':
            o->window = (uint32_t)atoi(optarg);
            break;
        case 's':
            if (parse_size(optarg, &v) || v > UINT32_MAX) return -1;
            o->small_bytes = (uint32_t)v;
            break;
        case 't':
            o->timeout_ms = (uint32_t)atoi(optarg);
            break;
        case 'B':
            o->busy_poll_us = atoi(optarg);
            if (o->busy_poll_us < 0) return -1;
            break;
        case 'T':
            o->rpc_timeout_ms = (uint32_t)atoi(optarg);
            break;
        case 'H':
            o->host = optarg;
            break;
        case 'r':
            o->rendezvous = optarg;
            break;
        case 'R':
            o->rank = atoi(optarg);
            break;
        case 'j':
            o->json = optarg;
            break;
        case 'N':
            o->check = 0;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            return -1;
        }
    }
    if (optind != argc || o->ranks < 1 || o->ranks > 4096 || o->iters < 1 || o->warmup < 0 ||
        o->min_bytes == 0 || o->max_bytes < o->min_bytes)
        return -1;
    if (o->rank >= o->ranks || (o->rank >= 0 && o->rendezvous == NULL)) return -1;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Input value of `rank`: small integers, so every dtype sums exactly. */
static void fill(void *buf, size_t count, homa_dtype dt, int rank)
{
    uint8_t *p = buf;
    for (size_t i = 0; i < count; i++) {
        int v = (int)((i + (size_t)rank) % 7);
        switch (dt) {
        case HOMA_FLOAT32: {
            float f = (float)v;
            memcpy(p + 4 * i, &f, 4);
            break;
        }
        case HOMA_FLOAT16: {
            /* integers 0..6 as IEEE halves */
            static const uint16_t halves[7] = {0x0000, 0x3c00, 0x4000, 0x4200,
                                               0x4400, 0x4500, 0x4600};
            uint16_t h = halves[v];
            memcpy(p + 2 * i, &h, 2);
            break;
        }
        case HOMA_BFLOAT16: {
            float f = (float)v;
            uint32_t u;
            memcpy(&u, &f, 4);
            uint16_t h = (uint16_t)(u >> 16); /* exact for small integers */
            memcpy(p + 2 * i, &h, 2);
            break;
        }
        case HOMA_INT32: {
            int32_t x = v;
            memcpy(p + 4 * i, &x, 4);
            break;
        }
        case HOMA_INT64: {
            int64_t x = v;
            memcpy(p + 8 * i, &x, 8);
            break;
        }
        }
    }
}

/* Checks a SUM or MAX result of fill() over n ranks (other ops: skipped). */
static int verify(const void *buf, size_t count, homa_dtype dt, homa_redop op, int n)
{
    if (op != HOMA_SUM && op != HOMA_MAX) return 0;
    const uint8_t *p = buf;
    for (size_t i = 0; i < count; i++) {
        long want = 0;
        for (int r = 0; r < n; r++) {
            long v = (long)((i + (size_t)r) % 7);
            want = op == HOMA_SUM ? want + v : (v > want ? v : want);
        }
        double got = 0;
        switch (dt) {
        case HOMA_FLOAT32: {
            float f;
            memcpy(&f, p + 4 * i, 4);
            got = f;
            break;
        }
        case HOMA_FLOAT16: {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            int e = (h >> 10) & 0x1f, m = h & 0x3ff;
            got = e == 0 ? m / 16777216.0 : (1024 + m) * (double)(1ll << e) / (1 << 25);
            break;
        }
        case HOMA_BFLOAT16: {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            uint32_t u = (uint32_t)h << 16;
            float f;
            memcpy(&f, &u, 4);
            got = f;
            break;
        }
        case HOMA_INT32: {
            int32_t x;
            memcpy(&x, p + 4 * i, 4);
            got = x;
            break;
        }
        case HOMA_INT64: {
            int64_t x;
            memcpy(&x, p + 8 * i, 8);
            got = (double)x;
            break;
        }
        }
        if (got != (double)want) return -1;
    }
    return 0;
}

struct result {
    size_t bytes;
    int iters;
    double median_us, p99_us, mean_us, min_us, algbw, busbw;
};

static int run_rank(const struct opts *o, int rank, const char *path)
{
    homa_runtime *rt;
    homa_runtime_options ro;
    homa_runtime_options_default(&ro);
    if (o->rpc_timeout_ms > 0)
        ro.config.timeout_ticks =
            (uint32_t)(((uint64_t)o->rpc_timeout_ms * 1000000ull + ro.config.tick_ns - 1) /
                       ro.config.tick_ns);
    if (o->busy_poll_us >= 0) {
        ro.busy_poll_us = (uint32_t)o->busy_poll_us;
    } else if (o->rank < 0 && o->ranks > sysconf(_SC_NPROCESSORS_ONLN)) {
        /* A spinning rank only delays the peer that shares its core. */
        ro.busy_poll_us = 0;
    }
    const char *bp_env = getenv("HOMA_BUSY_POLL_US");
    unsigned busy_poll = bp_env ? (unsigned)atoi(bp_env) : ro.busy_poll_us; /* as reported */
    int rc = homa_runtime_create(&ro, &rt);
    if (rc != 0) {
        fprintf(stderr, "rank %d: runtime: %s\n", rank, homa_strerror(rc));
        return 1;
    }
    homa_comm_options co;
    homa_comm_options_default(&co);
    co.chunk_bytes = o->chunk_bytes;
    co.window = o->window;
    co.small_bytes = o->small_bytes;
    co.timeout_ms = o->timeout_ms;
    co.runtime = rt;
    homa_endpoint local;
    if (homa_endpoint_from_host(o->host, 0, &local) != 0) {
        fprintf(stderr, "rank %d: bad --host %s\n", rank, o->host);
        return 1;
    }
    homa_comm *c;
    rc = homa_comm_create_file(path, rank, o->ranks, &local, &co, &c);
    if (rc != 0) {
        fprintf(stderr, "rank %d: rendezvous: %s\n", rank, homa_strerror(rc));
        return 1;
    }
    int n = o->ranks;
    size_t es = homa_dtype_size(o->dtype);
    void *in = malloc(o->max_bytes), *out = malloc(o->max_bytes);
    int maxit = o->iters;
    uint64_t *lat = malloc((size_t)maxit * sizeof(*lat));
    uint64_t *sorted = malloc((size_t)maxit * sizeof(*sorted));
    struct result *res = calloc(64, sizeof(*res));
    int nres = 0, fails = 0;
    if (in == NULL || out == NULL || lat == NULL || sorted == NULL || res == NULL) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        return 1;
    }
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes && nres < 64; bytes *= 2) {
        size_t count = bytes / es;
        fill(in, count, o->dtype, rank);
        /* Keep every size to about 2 GB of buffer. */
        int iters = maxit;
        if ((uint64_t)iters * bytes > (2ull << 30)) iters = (int)((2ull << 30) / bytes);
        if (iters < 10) iters = 10 < maxit ? 10 : maxit;
        for (int it = -o->warmup; it < iters; it++) {
            rc = homa_barrier(c);
            uint64_t t0 = now_ns();
            if (rc == 0) rc = homa_allreduce(c, in, out, count, o->dtype, o->op);
            uint64_t t1 = now_ns();
            if (rc != 0) {
                /* The engine's view helps tell a dead peer from a stall. */
                homa_counters ec;
                homa_runtime_counters(rt, &ec, NULL);
                fprintf(stderr,
                        "rank %d: allreduce of %zu bytes, iteration %d: %s after %.1f ms "
                        "(engine: client_timeouts %llu, peer_failures %llu, resend_out %llu, "
                        "retransmit_pkts %llu)\n",
                        rank, bytes, it, homa_strerror(rc), (double)(t1 - t0) / 1e6,
                        (unsigned long long)ec.client_timeouts,
                        (unsigned long long)ec.peer_failures, (unsigned long long)ec.resend_out,
                        (unsigned long long)ec.retransmit_pkts);
                return 1;
            }
            if (it == -o->warmup && o->check && verify(out, count, o->dtype, o->op, n) != 0) {
                fprintf(stderr, "rank %d: wrong result for %zu bytes\n", rank, bytes);
                fails++;
            }
            if (it >= 0) lat[it] = t1 - t0;
        }
        /* The slowest rank defines each iteration (with the collectives
         * themselves). */
        rc = homa_allreduce(c, lat, lat, (size_t)iters, HOMA_INT64, HOMA_MAX);
        if (rc != 0) {
            fprintf(stderr, "rank %d: gathering times: %s\n", rank, homa_strerror(rc));
            return 1;
        }
        memcpy(sorted, lat, (size_t)iters * sizeof(*sorted));
        qsort(sorted, (size_t)iters, sizeof(*sorted), cmp_u64);
        double sum = 0;
        for (int i = 0; i < iters; i++)
            sum += (double)sorted[i];
        struct result *r = &res[nres++];
        r->bytes = count * es;
        r->iters = iters;
        r->median_us =
            (iters % 2 ? (double)sorted[iters / 2]
                       : ((double)sorted[iters / 2 - 1] + (double)sorted[iters / 2]) / 2) /
            1e3;
        int p99 = (int)((iters * 99 + 99) / 100) - 1; /* nearest rank */
        r->p99_us = (double)sorted[p99 < iters ? p99 : iters - 1] / 1e3;
        r->mean_us = sum / iters / 1e3;
        r->min_us = (double)sorted[0] / 1e3;
        r->algbw = (double)r->bytes / (r->median_us * 1e3); /* bytes/ns = GB/s */
        r->busbw = r->algbw * 2.0 * (n - 1) / n;
        if (rank == 0) {
            if (nres == 1)
                printf("# %d ranks, %s %s, chunk %u, window %u, small %u, busy poll %u us, "
                       "rpc timeout %u ms\n"
                       "%12s %8s %12s %12s %12s %10s %10s\n",
                       n, dtype_names[o->dtype], op_names[o->op], o->chunk_bytes, o->window,
                       o->small_bytes, busy_poll, o->rpc_timeout_ms, "bytes", "iters", "median_us",
                       "p99_us", "mean_us", "algbw_GB/s", "busbw_GB/s");
            printf("%12zu %8d %12.1f %12.1f %12.1f %10.3f %10.3f\n", r->bytes, r->iters,
                   r->median_us, r->p99_us, r->mean_us, r->algbw, r->busbw);
            fflush(stdout);
        }
    }
    if (rank == 0 && o->json != NULL) {
        FILE *f = strcmp(o->json, "-") == 0 ? stdout : fopen(o->json, "w");
        if (f == NULL) {
            perror(o->json);
            fails++;
        } else {
            fprintf(f,
                    "{\"ranks\": %d, \"dtype\": \"%s\", \"op\": \"%s\", \"chunk_bytes\": %u, "
                    "\"window\": %u, \"small_bytes\": %u, \"busy_poll_us\": %u, "
                    "\"rpc_timeout_ms\": %u, \"results\": [",
                    n, dtype_names[o->dtype], op_names[o->op], o->chunk_bytes, o->window,
                    o->small_bytes, busy_poll, o->rpc_timeout_ms);
            for (int i = 0; i < nres; i++)
                fprintf(f,
                        "%s\n  {\"bytes\": %zu, \"iters\": %d, \"median_us\": %.2f, "
                        "\"p99_us\": %.2f, \"mean_us\": %.2f, \"min_us\": %.2f, "
                        "\"algbw_GBps\": %.4f, \"busbw_GBps\": %.4f}",
                        i ? "," : "", res[i].bytes, res[i].iters, res[i].median_us, res[i].p99_us,
                        res[i].mean_us, res[i].min_us, res[i].algbw, res[i].busbw);
            fprintf(f, "\n]}\n");
            if (f != stdout) fclose(f);
        }
    }
    homa_comm_destroy(c);
    homa_runtime_destroy(rt);
    free(in);
    free(out);
    free(lat);
    free(sorted);
    free(res);
    fflush(stdout);
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse_args(argc, argv, &o) != 0) {
        usage(stderr);
        return 2;
    }
    if (o.rank >= 0) return run_rank(&o, o.rank, o.rendezvous);

    char tmp[] = "/tmp/homa-coll-bench-XXXXXX";
    const char *path = o.rendezvous;
    if (path == NULL) {
        int fd = mkstemp(tmp);
        if (fd < 0) {
            perror("mkstemp");
            return 1;
        }
        close(fd);
        path = tmp;
    }
    /* Fork before any runtime exists: each rank starts single-threaded. */
    pid_t *pids = calloc((size_t)o.ranks, sizeof(*pids));
    if (pids == NULL) return 1;
    for (int r = 0; r < o.ranks; r++) {
        pids[r] = fork();
        if (pids[r] < 0) {
            perror("fork");
            return 1;
        }
        if (pids[r] == 0) {
            fflush(stdout);
            _exit(run_rank(&o, r, path));
        }
    }
    int failed = 0;
    for (int r = 0; r < o.ranks; r++) {
        int st;
        if (waitpid(pids[r], &st, 0) != pids[r] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) failed++;
    }
    if (o.rendezvous == NULL) unlink(path);
    free(pids);
    if (failed) fprintf(stderr, "homa-coll-bench: %d rank(s) failed\n", failed);
    return failed ? 1 : 0;
}
