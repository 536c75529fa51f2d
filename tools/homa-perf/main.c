/* homa-perf: Homa-vs-TCP benchmark.  Command line, server mode, compare
 * mode.  See docs/homa-perf.md and `homa-perf --help`. */
#include "perf.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include <homa/homa.h>
#include "json.h"
#include "pattern.h"
#include "soak/soak.h"
#include "wlgen.h"

static const char usage_text[] =
    "usage:\n"
    "  homa-perf server  --proto homa|tcp --port P [--threads N] [--busy-poll US]\n"
    "  homa-perf client  --proto homa|tcp --server HOST:PORT --test rtt|tput|workload\n"
    "                    [--size BYTES] [--outstanding N] [--workload w1..w5] [--gbps G]\n"
    "                    [--seconds S] [--verify] [--json] [more options below]\n"
    "  homa-perf compare --test rtt|tput|workload [--size BYTES] [--seconds S] [--json]\n"
    "                    [any client option except --proto/--server]\n"
    "  homa-perf selftest\n"
    "  homa-perf cluster [--workload wN] [--load F] [--hosts N] [--seconds S] [--json OUT]\n"
    "                    [--plot OUT.png]   Homa vs TCP on an emulated cluster (root;\n"
    "                    homa-perf cluster --help)\n"
    "  homa-perf soak    [--minutes M] [--clients N] [--servers N] [--faults SPEC] ...\n"
    "                    several client and server processes under a changing fault\n"
    "                    schedule, every byte verified (homa-perf soak --help)\n"
    "\n"
    "Servers echo every request: the response has the request's length and bytes.\n"
    "\n"
    "options:\n"
    "  --proto homa|tcp     transport (server, client)\n"
    "  --port P             server port (server)\n"
    "  --server HOST:PORT   server to use (client); [V6ADDR]:PORT for IPv6\n"
    "  --threads N          server: worker threads (default 1); client: client threads,\n"
    "                       each with its own Homa socket or TCP connections (default 1);\n"
    "                       compare: both\n"
    "  --test T             rtt:  closed loop, --outstanding RPCs (default 1) of --size\n"
    "                             bytes (default 100) each way\n"
    "                       tput: closed loop, --outstanding RPCs (default 8) of --size\n"
    "                             bytes (default 1000000) each way; goodput counts request\n"
    "                             + response payload bytes\n"
    "                       workload: open loop, Poisson arrivals at --gbps, request\n"
    "                             lengths drawn from --workload, responses of equal length\n"
    "  --size BYTES         message length for rtt/tput\n"
    "  --outstanding N      RPCs in flight per client thread (rtt/tput).  Homa: N RPCs on\n"
    "                       one socket.  TCP: N connections, one RPC in flight on each\n"
    "                       (no pipelining)\n"
    "  --workload W         w1..w5 (or a CDF file path); default w4\n"
    "  --gbps G             workload offered load: request payload bits per second / 1e9,\n"
    "                       over all client threads (default 1)\n"
    "  --conns N            TCP workload: connections per client thread; requests are\n"
    "                       pipelined on the one with the fewest bytes in flight (default 4)\n"
    "  --max-size BYTES     workload: clamp longer messages to this length (default\n"
    "                       1000000, as the Linux Homa benchmarks; 0 = no clamp)\n"
    "  --seconds S          measured time (default 5)\n"
    "  --warmup S           unmeasured time before it (default 0.1)\n"
    "  --drain S            wait for RPCs still in flight at the end (default 10); those\n"
    "                       that never finish count as errors\n"
    "  --verify             fill payloads with a pattern derived from (RPC sequence\n"
    "                       number, offset) and check every response byte\n"
    "  --json               print one JSON object as the last line of output\n"
    "  --seed N             seed of the workload generator (default 1)\n"
    "  --data-dir DIR       where to find workloads/<name>.cdf\n"
    "  --no-calibrate       workload: skip the best-case RTT measurement (no slowdown)\n"
    "  --busy-poll US       (server, client, compare) a thread waiting for messages\n"
    "                       polls this long before sleeping; default: the Homa\n"
    "                       runtime's default (50 us) for Homa, 0 for TCP.  Given, it\n"
    "                       applies to both (Homa: homa_runtime_options.busy_poll_us;\n"
    "                       TCP: non-blocking recv/epoll_wait before blocking)\n"
    "  --counters           (server, client, compare) Homa runtimes print their engine\n"
    "                       and driver counters (totals and per RPC) to stderr at the end\n"
    "  --homa-config K=V,.. (server, client, compare) engine settings for every Homa\n"
    "                       runtime (keys as homa-perf cluster --homa-config)\n"
    "  --no-place           (server, client, compare) Homa runtimes never receive DATA\n"
    "                       payloads in place (HOMA_RT_NO_PLACE), for comparison\n"
    "  --driver udp|raw     (server, client, compare) Homa runtimes use UDP (default) or\n"
    "                       raw IP protocol 146, the Linux module's wire format (needs\n"
    "                       CAP_NET_RAW; HOMA_RT_RAW)\n"
    "  --class N            (server, client) scheduling class 0-3 of the Homa sockets\n"
    "                       (homa_socket_set_class: higher first, then SRPT; through\n"
    "                       homad it orders this process against the host's others)\n"
    "  --reply-size BYTES   (server, client; rtt/tput) responses of this length, zeros,\n"
    "                       instead of echoes: 0 makes a one-way test (goodput then\n"
    "                       counts request + response bytes, i.e. the requests)\n"
    "\n"
    "Latency: CLOCK_MONOTONIC from just before the send call to the return of the\n"
    "poll that delivered the response, every RPC recorded in a log-linear histogram\n"
    "(< 0.4 % error).  Slowdown (workload) = RPC latency / best-case latency for its\n"
    "length; the best case is measured at startup: minimum RTT of unloaded\n"
    "one-at-a-time RPCs at the smallest length, each size bucket's upper bound and\n"
    "a x4 grid between, interpolated linearly in length.  Size buckets are the\n"
    "workload's deciles of message length (coinciding deciles merged).\n"
    "compare: ratio = homa / tcp for latencies, gbps and rpcs_per_sec (latency < 1:\n"
    "Homa faster; gbps, rpcs_per_sec > 1: Homa more).\n"
    "Exit status: 0 ok, 1 run failed or errors > 0, 2 bad usage.\n";

