/* The I/O driver interface between the runtime (src/rt) and the network.
 *
 * A driver socket carries the packets of one Homa port: over UDP (udp.c)
 * the engine's wire bytes are the UDP payload and the UDP port is the Homa
 * port; over raw IP (raw.c) they are the IP payload of protocol 146.  The
 * runtime talks to drivers only through homa_io_ops, so a test or a
 * different transport can be slotted in.  What both drivers share lives
 * beside them: common.h (address helpers, buffer sizing, the garbage
 * filter), errqueue.h (ICMP errors from MSG_ERRQUEUE) and faultq.h (packets
 * held back by fault injection).  A driver owns all of its buffers: packets
 * handed to send() are not referenced after it returns, and packets
 * returned by recv() stay valid until the next recv() on the same socket.
 *
 * Threading: send()/flush() may run concurrently with recv() on the same
 * socket (they use separate buffers), but send() must not run concurrently
 * with send() or flush(), nor recv() with recv().  Counters may be read at
 * any time. */
#ifndef HOMA_IO_IO_H
#define HOMA_IO_IO_H

#include <stdint.h>

#include <homa/engine.h>
#include <homa/homa.h>

typedef struct homa_io_sock homa_io_sock;
typedef struct homa_pcap homa_pcap;

/* A packet received by a driver. */
typedef struct homa_io_rx {
    homa_addr src;  /* sender address (IPv6 or IPv4-mapped) */
    uint16_t sport; /* sender UDP port */
    uint8_t tos;    /* IP TOS / traffic class it arrived with */
    /* 1: a DATA packet whose payload went where place() said; data holds
     * only its header (HOMA_IO_PLACED_HDR bytes) and len is the length read
     * (0 if the read failed).  The caller must finish the placement. */
    uint8_t placed;
    /* 1: not a packet but an ICMP "unreachable" report for the peer src;
     * sport is the Homa port it named (port unreachable) or 0 (the whole
     * host: no Homa there, host unreachable).  len 0, data NULL. */
    uint8_t unreach;
    uint32_t len;        /* Homa packet length */
    const uint8_t *data; /* Homa packet bytes */
    uint64_t arrived;    /* when it reached the host (monotonic ns); 0 = unknown */
} homa_io_rx;

#define HOMA_IO_PLACED_HDR 56 /* the DATA header */

/* Direct receive (homa_engine_place_begin): asked by recv() with the first
 * hdr_len bytes of a datagram of pkt_len bytes; returns where its payload
 * (bytes hdr_len.. of the packet) should be written, or NULL to read it
 * normally.  Called without any driver lock held; the driver asks only for
 * the first packet of a batch, so at most one placement is pending. */
typedef uint8_t *(*homa_io_place_fn)(void *ctx, uint64_t now, const homa_addr *src,
                                     const uint8_t *hdr, uint32_t hdr_len, uint32_t pkt_len);

/* Flags for homa_io_opts.flags (same values as HOMA_RT_NO_GSO/NO_GRO). */
#define HOMA_IO_NO_GSO 2u
#define HOMA_IO_NO_GRO 4u

typedef struct homa_io_opts {
    unsigned flags;
    const homa_faults *faults; /* NULL or all zero = none */
    /* Separates the fault streams of sockets sharing one seed; derived from
     * the socket's creation order (not its port, which may be ephemeral) so
     * a seeded run is reproducible. */
    uint64_t fault_salt;
    homa_pcap *pcap; /* shared capture file, or NULL */
    uint32_t rcvbuf; /* socket buffer sizes; 0 = driver default */
    uint32_t sndbuf;
    homa_io_place_fn place; /* NULL = never receive in place */
    void *place_ctx;
} homa_io_opts;

typedef struct homa_io_ops {
    const char *name;
    /* Opens a socket bound to local (port 0 = ephemeral).  Returns 0,
     * HOMA_ERR_PORT_IN_USE, HOMA_ERR_NOMEM, HOMA_ERR_IO. */
    int (*open)(const homa_endpoint *local, const homa_io_opts *opts, homa_io_sock **out);
    void (*close)(homa_io_sock *s);
    /* A descriptor that becomes readable when recv() may return packets. */
    int (*fd)(const homa_io_sock *s);
    /* The bound endpoint (with the actual port). */
    void (*local)(const homa_io_sock *s, homa_endpoint *out);
    /* Transmits n packets (all with sport = this socket's port).  Returns
     * the number handed to the kernel or dropped on purpose (n unless the
     * socket is broken), or a negative HOMA_ERR_*.  Packets the kernel
     * refuses are counted in send_errors and skipped: Homa recovers lost
     * packets anyway. */
    int (*send)(homa_io_sock *s, uint64_t now, const homa_pkt_out *pkts, int n);
    /* Sends packets held back by fault injection whose time has come. */
    void (*flush)(homa_io_sock *s, uint64_t now);
    /* Returns up to max received packets without blocking (0 = none). */
    int (*recv)(homa_io_sock *s, uint64_t now, homa_io_rx *out, int max);
    /* When flush()/recv() must run again for held packets; UINT64_MAX if none. */
    uint64_t (*next_deadline)(const homa_io_sock *s);
    /* Adds this socket's counters to *sum. */
    void (*counters)(const homa_io_sock *s, homa_driver_counters *sum);
    /* Replaces the injected faults (NULL = none) from now on; blackout
     * windows count from `now`.  May be called from any thread at any time:
     * the sender and the receiver take the change at their next call.
     * Optional (NULL: the driver cannot change faults once open). */
    void (*set_faults)(homa_io_sock *s, const homa_faults *f, uint64_t now);
} homa_io_ops;

