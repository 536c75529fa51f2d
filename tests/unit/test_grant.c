/* Unit tests for src/core/grant.c: receiver SRPT, overcommitment, the
 * max_incoming cap, one message per sender, priorities by rank, fifo grants.
 * DATA packets are crafted with the wire encoder and fed to one engine; the
 * GRANTs it emits are pulled and decoded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"

#define PORT 7

static uint8_t payload[1400];

static homa_addr host(int i)
{
    homa_addr a;
    memset(&a, 0, sizeof(a));
    a.bytes[14] = (uint8_t)(i >> 8);
    a.bytes[15] = (uint8_t)i;
    return a;
}

/* Delivers one DATA packet of a request (client id `cid`) from host h,
 * the sender claiming `incoming` bytes may be sent without grants. */
static int data_port(homa_engine *e, uint16_t port, uint64_t now, int h, uint64_t cid,
                     uint32_t msglen, uint32_t off, uint32_t len, uint32_t incoming)
{
    struct homa_wire_pkt p;
    memset(&p, 0, sizeof(p));
    p.type = HOMA_PKT_DATA;
    p.sport = 1000;
    p.dport = port;
    p.sender_id = cid;
    p.u.data.message_length = msglen;
    p.u.data.incoming = incoming;
    p.u.data.offset = off;
    p.u.data.cutoff_version = 1;
    uint8_t buf[HOMA_MAX_HDR_LEN + sizeof(payload)];
    size_t hl = homa_wire_encode(&p, buf);
    memcpy(buf + hl, payload, len);
    homa_addr a = host(h);
    return homa_engine_input(e, now, &a, buf, hl + len);
}

static int data_inc(homa_engine *e, uint64_t now, int h, uint64_t cid, uint32_t msglen,
                    uint32_t off, uint32_t len, uint32_t incoming)
{
    return data_port(e, PORT, now, h, cid, msglen, off, len, incoming);
}

static int data(homa_engine *e, uint64_t now, int h, uint64_t cid, uint32_t msglen, uint32_t off,
                uint32_t len)
{
    return data_inc(e, now, h, cid, msglen, off, len, msglen < 40000 ? msglen : 40000);
}

/* Delivers the first n packets of a message: enough data that a grant is
 * due (grants are batched to a quarter of the window). */
static void burst(homa_engine *e, int h, uint64_t cid, uint32_t msglen, int n)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(data(e, 0, h, cid, msglen, (uint32_t)i * 1400, 1400), 0);
}

struct grant_seen {
    homa_addr dst;
    uint64_t id;
    uint32_t offset;
    uint8_t prio;
};

static int pull_grants(homa_engine *e, struct grant_seen *g, int max)
{
    homa_pkt_out out[64];
    int n, found = 0;
    while ((n = homa_engine_pull(e, 0, out, 64)) > 0) {
        for (int i = 0; i < n; i++) {
            struct homa_wire_pkt p;
            assert_int_equal(homa_wire_decode(out[i].hdr, out[i].hdr_len, &p), 0);
            if (p.type != HOMA_PKT_GRANT || found >= max) continue;
            g[found].dst = out[i].dst;
            g[found].id = p.sender_id;
            g[found].offset = p.u.grant.offset;
            g[found].prio = p.u.grant.priority;
            found++;
        }
        homa_engine_pull_done(e);
    }
    return found;
}

static homa_engine *make(homa_config *cfg)
{
    homa_engine *e;
    assert_int_equal(homa_engine_create(cfg, NULL, &e), 0);
    assert_int_equal(homa_engine_port_open(e, PORT), 0);
    return e;
}

