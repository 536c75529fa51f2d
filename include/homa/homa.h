/* libhoma application API: Homa RPCs between processes.
 *
 * Packets travel over one of two drivers: UDP (the default; the UDP port
 * equals the Homa port), or raw IP (IP protocol 146 in the wire format of
 * the Linux kernel module, so that a libhoma process and a host running
 * the module exchange RPCs; needs CAP_NET_RAW; HOMA_RT_RAW or
 * HOMA_DRIVER=raw).  The API is the same over both.
 *
 * Concepts follow the Linux Homa module:
 *   - a socket is bound to a port (a server's well-known port, or an
 *     ephemeral client port);
 *   - a client sends a request to an endpoint and gets the RPC id back
 *     (plus an optional completion cookie echoed with the response);
 *   - homa_recv() returns the next message: any, requests only, responses
 *     only, or the response of one RPC id;
 *   - a server replies to a request by its id; any RPC can be aborted.
 *
 * Sockets live in a runtime: one protocol engine (homa/engine.h), the
 * sockets of its driver and a background thread.  Several sockets of a
 * process share one runtime, so SRPT and grant decisions see all of the
 * process's traffic.  Pass NULL as the runtime to use the process-wide
 * default runtime.  With HOMA_DAEMON set (or homa_runtime_connect), the
 * engine is the host's one engine in homad instead, shared by every
 * process that uses it (docs/homad.md); the API does not change.
 *
 * Received messages stay in engine memory: homa_msg.data is valid until
 * homa_release(); nothing is copied on the way to the application.
 *
 * Every function is thread-safe; docs/api.md spells out the threading
 * contract (which thread does what, and when).
 *
 * Errors: negative HOMA_ERR_* values (homa/errors.h); homa_strerror(). */
#ifndef HOMA_HOMA_H
#define HOMA_HOMA_H

#include <homa/export.h>

#include <stddef.h>
#include <stdint.h>

#include <homa/engine.h>
#include <homa/errors.h>
#include <homa/version.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sockaddr;

typedef struct homa_runtime homa_runtime;
typedef struct homa_socket homa_socket;

/* ---------------------------------------------------------------------------
 * Addresses
 * ------------------------------------------------------------------------ */

/* Where a Homa socket lives: an address and a port.  addr holds an IPv6
 * address, or an IPv4 address in IPv4-mapped form (::ffff:a.b.c.d); all-zero
 * is the wildcard address (bind only).  port is in host byte order. */
typedef struct homa_endpoint {
    homa_addr addr;
    uint16_t port;
} homa_endpoint;

/* Longest string homa_endpoint_format() writes, including the NUL. */
#define HOMA_ENDPOINT_STRLEN 56

/* Parses "a.b.c.d:port", "[v6addr]:port" or "hostname:port" (a name is
 * resolved with getaddrinfo; IPv4 results are preferred when both exist).
 * A missing ":port" gives port 0.  Returns 0 or HOMA_ERR_ADDR. */
HOMA_API int homa_endpoint_parse(const char *str, homa_endpoint *out);
/* Like homa_endpoint_parse() for a host (numeric or name) and a port. */
HOMA_API int homa_endpoint_from_host(const char *host, uint16_t port, homa_endpoint *out);
/* Writes "a.b.c.d:port" or "[v6]:port".  Returns the string length, or
 * HOMA_ERR_INVAL if len is too small. */
HOMA_API int homa_endpoint_format(const homa_endpoint *ep, char *buf, size_t len);
/* Converts from a struct sockaddr_in or sockaddr_in6 (len = its size).
 * Returns 0 or HOMA_ERR_ADDR. */
HOMA_API int homa_endpoint_from_sockaddr(const struct sockaddr *sa, size_t len, homa_endpoint *out);
/* Fills a struct sockaddr_in6 (IPv4 as IPv4-mapped; buf of at least
 * sizeof(struct sockaddr_in6) bytes).  Returns the size written or
 * HOMA_ERR_INVAL. */
