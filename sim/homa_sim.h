/* homa-sim: datacenter-scale simulation with the real engine in every host.
 *
 * The network is tests/vnet/lib/vnet.c (the engines' test network: one
 * event core for both) laid out as homa-sim's leaf-spine fabric
 * (fabric.c), each host a tests/vnet/lib/vhost.c running the libhoma
 * engine.  This header is the simulator's library interface, used by the
 * homa-sim command (homa_sim_main.c) and by tests/sim.
 *
 * Measurement model (docs/homa-sim.md):
 *  - Each host starts RPCs at Poisson times to uniformly random other hosts.
 *    By default both the request and the response sizes are drawn from the
 *    workload, so every byte on the wire belongs to a workload message and
 *    each message is measured one-way: a request completes when the server
 *    application receives all of it, a response when the client does.  With
 *    a fixed reply size (reply_bytes >= 0) only requests are measured.
 *  - Slowdown = completion time / ideal time, where the ideal is computed
 *    exactly for the message's path (same rack or across a spine) on an
 *    idle network: back-to-back packets of max_payload bytes plus the
 *    56-byte DATA header plus overhead_bytes, store-and-forward at every
 *    hop, link and switch delays, plus the receive software delay.
 *  - Load = offered wire bytes (payload, headers and per-packet overhead of
 *    requests and responses) / host link capacity, per host uplink.  The
 *    paper's simulator also counts the GRANT frames (one per scheduled
 *    packet); load_counts_grants offers load that way, and the results give
 *    both measures. */
#ifndef HOMA_SIM_H
#define HOMA_SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <homa/engine.h>
#include <homa/workload.h>

#include "vnet.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HSIM_DATA_HDR 56  /* bytes of DATA header per packet */
#define HSIM_GRANT_HDR 33 /* bytes of a GRANT packet (no payload) */
#define HSIM_MAX_BUCKETS 32
#define HSIM_SERVER_PORT 100
#define HSIM_CLIENT_PORT 200

/* Every parameter of a run.  hsim_opts_default() gives the paper's
 * configuration; fields documented "0 = auto" are derived by
 * hsim_opts_resolve(). */
struct hsim_opts {
    /* workload */
    const char *workload; /* "w1".."w5" or a CDF path */
    const char *data_dir; /* where to look for workloads (NULL: defaults) */
    bool truncate_1mb;    /* cap sizes at 1,000,000 B like the Linux benchmarks */
    double load;          /* offered load, fraction of host link capacity */
    int64_t reply_bytes;  /* < 0: responses sampled from the workload too */

    /* topology (leaf-spine) */
    int hosts;          /* total hosts = racks * hosts_per_rack */
    int racks;          /* 0 = auto from hosts and hosts_per_rack */
    int hosts_per_rack; /* 0 = 16 (or all hosts if fewer) */
    int spines;
    uint64_t host_bps, uplink_bps;
    uint64_t host_link_delay_ns, uplink_delay_ns, switch_delay_ns;
    uint32_t overhead_bytes;    /* per-packet wire overhead (Ethernet + IP) */
    uint64_t port_buffer_bytes; /* per switch egress port; 0 = unlimited */
    uint64_t rx_delay_ns;       /* host software delay on receive */
    double loss;                /* random packet loss at host egress */

    /* protocol (applied over homa_config_default) */
    uint32_t max_payload;
    uint32_t unsched_bytes; /* 0 = rtt bytes rounded up to whole packets */
    uint32_t grant_window;  /* 0 = one RTT plus the engine's grant batch */
    int overcommit;         /* 0 = the paper's value for the workload */
    int priorities;         /* 1..8 */
    int unsched_levels;     /* 0 = from the workload's unscheduled byte share */
    bool explicit_cutoffs;  /* use cutoffs[] as given instead of computing them */
    /* Receivers start from the cutoffs computed from the workload (or given)
     * and then adapt them to the lengths they see (the engine's
     * adaptive_cutoffs, on by default); fixed_cutoffs keeps them as set. */
    bool fixed_cutoffs;
    uint32_t cutoffs[8];
    bool sender_driven;           /* no grants: every message entirely unscheduled */
    bool queue_stats;             /* sample the schedulers' choices (slower) */
    /* `load` counts the expected GRANT frames too, as the paper's simulator
     * does, so the DATA it offers is a few per cent lower */
    bool load_counts_grants;
    uint32_t max_incoming;        /* 0 = engine default */
    uint32_t grant_fifo_permille; /* UINT32_MAX = engine default */
    uint64_t max_rx_bytes;        /* per host; 0 = 16 GiB (allocation is lazy) */
    uint64_t link_bps_pacer;      /* engine pacer rate; 0 = off (the NIC pulls) */
    /* engine timers; 0 (tick) or UINT32_MAX (the others) = engine default */
    uint64_t tick_ns;
    uint32_t resend_ticks, resend_interval, gap_resend_ticks, timeout_ticks;

