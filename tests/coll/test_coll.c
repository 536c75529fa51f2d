/* Collectives over loopback: every rank is a thread with a runtime of its
 * own (so ranks behave like separate hosts), or a forked process for the
 * dead-rank test.  Results are compared with references computed here from
 * inputs chosen so every sum is exact in every dtype (multiples of 0.5 of
 * small magnitude), which makes float16/bfloat16 results exact too. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <homa/coll.h>
#include <homa/homa.h>

#include "coll/coll_internal.h"
#include "integration/rt_util.h"

#define MAXR 8

/* ---------------------------------------------------------------- values */

/* Input of `rank` at element i: a multiple of 0.5 in [-4, 4] for floats,
 * an integer for int32, a multiple of 2^33 for int64 (exercises the high
 * half).  Sums over up to 8 ranks are exact in every dtype. */
static double input(homa_dtype dt, int rank, size_t i, unsigned salt)
{
    int k = (int)((i * 7 + (size_t)rank * 13 + salt) % 17) - 8;
    switch (dt) {
    case HOMA_FLOAT32:
    case HOMA_FLOAT16:
    case HOMA_BFLOAT16:
        return k * 0.5;
    case HOMA_INT32:
        return k * 1000 + rank;
    case HOMA_INT64:
        return (double)k * 8589934592.0 + rank;
    }
    return 0;
}

static void put(void *buf, size_t i, homa_dtype dt, double v)
{
    uint8_t *p = buf;
    switch (dt) {
    case HOMA_FLOAT32: {
        float f = (float)v;
        memcpy(p + 4 * i, &f, 4);
        break;
    }
    case HOMA_FLOAT16: {
        uint16_t h = homa_coll_f32_to_f16((float)v);
        memcpy(p + 2 * i, &h, 2);
        break;
    }
    case HOMA_BFLOAT16: {
        uint16_t h = homa_coll_f32_to_bf16((float)v);
        memcpy(p + 2 * i, &h, 2);
        break;
    }
    case HOMA_INT32: {
        int32_t x = (int32_t)v;
        memcpy(p + 4 * i, &x, 4);
        break;
    }
    case HOMA_INT64: {
        int64_t x = (int64_t)v;
        memcpy(p + 8 * i, &x, 8);
        break;
    }
    }
}

static void fill_input(void *buf, size_t count, homa_dtype dt, int rank, unsigned salt)
{
    for (size_t i = 0; i < count; i++)
        put(buf, i, dt, input(dt, rank, i, salt));
}

/* Expected value of op over ranks 0..n-1 at element i. */
static double ref_value(homa_dtype dt, homa_redop op, int n, size_t i, unsigned salt)
{
    double acc = input(dt, 0, i, salt);
    for (int r = 1; r < n; r++) {
        double v = input(dt, r, i, salt);
        if (op == HOMA_MAX)
            acc = v > acc ? v : acc;
        else if (op == HOMA_MIN)
            acc = v < acc ? v : acc;
        else
            acc += v;
    }
    if (op == HOMA_AVG) {
        if (dt == HOMA_INT32 || dt == HOMA_INT64)
            acc = (double)((int64_t)acc / n); /* truncation toward zero */
        else
            acc = (double)((float)acc / (float)n); /* float32 division, then rounding */
    }
    return acc;
}

static void fill_expect(void *buf, size_t count, homa_dtype dt, homa_redop op, int n, unsigned salt)
{
    for (size_t i = 0; i < count; i++)
        put(buf, i, dt, ref_value(dt, op, n, i, salt));
}

static const char *dt_name[] = {"f32", "f16", "bf16", "i32", "i64"};
static const char *op_name[] = {"sum", "avg", "max", "min"};

/* --------------------------------------------------------------- cluster */

struct cluster {
    int n;
    homa_runtime *rt[MAXR];
    homa_socket *sock[MAXR];
    homa_comm *comm[MAXR];
    homa_endpoint eps[MAXR];
};

static void test_rt_opts(homa_runtime_options *o, const char *faults)
{
    rt_test_options(o, 0);
    if (faults != NULL) assert_int_equal(homa_faults_parse(faults, &o->faults, NULL, 0), 0);
}

static void comm_opts(homa_comm_options *co)
{
    homa_comm_options_default(co);
    co->timeout_ms = 20000u * SANITIZER_SLOWDOWN; /* a bug fails the test, not hangs it */
}

