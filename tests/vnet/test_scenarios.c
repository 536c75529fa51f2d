/* Deterministic virtual-network scenarios: the real engine on every host of
 * a vnet, exact outcomes asserted.  Every random choice comes from the vnet
 * seed; a failing run prints it, and VNET_SEED=<seed> replays it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <homa/workload.h>

#include "scenario.h"

#define US 1000ull
#define MS 1000000ull
#define GBPS 1000000000ull

static void net_config(struct vnet_config *n, uint64_t seed)
{
    vnet_config_default(n);
    n->seed = vnet_seed_from_env(seed);
    n->host_bps = 10 * GBPS;
    n->host_delay_ns = 250;
    n->switch_delay_ns = 250;
    n->port_buffer_bytes = 2000000;
}

/* Wire time of one full packet at 10 Gb/s (1,400 B payload + 56 B header). */
static const uint64_t PKT_NS = (1400 + 56) * 8 / 10;

/* a. single RPCs of edge sizes, payloads compared byte for byte */
static void scenario__single_rpcs(void **state)
{
    (void)state;
    uint32_t sizes[] = {0, 1, 1400, 1401, 100000, 1000000, 10000000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        struct vnet_config n;
        net_config(&n, 1);
        homa_config h;
        homa_config_default(&h);
        h.max_message_length = 16u << 20;
        struct scenario sc;
        sc_init(&sc, &n, &h, 2);
        int idx = sc_add_rpc(&sc, 10 * US, 0, 1, sizes[i]);
        bool done = sc_run(&sc, 1000 * MS);
        if (!done || sc.completed != 1 || sc.verify_errors) sc_dump(&sc);
        assert_true(done);
        assert_int_equal(sc.completed, 1);
        assert_int_equal(sc.verify_errors, 0);
        assert_int_equal(sc.bad_deliveries, 0);
        assert_int_equal(sc.rpcs[idx].server_deliveries, 1);
        assert_true(sc.rpcs[idx].verified);
        /* on an idle network the echo takes about two message times */
        uint64_t ideal = 2 * ((uint64_t)sizes[i] * 8 / 10 + 2 * PKT_NS);
        uint64_t took = sc.rpcs[idx].done - sc.rpcs[idx].start;
        assert_true(took < ideal * 3 / 2 + 20 * US);
        sc_destroy(&sc);
    }
}

/* b. 1,000 W4 RPCs among 8 hosts under loss, duplication and reordering */
static uint64_t run_w4_lossy(uint64_t seed, bool expect_ok)
{
    struct vnet_config n;
    net_config(&n, seed);
    n.faults.loss = 0.05;
    n.faults.dup = 0.01;
    n.faults.reorder = 0.05;
    n.faults.reorder_max_ns = 20 * US;
    homa_config h;
    homa_config_default(&h);
    h.max_message_length = 16u << 20;
    homa_workload *w;
    assert_int_equal(homa_workload_load("w4", NULL, HOMA_DATA_DIR, &w), 0);
    struct scenario sc;
    sc_init(&sc, &n, &h, 8);
    struct vnet_rng *rng = vnet_rng(sc.net);
    uint64_t t = 0;
    for (int i = 0; i < 1000; i++) {
        int src = (int)vnet_rng_below(rng, 8);
        int dst = (int)vnet_rng_below(rng, 7);
        if (dst >= src) dst++;
        uint32_t len = homa_workload_sample(w, vnet_rng_uniform(rng), 0);
        if (len < 4) len = 4;
        t += (uint64_t)vnet_rng_exp(rng, 50 * US);
        sc_add_rpc(&sc, t, src, dst, len);
    }
    homa_workload_free(w);
    bool done = sc_run(&sc, 20000 * MS);
    uint64_t digest = 1469598103934665603ull;
    int once = 0, served_once = 0;
    for (int i = 0; i < sc.nrpcs; i++) {
        once += sc.rpcs[i].completions == 1 && sc.rpcs[i].err == 0 && sc.rpcs[i].verified;
        served_once += sc.rpcs[i].server_deliveries == 1;
        digest = (digest ^ sc.rpcs[i].done) * 1099511628211ull;
    }
    if (expect_ok && (!done || once != 1000 || served_once != 1000)) sc_dump(&sc);
    if (expect_ok) {
        assert_true(done);
        assert_int_equal(sc.completed, 1000);
        assert_int_equal(sc.failed, 0);
        assert_int_equal(sc.verify_errors, 0);
        assert_int_equal(sc.bad_deliveries, 0);
        assert_int_equal(once, 1000);
        assert_int_equal(served_once, 1000);
        struct vnet_stats vs;
        vnet_get_stats(sc.net, &vs);
        assert_true(vs.drops_loss > 0 && vs.dups > 0 && vs.reorders > 0);
        /* the duplicates really reached the engines and were ignored */
        uint64_t dup_drops = 0;
        for (int i = 0; i < sc.n; i++) {
            homa_counters c;
            homa_engine_counters(sc.h[i]->eng, &c);
            dup_drops += c.drop_duplicate;
        }
        assert_true(dup_drops > 0);
    }
    sc_destroy(&sc);
    return digest;
}