static void homa_grant_prio_for_rank__uses_low_levels_first(void **state)
{
    (void)state;
    homa_engine *e = make(NULL);
    /* defaults: levels 0-3 are scheduled */
    assert_int_equal(homa_grant_prio_for_rank(e, 0, 1), 0);
    assert_int_equal(homa_grant_prio_for_rank(e, 0, 2), 1);
    assert_int_equal(homa_grant_prio_for_rank(e, 1, 2), 0);
    assert_int_equal(homa_grant_prio_for_rank(e, 0, 4), 3);
    assert_int_equal(homa_grant_prio_for_rank(e, 3, 4), 0);
    assert_int_equal(homa_grant_prio_for_rank(e, 0, 8), 3);
    assert_int_equal(homa_grant_prio_for_rank(e, 7, 8), 0);
    homa_engine_destroy(e);
}

static void homa_grant_check__srpt_rank_and_priority(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.grant_fifo_permille = 0;
    homa_engine *e = make(&cfg);
    /* two senders: host 1 has 500 KB left, host 2 has 100 KB */
    burst(e, 1, 2, 500000, 10);
    burst(e, 2, 2, 100000, 10);
    struct grant_seen g[16];
    int n = pull_grants(e, g, 16);
    assert_true(n >= 2);
    /* the last grant to each host tells its current priority */
    uint8_t p1 = 0, p2 = 0;
    for (int i = 0; i < n; i++) {
        if (g[i].dst.bytes[15] == 1) p1 = g[i].prio;
        if (g[i].dst.bytes[15] == 2) p2 = g[i].prio;
        assert_int_equal(g[i].id, 3); /* server id = client id ^ 1 */
    }
    assert_true(p2 > p1);
    homa_engine_destroy(e);
}

/* A message to a port of a higher scheduling class is granted before a
 * shorter one to a class-0 port: one message granted at a time, host 1's
 * 500 KB to the class-1 port gets the grants, host 2's 100 KB waits; once
 * host 1's is granted whole, host 2's gets its turn. */
static void homa_grant_check__higher_class_first(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.grant_fifo_permille = 0;
    cfg.max_overcommit = 1;
    homa_engine *e = make(&cfg);
    assert_int_equal(homa_engine_port_open(e, PORT + 1), 0);
    assert_int_equal(homa_engine_port_set_class(e, PORT + 1, 1), 0);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(data_port(e, PORT + 1, 0, 1, 2, 500000, (uint32_t)i * 1400, 1400, 40000),
                         0);
        assert_int_equal(data_port(e, PORT, 0, 2, 2, 100000, (uint32_t)i * 1400, 1400, 40000), 0);
    }
    struct grant_seen g[64];
    int n = pull_grants(e, g, 64);
    assert_true(n >= 1);
    for (int i = 0; i < n; i++)
        assert_int_equal(g[i].dst.bytes[15], 1);
    /* host 1's message arrives whole; host 2's gets grants only once
     * host 1's needs none */
    uint32_t granted = g[n - 1].offset;
    int host2_grants = 0;
    for (uint32_t off = 14000; off < 500000; off += 1400) {
        uint32_t len = 500000 - off < 1400 ? 500000 - off : 1400;
        assert_int_equal(data_port(e, PORT + 1, 0, 1, 2, 500000, off, len, 40000), 0);
        n = pull_grants(e, g, 64);
        for (int i = 0; i < n; i++) {
            if (g[i].dst.bytes[15] == 1) {
                assert_int_equal(host2_grants, 0);
                granted = g[i].offset;
            } else {
                assert_int_equal(granted, 500000);
                host2_grants++;
            }
        }
    }
    assert_int_equal(granted, 500000);
    assert_true(host2_grants > 0);
    homa_engine_destroy(e);
}

static void homa_grant_check__one_message_per_sender(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.grant_fifo_permille = 0;
    homa_engine *e = make(&cfg);
    burst(e, 1, 2, 300000, 10);
    struct grant_seen g[16];
    pull_grants(e, g, 16);
    /* a shorter message from the same sender takes over; the first gets
     * nothing more while it is there */
    burst(e, 1, 4, 200000, 10);
    int n = pull_grants(e, g, 16);
    assert_true(n >= 1);
    for (int i = 0; i < n; i++)
        assert_int_equal(g[i].id, 5); /* only the shorter one */
    homa_engine_destroy(e);
}