HOMA_API int homa_endpoint_to_sockaddr(const homa_endpoint *ep, struct sockaddr *sa, size_t len);
/* 1 if the address is IPv4-mapped, else 0. */
HOMA_API int homa_endpoint_is_ipv4(const homa_endpoint *ep);
/* 1 if both endpoints have the same address and port. */
HOMA_API int homa_endpoint_equal(const homa_endpoint *a, const homa_endpoint *b);

/* ---------------------------------------------------------------------------
 * Fault injection (for testing loss recovery; done in the driver, UDP or raw
 * IP, on both the send and the receive path)
 * ------------------------------------------------------------------------ */

#define HOMA_FAULT_TX 1u /* apply to packets being sent */
#define HOMA_FAULT_RX 2u /* apply to packets being received */

/* Packet classes for per-type loss (homa_faults.drop_types is a bit mask of
 * 1u << class).  A DATA packet that ends its message (offset + payload
 * length reaches the message length) is in both DATA and LAST_DATA. */
enum homa_fault_class {
    HOMA_FAULT_CLASS_DATA = 0,  /* every DATA packet */
    HOMA_FAULT_CLASS_LAST_DATA, /* the last DATA packet of a message */
    HOMA_FAULT_CLASS_GRANT,
    HOMA_FAULT_CLASS_RESEND,
    HOMA_FAULT_CLASS_RPC_UNKNOWN,
    HOMA_FAULT_CLASS_BUSY,
    HOMA_FAULT_CLASS_CUTOFFS,
    HOMA_FAULT_CLASS_FREEZE,
    HOMA_FAULT_CLASS_NEED_ACK,
    HOMA_FAULT_CLASS_ACK,
    HOMA_FAULT_CLASS_COUNT
};

typedef struct homa_faults {
    double drop;       /* probability a packet is lost (long-run rate with burst) */
    double dup;        /* probability a packet is delivered twice */
    double reorder;    /* probability a packet is held back behind later ones */
    double delay;      /* probability a packet is delayed by delay_us */
    uint32_t delay_us; /* mean delay of `delay` (and reorder's longest hold); default 1,000 */
    uint64_t seed;     /* PRNG seed; 0 = random */
    unsigned dirs;     /* HOMA_FAULT_TX | HOMA_FAULT_RX; 0 = both */
    /* Mean length of a run of consecutive losses (Gilbert-Elliott: a good
     * state that loses nothing, a bad state that loses everything); 0 =
     * independent losses.  Needs drop <= burst / (1 + burst). */
    double burst;
    /* Bit mask of 1u << HOMA_FAULT_CLASS_*: `drop` (and burst) applies only
     * to packets of these classes; 0 = every packet. */
    unsigned drop_types;
    /* Independent extra loss per class, e.g. drop_class[HOMA_FAULT_CLASS_GRANT]. */
    double drop_class[HOMA_FAULT_CLASS_COUNT];
    uint32_t jitter_us;     /* delays are uniform in delay_us +- jitter_us */
    uint32_t reorder_depth; /* later packets a reordered one waits for; 0 = 1 */
    /* Blackouts (total loss): windows of blackout_ns starting blackout_start_ns
     * after the socket opened, repeating every blackout_every_ns (0 = once). */
    uint64_t blackout_ns;
    uint64_t blackout_every_ns;
    uint64_t blackout_start_ns;
} homa_faults;

/* Parses a spec such as "drop=0.05,dup=0.01,seed=7" (docs/api.md lists every
 * key: drop, dup, reorder, delay, delay_us, jitter_us, reorder_depth, burst,
 * drop_type, drop_<class>, blackout_ms, blackout_every_ms, blackout_start_ms,
 * seed, dir).  Strict: unknown or repeated keys, bad numbers and
 * inconsistent combinations are errors.  Returns 0 or HOMA_ERR_INVAL; on
 * error a message naming the bad item goes to err (optional, errlen bytes). */
HOMA_API int homa_faults_parse(const char *spec, homa_faults *out, char *err, size_t errlen);
/* 1 if f injects no fault at all. */
HOMA_API int homa_faults_none(const homa_faults *f);

/* ---------------------------------------------------------------------------
 * Runtime
 * ------------------------------------------------------------------------ */