static void scenario__w4_lossy_exactly_once(void **state)
{
    (void)state;
    run_w4_lossy(7, true);
}

static void scenario__same_seed_same_run(void **state)
{
    (void)state;
    uint64_t a = run_w4_lossy(11, false);
    uint64_t b = run_w4_lossy(11, false);
    assert_true(a == b);
}

/* c. a one-packet message overtakes a 10 MB message to the same receiver */
static uint64_t short_latency(int short_src, bool with_long)
{
    struct vnet_config n;
    net_config(&n, 3);
    homa_config h;
    homa_config_default(&h);
    h.max_message_length = 16u << 20;
    struct scenario sc;
    sc_init(&sc, &n, &h, 3);
    sc.reply_len = 1;
    if (with_long) sc_add_rpc(&sc, 0, 0, 2, 10000000);
    int s = sc_add_rpc(&sc, 2 * MS, short_src, 2, 100);
    bool done = sc_run(&sc, 1000 * MS);
    assert_true(done);
    assert_int_equal(sc.completed, with_long ? 2 : 1);
    /* the long message is still in flight when the short one lands */
    if (with_long) assert_true(sc.rpcs[0].server_at > sc.rpcs[s].server_at);
    uint64_t lat = sc.rpcs[s].server_at - sc.rpcs[s].start;
    sc_destroy(&sc);
    return lat;
}

static void scenario__short_message_preempts_long(void **state)
{
    (void)state;
    uint64_t idle = short_latency(1, false);
    uint64_t other_sender = short_latency(1, true);
    uint64_t same_sender = short_latency(0, true);
    fprintf(stderr,
            "short message one-way: idle %llu ns, behind 10 MB from another sender %llu "
            "ns, from the same sender %llu ns (packet time %llu ns)\n",
            (unsigned long long)idle, (unsigned long long)other_sender,
            (unsigned long long)same_sender, (unsigned long long)PKT_NS);
    assert_true(other_sender <= idle + 3 * PKT_NS);
    assert_true(same_sender <= idle + 3 * PKT_NS);
}

/* d. incast: 16 senders x 1 MB to one receiver */
static void scenario__incast_respects_max_incoming(void **state)
{
    (void)state;
    struct vnet_config n;
    net_config(&n, 5);
    homa_config h;
    homa_config_default(&h);
    struct scenario sc;
    sc_init(&sc, &n, &h, 17);
    sc.reply_len = 8;
    for (int i = 1; i <= 16; i++)
        sc_add_rpc(&sc, 0, i, 0, 1000000);
    bool done = sc_run(&sc, 1000 * MS);
    if (!done) sc_dump(&sc);
    assert_true(done);
    assert_int_equal(sc.completed, 16);
    assert_int_equal(sc.verify_errors, 0);
    homa_counters c;
    homa_engine_counters(sc.h[0]->eng, &c);
    uint64_t bound = h.max_incoming + 16ull * h.unsched_bytes;
    uint64_t last = 0;
    for (int i = 0; i < 16; i++)
        if (sc.rpcs[i].server_at > last) last = sc.rpcs[i].server_at;
    struct vnet_port_stats ps;
    vnet_get_port_stats(sc.net, vnet_host_tor(sc.net, 0), vnet_host_port(sc.net, 0), &ps);
    double busy = (double)ps.busy_ns / (double)last;
    fprintf(stderr,
            "incast: incoming peak %llu B (bound %llu), bottleneck busy %.1f %% over "
            "%.3f ms, switch queue peak %llu B, drops %llu\n",
            (unsigned long long)c.incoming_peak, (unsigned long long)bound, busy * 100, last / 1e6,
            (unsigned long long)ps.max_occupancy, (unsigned long long)ps.drops);
    assert_true(c.incoming_peak <= bound);
    assert_true(busy >= 0.90);
    sc_destroy(&sc);
}

