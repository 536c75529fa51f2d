/* Tests of the queue of packets held back by fault injection
 * (src/io/faultq.c), shared by the UDP and raw drivers: holding copies,
 * release by time and by depth, release order, the bounds, and that
 * everything is freed (ASan's leak check in build-asan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "io/faultq.h"
#include "io/io.h"

/* What an emit function saw. */
struct sink {
    int n;
    uint8_t first[64];              /* first data byte of each packet */
    const homa_faultq_pkt *pkt[64]; /* the copies handed out */
    homa_faultq *reclaim_q;         /* if set: reclaim inside emit */
};

static void collect(void *ctx, const homa_faultq_pkt *p)
{
    struct sink *sk = ctx;
    if (sk->reclaim_q != NULL) homa_faultq_reclaim(sk->reclaim_q);
    assert_true(sk->n < 64);
    sk->first[sk->n] = p->len > 0 ? p->data[0] : 0;
    sk->pkt[sk->n] = p;
    sk->n++;
}

static homa_addr addr_of(uint8_t last)
{
    homa_addr a;
    memset(&a, 0, sizeof(a));
    a.bytes[10] = a.bytes[11] = 0xff;
    a.bytes[12] = 10;
    a.bytes[15] = last;
    return a;
}

/* Holds a one-part packet whose first byte is tag (len bytes). */
static int hold_tag(homa_faultq *q, uint64_t due, uint32_t depth, uint8_t tag, size_t len)
{
    uint8_t buf[256];
    memset(buf, tag, sizeof(buf));
    homa_addr a = addr_of(tag);
    return homa_faultq_hold(q, due, depth, &a, (uint16_t)(4000 + tag), tag, buf, len, NULL, 0);
}

static void homa_faultq_init__empty(void **state)
{
    (void)state;
    homa_faultq q;
    homa_faultq_init(&q, 8, 0);
    assert_int_equal(homa_faultq_count(&q), 0);
    assert_true(homa_faultq_next_deadline(&q) == UINT64_MAX);
    struct sink sk = {0};
    assert_int_equal(homa_faultq_release(&q, UINT64_MAX, 1, collect, &sk), 0);
    assert_int_equal(sk.n, 0);
    homa_faultq_free(&q);
}

/* The queue keeps its own copy of both parts, with the packet's metadata. */
static void homa_faultq_hold__owns_a_copy(void **state)
{
    (void)state;
    homa_faultq q;
    homa_faultq_init(&q, 8, 0);
    uint8_t hdr[56], payload[300];
    for (size_t i = 0; i < sizeof(hdr); i++)
        hdr[i] = (uint8_t)i;
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)(i * 7);
    homa_addr a = addr_of(9);
    assert_int_equal(
        homa_faultq_hold(&q, 1000, 0, &a, 4242, 0xa0, hdr, sizeof(hdr), payload, sizeof(payload)),
        0);
    assert_int_equal(homa_faultq_count(&q), 1);
    assert_int_equal(q.bytes, sizeof(hdr) + sizeof(payload));
    memset(hdr, 0xee, sizeof(hdr)); /* the caller's buffers are free again */
    memset(payload, 0xee, sizeof(payload));
    struct sink sk = {0};
    assert_int_equal(homa_faultq_release(&q, 1000, 0, collect, &sk), 1);
    const homa_faultq_pkt *p = sk.pkt[0];
    assert_memory_equal(&p->addr, &a, sizeof(a));
    assert_int_equal(p->port, 4242);
    assert_int_equal(p->tos, 0xa0);
    assert_int_equal(p->hdr_len, 56);
    assert_int_equal(p->len, 356);
    for (uint32_t i = 0; i < 56; i++)
        assert_int_equal(p->data[i], (uint8_t)i);
    for (uint32_t i = 0; i < 300; i++)
        assert_int_equal(p->data[56 + i], (uint8_t)(i * 7));
    /* Released copies stay readable until reclaimed. */
    assert_int_equal(homa_faultq_count(&q), 0);
    assert_int_equal(q.bytes, 0);
    assert_int_equal(p->data[60], (uint8_t)(4 * 7));
    homa_faultq_reclaim(&q);
    /* A packet with no second part, and an empty one. */
    assert_int_equal(homa_faultq_hold(&q, 5, 0, &a, 1, 0, hdr, 28, NULL, 0), 0);
    assert_int_equal(homa_faultq_hold(&q, 5, 0, &a, 1, 0, NULL, 0, NULL, 0), 0);
    sk.n = 0;
    assert_int_equal(homa_faultq_release(&q, 5, 0, collect, &sk), 2);
    assert_int_equal(sk.pkt[0]->len, 28);
    assert_int_equal(sk.pkt[1]->len, 0);
    homa_faultq_free(&q);
}

