/* pcap reader for the interop checks; see pcap_scan.h. */
#include "pcap_scan.h"

#include <string.h>

#include "core/wire.h"

#define IPPROTO_HOMA_NUM 146

static hx_pcap_trace_fn trace_fn;
static void *trace_arg;
static double record_ts;

void hx_pcap_set_trace(hx_pcap_trace_fn fn, void *arg)
{
    trace_fn = fn;
    trace_arg = arg;
}

static uint32_t rd32(const uint8_t *p, int swap)
{
    uint32_t v;
    memcpy(&v, p, 4);
    if (swap) v = __builtin_bswap32(v);
    return v;
}

static struct hx_flow *flow_of(struct hx_pcap_stats *st, const uint8_t *src, const uint8_t *dst,
                               int v6, int create)
{
    size_t n = v6 ? 16 : 4;
    for (int i = 0; i < st->nflows; i++) {
        struct hx_flow *f = &st->flows[i];
        if (f->v6 == v6 && !memcmp(f->src, src, n) && !memcmp(f->dst, dst, n)) return f;
    }
    if (!create) return NULL;
    if (st->nflows == HX_MAX_FLOWS) {
        st->flows_full = 1;
        return NULL;
    }
    struct hx_flow *f = &st->flows[st->nflows++];
    memset(f, 0, sizeof(*f));
    memcpy(f->src, src, n);
    memcpy(f->dst, dst, n);
    f->v6 = v6;
    return f;
}

/* One IP packet of caplen bytes captured (wirelen on the wire). */
static void scan_ip(struct hx_pcap_stats *st, const uint8_t *p, size_t caplen, size_t wirelen)
{
    const uint8_t *src, *dst, *l4;
    size_t l4len, avail;
    int v6;
    uint8_t tos;
    if (caplen < 1) {
        st->bad_records++;
        return;
    }
    if ((p[0] >> 4) == 4) {
        if (caplen < 20) {
            st->bad_records++;
            return;
        }
        size_t ihl = (size_t)(p[0] & 0xf) * 4;
        size_t tot = ((size_t)p[2] << 8) | p[3];
        if (ihl < 20 || tot < ihl || ihl > caplen) {
            st->bad_records++;
            return;
        }
        if (p[9] != IPPROTO_HOMA_NUM) {
            st->other++;
            return;
        }
        v6 = 0;
        tos = p[1];
        src = p + 12;
        dst = p + 16;
        l4 = p + ihl;
        /* Ethernet pads short frames: the IP total length is the truth. */
        if (tot > wirelen) {
            st->bad_records++;
            return;
        }
        l4len = tot - ihl;
        avail = (tot > caplen ? caplen : tot) - ihl;
    } else if ((p[0] >> 4) == 6) {
        if (caplen < 40) {
            st->bad_records++;
            return;
        }
        size_t plen = ((size_t)p[4] << 8) | p[5];
        if (p[6] != IPPROTO_HOMA_NUM) { /* extension headers: not Homa for us */
            st->other++;
            return;
        }
        v6 = 1;
        tos = (uint8_t)(((p[0] & 0xf) << 4) | (p[1] >> 4));
        src = p + 8;
        dst = p + 24;
        l4 = p + 40;
        if (40 + plen > wirelen) {
            st->bad_records++;
            return;
        }
        l4len = plen;
        avail = (40 + plen > caplen ? caplen : 40 + plen) - 40;
    } else {
        st->other++;
        return;
    }
    st->homa++;
    struct hx_flow *f = flow_of(st, src, dst, v6, 1);
    struct homa_wire_pkt pkt;
    /* A capture cut by the snap length still has the header to check. */
    int r;
    if (avail < l4len) {
        st->truncated++;
        r = homa_wire_decode_hdr(l4, avail, l4len, &pkt);
    } else {
        r = homa_wire_decode(l4, l4len, &pkt);
    }
    if (r != HOMA_WIRE_OK) {
        st->rejects++;
        if (f) f->rejects[r > 0 && r < HX_NREASONS ? r : 0]++;
        return;
    }
    if (trace_fn) trace_fn(trace_arg, st->records, record_ts, src, dst, v6, tos, &pkt);
    if (!f) return;
    if (pkt.type == HOMA_PKT_CUTOFFS) {
        f->have_cutoffs = 1;
        f->cutoffs_version = pkt.u.cutoffs.version;
        memcpy(f->cutoffs, pkt.u.cutoffs.cutoffs, sizeof(f->cutoffs));
    }
    if (pkt.type == HOMA_PKT_DATA && pkt.u.data.offset == 0 && !pkt.u.data.retransmit) {
        /* The receiver's announcement travels the other way. */
        struct hx_flow *back = flow_of(st, dst, src, v6, 0);
        if (back && back->have_cutoffs && back->cutoffs_version == pkt.u.data.cutoff_version) {
            int want = 0;
            for (int i = 7; i >= 0; i--)
                if (pkt.u.data.message_length <= back->cutoffs[i]) {
                    want = i;
                    break;
                }
            if ((tos >> 5) == want) {
                f->cutoffs_match++;
            } else {
                if (f->cutoffs_mismatch < 4) {
                    f->mismatch[f->cutoffs_mismatch].record = st->records;
                    f->mismatch[f->cutoffs_mismatch].length = pkt.u.data.message_length;
                    f->mismatch[f->cutoffs_mismatch].prio = (uint8_t)(tos >> 5);
                    f->mismatch[f->cutoffs_mismatch].want = (uint8_t)want;
                }
                f->cutoffs_mismatch++;
            }
        } else {
            f->cutoffs_other_version++;
        }
    }
    f->by_type[pkt.type - HOMA_PKT_TYPE_MIN]++;
    f->tos[tos >> 5]++;
    if (pkt.type == HOMA_PKT_DATA && avail >= 56 && rd32(l4 + 52, 0) == 0xFFFFFFFFu)
        f->data_offset_in_seq++;
}

