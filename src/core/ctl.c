/* The control packets we send (GRANT, RESEND, BUSY, NEED_ACK, ACK,
 * CUTOFFS, RPC_UNKNOWN) wait in a bounded ring until the driver pulls
 * them (homa_engine_pull, output.c), ahead of any DATA. */
#include <string.h>

#include "internal.h"

void homa_ctl_queue(struct homa_engine *eng, struct homa_rpc *rpc, const homa_addr *dst,
                    uint16_t sport, uint16_t dport, struct homa_wire_pkt *pkt)
{
    bool grant = pkt->type == HOMA_PKT_GRANT && rpc != NULL;
    if (grant && rpc->grant_ctl != 0 && rpc->grant_ctl - 1 >= eng->ctl_seq &&
        rpc->grant_ctl - 1 < eng->ctl_seq + eng->ctl_count) {
        /* A GRANT of this RPC is still waiting to be pulled: a grant only
         * moves forward, so the newer one replaces it (one packet where
         * reading several DATA packets in a row would queue several). */
        uint64_t k = rpc->grant_ctl - 1 - eng->ctl_seq;
        struct homa_ctl *c = &eng->ctl[(eng->ctl_head + k) % HOMA_MAX_CTL_QUEUE];
        if (c->type == HOMA_PKT_GRANT && c->sport == sport && c->dport == dport &&
            memcmp(&c->dst, dst, sizeof(*dst)) == 0) {
            pkt->sport = sport;
            pkt->dport = dport;
            c->hdr_len = (uint16_t)homa_wire_encode(pkt, c->hdr);
            eng->ctr.grants_merged++;
            return;
        }
    }
    if (eng->ctl_count == HOMA_MAX_CTL_QUEUE) {
        /* Bounded: under a flood the oldest control packet is dropped; the
         * protocol's timers recover from lost control packets anyway. */
        eng->ctl_head = (eng->ctl_head + 1) % HOMA_MAX_CTL_QUEUE;
        eng->ctl_count--;
        eng->ctl_seq++;
    }
    if (grant) rpc->grant_ctl = eng->ctl_seq + eng->ctl_count + 1;
    struct homa_ctl *c = &eng->ctl[(eng->ctl_head + eng->ctl_count) % HOMA_MAX_CTL_QUEUE];
    eng->ctl_count++;
    pkt->sport = sport;
    pkt->dport = dport;
    c->dst = *dst;
    c->sport = sport;
    c->dport = dport;
    c->type = pkt->type;
    c->hdr_len = (uint16_t)homa_wire_encode(pkt, c->hdr);
}

void homa_ctl_simple(struct homa_engine *eng, uint8_t type, uint64_t id, const homa_addr *dst,
                     uint16_t sport, uint16_t dport)
{
    struct homa_wire_pkt pkt;
    memset(&pkt, 0, sizeof(pkt));
    pkt.type = type;
    pkt.sender_id = id;
    homa_ctl_queue(eng, NULL, dst, sport, dport, &pkt);
}

void homa_notify_tx(struct homa_engine *eng)
{
    if (eng->ops.want_tx && (eng->ctl_count > 0 || homa_out_queued(eng) > 0))
        eng->ops.want_tx(eng->ops.ctx);
}