/* e. a server that dies mid-RPC */
static void scenario__dead_server_times_out(void **state)
{
    (void)state;
    struct vnet_config n;
    net_config(&n, 9);
    homa_config h;
    homa_config_default(&h);
    struct scenario sc;
    sc_init(&sc, &n, &h, 2);
    int idx = sc_add_rpc(&sc, 0, 0, 1, 1000000);
    /* 1 MB takes 0.8 ms at 10 Gb/s: kill the server half way */
    vnet_run_until(sc.net, 400 * US);
    vnet_host_set_down(sc.net, 1, true);
    uint64_t died = vnet_now(sc.net);
    bool done = sc_run(&sc, 1000 * MS);
    assert_true(done);
    struct sc_rpc *r = &sc.rpcs[idx];
    assert_int_equal(r->err, HOMA_ERR_TIMEOUT);
    assert_int_equal(r->completions, 1);
    uint64_t after = r->done - died;
    fprintf(stderr, "dead server: timeout reported %.3f ms after the server died\n", after / 1e6);
    assert_true(after <= (uint64_t)(h.timeout_ticks + 1) * h.tick_ns);
    assert_true(after >= (uint64_t)(h.timeout_ticks - 1) * h.tick_ns);
    /* nothing left behind on the client */
    vnet_run_until(sc.net, vnet_now(sc.net) + 10 * MS);
    homa_counters c;
    homa_engine_counters(sc.h[0]->eng, &c);
    assert_int_equal(c.rpcs_live, 0);
    assert_int_equal(c.rx_bytes_in_use, 0);
    assert_int_equal(c.incoming_bytes, 0);
    assert_int_equal(c.client_timeouts, 1);
    homa_pkt_out o;
    assert_int_equal(homa_engine_pull(sc.h[0]->eng, vnet_now(sc.net), &o, 1), 0);
    sc_destroy(&sc);
}

/* A long request held back by its own sender's SRPT (shorter messages to
 * another host keep the NIC busy for longer than timeout_ticks) must wait,
 * not time out. */
static void scenario__held_back_request_does_not_time_out(void **state)
{
    (void)state;
    struct vnet_config n;
    net_config(&n, 13);
    n.host_bps = 1 * GBPS;
    homa_config h;
    homa_config_default(&h);
    h.max_message_length = 16u << 20;
    struct scenario sc;
    sc_init(&sc, &n, &h, 3);
    sc.reply_len = 1;
    int big = sc_add_rpc(&sc, 0, 0, 1, 10000000);
    /* 40 x 1 MB = 320 ms of the sender's link, all shorter than 10 MB */
    for (int i = 0; i < 40; i++) sc_add_rpc(&sc, 10 * US, 0, 2, 1000000);
    bool done = sc_run(&sc, 5000 * MS);
    if (!done || sc.failed) sc_dump(&sc);
    assert_true(done);
    assert_int_equal(sc.failed, 0);
    assert_int_equal(sc.rpcs[big].err, 0);
    assert_true(sc.rpcs[big].done > 300 * MS); /* it really waited */
    sc_destroy(&sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scenario__single_rpcs),
        cmocka_unit_test(scenario__w4_lossy_exactly_once),
        cmocka_unit_test(scenario__same_seed_same_run),
        cmocka_unit_test(scenario__short_message_preempts_long),
        cmocka_unit_test(scenario__incast_respects_max_incoming),
        cmocka_unit_test(scenario__dead_server_times_out),
        cmocka_unit_test(scenario__held_back_request_does_not_time_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
