/* homa-perf soak: options, the fault schedule, payload keys (soak.h). */
#include "soak.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <homa/homa.h>

#include "cluster/cluster.h"
#include "pattern.h"

enum {
    O_CLIENTS = 256,
    O_SERVERS,
    O_MINUTES,
    O_SECONDS,
    O_SEED,
    O_WORKLOAD,
    O_MAXSIZE,
    O_INFLIGHT,
    O_GBPS,
    O_FAULTS,
    O_PHASE,
    O_JSON,
    O_SRVTHREADS,
    O_BUSYPOLL,
    O_HANG,
    O_HOMACONFIG,
    O_DATADIR,
    O_VERBOSE,
    O_HELP,
    /* worker only (not in --help) */
    O_ROLE,
    O_INDEX,
    O_PORT,
    O_PORTS,
    O_STARTPHASE,
    O_STARTSPEC,
};

static const struct option soak_long_opts[] = {
    {"clients", required_argument, NULL, O_CLIENTS},
    {"servers", required_argument, NULL, O_SERVERS},
    {"minutes", required_argument, NULL, O_MINUTES},
    {"seconds", required_argument, NULL, O_SECONDS},
    {"seed", required_argument, NULL, O_SEED},
    {"workload", required_argument, NULL, O_WORKLOAD},
    {"max-size", required_argument, NULL, O_MAXSIZE},
    {"in-flight", required_argument, NULL, O_INFLIGHT},
    {"gbps", required_argument, NULL, O_GBPS},
    {"faults", required_argument, NULL, O_FAULTS},
    {"phase-seconds", required_argument, NULL, O_PHASE},
    {"json", no_argument, NULL, O_JSON},
    {"server-threads", required_argument, NULL, O_SRVTHREADS},
    {"busy-poll", required_argument, NULL, O_BUSYPOLL},
    {"hang-seconds", required_argument, NULL, O_HANG},
    {"homa-config", required_argument, NULL, O_HOMACONFIG},
    {"data-dir", required_argument, NULL, O_DATADIR},
    {"verbose", no_argument, NULL, O_VERBOSE},
    {"help", no_argument, NULL, O_HELP},
    {"role", required_argument, NULL, O_ROLE},
    {"index", required_argument, NULL, O_INDEX},
    {"port", required_argument, NULL, O_PORT},
    {"ports", required_argument, NULL, O_PORTS},
    {"start-phase", required_argument, NULL, O_STARTPHASE},
    {"start-spec", required_argument, NULL, O_STARTSPEC},
    {NULL, 0, NULL, 0},
};

static const char soak_usage[] =
    "usage: homa-perf soak [--minutes M | --seconds S] [--clients N] [--servers N]\n"
    "                      [--workload w1..w5|mixed] [--max-size BYTES] [--in-flight N]\n"
    "                      [--gbps G] [--faults SPEC] [--phase-seconds S] [--seed S] [--json]\n"
    "\n"
    "Runs N client and N server processes on loopback (this program, re-executed),\n"
    "under a seeded fault schedule that changes every --phase-seconds, and checks\n"
    "every byte of every request and response.  Exit status 0 only if no RPC failed\n"
    "outside a disruptive phase, no request reached a server process twice, no byte\n"
    "was wrong, nothing hung, and no process's memory or descriptors kept growing.\n"
    "\n"
    "  --clients N          client processes (default 2; at most 64 in all)\n"
    "  --servers N          server processes (default 2)\n"
    "  --minutes M          run time (or --seconds S; default 60 s)\n"
    "  --seconds S\n"
    "  --workload W         w1..w5, or mixed (each RPC draws one of w1..w5; default)\n"
    "  --max-size BYTES     longest message (default 10000000; the engine's maximum\n"
    "                       message length is raised to it)\n"
    "  --in-flight N        RPCs each client keeps outstanding (closed loop, 1..4096;\n"
    "                       default 8); servers are picked at random per RPC\n"
    "  --gbps G             cap each client's request rate at G/clients Gbit/s of\n"
    "                       request payload (default: no cap, closed loop only)\n"
    "  --faults SPEC        the same HOMA_FAULTS-style spec on every worker in every\n"
    "                       phase, instead of the schedule (phase 0 stays clean)\n"
    "  --phase-seconds S    length of a phase (default 4)\n"
    "  --seed S             seed of the schedule, the sizes and the faults (default 1)\n"
    "  --server-threads N   threads per server process (default 2)\n"
    "  --busy-poll US       runtime busy polling (default 0: many processes share\n"
    "                       few cores)\n"
    "  --hang-seconds S     an RPC outstanding this long is a hang (default 60)\n"
    "  --homa-config K=V,.. engine settings (keys as homa-perf cluster --homa-config)\n"
    "  --data-dir DIR       where to find workloads/<name>.cdf\n"
    "  --json               print one JSON object as the last line\n"
    "  --verbose            workers' progress on stderr\n";

