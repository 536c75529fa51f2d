/* Loss-recovery benchmark on the virtual network (a benchmark, not a test:
 * it reports numbers and asserts nothing but completion).  For each loss
 * rate it runs the same RPCs (same sizes, same start times) on the same
 * network, so the runs differ only in the losses; over several seeds it
 * reports the median of each figure:
 *   - RPC latency p50 and p99, and their ratio to the loss-free run;
 *   - retransmitted payload bytes / payload bytes of the DATA packets lost
 *     (1.0 = only the lost ranges were resent), and all payload bytes sent
 *     beyond one copy of each message (restarted requests included) / the
 *     same lost bytes.
 * Usage: bench_loss [workload=w3] [rpcs=2000] [seeds=5] [hosts=8]
 * Virtual time, so the figures are exact for the model and repeatable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <homa/workload.h>

#include "scenario.h"

#define US 1000ull
#define MS 1000000ull

struct fig {
    double p50, p99, ratio, extra;
    int failed, twice;
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static struct fig run(const homa_workload *w, int rpcs, int hosts, double loss, uint64_t seed)
{
    struct vnet_config n;
    vnet_config_default(&n);
    n.seed = seed;
    n.host_bps = 10000000000ull;
    n.host_delay_ns = 250;
    n.switch_delay_ns = 250;
    n.faults.loss = loss;
    homa_config h;
    homa_config_default(&h);
    struct scenario sc;
    sc_init(&sc, &n, &h, hosts);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1; /* sizes and times: same for every loss */
    uint64_t t = 10 * US;
    for (int i = 0; i < rpcs; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(s >> 11) * 0x1.0p-53;
        uint32_t len = homa_workload_sample(w, u, 0);
        if (len < 4) len = 4;
        if (len > h.max_message_length) len = h.max_message_length;
        int src = i % hosts, dst = (src + 1 + (i / hosts) % (hosts - 1)) % hosts;
        sc_add_rpc(&sc, t, src, dst, len);
        t += 20 * US; /* about 20 % load at 10 Gb/s for W3's mean */
    }
    sc_run(&sc, 600000 * MS);
    uint64_t *lat = malloc((size_t)rpcs * sizeof(*lat));
    int nl = 0;
    struct fig f = {0};
    for (int i = 0; i < sc.nrpcs; i++) {
        struct sc_rpc *r = &sc.rpcs[i];
        if (r->completions == 1 && r->err == 0) lat[nl++] = r->done - r->start;
        f.failed += r->err != 0 || r->completions != 1;
        f.twice += r->server_deliveries > 1;
    }
    qsort(lat, (size_t)nl, sizeof(*lat), cmp_u64);
    f.p50 = nl ? lat[nl / 2] / 1e3 : 0;
    f.p99 = nl ? lat[(size_t)nl * 99 / 100] / 1e3 : 0;
    uint64_t rtx = 0, sent = 0, useful = 0;
    for (int i = 0; i < sc.n; i++) {
        homa_counters c;
        homa_engine_counters(sc.h[i]->eng, &c);
        rtx += c.retransmit_bytes;
        sent += c.bytes_out;
    }
    for (int i = 0; i < sc.nrpcs; i++)
        useful += 2 * (uint64_t)sc.rpcs[i].len; /* echo */
    struct vnet_stats vs;
    vnet_get_stats(sc.net, &vs);
    f.ratio = vs.lost_data_bytes ? (double)rtx / (double)vs.lost_data_bytes : 0;
    /* Everything sent beyond one copy of each message, restarted requests
     * included (those are not RESEND retransmissions). */
    f.extra = vs.lost_data_bytes && sent > useful
                  ? (double)(sent - useful) / (double)vs.lost_data_bytes
                  : 0;
    free(lat);
    sc_destroy(&sc);
    return f;
}

int main(int argc, char **argv)
{
    const char *wname = argc > 1 ? argv[1] : "w3";
    int rpcs = argc > 2 ? atoi(argv[2]) : 2000;
    int seeds = argc > 3 ? atoi(argv[3]) : 5;
    int hosts = argc > 4 ? atoi(argv[4]) : 8;
    if (rpcs < 1 || seeds < 1 || seeds > 100 || hosts < 2 || hosts > SC_MAX_HOSTS) {
        fprintf(stderr, "usage: bench_loss [workload] [rpcs] [seeds 1..100] [hosts 2..64]\n");
        return 2;
    }
    homa_workload *w;
    if (homa_workload_load(wname, NULL, HOMA_DATA_DIR, &w) != 0) {
        fprintf(stderr, "bench_loss: %s\n", homa_workload_errmsg());
        return 2;
    }
    static const double losses[] = {0, 0.01, 0.05, 0.2};
    enum { NL = sizeof(losses) / sizeof(losses[0]) };
    double p50[NL][100], p99[NL][100], ratio[NL][100], extra[NL][100];
    int failed[NL] = {0}, twice[NL] = {0};
    for (int k = 0; k < seeds; k++)
        for (int l = 0; l < NL; l++) {
            struct fig f = run(w, rpcs, hosts, losses[l], (uint64_t)k + 1);
            p50[l][k] = f.p50;
            p99[l][k] = f.p99;
            ratio[l][k] = f.ratio;
            extra[l][k] = f.extra;
            failed[l] += f.failed;
            twice[l] += f.twice;
        }
    printf("bench_loss: %s, %d RPCs on %d hosts (echo, 10 Gb/s), medians over %d seeds\n",
           homa_workload_name(w), rpcs, hosts, seeds);
    printf("  %-6s %10s %10s %10s %10s %14s %16s %7s %6s\n", "loss", "p50 us", "p99 us", "p50 x",
           "p99 x", "rtx/lost bytes", "extra/lost bytes", "failed", "twice");
    double base50 = 0, base99 = 0;
    for (int l = 0; l < NL; l++) {
        qsort(p50[l], (size_t)seeds, sizeof(double), cmp_d);
        qsort(p99[l], (size_t)seeds, sizeof(double), cmp_d);
        qsort(ratio[l], (size_t)seeds, sizeof(double), cmp_d);
        qsort(extra[l], (size_t)seeds, sizeof(double), cmp_d);
        double m50 = p50[l][seeds / 2], m99 = p99[l][seeds / 2], mr = ratio[l][seeds / 2];
        double mx = extra[l][seeds / 2];
        if (l == 0) {
            base50 = m50;
            base99 = m99;
        }
        printf("  %5.0f%% %10.1f %10.1f %10.2f %10.2f %14.3f %16.3f %7d %6d\n", losses[l] * 100,
               m50, m99, base50 > 0 ? m50 / base50 : 0, base99 > 0 ? m99 / base99 : 0, mr, mx,
               failed[l], twice[l]);
    }
    homa_workload_free(w);
    return 0;
}
