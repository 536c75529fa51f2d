/* The homad shared-memory protocol: layout, rings and validation
 * (homad_proto.h, docs/homad.md). */
#include "rt/homad_proto.h"

#include <string.h>

_Static_assert(sizeof(struct homad_cmd) == 64, "command entries are 64 bytes");
_Static_assert(sizeof(struct homad_cqe) == 64, "completion entries are 64 bytes");
_Static_assert(sizeof(struct homad_hdr) <= HOMAD_HDR_BYTES, "header fits its page");
_Static_assert(sizeof(struct homad_ctrl) <= HOMAD_CTRL_BYTES, "ring control fits its page");
_Static_assert(sizeof(struct homad_ctrs) <= HOMAD_CTRS_BYTES, "counters fit their area");

static int pow2(uint32_t n)
{
    return n != 0 && (n & (n - 1)) == 0;
}

static uint64_t page_up(uint64_t n)
{
    return (n + 4095u) & ~(uint64_t)4095u;
}

int homad_layout(struct homad_hdr *h, uint32_t ncmd, uint32_t ncq, uint32_t ntx, uint32_t nrx,
                 uint64_t slot_size)
{
    if (!pow2(ncmd) || !pow2(ncq) || ncmd > HOMAD_MAX_RING || ncq > HOMAD_MAX_RING || ntx == 0 ||
        nrx == 0 || ntx > HOMAD_MAX_SLOTS || nrx > HOMAD_MAX_SLOTS || slot_size == 0 ||
        slot_size > HOMAD_MAX_SLOT_SIZE)
        return HOMA_ERR_INVAL;
    memset(h, 0, sizeof(*h));
    h->magic = HOMAD_MAGIC;
    h->version = HOMAD_VERSION;
    h->ncmd = ncmd;
    h->ncq = ncq;
    h->ntx = ntx;
    h->nrx = nrx;
    h->slot_size = page_up(slot_size);
    uint64_t off = HOMAD_HDR_BYTES;
    h->off_ctrl = off;
    off += HOMAD_CTRL_BYTES;
    h->off_ctrs = off;
    off += HOMAD_CTRS_BYTES;
    h->off_cmd = off;
    off = page_up(off + (uint64_t)ncmd * sizeof(struct homad_cmd));
    h->off_cq = off;
    off = page_up(off + (uint64_t)ncq * sizeof(struct homad_cqe));
    h->off_tx = off;
    off += (uint64_t)ntx * h->slot_size;
    h->off_rx = off;
    off += (uint64_t)nrx * h->slot_size;
    h->total = off;
    return 0;
}

int homad_hdr_check(const struct homad_hdr *h, uint64_t region_bytes)
{
    struct homad_hdr want;
    if (h->magic != HOMAD_MAGIC || h->version != HOMAD_VERSION) return HOMA_ERR_INVAL;
    if (homad_layout(&want, h->ncmd, h->ncq, h->ntx, h->nrx, h->slot_size) != 0)
        return HOMA_ERR_INVAL;
    /* The offsets must be the ones the sizes give: nothing else is trusted. */
    if (want.slot_size != h->slot_size || want.off_ctrl != h->off_ctrl ||
        want.off_ctrs != h->off_ctrs || want.off_cmd != h->off_cmd || want.off_cq != h->off_cq ||
        want.off_tx != h->off_tx || want.off_rx != h->off_rx || want.total != h->total ||
        h->total > region_bytes)
        return HOMA_ERR_INVAL;
    return 0;
}

void homad_view_init(struct homad_view *v, void *base, const struct homad_hdr *h)
{
    uint8_t *b = base;
    v->base = b;
    v->ctrl = (struct homad_ctrl *)(b + h->off_ctrl);
    v->ctrs = (struct homad_ctrs *)(b + h->off_ctrs);
    v->cmd = (struct homad_cmd *)(b + h->off_cmd);
    v->cq = (struct homad_cqe *)(b + h->off_cq);
    v->tx = b + h->off_tx;
    v->rx = b + h->off_rx;
    v->ncmd = h->ncmd;
    v->ncq = h->ncq;
    v->ntx = h->ntx;
    v->nrx = h->nrx;
    v->slot_size = h->slot_size;
    v->max_msg = h->cfg.max_message_length;
}

/* ------------------------------------------------------------ daemon side */

int homad_cmd_avail(const struct homad_view *v, uint32_t tail)
{
    uint32_t head = __atomic_load_n(&v->ctrl->cmd_head, __ATOMIC_ACQUIRE);
    uint32_t n = head - tail; /* free-running indexes: wraps correctly */
    return n <= v->ncmd ? (int)n : -1;
}

void homad_cmd_copy(const struct homad_view *v, uint32_t tail, struct homad_cmd *out)
{
    /* One copy into private memory; only the copy is ever looked at.  The
     * bytes are volatile to the compiler's eyes only in the sense that the
     * app may change them meanwhile: a torn copy is just a bad command. */
    memcpy(out, &v->cmd[tail & (v->ncmd - 1)], sizeof(*out));
}

void homad_cmd_consumed(const struct homad_view *v, uint32_t tail)
{
    __atomic_store_n(&v->ctrl->cmd_tail, tail, __ATOMIC_RELEASE);
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0) return 0;
    return 1;
}