/* Runtime option flags.  HOMA_RT_IGNORE_ENV: ignore the HOMA_* environment
 * variables (HOMA_FAULTS, HOMA_PCAP, HOMA_MTU, HOMA_BUSY_POLL_US,
 * HOMA_DRIVER). */
#define HOMA_RT_IGNORE_ENV 1u
#define HOMA_RT_NO_GSO 2u /* never use UDP GSO on send */
#define HOMA_RT_NO_GRO 4u /* never ask for UDP GRO on receive */
/* Never receive DATA payloads in place (always through the driver's
 * receive buffers and a copy); for measurements. */
#define HOMA_RT_NO_PLACE 8u
/* Always embedded: ignore HOMA_DAEMON (homad itself uses this). */
#define HOMA_RT_EMBEDDED 16u
/* Use the raw IP driver (Homa over IP protocol 146, the Linux module's
 * wire format; needs CAP_NET_RAW) instead of UDP.  Env HOMA_DRIVER=raw or
 * HOMA_DRIVER=udp, when set, replaces this choice. */
#define HOMA_RT_RAW 32u
/* Ignore ICMP unreachable reports: an RPC to a closed port or a host
 * without Homa is retried until the timeout (HOMA_ERR_TIMEOUT) instead of
 * failing at once with HOMA_ERR_UNREACHABLE, e.g. while a server restarts
 * on the same port. */
#define HOMA_RT_NO_UNREACH 64u

typedef struct homa_runtime_options {
    /* Engine configuration.  config.max_payload is ignored (max_payload
     * below sets it); config.link_bps is used when link_bps below is 0.
     * An unsched_bytes left at its default but smaller than two packets is
     * raised to 2 * max_payload (with 64 KB loopback packets the default
     * is less than one). */
    homa_config config;
    /* Payload bytes per DATA packet; 0 = derive from `mtu` as
     * mtu - 40 (IPv6) - 8 (UDP) - 56 (Homa DATA header), capped by the
     * largest UDP datagram.  Loopback (65,536) gives 65,432.  The raw IP
     * driver (HOMA_RT_RAW) has no UDP header: mtu - 96, at most 65,459. */
    uint32_t max_payload;
    /* Path MTU used to derive max_payload for every peer; 0 = env HOMA_MTU
     * if set, else automatic: max_payload follows the largest MTU of the
     * host's interfaces that are up (usually loopback's 65,536), and each
     * peer gets packets that fit the MTU of the route to it (asked of the
     * kernel once per peer), so loopback peers get 64 KB packets and a peer
     * behind a 1,500-byte link gets 1,396-byte payloads, not IP fragments.
     * Setting mtu or max_payload applies one size to every peer. */
    uint32_t mtu;
    /* Link rate for the pacer in bit/s; 0 = no pacing. */
    uint64_t link_bps;
    /* A thread waiting in homa_recv() spins up to this long before sleeping
     * in the kernel (less while spinning keeps failing); 0 = never spin.
     * Default 50; env HOMA_BUSY_POLL_US, when set, replaces it. */
    uint32_t busy_poll_us;
    /* Injected faults (all zero = none).  Env HOMA_FAULTS, when set,
     * replaces this. */
    homa_faults faults;
    /* Write every packet sent and received to this pcap file (NULL = no
     * capture).  Env HOMA_PCAP, when set, replaces this. */
    const char *pcap_path;
    /* HOMA_RT_* flags. */
    unsigned flags;
} homa_runtime_options;

/* Daemon mode (docs/homad.md): when the environment variable HOMA_DAEMON
 * names the unix socket of homad(8) (and neither HOMA_RT_IGNORE_ENV nor
 * HOMA_RT_EMBEDDED is set), homa_runtime_create() and the default runtime
 * connect to that daemon instead of building an engine: the host's single
 * engine is homad's, the rest of the API is unchanged.  The options other
 * than busy_poll_us are then homad's business. */

/* Fills the defaults (homa_config_default(), max_payload 0, mtu 0,
 * link_bps 0, busy_poll_us 50, no faults, no pcap, flags 0). */
