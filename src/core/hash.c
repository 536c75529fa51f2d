/* The engine's hash table (hash.h). */
#include "hash.h"

#include <stdlib.h>

int homa_htab_init(struct homa_htab *t, size_t nb)
{
    t->b = calloc(nb, sizeof(*t->b));
    t->nb = t->b ? nb : 0;
    t->n = 0;
    return t->b ? 0 : HOMA_ERR_NOMEM;
}

void homa_htab_destroy(struct homa_htab *t)
{
    free(t->b);
    t->b = NULL;
    t->nb = t->n = 0;
}

void homa_htab_add(struct homa_htab *t, struct homa_hnode *n, uint64_t h)
{
    struct homa_hnode **head = &t->b[h & (t->nb - 1)];
    n->next = *head;
    *head = n;
    t->n++;
}

bool homa_htab_del(struct homa_htab *t, struct homa_hnode *n, uint64_t h)
{
    for (struct homa_hnode **pp = &t->b[h & (t->nb - 1)]; *pp; pp = &(*pp)->next) {
        if (*pp == n) {
            *pp = n->next;
            t->n--;
            return true;
        }
    }
    return false;
}

void homa_htab_grow_if_full(struct homa_htab *t, uint64_t (*key)(const struct homa_hnode *n))
{
    if (t->n < t->nb) return;
    size_t nnb = t->nb * 2;
    struct homa_hnode **nt = calloc(nnb, sizeof(*nt));
    if (!nt) return; /* keep the old, longer chains */
    for (size_t i = 0; i < t->nb; i++) {
        struct homa_hnode *e = t->b[i];
        while (e) {
            struct homa_hnode *next = e->next;
            struct homa_hnode **head = &nt[key(e) & (nnb - 1)];
            e->next = *head;
            *head = e;
            e = next;
        }
    }
    free(t->b);
    t->b = nt;
    t->nb = nnb;
}
