/* libFuzzer target for the whole engine input path.
 *
 * The input is a script of operations against one engine with two open
 * ports: inject a packet (from one of four peers), advance time and run the
 * timer, pull packets, start a request, receive/reply/release, abort.
 * Injected packets are mostly made of fuzzer bytes but start from a valid
 * header often enough (the "template" ops patch fuzzer bytes into a real
 * DATA/GRANT/RESEND header) for the fuzzer to reach deep states; op bytes
 * 0xf0 and up receive a templated DATA packet in place, as a driver doing
 * direct receive would (homa_engine_place_begin, write the payload where
 * told, maybe let another operation run meanwhile, place_end or cancel,
 * sometimes with a different header or length than announced).  Memory
 * caps are small so cap paths are exercised.  Invariants checked after every
 * op: gauges never underflow and stay within their caps. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <homa/engine.h>

#include "core/wire.h"

struct reader {
    const uint8_t *p;
    size_t n;
};

static uint32_t take(struct reader *r, int bytes)
{
    uint32_t v = 0;
    for (int i = 0; i < bytes; i++) {
        v <<= 8;
        if (r->n) {
            v |= *r->p++;
            r->n--;
        }
    }
    return v;
}

static void check(const homa_engine *e, const homa_config *cfg)
{
    homa_counters c;
    homa_engine_counters(e, &c);
    if (c.rx_bytes_in_use > cfg->max_rx_bytes) abort();
    if (c.incoming_bytes > (1ull << 40)) abort(); /* an unsigned underflow */
    if (c.rpcs_live > cfg->max_rpcs + 1) abort();
}

