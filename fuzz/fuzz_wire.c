/* libFuzzer target for the wire decoder.
 *
 * Feeds arbitrary bytes to homa_wire_decode.  Memory errors are caught by
 * ASan/UBSan; logic errors by the invariants below, each of which abort()s so
 * libFuzzer records the input as a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_wire: invariant failed at line %d: %s\n", __LINE__, #cond);      \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Does the decoder ignore byte i of a header of this type?  (These are the
 * TCP-lookalike and padding bytes; the encoder writes canonical values.) */
static int ignored_byte(uint8_t type, size_t i)
{
    if (i >= 4 && i < 20 && i != 11) /* sequence, unused, doff, flags, window, csum, urgent */
        return 1;
    if (type == HOMA_PKT_DATA && i >= 49 && i < 52) /* pad */
        return 1;
    return 0;
}

/* Canonical encoder output for an ignored byte. */
static uint8_t canonical_byte(const uint8_t *enc, uint8_t type, size_t i)
{
    if (i == 12) return type == HOMA_PKT_DATA ? 0xE0 : 0x50;
    if (type == HOMA_PKT_DATA && i >= 4 && i < 8)
        return enc[52 + (i - 4)]; /* sequence mirrors offset */
    return 0;
}

static void check_same(const struct homa_wire_pkt *a, const struct homa_wire_pkt *b)
{
    CHECK(a->sport == b->sport);
    CHECK(a->dport == b->dport);
    CHECK(a->type == b->type);
    CHECK(a->sender_id == b->sender_id);
    switch (a->type) {
    case HOMA_PKT_DATA:
        CHECK(a->u.data.message_length == b->u.data.message_length);
        CHECK(a->u.data.incoming == b->u.data.incoming);
        CHECK(a->u.data.ack.client_id == b->u.data.ack.client_id);
        CHECK(a->u.data.ack.server_port == b->u.data.ack.server_port);
        CHECK(a->u.data.cutoff_version == b->u.data.cutoff_version);
        CHECK(a->u.data.retransmit == b->u.data.retransmit);
        CHECK(a->u.data.offset == b->u.data.offset);
        CHECK(a->u.data.payload_len == b->u.data.payload_len);
        CHECK(a->u.data.payload_len == 0 ||
              memcmp(a->u.data.payload, b->u.data.payload, a->u.data.payload_len) == 0);
        break;
    case HOMA_PKT_GRANT:
        CHECK(a->u.grant.offset == b->u.grant.offset);
        CHECK(a->u.grant.priority == b->u.grant.priority);
        break;
    case HOMA_PKT_RESEND:
        CHECK(a->u.resend.offset == b->u.resend.offset);
        CHECK(a->u.resend.length == b->u.resend.length);
        CHECK(a->u.resend.priority == b->u.resend.priority);
        break;
    case HOMA_PKT_CUTOFFS:
        for (int i = 0; i < HOMA_NUM_PRIORITIES; i++)
            CHECK(a->u.cutoffs.cutoffs[i] == b->u.cutoffs.cutoffs[i]);
        CHECK(a->u.cutoffs.version == b->u.cutoffs.version);
        break;
    case HOMA_PKT_ACK:
        CHECK(a->u.ack.num_acks == b->u.ack.num_acks);
        for (int i = 0; i < HOMA_MAX_ACKS_PER_PKT; i++) {
            CHECK(a->u.ack.acks[i].client_id == b->u.ack.acks[i].client_id);
            CHECK(a->u.ack.acks[i].server_port == b->u.ack.acks[i].server_port);
        }
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct homa_wire_pkt pkt;
    int rc = homa_wire_decode(data, size, &pkt);

    /* Header-only decoding (direct receive peeks at the first bytes) agrees
     * with decoding the whole packet, reading nothing past avail. */
    for (size_t avail = 0; avail <= HOMA_MAX_HDR_LEN + 1; avail += avail < 60 ? 1 : 21) {
        size_t a = avail < size ? avail : size;
        uint8_t *copy = malloc(a ? a : 1);
        CHECK(copy != NULL);
        if (a) memcpy(copy, data, a);
        struct homa_wire_pkt h;
        int hrc = homa_wire_decode_hdr(copy, a, size, &h);
        size_t need = size >= 12 ? homa_wire_hdr_len(data[11]) : 0;
        if (a >= HOMA_COMMON_HDR_LEN && need > 0 && a >= need) {
            CHECK(hrc == rc);
            if (rc == HOMA_WIRE_OK) {
                if (pkt.type == HOMA_PKT_DATA) {
                    CHECK(h.u.data.payload == NULL);
                    h.u.data.payload = pkt.u.data.payload;
                }
                check_same(&pkt, &h);
            }
        } else {
            CHECK(hrc == HOMA_WIRE_SHORT || hrc == HOMA_WIRE_BAD_TYPE ||
                  hrc == HOMA_WIRE_TRUNCATED);
        }
        free(copy);
    }

    /* The reason given must be the first rule the input breaks. */
    CHECK(rc >= HOMA_WIRE_OK && rc <= HOMA_WIRE_BAD_ACKS);
    CHECK((size < HOMA_COMMON_HDR_LEN) == (rc == HOMA_WIRE_SHORT));
    if (rc == HOMA_WIRE_SHORT) return 0;
    size_t hdr_len = homa_wire_hdr_len(data[11]);
    CHECK(pkt.type == data[11]);
    CHECK((hdr_len == 0) == (rc == HOMA_WIRE_BAD_TYPE));
    if (rc == HOMA_WIRE_BAD_TYPE) return 0;
    CHECK((size < hdr_len) == (rc == HOMA_WIRE_TRUNCATED));
    if (rc == HOMA_WIRE_TRUNCATED) return 0;
    CHECK((pkt.sender_id == 0) == (rc == HOMA_WIRE_ZERO_ID));
    if (rc != HOMA_WIRE_OK) return 0;

    /* Accepted: every structural limit holds. */
    CHECK(strcmp(homa_wire_type_name(pkt.type), "UNKNOWN") != 0);
    switch (pkt.type) {
    case HOMA_PKT_DATA:
        CHECK(pkt.u.data.payload == data + HOMA_DATA_HDR_LEN);
        CHECK(pkt.u.data.payload_len == size - HOMA_DATA_HDR_LEN);
        CHECK((uint64_t)pkt.u.data.offset + pkt.u.data.payload_len <= pkt.u.data.message_length);
        break;
    case HOMA_PKT_GRANT:
        CHECK(pkt.u.grant.priority < HOMA_NUM_PRIORITIES);
        break;
    case HOMA_PKT_RESEND:
        CHECK(pkt.u.resend.priority < HOMA_NUM_PRIORITIES);
        break;
    case HOMA_PKT_ACK:
        CHECK(pkt.u.ack.num_acks <= HOMA_MAX_ACKS_PER_PKT);
        break;
    default:
        break;
    }

    /* Re-encode: every byte the decoder reads must come back unchanged, every
     * byte it ignores must come back canonical. */
    uint8_t enc[HOMA_MAX_HDR_LEN];
    size_t n = homa_wire_encode(&pkt, enc);
    CHECK(n == hdr_len);
    /* A DATA segment offset of 0xFFFFFFFF (the kernel's "offset is in
     * sequence") comes back as the offset it stood for: the encoder always
     * writes the real one, in both places. */
    int in_seq = pkt.type == HOMA_PKT_DATA && data[52] == 0xFF && data[53] == 0xFF &&
                 data[54] == 0xFF && data[55] == 0xFF;
    if (in_seq)
        CHECK(pkt.u.data.offset == ((uint32_t)data[4] << 24 | (uint32_t)data[5] << 16 |
                                    (uint32_t)data[6] << 8 | data[7]));
    for (size_t i = 0; i < n; i++) {
        if (in_seq && i >= 52 && i < 56)
            CHECK(enc[i] == data[4 + (i - 52)]);
        else if (ignored_byte(pkt.type, i))
            CHECK(enc[i] == canonical_byte(enc, pkt.type, i));
        else
            CHECK(enc[i] == data[i]);
    }

    /* Re-decode the re-encoded header plus the original payload (control
     * packets drop their trailing bytes): identical fields. */
    size_t payload_len = pkt.type == HOMA_PKT_DATA ? pkt.u.data.payload_len : 0;
    uint8_t *again = malloc(n + payload_len);
    CHECK(again != NULL);
    memcpy(again, enc, n);
    if (payload_len > 0) memcpy(again + n, pkt.u.data.payload, payload_len);
    struct homa_wire_pkt pkt2;
    CHECK(homa_wire_decode(again, n + payload_len, &pkt2) == HOMA_WIRE_OK);
    check_same(&pkt, &pkt2);
    if (pkt.type == HOMA_PKT_DATA) CHECK(pkt2.u.data.payload == again + HOMA_DATA_HDR_LEN);

    /* Encoding is a fixed point after one round. */
    uint8_t enc2[HOMA_MAX_HDR_LEN];
    CHECK(homa_wire_encode(&pkt2, enc2) == n);
    CHECK(memcmp(enc, enc2, n) == 0);
    free(again);
    return 0;
}