static void cluster_up(struct cluster *cl, int n, const homa_comm_options *co, const char *faults)
{
    memset(cl, 0, sizeof(*cl));
    cl->n = n;
    for (int i = 0; i < n; i++) {
        homa_runtime_options o;
        test_rt_opts(&o, faults);
        if (faults != NULL) o.faults.seed = 1000 + (uint64_t)i;
        assert_int_equal(homa_runtime_create(&o, &cl->rt[i]), 0);
        homa_endpoint local;
        assert_int_equal(homa_endpoint_parse("127.0.0.1:0", &local), 0);
        assert_int_equal(homa_socket_bind(cl->rt[i], &local, &cl->sock[i]), 0);
        homa_socket_local(cl->sock[i], &cl->eps[i]);
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(homa_comm_create(cl->sock[i], i, n, cl->eps, co, &cl->comm[i]), 0);
}

static void cluster_down(struct cluster *cl)
{
    for (int i = 0; i < cl->n; i++) {
        homa_comm_destroy(cl->comm[i]);
        homa_socket_close(cl->sock[i]);
        homa_runtime_destroy(cl->rt[i]);
    }
}

typedef int (*rank_fn)(struct cluster *cl, int rank, void *arg);

struct rank_thread {
    struct cluster *cl;
    int rank;
    rank_fn fn;
    void *arg;
    int failures;
    pthread_t th;
};

static void *rank_main(void *p)
{
    struct rank_thread *t = p;
    t->failures = t->fn(t->cl, t->rank, t->arg);
    return NULL;
}

/* Runs fn on every rank in its own thread; fails the test if any rank
 * reports failures. */
static void run_ranks(struct cluster *cl, rank_fn fn, void *arg)
{
    struct rank_thread t[MAXR];
    for (int i = 0; i < cl->n; i++) {
        t[i] = (struct rank_thread){cl, i, fn, arg, 0, 0};
        assert_int_equal(pthread_create(&t[i].th, NULL, rank_main, &t[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < cl->n; i++) {
        pthread_join(t[i].th, NULL);
        failures += t[i].failures;
    }
    assert_int_equal(failures, 0);
}

/* Runs fn on clusters of 2, 3, 4 and 5 ranks with the test options and the
 * given chunk size. */
static void run_2_to_5(uint32_t chunk_bytes, rank_fn fn)
{
    for (int n = 2; n <= 5; n++) {
        homa_comm_options co;
        comm_opts(&co);
        co.chunk_bytes = chunk_bytes;
        struct cluster cl;
        cluster_up(&cl, n, &co, NULL);
        run_ranks(&cl, fn, NULL);
        cluster_down(&cl);
    }
}

/* Element-by-element comparison; prints the first few mismatches. */
static int compare(const char *what, int rank, const void *got, const void *want, size_t count,
                   homa_dtype dt)
{
    size_t es = homa_dtype_size(dt);
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        if (memcmp((const uint8_t *)got + i * es, (const uint8_t *)want + i * es, es) == 0)
            continue;
        if (bad++ < 3) fprintf(stderr, "%s: rank %d element %zu differs\n", what, rank, i);
    }
    return bad ? 1 : 0;
}

/* ------------------------------------------------------------- allreduce */

struct ar_case {
    const size_t *sizes;
    size_t nsizes;
    int in_place;
    unsigned salt;
    int all_types; /* 0: float32 sum and bfloat16 avg only */
};

static int allreduce_rank(struct cluster *cl, int rank, void *arg)
{
    const struct ar_case *ac = arg;
    homa_comm *c = cl->comm[rank];
    int fails = 0;
    size_t maxc = 0;
    for (size_t s = 0; s < ac->nsizes; s++)
        if (ac->sizes[s] > maxc) maxc = ac->sizes[s];
    uint8_t *in = malloc(maxc * 8 + 8), *out = malloc(maxc * 8 + 8), *want = malloc(maxc * 8 + 8);
    for (size_t s = 0; s < ac->nsizes; s++) {
        size_t count = ac->sizes[s];
        for (int dt = HOMA_FLOAT32; dt <= HOMA_INT64; dt++) {
            for (int op = HOMA_SUM; op <= HOMA_MIN; op++) {
                if (!ac->all_types && !(dt == HOMA_FLOAT32 && op == HOMA_SUM) &&
                    !(dt == HOMA_BFLOAT16 && op == HOMA_AVG))
                    continue;
                unsigned salt = ac->salt + (unsigned)(s * 31 + (size_t)dt * 5 + (size_t)op);
                fill_input(in, count, (homa_dtype)dt, rank, salt);
                fill_expect(want, count, (homa_dtype)dt, (homa_redop)op, cl->n, salt);
                memset(out, 0xa5, count * 8 + 8);
                void *dst = ac->in_place ? in : out;
                int rc = homa_allreduce(c, in, dst, count, (homa_dtype)dt, (homa_redop)op);
                if (rc != 0) {
                    fprintf(stderr, "allreduce n=%d count=%zu %s %s: %s\n", cl->n, count,
                            dt_name[dt], op_name[op], homa_strerror(rc));
                    free(in);
                    free(out);
                    free(want);
                    return 1;
                }
                char what[96];
                snprintf(what, sizeof(what), "allreduce n=%d count=%zu %s %s", cl->n, count,
                         dt_name[dt], op_name[op]);
                fails += compare(what, rank, dst, want, count, (homa_dtype)dt);
                /* nothing written past the end */
                if (!ac->in_place && out[count * homa_dtype_size((homa_dtype)dt)] != 0xa5) fails++;
            }
        }
    }
    free(in);
    free(out);
    free(want);
    return fails;
}

static const size_t matrix_sizes[] = {0, 1, 7, 1000, 100003};

static void test_allreduce_matrix(void **state)
{
    (void)state;
    for (int n = 2; n <= 5; n++) {
        homa_comm_options co;
        comm_opts(&co);
        struct cluster cl;
        cluster_up(&cl, n, &co, NULL);
        struct ar_case ac = {matrix_sizes, 5, 0, (unsigned)n, 1};
        run_ranks(&cl, allreduce_rank, &ac);
        cluster_down(&cl);
    }
}

/* In place, ring for every size (small_bytes 0), small chunks so that even
 * 1000 elements are cut in several messages, window 2. */
static void test_allreduce_ring_in_place(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 3, 7, 1000, 30011};
    for (int n = 2; n <= 5; n++) {
        homa_comm_options co;
        comm_opts(&co);
        co.small_bytes = 0;
        co.chunk_bytes = 512;
        co.window = 2;
        struct cluster cl;
        cluster_up(&cl, n, &co, NULL);
        struct ar_case ac = {sizes, 5, 1, 7, n == 3 || n == 5};
        run_ranks(&cl, allreduce_rank, &ac);
        cluster_down(&cl);
    }
}

/* Recursive doubling with chunked messages (small_bytes huge, 1 KB
 * chunks), including the fold for 3 and 5 ranks, in place. */
static void test_allreduce_rd_chunked(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 1000, 20011};
    for (int n = 2; n <= 5; n++) {
        homa_comm_options co;
        comm_opts(&co);
        co.small_bytes = UINT32_MAX;
        co.chunk_bytes = 1024;
        co.window = 3;
        struct cluster cl;
        cluster_up(&cl, n, &co, NULL);
        struct ar_case ac = {sizes, 3, 1, 3, n != 4};
        run_ranks(&cl, allreduce_rank, &ac);
        cluster_down(&cl);
    }
}

/* 3 MB: recursive doubling with the default chunk size (clamped just below
 * the engine's largest message, so near-maximal messages), and the ring
 * with default options (pipelined in 64 KB chunks), in place. */
static void test_allreduce_large(void **state)
{
    (void)state;
    static const size_t sizes[] = {786433}; /* 3 MB of float32, not divisible by 3 or 4 */
    for (int pass = 0; pass < 2; pass++) {
        int n = pass == 0 ? 4 : 3;
        homa_comm_options co;
        comm_opts(&co);
        if (pass == 0) co.small_bytes = UINT32_MAX;
        struct cluster cl;
        cluster_up(&cl, n, &co, NULL);
        const homa_config *cfg = homa_runtime_config(cl.rt[0]);
        assert_true(cl.comm[0]->chunk_bytes + COLL_HDR_SIZE <= cfg->max_message_length);
        assert_true(cl.comm[0]->chunk_bytes + COLL_HDR_SIZE + 8 > cfg->max_message_length);
        struct ar_case ac = {sizes, 1, pass, 11, 0};
        run_ranks(&cl, allreduce_rank, &ac);
        cluster_down(&cl);
    }
}

/* One rank: every collective is a copy. */
static void test_single_rank(void **state)
{
    (void)state;
    struct cluster cl;
    homa_comm_options co;
    comm_opts(&co);
    cluster_up(&cl, 1, &co, NULL);
    homa_comm *c = cl.comm[0];
    assert_int_equal(homa_comm_size(c), 1);
    assert_int_equal(homa_comm_rank(c), 0);
    assert_ptr_equal(homa_comm_socket(c), cl.sock[0]);
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0};
    assert_int_equal(homa_allreduce(c, a, b, 5, HOMA_FLOAT32, HOMA_AVG), 0);
    assert_memory_equal(a, b, sizeof(a));
    assert_int_equal(homa_allreduce(c, a, a, 5, HOMA_FLOAT32, HOMA_SUM), 0);
    assert_int_equal(homa_broadcast(c, a, 5, HOMA_FLOAT32, 0), 0);
    memset(b, 0, sizeof(b));
    assert_int_equal(homa_allgather(c, a, b, 5, HOMA_FLOAT32), 0);
    assert_memory_equal(a, b, sizeof(a));
    memset(b, 0, sizeof(b));
    assert_int_equal(homa_reduce_scatter(c, a, b, 5, HOMA_FLOAT32, HOMA_MAX), 0);
    assert_memory_equal(a, b, sizeof(a));
    assert_int_equal(homa_barrier(c), 0);
    cluster_down(&cl);
}

