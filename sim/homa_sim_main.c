/* homa-sim: the command line.
 *
 *   homa-sim [--workload wN] [--load F] [--hosts 144] [--seed S] [--json OUT] ...
 *   homa-sim reproduce [--jobs N] [options]       W1-W5 at 80 % load vs the paper
 *   homa-sim ablate --what priorities|overcommit|unsched|sender|load
 *                   [--values a,b,...] [options]  one mechanism varied
 *
 * Results go to stdout (a table, or JSON with --json -); progress lines go
 * to stderr.  Several runs (reproduce, ablate) execute in parallel worker
 * processes, one run per worker, --jobs at a time (default: online CPUs). */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "homa_sim.h"
#include "plotcall.h"

struct cli {
    const char *json;  /* NULL, a path, or "-" for stdout */
    const char *plot;  /* figure path (.png, .svg, .pdf), drawn by homa-plot */
    bool no_wall;      /* leave wall-clock fields out of the JSON */
    double progress_s; /* 0 = quiet */
    int jobs;
    const char *what, *values;
    const char *order; /* fluid: comma-separated orders */
};

static void usage(FILE *f)
{
    fputs("usage: homa-sim [options]                       one run\n"
          "       homa-sim reproduce [options]             W1-W5 at 80 % load vs the paper\n"
          "       homa-sim ablate --what KIND [--values LIST] [options]\n"
          "            KIND: priorities (1,2,4,8), overcommit (1..8), unsched (bytes),\n"
          "                  sender (receiver- vs sender-driven), load (fractions)\n"
          "       homa-sim fluid [--order srpt,fifo] [options]\n"
          "            messages as fluid, matched greedily in that order (SRPT: Homa's);\n"
          "            the load the matching alone can carry (--workload, --load,\n"
          "            --hosts, --host-gbps, --seed, --warmup-ms [0], --measure-ms [1000]);\n"
          "            --overcommit K serves only each receiver's K first messages, one\n"
          "            per sender, as Homa's grants do [no limit]\n"
          "output:\n"
          "  --json OUT              write results as JSON (- = stdout, then no table)\n"
          "  --no-wall               leave wall time, events/s and RSS out of the JSON\n"
          "                          (same seed -> byte-identical JSON)\n"
          "  --plot FILE             draw with homa-plot (.png, .svg or .pdf): slowdown vs\n"
          "                          message size, log-log; fluid: achieved load over time\n"
          "  --progress S            progress line every S wall seconds, 0 = off   [5]\n"
          "  --quiet                 same as --progress 0\n"
          "  --jobs N                parallel runs for reproduce/ablate    [online CPUs]\n",
          f);
    hsim_print_options(f);
}

static int parse_cli(struct cli *c, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(a, "--no-wall") == 0) {
        c->no_wall = true;
        return 1;
    }
    if (strcmp(a, "--quiet") == 0) {
        c->progress_s = 0;
        return 1;
    }
    const char *const names[] = {"--json", "--plot",   "--progress",
                                 "--jobs", "--what",   "--values", "--order"};
    int k = -1;
    for (int j = 0; j < 7; j++)
        if (strcmp(a, names[j]) == 0) k = j;
    if (k < 0) return 0;
    if (!v) {
        fprintf(stderr, "homa-sim: %s needs a value\n", a);
        return -1;
    }
    char *end;
    switch (k) {
    case 0:
        c->json = v;
        break;
    case 1:
        c->plot = v;
        break;
    case 2:
        c->progress_s = strtod(v, &end);
        if (*end || c->progress_s < 0) return -1;
        break;
    case 3:
        c->jobs = (int)strtol(v, &end, 10);
        if (*end || c->jobs < 1 || c->jobs > 64) return -1;
        break;
    case 4:
        c->what = v;
        break;
    case 5:
        c->values = v;
        break;
    case 6:
        c->order = v;
        break;
    }
    (*i)++;
    return 1;
}

/* ---- printing ---- */

