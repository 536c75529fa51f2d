/* NCCL_HOMA_TC_PRIO: which Homa priority levels the messages of a comm may
 * use, chosen by the comm's NCCL traffic class (v10+ config).  The parser
 * is pure (no logging, no globals) so that it can be fuzzed
 * (fuzz/fuzz_nccl_tcmap.c): the string comes from the environment. */
#ifndef HOMA_NCCL_TCMAP_H
#define HOMA_NCCL_TCMAP_H

#include <stddef.h>
#include <stdint.h>

#define HN_TC_MAX 16
#define HN_TC_ANY (-2) /* "*": every comm no other entry names, classless too */

typedef struct hn_tcmap {
    int n;
    int tc[HN_TC_MAX]; /* a traffic class >= 0, or HN_TC_ANY */
    uint8_t lo[HN_TC_MAX], hi[HN_TC_MAX];
} hn_tcmap;

/* Parses "TC:LO[-HI][,TC:LO[-HI]...]" (TC a non-negative integer or "*",
 * 0 <= LO <= HI < levels).  Returns 0, or -1 with a reason in err. */
int hn_tcmap_parse(const char *s, int levels, hn_tcmap *out, char *err, size_t errlen);

/* The range for traffic class tc (NCCL's -1 when the comm has none):
 * 1 with *lo and *hi set, 0 when the map leaves it to Homa. */
int hn_tcmap_lookup(const hn_tcmap *m, int tc, int *lo, int *hi);

#endif
