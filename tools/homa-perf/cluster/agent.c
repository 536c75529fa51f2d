/* homa-perf cluster-agent: one host of the emulated cluster.
 *
 * Started by `homa-perf cluster` inside a host's network namespace (not
 * meant to be run by hand).  It runs the host's echo server and, when told,
 * its share of the experiment: one client thread sending the host's RPCs of
 * the common schedule (cluster_sched_make) to every other host at their
 * scheduled times, open loop, and recording every RPC.  Homa: one runtime
 * and one socket for the server and the client (cluster/homa.c).  TCP: a
 * listening socket and connections to every host (cluster/tcp.c).  Both, by
 * default: one thread per host runs an event loop that answers requests
 * and drives the client (--server-threads N > 0 moves the echo server to N
 * threads of its own: Homa's on the same socket, TCP's the server of tcp.c).
 *
 * Talks to the orchestrator in lines: on stdout it prints
 *   ready                      server listening
 *   cal SIZE MIN_NS SAMPLES    one calibration point (after "cal")
 *   cal-done
 *   progress OK ERRORS         every half second during a run
 *   done OK ERRORS             records written to --out
 *   counters NAME=VALUE ...    at quit (Homa: engine and driver counters)
 *   error TEXT                 something failed (then it exits 1)
 * and reads commands on stdin:
 *   cal HOST        unloaded one-at-a-time RPCs to HOST at the calibration sizes
 *   run START_NS    run the schedule; START_NS is the common CLOCK_MONOTONIC start
 *   quit            stop the server and exit (also at end of input)
 *
 * The schedule is generated here from the seed; it depends only on the
 * workload, the seed, the host number and the offered load, never on the
 * protocol, so Homa and TCP carry the same messages. */
#include "cluster.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "pattern.h"

#define POLL_BATCH 64
#define CAL_MAX_SAMPLES 200
#define CAL_MIN_SAMPLES 5
#define CAL_TIME_NS 40000000ull

typedef struct agent {
    int proto;
    int host, hosts;
    int proc, procs;                     /* this process of the host's procs */
    int self, agents;                    /* this agent's number (host * procs + proc) of all */
    perf_addr peers[CLUSTER_MAX_AGENTS]; /* by agent number */
    uint16_t base_port;                  /* process i of every host: base_port + i */
    uint16_t port;                       /* this agent's */
    const char *workload;
    const char *data_dir;
    uint32_t max_size;
    double req_bps;
    uint64_t seed;
    double warmup, seconds, drain;
    const char *out_path;
    int verify;
    int busy_poll_us; /* -1: Homa's default; TCP: 0 */
    int server_threads;
    int conns;
    cluster_homa_rt_opts homa;
    char homa_tuning[1100];

    wlgen g;
    homa_runtime *rt;
    homa_socket *sock; /* Homa: the agent's one socket (server and client) */
    pt_server *srv;
    cluster_msg *sched;
    long nsched;
    cluster_rec *recs;
    atomic_ullong ok, errors;
    pthread_mutex_t fatal_lock;
    char fatal[256];

    /* The event-loop thread and the job it is given by the main thread. */
    cluster_client *client;
    pthread_t loop;
    int loop_started;
    pthread_mutex_t job_lock;
    pthread_cond_t job_cond;
    int job;     /* JOB_* */
    int job_arg; /* cal: destination */
    uint64_t start;
    int job_rc;

    /* --sample-us: a thread samples the engine's incoming_bytes on a grid
     * of sample_ns from the start of a run (UINT64_MAX: no sample made). */
    uint64_t sample_ns;
    const char *sample_path;
    uint64_t *samples;
    size_t nsamples;
    pthread_t sampler;
    atomic_int sampling;
} agent;

enum { JOB_NONE, JOB_CAL, JOB_RUN, JOB_QUIT };

static void agent_fatal(agent *a, const char *fmt, const char *s1, const char *s2)
{
    pthread_mutex_lock(&a->fatal_lock);
    if (!a->fatal[0]) snprintf(a->fatal, sizeof(a->fatal), fmt, s1, s2);
    pthread_mutex_unlock(&a->fatal_lock);
}

