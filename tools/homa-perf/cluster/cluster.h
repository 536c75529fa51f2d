/* homa-perf cluster: the Homa-vs-TCP experiment on an emulated cluster.
 *
 * `homa-perf cluster` (cluster/main.c) creates (or uses) a cluster of
 * network namespaces made by scripts/homa-cluster, starts one
 * `homa-perf cluster-agent` (cluster/agent.c) inside every host namespace
 * for each protocol in turn, tells them when to start, shows progress,
 * merges the per-message records they write and reports.  Every agent is
 * the server and the client of its host: an echo server, and a client
 * thread sending RPCs to every other host, open loop at scheduled times.
 *
 * The message sequence of every host (arrival times, lengths,
 * destinations) comes from cluster_sched_make(), a function of the seed
 * only, so both protocols carry exactly the same messages.
 *
 * See docs/cluster.md. */
#ifndef HOMA_PERF_CLUSTER_H
#define HOMA_PERF_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <homa/homa.h>

#include "perf.h"
#include "wlgen.h"

#define CLUSTER_MAX_HOSTS 64
/* Agents (processes) in all: hosts x processes per host. */
#define CLUSTER_MAX_AGENTS 64
/* Exit status when the cluster cannot run here (not root, no namespaces). */
#define CLUSTER_EXIT_UNSUPPORTED 77

/* One scheduled RPC of a host: sent at t_ns after the common start time to
 * host dst, request (and echoed response) of `size` bytes. */
typedef struct cluster_msg {
    uint64_t t_ns;
    uint32_t size;
    uint16_t dst;
    uint16_t pad;
} cluster_msg;

/* The schedule of agent `agent` of `agents` (procs per host; agent a is
 * process a % procs of host a / procs): Poisson arrivals whose request
 * payload averages req_bps bit/s, lengths from the workload, destinations
 * (agent numbers) uniform over the agents of the other hosts, until end_ns.
 * With procs 1 an agent is a host.  *out is malloc'ed.  Returns the count or
 * -1 (out of memory). */
long cluster_sched_make(const wlgen *g, uint64_t seed, int agent, int procs, int agents,
                        double req_bps, uint64_t end_ns, cluster_msg **out);

/* Outcome of one RPC in a record. */
enum cluster_status {
    CREC_OK = 0,
    CREC_FAILED = 1,     /* the transport reported an error (err) */
    CREC_MISMATCH = 2,   /* wrong length or (with --verify) wrong bytes */
    CREC_UNFINISHED = 3, /* no response before the drain time ran out */
    CREC_REFUSED = 4,    /* the send was refused (err); counted as failed */
};

/* Per-message record an agent writes (binary, native byte order, after a
 * 16-byte header "HCREC001" + uint64 count).  Times are relative to the
 * common start. */
typedef struct cluster_rec {
    uint64_t sched_ns; /* scheduled arrival */
    uint64_t send_ns;  /* just before the send call */
    uint64_t done_ns;  /* return of the poll that delivered the response; 0 if none */
    uint32_t size;
    uint16_t dst;
    uint8_t status; /* enum cluster_status */
    uint8_t pad;
    int32_t err; /* transport error for CREC_FAILED / CREC_REFUSED */
    uint32_t pad2;
} cluster_rec;

#define CLUSTER_REC_MAGIC "HCREC001"
/* An agent's incoming-bytes samples (--sample-out): "HCINC001", uint64
 * count, uint64 interval in ns, then count uint64 values (UINT64_MAX where
 * no sample was taken), sample k at k x interval after the start. */
#define CLUSTER_INC_MAGIC "HCINC001"

/* Homa engine tuning given on the command line (--homa-config k=v,...):
 * applied on top of homa_config_default() in every agent. */
typedef struct cluster_homa_tuning {
    char spec[512]; /* as given, re-passed to the agents */
} cluster_homa_tuning;

/* Applies "key=value,key=value" to cfg.  Keys: unsched_bytes, grant_window,
 * max_incoming, max_overcommit, grant_fifo_permille, num_priorities,
 * adaptive_cutoffs, cutoff_update_msgs, resend_ticks, resend_interval,
 * timeout_ticks, tick_us, max_nic_queue_ns, pacer_bypass_bytes,
 * gap_resend_ticks.  Returns 0 or -1 with err set. */
int cluster_homa_apply(const char *spec, homa_config *cfg, char *err, size_t errlen);

