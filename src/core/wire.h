/* Homa wire format: encoding and decoding of every packet type.
 *
 * Byte layout follows the Linux Homa module (see docs/architecture.md):
 * every field big-endian, packed, a 28-byte common header first.  The
 * decoder treats its input as untrusted: it checks every length against the
 * buffer and rejects anything structurally wrong with a drop reason.  Checks
 * that need configuration (maximum message length, known RPCs) belong to the
 * engine. */
#ifndef HOMA_CORE_WIRE_H
#define HOMA_CORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum homa_pkt_type {
    HOMA_PKT_DATA = 0x10,
    HOMA_PKT_GRANT = 0x11,
    HOMA_PKT_RESEND = 0x12,
    HOMA_PKT_RPC_UNKNOWN = 0x13,
    HOMA_PKT_BUSY = 0x14,
    HOMA_PKT_CUTOFFS = 0x15,
    HOMA_PKT_FREEZE = 0x16,
    HOMA_PKT_NEED_ACK = 0x17,
    HOMA_PKT_ACK = 0x18,
};
#define HOMA_PKT_TYPE_MIN 0x10
#define HOMA_PKT_TYPE_MAX 0x18
#define HOMA_PKT_TYPE_COUNT 9

#define HOMA_COMMON_HDR_LEN 28
#define HOMA_DATA_HDR_LEN 56
#define HOMA_GRANT_LEN 33
#define HOMA_RESEND_LEN 37
#define HOMA_RPC_UNKNOWN_LEN 28
#define HOMA_BUSY_LEN 28
#define HOMA_NEED_ACK_LEN 28
#define HOMA_FREEZE_LEN 28
#define HOMA_CUTOFFS_LEN 62
#define HOMA_ACK_LEN 80
#define HOMA_MAX_HDR_LEN 80 /* largest header of any type */
#define HOMA_ACK_RECORD_LEN 10
#define HOMA_MAX_ACKS_PER_PKT 5
#define HOMA_NUM_PRIORITIES 8
#define HOMA_RESEND_ALL 0xFFFFFFFFu
/* DATA segment offset meaning "the offset is in the common header's sequence". */
#define HOMA_DATA_OFFSET_IN_SEQ 0xFFFFFFFFu

/* Structural reasons a packet is rejected by homa_wire_decode (all > 0). */
enum homa_wire_err {
    HOMA_WIRE_OK = 0,
    HOMA_WIRE_SHORT = 1,        /* shorter than the common header */
    HOMA_WIRE_BAD_TYPE = 2,     /* unknown type byte */
    HOMA_WIRE_TRUNCATED = 3,    /* shorter than the type's header */
    HOMA_WIRE_ZERO_ID = 4,      /* sender_id == 0 */
    HOMA_WIRE_BAD_RANGE = 5,    /* DATA: offset + payload beyond message_length (or overflow) */
    HOMA_WIRE_BAD_PRIORITY = 6, /* GRANT/RESEND priority > 7 */
    HOMA_WIRE_BAD_ACKS = 7,     /* ACK: num_acks > 5 */
};

struct homa_wire_ack {
    uint64_t client_id; /* 0 = no ack */
    uint16_t server_port;
};

/* A decoded packet.  For DATA, payload points into the decoded buffer. */
struct homa_wire_pkt {
    uint16_t sport;
    uint16_t dport;
    uint8_t type;
    uint64_t sender_id;
    union {
        struct {
            uint32_t message_length;
            uint32_t incoming;
            struct homa_wire_ack ack;
            uint16_t cutoff_version;
            uint8_t retransmit;
            uint32_t offset;
            const uint8_t *payload;
            uint32_t payload_len;
        } data;
        struct {
            uint32_t offset;
            uint8_t priority;
        } grant;
        struct {
            uint32_t offset;
            uint32_t length;
            uint8_t priority;
        } resend;
        struct {
            uint32_t cutoffs[HOMA_NUM_PRIORITIES];
            uint16_t version;
        } cutoffs;
        struct {
            uint16_t num_acks;
            struct homa_wire_ack acks[HOMA_MAX_ACKS_PER_PKT];
        } ack;
    } u;
};

/* Decodes buf[0..len) into *out.  Returns HOMA_WIRE_OK or a homa_wire_err.
 * A DATA segment offset of HOMA_DATA_OFFSET_IN_SEQ takes the offset from
 * the common header's sequence field, as the Linux module does.
 * Trailing bytes after a control packet's header are ignored (as the Linux
 * module does); for DATA everything after the 56-byte header is payload. */
int homa_wire_decode(const uint8_t *buf, size_t len, struct homa_wire_pkt *out);

/* Like homa_wire_decode for a packet of len bytes of which only the first
 * avail are in buf (a peeked header): the same checks, with a DATA payload
 * of len - 56 bytes that is not read (payload stays NULL).  A header longer
 * than avail fails as HOMA_WIRE_SHORT or HOMA_WIRE_TRUNCATED. */
int homa_wire_decode_hdr(const uint8_t *buf, size_t avail, size_t len, struct homa_wire_pkt *out);

/* Encodes the header of *pkt into buf (at least HOMA_MAX_HDR_LEN bytes) and
 * returns its length.  For DATA only the 56-byte header is written (the
 * payload travels separately); `sequence` is set to the data offset.
 * Unused/padding fields are zero. */
size_t homa_wire_encode(const struct homa_wire_pkt *pkt, uint8_t *buf);

/* Header length for a type (0 for an unknown type). */
size_t homa_wire_hdr_len(uint8_t type);

/* Static name of a packet type ("DATA", ...; "UNKNOWN" otherwise). */
const char *homa_wire_type_name(uint8_t type);

#endif
