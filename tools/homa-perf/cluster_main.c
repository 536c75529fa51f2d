/* homa-perf cluster: the Homa-vs-TCP experiment on an emulated cluster.
 *
 *   homa-perf cluster --workload wN --load F --hosts N --seconds S
 *                     --json OUT [--plot OUT.png] [more options]
 *
 * Sets up a cluster with scripts/homa-cluster (or uses one given with
 * --cluster), then for Homa and then TCP: starts an agent in every host
 * (cluster_agent.c), measures the best-case RTTs on the idle cluster, runs
 * the same message schedule on every host at fraction F of the link rate,
 * collects the per-message records and the switch's queue counters, and
 * finally writes JSON, a table with the ratios and a PNG chart.  The
 * cluster is torn down on exit, also on failure and on Ctrl-C.
 * docs/cluster.md describes the method. */
#include "cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json.h"

#define NPRIO 8
#define MAX_COUNTERS 128
#define AGENT_PORT 4000

/* ---- Options ------------------------------------------------------------ */

typedef struct copts {
    const char *workload;
    double load;
    int hosts;
    double seconds;
    const char *json_path;
    const char *plot_path;
    double link_gbps;
    int queue;
    const char *host_queues;
    const char *cluster; /* use this existing cluster */
    int protos[2];
    int nprotos;
    uint64_t seed;
    double warmup, drain;
    uint32_t max_size;
    int verify;
    int busy_poll_us;
    int server_threads;
    int conns;
    const char *homa_config;
    int homa_gso;
    int no_pacer;
    double pacer_fraction;
    const char *keep_dir;
    const char *data_dir;
    int capture_cutoffs;
    int nice;
} copts;

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

static int parse_cluster_args(int argc, char **argv, copts *o)
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
        case C_HELP:
            fputs(cluster_usage_text, stdout);
            exit(0);
        default:
            return usage_error("%s", "bad option");
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (o->cluster) {
        for (const char *p = o->cluster; *p; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9') || *p == '_'))
                return usage_error("bad --cluster name '%s'", o->cluster);
    }
    return 0;
}

/* ---- Stop requests and cleanup ---------------------------------------------- */

static volatile sig_atomic_t g_stop;

/* snprintf for paths and messages whose parts are bounded elsewhere. */
static void fmt(char *buf, size_t len, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *buf, size_t len, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, len, f, ap);
    va_end(ap);
}

static void on_signal(int sig)
{
    g_stop = sig;
}

static uint64_t now_ns(void)
{
    return perf_now_ns();
}

/* Runs argv, waits; stdout to /dev/null when quiet.  Returns the exit
 * status (or -1). */