/* The UDP driver (dual-stack AF_INET6 socket, sendmmsg/recvmmsg, GSO/GRO,
 * TOS per packet). */
extern const homa_io_ops homa_udp_ops;

/* The raw IP driver (raw.c): Homa directly over IP protocol 146, as the
 * Linux module sends it; needs CAP_NET_RAW (open fails with HOMA_ERR_PERM). */
extern const homa_io_ops homa_raw_ops;

#define HOMA_IPPROTO 146    /* IANA protocol number of Homa */
#define HOMA_RAW_FLAGS 0x06 /* the kernel's TCP look-alike flags byte */
#define HOMA_RAW_URGENT 0xb97d

/* 1 if this process may open raw protocol-146 sockets. */
int homa_raw_supported(void);
/* The folded (not complemented) one's-complement sum of the TCP-style
 * pseudo-header the kernel uses for Homa: addresses, protocol 6, length. */
uint16_t homa_raw_pseudo_sum(const homa_addr *src, const homa_addr *dst, uint32_t len);
/* The checksum the kernel puts in a Homa packet (header's checksum bytes
 * counted as zero).  A packet is intact if the field equals this. */
uint16_t homa_raw_checksum(const homa_addr *src, const homa_addr *dst, const uint8_t *hdr,
                           size_t hdr_len, const uint8_t *payload, size_t payload_len);
/* Validates the IPv4 header a raw socket delivers in front of the Homa
 * bytes: version 4, IHL 5..15 within len, total length == len.  Returns 0
 * with its length (and TOS, addresses; each optional) or -1. */
int homa_raw_strip_ipv4(const uint8_t *d, size_t len, size_t *hdr_len, uint8_t *tos, homa_addr *src,
                        homa_addr *dst);
/* Run-time capability probes (cached).  1 if the kernel supports it. */
int homa_udp_gso_supported(void);
int homa_udp_gro_supported(void);

/* Driver-private hook for tests: 1 if socket s currently uses GSO / GRO. */
int homa_udp_uses_gso(const homa_io_sock *s);
int homa_udp_uses_gro(const homa_io_sock *s);

/* --- fault injection (faults.c) --- */

enum homa_fault_action {
    HOMA_FAULT_PASS = 0,
    HOMA_FAULT_DROP,
    HOMA_FAULT_DUP,
    HOMA_FAULT_REORDER,
    HOMA_FAULT_DELAY,
};

typedef struct homa_fault_state {
    homa_faults cfg;
    uint64_t rng;
    int active;      /* 0: decide() always passes (fast path) */
    int bad;         /* Gilbert-Elliott chain in its bad (losing) state */
    double p_bad;    /* good -> bad per eligible packet */
    double p_good;   /* bad -> good per eligible packet: 1 / burst */
    uint64_t origin; /* blackout windows count from here (ns, caller's clock) */
    /* Drops by cause (for tests; the driver counts them all in fault_drops). */
    uint64_t drops_blackout, drops_class, drops_random;
} homa_fault_state;

/* Prepares the injector for one direction (HOMA_FAULT_TX or _RX); salt
 * separates the random streams of different sockets and directions;
 * origin_ns is "the socket opened" on the clock later passed to decide(). */
void homa_fault_init(homa_fault_state *st, const homa_faults *f, unsigned dir, uint64_t salt,
                     uint64_t origin_ns);
/* Decides the fate of one packet (its Homa bytes, for per-type loss) at
 * time now (ns).  For HOMA_FAULT_DELAY and _REORDER, *hold_ns gets how long
 * to hold it (delay_us +- jitter_us) and *wait how many later packets a
 * reordered one waits for. */
int homa_fault_decide(homa_fault_state *st, uint64_t now, const uint8_t *pkt, size_t len,
                      uint64_t *hold_ns, uint32_t *wait);
/* The Gilbert-Elliott transition probabilities for a long-run loss rate
 * drop and mean burst length burst; -1 if no chain has them. */
int homa_fault_ge_params(double drop, double burst, double *p_bad, double *p_good);

/* --- packet capture (pcap.c) --- */

/* Opens (truncates) a pcap file, LINKTYPE_RAW, nanosecond timestamps.
 * Returns 0, HOMA_ERR_IO. */
int homa_pcap_open(const char *path, homa_pcap **out);
void homa_pcap_close(homa_pcap *p);
/* Appends one UDP datagram whose payload is a[0..alen) + b[0..blen), with a
 * synthesized IPv4 (if dst is IPv4-mapped) or IPv6 header carrying tos.
 * Thread-safe. */
void homa_pcap_write(homa_pcap *p, const homa_addr *src, uint16_t sport, const homa_addr *dst,
                     uint16_t dport, uint8_t tos, const uint8_t *a, size_t alen, const uint8_t *b,
                     size_t blen);
/* The source address the kernel would use toward dst (for captures of
 * packets sent from a wildcard-bound socket); cached.  Thread-safe. */
void homa_pcap_source_for(homa_pcap *p, const homa_addr *dst, homa_addr *src);
void homa_pcap_flush(homa_pcap *p);
/* Appends one IP protocol-146 packet (raw driver): IPv4 or IPv6 header
 * with tos, then a[0..alen) + b[0..blen).  Thread-safe. */
void homa_pcap_write_ip(homa_pcap *p, const homa_addr *src, const homa_addr *dst, uint8_t tos,
                        const uint8_t *a, size_t alen, const uint8_t *b, size_t blen);

#endif
