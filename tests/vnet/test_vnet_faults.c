/* Tests of the virtual network's fault model (struct vnet_faults): burst
 * loss statistics, per-type loss on Homa-shaped packets, host masks,
 * blackout windows in virtual time, delay with jitter and reorder depth.
 * Fixed seeds; statistical bounds are several standard deviations wide. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <homa/homa.h>

#include "core/wire.h"
#include "vnet.h"

#define US 1000ull
#define PKT_LEN 100

/* A host that sends prepared packets in order and records what arrives.
 * Each packet carries its index in bytes 24..27 (the low half of the Homa
 * sender_id, which the classifier ignores). */
struct fh {
    struct vnet *net;
    int idx;
    uint8_t (*pkts)[PKT_LEN];
    int *dst;
    size_t n, head;
    uint32_t *rx;    /* indices in arrival order */
    uint64_t *rx_at; /* arrival times, by index */
    uint64_t *tx_at; /* departure times (trace), by index */
    int *rx_src;
    size_t rxn, cap;
    uint64_t gap, next_at; /* pacing: at most one packet every gap ns */
};

static void fh_kick(void *arg, uint64_t now)
{
    struct fh *h = arg;
    (void)now;
    vnet_host_kick(h->net, h->idx);
}

static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int fh_pull(void *ctx, uint64_t now, struct vnet_pkt *pkt)
{
    struct fh *h = ctx;
    if (h->head == h->n) return 0;
    if (now < h->next_at) {
        vnet_at(h->net, h->next_at, fh_kick, h);
        return 0;
    }
    h->next_at = now + h->gap;
    size_t i = h->head++;
    pkt->dst = h->dst[i];
    pkt->priority = 0;
    pkt->len = PKT_LEN;
    memcpy(pkt->data, h->pkts[i], PKT_LEN);
    return 1;
}

static void fh_deliver(void *ctx, uint64_t now, int src, const uint8_t *data, size_t len, int prio)
{
    struct fh *h = ctx;
    (void)prio;
    assert_int_equal(len, PKT_LEN);
    uint32_t i = rd32(data + 24);
    assert_true(h->rxn < h->cap);
    h->rx_src[h->rxn] = src;
    h->rx[h->rxn++] = i;
    h->rx_at[i] = now;
}

static const struct vnet_host_ops fh_ops = {.pull = fh_pull, .deliver = fh_deliver};

/* Packet classes for the prepared packets. */
enum kind { K_DATA_MID, K_DATA_LAST, K_GRANT, K_RESEND, K_BUSY, K_NEED_ACK, K_ACK, K_COUNT };

static void make_pkt(uint8_t *b, enum kind k, uint32_t index)
{
    memset(b, 0, PKT_LEN);
    static const uint8_t types[K_COUNT] = {HOMA_PKT_DATA,   HOMA_PKT_DATA, HOMA_PKT_GRANT,
                                           HOMA_PKT_RESEND, HOMA_PKT_BUSY, HOMA_PKT_NEED_ACK,
                                           HOMA_PKT_ACK};
    b[11] = types[k];
    b[12] = k <= K_DATA_LAST ? 0xE0 : 0x50;
    if (k <= K_DATA_LAST) {
        /* 44 payload bytes at offset 0 (mid: of a 1,000-byte message) */
        wr32(b + 28, k == K_DATA_LAST ? PKT_LEN - HOMA_DATA_HDR_LEN : 1000);
        wr32(b + 52, 0);
    }
    wr32(b + 24, index);
}

#define MAXH 4
struct fx {
    struct vnet *net;
    struct fh h[MAXH];
    int nh;
};

static void trace_tx(void *arg, uint64_t now, enum vnet_trace_kind kind, int src, int dst,
                     const uint8_t *data, size_t len, int priority)
{
    struct fx *f = arg;
    (void)dst;
    (void)len;
    (void)priority;
    if (kind == VNET_TR_SEND) f->h[src].tx_at[rd32(data + 24)] = now;
}

/* nh hosts; host 0 sends n packets: kinds[i % nkinds] to dsts[i % ndsts]. */
static uint64_t fx_gap; /* pacing of host 0 for the next fx_run */

