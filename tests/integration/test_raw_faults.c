/* Fault injection in the raw IP driver (src/io/raw.c), which shares the
 * queue of held packets with the UDP driver (src/io/faultq.c): delayed
 * packets are held until flush() at their due time, next_deadline() says
 * when, reordered ones are overtaken by exactly the packets that pass, and
 * receive faults hold packets in recv().  The driver is used directly on
 * loopback with hand-made DATA headers, time passed in by the test.
 *
 * Needs CAP_NET_RAW: without it the tests are skipped (exit 77), as in
 * test_raw_driver.c; the queue itself is tested without privileges by
 * tests/unit/test_faultq.c. */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <homa/homa.h>

#include "core/wire.h"
#include "io/common.h"
#include "io/io.h"

#define MS 1000000ull

static int have_raw;
static const homa_io_ops *io = &homa_raw_ops;

static homa_io_sock *open_sock(const homa_faults *f, uint64_t salt)
{
    homa_endpoint ep;
    assert_int_equal(homa_endpoint_parse("127.0.0.1:0", &ep), 0);
    homa_io_opts o = {.faults = f, .fault_salt = salt};
    homa_io_sock *s = NULL;
    assert_int_equal(io->open(&ep, &o, &s), 0);
    return s;
}

/* DATA packet number seq from a to b with a payload derived from seq. */
static void make_data(homa_pkt_out *p, homa_io_sock *a, homa_io_sock *b, uint32_t seq,
                      uint8_t *payload, uint32_t len)
{
    homa_endpoint ea, eb;
    io->local(a, &ea);
    io->local(b, &eb);
    memset(p, 0, sizeof(*p));
    p->dst = eb.addr;
    p->dport = eb.port;
    p->sport = ea.port;
    p->priority = 3;
    p->type = HOMA_PKT_DATA;
    p->hdr_len = HOMA_DATA_HDR_LEN;
    p->hdr[0] = (uint8_t)(ea.port >> 8);
    p->hdr[1] = (uint8_t)ea.port;
    p->hdr[2] = (uint8_t)(eb.port >> 8);
    p->hdr[3] = (uint8_t)eb.port;
    p->hdr[4] = (uint8_t)(seq >> 24);
    p->hdr[5] = (uint8_t)(seq >> 16);
    p->hdr[6] = (uint8_t)(seq >> 8);
    p->hdr[7] = (uint8_t)seq;
    p->hdr[11] = HOMA_PKT_DATA;
    p->hdr[12] = 0xE0;
    p->hdr[27] = 1;
    p->hdr[31] = 200; /* message length, well past every offset below */
    for (uint32_t i = 0; i < len; i++)
        payload[i] = (uint8_t)(seq * 31 + i);
    p->payload = payload;
    p->payload_len = len;
}

static uint32_t pkt_seq(const uint8_t *d)
{
    return (uint32_t)d[4] << 24 | (uint32_t)d[5] << 16 | (uint32_t)d[6] << 8 | d[7];
}

/* Receives at time `now` (the driver's clock) for up to wait_ms of real
 * time, until `want` packets came; records their sequence numbers and
 * checks their bytes.  Returns the count. */
static int recv_seqs(homa_io_sock *s, uint64_t now, int want, int wait_ms, uint32_t *seqs,
                     uint32_t payload_len)
{
    int got = 0;
    for (int tries = 0; tries <= wait_ms && got < want; tries++) {
        homa_io_rx rx[64];
        int n;
        while ((n = io->recv(s, now, rx, 64)) > 0) {
            for (int i = 0; i < n; i++) {
                assert_int_equal(rx[i].unreach, 0);
                assert_int_equal(rx[i].len, HOMA_DATA_HDR_LEN + payload_len);
                uint32_t seq = pkt_seq(rx[i].data);
                for (uint32_t k = 0; k < payload_len; k++)
                    assert_int_equal(rx[i].data[HOMA_DATA_HDR_LEN + k], (uint8_t)(seq * 31 + k));
                assert_int_equal(rx[i].tos, 3 << 5);
                if (got < 256) seqs[got] = seq;
                got++;
            }
        }
        if (got >= want) break;
        struct pollfd p = {.fd = io->fd(s), .events = POLLIN};
        poll(&p, 1, 1);
    }
    return got;
}

/* Send side: every packet is delayed 300 ms (virtual): nothing arrives
 * until flush() at the due time, then all of it, in order. */
