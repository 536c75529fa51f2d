/* The homad shared-memory protocol on ordinary memory: layout, both rings
 * (including index wrap-around and forged indexes), command validation and
 * RX-slot ownership. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rt/homad_proto.h"

struct region {
    struct homad_hdr h;
    void *mem;
    struct homad_view v;
};

static void region_make(struct region *r, uint32_t ncmd, uint32_t ncq)
{
    assert_int_equal(homad_layout(&r->h, ncmd, ncq, 2, 3, 4096), 0);
    r->h.cfg.max_message_length = 3000;
    r->mem = aligned_alloc(4096, r->h.total);
    assert_non_null(r->mem);
    memset(r->mem, 0, r->h.total);
    memcpy(r->mem, &r->h, sizeof(r->h));
    homad_view_init(&r->v, r->mem, &r->h);
}

static void layout__offsets_and_check(void **state)
{
    (void)state;
    struct homad_hdr h;
    assert_int_equal(homad_layout(&h, 256, 1024, 16, 64, 1000000), 0);
    assert_int_equal(h.slot_size % 4096, 0);
    assert_true(h.slot_size >= 1000000);
    assert_true(h.off_ctrl >= HOMAD_HDR_BYTES);
    assert_true(h.off_cmd >= h.off_ctrs + HOMAD_CTRS_BYTES);
    assert_true(h.off_cq >= h.off_cmd + 256 * 64);
    assert_true(h.off_tx >= h.off_cq + 1024 * 64);
    assert_int_equal(h.off_rx, h.off_tx + 16 * h.slot_size);
    assert_int_equal(h.total, h.off_rx + 64 * h.slot_size);
    assert_int_equal(homad_hdr_check(&h, h.total), 0);
    assert_int_equal(homad_hdr_check(&h, h.total - 1), HOMA_ERR_INVAL);
    struct homad_hdr bad = h;
    bad.off_rx += 4096;
    assert_int_equal(homad_hdr_check(&bad, UINT64_MAX), HOMA_ERR_INVAL);
    bad = h;
    bad.magic ^= 1;
    assert_int_equal(homad_hdr_check(&bad, h.total), HOMA_ERR_INVAL);
    /* Geometry limits. */
    assert_int_equal(homad_layout(&h, 100, 1024, 16, 64, 4096), HOMA_ERR_INVAL);
    assert_int_equal(homad_layout(&h, 256, 0, 16, 64, 4096), HOMA_ERR_INVAL);
    assert_int_equal(homad_layout(&h, 256, 256, 0, 64, 4096), HOMA_ERR_INVAL);
    assert_int_equal(homad_layout(&h, 256, 256, 1, HOMAD_MAX_SLOTS + 1, 4096), HOMA_ERR_INVAL);
    assert_int_equal(homad_layout(&h, 256, 256, 1, 1, HOMAD_MAX_SLOT_SIZE + 1), HOMA_ERR_INVAL);
}

/* Commands pass from the app side to the daemon side in order, also when
 * the free-running indexes wrap around 2^32. */
static void ring__commands_wrap(void **state)
{
    (void)state;
    struct region r;
    region_make(&r, 8, 8);
    uint32_t head = UINT32_MAX - 5, tail = head;
    r.v.ctrl->cmd_head = head;
    r.v.ctrl->cmd_tail = tail;
    for (uint64_t round = 0; round < 5; round++) {
        uint32_t n = homad_cmd_space(&r.v, head);
        assert_int_equal(n, 8);
        for (uint32_t i = 0; i < n; i++) {
            struct homad_cmd c = {.op = HOMAD_OP_COUNTERS, .tag = round * 100 + i};
            homad_cmd_push(&r.v, head++, &c);
        }
        assert_int_equal(homad_cmd_space(&r.v, head), 0);
        assert_int_equal(homad_cmd_avail(&r.v, tail), 8);
        for (uint32_t i = 0; i < 8; i++) {
            struct homad_cmd c;
            homad_cmd_copy(&r.v, tail++, &c);
            assert_int_equal(c.tag, round * 100 + i);
            assert_int_equal(homad_cmd_check(&r.v, &c), 0);
        }
        homad_cmd_consumed(&r.v, tail);
        assert_int_equal(homad_cmd_avail(&r.v, tail), 0);
    }
    free(r.mem);
}

/* A head more than a ring ahead of the daemon's tail is impossible. */
static void ring__forged_head(void **state)
{
    (void)state;
    struct region r;
    region_make(&r, 8, 8);
    uint32_t tail = 1000;
    r.v.ctrl->cmd_head = tail + 8;
    assert_int_equal(homad_cmd_avail(&r.v, tail), 8);
    r.v.ctrl->cmd_head = tail + 9;
    assert_int_equal(homad_cmd_avail(&r.v, tail), -1);
    r.v.ctrl->cmd_head = tail - 1; /* behind the tail */
    assert_int_equal(homad_cmd_avail(&r.v, tail), -1);
    free(r.mem);
}

