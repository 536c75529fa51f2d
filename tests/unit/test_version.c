/* Unit tests for src/core/version.c: the library's version functions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <homa/homa.h>

static void homa_version__matches_macros(void **state)
{
    (void)state;
    assert_int_equal(homa_version(), HOMA_VERSION_NUMBER);
    assert_int_equal(HOMA_VERSION_NUMBER,
                     (HOMA_VERSION_MAJOR << 16) | (HOMA_VERSION_MINOR << 8) | HOMA_VERSION_PATCH);
}

static void homa_version__matches_project_version(void **state)
{
    (void)state;
    /* HOMA_TEST_PROJECT_VERSION is CMake's project(VERSION). */
    assert_string_equal(HOMA_VERSION_STRING, HOMA_TEST_PROJECT_VERSION);
}

static void homa_version__usable_in_preprocessor(void **state)
{
    (void)state;
#if HOMA_VERSION_NUMBER < HOMA_VERSION_ENCODE(0, 1, 0)
    fail_msg("HOMA_VERSION_NUMBER is below 0.1.0 in #if");
#endif
    assert_true(HOMA_VERSION_ENCODE(0, 2, 0) > HOMA_VERSION_ENCODE(0, 1, 255));
    assert_true(HOMA_VERSION_ENCODE(1, 0, 0) > HOMA_VERSION_ENCODE(0, 255, 255));
}

static void homa_version_string__matches_number(void **state)
{
    (void)state;
    const char *s = homa_version_string();
    assert_non_null(s);
    assert_string_equal(s, HOMA_VERSION_STRING);
    unsigned major, minor, patch;
    char extra;
    assert_int_equal(sscanf(s, "%u.%u.%u%c", &major, &minor, &patch, &extra), 3);
    assert_true(minor < 256 && patch < 256);
    assert_int_equal((major << 16) | (minor << 8) | patch, homa_version());
    /* static storage: the same string every time */
    assert_ptr_equal(homa_version_string(), s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_version__matches_macros),
        cmocka_unit_test(homa_version__matches_project_version),
        cmocka_unit_test(homa_version__usable_in_preprocessor),
        cmocka_unit_test(homa_version_string__matches_number),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