static void print_result(FILE *f, const struct hsim_result *r)
{
    const struct hsim_opts *o = &r->opts;
    const homa_config *c = &r->engine;
    fprintf(f, "homa-sim: %s%s, %d hosts (%d racks x %d, %d spines), load %.2f, seed %llu\n",
            r->workload, o->truncate_1mb ? " (truncated at 1 MB)" : "", o->hosts, o->racks,
            o->hosts_per_rack, o->racks > 1 ? o->spines : 0, o->load, (unsigned long long)o->seed);
    fprintf(f,
            "  engine: unsched %u B, grant window %u B, overcommit %u, %u priorities "
            "(%d unscheduled), rtt %.2f us (%u B)%s\n",
            c->unsched_bytes, c->grant_window ? c->grant_window : c->unsched_bytes,
            c->max_overcommit, c->num_priorities, r->unsched_levels, r->rtt_ns / 1e3, r->rtt_bytes,
            o->sender_driven ? ", sender-driven" : "");
    fprintf(f, "  %s cutoffs (prio 7..0):", c->adaptive_cutoffs ? "initial" : "fixed");
    for (int i = 7; i >= 0; i--)
        fprintf(f, " %u", c->unsched_cutoffs[i]);
    if (c->adaptive_cutoffs)
        fprintf(f, "; receivers adapt them (%llu updates)", (unsigned long long)r->cutoff_updates);
    fprintf(f, "\n  messages: %llu measured, %llu completed, %llu incomplete, %llu failed\n",
            (unsigned long long)r->measured, (unsigned long long)r->completed,
            (unsigned long long)r->incomplete, (unsigned long long)r->failed);
    fprintf(f,
            "  short messages (<= %u B, %llu): slowdown p50 %.2f p99 %.2f, latency p50 %.2f us "
            "p99 %.2f us\n",
            r->short_cutoff, (unsigned long long)r->short_count, r->short_p50, r->short_p99,
            r->short_p50_us, r->short_p99_us);
    fprintf(f, "  all messages: slowdown p50 %.2f p99 %.2f mean %.2f\n", r->all_p50, r->all_p99,
            r->all_mean);
    fprintf(f, "  %-24s %10s %9s %9s %9s\n", "size (bytes)", "messages", "p50", "p99", "mean");
    for (int b = 0; b < r->nbuckets; b++) {
        const struct hsim_bucket *k = &r->bucket[b];
        char range[48];
        snprintf(range, sizeof(range), "%u-%u", k->min_bytes, k->max_bytes);
        fprintf(f, "  %-24s %10llu %9.2f %9.2f %9.2f\n", range, (unsigned long long)k->count,
                k->p50, k->p99, k->mean);
    }
    fprintf(f,
            "  load: offered %.3f, achieved %.3f (DATA), downlinks busy %.3f, uplinks busy "
            "%.3f\n",
            r->offered_load, r->achieved_load, r->downlink_util, r->uplink_util);
    fprintf(f, "  load with GRANT frames counted (the paper's measure): offered %.3f, achieved %.3f\n",
            r->offered_load_grants, r->achieved_load_grants);
    fprintf(f,
            "  drops %llu, resends %llu, retransmitted packets %llu, grants %llu, timeouts %llu, "
            "refused %llu, max queue %llu B (downlink %llu B)\n",
            (unsigned long long)r->drops, (unsigned long long)r->resends,
            (unsigned long long)r->retransmits, (unsigned long long)r->grants,
            (unsigned long long)r->timeouts, (unsigned long long)r->engine_drops,
            (unsigned long long)r->max_port_bytes, (unsigned long long)r->max_downlink_bytes);
    if (r->nbacklog > 0)
        fprintf(f,
                "  backlog (unfinished message bytes): %.2f MB at window start+5%%, %.2f MB at "
                "its end, trend %+.4f MB/ms\n",
                r->backlog_mb[0], r->backlog_mb[r->nbacklog - 1], r->backlog_slope);
    if (r->nbacklog >= 5) {
        fprintf(f, "  achieved load by twentieths of the window:");
        for (int k = 0; k < r->nbacklog; k++)
            fprintf(f, " %.3f", r->load_intervals[k]);
        fprintf(f, "\n  achieved load over the last quarter: %.3f\n", r->load_last_quarter);
    }
    if (r->has_queue_stats)
        fprintf(f,
                "  queue stats (%llu host samples): downlink idle with messages waiting for "
                "grants %.3f, idle with none %.3f; NIC idle with unsent but ungranted "
                "messages %.3f (of which for an idle downlink %.4f), idle with nothing to "
                "send %.3f; per host: %.2f messages waiting for grants from %.2f senders, "
                "%.2f with unsent bytes\n",
                (unsigned long long)r->qs_samples, r->qs_rx_idle_pending, r->qs_rx_idle_empty,
                r->qs_tx_idle_unsent, r->qs_both_idle, r->qs_tx_idle_empty, r->qs_rx_grantable,
                r->qs_rx_peers, r->qs_tx_msgs);
    for (int i = 0; i < r->nfailures; i++) {
        const struct hsim_failure *x = &r->failures[i];
        fprintf(f,
                "  failed RPC: host %d -> %d, request %u B, response %u B, started %.3f ms, "
                "%s lost, reported %.3f ms (error %d)\n",
                x->src, x->dst, x->req_len, x->resp_len, x->start_ms,
                x->in_response ? "response" : "request", x->failed_ms, x->error);
    }
    if (r->stopped_early)
        fprintf(f, "  STOPPED EARLY at the memory ceiling (%.0f MB): window cut to %.2f ms\n",
                o->max_rss_mb, o->measure_ms);
    fprintf(f,
            "  simulated %.4f s, %llu events, %llu packets; wall %.1f s, %.2f M events/s, "
            "%.2f M packets/s, peak RSS %.0f MB\n",
            r->sim_s, (unsigned long long)r->events, (unsigned long long)r->packets, r->wall_s,
            r->events_per_s / 1e6, r->packets_per_s / 1e6, r->peak_rss_mb);
}

