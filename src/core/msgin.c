/* Reassembly of an incoming message from DATA packets that may arrive in any
 * order, duplicated or overlapping.  Missing bytes below the highest byte
 * received are kept as a sorted list of gaps, which stays short in practice
 * (one gap per lost packet in flight) and is what RESEND needs. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int homa_msgin_init(struct homa_msgin *m, uint32_t length, uint32_t granted)
{
    uint8_t *buf = malloc(length ? length : 1);
    if (!buf) return HOMA_ERR_NOMEM;
    homa_msgin_init_buf(m, buf, length, granted);
    return 0;
}

void homa_msgin_init_buf(struct homa_msgin *m, uint8_t *buf, uint32_t length, uint32_t granted)
{
    memset(m, 0, sizeof(*m));
    m->buf = buf;
    m->length = length;
    m->granted = granted < length ? granted : length;
    m->active = true;
}

void homa_msgin_destroy(struct homa_msgin *m)
{
    free(m->buf);
    free(m->gaps);
    memset(m, 0, sizeof(*m));
}

/* Index of the first gap that ends after offset (gaps are sorted). */
static uint32_t first_gap_after(const struct homa_msgin *m, uint32_t offset)
{
    uint32_t lo = 0, hi = m->num_gaps;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (m->gaps[mid].end <= offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int gap_insert(struct homa_msgin *m, uint32_t idx, uint32_t start, uint32_t end, uint64_t at)
{
    if (m->num_gaps == m->cap_gaps) {
        if (m->cap_gaps >= HOMA_MAX_GAPS) return -1;
        uint32_t cap = m->cap_gaps ? m->cap_gaps * 2 : 4;
        struct homa_gap *g = realloc(m->gaps, cap * sizeof(*g));
        if (!g) return -1;
        m->gaps = g;
        m->cap_gaps = cap;
    }
    memmove(&m->gaps[idx + 1], &m->gaps[idx], (m->num_gaps - idx) * sizeof(*m->gaps));
    m->gaps[idx].start = start;
    m->gaps[idx].end = end;
    m->gaps[idx].at = at;
    m->num_gaps++;
    return 0;
}

static void gap_remove(struct homa_msgin *m, uint32_t idx)
{
    memmove(&m->gaps[idx], &m->gaps[idx + 1], (m->num_gaps - idx - 1) * sizeof(*m->gaps));
    m->num_gaps--;
}

/* Copies len bytes to buf + at, unless they are already there: a payload
 * received in place (direct receive) is its own source. */
static void place(struct homa_msgin *m, uint32_t at, const uint8_t *src, uint32_t len)
{
    if (src != m->buf + at) memcpy(m->buf + at, src, len);
}

int homa_msgin_add(struct homa_msgin *m, uint64_t now, uint32_t offset, const uint8_t *data,
                   uint32_t len, uint32_t *added)
{
    uint32_t end = offset + len;
    uint32_t got = 0;
    *added = 0;
    if (len > m->seg_size) m->seg_size = len;
    if (len == 0) return HOMA_MSGIN_DUP;

    /* Part beyond recv_end: all new; the hole before it becomes a gap.  Do
     * the gap bookkeeping first so a refused gap leaves no state behind. */
    if (end > m->recv_end) {
        uint32_t s = offset > m->recv_end ? offset : m->recv_end;
        if (offset > m->recv_end && gap_insert(m, m->num_gaps, m->recv_end, offset, now) != 0)
            return HOMA_MSGIN_NOMEM;
        place(m, s, data + (s - offset), end - s);
        got += end - s;
        m->recv_end = end;
        end = s; /* what remains to examine lies below the old recv_end */
    }

    /* Part below the old recv_end: only bytes inside gaps are new. */
    if (offset < end) {
        uint32_t i = first_gap_after(m, offset);
        while (i < m->num_gaps && m->gaps[i].start < end) {
            struct homa_gap *g = &m->gaps[i];
            uint32_t s = offset > g->start ? offset : g->start;
            uint32_t e = end < g->end ? end : g->end;
            place(m, s, data + (s - offset), e - s);
            got += e - s;
            if (s == g->start && e == g->end) {
                gap_remove(m, i);
                continue;
            }
            if (s == g->start) {
                g->start = e;
            } else if (e == g->end) {
                g->end = s;
            } else {
                /* the packet splits the gap in two */
                uint32_t old_end = g->end;
                g->end = s;
                if (gap_insert(m, i + 1, e, old_end, g->at) != 0) {
                    /* cannot track the split: forget the copied bytes */
                    g->end = old_end;
                    got -= e - s;
                    m->received += got;
                    *added = got;
                    return HOMA_MSGIN_NOMEM;
                }
                i++;
            }
            i++;
        }
    }
    m->received += got;
    *added = got;
    return got ? HOMA_MSGIN_NEW : HOMA_MSGIN_DUP;
}

bool homa_msgin_missing(const struct homa_msgin *m, uint32_t offset, uint32_t len)
{
    if (!m->active || !m->buf || len == 0 || offset > m->length || len > m->length - offset)
        return false;
    if (offset >= m->recv_end) return true;
    /* Below recv_end only gaps are missing, and the byte just below
     * recv_end was received, so the range must fit inside one gap. */
    uint32_t lo = first_gap_after(m, offset);
    return lo < m->num_gaps && m->gaps[lo].start <= offset && offset + len <= m->gaps[lo].end;
}

bool homa_msgin_first_missing(const struct homa_msgin *m, uint32_t limit, uint32_t *start,
                              uint32_t *end)
{
    if (m->num_gaps > 0 && m->gaps[0].start < limit) {
        *start = m->gaps[0].start;
        *end = m->gaps[0].end < limit ? m->gaps[0].end : limit;
        return true;
    }
    if (m->recv_end < limit) {
        *start = m->recv_end;
        *end = limit;
        return true;
    }
    return false;
}