HOMA_API void homa_runtime_options_default(homa_runtime_options *opts);

/* Creates a runtime: the engine, no sockets yet, and the background thread.
 * opts NULL = defaults.  Environment variables (HOMA_FAULTS, HOMA_PCAP,
 * HOMA_MTU, HOMA_BUSY_POLL_US, HOMA_DRIVER) apply unless HOMA_RT_IGNORE_ENV; a
 * malformed one fails with HOMA_ERR_INVAL and a message on stderr.
 * Errors: HOMA_ERR_INVAL, HOMA_ERR_NOMEM, HOMA_ERR_IO. */
HOMA_API int homa_runtime_create(const homa_runtime_options *opts, homa_runtime **out);
/* Creates a daemon-mode runtime connected to homad(8) at socket_path (as
 * HOMA_DAEMON does for homa_runtime_create()).  Errors: HOMA_ERR_IO (no
 * daemon there), HOMA_ERR_INVAL (not homad or another protocol version),
 * HOMA_ERR_LIMIT (too many processes), HOMA_ERR_NOMEM.  If homad dies,
 * every call on the runtime returns HOMA_ERR_SHUTDOWN; destroy it and
 * connect again. */
HOMA_API int homa_runtime_connect(const char *socket_path, homa_runtime **out);
/* Closes every socket of the runtime (threads blocked in homa_recv() on
 * them return HOMA_ERR_SHUTDOWN), stops the background thread and frees
 * everything.  Must not be called on the default runtime. */
HOMA_API void homa_runtime_destroy(homa_runtime *rt);
/* The process-wide default runtime, created with default options (and the
 * environment) on first use.  Returns 0 or an error of homa_runtime_create;
 * *out gets the runtime.  It is never destroyed. */
HOMA_API int homa_runtime_default(homa_runtime **out);
/* The engine configuration in force (max_payload as derived). */
HOMA_API const homa_config *homa_runtime_config(const homa_runtime *rt);

/* Counters of the I/O driver (UDP or raw IP).  X(name, description) for every field. */
#define HOMA_DRIVER_COUNTER_LIST(X)                                                                \
    X(send_syscalls, "sendmsg/sendmmsg calls")                                                     \
    X(recv_syscalls, "recvmmsg calls (including those that found nothing)")                        \
    X(poll_syscalls, "epoll_wait calls (a thread went to sleep)")                                  \
    X(wakeups, "eventfd writes to wake a sleeping thread")                                         \
    X(spin_preempted, "busy polls cut short: the poller was preempted (CPUs oversubscribed)")      \
    X(tx_handoffs, "transmissions that hit their budget and left the rest to another thread")      \
    X(datagrams_out, "Homa packets sent (a GSO send counts each segment)")                         \
    X(datagrams_in, "Homa packets received (a GRO buffer counts each segment)")                    \
    X(bytes_out, "Homa packet bytes sent (UDP or IP payload)")                                     \
    X(bytes_in, "Homa packet bytes received (UDP or IP payload)")                                  \
    X(gso_sends, "sends that used UDP GSO (UDP driver)")                                           \
    X(gso_segments, "packets sent inside GSO sends")                                               \
    X(gro_buffers, "received buffers holding several GRO-coalesced packets")                       \
    X(gro_segments, "packets received inside GRO-coalesced buffers")                               \
    X(garbage_in, "datagrams dropped as not Homa (malformed, truncated)")                          \
    X(rx_peeks, "MSG_PEEK reads of a datagram's header (counted in recv_syscalls too)")            \
    X(rx_placed, "DATA payloads the kernel wrote straight into message memory")                    \
    X(send_errors, "packets the kernel refused to send")                                           \
    X(fault_drops, "packets dropped by fault injection")                                           \
    X(fault_dups, "packets duplicated by fault injection")                                         \
    X(fault_reorders, "packets reordered by fault injection")                                      \
    X(fault_delays, "packets delayed by fault injection")                                          \
    X(fault_drop_bytes, "DATA payload bytes dropped by fault injection")                           \
    X(rx_overflows, "datagrams the kernel dropped: receive buffer full")                           \
    X(pcap_records, "packets written to the pcap file")                                            \
    X(icmp_unreach, "ICMP unreachable reports that failed a peer's RPCs at once")