/* By time: what is due leaves, oldest first; the deadline follows. */
static void homa_faultq_release__by_time(void **state)
{
    (void)state;
    homa_faultq q;
    homa_faultq_init(&q, 8, 0);
    assert_int_equal(hold_tag(&q, 300, 0, 1, 40), 0);
    assert_true(homa_faultq_next_deadline(&q) == 300);
    assert_int_equal(hold_tag(&q, 100, 0, 2, 40), 0);
    assert_true(homa_faultq_next_deadline(&q) == 100);
    assert_int_equal(hold_tag(&q, 200, 0, 3, 40), 0);
    assert_int_equal(hold_tag(&q, 100, 0, 4, 40), 0);
    struct sink sk = {0};
    assert_int_equal(homa_faultq_release(&q, 99, 0, collect, &sk), 0);
    assert_int_equal(homa_faultq_release(&q, 100, 0, collect, &sk), 2);
    assert_int_equal(sk.first[0], 2);
    assert_int_equal(sk.first[1], 4);
    assert_true(homa_faultq_next_deadline(&q) == 200);
    /* Passing packets do not move packets held by time only. */
    assert_int_equal(homa_faultq_release(&q, 150, 1, collect, &sk), 0);
    /* Released together: in the order they were held (3 is younger than 1
     * but due earlier; both are due at 300). */
    assert_int_equal(homa_faultq_release(&q, 300, 0, collect, &sk), 2);
    assert_int_equal(sk.first[2], 1);
    assert_int_equal(sk.first[3], 3);
    assert_int_equal(homa_faultq_count(&q), 0);
    assert_true(homa_faultq_next_deadline(&q) == UINT64_MAX);
    homa_faultq_free(&q);
}

/* By depth: a reordered packet leaves after `depth` packets passed, or at
 * its due time if fewer did. */
static void homa_faultq_release__by_depth(void **state)
{
    (void)state;
    homa_faultq q;
    homa_faultq_init(&q, 8, 0);
    assert_int_equal(hold_tag(&q, 1000, 3, 1, 30), 0);
    assert_int_equal(hold_tag(&q, 1000, 1, 2, 30), 0);
    assert_int_equal(hold_tag(&q, 1000, 0, 3, 30), 0); /* by time only */
    struct sink sk = {0};
    /* A release without a passing packet counts nothing. */
    assert_int_equal(homa_faultq_release(&q, 10, 0, collect, &sk), 0);
    assert_int_equal(homa_faultq_release(&q, 10, 1, collect, &sk), 1);
    assert_int_equal(sk.first[0], 2);
    assert_int_equal(homa_faultq_release(&q, 11, 1, collect, &sk), 0);
    assert_int_equal(homa_faultq_release(&q, 12, 1, collect, &sk), 1);
    assert_int_equal(sk.first[1], 1);
    assert_int_equal(homa_faultq_count(&q), 1);
    /* Two reordered at once with the same depth leave together, oldest
     * first, ahead of nothing younger. */
    assert_int_equal(hold_tag(&q, 1000, 2, 4, 30), 0);
    assert_int_equal(hold_tag(&q, 1000, 1, 5, 30), 0);
    assert_int_equal(hold_tag(&q, 1000, 1, 6, 30), 0);
    assert_int_equal(homa_faultq_release(&q, 13, 1, collect, &sk), 2);
    assert_int_equal(sk.first[2], 5);
    assert_int_equal(sk.first[3], 6);
    assert_int_equal(homa_faultq_release(&q, 14, 1, collect, &sk), 1);
    assert_int_equal(sk.first[4], 4);
    /* Not overtaken by enough packets: the due time still applies. */
    assert_int_equal(hold_tag(&q, 500, 50, 7, 30), 0);
    assert_true(homa_faultq_next_deadline(&q) == 500);
    assert_int_equal(homa_faultq_release(&q, 500, 0, collect, &sk), 1);
    assert_int_equal(sk.first[5], 7);
    assert_true(homa_faultq_next_deadline(&q) == 1000);
    assert_int_equal(homa_faultq_release(&q, 1000, 0, collect, &sk), 1);
    assert_int_equal(sk.first[6], 3);
    homa_faultq_free(&q);
}