/* One direct receive of a templated DATA packet (see the header comment). */
static void place_op(homa_engine *e, struct reader *r, uint64_t *now, const homa_addr *peers,
                     const uint64_t *ids, int nids)
{
    struct homa_wire_pkt pkt;
    memset(&pkt, 0, sizeof(pkt));
    int peer = (int)take(r, 1) & 3;
    pkt.type = HOMA_PKT_DATA;
    pkt.sport = (uint16_t)(take(r, 1) % 3 + 1);
    pkt.dport = (uint16_t)(take(r, 1) % 3 + 1);
    pkt.sender_id = take(r, 1) % 8 + (nids > 0 && (take(r, 1) & 1) ? ids[0] ^ 1 : 0);
    if (pkt.sender_id == 0) pkt.sender_id = 1;
    pkt.u.data.message_length = take(r, 3) % 250000;
    pkt.u.data.incoming = take(r, 3);
    pkt.u.data.offset = take(r, 3) % 250000;
    pkt.u.data.cutoff_version = (uint16_t)take(r, 1);
    pkt.u.data.ack.client_id = take(r, 1);
    pkt.u.data.ack.server_port = (uint16_t)(take(r, 1) % 3);
    uint8_t hdr[HOMA_MAX_HDR_LEN];
    size_t hl = homa_wire_encode(&pkt, hdr);
    size_t avail = take(r, 1) % 64; /* how much of the header the "peek" got */
    if (avail > hl) avail = hl;
    size_t len = hl + take(r, 2) % 5000;
    uint8_t *dst = NULL;
    if (homa_engine_place_begin(e, *now, &peers[peer], hdr, avail, len, &dst) != 0) {
        if (dst) abort();
        return;
    }
    /* the whole announced payload must be writable memory (ASan) */
    memset(dst, 0xcd, len - hl);
    switch (take(r, 1) % 6) { /* something else happens meanwhile */
    case 1:
        *now += (uint64_t)take(r, 2) * 10000;
        homa_engine_timer(e, *now);
        break;
    case 2:
        if (nids > 0) homa_engine_abort(e, *now, 1, ids[take(r, 1) % (uint32_t)nids]);
        break;
    case 3:
        homa_engine_port_close(e, *now, 2);
        homa_engine_port_open(e, 2);
        break;
    case 4: { /* the same packet through the normal path: a duplicate */
        static uint8_t full[HOMA_MAX_HDR_LEN + 5000];
        memcpy(full, hdr, hl);
        memset(full + hl, 0xab, len - hl);
        homa_engine_input(e, *now, &peers[peer], full, len);
        break;
    }
    default:
        break;
    }
    uint8_t how = (uint8_t)take(r, 1);
    if (how % 8 == 0) {
        homa_engine_place_cancel(e);
    } else if (how % 8 == 1) {
        hdr[52 + take(r, 1) % 4] ^= 1; /* read a different packet */
        homa_engine_place_end(e, *now, hdr, hl, len);
    } else {
        homa_engine_place_end(e, *now, hdr, hl, how % 8 == 2 ? len - 1 : len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    homa_config cfg;
    homa_config_default(&cfg);
    cfg.max_message_length = 200000;
    cfg.max_rx_bytes = 400000;
    cfg.max_rpcs = 64;
    cfg.max_payload = 1000;
    cfg.unsched_bytes = 3000;
    cfg.max_tombstones = 16;
    homa_engine *e;
    if (homa_engine_create(&cfg, NULL, &e) != 0) abort();
    homa_engine_port_open(e, 1);
    homa_engine_port_open(e, 2);
    homa_addr peers[4];
    memset(peers, 0, sizeof(peers));
    for (int i = 0; i < 4; i++) peers[i].bytes[15] = (uint8_t)(i + 1);
    homa_msg held[8];
    int nheld = 0;
    uint64_t now = 1000;
    uint64_t ids[16];
    int nids = 0;
    static uint8_t msgbuf[200000];
    struct reader r = {data, size};
    homa_pkt_out out[8];

    while (r.n > 0) {
        uint8_t op = (uint8_t)take(&r, 1);
        if (op >= 0xf0) {
            place_op(e, &r, &now, peers, ids, nids);
            check(e, &cfg);
            continue;
        }
        switch (op % 9) {
        case 0: { /* raw packet */
            int peer = (int)take(&r, 1) & 3;
            uint32_t len = take(&r, 2) % 1200;
            if (len > r.n) len = (uint32_t)r.n;
            homa_engine_input(e, now, &peers[peer], r.p, len);
            r.p += len;
            r.n -= len;
            break;
        }
        case 1: { /* templated packet: valid header, fuzzed fields */
            struct homa_wire_pkt pkt;
            memset(&pkt, 0, sizeof(pkt));
            int peer = (int)take(&r, 1) & 3;
            pkt.type = (uint8_t)(HOMA_PKT_TYPE_MIN + take(&r, 1) % HOMA_PKT_TYPE_COUNT);
            pkt.sport = (uint16_t)(take(&r, 1) % 3 + 1);
            pkt.dport = (uint16_t)(take(&r, 1) % 3 + 1);
            pkt.sender_id = take(&r, 1) % 8 + (ids[0] ^ 1) * (nids > 0 && (take(&r, 1) & 1));
            if (pkt.sender_id == 0) pkt.sender_id = 1;
            uint8_t buf[1300];
            uint32_t plen = 0;
            switch (pkt.type) {
            case HOMA_PKT_DATA:
                pkt.u.data.message_length = take(&r, 3) % 250000;
                pkt.u.data.incoming = take(&r, 3);
                pkt.u.data.offset = take(&r, 3) % 250000;
                pkt.u.data.cutoff_version = (uint16_t)take(&r, 1);
                pkt.u.data.ack.client_id = take(&r, 1);
                pkt.u.data.ack.server_port = (uint16_t)(take(&r, 1) % 3);
                plen = take(&r, 2) % 1200;
                break;
            case HOMA_PKT_GRANT:
                pkt.u.grant.offset = take(&r, 3);
                pkt.u.grant.priority = (uint8_t)(take(&r, 1) % 9);
                break;
            case HOMA_PKT_RESEND:
                pkt.u.resend.offset = take(&r, 3);
                pkt.u.resend.length = take(&r, 4);
                pkt.u.resend.priority = (uint8_t)(take(&r, 1) % 9);
                break;
            case HOMA_PKT_CUTOFFS:
                for (int i = 0; i < 8; i++) pkt.u.cutoffs.cutoffs[i] = take(&r, 3);
                pkt.u.cutoffs.version = (uint16_t)take(&r, 2);
                break;
            case HOMA_PKT_ACK:
                pkt.u.ack.num_acks = (uint16_t)(take(&r, 1) % 7);
                for (int i = 0; i < 5; i++) {
                    pkt.u.ack.acks[i].client_id = take(&r, 1);
                    pkt.u.ack.acks[i].server_port = (uint16_t)(take(&r, 1) % 3);
                }
                break;
            default:
                break;
            }
            size_t hl = homa_wire_encode(&pkt, buf);
            if (plen > sizeof(buf) - hl) plen = (uint32_t)(sizeof(buf) - hl);
            memset(buf + hl, 0xab, plen);
            homa_engine_input(e, now, &peers[peer], buf, hl + plen);
            break;
        }
        case 2: /* time passes */
            now += (uint64_t)take(&r, 2) * 10000;
            homa_engine_timer(e, now);
            break;
        case 3: { /* driver pulls */
            int n = homa_engine_pull(e, now, out, 8);
            for (int i = 0; i < n; i++) {
                /* touch every payload byte: must be valid memory */
                volatile uint8_t sum = 0;
                for (uint32_t j = 0; j < out[i].payload_len; j++) sum ^= out[i].payload[j];
                (void)sum;
            }
            if (n > 0) homa_engine_pull_done(e);
            break;
        }
        case 4: { /* start a request */
            uint32_t len = take(&r, 3) % 150000;
            uint64_t id;
            int peer = (int)take(&r, 1) & 3;
            if (homa_engine_send_request(e, now, 1, &peers[peer], 1, msgbuf, len, 0, &id) == 0 &&
                nids < 16)
                ids[nids++] = id;
            break;
        }
        case 5: /* receive */
            if (nheld < 8 && homa_engine_recv(e, (uint16_t)(take(&r, 1) % 2 + 1), HOMA_RECV_ANY, 0,
                                              &held[nheld]) == 0) {
                for (size_t j = 0; j < held[nheld].length; j++) (void)held[nheld].data[j];
                nheld++;
            }
            break;
        case 6: /* reply to / release a held message */
            if (nheld > 0) {
                homa_msg *m = &held[--nheld];
                if (m->is_request)
                    homa_engine_send_reply(e, now, m->port, &m->peer, m->peer_port, m->id, msgbuf,
                                           take(&r, 2));
                homa_engine_release(e, m);
            }
            break;
        case 7: /* abort */
            if (nids > 0) homa_engine_abort(e, now, 1, ids[take(&r, 1) % (uint32_t)nids]);
            break;
        case 8: /* close and reopen a port */
            if (take(&r, 1) == 0x5a) {
                homa_engine_port_close(e, now, 2);
                homa_engine_port_open(e, 2);
            }
            break;
        }
        check(e, &cfg);
    }
    while (nheld > 0) homa_engine_release(e, &held[--nheld]);
    homa_engine_destroy(e);
    return 0;
}