/* The client side of an agent: one object reaches every host. */
typedef struct cluster_client cluster_client;
typedef struct cluster_client_ops {
    /* Prepares for sending (TCP: connects to every peer, once).  0 or a
     * negative error (err set). */
    int (*start)(cluster_client *c, char *err, size_t errlen);
    /* Starts an RPC to host dst carrying buf (copied or sent before
     * returning).  0 or a negative error. */
    int (*send)(cluster_client *c, int dst, uint64_t cookie, const void *buf, size_t len);
    /* As pt_client_ops.poll: completions (data valid until the next poll),
     * 0 at the CLOCK_MONOTONIC deadline, or a negative fatal error.  A
     * client made to serve answers the requests that arrive meanwhile. */
    int (*poll)(cluster_client *c, uint64_t deadline, pt_completion *out, int max);
    void (*destroy)(cluster_client *c);
} cluster_client_ops;

struct cluster_client {
    const cluster_client_ops *ops;
};

/* TCP: `conns` connections to every host but `self` (cluster/tcp.c); with
 * listen_port != 0 it also serves (echo) on that port. */
int cluster_tcp_client(const perf_addr *peers, int npeers, int self, int conns, uint64_t spin_ns,
                       uint16_t listen_port, cluster_client **out, char *err, size_t errlen);

/* Homa transport of the agents: one runtime and one socket per host.  The
 * socket (the host's well-known port) carries the echo server's requests
 * and replies and the client's requests and responses, so one engine does
 * SRPT, grants and pacing for everything the host sends and receives, as
 * the kernel module does for a machine. */
typedef struct cluster_homa_rt_opts {
    uint32_t mtu;      /* link MTU; max_payload = mtu - 20 - 8 - 56 (IPv4) */
    uint64_t link_bps; /* pacer */
    int busy_poll_us;  /* < 0: runtime default */
    int gso;           /* 0: HOMA_RT_NO_GSO */
    uint32_t max_message;
    const char *tuning; /* cluster_homa_apply() spec, may be NULL */
} cluster_homa_rt_opts;

int cluster_homa_runtime(const cluster_homa_rt_opts *o, homa_runtime **out, char *err,
                         size_t errlen);
/* Echo server threads on sock (the socket stays the caller's). */
int cluster_homa_server(homa_socket *sock, int threads, pt_server **out, char *err, size_t errlen);
/* Client sending from sock to every host of peers[]; with serve != 0 its
 * polls also answer the requests arriving on sock (echo). */
int cluster_homa_client(homa_socket *sock, const perf_addr *peers, int npeers, int serve,
                        cluster_client **out, char *err, size_t errlen);

/* Queue monitor (cluster/qmon.c): samples the backlog of every switch
 * port's priority queues and of every host NIC every interval_ns. */
typedef struct cluster_qmon cluster_qmon;
typedef struct cluster_qstats {
    uint64_t samples;
    double interval_us;
    /* Backlog in packets of one port's queue of each priority level, over
     * all ports and samples: mean, 99th percentile, maximum. */
    double prio_mean[8];
    uint32_t prio_p99[8], prio_max[8];
    /* Backlog in packets of one host NIC (all its queues). */
    double nic_mean;
    uint32_t nic_p99, nic_max;
} cluster_qstats;

/* NULL if the namespaces cannot be reached. */
cluster_qmon *cluster_qmon_start(const char *cluster, int hosts, uint64_t interval_ns);
void cluster_qmon_stop(cluster_qmon *q);
void cluster_qmon_result(const cluster_qmon *q, cluster_qstats *out);
void cluster_qmon_free(cluster_qmon *q);

/* Entry points (argv[1] is "cluster" / "cluster-agent"). */
int cluster_main(int argc, char **argv);
int cluster_agent_main(int argc, char **argv);

/* --plot (cluster/plot.c): homa-plot draws slowdown against message length
 * from the JSON at json_path into out_path.  0; CLUSTER_PLOT_SKIPPED with
 * what is missing in err when python3 or matplotlib is (the plot is optional:
 * a warning, not a failure); or -1 with a message in err.
 * cluster_plot_tmpjson makes an empty temporary file for the JSON when only
 * --plot was given (0, or -1). */
#define CLUSTER_PLOT_SKIPPED 1
int cluster_plot(const char *json_path, const char *out_path, const char *title, char *err,
                 size_t errlen);
int cluster_plot_tmpjson(char *buf, size_t len);

#endif
