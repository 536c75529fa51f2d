/* homa-sim: options, message sizes on the wire and priority cutoffs (the
 * fabric's ideal times are in fabric.c). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "homa_sim.h"

void hsim_opts_default(struct hsim_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->workload = "w4";
    o->load = 0.8;
    o->reply_bytes = -1;
    /* SIGCOMM 2018 simulations: 9 racks x 16 hosts, 10 Gb/s host links,
     * 40 Gb/s to each of 4 spines (no oversubscription). */
    o->hosts = 144;
    o->hosts_per_rack = 16;
    o->spines = 4;
    o->host_bps = 10000000000ull;
    o->uplink_bps = 40000000000ull;
    /* Delays chosen so a full packet out plus a grant back takes about
     * 7.5 us (the paper: rtt about 8 us, 9.7 KB in flight). */
    o->host_link_delay_ns = 100;
    o->uplink_delay_ns = 100;
    o->switch_delay_ns = 250;
    o->rx_delay_ns = 1000;
    /* IPv4 (20) + Ethernet header and FCS (18) + preamble and gap (20). */
    o->overhead_bytes = 58;
    o->port_buffer_bytes = 1000000;
    o->max_payload = 1400;
    o->priorities = 8;
    o->grant_fifo_permille = UINT32_MAX;
    o->resend_ticks = o->resend_interval = o->gap_resend_ticks = o->timeout_ticks = UINT32_MAX;
    o->seed = 1;
    o->warmup_ms = -1;
    o->measure_ms = -1;
    o->drain_ms = -1;
    o->buckets = 20;
    o->max_rss_mb = -1; /* homa-sim: 85 % of RAM shared by the parallel runs */
    o->progress_s = 0;
}

/* Index 0-4 for the names w1..w5 (or W1.cdf ...), -1 for anything else. */
static int paper_workload_index(const char *w)
{
    if (w && (w[0] == 'w' || w[0] == 'W') && w[1] >= '1' && w[1] <= '5' &&
        (w[2] == 0 || strcmp(w + 2, ".cdf") == 0))
        return w[1] - '1';
    return -1;
}

int hsim_paper_overcommit(const char *w)
{
    static const int oc[5] = {1, 3, 4, 7, 7};
    int i = paper_workload_index(w);
    return i < 0 ? 8 : oc[i];
}

int hsim_default_overcommit(const char *w)
{
    /* Raised above the paper's where its value keeps the fabric from 90 %
     * load.  W5: with 7 even an ideal SRPT matching (homa-sim fluid
     * --overcommit 7) cannot carry 90 %, because once 10-13 messages wait
     * per receiver all 7 granted senders are often busy elsewhere; from
     * 12-16 on the limit costs nothing.  W3: 4 carries 99.3 % of 90 %, 8
     * all of it. */
    static const int oc[5] = {1, 3, 8, 7, 16};
    int i = paper_workload_index(w);
    return i < 0 ? 8 : oc[i];
}

/* ---- option parsing ---- */

