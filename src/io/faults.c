/* Fault injection for the UDP driver: parsing of HOMA_FAULTS-style specs and
 * the per-packet decision.  The PRNG is private and seeded so a failing test
 * run can be replayed exactly with the same seed.  docs/api.md documents
 * every key; the model (order of the checks) is:
 *   1. blackout window: the packet is lost;
 *   2. drop_<class>: an independent loss draw per class the packet is in;
 *   3. drop (with burst: a Gilbert-Elliott chain) for packets of
 *      drop_types, then one draw partitioned among dup, reorder and delay. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "io/fault_class.h"
#include "io/io.h"

#define MAX_DELAY_US 10000000u  /* 10 s */
#define MAX_WINDOW_MS 86400000u /* one day */
#define MAX_REORDER_DEPTH 1000u /* the driver holds at most 4,096 packets */
#define MAX_BURST 1e6

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Copies a value into a NUL-terminated buffer; rejects empty, overlong and
 * blank-led values (strtod/strtoull would skip the blanks). */
static int value_buf(const char *val, size_t vlen, char *buf, size_t cap)
{
    if (vlen == 0 || vlen >= cap || val[0] == ' ' || val[0] == '\t') return -1;
    memcpy(buf, val, vlen);
    buf[vlen] = '\0';
    return 0;
}

static int parse_real(const char *val, size_t vlen, double lo, double hi, double *out)
{
    char buf[64];
    if (value_buf(val, vlen, buf, sizeof(buf)) != 0) return -1;
    char *end;
    errno = 0;
    double d = strtod(buf, &end);
    /* Reject trailing junk, NaN and anything out of range: a typo such as
     * "drop=5" (meaning 5 %) must not silently drop every packet. */
    if (errno != 0 || *end != '\0' || !(d >= lo && d <= hi)) return -1;
    *out = d;
    return 0;
}

static int parse_prob(const char *val, size_t vlen, double *out)
{
    return parse_real(val, vlen, 0.0, 1.0, out);
}

/* Decimal, or hexadecimal with 0x (never octal: "010" is ten). */
static int parse_u64(const char *val, size_t vlen, uint64_t max, uint64_t *out)
{
    char buf[32];
    if (value_buf(val, vlen, buf, sizeof(buf)) != 0 || buf[0] == '-' || buf[0] == '+') return -1;
    int base = 10;
    const char *digits = buf;
    if (buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X')) {
        base = 16;
        digits = buf + 2;
    }
    if (*digits == '\0' || *digits == '-' || *digits == '+' || *digits == ' ') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(digits, &end, base);
    if (errno != 0 || *end != '\0' || v > max) return -1;
    *out = v;
    return 0;
}

static int key_is(const char *key, size_t klen, const char *name)
{
    return strlen(name) == klen && memcmp(key, name, klen) == 0;
}

/* Names of the packet classes, as used in drop_type and drop_<class>. */
static const char *const class_names[HOMA_FAULT_CLASS_COUNT] = {
    [HOMA_FAULT_CLASS_DATA] = "data",           [HOMA_FAULT_CLASS_LAST_DATA] = "last_data",
    [HOMA_FAULT_CLASS_GRANT] = "grant",         [HOMA_FAULT_CLASS_RESEND] = "resend",
    [HOMA_FAULT_CLASS_RPC_UNKNOWN] = "unknown", [HOMA_FAULT_CLASS_BUSY] = "busy",
    [HOMA_FAULT_CLASS_CUTOFFS] = "cutoffs",     [HOMA_FAULT_CLASS_FREEZE] = "freeze",
    [HOMA_FAULT_CLASS_NEED_ACK] = "need_ack",   [HOMA_FAULT_CLASS_ACK] = "ack",
};

static int class_lookup(const char *name, size_t len)
{
    for (int c = 0; c < HOMA_FAULT_CLASS_COUNT; c++)
        if (key_is(name, len, class_names[c])) return c;
    return -1;
}

