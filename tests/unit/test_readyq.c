/* Unit tests for src/core/readyq.h: which ready message a receive takes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/readyq.h"

static void homa_readyq_first__oldest_of_the_kinds_asked(void **state)
{
    (void)state;
    struct homa_readyq q;
    homa_readyq_init(&q);
    struct homa_readyq_node req1, resp1, req2, resp2;
    homa_readyq_node_init(&req1);
    homa_readyq_node_init(&resp1);
    homa_readyq_node_init(&req2);
    homa_readyq_node_init(&resp2);
    homa_readyq_push(&q, &resp1, false);
    homa_readyq_push(&q, &req1, true);
    homa_readyq_push(&q, &req2, true);
    homa_readyq_push(&q, &resp2, false);
    assert_ptr_equal(homa_readyq_first(&q, HOMA_RECV_ANY), &resp1);
    assert_ptr_equal(homa_readyq_first(&q, HOMA_RECV_REQUEST), &req1);
    assert_ptr_equal(homa_readyq_first(&q, HOMA_RECV_RESPONSE), &resp1);
    homa_readyq_remove(&resp1);
    assert_ptr_equal(homa_readyq_first(&q, HOMA_RECV_ANY), &req1);
    assert_ptr_equal(homa_readyq_first(&q, HOMA_RECV_RESPONSE), &resp2);
    homa_readyq_remove(&req1);
    homa_readyq_remove(&req2);
    assert_ptr_equal(homa_readyq_first(&q, HOMA_RECV_ANY), &resp2);
    assert_null(homa_readyq_first(&q, HOMA_RECV_REQUEST));
}

static void homa_readyq_first__empty_or_no_kind(void **state)
{
    (void)state;
    struct homa_readyq q;
    homa_readyq_init(&q);
    assert_null(homa_readyq_first(&q, HOMA_RECV_ANY));
    struct homa_readyq_node n;
    homa_readyq_node_init(&n);
    homa_readyq_push(&q, &n, true);
    assert_null(homa_readyq_first(&q, 0));
    assert_null(homa_readyq_first(&q, HOMA_RECV_RESPONSE));
    assert_true(homa_readyq_linked(&n));
}

static void homa_readyq_remove__twice_is_harmless(void **state)
{
    (void)state;
    struct homa_readyq q;
    homa_readyq_init(&q);
    struct homa_readyq_node a, b;
    homa_readyq_node_init(&a);
    homa_readyq_node_init(&b);
    homa_readyq_remove(&a); /* never queued */
    homa_readyq_push(&q, &a, false);
    homa_readyq_push(&q, &b, false);
    homa_readyq_remove(&a);
    homa_readyq_remove(&a);
    assert_false(homa_readyq_linked(&a));
    assert_ptr_equal(homa_readyq_first(&q, HOMA_RECV_ANY), &b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_readyq_first__oldest_of_the_kinds_asked),
        cmocka_unit_test(homa_readyq_first__empty_or_no_kind),
        cmocka_unit_test(homa_readyq_remove__twice_is_harmless),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
