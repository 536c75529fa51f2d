/* Tests of the fault model (src/io/faults.c): the HOMA_FAULTS parser (every
 * key, every malformed case) and the statistics of each fault with fixed
 * seeds, on the decision function alone (no sockets). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/wire.h"
#include "io/fault_class.h"
#include "io/io.h"

static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A DATA packet of `payload` bytes at offset `off` of a message of msg_len
 * bytes (the offset in the segment field, or in `sequence` if seq). */
static size_t data_pkt(uint8_t *b, uint32_t msg_len, uint32_t off, uint32_t payload, int seq)
{
    memset(b, 0, HOMA_DATA_HDR_LEN + payload);
    b[11] = HOMA_PKT_DATA;
    b[12] = 0xE0;
    wr32(b + 28, msg_len);
    if (seq) {
        wr32(b + 4, off);
        wr32(b + 52, 0xFFFFFFFFu);
    } else {
        wr32(b + 52, off);
    }
    return HOMA_DATA_HDR_LEN + payload;
}

static size_t ctl_pkt(uint8_t *b, uint8_t type, size_t len)
{
    memset(b, 0, len);
    b[11] = type;
    b[12] = 0x50;
    return len;
}

static void parse_ok(const char *spec, homa_faults *f)
{
    char err[300];
    int rc = homa_faults_parse(spec, f, err, sizeof(err));
    if (rc != 0) fail_msg("'%s' refused: %s", spec, err);
}

static void homa_faults_parse__every_key(void **state)
{
    (void)state;
    homa_faults f;
    parse_ok("drop=0.1,dup=0.05,reorder=0.02,delay=0.03,delay_us=2000,jitter_us=500,"
             "reorder_depth=7,burst=3.5,drop_type=grant+last_data,blackout_ms=300,"
             "blackout_every_ms=2000,blackout_start_ms=100,seed=0x2a,dir=rx",
             &f);
    assert_true(f.drop == 0.1 && f.dup == 0.05 && f.reorder == 0.02 && f.delay == 0.03);
    assert_int_equal(f.delay_us, 2000);
    assert_int_equal(f.jitter_us, 500);
    assert_int_equal(f.reorder_depth, 7);
    assert_true(f.burst == 3.5);
    assert_int_equal(f.drop_types,
                     (1u << HOMA_FAULT_CLASS_GRANT) | (1u << HOMA_FAULT_CLASS_LAST_DATA));
    assert_int_equal(f.blackout_ns, 300000000ull);
    assert_int_equal(f.blackout_every_ns, 2000000000ull);
    assert_int_equal(f.blackout_start_ns, 100000000ull);
    assert_int_equal(f.seed, 42);
    assert_int_equal(f.dirs, HOMA_FAULT_RX);

    static const char *const names[HOMA_FAULT_CLASS_COUNT] = {
        "data", "last_data", "grant",  "resend",   "unknown",
        "busy", "cutoffs",   "freeze", "need_ack", "ack"};
    for (int c = 0; c < HOMA_FAULT_CLASS_COUNT; c++) {
        char spec[64];
        snprintf(spec, sizeof(spec), "drop_%s=0.25", names[c]);
        parse_ok(spec, &f);
        for (int d = 0; d < HOMA_FAULT_CLASS_COUNT; d++)
            assert_true(f.drop_class[d] == (d == c ? 0.25 : 0.0));
        assert_false(homa_faults_none(&f));
        snprintf(spec, sizeof(spec), "drop_type=%s", names[c]);
        parse_ok(spec, &f);
        assert_int_equal(f.drop_types, 1u << c);
        assert_true(f.drop == 1.0); /* drop_type alone: every such packet */
    }
    parse_ok("dir=tx", &f);
    assert_int_equal(f.dirs, HOMA_FAULT_TX);
    parse_ok("dir=both", &f);
    assert_int_equal(f.dirs, HOMA_FAULT_TX | HOMA_FAULT_RX);
    parse_ok("blackout_ms=5", &f); /* one window at the start */
    assert_false(homa_faults_none(&f));
    assert_int_equal(f.blackout_every_ns, 0);
    parse_ok("delay_us=010", &f); /* decimal, never octal */
    assert_int_equal(f.delay_us, 10);
    parse_ok("drop=0.2,burst=4", &f);
    parse_ok("drop=0.5,burst=1", &f); /* the edge: B / (1 + B) */
    parse_ok("drop_type=grant,drop=0.3", &f);
    assert_true(f.drop == 0.3);
}