static int run_cmd(char *const argv[], int quiet)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        signal(SIGINT, SIG_IGN); /* finish (e.g. a teardown) even on Ctrl-C */
        if (quiet) {
            int fd = open("/dev/null", O_WRONLY);
            if (fd >= 0) {
                dup2(fd, 1);
                close(fd);
            }
        }
        execvp(argv[0], argv);
        fprintf(stderr, "homa-perf cluster: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs argv and captures its stdout (at most cap-1 bytes).  Returns the
 * exit status or -1. */
static int capture_cmd(char *const argv[], char *buf, size_t cap)
{
    int p[2];
    if (pipe(p) < 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        signal(SIGINT, SIG_IGN);
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    size_t len = 0;
    for (;;) {
        ssize_t n = read(p[0], buf + len, cap - 1 - len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
        if (len == cap - 1) {
            char sink[4096];
            while (read(p[0], sink, sizeof(sink)) > 0) {
            }
            break;
        }
    }
    buf[len] = '\0';
    close(p[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- The cluster -------------------------------------------------------------- */

typedef struct cinfo {
    char name[32];
    char script[PATH_MAX];
    int hosts;
    uint64_t rate_bps;
    char subnet[32];
    uint32_t mtu;
    int queue;
    char host_queues[8];
    int created; /* we made it: tear it down at exit */
} cinfo;

static cinfo g_cluster;
/* Homa engine settings passed to the agents: the defaults scaled to the
 * link (homa_scaled_config), then --homa-config. */
static char g_homa_spec[1100];
static char g_tmpdir[512];
/* This program, for the agents (resolved at start: a rebuild while a run
 * is going on replaces the file, and /proc/self/exe then says "(deleted)"). */
static char g_exe[PATH_MAX];
static const char *g_keep_dir;

static int find_script(char *out, size_t len)
{
    const char *env = getenv("HOMA_CLUSTER_SCRIPT");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(out, len, "%.*s/homa-cluster", (int)(len - 16), exe);
            if (access(out, X_OK) == 0) return 0;
        }
    }
#ifdef HOMA_DATA_DIR
    /* The source tree: HOMA_DATA_DIR is <source>/data. */
    snprintf(out, len, "%s/../scripts/homa-cluster", HOMA_DATA_DIR);
    if (access(out, X_OK) == 0) return 0;
#endif
    const char *path = getenv("PATH");
    if (path) {
        char buf[4096];
        snprintf(buf, sizeof(buf), "%s", path);
        char *save = NULL;
        for (char *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
            snprintf(out, len, "%.*s/homa-cluster", (int)(len - 16), d);
            if (access(out, X_OK) == 0) return 0;
        }
    }
    return -1;
}

static void cluster_down(void)
{
    if (!g_cluster.created) return;
    g_cluster.created = 0;
    char *argv[] = {g_cluster.script, "down", "--name", g_cluster.name, NULL};
    printf("[cluster] tearing down %s\n", g_cluster.name);
    fflush(stdout);
    run_cmd(argv, 1);
}

static void remove_tmpdir(void)
{
    if (!g_tmpdir[0] || g_keep_dir) return;
    char *argv[] = {"rm", "-rf", "--", g_tmpdir, NULL};
    run_cmd(argv, 1);
    g_tmpdir[0] = '\0';
}

static void cleanup_all(void)
{
    cluster_down();
    remove_tmpdir();
}

static int read_cluster_conf(const char *name, cinfo *c, char *err, size_t errlen)
{
    const char *dir = getenv("HOMA_CLUSTER_STATE_DIR");
    char path[PATH_MAX];
    fmt(path, sizeof(path), "%s/%s.conf", dir && *dir ? dir : "/run/homa-cluster", name);
    FILE *f = fopen(path, "r");
    if (!f) {
        fmt(err, errlen, "cluster %s not found (%s: %s); create it with homa-cluster up --name %s",
            name, path, strerror(errno), name);
        return -1;
    }
    char line[256];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        const char *v = eq + 1;
        if (strcmp(line, "hosts") == 0)
            c->hosts = atoi(v);
        else if (strcmp(line, "rate_bps") == 0)
            c->rate_bps = strtoull(v, NULL, 10);
        else if (strcmp(line, "subnet") == 0)
            snprintf(c->subnet, sizeof(c->subnet), "%s", v);
        else if (strcmp(line, "mtu") == 0)
            c->mtu = (uint32_t)atoi(v);
        else if (strcmp(line, "queue") == 0)
            c->queue = atoi(v);
        else if (strcmp(line, "host_queues") == 0)
            snprintf(c->host_queues, sizeof(c->host_queues), "%s", v);
    }
    fclose(f);
    if (c->hosts < 2 || c->rate_bps == 0 || !c->subnet[0] || c->mtu == 0) {
        fmt(err, errlen, "%s: incomplete cluster description", path);
        return -1;
    }
    return 0;
}

/* The default link rate: what this machine can carry.  Every packet costs
 * the kernel (veth, bridge, two shapers) and, for Homa, the user-space
 * runtime some 10-15 us of CPU; W4 at 80 % load on 4 hosts kept up on 2
 * cores at 150-250 Mbit/s but not at 500 Mbit/s or 1 Gbit/s (docs/cluster.md).
 * So: 100 Mbit/s per CPU, at most 1 Gbit/s. */
static double cluster_auto_gbps(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    double g = 0.1 * (double)(n > 0 ? n : 1);
    return g > 1.0 ? 1.0 : g;
}

static int cluster_setup(const copts *o, char *err, size_t errlen)
{
    cinfo *c = &g_cluster;
    if (find_script(c->script, sizeof(c->script)) < 0) {
        snprintf(err, errlen,
                 "cannot find the homa-cluster script (set HOMA_CLUSTER_SCRIPT, or put it in "
                 "PATH or next to homa-perf)");
        return -1;
    }
    if (o->cluster) {
        snprintf(c->name, sizeof(c->name), "%s", o->cluster);
        if (read_cluster_conf(o->cluster, c, err, errlen) < 0) return -1;
        if (c->hosts < o->hosts) {
            fmt(err, errlen, "cluster %s has %d hosts, --hosts asks for %d", c->name, c->hosts,
                o->hosts);
            return -1;
        }
        printf("[cluster] using cluster %s: %d hosts, links %.3g Gbit/s, %d packets per switch "
               "queue, host NICs %s\n",
               c->name, c->hosts, (double)c->rate_bps / 1e9, c->queue, c->host_queues);
        return 0;
    }
    snprintf(c->name, sizeof(c->name), "hp%d", (int)(getpid() % 1000000));
    c->hosts = o->hosts;
    double gbps = o->link_gbps > 0 ? o->link_gbps : cluster_auto_gbps();
    c->rate_bps = (uint64_t)llround(gbps * 1e9);
    snprintf(c->subnet, sizeof(c->subnet), "10.77.0");
    c->mtu = 1500;
    c->queue = o->queue;
    snprintf(c->host_queues, sizeof(c->host_queues), "%s", o->host_queues);
    char hosts[16], rate[48], queue[16], hq[8];
    snprintf(hosts, sizeof(hosts), "%d", o->hosts);
    snprintf(rate, sizeof(rate), "%llubit", (unsigned long long)c->rate_bps);
    snprintf(queue, sizeof(queue), "%d", o->queue);
    snprintf(hq, sizeof(hq), "%s", o->host_queues);
    char *argv[] = {c->script,       "up",     "--name",   c->name,   "--hosts",
                    hosts,           "--rate", rate,       "--queue", queue,
                    "--host-queues", hq,       "--subnet", c->subnet, NULL};
    printf("[cluster] setting up %s: %d hosts, %.3g Gbit/s links, 8 priority queues x %d packets "
           "per switch port\n",
           c->name, o->hosts, gbps, o->queue);
    fflush(stdout);
    c->created = 1; /* from now on, always try to tear down */
    int rc = run_cmd(argv, 0);
    if (rc != 0) {
        snprintf(err, errlen, "homa-cluster up failed (exit status %d)", rc);
        return rc == CLUSTER_EXIT_UNSUPPORTED ? -2 : -1;
    }
    return 0;
}

static void host_ns(int i, char *buf, size_t len)
{
    snprintf(buf, len, "%s-h%d", g_cluster.name, i);
}

/* ---- Switch counters -------------------------------------------------------- */

typedef struct qstats {
    uint64_t pkts[CLUSTER_MAX_HOSTS][NPRIO];
    uint64_t drops[CLUSTER_MAX_HOSTS][NPRIO];
    uint64_t nic_pkts[CLUSTER_MAX_HOSTS];
    uint64_t nic_drops[CLUSTER_MAX_HOSTS];
    /* From each host's /proc/net/snmp, summed over hosts. */
    uint64_t udp_in, udp_rcvbuf_errors, udp_sndbuf_errors, udp_in_errors;
    uint64_t tcp_out_segs, tcp_retrans_segs;
} qstats;

/* Value of field `name` in the "Udp:" or "Tcp:" lines of /proc/net/snmp. */
static uint64_t snmp_field(const char *text, const char *proto, const char *name)
{
    const char *hdr = strstr(text, proto);
    while (hdr && hdr != text && hdr[-1] != '\n')
        hdr = strstr(hdr + 1, proto);
    if (!hdr) return 0;
    const char *vals = strchr(hdr, '\n');
    if (!vals || strncmp(vals + 1, proto, strlen(proto)) != 0) return 0;
    vals += 1 + strlen(proto);
    const char *h = hdr + strlen(proto);
    size_t nlen = strlen(name);
    for (;;) {
        while (*h == ' ')
            h++;
        while (*vals == ' ')
            vals++;
        if (*h == '\n' || !*h || *vals == '\n' || !*vals) return 0;
        if (strncmp(h, name, nlen) == 0 && (h[nlen] == ' ' || h[nlen] == '\n'))
            return strtoull(vals, NULL, 10);
        while (*h && *h != ' ' && *h != '\n')
            h++;
        while (*vals && *vals != ' ' && *vals != '\n')
            vals++;
    }
}

/* Sums "Sent B bytes P pkt (dropped D," of the pfifo leaves of a port;
 * per priority if by_level (leaves 10:..17:). */
static void parse_tc(const char *out, uint64_t *pkts, uint64_t *drops, int by_level)
{
    int level = -1;
    for (const char *l = out; l && *l;) {
        const char *nl = strchr(l, '\n');
        unsigned h;
        unsigned long long p, d, b;
        if (strncmp(l, "qdisc pfifo ", 12) == 0 && sscanf(l + 12, "%x:", &h) == 1)
            level = by_level ? (h >= 0x10 && h <= 0x17 ? (int)(h - 0x10) : -1) : 0;
        else if (level >= 0 &&
                 sscanf(l, " Sent %llu bytes %llu pkt (dropped %llu", &b, &p, &d) == 3) {
            pkts[level] += p;
            drops[level] += d;
            level = -1;
        }
        l = nl ? nl + 1 : NULL;
    }
}

static void read_qstats(qstats *q, int hosts)
{
    memset(q, 0, sizeof(*q));
    static char out[65536];
    char ns[64], dev[16];
    for (int i = 0; i < hosts; i++) {
        snprintf(ns, sizeof(ns), "%s-sw", g_cluster.name);
        snprintf(dev, sizeof(dev), "p%d", i);
        char *a1[] = {"tc", "-n", ns, "-s", "qdisc", "show", "dev", dev, NULL};
        if (capture_cmd(a1, out, sizeof(out)) == 0) parse_tc(out, q->pkts[i], q->drops[i], 1);
        host_ns(i, ns, sizeof(ns));
        char *a2[] = {"tc", "-n", ns, "-s", "qdisc", "show", "dev", "eth0", NULL};
        uint64_t p[NPRIO] = {0}, d[NPRIO] = {0};
        if (capture_cmd(a2, out, sizeof(out)) == 0) parse_tc(out, p, d, 0);
        q->nic_pkts[i] = p[0];
        q->nic_drops[i] = d[0];
        char *a3[] = {"ip", "netns", "exec", ns, "cat", "/proc/net/snmp", NULL};
        if (capture_cmd(a3, out, sizeof(out)) == 0) {
            q->udp_in += snmp_field(out, "Udp:", "InDatagrams");
            q->udp_rcvbuf_errors += snmp_field(out, "Udp:", "RcvbufErrors");
            q->udp_sndbuf_errors += snmp_field(out, "Udp:", "SndbufErrors");
            q->udp_in_errors += snmp_field(out, "Udp:", "InErrors");
            q->tcp_out_segs += snmp_field(out, "Tcp:", "OutSegs");
            q->tcp_retrans_segs += snmp_field(out, "Tcp:", "RetransSegs");
        }
    }
}

static void qstats_diff(qstats *after, const qstats *before, int hosts)
{
    for (int i = 0; i < hosts; i++) {
        for (int l = 0; l < NPRIO; l++) {
            after->pkts[i][l] -= before->pkts[i][l];
            after->drops[i][l] -= before->drops[i][l];
        }
        after->nic_pkts[i] -= before->nic_pkts[i];
        after->nic_drops[i] -= before->nic_drops[i];
    }
    after->udp_in -= before->udp_in;
    after->udp_rcvbuf_errors -= before->udp_rcvbuf_errors;
    after->udp_sndbuf_errors -= before->udp_sndbuf_errors;
    after->udp_in_errors -= before->udp_in_errors;
    after->tcp_out_segs -= before->tcp_out_segs;
    after->tcp_retrans_segs -= before->tcp_retrans_segs;
}

/* ---- CUTOFFS capture (tcpdump in host 0) ---------------------------------------- */

typedef struct cutoffs_seen {
    char from[16];
    uint32_t cutoffs[NPRIO];
    unsigned version;
    uint64_t packets;
} cutoffs_seen;

static int tool_exists(const char *name)
{
    const char *path = getenv("PATH");
    char buf[4096], f[PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(f, sizeof(f), "%s/%s", d, name);
        if (access(f, X_OK) == 0) return 1;
    }
    return 0;
}

static pid_t start_capture(const char *file)
{
    char ns[64];
    host_ns(0, ns, sizeof(ns));
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        /* CUTOFFS packets only: Homa type byte (offset 11) = 0x15. */
        execlp("ip", "ip", "netns", "exec", ns, "tcpdump", "-i", "eth0", "-n", "-U", "-s", "128",
               "-w", file, "udp[19] == 0x15", (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void stop_capture(pid_t pid)
{
    if (pid <= 0) return;
    kill(pid, SIGINT);
    int st;
    for (int i = 0; i < 50; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid) return;
        usleep(100000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads a pcap of CUTOFFS packets; keeps the last announcement per sender. */
static int parse_cutoffs(const char *file, cutoffs_seen *out, int max)
{
    FILE *f = fopen(file, "rb");
    if (!f) return 0;
    uint8_t gh[24];
    int n = 0;
    if (fread(gh, 1, 24, f) != 24) {
        fclose(f);
        return 0;
    }
    uint32_t magic;
    memcpy(&magic, gh, 4);
    int swap = magic == 0xd4c3b2a1u || magic == 0x4d3cb2a1u;
    uint32_t link;
    memcpy(&link, gh + 20, 4);
    if (swap) link = __builtin_bswap32(link);
    uint8_t rh[16], pkt[65536];
    while (fread(rh, 1, 16, f) == 16) {
        uint32_t incl;
        memcpy(&incl, rh + 8, 4);
        if (swap) incl = __builtin_bswap32(incl);
        if (incl > sizeof(pkt) || fread(pkt, 1, incl, f) != incl) break;
        size_t off = link == 1 ? 14 : 0; /* Ethernet or raw IP */
        if (incl < off + 20) continue;
        const uint8_t *ip = pkt + off;
        size_t ihl = (size_t)(ip[0] & 15) * 4;
        if ((ip[0] >> 4) != 4 || ip[9] != 17 || incl < off + ihl + 8 + 62) continue;
        const uint8_t *h = ip + ihl + 8;
        if (h[11] != 0x15) continue;
        char from[16];
        snprintf(from, sizeof(from), "%u.%u.%u.%u", ip[12], ip[13], ip[14], ip[15]);
        int k = 0;
        while (k < n && strcmp(out[k].from, from) != 0)
            k++;
        if (k == n) {
            if (n == max) continue;
            memset(&out[n], 0, sizeof(out[n]));
            snprintf(out[n].from, sizeof(out[n].from), "%s", from);
            n++;
        }
        for (int i = 0; i < NPRIO; i++)
            out[k].cutoffs[i] = be32(h + 28 + 4 * i);
        out[k].version = (unsigned)(h[60] << 8 | h[61]);
        out[k].packets++;
    }
    fclose(f);
    return n;
}

/* ---- Agents ------------------------------------------------------------------- */

typedef struct agentp {
    pid_t pid;
    int in_fd, out_fd;
    char buf[16384];
    size_t len;
    int ready, cal_done, done, finished, failed, eof;
    uint64_t ok, errors;
    char err[256];
    char counters[8192];
    struct rusage ru;
} agentp;

typedef struct run_state {
    agentp a[CLUSTER_MAX_HOSTS];
    int n;
    perf_cal_point cal[PERF_MAX_CAL];
    int ncal;
} run_state;

static void agent_line(run_state *rs, agentp *a, char *line)
{
    unsigned long long x, y;
    unsigned s;
    if (strcmp(line, "ready") == 0) {
        a->ready = 1;
    } else if (sscanf(line, "cal %u %llu %llu", &s, &x, &y) == 3) {
        if (rs->ncal < PERF_MAX_CAL) {
            rs->cal[rs->ncal].size = s;
            rs->cal[rs->ncal].min_ns = x;
            rs->cal[rs->ncal].samples = y;
            rs->ncal++;
        }
    } else if (strcmp(line, "cal-done") == 0) {
        a->cal_done = 1;
    } else if (sscanf(line, "progress %llu %llu", &x, &y) == 2) {
        a->ok = x;
        a->errors = y;
    } else if (sscanf(line, "done %llu %llu", &x, &y) == 2) {
        a->ok = x;
        a->errors = y;
        a->done = 1;
    } else if (strncmp(line, "counters", 8) == 0) {
        snprintf(a->counters, sizeof(a->counters), "%s", line + 8);
        a->finished = 1;
    } else if (strncmp(line, "error ", 6) == 0) {
        if (!a->err[0]) snprintf(a->err, sizeof(a->err), "%s", line + 6);
        a->failed = 1;
    }
}

static void agent_input(run_state *rs, agentp *a)
{
    ssize_t n = read(a->out_fd, a->buf + a->len, sizeof(a->buf) - 1 - a->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
        a->eof = 1;
        return;
    }
    a->len += (size_t)n;
    a->buf[a->len] = '\0';
    char *start = a->buf, *nl;
    while ((nl = strchr(start, '\n'))) {
        *nl = '\0';
        agent_line(rs, a, start);
        start = nl + 1;
    }
    size_t rest = a->len - (size_t)(start - a->buf);
    memmove(a->buf, start, rest);
    a->len = rest;
    if (a->len == sizeof(a->buf) - 1) a->len = 0; /* overlong line: drop */
}

/* Reads agent output until pred() holds for every agent of interest, an
 * agent fails, a stop is requested or the deadline passes.  tick() (may be
 * NULL) runs about every second.  Returns 0, or -1 with err set. */
typedef int (*agent_pred)(const agentp *a);

static int wait_agents(run_state *rs, int only, agent_pred pred, uint64_t deadline,
                       void (*tick)(run_state *, void *), void *ctx, char *err, size_t errlen)
{
    uint64_t next_tick = now_ns() + 1000000000ull;
    for (;;) {
        int all = 1;
        for (int i = 0; i < rs->n; i++) {
            agentp *a = &rs->a[i];
            if (only >= 0 && i != only) continue;
            if (a->failed || (a->eof && !pred(a))) {
                snprintf(err, errlen, "host %d: %s", i,
                         a->err[0] ? a->err : "agent exited unexpectedly (see its log)");
                return -1;
            }
            if (!pred(a)) all = 0;
        }
        if (all) return 0;
        if (g_stop) {
            snprintf(err, errlen, "interrupted");
            return -1;
        }
        uint64_t now = now_ns();
        if (now >= deadline) {
            snprintf(err, errlen, "agents did not answer in time");
            return -1;
        }
        if (tick && now >= next_tick) {
            tick(rs, ctx);
            next_tick = now + 1000000000ull;
        }
        struct pollfd pfd[CLUSTER_MAX_HOSTS];
        int map[CLUSTER_MAX_HOSTS], np = 0;
        for (int i = 0; i < rs->n; i++)
            if (!rs->a[i].eof) {
                pfd[np].fd = rs->a[i].out_fd;
                pfd[np].events = POLLIN;
                map[np++] = i;
            }
        int rc = poll(pfd, (nfds_t)np, 200);
        if (rc < 0 && errno != EINTR) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return -1;
        }
        for (int k = 0; rc > 0 && k < np; k++)
            if (pfd[k].revents) agent_input(rs, &rs->a[map[k]]);
    }
}

static int pred_ready(const agentp *a)
{
    return a->ready;
}
static int pred_cal(const agentp *a)
{
    return a->cal_done;
}
static int pred_done(const agentp *a)
{
    return a->done;
}
static int pred_finished(const agentp *a)
{
    return a->finished;
}

static void agent_send(agentp *a, const char *cmd)
{
    size_t len = strlen(cmd);
    if (a->in_fd >= 0 && write(a->in_fd, cmd, len) != (ssize_t)len) a->failed = 1;
}

static pid_t spawn_agent(char *const argv[], int *in_fd, int *out_fd, const char *log)
{
    int pin[2], pout[2];
    if (pipe2(pin, O_CLOEXEC) < 0) return -1;
    if (pipe2(pout, O_CLOEXEC) < 0) {
        close(pin[0]);
        close(pin[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) dup2(fd, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    if (pid < 0) {
        close(pin[1]);
        close(pout[0]);
        return -1;
    }
    *in_fd = pin[1];
    *out_fd = pout[0];
    return pid;
}

static void reap_agents(run_state *rs, int force)
{
    for (int i = 0; i < rs->n; i++) {
        agentp *a = &rs->a[i];
        if (a->in_fd >= 0) {
            close(a->in_fd);
            a->in_fd = -1;
        }
        if (a->pid <= 0) continue;
        if (force) kill(a->pid, SIGTERM);
        int st;
        uint64_t limit = now_ns() + 10000000000ull;
        for (;;) {
            pid_t r = wait4(a->pid, &st, WNOHANG, &a->ru);
            if (r == a->pid || (r < 0 && errno != EINTR)) break;
            if (now_ns() > limit) {
                kill(a->pid, SIGKILL);
                wait4(a->pid, &st, 0, &a->ru);
                break;
            }
            usleep(20000);
        }
        a->pid = -1;
        if (a->out_fd >= 0) {
            close(a->out_fd);
            a->out_fd = -1;
        }
    }
}

/* ---- Results --------------------------------------------------------------------- */

typedef struct counter_kv {
    char name[48];
    uint64_t value;
} counter_kv;

typedef struct presult {
    int proto;
    int ran;
    char fatal[300];
    cluster_rec *recs;
    size_t nrecs;
    perf_cal_point cal[PERF_MAX_CAL];
    int ncal;
    double user_s, sys_s, wall_s;
    double machine_busy, machine_softirq; /* fractions of all CPUs during the run */
    double loadavg_before;                /* 1-minute load average when the run started */
    int ncpus;
    qstats q;
    cluster_qstats qs; /* sampled queue lengths during the measured window */
    counter_kv counters[MAX_COUNTERS];
    int ncounters;
    cutoffs_seen cut[CLUSTER_MAX_HOSTS];
    int ncut;
    int capture_tried;
    /* computed */
    perf_result *res; /* latency/slowdown histograms by bucket (own best) */
    hist short_lat, short_slow, short_slow_common, lag;
    uint64_t short_rpcs;
    uint64_t ok, failed, refused, mismatches, unfinished, errors;
    double gbps_per_host; /* completed within the measured window */
    double gbps_sched;    /* RPCs scheduled in the window, over the window extended to
                             their last completion */
    double window_s;
} presult;

static void counters_add(presult *p, const char *list)
{
    char buf[8192];
    snprintf(buf, sizeof(buf), "%s", list);
    char *save = NULL;
    for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(t, '=');
        if (!eq) continue;
        *eq = '\0';
        uint64_t v = strtoull(eq + 1, NULL, 10);
        int gauge = strstr(t, "peak") || strcmp(t, "rx_bytes_in_use") == 0 ||
                    strcmp(t, "incoming_bytes") == 0 || strcmp(t, "rpcs_live") == 0 ||
                    strcmp(t, "tombstones") == 0;
        int k = 0;
        while (k < p->ncounters && strcmp(p->counters[k].name, t) != 0)
            k++;
        if (k == p->ncounters) {
            if (k == MAX_COUNTERS) continue;
            snprintf(p->counters[k].name, sizeof(p->counters[k].name), "%s", t);
            p->counters[k].value = 0;
            p->ncounters++;
        }
        if (gauge)
            p->counters[k].value = v > p->counters[k].value ? v : p->counters[k].value;
        else
            p->counters[k].value += v;
    }
}

static uint64_t counter_get(const presult *p, const char *name)
{
    for (int k = 0; k < p->ncounters; k++)
        if (strcmp(p->counters[k].name, name) == 0) return p->counters[k].value;
    return 0;
}

static int read_records(const char *path, presult *p)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char magic[8];
    uint64_t n;
    if (fread(magic, 8, 1, f) != 1 || memcmp(magic, CLUSTER_REC_MAGIC, 8) != 0 ||
        fread(&n, 8, 1, f) != 1 || n > (1ull << 28)) {
        fclose(f);
        return -1;
    }
    cluster_rec *r = realloc(p->recs, (p->nrecs + n + 1) * sizeof(cluster_rec));
    if (!r) {
        fclose(f);
        return -1;
    }
    p->recs = r;
    if (n && fread(p->recs + p->nrecs, sizeof(cluster_rec), n, f) != n) {
        fclose(f);
        return -1;
    }
    p->nrecs += n;
    fclose(f);
    return 0;
}

typedef struct cpu_snap {
    unsigned long long busy, softirq, total;
} cpu_snap;

static double loadavg1(void)
{
    double v = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &v) != 1) v = NAN;
        fclose(f);
    }
    return v;
}

static void cpu_read(cpu_snap *s)
{
    memset(s, 0, sizeof(*s));
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    unsigned long long v[10] = {0};
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
               &v[5], &v[6], &v[7]) == 8) {
        s->total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
        s->busy = s->total - v[3] - v[4];
        s->softirq = v[6];
    }
    fclose(f);
}

/* ---- One protocol ----------------------------------------------------------------- */

/* Homa's window sizes follow the link: the defaults of the Linux module
 * (40 KB unscheduled, 400 KB in flight) are round trips of 10-25 Gbit/s
 * links.  Here one round trip is taken as 50 us (a user-space RPC on the
 * idle cluster takes 15-25 us; under load the software adds as much again),
 * rounded up to whole packets, at least two: unscheduled bytes and the
 * per-message grant window are one such round trip, max_incoming is
 * max_overcommit (8) of them, which also keeps what a receiver invites
 * within the switch's queues.
 *
 * Timers: the engine's tick is 5 ms instead of 1 ms (RESEND after 25 ms of
 * silence, NEED_ACK after 10 ms).  The 1 ms defaults suit kernel hosts on
 * 10-25 Gbit/s links; here a host's threads are often descheduled for
 * milliseconds, and every tick walks every live RPC under the runtime's
 * lock, so with 1 ms ticks the spurious RESEND/BUSY traffic and the timer
 * work made the short-message p99 2.5-8x worse (docs/cluster.md).  The
 * timeout stays at 100 ticks (now 500 ms). */
static void homa_scaled_config(const copts *o)
{
    uint32_t payload = g_cluster.mtu - 84;
    double rtt_bytes = (double)g_cluster.rate_bps / 8.0 * 50e-6;
    uint32_t pkts = (uint32_t)ceil(rtt_bytes / payload);
    if (pkts < 2) pkts = 2;
    uint32_t rtt = pkts * payload;
    fmt(g_homa_spec, sizeof(g_homa_spec),
        "unsched_bytes=%u,grant_window=%u,max_incoming=%u,tick_us=5000%s%s", rtt, rtt, 8 * rtt,
        o->homa_config ? "," : "", o->homa_config ? o->homa_config : "");
}

typedef struct tick_ctx {
    const char *proto;
    uint64_t start, end;
    double total_s;
    uint64_t measure_start; /* the queue monitor runs from here to `end` */
    cluster_qmon *qmon;
    int qmon_tried;
    int hosts;
} tick_ctx;

static void progress_tick(run_state *rs, void *arg)
{
    tick_ctx *t = arg;
    uint64_t ok = 0, errs = 0;
    for (int i = 0; i < rs->n; i++) {
        ok += rs->a[i].ok;
        errs += rs->a[i].errors;
    }
    uint64_t now = now_ns();
    if (!t->qmon_tried && now >= t->measure_start && now < t->end) {
        t->qmon_tried = 1;
        t->qmon = cluster_qmon_start(g_cluster.name, t->hosts, 2000000ull);
    }
    if (t->qmon && now >= t->end) cluster_qmon_stop(t->qmon);
    double el = now > t->start ? (double)(now - t->start) / 1e9 : 0;
    if (now < t->start)
        printf("[%s] starting...\n", t->proto);
    else if (now < t->end)
        printf("[%s] %5.1f s of %.1f s   %llu RPCs completed, %llu errors\n", t->proto, el,
               t->total_s, (unsigned long long)ok, (unsigned long long)errs);
    else
        printf("[%s] draining: waiting for RPCs still in flight (%llu completed, %llu errors)\n",
               t->proto, (unsigned long long)ok, (unsigned long long)errs);
    fflush(stdout);
}

static int run_protocol(const copts *o, int proto, presult *p)
{
    const char *pname = perf_proto_name(proto);
    run_state *rs = calloc(1, sizeof(*rs));
    if (!rs) {
        snprintf(p->fatal, sizeof(p->fatal), "out of memory");
        return -1;
    }
    p->proto = proto;
    p->ran = 1;
    const char *exe = g_exe;
    if (!exe[0]) {
        snprintf(p->fatal, sizeof(p->fatal), "cannot find my own executable");
        free(rs);
        return -1;
    }
    char peers[CLUSTER_MAX_HOSTS * 20] = "";
    for (int i = 0; i < o->hosts; i++) {
        size_t l = strlen(peers);
        snprintf(peers + l, sizeof(peers) - l, "%s%s.%d", i ? "," : "", g_cluster.subnet, i + 1);
    }
    char reqbps[64], seed[32], warm[32], secs[32], drain[32], maxs[32], bp[16], st[16], conns[16],
        link[32], mtu[16], port[16];
    snprintf(reqbps, sizeof(reqbps), "%.6g", o->load * (double)g_cluster.rate_bps / 2.0);
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)o->seed);
    snprintf(warm, sizeof(warm), "%.6g", o->warmup);
    snprintf(secs, sizeof(secs), "%.6g", o->seconds);
    snprintf(drain, sizeof(drain), "%.6g", o->drain);
    snprintf(maxs, sizeof(maxs), "%u", o->max_size);
    snprintf(bp, sizeof(bp), "%d", o->busy_poll_us);
    snprintf(st, sizeof(st), "%d", o->server_threads);
    snprintf(conns, sizeof(conns), "%d", o->conns);
    snprintf(link, sizeof(link), "%llu",
             o->no_pacer
                 ? 0ull
                 : (unsigned long long)llround((double)g_cluster.rate_bps * o->pacer_fraction));
    snprintf(mtu, sizeof(mtu), "%u", g_cluster.mtu);
    snprintf(port, sizeof(port), "%d", AGENT_PORT);

    qstats before;
    read_qstats(&before, o->hosts);
    p->loadavg_before = loadavg1();
    if (p->loadavg_before > 0.5)
        printf("[%s] note: the machine is already busy (load average %.2f): other processes "
               "compete with the emulated cluster for the CPUs\n",
               pname, p->loadavg_before);
    char err[300] = "";
    int rc = 0;
    printf("[%s] starting an agent in each of %d hosts\n", pname, o->hosts);
    fflush(stdout);
    rs->n = o->hosts;
    for (int i = 0; i < o->hosts; i++) {
        agentp *a = &rs->a[i];
        a->in_fd = a->out_fd = -1;
        char ns[64], hoststr[16], out[PATH_MAX], log[PATH_MAX];
        host_ns(i, ns, sizeof(ns));
        snprintf(hoststr, sizeof(hoststr), "%d", i);
        fmt(out, sizeof(out), "%s/%s-h%d.rec", g_tmpdir, pname, i);
        fmt(log, sizeof(log), "%s/%s-h%d.log", g_tmpdir, pname, i);
        char *argv[64];
        int k = 0;
        argv[k++] = "ip";
        argv[k++] = "netns";
        argv[k++] = "exec";
        argv[k++] = ns;
        argv[k++] = (char *)exe;
        argv[k++] = "cluster-agent";
        argv[k++] = "--proto";
        argv[k++] = (char *)pname;
        argv[k++] = "--host";
        argv[k++] = hoststr;
        argv[k++] = "--peers";
        argv[k++] = peers;
        argv[k++] = "--port";
        argv[k++] = port;
        argv[k++] = "--workload";
        argv[k++] = (char *)o->workload;
        argv[k++] = "--max-size";
        argv[k++] = maxs;
        argv[k++] = "--req-bps";
        argv[k++] = reqbps;
        argv[k++] = "--seed";
        argv[k++] = seed;
        argv[k++] = "--warmup";
        argv[k++] = warm;
        argv[k++] = "--seconds";
        argv[k++] = secs;
        argv[k++] = "--drain";
        argv[k++] = drain;
        argv[k++] = "--out";
        argv[k++] = out;
        argv[k++] = "--busy-poll";
        argv[k++] = bp;
        argv[k++] = "--server-threads";
        argv[k++] = st;
        argv[k++] = "--conns";
        argv[k++] = conns;
        argv[k++] = "--link-bps";
        argv[k++] = link;
        argv[k++] = "--mtu";
        argv[k++] = mtu;
        if (o->verify) argv[k++] = "--verify";
        if (o->homa_gso) argv[k++] = "--homa-gso";
        if (g_homa_spec[0]) {
            argv[k++] = "--homa-config";
            argv[k++] = g_homa_spec;
        }
        if (o->data_dir) {
            argv[k++] = "--data-dir";
            argv[k++] = (char *)o->data_dir;
        }
        argv[k] = NULL;
        a->pid = spawn_agent(argv, &a->in_fd, &a->out_fd, log);
        if (a->pid < 0) {
            snprintf(err, sizeof(err), "cannot start agent %d: %s", i, strerror(errno));
            rc = -1;
            rs->n = i;
            break;
        }
    }
    if (rc == 0)
        rc = wait_agents(rs, -1, pred_ready, now_ns() + 20000000000ull, NULL, NULL, err,
                         sizeof(err));
    pid_t cap = -1;
    char capfile[PATH_MAX];
    fmt(capfile, sizeof(capfile), "%s/cutoffs.pcap", g_tmpdir);
    if (rc == 0 && proto == PERF_HOMA && o->capture_cutoffs && tool_exists("tcpdump")) {
        cap = start_capture(capfile);
        p->capture_tried = cap > 0;
        usleep(500000); /* let tcpdump attach */
    }
    /* Calibration: host 0 -> host 1, one RPC at a time, idle cluster. */
    if (rc == 0) {
        printf("[%s] measuring best-case RTTs on the idle cluster (host 0 -> host 1)\n", pname);
        fflush(stdout);
        agent_send(&rs->a[0], "cal 1\n");
        rc = wait_agents(rs, 0, pred_cal, now_ns() + 120000000000ull, NULL, NULL, err, sizeof(err));
        memcpy(p->cal, rs->cal, sizeof(p->cal));
        p->ncal = rs->ncal;
    }
    cpu_snap c0, c1;
    uint64_t t_run0 = now_ns();
    if (rc == 0) {
        uint64_t start = now_ns() + 500000000ull;
        char cmd[64];
        snprintf(cmd, sizeof(cmd), "run %llu\n", (unsigned long long)start);
        for (int i = 0; i < rs->n; i++)
            agent_send(&rs->a[i], cmd);
        tick_ctx t = {pname,
                      start,
                      start + (uint64_t)((o->warmup + o->seconds) * 1e9),
                      o->warmup + o->seconds,
                      start + (uint64_t)(o->warmup * 1e9),
                      NULL,
                      0,
                      o->hosts};
        printf("[%s] running: %.1f s warmup + %.1f s measured, %s at %.0f%% load\n", pname,
               o->warmup, o->seconds, o->workload, o->load * 100);
        fflush(stdout);
        cpu_read(&c0);
        t_run0 = now_ns();
        uint64_t deadline = t.end + (uint64_t)((o->drain + 60) * 1e9);
        rc = wait_agents(rs, -1, pred_done, deadline, progress_tick, &t, err, sizeof(err));
        cpu_read(&c1);
        if (t.qmon) {
            cluster_qmon_stop(t.qmon);
            cluster_qmon_result(t.qmon, &p->qs);
            cluster_qmon_free(t.qmon);
        }
        p->wall_s = (double)(now_ns() - t_run0) / 1e9;
        if (c1.total > c0.total) {
            p->machine_busy = (double)(c1.busy - c0.busy) / (double)(c1.total - c0.total);
            p->machine_softirq = (double)(c1.softirq - c0.softirq) / (double)(c1.total - c0.total);
        }
    }
    stop_capture(cap);
    if (cap > 0) p->ncut = parse_cutoffs(capfile, p->cut, CLUSTER_MAX_HOSTS);
    for (int i = 0; i < rs->n; i++)
        agent_send(&rs->a[i], "quit\n");
    if (rc == 0) {
        char err2[300];
        if (wait_agents(rs, -1, pred_finished, now_ns() + 30000000000ull, NULL, NULL, err2,
                        sizeof(err2)) < 0)
            fprintf(stderr, "homa-perf cluster: [%s] %s\n", pname, err2);
    }
    reap_agents(rs, rc != 0);
    p->ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 0; i < rs->n; i++) {
        agentp *a = &rs->a[i];
        p->user_s += (double)a->ru.ru_utime.tv_sec + (double)a->ru.ru_utime.tv_usec / 1e6;
        p->sys_s += (double)a->ru.ru_stime.tv_sec + (double)a->ru.ru_stime.tv_usec / 1e6;
        counters_add(p, a->counters);
    }
    read_qstats(&p->q, o->hosts);
    qstats_diff(&p->q, &before, o->hosts);
    if (rc == 0) {
        for (int i = 0; i < o->hosts; i++) {
            char path[PATH_MAX];
            fmt(path, sizeof(path), "%s/%s-h%d.rec", g_tmpdir, pname, i);
            if (read_records(path, p) < 0) {
                snprintf(err, sizeof(err), "cannot read the records of host %d", i);
                rc = -1;
                break;
            }
        }
    }
    if (rc != 0) {
        snprintf(p->fatal, sizeof(p->fatal), "%s", err);
        fprintf(stderr, "homa-perf cluster: [%s] %s\n", pname, err);
        for (int i = 0; i < o->hosts && !g_stop; i++) {
            char log[PATH_MAX];
            fmt(log, sizeof(log), "%s/%s-h%d.log", g_tmpdir, pname, i);
            FILE *f = fopen(log, "r");
            if (!f) continue;
            char line[512];
            int shown = 0;
            while (fgets(line, sizeof(line), f) && shown < 10) {
                fprintf(stderr, "  host %d: %s", i, line);
                shown++;
            }
            fclose(f);
        }
    } else {
        printf("[%s] done in %.1f s; agents used %.1f s of CPU (user %.1f, system %.1f) = %.0f%% "
               "of %d cores; machine busy %.0f%%\n",
               pname, p->wall_s, p->user_s + p->sys_s, p->user_s, p->sys_s,
               100 * (p->user_s + p->sys_s) / (p->wall_s * p->ncpus), p->ncpus,
               100 * p->machine_busy);
    }
    fflush(stdout);
    free(rs);
    return rc;
}