/* ------------------------------------------- broadcast, allgather, r-s */

static int bcast_rank(struct cluster *cl, int rank, void *arg)
{
    (void)arg;
    static const size_t sizes[] = {0, 1, 1000, 100003};
    homa_comm *c = cl->comm[rank];
    int fails = 0;
    size_t maxc = 100003;
    uint8_t *buf = malloc(maxc * 4), *want = malloc(maxc * 4);
    for (size_t s = 0; s < 4; s++) {
        for (int root = 0; root < cl->n; root++) {
            size_t count = sizes[s];
            homa_dtype dt = s == 2 ? HOMA_FLOAT16 : HOMA_INT32;
            fill_input(want, count, dt, root, (unsigned)(s + 3));
            if (rank == root)
                fill_input(buf, count, dt, root, (unsigned)(s + 3));
            else
                memset(buf, 0x5a, maxc * 4);
            int rc = homa_broadcast(c, buf, count, dt, root);
            if (rc != 0) {
                fprintf(stderr, "broadcast: %s\n", homa_strerror(rc));
                fails++;
                break;
            }
            char what[64];
            snprintf(what, sizeof(what), "broadcast n=%d root=%d count=%zu", cl->n, root, count);
            fails += compare(what, rank, buf, want, count, dt);
        }
    }
    free(buf);
    free(want);
    return fails;
}

static void test_broadcast(void **state)
{
    (void)state;
    run_2_to_5(32 << 10, bcast_rank); /* the chain pipelines 100003 ints in 13 chunks */
}

static int allgather_rank(struct cluster *cl, int rank, void *arg)
{
    (void)arg;
    static const size_t sizes[] = {0, 1, 7, 1000, 100003};
    homa_comm *c = cl->comm[rank];
    int n = cl->n, fails = 0;
    size_t maxc = 100003;
    uint8_t *in = malloc(maxc * 8), *out = malloc(maxc * 8 * (size_t)n + 1),
            *want = malloc(maxc * 8 * (size_t)n);
    for (size_t s = 0; s < 5; s++) {
        for (int in_place = 0; in_place < 2; in_place++) {
            size_t count = sizes[s];
            homa_dtype dt = (homa_dtype)(s % 5);
            size_t es = homa_dtype_size(dt);
            for (int r = 0; r < n; r++)
                fill_input(want + (size_t)r * count * es, count, dt, r, (unsigned)s);
            memset(out, 0x77, maxc * 8 * (size_t)n + 1);
            const void *src = in;
            if (in_place) {
                fill_input(out + (size_t)rank * count * es, count, dt, rank, (unsigned)s);
                src = out + (size_t)rank * count * es;
            } else {
                fill_input(in, count, dt, rank, (unsigned)s);
            }
            int rc = homa_allgather(c, src, out, count, dt);
            if (rc != 0) {
                fprintf(stderr, "allgather: %s\n", homa_strerror(rc));
                fails++;
                break;
            }
            char what[64];
            snprintf(what, sizeof(what), "allgather n=%d count=%zu", n, count);
            fails += compare(what, rank, out, want, count * (size_t)n, dt);
            if (out[count * es * (size_t)n] != 0x77) fails++;
        }
    }
    free(in);
    free(out);
    free(want);
    return fails;
}

static void test_allgather(void **state)
{
    (void)state;
    run_2_to_5(64 << 10, allgather_rank);
}