static void usage(FILE *f)
{
    fputs(usage_text, f);
}

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "homa-perf: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(homa-perf --help for usage)\n");
    return 2;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || v < 0 || v > 1.8e19 || v != floor(v)) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < 0) return -1;
    *out = v;
    return 0;
}

enum {
    OPT_PROTO = 256,
    OPT_PORT,
    OPT_THREADS,
    OPT_SERVER,
    OPT_TEST,
    OPT_SIZE,
    OPT_OUTSTANDING,
    OPT_WORKLOAD,
    OPT_GBPS,
    OPT_SECONDS,
    OPT_WARMUP,
    OPT_DRAIN,
    OPT_VERIFY,
    OPT_JSON,
    OPT_CONNS,
    OPT_MAXSIZE,
    OPT_DATADIR,
    OPT_SEED,
    OPT_NOCAL,
    OPT_BUSYPOLL,
    OPT_COUNTERS,
    OPT_HOMACONFIG,
    OPT_NOPLACE,
    OPT_DRIVER,
    OPT_CLASS,
    OPT_REPLYSIZE,
    OPT_HELP,
};

static const struct option long_opts[] = {
    {"proto", required_argument, NULL, OPT_PROTO},
    {"port", required_argument, NULL, OPT_PORT},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"server", required_argument, NULL, OPT_SERVER},
    {"test", required_argument, NULL, OPT_TEST},
    {"size", required_argument, NULL, OPT_SIZE},
    {"outstanding", required_argument, NULL, OPT_OUTSTANDING},
    {"workload", required_argument, NULL, OPT_WORKLOAD},
    {"gbps", required_argument, NULL, OPT_GBPS},
    {"seconds", required_argument, NULL, OPT_SECONDS},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"drain", required_argument, NULL, OPT_DRAIN},
    {"verify", no_argument, NULL, OPT_VERIFY},
    {"json", no_argument, NULL, OPT_JSON},
    {"conns", required_argument, NULL, OPT_CONNS},
    {"max-size", required_argument, NULL, OPT_MAXSIZE},
    {"data-dir", required_argument, NULL, OPT_DATADIR},
    {"seed", required_argument, NULL, OPT_SEED},
    {"no-calibrate", no_argument, NULL, OPT_NOCAL},
    {"busy-poll", required_argument, NULL, OPT_BUSYPOLL},
    {"counters", no_argument, NULL, OPT_COUNTERS},
    {"homa-config", required_argument, NULL, OPT_HOMACONFIG},
    {"no-place", no_argument, NULL, OPT_NOPLACE},
    {"driver", required_argument, NULL, OPT_DRIVER},
    {"class", required_argument, NULL, OPT_CLASS},
    {"reply-size", required_argument, NULL, OPT_REPLYSIZE},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

