/* The real engine on the virtual network under the new faults: each Homa
 * packet type lost in turn (RPCs must still complete, exactly once), and
 * blackouts shorter than the timeout (nothing fails) and longer (the RPCs
 * fail with HOMA_ERR_TIMEOUT within timeout + one tick).  Fixed seeds;
 * VNET_SEED=<seed> replays a run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <homa/homa.h>

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

static const char *const class_name[HOMA_FAULT_CLASS_COUNT] = {
    "data", "last_data", "grant",  "resend",   "unknown",
    "busy", "cutoffs",   "freeze", "need_ack", "ack"};

/* 300 RPCs among 4 hosts, sizes from 4 B to 300 KB (unscheduled only, and
 * granted), with class c lost at `rate` and every packet at base_loss.
 * Counts the RPCs that did not complete exactly once with the right bytes.
 * At least 4 bytes: the scenario server tells shorter requests apart only
 * by source and length, which misattributes them when they overtake each
 * other. */
struct outcome {
    int bad, timeouts, twice, unserved;
    bool done;
};

static struct outcome run_class(int c, double rate, double base_loss, uint64_t seed)
{
    struct vnet_config n;
    net_config(&n, seed);
    n.faults.class_loss[c] = rate;
    n.faults.loss = base_loss;
    homa_config h;
    homa_config_default(&h);
    struct scenario sc;
    sc_init(&sc, &n, &h, 4);
    struct vnet_rng *rng = vnet_rng(sc.net);
    static const uint32_t sizes[] = {4, 100, 1400, 5000, 20000, 60000, 150000, 300000};
    uint64_t t = 0;
    for (int i = 0; i < 300; i++) {
        int src = (int)vnet_rng_below(rng, 4);
        int dst = (int)vnet_rng_below(rng, 3);
        if (dst >= src) dst++;
        t += (uint64_t)vnet_rng_exp(rng, 20 * US);
        sc_add_rpc(&sc, t, src, dst, sizes[vnet_rng_below(rng, 8)]);
    }
    bool done = sc_run(&sc, 20000 * MS);
    int bad = 0, timeouts = 0, twice = 0, unserved = 0;
    for (int i = 0; i < sc.nrpcs; i++) {
        const struct sc_rpc *r = &sc.rpcs[i];
        int ok = r->completions == 1 && r->err == 0 && r->verified && r->server_deliveries == 1;
        if (!ok) {
            if (bad < 8)
                fprintf(stderr,
                        "  rpc %d: %d -> %d, %u B, start %.3f ms, done %.3f ms: err %d, %d "
                        "completions, %d server deliveries\n",
                        i, r->src, r->dst, r->len, r->start / 1e6, r->done / 1e6, r->err,
                        r->completions, r->server_deliveries);
            bad++;
            timeouts += r->err == HOMA_ERR_TIMEOUT;
            twice += r->server_deliveries > 1;
            unserved += r->err == 0 && r->server_deliveries == 0;
        }
    }
    if (bad)
        fprintf(stderr, "  %d timed out, %d served twice or more, %d completed unserved\n",
                timeouts, twice, unserved);
    struct vnet_stats vs;
    vnet_get_stats(sc.net, &vs);
    fprintf(stderr, "drop_%s=%.2f (+ loss %.2f): %d/%d RPCs bad, %llu type drops, %llu losses%s\n",
            class_name[c], rate, base_loss, bad, sc.nrpcs, (unsigned long long)vs.drops_type,
            (unsigned long long)vs.drops_loss, done ? "" : ", not all finished");
    if (bad || !done) sc_dump(&sc);
    sc_destroy(&sc);
    return (struct outcome){bad, timeouts, twice, unserved, done};
}

/* Each type in turn, half of its packets lost, with 2 % base loss so that
 * RESEND, BUSY and friends really happen.  DATA (every DATA packet, the
 * retransmissions too) is lost at 40 %: at 50 % the engine times RPCs out,
 * see fault_scenario__half_of_data_lost below. */
static void fault_scenario__each_type_lost_rpcs_complete(void **state)
{
    (void)state;
    int failed_classes = 0;
    for (int c = 0; c < HOMA_FAULT_CLASS_COUNT; c++) {
        if (c == HOMA_FAULT_CLASS_FREEZE) continue; /* the engine never sends FREEZE */
        double rate = c == HOMA_FAULT_CLASS_DATA ? 0.4 : 0.5;
        struct outcome o = run_class(c, rate, 0.02, 100 + (uint64_t)c);
        failed_classes += o.bad != 0 || !o.done;
    }
    assert_int_equal(failed_classes, 0);
}

/* Half of all DATA packets lost (retransmissions too) and nothing else:
 * every RPC completes exactly once.  Before the engine's liveness fixes,
 * seed 100 timed out 6 RPCs (one RPC's silence failed its whole peer) and
 * served 4 requests twice (the server gave up on a live client). */
static void fault_scenario__half_of_data_lost(void **state)
{
    (void)state;
    struct outcome o = run_class(HOMA_FAULT_CLASS_DATA, 0.5, 0.0, 100);
    assert_true(o.done);
    assert_int_equal(o.bad, 0);
}

