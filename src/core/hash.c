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

void homa_htab_grow(struct homa_htab *t, uint64_t (*key)(const struct homa_hnode *n))
{
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
