/* UDP driver tests over loopback: batched send/receive, GSO/GRO, the TOS
 * byte, fault injection (rates with a fixed seed, delay, reorder), the
 * HOMA_FAULTS syntax, and the pcap capture (parsed back and, if installed,
 * read by tcpdump).
 *
 * Packets are hand-made Homa headers (type byte at offset 11) so the
 * driver's structural check accepts them; the engine is not involved. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <homa/homa.h>

#include "core/wire.h"
#include "io/io.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const homa_io_ops *io = &homa_udp_ops;

static homa_io_sock *open_sock(const char *host, const homa_io_opts *opts)
{
    homa_endpoint ep;
    assert_int_equal(homa_endpoint_from_host(host, 0, &ep), 0);
    homa_io_sock *s = NULL;
    assert_int_equal(io->open(&ep, opts, &s), 0);
    return s;
}

/* A DATA packet to `to` whose payload is `len` bytes of a pattern derived
 * from seq (so the receiver can check every byte). */
static void make_data(homa_pkt_out *p, const homa_io_sock *from, const homa_io_sock *to,
                      uint32_t seq, uint8_t prio, uint8_t *payload, uint32_t len)
{
    homa_endpoint a, b;
    io->local(from, &a);
    io->local(to, &b);
    memset(p, 0, sizeof(*p));
    p->dst = b.addr;
    p->dport = b.port;
    p->sport = a.port;
    p->priority = prio;
    p->type = HOMA_PKT_DATA;
    p->hdr_len = HOMA_DATA_HDR_LEN;
    p->hdr[11] = HOMA_PKT_DATA;
    p->hdr[12] = 0xE0;
    p->hdr[4] = (uint8_t)(seq >> 24);
    p->hdr[5] = (uint8_t)(seq >> 16);
    p->hdr[6] = (uint8_t)(seq >> 8);
    p->hdr[7] = (uint8_t)seq;
    p->hdr[27] = 1; /* non-zero sender id */
    for (uint32_t i = 0; i < len; i++)
        payload[i] = (uint8_t)(seq * 31 + i);
    p->payload = payload;
    p->payload_len = len;
}

static uint32_t pkt_seq(const uint8_t *d)
{
    return ((uint32_t)d[4] << 24) | ((uint32_t)d[5] << 16) | ((uint32_t)d[6] << 8) | d[7];
}

static int check_payload(const homa_io_rx *r, uint32_t expect_len)
{
    if (r->len != HOMA_DATA_HDR_LEN + expect_len) return 0;
    uint32_t seq = pkt_seq(r->data);
    for (uint32_t i = 0; i < expect_len; i++)
        if (r->data[HOMA_DATA_HDR_LEN + i] != (uint8_t)(seq * 31 + i)) return 0;
    return 1;
}

/* Receives until `want` packets arrived or timeout_ms passed; calls fn on
 * each.  Returns the count. */
typedef void (*rx_fn)(const homa_io_rx *r, void *arg);
static int recv_until(homa_io_sock *s, int want, int timeout_ms, rx_fn fn, void *arg)
{
    static homa_io_rx rx[256];
    int got = 0;
    uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000u;
    while (got < want && now_ns() < end) {
        int n = io->recv(s, now_ns(), rx, 256);
        for (int i = 0; i < n; i++)
            if (fn) fn(&rx[i], arg);
        got += n;
        if (n == 0) usleep(200);
    }
    return got;
}

struct seen {
    uint8_t hit[4096];
    int bad;
    int tos_bad;
    uint8_t tos_expect[4096];
    uint32_t len_expect[4096];
    uint32_t last_seq;
    int inversions;
    uint16_t order[8192]; /* sequence numbers in arrival order */
    int n_order;
};

static void note(const homa_io_rx *r, void *arg)
{
    struct seen *sn = arg;
    uint32_t seq = pkt_seq(r->data);
    if (seq >= 4096 || !check_payload(r, sn->len_expect[seq])) {
        sn->bad++;
        return;
    }
    if (r->tos != sn->tos_expect[seq]) sn->tos_bad++;
    if (seq < sn->last_seq) sn->inversions++;
    sn->last_seq = seq;
    sn->hit[seq]++;
    if (sn->n_order < 8192) sn->order[sn->n_order++] = (uint16_t)seq;
}

/* gso_prio < 0: sizes and priorities mixed; else equal sizes (GSO runs
 * possible) all at priority gso_prio (0: the datagrams carry no TOS control
 * message, the socket's own TOS being 0). */