static void fx_run(struct fx *f, const struct vnet_faults *faults, uint64_t seed, int nh, size_t n,
                   const enum kind *kinds, int nkinds, const int *dsts, int ndsts)
{
    memset(f, 0, sizeof(*f));
    struct vnet_config c;
    vnet_config_default(&c);
    c.seed = seed;
    c.host_bps = 10000000000ull;
    c.faults = *faults;
    f->net = vnet_create(&c);
    assert_non_null(f->net);
    f->nh = nh;
    for (int i = 0; i < nh; i++) {
        struct fh *h = &f->h[i];
        h->net = f->net;
        h->idx = vnet_add_host(f->net, &fh_ops, h);
        h->cap = 2 * n + 16;
        h->rx = calloc(h->cap, sizeof(*h->rx));
        h->rx_src = calloc(h->cap, sizeof(*h->rx_src));
        h->rx_at = calloc(n, sizeof(*h->rx_at));
        h->tx_at = calloc(n, sizeof(*h->tx_at));
    }
    struct fh *s = &f->h[0];
    s->pkts = calloc(n, PKT_LEN);
    s->dst = calloc(n, sizeof(int));
    s->n = n;
    s->gap = fx_gap;
    for (size_t i = 0; i < n; i++) {
        make_pkt(s->pkts[i], kinds[i % (size_t)nkinds], (uint32_t)i);
        s->dst[i] = dsts[i % (size_t)ndsts];
    }
    vnet_set_trace(f->net, trace_tx, f);
    vnet_host_kick(f->net, 0);
    vnet_run(f->net);
}

static void fx_free(struct fx *f)
{
    vnet_destroy(f->net);
    for (int i = 0; i < f->nh; i++) {
        free(f->h[i].rx);
        free(f->h[i].rx_src);
        free(f->h[i].rx_at);
        free(f->h[i].tx_at);
        free(f->h[i].pkts);
        free(f->h[i].dst);
    }
}

static const enum kind only_data[] = {K_DATA_MID};
static const int to_one[] = {1};

/* Which of the n packets of host 0 reached host 1. */
static uint8_t *arrived(const struct fx *f, size_t n)
{
    uint8_t *got = calloc(n, 1);
    for (size_t k = 0; k < f->h[1].rxn; k++)
        got[f->h[1].rx[k]] = 1;
    return got;
}

static void vnet_faults__burst_rate_and_length(void **state)
{
    (void)state;
    struct vnet_faults fl = {.loss = 0.2, .burst = 4};
    struct fx f;
    size_t n = 100000;
    fx_run(&f, &fl, 21, 2, n, only_data, 1, to_one, 1);
    uint8_t *got = arrived(&f, n);
    size_t lost = 0, runs = 0, cur = 0;
    for (size_t i = 0; i < n; i++) {
        if (!got[i]) {
            lost++;
            cur++;
        } else if (cur) {
            runs++;
            cur = 0;
        }
    }
    double rate = (double)lost / n, mean = (double)lost / runs;
    print_message("vnet loss=0.2,burst=4: rate %.4f, mean burst %.3f (%zu runs)\n", rate, mean,
                  runs);
    struct vnet_stats st;
    vnet_get_stats(f.net, &st);
    assert_int_equal(st.drops_loss, lost);
    assert_true(fabs(rate - 0.2) < 0.015); /* sd ~ 0.003 */
    assert_true(fabs(mean - 4.0) < 0.25);  /* sd ~ 0.05 */
    free(got);
    fx_free(&f);
}

