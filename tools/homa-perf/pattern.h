/* homa-perf: payload patterns for --verify.
 *
 * Byte i of the message of RPC `seq` is byte (i % 8) (little-endian) of
 * word(seq, i / 8), with word(seq, k) = f((mix64(seq) ^ k) * K) where mix64 is
 * the splitmix64 finaliser and f(x) = x ^ (x >> 29): every byte depends on
 * both the RPC and its offset, so misplaced, stale or mixed-up data is
 * caught, not only flipped bits.  Cheap enough (a multiply per 8 bytes) to
 * verify 1 MB messages at several GB/s. */
#ifndef HOMA_PERF_PATTERN_H
#define HOMA_PERF_PATTERN_H

#include <stddef.h>
#include <stdint.h>

void pattern_fill(uint8_t *buf, size_t len, uint64_t seq);
/* Returns 1 if buf holds exactly the pattern of seq, else 0. */
int pattern_check(const uint8_t *buf, size_t len, uint64_t seq);

/* splitmix64 step, also used as the random source of the load generator. */
static inline uint64_t pattern_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

#endif