static int rs_rank(struct cluster *cl, int rank, void *arg)
{
    (void)arg;
    static const size_t sizes[] = {0, 1, 7, 1000, 30011};
    homa_comm *c = cl->comm[rank];
    int n = cl->n, fails = 0;
    size_t maxc = 30011;
    uint8_t *in = malloc(maxc * 8 * (size_t)n), *out = malloc(maxc * 8 + 1),
            *want = malloc(maxc * 8 * (size_t)n);
    for (size_t s = 0; s < 5; s++) {
        for (int dt = HOMA_FLOAT32; dt <= HOMA_INT64; dt++) {
            for (int op = HOMA_SUM; op <= HOMA_MIN; op++) {
                size_t count = sizes[s], es = homa_dtype_size((homa_dtype)dt);
                if (count > 1000 && (op == HOMA_MIN || dt == HOMA_INT32)) continue;
                unsigned salt = (unsigned)(s + (size_t)dt * 3 + (size_t)op * 11);
                /* the whole send buffer as one vector of n * count */
                fill_input(in, count * (size_t)n, (homa_dtype)dt, rank, salt);
                fill_expect(want, count * (size_t)n, (homa_dtype)dt, (homa_redop)op, n, salt);
                int in_place = (op == HOMA_AVG);
                uint8_t *dst = in_place ? in + (size_t)rank * count * es : out;
                memset(out, 0x33, maxc * 8 + 1);
                int rc = homa_reduce_scatter(c, in, dst, count, (homa_dtype)dt, (homa_redop)op);
                if (rc != 0) {
                    fprintf(stderr, "reduce_scatter: %s\n", homa_strerror(rc));
                    fails++;
                    goto out;
                }
                char what[80];
                snprintf(what, sizeof(what), "reduce_scatter n=%d count=%zu %s %s", n, count,
                         dt_name[dt], op_name[op]);
                fails += compare(what, rank, dst, want + (size_t)rank * count * es, count,
                                 (homa_dtype)dt);
                if (!in_place && out[count * es] != 0x33) fails++;
            }
        }
    }
out:
    free(in);
    free(out);
    free(want);
    return fails;
}

static void test_reduce_scatter(void **state)
{
    (void)state;
    run_2_to_5(16 << 10, rs_rank);
}

/* Barrier: nobody leaves before everyone has entered. */
struct barrier_log {
    uint64_t enter[MAXR][8], leave[MAXR][8];
};

static int barrier_rank(struct cluster *cl, int rank, void *arg)
{
    struct barrier_log *log = arg;
    for (int it = 0; it < 8; it++) {
        usleep((useconds_t)(((rank * 7 + it * 3) % 5) * 2000));
        log->enter[rank][it] = rt_now_ns();
        int rc = homa_barrier(cl->comm[rank]);
        log->leave[rank][it] = rt_now_ns();
        if (rc != 0) return 1;
    }
    return 0;
}

static void test_barrier(void **state)
{
    (void)state;
    for (int n = 2; n <= 5; n++) {
        homa_comm_options co;
        comm_opts(&co);
        struct cluster cl;
        cluster_up(&cl, n, &co, NULL);
        struct barrier_log log;
        memset(&log, 0, sizeof(log));
        run_ranks(&cl, barrier_rank, &log);
        for (int it = 0; it < 8; it++)
            for (int a = 0; a < n; a++)
                for (int b = 0; b < n; b++)
                    assert_true(log.leave[a][it] >= log.enter[b][it]);
        cluster_down(&cl);
    }
}

/* ----------------------------------------------------------------- loss */

static int lossy_rank(struct cluster *cl, int rank, void *arg)
{
    (void)arg;
    static const size_t sizes[] = {7, 1000, 100003};
    struct ar_case ac = {sizes, 3, 0, 5, 0};
    int fails = allreduce_rank(cl, rank, &ac);
    fails += bcast_rank(cl, rank, NULL);
    for (int i = 0; i < 3; i++)
        fails += homa_barrier(cl->comm[rank]) != 0;
    return fails;
}

/* 5 % of packets dropped on every send and every receive of every rank:
 * Homa recovers, results stay exact. */
static void test_loss(void **state)
{
    (void)state;
    homa_comm_options co;
    comm_opts(&co);
    co.chunk_bytes = 64 << 10;
    struct cluster cl;
    cluster_up(&cl, 4, &co, "drop=0.05");
    run_ranks(&cl, lossy_rank, NULL);
    homa_driver_counters d;
    homa_runtime_counters(cl.rt[0], NULL, &d);
    assert_true(d.fault_drops > 0);
    cluster_down(&cl);
}

/* ------------------------------------------------------ serialisation */

/* Two threads per rank call allreduce on the same communicator at once.
 * All calls are identical, so whatever order each rank serialises them in,
 * the ranks agree, and every result must be right. */
static int twin_rank(struct cluster *cl, int rank, void *arg)
{
    (void)arg;
    enum { COUNT = 50001 };
    float *in = malloc(COUNT * 4), *out = malloc(COUNT * 4), *want = malloc(COUNT * 4);
    int fails = 0;
    fill_input(in, COUNT, HOMA_FLOAT32, rank, 2);
    fill_expect(want, COUNT, HOMA_FLOAT32, HOMA_SUM, cl->n, 2);
    for (int it = 0; it < 6; it++) {
        memset(out, 0, COUNT * 4);
        int rc = homa_allreduce(cl->comm[rank], in, out, COUNT, HOMA_FLOAT32, HOMA_SUM);
        if (rc != 0) {
            fprintf(stderr, "twin: %s\n", homa_strerror(rc));
            fails++;
            break;
        }
        fails += compare("twin", rank, out, want, COUNT, HOMA_FLOAT32);
    }
    free(in);
    free(out);
    free(want);
    return fails;
}

static void test_concurrent_callers(void **state)
{
    (void)state;
    homa_comm_options co;
    comm_opts(&co);
    struct cluster cl;
    cluster_up(&cl, 3, &co, NULL);
    struct rank_thread t[3];
    for (int i = 0; i < 3; i++) {
        t[i] = (struct rank_thread){&cl, i, twin_rank, NULL, 0, 0};
        assert_int_equal(pthread_create(&t[i].th, NULL, rank_main, &t[i]), 0);
    }
    run_ranks(&cl, twin_rank, NULL);
    int fails = 0;
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i].th, NULL);
        fails += t[i].failures;
    }
    assert_int_equal(fails, 0);
    cluster_down(&cl);
}

/* ----------------------------------------------------------- rendezvous */

struct rdv_arg {
    const char *path;
    int nranks;
    homa_runtime *rt[MAXR];
    homa_comm *comm[MAXR];
    int rc[MAXR];
    uint32_t timeout_ms;
};

