/* Intrusive circular doubly linked lists: an element embeds a struct hlist
 * per list it can be on, so joining and leaving a list never allocates.
 * An unlinked node points at itself (or is all zero, before hlist_init). */
#ifndef HOMA_CORE_LIST_H
#define HOMA_CORE_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct hlist {
    struct hlist *next, *prev;
};

static inline void hlist_init(struct hlist *h)
{
    h->next = h->prev = h;
}
static inline bool hlist_empty(const struct hlist *h)
{
    return h->next == h;
}
static inline bool hlist_linked(const struct hlist *n)
{
    return n->next != NULL && n->next != n;
}
static inline void hlist_insert_before(struct hlist *pos, struct hlist *n)
{
    n->prev = pos->prev;
    n->next = pos;
    pos->prev->next = n;
    pos->prev = n;
}
static inline void hlist_add_tail(struct hlist *h, struct hlist *n)
{
    hlist_insert_before(h, n);
}
static inline void hlist_del(struct hlist *n)
{
    if (!hlist_linked(n)) return;
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = n;
}
#define HOMA_CONTAINER(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#endif
