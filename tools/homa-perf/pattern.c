/* homa-perf: payload patterns for --verify (see pattern.h). */
#include "pattern.h"

#include <string.h>

#define PATTERN_K 0x9e3779b97f4a7c15ull

static inline uint64_t word(uint64_t base, uint64_t k)
{
    uint64_t x = (base ^ k) * PATTERN_K;
    return x ^ (x >> 29);
}

static inline uint64_t to_le(uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(v);
#else
    return v;
#endif
}

void pattern_fill(uint8_t *buf, size_t len, uint64_t seq)
{
    uint64_t base = pattern_mix64(seq);
    size_t words = len / 8;
    for (size_t k = 0; k < words; k++) {
        uint64_t v = to_le(word(base, k));
        memcpy(buf + 8 * k, &v, 8);
    }
    if (len % 8) {
        uint64_t v = to_le(word(base, words));
        memcpy(buf + 8 * words, &v, len % 8);
    }
}

int pattern_check(const uint8_t *buf, size_t len, uint64_t seq)
{
    uint64_t base = pattern_mix64(seq);
    size_t words = len / 8;
    uint64_t diff = 0;
    for (size_t k = 0; k < words; k++) {
        uint64_t v;
        memcpy(&v, buf + 8 * k, 8);
        diff |= v ^ to_le(word(base, k));
    }
    if (len % 8) {
        uint64_t want = to_le(word(base, words)), v = 0;
        memcpy(&v, buf + 8 * words, len % 8);
        memset((uint8_t *)&want + len % 8, 0, 8 - len % 8);
        diff |= v ^ want;
    }
    return diff == 0;
}
