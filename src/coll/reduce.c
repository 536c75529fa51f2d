/* Reduction kernels and float16/bfloat16 conversion for the collectives.
 *
 * Loads and stores go through memcpy: received payloads sit at any offset
 * of a message buffer, and memcpy of a scalar compiles to a plain move.
 * Each kernel exists in three forms (dst separate, dst == a, dst == b) so
 * the compiler may treat the pointers as restrict-qualified and vectorise
 * the common in-place cases too. */
#include <stdatomic.h>
#include <string.h>

#include "coll/coll_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define COLL_F16C 1
#endif

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

/* The conversions avoid branches: every case is computed and the answer
 * picked with masks, so the kernels that inline them vectorise (gcc -O2
 * gives up on loops with control flow). */

static inline uint32_t mask_if(int cond)
{
    return 0u - (uint32_t)cond;
}

static inline uint32_t pick(uint32_t mask, uint32_t yes, uint32_t no)
{
    return (yes & mask) | (no & ~mask);
}

static inline float f16_to_f32(uint16_t h)
{
    uint32_t em = (uint32_t)(h & 0x7fffu) << 13; /* exponent and mantissa, float position */
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = em & 0x0f800000u;
    uint32_t normal = em + 0x38000000u; /* rebias 15 -> 127 */
    /* Subnormal m * 2^-24: the float 2^-14 * (1 + m/1024) minus 2^-14, both
     * exact, and so is the difference. */
    uint32_t sub = f32_bits(bits_f32(em + 0x38800000u) - bits_f32(0x38800000u));
    uint32_t special = em | 0x7f800000u; /* inf, NaN (payload kept) */
    uint32_t r = pick(mask_if(e == 0), sub, normal);
    r = pick(mask_if(e == 0x0f800000u), special, r);
    return bits_f32(r | sign);
}

static inline uint16_t f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    /* Normal result: round the 13 dropped bits to nearest even, rebias; a
     * carry into the exponent is the right answer. */
    uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13;
    /* Below 2^-14 the result is m * 2^-24: adding 0.5 makes the float unit
     * in the last place exactly 2^-24, so the FPU's round-to-nearest-even
     * addition does the rounding. */
    uint32_t sub = f32_bits(bits_f32(a) + 0.5f) - 0x3f000000u;
    uint32_t r = pick(mask_if(a < 0x38800000u), sub, normal);
    /* 65520 and above (inf included) round to infinity: 65520 is halfway
     * between 65504, the largest half, and 65536, and ties go to even. */
    r = pick(mask_if(a >= 0x477ff000u), 0x7c00u, r);
    r = pick(mask_if(a > 0x7f800000u), 0x7e00u | ((a >> 13) & 0x3ffu), r); /* quiet NaN */
    return (uint16_t)(sign | r);
}

static inline float bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    r = pick(mask_if((x & 0x7fffffffu) > 0x7f800000u), (x >> 16) | 0x40u, r); /* quiet NaN */
    return (uint16_t)r;
}

float homa_coll_f16_to_f32(uint16_t h)
{
    return f16_to_f32(h);
}

uint16_t homa_coll_f32_to_f16(float f)
{
    return f32_to_f16(f);
}

float homa_coll_bf16_to_f32(uint16_t h)
{
    return bf16_to_f32(h);
}