/* ---- Analysis ----------------------------------------------------------------------- */

static double best_of(const perf_result *cal, uint32_t size)
{
    return perf_best_ns(cal, size);
}

static void analyse(const copts *o, const wlgen *g, presult *p, const perf_result *own,
                    const perf_result *common, uint32_t short_max)
{
    p->res = malloc(sizeof(perf_result));
    if (!p->res) return;
    perf_result_init(p->res);
    wlgen_make_buckets(g, p->res);
    hist_init(&p->short_lat);
    hist_init(&p->short_slow);
    hist_init(&p->short_slow_common);
    hist_init(&p->lag);
    uint64_t warm = (uint64_t)(o->warmup * 1e9);
    uint64_t end = warm + (uint64_t)(o->seconds * 1e9);
    uint64_t last = end, bytes = 0, done_bytes = 0;
    for (size_t i = 0; i < p->nrecs; i++) {
        const cluster_rec *r = &p->recs[i];
        if (r->status == CREC_OK && r->done_ns >= warm && r->done_ns < end)
            done_bytes += 2ull * r->size;
        switch (r->status) {
        case CREC_OK:
            break;
        case CREC_FAILED:
            p->failed++;
            continue;
        case CREC_REFUSED:
            p->refused++;
            continue;
        case CREC_MISMATCH:
            p->mismatches++;
            continue;
        default:
            p->unfinished++;
            continue;
        }
        if (r->sched_ns < warm || r->sched_ns >= end) continue;
        p->ok++;
        uint64_t lat = r->done_ns - r->send_ns;
        bytes += 2ull * r->size;
        if (r->done_ns > last) last = r->done_ns;
        hist_record(&p->res->lat, lat);
        hist_record(&p->lag, r->send_ns > r->sched_ns ? r->send_ns - r->sched_ns : 0);
        int b = perf_bucket_of(p->res, r->size);
        hist_record(&p->res->buckets[b].lat, lat);
        double best = best_of(own, r->size);
        uint64_t sd = best > 0 ? (uint64_t)((double)lat / best * 1000.0 + 0.5) : 0;
        if (best > 0) {
            hist_record(&p->res->slow, sd);
            hist_record(&p->res->buckets[b].slow, sd);
        }
        if (r->size <= short_max) {
            p->short_rpcs++;
            hist_record(&p->short_lat, lat);
            if (best > 0) hist_record(&p->short_slow, sd);
            double bc = best_of(common, r->size);
            if (bc > 0)
                hist_record(&p->short_slow_common, (uint64_t)((double)lat / bc * 1000.0 + 0.5));
        }
    }
    p->errors = p->failed + p->refused + p->mismatches + p->unfinished;
    p->window_s = o->seconds;
    p->gbps_per_host = (double)done_bytes * 8 / o->seconds / 1e9 / o->hosts;
    double ext = (double)(last - warm) / 1e9;
    p->gbps_sched = ext > 0 ? (double)bytes * 8 / ext / 1e9 / o->hosts : 0;
}

