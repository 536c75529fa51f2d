/* Classifies a Homa packet for per-type fault injection.  Shared by the UDP
 * driver (faults.c) and the virtual network (sim/vnet.c), so both drop the
 * same packets for the same drop_types.  Header-only: vnet does not link
 * libhoma.  The bytes are untrusted: every field read is checked against
 * len first. */
#ifndef HOMA_IO_FAULT_CLASS_H
#define HOMA_IO_FAULT_CLASS_H

#include <stddef.h>
#include <stdint.h>

#include <homa/homa.h>

#include "core/wire.h"

static inline uint32_t homa_fault_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Bit mask of 1u << HOMA_FAULT_CLASS_* for the packet; 0 if it is not a
 * Homa packet (too short for its type, unknown type). */
static inline unsigned homa_fault_classify(const uint8_t *d, size_t len)
{
    if (d == NULL || len < HOMA_COMMON_HDR_LEN) return 0;
    switch (d[11]) {
    case HOMA_PKT_DATA: {
        if (len < HOMA_DATA_HDR_LEN) return 0;
        unsigned c = 1u << HOMA_FAULT_CLASS_DATA;
        uint32_t msg_len = homa_fault_rd32(d + 28);
        uint32_t off = homa_fault_rd32(d + 52);
        if (off == 0xFFFFFFFFu) off = homa_fault_rd32(d + 4); /* offset in `sequence` */
        uint64_t end = (uint64_t)off + (len - HOMA_DATA_HDR_LEN);
        /* 64-bit sum: a hostile offset near 2^32 must not wrap into "last". */
        if (end >= msg_len) c |= 1u << HOMA_FAULT_CLASS_LAST_DATA;
        return c;
    }
    case HOMA_PKT_GRANT:
        return len >= HOMA_GRANT_LEN ? 1u << HOMA_FAULT_CLASS_GRANT : 0;
    case HOMA_PKT_RESEND:
        return len >= HOMA_RESEND_LEN ? 1u << HOMA_FAULT_CLASS_RESEND : 0;
    case HOMA_PKT_RPC_UNKNOWN:
        return 1u << HOMA_FAULT_CLASS_RPC_UNKNOWN;
    case HOMA_PKT_BUSY:
        return 1u << HOMA_FAULT_CLASS_BUSY;
    case HOMA_PKT_CUTOFFS:
        return len >= HOMA_CUTOFFS_LEN ? 1u << HOMA_FAULT_CLASS_CUTOFFS : 0;
    case HOMA_PKT_FREEZE:
        return 1u << HOMA_FAULT_CLASS_FREEZE;
    case HOMA_PKT_NEED_ACK:
        return 1u << HOMA_FAULT_CLASS_NEED_ACK;
    case HOMA_PKT_ACK:
        return len >= HOMA_ACK_LEN ? 1u << HOMA_FAULT_CLASS_ACK : 0;
    default:
        return 0;
    }
}

/* Gilbert-Elliott transitions for a long-run loss rate `drop` and a mean
 * loss run of `burst` packets.  The bad state loses every packet, the good
 * state none, so a loss run is a stay in the bad state: geometric with mean
 * 1 / p_good = burst.  The stationary share of the bad state, p_bad /
 * (p_bad + p_good), is the loss rate: p_bad = drop * p_good / (1 - drop),
 * a probability only while drop <= burst / (1 + burst).  Returns -1 (and
 * the nearest chain, p_bad clamped to 1) outside that. */
static inline int homa_fault_ge(double drop, double burst, double *p_bad, double *p_good)
{
    if (!(burst >= 1.0) || !(drop >= 0.0 && drop < 1.0)) {
        *p_bad = drop > 0.0 ? 1.0 : 0.0;
        *p_good = burst >= 1.0 ? 1.0 / burst : 1.0;
        return -1;
    }
    double g = 1.0 / burst;
    double b = drop * g / (1.0 - drop);
    *p_good = g;
    *p_bad = b > 1.0 ? 1.0 : b;
    return b > 1.0 + 1e-12 ? -1 : 0;
}

#endif
