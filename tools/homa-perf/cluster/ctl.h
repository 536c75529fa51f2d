/* homa-perf cluster: what the files of the controller (`homa-perf cluster`)
 * share among themselves: the options, the cluster being used, the
 * per-protocol results, and the functions that cross files.  The agents
 * (cluster/agent.c and the transports) do not include it: cluster.h is
 * what controller and agents share.  The controller is cluster/main.c (the
 * entry point), cluster/cli.c (options), cluster/hosts.c (the cluster and
 * its namespaces), cluster/run.c (agents and one protocol's run),
 * cluster/collect.c (counters, records, analysis) and cluster/report.c
 * (table, JSON, chart). */
#ifndef HOMA_PERF_CLUSTER_CTL_H
#define HOMA_PERF_CLUSTER_CTL_H

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cluster.h"
#include "stats.h"

#define NPRIO 8
#define MAX_COUNTERS 128

/* ---- Options (cluster/cli.c) ------------------------------------------------ */

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
    int procs;     /* processes (agents) per host */
    int homad;     /* Homa through one homad per host */
    int sample_us; /* incoming-bytes sampling interval, 0 = off */
} copts;

/* Parses argv[2..] into o (defaults first).  Returns 0, or 2 after a
 * message (bad usage); exits 0 after --help. */
int cluster_parse_args(int argc, char **argv, copts *o);

/* ---- The cluster (cluster/hosts.c) --------------------------------------------- */

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

extern cinfo g_cluster;
/* Homa engine settings passed to the agents: the defaults scaled to the
 * link (cluster_homa_scaled_config), then --homa-config. */
extern char g_homa_spec[1100];
extern char g_tmpdir[512];
/* This program, for the agents (resolved at start: a rebuild while a run
 * is going on replaces the file, and /proc/self/exe then says "(deleted)"). */
extern char g_exe[PATH_MAX];
/* homad, for --homad (cluster_find_homad: next to this program, else PATH). */
extern char g_homad[PATH_MAX];
int cluster_find_homad(void);
extern const char *g_keep_dir;
/* The signal that asked to stop, 0 while none (cluster/main.c). */
extern volatile sig_atomic_t g_stop;

/* snprintf for paths and messages whose parts are bounded elsewhere. */
void cluster_fmt(char *buf, size_t len, const char *f, ...) __attribute__((format(printf, 3, 4)));
/* Runs argv and captures its stdout (at most cap-1 bytes).  Returns the
 * exit status or -1. */
int cluster_capture_cmd(char *const argv[], char *buf, size_t cap);
/* Creates the cluster (or reads the one of --cluster) into g_cluster.
 * Returns 0, -1 with err set, or -2 (cannot run here). */
int cluster_setup(const copts *o, char *err, size_t errlen);
/* Tears down the cluster if this process made it. */
void cluster_down(void);
/* Removes g_tmpdir unless --keep named it. */
void cluster_remove_tmpdir(void);
void cluster_cleanup_all(void);
/* The name of host i's network namespace. */
void cluster_host_ns(int i, char *buf, size_t len);

/* ---- Counters, records, analysis (cluster/collect.c) ---------------------------- */

typedef struct qstats {
    uint64_t pkts[CLUSTER_MAX_HOSTS][NPRIO];
    uint64_t drops[CLUSTER_MAX_HOSTS][NPRIO];
    uint64_t nic_pkts[CLUSTER_MAX_HOSTS];
    uint64_t nic_drops[CLUSTER_MAX_HOSTS];
    /* From each host's /proc/net/snmp, summed over hosts. */
    uint64_t udp_in, udp_rcvbuf_errors, udp_sndbuf_errors, udp_in_errors;
    uint64_t tcp_out_segs, tcp_retrans_segs;
} qstats;

typedef struct cutoffs_seen {
    char from[16];
    uint32_t cutoffs[NPRIO];
    unsigned version;
    uint64_t packets;
} cutoffs_seen;

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
    /* The hosts' granted-but-unreceived bytes, sampled every sample_us over
     * the measured window (all hosts' samples pooled). */
    uint64_t inc_samples, inc_over; /* samples; of them above inc_limit */
    uint64_t inc_limit;             /* the engine's max_incoming */
    double inc_mean;
    uint64_t inc_p50, inc_p99, inc_max;
    uint64_t inc_host_max[CLUSTER_MAX_HOSTS];
} presult;

/* Switch queue counters (tc) and the hosts' /proc/net/snmp, now. */
void cluster_read_qstats(qstats *q, int hosts);
/* after -= before. */
void cluster_qstats_diff(qstats *after, const qstats *before, int hosts);
/* Whether `name` is an executable in PATH. */
int cluster_tool_exists(const char *name);
/* tcpdump of CUTOFFS packets in host 0 into file; its pid or -1. */
pid_t cluster_start_capture(const char *file);
void cluster_stop_capture(pid_t pid);
/* Reads a pcap of CUTOFFS packets; keeps the last announcement per sender. */
int cluster_parse_cutoffs(const char *file, cutoffs_seen *out, int max);
/* Adds an agent's "name=value ..." counter list to p (gauges: maximum). */
void cluster_counters_add(presult *p, const char *list);
/* Appends the records of one agent's file to p->recs.  0 or -1. */
int cluster_read_records(const char *path, presult *p);
/* The hosts' granted-but-unreceived bytes from the agents' sample files
 * (paths[i] belongs to host host_of[i]; a host's value at an instant is the
 * sum of its files'), over the measured window: p->inc_*.  With csv_path,
 * the whole series, a column per host.  0, or -1 (a file unreadable or the
 * files disagree). */
int cluster_incoming(const copts *o, char paths[][PATH_MAX], const int *host_of, int nfiles,
                     uint64_t limit, const char *csv_path, presult *p);
/* Fills p's histograms and rates from its records: slowdowns against own
 * (and, for *_common, common) best cases; short means <= short_max bytes. */
void cluster_analyse(const copts *o, const wlgen *g, presult *p, const perf_result *own,
                     const perf_result *common, uint32_t short_max);

/* ---- Running (cluster/run.c) ------------------------------------------------------ */

/* Fills g_homa_spec from the cluster's link and --homa-config. */
void cluster_homa_scaled_config(const copts *o);
/* Runs one protocol on the cluster into p.  0, or -1 with p->fatal set. */
int cluster_run_protocol(const copts *o, int proto, presult *p);

/* ---- Output (cluster/report.c) ------------------------------------------------- */

/* Prints the table and the summary, writes --json and --plot.  res[hi] and
 * res[ti] are Homa's and TCP's results (index -1: not run).  Returns 1 if
 * an output could not be written, else 0. */
int cluster_report(const copts o, const wlgen g, const presult *res, int hi, int ti,
                   uint32_t short_max);

#endif
