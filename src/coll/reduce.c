/* Reduction kernels and float16/bfloat16 conversion for the collectives.
 *
 * Loads and stores go through memcpy: received payloads sit at any offset
 * of a message buffer, and memcpy of a scalar compiles to a plain move.
 * Each kernel exists in three forms (dst separate, dst == a, dst == b) so
 * the compiler may treat the pointers as restrict-qualified and vectorise
 * the common in-place cases too. */
#include <string.h>

#include "coll/coll_internal.h"

size_t homa_dtype_size(homa_dtype dtype)
{
    switch (dtype) {
    case HOMA_FLOAT32:
    case HOMA_INT32:
        return 4;
    case HOMA_FLOAT16:
    case HOMA_BFLOAT16:
        return 2;
    case HOMA_INT64:
        return 8;
    }
    return 0;
}

int homa_coll_dtype_valid(int dtype)
{
    return dtype >= HOMA_FLOAT32 && dtype <= HOMA_INT64;
}

int homa_coll_op_valid(int op)
{
    return op >= HOMA_SUM && op <= HOMA_MIN;
}

/* ---- conversions ---- */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float homa_coll_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1f) return bits_f32(sign | 0x7f800000u | (m << 13)); /* inf, NaN */
    if (e == 0) {
        if (m == 0) return bits_f32(sign);
        /* Subnormal: normalise; m * 2^-24 is exact in float32. */
        e = 113;
        while ((m & 0x400u) == 0) {
            m <<= 1;
            e--;
        }
        return bits_f32(sign | (e << 23) | ((m & 0x3ffu) << 13));
    }
    return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t homa_coll_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) {
        if (x == 0x7f800000u) return sign | 0x7c00u;
        return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu)); /* quiet NaN */
    }
    /* 65520 is halfway between 65504 (largest half) and 65536: ties go to
     * the even neighbour, which is infinity. */
    if (x >= 0x477ff000u) return sign | 0x7c00u;
    if (x < 0x38800000u) { /* below 2^-14: subnormal half or zero */
        uint32_t e = x >> 23;
        if (e < 102) return sign; /* below 2^-25: rounds to zero */
        uint32_t m = (x & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q); /* q == 0x400 is the smallest normal */
    }
    /* Normal: round the 13 dropped bits to nearest even; a carry into the
     * exponent is the correct result. */
    x += 0xfffu + ((x >> 13) & 1u);
    return (uint16_t)(sign | ((x - 0x38000000u) >> 13));
}

float homa_coll_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t homa_coll_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* ---- kernels ---- */

#define DEF_LOADSTORE(NAME, T)                                                                     \
    static inline T ld_##NAME(const uint8_t *p, size_t i)                                          \
    {                                                                                              \
        T v;                                                                                       \
        memcpy(&v, p + i * sizeof(T), sizeof(T));                                                  \
        return v;                                                                                  \
    }                                                                                              \
    static inline void st_##NAME(uint8_t *p, size_t i, T v)                                        \
    {                                                                                              \
        memcpy(p + i * sizeof(T), &v, sizeof(T));                                                  \
    }
DEF_LOADSTORE(f32, float)
DEF_LOADSTORE(u16, uint16_t)
DEF_LOADSTORE(i32, int32_t)
DEF_LOADSTORE(i64, int64_t)

/* Element access per dtype: LOAD gives the compute type, STORE rounds. */
#define LOAD_f32(p, i) ld_f32(p, i)
#define STORE_f32(p, i, v) st_f32(p, i, v)
#define LOAD_f16(p, i) homa_coll_f16_to_f32(ld_u16(p, i))
#define STORE_f16(p, i, v) st_u16(p, i, homa_coll_f32_to_f16(v))
#define LOAD_bf16(p, i) homa_coll_bf16_to_f32(ld_u16(p, i))
#define STORE_bf16(p, i, v) st_u16(p, i, homa_coll_f32_to_bf16(v))
#define LOAD_i32(p, i) ld_i32(p, i)
#define STORE_i32(p, i, v) st_i32(p, i, v)
#define LOAD_i64(p, i) ld_i64(p, i)
#define STORE_i64(p, i, v) st_i64(p, i, v)

/* Combiners.  Integer sums wrap (done in unsigned arithmetic: no UB).
 * Float MAX/MIN: a NaN on either side wins. */
static inline float fsum(float a, float b)
{
    return a + b;
}
static inline float fmaxp(float a, float b)
{
    return (a > b || a != a) ? a : b;
}
static inline float fminp(float a, float b)
{
    return (a < b || a != a) ? a : b;
}
static inline int32_t i32sum(int32_t a, int32_t b)
{
    return (int32_t)((uint32_t)a + (uint32_t)b);
}
static inline int64_t i64sum(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}
static inline int32_t i32max(int32_t a, int32_t b)
{
    return a > b ? a : b;
}
static inline int32_t i32min(int32_t a, int32_t b)
{
    return a < b ? a : b;
}
static inline int64_t i64max(int64_t a, int64_t b)
{
    return a > b ? a : b;
}
static inline int64_t i64min(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

#define DEF_KERNEL(NAME, T, TY, COMB)                                                              \
    static void NAME##_3(uint8_t *restrict d, const uint8_t *restrict a,                           \
                         const uint8_t *restrict b, size_t n)                                      \
    {                                                                                              \
        for (size_t i = 0; i < n; i++) {                                                           \
            T x = LOAD_##TY(a, i), y = LOAD_##TY(b, i);                                            \
            STORE_##TY(d, i, COMB(x, y));                                                          \
        }                                                                                          \
    }                                                                                              \
    static void NAME##_da(uint8_t *restrict d, const uint8_t *restrict b, size_t n)                \
    {                                                                                              \
        for (size_t i = 0; i < n; i++) {                                                           \
            T x = LOAD_##TY(d, i), y = LOAD_##TY(b, i);                                            \
            STORE_##TY(d, i, COMB(x, y));                                                          \
        }                                                                                          \
    }                                                                                              \
    static void NAME##_db(uint8_t *restrict d, const uint8_t *restrict a, size_t n)                \
    {                                                                                              \
        for (size_t i = 0; i < n; i++) {                                                           \
            T x = LOAD_##TY(a, i), y = LOAD_##TY(d, i);                                            \
            STORE_##TY(d, i, COMB(x, y));                                                          \
        }                                                                                          \
    }

