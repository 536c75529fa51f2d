/* The queue of packets held back by fault injection (faultq.h). */
#include <stdlib.h>
#include <string.h>

#include "io/faultq.h"

static void free_list(homa_faultq_pkt *p)
{
    while (p != NULL) {
        homa_faultq_pkt *next = p->next;
        free(p);
        p = next;
    }
}

static uint64_t min_due(const homa_faultq_pkt *p)
{
    uint64_t m = UINT64_MAX;
    for (; p != NULL; p = p->next)
        if (p->due < m) m = p->due;
    return m;
}

static void update_due(homa_faultq *q)
{
    __atomic_store_n(&q->due, min_due(q->held), __ATOMIC_RELAXED);
}

void homa_faultq_init(homa_faultq *q, int max_pkts, size_t max_bytes)
{
    memset(q, 0, sizeof(*q));
    q->max_pkts = max_pkts;
    q->max_bytes = max_bytes;
    q->due = UINT64_MAX;
}

int homa_faultq_hold(homa_faultq *q, uint64_t due, uint32_t depth, const homa_addr *addr,
                     uint16_t port, uint8_t tos, const uint8_t *a, size_t alen, const uint8_t *b,
                     size_t blen)
{
    size_t len = alen + blen;
    if (q->n >= q->max_pkts || len > UINT32_MAX) return HOMA_ERR_NOMEM;
    if (q->max_bytes != 0 && (len > q->max_bytes || q->bytes > q->max_bytes - len))
        return HOMA_ERR_NOMEM;
    homa_faultq_pkt *p = malloc(sizeof(*p) + len);
    if (p == NULL) return HOMA_ERR_NOMEM;
    p->next = NULL;
    p->due = due;
    p->wait = depth;
    p->addr = *addr;
    p->port = port;
    p->tos = tos;
    p->hdr_len = (uint32_t)alen;
    p->len = (uint32_t)len;
    if (alen > 0) memcpy(p->data, a, alen);
    if (blen > 0) memcpy(p->data + alen, b, blen);
    /* Appended: packets released together leave oldest first. */
    homa_faultq_pkt **pp = &q->held;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = p;
    q->n++;
    q->bytes += len;
    update_due(q);
    return 0;
}

int homa_faultq_release(homa_faultq *q, uint64_t now, int after_pass, homa_faultq_emit_fn emit,
                        void *ctx)
{
    if (q->held == NULL) return 0;
    int released = 0;
    homa_faultq_pkt **pp = &q->held;
    while (*pp != NULL) {
        homa_faultq_pkt *p = *pp;
        /* A reordered packet counts the passing packet even when its time
         * has come too. */
        if ((after_pass && p->wait > 0 && --p->wait == 0) || p->due <= now) {
            *pp = p->next;
            q->n--;
            q->bytes -= p->len;
            p->next = NULL;
            emit(ctx, p);
            p->next = q->released;
            q->released = p;
            released++;
        } else {
            pp = &p->next;
        }
    }
    update_due(q);
    return released;
}

uint64_t homa_faultq_next_deadline(const homa_faultq *q)
{
    return __atomic_load_n(&q->due, __ATOMIC_RELAXED);
}

void homa_faultq_reclaim(homa_faultq *q)
{
    free_list(q->released);
    q->released = NULL;
}

void homa_faultq_free(homa_faultq *q)
{
    free_list(q->held);
    free_list(q->released);
    q->held = NULL;
    q->released = NULL;
    q->n = 0;
    q->bytes = 0;
    __atomic_store_n(&q->due, UINT64_MAX, __ATOMIC_RELAXED);
}
