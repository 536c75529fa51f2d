/* homa-perf cluster: running one protocol.  Starts a `homa-perf
 * cluster-agent` in every host namespace, talks to the agents over their
 * stdin/stdout (ready, calibration, run, progress, done, counters), shows
 * progress once a second, starts the queue monitor for the measured window,
 * measures the machine's CPU use, and finally reaps the agents and gathers
 * their records and counters into a presult (cluster_run_protocol()).  Also
 * scales Homa's engine settings to the link (cluster_homa_scaled_config()). */
#include "ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define AGENT_PORT 4000

static uint64_t now_ns(void)
{
    return perf_now_ns();
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
    int host, proc;
    char rec[PATH_MAX], log[PATH_MAX], samples[PATH_MAX];
} agentp;

typedef struct run_state {
    agentp a[CLUSTER_MAX_AGENTS];
    pid_t homad[CLUSTER_MAX_HOSTS]; /* --homad: one per host (0: none) */
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
                snprintf(err, errlen, "host %d process %d: %s", a->host, a->proc,
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
        struct pollfd pfd[CLUSTER_MAX_AGENTS];
        int map[CLUSTER_MAX_AGENTS], np = 0;
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

/* Waits up to limit_ns for pid, then kills it; its resource use into *ru. */
static void reap_pid(pid_t pid, uint64_t limit_ns, struct rusage *ru)
{
    int st;
    uint64_t limit = now_ns() + limit_ns;
    for (;;) {
        pid_t r = wait4(pid, &st, WNOHANG, ru);
        if (r == pid || (r < 0 && errno != EINTR)) return;
        if (now_ns() > limit) {
            kill(pid, SIGKILL);
            wait4(pid, &st, 0, ru);
            return;
        }
        usleep(20000);
    }
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
        reap_pid(a->pid, 10000000000ull, &a->ru);
        a->pid = -1;
        if (a->out_fd >= 0) {
            close(a->out_fd);
            a->out_fd = -1;
        }
    }
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

/* Homa's pacer rate in bit/s (0: no pacer), for the agents and homad. */
static unsigned long long pacer_bps(const copts *o)
{
    return o->no_pacer
               ? 0ull
               : (unsigned long long)llround((double)g_cluster.rate_bps * o->pacer_fraction);
}

/* ---- homad (--homad) ------------------------------------------------------------- */

/* homad's flags for the engine settings of g_homa_spec (the keys both
 * know; another key is an error: homad could not apply it). */
static int homad_engine_flags(char *spec, char **argv, int *k, int max, char *err, size_t errlen)
{
    static const struct {
        const char *key, *flag;
    } map[] = {{"unsched_bytes", "--unsched-bytes"},
               {"grant_window", "--grant-window"},
               {"max_incoming", "--max-incoming"},
               {"max_overcommit", "--max-overcommit"},
               {"tick_us", "--tick-us"},
               {"timeout_ticks", "--timeout-ticks"}};
    char *save = NULL;
    for (char *item = strtok_r(spec, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) continue; /* checked by cluster_homa_apply() already */
        *eq = '\0';
        size_t i = 0;
        while (i < sizeof(map) / sizeof(map[0]) && strcmp(item, map[i].key) != 0)
            i++;
        if (i == sizeof(map) / sizeof(map[0])) {
            snprintf(err, errlen, "--homad: homad has no setting for --homa-config key %s", item);
            return -1;
        }
        if (*k + 2 >= max) {
            snprintf(err, errlen, "--homad: too many --homa-config settings");
            return -1;
        }
        argv[(*k)++] = (char *)map[i].flag;
        argv[(*k)++] = eq + 1;
    }
    return 0;
}

static void stop_homads(run_state *rs, int hosts, double *user_s, double *sys_s)
{
    for (int h = 0; h < hosts; h++)
        if (rs->homad[h] > 0) kill(rs->homad[h], SIGTERM);
    for (int h = 0; h < hosts; h++) {
        if (rs->homad[h] <= 0) continue;
        struct rusage ru;
        memset(&ru, 0, sizeof(ru));
        reap_pid(rs->homad[h], 5000000000ull, &ru);
        *user_s += (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
        *sys_s += (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
        rs->homad[h] = 0;
    }
}

/* Starts one homad in every host namespace, serving socket
 * g_tmpdir/homad-hN.sock, with the agents' engine settings. */
static int start_homads(const copts *o, run_state *rs, char *err, size_t errlen)
{
    char spec[sizeof(g_homa_spec)];
    for (int h = 0; h < o->hosts; h++) {
        char ns[64], sock[PATH_MAX], log[PATH_MAX], bp[16], mtu[16], payload[16], link[32],
            maxmsg[16];
        cluster_host_ns(h, ns, sizeof(ns));
        cluster_fmt(sock, sizeof(sock), "%s/homad-h%d.sock", g_tmpdir, h);
        cluster_fmt(log, sizeof(log), "%s/homad-h%d.log", g_tmpdir, h);
        snprintf(bp, sizeof(bp), "%d", o->busy_poll_us);
        snprintf(mtu, sizeof(mtu), "%u", g_cluster.mtu);
        snprintf(payload, sizeof(payload), "%u", g_cluster.mtu - 84);
        snprintf(link, sizeof(link), "%llu", pacer_bps(o));
        snprintf(maxmsg, sizeof(maxmsg), "%u", o->max_size > 1000000 ? o->max_size : 1000000);
        char *argv[64];
        int k = 0;
        argv[k++] = "ip";
        argv[k++] = "netns";
        argv[k++] = "exec";
        argv[k++] = ns;
        argv[k++] = g_homad;
        argv[k++] = "--socket";
        argv[k++] = sock;
        argv[k++] = "--busy-poll-us";
        argv[k++] = bp;
        argv[k++] = "--mtu";
        argv[k++] = mtu;
        argv[k++] = "--max-payload";
        argv[k++] = payload;
        argv[k++] = "--no-gso";
        argv[k++] = o->homa_gso ? "0" : "1";
        argv[k++] = "--link-bps";
        argv[k++] = link;
        argv[k++] = "--max-message-length";
        argv[k++] = maxmsg;
        /* Room for an open-loop client's queue: the defaults (16 outgoing,
         * 64 incoming slots, 1,024 RPCs) suit interactive processes. */
        argv[k++] = "--tx-slots";
        argv[k++] = "64";
        argv[k++] = "--rx-slots";
        argv[k++] = "128";
        argv[k++] = "--max-rpcs";
        argv[k++] = "4096";
        snprintf(spec, sizeof(spec), "%s", g_homa_spec);
        if (homad_engine_flags(spec, argv, &k, 60, err, errlen) < 0) return -1;
        argv[k] = NULL;
        int in_fd, out_fd;
        rs->homad[h] = spawn_agent(argv, &in_fd, &out_fd, log);
        if (rs->homad[h] < 0) {
            rs->homad[h] = 0;
            snprintf(err, errlen, "cannot start homad: %s", strerror(errno));
            return -1;
        }
        close(in_fd);
        close(out_fd);
        uint64_t limit = now_ns() + 10000000000ull;
        while (access(sock, F_OK) != 0) {
            int st;
            if (waitpid(rs->homad[h], &st, WNOHANG) == rs->homad[h]) {
                rs->homad[h] = 0;
                cluster_fmt(err, errlen, "homad of host %d exited (see %s)", h, log);
                return -1;
            }
            if (now_ns() > limit) {
                cluster_fmt(err, errlen, "homad of host %d did not start (see %s)", h, log);
                return -1;
            }
            usleep(20000);
        }
    }
    return 0;
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
void cluster_homa_scaled_config(const copts *o)
{
    uint32_t payload = g_cluster.mtu - 84;
    double rtt_bytes = (double)g_cluster.rate_bps / 8.0 * 50e-6;
    uint32_t pkts = (uint32_t)ceil(rtt_bytes / payload);
    if (pkts < 2) pkts = 2;
    uint32_t rtt = pkts * payload;
    cluster_fmt(g_homa_spec, sizeof(g_homa_spec),
                "unsched_bytes=%u,grant_window=%u,max_incoming=%u,tick_us=5000%s%s", rtt, rtt,
                8 * rtt, o->homa_config ? "," : "", o->homa_config ? o->homa_config : "");
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

int cluster_run_protocol(const copts *o, int proto, presult *p)
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
        link[32], mtu[16], port[16], procs[16], sample[16];
    snprintf(reqbps, sizeof(reqbps), "%.6g",
             o->load * (double)g_cluster.rate_bps / 2.0 / (double)o->procs);
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)o->seed);
    snprintf(warm, sizeof(warm), "%.6g", o->warmup);
    snprintf(secs, sizeof(secs), "%.6g", o->seconds);
    snprintf(drain, sizeof(drain), "%.6g", o->drain);
    snprintf(maxs, sizeof(maxs), "%u", o->max_size);
    snprintf(bp, sizeof(bp), "%d", o->busy_poll_us);
    snprintf(st, sizeof(st), "%d", o->server_threads);
    snprintf(conns, sizeof(conns), "%d", o->conns);
    snprintf(link, sizeof(link), "%llu", pacer_bps(o));
    snprintf(mtu, sizeof(mtu), "%u", g_cluster.mtu);
    snprintf(port, sizeof(port), "%d", AGENT_PORT);
    snprintf(procs, sizeof(procs), "%d", o->procs);
    snprintf(sample, sizeof(sample), "%d", o->sample_us);
    int daemon = o->homad && proto == PERF_HOMA;

    qstats before;
    cluster_read_qstats(&before, o->hosts);
    p->loadavg_before = loadavg1();
    if (p->loadavg_before > 0.5)
        printf("[%s] note: the machine is already busy (load average %.2f): other processes "
               "compete with the emulated cluster for the CPUs\n",
               pname, p->loadavg_before);
    char err[300] = "";
    int rc = 0;
    if (daemon) {
        printf("[%s] starting homad in each of %d hosts\n", pname, o->hosts);
        fflush(stdout);
        rc = start_homads(o, rs, err, sizeof(err));
    }
    if (o->procs == 1)
        printf("[%s] starting an agent in each of %d hosts\n", pname, o->hosts);
    else
        printf("[%s] starting %d agent processes in each of %d hosts%s\n", pname, o->procs,
               o->hosts, daemon ? ", all through their host's homad" : "");
    fflush(stdout);
    rs->n = rc == 0 ? o->hosts * o->procs : 0;
    for (int i = 0; i < rs->n; i++) {
        agentp *a = &rs->a[i];
        a->in_fd = a->out_fd = -1;
        a->host = i / o->procs;
        a->proc = i % o->procs;
        char ns[64], hoststr[16], procstr[16], tag[32], env[PATH_MAX + 16];
        cluster_host_ns(a->host, ns, sizeof(ns));
        snprintf(hoststr, sizeof(hoststr), "%d", a->host);
        snprintf(procstr, sizeof(procstr), "%d", a->proc);
        if (o->procs == 1)
            snprintf(tag, sizeof(tag), "h%d", a->host);
        else
            snprintf(tag, sizeof(tag), "h%d-p%d", a->host, a->proc);
        cluster_fmt(a->rec, sizeof(a->rec), "%s/%s-%s.rec", g_tmpdir, pname, tag);
        cluster_fmt(a->log, sizeof(a->log), "%s/%s-%s.log", g_tmpdir, pname, tag);
        cluster_fmt(a->samples, sizeof(a->samples), "%s/%s-%s.inc", g_tmpdir, pname, tag);
        cluster_fmt(env, sizeof(env), "HOMA_DAEMON=%s/homad-h%d.sock", g_tmpdir, a->host);
        char *argv[72];
        int k = 0;
        argv[k++] = "ip";
        argv[k++] = "netns";
        argv[k++] = "exec";
        argv[k++] = ns;
        if (daemon) {
            argv[k++] = "env";
            argv[k++] = env;
        }
        argv[k++] = (char *)exe;
        argv[k++] = "cluster-agent";
        argv[k++] = "--proto";
        argv[k++] = (char *)pname;
        argv[k++] = "--host";
        argv[k++] = hoststr;
        argv[k++] = "--proc";
        argv[k++] = procstr;
        argv[k++] = "--procs";
        argv[k++] = procs;
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
        argv[k++] = a->rec;
        /* Through homad every process reads the host's one engine. */
        if (proto == PERF_HOMA && o->sample_us > 0 && (!daemon || a->proc == 0)) {
            argv[k++] = "--sample-us";
            argv[k++] = sample;
            argv[k++] = "--sample-out";
            argv[k++] = a->samples;
        }
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
        a->pid = spawn_agent(argv, &a->in_fd, &a->out_fd, a->log);
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
    cluster_fmt(capfile, sizeof(capfile), "%s/cutoffs.pcap", g_tmpdir);
    if (rc == 0 && proto == PERF_HOMA && o->capture_cutoffs && cluster_tool_exists("tcpdump")) {
        cap = cluster_start_capture(capfile);
        p->capture_tried = cap > 0;
        usleep(500000); /* let tcpdump attach */
    }
    /* Calibration: host 0 -> host 1, one RPC at a time, idle cluster. */
    if (rc == 0) {
        printf("[%s] measuring best-case RTTs on the idle cluster (host 0 -> host 1)\n", pname);
        fflush(stdout);
        char cal[32];
        snprintf(cal, sizeof(cal), "cal %d\n", o->procs); /* host 1's first agent */
        agent_send(&rs->a[0], cal);
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
    cluster_stop_capture(cap);
    if (cap > 0) p->ncut = cluster_parse_cutoffs(capfile, p->cut, CLUSTER_MAX_HOSTS);
    for (int i = 0; i < rs->n; i++)
        agent_send(&rs->a[i], "quit\n");
    if (rc == 0) {
        char err2[300];
        if (wait_agents(rs, -1, pred_finished, now_ns() + 30000000000ull, NULL, NULL, err2,
                        sizeof(err2)) < 0)
            fprintf(stderr, "homa-perf cluster: [%s] %s\n", pname, err2);
    }
    reap_agents(rs, rc != 0);
    /* homad's CPU time counts with the agents'. */
    if (daemon) stop_homads(rs, o->hosts, &p->user_s, &p->sys_s);
    p->ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 0; i < rs->n; i++) {
        agentp *a = &rs->a[i];
        p->user_s += (double)a->ru.ru_utime.tv_sec + (double)a->ru.ru_utime.tv_usec / 1e6;
        p->sys_s += (double)a->ru.ru_stime.tv_sec + (double)a->ru.ru_stime.tv_usec / 1e6;
        /* Through homad each agent reports the host's engine: count it once. */
        if (!daemon || a->proc == 0) cluster_counters_add(p, a->counters);
    }
    cluster_read_qstats(&p->q, o->hosts);
    cluster_qstats_diff(&p->q, &before, o->hosts);
    if (rc == 0) {
        for (int i = 0; i < rs->n; i++) {
            if (cluster_read_records(rs->a[i].rec, p) < 0) {
                snprintf(err, sizeof(err), "cannot read the records of host %d process %d",
                         rs->a[i].host, rs->a[i].proc);
                rc = -1;
                break;
            }
        }
    }
    if (rc == 0 && proto == PERF_HOMA && o->sample_us > 0) {
        static char paths[CLUSTER_MAX_AGENTS][PATH_MAX];
        int host_of[CLUSTER_MAX_AGENTS], nf = 0;
        for (int i = 0; i < rs->n; i++)
            if (!daemon || rs->a[i].proc == 0) {
                snprintf(paths[nf], PATH_MAX, "%s", rs->a[i].samples);
                host_of[nf++] = rs->a[i].host;
            }
        homa_config cfg;
        char e2[256];
        homa_config_default(&cfg);
        cluster_homa_apply(g_homa_spec, &cfg, e2, sizeof(e2));
        char csv[PATH_MAX];
        cluster_fmt(csv, sizeof(csv), "%s/%s-incoming.csv", g_keep_dir ? g_keep_dir : "", pname);
        if (cluster_incoming(o, paths, host_of, nf, cfg.max_incoming, g_keep_dir ? csv : NULL, p) <
            0)
            fprintf(stderr, "homa-perf cluster: [%s] cannot read the incoming-bytes samples\n",
                    pname);
    }
    if (rc != 0) {
        snprintf(p->fatal, sizeof(p->fatal), "%s", err);
        fprintf(stderr, "homa-perf cluster: [%s] %s\n", pname, err);
        for (int i = 0; i < rs->n && !g_stop; i++) {
            FILE *f = fopen(rs->a[i].log, "r");
            if (!f) continue;
            char line[512];
            int shown = 0;
            while (fgets(line, sizeof(line), f) && shown < 10) {
                fprintf(stderr, "  host %d process %d: %s", rs->a[i].host, rs->a[i].proc, line);
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