static void homa_faults_parse__legacy_keys_keep_their_meaning(void **state)
{
    (void)state;
    homa_faults f;
    parse_ok("drop=0.05,dup=0.01,seed=7", &f);
    assert_true(f.drop == 0.05 && f.dup == 0.01 && f.seed == 7 && f.dirs == 0);
    assert_int_equal(f.delay_us, 1000);
    assert_true(f.burst == 0 && f.drop_types == 0 && f.jitter_us == 0 && f.reorder_depth == 0);
    assert_int_equal(f.blackout_ns, 0);
    parse_ok(" reorder=0.5 , delay=0.1,delay_us=50,dir=rx,", &f);
    assert_true(f.reorder == 0.5 && f.delay == 0.1 && f.delay_us == 50 && f.dirs == HOMA_FAULT_RX);
    parse_ok("", &f);
    assert_true(homa_faults_none(&f));
    parse_ok("delay_us=5,jitter_us=5", &f);
    assert_true(homa_faults_none(&f)); /* nothing delayed without `delay` */
}

static void homa_faults_parse__malformed(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        const char *says; /* part of the message */
    } bad[] = {
        {"drop=5", "drop"},
        {"drop=0.1x", "drop"},
        {"drop=", "drop"},
        {"drop= 0.1", "drop"},
        {"drop=-0.1", "drop"},
        {"drop=nan", "drop"},
        {"drop=inf", "drop"},
        {"dup=1.5", "dup"},
        {"reorder=2", "reorder"},
        {"delay=abc", "delay"},
        {"loss=0.1", "unknown fault key 'loss'"},
        {"drop_bogus=0.1", "unknown fault key 'drop_bogus'"},
        {"drop", "key=value"},
        {"=0.1", "unknown fault key ''"},
        {"seed=-1", "seed"},
        {"seed=0x", "seed"},
        {"seed=18446744073709551616", "seed"},
        {"dir=up", "dir"},
        {"dir=", "dir"},
        {"delay_us=10000001", "delay_us"},
        {"delay_us=1.5", "delay_us"},
        {"jitter_us=-3", "jitter_us"},
        {"delay_us=100,jitter_us=101", "jitter_us"},
        {"reorder_depth=0", "reorder_depth"},
        {"reorder_depth=1001", "reorder_depth"},
        {"burst=0.5", "burst"},
        {"burst=abc", "burst"},
        {"drop=0.6,burst=1", "burst"},
        {"drop=1,burst=4", "burst"},
        {"drop_type=grant,burst=2", "burst"}, /* drop_type alone is drop=1 */
        {"drop_type=", "drop_type"},
        {"drop_type=grant+", "drop_type"},
        {"drop_type=grant+bogus", "drop_type"},
        {"drop_type=GRANT", "drop_type"},
        {"drop_grant=1.1", "drop_grant"},
        {"blackout_ms=x", "blackout_ms"},
        {"blackout_ms=86400001", "blackout_ms"},
        {"blackout_every_ms=100", "blackout_ms > 0"},
        {"blackout_start_ms=100", "blackout_ms > 0"},
        {"blackout_ms=300,blackout_every_ms=300", "longer"},
        {"drop=0.6,dup=0.6", "add up"},
        {"drop=0.1,drop=0.2", "twice"},
        {"dir=tx,dir=rx", "twice"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        homa_faults f;
        char err[300] = "";
        int rc = homa_faults_parse(bad[i].spec, &f, err, sizeof(err));
        if (rc != HOMA_ERR_INVAL || strstr(err, bad[i].says) == NULL)
            fail_msg("'%s': rc %d, message '%s' (wanted '%s')", bad[i].spec, rc, err, bad[i].says);
    }
    homa_faults f;
    assert_int_equal(homa_faults_parse(NULL, &f, NULL, 0), HOMA_ERR_INVAL);
    assert_int_equal(homa_faults_parse("drop=0.1", NULL, NULL, 0), HOMA_ERR_INVAL);
    /* A small error buffer gets a truncated message, no overflow. */
    char tiny[8];
    assert_int_equal(homa_faults_parse("loss=1", &f, tiny, sizeof(tiny)), HOMA_ERR_INVAL);
    assert_int_equal(strlen(tiny), 7);
}