/* ---- running one or many simulations ---- */

static int run_one(const struct hsim_opts *o, struct hsim_result *r)
{
    char err[256];
    struct hsim *s = hsim_create(o, err, sizeof(err));
    if (!s) {
        fprintf(stderr, "homa-sim: %s\n", err);
        return -1;
    }
    hsim_run(s, r);
    hsim_destroy(s);
    return 0;
}

/* Runs jobs[i] into res[i], at most `par` at a time, each in its own
 * process (a run is single-threaded; processes also keep the memory of
 * big runs separate).  Returns the number of failed runs. */
static int run_many(struct hsim_opts *jobs, struct hsim_result *res, int n, int par)
{
    if (par < 1) par = 1;
    pid_t *pid = calloc((size_t)n, sizeof(*pid));
    int *fd = calloc((size_t)n, sizeof(*fd));
    bool *ok = calloc((size_t)n, sizeof(*ok));
    int next = 0, running = 0, failed = 0;
    fflush(NULL);
    while (next < n || running > 0) {
        while (running < par && next < n) {
            int p[2];
            if (pipe(p) != 0) {
                perror("homa-sim: pipe");
                exit(1);
            }
            pid_t c = fork();
            if (c < 0) {
                perror("homa-sim: fork");
                exit(1);
            }
            if (c == 0) {
                close(p[0]);
                struct hsim_result r;
                int e = run_one(&jobs[next], &r);
                if (e == 0) {
                    /* the result (a few KB) fits in the pipe buffer */
                    const char *b = (const char *)&r;
                    size_t left = sizeof(r);
                    while (left > 0) {
                        ssize_t w = write(p[1], b, left);
                        if (w <= 0) _exit(3);
                        b += w;
                        left -= (size_t)w;
                    }
                }
                close(p[1]);
                fflush(NULL);
                _exit(e == 0 ? 0 : 2);
            }
            close(p[1]);
            pid[next] = c;
            fd[next] = p[0];
            next++;
            running++;
        }
        int st;
        pid_t c = wait(&st);
        if (c < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < n; i++) {
            if (pid[i] != c) continue;
            running--;
            size_t got = 0;
            char *b = (char *)&res[i];
            while (got < sizeof(res[i])) {
                ssize_t rd = read(fd[i], b + got, sizeof(res[i]) - got);
                if (rd <= 0) break;
                got += (size_t)rd;
            }
            close(fd[i]);
            ok[i] = WIFEXITED(st) && WEXITSTATUS(st) == 0 && got == sizeof(res[i]);
            if (!ok[i]) {
                fprintf(stderr, "homa-sim: run %d (%s) failed\n", i, jobs[i].tag);
                memset(&res[i], 0, sizeof(res[i]));
                failed++;
            }
        }
    }
    free(pid);
    free(fd);
    free(ok);
    return failed;
}