static void vnet_faults__per_type_loss(void **state)
{
    (void)state;
    static const enum kind all[] = {K_DATA_MID, K_DATA_LAST, K_GRANT, K_RESEND,
                                    K_BUSY,     K_NEED_ACK,  K_ACK};
    static const int cls[K_COUNT] = {HOMA_FAULT_CLASS_DATA,  HOMA_FAULT_CLASS_LAST_DATA,
                                     HOMA_FAULT_CLASS_GRANT, HOMA_FAULT_CLASS_RESEND,
                                     HOMA_FAULT_CLASS_BUSY,  HOMA_FAULT_CLASS_NEED_ACK,
                                     HOMA_FAULT_CLASS_ACK};
    size_t n = 7 * 200;
    /* Each class in turn lost entirely; nothing else. */
    for (int k = 0; k < K_COUNT; k++) {
        struct vnet_faults fl = {0};
        fl.class_loss[cls[k]] = 1.0;
        struct fx f;
        fx_run(&f, &fl, 3, 2, n, all, K_COUNT, to_one, 1);
        uint8_t *got = arrived(&f, n);
        for (size_t i = 0; i < n; i++) {
            enum kind ki = all[i % K_COUNT];
            /* DATA covers the last DATA packet too. */
            int hit = ki == (enum kind)k || (k == K_DATA_MID && ki == K_DATA_LAST);
            if (got[i] == hit) fail_msg("class %d: packet %zu (kind %d)", k, i, ki);
        }
        free(got);
        fx_free(&f);
    }
    /* loss limited to GRANTs by loss_types. */
    struct vnet_faults fl = {.loss = 0.5, .loss_types = 1u << HOMA_FAULT_CLASS_GRANT};
    struct fx f;
    n = 7 * 2000;
    fx_run(&f, &fl, 4, 2, n, all, K_COUNT, to_one, 1);
    uint8_t *got = arrived(&f, n);
    int grants_lost = 0;
    for (size_t i = 0; i < n; i++) {
        if (all[i % K_COUNT] == K_GRANT)
            grants_lost += !got[i];
        else
            assert_true(got[i]);
    }
    assert_in_range(grants_lost, 1000 - 120, 1000 + 120); /* sd 22 */
    free(got);
    fx_free(&f);
}

static void vnet_faults__host_masks(void **state)
{
    (void)state;
    /* Only host 0 -> host 1 is faulty: total loss there, none to host 2. */
    struct vnet_faults fl = {.loss = 1.0, .src_mask = 1u << 0, .dst_mask = 1u << 1};
    static const int dsts[] = {1, 2};
    struct fx f;
    size_t n = 1000;
    fx_run(&f, &fl, 5, 3, n, only_data, 1, dsts, 2);
    assert_int_equal(f.h[1].rxn, 0);
    assert_int_equal(f.h[2].rxn, n / 2);
    fx_free(&f);
    fl.src_mask = 1u << 2; /* the sender is not host 2: no faults at all */
    fx_run(&f, &fl, 5, 3, n, only_data, 1, dsts, 2);
    assert_int_equal(f.h[1].rxn + f.h[2].rxn, n);
    fx_free(&f);
}

static void vnet_faults__blackout_windows(void **state)
{
    (void)state;
    /* 100-byte packets leave every 80 ns: 10,000 of them span 800 us. */
    struct vnet_faults fl = {
        .blackout_ns = 50 * US, .blackout_every_ns = 200 * US, .blackout_start_ns = 30 * US};
    struct fx f;
    size_t n = 10000;
    fx_run(&f, &fl, 6, 2, n, only_data, 1, to_one, 1);
    uint8_t *got = arrived(&f, n);
    size_t in = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t t = f.h[0].tx_at[i];
        int dark = t >= 30 * US && (t - 30 * US) % (200 * US) < 50 * US;
        in += dark;
        if (got[i] == dark) fail_msg("packet %zu left at %lu ns", i, (unsigned long)t);
    }
    struct vnet_stats st;
    vnet_get_stats(f.net, &st);
    assert_int_equal(st.drops_blackout, in);
    assert_true(in > 4 * 600); /* four windows of 625 packets */
    free(got);
    fx_free(&f);
}