struct rdv_thread {
    struct rdv_arg *a;
    int rank;
    pthread_t th;
};

static void *rdv_main(void *p)
{
    struct rdv_thread *t = p;
    struct rdv_arg *a = t->a;
    homa_comm_options co;
    comm_opts(&co);
    co.runtime = a->rt[t->rank];
    if (a->timeout_ms) co.timeout_ms = a->timeout_ms;
    homa_endpoint local;
    homa_endpoint_parse("127.0.0.1:0", &local);
    /* stagger the arrivals */
    usleep((useconds_t)(t->rank * 20000));
    a->rc[t->rank] =
        homa_comm_create_file(a->path, t->rank, a->nranks, &local, &co, &a->comm[t->rank]);
    if (a->rc[t->rank] != 0) return NULL;
    int32_t v[3] = {t->rank, 10 * t->rank, -t->rank};
    a->rc[t->rank] = homa_allreduce(a->comm[t->rank], v, v, 3, HOMA_INT32, HOMA_SUM);
    if (a->rc[t->rank] == 0 && (v[0] != 3 || v[1] != 30 || v[2] != -3)) a->rc[t->rank] = -100;
    return NULL;
}

static char *temp_path(void)
{
    char *path = strdup("/tmp/homa-coll-rdv-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    return path;
}

static void test_rendezvous_file(void **state)
{
    (void)state;
    char *path = temp_path();
    struct rdv_arg a;
    memset(&a, 0, sizeof(a));
    a.path = path;
    a.nranks = 3;
    struct rdv_thread t[3];
    for (int i = 0; i < 3; i++) {
        homa_runtime_options o;
        test_rt_opts(&o, NULL);
        assert_int_equal(homa_runtime_create(&o, &a.rt[i]), 0);
        t[i] = (struct rdv_thread){&a, i, 0};
        assert_int_equal(pthread_create(&t[i].th, NULL, rdv_main, &t[i]), 0);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(t[i].th, NULL);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(a.rc[i], 0);
        assert_int_equal(homa_comm_rank(a.comm[i]), i);
        assert_int_equal(homa_comm_size(a.comm[i]), 3);
        homa_comm_destroy(a.comm[i]); /* closes the socket it opened */
        homa_runtime_destroy(a.rt[i]);
    }
    /* The file holds one line per rank. */
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int lines = 0, ch;
    while ((ch = fgetc(f)) != EOF)
        lines += ch == '\n';
    fclose(f);
    assert_int_equal(lines, 3);
    unlink(path);
    free(path);
}

static void test_rendezvous_errors(void **state)
{
    (void)state;
    homa_runtime_options o;
    test_rt_opts(&o, NULL);
    homa_runtime *rt;
    assert_int_equal(homa_runtime_create(&o, &rt), 0);
    homa_comm_options co;
    comm_opts(&co);
    co.runtime = rt;
    co.timeout_ms = 300;
    homa_endpoint local;
    homa_endpoint_parse("127.0.0.1:0", &local);
    homa_comm *c = NULL;

    /* rank 0 already in the file: rank 0 again is a duplicate */
    char *path = temp_path();
    FILE *f = fopen(path, "w");
    fprintf(f, "0 127.0.0.1:40001\n");
    fclose(f);
    assert_int_equal(homa_comm_create_file(path, 0, 2, &local, &co, &c), HOMA_ERR_INVAL);
    assert_null(c);
    /* a malformed line */
    f = fopen(path, "w");
    fprintf(f, "zero 127.0.0.1:40001\n");
    fclose(f);
    assert_int_equal(homa_comm_create_file(path, 1, 2, &local, &co, &c), HOMA_ERR_INVAL);
    /* a rank out of range */
    f = fopen(path, "w");
    fprintf(f, "7 127.0.0.1:40001\n");
    fclose(f);
    assert_int_equal(homa_comm_create_file(path, 1, 2, &local, &co, &c), HOMA_ERR_INVAL);
    /* nobody else comes: timeout after ~300 ms */
    f = fopen(path, "w");
    fclose(f);
    uint64_t t0 = rt_now_ns();
    assert_int_equal(homa_comm_create_file(path, 1, 2, &local, &co, &c), HOMA_ERR_TIMEOUT);
    uint64_t ms = (rt_now_ns() - t0) / 1000000;
    assert_true(ms >= 290 && ms < 3000);
    /* a partial last line is ignored until complete; wildcard address and
     * bad arguments are refused */
    homa_endpoint any;
    homa_endpoint_parse("0.0.0.0:0", &any);
    assert_int_equal(homa_comm_create_file(path, 0, 2, &any, &co, &c), HOMA_ERR_INVAL);
    assert_int_equal(homa_comm_create_file(NULL, 0, 2, &local, &co, &c), HOMA_ERR_INVAL);
    assert_int_equal(homa_comm_create_file(path, 2, 2, &local, &co, &c), HOMA_ERR_INVAL);
    assert_int_equal(homa_comm_create_file("/nonexistent-dir/x", 0, 1, &local, &co, &c),
                     HOMA_ERR_IO);
    /* one rank: no waiting */
    unlink(path);
    assert_int_equal(homa_comm_create_file(path, 0, 1, &local, &co, &c), 0);
    int32_t v = 5;
    assert_int_equal(homa_allreduce(c, &v, &v, 1, HOMA_INT32, HOMA_SUM), 0);
    assert_int_equal(v, 5);
    homa_comm_destroy(c);
    unlink(path);
    free(path);
    homa_runtime_destroy(rt);
}

/* ------------------------------------------------------------- failures */

struct hung_arg {
    uint64_t elapsed_ms[MAXR];
    int rc[MAXR], rc2[MAXR];
    int hung;
};

static int hung_rank(struct cluster *cl, int rank, void *arg)
{
    struct hung_arg *h = arg;
    if (rank == h->hung) return 0; /* this rank never calls */
    float v[1000];
    fill_input(v, 1000, HOMA_FLOAT32, rank, 1);
    uint64_t t0 = rt_now_ns();
    h->rc[rank] = homa_allreduce(cl->comm[rank], v, v, 1000, HOMA_FLOAT32, HOMA_SUM);
    h->elapsed_ms[rank] = (rt_now_ns() - t0) / 1000000;
    h->rc2[rank] = homa_allreduce(cl->comm[rank], v, v, 1000, HOMA_FLOAT32, HOMA_SUM);
    return 0;
}

/* A rank that is alive but never calls: the others time out after
 * timeout_ms without progress, then the communicator is broken. */
static void test_hung_rank(void **state)
{
    (void)state;
    for (int ring = 0; ring < 2; ring++) {
        homa_comm_options co;
        comm_opts(&co);
        co.timeout_ms = 1000;
        if (ring) co.small_bytes = 0;
        struct cluster cl;
        cluster_up(&cl, 3, &co, NULL);
        struct hung_arg h;
        memset(&h, 0, sizeof(h));
        h.hung = ring ? 0 : 2;
        run_ranks(&cl, hung_rank, &h);
        for (int r = 0; r < 3; r++) {
            if (r == h.hung) continue;
            assert_int_equal(h.rc[r], HOMA_ERR_TIMEOUT);
            assert_true(h.elapsed_ms[r] >= 900);
            assert_true(h.elapsed_ms[r] <= 1000 + 2000 * SANITIZER_SLOWDOWN);
            assert_int_equal(h.rc2[r], HOMA_ERR_STATE);
            /* broken: every collective refuses at once */
            assert_int_equal(homa_barrier(cl.comm[r]), HOMA_ERR_STATE);
        }
        cluster_down(&cl);
    }
}

/* One rank breaks (here: it calls with a different count, so nothing it
 * sends or receives is accepted, and its own short timeout expires): its
 * abort notice makes the others fail at once instead of after their own
 * 20 s timeout. */
struct abort_arg {
    uint64_t elapsed_ms[MAXR];
    int rc[MAXR], rc2[MAXR];
};

static int abort_rank(struct cluster *cl, int rank, void *arg)
{
    struct abort_arg *a = arg;
    float v[1000];
    fill_input(v, 1000, HOMA_FLOAT32, rank, 1);
    uint64_t t0 = rt_now_ns();
    a->rc[rank] =
        homa_allreduce(cl->comm[rank], v, v, rank == 2 ? 999 : 1000, HOMA_FLOAT32, HOMA_SUM);
    a->elapsed_ms[rank] = (rt_now_ns() - t0) / 1000000;
    a->rc2[rank] = homa_barrier(cl->comm[rank]);
    return 0;
}

static void test_abort_propagates(void **state)
{
    (void)state;
    homa_comm_options co;
    comm_opts(&co);
    co.timeout_ms = 20000;
    struct cluster cl;
    cluster_up(&cl, 3, &co, NULL);
    homa_comm_destroy(cl.comm[2]);
    co.timeout_ms = 300;
    assert_int_equal(homa_comm_create(cl.sock[2], 2, 3, cl.eps, &co, &cl.comm[2]), 0);
    struct abort_arg a;
    memset(&a, 0, sizeof(a));
    run_ranks(&cl, abort_rank, &a);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(a.rc[r], HOMA_ERR_TIMEOUT);
        assert_true(a.elapsed_ms[r] < 300 + 2000 * SANITIZER_SLOWDOWN);
        assert_int_equal(a.rc2[r], HOMA_ERR_STATE);
    }
    cluster_down(&cl);
}

