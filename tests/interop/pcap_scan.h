/* Reads a pcap capture (as tcpdump -w writes it) and runs libhoma's wire
 * decoder on every IPv4/IPv6 packet of IP protocol 146.  The capture is
 * untrusted input: every record, link, IP and Homa length is checked
 * against the buffer (fuzz/fuzz_pcap_scan.c). */
#ifndef HX_PCAP_SCAN_H
#define HX_PCAP_SCAN_H

#include <stddef.h>
#include <stdint.h>

#define HX_MAX_FLOWS 16
#define HX_NTYPES 9   /* Homa packet types 0x10..0x18 */
#define HX_NREASONS 8 /* homa_wire_err values 0..7 */

struct hx_flow {
    uint8_t src[16], dst[16]; /* IPv4 in the first 4 bytes */
    int v6;
    uint64_t by_type[HX_NTYPES];
    uint64_t rejects[HX_NREASONS]; /* index = homa_wire_err */
    uint64_t tos[8];               /* packets per TOS >> 5 */
    uint64_t data_offset_in_seq;   /* DATA with segment offset 0xFFFFFFFF */
    /* The last CUTOFFS this direction's source sent (announced to dst). */
    int have_cutoffs;
    uint16_t cutoffs_version;
    uint32_t cutoffs[8];
    /* First DATA packets (offset 0, not retransmitted) whose cutoff_version
     * is the one the receiver announced: priority as those cutoffs say, or
     * not; and those sent under another version. */
    uint64_t cutoffs_match, cutoffs_mismatch, cutoffs_other_version;
    /* The first mismatches: record number, message length, priority, expected. */
    struct {
        uint64_t record;
        uint32_t length;
        uint8_t prio, want;
    } mismatch[4];
};

struct hx_pcap_stats {
    uint64_t records;     /* pcap records */
    uint64_t homa;        /* IP protocol 146 packets decoded */
    uint64_t other;       /* records that are not Homa (ARP, ICMP...) */
    uint64_t bad_records; /* records cut short or with impossible lengths */
    uint64_t rejects;     /* Homa packets homa_wire_decode refused */
    uint64_t truncated;   /* Homa packets captured shorter than on the wire (header checked) */
    int flows_full;       /* more than HX_MAX_FLOWS directions seen */
    struct hx_flow flows[HX_MAX_FLOWS];
    int nflows;
};

struct homa_wire_pkt;
/* Called for every decoded Homa packet when set (hx_pcap_decode --trace):
 * the record number, its time stamp in seconds, addresses, TOS byte. */
typedef void (*hx_pcap_trace_fn)(void *arg, uint64_t record, double ts, const uint8_t *src,
                                 const uint8_t *dst, int v6, uint8_t tos,
                                 const struct homa_wire_pkt *pkt);
void hx_pcap_set_trace(hx_pcap_trace_fn fn, void *arg);

/* Scans buf[0..len).  Returns 0, or -1 when the file header is not a pcap
 * header of a supported link type (Ethernet, raw IP, Linux cooked v1). */
int hx_pcap_scan(const uint8_t *buf, size_t len, struct hx_pcap_stats *st);

#endif