enum mode { MODE_SERVER, MODE_CLIENT, MODE_COMPARE };

typedef struct cli {
    perf_opts o;
    int mode;
    int have_proto, have_test, have_port, have_size, have_outstanding;
} cli;

static int parse_args(int argc, char **argv, cli *c)
{
    perf_opts *o = &c->o;
    memset(c, 0, sizeof(*c));
    o->threads = 1;
    o->workload = "w4";
    o->gbps = 1.0;
    o->seconds = 5.0;
    o->warmup = 0.1;
    o->drain = 10.0;
    o->conns = PERF_DEFAULT_CONNS;
    o->max_size = PERF_MAX_MESSAGE;
    o->seed = 1;
    o->calibrate = 1;
    o->busy_poll_us = -1;
    const char *m = argv[1];
    if (strcmp(m, "server") == 0)
        c->mode = MODE_SERVER;
    else if (strcmp(m, "client") == 0)
        c->mode = MODE_CLIENT;
    else if (strcmp(m, "compare") == 0)
        c->mode = MODE_COMPARE;
    else
        return bad("unknown mode '%s' (server, client, compare or selftest)", m);
    optind = 2;
    int ch;
    uint64_t u;
    while ((ch = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        switch (ch) {
        case OPT_PROTO:
            if (strcmp(optarg, "homa") == 0)
                o->proto = PERF_HOMA;
            else if (strcmp(optarg, "tcp") == 0)
                o->proto = PERF_TCP;
            else
                return bad("--proto must be homa or tcp, not '%s'", optarg);
            c->have_proto = 1;
            break;
        case OPT_PORT:
            if (parse_u64(optarg, &u) < 0 || u > 65535) return bad("bad --port '%s'", optarg);
            o->port = (uint16_t)u;
            c->have_port = 1;
            break;
        case OPT_THREADS:
            if (parse_u64(optarg, &u) < 0 || u < 1 || u > 1024)
                return bad("bad --threads '%s' (1..1024)", optarg);
            o->threads = (int)u;
            break;
        case OPT_SERVER:
            o->server = optarg;
            break;
        case OPT_TEST:
            if (strcmp(optarg, "rtt") == 0)
                o->test = TEST_RTT;
            else if (strcmp(optarg, "tput") == 0)
                o->test = TEST_TPUT;
            else if (strcmp(optarg, "workload") == 0)
                o->test = TEST_WORKLOAD;
            else
                return bad("--test must be rtt, tput or workload, not '%s'", optarg);
            c->have_test = 1;
            break;
        case OPT_SIZE:
            if (parse_u64(optarg, &u) < 0 || u > 0x7fffffff) return bad("bad --size '%s'", optarg);
            o->size = (size_t)u;
            c->have_size = 1;
            break;
        case OPT_OUTSTANDING:
            if (parse_u64(optarg, &u) < 0 || u < 1 || u > 4096)
                return bad("bad --outstanding '%s' (1..4096)", optarg);
            o->outstanding = (int)u;
            c->have_outstanding = 1;
            break;
        case OPT_WORKLOAD:
            o->workload = optarg;
            break;
        case OPT_GBPS:
            if (parse_double(optarg, &o->gbps) < 0 || o->gbps <= 0)
                return bad("bad --gbps '%s'", optarg);
            break;
        case OPT_SECONDS:
            if (parse_double(optarg, &o->seconds) < 0 || o->seconds <= 0)
                return bad("bad --seconds '%s'", optarg);
            break;
        case OPT_WARMUP:
            if (parse_double(optarg, &o->warmup) < 0) return bad("bad --warmup '%s'", optarg);
            break;
        case OPT_DRAIN:
            if (parse_double(optarg, &o->drain) < 0) return bad("bad --drain '%s'", optarg);
            break;
        case OPT_VERIFY:
            o->verify = 1;
            break;
        case OPT_JSON:
            o->json = 1;
            break;
        case OPT_CONNS:
            if (parse_u64(optarg, &u) < 0 || u < 1 || u > 4096)
                return bad("bad --conns '%s' (1..4096)", optarg);
            o->conns = (int)u;
            break;
        case OPT_MAXSIZE:
            if (parse_u64(optarg, &u) < 0 || u > 0x7fffffff)
                return bad("bad --max-size '%s'", optarg);
            o->max_size = (uint32_t)u;
            break;
        case OPT_DATADIR:
            o->data_dir = optarg;
            break;
        case OPT_SEED:
            if (parse_u64(optarg, &u) < 0) return bad("bad --seed '%s'", optarg);
            o->seed = u;
            break;
        case OPT_NOCAL:
            o->calibrate = 0;
            break;
        case OPT_BUSYPOLL:
            if (parse_u64(optarg, &u) < 0 || u > 1000000)
                return bad("bad --busy-poll '%s' (0..1000000 us)", optarg);
            o->busy_poll_us = (int)u;
            break;
        case OPT_COUNTERS:
            homa_perf_counters = 1;
            break;
        case OPT_REPLYSIZE:
            if (parse_u64(optarg, &u) < 0 || u > 0x7fffffff)
                return bad("bad --reply-size '%s'", optarg);
            perf_reply_size = (long)u;
            break;
        case OPT_HOMACONFIG: {
            homa_config cfg;
            homa_config_default(&cfg);
            char err[200];
            if (cluster_homa_apply(optarg, &cfg, err, sizeof(err)) < 0) return bad("%s", err);
            homa_perf_config = optarg;
            break;
        }
        case OPT_NOPLACE:
            homa_perf_rt_flags |= HOMA_RT_NO_PLACE;
            break;
        case OPT_DRIVER:
            if (strcmp(optarg, "raw") == 0)
                homa_perf_rt_flags |= HOMA_RT_RAW;
            else if (strcmp(optarg, "udp") == 0)
                homa_perf_rt_flags &= ~HOMA_RT_RAW;
            else
                return bad("--driver must be udp or raw, not '%s'", optarg);
            break;
        case OPT_CLASS:
            if (parse_u64(optarg, &u) < 0 || u >= HOMA_SCHED_CLASSES)
                return bad("bad --class '%s' (0..3)", optarg);
            homa_perf_sched_class = (int)u;
            break;
        case OPT_HELP:
            usage(stdout);
            exit(0);
        default:
            return bad("%s", "bad option");
        }
    }
    if (optind < argc) return bad("unexpected argument '%s'", argv[optind]);
    if (c->mode != MODE_COMPARE && !c->have_proto) return bad("%s", "--proto homa|tcp is required");
    if (c->mode == MODE_SERVER) {
        if (!c->have_port) return bad("%s", "--port is required");
        return 0;
    }
    if (c->mode == MODE_CLIENT && !o->server) return bad("%s", "--server HOST:PORT is required");
    if (!c->have_test) return bad("%s", "--test rtt|tput|workload is required");
    if (o->test == TEST_WORKLOAD && perf_reply_size >= 0)
        return bad("%s", "--reply-size is for --test rtt and tput (workload responses echo)");
    if (!c->have_size)
        o->size = o->test == TEST_TPUT ? PERF_DEFAULT_TPUT_SIZE : PERF_DEFAULT_RTT_SIZE;
    if (!c->have_outstanding)
        o->outstanding = o->test == TEST_TPUT ? PERF_DEFAULT_TPUT_OUTSTANDING : 1;
    return 0;
}

/* ---- Modes ------------------------------------------------------------ */

static int run_server(const perf_opts *o)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    char err[256] = "";
    pt_server *s;
    if (pt_server_start(o, &s, err, sizeof(err)) < 0) {
        fprintf(stderr, "homa-perf: %s\n", err[0] ? err : "cannot start server");
        return 1;
    }
    printf("homa-perf: %s echo server on port %u, %d thread(s); SIGINT or SIGTERM stops it\n",
           perf_proto_name(o->proto), s->ops->port(s), o->threads);
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    s->ops->stop(s);
    return 0;
}