static int soak_bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "homa-perf soak: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(homa-perf soak --help for usage)\n");
    return 2;
}

static int num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int whole(const char *s, double lo, double hi, double *out)
{
    return num(s, lo, hi, out) != 0 || *out != floor(*out) ? -1 : 0;
}

int soak_parse(int argc, char **argv, int first, soak_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->clients = 2;
    o->servers = 2;
    o->seconds = 60;
    o->phase_seconds = 4;
    o->seed = 1;
    o->workload = "mixed";
    o->max_size = SOAK_DEFAULT_MAX_SIZE;
    o->in_flight = 8;
    o->server_threads = 2;
    o->busy_poll_us = 0;
    o->hang_seconds = 60;
    o->start_phase = -1;
    optind = first;
    int ch;
    double v;
    while ((ch = getopt_long(argc, argv, "", soak_long_opts, NULL)) != -1) {
        switch (ch) {
        case O_CLIENTS:
        case O_SERVERS:
            if (whole(optarg, 1, SOAK_MAX_PROCS, &v))
                return soak_bad("bad process count '%s' (1..64)", optarg);
            *(ch == O_CLIENTS ? &o->clients : &o->servers) = (int)v;
            break;
        case O_MINUTES:
            if (num(optarg, 0.001, 1e6, &v)) return soak_bad("bad --minutes '%s'", optarg);
            o->seconds = v * 60;
            break;
        case O_SECONDS:
            if (num(optarg, 0.1, 1e8, &v)) return soak_bad("bad --seconds '%s'", optarg);
            o->seconds = v;
            break;
        case O_SEED:
            if (whole(optarg, 0, 1.8e19, &v)) return soak_bad("bad --seed '%s'", optarg);
            o->seed = (uint64_t)v;
            break;
        case O_WORKLOAD:
            o->workload = optarg;
            break;
        case O_MAXSIZE:
            if (whole(optarg, SOAK_REQ_HDR, 0x7fffffff, &v))
                return soak_bad("bad --max-size '%s' (32..2147483647)", optarg);
            o->max_size = (uint32_t)v;
            break;
        case O_INFLIGHT:
            if (whole(optarg, 1, SOAK_MAX_INFLIGHT, &v))
                return soak_bad("bad --in-flight '%s' (1..4096)", optarg);
            o->in_flight = (int)v;
            break;
        case O_GBPS:
            if (num(optarg, 1e-6, 1e4, &v)) return soak_bad("bad --gbps '%s'", optarg);
            o->gbps = v;
            break;
        case O_FAULTS: {
            homa_faults f;
            char err[200];
            if (homa_faults_parse(optarg, &f, err, sizeof(err)) != 0)
                return soak_bad("--faults: %s", err);
            if (strchr(optarg, ' ') != NULL) return soak_bad("--faults '%s': no blanks", optarg);
            if (strlen(optarg) >= SOAK_SPEC_LEN - 24)
                return soak_bad("--faults '%s' is too long", optarg);
            o->faults = optarg;
            break;
        }
        case O_PHASE:
            if (num(optarg, 0.2, 3600, &v)) return soak_bad("bad --phase-seconds '%s'", optarg);
            o->phase_seconds = v;
            break;
        case O_JSON:
            o->json = 1;
            break;
        case O_SRVTHREADS:
            if (whole(optarg, 1, 64, &v)) return soak_bad("bad --server-threads '%s'", optarg);
            o->server_threads = (int)v;
            break;
        case O_BUSYPOLL:
            if (whole(optarg, 0, 1000000, &v)) return soak_bad("bad --busy-poll '%s'", optarg);
            o->busy_poll_us = (int)v;
            break;
        case O_HANG:
            if (num(optarg, 1, 86400, &v)) return soak_bad("bad --hang-seconds '%s'", optarg);
            o->hang_seconds = v;
            break;
        case O_HOMACONFIG: {
            homa_config cfg;
            homa_config_default(&cfg);
            char err[200];
            if (cluster_homa_apply(optarg, &cfg, err, sizeof(err)) < 0) return soak_bad("%s", err);
            o->homa_config = optarg;
            break;
        }
        case O_DATADIR:
            o->data_dir = optarg;
            break;
        case O_VERBOSE:
            o->verbose = 1;
            break;
        case O_HELP:
            fputs(soak_usage, stdout);
            exit(0);
        case O_ROLE:
            if (strcmp(optarg, "client") == 0)
                o->worker_role = SOAK_ROLE_CLIENT;
            else if (strcmp(optarg, "server") == 0)
                o->worker_role = SOAK_ROLE_SERVER;
            else
                return soak_bad("bad --role '%s'", optarg);
            break;
        case O_INDEX:
            if (whole(optarg, 0, SOAK_MAX_PROCS, &v)) return soak_bad("bad --index '%s'", optarg);
            o->index = (int)v;
            break;
        case O_PORT:
            if (whole(optarg, 0, 65535, &v)) return soak_bad("bad --port '%s'", optarg);
            o->port = (int)v;
            break;
        case O_PORTS:
            o->ports = optarg;
            break;
        case O_STARTPHASE:
            if (whole(optarg, 0, 1e9, &v)) return soak_bad("bad --start-phase '%s'", optarg);
            o->start_phase = (int)v;
            break;
        case O_STARTSPEC:
            o->start_spec = optarg;
            break;
        default:
            return soak_bad("%s", "bad option");
        }
    }
    if (optind < argc) return soak_bad("unexpected argument '%s'", argv[optind]);
    if (o->clients + o->servers > SOAK_MAX_PROCS)
        return soak_bad("%s", "at most 64 processes (--clients + --servers)");
    if (o->phase_seconds > o->seconds) o->phase_seconds = o->seconds;
    return 0;
}

