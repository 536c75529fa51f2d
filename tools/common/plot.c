/* plot: PNG line charts without external libraries.  See plot.h. */
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- checksums ---- */

static uint32_t crc_table[256];
static int crc_ready;

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
    crc_ready = 1;
}

uint32_t plot_crc32(uint32_t crc, const uint8_t *p, size_t n)
{
    if (!crc_ready) crc_init();
    uint32_t c = crc ^ 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t plot_adler32(uint32_t adler, const uint8_t *p, size_t n)
{
    uint32_t a = adler & 0xFFFF, b = adler >> 16;
    while (n > 0) {
        /* 5552 bytes is the most that can be summed before b overflows */
        size_t k = n < 5552 ? n : 5552;
        n -= k;
        while (k--) {
            a += *p++;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    return (b << 16) | a;
}

/* ---- PNG encoder ---- */

struct obuf {
    uint8_t *p;
    size_t n, cap;
    int failed;
};

static void ob_put(struct obuf *o, const void *d, size_t n)
{
    if (o->failed) return;
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->n + n)
            cap *= 2;
        uint8_t *np = realloc(o->p, cap);
        if (!np) {
            o->failed = 1;
            return;
        }
        o->p = np;
        o->cap = cap;
    }
    memcpy(o->p + o->n, d, n);
    o->n += n;
}

static void ob_u32(struct obuf *o, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    ob_put(o, b, 4);
}

/* Writes a chunk; the CRC covers type and data. */
static void png_chunk(struct obuf *o, const char *type, const uint8_t *data, size_t n)
{
    ob_u32(o, (uint32_t)n);
    ob_put(o, type, 4);
    if (n) ob_put(o, data, n);
    uint32_t crc = plot_crc32(0, (const uint8_t *)type, 4);
    crc = plot_crc32(crc, data, n);
    ob_u32(o, crc);
}

int plot_png_encode(const uint8_t *pixels, int w, int h, const uint32_t *palette, int npal,
                    uint8_t **out, size_t *len)
{
    if (!pixels || w <= 0 || h <= 0 || !palette || npal < 1 || npal > 256 || !out || !len) {
        errno = EINVAL;
        return -1;
    }
    struct obuf o = {0};
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    ob_put(&o, sig, 8);

    uint8_t ihdr[13] = {(uint8_t)(w >> 24),
                        (uint8_t)(w >> 16),
                        (uint8_t)(w >> 8),
                        (uint8_t)w,
                        (uint8_t)(h >> 24),
                        (uint8_t)(h >> 16),
                        (uint8_t)(h >> 8),
                        (uint8_t)h,
                        8 /* bit depth */,
                        3 /* indexed colour */,
                        0,
                        0,
                        0};
    png_chunk(&o, "IHDR", ihdr, sizeof(ihdr));
    uint8_t plte[256 * 3];
    for (int i = 0; i < npal; i++) {
        plte[3 * i] = (uint8_t)(palette[i] >> 16);
        plte[3 * i + 1] = (uint8_t)(palette[i] >> 8);
        plte[3 * i + 2] = (uint8_t)palette[i];
    }
    png_chunk(&o, "PLTE", plte, (size_t)npal * 3);

    /* The filtered image: each row is a filter byte (0 = none) + pixels. */
    size_t row = (size_t)w + 1, raw_n = row * (size_t)h;
    uint8_t *raw = malloc(raw_n);
    if (!raw) {
        free(o.p);
        errno = ENOMEM;
        return -1;
    }
    for (int y = 0; y < h; y++) {
        raw[row * (size_t)y] = 0;
        memcpy(raw + row * (size_t)y + 1, pixels + (size_t)w * (size_t)y, (size_t)w);
    }
    /* zlib stream: header (deflate, 32K window, no dictionary; 0x7801 is a
     * multiple of 31 as required), stored blocks of up to 65535 bytes, then
     * the Adler-32 of the uncompressed data. */
    struct obuf z = {0};
    static const uint8_t zhdr[2] = {0x78, 0x01};
    ob_put(&z, zhdr, 2);
    size_t off = 0;
    do {
        size_t k = raw_n - off > 65535 ? 65535 : raw_n - off;
        uint8_t bh[5] = {(uint8_t)(off + k == raw_n ? 1 : 0), (uint8_t)k, (uint8_t)(k >> 8),
                         (uint8_t)~k, (uint8_t)(~k >> 8)};
        ob_put(&z, bh, 5);
        ob_put(&z, raw + off, k);
        off += k;
    } while (off < raw_n);
    ob_u32(&z, plot_adler32(1, raw, raw_n));
    free(raw);
    if (!z.failed) png_chunk(&o, "IDAT", z.p, z.n);
    free(z.p);
    png_chunk(&o, "IEND", NULL, 0);
    if (o.failed || z.failed) {
        free(o.p);
        errno = ENOMEM;
        return -1;
    }
    *out = o.p;
    *len = o.n;
    return 0;
}

/* ---- font: 5x7 glyphs for ASCII 32..126, '#' = ink ---- */

static const char *const font[95][7] = {
    {".....", ".....", ".....", ".....", ".....", ".....", "....."}, /* space */
    {"..#..", "..#..", "..#..", "..#..", "..#..", ".....", "..#.."}, /* ! */
    {".#.#.", ".#.#.", ".....", ".....", ".....", ".....", "....."}, /* " */
    {".#.#.", ".#.#.", "#####", ".#.#.", "#####", ".#.#.", ".#.#."}, /* # */
    {"..#..", ".####", "#.#..", ".###.", "..#.#", "####.", "..#.."}, /* $ */
    {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"}, /* % */
    {".##..", "#..#.", "#.#..", ".#...", "#.#.#", "#..#.", ".##.#"}, /* & */
    {"..#..", "..#..", ".....", ".....", ".....", ".....", "....."}, /* ' */
    {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."}, /* ( */
    {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."}, /* ) */
    {".....", "..#..", "#.#.#", ".###.", "#.#.#", "..#..", "....."}, /* * */
    {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."}, /* + */
    {".....", ".....", ".....", ".....", "..##.", "..#..", ".#..."}, /* , */
    {".....", ".....", ".....", "#####", ".....", ".....", "....."}, /* - */
    {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}, /* . */
    {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."}, /* / */
    {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}, /* 0 */
    {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}, /* 1 */
    {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}, /* 2 */
    {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."}, /* 3 */
    {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}, /* 4 */
    {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}, /* 5 */
    {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}, /* 6 */
    {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}, /* 7 */
    {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}, /* 8 */
    {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}, /* 9 */
    {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."}, /* : */
    {".....", ".##..", ".##..", ".....", ".##..", "..#..", ".#..."}, /* ; */
    {"...#.", "..#..", ".#...", "#....", ".#...", "..#..", "...#."}, /* < */
    {".....", ".....", "#####", ".....", "#####", ".....", "....."}, /* = */
    {".#...", "..#..", "...#.", "....#", "...#.", "..#..", ".#..."}, /* > */
    {".###.", "#...#", "....#", "...#.", "..#..", ".....", "..#.."}, /* ? */
    {".###.", "#...#", "....#", ".##.#", "#.#.#", "#.#.#", ".###."}, /* @ */
    {".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}, /* A */
    {"####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."}, /* B */
    {".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."}, /* C */
    {"###..", "#..#.", "#...#", "#...#", "#...#", "#..#.", "###.."}, /* D */
    {"#####", "#....", "#....", "####.", "#....", "#....", "#####"}, /* E */
    {"#####", "#....", "#....", "####.", "#....", "#....", "#...."}, /* F */
    {".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"}, /* G */
    {"#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}, /* H */
    {".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}, /* I */
    {"..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."}, /* J */
    {"#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"}, /* K */
    {"#....", "#....", "#....", "#....", "#....", "#....", "#####"}, /* L */
    {"#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"}, /* M */
    {"#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"}, /* N */
    {".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}, /* O */
    {"####.", "#...#", "#...#", "####.", "#....", "#....", "#...."}, /* P */
    {".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"}, /* Q */
    {"####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"}, /* R */
    {".####", "#....", "#....", ".###.", "....#", "....#", "####."}, /* S */
    {"#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."}, /* T */
    {"#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}, /* U */
    {"#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."}, /* V */
    {"#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."}, /* W */
    {"#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"}, /* X */
    {"#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."}, /* Y */
    {"#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"}, /* Z */
    {".###.", ".#...", ".#...", ".#...", ".#...", ".#...", ".###."}, /* [ */
    {".....", "#....", ".#...", "..#..", "...#.", "....#", "....."}, /* \ */
    {".###.", "...#.", "...#.", "...#.", "...#.", "...#.", ".###."}, /* ] */
    {"..#..", ".#.#.", "#...#", ".....", ".....", ".....", "....."}, /* ^ */
    {".....", ".....", ".....", ".....", ".....", ".....", "#####"}, /* _ */
    {".#...", "..#..", ".....", ".....", ".....", ".....", "....."}, /* ` */
    {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"}, /* a */
    {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "####."}, /* b */
    {".....", ".....", ".###.", "#....", "#....", "#...#", ".###."}, /* c */
    {"....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####"}, /* d */
    {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."}, /* e */
    {"..##.", ".#..#", ".#...", "###..", ".#...", ".#...", ".#..."}, /* f */
    {".####", "#...#", "#...#", ".####", "....#", "....#", ".###."}, /* g */
    {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"}, /* h */
    {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."}, /* i */
    {"...#.", ".....", "..##.", "...#.", "...#.", "...#.", "##..."}, /* j */
    {"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."}, /* k */
    {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}, /* l */
    {".....", ".....", "##.#.", "#.#.#", "#.#.#", "#...#", "#...#"}, /* m */
    {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"}, /* n */
    {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."}, /* o */
    {"####.", "#...#", "#...#", "####.", "#....", "#....", "#...."}, /* p */
    {".####", "#...#", "#...#", ".####", "....#", "....#", "....#"}, /* q */
    {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."}, /* r */
    {".....", ".....", ".###.", "#....", ".###.", "....#", "####."}, /* s */
    {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."}, /* t */
    {".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#"}, /* u */
    {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."}, /* v */
    {".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#."}, /* w */
    {".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#"}, /* x */
    {"#...#", "#...#", "#...#", ".####", "....#", "....#", ".###."}, /* y */
    {".....", ".....", "#####", "...#.", "..#..", ".#...", "#####"}, /* z */
    {"...#.", "..#..", "..#..", ".#...", "..#..", "..#..", "...#."}, /* { */
    {"..#..", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."}, /* | */
    {".#...", "..#..", "..#..", "...#.", "..#..", "..#..", ".#..."}, /* } */
    {".....", ".....", ".#...", "#.#.#", "...#.", ".....", "....."}, /* ~ */
};

#define GLYPH_W 6 /* 5 columns + 1 of spacing */
#define GLYPH_H 7

/* Letters with descenders are drawn lower: their 7 rows then span the
 * x-height and the descender (cells are 9 rows tall). */
static int glyph_drop(unsigned ch)
{
    return ch == 'g' || ch == 'p' || ch == 'q' || ch == 'y' ? 2 : ch == 'j' ? 1 : 0;
}

/* ---- canvas ---- */

struct canvas {
    int w, h;
    uint8_t *px;
    uint32_t pal[256];
    int npal;
    /* clip rectangle for series lines */
    int cx0, cy0, cx1, cy1;
};

static uint8_t color_idx(struct canvas *c, uint32_t rgb)
{
    rgb &= 0xFFFFFF;
    for (int i = 0; i < c->npal; i++)
        if (c->pal[i] == rgb) return (uint8_t)i;
    if (c->npal == 256) return 0; /* palette full: fall back to the background */
    c->pal[c->npal] = rgb;
    return (uint8_t)c->npal++;
}

static inline void pset(struct canvas *c, int x, int y, uint8_t col)
{
    if (x >= 0 && y >= 0 && x < c->w && y < c->h) c->px[(size_t)y * (size_t)c->w + (size_t)x] = col;
}

static inline void pset_clip(struct canvas *c, int x, int y, uint8_t col)
{
    if (x >= c->cx0 && y >= c->cy0 && x <= c->cx1 && y <= c->cy1) pset(c, x, y, col);
}

static void fill_rect(struct canvas *c, int x0, int y0, int x1, int y1, uint8_t col)
{
    for (int y = y0; y <= y1; y++)
        for (int x = x0; x <= x1; x++)
            pset(c, x, y, col);
}

static void hline(struct canvas *c, int x0, int x1, int y, uint8_t col)
{
    for (int x = x0; x <= x1; x++)
        pset(c, x, y, col);
}

static void vline(struct canvas *c, int x, int y0, int y1, uint8_t col)
{
    for (int y = y0; y <= y1; y++)
        pset(c, x, y, col);
}

/* A 2-pixel-wide line, clipped to the plot area; dashes continue across
 * segments through *phase. */
static void line(struct canvas *c, int x0, int y0, int x1, int y1, uint8_t col, bool dashed,
                 int *phase)
{
    int dx = abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
    int dy = -abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    for (;;) {
        bool on = !dashed || (*phase % 14) < 8;
        (*phase)++;
        if (on) {
            pset_clip(c, x0, y0, col);
            pset_clip(c, x0 + 1, y0, col);
            pset_clip(c, x0, y0 + 1, col);
            pset_clip(c, x0 + 1, y0 + 1, col);
        }
        if (x0 == x1 && y0 == y1) break;
        int e2 = 2 * err;
        if (e2 >= dy) {
            err += dy;
            x0 += sx;
        }
        if (e2 <= dx) {
            err += dx;
            y0 += sy;
        }
    }
}

/* Text with its top-left corner at (x, y); vertical text runs bottom-up
 * starting at (x, y) as its bottom-left corner. */
static void text(struct canvas *c, int x, int y, const char *s, int scale, uint8_t col,
                 bool vertical)
{
    for (int k = 0; s[k]; k++) {
        unsigned ch = (unsigned char)s[k];
        if (ch < 32 || ch > 126) ch = '?';
        const char *const *g = font[ch - 32];
        int drop = glyph_drop(ch);
        for (int r = 0; r < GLYPH_H; r++)
            for (int q = 0; q < 5; q++) {
                if (g[r][q] != '#') continue;
                for (int a = 0; a < scale; a++)
                    for (int b = 0; b < scale; b++) {
                        int gx = (k * GLYPH_W + q) * scale + a, gy = (r + drop) * scale + b;
                        if (vertical)
                            pset(c, x + gy, y - gx, col);
                        else
                            pset(c, x + gx, y + gy, col);
                    }
            }
    }
}

static int text_width(const char *s, int scale)
{
    int n = (int)strlen(s);
    return n ? (n * GLYPH_W - 1) * scale : 0;
}

/* ---- axes ---- */

struct scale {
    bool log;
    double lo, hi; /* in data units */
    int p0, p1;    /* pixel positions of lo and hi */
};

static double to_t(const struct scale *s, double v)
{
    if (s->log) return (log10(v) - log10(s->lo)) / (log10(s->hi) - log10(s->lo));
    return (v - s->lo) / (s->hi - s->lo);
}

static int to_px(const struct scale *s, double v)
{
    double t = to_t(s, v);
    double p = s->p0 + t * (s->p1 - s->p0);
    if (p > 1e6) p = 1e6;
    if (p < -1e6) p = -1e6;
    return (int)lround(p);
}

/* Tick labels: 1k, 10M and so on for big values, %g otherwise. */
static void fmt_num(char *buf, size_t n, double v)
{
    double a = fabs(v);
    if (a >= 1e9 && fmod(a, 1e8) == 0)
        snprintf(buf, n, "%gG", v / 1e9);
    else if (a >= 1e6 && fmod(a, 1e5) == 0)
        snprintf(buf, n, "%gM", v / 1e6);
    else if (a >= 1e3 && fmod(a, 1e2) == 0)
        snprintf(buf, n, "%gk", v / 1e3);
    else
        snprintf(buf, n, "%.4g", v);
}

static double nice_step(double raw)
{
    double e = pow(10, floor(log10(raw)));
    double f = raw / e;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * e;
}

/* Data range of one axis over every series (positive values only for log). */
static void data_range(const struct plot_spec *sp, bool xaxis, bool logax, double *lo, double *hi)
{
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t i = 0; i < sp->nseries; i++) {
        const struct plot_series *s = &sp->series[i];
        for (size_t j = 0; j < s->n; j++) {
            double v = xaxis ? s->x[j] : s->y[j];
            if (!isfinite(v) || (logax && v <= 0)) continue;
            if (v < *lo) *lo = v;
            if (v > *hi) *hi = v;
        }
    }
}

static void setup_scale(struct scale *s, const struct plot_axis *ax, const struct plot_spec *sp,
                        bool xaxis)
{
    s->log = ax->log;
    double lo = ax->min, hi = ax->max;
    if (!(lo < hi)) {
        data_range(sp, xaxis, ax->log, &lo, &hi);
        if (!isfinite(lo)) {
            lo = ax->log ? 1 : 0;
            hi = ax->log ? 10 : 1;
        }
        if (ax->log) {
            lo = pow(10, floor(log10(lo) + 1e-9));
            hi = pow(10, ceil(log10(hi) - 1e-9));
            if (hi <= lo) hi = lo * 10;
        } else {
            if (hi <= lo) hi = lo + 1;
            double step = nice_step((hi - lo) / 6);
            lo = floor(lo / step) * step;
            hi = ceil(hi / step) * step;
        }
    } else if (ax->log && lo <= 0) {
        lo = hi / 1000;
    }
    s->lo = lo;
    s->hi = hi;
}

/* Fills vals with the tick values of an axis (at most max); major ticks
 * (flagged in major) get a label and a darker grid line. */
static int ticks(const struct scale *s, double *vals, bool *major, int max)
{
    int n = 0;
    if (s->log) {
        double l0 = floor(log10(s->lo) + 1e-9), l1 = ceil(log10(s->hi) - 1e-9);
        bool fine = l1 - l0 <= 2; /* few decades: label 2 and 5 too */
        for (double e = l0; e <= l1 && n < max; e++) {
            double d = pow(10, e);
            for (int m = 1; m <= 9 && n < max; m++) {
                double v = d * m;
                if (v < s->lo * (1 - 1e-9) || v > s->hi * (1 + 1e-9)) continue;
                vals[n] = v;
                major[n] = m == 1 || (fine && (m == 2 || m == 5));
                n++;
            }
        }
    } else {
        double step = nice_step((s->hi - s->lo) / 6);
        for (double v = ceil(s->lo / step - 1e-9) * step; v <= s->hi + step * 1e-9 && n < max;
             v += step) {
            vals[n] = fabs(v) < step * 1e-9 ? 0 : v;
            major[n++] = true;
        }
    }
    return n;
}

/* ---- the chart ---- */

int plot_render_png(const struct plot_spec *sp, uint8_t **out, size_t *len)
{
    if (!sp || !out || !len || (sp->nseries && !sp->series)) {
        errno = EINVAL;
        return -1;
    }
    struct canvas c;
    memset(&c, 0, sizeof(c));
    c.w = sp->width > 0 ? sp->width : 900;
    c.h = sp->height > 0 ? sp->height : 560;
    if (c.w < 200 || c.h < 150 || c.w > 8000 || c.h > 8000) {
        errno = EINVAL;
        return -1;
    }
    c.px = calloc((size_t)c.w * (size_t)c.h, 1);
    if (!c.px) {
        errno = ENOMEM;
        return -1;
    }
    uint8_t white = color_idx(&c, 0xFFFFFF); /* index 0: background */
    uint8_t black = color_idx(&c, 0x000000);
    uint8_t grid = color_idx(&c, 0xD8D8D8);
    uint8_t minor = color_idx(&c, 0xEEEEEE);
    (void)white;

    /* plot area */
    int left = 78, right = c.w - 24, top = sp->title ? 44 : 20, bottom = c.h - 56;
    struct scale xs, ys;
    setup_scale(&xs, &sp->x, sp, true);
    setup_scale(&ys, &sp->y, sp, false);
    xs.p0 = left;
    xs.p1 = right;
    ys.p0 = bottom;
    ys.p1 = top;
    c.cx0 = left;
    c.cy0 = top;
    c.cx1 = right;
    c.cy1 = bottom;

    double tv[128];
    bool tm[128];
    char lab[32];
    int n = ticks(&xs, tv, tm, 128);
    for (int i = 0; i < n; i++) {
        int x = to_px(&xs, tv[i]);
        vline(&c, x, top, bottom, tm[i] ? grid : minor);
        vline(&c, x, bottom, bottom + (tm[i] ? 5 : 2), black);
        if (tm[i]) {
            fmt_num(lab, sizeof(lab), tv[i]);
            text(&c, x - text_width(lab, 1) / 2, bottom + 9, lab, 1, black, false);
        }
    }
    n = ticks(&ys, tv, tm, 128);
    for (int i = 0; i < n; i++) {
        int y = to_px(&ys, tv[i]);
        hline(&c, left, right, y, tm[i] ? grid : minor);
        hline(&c, left - (tm[i] ? 5 : 2), left, y, black);
        if (tm[i]) {
            fmt_num(lab, sizeof(lab), tv[i]);
            text(&c, left - 9 - text_width(lab, 1), y - 3, lab, 1, black, false);
        }
    }
    /* frame */
    hline(&c, left, right, top, black);
    hline(&c, left, right, bottom, black);
    vline(&c, left, top, bottom, black);
    vline(&c, right, top, bottom, black);

    if (sp->title) text(&c, (c.w - text_width(sp->title, 2)) / 2, 12, sp->title, 2, black, false);
    if (sp->x.label)
        text(&c, (left + right - text_width(sp->x.label, 1)) / 2, bottom + 28, sp->x.label, 1,
             black, false);
    if (sp->y.label)
        text(&c, 14, (top + bottom + text_width(sp->y.label, 1)) / 2, sp->y.label, 1, black, true);

    /* series: a point that cannot be shown (non-finite, or <= 0 on a log
     * axis) breaks the line */
    for (size_t i = 0; i < sp->nseries; i++) {
        const struct plot_series *s = &sp->series[i];
        uint8_t col = color_idx(&c, s->rgb);
        bool have = false;
        int px = 0, py = 0, phase = 0;
        for (size_t j = 0; j < s->n; j++) {
            double x = s->x[j], y = s->y[j];
            if (!isfinite(x) || !isfinite(y) || (xs.log && x <= 0) || (ys.log && y <= 0)) {
                have = false;
                continue;
            }
            int qx = to_px(&xs, x), qy = to_px(&ys, y);
            if (have) line(&c, px, py, qx, qy, col, s->dashed, &phase);
            if (s->markers)
                for (int a = -2; a <= 2; a++)
                    for (int b = -2; b <= 2; b++)
                        pset_clip(&c, qx + a, qy + b, col);
            px = qx;
            py = qy;
            have = true;
        }
    }

    /* legend, top left inside the plot */
    int nl = 0, lw = 0;
    for (size_t i = 0; i < sp->nseries; i++)
        if (sp->series[i].label && sp->series[i].label[0]) {
            nl++;
            int w = text_width(sp->series[i].label, 1);
            if (w > lw) lw = w;
        }
    if (nl > 0) {
        int bx = left + 10, by = top + 10, bw = lw + 44, bh = nl * 14 + 8;
        fill_rect(&c, bx, by, bx + bw, by + bh, color_idx(&c, 0xFFFFFF));
        hline(&c, bx, bx + bw, by, black);
        hline(&c, bx, bx + bw, by + bh, black);
        vline(&c, bx, by, by + bh, black);
        vline(&c, bx + bw, by, by + bh, black);
        int k = 0;
        for (size_t i = 0; i < sp->nseries; i++) {
            const struct plot_series *s = &sp->series[i];
            if (!s->label || !s->label[0]) continue;
            uint8_t col = color_idx(&c, s->rgb);
            int y = by + 8 + k * 14;
            int phase = 0;
            line(&c, bx + 6, y + 3, bx + 30, y + 3, col, s->dashed, &phase);
            text(&c, bx + 36, y, s->label, 1, black, false);
            k++;
        }
    }

    int r = plot_png_encode(c.px, c.w, c.h, c.pal, c.npal, out, len);
    free(c.px);
    return r;
}

int plot_write_png(const char *path, const struct plot_spec *spec)
{
    uint8_t *png;
    size_t n;
    if (!path) {
        errno = EINVAL;
        return -1;
    }
    if (plot_render_png(spec, &png, &n) != 0) return -1;
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(png);
        return -1;
    }
    size_t w = fwrite(png, 1, n, f);
    int e = errno;
    free(png);
    if (fclose(f) != 0 || w != n) {
        errno = w != n ? e : errno;
        return -1;
    }
    return 0;
}

uint32_t plot_color(size_t i)
{
    static const uint32_t pal[] = {0x1F77B4, 0xD62728, 0x2CA02C, 0xFF7F0E, 0x9467BD,
                                   0x8C564B, 0xE377C2, 0x7F7F7F, 0xBCBD22, 0x17BECF};
    return pal[i % (sizeof(pal) / sizeof(pal[0]))];
}
