/* Unit tests for src/core/msgin.c: out-of-order reassembly and gaps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"

static uint8_t src[100000];

static void init_src(void)
{
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (uint8_t)(i * 13 + (i >> 9));
}

static int add(struct homa_msgin *m, uint32_t off, uint32_t len, uint32_t *added)
{
    return homa_msgin_add(m, 0, off, src + off, len, added);
}

static void homa_msgin_add__in_order(void **state)
{
    (void)state;
    struct homa_msgin m;
    assert_int_equal(homa_msgin_init(&m, 3000, 3000), 0);
    uint32_t a;
    assert_int_equal(add(&m, 0, 1400, &a), HOMA_MSGIN_NEW);
    assert_int_equal(a, 1400);
    assert_int_equal(add(&m, 1400, 1400, &a), HOMA_MSGIN_NEW);
    assert_int_equal(add(&m, 2800, 200, &a), HOMA_MSGIN_NEW);
    assert_true(homa_msgin_complete(&m));
    assert_int_equal(m.num_gaps, 0);
    assert_memory_equal(m.buf, src, 3000);
    homa_msgin_destroy(&m);
}

static void homa_msgin_add__reverse_order_and_duplicates(void **state)
{
    (void)state;
    struct homa_msgin m;
    assert_int_equal(homa_msgin_init(&m, 7000, 7000), 0);
    uint32_t a;
    for (int i = 4; i >= 0; i--) {
        assert_int_equal(add(&m, (uint32_t)i * 1400, 1400, &a), HOMA_MSGIN_NEW);
        assert_int_equal(add(&m, (uint32_t)i * 1400, 1400, &a), HOMA_MSGIN_DUP);
        assert_int_equal(a, 0);
    }
    assert_true(homa_msgin_complete(&m));
    assert_int_equal(m.received, 7000);
    assert_memory_equal(m.buf, src, 7000);
    homa_msgin_destroy(&m);
}

static void homa_msgin_add__gap_split_and_first_missing(void **state)
{
    (void)state;
    struct homa_msgin m;
    assert_int_equal(homa_msgin_init(&m, 10000, 10000), 0);
    uint32_t a, s, e;
    assert_true(homa_msgin_first_missing(&m, 10000, &s, &e));
    assert_int_equal(s, 0);
    assert_int_equal(e, 10000);
    assert_int_equal(add(&m, 8000, 1000, &a), HOMA_MSGIN_NEW); /* gap [0,8000) */
    assert_int_equal(m.num_gaps, 1);
    assert_int_equal(add(&m, 3000, 1000, &a), HOMA_MSGIN_NEW); /* splits it */
    assert_int_equal(m.num_gaps, 2);
    assert_true(homa_msgin_first_missing(&m, 10000, &s, &e));
    assert_int_equal(s, 0);
    assert_int_equal(e, 3000);
    /* overlapping packet covering parts of both gaps and the middle */
    assert_int_equal(add(&m, 2500, 2000, &a), HOMA_MSGIN_NEW);
    assert_int_equal(a, 1000);
    assert_int_equal(add(&m, 0, 2500, &a), HOMA_MSGIN_NEW);
    assert_int_equal(add(&m, 4500, 3500, &a), HOMA_MSGIN_NEW);
    assert_int_equal(m.num_gaps, 0);
    assert_true(homa_msgin_first_missing(&m, 10000, &s, &e));
    assert_int_equal(s, 9000);
    assert_int_equal(e, 10000);
    assert_false(homa_msgin_first_missing(&m, 9000, &s, &e));
    assert_int_equal(add(&m, 9000, 1000, &a), HOMA_MSGIN_NEW);
    assert_true(homa_msgin_complete(&m));
    assert_memory_equal(m.buf, src, 10000);
    homa_msgin_destroy(&m);
}

static void homa_msgin_add__random_order_matches(void **state)
{
    (void)state;
    /* 1000 random packets with random overlaps; content must match. */
    uint32_t seed = 12345;
    for (int round = 0; round < 20; round++) {
        struct homa_msgin m;
        uint32_t len = 50000 + (uint32_t)round * 997;
        assert_int_equal(homa_msgin_init(&m, len, len), 0);
        uint32_t total = 0;
        while (!homa_msgin_complete(&m)) {
            seed = seed * 1103515245u + 12345u;
            uint32_t off = (seed >> 8) % len;
            seed = seed * 1103515245u + 12345u;
            uint32_t l = 1 + (seed >> 8) % 3000;
            if (off + l > len) l = len - off;
            uint32_t a;
            int r = add(&m, off, l, &a);
            assert_true(r == HOMA_MSGIN_NEW || r == HOMA_MSGIN_DUP);
            total += a;
            assert_int_equal(total, m.received);
        }
        assert_memory_equal(m.buf, src, len);
        homa_msgin_destroy(&m);
    }
}