static double q_us(const hist *h, double q)
{
    return h->count ? (double)hist_quantile(h, q) / 1000.0 : NAN;
}

static double q_sd(const hist *h, double q)
{
    return h->count ? (double)hist_quantile(h, q) / 1000.0 : NAN;
}

static double ratio(double a, double b)
{
    return isfinite(a) && isfinite(b) && a > 0 && b > 0 ? a / b : NAN;
}

static const char *const slowdown_method =
    "slowdown = RPC time (send call to response) / best(length); best(length) interpolates, "
    "piecewise linearly in length, the minimum RTT of one-at-a-time RPCs between host 0 and "
    "host 1 on the idle cluster, measured with the same protocol just before its run, at the "
    "smallest length, every size bucket's upper bound and a x4 grid between (the *_common "
    "values divide by the smaller of the two protocols' best cases instead)";

static void json_proto(json_writer *j, const char *key, const presult *p, const copts *o)
{
    json_obj_begin(j, key);
    json_str(j, "proto", perf_proto_name(p->proto));
    json_num(j, "short_p50_us", q_us(&p->short_lat, 0.5));
    json_num(j, "short_p99_us", q_us(&p->short_lat, 0.99));
    json_num(j, "short_p999_us", q_us(&p->short_lat, 0.999));
    json_num(j, "short_p50_slowdown", q_sd(&p->short_slow, 0.5));
    json_num(j, "short_p99_slowdown", q_sd(&p->short_slow, 0.99));
    json_num(j, "short_p99_slowdown_common", q_sd(&p->short_slow_common, 0.99));
    json_u64(j, "short_rpcs", p->short_rpcs);
    json_num(j, "gbps", p->gbps_per_host);
    json_str(j, "gbps_counts",
             "request+response payload bits of RPCs completed (correctly) during the measured "
             "window, per second and per host / 1e9");
    json_num(j, "gbps_of_window_rpcs", p->gbps_sched);
    json_str(j, "gbps_of_window_rpcs_counts",
             "payload bits of the RPCs scheduled in the measured window, over the window "
             "extended to the last of their completions, per host / 1e9");
    json_num(j, "offered_gbps", o->load * (double)g_cluster.rate_bps / 1e9);
    json_u64(j, "rpcs", p->ok);
    json_u64(j, "errors", p->errors);
    json_u64(j, "failed", p->failed + p->refused);
    json_u64(j, "refused", p->refused);
    json_u64(j, "mismatches", p->mismatches);
    json_u64(j, "unfinished", p->unfinished);
    json_bool(j, "verify", o->verify);
    json_bool(j, "verified", o->verify && p->errors == 0 && p->ok > 0 && !p->fatal[0]);
    json_num(j, "window_s", p->window_s);
    if (p->res) {
        json_obj_begin(j, "latency_us");
        json_num(j, "p50", q_us(&p->res->lat, 0.5));
        json_num(j, "p99", q_us(&p->res->lat, 0.99));
        json_num(j, "p999", q_us(&p->res->lat, 0.999));
        json_num(j, "mean", hist_mean(&p->res->lat) / 1000.0);
        json_num(j, "max", p->res->lat.count ? (double)p->res->lat.max / 1000.0 : NAN);
        json_obj_end(j);
        json_obj_begin(j, "slowdown");
        json_num(j, "mean", p->res->slow.count ? hist_mean(&p->res->slow) / 1000.0 : NAN);
        json_num(j, "p50", q_sd(&p->res->slow, 0.5));
        json_num(j, "p99", q_sd(&p->res->slow, 0.99));
        json_obj_end(j);
        json_obj_begin(j, "send_lag_us");
        json_num(j, "p50", q_us(&p->lag, 0.5));
        json_num(j, "p99", q_us(&p->lag, 0.99));
        json_num(j, "max", p->lag.count ? (double)p->lag.max / 1000.0 : NAN);
        json_obj_end(j);
        json_arr_begin(j, "buckets");
        for (int i = 0; i < p->res->nbuckets; i++) {
            const perf_bucket *b = &p->res->buckets[i];
            json_obj_begin(j, NULL);
            json_u64(j, "min_bytes", (uint64_t)b->lo + 1);
            json_u64(j, "max_bytes", b->hi);
            json_num(j, "fraction", b->fraction);
            json_u64(j, "rpcs", b->lat.count);
            json_num(j, "p50_us", q_us(&b->lat, 0.5));
            json_num(j, "p99_us", q_us(&b->lat, 0.99));
            json_num(j, "slowdown_mean", b->slow.count ? hist_mean(&b->slow) / 1000.0 : NAN);
            json_num(j, "slowdown_p50", q_sd(&b->slow, 0.5));
            json_num(j, "slowdown_p99", q_sd(&b->slow, 0.99));
            json_obj_end(j);
        }
        json_arr_end(j);
    }
    json_arr_begin(j, "calibration");
    for (int i = 0; i < p->ncal; i++) {
        json_obj_begin(j, NULL);
        json_u64(j, "bytes", p->cal[i].size);
        json_num(j, "min_rtt_us", (double)p->cal[i].min_ns / 1000.0);
        json_u64(j, "samples", p->cal[i].samples);
        json_obj_end(j);
    }
    json_arr_end(j);
    json_obj_begin(j, "cpu");
    json_num(j, "agents_user_s", p->user_s);
    json_num(j, "agents_sys_s", p->sys_s);
    json_num(j, "run_wall_s", p->wall_s);
    json_i64(j, "cpus", p->ncpus);
    json_num(j, "agents_pct_of_machine",
             p->wall_s > 0 ? 100 * (p->user_s + p->sys_s) / (p->wall_s * p->ncpus) : NAN);
    json_num(j, "machine_busy_pct", 100 * p->machine_busy);
    json_num(j, "machine_softirq_pct", 100 * p->machine_softirq);
    json_num(j, "loadavg_before", p->loadavg_before);
    json_obj_end(j);
    json_obj_begin(j, "switch");
    json_arr_begin(j, "per_priority");
    uint64_t drops = 0, nic_drops = 0;
    for (int l = NPRIO - 1; l >= 0; l--) {
        uint64_t pk = 0, dr = 0;
        for (int h = 0; h < o->hosts; h++) {
            pk += p->q.pkts[h][l];
            dr += p->q.drops[h][l];
        }
        drops += dr;
        json_obj_begin(j, NULL);
        json_i64(j, "priority", l);
        json_u64(j, "packets", pk);
        json_u64(j, "drops", dr);
        json_obj_end(j);
    }
    json_arr_end(j);
    json_u64(j, "drops", drops);
    for (int h = 0; h < o->hosts; h++)
        nic_drops += p->q.nic_drops[h];
    json_u64(j, "host_nic_drops", nic_drops);
    json_obj_end(j);
    json_obj_begin(j, "hosts_snmp");
    json_u64(j, "udp_in_datagrams", p->q.udp_in);
    json_u64(j, "udp_rcvbuf_errors", p->q.udp_rcvbuf_errors);
    json_u64(j, "udp_sndbuf_errors", p->q.udp_sndbuf_errors);
    json_u64(j, "udp_in_errors", p->q.udp_in_errors);
    json_u64(j, "tcp_out_segs", p->q.tcp_out_segs);
    json_u64(j, "tcp_retrans_segs", p->q.tcp_retrans_segs);
    json_obj_end(j);
    json_obj_begin(j, "queues");
    json_str(j, "method",
             "backlog in packets of each switch port's priority queues and of each "
             "host NIC, sampled through rtnetlink during the measured window");
    json_u64(j, "samples", p->qs.samples);
    json_num(j, "interval_us", p->qs.interval_us);
    json_arr_begin(j, "switch_per_priority");
    for (int l = NPRIO - 1; l >= 0; l--) {
        json_obj_begin(j, NULL);
        json_i64(j, "priority", l);
        json_num(j, "mean_pkts", p->qs.prio_mean[l]);
        json_u64(j, "p99_pkts", p->qs.prio_p99[l]);
        json_u64(j, "max_pkts", p->qs.prio_max[l]);
        json_obj_end(j);
    }
    json_arr_end(j);
    json_num(j, "host_nic_mean_pkts", p->qs.nic_mean);
    json_u64(j, "host_nic_p99_pkts", p->qs.nic_p99);
    json_u64(j, "host_nic_max_pkts", p->qs.nic_max);
    json_obj_end(j);
    if (p->proto == PERF_HOMA) {
        json_obj_begin(j, "counters");
        for (int k = 0; k < p->ncounters; k++)
            json_u64(j, p->counters[k].name, p->counters[k].value);
        json_obj_end(j);
        json_arr_begin(j, "cutoffs");
        for (int k = 0; k < p->ncut; k++) {
            json_obj_begin(j, NULL);
            json_str(j, "announced_by", p->cut[k].from);
            json_u64(j, "version", p->cut[k].version);
            json_u64(j, "packets_seen", p->cut[k].packets);
            json_arr_begin(j, "unsched_cutoffs");
            for (int i = 0; i < NPRIO; i++)
                json_u64(j, NULL, p->cut[k].cutoffs[i]);
            json_arr_end(j);
            json_obj_end(j);
        }
        json_arr_end(j);
        json_str(j, "cutoffs_source",
                 p->capture_tried ? "CUTOFFS packets captured on host 0's link (tcpdump)"
                                  : "not captured (tcpdump missing or --no-cutoffs)");
    }
    if (p->fatal[0])
        json_str(j, "error", p->fatal);
    else
        json_null(j, "error");
    json_obj_end(j);
}

