/* homa-perf cluster: the report.  Prints the Homa-vs-TCP table (short
 * messages, size buckets, CPU, drops, queue backlogs, Homa's cutoffs) and
 * the one-line summary, writes the results as JSON (--json: settings, one
 * object per protocol, the ratios) and draws the slowdown chart (--plot,
 * through cluster_plot()).  All of it from the analysed presults; nothing
 * here touches the cluster. */
#include "ctl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "json.h"

static uint64_t counter_get(const presult *p, const char *name)
{
    for (int k = 0; k < p->ncounters; k++)
        if (strcmp(p->counters[k].name, name) == 0) return p->counters[k].value;
    return 0;
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
        if (p->inc_samples) {
            json_obj_begin(j, "host_incoming_bytes");
            json_str(j, "method",
                     o->homad ? "the host's homad engine's incoming_bytes, sampled by one "
                                "process per host"
                              : "each process's engine's incoming_bytes, sampled on a common "
                                "grid and summed per host");
            json_i64(j, "interval_us", o->sample_us);
            json_u64(j, "samples", p->inc_samples);
            json_u64(j, "max_incoming", p->inc_limit);
            json_num(j, "mean", p->inc_mean);
            json_u64(j, "p50", p->inc_p50);
            json_u64(j, "p99", p->inc_p99);
            json_u64(j, "max", p->inc_max);
            json_num(j, "fraction_above_max_incoming",
                     (double)p->inc_over / (double)p->inc_samples);
            json_arr_begin(j, "per_host_max");
            for (int h = 0; h < o->hosts; h++)
                json_u64(j, NULL, p->inc_host_max[h]);
            json_arr_end(j);
            json_obj_end(j);
        }
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
    if (o->procs > 1 || o->homad)
        printf("%d processes per host, each a server and a client; Homa %s\n", o->procs,
               o->homad ? "through one homad per host (one engine for the host)"
                        : "embedded (one engine per process)");
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
    if (h->ran && h->inc_samples)
        printf("Homa granted-but-unreceived bytes per host (every %d us, %s): mean %.0f, p50 "
               "%llu, p99 %llu, max %llu; above max_incoming (%llu) %.1f%% of the time\n",
               o->sample_us, o->homad ? "one homad engine per host" : "sum of the host's engines",
               h->inc_mean, (unsigned long long)h->inc_p50, (unsigned long long)h->inc_p99,
               (unsigned long long)h->inc_max, (unsigned long long)h->inc_limit,
               100.0 * (double)h->inc_over / (double)h->inc_samples);
    if (h->ran) print_cutoffs(h);
}

/* o and g by value: small, read only, and the code below reads them as
 * cluster_main(), where it was written, did. */
int cluster_report(const copts o, const wlgen g, const presult *res, int hi, int ti,
                   uint32_t short_max)
{
    char err[300];
    int status = 0;

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
    const char *json_path = o.json_path;
    if (o.plot_path && !json_path && cluster_plot_tmpjson(plot_json, sizeof(plot_json)) == 0)
        json_path = plot_json;
    if (json_path) {
        FILE *f = fopen(json_path, "w");
        if (!f) {
            fprintf(stderr, "homa-perf cluster: cannot write %s: %s\n", json_path, strerror(errno));
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
            json_i64(&j, "client_threads_per_host", o.procs);
            json_i64(&j, "processes_per_host", o.procs);
            json_bool(&j, "homad", o.homad);
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
            if (!plot_json[0]) printf("results: %s\n", json_path);
        }
    }
    if (o.plot_path) {
        char title[160];
        snprintf(title, sizeof(title), "%s at %.0f%% load, %d hosts, %.3g Gbit/s: slowdown by size",
                 homa_workload_name(g.w), o.load * 100, o.hosts, (double)g_cluster.rate_bps / 1e9);
        int prc = cluster_plot(json_path, o.plot_path, title, err, sizeof(err));
        if (prc < 0) {
            fprintf(stderr, "homa-perf cluster: %s\n", err);
            status = 1;
        } else if (prc == CLUSTER_PLOT_SKIPPED) {
            /* the plot is optional: the measurement stands */
            fflush(stdout);
            fprintf(stderr,
                    "homa-perf cluster: warning: plot %s skipped: %s; the results are "
                    "complete%s%s\n",
                    o.plot_path, err, plot_json[0] ? "" : ", JSON in ",
                    plot_json[0] ? "" : json_path);
        } else {
            printf("plot: %s\n", o.plot_path);
        }
        if (plot_json[0]) unlink(plot_json);
    }
    return status;
}