DEF_KERNEL(sum_f32, float, f32, fsum)
DEF_KERNEL(max_f32, float, f32, fmaxp)
DEF_KERNEL(min_f32, float, f32, fminp)
DEF_KERNEL(sum_f16, float, f16, fsum)
DEF_KERNEL(max_f16, float, f16, fmaxp)
DEF_KERNEL(min_f16, float, f16, fminp)
DEF_KERNEL(sum_bf16, float, bf16, fsum)
DEF_KERNEL(max_bf16, float, bf16, fmaxp)
DEF_KERNEL(min_bf16, float, bf16, fminp)
DEF_KERNEL(sum_i32, int32_t, i32, i32sum)
DEF_KERNEL(max_i32, int32_t, i32, i32max)
DEF_KERNEL(min_i32, int32_t, i32, i32min)
DEF_KERNEL(sum_i64, int64_t, i64, i64sum)
DEF_KERNEL(max_i64, int64_t, i64, i64max)
DEF_KERNEL(min_i64, int64_t, i64, i64min)

struct kernel {
    void (*k3)(uint8_t *restrict, const uint8_t *restrict, const uint8_t *restrict, size_t);
    void (*kda)(uint8_t *restrict, const uint8_t *restrict, size_t);
    void (*kdb)(uint8_t *restrict, const uint8_t *restrict, size_t);
};

#define K(NAME)                                                                                    \
    {                                                                                              \
        NAME##_3, NAME##_da, NAME##_db                                                             \
    }
/* [dtype][op]; AVG uses the SUM kernel. */
static const struct kernel kernels[5][4] = {
    [HOMA_FLOAT32] = {K(sum_f32), K(sum_f32), K(max_f32), K(min_f32)},
    [HOMA_FLOAT16] = {K(sum_f16), K(sum_f16), K(max_f16), K(min_f16)},
    [HOMA_BFLOAT16] = {K(sum_bf16), K(sum_bf16), K(max_bf16), K(min_bf16)},
    [HOMA_INT32] = {K(sum_i32), K(sum_i32), K(max_i32), K(min_i32)},
    [HOMA_INT64] = {K(sum_i64), K(sum_i64), K(max_i64), K(min_i64)},
};
#undef K

void homa_coll_reduce(void *dst, const void *a, const void *b, size_t n, homa_dtype dtype,
                      homa_redop op)
{
    if (n == 0 || !homa_coll_dtype_valid((int)dtype) || !homa_coll_op_valid((int)op)) return;
    const struct kernel *k = &kernels[dtype][op];
    if (dst == a && dst == b) {
        /* x op x: SUM doubles, MAX/MIN is the identity.  Not used by the
         * algorithms; handled by a copy of a. */
        size_t bytes = n * homa_dtype_size(dtype);
        uint8_t tmp[256];
        for (size_t off = 0; off < bytes; off += sizeof(tmp)) {
            size_t len = bytes - off < sizeof(tmp) ? bytes - off : sizeof(tmp);
            memcpy(tmp, (const uint8_t *)a + off, len);
            k->kda((uint8_t *)dst + off, tmp, len / homa_dtype_size(dtype));
        }
    } else if (dst == a) {
        k->kda(dst, b, n);
    } else if (dst == b) {
        k->kdb(dst, a, n);
    } else {
        k->k3(dst, a, b, n);
    }
}

void homa_coll_avg_finish(void *dst, size_t n, homa_dtype dtype, uint32_t divisor)
{
    if (divisor <= 1) return;
    uint8_t *d = dst;
    float fd = (float)divisor;
    switch (dtype) {
    case HOMA_FLOAT32:
        for (size_t i = 0; i < n; i++)
            STORE_f32(d, i, LOAD_f32(d, i) / fd);
        break;
    case HOMA_FLOAT16:
        for (size_t i = 0; i < n; i++)
            STORE_f16(d, i, LOAD_f16(d, i) / fd);
        break;
    case HOMA_BFLOAT16:
        for (size_t i = 0; i < n; i++)
            STORE_bf16(d, i, LOAD_bf16(d, i) / fd);
        break;
    case HOMA_INT32:
        for (size_t i = 0; i < n; i++)
            STORE_i32(d, i, (int32_t)(LOAD_i32(d, i) / (int32_t)divisor));
        break;
    case HOMA_INT64:
        for (size_t i = 0; i < n; i++)
            STORE_i64(d, i, LOAD_i64(d, i) / (int64_t)divisor);
        break;
    }
}