/* Default memory ceiling for one of `par` concurrent runs. */
static double auto_rss_mb(int par)
{
    double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
    return ram > 0 ? 0.85 * ram / (par > 0 ? par : 1) : 0;
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

static FILE *open_out(const char *path)
{
    if (strcmp(path, "-") == 0) return stdout;
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "homa-sim: %s: %s\n", path, strerror(errno));
    return f;
}

/* --plot: homa-plot draws the figure from the JSON, that of --json when it
 * went to a file, else a temporary copy written here.  Several results
 * (reproduce, ablate) are a list, as --json writes them. */
static int plot_results(const struct cli *cl, const struct hsim_result *res, int n, bool list,
                        const char *const *labels, int nlabels, const char *title)
{
    char tmp[4096] = "";
    const char *json = cl->json;
    if (!json || strcmp(json, "-") == 0) {
        FILE *f = plotcall_tmpjson(tmp, sizeof(tmp));
        if (!f) {
            fprintf(stderr, "homa-sim: --plot: temporary JSON file: %s\n", strerror(errno));
            return -1;
        }
        if (list) fprintf(f, "[\n");
        for (int i = 0; i < n; i++) {
            hsim_write_json(f, &res[i], false);
            if (i + 1 < n) fprintf(f, ",\n");
        }
        if (list) fprintf(f, "]\n");
        if (fclose(f) != 0) {
            fprintf(stderr, "homa-sim: --plot: %s: %s\n", tmp, strerror(errno));
            unlink(tmp);
            return -1;
        }
        json = tmp;
    }
    struct plotcall_args a = {
        .json = json, .out = cl->plot, .title = title, .labels = labels, .nlabels = nlabels};
    char err[600];
    int rc = plotcall_run(&a, err, sizeof(err));
    if (rc == PLOTCALL_SKIPPED) {
        /* the plot is optional: the results stand */
        fprintf(stderr, "homa-sim: --plot: warning: %s; the results are complete\n", err);
        rc = 0;
    } else if (rc != 0) {
        fprintf(stderr, "homa-sim: --plot: %s\n", err);
    }
    if (tmp[0]) unlink(tmp);
    return rc;
}

static void write_json_many(const struct cli *cl, const struct hsim_result *res, int n)
{
    FILE *f = open_out(cl->json);
    if (!f) return;
    fprintf(f, "[\n");
    for (int i = 0; i < n; i++) {
        hsim_write_json(f, &res[i], !cl->no_wall);
        if (i + 1 < n) fprintf(f, ",\n");
    }
    fprintf(f, "]\n");
    if (f != stdout) fclose(f);
}

/* The published figures (../shared/PROTOCOL.md section 4). */
static const char *paper_impl(const char *w)
{
    if (strcmp(w, "w3") == 0) return "3.40";
    if (strcmp(w, "w4") == 0) return "3.32";
    if (strcmp(w, "w5") == 0) return "2.96";
    return "-";
}