static uint64_t spin_ns(const agent *a)
{
    return a->busy_poll_us > 0 ? (uint64_t)a->busy_poll_us * 1000 : 0;
}

static int make_client(agent *a, cluster_client **out, char *err, size_t errlen)
{
    int inline_server = a->server_threads == 0;
    if (a->proto == PERF_TCP)
        return cluster_tcp_client(a->peers, a->agents, a->self, a->conns, spin_ns(a),
                                  inline_server ? a->port : 0, out, err, errlen);
    return cluster_homa_client(a->sock, a->peers, a->agents, inline_server, out, err, errlen);
}

/* ---- Calibration -------------------------------------------------------- */

static int calibrate(agent *a, int dst)
{
    perf_result *r = malloc(sizeof(*r));
    if (!r) return -1;
    perf_result_init(r);
    wlgen_make_buckets(&a->g, r);
    wlgen_cal_sizes(&a->g, r);
    char err[256] = "";
    cluster_client *c = a->client;
    if (c->ops->start(c, err, sizeof(err)) < 0) {
        printf("error calibration client: %s\n", err);
        perf_result_free(r);
        free(r);
        return -1;
    }
    uint8_t *buf = calloc(1, a->g.max_size);
    pt_completion comp[4];
    int rc = buf ? 0 : -1;
    /* Pass -1 warms the path up with the smallest size. */
    for (int pass = -1; pass < r->ncal && rc == 0; pass++) {
        uint32_t size = r->cal[pass < 0 ? 0 : pass].size;
        uint64_t best = UINT64_MAX, samples = 0;
        uint64_t t_end = perf_now_ns() + CAL_TIME_NS;
        while (samples < CAL_MIN_SAMPLES || (samples < CAL_MAX_SAMPLES && perf_now_ns() < t_end)) {
            uint64_t t0 = perf_now_ns();
            int s = c->ops->send(c, dst, 0, buf, size);
            int got = s < 0 ? s : c->ops->poll(c, t0 + 5000000000ull, comp, 4);
            uint64_t t1 = perf_now_ns();
            if (got <= 0 || comp[0].error || comp[0].len != size) {
                printf("error calibration RPC of %u bytes to agent %d failed: %s\n", size, dst,
                       got < 0         ? pt_strerror(a->proto, got)
                       : got == 0      ? "timeout"
                       : comp[0].error ? pt_strerror(a->proto, comp[0].error)
                                       : "wrong length");
                rc = -1;
                break;
            }
            if (t1 - t0 < best) best = t1 - t0;
            samples++;
        }
        if (pass >= 0 && rc == 0)
            printf("cal %u %llu %llu\n", size, (unsigned long long)best,
                   (unsigned long long)samples);
    }
    free(buf);
    perf_result_free(r);
    free(r);
    if (rc == 0) printf("cal-done\n");
    fflush(stdout);
    return rc;
}

/* ---- The run ------------------------------------------------------------ */

/* The host's client: every RPC of the schedule, to every destination, open
 * loop (sent at its scheduled time whatever is still in flight). */