int hx_pcap_scan(const uint8_t *buf, size_t len, struct hx_pcap_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (len < 24) return -1;
    uint32_t magic;
    memcpy(&magic, buf, 4);
    int swap;
    if (magic == 0xa1b2c3d4u || magic == 0xa1b23c4du)
        swap = 0;
    else if (magic == 0xd4c3b2a1u || magic == 0x4d3cb2a1u)
        swap = 1;
    else
        return -1;
    uint32_t linktype = rd32(buf + 20, swap) & 0x0fffffffu;
    size_t linkhdr;
    if (linktype == 1) /* Ethernet */
        linkhdr = 14;
    else if (linktype == 101 || linktype == 228 || linktype == 229) /* raw IP */
        linkhdr = 0;
    else if (linktype == 113) /* Linux cooked v1 */
        linkhdr = 16;
    else
        return -1;
    size_t off = 24;
    while (off < len) {
        if (len - off < 16) {
            st->bad_records++;
            break;
        }
        uint32_t incl = rd32(buf + off + 8, swap);
        uint32_t orig = rd32(buf + off + 12, swap);
        off += 16;
        if (incl > len - off || incl > orig) {
            st->bad_records++;
            break;
        }
        st->records++;
        record_ts = rd32(buf + off - 16, swap) + rd32(buf + off - 12, swap) * 1e-6;
        const uint8_t *p = buf + off;
        off += incl;
        if (incl < linkhdr || orig < linkhdr) {
            st->bad_records++;
            continue;
        }
        if (linkhdr == 14 || linkhdr == 16) {
            size_t at = linkhdr - 2;
            uint16_t et = (uint16_t)((p[at] << 8) | p[at + 1]);
            size_t hdr = linkhdr;
            if (et == 0x8100 && linkhdr == 14) { /* one VLAN tag */
                if (incl < 18) {
                    st->bad_records++;
                    continue;
                }
                et = (uint16_t)((p[16] << 8) | p[17]);
                hdr = 18;
            }
            if (et != 0x0800 && et != 0x86dd) {
                st->other++;
                continue;
            }
            if (orig < hdr) {
                st->bad_records++;
                continue;
            }
            scan_ip(st, p + hdr, incl - hdr, orig - hdr);
        } else {
            scan_ip(st, p, incl, orig);
        }
    }
    return 0;
}