/* The completion ring's tail may only move forward, up to the head. */
static void ring__forged_cq_tail(void **state)
{
    (void)state;
    struct region r;
    region_make(&r, 8, 8);
    uint32_t head = 50, seen = 50;
    r.v.ctrl->cq_tail = 50;
    assert_int_equal(homad_cq_space(&r.v, head, &seen), 8);
    struct homad_cqe e = {.kind = HOMAD_CQ_DONE, .tag = 7};
    for (int i = 0; i < 8; i++)
        homad_cq_push(&r.v, head++, &e);
    assert_int_equal(homad_cq_space(&r.v, head, &seen), 0);
    /* The app consumes 3. */
    uint32_t at = 50;
    assert_int_equal(homad_cq_avail(&r.v, at), 8);
    struct homad_cqe got;
    homad_cq_copy(&r.v, at, &got);
    assert_int_equal(got.tag, 7);
    homad_cq_consumed(&r.v, at + 3);
    assert_int_equal(homad_cq_space(&r.v, head, &seen), 3);
    assert_int_equal(seen, 53);
    /* Forgeries: backwards, and past the head. */
    r.v.ctrl->cq_tail = 52;
    assert_int_equal(homad_cq_space(&r.v, head, &seen), -1);
    seen = 53;
    r.v.ctrl->cq_tail = head + 1;
    assert_int_equal(homad_cq_space(&r.v, head, &seen), -1);
    free(r.mem);
}

static void cmd_check__fields(void **state)
{
    (void)state;
    struct region r;
    region_make(&r, 8, 8);
    struct homad_cmd ok = {.op = HOMAD_OP_SEND, .port = 5, .slot = 1, .len = 3000, .peer_port = 9};
    assert_int_equal(homad_cmd_check(&r.v, &ok), 0);
    struct homad_cmd c = ok;
    c.op = 0;
    assert_int_equal(homad_cmd_check(&r.v, &c), HOMA_ERR_INVAL);
    c.op = HOMAD_OP__COUNT;
    assert_int_equal(homad_cmd_check(&r.v, &c), HOMA_ERR_INVAL);
    c = ok;
    c.flags = 1; /* a range without HOMAD_SEND_PRIO_ON */
    assert_int_equal(homad_cmd_check(&r.v, &c), HOMA_ERR_INVAL);
    c.flags = HOMAD_SEND_PRIO(2, 5);
    assert_int_equal(homad_cmd_check(&r.v, &c), 0);
    c.flags = HOMAD_SEND_PRIO(7, 7);
    assert_int_equal(homad_cmd_check(&r.v, &c), 0);
    c.flags = HOMAD_SEND_PRIO(5, 2); /* lo above hi */
    assert_int_equal(homad_cmd_check(&r.v, &c), HOMA_ERR_INVAL);
    c.flags = HOMAD_SEND_PRIO(0, 0) | 0x40; /* the spare bit */
    assert_int_equal(homad_cmd_check(&r.v, &c), HOMA_ERR_INVAL);
    c.op = HOMAD_OP_REPLY; /* only SEND takes flags */
    c.id = 5;
    c.flags = HOMAD_SEND_PRIO(0, 0);
    assert_int_equal(homad_cmd_check(&r.v, &c), HOMA_ERR_INVAL);
    c = ok;
    c.pad[5] = 1;
    assert_int_equal(homad_cmd_check(&r.v, &c), HOMA_ERR_INVAL);
    c = ok;
    c.slot = 2; /* only 2 TX slots */
    assert_int_equal(homad_cmd_check(&r.v, &c), HOMA_ERR_INVAL);
    c = ok;
    c.len = 3001; /* over max_message_length */
    assert_int_equal(homad_cmd_check(&r.v, &c), HOMA_ERR_MSGSIZE);
    c = ok;
    c.len = UINT32_MAX;
    assert_int_equal(homad_cmd_check(&r.v, &c), HOMA_ERR_MSGSIZE);
    c = ok;
    c.op = HOMAD_OP_REPLY;
    c.id = 4; /* replies answer odd (server) ids */
    assert_int_equal(homad_cmd_check(&r.v, &c), HOMA_ERR_INVAL);
    c.id = 5;
    assert_int_equal(homad_cmd_check(&r.v, &c), 0);
    struct homad_cmd rel = {.op = HOMAD_OP_RELEASE, .slot = 2};
    assert_int_equal(homad_cmd_check(&r.v, &rel), 0);
    rel.slot = 3; /* only 3 RX slots */
    assert_int_equal(homad_cmd_check(&r.v, &rel), HOMA_ERR_INVAL);
    struct homad_cmd ab = {.op = HOMAD_OP_ABORT, .port = 5};
    assert_int_equal(homad_cmd_check(&r.v, &ab), HOMA_ERR_INVAL);
    ab.id = 8;
    assert_int_equal(homad_cmd_check(&r.v, &ab), 0);
    ab.port = 0;
    assert_int_equal(homad_cmd_check(&r.v, &ab), HOMA_ERR_INVAL);
    free(r.mem);
}

static void rx__ownership(void **state)
{
    (void)state;
    struct homad_rxmap m;
    homad_rx_init(&m, 70);
    for (int i = 0; i < 70; i++)
        assert_int_equal(homad_rx_take(&m), i);
    assert_int_equal(homad_rx_take(&m), -1);
    assert_int_equal(homad_rx_release(&m, 65), 0);
    assert_int_equal(homad_rx_release(&m, 65), HOMA_ERR_INVAL); /* twice */
    assert_int_equal(homad_rx_release(&m, 70), HOMA_ERR_INVAL); /* out of range */
    assert_int_equal(homad_rx_release(&m, UINT32_MAX), HOMA_ERR_INVAL);
    assert_int_equal(m.held, 69);
    assert_int_equal(homad_rx_take(&m), 65);
    homad_rx_init(&m, 3);
    assert_int_equal(homad_rx_release(&m, 0), HOMA_ERR_INVAL); /* never given */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(layout__offsets_and_check), cmocka_unit_test(ring__commands_wrap),
        cmocka_unit_test(ring__forged_head),         cmocka_unit_test(ring__forged_cq_tail),
        cmocka_unit_test(cmd_check__fields),         cmocka_unit_test(rx__ownership),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
