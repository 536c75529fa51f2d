/* Deterministic PRNG for vnet and its users: xoshiro256** (fast, 256-bit
 * state, passes BigCrush), with the state expanded from a 64-bit seed by
 * splitmix64 so that nearby seeds give unrelated streams. */
#include "vnet.h"

#include <math.h>
#include <stdlib.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void vnet_rng_seed(struct vnet_rng *rng, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&x);
}

uint64_t vnet_rng_next(struct vnet_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double vnet_rng_uniform(struct vnet_rng *rng)
{
    return (double)(vnet_rng_next(rng) >> 11) * 0x1.0p-53;
}

uint64_t vnet_rng_below(struct vnet_rng *rng, uint64_t n)
{
    if (n == 0) return 0;
    /* Reject the top partial block of 2^64 so every residue is equally
     * likely; (-n) % n == 2^64 mod n. */
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t r = vnet_rng_next(rng);
        if (r >= threshold) return r % n;
    }
}

double vnet_rng_exp(struct vnet_rng *rng, double mean)
{
    /* 1 - u lies in (0, 1], so the log is finite. */
    return -mean * log(1.0 - vnet_rng_uniform(rng));
}

uint64_t vnet_seed_from_env(uint64_t dflt)
{
    const char *s = getenv("VNET_SEED");
    if (!s || !*s) return dflt;
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    return *end ? dflt : (uint64_t)v;
}
