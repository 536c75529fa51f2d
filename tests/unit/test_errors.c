/* Unit tests for src/core/errors.c: homa_strerror. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <string.h>

#include <cmocka.h>

#include <homa/errors.h>

static void homa_strerror__all_codes(void **state)
{
    (void)state;
    static const int codes[] = {
        HOMA_OK,           HOMA_ERR_INVAL,     HOMA_ERR_NOMEM,   HOMA_ERR_AGAIN,
        HOMA_ERR_TIMEOUT,  HOMA_ERR_NOT_FOUND, HOMA_ERR_MSGSIZE, HOMA_ERR_PORT_IN_USE,
        HOMA_ERR_NO_PORT,  HOMA_ERR_ABORTED,   HOMA_ERR_LIMIT,   HOMA_ERR_STATE,
        HOMA_ERR_SHUTDOWN, HOMA_ERR_IO,        HOMA_ERR_ADDR,    HOMA_ERR_UNREACHABLE,
        HOMA_ERR_PERM,
    };
    const size_t n = sizeof(codes) / sizeof(codes[0]);
    for (size_t i = 0; i < n; i++) {
        const char *s = homa_strerror(codes[i]);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        assert_string_not_equal(s, "unknown error");
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(s, homa_strerror(codes[j]));
    }
}

static void homa_strerror__unknown(void **state)
{
    (void)state;
    static const int codes[] = {1, 100, -17, -1000, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        assert_string_equal(homa_strerror(codes[i]), "unknown error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_strerror__all_codes),
        cmocka_unit_test(homa_strerror__unknown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
