/* Counts the large UDP packets of a libhoma capture (HOMA_PCAP, raw IP
 * records) by Homa priority level (TOS >> 5): every Homa packet of 8 KiB or
 * more is DATA, so this is how tests see which levels messages went at.
 * Header-only: used by the NCCL plugin harness and the homad tests. */
#ifndef HOMA_TESTS_PCAP_LEVELS_H
#define HOMA_TESTS_PCAP_LEVELS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 0 with levels[] filled, -1 if the file is not a raw-IP pcap.  A record
 * cut short (a capture flushed while it was written) ends the count. */
static inline int pcap_levels(const char *path, uint64_t levels[8])
{
    memset(levels, 0, 8 * sizeof(levels[0]));
    FILE *f = fopen(path, "rb");
    if (f == NULL) return -1;
    uint8_t gh[24];
    uint32_t magic = 0, link = 0;
    if (fread(gh, 1, sizeof(gh), f) == sizeof(gh)) {
        memcpy(&magic, gh, 4);
        memcpy(&link, gh + 20, 4);
    }
    if ((magic != 0xa1b23c4du && magic != 0xa1b2c3d4u) || link != 101 /* LINKTYPE_RAW */) {
        fclose(f);
        return -1;
    }
    uint8_t *rec = malloc(1 << 18);
    uint32_t rh[4];
    while (rec != NULL && fread(rh, 1, sizeof(rh), f) == sizeof(rh)) {
        if (rh[2] > (1u << 18) || rh[2] < 40 || fread(rec, 1, rh[2], f) != rh[2]) break;
        uint8_t tos, proto;
        if (rec[0] >> 4 == 4) {
            tos = rec[1];
            proto = rec[9];
        } else if (rec[0] >> 4 == 6) {
            tos = (uint8_t)((rec[0] & 0xf) << 4 | rec[1] >> 4);
            proto = rec[6];
        } else {
            continue;
        }
        if (proto == 17 && rh[3] >= 8192) levels[tos >> 5]++;
    }
    free(rec);
    fclose(f);
    return 0;
}

/* Packets at levels outside lo..hi (lo > hi: all of them). */
static inline uint64_t levels_outside(const uint64_t levels[8], int lo, int hi)
{
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        if (lo > hi || i < lo || i > hi) n += levels[i];
    return n;
}

#endif
