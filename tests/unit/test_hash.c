/* Unit tests for src/core/hash.c, the engine's one hash table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "core/hash.h"
#include "core/list.h"

struct item {
    struct homa_hnode node;
    uint64_t key;
};

static uint64_t item_key(const struct homa_hnode *n)
{
    return HOMA_CONTAINER(n, struct item, node)->key;
}

static struct item *find(const struct homa_htab *t, uint64_t key)
{
    for (struct homa_hnode *n = homa_htab_first(t, key); n; n = n->next)
        if (item_key(n) == key) return HOMA_CONTAINER(n, struct item, node);
    return NULL;
}

static void homa_htab_add__newest_first_in_bucket(void **state)
{
    (void)state;
    struct homa_htab t;
    assert_int_equal(homa_htab_init(&t, 8), 0);
    struct item a = {.key = 3}, b = {.key = 11}, c = {.key = 19}; /* one bucket of 8 */
    homa_htab_add(&t, &a.node, a.key);
    homa_htab_add(&t, &b.node, b.key);
    homa_htab_add(&t, &c.node, c.key);
    assert_int_equal(t.n, 3);
    struct homa_hnode *n = homa_htab_first(&t, 3);
    assert_ptr_equal(n, &c.node);
    assert_ptr_equal(n->next, &b.node);
    assert_ptr_equal(n->next->next, &a.node);
    assert_null(n->next->next->next);
    assert_null(homa_htab_first(&t, 4));
    homa_htab_destroy(&t);
}

static void homa_htab_del__middle_and_absent(void **state)
{
    (void)state;
    struct homa_htab t;
    assert_int_equal(homa_htab_init(&t, 4), 0);
    struct item a = {.key = 1}, b = {.key = 5}, c = {.key = 9}, d = {.key = 2};
    homa_htab_add(&t, &a.node, a.key);
    homa_htab_add(&t, &b.node, b.key);
    homa_htab_add(&t, &c.node, c.key);
    assert_true(homa_htab_del(&t, &b.node, b.key));
    assert_int_equal(t.n, 2);
    assert_null(find(&t, 5));
    assert_ptr_equal(find(&t, 9), &c);
    assert_ptr_equal(find(&t, 1), &a);
    assert_false(homa_htab_del(&t, &b.node, b.key)); /* already gone */
    assert_false(homa_htab_del(&t, &d.node, d.key)); /* never there */
    assert_int_equal(t.n, 2);
    homa_htab_destroy(&t);
}

static void homa_htab_grow_if_full__doubles_when_full(void **state)
{
    (void)state;
    enum { N = 1000 };
    struct item *items = calloc(N, sizeof(*items));
    struct homa_htab t;
    assert_int_equal(homa_htab_init(&t, 4), 0);
    for (int i = 0; i < N; i++) {
        size_t nb = t.nb;
        homa_htab_grow_if_full(&t, item_key);
        /* grows exactly when the table holds as many elements as buckets */
        assert_int_equal(t.nb, (size_t)i >= nb ? 2 * nb : nb);
        items[i].key = (uint64_t)i * 0x9E3779B97F4A7C15ull;
        homa_htab_add(&t, &items[i].node, items[i].key);
    }
    assert_int_equal(t.n, N);
    assert_int_equal(t.nb, 1024);
    for (int i = 0; i < N; i++)
        assert_ptr_equal(find(&t, items[i].key), &items[i]);
    homa_htab_destroy(&t);
    free(items);
}

static void homa_htab_grow_if_full__rehash_order(void **state)
{
    (void)state;
    /* Two buckets: keys 0 and 4 share bucket 0 (4 first, the newest).
     * Growing to four walks it head to tail (4, then 0), pushing each on
     * its new bucket's head: bucket 0 then holds 0, then 4. */
    struct homa_htab t;
    assert_int_equal(homa_htab_init(&t, 2), 0);
    struct item a = {.key = 0}, b = {.key = 4}, c = {.key = 2};
    homa_htab_add(&t, &a.node, a.key);
    homa_htab_add(&t, &b.node, b.key);
    homa_htab_grow_if_full(&t, item_key);
    assert_int_equal(t.nb, 4);
    assert_ptr_equal(t.b[0], &a.node);
    assert_ptr_equal(t.b[0]->next, &b.node);
    homa_htab_add(&t, &c.node, c.key);
    assert_ptr_equal(t.b[2], &c.node);
    homa_htab_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_htab_add__newest_first_in_bucket),
        cmocka_unit_test(homa_htab_del__middle_and_absent),
        cmocka_unit_test(homa_htab_grow_if_full__doubles_when_full),
        cmocka_unit_test(homa_htab_grow_if_full__rehash_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
