/* Writes one valid packet of every type (plus a header-only DATA) into the
 * directory given as argv[1], as seeds for fuzz_wire.  The packets come from
 * the encoder, so a seed is always decodable. */
#include <stdio.h>
#include <string.h>

#include "core/wire.h"

static int write_seed(const char *dir, const char *name, const uint8_t *buf, size_t len)
{
    char path[4096];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof(path)) {
        fprintf(stderr, "gen_seeds: path too long\n");
        return -1;
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    size_t written = fwrite(buf, 1, len, f);
    if (fclose(f) != 0 || written != len) {
        perror(path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    int failed = 0;

    for (int t = HOMA_PKT_TYPE_MIN; t <= HOMA_PKT_TYPE_MAX; t++) {
        struct homa_wire_pkt p;
        uint8_t buf[HOMA_MAX_HDR_LEN + 64];
        memset(&p, 0, sizeof(p));
        p.type = (uint8_t)t;
        p.sport = 40000;
        p.dport = 80;
        p.sender_id = 1000 + 2 * (uint64_t)t;
        size_t extra = 0;
        switch (t) {
        case HOMA_PKT_DATA:
            p.u.data.message_length = 100000;
            p.u.data.incoming = 40000;
            p.u.data.ack.client_id = 998;
            p.u.data.ack.server_port = 80;
            p.u.data.cutoff_version = 3;
            p.u.data.offset = 1400;
            extra = 32;
            break;
        case HOMA_PKT_GRANT:
            p.u.grant.offset = 50000;
            p.u.grant.priority = 3;
            break;
        case HOMA_PKT_RESEND:
            p.u.resend.offset = 20000;
            p.u.resend.length = 1400;
            p.u.resend.priority = 7;
            break;
        case HOMA_PKT_CUTOFFS: {
            static const uint32_t cutoffs[HOMA_NUM_PRIORITIES] = {
                0x7FFFFFFF, 0, 0, 0, 1000000, 15000, 2800, 200,
            };
            memcpy(p.u.cutoffs.cutoffs, cutoffs, sizeof(cutoffs));
            p.u.cutoffs.version = 3;
            break;
        }
        case HOMA_PKT_ACK:
            p.u.ack.num_acks = 2;
            p.u.ack.acks[0].client_id = 100;
            p.u.ack.acks[0].server_port = 80;
            p.u.ack.acks[1].client_id = 102;
            p.u.ack.acks[1].server_port = 81;
            break;
        default:
            break;
        }
        size_t n = homa_wire_encode(&p, buf);
        for (size_t i = 0; i < extra; i++)
            buf[n + i] = (uint8_t)('a' + i % 26);

        char name[64];
        snprintf(name, sizeof(name), "%s.bin", homa_wire_type_name((uint8_t)t));
        for (char *c = name; *c; c++)
            if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
        if (write_seed(dir, name, buf, n + extra) != 0) failed = 1;
        if (t == HOMA_PKT_DATA && write_seed(dir, "data_hdr_only.bin", buf, n) != 0) failed = 1;
        if (t == HOMA_PKT_DATA) {
            /* As the Linux module sends it: segment offset -1, the offset
             * in sequence, TCP look-alike flags and urgent pointer. */
            buf[52] = buf[53] = buf[54] = buf[55] = 0xFF;
            buf[13] = 0x06;
            buf[18] = 0xB9;
            buf[19] = 0x7D;
            if (write_seed(dir, "data_kernel_seq_offset.bin", buf, n + extra) != 0) failed = 1;
        }
        if (t == HOMA_PKT_ACK) {
            /* The kernel's answer to NEED_ACK: no records. */
            memset(buf + 28, 0, n - 28);
            buf[13] = 0x06;
            buf[18] = 0xB9;
            buf[19] = 0x7D;
            if (write_seed(dir, "ack_no_records.bin", buf, n) != 0) failed = 1;
        }
    }
    return failed;
}