static void homa_fault_classify__types_and_last_data(void **state)
{
    (void)state;
    uint8_t b[HOMA_DATA_HDR_LEN + 1400];
    size_t n = data_pkt(b, 3000, 0, 1400, 0);
    assert_int_equal(homa_fault_classify(b, n), 1u << HOMA_FAULT_CLASS_DATA);
    n = data_pkt(b, 3000, 2800, 200, 0);
    assert_int_equal(homa_fault_classify(b, n),
                     (1u << HOMA_FAULT_CLASS_DATA) | (1u << HOMA_FAULT_CLASS_LAST_DATA));
    n = data_pkt(b, 3000, 2800, 200, 1); /* offset in `sequence` */
    assert_int_equal(homa_fault_classify(b, n),
                     (1u << HOMA_FAULT_CLASS_DATA) | (1u << HOMA_FAULT_CLASS_LAST_DATA));
    n = data_pkt(b, 3000, 1400, 100, 1);
    assert_int_equal(homa_fault_classify(b, n), 1u << HOMA_FAULT_CLASS_DATA);
    /* A hostile offset must not wrap around into "last". */
    n = data_pkt(b, 0xFFFFFFFFu, 0xFFFFFF00u, 100, 0);
    assert_int_equal(homa_fault_classify(b, n), 1u << HOMA_FAULT_CLASS_DATA);
    /* Truncated headers and unknown types are no class at all. */
    assert_int_equal(homa_fault_classify(b, HOMA_DATA_HDR_LEN - 1), 0);
    assert_int_equal(homa_fault_classify(b, 3), 0);
    assert_int_equal(homa_fault_classify(NULL, 100), 0);
    assert_int_equal(homa_fault_classify(b, ctl_pkt(b, 0x42, 40)), 0);
    assert_int_equal(homa_fault_classify(b, ctl_pkt(b, HOMA_PKT_GRANT, HOMA_GRANT_LEN)),
                     1u << HOMA_FAULT_CLASS_GRANT);
    assert_int_equal(homa_fault_classify(b, ctl_pkt(b, HOMA_PKT_GRANT, HOMA_GRANT_LEN - 1)), 0);
    assert_int_equal(homa_fault_classify(b, ctl_pkt(b, HOMA_PKT_RESEND, HOMA_RESEND_LEN)),
                     1u << HOMA_FAULT_CLASS_RESEND);
    assert_int_equal(homa_fault_classify(b, ctl_pkt(b, HOMA_PKT_RPC_UNKNOWN, 28)),
                     1u << HOMA_FAULT_CLASS_RPC_UNKNOWN);
    assert_int_equal(homa_fault_classify(b, ctl_pkt(b, HOMA_PKT_BUSY, 28)),
                     1u << HOMA_FAULT_CLASS_BUSY);
    assert_int_equal(homa_fault_classify(b, ctl_pkt(b, HOMA_PKT_CUTOFFS, HOMA_CUTOFFS_LEN)),
                     1u << HOMA_FAULT_CLASS_CUTOFFS);
    assert_int_equal(homa_fault_classify(b, ctl_pkt(b, HOMA_PKT_FREEZE, 28)),
                     1u << HOMA_FAULT_CLASS_FREEZE);
    assert_int_equal(homa_fault_classify(b, ctl_pkt(b, HOMA_PKT_NEED_ACK, 28)),
                     1u << HOMA_FAULT_CLASS_NEED_ACK);
    assert_int_equal(homa_fault_classify(b, ctl_pkt(b, HOMA_PKT_ACK, HOMA_ACK_LEN)),
                     1u << HOMA_FAULT_CLASS_ACK);
    assert_int_equal(homa_fault_classify(b, ctl_pkt(b, HOMA_PKT_ACK, HOMA_ACK_LEN - 1)), 0);
}

static void init(homa_fault_state *st, const char *spec)
{
    homa_faults f;
    parse_ok(spec, &f);
    homa_fault_init(st, &f, HOMA_FAULT_TX, 0, 0);
}

