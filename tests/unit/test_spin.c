/* Unit tests for src/rt/spin.h: the adaptive busy-poll budget and the gate
 * that decides whether a spinning thread yields its core. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rt/spin.h"

#define US 1000ull
#define MS 1000000ull

static void homa_spin_result__failure_halves_success_restores(void **state)
{
    (void)state;
    struct homa_spin s;
    homa_spin_init(&s, 50 * US);
    assert_int_equal(homa_spin_budget(&s), 50 * US);
    homa_spin_result(&s, 0);
    assert_int_equal(homa_spin_budget(&s), 25 * US);
    homa_spin_result(&s, 1);
    assert_int_equal(homa_spin_budget(&s), 50 * US);
}

static void homa_spin_budget__zero_probes_one_wait_in_64(void **state)
{
    (void)state;
    struct homa_spin s;
    homa_spin_init(&s, 50 * US);
    homa_spin_preempted(&s);
    int full = 0;
    for (int i = 0; i < 640; i++)
        full += homa_spin_budget(&s) == 50 * US;
    assert_int_equal(full, 10);
}

static void homa_yield_took__short_yields_keep_yielding(void **state)
{
    (void)state;
    struct homa_yield y;
    homa_yield_init(&y);
    uint64_t now = 1000 * MS;
    /* The quiet machine: yields of a few microseconds, with an
     * occasional long one (3 in each window of 64) never turn it off. */
    for (int i = 0; i < 10000; i++) {
        now += 5 * US;
        homa_yield_took(&y, now, i % 64 < 3 ? 100 * US : 5 * US);
        assert_true(homa_yield_allowed(&y, now));
    }
}

static void homa_yield_took__long_yields_turn_it_off_for_a_while(void **state)
{
    (void)state;
    struct homa_yield y;
    homa_yield_init(&y);
    uint64_t now = 1000 * MS;
    for (unsigned i = 0; i < HOMA_YIELD_MAX_LONG - 1; i++) {
        homa_yield_took(&y, now, 200 * US);
        assert_true(homa_yield_allowed(&y, now));
    }
    homa_yield_took(&y, now, 200 * US);
    assert_false(homa_yield_allowed(&y, now));
    assert_false(homa_yield_allowed(&y, now + HOMA_YIELD_OFF_MIN_NS - 1));
    assert_true(homa_yield_allowed(&y, now + HOMA_YIELD_OFF_MIN_NS));
}

static void homa_yield_took__one_very_long_yield_is_enough(void **state)
{
    (void)state;
    struct homa_yield y;
    homa_yield_init(&y);
    homa_yield_took(&y, 10 * MS, HOMA_YIELD_HOG_NS);
    assert_false(homa_yield_allowed(&y, 10 * MS));
}

static void homa_yield_took__hold_off_doubles_then_resets(void **state)
{
    (void)state;
    struct homa_yield y;
    homa_yield_init(&y);
    uint64_t now = 1000 * MS, off = HOMA_YIELD_OFF_MIN_NS;
    /* A neighbour that stays: every probe fails, the hold-off doubles up
     * to its maximum. */
    for (int i = 0; i < 10; i++) {
        homa_yield_took(&y, now, 2 * MS);
        assert_false(homa_yield_allowed(&y, now + off - 1));
        assert_true(homa_yield_allowed(&y, now + off));
        now += off;
        off = off * 2 > HOMA_YIELD_OFF_MAX_NS ? HOMA_YIELD_OFF_MAX_NS : off * 2;
    }
    assert_int_equal(off, HOMA_YIELD_OFF_MAX_NS);
    /* It left: one calm window brings the hold-off back to its minimum. */
    for (unsigned i = 0; i < HOMA_YIELD_WINDOW; i++)
        homa_yield_took(&y, now, 5 * US);
    homa_yield_took(&y, now, 2 * MS);
    assert_true(homa_yield_allowed(&y, now + HOMA_YIELD_OFF_MIN_NS));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_spin_result__failure_halves_success_restores),
        cmocka_unit_test(homa_spin_budget__zero_probes_one_wait_in_64),
        cmocka_unit_test(homa_yield_took__short_yields_keep_yielding),
        cmocka_unit_test(homa_yield_took__long_yields_turn_it_off_for_a_while),
        cmocka_unit_test(homa_yield_took__one_very_long_yield_is_enough),
        cmocka_unit_test(homa_yield_took__hold_off_doubles_then_resets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