static int cmd_reproduce(struct cli *cl, const struct hsim_opts *base, bool load_given)
{
    static const char *const wl[5] = {"w1", "w2", "w3", "w4", "w5"};
    static char tags[5][16];
    struct hsim_opts jobs[5];
    struct hsim_result res[5];
    /* W5 first, then the light ones on the other worker, W4 last: with two
     * workers the two memory-hungry runs (W4, W5) do not overlap */
    static const int order[5] = {4, 0, 1, 2, 3};
    for (int k = 0; k < 5; k++) {
        int i = order[k];
        jobs[k] = *base;
        jobs[k].workload = wl[i];
        if (!load_given) jobs[k].load = 0.8;
        snprintf(tags[k], sizeof(tags[k]), "[%s]", wl[i]);
        jobs[k].tag = tags[k];
        jobs[k].progress_s = cl->progress_s;
    }
    int par = cl->jobs ? cl->jobs : online_cpus();
    if (par > 5) par = 5;
    /* memory ceilings (shares of 85 % of RAM): with two workers W5 overlaps
     * W1-W3 and W4 overlaps W3, so no two overlapping runs exceed 70 % */
    for (int k = 0; k < 5; k++) {
        if (jobs[k].max_rss_mb >= 0) continue;
        int w = order[k];
        double all = auto_rss_mb(1);
        static const double share[5] = {0.05, 0.05, 0.2, 0.4, 0.5};
        jobs[k].max_rss_mb = par == 1 ? all : share[w] * all;
    }
    fprintf(stderr, "homa-sim reproduce: W1-W5 at load %.2f, %d hosts, %d parallel runs\n",
            jobs[0].load, base->hosts, par);
    int failed = run_many(jobs, res, 5, par);
    /* back into W1..W5 order */
    struct hsim_opts oj[5];
    struct hsim_result orr[5];
    for (int k = 0; k < 5; k++) {
        oj[order[k]] = jobs[k];
        orr[order[k]] = res[k];
    }
    bool to_stdout = cl->json && strcmp(cl->json, "-") == 0;
    FILE *f = to_stdout ? stderr : stdout;
    fprintf(f,
            "\nHoma on %d simulated hosts, load %.2f: p99 slowdown of the shortest 10 %% of "
            "messages\n",
            base->hosts, oj[0].load);
    fprintf(f, "%-4s %3s %9s %8s %8s %10s %10s %8s %7s %8s %8s %9s %8s %7s %7s\n", "wl", "oc",
            "short<=B", "p50", "p99", "paper sim", "paper impl", "achieved", "drops", "resends",
            "sim ms", "measured", "wall s", "Mev/s", "goal");
    bool all_ok = true;
    for (int i = 0; i < 5; i++) {
        const struct hsim_result *r = &orr[i];
        bool ok = r->short_count > 0 && r->short_p99 <= 3.5;
        const char *verdict = r->short_count == 0 ? "no data" : ok ? "ok" : "MISSED";
        for (int i = 0; i < r->nfailures; i++) {
            const struct hsim_failure *x = &r->failures[i];
            fprintf(f,
                    "  failed RPC: host %d -> %d, request %u B, response %u B, started %.3f ms, "
                    "%s lost, reported %.3f ms (error %d)\n",
                    x->src, x->dst, x->req_len, x->resp_len, x->start_ms,
                    x->in_response ? "response" : "request", x->failed_ms, x->error);
        }
        if (r->stopped_early) fprintf(f, "(%s: stopped early at the memory ceiling)\n", wl[i]);
        all_ok = all_ok && ok;
        fprintf(f,
                "%-4s %3u %9u %8.2f %8.2f %10s %10s %8.3f %7llu %8llu %8.1f %9llu %8.1f %7.2f "
                "%7s\n",
                wl[i], r->engine.max_overcommit, r->short_cutoff, r->short_p50, r->short_p99,
                "2-3.5", paper_impl(wl[i]), r->achieved_load, (unsigned long long)r->drops,
                (unsigned long long)r->resends, r->sim_s * 1e3, (unsigned long long)r->measured,
                r->wall_s, r->events_per_s / 1e6, verdict);
    }
    /* which defaults depart from the paper's, from the two tables themselves */
    char raised[128] = "";
    for (int i = 0, len = 0; i < 5; i++) {
        int d = hsim_default_overcommit(wl[i]), p = hsim_paper_overcommit(wl[i]);
        if (d != p && len < (int)sizeof(raised))
            len += snprintf(raised + len, sizeof(raised) - (size_t)len, "%s%s %d (paper %d)",
                            len ? ", " : "", wl[i], d, p);
    }
    fprintf(f,
            "paper sim: SIGCOMM 2018 simulations, p99 slowdown within 2-3.5x at 80 %% load for "
            "all sizes;\npaper impl: the DPDK implementation's short-message p99 at ~80 %% load "
            "(W3 3.40, W4 3.32, W5 2.96).\noc: max_overcommit; homa-sim's default is the "
            "paper's except %s, which fall short of 90 %% load with the paper's.\n"
            "goal: short-message p99 slowdown <= 3.5.  %s\n",
            raised, all_ok ? "All workloads meet it." : "Not met everywhere (see MISSED).");
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) == 0)
        fprintf(f, "largest worker peak RSS: %.0f MB\n", (double)ru.ru_maxrss / 1024.0);
    if (cl->json) write_json_many(cl, orr, 5);
    if (cl->plot) {
        const char *labels[5] = {"W1", "W2", "W3", "W4", "W5"};
        char title[96];
        snprintf(title, sizeof(title), "Homa, %d hosts, %.0f%% load: p99 slowdown", base->hosts,
                 oj[0].load * 100);
        if (plot_results(cl, orr, 5, true, labels, 5, title) != 0) failed = 1;
    }
    return failed ? 1 : 0;
}

