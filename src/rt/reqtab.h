/* The requests a socket received and has not answered yet, so that
 * homa_reply(s, id, ...) can find the client of request `id` (server ids
 * are unique per client only, so the id alone may be ambiguous), and
 * homa_abort(s, id) of a request can forget it.  Both backends keep one
 * per socket (embedded.c, homad_client.c), under their own lock. */
#ifndef HOMA_RT_REQTAB_H
#define HOMA_RT_REQTAB_H

#include <stdint.h>

#include <homa/homa.h>

#include "core/hash.h"

struct homa_reqtab {
    struct homa_htab t; /* struct homa_req by id; empty (nb 0) until the first request */
};

/* Remembers a delivered request (id, client address and port).  Out of
 * memory it is not remembered: it can still be answered with
 * homa_reply_msg(), which names the client. */
void homa_reqtab_add(struct homa_reqtab *r, uint64_t id, const homa_addr *peer, uint16_t peer_port);

/* Resolves the client of request `id` for a reply: with peer non-NULL only
 * that client's request counts, and *out_peer, *out_port get peer and
 * peer_port; with peer NULL the id must name exactly one request.  Returns
 * the number of matching requests (0: none; 2 or more: ambiguous). */
int homa_reqtab_find(const struct homa_reqtab *r, uint64_t id, const homa_addr *peer,
                     uint16_t peer_port, homa_addr *out_peer, uint16_t *out_port);

/* The result of answering it: homa_reply by id (peer NULL) with no match
 * is HOMA_ERR_NOT_FOUND, with several HOMA_ERR_STATE; otherwise 0 and the
 * caller sends to *out_peer:*out_port. */
int homa_reqtab_resolve(const struct homa_reqtab *r, uint64_t id, const homa_addr *peer,
                        uint16_t peer_port, homa_addr *out_peer, uint16_t *out_port, int *n);

/* Forgets request id of client peer:peer_port; 1 if it was there. */
int homa_reqtab_forget(struct homa_reqtab *r, uint64_t id, const homa_addr *peer,
                       uint16_t peer_port);
/* Forgets the first request with this id whoever sent it; 1 if there was one. */
int homa_reqtab_forget_id(struct homa_reqtab *r, uint64_t id);

/* After a reply to a remembered request returned rc: the request is
 * forgotten once answered, or once the engine says it can never be
 * answered (HOMA_ERR_NOT_FOUND, HOMA_ERR_STATE). */
static inline int homa_reqtab_done(int rc)
{
    return rc == 0 || rc == HOMA_ERR_NOT_FOUND || rc == HOMA_ERR_STATE;
}

void homa_reqtab_destroy(struct homa_reqtab *r);

#endif