    /* run */
    uint64_t seed;
    double warmup_ms;  /* < 0 = workload default */
    double measure_ms; /* messages started in [warmup, warmup+measure) count */
    double drain_ms;   /* max extra time for them to finish; < 0 = default */
    int buckets;       /* size buckets: equal-count quantiles of the workload */

    double max_rss_mb; /* end the run early above this resident size (MB); <= 0 = no limit */

    /* reporting (not part of the results) */
    const char *tag;    /* prefix of progress lines */
    double progress_s;  /* wall seconds between progress lines; 0 = off */
    FILE *progress_out; /* default stderr */
};

/* One size bucket: messages with min_bytes <= length <= max_bytes. */
struct hsim_bucket {
    uint32_t min_bytes, max_bytes;
    uint64_t count;
    double p50, p99, mean; /* slowdown */
};

/* A failed RPC (the first HSIM_MAX_FAILURES of a run are kept). */
#define HSIM_MAX_FAILURES 16
struct hsim_failure {
    double start_ms, failed_ms; /* RPC start, failure report */
    uint32_t req_len, resp_len;
    int src, dst;
    bool in_response; /* the request had arrived; the response was lost */
    int error;        /* HOMA_ERR_* */
};

struct hsim_result {
    /* resolved configuration: the run's options with every "auto" filled in
     * (pointer fields are only meaningful in the process that ran it) */
    struct hsim_opts opts;
    char workload[64];
    uint32_t short_cutoff; /* short = length <= this (10th percentile) */
    double mean_msg_bytes;
    double rtt_ns;      /* ideal round trip: full packet out, grant back */
    uint32_t rtt_bytes; /* payload bytes the sender can emit in rtt_ns */
    homa_config engine; /* as given to every host */
    int unsched_levels;
    double rpc_rate; /* RPC starts per second per host */

    /* messages (measured = started inside the measurement window) */
    uint64_t measured, completed, incomplete, failed;
    uint64_t send_errors; /* RPCs the client engine refused to start (any time) */
    double short_p50, short_p99, short_mean; /* slowdown, short messages */
    double short_p50_us, short_p99_us;
    double all_p50, all_p99, all_mean;
    uint64_t short_count;
    int nbuckets;
    struct hsim_bucket bucket[HSIM_MAX_BUCKETS];

    /* network, over the measurement window */
    double offered_load;  /* wire bytes of messages started / capacity */
    double achieved_load; /* DATA wire bytes received / capacity */
    /* the same with GRANT frames counted (the paper's measure): offered
     * uses the expected GRANTs of the messages started, achieved the GRANTs
     * that reached hosts */
    double offered_load_grants, achieved_load_grants;
    double downlink_util; /* busy time of ToR->host ports (all packets) */
    double uplink_util;   /* busy time of ToR->spine ports */
    /* from the window start to the end of the run */
    uint64_t drops;          /* switch buffer overflows */
    uint64_t loss_drops;     /* random loss */
    uint64_t resends;        /* RESEND packets sent */
    uint64_t retransmits;    /* DATA packets sent because of a RESEND */
    uint64_t grants;         /* GRANT packets sent */
    uint64_t timeouts;       /* client RPCs that failed */
    uint64_t engine_drops;   /* packets the engines refused (no memory...) */
    uint64_t cutoff_updates; /* adaptive cutoff changes, all receivers */
    uint64_t max_port_bytes; /* peak occupancy of any switch port */
    uint64_t max_downlink_bytes;

    /* backlog = bytes of started but unfinished messages, all hosts */
    int nbacklog;
    double backlog_mb[20]; /* at 20 evenly spaced times in the window */
    double backlog_slope;  /* least-squares MB per ms over the window */
    double backlog_end_mb;
    /* achieved load (as achieved_load) in each of the same 20 intervals: shows
     * whether a run has settled, which one window-wide figure cannot */
    double load_intervals[20];
    double load_last_quarter; /* over the last 5 intervals */

    int nfailures;
    struct hsim_failure failures[HSIM_MAX_FAILURES];

    /* run */
    bool stopped_early; /* max_rss_mb reached: the window was cut short */

