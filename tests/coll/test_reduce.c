/* Reduction kernels and float16/bfloat16 conversion of the collectives
 * (src/coll/reduce.c), checked against slow reference implementations
 * written independently here: decoding with ldexp, rounding by searching
 * the two neighbouring representable values in double precision. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coll/coll_internal.h"

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* Value of a float16 bit pattern, in double (NaN for NaNs). */
static double ref_f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31) return m ? NAN : sign * INFINITY;
    if (e == 0) return sign * ldexp(m, -24);
    return sign * ldexp(1024 + m, e - 25);
}

/* Of the neighbours lo (value vl) and hi (vh) around x, the nearer one;
 * on a tie the even one. */
static unsigned nearest_even(double x, unsigned lo, double vl, unsigned hi, double vh)
{
    if (x - vl < vh - x) return lo;
    if (x - vl > vh - x) return hi;
    return (lo & 1) ? hi : lo;
}

/* Nearest float16 (ties to even) by binary search over the positive
 * patterns, which are ordered like their values; 0x7c00 (infinity) acts as
 * 65536, the next step after 65504, as IEEE rounding prescribes. */
static uint16_t ref_f32_to_f16(float f)
{
    if (isnan(f)) return 0x7e00;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double x = fabs((double)f);
    if (x >= 65520.0) return sign | 0x7c00;
    unsigned lo = 0, hi = 0x7c00; /* value(lo) <= x < value(hi) */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        double v = mid == 0x7c00 ? 65536.0 : ref_f16_value((uint16_t)mid);
        if (v <= x)
            lo = mid;
        else
            hi = mid;
    }
    double vl = ref_f16_value((uint16_t)lo), vh = hi == 0x7c00 ? 65536.0 : ref_f16_value(hi);
    return (uint16_t)(sign | nearest_even(x, lo, vl, hi, vh));
}

static uint16_t ref_f32_to_bf16(float f)
{
    if (isnan(f)) return 0x7fc0;
    uint32_t u = fbits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    uint32_t lo = a >> 16, hi = lo + 1;
    double x = (double)bitsf(a), vl = (double)bitsf(lo << 16);
    /* hi may be the infinity pattern: its "value" is the next binade step. */
    double vh = hi == 0x7f80 ? ldexp(1.0, 128) : (double)bitsf(hi << 16);
    return (uint16_t)(sign | nearest_even(x, lo, vl, hi, vh));
}

static void check_f16(float f)
{
    uint16_t got = homa_coll_f32_to_f16(f), want = ref_f32_to_f16(f);
    if (isnan(f)) {
        assert_int_equal(got & 0x7c00, 0x7c00);
        assert_true((got & 0x3ff) != 0);
        return;
    }
    if (got != want) fail_msg("f32_to_f16(%a): got 0x%04x want 0x%04x", (double)f, got, want);
}

static void check_bf16(float f)
{
    uint16_t got = homa_coll_f32_to_bf16(f), want = ref_f32_to_bf16(f);
    if (isnan(f)) {
        assert_int_equal(got & 0x7f80, 0x7f80);
        assert_true((got & 0x7f) != 0);
        return;
    }
    if (got != want) fail_msg("f32_to_bf16(%a): got 0x%04x want 0x%04x", (double)f, got, want);
}

static void homa_coll_f16_to_f32__all_patterns(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = homa_coll_f16_to_f32((uint16_t)h);
        double want = ref_f16_value((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(f));
            /* payload and sign kept */
            assert_int_equal(fbits(f) >> 31, h >> 15);
            assert_int_equal((fbits(f) >> 13) & 0x3ff, h & 0x3ff);
            continue;
        }
        if ((double)f != want || !signbit(f) != !signbit(want))
            fail_msg("f16_to_f32(0x%04x) = %a, want %a", h, (double)f, want);
        /* Every half converts back to itself. */
        assert_int_equal(homa_coll_f32_to_f16(f), h);
    }
}