static int parse_u64(const char *v, uint64_t *out)
{
    if (!v || !*v || *v == '-') return -1;
    char *end;
    errno = 0;
    double d = strtod(v, &end); /* accepts 1e6 and 10000000000 alike */
    if (errno || end == v || *end || d < 0 || d > 1.8e19 || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int parse_dbl(const char *v, double *out)
{
    if (!v || !*v) return -1;
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(d)) return -1;
    *out = d;
    return 0;
}

static int parse_u32(const char *v, uint32_t *out)
{
    uint64_t x;
    if (parse_u64(v, &x) || x > UINT32_MAX) return -1;
    *out = (uint32_t)x;
    return 0;
}

static int parse_int(const char *v, int *out, int lo, int hi)
{
    uint64_t x;
    if (parse_u64(v, &x) || x < (uint64_t)lo || x > (uint64_t)hi) return -1;
    *out = (int)x;
    return 0;
}

static int parse_gbps(const char *v, uint64_t *bps)
{
    double g;
    if (parse_dbl(v, &g) || g <= 0 || g > 10000) return -1;
    *bps = (uint64_t)llround(g * 1e9);
    return 0;
}

static int parse_cutoffs(const char *v, uint32_t c[8])
{
    /* "c0,c1,...": up to 8 values, priority 0 first */
    memset(c, 0, 8 * sizeof(c[0]));
    int n = 0;
    const char *p = v;
    while (p && *p) {
        if (n == 8) return -1;
        char *end;
        errno = 0;
        unsigned long long x = strtoull(p, &end, 0);
        if (errno || end == p || x > 0x7fffffffull || (*end && *end != ',')) return -1;
        c[n++] = (uint32_t)x;
        p = *end ? end + 1 : end;
    }
    return n > 0 ? 0 : -1;
}

void hsim_print_options(FILE *f)
{
    fputs("workload and traffic:\n"
          "  --workload wN|PATH      message sizes (W1-W5 in data/workloads)      [w4]\n"
          "  --load F                offered load, fraction of host link rate     [0.8]\n"
          "  --load-counts-grants    count GRANT frames in --load, as the paper's\n"
          "                          simulator does (less DATA for the same F)\n"
          "  --truncate-1mb          cap sizes at 1,000,000 B (Linux benchmarks)\n"
          "  --reply sampled|BYTES   response sizes: from the workload (each       [sampled]\n"
          "                          message measured) or fixed (requests only)\n"
          "  --data DIR              workload directory\n"
          "topology (leaf-spine, store-and-forward, 8 priority queues per port):\n"
          "  --hosts N               hosts                                         [144]\n"
          "  --hosts-per-rack N      hosts per ToR                                 [16]\n"
          "  --racks N               racks (default hosts / hosts-per-rack)\n"
          "  --spines N              spine switches                                [4]\n"
          "  --host-gbps G           host link rate                                [10]\n"
          "  --uplink-gbps G         ToR-spine link rate                           [40]\n"
          "  --link-delay-ns N       host link propagation                         [100]\n"
          "  --uplink-delay-ns N     ToR-spine propagation                         [100]\n"
          "  --switch-delay-ns N     switch forwarding latency                     [250]\n"
          "  --rx-delay-ns N         host software delay on receive                [1000]\n"
          "  --overhead-bytes N      per-packet wire overhead (IP + Ethernet)      [58]\n"
          "  --buffer-bytes N        buffer per switch egress port, 0 = unlimited  [1000000]\n"
          "  --loss P                random packet loss at host egress             [0]\n"
          "protocol (every host's engine):\n"
          "  --max-payload N         DATA payload bytes per packet                 [1400]\n"
          "  --unsched-bytes N       unscheduled bytes, 0 = one rtt                [9800]\n"
          "  --grant-window N        granted-ahead bytes, 0 = rtt + grant batch    [12600]\n"
          "  --overcommit N          max_overcommit       [1/3/8/7/16; paper 1/3/4/7/7]\n"
          "  --priorities N          priority levels used, 1..8                    [8]\n"
          "  --unsched-levels N      levels for unscheduled bytes   [by the byte share]\n"
          "  --cutoffs c0,..,c7      explicit unsched_cutoffs (priority 0 first; fixed)\n"
          "  --fixed-cutoffs         keep the computed cutoffs (receivers do not adapt)\n"
          "  --sender-driven         no grants: every message sent unscheduled\n"
          "  --max-incoming N        cap on granted-but-unreceived bytes           [400000]\n"
          "  --fifo-permille N       share of the oldest message (grants, sending) [50]\n"
          "  --tick-us T             engine timer tick                             [1000]\n"
          "  --resend-ticks N        silence before a RESEND, in ticks             [5]\n"
          "  --resend-interval N     ticks between RESENDs                         [5]\n"
          "  --gap-resend-ticks N    age of a hole asked for while data flows,     [1]\n"
          "                          0 = only after silence (as in Linux)\n"
          "  --timeout-ticks N       silence before an RPC fails                   [100]\n"
          "  --max-rx-bytes N        per-host incoming buffer cap                  [16 GiB]\n"
          "  --pacer-gbps G          engine pacer rate (0 = off; the NIC pulls)    [0]\n"
          "run:\n"
          "  --seed S                random seed                                   [1]\n"
          "  --queue-stats           sample every host every 100 us of the window: how\n"
          "                          often links idle while messages wait (slower)\n"
          "  --warmup-ms T           simulated warm-up before measuring  [per workload]\n"
          "  --measure-ms T          window: messages started in it are measured\n"
          "  --drain-ms T            extra time allowed for them to finish\n"
          "  --buckets N             size buckets (quantiles of the workload)      [20]\n"
          "  --max-rss-mb N          end the run early above this memory, 0 = never\n"
          "                          [85 % of RAM, shared by parallel runs]\n",
          f);
}

int hsim_parse_opt(struct hsim_opts *o, int argc, char **argv, int *i, char *err, size_t errlen)
{
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0) return 0;
    a += 2;
    /* flags without a value */
    if (strcmp(a, "truncate-1mb") == 0) {
        o->truncate_1mb = true;
        return 1;
    }
    if (strcmp(a, "sender-driven") == 0) {
        o->sender_driven = true;
        return 1;
    }
    if (strcmp(a, "fixed-cutoffs") == 0) {
        o->fixed_cutoffs = true;
        return 1;
    }
    if (strcmp(a, "queue-stats") == 0) {
        o->queue_stats = true;
        return 1;
    }
    if (strcmp(a, "load-counts-grants") == 0) {
        o->load_counts_grants = true;
        return 1;
    }
    static const char *const with_value[] = {"workload",
                                             "load",
                                             "reply",
                                             "data",
                                             "hosts",
                                             "hosts-per-rack",
                                             "racks",
                                             "spines",
                                             "host-gbps",
                                             "uplink-gbps",
                                             "link-delay-ns",
                                             "uplink-delay-ns",
                                             "switch-delay-ns",
                                             "rx-delay-ns",
                                             "overhead-bytes",
                                             "buffer-bytes",
                                             "loss",
                                             "max-payload",
                                             "unsched-bytes",
                                             "grant-window",
                                             "overcommit",
                                             "priorities",
                                             "unsched-levels",
                                             "cutoffs",
                                             "max-incoming",
                                             "fifo-permille",
                                             "max-rx-bytes",
                                             "pacer-gbps",
                                             "tick-us",
                                             "resend-ticks",
                                             "resend-interval",
                                             "gap-resend-ticks",
                                             "timeout-ticks",
                                             "seed",
                                             "warmup-ms",
                                             "measure-ms",
                                             "drain-ms",
                                             "buckets",
                                             "max-rss-mb",
                                             NULL};
    int known = 0;
    for (int k = 0; with_value[k]; k++)
        if (strcmp(a, with_value[k]) == 0) known = 1;
    if (!known) return 0;
    if (*i + 1 >= argc) {
        snprintf(err, errlen, "--%s needs a value", a);
        return -1;
    }
    const char *v = argv[*i + 1];
    int bad = 0;
    double d;
    if (strcmp(a, "workload") == 0) {
        o->workload = v;
    } else if (strcmp(a, "data") == 0) {
        o->data_dir = v;
    } else if (strcmp(a, "load") == 0) {
        bad = parse_dbl(v, &o->load) || o->load <= 0 || o->load > 2;
    } else if (strcmp(a, "reply") == 0) {
        uint32_t x;
        if (strcmp(v, "sampled") == 0)
            o->reply_bytes = -1;
        else if (!(bad = parse_u32(v, &x) || x > 0x7fffffff))
            o->reply_bytes = x;
    } else if (strcmp(a, "hosts") == 0) {
        bad = parse_int(v, &o->hosts, 2, 100000);
    } else if (strcmp(a, "hosts-per-rack") == 0) {
        bad = parse_int(v, &o->hosts_per_rack, 1, 100000);
    } else if (strcmp(a, "racks") == 0) {
        bad = parse_int(v, &o->racks, 1, 100000);
    } else if (strcmp(a, "spines") == 0) {
        bad = parse_int(v, &o->spines, 1, 1000);
    } else if (strcmp(a, "host-gbps") == 0) {
        bad = parse_gbps(v, &o->host_bps);
    } else if (strcmp(a, "uplink-gbps") == 0) {
        bad = parse_gbps(v, &o->uplink_bps);
    } else if (strcmp(a, "link-delay-ns") == 0) {
        bad = parse_u64(v, &o->host_link_delay_ns);
    } else if (strcmp(a, "uplink-delay-ns") == 0) {
        bad = parse_u64(v, &o->uplink_delay_ns);
    } else if (strcmp(a, "switch-delay-ns") == 0) {
        bad = parse_u64(v, &o->switch_delay_ns);
    } else if (strcmp(a, "rx-delay-ns") == 0) {
        bad = parse_u64(v, &o->rx_delay_ns);
    } else if (strcmp(a, "overhead-bytes") == 0) {
        bad = parse_u32(v, &o->overhead_bytes) || o->overhead_bytes > 4096;
    } else if (strcmp(a, "buffer-bytes") == 0) {
        bad = parse_u64(v, &o->port_buffer_bytes);
    } else if (strcmp(a, "loss") == 0) {
        bad = parse_dbl(v, &o->loss) || o->loss < 0 || o->loss >= 1;
    } else if (strcmp(a, "max-payload") == 0) {
        bad = parse_u32(v, &o->max_payload) || o->max_payload < 1 ||
              o->max_payload > 65535 - HSIM_DATA_HDR;
    } else if (strcmp(a, "unsched-bytes") == 0) {
        bad = parse_u32(v, &o->unsched_bytes);
    } else if (strcmp(a, "grant-window") == 0) {
        bad = parse_u32(v, &o->grant_window);
    } else if (strcmp(a, "overcommit") == 0) {
        bad = parse_int(v, &o->overcommit, 1, 64);
    } else if (strcmp(a, "priorities") == 0) {
        bad = parse_int(v, &o->priorities, 1, 8);
    } else if (strcmp(a, "unsched-levels") == 0) {
        bad = parse_int(v, &o->unsched_levels, 1, 8);
    } else if (strcmp(a, "cutoffs") == 0) {
        bad = parse_cutoffs(v, o->cutoffs);
        o->explicit_cutoffs = !bad;
    } else if (strcmp(a, "max-incoming") == 0) {
        bad = parse_u32(v, &o->max_incoming) || o->max_incoming == 0;
    } else if (strcmp(a, "fifo-permille") == 0) {
        bad = parse_u32(v, &o->grant_fifo_permille) || o->grant_fifo_permille > 500;
    } else if (strcmp(a, "max-rx-bytes") == 0) {
        bad = parse_u64(v, &o->max_rx_bytes);
    } else if (strcmp(a, "pacer-gbps") == 0) {
        bad = parse_dbl(v, &d) || d < 0 || d > 10000;
        if (!bad) o->link_bps_pacer = (uint64_t)llround(d * 1e9);
    } else if (strcmp(a, "tick-us") == 0) {
        bad = parse_dbl(v, &d) || d < 1 || d > 1e6;
        if (!bad) o->tick_ns = (uint64_t)llround(d * 1e3);
    } else if (strcmp(a, "resend-ticks") == 0) {
        bad = parse_u32(v, &o->resend_ticks) || o->resend_ticks == 0 || o->resend_ticks > 100000;
    } else if (strcmp(a, "resend-interval") == 0) {
        bad = parse_u32(v, &o->resend_interval) || o->resend_interval == 0 ||
              o->resend_interval > 100000;
    } else if (strcmp(a, "gap-resend-ticks") == 0) {
        bad = parse_u32(v, &o->gap_resend_ticks) || o->gap_resend_ticks > 100000;
    } else if (strcmp(a, "timeout-ticks") == 0) {
        bad = parse_u32(v, &o->timeout_ticks) || o->timeout_ticks == 0 ||
              o->timeout_ticks > 1000000;
    } else if (strcmp(a, "seed") == 0) {
        bad = parse_u64(v, &o->seed);
        if (bad) {
            /* accept hex seeds too */
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 0);
            bad = errno || end == v || *end;
        }
    } else if (strcmp(a, "warmup-ms") == 0) {
        bad = parse_dbl(v, &o->warmup_ms) || o->warmup_ms < 0;
    } else if (strcmp(a, "measure-ms") == 0) {
        bad = parse_dbl(v, &o->measure_ms) || o->measure_ms < 0;
    } else if (strcmp(a, "drain-ms") == 0) {
        bad = parse_dbl(v, &o->drain_ms) || o->drain_ms < 0;
    } else if (strcmp(a, "max-rss-mb") == 0) {
        bad = parse_dbl(v, &o->max_rss_mb) || o->max_rss_mb < 0;
    } else if (strcmp(a, "buckets") == 0) {
        bad = parse_int(v, &o->buckets, 1, HSIM_MAX_BUCKETS);
    }
    if (bad) {
        snprintf(err, errlen, "bad value for --%s: '%s'", a, v);
        return -1;
    }
    (*i)++;
    return 1;
}

