/* Message-size workloads loaded from CDF files (see homa/workload.h). */
#include <homa/workload.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tolerance on the last cumulative fraction. */
#define WL_LAST_TOLERANCE 1e-6
/* Refuse CDF files larger than this (they are a few tens of KB). */
#define WL_MAX_FILE_BYTES (64L * 1024 * 1024)
#define WL_NAME_LEN 64
#define WL_PATH_LEN 4096
#define WL_ERRMSG_LEN 512

struct homa_workload {
    char name[WL_NAME_LEN];
    size_t n;
    uint32_t *size; /* strictly increasing */
    double *cdf;    /* strictly increasing (cdf[0] may be 0); cdf[n-1] == 1 exactly */
};

static _Thread_local char wl_errmsg[WL_ERRMSG_LEN];

#if defined(__GNUC__)
#define WL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define WL_PRINTF(a, b)
#endif

/* Records a formatted message for homa_workload_errmsg() and returns err. */
static int wl_fail(int err, const char *fmt, ...) WL_PRINTF(2, 3);
static int wl_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(wl_errmsg, sizeof(wl_errmsg), fmt, ap);
    va_end(ap);
    return err;
}

const char *homa_workload_errmsg(void)
{
    return wl_errmsg;
}

/* Reads the whole file into a NUL-terminated buffer. */
static int wl_read_file(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return wl_fail(HOMA_ERR_NOT_FOUND, "%s: no such file", path);
        return wl_fail(HOMA_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    size_t cap = 64 * 1024, used = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return wl_fail(HOMA_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (used == cap) {
            if (cap >= (size_t)WL_MAX_FILE_BYTES) {
                free(buf);
                fclose(f);
                return wl_fail(HOMA_ERR_INVAL, "%s: file larger than %ld bytes", path,
                               WL_MAX_FILE_BYTES);
            }
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return wl_fail(HOMA_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + used, 1, cap - used, f);
        used += got;
        if (got == 0) {
            if (ferror(f)) {
                int e = errno;
                free(buf);
                fclose(f);
                return wl_fail(HOMA_ERR_IO, "%s: read error: %s", path, strerror(e));
            }
            break;
        }
    }
    fclose(f);
    buf[used] = '\0';
    *text = buf;
    *len = used;
    return 0;
}

static int wl_is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Parses one data line [p, end) (no newline) into bytes and fraction.
 * Returns NULL on success or a static reason. */
static const char *wl_parse_line(const char *p, const char *end, uint32_t *bytes, double *frac)
{
    char tmp[256];
    size_t len = (size_t)(end - p);
    if (len >= sizeof(tmp)) return "line too long";
    memcpy(tmp, p, len);
    tmp[len] = '\0';

    char *s = tmp;
    while (wl_is_blank(*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return "expected '<bytes> <cumulative_fraction>' (bytes must be a non-negative integer)";
    errno = 0;
    char *e;
    unsigned long long b = strtoull(s, &e, 10);
    if (errno == ERANGE || b > HOMA_WORKLOAD_MAX_LENGTH) return "message length above 2^31-1";
    if (*e == '\0') return "missing cumulative fraction";
    if (!wl_is_blank(*e))
        return "expected '<bytes> <cumulative_fraction>' (bytes must be an integer)";
    if (b == 0) return "message length must be at least 1";
    s = e;
    while (wl_is_blank(*s))
        s++;
    if (*s == '\0') return "missing cumulative fraction";
    if (!(isdigit((unsigned char)*s) || *s == '.' || *s == '-' || *s == '+'))
        return "cumulative fraction is not a number";
    errno = 0;
    double f = strtod(s, &e);
    if (e == s || errno == ERANGE) return "cumulative fraction is not a number";
    if (!isfinite(f)) return "cumulative fraction is not finite";
    while (wl_is_blank(*e))
        e++;
    if (*e != '\0') return "unexpected text after the cumulative fraction";
    *bytes = (uint32_t)b;
    *frac = f;
    return NULL;
}

static void wl_set_name(homa_workload *w, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strlen(base);
    if (len > 4 && strcmp(base + len - 4, ".cdf") == 0) len -= 4;
    if (len >= sizeof(w->name)) len = sizeof(w->name) - 1;
    memcpy(w->name, base, len);
    w->name[len] = '\0';
}

/* Parses a whole CDF text.  path is used for messages and the name. */
static int wl_parse(const char *path, const char *text, size_t text_len, homa_workload **out)
{
    /* Upper bound on data lines: number of newlines + 1. */
    size_t max_lines = 1;
    for (size_t i = 0; i < text_len; i++)
        if (text[i] == '\n') max_lines++;

    homa_workload *w = calloc(1, sizeof(*w));
    if (!w) return wl_fail(HOMA_ERR_NOMEM, "%s: out of memory", path);
    w->size = malloc(max_lines * sizeof(*w->size));
    w->cdf = malloc(max_lines * sizeof(*w->cdf));
    if (!w->size || !w->cdf) {
        homa_workload_free(w);
        return wl_fail(HOMA_ERR_NOMEM, "%s: out of memory", path);
    }
    wl_set_name(w, path);

    const char *p = text, *stop = text + text_len;
    size_t lineno = 0, last_data_line = 0;
    int err = 0;
    while (p < stop) {
        const char *nl = memchr(p, '\n', (size_t)(stop - p));
        const char *end = nl ? nl : stop;
        lineno++;
        const char *q = p;
        while (q < end && wl_is_blank(*q))
            q++;
        if (q == end || *q == '#') {
            p = nl ? nl + 1 : stop;
            continue;
        }
        if (memchr(p, '\0', (size_t)(end - p))) {
            err = wl_fail(HOMA_ERR_INVAL, "%s:%zu: NUL byte in file", path, lineno);
            break;
        }
        uint32_t bytes;
        double frac;
        const char *why = wl_parse_line(p, end, &bytes, &frac);
        if (why) {
            err = wl_fail(HOMA_ERR_INVAL, "%s:%zu: %s", path, lineno, why);
            break;
        }
        if (frac < 0.0 || frac > 1.0) {
            err = wl_fail(HOMA_ERR_INVAL, "%s:%zu: cumulative fraction %g outside [0, 1]", path,
                          lineno, frac);
            break;
        }
        if (w->n > 0 && bytes <= w->size[w->n - 1]) {
            err = wl_fail(HOMA_ERR_INVAL,
                          "%s:%zu: message length %u not greater than the previous one (%u)", path,
                          lineno, (unsigned)bytes, (unsigned)w->size[w->n - 1]);
            break;
        }
        if (w->n > 0 && frac <= w->cdf[w->n - 1]) {
            err = wl_fail(HOMA_ERR_INVAL,
                          "%s:%zu: cumulative fraction %.10g not greater than the previous "
                          "one (%.10g)",
                          path, lineno, frac, w->cdf[w->n - 1]);
            break;
        }
        w->size[w->n] = bytes;
        w->cdf[w->n] = frac;
        w->n++;
        last_data_line = lineno;
        p = nl ? nl + 1 : stop;
    }
    if (!err && w->n == 0)
        err = wl_fail(HOMA_ERR_INVAL, "%s: no data lines (empty workload)", path);
    if (!err && fabs(w->cdf[w->n - 1] - 1.0) > WL_LAST_TOLERANCE)
        err = wl_fail(HOMA_ERR_INVAL, "%s:%zu: last cumulative fraction is %.10g, not 1", path,
                      last_data_line, w->cdf[w->n - 1]);
    if (err) {
        homa_workload_free(w);
        return err;
    }
    w->cdf[w->n - 1] = 1.0;
    *out = w;
    return 0;
}

int homa_workload_load_file(const char *path, homa_workload **out)
{
    if (!out) return wl_fail(HOMA_ERR_INVAL, "homa_workload_load_file: out is NULL");
    *out = NULL;
    if (!path || !*path) return wl_fail(HOMA_ERR_INVAL, "homa_workload_load_file: empty path");
    char *text;
    size_t len;
    int err = wl_read_file(path, &text, &len);
    if (err) return err;
    err = wl_parse(path, text, len, out);
    free(text);
    if (!err) wl_errmsg[0] = '\0';
    return err;
}

static int wl_valid_name_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.';
}

int homa_workload_load(const char *name, const char *data_dir, const char *default_dir,
                       homa_workload **out)
{
    if (!out) return wl_fail(HOMA_ERR_INVAL, "homa_workload_load: out is NULL");
    *out = NULL;
    if (!name || !*name) return wl_fail(HOMA_ERR_INVAL, "homa_workload_load: empty workload name");
    if (strchr(name, '/')) return homa_workload_load_file(name, out);

    /* Normalise the stem: drop a ".cdf" suffix. */
    char stem[WL_NAME_LEN];
    size_t len = strlen(name);
    if (len > 4 && strcmp(name + len - 4, ".cdf") == 0) len -= 4;
    if (len >= sizeof(stem)) return wl_fail(HOMA_ERR_INVAL, "workload name '%s' is too long", name);
    for (size_t i = 0; i < len; i++)
        if (!wl_valid_name_char(name[i]) || (i == 0 && name[i] == '.'))
            return wl_fail(HOMA_ERR_INVAL,
                           "invalid workload name '%s' (expected w1..w5, a file stem, or a path)",
                           name);
    memcpy(stem, name, len);
    stem[len] = '\0';
    char lower[WL_NAME_LEN];
    for (size_t i = 0; i <= len; i++)
        lower[i] = (char)tolower((unsigned char)stem[i]);
    int try_lower = strcmp(lower, stem) != 0;

    const char *env = getenv("HOMA_DATA_DIR");
    const char *dirs[3] = {data_dir, env, default_dir};
    static const char *const subdirs[2] = {"/workloads/", "/"};
    char tried[WL_ERRMSG_LEN];
    size_t tried_len = 0;
    tried[0] = '\0';
    char path[WL_PATH_LEN];

    for (int d = 0; d < 3; d++) {
        if (!dirs[d] || !*dirs[d]) continue;
        for (int s = 0; s < 2; s++) {
            for (int l = 0; l <= try_lower; l++) {
                int n = snprintf(path, sizeof(path), "%s%s%s.cdf", dirs[d], subdirs[s],
                                 l ? lower : stem);
                if (n < 0 || (size_t)n >= sizeof(path))
                    return wl_fail(HOMA_ERR_INVAL, "workload path for '%s' too long", name);
                char *text;
                size_t text_len;
                int err = wl_read_file(path, &text, &text_len);
                if (err == HOMA_ERR_NOT_FOUND) {
                    if (tried_len < sizeof(tried)) {
                        int m = snprintf(tried + tried_len, sizeof(tried) - tried_len, "%s%s",
                                         tried_len ? ", " : "", path);
                        if (m > 0) tried_len += (size_t)m;
                    }
                    continue;
                }
                if (err) return err;
                err = wl_parse(path, text, text_len, out);
                free(text);
                if (err) return err;
                wl_errmsg[0] = '\0';
                return 0;
            }
        }
    }
    if (tried_len == 0)
        return wl_fail(HOMA_ERR_NOT_FOUND,
                       "workload '%s': no data directory (pass one, or set HOMA_DATA_DIR)", name);
    return wl_fail(HOMA_ERR_NOT_FOUND, "workload '%s' not found (tried %s)", name, tried);
}

void homa_workload_free(homa_workload *w)
{
    if (!w) return;
    free(w->size);
    free(w->cdf);
    free(w);
}

const char *homa_workload_name(const homa_workload *w)
{
    return w->name;
}

size_t homa_workload_points(const homa_workload *w)
{
    return w->n;
}

int homa_workload_point(const homa_workload *w, size_t i, uint32_t *bytes, double *fraction)
{
    if (i >= w->n) return HOMA_ERR_INVAL;
    if (bytes) *bytes = w->size[i];
    if (fraction) *fraction = w->cdf[i];
    return 0;
}

uint32_t homa_workload_min_size(const homa_workload *w)
{
    /* The first point may carry probability 0; skip such a point. */
    return w->cdf[0] > 0.0 ? w->size[0] : w->size[1];
}

uint32_t homa_workload_max_size(const homa_workload *w)
{
    return w->size[w->n - 1];
}

static uint32_t wl_clamp(uint32_t v, uint32_t max_size)
{
    return (max_size != HOMA_WORKLOAD_NO_MAX && v > max_size) ? max_size : v;
}

/* Index of the first point with cdf > u (u < 1), i.e. the inverse CDF. */
static size_t wl_first_above(const homa_workload *w, double u)
{
    size_t lo = 0, hi = w->n - 1; /* cdf[n-1] == 1 > u */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Index of the first point with cdf >= p and cdf > 0. */
static size_t wl_first_at_least(const homa_workload *w, double p)
{
    size_t lo = 0, hi = w->n - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->cdf[mid] >= p && w->cdf[mid] > 0.0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

uint32_t homa_workload_sample(const homa_workload *w, double u, uint32_t max_size)
{
    if (!(u >= 0.0)) /* also catches NaN */
        u = 0.0;
    size_t i = u >= 1.0 ? w->n - 1 : wl_first_above(w, u);
    return wl_clamp(w->size[i], max_size);
}

double homa_workload_mean(const homa_workload *w, uint32_t max_size)
{
    double sum = 0.0, prev = 0.0;
    for (size_t i = 0; i < w->n; i++) {
        sum += (double)wl_clamp(w->size[i], max_size) * (w->cdf[i] - prev);
        prev = w->cdf[i];
    }
    return sum;
}

uint32_t homa_workload_quantile(const homa_workload *w, double p, uint32_t max_size)
{
    if (!(p >= 0.0)) p = 0.0;
    if (p > 1.0) p = 1.0;
    return wl_clamp(w->size[wl_first_at_least(w, p)], max_size);
}

double homa_workload_cdf(const homa_workload *w, uint32_t bytes)
{
    if (bytes < w->size[0]) return 0.0;
    /* Last point with size <= bytes. */
    size_t lo = 0, hi = w->n - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (w->size[mid] <= bytes)
            lo = mid;
        else
            hi = mid - 1;
    }
    return w->cdf[lo];
}
