/* Unit tests for src/core/buf.c: the cache of large message buffers.  Names follow function__case.
 */
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

/* Freed large buffers are reused for messages of about their size; small
 * or far-off sizes go to malloc; the cache stays within its bounds. */
static void homa_buf_get__reuses_close_fit(void **state)
{
    (void)state;
    homa_engine *e;
    assert_int_equal(homa_engine_create(NULL, NULL, &e), 0);
    uint32_t mb = 1u << 20;
    uint8_t *a = homa_buf_get(e, mb);
    assert_non_null(a);
    a[mb - 1] = 1;
    homa_buf_put(e, a, mb);
    assert_int_equal(e->bufcache_n, 1);
    /* much smaller: not this buffer */
    uint8_t *small = homa_buf_get(e, mb / 2);
    assert_ptr_not_equal(small, a);
    free(small);
    /* larger than the buffer: not it either */
    uint8_t *big = homa_buf_get(e, mb + 1);
    assert_ptr_not_equal(big, a);
    free(big);
    /* a close fit: reused */
    assert_ptr_equal(homa_buf_get(e, mb - 100), a);
    assert_int_equal(e->bufcache_n, 0);
    assert_int_equal(e->bufcache_bytes, 0);
    homa_buf_put(e, a, mb);
    /* small buffers are not kept */
    homa_buf_put(e, malloc(1000), 1000);
    assert_int_equal(e->bufcache_n, 1);
    /* bounded in slots and bytes; the oldest go first */
    for (int i = 0; i < 3 * HOMA_BUFCACHE_SLOTS; i++)
        homa_buf_put(e, malloc(3 * mb), 3 * mb);
    assert_true(e->bufcache_n <= HOMA_BUFCACHE_SLOTS);
    assert_true(e->bufcache_bytes <= HOMA_BUFCACHE_BYTES);
    for (uint32_t i = 0; i < e->bufcache_n; i++)
        assert_int_equal(e->bufcache[i].cap, 3 * mb);
    homa_engine_destroy(e); /* frees what is cached (ASan checks) */
}

/* Messages of the same length reuse one another's buffers: an echo of 1 MB
 * RPCs allocates once per side and length, then takes from the cache. */
static void homa_engine_send_request__large_buffers_recycled(void **state)
{
    (void)state;
    struct pair p;
    homa_config c;
    homa_config_default(&c);
    setup_pair(&p, &c);
    for (int i = 0; i < 4; i++)
        echo_rpc(&p, 500000);
    assert_true(p.e[0]->bufcache_n >= 1 && p.e[1]->bufcache_n >= 1);
    assert_true(p.e[0]->bufcache_bytes <= HOMA_BUFCACHE_BYTES);
    pair_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_buf_get__reuses_close_fit),
        cmocka_unit_test(homa_engine_send_request__large_buffers_recycled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