/* A rank process killed with SIGKILL: the survivors (forked processes
 * too, rendezvous through a file) get HOMA_ERR_TIMEOUT within
 * timeout_ms + margin, then HOMA_ERR_STATE.  Runs first, before this
 * process has any thread, so fork() is safe. */
static int dead_child(const char *path, int rank, int go_fd, int ready_fd)
{
    homa_runtime_options o;
    test_rt_opts(&o, NULL);
    homa_runtime *rt;
    if (homa_runtime_create(&o, &rt) != 0) return 10;
    homa_comm_options co;
    comm_opts(&co);
    co.runtime = rt;
    /* 1 s; stretched under sanitizers, where the healthy first call could
     * otherwise be taken for a stall. */
    co.timeout_ms = 1000 * SANITIZER_SLOWDOWN;
    homa_endpoint local;
    homa_endpoint_parse("127.0.0.1:0", &local);
    homa_comm *c;
    if (homa_comm_create_file(path, rank, 3, &local, &co, &c) != 0) return 11;
    int64_t v[100];
    for (int i = 0; i < 100; i++)
        v[i] = rank + i;
    if (homa_allreduce(c, v, v, 100, HOMA_INT64, HOMA_SUM) != 0) return 12;
    for (int i = 0; i < 100; i++)
        if (v[i] != 3 + 3 * i) return 13;
    char b = 'r';
    if (write(ready_fd, &b, 1) != 1) return 14;
    if (rank == 2) {
        for (;;)
            pause(); /* killed here */
    }
    if (read(go_fd, &b, 1) != 1) return 15;
    uint64_t t0 = rt_now_ns();
    int rc = homa_allreduce(c, v, v, 100, HOMA_INT64, HOMA_SUM);
    uint64_t ms = (rt_now_ns() - t0) / 1000000;
    if (rc != HOMA_ERR_TIMEOUT) return 16;
    if (ms > 1000 * SANITIZER_SLOWDOWN + 2000 * SANITIZER_SLOWDOWN) return 17;
    if (homa_allreduce(c, v, v, 100, HOMA_INT64, HOMA_SUM) != HOMA_ERR_STATE) return 18;
    homa_comm_destroy(c);
    homa_runtime_destroy(rt);
    return 0;
}