static void homa_grant_check__overcommit_and_max_incoming(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.grant_fifo_permille = 0;
    cfg.max_overcommit = 4;
    cfg.unsched_bytes = 10000;
    cfg.max_incoming = 100000;
    homa_engine *e = make(&cfg);
    /* 10 senders, 1 MB each, first packet only, incoming = 40 KB claimed
     * by the crafted packets */
    for (int h = 1; h <= 10; h++)
        assert_int_equal(data(e, 0, h, 2, 1000000, 0, 1400), 0);
    homa_counters c;
    homa_engine_counters(e, &c);
    struct grant_seen g[64];
    int n = pull_grants(e, g, 64);
    /* 10 x 38,600 unscheduled bytes outstanding already exceed max_incoming:
     * no grant may be issued */
    assert_int_equal(n, 0);
    homa_engine_destroy(e);

    cfg.max_incoming = 1000000;
    cfg.grant_window = 80000; /* ahead of the 40 KB the senders claim */
    e = make(&cfg);
    for (int h = 1; h <= 10; h++)
        assert_int_equal(data(e, 0, h, 2, 1000000, 0, 1400), 0);
    n = pull_grants(e, g, 64);
    int hosts[11] = {0};
    for (int i = 0; i < n; i++)
        hosts[g[i].dst.bytes[15]] = 1;
    int granted_hosts = 0;
    for (int h = 1; h <= 10; h++)
        granted_hosts += hosts[h];
    assert_int_equal(granted_hosts, 4);
    homa_engine_counters(e, &c);
    assert_true(c.incoming_bytes <= cfg.max_incoming);
    homa_engine_destroy(e);
}

/* One receiver, overcommit 1, FIFO grants of 10,000 B for 10 % of the
 * granted bytes.  The oldest message (host 1) is the longest, so SRPT alone
 * would never grant it; alone at first, it gets one window (2,800 B), and
 * its one unscheduled packet has arrived (else it needs no pity yet).
 * Then host 2 delivers 200 packets of a shorter message: 280,000 B of SRPT
 * grants, three FIFO turns' worth.  Returns the engine, *off = host 2's
 * next offset. */
static homa_engine *fifo_setup(uint32_t *off)
{
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.max_overcommit = 1;
    cfg.grant_fifo_permille = 100;
    cfg.fifo_grant_increment = 10000;
    cfg.grant_window = 1400;
    homa_engine *e = make(&cfg);
    assert_int_equal(data_inc(e, 0, 1, 2, 900000, 0, 1400, 1400), 0);
    *off = 0;
    for (int i = 0; i < 200; i++, *off += 1400)
        assert_int_equal(data(e, 1000 + (uint64_t)i, 2, 2, 500000, *off, 1400), 0);
    return e;
}

/* Pulls the queued GRANTs; returns how many went to host h (queued GRANTs
 * of one RPC merge) and the highest offset among them in *max. */
static int grants_to(homa_engine *e, int h, uint32_t *max)
{
    struct grant_seen g[512];
    int n = pull_grants(e, g, 512), count = 0;
    *max = 0;
    for (int i = 0; i < n; i++)
        if (g[i].dst.bytes[15] == h) {
            count++;
            if (g[i].offset > *max) *max = g[i].offset;
        }
    return count;
}

static void homa_grant_check__fifo_grant_reaches_oldest(void **state)
{
    (void)state;
    uint32_t off, max;
    homa_engine *e = fifo_setup(&off);
    assert_true(grants_to(e, 1, &max) >= 1);
    assert_true(max >= 2800 + 10000); /* beyond its SRPT window */
    assert_int_equal((max - 2800) % 1400, 0); /* whole packets */
    homa_counters c;
    homa_engine_counters(e, &c);
    assert_true(c.fifo_grants >= 1);
    homa_engine_destroy(e);
}

