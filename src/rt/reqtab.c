/* Unanswered requests of a socket (reqtab.h). */
#include "rt/reqtab.h"

#include <stdlib.h>
#include <string.h>

#include "core/list.h"

struct homa_req {
    struct homa_hnode hn;
    uint64_t id;
    homa_addr peer;
    uint16_t peer_port;
};

static uint64_t req_key(const struct homa_hnode *n)
{
    return homa_mix64(HOMA_CONTAINER(n, struct homa_req, hn)->id);
}

void homa_reqtab_add(struct homa_reqtab *r, uint64_t id, const homa_addr *peer, uint16_t peer_port)
{
    if (r->t.nb == 0 && homa_htab_init(&r->t, 64) != 0) return;
    homa_htab_grow_if_full(&r->t, req_key);
    struct homa_req *q = malloc(sizeof(*q));
    if (q == NULL) return;
    q->id = id;
    q->peer = *peer;
    q->peer_port = peer_port;
    homa_htab_add(&r->t, &q->hn, homa_mix64(id));
}

static int matches(const struct homa_req *q, uint64_t id, const homa_addr *peer, uint16_t peer_port)
{
    return q->id == id &&
           (peer == NULL || (q->peer_port == peer_port && homa_addr_eq(&q->peer, peer)));
}

int homa_reqtab_find(const struct homa_reqtab *r, uint64_t id, const homa_addr *peer,
                     uint16_t peer_port, homa_addr *out_peer, uint16_t *out_port)
{
    int n = 0;
    if (r->t.nb == 0) return 0;
    for (struct homa_hnode *h = homa_htab_first(&r->t, homa_mix64(id)); h; h = h->next) {
        const struct homa_req *q = HOMA_CONTAINER(h, struct homa_req, hn);
        if (!matches(q, id, peer, peer_port)) continue;
        if (n++ == 0) {
            *out_peer = q->peer;
            *out_port = q->peer_port;
        }
    }
    return n;
}

int homa_reqtab_resolve(const struct homa_reqtab *r, uint64_t id, const homa_addr *peer,
                        uint16_t peer_port, homa_addr *out_peer, uint16_t *out_port, int *n)
{
    *n = homa_reqtab_find(r, id, peer, peer_port, out_peer, out_port);
    if (peer != NULL) {
        *out_peer = *peer;
        *out_port = peer_port;
        return 0;
    }
    if (*n == 0) return HOMA_ERR_NOT_FOUND;
    if (*n > 1) return HOMA_ERR_STATE;
    return 0;
}

static int forget(struct homa_reqtab *r, uint64_t id, const homa_addr *peer, uint16_t peer_port)
{
    if (r->t.nb == 0) return 0;
    for (struct homa_hnode *h = homa_htab_first(&r->t, homa_mix64(id)); h; h = h->next) {
        struct homa_req *q = HOMA_CONTAINER(h, struct homa_req, hn);
        if (!matches(q, id, peer, peer_port)) continue;
        homa_htab_del(&r->t, h, homa_mix64(id));
        free(q);
        return 1;
    }
    return 0;
}

int homa_reqtab_forget(struct homa_reqtab *r, uint64_t id, const homa_addr *peer,
                       uint16_t peer_port)
{
    return forget(r, id, peer, peer_port);
}

int homa_reqtab_forget_id(struct homa_reqtab *r, uint64_t id)
{
    return forget(r, id, NULL, 0);
}

void homa_reqtab_destroy(struct homa_reqtab *r)
{
    for (size_t i = 0; i < r->t.nb; i++) {
        while (r->t.b[i] != NULL) {
            struct homa_req *q = HOMA_CONTAINER(r->t.b[i], struct homa_req, hn);
            r->t.b[i] = q->hn.next;
            free(q);
        }
    }
    homa_htab_destroy(&r->t);
}