int soak_runtime_options(const soak_opts *o, homa_runtime_options *ro, char *err, size_t errlen)
{
    homa_runtime_options_default(ro);
    ro->busy_poll_us = (uint32_t)o->busy_poll_us;
    /* Many processes share few cores here: one can be descheduled for
     * longer than the default 100 ms timeout, which then fails RPCs that
     * are fine.  The soak is about correctness, so its default is 1 s
     * (--homa-config timeout_ticks=N overrides). */
    ro->config.timeout_ticks = SOAK_TIMEOUT_TICKS;
    if (o->homa_config && cluster_homa_apply(o->homa_config, &ro->config, err, errlen) < 0)
        return -1;
    if (o->max_size > ro->config.max_message_length) ro->config.max_message_length = o->max_size;
    return 0;
}

uint64_t soak_key(uint64_t seed, int client, uint64_t seq, int response)
{
    return pattern_mix64(pattern_mix64(seed * 0x9e3779b97f4a7c15ull + (uint64_t)client) ^
                         (seq * 2 + (uint64_t)(response != 0)));
}

/* ---- Fault schedule --------------------------------------------------- */

/* Kinds of phase.  Loss is applied on transmission only (dir=tx), so each
 * packet crosses one filter at the named rate (with dir=both it would
 * cross the sender's and the receiver's). */
enum {
    K_CLEAN,
    K_LOSS1,
    K_LOSS5,
    K_LOSS20,
    K_BURST,
    K_DUP,
    K_REORDER,
    K_MIXED,
    K_GRANT,
    K_RESEND,
    K_ACK,
    K_NEED_ACK,
    K_BUSY,
    K_LAST_DATA,
    K_ONEWAY_REQ,
    K_ONEWAY_RESP,
    K_BLACKOUT,
    K_BLACKOUT_LONG,
    K_RESTART,
    K_KINDS
};

