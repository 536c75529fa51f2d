/* Homa wire codec.  Every multi-byte field is read and written one byte at a
 * time with explicit shifts: that is endian-independent, never performs an
 * unaligned access, and does not depend on how the compiler lays out structs. */
#include "core/wire.h"

#include <string.h>

/* Byte offsets of every field, straight from PROTOCOL.md section 2. */
enum {
    /* common header */
    OFF_SPORT = 0,
    OFF_DPORT = 2,
    OFF_SEQUENCE = 4,
    OFF_UNUSED = 8, /* 3 bytes */
    OFF_TYPE = 11,
    OFF_DOFF = 12,
    OFF_FLAGS = 13,
    OFF_WINDOW = 14,
    OFF_CHECKSUM = 16,
    OFF_URGENT = 18,
    OFF_SENDER_ID = 20,
    /* ack record, relative to its start */
    ACK_OFF_CLIENT_ID = 0,
    ACK_OFF_SERVER_PORT = 8,
    /* DATA */
    DATA_OFF_MESSAGE_LENGTH = 28,
    DATA_OFF_INCOMING = 32,
    DATA_OFF_ACK = 36,
    DATA_OFF_CUTOFF_VERSION = 46,
    DATA_OFF_RETRANSMIT = 48,
    DATA_OFF_PAD = 49, /* 3 bytes */
    DATA_OFF_OFFSET = 52,
    DATA_OFF_PAYLOAD = 56,
    /* GRANT */
    GRANT_OFF_OFFSET = 28,
    GRANT_OFF_PRIORITY = 32,
    /* RESEND */
    RESEND_OFF_OFFSET = 28,
    RESEND_OFF_LENGTH = 32,
    RESEND_OFF_PRIORITY = 36,
    /* CUTOFFS */
    CUTOFFS_OFF_CUTOFFS = 28,
    CUTOFFS_OFF_VERSION = 60,
    /* ACK */
    ACKPKT_OFF_NUM_ACKS = 28,
    ACKPKT_OFF_ACKS = 30,
};

/* doff carries the header length in 32-bit words in its high nibble, like
 * TCP's data offset.  Non-DATA packets claim a 20-byte (5-word) header, as the
 * Linux module does, whatever their real length. */
#define DOFF_DATA ((uint8_t)((HOMA_DATA_HDR_LEN / 4) << 4))
#define DOFF_OTHER ((uint8_t)0x50)

/* Each field must end exactly where the next begins, and each type's last
 * field where its header ends: a typo in any constant above or in wire.h
 * breaks the build rather than the wire format. */
_Static_assert(OFF_DPORT == OFF_SPORT + 2, "sport");
_Static_assert(OFF_SEQUENCE == OFF_DPORT + 2, "dport");
_Static_assert(OFF_UNUSED == OFF_SEQUENCE + 4, "sequence");
_Static_assert(OFF_TYPE == OFF_UNUSED + 3, "unused");
_Static_assert(OFF_DOFF == OFF_TYPE + 1, "type");
_Static_assert(OFF_FLAGS == OFF_DOFF + 1, "doff");
_Static_assert(OFF_WINDOW == OFF_FLAGS + 1, "flags");
_Static_assert(OFF_CHECKSUM == OFF_WINDOW + 2, "window");
_Static_assert(OFF_URGENT == OFF_CHECKSUM + 2, "checksum");
_Static_assert(OFF_SENDER_ID == OFF_URGENT + 2, "urgent");
_Static_assert(HOMA_COMMON_HDR_LEN == OFF_SENDER_ID + 8, "common header length");
_Static_assert(HOMA_COMMON_HDR_LEN == 28, "common header length");

_Static_assert(ACK_OFF_SERVER_PORT == ACK_OFF_CLIENT_ID + 8, "ack client_id");
_Static_assert(HOMA_ACK_RECORD_LEN == ACK_OFF_SERVER_PORT + 2, "ack record length");

_Static_assert(DATA_OFF_MESSAGE_LENGTH == HOMA_COMMON_HDR_LEN, "data message_length");
_Static_assert(DATA_OFF_INCOMING == DATA_OFF_MESSAGE_LENGTH + 4, "data incoming");
_Static_assert(DATA_OFF_ACK == DATA_OFF_INCOMING + 4, "data ack");
_Static_assert(DATA_OFF_CUTOFF_VERSION == DATA_OFF_ACK + HOMA_ACK_RECORD_LEN,
               "data cutoff_version");