static void homa_msgin_add__gap_limit_refuses(void **state)
{
    (void)state;
    struct homa_msgin m;
    assert_int_equal(homa_msgin_init(&m, 100000, 100000), 0);
    uint32_t a;
    int refused = 0;
    /* every other byte: each packet opens a new gap */
    for (uint32_t off = 1; off < 100000; off += 2) {
        if (add(&m, off, 1, &a) == HOMA_MSGIN_NOMEM) {
            refused = 1;
            break;
        }
    }
    assert_true(refused);
    assert_true(m.num_gaps <= HOMA_MAX_GAPS);
    homa_msgin_destroy(&m);
}

static void homa_msgin_add__zero_length_message(void **state)
{
    (void)state;
    struct homa_msgin m;
    assert_int_equal(homa_msgin_init(&m, 0, 0), 0);
    assert_true(homa_msgin_complete(&m));
    uint32_t a;
    assert_int_equal(homa_msgin_add(&m, 0, 0, NULL, 0, &a), HOMA_MSGIN_DUP);
    homa_msgin_destroy(&m);
}

static void homa_msgin_missing__ranges(void **state)
{
    (void)state;
    struct homa_msgin m;
    assert_int_equal(homa_msgin_init(&m, 10000, 10000), 0);
    uint32_t a;
    assert_true(homa_msgin_missing(&m, 0, 10000));
    assert_false(homa_msgin_missing(&m, 0, 0));    /* nothing to place */
    assert_false(homa_msgin_missing(&m, 9999, 2)); /* past the end */
    assert_false(homa_msgin_missing(&m, 10000, 1));
    assert_false(homa_msgin_missing(&m, 0xffffffffu, 2)); /* offset + len wraps */
    assert_false(homa_msgin_missing(&m, 5, 0xfffffffeu));
    assert_int_equal(add(&m, 2000, 1000, &a), HOMA_MSGIN_NEW); /* gap [0,2000) */
    assert_int_equal(add(&m, 5000, 1000, &a), HOMA_MSGIN_NEW); /* gap [3000,5000) */
    assert_true(homa_msgin_missing(&m, 0, 2000));
    assert_true(homa_msgin_missing(&m, 500, 1000));
    assert_false(homa_msgin_missing(&m, 1, 2000));   /* runs into received bytes */
    assert_false(homa_msgin_missing(&m, 2500, 100)); /* received */
    assert_true(homa_msgin_missing(&m, 3000, 2000));
    assert_false(homa_msgin_missing(&m, 3000, 2001));
    assert_false(homa_msgin_missing(&m, 1999, 1002)); /* spans a received block */
    assert_false(homa_msgin_missing(&m, 4000, 3000)); /* crosses recv_end from a gap */
    assert_false(homa_msgin_missing(&m, 5999, 1));
    assert_true(homa_msgin_missing(&m, 6000, 4000));
    assert_true(homa_msgin_missing(&m, 9999, 1));
    homa_msgin_destroy(&m);
    /* a message not set up yet has no room to place anything */
    memset(&m, 0, sizeof(m));
    assert_false(homa_msgin_missing(&m, 0, 1));
}

static void homa_msgin_add__in_place(void **state)
{
    (void)state;
    /* The payload already sits in the buffer (direct receive): adding it
     * is bookkeeping only, and gap handling is unchanged. */
    struct homa_msgin m;
    assert_int_equal(homa_msgin_init(&m, 5000, 5000), 0);
    uint32_t a;
    memcpy(m.buf + 3000, src + 3000, 1000);
    assert_int_equal(homa_msgin_add(&m, 0, 3000, m.buf + 3000, 1000, &a), HOMA_MSGIN_NEW);
    assert_int_equal(a, 1000);
    assert_int_equal(m.num_gaps, 1);
    memcpy(m.buf + 1000, src + 1000, 1000);
    assert_int_equal(homa_msgin_add(&m, 0, 1000, m.buf + 1000, 1000, &a), HOMA_MSGIN_NEW);
    assert_int_equal(m.num_gaps, 2);
    assert_int_equal(add(&m, 0, 1000, &a), HOMA_MSGIN_NEW);
    assert_int_equal(add(&m, 2000, 1000, &a), HOMA_MSGIN_NEW);
    memcpy(m.buf + 4000, src + 4000, 1000);
    assert_int_equal(homa_msgin_add(&m, 0, 4000, m.buf + 4000, 1000, &a), HOMA_MSGIN_NEW);
    assert_true(homa_msgin_complete(&m));
    assert_memory_equal(m.buf, src, 5000);
    homa_msgin_destroy(&m);
}

int main(void)
{
    init_src();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_msgin_add__in_order),
        cmocka_unit_test(homa_msgin_add__reverse_order_and_duplicates),
        cmocka_unit_test(homa_msgin_add__gap_split_and_first_missing),
        cmocka_unit_test(homa_msgin_add__random_order_matches),
        cmocka_unit_test(homa_msgin_add__gap_limit_refuses),
        cmocka_unit_test(homa_msgin_add__zero_length_message),
        cmocka_unit_test(homa_msgin_missing__ranges),
        cmocka_unit_test(homa_msgin_add__in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