int homad_cmd_check(const struct homad_view *v, const struct homad_cmd *c)
{
    if (c->op == 0 || c->op >= HOMAD_OP__COUNT || c->rsvd != 0 || !all_zero(c->pad, sizeof(c->pad)))
        return HOMA_ERR_INVAL;
    if (c->flags != 0 &&
        (c->op != HOMAD_OP_SEND || (c->flags & ~0xbfu) != 0 || !(c->flags & HOMAD_SEND_PRIO_ON) ||
         HOMAD_SEND_PRIO_LO(c->flags) > HOMAD_SEND_PRIO_HI(c->flags)))
        return HOMA_ERR_INVAL;
    switch (c->op) {
    case HOMAD_OP_SEND:
    case HOMAD_OP_REPLY:
        if (c->slot >= v->ntx) return HOMA_ERR_INVAL;
        if (c->len > v->slot_size || c->len > v->max_msg) return HOMA_ERR_MSGSIZE;
        if (c->port == 0 || c->peer_port == 0) return HOMA_ERR_INVAL;
        if (c->op == HOMAD_OP_REPLY && (c->id & 1) == 0) return HOMA_ERR_INVAL;
        if (c->op == HOMAD_OP_SEND && c->id != 0) return HOMA_ERR_INVAL;
        return 0;
    case HOMAD_OP_RELEASE:
        return c->slot < v->nrx && c->port == 0 && c->len == 0 ? 0 : HOMA_ERR_INVAL;
    case HOMAD_OP_OPEN:
    case HOMAD_OP_COUNTERS:
    case HOMAD_OP_STATS:
        return c->slot == 0 && c->len == 0 && c->id == 0 ? 0 : HOMA_ERR_INVAL;
    case HOMAD_OP_CLASS:
        if (c->port == 0 || c->slot != 0 || c->id != 0 || c->len >= HOMA_SCHED_CLASSES)
            return HOMA_ERR_INVAL;
        return 0;
    case HOMAD_OP_CLOSE:
    case HOMAD_OP_ABORT:
    case HOMAD_OP_LINGER:
    case HOMAD_OP_FD:
        if (c->port == 0 || c->slot != 0 || c->len != 0) return HOMA_ERR_INVAL;
        if (c->op == HOMAD_OP_ABORT && c->id == 0) return HOMA_ERR_INVAL;
        return 0;
    default:
        return HOMA_ERR_INVAL;
    }
}

int homad_cq_space(const struct homad_view *v, uint32_t head, uint32_t *tail_seen)
{
    uint32_t tail = __atomic_load_n(&v->ctrl->cq_tail, __ATOMIC_ACQUIRE);
    uint32_t used = head - tail;
    /* The tail may only move forward from the last value seen, up to head. */
    if ((uint32_t)(tail - *tail_seen) > (uint32_t)(head - *tail_seen)) return -1;
    *tail_seen = tail;
    return used <= v->ncq ? (int)(v->ncq - used) : -1;
}

void homad_cq_push(const struct homad_view *v, uint32_t head, const struct homad_cqe *e)
{
    memcpy(&v->cq[head & (v->ncq - 1)], e, sizeof(*e));
    __atomic_store_n(&v->ctrl->cq_head, head + 1, __ATOMIC_RELEASE);
}

void homad_rx_init(struct homad_rxmap *m, uint32_t n)
{
    memset(m, 0, sizeof(*m));
    m->n = n > HOMAD_MAX_SLOTS ? HOMAD_MAX_SLOTS : n;
}

int homad_rx_take(struct homad_rxmap *m)
{
    if (m->held >= m->n) return -1;
    for (uint32_t w = 0; w * 64 < m->n; w++) {
        uint64_t free_bits = ~m->bits[w];
        if (free_bits == 0) continue;
        uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(free_bits);
        if (i >= m->n) return -1;
        m->bits[w] |= 1ull << (i % 64);
        m->held++;
        return (int)i;
    }
    return -1;
}

int homad_rx_release(struct homad_rxmap *m, uint32_t slot)
{
    if (slot >= m->n) return HOMA_ERR_INVAL;
    uint64_t bit = 1ull << (slot % 64);
    if ((m->bits[slot / 64] & bit) == 0) return HOMA_ERR_INVAL;
    m->bits[slot / 64] &= ~bit;
    m->held--;
    return 0;
}

/* --------------------------------------------------------------- app side */

uint32_t homad_cmd_space(const struct homad_view *v, uint32_t head)
{
    uint32_t tail = __atomic_load_n(&v->ctrl->cmd_tail, __ATOMIC_ACQUIRE);
    uint32_t used = head - tail;
    return used <= v->ncmd ? v->ncmd - used : 0;
}

void homad_cmd_push(const struct homad_view *v, uint32_t head, const struct homad_cmd *c)
{
    memcpy(&v->cmd[head & (v->ncmd - 1)], c, sizeof(*c));
    __atomic_store_n(&v->ctrl->cmd_head, head + 1, __ATOMIC_RELEASE);
}

uint32_t homad_cq_avail(const struct homad_view *v, uint32_t tail)
{
    uint32_t head = __atomic_load_n(&v->ctrl->cq_head, __ATOMIC_ACQUIRE);
    uint32_t n = head - tail;
    return n <= v->ncq ? n : 0;
}

void homad_cq_copy(const struct homad_view *v, uint32_t tail, struct homad_cqe *out)
{
    memcpy(out, &v->cq[tail & (v->ncq - 1)], sizeof(*out));
}

void homad_cq_consumed(const struct homad_view *v, uint32_t tail)
{
    __atomic_store_n(&v->ctrl->cq_tail, tail, __ATOMIC_RELEASE);
}