static int cmd_ablate(struct cli *cl, const struct hsim_opts *base)
{
    if (!cl->what) {
        fprintf(stderr, "homa-sim ablate: --what priorities|overcommit|unsched|sender|load\n");
        return 2;
    }
    const char *vals = cl->values;
    int kind;
    if (strcmp(cl->what, "priorities") == 0) {
        kind = 0;
        if (!vals) vals = "1,2,4,8";
    } else if (strcmp(cl->what, "overcommit") == 0) {
        kind = 1;
        if (!vals) vals = "1,2,3,4,5,6,7,8";
    } else if (strcmp(cl->what, "unsched") == 0) {
        kind = 2;
        if (!vals) vals = "1400,4200,9800,19600,40000";
    } else if (strcmp(cl->what, "sender") == 0) {
        kind = 3;
        vals = "0,1";
    } else if (strcmp(cl->what, "load") == 0) {
        kind = 4;
        if (!vals) vals = "0.5,0.7,0.8,0.9,0.95";
    } else {
        fprintf(stderr, "homa-sim ablate: unknown --what %s\n", cl->what);
        return 2;
    }
    struct hsim_opts jobs[32];
    struct hsim_result res[32];
    static char tags[32][104], labels[32][48];
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", vals);
    /* the grant window stays at its default while unscheduled bytes vary,
     * so the ablation shows what unscheduled bytes alone buy */
    uint32_t rtt_window = hsim_default_window(base);
    for (char *tok = strtok(buf, ","); tok && n < 32; tok = strtok(NULL, ",")) {
        struct hsim_opts *o = &jobs[n];
        *o = *base;
        double v = strtod(tok, NULL);
        switch (kind) {
        case 0:
            o->priorities = (int)v;
            snprintf(labels[n], sizeof(labels[n]), "%d prio", o->priorities);
            break;
        case 1:
            o->overcommit = (int)v;
            snprintf(labels[n], sizeof(labels[n]), "overcommit %d", o->overcommit);
            break;
        case 2:
            o->unsched_bytes = (uint32_t)v;
            if (!o->grant_window) o->grant_window = rtt_window;
            snprintf(labels[n], sizeof(labels[n]), "unsched %u", o->unsched_bytes);
            break;
        case 3:
            o->sender_driven = v != 0;
            snprintf(labels[n], sizeof(labels[n]), "%s",
                     o->sender_driven ? "sender-driven" : "receiver-driven");
            break;
        case 4:
            o->load = v;
            snprintf(labels[n], sizeof(labels[n]), "load %.2f", o->load);
            break;
        }
        if ((kind == 0 && (o->priorities < 1 || o->priorities > 8)) ||
            (kind == 1 && (o->overcommit < 1 || o->overcommit > 64)) ||
            (kind == 4 && (o->load <= 0 || o->load > 2))) {
            fprintf(stderr, "homa-sim ablate: bad value %s\n", tok);
            return 2;
        }
        snprintf(tags[n], sizeof(tags[n]), "[%.50s %.47s]", base->workload, labels[n]);
        o->tag = tags[n];
        o->progress_s = cl->progress_s;
        n++;
    }
    int par = cl->jobs ? cl->jobs : online_cpus();
    if (par > n) par = n;
    for (int i = 0; i < n; i++)
        if (jobs[i].max_rss_mb < 0) jobs[i].max_rss_mb = auto_rss_mb(par);
    int failed = run_many(jobs, res, n, par);
    bool to_stdout = cl->json && strcmp(cl->json, "-") == 0;
    FILE *f = to_stdout ? stderr : stdout;
    fprintf(f, "\nAblation of %s on %s, %d hosts", cl->what, base->workload, base->hosts);
    if (kind != 4) fprintf(f, ", load %.2f", base->load);
    fprintf(f, "\n");
    fprintf(f, "%-18s %8s %8s %8s %8s %9s %7s %8s %9s %9s %8s\n", "variant", "short50", "short99",
            "all50", "all99", "achieved", "drops", "resends", "grants", "backlog/ms", "wall s");
    for (int i = 0; i < n; i++) {
        const struct hsim_result *r = &res[i];
        fprintf(f, "%-18s %8.2f %8.2f %8.2f %8.2f %9.3f %7llu %8llu %9llu %+9.3f %8.1f\n",
                labels[i], r->short_p50, r->short_p99, r->all_p50, r->all_p99, r->achieved_load,
                (unsigned long long)r->drops, (unsigned long long)r->resends,
                (unsigned long long)r->grants, r->backlog_slope, r->wall_s);
    }
    if (cl->json) write_json_many(cl, res, n);
    if (cl->plot) {
        const char *lp[32];
        for (int i = 0; i < n; i++)
            lp[i] = labels[i];
        char title[96];
        snprintf(title, sizeof(title), "%s: %s ablation, p99 slowdown", base->workload, cl->what);
        if (plot_results(cl, res, n, true, lp, n, title) != 0) failed = 1;
    }
    return failed ? 1 : 0;
}