typedef struct homa_driver_counters {
#define HOMA_DRIVER_COUNTER_FIELD(name, desc) uint64_t name;
    HOMA_DRIVER_COUNTER_LIST(HOMA_DRIVER_COUNTER_FIELD)
#undef HOMA_DRIVER_COUNTER_FIELD
} homa_driver_counters;

/* Snapshot of the engine counters and the driver counters summed over all
 * sockets the runtime ever had.  Either pointer may be NULL. */
HOMA_API void homa_runtime_counters(homa_runtime *rt, homa_counters *engine,
                                    homa_driver_counters *driver);
/* Replaces the runtime's injected faults from now on, on every socket it
 * has and will open (NULL or an all-zero spec = no faults); blackout
 * windows count from this call.  Packets already held back (delay,
 * reorder) still leave when due.  Thread-safe; for tests that change the
 * network's behaviour while RPCs are in flight (homa-perf soak).  Returns
 * 0, HOMA_ERR_INVAL (inconsistent spec) or HOMA_ERR_STATE (the driver
 * cannot change faults). */
HOMA_API int homa_runtime_set_faults(homa_runtime *rt, const homa_faults *faults);
/* The unscheduled priority cutoffs the runtime currently announces to the
 * hosts that send to it (homa_cutoffs in homa/engine.h: for each priority
 * level the longest message whose unscheduled bytes use it, and the
 * version, bumped at each change).  With adaptive cutoffs (the default)
 * they follow the lengths of the messages the runtime receives. */
HOMA_API void homa_runtime_cutoffs(homa_runtime *rt, homa_cutoffs *out);
/* Name and description of driver counter i (0-based, struct order); NULL past the end. */
HOMA_API const char *homa_driver_counter_name(size_t i);
HOMA_API const char *homa_driver_counter_desc(size_t i);
HOMA_API size_t homa_driver_counter_count(void);

/* ---------------------------------------------------------------------------
 * Sockets
 * ------------------------------------------------------------------------ */

/* Opens a socket on `port` of the wildcard address (IPv4 and IPv6); port 0
 * picks an ephemeral port.  rt NULL = the default runtime.  Errors:
 * HOMA_ERR_PORT_IN_USE, HOMA_ERR_LIMIT, HOMA_ERR_NOMEM, HOMA_ERR_IO;
 * HOMA_ERR_PERM with the raw IP driver and no CAP_NET_RAW. */
HOMA_API int homa_socket_open(homa_runtime *rt, uint16_t port, homa_socket **out);
/* Like homa_socket_open() bound to one local address (e.g. ::1 or
 * 127.0.0.1; all-zero addr = wildcard). */
HOMA_API int homa_socket_bind(homa_runtime *rt, const homa_endpoint *local, homa_socket **out);
/* Closes the socket: its RPCs are aborted, its unreleased messages freed
 * (data pointers become invalid), threads blocked in homa_recv() on it
 * return HOMA_ERR_SHUTDOWN.  The socket must not be used afterwards. */
HOMA_API void homa_socket_close(homa_socket *s);
/* Waits until every RPC of the socket is finished: its client RPCs
 * completed (and their responses released) and the replies it sent
 * acknowledged by their clients (the engine retransmits a lost reply only
 * while the socket is open).  Call it before homa_socket_close() when the
 * last thing a process does is answer a request.  Waits up to timeout_ns
 * (HOMA_FOREVER allowed).  Returns 0, HOMA_ERR_AGAIN (RPCs still live at
 * the deadline), HOMA_ERR_SHUTDOWN or HOMA_ERR_INVAL. */
