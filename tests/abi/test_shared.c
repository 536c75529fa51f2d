/* Links libhoma.so (not the static library): the public API resolves, the
 * version functions report the loaded library, internal names do not. */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <homa/coll.h>
#include <homa/homa.h>
#include <homa/workload.h>

static void homa_version__from_shared_library(void **state)
{
    (void)state;
    assert_int_equal(homa_version(), HOMA_VERSION_NUMBER);
    assert_string_equal(homa_version_string(), HOMA_VERSION_STRING);
    /* the symbol comes from libhoma.so.0, not from this executable */
    Dl_info info;
    assert_true(dladdr((void *)homa_version, &info) != 0);
    assert_non_null(info.dli_fname);
    assert_non_null(strstr(info.dli_fname, "libhoma.so"));
}

static void homa_strerror__public_symbol_resolves(void **state)
{
    (void)state;
    assert_non_null(dlsym(RTLD_DEFAULT, "homa_strerror"));
    assert_non_null(dlsym(RTLD_DEFAULT, "homa_engine_create"));
    assert_non_null(dlsym(RTLD_DEFAULT, "homa_allreduce"));
}

static void homa_internal__symbols_hidden(void **state)
{
    (void)state;
    /* one internal name per layer: engine, wire, collectives, driver */
    static const char *hidden[] = {"homa_buf_get",     "homa_wire_encode", "coll_begin",
                                   "homa_coll_reduce", "homa_udp_ops",     "homa_pcap_open"};
    for (size_t i = 0; i < sizeof(hidden) / sizeof(hidden[0]); i++) {
        if (dlsym(RTLD_DEFAULT, hidden[i]) != NULL) fail_msg("%s is exported", hidden[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_version__from_shared_library),
        cmocka_unit_test(homa_strerror__public_symbol_resolves),
        cmocka_unit_test(homa_internal__symbols_hidden),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