static void test_dead_rank_process(void **state)
{
    (void)state;
    char *path = temp_path();
    int go[2], ready[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(ready), 0);
    pid_t pid[3];
    for (int r = 0; r < 3; r++) {
        pid[r] = fork();
        assert_true(pid[r] >= 0);
        if (pid[r] == 0) {
            close(go[1]);
            close(ready[0]);
            _exit(dead_child(path, r, go[0], ready[1]));
        }
    }
    close(go[0]);
    close(ready[1]);
    char b;
    for (int r = 0; r < 3; r++)
        assert_int_equal(read(ready[0], &b, 1), 1);
    kill(pid[2], SIGKILL);
    int st;
    assert_int_equal(waitpid(pid[2], &st, 0), pid[2]);
    assert_true(WIFSIGNALED(st));
    b = 'g';
    assert_int_equal(write(go[1], &b, 1), 1);
    assert_int_equal(write(go[1], &b, 1), 1);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(waitpid(pid[r], &st, 0), pid[r]);
        assert_true(WIFEXITED(st));
        if (WEXITSTATUS(st) != 0) fail_msg("rank %d exited with %d", r, WEXITSTATUS(st));
    }
    close(go[1]);
    close(ready[0]);
    unlink(path);
    free(path);
}

/* ------------------------------------------------------ invalid input */

static void test_invalid_args(void **state)
{
    (void)state;
    homa_comm_options co;
    comm_opts(&co);
    struct cluster cl;
    cluster_up(&cl, 2, &co, NULL);
    homa_comm *c = cl.comm[0];
    float a[4] = {0}, b[4];
    assert_int_equal(homa_allreduce(NULL, a, b, 4, HOMA_FLOAT32, HOMA_SUM), HOMA_ERR_INVAL);
    assert_int_equal(homa_allreduce(c, a, b, 4, (homa_dtype)7, HOMA_SUM), HOMA_ERR_INVAL);
    assert_int_equal(homa_allreduce(c, a, b, 4, HOMA_FLOAT32, (homa_redop)4), HOMA_ERR_INVAL);
    assert_int_equal(homa_allreduce(c, NULL, b, 4, HOMA_FLOAT32, HOMA_SUM), HOMA_ERR_INVAL);
    assert_int_equal(homa_allreduce(c, a, NULL, 4, HOMA_FLOAT32, HOMA_SUM), HOMA_ERR_INVAL);
    assert_int_equal(homa_allreduce(c, a, b, SIZE_MAX / 2, HOMA_FLOAT32, HOMA_SUM), HOMA_ERR_INVAL);
    assert_int_equal(homa_broadcast(c, a, 4, HOMA_FLOAT32, -1), HOMA_ERR_INVAL);
    assert_int_equal(homa_broadcast(c, a, 4, HOMA_FLOAT32, 2), HOMA_ERR_INVAL);
    assert_int_equal(homa_broadcast(c, NULL, 4, HOMA_FLOAT32, 0), HOMA_ERR_INVAL);
    assert_int_equal(homa_broadcast(c, a, 4, (homa_dtype)-1, 0), HOMA_ERR_INVAL);
    assert_int_equal(homa_allgather(c, NULL, b, 2, HOMA_FLOAT32), HOMA_ERR_INVAL);
    assert_int_equal(homa_allgather(c, a, b, 2, (homa_dtype)5), HOMA_ERR_INVAL);
    assert_int_equal(homa_reduce_scatter(c, a, NULL, 2, HOMA_FLOAT32, HOMA_SUM), HOMA_ERR_INVAL);
    assert_int_equal(homa_reduce_scatter(c, a, b, 2, HOMA_FLOAT32, (homa_redop)-1), HOMA_ERR_INVAL);
    assert_int_equal(homa_barrier(NULL), HOMA_ERR_INVAL);
    /* count 0 with NULL buffers is fine and needs nobody */
    assert_int_equal(homa_allreduce(c, NULL, NULL, 0, HOMA_FLOAT32, HOMA_SUM), 0);
    assert_int_equal(homa_broadcast(c, NULL, 0, HOMA_INT64, 1), 0);
    assert_int_equal(homa_comm_rank(NULL), HOMA_ERR_INVAL);
    assert_null(homa_comm_socket(NULL));
    homa_comm_destroy(NULL);

    /* creation */
    homa_comm *x = NULL;
    assert_int_equal(homa_comm_create(NULL, 0, 2, cl.eps, NULL, &x), HOMA_ERR_INVAL);
    assert_int_equal(homa_comm_create(cl.sock[0], 2, 2, cl.eps, NULL, &x), HOMA_ERR_INVAL);
    assert_int_equal(homa_comm_create(cl.sock[0], -1, 2, cl.eps, NULL, &x), HOMA_ERR_INVAL);
    assert_int_equal(homa_comm_create(cl.sock[0], 0, 0, cl.eps, NULL, &x), HOMA_ERR_INVAL);
    assert_int_equal(homa_comm_create(cl.sock[0], 0, 4097, cl.eps, NULL, &x), HOMA_ERR_INVAL);
    assert_int_equal(homa_comm_create(cl.sock[0], 0, 2, NULL, NULL, &x), HOMA_ERR_INVAL);
    /* our endpoint must name our socket's port */
    assert_int_equal(homa_comm_create(cl.sock[0], 1, 2, cl.eps, NULL, &x), HOMA_ERR_INVAL);
    homa_endpoint dup[2] = {cl.eps[0], cl.eps[0]};
    assert_int_equal(homa_comm_create(cl.sock[0], 0, 2, dup, NULL, &x), HOMA_ERR_INVAL);
    homa_comm_options bad;
    comm_opts(&bad);
    bad.window = 0;
    assert_int_equal(homa_comm_create(cl.sock[0], 0, 2, cl.eps, &bad, &x), HOMA_ERR_INVAL);
    comm_opts(&bad);
    bad.chunk_bytes = 4;
    assert_int_equal(homa_comm_create(cl.sock[0], 0, 2, cl.eps, &bad, &x), HOMA_ERR_INVAL);
    comm_opts(&bad);
    bad.timeout_ms = 0;
    assert_int_equal(homa_comm_create(cl.sock[0], 0, 2, cl.eps, &bad, &x), HOMA_ERR_INVAL);
    assert_null(x);

    /* HOMA_ERR_INVAL does not break the communicator */
    run_ranks(&cl, twin_rank, NULL);
    cluster_down(&cl);
}

/* ----------------------------------------------------------- garbage */

struct garbage_arg {
    homa_socket *attacker;
    int sent;
};