static int cmd_fluid(const struct cli *cl, const struct hsim_opts *o)
{
    struct hsim_fluid_opts fo = {
        .workload = o->workload,
        .data_dir = o->data_dir,
        .truncate_1mb = o->truncate_1mb,
        .load = o->load,
        .hosts = o->hosts,
        .host_bps = o->host_bps,
        .warmup_s = (o->warmup_ms >= 0 ? o->warmup_ms : 0) / 1e3,
        .overcommit = o->overcommit, /* unset (0): no limit, the ideal */
        .seed = o->seed,
    };
    fo.seconds = fo.warmup_s + (o->measure_ms > 0 ? o->measure_ms : 1000) / 1e3;
    int orders[2], n = 0;
    const char *p = cl->order ? cl->order : "srpt";
    do {
        size_t len = strcspn(p, ",");
        int k = -1;
        for (int j = 0; j < 2; j++)
            if (strlen(hsim_fluid_order_name(j)) == len &&
                strncmp(p, hsim_fluid_order_name(j), len) == 0)
                k = j;
        if (k < 0 || n == 2) {
            fprintf(stderr, "homa-sim: --order takes srpt and/or fifo, comma-separated\n");
            return 2;
        }
        orders[n++] = k;
        p += len;
    } while (*p++ == ',');
    bool json_stdout = cl->json && strcmp(cl->json, "-") == 0;
    FILE *jf = NULL;
    if (cl->json && !(jf = open_out(cl->json))) return 1;
    /* --plot without a JSON file: the same JSON also goes to a temporary
     * file for homa-plot (out[1]) */
    char ptmp[4096] = "";
    FILE *out[2] = {jf, NULL};
    if (cl->plot && (!cl->json || json_stdout) &&
        !(out[1] = plotcall_tmpjson(ptmp, sizeof(ptmp)))) {
        fprintf(stderr, "homa-sim: --plot: temporary JSON file: %s\n", strerror(errno));
        if (jf && jf != stdout) fclose(jf);
        return 1;
    }
    for (int k = 0; k < 2; k++)
        if (out[k]) fprintf(out[k], "[\n");
    if (!json_stdout)
        printf("homa-sim fluid: %s, %d hosts at %.0f Gb/s, load %.2f of message bytes, window "
               "%.0f-%.0f ms, seed %llu%s\n",
               fo.workload, fo.hosts, (double)fo.host_bps / 1e9, fo.load, fo.warmup_s * 1e3,
               fo.seconds * 1e3, (unsigned long long)fo.seed,
               fo.overcommit ? ", receivers serve only their active sets" : "");
    for (int i = 0; i < n; i++) {
        fo.order = orders[i];
        struct hsim_fluid_result r;
        char err[256];
        if (hsim_fluid_run(&fo, &r, err, sizeof(err)) != 0) {
            fprintf(stderr, "homa-sim: %s\n", err);
            if (jf && jf != stdout) fclose(jf);
            if (out[1]) {
                fclose(out[1]);
                unlink(ptmp);
            }
            return 1;
        }
        if (!json_stdout) {
            printf("  %s: offered %.3f, achieved %.3f (last quarter %.3f); receivers idle with "
                   "messages waiting %.3f, with none %.3f\n",
                   hsim_fluid_order_name(fo.order), r.offered_load, r.achieved_load, r.load_last_quarter,
                   r.rx_idle_pending, r.rx_idle_empty);
            printf("    backlog %.0f -> %.0f MB (%+.3f MB/ms), %zu messages left; %llu events, "
                   "%.1f s wall\n    achieved by twentieths:",
                   r.backlog_mb[0], r.backlog_mb[19], r.backlog_slope, r.active_end,
                   (unsigned long long)r.events, r.wall_s);
            for (int k = 0; k < 20; k++)
                printf(" %.3f", r.load_intervals[k]);
            printf("\n");
        }
        for (int k = 0; k < 2; k++) {
            if (!out[k]) continue;
            hsim_fluid_write_json(out[k], &fo, &r, !cl->no_wall);
            fprintf(out[k], "%s\n", i + 1 < n ? "," : "");
        }
    }
    for (int k = 0; k < 2; k++)
        if (out[k]) fprintf(out[k], "]\n");
    int rc = 0;
    if (jf && jf != stdout && fclose(jf) != 0) rc = 1;
    if (cl->plot) {
        if (out[1] && fclose(out[1]) != 0) {
            fprintf(stderr, "homa-sim: --plot: %s: %s\n", ptmp, strerror(errno));
            rc = 1;
        } else {
            struct plotcall_args a = {.json = ptmp[0] ? ptmp : cl->json, .out = cl->plot};
            char err[600];
            int prc = plotcall_run(&a, err, sizeof(err));
            if (prc == PLOTCALL_SKIPPED) {
                fprintf(stderr, "homa-sim: --plot: warning: %s; the results are complete\n", err);
            } else if (prc != 0) {
                fprintf(stderr, "homa-sim: --plot: %s\n", err);
                rc = 1;
            }
        }
        if (ptmp[0]) unlink(ptmp);
    }
    return rc;
}