static void homa_fault_ge_params__rate_and_burst(void **state)
{
    (void)state;
    double b, g;
    assert_int_equal(homa_fault_ge_params(0.2, 4, &b, &g), 0);
    assert_true(fabs(g - 0.25) < 1e-12);
    assert_true(fabs(b - 0.0625) < 1e-12); /* 0.2 * 0.25 / 0.8 */
    assert_true(fabs(b / (b + g) - 0.2) < 1e-12);
    assert_int_equal(homa_fault_ge_params(0.5, 1, &b, &g), 0);
    assert_true(b == 1.0 && g == 1.0);
    assert_int_equal(homa_fault_ge_params(0.51, 1, &b, &g), -1);
    assert_int_equal(homa_fault_ge_params(1.0, 10, &b, &g), -1);
    assert_int_equal(homa_fault_ge_params(0.1, 0.9, &b, &g), -1);
}

/* Loss rate and mean run of consecutive losses over n packets. */
static void loss_runs(homa_fault_state *st, int n, double *rate, double *mean_run, int *runs1,
                      int *runs)
{
    uint8_t b[HOMA_DATA_HDR_LEN + 100];
    size_t len = data_pkt(b, 1000000, 0, 100, 0);
    int lost = 0, nruns = 0, ones = 0, cur = 0;
    for (int i = 0; i < n; i++) {
        int d = homa_fault_decide(st, 0, b, len, NULL, NULL) == HOMA_FAULT_DROP;
        lost += d;
        if (d) {
            cur++;
        } else if (cur > 0) {
            nruns++;
            ones += cur == 1;
            cur = 0;
        }
    }
    *rate = (double)lost / n;
    *mean_run = nruns ? (double)lost / nruns : 0;
    if (runs1) *runs1 = ones;
    if (runs) *runs = nruns;
}

static void homa_fault_decide__burst_rate_and_length(void **state)
{
    (void)state;
    homa_fault_state st;
    double rate, run;
    int ones, runs;
    init(&st, "drop=0.2,burst=4,seed=99");
    loss_runs(&st, 200000, &rate, &run, &ones, &runs);
    print_message("drop=0.2,burst=4: rate %.4f, mean burst %.3f, %d runs\n", rate, run, runs);
    /* Correlated losses: sd of the rate ~ 0.0021 here; 0.01 is ~5 sd. */
    assert_true(fabs(rate - 0.2) < 0.01);
    assert_true(fabs(run - 4.0) < 0.2);
    /* Geometric runs: P(length 1) = p_good = 1/4. */
    assert_true(fabs((double)ones / runs - 0.25) < 0.02);

    init(&st, "drop=0.05,burst=10,seed=5");
    loss_runs(&st, 400000, &rate, &run, NULL, &runs);
    print_message("drop=0.05,burst=10: rate %.4f, mean burst %.3f\n", rate, run);
    assert_true(fabs(rate - 0.05) < 0.008);
    assert_true(fabs(run - 10.0) < 1.0);

    /* Independent loss (no burst): runs are geometric with mean 1/(1-drop). */
    init(&st, "drop=0.2,seed=99");
    loss_runs(&st, 200000, &rate, &run, NULL, NULL);
    assert_true(fabs(rate - 0.2) < 0.005);
    assert_true(fabs(run - 1.25) < 0.03);

    /* dup keeps its unconditional rate next to a burst. */
    init(&st, "drop=0.2,burst=4,dup=0.1,seed=3");
    uint8_t b[HOMA_DATA_HDR_LEN];
    size_t len = data_pkt(b, 100, 0, 0, 0);
    int dups = 0;
    for (int i = 0; i < 100000; i++)
        dups += homa_fault_decide(&st, 0, b, len, NULL, NULL) == HOMA_FAULT_DUP;
    assert_true(fabs(dups / 100000.0 - 0.1) < 0.006);
}

static void homa_fault_decide__same_seed_same_decisions(void **state)
{
    (void)state;
    homa_fault_state a, b;
    init(&a, "drop=0.3,burst=3,reorder=0.1,delay=0.1,jitter_us=100,seed=17");
    init(&b, "drop=0.3,burst=3,reorder=0.1,delay=0.1,jitter_us=100,seed=17");
    uint8_t p[HOMA_DATA_HDR_LEN];
    size_t len = data_pkt(p, 100, 0, 0, 0);
    for (int i = 0; i < 10000; i++) {
        uint64_t ha = 0, hb = 0;
        assert_int_equal(homa_fault_decide(&a, 0, p, len, &ha, NULL),
                         homa_fault_decide(&b, 0, p, len, &hb, NULL));
        assert_int_equal(ha, hb);
    }
}