/* ---- messages on the wire ---- */

uint32_t hsim_packets(uint32_t len, uint32_t max_payload)
{
    return len == 0 ? 1 : (uint32_t)(((uint64_t)len + max_payload - 1) / max_payload);
}

double hsim_wire_bytes(uint32_t len, uint32_t max_payload, uint32_t overhead)
{
    return (double)len + (double)hsim_packets(len, max_payload) * (HSIM_DATA_HDR + overhead);
}

double hsim_grant_wire_bytes(uint32_t len, uint32_t unsched_bytes, uint32_t grant_window,
                             uint32_t max_payload, uint32_t overhead)
{
    if (grant_window == 0 || len <= unsched_bytes || max_payload == 0) return 0;
    uint32_t step = grant_window >= 16 * max_payload ? grant_window / 4 : max_payload;
    uint64_t grants = ((uint64_t)len - unsched_bytes + step - 1) / step;
    return (double)grants * (HSIM_GRANT_HDR + overhead);
}

/* ---- priorities ---- */

int hsim_compute_cutoffs(const homa_workload *w, uint32_t max_size, uint32_t unsched, int prios,
                         int levels, homa_config *cfg)
{
    memset(cfg->unsched_cutoffs, 0, sizeof(cfg->unsched_cutoffs));
    if (prios < 1) prios = 1;
    if (prios > 8) prios = 8;
    cfg->num_priorities = (uint32_t)prios;
    cfg->unsched_cutoffs[0] = 0x7fffffff;
    if (prios == 1) return 1;

    size_t np = homa_workload_points(w);
    double ub = 0, tb = 0, prev = 0;
    for (size_t i = 0; i < np; i++) {
        uint32_t L;
        double f;
        homa_workload_point(w, i, &L, &f);
        if (max_size && L > max_size) L = max_size;
        double p = f - prev;
        prev = f;
        ub += p * (L < unsched ? L : unsched);
        tb += p * L;
    }
    if (levels <= 0) {
        /* The paper's rule: priority levels in proportion to the bytes they
         * carry, at least one for each kind present. */
        if (ub >= tb * (1 - 1e-9)) {
            levels = prios;
        } else {
            levels = (int)lround(ub / tb * prios);
            if (levels < 1) levels = 1;
            if (levels > prios - 1) levels = prios - 1;
        }
    }
    if (levels > prios) levels = prios;
    int lowest = prios - levels;
    /* Level prios-j (j = 1..levels-1) takes lengths up to the point where
     * the unscheduled bytes of all shorter messages reach j/levels of the
     * total, so each level carries an equal share. */
    int j = 1;
    double acc = 0;
    prev = 0;
    for (size_t i = 0; i < np && j < levels; i++) {
        uint32_t L;
        double f;
        homa_workload_point(w, i, &L, &f);
        if (max_size && L > max_size) L = max_size;
        acc += (f - prev) * (L < unsched ? L : unsched);
        prev = f;
        while (j < levels && acc >= ub * j / levels * (1 - 1e-12)) {
            cfg->unsched_cutoffs[prios - j] = L;
            j++;
        }
    }
    for (; j < levels; j++) /* rounding left a level over: give it everything */
        cfg->unsched_cutoffs[prios - j] = 0x7fffffff;
    cfg->unsched_cutoffs[lowest] = 0x7fffffff;
    return levels;
}

