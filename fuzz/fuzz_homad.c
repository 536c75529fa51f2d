/* libFuzzer target for homad's view of a process's shared memory
 * (src/rt/homad_proto.c): everything the process can write is forged.
 *
 * Input: 4 bytes of ring geometry choices, then rounds of
 *   u32 forged cmd_head, u32 forged cq_tail, u8 count, count x 64-byte
 *   command entries written into the ring,
 * after which the daemon's side runs as homad runs it: read the head once,
 * copy each entry out, validate, apply RX-slot ownership, push completions
 * against the forged tail.  Invariants (abort() on failure): an accepted
 * head or tail never exceeds the ring; an accepted SEND/REPLY names a TX
 * slot inside the region with a length that fits its slot; RELEASE only
 * frees slots the daemon handed out; nothing is read or written outside the
 * region (ASan).  The last bytes also go through the client's header check. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt/homad_proto.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_homad: invariant failed at line %d: %s\n", __LINE__, #cond);     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    uint32_t ncmd = 1u << (data[0] % 5);  /* 1..16 */
    uint32_t ncq = 1u << (data[1] % 5);   /* 1..16 */
    uint32_t ntx = 1u + data[2] % 4;      /* 1..4 */
    uint32_t nrx = 1u + data[3] % 70;     /* 1..70: more than one bitmap word */
    data += 4;
    size -= 4;
    struct homad_hdr h;
    CHECK(homad_layout(&h, ncmd, ncq, ntx, nrx, 4096) == 0);
    h.cfg.max_message_length = 3000;
    CHECK(homad_hdr_check(&h, h.total) == 0);
    uint8_t *mem = calloc(1, h.total);
    if (mem == NULL) return 0;
    memcpy(mem, &h, sizeof(h));
    struct homad_view v;
    homad_view_init(&v, mem, &h);
    struct homad_rxmap rx;
    homad_rx_init(&rx, nrx);
    uint32_t tail = 0, cq_head = 0, cq_seen = 0;
    int owned_ports[4] = {5, 6, 7, 8};

    while (size >= 9) {
        __atomic_store_n(&v.ctrl->cmd_head, rd32(data), __ATOMIC_RELAXED);
        __atomic_store_n(&v.ctrl->cq_tail, rd32(data + 4), __ATOMIC_RELAXED);
        size_t count = data[8];
        data += 9;
        size -= 9;
        for (size_t i = 0; i < count && size >= sizeof(struct homad_cmd); i++) {
            memcpy(&v.cmd[(tail + i) & (ncmd - 1)], data, sizeof(struct homad_cmd));
            data += sizeof(struct homad_cmd);
            size -= sizeof(struct homad_cmd);
        }
        int n = homad_cmd_avail(&v, tail);
        CHECK(n >= -1 && n <= (int)ncmd);
        if (n < 0) break; /* homad disconnects the process */
        int space = homad_cq_space(&v, cq_head, &cq_seen);
        CHECK(space >= -1 && space <= (int)ncq);
        if (space < 0) break;
        for (int i = 0; i < n; i++) {
            struct homad_cmd c;
            homad_cmd_copy(&v, tail++, &c);
            int rc = homad_cmd_check(&v, &c);
            CHECK(rc == 0 || rc == HOMA_ERR_INVAL || rc == HOMA_ERR_MSGSIZE);
            if (rc == 0) {
                CHECK(c.op > 0 && c.op < HOMAD_OP__COUNT);
                if (c.op == HOMAD_OP_SEND || c.op == HOMAD_OP_REPLY) {
                    CHECK(c.slot < ntx && c.len <= v.slot_size && c.len <= 3000);
                    /* What homad hands to the engine: inside the region. */
                    const uint8_t *p = v.tx + (uint64_t)c.slot * v.slot_size;
                    CHECK(p >= mem && p + c.len <= mem + h.total);
                    volatile uint8_t sum = 0;
                    for (uint32_t k = 0; k < c.len; k += 512)
                        sum ^= p[k];
                    (void)sum;
                }
                if (c.op == HOMAD_OP_RELEASE) {
                    uint32_t held = rx.held;
                    int r = homad_rx_release(&rx, c.slot);
                    CHECK(r == 0 ? rx.held == held - 1 : rx.held == held);
                    continue;
                }
                int owned = 0;
                for (int k = 0; k < 4; k++)
                    owned |= owned_ports[k] == c.port;
                (void)owned; /* homad answers HOMA_ERR_NO_PORT for the others */
            }
            /* A message arrives now and then: hand out an RX slot. */
            if ((c.tag & 1) && rx.held < rx.n) {
                int s = homad_rx_take(&rx);
                CHECK(s >= 0 && (uint32_t)s < nrx);
            }
            if (space > 0) {
                struct homad_cqe e = {.kind = HOMAD_CQ_DONE, .tag = c.tag, .result = rc};
                homad_cq_push(&v, cq_head++, &e);
                space--;
            }
        }
        homad_cmd_consumed(&v, tail);
        CHECK(rx.held <= rx.n);
    }
    /* Whatever is left: a forged header, as a client would check it. */
    if (size >= sizeof(struct homad_hdr)) {
        struct homad_hdr f;
        memcpy(&f, data, sizeof(f));
        if (homad_hdr_check(&f, (uint64_t)1 << 40) == 0) {
            CHECK(f.off_rx + (uint64_t)f.nrx * f.slot_size <= f.total);
            CHECK(f.ncmd <= HOMAD_MAX_RING && f.ncq <= HOMAD_MAX_RING);
        }
    }
    free(mem);
    return 0;
}