/* The bound on packets: refused at the bound, room again after a release. */
static void homa_faultq_hold__refused_at_packet_bound(void **state)
{
    (void)state;
    homa_faultq q;
    homa_faultq_init(&q, 3, 0);
    for (uint8_t i = 0; i < 3; i++)
        assert_int_equal(hold_tag(&q, 100 + i, 0, i, 20), 0);
    assert_int_equal(hold_tag(&q, 50, 0, 9, 20), HOMA_ERR_NOMEM);
    assert_int_equal(homa_faultq_count(&q), 3);
    assert_true(homa_faultq_next_deadline(&q) == 100); /* the refused one left no trace */
    struct sink sk = {0};
    assert_int_equal(homa_faultq_release(&q, 100, 0, collect, &sk), 1);
    assert_int_equal(hold_tag(&q, 50, 0, 9, 20), 0);
    assert_int_equal(homa_faultq_count(&q), 3);
    homa_faultq_free(&q);
}

/* The bound on bytes (if set): the packets held never exceed it. */
static void homa_faultq_hold__refused_at_byte_bound(void **state)
{
    (void)state;
    homa_faultq q;
    homa_faultq_init(&q, 100, 100);
    assert_int_equal(hold_tag(&q, 10, 0, 1, 101), HOMA_ERR_NOMEM); /* alone too big */
    assert_int_equal(hold_tag(&q, 10, 0, 1, 60), 0);
    assert_int_equal(hold_tag(&q, 10, 0, 2, 50), HOMA_ERR_NOMEM);
    assert_int_equal(hold_tag(&q, 10, 0, 3, 40), 0); /* exactly full */
    assert_int_equal(q.bytes, 100);
    assert_int_equal(hold_tag(&q, 10, 0, 4, 1), HOMA_ERR_NOMEM);
    assert_int_equal(hold_tag(&q, 10, 0, 5, 0), 0); /* nothing more is fine */
    struct sink sk = {0};
    assert_int_equal(homa_faultq_release(&q, 10, 0, collect, &sk), 3);
    assert_int_equal(q.bytes, 0);
    assert_int_equal(hold_tag(&q, 10, 0, 2, 100), 0);
    homa_faultq_free(&q);
}

/* emit may reclaim the copies released before (a driver flushing a full
 * batch); the one being emitted survives it. */
static void homa_faultq_reclaim__inside_emit(void **state)
{
    (void)state;
    homa_faultq q;
    homa_faultq_init(&q, 8, 0);
    for (uint8_t i = 1; i <= 4; i++)
        assert_int_equal(hold_tag(&q, 7, 0, i, 200), 0);
    struct sink sk = {.reclaim_q = &q};
    assert_int_equal(homa_faultq_release(&q, 7, 0, collect, &sk), 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(sk.first[i], i + 1);
    /* The last one is still readable (ASan would object otherwise). */
    assert_int_equal(sk.pkt[3]->data[199], 4);
    assert_non_null(q.released);
    assert_null(q.released->next);
    homa_faultq_reclaim(&q);
    assert_null(q.released);
    homa_faultq_free(&q);
}

/* free releases held and released copies alike (the drivers' close). */
static void homa_faultq_free__held_and_released(void **state)
{
    (void)state;
    homa_faultq q;
    homa_faultq_init(&q, 16, 0);
    for (uint8_t i = 0; i < 10; i++)
        assert_int_equal(hold_tag(&q, 100 + i, i % 2, i, 100), 0);
    struct sink sk = {0};
    assert_int_equal(homa_faultq_release(&q, 103, 0, collect, &sk), 4);
    homa_faultq_free(&q);
    assert_int_equal(homa_faultq_count(&q), 0);
    assert_int_equal(q.bytes, 0);
    assert_null(q.held);
    assert_null(q.released);
    assert_true(homa_faultq_next_deadline(&q) == UINT64_MAX);
    /* Usable again after free, and free twice is harmless. */
    assert_int_equal(hold_tag(&q, 1, 0, 1, 10), 0);
    homa_faultq_free(&q);
    homa_faultq_free(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_faultq_init__empty),
        cmocka_unit_test(homa_faultq_hold__owns_a_copy),
        cmocka_unit_test(homa_faultq_release__by_time),
        cmocka_unit_test(homa_faultq_release__by_depth),
        cmocka_unit_test(homa_faultq_hold__refused_at_packet_bound),
        cmocka_unit_test(homa_faultq_hold__refused_at_byte_bound),
        cmocka_unit_test(homa_faultq_reclaim__inside_emit),
        cmocka_unit_test(homa_faultq_free__held_and_released),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