static void fmt_cmp(char *buf, size_t len, double homa, double tcp, int lower_better)
{
    double r = ratio(tcp, homa);
    if (!isfinite(r))
        snprintf(buf, len, "-");
    else if (lower_better)
        snprintf(buf, len, r >= 1 ? "%.1fx lower" : "%.2fx higher", r >= 1 ? r : 1 / r);
    else
        snprintf(buf, len, "%.2fx", 1 / r);
}

static void print_cutoffs(const presult *h)
{
    if (h->ncut == 0) {
        printf("Homa cutoff updates (adaptive, all hosts): %llu%s\n",
               (unsigned long long)counter_get(h, "cutoff_updates"),
               h->capture_tried ? "; no CUTOFFS packet seen on host 0's link"
                                : " (install tcpdump to see the values)");
        return;
    }
    printf("Homa unscheduled cutoffs chosen by the receivers (%llu updates in all; as announced "
           "in CUTOFFS):\n",
           (unsigned long long)counter_get(h, "cutoff_updates"));
    for (int k = 0; k < h->ncut; k++) {
        printf("  %-12s v%-3u", h->cut[k].from, h->cut[k].version);
        int sched_top = -1;
        for (int i = NPRIO - 1; i >= 1; i--)
            if (h->cut[k].cutoffs[i]) printf(" p%d<=%u", i, h->cut[k].cutoffs[i]);
        for (int i = 1; i < NPRIO; i++)
            if (h->cut[k].cutoffs[i]) {
                sched_top = i - 1;
                break;
            }
        if (sched_top < 0) sched_top = NPRIO - 1;
        if (h->cut[k].cutoffs[1] || sched_top >= 0) printf("  (p0..p%d scheduled)", sched_top);
        printf("\n");
    }
}