static int result_status(const perf_result *r)
{
    return r->fatal[0] || r->errors > 0 || r->rpcs == 0 ? 1 : 0;
}

static int run_client(const perf_opts *o)
{
    perf_addr addr;
    char err[256];
    if (perf_parse_addr(o->server, &addr, err, sizeof(err)) < 0) {
        fprintf(stderr, "homa-perf: %s\n", err);
        return 2;
    }
    perf_result *r = malloc(sizeof(*r));
    if (!r) return 1;
    perf_result_init(r);
    perf_run_client(o, &addr, r);
    perf_print_human(o, r);
    if (o->json) {
        json_writer j;
        fflush(stdout);
        json_init(&j, stdout);
        perf_json_result(&j, NULL, o, r);
        fputc('\n', stdout);
    }
    int status = result_status(r);
    perf_result_free(r);
    free(r);
    return status;
}

/* Runs one protocol of `compare`: an in-process server on an ephemeral
 * loopback port, then the client against it. */
static void compare_one(const perf_opts *base, int proto, perf_result *r)
{
    perf_opts o = *base;
    o.proto = proto;
    o.port = 0;
    char err[256] = "";
    pt_server *s;
    r->proto = proto;
    r->test = o.test;
    r->size = o.test == TEST_WORKLOAD ? 0 : o.size;
    r->outstanding = o.test == TEST_WORKLOAD ? 0 : o.outstanding;
    r->threads = o.threads;
    r->verify = o.verify;
    r->busy_poll_us = perf_busy_poll_us(&o);
    if (pt_server_start(&o, &s, err, sizeof(err)) < 0) {
        snprintf(r->fatal, sizeof(r->fatal), "server: %.200s", err[0] ? err : "cannot start");
        return;
    }
    char spec[64];
    snprintf(spec, sizeof(spec), "127.0.0.1:%u", s->ops->port(s));
    perf_addr addr;
    if (perf_parse_addr(spec, &addr, err, sizeof(err)) < 0)
        snprintf(r->fatal, sizeof(r->fatal), "%s", err);
    else
        perf_run_client(&o, &addr, r);
    s->ops->stop(s);
}

