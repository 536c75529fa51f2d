/* Loss recovery resends only lost ranges.  On the virtual network
 * (exact, repeatable) at 1 %, 5 % and 20 % random loss, with Ethernet-sized
 * packets and with loopback-sized ones (65,000 B of payload, where one lost
 * packet is a big range), every RPC completes exactly once and the bytes
 * retransmitted after RESENDs stay at most 1.5 times the payload bytes the
 * network dropped, for each workload and seed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "loss_run.h"

static void check_workload(const char *name, uint32_t payload)
{
    homa_workload *w;
    assert_int_equal(homa_workload_load(name, NULL, HOMA_DATA_DIR, &w), 0);
    static const double losses[] = {0.01, 0.05, 0.2};
    for (unsigned l = 0; l < sizeof(losses) / sizeof(losses[0]); l++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            struct loss_fig f = loss_run(w, 300, 8, losses[l], seed, payload);
            printf("  %s payload %u loss %.0f%% seed %llu: lost %llu B, resent/lost %.3f, "
                   "extra/lost %.3f, failed %d, twice %d\n",
                   name, payload, losses[l] * 100, (unsigned long long)seed,
                   (unsigned long long)f.lost_bytes, f.ratio, f.extra, f.failed, f.twice);
            assert_int_equal(f.failed, 0);
            assert_int_equal(f.twice, 0);
            assert_true(f.lost_bytes > 0);
            assert_true(f.ratio <= 1.5);
            assert_true(f.extra <= 1.5);
        }
    homa_workload_free(w);
}

static void loss_efficiency__w3_ethernet_packets(void **state)
{
    (void)state;
    check_workload("w3", 0);
}

static void loss_efficiency__w4_loopback_packets(void **state)
{
    (void)state;
    check_workload("w4", 65000);
}

static void loss_efficiency__w5_loopback_packets(void **state)
{
    (void)state;
    check_workload("w5", 65000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loss_efficiency__w3_ethernet_packets),
        cmocka_unit_test(loss_efficiency__w4_loopback_packets),
        cmocka_unit_test(loss_efficiency__w5_loopback_packets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