static void homa_fault_decide__per_type_loss(void **state)
{
    (void)state;
    uint8_t grant[HOMA_GRANT_LEN], resend[HOMA_RESEND_LEN], mid[HOMA_DATA_HDR_LEN + 10],
        last[HOMA_DATA_HDR_LEN + 10];
    size_t gl = ctl_pkt(grant, HOMA_PKT_GRANT, sizeof(grant));
    size_t rl = ctl_pkt(resend, HOMA_PKT_RESEND, sizeof(resend));
    size_t ml = data_pkt(mid, 100, 0, 10, 0);
    size_t ll = data_pkt(last, 100, 90, 10, 0);
    homa_fault_state st;

    /* drop_type=grant: every GRANT, nothing else. */
    init(&st, "drop_type=grant,seed=1");
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(homa_fault_decide(&st, 0, grant, gl, NULL, NULL), HOMA_FAULT_DROP);
        assert_int_equal(homa_fault_decide(&st, 0, resend, rl, NULL, NULL), HOMA_FAULT_PASS);
        assert_int_equal(homa_fault_decide(&st, 0, mid, ml, NULL, NULL), HOMA_FAULT_PASS);
    }
    /* drop_type=last_data: the last DATA packet only. */
    init(&st, "drop_type=last_data,seed=1");
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(homa_fault_decide(&st, 0, last, ll, NULL, NULL), HOMA_FAULT_DROP);
        assert_int_equal(homa_fault_decide(&st, 0, mid, ml, NULL, NULL), HOMA_FAULT_PASS);
    }
    /* drop_grant=0.5: half the GRANTs, independently of the rest. */
    init(&st, "drop_grant=0.5,drop_resend=0.1,seed=8");
    int g = 0, r = 0, m = 0;
    for (int i = 0; i < 20000; i++) {
        g += homa_fault_decide(&st, 0, grant, gl, NULL, NULL) == HOMA_FAULT_DROP;
        r += homa_fault_decide(&st, 0, resend, rl, NULL, NULL) == HOMA_FAULT_DROP;
        m += homa_fault_decide(&st, 0, mid, ml, NULL, NULL) == HOMA_FAULT_DROP;
    }
    assert_in_range(g, 10000 - 350, 10000 + 350); /* sd ~ 71 */
    assert_in_range(r, 2000 - 210, 2000 + 210);   /* sd ~ 42 */
    assert_int_equal(m, 0);
    /* drop=0.3 limited to GRANTs by drop_type; other types pass. */
    init(&st, "drop_type=grant,drop=0.3,seed=4");
    g = m = 0;
    for (int i = 0; i < 20000; i++) {
        g += homa_fault_decide(&st, 0, grant, gl, NULL, NULL) == HOMA_FAULT_DROP;
        m += homa_fault_decide(&st, 0, mid, ml, NULL, NULL) == HOMA_FAULT_DROP;
    }
    assert_in_range(g, 6000 - 330, 6000 + 330);
    assert_int_equal(m, 0);
    /* Bytes that are no Homa packet match no type. */
    init(&st, "drop_type=data+grant+resend+unknown+busy+cutoffs+freeze+need_ack+ack,seed=2");
    assert_int_equal(homa_fault_decide(&st, 0, grant, 5, NULL, NULL), HOMA_FAULT_PASS);
}

