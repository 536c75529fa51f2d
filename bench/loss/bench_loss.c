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
 * Usage: bench_loss [workload=w3] [rpcs=2000] [seeds=5] [hosts=8] [payload=1400]
 * (payload: DATA bytes per packet, e.g. 65000 for loopback-sized packets)
 * Virtual time, so the figures are exact for the model and repeatable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <homa/workload.h>

#include "loss_run.h"
#include "scenario.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *wname = argc > 1 ? argv[1] : "w3";
    int rpcs = argc > 2 ? atoi(argv[2]) : 2000;
    int seeds = argc > 3 ? atoi(argv[3]) : 5;
    int hosts = argc > 4 ? atoi(argv[4]) : 8;
    long payload = argc > 5 ? atol(argv[5]) : 0;
    if (rpcs < 1 || seeds < 1 || seeds > 100 || hosts < 2 || hosts > SC_MAX_HOSTS || payload < 0 ||
        payload > 65000) {
        fprintf(stderr,
                "usage: bench_loss [workload] [rpcs] [seeds 1..100] [hosts 2..64] [payload]\n");
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
            struct loss_fig f =
                loss_run(w, rpcs, hosts, losses[l], (uint64_t)k + 1, (uint32_t)payload);
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
