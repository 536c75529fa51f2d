/* homa-perf: shared definitions (options, results, transport interface). */
#ifndef HOMA_PERF_H
#define HOMA_PERF_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "stats.h"

enum perf_proto { PERF_HOMA = 0, PERF_TCP = 1 };
enum perf_test { TEST_RTT = 0, TEST_TPUT = 1, TEST_WORKLOAD = 2 };

#define PERF_DEFAULT_RTT_SIZE 100
#define PERF_DEFAULT_TPUT_SIZE 1000000
#define PERF_DEFAULT_TPUT_OUTSTANDING 8
#define PERF_DEFAULT_CONNS 4
#define PERF_MAX_MESSAGE 1000000u /* Homa's default max_message_length */
#define PERF_MAX_BUCKETS 10
#define PERF_MAX_CAL 32
#define PERF_MAX_FAIL_KINDS 8

typedef struct perf_opts {
    int proto;
    int test;
    const char *server; /* client: HOST:PORT */
    uint16_t port;      /* server: port to listen on (0 = any) */
    int threads;        /* server: worker threads; client: client threads */
    size_t size;        /* rtt/tput message size (request = response) */
    int outstanding;    /* RPCs in flight per client thread (closed loop) */
    const char *workload;
    double gbps; /* workload: offered load, request bytes per second x 8 */
    double seconds;
    double warmup; /* seconds at the start excluded from the statistics */
    double drain;  /* seconds to wait for RPCs still in flight at the end */
    int verify;
    int json;
    int conns;         /* TCP workload: connections per client thread */
    uint32_t max_size; /* workload: lengths above this are clamped */
    const char *data_dir;
    uint64_t seed;
    int calibrate;    /* workload: measure best-case RTTs first (default 1) */
    int busy_poll_us; /* -1: each transport's default */
} perf_opts;

/* Address of a server, resolved once. */
typedef struct perf_addr {
    struct sockaddr_storage ss;
    socklen_t len;
    char host[256];
    uint16_t port;
} perf_addr;

/* Parses "HOST:PORT" or "[V6]:PORT" and resolves HOST.  0 or -1 (err set). */
int perf_parse_addr(const char *spec, perf_addr *out, char *err, size_t errlen);

/* One workload size bucket: message lengths in (lo, hi]. */
typedef struct perf_bucket {
    uint32_t lo, hi;
    double fraction; /* share of the workload's messages (from the CDF) */
    hist lat;        /* RTT, ns */
    hist slow;       /* slowdown x 1000 */
} perf_bucket;

/* One calibration point: the smallest unloaded RTT seen for `size`. */
typedef struct perf_cal_point {
    uint32_t size;
    uint64_t min_ns;
    uint64_t samples;
} perf_cal_point;

typedef struct perf_result {
    int proto;
    int test;
    size_t size;
    int outstanding;
    int threads;
    int conns;
    int busy_poll_us;
    double window_s; /* length of the measurement window, seconds */
    uint64_t rpcs;   /* measured RPCs that completed successfully */
    uint64_t failed; /* RPCs that completed with an error */
    /* failed, by error code (first PERF_MAX_FAIL_KINDS codes; the rest in
     * the last entry, code 0). */
    int nfail_kinds;
    int fail_code[PERF_MAX_FAIL_KINDS];
    uint64_t fail_count[PERF_MAX_FAIL_KINDS];
    uint64_t mismatches; /* --verify: responses whose bytes were wrong */
    uint64_t unfinished; /* still in flight when the drain time ran out */
    uint64_t errors;     /* failed + mismatches + unfinished */
    int verify;
    uint64_t bytes; /* request + response payload bytes of measured RPCs */
    hist lat;       /* ns */
    /* Workload only. */
    char workload[32];
    uint32_t max_size;
    double mean_size;
    double offered_gbps;
    hist lag; /* actual send time - scheduled arrival time, ns */
    hist slow;
    int nbuckets;
    perf_bucket buckets[PERF_MAX_BUCKETS];
    int ncal;
    perf_cal_point cal[PERF_MAX_CAL];
    char fatal[256]; /* non-empty if the run could not complete */
} perf_result;

void perf_result_init(perf_result *r);
void perf_result_free(perf_result *r);
/* Adds src's counters and histograms into dst. */
void perf_result_merge(perf_result *dst, const perf_result *src);
/* Counts `count` failed RPCs with error `code`. */
void perf_result_fail(perf_result *r, int code, uint64_t count);
double perf_result_gbps(const perf_result *r);
double perf_result_rate(const perf_result *r);

/* ---- Transports ------------------------------------------------------ */

