/* Growable byte buffer with a consumed prefix, shared by the TCP transports
 * (length-prefixed frames are appended at len and parsed from off). */
#ifndef HOMA_PERF_BYTEBUF_H
#define HOMA_PERF_BYTEBUF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct tbuf {
    uint8_t *p;
    size_t off; /* first unconsumed byte */
    size_t len; /* end of valid data */
    size_t cap;
} tbuf;

static inline void tbuf_free(tbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static inline size_t tbuf_avail(const tbuf *b)
{
    return b->len - b->off;
}

static inline void tbuf_compact(tbuf *b)
{
    if (b->off == 0) return;
    size_t n = tbuf_avail(b);
    if (n) memmove(b->p, b->p + b->off, n);
    b->off = 0;
    b->len = n;
}

/* Makes room for at least `extra` bytes after len (may move the data). */
static inline int tbuf_reserve(tbuf *b, size_t extra)
{
    if (b->cap - b->len >= extra) return 0;
    tbuf_compact(b);
    if (b->cap - b->len >= extra) return 0;
    size_t want = b->len + extra;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < want)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int tbuf_append(tbuf *b, const void *d, size_t n)
{
    if (tbuf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->len, d, n);
    b->len += n;
    return 0;
}

/* FIFO of requests in flight on one connection (responses come back in
 * order): each entry is the request's cookie and length. */
typedef struct reqfifo_entry {
    uint64_t cookie;
    size_t len;
} reqfifo_entry;

typedef struct reqfifo {
    reqfifo_entry *e;
    size_t head, count, cap;
} reqfifo;

static inline int reqfifo_push(reqfifo *f, uint64_t cookie, size_t len)
{
    if (f->count == f->cap) {
        size_t ncap = f->cap ? 2 * f->cap : 16;
        reqfifo_entry *e = malloc(ncap * sizeof(*e));
        if (!e) return -1;
        for (size_t i = 0; i < f->count; i++)
            e[i] = f->e[(f->head + i) % f->cap];
        free(f->e);
        f->e = e;
        f->cap = ncap;
        f->head = 0;
    }
    f->e[(f->head + f->count) % f->cap] = (reqfifo_entry){cookie, len};
    f->count++;
    return 0;
}

/* Removes the oldest entry into *out; -1 if empty. */
static inline int reqfifo_pop(reqfifo *f, reqfifo_entry *out)
{
    if (f->count == 0) return -1;
    *out = f->e[f->head];
    f->head = (f->head + 1) % f->cap;
    f->count--;
    return 0;
}

static inline void reqfifo_free(reqfifo *f)
{
    free(f->e);
    memset(f, 0, sizeof(*f));
}

static inline uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

#endif
