/* Unit tests for src/core/cutoffs.c: receiver-computed unscheduled cutoffs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <homa/workload.h>

#include "core/internal.h"

static homa_engine *make(bool adaptive)
{
    homa_config c;
    homa_config_default(&c);
    c.adaptive_cutoffs = adaptive;
    homa_engine *e;
    assert_int_equal(homa_engine_create(&c, NULL, &e), 0);
    return e;
}

static void homa_cutoffs_init__uses_configured_values(void **state)
{
    (void)state;
    homa_engine *e = make(true);
    assert_int_equal(e->cutoffs[7], 200);
    assert_int_equal(e->cutoffs[4], 1000000);
    assert_int_equal(e->max_sched_prio, 3);
    assert_int_equal(e->cutoff_version, 1);
    homa_cutoffs c;
    homa_engine_cutoffs(e, &c);
    assert_memory_equal(c.unsched, e->cutoffs, sizeof(c.unsched));
    assert_int_equal(c.version, 1);
    assert_int_equal(c.num_priorities, 8);
    assert_int_equal(c.max_sched_prio, 3);
    /* the accessor follows an update */
    for (int i = 0; i < 1000; i++)
        homa_cutoffs_observe(e, 100);
    homa_engine_cutoffs(e, &c);
    assert_int_equal(c.version, e->cutoff_version);
    assert_true(c.version > 1);
    assert_memory_equal(c.unsched, e->cutoffs, sizeof(c.unsched));
    assert_int_equal(c.max_sched_prio, e->max_sched_prio);
    homa_engine_destroy(e);
}

static void homa_cutoffs_observe__all_short_messages_use_every_level(void **state)
{
    (void)state;
    homa_engine *e = make(true);
    /* only unscheduled bytes: every level is unscheduled, shortest highest */
    for (int i = 0; i < 1000; i++)
        homa_cutoffs_observe(e, (uint32_t)(100 + (i % 8) * 100));
    assert_true(e->cutoff_version > 1);
    assert_int_equal(e->max_sched_prio, 0);
    for (int l = 7; l > 0; l--)
        assert_true(e->cutoffs[l] <= e->cutoffs[l - 1]);
    assert_true(e->cutoffs[7] < e->cutoffs[6] && e->cutoffs[6] < e->cutoffs[5]);
    /* equal byte shares: 100+200+300 B messages fill the top level */
    assert_true(e->cutoffs[7] >= 300 && e->cutoffs[7] < 400);
    assert_int_equal(e->cutoffs[0], 0x7fffffff);
    homa_engine_destroy(e);
}

static void homa_cutoffs_observe__split_by_bytes(void **state)
{
    (void)state;
    homa_engine *e = make(true);
    /* half short messages, half 1 MB ones: scheduled bytes dominate, so
     * one unscheduled level and seven scheduled ones */
    for (int i = 0; i < 1000; i++)
        homa_cutoffs_observe(e, i & 1 ? 1000000 : 500);
    assert_int_equal(e->max_sched_prio, 6);
    assert_int_equal(e->cutoffs[7], 0x7fffffff);
    for (int l = 1; l < 7; l++)
        assert_int_equal(e->cutoffs[l], 0);
    homa_counters c;
    homa_engine_counters(e, &c);
    assert_true(c.cutoff_updates >= 1);
    homa_engine_destroy(e);
}

static void homa_cutoffs_observe__w2_spreads_evenly(void **state)
{
    (void)state;
    homa_engine *e = make(true);
    homa_workload *w;
    assert_int_equal(homa_workload_load("w2", NULL, HOMA_DATA_DIR, &w), 0);
    uint32_t x = 7;
    for (int i = 0; i < 5000; i++) {
        x = x * 1664525u + 1013904223u;
        homa_cutoffs_observe(e, homa_workload_sample(w, (x >> 8) / 16777216.0, 0));
    }
    /* W2 is almost all unscheduled bytes: most levels carry unscheduled data
     * and the cutoffs grow downwards */
    assert_true(e->max_sched_prio <= 1);
    for (int l = 7; l > e->max_sched_prio + 1; l--)
        assert_true(e->cutoffs[l] < e->cutoffs[l - 1]);
    homa_workload_free(w);
    homa_engine_destroy(e);
}

static void homa_cutoffs_observe__off_keeps_configuration(void **state)
{
    (void)state;
    homa_engine *e = make(false);
    for (int i = 0; i < 5000; i++)
        homa_cutoffs_observe(e, 100);
    assert_int_equal(e->cutoff_version, 1);
    assert_int_equal(e->cutoffs[7], 200);
    homa_engine_destroy(e);
}

static void homa_engine_input__stale_sender_gets_new_cutoffs(void **state)
{
    (void)state;
    homa_engine *e = make(true);
    assert_int_equal(homa_engine_port_open(e, 7), 0);
    homa_addr peer;
    memset(&peer, 0, sizeof(peer));
    peer.bytes[15] = 3;
    uint8_t buf[HOMA_MAX_HDR_LEN + 100];
    for (int i = 0; i < 101; i++) {
        struct homa_wire_pkt p;
        memset(&p, 0, sizeof(p));
        p.type = HOMA_PKT_DATA;
        p.sport = 9;
        p.dport = 7;
        p.sender_id = 2 + 2 * (uint64_t)i;
        p.u.data.message_length = 100;
        p.u.data.incoming = 100;
        p.u.data.cutoff_version = 1;
        size_t hl = homa_wire_encode(&p, buf);
        assert_int_equal(homa_engine_input(e, (uint64_t)i * 2000000, &peer, buf, hl + 100), 0);
    }
    assert_true(e->cutoff_version > 1);
    homa_pkt_out out[256];
    int n = homa_engine_pull(e, 0, out, 256);
    struct homa_wire_pkt last;
    memset(&last, 0, sizeof(last));
    for (int i = 0; i < n; i++)
        if (out[i].type == HOMA_PKT_CUTOFFS)
            assert_int_equal(homa_wire_decode(out[i].hdr, out[i].hdr_len, &last), 0);
    homa_engine_pull_done(e);
    assert_int_equal(last.type, HOMA_PKT_CUTOFFS);
    assert_int_equal(last.u.cutoffs.version, e->cutoff_version);
    assert_memory_equal(last.u.cutoffs.cutoffs, e->cutoffs, sizeof(e->cutoffs));
    homa_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_cutoffs_init__uses_configured_values),
        cmocka_unit_test(homa_cutoffs_observe__all_short_messages_use_every_level),
        cmocka_unit_test(homa_cutoffs_observe__split_by_bytes),
        cmocka_unit_test(homa_cutoffs_observe__w2_spreads_evenly),
        cmocka_unit_test(homa_cutoffs_observe__off_keeps_configuration),
        cmocka_unit_test(homa_engine_input__stale_sender_gets_new_cutoffs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
