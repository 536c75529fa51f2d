/* NCCL_HOMA_TC_PRIO parsing (tcmap.h). */
#include "tcmap.h"

#include <stdio.h>
#include <string.h>

/* Reads a decimal integer of at most 9 digits at *p. */
static int read_int(const char **p, int *out)
{
    const char *s = *p;
    int v = 0, digits = 0;
    while (*s >= '0' && *s <= '9') {
        if (++digits > 9) return -1;
        v = v * 10 + (*s++ - '0');
    }
    if (digits == 0) return -1;
    *p = s;
    *out = v;
    return 0;
}

int hn_tcmap_parse(const char *s, int levels, hn_tcmap *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (levels < 1 || levels > 8) levels = 8;
    const char *p = s;
    for (;;) {
        const char *entry = p;
        int tc, lo, hi;
        if (*p == '*') {
            tc = HN_TC_ANY;
            p++;
        } else if (read_int(&p, &tc) != 0) {
            snprintf(err, errlen, "entry %d: expected a traffic class (0..999999999) or *",
                     out->n + 1);
            return -1;
        }
        if (*p++ != ':' || read_int(&p, &lo) != 0) {
            snprintf(err, errlen, "entry %d: expected TC:LO or TC:LO-HI", out->n + 1);
            return -1;
        }
        hi = lo;
        if (*p == '-') {
            p++;
            if (read_int(&p, &hi) != 0) {
                snprintf(err, errlen, "entry %d: expected a level after '-'", out->n + 1);
                return -1;
            }
        }
        if (lo > hi || hi >= levels) {
            snprintf(err, errlen, "entry %d: levels must satisfy 0 <= LO <= HI <= %d", out->n + 1,
                     levels - 1);
            return -1;
        }
        if (*p != ',' && *p != '\0') {
            snprintf(err, errlen, "entry %d: unexpected '%c'", out->n + 1, *p);
            return -1;
        }
        for (int i = 0; i < out->n; i++)
            if (out->tc[i] == tc) {
                snprintf(err, errlen, "entry %d: class %.*s given twice", out->n + 1,
                         (int)(strchr(entry, ':') - entry), entry);
                return -1;
            }
        if (out->n == HN_TC_MAX) {
            snprintf(err, errlen, "more than %d entries", HN_TC_MAX);
            return -1;
        }
        out->tc[out->n] = tc;
        out->lo[out->n] = (uint8_t)lo;
        out->hi[out->n] = (uint8_t)hi;
        out->n++;
        if (*p == '\0') return 0;
        p++; /* ',' */
    }
}

int hn_tcmap_lookup(const hn_tcmap *m, int tc, int *lo, int *hi)
{
    int any = -1;
    for (int i = 0; i < m->n; i++) {
        if (m->tc[i] == tc && tc >= 0) {
            *lo = m->lo[i];
            *hi = m->hi[i];
            return 1;
        }
        if (m->tc[i] == HN_TC_ANY) any = i;
    }
    if (any < 0) return 0;
    *lo = m->lo[any];
    *hi = m->hi[any];
    return 1;
}
