/* vnet: faults at host egress (struct vnet_faults in vnet.h): blackouts,
 * loss (random, Gilbert-Elliott bursts, per Homa packet type), duplication,
 * delay with jitter and reordering (random extra delay, or held behind
 * later packets).  nic_pull (vnet.c) applies them to every packet that
 * leaves a host NIC; see vnet_internal.h for the order. */
#include "vnet_internal.h"

#include "io/fault_class.h"

_Static_assert(VNET_FAULT_CLASSES == HOMA_FAULT_CLASS_COUNT, "vnet classes are Homa's");

#include <stdlib.h>

static double clamp01(double x)
{
    /* !(x > 0) also maps NaN to 0. */
    return !(x > 0) ? 0 : x > 1 ? 1 : x;
}

static bool host_in(uint64_t mask, int host)
{
    return mask == 0 || (host < 64 && (mask >> host & 1u) != 0);
}

/* Blackout, per-class loss and (burst) loss, in that order; counts the drop. */
static bool fault_decide(struct vnet *net, struct host *h, uint64_t now, const struct vnet_pkt *pkt)
{
    const struct vnet_faults *f = &net->cfg.faults;
    if (f->blackout_ns > 0 && now >= f->blackout_start_ns) {
        uint64_t t = now - f->blackout_start_ns;
        if (f->blackout_every_ns != 0) t %= f->blackout_every_ns;
        if (t < f->blackout_ns) {
            net->st.drops_blackout++;
            return true;
        }
    }
    unsigned cls = 0;
    if (net->class_faults) {
        cls = homa_fault_classify(pkt->data, pkt->len);
        for (unsigned m = cls; m != 0; m &= m - 1) {
            int c = __builtin_ctz(m);
            if (f->class_loss[c] > 0 && vnet_rng_uniform(&net->rng) < f->class_loss[c]) {
                net->st.drops_type++;
                return true;
            }
        }
    }
    if (f->loss <= 0 || (f->loss_types != 0 && (cls & f->loss_types) == 0)) return false;
    bool lost;
    if (f->burst > 0) {
        double u = vnet_rng_uniform(&net->rng);
        h->ge_bad = h->ge_bad ? !(u < net->ge_p_good) : u < net->ge_p_bad;
        lost = h->ge_bad;
    } else {
        lost = vnet_rng_uniform(&net->rng) < f->loss;
    }
    if (lost) net->st.drops_loss++;
    return lost;
}

static bool fault_lost(struct vnet *net, struct host *h, uint64_t now, const struct vnet_pkt *pkt)
{
    if (!fault_decide(net, h, now, pkt)) return false;
    if (homa_fault_classify(pkt->data, pkt->len) & (1u << HOMA_FAULT_CLASS_DATA))
        net->st.lost_data_bytes += pkt->len - HOMA_DATA_HDR_LEN;
    return true;
}

static void held_unlink(struct host *h, struct held *hd)
{
    for (struct held **pp = &h->held; *pp != NULL; pp = &(*pp)->next)
        if (*pp == hd) {
            *pp = hd->next;
            return;
        }
}

/* reorder_max_ns passed before enough later packets did: let it go. */
static void held_timeout(void *arg, uint64_t now)
{
    struct held *hd = arg;
    struct vnet *net = hd->net;
    held_unlink(hd->h, hd);
    vn_schedule(net, now + net->cfg.host_delay_ns + net->cfg.switch_delay_ns, EVK_ARRIVE, NULL,
                hd->p);
    free(hd);
}

/* Holds p at its source (reorder_depth); false if out of memory (then it
 * takes the random extra delay instead). */
static bool hold_back(struct vnet *net, struct host *h, struct pbuf *p)
{
    struct held *hd = calloc(1, sizeof(*hd));
    if (hd == NULL) return false;
    hd->p = p;
    hd->wait = net->cfg.faults.reorder_depth;
    hd->net = net;
    hd->h = h;
    if (net->cfg.faults.reorder_max_ns > 0)
        hd->timer = vnet_after(net, net->cfg.faults.reorder_max_ns, held_timeout, hd);
    struct held **pp = &h->held;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = hd;
    return true;
}

/* A later packet of h left, arriving at t: the held packets it completes
 * arrive right behind it (same time, scheduled after), oldest first. */
void vn_fault_release_held(struct vnet *net, struct host *h, uint64_t t)
{
    struct held **pp = &h->held;
    while (*pp != NULL) {
        struct held *hd = *pp;
        if (--hd->wait == 0) {
            *pp = hd->next;
            if (hd->timer) vnet_cancel(net, hd->timer);
            vn_schedule(net, t, EVK_ARRIVE, NULL, hd->p);
            free(hd);
        } else {
            pp = &hd->next;
        }
    }
}