HOMA_API int homa_socket_linger(homa_socket *s, int64_t timeout_ns);
/* Sets the socket's scheduling class, 0 (the default) to
 * HOMA_SCHED_CLASSES - 1 (3): its engine sends and grants every message of
 * a higher class before any of a lower one, SRPT within a class (the
 * socket's requests and their responses, and the requests it serves and
 * its replies; RPCs started before the call keep their class).  Embedded,
 * that orders this process's own sockets; through homad it orders every
 * process of the host, e.g. a training job's gradients before a
 * background service's shorter messages (docs/api.md, "Scheduling
 * classes").  Errors: HOMA_ERR_INVAL (class out of range), HOMA_ERR_PERM
 * (above homad's --max-class), HOMA_ERR_SHUTDOWN, HOMA_ERR_NO_PORT. */
HOMA_API int homa_socket_set_class(homa_socket *s, int sched_class);
/* The socket's port. */
HOMA_API uint16_t homa_socket_port(const homa_socket *s);
/* The socket's local endpoint (the bound address and port). */
HOMA_API void homa_socket_local(const homa_socket *s, homa_endpoint *out);
HOMA_API homa_runtime *homa_socket_runtime(const homa_socket *s);
/* A file descriptor for epoll/poll/select (an eventfd): readable when a
 * message may be waiting for homa_recv().  It stays readable until a
 * non-blocking homa_recv() on the socket returns HOMA_ERR_AGAIN, so call
 * homa_recv(..., HOMA_NONBLOCK, ...) until then.  Owned by the socket:
 * don't close or read it. */
HOMA_API int homa_socket_fd(homa_socket *s);

/* ---------------------------------------------------------------------------
 * RPCs
 * ------------------------------------------------------------------------ */

/* Timeouts for homa_recv() / homa_call(), in nanoseconds. */
#define HOMA_NONBLOCK ((int64_t)0)
#define HOMA_FOREVER ((int64_t)-1)

/* Sends a request of len bytes (copied) to dst.  cookie comes back in the
 * response's homa_msg.cookie.  *id (optional) gets the RPC id (even).  The
 * calling thread transmits the first packets itself before returning.
 * Errors: HOMA_ERR_MSGSIZE, HOMA_ERR_LIMIT, HOMA_ERR_NOMEM, HOMA_ERR_INVAL,
 * HOMA_ERR_SHUTDOWN. */
HOMA_API int homa_send(homa_socket *s, const homa_endpoint *dst, const void *buf, size_t len,
                       uint64_t cookie, uint64_t *id);

/* Zero-copy send: like homa_send, but libhoma takes ownership of buf, which
 * must come from malloc() (libhoma frees it with free() once sent and
 * acknowledged) or from homa_msg_take().  On error the caller keeps it. */
HOMA_API int homa_send_owned(homa_socket *s, const homa_endpoint *dst, void *buf, size_t len,
                             uint64_t cookie, uint64_t *id);

/* Flags of homa_sendx().  HOMA_SEND_OWNED: libhoma takes ownership of buf,
 * as homa_send_owned() does (without it buf is only read, as by
 * homa_send()).  HOMA_SEND_PRIO(lo, hi): the request's DATA packets, first
 * transmissions and retransmissions, use priority levels lo..hi only
 * (0 <= lo <= hi < the engine's num_priorities; 0 lowest, IP TOS = level
 * << 5); inside the range Homa's own choice stands.  A class of traffic
 * kept low (bulk transfers: 0..2) or pinned (lo = hi) this way lets the
 * network and the receivers' priority queues tell it apart. */
#define HOMA_SEND_OWNED 0x1u
#define HOMA_SEND_PRIO(lo, hi) (0x2u | ((unsigned)(lo)&0xfu) << 8 | ((unsigned)(hi)&0xfu) << 12)

/* homa_send() or homa_send_owned() with flags (above).  Errors: those of
 * homa_send(), and HOMA_ERR_INVAL for unknown flags or a bad range (nothing
 * was sent then; with HOMA_SEND_OWNED the caller keeps buf). */
HOMA_API int homa_sendx(homa_socket *s, const homa_endpoint *dst, void *buf, size_t len,
                        uint64_t cookie, unsigned flags, uint64_t *id);

