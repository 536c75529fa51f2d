/* homa-perf: payload patterns for --verify (see pattern.h). */
#include "pattern.h"

#include <string.h>

#define PATTERN_K 0x9e3779b97f4a7c15ull

static inline uint64_t word(uint64_t seq, uint64_t k)
{
    return pattern_mix64(seq * PATTERN_K + k);
}

static inline void store_le(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void pattern_fill(uint8_t *buf, size_t len, uint64_t seq)
{
    size_t words = len / 8;
    uint8_t tmp[8];
    for (size_t k = 0; k < words; k++) {
        store_le(tmp, word(seq, k), 8);
        memcpy(buf + 8 * k, tmp, 8);
    }
    if (len % 8)
        store_le(buf + 8 * words, word(seq, words), len % 8);
}

int pattern_check(const uint8_t *buf, size_t len, uint64_t seq)
{
    size_t words = len / 8;
    uint8_t tmp[8];
    for (size_t k = 0; k < words; k++) {
        store_le(tmp, word(seq, k), 8);
        if (memcmp(buf + 8 * k, tmp, 8) != 0)
            return 0;
    }
    if (len % 8) {
        store_le(tmp, word(seq, words), len % 8);
        if (memcmp(buf + 8 * words, tmp, len % 8) != 0)
            return 0;
    }
    return 1;
}
