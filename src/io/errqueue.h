/* Reading a socket's error queue (MSG_ERRQUEUE): the ICMP errors the kernel
 * queued for packets this socket sent.  Shared by the UDP and raw drivers,
 * which both turn "unreachable" reports into `unreach` entries (io.h).
 * The error messages and the bounced bytes come from the network: the
 * parser checks every length before it reads (fuzz/fuzz_raw.c). */
#ifndef HOMA_IO_ERRQUEUE_H
#define HOMA_IO_ERRQUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "io/io.h"

struct msghdr;

/* 1 if an ICMP (v4) or ICMPv6 (!v4) error of this type/code means the peer
 * cannot be reached; *port gets the Homa port from the bounced packet's
 * header (payload, plen bytes) for a port unreachable, else 0. */
int homa_io_icmp_unreach(int v4, uint8_t type, uint8_t code, const uint8_t *payload, size_t plen,
                         uint16_t *port);

/* Turns one MSG_ERRQUEUE message (mh with its cmsgs and msg_name, the
 * bounced packet's Homa bytes in payload) into an `unreach` entry.
 * Returns 0, or -1 if it is not an unreachable report. */
int homa_io_parse_errqueue(const struct msghdr *mh, const uint8_t *payload, size_t plen, int v4,
                           homa_io_rx *out);

/* Reads fd's error queue without blocking: at most max_reads messages,
 * stopping early when the queue is empty or cap entries have been written.
 * Each ICMP unreachable report (homa_io_parse_errqueue, with v4 as given)
 * becomes an `unreach` entry in out[]; other errors are consumed and
 * dropped.  Returns the number of entries written; *reads gets the number
 * of recvmsg calls made (for the recv_syscalls counter). */
int homa_io_errqueue_drain(int fd, int v4, int max_reads, homa_io_rx *out, int cap,
                           uint64_t *reads);

#endif