/* A FIFO grant the oldest message's sender has not used yet (it is busy
 * with shorter messages) is not topped up: more would pile up unusable
 * grants against max_incoming.  Once its bytes arrive, the next turn
 * grants again. */
static void homa_grant_check__fifo_waits_for_last_grant(void **state)
{
    (void)state;
    uint32_t off, old_max;
    homa_engine *e = fifo_setup(&off);
    assert_true(grants_to(e, 1, &old_max) >= 1);
    /* fifo_grant_increment 10,000 in whole packets of 1,400: 11,200 */
    assert_int_equal(old_max, 2800 + 11200);
    homa_counters c;
    homa_engine_counters(e, &c);
    assert_int_equal(c.fifo_grants, 1);
    assert_true(c.fifo_skipped >= 1);
    /* the oldest's sender sends what it was granted; the next turn grants */
    for (uint32_t o = 1400; o < 14000; o += 1400) {
        uint32_t len = o + 1400 <= 14000 ? 1400 : 14000 - o;
        assert_int_equal(data_inc(e, 2, 1, 2, 900000, o, len, 1400), 0);
    }
    for (int i = 0; i < 70; i++, off += 1400)
        assert_int_equal(data(e, 3, 2, 2, 500000, off, 1400), 0);
    grants_to(e, 1, &old_max);
    assert_int_equal(old_max, 14000 + 11200);
    homa_engine_counters(e, &c);
    assert_int_equal(c.fifo_grants, 2);
    homa_engine_destroy(e);
}

static void homa_grant_check__queued_grant_replaced_by_newer(void **state)
{
    (void)state;
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.grant_fifo_permille = 0;
    cfg.unsched_bytes = 2800;
    cfg.grant_window = 2800; /* two packets: a grant after each packet */
    homa_engine *e = make(&cfg);
    /* Three packets read back to back: the GRANTs they trigger for the
     * same RPC collapse into one, carrying the newest offset. */
    for (int i = 0; i < 3; i++)
        assert_int_equal(data_inc(e, 0, 1, 2, 100000, (uint32_t)i * 1400, 1400, 2800), 0);
    /* another RPC's grant in between is its own packet */
    assert_int_equal(data_inc(e, 0, 2, 2, 100000, 0, 1400, 2800), 0);
    assert_int_equal(data_inc(e, 0, 1, 2, 100000, 4200, 1400, 2800), 0);
    struct grant_seen g[16];
    int n = pull_grants(e, g, 16);
    assert_int_equal(n, 2);
    assert_int_equal(g[0].dst.bytes[15], 1);
    assert_int_equal(g[0].offset, 4 * 1400 + 2800); /* received + window */
    assert_int_equal(g[1].dst.bytes[15], 2);
    homa_counters c;
    homa_engine_counters(e, &c);
    assert_true(c.grants_merged >= 3);
    assert_int_equal(c.grant_out, 2);
    /* once sent, the next grant is a new packet */
    assert_int_equal(data_inc(e, 0, 1, 2, 100000, 5600, 1400, 2800), 0);
    n = pull_grants(e, g, 16);
    assert_int_equal(n, 1);
    assert_int_equal(g[0].offset, 5 * 1400 + 2800);
    homa_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_grant_prio_for_rank__uses_low_levels_first),
        cmocka_unit_test(homa_grant_check__srpt_rank_and_priority),
        cmocka_unit_test(homa_grant_check__higher_class_first),
        cmocka_unit_test(homa_grant_check__one_message_per_sender),
        cmocka_unit_test(homa_grant_check__overcommit_and_max_incoming),
        cmocka_unit_test(homa_grant_check__fifo_grant_reaches_oldest),
        cmocka_unit_test(homa_grant_check__fifo_waits_for_last_grant),
        cmocka_unit_test(homa_grant_check__queued_grant_replaced_by_newer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