/* "grant+resend": a '+'-separated list of class names. */
static int parse_types(const char *val, size_t vlen, unsigned *out)
{
    unsigned mask = 0;
    size_t i = 0;
    if (vlen == 0) return -1;
    while (i <= vlen) {
        size_t j = i;
        while (j < vlen && val[j] != '+')
            j++;
        int c = class_lookup(val + i, j - i);
        if (c < 0) return -1;
        mask |= 1u << c;
        i = j + 1;
    }
    *out = mask;
    return 0;
}

enum key_id {
    K_DROP,
    K_DUP,
    K_REORDER,
    K_DELAY,
    K_DELAY_US,
    K_JITTER_US,
    K_REORDER_DEPTH,
    K_BURST,
    K_DROP_TYPE,
    K_BLACKOUT_MS,
    K_BLACKOUT_EVERY_MS,
    K_BLACKOUT_START_MS,
    K_SEED,
    K_DIR,
    K_CLASS0, /* drop_<class>: K_CLASS0 + class */
    K_COUNT = K_CLASS0 + HOMA_FAULT_CLASS_COUNT
};

static const char *const key_names[K_CLASS0] = {
    "drop",          "dup",   "reorder",   "delay",       "delay_us",          "jitter_us",
    "reorder_depth", "burst", "drop_type", "blackout_ms", "blackout_every_ms", "blackout_start_ms",
    "seed",          "dir",
};

static int key_lookup(const char *key, size_t klen)
{
    for (int k = 0; k < K_CLASS0; k++)
        if (key_is(key, klen, key_names[k])) return k;
    if (klen > 5 && memcmp(key, "drop_", 5) == 0) {
        int c = class_lookup(key + 5, klen - 5);
        if (c >= 0) return K_CLASS0 + c;
    }
    return -1;
}

static const char *value_hint(int k)
{
    switch (k) {
    case K_DELAY_US:
    case K_JITTER_US:
        return "microseconds, 0..10000000";
    case K_REORDER_DEPTH:
        return "packets, 1..1000";
    case K_BURST:
        return "mean burst length in packets, 1..1e6";
    case K_DROP_TYPE:
        return "'+'-separated list of data, last_data, grant, resend, unknown, busy, cutoffs, "
               "freeze, need_ack, ack";
    case K_BLACKOUT_MS:
    case K_BLACKOUT_EVERY_MS:
    case K_BLACKOUT_START_MS:
        return "milliseconds, 0..86400000";
    case K_SEED:
        return "unsigned 64-bit integer";
    case K_DIR:
        return "tx, rx or both";
    default:
        return "a probability in [0,1]";
    }
}