static void client_loop(agent *a, uint64_t start)
{
    long k = a->nsched, next = 0, inflight = 0;
    uint8_t *buf = malloc(a->g.max_size ? a->g.max_size : 1);
    cluster_client *c = a->client;
    char err[256] = "";
    if (!buf) {
        agent_fatal(a, "%s%s", "out of memory", "");
        goto out;
    }
    memset(buf, 0x5a, a->g.max_size);
    if (c->ops->start(c, err, sizeof(err)) < 0) {
        agent_fatal(a, "client: %s%s", err, "");
        goto out;
    }
    uint64_t end = start + (uint64_t)((a->warmup + a->seconds) * 1e9);
    uint64_t drain_end = end + (uint64_t)(a->drain * 1e9);
    pt_completion comp[POLL_BATCH];
    /* Until the start: serve (a client made to serve answers requests). */
    while (perf_now_ns() < start)
        if (c->ops->poll(c, start, comp, POLL_BATCH) < 0) break;
    for (;;) {
        uint64_t now = perf_now_ns();
        while (next < k && now >= start + a->sched[next].t_ns) {
            long i = next++;
            const cluster_msg *m = &a->sched[i];
            cluster_rec *r = &a->recs[i];
            uint64_t seq = ((uint64_t)a->self << 40) | (uint64_t)i;
            if (a->verify) pattern_fill(buf, m->size, seq);
            r->send_ns = perf_now_ns() - start;
            int rc = c->ops->send(c, m->dst, (uint64_t)i, buf, m->size);
            if (rc < 0 && a->proto == PERF_HOMA && (rc == HOMA_ERR_LIMIT || rc == HOMA_ERR_NOMEM)) {
                r->status = CREC_REFUSED;
                r->err = rc;
                atomic_fetch_add(&a->errors, 1);
            } else if (rc < 0) {
                r->status = CREC_FAILED;
                r->err = rc;
                atomic_fetch_add(&a->errors, 1);
                agent_fatal(a, "send: %s%s", pt_strerror(a->proto, rc), "");
                goto out;
            } else {
                r->status = CREC_UNFINISHED;
                inflight++;
            }
            now = perf_now_ns();
        }
        if (next == k && (inflight == 0 || now >= drain_end)) break;
        uint64_t deadline = next < k ? start + a->sched[next].t_ns : drain_end;
        int got = c->ops->poll(c, deadline, comp, POLL_BATCH);
        now = perf_now_ns();
        if (got < 0) {
            agent_fatal(a, "poll: %s%s", pt_strerror(a->proto, got), "");
            break;
        }
        for (int j = 0; j < got; j++) {
            long i = (long)comp[j].cookie;
            if (i < 0 || i >= next || a->recs[i].status != CREC_UNFINISHED || a->recs[i].done_ns) {
                agent_fatal(a, "response with unknown cookie%s%s", "", "");
                goto out;
            }
            cluster_rec *r = &a->recs[i];
            inflight--;
            r->done_ns = now - start;
            uint64_t seq = ((uint64_t)a->self << 40) | (uint64_t)i;
            if (comp[j].error) {
                r->status = CREC_FAILED;
                r->err = comp[j].error;
            } else if (comp[j].len != r->size ||
                       (a->verify && !pattern_check(comp[j].data, r->size, seq))) {
                r->status = CREC_MISMATCH;
            } else {
                r->status = CREC_OK;
            }
            if (r->status == CREC_OK)
                atomic_fetch_add(&a->ok, 1);
            else
                atomic_fetch_add(&a->errors, 1);
        }
    }
out:
    /* Entries never sent (after a fatal error): failed. */
    for (long n = next; n < k; n++) {
        a->recs[n].status = CREC_FAILED;
        a->recs[n].err = -ECANCELED;
    }
    free(buf);
}

/* The event loop: serves (when the server is inline) and runs the jobs the
 * main thread posts. */
static void *loop_main(void *arg)
{
    agent *a = arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    pt_completion comp[POLL_BATCH];
    for (;;) {
        pthread_mutex_lock(&a->job_lock);
        int job = a->job;
        pthread_mutex_unlock(&a->job_lock);
        if (job == JOB_QUIT) break;
        if (job == JOB_NONE) {
            /* Idle: serve for a while, then look for a job again. */
            if (a->client->ops->poll(a->client, perf_now_ns() + 20000000ull, comp, POLL_BATCH) < 0)
                usleep(20000);
            continue;
        }
        int rc = 0;
        if (job == JOB_CAL)
            rc = calibrate(a, a->job_arg);
        else
            client_loop(a, a->start);
        pthread_mutex_lock(&a->job_lock);
        a->job_rc = rc;
        a->job = JOB_NONE;
        pthread_cond_broadcast(&a->job_cond);
        pthread_mutex_unlock(&a->job_lock);
    }
    return NULL;
}

static void post_job(agent *a, int job, int arg)
{
    pthread_mutex_lock(&a->job_lock);
    a->job = job;
    a->job_arg = arg;
    pthread_mutex_unlock(&a->job_lock);
}