/* a / b, or NaN (JSON null) when either side has no value. */
static double ratio(double a, double b)
{
    return a > 0 && b > 0 ? a / b : NAN;
}

static int run_compare(const perf_opts *o)
{
    perf_result *r = malloc(2 * sizeof(*r));
    if (!r) return 1;
    perf_result *h = &r[0], *t = &r[1];
    perf_result_init(h);
    perf_result_init(t);
    compare_one(o, PERF_HOMA, h);
    perf_print_human(o, h);
    fflush(stdout);
    compare_one(o, PERF_TCP, t);
    perf_print_human(o, t);
    struct {
        const char *name;
        double v;
    } rs[] = {
        {"p50", ratio(hist_quantile(&h->lat, 0.5), hist_quantile(&t->lat, 0.5))},
        {"p99", ratio(hist_quantile(&h->lat, 0.99), hist_quantile(&t->lat, 0.99))},
        {"p999", ratio(hist_quantile(&h->lat, 0.999), hist_quantile(&t->lat, 0.999))},
        {"gbps", ratio(perf_result_gbps(h), perf_result_gbps(t))},
        {"rpcs_per_sec", ratio(perf_result_rate(h), perf_result_rate(t))},
        {"slowdown_mean",
         o->test == TEST_WORKLOAD ? ratio(hist_mean(&h->slow), hist_mean(&t->slow)) : NAN},
        {"slowdown_p99", o->test == TEST_WORKLOAD
                             ? ratio(hist_quantile(&h->slow, 0.99), hist_quantile(&t->slow, 0.99))
                             : NAN},
    };
    int nrs = o->test == TEST_WORKLOAD ? 7 : 5;
    printf("ratio homa/tcp (latency < 1: Homa faster; gbps, rpcs_per_sec > 1: Homa more):\n ");
    for (int i = 0; i < nrs; i++)
        printf(" %s %.3f", rs[i].name, rs[i].v);
    printf("\n");
    if (o->json) {
        json_writer j;
        fflush(stdout);
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        perf_json_result(&j, "homa", o, h);
        perf_json_result(&j, "tcp", o, t);
        json_obj_begin(&j, "ratio");
        json_str(&j, "direction", "homa/tcp");
        json_obj_begin(&j, "latency_us");
        for (int i = 0; i < 3; i++)
            json_num(&j, rs[i].name, rs[i].v);
        json_obj_end(&j);
        for (int i = 3; i < nrs; i++)
            json_num(&j, rs[i].name, rs[i].v);
        json_obj_end(&j);
        json_obj_end(&j);
        fputc('\n', stdout);
    }
    int status = result_status(h) | result_status(t);
    perf_result_free(h);
    perf_result_free(t);
    free(r);
    return status;
}