int homa_fault_ge_params(double drop, double burst, double *p_bad, double *p_good)
{
    if (!(burst <= MAX_BURST)) return -1;
    return homa_fault_ge(drop, burst, p_bad, p_good);
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
    unsigned char seen[K_COUNT];
    memset(seen, 0, sizeof(seen));
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
        int k = key_lookup(item, klen);
        if (k < 0) {
            set_err(err, errlen,
                    "unknown fault key '%.*s' (known: drop, dup, reorder, delay, delay_us, "
                    "jitter_us, reorder_depth, burst, drop_type, drop_<type>, blackout_ms, "
                    "blackout_every_ms, blackout_start_ms, seed, dir)",
                    (int)klen, item);
            return HOMA_ERR_INVAL;
        }
        if (seen[k]) {
            set_err(err, errlen, "fault key '%.*s' given twice", (int)klen, item);
            return HOMA_ERR_INVAL;
        }
        seen[k] = 1;
        int bad = 0;
        uint64_t u = 0;
        switch (k) {
        case K_DROP:
            bad = parse_prob(val, vlen, &f.drop);
            break;
        case K_DUP:
            bad = parse_prob(val, vlen, &f.dup);
            break;
        case K_REORDER:
            bad = parse_prob(val, vlen, &f.reorder);
            break;
        case K_DELAY:
            bad = parse_prob(val, vlen, &f.delay);
            break;
        case K_DELAY_US:
            bad = parse_u64(val, vlen, MAX_DELAY_US, &u);
            f.delay_us = (uint32_t)u;
            break;
        case K_JITTER_US:
            bad = parse_u64(val, vlen, MAX_DELAY_US, &u);
            f.jitter_us = (uint32_t)u;
            break;
        case K_REORDER_DEPTH:
            bad = parse_u64(val, vlen, MAX_REORDER_DEPTH, &u) || u == 0;
            f.reorder_depth = (uint32_t)u;
            break;
        case K_BURST:
            bad = parse_real(val, vlen, 1.0, MAX_BURST, &f.burst);
            break;
        case K_DROP_TYPE:
            bad = parse_types(val, vlen, &f.drop_types);
            break;
        case K_BLACKOUT_MS:
        case K_BLACKOUT_EVERY_MS:
        case K_BLACKOUT_START_MS:
            bad = parse_u64(val, vlen, MAX_WINDOW_MS, &u);
            u *= 1000000u;
            if (k == K_BLACKOUT_MS) f.blackout_ns = u;
            if (k == K_BLACKOUT_EVERY_MS) f.blackout_every_ns = u;
            if (k == K_BLACKOUT_START_MS) f.blackout_start_ns = u;
            break;
        case K_SEED:
            bad = parse_u64(val, vlen, UINT64_MAX, &f.seed);
            break;
        case K_DIR:
            if (vlen == 2 && memcmp(val, "tx", 2) == 0)
                f.dirs = HOMA_FAULT_TX;
            else if (vlen == 2 && memcmp(val, "rx", 2) == 0)
                f.dirs = HOMA_FAULT_RX;
            else if (vlen == 4 && memcmp(val, "both", 4) == 0)
                f.dirs = HOMA_FAULT_TX | HOMA_FAULT_RX;
            else
                bad = 1;
            break;
        default:
            bad = parse_prob(val, vlen, &f.drop_class[k - K_CLASS0]);
            break;
        }
        if (bad) {
            set_err(err, errlen, "bad value '%.*s' for fault key '%.*s' (expected %s)", (int)vlen,
                    val, (int)klen, item, value_hint(k));
            return HOMA_ERR_INVAL;
        }
    }
    /* drop_type alone means "lose every packet of these types". */
    if (seen[K_DROP_TYPE] && !seen[K_DROP]) f.drop = 1.0;
    if (f.drop + f.dup + f.reorder + f.delay > 1.0 + 1e-9) {
        set_err(err, errlen,
                "fault probabilities drop + dup + reorder + delay add up to more than 1");
        return HOMA_ERR_INVAL;
    }
    double pb, pg;
    if (f.burst > 0 && homa_fault_ge_params(f.drop, f.burst, &pb, &pg) != 0) {
        set_err(err, errlen,
                "burst=%g cannot give drop=%g: a mean burst of B packets allows at most a loss "
                "rate of B / (1 + B) (and less than 1)",
                f.burst, f.drop);
        return HOMA_ERR_INVAL;
    }
    if (f.jitter_us > f.delay_us) {
        set_err(err, errlen,
                "jitter_us (%u) must not exceed delay_us (%u): delays are uniform "
                "in delay_us +- jitter_us",
                (unsigned)f.jitter_us, (unsigned)f.delay_us);
        return HOMA_ERR_INVAL;
    }
    if ((seen[K_BLACKOUT_EVERY_MS] || seen[K_BLACKOUT_START_MS]) && f.blackout_ns == 0) {
        set_err(err, errlen, "blackout_every_ms and blackout_start_ms need blackout_ms > 0");
        return HOMA_ERR_INVAL;
    }
    if (f.blackout_every_ns != 0 && f.blackout_every_ns <= f.blackout_ns) {
        set_err(err, errlen,
                "blackout_every_ms must be longer than blackout_ms (else every "
                "packet is lost: use drop=1)");
        return HOMA_ERR_INVAL;
    }
    *out = f;
    if (err != NULL && errlen > 0) err[0] = '\0';
    return 0;
}

int homa_faults_none(const homa_faults *f)
{
    if (f == NULL) return 1;
    for (int c = 0; c < HOMA_FAULT_CLASS_COUNT; c++)
        if (f->drop_class[c] > 0.0) return 0;
    return f->drop <= 0.0 && f->dup <= 0.0 && f->reorder <= 0.0 && f->delay <= 0.0 &&
           f->blackout_ns == 0;
}