int main(int argc, char **argv)
{
    /* Message buffers of 1 MB and more get their own mappings: a receive
     * buffer then only occupies memory for the bytes that have arrived, and
     * freed buffers go back to the system at once instead of staying in
     * the heap.  Memory, not CPU, limits the longest W4/W5 runs. */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    struct hsim_opts o;
    hsim_opts_default(&o);
    struct cli cl = {0};
    cl.progress_s = 5;
    int cmd = 0; /* 0 run, 1 reproduce, 2 ablate */
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "reproduce") == 0) {
        cmd = 1;
        first = 2;
    } else if (argc > 1 && strcmp(argv[1], "ablate") == 0) {
        cmd = 2;
        first = 2;
    } else if (argc > 1 && strcmp(argv[1], "fluid") == 0) {
        cmd = 3;
        first = 2;
    }
    bool load_given = false;
    for (int i = first; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        char err[256];
        if (strcmp(argv[i], "--load") == 0) load_given = true;
        int r = hsim_parse_opt(&o, argc, argv, &i, err, sizeof(err));
        if (r < 0) {
            fprintf(stderr, "homa-sim: %s\n", err);
            return 2;
        }
        if (r > 0) continue;
        r = parse_cli(&cl, argc, argv, &i);
        if (r < 0) {
            fprintf(stderr, "homa-sim: bad value for %s\n", argv[i]);
            return 2;
        }
        if (r == 0) {
            fprintf(stderr, "homa-sim: unknown argument '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    if (cmd == 1) return cmd_reproduce(&cl, &o, load_given);
    if (cmd == 2) return cmd_ablate(&cl, &o);
    if (cmd == 3) return cmd_fluid(&cl, &o);

    o.progress_s = cl.progress_s;
    if (o.max_rss_mb < 0) o.max_rss_mb = auto_rss_mb(1);
    struct hsim_result r;
    if (run_one(&o, &r) != 0) return 1;
    bool json_stdout = cl.json && strcmp(cl.json, "-") == 0;
    if (!json_stdout) print_result(stdout, &r);
    if (cl.json) {
        FILE *f = open_out(cl.json);
        if (!f) return 1;
        hsim_write_json(f, &r, !cl.no_wall);
        if (f != stdout) fclose(f);
    }
    if (cl.plot) {
        char title[96];
        snprintf(title, sizeof(title), "%s, %d hosts, load %.2f", r.workload, o.hosts, o.load);
        if (plot_results(&cl, &r, 1, false, NULL, 0, title) != 0) return 1;
    }
    return 0;
}
