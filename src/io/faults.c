/* Fault injection for the UDP driver: parsing of HOMA_FAULTS-style specs and
 * the per-packet decision.  The PRNG is private and seeded so a failing test
 * run can be replayed exactly with the same seed. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "io/io.h"

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int parse_prob(const char *val, size_t vlen, double *out)
{
    char buf[64];
    if (vlen == 0 || vlen >= sizeof(buf)) return -1;
    memcpy(buf, val, vlen);
    buf[vlen] = '\0';
    char *end;
    errno = 0;
    double d = strtod(buf, &end);
    /* Reject trailing junk, NaN and anything outside [0,1]: a typo such as
     * "drop=5" (meaning 5 %) must not silently drop every packet. */
    if (errno != 0 || *end != '\0' || !(d >= 0.0 && d <= 1.0)) return -1;
    *out = d;
    return 0;
}

static int parse_u64(const char *val, size_t vlen, uint64_t max, uint64_t *out)
{
    char buf[32];
    if (vlen == 0 || vlen >= sizeof(buf) || val[0] == '-' || val[0] == '+') return -1;
    memcpy(buf, val, vlen);
    buf[vlen] = '\0';
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 0);
    if (errno != 0 || *end != '\0' || v > max) return -1;
    *out = v;
    return 0;
}

static int key_is(const char *key, size_t klen, const char *name)
{
    return strlen(name) == klen && memcmp(key, name, klen) == 0;
}

int homa_faults_parse(const char *spec, homa_faults *out, char *err, size_t errlen)
{
    if (spec == NULL || out == NULL) {
        set_err(err, errlen, "no fault spec");
        return HOMA_ERR_INVAL;
    }
    homa_faults f;
    memset(&f, 0, sizeof(f));
    f.delay_us = 1000;
    const char *p = spec;
    while (*p != '\0') {
        const char *item = p;
        const char *comma = strchr(p, ',');
        size_t ilen = comma ? (size_t)(comma - p) : strlen(p);
        p = comma ? comma + 1 : p + ilen;
        /* Tolerate surrounding blanks and empty items ("drop=0.1,"). */
        while (ilen > 0 && (*item == ' ' || *item == '\t')) {
            item++;
            ilen--;
        }
        while (ilen > 0 && (item[ilen - 1] == ' ' || item[ilen - 1] == '\t'))
            ilen--;
        if (ilen == 0) continue;
        const char *eq = memchr(item, '=', ilen);
        if (eq == NULL) {
            set_err(err, errlen, "fault spec item '%.*s' is not key=value", (int)ilen, item);
            return HOMA_ERR_INVAL;
        }
        size_t klen = (size_t)(eq - item);
        const char *val = eq + 1;
        size_t vlen = ilen - klen - 1;
        int bad = 0;
        uint64_t u;
        if (key_is(item, klen, "drop")) {
            bad = parse_prob(val, vlen, &f.drop);
        } else if (key_is(item, klen, "dup")) {
            bad = parse_prob(val, vlen, &f.dup);
        } else if (key_is(item, klen, "reorder")) {
            bad = parse_prob(val, vlen, &f.reorder);
        } else if (key_is(item, klen, "delay")) {
            bad = parse_prob(val, vlen, &f.delay);
        } else if (key_is(item, klen, "delay_us")) {
            bad = parse_u64(val, vlen, 10000000, &u);
            f.delay_us = (uint32_t)u;
        } else if (key_is(item, klen, "seed")) {
            bad = parse_u64(val, vlen, UINT64_MAX, &u);
            f.seed = u;
        } else if (key_is(item, klen, "dir")) {
            if (vlen == 2 && memcmp(val, "tx", 2) == 0)
                f.dirs = HOMA_FAULT_TX;
            else if (vlen == 2 && memcmp(val, "rx", 2) == 0)
                f.dirs = HOMA_FAULT_RX;
            else if (vlen == 4 && memcmp(val, "both", 4) == 0)
                f.dirs = HOMA_FAULT_TX | HOMA_FAULT_RX;
            else
                bad = 1;
        } else {
            set_err(err, errlen,
                    "unknown fault key '%.*s' (known: drop, dup, reorder, delay, delay_us, "
                    "seed, dir)",
                    (int)klen, item);
            return HOMA_ERR_INVAL;
        }
        if (bad) {
            set_err(err, errlen,
                    "bad value '%.*s' for fault key '%.*s' (probabilities are in [0,1], dir is "
                    "tx, rx or both)",
                    (int)vlen, val, (int)klen, item);
            return HOMA_ERR_INVAL;
        }
    }
    if (f.drop + f.dup + f.reorder + f.delay > 1.0 + 1e-9) {
        set_err(err, errlen, "fault probabilities add up to more than 1");
        return HOMA_ERR_INVAL;
    }
    *out = f;
    if (err != NULL && errlen > 0) err[0] = '\0';
    return 0;
}

int homa_faults_none(const homa_faults *f)
{
    return f == NULL || (f->drop <= 0.0 && f->dup <= 0.0 && f->reorder <= 0.0 && f->delay <= 0.0);
}

/* splitmix64: tiny, fast, and good enough to draw fault decisions. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void homa_fault_init(homa_fault_state *st, const homa_faults *f, unsigned dir, uint64_t salt)
{
    memset(st, 0, sizeof(*st));
    if (homa_faults_none(f)) return;
    st->cfg = *f;
    unsigned dirs = f->dirs ? f->dirs : (HOMA_FAULT_TX | HOMA_FAULT_RX);
    if ((dirs & dir) == 0) return;
    uint64_t seed = f->seed;
    if (seed == 0 && getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed)) seed = 0x5eed;
    st->rng = seed ^ (salt * 0xD6E8FEB86659FD93ull) ^ dir;
    st->active = 1;
}

int homa_fault_decide(homa_fault_state *st)
{
    if (!st->active) return HOMA_FAULT_PASS;
    /* One draw per packet partitioned into disjoint ranges, so each
     * configured rate is exactly the probability of its outcome. */
    double u = (double)(rng_next(&st->rng) >> 11) * 0x1.0p-53;
    double edge = st->cfg.drop;
    if (u < edge) return HOMA_FAULT_DROP;
    edge += st->cfg.dup;
    if (u < edge) return HOMA_FAULT_DUP;
    edge += st->cfg.reorder;
    if (u < edge) return HOMA_FAULT_REORDER;
    edge += st->cfg.delay;
    if (u < edge) return HOMA_FAULT_DELAY;
    return HOMA_FAULT_PASS;
}