/* Receives the next message on s matching flags (HOMA_RECV_REQUEST,
 * HOMA_RECV_RESPONSE or HOMA_RECV_ANY from homa/engine.h) or, if id is
 * non-zero, the response of that client RPC.  Waits up to timeout_ns
 * (HOMA_NONBLOCK, HOMA_FOREVER or a positive number of nanoseconds).
 *
 * Returns 0 with *msg filled: msg->data/length stay valid until
 * homa_release(s, msg), which must follow.  A request (msg->is_request = 1,
 * odd id) is answered with homa_reply(s, msg->id, ...).
 *
 * If a client RPC failed, returns its error (e.g. HOMA_ERR_TIMEOUT) with
 * msg->id, cookie, peer and error filled and no data; nothing to release
 * (homa_release is harmless).  Otherwise msg->id is 0 and the return value
 * is HOMA_ERR_AGAIN (nothing within the timeout), HOMA_ERR_NOT_FOUND (id
 * unknown), HOMA_ERR_SHUTDOWN (socket closing) or HOMA_ERR_INVAL. */
HOMA_API int homa_recv(homa_socket *s, unsigned flags, uint64_t id, int64_t timeout_ns,
                       homa_msg *msg);

/* Gives a received message back to the engine.  msg->handle is cleared, so
 * a second call is harmless. */
HOMA_API void homa_release(homa_socket *s, homa_msg *msg);

/* Replies to request `id` (odd) received on s; the reply (len bytes) is
 * copied.  Request ids are chosen by clients, so they are only unique per
 * client: the socket remembers the peer of every request homa_recv()
 * returned until it is answered or aborted.  If two unanswered requests
 * share an id this fails with HOMA_ERR_STATE: homa_reply_msg() and
 * homa_reply_to() are never ambiguous.  Errors: HOMA_ERR_NOT_FOUND,
 * HOMA_ERR_STATE (already replied, or ambiguous), HOMA_ERR_MSGSIZE,
 * HOMA_ERR_NOMEM, HOMA_ERR_SHUTDOWN. */
HOMA_API int homa_reply(homa_socket *s, uint64_t id, const void *buf, size_t len);
/* Replies to the request described by req (a homa_msg from homa_recv(); it
 * may already have been released). */
HOMA_API int homa_reply_msg(homa_socket *s, const homa_msg *req, const void *buf, size_t len);
/* Replies to request `id` from the client endpoint `peer`. */
HOMA_API int homa_reply_to(homa_socket *s, const homa_endpoint *peer, uint64_t id, const void *buf,
                           size_t len);
/* Zero-copy reply to req: libhoma takes ownership of buf (from malloc() or
 * homa_msg_take()); on error the caller keeps it. */
HOMA_API int homa_reply_msg_owned(homa_socket *s, const homa_msg *req, void *buf, size_t len);
/* Takes a received message's bytes without copying: returns a malloc()ed
 * buffer of msg->length bytes (at least 1) owned by the caller from now on
 * (free() it or pass it to homa_send_owned/homa_reply_msg_owned, e.g. to
 * echo a request) and clears msg->data.  The message must still be
 * released.  NULL if there is nothing to take. */
HOMA_API void *homa_msg_take(homa_socket *s, homa_msg *msg);

/* Aborts an RPC.  A client RPC (even id) is forgotten: it is never
 * returned by homa_recv (HOMA_ERR_STATE if its response was already
 * returned: release it instead).  A server RPC (odd id) is dropped from the
 * socket's unanswered requests; no reply is sent and the engine frees it
 * when the client gives up.  HOMA_ERR_NOT_FOUND if unknown. */
HOMA_API int homa_abort(homa_socket *s, uint64_t id);

/* Convenience: send a request and wait for its response (homa_send +
 * homa_recv by id).  On timeout the RPC is aborted and HOMA_ERR_AGAIN is
 * returned; RPC failures return their error.  On 0, release *resp. */
HOMA_API int homa_call(homa_socket *s, const homa_endpoint *dst, const void *req, size_t len,
                       int64_t timeout_ns, homa_msg *resp);

/* The peer of a received message as an endpoint. */
static inline void homa_msg_peer(const homa_msg *msg, homa_endpoint *out)
{
    out->addr = msg->peer;
    out->port = msg->peer_port;
}

#ifdef __cplusplus
}
#endif
#endif