/* Waits for the job to end; with progress, prints a line every 0.5 s. */
static int wait_job(agent *a, int progress)
{
    uint64_t last = perf_now_ns();
    pthread_mutex_lock(&a->job_lock);
    while (a->job != JOB_NONE) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&a->job_cond, &a->job_lock, &ts);
        uint64_t now = perf_now_ns();
        if (progress && now - last >= 500000000ull) {
            last = now;
            printf("progress %llu %llu\n", (unsigned long long)atomic_load(&a->ok),
                   (unsigned long long)atomic_load(&a->errors));
            fflush(stdout);
        }
    }
    int rc = a->job_rc;
    pthread_mutex_unlock(&a->job_lock);
    return rc;
}

static int write_records(agent *a)
{
    FILE *f = fopen(a->out_path, "wb");
    if (!f) return -1;
    uint64_t n = (uint64_t)a->nsched;
    int ok = fwrite(CLUSTER_REC_MAGIC, 8, 1, f) == 1 && fwrite(&n, 8, 1, f) == 1 &&
             (n == 0 || fwrite(a->recs, sizeof(cluster_rec), n, f) == n);
    if (fclose(f) != 0) ok = 0;
    return ok ? 0 : -1;
}

/* The sampler: from the start to the end of the measured window, every
 * sample_ns on a common grid (so that the agents of one host sample at
 * about the same instants and their sum is the host's). */