static void homa_coll_f32_to_f16__edges(void **state)
{
    (void)state;
    assert_int_equal(homa_coll_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(homa_coll_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(homa_coll_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(homa_coll_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(homa_coll_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(homa_coll_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(homa_coll_f32_to_f16(65520.0f), 0x7c00); /* tie to even = inf */
    assert_int_equal(homa_coll_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(homa_coll_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(homa_coll_f32_to_f16(INFINITY), 0x7c00);
    /* subnormals: 2^-24 is the smallest; 2^-25 ties to 0 (even) */
    assert_int_equal(homa_coll_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    assert_int_equal(homa_coll_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);
    assert_int_equal(homa_coll_f32_to_f16(ldexpf(1.5f, -25)), 0x0001);
    assert_int_equal(homa_coll_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);    /* 1.5 ulp ties to 2 */
    assert_int_equal(homa_coll_f32_to_f16(ldexpf(1.0f, -14)), 0x0400);    /* smallest normal */
    assert_int_equal(homa_coll_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400); /* rounds up into it */
    assert_int_equal(homa_coll_f32_to_f16(ldexpf(1.0f, -30)), 0x0000);
    assert_int_equal(homa_coll_f32_to_f16(-ldexpf(1.0f, -30)), 0x8000);
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even is 1 */
    assert_int_equal(homa_coll_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);
    assert_int_equal(homa_coll_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
    uint16_t nan = homa_coll_f32_to_f16(NAN);
    assert_int_equal(nan & 0x7e00, 0x7e00);
    /* A signalling NaN whose payload sits only in the low bits stays NaN. */
    nan = homa_coll_f32_to_f16(bitsf(0x7f800001u));
    assert_int_equal(nan & 0x7c00, 0x7c00);
    assert_true((nan & 0x3ff) != 0);
}

static void homa_coll_f32_to_f16__sweep(void **state)
{
    (void)state;
    /* Every half, the midpoints between neighbours and one float ulp on
     * either side of each midpoint. */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double v = ref_f16_value((uint16_t)h),
               w = h + 1 == 0x7c00 ? 65536.0 : ref_f16_value((uint16_t)(h + 1));
        float mid = (float)((v + w) / 2);
        for (int s = 0; s < 2; s++) {
            float sg = s ? -1.0f : 1.0f;
            check_f16(sg * (float)v);
            check_f16(sg * mid);
            check_f16(sg * nextafterf(mid, 0.0f));
            check_f16(sg * nextafterf(mid, INFINITY));
        }
    }
    for (int i = 0; i < 200000; i++)
        check_f16(bitsf((uint32_t)rng()));
}

static void homa_coll_bf16__conversions(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = homa_coll_bf16_to_f32((uint16_t)h);
        assert_int_equal(fbits(f), h << 16);
        if (!isnan(f)) assert_int_equal(homa_coll_f32_to_bf16(f), h);
    }
    assert_int_equal(homa_coll_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(homa_coll_f32_to_bf16(bitsf(0x3f808000u)), 0x3f80); /* tie to even */
    assert_int_equal(homa_coll_f32_to_bf16(bitsf(0x3f818000u)), 0x3f82); /* tie to even */
    assert_int_equal(homa_coll_f32_to_bf16(bitsf(0x3f808001u)), 0x3f81);
    assert_int_equal(homa_coll_f32_to_bf16(bitsf(0x7f7fffffu)), 0x7f80); /* overflow to inf */
    assert_int_equal(homa_coll_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(homa_coll_f32_to_bf16(bitsf(0x00010000u)), 0x0001); /* subnormal */
    assert_int_equal(homa_coll_f32_to_bf16(bitsf(0x00008000u)), 0x0000);
    assert_int_equal(homa_coll_f32_to_bf16(bitsf(0x00018000u)), 0x0002);
    uint16_t nan = homa_coll_f32_to_bf16(bitsf(0x7f800001u)); /* low-payload NaN */
    assert_int_equal(nan & 0x7f80, 0x7f80);
    assert_true((nan & 0x7f) != 0);
    for (int i = 0; i < 300000; i++)
        check_bf16(bitsf((uint32_t)rng()));
}

/* ---- kernels ---- */

static double get(const uint8_t *p, size_t i, homa_dtype dt)
{
    switch (dt) {
    case HOMA_FLOAT32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    case HOMA_FLOAT16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return ref_f16_value(h);
    }
    case HOMA_BFLOAT16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return (double)bitsf((uint32_t)h << 16);
    }
    case HOMA_INT32: {
        int32_t v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    case HOMA_INT64: {
        int64_t v;
        memcpy(&v, p + 8 * i, 8);
        return (double)v;
    }
    }
    return 0;
}

/* Reference result of a op b for element i, written as the dtype's bytes. */
static void ref_op(uint8_t *out, const uint8_t *a, const uint8_t *b, size_t i, homa_dtype dt,
                   homa_redop op)
{
    size_t es = homa_dtype_size(dt);
    if (dt == HOMA_INT32 || dt == HOMA_INT64) {
        int64_t x = 0, y = 0, r;
        if (dt == HOMA_INT32) {
            int32_t x32, y32;
            memcpy(&x32, a + es * i, 4);
            memcpy(&y32, b + es * i, 4);
            x = x32;
            y = y32;
        } else {
            memcpy(&x, a + es * i, 8);
            memcpy(&y, b + es * i, 8);
        }
        if (op == HOMA_MAX)
            r = x > y ? x : y;
        else if (op == HOMA_MIN)
            r = x < y ? x : y;
        else
            r = (int64_t)((uint64_t)x + (uint64_t)y); /* wraps (int64) */
        if (dt == HOMA_INT32) {
            int32_t r32 = (int32_t)(uint32_t)(uint64_t)r; /* wraps modulo 2^32 */
            memcpy(out + es * i, &r32, 4);
        } else {
            memcpy(out + es * i, &r, 8);
        }
        return;
    }
    double x = get(a, i, dt), y = get(b, i, dt), r;
    if (op == HOMA_MAX)
        r = isnan(x) ? x : isnan(y) ? y : (x > y ? x : y);
    else if (op == HOMA_MIN)
        r = isnan(x) ? x : isnan(y) ? y : (x < y ? x : y);
    else
        r = (double)((float)x + (float)y); /* the sum of two halves is rounded once, in float */
    float f = (float)r;
    if (dt == HOMA_FLOAT32) {
        memcpy(out + es * i, &f, 4);
    } else {
        uint16_t h = dt == HOMA_FLOAT16 ? ref_f32_to_f16(f) : ref_f32_to_bf16(f);
        memcpy(out + es * i, &h, 2);
    }
}

static void fill_random(uint8_t *p, size_t n, homa_dtype dt)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t x = rng();
        switch (dt) {
        case HOMA_FLOAT32: {
            float f = (float)((int64_t)(x % 2000001) - 1000000) / 1024.0f;
            memcpy(p + 4 * i, &f, 4);
            break;
        }
        case HOMA_FLOAT16:
        case HOMA_BFLOAT16: {
            /* any finite pattern (halves near the overflow edge included) */
            uint16_t h = (uint16_t)x;
            if (dt == HOMA_FLOAT16 && (h & 0x7c00) == 0x7c00) h &= 0xbfff;
            if (dt == HOMA_BFLOAT16 && (h & 0x7f80) == 0x7f80) h &= 0xbfff;
            memcpy(p + 2 * i, &h, 2);
            break;
        }
        case HOMA_INT32: {
            int32_t v = (int32_t)(uint32_t)x; /* overflowing sums included */
            memcpy(p + 4 * i, &v, 4);
            break;
        }
        case HOMA_INT64: {
            int64_t v = (int64_t)x;
            memcpy(p + 8 * i, &v, 8);
            break;
        }
        }
    }
}

static int same_value(const uint8_t *x, const uint8_t *y, size_t i, homa_dtype dt)
{
    size_t es = homa_dtype_size(dt);
    if (memcmp(x + es * i, y + es * i, es) == 0) return 1;
    /* Any NaN matches any NaN. */
    if (dt == HOMA_INT32 || dt == HOMA_INT64) return 0;
    return isnan(get(x, i, dt)) && isnan(get(y, i, dt));
}

/* Both kernel sets: the portable one and the CPU-specific one (x86 F16C
 * for float16, where the CPU has it). */
static void homa_coll_reduce__all_types_and_aliasing(void **state)
{
    (void)state;
    enum { N = 1031 };
    for (int pass = 0; pass < 2; pass++) {
        homa_coll_kernels_portable(pass == 0);
        for (int dt = HOMA_FLOAT32; dt <= HOMA_INT64; dt++) {
            size_t es = homa_dtype_size((homa_dtype)dt);
            for (int op = HOMA_SUM; op <= HOMA_MIN; op++) {
                /* +1: unaligned element pointers */
                uint8_t *a = malloc(N * es + 1), *b = malloc(N * es + 1), *d = malloc(N * es + 1),
                        *want = malloc(N * es);
                fill_random(a + 1, N, (homa_dtype)dt);
                fill_random(b + 1, N, (homa_dtype)dt);
                for (size_t i = 0; i < N; i++)
                    ref_op(want, a + 1, b + 1, i, (homa_dtype)dt, (homa_redop)op);
                /* separate destination */
                homa_coll_reduce(d + 1, a + 1, b + 1, N, (homa_dtype)dt, (homa_redop)op);
                for (size_t i = 0; i < N; i++)
                    if (!same_value(d + 1, want, i, (homa_dtype)dt))
                        fail_msg("dtype %d op %d element %zu", dt, op, i);
                /* dst == a */
                memcpy(d + 1, a + 1, N * es);
                homa_coll_reduce(d + 1, d + 1, b + 1, N, (homa_dtype)dt, (homa_redop)op);
                for (size_t i = 0; i < N; i++)
                    assert_true(same_value(d + 1, want, i, (homa_dtype)dt));
                /* dst == b */
                memcpy(d + 1, b + 1, N * es);
                homa_coll_reduce(d + 1, a + 1, d + 1, N, (homa_dtype)dt, (homa_redop)op);
                for (size_t i = 0; i < N; i++)
                    assert_true(same_value(d + 1, want, i, (homa_dtype)dt));
                /* dst == a == b: a op a */
                memcpy(d + 1, a + 1, N * es);
                for (size_t i = 0; i < N; i++)
                    ref_op(want, a + 1, a + 1, i, (homa_dtype)dt, (homa_redop)op);
                homa_coll_reduce(d + 1, d + 1, d + 1, N, (homa_dtype)dt, (homa_redop)op);
                for (size_t i = 0; i < N; i++)
                    assert_true(same_value(d + 1, want, i, (homa_dtype)dt));
                free(a);
                free(b);
                free(d);
                free(want);
            }
        }
    }
    homa_coll_kernels_portable(0);
}

static void nan_and_zero(void)
{
    float a[4] = {NAN, 1.0f, 2.0f, -0.0f}, b[4] = {1.0f, NAN, 3.0f, 0.0f}, d[4];
    homa_coll_reduce(d, a, b, 4, HOMA_FLOAT32, HOMA_MAX);
    assert_true(isnan(d[0]) && isnan(d[1]));
    assert_true(d[2] == 3.0f);
    homa_coll_reduce(d, a, b, 4, HOMA_FLOAT32, HOMA_MIN);
    assert_true(isnan(d[0]) && isnan(d[1]));
    assert_true(d[2] == 2.0f);
    homa_coll_reduce(d, a, b, 4, HOMA_FLOAT32, HOMA_SUM);
    assert_true(isnan(d[0]) && isnan(d[1]));
    assert_true(d[2] == 5.0f && d[3] == 0.0f && !signbit(d[3]));
    /* inf + -inf = NaN; halves overflow to inf */
    uint16_t h[2] = {0x7c00, 0x7bff}, g[2] = {0xfc00, 0x7bff}, r[2];
    homa_coll_reduce(r, h, g, 2, HOMA_FLOAT16, HOMA_SUM);
    assert_true((r[0] & 0x7c00) == 0x7c00 && (r[0] & 0x3ff) != 0);
    assert_int_equal(r[1], 0x7c00);
    /* n = 0 and invalid types touch nothing */
    d[0] = 7.0f;
    homa_coll_reduce(d, a, b, 0, HOMA_FLOAT32, HOMA_SUM);
    homa_coll_reduce(d, a, b, 1, (homa_dtype)9, HOMA_SUM);
    homa_coll_reduce(d, a, b, 1, HOMA_FLOAT32, (homa_redop)9);
    assert_true(d[0] == 7.0f);
    /* half NaN and subnormals through the kernels (both kernel sets) */
    uint16_t x[3] = {0x7d01, 0x0001, 0x03ff}, y[3] = {0x3c00, 0x0001, 0x0001}, z[3];
    homa_coll_reduce(z, x, y, 3, HOMA_FLOAT16, HOMA_MAX);
    assert_true((z[0] & 0x7c00) == 0x7c00 && (z[0] & 0x3ff) != 0);
    homa_coll_reduce(z, x, y, 3, HOMA_FLOAT16, HOMA_SUM);
    assert_int_equal(z[1], 0x0002);
    assert_int_equal(z[2], 0x0400); /* largest subnormal + smallest = smallest normal */
}

static void homa_coll_reduce__nan_and_zero(void **state)
{
    (void)state;
    homa_coll_kernels_portable(1);
    nan_and_zero();
    homa_coll_kernels_portable(0);
    nan_and_zero();
}

static void homa_coll_avg_finish__types(void **state)
{
    (void)state;
    int32_t i32[4] = {7, -7, 8, INT32_MIN};
    homa_coll_avg_finish(i32, 4, HOMA_INT32, 2);
    assert_int_equal(i32[0], 3);
    assert_int_equal(i32[1], -3); /* toward zero */
    assert_int_equal(i32[2], 4);
    assert_int_equal(i32[3], INT32_MIN / 2);
    int64_t i64[2] = {-(1ll << 40) - 1, INT64_MAX};
    homa_coll_avg_finish(i64, 2, HOMA_INT64, 3);
    assert_true(i64[0] == (-(1ll << 40) - 1) / 3);
    assert_true(i64[1] == INT64_MAX / 3);
    float f[2] = {1.0f, 10.0f};
    homa_coll_avg_finish(f, 2, HOMA_FLOAT32, 3);
    assert_true(f[0] == 1.0f / 3.0f && f[1] == 10.0f / 3.0f);
    uint16_t h[2] = {homa_coll_f32_to_f16(1.0f), homa_coll_f32_to_f16(6.0f)};
    homa_coll_avg_finish(h, 2, HOMA_FLOAT16, 3);
    assert_int_equal(h[0], ref_f32_to_f16(1.0f / 3.0f));
    assert_int_equal(h[1], ref_f32_to_f16(2.0f));
    uint16_t bf[1] = {homa_coll_f32_to_bf16(1.0f)};
    homa_coll_avg_finish(bf, 1, HOMA_BFLOAT16, 3);
    assert_int_equal(bf[0], ref_f32_to_bf16(1.0f / 3.0f));
    /* divisor 1: unchanged */
    homa_coll_avg_finish(f, 2, HOMA_FLOAT32, 1);
    assert_true(f[0] == 1.0f / 3.0f);
}

static void homa_dtype_size__values(void **state)
{
    (void)state;
    assert_int_equal(homa_dtype_size(HOMA_FLOAT32), 4);
    assert_int_equal(homa_dtype_size(HOMA_FLOAT16), 2);
    assert_int_equal(homa_dtype_size(HOMA_BFLOAT16), 2);
    assert_int_equal(homa_dtype_size(HOMA_INT32), 4);
    assert_int_equal(homa_dtype_size(HOMA_INT64), 8);
    assert_int_equal(homa_dtype_size((homa_dtype)5), 0);
    assert_int_equal(homa_dtype_size((homa_dtype)-1), 0);
}

static void coll_hdr__round_trip(void **state)
{
    (void)state;
    struct coll_hdr h = {
        COLL_MAGIC, COLL_VERSION, 2, 3,  1,     0xdeadbeef, 4095, 0x0102030405060708ull,
        1ull << 40, 77,           9, 10, 65536, 3,          4096, 0};
    uint8_t b[COLL_HDR_SIZE];
    coll_hdr_encode(b, &h);
    assert_int_equal(b[0], 0x48); /* little-endian "HMCL" */
    assert_int_equal(b[16], 0x08);
    struct coll_hdr g;
    coll_hdr_decode(b, &g);
    assert_memory_equal(&g, &h, sizeof(h));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(homa_coll_f16_to_f32__all_patterns),
        cmocka_unit_test(homa_coll_f32_to_f16__edges),
        cmocka_unit_test(homa_coll_f32_to_f16__sweep),
        cmocka_unit_test(homa_coll_bf16__conversions),
        cmocka_unit_test(homa_coll_reduce__all_types_and_aliasing),
        cmocka_unit_test(homa_coll_reduce__nan_and_zero),
        cmocka_unit_test(homa_coll_avg_finish__types),
        cmocka_unit_test(homa_dtype_size__values),
        cmocka_unit_test(coll_hdr__round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