    /* --queue-stats: every host sampled every 100 us of the window; the
     * fractions are of host-samples */
    bool has_queue_stats;
    uint64_t qs_samples;
    double qs_rx_idle_pending; /* downlink idle, messages waiting for grants */
    double qs_rx_idle_empty;   /* downlink idle, nothing to receive */
    double qs_tx_idle_unsent;  /* NIC idle, unsent messages but none granted */
    double qs_tx_idle_empty;   /* NIC idle, nothing to send */
    double qs_both_idle;       /* NIC idle with an unsent message for an idle downlink */
    double qs_rx_grantable;    /* mean messages waiting for grants per host */
    double qs_rx_peers;        /* mean distinct senders of those */
    double qs_tx_msgs;         /* mean messages with unsent bytes per host */
    double sim_s;       /* simulated time of the whole run */
    uint64_t events;    /* event-core events */
    uint64_t packets;   /* packets sent by hosts */
    double wall_s;      /* wall time of the run (not deterministic) */
    double events_per_s, packets_per_s;
    double peak_rss_mb;
};

void hsim_opts_default(struct hsim_opts *o);
/* Parses one command-line option (argv[*i], value in argv[*i + 1]) into o.
 * Returns 1 if consumed (advancing *i), 0 if unknown, -1 on a bad value
 * (message in err). */
int hsim_parse_opt(struct hsim_opts *o, int argc, char **argv, int *i, char *err, size_t errlen);
/* Help text for every option. */
void hsim_print_options(FILE *f);

/* Unscheduled bytes hsim_create() picks when unsched_bytes is 0: the
 * payload a sender emits in one round trip (hsim_rtt_ns across a spine, or
 * within the rack for a one-rack topology), rounded up to whole packets. */
uint32_t hsim_default_unsched(const struct hsim_opts *o);

/* Grant window hsim_create() picks when grant_window is 0: the smallest
 * whole-packet window that keeps one flow at line rate given that the
 * engine grants in batches of a quarter window (12,600 B by default). */
uint32_t hsim_default_window(const struct hsim_opts *o);

/* The overcommit the SIGCOMM 2018 simulations used for W1..W5 (1/3/4/7/7),
 * 8 for any other workload. */
int hsim_paper_overcommit(const char *workload);

/* homa-sim's default overcommit: the paper's, except 8 for W3 and 16 for W5,
 * which need more to sustain 90 % load (docs/homa-sim.md, "What holds W5
 * back"). */
int hsim_default_overcommit(const char *workload);

/* ---- model helpers (exposed for tests; the ideal times are in fabric.c) ---- */

struct hsim_net_params {
    uint64_t host_bps, uplink_bps;
    uint64_t host_link_delay_ns, uplink_delay_ns, switch_delay_ns;
    uint32_t overhead_bytes, max_payload;
    uint64_t rx_delay_ns;
    int spines; /* >= 2: a message's packets may take different spines */
};

/* Packets of a message of len bytes (a 0-byte message still takes one). */
uint32_t hsim_packets(uint32_t len, uint32_t max_payload);
/* Wire bytes of a message: payload + per packet (DATA header + overhead). */
double hsim_wire_bytes(uint32_t len, uint32_t max_payload, uint32_t overhead);
/* Wire bytes of the GRANTs a receiver is expected to send for a message:
 * one per grant step (a packet, or a quarter window for windows of 16
 * packets and more, as the engine batches) over the bytes beyond
 * unsched_bytes.  No GRANTs when grant_window is 0 (sender-driven). */
double hsim_grant_wire_bytes(uint32_t len, uint32_t unsched_bytes, uint32_t grant_window,
                             uint32_t max_payload, uint32_t overhead);
/* Ideal one-way time (ns) of a message on an idle network: the last byte
 * reaches the receiver's engine.  cross_rack: through a spine.  With two or
 * more spines the best case sprays consecutive packets over different
 * spines, so a short last packet can overtake the full one before it (exact
 * when uplinks are at least as fast as host links; a run that happens to
 * put both on one spine is up to one short-packet time slower). */
double hsim_ideal_ns(const struct hsim_net_params *p, uint32_t len, bool cross_rack);
/* Round trip for rtt_bytes: a full DATA packet out and a GRANT back. */
double hsim_rtt_ns(const struct hsim_net_params *p, bool cross_rack);

/* Unscheduled priority cutoffs from the workload: `levels` unscheduled
 * levels at the top of `prios`, splitting the unscheduled bytes evenly
 * (messages above a cutoff use lower levels).  levels == 0 chooses the
 * count from the share of unscheduled bytes.  Fills cfg->num_priorities
 * and cfg->unsched_cutoffs; returns the number of unscheduled levels. */