typedef struct pt_completion {
    uint64_t cookie;
    const uint8_t *data; /* response bytes; valid until the next poll */
    size_t len;
    int error; /* 0, or negative (HOMA_ERR_* for Homa, -errno for TCP) */
} pt_completion;

typedef struct pt_client pt_client;
typedef struct pt_client_ops {
    /* Starts one RPC carrying buf (copied or sent before returning).  slot
     * >= 0 is a closed-loop slot (TCP: connection slot % conns); -1 lets TCP
     * pick the connection with the fewest bytes outstanding.  Returns 0 or a
     * negative error. */
    int (*send)(pt_client *c, int slot, uint64_t cookie, const void *buf, size_t len);
    /* Zero-copy sending, used by the closed loop (rtt, tput) when both are
     * set: get_buf returns a buffer of len bytes for the next request of
     * `slot` (possibly the response that just completed on that slot, so
     * read that first), which the caller fills and passes to send_buf; the
     * transport sends from it without copying (TCP: keeps writing from it
     * until sent; Homa: hands it over with homa_send_owned).  The buffer
     * stays the transport's; a slot has one RPC in flight at a time. */
    void *(*get_buf)(pt_client *c, int slot, size_t len);
    int (*send_buf)(pt_client *c, int slot, uint64_t cookie, void *buf, size_t len);
    /* Waits until at least one RPC finished or the CLOCK_MONOTONIC deadline
     * passed; returns the number of completions stored (0 at the deadline)
     * or a negative fatal error (the client is unusable). */
    int (*poll)(pt_client *c, uint64_t deadline_ns, pt_completion *out, int max);
    void (*destroy)(pt_client *c);
} pt_client_ops;

struct pt_client {
    const pt_client_ops *ops;
};

typedef struct pt_server pt_server;
typedef struct pt_server_ops {
    uint16_t (*port)(pt_server *s);
    /* Stops all threads and frees the server. */
    void (*stop)(pt_server *s);
} pt_server_ops;

struct pt_server {
    const pt_server_ops *ops;
};

/* Creates a client with `conns` connections (TCP; ignored by Homa).
 * spin_ns / busy_poll_us: how long a waiting thread polls before sleeping
 * (Homa: busy_poll_us < 0 keeps the runtime's default). */
int tcp_client_create(const perf_addr *addr, int conns, uint64_t spin_ns, pt_client **out,
                      char *err, size_t errlen);
int homa_client_create(const perf_addr *addr, int busy_poll_us, pt_client **out, char *err,
                       size_t errlen);
/* Starts an echo server (request bytes are sent back as the response). */
int tcp_server_start(uint16_t port, int threads, uint64_t spin_ns, pt_server **out, char *err,
                     size_t errlen);
int homa_server_start(uint16_t port, int threads, int busy_poll_us, pt_server **out, char *err,
                      size_t errlen);
/* Set by --counters: Homa runtimes print their counters when they end. */
extern int homa_perf_counters;
/* --reply-size: servers answer every request with this many bytes (zeros),
 * and clients expect that (one-way tests: 0); -1, the default, echoes. */
extern long perf_reply_size;
/* --homa-config (cluster_homa_apply() syntax) and --no-place: applied to
 * every Homa runtime homa-perf creates (client and server). */
extern const char *homa_perf_config;
extern unsigned homa_perf_rt_flags;
/* --class: scheduling class of every Homa socket (homa_socket_set_class). */
extern int homa_perf_sched_class;
/* busy_poll_us of homa_runtime_options_default(). */
int homa_default_busy_poll_us(void);
/* The busy-poll time in force for o->proto (--busy-poll, else the default:
 * the Homa runtime's, 0 for TCP). */
int perf_busy_poll_us(const perf_opts *o);

int pt_client_create(const perf_opts *o, const perf_addr *addr, int conns, pt_client **out,
                     char *err, size_t errlen);
int pt_server_start(const perf_opts *o, pt_server **out, char *err, size_t errlen);
/* Describes a transport error: HOMA_ERR_* for Homa (values -1..-64), else
 * -errno. */
const char *pt_strerror(int proto, int err);

/* ---- Client driver and output --------------------------------------- */

/* Runs the client side of a test against addr; fills *res (initialised by
 * the caller).  Returns 0, or -1 with res->fatal set. */
int perf_run_client(const perf_opts *o, const perf_addr *addr, perf_result *res);

const char *perf_proto_name(int proto);
const char *perf_test_name(int test);
void perf_print_human(const perf_opts *o, const perf_result *r);
/* Writes r as one JSON object (key may be NULL at top level). */
struct json_writer;
void perf_json_result(struct json_writer *j, const char *key, const perf_opts *o,
                      const perf_result *r);

#endif