_Static_assert(DATA_OFF_RETRANSMIT == DATA_OFF_CUTOFF_VERSION + 2, "data retransmit");
_Static_assert(DATA_OFF_PAD == DATA_OFF_RETRANSMIT + 1, "data pad");
_Static_assert(DATA_OFF_OFFSET == DATA_OFF_PAD + 3, "data offset");
_Static_assert(DATA_OFF_PAYLOAD == DATA_OFF_OFFSET + 4, "data payload");
_Static_assert(HOMA_DATA_HDR_LEN == DATA_OFF_PAYLOAD, "data header length");
_Static_assert(HOMA_DATA_HDR_LEN == 56, "data header length");
_Static_assert(HOMA_DATA_HDR_LEN % 4 == 0 && DOFF_DATA == 0xE0, "data doff");

_Static_assert(GRANT_OFF_OFFSET == HOMA_COMMON_HDR_LEN, "grant offset");
_Static_assert(GRANT_OFF_PRIORITY == GRANT_OFF_OFFSET + 4, "grant priority");
_Static_assert(HOMA_GRANT_LEN == GRANT_OFF_PRIORITY + 1, "grant length");
_Static_assert(HOMA_GRANT_LEN == 33, "grant length");

_Static_assert(RESEND_OFF_OFFSET == HOMA_COMMON_HDR_LEN, "resend offset");
_Static_assert(RESEND_OFF_LENGTH == RESEND_OFF_OFFSET + 4, "resend length");
_Static_assert(RESEND_OFF_PRIORITY == RESEND_OFF_LENGTH + 4, "resend priority");
_Static_assert(HOMA_RESEND_LEN == RESEND_OFF_PRIORITY + 1, "resend length");
_Static_assert(HOMA_RESEND_LEN == 37, "resend length");

_Static_assert(HOMA_RPC_UNKNOWN_LEN == HOMA_COMMON_HDR_LEN, "rpc_unknown length");
_Static_assert(HOMA_BUSY_LEN == HOMA_COMMON_HDR_LEN, "busy length");
_Static_assert(HOMA_NEED_ACK_LEN == HOMA_COMMON_HDR_LEN, "need_ack length");
_Static_assert(HOMA_FREEZE_LEN == HOMA_COMMON_HDR_LEN, "freeze length");

_Static_assert(CUTOFFS_OFF_CUTOFFS == HOMA_COMMON_HDR_LEN, "cutoffs cutoffs");
_Static_assert(CUTOFFS_OFF_VERSION == CUTOFFS_OFF_CUTOFFS + 4 * HOMA_NUM_PRIORITIES,
               "cutoffs version");
_Static_assert(HOMA_CUTOFFS_LEN == CUTOFFS_OFF_VERSION + 2, "cutoffs length");
_Static_assert(HOMA_CUTOFFS_LEN == 62, "cutoffs length");

_Static_assert(ACKPKT_OFF_NUM_ACKS == HOMA_COMMON_HDR_LEN, "ack num_acks");
_Static_assert(ACKPKT_OFF_ACKS == ACKPKT_OFF_NUM_ACKS + 2, "ack records");
_Static_assert(HOMA_ACK_LEN == ACKPKT_OFF_ACKS + HOMA_MAX_ACKS_PER_PKT * HOMA_ACK_RECORD_LEN,
               "ack length");
_Static_assert(HOMA_ACK_LEN == 80, "ack length");

_Static_assert(HOMA_MAX_HDR_LEN >= HOMA_DATA_HDR_LEN && HOMA_MAX_HDR_LEN >= HOMA_GRANT_LEN &&
                   HOMA_MAX_HDR_LEN >= HOMA_RESEND_LEN && HOMA_MAX_HDR_LEN >= HOMA_CUTOFFS_LEN &&
                   HOMA_MAX_HDR_LEN >= HOMA_ACK_LEN,
               "max header length");
_Static_assert(HOMA_PKT_TYPE_MIN == HOMA_PKT_DATA && HOMA_PKT_TYPE_MAX == HOMA_PKT_ACK &&
                   HOMA_PKT_TYPE_COUNT == HOMA_PKT_TYPE_MAX - HOMA_PKT_TYPE_MIN + 1,
               "type range");

/* ---- big-endian byte helpers ---- */

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[0] << 8 | (uint16_t)p[1]);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | (uint64_t)get32(p + 4);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static void get_ack(const uint8_t *p, struct homa_wire_ack *ack)
{
    ack->client_id = get64(p + ACK_OFF_CLIENT_ID);
    ack->server_port = get16(p + ACK_OFF_SERVER_PORT);
}

static void put_ack(uint8_t *p, const struct homa_wire_ack *ack)
{
    put64(p + ACK_OFF_CLIENT_ID, ack->client_id);
    put16(p + ACK_OFF_SERVER_PORT, ack->server_port);
}

/* ---- public API ---- */