/* Junk from a stranger, and forged requests from rank 2's own socket that
 * look right but name the wrong chunk, offset, step or call. */
static int send_garbage(struct cluster *cl, homa_socket *att, uint64_t seq)
{
    int sent = 0;
    uint8_t buf[COLL_HDR_SIZE + 64];
    for (int dst = 0; dst < cl->n; dst++) {
        /* short, random, empty */
        memset(buf, 0x41, sizeof(buf));
        assert_int_equal(homa_send(att, &cl->eps[dst], buf, 10, 0, NULL), 0);
        assert_int_equal(homa_send(att, &cl->eps[dst], buf, sizeof(buf), 0, NULL), 0);
        assert_int_equal(homa_send(att, &cl->eps[dst], buf, 0, 0, NULL), 0);
        /* a plausible header from the wrong socket */
        struct coll_hdr h = {COLL_MAGIC,
                             COLL_VERSION,
                             COLL_K_ALLREDUCE_RING,
                             HOMA_FLOAT32,
                             0,
                             cl->comm[dst]->comm_id,
                             (uint32_t)((dst + 1) % cl->n),
                             seq,
                             1000,
                             0,
                             0,
                             0,
                             64,
                             0,
                             (uint32_t)cl->n,
                             0};
        coll_hdr_encode(buf, &h);
        assert_int_equal(homa_send(att, &cl->eps[dst], buf, sizeof(buf), 0, NULL), 0);
        sent += 4;
    }
    /* from rank 2's socket to rank 0 (its right neighbour... and rank 1) */
    for (int dst = 0; dst < 2; dst++) {
        struct coll_hdr h = {COLL_MAGIC,
                             COLL_VERSION,
                             COLL_K_ALLREDUCE_RING,
                             HOMA_FLOAT32,
                             0,
                             cl->comm[dst]->comm_id,
                             2,
                             seq,
                             100003,
                             0,
                             0,
                             0,
                             64,
                             0,
                             (uint32_t)cl->n,
                             0};
        h.chunk = 999; /* no such chunk */
        coll_hdr_encode(buf, &h);
        assert_int_equal(homa_send(cl->sock[2], &cl->eps[dst], buf, sizeof(buf), 0, NULL), 0);
        h.chunk = 0;
        h.offset = 12; /* wrong place */
        coll_hdr_encode(buf, &h);
        assert_int_equal(homa_send(cl->sock[2], &cl->eps[dst], buf, sizeof(buf), 0, NULL), 0);
        h.offset = 0;
        h.length = 60; /* disagrees with the message length */
        coll_hdr_encode(buf, &h);
        assert_int_equal(homa_send(cl->sock[2], &cl->eps[dst], buf, sizeof(buf), 0, NULL), 0);
        h.length = 64;
        h.kind = 99; /* unknown kind */
        coll_hdr_encode(buf, &h);
        assert_int_equal(homa_send(cl->sock[2], &cl->eps[dst], buf, sizeof(buf), 0, NULL), 0);
        h.kind = COLL_K_ALLREDUCE_RING;
        h.seq = seq + 100000; /* far in the future */
        coll_hdr_encode(buf, &h);
        assert_int_equal(homa_send(cl->sock[2], &cl->eps[dst], buf, sizeof(buf), 0, NULL), 0);
        h.seq = seq;
        h.src = 7; /* no such rank */
        coll_hdr_encode(buf, &h);
        assert_int_equal(homa_send(cl->sock[2], &cl->eps[dst], buf, sizeof(buf), 0, NULL), 0);
    }
    return sent;
}

static int garbage_rank(struct cluster *cl, int rank, void *arg)
{
    (void)arg;
    static const size_t sizes[] = {1000, 100003};
    struct ar_case ac = {sizes, 2, 0, 4, 0};
    return allreduce_rank(cl, rank, &ac);
}

static void test_garbage(void **state)
{
    (void)state;
    homa_comm_options co;
    comm_opts(&co);
    struct cluster cl;
    cluster_up(&cl, 3, &co, NULL);
    homa_runtime_options o;
    test_rt_opts(&o, NULL);
    homa_runtime *rt;
    assert_int_equal(homa_runtime_create(&o, &rt), 0);
    homa_socket *att;
    assert_int_equal(homa_socket_open(rt, 0, &att), 0);
    /* all ranks are between calls: the next call has this sequence number */
    uint64_t seq = cl.comm[0]->seq;
    int sent = send_garbage(&cl, att, seq);
    run_ranks(&cl, garbage_rank, NULL);
    /* Every junk request was answered (so its sender does not wait). */
    for (int i = 0; i < sent; i++) {
        homa_msg m;
        assert_int_equal(homa_recv(att, HOMA_RECV_RESPONSE, 0, 5000000000ll, &m), 0);
        assert_int_equal(m.length, 0);
        homa_release(att, &m);
    }
    assert_true(cl.comm[0]->dropped >= 10);
    assert_true(cl.comm[1]->dropped >= 10);
    assert_true(cl.comm[2]->dropped >= 4);
    /* and more garbage later, the communicator still works */
    send_garbage(&cl, att, cl.comm[0]->seq);
    run_ranks(&cl, garbage_rank, NULL);
    homa_socket_close(att);
    homa_runtime_destroy(rt);
    cluster_down(&cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* first: forks before this process starts any thread */
        cmocka_unit_test(test_dead_rank_process),
        cmocka_unit_test(test_allreduce_matrix),
        cmocka_unit_test(test_allreduce_ring_in_place),
        cmocka_unit_test(test_allreduce_rd_chunked),
        cmocka_unit_test(test_allreduce_large),
        cmocka_unit_test(test_single_rank),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_allgather),
        cmocka_unit_test(test_reduce_scatter),
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_loss),
        cmocka_unit_test(test_concurrent_callers),
        cmocka_unit_test(test_rendezvous_file),
        cmocka_unit_test(test_rendezvous_errors),
        cmocka_unit_test(test_hung_rank),
        cmocka_unit_test(test_abort_propagates),
        cmocka_unit_test(test_invalid_args),
        cmocka_unit_test(test_garbage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
