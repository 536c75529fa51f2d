/* homa-perf cluster: the command line.  The usage text, the long options
 * and cluster_parse_args(), which fills a copts with the defaults and then
 * with the options given, checking every value's range (bad usage returns
 * 2 after a message; --help prints the usage and exits).  What the options
 * mean for a run is in cluster/run.c and docs/cluster.md. */
#include "ctl.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Options ------------------------------------------------------------ */

static const char cluster_usage_text[] =
    "usage: homa-perf cluster [--workload wN] [--load F] [--hosts N] [--seconds S]\n"
    "                         [--json OUT] [--plot OUT.png] [options]\n"
    "\n"
    "Runs the Homa-vs-TCP experiment on an emulated cluster (network namespaces\n"
    "and a priority switch, scripts/homa-cluster; needs root): every host is an\n"
    "echo server and a client of every other host; each host offers fraction F\n"
    "of its link rate (requests it sends + responses it returns, payload bytes);\n"
    "Homa runs first, then TCP, with the same message sequence.\n"
    "\n"
    "  --workload W        w1..w5 or a CDF path (default w4)\n"
    "  --load F            offered load, fraction of the link rate (default 0.8)\n"
    "  --hosts N           hosts (default 4)\n"
    "  --seconds S         measured time per protocol (default 10)\n"
    "  --json OUT          write the results as JSON to OUT\n"
    "  --plot OUT.png      draw slowdown vs message length (both protocols)\n"
    "  --link-gbps G|auto  link rate in Gbit/s; auto (default): 0.1 per CPU, at most 1\n"
    "  --queue PKTS        switch packets per priority queue per port (default 64)\n"
    "  --host-queues Q     host NIC queue: prio (default; 8 priority queues like the\n"
    "                      switch) or fifo\n"
    "  --cluster NAME      use the existing cluster NAME (homa-cluster up --name NAME)\n"
    "                      instead of creating one; it is left up\n"
    "  --protos LIST       homa,tcp (default), homa or tcp\n"
    "  --seed N            seed of the message sequence (default 1)\n"
    "  --warmup S          unmeasured time at the start (default 1)\n"
    "  --drain S           wait for RPCs still in flight at the end (default 10)\n"
    "  --max-size BYTES    clamp longer messages (default 1000000, 0 = none)\n"
    "  --verify            check every response byte (pattern payloads)\n"
    "  --busy-poll US      spin before sleeping, both protocols (default 0)\n"
    "  --server-threads N  0 (default): each host's one event-loop thread answers\n"
    "                      requests and drives the client; N > 0: N server threads\n"
    "  --conns N           TCP connections from each host to each other host (default 4)\n"
    "  --homa-config SPEC  engine settings on top of the cluster's defaults (scaled to\n"
    "                      the link: unsched_bytes = grant_window = one 50 us round trip,\n"
    "                      at least 2 packets; max_incoming = 8 of them; tick_us=5000),\n"
    "                      e.g. max_overcommit=4\n"
    "                      (keys: unsched_bytes grant_window max_incoming max_overcommit\n"
    "                      grant_fifo_permille num_priorities adaptive_cutoffs\n"
    "                      cutoff_update_msgs resend_ticks resend_interval timeout_ticks\n"
    "                      tick_us max_nic_queue_ns pacer_bypass_bytes gap_resend_ticks\n"
    "                      link_mbps; the last is the pacer rate, which cluster mode\n"
    "                      sets from --link-gbps)\n"
    "  --homa-gso          let Homa use UDP GSO (default off: the host NIC queue would\n"
    "                      hold 64 KB bursts)\n"
    "  --pacer             run Homa's pacer (default off: in this runtime it costs about\n"
    "                      3x the CPU time; the host NICs' priority queues stand in)\n"
    "  --no-pacer          Homa without its pacer (the default)\n"
    "  --pacer-fraction F  with --pacer: pacer rate / link rate (default 0.95: the engine counts\n"
    "                      Homa header + payload, not UDP/IP/Ethernet headers)\n"
    "  --no-cutoffs        do not capture CUTOFFS packets (needs tcpdump)\n"
    "  --nice N            run the cluster's processes at this niceness (-20..19, default\n"
    "                      0); e.g. -10 on a machine shared with batch jobs\n"
    "  --procs N           processes per host (default 1), each an echo server on port\n"
    "                      4000+i and a client of every process of every other host;\n"
    "                      the host's load is split evenly among them\n"
    "  --homad             Homa through homad: one daemon per host (its only engine)\n"
    "                      serves all the host's processes (default: each process\n"
    "                      embeds an engine of its own)\n"
    "  --sample-us US      sample each host's granted-but-unreceived bytes (the\n"
    "                      engines' incoming_bytes, summed over the host's processes\n"
    "                      when embedded) every US microseconds (default 1000, 0 off)\n"
    "  --keep DIR          keep agents' logs and per-message records in DIR\n"
    "  --data-dir DIR      where to find workloads/<name>.cdf\n"
    "\n"
    "Exit status: 0 ok, 1 failed or errors, 2 bad usage, 77 not root / no namespaces.\n";