static void set_phase(soak_phase *p, int kind, uint64_t seed, uint64_t timeout_ns)
{
    memset(p, 0, sizeof(*p));
    char f[SOAK_SPEC_LEN] = "";
    const char *name = "clean";
    int client_only = 0, server_only = 0;
    unsigned long tmo_ms = (unsigned long)(timeout_ns / 1000000u);
    if (tmo_ms < 4) tmo_ms = 4;
    switch (kind) {
    case K_CLEAN:
        break;
    case K_LOSS1:
        name = "loss1";
        snprintf(f, sizeof(f), "drop=0.01,dir=tx");
        break;
    case K_LOSS5:
        name = "loss5";
        snprintf(f, sizeof(f), "drop=0.05,dir=tx");
        break;
    case K_LOSS20:
        name = "loss20";
        snprintf(f, sizeof(f), "drop=0.2,dir=tx");
        break;
    case K_BURST:
        name = "burst";
        snprintf(f, sizeof(f), "drop=0.05,burst=4,dir=tx");
        break;
    case K_DUP:
        name = "dup";
        snprintf(f, sizeof(f), "dup=0.05,dir=tx");
        break;
    case K_REORDER:
        name = "reorder";
        snprintf(f, sizeof(f), "reorder=0.1,reorder_depth=8,dir=tx");
        break;
    case K_MIXED:
        name = "loss20+dup+reord";
        snprintf(f, sizeof(f), "drop=0.2,dup=0.05,reorder=0.1,reorder_depth=8,dir=tx");
        break;
    case K_GRANT:
        name = "drop-grant";
        snprintf(f, sizeof(f), "drop_grant=0.3,dir=tx");
        break;
    case K_RESEND:
        name = "drop-resend";
        snprintf(f, sizeof(f), "drop_resend=0.5,drop=0.05,dir=tx");
        break;
    case K_ACK:
        name = "drop-ack";
        snprintf(f, sizeof(f), "drop_ack=0.5,dir=tx");
        break;
    case K_NEED_ACK:
        name = "drop-need-ack";
        snprintf(f, sizeof(f), "drop_need_ack=0.5,drop_ack=0.3,dir=tx");
        break;
    case K_BUSY:
        name = "drop-busy";
        snprintf(f, sizeof(f), "drop_busy=0.5,drop=0.02,dir=tx");
        break;
    case K_LAST_DATA:
        name = "drop-last-data";
        snprintf(f, sizeof(f), "drop_last_data=0.3,dir=tx");
        break;
    case K_ONEWAY_REQ:
        name = "oneway-requests";
        client_only = 1;
        snprintf(f, sizeof(f), "drop=0.2,dir=tx");
        break;
    case K_ONEWAY_RESP:
        name = "oneway-responses";
        server_only = 1;
        snprintf(f, sizeof(f), "drop=0.2,dir=tx");
        break;
    case K_BLACKOUT:
        /* A quarter of the timeout, on transmission: a client and a server
         * whose windows do not overlap are silent for at most half of it. */
        name = "blackout-short";
        snprintf(f, sizeof(f), "blackout_ms=%lu,blackout_every_ms=%lu,dir=tx", tmo_ms / 4,
                 tmo_ms * 5);
        break;
    case K_BLACKOUT_LONG:
        name = "blackout-long";
        snprintf(f, sizeof(f), "blackout_ms=%lu,blackout_start_ms=100,dir=tx", tmo_ms * 3);
        p->disruptive = 1;
        break;
    case K_RESTART:
        name = "restart";
        p->restart = 1;
        p->disruptive = 1;
        break;
    }
    snprintf(p->name, sizeof(p->name), "%s", name);
    if (f[0] != '\0') {
        size_t n = strlen(f);
        snprintf(f + n, sizeof(f) - n, ",seed=%llu", (unsigned long long)seed);
        if (!server_only) snprintf(p->client_spec, sizeof(p->client_spec), "%s", f);
        if (!client_only) snprintf(p->server_spec, sizeof(p->server_spec), "%s", f);
    }
}

int soak_schedule(const soak_opts *o, uint64_t timeout_ns, soak_phase **out, char *err,
                  size_t errlen)
{
    int n = (int)ceil(o->seconds / o->phase_seconds - 1e-9);
    if (n < 1) n = 1;
    soak_phase *ph = calloc((size_t)n, sizeof(*ph));
    if (ph == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    set_phase(&ph[0], K_CLEAN, 0, timeout_ns);
    snprintf(ph[0].name, sizeof(ph[0].name), "warmup");
    int order[K_KINDS];
    int pos = K_KINDS;
    uint64_t rng = pattern_mix64(o->seed ^ 0x50ac);
    for (int i = 1; i < n; i++) {
        uint64_t pseed = pattern_mix64(o->seed * 1000003u + (uint64_t)i) | 1;
        if (o->faults != NULL) {
            memset(&ph[i], 0, sizeof(ph[i]));
            snprintf(ph[i].name, sizeof(ph[i].name), "fixed");
            snprintf(ph[i].client_spec, sizeof(ph[i].client_spec), "%s", o->faults);
            snprintf(ph[i].server_spec, sizeof(ph[i].server_spec), "%s", o->faults);
            /* A seed per phase and process would need the spec to have
             * none: keep the user's spec as given. */
            continue;
        }
        if (pos == K_KINDS) {
            /* A new cycle: every kind once, in a seeded order (Fisher-Yates). */
            for (int k = 0; k < K_KINDS; k++)
                order[k] = k;
            for (int k = K_KINDS - 1; k > 0; k--) {
                rng = pattern_mix64(rng + 1);
                int j = (int)(rng % (uint64_t)(k + 1));
                int t = order[k];
                order[k] = order[j];
                order[j] = t;
            }
            /* Never two disruptive phases in a row across cycles. */
            if (i > 1 && ph[i - 1].disruptive &&
                (order[0] == K_RESTART || order[0] == K_BLACKOUT_LONG)) {
                int t = order[0];
                order[0] = order[K_KINDS / 2];
                order[K_KINDS / 2] = t;
            }
            pos = 0;
        }
        set_phase(&ph[i], order[pos++], pseed, timeout_ns);
    }
    *out = ph;
    return n;
}