static void batch_roundtrip(const char *host, unsigned flags, int n, int gso_prio)
{
    int equal_sizes = gso_prio >= 0;
    homa_io_opts opts = {.flags = flags};
    homa_io_sock *a = open_sock(host, &opts), *b = open_sock(host, &opts);
    static homa_pkt_out pkts[512];
    static uint8_t bufs[512][1400];
    static struct seen sn;
    memset(&sn, 0, sizeof(sn));
    for (int i = 0; i < n; i++) {
        uint32_t len = equal_sizes ? (i == n - 1 ? 700 : 1344) : (uint32_t)(i * 37 % 1400);
        uint8_t prio = (uint8_t)(i % 8);
        make_data(&pkts[i], a, b, (uint32_t)i, prio, bufs[i], len);
        sn.tos_expect[i] = (uint8_t)(prio << 5);
        sn.len_expect[i] = len;
    }
    /* Equal sizes and one priority make GSO runs possible. */
    if (equal_sizes)
        for (int i = 0; i < n; i++) {
            pkts[i].priority = (uint8_t)gso_prio;
            sn.tos_expect[i] = (uint8_t)(gso_prio << 5);
        }
    assert_int_equal(io->send(a, now_ns(), pkts, n), n);
    int got = recv_until(b, n, 2000, note, &sn);
    assert_int_equal(got, n);
    assert_int_equal(sn.bad, 0);
    assert_int_equal(sn.tos_bad, 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(sn.hit[i], 1);
    homa_driver_counters ca, cb;
    memset(&ca, 0, sizeof(ca));
    memset(&cb, 0, sizeof(cb));
    io->counters(a, &ca);
    io->counters(b, &cb);
    assert_int_equal(ca.datagrams_out, n);
    assert_int_equal(cb.datagrams_in, n);
    /* Batching: far fewer system calls than packets. */
    assert_true(ca.send_syscalls <= (uint64_t)(n / 16 + 2));
    if (equal_sizes && !(flags & HOMA_IO_NO_GSO) && homa_udp_gso_supported()) {
        assert_true(ca.gso_sends > 0);
        assert_true(ca.gso_segments >= (uint64_t)n / 2);
        if (!(flags & HOMA_IO_NO_GRO) && homa_udp_uses_gro(b)) assert_true(cb.gro_buffers > 0);
    }
    if (flags & HOMA_IO_NO_GSO) assert_int_equal(ca.gso_sends, 0);
    io->close(a);
    io->close(b);
}

static void test_batch_ipv4(void **state)
{
    (void)state;
    batch_roundtrip("127.0.0.1", HOMA_IO_NO_GSO, 300, -1);
}

static void test_batch_ipv6(void **state)
{
    (void)state;
    batch_roundtrip("::1", HOMA_IO_NO_GSO, 300, -1);
}

static void test_gso_gro_ipv4(void **state)
{
    (void)state;
    if (!homa_udp_gso_supported()) skip();
    batch_roundtrip("127.0.0.1", 0, 200, 3);
}

static void test_gso_gro_ipv6(void **state)
{
    (void)state;
    if (!homa_udp_gso_supported()) skip();
    batch_roundtrip("::1", 0, 200, 3);
}

/* Priority 0 needs no TOS control message: GSO runs without one arrive
 * whole, with TOS 0, over IPv4 and IPv6. */
static void udp_send__priority_0_without_tos_cmsg(void **state)
{
    (void)state;
    if (!homa_udp_gso_supported()) skip();
    batch_roundtrip("127.0.0.1", 0, 200, 0);
    batch_roundtrip("::1", 0, 200, 0);
    batch_roundtrip("127.0.0.1", HOMA_IO_NO_GSO, 50, 0);
}

static void test_gso_without_gro(void **state)
{
    (void)state;
    if (!homa_udp_gso_supported()) skip();
    /* The receiver gets ordinary datagrams (the kernel segments). */
    batch_roundtrip("127.0.0.1", HOMA_IO_NO_GRO, 100, 3);
}

/* Direct receive: the test's place() hands out room in `area` for packets
 * whose sequence number is even and says no to odd ones. */
struct placer {
    uint8_t area[8][70000];
    int asked;
    uint32_t asked_len[16];
};

static uint8_t *test_place(void *ctx, uint64_t now, const homa_addr *src, const uint8_t *hdr,
                           uint32_t hdr_len, uint32_t pkt_len)
{
    (void)now;
    (void)src;
    struct placer *pl = ctx;
    assert_int_equal(hdr_len, HOMA_DATA_HDR_LEN);
    assert_int_equal(hdr[11], HOMA_PKT_DATA);
    uint32_t seq = pkt_seq(hdr);
    if (pl->asked < 16) pl->asked_len[pl->asked] = pkt_len;
    pl->asked++;
    if (seq % 2 || seq / 2 >= 8) return NULL;
    return pl->area[seq / 2];
}

/* Whole GSO batches at several MTUs: a send of DATA packets of one size
 * goes out as datagrams of as many segments as one UDP datagram holds
 * (64 at most, 65,000 bytes), and a shorter last packet ends the last
 * batch without a datagram of its own; the receiver splits the GRO
 * buffers back into every packet, byte for byte. */
static void udp_send__whole_gso_batches_per_mtu(void **state)
{
    (void)state;
    if (!homa_udp_gso_supported()) skip();
    static const uint32_t mtus[] = {1280, 1500, 9000};
    static homa_pkt_out pkts[256];
    static uint8_t bufs[256][9000];
    static struct seen sn;
    for (size_t m = 0; m < sizeof(mtus) / sizeof(mtus[0]); m++) {
        uint32_t payload = mtus[m] - 104; /* IPv6 + UDP + the DATA header */
        uint32_t pkt = HOMA_DATA_HDR_LEN + payload;
        uint32_t per = 65000 / pkt;
        if (per > 64) per = 64;
        int n = (int)(3 * per); /* three batches, the last packet short */
        assert_true(n <= 256);
        homa_io_sock *a = open_sock("127.0.0.1", NULL), *b = open_sock("127.0.0.1", NULL);
        memset(&sn, 0, sizeof(sn));
        for (int i = 0; i < n; i++) {
            uint32_t len = i == n - 1 ? payload / 3 : payload;
            make_data(&pkts[i], a, b, (uint32_t)i, 4, bufs[i], len);
            sn.tos_expect[i] = 4 << 5;
            sn.len_expect[i] = len;
        }
        assert_int_equal(io->send(a, now_ns(), pkts, n), n);
        assert_int_equal(recv_until(b, n, 2000, note, &sn), n);
        assert_int_equal(sn.bad, 0);
        for (int i = 0; i < n; i++)
            assert_int_equal(sn.hit[i], 1);
        homa_driver_counters ca, cb;
        memset(&ca, 0, sizeof(ca));
        memset(&cb, 0, sizeof(cb));
        io->counters(a, &ca);
        io->counters(b, &cb);
        assert_int_equal(ca.gso_sends, 3);
        assert_int_equal(ca.gso_segments, (uint64_t)n);
        assert_int_equal(ca.datagrams_out, (uint64_t)n);
        assert_int_equal(ca.send_syscalls, 1);
        if (homa_udp_uses_gro(b)) {
            assert_int_equal(cb.gro_buffers, 3);
            assert_int_equal(cb.gro_segments, (uint64_t)n);
        }
        io->close(a);
        io->close(b);
    }
}

/* A GRO buffer is split at its segment size; a last segment too short to
 * be a Homa packet (cut short) is counted as garbage, never handed up, and
 * the whole segments before it arrive intact. */
static void udp_recv__gro_buffer_with_truncated_last_segment(void **state)
{
    (void)state;
    if (!homa_udp_gso_supported() || !homa_udp_gro_supported()) skip();
    homa_io_sock *b = open_sock("127.0.0.1", NULL);
    homa_endpoint eb;
    io->local(b, &eb);
    if (!homa_udp_uses_gro(b)) {
        io->close(b);
        skip();
    }
    /* Three packets of 1,200 bytes of payload, then 20 bytes, in one
     * datagram cut every 1,256 bytes by the kernel (UDP_SEGMENT). */
    enum { PAY = 1200, SEG = HOMA_DATA_HDR_LEN + PAY };
    static uint8_t dgram[3 * SEG + 20];
    static struct seen sn;
    memset(&sn, 0, sizeof(sn));
    for (int i = 0; i < 3; i++) {
        homa_pkt_out p;
        static uint8_t pay[PAY];
        make_data(&p, b, b, (uint32_t)i, 0, pay, PAY);
        memcpy(dgram + i * SEG, p.hdr, HOMA_DATA_HDR_LEN);
        memcpy(dgram + i * SEG + HOMA_DATA_HDR_LEN, pay, PAY);
        sn.len_expect[i] = PAY;
    }
    memset(dgram + 3 * SEG, 0x77, 20);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    int seg = SEG;
    assert_int_equal(setsockopt(fd, IPPROTO_UDP, 103 /* UDP_SEGMENT */, &seg, sizeof(seg)), 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(eb.port)};
    to.sin_addr.s_addr = htonl(0x7f000001);
    assert_int_equal(sendto(fd, dgram, sizeof(dgram), 0, (struct sockaddr *)&to, sizeof(to)),
                     (ssize_t)sizeof(dgram));
    close(fd);
    assert_int_equal(recv_until(b, 3, 2000, note, &sn), 3);
    usleep(10000);
    assert_int_equal(recv_until(b, 1, 50, note, &sn), 0); /* nothing more */
    assert_int_equal(sn.bad, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(sn.hit[i], 1);
    homa_driver_counters cb;
    memset(&cb, 0, sizeof(cb));
    io->counters(b, &cb);
    assert_int_equal(cb.gro_buffers, 1);
    assert_int_equal(cb.garbage_in, 1);
    assert_int_equal(cb.datagrams_in, 4);
    io->close(b);
}

static void test_direct_receive(void **state)
{
    (void)state;
    static struct placer pl;
    memset(&pl, 0, sizeof(pl));
    homa_io_opts ropts = {.place = test_place, .place_ctx = &pl};
    homa_io_opts topts = {.flags = HOMA_IO_NO_GSO};
    homa_io_sock *a = open_sock("127.0.0.1", &topts), *b = open_sock("127.0.0.1", &ropts);
    /* A small DATA packet first (read in batch mode; nothing placed), then
     * a large one that switches the receiver to peeking (copied: it came
     * in a batch), then large and small ones mixed: large even ones are
     * placed, large odd ones refused by place() and copied, small ones
     * copied without asking. */
    static homa_pkt_out pkts[8];
    static uint8_t bufs[8][40000];
    uint32_t lens[8] = {100, 30000, 20000, 30001, 500, 20000, 16384, 16383};
    static struct seen sn;
    memset(&sn, 0, sizeof(sn));
    for (int i = 0; i < 8; i++) {
        make_data(&pkts[i], a, b, (uint32_t)i, 0, bufs[i], lens[i]);
        sn.len_expect[i] = lens[i];
    }
    assert_int_equal(io->send(a, now_ns(), pkts, 2), 2);
    static homa_io_rx rx[64];
    int got = 0;
    uint64_t end = now_ns() + 2000000000ull;
    while (got < 2 && now_ns() < end) {
        int n = io->recv(b, now_ns(), rx + got, 64 - got);
        got += n;
        if (n == 0) usleep(200);
    }
    assert_int_equal(got, 2);
    assert_int_equal(pl.asked, 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(rx[i].placed, 0);
        note(&rx[i], &sn);
    }
    assert_int_equal(io->send(a, now_ns(), pkts + 2, 6), 6);
    usleep(20000); /* all queued before the first read */
    got = 0;
    int placed = 0;
    end = now_ns() + 2000000000ull;
    while (got < 6 && now_ns() < end) {
        int n = io->recv(b, now_ns(), rx, 64);
        for (int i = 0; i < n; i++) {
            if (!rx[i].placed) {
                note(&rx[i], &sn);
                continue;
            }
            /* a placed packet comes alone; its header is in data, its
             * payload where place() said */
            assert_int_equal(n, 1);
            uint32_t seq = pkt_seq(rx[i].data);
            assert_int_equal(seq % 2, 0);
            assert_int_equal(rx[i].len, HOMA_DATA_HDR_LEN + lens[seq]);
            for (uint32_t k = 0; k < lens[seq]; k++)
                if (pl.area[seq / 2][k] != (uint8_t)(seq * 31 + k)) sn.bad++;
            sn.hit[seq]++;
            placed++;
        }
        got += n;
        if (n == 0) usleep(200);
    }
    assert_int_equal(got, 6);
    assert_int_equal(sn.bad, 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(sn.hit[i], 1);
    /* seq 2 (20000) and 6 (16384) placed; 3 (30001) and 5 (20000) asked
     * and refused; 4 (500) and 7 (16383, below the threshold) never asked */
    assert_int_equal(placed, 2);
    assert_int_equal(pl.asked, 4);
    homa_driver_counters cb;
    memset(&cb, 0, sizeof(cb));
    io->counters(b, &cb);
    assert_int_equal(cb.rx_placed, 2);
    assert_true(cb.rx_peeks >= 6);
    assert_int_equal(cb.datagrams_in, 8);
    assert_int_equal(cb.garbage_in, 0);
    io->close(a);
    io->close(b);
}

static void test_direct_receive_not_for_gro_buffers(void **state)
{
    (void)state;
    if (!homa_udp_gso_supported() || !homa_udp_gro_supported()) skip();
    static struct placer pl;
    memset(&pl, 0, sizeof(pl));
    homa_io_opts ropts = {.place = test_place, .place_ctx = &pl};
    homa_io_opts topts = {0};
    homa_io_sock *a = open_sock("127.0.0.1", &topts), *b = open_sock("127.0.0.1", &ropts);
    /* One large packet puts the receiver in peek mode; then GSO runs of
     * three 20,000-byte packets arrive as coalesced buffers: each is split
     * as usual, never placed. */
    static homa_pkt_out pkts[7];
    static uint8_t bufs[7][30000];
    static struct seen sn;
    memset(&sn, 0, sizeof(sn));
    make_data(&pkts[0], a, b, 1, 0, bufs[0], 30000);
    sn.len_expect[1] = 30000;
    for (int i = 1; i < 7; i++) {
        make_data(&pkts[i], a, b, (uint32_t)(i + 1), 0, bufs[i], 20000);
        sn.len_expect[i + 1] = 20000;
    }
    assert_int_equal(io->send(a, now_ns(), pkts, 1), 1);
    assert_int_equal(recv_until(b, 1, 2000, note, &sn), 1);
    assert_int_equal(io->send(a, now_ns(), pkts + 1, 6), 6);
    int got = recv_until(b, 6, 2000, note, &sn);
    assert_int_equal(got, 6);
    assert_int_equal(sn.bad, 0);
    homa_driver_counters ca, cb;
    memset(&ca, 0, sizeof(ca));
    memset(&cb, 0, sizeof(cb));
    io->counters(a, &ca);
    io->counters(b, &cb);
    assert_int_equal(cb.rx_placed, 0);
    assert_true(ca.gso_sends > 0);
    if (homa_udp_uses_gro(b)) assert_true(cb.gro_buffers > 0);
    assert_true(cb.rx_peeks > 0);
    io->close(a);
    io->close(b);
}

static void test_control_packets_and_garbage(void **state)
{
    (void)state;
    homa_io_sock *a = open_sock("127.0.0.1", NULL), *b = open_sock("127.0.0.1", NULL);
    homa_pkt_out p;
    memset(&p, 0, sizeof(p));
    homa_endpoint eb;
    io->local(b, &eb);
    p.dst = eb.addr;
    p.dport = eb.port;
    p.priority = 7;
    p.type = HOMA_PKT_GRANT;
    p.hdr_len = HOMA_GRANT_LEN;
    p.hdr[11] = HOMA_PKT_GRANT;
    p.hdr[27] = 5;
    homa_pkt_out bad[3];
    for (int i = 0; i < 3; i++)
        bad[i] = p;
    bad[0].hdr_len = 10;                 /* too short */
    bad[1].hdr[11] = 0x42;               /* unknown type */
    bad[2].hdr_len = HOMA_GRANT_LEN - 1; /* truncated GRANT */
    assert_int_equal(io->send(a, now_ns(), bad, 3), 3);
    assert_int_equal(io->send(a, now_ns(), &p, 1), 1);
    homa_io_rx rx[8];
    int got = 0;
    uint64_t end = now_ns() + 2000000000ull;
    while (got == 0 && now_ns() < end)
        got = io->recv(b, now_ns(), rx, 8);
    assert_int_equal(got, 1);
    assert_int_equal(rx[0].len, HOMA_GRANT_LEN);
    assert_int_equal(rx[0].tos, 7 << 5);
    homa_driver_counters c;
    memset(&c, 0, sizeof(c));
    io->counters(b, &c);
    assert_int_equal(c.garbage_in, 3);
    assert_int_equal(c.datagrams_in, 4);
    io->close(a);
    io->close(b);
}

/* Sends n packets through a socket with tx faults; returns how many the
 * receiver got (after waiting for delayed ones). */
static struct seen faulty_seen;

static int faulty_run(const homa_faults *f, int n, homa_driver_counters *ctr_tx, int *inversions)
{
    homa_io_opts topts = {.flags = HOMA_IO_NO_GSO, .faults = f};
    homa_io_sock *a = open_sock("127.0.0.1", &topts), *b = open_sock("127.0.0.1", NULL);
    static homa_pkt_out pkts[4096];
    static uint8_t bufs[4096][64];
    struct seen *snp = &faulty_seen;
    memset(snp, 0, sizeof(*snp));
    for (int i = 0; i < n; i++) {
        make_data(&pkts[i], a, b, (uint32_t)i, 0, bufs[i], 64);
        snp->len_expect[i] = 64;
    }
    int got = 0;
    for (int i = 0; i < n; i += 64) {
        int k = n - i < 64 ? n - i : 64;
        io->send(a, now_ns(), &pkts[i], k);
        /* Drain as we go (2 ms a batch): 4,000 datagrams left queued
         * overflowed the receive buffer or loopback's backlog on a loaded
         * host, and the counts below then missed packets nobody dropped on
         * purpose. */
        got += recv_until(b, 1 << 30, 2, note, snp);
    }
    /* Let delayed packets go: flush until nothing is held. */
    uint64_t end = now_ns() + 2000000000ull;
    while (io->next_deadline(a) != UINT64_MAX && now_ns() < end) {
        io->flush(a, now_ns());
        usleep(100);
    }
    got += recv_until(b, 1 << 30, 100, note, snp);
    assert_int_equal(snp->bad, 0);
    memset(ctr_tx, 0, sizeof(*ctr_tx));
    io->counters(a, ctr_tx);
    if (inversions) *inversions = snp->inversions;
    io->close(a);
    io->close(b);
    return got;
}

static void test_fault_drop_rate(void **state)
{
    (void)state;
    homa_faults f;
    assert_int_equal(homa_faults_parse("drop=0.2,seed=7,dir=tx", &f, NULL, 0), 0);
    homa_driver_counters c;
    int n = 4000;
    int got = faulty_run(&f, n, &c, NULL);
    /* Binomial(4000, 0.2): sd = 25; allow 5 sd. */
    assert_in_range(c.fault_drops, 800 - 125, 800 + 125);
    assert_int_equal((uint64_t)got + c.fault_drops, (uint64_t)n);
    /* Same seed, same decisions. */
    homa_driver_counters c2;
    int got2 = faulty_run(&f, n, &c2, NULL);
    assert_int_equal(got2, got);
    assert_int_equal(c2.fault_drops, c.fault_drops);
}

static void test_fault_dup_rate(void **state)
{
    (void)state;
    homa_faults f;
    assert_int_equal(homa_faults_parse("dup=0.1,seed=3", &f, NULL, 0), 0);
    homa_driver_counters c;
    int n = 4000;
    int got = faulty_run(&f, n, &c, NULL);
    assert_in_range(c.fault_dups, 400 - 95, 400 + 95);
    assert_int_equal((uint64_t)got, (uint64_t)n + c.fault_dups);
}

static void test_fault_reorder_and_delay(void **state)
{
    (void)state;
    homa_faults f;
    assert_int_equal(homa_faults_parse("reorder=0.1,delay=0.05,delay_us=2000,seed=11", &f, NULL, 0),
                     0);
    homa_driver_counters c;
    int inv = 0;
    int n = 2000;
    int got = faulty_run(&f, n, &c, &inv);
    assert_int_equal(got, n); /* nothing lost */
    assert_in_range(c.fault_reorders, 200 - 70, 200 + 70);
    assert_in_range(c.fault_delays, 100 - 50, 100 + 50);
    assert_true(inv > 50); /* packets really arrived out of order */
}

static void test_fault_rx_side(void **state)
{
    (void)state;
    homa_faults f;
    assert_int_equal(homa_faults_parse("drop=0.25,seed=5,dir=rx", &f, NULL, 0), 0);
    homa_io_opts ropts = {.faults = &f};
    homa_io_sock *a = open_sock("::1", NULL), *b = open_sock("::1", &ropts);
    static homa_pkt_out pkts[1000];
    static uint8_t bufs[1000][32];
    static struct seen sn;
    memset(&sn, 0, sizeof(sn));
    int got = 0;
    for (int i = 0; i < 1000; i++) {
        make_data(&pkts[i], a, b, (uint32_t)i, 0, bufs[i], 32);
        sn.len_expect[i] = 32;
    }
    for (int i = 0; i < 1000; i += 50) {
        io->send(a, now_ns(), &pkts[i], 50);
        got += recv_until(b, 1 << 30, 0, note, &sn);
    }
    got += recv_until(b, 1 << 30, 100, note, &sn);
    homa_driver_counters c;
    memset(&c, 0, sizeof(c));
    io->counters(b, &c);
    assert_int_equal(c.datagrams_in, 1000);
    assert_in_range(c.fault_drops, 250 - 70, 250 + 70);
    assert_int_equal((uint64_t)got + c.fault_drops, 1000);
    io->close(a);
    io->close(b);
}

/* reorder_depth=N: a reordered packet is overtaken by exactly N later
 * packets (unless it leaves by its delay_us fallback at the end). */
static void test_fault_reorder_depth(void **state)
{
    (void)state;
    homa_faults f;
    assert_int_equal(
        homa_faults_parse("reorder=0.02,reorder_depth=5,delay_us=200000,seed=13", &f, NULL, 0), 0);
    homa_driver_counters c;
    int n = 3000;
    int got = faulty_run(&f, n, &c, NULL);
    assert_int_equal(got, n);
    const struct seen *sn = &faulty_seen;
    assert_int_equal(sn->n_order, n);
    int exact = 0, late = 0;
    for (int pos = 0; pos < n; pos++) {
        int seq = sn->order[pos], overtakers = 0;
        for (int q = 0; q < pos; q++)
            overtakers += sn->order[q] > seq;
        if (overtakers == 0) continue;
        late++;
        exact += overtakers == 5;
        assert_true(overtakers <= 5);
    }
    print_message("reorder_depth=5: %lu reordered, %d late, %d overtaken by exactly 5\n",
                  (unsigned long)c.fault_reorders, late, exact);
    /* Only one held at the very end may leave by time, not overtaken. */
    assert_true(late <= (int)c.fault_reorders && late >= (int)c.fault_reorders - 2);
    assert_true(exact >= late - 2 && exact > 30);
}

/* Blackout windows count from the moment the socket opened, on the
 * driver's own clock. */
static void test_fault_blackout_window(void **state)
{
    (void)state;
    homa_faults f;
    assert_int_equal(homa_faults_parse("blackout_ms=150,dir=tx", &f, NULL, 0), 0);
    homa_io_opts topts = {.flags = HOMA_IO_NO_GSO, .faults = &f};
    homa_io_sock *a = open_sock("127.0.0.1", &topts), *b = open_sock("127.0.0.1", NULL);
    static homa_pkt_out pkts[20];
    static uint8_t bufs[20][32];
    static struct seen sn;
    memset(&sn, 0, sizeof(sn));
    for (int i = 0; i < 20; i++) {
        make_data(&pkts[i], a, b, (uint32_t)i, 0, bufs[i], 32);
        sn.len_expect[i] = 32;
    }
    io->send(a, now_ns(), pkts, 10); /* inside the window */
    int got = recv_until(b, 1 << 30, 50, note, &sn);
    assert_int_equal(got, 0);
    usleep(200000);
    io->send(a, now_ns(), pkts + 10, 10); /* after it */
    got = recv_until(b, 10, 2000, note, &sn);
    assert_int_equal(got, 10);
    homa_driver_counters c;
    memset(&c, 0, sizeof(c));
    io->counters(a, &c);
    assert_int_equal(c.fault_drops, 10);
    io->close(a);
    io->close(b);
}

static void test_faults_parse(void **state)
{
    (void)state;
    homa_faults f;
    char err[200];
    assert_int_equal(homa_faults_parse("drop=0.05,dup=0.01,seed=7", &f, err, sizeof(err)), 0);
    assert_true(f.drop == 0.05 && f.dup == 0.01 && f.seed == 7 && f.dirs == 0);
    assert_int_equal(f.delay_us, 1000);
    assert_false(homa_faults_none(&f));
    assert_int_equal(homa_faults_parse("", &f, err, sizeof(err)), 0);
    assert_true(homa_faults_none(&f));
    assert_int_equal(
        homa_faults_parse(" reorder=0.5 , delay=0.1,delay_us=50,dir=rx,", &f, err, sizeof(err)), 0);
    assert_true(f.reorder == 0.5 && f.delay == 0.1 && f.delay_us == 50 && f.dirs == HOMA_FAULT_RX);

    assert_int_equal(homa_faults_parse("drop=5", &f, err, sizeof(err)), HOMA_ERR_INVAL);
    assert_non_null(strstr(err, "drop"));
    assert_int_equal(homa_faults_parse("drop=0.1x", &f, err, sizeof(err)), HOMA_ERR_INVAL);
    assert_int_equal(homa_faults_parse("loss=0.1", &f, err, sizeof(err)), HOMA_ERR_INVAL);
    assert_non_null(strstr(err, "unknown fault key 'loss'"));
    assert_int_equal(homa_faults_parse("drop", &f, err, sizeof(err)), HOMA_ERR_INVAL);
    assert_non_null(strstr(err, "key=value"));
    assert_int_equal(homa_faults_parse("seed=-1", &f, err, sizeof(err)), HOMA_ERR_INVAL);
    assert_int_equal(homa_faults_parse("dir=up", &f, err, sizeof(err)), HOMA_ERR_INVAL);
    assert_int_equal(homa_faults_parse("drop=0.6,dup=0.6", &f, err, sizeof(err)), HOMA_ERR_INVAL);
    assert_int_equal(homa_faults_parse("drop=nan", &f, err, sizeof(err)), HOMA_ERR_INVAL);
    assert_int_equal(homa_faults_parse(NULL, &f, err, sizeof(err)), HOMA_ERR_INVAL);

    /* A malformed HOMA_FAULTS makes runtime creation fail loudly. */
    setenv("HOMA_FAULTS", "drop=lots", 1);
    homa_runtime *rt = NULL;
    assert_int_equal(homa_runtime_create(NULL, &rt), HOMA_ERR_INVAL);
    homa_runtime_options o;
    homa_runtime_options_default(&o);
    o.flags = HOMA_RT_IGNORE_ENV;
    assert_int_equal(homa_runtime_create(&o, &rt), 0);
    homa_runtime_destroy(rt);
    unsetenv("HOMA_FAULTS");
}

/* ---- pcap ---- */

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void test_pcap(void **state)
{
    (void)state;
    char path[] = "/tmp/homa_pcap_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    homa_pcap *pc = NULL;
    assert_int_equal(homa_pcap_open(path, &pc), 0);
    homa_io_opts opts = {.pcap = pc};
    homa_io_sock *a4 = open_sock("127.0.0.1", &opts), *b4 = open_sock("127.0.0.1", &opts);
    homa_io_sock *a6 = open_sock("::1", &opts), *b6 = open_sock("::1", &opts);
    static homa_pkt_out pkts[20];
    static uint8_t bufs[20][1000];
    for (int i = 0; i < 10; i++)
        make_data(&pkts[i], a4, b4, (uint32_t)i, 5, bufs[i], 1000);
    for (int i = 10; i < 20; i++)
        make_data(&pkts[i], a6, b6, (uint32_t)i, 2, bufs[i], 1000);
    assert_int_equal(io->send(a4, now_ns(), pkts, 10), 10);
    assert_int_equal(io->send(a6, now_ns(), pkts + 10, 10), 10);
    assert_int_equal(recv_until(b4, 10, 2000, NULL, NULL), 10);
    assert_int_equal(recv_until(b6, 10, 2000, NULL, NULL), 10);
    homa_endpoint eb4, eb6;
    io->local(b4, &eb4);
    io->local(b6, &eb6);
    io->close(a4);
    io->close(b4);
    io->close(a6);
    io->close(b6);
    homa_pcap_close(pc);

    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t file[200000];
    size_t len = fread(file, 1, sizeof(file), f);
    fclose(f);
    assert_true(len > 24);
    assert_int_equal(rd32(file), 0xa1b23c4du);
    assert_int_equal(rd32(file + 20), 101); /* LINKTYPE_RAW */
    size_t off = 24;
    int recs = 0, v4 = 0, v6 = 0;
    while (off + 16 <= len) {
        uint32_t caplen = rd32(file + off + 8), origlen = rd32(file + off + 12);
        assert_int_equal(caplen, origlen);
        const uint8_t *ip = file + off + 16;
        assert_true(off + 16 + caplen <= len);
        const uint8_t *udp;
        if ((ip[0] >> 4) == 4) {
            v4++;
            assert_int_equal(ip[0], 0x45);
            assert_int_equal(ip[1], 5 << 5); /* TOS = priority << 5 */
            assert_int_equal(ip[9], 17);
            assert_int_equal((ip[2] << 8) | ip[3], caplen);
            assert_memory_equal(ip + 16, eb4.addr.bytes + 12, 4);
            udp = ip + 20;
            assert_int_equal((udp[2] << 8) | udp[3], eb4.port);
        } else {
            assert_int_equal(ip[0] >> 4, 6);
            v6++;
            uint8_t tc = (uint8_t)(((ip[0] & 0xf) << 4) | (ip[1] >> 4));
            assert_int_equal(tc, 2 << 5);
            assert_int_equal(ip[6], 17);
            assert_int_equal((ip[4] << 8) | ip[5], caplen - 40);
            assert_memory_equal(ip + 24, eb6.addr.bytes, 16);
            udp = ip + 40;
            assert_int_equal((udp[2] << 8) | udp[3], eb6.port);
        }
        assert_int_equal((udp[4] << 8) | udp[5], 8 + HOMA_DATA_HDR_LEN + 1000);
        assert_int_equal(udp[8 + 11], HOMA_PKT_DATA);
        off += 16 + caplen;
        recs++;
    }
    assert_int_equal(off, len);
    assert_int_equal(recs, 40); /* each packet once sent, once received */
    assert_int_equal(v4, 20);
    assert_int_equal(v6, 20);

    if (access("/usr/bin/tcpdump", X_OK) == 0 || access("/usr/sbin/tcpdump", X_OK) == 0) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "tcpdump -nn -v -r %s 2>/dev/null | grep -c 'UDP, length'",
                 path);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        int lines = 0;
        assert_int_equal(fscanf(p, "%d", &lines), 1);
        pclose(p);
        assert_int_equal(lines, 40);
        snprintf(cmd, sizeof(cmd), "tcpdump -nn -vv -r %s 2>/dev/null | grep -ci 'bad'", path);
        p = popen(cmd, "r");
        int badsum = -1;
        assert_int_equal(fscanf(p, "%d", &badsum), 1);
        pclose(p);
        assert_int_equal(badsum, 0); /* IP and UDP checksums are right */
    }
    unlink(path);
}

static void test_endpoints(void **state)
{
    (void)state;
    homa_endpoint ep;
    char buf[HOMA_ENDPOINT_STRLEN];
    assert_int_equal(homa_endpoint_parse("127.0.0.1:4000", &ep), 0);
    assert_true(homa_endpoint_is_ipv4(&ep));
    assert_int_equal(ep.port, 4000);
    assert_int_equal(homa_endpoint_format(&ep, buf, sizeof(buf)), 14);
    assert_string_equal(buf, "127.0.0.1:4000");
    assert_int_equal(homa_endpoint_parse("[::1]:65535", &ep), 0);
    assert_false(homa_endpoint_is_ipv4(&ep));
    assert_int_equal(ep.port, 65535);
    homa_endpoint_format(&ep, buf, sizeof(buf));
    assert_string_equal(buf, "[::1]:65535");
    assert_int_equal(homa_endpoint_parse("fe80::1", &ep), 0);
    assert_int_equal(ep.port, 0);
    assert_int_equal(homa_endpoint_parse("localhost:7", &ep), 0);
    assert_int_equal(ep.port, 7);
    assert_int_equal(homa_endpoint_parse("1.2.3.4:70000", &ep), HOMA_ERR_ADDR);
    assert_int_equal(homa_endpoint_parse("1.2.3.4:x", &ep), HOMA_ERR_ADDR);
    assert_int_equal(homa_endpoint_parse("[::1", &ep), HOMA_ERR_ADDR);
    assert_int_equal(homa_endpoint_parse("no.such.host.invalid:1", &ep), HOMA_ERR_ADDR);
    assert_int_equal(homa_endpoint_format(&ep, buf, 4), HOMA_ERR_INVAL);
    homa_endpoint a, b;
    homa_endpoint_parse("10.0.0.1:5", &a);
    struct sockaddr_storage ss;
    assert_int_equal(homa_endpoint_to_sockaddr(&a, (struct sockaddr *)&ss, sizeof(ss)),
                     (int)sizeof(struct sockaddr_in6));
    assert_int_equal(homa_endpoint_from_sockaddr((struct sockaddr *)&ss, sizeof(ss), &b), 0);
    assert_true(homa_endpoint_equal(&a, &b));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_ipv4),
        cmocka_unit_test(test_batch_ipv6),
        cmocka_unit_test(udp_send__whole_gso_batches_per_mtu),
        cmocka_unit_test(udp_recv__gro_buffer_with_truncated_last_segment),
        cmocka_unit_test(test_gso_gro_ipv4),
        cmocka_unit_test(test_gso_gro_ipv6),
        cmocka_unit_test(udp_send__priority_0_without_tos_cmsg),
        cmocka_unit_test(test_gso_without_gro),
        cmocka_unit_test(test_control_packets_and_garbage),
        cmocka_unit_test(test_direct_receive),
        cmocka_unit_test(test_direct_receive_not_for_gro_buffers),
        cmocka_unit_test(test_fault_drop_rate),
        cmocka_unit_test(test_fault_dup_rate),
        cmocka_unit_test(test_fault_reorder_and_delay),
        cmocka_unit_test(test_fault_rx_side),
        cmocka_unit_test(test_fault_reorder_depth),
        cmocka_unit_test(test_fault_blackout_window),
        cmocka_unit_test(test_faults_parse),
        cmocka_unit_test(test_pcap),
        cmocka_unit_test(test_endpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