static void raw_faults__tx_delay_held_until_due(void **state)
{
    (void)state;
    if (!have_raw) skip();
    homa_faults f;
    assert_int_equal(homa_faults_parse("delay=1,delay_us=300000,dir=tx,seed=4", &f, NULL, 0), 0);
    homa_io_sock *a = open_sock(&f, 1), *b = open_sock(NULL, 2);
    uint64_t t0 = homa_io_monotonic_ns();
    homa_pkt_out pk[5];
    uint8_t buf[5][100];
    for (uint32_t i = 0; i < 5; i++)
        make_data(&pk[i], a, b, i, buf[i], 100);
    assert_int_equal(io->send(a, t0, pk, 5), 5);
    memset(buf, 0, sizeof(buf)); /* the driver holds its own copies */
    assert_true(io->next_deadline(a) == t0 + 300 * MS);
    assert_true(io->next_deadline(b) == UINT64_MAX);
    uint32_t seqs[256];
    assert_int_equal(recv_seqs(b, t0, 5, 50, seqs, 100), 0);
    io->flush(a, t0 + 300 * MS - 1);
    assert_int_equal(recv_seqs(b, t0, 5, 50, seqs, 100), 0);
    io->flush(a, t0 + 300 * MS);
    assert_true(io->next_deadline(a) == UINT64_MAX);
    assert_int_equal(recv_seqs(b, t0, 5, 1000, seqs, 100), 5);
    for (uint32_t i = 0; i < 5; i++)
        assert_int_equal(seqs[i], i);
    homa_driver_counters c;
    memset(&c, 0, sizeof(c));
    io->counters(a, &c);
    assert_int_equal(c.fault_delays, 5);
    assert_int_equal(c.datagrams_out, 5);
    assert_int_equal(c.send_errors, 0);
    io->close(a);
    io->close(b);
}

/* Send side, reorder with depth 2: a reordered packet is overtaken by
 * exactly the next two packets that pass.  The decisions are replayed with
 * the same seed and salt (homa_io_fault_decide_out, as the driver draws). */
static void raw_faults__tx_reorder_by_depth(void **state)
{
    (void)state;
    if (!have_raw) skip();
    homa_faults f;
    assert_int_equal(homa_faults_parse("reorder=0.3,reorder_depth=2,delay_us=10000000,dir=tx,"
                                       "seed=21",
                                       &f, NULL, 0),
                     0);
    homa_io_sock *a = open_sock(&f, 5), *b = open_sock(NULL, 6);
    enum { N = 60 };
    static homa_pkt_out pk[N];
    static uint8_t buf[N][40];
    for (uint32_t i = 0; i < N; i++)
        make_data(&pk[i], a, b, i, buf[i], 40);
    /* The expected order: a passing packet goes out, then the held ones
     * it was the second to overtake, oldest first. */
    homa_fault_state st;
    homa_fault_init(&st, &f, HOMA_FAULT_TX, 5, 0);
    uint32_t want[N], held[N], wait_left[N];
    int nw = 0, nh = 0, reordered = 0;
    uint64_t t0 = homa_io_monotonic_ns();
    for (uint32_t i = 0; i < N; i++) {
        uint64_t hold = 0;
        uint32_t wait = 1;
        int act = homa_io_fault_decide_out(&st, t0, &pk[i], &hold, &wait);
        assert_true(act == HOMA_FAULT_PASS || act == HOMA_FAULT_REORDER);
        if (act == HOMA_FAULT_REORDER) {
            held[nh] = i;
            wait_left[nh++] = wait;
            reordered++;
            continue;
        }
        want[nw++] = i;
        int keep = 0;
        for (int k = 0; k < nh; k++) {
            if (--wait_left[k] == 0) {
                want[nw++] = held[k];
            } else {
                held[keep] = held[k];
                wait_left[keep++] = wait_left[k];
            }
        }
        nh = keep;
    }
    assert_true(reordered >= 5);
    for (int k = 0; k < nh; k++) /* left at the end: released by time */
        want[nw++] = held[k];
    assert_int_equal(nw, N);

    /* One packet per send, as the engine hands them over one pull at a time. */
    for (uint32_t i = 0; i < N; i++)
        assert_int_equal(io->send(a, t0, &pk[i], 1), 1);
    uint32_t seqs[256];
    int got = recv_seqs(b, t0, N - nh, 1000, seqs, 40);
    assert_int_equal(got, N - nh);
    if (nh > 0) {
        assert_true(io->next_deadline(a) == t0 + 10000 * MS);
        io->flush(a, t0 + 10000 * MS);
        got += recv_seqs(b, t0, nh, 1000, seqs + got, 40);
    }
    assert_true(io->next_deadline(a) == UINT64_MAX);
    assert_int_equal(got, N);
    int inversions = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(seqs[i], want[i]);
        if (i > 0 && seqs[i] < seqs[i - 1]) inversions++;
    }
    assert_true(inversions > 0);
    homa_driver_counters c;
    memset(&c, 0, sizeof(c));
    io->counters(a, &c);
    assert_int_equal(c.fault_reorders, (uint64_t)reordered);
    assert_int_equal(c.datagrams_out, N);
    io->close(a);
    io->close(b);
}

