/* One loss-recovery run on the virtual network, shared by bench_loss (the
 * benchmark) and test_loss_efficiency (the test): echo RPCs among `hosts`
 * hosts at 10 Gb/s with sizes drawn from a workload and start times that
 * depend only on the seed, so runs at different loss rates differ only in
 * the losses. */
#ifndef HOMA_LOSS_RUN_H
#define HOMA_LOSS_RUN_H

#include <stdint.h>

#include <homa/workload.h>

struct loss_fig {
    double p50, p99;     /* latency of the RPCs that completed, us */
    double ratio;        /* retransmitted payload bytes / payload bytes lost */
    double extra;        /* all bytes sent beyond one copy of each message / lost */
    uint64_t lost_bytes; /* DATA payload bytes the network dropped */
    int failed, twice;   /* RPCs failed (or not completed once); served twice */
};

/* payload: DATA bytes per packet (0 = the engine's default). */
struct loss_fig loss_run(const homa_workload *w, int rpcs, int hosts, double loss, uint64_t seed,
                         uint32_t payload);

#endif