static void homa_fault_decide__blackout_windows(void **state)
{
    (void)state;
    homa_faults f;
    parse_ok("blackout_ms=300,blackout_every_ms=2000,blackout_start_ms=100,seed=1", &f);
    homa_fault_state st;
    const uint64_t origin = 5000000000ull, ms = 1000000;
    homa_fault_init(&st, &f, HOMA_FAULT_TX, 0, origin);
    uint8_t b[HOMA_DATA_HDR_LEN];
    size_t len = data_pkt(b, 100, 0, 0, 0);
    /* Exactly [100, 400) ms, [2100, 2400) ms, ... after the origin. */
    for (uint64_t t = 0; t < 10000; t++) {
        uint64_t now = origin + t * ms;
        int in = t >= 100 && (t - 100) % 2000 < 300;
        int act = homa_fault_decide(&st, now, b, len, NULL, NULL);
        if (act != (in ? HOMA_FAULT_DROP : HOMA_FAULT_PASS))
            fail_msg("t = %lu ms", (unsigned long)t);
    }
    assert_int_equal(homa_fault_decide(&st, origin + 400 * ms - 1, b, len, NULL, NULL),
                     HOMA_FAULT_DROP);
    assert_int_equal(homa_fault_decide(&st, origin + 100 * ms - 1, b, len, NULL, NULL),
                     HOMA_FAULT_PASS);
    assert_int_equal(homa_fault_decide(&st, origin - 1, b, len, NULL, NULL), HOMA_FAULT_PASS);
    assert_int_equal(st.drops_blackout, 5 * 300 + 1);
    /* A single window from the start. */
    init(&st, "blackout_ms=50");
    assert_int_equal(homa_fault_decide(&st, 0, b, len, NULL, NULL), HOMA_FAULT_DROP);
    assert_int_equal(homa_fault_decide(&st, 50 * ms - 1, b, len, NULL, NULL), HOMA_FAULT_DROP);
    assert_int_equal(homa_fault_decide(&st, 50 * ms, b, len, NULL, NULL), HOMA_FAULT_PASS);
    assert_int_equal(homa_fault_decide(&st, 2050 * ms, b, len, NULL, NULL), HOMA_FAULT_PASS);
}

static void homa_fault_decide__delay_jitter_and_reorder_depth(void **state)
{
    (void)state;
    homa_fault_state st;
    init(&st, "delay=1,delay_us=1000,jitter_us=200,seed=6");
    uint8_t b[HOMA_DATA_HDR_LEN];
    size_t len = data_pkt(b, 100, 0, 0, 0);
    double sum = 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < 20000; i++) {
        uint64_t h = 0;
        assert_int_equal(homa_fault_decide(&st, 0, b, len, &h, NULL), HOMA_FAULT_DELAY);
        sum += (double)h;
        if (h < lo) lo = h;
        if (h > hi) hi = h;
    }
    /* Uniform in [800, 1200] us: sd of the mean ~ 0.8 us. */
    assert_true(fabs(sum / 20000 - 1000000.0) < 5000.0);
    assert_true(lo >= 800000 && hi <= 1200000);
    assert_true(lo < 805000 && hi > 1195000);

    init(&st, "reorder=1,reorder_depth=9,seed=6");
    uint64_t h = 0;
    uint32_t w = 0;
    assert_int_equal(homa_fault_decide(&st, 0, b, len, &h, &w), HOMA_FAULT_REORDER);
    assert_int_equal(w, 9);
    assert_int_equal(h, 1000000); /* the fallback: delay_us */
    init(&st, "reorder=1,seed=6");
    assert_int_equal(homa_fault_decide(&st, 0, b, len, &h, &w), HOMA_FAULT_REORDER);
    assert_int_equal(w, 1); /* as before: behind the next packet */
}

static void homa_fault_init__direction(void **state)
{
    (void)state;
    homa_faults f;
    parse_ok("drop=1,dir=rx", &f);
    homa_fault_state st;
    homa_fault_init(&st, &f, HOMA_FAULT_TX, 0, 0);
    assert_false(st.active);
    homa_fault_init(&st, &f, HOMA_FAULT_RX, 0, 0);
    assert_true(st.active);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_faults_parse__every_key),
        cmocka_unit_test(homa_faults_parse__legacy_keys_keep_their_meaning),
        cmocka_unit_test(homa_faults_parse__malformed),
        cmocka_unit_test(homa_fault_classify__types_and_last_data),
        cmocka_unit_test(homa_fault_ge_params__rate_and_burst),
        cmocka_unit_test(homa_fault_decide__burst_rate_and_length),
        cmocka_unit_test(homa_fault_decide__same_seed_same_decisions),
        cmocka_unit_test(homa_fault_decide__per_type_loss),
        cmocka_unit_test(homa_fault_decide__blackout_windows),
        cmocka_unit_test(homa_fault_decide__delay_jitter_and_reorder_depth),
        cmocka_unit_test(homa_fault_init__direction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
