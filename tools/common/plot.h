/* plot: dependency-free line charts written as PNG files.
 *
 * One call draws a chart: a title, two axes (each linear or logarithmic,
 * range automatic or fixed), a grid with labelled ticks, and any number of
 * series of (x, y) points drawn as lines in their own colour, with a legend.
 * Text uses a built-in 5x7 bitmap font (printable ASCII).  The PNG is
 * 8-bit indexed colour compressed with deflate "stored" blocks, so no zlib
 * is needed; files are larger than usual (about width*height bytes).
 *
 * Shared by homa-sim and homa-perf; knows nothing about either. */
#ifndef HOMA_PLOT_H
#define HOMA_PLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct plot_series {
    const char *label; /* legend text; NULL or "" = not in the legend */
    uint32_t rgb;      /* 0xRRGGBB */
    const double *x, *y;
    size_t n;
    bool dashed;  /* draw a dashed line (e.g. a goal or reference line) */
    bool markers; /* also draw a small square at every point */
};

struct plot_axis {
    const char *label;
    bool log;        /* logarithmic (base 10); points <= 0 are skipped */
    double min, max; /* fixed range; min >= max means automatic */
};

struct plot_spec {
    const char *title;
    struct plot_axis x, y;
    int width, height; /* pixels; 0 = 900 x 560 */
    const struct plot_series *series;
    size_t nseries;
};

/* A default colour for series i (a palette of distinct colours). */
uint32_t plot_color(size_t i);

/* Draws the chart and writes it to path.  Returns 0, or -1 with errno set
 * (EINVAL for a bad spec, or the error of the failed write). */
int plot_write_png(const char *path, const struct plot_spec *spec);

/* Draws the chart into memory: *out gets a malloc'ed PNG of *len bytes. */
int plot_render_png(const struct plot_spec *spec, uint8_t **out, size_t *len);

/* Lower level: encodes an 8-bit indexed image (w*h palette indices, rows
 * top to bottom; palette of npal 0xRRGGBB entries, 1..256) as PNG. */
int plot_png_encode(const uint8_t *pixels, int w, int h, const uint32_t *palette, int npal,
                    uint8_t **out, size_t *len);

/* Checksums used by PNG (exposed for tests): CRC-32 (ISO-HDLC, as in PNG
 * chunks) and Adler-32 (zlib trailer).  Pass 0 / 1 as the initial value. */
uint32_t plot_crc32(uint32_t crc, const uint8_t *p, size_t n);
uint32_t plot_adler32(uint32_t adler, const uint8_t *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif
