/* Reading a socket's error queue (MSG_ERRQUEUE): the ICMP errors the kernel
 * queued for packets this socket sent.  Shared by the UDP and raw drivers,
 * which both turn "unreachable" reports into `unreach` entries (io.h). */
#ifndef HOMA_IO_ERRQUEUE_H
#define HOMA_IO_ERRQUEUE_H

#include <stdint.h>

#include "io/io.h"

/* Reads fd's error queue without blocking: at most max_reads messages,
 * stopping early when the queue is empty or cap entries have been written.
 * Each ICMP unreachable report (homa_raw_parse_errqueue, with v4 as given)
 * becomes an `unreach` entry in out[]; other errors are consumed and
 * dropped.  Returns the number of entries written; *reads gets the number
 * of recvmsg calls made (for the recv_syscalls counter). */
int homa_io_errqueue_drain(int fd, int v4, int max_reads, homa_io_rx *out, int cap,
                           uint64_t *reads);

#endif
