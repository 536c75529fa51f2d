/* Unit tests for src/rt/reqtab.c: a socket's unanswered requests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "rt/reqtab.h"

static homa_addr addr_n(uint8_t n)
{
    homa_addr a;
    memset(&a, 0, sizeof(a));
    a.bytes[15] = n;
    return a;
}

static void homa_reqtab_resolve__by_id_alone_or_by_client(void **state)
{
    (void)state;
    struct homa_reqtab r;
    memset(&r, 0, sizeof(r));
    homa_addr a = addr_n(1), b = addr_n(2), out;
    uint16_t port = 0;
    int n;
    assert_int_equal(homa_reqtab_resolve(&r, 7, NULL, 0, &out, &port, &n), HOMA_ERR_NOT_FOUND);
    homa_reqtab_add(&r, 7, &a, 1000);
    assert_int_equal(homa_reqtab_resolve(&r, 7, NULL, 0, &out, &port, &n), 0);
    assert_int_equal(n, 1);
    assert_memory_equal(&out, &a, sizeof(a));
    assert_int_equal(port, 1000);
    /* the same id from another client: ambiguous by id alone */
    homa_reqtab_add(&r, 7, &b, 1000);
    assert_int_equal(homa_reqtab_resolve(&r, 7, NULL, 0, &out, &port, &n), HOMA_ERR_STATE);
    assert_int_equal(n, 2);
    /* naming the client resolves it */
    assert_int_equal(homa_reqtab_resolve(&r, 7, &b, 1000, &out, &port, &n), 0);
    assert_int_equal(n, 1);
    assert_memory_equal(&out, &b, sizeof(b));
    /* a client that sent no such request: still answered as named */
    assert_int_equal(homa_reqtab_resolve(&r, 7, &b, 1001, &out, &port, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(port, 1001);
    assert_int_equal(homa_reqtab_forget(&r, 7, &a, 1000), 1);
    assert_int_equal(homa_reqtab_forget(&r, 7, &a, 1000), 0);
    assert_int_equal(homa_reqtab_resolve(&r, 7, NULL, 0, &out, &port, &n), 0);
    assert_memory_equal(&out, &b, sizeof(b));
    assert_int_equal(homa_reqtab_forget_id(&r, 7), 1);
    assert_int_equal(homa_reqtab_forget_id(&r, 7), 0);
    homa_reqtab_destroy(&r);
}

static void homa_reqtab_add__many_found_then_freed(void **state)
{
    (void)state;
    struct homa_reqtab r;
    memset(&r, 0, sizeof(r));
    homa_addr a = addr_n(3), out;
    uint16_t port;
    for (uint64_t id = 1; id < 2 * 5000; id += 2)
        homa_reqtab_add(&r, id, &a, (uint16_t)id);
    for (uint64_t id = 1; id < 2 * 5000; id += 2) {
        assert_int_equal(homa_reqtab_find(&r, id, NULL, 0, &out, &port), 1);
        assert_int_equal(port, (uint16_t)id);
    }
    assert_int_equal(homa_reqtab_find(&r, 2, NULL, 0, &out, &port), 0);
    homa_reqtab_destroy(&r); /* the rest are freed (ASan checks) */
}

static void homa_reqtab_done__answered_or_never_answerable(void **state)
{
    (void)state;
    assert_true(homa_reqtab_done(0));
    assert_true(homa_reqtab_done(HOMA_ERR_NOT_FOUND));
    assert_true(homa_reqtab_done(HOMA_ERR_STATE));
    assert_false(homa_reqtab_done(HOMA_ERR_NOMEM));
    assert_false(homa_reqtab_done(HOMA_ERR_MSGSIZE));
    assert_false(homa_reqtab_done(HOMA_ERR_SHUTDOWN));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_reqtab_resolve__by_id_alone_or_by_client),
        cmocka_unit_test(homa_reqtab_add__many_found_then_freed),
        cmocka_unit_test(homa_reqtab_done__answered_or_never_answerable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
