/* See loss_run.h. */
#include "loss_run.h"

#include <stdlib.h>

#include "scenario.h"

#define US 1000ull
#define MS 1000000ull

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct loss_fig loss_run(const homa_workload *w, int rpcs, int hosts, double loss, uint64_t seed,
                         uint32_t payload)
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
    if (payload) h.max_payload = payload;
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
    struct loss_fig f = {0};
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
    f.lost_bytes = vs.lost_data_bytes;
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