uint16_t homa_coll_f32_to_bf16(float f)
{
    return f32_to_bf16(f);
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
#define LOAD_f16(p, i) f16_to_f32(ld_u16(p, i))
#define STORE_f16(p, i, v) st_u16(p, i, f32_to_f16(v))
#define LOAD_bf16(p, i) bf16_to_f32(ld_u16(p, i))
#define STORE_bf16(p, i, v) st_u16(p, i, f32_to_bf16(v))
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
    return ((a > b) | (a != a)) ? a : b; /* no short-circuit: no branch */
}
static inline float fminp(float a, float b)
{
    return ((a < b) | (a != a)) ? a : b;
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

/* The loops run in blocks of a fixed 16 elements: with a known trip count
 * and restrict pointers, gcc vectorises them even at -O2 (its cheap cost
 * model refuses loops that would need a runtime trip-count epilogue). */
#define KBLOCK 16
#define KLOOP(BODY)                                                                                \
    size_t i = 0;                                                                                  \
    for (; i + KBLOCK <= n; i += KBLOCK)                                                           \
        for (size_t j = 0; j < KBLOCK; j++) {                                                      \
            size_t k = i + j;                                                                      \
            BODY;                                                                                  \
        }                                                                                          \
    for (; i < n; i++) {                                                                           \
        size_t k = i;                                                                              \
        BODY;                                                                                      \
    }

#define DEF_KERNEL(NAME, T, TY, COMB)                                                              \
    static void NAME##_3(uint8_t *restrict d, const uint8_t *restrict a,                           \
                         const uint8_t *restrict b, size_t n)                                      \
    {                                                                                              \
        KLOOP(STORE_##TY(d, k, COMB(LOAD_##TY(a, k), LOAD_##TY(b, k))))                            \
    }                                                                                              \
    static void NAME##_da(uint8_t *restrict d, const uint8_t *restrict b, size_t n)                \
    {                                                                                              \
        KLOOP(STORE_##TY(d, k, COMB(LOAD_##TY(d, k), LOAD_##TY(b, k))))                            \
    }                                                                                              \
    static void NAME##_db(uint8_t *restrict d, const uint8_t *restrict a, size_t n)                \
    {                                                                                              \
        KLOOP(STORE_##TY(d, k, COMB(LOAD_##TY(a, k), LOAD_##TY(d, k))))                            \
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

/* ---- float16 with the x86 F16C instructions ----
 *
 * Converting halves one by one in portable code costs several times more
 * than the float32 arithmetic; F16C converts 8 at a time with the same
 * rounding (nearest even) and the same NaN rule (quiet, top payload bits
 * kept).  Blocks of halves are widened into float arrays on the stack,
 * combined with the float32 kernels and narrowed back; reading a block of
 * both inputs before writing it makes dst == a or dst == b safe. */

static atomic_int use_f16c = -1; /* -1: not probed yet */

#ifdef COLL_F16C
static int cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    /* OSXSAVE, AVX, F16C; and the OS saves the YMM state (XCR0 bits 1-2). */
    if ((c & (7u << 27)) != (7u << 27)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & 6u) == 6u;
}

__attribute__((target("avx,f16c"))) static void f16c_widen(float *out, const uint8_t *in, size_t m)
{
    size_t i = 0;
    for (; i + 8 <= m; i += 8)
        _mm256_storeu_ps(
            out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(in + 2 * i))));
    for (; i < m; i++)
        out[i] = f16_to_f32(ld_u16(in, i));
}

__attribute__((target("avx,f16c"))) static void f16c_narrow(uint8_t *out, const float *in, size_t m)
{
    size_t i = 0;
    for (; i + 8 <= m; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(out + 2 * i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < m; i++)
        st_u16(out, i, f32_to_f16(in[i]));
}

static void f16c_reduce(uint8_t *d, const uint8_t *a, const uint8_t *b, size_t n, homa_redop op)
{
    enum { BLOCK = 512 };
    float fa[BLOCK], fb[BLOCK];
    const struct kernel *k = &kernels[HOMA_FLOAT32][op];
    for (size_t off = 0; off < n; off += BLOCK) {
        size_t m = n - off < BLOCK ? n - off : BLOCK;
        f16c_widen(fa, a + 2 * off, m);
        f16c_widen(fb, b + 2 * off, m);
        k->kda((uint8_t *)fa, (const uint8_t *)fb, m);
        f16c_narrow(d + 2 * off, fa, m);
    }
}
#endif

void homa_coll_kernels_portable(int portable)
{
#ifdef COLL_F16C
    atomic_store(&use_f16c, portable ? 0 : cpu_has_f16c());
#else
    (void)portable;
    atomic_store(&use_f16c, 0);
#endif
}

void homa_coll_reduce(void *dst, const void *a, const void *b, size_t n, homa_dtype dtype,
                      homa_redop op)
{
    if (n == 0 || !homa_coll_dtype_valid((int)dtype) || !homa_coll_op_valid((int)op)) return;
#ifdef COLL_F16C
    if (dtype == HOMA_FLOAT16) {
        int f = atomic_load_explicit(&use_f16c, memory_order_relaxed);
        if (f < 0) { /* first use: probe (a race only probes twice) */
            f = cpu_has_f16c();
            atomic_store(&use_f16c, f);
        }
        if (f) {
            f16c_reduce(dst, a, b, n, op);
            return;
        }
    }
#endif
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
