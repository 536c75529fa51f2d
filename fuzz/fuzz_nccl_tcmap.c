/* libFuzzer target for NCCL_HOMA_TC_PRIO (nccl/tcmap.c), an environment
 * string read by the NCCL plugin.
 *
 * Input: one byte choosing the number of priority levels (1..8), then the
 * string.  An accepted map must hold what the plugin relies on (each check
 * abort()s so libFuzzer records the input); a refused one must say why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tcmap.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_nccl_tcmap: invariant failed at line %d: %s\n", __LINE__,        \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int levels = 1 + data[0] % 8;
    char *s = malloc(size);
    if (s == NULL) return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    hn_tcmap m;
    char err[128];
    err[0] = '\0';
    if (hn_tcmap_parse(s, levels, &m, err, sizeof(err)) != 0) {
        CHECK(err[0] != '\0');
        CHECK(memchr(err, '\0', sizeof(err)) != NULL);
        free(s);
        return 0;
    }
    CHECK(m.n >= 1 && m.n <= HN_TC_MAX);
    int any = 0;
    for (int i = 0; i < m.n; i++) {
        CHECK(m.tc[i] >= 0 || m.tc[i] == HN_TC_ANY);
        CHECK(m.lo[i] <= m.hi[i] && m.hi[i] < levels);
        any |= m.tc[i] == HN_TC_ANY;
        for (int j = 0; j < i; j++)
            CHECK(m.tc[i] != m.tc[j]);
        if (m.tc[i] >= 0) {
            int lo = -1, hi = -1;
            CHECK(hn_tcmap_lookup(&m, m.tc[i], &lo, &hi) == 1);
            CHECK(lo == m.lo[i] && hi == m.hi[i]);
        }
    }
    /* A class no entry names gets the "*" range, or none. */
    int lo = -1, hi = -1;
    CHECK(hn_tcmap_lookup(&m, -1, &lo, &hi) == any);
    if (any) CHECK(lo >= 0 && lo <= hi && hi < levels);
    free(s);
    return 0;
}