bool vn_fault_drop(struct vnet *net, struct host *h, uint64_t now, const struct vnet_pkt *pkt,
                   bool *faulty)
{
    const struct vnet_faults *f = &net->cfg.faults;
    if (f->filter && f->filter(f->filter_arg, h->idx, pkt->dst, pkt->data, pkt->len)) {
        net->st.drops_filter++;
        if (net->trace)
            net->trace(net->trace_arg, now, VNET_TR_DROP_FILTER, h->idx, pkt->dst, pkt->data,
                       pkt->len, pkt->priority);
        return true;
    }
    *faulty = host_in(f->src_mask, h->idx) && host_in(f->dst_mask, pkt->dst);
    if (*faulty && fault_lost(net, h, now, pkt)) {
        if (net->trace)
            net->trace(net->trace_arg, now, VNET_TR_DROP_LOSS, h->idx, pkt->dst, pkt->data,
                       pkt->len, pkt->priority);
        return true;
    }
    return false;
}

int vn_fault_copies(struct vnet *net, bool faulty)
{
    const struct vnet_faults *f = &net->cfg.faults;
    if (faulty && f->dup > 0 && vnet_rng_uniform(&net->rng) < f->dup) {
        net->st.dups++;
        return 2;
    }
    return 1;
}

bool vn_fault_delay(struct vnet *net, struct host *h, struct pbuf *p, bool faulty, uint64_t *t)
{
    const struct vnet_faults *f = &net->cfg.faults;
    if (faulty && f->reorder > 0 && vnet_rng_uniform(&net->rng) < f->reorder) {
        net->st.reorders++;
        if (f->reorder_depth > 0 && hold_back(net, h, p)) return true;
        *t += vnet_rng_below(&net->rng, f->reorder_max_ns + 1);
    } else if (faulty && f->delay > 0 && vnet_rng_uniform(&net->rng) < f->delay) {
        net->st.delays++;
        *t += f->delay_ns - f->jitter_ns;
        if (f->jitter_ns > 0) *t += vnet_rng_below(&net->rng, 2 * f->jitter_ns + 1);
    }
    return false;
}

void vn_fault_free_held(struct vnet *net, struct host *h)
{
    while (h->held) {
        struct held *hd = h->held;
        h->held = hd->next;
        pbuf_free(net, hd->p);
        free(hd);
    }
}

/* ---- Configuration ---- */

void vnet_set_faults(struct vnet *net, const struct vnet_faults *faults)
{
    struct vnet_faults *f = &net->cfg.faults;
    *f = *faults;
    f->loss = clamp01(f->loss);
    f->dup = clamp01(f->dup);
    f->reorder = clamp01(f->reorder);
    if (f->reorder_max_ns == UINT64_MAX) f->reorder_max_ns--; /* +1 in the draw must not wrap */
    f->delay = clamp01(f->delay);
    if (f->jitter_ns > f->delay_ns) f->jitter_ns = f->delay_ns;
    if (f->jitter_ns > UINT64_MAX / 4) f->jitter_ns = UINT64_MAX / 4; /* 2j + 1 must not wrap */
    /* Overlapping windows: one long blackout. */
    if (f->blackout_every_ns != 0 && f->blackout_every_ns < f->blackout_ns)
        f->blackout_ns = f->blackout_every_ns;
    net->class_faults = f->loss_types != 0;
    for (int c = 0; c < VNET_FAULT_CLASSES; c++) {
        f->class_loss[c] = clamp01(f->class_loss[c]);
        if (f->class_loss[c] > 0) net->class_faults = true;
    }
    if (!(f->burst >= 1.0)) f->burst = f->burst > 0 ? 1.0 : 0.0; /* NaN: no bursts */
    if (f->burst > 0) homa_fault_ge(f->loss, f->burst, &net->ge_p_bad, &net->ge_p_good);
    /* With none of these, the fault steps of nic_pull do nothing (no
     * draw, no count), so it skips them: the common case costs no calls. */
    net->any_faults = f->filter != NULL || f->loss > 0 || f->dup > 0 || f->reorder > 0 ||
                      f->delay > 0 || f->blackout_ns > 0 || net->class_faults;
}

const struct vnet_faults *vnet_get_faults(const struct vnet *net)
{
    return &net->cfg.faults;
}