/* ---- Self test ---------------------------------------------------------- */

static int selftest(void)
{
    int fails = 0;
    hist h;
    hist_init(&h);
    /* Histogram accuracy over many magnitudes. */
    for (uint64_t v = 1; v < (1ull << 40); v = v * 3 / 2 + 1) {
        uint64_t m = hist_bucket_mid(hist_index(v));
        double rel = fabs((double)m - (double)v) / (double)v;
        if (rel > 0.004) {
            fprintf(stderr, "selftest: value %llu reported as %llu\n", (unsigned long long)v,
                    (unsigned long long)m);
            fails++;
        }
    }
    for (uint64_t v = 1; v <= 100000; v++)
        hist_record(&h, v * 1000);
    double q[] = {0.5, 0.99, 0.999};
    double want[] = {50000e3, 99000e3, 99900e3};
    for (int i = 0; i < 3; i++) {
        double got = (double)hist_quantile(&h, q[i]);
        if (fabs(got - want[i]) / want[i] > 0.01) {
            fprintf(stderr, "selftest: quantile %.3f = %.0f, want %.0f\n", q[i], got, want[i]);
            fails++;
        }
    }
    hist_free(&h);
    /* Patterns: depend on sequence and offset; any flipped byte is caught. */
    uint8_t a[1003], b[1003];
    pattern_fill(a, sizeof(a), 7);
    pattern_fill(b, sizeof(b), 8);
    if (!pattern_check(a, sizeof(a), 7) || pattern_check(a, sizeof(a), 8) ||
        memcmp(a, b, sizeof(a)) == 0) {
        fprintf(stderr, "selftest: pattern mismatch\n");
        fails++;
    }
    for (size_t i = 0; i < sizeof(a); i += 97) {
        a[i] ^= 1;
        if (pattern_check(a, sizeof(a), 7)) {
            fprintf(stderr, "selftest: flipped byte %zu not detected\n", i);
            fails++;
        }
        a[i] ^= 1;
    }
    /* Workload buckets, calibration sizes and the best-case curve. */
    static const char *const names[] = {"w1", "w2", "w3", "w4", "w5"};
    for (int w = 0; w < 5; w++) {
        wlgen g;
        char err[256];
        perf_result *r = malloc(sizeof(*r));
        if (!r || wlgen_open(&g, names[w], NULL, PERF_MAX_MESSAGE, err, sizeof(err)) < 0) {
            fprintf(stderr, "selftest: %s\n", r ? err : "out of memory");
            free(r);
            fails++;
            continue;
        }
        perf_result_init(r);
        wlgen_make_buckets(&g, r);
        wlgen_cal_sizes(&g, r);
        double total = 0;
        for (int i = 0; i < r->nbuckets; i++) {
            total += r->buckets[i].fraction;
            if (r->buckets[i].hi <= r->buckets[i].lo ||
                (i > 0 && r->buckets[i].lo != r->buckets[i - 1].hi))
                fails++;
        }
        if (r->nbuckets < 2 || fabs(total - 1.0) > 1e-6 ||
            r->buckets[r->nbuckets - 1].hi != g.max_size || r->ncal < 2 ||
            r->cal[r->ncal - 1].size != g.max_size) {
            fprintf(stderr, "selftest: %s buckets/calibration sizes wrong\n", names[w]);
            fails++;
        }
        /* A synthetic calibration: best() must interpolate and be monotone. */
        for (int i = 0; i < r->ncal; i++)
            r->cal[i].min_ns = 10000 + r->cal[i].size;
        double prev = 0;
        perf_rng rng;
        rng_seed(&rng, 1, 0);
        for (int i = 0; i < 1000; i++) {
            uint32_t s = wlgen_sample(&g, &rng);
            if (s < 1 || s > g.max_size || perf_bucket_of(r, s) < 0 ||
                s > r->buckets[perf_bucket_of(r, s)].hi ||
                s <= r->buckets[perf_bucket_of(r, s)].lo ||
                fabs(perf_best_ns(r, s) - (10000.0 + s)) > 1e-6 * (10000.0 + s)) {
                fprintf(stderr, "selftest: %s sample %u misplaced\n", names[w], s);
                fails++;
                break;
            }
        }
        for (uint32_t s = 1; s <= g.max_size; s = s * 2 + 1) {
            double b = perf_best_ns(r, s);
            if (b < prev) fails++;
            prev = b;
        }
        perf_result_free(r);
        free(r);
        wlgen_close(&g);
    }
    printf("selftest: %s\n", fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "selftest") == 0) return selftest();
    if (strcmp(argv[1], "cluster") == 0) return cluster_main(argc, argv);
    if (strcmp(argv[1], "cluster-agent") == 0) return cluster_agent_main(argc, argv);
    if (strcmp(argv[1], "soak") == 0) return soak_main(argc, argv);
    if (strcmp(argv[1], "soak-worker") == 0) return soak_worker_main(argc, argv);
    cli c;
    int rc = parse_args(argc, argv, &c);
    if (rc) return rc;
    switch (c.mode) {
    case MODE_SERVER:
        return run_server(&c.o);
    case MODE_CLIENT:
        return run_client(&c.o);
    default:
        return run_compare(&c.o);
    }
}