size_t homa_wire_hdr_len(uint8_t type)
{
    switch (type) {
    case HOMA_PKT_DATA:
        return HOMA_DATA_HDR_LEN;
    case HOMA_PKT_GRANT:
        return HOMA_GRANT_LEN;
    case HOMA_PKT_RESEND:
        return HOMA_RESEND_LEN;
    case HOMA_PKT_RPC_UNKNOWN:
        return HOMA_RPC_UNKNOWN_LEN;
    case HOMA_PKT_BUSY:
        return HOMA_BUSY_LEN;
    case HOMA_PKT_CUTOFFS:
        return HOMA_CUTOFFS_LEN;
    case HOMA_PKT_FREEZE:
        return HOMA_FREEZE_LEN;
    case HOMA_PKT_NEED_ACK:
        return HOMA_NEED_ACK_LEN;
    case HOMA_PKT_ACK:
        return HOMA_ACK_LEN;
    default:
        return 0;
    }
}

const char *homa_wire_type_name(uint8_t type)
{
    switch (type) {
    case HOMA_PKT_DATA:
        return "DATA";
    case HOMA_PKT_GRANT:
        return "GRANT";
    case HOMA_PKT_RESEND:
        return "RESEND";
    case HOMA_PKT_RPC_UNKNOWN:
        return "RPC_UNKNOWN";
    case HOMA_PKT_BUSY:
        return "BUSY";
    case HOMA_PKT_CUTOFFS:
        return "CUTOFFS";
    case HOMA_PKT_FREEZE:
        return "FREEZE";
    case HOMA_PKT_NEED_ACK:
        return "NEED_ACK";
    case HOMA_PKT_ACK:
        return "ACK";
    default:
        return "UNKNOWN";
    }
}

int homa_wire_decode(const uint8_t *buf, size_t len, struct homa_wire_pkt *out)
{
    int rc = homa_wire_decode_hdr(buf, len, len, out);
    if (rc == HOMA_WIRE_OK && out->type == HOMA_PKT_DATA)
        out->u.data.payload = buf + HOMA_DATA_HDR_LEN;
    return rc;
}

int homa_wire_decode_hdr(const uint8_t *buf, size_t avail, size_t len, struct homa_wire_pkt *out)
{
    /* Zero everything first so fields a type does not use are deterministic,
     * even when decoding fails part-way. */
    memset(out, 0, sizeof(*out));
    /* Only the bytes present can be read: a header cut short by the
     * caller's peek fails as a short or truncated packet would. */
    if (avail > len) avail = len;
    if (avail < HOMA_COMMON_HDR_LEN) return HOMA_WIRE_SHORT;

    /* The common fields are filled even for rejected packets so the caller
     * can log where a bad packet came from.  doff, flags, window, checksum,
     * urgent and the unused bytes carry nothing Homa needs, so they are not
     * checked: the kernel fills them with TCP look-alike values and a NIC or
     * middlebox may have rewritten them.  sequence matters only for a DATA
     * packet whose segment offset is 0xFFFFFFFF. */
    out->sport = get16(buf + OFF_SPORT);
    out->dport = get16(buf + OFF_DPORT);
    out->type = buf[OFF_TYPE];
    out->sender_id = get64(buf + OFF_SENDER_ID);

    size_t hdr_len = homa_wire_hdr_len(out->type);
    if (hdr_len == 0) return HOMA_WIRE_BAD_TYPE;
    if (avail < hdr_len) return HOMA_WIRE_TRUNCATED;
    if (out->sender_id == 0) return HOMA_WIRE_ZERO_ID;

    switch (out->type) {
    case HOMA_PKT_DATA: {
        out->u.data.message_length = get32(buf + DATA_OFF_MESSAGE_LENGTH);
        out->u.data.incoming = get32(buf + DATA_OFF_INCOMING);
        get_ack(buf + DATA_OFF_ACK, &out->u.data.ack);
        out->u.data.cutoff_version = get16(buf + DATA_OFF_CUTOFF_VERSION);
        out->u.data.retransmit = buf[DATA_OFF_RETRANSMIT];
        /* The Linux module's rule: the segment offset, unless it is
         * 0xFFFFFFFF, in which case the offset is in `sequence` (what the
         * kernel sends for most DATA packets; see docs/wire.md). */
        out->u.data.offset = get32(buf + DATA_OFF_OFFSET);
        if (out->u.data.offset == HOMA_DATA_OFFSET_IN_SEQ)
            out->u.data.offset = get32(buf + OFF_SEQUENCE);
        /* 64-bit arithmetic: offset + payload cannot wrap, and a payload too
         * long for payload_len's 32 bits necessarily exceeds message_length. */
        uint64_t payload_len = (uint64_t)(len - HOMA_DATA_HDR_LEN);
        if ((uint64_t)out->u.data.offset + payload_len > (uint64_t)out->u.data.message_length)
            return HOMA_WIRE_BAD_RANGE;
        out->u.data.payload_len = (uint32_t)payload_len;
        break;
    }
    case HOMA_PKT_GRANT:
        out->u.grant.offset = get32(buf + GRANT_OFF_OFFSET);
        out->u.grant.priority = buf[GRANT_OFF_PRIORITY];
        if (out->u.grant.priority >= HOMA_NUM_PRIORITIES) return HOMA_WIRE_BAD_PRIORITY;
        break;
    case HOMA_PKT_RESEND:
        out->u.resend.offset = get32(buf + RESEND_OFF_OFFSET);
        out->u.resend.length = get32(buf + RESEND_OFF_LENGTH);
        out->u.resend.priority = buf[RESEND_OFF_PRIORITY];
        if (out->u.resend.priority >= HOMA_NUM_PRIORITIES) return HOMA_WIRE_BAD_PRIORITY;
        break;
    case HOMA_PKT_CUTOFFS:
        for (int i = 0; i < HOMA_NUM_PRIORITIES; i++)
            out->u.cutoffs.cutoffs[i] = get32(buf + CUTOFFS_OFF_CUTOFFS + 4 * i);
        out->u.cutoffs.version = get16(buf + CUTOFFS_OFF_VERSION);
        break;
    case HOMA_PKT_ACK:
        out->u.ack.num_acks = get16(buf + ACKPKT_OFF_NUM_ACKS);
        if (out->u.ack.num_acks > HOMA_MAX_ACKS_PER_PKT) return HOMA_WIRE_BAD_ACKS;
        /* All five records are always present in the header; decoding them
         * all (not just num_acks) keeps decode and encode exact inverses. */
        for (int i = 0; i < HOMA_MAX_ACKS_PER_PKT; i++)
            get_ack(buf + ACKPKT_OFF_ACKS + HOMA_ACK_RECORD_LEN * i, &out->u.ack.acks[i]);
        break;
    default: /* RPC_UNKNOWN, BUSY, FREEZE, NEED_ACK: common header only */
        break;
    }
    return HOMA_WIRE_OK;
}

