/* engine-bench: what the engine costs per packet.
 *
 * Runs RPCs between two hosts of the virtual network and reports, per packet
 * the engines handled (sent + received, data and control), the wall time
 * spent inside homa_engine_* calls, plus virtual-network events per second.
 * For instruction counts run it under callgrind restricted to the engine:
 *   valgrind --tool=callgrind --toggle-collect='homa_engine_*' \
 *       ./engine-bench --size 1000000 --rpcs 20
 * and divide the total Ir by the packet count it prints.
 *
 * Usage: engine-bench [--size BYTES] [--rpcs N] [--outstanding K] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <homa/engine.h>

#include "vhost.h"
#include "vnet.h"

#define SPORT 100
#define CPORT 200

struct bench {
    struct vnet *net;
    struct vhost *h[2];
    uint32_t size;
    int total, started, done;
    uint8_t *buf;
    uint64_t api_ns;
};

static void start_one(struct bench *b, uint64_t now);

static void on_ready(struct vhost *h, uint16_t port, void *app)
{
    struct bench *b = app;
    uint64_t now = vnet_now(b->net);
    homa_msg m;
    uint64_t t0 = vhost_clock_ns();
    if (port == SPORT) {
        while (homa_engine_recv(h->eng, port, HOMA_RECV_REQUEST, 0, &m) == 0) {
            homa_engine_send_reply(h->eng, now, port, &m.peer, m.peer_port, m.id, b->buf,
                                   b->size < 100 ? b->size : 1);
            homa_engine_release(h->eng, &m);
        }
        b->api_ns += vhost_clock_ns() - t0;
        return;
    }
    int got = 0;
    while (homa_engine_recv(h->eng, port, HOMA_RECV_RESPONSE, 0, &m) == 0) {
        if (m.error) {
            fprintf(stderr, "engine-bench: rpc failed: %s\n", homa_strerror(m.error));
            exit(1);
        }
        homa_engine_release(h->eng, &m);
        got++;
    }
    b->api_ns += vhost_clock_ns() - t0;
    b->done += got;
    for (int i = 0; i < got && b->started < b->total; i++)
        start_one(b, now);
}

static void start_one(struct bench *b, uint64_t now)
{
    homa_addr dst = vhost_addr(1);
    uint64_t id;
    uint64_t t0 = vhost_clock_ns();
    if (homa_engine_send_request(b->h[0]->eng, now, CPORT, &dst, SPORT, b->buf, b->size, 0, &id)) {
        fprintf(stderr, "engine-bench: send failed\n");
        exit(1);
    }
    b->api_ns += vhost_clock_ns() - t0;
    b->started++;
    vhost_poke(b->h[0]);
}

static void kickoff(void *arg, uint64_t now)
{
    struct bench *b = arg;
    int k = *(int *)((char *)arg + sizeof(*b));
    for (int i = 0; i < k && b->started < b->total; i++)
        start_one(b, now);
}

int main(int argc, char **argv)
{
    uint32_t size = 1000000;
    int rpcs = 200, outstanding = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--size") == 0)
            size = (uint32_t)strtoul(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--rpcs") == 0)
            rpcs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--outstanding") == 0)
            outstanding = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: engine-bench [--size B] [--rpcs N] [--outstanding K]\n");
            return 2;
        }
    }
    if (rpcs < 1 || outstanding < 1 || size > 64u << 20) {
        fprintf(stderr, "engine-bench: bad arguments\n");
        return 2;
    }
    struct {
        struct bench b;
        int k;
    } s;
    memset(&s, 0, sizeof(s));
    struct bench *b = &s.b;
    s.k = outstanding;
    struct vnet_config nc;
    vnet_config_default(&nc);
    nc.host_bps = 100000000000ull;
    b->net = vnet_create(&nc);
    homa_config hc;
    homa_config_default(&hc);
    hc.max_message_length = 64u << 20;
    b->size = size;
    b->total = rpcs;
    b->buf = calloc(size ? size : 1, 1);
    for (int i = 0; i < 2; i++) {
        b->h[i] = vhost_create(b->net, &hc, on_ready, b);
        b->h[i]->timing = true;
        homa_engine_port_open(b->h[i]->eng, SPORT);
        homa_engine_port_open(b->h[i]->eng, CPORT);
    }
    vnet_at(b->net, 0, kickoff, b);
    uint64_t t0 = vhost_clock_ns();
    vnet_run_until(b->net, 3600ull * 1000000000ull);
    uint64_t wall = vhost_clock_ns() - t0;
    if (b->done != rpcs) {
        fprintf(stderr, "engine-bench: only %d of %d RPCs completed\n", b->done, rpcs);
        return 1;
    }
    uint64_t pkts = 0, data = 0, eng_ns = b->api_ns;
    for (int i = 0; i < 2; i++) {
        homa_counters c;
        homa_engine_counters(b->h[i]->eng, &c);
        pkts += c.pkts_out + c.pkts_in;
        data += c.data_out;
        eng_ns += b->h[i]->eng_ns;
    }
    uint64_t events = vnet_events_processed(b->net);
    printf("engine-bench: %d RPCs of %u B (reply %u B), %d outstanding\n", rpcs, size,
           size < 100 ? size : 1, outstanding);
    printf("  packets handled by the engines: %llu (%llu DATA sent)\n", (unsigned long long)pkts,
           (unsigned long long)data);
    printf("  time inside homa_engine_* calls: %.3f ms = %.1f ns per packet handled\n",
           eng_ns / 1e6, (double)eng_ns / (double)pkts);
    printf("  whole run: %.3f ms wall, %llu simulator events, %.2f M events/s\n", wall / 1e6,
           (unsigned long long)events, (double)events * 1e3 / (double)wall);
    printf("PACKETS %llu\n", (unsigned long long)pkts);
    for (int i = 0; i < 2; i++)
        vhost_destroy(b->h[i]);
    vnet_destroy(b->net);
    free(b->buf);
    return 0;
}
