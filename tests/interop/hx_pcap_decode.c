/* hx_pcap_decode FILE.pcap...: decodes every Homa packet of the captures
 * with libhoma's wire decoder and prints, per direction, the packets of
 * each type, their TOS priorities and the rejects.  Exit status 0 when
 * nothing was rejected, 1 when a packet was rejected or a record was
 * malformed, 2 on a usage or file error.
 *
 *   hx_pcap_decode [--trace ID[,ID...]] FILE.pcap...
 *   --trace: also prints every packet of those RPCs (either side's id),
 *   one line each, for finding out why an RPC stalled. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire.h"

#include "pcap_scan.h"

static const char *const type_names[HX_NTYPES] = {
    "DATA", "GRANT", "RESEND", "RPC_UNKNOWN", "BUSY", "CUTOFFS", "FREEZE", "NEED_ACK", "ACK"};

#define MAX_TRACE 64
static uint64_t trace_ids[MAX_TRACE];
static int ntrace;

static void trace_pkt(void *arg, uint64_t record, double ts, const uint8_t *src,
                      const uint8_t *dst, int v6, uint8_t tos, const struct homa_wire_pkt *pkt)
{
    (void)arg;
    uint64_t id = pkt->sender_id & ~1ull;
    int hit = 0;
    for (int i = 0; i < ntrace && !hit; i++)
        hit = trace_ids[i] == id;
    /* An ACK names finished RPCs in its body too. */
    if (pkt->type == HOMA_PKT_ACK)
        for (int k = 0; k < pkt->u.ack.num_acks && !hit; k++)
            for (int i = 0; i < ntrace && !hit; i++)
                hit = trace_ids[i] == (pkt->u.ack.acks[k].client_id & ~1ull);
    if (!hit) return;
    char s[64], d[64];
    inet_ntop(v6 ? AF_INET6 : AF_INET, src, s, sizeof(s));
    inet_ntop(v6 ? AF_INET6 : AF_INET, dst, d, sizeof(d));
    printf("trace %llu %.6f %s:%u -> %s:%u id %llu %s prio %u", (unsigned long long)record, ts, s,
           pkt->sport, d, pkt->dport, (unsigned long long)pkt->sender_id,
           homa_wire_type_name(pkt->type), tos >> 5);
    switch (pkt->type) {
    case HOMA_PKT_DATA:
        printf(" len %u off %u bytes %u incoming %u retx %u", pkt->u.data.message_length,
               pkt->u.data.offset, pkt->u.data.payload_len, pkt->u.data.incoming,
               pkt->u.data.retransmit);
        break;
    case HOMA_PKT_GRANT:
        printf(" offset %u grant-prio %u", pkt->u.grant.offset, pkt->u.grant.priority);
        break;
    case HOMA_PKT_RESEND:
        printf(" offset %u length %u resend-prio %u", pkt->u.resend.offset,
               pkt->u.resend.length, pkt->u.resend.priority);
        break;
    case HOMA_PKT_ACK:
        printf(" acks %u", pkt->u.ack.num_acks);
        for (int k = 0; k < pkt->u.ack.num_acks; k++)
            printf(" %llu", (unsigned long long)pkt->u.ack.acks[k].client_id);
        break;
    default:
        break;
    }
    printf("\n");
}

static int scan_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 2;
    }
    size_t cap = 1 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", path);
        return 2;
    }
    static struct hx_pcap_stats st;
    if (hx_pcap_scan(buf, len, &st) != 0) {
        fprintf(stderr, "%s: not a pcap file of a supported link type\n", path);
        free(buf);
        return 2;
    }
    free(buf);
    printf("%s: records %llu homa %llu other %llu rejects %llu bad_records %llu truncated %llu\n",
           path, (unsigned long long)st.records, (unsigned long long)st.homa,
           (unsigned long long)st.other, (unsigned long long)st.rejects,
           (unsigned long long)st.bad_records, (unsigned long long)st.truncated);
    for (int i = 0; i < st.nflows; i++) {
        const struct hx_flow *fl = &st.flows[i];
        char s[64], d[64];
        inet_ntop(fl->v6 ? AF_INET6 : AF_INET, fl->src, s, sizeof(s));
        inet_ntop(fl->v6 ? AF_INET6 : AF_INET, fl->dst, d, sizeof(d));
        printf("  %s -> %s:", s, d);
        for (int t = 0; t < HX_NTYPES; t++)
            if (fl->by_type[t])
                printf(" %s %llu", type_names[t], (unsigned long long)fl->by_type[t]);
        printf("\n    tos-prio:");
        for (int p = 7; p >= 0; p--)
            if (fl->tos[p]) printf(" %d:%llu", p, (unsigned long long)fl->tos[p]);
        printf("  data-offset-in-sequence %llu", (unsigned long long)fl->data_offset_in_seq);
        printf(
            "\n    first-data-priority-by-receiver-cutoffs: match %llu mismatch %llu other-version "
            "%llu",
            (unsigned long long)fl->cutoffs_match, (unsigned long long)fl->cutoffs_mismatch,
            (unsigned long long)fl->cutoffs_other_version);
        for (uint64_t k = 0; k < fl->cutoffs_mismatch && k < 4; k++)
            printf("\n    mismatch: record %llu message_length %u priority %u, cutoffs say %u",
                   (unsigned long long)fl->mismatch[k].record, fl->mismatch[k].length,
                   fl->mismatch[k].prio, fl->mismatch[k].want);
        if (fl->have_cutoffs) {
            printf("\n    last CUTOFFS sent: version %u:", fl->cutoffs_version);
            for (int p = 7; p >= 0; p--)
                printf(" %u", fl->cutoffs[p]);
        }
        for (int r = 0; r < HX_NREASONS; r++)
            if (fl->rejects[r])
                printf("  REJECT(reason %d) %llu", r, (unsigned long long)fl->rejects[r]);
        printf("\n");
    }
    if (st.flows_full) printf("  (more than %d directions; the rest not itemized)\n", HX_MAX_FLOWS);
    return st.rejects || st.bad_records ? 1 : 0;
}

int main(int argc, char **argv)
{
    int first = 1;
    if (argc > 2 && !strcmp(argv[1], "--trace")) {
        char *copy = strdup(argv[2]), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t && ntrace < MAX_TRACE;
             t = strtok_r(NULL, ",", &save))
            trace_ids[ntrace++] = strtoull(t, NULL, 0) & ~1ull;
        free(copy);
        hx_pcap_set_trace(trace_pkt, NULL);
        first = 3;
    }
    if (argc <= first) {
        fprintf(stderr, "usage: hx_pcap_decode [--trace ID[,ID...]] FILE.pcap...\n");
        return 2;
    }
    int rc = 0;
    for (int i = first; i < argc; i++) {
        int r = scan_file(argv[i]);
        if (r > rc) rc = r;
    }
    return rc;
}
