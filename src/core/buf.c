/* Message buffers.  Large freed buffers are cached and reused for new
 * messages of about the same length: freeing megabyte buffers to malloc
 * lets it return them to the kernel, and every page then faults in again
 * on the next message (15-20 % of a 16 MB allreduce's time).  An outgoing
 * message's buffer is not freed while a driver may still read payloads it
 * pulled from it (homa_engine_pull .. homa_engine_pull_done). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

uint8_t *homa_buf_get(struct homa_engine *eng, uint32_t len)
{
    if (len >= HOMA_BUFCACHE_MIN) {
        /* Newest first (warmest); a close fit only, so a small message
         * does not pin a large buffer. */
        for (uint32_t i = eng->bufcache_n; i-- > 0;) {
            uint32_t cap = eng->bufcache[i].cap;
            if (cap < len || cap - len > len / 8) continue;
            uint8_t *b = eng->bufcache[i].buf;
            eng->bufcache_bytes -= cap;
            eng->bufcache[i] = eng->bufcache[--eng->bufcache_n];
            return b;
        }
    }
    return malloc(len ? len : 1);
}

void homa_buf_put(struct homa_engine *eng, uint8_t *buf, uint32_t cap)
{
    if (!buf) return;
    if (cap < HOMA_BUFCACHE_MIN || cap > HOMA_BUFCACHE_BYTES / 2) {
        free(buf);
        return;
    }
    /* Full: drop the oldest entry. */
    while (eng->bufcache_n > 0 && (eng->bufcache_n == HOMA_BUFCACHE_SLOTS ||
                                   eng->bufcache_bytes + cap > HOMA_BUFCACHE_BYTES)) {
        free(eng->bufcache[0].buf);
        eng->bufcache_bytes -= eng->bufcache[0].cap;
        memmove(&eng->bufcache[0], &eng->bufcache[1], --eng->bufcache_n * sizeof(eng->bufcache[0]));
    }
    eng->bufcache[eng->bufcache_n].buf = buf;
    eng->bufcache[eng->bufcache_n].cap = cap;
    eng->bufcache_n++;
    eng->bufcache_bytes += cap;
}

void homa_free_outbuf(struct homa_engine *eng, uint8_t *buf, uint32_t cap)
{
    if (!buf) return;
    if (eng->tx_pins == 0) {
        homa_buf_put(eng, buf, cap);
        return;
    }
    if (eng->deferred_n == eng->deferred_cap) {
        size_t cap = eng->deferred_cap ? eng->deferred_cap * 2 : 16;
        void **d = realloc(eng->deferred, cap * sizeof(*d));
        if (!d) {
            /* Cannot defer: leak-free fallback is impossible without risking
             * a use-after-free in the driver, so keep the buffer until destroy. */
            return;
        }
        eng->deferred = d;
        eng->deferred_cap = cap;
    }
    eng->deferred[eng->deferred_n++] = buf;
}

void homa_engine_pull_done(homa_engine *eng)
{
    if (!eng || eng->tx_pins == 0) return;
    if (--eng->tx_pins == 0) {
        for (size_t i = 0; i < eng->deferred_n; i++)
            free(eng->deferred[i]);
        eng->deferred_n = 0;
    }
}

void homa_bufs_destroy(struct homa_engine *eng)
{
    for (size_t i = 0; i < eng->deferred_n; i++)
        free(eng->deferred[i]);
    free(eng->deferred);
    for (uint32_t i = 0; i < eng->bufcache_n; i++)
        free(eng->bufcache[i].buf);
}
