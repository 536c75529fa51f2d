/* homa-perf cluster: the emulated cluster itself.  Finds the
 * scripts/homa-cluster script, creates the cluster of network namespaces
 * with it (or reads the description of an existing one, --cluster) into
 * g_cluster, tears it down and removes the temporary directory at exit;
 * names the hosts' namespaces; and runs the helper commands (homa-cluster,
 * rm, tc, ip) in child processes that ignore Ctrl-C, so a teardown
 * finishes. */
#include "ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* snprintf for paths and messages whose parts are bounded elsewhere. */
void cluster_fmt(char *buf, size_t len, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, len, f, ap);
    va_end(ap);
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
int cluster_capture_cmd(char *const argv[], char *buf, size_t cap)
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

cinfo g_cluster;
/* Homa engine settings passed to the agents: the defaults scaled to the
 * link (cluster_homa_scaled_config), then --homa-config. */
char g_homa_spec[1100];
char g_tmpdir[512];
/* This program, for the agents (resolved at start: a rebuild while a run
 * is going on replaces the file, and /proc/self/exe then says "(deleted)"). */
char g_exe[PATH_MAX];
char g_homad[PATH_MAX];

int cluster_find_homad(void)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", g_exe);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    static const char *const rel[] = {"../daemon/homad", "../sbin/homad", "homad"};
    for (size_t i = 0; slash && i < sizeof(rel) / sizeof(rel[0]); i++) {
        cluster_fmt(g_homad, sizeof(g_homad), "%s/%s", dir, rel[i]);
        if (access(g_homad, X_OK) == 0) return 0;
    }
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s:/usr/sbin:/usr/local/sbin", path ? path : "/usr/bin");
    char *save = NULL;
    for (char *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        cluster_fmt(g_homad, sizeof(g_homad), "%s/homad", d);
        if (access(g_homad, X_OK) == 0) return 0;
    }
    g_homad[0] = '\0';
    return -1;
}
const char *g_keep_dir;

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

void cluster_down(void)
{
    if (!g_cluster.created) return;
    g_cluster.created = 0;
    char *argv[] = {g_cluster.script, "down", "--name", g_cluster.name, NULL};
    printf("[cluster] tearing down %s\n", g_cluster.name);
    fflush(stdout);
    run_cmd(argv, 1);
}

void cluster_remove_tmpdir(void)
{
    if (!g_tmpdir[0] || g_keep_dir) return;
    char *argv[] = {"rm", "-rf", "--", g_tmpdir, NULL};
    run_cmd(argv, 1);
    g_tmpdir[0] = '\0';
}

void cluster_cleanup_all(void)
{
    cluster_down();
    cluster_remove_tmpdir();
}

static int read_cluster_conf(const char *name, cinfo *c, char *err, size_t errlen)
{
    const char *dir = getenv("HOMA_CLUSTER_STATE_DIR");
    char path[PATH_MAX];
    cluster_fmt(path, sizeof(path), "%s/%s.conf", dir && *dir ? dir : "/run/homa-cluster", name);
    FILE *f = fopen(path, "r");
    if (!f) {
        cluster_fmt(err, errlen,
                    "cluster %s not found (%s: %s); create it with homa-cluster up --name %s", name,
                    path, strerror(errno), name);
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
        cluster_fmt(err, errlen, "%s: incomplete cluster description", path);
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

int cluster_setup(const copts *o, char *err, size_t errlen)
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
            cluster_fmt(err, errlen, "cluster %s has %d hosts, --hosts asks for %d", c->name,
                        c->hosts, o->hosts);
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

void cluster_host_ns(int i, char *buf, size_t len)
{
    snprintf(buf, len, "%s-h%d", g_cluster.name, i);
}