size_t homa_wire_encode(const struct homa_wire_pkt *pkt, uint8_t *buf)
{
    size_t hdr_len = homa_wire_hdr_len(pkt->type);
    if (hdr_len == 0) return 0;
    /* Unused, padding and TCP-lookalike fields must go out as zero. */
    memset(buf, 0, hdr_len);

    put16(buf + OFF_SPORT, pkt->sport);
    put16(buf + OFF_DPORT, pkt->dport);
    buf[OFF_TYPE] = pkt->type;
    buf[OFF_DOFF] = pkt->type == HOMA_PKT_DATA ? DOFF_DATA : DOFF_OTHER;
    put64(buf + OFF_SENDER_ID, pkt->sender_id);

    switch (pkt->type) {
    case HOMA_PKT_DATA:
        /* sequence mirrors the data offset, where TCP segmentation offload
         * expects a sequence number to advance. */
        put32(buf + OFF_SEQUENCE, pkt->u.data.offset);
        put32(buf + DATA_OFF_MESSAGE_LENGTH, pkt->u.data.message_length);
        put32(buf + DATA_OFF_INCOMING, pkt->u.data.incoming);
        put_ack(buf + DATA_OFF_ACK, &pkt->u.data.ack);
        put16(buf + DATA_OFF_CUTOFF_VERSION, pkt->u.data.cutoff_version);
        buf[DATA_OFF_RETRANSMIT] = pkt->u.data.retransmit;
        put32(buf + DATA_OFF_OFFSET, pkt->u.data.offset);
        break;
    case HOMA_PKT_GRANT:
        put32(buf + GRANT_OFF_OFFSET, pkt->u.grant.offset);
        buf[GRANT_OFF_PRIORITY] = pkt->u.grant.priority;
        break;
    case HOMA_PKT_RESEND:
        put32(buf + RESEND_OFF_OFFSET, pkt->u.resend.offset);
        put32(buf + RESEND_OFF_LENGTH, pkt->u.resend.length);
        buf[RESEND_OFF_PRIORITY] = pkt->u.resend.priority;
        break;
    case HOMA_PKT_CUTOFFS:
        for (int i = 0; i < HOMA_NUM_PRIORITIES; i++)
            put32(buf + CUTOFFS_OFF_CUTOFFS + 4 * i, pkt->u.cutoffs.cutoffs[i]);
        put16(buf + CUTOFFS_OFF_VERSION, pkt->u.cutoffs.version);
        break;
    case HOMA_PKT_ACK:
        put16(buf + ACKPKT_OFF_NUM_ACKS, pkt->u.ack.num_acks);
        for (int i = 0; i < HOMA_MAX_ACKS_PER_PKT; i++)
            put_ack(buf + ACKPKT_OFF_ACKS + HOMA_ACK_RECORD_LEN * i, &pkt->u.ack.acks[i]);
        break;
    default:
        break;
    }
    return hdr_len;
}