static void *sampler_main(void *arg)
{
    agent *a = arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    while (atomic_load(&a->sampling)) {
        uint64_t now = perf_now_ns();
        if (now >= a->start) {
            size_t k = (size_t)((now - a->start) / a->sample_ns);
            if (k >= a->nsamples) break;
            homa_counters ec;
            homa_runtime_counters(a->rt, &ec, NULL);
            a->samples[k] = ec.incoming_bytes;
            now = a->start + (uint64_t)(k + 1) * a->sample_ns;
        } else {
            now = a->start;
        }
        struct timespec ts = {(time_t)(now / 1000000000ull), (long)(now % 1000000000ull)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
    return NULL;
}

static int write_samples(agent *a)
{
    FILE *f = fopen(a->sample_path, "wb");
    if (!f) return -1;
    uint64_t hdr[2] = {a->nsamples, a->sample_ns};
    int ok = fwrite(CLUSTER_INC_MAGIC, 8, 1, f) == 1 && fwrite(hdr, 8, 2, f) == 2 &&
             fwrite(a->samples, 8, a->nsamples, f) == a->nsamples;
    if (fclose(f) != 0) ok = 0;
    return ok ? 0 : -1;
}

static int run(agent *a, uint64_t start)
{
    uint64_t end_ns = (uint64_t)((a->warmup + a->seconds) * 1e9);
    free(a->sched);
    free(a->recs);
    a->nsched = cluster_sched_make(&a->g, a->seed, a->self, a->procs, a->agents, a->req_bps, end_ns,
                                   &a->sched);
    if (a->nsched < 0) {
        printf("error out of memory\n");
        return -1;
    }
    a->recs = calloc((size_t)(a->nsched ? a->nsched : 1), sizeof(cluster_rec));
    if (!a->recs) {
        printf("error out of memory\n");
        return -1;
    }
    for (long i = 0; i < a->nsched; i++) {
        a->recs[i].sched_ns = a->sched[i].t_ns;
        a->recs[i].size = a->sched[i].size;
        a->recs[i].dst = a->sched[i].dst;
    }
    atomic_store(&a->ok, 0);
    atomic_store(&a->errors, 0);
    a->start = start;
    int sampling = 0;
    if (a->sample_ns && a->rt) {
        free(a->samples);
        a->nsamples = (size_t)(end_ns / a->sample_ns) + 1;
        a->samples = malloc(a->nsamples * sizeof(uint64_t));
        if (!a->samples) {
            printf("error out of memory\n");
            return -1;
        }
        memset(a->samples, 0xff, a->nsamples * sizeof(uint64_t));
        atomic_store(&a->sampling, 1);
        sampling = pthread_create(&a->sampler, NULL, sampler_main, a) == 0;
    }
    post_job(a, JOB_RUN, 0);
    wait_job(a, 1);
    if (sampling) {
        atomic_store(&a->sampling, 0);
        pthread_join(a->sampler, NULL);
        if (write_samples(a) < 0) {
            printf("error cannot write %s: %s\n", a->sample_path, strerror(errno));
            return -1;
        }
    }
    if (a->fatal[0]) {
        printf("error %s\n", a->fatal);
        return -1;
    }
    if (write_records(a) < 0) {
        printf("error cannot write %s: %s\n", a->out_path, strerror(errno));
        return -1;
    }
    printf("done %llu %llu\n", (unsigned long long)atomic_load(&a->ok),
           (unsigned long long)atomic_load(&a->errors));
    fflush(stdout);
    return 0;
}

static void print_counters(agent *a)
{
    if (a->proto != PERF_HOMA || !a->rt) {
        printf("counters\n");
        return;
    }
    homa_counters ec;
    homa_driver_counters dc;
    homa_runtime_counters(a->rt, &ec, &dc);
    printf("counters");
    const uint64_t *e = (const uint64_t *)&ec;
    for (size_t i = 0; i < homa_counter_count(); i++)
        if (e[i]) printf(" %s=%llu", homa_counter_name(i), (unsigned long long)e[i]);
    const uint64_t *d = (const uint64_t *)&dc;
    for (size_t i = 0; i < homa_driver_counter_count(); i++)
        if (d[i]) printf(" drv_%s=%llu", homa_driver_counter_name(i), (unsigned long long)d[i]);
    printf("\n");
}

/* ---- Command line ----------------------------------------------------------- */

enum {
    A_PROTO = 300,
    A_HOST,
    A_PEERS,
    A_PORT,
    A_WORKLOAD,
    A_DATADIR,
    A_MAXSIZE,
    A_REQBPS,
    A_SEED,
    A_WARMUP,
    A_SECONDS,
    A_DRAIN,
    A_OUT,
    A_VERIFY,
    A_BUSYPOLL,
    A_SRVTHREADS,
    A_CONNS,
    A_LINKBPS,
    A_MTU,
    A_HOMACFG,
    A_HOMAGSO,
    A_PROC,
    A_PROCS,
    A_SAMPLE,
    A_SAMPLEOUT,
};

static const struct option agent_opts[] = {
    {"proto", required_argument, NULL, A_PROTO},
    {"host", required_argument, NULL, A_HOST},
    {"peers", required_argument, NULL, A_PEERS},
    {"port", required_argument, NULL, A_PORT},
    {"workload", required_argument, NULL, A_WORKLOAD},
    {"data-dir", required_argument, NULL, A_DATADIR},
    {"max-size", required_argument, NULL, A_MAXSIZE},
    {"req-bps", required_argument, NULL, A_REQBPS},
    {"seed", required_argument, NULL, A_SEED},
    {"warmup", required_argument, NULL, A_WARMUP},
    {"seconds", required_argument, NULL, A_SECONDS},
    {"drain", required_argument, NULL, A_DRAIN},
    {"out", required_argument, NULL, A_OUT},
    {"verify", no_argument, NULL, A_VERIFY},
    {"busy-poll", required_argument, NULL, A_BUSYPOLL},
    {"server-threads", required_argument, NULL, A_SRVTHREADS},
    {"conns", required_argument, NULL, A_CONNS},
    {"link-bps", required_argument, NULL, A_LINKBPS},
    {"mtu", required_argument, NULL, A_MTU},
    {"homa-config", required_argument, NULL, A_HOMACFG},
    {"homa-gso", no_argument, NULL, A_HOMAGSO},
    {"proc", required_argument, NULL, A_PROC},
    {"procs", required_argument, NULL, A_PROCS},
    {"sample-us", required_argument, NULL, A_SAMPLE},
    {"sample-out", required_argument, NULL, A_SAMPLEOUT},
    {NULL, 0, NULL, 0},
};

/* One address per host in the list; procs agents per host, on ports
 * base_port + i. */
static int parse_peers(agent *a, const char *list, char *err, size_t errlen)
{
    char buf[CLUSTER_MAX_HOSTS * 48];
    snprintf(buf, sizeof(buf), "%s", list);
    char *save = NULL;
    a->hosts = a->agents = 0;
    for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        for (int i = 0; i < a->procs; i++) {
            if (a->agents == CLUSTER_MAX_AGENTS || a->base_port + i > 65535) {
                snprintf(err, errlen, "too many peers");
                return -1;
            }
            char spec[80];
            snprintf(spec, sizeof(spec), "%s:%d", p, a->base_port + i);
            if (perf_parse_addr(spec, &a->peers[a->agents], err, errlen) < 0) return -1;
            a->agents++;
        }
        a->hosts++;
    }
    return 0;
}

static int agent_parse(int argc, char **argv, agent *a, char *err, size_t errlen)
{
    const char *peers = NULL;
    a->proto = -1;
    a->host = -1;
    a->base_port = 4000;
    a->procs = 1;
    a->workload = "w4";
    a->max_size = PERF_MAX_MESSAGE;
    a->seed = 1;
    a->warmup = 0.5;
    a->seconds = 5;
    a->drain = 5;
    a->busy_poll_us = -1;
    a->server_threads = 0;
    a->conns = PERF_DEFAULT_CONNS;
    a->homa.mtu = 1500;
    a->homa.busy_poll_us = -1;
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "", agent_opts, NULL)) != -1) {
        switch (ch) {
        case A_PROTO:
            a->proto = strcmp(optarg, "tcp") == 0    ? PERF_TCP
                       : strcmp(optarg, "homa") == 0 ? PERF_HOMA
                                                     : -1;
            break;
        case A_HOST:
            a->host = atoi(optarg);
            break;
        case A_PEERS:
            peers = optarg;
            break;
        case A_PORT:
            a->base_port = (uint16_t)atoi(optarg);
            break;
        case A_PROC:
            a->proc = atoi(optarg);
            break;
        case A_PROCS:
            a->procs = atoi(optarg);
            break;
        case A_SAMPLE:
            a->sample_ns = strtoull(optarg, NULL, 10) * 1000ull;
            break;
        case A_SAMPLEOUT:
            a->sample_path = optarg;
            break;
        case A_WORKLOAD:
            a->workload = optarg;
            break;
        case A_DATADIR:
            a->data_dir = optarg;
            break;
        case A_MAXSIZE:
            a->max_size = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case A_REQBPS:
            a->req_bps = strtod(optarg, NULL);
            break;
        case A_SEED:
            a->seed = strtoull(optarg, NULL, 10);
            break;
        case A_WARMUP:
            a->warmup = strtod(optarg, NULL);
            break;
        case A_SECONDS:
            a->seconds = strtod(optarg, NULL);
            break;
        case A_DRAIN:
            a->drain = strtod(optarg, NULL);
            break;
        case A_OUT:
            a->out_path = optarg;
            break;
        case A_VERIFY:
            a->verify = 1;
            break;
        case A_BUSYPOLL:
            a->busy_poll_us = atoi(optarg);
            break;
        case A_SRVTHREADS:
            a->server_threads = atoi(optarg);
            break;
        case A_CONNS:
            a->conns = atoi(optarg);
            break;
        case A_LINKBPS:
            a->homa.link_bps = strtoull(optarg, NULL, 10);
            break;
        case A_MTU:
            a->homa.mtu = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case A_HOMACFG:
            snprintf(a->homa_tuning, sizeof(a->homa_tuning), "%s", optarg);
            break;
        case A_HOMAGSO:
            a->homa.gso = 1;
            break;
        default:
            snprintf(err, errlen, "bad option");
            return -1;
        }
    }
    if (a->proto < 0 || !peers || !a->out_path || a->base_port == 0) {
        snprintf(err, errlen, "need --proto homa|tcp, --peers, --port and --out");
        return -1;
    }
    if (a->procs < 1 || a->procs > CLUSTER_MAX_AGENTS || a->proc < 0 || a->proc >= a->procs) {
        snprintf(err, errlen, "bad --proc or --procs");
        return -1;
    }
    if (parse_peers(a, peers, err, errlen) < 0) return -1;
    if (a->hosts < 2 || a->host < 0 || a->host >= a->hosts) {
        snprintf(err, errlen, "bad --host or --peers");
        return -1;
    }
    a->self = a->host * a->procs + a->proc;
    a->port = (uint16_t)(a->base_port + a->proc);
    if (a->sample_ns && !a->sample_path) {
        snprintf(err, errlen, "--sample-us needs --sample-out");
        return -1;
    }
    if (a->conns < 1) a->conns = 1;
    a->homa.busy_poll_us = a->busy_poll_us;
    a->homa.max_message = a->max_size;
    a->homa.tuning = a->homa_tuning;
    return 0;
}