enum {
    C_WORKLOAD = 400,
    C_LOAD,
    C_HOSTS,
    C_SECONDS,
    C_JSON,
    C_PLOT,
    C_LINK,
    C_QUEUE,
    C_HOSTQ,
    C_CLUSTER,
    C_PROTOS,
    C_SEED,
    C_WARMUP,
    C_DRAIN,
    C_MAXSIZE,
    C_VERIFY,
    C_BUSYPOLL,
    C_SRVTHREADS,
    C_CONNS,
    C_HOMACFG,
    C_HOMAGSO,
    C_NOPACER,
    C_PACER,
    C_PACERFRAC,
    C_NOCUT,
    C_KEEP,
    C_NICE,
    C_DATADIR,
    C_PROCS,
    C_HOMAD,
    C_SAMPLE,
    C_HELP,
};

static const struct option cluster_opts[] = {
    {"workload", required_argument, NULL, C_WORKLOAD},
    {"load", required_argument, NULL, C_LOAD},
    {"hosts", required_argument, NULL, C_HOSTS},
    {"seconds", required_argument, NULL, C_SECONDS},
    {"json", required_argument, NULL, C_JSON},
    {"plot", required_argument, NULL, C_PLOT},
    {"link-gbps", required_argument, NULL, C_LINK},
    {"queue", required_argument, NULL, C_QUEUE},
    {"host-queues", required_argument, NULL, C_HOSTQ},
    {"cluster", required_argument, NULL, C_CLUSTER},
    {"protos", required_argument, NULL, C_PROTOS},
    {"seed", required_argument, NULL, C_SEED},
    {"warmup", required_argument, NULL, C_WARMUP},
    {"drain", required_argument, NULL, C_DRAIN},
    {"max-size", required_argument, NULL, C_MAXSIZE},
    {"verify", no_argument, NULL, C_VERIFY},
    {"busy-poll", required_argument, NULL, C_BUSYPOLL},
    {"server-threads", required_argument, NULL, C_SRVTHREADS},
    {"conns", required_argument, NULL, C_CONNS},
    {"homa-config", required_argument, NULL, C_HOMACFG},
    {"homa-gso", no_argument, NULL, C_HOMAGSO},
    {"no-pacer", no_argument, NULL, C_NOPACER},
    {"pacer", no_argument, NULL, C_PACER},
    {"pacer-fraction", required_argument, NULL, C_PACERFRAC},
    {"no-cutoffs", no_argument, NULL, C_NOCUT},
    {"keep", required_argument, NULL, C_KEEP},
    {"nice", required_argument, NULL, C_NICE},
    {"data-dir", required_argument, NULL, C_DATADIR},
    {"procs", required_argument, NULL, C_PROCS},
    {"homad", no_argument, NULL, C_HOMAD},
    {"sample-us", required_argument, NULL, C_SAMPLE},
    {"help", no_argument, NULL, C_HELP},
    {NULL, 0, NULL, 0},
};

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "homa-perf cluster: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(homa-perf cluster --help for usage)\n");
    return 2;
}