double hsim_percentile(const float *v, uint64_t n, double p)
{
    if (n == 0) return 0;
    double r = ceil(p * (double)n);
    uint64_t i = r < 1 ? 0 : (uint64_t)r - 1;
    if (i >= n) i = n - 1;
    return v[i];
}

/* Payload bytes a sender emits in one round trip. */
static double rtt_payload(const struct hsim_opts *o)
{
    struct hsim_net_params np = {o->host_bps,        o->uplink_bps,      o->host_link_delay_ns,
                                 o->uplink_delay_ns, o->switch_delay_ns, o->overhead_bytes,
                                 o->max_payload,     o->rx_delay_ns,     o->spines};
    int hpr = o->hosts_per_rack > 0 ? o->hosts_per_rack : 16;
    bool cross = o->racks > 1 || (o->racks <= 0 && o->hosts > hpr);
    double rtt = hsim_rtt_ns(&np, cross);
    return rtt * (double)o->host_bps / 8e9 * o->max_payload /
           (o->max_payload + HSIM_DATA_HDR + o->overhead_bytes);
}

uint32_t hsim_default_window(const struct hsim_opts *o)
{
    /* The engine grants once a quarter of the window (at least a packet)
     * can be granted, so just before a grant only window - batch bytes are
     * outstanding; that must still cover a round trip. */
    double need = rtt_payload(o);
    for (uint32_t k = 1;; k++) {
        uint32_t w = k * o->max_payload;
        uint32_t batch = w / 4 > o->max_payload ? w / 4 : o->max_payload;
        if ((double)(w - batch) >= need - 1e-9 || k > 100000) return w;
    }
}

uint32_t hsim_default_unsched(const struct hsim_opts *o)
{
    struct hsim_net_params np = {o->host_bps,        o->uplink_bps,      o->host_link_delay_ns,
                                 o->uplink_delay_ns, o->switch_delay_ns, o->overhead_bytes,
                                 o->max_payload,     o->rx_delay_ns,     o->spines};
    int hpr = o->hosts_per_rack > 0 ? o->hosts_per_rack : 16;
    bool cross = o->racks > 1 || (o->racks <= 0 && o->hosts > hpr);
    double rtt = hsim_rtt_ns(&np, cross);
    double payload = rtt * (double)o->host_bps / 8e9 * o->max_payload /
                     (o->max_payload + HSIM_DATA_HDR + o->overhead_bytes);
    uint32_t pkts = (uint32_t)ceil(payload / o->max_payload - 1e-9);
    return (pkts ? pkts : 1) * o->max_payload;
}