static void vnet_faults__delay_jitter(void **state)
{
    (void)state;
    size_t n = 5000;
    /* One packet every 5 us, so delayed packets never queue behind each
     * other at the downlink. */
    fx_gap = 5 * US;
    struct fx f0;
    struct vnet_faults none = {0};
    fx_run(&f0, &none, 7, 2, n, only_data, 1, to_one, 1);
    uint64_t base = f0.h[1].rx_at[0] - f0.h[0].tx_at[0];
    fx_free(&f0);
    struct vnet_faults fl = {.delay = 1.0, .delay_ns = 10 * US, .jitter_ns = 2 * US};
    struct fx f;
    fx_run(&f, &fl, 7, 2, n, only_data, 1, to_one, 1);
    assert_int_equal(f.h[1].rxn, n);
    double sum = 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t extra = f.h[1].rx_at[i] - f.h[0].tx_at[i] - base;
        sum += (double)extra;
        if (extra < lo) lo = extra;
        if (extra > hi) hi = extra;
    }
    print_message("delay 10 us +- 2 us: extra %.0f ns mean, %lu..%lu\n", sum / n, (unsigned long)lo,
                  (unsigned long)hi);
    fx_gap = 0;
    /* Uniform in [8, 12] us: sd of the mean 16 ns. */
    assert_true(lo >= 8 * US && lo < 8 * US + 20);
    assert_true(hi <= 12 * US && hi > 12 * US - 20);
    assert_true(fabs(sum / n - 10000.0) < 80.0);
    struct vnet_stats st;
    vnet_get_stats(f.net, &st);
    assert_int_equal(st.delays, n);
    fx_free(&f);
}

static void vnet_faults__reorder_depth(void **state)
{
    (void)state;
    struct vnet_faults fl = {.reorder = 0.02, .reorder_depth = 5, .reorder_max_ns = 1000 * US};
    struct fx f;
    size_t n = 20000;
    fx_run(&f, &fl, 8, 2, n, only_data, 1, to_one, 1);
    assert_int_equal(f.h[1].rxn, n);
    struct vnet_stats st;
    vnet_get_stats(f.net, &st);
    /* Overtakers of each packet: later indices that arrived before it. */
    int late = 0, exact = 0;
    uint32_t *order = f.h[1].rx;
    for (size_t pos = 0; pos < n; pos++) {
        int over = 0;
        for (size_t q = pos > 64 ? pos - 64 : 0; q < pos; q++)
            over += order[q] > order[pos];
        if (over == 0) continue;
        late++;
        exact += over == 5;
        assert_true(over <= 5);
    }
    print_message("reorder_depth=5: %lu held, %d late, %d overtaken by exactly 5\n",
                  (unsigned long)st.reorders, late, exact);
    assert_true(late <= (int)st.reorders && late >= (int)st.reorders - 2);
    assert_true(exact >= late - 2);
    assert_in_range(st.reorders, 400 - 100, 400 + 100); /* sd 20 */
    fx_free(&f);

    /* Without the time bound, a held packet still leaves once enough
     * later packets did; at the very end it waits, and vnet_destroy frees it. */
    fl.reorder_max_ns = 0;
    fx_run(&f, &fl, 8, 2, 2000, only_data, 1, to_one, 1);
    assert_true(f.h[1].rxn >= 2000 - 5 && f.h[1].rxn <= 2000);
    fx_free(&f);
}

/* Faults set all zero except the legacy ones draw exactly as before: the
 * same seed gives the same deliveries with and without the new fields at
 * their zero defaults (which is what every existing test relies on). */
static void vnet_faults__zero_new_fields_change_nothing(void **state)
{
    (void)state;
    struct vnet_faults a = {.loss = 0.1, .dup = 0.05, .reorder = 0.1, .reorder_max_ns = 3 * US};
    struct vnet_faults b = a;
    b.src_mask = 1u << 0; /* host 0 sends everything: same packets are faulty */
    struct fx fa, fb;
    fx_run(&fa, &a, 9, 2, 5000, only_data, 1, to_one, 1);
    fx_run(&fb, &b, 9, 2, 5000, only_data, 1, to_one, 1);
    assert_int_equal(fa.h[1].rxn, fb.h[1].rxn);
    assert_memory_equal(fa.h[1].rx, fb.h[1].rx, fa.h[1].rxn * sizeof(uint32_t));
    fx_free(&fa);
    fx_free(&fb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(vnet_faults__burst_rate_and_length),
        cmocka_unit_test(vnet_faults__per_type_loss),
        cmocka_unit_test(vnet_faults__host_masks),
        cmocka_unit_test(vnet_faults__blackout_windows),
        cmocka_unit_test(vnet_faults__delay_jitter),
        cmocka_unit_test(vnet_faults__reorder_depth),
        cmocka_unit_test(vnet_faults__zero_new_fields_change_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
