/* Helpers shared by the I/O drivers (udp.c, raw.c): address tests, socket
 * buffer sizing, the structural filter that counts stray packets as
 * garbage before the engine sees them, and the fault decision for an
 * outgoing packet.  The error-queue reader is in errqueue.h and the queue of
 * packets held back by fault injection in faultq.h. */
#ifndef HOMA_IO_COMMON_H
#define HOMA_IO_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "io/faultq.h"
#include "io/io.h"

/* Adds n to one field of a homa_driver_counters (readable by other threads
 * at any time, so relaxed atomics). */
#define HOMA_IO_CTR_ADD(ctr, field, n)                                                             \
    __atomic_fetch_add(&(ctr)->field, (uint64_t)(n), __ATOMIC_RELAXED)

/* 1 if a is an IPv4-mapped IPv6 address (::ffff:a.b.c.d). */
int homa_io_addr_is_v4(const homa_addr *a);
/* 1 if a is all zero (the wildcard address). */
int homa_io_addr_is_zero(const homa_addr *a);
/* Sets a to the IPv4-mapped form of the 4-byte address at ip4. */
void homa_io_addr_from_v4(homa_addr *a, const void *ip4);

/* Default socket buffer sizes (homa_io_opts.rcvbuf / sndbuf of 0): Homa's
 * bursts of unscheduled data need far more than the kernel's defaults. */
#define HOMA_IO_RCVBUF_DEFAULT (16u << 20)
#define HOMA_IO_SNDBUF_DEFAULT (4u << 20)

/* Sizes fd's receive and send buffers from opts (NULL or 0 = the defaults
 * above).  As root the FORCE variants ignore net.core.[rw]mem_max; without
 * the privilege the plain options are used, capped by the kernel. */
void homa_io_set_bufs(int fd, const homa_io_opts *opts);

/* 1 if the len bytes at d cannot be a Homa packet: shorter than the common
 * header, an unknown type (byte 11), or shorter than its type's header
 * (homa_wire_hdr_len).  Both drivers count such packets in garbage_in
 * instead of handing them to the engine. */
int homa_io_is_garbage(const uint8_t *d, size_t len);

/* The fault decision (homa_fault_decide) for one outgoing packet:
 * HOMA_FAULT_PASS without a draw when st is inactive.  The classifier wants
 * the header and the start of the payload in one buffer: when the header is
 * shorter than a DATA header and a payload follows, the two are joined in a
 * local copy and the length passed is that of the copy (the UDP driver's
 * rule since fault injection began; engine packets never take that path,
 * as their DATA headers are whole and other types carry no payload). */
int homa_io_fault_decide_out(homa_fault_state *st, uint64_t now, const homa_pkt_out *p,
                             uint64_t *hold_ns, uint32_t *wait);

/* Fault injection on a packet about to leave, the same in both drivers:
 * decides its fate (homa_io_fault_decide_out), drops it or holds it in q
 * (a delayed or reordered packet; it leaves later through q), and counts
 * what it did in c.  Returns how many copies to send now: 0 (dropped or
 * held), 1, or 2 (duplicated). */
int homa_io_fault_send(homa_fault_state *st, homa_faultq *q, homa_driver_counters *c, uint64_t now,
                       const homa_pkt_out *p, uint8_t tos);

/* CLOCK_MONOTONIC in ns: "the socket opened" for blackout windows. */
uint64_t homa_io_monotonic_ns(void);

/* Adds the counters c to *sum field by field (atomic reads). */
void homa_io_counters_add(const homa_driver_counters *c, homa_driver_counters *sum);

#endif