int cluster_agent_main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    agent *a = calloc(1, sizeof(*a));
    if (!a) return 1;
    pthread_mutex_init(&a->fatal_lock, NULL);
    pthread_mutex_init(&a->job_lock, NULL);
    pthread_cond_init(&a->job_cond, NULL);
    char err[256] = "";
    int status = 1;
    if (agent_parse(argc, argv, a, err, sizeof(err)) < 0) {
        printf("error cluster-agent: %s\n", err);
        free(a);
        return 2;
    }
    if (wlgen_open(&a->g, a->workload, a->data_dir, a->max_size, err, sizeof(err)) < 0) {
        printf("error %s\n", err);
        free(a);
        return 1;
    }
    int rc;
    if (a->proto == PERF_HOMA) {
        rc = cluster_homa_runtime(&a->homa, &a->rt, err, sizeof(err));
        if (rc == 0) {
            rc = homa_socket_open(a->rt, a->port, &a->sock);
            if (rc < 0)
                snprintf(err, sizeof(err), "homa socket on port %u: %s", a->port,
                         homa_strerror(rc));
        }
        if (rc == 0 && a->server_threads > 0)
            rc = cluster_homa_server(a->sock, a->server_threads, &a->srv, err, sizeof(err));
    } else if (a->server_threads > 0) {
        rc = tcp_server_start(a->port, a->server_threads, spin_ns(a), &a->srv, err, sizeof(err));
    } else {
        rc = 0; /* the client's event loop listens (make_client) */
    }
    if (rc < 0) {
        printf("error server: %s\n", err[0] ? err : "cannot start");
        goto out;
    }
    rc = make_client(a, &a->client, err, sizeof(err));
    if (rc < 0) {
        printf("error client: %s\n", err[0] ? err : "cannot create");
        goto out;
    }
    if (pthread_create(&a->loop, NULL, loop_main, a) != 0) {
        printf("error cannot start the event loop thread\n");
        goto out;
    }
    a->loop_started = 1;
    printf("ready\n");
    fflush(stdout);
    char line[256];
    status = 0;
    while (fgets(line, sizeof(line), stdin)) {
        int dst;
        unsigned long long start;
        if (sscanf(line, "cal %d", &dst) == 1) {
            if (dst < 0 || dst >= a->agents || dst / a->procs == a->host) {
                printf("error bad calibration agent\n");
                status = 1;
                break;
            }
            post_job(a, JOB_CAL, dst);
            if (wait_job(a, 0) < 0) {
                status = 1;
                break;
            }
        } else if (sscanf(line, "run %llu", &start) == 1) {
            if (run(a, (uint64_t)start) < 0) {
                status = 1;
                break;
            }
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        } else {
            printf("error unknown command\n");
        }
        fflush(stdout);
    }
    print_counters(a);
out:
    fflush(stdout);
    if (a->loop_started) {
        post_job(a, JOB_QUIT, 0);
        pthread_join(a->loop, NULL);
    }
    if (a->client) a->client->ops->destroy(a->client);
    if (a->srv) a->srv->ops->stop(a->srv);
    if (a->sock) homa_socket_close(a->sock);
    if (a->rt) homa_runtime_destroy(a->rt);
    wlgen_close(&a->g);
    free(a->sched);
    free(a->recs);
    free(a->samples);
    pthread_mutex_destroy(&a->fatal_lock);
    pthread_mutex_destroy(&a->job_lock);
    pthread_cond_destroy(&a->job_cond);
    free(a);
    return status;
}