static int num_arg(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cluster_parse_args(int argc, char **argv, copts *o)
{
    memset(o, 0, sizeof(*o));
    o->workload = "w4";
    o->load = 0.8;
    o->hosts = 4;
    o->seconds = 10;
    o->link_gbps = 0; /* auto: cluster_auto_gbps() */
    o->queue = 64;
    o->host_queues = "prio";
    o->protos[0] = PERF_HOMA;
    o->protos[1] = PERF_TCP;
    o->nprotos = 2;
    o->seed = 1;
    o->warmup = 1;
    o->drain = 10;
    o->max_size = PERF_MAX_MESSAGE;
    o->busy_poll_us = 0;
    o->server_threads = 0;
    o->conns = PERF_DEFAULT_CONNS;
    o->capture_cutoffs = 1;
    o->pacer_fraction = 0.95;
    o->no_pacer = 1;
    o->procs = 1;
    o->sample_us = 1000;
    optind = 2;
    int ch;
    double v;
    while ((ch = getopt_long(argc, argv, "", cluster_opts, NULL)) != -1) {
        switch (ch) {
        case C_WORKLOAD:
            o->workload = optarg;
            break;
        case C_LOAD:
            if (num_arg(optarg, 0.001, 1.5, &o->load) < 0)
                return usage_error("bad --load '%s' (0.001..1.5)", optarg);
            break;
        case C_HOSTS:
            if (num_arg(optarg, 2, CLUSTER_MAX_HOSTS, &v) < 0 || v != floor(v))
                return usage_error("bad --hosts '%s' (2..64)", optarg);
            o->hosts = (int)v;
            break;
        case C_SECONDS:
            if (num_arg(optarg, 0.1, 3600, &o->seconds) < 0)
                return usage_error("bad --seconds '%s'", optarg);
            break;
        case C_JSON:
            o->json_path = optarg;
            break;
        case C_PLOT:
            o->plot_path = optarg;
            break;
        case C_LINK:
            if (strcmp(optarg, "auto") == 0)
                o->link_gbps = 0;
            else if (num_arg(optarg, 0.001, 100, &o->link_gbps) < 0)
                return usage_error("bad --link-gbps '%s' (Gbit/s or auto)", optarg);
            break;
        case C_QUEUE:
            if (num_arg(optarg, 1, 100000, &v) < 0 || v != floor(v))
                return usage_error("bad --queue '%s'", optarg);
            o->queue = (int)v;
            break;
        case C_HOSTQ:
            if (strcmp(optarg, "fifo") != 0 && strcmp(optarg, "prio") != 0)
                return usage_error("--host-queues must be fifo or prio, not '%s'", optarg);
            o->host_queues = optarg;
            break;
        case C_CLUSTER:
            o->cluster = optarg;
            break;
        case C_PROTOS:
            if (strcmp(optarg, "homa,tcp") == 0) {
                o->nprotos = 2;
            } else if (strcmp(optarg, "tcp,homa") == 0) {
                o->protos[0] = PERF_TCP;
                o->protos[1] = PERF_HOMA;
                o->nprotos = 2;
            } else if (strcmp(optarg, "homa") == 0 || strcmp(optarg, "tcp") == 0) {
                o->protos[0] = strcmp(optarg, "tcp") == 0 ? PERF_TCP : PERF_HOMA;
                o->nprotos = 1;
            } else {
                return usage_error("bad --protos '%s' (homa,tcp, homa or tcp)", optarg);
            }
            break;
        case C_SEED:
            if (num_arg(optarg, 0, 1.8e19, &v) < 0) return usage_error("bad --seed '%s'", optarg);
            o->seed = (uint64_t)v;
            break;
        case C_WARMUP:
            if (num_arg(optarg, 0, 3600, &o->warmup) < 0)
                return usage_error("bad --warmup '%s'", optarg);
            break;
        case C_DRAIN:
            if (num_arg(optarg, 0, 3600, &o->drain) < 0)
                return usage_error("bad --drain '%s'", optarg);
            break;
        case C_MAXSIZE:
            if (num_arg(optarg, 0, 0x7fffffff, &v) < 0 || v != floor(v))
                return usage_error("bad --max-size '%s'", optarg);
            o->max_size = (uint32_t)v;
            break;
        case C_VERIFY:
            o->verify = 1;
            break;
        case C_BUSYPOLL:
            if (num_arg(optarg, 0, 1000000, &v) < 0 || v != floor(v))
                return usage_error("bad --busy-poll '%s'", optarg);
            o->busy_poll_us = (int)v;
            break;
        case C_SRVTHREADS:
            if (num_arg(optarg, 0, 64, &v) < 0 || v != floor(v))
                return usage_error("bad --server-threads '%s' (0..64)", optarg);
            o->server_threads = (int)v;
            break;
        case C_CONNS:
            if (num_arg(optarg, 1, 1024, &v) < 0 || v != floor(v))
                return usage_error("bad --conns '%s'", optarg);
            o->conns = (int)v;
            break;
        case C_HOMACFG: {
            homa_config cfg;
            char err[256];
            homa_config_default(&cfg);
            if (strlen(optarg) >= sizeof(((cluster_homa_tuning *)0)->spec) ||
                cluster_homa_apply(optarg, &cfg, err, sizeof(err)) < 0)
                return usage_error("%s", strlen(optarg) >= 512 ? "--homa-config too long" : err);
            o->homa_config = optarg;
            break;
        }
        case C_HOMAGSO:
            o->homa_gso = 1;
            break;
        case C_NOPACER:
            o->no_pacer = 1;
            break;
        case C_PACER:
            o->no_pacer = 0;
            break;
        case C_PACERFRAC:
            if (num_arg(optarg, 0.1, 2, &o->pacer_fraction) < 0)
                return usage_error("bad --pacer-fraction '%s' (0.1..2)", optarg);
            break;
        case C_NOCUT:
            o->capture_cutoffs = 0;
            break;
        case C_KEEP:
            if (strlen(optarg) > 400) return usage_error("%s", "--keep path too long");
            o->keep_dir = optarg;
            break;
        case C_DATADIR:
            o->data_dir = optarg;
            break;
        case C_NICE: {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end || n < -20 || n > 19)
                return usage_error("bad --nice '%s' (-20..19)", optarg);
            o->nice = (int)n;
            break;
        }
        case C_PROCS:
            if (num_arg(optarg, 1, 16, &v) < 0 || v != floor(v))
                return usage_error("bad --procs '%s' (1..16)", optarg);
            o->procs = (int)v;
            break;
        case C_HOMAD:
            o->homad = 1;
            break;
        case C_SAMPLE:
            if (num_arg(optarg, 0, 1000000, &v) < 0 || v != floor(v) || (v > 0 && v < 100))
                return usage_error("bad --sample-us '%s' (0, or 100..1000000)", optarg);
            o->sample_us = (int)v;
            break;
        case C_HELP:
            fputs(cluster_usage_text, stdout);
            exit(0);
        default:
            return usage_error("%s", "bad option");
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (o->hosts * o->procs > CLUSTER_MAX_AGENTS)
        return usage_error("%s", "--hosts x --procs must be at most 64");
    if (o->cluster) {
        for (const char *p = o->cluster; *p; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9') || *p == '_'))
                return usage_error("bad --cluster name '%s'", o->cluster);
    }
    return 0;
}