/* The last DATA packet of every message lost, retransmissions too: no
 * message can complete, so every RPC must fail with HOMA_ERR_TIMEOUT
 * (none may hang, none may be delivered). */
static void fault_scenario__last_data_always_lost_every_rpc_times_out(void **state)
{
    (void)state;
    struct outcome o = run_class(HOMA_FAULT_CLASS_LAST_DATA, 1.0, 0.0, 300);
    assert_true(o.done);
    assert_int_equal(o.bad, 300);
    assert_int_equal(o.timeouts, 300);
    assert_int_equal(o.twice + o.unserved, 0);
}

/* Types whose every packet may vanish without any RPC failing: the
 * protocol only uses them to speed things up or free state. */
static void fault_scenario__optional_types_lost_entirely(void **state)
{
    (void)state;
    static const int optional[] = {HOMA_FAULT_CLASS_CUTOFFS, HOMA_FAULT_CLASS_ACK,
                                   HOMA_FAULT_CLASS_NEED_ACK, HOMA_FAULT_CLASS_BUSY};
    int failed = 0;
    for (size_t i = 0; i < sizeof(optional) / sizeof(optional[0]); i++) {
        struct outcome o = run_class(optional[i], 1.0, 0.0, 200 + i);
        failed += o.bad != 0 || !o.done;
    }
    assert_int_equal(failed, 0);
}

/* 1 MB RPCs from three hosts to a fourth, started from 4 ms on; a blackout
 * of every packet of every host from 5 ms for `len`. */
static void blackout_run(struct scenario *sc, homa_config *h, uint64_t len, uint64_t seed)
{
    struct vnet_config n;
    net_config(&n, seed);
    n.faults.blackout_start_ns = 5 * MS;
    n.faults.blackout_ns = len;
    homa_config_default(h);
    sc_init(sc, &n, h, 4);
    for (int i = 0; i < 12; i++)
        sc_add_rpc(sc, 4 * MS + (uint64_t)i * 200 * US, i % 3, 3, 1000000);
}

static void fault_scenario__blackout_shorter_than_timeout_fails_nothing(void **state)
{
    (void)state;
    struct scenario sc;
    homa_config h;
    blackout_run(&sc, &h, 50 * MS, 31); /* timeout: 100 ticks of 1 ms */
    bool done = sc_run(&sc, 5000 * MS);
    struct vnet_stats vs;
    vnet_get_stats(sc.net, &vs);
    fprintf(stderr, "blackout 50 ms: %d ok, %d failed, %llu packets blacked out\n", sc.completed,
            sc.failed, (unsigned long long)vs.drops_blackout);
    if (!done || sc.failed) sc_dump(&sc);
    assert_true(done);
    assert_int_equal(sc.failed, 0);
    assert_int_equal(sc.completed, 12);
    assert_true(vs.drops_blackout > 0);
    /* the blackout really held them up */
    int after = 0;
    for (int i = 0; i < sc.nrpcs; i++)
        after += sc.rpcs[i].done > 55 * MS;
    assert_true(after > 0);
    sc_destroy(&sc);
}

static void fault_scenario__blackout_longer_than_timeout_fails_in_time(void **state)
{
    (void)state;
    struct scenario sc;
    homa_config h;
    blackout_run(&sc, &h, 10000 * MS, 32);
    bool done = sc_run(&sc, 5000 * MS);
    assert_true(done);
    uint64_t tick = h.tick_ns, timeout = (uint64_t)h.timeout_ticks * tick;
    int timed_out = 0;
    for (int i = 0; i < sc.nrpcs; i++) {
        const struct sc_rpc *r = &sc.rpcs[i];
        assert_int_equal(r->completions, 1);
        if (r->err == 0) {
            assert_true(r->done <= 5 * MS); /* finished before the lights went out */
            continue;
        }
        assert_int_equal(r->err, HOMA_ERR_TIMEOUT);
        timed_out++;
        /* Silence starts at the blackout (or at the start, if later). */
        uint64_t from = r->start > 5 * MS ? r->start : 5 * MS;
        uint64_t took = r->done - from;
        if (took > timeout + tick || took < timeout - tick)
            fail_msg("rpc %d failed %.3f ms after the silence began (timeout %.0f ms)", i,
                     took / 1e6, timeout / 1e6);
    }
    fprintf(stderr, "blackout 10 s: %d of %d RPCs timed out, each within timeout +- 1 tick\n",
            timed_out, sc.nrpcs);
    assert_true(timed_out >= 8);
    sc_destroy(&sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fault_scenario__each_type_lost_rpcs_complete),
        cmocka_unit_test(fault_scenario__half_of_data_lost),
        cmocka_unit_test(fault_scenario__last_data_always_lost_every_rpc_times_out),
        cmocka_unit_test(fault_scenario__optional_types_lost_entirely),
        cmocka_unit_test(fault_scenario__blackout_shorter_than_timeout_fails_nothing),
        cmocka_unit_test(fault_scenario__blackout_longer_than_timeout_fails_in_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