/* splitmix64: tiny, fast, and good enough to draw fault decisions. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

void homa_fault_init(homa_fault_state *st, const homa_faults *f, unsigned dir, uint64_t salt,
                     uint64_t origin_ns)
{
    memset(st, 0, sizeof(*st));
    if (homa_faults_none(f)) return;
    st->cfg = *f;
    unsigned dirs = f->dirs ? f->dirs : (HOMA_FAULT_TX | HOMA_FAULT_RX);
    if ((dirs & dir) == 0) return;
    uint64_t seed = f->seed;
    if (seed == 0 && getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed)) seed = 0x5eed;
    st->rng = seed ^ (salt * 0xD6E8FEB86659FD93ull) ^ dir;
    st->origin = origin_ns;
    if (f->burst > 0 && homa_fault_ge_params(f->drop, f->burst, &st->p_bad, &st->p_good) == 0) {
        /* Start in the stationary distribution so the rate holds from the
         * first packet. */
        st->bad = rng_uniform(&st->rng) < f->drop;
    } else {
        st->cfg.burst = 0; /* a struct filled by hand with an impossible burst */
    }
    st->active = 1;
}

static int in_blackout(const homa_fault_state *st, uint64_t now)
{
    const homa_faults *f = &st->cfg;
    if (f->blackout_ns == 0 || now < st->origin + f->blackout_start_ns) return 0;
    uint64_t t = now - st->origin - f->blackout_start_ns;
    if (f->blackout_every_ns != 0) t %= f->blackout_every_ns;
    return t < f->blackout_ns;
}

int homa_fault_decide(homa_fault_state *st, uint64_t now, const uint8_t *pkt, size_t len,
                      uint64_t *hold_ns, uint32_t *wait)
{
    if (!st->active) return HOMA_FAULT_PASS;
    const homa_faults *f = &st->cfg;
    if (in_blackout(st, now)) {
        st->drops_blackout++;
        return HOMA_FAULT_DROP;
    }
    unsigned cls = homa_fault_classify(pkt, len);
    /* Per-class draws only for configured classes, so specs without them
     * keep the random stream they always had. */
    for (unsigned m = cls; m != 0; m &= m - 1) {
        int c = __builtin_ctz(m);
        if (f->drop_class[c] > 0.0 && rng_uniform(&st->rng) < f->drop_class[c]) {
            st->drops_class++;
            return HOMA_FAULT_DROP;
        }
    }
    int eligible = f->drop_types == 0 || (cls & f->drop_types) != 0;
    double u;
    if (f->burst > 0) {
        if (eligible && f->drop > 0) {
            double t = rng_uniform(&st->rng);
            st->bad = st->bad ? !(t < st->p_good) : t < st->p_bad;
            if (st->bad) {
                st->drops_random++;
                return HOMA_FAULT_DROP;
            }
        }
        /* The rest of the partition, scaled so dup, reorder and delay stay
         * unconditional rates as without burst. */
        u = f->drop + (1.0 - f->drop) * rng_uniform(&st->rng);
    } else {
        /* One draw per packet partitioned into disjoint ranges, so each
         * configured rate is exactly the probability of its outcome. */
        u = rng_uniform(&st->rng);
        if (u < f->drop) {
            if (!eligible) return HOMA_FAULT_PASS;
            st->drops_random++;
            return HOMA_FAULT_DROP;
        }
    }
    double edge = f->drop + f->dup;
    if (u < edge) return HOMA_FAULT_DUP;
    int act = HOMA_FAULT_PASS;
    edge += f->reorder;
    if (u < edge) {
        act = HOMA_FAULT_REORDER;
    } else {
        edge += f->delay;
        if (u < edge) act = HOMA_FAULT_DELAY;
    }
    if (act != HOMA_FAULT_PASS) {
        uint64_t us = f->delay_us;
        if (f->jitter_us > 0) {
            uint64_t span = 2ull * f->jitter_us + 1;
            us = us - f->jitter_us + rng_next(&st->rng) % span;
        }
        if (hold_ns) *hold_ns = us * 1000u;
        if (wait) *wait = f->reorder_depth ? f->reorder_depth : 1;
    }
    return act;
}
