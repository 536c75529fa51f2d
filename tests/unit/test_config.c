/* Unit tests for src/core/config.c: defaults, validation and counter names.  Names follow
 * function__case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
#include "support/engine_test.h"

static void homa_config_validate__defaults_ok(void **state)
{
    (void)state;
    homa_config c;
    homa_config_default(&c);
    const char *why;
    assert_int_equal(homa_config_validate(&c, &why), 0);
    c.num_priorities = 9;
    assert_int_equal(homa_config_validate(&c, &why), HOMA_ERR_INVAL);
    assert_non_null(why);
    homa_config_default(&c);
    c.timeout_ticks = c.resend_ticks;
    assert_int_equal(homa_config_validate(&c, NULL), HOMA_ERR_INVAL);
    homa_config_default(&c);
    c.num_priorities = 4; /* cutoffs at 4..7 must then be cleared */
    assert_int_equal(homa_config_validate(&c, NULL), HOMA_ERR_INVAL);
    homa_engine *e = NULL;
    assert_int_equal(homa_engine_create(&c, NULL, &e), HOMA_ERR_INVAL);
    assert_null(e);
}

static void homa_counter_name__all_named(void **state)
{
    (void)state;
    size_t n = homa_counter_count();
    assert_int_equal(n * sizeof(uint64_t), sizeof(homa_counters));
    for (size_t i = 0; i < n; i++) {
        assert_non_null(homa_counter_name(i));
        assert_non_null(homa_counter_desc(i));
    }
    assert_null(homa_counter_name(n));
    for (int r = 0; r < HOMA_DROP__COUNT; r++)
        assert_non_null(homa_drop_reason_name(r));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_config_validate__defaults_ok),
        cmocka_unit_test(homa_counter_name__all_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
