/* homa-perf soak: a long correctness run of several client and server
 * processes under a changing fault schedule (docs/homa-perf.md, "Soak").
 *
 * The orchestrator (soak_main) forks and execs itself (/proc/self/exe
 * soak-worker ...) as every worker; it never creates a runtime, so forking
 * it is safe.  Each worker gets two pipes at fixed descriptors: commands
 * from the orchestrator (SOAK_CTL_FD) and reports to it (SOAK_REP_FD), one
 * text line each.
 *
 *   orchestrator -> worker:  "F <phase> <client spec> <server spec>"  a phase
 *                            begins (spec "-" = no faults); the worker
 *                            reports the phase that ended, then applies
 *                            its role's spec with homa_runtime_set_faults
 *                            "Q"  end: clients drain, everyone reports, exits
 *   worker -> orchestrator:  "P <port>"  server listening; "READY" client up
 *                            "R <phase> k=v ..."  counters of a phase
 *                            "D <client> <seq> <why>"  duplicate delivery
 *                            "V <text>"  verification error
 *                            "E <text>"  fatal error (the worker exits)
 * Servers write D and V at once, so they survive a SIGKILL. */
#ifndef HOMA_PERF_SOAK_H
#define HOMA_PERF_SOAK_H

#include <stddef.h>
#include <stdint.h>

#define SOAK_CTL_FD 100
#define SOAK_REP_FD 101
#define SOAK_MAX_PROCS 64
#define SOAK_MAX_INFLIGHT 4096
#define SOAK_DEFAULT_MAX_SIZE 10000000u
#define SOAK_SPEC_LEN 256
#define SOAK_TIMEOUT_TICKS 1000 /* default RPC timeout: 1 s at the 1 ms tick */

/* Request header (little-endian), at the start of every request. */
#define SOAK_REQ_MAGIC 0x4b414f53u /* "SOAK" */
#define SOAK_REQ_HDR 32
/* Response header: magic, client, seq, length. */
#define SOAK_RESP_MAGIC 0x50534552u /* "RESP" */
#define SOAK_RESP_HDR 20

/* Options shared by the orchestrator and its workers (workers get the
 * orchestrator's command line). */
typedef struct soak_opts {
    int clients, servers;
    double seconds;
    double phase_seconds;
    uint64_t seed;
    const char *workload; /* w1..w5 or "mixed" */
    uint32_t max_size;
    int in_flight;
    double gbps;        /* 0 = closed loop only */
    const char *faults; /* fixed spec for every phase, NULL = the schedule */
    int json;
    int server_threads;
    int busy_poll_us;
    double hang_seconds; /* an RPC outstanding this long is a hang */
    const char *homa_config;
    const char *data_dir;
    int verbose;
    /* Worker only. */
    int worker_role; /* 0 = none (orchestrator), 1 = client, 2 = server */
    int index;
    int port;
    const char *ports; /* client: comma-separated server ports */
    int start_phase;   /* server (re)started mid-run: the phase and its spec */
    const char *start_spec;
} soak_opts;

enum { SOAK_ROLE_NONE = 0, SOAK_ROLE_CLIENT = 1, SOAK_ROLE_SERVER = 2 };

/* One phase of the fault schedule. */
typedef struct soak_phase {
    char name[24];
    char client_spec[SOAK_SPEC_LEN]; /* "" = none */
    char server_spec[SOAK_SPEC_LEN];
    int restart;    /* SIGKILL a server and restart it on its port mid-phase */
    int disruptive; /* failures (timeout, unreachable) allowed here and in the next phase */
} soak_phase;

/* Builds the schedule: phase 0 is a clean warm-up, then (no fixed spec) a
 * seeded shuffle of every kind, repeated; or the fixed spec in every phase.
 * timeout_ns is the engine's RPC timeout (sizes the blackouts).  Returns
 * the number of phases (>= 1) written to a malloc()ed array, or -1. */
int soak_schedule(const soak_opts *o, uint64_t timeout_ns, soak_phase **out, char *err,
                  size_t errlen);

/* The parser both sides use.  Returns 0, or 2 after printing the usage error. */
int soak_parse(int argc, char **argv, int first, soak_opts *o);
/* Applies the engine settings the soak uses (max message length, busy
 * poll, --homa-config) to runtime options. */
struct homa_runtime_options;
int soak_runtime_options(const soak_opts *o, struct homa_runtime_options *ro, char *err,
                         size_t errlen);

/* Payload keys: every byte of a message depends on (run seed, client,
 * sequence number, direction). */
uint64_t soak_key(uint64_t seed, int client, uint64_t seq, int response);

int soak_client_main(const soak_opts *o);
int soak_server_main(const soak_opts *o);

int soak_main(int argc, char **argv);
int soak_worker_main(int argc, char **argv);

#endif
