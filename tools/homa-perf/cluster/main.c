/* homa-perf cluster: the Homa-vs-TCP experiment on an emulated cluster.
 *
 *   homa-perf cluster --workload wN --load F --hosts N --seconds S
 *                     --json OUT [--plot OUT.png] [more options]
 *
 * Sets up a cluster with scripts/homa-cluster (or uses one given with
 * --cluster), then for Homa and then TCP: starts an agent in every host
 * (cluster/agent.c), measures the best-case RTTs on the idle cluster, runs
 * the same message schedule on every host at fraction F of the link rate,
 * collects the per-message records and the switch's queue counters, and
 * finally writes JSON, a table with the ratios and a PNG chart.  The
 * cluster is torn down on exit, also on failure and on Ctrl-C.
 * docs/cluster.md describes the method.
 *
 * This file holds the entry point, which strings the steps together; the
 * steps are in cluster/cli.c (options), cluster/hosts.c (the cluster),
 * cluster/run.c (one protocol's run), cluster/collect.c (counters, records,
 * analysis) and cluster/report.c (table, JSON, chart), their shared
 * declarations in cluster/ctl.h. */
#include "ctl.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    g_stop = sig;
}

/* ---- Entry point ----------------------------------------------------------------------- */

int cluster_main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    copts o;
    int rc = cluster_parse_args(argc, argv, &o);
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
    if (o.homad && cluster_find_homad() < 0) {
        fprintf(stderr,
                "homa-perf cluster: --homad: no homad next to %s (build tree: "
                "../daemon/homad; installed: ../sbin/homad) nor in PATH\n",
                g_exe);
        wlgen_close(&g);
        return 1;
    }
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
        cluster_remove_tmpdir();
        wlgen_close(&g);
        return 1;
    }
    rc = cluster_setup(&o, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "homa-perf cluster: %s\n", err);
        cluster_cleanup_all();
        free(res);
        wlgen_close(&g);
        return rc == -2 ? CLUSTER_EXIT_UNSUPPORTED : 1;
    }
    cluster_homa_scaled_config(&o);
    int hi = -1, ti = -1;
    for (int k = 0; k < o.nprotos && !g_stop; k++) {
        if (k > 0) usleep(500000);
        presult *p = &res[k];
        if (o.protos[k] == PERF_HOMA)
            hi = k;
        else
            ti = k;
        if (cluster_run_protocol(&o, o.protos[k], p) < 0) status = 1;
    }
    if (g_stop) {
        fprintf(stderr, "homa-perf cluster: interrupted\n");
        cluster_cleanup_all();
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
        cluster_cleanup_all();
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
        if (res[k].ran && !res[k].fatal[0])
            cluster_analyse(&o, &g, &res[k], &cal[k], &cal[2], short_max);

    if (cluster_report(o, g, res, hi, ti, short_max)) status = 1;
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
    cluster_cleanup_all();
    wlgen_close(&g);
    return status;
}