static void print_table(const copts *o, const wlgen *g, const presult *h, const presult *t,
                        uint32_t short_max)
{
    printf("\n%s (max %u B, mean %.0f B) at %.0f%% load, %d hosts, %.3g Gbit/s links, %.3g s "
           "measured per protocol\n",
           homa_workload_name(g->w), g->max_size, g->mean, o->load * 100, o->hosts,
           (double)g_cluster.rate_bps / 1e9, o->seconds);
    printf("short messages: the shortest 10%% (<= %u bytes)\n\n", short_max);
    printf("  %-34s %12s %12s   %s\n", "", "Homa", "TCP", "Homa vs TCP");
    struct {
        const char *name;
        double hv, tv;
        int lower_better;
        const char *fmt;
    } rows[] = {
        {"short p50 latency (us)", q_us(&h->short_lat, 0.5), q_us(&t->short_lat, 0.5), 1, "%.1f"},
        {"short p99 latency (us)", q_us(&h->short_lat, 0.99), q_us(&t->short_lat, 0.99), 1, "%.1f"},
        {"short p99 slowdown", q_sd(&h->short_slow, 0.99), q_sd(&t->short_slow, 0.99), 1, "%.2f"},
        {"all p99 slowdown", h->res ? q_sd(&h->res->slow, 0.99) : NAN,
         t->res ? q_sd(&t->res->slow, 0.99) : NAN, 1, "%.2f"},
        {"goodput per host (Gbit/s)", h->gbps_per_host, t->gbps_per_host, 0, "%.3f"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char hv[32], tv[32], cmp[40];
        snprintf(hv, sizeof(hv), rows[i].fmt, rows[i].hv);
        snprintf(tv, sizeof(tv), rows[i].fmt, rows[i].tv);
        if (!h->ran) snprintf(hv, sizeof(hv), "-");
        if (!t->ran) snprintf(tv, sizeof(tv), "-");
        fmt_cmp(cmp, sizeof(cmp), rows[i].hv, rows[i].tv, rows[i].lower_better);
        printf("  %-34s %12s %12s   %s\n", rows[i].name, hv, tv, cmp);
    }
    printf("  %-34s %12llu %12llu\n", "RPCs measured", (unsigned long long)h->ok,
           (unsigned long long)t->ok);
    printf("  %-34s %12llu %12llu\n", "errors", (unsigned long long)h->errors,
           (unsigned long long)t->errors);
    printf("  %-34s %11.0f%% %11.0f%%\n", "CPU: agents, % of all cores",
           h->wall_s > 0 ? 100 * (h->user_s + h->sys_s) / (h->wall_s * h->ncpus) : NAN,
           t->wall_s > 0 ? 100 * (t->user_s + t->sys_s) / (t->wall_s * t->ncpus) : NAN);
    printf("  %-34s %11.0f%% %11.0f%%\n", "CPU: whole machine busy", 100 * h->machine_busy,
           100 * t->machine_busy);
    uint64_t hd = 0, td = 0;
    for (int i = 0; i < o->hosts; i++)
        for (int l = 0; l < NPRIO; l++) {
            hd += h->q.drops[i][l];
            td += t->q.drops[i][l];
        }
    printf("  %-34s %12llu %12llu\n", "switch drops", (unsigned long long)hd,
           (unsigned long long)td);
    printf("  %-34s %12llu %12llu\n", "UDP receive-buffer drops (hosts)",
           (unsigned long long)h->q.udp_rcvbuf_errors, (unsigned long long)t->q.udp_rcvbuf_errors);
    printf("  %-34s %12llu %12llu\n", "TCP segments retransmitted",
           (unsigned long long)h->q.tcp_retrans_segs, (unsigned long long)t->q.tcp_retrans_segs);
    if (h->res && t->res) {
        printf("\n  %-17s %6s | %10s %10s %8s | %10s %10s %8s\n", "size bucket (B)", "share",
               "Homa p50us", "p99us", "p99 sd", "TCP p50us", "p99us", "p99 sd");
        for (int i = 0; i < h->res->nbuckets; i++) {
            const perf_bucket *a = &h->res->buckets[i], *b = &t->res->buckets[i];
            char range[32];
            snprintf(range, sizeof(range), "%u-%u", a->lo + 1, a->hi);
            printf("  %-17s %5.1f%% | %10.1f %10.1f %8.2f | %10.1f %10.1f %8.2f\n", range,
                   a->fraction * 100, q_us(&a->lat, 0.5), q_us(&a->lat, 0.99), q_sd(&a->slow, 0.99),
                   q_us(&b->lat, 0.5), q_us(&b->lat, 0.99), q_sd(&b->slow, 0.99));
        }
    }
    printf("\n");
    const presult *both[2] = {h, t};
    for (int k = 0; k < 2; k++) {
        const presult *p = both[k];
        if (!p->ran || !p->qs.samples) continue;
        printf("%s queues, backlog in packets (mean/p99/max over %llu samples every %.0f us):\n ",
               k == 0 ? "Homa" : "TCP", (unsigned long long)p->qs.samples, p->qs.interval_us);
        for (int l = NPRIO - 1; l >= 0; l--)
            if (p->qs.prio_max[l])
                printf(" switch p%d %.1f/%u/%u", l, p->qs.prio_mean[l], p->qs.prio_p99[l],
                       p->qs.prio_max[l]);
        printf("  host NIC %.1f/%u/%u\n", p->qs.nic_mean, p->qs.nic_p99, p->qs.nic_max);
    }
    if (h->ran) print_cutoffs(h);
}

/* ---- Entry point ----------------------------------------------------------------------- */

int cluster_main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    copts o;
    int rc = parse_cluster_args(argc, argv, &o);
    if (rc) return rc;
    if (geteuid() != 0) {
        fprintf(stderr,
                "homa-perf cluster: the emulated cluster needs root (network namespaces, veth "
                "links, a bridge, traffic control).  Run it as root (e.g. sudo), or use the "
                "loopback mode instead:\n"
                "  homa-perf compare --test workload --workload %s --gbps 1\n"
                "or the virtual-network demo: bash scripts/demo.sh\n",
                o.workload);
        return CLUSTER_EXIT_UNSUPPORTED;
    }
    wlgen g;
    char err[300];
    if (wlgen_open(&g, o.workload, o.data_dir, o.max_size, err, sizeof(err)) < 0) {
        fprintf(stderr, "homa-perf cluster: %s\n", err);
        return 2;
    }
    if (o.nice != 0 && setpriority(PRIO_PROCESS, 0, o.nice) < 0)
        fprintf(stderr, "homa-perf cluster: setpriority(%d): %s\n", o.nice, strerror(errno));
    ssize_t en = readlink("/proc/self/exe", g_exe, sizeof(g_exe) - 1);
    g_exe[en > 0 ? en : 0] = '\0';
    g_keep_dir = o.keep_dir;
    if (o.keep_dir) {
        mkdir(o.keep_dir, 0755);
        snprintf(g_tmpdir, sizeof(g_tmpdir), "%s", o.keep_dir);
    } else {
        snprintf(g_tmpdir, sizeof(g_tmpdir), "/tmp/homa-cluster.XXXXXX");
        if (!mkdtemp(g_tmpdir)) {
            fprintf(stderr, "homa-perf cluster: mkdtemp: %s\n", strerror(errno));
            wlgen_close(&g);
            return 1;
        }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int status = 0;
    presult *res = calloc(2, sizeof(presult));
    if (!res) {
        remove_tmpdir();
        wlgen_close(&g);
        return 1;
    }
    rc = cluster_setup(&o, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "homa-perf cluster: %s\n", err);
        cleanup_all();
        free(res);
        wlgen_close(&g);
        return rc == -2 ? CLUSTER_EXIT_UNSUPPORTED : 1;
    }
    homa_scaled_config(&o);
    int hi = -1, ti = -1;
    for (int k = 0; k < o.nprotos && !g_stop; k++) {
        if (k > 0) usleep(500000);
        presult *p = &res[k];
        if (o.protos[k] == PERF_HOMA)
            hi = k;
        else
            ti = k;
        if (run_protocol(&o, o.protos[k], p) < 0) status = 1;
    }
    if (g_stop) {
        fprintf(stderr, "homa-perf cluster: interrupted\n");
        cleanup_all();
        for (int k = 0; k < 2; k++)
            free(res[k].recs);
        free(res);
        wlgen_close(&g);
        return 130;
    }
    cluster_down();

    /* Best-case curves: each protocol's own, and the smaller of the two. */
    uint32_t short_max = homa_workload_quantile(g.w, 0.1, g.max_size);
    perf_result *cal = calloc(3, sizeof(perf_result));
    if (!cal) {
        cleanup_all();
        free(res);
        wlgen_close(&g);
        return 1;
    }
    for (int k = 0; k < o.nprotos; k++) {
        memcpy(cal[k].cal, res[k].cal, sizeof(res[k].cal));
        cal[k].ncal = res[k].ncal;
    }
    cal[2] = cal[0];
    if (o.nprotos == 2 && res[0].ncal == res[1].ncal) {
        for (int i = 0; i < res[0].ncal; i++)
            if (res[1].cal[i].min_ns < cal[2].cal[i].min_ns) cal[2].cal[i] = res[1].cal[i];
    }
    for (int k = 0; k < o.nprotos; k++)
        if (res[k].ran && !res[k].fatal[0]) analyse(&o, &g, &res[k], &cal[k], &cal[2], short_max);

    presult empty;
    memset(&empty, 0, sizeof(empty));
    hist_init(&empty.short_lat);
    hist_init(&empty.short_slow);
    hist_init(&empty.short_slow_common);
    const presult *H = hi >= 0 ? &res[hi] : &empty, *T = ti >= 0 ? &res[ti] : &empty;
    print_table(&o, &g, H, T, short_max);
    double r50 = ratio(q_us(&H->short_lat, 0.5), q_us(&T->short_lat, 0.5));
    double r99 = ratio(q_us(&H->short_lat, 0.99), q_us(&T->short_lat, 0.99));
    double rsd = ratio(q_sd(&H->short_slow, 0.99), q_sd(&T->short_slow, 0.99));
    double rg = ratio(H->gbps_per_host, T->gbps_per_host);
    if (isfinite(r99))
        printf("Homa's short-message p99 latency is %.1fx %s than TCP's; goodput ratio Homa/TCP "
               "%.2f\n",
               r99 >= 1 ? r99 : 1 / r99, r99 >= 1 ? "higher" : "lower", rg);

    char plot_json[4096] = ""; /* --plot without --json: a temporary JSON for homa-plot */
    if (o.plot_path && !o.json_path && cluster_plot_tmpjson(plot_json, sizeof(plot_json)) == 0)
        o.json_path = plot_json;
    if (o.json_path) {
        FILE *f = fopen(o.json_path, "w");
        if (!f) {
            fprintf(stderr, "homa-perf cluster: cannot write %s: %s\n", o.json_path,
                    strerror(errno));
            status = 1;
        } else {
            json_writer j;
            json_init(&j, f);
            json_obj_begin(&j, NULL);
            json_str(&j, "experiment", "cluster");
            json_str(&j, "workload", homa_workload_name(g.w));
            json_u64(&j, "max_size", g.max_size);
            json_num(&j, "mean_size", g.mean);
            json_num(&j, "load", o.load);
            json_str(&j, "load_counts",
                     "payload bytes each host sends (its requests + its responses) / link rate");
            json_i64(&j, "hosts", o.hosts);
            json_num(&j, "link_gbps", (double)g_cluster.rate_bps / 1e9);
            json_num(&j, "seconds", o.seconds);
            json_num(&j, "warmup", o.warmup);
            json_u64(&j, "seed", o.seed);
            json_obj_begin(&j, "cluster");
            json_str(&j, "name", g_cluster.name);
            json_i64(&j, "queue_packets", g_cluster.queue);
            json_str(&j, "host_queues", g_cluster.host_queues);
            json_u64(&j, "mtu", g_cluster.mtu);
            json_obj_end(&j);
            json_obj_begin(&j, "settings");
            json_i64(&j, "busy_poll_us", o.busy_poll_us);
            json_i64(&j, "nice", o.nice);
            json_i64(&j, "server_threads", o.server_threads);
            json_i64(&j, "client_threads_per_host", 1);
            json_i64(&j, "tcp_connections_per_peer", o.conns);
            json_str(&j, "homa_config", g_homa_spec);
            json_bool(&j, "homa_pacer", !o.no_pacer);
            json_num(&j, "homa_pacer_gbps",
                     o.no_pacer ? 0 : (double)g_cluster.rate_bps * o.pacer_fraction / 1e9);
            json_bool(&j, "homa_gso", o.homa_gso);
            json_obj_end(&j);
            json_u64(&j, "short_max_bytes", short_max);
            json_str(&j, "short_definition",
                     "messages no longer than the workload's 10th percentile of length");
            json_str(&j, "slowdown_method", slowdown_method);
            if (hi >= 0) json_proto(&j, "homa", &res[hi], &o);
            if (ti >= 0) json_proto(&j, "tcp", &res[ti], &o);
            json_obj_begin(&j, "ratio");
            json_str(&j, "direction", "homa/tcp");
            json_num(&j, "short_p50_us", r50);
            json_num(&j, "short_p99_us", r99);
            json_num(&j, "short_p99_slowdown", rsd);
            json_num(&j, "gbps", rg);
            json_obj_end(&j);
            json_obj_end(&j);
            fputc('\n', f);
            if (fclose(f) != 0) status = 1;
            if (!plot_json[0]) printf("results: %s\n", o.json_path);
        }
    }
    if (o.plot_path) {
        char title[160];
        snprintf(title, sizeof(title), "%s at %.0f%% load, %d hosts, %.3g Gbit/s: slowdown by size",
                 homa_workload_name(g.w), o.load * 100, o.hosts, (double)g_cluster.rate_bps / 1e9);
        if (cluster_plot(o.json_path, o.plot_path, title, err, sizeof(err)) < 0) {
            fprintf(stderr, "homa-perf cluster: %s\n", err);
            status = 1;
        } else {
            printf("plot: %s\n", o.plot_path);
        }
        if (plot_json[0]) unlink(plot_json);
    }
    if (o.keep_dir) printf("agent logs and records kept in %s\n", o.keep_dir);
    for (int k = 0; k < o.nprotos; k++)
        if (!res[k].ran || res[k].fatal[0] || res[k].errors > 0 || res[k].ok == 0) status = 1;
    for (int k = 0; k < 2; k++) {
        if (res[k].res) {
            perf_result_free(res[k].res);
            free(res[k].res);
        }
        hist_free(&res[k].short_lat);
        hist_free(&res[k].short_slow);
        hist_free(&res[k].short_slow_common);
        hist_free(&res[k].lag);
        free(res[k].recs);
    }
    free(cal);
    free(res);
    cleanup_all();
    wlgen_close(&g);
    return status;
}