int hsim_compute_cutoffs(const homa_workload *w, uint32_t max_size, uint32_t unsched_bytes,
                         int prios, int levels, homa_config *cfg);

/* Percentile of a sorted array (nearest rank). */
double hsim_percentile(const float *sorted, uint64_t n, double p);

/* ---- running ---- */

struct hsim;

/* Builds the network and the hosts.  Returns NULL with a message in err. */
struct hsim *hsim_create(const struct hsim_opts *o, char *err, size_t errlen);
void hsim_destroy(struct hsim *s);
struct vnet *hsim_net(struct hsim *s);
/* The engine of host i (for tests). */
homa_engine *hsim_engine(struct hsim *s, int host);
const struct hsim_net_params *hsim_params(const struct hsim *s);

/* Scripted traffic (tests): an RPC from src to dst at time t (ns) with the
 * given request and response sizes; resp_len < 0 uses the run's reply rule.
 * Every scripted message is measured.  Returns the RPC's index. */
int hsim_add_rpc(struct hsim *s, uint64_t t, int src, int dst, uint32_t req_len, int64_t resp_len);
/* Completion time (ns after its start) of scripted RPC idx's request or
 * response; 0 if it has not completed. */
uint64_t hsim_rpc_latency(const struct hsim *s, int idx, bool response);

/* Runs: Poisson traffic if the workload is set and load > 0, plus any
 * scripted RPCs, for warmup + measure (+ drain until every measured
 * message is done or drain_ms passes), then fills *r. */
int hsim_run(struct hsim *s, struct hsim_result *r);

/* Writes the result as JSON.  with_wall: include the wall-clock fields
 * (wall time, events/s, RSS), which differ between identical runs. */
void hsim_write_json(FILE *f, const struct hsim_result *r, bool with_wall);

/* ---- homa-sim fluid (homa_sim_fluid.c) ----
 * Messages as fluid: each host sends one message and receives one at a
 * time at the full link rate, matched greedily in `order` at every arrival
 * and completion (SRPT is Homa's order on both sides).  No packets, headers
 * or round trips: the limit that the matching alone sets.  Load counts
 * message bytes only. */
enum { HSIM_FLUID_SRPT, HSIM_FLUID_FIFO };

struct hsim_fluid_msg {
    double t; /* arrival, s (the script must be sorted by t) */
    int src, dst;
    uint32_t bytes;
};

struct hsim_fluid_opts {
    const char *workload, *data_dir; /* as in hsim_opts */
    bool truncate_1mb;
    double load; /* fraction of host link rate, message bytes */
    int hosts;
    uint64_t host_bps;
    double seconds;  /* simulated, including the warm-up; at most an hour */
    double warmup_s; /* before the measured window */
    int order;       /* HSIM_FLUID_* */
    int overcommit;  /* 0: any waiting message may be served; K: only each
                      * receiver's K first, one per sender (Homa's active set) */
    uint64_t seed;
    /* tests: these messages instead of Poisson arrivals; finish[i] gets
     * the completion time of script[i] (left alone if it does not finish) */
    const struct hsim_fluid_msg *script;
    int nscript;
    double *finish;
};

struct hsim_fluid_result {
    double mean_msg_bytes;
    double offered_load, achieved_load; /* over the window */
    double load_intervals[20];          /* achieved, per twentieth of the window */
    double load_last_quarter;
    double backlog_mb[20]; /* bytes left of arrived messages, at each interval's end */
    double backlog_slope;  /* MB per ms, least squares */
    double rx_idle_pending; /* receivers idle while messages for them wait */
    double rx_idle_empty;   /* receivers idle with nothing to receive */
    uint64_t arrivals, completed, events;
    size_t max_active, active_end;
    double wall_s;
};

/* Runs the model; 0, or -1 with a message in err. */
int hsim_fluid_run(const struct hsim_fluid_opts *o, struct hsim_fluid_result *r, char *err,
                   size_t errlen);
/* "srpt" or "fifo" ("?" for anything else). */
const char *hsim_fluid_order_name(int order);
/* One run as a JSON object (no trailing newline); with_wall adds the wall
 * time, the only field that differs between runs with the same seed. */
void hsim_fluid_write_json(FILE *f, const struct hsim_fluid_opts *fo,
                           const struct hsim_fluid_result *r, bool with_wall);

#ifdef __cplusplus
}
#endif
#endif