/* Receive side: packets are held in recv() until their due time (recv's
 * `now`), then returned with their bytes intact. */
static void raw_faults__rx_delay_held_in_recv(void **state)
{
    (void)state;
    if (!have_raw) skip();
    homa_faults f;
    assert_int_equal(
        homa_faults_parse("delay=1,delay_us=200000,jitter_us=0,dir=rx,seed=2", &f, NULL, 0), 0);
    homa_io_sock *a = open_sock(NULL, 1), *b = open_sock(&f, 2);
    uint64_t t0 = homa_io_monotonic_ns();
    homa_pkt_out pk[3];
    uint8_t buf[3][500];
    for (uint32_t i = 0; i < 3; i++)
        make_data(&pk[i], a, b, 10 + i, buf[i], 500);
    assert_int_equal(io->send(a, t0, pk, 3), 3);
    uint32_t seqs[256];
    /* They arrive and are held: nothing comes out before the due time. */
    for (int tries = 0; tries < 1000 && io->next_deadline(b) == UINT64_MAX; tries++)
        assert_int_equal(recv_seqs(b, t0, 1, 1, seqs, 500), 0);
    assert_true(io->next_deadline(b) == t0 + 200 * MS);
    for (int tries = 0; tries < 100; tries++) {
        homa_driver_counters c;
        memset(&c, 0, sizeof(c));
        io->counters(b, &c);
        if (c.fault_delays == 3) break;
        assert_int_equal(recv_seqs(b, t0, 1, 1, seqs, 500), 0);
    }
    assert_int_equal(recv_seqs(b, t0 + 200 * MS - 1, 1, 1, seqs, 500), 0);
    assert_int_equal(recv_seqs(b, t0 + 200 * MS, 3, 10, seqs, 500), 3);
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(seqs[i], 10 + i);
    assert_true(io->next_deadline(b) == UINT64_MAX);
    homa_driver_counters c;
    memset(&c, 0, sizeof(c));
    io->counters(b, &c);
    assert_int_equal(c.fault_delays, 3);
    assert_int_equal(c.datagrams_in, 3);
    assert_int_equal(c.garbage_in, 0);
    io->close(a);
    io->close(b);
}

/* Held packets still queued at close are freed (ASan's leak check). */
static void raw_faults__close_with_held_packets(void **state)
{
    (void)state;
    if (!have_raw) skip();
    homa_faults f;
    assert_int_equal(homa_faults_parse("delay=1,delay_us=1000000", &f, NULL, 0), 0);
    homa_io_sock *a = open_sock(&f, 1), *b = open_sock(&f, 2);
    homa_pkt_out pk[4];
    uint8_t buf[4][64];
    for (uint32_t i = 0; i < 4; i++)
        make_data(&pk[i], a, b, i, buf[i], 64);
    uint64_t t0 = homa_io_monotonic_ns();
    assert_int_equal(io->send(a, t0, pk, 4), 4);
    assert_true(io->next_deadline(a) != UINT64_MAX);
    io->close(a);
    io->close(b);
}

int main(void)
{
    int fd = socket(AF_INET, SOCK_RAW, HOMA_IPPROTO);
    have_raw = fd >= 0;
    if (fd >= 0) close(fd);
    if (!have_raw) fprintf(stderr, "no CAP_NET_RAW: raw driver fault tests skipped\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(raw_faults__tx_delay_held_until_due),
        cmocka_unit_test(raw_faults__tx_reorder_by_depth),
        cmocka_unit_test(raw_faults__rx_delay_held_in_recv),
        cmocka_unit_test(raw_faults__close_with_held_packets),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc == 0 && !have_raw) return 77;
    return rc;
}
