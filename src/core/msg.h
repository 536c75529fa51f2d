/* A message as the engine holds it: an incoming one being reassembled
 * (struct homa_msgin, msgin.c) and an outgoing one being sent (struct
 * homa_msgout, output.c).  Each RPC has one of each (rpc.h). */
#ifndef HOMA_CORE_MSG_H
#define HOMA_CORE_MSG_H

#include <stdbool.h>
#include <stdint.h>

/* ---- incoming messages (msgin.c) ---- */
struct homa_gap {
    uint32_t start, end; /* missing bytes [start, end) */
    uint64_t at;         /* when it opened or was last asked for again */
};

#define HOMA_PRIO_NONE 0xff
#define HOMA_MAX_GAPS 4096 /* a sender fragmenting more than this is refused */

struct homa_msgin {
    uint8_t *buf;
    uint32_t length;
    uint32_t received; /* distinct bytes received */
    uint32_t recv_end; /* one past the highest byte received */
    uint32_t granted;  /* the sender may send below this */
    uint32_t seg_size; /* largest payload seen: grants are rounded to it */
    uint32_t num_gaps, cap_gaps;
    struct homa_gap *gaps; /* sorted, disjoint, all below recv_end */
    uint8_t prio;          /* priority of our latest grant, or HOMA_PRIO_NONE */
    bool active;           /* length known, buffer allocated */
    bool taken;            /* the application took buf (homa_engine_msg_take) */
};

/* Result of homa_msgin_add. */
enum { HOMA_MSGIN_NEW = 0, HOMA_MSGIN_DUP = 1, HOMA_MSGIN_NOMEM = 2 };

/* Initialises for a message of `length` bytes (allocates the buffer). */
int homa_msgin_init(struct homa_msgin *m, uint32_t length, uint32_t granted);
/* As homa_msgin_init with buf (length bytes, malloc()ed) supplied. */
void homa_msgin_init_buf(struct homa_msgin *m, uint8_t *buf, uint32_t length, uint32_t granted);
void homa_msgin_destroy(struct homa_msgin *m);
/* Copies the new bytes of [offset, offset+len) and updates the gaps.  The
 * caller has checked offset + len <= length.  *added gets the new byte count. */
int homa_msgin_add(struct homa_msgin *m, uint64_t now, uint32_t offset, const uint8_t *data,
                   uint32_t len, uint32_t *added);
/* True if no byte of [offset, offset+len) has arrived (len > 0, inside the
 * message): a payload may then be written there before it is accepted. */
bool homa_msgin_missing(const struct homa_msgin *m, uint32_t offset, uint32_t len);
static inline bool homa_msgin_complete(const struct homa_msgin *m)
{
    return m->active && m->received == m->length;
}
/* First range the receiver is waiting for below `limit`; false if none. */
bool homa_msgin_first_missing(const struct homa_msgin *m, uint32_t limit, uint32_t *start,
                              uint32_t *end);

/* ---- outgoing messages ---- */
/* Ranges a sender keeps to retransmit; a RESEND beyond them is ignored (the
 * receiver asks again), never merged into a wider range. */
#define HOMA_MAX_RTX 32

struct homa_rtx {
    uint32_t start, end;
    uint8_t prio;
};

/* When a message's bytes left (first transmissions and retransmissions), so
 * that a RESEND that arrived before some of them were sent does not have
 * them sent again: its sender wrote it before it could have seen them. */
#define HOMA_XMIT_MARKS 4
struct homa_xmit_mark {
    uint32_t off; /* first transmission: bytes >= off left at or after at */
    uint64_t at;
};
#define HOMA_RTX_SENT 4
struct homa_rtx_sent {
    uint32_t start, end; /* retransmitted at `at` (the latest of the run) */
    uint64_t at;
};

struct homa_msgout {
    uint8_t *buf;
    uint32_t length;
    uint32_t next_xmit; /* first byte never transmitted */
    uint32_t granted;   /* may transmit below this */
    uint32_t unsched;   /* bytes sent at the unscheduled priority */
    uint8_t unsched_prio;
    uint8_t sched_prio;
    bool active;
    bool empty_pending; /* a 0-byte message still owes its one packet */
    uint8_t num_rtx;
    struct homa_rtx rtx[HOMA_MAX_RTX];
    uint8_t num_marks, num_rsent; /* rings, oldest first */
    struct homa_xmit_mark marks[HOMA_XMIT_MARKS];
    struct homa_rtx_sent rsent[HOMA_RTX_SENT];
};

#endif
