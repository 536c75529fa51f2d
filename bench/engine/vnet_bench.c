/* vnet_bench: raw event throughput of the virtual network.
 *
 * Every host sends fixed-size packets to uniformly random other hosts at
 * random priorities, at `load` times its link rate (1.0: back to back;
 * below 1: exponential gaps), on a leaf-spine (default: the 144-host
 * topology of the Homa paper, 9 racks x 16 hosts, 4 spines, 10/40 Gb/s).
 *
 * usage: vnet_bench [--ms N] [--racks R] [--hosts H] [--spines U]
 *                   [--host-gbps G] [--uplink-gbps G] [--pkt BYTES]
 *                   [--buffer BYTES] [--load L] [--seed S] */
#define _POSIX_C_SOURCE 200809L
#include "vnet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct bhost {
    struct vnet *net;
    int idx, nhosts;
    uint32_t len;
    double mean_gap_ns; /* 0: back to back */
    uint64_t next_send;
    bool timer_armed;
    uint64_t seq;
};

static void wake(void *arg, uint64_t now)
{
    struct bhost *h = arg;
    (void)now;
    h->timer_armed = false;
    vnet_host_kick(h->net, h->idx);
}

static int pull(void *ctx, uint64_t now, struct vnet_pkt *pkt)
{
    struct bhost *h = ctx;
    struct vnet_rng *rng = vnet_rng(h->net);
    if (now < h->next_send) {
        if (!h->timer_armed) {
            h->timer_armed = true;
            vnet_at(h->net, h->next_send, wake, h);
        }
        return 0;
    }
    int dst = (int)vnet_rng_below(rng, (uint64_t)h->nhosts - 1);
    pkt->dst = dst >= h->idx ? dst + 1 : dst;
    pkt->priority = (int)vnet_rng_below(rng, VNET_NUM_PRIOS);
    pkt->len = h->len;
    memcpy(pkt->data, &h->seq, sizeof(h->seq));
    h->seq++;
    /* Poisson packet arrivals into the host, served at line rate: when
     * behind, packets go back to back until it catches up. */
    if (h->mean_gap_ns > 0) h->next_send += (uint64_t)vnet_rng_exp(rng, h->mean_gap_ns);
    return 1;
}

static void deliver(void *ctx, uint64_t now, int src, const uint8_t *data, size_t len, int prio)
{
    (void)ctx, (void)now, (void)src, (void)data, (void)len, (void)prio;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    struct vnet_config cfg;
    vnet_config_default(&cfg);
    cfg.topology = VNET_LEAF_SPINE;
    cfg.racks = 9;
    cfg.hosts_per_rack = 16;
    cfg.spines = 4;
    cfg.host_delay_ns = 100;
    cfg.uplink_delay_ns = 100;
    cfg.switch_delay_ns = 250;
    cfg.overhead_bytes = 66; /* Ethernet + IP + UDP headers, preamble, IFG */
    cfg.port_buffer_bytes = 512 * 1024;
    double ms = 100, host_gbps = 10, up_gbps = 40, load = 1.0;
    uint32_t pkt = 1500;
    cfg.seed = vnet_seed_from_env(1);
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--ms"))
            ms = atof(v);
        else if (!strcmp(k, "--racks"))
            cfg.racks = atoi(v);
        else if (!strcmp(k, "--hosts"))
            cfg.hosts_per_rack = atoi(v);
        else if (!strcmp(k, "--spines"))
            cfg.spines = atoi(v);
        else if (!strcmp(k, "--host-gbps"))
            host_gbps = atof(v);
        else if (!strcmp(k, "--uplink-gbps"))
            up_gbps = atof(v);
        else if (!strcmp(k, "--pkt"))
            pkt = (uint32_t)atoi(v);
        else if (!strcmp(k, "--buffer"))
            cfg.port_buffer_bytes = strtoull(v, NULL, 0);
        else if (!strcmp(k, "--load"))
            load = atof(v);
        else if (!strcmp(k, "--seed"))
            cfg.seed = strtoull(v, NULL, 0);
        else {
            fprintf(stderr, "unknown option %s\n", k);
            return 2;
        }
    }
    if (pkt < 1 || pkt > VNET_MAX_PKT || load <= 0 || load > 1) {
        fprintf(stderr, "bad --pkt or --load\n");
        return 2;
    }
    cfg.host_bps = (uint64_t)(host_gbps * 1e9);
    cfg.uplink_bps = (uint64_t)(up_gbps * 1e9);
    struct vnet *net = vnet_create(&cfg);
    if (!net) {
        fprintf(stderr, "bad configuration\n");
        return 2;
    }
    int n = cfg.racks * cfg.hosts_per_rack;
    struct bhost *hosts = calloc((size_t)n, sizeof(*hosts));
    struct vnet_host_ops ops = {.pull = pull, .deliver = deliver};
    double pkt_ns = (double)(pkt + cfg.overhead_bytes) * 8e9 / (double)cfg.host_bps;
    for (int i = 0; i < n; i++) {
        hosts[i] = (struct bhost){.net = net, .nhosts = n, .len = pkt};
        hosts[i].mean_gap_ns = load < 1 ? pkt_ns / load : 0;
        hosts[i].idx = vnet_add_host(net, &ops, &hosts[i]);
        vnet_host_kick(net, i);
    }

    uint64_t end = (uint64_t)(ms * 1e6);
    double t0 = wall_s();
    uint64_t events = vnet_run_until(net, end);
    double dt = wall_s() - t0;

    struct vnet_stats st;
    vnet_get_stats(net, &st);
    double down_busy = 0;
    for (int i = 0; i < n; i++) {
        struct vnet_port_stats ps;
        vnet_get_port_stats(net, vnet_host_tor(net, i), vnet_host_port(net, i), &ps);
        down_busy += (double)ps.busy_ns;
    }
    printf("topology: %d racks x %d hosts, %d spines, %.0f/%.0f Gb/s, pkt %u B, load %.2f, "
           "seed %llu\n",
           cfg.racks, cfg.hosts_per_rack, cfg.spines, host_gbps, up_gbps, pkt, load,
           (unsigned long long)vnet_seed(net));
    printf("virtual time %.1f ms; packets sent %llu, delivered %llu, queue drops %llu; "
           "mean downlink load %.1f%%\n",
           ms, (unsigned long long)st.pkts_sent, (unsigned long long)st.pkts_delivered,
           (unsigned long long)st.drops_queue, 100.0 * down_busy / ((double)end * n));
    printf("events %llu in %.3f s wall: %.2f M events/s (%.2f M packets/s)\n",
           (unsigned long long)events, dt, (double)events / dt / 1e6,
           (double)st.pkts_delivered / dt / 1e6);
    vnet_destroy(net);
    free(hosts);
    return 0;
}
