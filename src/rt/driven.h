/* A runtime without its background thread, driven by one caller thread
 * (homad, docs/homad.md "One thread").  Internal: not in libhoma.so.
 *
 * The caller owns the only thread that touches the runtime.  Either it
 * puts homa_rt_drive_fd() (an epoll fd over every UDP socket of the
 * runtime, readable when one of them has input) into its own epoll set and
 * calls homa_rt_drive() when that fd is readable; or (homad) it puts each
 * socket's homa_rt_socket_fd() there and calls homa_rt_drive_ports() with
 * the readable ones.  Either way also when homa_rt_drive_deadline() has
 * passed.  A packet from one of the runtime's sockets to another over
 * 127.0.0.1 or ::1 never reaches the kernel: it goes straight back into
 * the engine inside the call that transmits it (not with fault injection
 * or a capture).  The engine tells it which
 * sockets have a message (or a failure) ready through `ready`, called from
 * inside homa_rt_drive() and the other calls; the caller then takes them
 * with homa_recv(..., HOMA_NONBLOCK, ...), which in this mode never reads
 * the UDP sockets itself.  A blocking or timed homa_recv() or
 * homa_socket_linger() is refused (HOMA_ERR_STATE): nobody else would
 * drive the engine while it waits. */
#ifndef HOMA_RT_DRIVEN_H
#define HOMA_RT_DRIVEN_H

#include <stdint.h>

#include <homa/homa.h>

/* Called with the runtime's lock held: may only record the port. */
typedef void (*homa_rt_ready_fn)(void *ctx, uint16_t port);

/* As homa_runtime_create() (always embedded), without the background
 * thread. */
int homa_rt_create_driven(const homa_runtime_options *opts, homa_rt_ready_fn ready, void *ctx,
                          homa_runtime **out);
/* Readable (level-triggered) while a UDP socket of the runtime has input. */
int homa_rt_drive_fd(homa_runtime *rt);
/* Reads every socket until empty (within the per-pass budgets), feeds the
 * engine, runs due timers and transmits what all that produced.  Returns
 * the number of packets read plus 1 if transmission stopped at its budget
 * (so 0: nothing happened and nothing is left to do now). */
int homa_rt_drive(homa_runtime *rt);
/* The same over the sockets of `ports` only: those whose fd epoll found
 * readable (a port closed since is skipped); the caller promises that the
 * others were empty, so the engine timers do not wait for their input.
 * n = 0: only the timers and what a transmission left. */
int homa_rt_drive_ports(homa_runtime *rt, const uint16_t *ports, int n);
/* The UDP socket's fd, for the caller's epoll set (readable while it has
 * input); HOMA_ERR_STATE if the runtime is not driven. */
int homa_rt_socket_fd(homa_socket *s);
/* CLOCK_MONOTONIC time (ns) at which homa_rt_drive() must run again even
 * without input: engine timers, the pacer, packets held by fault
 * injection; 0 if now (a transmission left packets); UINT64_MAX never. */
uint64_t homa_rt_drive_deadline(homa_runtime *rt);

/* Tests only: the next socket read of the runtime's poll loop first
 * sleeps ns with the lock released, as a poller preempted in the middle of
 * its pass would (nobody else reads meanwhile; the background thread
 * still runs the timers).  Any runtime, driven or not. */
void homa_rt_test_stall_read(homa_runtime *rt, uint64_t ns);

#endif
